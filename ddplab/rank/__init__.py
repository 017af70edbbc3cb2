"""The part of ddplab that runs inside every engine (rank); in rank code it is the name `ddplab`.

    ddplab.log(loss=loss, samples=len(x))      # one training step
    with ddplab.phase("eval"): ...
    ddplab.knob("period", 16)                  # a value the notebook can change while the cell runs

log() only appends to columns in memory (about a microsecond): a background thread sends new
points to the notebook a few times a second (a zmq DEALER socket, signed data: wire.py), and the
columns themselves are the rank's exact history.

Each engine process holds one `Rank` (RANK): its state, and the protocol the notebook calls through
ipyparallel, always as `call(method, ...)` -> RANK.method(...): join, leave, reach, serve_store,
close_group, set_fault, history, debug_start/debug_command/debug_end, checksums. Keep this module
light: engines import it, never widget or client code.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import logging
import math
import os
import socket
import sys
import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, SupportsFloat

from ..shared import upstream, wire
from ..shared.system import OOM_RANK, memory_limit, offer_to_oom_killer
from .breakpoints import Breakpoints
from .probe import Probe
from .recorder import Recorder, memory

if TYPE_CHECKING:  # (engines import torch and zmq when they need them, not with this module)
    import torch
    import zmq
    from torch.distributed.device_mesh import DeviceMesh

    from ..shared.privacy import Address

    Extras = dict[str, tuple[array[int], array[float]]]  # name -> (point indices, values)

NAN = math.nan
MEMORY_EVERY = 2.0  # seconds between the memory figures a rank sends in a long cell (a namespace scan: ~1 ms)
GLOO_PATIENCE = 24 * 3600  # seconds gloo lets a collective wait: the notebook cuts it at the pool's timeout first
PAUSED_TICK = 0.02  # seconds between looks for the notebook's commands while pdb waits for one
SWEEP_EVERY = 1.0  # seconds between looks for another account's connections to gloo's listeners (~0.5 ms each)
WHERE_AFTER = 0.5  # seconds into a cell before the telemetry thread says where the rank is (engine side: not a
# DDPLab setting, which lives in the notebook; half a second keeps quick cells silent)
log_ddplab = logging.getLogger("ddplab")


def _heap_trimmer() -> Callable[[int], int] | None:
    """glibc's malloc_trim, which gives the free pages of malloc's heaps back to the system (None where the C
    library has none: musl, macOS). glibc keeps what torch frees for reuse: lesson 19's four ranks held 1.3 GiB
    at its peak without a trim at each cell's end, 0.9 GiB with it (private memory, measured)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


TRIM = _heap_trimmer()
MMAP_THRESHOLD = 4 * 2**20  # bytes: a larger block is mapped on its own, given back when freed


def fix_mmap_threshold(limit: int | None) -> bool:
    """Where the session's memory is limited (`limit`: memory_limit(), bytes), hold glibc's mmap threshold
    at MMAP_THRESHOLD; True if held. glibc raises it to the largest block freed (up to 32 MiB), after which
    tensors of 4-32 MiB live in malloc's heaps and fragment them: lesson 06 peaked at 1.66-1.70 GiB in a
    2 GiB box, 1.43 GiB with the threshold held (lesson 19: 1.54 -> 1.16). Held, glibc stops adjusting its
    thresholds, which costs speed: FSDP2's step (the bench's sharded workload under torchrun) ran 3.5 %
    slower with it (4 alternated pairs, each slower), the bench's DDP MLP step 3.6 % (4 pairs, 3 slower). So
    where memory is not short glibc keeps its own. No-op where the C library has no mallopt."""
    if limit is None:
        return False
    try:
        ctypes.CDLL(None).mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD (malloc.h)
    except (OSError, AttributeError):
        log_ddplab.debug("no mallopt in this C library: malloc's thresholds left as they are")
        return False
    return True


class Columns:
    """Every point this rank logged, one array per field (8 bytes a value): cell, step, time since
    the cell started, loss and samples (NaN: not logged), and extra scalars as sparse columns."""

    def __init__(self) -> None:
        self.cell, self.step = array("i"), array("q")
        self.time, self.loss, self.samples = array("d"), array("d"), array("d")
        self.extras: Extras = {}  # name -> (point indices array("i"), values array("d"))

    def __len__(self) -> int:
        return len(self.samples)  # appended last: a point counts once all its columns have it

    def extra(self, name: str, value: float) -> None:
        """An extra scalar of the point being logged (appended before its columns: a reader that
        counts points by len() sees it only with its point)."""
        if name not in self.extras:
            self.extras[name] = (array("i"), array("d"))
        index, values = self.extras[name]
        values.append(value)
        index.append(len(self.samples))

    def since(self, start: int, stop: int) -> tuple[dict[str, array[int] | array[float]], Extras]:
        """The columns of points start..stop-1; extras with indices counted from start."""
        cols: dict[str, array[int] | array[float]] = {
            "step": self.step[start:stop], "time": self.time[start:stop], "loss": self.loss[start:stop],
            "samples": self.samples[start:stop]}
        extras: Extras = {}
        for name, (index, values) in self.extras.items():
            lo, hi = bisect_left(index, start), bisect_left(index, stop)
            if hi > lo:
                extras[name] = (array("i", (i - start for i in index[lo:hi])), values[lo:hi])
        return cols, extras


class FaultDrill(RuntimeError):
    """The error a rank raises for `%ddp_fault raise`."""


def _number(name: str, value: SupportsFloat | torch.Tensor) -> float:
    try:
        return value.item() if hasattr(value, "item") else float(value)
    except (TypeError, ValueError):
        raise TypeError(f"ddplab.log({name}={value!r}): extra values must be numbers (lr=0.1, acc=0.93, ...)") from None


def store_key(key: bytes, generation: int) -> bytes:
    """The rendezvous store's key for one forming of the group: a request signed for an earlier
    forming is refused by the next one's store."""
    import hashlib
    import hmac

    return hmac.new(key, f"rendezvous store {generation}".encode(), hashlib.sha256).digest()


class Sender:
    """A rank's telemetry: a batch of what it logged a few times a second (a zmq DEALER socket, signed
    data, each batch numbered within the group's forming: wire.py), and the notebook's signed
    commands (cut, knob) read on the same connection."""

    def __init__(self, rank: Rank) -> None:
        self.rank = rank
        self.sent = self.events_sent = self.spans_sent = 0  # points, events and spans already sent
        self.memory_at = 0.0  # when the rank's memory was last measured (every MEMORY_EVERY seconds in a cell)
        self.held: dict[str, Any] | None = None  # memory measured on the cell's thread, not sent yet
        self.flush_every = 0.25  # seconds between batches (DDPLab.flush, given when the group forms)
        self.flushed_at = 0.0  # when the last batch was made (by the cell's steps, or the telemetry thread)
        self._failing = 0  # beats failed in a row
        self.generation = 0  # which forming of the group the rank is in (the notebook counts them)
        self.main_thread = threading.main_thread().ident  # the thread that runs cells
        self._sock: zmq.Socket[bytes] | None = None
        self._key = b""
        self._agent: threading.Thread | None = None
        self._seq = 0  # batches sent in this forming
        self._command_seq = 0  # the last command accepted from the notebook in this forming
        self.cuttable: int | None = None  # the forming a cut may break: set when it has connected, cleared when the next forms

    def flush(self, final: bool = False, beat: bool = False, force: bool = False) -> None:
        """Send points and events not sent yet, one batch per cell; drop them if the notebook is not
        reading (the live view may skip; history() stays exact). beat: the telemetry thread's tick;
        while a cell has run WHERE_AFTER seconds, each tick says where the rank is, points or not.
        force: send a batch even with nothing in it."""
        import zmq

        rank, probe = self.rank, self.rank.probe
        self.flushed_at = time.monotonic()
        with rank.lock:
            rank.events.extend((rank.cell, t, kind, value) for t, kind, value in probe.take_hints())
            n, m, k = len(rank.columns), len(rank.events), len(rank.recorder.spans)
            where = held = None
            if beat and rank.in_cell and time.perf_counter() - rank.cell_t0 >= WHERE_AFTER:
                where = probe.where(self.main_thread)
            if self._sock is None or (n == self.sent and m == self.events_sent and k == self.spans_sent and not final
                                      and not force and where is None):
                return
            if final:  # (on the cell's thread: IPython's post_execute)
                self.held, self.memory_at = memory(_user_ns()), time.monotonic()
            held, self.held = self.held, None
            start, events = self.sent, [e[1:] for e in rank.events[self.events_sent:m] if e[0] == rank.cell]
            spans = rank.recorder.spans.since(self.spans_sent, k) if k > self.spans_sent else None
            self.sent, self.events_sent, self.spans_sent = n, m, k
            while True:  # points of an earlier cell go in their own batch
                cell = rank.columns.cell[start] if start < n else rank.cell
                stop = start
                while stop < n and rank.columns.cell[stop] == cell:
                    stop += 1
                cols, extras = rank.columns.since(start, stop)
                last = stop >= n
                self._seq += 1
                frames = wire.encode(self._key, rank.rank, cell, cols, final=final and last,
                                     events=events if last else (), extras=extras, where=where if last else None,
                                     calls=probe.cell_calls() if final and last else None, gen=self.generation,
                                     seq=self._seq, spans=spans if last else None, memory=held if last else None)
                try:
                    self._sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
                except zmq.ZMQError:  # the notebook is not reading (gone, or slow): the live view skips
                    pass
                start = stop
                if last:
                    break

    def measure(self) -> None:
        """Between steps (after an optimizer step, at ddplab.log): send a batch when one is due, and take
        the memory figures every MEMORY_EVERY seconds of a cell, on the cell's own thread only: torch's
        objects are not thread-safe, and read from the telemetry thread while backward assigned gradients
        (or DDP's reducer wrote its logging data) they crashed an engine (SIGSEGV)."""
        now = time.monotonic()
        if now - self.memory_at >= MEMORY_EVERY and self.rank.in_cell and threading.get_ident() == self.main_thread:
            held = memory(_user_ns())
            with self.rank.lock:
                self.held, self.memory_at = held, now
        if now - self.flushed_at >= self.flush_every:
            # A cell that steps sends its batches and reads the notebook's commands itself: the telemetry
            # thread, woken to, had to take the GIL from the training thread (4 ranks on 2 cores: 7% slower).
            self._beat()

    def _beat(self) -> None:
        """Read the notebook's commands and send a batch. A failure is logged (the first, then once a
        minute while it lasts) and the rank goes on: it never fails the cell that stepped into it."""
        try:
            self._commands()
            self.flush(beat=True)
            self._failing = 0
        except Exception:  # noqa: BLE001 - the live view may skip a beat; the rank goes on (and says so)
            self._failing += 1
            if self._failing == 1 or self._failing % 240 == 0:
                log_ddplab.warning("telemetry failed %d time(s) in a row: the notebook's live view of this rank "
                                   "stops until it works again", self._failing, exc_info=True)

    def _tick(self) -> None:
        """The telemetry thread: a batch and the notebook's commands every flush interval while the cell
        does not step (stepping, it does both itself: measure()); at once while pdb waits for a command;
        each SWEEP_EVERY seconds, another account's connections to gloo's listeners shut (guard.py)."""
        from .guard import GUARD

        swept, sweeps_failed = time.monotonic(), 0
        while True:
            time.sleep(PAUSED_TICK if self.rank.breakpoints.paused else self.flush_every)
            if self.rank.breakpoints.paused or time.monotonic() - self.flushed_at >= self.flush_every:
                self._beat()
            if time.monotonic() - swept >= SWEEP_EVERY:
                swept = time.monotonic()
                try:
                    GUARD.sweep()
                    self.rank.free_from_closed_peer()
                    sweeps_failed = 0
                except Exception:  # noqa: BLE001 - one sweep missed; the next comes in a second
                    sweeps_failed += 1
                    (log_ddplab.warning if sweeps_failed == 1 else log_ddplab.debug)(
                        "a sweep of this rank's connections failed (%d in a row)", sweeps_failed, exc_info=True)

    def _commands(self) -> None:
        """cut: break this rank's links to its peers, so a collective that cannot finish fails;
        knob: a value rank code reads with ddplab.knob."""
        import zmq

        rank = self.rank
        with rank.lock:
            if self._sock is None or not self._sock.poll(0):  # (nothing waiting: no exception raised to say so)
                return
            received = []
            while True:
                try:
                    received.append(self._sock.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
        acked = None
        for frames in received:
            command = wire.decode_command(self._key, frames, rank.rank, self.generation, self._command_seq)
            if command is None:
                continue  # not from the notebook, not for this rank and forming, or sent before: dropped
            self._command_seq = acked = command["seq"]
            if command.get("cmd") == "cut":
                with rank.lock:  # for this forming only: a late cut must not break the next (join())
                    if self.cuttable == command["gen"]:
                        rank.cut(command.get("ports", ()))
            elif command.get("cmd") == "knob" and isinstance(command.get("name"), str):
                rank.knobs[command["name"]] = command.get("value")
            elif command.get("cmd") == "timeline":
                rank.recorder.enabled = bool(command.get("on"))
                every = command.get("every")
                if isinstance(every, int) and every >= 1:
                    rank.recorder.every = every
            elif command.get("cmd") == "debug" and isinstance(command.get("line"), str):
                rank.breakpoints.command(command["line"], command["seq"])  # (its number: the reply's id)
            elif command.get("cmd") == "stack":  # py-spy on this process, on a thread of its own (a second)
                threading.Thread(target=self._send_stack, args=(command["seq"], bool(command.get("native"))),
                                 name="ddplab-stack", daemon=True).start()
        if acked is not None:  # the notebook waits for it (Telemetry.confirm): said at once, not at the next tick
            with rank.lock:
                rank.events.append((rank.cell, time.perf_counter() - rank.cell_t0, "ack", str(acked)))
            self.flush(force=True)

    def _send_stack(self, command_id: int, native: bool) -> None:
        from .breakpoints import own_stack

        text = own_stack(native)
        rank = self.rank
        with rank.lock:
            rank.events.append((rank.cell, time.perf_counter() - rank.cell_t0, "stack",
                                json.dumps({"id": command_id, "out": text[:200_000]})))
        self.flush(force=True)

    def connect(self, address: str, key: bytes, generation: int, curve: dict[str, Any] | None = None) -> None:
        """Connect the telemetry socket and hook cell start/end (once per engine). key: the pool's
        telemetry key (every batch is signed with it); curve: for a notebook on TCP, its public key and
        the pool's member key pair (members.py: only members can connect; the traffic is encrypted).
        A first, empty batch tells the notebook where this rank is."""
        import zmq

        from ..shared.members import member_socket

        with self.rank.lock:  # a new forming: its batches and commands are counted afresh, on a new connection
            self._key, self.generation, self._seq, self._command_seq = key, generation, 0, 0
            self.cuttable = generation  # the forming whose cuts apply (none while a group forms: join())
            if self._sock is not None:
                self._sock.close(linger=0)
            if address.startswith("tcp://"):  # batches out; the notebook's commands in
                assert curve is not None  # (a notebook on TCP sends its keys: Group.form)
                self._sock = member_socket(zmq.DEALER, curve["telemetry"], curve["member"])
            else:
                self._sock = zmq.Context.instance().socket(zmq.DEALER)
            self._sock.setsockopt(zmq.SNDHWM, 1000)
            self._sock.setsockopt(zmq.LINGER, 1000)
            self._sock.connect(address)
        self.flush(force=True)
        if self._agent is None:
            from IPython import get_ipython

            shell = get_ipython()
            if shell is not None:  # (pre/post_execute fire for silent cells too, unlike *_run_cell)
                shell.events.register("pre_execute", self.rank.begin_cell)
                shell.events.register("post_execute", self.rank.end_cell)
            self._agent = threading.Thread(target=self._tick, name="ddplab-telemetry", daemon=True)
            self._agent.start()

    def close(self) -> None:
        with self.rank.lock:
            if self._sock is not None:
                self._sock.close(linger=0)
                self._sock = None


class Rank:
    """This engine's rank: what it logged, its telemetry, the group it is in, and the drills and
    probes the notebook set on it."""

    def __init__(self) -> None:
        self.rank, self.world_size = 0, 1
        self.ifname: str | None = None  # this rank's interface toward its peers (None: a local pool)
        self.timeout = 300.0  # the pool's collective timeout (given when the group forms; jax_distributed's)
        self.columns = Columns()
        # (cell, time, kind, value): phase changes, hints, a cell's beginning
        self.events: list[tuple[int, float, str, Any]] = []
        self.cell, self.cell_t0, self.step, self.in_cell = 0, time.perf_counter(), -1, False
        self.lang = "en"  # the pool's language (%ddp_start --lang, a zh notebook): rank code's say() follows it
        self.knobs: dict[str, Any] = {}  # name -> value: set from the notebook while cells run (Lab.knobs, a slider)
        self.formed = False  # the process group of this process is ddplab's
        self.preloaded: frozenset[str] = frozenset()  # the modules the zygote had loaded when it forked this engine
        self.probe = Probe()
        self.recorder = self.probe.recorder = Recorder(self)  # the timeline: spans on one clock
        self.fault: dict[str, Any] | None = None  # a fault drill set by %ddp_fault: {"kind", "at_step", "factor"}
        self._last_log: float | None = None
        self.group_ports: set[int] = set()  # every rank's gloo listeners (know_ports): a link of them closing: a lost member
        # the group's connections seen since it formed ((local, remote) pairs), or None
        self._links: set[tuple[Address, Address]] | None = None
        self._inodes_read: set[int] = set()  # this process's sockets when the links were last read from the table
        self._progress: tuple[int, ...] = ()  # what the cell had done at the last look at the links (progress())
        self.lock = threading.Lock()  # the columns and events, between the cell's thread and the sender's
        self.sender = Sender(self)
        self.breakpoints = Breakpoints(self)  # breakpoint() in a cell: pdb driven from the notebook

    # ------------------------------------------------------------------ rank code's ddplab.*
    def knob(self, name: str, default: Any = None) -> Any:
        """A value the notebook can change while this cell runs (a slider, %ddp_knob NAME VALUE):
        read it where the training loop can follow it, e.g. each step: ddplab.knob("period", 16)."""
        return self.knobs.get(name, default)

    def log(self, loss: SupportsFloat | torch.Tensor | None = None, samples: float | None = None, step: int | None = None,
            **scalars: SupportsFloat | torch.Tensor) -> None:
        """Record one point (a training step): loss, samples processed, step (default: the next one).

        Extra numbers (lr=..., acc=...) are kept in the history too. Costs about a microsecond:
        nothing is sent from here.
        """
        self.step = self.step + 1 if step is None else int(step)
        if loss is not None:
            loss = loss.item() if hasattr(loss, "item") else float(loss)  # a tensor: its value, not its graph
        c = self.columns
        if scalars:  # checked first, then appended before the point (the flusher may read in between)
            for name, value in [(name, _number(name, value)) for name, value in scalars.items()]:
                c.extra(name, value)
        c.cell.append(self.cell)
        c.step.append(self.step)
        c.time.append(time.perf_counter() - self.cell_t0)
        c.loss.append(NAN if loss is None else loss)
        c.samples.append(NAN if samples is None else samples)  # last: now the point counts
        if self.fault is not None:
            self._drill(self.step)
        self.sender.measure()

    def mesh(self, *shape: int, names: Sequence[str] | None = None) -> DeviceMesh:
        """A DeviceMesh over the pool's ranks, on the CPU (gloo): the ranks laid out row by row.

            mesh = ddplab.mesh()                          # 1D: every rank
            mesh = ddplab.mesh(2, 2, names=("dp", "tp"))  # 2D: mesh["dp"], mesh["tp"]

        Each of its groups is a gloo group, checked as every group is (guard.py)."""
        from torch.distributed.device_mesh import init_device_mesh

        shape = tuple(shape) or (self.world_size,)
        if not all(isinstance(n, int) and n > 0 for n in shape) or math.prod(shape) != self.world_size:
            raise ValueError(f"ddplab.mesh{shape}: the sizes must multiply to the pool's {self.world_size} ranks, "
                             f"e.g. ddplab.mesh({self.world_size}) or ddplab.mesh(2, {self.world_size // 2})")
        if names is not None and (len(names) != len(shape) or len(set(names)) != len(names)):
            raise ValueError(f"ddplab.mesh{shape}: give one distinct name per dimension, e.g. names=('dp', 'tp')")
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=tuple(names) if names else None)
        for i, name in enumerate(names or ()):  # the timeline names each collective's group by its dimension
            self.recorder.dim_names[mesh.get_group(i).group_name] = name
        return mesh

    def tf_config(self) -> dict[str, Any]:
        """This rank's TF_CONFIG as worker `rank` of the pool's TensorFlow cluster (worker 0 the chief),
        set in os.environ: call it on every rank, then make the strategy before any other TensorFlow op.

            ddplab.tf_config()
            strategy = tf.distribute.MultiWorkerMirroredStrategy()

        Refused in one line where TensorFlow's server would be reachable by other accounts (frameworks.py)."""
        from .frameworks import tf_config

        return tf_config(self.rank, self.ifname, self.lang)

    def jax_distributed(self, cpu_devices: int | None = None) -> list[Any]:
        """Start jax.distributed across the pool's ranks (gloo collectives on the CPU; the coordinator on
        rank 0): call it on every rank before JAX computes anything. cpu_devices: CPU devices per rank.
        Returns jax.devices(), every rank's."""
        from .frameworks import jax_distributed

        return jax_distributed(self.rank, self.world_size, self.ifname, self.timeout, cpu_devices, self.lang)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark a phase of the cell, such as "eval" or "checkpoint"; the dashboard shows it."""
        self.events.append((self.cell, time.perf_counter() - self.cell_t0, "phase", str(name)))
        try:
            yield
        finally:
            self.events.append((self.cell, time.perf_counter() - self.cell_t0, "phase", None))

    def history(self) -> dict[str, Any]:
        """Every point this rank logged, as numpy arrays: the exact record (the live view may skip)."""
        import numpy as np

        c = self.columns
        with self.lock:
            n = len(c)
            cols = {name: np.frombuffer(getattr(c, name), dtype=dtype)[:n].copy()
                    for name, dtype in (("cell", "i4"), ("step", "i8"), ("time", "f8"), ("loss", "f8"),
                                        ("samples", "f8"))}
            cols["extras"] = {}
            for name, (index, values) in c.extras.items():
                k = bisect_left(index, n)  # an extra of a point still being logged waits for its point
                cols["extras"][name] = (np.frombuffer(index, dtype="i4")[:k].copy(),
                                        np.frombuffer(values, dtype="f8")[:k].copy())
        return cols

    def forget(self) -> None:
        """Drop every point logged so far (a benchmark measuring log() from a clean start)."""
        with self.lock:
            self.columns, self.sender.sent = Columns(), 0

    # ------------------------------------------------------------------ fault drills
    def set_fault(self, fault: dict[str, Any] | None) -> None:
        """%ddp_fault: {"kind": "kill" | "raise" | "slow", "at_step": n, "factor": f}, or None."""
        self.fault, self._last_log = fault, None

    def _drill(self, step: int) -> None:
        """Play the fault drill: called from log(), i.e. once per training step."""
        fault = self.fault
        assert fault is not None  # (log() calls it while a drill is set)
        kind, at = fault["kind"], fault.get("at_step")
        if kind == "slow":  # a straggler: stretch each step to `factor` times its length
            now = time.perf_counter()
            if self._last_log is not None:
                time.sleep((fault["factor"] - 1) * (now - self._last_log))
            self._last_log = time.perf_counter()
        elif at is None or step >= at:
            self.fault = None
            if kind == "kill":
                # send the points logged since the last flush first (a drill should report the step
                # it was set for), and give zmq's I/O thread a moment to put them on the wire
                self.sender.flush()
                time.sleep(0.1)
                os.kill(os.getpid(), 9)  # SIGKILL: the process dies at once, as in a real crash
            raise FaultDrill(f"fault drill: rank {self.rank} raised at step {step} (%ddp_fault raise)")

    # ------------------------------------------------------------------ cells (IPython's hooks)
    def begin_cell(self, *_: object) -> None:
        self.sender.flush()
        self.probe.new_cell()
        self.recorder.new_cell()
        self.recorder.follow()  # %ddp_timeline --off / --on: hooks out or in, on the cell's thread
        self.cell, self.cell_t0, self.step, self.in_cell = self.cell + 1, time.perf_counter(), -1, True
        self.events.append((self.cell, 0.0, "begin", None))  # the notebook knows the cell reached this rank

    def end_cell(self, *_: object) -> None:
        self.in_cell = False
        self.breakpoints.end_cell()
        self.recorder.settle()  # the spans of bucket all-reduces done since the last backward
        self.sender.flush(final=True)  # so the notebook sees every point of the cell as soon as it ends
        if TRIM is not None:  # what the cell freed goes back to the system, not kept in malloc's heaps
            TRIM(0)  # (~0.01 ms after a trivial cell, ~10 ms after heavy churn)

    # ------------------------------------------------------------------ the group
    def join(self, rank: int, world_size: int, rendezvous: str, timeout: float, threads: int, telemetry: str | None = None,
             flush: float = 0.25, key: bytes = b"", ifname: str | None = None, knobs: dict[str, Any] | None = None,
             lang: str = "en", generation: int = 0, curve: dict[str, Any] | None = None, compile_cache: str | None = None,
             timeline: int = wire.TIMED_EVERY, gate: bool = True) -> dict[str, Any]:
        """Join the gloo process group and preload the names every cell can use.

        rendezvous is "file:///path" (a FileStore: opens no network port) or "signed://host:port" (the
        signed store rank 0 serves, store.py: across hosts, or a local pool's rendezvous="tcp://...").
        ifname: the interface gloo uses (this rank's own, toward its peers). telemetry is the
        notebook's zmq address for log() points, sent every `flush` seconds and signed with `key`
        (it reaches the rank in this call: ipyparallel's signed channel). curve: what connects to
        ddplab's TCP sockets (members.py): {"member": the pool's key pair, "telemetry" and "store":
        the servers' public keys}. compile_cache: the folder torch.compile may use, checked here again
        (privacy.py); None: this host's default. gate: put up the accept gate (gate.py; DDPLab.accept_gate)
        where the rank shares the machine's network.
        """
        from ..shared.privacy import private_network

        gate = gate and not private_network()  # (in the pool's own network namespace nobody else can connect)
        if gate:
            from .gate import GATE

            GATE.start(local=not ifname)  # the accept gate's keeper starts while the rank goes on (guard.install)
        self.sender.flush_every, self.lang = flush, lang
        with self.lock:  # from now until connect(), no cut applies: one decoded for the forming being
            self.sender.cuttable = None  # replaced must not reach the connections of the group made here
        if not telemetry:
            self.sender.generation = generation  # (with telemetry: set with its new connection, connect())
        self.knobs.update(knobs or {})
        compile_cache, refused = _private_compile_cache(compile_cache)
        import torch
        import torch.distributed as dist

        upstream.get("torch._dynamo")  # DistributedDataParallel() imports it: imported now, not in a cell

        torch.set_num_threads(threads)
        fix_mmap_threshold(memory_limit())
        offer_to_oom_killer(OOM_RANK)  # out of memory, a rank goes first: the notebook's kernel holds the learner's work
        if ifname:
            os.environ["GLOO_SOCKET_IFNAME"] = ifname  # gloo reads it when the group is made
        stale = self._bound_to_old_group() if "torch.nn.parallel" in sys.modules else []  # DDP ever used here
        if dist.is_initialized():
            _destroy()
        kind, _, where = rendezvous.partition("://")
        wait = datetime.timedelta(seconds=timeout)
        store: dist.Store
        if kind == "file":
            store = dist.FileStore(where, world_size)
        elif kind == "signed":
            from .store import SignedStore

            assert curve is not None  # (a signed store comes with the keys: Group.form)
            store = SignedStore(f"tcp://{where}", store_key(key, generation), curve["store"], curve["member"], wait)
        else:
            raise ValueError(f"unknown rendezvous {rendezvous!r}: use file:///path or signed://host:port")
        from .gate import GATE
        from .guard import GUARD, install

        install(self.refused, gate, local=not ifname)  # every gloo group of this process: its connections checked before use
        seen, listening = {a: list(c) for a, c in GUARD.refused.items()}, _listening_ports()
        init = getattr(dist.init_process_group, "__wrapped__", dist.init_process_group)
        # the notebook times collectives and sends out (monitor.py), never while a rank is stopped at a
        # breakpoint: gloo's own timeout (collectives, send and recv alike) is made long
        init("gloo", store=store, rank=rank, world_size=world_size,
             timeout=datetime.timedelta(seconds=max(timeout, GLOO_PATIENCE)))
        self.rank, self.world_size, self.formed = rank, world_size, True
        self.ifname, self.timeout = ifname, timeout
        self.probe.patch(lambda: self.formed)
        self.breakpoints.install()
        self.recorder.enabled, self.recorder.every = bool(timeline), max(1, int(timeline))  # (0: off; else the every)
        self.recorder.follow()
        if telemetry:
            self.sender.connect(telemetry, key, generation, curve)

        _user_ns().update(rank=rank, world_size=world_size, torch=torch, dist=dist, nn=torch.nn,
                          ddplab=sys.modules[__name__])
        return {
            "rank": rank,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "threads": torch.get_num_threads(),
            "backend": dist.get_backend(),
            "stale": stale,
            "ports": sorted(_listening_ports() - listening),  # gloo's listeners, for close_group
            "compile_cache": compile_cache,
            "compile_refused": refused,
            "refused": {a: [n - seen.get(a, [0, 0])[0], t - seen.get(a, [0, 0])[1]]  # other accounts' connections
                        for a, (n, t) in GUARD.refused.items() if [n, t] != seen.get(a)},  # refused while it formed
            "gate": GATE.up or GATE.why_not,  # the accept gate (gate.py): up, why not, or None (turned off)
            "moved": upstream.turned_off(),  # other packages' names this rank found moved (upstream.py): said by the notebook
        }

    def refused(self, account: str, n: int, taken: int) -> None:
        """ddplab.rank.guard refused n gloo connections of another account (`taken` of them had taken a pair):
        the notebook names it (those of a group the rank's cell builds, or a sweep's; join() returns
        those of its own forming)."""
        with self.lock:  # (between cells too: sent with the next batch, named at the next cell)
            self.events.append((self.cell, time.perf_counter() - self.cell_t0, "refused", f"{account}|{n}|{taken}"))

    def leave(self) -> None:
        """Leave the group and stop sending telemetry, the engine staying up (a pool attached to
        engines someone else started leaves them as it found them, but for their variables)."""
        import torch.distributed as dist

        if dist.is_initialized():
            _destroy()
        if "ddplab.rank.store" in sys.modules:
            sys.modules["ddplab.rank.store"].stop()
        self.sender.close()

    def cut(self, ports: Iterable[int] = ()) -> None:
        """Cut this rank's links to its peers: every TCP connection to a gloo port of the group (`ports`:
        every rank's gloo listeners; and this rank's own listeners) is shut down, so a collective that
        waits on them fails ("Connection closed by peer") here and on the other side. Safe from another
        thread than the one blocked in the collective: the descriptors stay gloo's, and each is shut
        down only if it still is the socket listed (guard.shut_down)."""
        from ..shared.privacy import connections
        from .guard import shut_down

        ports = set(ports) | _listening_ports()
        for inode, fd, local, remote, _ in connections():
            if local[1] in ports or remote[1] in ports:
                shut_down(fd, inode)

    def know_ports(self, ports: Iterable[int]) -> None:
        """Every rank's gloo listeners (the notebook tells each rank once the group formed)."""
        self.group_ports, self._links = set(ports), None

    def free_from_closed_peer(self) -> None:
        """In a cell, a gloo connection of this rank's group closed (a peer's process died, or its group
        was closed under it): the group lost a member, so a collective waiting on it may never finish.
        gloo fails the collective by itself only sometimes (across hosts, after the group was formed
        again: not until its timeout), so this rank cuts its links, and its collective fails at once.
        On the telemetry thread, once a second in cells; every link seen since the group formed counts.
        The socket table is read (~2-5 ms: the kernel walks its whole hash table) only when this process
        has sockets it had not at the last read; else each known link is looked up alone (~0.2 ms idle,
        some ms beside training). Not while the cell goes on (it logged, stepped or entered a collective
        since the last look: progress()): no collective of it is stuck, so a lost peer is found a second
        later, once one is."""
        from ..shared.privacy import ESTABLISHED, connections, socket_inodes, tcp_socket

        if not (self.in_cell and self.group_ports and self.formed):
            return  # (the links seen so far stay the baseline: a rank may die between two cells)
        ports, known = self.group_ports, self._links
        progress, self._progress = self._progress, self.progress()
        if known is not None and progress != self._progress:
            return
        inodes = set(socket_inodes())
        if known is None or not inodes <= self._inodes_read:
            me = os.getuid()  # (another account's connection, which the gate or the guard closes, is no peer's)
            links = {(local, remote) for _, _, local, remote, owner in connections()
                     if (local[1] in ports or remote[1] in ports) and owner in (None, me)}
            self._links, self._inodes_read = links if known is None else known | links, inodes
        else:
            links = {link for link in known if (tcp_socket(*link) or (0,))[0] == ESTABLISHED}
        if known and known - links:
            log_ddplab.info("a gloo connection of this rank's group closed in a cell: cutting its links")
            self.group_ports, self._links = set(), None  # (once per forming)
            self.cut(ports)

    def progress(self) -> tuple[int, ...]:
        """What this cell has done so far: points logged, spans and optimizer steps recorded, collectives
        called (counted on their way in: one that hangs counts once)."""
        recorder = self.recorder
        return self.cell, len(self.columns), len(recorder.spans), recorder.opt_steps, self.probe.calls["count"]

    def close_group(self, ports: Iterable[int] = ()) -> None:
        """Cut this (idle) rank's links and destroy its group, so peers waiting on it in a collective
        fail at once. Destroying the group alone is not enough: a rank whose collective already failed
        keeps its gloo sockets open (the failed work still holds the group)."""
        import torch.distributed as dist

        self.cut(ports)
        if dist.is_initialized():
            _destroy()

    def _bound_to_old_group(self) -> list[tuple[str, str]]:
        """Names in the rank's namespace of objects tied to a process group (they need re-creating)."""
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        names: list[tuple[str, str]] = []
        for name, value in list(_user_ns().items()):
            if isinstance(value, DistributedDataParallel):
                names.append((name, "DistributedDataParallel"))
            elif isinstance(value, dist.ProcessGroup):
                names.append((name, "ProcessGroup"))
        return names

    def reach(self, controller: str, ifname: str | None = None) -> dict[str, Any]:
        """Where this engine is: host, pid, cores, and its IPv4 address and interface toward
        `controller` (the route its packets take: no name lookup, whatever the hostname resolves to,
        127.0.1.1 included), or on interface `ifname` if given."""
        import psutil

        from ..shared.system import usable_cores as cores

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

    def clock(self) -> float:
        """This host's monotonic clock (the notebook aligns hosts' clocks with it)."""
        return time.monotonic()

    def serve_store(self, address: str, key: bytes, generation: int, member: bytes, port: int = 0) -> tuple[int, bytes]:
        """Rank 0: serve the signed rendezvous store of this forming on `address` (`port`, or a free
        one), for the pool's members (`member`: its public member key); (its port, its public key)."""
        from . import store

        return store.serve(address, store_key(key, generation), member, port)

    # ------------------------------------------------------------------ looking inside
    def debug_start(self) -> str:
        return self.probe.debug_start()

    def debug_command(self, line: str) -> str:
        return self.probe.debug_command(line)

    def debug_end(self) -> None:
        self.probe.debug_end()

    def checksums(self, names: Sequence[str] | None = None) -> dict[str, list[tuple[str, float]] | None]:
        return self.probe.checksums(_user_ns(), names)


def _user_ns() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def _listening_ports() -> set[int]:
    from ..shared.privacy import listening

    return {port for _, port in listening().values()}


def _destroy() -> None:
    """ddplab's own destroy_process_group (the learner's is wrapped to leave a hint, probe.py)."""
    import torch.distributed as dist

    getattr(dist.destroy_process_group, "__wrapped__", dist.destroy_process_group)()


def _private_compile_cache(wanted: str | None) -> tuple[str, str | None]:
    """Point torch.compile (and Triton) at a folder only this user can write: `wanted` if it is one,
    else a new private folder. Returns (folder, why `wanted` was refused or None)."""
    import tempfile

    from ..shared.privacy import compile_cache, default_compile_cache

    # the notebook's choice was checked outside the pool's user namespace (which hides who owns what)
    folder, refused = compile_cache(wanted or default_compile_cache(),
                                    lambda: tempfile.mkdtemp(prefix="ddplab-torchinductor-"),  # (0700, a random name)
                                    checked_outside=wanted is not None)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder  # torch reads it at each use
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    return folder, refused


RANK = Rank()  # this process's rank (one per engine)
log, phase, knob, history, mesh = RANK.log, RANK.phase, RANK.knob, RANK.history, RANK.mesh  # rank code's ddplab.log(...), ...
tf_config, jax_distributed = RANK.tf_config, RANK.jax_distributed
breakpoint = RANK.breakpoints.hook  # ddplab.breakpoint(ranks=[0, 2]): stop those ranks only


def call(method: str, *args: Any, **kwargs: Any) -> Any:
    """What the notebook sends through ipyparallel: RANK.method(*args, **kwargs) in the engine."""
    return getattr(RANK, method)(*args, **kwargs)


def __getattr__(name: str) -> ModuleType:
    if name == "checkpoint":  # ddplab.checkpoint.save(...) in rank code
        import importlib

        return importlib.import_module(__name__ + ".checkpoint")  # (not `from . import`: that asks this hook again)
    raise AttributeError(f"module 'ddplab' (in a rank) has no attribute {name!r}")
