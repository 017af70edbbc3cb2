"""Training throughput (the MLP 784-512-512-10, batch 64 per rank, DDP, ddplab.log each step).

In a fresh kernel, with no pause after %ddp_start: the first training run (just started; three
fresh kernels) and the later ones (settled) with the live dashboard, against the same loop as a
torchrun script with one thread per rank (>= 0.98x) and with every rank using all cores, torch's
default outside torchrun (>= 2.5x); the dashboard on against off; ddplab.log() on every step against no log
(>= 0.99x: logging costs under 1%). Scaling over N ranks against one process on all cores.
"""
import json
import statistics

from .common import in_kernel, python, ratios, result
from ddplab.system import cores

SETUP = """\
%load_ext ddplab
%ddp_start {n}
import ddplab, json, time
_lab = ddplab._magics[id(get_ipython())].lab
_dashboard = _lab.view
"""
TRAIN = "%%ddp\nfrom ddplab.workloads import train_ddp\nsummary = train_ddp(steps={steps}, log={log})"
BEFORE = "_lab.view = {view}\n_c0, _w0 = time.process_time(), time.perf_counter()"
AFTER = ("_cpu = (time.process_time() - _c0) / (time.perf_counter() - _w0)\n"
         "print('BENCH ' + json.dumps([sum(s['samples_per_s'] for s in _lab.gather('summary')), _cpu]))")


def in_notebook(n, steps, modes):
    """samples/s and kernel CPU share for each mode, in order: "on" (dashboard), "off" (no view),
    "nolog" (dashboard, no ddplab.log calls). The first runs right after the pool is ready."""
    cells = [SETUP.format(n=n)]
    for mode in modes:
        view = "_dashboard" if mode != "off" else "None"
        cells += [BEFORE.format(view=view), TRAIN.format(steps=steps, log=mode != "nolog"), AFTER]
    cells.append("%ddp_stop")
    return in_kernel(cells)


def torchrun(n, steps, threads):
    out = python("-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "bench/ddp_script.py",
                 f"--steps={steps}", f"--threads={threads}", env={"OMP_NUM_THREADS": str(threads)})
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


def run(quick=False):
    n, steps, repeats, sizes = (2, 20, 1, (1,)) if quick else (4, 1000, 3, (1, 2, 4, 8))
    modes = ["on", "off", "nolog"] if quick else ["on", "off", "nolog", "on", "nolog", "off", "off", "on", "nolog", "on"]
    runs = in_notebook(n, steps, modes)
    by = {mode: [r[0] for x, r in zip(modes, runs) if x == mode] for mode in set(modes)}
    cpu = {mode: statistics.median(r[1] for x, r in zip(modes, runs) if x == mode) for mode in set(modes)}
    firsts, settled_on = [runs[0][0]], by["on"][1:] or by["on"]
    one_thread = []
    for i in range(repeats):  # torchrun between fresh kernels' first runs: this VM's speed drifts over minutes
        one_thread.append(torchrun(n, steps, 1))
        if i < repeats - 1:
            firsts.append(in_notebook(n, steps, ["on"])[0][0])
    all_cores = [torchrun(n, steps, cores()) for _ in range(repeats)]
    base = single_process(steps, cores())
    rates = scaling(sizes, steps)
    tr, tr_all = statistics.median(one_thread), statistics.median(all_cores)
    return [
        result("train_first_vs_torchrun", f"the first %%ddp training right after %ddp_start {n}, dashboard on / "
               "torchrun, 1 thread per rank (each in a fresh kernel)", [f / tr for f in firsts], target=(">=", 0.98),
               ddplab=firsts, torchrun=one_thread),
        result("train_vs_torchrun", f"%%ddp training, {n} ranks, dashboard on, later runs / torchrun, 1 thread per "
               "rank", [x / tr for x in settled_on], target=(">=", 0.98), ddplab=settled_on, torchrun=one_thread),
        result("train_vs_all_cores", f"%%ddp training, {n} ranks, dashboard on / torchrun, every rank using all "
               f"{cores()} cores", [x / tr_all for x in by["on"]], target=(">=", 2.5), torchrun_all_cores=all_cores),
        result("dashboard_on_off", f"%%ddp training, {n} ranks: dashboard on / off (same kernel)",
               ratios(by["on"], by["off"]), target=(">=", 0.98), kernel_cpu_on=cpu["on"], kernel_cpu_off=cpu["off"]),
        result("log_overhead", f"%%ddp training, {n} ranks: ddplab.log() every step / no log (same kernel)",
               ratios(by["on"], by["nolog"]), target=(">=", 0.99)),
        result("scaling", f"samples/s of N ranks / one process using all {cores()} cores "
               f"({base:.0f} samples/s); N = {', '.join(map(str, sizes))}",
               [rates[n] / base for n in sizes], unit="efficiency", samples_per_s=rates,
               single_process=base, sizes=list(sizes)),
    ]
