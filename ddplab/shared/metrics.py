"""Per-rank series for the live plots, throughput estimates, and the exact history.

Pure data: no torch, IPython or widget imports.
"""
from __future__ import annotations

import csv
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy.typing as npt
    import pandas

    Array = npt.NDArray[Any]
    Columns = Mapping[str, Any]  # name -> a column: a numpy array, or any sequence numpy reads
    Row = dict[str, Any]  # one point: rank, cell, step, time, loss, samples, extras (None: not logged)


def _list(column: Any) -> list[Any]:
    return column.tolist() if hasattr(column, "tolist") else list(column)


class Series:
    """An x/y series for live plotting, bounded: past `cap` points it keeps every 2nd, then
    every 4th ... point, so a whole run stays drawable. `generation` grows when points are
    dropped (a plot must then redraw from scratch); new points are those past `len` seen."""

    def __init__(self, cap: int = 400) -> None:
        self.cap = cap
        self.x: list[float] = []
        self.y: list[float] = []
        self.stride, self.skipped, self.generation = 1, 0, 0

    def add(self, x: float, y: float) -> None:
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

    def add_many(self, xs: Array, ys: Array) -> None:
        """add() for arrays of points, without a Python object per point: only the points the stride
        keeps are touched (a batch of 150k points costs its arrays, not 150k floats)."""
        import numpy as np

        keep = np.isfinite(xs) & np.isfinite(ys)
        xs, ys = xs[keep], ys[keep]
        while len(xs):
            first = self.stride - 1 - self.skipped  # the next point the stride keeps
            if first >= len(xs):
                self.skipped += len(xs)
                return
            room = self.cap + 1 - len(self.x)  # points that fit before the next thinning
            take = np.arange(first, len(xs), self.stride)[:room]
            self.x.extend(xs[take].tolist())
            self.y.extend(ys[take].tolist())
            used = int(take[-1]) + 1
            self.skipped = 0
            xs, ys = xs[used:], ys[used:]
            if len(self.x) > self.cap:
                del self.x[1::2], self.y[1::2]
                self.stride *= 2
                self.generation += 1

    def clear(self) -> None:
        self.__init__(self.cap)  # type: ignore[misc]  # (everything as new, the cap kept)

    def __len__(self) -> int:
        return len(self.x)


class RateMeter:
    """Samples per second over the last `window` seconds of a rank's own clock. Points closer than
    `window / 400` to the last one kept are added into it (its time moves to theirs): a thousand steps a
    second keep a few hundred entries, not thousands of objects."""

    def __init__(self, window: float = 2.0) -> None:
        self.window = window
        self.resolution = window / 400
        self.points: deque[list[float]] = deque()  # [time, samples]
        self.inside: float = 0  # samples of every point but the oldest

    def add(self, t: float, samples: float) -> None:
        if self.points:
            self.inside += samples
            last = self.points[-1]
            if len(self.points) > 1 and t - self.points[-2][0] < self.resolution:
                last[0], last[1] = t, last[1] + samples  # (the oldest point is never merged into)
                return
        self.points.append([t, samples])
        while len(self.points) > 2 and self.points[1][0] <= t - self.window:
            self.points.popleft()
            self.inside -= self.points[0][1]

    def add_many(self, ts: Array, samples: Array) -> None:
        """add() for arrays: only the points inside the window at the end are touched as objects."""
        import numpy as np

        keep = (samples == samples) & (samples != 0)  # logged, and not zero
        ts, samples = ts[keep], samples[keep]
        if not len(ts):
            return
        tail = max(0, int(np.searchsorted(ts, ts[-1] - self.window, side="left")) - 1)
        if tail and self.points:  # what falls out of the window: one point holding its samples
            self.add(float(ts[tail - 1]), float(samples[:tail].sum()))
        for t, n in zip(ts[tail:].tolist(), samples[tail:].tolist()):
            self.add(t, n)

    def rate(self) -> float | None:
        if len(self.points) < 2:
            return None
        span = self.points[-1][0] - self.points[0][0]
        return self.inside / span if span > 0 else None


class LiveMetrics:
    """What the live plots draw: loss against step and samples/s against time, per rank and total."""

    def __init__(self, world_size: int, cap: int = 400) -> None:
        self.world_size, self.cap = world_size, cap
        self.reset()

    def reset(self) -> None:
        n = self.world_size
        self.loss = [Series(self.cap) for _ in range(n)]
        self.rate = [Series(self.cap) for _ in range(n)]
        self.total = Series(self.cap)
        self.meters = [RateMeter() for _ in range(n)]
        self.current: list[float | None] = [None] * n  # latest samples/s per rank
        self.version = 0

    def add_points(self, rank: int, step: npt.ArrayLike, time: npt.ArrayLike, loss: npt.ArrayLike, samples: npt.ArrayLike
                   ) -> tuple[int | None, float | None, float | None]:
        """Merge a batch from one rank (columns of equal length; NaN: not logged); returns
        (last step, last loss, samples/s)."""
        import numpy as np

        step, time, loss, samples = (np.asarray(c) for c in (step, time, loss, samples))
        logged = loss == loss  # not NaN
        last_loss = float(loss[logged][-1]) if logged.any() else None
        self.loss[rank].add_many(step[logged].astype(float), loss[logged])
        self.meters[rank].add_many(time, samples)
        rate = self.meters[rank].rate()
        if rate is not None and len(time):
            self.rate[rank].add(float(time[-1]), rate)
            self.current[rank] = rate
        self.version += 1
        return (int(step[-1]) if len(step) else None), last_loss, rate

    def sample_total(self, t: float) -> float | None:
        """Add the current total samples/s at cell time t (called once per frame)."""
        rates = [r for r in self.current if r is not None]
        if rates:
            self.total.add(t, sum(rates))
            self.version += 1
        return sum(rates) if rates else None


class History:
    """Every point every rank logged, exactly, as columns: numpy arrays rank, cell, step, time,
    loss, samples (NaN where a point had none), and one sparse column per extra scalar (lr=...,
    acc=...: 12 bytes per point that has it). 38 bytes a point. Rows are dicts made on demand:

        h.where(rank=0, cell=3)      # a History of the matching points
        h.column("loss")             # a list, None where a point had no loss
        for row in h: ...            # {"rank": 0, "cell": 3, "step": 0, "time": 0.01, "loss": 2.3, ...}
        h.to_csv("run.csv"); h.to_pandas()
    """

    FIELDS: tuple[str, ...] = ("rank", "cell", "step", "time", "loss", "samples")
    DTYPES: dict[str, str] = {"rank": "i2", "cell": "i4", "step": "i8", "time": "f8", "loss": "f8", "samples": "f8"}

    def __init__(self, columns: Columns | None = None,
                 extras: Mapping[str, tuple[Array, Array]] | None = None) -> None:
        import numpy as np

        columns = columns or {}
        self.arrays = {f: np.asarray(columns.get(f, ()), dtype=self.DTYPES[f]) for f in self.FIELDS}
        self.extras = dict(extras or {})  # name -> (sorted point positions int64, values float64)

    @classmethod
    def from_ranks(cls, per_rank: Mapping[int, Columns], cell_of: Mapping[tuple[int, int], int] | None = None
                   ) -> History:
        """per_rank: {rank: the columns rank.history() returns}. cell_of maps (rank, the rank's
        own cell count) to the notebook's cell number: a restarted rank, or one left out by
        --ranks, counts differently, and cell N must mean the same cell on every rank."""
        import numpy as np

        cell_of = cell_of or {}
        parts: dict[str, list[Array]] = {f: [] for f in cls.FIELDS}
        extras: dict[str, tuple[list[Array], list[Array]]] = {}
        offset = 0
        for rank, cols in sorted(per_rank.items()):
            n = len(cols["step"])
            cells = np.asarray(cols["cell"], dtype="i4")
            mapped = cells.copy()
            for own in np.unique(cells):
                mapped[cells == own] = cell_of.get((rank, int(own)), int(own))
            parts["rank"].append(np.full(n, rank, dtype="i2"))
            parts["cell"].append(mapped)
            for f in ("step", "time", "loss", "samples"):
                parts[f].append(np.asarray(cols[f]))
            for name, (index, values) in cols.get("extras", {}).items():
                extras.setdefault(name, ([], []))
                extras[name][0].append(np.asarray(index, dtype="i4") + offset)
                extras[name][1].append(np.asarray(values, dtype="f8"))
            offset += n
        columns = {f: np.concatenate(p) if p else () for f, p in parts.items()}
        return cls(columns, {k: (np.concatenate(i), np.concatenate(v)) for k, (i, v) in extras.items()})

    def __len__(self) -> int:
        return len(self.arrays["step"])

    def columns(self) -> list[str]:
        return list(self.FIELDS) + sorted(self.extras)

    @property
    def nbytes(self) -> int:
        """Memory the columns take."""
        return sum(a.nbytes for a in self.arrays.values()) + sum(i.nbytes + v.nbytes for i, v in self.extras.values())

    def _extra(self, name: str) -> Array:
        """A full-length column for an extra scalar: NaN where a point had none."""
        import numpy as np

        index, values = self.extras[name]
        full = np.full(len(self), np.nan)
        full[index] = values
        return full

    def array(self, name: str) -> Array:
        """One column as a numpy array (NaN where a point had no value)."""
        if name in self.arrays:
            return self.arrays[name]
        if name in self.extras:
            return self._extra(name)
        raise KeyError(f"no column {name!r}: the columns are {', '.join(self.columns())}")

    def column(self, name: str) -> list[Any]:
        """One column as a list: None where a point had no value (as in the rows)."""
        if name not in self.arrays and name not in self.extras:
            return [None] * len(self)
        return [_value(name, v) for v in self.array(name).tolist()]

    def _take(self, positions: Sequence[int] | Array) -> History:
        import numpy as np

        positions = np.asarray(positions, dtype="i8")
        columns = {f: a[positions] for f, a in self.arrays.items()}
        where = np.full(len(self), -1, dtype="i4")
        where[positions] = np.arange(len(positions), dtype="i4")
        extras: dict[str, tuple[Array, Array]] = {}
        for name, (index, values) in self.extras.items():
            kept = where[index] >= 0
            if kept.any():
                extras[name] = (where[index[kept]], values[kept])
        return History(columns, extras)

    def where(self, **match: Any) -> History:
        """The points whose fields equal the given values: history.where(rank=0, cell=3)."""
        import numpy as np

        keep = np.ones(len(self), dtype=bool)
        for name, value in match.items():
            if name not in self.arrays and name not in self.extras:
                return self._take([])
            column = self.array(name)
            keep &= np.isnan(column) if value is None and column.dtype.kind == "f" else column == value
        return self._take(np.flatnonzero(keep))

    def row(self, i: int) -> Row:
        row = {f: _value(f, self.arrays[f][i].item()) for f in self.FIELDS}
        for name, (index, values) in self.extras.items():
            j = index.searchsorted(i)
            if j < len(index) and index[j] == i:
                row[name] = values[j].item()
        return row

    def __getitem__(self, i: int) -> Row:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("history index out of range")
        return self.row(i)

    def __iter__(self) -> Iterator[Row]:
        extras = {name: dict(zip(index.tolist(), values.tolist())) for name, (index, values) in self.extras.items()}
        lists = {f: self.arrays[f].tolist() for f in self.FIELDS}
        for i in range(len(self)):
            row = {f: _value(f, lists[f][i]) for f in self.FIELDS}
            for name, by_index in extras.items():
                if i in by_index:
                    row[name] = by_index[i]
            yield row

    def to_csv(self, path: str) -> int:
        columns = self.columns()
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, restval="")
            w.writeheader()
            w.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in self)
        return len(self)

    def to_pandas(self) -> pandas.DataFrame:
        """A pandas DataFrame, one row per point (pandas is not a ddplab dependency: install it)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("History.to_pandas() needs pandas: pip install pandas") from None
        frame = pd.DataFrame({f: self.arrays[f] for f in self.FIELDS})
        for name in sorted(self.extras):
            frame[name] = self._extra(name)
        return frame

    def __repr__(self) -> str:
        if not len(self):
            return "History(no points: log them in rank code with ddplab.log(loss=..., samples=...))"
        import numpy as np

        ranks = np.unique(self.arrays["rank"]).tolist()
        cells = np.unique(self.arrays["cell"]).tolist()
        return (f"History({len(self)} points from ranks {_span(ranks)}, cells {_span(cells)}; "
                f"columns: {', '.join(self.columns())})")


def _value(field: str, v: Any) -> Any:
    """A row's value: None for what was not logged; whole numbers of samples as int."""
    if isinstance(v, float):
        if v != v:
            return None
        if field == "samples" and v.is_integer():
            return int(v)
    return v


def _span(values: Sequence[Any]) -> str:
    return f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0])
