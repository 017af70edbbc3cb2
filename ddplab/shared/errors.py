"""Errors ddplab raises. Each message says what happened and what to do next."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")
Say = Callable[..., str]  # words.say for one language: say(text, **values) (errors cannot import words)


class DDPLabError(Exception):
    """Base class of every ddplab error."""

    def _render_traceback_(self) -> list[str]:
        # In IPython: one line that says what to do, no traceback into ddplab's own code.
        return [f"{type(self).__name__}: {self}"]


class UsageProblem(DDPLabError):
    """The request itself is wrong (the magics show these as an IPython UsageError)."""


class BadRequest(UsageProblem, ValueError):
    """The caller asked for something that cannot work (bad rank count, unknown rank, ...)."""


class PoolNotRunning(UsageProblem):
    def __init__(self, message: str = "no ddplab pool is running: start one with %ddp_start (or Lab(...).start())") -> None:
        super().__init__(message)


class PoolAlreadyRunning(UsageProblem):
    """start() was called on a Lab whose pool runs."""


class StartFailed(DDPLabError):
    """The pool could not be started; everything that was started has been stopped."""


class NameMissing(UsageProblem, KeyError):
    """gather() asked for a name some ranks do not define."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Interrupted(DDPLabError):
    """Ctrl-C (a kernel interrupt) stopped a cell; every rank was sent SIGINT."""


class CellTimeout(DDPLabError):
    """A cell ran longer than its timeout; its ranks were interrupted."""


class ExpectedFailureMissing(DDPLabError):
    """A cell run with %%ddp --expect ERROR did not fail."""


class RankLost(UsageProblem):
    """A rank's engine is gone; %ddp_restart brings it back."""


def english(text: str, **values: Any) -> str:
    """words.say's English (for errors raised without the pool's language)."""
    text = text.rsplit("|", 1)[-1]
    return text.format(**values) if values else text


def ranks_listed(ranks: Sequence[int], say: Say) -> str:
    """"ranks 1, 2" / "rank 1、2" in the language `say` speaks."""
    return say("ranks {ranks}" if len(ranks) > 1 else "rank {ranks}", ranks=say("list separator|, ").join(map(str, ranks)))


# Why a rank was lost, when the pools say it in these words (the report says them in the pool's language).
FLOODED = "gloo ran out of file descriptors taking connections (another account flooded its port)"  # (guard.py)
LOST_WHY = (FLOODED, "the pool was stopped", "its engine stopped answering",
            "its engine is gone: the controller no longer hears it",
            "its engine is gone: the controller no longer hears it (the engine died, or its host)",
            "its engine was killed (SIGKILL) by %ddp_fault kill", "its engine did not answer after SIGINT and SIGKILL")


class RankFailed(DDPLabError):
    """One or more ranks raised (or died) while running a cell.

    ``failures`` maps rank -> RankError, the root cause first; ``result`` is the RunResult with
    every rank's output (nothing printed before the error is lost) and ``result.recovery``
    says what ddplab did to make the pool usable again.
    """

    def __init__(self, failures: Mapping[int, RankError] | Iterable[tuple[int, RankError]], result: Any = None,
                 say: Say | None = None) -> None:
        self.failures: dict[int, RankError] = dict(failures)
        self.result = result
        self.say = say or english  # words.say for the pool's language (errors cannot import words)
        super().__init__(self._headline())

    def _headline(self) -> str:
        return "; ".join(f"rank {r}: {f.ename}: {f.evalue}" for r, f in self.failures.items() if not is_echo(f)) \
            or "; ".join(f"rank {r}: {f.ename}: {f.evalue}" for r, f in self.failures.items())

    @property
    def ranks(self) -> list[int]:
        return list(self.failures)

    def report(self, color: bool = True) -> list[str]:
        """Root cause first, with its traceback; ranks that failed the same way named together;
        ranks whose collective was cut off by it in one line; then what ddplab did about it.

        color=False strips the terminal colour codes of the ranks' tracebacks (for logs, pipes).
        """
        lines = self._report()
        return lines if color else [ANSI.sub("", line) for line in lines]

    def _report(self) -> list[str]:
        causes = {r: f for r, f in self.failures.items() if not is_echo(f)}
        echoes = sorted(r for r, f in self.failures.items() if is_echo(f))
        groups: dict[tuple[str, str, tuple[str, ...]], list[int]] = {}
        for r, f in causes.items():
            groups.setdefault(f.signature(), []).append(r)
        lines: list[str] = []
        for ranks in groups.values():
            f = self.failures[ranks[0]]
            where = ", ".join(x for x in (f"engine {f.engine_id}", f"pid {f.pid}", f.host) if x)
            if f.ename == "RankLost":
                why = self.say(f.evalue)  # the fixed reasons are in the catalogue; others stay as given
                lines.append(self.say("rank {rank} lost at step {step} ({where}): {why}" if f.step is not None else
                                      "rank {rank} lost ({where}): {why}", rank=ranks[0], step=f.step, where=where,
                                      why=why))
            else:
                lines.append(self.say("rank {rank} failed at step {step} ({where})" if f.step is not None else
                                      "rank {rank} failed ({where})", rank=ranks[0], step=f.step, where=where))
            if len(ranks) > 1:
                others = ranks[1:]
                lines.append(self.say("{ranks} failed the same way", ranks=ranks_listed(others, self.say)))
            if f.ename != "RankLost":
                lines.extend(f.traceback_lines or [f"{f.ename}: {f.evalue}"])
        if echoes:
            cause = f"rank {next(iter(causes))}" if causes else self.say("a failed rank")
            lines.append(self.say("{ranks} stopped: their collective was cut off by {cause}" if len(echoes) > 1 else
                                  "{ranks} stopped: its collective was cut off by {cause}",
                                  ranks=ranks_listed(echoes, self.say), cause=cause))
        if self.result is not None:
            lines.extend(getattr(self.result, "hints", []))
            lines.extend(getattr(self.result, "recovery", []))
        return lines

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback into ddplab's own code.
        return self.report()


class CollectiveMismatch(RankFailed):
    """Ranks waited in collectives that could never finish (another op, group, shape or dtype, or a
    rank that never calls it); ddplab named them and cut the collectives short."""

    def __init__(self, text: str, failures: Mapping[int, RankError] | Iterable[tuple[int, RankError]],
                 result: Any = None, say: Say | None = None) -> None:
        self.text = text
        super().__init__(failures, result, say)

    def _headline(self) -> str:
        return self.text

    def _report(self) -> list[str]:
        lines = [self.text]
        if self.result is not None:
            lines.extend(getattr(self.result, "hints", []))
            lines.extend(getattr(self.result, "recovery", []))
        return lines


class CollectiveTimeout(RankFailed):
    """Ranks waited in a collective longer than the pool's timeout (%ddp_start --timeout), not counting
    the time a rank was stopped at a breakpoint; ddplab cut it, as gloo would have failed it."""

    def __init__(self, text: str, failures: Mapping[int, RankError] | Iterable[tuple[int, RankError]],
                 result: Any = None, say: Say | None = None) -> None:
        self.text = text
        super().__init__(failures, result, say)

    _headline, _report = CollectiveMismatch._headline, CollectiveMismatch._report


UNDELIVERED: dict[str, tuple[str, str]] = {  # why a cell's message went missing -> (ename, evalue)
    "request": ("CellNotDelivered", "this rank did not begin the cell within DDPLab.reply_grace seconds: ipyparallel "
                                    "lost the cell on the way (its connection broke; a connection from outside the "
                                    "pool?), or the rank's engine is frozen"),
    "reply": ("ResultNotDelivered", "this rank finished the cell, but its result never reached the notebook: "
                                    "ipyparallel lost it on the way (its connection broke; a connection from outside "
                                    "the pool?)"),
}


ECHOES = ("connection closed by peer", "connection reset by peer",  # gloo's (torch's, JAX's)
          "collective ops is aborted by")  # TensorFlow's, once a peer's link closed


def is_echo(error: RankError) -> bool:
    """A failure caused by another rank's: its collective was cut off."""
    text = f"{error.ename} {error.evalue}".lower()
    return any(echo in text for echo in ECHOES)


@dataclass
class RankError:
    """What one rank reported when it failed (or, ename "RankLost", why its engine is gone)."""

    ename: str
    evalue: str
    traceback_lines: list[str] = field(default_factory=list)
    engine_id: int | None = None
    pid: int | None = None
    host: str = ""
    step: int | None = None  # the last step the rank logged (ddplab.log), if any

    def signature(self) -> tuple[str, str, tuple[str, ...]]:
        """What makes two failures 'the same': the error and its traceback, minus cell numbers."""
        return (self.ename, self.evalue, tuple(re.sub(r"In\[\d+\]", "In[]", t) for t in self.traceback_lines))

    def __repr__(self) -> str:
        return f"RankError({self.ename}: {self.evalue})"
