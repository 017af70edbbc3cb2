"""Run a notebook the way Binder would, and measure memory (run through binder/start).

    bash binder/start python run_like_binder.py NOTEBOOK OUT.json EXECUTED.ipynb

Executes every cell; after each cell that starts or uses the pool, it sums the proportional set
size (PSS: shared pages split among the processes sharing them) of the kernel and all its
descendants (engines, controller, the zygote, helpers), and keeps the peak. Writes errors, outputs
and the peak to OUT.json, and the executed notebook to EXECUTED.ipynb.
"""
import json
import pathlib
import sys

import nbformat
import psutil
from nbclient import NotebookClient

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repository: bench.common
from bench.common import ipc_kernel  # noqa: E402


def pss(pid):
    total = 0
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass
    return total


def main(path, out, executed):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, km=ipc_kernel(), timeout=120,
                            resources={"metadata": {"path": str(pathlib.Path(path).parent)}})
    peak, ranks = 0, 0
    with client.setup_kernel(cwd=str(pathlib.Path(path).parent)):
        pid = client.km.provisioner.pid
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            client.execute_cell(cell, i)
            if "ddp" in cell.source and "%ddp_stop" not in cell.source:
                ranks = max(ranks, len(psutil.Process(pid).children(recursive=True)))
                peak = max(peak, pss(pid))
        client.set_widgets_metadata()
    client.km.shutdown_kernel(now=True)
    outputs = ["".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in c.outputs)
               for c in nb.cells if c.cell_type == "code"]
    errors = [o.get("evalue") for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    import torch

    nbformat.write(nb, executed)  # with the widget state, as a saved notebook keeps it
    pathlib.Path(out).write_text(json.dumps({"peak_pss": peak, "processes": ranks, "errors": errors,
                                             "outputs": outputs, "torch": torch.__version__}))


if __name__ == "__main__":
    main(*sys.argv[1:])
