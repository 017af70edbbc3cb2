"""The history in the notebook: bytes per point (<= 64) and seconds to build it from the ranks per
million points (<= 1 s), through %ddp_history on a real pool: each rank logs its share of the
points (loss, samples, and an extra lr on every point), then lab.records.history() pulls them all."""
import time

from .common import result

LOG = ("import time\n_t = time.perf_counter()\nfor _s in range({k}):\n"
       "    ddplab.log(loss=1.0 / (_s + 1), samples=64, lr=0.1)\nlog_seconds = time.perf_counter() - _t")


def run(quick=False):
    from ddplab import Lab

    n, points, repeats = (2, 100_000, 1) if quick else (4, 1_000_000, 3)
    per_point, per_million, log_us = [], [], []
    with Lab(n) as lab:
        for _ in range(repeats):
            lab.run(LOG.format(k=points // n))
            log_us += [s / (points // n) * 1e6 for s in lab.gather("log_seconds")]
            tic = time.perf_counter()
            history = lab.records.history()
            seconds = time.perf_counter() - tic
            assert len(history) >= points
            mine = history.where(cell=lab.run_state.cell)
            per_point.append(mine.nbytes / len(mine))
            per_million.append(seconds / (len(history) / 1e6))
    return [result("history_bytes", "bytes per point of %ddp_history in the notebook (loss, samples, lr logged)",
                   per_point, unit="B", target=("<=", 64.0)),
            result("history_build", f"seconds to pull %ddp_history from {n} ranks, per million points",
                   per_million, unit="s", target=("<=", 1.0), log_us_per_call=log_us)]
