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
"""
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..shared import diagnose
from ..shared.config import tunables
from ..shared.errors import UNDELIVERED
from .escalation import Escalation, Waits
from .telemetry import merge

log = logging.getLogger("ddplab")


@dataclass
class Hooks:
    """What the monitor may do to the pool, and nothing more."""

    lost: Callable  # (ranks) -> {rank: why} of the ranks whose engine is gone
    kill: Callable  # (ranks, why): SIGKILL them; they count as lost from then on
    interrupt: Callable  # (ranks): SIGINT
    close_group: Callable  # (ranks): close the process group on these idle ranks
    draw: Callable  # () -> False if the view failed (it is then left alone for the cell)
    cut: Callable | None = None  # (ranks): break these running ranks' links, so collectives that cannot finish fail
    step: Callable | None = None  # (monitor): ranks wait at a breakpoint: ask the user for one debugger command
    collective_timeout: float | None = None  # seconds a collective may wait before it is cut (%ddp_start --timeout)
    interrupted: Callable | None = None  # () -> True once %ddp_interrupt asked a background cell to stop: as Ctrl-C


class Replies:
    """One reply per rank of a cell sent with view.execute.

    ipyparallel's AsyncResult keeps one future per engine (`_children`) and each engine's
    metadata (`_metadata`: stdout, stderr, outputs) but offers them only for all engines at once,
    and its public accessors parse every date field on each call (a few ms per cell). These two
    private attributes are read here and nowhere else (upstream.py lists them; pyproject pins
    ipyparallel to the releases they were tested with). Without them no cell can be watched: the
    cell fails with a line saying which moved."""

    def __init__(self, ar, ranks):
        from ..shared import upstream

        self.ar = ar
        children = upstream.get("ipyparallel.client.asyncresult:AsyncResult._children", ar)
        metadata = upstream.get("ipyparallel.client.asyncresult:AsyncResult._metadata", ar)
        if children is None or metadata is None:
            raise RuntimeError("this ipyparallel has no AsyncResult._children or _metadata, which ddplab needs to "
                               "watch each rank: install the ipyparallel ddplab asks for (pip install .)")
        self.futures = dict(zip(ranks, children))
        self.metadata = dict(zip(ranks, metadata))

    def done(self, rank):
        return self.futures[rank].done()

    def reply(self, rank):
        """The rank's reply (with its execute_result), its exception, or None while it runs."""
        future = self.futures[rank]
        return future.result() if future.done() else None

    def failed(self, rank):
        return isinstance(self.reply(rank), Exception)

    def field(self, rank, key):
        """stdout, stderr or outputs (display_data) of the rank so far."""
        return self.metadata[rank].get(key)

    def wait(self, timeout):
        return self.ar.wait(timeout)  # wakes as soon as every reply is in

    def wait_for_output(self, timeout):
        self.ar.wait_for_output(timeout)  # trailing stdout arrives after the reply


@dataclass
class RankSeen:
    """One rank's part of a cell as the monitor saw it."""

    rank: int
    stdout: str = ""
    stderr: str = ""
    displays: list = field(default_factory=list)
    reply: object = None  # the reply, the exception it raised, or None (never finished)


@dataclass
class Outcome:
    """Everything a cell's monitor saw: per-rank replies, and what went wrong when."""

    ranks: list
    seen: list  # RankSeen per rank, in the order of ranks
    lost: dict = field(default_factory=dict)  # rank -> why its engine is gone
    killed: set = field(default_factory=set)  # ranks killed because they did not stop after SIGINT
    closed: set = field(default_factory=set)  # ranks whose group was closed to free the others
    failed_at: dict = field(default_factory=dict)  # rank -> when it was seen failed or lost
    mismatch: object = None  # diagnose.Mismatch: collectives that could never finish, cut
    waited: str = ""  # where the ranks were, the last time some of them waited in a collective
    timed_out: str = ""  # ranks waited in a collective longer than the pool's timeout: cut (the sentence)
    undelivered: dict = field(default_factory=dict)  # rank -> why: the cell or its result was lost on the way


class Monitor:
    """Watches one cell on `ranks` until every rank has finished or is gone."""

    def __init__(self, replies, ranks, live, telemetry, hooks, lang="en"):
        self.replies, self.ranks, self.live, self.telemetry, self.hooks = replies, ranks, live, telemetry, hooks
        self.lang = lang
        self.started = time.monotonic()
        self.mismatch = None
        self.waited = ""
        t = tunables()
        self.poll_every, self.frame, self.fail_fast = t.poll, t.frame, t.fail_fast
        self.look_every, self.reply_grace = t.look_every, t.reply_grace
        self.escalation = Escalation(Waits.from_settings(t), can_cut=hooks.cut is not None)
        self.escalation.progress(len(ranks), self.started)
        self.last_frame = time.monotonic()  # the first frame a frame into the cell: quick cells draw none
        self.drawn_version = -1
        self.finals = {}  # rank -> when its last batch of the cell arrived (it finished the cell)
        self.undelivered = {}  # rank -> why: the cell never reached it, or its result never reached us
        self.failed_at = {}
        self.lost = {}
        self.closed = set()
        self.killed = set()
        self.interrupted_at = None  # (when SIGINT went out: trouble, for fail_fast)
        self.view_ok = True
        self.looked_at = 0.0
        self.timed_out = ""
        self.cut_for_lost = False  # the running ranks' links were cut once a rank was lost
        self.last_stopped = self.started  # when a rank was last seen stopped at a breakpoint (or the cell began)

    # ------------------------------------------------------------------ telemetry and drawing
    def poll(self):
        """Merge what has arrived; redraw if a frame is due and something changed."""
        now = time.monotonic()
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

    def draw(self, now=None):
        if self.view_ok and self.live.run_state.version != self.drawn_version:
            self.view_ok = self.hooks.draw()  # a view that failed once is left alone for the cell
            self.drawn_version = self.live.run_state.version
        self.last_frame = now if now is not None else time.monotonic()

    # ------------------------------------------------------------------ failures
    def running(self):
        return [r for r in self.ranks if r not in self.lost and r not in self.undelivered and not self.replies.done(r)]

    def _lose(self, rank, why, now):
        self.lost[rank] = why
        self.failed_at.setdefault(rank, now)
        self.live.run_state.fail(rank, why, lost=True)

    def check(self):
        """Note failures and deaths; free ranks blocked on them; escalate after SIGINT. True when
        no rank runs any more."""
        now = time.monotonic()
        for r in self.ranks:
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
        if stopped:  # a person is stepping: nobody waiting for them is stuck, nor late
            self.last_stopped = now
        escalation = self.escalation
        escalation.progress(len(running), now)
        trouble = min([*self.failed_at.values(), self.interrupted_at or float("inf")])
        if running and now - trouble >= self.fail_fast:
            idle = [r for r in self.ranks if r not in running and r not in self.lost and r not in self.closed]
            if idle:
                log.info("closing the group on idle ranks %s: ranks %s wait for a rank that failed", idle, running)
                self.hooks.close_group(idle)
                self.closed.update(idle)
                escalation.wait_again(time.monotonic())  # the peers may now fail by themselves
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
            self.hooks.cut(running)  # fail, the ranks keep their variables
            escalation.did("cut", now)
        elif action == "kill":  # one rank; its death frees its peers, the closing above frees the rest
            stuck = [r for r in running if self._stuck(r)]
            r = (stuck or running)[-1]
            why = f"killed by ddplab: still running {now - self.interrupted_at:.1f} s after SIGINT (stuck in a collective)"
            log.warning("rank %s: %s", r, why)
            self.hooks.kill([r], why)
            self.killed.add(r)
            self._lose(r, why, now)
            escalation.did("kill", now)
        return not self.running()

    def _look_for_lost_messages(self, unfinished, now):
        """A rank that said it finished the cell but whose result has not come reply_grace seconds
        later, or that has not said it began the cell reply_grace seconds into it (though heard
        since the group formed), nor has ipyparallel (its execute_input: a rank whose telemetry
        fails still began): ipyparallel lost the message on the way (a broken connection, junk
        sent to its ports). The cell ends for that rank with an error, instead of waiting forever;
        ranks waiting for it in a collective are cut free."""
        found = []
        for r in unfinished:
            if r in self.lost or r in self.undelivered:
                continue
            if r in self.finals and now - self.finals[r] >= self.reply_grace:
                found.append(r)
                self.undelivered[r] = "reply"
            elif (r not in self.finals and r not in self.live.begun and now - self.started >= self.reply_grace
                  and self.telemetry.heard(r) and not self.replies.field(r, "execute_input")):
                found.append(r)
                self.undelivered[r] = "request"
        for r in found:
            self.failed_at.setdefault(r, now)
            self.live.run_state.fail(r, "{}: {}".format(*UNDELIVERED[self.undelivered[r]]))
            log.warning("rank %s: the cell's %s was lost on the way (%g s)", r, self.undelivered[r], self.reply_grace)
        running = self.running()
        if found and running and self.hooks.cut is not None:
            self.hooks.cut(running)  # they may wait for it in a collective: fail them now, not at gloo's timeout

    def stopped(self, running=None):
        """The running ranks stopped at a breakpoint, pdb waiting for a command."""
        rs = self.live.run_state
        return [r for r in (self.running() if running is None else running) if rs.ranks[r].stopped is not None]

    def _free_from_lost(self, running, now):
        """A rank is lost (its engine or host gone): the group has lost a member, so a collective the
        others wait in can never finish. gloo notices a dead peer's closed connections on its own only
        sometimes (not after the group was re-formed on other hosts: 30 s there): cut their links once,
        fail_fast after the loss."""
        if self.cut_for_lost or not self.lost or now - min(self.failed_at[r] for r in self.lost) < self.fail_fast:
            return
        self.cut_for_lost = True
        log.info("ranks %s lost: cutting the links of ranks %s (their collectives cannot finish)", sorted(self.lost),
                 running)
        self.hooks.cut(running)
        self.escalation.did("cut", now)

    def _look_for_timeout(self, running, now):
        """A collective that waited longer than the pool's timeout (not counting the time a rank was stopped
        at a breakpoint): cut, as gloo's own timeout would have failed it (ddplab forms the group with a
        long one, so that stepping in a debugger is never cut short)."""
        limit = self.hooks.collective_timeout
        if self.timed_out or limit is None:
            return
        rs = self.live.run_state
        late = {r: rs.ranks[r].where for r in running
                if (rs.ranks[r].where or {}).get("op") and min(rs.ranks[r].where.get("since") or 0.0,
                                                              now - self.last_stopped) >= limit}
        if late:
            op = next(iter(late.values()))["op"]
            self.timed_out = diagnose.timed_out(sorted(late), op, limit, self.lang)
            log.info("collective timeout, cutting ranks %s: %s", running, self.timed_out)
            self.hooks.cut(running)
            self.escalation.did("cut", now)

    def _stuck(self, rank):
        """Whether a rank that runs on after SIGINT may be stuck where SIGINT cannot reach: in a
        collective or on a line of the cell (a C call), or no word from its stack at all."""
        where = self.live.run_state.ranks[rank].where
        return not where or bool(where.get("op") or where.get("line"))

    def _look_for_mismatch(self, running, now):
        """Ranks waiting in collectives that can never finish: name them, cut their links (the
        collectives fail at once, long before gloo's timeout); SIGINT if that did not free them."""
        if self.mismatch is None:
            if now - self.started < diagnose.BLOCKED:
                return
            rs = self.live.run_state
            wheres = {r: rs.ranks[r].where for r in self.ranks}
            if any((w or {}).get("since") and w["since"] >= diagnose.BLOCKED for w in wheres.values()):
                self.waited = diagnose.where_text(wheres, self.lang)  # the last picture of ranks waiting
            finished = [r for r in self.ranks if self.replies.done(r) and not self.replies.failed(r)]
            found = diagnose.mismatch({r: rs.ranks[r].where for r in running}, running, finished, rs.world_size,
                                      self.lang, self.ranks, self.live.calls)
            if found is not None:
                log.info("collective mismatch, cutting ranks %s: %s", running, found.text)
                self.mismatch = found
                self.hooks.cut(running)
                self.escalation.did("cut", now)  # if that does not free them: SIGINT after_cut s later

    def interrupt(self):
        """Ctrl-C or the cell's timeout: SIGINT to every rank still running."""
        if self.interrupted_at is None:
            self.interrupted_at = time.monotonic()
            self.escalation.did("interrupt", self.interrupted_at)
            running = self.running()
            if running:
                self.hooks.interrupt(running)

    def wait(self, deadline=None):
        """Until no rank runs; False if `deadline` (perf_counter) passed first."""
        while True:
            wait = self.poll_every if deadline is None else max(0.0, min(self.poll_every,
                                                                          deadline - time.perf_counter()))
            self.replies.wait(wait)
            self.poll()
            if self.hooks.interrupted is not None and self.hooks.interrupted():
                self.interrupt()  # (once; the escalation goes on from there: links cut, then ranks killed)
            if self.check():
                return True
            if self.hooks.step is not None and self.stopped():
                self.hooks.step(self)  # (asks the user: nothing is cut or timed out meanwhile)
            if deadline is not None and time.perf_counter() >= deadline:
                return False

    def settle(self):
        """After interrupt(): wait (ignoring further Ctrl-C) until every rank stopped or was killed,
        at most long enough to escalate to every rank; a rank still running then (its engine does
        not answer) counts as lost."""
        deadline = time.perf_counter() + self.reply_grace + self.escalation.waits.worst(len(self.ranks))
        while True:
            try:
                if self.wait(deadline):
                    return
            except KeyboardInterrupt:
                continue
            if time.perf_counter() >= deadline:
                for r in self.running():
                    self._lose(r, "its engine did not answer after SIGINT and SIGKILL", time.monotonic())
                return

    def finish(self, grace=None):
        """After the cell: collect every rank's last batch (bounded), the trailing output, and
        return what was seen."""
        now = time.monotonic()
        for r, why in self.hooks.lost(self.ranks).items():  # an engine that died may have answered with an
            if r not in self.lost:                          # error first (ipyparallel's "engine died")
                self._lose(r, why, now)
        expected = {r for r in self.ranks if r not in self.lost and r not in self.undelivered}
        deadline = time.monotonic() + (tunables().last_batch if grace is None else grace)
        self.poll()
        while self.telemetry is not None and not expected <= self.finals.keys() and time.monotonic() < deadline:
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
