"""Writes notebooks/00_quickstart.ipynb (run once; the notebook is committed without outputs)."""
import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
    md("# ddplab quick start\n\n"
       "Four processes on this machine form one real `torch.distributed` **gloo** process group. "
       "`%%ddp` runs a cell on every rank; each rank's output is shown apart.\n\n"
       "四个进程组成一个真实的 gloo 进程组：`%%ddp` 在每个 rank 上运行同一个单元格，"
       "然后用 DistributedDataParallel 训练一个小模型。"),
    code("%load_ext ddplab"),
    md("Start 4 ranks. Each one gets `rank`, `world_size`, `torch`, `dist` and `nn`, "
       "and one CPU thread's share of the cores. The dashboard shows each rank's state "
       "(`--lang zh` labels it in Chinese), its loss and throughput, and its output."),
    code("%ddp_start 4"),
    md("Every rank contributes its rank number; `all_reduce` sums them in place, on every rank: "
       "0 + 1 + 2 + 3 = 6."),
    code("%%ddp\n"
         "t = torch.tensor([float(rank)])\n"
         "dist.all_reduce(t)\n"
         "print(rank, world_size, t.item())"),
    md("Variables live on in each rank between cells. `%ddp_gather` brings one back, as a list indexed by rank."),
    code("%ddp_gather t"),
    md("## A short DDP training run\n\n"
       "The same model starts on every rank. `DistributedSampler` gives each rank its own quarter of "
       "the data; on `backward()` DDP averages the gradients across ranks, so every rank takes the same step."),
    code("%%ddp\n"
         "from torch.nn.parallel import DistributedDataParallel as DDP\n"
         "from torch.utils.data import DataLoader, DistributedSampler\n"
         "from ddplab.workloads import synthetic_classification, mlp, param_checksum\n"
         "\n"
         "data = synthetic_classification(n=8192)\n"
         "sampler = DistributedSampler(data)            # rank r sees samples r, r+4, r+8, ... (shuffled)\n"
         "loader = DataLoader(data, batch_size=32, sampler=sampler)\n"
         "model = DDP(mlp(hidden=128))\n"
         "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
         "\n"
         "for epoch in range(3):\n"
         "    sampler.set_epoch(epoch)                    # a new shuffle each epoch, the same on all ranks\n"
         "    for step, (x, y) in enumerate(loader):\n"
         "        opt.zero_grad()\n"
         "        loss = nn.functional.cross_entropy(model(x), y)\n"
         "        loss.backward()                         # gradients are all-reduced here\n"
         "        opt.step()\n"
         "        ddplab.log(loss=loss, samples=len(x))     # one point for the live dashboard\n"
         "    print(f'epoch {epoch}: loss {loss.item():.3f} after {step + 1} steps on {len(sampler)} samples')\n"
         "\n"
         "checksum = param_checksum(model.module)"),
    md("While the cell ran, the dashboard above (and in the cell) showed each rank move from *ready* to "
       "*training* to *done*, its loss and its samples/s. Every point is kept: `%ddp_history` returns them all."),
    code("h = %ddp_history\n"
         "h"),
    md("Each rank saw different data, yet all hold the same parameters:"),
    code("checksums = %ddp_gather checksum\n"
         "print('parameters identical on every rank:', len(set(checksums)) == 1)"),
    code("%ddp_status"),
    md("Stop the pool: engines, controller and every helper process end."),
    code("%ddp_stop"),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
nbf.write(nb, "notebooks/00_quickstart.ipynb")
