"""Training throughput (the MLP 784-512-512-10, batch 64 per rank, DDP, ddplab.log each step).

With no pause after %ddp_start: in each of five fresh kernels, the first training run (just
started), then two more, with the live dashboard, against torchrun runs of the same loop, one
thread per rank (>= 0.99x). torchrun's ranks wait beside the kernel, stopped, and run once before
%ddp_start and once after each of the kernel's runs (T K T K ... T; bench.common.Torchrun): each
run of the kernel (the first, the next two, and one after %ddp_timeline --off) is compared with
the mean of the torchrun runs just before and just after it, seconds away. Against every
rank using all cores, torch's default outside torchrun (>= 2.5x). In one more kernel, after its
first run, 16 pairs of adjacent 300-step runs for each comparison: the dashboard on against off
(>= 0.98x), ddplab.log() on every step against no log (>= 0.99x: logging costs under 1%), the
timeline recorded against not (>= 0.98x). Scaling over N ranks against one process on all cores.
Every run records the share of the machine's CPU the host took during it: a ratio counts for its
target only when that share was at most 1% in each of its runs (bench.common.compared).
"""
import json
import statistics

from ddplab.shared.config import cores

from .common import against_around, compared, in_kernel, more_kernels, python, result

SETUP = """\
%load_ext ddplab
%ddp_start {n}
import ddplab, json, time
from bench.common import cpu_ticks, stolen
_lab = ddplab._magics[id(get_ipython())].lab
_dashboard = _lab.view
"""
TRAIN = "%%ddp\nfrom ddplab.workloads import train_{workload}\nsummary = train_{workload}(steps={steps}, log={log})"
TORCHRUN = "import json\nfrom bench.common import Torchrun, cpu_ticks, stolen\n_torchrun = Torchrun({n})"
RUN_TORCHRUN = ("_s0 = cpu_ticks()\n_rate = _torchrun.run('{workload}', {steps})\n"
                "print('BENCH ' + json.dumps([_rate, None, stolen(_s0)]))")
BEFORE = ("_lab.view = {view}\n_lab.records.record({timeline})\ntime.sleep(0.3)  # (the ranks hear it within a tick)\n"
          "_c0, _w0, _s0 = time.process_time(), time.perf_counter(), cpu_ticks()")
AFTER = ("_cpu = (time.process_time() - _c0) / (time.perf_counter() - _w0)\n"
         "print('BENCH ' + json.dumps([sum(s['samples_per_s'] for s in _lab.gather('summary')), _cpu, stolen(_s0)]))")


def in_notebook(n, steps, modes, beside=None):
    """samples/s and kernel CPU share for each mode, in order: "on" (dashboard and timeline), "off" (no
    view), "nolog" (no ddplab.log calls), "notl" (no timeline recorded). The first runs right after the
    pool is ready. beside="ddp" (or "fsdp", "tp"): torchrun's ranks wait beside the pool (bench.common.
    Torchrun, stopped between their runs) and run the same loop once before %ddp_start and once after
    each of the kernel's runs: returns (the kernel's runs, torchrun's samples/s), T K T K ... T."""
    cells = [SETUP.format(n=n)]
    if beside:
        cells = [TORCHRUN.format(n=n), RUN_TORCHRUN.format(workload=beside, steps=steps), *cells]
    for i, mode in enumerate(modes):
        view = "_dashboard" if mode != "off" else "None"
        before = BEFORE.format(view=view, timeline=mode != "notl")
        if i == 0:  # the first run: right after %ddp_start, nothing in between
            before = before.replace("time.sleep(0.3)", "pass")
        cells += [before, TRAIN.format(workload=beside or "ddp", steps=steps, log=mode != "nolog"), AFTER]
        if beside:
            cells.append(RUN_TORCHRUN.format(workload=beside, steps=steps))
    cells.append("%ddp_stop")
    if beside:
        cells.append("_torchrun.close()")
    found = in_kernel(cells)
    if not beside:
        return found
    return found[1::2], found[0::2]  # (T K T K ... T)


def torchrun(n, steps, threads, workload="ddp"):
    out = python("-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "bench/ddp_script.py",
                 f"--steps={steps}", f"--threads={threads}", f"--workload={workload}",
                 env={"OMP_NUM_THREADS": str(threads)})
    return next(json.loads(line[6:]) for line in out.splitlines() if line.startswith("BENCH "))


def single_process(steps, threads):
    """One process, no DDP, `threads` torch threads: the baseline for scaling."""
    code = ("import torch, time, json\n"
            f"torch.set_num_threads({threads})\n"
            "from ddplab.workloads import synthetic_classification, mlp\n"
            "x, y = synthetic_classification().tensors\n"
            "m = mlp(); opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)\n"
            "loss_fn = torch.nn.CrossEntropyLoss()\n"
            "def step(i):\n"
            "    lo = (i * 64) % 8192\n"
            "    opt.zero_grad(); loss_fn(m(x[lo:lo + 64]), y[lo:lo + 64]).backward(); opt.step()\n"
            "for i in range(20): step(i)\n"
            f"t = time.perf_counter()\nfor i in range({steps}): step(i)\n"
            f"print('BENCH ' + json.dumps({steps} * 64 / (time.perf_counter() - t)))\n")
    out = python("-c", code)
    return next(json.loads(line[6:]) for line in out.splitlines() if line.startswith("BENCH "))


def scaling(sizes, steps):
    from ddplab import Lab

    rates = {}
    for n in sizes:
        with Lab(n) as lab:
            lab.run(f"from ddplab.workloads import train_ddp\nsummary = train_ddp(steps={steps})")
            rates[n] = sum(s["samples_per_s"] for s in lab.gather("summary"))
    return rates


def paired(runs, modes, a, b):
    """(a / b, the larger share stolen) for each adjacent pair of runs (a then b, or b then a): this VM's
    speed drifts over minutes, so a run is compared with its neighbour, not with runs far from it."""
    return [(runs[i][0] / runs[i + 1][0] if modes[i] == a else runs[i + 1][0] / runs[i][0],
             max(runs[i][2], runs[i + 1][2]))
            for i in range(1, len(modes), 2) if {modes[i], modes[i + 1]} == {a, b}]


def run(quick=False):
    n, steps, repeats, sizes = (2, 20, 1, (1,)) if quick else (4, 1000, 5, (1, 2, 4, 8))
    # one kernel: short runs in adjacent pairs, in alternating order (a 1% difference is below what
    # one pair of 1000-step runs resolves here); its first run (just started: train_first's figure)
    # is in no pair
    # 16 pairs per comparison: one pair spreads +-4% here, and the targets are 1-2%
    short, k = (20, 1) if quick else (300, 8)
    pairs = [("on", "off"), ("off", "on"), ("on", "nolog"), ("nolog", "on"), ("on", "notl"), ("notl", "on")] * k
    modes = ["on", *(m for pair in pairs for m in pair)]
    runs = in_notebook(n, short, modes)
    cpu = {mode: statistics.median(r[1] for x, r in zip(modes[1:], runs[1:]) if x == mode) for mode in set(modes)}
    # fresh kernels, torchrun's ranks waiting beside each: T, %ddp_start, the first run, T, two more, T
    # after each, and one after %ddp_timeline --off, T. Each run against the mean of the T runs just
    # before and after it, seconds away (a fresh torchrun per run, minutes away, drifted as much as
    # the 1% we look for)
    firsts, laters, untimed, lab, alone = [], [], [], [], []  # (ratio, share stolen); samples/s
    while more_kernels(lab, laters, repeats, quick):
        kernel, baseline = in_notebook(n, steps, ["on", "on", "on", "notl"], beside="ddp")
        each = against_around(kernel, baseline)  # (more kernels while the host takes too much)
        firsts.append(each[0])
        laters += each[1:3]
        untimed.append(each[3])
        lab.append([r[0] for r in kernel])
        alone.append([r[0] for r in baseline])
    all_cores = torchrun(n, steps, cores())  # one run: the target is far below what it measures
    base = single_process(steps, cores())
    rates = scaling(sizes, steps)
    return [
        compared("train_first_vs_torchrun", f"the first %%ddp training right after %ddp_start {n}, dashboard on / "
                 "the torchrun runs just before %ddp_start and just after it (their mean), 1 thread per rank",
                 firsts, target=(">=", 0.99), ddplab=lab, torchrun=alone),
        compared("train_vs_torchrun", f"the second and third %%ddp trainings in those kernels, {n} ranks, dashboard on "
                 "/ the torchrun runs around it (their mean), 1 thread per rank", laters, target=(">=", 0.99)),
        compared("train_untimed_vs_torchrun", f"a third %%ddp training in those kernels after %ddp_timeline --off, "
                 f"{n} ranks, dashboard on / the torchrun runs around it (what the lab costs without "
                 "the timeline's hooks)", untimed),
        result("train_vs_all_cores", f"those second and third %%ddp trainings, {n} ranks, dashboard on / torchrun, "
               f"every rank using all {cores()} cores", [x / all_cores for r in lab for x in r[1:3]], target=(">=", 2.5),
               torchrun_all_cores=all_cores),
        compared("dashboard_on_off", f"%%ddp training, {n} ranks: dashboard on / off (same kernel, adjacent "
                 f"runs of {short} steps)", paired(runs, modes, "on", "off"), target=(">=", 0.98),
                 kernel_cpu_on=cpu["on"], kernel_cpu_off=cpu["off"]),
        compared("log_overhead", f"%%ddp training, {n} ranks: ddplab.log() every step / no log (same kernel, "
                 f"adjacent runs of {short} steps)", paired(runs, modes, "on", "nolog"), target=(">=", 0.99)),
        compared("timeline_on_off", f"%%ddp training, {n} ranks: the timeline recorded / %ddp_timeline --off, its "
                 f"hooks out (same kernel, adjacent runs of {short} steps)", paired(runs, modes, "on", "notl"),
                 target=(">=", 0.98)),
        result("scaling", f"samples/s of N ranks / one process using all {cores()} cores "
               f"({base:.0f} samples/s); N = {', '.join(map(str, sizes))}",
               [rates[n] / base for n in sizes], unit="efficiency", samples_per_s=rates,
               single_process=base, sizes=list(sizes)),
    ]
