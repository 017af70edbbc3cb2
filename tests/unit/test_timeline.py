"""The timeline's arithmetic, without engines: spans on the cell's clock, the waiting computed across
ranks, where a step's time went, who is named, the wire format and the cost per span."""
import json
from array import array

import numpy as np

from ddplab.rank import recorder
from ddplab.shared import wire
from ddplab.shared.timeline import CHUNK, SPAN, CellSpans, Rows

BACKWARD, OPTIMIZER, FORWARD, COMM, DATA = 1, 2, 0, 4, 3


def columns(spans):
    """recorder.FIELDS columns from (step, phase, op, bucket, bytes, start, end, seq[, group]) tuples."""
    out = {name: array(code) for name, code in recorder.FIELDS}
    for span in spans:
        step, phase, op, bucket, nbytes, start, end, seq, *group = span
        values = dict(cell=1, step=step, phase=phase, op=op, bucket=bucket, bytes=nbytes, start=start, end=end,
                      seq=seq, group=group[0] if group else -1)
        for name, value in values.items():
            out[name].append(value)
    return {name: np.frombuffer(out[name], dtype=dtype) for name, dtype in wire.SPAN_FIELDS}


def one_step(arrives, ready_late=0.0):
    """A rank's step at cell time 100 + ...: forward 10 ms, backward 20 ms with two buckets ready at 8 and
    18 ms, each all-reduce (op 1) from `arrives` later to 25 ms, optimizer 2 ms."""
    t = 100.0 + ready_late
    return [(0, FORWARD, 0, -1, 0, t, t + 0.010, -1), (0, BACKWARD, 0, -1, 0, t + 0.010, t + 0.030, -1),
            (0, COMM, 1, 0, 4096, t + 0.018, t + 0.025, 0), (0, COMM, 1, 1, 4096, t + 0.028, t + 0.030, 0),
            (0, OPTIMIZER, 0, -1, 0, t + 0.030, t + 0.032, -1)]


def test_each_rank_waits_from_its_arrival_until_the_last_ranks():
    spans = CellSpans(1, [0, 1], started=100.0)
    spans.add(0, columns(one_step(0)))
    assert spans.pending and (spans.rows.array()["wait"] == 0).all()  # rank 1 has not reported yet
    spans.add(1, columns(one_step(0, ready_late=0.004)))  # rank 1 is 4 ms late everywhere
    assert not spans.pending
    rows = spans.rows.array()
    comm = rows[rows["phase"] == COMM]
    waits = dict(zip(zip(comm["rank"], comm["bucket"]), comm["wait"]))
    assert abs(waits[0, 0] - 0.004) < 1e-5 and waits[1, 0] == 0.0  # rank 0 waited for rank 1's bucket 0
    assert abs(waits[0, 1] - 0.002) < 1e-5  # bucket 1: rank 0's span ended 2 ms after it arrived, at most that
    assert abs(rows["start"].min() - 0.0) < 1e-6  # seconds since the cell started
    tl = spans.timeline()
    assert tl.verdict() == "no rank holds the others back, and communication takes 6% of a step" or \
        tl.verdict().startswith("rank 1 is the slowest")


def test_a_collective_of_a_subgroup_waits_only_for_its_own_ranks_and_names_its_group():
    """Two tensor-parallel pairs on a 2x2 mesh: each pair's all-reduce (the same number on every rank)
    settles within the pair, and the group's label ("tp") is the span's."""
    groups = {r: {0: ("tp", (0, 1) if r < 2 else (2, 3))} for r in range(4)}
    spans = CellSpans(1, [0, 1, 2, 3], started=100.0, units={r: {0: "2"} for r in range(4)}, groups=groups)
    late = {0: 0.0, 1: 0.001, 2: 0.0, 3: 0.009}  # rank 3 is late: only rank 2 waits for it
    for r, delay in late.items():
        spans.add(r, columns([(0, COMM, 1, -2, 128, 100.0 + delay, 100.01, 1 << 30 | 1, 0)]))
    assert not spans.pending  # both pairs settled without the cell's end
    frame = spans.timeline().to_pandas().set_index("rank")
    assert list(frame["group"]) == ["tp"] * 4 and list(frame["module"]) == ["2"] * 4
    assert abs(frame.loc[0, "wait"] - 0.001) < 1e-5 and abs(frame.loc[2, "wait"] - 0.009) < 1e-5
    assert frame.loc[1, "wait"] == 0.0 and frame.loc[3, "wait"] == 0.0


def test_a_forward_recomputed_inside_backward_is_compute_once():
    """Activation checkpointing: forward 10 ms, then a backward of 30 ms during which the checkpointed
    blocks' forward runs again (two 4-ms forward spans inside it): 40 ms of compute, not 48."""
    t = 100.0
    rows = [(0, FORWARD, 0, -1, 0, t, t + 0.010, -1), (0, BACKWARD, 0, -1, 0, t + 0.010, t + 0.040, -1),
            (0, FORWARD, 0, -1, 0, t + 0.012, t + 0.016, -1), (0, FORWARD, 0, -1, 0, t + 0.025, t + 0.029, -1)]
    spans = CellSpans(1, [0], started=100.0)
    spans.add(0, columns(rows))
    assert abs(spans.timeline().breakdown()[0]["compute"] - 0.040) < 1e-5


def test_a_step_splits_into_compute_communication_waiting_and_data():
    spans = CellSpans(1, [0, 1], started=100.0)
    late = 0.010
    for r, delay in ((0, 0.0), (1, late)):
        spans.add(r, columns(one_step(0, delay) + [(0, DATA, 0, -1, 0, 100.0 + delay - 0.003, 100.0 + delay, -1)]))
    parts = spans.timeline().breakdown()
    # rank 0: forward 10 + backward until its last bucket was ready (18 of its 20 ms) + optimizer 2 = 30 ms
    assert abs(parts[0]["compute"] - 0.030) < 1e-5 and abs(parts[0]["data"] - 0.003) < 1e-5
    # for rank 1, 10 ms late: waiting counts within rank 0's own spans (7 ms of bucket 0, 2 of bucket 1)
    assert abs(parts[0]["wait"] - 0.009) < 1e-4
    assert parts[0]["hidden"] > 0 and parts[1]["wait"] == 0.0
    tl = spans.timeline()
    assert tl.verdict() == "rank 1 is the slowest: the others wait 9 ms per step for it"
    assert tl.blame() == {0: 0.0, 1: parts[0]["wait"]}


def test_communication_is_named_when_no_rank_holds_the_others_back():
    spans = CellSpans(1, [0, 1], started=0.0)
    for r in (0, 1):
        spans.add(r, columns([(s, FORWARD, 0, -1, 0, s, s + 0.002, -1) for s in range(3)]
                             + [(s, COMM, 1, -1, 10**8, s + 0.002, s + 0.9, s) for s in range(3)]))
    assert spans.timeline().verdict() == ("communication, not a rank, is the bottleneck: 898 ms of each 900 ms "
                                          "step goes to collectives")
    assert "瓶颈是通信" in spans.timeline("zh").verdict()


def test_rows_grow_in_chunks_and_cost_their_27_bytes():
    assert SPAN.itemsize == 27
    rows = Rows()
    batch = np.zeros(1000, SPAN)
    batch["step"] = np.arange(1000)
    for _ in range(CHUNK // 1000 + 3):
        rows.extend(batch)
    assert len(rows.chunks) == 2 and len(rows) == (CHUNK // 1000 + 3) * 1000
    whole = rows.array()
    assert len(whole) == len(rows) and whole["step"][CHUNK - 1] == (CHUNK - 1) % 1000
    assert len(rows.array(len(rows) - 5)) == 5


def test_spans_cross_the_wire_as_data_and_the_trace_opens_as_json(tmp_path):
    cols = {name: array(code, [0] * 2) for name, code in recorder.FIELDS}
    cols["phase"] = array("b", [COMM, FORWARD])
    cols["end"] = array("d", [0.5, 0.25])
    frames = wire.encode(b"k" * 32, 1, 1, {c: array("q" if c == "step" else "d") for c in wire.COLUMNS},
                         spans=cols, memory={"rss": 10, "params": 4})
    batch, why = wire.decode(b"k" * 32, frames)
    assert why is None and list(batch.spans["phase"]) == [COMM, FORWARD] and batch.memory == {"rss": 10, "params": 4}
    assert wire.decode(b"k" * 32, frames[:-1]) == (None, "unsigned")
    spans = CellSpans(1, [1], started=0.0)
    spans.add(1, batch.spans)
    spans.memory[1] = batch.memory
    path = tmp_path / "t.json"
    assert spans.timeline().save(path) == 2
    trace = json.loads(path.read_text())
    assert {e["pid"] for e in trace["traceEvents"]} == {1}
    assert spans.timeline().memory.loc[0, "params"] == 4


def _union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged, sum(end - start for start, end in merged)


def slow_parts(rows):
    """Timeline.steps' definition, one (rank, step) at a time in plain Python: the oracle for its numpy."""
    out = {}
    for r, step in sorted({(int(row["rank"]), int(row["step"])) for row in rows}):
        mine = [row for row in rows if row["rank"] == r and row["step"] == step]
        spans = [(int(x["phase"]), float(x["start"]), float(x["end"]), int(x["bucket"]), float(x["wait"])) for x in mine]
        busy = []
        for phase, s, e, _, _ in spans:
            if phase == BACKWARD:
                ready = [s2 for p2, s2, _, b2, _ in spans if p2 == COMM and b2 >= 0 and s <= s2 <= e]
                busy.append((s, max(ready) if ready else e))
        compute = sum(e - s for p, s, e, _, _ in spans if p in (FORWARD, OPTIMIZER)) + sum(e - s for s, e in busy)
        # a collective the cell's thread waited in (bucket < 0) inside compute was not compute
        computing, _ = _union([(s, e) for p, s, e, _, _ in spans if p in (FORWARD, OPTIMIZER)] + busy)
        blocked, _ = _union([(s, e) for p, s, e, b, _ in spans if p == COMM and b < 0])
        compute = max(0.0, compute - sum(max(0.0, min(e, ce) - max(s, cs)) for cs, ce in computing for s, e in blocked))
        _, wait = _union([(s, s + w) for p, s, _, _, w in spans if p == COMM and w > 0])
        _, comm = _union([(s, e) for p, s, e, _, _ in spans if p == COMM])
        flying, _ = _union([(s, e) for p, s, e, b, _ in spans if p == COMM and b >= 0])  # DDP's buckets
        hidden = sum(max(0.0, min(e, be) - max(s, bs)) for bs, be in busy for s, e in flying)
        _, data = _union([(s, e) for p, s, e, _, _ in spans if p == DATA])
        out.setdefault(r, {})[step] = {"compute": compute, "comm": max(0.0, comm - hidden - wait), "wait": wait,
                                       "data": data, "hidden": hidden,
                                       "step": max(e for _, _, e, _, _ in spans) - min(s for _, s, _, _, _ in spans)}
    return out


def test_the_step_arithmetic_in_numpy_matches_its_definition_span_by_span():
    from ddplab.shared.timeline import Timeline

    rng = np.random.default_rng(7)
    rows = []
    for r in range(3):
        for step in range(40):
            t = step * 0.05 + rng.uniform(0, 0.01)
            for _ in range(rng.integers(1, 3)):  # one or two micro-batches: forward, backward, buckets
                f = rng.uniform(0.001, 0.01)
                rows.append((r, step, FORWARD, 0, -1, 0, t, t + f, 0.0))
                b = rng.uniform(0.002, 0.02)
                rows.append((r, step, BACKWARD, 0, -1, 0, t + f, t + f + b, 0.0))
                if r == 1:  # FSDP: a unit's gather inside forward, its reduce-scatter inside backward (blocking)
                    rows.append((r, step, COMM, 3, -2, 1024, t + 0.2 * f, t + 0.5 * f, 0.0))
                    rows.append((r, step, COMM, 4, -3, 1024, t + f + 0.6 * b, t + f + 0.8 * b, 0.0))
                for bucket in range(rng.integers(0, 4)):
                    s = t + f + rng.uniform(0, b * 1.2)  # mostly inside backward, sometimes after it
                    d = rng.uniform(0.0005, 0.01)
                    rows.append((r, step, COMM, 1, bucket, 4096, s, s + d, rng.choice([0.0, rng.uniform(0, d)])))
                t += f + b + 0.001
            if rng.random() < 0.5:
                rows.append((r, step, DATA, 0, -1, 0, t - 0.004, t - 0.001, 0.0))
                rows.append((r, step, DATA, 0, -1, 0, t - 0.002, t + 0.001, 0.0))  # overlapping: counted once
            rows.append((r, step, COMM, 2, -1, 64, t, t + 0.002, 0.001))  # an explicit collective
            rows.append((r, step, OPTIMIZER, 0, -1, 0, t + 0.002, t + 0.004, 0.0))
    table = np.array([(*row[:5], -1, *row[5:]) for row in rows], dtype=SPAN)  # (group: none)
    rng.shuffle(table)
    fast, slow = Timeline(1, table, range(3)).steps(), slow_parts(table)
    assert fast.keys() == slow.keys() and all(fast[r].keys() == slow[r].keys() for r in slow)
    for r in slow:
        for step in slow[r]:
            for part, value in slow[r][step].items():
                assert abs(fast[r][step][part] - value) < 2e-6, (r, step, part, fast[r][step][part], value)
    assert any(p["hidden"] > 0 for p in slow[0].values()) and any(p["data"] > 0 for p in slow[0].values())
    fsdp = Timeline(1, table, range(3)).breakdown()
    assert fsdp[1]["comm"] > fsdp[0]["comm"] and fsdp[1]["compute"] < fsdp[1]["step"]  # its gathers are not compute


def test_the_live_view_draws_every_ranks_latest_steps_whatever_order_their_batches_arrive_in():
    """Rank 0's batch of 40 steps arrives after rank 1's 2 steps: the tail a frame is drawn from still
    holds both ranks' last steps (a tail cut over all rows would hold rank 0's alone: rank 1's lane and
    its row of the breakdown empty)."""
    spans = CellSpans(1, [0, 1], started=100.0)
    step = lambda k: [(k, *span[1:5], span[5] + k, span[6] + k, k) for span in one_step(0)]  # noqa: E731
    spans.add(1, columns([s for k in range(2) for s in step(k)]))
    spans.add(0, columns([s for k in range(40) for s in step(k)]))
    live = spans.timeline(tail=20)
    assert sorted(set(live.rows["rank"].tolist())) == [0, 1]
    assert np.bincount(live.rows["rank"]).tolist() == [20, 10]  # each rank's last 20 at most, in order
    assert (np.diff(live.rows["start"][live.rows["rank"] == 0]) >= 0).all()
    assert all(b["steps"] > 0 for b in live.breakdown().values())
    assert len(spans.timeline()) == 5 * 42  # the whole cell
