import csv
import math

import pytest

from ddplab.metrics import History, LiveMetrics, RateMeter, Series


def test_series_keeps_everything_until_cap_then_thins_evenly():
    s = Series(cap=10)
    for i in range(10):
        s.add(i, i * i)
    assert s.x == list(range(10)) and s.generation == 0
    s.add(10, 100)  # over the cap: every 2nd point is kept from now on
    assert len(s) == 6 and s.stride == 2 and s.generation == 1
    assert s.x == [0, 2, 4, 6, 8, 10] and s.y == [x * x for x in s.x]
    for i in range(11, 1000):
        s.add(i, i)
    assert len(s) <= 10 and s.x[0] == 0 and s.x[-1] > 999 - s.stride  # the whole run, up to one stride


def test_rate_meter_measures_samples_per_second_over_its_window():
    m = RateMeter(window=2.0)
    assert m.rate() is None
    for i in range(100):  # 64 samples every 0.1 s: 640 samples/s
        m.add(i * 0.1, 64)
    assert m.rate() == pytest.approx(640)
    for i in range(100, 160):  # then twice as fast, for longer than the window
        m.add(10 + (i - 100) * 0.05, 64)
    assert m.rate() == pytest.approx(1280, rel=0.05)


def pts(cell, steps, loss=1.0, samples=32, dt=0.01, **scalars):
    return [(cell, s, s * dt, loss / (s + 1), samples, scalars or None) for s in steps]


def test_live_metrics_merge_batches_per_rank_and_total():
    lm = LiveMetrics(2)
    step, loss, rate = lm.add_points(0, pts(1, range(0, 50)))
    assert step == 49 and loss == pytest.approx(1 / 50) and rate == pytest.approx(3200)
    lm.add_points(1, pts(1, range(0, 50), samples=16))
    assert lm.sample_total(0.5) == pytest.approx(3200 + 1600)
    assert lm.loss[0].x == list(range(50)) and len(lm.total) == 1
    lm.add_points(0, [(1, 50, 0.5, float("nan"), 0, None)])  # a point without loss or samples
    assert len(lm.loss[0]) == 50
    lm.reset()
    assert len(lm.loss[0]) == 0 and lm.current == [None, None]


def test_history_is_exact_and_exports_csv(tmp_path):
    per_rank = {r: pts(3, range(100), lr=0.1 * (r + 1)) for r in range(4)}
    h = History.from_ranks(per_rank)
    assert len(h) == 400
    assert h.columns() == ["rank", "cell", "step", "time", "loss", "samples", "lr"]
    assert h.where(rank=2).column("step") == list(range(100))
    assert h.where(rank=3, step=0)[0]["lr"] == pytest.approx(0.4)
    assert "400 points from ranks 0-3, cells 3" in repr(h)
    path = tmp_path / "h.csv"
    assert h.to_csv(path) == 400
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 400 and rows[0]["rank"] == "0" and float(rows[-1]["lr"]) == pytest.approx(0.4)
    assert math.isclose(float(rows[5]["loss"]), 1 / 6)
    assert "no points" in repr(History())


def test_history_uses_the_notebooks_cell_numbers():
    from ddplab.metrics import History

    per_rank = {0: [(3, 0, 0.0, 1.0, 8, None)], 1: [(1, 0, 0.0, 2.0, 8, None)]}  # rank 1 was restarted
    h = History.from_ranks(per_rank, {(0, 3): 7, (1, 1): 7})
    assert [(row["rank"], row["cell"]) for row in h] == [(0, 7), (1, 7)]
    assert [row["cell"] for row in History.from_ranks(per_rank)] == [3, 1]  # unmapped: as the ranks counted
