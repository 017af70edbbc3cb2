"""The notebook's end of the telemetry flow: what ranks log arrives here and is folded into `Live`,
the picture of the pool that views draw.

Ranks (rank.py) buffer points from ddplab.log() and push a batch a few times a second to a zmq
PULL socket that the notebook binds; nothing is sent per step. A batch is data (wire.py), never
code: nothing received here is unpickled, and what is not signed with the pool's key is dropped.
"""
import os
from dataclasses import dataclass, field

import zmq

from . import wire

from .metrics import LiveMetrics
from .state import RunState


@dataclass
class Live:
    """What the notebook knows of the pool right now: rank states and facts (RunState), the live
    series (LiveMetrics), and which notebook cell each rank's own cell count stands for."""

    run_state: RunState
    metrics: LiveMetrics
    cell_of: dict = field(default_factory=dict)  # (rank, the rank's own cell count) -> notebook cell
    hints: dict = field(default_factory=dict)  # what ranks did by mistake this cell: hint -> ranks
    calls: dict = field(default_factory=dict)  # rank -> the collectives of its cell, once it finished

    @classmethod
    def new(cls, world_size):
        return cls(RunState(world_size), LiveMetrics(world_size))


class Telemetry:
    """A ROUTER socket the ranks send batches to (and through which the notebook sends them signed
    commands: command()), and the drops it saw.

    where: "ipc://DIR" (a socket file in the pool's private folder: other users cannot reach it)
    or "tcp://HOST" (ranks on other hosts; a random port). Every batch must carry the pool's
    signature (wire.py); what does not is dropped before it is parsed, and counted by sender."""

    def __init__(self, where, key):
        self.key = key
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted rank takes over its name
        self.socket.setsockopt(zmq.MAXMSGSIZE, 64 << 20)  # a frame larger than any batch: cut by zmq
        if where.startswith("ipc://"):
            self.address = f"{where.rstrip('/')}/telemetry"
            self.socket.bind(self.address)
            os.chmod(self.address[len("ipc://"):], 0o600)  # in a 0700 folder already; the owner's only
        else:
            port = self.socket.bind_to_random_port(where)
            self.address = f"{where}:{port}"
        self.dropped = {}  # (why, sender address) -> count

    def batches(self):
        """Every good batch waiting now (wire.Batch); bad ones are counted in self.dropped."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)[1:]  # after the sender's name
            except zmq.Again:
                return
            except zmq.ZMQError:  # a message zmq itself refused (too large, ...): nothing to read
                continue
            batch, why = wire.decode(self.key, frames) if frames else (None, "malformed")
            if batch is None:
                sender = _peer(frames[0]) if frames else ""
                self.dropped[why, sender] = self.dropped.get((why, sender), 0) + 1
                continue
            yield batch

    def news(self):
        """{(why, sender): sentence} for every sender whose messages were dropped, e.g.
        "12 unsigned telemetry messages dropped from 127.0.0.1" (zmq tells the sender's address)."""
        return {(why, sender): f"{count} {why} telemetry message{'s' if count != 1 else ''} dropped"
                               + (f" from {sender}" if sender else " (sender not known)")
                for (why, sender), count in sorted(self.dropped.items())}

    def command(self, rank, **command):
        """Send a rank a signed command (rank.py's telemetry thread reads it within a tick)."""
        import json

        body = json.dumps(command).encode()
        try:
            self.socket.send_multipart([f"rank{rank}".encode(), wire.sign(self.key, [body]), body], zmq.NOBLOCK)
        except zmq.ZMQError:  # the rank is not connected (gone): nothing to tell it
            pass

    def wait(self, ms):
        """Block until a batch is waiting (or ms pass)."""
        self.socket.poll(ms)

    def close(self):
        self.socket.close(linger=0)


def _peer(frame):
    try:
        return frame.get("Peer-Address") or ""
    except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
        return ""


def merge(live, batch, now):
    """Fold one batch from a rank into `live`; True if it was the rank's last of the cell."""
    rs = live.run_state
    rank = batch.rank
    if rank >= rs.world_size or rank not in rs.running:
        return False  # a late batch of an earlier cell, or from a rank this cell did not run on
    live.cell_of[rank, batch.cell] = rs.cell  # ranks count their own cells; the history uses the notebook's
    if len(batch):
        step, loss, rate = live.metrics.add_points(rank, batch.step, batch.time, batch.loss, batch.samples)
        rs.points_arrived(rank, step, loss, rate, now, len(batch))
    for _t, kind, value in batch.events:
        if kind == "phase":
            rs.set_phase(rank, value)
        elif kind == "hint":
            live.hints.setdefault(value, set()).add(rank)
    if batch.where is not None or batch.final:
        rs.set_where(rank, None if batch.final else batch.where)
    if batch.calls is not None:
        live.calls[rank] = batch.calls  # what a rank that finished the cell had called
    return batch.final
