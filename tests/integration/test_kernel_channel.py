"""The notebook's own kernel: ddplab cannot change how Jupyter started it, but on a machine with other
accounts %ddp_start says when its channel is not private (TCP without encryption) and what an
administrator can set, and %ddp_status says how it talks, in real Jupyter kernels."""
import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient

from bench.common import ROOT, ipc_kernel

from .second_user import make_user

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("kernel-channel")]
CELLS = ["%load_ext ddplab", "%ddp_start 1 --no-dashboard", "%ddp_status", "%ddp_stop"]


@pytest.fixture(scope="module")
def other_account():
    yield from make_user()


def outputs(km):
    """What each cell printed (stdout and stderr together), in a kernel of that manager."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": ROOT}}).execute(cwd=ROOT)
    return ["".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            for cell in nb.cells]


def test_a_kernel_over_plain_tcp_is_named_with_what_to_set(other_account):
    from ddplab.kernel.report import kernel_fix

    _, start, status, stop = outputs(KernelManager(kernel_name="python3"))  # Jupyter's default: TCP
    assert "1 rank ready" in start and "other account" in start and "without encryption" in start, start
    assert kernel_fix() in start, start
    kernel = next(line for line in status.splitlines() if line.strip().startswith("kernel"))
    assert "TCP on 127.0.0.1 without encryption" in kernel and "transport = 'ipc'" in kernel, status
    assert "socket files in the pool's private folder (no TCP port)" in status, status
    assert "stopped 1 rank in" in stop


def test_a_kernel_over_ipc_is_private_and_not_warned_about(other_account):
    _, start, status, _ = outputs(ipc_kernel())
    assert "1 rank ready" in start and "without encryption" not in start, start
    assert "this kernel's channel: ipc socket files (only you can open them)" in start, start  # said, not warned
    kernel = next(line for line in status.splitlines() if line.strip().startswith("kernel"))
    assert "ipc socket files (only you can open them)" in kernel, status
