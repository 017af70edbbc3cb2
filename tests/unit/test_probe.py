"""Probe.where(): what a rank's main thread is doing, read from its stack by another thread."""
import threading
import time

from ddplab.rank.probe import Probe

FAKE = compile("import time\ndef all_reduce(t):\n    time.sleep(0.02)\n", "/site/torch/distributed/fake.py", "exec")


def test_a_loop_of_short_collectives_is_many_short_waits_not_one_long_one():
    space = {}
    exec(FAKE, space)
    stop = threading.Event()
    probe = Probe()

    def loop():  # as a training loop calling all_reduce at one line, counted as the wrappers count
        while not stop.is_set():
            probe.calls["count"] += 1
            space["all_reduce"](None)

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        longest, seen = 0.0, 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            w = probe.where(worker.ident)
            if w and w["op"] == "all_reduce":
                seen += 1
                longest = max(longest, w["since"])
            time.sleep(0.005)
    finally:
        stop.set()
        worker.join(5)
    assert seen > 10
    assert longest < 0.5, f"one wait of {longest} s seen in calls of 20 ms each"
