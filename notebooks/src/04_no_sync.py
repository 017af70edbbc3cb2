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
# **You will learn**
# - why DDP all-reduces at every `backward()`, and how `no_sync()` lets micro-batches accumulate without it
# - why the forward pass must run inside `no_sync()` too, and the right code pattern
# - how DDP cuts the gradients into buckets (a bucket closes once it holds at least its cap) and overlaps their all-reduces with `backward()`
# - how to read a step's forward, backward and all-reduces on ddplab's timeline
#
# **Study time:** about 45 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** all-reduce calls and seconds per setting, side by side as bars.

# %% [markdown] lang=zh
# # 第 4 课 · 用 no_sync 做梯度累积
#
# **简而言之**：一个批次放不进内存时，可以把它切成 `K` 个**微批次**（micro-batch），对每个微批次调用一次 `backward()`：梯度在 `p.grad` 中*累加*起来，然后只做一次优化器更新。使用 DDP 时，每次 `backward()` 还会对梯度做一次 all-reduce，所以累积 4 个微批次要做 4 次 all-reduce，而其实 1 次就够了。在 `with model.no_sync():` 里面，DDP 跳过 all-reduce，只做累加；最后一个微批次放在它外面，对累加好的梯度只做一次 all-reduce。这一课一边统计（并计时）all-reduce 的次数，一边验证：这样得到的参数，与每个微批次都 all-reduce、与直接用一个大批次训练，完全相同。
#
# **你将学到**
# - 为什么 DDP 在每次 `backward()` 时都做 all-reduce，以及 `no_sync()` 怎样让微批次只累加、不通信
# - 为什么前向计算也必须放在 `no_sync()` 里面，以及正确的写法
# - DDP 怎样把梯度分成桶（一个桶装到至少达到上限时封口），并让桶的 all-reduce 与 `backward()` 重叠
# - 怎样在 ddplab 的时间线上读出一步中的前向、反向和 all-reduce
#
# **学习时间**：约 45 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：每种做法的 all-reduce 次数和耗时，并排画成柱状图。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

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
# 模型是 MLP 784-512-512-10（`ddplab.workloads.mlp`，669,706 个参数：每步要 all-reduce 2.7 MB 的 float32 梯度）。每个进程（rank）在 16 个样本的微批次上训练，每次优化器更新用 4 个微批次：在第 *s* 步，四个 rank 一共读取 256 个样本，rank *r* 读其中属于自己的连续 64 个（`micro_batches(step)`）。三种做法是：
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
# 每种做法都从相同的初始参数出发，在相同的数据上训练 3 次优化器更新。逐步统计 DDP 的 all-reduce 调用次数，并比较每种做法最后得到的参数（在每个 rank 上都比较）。

# %% [markdown]
# **Predict, then run.** Plain DDP, syncing every micro-batch: how many all-reduce calls does DDP
# make in one optimizer step of K = 4 micro-batches? Take step 1, the second step.

# %% [markdown] lang=zh
# **先预测，再运行。** 普通的 DDP，每个微批次都同步：在由 K = 4 个微批次组成的一次优化器更新中，DDP 调用多少次 all-reduce？以第 1 步（也就是第二步）为准。

# %%
predict("4.calls", ...)    # all-reduce calls in step 1, syncing every one of the 4 micro-batches

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
first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES                # DDP's default cap of its first bucket
gap_no_sync = (params["no_sync"] - params["sync every micro-batch"]).abs().max().item()
gap_big = (params["one big batch"] - params["sync every micro-batch"]).abs().max().item()

# %%
calls = %ddp_gather calls
gaps = %ddp_gather (gap_no_sync, gap_big)
bucket_sizes = %ddp_gather bucket_sizes
first_cap = %ddp_gather first_cap
first_cap = first_cap[0]
assert all(c == calls[0] for c in calls)                            # every rank made the same calls
calls, buckets = calls[0], len(bucket_sizes[0])
names = {"sync every micro-batch": say("sync every micro-batch", "每个微批次都同步"),
         "no_sync": "no_sync", "one big batch": say("one big batch", "一个大批次")}
for way in names:
    print(say(f"{names[way]}: all-reduce calls in steps 0, 1, 2: {calls[way]}",
              f"{names[way]}：第 0、1、2 步的 all-reduce 调用次数：{calls[way]}"))
reveal("4.calls", float(calls["sync every micro-batch"][1]), unit=say("calls", "次"))
assert bucket_sizes[0] == [267786, 401920]                          # 2 buckets, the last layers first
assert calls["sync every micro-batch"][1:] == [4 * buckets] * 2     # K × buckets per step
assert calls["no_sync"][1:] == calls["one big batch"][1:] == [buckets] * 2  # 1 × buckets per step
assert calls["sync every micro-batch"][0] == 1 + 3 * buckets and calls["no_sync"][0] == 1  # step 0: one bucket
assert all(g_ns < 1e-5 and g_big < 1e-5 for g_ns, g_big in gaps), gaps    # the same parameters
assert 4 * bucket_sizes[0][0] >= first_cap > 4 * (bucket_sizes[0][0] - 512 * 512)   # closed by the 512×512 matrix
print(say(f"{buckets} buckets: {4 * buckets} all-reduce calls per step syncing every micro-batch, {buckets} with "
          f"no_sync, as for one big batch; on every rank the parameters of the three ways agree to "
          f"{max(max(g) for g in gaps):.1e}",
          f"{buckets} 个桶：每个微批次都同步时每步 {4 * buckets} 次 all-reduce，no_sync 每步 {buckets} 次，与一个大批次"
          f"相同；在每个 rank 上，三种做法得到的参数相差不超过 {max(max(g) for g in gaps):.1e}"))
print(say(f"the buckets from step 1 on: {bucket_sizes[0][0]:,} gradients = {4 * bucket_sizes[0][0]:,} bytes, then "
          f"{bucket_sizes[0][1]:,} = {4 * bucket_sizes[0][1]:,} bytes; the first bucket's cap is {first_cap:,} bytes",
          f"从第 1 步起的桶：{bucket_sizes[0][0]:,} 个梯度 = {4 * bucket_sizes[0][0]:,} 字节，然后是 "
          f"{bucket_sizes[0][1]:,} 个 = {4 * bucket_sizes[0][1]:,} 字节；第一个桶的上限是 {first_cap:,} 字节"))

# %% [markdown]
# DDP all-reduces gradients in **buckets**, and `CommCounter` sees one call per bucket. DDP fills a
# bucket with whole gradients, in the order they become ready in `backward()`, and closes it once
# it holds **at least** its cap: by default (`bucket_cap_mb=None`) 1 MiB for the first bucket
# (`dist._DEFAULT_FIRST_BUCKET_BYTES`, 1,048,576 bytes), so that communication starts early, and
# 25 MiB for the others. The cap is not a maximum. From step 1 on, this model has 2 buckets (the
# sizes printed above): the first takes the gradients of the last layer, which are ready first, and
# of the 512×512 middle layer; it reaches 1 MiB only with the middle layer's weight matrix, which
# goes in whole, so it closes at 267,786 gradients, 1,071,144 bytes (1.07 MB), a little more than
# its cap. The second holds the rest, the first layer's 401,920 gradients (1.61 MB). So syncing
# every micro-batch costs 4 × 2 = 8 calls per step, `no_sync` 2, like one big batch. Step 0 is
# different: in its first iteration DDP does not know yet in which order the gradients become
# ready, so it puts **all** gradients in one bucket; at the next forward it **rebuilds** its buckets
# in the order it saw (hence 1 + 3 × 2 = 7 calls, and 1).
#
# Why does it work? DDP's all-reduce *averages* and is linear: averaging 4 gradients one at a time
# and adding them up gives the same as adding them up and averaging once. `no_sync` only delays the
# all-reduce until the gradients are complete. (The catch: between micro-batches the ranks' `p.grad`
# differ, so do not use them, e.g. for gradient clipping, until after the last `backward()`.)

# %% [markdown] lang=zh
# DDP 按**桶**（bucket）对梯度做 all-reduce，`CommCounter` 每个桶看到一次调用。DDP 按梯度在 `backward()` 中就绪的顺序，把完整的梯度装进桶里，装到**至少**达到上限时就封口：默认情况下（`bucket_cap_mb=None`），第一个桶的上限是 1 MiB（`dist._DEFAULT_FIRST_BUCKET_BYTES`，即 1,048,576 字节），好让通信尽早开始，其余的桶是 25 MiB。上限并不是最大值。从第 1 步起，这个模型有 2 个桶（大小见上面打印的结果）：第一个桶装最后一层的梯度（它们最先就绪），再装 512×512 的中间层的梯度；直到放进中间层的权重矩阵它才达到 1 MiB，而这个矩阵是整个放进去的，所以它封口时有 267,786 个梯度、1,071,144 字节（1.07 MB），比上限略大。第二个桶装其余的梯度，也就是第一层的 401,920 个（1.61 MB）。所以每个微批次都同步时每步要 4 × 2 = 8 次调用，`no_sync` 只要 2 次，与一个大批次相同。第 0 步有所不同：在第一次迭代中，DDP 还不知道梯度按什么顺序就绪，所以把**全部**梯度放进一个桶；到下一次前向计算时，它再按观察到的顺序**重建**各个桶（所以是 1 + 3 × 2 = 7 次调用，以及 1 次）。
#
# 为什么这样可行？DDP 的 all-reduce 做的是*平均*，而且是线性的：把 4 个梯度逐个平均再相加，与先相加再平均一次，结果相同。`no_sync` 只是把 all-reduce 推迟到梯度完整之后再做。（需要注意的是：在两个微批次之间，各 rank 的 `p.grad` 并不相同，所以在最后一次 `backward()` 之前不要使用它们，例如不要在这时做梯度裁剪。）

# %% [markdown]
# ## Why the forward goes inside `no_sync()` too
#
# `no_sync()` only sets a flag, `model.require_backward_grad_sync = False`, and restores it when the
# block ends. DDP reads that flag in its **forward**, not in backward: at the end of `model(x)`, if
# the flag is `True` (and autograd is on), DDP calls `reducer.prepare_for_backward(...)`, which
# arms the reducer for the coming backward: each gradient's hook then marks it ready, and a full
# bucket is all-reduced. After a forward inside `no_sync()` nothing is armed, and the hooks return
# at once (in torch's C++ reducer they check `expect_autograd_hooks_`, which `prepare_for_backward`
# sets and the end of the synced backward clears). So what decides is where the **forward** ran: a
# `backward()` inside `no_sync()` after a forward outside it all-reduces as usual. (`_DDPSink`, the
# autograd function DDP may put on the outputs, decides nothing here: DDP adds it only with
# `find_unused_parameters=True`, or in the first iteration with `static_graph=True`. All this is
# DDP's usual C++ reducer; only with torch.compile's `optimize_ddp="python_reducer"` mode do Python
# hooks read the flag during backward.) torch's own
# docstring of `no_sync` warns: "The forward pass should be included inside the context manager, or
# else gradients will still be synchronized." The pattern, as `train_step` does it:
#
# ```python
# with model.no_sync():                       # micro-batches 0 .. K-2
#     loss = loss_fn(model(x), y) / K         # forward inside: no all-reduce is prepared
#     loss.backward()                         # the gradient only adds up in p.grad
# loss = loss_fn(model(x_last), y_last) / K   # the last micro-batch: forward outside
# loss.backward()                             # all-reduces the accumulated gradients, bucket by bucket
# ```
#
# The next cell tries three placements on one micro-batch of a model whose buckets are settled,
# and counts DDP's all-reduces for each.

# %% [markdown] lang=zh
# ## 为什么前向计算也要放在 `no_sync()` 里面
#
# `no_sync()` 只是设置一个标志 `model.require_backward_grad_sync = False`，并在代码块结束时把它恢复原值。DDP 是在**前向计算**中读取这个标志的，而不是在反向传播中：在 `model(x)` 的最后，如果标志为 `True`（并且 autograd 开着），DDP 就调用 `reducer.prepare_for_backward(...)`，为接下来的反向传播做好准备：之后每个梯度的钩子把它标记为就绪，装满的桶就会被 all-reduce。如果前向计算是在 `no_sync()` 里面做的，就什么也没有准备，钩子会立即返回（在 torch 的 C++ reducer 里，钩子检查 `expect_autograd_hooks_`，这个标志由 `prepare_for_backward` 设置，并在同步的反向传播结束时清除）。所以起决定作用的是**前向计算**在哪里运行：前向在 `no_sync()` 外面、`backward()` 在里面，照样会做 all-reduce。（`_DDPSink` 是 DDP 可能加在输出上的一个 autograd 函数，它在这里不起决定作用：只有设置 `find_unused_parameters=True`，或者在 `static_graph=True` 的第一次迭代中，DDP 才会加上它。以上说的都是 DDP 平常使用的 C++ reducer；只有在 torch.compile 的 `optimize_ddp="python_reducer"` 模式下，才由 Python 钩子在反向传播中读取这个标志。）torch 自己在 `no_sync` 的文档字符串里也提醒："The forward pass should be included inside the context manager, or else gradients will still be synchronized."（前向计算应该放在这个上下文管理器里面，否则梯度仍然会被同步。）正确的写法，也就是 `train_step` 的做法：
#
# ```python
# with model.no_sync():                       # 微批次 0 .. K-2
#     loss = loss_fn(model(x), y) / K         # 前向在里面：不为 all-reduce 做准备
#     loss.backward()                         # 梯度只在 p.grad 中累加
# loss = loss_fn(model(x_last), y_last) / K   # 最后一个微批次：前向在外面
# loss.backward()                             # 逐个桶地 all-reduce 累积的梯度
# ```
#
# 下一个单元格在一个桶已经确定的模型上，用一个微批次试三种放法，并分别统计 DDP 的 all-reduce 次数。

# %%
%%ddp
model, opt, counter = fresh("no_sync")
train_step(model, opt, 0, "no_sync")                 # step 0: DDP settles its buckets
x, y = micro_batches(1)[0]
placed = {}

counter.reset()
loss = loss_fn(model(x), y) / K                      # forward OUTSIDE no_sync: DDP prepares an all-reduce
with model.no_sync():
    loss.backward()                                  # ... which this backward makes, no_sync or not
placed["forward outside, backward inside"] = counter.calls

counter.reset()
with model.no_sync():
    loss = loss_fn(model(x), y) / K                  # forward inside: nothing prepared
loss.backward()                                      # so this backward sends nothing, though outside
placed["forward inside, backward outside"] = counter.calls

counter.reset()
with model.no_sync():
    loss = loss_fn(model(x), y) / K
    loss.backward()                                  # both inside: nothing sent
placed["both inside"] = counter.calls
opt.zero_grad()

# %%
placed = %ddp_gather placed
assert all(p == placed[0] for p in placed), placed              # the same on every rank
placed = placed[0]
assert placed == {"forward outside, backward inside": buckets, "forward inside, backward outside": 0,
                  "both inside": 0}, placed
where = {"forward outside, backward inside": say("forward outside no_sync, backward inside",
                                                 "前向在 no_sync 外面，反向在里面"),
         "forward inside, backward outside": say("forward inside, backward outside", "前向在里面，反向在外面"),
         "both inside": say("both inside", "两者都在里面")}
for k in where:
    print(say(f"{where[k]}: {placed[k]} all-reduce calls", f"{where[k]}：{placed[k]} 次 all-reduce"))
print(say(f"only the forward's place counts: the forward outside no_sync() made its backward all-reduce all "
          f"{buckets} buckets, although that backward ran inside no_sync()",
          f"只有前向计算的位置起作用：前向在 no_sync() 外面时，它的反向传播 all-reduce 了全部 {buckets} 个桶，"
          "尽管这次反向传播是在 no_sync() 里面运行的"))

# %% [markdown]
# ## Timing it
#
# Now time 6 optimizer steps each way (3 repeats, after a warm-up step; the median, of the slowest
# rank). Each step all-reduces 2.7 MB of gradients between 4 processes that share this machine's
# cores.

# %% [markdown] lang=zh
# ## 计时
#
# 现在对每种做法计时 6 次优化器更新（先做一步预热，再重复 3 次；取最慢那个 rank 的中位数）。每一步都要在共享本机 CPU 核心的 4 个进程之间 all-reduce 2.7 MB 的梯度。

# %% [markdown]
# **Predict, then run.** no_sync does the same computing as syncing every micro-batch, with a
# quarter of the all-reduce calls. How long will no_sync take for the 6 steps, as a fraction of
# the time of syncing every micro-batch? (1 would mean no faster, 0.25 a quarter of the time.)

# %% [markdown] lang=zh
# **先预测，再运行。** no_sync 的计算量与每个微批次都同步时相同，all-reduce 调用次数却只有后者的四分之一。这 6 步，no_sync 的耗时会是每个微批次都同步时的几分之几？（1 表示一点也不快，0.25 表示只用四分之一的时间。）

# %%
predict("4.no_sync_time", ...)    # no_sync's seconds for 6 steps, as a fraction of syncing every micro-batch's

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
reveal("4.no_sync_time", seconds["no_sync"] / seconds["sync every micro-batch"],
       unit=say("× the time of syncing every micro-batch", "× 每个微批次都同步的耗时"))
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
              "all-reduce：要么在这台机器上 all-reduce 比计算便宜得多，要么计时的时候其他程序占用了 CPU 核心。"
              "请再运行一次计时单元格。"))
else:
    print(say(f"no_sync was slower this time ({lazy / sync:.0%} of the time of syncing every micro-batch), although it "
              f"does the same computing with {saved_calls} fewer all-reduce calls: that is noise, other programs took "
              "the cores while it was timed. Run the timing cell again.",
              f"这一次 no_sync 反而更慢（是每个微批次都同步的 {lazy / sync:.0%}），尽管它的计算量相同、all-reduce "
              f"却少了 {saved_calls} 次：这是噪声，计时的时候其他程序占用了 CPU 核心。请再运行一次计时单元格。"))
if big < 0.9 * lazy:
    print(say(f"One big batch was faster still ({big / lazy:.0%} of no_sync's time): the same all-reduces, and the "
              "arithmetic in one piece (one multiplication of 64 rows instead of four of 16 uses the core better, "
              "with less Python per sample); on a busy machine part of the gap may be noise.",
              f"一个大批次还要更快（是 no_sync 的 {big / lazy:.0%}）：all-reduce 相同，而计算一次完成（一次 64 行的矩阵"
              "乘法比四次 16 行的更能发挥 CPU 核心的效率，每个样本分摊的 Python 开销也更少）；机器繁忙时，差距中"
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
# mebibytes (by default, `bucket_cap_mb=None`, the first bucket's cap is 1 MiB, so that
# communication starts early, and the others' 25 MiB). A smaller cap makes more, smaller buckets: the
# first one goes out sooner, and every one pays the fixed cost of an all-reduce (lesson 12 measures
# it). Here are the same 6 steps with `bucket_cap_mb=0.01` (0.01 MiB, about 10 kB), and the buckets
# of each step read from the two timelines.

# %% [markdown] lang=zh
# ## `bucket_cap_mb` 改变了什么
#
# 桶是 DDP 通信的单位，`bucket_cap_mb` 决定桶的大小：DDP 按梯度就绪的顺序把完整的梯度装进桶里，装到至少这么多 MiB 时就封口（默认情况下，即 `bucket_cap_mb=None` 时，第一个桶的上限是 1 MiB，好让通信尽早开始，其余的桶是 25 MiB）。上限越小，桶就越多、越小：第一个桶发出得更早，而每个桶都要付一次 all-reduce 的固定开销（第 12 课会测量它）。下面用 `bucket_cap_mb=0.01`（0.01 MiB，约 10 kB）把同样的 6 步再训练一遍，然后从两条时间线上读出每一步的桶。

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
              "就绪：这里差的只是零点几毫秒，而本机上的其他程序占用了 CPU 核心。请再运行一次这两个训练单元格。"))
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
# micro-batches inside `no_sync()` have no all-reduce at all. With gloo on the CPU the same cores
# compute and communicate, so the overlap can only use what backward leaves idle (the `hidden`
# times above); where communication has hardware of its own (GPUs and a network), the overlap is how
# DDP hides much of the all-reduce behind backward, and the first bucket's cap is kept small so that
# it starts early.

# %% [markdown] lang=zh
# 无论上限是多少，每一步都把每个梯度 all-reduce 一次，共 2.68 MB：上限只决定把它切成几块。一个梯度永远不会被拆到两个桶里：无论哪种上限，第一层（它 784×512 的矩阵和偏置，1.6 MB）都是最后一个桶。同样，无论上限是多少，`no_sync()` 里面的微批次都完全没有 all-reduce。在 CPU 上使用 gloo 时，计算和通信用的是同样的 CPU 核心，所以重叠只能利用反向传播空出来的那部分（上面的 `hidden` 时间）；当通信有自己的硬件（GPU 和网络）时，DDP 正是靠这种重叠把大部分 all-reduce 藏在反向传播后面，而第一个桶的上限设得很小，也是为了让通信尽早开始。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why. Try things out in cells of your own (before the last cell, `%ddp_stop`).
#
# **4.1** Forget to divide the loss by `K` in `train_step`. The two accumulating ways still agree
# with each other, but not with the big batch. Which learning rate (instead of 0.05) makes the
# accumulating ways take the big batch's steps again? Answer with a number.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。可以在你自己的单元格里动手试试（放在最后一个单元格 `%ddp_stop` 之前）。
#
# **4.1** 在 `train_step` 中忘记把损失除以 `K`。两种累积做法仍然彼此一致，但与大批次不再一致。用什么学习率（代替 0.05）能让两种累积做法重新走出与大批次相同的步？请写一个数。

# %%
answer = ...    # the learning rate that makes the accumulated runs match the big batch again
check("4.1", answer, lr=0.05, K=4)

# %% [markdown]
# **4.2** Put the **last** micro-batch inside `no_sync()` too (all 4 forwards and backwards), then
# `opt.step()`. What do `CommCounter` and `param_spread(model)` (from `ddplab.lessons.ranks`) say
# after that step? Answer with a letter:
#
# - (a) 0 all-reduce calls, and a spread above 0: each rank stepped with its own gradient, and the
#   ranks stay apart from then on
# - (b) 0 calls in that step, but DDP all-reduces the accumulated gradients at the next forward, so
#   the ranks end up identical again
# - (c) 0 calls, and a spread of 0: the ranks started from the same parameters, so they stay
#   identical

# %% [markdown] lang=zh
# **4.2** 把**最后一个**微批次也放进 `no_sync()`（4 次前向和反向全部放进去），然后 `opt.step()`。这一步之后，`CommCounter` 和 `param_spread(model)`（来自 `ddplab.lessons.ranks`）显示什么？请写一个字母：
#
# - (a) 0 次 all-reduce，差值大于 0：每个 rank 都用自己的梯度走了一步，从此各 rank 就不一样了
# - (b) 这一步 0 次调用，但 DDP 会在下一次前向计算时 all-reduce 累积的梯度，所以各 rank 又会完全相同
# - (c) 0 次调用，差值为 0：各 rank 从相同的参数出发，所以始终完全相同

# %%
answer = ...    # a letter: "a", "b" or "c"
check("4.2", answer)

# %% [markdown]
# **4.3** Take `K = 8` micro-batches of 8 samples (the same 64 samples per rank and step). From
# step 1 on, how many all-reduce calls does "sync every micro-batch" make per optimizer step?
# Predict, then measure in a cell of your own (and see how its time changes). Answer with a whole
# number.

# %% [markdown] lang=zh
# **4.3** 改用 `K = 8` 个 8 样本的微批次（每个 rank 每步仍然是这 64 个样本）。从第 1 步起，“每个微批次都同步”每次优化器更新要做多少次 all-reduce 调用？先预测，再在你自己的单元格里测量（顺便看看它的耗时怎样变化）。请写一个整数。

# %%
answer = ...    # all-reduce calls per optimizer step, syncing every one of 8 micro-batches
check("4.3", answer, buckets=len(bucket_sizes[0]))

# %% [markdown]
# **4.4** Train the 6 no_sync steps of the timeline with `DDP(..., bucket_cap_mb=25)`, 25 being the
# default cap of the later buckets. From step 1 on, how many all-reduce calls (buckets) does each
# step make? (Then look at the timeline: when does the all-reduce start, and what is `hidden`?)
# Answer with a whole number.

# %% [markdown] lang=zh
# **4.4** 用 `DDP(..., bucket_cap_mb=25)` 训练时间线那一节的 6 步 no_sync，25 正是后面各个桶的默认上限。从第 1 步起，每一步做多少次 all-reduce 调用（多少个桶）？（然后看看时间线：all-reduce 什么时候开始？`hidden` 是多少？）请写一个整数。

# %%
answer = ...    # all-reduce calls per step with bucket_cap_mb=25
check("4.4", answer, grad_bytes=4 * sum(bucket_sizes[0]), buckets=len(bucket_sizes[0]))

# %%
%ddp_stop
