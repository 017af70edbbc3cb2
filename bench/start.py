"""Start, first cells, restart and stop: what a learner pays from `%ddp_start 4` on, against bare
ipyparallel doing the same work, each measured the moment it can be (no pause, no warm-up).

ddplab, in a fresh kernel (nbclient), in this order:
- cold: `%load_ext ddplab` and at once `%ddp_start 4` + one DDP training step (the zygote imports
  torch while the pool starts: what Run All pays in a new kernel); the ranks' CPU use in the 2 s after;
- warm: `%ddp_stop`, then `%ddp_start 4` + one DDP step again (the zygote is warm: every later
  start in the notebook's kernel), `%ddp_restart --all`, `%ddp_restart` of one lost rank, `%ddp_stop`.
bare, also in a fresh kernel: `import ipyparallel`, `Cluster(n=4).start_and_connect_sync()` + `import
torch` + a FileStore process group + the same step (1 thread per rank); 10 `view.execute("x = 1")` at
once. Then, in that kernel beside its pool, the cells are paired: `%load_ext
ddplab`, `%ddp_start 4` + the step, and right after ready the first 10 trivial `%%ddp` cells, each
beside a `view.execute` on the bare pool (the order alternating round by round); after 3 s idle, 30
rounds of a `%%ddp` cell, a `view.execute` on the lab's own engines and one on the bare pool. Cells of
~15 ms spread by +-30 % from kernel to kernel here (the host's scheduling of 10 processes on 2 cores):
a cell and its baseline a moment apart see the same machine, where two kernels a minute apart do not.
"""
import os
import shutil
import tempfile

from .common import in_kernel, ratios, result

STEP = ("from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "m = DDP(torch.nn.Linear(64, 64))\nm(torch.randn(8, 64)).sum().backward()")
CELLS = """\
import json, time, psutil
_ip = get_ipython()
def _ddp_start_and_step():
    t = time.perf_counter()
    _ip.run_line_magic("ddp_start", "{n}")
    ready = time.perf_counter() - t
    _ip.run_cell_magic("ddp", "", {step!r})
    return ready, time.perf_counter() - t
def _rank_cpu(seconds):
    procs = [psutil.Process(r["pid"]) for r in ddplab._magics[id(_ip)].lab.status()]
    before = sum(sum(p.cpu_times()[:2]) for p in procs)
    time.sleep(seconds)
    return (sum(sum(p.cpu_times()[:2]) for p in procs) - before) / seconds  # cores used, all ranks
"""
COLD = """\
import time
_t0 = time.perf_counter()
%load_ext ddplab
import ddplab
{cells}
_cold_ready, _cold = _ddp_start_and_step()
_cold = time.perf_counter() - _t0  # from %load_ext on
_cpu = _rank_cpu(2.0)
"""
REST = """\
_ip.run_line_magic("ddp_stop", "")
_warm_ready, _warm = _ddp_start_and_step()
t = time.perf_counter(); _ip.run_line_magic("ddp_restart", "--all"); _restart_all = time.perf_counter() - t
_ip.run_line_magic("ddp_fault", "kill {last}")
t = time.perf_counter(); _ip.run_line_magic("ddp_restart", ""); _restart_one = time.perf_counter() - t
t = time.perf_counter(); _ip.run_line_magic("ddp_stop", ""); _stop = time.perf_counter() - t
print("BENCH " + json.dumps(dict(cold=_cold, cold_ready=_cold_ready, warm=_warm, warm_ready=_warm_ready,
      cpu=_cpu, restart_all=_restart_all, restart_one=_restart_one, stop=_stop)))
"""


def ddplab_session(n):
    cells = [COLD.format(cells=CELLS.format(n=n, step=STEP)), REST.format(last=n - 1)]
    return in_kernel(cells)[0]


BARE = """\
import os, time, json, datetime, shutil, tempfile
_tic = time.perf_counter()
import ipyparallel as ipp  # what the notebook imports on this path (ddplab's side times %load_ext)
_profile = tempfile.mkdtemp(prefix="bench-ipp-")
_cluster = ipp.Cluster(n={n}, profile_dir=_profile, log_level=40)
_client = _cluster.start_and_connect_sync()
_view = _client[:]
for _r, _eid in enumerate(_client.ids):
    _client[_eid].execute(f"import os; os.environ['R'] = '{{_r}}'", block=True)
_view.execute({step!r}, block=True)
_first_step = time.perf_counter() - _tic
_just = []  # its own first cells right after its ready (context: the paired rounds below are the figures)
for _ in range({k}):
    t = time.perf_counter(); _view.execute("x = 1", block=True); _just.append(time.perf_counter() - t)
{paired}
_pids = [l.process.pid for es in _cluster.engines.values() for l in es.launchers.values()]
_client.close()
t = time.perf_counter(); _cluster.stop_cluster_sync(); _stop = time.perf_counter() - t
import psutil
for pid in _pids:  # its nannies may outlive it by seconds; end anything left, by pid
    try:
        for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
            p.kill()
    except psutil.Error:
        pass
shutil.rmtree(_profile, ignore_errors=True)
print("BENCH " + json.dumps(dict(first_step=_first_step, just=_just, stop=_stop, paired=_paired)))
"""
PAIRED = """\
_ip = get_ipython()
_ip.run_line_magic("load_ext", "ddplab")
import ddplab
_ip.run_line_magic("ddp_start", "{n}")
_ip.run_cell_magic("ddp", "", {step!r})
_lab_view = ddplab._magics[id(_ip)].lab.view_on(range({n}))
_sides = dict(ddplab=lambda: _ip.run_cell_magic("ddp", "", "x = 1"),
              same=lambda: _lab_view.execute("x = 1", block=True), bare=lambda: _view.execute("x = 1", block=True))
_telemetry = ddplab._magics[id(_ip)].lab.telemetry
def _drain():  # (untimed) the last batches the lab's engines sent for a cell the lab did not run: read here, or
    seen, end = set(), time.perf_counter() + 2  # the next %%ddp cell reads them (in a notebook of %%ddp cells none)
    while len(seen) < {n} and time.perf_counter() < end:
        _telemetry.wait(10)
        seen.update(b.rank for b in _telemetry.batches() if b.final)
def _rounds(k, names):
    took = {{name: [] for name in names}}
    for i in range(k):
        for name in (names if i % 2 == 0 else names[::-1]):  # (alternating: neither side always goes first)
            t = time.perf_counter(); _sides[name](); took[name].append(time.perf_counter() - t)
            if name == "same":
                _drain()
    return took
_paired = dict(just=_rounds({k}, ["ddplab", "bare"]))
time.sleep({settle})
_paired["settled"] = _rounds({rounds}, ["ddplab", "same", "bare"])
_ip.run_line_magic("ddp_stop", "")
"""
BARE_STEP = """\
import os, datetime
import torch, torch.distributed as dist
torch.set_num_threads(1)
store = dist.FileStore({path!r}, {n})
dist.init_process_group("gloo", store=store, rank=int(os.environ["R"]), world_size={n},
                        timeout=datetime.timedelta(seconds=60))
from torch.nn.parallel import DistributedDataParallel as DDP
m = DDP(torch.nn.Linear(64, 64))
m(torch.randn(8, 64)).sum().backward()
"""


def bare_ipyparallel(n, k, settle, rounds):
    """The same path with ipyparallel alone, in a fresh kernel as a learner would type it: seconds
    to the first step (from `import ipyparallel`), its first cells, and its stop; then
    ddplab's cells paired with that pool's (PAIRED: `rounds` settled rounds)."""
    store = os.path.join(tempfile.mkdtemp(prefix="bench-store-"), "store")
    paired = PAIRED.format(n=n, k=k, settle=settle, rounds=rounds, step=STEP)
    try:
        return in_kernel([BARE.format(n=n, k=k, settle=settle, step=BARE_STEP.format(path=store, n=n),
                                      paired=paired)])[0]
    finally:
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)


def run(quick=False):
    n, k, settle, rounds, repeats = (2, 3, 0.5, 3, 1) if quick else (4, 10, 3.0, 30, 9)  # 9: one start spreads ±20%
    ours, bare = [], []
    for _ in range(repeats):
        bare.append(bare_ipyparallel(n, k, settle, rounds))
        ours.append(ddplab_session(n))
    b_step = [b["first_step"] for b in bare]
    just, settled = [b["paired"]["just"] for b in bare], [b["paired"]["settled"] for b in bare]

    def total(runs, side):  # ms of a side's cells, kernel by kernel
        return [sum(run[side]) * 1000 for run in runs]
    return [
        result("start_cold", f"%load_ext + %ddp_start {n} + one DDP step, fresh kernel / bare ipyparallel "
               "cluster + import torch + FileStore group + the same step", ratios([o["cold"] for o in ours], b_step),
               target=("<=", 0.25), ddplab_s=[o["cold"] for o in ours], ready_s=[o["cold_ready"] for o in ours],
               bare_s=b_step),
        result("start_warm", f"%ddp_start {n} + one DDP step, again in the same kernel (zygote warm) / the same "
               "bare path", ratios([o["warm"] for o in ours], b_step), target=("<=", 0.25),
               ddplab_s=[o["warm"] for o in ours], ready_s=[o["warm_ready"] for o in ours]),
        result("cells_after_ready", f"the first {k} trivial %%ddp cells right after ready / view.execute on a bare "
               "ipyparallel pool beside them, cell by cell", ratios(total(just, "ddplab"), total(just, "bare")),
               target=("<=", 1.1), ddplab_ms=total(just, "ddplab"), bare_ms=total(just, "bare"),
               bare_own_ready_ms=[sum(b["just"]) * 1000 for b in bare]),
        result("cells_settled", f"{rounds} trivial %%ddp cells after {settle:g} s idle / view.execute on the same "
               "engines, cell by cell", ratios(total(settled, "ddplab"), total(settled, "same")), target=("<=", 1.1),
               ddplab_ms=total(settled, "ddplab"), same_engines_ms=total(settled, "same")),
        result("cells_vs_bare_pool", f"those {rounds} settled %%ddp cells / view.execute on the bare ipyparallel "
               "pool beside them (what the lab's engines add too)", ratios(total(settled, "ddplab"),
                                                                          total(settled, "bare")),
               bare_ms=total(settled, "bare")),
        result("ranks_cpu_after_ready", f"CPU the {n} ranks use in the 2 s after ready (share of one core, all ranks)",
               [o["cpu"] for o in ours], unit="core", target=("<=", 0.05)),
        result("restart", f"%ddp_restart --all, {n} ranks (s)", [o["restart_all"] for o in ours], unit="s",
               target=("<=", 1.5)),
        result("restart_lost", "%ddp_restart of one lost rank, the others keep their variables (s)",
               [o["restart_one"] for o in ours], unit="s", target=("<=", 1.0)),
        result("stop", f"%ddp_stop, {n} ranks with torch loaded (s)", [o["stop"] for o in ours], unit="s",
               target=("<=", 1.5), ipyparallel_stop_cluster_s=[b["stop"] for b in bare]),
    ]
