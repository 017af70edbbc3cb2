"""The accept gate's keeper is a process of its own: a library that blocks in native code holding the GIL
while its peers connect (TensorFlow's MultiWorkerMirroredStrategy() does) is answered all the same.

Each check runs in a fresh Python (a seccomp filter cannot be taken off the process that put it up)."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The gate up, then a native library's thread (zmq's I/O thread, made after the gate: its accepts are
# gated) accepts a connection while the main thread holds the GIL in native code for 2 s. Another
# process connects and watches through sock_diag for the moment the connection is accepted (its
# server-side socket gets an inode). A keeper that needed this process's GIL would answer only once
# the 2 s are over.
HOLDS_THE_GIL = """
import ctypes, json, subprocess, sys, time
from ddplab.rank.gate import GATE
GATE.start(local=True)
up = GATE.install(True)
import zmq
ctx = zmq.Context()
pull = ctx.socket(zmq.PULL)
port = pull.bind_to_random_port("tcp://127.0.0.1")
watcher = subprocess.Popen([sys.executable, "-c", WATCH.format(port=port)], stdout=subprocess.PIPE, text=True)
time.sleep(0.1)
ctypes.PyDLL(None).usleep(2_000_000)
print(json.dumps({"up": up, "why_not": GATE.why_not, "accepted_after": float(watcher.communicate(timeout=20)[0]),
                  "keeper": GATE.keeper.pid if GATE.keeper else None}))
"""
WATCH = """
import socket, time
from ddplab.shared.privacy import tcp_sockets
time.sleep(0.5)
s = socket.create_connection(("127.0.0.1", {port}))
me, t0 = s.getsockname(), time.monotonic()
while time.monotonic() - t0 < 5:
    if [r for r in tcp_sockets() if r[2] == ("127.0.0.1", {port}) and r[3] == me and r[0]]:
        break
    time.sleep(0.005)
print(time.monotonic() - t0)
"""


def run(code, **values):
    script = f"WATCH = {WATCH!r}\n" + code
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_library_holding_the_gil_while_its_peer_connects_is_answered_at_once():
    seen = run(HOLDS_THE_GIL)
    assert seen["up"] is True, seen["why_not"]
    assert seen["accepted_after"] < 0.5, seen  # (a keeper needing the GIL: 1.5 s, when the holder let go)


def test_the_keeper_ends_with_its_rank_even_one_killed():
    """A rank killed (SIGKILL: no atexit) leaves no keeper behind: the keeper sees its end of the pair close."""
    import psutil

    from ddplab.shared.system import wait_gone

    rank = subprocess.Popen([sys.executable, "-c", "from ddplab.rank.gate import GATE\nGATE.start()\nGATE.install()\n"
                             "print(GATE.keeper.pid, flush=True)\nimport time\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    try:
        keeper = psutil.Process(int(rank.stdout.readline()))
        assert keeper.ppid() == rank.pid
    finally:
        rank.kill()
        rank.wait(10)
    assert wait_gone([keeper], 5) == []


def test_refusals_reach_the_rank_as_counts_and_junk_is_dropped_and_counted():
    seen = run("""
import json, socket
from ddplab.rank.gate import GATE, REPORT
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
GATE._sock = mine
mine.setblocking(False)
theirs.send(REPORT.pack(1234, 3))
theirs.send(REPORT.pack(-1, 2))
theirs.send(b"junk, not a report")
theirs.send(REPORT.pack(1234, 1))
print(json.dumps({"refused": {str(k): v for k, v in GATE.take_refused().items()}, "dropped": GATE.dropped,
                  "again": GATE.take_refused()}))
""")
    assert seen == {"refused": {"1234": 4, "another host": 2}, "dropped": 1, "again": {}}
