"""The notebook's end of the telemetry flow: what ranks log arrives here and is folded into `Live`,
the picture of the pool that views draw.

Ranks (rank.py) buffer points from ddplab.log() and send a batch a few times a second to a zmq
ROUTER socket that the notebook binds; nothing is sent per step. A batch is data (wire.py), never
code: nothing received here is unpickled, and what is not signed with the pool's key is dropped.
"""
import json
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import zmq

from ..shared import wire
from ..shared.members import MembersOnly
from ..shared.metrics import LiveMetrics
from ..shared.state import RunState

if TYPE_CHECKING:
    from ..shared.timeline import CellSpans

log = logging.getLogger("ddplab")


@dataclass
class Live:
    """What the notebook knows of the pool right now: rank states and facts (RunState), the live
    series (LiveMetrics), and which notebook cell each rank's own cell count stands for."""

    run_state: RunState
    metrics: LiveMetrics
    cell_of: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, the rank's own cell count) -> cell
    hints: dict[str, set[int]] = field(default_factory=dict)  # what ranks did by mistake this cell: hint -> ranks
    begun: set[int] = field(default_factory=set)  # ranks that said they began this cell (its request reached them)
    spans: "CellSpans | None" = None  # timeline.CellSpans of the cell running (or the last one)
    timelines: "dict[int, CellSpans]" = field(default_factory=dict)  # notebook cell -> its CellSpans
    calls: dict[int, wire.Calls] = field(default_factory=dict)  # rank -> the collectives of its cell, once it finished
    refused: dict[str, list[int]] = field(default_factory=dict)  # account -> [gloo connections refused, of them
    #                                                                pairs taken]
    units: dict[int, dict[int, str]] = field(default_factory=dict)  # rank -> {its index of a module served: its name}
    groups: dict[int, dict[int, tuple[str, tuple[int, ...]]]] = field(default_factory=dict)  # rank -> {its index of
    #                                                                    a process group: (label, ranks)}
    stops: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # rank -> each debugger stop or resume, in
    #                                                                       order (stop(): kind, id, out, where)
    stacks: dict[tuple[int, int], str] = field(default_factory=dict)  # (rank, command id) -> the rank's stacks, as
    #                                                                   py-spy printed them

    @classmethod
    def new(cls, world_size: int) -> "Live":
        return cls(RunState(world_size), LiveMetrics(world_size))

    def refuse(self, account: str, n: int, taken: int) -> None:
        """n gloo connections of another account were refused (ddplab.rank.guard), `taken` of them had taken a pair."""
        counts = self.refused.setdefault(account, [0, 0])
        counts[0] += n
        counts[1] += taken


class Telemetry:
    """A ROUTER socket the ranks send batches to (and through which the notebook sends them signed
    commands: command()), and the drops it saw.

    where: "ipc://DIR" (a socket file in the pool's private folder: other users cannot reach it)
    or "tcp://HOST" (ranks on other hosts; a random port; CurveZMQ, admitting only clients with the
    pool's `member` key pair, which the ranks are given with `public`, the server's key: members.py).
    Every batch must carry the pool's signature
    and be newer than the last one accepted from its rank (wire.py); what is not is dropped before
    it is used, and counted by why and sender. A rank is reached by the connection its last good
    batch came on: nothing the connecting side claims (a socket name) routes a command.

    One thread at a time uses the socket (a lock): a background cell's monitor reads while the
    notebook sets a knob. Each read takes at most MAX_READ messages and READ_SECONDS, so a flood
    cannot hold the notebook."""

    MAX_READ = 500  # (not DDPLab settings: a bound on work per poll, far above what ranks send, not a behaviour)
    READ_SECONDS = 0.02
    MAX_PENDING = 20_000

    def __init__(self, where: str, key: bytes, member: tuple[bytes, bytes] | None = None) -> None:
        self.key = key
        self.member = member or zmq.curve_keypair()  # the pool's member key pair (members.py): given to the ranks
        self.public: bytes | None = None
        self._server: MembersOnly | None = None
        self.socket: zmq.Socket[bytes]
        if where.startswith("ipc://"):
            self.socket = zmq.Context.instance().socket(zmq.ROUTER)
            self.socket.setsockopt(zmq.LINGER, 0)
        else:  # CurveZMQ, the ranks' key checked: a peer without it is refused before a frame is read
            self._server = MembersOnly(zmq.ROUTER, self.member[0])
            self.socket, self.public = self._server.socket, self._server.public
        self.socket.setsockopt(zmq.MAXMSGSIZE, 32 << 20)  # a frame larger than any batch: cut by zmq
        if where.startswith("ipc://"):
            self.address = f"{where.rstrip('/')}/telemetry"
            self.socket.bind(self.address)
            os.chmod(self.address[len("ipc://"):], 0o600)  # in a 0700 folder already; the owner's only
        else:
            port = self.socket.bind_to_random_port(where)
            self.address = f"{where}:{port}"
        self._generation = 0  # the group's forming now (Group.form sets it): older batches are late
        self.dropped: dict[tuple[str, str], int] = {}  # (why, sender address) -> count
        self._routes: dict[int, bytes] = {}  # rank -> zmq routing id of the connection its last good batch came on
        self._fresh: dict[int, tuple[int, int]] = {}  # rank -> (gen, seq) of its last good batch
        self._pending: deque[wire.Batch] = deque()  # good batches read (by command(), say) and not handed out yet
        self._command_seq = 0
        self._acks: dict[int, int] = {}  # rank -> the number of the last command it carried out (in this forming)
        self._sent: dict[int, int] = {}  # rank -> the number of the last command sent to it (in this forming)
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        return self._generation

    @generation.setter
    def generation(self, value: int) -> None:
        """A new forming of the group: ranks are heard again (their new connections) from now."""
        with self._lock:
            self._generation = value
            self._routes.clear()
            self._acks.clear()  # (a rank that joins anew counts from nothing: nothing it said before counts)
            self._sent.clear()

    def heard(self, rank: int) -> bool:
        """Whether `rank` has sent a good batch since the group was formed (its telemetry works)."""
        with self._lock:
            self._read()
            return rank in self._routes

    def last_accepted(self, rank: int) -> tuple[int, int] | None:
        """(gen, seq) of the last good batch from `rank`: a batch not newer is dropped."""
        with self._lock:
            self._read()
            return self._fresh.get(rank)

    def _read(self) -> None:
        """Read what waits (bounded), keep the good batches in _pending, count the rest."""
        deadline = time.perf_counter() + self.READ_SECONDS
        for _ in range(self.MAX_READ):
            if not int(self.socket.get(zmq.EVENTS)) & zmq.POLLIN:  # (cheaper than the zmq.Again of an empty socket)
                return
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            except zmq.ZMQError:  # a message zmq itself refused (too large, ...): nothing to read
                continue
            route, frames = frames[0].bytes, frames[1:]
            batch, why = wire.decode(self.key, frames) if frames else (None, "malformed")
            if batch is not None:
                why = self._stale(batch)
            if batch is None or why is not None:
                why = why or "malformed"  # (decode() says why)
                sender = _peer(frames[0]) if frames else ""
                self.dropped[why, sender] = self.dropped.get((why, sender), 0) + 1
                if why != "late":
                    log.debug("telemetry: a %s message dropped (sender %s)", why, sender or "not known")
            else:
                self._fresh[batch.rank] = (batch.gen, batch.seq)
                for _, kind, value in batch.events:  # a command carried out (command(), confirm())
                    if kind == "ack" and value and value.isdigit():  # (never past what was sent to it)
                        acked = min(int(value), self._sent.get(batch.rank, 0))
                        self._acks[batch.rank] = max(self._acks.get(batch.rank, 0), acked)
                self._routes[batch.rank] = route
                if len(self._pending) < self.MAX_PENDING:  # else the live view skips (history stays exact)
                    self._pending.append(batch)
            if time.perf_counter() > deadline:
                return

    def _stale(self, batch: wire.Batch) -> str | None:
        """None for a batch to use; "late" for one from an earlier forming of the group; "replayed"
        for one not newer than the last good batch of its rank (sent again, or out of order)."""
        if batch.gen < self._generation:
            return "late"
        if batch.gen > self._generation or (batch.gen, batch.seq) <= self._fresh.get(batch.rank, (-1, -1)):
            return "replayed"
        return None

    def batches(self) -> list[wire.Batch]:
        """Every good batch read now (wire.Batch), in order; bad ones are counted in self.dropped."""
        with self._lock:
            self._read()
            out = list(self._pending)
            self._pending.clear()
        return out

    def news(self) -> dict[tuple[str, str], str]:
        """{(why, sender): sentence} for every sender whose messages were dropped, e.g.
        "12 unsigned telemetry messages dropped from 127.0.0.1" (zmq tells the sender's address).
        Late batches (sent before the group was formed again) are the pool's own: not news."""
        with self._lock:  # (the reading thread adds senders to it)
            dropped = sorted(self.dropped.items())
        return {(why, sender): f"{count} {why} telemetry message{'s' if count != 1 else ''} dropped"
                               + (f" from {sender}" if sender else " (sender not known)")
                for (why, sender), count in dropped if why != "late"}

    def command(self, rank: int, **command: Any) -> int | None:
        """Send a rank a signed command (rank.py's telemetry thread reads it within a tick), on the
        connection its last good batch came from. Its number (the rank acknowledges it: acked()), or
        None if the rank has not been heard yet."""
        with self._lock:
            self._read()  # learn the routes of ranks that just joined (their first batch)
            route = self._routes.get(rank)
            if route is None:
                log.debug("telemetry: no connection from rank %s yet: command %s not sent", rank, command.get("cmd"))
                return None
            self._command_seq += 1
            frames = wire.encode_command(self.key, rank, self._generation, self._command_seq, **command)
            try:
                self.socket.send_multipart([route, *frames], zmq.NOBLOCK)
            except zmq.ZMQError:  # the rank is not connected (gone): nothing to tell it
                return None
            self._sent[rank] = self._command_seq
            return self._command_seq

    def confirm(self, sent: dict[int, int | None], timeout: float) -> list[int]:
        """Wait (at most `timeout` seconds) until every rank of {rank: command number} has said it
        carried out that command; the ranks that have not."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:  # (a zmq socket is one thread's at a time)
                self._read()
                waiting = sorted(r for r, seq in sent.items() if seq is None or self._acks.get(r, 0) < seq)
                if not waiting or time.monotonic() > deadline:
                    return waiting
                self.socket.poll(10)  # the ranks' next batch (short: the socket is locked meanwhile)

    def wait(self, ms: int) -> None:
        """Block until a batch is waiting (or ms pass; keep ms short: the socket is locked meanwhile)."""
        with self._lock:
            if not self._pending:
                self.socket.poll(ms)

    @property
    def refused(self) -> int:
        """Connections refused because they did not hold the pool's member key (TCP only)."""
        return self._server.refused if self._server is not None else 0

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
            else:
                self.socket.close(linger=0)


def _peer(frame: zmq.Frame) -> str:
    try:
        return str(frame.get("Peer-Address") or "")
    except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
        return ""


def stack_of(value: str | None) -> tuple[int, str] | None:
    """(command id, text) of a "stack" event, or None if it is not one."""
    try:
        stack = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if isinstance(stack, dict) and isinstance(stack.get("id"), int) and isinstance(stack.get("out"), str):
        return stack["id"], stack["out"]
    return None


def _stop(kind: str, value: str | None) -> dict[str, Any] | None:
    """A debugger's event as a dict (kind, id, out, and where it stopped), or None if it is not one."""
    try:
        stop = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not (isinstance(stop, dict) and isinstance(stop.get("id"), int) and isinstance(stop.get("out"), str)):
        return None
    if kind == "paused" and not (isinstance(stop.get("line"), int) and isinstance(stop.get("code"), list)):
        return None
    return {**stop, "kind": kind}


def merge(live: Live, batch: wire.Batch, now: float) -> bool:
    """Fold one batch from a rank into `live`; True if it was the rank's last of the cell."""
    rs = live.run_state
    rank = batch.rank
    if rank >= rs.world_size or rank not in rs.running:
        return False  # a late batch of an earlier cell, or from a rank this cell did not run on
    if not (len(batch) or batch.events or batch.final or batch.where is not None or batch.calls is not None
            or batch.spans is not None or batch.memory is not None):
        return False  # a rank saying where it is connected (rank._connect): of no cell
    # ranks count their own cells; the history uses the notebook's. A rank's cell is the notebook cell
    # that began it (its "begin" event; a restarted rank counts from 1 again): a batch sent between
    # cells (a command's ack) still carries the cell before, and must not move it
    if any(kind == "begin" for _t, kind, _v in batch.events):
        live.cell_of[rank, batch.cell] = rs.cell
    else:
        live.cell_of.setdefault((rank, batch.cell), rs.cell)
    if len(batch):
        step, loss, rate = live.metrics.add_points(rank, batch.step, batch.time, batch.loss, batch.samples)
        rs.points_arrived(rank, step, loss, rate, now, len(batch))
    for _t, kind, value in batch.events:
        if kind == "phase":
            rs.set_phase(rank, value)
        elif kind == "hint" and value is not None:
            live.hints.setdefault(value, set()).add(rank)
        elif kind == "begin":
            live.begun.add(rank)
        elif kind == "unit" and value and "|" in value:  # an FSDP unit the rank's collectives serve (recorder.py)
            index, name = value.split("|", 1)
            if index.isdigit():
                live.units.setdefault(rank, {})[int(index)] = name
        elif kind == "group" and value and value.count("|") == 2:  # a group its collectives ran on (recorder.py)
            index, label, ranks = value.split("|")
            members = ranks.split(",") if ranks else []
            if index.isdigit() and all(m.isdigit() for m in members):
                live.groups.setdefault(rank, {})[int(index)] = (label, tuple(map(int, members)))
        elif kind == "stack":  # py-spy's dump of the rank, asked for by Lab.debug.stacks
            stack = stack_of(value)
            if stack is not None:
                live.stacks[rank, stack[0]] = stack[1]
        elif kind in ("paused", "resumed"):  # a breakpoint's debugger waits, or the program runs on (breakpoints.py)
            stop = _stop(kind, value)
            if stop is not None:
                live.stops.setdefault(rank, []).append(stop)
                rs.set_stopped(rank, stop if kind == "paused" else None)
        elif kind == "refused" and value and value.count("|") >= 2:
            account, n, taken = value.rsplit("|", 2)
            if n.isdigit() and taken.isdigit():
                live.refuse(account, int(n), int(taken))
    if batch.where is not None or batch.final:
        rs.set_where(rank, None if batch.final else cast("dict[str, Any] | None", batch.where))
    if batch.calls is not None:
        live.calls[rank] = batch.calls  # what a rank that finished the cell had called
    if live.spans is not None:
        if batch.spans is not None:
            live.spans.add(rank, batch.spans)
        if batch.memory is not None:
            live.spans.memory[rank] = batch.memory
    return batch.final
