"""The part of ddplab that runs inside every engine (rank); in rank code it is the name `ddplab`.

    ddplab.log(loss=loss, samples=len(x))      # one training step
    with ddplab.phase("eval"): ...

log() only appends to columns in memory (about a microsecond): a background thread sends new
points to the notebook a few times a second (a zmq DEALER socket, signed data: wire.py), and the
columns themselves are the rank's exact history.
Keep this module light: engines import only it, never widget or client code.
"""
import contextlib
import datetime
import math
import os
import socket
import threading
import time
from array import array
from bisect import bisect_left

from . import wire

_flush_every = 0.25  # seconds between telemetry batches (DDPLab.flush, set when the group forms)
preloaded = frozenset()  # the modules the zygote had loaded when it forked this engine (empty: not forked)


class Columns:
    """Every point this rank logged, one array per field (8 bytes a value): cell, step, time since
    the cell started, loss and samples (NaN: not logged), and extra scalars as sparse columns."""

    def __init__(self):
        self.cell, self.step = array("i"), array("q")
        self.time, self.loss, self.samples = array("d"), array("d"), array("d")
        self.extras = {}  # name -> (point indices array("i"), values array("d"))

    def __len__(self):
        return len(self.samples)  # appended last: a point counts once all its columns have it

    def extra(self, name, value):
        """An extra scalar of the point being logged (appended before its columns: a reader that
        counts points by len() sees it only with its point)."""
        if name not in self.extras:
            self.extras[name] = (array("i"), array("d"))
        index, values = self.extras[name]
        values.append(value)
        index.append(len(self.samples))

    def since(self, start, stop):
        """The columns of points start..stop-1; extras with indices counted from start."""
        cols = {"step": self.step[start:stop], "time": self.time[start:stop], "loss": self.loss[start:stop],
                "samples": self.samples[start:stop]}
        extras = {}
        for name, (index, values) in self.extras.items():
            lo, hi = bisect_left(index, start), bisect_left(index, stop)
            if hi > lo:
                extras[name] = (array("i", (i - start for i in index[lo:hi])), values[lo:hi])
        return cols, extras


_log = Columns()
_events = []  # (cell, time, kind, value): phase changes
_cell = 0
_cell_t0 = time.perf_counter()
_step = -1
_rank = 0
_sent = _events_sent = 0
_sock = None
_key = b""
_lock = threading.Lock()
_flusher = None
_in_cell = False
_main_thread = threading.main_thread().ident  # the thread that runs cells
_formed = False  # the process group of this process is ddplab's
NAN = math.nan


_generation = 0  # which forming of the group this rank is in (the notebook counts them)
_seq = 0  # batches sent in this forming (wire.py: the notebook drops one that is not newer than the last)
_command_seq = 0  # the last command accepted from the notebook in this forming
lang_of_pool = "en"  # the pool's language (%ddp_start --lang, a zh notebook): rank code's say() follows it
_knobs = {}  # name -> value: set from the notebook while cells run (Lab.set_knob, a slider)


def knob(name, default=None):
    """A value the notebook can change while this cell runs (a slider, %ddp_knob NAME VALUE):
    read it where the training loop can follow it, e.g. each step: ddplab.knob("period", 16)."""
    return _knobs.get(name, default)


def log(loss=None, samples=None, step=None, **scalars):
    """Record one point (a training step): loss, samples processed, step (default: the next one).

    Extra numbers (lr=..., acc=...) are kept in the history too. Costs about a microsecond:
    nothing is sent from here.
    """
    global _step
    _step = _step + 1 if step is None else int(step)
    if loss is not None:
        loss = loss.item() if hasattr(loss, "item") else float(loss)  # a tensor: its value, not its graph
    c = _log
    if scalars:  # checked first, then appended before the point (the flusher may read in between)
        for name, value in [(name, _number(name, value)) for name, value in scalars.items()]:
            c.extra(name, value)
    c.cell.append(_cell)
    c.step.append(_step)
    c.time.append(time.perf_counter() - _cell_t0)
    c.loss.append(NAN if loss is None else loss)
    c.samples.append(NAN if samples is None else samples)  # last: now the point counts
    if _fault is not None:
        _drill(_step)


def _number(name, value):
    try:
        return value.item() if hasattr(value, "item") else float(value)
    except (TypeError, ValueError):
        raise TypeError(f"ddplab.log({name}={value!r}): extra values must be numbers (lr=0.1, acc=0.93, ...)") from None


class FaultDrill(RuntimeError):
    """The error a rank raises for `%ddp_fault raise`."""


_fault = None  # a fault drill set by %ddp_fault: {"kind": "kill"|"raise"|"slow", "at_step": n, "factor": f}
_last_log = None


def _drill(step):
    """Play the fault drill: called from log(), i.e. once per training step."""
    global _fault, _last_log
    kind, at = _fault["kind"], _fault.get("at_step")
    if kind == "slow":  # a straggler: stretch each step to `factor` times its length
        now = time.perf_counter()
        if _last_log is not None:
            time.sleep((_fault["factor"] - 1) * (now - _last_log))
        _last_log = time.perf_counter()
    elif at is None or step >= at:
        _fault = None
        if kind == "kill":
            # send the points logged since the last flush first (a drill should report the step
            # it was set for), and give zmq's I/O thread a moment to put them on the wire
            _flush()
            time.sleep(0.1)
            os.kill(os.getpid(), 9)  # SIGKILL: the process dies at once, as in a real crash
        raise FaultDrill(f"fault drill: rank {_rank} raised at step {step} (%ddp_fault raise)")


def _set_fault(fault):
    global _fault, _last_log
    _fault, _last_log = fault, None


@contextlib.contextmanager
def phase(name):
    """Mark a phase of the cell, such as "eval" or "checkpoint"; the dashboard shows it."""
    _events.append((_cell, time.perf_counter() - _cell_t0, "phase", str(name)))
    try:
        yield
    finally:
        _events.append((_cell, time.perf_counter() - _cell_t0, "phase", None))


def history():
    """Every point this rank logged, as numpy arrays: the exact record (the live view may skip)."""
    import numpy as np

    c = _log
    with _lock:
        n = len(c)
        cols = {name: np.frombuffer(getattr(c, name), dtype=dtype)[:n].copy()
                for name, dtype in (("cell", "i4"), ("step", "i8"), ("time", "f8"), ("loss", "f8"),
                                    ("samples", "f8"))}
        cols["extras"] = {}
        for name, (index, values) in c.extras.items():
            k = bisect_left(index, n)  # an extra of a point still being logged waits for its point
            cols["extras"][name] = (np.frombuffer(index, dtype="i4")[:k].copy(), np.frombuffer(values, dtype="f8")[:k].copy())
    return cols


WHERE_AFTER = 0.5  # seconds into a cell before the telemetry thread says where the rank is


def _flush(final=False, beat=False, force=False):
    """Send points and events not sent yet, one batch per cell; drop them if the notebook is not
    reading (the live view may skip; history() stays exact). beat: the telemetry thread's tick;
    while a cell has run WHERE_AFTER seconds, each tick says where the rank is, points or not.
    force: send a batch even with nothing in it."""
    global _sent, _events_sent, _seq
    from . import probe

    with _lock:
        _events.extend((_cell, t, kind, value) for t, kind, value in probe.take_hints())
        n, m = len(_log), len(_events)
        where = None
        if beat and _in_cell and time.perf_counter() - _cell_t0 >= WHERE_AFTER:
            where = probe.where(_main_thread)
        if _sock is None or (n == _sent and m == _events_sent and not final and not force and where is None):
            return
        start, events = _sent, [e[1:] for e in _events[_events_sent:m] if e[0] == _cell]
        _sent, _events_sent = n, m
        while True:  # points of an earlier cell go in their own batch
            cell = _log.cell[start] if start < n else _cell
            stop = start
            while stop < n and _log.cell[stop] == cell:
                stop += 1
            cols, extras = _log.since(start, stop)
            last = stop >= n
            _seq += 1
            frames = wire.encode(_key, _rank, cell, cols, final=final and last, events=events if last else (),
                                 extras=extras, where=where if last else None,
                                 calls=probe.cell_calls() if final and last else None, gen=_generation, seq=_seq)
            try:
                import zmq

                _sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
            except Exception:  # noqa: BLE001
                pass
            start = stop
            if last:
                break


def _agent():
    """The rank's telemetry thread: a batch every _flush_every seconds, and the notebook's signed
    commands (cut: break this rank's links to its peers, so a collective that cannot finish fails)."""
    while True:
        time.sleep(_flush_every)
        try:
            _commands()
            _flush(beat=True)
        except Exception:  # noqa: BLE001 - the live view may skip a tick; the rank goes on
            pass


def _commands():
    global _command_seq
    import zmq

    with _lock:
        if _sock is None:
            return
        received = []
        while True:
            try:
                received.append(_sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
    for frames in received:
        command = wire.decode_command(_key, frames, _rank, _generation, _command_seq)
        if command is None:
            continue  # not from the notebook, not for this rank and forming, or sent before: dropped
        _command_seq = command["seq"]
        if command.get("cmd") == "cut":
            _cut(command.get("ports", ()))  # (for this forming only: a late cut must not break the next)
        elif command.get("cmd") == "knob" and isinstance(command.get("name"), str):
            _knobs[command["name"]] = command.get("value")


def _new_cell(*_):
    global _cell, _cell_t0, _step, _in_cell
    from . import probe

    _flush()
    probe.new_cell()
    _cell, _cell_t0, _step, _in_cell = _cell + 1, time.perf_counter(), -1, True
    _events.append((_cell, 0.0, "begin", None))  # the notebook knows the cell reached this rank (next tick)


def _cell_done(*_):
    global _in_cell
    _in_cell = False
    _flush(final=True)  # so the notebook sees every point of the cell as soon as it ends


def _connect(address, key, generation, serverkey=None):
    """Connect the telemetry socket and hook cell start/end (once per engine). key: the pool's
    telemetry key (every batch is signed with it); serverkey: the notebook's CurveZMQ public key
    (the connection is then encrypted). A first, empty batch tells the notebook where this rank is."""
    global _sock, _flusher, _key, _seq, _command_seq, _generation
    import zmq

    with _lock:  # a new forming: its batches and commands are counted afresh, on a new connection
        _key, _generation, _seq, _command_seq = key, generation, 0, 0
        if _sock is not None:
            _sock.close(linger=0)
        _sock = zmq.Context.instance().socket(zmq.DEALER)  # batches out; the notebook's commands in
        if serverkey:
            _sock.curve_serverkey = serverkey.encode() if isinstance(serverkey, str) else serverkey
            _sock.curve_publickey, _sock.curve_secretkey = zmq.curve_keypair()
        _sock.setsockopt(zmq.SNDHWM, 1000)
        _sock.setsockopt(zmq.LINGER, 1000)
        _sock.connect(address)
    _flush(force=True)
    if _flusher is None:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:  # (pre/post_execute fire for silent cells too, unlike *_run_cell)
            shell.events.register("pre_execute", _new_cell)
            shell.events.register("post_execute", _cell_done)
        _flusher = threading.Thread(target=_agent, name="ddplab-telemetry", daemon=True)
        _flusher.start()


def _user_ns():
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else globals()


def _listening_ports():
    import psutil

    return {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def _cut(ports=()):
    """Cut this rank's links to its peers: every TCP connection to a gloo port of the group (`ports`:
    every rank's gloo listeners; and this rank's own listeners) is shut down, so a collective that
    waits on them fails ("Connection closed by peer") here and on the other side. Safe from another
    thread than the one blocked in the collective: the descriptors stay gloo's."""
    import psutil

    ports = set(ports) | _listening_ports()
    for c in psutil.Process().net_connections("tcp"):
        if c.raddr and c.fd >= 0 and (c.laddr.port in ports or c.raddr.port in ports):
            try:
                s = socket.socket(fileno=c.fd)
            except OSError:  # closed since it was listed
                continue
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                s.detach()  # gloo still owns the descriptor


def _close_group(ports=()):
    """Cut this (idle) rank's links and destroy its group, so peers waiting on it in a collective
    fail at once. Destroying the group alone is not enough: a rank whose collective already failed
    keeps its gloo sockets open (the failed work still holds the group)."""
    import torch.distributed as dist

    _cut(ports)
    if dist.is_initialized():
        _destroy()


def _destroy():
    """ddplab's own destroy_process_group (the learner's is wrapped to leave a hint, probe.py)."""
    import torch.distributed as dist

    getattr(dist.destroy_process_group, "__wrapped__", dist.destroy_process_group)()


def _bound_to_old_group():
    """Names in the rank's namespace of objects tied to a process group (they need re-creating)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    names = []
    for name, value in list(_user_ns().items()):
        if isinstance(value, DistributedDataParallel):
            names.append((name, "DistributedDataParallel"))
        elif isinstance(value, dist.ProcessGroup):
            names.append((name, "ProcessGroup"))
    return names


_listener = None  # rank 0's rendezvous socket (a TCPStore unbound would listen on every interface)


def _store_socket(host, port):
    """A socket listening on host:port only, for rank 0's TCPStore: torch's own listens on every
    interface whatever host it is given, and a TCPStore accepts anyone who reaches it."""
    global _listener
    if _listener is not None:
        _listener.close()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    _listener = socket.socket(family, socket.SOCK_STREAM)
    _listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _listener.bind((host, port))
    _listener.listen(128)
    return _listener.fileno()


def form_group(rank, world_size, rendezvous, timeout, threads, telemetry=None, flush=0.25, key=b"", ifname=None,
               knobs=None, lang="en", generation=0, telemetry_serverkey=None, store_serverkey=None,
               compile_cache=None):
    """Join the gloo process group and preload the names every cell can use.

    rendezvous is "file:///path" (a FileStore: opens no network port), "signed://host:port" (the
    signed store rank 0 serves, store.py: across hosts), or "tcp://host:port" (rank 0 hosts a
    TCPStore bound to that address only). ifname: the interface gloo uses (this rank's own,
    toward its peers). telemetry is the notebook's zmq address for log() points, sent every
    `flush` seconds and signed with `key` (it reaches the rank in this call: ipyparallel's signed
    channel); telemetry_serverkey and store_serverkey: CurveZMQ public keys of the notebook's
    telemetry socket and of rank 0's store (their traffic is then encrypted). compile_cache: the
    folder torch.compile may use, checked here again (privacy.py); None: this host's default.
    """
    global _rank, _flush_every, _formed, lang_of_pool, _generation
    _flush_every, lang_of_pool = flush, lang
    if not telemetry:
        _generation = generation  # (with telemetry: set with its new connection, _connect)
    _knobs.update(knobs or {})
    compile_cache, refused = _private_compile_cache(compile_cache)
    import torch
    import torch._dynamo  # noqa: F401 - DistributedDataParallel() needs it: imported now, not in a cell
    import torch.distributed as dist

    torch.set_num_threads(threads)
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname  # gloo reads it when the group is made
    stale = []
    if "torch.nn.parallel" in __import__("sys").modules:  # only if DDP was ever used here
        stale = _bound_to_old_group()
    if dist.is_initialized():
        _destroy()
    kind, _, where = rendezvous.partition("://")
    wait = datetime.timedelta(seconds=timeout)
    if kind == "file":
        store = dist.FileStore(where, world_size)
    elif kind == "signed":
        from .store import SignedStore

        store = SignedStore(f"tcp://{where}", store_key(key, generation), timeout=wait, serverkey=store_serverkey)
    elif kind == "tcp":
        host, _, port = where.rpartition(":")
        store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=wait,
                              master_listen_fd=_store_socket(host, int(port)) if rank == 0 else None)
    else:
        raise ValueError(f"unknown rendezvous {rendezvous!r}: use file:///path, signed://host:port or tcp://host:port")
    from . import probe

    init = getattr(dist.init_process_group, "__wrapped__", dist.init_process_group)
    init("gloo", store=store, rank=rank, world_size=world_size, timeout=wait)
    _rank, _formed = rank, True
    probe.patch(lambda: _formed)
    if telemetry:
        _connect(telemetry, key, generation, telemetry_serverkey)

    import ddplab.rank as this

    _user_ns().update(rank=rank, world_size=world_size, torch=torch, dist=dist, nn=torch.nn, ddplab=this)
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "threads": torch.get_num_threads(),
        "backend": dist.get_backend(),
        "stale": stale,
        "ports": sorted(_listening_ports()),  # gloo's listeners, for _close_group
        "compile_cache": compile_cache,
        "compile_refused": refused,
    }


def _private_compile_cache(wanted):
    """Point torch.compile (and Triton) at a folder only this user can write: `wanted` if it is one,
    else a new private folder. Returns (folder, why `wanted` was refused or None)."""
    import tempfile

    from .privacy import compile_cache, default_compile_cache

    folder, refused = compile_cache(wanted or default_compile_cache(),
                                    lambda: tempfile.mkdtemp(prefix="ddplab-torchinductor-"))  # (0700, a random name)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder  # torch reads it at each use
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    return folder, refused


def store_key(key, generation):
    """The rendezvous store's key for one forming of the group: a request signed for an earlier
    forming is refused by the next one's store."""
    import hashlib
    import hmac

    return hmac.new(key, f"rendezvous store {generation}".encode(), hashlib.sha256).digest()


def _reach(controller, ifname=None):
    """Where this engine is: host, pid, cores, and its IPv4 address and interface toward
    `controller` (the route its packets take: no name lookup, whatever the hostname resolves to,
    127.0.1.1 included), or on interface `ifname` if given."""
    import psutil

    from ddplab.system import cores

    interfaces = psutil.net_if_addrs()
    if ifname:
        found = [a.address for a in interfaces.get(ifname, ()) if a.family == socket.AF_INET]
        if not found:
            have = ", ".join(n for n, addrs in interfaces.items() if any(a.family == socket.AF_INET for a in addrs))
            raise RuntimeError(f"{socket.gethostname()} has no IPv4 address on {ifname!r} (it has: {have})")
        ip = found[0]
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((controller, 9))  # UDP: picks the route, sends nothing
            ip = s.getsockname()[0]
        ifname = next((n for n, addrs in interfaces.items() if any(a.address == ip for a in addrs)), None)
    return {"host": socket.gethostname(), "pid": os.getpid(), "ip": ip, "ifname": ifname, "cores": cores()}


def _serve_store(address, key, generation, curve_secretkey=None):
    """Rank 0: serve the signed rendezvous store of this forming on `address`; its port."""
    from . import store

    return store.serve(address, store_key(key, generation), curve_secretkey)


def _leave():
    """Leave the group and stop sending telemetry, the engine staying up (a pool attached to
    engines someone else started leaves them as it found them, but for their variables)."""
    global _sock
    import torch.distributed as dist

    if dist.is_initialized():
        _destroy()
    if "ddplab.store" in __import__("sys").modules:
        __import__("sys").modules["ddplab.store"].stop()
    with _lock:
        if _sock is not None:
            _sock.close(linger=0)
            _sock = None


def __getattr__(name):
    if name == "checkpoint":  # ddplab.checkpoint.save(...) in rank code
        import ddplab.checkpoint

        return ddplab.checkpoint
    raise AttributeError(f"module 'ddplab' (in a rank) has no attribute {name!r}")
