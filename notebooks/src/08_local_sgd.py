# %% [markdown]
# # Lesson 8 · Synchronous vs less-synchronous updates
#
# **In short.** DDP is fully synchronous: every step, every rank all-reduces all of its gradients,
# so the ranks take the same step and never drift apart. **Local SGD** (periodic model averaging)
# talks less: each rank trains its own copy on its own data, and only every *period* steps the
# ranks average their parameters. **Asynchronous** training goes further: a **parameter server**
# applies each worker's gradient the moment it arrives, and no worker ever waits for another.
# Here the same model and data are trained every way: DDP; local SGD with
# torch's `PeriodicModelAverager` every 4 and every 16 steps; local SGD whose period you change
# with a slider while it trains; and a parameter server on rank 0 fed by workers on ranks 1-3.
# You compare loss against steps, bytes and wall time, watch the copies drift apart and snap back,
# and measure how stale the asynchronous gradients are.
#
# **简介。** DDP 是完全同步的：每一步，每个 rank 都要 all-reduce 全部梯度，所以各 rank 走完全
# 相同的一步，参数从不分叉。**本地 SGD**（周期性模型平均）通信更少：每个 rank 用自己的数据训练
# 自己的模型副本，每隔 *period* 步才把各 rank 的参数平均一次。**异步**训练更进一步：
# **参数服务器**一收到某个 worker 的梯度就立即应用，任何 worker 都不必等待其他 worker。
# 这一课用同样的模型和数据，把每种方式都训练一遍：DDP；用 torch 的
# `PeriodicModelAverager` 每 4 步、每 16 步平均一次的本地 SGD；训练过程中用滑块改变周期的本地
# SGD；以及 rank 0 上的参数服务器加 rank 1-3 上的 worker。你将比较损失随步数、通信字节数和
# 墙钟时间的变化，观察各副本如何分开又合拢，并测量异步梯度有多“陈旧”。
#
# **You will see:** loss against steps, MB communicated and seconds for every run; the parameter
# spread across ranks over time (a saw-tooth for local SGD, flat zero for DDP); bytes and
# throughput following a slider; the staleness of every gradient the parameter server applied.

# %% [markdown] lang=zh
# # 第 8 课 · 同步更新与弱同步更新
#
# **简而言之**：DDP 是完全同步的：每一步，每个进程（rank）都要 all-reduce 自己的全部梯度，所以
# 各 rank 走出完全相同的一步，参数从不分叉。**本地 SGD**（周期性模型平均）通信更少：每个 rank
# 用自己的数据训练自己的模型副本，只在每隔 *period* 步时把各 rank 的参数平均一次。**异步**训练
# 走得更远：**参数服务器**一收到某个工作进程（worker）的梯度就立即应用，没有哪个 worker 需要
# 等待别人。
# 这一课用同样的模型和数据，把每种方式都训练一遍：DDP；用 torch 的
# `PeriodicModelAverager` 每 4 步、每 16 步平均一次的本地 SGD；训练进行中用滑块改变周期的本地
# SGD；以及 rank 0 上的参数服务器，由 rank 1-3 上的 worker 提供梯度。你将比较损失随步数、
# 通信字节数和墙钟时间的变化，观察各副本如何在两次平均之间分开、又在平均时合拢，并测量异步
# 梯度有多“陈旧”。
#
# **你将看到**：每次训练的损失随步数、通信 MB 数和秒数的变化；各 rank 参数差异随时间的变化
# （本地 SGD 呈锯齿状，DDP 始终为零）；通信字节数和吞吐量如何跟随滑块变化；参数服务器所应用的
# 每个梯度的陈旧度。

# %%
%load_ext ddplab
from ddplab.lessons import draw, knobs, say

# %%
%ddp_start 4

# %% [markdown]
# ## Data and model
#
# The setting of lesson 7: `synthetic_classification` with 64 features and 10 classes, 10,000
# training samples split across the ranks by `DistributedSampler`, 2,000 held out for testing, and
# `mlp(64, 256, 10)` (85 k parameters). Batches of 32 per rank, 240 steps: 4 × 240 × 32 = 30,720
# samples per run. `batches()` hands out the same sequence of batches in every run on the 4 ranks,
# so those runs differ only in how they synchronise (in (d) it splits the data among 3 workers).

# %% [markdown] lang=zh
# ## 数据与模型
#
# 沿用第 7 课的设置：`synthetic_classification` 生成 64 个特征、10 个类别的数据，其中 10,000 个
# 训练样本由 `DistributedSampler` 分给各 rank，另外 2,000 个留作测试；模型是
# `mlp(64, 256, 10)`（8.5 万个参数）。每个 rank 每批 32 个样本，训练 240 步：每次训练共
# 4 × 240 × 32 = 30,720 个样本。`batches()` 在 4 个 rank 上的每次训练中给出同样的批次序列，所以
# 这几次训练之间唯一的区别就是同步方式（在 (d) 中，它把数据分给 3 个 worker）。

# %%
%%ddp
import time
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from ddplab.workloads import synthetic_classification, mlp
from ddplab.lessons.ranks import param_spread

STEPS = 240
X, Y = synthetic_classification(n=12_000, features=64, classes=10).tensors
train = TensorDataset(X[:10_000], Y[:10_000])
X_test, Y_test = X[10_000:], Y[10_000:]

def batches(steps=STEPS, replicas=world_size, index=rank):
    """`steps` batches of 32 for this rank: its share of each epoch, reshuffled every epoch."""
    sampler = DistributedSampler(train, num_replicas=replicas, rank=index, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=32, sampler=sampler, drop_last=True)
    step, epoch = 0, 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            yield x, y
            step += 1
            if step == steps:
                return
        epoch += 1

def accuracy(net):
    with torch.no_grad():
        return (net(X_test).argmax(dim=1) == Y_test).float().mean().item()

n_params = sum(p.numel() for p in mlp(features=64, hidden=256, classes=10).parameters())

# %%
n_params = %ddp_gather n_params
n_params = n_params[0]
print(say(f"{n_params:,} parameters = {4 * n_params / 1e3:.0f} kB in float32",
          f"{n_params:,} 个参数 = float32 下 {4 * n_params / 1e3:.0f} kB"))

# %% [markdown]
# ## (a) DDP: all-reduce the gradients every step
#
# As in every lesson so far. `CommCounter` (a DDP communication hook) adds up the bytes of the
# gradient buckets DDP all-reduces. `param_spread` (the largest difference between any rank's
# parameters and rank 0's) is measured after every step; it is a collective too, so it is left out
# of both the bytes and the clock: `clock` adds up the seconds spent training only.

# %% [markdown] lang=zh
# ## (a) DDP：每一步都 all-reduce 梯度
#
# 和之前每一课一样。`CommCounter`（一个 DDP 通信钩子）累计 DDP 所 all-reduce 的梯度桶的字节数。
# 每一步之后测量 `param_spread`（任一 rank 的参数与 rank 0 参数之间的最大差值）；它本身也是一次
# 集合通信，所以字节数和计时都不把它算在内：`clock` 只累计训练所花的秒数。

# %%
%%ddp
from ddplab.lessons.ranks import CommCounter

def train_ddp():
    model = DDP(mlp(features=64, hidden=256, classes=10, seed=0))
    counter = CommCounter()
    model.register_comm_hook(None, counter.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, sent, spread, clock, seconds = [], [], [], [], 0.0
    for x, y in batches():
        tic = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                                   # all-reduce of every gradient, every step
        opt.step()
        seconds += time.perf_counter() - tic
        ddplab.log(loss=loss, samples=len(x))
        losses.append(loss.item())
        sent.append(counter.bytes)                        # bytes all-reduced so far
        clock.append(seconds)                             # seconds spent training so far
        spread.append(param_spread(model.module))
    return dict(losses=losses, sent=sent, spread=spread, clock=clock, accuracy=accuracy(model.module))

runs = {"DDP": train_ddp()}

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

# %% [markdown] lang=zh
# ## (b) 本地 SGD：每隔 *period* 步平均一次参数
#
# 不用 DDP：每个 rank 有一个普通模型和自己的优化器，在自己的批次上计算梯度，并且**独自**更新。
# 每一步之后调用 `averager.average_parameters(model.parameters())`；torch 的
# `PeriodicModelAverager(period)` 对调用次数计数，每逢第 *period* 次（它的第 0、period、
# 2·period……步），就把参数（展平成一个缓冲区）all-reduce，再除以 rank 数。循环结束后，再用
# `model_averaging.utils` 中的 `average_parameters` 做最后一次平均，让各 rank 得到同一个最终模型。
#
# 平均器是在 Python 中调用 `dist.all_reduce` 的，所以 `ddplab.lessons.ranks` 中的
# `AllReduceCounter` 能统计其 `with` 块内每次 all-reduce 的字节数。

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
    losses, sent, spread, clock, seconds = [], [], [], [], 0.0
    for x, y in batches():
        tic = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                                   # local gradients: no communication
        opt.step()                                        # this rank's copy moves on its own
        with counter:
            averager.average_parameters(model.parameters())   # all-reduce every period-th call
        seconds += time.perf_counter() - tic
        ddplab.log(loss=loss, samples=len(x))
        losses.append(loss.item())
        sent.append(counter.bytes)
        clock.append(seconds)
        spread.append(param_spread(model))
    with counter:
        average_parameters(model.parameters(), dist.group.WORLD)  # the final averaging
    sent[-1] = counter.bytes
    return dict(losses=losses, sent=sent, spread=spread, clock=clock, accuracy=accuracy(model),
                final_spread=param_spread(model))

for period in (4, 16):
    runs[f"local SGD, period {period}"] = train_local_sgd(period)

# %% [markdown]
# Every rank's loss is for its own batch of 32 (and, in local SGD, its own copy of the model); the
# curve is their average over the 4 ranks, smoothed over 10 steps. Left, against the steps taken; right,
# against the megabytes each rank has all-reduced so far.

# %% [markdown] lang=zh
# 每个 rank 的损失是在它自己那批 32 个样本上算出的（在本地 SGD 中，还是用它自己的模型副本算出
# 的）；曲线是 4 个 rank 的平均值，并按 10 步做了平滑。左图横轴是已走的步数；右图横轴是每个 rank
# 到目前为止 all-reduce 的兆字节数。

# %%
runs = %ddp_gather runs
names = ["DDP", "local SGD, period 4", "local SGD, period 16"]
mean_loss = {n: [sum(r[n]["losses"][s] for r in runs) / 4 for s in range(len(runs[0][n]["losses"]))] for n in names}

def smooth(values, k=10):
    return [sum(values[max(0, i - k + 1):i + 1]) / len(values[max(0, i - k + 1):i + 1]) for i in range(len(values))]

label = {n: say(n, n.replace("local SGD, period", "本地 SGD，周期")) for n in names}
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

# %% [markdown] lang=zh
# 检验上面的说法：DDP 在每一步都让各 rank 完全一致；本地 SGD 让它们分开，但最后一次平均使它们
# 重新一致；它发送的字节数约为 DDP 的 1/*period*；而且每次训练都学到了东西。

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
    less = say(f" ({sent['DDP'] / sent[n]:.1f}x less than DDP)", f"（比 DDP 少 {sent['DDP'] / sent[n]:.1f} 倍）") if n != "DDP" else ""
    print(say(f"{n}: {sent[n] / 1e6:.1f} MB{less}, loss {early[n]:.2f} -> {late[n]:.2f} "
              f"(first and last 20 steps), test accuracy {runs[0][n]['accuracy']:.1%}",
              f"{label[n]}：{sent[n] / 1e6:.1f} MB{less}，损失 {early[n]:.2f} -> {late[n]:.2f}"
              f"（前 20 步与后 20 步），测试准确率 {runs[0][n]['accuracy']:.1%}"))
print(say("DDP: the largest spread across ranks at any step was 0.0", "DDP：任何一步各 rank 之间的最大差异都是 0.0"))

# %% [markdown]
# ## How far apart do the copies drift?
#
# `param_spread` after every step, for the first 100 steps. DDP stays at exactly 0. Local SGD's
# copies move apart while each rank follows its own batches, and are pulled back to one model at
# each averaging: a saw-tooth, with taller teeth when the period is longer.

# %% [markdown] lang=zh
# ## 各副本会分开多远？
#
# 前 100 步中每一步之后的 `param_spread`。DDP 始终恰好为 0。本地 SGD 的各副本在各 rank 沿着各自的
# 批次前进时逐渐分开，每次平均时又被拉回同一个模型：形成锯齿，周期越长，锯齿越高。

# %%
first = 100
assert all(runs[0]["local SGD, period 4"]["spread"][s] == 0.0 for s in range(0, first, 4))   # right after each averaging
draw.lines({label[n]: (range(first), runs[0][n]["spread"][:first]) for n in names},
           xlabel=say("step", "步数"), ylabel=say("largest |parameter − rank 0's|", "与 rank 0 参数的最大差"),
           title=say("Parameter spread across ranks", "各 rank 参数的差异"))

# %% [markdown]
# ## (c) Change the period while it trains
#
# The same local SGD, now written out by hand so that its period can change on the fly: the next
# cell trains **in the background** (`%%ddp --background` returns at once, the dashboard stays
# live) for `SECONDS` seconds, and reads the period from a knob, `ddplab.knob("period", 2)`, that
# the slider below it sets on every rank. Drag the slider while it runs: the larger the period, the
# fewer all-reduces, and, wherever an all-reduce costs more than a step's computing, the higher the
# samples/s on the dashboard.
#
# **The ranks must agree on the period.** A knob's new value reaches each rank at a slightly
# different moment, and between averagings the ranks are not in step anyway: rank 1 may be at its
# step 230 when rank 3 is at 227. If each rank used the value it happens to read, one rank would
# call the averaging `all_reduce` at step 232 while another does not until step 240: the
# collectives no longer pair up, and the group hangs, or pairs the wrong tensors. So the knob is
# read at one moment only, a **sync point** (right after an averaging, which every rank reaches at
# the same step), and by rank 0 only: `dist.broadcast` hands rank 0's reading to everyone, in a
# tiny tensor that also carries rank 0's decision whether time is up. Every rank then uses the
# agreed period until the next sync point.

# %% [markdown] lang=zh
# ## (c) 在训练过程中改变周期
#
# 还是同样的本地 SGD，这次把它手写出来，好让周期可以随时改变：下一个单元格在**后台**训练
# （`%%ddp --background` 立即返回，仪表盘继续实时更新）`SECONDS` 秒，并从一个旋钮
# `ddplab.knob("period", 2)` 读取周期，这个旋钮由它下面的滑块在每个 rank 上设置。训练时拖动
# 滑块：周期越大，all-reduce 越少；只要一次 all-reduce 比一步计算更贵，仪表盘上的样本/秒也就
# 越高。
#
# **各 rank 必须对周期达成一致。** 旋钮的新值到达各 rank 的时刻略有不同，而且在两次平均之间，
# 各 rank 本来就不同步：rank 1 也许已到第 230 步，rank 3 还在第 227 步。如果每个 rank 都用自己
# 恰好读到的值，就可能一个 rank 在第 232 步调用用于平均的 `all_reduce`，另一个却要到第 240 步才
# 调用：集合通信无法再一一配对，整个组会卡住，或者把错误的张量配在一起。所以旋钮只在一个时刻读取，
# 即**同步点**（刚做完一次平均时，每个 rank 都在同一步到达这里），而且只由 rank 0 读取：
# `dist.broadcast` 把 rank 0 读到的值发给所有 rank，这个很小的张量里还带着 rank 0 对“时间是否已到”
# 的判断。此后每个 rank 都使用这个共同的周期，直到下一个同步点。

# %%
%%ddp --background
SECONDS = 6                                                # rank 0's clock decides when to stop
model = mlp(features=64, hidden=256, classes=10, seed=0)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
counter = AllReduceCounter()
period, since, step = 2, 0, 0
t0 = time.perf_counter()
for x, y in batches(steps=10**9):
    tic = time.perf_counter()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    step, since, before, used, toc = step + 1, since + 1, counter.bytes, period, time.perf_counter()
    stop = False
    if since == period:                                    # a sync point: every rank is at this same step
        with counter:
            average_parameters(model.parameters(), dist.group.WORLD)
        since = 0
        plan = torch.tensor([float(ddplab.knob("period", 2)), time.perf_counter() - t0 > SECONDS])
        dist.broadcast(plan, src=0)                        # everyone takes rank 0's reading
        period, stop = max(1, int(plan[0])), bool(plan[1])  # ... and uses it from the next step on
    ddplab.log(loss=loss, samples=len(x), step=step, period=used, seen=ddplab.knob("period", 2),
               sent=counter.bytes - before, compute=toc - tic, sync=time.perf_counter() - toc)
    if stop:
        break

# %%
w = knobs.slider("period", 1, 32, value=2, description=say("averaging period (steps)", "平均周期（步）"))
w

# %% [markdown]
# Run top to bottom without you, the notebook moves the slider itself: the next cell waits 2
# seconds, sets it to 16, and `%ddp_wait` waits for the training to end and shows how it went.

# %% [markdown] lang=zh
# 如果没有人操作、从头到尾自动运行，notebook 会自己移动滑块：下一个单元格等待 2 秒，把它设为
# 16，然后 `%ddp_wait` 等训练结束，并显示结果。

# %%
import time

time.sleep(2)
w.value = 16
%ddp_wait

# %% [markdown]
# `%ddp_history` holds every point each rank logged: its own reading of the knob (`seen`), the
# agreed `period`, and the bytes it all-reduced at that step (`sent`). Below: the MB each rank has
# all-reduced against time (the slope is the communication rate), and the group's samples/s in
# half-second bins.

# %% [markdown] lang=zh
# `%ddp_history` 保存了每个 rank 记录的每一个点：它自己读到的旋钮值（`seen`）、共同约定的周期
# （`period`），以及它在这一步 all-reduce 的字节数（`sent`）。下面画出每个 rank 到目前为止
# all-reduce 的 MB 数随时间的变化（斜率就是通信速率），以及整个组每半秒的样本/秒。

# %%
import numpy as np

h = %ddp_history
h = h.where(cell=h.array("cell").max())                   # the points of the background cell
per_rank = [h.where(rank=r) for r in range(4)]
periods, step_bytes = per_rank[0].array("period"), per_rank[0].array("sent")
assert all((r.array("period") == periods).all() for r in per_rank)  # every rank used the agreed period, every step
synced = np.flatnonzero(step_bytes > 0)                            # the steps that averaged ...
assert (np.diff(synced, prepend=-1) == periods[synced]).all()      # ... each `period` steps after the last one
by_period = {int(p): (periods == p).sum() for p in np.unique(periods)}
assert len(by_period) > 1, by_period                               # the group followed the slider
for p, n in by_period.items():
    if n >= 4 * p:                                                 # long enough to tell
        bytes_per_step = step_bytes[periods == p].mean()
        assert 0.7 < bytes_per_step * p / (4 * n_params) < 1.3, (p, bytes_per_step)
t = per_rank[0].array("time")
ms = {k: np.mean([r.array(k) for r in per_rank], axis=0) * 1000 for k in ("compute", "sync")}   # per step, mean of ranks
for p, n in by_period.items():
    steps = np.flatnonzero(periods == p)
    speed = len(steps) * 4 * 32 / (t[steps[-1]] - t[steps[0]]) if len(steps) > 1 else float("nan")
    print(say(f"period {p:2}: {n:4} steps, {step_bytes[steps].mean() / 1e3:4.0f} kB all-reduced per step, {speed:6,.0f} samples/s; "
              f"per step {ms['compute'][steps].mean():.2f} ms computing, {ms['sync'][steps].mean():.2f} ms averaging",
              f"周期 {p:2}：{n:4} 步，每步 all-reduce {step_bytes[steps].mean() / 1e3:4.0f} kB，{speed:6,.0f} 样本/秒；"
              f"每步计算 {ms['compute'][steps].mean():.2f} 毫秒，参数平均 {ms['sync'][steps].mean():.2f} 毫秒"))
first_read = [int(np.argmax(r.array("seen") != r.array("seen")[0])) + 1 for r in per_rank]   # 1: never changed
switch = int(np.argmax(periods != periods[0])) + 1
if min(first_read) > 1:
    print(say(f"the ranks first read a new value from the knob at their steps {first_read}; all switched together at step {switch}",
              f"各 rank 第一次从旋钮读到新值是在各自的第 {first_read} 步；所有 rank 在第 {switch} 步一起切换"))
if min(first_read) > 1 and len(set(first_read)) > 1:
    print(say("had each used its own reading, they would have averaged at different steps: a collective mismatch",
              "如果每个 rank 都用自己读到的值，它们就会在不同的步做平均：集合通信错配"))
elif min(first_read) > 1:
    print(say("this time every rank read it at the same step, by luck: run it again and drag the slider yourself",
              "这一次各 rank 碰巧在同一步读到新值：再运行一次，自己拖动滑块试试"))
lo, hi = min(by_period), max(by_period)
low, high = np.flatnonzero(periods == lo), np.flatnonzero(periods == hi)
per_step = {p: (ms["compute"][s].mean(), ms["sync"][s].mean()) for p, s in ((lo, low), (hi, high))}
gain = sum(per_step[lo]) / sum(per_step[hi])
if gain > 1.1:
    print(say(f"period {hi} steps were {gain:.1f}x as fast as period {lo}'s: averaging fell from {per_step[lo][1]:.2f} "
              f"to {per_step[hi][1]:.2f} ms per step, against {per_step[hi][0]:.2f} ms of computing",
              f"周期 {hi} 的每一步比周期 {lo} 快 {gain:.1f} 倍：每步花在参数平均上的时间从 {per_step[lo][1]:.2f} 毫秒降到 "
              f"{per_step[hi][1]:.2f} 毫秒，而计算耗时为 {per_step[hi][0]:.2f} 毫秒"))
elif per_step[hi][0] > 1.2 * per_step[lo][0]:
    print(say(f"averaging fell from {per_step[lo][1]:.2f} to {per_step[hi][1]:.2f} ms per step, but computing rose from "
              f"{per_step[lo][0]:.2f} to {per_step[hi][0]:.2f} ms: something else on this machine took the cores meanwhile",
              f"每步花在参数平均上的时间从 {per_step[lo][1]:.2f} 毫秒降到 {per_step[hi][1]:.2f} 毫秒，但计算耗时从 "
              f"{per_step[lo][0]:.2f} 毫秒升到 {per_step[hi][0]:.2f} 毫秒：这期间这台机器上有别的程序占用了 CPU"))
else:
    print(say(f"averaging took only {per_step[lo][1]:.2f} ms per step even at period {lo}, against {per_step[lo][0]:.2f} ms "
              f"of computing: communicating less could not save much here",
              f"即使在周期 {lo}，每步花在参数平均上的时间也只有 {per_step[lo][1]:.2f} 毫秒，而计算要 {per_step[lo][0]:.2f} 毫秒："
              f"在这里减少通信省不了多少时间"))
bins = np.arange(0, h.array("time").max(), 0.5)          # whole half-seconds only
group_speed = np.histogram(h.array("time"), bins, weights=h.array("samples"))[0] / 0.5
draw.lines(None, panels=[
    dict(series={f"rank {r}": (per_rank[r].array("time"), np.cumsum(per_rank[r].array("sent")) / 1e6) for r in range(4)},
         xlabel=say("seconds", "秒"), ylabel=say("MB all-reduced so far", "已 all-reduce 的 MB"),
         title=say("Communication follows the slider", "通信量跟随滑块变化")),
    dict(series={say("all ranks", "所有 rank"): (bins[1:], group_speed)},
         xlabel=say("seconds", "秒"), ylabel=say("samples/s", "样本/秒"), title=say("Throughput", "吞吐量"))])

# %% [markdown]
# ## (d) Asynchronous updates: a parameter server
#
# Now no collective at all, only point-to-point messages (`dist.send` and `dist.recv`, which gloo
# supports on CPU). **Rank 0 is the parameter server**: it holds the parameters, as one vector, and
# the momentum. **Ranks 1-3 are workers**: each one repeatedly
#
# 1. takes the parameters the server last sent it, together with their **version** (how many
#    updates the server had applied when it sent them);
# 2. computes a gradient on its next batch of 32;
# 3. sends the gradient and that version to the server, and waits for the reply.
#
# The server `dist.recv`s from **whichever worker sends first** (`dist.recv` without `src` returns
# the sender's rank), applies that gradient at once (SGD with momentum 0.9, lr 0.05, the same
# update `torch.optim.SGD` makes), and sends that worker the current parameters. Nobody waits for
# anybody else. But while a worker computed, the server may have applied the others' gradients:
# the worker's gradient is **stale**. Its **staleness** is the server's version when it applies the
# gradient minus the version the gradient was computed on; 0 would mean fresh, as in synchronous SGD.
#
# Rank 3 is made a slower (or busier) machine: each gradient takes it 10 ms longer. The server
# stops after 960 gradients (as many samples as each run above), whoever sent them, and answers
# every later message with version −1: "stop".

# %% [markdown] lang=zh
# ## (d) 异步更新：参数服务器
#
# 这次完全不用集合通信，只用点对点消息（`dist.send` 和 `dist.recv`，gloo 在 CPU 上支持它们）。
# **rank 0 是参数服务器**：它保存参数（一个向量）和动量。**rank 1-3 是 worker**：每个 worker
# 反复执行：
#
# 1. 取出服务器最近一次发来的参数，以及它们的**版本号**（服务器发送时已经应用了多少次更新）；
# 2. 在自己的下一批 32 个样本上计算梯度；
# 3. 把梯度和那个版本号一起发给服务器，然后等待回复。
#
# 服务器用 `dist.recv` 接收**最先发来的那个 worker** 的消息（不指定 `src` 的 `dist.recv` 会返回
# 发送者的 rank），立即应用这个梯度（动量 0.9、学习率 0.05 的 SGD，与 `torch.optim.SGD` 做的更新
# 相同），再把当前参数发回给这个 worker。谁也不等谁。但在某个 worker 计算期间，服务器可能已经
# 应用了其他 worker 的梯度：这个 worker 的梯度就**过时**了。它的**陈旧度**（staleness）等于服务器
# 应用该梯度时的版本号减去计算该梯度时所用参数的版本号；0 表示新鲜，就像同步 SGD 那样。
#
# 我们让 rank 3 成为一台较慢（或较忙）的机器：它每算一个梯度要多花 10 毫秒。服务器在收到
# 960 个梯度后停止（与上面每次训练的样本数相同），不管这些梯度来自谁；之后收到的每条消息，
# 它都以版本号 −1 回复，意思是“停止”。

# %%
%%ddp
from torch.nn.utils import parameters_to_vector, vector_to_parameters

UPDATES = STEPS * world_size                             # 960 gradients of 32 samples, as in the runs above
WORKERS = [1, 2, 3]                                      # the ranks that compute gradients

def parameter_server():
    """Rank 0: apply each gradient as soon as it arrives; reply with the current parameters."""
    model = mlp(features=64, hidden=256, classes=10, seed=0)
    weights = parameters_to_vector(model.parameters()).detach()
    velocity = torch.zeros_like(weights)                 # the momentum buffer
    message = torch.zeros(len(weights) + 1)              # a gradient + the version it was computed on
    version, stopped, applied = 0, 0, []
    for worker in WORKERS:
        dist.send(torch.cat([weights, torch.tensor([0.0])]), dst=worker)
    t0 = time.perf_counter()
    while stopped < len(WORKERS):
        worker = dist.recv(message)                      # from whichever worker sends first
        if version < UPDATES:
            staleness = version - int(message[-1])       # updates applied since its parameters were sent
            applied.append((time.perf_counter() - t0, worker, staleness))
            velocity.mul_(0.9).add_(message[:-1])        # SGD with momentum, as torch.optim.SGD does it
            weights.sub_(0.05 * velocity)
            version += 1
            reply = torch.cat([weights, torch.tensor([float(version)])])
        else:
            reply, stopped = torch.cat([weights, torch.tensor([-1.0])]), stopped + 1   # -1: stop
        dist.send(reply, dst=worker)
    vector_to_parameters(weights, model.parameters())
    return dict(applied=applied, accuracy=accuracy(model))

def worker(slow_rank=3):
    model = mlp(features=64, hidden=256, classes=10, seed=0)
    reply = torch.zeros(sum(p.numel() for p in model.parameters()) + 1)
    dist.recv(reply, src=0)
    t0, losses = time.perf_counter(), []
    for x, y in batches(steps=UPDATES, replicas=len(WORKERS), index=WORKERS.index(rank)):
        if reply[-1] < 0:                                # the server says stop
            break
        vector_to_parameters(reply[:-1].clone(), model.parameters())   # parameters of version reply[-1]
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if rank == slow_rank:
            time.sleep(0.010)                            # a slower (or busier) machine: 10 ms more per gradient
        gradient = parameters_to_vector(p.grad for p in model.parameters())
        dist.send(torch.cat([gradient, reply[-1:]]), dst=0)
        dist.recv(reply, src=0)                          # meanwhile others' gradients may have been applied
        losses.append((time.perf_counter() - t0, loss.item()))
        ddplab.log(loss=loss, samples=len(x))
    return dict(losses=losses)

dist.barrier()
asynchronous = parameter_server() if rank == 0 else worker() if rank in WORKERS else dict(losses=[])

# %% [markdown]
# Left, the loss of every run against the seconds spent training: the synchronous runs as above
# (mean of the 4 ranks, smoothed over 10 steps), the asynchronous one from the workers' losses in
# the order they were computed (smoothed over 30). Right, the staleness of each gradient the server
# applied, by worker, against the same clock (smoothed over 10 gradients of that worker).

# %% [markdown] lang=zh
# 左图：每次训练的损失随训练所花秒数的变化。同步的几次训练和上面一样（4 个 rank 的平均，按 10 步
# 平滑）；异步训练取各 worker 按计算先后排列的损失（按 30 个点平滑）。右图：服务器所应用的每个
# 梯度的陈旧度，按 worker 分开，横轴是同一个时钟（按该 worker 的 10 个梯度平滑）。

# %%
asynchronous = %ddp_gather asynchronous
applied = asynchronous[0]["applied"]                     # (seconds, worker, staleness) per gradient applied
workers = sorted({who for _, who, _ in applied})
worker_losses = sorted(point for r in workers for point in asynchronous[r]["losses"])
name_async = say("asynchronous (parameter server)", "异步（参数服务器）")
curves = {label[n]: (runs[0][n]["clock"], smooth(mean_loss[n])) for n in names}
curves[name_async] = ([t for t, _ in worker_losses], smooth([l for _, l in worker_losses], 30))
stale = {w: [(t, s) for t, who, s in applied if who == w] for w in workers}
draw.lines(None, panels=[
    dict(series=curves, xlabel=say("seconds spent training", "训练所花的秒数"), ylabel=say("training loss", "训练损失"),
         title=say("Loss against wall time", "损失 vs 墙钟时间")),
    dict(series={f"rank {w}": ([t for t, _ in stale[w]], smooth([s for _, s in stale[w]])) for w in workers},
         xlabel=say("seconds", "秒"), ylabel=say("staleness (updates)", "陈旧度（更新次数）"),
         title=say("How stale each applied gradient was", "每个被应用的梯度有多陈旧"))])

# %% [markdown]
# Check what the run shows: gradients were applied stale; the slow worker's were the stalest and it
# sent fewer of them; and asynchronous training learns too.

# %% [markdown] lang=zh
# 检验这次训练显示的结果：梯度在应用时已经过时；慢 worker 的梯度最陈旧，它发送的梯度也更少；
# 而异步训练同样能学到东西。

# %%
import statistics

mean_stale = {w: statistics.mean(s for _, s in stale[w]) for w in (1, 2, 3)}
count = {w: len(stale[w]) for w in (1, 2, 3)}
losses_async = [l for _, l in worker_losses]
early["async"], late["async"] = statistics.mean(losses_async[:60]), statistics.mean(losses_async[-60:])
seconds = {n: runs[0][n]["clock"][-1] for n in names}
seconds["async"] = applied[-1][0]
assert len(applied) == 960 and max(s for _, _, s in applied) > 0            # stale gradients were applied
assert mean_stale[3] > max(mean_stale[1], mean_stale[2]) and count[3] < min(count[1], count[2])
assert late["async"] < 0.6 * early["async"], (early["async"], late["async"])   # it learns (less surely: stale steps)
for w in (1, 2, 3):
    print(say(f"rank {w}{' (slow)' if w == 3 else ''}: {count[w]} of the 960 gradients, staleness "
              f"{mean_stale[w]:.1f} on average, at most {max(s for _, s in stale[w])}",
              f"rank {w}{'（慢）' if w == 3 else ''}：960 个梯度中的 {count[w]} 个，陈旧度平均 {mean_stale[w]:.1f}，"
              f"最大 {max(s for _, s in stale[w])}"))
for n in names + ["async"]:
    shown = name_async if n == "async" else label[n]
    accuracy_n = asynchronous[0]["accuracy"] if n == "async" else runs[0][n]["accuracy"]
    print(say(f"{shown}: {seconds[n]:.1f} s training, loss {early[n]:.2f} -> {late[n]:.2f}, test accuracy {accuracy_n:.1%}",
              f"{shown}：训练 {seconds[n]:.1f} 秒，损失 {early[n]:.2f} -> {late[n]:.2f}，测试准确率 {accuracy_n:.1%}"))
if late["async"] > late["DDP"]:
    print(say(f"On the same 30,720 samples the asynchronous run ended at a higher loss than DDP: each stale "
              f"update of 32 samples did less than one of DDP's fresh updates of 128.",
              f"在同样的 30,720 个样本上，异步训练最终的损失高于 DDP：每次基于 32 个样本的陈旧更新，"
              f"效果不如 DDP 一次基于 128 个样本的新鲜更新。"))
else:
    print(say(f"On the same 30,720 samples the asynchronous run did as well as DDP: its 960 small updates, "
              f"stale as they were, made up for DDP's 240 large fresh ones.",
              f"在同样的 30,720 个样本上，异步训练与 DDP 一样好：它的 960 次小更新尽管陈旧，"
              f"抵得上 DDP 的 240 次大的新鲜更新。"))
if seconds["async"] < seconds["DDP"]:
    print(say("It also finished sooner than DDP: no all-reduce, and nobody waited for the slow rank 3, "
              "although only 3 of the 4 ranks computed gradients.",
              "它也比 DDP 更早完成：没有 all-reduce，也没有人等慢的 rank 3，尽管 4 个 rank 中只有 3 个在算梯度。"))
else:
    print(say("It took longer than DDP: every gradient passed through the one server, one at a time, and "
              "only 3 of the 4 ranks computed gradients.",
              "它比 DDP 用时更长：每个梯度都要逐个经过唯一的服务器，而且 4 个 rank 中只有 3 个在算梯度。"))

# %% [markdown]
# **What you see.** No worker waited for another: the slow rank 3 simply sent fewer gradients, and
# the fast workers did the rest of the 960. The price is staleness. While one worker computes, the
# others' gradients land on the server, so a worker's gradient is about as stale as the number of
# gradients the others send during one of its round trips: with *W* equally fast workers about
# *W* − 1, and much more for a slow worker, whose round trip spans many of the others' updates.
# More workers, or slower ones, mean staler gradients. A stale gradient points downhill from where
# the parameters *were*, not where they are, so it helps less than a fresh one; with momentum,
# staleness also acts like extra momentum, and a learning rate that is fine synchronously can
# become too large. And the server is a single point every gradient passes through: with many
# workers it becomes the bottleneck, which is why real systems shard it.
#
# **A common claim:** "asynchronous updates let each device update the parameters as soon as it has
# finished computing, without waiting for the others". **What actually happens:** the first half is
# true, as the counts above show: the slow worker held nobody back. But "updating the parameters"
# means applying a gradient computed on parameters that are several updates old (the staleness
# printed above, largest for the slow worker), so not waiting is paid for in the quality of each
# update; compare the losses printed above on the same number of samples.

# %% [markdown] lang=zh
# **你看到了什么。** 没有哪个 worker 等过别人：慢的 rank 3 只是发送的梯度更少，960 个梯度中的其余
# 部分由快的 worker 完成。代价是陈旧度。在一个 worker 计算的同时，其他 worker 的梯度陆续到达
# 服务器，所以一个 worker 的梯度的陈旧度，大约等于它完成一次往返期间其他 worker 发来的梯度数：
# 如果有 *W* 个同样快的 worker，约为 *W* − 1；慢 worker 则要大得多，因为它的一次往返跨越了其他
# worker 的许多次更新。worker 越多、越慢，梯度就越陈旧。陈旧的梯度指向的是参数*过去*所在位置的
# 下坡方向，而不是参数现在的位置，所以它的帮助不如新鲜的梯度；有动量时，陈旧度的作用还像额外的
# 动量，一个在同步训练中合适的学习率在这里可能就太大了。此外，服务器是每个梯度都必须经过的单点：
# worker 多了它就会成为瓶颈，所以实际系统会把它分片。
#
# **一种常见说法：**“异步更新让每台设备算完就立即更新参数，无需等待其他设备。”**实际情况是：**
# 前半句没错，上面的计数说明了这一点：慢 worker 没有拖累任何人。但“更新参数”意味着应用一个在
# 几次更新之前的参数上算出的梯度（陈旧度见上面打印的数字，慢 worker 最大），所以不等待的代价
# 体现在每次更新的质量上；请比较上面打印的、在相同样本数下的损失。
# %% [markdown]
# **What to take away.**
#
# - **Per step**, synchronising more often helps: period 16's loss falls slowest, DDP's and
#   period 4's are close (the numbers above). Each DDP step follows the gradient of the whole
#   global batch of 128, while local SGD's ranks each follow a noisier gradient of their own 32
#   samples, and averaging copies that have drifted apart is not quite the same as averaging
#   gradients. After the final averaging, the test accuracies are close.
# - **Per byte communicated**, local SGD wins by far: its curves reach a low loss after a fraction
#   of DDP's megabytes. Where an all-reduce costs more than the computing, as on many machines over
#   a slow network, that also means more samples per second; the slider run measured how much it
#   meant on this machine.
# - Changing how ranks communicate while they run needs **agreement**: read the setting at a point
#   every rank reaches at the same step, take one rank's value, and broadcast it.
# - **Asynchronous** training never waits, but it pays in staleness, which grows with the number and
#   slowness of the workers, and its server is a bottleneck. That is why PyTorch ships DDP and model
#   averaging (synchronous whenever they communicate) ready-made, and leaves parameter servers to be
#   built from `send`/`recv` or `torch.distributed.rpc`.
# - Common practice is *post-local SGD*: DDP for the first steps, while the loss falls fast and the
#   copies would drift most, then local SGD (`PeriodicModelAverager(period, warmup_steps=...)`
#   together with DDP's `post_localSGD_hook`). The optimizer state (momentum) is not averaged: each
#   rank keeps its own.

# %% [markdown] lang=zh
# **要点。**
#
# - **按步数算**，同步越频繁越好：周期 16 的损失下降最慢，DDP 和周期 4 很接近（见上面的数字）。
#   DDP 的每一步都沿着整个全局批次（128 个样本）的梯度前进，而本地 SGD 中每个 rank 沿着自己 32 个
#   样本的、噪声更大的梯度前进；并且，把已经分开的副本取平均，与对梯度取平均并不完全相同。
#   最后一次平均之后，几种方式的测试准确率很接近。
# - **按通信字节数算**，本地 SGD 遥遥领先：它只用 DDP 一小部分的兆字节就达到了很低的损失。如果
#   一次 all-reduce 比计算还贵（通过慢速网络相连的多台机器常常如此），这同时意味着每秒处理更多
#   样本；滑块那次训练测出了它在这台机器上意味着多少。
# - 在运行中改变各 rank 的通信方式需要**达成一致**：在每个 rank 都于同一步到达的位置读取设置，
#   只取一个 rank 的值，再广播出去。
# - **异步**训练从不等待，但要付出陈旧度的代价，worker 越多、越慢，陈旧度越大；而且它的服务器是
#   瓶颈。这就是为什么 PyTorch 现成提供的是 DDP 和模型平均（它们在通信的时刻都是同步的），而参数
#   服务器要用 `send`/`recv` 或 `torch.distributed.rpc` 自己搭建。
# - 常见的做法是 *post-local SGD*：前面若干步用 DDP（此时损失下降最快，副本也最容易分开），之后
#   改用本地 SGD（`PeriodicModelAverager(period, warmup_steps=...)` 配合 DDP 的
#   `post_localSGD_hook`）。优化器状态（动量）不做平均：每个 rank 保留自己的。

# %% [markdown]
# ## Exercises
#
# 1. Try `period=64` and `period=1`. Period 1 follows DDP's loss curve up to rounding, although it
#    averages parameters rather than gradients: why? (Hint: SGD with momentum is linear in the
#    gradients.) Switch both runs to `torch.optim.Adam`: does period 1 still match DDP?
# 2. Post-local SGD: run `PeriodicModelAverager(period=16, warmup_steps=60)` and all-reduce the
#    gradients yourself (or use DDP) during the first 60 steps. Compare loss and bytes with the
#    runs above.
# 3. In (c), let each rank use its own reading: replace `int(plan[0])` by
#    `int(ddplab.knob("period", 2))`, set `SECONDS = 20` and drag the slider a few times. What
#    happens? Look at the `period` each rank logged (`%ddp_history`): do the ranks still average
#    at the same steps, and does anything tell you when they do not?
# 4. Run the parameter server with `worker(slow_rank=None)` (no slow worker), then also with
#    `WORKERS = [1, 2]` (rank 3 sits out). How does the mean staleness change with the number of
#    workers? Then give the server no momentum (`velocity.mul_(0.0)`): is the final loss better or
#    worse, and why?
#
# ## 练习
#
# 1. 试试 `period=64` 和 `period=1`。period 1 平均的是参数而不是梯度，却（在舍入误差内）与 DDP 的
#    损失曲线一致：为什么？（提示：带动量的 SGD 对梯度是线性的。）把两者都换成 `torch.optim.Adam`：
#    period 1 还和 DDP 一致吗？
# 2. Post-local SGD：用 `PeriodicModelAverager(period=16, warmup_steps=60)`，前 60 步自己 all-reduce
#    梯度（或使用 DDP）。与上面的几次训练比较损失和字节数。
# 3. 在 (c) 中让每个 rank 使用自己读到的值：把 `int(plan[0])` 换成 `int(ddplab.knob("period", 2))`，
#    设 `SECONDS = 20`，然后来回拖动几次滑块。会发生什么？看看每个 rank 记录的 `period`
#    （`%ddp_history`）：各 rank 还在同一步做平均吗？它们不一致时，有什么东西会告诉你吗？
# 4. 用 `worker(slow_rank=None)`（没有慢 worker）运行参数服务器，再加上 `WORKERS = [1, 2]`
#    （rank 3 不参加）运行一次。平均陈旧度如何随 worker 数变化？再去掉服务器的动量
#    （`velocity.mul_(0.0)`）：最终损失变好还是变差？为什么？

# %% [markdown] lang=zh
# ## 练习
#
# 1. 试试 `period=64` 和 `period=1`。period 1 平均的是参数而不是梯度，却（在舍入误差内）与 DDP 的
#    损失曲线一致：为什么？（提示：带动量的 SGD 对梯度是线性的。）把两者都换成 `torch.optim.Adam`：
#    period 1 还和 DDP 一致吗？
# 2. Post-local SGD：用 `PeriodicModelAverager(period=16, warmup_steps=60)`，前 60 步自己 all-reduce
#    梯度（或使用 DDP）。与上面的几次训练比较损失和字节数。
# 3. 在 (c) 中让每个 rank 使用自己读到的值：把 `int(plan[0])` 换成 `int(ddplab.knob("period", 2))`，
#    设 `SECONDS = 20`，然后来回拖动几次滑块。会发生什么？看看每个 rank 记录的 `period`
#    （`%ddp_history`）：各 rank 还在同一步做平均吗？它们不一致时，有什么东西会告诉你吗？
# 4. 用 `worker(slow_rank=None)`（没有慢 worker）运行参数服务器，再加上 `WORKERS = [1, 2]`
#    （rank 3 不参加）运行一次。平均陈旧度如何随 worker 数变化？再去掉服务器的动量
#    （`velocity.mul_(0.0)`）：最终损失变好还是变差？为什么？

# %%
%ddp_stop
