"""The notebook's side of stepping ranks stopped at breakpoints, without engines: which ranks a command
is for, and the replies side by side (Chinese characters take two columns)."""
from ddplab.kernel.stepping import _width, parse, side_by_side


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
