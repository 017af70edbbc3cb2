"""Lab: a pool of ipyparallel engines that form one torch.distributed gloo group.

Everything the magics do is a call on Lab, so scripts, the CLI and tests use
the same path. The controller, the engines' connection files and the
rendezvous file live in a private temporary directory (mode 0700) that stop()
removes.
"""
import atexit
import logging
import os
import shutil
import signal
import tempfile
import time
import weakref
from dataclasses import dataclass, field

import psutil

from . import state as st
from .metrics import LiveMetrics
from .monitor import Monitor, Telemetry
from .errors import BadRequest, CellTimeout, NameMissing, PoolAlreadyRunning, PoolNotRunning, RankError, RankFailed, StartFailed

ENGINE_MB = 350  # resident memory of one engine with torch imported (measured ~250 MB) plus headroom
MAX_DEFAULT_RANKS = 4
HEARTBEAT_MS = 500  # ipyparallel's default 3000 ms makes registration (and death detection) slow

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


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_ranks():
    """Two ranks at least (one rank teaches nothing about communication), cores at most 4."""
    return min(MAX_DEFAULT_RANKS, max(2, cores()))


def max_local_ranks():
    """How many engines this machine can hold: 4 per core, and the memory they need."""
    by_memory = psutil.virtual_memory().available // (ENGINE_MB * 2**20)
    return max(1, min(max(8, 4 * cores()), by_memory))


def loopback_interface():
    """Name of the interface holding 127.0.0.1 ('lo' on Linux, 'lo0' on macOS)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addrs):
            return name
    return "lo"


def is_gone(proc):
    """Exited, or a zombie: a dead engine's nanny is re-parented to init, which reaps it late."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(procs, timeout):
    """Wait until every process is gone; return those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not is_gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if not is_gone(p)]
    return alive


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
    failure_order: list = field(default_factory=list)  # failed ranks, first to fail first

    def __getitem__(self, rank):
        return self.outputs[self.ranks.index(rank)]

    @property
    def stdout(self):
        return [o.stdout for o in self.outputs]

    @property
    def failed(self):
        """rank -> RankError, the first rank to fail first."""
        return {r: self[r].error for r in self.failure_order}


def _int_or_none(value, what, low):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be a whole number, got {value!r}")
    if value < low:
        raise BadRequest(f"{what} must be at least {low}, got {value}")
    return value


class Lab:
    """A pool of `ranks` engines forming one gloo process group.

    >>> with Lab(ranks=2) as lab:
    ...     lab.run("t = torch.ones(1) * rank; dist.all_reduce(t)")
    ...     lab.gather("t")          # [tensor([1.]), tensor([1.])]

    timeout: seconds a collective may wait before gloo gives up.
    threads_per_rank: torch threads in each rank (default: cores // ranks, at least 1).
    rendezvous: "file" (a FileStore in the pool's private directory; opens no
      port) or "tcp://HOST:PORT" (rank 0 hosts a TCPStore; PORT 0 picks a free one).
    launcher: ipyparallel engine launcher ("local", "mpi", "ssh", "slurm", ...).
    """

    def __init__(self, ranks=None, timeout=60.0, threads_per_rank=None, *, rendezvous="file",
                 launcher="local", start_timeout=120.0):
        ranks = _int_or_none(ranks, "the number of ranks", 1)
        self.world_size = default_ranks() if ranks is None else ranks
        self.local = launcher == "local"
        if self.local and self.world_size > max_local_ranks():
            raise BadRequest(
                f"{self.world_size} ranks is more than this machine can hold ({cores()} cores, "
                f"{psutil.virtual_memory().available / 2**30:.1f} GiB free; at most {max_local_ranks()}): "
                f"ask for fewer ranks")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise BadRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
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
        self.start_seconds = None
        self.last_result = None  # RunResult of the last run(), also when it failed or was interrupted
        self._cluster = self._client = self._workdir = None
        self._generation = 0

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
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''} per rank"
        return f"{self.world_size} ranks ready in {self.start_seconds:.1f} s (gloo, {threads})"

    def start(self, progress=None):
        """Start the engines and form the group. progress(message) is called at each stage."""
        if self.running:
            raise PoolAlreadyRunning(
                f"a pool of {self.world_size} ranks is already running: "
                "%ddp_stop (Lab.stop()) first, or %ddp_restart (Lab.restart())")
        tic = time.perf_counter()
        self.run_state = st.RunState(self.world_size)
        self.metrics = LiveMetrics(self.world_size)

        def say(message):
            self.run_state.message = message
            self.run_state.touch()
            if progress is not None:
                progress(message)
            self._draw()

        self._workdir = tempfile.mkdtemp(prefix="ddplab-")
        _running_labs.add(self)
        try:
            self._launch(say, tic)
            self._form_group(say, tic)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (StartFailed, KeyboardInterrupt)):
                raise
            raise StartFailed(f"the pool did not start: {type(exc).__name__}: {exc}") from exc
        self.start_seconds = time.perf_counter() - tic
        return self

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

        n = self.world_size
        self._cluster = cluster = ipp.Cluster(
            profile_dir=self._workdir, cluster_id="ddplab", config=Config(), load_profile=False,
            log=_log, shutdown_atexit=False, engines=self.launcher,
            controller_ip="127.0.0.1" if self.local else "",
            controller_args=[f"--HeartMonitor.period={HEARTBEAT_MS}"])
        say(f"starting {n} ranks: controller ...")
        cluster.start_controller_sync()
        cluster.start_engines_sync(n, environment=self._engine_environment())
        self._client = client = cluster.connect_client_sync()
        deadline = tic + self.start_timeout
        seen = -1
        while len(client.ids) < n:
            if len(client.ids) != seen:
                seen = len(client.ids)
                say(f"starting {n} ranks: {seen}/{n} engines up ({time.perf_counter() - tic:.1f} s)")
            self._check_engines_alive()
            if time.perf_counter() > deadline:
                raise StartFailed(
                    f"{n - len(client.ids)} of {n} engines not ready in {self.start_timeout:.0f} s; "
                    f"ready: {len(client.ids)}: try again, or fewer ranks")
            time.sleep(0.02)
        self._eids = sorted(client.ids)[:n]
        self.run_state.set_all(st.INIT)

    def _check_engines_alive(self):
        for es in self._cluster.engines.values():
            for launcher in getattr(es, "launchers", {}).values():
                if launcher.process is not None and not launcher.process.is_running():
                    out = launcher.get_output().strip().splitlines()[-3:]
                    raise StartFailed("an engine exited during start-up: " + " | ".join(out))

    def _form_group(self, say, tic):
        from .rank import form_group

        n = self.world_size
        self._generation += 1
        if self.rendezvous == "file":
            where = "file://" + os.path.join(self._workdir, f"rendezvous-{self._generation}")
        else:
            where = self._tcp_rendezvous()
        say(f"starting {n} ranks: importing torch, forming the gloo group "
            f"({time.perf_counter() - tic:.1f} s)")
        self.telemetry = Telemetry("127.0.0.1" if self.local else "0.0.0.0")
        ars = [self._client[eid].apply_async(form_group, r, n, where, self.timeout, self.threads,
                                             self.telemetry.address)
               for r, eid in enumerate(self._eids)]
        deadline = tic + self.start_timeout
        for ar in ars:
            if not ar.wait(max(0.0, deadline - time.perf_counter())):
                raise StartFailed(f"the gloo group did not form in {self.start_timeout:.0f} s: try again")
        failed = [(r, ar) for r, ar in enumerate(ars) if not ar.successful()]
        if failed:
            r, ar = failed[0]
            err = ar.exception() if hasattr(ar, "exception") else None
            try:
                ar.get()
            except Exception as exc:  # noqa: BLE001 - reported with its text
                err = exc
            raise StartFailed(f"rank {r} could not join the gloo group: {err}")
        self.info = []
        for eid, ar in zip(self._eids, ars):
            self.info.append(dict(ar.get(), engine=eid))
        self.run_state.set_all(st.READY)

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
        for es in (self._cluster.engines.values() if self._cluster and engines else ()):
            launchers.extend(getattr(es, "launchers", {}).values())
        for launcher in launchers:
            proc = getattr(launcher, "process", None)
            if proc is None:
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

    def stop(self):
        """End engines, controller and every helper process; remove the private directory."""
        procs = self._pool_processes()
        controller = self._pool_processes(engines=False)
        if self._client is not None:
            try:
                self._client.close(linger=0)
            except Exception:  # noqa: BLE001 - closing a broken client must not stop the stop
                pass
        self._client = None
        # Engines take over a second to exit on SIGTERM with torch loaded, and their nannies
        # poll for another second or two: the pool is disposable, so SIGKILL all but the controller.
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM if p in controller else signal.SIGKILL)
            except psutil.Error:
                pass
        for p in _wait_gone(procs, timeout=2.0):
            try:
                p.kill()
            except psutil.Error:
                pass
        _wait_gone(procs, timeout=2.0)
        if self._cluster is not None:
            try:
                self._cluster.stop_cluster_sync()  # lets ipyparallel clean its own state and files
            except Exception:  # noqa: BLE001
                pass
        self._cluster = None
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        if self.telemetry is not None:
            self.telemetry.close()
            self.telemetry = None
        self.run_state.set_all(st.STOPPED)
        self._draw()
        _running_labs.discard(self)

    def restart(self, progress=None):
        """Stop the pool and start a fresh one with the same settings (rank variables are lost)."""
        self.stop()
        return self.start(progress)

    # ------------------------------------------------------------------ running code
    def _require_running(self):
        if not self.running:
            raise PoolNotRunning()

    def _check_ranks(self, ranks):
        self._require_running()
        if ranks is None:
            return list(range(self.world_size))
        ranks = list(ranks)
        bad = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size]
        if bad or not ranks:
            raise BadRequest(f"ranks must be among 0..{self.world_size - 1}, got {ranks}")
        return sorted(set(ranks))

    def _view(self, ranks):
        return self._client[[self._eids[r] for r in ranks]]

    def run(self, code, ranks=None, timeout=None):
        """Run `code` on every rank (or the given ranks); return a RunResult.

        Raises RankFailed if any rank raised, naming each failed rank with its traceback.
        timeout: seconds the cell may run; then every rank is interrupted and CellTimeout raised.
        On KeyboardInterrupt every rank is sent SIGINT and the interrupt is re-raised.
        While the cell runs, telemetry (ddplab.log) is merged and self.view redrawn.
        """
        ranks = self._check_ranks(ranks)
        self.last_result = None
        if timeout is not None and not timeout > 0:
            raise BadRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.metrics.reset()
        self.run_state.begin_cell(ranks, time.monotonic())
        if self.view is not None:
            self.view.begin(self)
        tic = time.perf_counter()
        ar = self._view(ranks).execute(code, silent=False, block=False)
        monitor = Monitor(self, ar, ranks)
        try:
            if not monitor.wait(None if timeout is None else tic + timeout):
                self._interrupt_and_finish(monitor, tic)
                raise CellTimeout(f"the cell ran longer than {timeout:g} s on rank(s) "
                                  f"{', '.join(map(str, ranks))}; every rank was interrupted (SIGINT)")
        except KeyboardInterrupt:
            self._interrupt_and_finish(monitor, tic)
            raise
        result = self._finish(monitor, tic)
        if result.failed:
            raise RankFailed(result.failed, result)
        return result

    def _interrupt_and_finish(self, monitor, tic, grace=5.0):
        self.interrupt(monitor.ranks)
        monitor.wait(time.perf_counter() + grace)
        self._finish(monitor, tic)

    def _draw(self):
        if self.view is not None:
            self.view.update(self)

    def _finish(self, monitor, tic):
        ar, ranks = monitor.ar, monitor.ranks
        ar.wait_for_output(1.0)  # trailing stdout arrives after the reply
        monitor.finish()  # the last telemetry of every rank
        seconds = time.perf_counter() - tic
        replies = ar.get(return_exceptions=True) if ar.ready() else [None] * len(ranks)
        outputs = []
        for r, reply, out, err, displays in zip(ranks, replies, ar.stdout, ar.stderr, ar.outputs):
            o = RankOutput(r, out or "", err or "", displays=list(displays or []))
            if isinstance(reply, Exception):
                o.error = self._rank_error(r, reply)
                self.run_state.fail(r, f"{o.error.ename}: {o.error.evalue}", lost=o.error.ename == "EngineError")
            else:
                o.result = (getattr(reply, "execute_result", None) or {}).get("data")
                self.run_state.set_state(r, st.DONE if reply is not None else st.READY)
            self.run_state.set_output(r, o.stdout)
            outputs.append(o)
        # the rank that failed first is the root cause; later failures are usually its echo
        done_at = {r: str(md.get("completed") or "") for r, md in zip(ranks, ar.metadata)}
        outputs_by_failure = sorted((o for o in outputs if o.error), key=lambda o: done_at[o.rank])
        self.last_result = RunResult(ranks, outputs, seconds, [o.rank for o in outputs_by_failure])
        self.run_state.end_cell(time.monotonic())
        if self.view is not None:
            self.view.end(self)
        return self.last_result

    def _rank_error(self, rank, exc):
        info = self.info[rank] if rank < len(self.info) else {}
        ename = getattr(exc, "ename", None) or type(exc).__name__
        evalue = getattr(exc, "evalue", None) or str(exc)
        tb = (getattr(exc, "traceback", None) or "").splitlines()
        return RankError(ename, evalue, tb, info.get("engine"), info.get("pid"), info.get("host", ""))

    def interrupt(self, ranks=None):
        """Send SIGINT to the given ranks (all by default), like Ctrl-C in each."""
        ranks = self._check_ranks(ranks)
        self._client.send_signal(signal.SIGINT, targets=[self._eids[r] for r in ranks], block=True)

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
        return History.from_ranks(dict(zip(ranks, points)))

    def push(self, ranks=None, **values):
        """Set variables in every rank (or the given ranks): lab.push(lr=0.1, data=tensor)."""
        ranks = self._check_ranks(ranks)
        self._view(ranks).push(values, block=True)

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
