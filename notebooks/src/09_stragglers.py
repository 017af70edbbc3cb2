# %% [markdown]
# # Lesson 9 · Stragglers and uneven inputs
#
# **In short.** In data-parallel training every step ends with an all-reduce of the gradients, and a
# collective finishes only when **every** rank has joined it. So the whole group runs at the pace of
# its slowest rank, the *straggler*. Here you slow one rank down with a fault drill and watch all
# four ranks drop to the same low speed on the dashboard; a timeline of a few steps shows where
# the time goes. The second half is about the other way ranks get out of step: one rank has
# more batches than another. You use `Join` so that the ranks that finish first stay in the
# all-reduces until every rank is done.
#
# **简介。** 数据并行训练的每一步都以梯度的 all-reduce 结束，而集合通信要等**所有** rank
# 都加入才会完成。所以整个组的速度由最慢的那个 rank（*慢节点*）决定。这一课用故障演练让一个
# rank 变慢，在仪表盘上看四个 rank 一起降到同样的低速；几步训练的时间线显示时间花在哪里。
# 后半部分讲 rank 步调不一致的另一种情况：各 rank 的数据批次数不同。用 `Join` 让先结束的
# rank 继续参加 all-reduce，直到所有 rank 都完成。
#
# **You will see:** every rank at the same samples/s while one is slow, a timeline in which rank 2
# computes while the others wait, and uneven data finished cleanly with `Join`.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## A training step, timed in two parts
#
# A small model and a fixed batch per rank, so the times are easy to read. Each step is recorded
# in two parts with a `Timeline`:
#
# - **compute**: forward pass, loss, and the `ddplab.log` call (the slow-rank drill adds its
#   delay inside `ddplab.log`, once per step);
# - **sync**: `backward()` and `opt.step()`. DDP all-reduces the gradients during `backward()`.
#   On a model this small almost all of that bar is the all-reduce, and a rank that arrives early
#   waits there for the others.

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

def train(steps):
    """`steps` DDP steps; returns this rank's samples/s and what it did when."""
    timeline = Timeline()                               # a common time zero for all ranks
    tic = time.perf_counter()
    for step in range(steps):
        with timeline("compute"):
            loss = nn.functional.cross_entropy(model(x), y)
            ddplab.log(loss=loss, samples=len(x))       # (a slow-rank drill sleeps in here)
        with timeline("sync"):
            opt.zero_grad()
            loss.backward()                             # the gradient all-reduce: waits for all ranks
            opt.step()
    return len(x) * steps / (time.perf_counter() - tic), timeline.events

speed, events = train(200)
print(f"{speed:.0f} samples/s")

# %% [markdown]
# Every rank runs at the same speed, and their total is the group's throughput.
#
# ## One slow rank slows down every rank
#
# `%ddp_fault slow 2 3` turns rank 2 into a straggler: each of its steps now takes 3 times as
# long, as if it ran on a slower or busier machine. Watch the dashboard while the next cell trains:
# the samples/s of **all four** ranks drop together. Ranks 0, 1 and 3 are not slower themselves.
# They just wait for rank 2 at every all-reduce.

# %%
%ddp_fault slow 2 3

# %%
%%ddp
slow_speed, slow_events = train(100)
print(f"{slow_speed:.0f} samples/s")

# %% [markdown]
# Remove the drill and train again: everyone is fast again.

# %%
%ddp_fault clear 2

# %%
%%ddp
after_speed, _ = train(200)
print(f"{after_speed:.0f} samples/s")

# %% [markdown]
# Gather the speeds. In each run all ranks have the same samples/s (DDP keeps them in lockstep),
# so the group's total is 4 × the slowest rank's own pace.

# %%
normal = %ddp_gather speed
slowed = %ddp_gather slow_speed
cleared = %ddp_gather after_speed
speeds = {say("normal", "正常"): normal, say("rank 2 slow ×3", "rank 2 慢 3 倍"): slowed, say("cleared", "恢复后"): cleared}
for label, per_rank in speeds.items():
    print(f"{label:>16}: per rank {[round(s) for s in per_rank]}, total {sum(per_rank):,.0f} samples/s")
    assert max(per_rank) < 1.1 * min(per_rank), per_rank        # lockstep: the same pace on every rank
assert sum(slowed) < min(sum(normal), sum(cleared))
print(f"with one straggler the whole group ran at {sum(slowed) / sum(normal):.0%} of its normal speed")
draw.bars({label: sum(s) for label, s in speeds.items()},
          ylabel=say("samples/s, all ranks", "样本/秒（所有 rank 合计）"),
          title=say("One slow rank sets the pace of the group", "一个慢 rank 决定了整个组的速度"), fmt="{:,.0f}")

# %% [markdown]
# The drill makes each of rank 2's steps 3 times as long as that step would take without it.
# The group as a whole usually slows down by less than 3× here: while rank 2 sleeps, the other
# three ranks have this machine's 2 cores to themselves, so their part of each step runs faster.
#
# ## Where the time goes: a timeline of four steps
#
# Four steps from the middle of the slowed run, every rank on the same clock. Rank 2's
# **compute** bars are long (the drill). The other ranks finish their compute quickly and then
# spend most of the step in **sync**, waiting for rank 2's gradients. Their sync bars all end at
# the same moment, when rank 2 joins the all-reduce.

# %%
slow_events = %ddp_gather slow_events
window = [events[2 * 50: 2 * 54] for events in slow_events]          # steps 50-53: 2 bars per step
t0 = min(e[0] for events in window for e in events)
window = [[(1000 * (s - t0), 1000 * (e - t0), kind, label) for s, e, kind, label in events] for events in window]
draw.timeline(window, title=say("Four steps with rank 2 slowed 3×: the others wait in the all-reduce",
                                "rank 2 慢 3 倍时的四步：其他 rank 在 all-reduce 中等待"),
              xlabel=say("milliseconds", "毫秒"))

# %% [markdown]
# The same in numbers: the median milliseconds per step of each part, in the normal run and over
# all 100 slowed steps.

# %%
import statistics

def median_ms(events, kind):
    return 1000 * statistics.median(e - s for s, e, k, _ in events if k == kind)

normal_events = %ddp_gather events
for r in range(4):
    print(f"rank {r}: normal: compute {median_ms(normal_events[r], 'compute'):4.1f} ms, sync {median_ms(normal_events[r], 'sync'):4.1f} ms"
          f"  |  rank 2 slowed: compute {median_ms(slow_events[r], 'compute'):4.1f} ms, sync {median_ms(slow_events[r], 'sync'):4.1f} ms")
others = [r for r in range(4) if r != 2]
assert all(median_ms(slow_events[2], "compute") > 5 * median_ms(slow_events[r], "compute") for r in others)
assert all(median_ms(slow_events[r], "sync") > median_ms(slow_events[2], "sync") for r in others)
print("rank 2 spends its step computing; ranks 0, 1, 3 spend theirs waiting for it")

# %% [markdown]
# What to do about stragglers in practice: find out why that machine is slow (another job on it,
# thermal throttling, a slow disk or data loader, an unlucky placement), give every rank the same
# amount of work, and watch per-rank step times, as the dashboard's table does. Asynchronous or
# local-SGD methods (lesson 8) wait less often, at the cost of ranks drifting apart between syncs.
#
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
print(f"{steps} steps on my own data, {counter.calls} gradient all-reduces, spread {spread}")

# %% [markdown]
# Every rank finished. Each took part in the same number of all-reduces (22, the longest rank's
# step count: this small model's gradients fit in one bucket, so one all-reduce per step), although
# it had only `10 + 4·r` batches of its own. And all hold the same parameters.

# %%
steps = %ddp_gather steps
calls = %ddp_gather counter.calls
spreads = %ddp_gather spread
assert steps == [10, 14, 18, 22], steps
assert calls == [22] * 4, calls                  # every rank joined every all-reduce (1 bucket per step)
assert spreads == [0.0] * 4, spreads             # identical parameters after Join
print(f"steps of own data {steps}; all-reduces per rank {calls}; parameters identical on every rank")
draw.bars(None, panels=[
    dict(values={f"rank {r}": s for r, s in enumerate(steps)}, ylabel=say("steps", "步数"),
         title=say("Steps on its own data", "用自己的数据训练的步数")),
    dict(values={f"rank {r}": c for r, c in enumerate(calls)}, ylabel=say("all-reduce calls", "all-reduce 次数"),
         title=say("Gradient all-reduces joined", "参加的梯度 all-reduce 次数")),
], fmt="{:.0f}")

# %% [markdown]
# ## Exercises
#
# 1. Run the uneven-input cell **without** `Join` (remove the `with Join([model]):` line and
#    dedent the loop) after `%ddp_start 4 --timeout 5` (restart the pool with `%ddp_stop`
#    first). Which ranks fail, after how long, and what does ddplab say? How many steps did each
#    rank finish (`%ddp_gather steps`)?
# 2. Make rank 1 the straggler with `%ddp_fault slow 1 2` and run `train(100)` again. Predict
#    the total samples/s from the numbers above before you look.
# 3. Pass `Join([model], divide_by_initial_world_size=False)`: the average in the last steps is
#    then taken over the ranks still training only. Compare the final parameters (e.g. with
#    `ddplab.workloads.param_checksum(model.module)`) with the default. Which one is the "right" average?
#
# ## 练习
#
# 1. 去掉 `with Join([model]):`（并取消循环的缩进），先 `%ddp_stop`，再 `%ddp_start 4 --timeout 5`，
#    然后运行不均匀数据的单元格。哪些 rank 失败了？过了多久？ddplab 报告了什么？
#    每个 rank 完成了多少步（`%ddp_gather steps`）？
# 2. 用 `%ddp_fault slow 1 2` 让 rank 1 变慢，再运行 `train(100)`。先根据上面的数字预测总的样本/秒。
# 3. 使用 `Join([model], divide_by_initial_world_size=False)`：最后几步只在仍在训练的 rank 之间取平均。
#    用 `ddplab.workloads.param_checksum(model.module)` 比较与默认设置的最终参数。哪一种才是“正确”的平均？

# %%
%ddp_stop
