"""lab.drills: fault drills for teaching (%ddp_fault): a rank's engine dies, a rank raises, or a
rank becomes a straggler; shown live on the dashboard. The rank side plays them from ddplab.log
(Rank.set_fault), i.e. at training steps."""
import logging
from typing import Any

from ..rank import call
from ..shared.errors import BadRequest

log = logging.getLogger("ddplab")
KINDS = ("kill", "raise", "slow", "clear")


class Drills:
    def __init__(self, lab: Any) -> None:
        self.lab = lab  # the Lab that made this (lab.py imports this module, so the import contracts keep the type out)
        self.faults: dict[int, dict[str, Any]] = {}  # rank -> the drill set on it: {"kind", "at_step", "factor"}

    def forget(self, rank: int | None = None) -> None:
        """A rank restarted (or every rank: a new pool) has no drill any more."""
        if rank is None:
            self.faults = {}
        else:
            self.faults.pop(rank, None)

    def set(self, kind: str, rank: int, at_step: int | None = None, factor: float | None = None) -> str:
        """kind "kill" (the engine dies), "raise" (the rank raises) or "slow" (each of its steps
        takes `factor` times as long: a straggler); "clear" removes it. kill/raise happen at the
        rank's training step `at_step` (counted by ddplab.log), or for kill without at_step: now.
        Returns a sentence saying what was set."""
        lab = self.lab
        ranks = lab.check_ranks([rank])
        if kind not in KINDS:
            raise BadRequest(f"unknown fault {kind!r}: use kill, raise, slow or clear")
        if kind == "slow" and not (isinstance(factor, (int, float)) and 1 <= factor <= 100):
            raise BadRequest(f"slow needs a factor from 1 to 100 (how many times longer each step takes), got {factor!r}")
        if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0):
            raise BadRequest(f"the step must be a whole number >= 0, got {at_step!r}")
        rs, say = lab.run_state, lab.config.say
        log.info("fault drill on rank %s: %s (at step %s, factor %s)", rank, kind, at_step, factor)
        if kind == "kill" and at_step is None:
            why = "its engine was killed (SIGKILL) by %ddp_fault kill"
            lab.pool.kill(ranks, why)
            rs.fail(rank, why, lost=True)
            lab.show("update")
            return say("rank {rank} killed (SIGKILL); %ddp_restart brings it back", rank=rank)
        spec = None if kind == "clear" else {"kind": kind, "at_step": at_step, "factor": factor}
        lab.view_on(ranks).apply_sync(call, "set_fault", spec)
        if spec is None:
            self.faults.pop(rank, None)
            rs.set_fault(rank, None)
            text = say("rank {rank}: no fault drill", rank=rank)
        elif kind == "slow":
            text = say("rank {rank} is a straggler: each step takes {factor:g}x as long (until %ddp_fault clear {rank})",
                       rank=rank, factor=factor)
            rs.set_fault(rank, f"slow ×{factor:g}")
        else:
            when = say("at step {step}", step=at_step) if at_step is not None else say("at its next step")
            text = say("rank {rank} will {what} {when} (ddplab.log counts steps)", rank=rank, when=when,
                       what=say("be killed (SIGKILL)" if kind == "kill" else "raise"))
            rs.set_fault(rank, f"{kind} {when}")
        if spec is not None:
            self.faults[rank] = spec
        rs.touch()
        lab.show("update")
        return text
