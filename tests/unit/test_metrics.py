import csv
import math

import pytest

from ddplab.shared.metrics import History, LiveMetrics, RateMeter, Series


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


def cols(cell, steps, loss=1.0, samples=32, dt=0.01, **scalars):
    """A rank's points as rank.history() returns them: columns, extras sparse."""
    import numpy as np

    steps = list(steps)
    n = len(steps)
    return {"cell": np.full(n, cell, dtype="i4"), "step": np.array(steps, dtype="i8"),
            "time": np.array([s * dt for s in steps]), "loss": np.array([loss / (s + 1) for s in steps]),
            "samples": np.full(n, float(samples)),
            "extras": {k: (np.arange(n, dtype="i4"), np.full(n, float(v))) for k, v in scalars.items()}}


def batch(c):
    return c["step"], c["time"], c["loss"], c["samples"]


def test_live_metrics_merge_batches_per_rank_and_total():
    import numpy as np

    lm = LiveMetrics(2)
    step, loss, rate = lm.add_points(0, *batch(cols(1, range(0, 50))))
    assert step == 49 and loss == pytest.approx(1 / 50) and rate == pytest.approx(3200)
    lm.add_points(1, *batch(cols(1, range(0, 50), samples=16)))
    assert lm.sample_total(0.5) == pytest.approx(3200 + 1600)
    assert lm.loss[0].x == list(range(50)) and len(lm.total) == 1
    nan = np.array([np.nan])
    lm.add_points(0, np.array([50]), np.array([0.5]), nan, nan)  # a point without loss or samples
    assert len(lm.loss[0]) == 50
    lm.reset()
    assert len(lm.loss[0]) == 0 and lm.current == [None, None]


def test_history_is_exact_and_exports_csv(tmp_path):
    per_rank = {r: cols(3, range(100), lr=0.1 * (r + 1)) for r in range(4)}
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
    per_rank = {0: cols(3, [0]), 1: cols(1, [0])}  # rank 1 was restarted: it counts its cells anew
    h = History.from_ranks(per_rank, {(0, 3): 7, (1, 1): 7})
    assert [(row["rank"], row["cell"]) for row in h] == [(0, 7), (1, 7)]
    assert [row["cell"] for row in History.from_ranks(per_rank)] == [3, 1]  # unmapped: as the ranks counted


def test_history_is_columnar_small_and_fast():
    import time

    import numpy as np

    n = 250_000
    per_rank = {r: cols(1, range(n), lr=0.1, acc=0.5) for r in range(4)}  # 1 M points, two extras on each
    tic = time.perf_counter()
    h = History.from_ranks(per_rank)
    built = time.perf_counter() - tic
    assert len(h) == 4 * n and h.nbytes / len(h) <= 64, h.nbytes / len(h)
    assert built < 1.0  # a generous bound for a test; bench/history.py measures it
    assert h.where(rank=2, step=7).column("acc") == [0.5]
    assert np.isnan(h.where(rank=0).array("loss")).sum() == 0


def test_history_rows_columns_and_where_with_missing_values():
    import numpy as np

    c = cols(1, range(4))
    c["loss"][1] = np.nan  # step 1 logged no loss
    c["samples"][2] = np.nan
    c["extras"] = {"acc": (np.array([3], dtype="i4"), np.array([0.9]))}  # only the last point has acc
    h = History.from_ranks({0: c, 2: cols(2, range(2))})
    assert h.column("loss")[1] is None and h.column("samples")[2] is None and h.column("acc") == [None] * 3 + [0.9] + [None] * 2
    assert list(h)[3] == {"rank": 0, "cell": 1, "step": 3, "time": 0.03, "loss": 0.25, "samples": 32, "acc": 0.9}
    assert h[3] == list(h)[3] and h[-1]["rank"] == 2 and "acc" not in h[0]
    assert len(h.where(loss=None)) == 1 and len(h.where(acc=0.9)) == 1 and len(h.where(nope=1)) == 0
    assert h.where(rank=2).columns() == ["rank", "cell", "step", "time", "loss", "samples"]  # acc not on rank 2
    with pytest.raises(IndexError):
        h[6]


def test_history_to_pandas_when_pandas_is_there():
    import pandas as pd  # optional for users; a test dependency (pyproject's test extra)

    frame = History.from_ranks({0: cols(1, range(3), lr=0.5)}).to_pandas()
    assert list(frame.columns) == ["rank", "cell", "step", "time", "loss", "samples", "lr"] and len(frame) == 3
    assert isinstance(frame, pd.DataFrame)


def test_a_batch_of_points_draws_as_the_points_one_by_one_would():
    """add_many (a batch as arrays: no Python object per point) keeps exactly the points add() keeps."""
    import numpy as np

    from ddplab.shared.metrics import RateMeter, Series

    rng = np.random.default_rng(0)
    for sizes in ([1000], [3, 397, 1, 2000, 50], [7] * 300):
        one, many = Series(cap=100), Series(cap=100)
        meter_one, meter_many = RateMeter(), RateMeter()
        x0 = 0
        for n in sizes:
            xs = np.arange(x0, x0 + n, dtype=float)
            ys = rng.random(n)
            ys[rng.random(n) < 0.05] = np.inf  # a diverged loss is not drawn
            samples = np.where(rng.random(n) < 0.1, np.nan, 64.0)
            for x, y, s in zip(xs.tolist(), ys.tolist(), samples.tolist()):
                one.add(x, y)
                if s == s and s:
                    meter_one.add(x / 100, s)
            many.add_many(xs, ys)
            meter_many.add_many(xs / 100, samples)
            x0 += n
        assert (one.x, one.y, one.stride, one.generation) == (many.x, many.y, many.stride, many.generation)
        assert meter_one.rate() == meter_many.rate()
