"""The telemetry wire format: data only, signed, and nothing from a socket can make it raise."""
import json
import os
import pickle
import time
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from ddplab.shared import wire

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


def test_the_notebook_accepts_each_ranks_batches_only_newer_than_the_last(tmp_path):
    """Over a real socket: a batch sent again, one out of order, one of an earlier forming of the
    group, and an unsigned one are dropped and counted; the rank is reached on the connection of its
    last good batch, never by a name the connecting side claims."""
    import zmq

    from ddplab.kernel.telemetry import Telemetry

    telemetry = Telemetry(f"ipc://{tmp_path}", KEY)
    telemetry.generation = 3
    ctx = zmq.Context.instance()
    rank, impostor = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    impostor.setsockopt(zmq.IDENTITY, b"rank0")  # the name the old protocol routed by
    for s in (rank, impostor):
        s.connect(telemetry.address)
    try:
        first, second = wire.encode(KEY, 0, 1, columns(1), gen=3, seq=1), wire.encode(KEY, 0, 1, columns(2), gen=3, seq=2)
        rank.send_multipart(second)
        impostor.send_multipart(first)  # older than what came: out of order
        impostor.send_multipart(second)  # the same again: a replay
        impostor.send_multipart(wire.encode(KEY, 0, 1, columns(1), gen=2, seq=9))  # an earlier forming
        impostor.send_multipart(wire.encode(b"x" * 32, 0, 1, columns(1), gen=3, seq=10))  # not the pool's key
        got = []
        deadline = time.monotonic() + 5
        while sum(telemetry.dropped.values()) < 4 and time.monotonic() < deadline:
            telemetry.wait(20)
            got += telemetry.batches()
        assert [(b.seq, len(b)) for b in got] == [(2, 2)]
        assert {why: n for (why, _), n in telemetry.dropped.items()} == {"replayed": 2, "late": 1, "unsigned": 1}
        assert telemetry.last_accepted(0) == (3, 2)
        assert telemetry.command(0, cmd="knob", name="x", value=1)
        assert rank.poll(2000) and not impostor.poll(200)  # the command went to the rank's own connection
        command = wire.decode_command(KEY, rank.recv_multipart(), 0, 3, 0)
        assert command["cmd"] == "knob" and command["seq"] == 1
        assert wire.decode_command(KEY, wire.encode_command(KEY, 0, 3, 1, cmd="cut"), 0, 3, 1) is None  # again
        assert wire.decode_command(KEY, wire.encode_command(KEY, 1, 3, 2, cmd="cut"), 0, 3, 1) is None  # another's
        assert wire.decode_command(KEY, wire.encode_command(KEY, 0, 2, 2, cmd="cut"), 0, 3, 1) is None  # old forming
        assert not telemetry.command(1, cmd="knob")  # a rank never heard: nothing routes to it
    finally:
        rank.close(0)
        impostor.close(0)
        telemetry.close()


def test_a_flood_is_read_a_bounded_amount_at_a_time(tmp_path):
    import zmq

    from ddplab.kernel.telemetry import Telemetry

    telemetry = Telemetry(f"ipc://{tmp_path}", KEY)
    flood = zmq.Context.instance().socket(zmq.DEALER)
    flood.connect(telemetry.address)
    try:
        time.sleep(0.2)  # connected
        for _ in range(3 * Telemetry.MAX_READ):
            flood.send_multipart([b"junk"])
        time.sleep(0.5)
        telemetry.batches()
        assert 0 < sum(telemetry.dropped.values()) <= Telemetry.MAX_READ
    finally:
        flood.close(0)
        telemetry.close()


def test_a_command_counts_as_done_only_when_its_rank_says_so_in_this_forming(tmp_path):
    """An ack is of a command sent to that rank in this forming: one for a number never sent (a command
    someone else signed with the pool's key; a test that plays the notebook) or one of an earlier
    forming does not make a later command look done before the rank has it."""
    import zmq

    from ddplab.kernel.telemetry import Telemetry

    telemetry = Telemetry(f"ipc://{tmp_path}", KEY)
    telemetry.generation = 3
    rank = zmq.Context.instance().socket(zmq.DEALER)
    rank.connect(telemetry.address)

    def ack(seq, gen=3, batch_seq=1):
        rank.send_multipart(wire.encode(KEY, 0, 1, columns(0), gen=gen, seq=batch_seq, events=[(0.0, "ack", str(seq))]))

    try:
        ack(10**12)  # (the rank's first batch: its route) acks a number never sent
        deadline = time.monotonic() + 5
        while not telemetry.heard(0) and time.monotonic() < deadline:
            telemetry.wait(20)
        sent = {0: telemetry.command(0, cmd="knob", name="x", value=1)}
        assert sent[0] == 1 and telemetry.confirm(sent, 0.2) == [0]  # not done: the rank has not said so
        ack(1, batch_seq=2)
        assert telemetry.confirm(sent, 5) == []
        telemetry.generation = 4  # formed again: the rank counts from nothing
        assert telemetry.confirm(sent, 0.1) == [0]
    finally:
        rank.close(0)
        telemetry.close()


def test_the_signature_is_hmac_sha256_of_each_frames_length_then_bytes():
    """What a rank and a notebook of another ddplab release must agree on: computed here part by part."""
    import hashlib
    import hmac

    frames = [b'{"v": 1}', b"", b"\x01" * 24]
    for key in (KEY, b"another pool's key", KEY):  # (each key's HMAC is kept and copied: never another's)
        mac = hmac.new(key, digestmod=hashlib.sha256)
        for frame in frames:
            mac.update(len(frame).to_bytes(8, "little"))
            mac.update(frame)
        assert wire.sign(key, frames) == mac.digest()
    assert wire.sign(KEY, [b"ab", b"c"]) != wire.sign(KEY, [b"a", b"bc"])  # (the lengths: no frame boundary moves)


def test_a_true_or_false_where_a_number_belongs_is_malformed():
    for field in ("rank", "cell", "n", "gen", "seq"):
        header = {"v": 1, "rank": 0, "gen": 0, "seq": 1, "cell": 0, "n": 0, "final": False, "events": [],
                  "extras": [], field: True}
        frames = [json.dumps(header).encode(), b"", b"", b"", b""]
        assert wire.decode(KEY, [wire.sign(KEY, frames), *frames]) == (None, "malformed"), field
