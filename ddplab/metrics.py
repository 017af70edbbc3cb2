"""Per-rank series for the live plots, throughput estimates, and the exact history.

Pure data: no torch, IPython or widget imports.
"""
import csv
import math
from collections import deque

# a point as ranks record it: (cell, step, time since the cell started, loss, samples, {scalars} or None)
CELL, STEP, TIME, LOSS, SAMPLES, SCALARS = range(6)


class Series:
    """An x/y series for live plotting, bounded: past `cap` points it keeps every 2nd, then
    every 4th ... point, so a whole run stays drawable. `generation` grows when points are
    dropped (a plot must then redraw from scratch); new points are those past `len` seen."""

    def __init__(self, cap=400):
        self.cap = cap
        self.x, self.y = [], []
        self.stride, self.skipped, self.generation = 1, 0, 0

    def add(self, x, y):
        if not (math.isfinite(x) and math.isfinite(y)):
            return  # a diverged loss (inf, nan) cannot be drawn; the history and the table keep it
        self.skipped += 1
        if self.skipped < self.stride:
            return
        self.skipped = 0
        self.x.append(x)
        self.y.append(y)
        if len(self.x) > self.cap:
            del self.x[1::2], self.y[1::2]
            self.stride *= 2
            self.generation += 1

    def clear(self):
        self.__init__(self.cap)

    def __len__(self):
        return len(self.x)


class RateMeter:
    """Samples per second over the last `window` seconds of a rank's own clock."""

    def __init__(self, window=2.0):
        self.window = window
        self.points = deque()  # (time, samples)
        self.inside = 0  # samples of every point but the oldest

    def add(self, t, samples):
        if self.points:
            self.inside += samples
        self.points.append((t, samples))
        while len(self.points) > 2 and self.points[1][0] <= t - self.window:
            self.points.popleft()
            self.inside -= self.points[0][1]

    def rate(self):
        if len(self.points) < 2:
            return None
        span = self.points[-1][0] - self.points[0][0]
        return self.inside / span if span > 0 else None


class LiveMetrics:
    """What the live plots draw: loss against step and samples/s against time, per rank and total."""

    def __init__(self, world_size, cap=400):
        self.world_size, self.cap = world_size, cap
        self.reset()

    def reset(self):
        n = self.world_size
        self.loss = [Series(self.cap) for _ in range(n)]
        self.rate = [Series(self.cap) for _ in range(n)]
        self.total = Series(self.cap)
        self.meters = [RateMeter() for _ in range(n)]
        self.current = [None] * n  # latest samples/s per rank
        self.version = 0

    def add_points(self, rank, points):
        """Merge a batch from one rank; returns (last step, last loss, samples/s)."""
        meter, loss_series = self.meters[rank], self.loss[rank]
        step = loss = None
        t = 0.0
        for p in points:
            step, t = p[STEP], p[TIME]
            if p[LOSS] is not None and not math.isnan(p[LOSS]):
                loss = p[LOSS]
                loss_series.add(step, loss)
            if p[SAMPLES]:
                meter.add(t, p[SAMPLES])
        rate = meter.rate()
        if rate is not None:
            self.rate[rank].add(t, rate)
            self.current[rank] = rate
        self.version += 1
        return step, loss, rate

    def sample_total(self, t):
        """Add the current total samples/s at cell time t (called once per frame)."""
        rates = [r for r in self.current if r is not None]
        if rates:
            self.total.add(t, sum(rates))
            self.version += 1
        return sum(rates) if rates else None


class History:
    """Every point every rank logged, exactly: rows of rank, cell, step, time, loss, samples, scalars."""

    FIELDS = ("rank", "cell", "step", "time", "loss", "samples")

    def __init__(self, rows=()):
        self.rows = list(rows)

    @classmethod
    def from_ranks(cls, per_rank, cell_of=None):
        """per_rank: {rank: [point tuples as ranks record them]}. cell_of maps (rank, the rank's
        own cell count) to the notebook's cell number: a restarted rank, or one left out by
        --ranks, counts differently, and cell N must mean the same cell on every rank."""
        cell_of = cell_of or {}
        rows = []
        for rank, points in sorted(per_rank.items()):
            for p in points:
                cell = cell_of.get((rank, p[CELL]), p[CELL])
                row = {"rank": rank, "cell": cell, "step": p[STEP], "time": p[TIME],
                       "loss": p[LOSS], "samples": p[SAMPLES]}
                if p[SCALARS]:
                    row.update(p[SCALARS])
                rows.append(row)
        return cls(rows)

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def columns(self):
        extra = sorted({k for row in self.rows for k in row} - set(self.FIELDS))
        return list(self.FIELDS) + extra

    def where(self, **match):
        """Rows whose fields equal the given values: history.where(rank=0, cell=3)."""
        return History(r for r in self.rows if all(r.get(k) == v for k, v in match.items()))

    def column(self, name):
        return [r.get(name) for r in self.rows]

    def to_csv(self, path):
        columns = self.columns()
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, restval="")
            w.writeheader()
            w.writerows(self.rows)
        return len(self.rows)

    def __repr__(self):
        if not self.rows:
            return "History(no points: log them in rank code with ddplab.log(loss=..., samples=...))"
        ranks = sorted({r["rank"] for r in self.rows})
        cells = sorted({r["cell"] for r in self.rows})
        return (f"History({len(self.rows)} points from ranks {_span(ranks)}, cells {_span(cells)}; "
                f"columns: {', '.join(self.columns())})")


def _span(values):
    return f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0])
