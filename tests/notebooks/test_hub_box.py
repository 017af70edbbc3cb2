"""A classroom hub's session: 1 GiB of memory for the kernel and everything it starts (a memory cgroup,
as JupyterHub's spawners set one), the learner an ordinary account with a user's install. Asking for
more ranks than fit is refused in one line that says what fits, before anything starts; a rank that
outgrows the session is named killed for memory, with the session's limit, and the note after the cell
says what fits; the pool is usable again after %ddp_restart."""
import nbformat
import pytest
from nbclient import NotebookClient

from tests.users.accounts import MemoryBox

from .conftest import SharedKernel

LIMIT = 2**30  # a hub's 1 GiB
pytestmark = [pytest.mark.pool, pytest.mark.slow, pytest.mark.xdist_group("binder-box")]

CELLS = [
    "%load_ext ddplab",
    # more than fit: refused before anything starts
    "from IPython.core.error import UsageError\n"
    "try:\n"
    "    get_ipython().run_line_magic('ddp_start', '8')\n"
    "except UsageError as e:\n"
    "    print('REFUSED', e)\n"
    "import ddplab\n"
    "print('RUNNING', ddplab._magics[id(get_ipython())].lab)",
    "%ddp_start 2",
    # out of memory, the OOM killer is to take a rank before the notebook's kernel (which holds the learner's work)
    "%%ddp\nimport os\nprint('ADJ', open('/proc/self/oom_score_adj').read().strip())\n"
    "if rank == 0:\n    print('ZYGOTE', open(f'/proc/{os.getppid()}/oom_score_adj').read().strip())",
    "print('KERNEL', open('/proc/self/oom_score_adj').read().strip())",
    # rank 1 writes 2.5 GiB: the OOM killer ends it (the largest process of the session)
    "%%ddp --expect RankFailed\n"
    "if rank == 1:\n"
    "    hog = [torch.ones(2**24) for _ in range(40)]\n"
    "dist.barrier()",
    "%ddp_restart",
    "%%ddp\nt = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nprint('SUM', int(t))",
    "%ddp_stop",
]


def test_a_one_gib_hub_says_what_fits_and_names_a_rank_killed_for_memory(learner):
    box = MemoryBox(LIMIT)
    kernel = SharedKernel(learner, box=box)
    try:
        kernel._ensure()
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
        NotebookClient(nb, km=kernel.km, timeout=240, kernel_name="python3").execute()
        killed = box.oom_kills()
    finally:
        kernel.shutdown()
        box.remove()
    out = ["".join(o.get("text", "") + "".join(o.get("data", {}).get("text/plain", "")) for o in c.outputs)
           for c in nb.cells]
    refused = out[1]
    assert "REFUSED 8 ranks need about" in refused and "free of its 1.00 GiB" in refused, refused
    assert "fits, or %ddp_start 8 --force starts them anyway" in refused and "RUNNING None" in refused, refused
    assert out[3].count("ADJ 500") == 2 and "ZYGOTE 200" in out[3] and "KERNEL 0" in out[4], out[3:5]
    failed = out[5]
    assert killed >= 1, "nothing was killed for memory: the test's rank did not outgrow the session"
    assert "killed for memory (the kernel's OOM killer): this session may use 1.00 GiB" in failed, failed
    assert "the kernel's OOM killer ended rank 1" in failed and "%ddp_start" in failed, failed
    assert "SUM 3" in out[7], out[7]
    print(refused.strip(), failed.strip(), f"(OOM kills in the box: {killed})", sep="\n")
