"""lab.debug: looking inside ranks from the notebook. Ranks stopped at breakpoints in a running cell,
stepped together or a few at a time (stepping.py, %ddp_step); a post-mortem pdb on a rank's last
exception, one command at a time (%ddp_debug); and the models' parameters compared across ranks
(%ddp_check). The engine side is Probe (probe.py) and Breakpoints (breakpoints.py)."""
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..rank import call
from ..shared.errors import BadRequest, NameMissing
from ..shared.words import say
from .stepping import Stepper, parse
from .telemetry import stack_of


class Debugger:
    def __init__(self, lab: Any) -> None:
        self.lab = lab  # the Lab that made this (lab.py imports this module, so the import contracts keep the type out)
        self.stepper = Stepper(lab)

    def stopped(self) -> dict[int, dict[str, Any]]:
        """{rank: where} of the ranks of the running cell stopped at a breakpoint (pdb waiting)."""
        return self.stepper.stopped()

    def step(self, line: str, ranks: Iterable[int] | None = None) -> dict[int, dict[str, Any] | None]:
        """A pdb command to ranks stopped at a breakpoint in a background cell (or from another thread):
        "[0,2] p grad.norm()" (ranks in brackets; none: every stopped rank), or ranks=[0, 2]. Returns
        {rank: reply} (stepping.Stepper.send); show them with stepper.show(replies)."""
        targets, command = parse(line)
        return self.stepper.send(command, targets if ranks is None else list(ranks))

    def stacks(self, ranks: Sequence[int] | None = None, native: bool = False, timeout: float = 30.0) -> dict[int, str]:
        """Every rank's stacks as `py-spy dump` prints them, each rank dumping itself (native: C and C++
        frames too, e.g. where gloo waits): {rank: text}. Works while a cell runs in the background (a
        rank stuck in a collective) and between cells; a foreground cell is Ctrl-C's to stop."""
        lab = self.lab
        lab.check_running()
        every = list(range(lab.world_size))
        if ranks is not None and (not ranks or any(isinstance(r, bool) or r not in every for r in ranks)):
            raise BadRequest(f"ranks must be among 0..{lab.world_size - 1}, got {list(ranks)}")
        ranks = every if ranks is None else sorted(set(ranks))
        if lab.runner.busy:  # (the cell's monitor merges the ranks' answers: only those it runs on)
            ranks = [r for r in ranks if r in lab.run_state.running]
        sent = {r: lab.telemetry.command(r, cmd="stack", native=bool(native)) for r in ranks}
        live = lab.live
        found: dict[int, str] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not lab.runner.busy:  # between cells no one else reads the ranks' batches
                for batch in lab.telemetry.batches():
                    for _t, kind, value in batch.events:
                        stack = stack_of(value) if kind == "stack" else None
                        if stack is not None:
                            live.stacks[batch.rank, stack[0]] = stack[1]
            found = {r: live.stacks[r, i] for r, i in sent.items() if (r, i) in live.stacks}
            if len(found) == len(sent):
                break
            time.sleep(0.05)
        return {r: found.get(r, say(lab.config.lang, "no answer within {seconds:g} s", seconds=timeout)) for r in ranks}

    def start(self, rank: int | None = None) -> tuple[int, str]:
        """Open pdb on `rank`'s last exception (default: the root cause of the last failed cell);
        returns (rank, the exception and the line it was raised on)."""
        lab = self.lab
        if rank is None:
            failed = lab.last_result.failure_order if lab.last_result is not None else []
            lost = lab.find_lost()
            rank = next((r for r in failed if r not in lost), None)
            if rank is None:
                raise BadRequest("no rank failed in the last cell: give one, e.g. %ddp_debug 0")
        (rank,) = lab.check_ranks([rank])
        try:
            return rank, lab.view_on([rank]).apply_sync(call, "debug_start")[0]
        except Exception as exc:  # noqa: BLE001 - e.g. no exception on that rank: said in one line
            raise BadRequest(f"rank {rank}: {getattr(exc, 'evalue', exc)}") from exc

    def command(self, rank: int, line: str) -> str:
        """One pdb command on `rank` (after start); what pdb printed."""
        return self.lab.view_on([rank]).apply_sync(call, "debug_command", line)[0]

    def end(self, rank: int) -> None:
        self.lab.view_on([rank]).apply_sync(call, "debug_end")

    def session(self, rank: int, commands: Iterable[str] | None = None, ask: Callable[[str], str] = input,
                show: Callable[..., object] = print) -> None:
        """pdb on `rank` (after start): the given commands, or a prompt (ask) until q, continue,
        Ctrl-C or the end of input; each command and what pdb printed go to show. The debugger is
        closed after."""
        prompt = f"(Pdb rank {rank}) "
        try:
            if commands:
                for command in commands:
                    show(prompt + command)
                    show(self.command(rank, command), end="")
                return
            while True:
                try:
                    command = ask(prompt)
                except (EOFError, KeyboardInterrupt):
                    break
                if command.strip() in ("q", "quit", "exit", "c", "cont", "continue"):
                    break
                show(self.command(rank, command), end="")
        finally:
            self.end(rank)

    def check(self, names: Sequence[str] | None = None) -> dict[str, list[int]]:
        """Compare the parameters of nn.Modules across ranks (all in the ranks' namespaces, or
        `names`): {name: ranks whose parameters differ from rank 0's (empty: identical)}."""
        lab = self.lab
        ranks = lab.check_ranks(None)
        per_rank = lab.answers(lab.view_on(ranks).apply_async(call, "checksums", names), ranks,
                               "comparing the parameters")
        missing = sorted({n for sums in per_rank for n, v in sums.items() if v is None})
        if missing:
            raise NameMissing(f"not an nn.Module on every rank: {', '.join(missing)}")
        found: dict[str, list[int]] = {}
        for name in sorted(set().union(*per_rank)):
            reference = per_rank[0].get(name)
            found[name] = [r for r, sums in zip(ranks, per_rank) if sums.get(name) != reference]
        return found
