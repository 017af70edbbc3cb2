# %% [markdown]
# # Lesson 2 · Data parallelism by hand vs DistributedDataParallel
#
# **In short.** In data-parallel training every rank holds the **same model** and trains on **its own
# shard** of each batch. After `backward()` each rank has a different gradient; an `all_reduce` of
# every gradient, divided by `world_size`, gives every rank the same average gradient, so every rank
# takes the same step and the models stay identical. You first write this by hand, then check that
# `DistributedDataParallel` (DDP) ends with the same parameters (up to rounding): it does the same
# thing, in buckets, overlapped with `backward()`. Finally you break it three ways and watch what happens.
#
# **You will learn**
# - why all-reducing the gradients and dividing by `world_size` gives exactly the steps of one big batch
# - what DDP does for you: one broadcast of rank 0's parameters at the start, then bucketed gradient all-reduces in `backward()`
# - how a DDP bucket fills and closes, and how to count DDP's all-reduces with a communication hook
# - three ways to break data parallelism, and why ranks that stay identical can still be wrong
#
# **Study time:** about 45 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** how far apart the ranks' parameters are, step by step, for the correct run and
# three broken ones, and how far each run ends from DDP's parameters.

# %% [markdown] lang=zh
# # 第 2 课 · 手写数据并行与 DistributedDataParallel
#
# **简而言之**：数据并行训练中，每个进程（rank）持有**同一个模型**，并在每个批次中**属于自己的那一份**数据（分片）上训练。`backward()` 之后，各 rank 的梯度各不相同；对每个梯度做一次 `all_reduce`，再除以 `world_size`，每个 rank 就得到同一个平均梯度，于是每个 rank 都走出相同的一步，模型始终保持一致。这一课先手写这个过程，再验证 `DistributedDataParallel`（DDP）最终得到相同的参数（只差舍入误差）：它做的是同一件事，只不过把梯度按桶合并，并与 `backward()` 重叠进行。最后用三种方式把它弄坏，看看会发生什么。
#
# **你将学到**
# - 为什么对梯度做 all-reduce 再除以 `world_size`，走出的每一步正好等于一个大批次的每一步
# - DDP 替你做了什么：开始时把 rank 0 的参数广播一次，之后在 `backward()` 中按桶对梯度做 all-reduce
# - DDP 的桶怎样装填、何时封口，以及怎样用通信钩子统计 DDP 的 all-reduce 次数
# - 破坏数据并行的三种方式，以及为什么各 rank 始终相同也可能是错的
#
# **学习时间**：约 45 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：对正确的一次运行和三次出错的运行，各 rank 的参数之间逐步相差多少，以及每次运行结束时离 DDP 的参数有多远。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## The same model, different data
#
# Every rank builds the same small classifier (same seed, so the same initial parameters) and the
# same data set. A **global batch** of 64 samples is split in 4 shards of 16: at step *s*, rank *r*
# trains on shard *r* of global batch *s*.

# %% [markdown] lang=zh
# ## 同一个模型，不同的数据
#
# 每个 rank 都构建同一个小分类器（随机种子相同，因此初始参数相同）和同一个数据集。一个 64 个样本的**全局批次**被分成 4 个 16 个样本的分片：在第 *s* 步，rank *r* 在第 *s* 个全局批次的第 *r* 个分片上训练。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import param_spread, flat_params, CommCounter
from ddplab.workloads import synthetic_classification
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

STEPS, PER_RANK, LR = 40, 16, 0.2
X, Y = synthetic_classification(n=STEPS * PER_RANK * world_size, features=20, classes=4, seed=0).tensors
loss_fn = nn.CrossEntropyLoss()

def shard(step):
    """This rank's 16 samples of the global batch number `step`."""
    start = (step * world_size + rank) * PER_RANK
    return X[start:start + PER_RANK], Y[start:start + PER_RANK]

def make_model(seed):
    torch.manual_seed(seed)                  # the same seed -> the same initial parameters
    return nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 4))

first = (rank * PER_RANK, (rank + 1) * PER_RANK - 1)
first_labels = shard(0)[1][:6].tolist()
print(say(f"step 0: samples {first[0]}-{first[1]}, labels {first_labels}...",
          f"第 0 步：样本 {first[0]}-{first[1]}，标签 {first_labels}……"))

# %% [markdown]
# ## By hand: all_reduce every gradient, divide by world_size
#
# `param_spread(model)` measures the largest difference between any parameter on any rank and the
# same parameter on rank 0 (0.0: all ranks identical). We record it before training and after every
# step, and keep a copy of the parameters at every step to compare runs later. The switches `sync`
# and `divide` are there to break it later on; the correct run uses both.

# %% [markdown] lang=zh
# ## 手写：对每个梯度做 all_reduce，再除以 world_size
#
# `param_spread(model)` 计算任一 rank 上的任一参数与 rank 0 上同一参数之间的最大差值（0.0 表示所有 rank 完全相同）。我们在训练前和每一步之后都记录它，并保存每一步的参数副本，以便稍后比较不同的运行。开关 `sync` 和 `divide` 是为后面把它弄坏而准备的；正确的运行两个都打开。

# %%
%%ddp
def train_by_hand(seed=0, sync=True, divide=True):
    model = make_model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    spread, params = [param_spread(model)], [flat_params(model)]     # "step 0": before training
    for step in range(STEPS):
        x, y = shard(step)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()                          # this rank's gradient, from its own 16 samples
        if sync:
            for p in model.parameters():
                dist.all_reduce(p.grad)          # the sum of the 4 ranks' gradients, on every rank
                if divide:
                    p.grad /= world_size         # the sum / 4 = the average gradient
        opt.step()                               # the same gradient -> the same step on every rank
        spread.append(param_spread(model))
        params.append(flat_params(model))
        ddplab.log(loss=loss, samples=len(x))
    return model, spread, params

by_hand, spread_by_hand, params_by_hand = train_by_hand()
loss_256 = loss_fn(by_hand(X[:256]), Y[:256]).item()
print(say(f"loss {loss_256:.3f} on the first 256 samples; largest spread over {STEPS} steps: {max(spread_by_hand)}",
          f"前 256 个样本上的损失 {loss_256:.3f}；{STEPS} 步中最大的差值：{max(spread_by_hand)}"))

# %% [markdown]
# Why is this right? The loss of a global batch is the mean over its 64 samples, which is the mean of
# the 4 shards' mean losses, so its gradient is the **average of the ranks' gradients**. Four ranks
# with 16 samples each take exactly the steps that one process would take on batches of 64. Check it
# with one process alone, on every rank, without any communication:

# %% [markdown] lang=zh
# 为什么这样是对的？一个全局批次的损失是其 64 个样本损失的平均值，也就等于 4 个分片各自平均损失的平均值，所以它的梯度就是**各 rank 梯度的平均值**。4 个各有 16 个样本的 rank 所走的每一步，与单个进程在 64 个样本的批次上走的每一步完全相同。在每个 rank 上单独用一个进程、不做任何通信来验证一下：

# %%
%%ddp
alone = make_model(0)
opt = torch.optim.SGD(alone.parameters(), lr=LR)
for step in range(STEPS):
    rows = slice(step * world_size * PER_RANK, (step + 1) * world_size * PER_RANK)  # all 4 shards
    loss = loss_fn(alone(X[rows]), Y[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
alone_gap = (flat_params(alone) - flat_params(by_hand)).abs().max().item()
print(say(f"one process on batches of 64 vs 4 ranks by hand: largest difference {alone_gap:.1e}",
          f"单个进程用 64 个样本的批次 vs 4 个 rank 手写：最大差值 {alone_gap:.1e}"))

# %% [markdown]
# ## DistributedDataParallel does the same
#
# Wrap the same model (same seed) in `DDP` and train it on the same shards, with no `all_reduce` in
# our code. DDP hooks into `backward()`: as soon as a **bucket** of gradients is ready, it divides
# the bucket by `world_size` and all-reduces it while `backward()` goes on with earlier layers. The
# buckets are filled with whole gradients in the order they become ready, the last layer's first
# (from the second step on, once DDP has seen that order), and a bucket closes once it holds **at
# least** its cap. By default the **first** bucket's cap is small, 1 MiB
# (`dist._DEFAULT_FIRST_BUCKET_BYTES`, 1,048,576 bytes), so that the first all-reduce can start
# early in `backward()`; every later bucket's cap is 25 MiB (`bucket_cap_mb`). A cap is not a
# maximum: the gradient that crosses it goes into the bucket whole, so a bucket can end larger than
# its cap ([lesson 4](04_no_sync.ipynb)'s first bucket closes at 1.07 MB).
# [Lesson 12](12_communication.ipynb) measures what the bucket size changes. Our 804 parameters
# (3 kB of gradients) fit in one bucket. `CommCounter` is a DDP communication hook that counts the
# all-reduces DDP makes: here 1 per step, where our loop made 4 (one per parameter tensor).

# %% [markdown] lang=zh
# ## DistributedDataParallel 做的是同一件事
#
# 把同一个模型（同一个随机种子）用 `DDP` 包装起来，在同样的分片上训练，我们的代码里不再有 `all_reduce`。DDP 在 `backward()` 中挂上了钩子：一旦某个**桶**里的梯度全部就绪，它就把这个桶除以 `world_size` 并对它做 all-reduce，与此同时 `backward()` 继续计算前面各层。桶按梯度就绪的顺序装填，每个梯度都完整地放进一个桶，最后一层的梯度最先（从第二步开始，即 DDP 已经观察到这个顺序之后）；一个桶装到**至少**达到它的上限时就封口。默认情况下，**第一个**桶的上限很小，只有 1 MiB（`dist._DEFAULT_FIRST_BUCKET_BYTES`，即 1,048,576 字节），这样第一次 all-reduce 就能在 `backward()` 中尽早开始；之后每个桶的上限是 25 MiB（`bucket_cap_mb`）。上限并不是最大值：越过上限的那个梯度会被整个放进桶里，所以桶最后可能比上限还大（[第 4 课](04_no_sync.ipynb)的第一个桶封口时有 1.07 MB）。[第 12 课](12_communication.ipynb) 会测量桶的大小带来哪些变化。我们的 804 个参数（梯度共 3 kB）装得进一个桶。`CommCounter` 是一个 DDP 通信钩子（communication hook），统计 DDP 做了多少次 all-reduce：这里每步 1 次，而我们手写的循环每步 4 次（每个参数张量一次）。

# %%
%%ddp
ddp_model = DDP(make_model(0))
counter = CommCounter()
ddp_model.register_comm_hook(None, counter.hook)
opt = torch.optim.SGD(ddp_model.parameters(), lr=LR)
spread_ddp, params_ddp = [param_spread(ddp_model)], [flat_params(ddp_model)]
for step in range(STEPS):
    x, y = shard(step)
    loss = loss_fn(ddp_model(x), y)
    opt.zero_grad()
    loss.backward()                              # DDP all-reduces and averages the gradients here
    opt.step()
    spread_ddp.append(param_spread(ddp_model))
    params_ddp.append(flat_params(ddp_model))
    ddplab.log(loss=loss, samples=len(x))
ddp_gap = (flat_params(ddp_model) - flat_params(by_hand)).abs().max().item()
print(say(f"DDP vs by hand: largest difference {ddp_gap:.1e}; DDP all-reduced {counter.calls} times "
          f"in {STEPS} steps ({counter.bytes // counter.calls} bytes each)",
          f"DDP vs 手写：最大差值 {ddp_gap:.1e}；DDP 在 {STEPS} 步中做了 {counter.calls} 次 all-reduce"
          f"（每次 {counter.bytes // counter.calls} 字节）"))

# %% [markdown]
# The differences are rounding (DDP divides each gradient by 4 *before* summing, we divided after),
# about 1e-7 of parameters of size about 0.1. Check it on every rank:

# %% [markdown] lang=zh
# 这些差异来自舍入（DDP 在求和*之前*把每个梯度除以 4，我们是在求和之后才除），大小约为 1e-7，而参数本身的大小约为 0.1。在每个 rank 上检查一下：

# %%
runs = %ddp_gather (ddp_gap, alone_gap, counter.calls, max(spread_ddp), max(spread_by_hand))
for r, (ddp_gap, alone_gap, calls, spread_ddp, spread_by_hand) in enumerate(runs):
    assert spread_by_hand == 0.0 and spread_ddp == 0.0, (r, spread_by_hand, spread_ddp)  # identical ranks
    assert ddp_gap < 1e-5, (r, ddp_gap)          # DDP = by hand
    assert alone_gap < 1e-5, (r, alone_gap)      # = one process on the global batch
    assert calls == 40, calls                    # one bucket: one all-reduce per step
gap = max(max(r[0], r[1]) for r in runs)
print(say(f"every rank: DDP = by hand = one big batch (up to {gap:.1e}), ranks identical at every step",
          f"每个 rank 上：DDP = 手写 = 一个大批次（差值不超过 {gap:.1e}），各 rank 每一步都完全相同"))

# %% [markdown]
# ## Three ways to break it
#
# 1. **No all_reduce** (`sync=False`): each rank follows its own gradient and fits its own shards.
# 2. **A different seed on every rank** (`seed=rank`), gradients averaged correctly: the ranks
#    start apart. Every rank then takes the same step, so they stay *exactly as far apart* as they
#    started: averaging gradients never brings ranks together.
# 3. **Forgetting to divide** (`divide=False`): every rank gets the same *sum*, so the ranks stay
#    identical, but each step is 4 times too large (as if the learning rate were 4 × 0.2), and the
#    result changes with the number of ranks. **Identical is not the same as correct.**

# %% [markdown] lang=zh
# ## 三种弄坏它的方式
#
# 1. **不做 all_reduce**（`sync=False`）：每个 rank 沿着自己的梯度走，只拟合自己的分片。
# 2. **每个 rank 用不同的随机种子**（`seed=rank`），梯度正确地求平均：各 rank 从不同的起点出发。此后每个 rank 走的每一步都相同，所以它们始终保持与起点时*完全相同的距离*：对梯度求平均永远不会让各 rank 靠拢。
# 3. **忘记除以 world_size**（`divide=False`）：每个 rank 得到同一个*总和*，所以各 rank 仍然完全相同，但每一步的大小都是应有大小的 4 倍（相当于学习率变成 4 × 0.2），而且结果会随 rank 的数量而变。**完全相同不等于正确。**

# %%
%%ddp
_, spread_no_sync, params_no_sync = train_by_hand(sync=False)
_, spread_seeds, params_seeds = train_by_hand(seed=rank)
_, spread_no_div, params_no_div = train_by_hand(divide=False)

def away_from_ddp(params):
    """Per step, the largest difference between this rank's parameters and DDP's."""
    return [(p - q).abs().max().item() for p, q in zip(params, params_ddp)]

curves = {
    "by hand, correct": (spread_by_hand, away_from_ddp(params_by_hand)),
    "no all_reduce": (spread_no_sync, away_from_ddp(params_no_sync)),
    "seed = rank": (spread_seeds, away_from_ddp(params_seeds)),
    "forgot to divide": (spread_no_div, away_from_ddp(params_no_div)),
}
labels = {"by hand, correct": say("by hand, correct", "手写，正确"), "no all_reduce": say("no all_reduce", "不做 all_reduce"),
          "seed = rank": "seed = rank", "forgot to divide": say("forgot to divide", "忘记除以 world_size")}
print({labels[name]: say(f"spread {s[-1]:.2g}, from DDP {a[-1]:.2g}", f"rank 间相差 {s[-1]:.2g}，离 DDP {a[-1]:.2g}")
       for name, (s, a) in curves.items()})

# %% [markdown]
# Draw both measures, step by step. The y axes are logarithmic, so 0 cannot be drawn: a value of 0
# is drawn at **1e-12** (the floor). On the left, the correct run and "forgot to divide" lie on top of
# each other on the floor: both keep the ranks identical. On the right (the largest difference from
# DDP's parameters over all ranks) only the correct run stays near DDP, at rounding level.

# %% [markdown] lang=zh
# 把两个量逐步画出来。纵轴是对数坐标，无法画出 0：值为 0 的点画在 **1e-12**（下限）处。左图中，正确的运行和“忘记除以 world_size”的运行重叠在下限上：两者都让各 rank 保持完全相同。右图（所有 rank 中与 DDP 参数的最大差值）中，只有正确的运行始终紧贴 DDP，差值停留在舍入误差的量级。

# %%
curves = %ddp_gather curves
labels = %ddp_gather labels
shown = labels[0]                                     # each run's name, in the pool's language
FLOOR = 1e-12
names = ["no all_reduce", "seed = rank", "by hand, correct", "forgot to divide"]  # drawn in this order
steps = range(len(curves[0][names[0]][0]))            # step 0 (before training) .. 40
spread = {shown[name]: (steps, [max(FLOOR, v) for v in curves[0][name][0]]) for name in names}  # the same on every rank
away = {shown[name]: (steps, [max(FLOOR, *(c[name][1][i] for c in curves)) for i in steps]) for name in names}  # worst rank
draw.lines(None, panels=[
    dict(series=spread, logy=True, xlabel=say("step", "步数"),
         ylabel=say("max |param − rank 0's|  (0 drawn at 1e-12)", "max |参数 − rank 0 的参数|（0 画在 1e-12）"),
         title=say("How far apart the ranks are", "各 rank 之间相差多少")),
    dict(series=away, logy=True, xlabel=say("step", "步数"),
         ylabel=say("max |param − DDP's|", "max |参数 − DDP 的参数|"),
         title=say("How far from DDP's parameters", "与 DDP 的参数相差多少")),
])

# %%
first = curves[0]
assert all(c[n][0] == first[n][0] for c in curves for n in c)        # every rank measured the same spread
no_sync, seeds, no_div = first["no all_reduce"][0], first["seed = rank"][0], first["forgot to divide"][0]
assert no_sync[0] == 0.0 and no_sync[-1] > 1e-2                  # starts identical, drifts apart
assert seeds[0] > 1e-2 and abs(seeds[-1] - seeds[0]) < 1e-5     # starts apart, stays exactly as far apart
assert max(no_div) == 0.0                                         # identical on every rank ...
assert max(c["forgot to divide"][1][-1] for c in curves) > 1e-2  # ... but not where DDP is
wrong = first["forgot to divide"][1][-1]
print(say(f"no all_reduce: ranks drift apart to {no_sync[-1]:.2f}; seed = rank: stay {seeds[0]:.2f} apart; "
          f"forgot to divide: identical, yet {wrong:.2f} away from the right answer",
          f"不做 all_reduce：各 rank 逐渐分开，相差达到 {no_sync[-1]:.2f}；seed = rank：始终相差 {seeds[0]:.2f}；"
          f"忘记除以 world_size：各 rank 完全相同，却离正确答案 {wrong:.2f}"))

# %% [markdown]
# ## DDP starts every rank from rank 0's parameters
#
# Case 2 is why DDP, when it wraps a model, **broadcasts rank 0's parameters** (and buffers) to every
# rank: whatever seed each rank used, training starts identical. `DDP(model)` changes `model` itself:

# %% [markdown] lang=zh
# ## DDP 让每个 rank 都从 rank 0 的参数出发
#
# 正因为有情形 2，DDP 在包装模型时会把 **rank 0 的参数**（以及缓冲区，buffer）**广播**给每个 rank：无论各 rank 用了什么随机种子，训练都从完全相同的状态开始。`DDP(model)` 直接修改 `model` 本身：

# %%
%%ddp
model = make_model(seed=rank)                    # every rank different
before = param_spread(model)
wrapped = DDP(model)
after = param_spread(model)
from_rank0 = torch.equal(flat_params(model), flat_params(make_model(0)))
print(say(f"spread before DDP(model): {before:.3f}, after: {after}; rank 0's parameters: {from_rank0}",
          f"DDP(model) 之前的差值：{before:.3f}，之后：{after}；是否为 rank 0 的参数：{from_rank0}"))

# %%
checks = %ddp_gather (before, after, from_rank0)
assert all(b > 0.01 and a == 0.0 and same for b, a, same in checks), checks
print(say("DDP(model) made every rank hold rank 0's parameters", "DDP(model) 让每个 rank 都持有了 rank 0 的参数"))

# %% [markdown]
# That broadcast happens **once**, inside `DDP(model)`. Does DDP send parameters again while it
# trains? Try it: after wrapping, move every rank's copy a little (rank *r* adds 0.01 · *r* to every
# parameter), then train 40 steps with DDP, counting with `CommCounter` what it all-reduces. If DDP
# copied rank 0's parameters to the others during training, the ranks would soon be identical again.

# %% [markdown] lang=zh
# 这次广播只发生**一次**，就在 `DDP(model)` 里。训练过程中 DDP 还会再发送参数吗？试一试：包装之后，让每个 rank 的副本稍微偏离一点（rank *r* 给每个参数加上 0.01 · *r*），然后用 DDP 训练 40 步，同时用 `CommCounter` 统计它 all-reduce 了什么。如果 DDP 在训练中把 rank 0 的参数复制给其他 rank，各 rank 很快就会重新变得完全相同。

# %% [markdown]
# **Predict, then run.** After the move the ranks are 0.03 apart, as `param_spread` measures it
# (rank 3 added 0.03 to every parameter). What will `param_spread` say after the 40 steps of DDP
# training? (0 would mean identical again.)

# %% [markdown] lang=zh
# **先预测，再运行。** 偏移之后，按 `param_spread` 的算法，各 rank 相差 0.03（rank 3 给每个参数都加了 0.03）。DDP 训练 40 步之后，`param_spread` 会是多少？（0 表示各 rank 又完全相同了。）

# %%
predict("2.spread_after", ...)    # param_spread after the 40 DDP steps (0.03 before them)

# %%
%%ddp
with torch.no_grad():
    for p in wrapped.parameters():
        p.add_(0.01 * rank)                      # after DDP(model): each rank moves its own copy
moved = param_spread(wrapped)
counter = CommCounter()
wrapped.register_comm_hook(None, counter.hook)
opt = torch.optim.SGD(wrapped.parameters(), lr=LR)
for step in range(STEPS):
    x, y = shard(step)
    loss = loss_fn(wrapped(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ddplab.log(loss=loss, samples=len(x))
kept = param_spread(wrapped)
grad_bytes = sum(p.numel() * p.element_size() for p in wrapped.parameters())
print(say(f"spread after the move: {moved:.3f}, after {STEPS} steps: {kept:.3f}; "
          f"{counter.calls} all-reduces of {counter.bytes // counter.calls} bytes",
          f"偏移之后的差值：{moved:.3f}，{STEPS} 步之后：{kept:.3f}；"
          f"{counter.calls} 次 all-reduce，每次 {counter.bytes // counter.calls} 字节"))

# %%
evidence = %ddp_gather (moved, kept, counter.calls, counter.bytes, grad_bytes)
assert len(set(evidence)) == 1, evidence                          # every rank measured the same
moved, kept, calls, sent, grad_bytes = evidence[0]
reveal("2.spread_after", float(kept))
assert moved > 0.02 and abs(kept - moved) < 1e-5, (moved, kept)   # the gap we made is never undone
assert calls == 40 and sent == 40 * grad_bytes, (calls, sent)      # 1 all-reduce a step, of the gradients only
print(say(f"in {calls} steps DDP made {calls} all-reduces of {sent // calls} bytes each: the {grad_bytes // 4} "
          f"gradients in float32, once a step. The ranks were {moved:.3f} apart before training and {kept:.3f} "
          "after: no parameter was sent",
          f"{calls} 步中 DDP 做了 {calls} 次 all-reduce，每次 {sent // calls} 字节：正是 {grad_bytes // 4} 个 float32 梯度，"
          f"每步一次。训练前各 rank 相差 {moved:.3f}，训练后相差 {kept:.3f}：没有发送任何参数"))

# %% [markdown]
# **A common claim / what actually happens.** A common claim: DDP keeps the ranks in sync by
# `collect()`ing and `broadcast()`ing the model. What actually happens: `torch.distributed` has no
# `collect()` at all, and DDP broadcasts rank 0's parameters and buffers only **once**, when it
# wraps the model (the section before). During training it communicates **gradients**: hooks in
# `backward()` all-reduce them bucket by bucket, and every rank then applies the same average in
# its own `opt.step()`. The run above just showed it: the counts and bytes printed are exactly one
# all-reduce of the gradients per step, and the gap we put between the ranks after wrapping survived
# all 40 steps, so no parameter was copied. The ranks stay identical only because they start
# identical and take identical steps. The one thing DDP does broadcast during training is
# **buffers** (such as BatchNorm's running mean and variance): by default it sends rank 0's buffers
# at the start of every forward (`forward_sync_buffers`; before torch 2.13 it was called
# `broadcast_buffers`). This model has no buffers.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：DDP 通过 `collect()` 和 `broadcast()` 整个模型来让各 rank 保持同步。实际情况是：`torch.distributed` 里根本没有 `collect()`，而 DDP 只在包装模型时把 rank 0 的参数和缓冲区广播**一次**（上一节）。训练过程中它通信的是**梯度**：`backward()` 中的钩子逐个桶地对梯度做 all-reduce，然后每个 rank 在自己的 `opt.step()` 中用同一个平均梯度更新参数。上面的运行刚刚展示了这一点：打印出的次数和字节数正好是每步一次、只针对梯度的 all-reduce；而包装之后我们在各 rank 之间制造的差距，在全部 40 步之后依然存在，说明没有任何参数被复制。各 rank 之所以保持一致，只是因为它们从相同的状态出发，又走了相同的每一步。训练中 DDP 唯一会广播的是**缓冲区**（例如 BatchNorm 的滑动均值和方差）：默认情况下，它在每次前向计算开始时发送 rank 0 的缓冲区（`forward_sync_buffers`；torch 2.13 之前叫 `broadcast_buffers`）。这个模型没有缓冲区。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why. Try things out in cells of your own (before the last cell, `%ddp_stop`).
#
# **2.1** "Forgot to divide" trained like a correct run with a learning rate of 4 × 0.2. Run the
# same code on **8** ranks, each still on 16 samples per step: the same as a correct run with which
# learning rate? Answer with a number.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。可以在你自己的单元格里动手试试（放在最后一个单元格 `%ddp_stop` 之前）。
#
# **2.1** “忘记除以 world_size”的训练，相当于学习率为 4 × 0.2 的正确训练。把同样的代码放到 **8** 个 rank 上运行，每个 rank 每步仍然是 16 个样本：它相当于学习率为多少的正确训练？请写一个数。

# %%
answer = ...    # the learning rate of the correct run that "forgot to divide" matches on 8 ranks
check("2.1", answer, lr=0.2, world_size=len(runs))

# %% [markdown]
# **2.2** Make one shard smaller: in `shard`, give rank 3 only 8 samples (`PER_RANK // 2`), the
# others 16. DDP still averages the 4 ranks' gradients. In that average, how many times as much
# does one of rank 3's samples weigh as one sample of another rank? (In the gradient of the
# global batch of 56 samples, every sample weighs the same.) Answer with a number.

# %% [markdown] lang=zh
# **2.2** 让一个分片变小：在 `shard` 中只给 rank 3 分 8 个样本（`PER_RANK // 2`），其他 rank 仍是 16 个。DDP 仍然对 4 个 rank 的梯度求平均。在这个平均值里，rank 3 的一个样本的权重是其他 rank 一个样本的几倍？（在 56 个样本的全局批次的梯度里，每个样本的权重都相同。）请写一个数。

# %%
answer = ...    # how many times as much one of rank 3's samples weighs
check("2.2", answer, per_rank=16, small=8, world_size=len(runs))

# %% [markdown]
# **2.3** "seed = rank" started the ranks apart and averaged the gradients correctly. Had it trained
# 400 steps instead of 40, how far apart would the ranks be at the end (the measure of the left
# plot)? Answer with a number.

# %% [markdown] lang=zh
# **2.3** “seed = rank” 让各 rank 从不同的起点出发，并且正确地对梯度求了平均。如果它训练 400 步而不是 40 步，最后各 rank 之间相差多少（左图的那个量）？请写一个数。

# %%
answer = ...    # how far apart the ranks would be after 400 steps
check("2.3", answer, start=seeds[0])

# %% [markdown]
# **2.4** DDP all-reduced the gradients of this model, `Linear(20, 32)`, `Tanh`, `Linear(32, 4)`, in
# one bucket per step. Insert one more `nn.Linear(32, 32), nn.Tanh()` after the first `Tanh`: how
# many bytes would `CommCounter` count per step, on each rank? Answer with a whole number of bytes.

# %% [markdown] lang=zh
# **2.4** 对这个模型（`Linear(20, 32)`、`Tanh`、`Linear(32, 4)`），DDP 每步在一个桶里 all-reduce 它的梯度。在第一个 `Tanh` 之后再插入一层 `nn.Linear(32, 32), nn.Tanh()`：每个 rank 上的 `CommCounter` 每步会统计到多少字节？请写一个整数字节数。

# %%
answer = ...    # bytes per step, on each rank
check("2.4", answer, bytes_per_step=sent // calls, world_size=len(evidence))

# %%
%ddp_stop
