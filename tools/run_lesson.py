"""Run lesson notebooks top to bottom in a fresh kernel, as the tests do, and say how it went.

    python tools/run_lesson.py 05            # notebooks/05_*.ipynb
    python tools/run_lesson.py 05 --zh       # notebooks/zh/05_*.ipynb (the pool speaks Chinese)

Prints each failing cell's error, the seconds taken, and where the executed copy was written
(/tmp/lessons/...), so its outputs can be read. Exit status 1 if a cell failed that was not meant to.
"""
import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.common import ipc_kernel  # noqa: E402

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def run(path):
    nb = nbformat.read(path, as_version=4)
    km = ipc_kernel()
    km.start_kernel(cwd=str(path.parent), env={**os.environ, "JPY_SESSION_NAME": str(path),
                                                 "DDPLAB_CHECK_EXERCISES": "1"})  # judges tested on the run
    tic = time.monotonic()
    try:
        NotebookClient(nb, km=km, timeout=300, allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        km.shutdown_kernel()  # gracefully: what the lesson left for the kernel's end is cleaned up
    took = time.monotonic() - tic
    failed = 0
    for i, cell in enumerate(nb.cells):
        meant = "raises-exception" in cell.metadata.get("tags", [])
        for out in cell.get("outputs", []):
            if out.output_type == "error" and not meant:
                failed += 1
                print(f"cell {i}: {out.ename}: {out.evalue}\n    {cell.source[:200]!r}")
    out = pathlib.Path("/tmp/lessons") / path.relative_to(NOTEBOOKS)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    print(f"{path.relative_to(NOTEBOOKS)}: {took:.0f} s, {failed} unexpected error(s); executed copy: {out}")
    return failed


def main(args):
    zh = "--zh" in args
    folder = NOTEBOOKS / "zh" if zh else NOTEBOOKS
    failed = 0
    for name in [a for a in args if not a.startswith("--")]:
        failed += run(next(folder.glob(f"{name}*.ipynb")))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
