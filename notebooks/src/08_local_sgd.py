# %% [markdown]
# # Lesson 8 · Synchronous vs less-synchronous updates
#
# **In short.** DDP is fully synchronous: every step, every rank all-reduces all of its gradients,
# so the ranks take the same step and never drift apart. **Local SGD** (periodic model averaging)
# talks less: each rank trains its own copy on its own data, and only every *period* steps the
# ranks average their parameters. Here the same model, data and number of steps are trained three
# ways: DDP, and local SGD with torch's `PeriodicModelAverager` every 4 and every 16 steps. You
# compare the loss against the steps taken and against the bytes communicated, and watch the
# copies drift apart between averagings and snap together at each one.
#
# **简介。** DDP 是完全同步的：每一步，每个 rank 都要 all-reduce 全部梯度，所以各 rank 走完全
# 相同的一步，参数从不分叉。**Local SGD**（周期性模型平均）通信更少：每个 rank 用自己的数据训练
# 自己的模型副本，每隔 *period* 步才把各 rank 的参数平均一次。这一课用同样的模型、数据和步数
# 训练三次：DDP，以及用 torch 的 `PeriodicModelAverager` 每 4 步、每 16 步平均一次的 local SGD。
# 你将比较损失随步数和随通信字节数的变化，并观察各副本在两次平均之间如何分开、在平均时又如何
# 合为一体。
#
# **You will see:** loss against steps and against MB communicated for the three runs, and the
# parameter spread across ranks over time: a saw-tooth for local SGD, flat zero for DDP.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## Data and model
#
# The setting of lesson 7: `synthetic_classification` with 64 features and 10 classes, 10,000
# training samples split across the ranks by `DistributedSampler`, 2,000 held out for testing, and
# `mlp(64, 256, 10)` (85 k parameters). Batches of 32 per rank, 240 steps. `batches()` hands out
# the same sequence of batches in every run, so the runs differ only in how they synchronise.

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from ddplab.workloads import synthetic_classification, mlp
from ddplab.lessons.ranks import param_spread

STEPS = 240
X, Y = synthetic_classification(n=12_000, features=64, classes=10).tensors
train = TensorDataset(X[:10_000], Y[:10_000])
X_test, Y_test = X[10_000:], Y[10_000:]

def batches():
    """STEPS batches of 32 for this rank: its quarter of each epoch, reshuffled every epoch."""
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=32, sampler=sampler, drop_last=True)
    step, epoch = 0, 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            yield x, y
            step += 1
            if step == STEPS:
                return
        epoch += 1

def accuracy(net):
    with torch.no_grad():
        return (net(X_test).argmax(dim=1) == Y_test).float().mean().item()

n_params = sum(p.numel() for p in mlp(features=64, hidden=256, classes=10).parameters())
print(f"{n_params} parameters = {4 * n_params / 1e3:.0f} kB in float32")

# %% [markdown]
# ## (a) DDP: all-reduce the gradients every step
#
# As in every lesson so far. `CommCounter` (a DDP communication hook) adds up the bytes of the
# gradient buckets DDP all-reduces. `param_spread` (the largest difference between any rank's
# parameters and rank 0's) is measured after every step; it is a collective too, so it runs
# outside what is counted.

# %%
%%ddp
from ddplab.lessons.ranks import CommCounter

def train_ddp():
    model = DDP(mlp(features=64, hidden=256, classes=10, seed=0))
    counter = CommCounter()
    model.register_comm_hook(None, counter.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, sent, spread = [], [], []
    for x, y in batches():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                                   # all-reduce of every gradient, every step
        opt.step()
        ddplab.log(loss=loss, samples=len(x))
        losses.append(loss.item())
        sent.append(counter.bytes)                        # bytes all-reduced so far
        spread.append(param_spread(model.module))
    return dict(losses=losses, sent=sent, spread=spread, accuracy=accuracy(model.module))

runs = {"DDP": train_ddp()}
print(f"sent {runs['DDP']['sent'][-1] / 1e6:.1f} MB; largest spread across ranks: {max(runs['DDP']['spread'])}")

# %% [markdown]
# ## (b) Local SGD: average the parameters every *period* steps
#
# No DDP: each rank has a plain model and its own optimizer, computes its gradients on its own
# batch, and steps **alone**. After each step, `averager.average_parameters(model.parameters())`;
# torch's `PeriodicModelAverager(period)` counts the calls and, on every *period*-th one (its steps
# 0, period, 2·period, ...), all-reduces the parameters (flattened into one buffer) and divides by
# the number of ranks. A last `average_parameters` call from `model_averaging.utils` after the loop
# makes the ranks agree on one final model.
#
# The averager calls `dist.all_reduce` from Python, so `AllReduceCounter` from `ddplab.lessons.ranks`
# counts the bytes of every all-reduce made inside its `with` block.

# %%
%%ddp
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.algorithms.model_averaging.utils import average_parameters
from ddplab.lessons.ranks import AllReduceCounter

def train_local_sgd(period):
    model = mlp(features=64, hidden=256, classes=10, seed=0)   # the same start on every rank
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    averager = PeriodicModelAverager(period=period)
    counter = AllReduceCounter()
    losses, sent, spread = [], [], []
    for x, y in batches():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                                   # local gradients: no communication
        opt.step()                                        # this rank's copy moves on its own
        with counter:
            averager.average_parameters(model.parameters())   # all-reduce every period-th call
        ddplab.log(loss=loss, samples=len(x))
        losses.append(loss.item())
        sent.append(counter.bytes)
        spread.append(param_spread(model))
    with counter:
        average_parameters(model.parameters(), dist.group.WORLD)  # the final averaging
    sent[-1] = counter.bytes
    return dict(losses=losses, sent=sent, spread=spread, accuracy=accuracy(model),
                final_spread=param_spread(model))

for period in (4, 16):
    runs[f"local SGD, period {period}"] = train_local_sgd(period)
if rank == 0:                                             # the same on every rank
    for name, run in runs.items():
        print(f"{name}: sent {run['sent'][-1] / 1e6:.1f} MB, test accuracy {run['accuracy']:.1%}")

# %% [markdown]
# Every rank's loss is for its own batch of 32 (and, in local SGD, its own copy of the model); the
# curve is their average over the 4 ranks, smoothed over 10 steps. Left, against the steps taken; right,
# against the megabytes each rank has all-reduced so far.

# %%
runs = %ddp_gather runs
names = ["DDP", "local SGD, period 4", "local SGD, period 16"]
mean_loss = {n: [sum(r[n]["losses"][s] for r in runs) / 4 for s in range(len(runs[0][n]["losses"]))] for n in names}

def smooth(values, k=10):
    return [sum(values[max(0, i - k + 1):i + 1]) / len(values[max(0, i - k + 1):i + 1]) for i in range(len(values))]

label = {n: say(n, n.replace("local SGD, period", "local SGD，周期")) for n in names}
draw.lines(None, panels=[
    dict(series={label[n]: (range(1, len(mean_loss[n]) + 1), smooth(mean_loss[n])) for n in names},
         xlabel=say("step", "步数"), ylabel=say("training loss (mean of 4 ranks)", "训练损失（4 个 rank 平均）"),
         title=say("Loss against steps", "损失 vs 步数")),
    dict(series={label[n]: ([b / 1e6 for b in runs[0][n]["sent"]], smooth(mean_loss[n])) for n in names},
         xlabel=say("MB all-reduced by each rank", "每个 rank all-reduce 的 MB"), ylabel=say("training loss", "训练损失"),
         title=say("Loss against communication", "损失 vs 通信量"))])

# %% [markdown]
# Check the claims: DDP keeps the ranks identical at every step; local SGD lets them drift, but the
# final averaging makes them identical; it sends about *period* times fewer bytes; and every run
# learns.

# %%
sent = {n: runs[0][n]["sent"][-1] for n in names}
late = {n: sum(mean_loss[n][-20:]) / 20 for n in names}
early = {n: sum(mean_loss[n][:20]) / 20 for n in names}
assert all(s == 0.0 for r in runs for s in r["DDP"]["spread"])
for period in (4, 16):
    n = f"local SGD, period {period}"
    assert max(runs[0][n]["spread"]) > 0 and all(r[n]["final_spread"] == 0.0 for r in runs)
    assert 0.85 * period < sent["DDP"] / sent[n] < 1.15 * period, (period, sent["DDP"] / sent[n])
assert all(late[n] < 0.5 * early[n] for n in names), (early, late)
assert late["DDP"] < late["local SGD, period 16"]         # per step, synchronising more helps
for n in names:
    less = f" ({sent['DDP'] / sent[n]:.1f}x less than DDP)" if n != "DDP" else ""
    print(f"{n}: {sent[n] / 1e6:.1f} MB{less}, loss {early[n]:.2f} -> {late[n]:.2f} "
          f"(first and last 20 steps), test accuracy {runs[0][n]['accuracy']:.1%}")

# %% [markdown]
# ## How far apart do the copies drift?
#
# `param_spread` after every step, for the first 100 steps. DDP stays at exactly 0. Local SGD's
# copies move apart while each rank follows its own batches, and are pulled back to one model at
# each averaging: a saw-tooth, with taller teeth when the period is longer.

# %%
first = 100
assert all(runs[0]["local SGD, period 4"]["spread"][s] == 0.0 for s in range(0, first, 4))   # right after each averaging
draw.lines({label[n]: (range(first), runs[0][n]["spread"][:first]) for n in names},
           xlabel=say("step", "步数"), ylabel=say("largest |parameter − rank 0's|", "与 rank 0 参数的最大差"),
           title=say("Parameter spread across ranks", "各 rank 参数的差异"))

# %% [markdown]
# **What to take away.**
#
# - **Per step**, synchronising more often helps: period 16's loss falls slowest, DDP's and
#   period 4's are close (the numbers above). Each DDP step follows the gradient of the whole
#   global batch of 128, while local SGD's ranks each follow a noisier gradient of their own 32
#   samples, and averaging copies that have drifted apart is not quite the same as averaging
#   gradients. After the final averaging, the test accuracies are close.
# - **Per byte communicated**, local SGD wins by far: on the right, its curves reach a low loss
#   after a fraction of DDP's megabytes.
# - Here the ranks share one machine and the all-reduce goes through memory. Local SGD pays off
#   where the all-reduce is slow compared with the computing: many machines on a slow network, or
#   federated learning (many devices, rarely in contact: the same idea, averaging every few
#   hundred steps).
# - Common practice is *post-local SGD*: DDP for the first steps, while the loss falls fast and the
#   copies would drift most, then local SGD (`PeriodicModelAverager(period, warmup_steps=...)`
#   together with DDP's `post_localSGD_hook`).
# - The optimizer state (momentum) is not averaged: each rank keeps its own.
#
# Fully *asynchronous* training (a parameter server that applies each worker's gradient as soon as
# it arrives, without waiting for the others) goes one step further; `torch.distributed.rpc` can
# build it, but DDP and model averaging, both synchronous at the moments they communicate, are
# what PyTorch provides ready-made.

# %% [markdown]
# ## Exercises
#
# 1. Try `period=64` and `period=1`. Period 1 follows DDP's loss curve up to rounding, although it
#    averages parameters rather than gradients: why? (Hint: SGD with momentum is linear in the
#    gradients.) Switch both runs to `torch.optim.Adam`: does period 1 still match DDP?
# 2. Post-local SGD: run `PeriodicModelAverager(period=16, warmup_steps=60)` and all-reduce the
#    gradients yourself (or use DDP) during the first 60 steps. Compare loss and bytes with the
#    runs above.
# 3. Slow one rank down with `%ddp_fault slow 2 3` and run DDP and local SGD with period 16 again.
#    How much of the slowdown does each one feel, and why? (`%ddp_fault clear` ends it.)
#
# ## 练习
#
# 1. 试试 `period=64` 和 `period=1`。period 1 平均的是参数而不是梯度，却（在舍入误差内）与 DDP 的
#    损失曲线一致：为什么？（提示：带动量的 SGD 对梯度是线性的。）把两者都换成 `torch.optim.Adam`：
#    period 1 还和 DDP 一致吗？
# 2. Post-local SGD：用 `PeriodicModelAverager(period=16, warmup_steps=60)`，前 60 步自己 all-reduce
#    梯度（或使用 DDP）。与上面的几次训练比较损失和字节数。
# 3. 用 `%ddp_fault slow 2 3` 让 rank 2 变慢，再运行 DDP 和周期为 16 的 local SGD。
#    各自受到多大影响？为什么？（`%ddp_fault clear` 取消。）

# %%
%ddp_stop
