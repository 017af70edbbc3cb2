"""What an ordinary account does with ddplab, run as that account in a user's install (accounts.py).
Prints one JSON object on its last line.

    python as_user.py pool                      a pool: training, a checkpoint round trip, torch.compile,
                                                DataLoader workers, dist.new_group, a restart; stop
    python as_user.py target SECONDS SECRET [QUIET_AFTER STEADY GATE LAG]   a pool whose groups form again and
                                                again while another account attacks (ddplab's own, and
                                                dist.new_group), each all_reduce carrying SECRET; then, the attack
                                                over, one cell
    python as_user.py frameworks SECONDS        TensorFlow's MultiWorkerMirroredStrategy and jax.distributed on
                                                2 ranks, training for SECONDS while another account connects
                                                to every listener of theirs
"""
import json
import os
import sys
import time

import psutil

from ddplab import Lab
from ddplab.shared.errors import DDPLabError

TRAIN = ("from ddplab.workloads import train_ddp\nsummary = train_ddp(steps=20)\n"
         "print('trained', summary['loss'] < 2.4)")
CHECKPOINT = """
m = nn.Linear(4, 3); opt = torch.optim.Adam(m.parameters())
m(torch.ones(2, 4)).sum().backward(); opt.step()
ddplab.checkpoint.save(PATH, m, opt, 5)
m2 = nn.Linear(4, 3); opt2 = torch.optim.Adam(m2.parameters())
step = ddplab.checkpoint.load(PATH, m2, opt2)
same = step == 5 and all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))
"""
COMPILE = ("f = torch.compile(lambda x: torch.sin(x) + x)\ncompiled = round(f(torch.ones(3)).sum().item(), 4)\n"
           "import os\ncache = os.environ['TORCHINDUCTOR_CACHE_DIR']")
LOADER = """
import os
class Square(torch.utils.data.Dataset):
    def __len__(self): return 8
    def __getitem__(self, i): return torch.tensor([float(i * i), float(os.getpid())])
rows = torch.cat(list(torch.utils.data.DataLoader(Square(), batch_size=4, num_workers=2)))
squares, readers = rows[:, 0].tolist(), len(set(rows[:, 1].tolist()) - {float(os.getpid())})
"""
GROUP = "g = dist.new_group([0, 1])\nt = torch.full((3,), float(rank + 1))\ndist.all_reduce(t, group=g)\nsummed = t.tolist()"


def pool():
    out = {}
    lab = Lab(2).start()
    try:
        out["network"] = list(lab.pool.network)
        out["exposure"] = [text for _, text in lab.report.exposure()]
        out["protections"] = lab.report.protections()
        out["trained"] = lab.run(TRAIN).stdout
        lab.run(CHECKPOINT.replace("PATH", repr(os.path.join(os.path.expanduser("~"), "ckpt.pt"))))
        out["checkpoint"] = lab.gather("same")
        lab.run(COMPILE, ranks=[0])
        out["compiled"] = lab.gather("compiled", ranks=[0])[0]
        cache = lab.gather("cache", ranks=[0])[0]
        out["cache"] = cache
        out["cache_files"] = sum(len(files) for _, _, files in os.walk(cache))
        out["cache_mode"] = oct(os.stat(cache).st_mode & 0o777)
        lab.run(LOADER)
        out["loader"] = lab.gather("(squares, readers)")
        lab.run(GROUP)
        out["group"] = lab.gather("summed")
        out["restart"] = lab.restart()
        out["after_restart"] = lab.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout
        out["refused"] = {k: v for k, v in lab.live.refused.items()}
        pids, workdir = lab.pids(), lab.pool.workdir
    finally:
        lab.stop()
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    out["left"] = alive
    out["workdir_left"] = os.path.exists(workdir)
    return out


FORM = """
if LAG and rank == world_size - 1:
    import time
    time.sleep(LAG)
g = dist.new_group(list(range(world_size)))
t = torch.full((4096,), SECRET)
dist.all_reduce(t, group=g)
ok = bool(torch.all(t == SECRET * world_size))
dist.destroy_process_group(g)
"""


STEADY = "t = torch.full((4096,), SECRET)\ndist.all_reduce(t)\nok = bool(torch.all(t == SECRET * world_size))"


def target(seconds, secret, quiet_after=0.0, steady=0, gate=1, lag=0.0):
    """Groups formed again and again: a new_group and an all_reduce of SECRET in each cell, ddplab's own
    group formed again every third (steady: only the all_reduce, on the pool's group, which then lives
    on); each cell's result and when it ended, and what failed. Then, once the attack is over
    (QUIET_AFTER seconds from the start), how long the pool takes to work again. gate=0: without the
    accept gate (DDPLab.accept_gate), the checks of guard.py alone. lag: the last rank comes to each
    dist.new_group LAG seconds late (a busy machine), so rank 0's listener waits for it that long.
    A cell's time is its own: a (re)start of the pool is counted apart, in "starts"."""
    from ddplab.shared.config import tunables

    tunables().accept_gate = bool(gate)
    out = {"cells": [], "starts": [], "failures": [], "refused": {}, "notices": []}
    t0, lab, processes, rss_before = time.monotonic(), Lab(2), [], []

    def failed(exc):
        out["failures"].append([round(time.monotonic() - t0, 2), f"{type(exc).__name__}: {exc}"[:400]])

    def collect():
        for account, (n, taken) in lab.live.refused.items():
            was = out["refused"].setdefault(account, [0, 0])
            out["refused"][account] = [was[0] + n, was[1] + taken]
        out["notices"] += [n for n in lab.run_state.notices.values() if n not in out["notices"]]

    try:
        deadline, n = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            n += 1
            try:
                if not lab.running:
                    tic = time.monotonic()
                    lab.start()
                    out["starts"].append(round(time.monotonic() - tic, 2))
                    out["network"] = list(lab.pool.network)
                    out["gate"] = [i.get("gate") for i in lab.info]
                    processes = [psutil.Process(p) for p in [os.getpid(), *(i["pid"] for i in lab.info)]]
                    rss_before = [p.memory_info().rss for p in processes]
                tic = time.monotonic()
                if n % 3 == 0 and not steady:
                    lab.form(time.perf_counter() + 60)  # ddplab's group, as after a failed cell
                cell = STEADY if steady else FORM.replace("LAG", repr(lag))
                lab.run(cell.replace("SECRET", repr(secret)), timeout=60)
                if steady:
                    time.sleep(0.3)
                out["cells"].append([round(time.monotonic() - t0, 2), round(time.monotonic() - tic, 2), lab.gather("ok")])
            except (DDPLabError, OSError) as exc:  # (a group another account kept from forming: StartFailed, RankFailed)
                failed(exc)
                if not lab.running:
                    collect()
                time.sleep(0.5)
        out["rss_growth_mib"] = [round((p.memory_info().rss - b) / 2**20, 1) if p.is_running() else None
                                 for p, b in zip(processes, rss_before)]
        time.sleep(max(0.0, t0 + quiet_after - time.monotonic()))
        tic = time.monotonic()
        try:
            if not lab.running:
                lab.start()
            out["after"] = lab.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout
        except DDPLabError as exc:
            failed(exc)
            out["after"] = None
        out["after_seconds"] = round(time.monotonic() - tic, 2)
        collect()
    finally:
        lab.stop()
    return out


FRAMEWORKS = """
ddplab.tf_config()
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
ddplab.jax_distributed()
import jax, jax.numpy as jnp, json, os
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((world_size,), ("dp",))
total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, P()))
with strategy.scope():
    v = tf.Variable(0.0)
@tf.function
def add():
    strategy.run(lambda: v.assign_add(1.0))
tf_port = int(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][rank].rsplit(":", 1)[1])
"""
STEP = """
add()
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("dp")), np.ones(1, np.float32) * (rank + 1))
both = [float(v.numpy()), float(total(x))]
"""


def frameworks(seconds):
    """TensorFlow and JAX started on 2 ranks (the gate up, where the pool shares the machine's network),
    then a step of each again and again for SECONDS from the start while another account probes every
    listener: each step's results, who was refused."""
    t0, out = time.monotonic(), {"steps": [], "failures": []}
    lab = Lab(2, timeout=120)
    try:
        lab.start()
        out["network"], out["gate"] = list(lab.pool.network), [i.get("gate") for i in lab.info]
        lab.run(FRAMEWORKS, timeout=300)
        out["tf_ports"] = lab.gather("tf_port")
        out["started_after"] = round(time.monotonic() - t0, 1)
        while time.monotonic() < t0 + seconds:
            try:
                lab.run(STEP, timeout=60)
                out["steps"].append(lab.gather("both"))
            except DDPLabError as exc:
                out["failures"].append(f"{type(exc).__name__}: {exc}"[:400])
                break
            time.sleep(0.2)
        lab.run("x = 1")  # (what the ranks refused since reaches the notebook with this cell)
        time.sleep(1.5)
        lab.run("x = 2")
        out["refused"] = {account: n for account, (n, _) in lab.live.refused.items()}
        out["notices"] = list(lab.run_state.notices.values())
    finally:
        lab.stop()
    return out


if __name__ == "__main__":
    mode = sys.argv[1]
    result = pool() if mode == "pool" else frameworks(float(sys.argv[2])) if mode == "frameworks" else \
        target(*map(float, sys.argv[2:]))
    print(json.dumps(result))
