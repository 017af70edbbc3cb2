"""Lab: a pool of ipyparallel engines that form one torch.distributed gloo group.

Everything the magics do is a call on Lab, so scripts, the CLI and tests use the same path.
Lab is a thin front: the settings are a PoolConfig (config.py), the engines a Pool (pool.py),
the process group a Group (group.py), a cell's run and recovery cell.py, what ranks log arrives
through Telemetry into Live (telemetry.py), and a View draws it (dashboard/view.py). Lab
composes them and acts on what cell.py decides.
"""
import atexit
import os
import secrets
import threading
import time
import weakref
from dataclasses import replace

from . import cell
from . import state as st
from .cell import RankOutput, RunResult
from .config import PoolConfig, tunables
from .dashboard.view import View
from .errors import (BadRequest, CellTimeout, CollectiveMismatch, NameMissing, PoolAlreadyRunning, PoolNotRunning,
                     RankFailed, RankLost, StartFailed)
from .group import Group
from .monitor import Hooks
from .pool import make_pool
from .system import cores, default_ranks, is_gone, max_local_ranks
from .telemetry import Live, Telemetry
from .words import plural, ranks_text

_running_labs = weakref.WeakSet()

__all__ = ["Lab", "RunResult", "RankOutput", "cores", "default_ranks", "max_local_ranks", "is_gone"]


class Lab:
    """A pool of `ranks` engines forming one gloo process group.

    >>> with Lab(ranks=2) as lab:
    ...     lab.run("t = torch.ones(1) * rank; dist.all_reduce(t)")
    ...     lab.gather("t")          # [tensor([1.]), tensor([1.])]

    The settings (see PoolConfig): timeout (seconds a collective may wait before gloo gives up),
    threads_per_rank (default: cores // ranks, at least 1), rendezvous ("file" or
    "tcp://HOST:PORT"), launcher ("local", "local-spawn", or an ipyparallel engine launcher such
    as "mpi"), start_timeout. Or pass a ready PoolConfig as config=.
    """

    def __init__(self, ranks=None, timeout=None, threads_per_rank=None, *, rendezvous="file", launcher=None,
                 start_timeout=None, connect=None, profile=None, cluster_id=None, ifname=None, encrypt=False,
                 config=None):
        self.config = config or PoolConfig.make(ranks, timeout, threads_per_rank, rendezvous=rendezvous,
                                                launcher=launcher, start_timeout=start_timeout, connect=connect,
                                                profile=profile, cluster_id=cluster_id, ifname=ifname, encrypt=encrypt)
        self.live = Live.new(self.config.ranks or 0)  # an attached pool: its size once attached
        self.view = View()  # what shows the pool live: a Dashboard, a TextView, ... (dashboard/view.py)
        self.pool = self.group = self.telemetry = None
        self.faults = {}  # rank -> the fault drill set on it (%ddp_fault)
        self.start_seconds = None
        self.last_result = None  # RunResult of the last run(), also when it failed or was interrupted
        self.cells = []  # (notebook cell number, code, ranks or None): the cells that ran well, for export
        self.background = None  # the cell running in the background, if any (run(..., background=True))
        self.knobs = {}  # name -> value: what set_knob() told the ranks
        self._views = {}
        self._busy = False
        self._lock = threading.RLock()
        self._watching = threading.Event()

    # ------------------------------------------------------------------ what it is
    world_size = property(lambda self: self.config.ranks)
    timeout = property(lambda self: self.config.timeout)
    threads = property(lambda self: self.config.threads)
    @property
    def rendezvous(self):
        """Where the ranks met: a file in the private folder, or a store on rank 0's address."""
        if self.pool is not None and not self.pool.local and self.pool.facts:
            return f"signed store on rank 0 ({self.pool.facts[0]['ip']})"
        return "file (private folder)" if self.config.rendezvous == "file" else self.config.rendezvous
    run_state = property(lambda self: self.live.run_state)
    metrics = property(lambda self: self.live.metrics)
    info = property(lambda self: self.group.info if self.group else [])  # per rank: engine, pid, host, threads

    @property
    def running(self):
        return self.pool is not None and self.pool.client is not None

    @property
    def states(self):
        """The rank states (starting, init, ready, running, training, done, failed, lost, stopped)."""
        return self.run_state.states

    def __enter__(self):
        return self if self.running else self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        what = "running" if self.running else "stopped"
        return f"<Lab {self.world_size} ranks, gloo, {self.threads} thread(s)/rank, {what}>"

    def ready_message(self):
        counts = sorted({i.get("threads") for i in self.info if i.get("threads")}) or [self.threads]
        threads = (f"{counts[0]} {plural(counts[0], 'thread')} per rank" if len(counts) == 1
                   else f"{counts[0]}-{counts[-1]} threads per rank")
        hosts = sorted({i.get("host") for i in self.info if i.get("host")})
        many = self.pool is not None and not self.pool.local and len(hosts) > 1
        if self.config.lang == "zh":
            threads = "-".join(map(str, sorted({counts[0], counts[-1]})))
            where = f"，分布在 {len(hosts)} 台主机上" if many else ""
            return f"{self.world_size} 个 rank 已就绪，用时 {self.start_seconds:.1f} 秒（gloo，每个 rank {threads} 个线程{where}）"
        where = f", on {len(hosts)} hosts" if many else ""
        return f"{self.world_size} ranks ready in {self.start_seconds:.1f} s (gloo, {threads}{where})"

    # ------------------------------------------------------------------ lifecycle
    def _say(self, progress):
        def say(en, zh=None):  # a progress message, in the pool's language when one is given
            message = self.config.say(en, zh or en)
            self.run_state.message = message
            self.run_state.touch()
            if progress is not None:
                progress(message)
            self.show("update")
        return say

    def start(self, progress=None):
        """Start the engines and form the group. progress(message) is called at each stage."""
        if self.running:
            raise PoolAlreadyRunning(
                f"a pool of {self.world_size} ranks is already running: "
                "%ddp_stop (Lab.stop()) first, or %ddp_restart (Lab.restart())")
        tic = time.perf_counter()
        deadline = tic + self.config.start_timeout
        self.live = Live.new(self.config.ranks or 0)
        self.faults = {}
        say = self._say(progress)
        self.pool = make_pool(self.config)
        _running_labs.add(self)
        try:
            engines = self.pool.start(self.config.ranks, deadline, say)
            if len(engines) != self.config.ranks:  # attached to every engine there is
                self.config = replace(self.config, ranks=len(engines))
                self.live = Live.new(len(engines))
            self.run_state.set_all(st.INIT)
            self.telemetry = Telemetry(self.pool.telemetry_where(), secrets.token_bytes(32), curve=self.pool.encrypted)
            self.group = Group(self.pool, self.config, self.telemetry)
            self._form(deadline, say)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (StartFailed, KeyboardInterrupt)):
                raise
            raise StartFailed(f"the pool did not start: {type(exc).__name__}: {exc}") from exc
        self.start_seconds = time.perf_counter() - tic
        self.run_state.message = ""
        self._watching.clear()
        threading.Thread(target=self._watch, name="ddplab-watch", daemon=True).start()
        return self

    def _form(self, deadline, say=None):
        """(Re-)form the group; every rank not marked failed goes init -> ready."""
        seconds, stale = self.group.form(deadline, say)
        self.pool.track(self.group.info)
        for r in range(self.world_size):
            if self.run_state.states[r] != st.FAILED:  # keep the red mark of a failed cell
                self.run_state.set_state(r, st.INIT)
                self.run_state.set_state(r, st.READY)
        return seconds, stale

    def pids(self):
        """Process ids of every process of the pool (for checks that nothing is left)."""
        return self.pool.pids() if self.pool is not None else []

    def stop(self, shutdown=False):
        """End the pool. A pool this notebook started: engines, controller, every helper process
        and the private folder. One attached to engines started elsewhere: the group is left and
        the engines keep running (shutdown=True stops them and their controller)."""
        self._watching.set()
        with self._lock:
            if self.pool is not None:
                if not self.pool.started_engines and self.pool.client is not None:
                    self._leave_group()
                self.pool.stop(shutdown=shutdown)
            self.pool = None
            self._views = {}
            if self.telemetry is not None:
                self.telemetry.close()
                self.telemetry = None
            self.run_state.set_all(st.STOPPED)
            self.show("update")
            _running_labs.discard(self)

    def _leave_group(self):
        from .rank import _leave

        live = [e for e in self.pool.engine_ids if e in self.pool.client.ids]
        try:
            self.pool.client[live].apply_async(_leave).get(timeout=10)
        except Exception:  # noqa: BLE001 - a rank that cannot leave still has its engine; nothing to end
            pass

    def restart(self, progress=None, everything=False):
        """Bring back a full group. If ranks were lost (and everything is not asked), restart
        only those engines: the other ranks keep their variables. Otherwise every rank gets a
        fresh engine (every rank's variables are lost; the controller and the dashboard stay).
        Returns a sentence saying which."""
        self._require_running()
        lost = sorted(self.find_lost())
        say = self.config.say
        if lost and not everything:
            seconds = self.restart_ranks(lost, progress)
            kept = [r for r in range(self.world_size) if r not in lost]
            return say(f"restarted {ranks_text(lost)} in {seconds:.1f} s ({'its' if len(lost) == 1 else 'their'} "
                       f"variables are gone; {ranks_text(kept)} kept theirs); group re-formed",
                       f"已重启 {ranks_text(lost, 'zh')}，用时 {seconds:.1f} 秒（{'它' if len(lost) == 1 else '它们'}的变量"
                       f"已丢失；{ranks_text(kept, 'zh')} 保留了各自的变量）；进程组已重新组建")
        if not self.pool.started_engines:  # engines started elsewhere: the same ones, emptied
            tic = time.perf_counter()
            self._view(list(range(self.world_size))).execute("%reset -f", block=False).get(self.config.start_timeout)
            self._form(tic + self.config.start_timeout, self._say(progress))
            self.start_seconds = time.perf_counter() - tic
            return say(f"restarted: {self.ready_message()}; every rank's variables were cleared, the engines kept",
                       f"已重启：{self.ready_message()}；每个 rank 的变量都已清空，引擎保留")
        self.start_seconds = self.restart_ranks(range(self.world_size), progress)
        return say(f"restarted: {self.ready_message()}; variables from before are gone",
                   f"已重启：{self.ready_message()}；之前的变量都已丢失")

    def restart_ranks(self, ranks, progress=None):
        """Kill (if alive) and restart the engines of `ranks`, then re-form the group on all ranks."""
        tic = time.perf_counter()
        deadline = tic + self.config.start_timeout
        ranks = list(ranks)
        with self._lock:
            say = self._say(progress)
            for r in ranks:
                self.run_state.set_state(r, st.STARTING)
                self.faults.pop(r, None)
            self.pool.replace(ranks, deadline, say)
            for r in ranks:
                self.run_state.set_state(r, st.INIT)
            self._form(deadline, say)
            for r in ranks:
                self.run_state.ranks[r].error = None
            self.show("update")
        return time.perf_counter() - tic

    # ------------------------------------------------------------------ failures
    def find_lost(self, ranks=None):
        """rank -> why, for every rank whose engine is gone."""
        if self.pool is None:
            return {}
        return {r: lost.why for r, lost in self.pool.lost(ranks).items()}

    def kill_ranks(self, ranks, why=None):
        """SIGKILL the engines of `ranks` (and what they started)."""
        self.pool.kill(ranks, why)

    def interrupt(self, ranks=None):
        """Send SIGINT to the given ranks (all by default), like Ctrl-C in each."""
        self.pool.interrupt(list(range(self.world_size)) if ranks is None else ranks)

    def _notices(self):
        """Messages dropped because they were not from this pool: each source once, in the view
        (run_state.notices), with its count. True if something is new."""
        news = dict(self.telemetry.news()) if self.telemetry else {}
        for channel, count in (self.pool.dropped if self.pool else {}).items():
            news["ipyparallel", channel] = (f"{count} malformed message{'s' if count != 1 else ''} dropped on "
                                            f"ipyparallel's {channel} channel")
        changed = [self.run_state.notice(topic, text + " (not from this pool's ranks: ignored)")
                   for topic, text in news.items()]
        return any(changed)

    def _watch(self):
        """While no cell runs, notice engines that die (so the dashboard shows them lost)."""
        while not self._watching.wait(tunables().watch_every):
            with self._lock:
                if self._busy or not self.running:
                    continue
                changed = self._notices()
                for r, why in self.find_lost().items():
                    if self.run_state.states[r] not in (st.LOST, st.STOPPED):
                        self.run_state.fail(r, why, lost=True)
                        changed = True
                if changed and getattr(self.view, "threadsafe", False):
                    self.show("update")

    # ------------------------------------------------------------------ running code
    def _require_running(self):
        if not self.running:
            raise PoolNotRunning()

    def _check_ranks(self, ranks):
        self._require_running()
        if self.background is not None and not self.background.done():
            raise BadRequest("a cell runs in the background on the ranks: %ddp_wait waits for its result, "
                             "%ddp_interrupt stops it")
        if ranks is None:
            ranks = list(range(self.world_size))
        else:
            ranks = list(ranks)
            bad = [r for r in ranks
                   if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size]
            if bad or not ranks:
                raise BadRequest(f"ranks must be among 0..{self.world_size - 1}, got {ranks}")
            ranks = sorted(set(ranks))
        lost = self.find_lost(ranks)
        if lost:
            r, why = next(iter(lost.items()))
            raise RankLost(f"rank {r} is lost ({why}): %ddp_restart (Lab.restart()) brings back a full group")
        return ranks

    def _view(self, ranks):
        """A DirectView on these ranks' engines, kept: a new view per cell costs ~2 ms here."""
        eids = tuple(self.pool.engine_ids[r] for r in ranks)
        view = self._views.get(eids)
        if view is None:
            view = self._views[eids] = self.pool.client[list(eids)]
        return view

    def _hooks(self):
        return Hooks(lost=self.find_lost, kill=self.pool.kill, interrupt=self.pool.interrupt,
                     close_group=self.group.close, draw=lambda: self.show("update"), cut=self._cut)

    def _cut(self, ranks):
        """Tell these running ranks to break their links to their peers (rank._cut)."""
        ports = sorted({p for i in self.info for p in i.get("ports", ())})
        for r in ranks:
            self.telemetry.command(r, cmd="cut", ports=ports)

    def run(self, code, ranks=None, timeout=None, background=False):
        """Run `code` on every rank (or the given ranks); return a RunResult.

        Raises RankFailed if any rank raised or died, root cause first, with what was done about
        it (the group re-formed, ranks restarted). timeout: seconds the cell may run; then every
        rank is interrupted and CellTimeout raised. On KeyboardInterrupt every rank is sent
        SIGINT and the interrupt re-raised. While the cell runs, telemetry (ddplab.log) is
        merged and self.view redrawn.

        background=True returns at once: the cell runs on, watched by a thread (the dashboard stays
        live and the notebook free: widgets work, knobs reach the ranks); wait() gives its result.
        """
        ranks = self._check_ranks(ranks)
        self.last_result = None
        if timeout is not None and not timeout > 0:
            raise BadRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
        with self._lock:
            self._busy = True
        if background:
            self.background = Background(self, code, ranks, timeout)
            return self.background
        try:
            return self._run(code, ranks, timeout)
        finally:
            self._busy = False

    def wait(self, timeout=None):
        """The result of the cell running in the background (run(..., background=True)): waits for
        it, then returns its RunResult or raises what it raised. TimeoutError if it runs on."""
        if self.background is None:
            raise BadRequest("no cell runs in the background: %%ddp --background starts one")
        return self.background.result(timeout)

    def set_knob(self, name, value):
        """Set a knob on every rank, now, even while a cell runs: rank code reads it with
        ddplab.knob(name, default) (e.g. each step). Values: numbers, strings, True/False, None."""
        if not isinstance(name, str) or not name.isidentifier():
            raise BadRequest(f"a knob's name is a word such as 'period', got {name!r}")
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise BadRequest(f"knob {name}: a number, a string, True/False or None, got {type(value).__name__}")
        self._require_running()
        self.knobs[name] = value
        self.group.knobs = self.knobs
        for r in range(self.world_size):
            self.telemetry.command(r, cmd="knob", name=name, value=value)

    def _run(self, code, ranks, timeout):
        self.metrics.reset()
        self.run_state.begin_cell(ranks, time.monotonic())
        self.show("begin")
        tic = time.perf_counter()
        self.live.hints, self.live.calls, self.live.begun = {}, {}, set()
        outcome, stopped_by = cell.execute(self._view(ranks), code, ranks, self.live, self.telemetry, self._hooks(),
                                           timeout, self.config.lang)
        result = self.last_result = cell.collect(outcome, self.run_state, self.info, time.perf_counter() - tic)
        plan = cell.plan_recovery(outcome, result)
        destroyed = "destroyed" in self.live.hints and not plan
        result.recovery = self._recover(plan)
        result.hints = self._hints(destroyed)
        self.run_state.end_cell(time.monotonic())
        self._notices()
        if result.recovery:
            self.run_state.message = " ".join(result.recovery)
        self.show("end")
        if stopped_by == "interrupt":
            raise KeyboardInterrupt(" ".join(result.recovery))
        if stopped_by == "timeout":
            raise CellTimeout(f"the cell ran longer than {timeout:g} s on {ranks_text(ranks)}; every rank was "
                              "interrupted (SIGINT)" + "".join(f"; {line}" for line in result.recovery))
        if outcome.mismatch is not None:
            raise CollectiveMismatch(outcome.mismatch.text, result.failed, result)
        if result.failed:
            raise RankFailed(result.failed, result)
        self.cells.append((self.run_state.cell, code, None if ranks == list(range(self.world_size)) else ranks))
        return result

    def export(self, path, title=None):
        """Write the cells that ran successfully, in order, as a script for torchrun; returns how
        many cells it holds (see export.py)."""
        from .export import script

        if not self.cells:
            raise BadRequest("no %%ddp cell has run successfully yet: nothing to export")
        threads = sorted({i.get("threads") for i in self.info if i.get("threads")}) or [self.threads]
        try:
            text = script(self.cells, self.world_size, threads[0], title, os.path.basename(path), self.config.lang)
        except SyntaxError as exc:
            raise BadRequest(f"a cell is not Python that a script can run (line {exc.lineno}: {exc.msg})") from exc
        with open(path, "w") as f:
            f.write(text)
        return len(self.cells)

    def _hints(self, destroyed):
        """The mistakes the cell made, said once (in the pool's language); a group the cell
        destroyed is formed again here, so the next cell has one."""
        from .diagnose import hint_text

        lang, hints = self.config.lang, []
        for key in sorted(self.live.hints):
            if key == "destroyed":
                if not destroyed:
                    continue  # the group was formed again by the recovery already
                try:
                    seconds, _ = self._form(time.perf_counter() + self.config.start_timeout)
                except Exception as exc:  # noqa: BLE001
                    hints.append(f"the cell destroyed the process group and it could not be formed again ({exc}): "
                                 "%ddp_restart")
                    continue
                hints.append(hint_text(key, lang, ms=seconds * 1000))
            else:
                hints.append(hint_text(key, lang))
        return hints

    def _recover(self, plan):
        """Act on what cell.plan_recovery decided; return what was done, for the user."""
        seconds, stale = 0.0, ()
        try:
            if plan.restart:
                seconds = self.restart_ranks(plan.restart)
            elif plan.reform:
                seconds, stale = self._form(time.perf_counter() + self.config.start_timeout)
        except Exception as exc:  # noqa: BLE001 - the cell's own report comes first; this says what is left
            return [f"the group could not be formed again ({type(exc).__name__}: {exc}): %ddp_restart "
                    "(Lab.restart()) brings back a full group"]
        return cell.recovery_notes(plan, self.world_size, tunables().escalate, seconds, stale)

    def gather(self, name, ranks=None):
        """Value of `name` (a variable or expression) on every rank, as a list indexed by rank."""
        ranks = self._check_ranks(ranks)
        if not isinstance(name, str) or not name.strip():
            raise BadRequest("gather needs a variable name, e.g. gather('loss')")
        ar = self._view(ranks).pull(name, block=False)
        if not ar.wait(self.timeout):
            raise BadRequest(f"gathering {name!r} took longer than {self.timeout:.0f} s: "
                             "are the ranks still running a cell?")
        values = ar.get(return_exceptions=True)
        errors = {r: v for r, v in zip(ranks, values) if isinstance(v, Exception)}
        if errors:
            if all(getattr(e, "ename", "") == "NameError" for e in errors.values()):
                raise NameMissing(f"{name!r} is not defined on rank(s) {', '.join(map(str, errors))}: "
                                  "define it in a %%ddp cell first")
            r, e = next(iter(errors.items()))
            raise BadRequest(f"evaluating {name!r} failed on rank {r}: {getattr(e, 'ename', '')}: "
                             f"{getattr(e, 'evalue', e)}") from e
        return values

    # ------------------------------------------------------------------ looking inside ranks
    def debug_start(self, rank=None):
        """Open pdb on `rank`'s last exception (default: the root cause of the last failed cell);
        returns (rank, the exception and the line it was raised on)."""
        from .probe import debug_start

        if rank is None:
            failed = self.last_result.failure_order if self.last_result is not None else []
            lost = self.find_lost()
            rank = next((r for r in failed if r not in lost), None)
            if rank is None:
                raise BadRequest("no rank failed in the last cell: give one, e.g. %ddp_debug 0")
        (rank,) = self._check_ranks([rank])
        try:
            return rank, self._view([rank]).apply_sync(debug_start)[0]
        except Exception as exc:  # noqa: BLE001 - e.g. no exception on that rank
            raise BadRequest(f"rank {rank}: {getattr(exc, 'evalue', exc)}") from exc

    def debug(self, rank, command):
        """One pdb command on `rank` (after debug_start); what pdb printed."""
        from .probe import debug_command

        return self._view([rank]).apply_sync(debug_command, command)[0]

    def debug_end(self, rank):
        from .probe import debug_end

        self._view([rank]).apply_sync(debug_end)

    def check(self, names=None):
        """Compare the parameters of nn.Modules across ranks (all in the ranks' namespaces, or
        `names`): {name: ranks whose parameters differ from rank 0's (empty: identical)}."""
        from .probe import checksums

        ranks = self._check_ranks(None)
        per_rank = self._view(ranks).apply_async(checksums, names).get(timeout=self.timeout)
        missing = sorted({n for sums in per_rank for n, v in sums.items() if v is None})
        if missing:
            raise NameMissing(f"not an nn.Module on every rank: {', '.join(missing)}")
        found = {}
        for name in sorted(set().union(*per_rank)):
            reference = per_rank[0].get(name)
            found[name] = [r for r, sums in zip(ranks, per_rank) if sums.get(name) != reference]
        return found

    def history(self):
        """Every point every rank logged with ddplab.log, exactly (pulled from the ranks)."""
        from .metrics import History

        ranks = self._check_ranks(None)
        points = self._view(ranks).apply_async(_rank_history).get(timeout=self.timeout)
        return History.from_ranks(dict(zip(ranks, points)), self.live.cell_of)

    def push(self, ranks=None, **values):
        """Set variables in every rank (or the given ranks): lab.push(lr=0.1, data=tensor)."""
        ranks = self._check_ranks(ranks)
        try:
            self._view(ranks).push(values, block=False).get(self.timeout)
        except Exception as exc:  # noqa: BLE001 - e.g. an object that cannot be pickled
            raise BadRequest(f"cannot send {', '.join(values)} to the ranks: {type(exc).__name__}: {exc}") from exc

    def fault(self, kind, rank, at_step=None, factor=None):
        """A fault drill for teaching: kind "kill" (the engine dies), "raise" (the rank raises) or
        "slow" (each of its steps takes `factor` times as long: a straggler); "clear" removes it.
        kill/raise happen at the rank's training step `at_step` (counted by ddplab.log), or
        for kill without at_step: now. Returns a sentence saying what was set."""
        from .rank import _set_fault

        ranks = self._check_ranks([rank])
        if kind not in ("kill", "raise", "slow", "clear"):
            raise BadRequest(f"unknown fault {kind!r}: use kill, raise, slow or clear")
        if kind == "slow" and not (isinstance(factor, (int, float)) and 1 <= factor <= 100):
            raise BadRequest(f"slow needs a factor from 1 to 100 (how many times longer each step takes), got {factor!r}")
        if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0):
            raise BadRequest(f"the step must be a whole number >= 0, got {at_step!r}")
        rs, say = self.run_state, self.config.say
        if kind == "kill" and at_step is None:
            why = "its engine was killed (SIGKILL) by %ddp_fault kill"
            self.pool.kill(ranks, why)
            rs.fail(rank, why, lost=True)
            self.show("update")
            return say(f"rank {rank} killed (SIGKILL); %ddp_restart brings it back",
                       f"rank {rank} 已被终止（SIGKILL）；%ddp_restart 可以让它回来")
        spec = None if kind == "clear" else {"kind": kind, "at_step": at_step, "factor": factor}
        self._view(ranks).apply_sync(_set_fault, spec)
        if spec is None:
            self.faults.pop(rank, None)
            rs.ranks[rank].fault = None
            text = say(f"rank {rank}: no fault drill", f"rank {rank}：没有故障演练")
        elif kind == "slow":
            text = say(f"rank {rank} is a straggler: each step takes {factor:g}x as long (until %ddp_fault clear {rank})",
                       f"rank {rank} 成了慢节点：每一步耗时变为原来的 {factor:g} 倍（直到 %ddp_fault clear {rank}）")
            rs.ranks[rank].fault = f"slow ×{factor:g}"
        else:
            when = (say(f"at step {at_step}", f"在第 {at_step} 步") if at_step is not None
                    else say("at its next step", "在下一步"))
            text = say(f"rank {rank} will {'be killed (SIGKILL)' if kind == 'kill' else 'raise'} {when} "
                       "(ddplab.log counts steps)",
                       f"rank {rank} 将{when}{'被终止（SIGKILL）' if kind == 'kill' else '抛出异常'}（步数由 ddplab.log 计数）")
            rs.ranks[rank].fault = f"{kind} {when}"
        if spec is not None:
            self.faults[rank] = spec
        rs.touch()
        self.show("update")
        return text

    def view_background(self, on):
        """Tell the view whether cells run in the background (it must not display anything then:
        the notebook has moved on to other cells)."""
        if self.view is not None:
            self.view.background = on

    def show(self, what):
        """Call the view (view.begin/update/end(live)); True if it drew. A view that raises is
        reported on stderr, never allowed to break a cell or leave ranks running."""
        if self.view is None:
            return False
        try:
            getattr(self.view, what)(self.live)
            return True
        except Exception as exc:  # noqa: BLE001
            import sys

            print(f"ddplab: the live view failed ({type(exc).__name__}: {exc}); the pool is fine", file=sys.stderr)
            return False

    # ------------------------------------------------------------------ reporting
    def protections(self):
        """What protects each channel of the pool from other accounts: (name, sentence) rows."""
        from .privacy import kernel_channel, protections

        self._require_running()
        pool = self.pool
        network, why = pool.network
        refused = pool.compile_refused or next((i["compile_refused"] for i in self.info if i.get("compile_refused")),
                                               None)
        facts = {"local": pool.local, "network": network, "network_why": why, "signed": pool.signed,
                 "encrypted": pool.encrypted, "controller": None if pool.local else pool.controller_ip(),
                 "telemetry": self.telemetry.address, "compile_refused": refused, "kernel": kernel_channel(),
                 "compile_cache": pool.compile_cache or next((i["compile_cache"] for i in self.info), None)}
        return protections(facts, self.config.lang)

    def exposure(self):
        """What the user should hear once the pool runs, as (warning?, sentence): a refused compile
        cache; and, on a machine with other accounts, whether this kernel's channel is private and
        what of the pool they can reach."""
        from .privacy import kernel_channel, kernel_text, other_accounts

        say, found = self.config.say, []
        refused = {i["compile_refused"] for i in self.info if i.get("compile_refused")} | (
            {self.pool.compile_refused} if self.pool.compile_refused else set())
        found += [(True, text) for text in sorted(refused)]
        others = other_accounts()
        if not others:
            return found
        kernel = kernel_channel()
        if kernel is not None:
            found.append((not kernel["private"],
                          say(f"this machine has {len(others)} other account(s); this kernel's channel: ",
                              f"本机还有 {len(others)} 个其他账户；这个内核的通道：") + kernel_text(kernel, self.config.lang)))
        network, why = self.pool.network
        if self.pool.local and network != "private":
            found.append((True, say(f"gloo listens on this machine's loopback ({why}): its {len(others)} other "
                                    "account(s) can connect to it",
                                    f"gloo 在本机的回环接口上监听（{why}）：本机其他 {len(others)} 个账户可以连接它")))
        return found

    def status(self):
        """One dict per rank: rank, engine, pid, host, address (and interface, across hosts),
        threads, state."""
        rows = []
        for r in range(self.world_size):
            info = self.info[r] if r < len(self.info) and self.running else {}
            address = f"{info['address']} ({info['ifname']})" if info.get("address") else "loopback"
            rows.append({"rank": r, "engine": info.get("engine"), "pid": info.get("pid"),
                         "host": info.get("host"), "address": address if info else None,
                         "threads": info.get("threads"), "state": self.run_state.states[r]})
        return rows


def _rank_history():
    import ddplab.rank

    return ddplab.rank.history()


class Background:
    """A cell running in the background: a thread watches it as run() would (dashboard, failures)."""

    def __init__(self, lab, code, ranks, timeout):
        self.lab, self.ranks = lab, ranks
        self._result = self._error = None
        lab.view_background(True)
        self.thread = threading.Thread(target=self._watch, args=(code, ranks, timeout), name="ddplab-background",
                                       daemon=True)
        self.thread.start()

    def _watch(self, code, ranks, timeout):
        try:
            self._result = self.lab._run(code, ranks, timeout)
        except BaseException as exc:  # noqa: BLE001 - given to whoever waits
            self._error = exc
        finally:
            self.lab._busy = False
            self.lab.view_background(False)

    def done(self):
        return not self.thread.is_alive()

    def result(self, timeout=None):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"the background cell still runs after {timeout:g} s")
        self.lab.background = None
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self):
        what = "done" if self.done() else "running"
        return f"<a cell in the background on ranks {', '.join(map(str, self.ranks))}: {what}>"


@atexit.register
def _stop_all_labs():
    for lab in list(_running_labs):
        try:
            lab.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
