"""Command line: `ddplab demo` trains a small model with DDP on a local pool, headless."""
import argparse
import sys
import time
from collections.abc import Sequence

from .. import __version__
from ..shared.errors import DDPLabError, RankFailed

DEMO_CELL = """\
from ddplab.workloads import train_ddp
summary = train_ddp(steps={steps}, batch={batch})
"""


def demo(ranks: int | None = None, steps: int = 200, batch: int = 64) -> int:
    """Start a pool, train, print the summary, stop. Returns the process exit code."""
    from ..dashboard.text import Progress, TextView
    from ..processes.zygote import running_zygote, stop_zygote
    from ..shared.config import PoolConfig
    from .lab import Lab

    ours = running_zygote() is None  # the zygote this run starts is ours to stop; another's is not
    lab = Lab(config=PoolConfig.make(ranks))
    lab.view = TextView(every=1.0)  # per-rank step, loss and samples/s from ddplab.log, once a second
    print(f"ddplab demo: {lab.world_size} ranks, {steps} steps of DistributedDataParallel training "
          f"(MLP 784-512-512-10, batch {batch} per rank, DistributedSampler)", flush=True)
    progress = Progress(stream=sys.stdout)
    try:
        lab.start(progress=progress)
        progress.done(lab.report.ready())
        lab.run(DEMO_CELL.format(steps=steps, batch=batch))
        summaries = lab.gather("summary")
    except RankFailed as exc:
        print("\n".join(exc.report(color=sys.stderr.isatty())), file=sys.stderr)
        return 1
    finally:
        tic = time.perf_counter()
        lab.stop()
        stopped = time.perf_counter() - tic
        if ours:
            stop_zygote()  # one pool per run: nothing to keep warm for
    print(f"\n{'rank':>4}  {'final loss':>10}  {'samples/s':>9}  {'parameter checksum':>20}")
    for s in summaries:
        print(f"{s['rank']:>4}  {s['loss']:>10.4f}  {s['samples_per_s']:>9.0f}  {s['checksum']:>20.10g}")
    total = sum(s["samples_per_s"] for s in summaries)
    same = len({s["checksum"] for s in summaries}) == 1
    print(f"total {total:.0f} samples/s; parameters identical on every rank: {'yes' if same else 'NO'}; "
          f"pool stopped in {stopped:.1f} s")
    return 0 if same else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddplab", description="Interactive PyTorch DDP on CPU.")
    parser.add_argument("--version", action="version", version=f"ddplab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="train a small MLP with DDP on a local pool and print per-rank progress")
    p.add_argument("--ranks", type=int, default=None, help="number of ranks (default: from the cores, at most 4)")
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--batch", type=int, default=64, help="batch size per rank (default 64)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch must be at least 1")
    try:
        return demo(args.ranks, args.steps, args.batch)
    except DDPLabError as exc:
        print(f"ddplab: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ddplab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
