"""Command line: `ddplab demo` trains a small model with DDP on a local pool, headless; `ddplab class
create DIR` makes a class folder; `ddplab report --out DIR` writes a learner's report to hand in."""
import argparse
import sys
import time
from collections.abc import Sequence

from ..shared.errors import DDPLabError, RankFailed
from ..shared.version import VERSION

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


def class_create(folder: str, learners_group: str | None = None) -> int:
    """Make the class folder and say how learners join it."""
    from .classroom import create_class, group_sharers

    path = create_class(folder, learners_group)
    print(f"class folder {path} made (mode 3733: learners add their own file, nobody else can list it); each learner "
          f"joins it in a notebook with ddplab.classroom.join({str(path)!r}, 'their name'), and you read it with "
          f"ddplab.classroom.Class({str(path)!r})")
    sharers = group_sharers(path)
    if sharers:
        shown = ", ".join(sharers[:5]) + (f" and {len(sharers) - 5} more" if len(sharers) > 5 else "")
        print(f"note: the folder's group (your primary group) also has {shown}: they could read a learner's file if "
              "they learned its random name; a group of your own is safer (chgrp the folder)")
    return 0


def report(out: str, record: str | None = None, lang: str = "en") -> int:
    """Write the learner's report from the own record."""
    from .classroom import write_report

    folder = write_report(out, record, lang)
    print(f"wrote report.md, report.json and results.json (Gradescope's) to {folder}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddplab", description="Interactive PyTorch DDP on CPU.")
    parser.add_argument("--version", action="version", version=f"ddplab {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="train a small MLP with DDP on a local pool and print per-rank progress")
    p.add_argument("--ranks", type=int, default=None, help="number of ranks (default: from the cores, at most 4)")
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--batch", type=int, default=64, help="batch size per rank (default 64)")
    c = sub.add_parser("class", help="a class folder: learners' predictions and answers, for the teacher")
    class_sub = c.add_subparsers(dest="class_command", required=True)
    create = class_sub.add_parser("create", help="make a class folder learners can add to but not list (mode 3733)")
    create.add_argument("dir", help="the folder to make (new, or empty and yours)")
    create.add_argument("--learners-group", default=None,
                        help="the Unix group of the class's learners: files of anyone else are skipped when read")
    r = sub.add_parser("report", help="write your report to hand in: report.md, report.json and Gradescope's results.json")
    r.add_argument("--out", required=True, help="the folder to write the report to (made if missing)")
    r.add_argument("--record", default=None, help="your record (default ~/.ddplab/record.jsonl)")
    r.add_argument("--lang", choices=("en", "zh"), default="en", help="the report's language (default en)")
    args = parser.parse_args(argv)
    if args.command == "demo" and (args.steps < 1 or args.batch < 1):
        parser.error("--steps and --batch must be at least 1")
    try:
        if args.command == "class":
            return class_create(args.dir, args.learners_group)
        if args.command == "report":
            return report(args.out, args.record, args.lang)
        return demo(args.ranks, args.steps, args.batch)
    except DDPLabError as exc:
        print(f"ddplab: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ddplab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
