"""The dashboard's pure pieces: diagram, table, header, plots and the text view."""
import re

import pytest

from ddplab.dashboard import html
from ddplab.dashboard.plots import LivePlot, nice_ceiling, tick_label
from ddplab.dashboard.text import TextView
from ddplab.shared import state as st
from ddplab.shared.metrics import LiveMetrics, Series


def run_state(states):
    rs = st.RunState(len(states))
    rs.states.states = list(states)
    return rs


def tokens(svg):
    return dict((int(r), s) for r, s in re.findall(r'class="rank-token" data-rank="(\d+)" data-state="(\w+)"', svg))


def test_diagram_draws_every_rank_at_its_node():
    rs = run_state([st.TRAINING, st.DONE, st.FAILED, st.RUNNING])
    svg, pos = html.diagram_svg(rs)
    assert tokens(svg) == {0: "training", 1: "done", 2: "failed", 3: "running"}
    for node in (st.INIT, st.TRAINING, st.DONE, st.READY, st.FAILED, st.LOST):
        assert f'data-node="{node}"' in svg
    assert re.search(r'data-node="training" data-count="2"', svg)  # running is drawn at training
    x, y = html.NODES[st.FAILED]
    assert x <= pos[2][0] <= x + html.NODE_W and y <= pos[2][1] <= y + html.NODE_H
    assert 'data-failed="1"' in svg and "#d62728" in svg  # the failed rank is marked red


def test_diagram_labels_in_chinese_and_tokens_slide_when_they_move():
    rs = run_state([st.READY, st.READY])
    svg, pos = html.diagram_svg(rs, "zh")
    for word in ("初始化", "训练中", "完成", "失败", "丢失", "就绪"):
        assert word in svg
    assert "animateTransform" not in svg
    rs.states.set(0, st.RUNNING)
    svg2, _ = html.diagram_svg(rs, "zh", previous=pos)
    moved = re.findall(r'data-rank="(\d)" data-state="\w+"><animateTransform', svg2)
    assert moved == ["0", "1"]  # rank 0 slides to training; rank 1 takes the first place at ready
    svg3, _ = html.diagram_svg(rs, "zh", previous=html.diagram_svg(rs)[1])
    assert "animateTransform" not in svg3  # nothing moved: nothing slides


def test_many_ranks_show_a_count_instead_of_overflowing():
    svg, pos = html.diagram_svg(run_state([st.TRAINING] * 40))
    assert len(pos) == html.MAX_TOKENS and "+28" in svg


def test_table_one_row_per_rank_failed_row_red():
    rs = run_state([st.TRAINING, st.FAILED])
    rs.points_arrived(0, 41, 0.25, 2300.0, heard=10.0, count=5)
    rs.ranks[0].phase = "eval"
    rs.ranks[1].error = "ValueError: boom"
    table = html.rank_table(rs, now=12.5)
    assert table.count('<tr class="ddplab-rank') == 2
    assert re.search(r'data-rank="0" data-state="training".*?training · eval.*?41.*?0\.2500.*?2,300.*?2\.5 s ago',
                     table)
    assert re.search(r'class="ddplab-rank ddplab-failed" data-rank="1" data-state="failed" title="ValueError: boom"',
                     table)
    assert "进程 (rank)" in html.rank_table(rs, 12.5, "zh")


def test_header_names_the_cell_and_total_throughput():
    rs = run_state([st.READY, st.READY])
    lm = LiveMetrics(2)
    lm.current = [1000.0, 1500.0]
    rs.begin_cell([0, 1], now=100.0)
    assert "cell 1 · running 2.0 s" in html.header("", rs, lm, 102.0)
    assert "total 2,500 samples/s" in html.header("", rs, lm, 102.0)
    rs.set_all(st.STOPPED)
    assert "pool stopped" in html.header("", rs, lm, 103.0)


def test_nice_ceiling():
    assert [nice_ceiling(v) for v in (0.3, 1, 1.2, 3, 7, 64, 101, 0)] == [0.5, 1, 2, 5, 10, 100, 200, 1.0]


def overlay_points(svg):
    return [tuple(map(float, p.split(","))) for p in re.search(r'<polyline points="([^"]+)"', svg).group(1).split()]


def tick_labels(svg):
    return re.findall(r'text-anchor="(middle|end)">([^<]*)</text>', svg)


def test_live_plot_redraws_axes_only_when_data_leaves_them():
    plot = LivePlot(min_x=100)
    s = Series(cap=100)
    for i in range(60):  # x limit 100, y limit 5
        s.add(i, 2.0 - i * 0.01)
    svg = plot.render({0: (s, "#1f77b4", 1.4)})
    assert svg.startswith("<svg") and f'width="{plot.width}"' in svg and plot.axes_drawn == 1
    labels = tick_labels(svg)
    assert [v for a, v in labels if a == "middle"] == ["0", "20", "40", "60", "80", "100"]  # x: steps
    assert [v for a, v in labels if a == "end"] == ["0", "1", "2", "3", "4", "5"]  # y: loss, from zero
    pts = overlay_points(svg)
    x, y, w, h = plot.box
    assert len(pts) == 60 and all(x - 0.1 <= px <= x + w and y <= py <= y + h for px, py in pts)
    assert pts[0][0] == pytest.approx(x, abs=0.1)  # step 0 sits on the left edge
    assert pts[0][1] == pytest.approx(y + h - 2.0 / 5 * h, abs=0.1)  # loss 2.0 of 5, up from the bottom
    assert pts[1][1] > pts[0][1]  # a falling loss goes down the picture
    assert plot.render({0: (s, "#1f77b4", 1.4)}) is None  # nothing new: no frame
    for i in range(60, 80):
        s.add(i, 1.8)
    svg = plot.render({0: (s, "#1f77b4", 1.4)})
    assert len(overlay_points(svg)) == 80 and plot.axes_drawn == 1
    for i in range(80, 101):  # past the cap: the series thins out; the axes stay
        s.add(i * 0.5, 1.5)
    svg = plot.render({0: (s, "#1f77b4", 1.4)})
    assert len(overlay_points(svg)) == len(s) < 100 and plot.axes_drawn == 1
    s.add(499, 1.0)  # far outside the x limit (twice: the thinned series keeps every 2nd point)
    s.add(500, 1.0)
    svg = plot.render({0: (s, "#1f77b4", 1.4)})
    assert plot.axes_drawn == 2 and plot.limits[1] == 1000 and ("middle", "1000") in tick_labels(svg)
    assert overlay_points(svg)[-1][0] == pytest.approx(x + w * 500 / plot.limits[1], abs=0.1)


def test_tick_labels_use_the_decimals_their_spacing_needs():
    assert [tick_label(v, 0.5) for v in (0, 0.5, 1.5)] == ["0.0", "0.5", "1.5"]
    assert [tick_label(v, 0.25) for v in (0.25, 2)] == ["0.25", "2.00"]
    assert [tick_label(v, 5000, thousands=True) for v in (0, 5000, 20000)] == ["0", "5k", "20k"]
    assert tick_label(25000, 2500, thousands=True) == "25.0k" and tick_label(200, 50) == "200"
    plot = LivePlot(min_x=10, headroom=1.6)  # samples/s: the y labels of thousands fit the margin
    s = Series(cap=100)
    for i in range(20):
        s.add(i * 0.5, 9000.0 + i * 100)
    y = [v for a, v in tick_labels(plot.render({0: (s, "#222", 2.0)})) if a == "end"]
    assert y == ["0", "4k", "8k", "12k", "16k", "20k"]  # every label alike


def test_text_view_prints_compact_lines_and_a_lost_rank_at_once(capsys):
    class FakeLab:
        pass

    lab = FakeLab()
    lab.run_state = run_state([st.READY, st.READY])
    lab.metrics = LiveMetrics(2)
    view = TextView(every=0.0)
    lab.run_state.begin_cell([0, 1], now=0.0)
    view.begin(lab)
    view.update(lab)
    assert capsys.readouterr().out == ""  # nothing logged yet: quiet
    lab.run_state.points_arrived(0, 10, 0.5, 640.0, 1.0, 10)
    lab.metrics.current = [640.0, None]
    view.update(lab)
    assert "[rank 0] training step 10 loss 0.5000 samples/s 640" in capsys.readouterr().out
    lab.run_state.fail(1, "its engine was killed (SIGKILL)", lost=True)
    view.update(lab)
    view.update(lab)
    assert capsys.readouterr().out.count("[rank 1] lost: its engine was killed (SIGKILL)") == 1


def test_a_diverging_loss_is_kept_in_the_table_but_not_drawn():
    from types import SimpleNamespace

    from ddplab.dashboard.widget import Dashboard

    lab = SimpleNamespace(run_state=st.RunState(2), metrics=LiveMetrics(2))
    lab.run_state.set_all(st.INIT)
    lab.run_state.set_all(st.READY)
    lab.run_state.begin_cell([0, 1], 0.0)
    import numpy as np

    loss_column = np.array([float("inf") if i > 3 else (float("nan") if i == 2 else 1.0) for i in range(10)])
    step, loss, rate = lab.metrics.add_points(0, np.arange(10), np.arange(10) * 0.1, loss_column, np.full(10, 8.0))
    lab.run_state.points_arrived(0, step, loss, rate, 1.0, 10)
    board = Dashboard(2)
    board.update(lab)  # used to raise OverflowError in the plot's axis limits
    assert len(lab.metrics.loss[0]) == 3 and "inf" in board.table.value


def sent_by_charts(monkeypatch):
    """The messages the live charts send, as (chart, content), in order."""
    from ddplab.dashboard.chart import LiveChart

    sent = []
    monkeypatch.setattr(LiveChart, "send", lambda chart, content, buffers=None: sent.append((chart, content)))
    return sent


def test_the_live_charts_send_only_the_points_each_frame_adds(monkeypatch):
    from ddplab.dashboard.chart import LiveChart
    from ddplab.shared.metrics import Series

    sent = sent_by_charts(monkeypatch)
    chart, s = LiveChart(), Series(cap=8)
    for i in range(3):
        s.add(i, 10 - i)
    lines = {"0": (s, "#f00", 1.4)}
    assert chart.push(lines)
    assert sent[-1][1] == {"points": {"0": [0, [0, 1, 2], [10, 9, 8]]}} and chart.lines == {"0": ["#f00", 1.4]}
    s.add(3, 7)
    s.add(4, 6)
    assert chart.push(lines) and sent[-1][1] == {"points": {"0": [3, [3, 4], [7, 6]]}}  # only the new ones
    count = len(sent)
    assert not chart.push(lines) and len(sent) == count  # nothing new: nothing sent
    for i in range(5, 9):  # past the cap: every 2nd point dropped, the whole series again
        s.add(i, 10 - i)
    assert chart.push(lines) and sent[-1][1]["points"]["0"][0] == 0 and sent[-1][1]["points"]["0"][1] == s.x
    assert chart.saved == {}
    chart.push(lines, final=True)  # the cell's last frame: the whole picture as state
    assert chart.saved == {"0": [s.x, s.y]}
    chart._asked(chart, {"hello": True}, [])  # a new view (a reloaded page): every point so far
    assert sent[-1][1] == {"reset": True, "points": {"0": [0, s.x, s.y]}}
    chart.reset()
    assert sent[-1][1] == {"reset": True}
    s.clear()
    s.add(0, 1.0)
    chart.push(lines)
    assert sent[-1][1] == {"points": {"0": [0, [0], [1.0]]}}  # a new cell's lines start again


def test_a_new_cell_keeps_the_last_picture_and_its_titles_until_its_first_points(monkeypatch):
    from types import SimpleNamespace

    import numpy as np

    from ddplab.dashboard.widget import Dashboard

    sent = sent_by_charts(monkeypatch)

    lab = SimpleNamespace(run_state=st.RunState(2), metrics=LiveMetrics(2))
    lab.run_state.set_all(st.INIT)
    lab.run_state.set_all(st.READY)
    board = Dashboard(2, lang="zh")
    board.update(lab)  # nothing logged yet: the rate plot's title says how to log
    assert "ddplab.log(" in board.rate_title.value
    lab.run_state.begin_cell([0, 1], 0.0)
    for r in (0, 1):
        step, loss, rate = lab.metrics.add_points(r, np.arange(10), np.arange(10) * 0.1, np.ones(10), np.full(10, 8.0))
        lab.run_state.points_arrived(r, step, loss, rate, 1.0, 10)
    board.update(lab, final=True)
    drawn = (board.pictures["loss"], board.pictures["rate"], board.rate_title.value)
    assert "<polyline" in drawn[0] and "ddplab.log(" not in drawn[2] and "样本/秒" in drawn[2]
    assert {chart for chart, _ in sent} == {board.loss_view, board.rate_view}
    assert board.loss_view.saved.keys() == {"0", "1"} and len(board.loss_view.saved["0"][0]) == 10
    count = len(sent)
    lab.run_state.end_cell(1.5)
    lab.run_state.set_all(st.DONE)
    lab.metrics.reset()  # the next cell, no points yet (or it failed before logging any)
    board.begin(lab)
    lab.run_state.begin_cell([0, 1], 2.0)
    board.update(lab, final=True)
    assert (board.pictures["loss"], board.pictures["rate"], board.rate_title.value) == drawn
    assert len(sent) == count  # nothing sent to the charts: they keep the last cell's lines


def test_outside_a_notebook_a_pool_is_shown_as_text_in_its_language():
    from ddplab.dashboard.choice import for_here
    from ddplab.dashboard.text import TextView
    from ddplab.shared.config import PoolConfig

    view = for_here(PoolConfig.make(2, lang="zh"))
    assert isinstance(view, TextView) and view.lang == "zh"


def test_the_live_swimlanes_are_drawn_once_a_second_and_at_the_cells_end(monkeypatch):
    """A frame of swimlanes costs ~5 ms: at every frame (4 a second) that was 2% of a core taken from
    the ranks. New spans within TIMELINE_EVERY wait for the next second, or for the cell's last frame."""
    from types import SimpleNamespace

    from ddplab.dashboard import widget
    from ddplab.shared import swimlane

    drawn = []
    monkeypatch.setattr(swimlane, "live", lambda timeline: drawn.append(timeline) or f"<p>{timeline}</p>")
    clock = [100.0]
    monkeypatch.setattr(widget.time, "monotonic", lambda: clock[0])
    spans = SimpleNamespace(rows=[1] * 5, timeline=lambda lang, tail: len(spans.rows))
    lab = SimpleNamespace(run_state=st.RunState(2), metrics=LiveMetrics(2), spans=spans)
    lab.run_state.set_all(st.INIT)
    lab.run_state.set_all(st.READY)
    lab.run_state.begin_cell([0, 1], 0.0)
    board = widget.Dashboard(2)
    board.update(lab)
    assert drawn == [5] and board.timeline.value == "<p>5</p>"
    spans.rows += [1]
    clock[0] += 0.3
    board.update(lab)  # a frame later: the swimlanes wait
    assert drawn == [5]
    clock[0] += 0.8
    board.update(lab)  # a second after the last drawing
    assert drawn == [5, 6]
    spans.rows += [1]
    board.update(lab, final=True)  # the cell's last frame draws what came
    assert drawn == [5, 6, 7] and board.timeline.value == "<p>7</p>"
