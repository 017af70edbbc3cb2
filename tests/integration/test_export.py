"""%ddp_export: the notebook's %%ddp cells as a torchrun script that ends where the notebook did,
digit for digit (a deterministic set-up: seeded, DistributedSampler with set_epoch)."""
import os
import re
import subprocess
import sys

import pytest
from IPython.core.error import UsageError

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("export")]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SETUP = """\
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(256, 8, generator=g), torch.randn(256, 1, generator=g))
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
"""
TRAIN = """\
%time x = 1
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=len(x))
print(f"rank {rank} final loss {loss.item()!r}")
"""


@pytest.mark.slow
def test_exported_cells_run_under_torchrun_to_the_same_losses(ip, no_pool, tmp_path, capsys):
    ip.run_line_magic("ddp_start", "2")
    try:
        with pytest.raises(UsageError, match="nothing to export"):
            ip.run_line_magic("ddp_export", str(tmp_path / "empty.py"))
        assert ip.run_cell(f"%%ddp\n{SETUP}").success
        assert not ip.run_cell("%%ddp\nraise ValueError('a cell that failed is not exported')").success
        assert ip.run_cell(f"%%ddp\n{TRAIN}").success
        assert ip.run_cell("%%ddp --ranks 0\nprint('only rank', rank)").success
        notebook = dict(re.findall(r"rank (\d) final loss ([-+0-9.e]+)", capsys.readouterr().out))
        path = tmp_path / "train.py"
        ip.run_line_magic("ddp_export", str(path))
        assert f"wrote 3 cells to {path}" in capsys.readouterr().out
    finally:
        ip.run_line_magic("ddp_stop", "")
    text = path.read_text()
    assert "a cell that failed" not in text and "left out by %ddp_export" in text and "if rank in (0,):" in text
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          str(path)], capture_output=True, text=True, timeout=180, cwd=str(tmp_path),
                         env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)})  # its logs
    assert run.returncode == 0, run.stderr[-3000:]
    script = dict(re.findall(r"rank (\d) final loss ([-+0-9.e]+)", run.stdout))
    assert len(notebook) == 2 and script == notebook  # every digit
    # the two ranks' prints share torchrun's stdout and may interleave mid-line: what is left once
    # every "final loss" is taken out is rank 0's one print, whatever the interleaving
    assert re.sub(r"rank \d final loss [-+0-9.e]+", " ", run.stdout).split() == ["only", "rank", "0"]
