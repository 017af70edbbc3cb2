"""The notebook's side of stepping ranks stopped at breakpoints, without engines: which ranks a command
is for, and the replies side by side (Chinese characters take two columns)."""
import time
from types import SimpleNamespace

from ddplab.kernel.stepping import Stepper, _width, parse, side_by_side
from ddplab.shared.state import RunState


def test_a_command_names_its_ranks_in_brackets_or_goes_to_every_stopped_rank():
    assert parse("[0,2] p grad.norm()") == ([0, 2], "p grad.norm()")
    assert parse("[ 3 ]  next") == ([3], "next")
    assert parse("p x[0]") == (None, "p x[0]")  # brackets later in the line are the command's
    assert parse("[all] c") == (None, "c") and parse("[] c") == (None, "c")
    assert parse("  where ") == (None, "where")


def test_replies_line_up_side_by_side_in_any_script():
    text = side_by_side({"rank 0": "张量 tensor([0.])\nsecond", "rank 1": "abc"}, width=60)
    rows = text.splitlines()
    bars = {_width(row.split("│")[0]) for row in rows if "│" in row}
    assert len(bars) == 1, rows  # every row's bar at the same screen column
    assert "second" in rows[-1] and rows[2].startswith("张量")
    many = side_by_side({f"rank {r}": str(r) for r in range(6)})
    assert "│" not in many and many.count("── rank") == 6  # more than four: one after another


class _Lab:
    """What Stepper reads of the Lab: the run state and the language."""

    def __init__(self, world_size: int) -> None:
        self.run_state = RunState(world_size)
        self.run_state.set_all("init")
        self.run_state.set_all("ready")
        self.run_state.begin_cell(range(world_size), 0.0)
        self.config = SimpleNamespace(lang="en")


WHERE = {"file": "<cell>", "line": 3, "function": "<module>", "code": [(3, "y = x + 1")]}


def test_the_prompt_waits_for_ranks_still_running_to_reach_the_breakpoint_before_asking():
    """On a loaded machine the ranks of one cell stop seconds apart: the question waits for the ones still
    running (CI typed `p x` when only rank 1 had stopped, and rank 0 never got it), but not forever."""
    lab = _Lab(3)
    lab.run_state.set_stopped(1, WHERE)
    lab.run_state.set_where(2, {"op": "all_reduce", "since": 1.0})  # waits in a collective: it will not stop
    polls = []

    def poll() -> None:  # rank 0 reaches the breakpoint at the fifth poll
        polls.append(1)
        if len(polls) == 5:
            lab.run_state.set_stopped(0, WHERE)

    stepper = Stepper(lab)
    asked: list[str] = []
    stepper.ask = lambda question: asked.append(stepper.status()) or ""
    stepper.say = lambda text: None
    stepper.prompt(SimpleNamespace(poll=poll))
    assert len(polls) == 5 and "rank 0: stopped at a breakpoint" in asked[0]
    lab.run_state.set_stopped(0, None)  # a rank that never stops: asked after GATHER_WAIT at most
    begun = time.monotonic()
    stepper.gather(SimpleNamespace(poll=lambda: None), wait=0.3)
    assert 0.3 <= time.monotonic() - begun < 2.0
