# %% [markdown]
# # Lesson 1 · Process groups and collectives
#
# **In short.** Four processes on this machine join one **gloo process group**: each knows its
# `rank` (0..3) and the `world_size` (4), and they talk only through *collectives*, calls that every
# rank of the group makes together. Here you run each collective once and see, rank by rank, what
# every process held before and after: `broadcast`, `all_reduce`, `reduce_scatter`, `all_gather`,
# point-to-point `send`/`recv`, and `barrier`. Data-parallel training (next lesson) is built from
# exactly these.
#
# **You will learn**
# - what a process group is: ranks, `world_size`, and calls that every rank makes together
# - what `broadcast`, `all_reduce`, `reduce_scatter` and `all_gather` leave on each rank, and how the last two make an all-reduce
# - how to pass data around a ring with `isend` and `recv` without every rank waiting forever
# - why every collective waits for the slowest rank, and what ddplab reports when ranks call different collectives
#
# **Study time:** about 35 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** a before/after picture of every collective, and a timeline of a barrier.

# %% [markdown] lang=zh
# # 第 1 课 · 进程组与集合通信
#
# **简而言之**：本机上的四个进程加入同一个 **gloo 进程组**：每个进程（rank）都知道自己的编号 `rank`（0..3）和组的大小 `world_size`（4），它们之间只通过*集合通信*交流，也就是组内每个 rank 都要一起调用的操作。这一课把每个集合通信各运行一次，逐个 rank 看清每个进程在调用前后持有什么：`broadcast`、`all_reduce`、`reduce_scatter`、`all_gather`，点对点的 `send`/`recv`，以及 `barrier`。下一课的数据并行训练正是由这些操作搭建起来的。
#
# **你将学到**
# - 什么是进程组：rank、`world_size`，以及每个 rank 都要一起调用的操作
# - `broadcast`、`all_reduce`、`reduce_scatter` 和 `all_gather` 在每个 rank 上留下什么，以及后两者怎样合成一次 all-reduce
# - 怎样用 `isend` 和 `recv` 沿着环传递数据，而不让所有 rank 永远互相等待
# - 为什么每个集合通信都要等最慢的 rank，以及各 rank 调用不同的集合通信时 ddplab 报告什么
#
# **学习时间**：约 35 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：每个集合通信调用前后的对比图，以及一次 barrier 的时间线。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %% [markdown]
# Start the group. (In the [Chinese edition](zh/01_collectives.ipynb) the dashboard and this
# lesson's pictures are in Chinese; `%ddp_start 4 --lang zh` does the same in any notebook.)

# %% [markdown] lang=zh
# 启动进程组。（在这个中文版里，仪表盘和本课的图都自动使用中文；在其他 notebook 中，`%ddp_start 4 --lang zh` 也能做到。）

# %%
%ddp_start 4

# %% [markdown]
# ## broadcast and all_reduce
#
# Every rank starts with its own tensor, `[10·rank, 10·rank + 1]`. `broadcast(x, src=0)` overwrites
# it with rank 0's copy, on every rank. `all_reduce(x)` replaces every rank's tensor with the
# element-wise **sum** over all ranks (other operations: `MAX`, `MIN`, `PRODUCT`, `AVG` on some
# backends). Both work *in place*: the tensor you pass is the result.

# %% [markdown] lang=zh
# ## broadcast 与 all_reduce
#
# 每个 rank 一开始都有自己的张量 `[10·rank, 10·rank + 1]`。`broadcast(x, src=0)` 在每个 rank 上用 rank 0 的副本覆盖它。`all_reduce(x)` 把每个 rank 的张量都替换为所有 rank 的张量逐元素相加的**和**（其他运算还有 `MAX`、`MIN`、`PRODUCT`，某些后端还支持 `AVG`）。两者都是*就地*操作：你传进去的张量就是结果。

# %%
%%ddp
seen = {}  # collective -> (what this rank held before, after)

x = torch.tensor([10.0 * rank, 10.0 * rank + 1])
before = x.clone()
dist.broadcast(x, src=0)
seen["broadcast"] = (before, x.clone())

x = torch.tensor([10.0 * rank, 10.0 * rank + 1])
before = x.clone()
dist.all_reduce(x, op=dist.ReduceOp.SUM)
seen["all_reduce"] = (before, x.clone())
print("broadcast:", seen["broadcast"][1].tolist(), "· all_reduce:", x.tolist())

# %% [markdown]
# ## reduce_scatter and all_gather
#
# `reduce_scatter` sums like `all_reduce`, but each rank keeps only **its own slice** of the sum:
# rank *r* gets chunk *r*. `all_gather` goes the other way: every rank contributes one piece and
# every rank ends with **all** of them. Together they make an `all_reduce` (which is how fast
# all-reduce algorithms and sharded training such as FSDP work. gloo, the CPU backend, computes
# `reduce_scatter` with an all-reduce underneath; NCCL on GPUs has a real one that sends half as much.)
#
# **Which torch.** The cell below calls `reduce_scatter_single` and `all_gather_single`, the
# one-tensor forms: the input (or output) is a single tensor holding one chunk per rank. These names
# are new in torch 2.13, the oldest torch ddplab installs with. On torch 2.12 and older the same
# calls are `reduce_scatter_tensor` and `all_gather_into_tensor`; torch 2.13 still has those, as
# deprecated aliases that print a `FutureWarning` and call the new ones. (`dist.all_gather` with a
# list of tensors, one per rank, is the older list form and exists in both.)

# %% [markdown] lang=zh
# ## reduce_scatter 与 all_gather
#
# `reduce_scatter` 和 `all_reduce` 一样求和，但每个 rank 只保留和中**属于自己的那一段**：rank *r* 得到第 *r* 块。`all_gather` 方向相反：每个 rank 贡献一块，最后每个 rank 都拿到**全部**的块。两者合起来就是一次 `all_reduce`（快速的 all-reduce 算法和 FSDP 这类分片训练正是这样工作的。CPU 后端 gloo 在底层用一次 all-reduce 来计算 `reduce_scatter`；GPU 上的 NCCL 则有真正的 reduce-scatter，发送的数据量只有一半。）
#
# **需要哪个版本的 torch。** 下面的单元格调用 `reduce_scatter_single` 和 `all_gather_single`，也就是单张量的形式：输入（或输出）是一个张量，其中每个 rank 各占一块。这两个名字是 torch 2.13 新加的，而 2.13 正是 ddplab 安装时要求的最低版本。在 torch 2.12 及更早的版本里，同样的调用叫 `reduce_scatter_tensor` 和 `all_gather_into_tensor`；torch 2.13 仍然保留这两个名字，作为已弃用的别名：调用时打印一条 `FutureWarning`，再转去调用新名字。（传入张量列表、每个 rank 一个张量的 `dist.all_gather` 是更早的列表形式，两个版本里都有。）

# %%
%%ddp
chunks = torch.arange(4.0) + 10 * rank             # 4 values: one chunk of 1 per rank
mine = torch.zeros(1)
dist.reduce_scatter_single(mine, chunks)           # mine = sum over ranks of chunks[rank]
seen["reduce_scatter"] = (chunks, mine.clone())

pieces = torch.zeros(world_size)
dist.all_gather_single(pieces, torch.tensor([float(rank * rank)]))
seen["all_gather"] = (torch.tensor([float(rank * rank)]), pieces.clone())
print("reduce_scatter:", mine.item(), "· all_gather:", pieces.tolist())

# %% [markdown]
# ## send and recv: passing along a ring
#
# Point-to-point: rank *r* sends its number to rank *r+1* and receives from rank *r−1* (around a
# ring). A blocking `send` waits until the other side receives, so if every rank first sent and then
# received, they could all wait forever; `isend` starts the send in the background, then `recv`
# waits for the neighbour's message.

# %% [markdown] lang=zh
# ## send 与 recv：沿着环传递
#
# 点对点通信：rank *r* 把自己的数发给 rank *r+1*，并从 rank *r−1* 接收（首尾相连成一个环）。阻塞式的 `send` 要等对方接收后才返回，所以如果每个 rank 都先发送、再接收，它们可能会永远互相等待下去；`isend` 在后台开始发送，接着 `recv` 等待邻居发来的消息。

# %%
%%ddp
token = torch.tensor([100.0 + rank])
got = torch.zeros(1)
sending = dist.isend(token, dst=(rank + 1) % world_size)
dist.recv(got, src=(rank - 1) % world_size)
sending.wait()
seen["send/recv"] = (token, got.clone())
print(f"isend {token.item():g} → rank {(rank + 1) % world_size} · recv {got.item():g} ← rank {(rank - 1) % world_size}")

# %% [markdown]
# Bring every rank's record back to the notebook and draw it: one row of boxes per rank, before on
# the left, after on the right.
#
# **Reading the colours.** The colour follows the data. Before a collective, each rank's values have
# that rank's colour (the colour of its `rank N` label, as on the dashboard). After it, a box has the
# colour of the rank whose value it now holds: after `broadcast` every row has rank 0's colour,
# after `all_gather` every row shows the four colours in rank order, and after send/recv each rank
# holds its left neighbour's colour. A box **striped** in the colours of the four ranks holds a sum
# of their values, as after `all_reduce` and `reduce_scatter`: no single rank had that value.

# %% [markdown] lang=zh
# 把每个 rank 的记录取回 notebook 并画出来：每个 rank 一行格子，左边是调用之前，右边是调用之后。
#
# **怎样看颜色。** 颜色跟着数据走。集合通信之前，每个 rank 的值都是这个 rank 的颜色（也就是它的 `rank N` 标签的颜色，与仪表盘一致）。调用之后，每个格子的颜色表示它现在持有的是哪个 rank 的值：`broadcast` 之后每一行都是 rank 0 的颜色；`all_gather` 之后每一行都按 rank 顺序出现四种颜色；send/recv 之后，每个 rank 持有的是左邻居的颜色。用四个 rank 的颜色画成**条纹**的格子，装的是它们的值之和，比如 `all_reduce` 和 `reduce_scatter` 之后：这个值不属于任何单独一个 rank。

# %%
seen = %ddp_gather seen
order = ["broadcast", "all_reduce", "reduce_scatter", "all_gather", "send/recv"]
draw.collectives({name: ([s[name][0] for s in seen], [s[name][1] for s in seen]) for name in order},
                 title=say("What each rank held, before and after each collective",
                           "每个集合通信前后，各 rank 持有的数据"),
                 before=say("before", "之前"), after=say("after", "之后"))

# %% [markdown]
# Check what the picture says, for every rank:

# %% [markdown] lang=zh
# 逐个 rank 核对图中所示的内容：

# %%
for r, s in enumerate(seen):
    assert s["broadcast"][1].tolist() == [0.0, 1.0]                          # rank 0's tensor
    assert s["all_reduce"][1].tolist() == [60.0, 64.0]                       # 0+10+20+30, 1+11+21+31
    assert s["reduce_scatter"][1].item() == 4 * r + 60                       # chunk r of the sum
    assert s["all_gather"][1].tolist() == [0.0, 1.0, 4.0, 9.0]               # everybody's piece
    assert s["send/recv"][1].item() == 100 + (r - 1) % 4                     # from the left neighbour
print(say("every rank holds what the collective promised", "每个 rank 持有的正是集合通信承诺的结果"))

# %% [markdown]
# ## barrier: everybody waits for the slowest
#
# A collective finishes on a rank only once **every** rank has joined it. `barrier()` is a collective
# with no data: here rank *r* first works for 0.2·*r* seconds, then waits at the barrier. The timeline
# shows the waiting: all ranks leave together, when rank 3 arrives. (The same happens inside every
# training step: the fastest rank waits for the slowest at the gradient all-reduce. Lesson 10 is about
# that.)

# %% [markdown] lang=zh
# ## barrier：所有人都等最慢的那个
#
# 只有当**每个** rank 都加入之后，集合通信才会在某个 rank 上完成。`barrier()` 是一个不带数据的集合通信：这里 rank *r* 先工作 0.2·*r* 秒，然后在 barrier 处等待。时间线把这段等待画了出来：rank 3 一到，所有 rank 一起离开。（每个训练步里都会发生同样的事：最快的 rank 在梯度的 all-reduce 处等待最慢的 rank。第 10 课专门讲这个问题。）

# %% [markdown]
# **Predict, then run.** Rank *r* works 0.2·*r* seconds, then calls `barrier()`. Add up the time
# that the four ranks spend waiting in the barrier: how many seconds is that in all?

# %% [markdown] lang=zh
# **先预测，再运行。** rank *r* 先工作 0.2·*r* 秒，然后调用 `barrier()`。把四个 rank 在 barrier 中等待的时间加起来：一共是多少秒？

# %%
predict("1.barrier_wait", ...)    # seconds spent waiting in the barrier, the 4 ranks added up

# %%
%%ddp
import time
from ddplab.lessons.ranks import Timeline

timeline = Timeline()                 # a common time zero for all ranks
with timeline("work"):
    time.sleep(0.2 * rank)
with timeline("waiting in barrier"):
    dist.barrier()
events = timeline.events

# %%
events = %ddp_gather events
left = [e[-1][1] for e in events]      # when each rank left the barrier
assert max(left) - min(left) < 0.1 and min(left) > 0.55, left
waited = sum(end - start for e in events for start, end, k, _ in e if k == "waiting in barrier")
reveal("1.barrier_wait", waited, unit=say("s", "秒"))
kind = {"work": say("work", "工作"), "waiting in barrier": say("waiting in barrier", "在 barrier 中等待")}
draw.timeline([[(start, end, kind[k], label) for start, end, k, label in e] for e in events],
              title=say("barrier(): every rank leaves when the last one arrives",
                        "barrier()：最后一个 rank 到达时，所有 rank 一起离开"),
              xlabel=say("seconds", "秒"))

# %% [markdown]
# ## When a rank skips a collective
#
# A collective only finishes when **every** rank of the group calls it. Here rank 2 skips the
# barrier. Plain torch would let ranks 0, 1 and 3 wait for the group's timeout (30 minutes by
# default), then fail with gloo's "Timed out waiting ... for recv operation". ddplab looks at each
# rank's own stack while a cell runs: once ranks have waited in a collective for a second or two,
# it sees three ranks waiting in `barrier` for a rank that finished the cell, names them, and cuts
# the barrier short. The group is formed again at once, and every rank keeps its variables. The cell
# is *meant* to fail: `%%ddp --expect CollectiveMismatch` shows ddplab's report as this lesson's
# point instead of raising it.

# %% [markdown] lang=zh
# ## 某个 rank 跳过了集合通信
#
# 只有组内**每个** rank 都调用了集合通信，它才会完成。这里 rank 2 跳过了 barrier。如果只用 torch，rank 0、1 和 3 会一直等到进程组超时（默认 30 分钟），然后报出 gloo 的 "Timed out waiting ... for recv operation" 错误。ddplab 在单元格运行时查看每个 rank 自己的调用栈：当有 rank 在集合通信中等了一两秒，它就发现有三个 rank 在 `barrier` 中等待一个已经运行完这个单元格的 rank，于是点名指出它们，并提前结束这次 barrier。进程组随即重新组建，每个 rank 都保留着自己的变量。这个单元格*本来就应该*失败：`%%ddp --expect CollectiveMismatch` 把 ddplab 的报告作为本课要看的内容显示出来，而不是抛出错误。

# %%
%%ddp --expect CollectiveMismatch
if rank != 2:
    dist.barrier()

# %% [markdown]
# The same when ranks call **different** collectives at the same point, here `broadcast` on rank 0
# and `all_reduce` on the others (or the same one with tensors of different shapes or dtypes):

# %% [markdown] lang=zh
# 当各个 rank 在同一处调用**不同的**集合通信时也是一样：这里 rank 0 调用 `broadcast`，其他 rank 调用 `all_reduce`（调用同一个集合通信、但张量的形状或 dtype 不同时，情况也一样）：

# %%
%%ddp --expect CollectiveMismatch
t = torch.ones(1)
if rank == 0:
    dist.broadcast(t, src=0)
else:
    dist.all_reduce(t)

# %% [markdown]
# And the pool works as before:

# %% [markdown] lang=zh
# 之后进程池照常可用：

# %%
%%ddp
t = torch.ones(1)
dist.all_reduce(t)
print(t.item())

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why. Try things out in cells of your own (`%%ddp` cells, before the last cell of the
# lesson, `%ddp_stop`).
#
# **1.1** Change the `all_reduce` of the first section to `op=dist.ReduceOp.MAX` (every rank starts
# with `[10·rank, 10·rank + 1]`). What does every rank hold after it? Predict it before you run it.
# Answer with a list of 2 numbers.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。可以在你自己的单元格里动手试试（`%%ddp` 单元格，放在本课最后一个单元格 `%ddp_stop` 之前）。
#
# **1.1** 把第一节里的 `all_reduce` 改为 `op=dist.ReduceOp.MAX`（每个 rank 一开始都持有 `[10·rank, 10·rank + 1]`）。之后每个 rank 持有什么？运行之前先预测一下。请写一个含 2 个数的列表。

# %%
answer = ...    # a list of 2 numbers: what every rank holds after all_reduce with MAX
check("1.1", answer, world_size=len(seen))

# %% [markdown]
# **1.2** Give `reduce_scatter_single` 8 values instead of 4: `chunks = torch.arange(8.0) + 10 * rank`
# and `mine = torch.zeros(2)`. What does rank 1 hold after `dist.reduce_scatter_single(mine, chunks)`?
# Answer with a list of 2 numbers.

# %% [markdown] lang=zh
# **1.2** 给 `reduce_scatter_single` 8 个值而不是 4 个：`chunks = torch.arange(8.0) + 10 * rank`，`mine = torch.zeros(2)`。执行 `dist.reduce_scatter_single(mine, chunks)` 之后，rank 1 持有什么？请写一个含 2 个数的列表。

# %%
answer = ...    # a list of 2 numbers: what rank 1 holds
check("1.2", answer, world_size=len(seen))

# %% [markdown]
# **1.3** In the barrier cell, make rank *r* work `0.3 * rank` seconds instead of `0.2 * rank`.
# About when do the ranks leave the barrier, in seconds on the timeline's clock (the common time
# zero)? Answer with a number of seconds.

# %% [markdown] lang=zh
# **1.3** 在 barrier 那个单元格里，让 rank *r* 工作 `0.3 * rank` 秒，而不是 `0.2 * rank` 秒。各 rank 大约在什么时候离开 barrier（按时间线的时钟，也就是共同的时间零点算起的秒数）？请写一个秒数。

# %%
answer = ...    # seconds after the common time zero
check("1.3", answer, world_size=len(events), left=min(e[-1][1] for e in events))

# %% [markdown]
# **1.4** Rank 1 all-reduces `torch.ones(3)` while the other ranks all-reduce `torch.ones(2)`. What
# happens? Answer with a letter:
#
# - (a) gloo pads the shorter tensors with zeros, and every rank ends with `[4, 4, 1]`
# - (b) torch compares the shapes of all ranks first, and every rank raises a `ValueError` before
#   anything is sent
# - (c) nothing compares the sizes before sending: the ranks exchange pieces that do not fit
#   together, so some ranks may even finish (with a result nobody should trust) while others wait
#   for data that never comes, until ddplab names the mismatch (`CollectiveMismatch`) and cuts it
#   short

# %% [markdown] lang=zh
# **1.4** rank 1 对 `torch.ones(3)` 做 all-reduce，而其他 rank 对 `torch.ones(2)` 做 all-reduce。会发生什么？请写一个字母：
#
# - (a) gloo 用 0 把较短的张量补齐，每个 rank 最后都得到 `[4, 4, 1]`
# - (b) torch 先比较所有 rank 的形状，每个 rank 都在发送任何数据之前抛出 `ValueError`
# - (c) 发送之前没有谁比较大小：各 rank 交换的数据块彼此对不上，所以有的 rank 甚至可能运行完（得到一个谁都不该相信的结果），而其他 rank 一直在等永远不会到来的数据，直到 ddplab 点名指出这个集合通信不匹配（`CollectiveMismatch`）并提前结束它

# %%
answer = ...    # a letter: "a", "b" or "c"
check("1.4", answer)

# %%
%ddp_stop
