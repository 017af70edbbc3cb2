"""Running one cell on the ranks: send it, watch it (monitor.py), collect every rank's result,
and decide what must be done to make the pool usable again.

`collect` and `plan_recovery` are pure functions of what the monitor saw: they return data and
decisions (these ranks are lost, the group must be re-formed), and the Lab acts on them.
"""
import ast
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from ..shared import state as st
from ..shared.errors import UNDELIVERED, RankError, is_echo
from ..shared.words import ranks_text, say
from .monitor import Hooks, Monitor, Outcome, Replies

if TYPE_CHECKING:
    from ..shared.state import RunState
    from .telemetry import Live, Telemetry


@dataclass
class RankOutput:
    """What one rank produced while running a cell."""

    rank: int
    stdout: str = ""
    stderr: str = ""
    result: dict[str, Any] | None = None  # mime bundle of the cell's last expression, like Out[...]
    displays: list[Any] = field(default_factory=list)  # display_data outputs (plots, html)
    error: RankError | None = None


@dataclass
class RunResult:
    """Per-rank outputs of one cell, indexed by rank order of `ranks`."""

    ranks: list[int]
    outputs: list[RankOutput]
    seconds: float = 0.0
    failure_order: list[int] = field(default_factory=list)  # failed ranks, root cause first
    recovery: list[str] = field(default_factory=list)  # what ddplab did about failures, for the user
    hints: list[str] = field(default_factory=list)  # what the cell did by mistake, said once (diagnose.HINTS)
    waited: str = ""  # where the ranks were the last time some waited in a collective (a long cell)

    def __getitem__(self, rank: int) -> RankOutput:
        return self.outputs[self.ranks.index(rank)]

    @property
    def stdout(self) -> list[str]:
        return [o.stdout for o in self.outputs]

    @property
    def failed(self) -> dict[int, RankError]:
        """rank -> RankError, the root cause first."""
        return cast("dict[int, RankError]", {r: self[r].error for r in self.failure_order})  # (each has one)


@dataclass
class Recovery:
    """What a failed cell needs done. restart: ranks killed while stuck (restart them, then
    re-form); lost: ranks whose engine died (the user brings them back with %ddp_restart);
    reform: the group may be broken; form it again on the same engines (variables kept)."""

    restart: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    reform: bool = False

    def __bool__(self) -> bool:
        return bool(self.restart or self.lost or self.reform)


def shows_a_value(code: str) -> bool:
    """Whether a cell ends with an expression whose value is shown (Out[...]). Other cells run
    "silent" on the engines, as ipyparallel's view.execute does by default: no execute_input
    broadcast and no display hook, a millisecond or two less per cell on a busy machine."""
    try:
        body = ast.parse(code).body
    except SyntaxError:  # IPython syntax (%magic, !shell): run it the full way
        return True
    return bool(body) and isinstance(body[-1], ast.Expr)


def execute(view: Any, code: str, ranks: list[int], live: "Live", telemetry: "Telemetry | None", hooks: Hooks,
            timeout: float | None = None, lang: str = "en") -> tuple[Outcome, Literal["timeout", "interrupt"] | None]:
    """Run `code` on `ranks` (view: a DirectView on their engines) until every rank is done or
    gone. Returns (Outcome, stopped_by: None, "timeout" or "interrupt"). Ctrl-C and the timeout
    send SIGINT to every rank still running, and wait (escalating) until none runs."""
    tic = time.perf_counter()
    ar = view.execute(code, silent=not shows_a_value(code), block=False)
    monitor = Monitor(Replies(ar, ranks), ranks, live, telemetry, hooks, lang)
    stopped_by: Literal["timeout", "interrupt"] | None = None
    try:
        if not monitor.wait(None if timeout is None else tic + timeout):
            stopped_by = "timeout"
    except KeyboardInterrupt:
        stopped_by = "interrupt"
    if stopped_by:
        monitor.interrupt()
        monitor.settle()
    return monitor.finish(), stopped_by


def rank_error(rank: int, reply: Any = None, lost_why: str | None = None, where: dict[str, Any] | None = None,
               step: int | None = None) -> RankError:
    """The RankError of a rank that raised (reply: the exception) or was lost (lost_why)."""
    where = where or {}
    engine, pid, host = where.get("engine"), where.get("pid"), where.get("host", "")
    if lost_why is not None:
        return RankError("RankLost", lost_why, [], engine, pid, host, step)
    ename = getattr(reply, "ename", None) or type(reply).__name__
    evalue = reply.evalue if getattr(reply, "evalue", None) is not None else str(reply)
    tb = (getattr(reply, "traceback", None) or "").splitlines()
    return RankError(ename, evalue, tb, engine, pid, host, step)


def collect(outcome: Outcome, run_state: "RunState", info: Sequence[dict[str, Any]], seconds: float) -> RunResult:
    """Every rank's outputs and outcome as a RunResult, root cause of a failure first and its
    echoes after; each rank's state set to done, failed or (kept) lost.
    info: what each rank reported on joining (engine, pid, host), by rank."""
    outputs: list[RankOutput] = []
    for seen in outcome.seen:
        r = seen.rank
        o = RankOutput(r, seen.stdout, seen.stderr, displays=list(seen.displays))
        where = info[r] if r < len(info) else {}
        step = run_state.ranks[r].step
        if r in outcome.lost:
            o.error = rank_error(r, lost_why=outcome.lost[r], where=where, step=step)
        elif r in outcome.undelivered and seen.reply is None:
            ename, why = UNDELIVERED[outcome.undelivered[r]]
            o.error = RankError(ename, why, [], where.get("engine"), where.get("pid"), where.get("host", ""), step)
            if run_state.states[r] != st.FAILED:
                run_state.fail(r, f"{ename}: {why}")
        elif isinstance(seen.reply, Exception):
            o.error = rank_error(r, seen.reply, where=where, step=step)
            run_state.fail(r, f"{o.error.ename}: {o.error.evalue}")
        else:
            o.result = (getattr(seen.reply, "execute_result", None) or {}).get("data")
            run_state.set_state(r, st.DONE if seen.reply is not None else st.READY)
        run_state.set_output(r, o.stdout)
        outputs.append(o)
    failed = [(o.rank, o.error) for o in outputs if o.error]
    # the root cause: a rank that raised (or died) on its own; echoes are cut-off collectives
    order = sorted(failed, key=lambda f: (is_echo(f[1]), outcome.failed_at.get(f[0], float("inf"))))
    return RunResult(list(outcome.ranks), outputs, seconds, [r for r, _ in order], waited=outcome.waited)


def comm_error(error: RankError) -> bool:
    """An error from inside torch.distributed: the group may be broken."""
    text = f"{error.ename} {error.evalue} " + " ".join(error.traceback_lines)
    return error.ename.startswith("Dist") or "gloo" in text.lower() or "torch/distributed/" in text


def plan_recovery(outcome: Outcome, result: RunResult) -> Recovery:
    """What must be done after this cell (see Recovery)."""
    if outcome.killed:
        return Recovery(restart=sorted(outcome.killed))
    if outcome.lost:
        return Recovery(lost=sorted(outcome.lost))
    errors = [o.error for o in result.outputs if o.error]
    # (a rank that quit the debugger, q, may have left the group mid-collective, its own or a peer's)
    return Recovery(reform=bool(outcome.closed) or outcome.mismatch is not None or bool(outcome.timed_out)
                    or bool(outcome.undelivered)
                    or any(is_echo(e) or comm_error(e) or e.ename == "BdbQuit" for e in errors))


TF_ABORTED = "collective ops is aborted"  # (TensorFlow's words, once a peer failed: errors.ECHOES)


def framework_notes(result: RunResult, lang: str = "en") -> list[str]:
    """What the failure left of another framework's state on the ranks: TensorFlow aborts its collectives
    for good (in that process) once a worker of a MultiWorkerMirroredStrategy failed."""
    aborted = sorted(r for r, e in result.failed.items() if TF_ABORTED in f"{e.ename} {e.evalue}".lower())
    if not aborted:
        return []
    return [say(lang, "TensorFlow aborted its collectives on {ranks} and cannot run them again in these processes: "
                      "%ddp_restart --all gives fresh ranks; then call ddplab.tf_config() and make the strategy again",
                ranks=ranks_text(aborted, lang))]


def recovery_notes(plan: Recovery, world_size: int, escalate: float, seconds: float = 0.0,
                   stale: Sequence[tuple[str, str]] = (), lang: str = "en") -> list[str]:
    """What was done, for the user (in the pool's language): one sentence per action."""
    if plan.restart:
        killed = plan.restart
        kept = [r for r in range(world_size) if r not in killed]
        return [say(lang, "{killed} did not stop within {escalate:g} s of SIGINT and {was} restarted in {seconds:.1f} s "
                          "(the variables of {killed} are gone; {kept} kept theirs); group re-formed" if kept else
                          "{killed} did not stop within {escalate:g} s of SIGINT and {was} restarted in {seconds:.1f} s "
                          "(the variables of {killed} are gone); group re-formed",
                    killed=ranks_text(killed, lang), kept=ranks_text(kept, lang), escalate=escalate, seconds=seconds,
                    was="were" if len(killed) > 1 else "was")]
    if plan.lost:
        lost = plan.lost
        kept = [r for r in range(world_size) if r not in lost]
        return [say(lang, "{lost} lost: run %ddp_restart (Lab.restart()) to bring back a full group ({lost} {start} "
                          "fresh; {kept} keep their variables)" if len(kept) > 1 else
                    "{lost} lost: run %ddp_restart (Lab.restart()) to bring back a full group ({lost} {start} "
                    "fresh; {kept} keeps its variables)" if kept else
                          "{lost} lost: run %ddp_restart (Lab.restart()) to bring back a full group ({lost} {start} "
                          "fresh)", lost=ranks_text(lost, lang), kept=ranks_text(kept, lang),
                    start="starts" if len(lost) == 1 else "start")]
    if not plan.reform:
        return []
    notes = [say(lang, "group re-formed in {ms:.0f} ms; variables kept", ms=seconds * 1000)]
    if stale:
        ddp = [n for n, kind in stale if kind == "DistributedDataParallel"]
        others = [n for n, kind in stale if kind != "DistributedDataParallel"]
        fixes = [f"{n} = DDP({n}.module)" for n in ddp] + [
            say(lang, "{name} (a process group): create it again", name=n) for n in others]
        notes.append(say(lang, "these were tied to the old group: {fixes}", fixes="; ".join(fixes)))
    return notes
