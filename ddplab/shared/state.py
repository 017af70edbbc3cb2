"""Rank states and the transitions allowed between them (pure data, no imports of torch/IPython).

    starting -> init -> ready -> running -> training -> done -> ready ...

From any live state a rank may go to failed (it raised), lost (its engine died
or stopped answering) or stopped (the pool was stopped).
"""
import functools
import threading

STARTING, INIT, READY, RUNNING, TRAINING, DONE = "starting", "init", "ready", "running", "training", "done"
FAILED, LOST, STOPPED = "failed", "lost", "stopped"

STATES = (STARTING, INIT, READY, RUNNING, TRAINING, DONE, FAILED, LOST, STOPPED)

_ENDINGS = {FAILED, LOST, STOPPED}
ALLOWED = {
    STARTING: {INIT} | _ENDINGS,
    INIT: {READY} | _ENDINGS,
    READY: {RUNNING, INIT, STARTING} | _ENDINGS,  # starting: its engine is restarted
    RUNNING: {TRAINING, DONE, READY} | _ENDINGS,
    TRAINING: {DONE, READY} | _ENDINGS,
    DONE: {READY, RUNNING, INIT, STARTING} | _ENDINGS,
    # a failed rank keeps its engine: the group is re-formed (init) or the next cell runs
    FAILED: {INIT, READY, RUNNING, LOST, STOPPED, STARTING},
    LOST: {STARTING, STOPPED},
    STOPPED: {STARTING},
}


class BadTransition(ValueError):
    pass


class RankStates:
    """The current state of every rank, changed only through allowed transitions."""

    def __init__(self, world_size=0):
        self.states = [STARTING] * world_size

    def __getitem__(self, rank):
        return self.states[rank]

    def __len__(self):
        return len(self.states)

    def __iter__(self):
        return iter(self.states)

    def set(self, rank, new):
        old = self.states[rank]
        if new == old:
            return False
        if new not in ALLOWED.get(old, ()):
            raise BadTransition(f"rank {rank}: {old} -> {new} is not an allowed transition")
        self.states[rank] = new
        return True

    def set_all(self, new, ranks=None):
        for r in range(len(self.states)) if ranks is None else ranks:
            self.set(r, new)

    def count(self, state):
        return self.states.count(state)


class RankStatus:
    """What the notebook knows of one rank right now."""

    __slots__ = ("rank", "step", "loss", "rate", "heard", "phase", "output", "error", "points", "fault", "where",
                 "stopped")

    def __init__(self, rank):
        self.rank = rank
        self.step = self.loss = self.rate = self.heard = self.phase = self.error = self.fault = None
        self.where = None  # while a long cell runs: its line, and the collective it waits in (probe.py)
        self.stopped = None  # stopped at a breakpoint: where (file, line, function, code), pdb waiting
        self.output = ""
        self.points = 0  # points received in the current cell


def _locked(method):
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return locked


class RunState:
    """The whole pool as the dashboard draws it: rank states plus each rank's latest facts.

    `version` grows on every change, so a view can skip frames where nothing changed. Every change
    goes through a method, under the state's own lock: the cell's thread (its monitor), the watch
    thread, a drill on the notebook's thread and a background cell's thread may change it at once.
    Views read it without the lock (a frame may mix two moments; the next one is whole).
    """

    def __init__(self, world_size):
        self.world_size = world_size
        self.states = RankStates(world_size)
        self.ranks = [RankStatus(r) for r in range(world_size)]
        self.cell = 0  # cells run so far
        self.cell_started = None  # monotonic time the current cell started
        self.cell_ended = None
        self.running = []  # ranks of the current cell
        self.message = ""  # what the pool is doing, e.g. start-up progress
        self.notices = {}  # what happened that the user should know once: topic -> its latest sentence
        self.version = 0
        self.lock = threading.RLock()

    def touch(self):
        self.version += 1

    @_locked
    def set_state(self, rank, new):
        if self.states.set(rank, new):
            self.touch()

    @_locked
    def set_all(self, new):
        for r in range(self.world_size):
            self.states.set(r, new)
        self.touch()

    @_locked
    def begin_cell(self, ranks, now):
        """A cell starts on `ranks`: they go to running; their per-cell facts reset."""
        self.cell += 1
        self.cell_started, self.cell_ended, self.running = now, None, list(ranks)
        self.message = ""
        for r in ranks:
            s = self.ranks[r]
            s.step = s.loss = s.rate = s.phase = s.error = s.where = s.stopped = None
            s.output, s.points = "", 0
            if self.states[r] in (RUNNING, TRAINING):  # a cell that ended without its results (interrupted)
                self.states.set(r, READY)
            self.states.set(r, RUNNING)
        self.touch()

    @_locked
    def end_cell(self, now):
        self.cell_ended = now
        self.touch()

    @_locked
    def points_arrived(self, rank, step, loss, rate, heard, count):
        s = self.ranks[rank]
        s.step, s.heard = step, heard
        if loss is not None:
            s.loss = loss
        if rate is not None:
            s.rate = rate
        s.points += count
        if self.states[rank] == RUNNING:
            self.states.set(rank, TRAINING)  # training = a running rank whose points flow
        self.touch()

    @_locked
    def notice(self, topic, sentence):
        """Set the sentence shown for `topic` (e.g. messages dropped from one address); True if new."""
        if self.notices.get(topic) == sentence:
            return False
        self.notices[topic] = sentence
        self.touch()
        return True

    @_locked
    def set_where(self, rank, where):
        if self.ranks[rank].where != where:
            self.ranks[rank].where = where
            self.touch()

    @_locked
    def set_stopped(self, rank, where):
        """`rank` stopped at a breakpoint (where: file, line, function, code), or runs on (None)."""
        if self.ranks[rank].stopped != where:
            self.ranks[rank].stopped = where
            self.touch()

    def stopped_ranks(self):
        return [s.rank for s in self.ranks if s.stopped is not None]

    @_locked
    def set_phase(self, rank, phase):
        self.ranks[rank].phase = phase
        self.touch()

    @_locked
    def set_output(self, rank, text):
        if self.ranks[rank].output != text:
            self.ranks[rank].output = text
            self.touch()

    @_locked
    def fail(self, rank, error, lost=False):
        self.ranks[rank].error = error
        self.states.set(rank, LOST if lost else FAILED)
        self.touch()

    @_locked
    def set_fault(self, rank, label):
        """The fault drill set on `rank` (%ddp_fault), as the dashboard labels it; None: none."""
        self.ranks[rank].fault = label
        self.touch()

    @_locked
    def set_message(self, message):
        """What the pool is doing (start-up progress, what was done after a failed cell)."""
        self.message = message
        self.touch()

    @_locked
    def clear_error(self, rank):
        self.ranks[rank].error = None
        self.touch()

    def elapsed(self, now):
        if self.cell_started is None:
            return 0.0
        return (self.cell_ended or now) - self.cell_started
