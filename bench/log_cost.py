"""The cost of one ddplab.log() call, amortized, with the telemetry thread sending
every point to a live socket (the notebook's end). An empty function call measured the same
way in the same run is the floor."""
import time

import torch

import ddplab.rank as rank
from ddplab.kernel.telemetry import Telemetry

from .common import result


def per_call(fn, calls, arg):
    tic = time.perf_counter()
    for _ in range(calls):
        fn(loss=arg, samples=64)
    return (time.perf_counter() - tic) / calls * 1e6


def noop(loss=None, samples=None, step=None, **scalars):
    pass


def run(quick=False):
    calls, repeats = (20_000, 2) if quick else (200_000, 5)
    import secrets
    import tempfile

    folder = tempfile.mkdtemp(prefix="ddplab-bench-")  # (a local pool's telemetry: a socket file)
    sink = Telemetry(f"ipc://{folder}", secrets.token_bytes(32))
    rank.RANK.sender.connect(sink.address, sink.key, sink.generation)
    loss = torch.tensor(0.5, requires_grad=True) * 2  # a loss as training makes it
    empty, floats, tensors, received = [], [], [], 0
    for _ in range(repeats):
        empty.append(per_call(noop, calls, 0.5))
        floats.append(per_call(rank.log, calls, 0.5))
        tensors.append(per_call(rank.log, calls, loss))
        time.sleep(3 * 0.25)  # the telemetry thread's flush interval (DDPLab.flush)
        received = sum(len(b) for b in sink.batches())
        rank.RANK.forget()
    sink.close()
    __import__("shutil").rmtree(folder, ignore_errors=True)
    return [result("log", "ddplab.log(loss=<tensor>, samples=64), amortized (us per call)", tensors, unit="us",
                   target=("<=", 5.0), float_loss_us=floats, empty_call_us=empty,
                   points_sent_live=f"{received} of {2 * calls} in the last repeat")]


if __name__ == "__main__":
    print(run())
