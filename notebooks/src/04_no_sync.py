# %% [markdown]
# # Lesson 4 · Gradient accumulation with no_sync
#
# **In short.** When a batch does not fit in memory, you split it into `K` **micro-batches** and call
# `backward()` on each: gradients *add up* in `p.grad`, and one optimizer step follows. With DDP,
# every `backward()` also all-reduces the gradients, so accumulating 4 micro-batches costs 4
# all-reduces where 1 would do. Inside `with model.no_sync():` DDP skips the all-reduce and only
# accumulates; the last micro-batch, outside it, all-reduces the accumulated sum once. You check
# that this gives the same parameters as all-reducing every time, and as one big batch, while
# counting (and timing) the all-reduces.
#
# **简介。** 一个批次放不进内存时，可以把它切成 `K` 个**微批次**（micro-batch），对每个调用 `backward()`：
# 梯度在 `p.grad` 中*累加*，然后做一次优化器更新。使用 DDP 时，每次 `backward()` 都会对梯度做
# all-reduce，所以累积 4 个微批次要做 4 次 all-reduce，而其实 1 次就够了。在 `with model.no_sync():`
# 里面，DDP 跳过 all-reduce，只做累加；最后一个微批次放在外面，对累加的梯度只做一次 all-reduce。
# 这一课验证它与每次都 all-reduce、与一个大批次得到相同的参数，同时统计（并计时）all-reduce 的次数。
#
# **You will see:** all-reduce calls and seconds per setting, side by side as bars.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## One optimizer step from K = 4 micro-batches, three ways
#
# The model is the MLP 784-512-512-10 (`ddplab.workloads.mlp`, 669,706 parameters: 2.7 MB of
# float32 gradients to all-reduce per step). Each rank trains on micro-batches of 16 samples, 4 per
# optimizer step. The three ways:
#
# * **sync every micro-batch**: plain DDP, `backward()` on each micro-batch (DDP all-reduces each time);
# * **no_sync**: the first 3 `backward()` calls inside `model.no_sync()`, the last one outside;
# * **one big batch**: one `backward()` on the 64 samples at once (what accumulation imitates).
#
# The loss of each micro-batch is divided by `K`: the 4 gradients then add up to the gradient of the
# mean loss over the 64 samples, the same as the big batch.

# %%
%%ddp
import contextlib
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import CommCounter, flat_params, median_seconds
from ddplab.workloads import mlp, synthetic_classification

K, MICRO = 4, 16
X, Y = synthetic_classification(n=2048, features=784, classes=10, seed=0).tensors
loss_fn = nn.CrossEntropyLoss()
WAYS = ["sync every micro-batch", "no_sync", "one big batch"]

def micro_batches(step):
    """This rank's K micro-batches of MICRO samples for optimizer step `step`."""
    per_step = world_size * K * MICRO                      # 256 samples in all, per step
    start = (step % (len(X) // per_step)) * per_step + rank * K * MICRO
    return [(X[s:s + MICRO], Y[s:s + MICRO]) for s in range(start, start + K * MICRO, MICRO)]

def train_step(model, opt, step, way):
    """One optimizer step from this rank's K micro-batches; returns the loss of the 64 samples."""
    opt.zero_grad()
    if way == "one big batch":
        x = torch.cat([x for x, _ in micro_batches(step)])
        y = torch.cat([y for _, y in micro_batches(step)])
        loss = loss_fn(model(x), y)
        loss.backward()
        total = loss.item()
    else:
        total = 0.0
        for i, (x, y) in enumerate(micro_batches(step)):
            skip_sync = way == "no_sync" and i < K - 1     # all-reduce only on the last micro-batch
            with model.no_sync() if skip_sync else contextlib.nullcontext():
                loss = loss_fn(model(x), y) / K             # 4 gradients of loss/4 add up to the mean's
                loss.backward()                             # adds this micro-batch's gradient to p.grad
            total += loss.item()
    opt.step()
    ddplab.log(loss=total, samples=K * MICRO)
    return total

def fresh(way):
    """A DDP model from the same initial parameters, with a counter of DDP's all-reduces."""
    model = DDP(mlp(784, 512, 10, seed=0))
    counter = CommCounter()
    model.register_comm_hook(None, counter.hook)
    return model, torch.optim.SGD(model.parameters(), lr=0.05), counter

print(f"{sum(p.numel() for p in mlp().parameters()):,} parameters; step 0: rank {rank} reads "
      f"samples {rank * K * MICRO}..{(rank + 1) * K * MICRO - 1}")

# %% [markdown]
# Train each way for 3 optimizer steps, from the same initial parameters on the same data. Count
# DDP's all-reduce calls step by step, and compare the parameters each way ends with (on every rank).

# %%
%%ddp
calls, params = {}, {}
for way in WAYS:
    model, opt, counter = fresh(way)
    calls[way] = []
    for step in range(3):
        before = counter.calls
        train_step(model, opt, step, way)
        calls[way].append(counter.calls - before)           # all-reduce calls in this step
    params[way] = flat_params(model.module)
bucket_sizes = counter.sizes[-2:]                           # the last step's all-reduces: the buckets
gap_no_sync = (params["no_sync"] - params["sync every micro-batch"]).abs().max().item()
gap_big = (params["one big batch"] - params["sync every micro-batch"]).abs().max().item()
print(f"all-reduce calls in steps 0, 1, 2: {calls}")
print(f"largest difference from 'sync every micro-batch': no_sync {gap_no_sync:.1e}, one big batch {gap_big:.1e}")

# %% [markdown]
# DDP all-reduces gradients in **buckets**, and `CommCounter` sees one call per bucket. From step 1
# on, this model has 2 buckets: one of 267,786 gradients (the last two layers: their gradients are
# ready first in `backward()`, and DDP keeps its first bucket small, 1 MB, so that communication
# starts early) and one of 401,920 (the first layer). So syncing every micro-batch costs 4 × 2 = 8
# calls per step, `no_sync` 2, like one big batch. Step 0 is different: in its first iteration DDP
# does not know yet in which order the gradients become ready, so it puts **all** gradients in one
# bucket; at the next forward it **rebuilds** its buckets in the order it saw (hence 1 + 3 × 2 = 7
# calls, and 1).

# %%
calls = %ddp_gather calls
gaps = %ddp_gather (gap_no_sync, gap_big)
bucket_sizes = %ddp_gather bucket_sizes
assert all(c == calls[0] for c in calls)                            # every rank made the same calls
calls, buckets = calls[0], len(bucket_sizes[0])
assert bucket_sizes[0] == [267786, 401920]                          # 2 buckets, the last layers first
assert calls["sync every micro-batch"][1:] == [4 * buckets] * 2     # K × buckets per step
assert calls["no_sync"][1:] == calls["one big batch"][1:] == [buckets] * 2  # 1 × buckets per step
assert calls["sync every micro-batch"][0] == 1 + 3 * buckets and calls["no_sync"][0] == 1  # step 0: one bucket
assert all(g_ns < 1e-5 and g_big < 1e-5 for g_ns, g_big in gaps), gaps    # the same parameters
print(f"{buckets} buckets: {4 * buckets} all-reduce calls per step syncing every micro-batch, {buckets} with "
      f"no_sync, as for one big batch; parameters agree to {max(max(g) for g in gaps):.1e}")

# %% [markdown]
# Why does it work? DDP's all-reduce *averages* and is linear: averaging 4 gradients one at a time
# and adding them up gives the same as adding them up and averaging once. `no_sync` only delays the
# all-reduce until the gradients are complete. (The catch: between micro-batches the ranks' `p.grad`
# differ, so do not use them, e.g. for gradient clipping, until after the last `backward()`.)
#
# ## Timing it
#
# Now time 6 optimizer steps each way (3 repeats, after a warm-up step; the median, of the slowest
# rank). Each all-reduce moves 2.7 MB between 4 processes sharing 2 cores.

# %%
%%ddp
seconds, counted = {}, {}
for way in WAYS:
    model, opt, counter = fresh(way)
    train_step(model, opt, 0, way)                                  # warm-up: buckets settle
    counter.reset()
    seconds[way] = median_seconds(lambda: [train_step(model, opt, s, way) for s in range(6)],
                                  repeat=3, warmup=0)
    counted[way] = counter.calls // 3                               # calls per 6 steps
print({way: f"{counted[way]} calls, {seconds[way]:.2f} s" for way in WAYS})

# %%
seconds = %ddp_gather seconds
counted = %ddp_gather counted
seconds, counted = seconds[0], counted[0]                 # the same on every rank (the slowest rank's time)
assert counted["sync every micro-batch"] == 4 * counted["no_sync"] == 4 * counted["one big batch"]
names = {"sync every micro-batch": say("sync every\nmicro-batch", "每个微批次\n都同步"),
         "no_sync": say("no_sync", "no_sync"), "one big batch": say("one big\nbatch", "一个大批次")}
WAYS = list(names)                                         # the three ways, in this order
print(", ".join(f"{way}: {seconds[way]:.2f} s" for way in WAYS) + f" for 6 steps; no_sync took "
      f"{seconds['no_sync'] / seconds['sync every micro-batch']:.0%} of the time of syncing every micro-batch")
draw.bars(None, panels=[
    dict(values={names[w]: counted[w] for w in WAYS},
         ylabel=say("all-reduce calls", "all-reduce 次数"), title=say("All-reduce calls in 6 steps", "6 步中的 all-reduce 调用次数")),
    dict(values={names[w]: seconds[w] for w in WAYS},
         ylabel=say("seconds", "秒"), title=say("Time for 6 steps", "6 步的耗时")),
])

# %% [markdown]
# On this machine, in four runs while we wrote the lesson (other notebooks were running at the same
# time), syncing every micro-batch took 0.53–0.64 s for 6 steps and no_sync 0.25–0.31 s, 40–50 % of
# it: the 36 all-reduce calls it saves (about 9 ms each, for 1–1.6 MB between 4 processes) are most
# of the difference. One big batch took 0.18–0.33 s, about as long as no_sync (the same all-reduces,
# the same arithmetic in one piece), but it needs the memory for the whole batch, which is the
# reason to accumulate in the first place. Your numbers will differ, and on a shared machine from
# run to run, so the checks above are on the call counts only. The slower an all-reduce is next to
# the compute (e.g. between machines), the more no_sync saves.
#
# ## Exercises
#
# 1. Forget to divide the loss by `K`. Which of the three ways still agree with each other, and which
#    learning rate would make the accumulated ones match the big batch again?
# 2. Put the **last** micro-batch inside `no_sync()` too (all 4). What do the counter and
#    `param_spread(model)` (from `ddplab.lessons.ranks`) say after the step, and why?
# 3. Try `K = 8` micro-batches of 8 samples. Predict the number of all-reduce calls each way, then
#    measure. How does the time of "sync every micro-batch" change?
#
# ## 练习
#
# 1. 忘记把损失除以 `K`。三种方式中哪些仍然彼此一致？用什么学习率能让累积的方式再次与大批次一致？
# 2. 把**最后一个**微批次也放进 `no_sync()`（4 个全部）。更新之后计数器和 `param_spread(model)`（来自
#    `ddplab.lessons.ranks`）显示什么？为什么？
# 3. 试试 `K = 8` 个 8 样本的微批次。先预测每种方式的 all-reduce 次数，再测量。“每个微批次都同步”的耗时如何变化？

# %%
%ddp_stop
