"""Failures on the shared 4-rank pool: fail fast, say exactly what happened, recover.

Each test leaves the pool whole (restarting what it broke), so the order does not matter.
"""
import dataclasses
import os
import re
import threading
import time

import pytest
from IPython.core.error import UsageError

from ddplab.shared.errors import BadRequest, CellTimeout, Interrupted, RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]  # one worker holds the session pool
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ddp(ip, cell, line=""):
    return ip.run_cell(f"%%ddp {line}\n{cell}")


def plain(text):
    return ANSI.sub("", text)


@pytest.fixture
def whole(ip, pool):
    """The pool, made whole again after the test (lost ranks restarted, drills cleared)."""
    yield pool
    if pool.find_lost():
        pool.restart()
    for r in list(pool.drills.faults):
        pool.drills.set("clear", r)


def test_one_rank_raises_while_the_others_wait_in_all_reduce(ip, whole, capsys):
    assert ddp(ip, "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                   "model = DDP(nn.Linear(4, 2))\nkept = rank * 10").success
    tic = time.monotonic()
    res = ddp(ip, "for s in range(1, 4):\n    ddplab.log(loss=1.0 / s)\n"
                  "if rank == 1:\n    raise ValueError('boom on one')\n"
                  "t = torch.ones(1)\ndist.all_reduce(t)")
    seconds = time.monotonic() - tic
    assert seconds < 20  # not gloo's timeout (30 s here); typically about 1 s
    exc = res.error_in_exec
    assert isinstance(exc, RankFailed) and exc.ranks[0] == 1
    report = plain("\n".join(exc.report()))
    assert report.startswith("rank 1 failed at step 2 (engine ")  # steps count from 0
    assert report.count("ValueError: boom on one") == 1 and "raise ValueError" in report
    assert "ranks 0, 2, 3 stopped: their collective was cut off by rank 1" in report
    assert re.search(r"group re-formed in \d+ ms; variables kept", report)
    assert "model = DDP(model.module)" in report  # the DDP model was tied to the old group
    assert plain(capsys.readouterr().out).count("ValueError: boom on one") == 1  # shown once
    assert list(whole.states) == ["failed"] * 4
    # the pool works again, and every rank kept its variables
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)\nmodel = DDP(model.module)").success
    assert ip.run_line_magic("ddp_gather", "(kept, t.item())") == [(r * 10, 4.0) for r in range(4)]


def test_an_engine_that_dies_is_named_lost_and_restart_brings_it_back(ip, whole):
    assert ddp(ip, "kept = rank").success
    tic = time.monotonic()
    res = ddp(ip, "import os\ndist.barrier()\nif rank == 2:\n    os._exit(3)\n"
                  "t = torch.ones(1)\ndist.all_reduce(t)")
    assert time.monotonic() - tic < 20
    report = "\n".join(res.error_in_exec.report(color=False))
    assert re.search(r"^rank 2 lost \(engine \d+, pid \d+, .*\): its engine exited with code 3$", report, re.M)
    assert "ranks 0, 1, 3 stopped: their collective was cut off by rank 2" in report
    assert "run %ddp_restart" in report and "ranks 0, 1, 3 keep their variables" in report
    assert whole.states[2] == "lost"
    with pytest.raises(UsageError, match=r"rank 2 is lost \(its engine exited with code 3\): %ddp_restart"):
        ip.run_cell_magic("ddp", "", "pass")
    old_pid = whole.info[2]["pid"]
    ip.run_line_magic("ddp_restart", "")
    assert whole.info[2]["pid"] != old_pid and not whole.find_lost()
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)\nleft = globals().get('kept')").success
    assert ip.run_line_magic("ddp_gather", "(left, t.item())") == [(0, 4.0), (1, 4.0), (None, 4.0), (3, 4.0)]


def test_a_segfault_and_a_kill_while_idle_are_seen(ip, whole, capsys):
    res = ddp(ip, "import ctypes\nif rank == 3:\n    ctypes.string_at(0)\n", "--ranks 2,3")
    assert "its engine crashed: segmentation fault (SIGSEGV)" in "\n".join(res.error_in_exec.report())
    whole.restart()
    ip.run_line_magic("ddp_fault", "kill 1")  # while no cell runs
    assert "rank 1 killed (SIGKILL)" in capsys.readouterr().out
    deadline = time.monotonic() + 10
    while whole.states[1] != "lost" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert whole.states[1] == "lost" and "killed" in whole.run_state.ranks[1].error
    with pytest.raises(UsageError, match="rank 1 is lost"):
        ip.run_line_magic("ddp_gather", "rank")


def test_a_rank_in_an_endless_loop_is_stopped_by_the_cell_timeout(ip, whole):
    assert ddp(ip, "kept = rank").success
    tic = time.monotonic()
    res = ddp(ip, "if rank == 0:\n    while True: pass\nt = torch.ones(1)\ndist.all_reduce(t)", "--timeout 1")
    assert time.monotonic() - tic < 20
    assert isinstance(res.error_in_exec, CellTimeout)
    assert "every rank was interrupted (SIGINT)" in str(res.error_in_exec)
    assert ip.run_line_magic("ddp_gather", "kept") == [0, 1, 2, 3]  # nothing restarted
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)").success


def test_ctrl_c_stops_a_rank_looping_and_the_ranks_waiting_for_it(ip, whole, ctrl_c):
    timer = ctrl_c(1.0)
    timer.start()
    try:
        res = ddp(ip, "import time\nif rank == 3:\n    while True: time.sleep(0.01)\n"
                      "t = torch.ones(1)\ndist.all_reduce(t)")
    finally:
        timer.cancel()
    stopped = time.monotonic()
    assert isinstance(res.error_in_exec, Interrupted)
    assert whole.last_result.seconds < 1.0 + 5  # every rank out within a few seconds of Ctrl-C
    assert "group re-formed" in str(res.error_in_exec)
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)").success
    assert time.monotonic() - stopped < 20


def test_ranks_stuck_in_a_deadlock_are_freed_by_cutting_their_links_and_keep_their_variables(ip, whole):
    assert ddp(ip, "kept = rank").success
    res = ddp(ip, "t = torch.zeros(1)\ndist.recv(t, src=(rank + 1) % world_size)", "--timeout 1")
    assert isinstance(res.error_in_exec, CellTimeout), res.error_in_exec
    assert "restarted" not in str(res.error_in_exec) and "group re-formed" in str(res.error_in_exec)
    assert ip.run_line_magic("ddp_gather", "kept") == [0, 1, 2, 3]
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)").success


def test_a_rank_that_ignores_sigint_is_killed_and_restarted_the_others_keep_theirs(ip, whole):
    assert ddp(ip, "kept = rank").success
    res = ddp(ip, "import signal, time\nif rank == 1:\n    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                  "    time.sleep(60)\nt = torch.ones(1)\ndist.all_reduce(t)", "--timeout 1")
    message = str(res.error_in_exec)
    assert isinstance(res.error_in_exec, CellTimeout)
    assert re.search(r"rank 1 did not stop within 1.5 s of SIGINT and was restarted in [\d.]+ s "
                     r"\(the variables of rank 1 are gone; ranks 0, 2, 3 kept theirs\); group re-formed", message), message
    assert ip.run_line_magic("ddp_gather", "globals().get('kept')") == [0, None, 2, 3]
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)").success


def test_fault_drills(ip, whole, capsys):
    ip.run_line_magic("ddp_fault", "raise 1 --at-step 5")
    assert "rank 1 will raise at step 5" in capsys.readouterr().out
    assert whole.run_state.ranks[1].fault == "raise at step 5"
    res = ddp(ip, "for s in range(20):\n    ddplab.log(loss=1.0, samples=1)\n    t = torch.ones(1); dist.all_reduce(t)")
    report = "\n".join(res.error_in_exec.report(color=False))
    assert "FaultDrill: fault drill: rank 1 raised at step 5 (%ddp_fault raise)" in report
    ip.run_line_magic("ddp_fault", "slow 2 3")
    assert ddp(ip, "import time\nt0 = time.perf_counter()\nfor s in range(30):\n"
                   "    time.sleep(0.01)\n    ddplab.log(samples=1)\nel = time.perf_counter() - t0").success
    el = ip.run_line_magic("ddp_gather", "el")
    assert el[2] > 2 * max(el[0], el[1], el[3])  # the straggler
    assert "slow ×3" in whole.run_state.ranks[2].fault
    ip.run_line_magic("ddp_fault", "")
    assert "rank 2: slow ×3" in capsys.readouterr().out
    ip.run_line_magic("ddp_fault", "clear")
    assert whole.drills.faults == {} and whole.run_state.ranks[2].fault is None
    ip.run_line_magic("ddp_fault", "kill 3 --at-step 2")
    res = ddp(ip, "for s in range(10):\n    ddplab.log(samples=1)\n    t = torch.ones(1); dist.all_reduce(t)")
    # the drill flushes the rank's last points before it dies: the report names the step it was set for
    assert "rank 3 lost at step 2" in "\n".join(res.error_in_exec.report()) and whole.states[3] == "lost"
    for line in ("explode 1", "kill", "slow 1", "slow 1 0.5", "kill 9", "raise 1 2", "slow 1 2 --at-step 3"):
        with pytest.raises(UsageError):
            ip.run_line_magic("ddp_fault", line)


def test_the_pool_opens_no_port_of_ipyparallels_and_keeps_its_keys_private(pool):
    """ipyparallel's controller, schedulers, engines and this client talk over socket files in the
    pool's private folder; the only TCP listeners are gloo's, in the ranks, on loopback, inside a
    network namespace of the pool's own (this machine runs as root: it allows one)."""
    from ddplab.shared.privacy import network_namespace, tcp_listeners

    pool.run("t = torch.ones(1)\ndist.all_reduce(t)")
    gloo = {p for i in pool.info for p in i["ports"]}
    ranks = {i["pid"] for i in pool.info}
    listening = {pid: tcp_listeners(pid) for pid in pool.pids() + [os.getpid(), pool.pool.reaper_pid]}
    assert len(listening) >= 1 + 4 + 3  # controller, its schedulers and heart monitor, 4 ranks, this process
    assert {pid for pid, found in listening.items() if found} == ranks, listening
    assert all(ip == "127.0.0.1" for pid in ranks for ip, port in listening[pid]), listening  # gloo's, each group's
    assert gloo <= {port for pid in ranks for _, port in listening[pid]} and len(gloo) == 4  # the pool's group: one a rank
    assert pool.pool.network == ("private", None)
    assert {network_namespace(pid) for pid in pool.pids()} != {network_namespace(os.getpid())}
    assert len({network_namespace(pid) for pid in pool.pids()}) == 1
    assert pool.pool.connection_info()["interface"] == f"ipc://{pool.pool.workdir}/ipp"
    security = os.path.join(pool.pool.workdir, "security")
    keys = [f for f in os.listdir(security) if f.startswith("ipcontroller-")]
    assert len(keys) == 2
    for name in keys:
        assert os.stat(os.path.join(security, name)).st_mode & 0o777 == 0o600
    assert os.stat(pool.pool.workdir).st_mode & 0o777 == 0o700


def test_a_cell_meant_to_fail_shows_its_failure_as_expected(ip, whole, capsys):
    from ddplab.shared.errors import ExpectedFailureMissing

    # the lesson's point: ranks calling different collectives, named, shown as expected, not raised
    res = ddp(ip, "t = torch.ones(1)\nif rank == 0:\n    dist.broadcast(t, src=0)\nelse:\n    dist.all_reduce(t)",
              "--expect CollectiveMismatch")
    assert res.success, res.error_in_exec
    out = plain(capsys.readouterr().out)
    assert "ddplab: this cell failed as it was meant to (CollectiveMismatch):" in out
    assert "broadcast" in out and "all_reduce" in out and "group re-formed" in out
    # a rank's own exception by name; the pool goes on
    assert ddp(ip, "if rank == 3:\n    [][1]", "--expect IndexError").success
    assert "IndexError" in plain(capsys.readouterr().out)
    # another failure is a real one, and a cell that does not fail says so
    assert isinstance(ddp(ip, "if rank == 3:\n    [][1]", "--expect KeyError").error_in_exec, RankFailed)
    missing = ddp(ip, "x = 1", "--expect RankFailed").error_in_exec
    assert isinstance(missing, ExpectedFailureMissing) and "did not" in str(missing)
    assert isinstance(ddp(ip, "pass", "--expect 'not a name'").error_in_exec, UsageError)
    # the same from a script (Lab.run): the expected failure is returned, the others raised
    failure = whole.run("if rank == 3:\n    [][1]", expect="IndexError")
    assert isinstance(failure, RankFailed) and failure.failures[3].ename == "IndexError"
    with pytest.raises(ExpectedFailureMissing, match="meant to fail with RankFailed"):
        whole.run("x = 1", expect="RankFailed")
    with pytest.raises(RankFailed):
        whole.run("if rank == 3:\n    [][1]", expect="KeyError")
    with pytest.raises(BadRequest, match="an error's name"):
        whole.run("pass", expect="not a name")
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)").success and list(whole.states) == ["done"] * 4


def test_a_rank_whose_telemetry_fails_is_not_taken_for_one_that_never_began(pool):
    """Rank 1's telemetry thread fails at every tick, so its "I began the cell" never comes. ipyparallel
    said it began (execute_input): the cell runs to its end, on every rank, well past reply_grace."""
    from ddplab.shared.config import tunables

    pool.run("_flush = ddplab.RANK.sender.flush\n"
             "def _broken(final=False, beat=False, force=False):\n"
             "    if beat:\n        raise OSError('telemetry broken')\n"
             "    return _flush(final=final, beat=beat, force=force)\n"
             "ddplab.RANK.sender.flush = _broken", ranks=[1])
    t = tunables()
    grace, t.reply_grace = t.reply_grace, 1.0
    try:
        result = pool.run("import time\ntime.sleep(2.5)\nt = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())")
    finally:
        t.reply_grace = grace
        pool.run("ddplab.RANK.sender.flush = _flush", ranks=[1])
    assert result.stdout == ["4.0\n"] * 4


def test_a_cell_run_on_the_engines_without_the_lab_is_not_taken_for_the_next_cells_end(pool):
    """A cell run on the lab's engines by other means (view.execute, %px) makes every rank send that cell's
    last batch too. The next %%ddp cell took it for its own: it counted its ranks as finished from the start,
    and reply_grace later as ranks whose result was lost on the way (the cell failed)."""
    from ddplab.shared.config import tunables

    t = tunables()
    grace, t.reply_grace = t.reply_grace, 1.0
    try:
        pool.view_on(range(pool.world_size)).execute("y = 1", block=True)
        result = pool.run("import time\ntime.sleep(2.5)\nprint(y)")
    finally:
        t.reply_grace = grace
    assert result.stdout == ["1\n"] * pool.world_size


def test_a_rank_paused_for_seconds_stays_in_the_pool(pool):
    """py-spy --native (%ddp_stacks --native) stops a rank while it reads its stack, seconds on a loaded
    machine; its heart does not beat meanwhile. The controller must not drop it: it did after 2 s, and the
    group could not form again ("No such engine")."""
    import signal

    pid = pool.info[1]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert pool.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout == ["4.0\n"] * 4
    assert pool.info[1]["pid"] == pid


def test_a_gather_waits_out_a_slow_answer_and_names_a_rank_that_never_answers(pool, monkeypatch):
    """A gather (a push, the history) is not bound by the pool's timeout, which is for collectives (lessons set
    10 s, and a gather on a busy CI machine took longer): it waits DDPLab.answer_timeout, then names the ranks
    that did not answer. Rank 2, stopped, answers after the wait; stopped for longer, it is named."""
    import signal

    from ddplab.shared.config import tunables

    pool.run("g = rank")
    pid = pool.info[2]["pid"]
    monkeypatch.setattr(pool, "config", dataclasses.replace(pool.config, timeout=0.5))
    monkeypatch.setattr(tunables(), "answer_timeout", 3.0)
    os.kill(pid, signal.SIGSTOP)
    try:
        threading.Timer(1.5, os.kill, (pid, signal.SIGCONT)).start()  # answers after three pool timeouts
        assert pool.gather("g") == [0, 1, 2, 3]
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(BadRequest, match=r"^gathering 'g': rank 2 did not answer within 3 s, though no cell runs"):
            pool.gather("g")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert pool.gather("g") == [0, 1, 2, 3]
