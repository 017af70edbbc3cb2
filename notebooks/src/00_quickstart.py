# %% [markdown]
# # Lesson 0 · Quick start
#
# **In short.** Four processes on this machine form one real `torch.distributed` **gloo** process
# group. `%%ddp` runs a cell on every rank, each rank's output shown apart; variables live on in each
# rank between cells; and a small model trains with `DistributedDataParallel` while the dashboard
# follows every rank.
#
# **You will learn**
# - how `%ddp_start` gives you ranks that form one gloo group, with `rank`, `world_size` and `dist` ready
# - how `%%ddp` runs a cell on every rank and keeps each rank's variables between cells
# - how `all_reduce` combines a value from every rank, and `%ddp_gather` brings values back
# - how a DDP training looks on the live dashboard, and how `%ddp_stop` leaves nothing running
#
# **Study time:** about 15 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** each rank's output apart, a sum over ranks, and a short DDP training on the live
# dashboard.

# %% [markdown] lang=zh
# # 第 0 课 · 快速入门
#
# **简而言之**：本机上的四个进程组成一个真实的 `torch.distributed` **gloo** 进程组。`%%ddp` 在每个 rank 上运行同一个单元格，每个 rank 的输出分开显示；变量在两个单元格之间一直保留在各个 rank 中；最后用 `DistributedDataParallel` 训练一个小模型，仪表盘同时跟踪每个 rank。
#
# **你将学到**
# - `%ddp_start` 怎样启动组成一个 gloo 进程组的多个 rank，并在其中备好 `rank`、`world_size` 和 `dist`
# - `%%ddp` 怎样在每个 rank 上运行一个单元格，并在单元格之间保留每个 rank 的变量
# - `all_reduce` 怎样把每个 rank 的值合起来，`%ddp_gather` 怎样把各 rank 的值取回 notebook
# - 一次 DDP 训练在实时仪表盘上是什么样子，以及 `%ddp_stop` 怎样让一切停止运行
#
# **学习时间**：约 15 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：每个 rank 分开显示的输出、对所有 rank 求和的结果，以及在实时仪表盘上观看的一次简短 DDP 训练。

# %%
%load_ext ddplab
from ddplab.lessons import say

# %% [markdown]
# Start 4 ranks. Each one gets `rank`, `world_size`, `torch`, `dist` and `nn`, and one CPU thread's share of the cores. The dashboard shows each rank's state, its loss and throughput, and its output. (It speaks Chinese in the [Chinese edition](zh/00_quickstart.ipynb) of this notebook; `%ddp_start 4 --lang zh` does the same in any notebook.)

# %% [markdown] lang=zh
# 启动 4 个 rank。每个 rank 里都已备好 `rank`、`world_size`、`torch`、`dist` 和 `nn`，并分到自己那一份 CPU 核心（一个线程）。仪表盘显示每个 rank 的状态、损失、吞吐量和输出。（在这个中文版里，仪表盘自动使用中文；在其他 notebook 中，`%ddp_start 4 --lang zh` 也能做到。）

# %%
%ddp_start 4

# %% [markdown]
# Every rank contributes its rank number; `all_reduce` sums them in place, on every rank: 0 + 1 + 2 + 3 = 6.

# %% [markdown] lang=zh
# 每个 rank 贡献自己的 rank 编号；`all_reduce` 在每个 rank 上就地把它们相加：0 + 1 + 2 + 3 = 6。

# %%
%%ddp
t = torch.tensor([float(rank)])
dist.all_reduce(t)
print(rank, world_size, t.item())

# %% [markdown]
# Variables live on in each rank between cells. `%ddp_gather` brings one back, as a list indexed by rank.

# %% [markdown] lang=zh
# 变量在两个单元格之间一直保留在各个 rank 中。`%ddp_gather` 把某个变量取回 notebook，得到一个按 rank 索引的列表。

# %%
%ddp_gather t

# %% [markdown]
# ## A short DDP training run
#
# The same model starts on every rank. `DistributedSampler` gives each rank its own quarter of the data (2048 of the 8192 samples, so 64 steps of 32 per epoch); on `backward()` DDP averages the gradients across ranks, so every rank takes the same step.

# %% [markdown] lang=zh
# ## 一次简短的 DDP 训练
#
# 每个 rank 从同一个模型出发。`DistributedSampler` 给每个 rank 分配属于它的四分之一数据（8192 个样本中的 2048 个，所以每个 epoch 是 64 步，每步 32 个样本）；在 `backward()` 时，DDP 对各 rank 的梯度求平均，因此每个 rank 都走出完全相同的一步。

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
    print(f'epoch {epoch}: loss {loss.item():.3f}')

checksum = param_checksum(model.module)

# %% [markdown]
# While the cell ran, the dashboard above (and in the cell) showed each rank move from *ready* to *training* to *done*, its loss and its samples/s. Every point is kept: `%ddp_history` returns them all.

# %% [markdown] lang=zh
# 单元格运行期间，上方（以及单元格里）的仪表盘显示了每个 rank 从*就绪*到*训练中*再到*完成*的状态变化，以及它的损失和样本/秒。每个数据点都被保留下来：`%ddp_history` 会把它们全部返回。

# %%
h = %ddp_history
h

# %% [markdown]
# Each rank saw different data, yet all hold the same parameters:

# %% [markdown] lang=zh
# 每个 rank 看到的数据各不相同，但它们持有的参数完全一样：

# %%
checksums = %ddp_gather checksum
same = len(set(checksums)) == 1
print(say(f'parameters identical on every rank: {same}', f'每个 rank 上的参数完全相同：{same}'))

# %%
%ddp_status

# %% [markdown]
# Stop the pool: engines, controller and every helper process end.

# %% [markdown] lang=zh
# 停止进程池：引擎、控制器以及所有辅助进程都会结束。

# %%
%ddp_stop
