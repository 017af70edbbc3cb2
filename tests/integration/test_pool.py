"""The core loop on a real 4-rank gloo pool, driven through the magics and through Lab."""
import os
import re
from dataclasses import replace

import pytest
from IPython.core.error import UsageError

from ddplab.kernel.lab import cores
from ddplab.shared.errors import CellTimeout, RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]  # one worker holds the session pool


def ddp(ip, cell, line=""):
    """Run a %%ddp cell the way a notebook does; return IPython's ExecutionResult."""
    return ip.run_cell(f"%%ddp {line}\n{cell}")


def test_user_flow_all_reduce_and_gather(ip, pool, capsys):
    res = ddp(ip, "t = torch.tensor([float(rank)])\ndist.all_reduce(t)\nprint(rank, world_size, t.item())")
    assert res.success
    out = capsys.readouterr().out
    for r in range(4):
        assert f"[rank {r}] {r} 4 6.0" in out
    gathered = ip.run_line_magic("ddp_gather", "t")
    assert [t.tolist() for t in gathered] == [[6.0]] * 4


def test_collectives_on_every_rank(pool):
    pool.run("""
b = torch.tensor([float(rank)]) if rank == 0 else torch.zeros(1)
b.add_(0 if rank == 0 else 0)
if rank == 0: b.fill_(42.0)
dist.broadcast(b, src=0)
s = torch.tensor([rank + 1.0]); dist.all_reduce(s, op=dist.ReduceOp.SUM)
m = torch.tensor([float(rank)]); dist.all_reduce(m, op=dist.ReduceOp.MAX)
parts = [torch.zeros(2) for _ in range(world_size)]
dist.all_gather(parts, torch.tensor([rank, rank * 10.0]))
""")
    assert [b.item() for b in pool.gather("b")] == [42.0] * 4
    assert [s.item() for s in pool.gather("s")] == [10.0] * 4
    assert [m.item() for m in pool.gather("m")] == [3.0] * 4
    expected = [[r, r * 10.0] for r in range(4)]
    for parts in pool.gather("parts"):
        assert [p.tolist() for p in parts] == expected


def test_preloaded_names_and_rank_identity(pool):
    pool.run("import os\nwho = (rank, world_size, dist.get_rank(), dist.get_backend(), nn.Linear.__name__, os.getpid())")
    who = pool.gather("who")
    assert [w[:5] for w in who] == [(r, 4, r, "gloo", "Linear") for r in range(4)]
    assert [w[5] for w in who] == [row["pid"] for row in pool.status()]


def test_engines_are_forked_with_what_they_import_to_register(pool):
    """Everything an engine imports to register and run DDP was loaded once, in the zygote: an
    engine importing it itself pays ~0.2 s of CPU (4 engines, 2 cores: a slower start)."""
    # a fresh engine: the shared pool's earlier cells may have imported anything (torch.compile: sympy)
    pool.restart_ranks([3])
    pool.run("import sys, ddplab.rank\nlate = sorted({m.split('.')[0] for m in set(sys.modules) - ddplab.rank.RANK.preloaded})",
             ranks=[3])
    for late in pool.gather("late", ranks=[3]):
        # (what the shared pool's cells import, e.g. torch.utils.data or a traceback's helpers, may come later)
        assert not set(late) & {"debugpy", "pydevd", "_pydevd_bundle", "ipykernel", "tornado", "ipyparallel",
                                "sympy"}, late
    # and the zygote's objects are frozen: a rank's full collection skips them (it took 0.3-0.6 s
    # and copied the shared pages; gc.freeze before fork, as Python's gc docs advise)
    pool.run("import gc\ngc_counts = (gc.get_freeze_count(), len(gc.get_objects()))")
    for frozen, own in pool.gather("gc_counts"):
        assert frozen > 100_000 and frozen > 5 * own, (frozen, own)


def test_the_controller_keeps_no_record_of_the_results(pool):
    """ddplab's controllers run ipyparallel's NoDB: the hub keeps no copy of what passes (its default DictDB holds
    up to 1024 requests and results, their buffers too). Without a memory limit (this machine) its schedulers stay
    processes of their own; the hub tier checks that a session with a limit makes them threads."""
    import psutil
    from ipyparallel.error import RemoteError

    from ddplab.shared.system import memory_limit

    pool.run("x = rank")
    with pytest.raises(RemoteError, match="NoDB"):
        pool.pool.client.hub_history()
    children = psutil.Process(pool.pool.cluster.controller.pid).children(recursive=True)
    assert memory_limit() is not None or len(children) > 1, children


def test_state_persists_between_cells(ip, pool):
    assert ddp(ip, "counter = rank * 100").success
    assert ddp(ip, "counter += 1").success
    assert ip.run_line_magic("ddp_gather", "counter") == [1, 101, 201, 301]


def test_output_is_grouped_by_rank_not_interleaved(ip, pool, capsys):
    res = ddp(ip, "import time, sys\nfor i in range(3):\n    print(f'line {i} of rank {rank}', flush=True)\n"
                  "    time.sleep(0.05)\nprint('warn', rank, file=sys.stderr)")
    assert res.success
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    for r in range(4):
        start = lines.index(f"[rank {r}]")
        assert lines[start + 1:start + 4] == [f"line {i} of rank {r}" for i in range(3)]
        assert f"[rank {r} stderr] warn {r}" in cap.err


def test_last_expression_is_shown_per_rank(ip, pool, capsys):
    assert ddp(ip, "rank * 11").success
    out = capsys.readouterr().out
    assert all(f"Out[rank {r}]: {r * 11}" in out for r in range(4))


def test_exception_names_the_rank_with_its_traceback_once(ip, pool, capsys):
    res = ddp(ip, "print('before', rank)\nif rank == 2:\n    raise ValueError('boom on two')\nok = True")
    assert not res.success and isinstance(res.error_in_exec, RankFailed)
    assert res.error_in_exec.ranks == [2]
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # no colours
    assert out.count("rank 2 failed (engine") == 1
    assert out.count("ValueError: boom on two") == 1
    assert "raise ValueError" in out  # the traceback, not just the message
    assert all(f"[rank {r}] before {r}" in out for r in range(4))  # output before the error is kept
    assert pool.states[2] == "failed" and pool.states[0] == "done"
    # the pool stays usable and the failed rank's state recovers with the next cell
    assert ddp(ip, "x = rank").success
    assert ip.run_line_magic("ddp_gather", "x") == [0, 1, 2, 3]


def test_run_raises_rank_failed_with_all_outputs(pool):
    with pytest.raises(RankFailed) as info:
        pool.run("print('hi', rank)\nassert rank != 1, 'rank one refuses'")
    exc = info.value
    assert exc.ranks == [1]
    assert exc.failures[1].ename == "AssertionError" and "rank one refuses" in exc.failures[1].evalue
    assert exc.result.stdout == [f"hi {r}\n" for r in range(4)]


def test_subset_of_ranks(ip, pool, capsys):
    assert ddp(ip, "only = 'here'", "--ranks 0,2").success
    ddp(ip, "print(globals().get('only', 'absent'))")
    out = capsys.readouterr().out
    assert "[rank 0] here" in out and "[rank 1] absent" in out and "[rank 2] here" in out and "[rank 3] absent" in out
    with pytest.raises(UsageError, match="0..3"):
        ip.run_cell_magic("ddp", "--ranks 7", "pass")


def test_gather_of_a_missing_name_says_which_ranks(ip, pool):
    assert ddp(ip, "if rank % 2: partial = rank", "").success
    with pytest.raises(UsageError, match=r"'partial' is not defined on rank\(s\) 0, 2"):
        ip.run_line_magic("ddp_gather", "partial")
    with pytest.raises(UsageError, match="ZeroDivisionError"):
        ip.run_line_magic("ddp_gather", "1/0")


def test_push_from_the_notebook(ip, pool):
    ip.user_ns["lr"] = 0.125
    ip.run_line_magic("ddp_push", "lr")
    assert ip.run_line_magic("ddp_gather", "lr * 8") == [1.0] * 4
    with pytest.raises(UsageError, match="not defined in the notebook"):
        ip.run_line_magic("ddp_push", "no_such_variable")
    # a notebook's class that calls super() is one ipyparallel cannot pickle: said so, with what to do
    ip.run_cell("import torch.nn as nn\nclass PushedNet(nn.Module):\n    def __init__(self):\n"
                "        super().__init__()\n        self.l = nn.Linear(2, 2)\n")
    with pytest.raises(UsageError, match="cannot send PushedNet.*define it in a %%ddp cell"):
        ip.run_line_magic("ddp_push", "PushedNet")


def test_threads_per_rank_follow_the_cores(ip, pool, capsys):
    expected = max(1, cores() // 4)
    pool.run("import os\nthreads = (torch.get_num_threads(), os.environ['OMP_NUM_THREADS'], "
             "os.environ['GLOO_SOCKET_IFNAME'])")
    assert pool.gather("threads") == [(expected, str(expected), "lo")] * 4
    ip.run_line_magic("ddp_status", "")
    out = capsys.readouterr().out
    assert "threads" in out and "backend gloo" in out
    for row in pool.status():
        assert re.search(rf"^{row['rank']}\s+{row['engine']}\s+{row['pid']}\s+\S+\s+loopback\s+{expected}\s+\w+", out, re.M)


def test_starting_again_changes_nothing(ip, pool, magics, capsys):
    pids = pool.pids()
    ip.run_line_magic("ddp_start", "2")
    assert "already running" in capsys.readouterr().err
    assert magics.lab is pool and pool.pids() == pids and pool.world_size == 4


def test_cell_timeout_interrupts_every_rank(pool):
    with pytest.raises(CellTimeout, match="longer than 1 s"):
        pool.run("import time\nfor _ in range(600): time.sleep(0.05)", timeout=1)
    assert pool.run("alive = rank").ranks == [0, 1, 2, 3]


def test_unknown_cell_flags_are_usage_errors(ip, pool):
    for line in ("--bogus", "--ranks", "--timeout 0", "--timeout abc"):
        with pytest.raises(UsageError):
            ip.run_cell_magic("ddp", line, "pass")


def test_connection_files_are_private(pool):
    mode = os.stat(pool.pool.workdir).st_mode & 0o777
    assert mode == 0o700


def test_ctrl_c_interrupts_every_rank_and_the_pool_stays_usable(ip, pool, capsys, ctrl_c):
    from ddplab.shared.errors import Interrupted

    timer = ctrl_c(1.0)
    timer.start()
    try:
        res = ddp(ip, "import time\nprint('started', rank, flush=True)\nfor _ in range(600): time.sleep(0.05)")
    finally:
        timer.cancel()
    assert isinstance(res.error_in_exec, Interrupted)
    out = capsys.readouterr().out
    assert all(f"[rank {r}] started {r}" in out for r in range(4))
    assert pool.last_result.failed.keys() == {0, 1, 2, 3}
    assert {e.ename for e in pool.last_result.failed.values()} == {"KeyboardInterrupt"}
    assert ddp(ip, "after = rank").success
    assert ip.run_line_magic("ddp_gather", "after") == [0, 1, 2, 3]


def test_restart_gives_a_fresh_full_group(ip, pool, capsys):
    ddp(ip, "leftover = 1")
    old = [row["pid"] for row in pool.status()]
    ip.run_line_magic("ddp_restart", "")
    assert "restarted: 4 ranks ready" in capsys.readouterr().out
    assert not set(old) & {row["pid"] for row in pool.status()} and pool.running  # a fresh engine per rank
    ddp(ip, "print('leftover' in globals())\nt = torch.ones(1); dist.all_reduce(t)")
    assert "[rank 3] False" in capsys.readouterr().out
    assert [t.item() for t in ip.run_line_magic("ddp_gather", "t")] == [4.0] * 4
    en, pool.config = pool.config, replace(pool.config, lang="zh")  # a pool that speaks Chinese says so throughout
    try:
        ip.run_line_magic("ddp_restart", "")
        out = capsys.readouterr().out
        assert "已重启：4 个 rank 已就绪" in out, out
        # its last progress line, as the dashboard shows it
        assert pool.run_state.message == "正在启动 4 个 rank：组建 gloo 进程组"
    finally:
        pool.config = en


def test_history_has_every_step_of_every_rank(ip, pool, capsys, tmp_path):
    cell = ("import time\n"
            "for s in range(20000):\n"          # far more points than the live view draws
            "    ddplab.log(loss=1.0 / (s + 1), samples=8, lr=0.1 * (rank + 1))\n"
            "with ddplab.phase('eval'):\n"
            "    time.sleep(0.3)\n"
            "open_phase = ddplab.phase('checkpoint'); open_phase.__enter__()\n")
    assert ddp(ip, cell).success
    out = capsys.readouterr().out
    for r in range(4):  # the terminal view's last lines
        assert re.search(rf"^\[rank {r}\] done step 19999 loss 0\.0001 samples/s \d+$", out, re.M)
        assert pool.run_state.ranks[r].points == 20000  # the live view got every batch here too
        assert pool.run_state.ranks[r].phase == "checkpoint"
    history = ip.run_line_magic("ddp_history", "")
    last = max(row["cell"] for row in history)
    for r in range(4):
        rows = history.where(rank=r, cell=last)
        assert [row["step"] for row in rows] == list(range(20000))
        assert rows[0]["lr"] == pytest.approx(0.1 * (r + 1)) and rows[-1]["loss"] == pytest.approx(1 / 20000)
        times = [row["time"] for row in rows]
        assert times == sorted(times)
    path = tmp_path / "history.csv"
    ip.run_line_magic("ddp_history", f"--csv {path}")
    assert f"wrote {len(history)} points" in capsys.readouterr().out
    assert sum(1 for _ in open(path)) == len(history) + 1
    with pytest.raises(UsageError, match="cannot write"):
        ip.run_line_magic("ddp_history", "--csv /no/such/dir/h.csv")
    ddp(ip, "open_phase.__exit__(None, None, None)")


def test_a_view_that_raises_never_breaks_the_cell(pool, capsys):
    class Broken:
        def begin(self, lab):
            pass

        def update(self, lab):
            raise OverflowError("cannot convert float infinity to integer")

        end = update

    kept, pool.view = pool.view, Broken()
    try:
        result = pool.run("import time\nfor i in range(4):\n    ddplab.log(loss=float('inf'))\n    time.sleep(0.2)\nz = 5")
        assert [o.error for o in result.outputs] == [None] * 4
        assert "ddplab: the live view failed (OverflowError" in capsys.readouterr().err
        assert pool.gather("z") == [5] * 4
        pool.run("z = 6")  # the next cell runs: no rank left in a state it cannot leave
        assert pool.gather("z") == [6] * 4
    finally:
        pool.view = kept


def test_history_numbers_cells_the_same_on_every_rank(ip, pool):
    # rank 0 runs one cell more than the others: its own cell count is ahead of theirs
    assert ddp(ip, "ddplab.log(loss=0.5, samples=1)", line="--ranks 0").success
    assert ddp(ip, "ddplab.log(loss=float(rank), samples=1)").success
    cell = pool.run_state.cell
    rows = ip.run_line_magic("ddp_history", "").where(cell=cell)
    assert sorted((row["rank"], row["loss"]) for row in rows) == [(r, float(r)) for r in range(4)]
    assert [row["loss"] for row in ip.run_line_magic("ddp_history", "").where(cell=cell - 1)] == [0.5]
