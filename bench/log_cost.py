"""Cost of one ddplab.log() call, amortized, with the telemetry thread sending to a live socket.

    python bench/log_cost.py [--calls N] [--repeats R]

Target (issue 3): at most 5 microseconds per call. Compares against an empty Python
function call measured the same way in the same run.
"""
import argparse
import statistics
import time

import torch

import ddplab.rank as rank
from ddplab.monitor import Telemetry


def per_call(fn, calls, arg):
    tic = time.perf_counter()
    for _ in range(calls):
        fn(loss=arg, samples=64)
    return (time.perf_counter() - tic) / calls * 1e6


def noop(loss=None, samples=None, step=None, **scalars):
    pass


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    sink = Telemetry()  # the notebook's end, so batches really go out
    rank._connect(sink.address)
    loss_tensor = torch.tensor(0.5, requires_grad=True) * 2
    results = {"noop": [], "log(float)": [], "log(tensor)": []}
    for _ in range(args.repeats):
        results["noop"].append(per_call(noop, args.calls, 0.5))
        results["log(float)"].append(per_call(rank.log, args.calls, 0.5))
        results["log(tensor)"].append(per_call(rank.log, args.calls, loss_tensor))
        time.sleep(2 * rank.FLUSH_EVERY)
        received = sum(len(b[2]) for b in sink.batches())
        with rank._lock:
            rank._points.clear()
            rank._sent = 0
    out = {k: {"min": min(v), "median": statistics.median(v), "max": max(v)} for k, v in results.items()}
    for k, v in out.items():
        print(f"{k:12s} {v['median']:6.2f} us/call (min {v['min']:.2f}, max {v['max']:.2f})")
    print(f"target: log() at most 5 us per call amortized -> "
          f"{'met' if out['log(tensor)']['median'] <= 5 else 'NOT met'}; "
          f"the last repeat sent {received} of {2 * args.calls} points live")
    return out


if __name__ == "__main__":
    main()
