"""Rank states and the transitions allowed between them (pure data, no imports of torch/IPython).

    starting -> init -> ready -> running -> training -> done -> ready ...

From any live state a rank may go to failed (it raised), lost (its engine died
or stopped answering) or stopped (the pool was stopped).
"""

STARTING, INIT, READY, RUNNING, TRAINING, DONE = "starting", "init", "ready", "running", "training", "done"
FAILED, LOST, STOPPED = "failed", "lost", "stopped"

STATES = (STARTING, INIT, READY, RUNNING, TRAINING, DONE, FAILED, LOST, STOPPED)

_ENDINGS = {FAILED, LOST, STOPPED}
ALLOWED = {
    STARTING: {INIT} | _ENDINGS,
    INIT: {READY} | _ENDINGS,
    READY: {RUNNING, INIT} | _ENDINGS,
    RUNNING: {TRAINING, DONE, READY} | _ENDINGS,
    TRAINING: {DONE, READY} | _ENDINGS,
    DONE: {READY, RUNNING, INIT} | _ENDINGS,
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
