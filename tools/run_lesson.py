"""Run lesson notebooks top to bottom in a fresh kernel, as the tests do, and say how it went.

    python tools/run_lesson.py 05            # notebooks/05_*.ipynb
    python tools/run_lesson.py 05 --zh       # notebooks/zh/05_*.ipynb (the pool speaks Chinese)

Prints each failing cell's error, the seconds taken, and where the executed copy was written
(/tmp/lessons/...), so its outputs can be read. Exit status 1 if a cell failed that was not meant to.
"""
import pathlib
import sys

import nbformat

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.lessons import execute  # noqa: E402

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def run(path):
    nb, took, failed = execute(path, {"DDPLAB_CHECK_EXERCISES": "1"}, timeout=300)  # judges tested on the run
    for source, error in failed:
        print(f"{error}\n    {source!r}")
    out = pathlib.Path("/tmp/lessons") / path.relative_to(NOTEBOOKS)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    print(f"{path.relative_to(NOTEBOOKS)}: {took:.0f} s, {len(failed)} unexpected error(s); executed copy: {out}")
    return len(failed)


def main(args):
    zh = "--zh" in args
    folder = NOTEBOOKS / "zh" if zh else NOTEBOOKS
    failed = 0
    for name in [a for a in args if not a.startswith("--")]:
        failed += run(next(folder.glob(f"{name}*.ipynb")))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
