"""The process layer: engines that run the ranks, behind one interface (`Pool`).

A pool knows engines and processes, never cells or process groups: it starts engines (in rank
order), tells which ranks are lost and why, kills or interrupts ranks, lists its processes and
stops. It is the only owner of lost-rank bookkeeping. `LocalPool` starts the engines itself
(forked from a zygote on this machine, or through any ipyparallel launcher); a pool attached to
engines someone else started is another class with the same interface, and nothing above
this module changes for it.
"""
import json
import logging
import os
import shutil
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import psutil

from .config import tunables
from .privacy import compile_cache
from .errors import BadRequest, StartFailed
from .system import exit_reason, is_gone, kill, loopback_interface, wait_gone
from .words import plural

log = logging.getLogger("ddplab.ipyparallel")  # what ipyparallel logs about the pool (DDPLab.debug)
log_ddplab = logging.getLogger("ddplab")


@dataclass(frozen=True)
class Lost:
    """A rank whose engine is gone."""

    rank: int
    host: str
    why: str  # "its engine exited with code 3", "its engine was killed (SIGKILL)", ...


CLIENT_STREAMS = ("_query_stream", "_control_stream", "_mux_stream", "_task_stream", "_iopub_stream",
                  "_notification_stream", "_broadcast_stream")


def guard_client(client):
    """Keep a malformed message from breaking ipyparallel's Client. Its controller relays what any
    local user publishes on its ports; the Client's handler raises on a message without its
    delimiter ("DELIM not in msg_list"), the exception escapes the stream's event handler (a
    traceback in the notebook), and the stream stops reading (zmq's edge-triggered descriptor): no
    more output from the ranks. Each handler is wrapped to drop and count such messages instead.
    Returns the counts: channel -> messages dropped. (Private names of ipyparallel 9.2 and pyzmq's
    ZMQStream: tests/unit/test_ipyparallel_pin.py checks them.)"""
    dropped = {}

    def guarded(channel, handler):
        def receive(msg):
            try:
                return handler(msg)
            except Exception:  # noqa: BLE001 - not a message of this pool: drop it
                dropped[channel] = dropped.get(channel, 0) + 1
        return receive

    for name in CLIENT_STREAMS:
        stream = getattr(client, name, None)
        handler = getattr(stream, "_recv_callback", None)
        if handler is not None:
            stream._recv_callback = guarded(name.strip("_").removesuffix("_stream"), handler)
    return dropped


def route_to(ip):
    """This machine's address on the route to `ip` (UDP connect: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((ip, 9))
        return s.getsockname()[0]


def private(folder):
    """Make every file under `folder` readable by its owner only (0600; folders 0700)."""
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            try:
                os.chmod(os.path.join(root, name), 0o600)
            except OSError:  # a file that went away (a socket closed, a rename)
                pass


class Pool:
    """Engines that run the ranks, in rank order. The interface every kind of pool has:

    start(n, deadline, say) -> engine ids     replace(ranks, deadline, say)
    engine_ids (rank -> engine id)            track(info): what each rank said about itself
    lost(ranks) -> {rank: Lost}               kill(ranks, why)      interrupt(ranks)
    pids() -> every process of the pool       stop()
    plus client (ipyparallel's Client), workdir (the pool's private 0700 folder) and local
    (every engine on this machine: gloo and telemetry stay on loopback). say(en, zh) reports
    progress, in the pool's language.
    """

    client = None
    workdir = None
    local = True
    dropped = {}  # ipyparallel channel -> malformed messages its Client dropped (guard_client)
    started_engines = True  # False: engines someone else started (stop leaves them running)
    compile_cache = compile_refused = None  # the ranks' torch.compile folder (None: each host's own default)

    @property
    def network(self):
        """("private", None) or ("shared", why): where the ranks' network is (LocalPool)."""
        return "shared", "the ranks are on other hosts: they talk over the network"

    def compile_folder(self):
        """The folder the ranks' torch.compile may use, checked now (before every forming of the
        group): None lets each rank's host choose (privacy.default_compile_cache)."""
        return None

    def __init__(self, ifname=None):
        self.engine_ids = []
        self.hosts = {}  # rank -> host, from track()
        self.facts = []  # remote pools, per rank: host, pid, ip, ifname, cores (rank._reach)
        self.ifname = ifname  # the interface every rank uses toward its peers, if the user named one
        self._lost = {}  # rank -> Lost: the one record of lost ranks

    def telemetry_where(self):
        """Where the notebook's telemetry socket listens: a socket file in the private folder
        (other users cannot reach it) when every engine is on this machine, else TCP on the
        address this machine uses toward the controller (signed: wire.py)."""
        return f"ipc://{self.workdir}" if self.local else f"tcp://{route_to(self.controller_ip())}"

    def controller_ip(self):
        """The controller's address as its connection file gives it."""
        info = self.connection_info()
        host = info["interface"].split("://", 1)[-1].rsplit(":", 1)[0]
        if host in ("*", "0.0.0.0", ""):
            host = info.get("location") or "127.0.0.1"
        return socket.gethostbyname(host)  # an address stays as it is; a name is looked up here, once

    def connection_info(self):
        raise NotImplementedError

    @property
    def encrypted(self):
        """Whether ipyparallel's traffic is encrypted (CurveZMQ: its connection file holds the server's
        key); ddplab's own traffic across hosts is then encrypted too. A local pool has nothing to
        encrypt: it talks over socket files."""
        return not self.local and bool(self.connection_info().get("curve_serverkey"))

    @property
    def signed(self):
        """Whether ipyparallel signs its messages (HMAC with the connection file's key)."""
        return bool(self.connection_info().get("key"))

    def locate(self, eids, deadline):
        """Ask each engine where it is (rank._reach); return (eids ordered by host, then engine id;
        their facts in the same order)."""
        from .rank import _reach

        controller = self.controller_ip()
        ar = self.client[list(eids)].apply_async(_reach, controller, self.ifname)
        if not ar.wait(max(0.1, deadline - time.perf_counter())):
            raise StartFailed("the engines did not say where they are in time: are they busy?")
        try:
            facts = ar.get()
        except Exception as exc:  # noqa: BLE001 - e.g. --ifname names an interface a host lacks
            raise StartFailed(f"an engine could not find its address: {getattr(exc, 'evalue', exc)}") from exc
        order = sorted(zip(facts, eids), key=lambda fe: (fe[0]["host"], fe[1]))
        return [e for _, e in order], [f for f, _ in order]

    def place(self, eids, facts):
        """These engines, in this order, are the ranks."""
        self.engine_ids, self.facts = list(eids), list(facts)
        self.hosts = {r: f["host"] for r, f in enumerate(facts)}

    def threads_per_rank(self, configured):
        """Torch threads per rank: as configured, or the cores of the rank's host shared among the
        ranks on that host (at least 1)."""
        if configured or not self.facts:
            return [configured or 1] * len(self.engine_ids)
        per_host = {}
        for f in self.facts:
            per_host[f["host"]] = per_host.get(f["host"], 0) + 1
        return [max(1, f["cores"] // per_host[f["host"]]) for f in self.facts]

    def lost(self, ranks=None):
        """rank -> Lost for every rank (of `ranks`) whose engine is gone; cheap enough per poll."""
        for r in range(len(self.engine_ids)) if ranks is None else ranks:
            if r not in self._lost:
                why = self._gone_why(r)
                if why is not None:
                    self.mark_lost(r, why)
        return {r: lost for r, lost in self._lost.items() if ranks is None or r in ranks}

    def mark_lost(self, rank, why):
        self._lost[rank] = Lost(rank, self.hosts.get(rank, ""), why)

    def _gone_why(self, rank):
        """Why this rank's engine is gone, or None while it lives."""
        if self.client is not None and rank < len(self.engine_ids) and self.engine_ids[rank] not in self.client.ids:
            return exit_reason(None)  # the controller no longer hears it
        return None

    def signal_remote(self, eids, sig, timeout=5.0):
        """Signal engines through ipyparallel (the engine's nanny, on its host); True if every one
        answered ok within `timeout` (a broken channel must not hold the notebook)."""
        import concurrent.futures

        future = self.client.send_signal(sig, targets=eids, block=False)
        try:
            replies = future.result(timeout)
        except concurrent.futures.TimeoutError:
            log_ddplab.warning("engines %s did not answer signal %s within %g s", eids, sig, timeout)
            return False
        except Exception as exc:  # noqa: BLE001 - ipyparallel raises what the engine reported
            log_ddplab.info("signal %s to engines %s: %s", sig, eids, exc)
            return False
        return all(m["content"]["status"] == "ok" for m in replies)

    def kill_remote(self, eids):
        """SIGKILL engines on other hosts through their nannies (ipengine starts one by default),
        or, without a nanny, ask the engine to shut down."""
        eids = [e for e in eids if self.client is not None and e in self.client.ids]
        if eids and not self.signal_remote(eids, signal.SIGKILL):
            self.client.shutdown(targets=eids, block=False)  # no nanny there

    def track(self, info):
        """What each rank reported when it joined the group (pid, host): rank order."""
        self.hosts = {r: i.get("host", "") for r, i in enumerate(info)}

    def _wait_for_engines(self, known, n, deadline, say, check):
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
                say(f"starting {n} {plural(n, 'engine')}: {len(new)}/{n} up", f"正在启动 {n} 个引擎：{len(new)}/{n} 已就绪")
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
                pass


class LocalPool(Pool):
    """Engines this notebook starts through ipyparallel: a Cluster with its controller on loopback
    (any interface for non-local launchers) and engines forked from a zygote that imported torch
    once ("local"), ipyparallel's own local launcher ("local-spawn"), or any other ipyparallel
    engine launcher ("mpi", "ssh", "slurm", ...). A reaper process ends it if the kernel dies.
    Its private folder (0700) holds the connection files, pid list and rendezvous files."""

    def __init__(self, launcher="local", threads=1, profile=None, ifname=None, encrypt=False):
        super().__init__(ifname)
        self.launcher, self.profile, self.encrypt = launcher, profile, encrypt
        self.local = launcher in ("local", "local-spawn")  # controller forked from the zygote, ipc:// sockets
        self.threads = threads
        self.forked = launcher == "local"  # engines forked from the zygote too
        self.cluster = self._reaper = None
        self.compile_cache = self.compile_refused = None  # torch.compile's folder for the ranks, and why not another
        self._procs = {}  # rank -> the launcher of its engine (local engines: signalled by pid)

    # ------------------------------------------------------------------ start
    def environment(self):
        env = {
            # set before torch is imported, so each rank uses its share of the cores
            "OMP_NUM_THREADS": str(self.threads),
            "MKL_NUM_THREADS": str(self.threads),
            "DDPLAB_PARENT_PID": str(os.getpid()),
        }
        if self.local:
            env["GLOO_SOCKET_IFNAME"] = loopback_interface()  # gloo listens on loopback only
            # what the ranks and their children (DataLoader workers, a forkserver) put in temporary
            # files goes to the pool's private folder: stop kills them before they can remove it
            env["TMPDIR"] = os.path.join(self.workdir, "tmp")
            env["TORCHINDUCTOR_CACHE_DIR"] = self.compile_cache  # outlives the pool; the ranks check it again
        return env

    def compile_folder(self):
        if not self.local:
            return None
        self.compile_cache, self.compile_refused = compile_cache(
            tunables().compile_cache, lambda: os.path.join(self.workdir, "tmp", "torchinductor"))
        if self.compile_refused:
            log_ddplab.warning(self.compile_refused)
        return self.compile_cache

    @property
    def network(self):
        """("private", None): the controller and ranks live in a network namespace of their own;
        ("shared", why): on the machine's network (gloo's ports reachable from its loopback)."""
        if not self.local:
            return super().network
        if not self.forked:
            return "shared", "local-spawn engines are started by ipyparallel, not forked into a private network"
        from .zygote import zygote

        return zygote().network

    def start(self, n, deadline, say):
        from .zygote import zygote

        self.workdir = tempfile.mkdtemp(prefix="ddplab-")  # mode 0700
        os.mkdir(os.path.join(self.workdir, "tmp"), 0o700)
        self.compile_folder()
        self._reaper = subprocess.Popen([sys.executable, "-m", "ddplab.reaper", str(os.getpid()), self.workdir],
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        if self.local:
            zygote()  # usually started at %load_ext ddplab, and warm since
        self.cluster = self.make_cluster()
        say(f"starting {n} ranks: controller ...", f"正在启动 {n} 个 rank：控制器……")
        # the messages' HMAC key, also with CurveZMQ (which would otherwise turn signing off)
        self.cluster.start_controller_sync(environment={"IPP_SESSION_KEY": secrets.token_hex(16)})
        self.client = self.cluster.connect_client_sync()
        self.dropped = guard_client(self.client)
        self.place(*self._add_engines(n, deadline, say))
        private(self.workdir)  # what ipyparallel wrote from this process (its cluster file) too
        return self.engine_ids

    def make_cluster(self):
        """ipyparallel's Cluster for this pool (not started): its controller and engine launchers,
        from the pool's private folder, or with `profile`'s settings for other launchers."""
        import ipyparallel as ipp
        from traitlets.config import Config

        from .launcher import ForkedControllerLauncher, ForkedEngineSetLauncher

        log.setLevel(logging.DEBUG if tunables().debug else logging.CRITICAL)
        engines = {"local": ForkedEngineSetLauncher, "local-spawn": "local"}.get(self.launcher, self.launcher)
        config = Config()
        if self.launcher == "local-spawn":  # no nanny: it listens on a TCP port (the Lab signals engines by pid)
            config.LocalEngineSetLauncher.engine_args = ["--IPEngine.enable_nanny=False"]
        where = dict(profile=self.profile, load_profile=True) if self.profile else dict(
            profile_dir=self.workdir, config=config, load_profile=False)
        beat = tunables().heartbeat_ms
        args = [f"--HeartMonitor.period={beat}", f"--HeartMonitor.max_heartmonitor_misses={max(10, -(-2000 // beat))}"]
        if self.local:  # every socket a file in the private folder: no TCP port (see zygote.py for the names)
            args += ["--IPController.transport=ipc", f"--IPController.ip={os.path.join(self.workdir, 'ipp')}"]
        elif self.encrypt:
            args.append("--IPController.enable_curve=True")
        return ipp.Cluster(
            **where, cluster_id=f"ddplab-{os.getpid()}-{id(self)}" if self.profile else "ddplab",
            log=log, shutdown_atexit=False, engines=engines,
            controller=ForkedControllerLauncher if self.local else "local", controller_args=args)

    def _add_engines(self, n, deadline, say):
        known = set(self.client.ids)
        before = set(map(id, self._launchers()))
        self.cluster.start_engines_sync(n, environment=self.environment())
        started = [l for l in self._launchers() if id(l) not in before]
        self.launch_args = [" ".join(map(str, l.args)) for l in started if getattr(l, "args", None)]

        def check():
            for launcher in started:
                if launcher.process is not None and is_gone(launcher.process):
                    out = launcher.get_output().strip().splitlines()[-3:]
                    raise StartFailed("an engine exited during start-up: " + " | ".join(out))

        new = self._wait_for_engines(known, n, deadline, say, check)
        return (new, []) if self.local else self.locate(new, deadline)

    def connection_info(self):
        with open(os.path.join(self.cluster.profile_dir, "security",
                               f"ipcontroller-{self.cluster.cluster_id}-client.json")) as f:
            return json.load(f)

    def replace(self, ranks, deadline, say):
        """Fresh engines for `ranks` (their old ones killed): new engine ids in their places."""
        self.kill(ranks)
        new, new_facts = self._add_engines(len(ranks), deadline, say)
        eids, facts = list(self.engine_ids), list(self.facts)
        for i, (r, eid) in enumerate(zip(sorted(ranks), new)):
            eids[r] = eid
            self._lost.pop(r, None)
            if new_facts:
                facts[r] = new_facts[i]
        self.place(eids, facts)

    def track(self, info):
        super().track(info)
        launchers = {l.process.pid: l for l in self._launchers() if l.process is not None}
        self._procs = {r: launchers[i["pid"]] for r, i in enumerate(info) if i.get("pid") in launchers}
        self._write_pids()

    def _launchers(self):
        for es in self.cluster.engines.values() if self.cluster else ():
            # a set of local launchers, one per engine; or one launcher for the set (mpiexec, a batch job)
            yield from es.launchers.values() if hasattr(es, "launchers") else [es]

    # ------------------------------------------------------------------ processes
    def processes(self, engines=True):
        """Controller, engines and every process they started (DataLoader workers, ...)."""
        procs = []
        launchers = [self.cluster.controller] if self.cluster and self.cluster.controller else []
        if engines:
            launchers.extend(self._launchers())
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
        return [p.pid for p in self.processes()]

    @property
    def reaper_pid(self):
        return self._reaper.pid if self._reaper is not None else None

    def _write_pids(self):
        """Tell the reaper what to end if this process dies."""
        if self.workdir:
            path = os.path.join(self.workdir, "pool.pids")
            with open(os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write("\n".join(map(str, self.pids())))
            os.replace(path + ".new", path)

    def _gone_why(self, rank):
        launcher = self._procs.get(rank)
        if launcher is None:
            return super()._gone_why(rank)
        if self._gone(launcher.process):  # a local engine: its process tells, with its exit code
            return exit_reason(self._exit_code(launcher.process))
        return None

    def _gone(self, proc):
        """Cheap (this runs on every poll): a signal-0 probe; the zygote reaps its engines at
        once, so a dead forked engine has no pid left. Otherwise psutil, which tells zombies."""
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False if self.forked else is_gone(proc)

    def _exit_code(self, proc, wait=0.5):
        """The exit code of a dead local engine. Its parent reaps it: the zygote (which writes
        it down) or ipyparallel's launcher thread (psutil keeps it on that Process object;
        waiting here too would race that thread)."""
        from .zygote import zygote

        deadline = time.monotonic() + wait
        while True:
            if self.forked:
                code = zygote().exit_code(proc.pid)
            else:
                code = getattr(proc, "_exitcode", None)
            if isinstance(code, int) or time.monotonic() > deadline:
                return code if isinstance(code, int) else None
            time.sleep(0.02)

    def kill(self, ranks, why=None):
        """SIGKILL the engines of `ranks` and what they started; `why` marks them lost."""
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
        self.kill_remote([self.engine_ids[r] for r in ranks if r not in self._procs and r < len(self.engine_ids)])
        if why:
            for r in ranks:
                self.mark_lost(r, why)

    def interrupt(self, ranks):
        """SIGINT, like Ctrl-C in each rank: straight to the pid of a local engine, through
        ipyparallel (its nanny on the engine's host) for the others."""
        live = [r for r in ranks if r not in self.lost(ranks)]
        kill([self._procs[r].process for r in live if r in self._procs], signal.SIGINT)
        remote = [self.engine_ids[r] for r in live if r not in self._procs]
        if remote:
            self.signal_remote(remote, signal.SIGINT)

    def stop(self, shutdown=True):
        """End engines, controller and every helper process; remove the private folder."""
        procs = self.processes()
        controller = self.processes(engines=False)
        if self.client is not None:
            try:
                self.client.close(linger=0)
            except Exception:  # noqa: BLE001 - closing a broken client must not stop the stop
                pass
        self.client = None
        # Engines take over a second to exit on SIGTERM with torch loaded: the pool is
        # disposable, so SIGKILL all but the controller (which cleans up its own schedulers).
        for p in procs:
            kill([p], signal.SIGTERM if p in controller else signal.SIGKILL)
        kill(wait_gone(procs, timeout=2.0))
        wait_gone(procs, timeout=2.0)
        if self.cluster is not None:
            try:
                self.cluster.stop_cluster_sync()  # lets ipyparallel clean its own state and files
            except Exception:  # noqa: BLE001
                pass
        self.cluster = None
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper.wait(5)
            self._reaper = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self._procs = {}


class AttachedPool(Pool):
    """Engines someone else started (`ipcluster start`, `ipengine` by hand, a Slurm job), reached
    through their controller's ipcontroller-client.json (connect=PATH) or the cluster that
    `ipcluster start --profile NAME [--cluster-id ID]` made. Every registered engine becomes a rank,
    ordered by host, then engine id. It never starts engines, and stops them only when asked
    (stop(shutdown=True)). A lost engine is one the controller no longer hears: ipyparallel's
    heartbeat (or the engine's nanny, which tells the controller at once when its engine dies)."""

    local = False
    started_engines = False

    def __init__(self, connect=None, profile=None, cluster_id=None, ifname=None):
        super().__init__(ifname)
        self.connect, self.profile, self.cluster_id = connect, profile, cluster_id
        self.cluster = None

    def describe(self):
        return self.connect or f"profile {self.profile}" + (f", cluster {self.cluster_id}" if self.cluster_id else "")

    def connection_info(self):
        if self.connect:
            with open(self.connect) as f:
                return json.load(f)
        info = self.cluster.controller.get_connection_info()
        if hasattr(info, "__await__"):
            import asyncio

            info = asyncio.run(info)
        client = info["client"]
        if isinstance(client, str):
            with open(client) as f:
                client = json.load(f)
        return client

    def start(self, n, deadline, say):
        import ipyparallel as ipp

        self.workdir = tempfile.mkdtemp(prefix="ddplab-")
        say(f"attaching to the engines of {self.describe()} ...", f"正在连接 {self.describe()} 的引擎……")
        try:
            if self.connect:
                # (the path goes first: ipyparallel 9.2 ignores its url_file= keyword)
                self.client = ipp.Client(self.connect, timeout=max(1.0, deadline - time.perf_counter()))
            else:
                self.cluster = ipp.Cluster.from_file(profile=self.profile, cluster_id=self.cluster_id or "",
                                                     log=log)
                self.client = self.cluster.connect_client_sync()
        except (OSError, ipp.error.TimeoutError, KeyError, ValueError) as exc:
            raise StartFailed(f"cannot reach the controller of {self.describe()}: {exc}") from exc
        self.dropped = guard_client(self.client)
        want = n or 1
        while len(self.client.ids) < want:
            if time.perf_counter() > deadline:
                have = len(self.client.ids)
                raise StartFailed(f"{have} engine{'s' if have != 1 else ''} registered with the controller of "
                                  f"{self.describe()}, {want} wanted: start engines there (ipengine, ipcluster)")
            time.sleep(0.05)
        eids = sorted(self.client.ids)
        self.place(*self.locate(eids[:n] if n else eids, deadline))
        return self.engine_ids

    def _gone_why(self, rank):
        if self.client is not None and rank < len(self.engine_ids) and self.engine_ids[rank] not in self.client.ids:
            return "its engine is gone: the controller no longer hears it (the engine died, or its host)"
        return None

    def replace(self, ranks, deadline, say):
        hosts = ", ".join(sorted({self.hosts.get(r, "?") for r in ranks}))
        raise BadRequest(f"ranks {', '.join(map(str, ranks))} ran on engines started elsewhere ({hosts}): start new "
                         "engines there (ipengine), then %ddp_stop and %ddp_start --connect again; or %ddp_stop and "
                         "%ddp_start --connect to group the engines that are left")

    def kill(self, ranks, why=None):
        self.kill_remote([self.engine_ids[r] for r in ranks])
        if why:
            for r in ranks:
                self.mark_lost(r, why)

    def interrupt(self, ranks):
        live = [self.engine_ids[r] for r in ranks if r not in self.lost(ranks)]
        if live:
            self.signal_remote(live, signal.SIGINT)

    def pids(self):
        return []  # its processes are not this notebook's: nothing here may end them

    def stop(self, shutdown=False):
        """Leave the engines running (they are not ours), or with shutdown=True stop their cluster."""
        if self.client is not None:
            try:
                if shutdown and self.cluster is not None:
                    self.cluster.stop_cluster_sync()
                elif shutdown:
                    self.client.shutdown(targets="all", hub=True, block=False)
            finally:
                self.client.close(linger=0)
                self.client = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def make_pool(config):
    """The Pool a PoolConfig asks for."""
    if config.attached:
        return AttachedPool(config.connect, config.profile, config.cluster_id, config.ifname)
    return LocalPool(config.launcher, config.threads, config.profile, config.ifname, config.encrypt)
