"""The telemetry wire format: data only, signed, and nothing from a socket can make it raise."""
import os
import pickle
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from ddplab import wire

KEY = b"k" * 32


def columns(n):
    return {"step": array("q", range(n)), "time": array("d", [i * 0.1 for i in range(n)]),
            "loss": array("d", [1.0 / (i + 1) for i in range(n)]), "samples": array("d", [8.0] * n)}


def test_a_signed_batch_round_trips():
    frames = wire.encode(KEY, 3, 7, columns(5), final=True, events=[(0.5, "phase", "eval")],
                         extras={"lr": (array("i", [0, 4]), array("d", [0.1, 0.2]))})
    batch, why = wire.decode(KEY, frames)
    assert why is None and (batch.rank, batch.cell, batch.final, len(batch)) == (3, 7, True, 5)
    assert batch.step.tolist() == [0, 1, 2, 3, 4] and batch.loss[4] == 0.2
    assert batch.events == [(0.5, "phase", "eval")]
    index, values = batch.extras["lr"]
    assert index.tolist() == [0, 4] and values.tolist() == [0.1, 0.2]


def test_a_wrong_key_a_changed_byte_or_no_signature_is_unsigned():
    frames = wire.encode(KEY, 0, 1, columns(3))
    assert wire.decode(b"x" * 32, frames) == (None, "unsigned")
    tampered = list(frames)
    raw = bytes(tampered[2])  # the steps
    tampered[2] = bytes([raw[0] ^ 1]) + raw[1:]  # one bit changed
    assert wire.decode(KEY, tampered) == (None, "unsigned")
    assert wire.decode(KEY, frames[1:]) == (None, "unsigned")
    assert wire.decode(KEY, [pickle.dumps(("rank", 0, [], [], False))]) == (None, "unsigned")


def test_signed_but_malformed_is_dropped_not_raised():
    def signed(header, *cols):
        frames = [header, *cols]
        return [wire.sign(KEY, frames), *frames]

    eight = b"\x00" * 8
    cases = [
        signed(b"not json", eight, eight, eight, eight),
        signed(b'{"v": 1, "rank": -1, "cell": 0, "n": 1, "final": false, "events": [], "extras": []}',
               eight, eight, eight, eight),
        signed(b'{"v": 1, "rank": 0, "cell": 0, "n": 2, "final": false, "events": [], "extras": []}',
               eight, eight, eight, eight),  # says 2 points, carries 1
        signed(b'{"v": 1, "rank": 0, "cell": 0, "n": 1, "final": false, "events": [], "extras": ["x"]}',
               eight, eight, eight, eight, b"\x05\x00\x00\x00", eight),  # an index past the points
        signed(b'{"v": 1, "rank": 0, "cell": 0, "n": 1, "final": false, "events": [[0, "phase", 3]], "extras": []}',
               eight, eight, eight, eight),
        signed(b'[1, 2]', eight, eight, eight, eight),
    ]
    for frames in cases:
        assert wire.decode(KEY, frames) == (None, "malformed")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_random_frames_never_raise(frames):
    batch, why = wire.decode(KEY, frames)
    assert batch is None and why in ("unsigned", "malformed")


def test_no_ddplab_module_unpickles():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "ddplab")
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                text = open(os.path.join(folder, name)).read()
                assert "pickle.load" not in text and "import pickle" not in text, name


def test_a_point_half_logged_by_one_thread_is_not_sent_by_the_other():
    """log() appends column by column while the sender thread may read: a reader sees a point only
    once all its columns (and its extras) are there."""
    from ddplab.rank import Columns

    c = Columns()
    for s in range(3):
        c.extra("lr", 0.1)
        for name, value in (("cell", 1), ("step", s), ("time", s * 0.1), ("loss", 1.0), ("samples", 8.0)):
            getattr(c, name).append(value)
    c.extra("lr", 0.5)  # the 4th point, half logged: its extra and two of its columns
    c.cell.append(1)
    c.step.append(3)
    assert len(c) == 3
    cols, extras = c.since(0, len(c))
    batch, why = wire.decode(KEY, wire.encode(KEY, 0, 1, cols, extras=extras))
    assert why is None and len(batch) == 3 and batch.extras["lr"][1].tolist() == [0.1] * 3
