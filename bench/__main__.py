"""Run the benchmark suite: python -m bench [--quick] [--only start,cell,...] [--out DIR]

Each benchmark compares against its baseline measured in the same run; the table shows
min/median/max over repeats; results go to DIR/results.json and DIR/results.png. With --only, the
rows of the benchmarks not run again stay as an earlier full run measured them, with their date.
"""
import argparse
import importlib
import json
import os
import platform
import sys
import time

import psutil

from bench.common import QUIET

SUITE = ["log_cost", "start", "training", "sharded", "history", "kernel_memory", "dashboard_scale", "hosts", "frameworks",
         "lessons"]


def machine():
    from importlib.metadata import version  # not `import torch`: 2 s of CPU to read a version

    return {"cores": len(os.sched_getaffinity(0)), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "torch": version("torch"), "ipyparallel": version("ipyparallel"),
            "date": time.strftime("%Y-%m-%d")}


def fmt(x, unit):
    return f"{x:.2f}" if unit in ("x", "efficiency", "core") else f"{x:.0f}" if unit == "MiB" else f"{x:.3g}"


def quiet_note(r):
    """What a row says of the runs the host took CPU from (bench.common.compared), or ""."""
    d = r.get("details", {})
    if d.get("quiet") is False:
        return f"no run was quiet: the host took over {QUIET:.0%} of the CPU in every one"
    if d.get("left_out"):
        return f"{d['left_out']} of {len(d['every_ratio'])} left out: the host took over {QUIET:.0%} of the CPU in them"
    return ""


def interval_note(r):
    """What a row says when its median's 90 % interval (bench.common.median_interval) holds its target, or ""."""
    low, high = r.get("interval") or (None, None)
    if low is None or not low <= r["target"][1] <= high:
        return ""
    return (f"the median's 90 % interval, {fmt(low, r['unit'])}-{fmt(high, r['unit'])}, holds the target: "
            "within what these runs can tell")


def table(results):
    lines = [f"{'benchmark':<20} {'min':>7} {'median':>7} {'max':>7} {'unit':<10} {'target':<8} met  what"]
    for r in results:
        target = f"{r['target'][0]} {r['target'][1]:g}" if r["target"] else ""
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        lines.append(f"{r['name']:<20} {fmt(r['min'], r['unit']):>7} {fmt(r['median'], r['unit']):>7} "
                     f"{fmt(r['max'], r['unit']):>7} {r['unit']:<10} {target:<8} {met:<4} {r['what']}")
        d = r["details"]
        for note in (quiet_note(r), interval_note(r)):
            if note:
                lines.append(f"{'':<20}   {note}")
        if r["name"] == "scaling":
            for n, eff in zip(d["sizes"], r["values"]):
                rate = d["samples_per_s"][str(n)] if str(n) in d["samples_per_s"] else d["samples_per_s"][n]
                lines.append(f"{'':<20}   N={n}: {rate:.0f} samples/s, efficiency {eff:.2f}")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [r for r in results if r["unit"] == "x"]
    scaling = next((r for r in results if r["name"] == "scaling"), None)
    fig, axes = plt.subplots(1, 2 if scaling else 1, figsize=(12 if scaling else 7, 4), squeeze=False)
    ax = axes[0][0]
    names = [r["name"] for r in ratios]
    med = [r["median"] for r in ratios]
    err = [[m - r["min"] for m, r in zip(med, ratios)], [r["max"] - m for m, r in zip(med, ratios)]]
    colors = [{True: "#2ca02c", False: "#d62728", None: "#999999"}[r["met"]] for r in ratios]
    bars = ax.barh(names, med, xerr=err, color=colors, alpha=0.8)
    for bar, r in zip(bars, ratios):
        if interval_note(r):  # its target inside the median's 90 % interval: hatched
            bar.set_hatch("//")
    for i, r in enumerate(ratios):
        if r["target"]:
            ax.plot([r["target"][1]] * 2, [i - 0.4, i + 0.4], color="black", lw=2)
    ax.set_xlabel("ratio against the baseline (median, min-max); black: target; hatched: within the noise")
    ax.invert_yaxis()
    if scaling:
        ax2 = axes[0][1]
        d = scaling["details"]
        rates = [d["samples_per_s"][str(n)] if str(n) in d["samples_per_s"] else d["samples_per_s"][n] for n in d["sizes"]]
        ax2.plot(d["sizes"], rates, "o-", label="N ranks (DDP)")
        ax2.axhline(d["single_process"], color="gray", ls="--", label="one process, all cores")
        ax2.set_xscale("log", base=2)
        ax2.set_xticks(d["sizes"], [str(n) for n in d["sizes"]])
        ax2.set_xlabel("ranks")
        ax2.set_ylabel("samples/s")
        ax2.set_ylim(0)
        ax2.legend()
        ax2.set_title("scaling")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def order(result):
    """Results in the suite's order (a benchmark's rows as it wrote them)."""
    return SUITE.index(result.get("suite", SUITE[0]))


def kept(path, results, quick):
    """The rows of an earlier full run in `path` that this run (--only some) did not measure again, each
    keeping the date it was measured on; none after a quick run or when either run was quick."""
    try:
        with open(path) as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        return []
    if quick or earlier.get("quick"):
        return []
    fresh = {r["suite"] for r in results}
    return [{"date": earlier["machine"]["date"], **r} for r in earlier["results"] if r.get("suite") not in fresh]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the suite runs (the tests use it)")
    p.add_argument("--only", default=",".join(SUITE), help=f"comma-separated, from {','.join(SUITE)}")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SUITE]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}: choose from {', '.join(SUITE)}")
    results = []
    for name in chosen:
        tic = time.perf_counter()
        print(f"== {name} ...", flush=True)
        results.extend({**r, "suite": name} for r in importlib.import_module(f"bench.{name}").run(quick=args.quick))
        print(f"   {time.perf_counter() - tic:.0f} s", flush=True)
    print()
    print(table(results))
    os.makedirs(args.out, exist_ok=True)
    today = machine()
    for r in results:
        r["date"] = today["date"]
    results = kept(os.path.join(args.out, "results.json"), results, args.quick) + results
    report = {"machine": today, "quick": args.quick, "results": sorted(results, key=order)}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(report, f, indent=1)
    plot(results, os.path.join(args.out, "results.png"))
    print(f"\nwrote {os.path.join(args.out, 'results.json')} and results.png")
    if args.quick:
        return 0  # tiny sizes say nothing about the targets
    return 0 if all(r["met"] is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
