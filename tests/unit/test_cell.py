"""A cell's collection, recovery decisions and wait loop, with fake replies and a fake clock: no engines,
no sleeping."""
import time
from types import SimpleNamespace

import pytest

from ddplab.kernel import escalation as esc_stages
from ddplab.kernel.cell import collect, plan_recovery, recovery_notes, shows_a_value
from ddplab.kernel.escalation import Escalation, Waits
from ddplab.kernel.monitor import Hooks, Monitor, Outcome, RankSeen
from ddplab.kernel.telemetry import Live
from ddplab.shared import state as st
from ddplab.shared.config import tunables
from tests.unit.clock import FakeClock


class Remote(Exception):
    """What ipyparallel gives for a rank that raised: ename, evalue, traceback text."""

    def __init__(self, ename, evalue, traceback=""):
        super().__init__(evalue)
        self.ename, self.evalue, self.traceback = ename, evalue, traceback


CUT = Remote("DistBackendError", "[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242",
             "File torch/distributed/distributed_c10d.py, in all_reduce")
INFO = [{"engine": 10 + r, "pid": 100 + r, "host": "h"} for r in range(4)]


def running_state(n=4):
    rs = st.RunState(n)
    rs.set_all(st.INIT)
    rs.set_all(st.READY)
    rs.begin_cell(list(range(n)), 0.0)
    return rs


def ok(value=None):
    return SimpleNamespace(execute_result={"data": {"text/plain": value}} if value else None)


def test_the_rank_that_raised_is_the_root_cause_and_the_cut_off_ranks_are_its_echoes():
    rs = running_state()
    seen = [RankSeen(0, "a\n", reply=CUT), RankSeen(1, "b\n", reply=Remote("ValueError", "boom", "tb 1\ntb 2")),
            RankSeen(2, reply=CUT), RankSeen(3, reply=CUT)]
    # the echoes were even seen first: order comes from what failed on its own, then time
    outcome = Outcome([0, 1, 2, 3], seen, closed={1}, failed_at={0: 1.0, 2: 1.0, 3: 1.0, 1: 2.0})
    result = collect(outcome, rs, INFO, 0.5)
    assert result.failure_order[0] == 1 and sorted(result.failure_order) == [0, 1, 2, 3]
    err = result.failed[1]
    assert (err.ename, err.evalue, err.traceback_lines) == ("ValueError", "boom", ["tb 1", "tb 2"])
    assert (err.engine_id, err.pid, err.host) == (11, 101, "h")
    assert result.stdout == ["a\n", "b\n", "", ""] and list(rs.states) == [st.FAILED] * 4
    plan = plan_recovery(outcome, result)
    assert plan.reform and not plan.lost and not plan.restart
    notes = recovery_notes(plan, 4, 1.5, 0.04, [("model", "DistributedDataParallel"), ("pg", "ProcessGroup")])
    assert notes == ["group re-formed in 40 ms; variables kept",
                     "these were tied to the old group: model = DDP(model.module); pg (a process group): create it again"]


def test_a_clean_cell_is_done_with_each_ranks_value_and_needs_nothing():
    rs = running_state(2)
    outcome = Outcome([0, 1], [RankSeen(0, reply=ok("0")), RankSeen(1, reply=ok("11"))])
    result = collect(outcome, rs, INFO, 0.1)
    assert result[1].result == {"text/plain": "11"} and not result.failed
    assert list(rs.states) == [st.DONE, st.DONE]
    assert not plan_recovery(outcome, result)
    assert recovery_notes(plan_recovery(outcome, result), 2, 1.5) == []


def test_an_error_outside_torch_distributed_keeps_the_group():
    rs = running_state(2)
    outcome = Outcome([0, 1], [RankSeen(0, reply=Remote("NameError", "name 'x' is not defined")),
                               RankSeen(1, reply=ok())])
    result = collect(outcome, rs, INFO, 0.1)
    assert list(result.failed) == [0] and not plan_recovery(outcome, result)


def test_a_lost_rank_is_reported_with_why_and_left_for_the_user_to_restart():
    rs = running_state()
    rs.ranks[2].step = 37
    outcome = Outcome([0, 1, 2, 3], [RankSeen(0, reply=CUT), RankSeen(1, reply=CUT), RankSeen(2),
                                     RankSeen(3, reply=CUT)],
                      lost={2: "its engine exited with code 3"}, failed_at={2: 1.0, 0: 1.1, 1: 1.1, 3: 1.1})
    result = collect(outcome, rs, INFO, 0.1)
    err = result.failed[2]
    assert result.failure_order[0] == 2 and err.ename == "RankLost" and err.step == 37
    plan = plan_recovery(outcome, result)
    assert plan.lost == [2] and not plan.reform
    assert recovery_notes(plan, 4, 1.5) == ["rank 2 lost: run %ddp_restart (Lab.restart()) to bring back a full "
                                            "group (rank 2 starts fresh; ranks 0, 1, 3 keep their variables)"]


def test_ranks_killed_while_stuck_are_restarted():
    rs = running_state()
    why = "killed by ddplab: still running 1.5 s after SIGINT (stuck in a collective)"
    outcome = Outcome([0, 1, 2, 3], [RankSeen(r, reply=Remote("KeyboardInterrupt", "")) for r in range(3)]
                      + [RankSeen(3)], lost={3: why}, killed={3})
    plan = plan_recovery(outcome, collect(outcome, rs, INFO, 2.0))
    assert plan.restart == [3]
    assert recovery_notes(plan, 4, 1.5, 1.2) == [
        "rank 3 did not stop within 1.5 s of SIGINT and was restarted in 1.2 s (the variables of rank 3 are "
        "gone; ranks 0, 1, 2 kept theirs); group re-formed"]


def test_only_cells_ending_in_an_expression_show_a_value():
    assert shows_a_value("x = 1\nx") and not shows_a_value("x = 1") and shows_a_value("%timeit 1")


class FakeReplies:
    """Ranks that finish when told to; waiting for them moves the fake clock on (as long as asked)."""

    def __init__(self, ranks, clock):
        self.replies = {r: None for r in ranks}
        self.clock = clock

    def done(self, rank):
        return self.replies[rank] is not None

    def reply(self, rank):
        return self.replies[rank]

    def failed(self, rank):
        return isinstance(self.replies[rank], Exception)

    def field(self, rank, key):
        return "" if key != "outputs" else []

    def wait(self, timeout):
        self.clock.advance(timeout)

    def wait_for_output(self, timeout):
        pass


HAIR = 1e-6  # a hair past a wait, to cross it: times are floats (1000.3 - 1000.0 < 0.3)


def fake_monitor(n=3, cut=False, clock=None):
    """A Monitor of n ranks on fake replies and a FakeClock (monitor.clock), and the calls of its hooks."""
    clock = clock or FakeClock()
    calls = {"close": [], "kill": [], "interrupt": [], "draws": 0, "cut": []}
    dead = {}

    def draw():
        calls["draws"] += 1
        return True

    hooks = Hooks(lost=lambda ranks: {r: w for r, w in dead.items() if r in ranks},
                  kill=lambda ranks, why: calls["kill"].append(list(ranks)),
                  interrupt=lambda ranks: calls["interrupt"].append(list(ranks)),
                  close_group=lambda ranks: calls["close"].append(list(ranks)), draw=draw,
                  cut=(lambda ranks: calls["cut"].append(list(ranks))) if cut else None)
    live = Live.new(n)
    live.run_state.set_all(st.INIT)
    live.run_state.set_all(st.READY)
    live.run_state.begin_cell(list(range(n)), clock())
    replies = FakeReplies(range(n), clock)
    return Monitor(replies, list(range(n)), live, None, hooks, clock=clock), replies, calls, dead


def test_the_monitor_closes_the_group_under_ranks_left_waiting_by_a_failure():
    monitor, replies, calls, _ = fake_monitor()
    replies.replies[1] = Remote("ValueError", "boom")
    assert not monitor.check() and calls["close"] == []  # not at once: the others may finish by themselves
    monitor.clock.advance(tunables().fail_fast * 0.9)
    assert not monitor.check() and calls["close"] == []
    monitor.clock.advance(tunables().fail_fast * 0.1 + HAIR)
    assert not monitor.check() and calls["close"] == [[1]]
    monitor.check()
    assert calls["close"] == [[1]]  # once per rank
    replies.replies[0] = replies.replies[2] = CUT
    assert monitor.check()
    outcome = monitor.finish(grace=0)
    assert outcome.closed == {1} and set(outcome.failed_at) == {0, 1, 2}


def test_a_dead_rank_is_lost_and_frees_the_others():
    monitor, replies, calls, dead = fake_monitor()
    dead[2] = "its engine was killed (SIGKILL)"
    replies.replies[0] = ok()
    monitor.check()
    assert monitor.lost == {2: dead[2]} and monitor.live.run_state.states[2] == st.LOST
    monitor.check()
    assert calls["close"] == []
    monitor.clock.advance(tunables().fail_fast + HAIR)
    monitor.check()
    assert calls["close"] == [[0]]  # the idle rank 0; rank 1 still runs, rank 2 is gone


def test_after_sigint_ranks_that_do_not_stop_are_killed_one_at_a_time():
    monitor, replies, calls, _ = fake_monitor()
    monitor.interrupt()
    assert calls["interrupt"] == [[0, 1, 2]]
    monitor.clock.advance(tunables().escalate * 0.9)
    monitor.check()
    assert calls["kill"] == []
    monitor.clock.advance(tunables().escalate * 0.1 + HAIR)
    monitor.check()
    assert calls["kill"] == [[2]] and monitor.killed == {2}
    monitor.clock.advance(tunables().escalate * 0.9)
    monitor.check()
    assert calls["kill"] == [[2]]  # the next one only after another escalate interval without progress
    replies.replies[0] = replies.replies[1] = Remote("KeyboardInterrupt", "")
    assert monitor.check()


def test_after_sigint_links_are_cut_first_and_ranks_leaving_the_cell_are_given_time():
    monitor, replies, calls, _ = fake_monitor(cut=True)
    monitor.interrupt()
    monitor.clock.advance(tunables().escalate + HAIR)
    monitor.check()
    assert calls["cut"] == [[0, 1, 2]] and calls["kill"] == []  # cut first: the ranks keep their variables
    rs = monitor.live.run_state
    rs.set_where(0, {"line": None})  # out of the cell's code: its reply is on the way
    rs.set_where(1, {"line": None})
    rs.set_where(2, {"op": "all_reduce", "line": 3, "since": 4})  # still in a collective
    monitor.clock.advance(tunables().escalate + HAIR)
    monitor.check()
    assert calls["kill"] == [[2]]  # only the rank whose stack says it is stuck
    replies.replies[2] = Remote("KeyboardInterrupt", "")
    monitor.clock.advance(tunables().escalate + HAIR)
    monitor.check()
    assert calls["kill"] == [[2]]  # ranks 0 and 1 leave the cell: not killed for being slow to reply
    monitor.clock.advance(tunables().leave_grace + HAIR)
    monitor.check()
    assert calls["kill"] == [[2], [1]]  # ... unless they never reply


def test_after_sigint_a_rank_that_sent_its_last_batch_is_not_killed_while_its_result_is_on_the_way():
    """On a loaded machine a rank's result can come seconds after its last batch of the cell (which
    clears what the notebook knew of its stack): it finished the cell, it is not stuck."""
    monitor, replies, calls, _ = fake_monitor(cut=True)
    telemetry = monitor.telemetry = FakeTelemetry(heard={0, 1, 2}, clock=monitor.clock)
    rs = monitor.live.run_state
    for r in range(3):
        rs.set_where(r, {"op": "send", "line": 2, "since": 3})
    monitor.interrupt()
    monitor.clock.advance(tunables().escalate + HAIR)
    monitor.check()
    assert calls["cut"] == [[0, 1, 2]]
    telemetry.waiting = [batch(r, begin=True, final=True) for r in range(3)]  # every rank finished the cell
    monitor.poll()
    assert all(rs.ranks[r].where is None for r in range(3))  # (a final batch: where it was is forgotten)
    monitor.clock.advance(tunables().escalate + HAIR)
    monitor.check()
    assert calls["kill"] == []  # none killed: their results are on the way
    replies.replies[0] = replies.replies[1] = replies.replies[2] = Remote("RuntimeError", "Connection closed by peer")
    assert monitor.check() and monitor.killed == set()


def test_the_monitor_redraws_at_most_once_a_frame_and_only_when_something_changed():
    monitor, replies, calls, _ = fake_monitor()
    monitor.poll()
    assert calls["draws"] == 0  # the first frame comes a frame into the cell
    monitor.clock.advance(tunables().frame)
    monitor.poll()
    assert calls["draws"] == 1
    monitor.clock.advance(tunables().frame)
    monitor.poll()
    assert calls["draws"] == 1  # nothing changed
    monitor.live.run_state.touch()
    monitor.clock.advance(tunables().frame / 2)
    monitor.poll()
    assert calls["draws"] == 1  # (not before a frame has passed)
    monitor.clock.advance(tunables().frame / 2)
    monitor.poll()
    assert calls["draws"] == 2


class FakeTelemetry:
    """The telemetry of ranks whose batches the test hands in; waiting moves the fake clock on."""

    def __init__(self, heard, clock):
        self.waiting, self.heard_ranks, self.clock = [], set(heard), clock

    def batches(self):
        out, self.waiting = self.waiting, []
        return out

    def heard(self, rank):
        return rank in self.heard_ranks

    def wait(self, ms):
        self.clock.advance(ms / 1000)


def batch(rank, final=False, begin=False, calls=None):
    from ddplab.shared.wire import Batch

    empty = []
    return Batch(rank, 1, final, empty, empty, empty, empty, [(0.0, "begin", None)] if begin else [], calls=calls)


ALL_REDUCE = {"line": 5, "op": "all_reduce", "group": "default", "shape": [1], "dtype": "float32"}


@pytest.mark.parametrize("rank_0_says", ["went through it", "never called it", "nothing"])
def test_a_rank_whose_reply_comes_before_its_last_batch_is_not_taken_for_one_that_skipped_a_collective(rank_0_says):
    """Lesson 18 on a busy machine: rank 0 computes 4 s, then joins the all_reduce ranks 1-3 wait in, and
    all four go through. Ranks 1 and 2's last batches are in; rank 0's reply came before its last batch
    (another socket), and rank 3's report still shows it waiting. That is no mismatch: rank 0's record of
    what it called is on the way. When it comes, it decides; a batch that never comes is waited for
    reply_grace, then rank 0 counts as having called nothing."""
    monitor, replies, calls, _ = fake_monitor(n=4, cut=True)
    telemetry = monitor.telemetry = FakeTelemetry(heard=range(4), clock=monitor.clock)
    monitor.clock.advance(4.5)
    monitor.live.run_state.set_where(3, dict(ALL_REDUCE, since=4.5, calls=1))
    telemetry.waiting = [batch(r, begin=True, final=True, calls={"calls": 1, "last": ALL_REDUCE}) for r in (1, 2)]
    telemetry.waiting.append(batch(3, begin=True))
    for r in range(3):
        replies.replies[r] = ok()
    monitor.poll()
    assert not monitor.check() and calls["cut"] == [] and monitor.mismatch is None
    monitor.clock.advance(tunables().reply_grace / 2)
    assert not monitor.check() and calls["cut"] == []  # (still on the way)
    if rank_0_says == "nothing":
        monitor.clock.advance(tunables().reply_grace / 2 + HAIR)
    else:
        went = rank_0_says == "went through it"
        telemetry.waiting = [batch(0, begin=True, final=True, calls={"calls": int(went), "last": ALL_REDUCE if went else None})]
        monitor.poll()
    monitor.check()
    if rank_0_says == "went through it":
        assert calls["cut"] == [] and monitor.mismatch is None
    else:
        assert calls["cut"] == [[3]] and "rank 0 finished the cell without calling it" in monitor.mismatch.text


def test_a_cell_or_result_lost_on_the_way_ends_the_cell_with_an_error_not_a_wait():
    """Rank 0 said it finished but its result never came; rank 1 never said it began (though heard
    since the group formed); rank 2 still runs. reply_grace later both are out of the cell, named,
    rank 2 is cut free, and the group is re-formed; the monitor never waits for them."""
    monitor, replies, calls, _ = fake_monitor(cut=True)
    telemetry = monitor.telemetry = FakeTelemetry(heard={0, 1, 2}, clock=monitor.clock)
    telemetry.waiting = [batch(0, begin=True, final=True), batch(2, begin=True)]
    monitor.poll()
    assert not monitor.check() and monitor.undelivered == {}  # not yet: they may be slow
    monitor.clock.advance(tunables().reply_grace * 0.99)
    assert not monitor.check() and monitor.undelivered == {}
    monitor.clock.advance(tunables().reply_grace * 0.01 + HAIR)
    assert not monitor.check()
    assert monitor.undelivered == {0: "reply", 1: "request"} and calls["cut"] == [[2]]
    assert monitor.running() == [2] and monitor.live.run_state.states[0] == st.FAILED
    replies.replies[2] = CUT
    assert monitor.check()
    outcome = monitor.finish(grace=0)
    result = collect(outcome, monitor.live.run_state, INFO, 1.0)
    assert [result.failed[r].ename for r in (0, 1)] == ["ResultNotDelivered", "CellNotDelivered"]
    assert "ipyparallel lost the cell on the way" in result.failed[1].evalue
    assert plan_recovery(outcome, result).reform


def test_a_rank_never_heard_from_is_not_declared_lost_on_the_way():
    """Telemetry that cannot reach the notebook (a firewall between hosts) must not fail every cell."""
    monitor, replies, calls, _ = fake_monitor()
    monitor.telemetry = FakeTelemetry(heard=set(), clock=monitor.clock)
    monitor.clock.advance(2 * tunables().reply_grace)
    assert not monitor.check() and monitor.undelivered == {}


def test_settling_after_sigint_kills_ranks_that_do_not_stop_one_at_a_time():
    monitor, replies, calls, _ = fake_monitor()
    clock = monitor.clock
    monitor.interrupt()
    tic = clock.now
    monitor.settle()
    assert set(monitor.lost) == {0, 1, 2} and calls["kill"] == [[2], [1], [0]]
    assert 3 * tunables().escalate <= clock.now - tic <= 3 * tunables().escalate + 0.5  # (+ a poll after each)


def test_settling_after_sigint_asks_nobody_and_is_bounded_though_a_rank_shows_stopped_at_a_breakpoint():
    """SIGINT takes a rank out of its debugger; one still shows as stopped (the batch saying it left has not
    come): while settling nobody is asked for a command (Ctrl-C at the prompt ends the cell), and the
    escalation goes on as it would without the breakpoint, within its bound."""
    monitor, replies, calls, _ = fake_monitor()
    clock, bound = monitor.clock, monitor.reply_grace + monitor.escalation.waits.worst(3)
    monitor.interrupt()
    tic = clock.now
    monitor.live.run_state.set_stopped(0, STOP)
    asked = []
    monitor.hooks.step = lambda m: asked.append(clock.advance(100))
    monitor.settle()
    assert asked == [] and clock.now - tic <= bound, (asked, clock.now - tic)
    assert set(monitor.lost) == {0, 1, 2} and calls["kill"] == [[2], [1], [0]]


STOP = {"file": "<cell>", "cell": True, "line": 3, "function": "<module>", "code": [[3, "y = x + 1"]]}


@pytest.mark.parametrize("finishes_after", [5.0, None])
def test_time_stopped_at_a_breakpoint_does_not_count_against_the_cells_timeout(finishes_after):
    """%%ddp --timeout 6: rank 0 stopped at a breakpoint for 14 s (a person stepping, two commands of 7 s)
    while ranks 1 and 2 wait for it in an all_reduce, then continued: the cell's end moves on by the time
    it was stopped. Nothing is cut or interrupted meanwhile. finishes_after: seconds the ranks run after
    the continue (None: they never finish, and the cell times out once it ran 6 s besides the 14)."""
    monitor, replies, calls, _ = fake_monitor(cut=True)
    clock, rs = monitor.clock, monitor.live.run_state
    rs.set_stopped(0, STOP)
    for r in (1, 2):
        rs.set_where(r, {"op": "all_reduce", "line": 4, "since": 0.0})
    asked, continued = [], []

    def step(m):  # one pdb command from the person: 7 s to type; the second continues
        asked.append(clock.now)
        clock.advance(7.0)
        if len(asked) == 2:
            rs.set_stopped(0, None)
            continued.append(clock.now)

    def wait(timeout):
        FakeReplies.wait(replies, timeout)
        if finishes_after is not None and continued and clock.now - continued[0] >= finishes_after:
            replies.replies.update({r: ok() for r in range(3)})

    monitor.hooks.step, replies.wait = step, wait
    tic = clock.now
    done = monitor.wait(timeout=6.0)
    assert len(asked) == 2 and calls["cut"] == calls["interrupt"] == calls["kill"] == []
    # stopped from the start until the continue: the 14 s typed, and the monitor's looks between the
    # commands; the monitor sees a rank stop, and go on, at its next look
    stopped, look = continued[0] - tic, monitor.poll_every + HAIR
    assert 14.0 <= stopped and stopped - look <= monitor.stopped_for() <= stopped + look
    if finishes_after is not None:
        assert done, "the cell timed out: the time stopped at a breakpoint counted against its timeout"
        assert clock.now - tic >= stopped + finishes_after  # (more than its 6 s in all)
    else:  # 6 s of running, besides the time stopped
        assert not done and stopped + 6.0 - look <= clock.now - tic <= stopped + 6.0 + look


def test_without_a_breakpoint_the_cells_timeout_is_kept():
    monitor, replies, calls, _ = fake_monitor()
    tic = monitor.clock.now
    assert not monitor.wait(timeout=6.0) and 6.0 <= monitor.clock.now - tic <= 6.01 and monitor.stopped_for() == 0


def test_a_cut_is_not_followed_by_sigint_while_a_rank_is_stopped_at_a_breakpoint():
    """Links cut (collectives that could never finish), then a rank stopped at a breakpoint (the person
    looks at the error): no SIGINT after_cut s later while it is stopped, but after_cut s after it ran on."""
    monitor, replies, calls, _ = fake_monitor(cut=True)
    clock, rs = monitor.clock, monitor.live.run_state
    monitor.escalation.did("cut")
    rs.set_stopped(0, STOP)
    monitor.check()
    clock.advance(2 * tunables().after_cut)
    monitor.check()
    assert calls["interrupt"] == []
    rs.set_stopped(0, None)
    monitor.check()
    clock.advance(tunables().after_cut * 0.9)
    monitor.check()
    assert calls["interrupt"] == []
    clock.advance(tunables().after_cut * 0.1 + HAIR)
    monitor.check()
    assert calls["interrupt"] == [[0, 1, 2]]


def test_what_was_done_after_a_failed_cell_is_said_in_the_pool_language():
    from ddplab.kernel.cell import Recovery

    assert recovery_notes(Recovery(reform=True), 4, 1.5, 0.04, lang="zh") == ["进程组已重新组建，用时 40 毫秒；变量都保留着"]
    lost = recovery_notes(Recovery(lost=[2]), 4, 1.5, lang="zh")[0]
    assert lost.startswith("rank 2 已丢失") and "rank 0、1、3 保留各自的变量" in lost


def test_escalation_goes_cut_then_sigint_then_one_kill_at_a_time_and_progress_restarts_each_wait():
    esc = Escalation(Waits(escalate=1.0, after_cut=3.0, leave_grace=6.0))
    assert esc.due(100.0) is None  # watching: nothing is due however long a cell runs
    esc.progress(4, 0.0)
    esc.did("cut", 0.0)  # collectives that can never finish: links cut
    assert esc.stage == esc_stages.CUT and esc.due(2.9) is None and esc.due(3.0) == "interrupt"
    esc.progress(3, 2.5)  # a rank stopped: the others may follow, the wait starts again
    assert esc.due(5.4) is None and esc.due(5.5) == "interrupt"
    esc.did("interrupt", 5.5)
    assert esc.stage == esc_stages.INTERRUPTED and esc.due(6.4) is None
    assert esc.due(6.5) == "kill"  # the links were cut already: straight to killing
    esc.did("kill", 6.5)
    assert esc.stage == esc_stages.KILLING and esc.due(7.4) is None and esc.due(7.5) == "kill"
    assert esc.due(7.5, any_stuck=False) is None and esc.due(12.5, any_stuck=False) == "kill"  # leave_grace
    esc.wait_again(12.0)  # the group was closed under them: wait again
    assert esc.due(12.5) is None


def test_escalation_after_ctrl_c_cuts_first_where_it_can_and_not_where_it_cannot():
    for can_cut, first in ((True, "cut"), (False, "kill")):
        clock = FakeClock()
        esc = Escalation(Waits(escalate=1.0, after_cut=3.0, leave_grace=6.0), can_cut=can_cut, clock=clock)
        esc.did("interrupt")  # (now: its clock's)
        clock.advance(0.9)
        assert esc.due() is None
        clock.advance(0.1 + HAIR)
        assert esc.due() == first
    assert Waits(1.5, 3.0, 6.0).worst(4) == 1.5 + 4 * 6.0


def test_a_batch_sent_between_cells_keeps_the_history_of_the_cell_it_belongs_to():
    """A rank's cell is numbered by the notebook cell that began it. An ack sent between cells (a knob
    set after the cell) carries the rank's last cell and is read in the next one: it must not move that
    cell's points into the next (they would mix two cells' points in %ddp_history)."""
    from ddplab.kernel.telemetry import merge
    from ddplab.shared.wire import Batch

    live = Live.new(1)
    rs = live.run_state
    rs.set_all(st.INIT)
    rs.set_all(st.READY)

    def batch(cell, events):
        return Batch(0, cell, False, [], [], [], [], events)

    for notebook_cell in (10, 11):
        rs.cell = notebook_cell - 1
        rs.begin_cell([0], time.monotonic())
        if notebook_cell == 11:
            merge(live, batch(5, [(0.0, "ack", "7")]), time.monotonic())  # the knob's ack, of the rank's cell 5
        merge(live, batch(notebook_cell - 5, [(0.0, "begin", None)]), time.monotonic())
    assert live.cell_of == {(0, 5): 10, (0, 6): 11}
    rs.cell = 11
    rs.begin_cell([0], time.monotonic())  # the rank restarted: its cells count from 1 again
    merge(live, batch(1, [(0.0, "begin", None)]), time.monotonic())
    merge(live, batch(5, [(0.0, "begin", None)]), time.monotonic())  # (a begin says which notebook cell it is)
    assert live.cell_of[0, 1] == 12 and live.cell_of[0, 5] == 12
