"""A fork server for a pool's processes: it imports torch (and everything an engine or the
controller needs) once, then forks them with all of it already loaded.

    python -m ddplab.processes.zygote WORKDIR [--private-network] [--why-shared WHY]   (one JSON request per line on
    stdin, a reply on stdout)

Importing torch costs about 1.4 s of CPU per process, and torch._dynamo (which the first
DistributedDataParallel() imports) 1.2 s more; four engines on two cores doing that in turn
take most of a pool's start-up, and slow the first cells after it. The zygote pays it once,
for every pool of its notebook (started at %load_ext ddplab, before anything else is imported),
and its forks share the loaded pages copy-on-write (less memory too). Nothing here may start a
thread before forking.

With --private-network it first moves into a network namespace of its own (unshare(2): as root
CLONE_NEWNET; otherwise with a user namespace that maps the user to itself), where only a loopback
interface exists: every process it forks, the pool's controller and ranks, then listens where no
other account of the machine can connect (gloo's ports included). ipyparallel and the telemetry
talk over ipc:// socket files, which work across network namespaces. Its first reply says what
it got: {"network": "private"}, or {"network": "shared", "why": "..."} where the machine refuses.
A namespace is tried in a child process first: one that can be made but not completed (its uid
map or loopback refused) is never entered. Should the zygote itself still fail half-way, it
replies {"network": "broken", "why": ...} and exits; the notebook starts another on the machine's
network, which says why (--why-shared).

It imports in stages and says when each is done: {"ready": "controller"} once ipyparallel is in
(a controller can be forked then, and starts while torch is imported), {"ready": "engine"} when
everything is. Between imports it serves a request already waiting, so the controller of a pool
started at once waits for one import at most, not for all of torch. The notebook sends one
request at a time and reads its reply before the next. Collections are off in the zygote and its
objects frozen before each fork (gc.freeze, as Python's gc docs advise for fork servers): a
fork's collections skip them, so they neither take it 0.3-0.6 s nor copy the shared pages.

Requests: {"main": "engine" | "controller", "env": {...}, "cwd": "...", "output": "path/to/log",
"args": [...]} -> reply {"pid": N}. The zygote reaps its children and appends "pid exit-code"
lines to WORKDIR/exits. It exits when its stdin closes (the notebook's process is gone).

This module is also the notebook's side: `zygote()` starts (or returns) this process's zygote.
"""
import atexit
import gc
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

from ..shared import upstream

STAGES = {  # in order: what a process forked at that stage has loaded
    "controller": ("ipyparallel.controller.app",),
    "engine": (
        "ipyparallel.engine.app",  # ipykernel, IPython, zmq, traitlets
        "torch",
        "torch._dynamo",  # DistributedDataParallel() imports it
        "torch.distributed",
        "torch.nn.parallel",
        # what an engine would import on its own while it registers (measured: 0.2 s of CPU each,
        # mostly ipykernel's debugger, i.e. debugpy)
        "ipykernel.debugger", "IPython.core.completerlib", "IPython.core.oinspect", "IPython.extensions.storemagic",
        "IPython.core.logger", "bdb", "tornado.gen", "tornado.queues", "tornado.platform.asyncio", "pydoc", "code",
        "ddplab.rank",
        "ddplab.rank.probe",
        "ddplab.rank.workloads",
    ),
}


CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def isolate():
    """Move this (single-threaded) process into a new network namespace with its loopback up.
    Returns None, or why it could not (the machine's refusal, in words). A namespace that cannot
    be completed (made, but its uid map or loopback refused) is never entered: a child process
    tries first, and this process follows only where the child got all of it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the trial: whatever it makes ends with it
        os.close(read)
        try:
            why = _enter_namespace()
        except BaseException as exc:  # noqa: BLE001 - said to the parent, which decides
            why = f"the private network namespace could not be set up ({exc})"
        os.write(write, (why or "").encode()[:4000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        why = f.read().decode() or None
    os.waitpid(pid, 0)
    if why is not None:
        return why
    why = _enter_namespace()
    if why is not None:  # what the child could do, this process could not: half made, and cannot be undone
        raise NamespaceBroken(why)
    return None


class NamespaceBroken(RuntimeError):
    """This process entered a network namespace it could not complete (the notebook starts another zygote)."""


def _enter_namespace():
    """unshare into a network namespace (with a user namespace that maps the user to itself, when
    not root) and bring its loopback up; None, or why not."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    tries = [CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET] if uid == 0 else [CLONE_NEWUSER | CLONE_NEWNET]
    for flags in tries:
        if libc.unshare(flags) == 0:
            break
        why = os.strerror(ctypes.get_errno())
    else:
        return f"the machine does not allow a private network namespace (unshare: {why})"
    try:
        if flags & CLONE_NEWUSER:  # the user stays itself inside (files it makes are still its own)
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        loopback_up()
    except OSError as exc:
        return f"a private network namespace was made but could not be completed ({exc}), so it is not used"
    if flags & CLONE_NEWUSER:
        drop_capabilities()
    return None


def drop_capabilities():
    """Give up the capabilities a new user namespace grants (none is needed once loopback is up): a
    child this process starts without them (py-spy, dumping a rank's stack) may then ptrace it."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:  # _LINUX_CAPABILITY_VERSION_3: none
        log.warning("the pool's processes keep their namespace's capabilities (capset: %s): %%ddp_stacks may be "
                    "refused", os.strerror(ctypes.get_errno()))


def loopback_up():
    """Bring up `lo` in this (new) network namespace: 127.0.0.1 appears with it."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh22x", b"lo", 0)  # struct ifreq: name, flags, padding to 40 bytes
        flags = struct.unpack("16sh22x", fcntl.ioctl(s, siocgifflags, request))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh22x", b"lo", flags | iff_up))


def preload(between):
    """Import every stage's modules, in order; between(stage), the last stage loaded, is called
    after each stage and after each module of the next. A module of another package's internals
    (upstream.py) that is gone is left out: its name goes to the notebook with the stage."""
    import importlib

    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy's import-time warning, to our stderr
    loaded = None
    for name, modules in STAGES.items():
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError:
                if module not in upstream.NAMES:
                    raise
                upstream.feature_off(module, quiet=True)  # (said by the notebook: moved_names)
            if loaded:
                between(loaded)
        loaded = name
        between(loaded)


def moved_names():
    """The listed names of other packages (upstream.py) that moved, of the modules loaded so far: turned
    off here (and in every process forked from here) without a word, as the notebook says them once."""
    for path in upstream.check(imported_only=True, deep=False):
        upstream.feature_off(path, quiet=True)
    return upstream.turned_off()


def _reap(exits_path):
    def handler(signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with open(os.open(exits_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
                f.write(f"{pid} {code}\n")
    return handler


def _end_groups(forks):
    """The notebook is gone: end each fork not reaped yet with every process of its group (a fork is a
    group leader: os.setsid). The forks themselves die with the zygote (PR_SET_PDEATHSIG), but not what
    they started: the controller's schedulers are its multiprocessing children, and were left running
    when the notebook died while its pool started."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reap no more: a fork not reaped keeps its pid, so its group id
    for pid in forks:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already: its pid may be another process's now
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # (its group is empty)
            pass


def _end_with_zygote():
    """This fork ends with the zygote, which ends with its notebook (its stdin closes): a controller or
    engine forked before the notebook wrote it in the pool's pid file (the reaper's list) is not left
    running when the notebook dies in between."""
    import ctypes

    zygote = os.getppid()
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != zygote:  # (it died before the line above)
        os._exit(1)


def _become(request, inherited):
    """In the forked child: a fresh session, its environment and log, then ipengine/ipcontroller."""
    os.setsid()  # like ipyparallel's start_new_session: signals to the notebook do not reach it
    _end_with_zygote()
    gc.enable()  # for the fork's own objects; the zygote's were frozen: a full collection skips them
    for fd in inherited:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the owner's only
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in (devnull, log):
        if fd > 2:  # (with 0 and 1 closed above, they may have got those very numbers)
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from TMPDIR: the zygote's may be cached
    import random

    random.seed()  # forks share the zygote's random state; separate processes would not
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "ddplab.rank" in sys.modules:
        sys.modules["ddplab.rank"].RANK.preloaded = frozenset(sys.modules)
    os.chdir(request["cwd"])
    main = request.get("main", "engine")
    if main == "controller":
        os.umask(0o077)  # its connection files, logs and database: the owner's only (engines keep the user's umask)
    sys.argv = [f"ip{main}", *request.get("args", [])]
    code = 0
    try:
        if main == "controller":
            from ipyparallel.controller.app import main

            count_new_hearts_at_once()
            beat_slowly_between_registrations()
            ipc_urls_as_clients_build_them()
        else:
            from ipyparallel.engine.app import main
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report, then leave without running the zygote's code
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def count_new_hearts_at_once():
    """In the controller: count an engine's heart as soon as its first pong arrives. ipyparallel's
    HeartMonitor counts new hearts only at the next beat (its registration completes then), so
    every engine waited one to two beats. Its heart monitor runs in a process forked from the
    controller, so patching the class here reaches it. ipyparallel 9.2 (pinned; the names in upstream.py)."""
    from ipyparallel.controller.heartmonitor import HeartMonitor

    needs = ("handle_pong", "handle_new_hearts", "hearts", "responses")
    if not all([upstream.has(f"ipyparallel.controller.heartmonitor:HeartMonitor.{n}") for n in needs]):
        return  # (a new engine is counted at the next beat, as ipyparallel does)
    handle_pong = HeartMonitor.handle_pong

    def handle_pong_counting_new(self, msg):
        handle_pong(self, msg)
        if msg[0] in self.responses and msg[0] not in self.hearts:
            self.handle_new_hearts({msg[0]})  # adds it to self.hearts and tells the hub

    HeartMonitor.handle_pong = handle_pong_counting_new


SLOW_BEATS = 10  # once the engines are in, the controller pings them every 10th period (1 s at 100 ms)
FAST_FOR = 5.0  # at most, seconds of a ping every period after an engine's heart connects (its registration waits for one)


class Beats:
    """How often the heart monitor pings: every period while an engine registers (from its heart's
    connection until the monitor counts as many hearts as connected, FAST_FOR s at most), else every
    SLOW_BEATS periods; a heart that misses a ping missed every period since the last one, so a silent
    engine is dropped after as long a silence as before. A ping costs the monitor ~1.8 ms of Python
    (ZMQStream, traitlets): at 100 ms, 1.8% of a core taken from the ranks, the first cells after a
    start among them, had it pinged fast for all of FAST_FOR."""

    def __init__(self, period: int, now: float) -> None:
        self.period, self.fast_until, self.expected = period, now + FAST_FOR, 0

    def joined(self, now: float, hearts: int) -> None:
        """A heart connected while the monitor knew `hearts` of them."""
        self.fast_until, self.expected = now + FAST_FOR, max(self.expected, hearts) + 1

    def interval(self, now: float, hearts: int) -> int:
        """Milliseconds to the next ping, the monitor knowing `hearts` hearts now."""
        return self.period if now < self.fast_until and hearts < self.expected else self.period * SLOW_BEATS


def beat_slowly_between_registrations():
    """In the controller (its heart monitor process inherits the class): the monitor's periodic ping
    follows Beats; a zmq monitor on its pong socket says when an engine's heart connects, and brings
    the next ping forward. ipyparallel 9.2 (pinned; the names in upstream.py)."""
    import zmq
    from ipyparallel.controller.heartmonitor import HeartMonitor
    from zmq.eventloop.zmqstream import ZMQStream

    needs = ("start", "beat", "pong_stream", "period", "hearts", "responses", "on_probation")
    if not all([upstream.has(f"ipyparallel.controller.heartmonitor:HeartMonitor.{n}") for n in needs]):
        return  # (a ping every period, as ipyparallel does)
    start, beat = HeartMonitor.start, HeartMonitor.beat

    def start_watching_joins(self):
        beats = self._ddplab_beats = Beats(self.period, time.monotonic())

        def joined(_event):
            beats.joined(time.monotonic(), len(self.hearts))
            self.caller.stop()  # a ping now (the new heart may hear it), then every period
            self.caller.callback_time = self.period
            self.caller.start()
            self.loop.add_callback(self.beat)

        self._ddplab_joins = ZMQStream(self.pong_stream.socket.get_monitor_socket(zmq.EVENT_ACCEPTED), self.loop)
        self._ddplab_joins.on_recv(joined)
        start(self)

    def beat_when_due(self):
        missed = round(self.caller.callback_time / self.period)  # periods since the last ping
        for heart in self.hearts - self.responses:  # (beat() counts one of them)
            self.on_probation[heart] = self.on_probation.get(heart, 0) + missed - 1
        beat(self)
        self.caller.callback_time = self._ddplab_beats.interval(time.monotonic(), len(self.hearts))

    HeartMonitor.start, HeartMonitor.beat = start_watching_joins, beat_when_due


def ipc_urls_as_clients_build_them():
    """In the controller: join an ipc:// path and its port with ':', as ipyparallel's Client and
    engines do when they read the connection file (its controller joins them with '-', the way
    Jupyter kernels name ipc sockets, so nothing would connect). ipyparallel 9.2 (pinned; the names in upstream.py)."""
    from ipyparallel.controller.app import IPController

    needs = ("construct_url", "engine_info", "client_info")  # (and internal_info, which each controller sets)
    if not all([upstream.has(f"ipyparallel.controller.app:IPController.{n}") for n in needs]):
        return

    def construct_url(self, kind, channel, index=None):
        info = {"engine": self.engine_info, "client": self.client_info, "internal": self.internal_info}[kind]
        port = info[channel] if index is None else info[channel][index]
        return f"{info['interface']}:{port}"

    IPController.construct_url = construct_url


def main(argv=None):
    gc.disable()  # no collection leaves freed holes in pages the forks share (Python's gc docs: fork)
    from ..shared.system import OOM_HELPER, offer_to_oom_killer

    offer_to_oom_killer(OOM_HELPER)  # out of memory, it and its forks go before the notebook (ranks first: join)
    argv = argv or sys.argv[1:]
    workdir = argv[0]
    requests, replies = sys.stdin, sys.stdout
    try:
        why = isolate() if "--private-network" in argv else "not asked for (DDPLab.private_network = False)"
    except NamespaceBroken as exc:
        replies.write(json.dumps({"network": "broken", "why": str(exc)}) + "\n")
        replies.flush()
        return
    if "--why-shared" in argv:  # a zygote before this one could not complete its namespace: said so again
        why = argv[argv.index("--why-shared") + 1]
    replies.write(json.dumps({"network": "private"} if why is None else {"network": "shared", "why": why}) + "\n")
    replies.flush()
    exits = os.path.join(workdir, "exits")
    signal.signal(signal.SIGCHLD, _reap(exits))
    inherited = [requests.fileno(), replies.fileno()]

    forks = []

    def serve(line):
        request = json.loads(line)
        gc.freeze()  # what is loaded stays out of the forks' collections: no copy-on-write of it, no time
        pid = os.fork()
        if pid == 0:
            _become(request, inherited)
        forks.append(pid)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()

    said = []

    def between(loaded):  # a stage is loaded: say so once (with the names that moved); serve a request already waiting
        if loaded not in said:
            said.append(loaded)
            replies.write(json.dumps({"ready": loaded, "moved": moved_names()}) + "\n")
            replies.flush()
        if select.select([requests], [], [], 0)[0]:
            line = requests.readline()  # for what is loaded already (one at most: see above)
            if not line:
                raise EOFError
            if line.strip():
                serve(line)

    try:
        preload(between)
        for line in requests:
            if line.strip():
                serve(line)
    except EOFError:
        pass
    _end_groups(forks)
    shutil.rmtree(workdir, ignore_errors=True)  # the notebook is gone: nobody else will


# ---------------------------------------------------------------------------- the notebook's side
log = logging.getLogger("ddplab")
_zygotes: "dict[bool, Zygote]" = {}  # by whether its forks get a private network namespace
_zygote_lock = threading.Lock()
_broken = None  # why a zygote could not complete its private network namespace: the next ones use the machine's


def _private_asked() -> bool:
    """Whether a zygote started now should give its forks a private network namespace."""
    from ..shared.config import tunables

    return tunables().private_network and _broken is None


def zygote() -> "Zygote":
    """This process's zygote for DDPLab.private_network as it is now, started if it is not running (it
    then imports in the background). A pool keeps the zygote it started from (its replacement ranks
    must live where their peers do), so a change of the setting starts a second one for the next pool;
    the other is stopped once no pool forks from it."""
    from ..shared.config import tunables

    private = _private_asked()
    with _zygote_lock:
        for asked, other in list(_zygotes.items()):
            if other.proc.poll() is not None or (asked != private and not other.pools):
                if other.proc.poll() is None:
                    log.info("DDPLab.private_network is now %s: the engine fork server starts again", private)
                other.stop()
                del _zygotes[asked]
        if private not in _zygotes:
            _zygotes[private] = Zygote(private, why_shared=_broken if tunables().private_network else None)
        return _zygotes[private]


def started_zygote() -> "Zygote":
    """zygote(), once it has said where its forks live; one that entered a network namespace it could
    not complete (which cannot be undone) is replaced by one on the machine's network, which says why."""
    z = zygote()
    try:
        z.wait_network()
    except NamespaceBroken:
        z = zygote()
        z.wait_network()
    return z


def running_zygote() -> "Zygote | None":
    """The zygote a pool started now would fork from, if it runs (never starts one)."""
    z = _zygotes.get(_private_asked())
    return z if z is not None and z.proc.poll() is None else None


def held() -> int:
    """Bytes of a pool's memory need (config.POOL_MIB) the session holds already: the running zygote's
    resident memory, up to what a loaded one holds (config.ZYGOTE_MIB); 0 without one."""
    import psutil

    from ..shared.config import ZYGOTE_MIB

    z = running_zygote()
    if z is None:
        return 0
    try:
        return min(psutil.Process(z.proc.pid).memory_info().rss, ZYGOTE_MIB * 2**20)
    except psutil.Error:
        return 0


def stop_idle_zygotes() -> int:
    """Stop the zygotes no running pool forks from (each holds torch imported, ~210 MiB); how many. A local
    pool started later starts one again, cold (as at %load_ext)."""
    with _zygote_lock:
        idle = [key for key, z in _zygotes.items() if not z.pools]
        for key in idle:
            _zygotes.pop(key).stop()
    return len(idle)


@atexit.register
def stop_zygote() -> None:
    with _zygote_lock:
        for z in _zygotes.values():
            z.stop()
        _zygotes.clear()


class Zygote:
    """The notebook's handle on a zygote process: ask it to fork, read how its children ended.
    Its folder (0700) holds the exit codes of what it forked."""

    def __init__(self, private_network=True, why_shared=None):
        self.workdir = tempfile.mkdtemp(prefix="ddplab-zygote-")
        # one thread while importing: each fork sets its own share (torch.set_num_threads). Importing
        # torch._dynamo makes torch's cache folder: in the zygote's own, not /tmp/torchinductor_USER (a
        # name any account can take first, and left behind); each pool gives its ranks theirs (privacy.py)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(self.workdir, "inductor")}
        self.private_network_asked = private_network
        self.proc = subprocess.Popen([sys.executable, "-m", "ddplab.processes.zygote", self.workdir,
                                      *(["--private-network"] if private_network else []),
                                      *(["--why-shared", why_shared] if why_shared else [])], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self.lock = threading.Lock()
        self.pools = weakref.WeakSet()  # the running pools that fork from it (LocalPool.start, stop)
        self.stages = []  # the stages it has said are loaded
        self._network = None  # {"network": "private"} or {"network": "shared", "why": ...}, its first reply

    @property
    def network(self):
        """("private", None) if what it forks lives in a network namespace of its own, else
        ("shared", why)."""
        self.wait_network()
        return self._network["network"], self._network.get("why")

    def wait_network(self):
        """Wait for the zygote's first reply (where its forks live); NamespaceBroken if it could not
        complete its namespace (it has exited)."""
        with self.lock:
            while self._network is None:
                self._reply()

    @property
    def pid(self):
        return self.proc.pid

    def _reply(self):
        """The next line from the zygote (a stage loaded, or a fork's pid), as a dict."""
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the engine fork server exited (code {self.proc.wait()})")
        reply = json.loads(line)
        if "ready" in reply:
            self.stages.append(reply["ready"])
            for path in reply.get("moved", ()):  # what the zygote found moved (upstream.py): said here, once each
                if path in upstream.NAMES:
                    upstream.feature_off(path)
        if "network" in reply:
            log.info("engine fork server: network %s%s", reply["network"], f" ({reply['why']})" if "why" in reply else "")
            if reply["network"] == "broken":
                global _broken
                _broken = reply["why"]
                raise NamespaceBroken(reply["why"])
            self._network = reply
        return reply

    def wait_ready(self, stage="engine"):
        """Block until the zygote has imported what `stage` needs (it may have started long ago)."""
        with self.lock:
            while stage not in self.stages:
                self._reply()

    def fork(self, main, env, cwd, output, args=()):
        """A new process running ipyparallel's `main` ("engine" or "controller"); its pid."""
        self.wait_ready(main)
        request = {"main": main, "env": env, "cwd": cwd, "output": output, "args": list(args)}
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            while True:
                reply = self._reply()  # a later stage may say it is loaded before the zygote reads the request
                if "pid" in reply:
                    return reply["pid"]

    def exit_code(self, pid):
        """How a forked process ended (negative: the signal), or None if not known (yet)."""
        try:
            with open(os.path.join(self.workdir, "exits")) as f:
                for line in f:
                    p, code = line.split()
                    if int(p) == pid:
                        return int(code)
        except (OSError, ValueError):
            pass
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
