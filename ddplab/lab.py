"""Lab: a pool of ipyparallel engines that form one torch.distributed gloo group.

Everything the magics do is a call on Lab, so scripts, the CLI and tests use
the same path. The controller, the engines' connection files and the
rendezvous file live in a private temporary directory (mode 0700) that stop()
removes. A small reaper process ends the pool if the process that started it
dies without stopping it (kill -9 of the notebook kernel).
"""
import ast
import atexit
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field

import psutil

from . import state as st
from .errors import (BadRequest, CellTimeout, NameMissing, PoolAlreadyRunning, PoolNotRunning, RankError,
                     RankFailed, RankLost, StartFailed)
from .metrics import LiveMetrics
from .errors import is_echo
from .monitor import ESCALATE, Monitor, Telemetry, per_rank
from .system import (cores, default_ranks, exit_reason, is_gone, kill, loopback_interface, max_local_ranks,
                     wait_gone)

HEARTBEAT_MS = 200  # ipyparallel's default 3000 ms makes registration wait (it completes on a beat)
WATCH_EVERY = 1.0  # seconds between looks for dead engines while no cell runs

# ipyparallel logs every engine's start-up output when we end the pool; ddplab reports what matters
# itself. DDPLAB_DEBUG=1 shows ipyparallel's log on stderr.
_log = logging.getLogger("ddplab.ipyparallel")
_log.propagate = False
if os.environ.get("DDPLAB_DEBUG"):
    _log.addHandler(logging.StreamHandler())
    _log.setLevel(logging.DEBUG)
else:
    _log.addHandler(logging.NullHandler())
    _log.setLevel(logging.CRITICAL)

_running_labs = weakref.WeakSet()

__all__ = ["Lab", "RunResult", "RankOutput", "cores", "default_ranks", "max_local_ranks", "is_gone"]


@dataclass
class RankOutput:
    """What one rank produced while running a cell."""

    rank: int
    stdout: str = ""
    stderr: str = ""
    result: dict = None  # mime bundle of the cell's last expression, like Out[...]
    displays: list = field(default_factory=list)  # display_data outputs (plots, html)
    error: RankError = None


@dataclass
class RunResult:
    """Per-rank outputs of one cell, indexed by rank order of `ranks`."""

    ranks: list
    outputs: list
    seconds: float = 0.0
    failure_order: list = field(default_factory=list)  # failed ranks, root cause first
    recovery: list = field(default_factory=list)  # what ddplab did about failures, for the user

    def __getitem__(self, rank):
        return self.outputs[self.ranks.index(rank)]

    @property
    def stdout(self):
        return [o.stdout for o in self.outputs]

    @property
    def failed(self):
        """rank -> RankError, the root cause first."""
        return {r: self[r].error for r in self.failure_order}


def _int_or_none(value, what, low):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be a whole number, got {value!r}")
    if value < low:
        raise BadRequest(f"{what} must be at least {low}, got {value}")
    return value


def _plural(n, word):
    return f"{word}{'s' if n != 1 else ''}"


def _ranks_text(ranks):
    return f"{_plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"


class Lab:
    """A pool of `ranks` engines forming one gloo process group.

    >>> with Lab(ranks=2) as lab:
    ...     lab.run("t = torch.ones(1) * rank; dist.all_reduce(t)")
    ...     lab.gather("t")          # [tensor([1.]), tensor([1.])]

    timeout: seconds a collective may wait before gloo gives up (short: this is interactive).
    threads_per_rank: torch threads in each rank (default: cores // ranks, at least 1).
    rendezvous: "file" (a FileStore in the pool's private directory; opens no
      port) or "tcp://HOST:PORT" (rank 0 hosts a TCPStore; PORT 0 picks a free one).
    launcher: "local" (engines forked from a zygote that imported torch once: fast),
      "local-spawn" (ipyparallel's own local launcher: each engine starts from scratch), or
      any ipyparallel engine launcher ("mpi", "ssh", "slurm", ...).
    """

    def __init__(self, ranks=None, timeout=30.0, threads_per_rank=None, *, rendezvous="file",
                 launcher="local", start_timeout=120.0):
        ranks = _int_or_none(ranks, "the number of ranks", 1)
        self.world_size = default_ranks() if ranks is None else ranks
        self.local = launcher in ("local", "local-spawn")
        if self.local and self.world_size > max_local_ranks():
            raise BadRequest(
                f"{self.world_size} ranks is more than this machine can hold ({cores()} cores, "
                f"{psutil.virtual_memory().available / 2**30:.1f} GiB free; at most {max_local_ranks()}): "
                f"ask for fewer ranks")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout < 86400:
            raise BadRequest(f"timeout must be a positive number of seconds (under a day), got {timeout!r}")
        self.timeout = float(timeout)
        self.threads = _int_or_none(threads_per_rank, "threads per rank", 1) or max(1, cores() // self.world_size)
        if rendezvous != "file" and not str(rendezvous).startswith("tcp://"):
            raise BadRequest(f"rendezvous must be 'file' or 'tcp://HOST:PORT', got {rendezvous!r}")
        self.rendezvous = rendezvous
        self.launcher = launcher
        self.start_timeout = float(start_timeout)
        self.run_state = st.RunState(self.world_size)
        self.metrics = LiveMetrics(self.world_size)
        self.view = None  # what shows the pool live: a Dashboard, a TextView, ... (view.update(lab))
        self.telemetry = None
        self.info = []  # per rank: engine id, pid, host, threads
        self.faults = {}  # rank -> the fault drill set on it (%ddp_fault)
        self.cell_of = {}  # (rank, the rank's own cell count) -> the notebook's cell number (telemetry)
        self.start_seconds = None
        self.last_result = None  # RunResult of the last run(), also when it failed or was interrupted
        self._cluster = self._client = self._workdir = self._reaper = self._zygote = None
        self._eids, self._procs, self._lost, self._views = [], {}, {}, {}
        self._generation = 0
        self._busy = False
        self._lock = threading.RLock()
        self._watching = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    @property
    def running(self):
        return self._client is not None

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
        threads = f"{self.threads} {_plural(self.threads, 'thread')} per rank"
        return f"{self.world_size} ranks ready in {self.start_seconds:.1f} s (gloo, {threads})"

    def _say(self, progress):
        def say(message):
            self.run_state.message = message
            self.run_state.touch()
            if progress is not None:
                progress(message)
            self._draw()
        return say

    def start(self, progress=None):
        """Start the engines and form the group. progress(message) is called at each stage."""
        if self.running:
            raise PoolAlreadyRunning(
                f"a pool of {self.world_size} ranks is already running: "
                "%ddp_stop (Lab.stop()) first, or %ddp_restart (Lab.restart())")
        tic = time.perf_counter()
        self.run_state = st.RunState(self.world_size)
        self.metrics = LiveMetrics(self.world_size)
        self.faults, self._lost = {}, {}
        say = self._say(progress)
        self._workdir = tempfile.mkdtemp(prefix="ddplab-")
        _running_labs.add(self)
        try:
            self._start_reaper()
            if self.launcher == "local":
                from .launcher import Zygote

                self._zygote = Zygote(self._workdir, self._engine_environment())  # imports while the controller starts
            self._launch(say, tic)
            self._form_group(tic + self.start_timeout, say)
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

    def _start_reaper(self):
        """A process that ends the pool if this one dies without stopping it (see reaper.py)."""
        self._reaper = subprocess.Popen([sys.executable, "-m", "ddplab.reaper", str(os.getpid()), self._workdir],
                                        stdin=subprocess.DEVNULL, start_new_session=True)

    def _engine_environment(self):
        env = {
            # set before torch is imported, so each rank uses its share of the cores
            "OMP_NUM_THREADS": str(self.threads),
            "MKL_NUM_THREADS": str(self.threads),
            "DDPLAB_PARENT_PID": str(os.getpid()),
        }
        if self.local:
            env["GLOO_SOCKET_IFNAME"] = loopback_interface()  # gloo listens on loopback only
        return env

    def _launch(self, say, tic):
        import ipyparallel as ipp
        from traitlets.config import Config

        from .launcher import ForkedEngineSetLauncher

        n = self.world_size
        engines = {"local": ForkedEngineSetLauncher, "local-spawn": "local"}.get(self.launcher, self.launcher)
        self._cluster = cluster = ipp.Cluster(
            profile_dir=self._workdir, cluster_id="ddplab", config=Config(), load_profile=False,
            log=_log, shutdown_atexit=False, engines=engines,
            controller_ip="127.0.0.1" if self.local else "",
            controller_args=[f"--HeartMonitor.period={HEARTBEAT_MS}"])
        say(f"starting {n} ranks: controller ...")
        cluster.start_controller_sync()
        self._client = cluster.connect_client_sync()
        self._eids = self._add_engines(n, tic + self.start_timeout, say)
        self.run_state.set_all(st.INIT)

    def _add_engines(self, n, deadline, say):
        """Start n more engines; return their ids once all have registered."""
        client = self._client
        known = set(client.ids)
        before = set(map(id, self._engine_launchers()))
        self._cluster.start_engines_sync(n, environment=self._engine_environment())
        started = [l for l in self._engine_launchers() if id(l) not in before]
        seen = -1
        while len(set(client.ids) - known) < n:
            new = len(set(client.ids) - known)
            if new != seen:
                seen = new
                say(f"starting {n} {_plural(n, 'engine')}: {new}/{n} up")
            for launcher in started:
                if launcher.process is not None and is_gone(launcher.process):
                    out = launcher.get_output().strip().splitlines()[-3:]
                    raise StartFailed("an engine exited during start-up: " + " | ".join(out))
            if time.perf_counter() > deadline:
                raise StartFailed(f"{n - new} of {n} engines not ready in {self.start_timeout:.0f} s; "
                                  f"ready: {new}: try again, or fewer ranks")
            time.sleep(0.02)
        return sorted(set(client.ids) - known)[:n]

    def _engine_launchers(self):
        for es in self._cluster.engines.values() if self._cluster else ():
            yield from getattr(es, "launchers", {}).values()

    def _form_group(self, deadline, say=None):
        """(Re-)form the gloo group on every rank; returns (seconds, objects tied to the old group)."""
        from .rank import form_group

        tic = time.perf_counter()
        n = self.world_size
        self._generation += 1
        if self.rendezvous == "file":
            where = "file://" + os.path.join(self._workdir, f"rendezvous-{self._generation}")
        else:
            where = self._tcp_rendezvous()
        if say:
            say(f"starting {n} ranks: importing torch, forming the gloo group")
        if self.telemetry is None:
            self.telemetry = Telemetry("127.0.0.1" if self.local else "0.0.0.0")
        ars = [self._client[eid].apply_async(form_group, r, n, where, self.timeout, self.threads,
                                             self.telemetry.address)
               for r, eid in enumerate(self._eids)]
        for ar in ars:
            if not ar.wait(max(0.0, deadline - time.perf_counter())):
                raise StartFailed(f"the gloo group did not form in {self.start_timeout:.0f} s: try again")
        for r, ar in enumerate(ars):
            try:
                ar.get()
            except Exception as exc:  # noqa: BLE001 - reported with its text
                raise StartFailed(f"rank {r} could not join the gloo group: {exc}") from None
        self.info = [dict(ar.get(), engine=eid) for eid, ar in zip(self._eids, ars)]
        launchers = {l.process.pid: l for l in self._engine_launchers() if l.process is not None}
        self._procs = {r: launchers[i["pid"]] for r, i in enumerate(self.info) if i["pid"] in launchers}
        self._write_pids()
        for r in range(n):
            if self.run_state.states[r] != st.FAILED:  # keep the red mark of a failed cell
                self.run_state.set_state(r, st.INIT)
                self.run_state.set_state(r, st.READY)
        stale = sorted({name for i in self.info for name in i.pop("stale", [])})
        return time.perf_counter() - tic, stale

    def _tcp_rendezvous(self):
        """tcp://HOST:PORT with PORT 0 replaced by a port free on this host now."""
        host, _, port = self.rendezvous[len("tcp://"):].rpartition(":")
        if port in ("", "0"):
            import socket

            with socket.socket() as s:
                s.bind((host or "127.0.0.1", 0))
                port = s.getsockname()[1]
        return f"tcp://{host or '127.0.0.1'}:{port}"

    def _pool_processes(self, engines=True):
        """Controller, engines and every process they started (nannies, DataLoader workers)."""
        procs = []
        launchers = [self._cluster.controller] if self._cluster and self._cluster.controller else []
        if engines:
            launchers.extend(self._engine_launchers())
            if self._zygote is not None and self._zygote.proc.poll() is None:
                procs.append(psutil.Process(self._zygote.proc.pid))
        for launcher in launchers:
            proc = getattr(launcher, "process", None)
            if proc is None or is_gone(proc):
                continue
            try:
                procs.append(proc)
                procs.extend(proc.children(recursive=True))
            except psutil.Error:
                pass
        return procs

    def pids(self):
        """Process ids of every process of the pool (for checks that nothing is left)."""
        return [p.pid for p in self._pool_processes()]

    def _write_pids(self):
        """Tell the reaper what to end if this process dies."""
        if self._workdir:
            path = os.path.join(self._workdir, "pool.pids")
            with open(path + ".new", "w") as f:
                f.write("\n".join(map(str, self.pids())))
            os.replace(path + ".new", path)

    def stop(self):
        """End engines, controller and every helper process; remove the private directory."""
        self._watching.set()
        with self._lock:
            # the zygote goes last: it reaps the engines it forked (else they linger as zombies)
            zygote = self._zygote.proc.pid if self._zygote is not None else None
            procs = [p for p in self._pool_processes() if p.pid != zygote]
            controller = self._pool_processes(engines=False)
            if self._client is not None:
                try:
                    self._client.close(linger=0)
                except Exception:  # noqa: BLE001 - closing a broken client must not stop the stop
                    pass
            self._client = None
            self._views = {}
            # Engines take over a second to exit on SIGTERM with torch loaded, and their nannies
            # poll for another second or two: the pool is disposable, so SIGKILL all but the controller.
            for p in procs:
                kill([p], signal.SIGTERM if p in controller else signal.SIGKILL)
            kill(wait_gone(procs, timeout=2.0))
            wait_gone(procs, timeout=2.0)
            if self._cluster is not None:
                try:
                    self._cluster.stop_cluster_sync()  # lets ipyparallel clean its own state and files
                except Exception:  # noqa: BLE001
                    pass
            self._cluster = None
            if self._zygote is not None:
                self._zygote.stop()
                self._zygote = None
            if self._reaper is not None:
                self._reaper.kill()
                self._reaper.wait(5)
                self._reaper = None
            if self._workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None
            if self.telemetry is not None:
                self.telemetry.close()
                self.telemetry = None
            self.run_state.set_all(st.STOPPED)
            self._draw()
            _running_labs.discard(self)

    def restart(self, progress=None, everything=False):
        """Bring back a full group. If ranks were lost (or everything=False is not asked), restart
        only those engines: the other ranks keep their variables. Otherwise a fresh pool with the
        same settings (every rank's variables are lost). Returns a sentence saying which."""
        self._require_running()
        lost = sorted(self.find_lost())
        if lost and not everything:
            seconds = self.restart_ranks(lost, progress)
            kept = [r for r in range(self.world_size) if r not in lost]
            return (f"restarted {_ranks_text(lost)} in {seconds:.1f} s ({_plural(len(lost), 'its')} variables "
                    f"are gone; {_ranks_text(kept)} kept theirs); group re-formed")
        self.stop()
        self.start(progress)
        return f"restarted: {self.ready_message()}; variables from before are gone"

    def restart_ranks(self, ranks, progress=None):
        """Kill (if alive) and restart the engines of `ranks`, then re-form the group on all ranks."""
        tic = time.perf_counter()
        with self._lock:
            self.kill_ranks(ranks)
            say = self._say(progress)
            for r in ranks:
                self.run_state.set_state(r, st.STARTING)
                self.faults.pop(r, None)
            new = self._add_engines(len(ranks), tic + self.start_timeout, say)
            for r, eid in zip(sorted(ranks), new):
                self._eids[r] = eid
                self._lost.pop(r, None)
                self.run_state.set_state(r, st.INIT)
            self._form_group(time.perf_counter() + self.start_timeout, say)
            for r in ranks:
                self.run_state.ranks[r].error = None
            self._draw()
        return time.perf_counter() - tic

    # ------------------------------------------------------------------ failures
    def find_lost(self, ranks=None):
        """rank -> why, for every rank whose engine is gone."""
        for r in range(self.world_size) if ranks is None else ranks:
            if r in self._lost:
                continue
            launcher = self._procs.get(r)
            if launcher is not None:  # a local engine: its process tells, with its exit code
                if self._gone(launcher.process):
                    self._lost[r] = exit_reason(self._exit_code(launcher.process))
            elif self._client is not None and r < len(self._eids) and self._eids[r] not in self._client.ids:
                self._lost[r] = exit_reason(None)  # a remote engine the controller no longer hears
        return {r: why for r, why in self._lost.items() if ranks is None or r in ranks}

    def _gone(self, proc):
        """Cheap (this runs on every cell): a signal-0 probe; the zygote reaps its engines at
        once, so a dead forked engine has no pid left. Otherwise psutil, which tells zombies."""
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False if self._zygote is not None else is_gone(proc)

    def _exit_code(self, proc, wait=0.5):
        """The exit code of a dead local engine. Its parent reaps it: the zygote (which writes
        it down) or ipyparallel's launcher thread (psutil keeps it on that Process object;
        waiting here too would race that thread)."""
        deadline = time.monotonic() + wait
        while True:
            if self._zygote is not None:
                code = self._zygote.exit_code(proc.pid)
            else:
                code = getattr(proc, "_exitcode", None)
            if isinstance(code, int) or time.monotonic() > deadline:
                return code if isinstance(code, int) else None
            time.sleep(0.02)

    def close_group(self, ranks):
        """Close the process group on `ranks` (idle ones), so peers blocked on them fail at once."""
        from .rank import _close_group

        ports = sorted({p for i in self.info for p in i.get("ports", ())})
        try:
            self._view(ranks).apply_async(_close_group, ports).get(timeout=5)
        except Exception:  # noqa: BLE001 - a rank that cannot close its group is dealt with by kill
            pass

    def kill_ranks(self, ranks):
        """SIGKILL the engines of `ranks` (and what they started)."""
        procs = []
        for r in ranks:
            launcher = self._procs.get(r)
            if launcher is not None and not is_gone(launcher.process):
                try:
                    procs.extend([*launcher.process.children(recursive=True), launcher.process])
                except psutil.Error:
                    pass
        kill(procs)
        wait_gone(procs, timeout=3.0)
        if not self.local:
            self._client.shutdown(targets=[self._eids[r] for r in ranks], block=False)

    def _watch(self):
        """While no cell runs, notice engines that die (so the dashboard shows them lost)."""
        while not self._watching.wait(WATCH_EVERY):
            with self._lock:
                if self._busy or not self.running:
                    continue
                for r, why in self.find_lost().items():
                    if self.run_state.states[r] not in (st.LOST, st.STOPPED):
                        self.run_state.fail(r, why, lost=True)
                        if getattr(self.view, "threadsafe", False):
                            self.show("update")

    # ------------------------------------------------------------------ running code
    def _require_running(self):
        if not self.running:
            raise PoolNotRunning()

    def _check_ranks(self, ranks):
        self._require_running()
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
        eids = tuple(self._eids[r] for r in ranks)
        view = self._views.get(eids)
        if view is None:
            view = self._views[eids] = self._client[list(eids)]
        return view

    def run(self, code, ranks=None, timeout=None):
        """Run `code` on every rank (or the given ranks); return a RunResult.

        Raises RankFailed if any rank raised or died, root cause first, with what was done about
        it (the group re-formed, ranks restarted). timeout: seconds the cell may run; then every
        rank is interrupted and CellTimeout raised. On KeyboardInterrupt every rank is sent
        SIGINT and the interrupt re-raised. While the cell runs, telemetry (ddplab.log) is
        merged and self.view redrawn.
        """
        ranks = self._check_ranks(ranks)
        self.last_result = None
        if timeout is not None and not timeout > 0:
            raise BadRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
        with self._lock:
            self._busy = True
        try:
            return self._run(code, ranks, timeout)
        finally:
            self._busy = False

    def _run(self, code, ranks, timeout):
        self.metrics.reset()
        self.run_state.begin_cell(ranks, time.monotonic())
        self.show("begin")
        tic = time.perf_counter()
        ar = self._view(ranks).execute(code, silent=not _shows_a_value(code), block=False)
        monitor = Monitor(self, ar, ranks)
        stopped_by = None
        try:
            if not monitor.wait(None if timeout is None else tic + timeout):
                stopped_by = "timeout"
        except KeyboardInterrupt:
            stopped_by = "interrupt"
        if stopped_by:
            monitor.interrupt()
            monitor.settle()
        monitor.finish()
        result = self._collect(monitor, tic)
        result.recovery = self._recover(monitor, result)
        self.run_state.end_cell(time.monotonic())
        if result.recovery:
            self.run_state.message = " ".join(result.recovery)
        self.show("end")
        if stopped_by == "interrupt":
            raise KeyboardInterrupt(" ".join(result.recovery))
        if stopped_by == "timeout":
            raise CellTimeout(f"the cell ran longer than {timeout:g} s on {_ranks_text(ranks)}; every rank was "
                              "interrupted (SIGINT)" + "".join(f"; {line}" for line in result.recovery))
        if result.failed:
            raise RankFailed(result.failed, result)
        return result

    def _collect(self, monitor, tic):
        """Every rank's outputs and outcome; the root cause of a failure first, its echoes after."""
        ar = monitor.ar
        outputs = []
        for r, out, err, displays in zip(monitor.ranks, per_rank(ar, "stdout"), per_rank(ar, "stderr"),
                                         per_rank(ar, "outputs")):
            o = RankOutput(r, out or "", err or "", displays=list(displays or []))
            reply = monitor.futures[r].result() if monitor.futures[r].done() else None
            if r in monitor.lost:
                o.error = self._rank_error(r, None, why=monitor.lost[r])
            elif isinstance(reply, Exception):
                o.error = self._rank_error(r, reply)
                self.run_state.fail(r, f"{o.error.ename}: {o.error.evalue}")
            else:
                o.result = (getattr(reply, "execute_result", None) or {}).get("data")
                self.run_state.set_state(r, st.DONE if reply is not None else st.READY)
            self.run_state.set_output(r, o.stdout)
            outputs.append(o)
        failed = [o for o in outputs if o.error]
        # the root cause: a rank that raised (or died) on its own; echoes are cut-off collectives
        order = sorted(failed, key=lambda o: (is_echo(o.error), monitor.failed_at.get(o.rank, float("inf"))))
        self.last_result = RunResult(monitor.ranks, outputs, time.perf_counter() - tic, [o.rank for o in order])
        return self.last_result

    def _rank_error(self, rank, exc, why=None):
        info = self.info[rank] if rank < len(self.info) else {}
        step = self.run_state.ranks[rank].step
        if why is not None:
            err = RankError("RankLost", why, [], info.get("engine"), info.get("pid"), info.get("host", ""))
        else:
            ename = getattr(exc, "ename", None) or type(exc).__name__
            evalue = exc.evalue if getattr(exc, "evalue", None) is not None else str(exc)
            tb = (getattr(exc, "traceback", None) or "").splitlines()
            err = RankError(ename, evalue, tb, info.get("engine"), info.get("pid"), info.get("host", ""))
        err.step = step
        return err

    def _recover(self, monitor, result):
        """Make the pool usable again after a failed cell; return what was done, for the user."""
        notes = []
        if monitor.killed:
            killed = sorted(monitor.killed)
            seconds = self.restart_ranks(killed)
            kept = [r for r in range(self.world_size) if r not in killed]
            notes.append(f"{_ranks_text(killed)} did not stop within {ESCALATE:g} s of SIGINT and "
                         f"{'were' if len(killed) > 1 else 'was'} restarted in {seconds:.1f} s (the variables of "
                         f"{_ranks_text(killed)} are gone" + (f"; {_ranks_text(kept)} kept theirs" if kept else "")
                         + "); group re-formed")
            return notes
        lost = sorted(monitor.lost)
        if lost:
            kept = [r for r in range(self.world_size) if r not in lost]
            notes.append(f"{_ranks_text(lost)} lost: run %ddp_restart (Lab.restart()) to bring back a full group "
                         f"({_ranks_text(lost)} start{'s' if len(lost) == 1 else ''} fresh"
                         + (f"; {_ranks_text(kept)} keep their variables)" if kept else ")"))
            return notes
        errors = [o.error for o in result.outputs if o.error]
        if monitor.closed or any(is_echo(e) or _comm_error(e) for e in errors):
            seconds, stale = self._form_group(time.perf_counter() + self.start_timeout)
            notes.append(f"group re-formed in {seconds * 1000:.0f} ms; variables kept")
            if stale:
                ddp = [n for n, kind in stale if kind == "DistributedDataParallel"]
                others = [n for n, kind in stale if kind != "DistributedDataParallel"]
                fixes = [f"{n} = DDP({n}.module)" for n in ddp] + [f"{n} (a process group): create it again"
                                                                    for n in others]
                notes.append("these were tied to the old group: " + "; ".join(fixes))
        return notes

    def interrupt(self, ranks=None):
        """Send SIGINT to the given ranks (all by default), like Ctrl-C in each."""
        ranks = list(range(self.world_size)) if ranks is None else ranks
        live = [r for r in ranks if r not in self.find_lost(ranks)]
        local = [r for r in live if r in self._procs]
        kill([self._procs[r].process for r in local], signal.SIGINT)  # local: straight to the pid
        remote = [r for r in live if r not in self._procs]
        if remote:  # through ipyparallel's nanny on the engine's host
            self._client.send_signal(signal.SIGINT, targets=[self._eids[r] for r in remote], block=True)

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
                             f"{getattr(e, 'evalue', e)}")
        return values

    def history(self):
        """Every point every rank logged with ddplab.log, exactly (pulled from the ranks)."""
        from .metrics import History

        ranks = self._check_ranks(None)
        points = self._view(ranks).apply_async(_rank_history).get(timeout=self.timeout)
        return History.from_ranks(dict(zip(ranks, points)), self.cell_of)

    def push(self, ranks=None, **values):
        """Set variables in every rank (or the given ranks): lab.push(lr=0.1, data=tensor)."""
        ranks = self._check_ranks(ranks)
        try:
            self._view(ranks).push(values, block=True)
        except Exception as exc:  # noqa: BLE001 - e.g. an object that cannot be pickled
            raise BadRequest(f"cannot send {', '.join(values)} to the ranks: {type(exc).__name__}: {exc}") from None

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
        if kind == "kill" and at_step is None:
            self.kill_ranks(ranks)
            self._lost[rank] = "its engine was killed (SIGKILL) by %ddp_fault kill"
            self.run_state.fail(rank, self._lost[rank], lost=True)
            self._draw()
            return f"rank {rank} killed (SIGKILL); %ddp_restart brings it back"
        spec = None if kind == "clear" else {"kind": kind, "at_step": at_step, "factor": factor}
        self._view(ranks).apply_sync(_set_fault, spec)
        if spec is None:
            self.faults.pop(rank, None)
            self.run_state.ranks[rank].fault = None
            self._draw()
            return f"rank {rank}: no fault drill"
        when = f"at step {at_step}" if at_step is not None else "at its next step"
        if kind == "slow":
            text = f"rank {rank} is a straggler: each step takes {factor:g}x as long (until %ddp_fault clear {rank})"
            self.run_state.ranks[rank].fault = f"slow ×{factor:g}"
        else:
            text = f"rank {rank} will {'be killed (SIGKILL)' if kind == 'kill' else 'raise'} {when} (ddplab.log counts steps)"
            self.run_state.ranks[rank].fault = f"{kind} {when}"
        self.faults[rank] = spec
        self.run_state.touch()
        self._draw()
        return text

    def _draw(self):
        self.show("update")

    def show(self, what):
        """Call the view (view.begin/update/end(lab)); True if it drew. A view that raises is
        reported on stderr, never allowed to break a cell or leave ranks running."""
        if self.view is None:
            return False
        try:
            getattr(self.view, what)(self)
            return True
        except Exception as exc:
            print(f"ddplab: the live view failed ({type(exc).__name__}: {exc}); the pool is fine", file=sys.stderr)
            return False

    # ------------------------------------------------------------------ reporting
    def status(self):
        """One dict per rank: rank, engine, pid, host, threads, state."""
        rows = []
        for r in range(self.world_size):
            info = self.info[r] if r < len(self.info) and self.running else {}
            rows.append({"rank": r, "engine": info.get("engine"), "pid": info.get("pid"),
                         "host": info.get("host"), "threads": info.get("threads"),
                         "state": self.run_state.states[r]})
        return rows


def _shows_a_value(code):
    """Whether a cell ends with an expression whose value is shown (Out[...]). Other cells run
    "silent" on the engines, as ipyparallel's view.execute does by default: no execute_input
    broadcast and no display hook, a millisecond or two less per cell on a busy machine."""
    try:
        body = ast.parse(code).body
    except SyntaxError:  # IPython syntax (%magic, !shell): run it the full way
        return True
    return bool(body) and isinstance(body[-1], ast.Expr)


def _comm_error(error):
    """An error from inside torch.distributed: the group may be broken."""
    text = f"{error.ename} {error.evalue} " + " ".join(error.traceback_lines)
    return error.ename.startswith("Dist") or "gloo" in text.lower() or "torch/distributed/" in text


def _rank_history():
    import ddplab.rank

    return ddplab.rank.history()


@atexit.register
def _stop_all_labs():
    for lab in list(_running_labs):
        try:
            lab.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
