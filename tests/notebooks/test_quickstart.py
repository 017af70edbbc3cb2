"""The quickstart notebook, executed end to end by nbclient in a real kernel, the way Binder runs
it (through binder/start), with the memory of the kernel and its pool measured: within Binder's 2 GB."""
import datetime
import json
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest

from ..conftest import descendants
from .conftest import ARTIFACTS

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LIMIT = 2 * 10**9  # bytes: a Binder session has 2 GB
pytestmark = pytest.mark.pool


def text_of(cell):
    parts = []
    for o in cell.outputs:
        parts.append(o.get("text") or o.get("data", {}).get("text/plain", "") or o.get("evalue", ""))
    return "".join(parts)


def find(nb, source_start):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start))


@pytest.mark.slow
def test_quickstart_runs_end_to_end_within_binders_memory(tmp_path):
    before = descendants()
    out, executed = tmp_path / "result.json", tmp_path / "quickstart.ipynb"
    subprocess.run(["bash", "binder/start", sys.executable, str(pathlib.Path(__file__).parent / "run_like_binder.py"),
                    str(NOTEBOOKS / "00_quickstart.ipynb"), str(out), str(executed)], cwd=ROOT, check=True, timeout=300)
    result = json.loads(out.read_text())
    nb = nbformat.read(executed, as_version=4)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, ARTIFACTS / "00_quickstart.ipynb")  # the docs render it from here (no second run)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == [] and result["errors"] == []
    print(f"kernel + pool of 4 after training: {result['peak_pss'] / 1e6:.0f} MB PSS")
    assert result["processes"] >= 4 and 0 < result["peak_pss"] < LIMIT
    start = find(nb, "%ddp_start")
    reported = float(re.search(r"4 ranks ready in ([\d.]+) s \(gloo, 1 thread", text_of(start)).group(1))
    took = (datetime.datetime.fromisoformat(start.metadata.execution["shell.execute_reply"])
            - datetime.datetime.fromisoformat(start.metadata.execution["iopub.execute_input"])).total_seconds()
    assert took - 0.5 <= reported <= took + 0.05, (reported, took)  # what the learner waited, not a part of it
    reduce_out = text_of(find(nb, "%%ddp\nt = "))
    assert [f"[rank {r}] {r} 4 6.0" in reduce_out for r in range(4)] == [True] * 4
    assert text_of(find(nb, "%ddp_gather t")) == "[tensor([6.]), tensor([6.]), tensor([6.]), tensor([6.])]"
    train_out = text_of(find(nb, "%%ddp\nfrom torch.nn.parallel"))
    losses = [float(x) for x in re.findall(r"epoch 2: loss ([\d.]+)", train_out)]
    assert len(losses) == 4 and max(losses) < 2.0  # every rank trained (chance level is 2.3)
    assert "parameters identical on every rank: True" in text_of(find(nb, "checksums"))
    status = text_of(find(nb, "%ddp_status"))
    assert len(re.findall(r"^\d\s+\d+\s+\d+\s+\S+\s+loopback\s+1\s+done$", status, re.M)) == 4
    assert "stopped 4 ranks" in text_of(find(nb, "%ddp_stop"))
    assert re.search(r"History\(768 points from ranks 0-3", text_of(find(nb, "h = %ddp_history")))
    assert descendants() <= before  # kernel and pool are gone

    # the training cell keeps a static picture of how it ended: every rank done, both plots
    snapshot = "".join(o.get("data", {}).get("text/html", "") for o in find(nb, "%%ddp\nfrom torch.nn.parallel").outputs)
    assert len(re.findall(r'class="rank-token" data-rank="\d" data-state="done"', snapshot)) == 4
    assert snapshot.count('<svg xmlns="http://www.w3.org/2000/svg" width="396"') == 2  # the two plots
    assert snapshot.count("<polyline") == 4 + 4 + 1  # loss and samples/s of each rank, and the total

    # the saved widget state holds the dashboard's models, as they were at the end
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    models = [m["state"] for m in state.values()]
    boxes = [m for m in models if "ddplab-dashboard" in m.get("_dom_classes", ())]
    assert len(boxes) == 1
    html_values = [m.get("value", "") for m in models if m.get("_model_name") == "HTMLModel"]
    table = next(v for v in html_values if '<table class="ddplab-table"' in v)
    assert len(re.findall(r'<tr class="ddplab-rank', table)) == 4 and table.count('data-state="stopped"') == 4
    assert any("ddplab-diagram" in v for v in html_values)
    images = [m for m in models if "ddplab-loss-plot" in m.get("_dom_classes", ())]
    assert len(images) == 1
    tabs = [m for m in models if m.get("_model_name") == "TabModel"]
    assert tabs and tabs[0]["titles"] == ["rank 0", "rank 1", "rank 2", "rank 3"]
