"""How long each lesson takes top to bottom, as a learner runs it: a fresh kernel per lesson (its start,
%load_ext, %ddp_start and every pool the lesson makes are all counted), every cell in order (nbclient),
on a copy of the notebooks (what a lesson writes lands there). The English editions: the Chinese ones
run the same code (tests/notebooks checks the code cells are identical). Target: the slowest lesson
within 2 minutes on a 2-core machine, as the README says. The tests execute every lesson of both
editions too, but hold them only to a bound that catches a runaway (three times this), since a test's
time says as much about the host as about the lesson.
"""
import os
import pathlib
import shutil
import statistics
import tempfile
import time
from typing import Any

from .common import ROOT, ipc_kernel, result

BUDGET = 120  # seconds, the slowest lesson
QUICK = ["00_quickstart"]


def execute(path: pathlib.Path, env: dict[str, str] | None = None,
            timeout: float = 3 * BUDGET) -> tuple[Any, float, list[tuple[str, str]]]:
    """Execute the notebook at `path` in a fresh kernel (env: added to its environment); (the executed
    notebook, seconds from the kernel's start to the end of its shutdown, the cells that failed and were
    not meant to: (source, error name)). Also tools/run_lesson.py's."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    km = ipc_kernel()
    tic = time.perf_counter()
    km.start_kernel(cwd=str(path.parent), env={**os.environ, "JPY_SESSION_NAME": str(path), **(env or {})})
    try:
        NotebookClient(nb, km=km, timeout=timeout, allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        km.shutdown_kernel()  # gracefully, as a learner's kernel ends: what the lesson left is cleaned up
    took = time.perf_counter() - tic
    failed = [(c.source[:200], f"{o.get('ename')}: {o.get('evalue')}") for c in nb.cells if c.cell_type == "code"
              if "raises-exception" not in c.metadata.get("tags", []) for o in c.get("outputs", [])
              if o.output_type == "error"]
    return nb, took, failed


def lesson_seconds(path: pathlib.Path) -> float:
    """Seconds the notebook at `path` takes in a fresh kernel; raises if a cell failed that was not
    meant to (a lesson that fails is not timed)."""
    _, took, failed = execute(path)
    if failed:
        raise RuntimeError(f"{path.name}: cells failed: {failed}")
    return took


def run(quick: bool = False) -> list[dict]:
    folder = pathlib.Path(tempfile.mkdtemp(prefix="ddplab-bench-lessons-"))
    try:
        for p in pathlib.Path(ROOT, "notebooks").glob("*.ipynb"):
            shutil.copy(p, folder)
        names = QUICK if quick else sorted(p.stem for p in folder.glob("[0-9][0-9]_*.ipynb"))
        seconds = {name: round(lesson_seconds(folder / f"{name}.ipynb"), 1) for name in names}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    slowest = max(seconds, key=seconds.__getitem__)
    return [
        result("lesson_slowest", f"the slowest lesson top to bottom in a fresh kernel ({slowest}) (s)",
               [seconds[slowest]], unit="s", target=("<=", BUDGET), seconds=seconds),
        result("lesson_median", f"the median of the {len(seconds)} lessons (s)", [statistics.median(seconds.values())],
               unit="s"),
    ]
