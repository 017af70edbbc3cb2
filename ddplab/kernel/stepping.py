"""Stepping ranks stopped at breakpoints, notebook side: which ranks are stopped where, commands to all
of them or to a set ("[0,2] p grad.norm()"), and the replies side by side, rank by rank.

The ranks' pdb (breakpoints.py) takes its commands on the signed command channel of the telemetry and
answers with "paused" / "resumed" events (merged into Live.stops). A foreground cell asks for commands
with the front end's input box (the monitor calls prompt() while a rank is stopped); a background cell
is stepped with `%ddp_step` (Lab.debug.step), the notebook going on meanwhile.
"""
import re
import shutil
import time
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..shared.errors import BadRequest
from ..shared.words import say

Reply = dict[str, Any]  # a "paused" or "resumed" event of a rank's debugger (telemetry._stop): kind, id, out, where

TARGET = re.compile(r"^\s*\[([\d,\s]*|all)\]\s*(.*)$")
REPLY_WAIT = 30.0  # seconds a command may take before the rank is shown as still carrying it out
MOVED_WAIT = 1.0  # seconds to wait for a rank that ran on (next, step) to stop again, before showing it running
GATHER_WAIT = 2.0  # seconds the prompt waits for running ranks to reach the breakpoint the first one stopped at
LEAVE = {"c", "cont", "continue", "q", "quit", "exit"}


class Polls(Protocol):
    """The cell's monitor (monitor.Monitor), as prompt() uses it: poll() merges what ranks sent."""

    def poll(self) -> None: ...


def parse(line: str) -> tuple[list[int] | None, str]:
    """"[0,2] p x" -> ([0, 2], "p x"); "p x" -> (None, "p x") (every stopped rank); "[all] c" -> (None, "c")."""
    found = TARGET.match(line)
    if not found:
        return None, line.strip()
    ranks, command = found.groups()
    if ranks.strip() in ("", "all"):
        return None, command.strip()
    return sorted({int(r) for r in ranks.split(",") if r.strip()}), command.strip()


def side_by_side(blocks: Mapping[str, str], width: int | None = None) -> str:
    """{title: text} as columns (up to 4), else one block after another."""
    width = width or min(shutil.get_terminal_size((120, 20)).columns, 160)
    if not blocks:
        return ""
    if len(blocks) > 4 or len(blocks) == 1:
        return "\n".join(f"── {title}\n{text.rstrip()}" for title, text in blocks.items())
    gap = " │ "
    col = max(16, (width - len(gap) * (len(blocks) - 1)) // len(blocks))
    columns: list[list[str]] = []
    for title, text in blocks.items():
        lines = [title, "─" * min(col, max(len(title), 8))]
        for line in text.rstrip().splitlines() or [""]:
            lines += _wrap(line, col)
        columns.append(lines)
    height = max(map(len, columns))
    rows = []
    for i in range(height):
        cells = [c[i] if i < len(c) else "" for c in columns]
        rows.append(gap.join(cell + " " * (col - _width(cell)) for cell in cells).rstrip())
    return "\n".join(rows)


def _width(text: str) -> int:
    """Columns `text` takes on screen: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _wrap(line: str, col: int) -> list[str]:
    """`line` cut into pieces of at most `col` screen columns."""
    pieces: list[str] = []
    piece = ""
    for ch in line:
        if _width(piece + ch) > col:
            pieces.append(piece)
            piece = ""
        piece += ch
    return [*pieces, piece]


class Stepper:
    """The stopped ranks of the cell running on `lab`, and commands to them."""

    def __init__(self, lab: Any) -> None:  # lab: the Lab (kernel.lab, a layer above)
        self.lab = lab
        self.told = False  # said once per cell that this front end has no input box
        self.ask: Callable[[str], str] = input  # the prompt's question (a test may put its own)
        self.say: Callable[[str], object] = print  # and its answers

    def stopped(self) -> dict[int, dict[str, Any]]:
        """{rank: where it stopped (file, line, function, code)} of the ranks pdb waits on now."""
        rs = self.lab.run_state
        return {r: rs.ranks[r].stopped for r in rs.running if rs.ranks[r].stopped is not None}

    def status(self) -> str:
        """Where every rank of the cell is: stopped (and the code around the line), waiting in a collective
        (for whom), running, or done. One line a rank, then the code of each stopped place."""
        lab, lang = self.lab, self.lab.config.lang
        rs, stopped = lab.run_state, self.stopped()
        lines: list[str] = []
        places: dict[tuple[Any, Any, Any], tuple[dict[str, Any], list[int]]] = {}
        for r in rs.running:
            s = rs.ranks[r]
            if s.stopped is not None:
                lines.append(say(lang, "rank {rank}: stopped at a breakpoint, {place}", rank=r, place=place(s.stopped, lang)))
                places.setdefault(_key(s.stopped), (s.stopped, []))[1].append(r)
            elif rs.states[r] in ("done", "failed", "lost"):
                lines.append(say(lang, "rank {rank}: {state}", rank=r, state=say(lang, "dashboard|" + rs.states[r])))
            elif s.where and s.where.get("op"):
                text = say(lang, "rank {rank}: waiting in {op} ({seconds:.0f} s)", rank=r, op=s.where["op"],
                           seconds=s.where.get("since") or 0)
                if stopped:
                    text += say(lang, ", for {ranks}, stopped at a breakpoint",
                                ranks=", ".join(map(str, sorted(stopped))))
                lines.append(text)
            else:
                line = (s.where or {}).get("line")
                lines.append(say(lang, "rank {rank}: running (line {line})", rank=r, line=line) if line
                             else say(lang, "rank {rank}: running", rank=r))
        for where, ranks in places.values():
            lines.append(f"── rank {', '.join(map(str, ranks))} ──")
            lines += [f"{'->' if n == where['line'] else '  '} {n:4d} {text}" for n, text in where["code"]]
        return "\n".join(lines)

    def send(self, line: str, ranks: list[int] | None = None,
             pump: Callable[[], object] | None = None) -> dict[int, Reply | None]:
        """Send the pdb command `line` to `ranks` (None: every stopped rank) and wait for their replies:
        {rank: reply} (kind "paused": done, still stopped; "resumed": the program runs on; None: no reply
        within REPLY_WAIT s). pump: merges telemetry while waiting (the monitor's poll in a foreground
        cell; a background cell's monitor merges by itself)."""
        lab = self.lab
        stopped = self.stopped()
        if not stopped:
            raise BadRequest(say(lab.config.lang, "no rank is stopped at a breakpoint"))
        targets = sorted(stopped) if ranks is None else ranks
        others = [r for r in targets if r not in stopped]
        if others:
            raise BadRequest(say(lab.config.lang, "ranks {ranks} are not stopped at a breakpoint (stopped: {stopped})",
                                 ranks=", ".join(map(str, others)), stopped=", ".join(map(str, sorted(stopped)))))
        if not line:
            return {}
        live = lab.live
        sent = {r: (lab.telemetry.command(r, cmd="debug", line=line), len(live.stops.get(r, ()))) for r in targets}
        replies: dict[int, Reply] = {}
        moved: dict[int, float] = {}
        deadline = time.monotonic() + REPLY_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if pump is not None:
                pump()
            for r, (command_id, seen) in sent.items():
                for stop in live.stops.get(r, ())[seen:]:
                    if r not in replies and stop["id"] == command_id:
                        replies[r] = stop
                        moved[r] = time.monotonic()
                    elif r in replies and replies[r]["kind"] == "resumed" and stop["kind"] == "paused":
                        replies[r] = {**stop, "out": replies[r]["out"] + stop["out"]}  # where it stopped next
            waiting = [r for r in targets if r not in replies or (
                replies[r]["kind"] == "resumed" and not replies[r].get("quit")
                and time.monotonic() - moved[r] < MOVED_WAIT and not self._done(r))]
            if not waiting:
                break
        return {r: replies.get(r) for r in targets}

    def _done(self, rank: int) -> bool:
        return self.lab.run_state.states[rank] in ("done", "failed", "lost")

    def show(self, replies: Mapping[int, Reply | None]) -> str:
        """The replies side by side, rank by rank."""
        lang = self.lab.config.lang
        blocks = {}
        for r, reply in replies.items():
            if reply is None:
                text = say(lang, "(no reply yet: the rank is still carrying the command out)")
            elif reply["kind"] == "resumed" and not reply.get("line"):
                text = reply["out"] + say(lang, "(left the debugger: the cell ends on this rank)" if reply.get("quit")
                                          else "(running)")
            else:
                text = reply["out"]
            blocks[f"rank {r}"] = text
        return side_by_side(blocks)

    def running(self) -> list[int]:
        """Ranks of the cell that run on: not stopped, not waiting in a collective, not done."""
        rs = self.lab.run_state
        return [r for r in rs.running if rs.ranks[r].stopped is None and not self._done(r)
                and not (rs.ranks[r].where or {}).get("op")]

    def gather(self, monitor: Polls, wait: float = GATHER_WAIT) -> None:
        """Before asking: let ranks still running reach their breakpoint (the same cell, started together,
        on a loaded machine seconds apart), so that one command reaches all of them; at most `wait` s,
        as a rank may never stop (`if rank == 1: breakpoint()`)."""
        deadline = time.monotonic() + wait
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.02)
            monitor.poll()

    def prompt(self, monitor: Polls) -> None:
        """One command from the user (a foreground cell, while ranks are stopped): the ranks' places, the
        question, the replies. Without an input box (a notebook run headless), the ranks continue."""
        lang, ask, show = self.lab.config.lang, self.ask, self.say
        self.gather(monitor)
        show(self.status())
        try:
            line = ask(say(lang, "(ddp pdb) [ranks] command: ") + " ")
        except EOFError:
            line = "c"
        except Exception as exc:  # noqa: BLE001 - the front end has no input box (StdinNotImplementedError)
            if type(exc).__name__ != "StdinNotImplementedError":
                raise
            if not self.told:
                show(say(lang, "this front end has no input box: the stopped ranks continue (run the cell with "
                               "%%ddp --bg and step it with %ddp_step)"))
                self.told = True
            line = "c"
        ranks, command = parse(line)
        if not command:
            return
        try:
            show(self.show(self.send(command, ranks, pump=monitor.poll)))
        except BadRequest as exc:
            show(str(exc))


def place(where: Mapping[str, Any], lang: str = "en") -> str:
    """"cell line 5, in f" / "line 80 of ring.py, in send" of a stopped frame."""
    if where.get("cell"):
        return say(lang, "cell line {line}", line=where["line"]) + (
            "" if where.get("function") == "<module>" else say(lang, ", in {function}", function=where["function"]))
    return say(lang, "line {line} of {file}, in {function}", line=where["line"], file=where.get("file", "?"),
               function=where.get("function", "?"))


def _key(where: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (where.get("file"), where.get("line"), where.get("function"))
