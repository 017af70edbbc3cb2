"""The wait loop of a cell: poll results and telemetry, merge them, render the view (throttled).

Telemetry arrives on a zmq PULL socket that the Lab binds on loopback; ranks push a batch a
few times a second (see rank.py). Nothing here imports widgets: the view is whatever object
the Lab was given (a Dashboard, a TextView, ...), called as view.update(lab).
"""
import pickle
import time

import zmq

from . import state as st

POLL = 0.05  # seconds between looks at results and telemetry
FRAME = 0.25  # seconds between redraws of the view: 4 per second while a cell runs


class Telemetry:
    """The notebook's end of the telemetry: a PULL socket on loopback (or a chosen address)."""

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

    def close(self):
        self.socket.close(linger=0)


def merge(lab, batch, now):
    """Fold one batch from a rank into the lab's RunState and LiveMetrics; True if it was final."""
    rank, _cell, points, events, final = batch
    rs = lab.run_state
    if rank >= rs.world_size or rank not in rs.running:
        return False  # a late batch of an earlier cell, or from a rank this cell did not run on
    if points:
        step, loss, rate = lab.metrics.add_points(rank, points)
        lab.run_state.points_arrived(rank, step, loss, rate, now, len(points))
    for _c, _t, kind, value in events:
        if kind == "phase":
            rs.set_phase(rank, value)
    return final


class Monitor:
    """Watches one cell on `ranks` until its AsyncResult is done, a deadline passes, or Ctrl-C."""

    def __init__(self, lab, ar, ranks, frame=FRAME):
        self.lab, self.ar, self.ranks, self.frame = lab, ar, ranks, frame
        self.last_frame = 0.0
        self.drawn_version = -1
        self.finals = set()

    def poll(self):
        """Merge what has arrived; redraw if a frame is due and something changed."""
        now = time.monotonic()
        lab = self.lab
        if lab.telemetry is not None:
            for batch in lab.telemetry.batches():
                if merge(lab, batch, now):
                    self.finals.add(batch[0])
        for r, text in zip(self.ranks, self.ar.stdout):
            lab.run_state.set_output(r, text or "")
        if now - self.last_frame >= self.frame:
            lab.metrics.sample_total(lab.run_state.elapsed(now))
            self.draw(now)

    def draw(self, now=None):
        view = self.lab.view
        if view is not None and self.lab.run_state.version != self.drawn_version:
            view.update(self.lab)
            self.drawn_version = self.lab.run_state.version
        self.last_frame = now if now is not None else time.monotonic()

    def wait(self, deadline=None):
        """Until the cell is done; False if the deadline passed first."""
        while True:
            wait = POLL if deadline is None else max(0.0, min(POLL, deadline - time.perf_counter()))
            if self.ar.wait(wait):
                return True
            self.poll()
            if deadline is not None and time.perf_counter() >= deadline:
                return False

    def finish(self, grace=0.5):
        """After the cell: collect every rank's last batch (bounded), then the last frame."""
        telemetry = self.lab.telemetry
        expected = {r for r in self.ranks if self.lab.run_state.state_of(r) != st.LOST}
        deadline = time.monotonic() + grace
        self.poll()
        while telemetry is not None and not expected <= self.finals and time.monotonic() < deadline:
            telemetry.socket.poll(10)  # wakes as soon as a batch arrives
            self.poll()
