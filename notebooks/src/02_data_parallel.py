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
# **简介。** 数据并行训练中，每个 rank 持有**同一个模型**，各自在每个批次中**属于自己的那一份**数据上训练。
# `backward()` 之后各 rank 的梯度不同；对每个梯度做 `all_reduce` 再除以 `world_size`，每个 rank 得到
# 相同的平均梯度，于是每个 rank 走出相同的一步，模型始终保持一致。这一课先手写这个过程，再验证
# `DistributedDataParallel`（DDP）最终得到相同的参数（只差舍入误差）：它做的是同一件事，只是按桶（bucket）合并，
# 并与 `backward()` 重叠进行。最后用三种方式把它弄坏，看看会发生什么。
#
# **You will see:** how far apart the ranks' parameters are, step by step, for the correct run and
# three broken ones, and how far each run ends from DDP's parameters.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## The same model, different data
#
# Every rank builds the same small classifier (same seed, so the same initial parameters) and the
# same data set. A **global batch** of 64 samples is split in 4 shards of 16: at step *s*, rank *r*
# trains on shard *r* of global batch *s*.

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import param_spread, flat_params, CommCounter
from ddplab.workloads import synthetic_classification

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
print(f"step 0: samples {first[0]}-{first[1]}, labels {shard(0)[1][:6].tolist()}...")

# %% [markdown]
# ## By hand: all_reduce every gradient, divide by world_size
#
# `param_spread(model)` measures the largest difference between any parameter on any rank and the
# same parameter on rank 0 (0.0: all ranks identical). We record it before training and after every
# step, and keep a copy of the parameters at every step to compare runs later. The switches `sync`
# and `divide` are there to break it later on; the correct run uses both.

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
print(f"loss {loss_fn(by_hand(X[:256]), Y[:256]).item():.3f} on the first 256 samples; "
      f"largest spread over {STEPS} steps: {max(spread_by_hand)}")

# %% [markdown]
# Why is this right? The loss of a global batch is the mean over its 64 samples, which is the mean of
# the 4 shards' mean losses, so its gradient is the **average of the ranks' gradients**. Four ranks
# with 16 samples each take exactly the steps that one process would take on batches of 64. Check it
# with one process alone, on every rank, without any communication:

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
print(f"one process on batches of 64 vs 4 ranks by hand: largest difference {alone_gap:.1e}")

# %% [markdown]
# ## DistributedDataParallel does the same
#
# Wrap the same model (same seed) in `DDP` and train it on the same shards, with no `all_reduce` in
# our code. DDP hooks into `backward()`: as soon as a **bucket** of gradients is ready (25 MB by
# default; our 804 parameters fit in one), it divides the bucket by `world_size` and all-reduces it
# while `backward()` goes on with earlier layers. `CommCounter` is a DDP communication hook that
# counts the all-reduces DDP makes: here 1 per step, where our loop made 4 (one per parameter tensor).

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
print(f"DDP vs by hand: largest difference {ddp_gap:.1e}; DDP all-reduced {counter.calls} times "
      f"in {STEPS} steps ({counter.bytes // counter.calls} bytes each)")

# %% [markdown]
# The differences are rounding (DDP divides each gradient by 4 *before* summing, we divided after),
# about 1e-7 of parameters of size about 0.1. Check it on every rank:

# %%
runs = %ddp_gather (ddp_gap, alone_gap, counter.calls, max(spread_ddp), max(spread_by_hand))
for r, (ddp_gap, alone_gap, calls, spread_ddp, spread_by_hand) in enumerate(runs):
    assert spread_by_hand == 0.0 and spread_ddp == 0.0, (r, spread_by_hand, spread_ddp)  # identical ranks
    assert ddp_gap < 1e-5, (r, ddp_gap)          # DDP = by hand
    assert alone_gap < 1e-5, (r, alone_gap)      # = one process on the global batch
    assert calls == 40, calls                    # one bucket: one all-reduce per step
print(f"every rank: DDP = by hand = one big batch (up to {max(max(r[0], r[1]) for r in runs):.1e}), "
      "ranks identical at every step")

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
print({name: f"spread {s[-1]:.2g}, from DDP {a[-1]:.2g}" for name, (s, a) in curves.items()})

# %% [markdown]
# Draw both measures, step by step. The y axes are logarithmic, so 0 cannot be drawn: a value of 0
# is drawn at **1e-12** (the floor). On the left, the correct run and "forgot to divide" lie on top of
# each other on the floor: both keep the ranks identical. On the right (the largest difference from
# DDP's parameters over all ranks) only the correct run stays near DDP, at rounding level.

# %%
curves = %ddp_gather curves
FLOOR = 1e-12
names = ["no all_reduce", "seed = rank", "by hand, correct", "forgot to divide"]  # drawn in this order
steps = range(len(curves[0][names[0]][0]))            # step 0 (before training) .. 40
spread = {name: (steps, [max(FLOOR, v) for v in curves[0][name][0]]) for name in names}  # the same on every rank
away = {name: (steps, [max(FLOOR, *(c[name][1][i] for c in curves)) for i in steps]) for name in names}  # worst rank
draw.lines(None, panels=[
    dict(series=spread, logy=True, xlabel=say("step", "步"),
         ylabel=say("max |param − rank 0's|  (0 drawn at 1e-12)", "max |参数 − rank 0 的参数|（0 画在 1e-12）"),
         title=say("How far apart the ranks are", "各 rank 之间相差多少")),
    dict(series=away, logy=True, xlabel=say("step", "步"),
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
print(f"no all_reduce: ranks drift apart to {no_sync[-1]:.2f}; seed = rank: stay {seeds[0]:.2f} apart; "
      f"forgot to divide: identical, yet {first['forgot to divide'][1][-1]:.2f} away from the right answer")

# %% [markdown]
# ## DDP starts every rank from rank 0's parameters
#
# Case 2 is why DDP, when it wraps a model, **broadcasts rank 0's parameters** (and buffers) to every
# rank: whatever seed each rank used, training starts identical. `DDP(model)` changes `model` itself:

# %%
%%ddp
model = make_model(seed=rank)                    # every rank different
before = param_spread(model)
wrapped = DDP(model)
after = param_spread(model)
from_rank0 = torch.equal(flat_params(model), flat_params(make_model(0)))
print(f"spread before DDP(model): {before:.3f}, after: {after}; rank 0's parameters: {from_rank0}")

# %%
checks = %ddp_gather (before, after, from_rank0)
assert all(b > 0.01 and a == 0.0 and same for b, a, same in checks), checks
print("DDP(model) made every rank hold rank 0's parameters")

# %% [markdown]
# ## Exercises
#
# 1. Make one shard smaller: in `shard`, give rank 3 only 8 samples (`PER_RANK // 2`). Is the
#    average of the ranks' gradients still the gradient of the global batch? Compare with `alone`
#    trained on the same 56 samples per step, and explain the gap.
# 2. Replace the `for p in model.parameters()` loop with a single `all_reduce` of all gradients
#    flattened into one tensor (`torch.cat([p.grad.reshape(-1) ...])`, then copy the slices back).
#    This is a bucket. Check the result is unchanged, and count the all-reduces.
# 3. Train "forgot to divide" with `LR = 0.05` (a quarter). Does it now match DDP with `LR = 0.2`?
#    Why would it still be wrong with 8 ranks?
#
# ## 练习
#
# 1. 让一个分片变小：在 `shard` 中只给 rank 3 8 个样本（`PER_RANK // 2`）。各 rank 梯度的平均值还等于全局批次的梯度吗？
#    与每步在同样 56 个样本上训练的 `alone` 比较，并解释差异。
# 2. 把 `for p in model.parameters()` 循环换成对所有梯度拼接成的一个张量做一次 `all_reduce`
#    （`torch.cat([p.grad.reshape(-1) ...])`，再把各段拷回去）。这就是一个桶（bucket）。验证结果不变，并数一数 all-reduce 的次数。
# 3. 用 `LR = 0.05`（四分之一）训练“忘记除以 world_size”的版本。它现在和 `LR = 0.2` 的 DDP 一致吗？
#    为什么在 8 个 rank 时它仍然是错的？

# %%
%ddp_stop
