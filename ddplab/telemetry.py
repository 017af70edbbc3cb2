"""The notebook's end of the telemetry flow: what ranks log arrives here and is folded into `Live`,
the picture of the pool that views draw.

Ranks (rank.py) buffer points from ddplab.log() and push a batch a few times a second to a zmq
PULL socket that the notebook binds; nothing is sent per step.
"""
import pickle
from dataclasses import dataclass, field

import zmq

from .metrics import LiveMetrics
from .state import RunState


@dataclass
class Live:
    """What the notebook knows of the pool right now: rank states and facts (RunState), the live
    series (LiveMetrics), and which notebook cell each rank's own cell count stands for."""

    run_state: RunState
    metrics: LiveMetrics
    cell_of: dict = field(default_factory=dict)  # (rank, the rank's own cell count) -> notebook cell

    @classmethod
    def new(cls, world_size):
        return cls(RunState(world_size), LiveMetrics(world_size))


class Telemetry:
    """A PULL socket on loopback (or a chosen address) that ranks push batches to."""

    def __init__(self, host="127.0.0.1"):
        self.socket = zmq.Context.instance().socket(zmq.PULL)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"

    def batches(self):
        """Every batch waiting now: (rank, cell, points, events, final)."""
        while True:
            try:
                raw = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            yield pickle.loads(raw)

    def wait(self, ms):
        """Block until a batch is waiting (or ms pass)."""
        self.socket.poll(ms)

    def close(self):
        self.socket.close(linger=0)


def merge(live, batch, now):
    """Fold one batch from a rank into `live`; True if it was the rank's last of the cell."""
    rank, cell, points, events, final = batch
    rs = live.run_state
    if rank >= rs.world_size or rank not in rs.running:
        return False  # a late batch of an earlier cell, or from a rank this cell did not run on
    live.cell_of[rank, cell] = rs.cell  # ranks count their own cells; the history uses the notebook's
    if points:
        step, loss, rate = live.metrics.add_points(rank, points)
        rs.points_arrived(rank, step, loss, rate, now, len(points))
    for _c, _t, kind, value in events:
        if kind == "phase":
            rs.set_phase(rank, value)
    return final
