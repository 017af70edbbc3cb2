# %% [markdown]
# # ddplab quick start
#
# Four processes on this machine form one real `torch.distributed` **gloo** process group. `%%ddp` runs a cell on every rank; each rank's output is shown apart.
#
# 四个进程组成一个真实的 gloo 进程组：`%%ddp` 在每个 rank 上运行同一个单元格，然后用 DistributedDataParallel 训练一个小模型。

# %%
%load_ext ddplab

# %% [markdown]
# Start 4 ranks. Each one gets `rank`, `world_size`, `torch`, `dist` and `nn`, and one CPU thread's share of the cores. The dashboard shows each rank's state (`--lang zh` labels it in Chinese), its loss and throughput, and its output.

# %%
%ddp_start 4

# %% [markdown]
# Every rank contributes its rank number; `all_reduce` sums them in place, on every rank: 0 + 1 + 2 + 3 = 6.

# %%
%%ddp
t = torch.tensor([float(rank)])
dist.all_reduce(t)
print(rank, world_size, t.item())

# %% [markdown]
# Variables live on in each rank between cells. `%ddp_gather` brings one back, as a list indexed by rank.

# %%
%ddp_gather t

# %% [markdown]
# ## A short DDP training run
#
# The same model starts on every rank. `DistributedSampler` gives each rank its own quarter of the data; on `backward()` DDP averages the gradients across ranks, so every rank takes the same step.

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from ddplab.workloads import synthetic_classification, mlp, param_checksum

data = synthetic_classification(n=8192)
sampler = DistributedSampler(data)            # rank r sees samples r, r+4, r+8, ... (shuffled)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = DDP(mlp(hidden=128))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

for epoch in range(3):
    sampler.set_epoch(epoch)                    # a new shuffle each epoch, the same on all ranks
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                         # gradients are all-reduced here
        opt.step()
        ddplab.log(loss=loss, samples=len(x))     # one point for the live dashboard
    print(f'epoch {epoch}: loss {loss.item():.3f} after {step + 1} steps on {len(sampler)} samples')

checksum = param_checksum(model.module)

# %% [markdown]
# While the cell ran, the dashboard above (and in the cell) showed each rank move from *ready* to *training* to *done*, its loss and its samples/s. Every point is kept: `%ddp_history` returns them all.

# %%
h = %ddp_history
h

# %% [markdown]
# Each rank saw different data, yet all hold the same parameters:

# %%
checksums = %ddp_gather checksum
print('parameters identical on every rank:', len(set(checksums)) == 1)

# %%
%ddp_status

# %% [markdown]
# Stop the pool: engines, controller and every helper process end.

# %%
%ddp_stop
