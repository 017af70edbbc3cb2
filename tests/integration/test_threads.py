"""The Lab's threads: a cell in the background (watched by its own thread), the watch thread that
notices dead engines between cells, and the notebook's own thread asking things meanwhile (a slider
moved, %ddp_status, a cell refused while the other runs). Shared state changes under lab.lock."""
import re
import threading
import time

import pytest

from ddplab.shared.errors import BadRequest, RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]

LOOP = ("import time\nseen = set()\nfor step in range(40):\n    seen.add(ddplab.knob('period', 0))\n"
        "    t = torch.ones(1)\n    dist.all_reduce(t)\n    ddplab.log(loss=1.0 / (step + 1), samples=1)\n"
        "    time.sleep(0.02)\n"
        # the cell ends only once the notebook's threads have stopped asking (a knob, bounded): a thread
        # cannot see it running and then find it ended before its own refused run
        "deadline = time.time() + 30\nwhile not ddplab.knob('finish', 0) and time.time() < deadline:\n"
        "    time.sleep(0.01)\nprint('steps', step + 1, 'all', t.item())")


def test_the_notebook_and_a_background_cell_share_the_lab(pool):
    errors, refused, asked = [], [], [0]
    stop = threading.Event()
    background = pool.run(LOOP, background=True)

    def notebook(period):  # what the notebook does while the cell runs
        while not stop.is_set():
            try:
                pool.knobs.set("period", period)
                assert len(pool.status()) == 4 and pool.find_lost() == {}
                pool.report.protections()
                asked[0] += 1
                for refusal in (lambda: pool.run("x = 1"), lambda: pool.gather("rank"), lambda: pool.wait(0.01)):
                    try:
                        refusal()
                    except (BadRequest, TimeoutError) as exc:
                        refused.append(type(exc).__name__)
            except Exception as exc:  # noqa: BLE001 - collected: the test fails with it below
                errors.append(exc)
            time.sleep(0.005)

    threads = [threading.Thread(target=notebook, args=(p,)) for p in (3, 4)]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while (asked[0] <= 10 or len(set(refused)) < 2) and not background.done() and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    assert not background.done()  # still running (waiting for 'finish'): every refusal above was real
    pool.knobs.set("finish", 1)
    result = background.result(60)
    assert errors == [] and asked[0] > 10, errors
    assert set(refused) == {"BadRequest", "TimeoutError"}  # the other cell and gather refused; wait not done yet
    assert result.stdout == ["steps 40 all 4.0\n"] * 4
    assert all(seen & {3, 4} for seen in pool.gather("seen"))  # the knobs reached every rank while it ran
    assert not pool.runner.busy and pool.background is None and pool.last_result is result
    assert list(pool.run_state.states) == ["done"] * 4 and [pool.run_state.ranks[r].points for r in range(4)] == [40] * 4
    assert pool.run("print(rank)").stdout == [f"{r}\n" for r in range(4)]  # and the next cell runs


def test_a_knob_has_reached_every_rank_when_set_returns(pool):
    """No cell running: the ranks' telemetry threads take it within a tick and say so; set() returns
    then, so the very next cell reads it (there is no sleep here)."""
    for value in (7, "fast", None):
        assert pool.knobs.set("speed", value) == []
        pool.run("speed = ddplab.knob('speed', 'unset')")
        seen = pool.gather("(lambda R: (dict(R.knobs), R.sender._command_seq, R.sender.generation, id(R)))"
                           "(__import__('ddplab.rank').rank.RANK)")
        t = pool.telemetry
        assert pool.gather("speed") == [value] * 4, (seen, t._acks, t._command_seq, t.generation)


LONG = "import time\nfor step in range(600):\n    t = torch.ones(1)\n    dist.all_reduce(t)\n    time.sleep(0.05)"


def test_restart_while_a_cell_runs_in_the_background_ends_it_first(pool):
    """%ddp_restart is asked for while a background cell trains: that cell is interrupted (its result
    says so), then the pool restarts; no transition goes wrong, and the next cell runs."""
    background = pool.run(LONG, background=True)
    time.sleep(0.5)  # (it is training: the restart arrives in the middle of its steps)
    said = pool.restart()
    assert "restarted" in said and background.done()
    with pytest.raises((KeyboardInterrupt, RankFailed)):
        background.result(1)
    assert pool.background is None and list(pool.run_state.states) == ["ready"] * 4
    assert pool.run("print(rank)").stdout == [f"{r}\n" for r in range(4)]


def test_stop_while_a_cell_runs_in_the_background_leaves_every_rank_stopped():
    from ddplab import Lab

    lab = Lab(2).start()
    background = lab.run(LONG, background=True)
    time.sleep(0.5)
    lab.stop()
    assert background.done()
    deadline = time.time() + 2  # nothing the background cell's thread does later changes what stop set
    while time.time() < deadline:
        assert list(lab.run_state.states) == ["stopped"] * 2
        time.sleep(0.1)


def test_where_only_the_cells_thread_draws_a_background_cell_is_drawn_by_ddp_wait(pool, ip, capsys, monkeypatch):
    """Colab draws nothing the kernel sends from a thread (dashboard/page.py, main_thread_only): the
    background cell's own thread draws no frame; %ddp_wait draws them, live, from the notebook's thread,
    and the cell's last frame."""
    import IPython.display

    from ddplab.dashboard.page import PageDashboard

    sent = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=None, **kw: sent.append(
        ("display", threading.current_thread().name, getattr(obj, "data", ""))))
    monkeypatch.setattr(IPython.display, "update_display", lambda obj, display_id=None: sent.append(
        ("update", threading.current_thread().name, obj.data)))
    saved, pool.view = pool.view, PageDashboard(4, main_thread_only=True)
    try:
        ip.run_cell_magic("ddp", "--background", "import time\nfor i in range(50):\n    time.sleep(0.05)\n"
                                                 "    ddplab.log(loss=1.0 / (i + 1), samples=1)")
        assert "drawn while %ddp_wait waits for it" in capsys.readouterr().out
        time.sleep(0.5)  # (the background thread's frames, if it drew any)
        assert [kind for kind, *_ in sent] == ["display"]  # the magic's own display of the page, nothing since
        ip.run_line_magic("ddp_wait", "")
        assert {thread for _, thread, _ in sent} == {threading.main_thread().name}
        pages = [page for kind, _, page in sent if kind == "update"]
        assert len(pages) >= 2 and 'data-state="training"' in pages[0], len(pages)  # live while it waited
        assert len(re.findall(r'class="rank-token" data-rank="\d" data-state="done"', pages[-1])) == 4  # its last frame
    finally:
        pool.view = saved
