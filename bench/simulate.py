"""Simulated ranks for the dashboard-at-scale benchmark: python -m bench.simulate ADDRESS RANKS RATE SECONDS

Pushes telemetry batches the way RANKS real ranks would (rank.py: a batch every 0.25 s),
each rank logging RATE points a second with a falling, noisy loss and 64 samples a step."""
import math
import pickle
import random
import sys
import time

import zmq

FLUSH_EVERY = 0.25


def main(address, ranks, rate, seconds):
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.connect(address)
    t0 = time.perf_counter()
    steps = [0] * ranks
    due = [t0 + FLUSH_EVERY * r / ranks for r in range(ranks)]  # ranks flush out of phase
    while time.perf_counter() - t0 < seconds:
        now = time.perf_counter()
        for r in range(ranks):
            if now >= due[r]:
                points = []
                for _ in range(int(rate * FLUSH_EVERY)):
                    steps[r] += 1
                    loss = 2.3 * math.exp(-steps[r] / 200) + 0.05 * random.random()
                    points.append((1, steps[r], now - t0, loss, 64, None))
                sock.send(pickle.dumps((r, 1, points, [], False)))
                due[r] += FLUSH_EVERY
        time.sleep(0.005)
    sock.close(linger=1000)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
