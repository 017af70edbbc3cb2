# %% [markdown]
# # Lesson 3 · DistributedSampler and set_epoch
#
# **In short.** Data parallelism needs each rank to read a *different* part of the data set, and
# together all of it. `DistributedSampler` does this: every rank shuffles the indices **the same
# way** (the same seed), then takes every `world_size`-th index starting at its `rank`. The seed of
# the shuffle is `seed + epoch`, so unless you call `sampler.set_epoch(epoch)` every epoch repeats
# the same order. When the data set does not divide evenly, the sampler **repeats a few samples**
# so every rank gets as many (or drops some, with `drop_last=True`). With a `DataLoader`, each step
# reads `batch_size` samples on every rank: the global batch is `batch_size × world_size`.
#
# **You will learn**
# - how `DistributedSampler` splits a data set between ranks without any communication
# - why you must call `set_epoch(epoch)`, and what happens to training if you forget
# - what the padding (or `drop_last=True`) does when the data set does not divide evenly, and what it does to an evaluation
# - what the global batch is, and how it changes with the number of ranks
#
# **Study time:** about 30 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** which rank gets which sample, epoch by epoch, without and with `set_epoch`; the
# repeated samples; what `drop_last=True` leaves out; one global batch, rank by rank.

# %% [markdown] lang=zh
# # 第 3 课 · DistributedSampler 与 set_epoch
#
# **简而言之**：数据并行要求每个进程（rank）读取数据集中*不同*的部分，而所有 rank 合起来正好读完全部数据。`DistributedSampler` 做的就是这件事：每个 rank 都用**相同的方式**（相同的种子）打乱索引，然后从自己的 `rank` 开始，每隔 `world_size` 个取一个索引。打乱用的种子是 `seed + epoch`，所以如果不调用 `sampler.set_epoch(epoch)`，每个 epoch 都会重复同样的顺序。数据集不能被均分时，采样器会**重复几个样本**，让每个 rank 拿到一样多的样本（设置 `drop_last=True` 时则丢掉几个）。配合 `DataLoader` 使用时，每一步每个 rank 读取 `batch_size` 个样本：全局批次是 `batch_size × world_size`。
#
# **你将学到**
# - `DistributedSampler` 怎样在不做任何通信的情况下把数据集分给各个 rank
# - 为什么必须调用 `set_epoch(epoch)`，忘了调用时训练会怎样
# - 数据集不能被均分时，填充（或 `drop_last=True`）做了什么，又会给评估带来什么影响
# - 什么是全局批次，它怎样随 rank 的数量变化
#
# **学习时间**：约 30 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：不调用和调用 `set_epoch` 时，每个 epoch 里哪个 rank 拿到哪个样本；被重复的样本；`drop_last=True` 漏掉了哪些样本；以及逐个 rank 拆开的一个全局批次。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## 22 samples on 4 ranks
#
# The data set here is just the numbers 0..21 (a sampler only deals in indices). Each rank makes a
# `DistributedSampler` and lists the indices it gets, for 3 epochs: once **without** calling
# `set_epoch`, once **with** `set_epoch(epoch)` at the start of every epoch. (ddplab notices the
# sampler iterated again without `set_epoch` and says so under the cell, on stderr: that hint is
# expected here.)

# %% [markdown] lang=zh
# ## 4 个 rank 分 22 个样本
#
# 这里的数据集就是数字 0..21（采样器只和索引打交道）。每个 rank 创建一个 `DistributedSampler`，列出它在 3 个 epoch 中拿到的索引：一次**不调用** `set_epoch`，一次在每个 epoch 开始时**调用** `set_epoch(epoch)`。（ddplab 会发现采样器在没有调用 `set_epoch` 的情况下被再次遍历，并在单元格下方（通过 stderr）给出提示：这里出现这条提示是预料之中的。）

# %% [markdown]
# **Predict, then run.** The sampler is made with `shuffle=True`. Without `set_epoch`, what does
# rank 0 read in epochs 1 and 2, compared with epoch 0? Answer with a letter:
#
# - (a) other samples, in a new order
# - (b) the same 6 samples, in a new order
# - (c) the same 6 samples, in the same order

# %% [markdown] lang=zh
# **先预测，再运行。** 采样器是用 `shuffle=True` 创建的。不调用 `set_epoch` 时，rank 0 在 epoch 1 和 epoch 2 读到的样本与 epoch 0 相比如何？请写一个字母：
#
# - (a) 别的样本，顺序也是新的
# - (b) 同样的 6 个样本，顺序是新的
# - (c) 同样的 6 个样本，顺序也相同

# %%
predict("3.no_set_epoch", ...)    # a letter: "a", "b" or "c"

# %%
%%ddp
from torch.utils.data import DistributedSampler

N = 22
data = list(range(N))

sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
without = [list(sampler) for epoch in range(3)]          # forgot set_epoch

sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
with_set_epoch = []
for epoch in range(3):
    sampler.set_epoch(epoch)                             # shuffle with seed 0 + epoch
    with_set_epoch.append(list(sampler))

print(f"len(sampler) = {len(sampler)}")
print(f"without        = {without}")
print(f"with_set_epoch = {with_set_epoch}")

# %% [markdown]
# Draw it: one row per epoch, one column per sample index, each box coloured by the rank that reads
# that sample, and the number in it is *when* that rank reads it (0 = first). A black dot marks a
# sample read twice in the epoch: the padding.

# %% [markdown] lang=zh
# 画出来：每个 epoch 一行，每个样本索引一列；每个格子的颜色表示读取该样本的 rank，格子里的数字表示这个 rank *第几个*读到它（0 表示第一个）。黑点标出在这个 epoch 中被读了两次的样本，也就是填充出来的样本。

# %%
without = %ddp_gather without
with_set_epoch = %ddp_gather with_set_epoch
per_epoch = lambda orders: [[orders[r][e] for r in range(4)] for e in range(3)]  # [rank][epoch] -> [epoch][rank]
rank0 = without[0]                                       # rank 0's 3 epochs without set_epoch
reveal("3.no_set_epoch", "c" if rank0[0] == rank0[1] == rank0[2]
       else "b" if sorted(rank0[0]) == sorted(rank0[1]) == sorted(rank0[2]) else "a")
draw.partitions(per_epoch(without), 22, xlabel=say("sample index", "样本索引"), ylabel=say("epoch", "epoch"),
                title=say("Without set_epoch: the same order every epoch", "不调用 set_epoch：每个 epoch 顺序相同"))

# %%
draw.partitions(per_epoch(with_set_epoch), 22, xlabel=say("sample index", "样本索引"), ylabel=say("epoch", "epoch"),
                title=say("With set_epoch(epoch): a new shuffle every epoch", "调用 set_epoch(epoch)：每个 epoch 重新打乱"))

# %% [markdown]
# Each rank reads `len(sampler)` = ⌈22 / 4⌉ = 6 samples per epoch: 24 in all, for 22 samples. To
# fill the gap the sampler appends the **first 2 indices of the shuffled list** again (the black
# dots): in every epoch 2 samples are seen twice, by two different ranks. In a training epoch those
# two samples count double; for evaluation (a metric over the data set) the padding makes the
# result slightly wrong, unless you leave the repeats out.
#
# Check it, epoch by epoch:

# %% [markdown] lang=zh
# 每个 rank 每个 epoch 读取 `len(sampler)` = ⌈22 / 4⌉ = 6 个样本：一共 24 个，而样本只有 22 个。为了补齐差额，采样器把**打乱后列表的前 2 个索引**再追加一遍（图中的黑点）：每个 epoch 都有 2 个样本被两个不同的 rank 各读一次。在训练的一个 epoch 里，这两个样本的分量加倍；在评估时（在整个数据集上计算指标），除非把重复的样本去掉，否则填充会让结果略有偏差。
#
# 逐个 epoch 检查一下：

# %%
for name, orders in [(say("without set_epoch", "不调用 set_epoch"), without),
                     (say("with set_epoch", "调用 set_epoch"), with_set_epoch)]:
    for epoch, per_rank in enumerate(per_epoch(orders)):
        everything = sum(per_rank, [])
        assert all(len(indices) == 6 for indices in per_rank)       # len(sampler) samples on every rank
        assert sorted(set(everything)) == list(range(22))           # together, the ranks cover every sample
        repeated = [i for i in set(everything) if everything.count(i) > 1]
        assert len(everything) == 24 and len(repeated) == 2         # disjoint, apart from 2 padded samples
        for r, indices in enumerate(per_rank):
            assert len(set(indices)) == 6                            # a rank never reads one sample twice
    print(say(f"{name}: each epoch covers all 22 samples, 6 per rank, 2 of them read twice",
              f"{name}：每个 epoch 都覆盖全部 22 个样本，每个 rank 6 个，其中 2 个样本被读了两次"))
assert all(without[r][0] == without[r][1] == without[r][2] for r in range(4))        # without: the same every epoch
assert all(with_set_epoch[r][0] != with_set_epoch[r][1] != with_set_epoch[r][2] for r in range(4))  # with: not
assert [w[0] for w in without] == [w[0] for w in with_set_epoch]   # epoch 0 is the same either way: seed 0 + 0
print(say("without set_epoch every epoch repeats epoch 0's order; with it, every epoch is shuffled anew",
          "不调用 set_epoch 时，每个 epoch 都重复 epoch 0 的顺序；调用之后，每个 epoch 都重新打乱"))

# %% [markdown]
# ## What the sampler does, by hand
#
# Nothing is communicated: every rank computes the **same** permutation from the same seed, pads it,
# and keeps its own slice. This is also why a different `seed` on one rank, or a different
# `shuffle` setting, silently breaks the split.

# %% [markdown] lang=zh
# ## 亲手实现采样器
#
# 这里没有任何通信：每个 rank 用相同的种子算出**相同的**排列，补齐长度，然后只保留属于自己的那一份。这也说明了为什么某个 rank 用了不同的 `seed` 或不同的 `shuffle` 设置时，数据划分会悄无声息地出错。

# %%
%%ddp
def my_indices(epoch, seed=0):
    g = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(N, generator=g).tolist()      # the same on every rank
    total = -(-N // world_size) * world_size             # 24: a multiple of world_size
    order += order[:total - N]                           # pad with the first indices again
    return order[rank::world_size]                       # every 4th, starting at my rank

by_hand = [my_indices(epoch) for epoch in range(3)]
print("by_hand == with_set_epoch:", by_hand == with_set_epoch)

# %%
by_hand = %ddp_gather by_hand
assert by_hand == with_set_epoch
print(say("on every rank, the sampler is: shuffle with seed + epoch, pad, take every 4th",
          "在每个 rank 上，采样器做的就是：用 seed + epoch 打乱、补齐、每隔 4 个取一个"))

# %% [markdown]
# ## drop_last=True: drop instead of repeat
#
# With `drop_last=True` the sampler cuts the shuffled list down to a multiple of `world_size`
# instead: 5 samples per rank, 20 in all, and the last 2 of each shuffle are **not read at all**
# that epoch (the empty columns below). Which 2 they are depends on the epoch's shuffle: the cell
# below prints them for each epoch.

# %% [markdown] lang=zh
# ## drop_last=True：丢弃而不是重复
#
# 设置 `drop_last=True` 时，采样器改为把打乱后的列表截短到 `world_size` 的整数倍：每个 rank 5 个样本，一共 20 个，每次打乱后的最后 2 个样本在这个 epoch 中**根本不会被读到**（下图中的空列）。具体是哪 2 个取决于这个 epoch 的打乱结果：下面的单元格会逐个 epoch 把它们打印出来。

# %%
%%ddp
sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0, drop_last=True)
dropping = []
for epoch in range(3):
    sampler.set_epoch(epoch)
    dropping.append(list(sampler))
print(f"len(sampler) = {len(sampler)}, dropping = {dropping}")

# %%
dropping = %ddp_gather dropping
skipped = []
for epoch, per_rank in enumerate(per_epoch(dropping)):
    everything = sum(per_rank, [])
    assert all(len(indices) == 5 for indices in per_rank) and len(set(everything)) == 20  # disjoint, 20 of 22
    skipped.append(sorted(set(range(22)) - set(everything)))
print(say(f"left out in epochs 0, 1, 2: {skipped}", f"epoch 0、1、2 中漏掉的样本：{skipped}"))
draw.partitions(per_epoch(dropping), 22, xlabel=say("sample index", "样本索引"), ylabel=say("epoch", "epoch"),
                title=say("drop_last=True: 5 per rank, 2 samples left out each epoch",
                          "drop_last=True：每个 rank 5 个，每个 epoch 有 2 个样本不读"))

# %% [markdown]
# ## The global batch
#
# A `DataLoader` with this sampler reads `batch_size` samples per step on every rank, so one
# training step of DDP sees `batch_size × world_size` samples: the **global batch**. Here: batch
# size 3 on 4 ranks = 12 samples per step, and an epoch is 6 / 3 = 2 steps. (When you scale from 1
# to 4 ranks and keep `batch_size`, the global batch grows 4 times: the learning rate usually has
# to follow.) Train a tiny DDP model for 5 epochs this way (the dashboard follows it), and keep the
# sample indices of every batch.

# %% [markdown] lang=zh
# ## 全局批次
#
# 使用这个采样器的 `DataLoader` 每一步在每个 rank 上读取 `batch_size` 个样本，所以 DDP 的一个训练步看到的是 `batch_size × world_size` 个样本：这就是**全局批次**。这里批大小为 3、有 4 个 rank，每步就是 12 个样本，一个 epoch 是 6 / 3 = 2 步。（从 1 个 rank 扩展到 4 个 rank 而 `batch_size` 不变时，全局批次变为原来的 4 倍：学习率通常也要跟着调整。）就这样把一个很小的 DDP 模型训练 5 个 epoch（仪表盘会实时跟踪），并记下每个批次的样本索引。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features = torch.randn(N, 8)
labels = (features.sum(dim=1) > 0).long()
dataset = TensorDataset(torch.arange(N), features, labels)  # (index, x, y): to see which samples
sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=3, sampler=sampler)

model = DDP(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
batches = []                                             # (epoch, step, indices) of every batch
for epoch in range(5):
    sampler.set_epoch(epoch)
    for step, (index, x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        batches.append((epoch, step, index.tolist()))
        ddplab.log(loss=loss, samples=len(x))
print(f"len(loader) = {len(loader)}, batches[0] = {batches[0]}")

# %%
batches = %ddp_gather batches
global_batch = sum((b[0][2] for b in batches), [])
print(say(f"epoch 0, step 0: the global batch is {global_batch} ({len(global_batch)} samples = 3 × 4)",
          f"epoch 0 第 0 步：全局批次是 {global_batch}（{len(global_batch)} 个样本 = 3 × 4）"))
assert all(len(b) == 5 * 2 for b in batches)                           # 2 steps per epoch, on every rank
assert len(global_batch) == 12 and len(set(global_batch)) == 12       # 3 per rank, none shared
assert [b[i][:2] for b in batches for i in range(10)] == [(e, s) for r in range(4) for e in range(5) for s in range(2)]
print(say("every step, 4 ranks × 3 samples: a global batch of 12", "每一步 4 个 rank × 3 个样本：全局批次为 12"))

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why. Try things out in cells of your own (before the last cell, `%ddp_stop`): a sampler
# needs no pool, `DistributedSampler(data, num_replicas=4, rank=r, ...)` works in the notebook too.
#
# **3.1** Take `N = 23` samples on the 4 ranks. Without `drop_last`: how many samples does each rank
# get, and how many samples are read twice in an epoch? With `drop_last=True`: how many per rank,
# and how many samples are left out? Predict, then check with `len(sampler)`. Answer with a list of 4
# whole numbers: `[per rank, read twice, per rank with drop_last, left out]`.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。可以在你自己的单元格里动手试试（放在最后一个单元格 `%ddp_stop` 之前）：采样器不需要进程池，`DistributedSampler(data, num_replicas=4, rank=r, ...)` 在 notebook 里也能用。
#
# **3.1** 在 4 个 rank 上取 `N = 23` 个样本。不设 `drop_last` 时：每个 rank 拿到多少个样本？一个 epoch 中有多少个样本被读了两次？设置 `drop_last=True` 时：每个 rank 多少个？有多少个样本被漏掉？先预测，再用 `len(sampler)` 验证。请写一个含 4 个整数的列表：`[每个 rank 的个数, 读了两次的个数, drop_last 时每个 rank 的个数, 漏掉的个数]`。

# %%
answer = ...    # [per rank, read twice, per rank with drop_last, left out]
check("3.1", answer, N=23, world_size=len(without))

# %% [markdown]
# **3.2** Evaluation with the padding: to compute the mean of `data` (0..21, whose mean is 10.5),
# each rank sums the values its sampler gives in epoch 0 (with `set_epoch(0)`) and counts them, and
# an `all_reduce` adds up the sums and the counts of the 4 ranks. What mean does that give? (The
# black dots of epoch 0 in the pictures above mark the samples read twice.) Answer with a number.

# %% [markdown] lang=zh
# **3.2** 带填充的评估：为了计算 `data`（0..21，均值为 10.5）的均值，每个 rank 对自己的采样器在 epoch 0（调用 `set_epoch(0)`）给出的值求和并计数，再用一次 `all_reduce` 把 4 个 rank 的和与个数分别相加。这样算出的均值是多少？（上面图中 epoch 0 那一行的黑点，标出了被读两次的样本。）请写一个数。

# %%
answer = ...    # the mean the 4 ranks compute together
check("3.2", answer, orders=with_set_epoch, N=22)

# %% [markdown]
# **3.3** Give rank 2 `seed=1` and the other ranks `seed=0`. In epoch 0, how many of the 22 samples
# does **no** rank read? (Which checks above would fail, and would training warn you?) Answer with
# a whole number.

# %% [markdown] lang=zh
# **3.3** 让 rank 2 使用 `seed=1`，其他 rank 使用 `seed=0`。在 epoch 0 中，22 个样本里有多少个**没有任何** rank 读到？（上面哪些检查会失败？训练时会有任何提示吗？）请写一个整数。

# %%
answer = ...    # samples no rank reads in epoch 0
check("3.3", answer, N=22, world_size=len(without), odd_rank=2)

# %% [markdown]
# **3.4** The training above used `batch_size=3` on 4 ranks. You move it to 2 ranks and want the
# same global batch (and so the same learning rate). Which `batch_size` must the `DataLoader` get?
# Answer with a whole number.

# %% [markdown] lang=zh
# **3.4** 上面的训练在 4 个 rank 上使用 `batch_size=3`。现在把它搬到 2 个 rank 上，并且希望全局批次不变（这样学习率也可以不变）。`DataLoader` 的 `batch_size` 应该设为多少？请写一个整数。

# %%
answer = ...    # the batch_size on 2 ranks
check("3.4", answer, batch_size=3, world_size=len(batches), new_ranks=2)

# %%
%ddp_stop
