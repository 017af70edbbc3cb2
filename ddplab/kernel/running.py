"""Running cells on the ranks for the Lab: send a cell, watch it (cell.py, monitor.py), act on what
cell.plan_recovery decided (re-form the group, restart ranks), and say what was done. A cell may run
in the background (Background): a thread watches it as a foreground cell would, while the notebook
goes on (widgets work, knobs reach the ranks).

State shared with the Lab's other threads (busy, the background cell, the last result) changes
only under lab.lock.
"""
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from ..processes.zygote import held as zygote_held
from ..shared.config import ranks_that_fit, tunables
from ..shared.errors import (
    BadRequest,
    CellTimeout,
    CollectiveMismatch,
    CollectiveTimeout,
    DDPLabError,
    ExpectedFailureMissing,
    RankFailed,
)
from ..shared.system import memory_available
from ..shared.timeline import CellSpans
from ..shared.words import ranks_text, say
from . import cell
from .cell import Recovery, RunResult
from .monitor import Hooks
from .telemetry import merge

log = logging.getLogger("ddplab")


class Runner:
    def __init__(self, lab: Any) -> None:  # lab: the Lab (kernel.lab, a layer above)
        self.lab = lab
        self.busy = False  # a cell runs (foreground or background): the watch thread stays out of its way
        self.background: Background | None = None  # the cell running in the background, if any
        self.last_result: RunResult | None = None  # of the last cell, also when it failed or was interrupted

    def run(self, code: str, ranks: Iterable[int] | None = None, timeout: float | None = None,
            background: bool = False) -> "RunResult | Background":
        lab = self.lab
        with lab.lock:
            if self.background is not None and not self.background.done():
                raise BadRequest("a cell runs in the background on the ranks: %ddp_wait waits for its result, "
                                 "%ddp_interrupt stops it")
            chosen: list[int] = lab.check_ranks(ranks)
            if timeout is not None and not timeout > 0:
                raise BadRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
            self.last_result = None
            self.busy = True
            if background:
                self.background = Background(self, code, chosen, timeout)
                return self.background
        try:
            return self.execute(code, chosen, timeout)
        finally:
            with lab.lock:
                self.busy = False

    def run_expecting(self, code: str, name: str, ranks: Iterable[int] | None, timeout: float | None,
                      background: bool = False) -> DDPLabError:
        """Lab.run(..., expect=name): the failure named `name` returned, any other raised."""
        if background or not (isinstance(name, str) and name.isidentifier()):
            raise BadRequest(f"expect={name!r}: give an error's name (like CollectiveMismatch), "
                             "and run the cell in the foreground")
        try:
            self.run(code, ranks, timeout)
        except DDPLabError as exc:
            if name in failure_names(exc):
                return exc
            raise
        raise ExpectedFailureMissing(say(self.lab.config.lang, "the cell was meant to fail with {name}, but it did "
                                         "not", name=name))

    def forget(self, background: "Background") -> None:
        """The background cell is no one's to wait for any more (the pool restarted or stopped under it)."""
        with self.lab.lock:
            if self.background is background:
                self.background = None

    def wait(self, timeout: float | None = None) -> RunResult:
        with self.lab.lock:
            background = self.background
        if background is None:
            raise BadRequest("no cell runs in the background: %%ddp --background starts one")
        return background.result(timeout)

    def execute(self, code: str, ranks: list[int], timeout: float | None,
                background: "Background | None" = None) -> RunResult:
        """Run one cell on `ranks` until every rank is done or gone, then recover; its RunResult."""
        lab = self.lab
        live, rs = lab.live, lab.run_state
        if lab.telemetry is not None:  # what ranks sent since the last cell (the end of a cell run on them without
            for batch in lab.telemetry.batches():  # the lab, a command's ack) is the last cell's: read as this
                merge(live, batch, time.monotonic())  # one's, a last batch in it ended this cell for its rank
        lab.metrics.reset()
        rs.begin_cell(ranks, time.monotonic())
        lab.show("begin")
        tic = time.perf_counter()
        live.hints, live.calls, live.begun, live.stops = {}, {}, set(), {}
        lab.debug.stepper.told = False
        live.spans = live.timelines[rs.cell] = CellSpans(rs.cell, ranks, time.monotonic(), lab.group.clock_offsets,
                                                         live.units, live.groups, lab.group.timeline_every)
        outcome, stopped_by = cell.execute(lab.view_on(ranks), code, ranks, live, lab.telemetry, self.hooks(background),
                                           timeout, lab.config.lang)
        live.spans.finish()
        result = cell.collect(outcome, rs, lab.info, time.perf_counter() - tic)
        with lab.lock:
            self.last_result = result
        plan = cell.plan_recovery(outcome, result)
        destroyed = "destroyed" in live.hints and not plan
        result.recovery = self.recover(plan) + cell.framework_notes(result, lab.config.lang)
        result.hints = self.hints(destroyed)
        rs.end_cell(time.monotonic())
        lab.report.notices()
        if result.recovery:
            rs.set_message(" ".join(result.recovery))
        lab.show("end")
        if stopped_by == "interrupt":
            raise KeyboardInterrupt(" ".join(result.recovery))
        if stopped_by == "timeout":
            raise CellTimeout(self.say("the cell ran longer than {timeout:g} s on {ranks}; every rank was interrupted "
                                       "(SIGINT)", timeout=timeout, ranks=ranks_text(ranks, lab.config.lang))
                              + "".join(f"; {line}" for line in result.recovery))
        if outcome.mismatch is not None:
            raise CollectiveMismatch(outcome.mismatch.text, result.failed, result, self.say)
        if outcome.timed_out:
            raise CollectiveTimeout(outcome.timed_out, result.failed, result, self.say)
        if result.failed:
            raise RankFailed(result.failed, result, self.say)
        lab.export.record(rs.cell, code, None if ranks == list(range(lab.world_size)) else ranks)
        return result

    def say(self, text: str, **values: Any) -> str:
        """`text` in the pool's language (words.say)."""
        return say(self.lab.config.lang, text, **values)

    def hooks(self, background: "Background | None" = None) -> Hooks:
        lab = self.lab
        return Hooks(lost=self.lost, kill=lab.pool.kill, interrupt=lab.pool.interrupt,
                     close_group=lab.group.close, draw=lambda: lab.show("update"), cut=self.cut,
                     step=None if background else lab.debug.stepper.prompt,  # (a background cell: %ddp_step)
                     collective_timeout=lab.config.timeout,
                     interrupted=background.interrupted.is_set if background else None)

    def lost(self, ranks: list[int]) -> dict[int, str]:
        """The ranks of a running cell whose engines are gone; all of them once the pool is stopped under
        it (a background cell then ends at once)."""
        lab = self.lab
        if lab.pool is None:
            return {r: "the pool was stopped" for r in ranks}
        return lab.find_lost(ranks)

    def cut(self, ranks: list[int]) -> None:
        """Tell these running ranks to break their links to their peers (Rank.cut)."""
        lab = self.lab
        ports = sorted({p for i in lab.info for p in i.get("ports", ())})
        log.info("cutting the links of ranks %s", ranks)
        for r in ranks:
            lab.telemetry.command(r, cmd="cut", ports=ports)

    def recover(self, plan: Recovery) -> list[str]:
        """Act on what cell.plan_recovery decided; return what was done, for the user."""
        lab = self.lab
        seconds, stale = 0.0, ()
        try:
            if plan.restart:
                log.info("restarting ranks %s (stuck after SIGINT)", plan.restart)
                seconds = lab.restart_ranks(plan.restart)
            elif plan.reform:
                log.info("re-forming the group after a failed cell")
                seconds, stale = lab.form(time.perf_counter() + lab.config.start_timeout)
        except Exception as exc:  # noqa: BLE001 - the cell's own report comes first; this says what is left
            log.warning("the group could not be formed again", exc_info=True)
            return [f"the group could not be formed again ({type(exc).__name__}: {exc}): %ddp_restart "
                    "(Lab.restart()) brings back a full group"]
        notes = cell.recovery_notes(plan, lab.world_size, tunables().escalate, seconds, stale, lab.config.lang)
        return notes + self.memory_notes(plan.lost)

    def memory_notes(self, lost: list[int]) -> list[str]:
        """Where the OOM killer ended ranks: that the same may happen after %ddp_restart, and what fits."""
        lab = self.lab
        killed = sorted(set(lost) & getattr(lab.pool, "memory_killed", set()))
        if not killed:
            return []
        # what fits once %ddp_stop freed the pool, but fewer ranks than ran out of memory: one at least where the
        # pool had more (the OOM killer may take a second rank while the first one's memory is being freed)
        fewer = max(lab.world_size - len(killed), 1) if lab.world_size > 1 else 0
        fits = min(ranks_that_fit(memory_available() + lab.pool_memory(), zygote_held()), fewer)
        if fits:
            return [lab.config.say("the kernel's OOM killer ended {lost}: %ddp_restart may run out of memory again; "
                                   "%ddp_stop, then %ddp_start {fits}, fits this session",
                                   lost=ranks_text(killed, lab.config.lang), fits=fits)]
        return [lab.config.say("the kernel's OOM killer ended {lost}: %ddp_restart may run out of memory again; close "
                               "other notebooks (their kernels hold memory) first",
                               lost=ranks_text(killed, lab.config.lang))]

    def hints(self, destroyed: bool) -> list[str]:
        """The mistakes the cell made, said once (in the pool's language); a group the cell
        destroyed is formed again here, so the next cell has one."""
        from ..shared.diagnose import hint_text

        lab = self.lab
        lang, hints = lab.config.lang, []
        for key in sorted(lab.live.hints):
            if key == "destroyed":
                if not destroyed:
                    continue  # the group was formed again by the recovery already
                try:
                    seconds, _ = lab.form(time.perf_counter() + lab.config.start_timeout)
                except Exception as exc:  # noqa: BLE001 - said to the user, who can restart
                    log.warning("the group the cell destroyed could not be formed again", exc_info=True)
                    hints.append(f"the cell destroyed the process group and it could not be formed again ({exc}): "
                                 "%ddp_restart")
                    continue
                hints.append(hint_text(key, lang, ms=seconds * 1000))
            else:
                hints.append(hint_text(key, lang))
        return hints


class Background:
    """A cell running in the background: a thread watches it as run() would (dashboard, failures)."""

    def __init__(self, runner: Runner, code: str, ranks: list[int], timeout: float | None) -> None:
        self.runner, self.ranks = runner, ranks
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self.interrupted = threading.Event()  # %ddp_interrupt: the watching monitor interrupts, then escalates
        runner.lab.view_background(True)
        self.thread = threading.Thread(target=self._watch, args=(code, ranks, timeout), name="ddplab-background",
                                       daemon=True)
        self.thread.start()

    def _watch(self, code: str, ranks: list[int], timeout: float | None) -> None:
        lab = self.runner.lab
        try:
            self._result = self.runner.execute(code, ranks, timeout, background=self)
        except BaseException as exc:  # noqa: BLE001 - given to whoever waits
            self._error = exc
        finally:
            with lab.lock:
                self.runner.busy = False
            lab.view_background(False)

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self, timeout: float | None = None) -> RunResult:
        lab = self.runner.lab
        if lab.view.main_thread_only:
            # a front end that draws only what the cell's thread sends (Colab, dashboard/page.py): the
            # frames of the cell in the background are drawn here, by the thread of the cell that waits
            deadline = None if timeout is None else time.monotonic() + timeout
            while self.thread.is_alive() and (deadline is None or time.monotonic() < deadline):
                wait = tunables().frame if deadline is None else min(tunables().frame, deadline - time.monotonic())
                self.thread.join(max(0.0, wait))
                lab.show("update" if self.thread.is_alive() else "end")
        else:
            self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"the background cell still runs after {timeout:g} s")
        with self.runner.lab.lock:
            if self.runner.background is self:
                self.runner.background = None
        if self._error is not None:
            raise self._error
        assert self._result is not None  # (execute() returned it, or raised)
        return self._result

    def __repr__(self) -> str:
        what = "done" if self.done() else "running"
        return f"<a cell in the background on ranks {', '.join(map(str, self.ranks))}: {what}>"


def watch(lab: Any, stopping: threading.Event) -> None:
    """The watch thread: while no cell runs, notice engines that die (so the dashboard shows them
    lost), and messages dropped; until `stopping` is set."""
    from ..shared import state as st

    while not stopping.wait(tunables().watch_every):
        with lab.lock:
            if lab.runner.busy or not lab.running:
                continue
            changed = lab.report.notices()
            for r, why in lab.find_lost().items():
                if lab.run_state.states[r] not in (st.LOST, st.STOPPED):
                    lab.run_state.fail(r, why, lost=True)
                    changed = True
            if changed and getattr(lab.view, "threadsafe", False):
                lab.show("update")


def failure_names(exc: BaseException) -> set[str]:
    """The names a failed cell answers to: its error's classes, and each failed rank's exception."""
    return {k.__name__ for k in type(exc).__mro__} | {f.ename for f in getattr(exc, "failures", {}).values()}
