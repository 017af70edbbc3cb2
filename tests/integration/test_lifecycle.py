"""Pools next to each other, DDP correctness, and stopping that leaves nothing behind."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn as nn

from ddplab import Lab

from ..conftest import alive, descendants

pytestmark = pytest.mark.pool

DDP_CELL = """
import torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
X, Y = torch.randn({n}, 10), torch.randn({n}, 1)       # the same data on every rank
model = DDP(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    lo = step * world_size * {b} + rank * {b}          # rank r takes its own slice of the global batch
    opt.zero_grad()
    nn.functional.mse_loss(model(X[lo:lo + {b}]), Y[lo:lo + {b}]).backward()
    opt.step()
params = [p.detach().clone() for p in model.module.parameters()]
"""


def single_process(steps, b, world):
    torch.manual_seed(0)
    n = steps * world * b
    X, Y = torch.randn(n, 10), torch.randn(n, 1)
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        lo = step * world * b
        opt.zero_grad()
        nn.functional.mse_loss(model(X[lo:lo + world * b]), Y[lo:lo + world * b]).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


@pytest.fixture(scope="module")
def pair(pool):
    """A second, 2-rank pool started while the session's 4-rank pool runs (two notebooks at once),
    with the TCP rendezvous on a free loopback port."""
    lab = Lab(2, timeout=30, rendezvous="tcp://127.0.0.1:0").start()
    yield lab
    lab.stop()


def test_two_pools_at_once_both_work(pool, pair):
    pair.run("t = torch.ones(1) * (rank + 1); dist.all_reduce(t)")
    pool.run("t = torch.ones(1) * (rank + 1); dist.all_reduce(t)")
    assert [t.item() for t in pair.gather("t")] == [3.0, 3.0]
    assert [t.item() for t in pool.gather("t")] == [10.0] * 4
    assert not set(pair.pids()) & set(pool.pids())


def test_ddp_two_ranks_equal_one_process_with_double_batch(pair):
    steps, b = 20, 8
    pair.run(DDP_CELL.format(n=steps * 2 * b, steps=steps, b=b))
    expected = single_process(steps, b, world=2)
    per_rank = pair.gather("params")
    for params in per_rank:
        for got, want in zip(params, expected):
            assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()
    # and the check can fail: one step fewer gives other parameters
    assert not all(torch.allclose(g, w, atol=1e-6) for g, w in zip(per_rank[0], single_process(steps - 1, b, 2)))


def test_stop_ends_every_process_including_helpers():
    before = descendants()
    lab = Lab(2).start()
    # DataLoader workers are processes the engines start: stop must end them too
    lab.run("from torch.utils.data import DataLoader\n"
            "it = iter(DataLoader(range(64), num_workers=2, persistent_workers=True)); next(it)")
    pids = lab.pids()
    assert len(pids) >= 1 + 2 + 2 + 4  # controller, engines, nannies, workers
    workdir = lab._workdir
    tic = time.perf_counter()
    lab.stop()
    seconds = time.perf_counter() - tic
    assert alive(pids) == []
    assert descendants() <= before
    assert not os.path.exists(workdir)
    assert lab.states.count("stopped") == 2 and not lab.running
    assert seconds < 10  # bounded; the speed itself is measured in bench/


def test_unload_and_interpreter_exit_stop_the_pool(tmp_path):
    """%unload_ext stops the pool; a process that exits with a pool running leaves nothing either."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import json
        from IPython.testing.globalipapp import start_ipython
        import ddplab
        ip = start_ipython()
        ip.run_line_magic("load_ext", "ddplab")
        ip.run_line_magic("ddp_start", "2")
        first = ip.magics_manager.registry["DDPMagics"].lab.pids()
        ip.run_line_magic("unload_ext", "ddplab")
        from tests.conftest import alive
        lab = ddplab.Lab(2).start()
        print(json.dumps({"unloaded": first, "left_after_unload": alive(first), "at_exit": lab.pids()}),
              flush=True)
        # exit without stopping: the atexit hook must
    """))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=root,
                          env=dict(os.environ, PYTHONPATH=root))
    assert proc.returncode == 0, proc.stderr
    pids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(pids["unloaded"]) >= 5 and len(pids["at_exit"]) >= 5
    assert pids["left_after_unload"] == []
    deadline = time.monotonic() + 10
    while alive(pids["unloaded"] + pids["at_exit"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids["unloaded"] + pids["at_exit"]) == []
