"""Errors ddplab raises. Each message says what happened and what to do next."""
import re

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class DDPLabError(Exception):
    """Base class of every ddplab error."""

    def _render_traceback_(self):
        # In IPython: one line that says what to do, no traceback into ddplab's own code.
        return [f"{type(self).__name__}: {self}"]


class UsageProblem(DDPLabError):
    """The request itself is wrong (the magics show these as an IPython UsageError)."""


class BadRequest(UsageProblem, ValueError):
    """The caller asked for something that cannot work (bad rank count, unknown rank, ...)."""


class PoolNotRunning(UsageProblem):
    def __init__(self, message="no ddplab pool is running: start one with %ddp_start (or Lab(...).start())"):
        super().__init__(message)


class PoolAlreadyRunning(UsageProblem):
    """start() was called on a Lab whose pool runs."""


class StartFailed(DDPLabError):
    """The pool could not be started; everything that was started has been stopped."""


class NameMissing(UsageProblem, KeyError):
    """gather() asked for a name some ranks do not define."""

    def __str__(self):  # KeyError would quote the message
        return self.args[0]


class Interrupted(DDPLabError):
    """Ctrl-C (a kernel interrupt) stopped a cell; every rank was sent SIGINT."""


class CellTimeout(DDPLabError):
    """A cell ran longer than its timeout; its ranks were interrupted."""


class RankFailed(DDPLabError):
    """One or more ranks raised (or died) while running a cell.

    ``failures`` maps rank -> RankError, the first to fail (the root cause) first;
    ``result`` is the RunResult with every rank's output, so nothing printed
    before the error is lost.
    """

    def __init__(self, failures, result=None):
        self.failures = dict(failures)
        self.result = result
        super().__init__(self._headline())

    def _headline(self):
        return "; ".join(f"rank {r}: {f.ename}: {f.evalue}" for r, f in self.failures.items())

    @property
    def ranks(self):
        return list(self.failures)

    def report(self, color=True):
        """Root cause first; ranks that failed the same way are named together, traceback once.

        color=False strips the terminal colour codes of the ranks' tracebacks (for logs, pipes).
        """
        lines = self._report()
        return lines if color else [ANSI.sub("", line) for line in lines]

    def _report(self):
        groups = {}
        for r, f in self.failures.items():
            groups.setdefault(f.signature(), []).append(r)
        lines = []
        for ranks in groups.values():
            f = self.failures[ranks[0]]
            where = ", ".join(x for x in (f"engine {f.engine_id}", f"pid {f.pid}", f.host) if x)
            lines.append(f"rank {ranks[0]} failed ({where})")
            if len(ranks) > 1:
                others = ranks[1:]
                lines.append(f"rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed the same way")
            lines.extend(f.traceback_lines or [f"{f.ename}: {f.evalue}"])
        return lines

    def _render_traceback_(self):
        # IPython shows this instead of a traceback into ddplab's own code.
        return self.report()


class RankError:
    """What one rank reported when it failed."""

    def __init__(self, ename, evalue, traceback_lines=(), engine_id=None, pid=None, host=""):
        self.ename, self.evalue = ename, evalue
        self.traceback_lines = list(traceback_lines)
        self.engine_id, self.pid, self.host = engine_id, pid, host

    def signature(self):
        """What makes two failures 'the same': the error and its traceback, minus cell numbers."""
        return (self.ename, self.evalue, tuple(re.sub(r"In\[\d+\]", "In[]", t) for t in self.traceback_lines))

    def __repr__(self):
        return f"RankError({self.ename}: {self.evalue})"
