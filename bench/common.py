"""Shared pieces of the benchmarks: statistics, results, running cells in a real kernel."""
import json
import operator
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import weakref

OPS = {"<=": operator.le, ">=": operator.ge}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def result(name, what, values, unit="x", target=None, **details):
    """One line of the table: min/median/max of `values` (ratios or measures) and the target."""
    values = [float(v) for v in values]
    med = statistics.median(values)
    met = None if target is None else OPS[target[0]](med, target[1])
    return {"name": name, "what": what, "unit": unit, "values": values, "min": min(values), "median": med,
            "max": max(values), "target": list(target) if target else None, "met": met, "details": details}


def ratios(a, b):
    return [x / y for x, y in zip(a, b)]


def around(baseline):
    """For runs alternating T K T K ... T: each kernel's baseline, the mean of the T runs just before and
    just after it. This VM's speed drifts over a bench (torchrun's own runs rose 9% in one half hour);
    the two sides cancel a steady drift, where one side alone takes it for the lab's cost (or hides it)."""
    return [(before + after) / 2 for before, after in zip(baseline, baseline[1:])]


def ipc_kernel():
    """A kernel manager whose kernel talks over socket files in a private temporary folder: no TCP
    ports to race for when kernels start side by side, none open to other users."""
    from jupyter_client import KernelManager

    folder = tempfile.mkdtemp()
    km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(folder, "kernel"))
    weakref.finalize(km, shutil.rmtree, folder, True)  # the folder goes with its manager
    return km


def in_kernel(cells, timeout=1800):
    """Run cells in a fresh Jupyter kernel (nbclient); every line a cell prints as
    'BENCH <json>' is returned, in order."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    km = ipc_kernel()  # no TCP ports to race for, nor to expose
    try:
        NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": ROOT}}).execute(cwd=ROOT)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    found = []
    for cell in nb.cells:
        for out in cell.outputs:
            for line in (out.get("text") or "").splitlines():
                if line.startswith("BENCH "):
                    found.append(json.loads(line[6:]))
    return found


def timed(fn, *args, **kwargs):
    tic = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - tic


def python(*args, env=None, timeout=1800):
    """Run a Python module/script of this repository; return its stdout. Its temporary files
    (torchrun's log folders) are removed after it."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": tmp, **(env or {})})
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout
