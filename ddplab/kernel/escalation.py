"""How a cell's monitor gets ranks out of a collective that will not finish: one state machine,
its waits DDPLab settings (%config DDPLab.escalate = 3, ...).

    watching ──collectives that can never finish: cut their links──> cut
    cut ──after_cut s, still running: SIGINT──> interrupted
    watching ──Ctrl-C or the cell's timeout: SIGINT──> interrupted
    interrupted ──escalate s: cut the links (if not cut yet)──> cut after SIGINT
    interrupted, cut after SIGINT ──escalate s──> killing
    killing: one rank killed each escalate s: the last one whose stack says it is stuck (in a
             collective, on a line of the cell, or silent); a rank whose stack says it left the
             cell's code, or that sent the cell's last batch (its result on the way), is
             given leave_grace s before it is killed anyway.

A wait counts from when its stage began, or from the last time a running rank stopped (progress:
the others may follow) or the group was closed under ranks left waiting, or (cut, before SIGINT)
from the last time a rank was seen stopped at a breakpoint (a person stepping: monitor.py). The
monitor also closes the group on idle ranks fail_fast s after a rank failed or died, or after
SIGINT (monitor.py); that is not a stage: it frees ranks without taking anything from them.

Times are seconds on `clock` (time.monotonic unless given: a test gives a fake one); each method
takes `now` from it unless the caller gives the moment it saw.
"""
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Action = Literal["interrupt", "cut", "kill"]

WATCHING, CUT, INTERRUPTED, CUT_AFTER_SIGINT, KILLING = (
    "watching", "cut", "interrupted", "cut after SIGINT", "killing")


@dataclass
class Waits:
    """The settings the stages wait for (seconds): DDPLab's of the same names."""

    escalate: float
    after_cut: float
    leave_grace: float

    @classmethod
    def from_settings(cls, t: Any) -> "Waits":  # t: DDPLab's settings (config.tunables())
        return cls(t.escalate, t.after_cut, t.leave_grace)

    def worst(self, ranks: int) -> float:
        """The longest escalation can take from SIGINT to the last of `ranks` killed."""
        return self.escalate + ranks * max(self.escalate, self.leave_grace)


class Escalation:
    """The stage a cell's escalation is in, and what is due now (`due`): None, "interrupt", "cut"
    or "kill". The monitor does what is due and says so (`did`)."""

    def __init__(self, waits: Waits, can_cut: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.waits, self.can_cut, self.clock = waits, can_cut, clock
        self.stage, self.since = WATCHING, clock()
        self.cut = False  # the running ranks' links were cut once (by a mismatch, or after SIGINT)
        self.interrupted = False
        self._running: int | None = None

    def progress(self, running: int, now: float | None = None) -> None:
        """`running`: how many ranks still run; a change restarts the current wait."""
        if running != self._running:
            self._running, self.since = running, self.clock() if now is None else now

    def wait_again(self, now: float | None = None) -> None:
        """Something was done that may free the ranks by itself (the group closed under them), or a
        person is stepping a rank stopped at a breakpoint: the current wait starts again."""
        self.since = self.clock() if now is None else now

    def due(self, now: float | None = None, any_stuck: bool = True) -> Action | None:
        """What to do now. any_stuck: whether some running rank's stack says it is stuck."""
        waited, w = (self.clock() if now is None else now) - self.since, self.waits
        if self.stage == CUT:
            return "interrupt" if waited >= w.after_cut else None
        if self.stage == INTERRUPTED:
            if waited < w.escalate:
                return None
            return "cut" if self.can_cut and not self.cut else "kill"
        if self.stage in (CUT_AFTER_SIGINT, KILLING):
            if waited < w.escalate or (not any_stuck and waited < w.leave_grace):
                return None
            return "kill"
        return None

    def did(self, action: Action, now: float | None = None) -> None:
        """The monitor did `action` ("cut", "interrupt", "kill"): the next stage, its wait from now."""
        if action == "cut":
            self.cut = True
            self.stage = CUT_AFTER_SIGINT if self.interrupted else CUT
        elif action == "interrupt":
            self.interrupted, self.stage = True, INTERRUPTED
        elif action == "kill":
            self.stage = KILLING
        else:
            raise ValueError(f"not an escalation step: {action!r}")
        self.since = self.clock() if now is None else now
