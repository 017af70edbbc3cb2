"""The wait loop of a cell: poll results and telemetry, merge them, render the view (throttled),
and get every rank out of trouble fast.

Telemetry arrives on a zmq PULL socket that the Lab binds on loopback; ranks push a batch a
few times a second (see rank.py). Nothing here imports widgets: the view is whatever object
the Lab was given (a Dashboard, a TextView, ...), called as view.update(lab).

Failures (DESIGN.md, "Failure"): each rank's result is watched on its own. When a rank has
failed (or died) while others still run, those others are usually blocked in a collective
waiting for it; closing the process group on every rank that is no longer running makes
them fail at once (gloo: "Connection closed by peer"), instead of after gloo's timeout.
After Ctrl-C or a cell timeout every rank gets SIGINT; a rank still running ESCALATE seconds
later (stuck inside a C++ collective, where SIGINT cannot reach) is killed and restarted.
"""
import pickle
import time

import zmq

from . import state as st
from .errors import is_echo  # noqa: F401 - part of the failure flow

POLL = 0.05  # seconds between looks at results and telemetry
FRAME = 0.25  # seconds between redraws of the view: 4 per second while a cell runs
FAIL_FAST = 0.3  # seconds a failure may go unanswered before the group is closed under the others
ESCALATE = 1.5  # seconds after SIGINT before a rank that still runs is killed
LOOK_EVERY = 0.25  # seconds between looks for dead engines while all is well (psutil, per rank)


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
    rank, cell, points, events, final = batch
    rs = lab.run_state
    if rank >= rs.world_size or rank not in rs.running:
        return False  # a late batch of an earlier cell, or from a rank this cell did not run on
    lab.cell_of[rank, cell] = rs.cell  # ranks count their own cells; the history uses the notebook's
    if points:
        step, loss, rate = lab.metrics.add_points(rank, points)
        lab.run_state.points_arrived(rank, step, loss, rate, now, len(points))
    for _c, _t, kind, value in events:
        if kind == "phase":
            rs.set_phase(rank, value)
    return final


def per_rank(ar, key):
    """ar.stdout, ar.stderr, ar.outputs without ipyparallel parsing every date in the metadata
    on each access (a few ms per cell, more than the rest of ddplab's work on a trivial cell)."""
    return [md.get(key) for md in ar._metadata]


def _is_error(future):
    return future.done() and isinstance(future.result(), Exception)


class Monitor:
    """Watches one cell on `ranks` until every rank has finished or is gone."""

    def __init__(self, lab, ar, ranks, frame=FRAME):
        self.lab, self.ar, self.ranks, self.frame = lab, ar, ranks, frame
        self.futures = dict(zip(ranks, ar._children))  # one reply per rank, watched apart
        self.last_frame = time.monotonic()  # the first frame a FRAME into the cell: quick cells draw none
        self.drawn_version = -1
        self.finals = set()
        self.failed_at = {}  # rank -> when it was seen failed or lost (the first is the root cause)
        self.lost = {}  # rank -> why its engine is gone
        self.closed = set()  # ranks whose group was closed to free the others
        self.killed = set()  # ranks killed because they did not stop after SIGINT
        self.interrupted_at = self.escalated_at = None
        self.still_running = len(ranks)
        self.view_ok = True
        self.looked_at = 0.0

    # ------------------------------------------------------------------ telemetry and drawing
    def poll(self):
        """Merge what has arrived; redraw if a frame is due and something changed."""
        now = time.monotonic()
        lab = self.lab
        if lab.telemetry is not None:
            for batch in lab.telemetry.batches():
                if merge(lab, batch, now):
                    self.finals.add(batch[0])
        for r, text in zip(self.ranks, per_rank(self.ar, "stdout")):
            lab.run_state.set_output(r, text or "")
        if now - self.last_frame >= self.frame:
            lab.metrics.sample_total(lab.run_state.elapsed(now))
            self.draw(now)

    def draw(self, now=None):
        view = self.lab.view
        if view is not None and self.view_ok and self.lab.run_state.version != self.drawn_version:
            self.view_ok = self.lab.show("update")  # a view that failed once is left alone for the cell
            self.drawn_version = self.lab.run_state.version
        self.last_frame = now if now is not None else time.monotonic()

    # ------------------------------------------------------------------ failures
    def running(self):
        return [r for r in self.ranks if r not in self.lost and not self.futures[r].done()]

    def check(self):
        """Note failures and deaths; free ranks blocked on them; escalate after SIGINT."""
        now = time.monotonic()
        for r in self.ranks:
            if r not in self.failed_at and _is_error(self.futures[r]):
                self.failed_at[r] = now
        unfinished = [r for r in self.ranks if not self.futures[r].done()]
        look = unfinished and (now - self.looked_at >= LOOK_EVERY or self.failed_at or self.interrupted_at)
        if look:
            self.looked_at = now
        for r, why in (self.lab.find_lost(unfinished) if look else {}).items():  # a dead rank never finishes
            if r not in self.lost:
                self.lost[r] = why
                self.failed_at.setdefault(r, now)
                self.lab.run_state.fail(r, why, lost=True)
        running = self.running()
        if len(running) != self.still_running:  # progress: a rank stopped; escalation waits again
            self.still_running, self.escalated_at = len(running), now
        trouble = min([*self.failed_at.values(), self.interrupted_at or float("inf")])
        if running and now - trouble >= FAIL_FAST:
            idle = [r for r in self.ranks if r not in running and r not in self.lost and r not in self.closed]
            if idle:
                self.lab.close_group(idle)
                self.closed.update(idle)
        if running and self.interrupted_at is not None and now - self.escalated_at >= ESCALATE:
            # No rank has stopped for ESCALATE s since SIGINT (or since the last one stopped): they
            # are stuck where SIGINT cannot reach (all in C++ collectives). Kill one rank; its
            # death frees its peers, the cascade above frees the rest. If not, the next one.
            r = running[-1]
            why = f"killed by ddplab: still running {ESCALATE:g} s after SIGINT (stuck in a collective)"
            self.lab.kill_ranks([r])
            self.killed.add(r)
            self.lost[r] = why
            self.failed_at.setdefault(r, now)
            self.lab.run_state.fail(r, why, lost=True)
            self.escalated_at = now
        return not self.running()

    def interrupt(self):
        """Ctrl-C or the cell's timeout: SIGINT to every rank still running."""
        if self.interrupted_at is None:
            self.interrupted_at = self.escalated_at = time.monotonic()
            running = self.running()
            if running:
                self.lab.interrupt(running)

    def wait(self, deadline=None):
        """Until no rank runs; False if `deadline` (perf_counter) passed first."""
        while True:
            wait = POLL if deadline is None else max(0.0, min(POLL, deadline - time.perf_counter()))
            self.ar.wait(wait)  # wakes as soon as every reply is in
            self.poll()
            if self.check():
                return True
            if deadline is not None and time.perf_counter() >= deadline:
                return False

    def settle(self):
        """After interrupt(): wait (ignoring further Ctrl-C) until every rank stopped or was killed."""
        while True:
            try:
                if self.wait():
                    return
            except KeyboardInterrupt:
                continue

    def finish(self, grace=0.5):
        """After the cell: collect every rank's last batch (bounded), then the last frame."""
        telemetry = self.lab.telemetry
        expected = {r for r in self.ranks if r not in self.lost}
        deadline = time.monotonic() + grace
        self.poll()
        while telemetry is not None and not expected <= self.finals and time.monotonic() < deadline:
            telemetry.socket.poll(10)  # wakes as soon as a batch arrives
            self.poll()
        if expected:
            self.ar.wait_for_output(1.0)  # trailing stdout arrives after the reply
