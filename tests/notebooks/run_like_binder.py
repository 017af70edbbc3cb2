"""Run a notebook as Binder would, and measure its memory (tests/notebooks/test_quickstart.py).

run(path, km, env, probe) executes every cell of the notebook at `path` in the kernel `km` starts
(the test's: as an ordinary account, through binder/start, with a user's install of ddplab), in the
notebook's folder. After each cell that starts or uses the pool it sums the proportional set size
(PSS: shared pages split among the processes sharing them) of the kernel and all its descendants
(engines, controller, the zygote, helpers), keeps the peak, and notes whose processes they are.
Then it runs `probe` in that kernel (a cell not kept in the notebook: what it prints is returned)
and shuts the kernel down. Returns the executed notebook, with its widget state as a saved notebook
keeps it, and what was measured.
"""
import pathlib

import nbformat
import psutil
from nbclient import NotebookClient


def tree(pid):
    """The kernel and its descendants."""
    kernel = psutil.Process(pid)
    return [kernel, *kernel.children(recursive=True)]


def pss(processes):
    total = 0
    for p in processes:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass
    return total


def uids(processes):
    found = set()
    for p in processes:
        try:
            found.add(p.uids().real)
        except psutil.Error:
            pass
    return found


def run(path, km, env, probe):
    nb = nbformat.read(path, as_version=4)
    folder = str(pathlib.Path(path).parent)
    client = NotebookClient(nb, km=km, timeout=120, shutdown_kernel="immediate", resources={"metadata": {"path": folder}})
    measured = {"peak_pss": 0, "processes": 0, "uids": set()}
    with client.setup_kernel(cwd=folder, env=env, cleanup_kc=True):  # (cleanup: the kernel is shut down, even on failure)
        pid = km.provisioner.pid
        measured["kernel"] = psutil.Process(pid).cmdline()
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            client.execute_cell(cell, i)
            if "ddp" in cell.source and "%ddp_stop" not in cell.source:
                processes = tree(pid)
                measured["processes"] = max(measured["processes"], len(processes) - 1)
                measured["peak_pss"] = max(measured["peak_pss"], pss(processes))
                measured["uids"] |= uids(processes)
        client.set_widgets_metadata()
        nb.cells.append(nbformat.v4.new_code_cell(probe))
        try:
            said = client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
        finally:
            nb.cells.pop()
    measured["probe"] = "".join(o.get("text", "") for o in said.outputs)
    return nb, measured
