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

from ..conftest import RunsCode, alive, descendants

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]  # one worker holds the session pool

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
    from ddplab.processes.zygote import running_zygote

    before = descendants()
    lab = Lab(2).start()
    # DataLoader workers are processes the engines start: stop must end them too, and what they left
    # in temporary files (each worker's pymp-* folder with a socket, made to hand over its batches)
    lab.run("from torch.utils.data import DataLoader\n"
            "it = iter(DataLoader(range(64), num_workers=2, persistent_workers=True)); next(it)\n"
            "import tempfile; where = tempfile.gettempdir()")
    pids = lab.pids()
    assert len(pids) >= 1 + 2 + 4  # controller (and its schedulers), 2 engines, 4 DataLoader workers
    workdir = lab.pool.workdir
    assert lab.gather("where") == [os.path.join(workdir, "tmp")] * 2
    # ... made in the pool's folder, not in /tmp (where a killed worker's would stay for good); a worker
    # makes its folder when it hands over its first batch, which may come after next(it) returned
    def folders():
        return [f for f in os.listdir(os.path.join(workdir, "tmp")) if f.startswith("pymp-")]

    deadline = time.monotonic() + 20
    while len(folders()) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(folders()) >= 4, folders()
    tic = time.perf_counter()
    lab.stop()
    seconds = time.perf_counter() - tic
    assert alive(pids) == []
    assert descendants() <= before | {running_zygote().pid}  # kept warm; the first pool may start it
    assert not os.path.exists(workdir)
    assert lab.states.count("stopped") == 2 and not lab.running
    assert seconds < 10  # bounded; the speed itself is measured in bench/


def test_unload_and_interpreter_exit_stop_the_pool(tmp_path):
    """%unload_ext stops the magics' pool (and the zygote once no Lab uses it); a process that exits
    with a pool running leaves nothing either."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import json
        from IPython.testing.globalipapp import start_ipython
        import ddplab
        from ddplab.processes.zygote import running_zygote
        from tests.conftest import alive
        lab = ddplab.Lab(2).start()                       # a pool of the Python API
        ip = start_ipython()
        ip.run_line_magic("load_ext", "ddplab")
        ip.run_line_magic("ddp_start", "2")              # and one of the magics, from the same zygote
        magic = ip.magics_manager.registry["DDPMagics"].lab.pids()
        zygote = running_zygote().pid
        ip.run_line_magic("unload_ext", "ddplab")
        kept = running_zygote() is not None and running_zygote().pid == zygote  # lab still forks from it
        print(json.dumps({"unloaded": magic, "left_after_unload": alive(magic), "zygote_kept": kept,
                          "at_exit": lab.pids() + [zygote]}), flush=True)
        # exit without stopping: the atexit hooks must
    """))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=root,
                          env=dict(os.environ, PYTHONPATH=root))
    assert proc.returncode == 0, proc.stderr
    pids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(pids["unloaded"]) >= 3 and len(pids["at_exit"]) >= 4
    assert pids["left_after_unload"] == [] and pids["zygote_kept"]
    deadline = time.monotonic() + 10
    while alive(pids["at_exit"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids["at_exit"]) == []


def test_a_run_killed_and_resumed_from_its_checkpoint_ends_bit_for_bit_equal(pair, tmp_path):
    from ddplab.shared.errors import RankFailed

    cell = ("from ddplab.workloads import train_resumable\n"
            "model, started = train_resumable(40, {path!r}, every=5, resume={resume})\n"
            "params = [p.detach().clone() for p in model.module.parameters()]")
    pair.run(cell.format(path=str(tmp_path / "a.pt"), resume=False))
    uninterrupted = pair.gather("params")
    pair.drills.set("kill", 1, at_step=23)  # rank 1 dies at step 23: the last checkpoint is step 20
    with pytest.raises(RankFailed) as info:
        pair.run(cell.format(path=str(tmp_path / "b.pt"), resume=False))
    assert info.value.ranks[0] == 1 and info.value.failures[1].ename == "RankLost"
    pair.restart()
    pair.run(cell.format(path=str(tmp_path / "b.pt"), resume=True))
    assert pair.gather("started") == [20, 20]
    for rank_params, ref in zip(pair.gather("params"), uninterrupted):
        assert all(torch.equal(p, q) for p, q in zip(rank_params, ref))
    assert all(torch.equal(p, q) for p, q in zip(uninterrupted[0], uninterrupted[1]))  # ranks agree


def test_a_checkpoint_that_cannot_be_read_fails_every_rank_at_once(pool, tmp_path):
    """Rank 0 reads, the others wait in a broadcast: they get its error instead of waiting for
    gloo's timeout (30 s); a planted file runs no code on any rank."""
    from ddplab.shared.errors import RankFailed

    marker = tmp_path / "it-ran"
    planted = tmp_path / "planted.pt"
    torch.save({"model": {}, "step": 0, "optimizer": None,
                "extra": {"x": RunsCode(marker)}}, planted)
    for path, ename in ((tmp_path / "missing.pt", "FileNotFoundError"), (planted, "ValueError")):
        with pytest.raises(RankFailed) as info:  # (waiting for gloo's 30 s would end in CellTimeout)
            pool.run(f"ddplab.checkpoint.load({str(path)!r}, torch.nn.Linear(2, 2))", timeout=20)
        assert sorted(info.value.failures) == [0, 1, 2, 3], info.value
        assert {f.ename for f in info.value.failures.values()} == {ename}, info.value
    assert not marker.exists()


def test_a_checkpoint_reaches_every_rank_as_data_never_as_a_pickle(pool, tmp_path):
    """Adam's state (int keys, tuples, 0-dim step tensors), a bf16 buffer and extras come back equal on
    every rank while the ranks cannot unpickle at all: what crosses gloo is JSON and tensor bytes."""
    path = str(tmp_path / "adam.pt")
    pool.run(f"""
import pickle
torch.manual_seed(rank)
m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
m.register_buffer("low", torch.arange(5, dtype=torch.bfloat16))
opt = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.9))
m(torch.randn(6, 3)).sum().backward(); opt.step()
ddplab.checkpoint.save({path!r}, m, opt, 7, note="n", losses=[1.5, float("inf")], mask=torch.ones(2, dtype=torch.bool))
def refuse(*a, **k):
    raise AssertionError("unpickled")
saved = (pickle.loads, dist.broadcast_object_list)
pickle.loads = dist.broadcast_object_list = refuse
try:
    m2 = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    m2.register_buffer("low", torch.zeros(5, dtype=torch.bfloat16))
    opt2 = torch.optim.Adam(m2.parameters(), lr=0.5)
    step = ddplab.checkpoint.load({path!r}, m2, opt2)
    extra = ddplab.checkpoint.load_extra({path!r})
finally:
    pickle.loads, dist.broadcast_object_list = saved
""")
    got = pool.gather("(step, extra['note'], extra['losses'], extra['mask'].tolist(), "
                      "[p.tolist() for p in m2.state_dict().values()], opt2.state_dict()['param_groups'][0]['betas'], "
                      "[float(s['step']) for s in opt2.state_dict()['state'].values()], m2.low.dtype)")
    rank0 = pool.gather("[p.tolist() for p in m.state_dict().values()]", ranks=[0])[0]
    for step, note, losses, mask, params, betas, steps, dtype in got:
        assert (step, note, losses, mask, betas, steps) == (7, "n", [1.5, float("inf")], [True, True], (0.8, 0.9), [1.0] * 4)
        assert params == rank0 and dtype == torch.bfloat16


def test_a_run_resumed_on_four_ranks_ends_bit_for_bit_equal(pool, tmp_path):
    # with more than 2 ranks the gradient sum depends on the order in which the all-reduce adds
    # the ranks' values, i.e. on DDP's bucket layout, which changes after a DDP model's first step
    cell = ("from ddplab.workloads import train_resumable, param_checksum\n"
            "model, started = train_resumable({steps}, {path!r}, every=5, resume={resume})\n"
            "checksum = param_checksum(model.module)")
    pool.run(cell.format(steps=30, path=str(tmp_path / "a.pt"), resume=False))
    uninterrupted = pool.gather("checksum")
    pool.run(cell.format(steps=15, path=str(tmp_path / "b.pt"), resume=False))
    pool.run(cell.format(steps=30, path=str(tmp_path / "b.pt"), resume=True))
    assert pool.gather("started") == [15] * 4
    assert pool.gather("checksum") == uninterrupted and len(set(uninterrupted)) == 1


def test_a_kill_during_save_leaves_the_previous_checkpoint_whole(tmp_path):
    path = tmp_path / "ckpt.pt"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import torch, ddplab.checkpoint as ck
        ck.save({str(path)!r}, torch.nn.Linear(2, 2), None, step=1, note="small")
        print("saved", flush=True)
        ck.save({str(path)!r}, torch.nn.Linear(6000, 6000), None, step=2)  # ~140 MB: takes a while
        print("saved again", flush=True)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "saved"
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".ckpt.pt.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.005)
        child.kill()  # kill -9 in the middle of writing
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert list(tmp_path.glob(".ckpt.pt.tmp-*"))  # it was writing
    import ddplab.checkpoint as ck

    model = torch.nn.Linear(2, 2)
    assert ck.load(path, model) == 1 and ck.load_extra(path) == {"note": "small"}
    ck.save(path, model, None, step=3)
    assert ck.load(path, model) == 3 and not list(tmp_path.glob(".ckpt.pt.tmp-*"))  # leftovers cleaned


def test_when_the_kernel_dies_the_pool_ends_by_itself(tmp_path):
    """kill -9 of the process that started the pool: its reaper ends everything within seconds."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import json, time, ddplab
        lab = ddplab.Lab(2).start()
        lab.run("from torch.utils.data import DataLoader\\n"
                "it = iter(DataLoader(range(8), num_workers=1, persistent_workers=True)); next(it)")
        from ddplab.processes.zygote import running_zygote
        print(json.dumps({"pids": lab.pids(), "reaper": lab.pool.reaper_pid, "dir": lab.pool.workdir,
                          "zygote": running_zygote().pid}), flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=root, env=dict(os.environ, PYTHONPATH=root))
    try:
        info = json.loads(child.stdout.readline())
    finally:
        child.kill()  # the kernel dies: no atexit, no stop()
        child.wait(10)
    tic = time.monotonic()
    everything = info["pids"] + [info["reaper"], info["zygote"]]  # the zygote ends with its notebook
    assert len(info["pids"]) >= 1 + 2 + 2  # controller (and its schedulers), 2 engines, 2 DataLoader workers
    while alive(everything) and time.monotonic() - tic < 15:
        time.sleep(0.1)
    assert alive(everything) == []
    assert time.monotonic() - tic < 10
    assert not os.path.exists(info["dir"])


def test_a_kernel_killed_before_the_reaper_has_its_list_leaves_nothing():
    """The window the test below hits at random: the controller has started its schedulers (its own
    multiprocessing children) and the engines theirs, but the reaper has no list of them yet (here: never).
    When the kernel dies the zygote ends, its forks with it (PR_SET_PDEATHSIG), and every process of their
    groups: before, the controller's schedulers were left running for good."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import json, time, psutil, ddplab
        from ddplab.processes.owned import OwnedCluster
        OwnedCluster.write_pids = lambda self: None  # the reaper never learns the pool's processes
        lab = ddplab.Lab(2).start()
        lab.run("from torch.utils.data import DataLoader\\n"
                "it = iter(DataLoader(range(8), num_workers=1, persistent_workers=True)); next(it)")
        print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]), flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=root, env=dict(os.environ, PYTHONPATH=root))
    try:
        pids = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait(10)
    assert len(pids) >= 1 + 1 + 1 + 2 + 2 + 2, pids  # zygote, reaper, controller, its schedulers, 2 engines, 2 workers
    tic = time.monotonic()
    while alive(pids) and time.monotonic() - tic < 15:
        time.sleep(0.1)
    assert alive(pids) == []


@pytest.mark.parametrize("after", [0.8, 1.6])
def test_a_kernel_killed_while_its_pool_starts_leaves_nothing(after):
    """kill -9 of the process `after` seconds into Lab(4).start() (counted from its first child: Python
    and ddplab's imports before it take longer on a busy machine): the zygote, the controller and the
    engines started so far all end within 15 s (the reaper knows each process as soon as it exists)."""
    import psutil

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", "import ddplab, time\nddplab.Lab(4).start()\ntime.sleep(600)"],
                             cwd=root, env=dict(os.environ, PYTHONPATH=root), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    seen, kernel = set(), psutil.Process(child.pid)
    first, give_up = None, time.monotonic() + 30
    while time.monotonic() < give_up and (first is None or time.monotonic() < first + after):
        try:  # every process it started, as they come
            seen.update(p.pid for p in kernel.children(recursive=True))
        except psutil.Error:
            break
        if seen and first is None:
            first = time.monotonic()
        time.sleep(0.02)
    child.kill()
    child.wait(10)
    seen.discard(child.pid)
    assert len(seen) >= 2, seen  # (the zygote and a reaper at least: it was under way)
    tic = time.monotonic()
    while alive(seen) and time.monotonic() - tic < 15:
        time.sleep(0.1)
    assert alive(seen) == []


def pings(lab, seconds):
    """How many pings the pool's controller sent its engines' hearts within `seconds` (a SUB socket of
    our own on its ping socket: it hears what every heart hears)."""
    import zmq

    info = json.load(open(os.path.join(lab.pool.workdir, "security", "ipcontroller-ddplab-engine.json")))
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"{info['interface']}:{info['hb_ping']}")
    try:
        heard, end = 0, time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if sub.poll(int(left * 1000)):
                sub.recv()
                heard += 1
        return heard
    finally:
        sub.close(linger=0)


def test_the_controller_pings_every_second_once_the_engines_are_in(pair):
    """A ping costs the controller's heart monitor ~1.8 ms of Python: ten a second took 1.8% of a core
    from ranks training on every core, and from the first cells after a start. It pings every period
    (100 ms) only while an engine registers (Beats, unit-tested in test_ipyparallel_pin.py): once the
    engines are in, and at once after a rank's restart, every second."""
    slow = pings(pair, 3.0)
    assert 1 <= slow <= 5, f"{slow} pings in 3 s once the engines are in (1 a second expected)"
    pair.restart_ranks([1])
    assert pair.gather("rank") == [0, 1]  # the restarted rank is in the group
    again = pings(pair, 3.0)
    assert 1 <= again <= 5, f"{again} pings in the 3 s after a rank was restarted and is in (1 a second expected)"
