"""ddplab reads two private attributes of ipyparallel's AsyncResult (monitor.Replies); the
dependency is pinned to the versions where they were tested. This fails when either changes."""
import inspect
import re
from importlib.metadata import version

import ipyparallel
from ipyparallel.client.asyncresult import AsyncResult


def test_the_installed_ipyparallel_is_in_the_pinned_range():
    from pathlib import Path

    import tomllib

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("ipyparallel"))
    low, high = re.fullmatch(r"ipyparallel>=([\d.]+),<([\d.]+)", pin).groups()
    installed = tuple(int(x) for x in version("ipyparallel").split(".")[:2])
    assert tuple(map(int, low.split("."))) <= installed < tuple(map(int, high.split("."))), (pin, ipyparallel.__version__)


def test_async_result_keeps_one_future_and_one_metadata_dict_per_engine():
    source = inspect.getsource(AsyncResult.__init__)
    assert "self._children = children" in source
    assert "self._metadata = [f.output.metadata for f in self._children]" in source


def test_the_controller_counts_a_new_heart_at_its_first_pong():
    """zygote.count_new_hearts_at_once patches ipyparallel's HeartMonitor in the forked controller;
    here in a fresh process, on a real HeartMonitor whose hub side is a zmq pair."""
    import subprocess
    import sys

    code = """
import zmq
from zmq.eventloop.zmqstream import ZMQStream
from ipyparallel.controller.heartmonitor import HeartMonitor
from ddplab.processes.zygote import count_new_hearts_at_once

ctx = zmq.Context()
def monitor(name):
    hub, mine = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    hub.bind("inproc://" + name); mine.connect("inproc://" + name)
    return hub, HeartMonitor(monitor_stream=ZMQStream(mine), ping_stream=ZMQStream(ctx.socket(zmq.PUB)),
                             pong_stream=ZMQStream(ctx.socket(zmq.ROUTER)))
hub, before = monitor("before")
before.handle_pong([b"heart-0", str(before.lifetime).encode()])
before.monitor_stream.flush()  # (a ZMQStream sends from its event loop: none runs here)
assert before.hearts == set() and not hub.poll(200), "ipyparallel now counts a new heart at once: drop the patch"
count_new_hearts_at_once()
hub, hm = monitor("patched")
hm.handle_pong([b"heart-1", str(hm.lifetime).encode()])
hm.monitor_stream.flush()
assert hm.hearts == {b"heart-1"}, hm.hearts
assert hub.poll(2000), "the hub was not told"
assert b"heart-1" in b"".join(hub.recv_multipart())
hm.handle_pong([b"heart-1", str(hm.lifetime).encode()])  # its next pong: nothing new
hm.monitor_stream.flush()
assert not hub.poll(200)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_heart_monitor_pings_fast_only_until_every_heart_that_connected_is_in():
    """Beats: a ping every period (100 ms) from a heart's connection until the monitor counts as many
    hearts as connected (an engine's registration waits for a pong), then every 10th; FAST_FOR bounds
    the fast pings when a heart that connected never answers."""
    from ddplab.processes.zygote import FAST_FOR, SLOW_BEATS, Beats

    fast, slow = 100, 100 * SLOW_BEATS
    beats = Beats(100, now=0.0)
    assert beats.interval(0.0, hearts=0) == slow  # (no engine yet)
    beats.joined(1.0, hearts=0)
    beats.joined(1.01, hearts=0)  # two engines start
    assert beats.interval(1.1, hearts=1) == fast
    assert beats.interval(1.2, hearts=2) == slow, "both engines are in: the first cells must not pay for pings"
    beats.joined(10.0, hearts=2)  # a rank restarted: its old heart is still counted
    assert beats.interval(10.1, hearts=2) == fast and beats.interval(10.2, hearts=3) == slow
    beats.joined(20.0, hearts=3)  # a heart that never answers
    assert beats.interval(20.0 + FAST_FOR - 0.01, hearts=3) == fast
    assert beats.interval(20.0 + FAST_FOR, hearts=3) == slow


def test_ipc_urls_are_joined_differently_by_the_controller_and_its_clients():
    """zygote.ipc_urls_as_clients_build_them makes the forked controller join an ipc:// path and its
    'port' with ':', as ipyparallel's Client and engines do; its own construct_url joins them with
    '-' (Jupyter's way), so nothing would connect. This fails when ipyparallel makes them agree."""
    from ipyparallel.client.client import Client
    from ipyparallel.controller.app import IPController
    from ipyparallel.engine.app import IPEngine

    assert "sep = '-' if interface.partition(\"://\")[0] == 'ipc' else ':'" in inspect.getsource(IPController.construct_url)
    assert "cfg[key] = f\"{cfg['interface']}:{cfg[key]}\"" in inspect.getsource(Client.__init__)
    assert "f\"{d['interface']}:{d['registration']}\"" in inspect.getsource(IPEngine)


def test_a_strangers_message_is_dropped_and_a_bug_is_said_as_one(caplog):
    """pool.guard_client: unsigned or malformed frames are counted and go no further; a signed message
    whose handler raises (a bug) is logged as an error and not counted as a stranger's."""
    from types import SimpleNamespace

    from jupyter_client.session import Session

    from ddplab.processes.pool import guard_client

    handled = []

    def handler(msg):
        handled.append(msg)
        raise RuntimeError("a bug in handling a good message")

    session = Session(key=b"the pool's key")
    stream = SimpleNamespace(_recv_callback=handler)
    client = SimpleNamespace(session=session, _query_stream=stream)
    dropped = guard_client(client)
    good = session.serialize(session.msg("status", {"x": 1}))
    stranger = Session(key=b"another key").serialize(session.msg("status", {}))
    for frames in ([b"junk"], [b"<IDS|MSG>", b"x"], stranger):
        stream._recv_callback(frames)
    assert dropped == {"query": 3} and handled == []
    with caplog.at_level("ERROR", logger="ddplab"):
        stream._recv_callback(good)
    assert dropped == {"query": 3} and len(handled) == 1
    assert "handling a message of this pool failed" in caplog.text and "a bug in handling" in caplog.text
