"""breakpoint() in %%ddp cells on the session's pool: every rank stops, commands go to all stopped ranks
or to a set and their replies come back rank by rank; ranks step and continue; a rank held at a
breakpoint is never cut, killed or timed out while the others wait for it in an all_reduce (though a
rank that is merely slow is, at the pool's timeout), nor by the cell's own timeout (%%ddp --timeout); a
foreground cell asks for its commands; q and Ctrl-C leave the debugger and end the cell; the pool works
after each."""
import dataclasses
import time

import pytest

from ddplab.shared.errors import CollectiveTimeout, RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]

CELL = "x = torch.ones(3) * rank\nbreakpoint()\ny = x + 1\ndist.all_reduce(y)\nz = y.sum().item()\n"


def stopped(lab, ranks, within=20.0):
    """Wait until exactly `ranks` are stopped at a breakpoint; their places."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = lab.debug.stopped()
        if sorted(found) == sorted(ranks):
            return found
        time.sleep(0.05)
    raise AssertionError(f"stopped: {sorted(lab.debug.stopped())}, expected {sorted(ranks)}")


def usable(lab):
    assert not lab.run("dist.all_reduce(t := torch.ones(1))\nok = t.item()").failed
    assert lab.gather("ok") == [4.0] * 4


def test_every_rank_stops_and_takes_commands_to_all_and_to_a_set(pool):
    bg = pool.run(CELL, background=True)
    places = stopped(pool, [0, 1, 2, 3])
    assert {w["line"] for w in places.values()} == {3} and all(w["cell"] for w in places.values())
    assert ["->", 3, "y = x + 1"] in [["->" if n == 3 else "", n, text] for n, text in places[0]["code"]]

    replies = pool.debug.step("p x")  # to every stopped rank: each answers with its own value
    assert {r: reply["out"].strip() for r, reply in replies.items()} == {r: f"tensor([{r}., {r}., {r}.])" for r in range(4)}
    assert all(reply["kind"] == "paused" for reply in replies.values())
    shown = pool.debug.stepper.show(replies)
    assert "rank 0" in shown and "rank 3" in shown and shown.index("tensor([0.") < shown.index("tensor([3.")

    replies = pool.debug.step("[0,2] next")  # a set: ranks 0 and 2 move to line 4, 1 and 3 stay
    assert sorted(replies) == [0, 2] and all("-> dist.all_reduce(y)" in r["out"] for r in replies.values())
    assert {r: w["line"] for r, w in pool.debug.stopped().items()} == {0: 4, 1: 3, 2: 4, 3: 3}
    assert pool.debug.step("[0,2] p y")[2]["out"].strip() == "tensor([3., 3., 3.])"

    replies = pool.debug.step("[0,2] next")  # into the all-reduce: they wait there for ranks 1 and 3
    assert all(reply["kind"] == "resumed" for reply in replies.values()), replies
    time.sleep(1.5)
    status = pool.debug.stepper.status()
    assert "rank 0: waiting in all_reduce" in status and "for 1, 3, stopped at a breakpoint" in status, status
    assert sorted(pool.debug.stopped()) == [1, 3]

    # a per-rank console in rank 1's frame (as pdb's interact: a copy of its names; the frame keeps its own)
    assert "*interactive*" in pool.debug.step("[1] interact")[1]["out"]
    pool.debug.step("[1] x = x * 10")
    assert pool.debug.step("[1] print(x.sum().item())")[1]["out"].strip() == "30.0"
    assert "exiting" in pool.debug.step("[1] exit()")[1]["out"]
    assert pool.debug.step("[1] p rank")[1]["out"].strip() == "1"  # pdb again
    pool.debug.step("[1,3] continue")  # they reach the all-reduce; 0 and 2 stop at the next line
    places = stopped(pool, [0, 2])
    assert {w["line"] for w in places.values()} == {5}
    pool.debug.step("c")
    bg.result(30)
    assert pool.gather("z") == [30.0] * 4  # (1 + 2 + 3 + 4) * 3
    with pytest.raises(Exception, match="not stopped at a breakpoint|no rank is stopped"):
        pool.debug.step("p x")
    usable(pool)


def test_a_rank_held_at_a_breakpoint_is_never_timed_out_though_a_slow_one_is(pool):
    """With a 1.5 s collective timeout: rank 1 held at a breakpoint for 4 s (more than twice that) while
    the others wait for it in an all_reduce: nothing is cut, killed or timed out; continued, the cell
    ends well. Rank 1 merely slow (a sleep): the others are cut at the timeout."""
    saved = pool.config
    pool.config = dataclasses.replace(saved, timeout=1.5)
    try:
        bg = pool.run("if rank == 1:\n    breakpoint()\nt = torch.ones(1)\ndist.all_reduce(t)\nsum_ = t.item()",
                      background=True)
        stopped(pool, [1])
        time.sleep(4.0)
        assert not bg.done() and list(pool.run_state.states) == ["running"] * 4, list(pool.run_state.states)
        status = pool.debug.stepper.status()
        assert status.count("waiting in all_reduce") == 3 and "for 1, stopped at a breakpoint" in status, status
        pool.debug.step("c")
        result = bg.result(30)
        assert not result.failed and pool.gather("sum_") == [4.0] * 4

        # a send waits for a receiver held at a breakpoint as long as it is held, too
        bg = pool.run("t = torch.full((1,), float(rank))\nif rank == 1:\n    breakpoint()\n"
                      "if rank == 0:\n    dist.send(t, 1)\nelif rank == 1:\n    dist.recv(t, 0)\ngot = t.item()",
                      background=True)
        stopped(pool, [1])
        time.sleep(4.0)
        assert not bg.done()
        pool.debug.step("c")
        assert not bg.result(30).failed and pool.gather("got")[:2] == [0.0, 0.0]

        with pytest.raises(CollectiveTimeout, match="longer than the pool's collective timeout"):
            pool.run("import time\nif rank == 1:\n    time.sleep(6)\nt = torch.ones(1)\ndist.all_reduce(t)", timeout=60)
    finally:
        pool.config = saved
    usable(pool)


HELD = "if rank == 0:\n    breakpoint()\nt = torch.ones(1)\ndist.all_reduce(t)\ntotal = t.item()\n"


@pytest.mark.slow
def test_time_stopped_at_a_breakpoint_does_not_count_against_the_cells_timeout(pool):
    """Issue 44: a cell run with --timeout 6 whose rank 0 is held at a breakpoint for 10 s while the others
    wait for it in an all_reduce, then continued, ends well (it ended with CellTimeout, every rank
    interrupted): in the foreground (two commands asked, 5 s each) and in the background (%ddp_step)."""
    stepper = pool.debug.stepper
    asked, said = [], []

    def ask(prompt):  # a person: 5 s to type each command
        asked.append(time.monotonic())
        time.sleep(5.0)
        return "p rank" if len(asked) == 1 else "c"

    saved = stepper.ask, stepper.say
    stepper.ask, stepper.say = ask, said.append
    tic = time.monotonic()
    try:
        result = pool.run(HELD, timeout=6)  # (%%ddp --timeout 6)
    finally:
        stepper.ask, stepper.say = saved
    assert not result.failed and len(asked) == 2 and pool.gather("total") == [4.0] * 4
    assert time.monotonic() - tic >= 10 and "rank 0: stopped at a breakpoint" in "\n".join(said)

    bg = pool.run(HELD, timeout=6, background=True)
    stopped(pool, [0])
    time.sleep(10.0)
    assert not bg.done() and list(pool.run_state.states) == ["running"] * 4, list(pool.run_state.states)
    pool.debug.step("c")
    assert not bg.result(30).failed and pool.gather("total") == [4.0] * 4
    usable(pool)


def test_a_foreground_cell_asks_for_its_commands(pool):
    stepper = pool.debug.stepper
    asked, said = ["p rank * 10", "[0] next", "", "c"], []
    saved = stepper.ask, stepper.say
    stepper.ask, stepper.say = (lambda prompt: asked.pop(0)), said.append
    try:
        result = pool.run("v = rank\nbreakpoint()\nw = v + 1\n")
    finally:
        stepper.ask, stepper.say = saved
    assert not result.failed and pool.gather("w") == [1, 2, 3, 4] and asked == []
    text = "\n".join(said)
    assert "rank 3: stopped at a breakpoint, cell line 3" in text
    assert all(f"{10 * r}" in text for r in range(4)) and "->    3 w = v + 1" in text
    usable(pool)


def test_q_and_ctrl_c_leave_the_debugger_and_end_the_cell(pool, ctrl_c):
    bg = pool.run("breakpoint()\nleft = False", background=True)
    stopped(pool, [0, 1, 2, 3])
    replies = pool.debug.step("q")
    assert all(reply["kind"] == "resumed" and reply["quit"] for reply in replies.values()), replies
    with pytest.raises(RankFailed, match="BdbQuit"):
        bg.result(30)
    usable(pool)

    # Ctrl-C at the prompt ends the cell: nobody is asked for a command again while the ranks leave
    # their debuggers (they still show as stopped until their next batch comes)
    stepper = pool.debug.stepper
    saved, asked = stepper.ask, []

    def wait_for_ctrl_c(prompt):
        asked.append(prompt)
        time.sleep(30)  # Ctrl-C comes first
        return "c"

    stepper.ask = wait_for_ctrl_c
    ctrl_c(2.0).start()
    tic = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run("import time\nbreakpoint()\ntime.sleep(0.1)")
    finally:
        stepper.ask = saved
    assert len(asked) == 1 and time.monotonic() - tic < 20, (asked, time.monotonic() - tic)
    usable(pool)


def test_each_rank_dumps_its_own_stacks_with_py_spy(pool):
    """%ddp_stacks: while ranks wait in a barrier for a slow one (a background cell), each rank's py-spy
    dump, native frames included: the waiting ones in gloo's wait, the slow one on its line; between
    cells too."""
    bg = pool.run("import time\nif rank == 3:\n    time.sleep(6)\ndist.barrier()", background=True)
    time.sleep(1.5)
    found = pool.debug.stacks([0, 3], native=True)
    assert "barrier (torch/distributed/distributed_c10d.py" in found[0] and "c10d::" in found[0], found[0][:2000]
    assert "MainThread" in found[3] and "barrier" not in found[3], found[3][:2000]
    assert not bg.result(30).failed
    idle = pool.debug.stacks([1])  # between cells: the rank waits for its next request
    assert "Thread" in idle[1] and "py-spy failed" not in idle[1], idle[1][:2000]


def test_interrupting_a_background_cell_stuck_in_gloo_escalates_as_ctrl_c_does(ip, pool):
    """Ranks stuck inside gloo (a barrier rank 3 never joins, its recv no one sends to): SIGINT cannot
    reach them, so %ddp_interrupt goes on as Ctrl-C does (links cut) and the cell ends in seconds, not
    at the collective timeout; the pool works after."""
    bg = pool.run("if rank == 3:\n    t = torch.zeros(1)\n    dist.recv(t, src=0)\nelse:\n    dist.barrier()",
                  background=True)
    time.sleep(2.0)
    tic = time.monotonic()
    ip.run_line_magic("ddp_interrupt", "")
    with pytest.raises(RankFailed):
        bg.result(25)
    assert time.monotonic() - tic < 12
    usable(pool)


def test_a_pool_with_a_2_s_timeout_waits_for_a_held_rank_in_send_and_all_reduce():
    """Its own pool, formed with --timeout 2: gloo's own timeouts (collectives, send and recv) must not
    fire either while rank 1 is held at a breakpoint for 5 s, more than twice that."""
    from ddplab import Lab

    with Lab(2, timeout=2) as lab:
        bg = lab.run("t = torch.ones(1)\nif rank == 1:\n    breakpoint()\nif rank == 0:\n    dist.send(t, 1)\n"
                     "else:\n    dist.recv(t, 0)\ndist.all_reduce(t)\ntotal = t.item()", background=True)
        stopped(lab, [1])
        time.sleep(5.0)
        assert not bg.done() and "rank 0: waiting in send" in lab.debug.stepper.status()
        lab.debug.step("c")
        assert not bg.result(30).failed and lab.gather("total") == [2.0, 2.0]
