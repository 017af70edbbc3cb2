"""Rank states and the transitions allowed between them (pure data, no imports of torch/IPython).

    starting -> init -> ready -> running -> training -> done -> ready ...

From any live state a rank may go to failed (it raised), lost (its engine died
or stopped answering) or stopped (the pool was stopped).

A state is a RankState, a str: it equals, hashes, formats and dumps to JSON as its plain name
("ready"), so a dict keyed by states is looked up with the name as the wire carries it.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import Enum
from typing import Any, Concatenate, ParamSpec, TypeVar


class RankState(str, Enum):
    """One rank's state: a str whose value is its name ("ready"), as str(), format() and json see it
    (Python 3.10 has no enum.StrEnum: __str__ and __format__ say so here)."""

    STARTING = "starting"
    INIT = "init"
    READY = "ready"
    RUNNING = "running"
    TRAINING = "training"
    DONE = "done"
    FAILED = "failed"
    LOST = "lost"
    STOPPED = "stopped"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


STARTING, INIT, READY, RUNNING, TRAINING, DONE = (RankState.STARTING, RankState.INIT, RankState.READY,
                                                  RankState.RUNNING, RankState.TRAINING, RankState.DONE)
FAILED, LOST, STOPPED = RankState.FAILED, RankState.LOST, RankState.STOPPED

STATES: tuple[RankState, ...] = (STARTING, INIT, READY, RUNNING, TRAINING, DONE, FAILED, LOST, STOPPED)

_ENDINGS = {FAILED, LOST, STOPPED}
ALLOWED: dict[RankState, set[RankState]] = {
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

    def __init__(self, world_size: int = 0) -> None:
        self.states: list[RankState] = [STARTING] * world_size

    def __getitem__(self, rank: int) -> RankState:
        return self.states[rank]

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[RankState]:
        return iter(self.states)

    def set(self, rank: int, new: RankState | str) -> bool:
        """Move `rank` to `new` (a RankState, or its name); False if it was there already. Raises
        BadTransition for a change ALLOWED does not list."""
        old = self.states[rank]
        if new == old:
            return False
        if new not in ALLOWED.get(old, ()):
            raise BadTransition(f"rank {rank}: {old} -> {new} is not an allowed transition")
        self.states[rank] = RankState(new)
        return True

    def set_all(self, new: RankState | str, ranks: Iterable[int] | None = None) -> None:
        for r in range(len(self.states)) if ranks is None else ranks:
            self.set(r, new)

    def count(self, state: RankState | str) -> int:
        return sum(1 for s in self.states if s == state)  # (a name counts as its state)


class RankStatus:
    """What the notebook knows of one rank right now."""

    __slots__ = ("rank", "step", "loss", "rate", "heard", "phase", "output", "error", "points", "fault", "where",
                 "stopped")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.step: int | None = None  # the last step logged
        self.loss: float | None = None
        self.rate: float | None = None  # samples/s
        self.heard: float | None = None  # monotonic time of its last batch
        self.phase: str | None = None
        self.error: str | None = None
        self.fault: str | None = None  # the fault drill set on it, as the dashboard labels it
        self.where: Mapping[str, Any] | None = None  # while a long cell runs: its line, and the collective it
        # waits in (probe.py; as decoded, a wire.Where)
        self.stopped: dict[str, Any] | None = None  # stopped at a breakpoint: where (file, line, function, code),
        # pdb waiting
        self.output = ""
        self.points = 0  # points received in the current cell


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(method: Callable[Concatenate[RunState, _P], _R]) -> Callable[Concatenate[RunState, _P], _R]:
    @functools.wraps(method)
    def locked(self: RunState, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
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

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.states = RankStates(world_size)
        self.ranks = [RankStatus(r) for r in range(world_size)]
        self.cell = 0  # cells run so far
        self.cell_started: float | None = None  # monotonic time the current cell started
        self.cell_ended: float | None = None
        self.running: list[int] = []  # ranks of the current cell
        self.message = ""  # what the pool is doing, e.g. start-up progress
        self.notices: dict[Any, str] = {}  # what happened that the user should know once: topic (a hashable,
        # e.g. ("refused", account)) -> its latest sentence
        self.version = 0
        self.lock = threading.RLock()

    def touch(self) -> None:
        self.version += 1

    @_locked
    def set_state(self, rank: int, new: RankState | str) -> None:
        if self.states.set(rank, new):
            self.touch()

    @_locked
    def set_all(self, new: RankState | str) -> None:
        for r in range(self.world_size):
            self.states.set(r, new)
        self.touch()

    @_locked
    def begin_cell(self, ranks: Iterable[int], now: float) -> None:
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
    def end_cell(self, now: float) -> None:
        self.cell_ended = now
        self.touch()

    @_locked
    def points_arrived(self, rank: int, step: int | None, loss: float | None, rate: float | None, heard: float,
                       count: int) -> None:
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
    def notice(self, topic: Any, sentence: str) -> bool:
        """Set the sentence shown for `topic` (e.g. messages dropped from one address); True if new."""
        if self.notices.get(topic) == sentence:
            return False
        self.notices[topic] = sentence
        self.touch()
        return True

    @_locked
    def set_where(self, rank: int, where: Mapping[str, Any] | None) -> None:
        if self.ranks[rank].where != where:
            self.ranks[rank].where = where
            self.touch()

    @_locked
    def set_stopped(self, rank: int, where: dict[str, Any] | None) -> None:
        """`rank` stopped at a breakpoint (where: file, line, function, code), or runs on (None)."""
        if self.ranks[rank].stopped != where:
            self.ranks[rank].stopped = where
            self.touch()

    def stopped_ranks(self) -> list[int]:
        return [s.rank for s in self.ranks if s.stopped is not None]

    @_locked
    def set_phase(self, rank: int, phase: str | None) -> None:
        self.ranks[rank].phase = phase
        self.touch()

    @_locked
    def set_output(self, rank: int, text: str) -> None:
        if self.ranks[rank].output != text:
            self.ranks[rank].output = text
            self.touch()

    @_locked
    def fail(self, rank: int, error: str, lost: bool = False) -> None:
        self.ranks[rank].error = error
        if self.states[rank] != STOPPED:  # (the pool was stopped under a cell run from another thread: it stays so)
            self.states.set(rank, LOST if lost else FAILED)
        self.touch()

    @_locked
    def set_fault(self, rank: int, label: str | None) -> None:
        """The fault drill set on `rank` (%ddp_fault), as the dashboard labels it; None: none."""
        self.ranks[rank].fault = label
        self.touch()

    @_locked
    def set_message(self, message: str) -> None:
        """What the pool is doing (start-up progress, what was done after a failed cell)."""
        self.message = message
        self.touch()

    @_locked
    def clear_error(self, rank: int) -> None:
        self.ranks[rank].error = None
        self.touch()

    def elapsed(self, now: float) -> float:
        if self.cell_started is None:
            return 0.0
        return (self.cell_ended or now) - self.cell_started
