"""Lab: a pool of ipyparallel engines that form one torch.distributed gloo group.

Everything the magics do is a call on Lab, so scripts, the CLI and tests use the same path. Lab
owns the lifecycle (start, stop, restart, status) and composes the rest: the settings are a
PoolConfig (config.py), the engines a Pool (pool.py), the process group a Group (group.py), what
ranks log arrives through Telemetry into Live (telemetry.py) and a View draws it. Cells run
through lab's Runner (running.py); debugging (lab.debug), fault drills (lab.drills), knobs
(lab.knobs), export (lab.export), what the ranks recorded (lab.records) and what the notebook says
about the pool (lab.report) are small objects in their own modules, reached from it.

Threads: a watch thread notices engines that die between cells, and a background cell is watched
by its own thread; state they share with the notebook's thread changes under lab.lock.
"""
import atexit
import gc
import logging
import secrets
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, overload

from ..dashboard.choice import for_here
from ..dashboard.view import View
from ..processes.pools import make_pool
from ..processes.zygote import held as zygote_held
from ..shared import state as st
from ..shared.config import PoolConfig, cores, default_ranks, max_local_ranks, tunables
from ..shared.errors import (
    FLOODED,
    BadRequest,
    DDPLabError,
    NameMissing,
    PoolAlreadyRunning,
    PoolNotRunning,
    RankLost,
    StartFailed,
)
from ..shared.privacy import REDACT
from ..shared.system import is_gone
from ..shared.words import ranks_text
from .cell import RankOutput, RunResult
from .debug import Debugger
from .drills import Drills
from .export import Export
from .group import Group
from .knobs import Knobs
from .records import Records
from .report import Report
from .running import Background, Runner, watch
from .telemetry import Live, Telemetry

if TYPE_CHECKING:
    from types import TracebackType

    from ..processes.pool import Pool
    from ..shared.metrics import LiveMetrics
    from ..shared.state import RankStates, RunState

    Progress = Callable[[str], object]  # progress(message): called at each stage of a start or restart

log = logging.getLogger("ddplab")
_running_labs: "weakref.WeakSet[Lab]" = weakref.WeakSet()

__all__ = ["Lab", "RunResult", "RankOutput", "cores", "default_ranks", "max_local_ranks", "is_gone"]


class Lab:
    """A pool of `ranks` engines forming one gloo process group.

    >>> with Lab(ranks=2) as lab:
    ...     lab.run("t = torch.ones(1) * rank; dist.all_reduce(t)")
    ...     lab.gather("t")          # [tensor([1.]), tensor([1.])]

    The settings (see PoolConfig): timeout (below), threads_per_rank (default: cores // ranks, at
    least 1), rendezvous ("file" or "tcp://HOST:PORT"), launcher ("local", "local-spawn", or an
    ipyparallel engine launcher such as "mpi"), start_timeout, connect / profile / cluster_id
    (engines started elsewhere), ifname, encrypt, force (a local pool: start even where this
    session's memory will not hold the ranks; otherwise BadRequest says what fits and nothing
    starts). Or pass a ready PoolConfig as config=.

    timeout: seconds a collective (all_reduce, barrier, ...) may wait for the other ranks (default
    30, DDPLab.timeout). The notebook enforces it, not gloo: while a cell runs it watches where each
    rank waits, and once a collective has waited longer it cuts the ranks' gloo links, so the
    collective fails, the cell raises CollectiveTimeout and the group is formed again (variables
    kept; ranks that still run are sent SIGINT, then killed and restarted: the escalation of
    docs/architecture.md). Time a rank spends stopped at a breakpoint does not count, and gloo's own
    timeout is a day, so that stepping in a debugger is never cut short. It is not a limit on a
    cell (that is run(timeout=...)), nor on how long gather, push, records.history and debug.check
    wait for the ranks' answers (DDPLab.answer_timeout).
    """

    def __init__(self, ranks: int | None = None, timeout: float | None = None, threads_per_rank: int | None = None, *,
                 rendezvous: str = "file", launcher: str | None = None, start_timeout: float | None = None,
                 connect: str | None = None, profile: str | None = None, cluster_id: str | None = None,
                 ifname: str | None = None, encrypt: bool = False, force: bool = False,
                 config: PoolConfig | None = None) -> None:
        self.config = config or PoolConfig.make(ranks, timeout, threads_per_rank, rendezvous=rendezvous,
                                                launcher=launcher, start_timeout=start_timeout, connect=connect,
                                                profile=profile, cluster_id=cluster_id, ifname=ifname, encrypt=encrypt,
                                                force=force, held=zygote_held())
        self.live = Live.new(self.config.ranks or 0)  # an attached pool: its size once attached
        self.view: View = View()  # what shows the pool live: a Dashboard, a TextView, ... (dashboard/view.py)
        self.pool: Pool | None = None
        self.group: Group | None = None
        self.telemetry: Telemetry | None = None
        self.start_seconds: float | None = None
        self.lock = threading.RLock()
        self.runner, self.debug, self.drills = Runner(self), Debugger(self), Drills(self)
        self.knobs, self.export, self.records, self.report = Knobs(self), Export(self), Records(self), Report(self)
        self._views: dict[tuple[int, ...], Any] = {}  # engine ids -> an ipyparallel DirectView on them
        self._watching = threading.Event()

    # ------------------------------------------------------------------ what it is
    @property
    def world_size(self) -> int | None:
        """How many ranks (None: a pool attached to engines started elsewhere, until it starts: it
        has as many as there are engines)."""
        return self.config.ranks

    def _size(self) -> int:
        """world_size, known: the pool started."""
        n = self.config.ranks
        assert n is not None, "no pool is running"
        return n

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @property
    def threads(self) -> int:
        return self.config.threads

    @property
    def run_state(self) -> "RunState":
        return self.live.run_state

    @property
    def metrics(self) -> "LiveMetrics":
        return self.live.metrics

    @property
    def info(self) -> list[dict[str, Any]]:
        """Per rank, what it reported on joining: engine, pid, host, threads, ..."""
        return self.group.info if self.group else []

    @property
    def last_result(self) -> RunResult | None:
        return self.runner.last_result

    @property
    def background(self) -> Background | None:
        return self.runner.background

    @property
    def rendezvous(self) -> str:
        """Where the ranks met: a file in the private folder, or a store on rank 0's address."""
        return self.pool.rendezvous_text() if self.pool is not None else self.config.rendezvous

    @property
    def running(self) -> bool:
        return self.pool is not None and self.pool.client is not None

    @property
    def states(self) -> "RankStates":
        """The rank states (starting, init, ready, running, training, done, failed, lost, stopped)."""
        return self.run_state.states

    def __enter__(self) -> "Lab":
        return self if self.running else self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: "TracebackType | None") -> None:
        self.stop()

    def __repr__(self) -> str:
        what = "running" if self.running else "stopped"
        return f"<Lab {self.world_size} ranks, gloo, {self.threads} thread(s)/rank, {what}>"

    # ------------------------------------------------------------------ lifecycle
    def _say(self, progress: "Progress | None") -> Callable[..., None]:
        def say(text: str, **values: Any) -> None:  # a progress message, in the pool's language
            message = self.config.say(text, **values)
            self.run_state.set_message(message)
            if progress is not None:
                progress(message)
            self.show("update")
        return say

    def start(self, progress: "Progress | None" = None) -> "Lab":
        """Start the engines and form the group. progress(message) is called at each stage."""
        if self.running:
            raise PoolAlreadyRunning(
                f"a pool of {self.world_size} ranks is already running: "
                "%ddp_stop (Lab.stop()) first, or %ddp_restart (Lab.restart())")
        tic = time.perf_counter()
        deadline = tic + self.config.start_timeout
        self.live = Live.new(self.config.ranks or 0)
        self.drills.forget()
        say = self._say(progress)
        self.pool = make_pool(self.config)
        _running_labs.add(self)
        try:
            engines = self.pool.start(self.config.ranks, deadline, say)
            if len(engines) != self.config.ranks:  # attached to every engine there is
                self.config = replace(self.config, ranks=len(engines))
                self.live = Live.new(len(engines))
            self.run_state.set_all(st.INIT)
            self.telemetry = Telemetry(self.pool.telemetry_where(), secrets.token_bytes(32))
            REDACT.hide(self.telemetry.key, self.telemetry.member[1])
            self.group = Group(self.pool, self.config, self.telemetry)
            self.form(deadline, say)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (StartFailed, KeyboardInterrupt)):
                raise
            raise StartFailed(f"the pool did not start: {type(exc).__name__}: {exc}") from exc
        self.start_seconds = time.perf_counter() - tic
        # what the notebook has loaded by now (ipyparallel, the dashboard, matplotlib: ~100k objects) stays
        # out of the collector's full passes while a pool runs: one took ~90 ms of a cell soon after ready
        gc.freeze()
        self.run_state.set_message("")
        self._watching.clear()
        threading.Thread(target=watch, args=(self, self._watching), name="ddplab-watch", daemon=True).start()
        log.info("pool of %d ranks started in %.1f s", self.world_size, self.start_seconds)
        return self

    def form(self, deadline: float, say: Callable[..., None] | None = None) -> tuple[float, list[tuple[str, str]]]:
        """(Re-)form the group; every rank not marked failed goes init -> ready. Returns (seconds,
        objects tied to the old group)."""
        assert self.group is not None and self.pool is not None  # (formed on a started pool only)
        seconds, stale = self.group.form(deadline, say)
        self.pool.track(self.group.info)
        for account, (n, taken) in self.group.refused.items():
            self.live.refuse(account, n, taken)
        if self.group.refused:
            self.report.notices()
        for r in range(self._size()):
            if self.run_state.states[r] != st.FAILED:  # keep the red mark of a failed cell
                self.run_state.set_state(r, st.INIT)
                self.run_state.set_state(r, st.READY)
        log.info("group formed (generation %d) in %.0f ms", self.group.generation, seconds * 1000)
        return seconds, stale

    def pids(self) -> list[int]:
        """Process ids of every process of the pool (for checks that nothing is left)."""
        return self.pool.pids() if self.pool is not None else []

    def pool_memory(self) -> int:
        """Bytes the pool's processes hold on this machine (their PSS: shared pages counted once), what
        %ddp_stop would free."""
        import psutil

        held = 0
        for pid in self.pids():
            try:
                held += psutil.Process(pid).memory_full_info().pss
            except (psutil.Error, AttributeError):  # (gone; or no PSS on this system)
                continue
        return held

    def stop(self, shutdown: bool = False) -> Literal["stopped", "left", "shut down"] | None:
        """End the pool. A pool this notebook started: engines, controller, every helper process
        and the private folder. One attached to engines started elsewhere: the group is left and
        the engines keep running (shutdown=True stops them and their controller). Returns what
        was done: "stopped", "left" or "shut down" (None if nothing ran)."""
        self._watching.set()
        outcome, background = None, self.runner.background
        with self.lock:
            if self.pool is not None:
                outcome = self.pool.stop(shutdown=shutdown)
            self.pool = None
            self._views = {}
        if background is not None:  # it sees its ranks gone and ends; nothing it does after changes what stop set
            background.thread.join(tunables().control_timeout)
            self.runner.forget(background)
        with self.lock:
            if self.telemetry is not None:
                self.telemetry.close()
                self.telemetry = None
            self.run_state.set_all(st.STOPPED)
            self.show("update")
            _running_labs.discard(self)
            if not _running_labs:
                gc.unfreeze()  # (what became garbage meanwhile is collected again)
        return outcome

    def restart(self, progress: "Progress | None" = None, everything: bool = False) -> str:
        """Bring back a full group. If ranks were lost (and everything is not asked), restart
        only those engines: the other ranks keep their variables. Otherwise every rank starts
        afresh (variables are lost; the controller and the dashboard stay). Returns a sentence
        saying which."""
        self.check_running()
        self.end_background()
        lost = sorted(self.find_lost())
        say = self.config.say
        if lost and not everything:
            seconds = self.restart_ranks(lost, progress)
            kept = [r for r in range(self._size()) if r not in lost]
            lang = self.config.lang
            return say("restarted {lost} in {seconds:.1f} s ({its} variables are gone; {kept} kept theirs); group re-formed",
                       lost=ranks_text(lost, lang), seconds=seconds, kept=ranks_text(kept, lang),
                       its=say("its" if len(lost) == 1 else "their"))
        tic = time.perf_counter()
        with self.lock:
            say_progress = self._say(progress)
            for r in range(self._size()):
                self.run_state.set_state(r, st.STARTING)
            self.drills.forget()
            assert self.pool is not None  # (check_running)
            kept_engines = self.pool.renew(tic + self.config.start_timeout, say_progress)
            for r in range(self._size()):
                self.run_state.set_state(r, st.INIT)
            self.form(tic + self.config.start_timeout, say_progress)
        self.start_seconds = time.perf_counter() - tic
        if kept_engines:
            return say("restarted: {ready}; every rank's variables were cleared, the engines kept",
                       ready=self.report.ready())
        return say("restarted: {ready}; variables from before are gone", ready=self.report.ready())

    def restart_ranks(self, ranks: Iterable[int], progress: "Progress | None" = None) -> float:
        """Kill (if alive) and restart the engines of `ranks`, then re-form the group on all ranks."""
        tic = time.perf_counter()
        deadline = tic + self.config.start_timeout
        ranks = list(ranks)
        log.info("restarting ranks %s", ranks)
        with self.lock:
            say = self._say(progress)
            for r in ranks:
                self.run_state.set_state(r, st.STARTING)
                self.drills.forget(r)
            assert self.pool is not None
            self.pool.replace(ranks, deadline, say)
            for r in ranks:
                self.run_state.set_state(r, st.INIT)
            self.form(deadline, say)
            for r in ranks:
                self.run_state.clear_error(r)
            self.show("update")
        return time.perf_counter() - tic

    # ------------------------------------------------------------------ failures
    def find_lost(self, ranks: Sequence[int] | None = None) -> dict[int, str]:
        """rank -> why, for every rank whose engine is gone."""
        if self.pool is None:
            return {}
        return {r: lost.why for r, lost in self.pool.lost(ranks).items()}

    def end_background(self) -> None:
        """A cell running in the background ends before the pool changes under it (a restart): every
        rank is interrupted (SIGINT), and the cell's own thread recovers as for Ctrl-C (a rank stuck in
        a collective is killed and restarted); waited for, bounded. Its result then says how it ended."""
        background = self.runner.background
        if background is None or background.done():
            return
        log.info("a cell runs in the background: interrupted first")
        self.interrupt()
        t = tunables()
        background.thread.join(t.escalate + t.after_cut + t.start_timeout)
        self.runner.forget(background)

    def interrupt(self, ranks: Sequence[int] | None = None) -> None:
        """Send SIGINT to the given ranks (all by default), like Ctrl-C in each. A cell running in the
        background is stopped as Ctrl-C stops a cell: SIGINT, then, for ranks stuck where it cannot reach
        (inside gloo), their links cut, then the ranks killed (and restarted)."""
        background = self.runner.background
        if ranks is None and background is not None and not background.done():
            background.interrupted.set()
            return
        assert self.pool is not None, "no pool is running"
        self.pool.interrupt(list(range(self._size())) if ranks is None else ranks)

    # ------------------------------------------------------------------ running code
    def _group(self) -> Group:
        assert self.group is not None, "no pool is running"
        return self.group

    def check_running(self) -> None:
        if not self.running:
            raise PoolNotRunning()

    def check_ranks(self, ranks: Iterable[int] | None) -> list[int]:
        """The ranks a request is for (all for None), checked: running, none lost, no cell in the
        background."""
        self.check_running()
        background = self.runner.background
        if background is not None and not background.done():
            raise BadRequest("a cell runs in the background on the ranks: %ddp_wait waits for its result, "
                             "%ddp_interrupt stops it")
        if ranks is None:
            ranks = list(range(self._size()))
        else:
            ranks = list(ranks)
            bad = [r for r in ranks
                   if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self._size()]
            if bad or not ranks:
                raise BadRequest(f"ranks must be among 0..{self._size() - 1}, got {ranks}")
            ranks = sorted(set(ranks))
        lost = self.find_lost()
        if lost and all(FLOODED in why for why in lost.values()):
            self.recover_from_flood(sorted(lost))
            lost = {}
        elif not lost and not self._group().formed:  # the last forming failed (another account took its connections?)
            self.form(time.perf_counter() + self.config.start_timeout)
        lost = {r: why for r, why in lost.items() if r in ranks}
        if lost:
            r, why = next(iter(lost.items()))
            raise RankLost(f"rank {r} is lost ({why}): %ddp_restart (Lab.restart()) brings back a full group")
        return ranks

    def recover_from_flood(self, ranks: list[int]) -> None:
        """Ranks another account killed by flooding their gloo port (guard.py) come back at once, with
        one line saying so: the learner did nothing wrong."""
        say = self.config.say
        seconds = self.restart_ranks(ranks)
        text = say("{ranks} died: {why}; restarted in {seconds:.1f} s (their variables are gone), the group formed again",
                   ranks=ranks_text(ranks, self.config.lang), why=say(FLOODED), seconds=seconds)
        log.warning(text)
        self.run_state.notice(("flooded", tuple(ranks)), text)
        print(f"ddplab: {text}", file=sys.stderr)

    def answers(self, ar: Any, ranks: list[int], what: str, return_exceptions: bool = False) -> list[Any]:
        """The ranks' answers to a request (`ar`, an AsyncResult of their engines, in the order of `ranks`; `what`:
        "gathering 'loss'"). No cell runs on them (check_ranks refuses while one runs in the background), so
        only the machine's load delays them: they are waited for DDPLab.answer_timeout s, and those that did
        not answer are named."""
        wait = tunables().answer_timeout
        if not ar.wait(wait):
            assert self.pool is not None
            outstanding = self.pool.client.outstanding
            silent = [r for r, msg in zip(ranks, ar.msg_ids) if msg in outstanding] or ranks
            raise BadRequest(f"{what}: {ranks_text(silent)} did not answer within {wait:.0f} s, though no cell "
                             "runs: %ddp_status shows each rank's state; %ddp_restart brings back one that hangs")
        return ar.get(return_exceptions=return_exceptions)

    def view_on(self, ranks: Iterable[int]) -> Any:
        """A DirectView on these ranks' engines, kept: a new view per cell costs ~2 ms here."""
        assert self.pool is not None, "no pool is running"
        eids = tuple(self.pool.engine_ids[r] for r in ranks)
        with self.lock:
            view = self._views.get(eids)
            if view is None:
                view = self._views[eids] = self.pool.client[list(eids)]
        return view

    def use_view(self) -> View:
        """Show the pool live where we run (the widget dashboard in a notebook, text elsewhere:
        dashboard/view.py's for_here), from now on; returns that view."""
        self.view = for_here(self.config)
        self.view.show()
        return self.view

    @overload
    def run(self, code: str, ranks: Sequence[int] | None = None, timeout: float | None = None,
            background: Literal[False] = False, expect: None = None) -> RunResult: ...
    @overload
    def run(self, code: str, ranks: Sequence[int] | None = None, timeout: float | None = None, *,
            background: Literal[True], expect: None = None) -> Background: ...
    @overload
    def run(self, code: str, ranks: Sequence[int] | None = None, timeout: float | None = None,
            background: bool = False, *, expect: str) -> DDPLabError: ...
    @overload
    def run(self, code: str, ranks: Sequence[int] | None = None, timeout: float | None = None,
            background: bool = False, expect: str | None = None) -> RunResult | Background | DDPLabError: ...

    def run(self, code: str, ranks: Sequence[int] | None = None, timeout: float | None = None, background: bool = False,
            expect: str | None = None) -> RunResult | Background | DDPLabError:
        """Run `code` on every rank (or the given ranks); return a RunResult.

        Raises RankFailed if any rank raised or died, root cause first, with what was done about
        it (the group re-formed, ranks restarted). timeout: seconds the cell may run (time its ranks
        are stopped at a breakpoint does not count); then every rank is interrupted and CellTimeout
        raised. On KeyboardInterrupt every rank is sent
        SIGINT and the interrupt re-raised. While the cell runs, telemetry (ddplab.log) is
        merged and self.view redrawn.

        background=True returns at once: the cell runs on, watched by a thread (the dashboard stays
        live and the notebook free: widgets work, knobs reach the ranks); wait() gives its result.

        expect="CollectiveMismatch" (the name of ddplab's error or of a failed rank's exception): the
        cell is meant to fail so (a lesson's point); returns that error. Another failure is raised as
        it is; a cell that does not fail raises ExpectedFailureMissing.
        """
        if expect is not None:
            return self.runner.run_expecting(code, expect, ranks, timeout, background)
        return self.runner.run(code, ranks, timeout, background)

    def wait(self, timeout: float | None = None) -> RunResult:
        """The result of the cell running in the background (run(..., background=True)): waits for
        it, then returns its RunResult or raises what it raised. TimeoutError if it runs on."""
        return self.runner.wait(timeout)

    def gather(self, name: str, ranks: Iterable[int] | None = None) -> list[Any]:
        """Value of `name` (a variable or expression) on every rank, as a list indexed by rank."""
        ranks = self.check_ranks(ranks)
        if not isinstance(name, str) or not name.strip():
            raise BadRequest("gather needs a variable name, e.g. gather('loss')")
        ar = self.view_on(ranks).pull(name, block=False)
        values = self.answers(ar, ranks, f"gathering {name!r}", return_exceptions=True)
        errors = {r: v for r, v in zip(ranks, values) if isinstance(v, Exception)}
        if errors:
            if all(getattr(e, "ename", "") == "NameError" for e in errors.values()):
                raise NameMissing(f"{name!r} is not defined on rank(s) {', '.join(map(str, errors))}: "
                                  "define it in a %%ddp cell first")
            r, e = next(iter(errors.items()))
            raise BadRequest(f"evaluating {name!r} failed on rank {r}: {getattr(e, 'ename', '')}: "
                             f"{getattr(e, 'evalue', e)}") from e
        return values

    def push(self, ranks: Iterable[int] | None = None, **values: Any) -> None:
        """Set variables in every rank (or the given ranks): lab.push(lr=0.1, data=tensor)."""
        ranks = self.check_ranks(ranks)
        try:
            self.answers(self.view_on(ranks).push(values, block=False), ranks, f"sending {', '.join(values)}")
        except DDPLabError:
            raise
        except RecursionError as exc:  # ipyparallel cans a notebook's class through its methods' __class__ cell
            classes = [k for k, v in values.items() if isinstance(v, type) and v.__module__ == "__main__"]
            if not classes:
                raise BadRequest(f"cannot send {', '.join(values)} to the ranks: RecursionError: {exc}") from exc
            raise BadRequest(f"cannot send {', '.join(classes)} to the ranks: ipyparallel cannot pickle a class "
                             "defined in this notebook whose methods call super(): define it in a %%ddp cell "
                             "instead") from exc
        except Exception as exc:  # noqa: BLE001 - e.g. an object that cannot be pickled: said in one line
            raise BadRequest(f"cannot send {', '.join(values)} to the ranks: {type(exc).__name__}: {exc}") from exc

    def command(self, cmd: str, wait: bool = True, **values: Any) -> list[int]:
        """Tell every rank `cmd` (a signed telemetry command, rank.Sender); with wait, return once each
        has carried it out (at most DDPLab.control_timeout). The ranks that have not said so."""
        assert self.telemetry is not None, "no pool is running"
        sent = {r: self.telemetry.command(r, cmd=cmd, **values) for r in range(self._size())}
        if not wait:
            return sorted(r for r, seq in sent.items() if seq is None)
        return self.telemetry.confirm(sent, tunables().control_timeout)

    # ------------------------------------------------------------------ showing it
    def view_background(self, on: bool) -> None:
        """Tell the view whether cells run in the background (it must not display anything then:
        the notebook has moved on to other cells)."""
        if self.view is not None:
            self.view.background = on

    def show(self, what: Literal["begin", "update", "end"]) -> bool:
        """Call the view (view.begin/update/end(live)); True if it drew. A view that raises is
        reported on stderr, never allowed to break a cell or leave ranks running."""
        if self.view is None:
            return False
        try:
            getattr(self.view, what)(self.live)
            return True
        except Exception as exc:  # noqa: BLE001 - a broken view must not break a cell; said once on stderr
            import sys

            log.debug("the live view failed", exc_info=True)
            print(f"ddplab: the live view failed ({type(exc).__name__}: {exc}); the pool is fine", file=sys.stderr)
            return False

    def status(self) -> list[dict[str, Any]]:
        """One dict per rank: rank, engine, pid, host, address (and interface, across hosts),
        threads, state (its name, a plain string: "ready", "training", ...)."""
        rows = []
        for r in range(self._size()):
            info = self.info[r] if r < len(self.info) and self.running else {}
            address = f"{info['address']} ({info['ifname']})" if info.get("address") else "loopback"
            rows.append({"rank": r, "engine": info.get("engine"), "pid": info.get("pid"),
                         "host": info.get("host"), "address": address if info else None,
                         "threads": info.get("threads"), "state": self.run_state.states[r].value})  # (plain str)
        return rows


@atexit.register
def _stop_all_labs() -> None:
    for lab in list(_running_labs):
        try:
            lab.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit: the reaper ends what is left
            log.debug("stopping a pool at exit failed", exc_info=True)
