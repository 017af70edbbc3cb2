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
# **简介。** 本机上的四个进程组成一个 **gloo 进程组**：每个进程知道自己的 `rank`（0..3）和
# `world_size`（4），它们之间只通过*集合通信*交流——组内每个 rank 都要一起调用的操作。
# 这一课把每个集合通信各运行一次，逐个 rank 画出调用前后各进程持有的数据：`broadcast`、
# `all_reduce`、`reduce_scatter`、`all_gather`、点对点的 `send`/`recv` 以及 `barrier`。
# 下一课的数据并行训练正是由这些操作搭起来的。
#
# **You will see:** a before/after picture of every collective, and a timeline of a barrier.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %% [markdown]
# Start the group. (`%ddp_start 4 --lang zh` labels the dashboard and this lesson's pictures in Chinese.)

# %%
%ddp_start 4

# %% [markdown]
# ## broadcast and all_reduce
#
# Every rank starts with its own tensor, `[10·rank, 10·rank + 1]`. `broadcast(x, src=0)` overwrites
# it with rank 0's copy, on every rank. `all_reduce(x)` replaces every rank's tensor with the
# element-wise **sum** over all ranks (other operations: `MAX`, `MIN`, `PRODUCT`, `AVG` on some
# backends). Both work *in place*: the tensor you pass is the result.

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
print("broadcast gave", seen["broadcast"][1].tolist(), "· all_reduce gave", x.tolist())

# %% [markdown]
# ## reduce_scatter and all_gather
#
# `reduce_scatter` sums like `all_reduce`, but each rank keeps only **its own slice** of the sum:
# rank *r* gets chunk *r*. `all_gather` goes the other way: every rank contributes one piece and
# every rank ends with **all** of them. Together they make an `all_reduce` (which is how fast
# all-reduce algorithms and sharded training such as FSDP work. gloo, the CPU backend, computes
# `reduce_scatter` with an all-reduce underneath; NCCL on GPUs has a real one that sends half as much.)

# %%
%%ddp
chunks = torch.arange(4.0) + 10 * rank             # 4 values: one chunk of 1 per rank
mine = torch.zeros(1)
dist.reduce_scatter_single(mine, chunks)           # mine = sum over ranks of chunks[rank]
seen["reduce_scatter"] = (chunks, mine.clone())

pieces = torch.zeros(world_size)
dist.all_gather_single(pieces, torch.tensor([float(rank * rank)]))
seen["all_gather"] = (torch.tensor([float(rank * rank)]), pieces.clone())
print("my slice of the sum:", mine.item(), "· gathered:", pieces.tolist())

# %% [markdown]
# ## send and recv: passing along a ring
#
# Point-to-point: rank *r* sends its number to rank *r+1* and receives from rank *r−1* (around a
# ring). A blocking `send` waits until the other side receives, so if every rank first sent and then
# received, they could all wait forever; `isend` starts the send in the background, then `recv`
# waits for the neighbour's message.

# %%
%%ddp
token = torch.tensor([100.0 + rank])
got = torch.zeros(1)
sending = dist.isend(token, dst=(rank + 1) % world_size)
dist.recv(got, src=(rank - 1) % world_size)
sending.wait()
seen["send/recv"] = (token, got.clone())
print(f"sent {token.item():g} to rank {(rank + 1) % world_size}, got {got.item():g} from rank {(rank - 1) % world_size}")

# %% [markdown]
# Bring every rank's record back to the notebook and draw it: one row of boxes per rank, before on
# the left, after on the right.

# %%
seen = %ddp_gather seen
order = ["broadcast", "all_reduce", "reduce_scatter", "all_gather", "send/recv"]
draw.collectives({name: ([s[name][0] for s in seen], [s[name][1] for s in seen]) for name in order},
                 title=say("What each rank held, before and after each collective",
                           "每个集合通信前后，各 rank 持有的数据"),
                 before=say("before", "之前"), after=say("after", "之后"))

# %% [markdown]
# Check what the picture says, for every rank:

# %%
for r, s in enumerate(seen):
    assert s["broadcast"][1].tolist() == [0.0, 1.0]                          # rank 0's tensor
    assert s["all_reduce"][1].tolist() == [60.0, 64.0]                       # 0+10+20+30, 1+11+21+31
    assert s["reduce_scatter"][1].item() == 4 * r + 60                       # chunk r of the sum
    assert s["all_gather"][1].tolist() == [0.0, 1.0, 4.0, 9.0]               # everybody's piece
    assert s["send/recv"][1].item() == 100 + (r - 1) % 4                     # from the left neighbour
print("every rank holds what the collective promised")

# %% [markdown]
# ## barrier: everybody waits for the slowest
#
# A collective finishes on a rank only once **every** rank has joined it. `barrier()` is a collective
# with no data: here rank *r* first works for 0.2·*r* seconds, then waits at the barrier. The timeline
# shows the waiting: all ranks leave together, when rank 3 arrives. (The same happens inside every
# training step: the fastest rank waits for the slowest at the gradient all-reduce. Lesson 9 is about
# that.)

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
draw.timeline(events, title=say("barrier(): every rank leaves when the last one arrives",
                                "barrier()：最后一个 rank 到达时，所有 rank 一起离开"),
              xlabel=say("seconds", "秒"))

# %% [markdown]
# ## When a rank skips a collective
#
# A collective only finishes when **every** rank of the group calls it. Here rank 2 skips the
# barrier. Plain torch would let ranks 0, 1 and 3 wait for the group's timeout (30 minutes by
# default), then fail with gloo's "Timed out waiting ... for recv operation". ddplab looks at each
# rank's own stack while a cell runs: after about two seconds it sees three ranks waiting in
# `barrier` for a rank that finished the cell, names them, and cuts the barrier short. The group is
# formed again at once, and every rank keeps its variables.

# %% tags=["raises-exception"]
%%ddp
if rank != 2:
    dist.barrier()

# %% [markdown]
# The same when ranks call **different** collectives at the same point, here `broadcast` on rank 0
# and `all_reduce` on the others (or the same one with tensors of different shapes or dtypes):

# %% tags=["raises-exception"]
%%ddp
t = torch.ones(1)
if rank == 0:
    dist.broadcast(t, src=0)
else:
    dist.all_reduce(t)

# %% [markdown]
# And the pool works as before:

# %%
%%ddp
t = torch.ones(1)
dist.all_reduce(t)
print(t.item())

# %% [markdown]
# ## Exercises
#
# 1. Change `all_reduce` to use `op=dist.ReduceOp.MAX`. What does every rank hold now? Predict it
#    before you run the cell.
# 2. Make rank 1 all-reduce a tensor of 3 values while the others all-reduce 2. What does ddplab
#    report, and why can gloo not add them?
# 3. Build `all_reduce` yourself from `reduce_scatter_tensor` and `all_gather_into_tensor`, and
#    check it gives the same result as `dist.all_reduce`.
#
# ## 练习
#
# 1. 把 `all_reduce` 改为 `op=dist.ReduceOp.MAX`。先预测，再运行：每个 rank 得到什么？
# 2. 让 rank 1 对含 3 个值的张量做 all-reduce，而其他 rank 用 2 个值。ddplab 报告了什么？为什么 gloo 无法把它们相加？
# 3. 用 `reduce_scatter_tensor` 和 `all_gather_into_tensor` 自己实现 `all_reduce`，并与 `dist.all_reduce` 的结果比较。

# %%
%ddp_stop
