"""The part of ddplab that runs inside every engine (rank); in rank code it is the name `ddplab`.

    ddplab.log(loss=loss, samples=len(x))      # one training step
    with ddplab.phase("eval"): ...

log() only appends to a list: a background thread sends new points to the notebook a few
times a second (a zmq PUSH socket), and the list itself is the rank's exact history.
Keep this module light: engines import only it, never widget or client code.
"""
import contextlib
import datetime
import os
import pickle
import socket
import threading
import time

FLUSH_EVERY = 0.25  # seconds between telemetry batches

_points = []  # every point: (cell, step, time since the cell started, loss, samples, scalars)
_events = []  # (cell, time, kind, value): phase changes
_cell = 0
_cell_t0 = time.perf_counter()
_step = -1
_rank = 0
_sent = _events_sent = 0
_sock = None
_lock = threading.Lock()
_flusher = None


def log(loss=None, samples=None, step=None, **scalars):
    """Record one point (a training step): loss, samples processed, step (default: the next one).

    Extra keyword values (lr=..., acc=...) are kept in the history. Costs about a microsecond:
    nothing is sent from here.
    """
    global _step
    _step = _step + 1 if step is None else step
    if loss is not None:
        loss = loss.item() if hasattr(loss, "item") else float(loss)  # a tensor: its value, not its graph
    _points.append((_cell, _step, time.perf_counter() - _cell_t0, loss, samples, scalars or None))


@contextlib.contextmanager
def phase(name):
    """Mark a phase of the cell, such as "eval" or "checkpoint"; the dashboard shows it."""
    _events.append((_cell, time.perf_counter() - _cell_t0, "phase", str(name)))
    try:
        yield
    finally:
        _events.append((_cell, time.perf_counter() - _cell_t0, "phase", None))


def history():
    """Every point this rank logged (the exact record; the live view may skip some)."""
    return list(_points)


def _flush(final=False):
    """Send points and events not sent yet; drop the batch if the notebook is not reading."""
    global _sent, _events_sent
    with _lock:
        n, m = len(_points), len(_events)
        if _sock is None or (n == _sent and m == _events_sent and not final):
            return
        batch = (_rank, _cell, _points[_sent:n], _events[_events_sent:m], final)
        _sent, _events_sent = n, m
        try:
            import zmq

            _sock.send(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL), zmq.NOBLOCK)
        except Exception:  # noqa: BLE001 - the live view may skip; history() stays exact
            pass


def _flush_forever():
    while True:
        time.sleep(FLUSH_EVERY)
        _flush()


def _new_cell(*_):
    global _cell, _cell_t0, _step
    _flush()
    _cell, _cell_t0, _step = _cell + 1, time.perf_counter(), -1


def _cell_done(*_):
    _flush(final=True)  # so the notebook sees every point of the cell as soon as it ends


def _connect(address):
    """Connect the telemetry socket and hook cell start/end (once per engine)."""
    global _sock, _flusher
    import zmq

    with _lock:
        if _sock is not None:
            _sock.close(linger=0)
        _sock = zmq.Context.instance().socket(zmq.PUSH)
        _sock.setsockopt(zmq.SNDHWM, 1000)
        _sock.setsockopt(zmq.LINGER, 1000)
        _sock.connect(address)
    if _flusher is None:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            shell.events.register("pre_run_cell", _new_cell)
            shell.events.register("post_run_cell", _cell_done)
        _flusher = threading.Thread(target=_flush_forever, name="ddplab-telemetry", daemon=True)
        _flusher.start()


def _user_ns():
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else globals()


def form_group(rank, world_size, rendezvous, timeout, threads, telemetry=None):
    """Join the gloo process group and preload the names every cell can use.

    rendezvous is "file:///path" (a FileStore: opens no network port) or
    "tcp://host:port" (rank 0 hosts a TCPStore there; needed across hosts).
    telemetry is the notebook's zmq address for log() points.
    """
    global _rank
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    if dist.is_initialized():
        dist.destroy_process_group()
    kind, _, where = rendezvous.partition("://")
    wait = datetime.timedelta(seconds=timeout)
    if kind == "file":
        store = dist.FileStore(where, world_size)
    elif kind == "tcp":
        host, _, port = where.rpartition(":")
        store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=wait)
    else:
        raise ValueError(f"unknown rendezvous {rendezvous!r}: use file:///path or tcp://host:port")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=wait)
    _rank = rank
    if telemetry:
        _connect(telemetry)

    import ddplab.rank as this

    _user_ns().update(rank=rank, world_size=world_size, torch=torch, dist=dist, nn=torch.nn, ddplab=this)
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "threads": torch.get_num_threads(),
        "backend": dist.get_backend(),
    }
