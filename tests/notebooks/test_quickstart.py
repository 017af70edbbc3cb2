"""The quick start, executed end to end by nbclient as a user runs it on Binder: as an ordinary
account (made for the test, removed after) with ddplab installed as users install it (binder/postBuild's
`pip install .`, runtime dependencies only: tests/users/accounts.py), the kernel started through
binder/start, and the memory of the kernel and its pool measured: within Binder's 2 GB."""
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess

import nbformat
import pytest

from tests.users.accounts import Account, account_env, user_env, user_kernel, wait_until

from ..conftest import descendants
from .conftest import ARTIFACTS
from .run_like_binder import run

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIMIT = 2 * 10**9  # bytes: a Binder session has 2 GB
pytestmark = pytest.mark.pool
# run in the kernel after the notebook (not kept in it): whose kernel it was, and what it could import
PROBE = """import importlib.util, json, os, sys
import ddplab, torch
print(json.dumps({"uid": os.getuid(), "python": sys.executable, "torch": torch.__file__, "ddplab": ddplab.__file__,
                  "threads": [os.environ.get("OMP_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS"),
                              torch.get_num_threads()],
                  "test_extras": [m for m in ("pytest", "xdist", "hypothesis", "playwright", "mpi4py", "importlinter",
                                              "sphinx") if importlib.util.find_spec(m)]}))"""


@pytest.fixture(scope="module")
def env():
    return user_env()


@pytest.fixture
def binder_user():
    """An ordinary account with what a Binder session of this repository has in its home (the clone):
    the quick start, and binder/start."""
    account = Account.make("ddpq")
    home = pathlib.Path(account.home)
    for item in ("notebooks/00_quickstart.ipynb", "binder/start"):
        (home / item).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / item, home / item)
    subprocess.run(["chown", "-R", f"{account.uid}:{account.gid}", home / "notebooks", home / "binder"], check=True)
    yield account
    account.remove()


def text_of(cell):
    parts = []
    for o in cell.outputs:
        parts.append(o.get("text") or o.get("data", {}).get("text/plain", "") or o.get("evalue", ""))
    return "".join(parts)


def find(nb, source_start):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start))


@pytest.mark.slow
def test_quickstart_runs_end_to_end_within_binders_memory(env, binder_user):
    before = descendants()
    home = pathlib.Path(binder_user.home)
    notebook = home / "notebooks" / "00_quickstart.ipynb"
    km, folder = user_kernel(binder_user, env, launcher=["bash", home / "binder" / "start"])
    try:  # (jupyter_server tells the kernel its notebook's path)
        nb, result = run(notebook, km, account_env(binder_user, JPY_SESSION_NAME=str(notebook)), PROBE)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, ARTIFACTS / "00_quickstart.ipynb")  # the docs render it from here (no second run)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    # as a user runs it: the kernel and every process of its pool the account's, the user's python and
    # install of ddplab and torch (no test extras), the threads binder/start sets
    probe = json.loads(result["probe"].strip().splitlines()[-1])
    venv = str(env.parent.parent) + os.sep
    assert result["kernel"][0] == probe["python"] == str(env), (result["kernel"], probe)
    assert probe["uid"] == binder_user.uid and result["uids"] == {binder_user.uid}, (probe, result["uids"])
    assert probe["ddplab"].startswith(venv) and probe["torch"].startswith(venv), probe
    assert probe["test_extras"] == [], probe
    assert probe["threads"] == ["1", "1", 1], probe
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
    assert wait_until(lambda: binder_user.processes() == [], 10), binder_user.processes()  # every process of the account
    # nor a file of its in /tmp (torch._dynamo, which the zygote imports, makes torch's cache folder: in the
    # zygote's own folder, not /tmp/torchinductor_USER)
    assert binder_user.in_tmp() == []

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
