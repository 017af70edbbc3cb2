"""The wait loop of a cell: poll results and telemetry, merge them, redraw (throttled), and get
every rank out of trouble fast.

The monitor sees the pool through a narrow interface (`Hooks`: which ranks are lost, kill,
interrupt, close the group, draw), never the Lab, and reads each rank's reply on its own
(`Replies`). What it saw is returned as an `Outcome`, which cell.py turns into a result.

Failures: when a rank has failed (or died) while others still run, those others are usually
blocked in a collective waiting for it; closing the process group on every rank that is no
longer running makes them fail at once (gloo: "Connection closed by peer"), instead of after
gloo's timeout. After Ctrl-C or a cell timeout every rank gets SIGINT; ranks still running after
that (stuck inside a C++ collective, where SIGINT cannot reach) have their links cut, then are killed
one at a time: the stages and their waits are escalation.py's.

Breakpoints: while a rank of the cell is stopped at one (a person stepping), nothing is cut and no
timeout runs, the cell's own (%%ddp --timeout) included: its end moves on by the time ranks were stopped.

Time: seconds on the monitor's `clock` (time.monotonic unless given; a test gives a fake one, and
drives it), which it hands to its Escalation.
"""
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..shared import diagnose
from ..shared.config import tunables
from ..shared.errors import UNDELIVERED
from .escalation import CUT, Escalation, Waits
from .telemetry import merge

if TYPE_CHECKING:
    from .telemetry import Live, Telemetry

log = logging.getLogger("ddplab")


@dataclass
class Hooks:
    """What the monitor may do to the pool, and nothing more."""

    lost: Callable[[list[int]], dict[int, str]]  # (ranks) -> {rank: why} of the ranks whose engine is gone
    kill: Callable[[list[int], str], object]  # (ranks, why): SIGKILL them; they count as lost from then on
    interrupt: Callable[[list[int]], object]  # (ranks): SIGINT
    close_group: Callable[[list[int]], object]  # (ranks): close the process group on these idle ranks
    draw: Callable[[], bool]  # () -> False if the view failed (it is then left alone for the cell)
    cut: Callable[[list[int]], object] | None = None  # (ranks): break their links (collectives that cannot finish fail)
    step: Callable[["Monitor"], object] | None = None  # ranks wait at a breakpoint: ask the user for one pdb command
    collective_timeout: float | None = None  # seconds a collective may wait before it is cut (%ddp_start --timeout)
    interrupted: Callable[[], bool] | None = None  # () -> True once %ddp_interrupt asked a background cell to stop


class Replies:
    """One reply per rank of a cell sent with view.execute.

    ipyparallel's AsyncResult keeps one future per engine (`_children`) and each engine's
    metadata (`_metadata`: stdout, stderr, outputs) but offers them only for all engines at once,
    and its public accessors parse every date field on each call (a few ms per cell). These two
    private attributes are read here and nowhere else (upstream.py lists them; pyproject pins
    ipyparallel to the releases they were tested with). Without them no cell can be watched: the
    cell fails with a line saying which moved."""

    def __init__(self, ar: Any, ranks: list[int]) -> None:
        from ..shared import upstream

        self.ar = ar
        children = upstream.get("ipyparallel.client.asyncresult:AsyncResult._children", ar)
        metadata = upstream.get("ipyparallel.client.asyncresult:AsyncResult._metadata", ar)
        if children is None or metadata is None:
            raise RuntimeError("this ipyparallel has no AsyncResult._children or _metadata, which ddplab needs to "
                               "watch each rank: install the ipyparallel ddplab asks for (pip install .)")
        self.futures: dict[int, Any] = dict(zip(ranks, children))  # concurrent.futures.Future of each reply
        self.metadata: dict[int, Any] = dict(zip(ranks, metadata))
        self.came = threading.Event()  # a failure, or the last reply, came in since the last wait()
        for future in children:
            future.add_done_callback(self._came)  # (run on ipyparallel's thread)

    def done(self, rank: int) -> bool:
        return bool(self.futures[rank].done())

    def reply(self, rank: int) -> Any:
        """The rank's reply (with its execute_result), its exception, or None while it runs."""
        future = self.futures[rank]
        return future.result() if future.done() else None

    def failed(self, rank: int) -> bool:
        return isinstance(self.reply(rank), Exception)

    def field(self, rank: int, key: str) -> Any:
        """stdout, stderr or outputs (display_data) of the rank so far."""
        return self.metadata[rank].get(key)

    def _came(self, future: Any) -> None:
        failed = future.cancelled() or future.exception() is not None or isinstance(future.result(), Exception)
        if failed or all(f.done() for f in self.futures.values()):
            self.came.set()

    def wait(self, timeout: float) -> None:
        """Until a rank's reply says it failed, or every reply is in, or `timeout` seconds. The monitor
        looks at everything after it returns, so what comes in meanwhile wakes the next wait()."""
        self.came.wait(timeout)
        self.came.clear()

    def wait_for_output(self, timeout: float) -> None:
        self.ar.wait_for_output(timeout)  # trailing stdout arrives after the reply


@dataclass
class RankSeen:
    """One rank's part of a cell as the monitor saw it."""

    rank: int
    stdout: str = ""
    stderr: str = ""
    displays: list[Any] = field(default_factory=list)
    reply: Any = None  # the reply, the exception it raised, or None (never finished)


@dataclass
class Outcome:
    """Everything a cell's monitor saw: per-rank replies, and what went wrong when."""

    ranks: list[int]
    seen: list[RankSeen]  # RankSeen per rank, in the order of ranks
    lost: dict[int, str] = field(default_factory=dict)  # rank -> why its engine is gone
    killed: set[int] = field(default_factory=set)  # ranks killed because they did not stop after SIGINT
    closed: set[int] = field(default_factory=set)  # ranks whose group was closed to free the others
    failed_at: dict[int, float] = field(default_factory=dict)  # rank -> when it was seen failed or lost
    mismatch: diagnose.Mismatch | None = None  # collectives that could never finish, cut
    waited: str = ""  # where the ranks were, the last time some of them waited in a collective
    timed_out: str = ""  # ranks waited in a collective longer than the pool's timeout: cut (the sentence)
    undelivered: dict[int, str] = field(default_factory=dict)  # rank -> why: the cell or its result was lost


class Monitor:
    """Watches one cell on `ranks` until every rank has finished or is gone. replies: Replies (or
    anything with its methods); clock: seconds (time.monotonic unless given)."""

    def __init__(self, replies: Replies, ranks: list[int], live: "Live", telemetry: "Telemetry | None", hooks: Hooks,
                 lang: str = "en", clock: Callable[[], float] = time.monotonic) -> None:
        self.replies, self.ranks, self.live, self.telemetry, self.hooks = replies, ranks, live, telemetry, hooks
        self.lang, self.clock = lang, clock
        self.started = clock()
        self.mismatch: diagnose.Mismatch | None = None
        self.waited = ""
        t = tunables()
        self.poll_every, self.frame, self.fail_fast = t.poll, t.frame, t.fail_fast
        self.look_every, self.reply_grace = t.look_every, t.reply_grace
        self.escalation = Escalation(Waits.from_settings(t), can_cut=hooks.cut is not None, clock=clock)
        self.escalation.progress(len(ranks), self.started)
        self.last_frame = self.started  # the first frame a frame into the cell: quick cells draw none
        self.drawn_version = -1
        self.finals: dict[int, float] = {}  # rank -> when its last batch of the cell arrived (it finished the cell)
        self.replied: dict[int, float] = {}  # rank -> when its reply was first seen in
        self.undelivered: dict[int, str] = {}  # rank -> why: the cell never reached it, or its result never reached us
        self.failed_at: dict[int, float] = {}
        self.lost: dict[int, str] = {}
        self.closed: set[int] = set()
        self.killed: set[int] = set()
        self.interrupted_at: float | None = None  # (when SIGINT went out: trouble, for fail_fast)
        self.view_ok = True
        self.looked_at = self.started - self.look_every  # (the first check looks)
        self.timed_out = ""
        self.cut_for_lost = False  # the running ranks' links were cut once a rank was lost
        self.last_stopped = self.started  # when a rank was last seen stopped at a breakpoint (or the cell began)
        self.paused = 0.0  # seconds ranks of the cell were seen stopped at a breakpoint, before paused_since
        self.paused_since: float | None = None  # since when ranks are seen stopped at one (None: no rank is)

    # ------------------------------------------------------------------ telemetry and drawing
    def poll(self) -> None:
        """Merge what has arrived; redraw if a frame is due and something changed."""
        now = self.clock()
        rs = self.live.run_state
        if self.telemetry is not None:
            for batch in self.telemetry.batches():
                if merge(self.live, batch, now):
                    self.finals.setdefault(batch.rank, now)
        for r in self.ranks:
            rs.set_output(r, self.replies.field(r, "stdout") or "")
        if now - self.last_frame >= self.frame:
            self.live.metrics.sample_total(rs.elapsed(now))
            self.draw(now)

    def draw(self, now: float | None = None) -> None:
        if self.view_ok and self.live.run_state.version != self.drawn_version:
            self.view_ok = self.hooks.draw()  # a view that failed once is left alone for the cell
            self.drawn_version = self.live.run_state.version
        self.last_frame = now if now is not None else self.clock()

    # ------------------------------------------------------------------ failures
    def running(self) -> list[int]:
        return [r for r in self.ranks if r not in self.lost and r not in self.undelivered and not self.replies.done(r)]

    def _lose(self, rank: int, why: str, now: float) -> None:
        self.lost[rank] = why
        self.failed_at.setdefault(rank, now)
        self.live.run_state.fail(rank, why, lost=True)

    def check(self) -> bool:
        """Note failures and deaths; free ranks blocked on them; escalate after SIGINT. True when
        no rank runs any more."""
        now = self.clock()
        for r in self.ranks:
            if r not in self.replied and self.replies.done(r):
                self.replied[r] = now
            if r not in self.failed_at and self.replies.failed(r):
                self.failed_at[r] = now
        unfinished = [r for r in self.ranks if not self.replies.done(r)]
        look = unfinished and (now - self.looked_at >= self.look_every or self.failed_at or self.interrupted_at)
        if look:
            self.looked_at = now
            for r, why in self.hooks.lost(unfinished).items():  # a dead rank never finishes
                if r not in self.lost:
                    self._lose(r, why, now)
        if self.telemetry is not None and unfinished:
            self._look_for_lost_messages(unfinished, now)
        running = self.running()
        stopped = self.stopped(running)
        escalation = self.escalation
        self._note_stopped(bool(stopped), now)
        if stopped and escalation.stage == CUT:  # (before SIGINT: stepping is not being stuck)
            escalation.wait_again(now)
        escalation.progress(len(running), now)
        trouble = min([*self.failed_at.values(), self.interrupted_at or float("inf")])
        if running and now - trouble >= self.fail_fast:
            idle = [r for r in self.ranks if r not in running and r not in self.lost and r not in self.closed]
            if idle:
                log.info("closing the group on idle ranks %s: ranks %s wait for a rank that failed", idle, running)
                self.hooks.close_group(idle)
                self.closed.update(idle)
                escalation.wait_again(self.clock())  # the peers may now fail by themselves
        if running and self.hooks.cut is not None and not stopped:
            self._look_for_mismatch(running, now)
            self._look_for_timeout(running, now)
            self._free_from_lost(running, now)
        if not running:
            return True
        action = escalation.due(now, any_stuck=any(self._stuck(r) for r in running if r not in stopped))
        if action == "interrupt":
            self.interrupt()
        elif action == "cut":  # stuck where SIGINT cannot reach (C++ collectives): their collectives
            self._cut(running)  # fail, the ranks keep their variables
            escalation.did("cut", now)
        elif action == "kill":  # one rank; its death frees its peers, the closing above frees the rest
            stuck = [r for r in running if self._stuck(r)]
            r = (stuck or running)[-1]
            why = (f"killed by ddplab: still running {now - (self.interrupted_at or now):.1f} s after SIGINT (stuck in "
                   "a collective)")
            log.warning("rank %s: %s", r, why)
            self.hooks.kill([r], why)
            self.killed.add(r)
            self._lose(r, why, now)
            escalation.did("kill", now)
        return not self.running()

    def _note_stopped(self, stopped: bool, now: float) -> None:
        """Whether ranks of the cell are stopped at a breakpoint now (a person stepping): nobody waiting for
        them is stuck, nor late, and the time they are stopped is added up (stopped_for)."""
        if stopped:
            self.last_stopped = now
            if self.paused_since is None:
                self.paused_since = now
        elif self.paused_since is not None:
            self.paused += now - self.paused_since
            self.paused_since = None

    def stopped_for(self, now: float | None = None) -> float:
        """Seconds ranks of the cell have been stopped at a breakpoint so far (one or more at a time: counted
        once), as the monitor saw them: time that counts against no timeout."""
        if self.paused_since is None:
            return self.paused
        return self.paused + max(0.0, (self.clock() if now is None else now) - self.paused_since)

    def _look_for_lost_messages(self, unfinished: list[int], now: float) -> None:
        """A rank that said it finished the cell but whose result has not come reply_grace seconds
        later, or that has not said it began the cell reply_grace seconds into it (though heard
        since the group formed), nor has ipyparallel (its execute_input: a rank whose telemetry
        fails still began): ipyparallel lost the message on the way (a broken connection, junk
        sent to its ports). The cell ends for that rank with an error, instead of waiting forever;
        ranks waiting for it in a collective are cut free."""
        telemetry = self.telemetry
        if telemetry is None:  # (check() looks only with telemetry)
            return
        found = []
        for r in unfinished:
            if r in self.lost or r in self.undelivered:
                continue
            if r in self.finals and now - self.finals[r] >= self.reply_grace:
                found.append(r)
                self.undelivered[r] = "reply"
            elif (r not in self.finals and r not in self.live.begun and now - self.started >= self.reply_grace
                  and telemetry.heard(r) and not self.replies.field(r, "execute_input")):
                found.append(r)
                self.undelivered[r] = "request"
        for r in found:
            self.failed_at.setdefault(r, now)
            self.live.run_state.fail(r, "{}: {}".format(*UNDELIVERED[self.undelivered[r]]))
            log.warning("rank %s: the cell's %s was lost on the way (%g s)", r, self.undelivered[r], self.reply_grace)
        running = self.running()
        if found and running and self.hooks.cut is not None:
            self.hooks.cut(running)  # they may wait for it in a collective: fail them now, not at gloo's timeout

    def stopped(self, running: list[int] | None = None) -> list[int]:
        """The running ranks stopped at a breakpoint, pdb waiting for a command."""
        rs = self.live.run_state
        return [r for r in (self.running() if running is None else running) if rs.ranks[r].stopped is not None]

    def _free_from_lost(self, running: list[int], now: float) -> None:
        """A rank is lost (its engine or host gone): the group has lost a member, so a collective the
        others wait in can never finish. gloo notices a dead peer's closed connections on its own only
        sometimes (not after the group was re-formed on other hosts: 30 s there): cut their links once,
        fail_fast after the loss."""
        if self.cut_for_lost or not self.lost or now - min(self.failed_at[r] for r in self.lost) < self.fail_fast:
            return
        self.cut_for_lost = True
        log.info("ranks %s lost: cutting the links of ranks %s (their collectives cannot finish)", sorted(self.lost),
                 running)
        self._cut(running)
        self.escalation.did("cut", now)

    def _cut(self, running: list[int]) -> None:
        if self.hooks.cut is not None:  # (the callers look only where links can be cut)
            self.hooks.cut(running)

    def _look_for_timeout(self, running: list[int], now: float) -> None:
        """A collective that waited longer than the pool's timeout (not counting the time a rank was stopped
        at a breakpoint): cut, as gloo's own timeout would have failed it (ddplab forms the group with a
        long one, so that stepping in a debugger is never cut short)."""
        limit = self.hooks.collective_timeout
        if self.timed_out or limit is None:
            return
        rs = self.live.run_state
        late = {}
        for r in running:
            where = rs.ranks[r].where or {}
            if where.get("op") and min(where.get("since") or 0.0, now - self.last_stopped) >= limit:
                late[r] = where
        if late:
            op = next(iter(late.values()))["op"]
            self.timed_out = diagnose.timed_out(sorted(late), op, limit, self.lang)
            log.info("collective timeout, cutting ranks %s: %s", running, self.timed_out)
            self._cut(running)
            self.escalation.did("cut", now)

    def _stuck(self, rank: int) -> bool:
        """Whether a rank that runs on after SIGINT may be stuck where SIGINT cannot reach: in a
        collective or on a line of the cell (a C call), or no word from its stack at all. A rank that
        sent the cell's last batch has finished it: its result is on the way (on a loaded machine,
        seconds behind), and reply_grace bounds the wait for it."""
        if rank in self.finals:
            return False
        where = self.live.run_state.ranks[rank].where
        return not where or bool(where.get("op") or where.get("line"))

    def _look_for_mismatch(self, running: list[int], now: float) -> None:
        """Ranks waiting in collectives that can never finish: name them, cut their links (the
        collectives fail at once, long before gloo's timeout); SIGINT if that did not free them."""
        if self.mismatch is None:
            if now - self.started < diagnose.BLOCKED:
                return
            rs = self.live.run_state
            wheres = {r: rs.ranks[r].where for r in self.ranks}
            if any(((w or {}).get("since") or 0) >= diagnose.BLOCKED for w in wheres.values()):
                self.waited = diagnose.where_text(wheres, self.lang)  # the last picture of ranks waiting
            finished = [r for r in self.ranks if self.replies.done(r) and not self.replies.failed(r) and self._heard_end(r, now)]
            found = diagnose.mismatch({r: rs.ranks[r].where for r in running}, running, finished, rs.world_size,
                                      self.lang, self.ranks, self.live.calls)
            if found is not None:
                log.info("collective mismatch, cutting ranks %s: %s", running, found.text)
                self.mismatch = found
                self._cut(running)
                self.escalation.did("cut", now)  # if that does not free them: SIGINT after_cut s later

    def _heard_end(self, rank: int, now: float) -> bool:
        """Whether what a rank that finished the cell called is known: its last batch, which says so, is in.
        Its reply comes on another socket and, on a busy machine, first: without the record, a rank that
        went through the collective its peers are still seen in (their reports a moment old) would be taken
        for one that finished without calling it, and cut. reply_grace bounds the wait for a batch lost."""
        return (self.telemetry is None or rank in self.finals
                or now - self.replied.get(rank, now) >= self.reply_grace)

    def interrupt(self) -> None:
        """Ctrl-C or the cell's timeout: SIGINT to every rank still running."""
        if self.interrupted_at is None:
            self.interrupted_at = self.clock()
            self.escalation.did("interrupt", self.interrupted_at)
            running = self.running()
            if running:
                self.hooks.interrupt(running)

    def wait(self, deadline: float | None = None, *, timeout: float | None = None) -> bool:
        """Until no rank runs; False if the cell's time ran out first: at `deadline` (a time.perf_counter()
        value, as cell.py gives it) or `timeout` seconds from now, either moved on by the time ranks of the
        cell are stopped at a breakpoint meanwhile (a person stepping is not timed out)."""
        if deadline is not None and timeout is not None:
            raise TypeError("wait() takes a deadline or a timeout, not both")
        if deadline is not None:
            timeout = deadline - time.perf_counter()  # (the rest on the monitor's clock)
        return self._wait(None if timeout is None else self.clock() + timeout, stepping=True)

    def _wait(self, end: float | None, stepping: bool) -> bool:
        """wait() until `end` (the monitor's clock). stepping: the cell's own wait, where a person steps the ranks
        stopped at a breakpoint (asked for commands; the time they are stopped moves `end` on); not after Ctrl-C
        or the timeout, when ranks are leaving their debuggers and nobody is to be asked again."""
        before = self.stopped_for()

        def due(end: float, now: float) -> float:
            return end + (self.stopped_for(now) - before if stepping else 0.0)

        while True:
            now = self.clock()
            self.replies.wait(self.poll_every if end is None else max(0.0, min(self.poll_every, due(end, now) - now)))
            self.poll()
            if self.hooks.interrupted is not None and self.hooks.interrupted():
                self.interrupt()  # (once; the escalation goes on from there: links cut, then ranks killed)
            if self.check():
                return True
            if stepping and self.hooks.step is not None and self.stopped():
                self.hooks.step(self)  # (asks the user: nothing is cut or timed out meanwhile)
            if end is not None:
                now = self.clock()
                if now >= due(end, now):
                    return False

    def settle(self) -> None:
        """After interrupt(): wait (ignoring further Ctrl-C) until every rank stopped or was killed,
        at most long enough to escalate to every rank; a rank still running then (its engine does
        not answer) counts as lost. (SIGINT takes a rank out of its debugger: this wait is not moved
        on by stepping.)"""
        end = self.clock() + self.reply_grace + self.escalation.waits.worst(len(self.ranks))
        while True:
            try:
                if self._wait(end, stepping=False):
                    return
            except KeyboardInterrupt:
                continue
            if self.clock() >= end:
                for r in self.running():
                    self._lose(r, "its engine did not answer after SIGINT and SIGKILL", self.clock())
                return

    def finish(self, grace: float | None = None) -> Outcome:
        """After the cell: collect every rank's last batch (bounded), the trailing output, and
        return what was seen."""
        now = self.clock()
        for r, why in self.hooks.lost(self.ranks).items():  # an engine that died may have answered with an
            if r not in self.lost:                          # error first (ipyparallel's "engine died")
                self._lose(r, why, now)
        expected = {r for r in self.ranks if r not in self.lost and r not in self.undelivered}
        deadline = now + (tunables().last_batch if grace is None else grace)
        self.poll()
        while self.telemetry is not None and not expected <= self.finals.keys() and self.clock() < deadline:
            self.telemetry.wait(10)  # (ms; wakes as soon as a batch arrives)
            self.poll()
        missing = sorted(expected - self.finals.keys()) if self.telemetry is not None else []
        if missing:  # its points, spans and memory of this cell stop where its last batch did
            log.warning("ranks %s: the last telemetry of the cell did not arrive within %g s: their live view and "
                        "timeline of this cell may be incomplete (%%ddp_history is exact)", missing,
                        tunables().last_batch if grace is None else grace)
        if expected:
            self.replies.wait_for_output(1.0)  # trailing stdout: it follows the reply within milliseconds
        seen = [RankSeen(r, self.replies.field(r, "stdout") or "", self.replies.field(r, "stderr") or "",
                         list(self.replies.field(r, "outputs") or []), self.replies.reply(r))
                for r in self.ranks]
        return Outcome(list(self.ranks), seen, dict(self.lost), set(self.killed), set(self.closed),
                       dict(self.failed_at), self.mismatch, self.waited, self.timed_out, dict(self.undelivered))
