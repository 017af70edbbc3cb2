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

# %% [markdown] lang=zh
# # 第 4 课 · 用 no_sync 做梯度累积
#
# **简而言之**：一个批次放不进内存时，可以把它切成 `K` 个**微批次**（micro-batch），对每个微批次
# 调用一次 `backward()`：梯度在 `p.grad` 中*累加*起来，然后只做一次优化器更新。使用 DDP 时，每次
# `backward()` 还会对梯度做一次 all-reduce，所以累积 4 个微批次要做 4 次 all-reduce，而其实 1 次
# 就够了。在 `with model.no_sync():` 里面，DDP 跳过 all-reduce，只做累加；最后一个微批次放在它
# 外面，对累加好的梯度只做一次 all-reduce。这一课一边统计（并计时）all-reduce 的次数，一边验证：
# 这样得到的参数，与每个微批次都 all-reduce、与直接用一个大批次训练，完全相同。
#
# **你将看到**：每种做法的 all-reduce 次数和耗时，并排画成柱状图。

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
# optimizer step: at step *s*, rank *r* reads its own 64 consecutive samples of the 256 the four
# ranks read together (`micro_batches(step)`). The three ways:
#
# * **sync every micro-batch**: plain DDP, `backward()` on each micro-batch (DDP all-reduces each time);
# * **no_sync**: the first 3 `backward()` calls inside `model.no_sync()`, the last one outside;
# * **one big batch**: one `backward()` on the 64 samples at once (what accumulation imitates).
#
# The loss of each micro-batch is divided by `K`: the 4 gradients then add up to the gradient of the
# mean loss over the 64 samples, the same as the big batch.

# %% [markdown] lang=zh
# ## 由 K = 4 个微批次完成一次优化器更新：三种做法
#
# 模型是 MLP 784-512-512-10（`ddplab.workloads.mlp`，669,706 个参数：每步要 all-reduce 2.7 MB 的
# float32 梯度）。每个进程（rank）在 16 个样本的微批次上训练，每次优化器更新用 4 个微批次：在第 *s*
# 步，四个 rank 一共读取 256 个样本，rank *r* 读其中属于自己的连续 64 个（`micro_batches(step)`）。
# 三种做法是：
#
# * **每个微批次都同步**：普通的 DDP，对每个微批次调用 `backward()`（DDP 每次都做 all-reduce）；
# * **no_sync**：前 3 次 `backward()` 放在 `model.no_sync()` 里面，最后一次放在外面；
# * **一个大批次**：对 64 个样本一次性调用 `backward()`（梯度累积所模仿的正是它）。
#
# 每个微批次的损失都除以 `K`：这样 4 个梯度加起来，正好是 64 个样本平均损失的梯度，与大批次相同。

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

# %% [markdown]
# Train each way for 3 optimizer steps, from the same initial parameters on the same data. Count
# DDP's all-reduce calls step by step, and compare the parameters each way ends with (on every rank).

# %% [markdown] lang=zh
# 每种做法都从相同的初始参数出发，在相同的数据上训练 3 次优化器更新。逐步统计 DDP 的 all-reduce
# 调用次数，并比较每种做法最后得到的参数（在每个 rank 上都比较）。

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

# %%
calls = %ddp_gather calls
gaps = %ddp_gather (gap_no_sync, gap_big)
bucket_sizes = %ddp_gather bucket_sizes
assert all(c == calls[0] for c in calls)                            # every rank made the same calls
calls, buckets = calls[0], len(bucket_sizes[0])
names = {"sync every micro-batch": say("sync every micro-batch", "每个微批次都同步"),
         "no_sync": "no_sync", "one big batch": say("one big batch", "一个大批次")}
for way in names:
    print(say(f"{names[way]}: all-reduce calls in steps 0, 1, 2: {calls[way]}",
              f"{names[way]}：第 0、1、2 步的 all-reduce 调用次数：{calls[way]}"))
assert bucket_sizes[0] == [267786, 401920]                          # 2 buckets, the last layers first
assert calls["sync every micro-batch"][1:] == [4 * buckets] * 2     # K × buckets per step
assert calls["no_sync"][1:] == calls["one big batch"][1:] == [buckets] * 2  # 1 × buckets per step
assert calls["sync every micro-batch"][0] == 1 + 3 * buckets and calls["no_sync"][0] == 1  # step 0: one bucket
assert all(g_ns < 1e-5 and g_big < 1e-5 for g_ns, g_big in gaps), gaps    # the same parameters
print(say(f"{buckets} buckets: {4 * buckets} all-reduce calls per step syncing every micro-batch, {buckets} with "
          f"no_sync, as for one big batch; on every rank the parameters of the three ways agree to "
          f"{max(max(g) for g in gaps):.1e}",
          f"{buckets} 个桶：每个微批次都同步时每步 {4 * buckets} 次 all-reduce，no_sync 每步 {buckets} 次，与一个大批次"
          f"相同；在每个 rank 上，三种做法得到的参数相差不超过 {max(max(g) for g in gaps):.1e}"))

# %% [markdown]
# DDP all-reduces gradients in **buckets**, and `CommCounter` sees one call per bucket. From step 1
# on, this model has 2 buckets: one of 267,786 gradients (the last two layers: their gradients are
# ready first in `backward()`, and DDP keeps its first bucket small, 1 MB, so that communication
# starts early) and one of 401,920 (the first layer). So syncing every micro-batch costs 4 × 2 = 8
# calls per step, `no_sync` 2, like one big batch. Step 0 is different: in its first iteration DDP
# does not know yet in which order the gradients become ready, so it puts **all** gradients in one
# bucket; at the next forward it **rebuilds** its buckets in the order it saw (hence 1 + 3 × 2 = 7
# calls, and 1).
#
# Why does it work? DDP's all-reduce *averages* and is linear: averaging 4 gradients one at a time
# and adding them up gives the same as adding them up and averaging once. `no_sync` only delays the
# all-reduce until the gradients are complete. (The catch: between micro-batches the ranks' `p.grad`
# differ, so do not use them, e.g. for gradient clipping, until after the last `backward()`.)
#
# ## Timing it
#
# Now time 6 optimizer steps each way (3 repeats, after a warm-up step; the median, of the slowest
# rank). Each all-reduce moves 2.7 MB between 4 processes that share this machine's cores.

# %% [markdown] lang=zh
# DDP 按**桶**（bucket）对梯度做 all-reduce，`CommCounter` 每个桶看到一次调用。从第 1 步起，这个模型
# 有 2 个桶：一个装 267,786 个梯度（最后两层：它们的梯度在 `backward()` 中最先算好，而且 DDP 把第一个
# 桶设得很小，只有 1 MB，好让通信尽早开始），另一个装 401,920 个（第一层）。所以每个微批次都同步时
# 每步要 4 × 2 = 8 次调用，`no_sync` 只要 2 次，与一个大批次相同。第 0 步有所不同：在第一次迭代中，
# DDP 还不知道梯度按什么顺序就绪，所以把**全部**梯度放进一个桶；到下一次前向计算时，它再按观察到的
# 顺序**重建**各个桶（所以是 1 + 3 × 2 = 7 次调用，以及 1 次）。
#
# 为什么这样可行？DDP 的 all-reduce 做的是*平均*，而且是线性的：把 4 个梯度逐个平均再相加，与先相加
# 再平均一次，结果相同。`no_sync` 只是把 all-reduce 推迟到梯度完整之后再做。（需要注意的是：在两个
# 微批次之间，各 rank 的 `p.grad` 并不相同，所以在最后一次 `backward()` 之前不要使用它们，例如不要
# 在这时做梯度裁剪。）
#
# ## 计时
#
# 现在对每种做法计时 6 次优化器更新（先做一步预热，再重复 3 次；取最慢那个 rank 的中位数）。每次
# all-reduce 要在共享本机 CPU 核的 4 个进程之间传送 2.7 MB。

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

# %%
seconds = %ddp_gather seconds
counted = %ddp_gather counted
seconds, counted = seconds[0], counted[0]                 # the same on every rank (the slowest rank's time)
assert counted["sync every micro-batch"] == 4 * counted["no_sync"] == 4 * counted["one big batch"]
WAYS = list(names)                                         # the three ways, in this order
print(say("; ", "；").join(say(f"{names[w]}: {counted[w]} all-reduce calls, {seconds[w]:.2f} s",
                    f"{names[w]}：{counted[w]} 次 all-reduce，{seconds[w]:.2f} 秒") for w in WAYS)
      + say(" (6 steps)", "（6 步）"))
labels = {"sync every micro-batch": say("sync every\nmicro-batch", "每个微批次\n都同步"),
          "no_sync": "no_sync", "one big batch": say("one big\nbatch", "一个大批次")}
draw.bars(None, panels=[
    dict(values={labels[w]: counted[w] for w in WAYS},
         ylabel=say("all-reduce calls", "all-reduce 次数"), title=say("All-reduce calls in 6 steps", "6 步中的 all-reduce 调用次数")),
    dict(values={labels[w]: seconds[w] for w in WAYS},
         ylabel=say("seconds", "秒"), title=say("Time for 6 steps", "6 步的耗时")),
])

# %% [markdown]
# What this machine measured, and what it means:

# %% [markdown] lang=zh
# 本机测得的结果，以及它们的含义：

# %%
sync, lazy, big = (seconds[w] for w in WAYS)
saved_calls = counted["sync every micro-batch"] - counted["no_sync"]
if lazy < 0.9 * sync:
    per_call = (sync - lazy) / saved_calls
    print(say(f"no_sync took {lazy / sync:.0%} of the time of syncing every micro-batch. Both do the same computing, "
              f"so the difference is communication: no_sync made {saved_calls} fewer all-reduce calls in 6 steps, "
              f"and saved {1e3 * per_call:.1f} ms for each of them (an all-reduce of one bucket, 1-1.6 MB, between "
              "4 processes, on this machine, right now).",
              f"no_sync 的耗时是每个微批次都同步的 {lazy / sync:.0%}。两者的计算完全相同，所以差别就在通信上：6 步里 "
              f"no_sync 少做了 {saved_calls} 次 all-reduce，每少做一次省下 {1e3 * per_call:.1f} 毫秒（也就是此刻在这台"
              "机器上，4 个进程之间对一个 1–1.6 MB 的桶做一次 all-reduce 的开销）。"))
elif lazy <= 1.1 * sync:
    print(say(f"no_sync took about as long as syncing every micro-batch ({lazy / sync:.0%} of its time), although it "
              f"makes {saved_calls} fewer all-reduce calls: either an all-reduce is cheap next to the computing on this "
              "machine, or other programs took the cores while one of the two was timed. Run the timing cell again.",
              f"no_sync 的耗时与每个微批次都同步差不多（是后者的 {lazy / sync:.0%}），尽管它少做了 {saved_calls} 次 "
              "all-reduce：要么在这台机器上 all-reduce 比计算便宜得多，要么计时的时候其他程序占用了 CPU 核。"
              "请再运行一次计时单元格。"))
else:
    print(say(f"no_sync was slower this time ({lazy / sync:.0%} of the time of syncing every micro-batch), although it "
              f"does the same computing with {saved_calls} fewer all-reduce calls: that is noise, other programs took "
              "the cores while it was timed. Run the timing cell again.",
              f"这一次 no_sync 反而更慢（是每个微批次都同步的 {lazy / sync:.0%}），尽管它的计算量相同、all-reduce "
              f"却少了 {saved_calls} 次：这是噪声，计时的时候其他程序占用了 CPU 核。请再运行一次计时单元格。"))
if big < 0.9 * lazy:
    print(say(f"One big batch was faster still ({big / lazy:.0%} of no_sync's time): the same all-reduces, and the "
              "arithmetic in one piece (one multiplication of 64 rows instead of four of 16 uses the core better, "
              "with less Python per sample); on a busy machine part of the gap may be noise.",
              f"一个大批次还要更快（是 no_sync 的 {big / lazy:.0%}）：all-reduce 相同，而计算一次完成（一次 64 行的矩阵"
              "乘法比四次 16 行的更能发挥 CPU 核的效率，每个样本分摊的 Python 开销也更少）；机器繁忙时，差距中"
              "也可能有一部分是噪声。"))
elif big <= 1.1 * lazy:
    print(say(f"One big batch took about as long as no_sync ({big / lazy:.0%} of its time): the same all-reduces and "
              "the same arithmetic.",
              f"一个大批次的耗时与 no_sync 差不多（是它的 {big / lazy:.0%}）：all-reduce 相同，计算量也相同。"))
else:
    print(say(f"One big batch was slower than no_sync this time ({big / lazy:.0%} of its time), although it does the "
              "same all-reduces and the same arithmetic: noise from other programs on this machine.",
              f"这一次一个大批次比 no_sync 还慢（是它的 {big / lazy:.0%}），尽管 all-reduce 和计算量都相同：这是"
              "本机上其他程序带来的噪声。"))
print(say("One big batch needs the memory for all 64 samples' activations at once, though: avoiding that is the reason "
          "to accumulate in the first place.",
          "不过，一个大批次需要同时存下全部 64 个样本的激活值所占的内存：正是为了避免这一点，才要做梯度累积。"))

# %% [markdown]
# Your numbers will differ, and on a shared machine they differ from run to run, so the checks above
# are on the call counts only. The slower an all-reduce is next to the compute (e.g. between
# machines), the more no_sync saves.

# %% [markdown] lang=zh
# 你的数字会不一样；在共享的机器上，每次运行的结果也不相同，所以上面的检查只针对调用次数。all-reduce 相对计算越慢（例如在多台机器之间），no_sync 省下的就越多。

# %% [markdown]
# ## On the timeline: where the all-reduces go
#
# ddplab records a **timeline** of every `%%ddp` cell: on every rank, when each forward, backward and
# optimizer step ran, and each collective (DDP's bucket all-reduces included), all on one clock.
# `%ddp_timeline` returns the timeline of the last `%%ddp` cell. The next cell trains 6 optimizer
# steps the no_sync way, with DDP's default buckets. Displayed, the timeline draws each rank's last
# steps as a swimlane: forward, backward and optimizer on its upper row, the all-reduces on its lower
# row, each where it really ran, the part spent waiting for the last rank to arrive shaded red. Below
# the lanes: what the ranks wait for, and each rank's milliseconds per step.

# %% [markdown] lang=zh
# ## 在时间线上看：all-reduce 发生在哪里
#
# ddplab 为每个 `%%ddp` 单元格记录一条**时间线**：在每个 rank 上，每次前向计算、反向传播和优化器更新是什么时候进行的，每次集合通信（包括 DDP 对各个桶的 all-reduce）又是什么时候进行的，全都用同一个时钟。`%ddp_timeline` 返回最近一个 `%%ddp` 单元格的时间线。下一个单元格用 no_sync 的做法训练 6 次优化器更新，使用 DDP 默认的桶。显示出来的时间线把每个 rank 的最后几步画成一条泳道：上面一行是前向、反向和优化器，下面一行是 all-reduce，每一段都画在它实际运行的位置，其中等待最后一个 rank 到达的部分用红色标出。泳道下面是各 rank 在等待什么，以及每个 rank 每一步的毫秒数。

# %%
%%ddp
model, opt, _ = fresh("no_sync")                            # default buckets
for step in range(6):
    train_step(model, opt, step, "no_sync")

# %%
tl = %ddp_timeline
tl

# %% [markdown]
# Each step has four backward bars, one per micro-batch (each micro-batch also has two short forward
# bars: the model, and the loss function, which is a module too), and two all-reduces, one per
# bucket. Both lie under the **last** backward: the three `backward()` calls inside `no_sync()` send
# nothing. And they start *inside* it: bucket 0 (the last two layers, whose gradients are ready
# first) goes out while backward still computes the first layer's gradient; bucket 1 follows once
# that is done, and `backward()` returns when both have completed. That is DDP's **overlap**:
# communication that runs while the gradients are still being computed. (No rank is slower by design
# here: if the verdict names one, it is the rank that other programs on this machine held up during
# these few steps.)
#
# The next cell checks this on every rank, step by step, from the spans themselves. `tl.records()`
# gives one dict per span: its `rank`, `step` (counted by `ddplab.log`: one per optimizer step
# here), `phase` (forward, backward, optimizer, data or comm), `start` and `end` (seconds since the
# cell started), and for an all-reduce its `bucket`, `bytes` and `wait` (the part spent waiting for
# the last rank to arrive). `tl.breakdown()` sums up each rank's steps: `hidden` is the all-reduce
# time that ran under backward's computing, `comm` the rest of it, apart from `wait`.

# %% [markdown] lang=zh
# 每一步有四个反向传播条，每个微批次一个（每个微批次还有两个很短的前向条：一个是模型，一个是损失函数，它也是一个模块），还有两次 all-reduce，每个桶一次。两次 all-reduce 都位于**最后一次**反向传播之下：`no_sync()` 里面的三次 `backward()` 什么也不发送。而且它们在这次反向传播*之中*就开始了：桶 0（最后两层，它们的梯度最先算好）在反向传播还在计算第一层的梯度时就发了出去；第一层算完，桶 1 随即发出，两者都完成之后 `backward()` 才返回。这就是 DDP 的**重叠**：梯度还在计算的时候，通信就已经在进行了。（这里没有哪个 rank 被故意放慢：如果结论点了某个 rank 的名，那只是在这几步里被本机其他程序拖慢的 rank。）
#
# 下一个单元格直接根据这些时间段，在每个 rank 上逐步检查这一点。`tl.records()` 为每个时间段给出一个字典：它的 `rank`、`step`（由 `ddplab.log` 计数，这里每次优化器更新算一步）、`phase`（forward、backward、optimizer、data 或 comm）、`start` 和 `end`（从单元格开始算起的秒数），all-reduce 还有 `bucket`、`bytes` 和 `wait`（等待最后一个 rank 到达的那一部分）。`tl.breakdown()` 汇总每个 rank 的各步：`hidden` 是在反向传播计算期间进行的 all-reduce 时间，`comm` 是其余的通信时间，`wait` 单独计算。

# %%
spans = list(tl.records())

def find(spans, rank, step, phase):
    """One rank's spans of one phase in one step, in the order they started."""
    return sorted((s for s in spans if (s["rank"], s["step"], s["phase"]) == (rank, step, phase)), key=lambda s: s["start"])

def buckets(spans, rank, step):
    """{bucket index: bytes} of one rank's bucket all-reduces in one step."""
    return dict(sorted((s["bucket"], s["bytes"]) for s in find(spans, rank, step, "comm") if s["bucket"] is not None))

parts = tl.breakdown()
for r in range(4):
    assert buckets(spans, r, 0) == {0: 4 * 669_706}                 # step 0: one bucket of all the gradients
    for s in range(1, 6):
        backward, comm = find(spans, r, s, "backward"), find(spans, r, s, "comm")
        assert len(backward) == 4                                   # one backward per micro-batch (K = 4)
        assert buckets(spans, r, s) == {0: 1_071_144, 1: 1_607_680}  # 267,786 and 401,920 float32 gradients
        assert all(backward[-1]["start"] < c["start"] < backward[-1]["end"] for c in comm)  # none before the last
    assert parts[r]["hidden"] > 0                                   # all-reduce under backward's computing

last = find(spans, 0, 5, "backward")[-1]
b0, b1 = sorted((c for c in find(spans, 0, 5, "comm") if c["bucket"] is not None), key=lambda c: c["bucket"])
into, before, after = (1e3 * (b0["start"] - last["start"]), 1e3 * (b1["start"] - b0["start"]),
                       1e3 * (last["end"] - b1["start"]))
print(say(f"rank 0, step 5: bucket 0 ({b0['bytes'] / 1e6:.2f} MB) went out {into:.1f} ms into the last backward, "
          f"{before:.1f} ms before bucket 1 ({b1['bytes'] / 1e6:.2f} MB) was ready; backward returned {after:.1f} ms "
          "later, once both all-reduces had completed",
          f"rank 0，第 5 步：桶 0（{b0['bytes'] / 1e6:.2f} MB）在最后一次反向传播开始 {into:.1f} 毫秒后发出，比桶 1"
          f"（{b1['bytes'] / 1e6:.2f} MB）就绪早 {before:.1f} 毫秒；又过了 {after:.1f} 毫秒，两次 all-reduce 都完成后，"
          "反向传播才返回"))
for r, b in parts.items():
    print(say(f"rank {r}, per step: all-reduce {1e3 * b['hidden']:.1f} ms under backward's computing (hidden), "
              f"{1e3 * b['comm']:.1f} ms after it, {1e3 * b['wait']:.1f} ms waiting for the last rank",
              f"rank {r}，每步：all-reduce 有 {1e3 * b['hidden']:.1f} 毫秒与反向传播的计算重叠（hidden），"
              f"{1e3 * b['comm']:.1f} 毫秒在计算之后，{1e3 * b['wait']:.1f} 毫秒在等待最后一个 rank"))

# %% [markdown]
# ## What `bucket_cap_mb` changes
#
# Buckets are DDP's unit of communication, and `bucket_cap_mb` sets their size: DDP fills a bucket
# with whole gradients in the order they become ready, and closes it once it holds at least that many
# megabytes (by default the first bucket closes at 1 MB, so that communication starts early, and
# the others at 25 MB). A smaller cap makes more, smaller buckets: the first one goes out sooner,
# and every one pays the fixed cost of an all-reduce (lesson 11 measures it). Here are the same 6
# steps with `bucket_cap_mb=0.01` (10 kB), and the buckets of each step read from the two timelines.

# %% [markdown] lang=zh
# ## `bucket_cap_mb` 改变了什么
#
# 桶是 DDP 通信的单位，`bucket_cap_mb` 决定桶的大小：DDP 按梯度就绪的顺序把完整的梯度装进桶里，装到至少这么多兆字节时就封口（默认情况下，第一个桶装到 1 MB 就封口，好让通信尽早开始，其余的桶装到 25 MB）。上限越小，桶就越多、越小：第一个桶发出得更早，而每个桶都要付一次 all-reduce 的固定开销（第 11 课会测量它）。下面用 `bucket_cap_mb=0.01`（10 kB）把同样的 6 步再训练一遍，然后从两条时间线上读出每一步的桶。

# %%
%%ddp
model = DDP(mlp(784, 512, 10, seed=0), bucket_cap_mb=0.01)     # close each bucket at 10 kB
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(6):
    train_step(model, opt, step, "no_sync")

# %%
import statistics

small = %ddp_timeline
small_spans = list(small.records())
default_buckets, small_buckets = buckets(spans, 0, 5), buckets(small_spans, 0, 5)
assert all(buckets(small_spans, r, s) == small_buckets for r in range(4) for s in range(1, 6))  # every rank, every step
assert small_buckets == {0: 20_520, 1: 1_050_624, 2: 1_607_680}     # the last layer alone, then a weight matrix and bias each
assert sum(small_buckets.values()) == sum(default_buckets.values()) == 4 * 669_706   # every gradient, once a step
for r in range(4):
    for s in range(1, 6):
        last = find(small_spans, r, s, "backward")[-1]
        assert all(last["start"] < c["start"] < last["end"] for c in find(small_spans, r, s, "comm"))  # no_sync still sends nothing

def first_out(spans):
    """How long after the start of the last backward the first all-reduce went out (ms; median of ranks and steps 1-5)."""
    return statistics.median(1e3 * (find(spans, r, s, "comm")[0]["start"] - find(spans, r, s, "backward")[-1]["start"])
                             for r in range(4) for s in range(1, 6))

def mb(sizes):
    return say(", ", "、").join(f"{b / 1e6:.2f}" for b in sizes.values())

hidden = [statistics.mean(1e3 * p["hidden"] for p in t.breakdown().values()) for t in (tl, small)]
print(say(f"default buckets: {len(default_buckets)} per step ({mb(default_buckets)} MB); bucket_cap_mb=0.01: "
          f"{len(small_buckets)} per step ({mb(small_buckets)} MB); {sum(small_buckets.values()) / 1e6:.2f} MB "
          "all-reduced per step either way",
          f"默认的桶：每步 {len(default_buckets)} 个（{mb(default_buckets)} MB）；bucket_cap_mb=0.01：每步 "
          f"{len(small_buckets)} 个（{mb(small_buckets)} MB）；两种情况下每步都 all-reduce "
          f"{sum(small_buckets.values()) / 1e6:.2f} MB"))
print(say(f"the first all-reduce went out {first_out(spans):.1f} ms into the last backward with the default buckets, "
          f"{first_out(small_spans):.1f} ms with 10 kB buckets (medians); all-reduce time hidden under backward's "
          f"computing: {hidden[0]:.1f} and {hidden[1]:.1f} ms per step (mean of the ranks)",
          f"第一次 all-reduce 在最后一次反向传播开始后多久发出：默认的桶 {first_out(spans):.1f} 毫秒，10 kB 的桶 "
          f"{first_out(small_spans):.1f} 毫秒（中位数）；与反向传播计算重叠的 all-reduce 时间：每步分别为 "
          f"{hidden[0]:.1f} 和 {hidden[1]:.1f} 毫秒（各 rank 的平均）"))
if first_out(small_spans) < first_out(spans):
    print(say("The 10 kB cap's first bucket, the last layer alone, was ready before the 512×512 matrix's gradient, "
              "so it went out sooner.",
              "10 kB 上限下的第一个桶只装最后一层，在 512×512 矩阵的梯度算好之前就已就绪，所以发出得更早。"))
else:
    print(say("This time the 10 kB cap's first bucket, the last layer alone, did not go out sooner, although it was ready "
              "before the 512×512 matrix's gradient: these are fractions of a millisecond, and other programs on this "
              "machine took the cores. Run the two training cells again.",
              "这一次 10 kB 上限下的第一个桶（只装最后一层）并没有更早发出，尽管它在 512×512 矩阵的梯度算好之前就已"
              "就绪：这里差的只是零点几毫秒，而本机上的其他程序占用了 CPU 核。请再运行一次这两个训练单元格。"))
bucket = say("bucket", "桶")
draw.bars(None, panels=[
    dict(values={f"{bucket} {i}": b / 1e6 for i, b in default_buckets.items()}, ylabel="MB",
         title=say("Default buckets, one step", "默认的桶（一步）")),
    dict(values={f"{bucket} {i}": b / 1e6 for i, b in small_buckets.items()}, ylabel="MB",
         title=say("bucket_cap_mb=0.01, one step", "bucket_cap_mb=0.01（一步）")),
], fmt="{:.2f}")

# %% [markdown]
# Whatever the cap, a step all-reduces every gradient once, 2.68 MB: the cap only cuts it into a
# different number of pieces, and never splits a gradient between two: the first layer (its
# 784×512 matrix and its bias, 1.6 MB) is the last bucket with either cap. And whatever the cap, the
# micro-batches inside `no_sync()` have no all-reduce at all. On this machine the same cores compute
# and communicate, so the overlap gains little; where communication has hardware of its own (GPUs
# and a network), the overlap is how DDP hides much of the all-reduce behind backward, and the first
# bucket is kept small so that it starts early.

# %% [markdown] lang=zh
# 无论上限是多少，每一步都把每个梯度 all-reduce 一次，共 2.68 MB：上限只决定把它切成几块。一个梯度永远不会被拆到两个桶里：无论哪种上限，第一层（它 784×512 的矩阵和偏置，1.6 MB）都是最后一个桶。同样，无论上限是多少，`no_sync()` 里面的微批次都完全没有 all-reduce。在这台机器上，计算和通信用的是同样的几个 CPU 核，所以重叠带来的好处不大；当通信有自己的硬件（GPU 和网络）时，DDP 正是靠这种重叠把大部分 all-reduce 藏在反向传播后面，而第一个桶设得很小，也是为了让通信尽早开始。

# %% [markdown]
# ## Exercises
#
# 1. Forget to divide the loss by `K`. Which of the three ways still agree with each other, and which
#    learning rate would make the accumulated ones match the big batch again?
# 2. Put the **last** micro-batch inside `no_sync()` too (all 4). What do the counter and
#    `param_spread(model)` (from `ddplab.lessons.ranks`) say after the step, and why?
# 3. Try `K = 8` micro-batches of 8 samples. Predict the number of all-reduce calls each way, then
#    measure. How does the time of "sync every micro-batch" change?
# 4. Train the 6 steps of the timeline with `bucket_cap_mb=25`. How many buckets does the timeline
#    show, when does the all-reduce start, and what is `hidden` in `tl.breakdown()`? Why?
#
# ## 练习
#
# 1. 忘记把损失除以 `K`。三种方式中哪些仍然彼此一致？用什么学习率能让累积的方式再次与大批次一致？
# 2. 把**最后一个**微批次也放进 `no_sync()`（4 个全部）。更新之后计数器和 `param_spread(model)`（来自
#    `ddplab.lessons.ranks`）显示什么？为什么？
# 3. 试试 `K = 8` 个 8 样本的微批次。先预测每种方式的 all-reduce 次数，再测量。“每个微批次都同步”的耗时如何变化？
# 4. 用 `bucket_cap_mb=25` 训练时间线那一节的 6 步。时间线上有几个桶？all-reduce 什么时候开始？`tl.breakdown()` 中的 `hidden` 是多少？为什么？

# %% [markdown] lang=zh
# ## 练习
#
# 1. 忘记把损失除以 `K`。三种做法中哪些仍然彼此一致？用什么学习率能让两种累积做法重新与大批次一致？
# 2. 把**最后一个**微批次也放进 `no_sync()`（4 个全部放进去）。更新之后，计数器和 `param_spread(model)`
#    （来自 `ddplab.lessons.ranks`）显示什么？为什么？
# 3. 试试 `K = 8` 个 8 样本的微批次。先预测每种做法的 all-reduce 次数，再测量。“每个微批次都同步”的
#    耗时如何变化？
# 4. 用 `bucket_cap_mb=25` 训练时间线那一节的 6 步。时间线上有几个桶？all-reduce 什么时候开始？`tl.breakdown()` 中的 `hidden` 是多少？为什么？

# %%
%ddp_stop
