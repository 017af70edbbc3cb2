"""The telemetry wire format: data that cannot carry code, signed with the pool's key.

One batch from a rank is one zmq multipart message:

    [signature, header, step, time, loss, samples, (extra index, extra values) ...]

- signature: HMAC-SHA256 of every other frame (each frame's length, then its bytes), with a key
  the notebook makes per pool and gives the ranks through ipyparallel's signed channel;
- header: JSON {"v": 1, "rank": r, "gen": g, "seq": s, "cell": c, "n": points, "final": bool,
  "events": [[time, kind, value or null], ...] (kind: "phase", "hint"), "extras": [name, ...],
  "where": null or where the rank is while a long cell runs: {"line": cell line, "op": collective or
  null, "group": "default" or "ranks 0,1", "shape": [...], "dtype": "float32", "since": seconds}};
- step (int64), time, loss, samples (float64; NaN where not logged): n little-endian values each;
- per extra scalar (lr=..., acc=...): the indices of the points that have it (int32) and its values.

"gen" is the forming of the group the rank is in (the notebook counts them) and "seq" counts the
rank's batches within it: the notebook accepts a rank's batch only if (gen, seq) is newer than the
last it accepted from that rank, so a signed batch sent again (a replay), out of order, or from an
earlier forming is dropped and counted (telemetry.py). The notebook's commands to a rank go the
other way as [signature, JSON {"to": rank, "gen": g, "seq": s, "cmd": ..., ...}], checked the same
way by the rank (command()).

A message whose signature is missing or wrong is dropped before anything of it is parsed; one that
is signed but malformed is dropped too. Nothing here raises on bad input from a socket: decode()
returns a reason instead. Stdlib only (engines import this); decoding makes numpy arrays.
"""
from __future__ import annotations

import functools
import hmac
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypedDict, cast

if TYPE_CHECKING:  # (for the checker only: engines import this module, stdlib only)
    import array

    import numpy as np
    import numpy.typing as npt
    import zmq
    from typing_extensions import Buffer

    class Column(Buffer, Protocol):
        """n values in a buffer: array.array, a numpy array, bytes."""

        def __len__(self) -> int: ...

    Frame: TypeAlias = Buffer | zmq.Frame  # a frame as sent or received (a zmq.Frame is a buffer too)
    Array: TypeAlias = npt.NDArray[Any]  # a column as decoded (numpy, read-only: it views its frame)


class Where(TypedDict, total=False):
    """Where a rank is while a long cell runs (probe.py), as decode() checks it: each field may be null."""

    line: int | None  # the cell's line
    op: str | None  # the collective it waits in
    group: str | None  # "default" or "ranks 0,1"
    shape: list[int] | None
    dtype: str | None
    since: float | None  # seconds it has waited
    calls: int | None  # collectives it entered this cell


class Calls(TypedDict):
    """With a cell's last batch: the collectives the rank entered, and the last one."""

    calls: int
    last: Where | None


Event: TypeAlias = "tuple[float, str, str | None]"  # (time, kind, value)

VERSION = 1
MAX_POINTS = 1_000_000  # per batch: far more than 0.25 s of logging
MAX_HEADER = 1 << 20
COLUMNS = ("step", "time", "loss", "samples")
SPAN_FIELDS = (("cell", "<i4"), ("step", "<i4"), ("phase", "i1"), ("op", "i1"), ("bucket", "<i4"), ("bytes", "<i8"),
               ("start", "<f8"), ("end", "<f8"), ("group", "i1"), ("seq", "<i4"))  # recorder.FIELDS, as numpy reads them
# A cell's spans are recorded in its first TIMED_FIRST steps, then in every `every`-th step
# (%ddp_timeline --every; 1: all): the spans of the other steps are not recorded, so every step on the
# timeline is whole (timing a DDP bucket costs its rank ~0.5 ms, an FSDP2 step's collectives and labels
# 0.4-2.5 % of its step: recorder.py)
TIMED_FIRST, TIMED_EVERY = 20, 10
MEMORY_FIELDS = ("rss", "params", "grads", "optimizer", "buckets")
MEMORY_KEYS = frozenset(MEMORY_FIELDS)
TYPECODES = {"step": "q", "time": "d", "loss": "d", "samples": "d"}
LITTLE = sys.byteorder == "little"


def sign(key: bytes, frames: Iterable[Frame]) -> bytes:
    """HMAC-SHA256 of each frame's length (8 bytes, little-endian) and bytes, in turn: a copy of the
    key's HMAC, updated once with them joined. (Not hmac.digest(): OpenSSL's one-shot lets go of the
    GIL, and in the notebook's kernel, where ipyparallel's thread takes it, getting it back cost a
    batch 30 us of CPU where signing takes 3.)"""
    parts: list[Buffer] = []
    for frame in frames:
        view = _view(frame)
        parts += (view.nbytes.to_bytes(8, "little"), view)
    mac = _keyed(key).copy()
    mac.update(b"".join(parts))
    return mac.digest()


@functools.lru_cache(maxsize=8)
def _keyed(key: bytes) -> hmac.HMAC:
    """The HMAC of `key` over nothing yet (a pool's key: one or two live at a time)."""
    return hmac.new(key, digestmod="sha256")


def _view(frame: Frame) -> memoryview:
    """A frame's bytes (a zmq.Frame has the buffer protocol: pyzmq's stubs do not say so)."""
    return memoryview(cast("Buffer", frame))


def encode(key: bytes, rank: int, cell: int, columns: Mapping[str, Column], final: bool = False,
           events: Iterable[Sequence[Any]] = (), extras: Mapping[str, tuple[Column, Column]] | None = None,
           where: Mapping[str, Any] | None = None, calls: Mapping[str, Any] | None = None, gen: int = 0,
           seq: int = 0, spans: Mapping[str, Column] | None = None,
           memory: Mapping[str, int] | None = None) -> list[Buffer]:
    """The frames of one batch. columns: step, time, loss, samples as array.array (or any
    buffer of n 8-byte values); extras: {name: (int32 indices, float64 values)}; spans: the timeline's
    columns (SPAN_FIELDS, array.array each); memory: {rss, params, ...: bytes}."""
    extras = extras or {}
    n = len(columns["step"])
    k = len(spans["seq"]) if spans else 0
    header = json.dumps({"v": VERSION, "rank": rank, "gen": gen, "seq": seq, "cell": cell, "n": n, "final": bool(final),
                         "events": [list(e) for e in events], "extras": list(extras), "where": where,
                         "calls": calls, "spans": k, "memory": memory}).encode()
    frames: list[Buffer] = [header, *(_little(columns[c]) for c in COLUMNS)]
    for name in extras:
        index, values = extras[name]
        frames += [_little(index), _little(values)]
    if k and spans is not None:
        frames += [_little(spans[name]) for name, _ in SPAN_FIELDS]
    return [sign(key, frames), *frames]


def _little(buffer: Column) -> Column:
    if LITTLE or not hasattr(buffer, "byteswap"):
        return buffer
    values = cast("array.array[Any]", buffer)  # (an array.array: the ranks' columns)
    swapped = type(values)(values.typecode, values)
    swapped.byteswap()
    return swapped


@dataclass
class Batch:
    """One rank's points since its last batch, as numpy arrays."""

    rank: int
    cell: int
    final: bool
    step: Array  # int64
    time: Array  # float64, as are loss and samples
    loss: Array
    samples: Array
    events: list[Event] = field(default_factory=list)  # (time, kind, value)
    extras: dict[str, tuple[Array, Array]] = field(default_factory=dict)  # name -> (indices int32, values float64)
    where: Where | None = None  # where the rank is (a long cell): line, op, group, shape, dtype, since, calls
    calls: Calls | None = None  # with the cell's last batch: {"calls": collectives it entered, "last": the last one}
    gen: int = 0  # the forming of the group it was sent in
    seq: int = 0  # its number among the rank's batches of that forming
    spans: dict[str, Array] | None = None  # the timeline's columns since the last batch (SPAN_FIELDS), or None
    memory: dict[str, int] | None = None  # what the rank holds: rss, params, grads, optimizer, buckets (bytes), now
    # and then

    def __len__(self) -> int:
        return len(self.step)


def decode(key: bytes, frames: Sequence[Frame]) -> tuple[Batch, None] | tuple[None, str]:
    """(Batch, None), or (None, why) for a message to drop: "unsigned" (no or a wrong signature)
    or "malformed". Checks the signature before it reads anything else."""
    if len(frames) < 2 + len(COLUMNS) or not hmac.compare_digest(bytes(_view(frames[0])), sign(key, frames[1:])):
        return None, "unsigned"
    try:
        return _parse(frames[1:]), None
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, OverflowError):
        return None, "malformed"


def _parse(frames: Sequence[Frame]) -> Batch:
    import numpy as np

    raw = bytes(_view(frames[0]))
    if len(raw) > MAX_HEADER:
        raise ValueError("header too long")
    h = json.loads(raw)
    if not isinstance(h, dict) or h.get("v") != VERSION:
        raise ValueError("not a version 1 batch")
    rank, cell, n, final, gen, seq = h["rank"], h["cell"], h["n"], h["final"], h["gen"], h["seq"]
    names, events = h["extras"], h["events"]
    if not (_whole(rank) and _whole(cell) and _whole(n) and n <= MAX_POINTS and isinstance(final, bool)
            and _whole(gen) and _whole(seq, 2**63)):
        raise ValueError("bad header fields")
    if not (isinstance(names, list) and all(isinstance(x, str) for x in names) and isinstance(events, list)):
        raise ValueError("bad extras or events")
    k = h.get("spans", 0)
    if not _whole(k, MAX_POINTS + 1):
        raise ValueError("bad spans count")
    if len(frames) != 1 + len(COLUMNS) + 2 * len(names) + (len(SPAN_FIELDS) if k else 0):
        raise ValueError("wrong number of frames")
    cols: dict[str, Array] = {}
    for c, frame in zip(COLUMNS, frames[1:]):
        view = _view(frame)
        if view.nbytes != 8 * n:
            raise ValueError(f"{c}: {view.nbytes} bytes, not {n} values")
        cols[c] = np.frombuffer(view, dtype=_dtype("<i8" if c == "step" else "<f8")) if n else _empty(c)
    extras: dict[str, tuple[Array, Array]] = {}
    rest = frames[1 + len(COLUMNS):]
    for i, name in enumerate(names):
        index = np.frombuffer(_view(rest[2 * i]), dtype="<i4")
        values = np.frombuffer(_view(rest[2 * i + 1]), dtype="<f8")
        if len(index) != len(values) or (len(index) and not 0 <= index.min() <= index.max() < n):
            raise ValueError(f"extra {name!r}: bad indices")
        extras[name] = (index, values)
    spans = None
    if k:
        spans = {name: np.frombuffer(_view(frame), dtype=dtype) for (name, dtype), frame in
                 zip(SPAN_FIELDS, frames[1 + len(COLUMNS) + 2 * len(names):])}
        if any(len(column) != k for column in spans.values()):
            raise ValueError("bad span columns")
    memory = h.get("memory")
    if memory is not None and not (isinstance(memory, dict) and memory.keys() <= MEMORY_KEYS
                                   and all(_whole(v, 2**62) for v in memory.values())):
        raise ValueError("bad memory")
    where = _where(h.get("where"))
    sent = h.get("calls")
    calls: Calls | None = None
    if sent is not None:
        if not (isinstance(sent, dict) and set(sent) <= {"calls", "last"} and _whole(sent.get("calls"))):
            raise ValueError("bad calls")
        calls = {"calls": sent["calls"], "last": _where(sent.get("last"))}
    checked: list[Event] = []
    for e in events:
        if not (isinstance(e, list) and len(e) == 3 and isinstance(e[0], (int, float)) and isinstance(e[1], str)
                and (e[2] is None or isinstance(e[2], str))):
            raise ValueError("bad event")
        checked.append((e[0], e[1], e[2]))
    return Batch(rank, cell, final, cols["step"], cols["time"], cols["loss"], cols["samples"], checked, extras, where,
                 calls, gen, seq, spans, memory)


@functools.cache
def _dtype(code: str) -> np.dtype[Any]:
    import numpy as np

    return np.dtype(code)


@functools.cache
def _empty(column: str) -> Array:
    """A column of no values (most batches of a cell that does not log: its last), shared, read-only."""
    import numpy as np

    empty = np.empty(0, dtype=_dtype("<i8" if column == "step" else "<f8"))
    empty.flags.writeable = False
    return empty


WHERE: dict[str, type | tuple[type, ...]] = {
    "line": int, "op": str, "group": str, "shape": list, "dtype": str, "since": (int, float), "calls": int}


def _where(w: Any) -> Where | None:
    """A where-record as a rank sends it, checked field by field (None: not sent)."""
    if w is None:
        return None
    if not isinstance(w, dict) or set(w) - set(WHERE):
        raise ValueError("bad where")
    for k, v in w.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, WHERE[k])):
            raise ValueError(f"bad where.{k}")
    if w.get("shape") is not None and not all(isinstance(d, int) for d in w["shape"]):
        raise ValueError("bad where.shape")
    return cast(Where, w)


def _whole(x: object, limit: int = 2**31) -> bool:
    return type(x) is int and 0 <= x < limit  # (JSON's ints are ints, its true and false bools)


def encode_command(key: bytes, to: int, gen: int, seq: int, **command: Any) -> list[bytes]:
    """The frames of a command from the notebook to rank `to` (in the group's forming `gen`; `seq`
    grows with every command the notebook sends)."""
    body = json.dumps({**command, "to": to, "gen": gen, "seq": seq}).encode()
    return [sign(key, [body]), body]


def decode_command(key: bytes, frames: Sequence[Frame], rank: int, gen: int, last_seq: int) -> dict[str, Any] | None:
    """The command in `frames` if it is signed with `key`, meant for `rank` in forming `gen`, and
    newer than `last_seq`; else None (dropped unread, or as a replay)."""
    if len(frames) != 2 or not hmac.compare_digest(bytes(_view(frames[0])), sign(key, frames[1:])):
        return None
    try:
        command = json.loads(bytes(_view(frames[1])))
    except (ValueError, UnicodeDecodeError):
        return None
    if not (isinstance(command, dict) and command.get("to") == rank and command.get("gen") == gen
            and _whole(command.get("seq"), 2**63) and command["seq"] > last_seq and isinstance(command.get("cmd"), str)):
        return None
    return command
