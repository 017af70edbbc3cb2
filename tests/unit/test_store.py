"""ddplab's rendezvous store (store.py) in one process: it admits the pool's members only, answers
torch.distributed.Store's calls, and a signed request it cannot do gets an error, never ends it."""
import datetime
import json

import pytest
import zmq

from ddplab.rank import store
from ddplab.shared.members import member_socket

KEY = b"k" * 32


@pytest.fixture
def served():
    member = zmq.curve_keypair()
    port, public = store.serve("127.0.0.1", KEY, member[0])
    yield f"tcp://127.0.0.1:{port}", public, member
    store.stop()


def client(served, member=None, seconds=5):
    address, public, pool_member = served
    return store.SignedStore(address, KEY, public, member or pool_member, datetime.timedelta(seconds=seconds))


def test_a_member_sets_gets_adds_and_compares(served):
    s = client(served)
    s.set("a", b"1")
    assert s.get("a") == b"1" and s.add("n", 2) == 2 and s.add("n", 3) == 5
    assert s.compare_set("a", b"1", b"2") == b"2" and s.check(["a", "n"]) and s.num_keys() == 2
    assert s.delete_key("a") and not s.check(["a"])


def test_a_malformed_request_gets_an_error_and_the_store_goes_on(served):
    s = client(served)
    s.set("word", b"not a number")
    for op, keys, extra in (("get", [], {}), ("set", ["a", "b"], {}), ("add", ["n"], {"amount": "1"}),
                            ("add", ["word"], {"amount": 1}), ("compare_set", ["c"], {"expected": "zz"})):
        with pytest.raises(RuntimeError, match="malformed request"):
            s._call(op, keys, **extra)
    s.set("after", b"ok")
    assert s.get("after") == b"ok"  # the server's thread is still there
    assert store._servers[0].dropped.get("malformed") == 5


def send(socket, frames):
    """Send, or give up after a second: a DEALER whose handshake was already refused has no peer to queue
    the message for, and its send would block for ever (nothing let through either way)."""
    socket.setsockopt(zmq.SNDTIMEO, 1000)
    try:
        socket.send_multipart(frames)
    except zmq.Again:
        pass


def test_only_the_pools_members_get_in(served):
    address, public, member = served
    stranger = member_socket(zmq.DEALER, public, zmq.curve_keypair())  # another key pair: refused in the handshake
    stranger.setsockopt(zmq.LINGER, 0)
    stranger.connect(address)
    header = json.dumps({"op": "get", "keys": ["x"], "client": "c", "id": 1}).encode()
    send(stranger, [store._sign(KEY, [header, b""]), header, b""])  # (even signed: it has the key)
    assert not stranger.poll(1000)
    stranger.close(0)
    raw = zmq.Context.instance().socket(zmq.DEALER)  # no CurveZMQ at all
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(address)
    send(raw, [b"x" * 32, json.dumps({"op": "set", "keys": ["x"], "client": "c", "id": 1}).encode(), b"1"])
    raw.close(0)
    server = store._servers[0]
    assert client(served).check(["x"]) is False
    assert server.members.refused >= 2  # counted: the stranger's handshake and the plain one
