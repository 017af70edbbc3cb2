# %% [markdown]
# # Lesson 10 · Stragglers and uneven inputs
#
# **In short.** In data-parallel training every step ends with an all-reduce of the gradients, and a
# collective finishes only when **every** rank has joined it. So the whole group runs at the pace of
# its slowest rank, the *straggler*. Here you slow rank 2 down with a slider while the group trains
# and watch all four ranks drop to the same low speed on the dashboard; a timeline of a few steps
# shows where the time goes. Then you fix the straggler: give it a smaller share of each global
# batch, in proportion to its measured speed, and weight each rank's loss so that the update is
# still exactly the gradient of the whole batch. The last part is about the other way ranks get out
# of step: one rank has more batches than another, and `Join` keeps the ranks that finish first in
# the all-reduces until every rank is done.
#
# **You will learn**
# - why one slow rank slows every rank down: each all-reduce waits for the last rank to arrive
# - how to read a straggler off ddplab's timeline: who computes, who waits, and for how long
# - how to split the global batch by measured speed, and why the loss must then be weighted to keep the same update
# - what happens when ranks have different numbers of batches, and how `Join` lets them finish together
#
# **Study time:** about 45 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** every rank's samples/s falling together when a slider slows one rank; a
# timeline in which rank 2 computes while the others wait; throughput recovered by rebalancing the
# batch, with the same gradient to 1e-6; uneven data finished cleanly with `Join`.

# %% [markdown] lang=zh
# # 第 10 课 · 慢节点与不均匀数据
#
# **简而言之**：数据并行训练的每一步都以梯度的 all-reduce 结束，而一次集合通信要等**所有**进程（rank）都加入才会完成。所以整个组按最慢的那个 rank，也就是*慢节点*的节奏前进。这一课在训练进行时用滑块让 rank 2 变慢，你会在仪表盘上看到四个 rank 一起降到同样的低速；几步训练的时间线显示时间花在了哪里。接着修复慢节点：按测得的速度分给它较小的一份全局批次，并给每个 rank 的损失加权，使更新仍然恰好等于整个批次的梯度。最后一部分讲 rank 步调不一致的另一种情况：某个 rank 的批次比别的 rank 多，`Join` 让先做完的 rank 继续参加 all-reduce，直到所有 rank 都完成。
#
# **你将学到**
# - 为什么一个慢 rank 会拖慢所有 rank：每次 all-reduce 都要等最后一个 rank 到达
# - 怎样从 ddplab 的时间线上看出慢节点：谁在计算、谁在等待、等了多久
# - 怎样按测得的速度拆分全局批次，以及为什么这时必须给损失加权才能保持同样的更新
# - 各 rank 的批次数不同时会发生什么，以及 `Join` 如何让它们一起结束
#
# **学习时间**：约 45 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：滑块让一个 rank 变慢时，每个 rank 的样本/秒一起下降；一条时间线，其中 rank 2 在计算，其他 rank 在等待；重新分配批次后吞吐量恢复，而梯度在 1e-6 以内保持不变；不均匀的数据借助 `Join` 顺利完成。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, knobs, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## A training step, timed in two parts, and a slower rank 2
#
# A small model and a fixed batch of 64 per rank. So that the times read the same whatever else
# this machine is doing, each rank's work on its samples is simulated on top of the small model's
# real computing: `work(n)` sleeps 0.25 ms per sample, about what a larger model's forward and
# backward would take. Rank 2 plays a slower machine: its samples cost it `1 + slow` times as
# long, where `slow` is a knob, `ddplab.knob("slow", 0)`, that a slider sets while the training runs
# (0: as fast as the others). Each step is recorded in two parts with a `Timeline`:
#
# - **compute**: forward pass, loss, and the simulated work;
# - **sync**: `backward()` and `opt.step()`. DDP all-reduces the gradients during `backward()`.
#   On a model this small almost all of that bar is the all-reduce, and a rank that arrives early
#   waits there for the others.

# %% [markdown] lang=zh
# ## 分两段计时的训练步，以及一个较慢的 rank 2
#
# 用一个小模型，每个 rank 一个固定的 64 样本批次。为了让计时不受这台机器上其他程序的影响，每个 rank 处理样本的工作量是在小模型真实计算之外模拟出来的：`work(n)` 每个样本睡眠 0.25 毫秒，大约相当于一个更大模型的前向和反向传播所需的时间。rank 2 扮演一台较慢的机器：它处理样本要花原来的 `1 + slow` 倍的时间，其中 `slow` 是一个旋钮 `ddplab.knob("slow", 0)`，训练运行时由滑块设置（0 表示和其他 rank 一样快）。每一步用 `Timeline` 分两段记录：
#
# - **compute**（计算）：前向传播、损失，以及模拟的工作量；
# - **sync**（同步）：`backward()` 和 `opt.step()`。DDP 在 `backward()` 期间 all-reduce 梯度。模型这么小，这一段几乎全是 all-reduce；先到的 rank 就在这里等待其他 rank。

# %%
%%ddp
import time
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import Timeline

torch.manual_seed(0)                                    # the same initial model on every rank
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
torch.manual_seed(100 + rank)                           # but each rank its own data
x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))

def work(n):
    """The simulated work on n samples: 0.25 ms each; rank 2, a slower machine, takes 1 + slow times as long."""
    slow = ddplab.knob("slow", 0)
    time.sleep(n * 0.00025 * (1 + slow if rank == 2 else 1))
    return slow

# %% [markdown]
# ## One slow rank slows down every rank
#
# The next cell trains **in the background** (`%%ddp --background` returns at once; the dashboard
# stays live) for `SECONDS` seconds. Below it, a slider sets `slow` on every rank; only rank 2 acts
# on it. Drag it while the group trains and watch the dashboard: the samples/s of **all four**
# ranks drop together. Ranks 0, 1 and 3 are not slower themselves. They just wait for rank 2 at
# every all-reduce.
#
# Unlike the averaging period of lesson 8, this knob does not change which collectives the ranks
# call, so each rank may follow it whenever the new value reaches it. What the ranks must agree on is
# when to stop: every 10 steps rank 0 broadcasts whether its clock says time is up.

# %% [markdown] lang=zh
# ## 一个慢 rank 拖慢所有 rank
#
# 下一个单元格在**后台**训练（`%%ddp --background` 立即返回，仪表盘继续实时更新）`SECONDS` 秒。它下面的滑块在每个 rank 上设置 `slow`，但只有 rank 2 会照着做。在训练进行时拖动滑块，观察仪表盘：**四个** rank 的样本/秒一起下降。rank 0、1、3 本身并没有变慢，它们只是在每次 all-reduce 时等待 rank 2。
#
# 与第 8 课的平均周期不同，这个旋钮不会改变各 rank 调用哪些集合通信，所以新值到达哪个 rank，那个 rank 就可以随时照着做。各 rank 必须一致的是何时停止：每 10 步，rank 0 广播一次它的时钟是否显示时间已到。

# %% [markdown]
# **Predict, then run.** Two seconds into the run the notebook sets `slow` to 3: rank 2's work per
# step goes from 16 ms to 64 ms; the other ranks' work stays 16 ms. Predict rank 0's samples/s after
# that, as a percentage of its samples/s before (100 % = unchanged).

# %% [markdown] lang=zh
# **先预测，再运行。** 训练开始 2 秒后，notebook 会把 `slow` 设为 3：rank 2 每步的工作量从 16 毫秒变为 64 毫秒；其他 rank 的工作量仍是 16 毫秒。预测此后 rank 0 的样本/秒是之前的百分之多少（100% 表示不变）。

# %%
predict("10.rank0_kept", ...)    # rank 0's samples/s after rank 2 slowed (slow = 3), in % of before

# %%
%%ddp --background
SECONDS = 6
timeline, seen = Timeline(), []                         # what each step did when; the knob at each step
t0, step = time.perf_counter(), 0
while True:
    with timeline("compute"):
        loss = nn.functional.cross_entropy(model(x), y)
        seen.append(work(len(x)))                       # rank 2 takes 1 + slow times as long
    with timeline("sync"):
        opt.zero_grad()
        loss.backward()                                 # the gradient all-reduce: waits for all ranks
        opt.step()
    step += 1
    ddplab.log(loss=loss, samples=len(x), slow=seen[-1])
    if step % 10 == 0:                                  # rank 0's clock decides when to stop
        stop = torch.tensor([time.perf_counter() - t0 > SECONDS])
        dist.broadcast(stop, src=0)
        if stop.item():
            break

# %%
w = knobs.slider("slow", 0, 5, value=0, description=say("rank 2 slower: × (1 + slow)", "rank 2 变慢：×（1 + slow）"))
w

# %% [markdown]
# Run top to bottom without you, the notebook moves the slider itself: the next cell waits 2
# seconds, sets it to 3 (rank 2's samples then cost it 4 times as long: 64 ms of work per step
# instead of 16), and `%ddp_wait` waits for the training to end.

# %% [markdown] lang=zh
# 如果没有人操作、从头到尾自动运行，notebook 会自己移动滑块：下一个单元格等待 2 秒，把它设为 3（于是 rank 2 处理样本的耗时变为原来的 4 倍：每步的工作量从 16 毫秒变成 64 毫秒），然后 `%ddp_wait` 等训练结束。

# %%
import time

time.sleep(2)
w.value = 3
%ddp_wait

# %% [markdown]
# `%ddp_history` has every step of every rank, with the knob as that rank saw it. Split each rank's
# steps at the moment rank 2 first slowed down, and compare its samples/s before and after.

# %% [markdown] lang=zh
# `%ddp_history` 记录了每个 rank 的每一步，以及那个 rank 当时看到的旋钮值。以 rank 2 第一次变慢的时刻为界，把每个 rank 的步分成前后两段，比较它前后的样本/秒。

# %%
import numpy as np

h = %ddp_history
h = h.where(cell=h.array("cell").max())                  # the background cell's points
per_rank = [h.where(rank=r) for r in range(4)]
t_slow = per_rank[2].array("time")[np.argmax(per_rank[2].array("slow") > 0)]   # rank 2's first slow step

def rate(points, start, end):
    """samples/s of these points between two moments (seconds since the cell started)."""
    t = points.array("time")
    inside = (t > start) & (t <= end)
    return points.array("samples")[inside].sum() / (end - start)

before = [rate(p, 0.5, t_slow) for p in per_rank]        # the first half-second is start-up
after = [rate(p, t_slow + 0.2, p.array("time").max()) for p in per_rank]
for r in range(4):
    print(say(f"rank {r}: {before[r]:6,.0f} samples/s before, {after[r]:6,.0f} after rank 2 slowed ({after[r] / before[r]:.0%})",
              f"rank {r}：rank 2 变慢前 {before[r]:6,.0f} 样本/秒，之后 {after[r]:6,.0f}（{after[r] / before[r]:.0%}）"))
reveal("10.rank0_kept", float(100 * after[0] / before[0]), unit="%")
assert t_slow > 0.5 and all(a < 0.75 * b for a, b in zip(after, before)), (before, after)   # everyone held back
assert max(after) < 1.1 * min(after), after                                                  # in lockstep
bins = np.arange(0, h.array("time").max(), 0.5)
draw.lines({f"rank {r}": (bins[1:], np.histogram(per_rank[r].array("time"), bins, weights=per_rank[r].array("samples"))[0] / 0.5)
            for r in range(4)},
           xlabel=say("seconds", "秒"), ylabel=say("samples/s", "样本/秒"),
           title=say(f"Rank 2 slowed at {t_slow:.1f} s: every rank slows down", f"rank 2 在 {t_slow:.1f} 秒时变慢：所有 rank 一起变慢"))

# %% [markdown]
# ## Where the time goes: a timeline of four steps
#
# Four steps from the middle of the slowed part, every rank on the same clock. Rank 2's
# **compute** bars are `1 + slow` times as long as the others'. The other ranks finish their
# compute sooner and then spend most of the step in **sync**, waiting for rank 2's gradients.
# Their sync bars all end at the same moment, when rank 2 joins the all-reduce.

# %% [markdown] lang=zh
# ## 时间花在哪里：四步的时间线
#
# 取变慢阶段中间的四步，所有 rank 使用同一个时钟。rank 2 的 **compute** 条是其他 rank 的 `1 + slow` 倍长。其他 rank 较早算完，然后把这一步的大部分时间花在 **sync** 上，等待 rank 2 的梯度。它们的 sync 条都在同一时刻结束，也就是 rank 2 加入 all-reduce 的时刻。

# %%
events = %ddp_gather timeline.events
seen = %ddp_gather seen
slowed = [i for i, s in enumerate(seen[2]) if s > 0]     # the steps rank 2 straggled (the same steps on all ranks)
middle = slowed[len(slowed) // 2]
window = [e[2 * middle: 2 * middle + 8] for e in events]  # 2 bars per step
t0 = min(e[0] for bars in window for e in bars)
window = [[(1000 * (s - t0), 1000 * (e - t0), kind, label) for s, e, kind, label in bars] for bars in window]
draw.timeline(window, title=say("Four steps with rank 2 slowed: the others wait in the all-reduce",
                                "rank 2 变慢时的四步：其他 rank 在 all-reduce 中等待"),
              xlabel=say("milliseconds", "毫秒"))

# %% [markdown]
# The same in numbers: the median milliseconds per step of each part, before rank 2 slowed down and
# after.

# %% [markdown] lang=zh
# 用数字再看一遍：rank 2 变慢之前和之后，每一步中两段各自的耗时中位数（毫秒）。

# %%
import statistics

def median_ms(bars, kind, steps):
    return 1000 * statistics.median(bars[2 * i + (kind == "sync")][1] - bars[2 * i + (kind == "sync")][0] for i in steps)

normal = range(5, slowed[0])                             # after the first few steps, before rank 2 slowed
for r in range(4):
    print(say(f"rank {r}: normal: compute {median_ms(events[r], 'compute', normal):4.1f} ms, sync {median_ms(events[r], 'sync', normal):4.1f} ms"
              f"  |  rank 2 slowed: compute {median_ms(events[r], 'compute', slowed):4.1f} ms, sync {median_ms(events[r], 'sync', slowed):4.1f} ms",
              f"rank {r}：正常时 compute {median_ms(events[r], 'compute', normal):4.1f} 毫秒，sync {median_ms(events[r], 'sync', normal):4.1f} 毫秒"
              f"  |  rank 2 变慢时 compute {median_ms(events[r], 'compute', slowed):4.1f} 毫秒，sync {median_ms(events[r], 'sync', slowed):4.1f} 毫秒"))
others = [0, 1, 3]
assert all(median_ms(events[2], "compute", slowed) > 2.5 * median_ms(events[r], "compute", slowed) for r in others)
assert all(median_ms(events[r], "sync", slowed) > median_ms(events[2], "sync", slowed) for r in others)
print(say("rank 2 spends its step computing; ranks 0, 1, 3 spend theirs waiting for it",
          "rank 2 把每一步的时间花在计算上；rank 0、1、3 则花在等待它上"))

# %% [markdown]
# Rank 2's own sync bar stays short: by the time it arrives, the others are already waiting, so the
# all-reduce starts at once. Every second the others spend in sync is a second of rank 2's extra work.
#
# ## Fixing a straggler: give it less work
#
# The group is as fast as its slowest rank, so make every rank equally fast: keep the **global**
# batch (256 samples per step, what the optimizer sees) but split it in proportion to each rank's
# speed. First each rank measures its own samples/s alone: forward, backward and its work, on
# a plain copy of the model (no all-reduce, so no waiting for the others). `all_gather_object` shares
# the four speeds, and the 256 samples are divided in proportion.
#
# **The update must stay the same.** DDP *averages* the ranks' gradients: each rank counts
# 1/4, however many samples it had. With uneven batches that is wrong: rank 2's few samples would
# count as much as another rank's many. The gradient of the global batch is the mean over all 256
# samples, that is, each rank's mean gradient weighted by its share, b_r / 256. So each rank
# multiplies its loss by b_r × 4 / 256 before `backward()`; DDP's division by 4 then leaves exactly
# Σ_r (b_r / 256) × (rank r's mean gradient) = the mean gradient over all 256 samples.
#
# `slow` stays at 3 (rank 2 four times as slow), set again with `%ddp_knob` in case you moved the
# slider, which moves the same knob.

# %% [markdown] lang=zh
# rank 2 自己的 sync 条一直很短：它到达时，其他 rank 早已在等待，所以 all-reduce 立刻开始。其他 rank 在 sync 中多花的每一秒，都是 rank 2 多做的那份工作。
#
# ## 修复慢节点：给它更少的工作
#
# 整个组的速度取决于最慢的 rank，那就让每个 rank 一样快：保持**全局**批次不变（每步 256 个样本，这是优化器看到的），但按各 rank 的速度按比例拆分。先让每个 rank 单独测量自己的样本/秒：在模型的一个普通副本上做前向、反向和它自己的（模拟）工作量（没有 all-reduce，所以不用等待别人）。`all_gather_object` 让各 rank 共享这四个速度，再把 256 个样本按比例分配。
#
# **更新必须保持不变。** DDP 对各 rank 的梯度取*平均*：不管某个 rank 有多少样本，它都只占 1/4。批次不均匀时这就错了：rank 2 那几个样本的分量，会和别的 rank 的许多样本一样重。全局批次的梯度是全部 256 个样本的平均，也就是把每个 rank 的平均梯度按它的份额 b_r / 256 加权。所以每个 rank 在 `backward()` 之前把自己的损失乘以 b_r × 4 / 256；DDP 再除以 4 之后，得到的恰好是 Σ_r (b_r / 256) × （rank r 的平均梯度）= 全部 256 个样本的平均梯度。
#
# `slow` 保持为 3（rank 2 的耗时是原来的 4 倍）：以防你动过滑块，这里用 `%ddp_knob` 再设一次；滑块调的也是同一个旋钮。

# %%
%ddp_knob slow 3

# %%
%%ddp
import copy
import statistics

GLOBAL = 256                                             # samples per step, all ranks together

def own_speed(batch=64, repeats=10):
    """This rank's samples/s alone: forward, backward and its work on a plain copy of the model
    (the median of `repeats` timings, after 2 to warm up)."""
    alone = copy.deepcopy(model.module)
    xb, yb = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    seconds = []
    for _ in range(2 + repeats):
        tic = time.perf_counter()
        loss = nn.functional.cross_entropy(alone(xb), yb)
        work(batch)
        loss.backward()
        seconds.append(time.perf_counter() - tic)
    return batch / statistics.median(seconds[2:])

speeds = [None] * world_size
dist.all_gather_object(speeds, own_speed())              # every rank gets all four speeds
sizes = [max(1, round(GLOBAL * s / sum(speeds))) for s in speeds]
sizes[0] += GLOBAL - sum(sizes)                          # rounding's leftovers go to rank 0

def train_steps(steps, sizes):
    """DDP steps on global batches of 256, rank r taking sizes[r] samples; returns steps per second."""
    g = torch.Generator().manual_seed(1)                 # the same global batches on every rank
    start = sum(sizes[:rank])
    dist.barrier()
    tic = time.perf_counter()
    for _ in range(steps):
        X, Y = torch.randn(GLOBAL, 64, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g)
        xb, yb = X[start:start + sizes[rank]], Y[start:start + sizes[rank]]   # this rank's share
        loss = nn.functional.cross_entropy(model(xb), yb)
        work(len(xb))
        opt.zero_grad()
        (loss * sizes[rank] * world_size / GLOBAL).backward()   # weighted by this rank's share
        opt.step()
        ddplab.log(loss=loss, samples=len(xb))
    return steps / (time.perf_counter() - tic)

# %% [markdown]
# First, 30 steps the plain way: 64 samples each, with rank 2 four times as slow. ddplab records a
# **timeline** of every `%%ddp` cell (lesson 4 reads DDP's buckets on it): on every rank, each
# forward, backward and optimizer step and each all-reduce, on one clock, with the part of each
# all-reduce spent waiting for the last rank to arrive. `%ddp_timeline` returns it for the last
# `%%ddp` cell. Its `verdict()` names the rank the others wait for, and `breakdown()` gives each
# rank's seconds per step: `compute`, `comm`, `wait` and the whole `step`.

# %% [markdown] lang=zh
# 先按普通的做法训练 30 步：每个 rank 64 个样本，rank 2 的耗时是原来的 4 倍。ddplab 为每个 `%%ddp` 单元格记录一条**时间线**（第 4 课用它观察了 DDP 的桶）：在每个 rank 上，每次前向计算、反向传播、优化器更新和每次 all-reduce 都用同一个时钟记录下来，每次 all-reduce 中等待最后一个 rank 到达的那一部分也单独记下。`%ddp_timeline` 返回最近一个 `%%ddp` 单元格的时间线。它的 `verdict()` 指出其他 rank 在等哪个 rank，`breakdown()` 给出每个 rank 每一步的秒数：`compute`（计算）、`comm`（通信）、`wait`（等待）和整步的 `step`。

# %%
%%ddp
even = train_steps(30, [GLOBAL // world_size] * world_size)   # 64 each: rank 2 holds everyone back

# %%
tl_even = %ddp_timeline
waits = {r: part["wait"] for r, part in tl_even.breakdown().items()}   # seconds per step
extra = 64 * 0.00025 * 3                                 # rank 2's extra work per step: 48 ms
print(tl_even.verdict())
for r in (0, 1, 3):
    print(say(f"rank {r} waits {1e3 * waits[r]:4.1f} ms per step in the all-reduce ({waits[r] / extra:.0%} of rank 2's "
              f"extra {1e3 * extra:.0f} ms of work)",
              f"rank {r} 每步在 all-reduce 中等待 {1e3 * waits[r]:4.1f} 毫秒（rank 2 多出的 {1e3 * extra:.0f} 毫秒工作量的 "
              f"{waits[r] / extra:.0%}）"))
print(say(f"rank 2 waits {1e3 * waits[2]:.1f} ms per step: it arrives last; ranks 0, 1 and 3 together wait "
          f"{1e3 * (waits[0] + waits[1] + waits[3]):.0f} ms in every step",
          f"rank 2 每步等待 {1e3 * waits[2]:.1f} 毫秒：它最后到达；rank 0、1、3 合计每一步等待 "
          f"{1e3 * (waits[0] + waits[1] + waits[3]):.0f} 毫秒"))
blame = tl_even.blame()
assert max(blame, key=blame.get) == 2 and "rank 2" in tl_even.verdict(), tl_even.verdict()   # the straggler named
assert all(waits[r] > 0.5 * extra for r in (0, 1, 3)), waits   # the others wait out most of rank 2's extra work
assert waits[2] < 0.25 * min(waits[r] for r in (0, 1, 3)), waits   # rank 2 itself waits far less than the others
tl_even

# %% [markdown]
# Little of each step is computing. The simulated work is a `time.sleep` between the forward pass
# and `backward()`, not a PyTorch operation, so it has no bar of its own (and the breakdown's
# `compute` leaves it out): it is the blank before each backward, four times as long on rank 2.
# Ranks 0, 1 and 3 then reach the all-reduce first and wait there, in red, until rank 2 arrives.
# Their backward bars are long only because `backward()` returns when the all-reduce has completed
# (the breakdown counts backward as compute only until its gradients are ready). That waiting is
# what the straggler costs them in every step: about all of its 48 ms of extra work. Rank 2 arrives
# last and waits for no one.
#
# Now the same 30 steps with the global batch split by speed. On the timeline, the red should all but
# disappear.

# %% [markdown] lang=zh
# 每一步中只有很少的时间在计算。模拟的工作量是前向传播和 `backward()` 之间的一次 `time.sleep`，不是 PyTorch 运算，所以它没有自己的条（breakdown 的 `compute` 也不包括它）：它就是每次反向传播之前的那段空白，在 rank 2 上的长度是其他 rank 的四倍。接着 rank 0、1、3 先到达 all-reduce，在那里（红色部分）一直等到 rank 2 到达。它们的反向传播条之所以很长，只是因为 `backward()` 要等 all-reduce 完成才返回（breakdown 只把反向传播中梯度就绪之前的部分算作计算）。这段等待就是慢节点让它们在每一步付出的代价，差不多等于 rank 2 多出的全部 48 毫秒工作量。rank 2 最后到达，不用等任何 rank。
#
# 现在用按速度拆分的全局批次把同样的 30 步再训练一遍。在时间线上，红色应该几乎消失。

# %%
%%ddp
balanced = train_steps(30, sizes)

# %%
tl_balanced = %ddp_timeline
after = {r: part["wait"] for r, part in tl_balanced.breakdown().items()}
print(tl_balanced.verdict())
for r in range(4):
    print(say(f"rank {r}: waits {1e3 * waits[r]:4.1f} ms per step with 64 samples each, {1e3 * after[r]:4.1f} ms with "
              "the batch split by speed",
              f"rank {r}：每个 rank 64 个样本时，每步等待 {1e3 * waits[r]:4.1f} 毫秒；按速度拆分批次后 {1e3 * after[r]:4.1f} 毫秒"))
others_before, others_after = (sum(w[r] for r in (0, 1, 3)) for w in (waits, after))
print(say(f"ranks 0, 1 and 3 together: {1e3 * others_before:.0f} ms of waiting per step before, {1e3 * others_after:.0f} ms "
          f"after ({others_after / others_before:.0%})",
          f"rank 0、1、3 合计：之前每步等待 {1e3 * others_before:.0f} 毫秒，之后 {1e3 * others_after:.0f} 毫秒"
          f"（{others_after / others_before:.0%}）"))
assert others_after < 0.5 * others_before, (waits, after)    # the waiting fell to under half
tl_balanced

# %% [markdown]
# Every rank now reaches the all-reduce at about the same moment, so there is little left to wait
# for: the time ranks 0, 1 and 3 spent waiting now goes into samples. What is left is noise, the
# four ranks competing for this one machine's CPU, and the rounding of the shares. The shares themselves, and the
# throughput of the two runs:

# %% [markdown] lang=zh
# 现在每个 rank 到达 all-reduce 的时刻都差不多，所以几乎没有什么可等的了：rank 0、1、3 原来花在等待上的时间，现在用来处理样本。剩下的那一点等待来自噪声（四个 rank 在同一台机器上争用 CPU）以及份额的取整。下面是各 rank 分到的份额，以及两次运行的吞吐量：

# %%
speeds = %ddp_gather speeds
sizes = %ddp_gather sizes
even = %ddp_gather even
balanced = %ddp_gather balanced
speeds, sizes, even, balanced = speeds[0], sizes[0], even[0], balanced[0]
for r in range(4):
    print(say(f"rank {r}: {speeds[r]:7,.0f} samples/s alone -> {sizes[r]:3} of the 256 samples per step",
              f"rank {r}：单独 {speeds[r]:7,.0f} 样本/秒 -> 每步 256 个样本中分到 {sizes[r]:3} 个"))
print(say(f"64 samples each: {even:.1f} steps/s; in proportion to speed: {balanced:.1f} steps/s ({balanced / even:.1f}x)",
          f"每个 rank 64 个样本：{even:.1f} 步/秒；按速度比例分配：{balanced:.1f} 步/秒（是前者的 {balanced / even:.1f} 倍）"))
assert sum(sizes) == 256 and sizes[2] < min(sizes[r] for r in (0, 1, 3))
assert balanced > 1.25 * even, (even, balanced)
draw.bars(None, panels=[
    dict(values={f"rank {r}": s for r, s in enumerate(sizes)}, ylabel=say("samples per step", "每步样本数"),
         title=say("The global batch split by speed", "按速度拆分全局批次")),
    dict(values={say("64 each", "各 64 个"): even, say("by speed", "按速度"): balanced},
         ylabel=say("steps/s", "步/秒"), title=say("Throughput, rank 2 slow", "吞吐量（rank 2 慢）"))], fmt="{:.3g}")

# %% [markdown]
# **Is it still the same update?** One step's gradient, three ways, from the same parameters and the
# same global batch of 256: (1) DDP with the uneven shares and the weighted loss; (2) DDP with the
# uneven shares and the plain loss (each rank's mean counts 1/4); (3) no DDP at all: one rank's
# plain copy of the model on all 256 samples, the full-batch mean gradient.

# %% [markdown] lang=zh
# **更新还是原来那个吗？** 从同样的参数、同样的 256 个样本的全局批次出发，用三种方式计算一步的梯度：(1) DDP，批次按不均匀的份额拆分，损失加权；(2) DDP，同样不均匀的份额，但损失不加权（每个 rank 的平均各占 1/4）；(3) 完全不用 DDP：在一个 rank 上用模型的普通副本处理全部 256 个样本，得到整个批次的平均梯度。

# %%
%%ddp
def flat_grad(net):
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()])

g = torch.Generator().manual_seed(2)
X, Y = torch.randn(GLOBAL, 64, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g)
start = sum(sizes[:rank])
xb, yb = X[start:start + sizes[rank]], Y[start:start + sizes[rank]]

model.zero_grad()
(nn.functional.cross_entropy(model(xb), yb) * sizes[rank] * world_size / GLOBAL).backward()
weighted = flat_grad(model)                              # (1) DDP, weighted loss
model.zero_grad()
nn.functional.cross_entropy(model(xb), yb).backward()
plain = flat_grad(model)                                 # (2) DDP, plain loss
alone = copy.deepcopy(model.module)
alone.zero_grad()
nn.functional.cross_entropy(alone(X), Y).backward()
full = flat_grad(alone)                                  # (3) the whole batch on this rank alone
gaps = ((weighted - full).abs().max().item(), (plain - full).abs().max().item(), full.abs().max().item())

# %%
gaps = %ddp_gather gaps
weighted_gap, plain_gap, largest = gaps[0]
print(say(f"largest gradient entry {largest:.3f}; weighted DDP differs from the full-batch gradient by at most "
          f"{weighted_gap:.1e}, unweighted DDP by {plain_gap:.1e}",
          f"梯度最大分量 {largest:.3f}；加权 DDP 与整批梯度最多相差 {weighted_gap:.1e}，不加权 DDP 相差 {plain_gap:.1e}"))
assert all(g[0] < 1e-6 for g in gaps), gaps             # the same update, on every rank, up to float32 rounding
assert plain_gap > 1000 * weighted_gap                   # without the weights it is another update

# %% [markdown]
# **A common claim:** "load imbalance between devices is solved by adjusting how the work is
# allocated". **What actually happens:** giving the slow rank a smaller share did bring the
# throughput back (the steps/s printed above), but only the weighting of the loss kept the training
# the same: without it, DDP's plain average of uneven batches gives another gradient (the gap printed
# above) that over-weights the slow rank's few samples, a quiet change of the optimisation that no
# error message reports. And the speeds must be measured, and measured again: a machine that is slow
# now may not be slow in a minute, which is why the speeds here are taken from the rank itself
# before the split. (Layers such as `BatchNorm` would also see a different batch on each rank.)

# %% [markdown] lang=zh
# **一种常见说法：**“设备之间负载不均衡，可以通过调整任务分配来解决。”**实际情况是：**给慢 rank 分配较小的份额，确实让吞吐量恢复了（见上面打印的步/秒），但只有给损失加权才能让训练保持不变：不加权时，DDP 对不均匀批次的简单平均会得到另一个梯度（差距见上面打印的数字），它过分看重慢 rank 的少数样本，悄悄改变了优化过程，却没有任何错误提示。而且速度必须实测，还要反复测：此刻慢的机器，一分钟后未必还慢，所以这里的速度是在拆分之前由各 rank 自己测得的。（像 `BatchNorm` 这样的层，在每个 rank 上看到的批次也会不同。）

# %% [markdown]
# ## Uneven inputs: one rank runs out of data first
#
# Now a different way to get out of step. Rank *r* gets `10 + 4·r` batches: rank 0 has 10,
# rank 3 has 22. (This happens with a dataset split by files of different sizes, or with
# `drop_last=False` and an unlucky split.)
#
# **Without help this hangs.** After its 10th batch rank 0 leaves the loop and stops calling
# `backward()`, so it never joins the 11th all-reduce. Ranks 1-3 wait for it inside that
# all-reduce until the group's timeout (30 s in ddplab, 30 minutes by default in torch), and then fail.
# Worse, the next collective rank 0 does call (a checkpoint's barrier, an evaluation's
# all-reduce) gets paired with the others' gradient all-reduce. (Try it in exercise 1.)
#
# **`Join`** (`torch.distributed.algorithms.Join`) fixes this. Wrap the loop in `with Join([model]):`.
# A rank that runs out of batches then *joins*: until every rank has joined, it keeps taking
# part in each all-reduce the others start, and contributes **zeros** for its gradients (DDP
# "shadows" the missing all-reduces). A joined rank no longer calls `opt.step()`, so its
# parameters fall behind; when the last rank finishes, `Join` broadcasts that rank's parameters to
# all, so every rank ends with the same model. By default the
# gradient sum is still divided by the full world size (4), so in the last steps the average is
# taken as if the finished ranks' gradients were zero.
#
# A `CommCounter` hook counts the gradient all-reduces each rank takes part in.

# %% [markdown] lang=zh
# ## 不均匀的输入：某个 rank 先用完数据
#
# 现在来看另一种步调不一致。rank *r* 有 `10 + 4·r` 个批次：rank 0 有 10 个，rank 3 有 22 个。（数据集按大小不同的文件拆分时，或者使用 `drop_last=False` 又恰好分得不巧时，就会这样。）
#
# **不加处理就会卡住。** rank 0 处理完第 10 个批次后就离开循环，不再调用 `backward()`，所以它永远不会加入第 11 次 all-reduce。rank 1-3 在那次 all-reduce 里一直等它，直到进程组超时（ddplab 中为 30 秒，torch 默认是 30 分钟），然后失败。更糟的是，rank 0 接下来调用的集合通信（检查点的 barrier、评估时的 all-reduce）会和其他 rank 的梯度 all-reduce 配成一对。（在练习 1 中试一试。）
#
# **`Join`**（`torch.distributed.algorithms.Join`）能解决这个问题。把循环包在 `with Join([model]):` 中。用完批次的 rank 就会*加入*（join）：在所有 rank 都加入之前，它继续参加其他 rank 发起的每一次 all-reduce，并为自己的梯度贡献**零**（DDP 用“影子” all-reduce 顶替那些缺席的调用）。已加入的 rank 不再调用 `opt.step()`，所以它的参数会落后；当最后一个 rank 完成时，`Join` 把这个 rank 的参数广播给所有 rank，于是每个 rank 最终得到同一个模型。默认情况下，梯度之和仍然除以完整的进程数（4），所以在最后几步中，平均值是按“已完成的 rank 梯度为零”来计算的。
#
# 一个 `CommCounter` 钩子统计每个 rank 参加的梯度 all-reduce 次数。

# %%
%%ddp
from torch.distributed.algorithms import Join
from ddplab.lessons.ranks import CommCounter, param_spread

torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
counter = CommCounter()                                  # counts the gradient all-reduces
model.register_comm_hook(None, counter.hook)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
torch.manual_seed(100 + rank)
batches = [(torch.randn(16, 64), torch.randint(0, 10, (16,))) for _ in range(10 + 4 * rank)]

steps = 0
with Join([model]):                                      # finished ranks shadow the others' all-reduces
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        ddplab.log(loss=loss, samples=len(x))

spread = param_spread(model)                             # 0.0: identical parameters on every rank

# %% [markdown]
# Every rank finished. Each took part in the same number of all-reduces (22, the longest rank's
# step count: this small model's gradients fit in one bucket, so one all-reduce per step), although
# it had only `10 + 4·r` batches of its own. And all hold the same parameters.

# %% [markdown] lang=zh
# 每个 rank 都完成了。尽管自己只有 `10 + 4·r` 个批次，每个 rank 参加的 all-reduce 次数都相同（22 次，即批次最多的 rank 的步数：这个小模型的梯度放得进一个桶，所以每步一次 all-reduce）。而且所有 rank 持有相同的参数。

# %%
steps = %ddp_gather steps
calls = %ddp_gather counter.calls
spreads = %ddp_gather spread
assert steps == [10, 14, 18, 22], steps
assert calls == [22] * 4, calls                  # every rank joined every all-reduce (1 bucket per step)
assert spreads == [0.0] * 4, spreads             # identical parameters after Join
print(say(f"steps of own data {steps}; all-reduces per rank {calls}; parameters identical on every rank",
          f"用自己数据训练的步数 {steps}；每个 rank 参加的 all-reduce 次数 {calls}；每个 rank 上的参数完全相同"))
draw.bars(None, panels=[
    dict(values={f"rank {r}": s for r, s in enumerate(steps)}, ylabel=say("steps", "步数"),
         title=say("Steps on its own data", "用自己的数据训练的步数")),
    dict(values={f"rank {r}": c for r, c in enumerate(calls)}, ylabel=say("all-reduce calls", "all-reduce 次数"),
         title=say("Gradient all-reduces joined", "参加的梯度 all-reduce 次数")),
], fmt="{:.0f}")

# %% [markdown]
# **What to do about stragglers in practice.** Find out why that machine is slow (another job on
# it, thermal throttling, a slow disk or data loader, an unlucky placement) and watch per-rank step
# times, as the dashboard's table does. If it stays slow, give it less of each global batch and
# weight the losses, as above, or give it fewer batches and finish with `Join`. Asynchronous or
# local-SGD methods (lessons 9 and 8) wait less often, at the cost of stale gradients or of ranks drifting
# apart between syncs.

# %% [markdown] lang=zh
# **实践中如何应对慢节点。** 先查明那台机器为什么慢（上面还跑着别的作业、过热降频、磁盘或数据加载慢、放置位置不巧），并监视每个 rank 的步耗时，就像仪表盘的表格那样。如果它一直慢，就像上面那样给它分配较少的全局批次并给损失加权，或者给它较少的批次、最后用 `Join` 收尾。异步或本地 SGD 方法（第 9 课和第 8 课）等待得更少，代价是梯度陈旧，或者各 rank 在两次同步之间逐渐分开。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why.
#
# **10.1** Predict: with `slow` at 1 instead of 3 (rank 2's work 32 ms per step instead of 16),
# how many samples/s would the whole group train at? Start from each rank's samples/s before rank 2
# slowed (printed after the background run) and the time one step took then. Answer with a number
# of samples/s for the 4 ranks together; then try it: run the background cell again and set the
# slider to 1.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。
#
# **10.1** 预测：如果 `slow` 是 1 而不是 3（rank 2 每步的工作量从 16 毫秒变为 32 毫秒），整个组每秒能训练多少个样本？从 rank 2 变慢之前各 rank 的样本/秒（后台训练之后打印的）以及当时一步所花的时间出发。请写出 4 个 rank 合计的样本/秒；然后试一试：再运行一次后台训练的单元格，把滑块设为 1。

# %%
answer = ...    # samples/s of the whole group with slow = 1
check("10.1", answer, before=before, batch=64, seconds_per_sample=0.00025, slow=1)

# %% [markdown]
# **10.2** Suppose the simulated work were the only cost of a step (no forward, backward or
# all-reduce time). With rank 2 four times as slow (`slow` = 3), how many times as many steps per
# second would the split by speed give as 64 samples each? Answer with a number; then compare it
# with the ratio measured above, and say which parts of a step the split cannot shorten.

# %% [markdown] lang=zh
# **10.2** 假设模拟的工作量是一步中唯一的开销（前向、反向和 all-reduce 都不花时间）。rank 2 的耗时是原来的 4 倍（`slow` = 3）时，按速度拆分得到的每秒步数是每个 rank 64 个样本时的多少倍？请写一个数；然后与上面测得的比值比较，并说说拆分缩短不了一步中的哪些部分。

# %%
answer = ...    # steps/s split by speed, as a multiple of steps/s with 64 samples each, if only the work counted
check("10.2", answer, slow=3, even=even, balanced=balanced)

# %% [markdown]
# **10.3** In the uneven-input run with `Join`, only rank 3 still has batches in its steps 19 to
# 22; the other ranks have joined and contribute zeros. With `Join`'s default
# (`divide_by_initial_world_size=True`), what multiple of rank 3's own gradient is the averaged
# gradient every rank steps with in those steps? Answer with a number, like 0.5.

# %% [markdown] lang=zh
# **10.3** 在使用 `Join` 的不均匀数据训练中，第 19 到 22 步只有 rank 3 还有批次；其他 rank 都已加入（join），贡献的是零。在 `Join` 的默认设置（`divide_by_initial_world_size=True`）下，这几步里每个 rank 用来更新的平均梯度是 rank 3 自己梯度的多少倍？请写一个数，例如 0.5。

# %%
answer = ...    # the averaged gradient as a multiple of rank 3's own, in steps 19 to 22
check("10.3", answer, world_size=len(steps), steps=steps)

# %% [markdown]
# **10.4** Without `Join`, rank 0 leaves its loop after its 10th batch. In the all-reduce of which
# step do ranks 1-3 wait for it until the group's timeout? Answer with a whole number. Then try it:
# remove the `with Join([model]):` line (dedent the loop), restart the pool with `%ddp_stop` and
# `%ddp_start 4 --timeout 5`, run the first `%%ddp` cell (it imports DDP), then the uneven-input
# cell, and read what ddplab says.

# %% [markdown] lang=zh
# **10.4** 不用 `Join` 时，rank 0 处理完第 10 个批次后就离开循环。rank 1-3 会在第几步的 all-reduce 中一直等它，直到进程组超时？请写一个整数。然后试一试：删掉 `with Join([model]):` 这一行（取消循环的缩进），用 `%ddp_stop` 和 `%ddp_start 4 --timeout 5` 重启进程池，运行第一个 `%%ddp` 单元格（它导入 DDP），再运行不均匀数据的单元格，看看 ddplab 报告了什么。

# %%
answer = ...    # the step whose all-reduce ranks 1-3 wait in
check("10.4", answer, steps=steps)

# %%
%ddp_stop
