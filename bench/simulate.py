"""Simulated ranks for the dashboard-at-scale benchmark:
python -m bench.simulate ADDRESS KEYHEX RANKS RATE SECONDS

Pushes signed telemetry batches (ddplab.shared.wire) the way RANKS real ranks would (rank.py: a batch
every 0.25 s), each rank logging RATE points a second with a falling, noisy loss and 64 samples a step."""
import math
import random
import sys
import time
from array import array

import zmq

from ddplab.shared import wire

FLUSH_EVERY = 0.25


def main(address, key, ranks, rate, seconds):
    sock = zmq.Context.instance().socket(zmq.DEALER)  # as ranks do: the notebook's end is a ROUTER
    sock.connect(address)
    t0 = time.perf_counter()
    steps, seqs = [0] * ranks, [0] * ranks
    due = [t0 + FLUSH_EVERY * r / ranks for r in range(ranks)]  # ranks flush out of phase
    while time.perf_counter() - t0 < seconds:
        now = time.perf_counter()
        for r in range(ranks):
            if now >= due[r]:
                cols = {"step": array("q"), "time": array("d"), "loss": array("d"), "samples": array("d")}
                for _ in range(int(rate * FLUSH_EVERY)):
                    steps[r] += 1
                    cols["step"].append(steps[r])
                    cols["time"].append(now - t0)
                    cols["loss"].append(2.3 * math.exp(-steps[r] / 200) + 0.05 * random.random())
                    cols["samples"].append(64)
                seqs[r] += 1  # as ranks number their batches (a batch not newer than the last is dropped)
                try:  # as ranks do: never block on a notebook that stopped reading
                    sock.send_multipart(wire.encode(key, r, 1, cols, seq=seqs[r]), flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
                due[r] += FLUSH_EVERY
        time.sleep(0.005)
    sock.close(linger=0)


if __name__ == "__main__":
    main(sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
