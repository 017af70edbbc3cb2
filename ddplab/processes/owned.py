"""A cluster this notebook starts and owns: its private folder, a reaper that ends it if the kernel
dies, ipyparallel's Cluster (controller and engine launchers), the processes it started, and a
stop that leaves nothing running. LocalPool and LaunchedPool are made of it; an AttachedPool owns
nothing of its engines.
"""
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from ..shared.config import tunables
from ..shared.errors import StartFailed
from ..shared.privacy import REDACT
from ..shared.system import is_gone, kill, memory_limit, wait_gone
from ..shared.words import plural

log = logging.getLogger("ddplab")
ipp_log = logging.getLogger("ddplab.ipyparallel")  # what ipyparallel logs about the pool (DDPLab.debug)
for _logger in (log, ipp_log):  # (ipyparallel logs the scripts its launchers run, environment and keys included)
    _logger.addFilter(REDACT)

# what every controller ddplab starts is told: its hub keeps no record of the requests and results that pass
# (ipyparallel's default DictDB holds up to 1024 of them, their buffers too: 25-55 MiB over lesson 06; ddplab
# never asks the hub for an old result)
NO_RECORDS = ["--IPController.db_class=NoDB"]
# and where memory is short (a session with a limit, lesson 17's hosts): its schedulers threads of one process,
# not eight more Pythons (~30 MiB of a hub's 1 GiB with 2 ranks; ~270 MiB of Binder's 2 GiB for lesson 17's
# controller). Elsewhere they stay processes: the controller's hub then never holds up a cell's messages
ONE_PROCESS = ["--IPController.use_threads=True"]


def private(folder):
    """Make every file under `folder` readable by its owner only (0600; folders 0700)."""
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            try:
                os.chmod(os.path.join(root, name), 0o600)
            except OSError:  # a file that went away (a socket closed, a rename)
                continue


class OwnedCluster:
    """The cluster part of a pool that starts its own controller and engines (a mixin: the pool
    gives launcher, profile, environment(), controller_launcher(), controller_args() and
    located(new, deadline))."""

    cluster = _reaper = None
    launch_args = ()  # the command lines the engine launchers ran (mpiexec ..., sbatch ...)
    silence_dropped_s = 2.0  # seconds of missed heartbeats after which the controller drops an engine

    def open_workdir(self):
        self.workdir = tempfile.mkdtemp(prefix="ddplab-")  # mode 0700
        os.mkdir(os.path.join(self.workdir, "tmp"), 0o700)
        self._reaper = subprocess.Popen([sys.executable, "-m", "ddplab.processes.reaper", str(os.getpid()), self.workdir],
                                        stdin=subprocess.DEVNULL, start_new_session=True)

    def start_cluster(self, n, deadline, say):
        """Controller, client and n engines; returns the engine ids in rank order."""
        self.cluster = self.make_cluster()
        say("starting {n} ranks: controller ...", n=n)
        # the messages' HMAC key, also with CurveZMQ (which would otherwise turn signing off)
        session_key = secrets.token_hex(16)
        REDACT.hide(session_key)
        self.cluster.start_controller_sync(environment={"IPP_SESSION_KEY": session_key})
        self.write_pids()  # from now on, a kernel that dies leaves nothing (the reaper reads this)
        self.client = self.cluster.connect_client_sync()
        from .pool import guard_client

        self.dropped = guard_client(self.client)
        self.place(*self.add_engines(n, deadline, say))
        private(self.workdir)  # what ipyparallel wrote from this process (its cluster file) too
        return self.engine_ids

    def make_cluster(self):
        """ipyparallel's Cluster for this pool (not started): its controller and engine launchers,
        from the pool's private folder, or with `profile`'s settings."""
        import ipyparallel as ipp
        from traitlets.config import Config

        ipp_log.setLevel(logging.DEBUG if tunables().debug else logging.CRITICAL)
        config = self.engine_config(Config())
        where = dict(profile=self.profile, load_profile=True) if self.profile else dict(
            profile_dir=self.workdir, config=config, load_profile=False)
        beat = tunables().heartbeat_ms
        misses = max(10, -(-int(self.silence_dropped_s * 1000) // beat))
        args = [f"--HeartMonitor.period={beat}", f"--HeartMonitor.max_heartmonitor_misses={misses}",
                *NO_RECORDS, *(ONE_PROCESS if memory_limit() is not None else []), *self.controller_args()]
        return ipp.Cluster(**where, cluster_id=f"ddplab-{os.getpid()}-{id(self)}" if self.profile else "ddplab",
                           log=ipp_log, shutdown_atexit=False, engines=self.engine_launcher(),
                           controller=self.controller_launcher(), controller_args=args)

    def engine_config(self, config):
        return config

    def add_engines(self, n, deadline, say):
        """Start n more engines; (their ids, their facts) once registered."""
        known = set(self.client.ids)
        before = set(map(id, self.launchers()))
        self.cluster.start_engines_sync(n, environment=self.environment())
        self.write_pids()  # (before they register: a kernel killed meanwhile leaves none of them running)
        started = [l for l in self.launchers() if id(l) not in before]
        self.launch_args = [" ".join(map(str, l.args)) for l in started if getattr(l, "args", None)]

        def check():
            for launcher in started:
                if launcher.process is not None and is_gone(launcher.process):
                    out = launcher.get_output().strip().splitlines()[-3:]
                    raise StartFailed("an engine exited during start-up: " + " | ".join(out))

        return self.located(self.wait_for_engines(known, n, deadline, say, check), deadline)

    def wait_for_engines(self, known, n, deadline, say, check):
        """Ids of n engines registered beyond `known`, in registration order. check() raises if
        an engine died while starting (ipyparallel would wait for it until the deadline)."""
        client = self.client
        waiting = client.wait_for_engines(len(known) + n, timeout=-1, block=False, interactive=False)
        seen = -1
        while True:
            new = [e for e in client.ids if e not in known]
            if len(new) >= n:
                waiting.cancel()
                return sorted(new)[:n]
            if len(new) != seen:
                seen = len(new)
                say("starting {n} {engines}: {up}/{n} up", n=n, engines=plural(n, "engine"), up=len(new))
            check()
            if time.perf_counter() > deadline:
                waiting.cancel()
                raise StartFailed(f"{n - len(new)} of {n} engines not ready in time; ready: {len(new)}: "
                                  "try again, or fewer ranks")
            if waiting.done():  # reached, or failed because an engine left (one being replaced): count ids
                time.sleep(0.02)
                continue
            try:
                waiting.result(timeout=0.02)  # wakes on each registration
            except Exception:  # noqa: BLE001 - a timeout, or the failure above (seen next time round)
                continue

    def connection_info(self):
        with open(os.path.join(self.cluster.profile_dir, "security",
                               f"ipcontroller-{self.cluster.cluster_id}-client.json")) as f:
            return json.load(f)

    def replace(self, ranks, deadline, say):
        """Fresh engines for `ranks` (their old ones killed): new engine ids in their places."""
        self.kill(ranks)
        new, new_facts = self.add_engines(len(ranks), deadline, say)
        eids, facts = list(self.engine_ids), list(self.facts)
        for i, (r, eid) in enumerate(zip(sorted(ranks), new)):
            eids[r] = eid
            self.found_again(r)
            if new_facts:
                facts[r] = new_facts[i]
        self.place(eids, facts)

    def renew(self, deadline, say):
        self.replace(range(len(self.engine_ids)), deadline, say)
        return False  # fresh engines

    def launchers(self):
        for es in self.cluster.engines.values() if self.cluster else ():
            # a set of local launchers, one per engine; or one launcher for the set (mpiexec, a batch job)
            yield from es.launchers.values() if hasattr(es, "launchers") else [es]

    # ------------------------------------------------------------------ processes
    def processes(self, engines=True):
        """Controller, engines and every process they started (DataLoader workers, ...)."""
        procs = []
        launchers = [self.cluster.controller] if self.cluster and self.cluster.controller else []
        if engines:
            launchers.extend(self.launchers())
        for launcher in launchers:
            proc = getattr(launcher, "process", None)
            if proc is None or is_gone(proc):
                continue
            try:
                procs.append(proc)
                procs.extend(proc.children(recursive=True))
            except psutil.Error:  # it ended while we looked
                continue
        return procs

    def pids(self):
        return [p.pid for p in self.processes()]

    @property
    def reaper_pid(self):
        return self._reaper.pid if self._reaper is not None else None

    def write_pids(self):
        """Tell the reaper what to end if this process dies: the pool's processes, and the zygote that
        forked them (it ends with its notebook anyway), each as "pid start-time" (a pid the system
        gave to another process since is not that one)."""
        if self.workdir:
            zygote = getattr(self, "zygote", None)  # (a local pool's)
            procs = self.processes() + ([psutil.Process(zygote.pid)] if zygote is not None else [])
            lines = []
            for proc in procs:
                try:
                    lines.append(f"{proc.pid} {proc.create_time()}")
                except psutil.Error:  # ended meanwhile
                    continue
            path = os.path.join(self.workdir, "pool.pids")
            with open(os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write("\n".join(lines))
            os.replace(path + ".new", path)

    def kill_processes(self, procs):
        """SIGKILL these processes and what they started; wait (bounded) until they are gone."""
        every = []
        for proc in procs:
            if not is_gone(proc):
                try:
                    every.extend([*proc.children(recursive=True), proc])
                except psutil.Error:  # gone meanwhile
                    continue
        kill(every)
        wait_gone(every, timeout=3.0)  # SIGKILL takes milliseconds; the bound only keeps a zombie from holding us

    def stop(self, shutdown=False):
        """End engines, controller and every helper process; remove the private folder."""
        procs = self.processes()
        controller = self.processes(engines=False)
        if self.client is not None:
            try:
                self.client.close(linger=0)
            except Exception:  # noqa: BLE001 - closing a broken client must not stop the stop
                log.debug("closing ipyparallel's client failed", exc_info=True)
        self.client = None
        # Engines take over a second to exit on SIGTERM with torch loaded: the pool is
        # disposable, so SIGKILL all but the controller (which cleans up its own schedulers).
        for p in procs:
            kill([p], signal.SIGTERM if p in controller else signal.SIGKILL)
        kill(wait_gone(procs, timeout=2.0))  # (the controller: 2 s for SIGTERM, then SIGKILL; bounds, not settings)
        wait_gone(procs, timeout=2.0)
        if self.cluster is not None:
            try:
                self.cluster.stop_cluster_sync()  # lets ipyparallel clean its own state and files
            except Exception:  # noqa: BLE001 - its processes are gone already: what is left is its bookkeeping
                log.debug("ipyparallel's stop_cluster failed", exc_info=True)
        self.cluster = None
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper.wait(5)
            self._reaper = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        log.info("pool stopped: %d processes ended", len(procs))
        return "stopped"
