"""The timeline in the notebook: every rank's spans of a cell (recorder.py, engine side) on one clock,
with the waiting computed across ranks, kept lean, and said in words.

    spans     one structured row per span (SPAN: 27 bytes): rank, step, phase, op, bucket, group, bytes, start,
              end (seconds since the cell started, float32), wait (seconds of it spent waiting for the
              last rank to arrive at that collective)
    wait      a collective is one row per rank with the same key (DDP: step and bucket; a dist.* call: its
              number in the cell); once every rank of the cell has reported it, each rank's wait is the
              time from its own arrival to the last rank's (within its span)
    memory    per rank: rss, params, grads, optimizer, buckets (bytes)

Pure data (numpy): no torch, IPython or widget imports. Rows are kept in fixed chunks whose untouched
pages cost nothing, so a span costs its 27 bytes in the notebook, not a Python object.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .swimlane import BACKWARD, COMM, DATA, FORWARD, OPTIMIZER, PHASES, picture
from .wire import TIMED_FIRST
from .words import say

OPS = ("", "all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce", "gather", "scatter", "barrier",
       "all_to_all", "send", "recv", "other")
SPAN = np.dtype([("rank", "<u2"), ("step", "<u4"), ("phase", "u1"), ("op", "u1"), ("bucket", "<i2"),
                 ("group", "i1"), ("bytes", "<u4"), ("start", "<f4"), ("end", "<f4"), ("wait", "<f4")])
CHUNK = 1 << 16  # rows per chunk (1.7 MB, allocated untouched)
MEMORY = ("rss", "params", "grads", "optimizer", "buckets")
PARTS = ("compute", "comm", "wait", "data", "hidden", "step")

if TYPE_CHECKING:
    import numpy.typing as npt
    import pandas

    Array = npt.NDArray[Any]  # SPAN rows, or a column of numbers
Group = tuple[str, tuple[int, ...]]  # a process group: (label, its ranks)


def _union_lengths(group: Array, start: Array, end: Array, groups: int) -> Array:
    """Per group (ids 0..groups-1), the length of the union of its [start, end] intervals: one sort and a
    running maximum, each group's times shifted into a band of its own so the maximum never leaks across."""
    if not len(group):
        return np.zeros(groups)
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    band = float(e.max() - s.min()) + 1.0
    shift = g * band
    reach = np.maximum.accumulate(e + shift)  # the furthest end so far (of this group: earlier ones sit lower)
    before = np.concatenate(([-np.inf], reach[:-1])) - shift
    return np.bincount(g, np.clip(e - np.maximum(s, before), 0.0, None), groups)


def _parts(rows: Array) -> tuple[Array, Array, dict[str, Array]]:
    """Where each rank's step went (see Timeline.steps), for every (rank, step) of the rows at once:
    (rank array, step array, {part: array})."""
    key = rows["rank"].astype(np.int64) << 32 | rows["step"].astype(np.int64)
    keys, group = np.unique(key, return_inverse=True)
    n = len(keys)
    phase = rows["phase"]
    start, end = rows["start"].astype(float), rows["end"].astype(float)
    base = np.full(n, np.inf)
    np.minimum.at(base, group, start)  # each (rank, step) on its own clock: small numbers, exact bands
    start, end = start - base[group], end - base[group]
    last = np.zeros(n)
    np.maximum.at(last, group, end)

    comm = phase == COMM
    # backward's compute: until the last bucket of its gradients was ready (a bucket starts inside it)
    back = np.flatnonzero(phase == BACKWARD)
    back = back[np.lexsort((start[back], group[back]))]
    busy_end = end[back].copy()
    buckets = np.flatnonzero(comm & (rows["bucket"] >= 0))
    if len(back) and len(buckets):
        band = float(last.max()) + 1.0
        at = np.searchsorted(group[back] * band + start[back], group[buckets] * band + start[buckets], "right") - 1
        inside = (at >= 0) & (group[back][np.maximum(at, 0)] == group[buckets]) & (start[buckets] <= end[back][at])
        ready = np.full(len(back), -np.inf)
        np.maximum.at(ready, at[inside], start[buckets][inside])
        busy_end = np.where(ready > -np.inf, ready, busy_end)
    busy = np.bincount(group[back], busy_end - start[back], n)
    # compute: the union of those spans (a forward inside backward, activation checkpointing's
    # recomputation, counts once)
    spans = np.flatnonzero((phase == FORWARD) | (phase == OPTIMIZER))
    ends = np.concatenate([end[spans], busy_end])
    spans = np.concatenate([spans, back])
    alone = _union_lengths(group[spans], start[spans], ends, n)
    compute = alone.copy()
    # a collective the cell's thread called (dist.*, FSDP's gathers and reduce-scatters: recorded when
    # it returned) blocked that thread: where it ran inside forward, backward or the optimizer, that
    # stretch was communication, not compute
    blocking = np.flatnonzero(comm & (rows["bucket"] < 0))
    if len(blocking):
        together = _union_lengths(np.concatenate([group[spans], group[blocking]]),
                                  np.concatenate([start[spans], start[blocking]]), np.concatenate([ends, end[blocking]]), n)
        inside = alone + _union_lengths(group[blocking], start[blocking], end[blocking], n) - together
        compute = np.maximum(0.0, compute - inside)
    waiting = comm & (rows["wait"] > 0)
    wait = _union_lengths(group[waiting], start[waiting], start[waiting] + rows["wait"][waiting], n)
    comm_time = _union_lengths(group[comm], start[comm], end[comm], n)
    # hidden: DDP's bucket all-reduces (gloo's own thread) under backward's compute (backward spans of a
    # rank follow one another)
    flying = comm & (rows["bucket"] >= 0)
    both = np.concatenate([group[flying], group[back]])
    union = _union_lengths(both, np.concatenate([start[flying], start[back]]),
                           np.concatenate([end[flying], busy_end]), n)
    flying_time = _union_lengths(group[flying], start[flying], end[flying], n)
    hidden = np.maximum(0.0, flying_time + busy - union)
    data = phase == DATA
    parts = {"compute": compute, "comm": np.maximum(0.0, comm_time - hidden - wait), "wait": wait,
             "data": _union_lengths(group[data], start[data], end[data], n), "hidden": hidden, "step": last}
    return keys >> 32, keys & 0xFFFFFFFF, parts


class Rows:
    """A growing table of SPAN rows in fixed chunks (no copy as it grows)."""

    def __init__(self) -> None:
        self.chunks: list[Array] = []
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def extend(self, rows: Array) -> None:
        done = 0
        while done < len(rows):
            if self.n % CHUNK == 0 and self.n // CHUNK == len(self.chunks):
                self.chunks.append(np.empty(CHUNK, SPAN))
            chunk, at = self.chunks[self.n // CHUNK], self.n % CHUNK
            take = min(CHUNK - at, len(rows) - done)
            chunk[at:at + take] = rows[done:done + take]
            self.n += take
            done += take

    def index(self, i: int) -> tuple[Array, int]:
        return self.chunks[i // CHUNK], i % CHUNK

    def array(self, start: int = 0, stop: int | None = None) -> Array:
        """Rows start..stop as one array (a copy)."""
        stop = self.n if stop is None else min(stop, self.n)
        if start >= stop:
            return np.empty(0, SPAN)
        parts = []
        for c, chunk in enumerate(self.chunks):
            lo, hi = max(start, c * CHUNK), min(stop, (c + 1) * CHUNK)
            if lo < hi:
                parts.append(chunk[lo - c * CHUNK:hi - c * CHUNK])
        return np.concatenate(parts)


class CellSpans:
    """One cell's spans as they arrive: converted to the cell's clock, waits filled in."""

    def __init__(self, cell: int, ranks: Iterable[int], started: float, offsets: Mapping[int, float] | None = None,
                 units: Mapping[int, Mapping[int, str]] | None = None,
                 groups: Mapping[int, Mapping[int, Group]] | None = None, every: int = 1) -> None:
        self.cell, self.ranks, self.started = cell, list(ranks), started  # started: monotonic, the notebook's
        self.every = every  # a cell's steps after the first TIMED_FIRST: every `every`-th recorded (wire.py)
        self.offsets = offsets or {}  # rank -> its host's clock minus the notebook's (seconds)
        self.units = units if units is not None else {}  # rank -> {its index of a module: its name} (Live.units)
        self.unit_names: list[str] = []  # the cell's modules served (FSDP units, TP layers); a span's bucket -2 - i
        # is unit_names[i]
        self.groups = groups if groups is not None else {}  # rank -> {its group index: (label, ranks)} (Live.groups)
        self.group_names: list[Group] = []  # the cell's groups, (label, ranks); a span's group i is group_names[i]
        self.rows = Rows()
        # collective key -> [(row index, start, end), ...] until every rank of its group has reported it
        self.pending: dict[tuple[int, int, int, tuple[int, ...]], list[tuple[int, float, float]]] = {}
        self.memory: dict[int, dict[str, int]] = {}  # rank -> {rss, params, ...}
        self.arrived: dict[int, list[tuple[int, int]]] = {}  # rank -> [(first row, end row)] of each of its
        # batches, in order

    def add(self, rank: int, columns: Mapping[str, Array]) -> None:
        """Spans from one rank (recorder.FIELDS columns as arrays; times on the rank's clock)."""
        n = len(columns["seq"])
        if not n:
            return
        rows = np.empty(n, SPAN)
        shift = self.started + self.offsets.get(rank, 0.0)
        rows["rank"], rows["step"] = rank, np.maximum(columns["step"], 0)
        rows["phase"], rows["op"], rows["bucket"] = columns["phase"], columns["op"], columns["bucket"]
        rows["bytes"] = np.minimum(columns["bytes"], 2**32 - 1)
        served = np.flatnonzero(rows["bucket"] <= -2)  # collectives of an FSDP unit: the rank's index -> the cell's
        if len(served):
            names = self.units.get(rank, {})
            for i in served:
                rows["bucket"][i] = -2 - self._unit(names.get(-2 - int(rows["bucket"][i]), "?"))
        rows["group"] = -1
        groups = self.groups.get(rank, {})
        for i in np.flatnonzero(columns["group"] >= 0):  # the rank's index of a group -> the cell's
            found = groups.get(int(columns["group"][i]))
            if found is not None:
                rows["group"][i] = self._group(found)
        rows["start"], rows["end"] = columns["start"] - shift, columns["end"] - shift
        rows["wait"] = 0.0
        first = len(self.rows)
        self.rows.extend(rows)
        self.arrived.setdefault(rank, []).append((first, first + n))
        comm = np.flatnonzero(rows["phase"] == COMM)
        if not len(comm):
            return
        # (as Python values: a numpy scalar per field and span cost ~1 ms a batch, 16 batches a second)
        ints: list[list[int]] = [(first + comm).tolist(), rows["op"][comm].tolist(), rows["bucket"][comm].tolist(),
                                 np.asarray(columns["seq"])[comm].tolist(), rows["group"][comm].tolist()]
        times: list[list[float]] = [rows["start"][comm].tolist(), rows["end"][comm].tolist()]
        everyone = len(self.ranks)
        for row, op, bucket, seq, group, start, end in zip(*ints, *times):  # settled once its group reported it
            members = self.group_names[group][1] if group >= 0 else ()
            key = (op, bucket, seq, members)
            waiting = self.pending.setdefault(key, [])
            waiting.append((row, start, end))
            if len(waiting) >= (len(members) or everyone):
                self._settle(self.pending.pop(key))

    def _settle(self, spans: Iterable[tuple[int, float, float]]) -> None:
        """The waits of one collective, given its spans (row, start, end): each rank waited from its
        arrival until the last rank's."""
        spans = list(spans)
        last = max(start for _, start, _ in spans)
        for row, start, end in spans:
            chunk, at = self.rows.index(row)
            chunk["wait"][at] = max(0.0, min(last, end) - start)

    def _unit(self, name: str) -> int:
        if name not in self.unit_names:
            self.unit_names.append(name)
        return self.unit_names.index(name)

    def _group(self, group: Group) -> int:
        if group not in self.group_names:
            self.group_names.append(group)
        return min(self.group_names.index(group), 127)

    def finish(self) -> None:
        """The cell ended: collectives some ranks never reported (a subgroup, a failed rank) settle with
        the ranks that did."""
        for spans in self.pending.values():
            if len(spans) > 1:
                self._settle(spans)
        self.pending = {}

    def timeline(self, lang: str = "en", tail: int | None = None) -> Timeline:
        """A Timeline of the cell's spans, or of each rank's last `tail` spans (what a live view draws:
        every rank's latest steps, however the ranks' batches interleave)."""
        if not tail:
            return Timeline(self.cell, self.rows.array(), self.ranks, dict(self.memory), lang, self.unit_names,
                            self.group_names, self.every)
        parts: list[Array] = []
        for batches in self.arrived.values():
            need, mine = tail, []
            for first, end in reversed(batches):
                take = min(need, end - first)
                mine.append(self.rows.array(end - take, end))
                need -= take
                if not need:
                    break
            parts += reversed(mine)
        rows = np.concatenate(parts) if parts else np.empty(0, SPAN)
        return Timeline(self.cell, rows, self.ranks, dict(self.memory), lang, self.unit_names, self.group_names, self.every)


class Timeline:
    """The spans of one cell, every rank on one clock (seconds since the cell started).

        tl.to_pandas()        one row per span: rank, step, phase, start, end, op, bucket, module, group, bytes,
                              wait (bucket: a DDP bucket's index; module: the FSDP unit or tensor-parallel
                              layer a collective serves; group: the mesh dimension it ran on, "world", or
                              "ranks 0,2")
        tl.summary()          one row per rank: steps, and per step: compute, comm, wait, data, hidden, step (s)
        tl.memory             one row per rank: rank, rss, params, grads, optimizer, buckets (bytes)
        tl.save("trace.json") Chrome's trace event format (one process per rank): Perfetto opens it
        tl.verdict()          who or what the others wait for, in words

    A cell is timed in its first 20 steps, then in one step in `tl.every` (10
    unless %ddp_timeline --every says otherwise): the other steps have no spans, and every table and
    average is over the steps timed (`tl.steps()` names them).

    Displayed in a notebook it draws the swimlanes of the last steps and the breakdown; printed, it
    says the breakdown."""

    def __init__(self, cell: int, rows: Array, ranks: Iterable[int], memory: Mapping[int, Mapping[str, int]] | None = None,
                 lang: str = "en", units: Iterable[str] = (), groups: Iterable[Group] = (), every: int = 1) -> None:
        self.cell, self.rows, self.ranks, self.lang = cell, rows, list(ranks), lang
        self.every = every  # a cell's steps after its first 20: one in `every` was timed
        self._memory = memory or {}
        self.units = list(units)  # modules served: a span whose bucket is -2 - i serves units[i]
        self.groups = list(groups)  # (label, ranks): a span whose group is i ran on groups[i]

    def module_of(self, bucket: int) -> str | None:
        """The module (an FSDP unit, "" its root; a tensor-parallel layer) a collective with this bucket
        code serves, or None."""
        return self.units[-2 - bucket] if bucket <= -2 and -2 - bucket < len(self.units) else None

    def group_of(self, code: int) -> str | None:
        """The label of the group a collective with this group code ran on, or None."""
        return self.groups[code][0] if 0 <= code < len(self.groups) else None

    def __len__(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------------ tables
    def records(self) -> Iterator[dict[str, Any]]:
        for row in self.rows:
            yield {"rank": int(row["rank"]), "step": int(row["step"]), "phase": PHASES[row["phase"]],
                   "start": float(row["start"]), "end": float(row["end"]), "op": OPS[row["op"]] or None,
                   "bucket": int(row["bucket"]) if row["bucket"] >= 0 else None,
                   "module": self.module_of(int(row["bucket"])), "group": self.group_of(int(row["group"])),
                   "bytes": int(row["bytes"]) if row["phase"] == COMM else None, "wait": float(row["wait"])}

    def to_pandas(self) -> pandas.DataFrame:
        import pandas as pd

        columns = ["rank", "step", "phase", "start", "end", "op", "bucket", "module", "group", "bytes", "wait"]
        rows, comm = self.rows, self.rows["phase"] == COMM
        names = np.array([*self.units, None], dtype=object)  # (index -1: none)
        unit = np.where(rows["bucket"] <= -2, -2 - rows["bucket"].astype(np.int64), -1)
        frame = pd.DataFrame({
            "rank": rows["rank"].astype(np.int64), "step": rows["step"].astype(np.int64),
            "phase": np.array(PHASES, dtype=object)[rows["phase"]],
            "start": rows["start"].astype(float), "end": rows["end"].astype(float),
            "op": np.array([o or None for o in OPS], dtype=object)[rows["op"]],
            "bucket": pd.array(np.where(rows["bucket"] >= 0, rows["bucket"], 0), dtype="Int64"),
            "module": names[unit],
            "group": np.array([*(label for label, _ in self.groups), None], dtype=object)[
                np.where(rows["group"] >= 0, rows["group"], len(self.groups))],
            "bytes": pd.array(rows["bytes"].astype(np.int64), dtype="Int64"),
            "wait": rows["wait"].astype(float)}, columns=columns)
        frame.loc[rows["bucket"] < 0, "bucket"] = pd.NA  # (not a DDP bucket)
        frame.loc[~comm, "bytes"] = pd.NA  # (only collectives move bytes)
        return frame

    @functools.cached_property
    def _steps(self) -> tuple[Array, Array, dict[str, Array]]:
        return _parts(self.rows)

    def steps(self) -> dict[int, dict[int, dict[str, float]]]:
        """Per rank and step, where the time went (seconds): compute (forward, optimizer, and backward until
        its last gradient bucket was ready, less the collectives the rank's thread waited in there: FSDP's
        gathers and reduce-scatters, a tensor-parallel layer's all-reduce), comm (collectives not hidden
        under that compute, nor waiting), wait (for the last rank to arrive), data, hidden (DDP's bucket
        all-reduces, on gloo's own thread, under backward's compute: its overlap), and the step's length.
        {rank: {step: {...}}}."""
        ranks, steps, parts = self._steps
        out: dict[int, dict[int, dict[str, float]]] = {}
        for i, (r, step) in enumerate(zip(ranks.tolist(), steps.tolist())):
            out.setdefault(r, {})[step] = {k: float(v[i]) for k, v in parts.items()}
        return out

    def breakdown(self, last: int | None = None) -> dict[int, dict[str, float]]:
        """{rank: {"steps", "compute", "comm", "wait", "data", "hidden", "step"}}: seconds per step, averaged
        over the rank's steps (or its `last` steps)."""
        ranks, _, parts = self._steps  # (sorted by rank, then step)
        out: dict[int, dict[str, float]] = {}
        for r in self.ranks:
            mine = np.flatnonzero(ranks == r)
            chosen = mine[-last:] if last else mine
            out[r] = {"steps": len(mine), **{k: float(parts[k][chosen].mean()) if len(chosen) else 0.0 for k in PARTS}}
        return out

    def summary(self) -> pandas.DataFrame:
        import pandas as pd

        rows = [{"rank": r, **b} for r, b in self.breakdown().items()]
        return pd.DataFrame(rows, columns=["rank", "steps", *PARTS])

    @property
    def memory(self) -> pandas.DataFrame:
        import pandas as pd

        rows = [{"rank": r, **{k: self._memory.get(r, {}).get(k) for k in MEMORY}} for r in self.ranks]
        return pd.DataFrame(rows, columns=["rank", *MEMORY])

    # ------------------------------------------------------------------ who waits for whom
    def blame(self) -> dict[int, float]:
        """{rank: seconds per step each other rank spent waiting for it, on average}: in each step, the
        waits of the others are charged to the rank that arrived last at that step's collectives most often."""
        comm = self.rows[self.rows["phase"] == COMM]
        blamed = {r: 0.0 for r in self.ranks}
        if not len(comm) or not self.ranks:
            return blamed
        # one collective: (op, bucket, step); its last arrival is its row that started last
        key = np.unique(np.stack([comm["op"], comm["bucket"], comm["step"]], axis=1).astype(np.int64),
                        axis=0, return_inverse=True)[1].ravel()
        order = np.lexsort((comm["start"], key))
        ends = np.flatnonzero(np.diff(np.append(key[order], -1)))  # each collective's last row
        sizes = np.diff(np.append(-1, ends))
        latest = comm[order[ends[sizes > 1]]]
        if not len(latest):
            return blamed
        index = {r: i for i, r in enumerate(self.ranks)}
        steps, at = np.unique(latest["step"], return_inverse=True)
        last_arrivals = np.zeros((len(steps), len(self.ranks)))
        np.add.at(last_arrivals, (at.ravel(), [index[int(r)] for r in latest["rank"]]), 1)  # type: ignore[arg-type]
        culprit = last_arrivals.argmax(axis=1)  # (ties: the lowest rank)
        waits = np.zeros((len(steps), len(self.ranks)))  # each rank's wait at those steps
        ranks, rank_steps, parts = self._steps
        row = np.searchsorted(steps, rank_steps)
        found = (row < len(steps)) & (steps[np.minimum(row, len(steps) - 1)] == rank_steps)
        columns = np.array([index.get(int(r), -1) for r in ranks], dtype=np.int64)
        found &= columns >= 0
        waits[row[found], columns[found]] = parts["wait"][found]
        others = waits.sum(axis=1) - waits[np.arange(len(steps)), culprit]
        total = np.bincount(culprit, others, len(self.ranks))
        n, peers = len(steps), max(1, len(self.ranks) - 1)
        return {r: float(total[i]) / n / peers for r, i in index.items()}

    def verdict(self) -> str:
        """The slowest rank named ("rank 2 is the slowest: the others wait 31 ms per step for it"), or
        communication named when no rank holds the others back, in the pool's language."""
        if not len(self.rows):
            return say(self.lang, "no spans recorded: the cell ran no training step (forward, backward, collectives)")
        blame, parts = self.blame(), self.breakdown()
        slowest = max(blame, key=lambda r: blame[r])
        step = max(p["step"] for p in parts.values()) or 1e-9
        if blame[slowest] > 0.2 * step:  # (noise makes some rank last everywhere: a fifth of a step is not noise)
            return say(self.lang, "rank {rank} is the slowest: the others wait {ms:.0f} ms per step for it",
                       rank=slowest, ms=1000 * blame[slowest])
        comm = max(p["comm"] for p in parts.values())
        if comm > 0.5 * step:
            return say(self.lang, "communication, not a rank, is the bottleneck: {ms:.0f} ms of each {step:.0f} ms "
                                  "step goes to collectives", ms=1000 * comm, step=1000 * step)
        return say(self.lang, "no rank holds the others back, and communication takes {share:.0f}% of a step",
                   share=100 * comm / step)

    # ------------------------------------------------------------------ files and views
    def trace(self) -> dict[str, Any]:
        """Chrome's trace event format: one process per rank, a thread for compute and one for comm."""
        events: list[dict[str, Any]] = []
        for r in self.ranks:
            events.append({"ph": "M", "pid": r, "name": "process_name", "args": {"name": f"rank {r}"}})
        for rec in self.records():
            name = rec["phase"] if rec["phase"] != "comm" else f"{rec['op'] or 'comm'}" + (
                f" bucket {rec['bucket']}" if rec["bucket"] is not None else "")
            events.append({"ph": "X", "pid": rec["rank"], "tid": 1 if rec["phase"] == "comm" else 0, "name": name,
                           "ts": round(rec["start"] * 1e6, 1), "dur": round((rec["end"] - rec["start"]) * 1e6, 1),
                           "args": {"step": rec["step"], "bytes": rec["bytes"], "wait_us": round(rec["wait"] * 1e6, 1)}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def save(self, path: str) -> int:
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return len(self.rows)

    def __repr__(self) -> str:
        return "\n".join([say(self.lang, "timeline of cell {cell}: {n} spans from {ranks} ranks", cell=self.cell,
                              n=len(self), ranks=len(self.ranks)), *self.lines()])

    def _repr_html_(self) -> str:
        return picture(self, steps=4)

    def lines(self, last: int | None = None) -> list[str]:
        """The breakdown as text lines (a terminal, %ddp_timeline printed), of the `last` steps or all."""
        lines = [say(self.lang, "per step (ms): rank  compute  comm  wait  data  step")]
        for r, b in self.breakdown(last).items():
            lines.append(f"  {r:>4}  {1000 * b['compute']:7.1f}  {1000 * b['comm']:5.1f}  {1000 * b['wait']:5.1f}  "
                         f"{1000 * b['data']:5.1f}  {1000 * b['step']:5.1f}")
        steps = np.unique(self.rows["step"])
        if self.every > 1 and len(steps) and steps[-1] >= TIMED_FIRST:
            lines.append(say(self.lang, "{timed} steps timed: a cell's first {first}, then one in {every} "
                                        "(%ddp_timeline --every 1 times them all)", timed=len(steps), first=TIMED_FIRST,
                             every=self.every))
        return lines + [self.verdict()]
