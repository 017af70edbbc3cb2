"""What the notebook pays in memory per history point and per timeline span: the growth of its resident
memory while they arrive (the transient objects of decoding included, not only the arrays that keep
them), <= 64 B each. Simulated ranks in another process send signed batches the way real ranks do
(rank.py: a batch of points, and of spans, a few times a second); this process receives and merges
them as a cell's monitor does. Also what a 4-rank run of 100k steps with the timeline on would hold.

    python -m bench.kernel_memory send ADDRESS KEYHEX RANKS STEPS     (the simulated ranks)
"""
import gc
import os
import subprocess
import sys
import tempfile
import time
from array import array

from .common import result

SPANS_PER_STEP = 8  # forward, backward, optimizer, data, two bucket all-reduces, a dist.all_reduce, one more
BATCH_STEPS = 500  # steps per batch: a quarter second of a fast loop


def send(address, key, ranks, steps):
    import zmq

    from ddplab.rank.recorder import FIELDS
    from ddplab.shared import wire

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(address)
    time.sleep(0.2)
    seq = [0] * ranks
    for start in range(0, steps, BATCH_STEPS):
        stop = min(steps, start + BATCH_STEPS)
        for r in range(ranks):
            points = {"step": array("q", range(start, stop)), "time": array("d", (s * 0.001 for s in range(start, stop))),
                      "loss": array("d", (1.0 / (s + 1) for s in range(start, stop))),
                      "samples": array("d", [64.0] * (stop - start))}
            spans = {name: array(code) for name, code in FIELDS}  # (the rank's recorder's columns)
            for s in range(start, stop):
                t = s * 0.001
                for k, (phase, op, bucket) in enumerate(((0, 0, -1), (1, 0, -1), (4, 1, 0), (4, 1, 1), (2, 0, -1),
                                                         (3, 0, -1), (4, 1, -1), (0, 0, -1))):
                    span = dict(cell=1, step=s, phase=phase, op=op, bucket=bucket, bytes=4096 if op else 0,
                                start=t + k * 1e-4, end=t + (k + 1) * 1e-4 + r * 1e-5, group=0 if op else -1,
                                seq=s if op else -1)
                    for name, value in span.items():
                        spans[name].append(value)
            seq[r] += 1
            sock.send_multipart(wire.encode(key, r, 1, points, gen=0, seq=seq[r], spans=spans))
        time.sleep(0.002)
    sock.send_multipart([b"done"])  # (unsigned: counted as dropped; it says the sender is through)
    time.sleep(0.5)
    sock.close(linger=1000)


def receive(ranks, steps):
    """(bytes of RSS growth per point, per span): this process as the notebook."""
    import secrets

    import psutil

    from ddplab.kernel.telemetry import Live, Telemetry, merge
    from ddplab.shared import state as st
    from ddplab.shared.timeline import CellSpans

    folder = tempfile.mkdtemp()
    telemetry = Telemetry(f"ipc://{folder}", secrets.token_bytes(32))
    live = Live.new(ranks)
    live.run_state.set_all(st.INIT)
    live.run_state.set_all(st.READY)
    live.run_state.begin_cell(list(range(ranks)), time.monotonic())
    live.spans = CellSpans(1, list(range(ranks)), 0.0)
    gc.collect()
    before = psutil.Process().memory_info().rss
    sender = subprocess.Popen([sys.executable, "-m", "bench.kernel_memory", "send", telemetry.address,
                               telemetry.key.hex(), str(ranks), str(steps)])
    deadline = time.monotonic() + 600
    while not telemetry.dropped and time.monotonic() < deadline and sender.poll() is None:  # until the sender is through
        for batch in telemetry.batches():
            merge(live, batch, time.monotonic())
        telemetry.wait(20)
    for batch in telemetry.batches():
        merge(live, batch, time.monotonic())
    sender.wait(30)
    if sender.returncode:
        raise RuntimeError(f"the simulated ranks failed (exit {sender.returncode})")
    live.spans.finish()
    gc.collect()
    grown = psutil.Process().memory_info().rss - before
    points, spans = ranks * steps, len(live.spans.rows)
    assert spans == points * SPANS_PER_STEP, (spans, points)
    telemetry.close()
    if not os.listdir(folder):
        os.rmdir(folder)
    return grown, points, spans


def run(quick=False):
    ranks, steps = (2, 20_000) if quick else (4, 100_000)
    grown, points, spans = receive(ranks, steps)
    # the points' own share: a run of the same size without spans would be points only; here both arrive,
    # so each is charged the whole growth over (points + spans): an upper bound for each
    per_item = grown / (points + spans)
    return [result("kernel_bytes_per_item", f"growth of the notebook's RSS while {ranks} simulated ranks send "
                   f"{steps} steps each ({points} history points and {spans} timeline spans), per point or span",
                   [per_item], unit="B", target=("<=", 64.0), grown_mb=round(grown / 2**20, 1),
                   run_100k_steps_4_ranks_mb=round(per_item * 4 * 100_000 * (1 + SPANS_PER_STEP) / 2**20))]


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], bytes.fromhex(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
