# %% [markdown]
# # Lesson 8 · Synchronous vs local SGD
#
# **In short.** DDP is fully synchronous: every step, every rank all-reduces all of its gradients,
# so the ranks take the same step and never drift apart. **Local SGD** (periodic model averaging)
# talks less: each rank trains its own copy on its own data, and only every *period* steps the
# ranks average their parameters. Here the same model and data are trained both ways: DDP, and
# local SGD with torch's `PeriodicModelAverager` every 4 and every 16 steps; then local SGD whose
# period you change with a slider while it trains. You compare loss against steps and against bytes
# communicated, and watch the copies drift apart and snap back. (Lesson 9 goes further: asynchronous
# updates through a parameter server.)
#
# **You will learn**
# - why DDP's ranks hold identical parameters after every step, and how local SGD's copies drift apart between averagings
# - what `PeriodicModelAverager(period)` all-reduces, when, and how many bytes that saves against DDP
# - how the loss per step and the loss per byte communicated change as the period grows
# - why ranks must agree on a setting that decides which collectives they call, and how: read it at a sync point, broadcast one rank's value
#
# **Study time:** about 45 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** loss against steps and against MB communicated for DDP and local SGD; the
# parameter spread across ranks over time (a saw-tooth for local SGD, flat zero for DDP); bytes and
# throughput following a slider.

# %% [markdown] lang=zh
# # 第 8 课 · 同步 SGD 与本地 SGD
#
# **简而言之**：DDP 是完全同步的：每一步，每个进程（rank）都要 all-reduce 自己的全部梯度，所以各 rank 走出完全相同的一步，参数从不分叉。**本地 SGD**（周期性模型平均）通信更少：每个 rank 用自己的数据训练自己的模型副本，只在每隔 *period* 步时把各 rank 的参数平均一次。这一课用同样的模型和数据把两种方式都训练一遍：DDP，以及用 torch 的 `PeriodicModelAverager` 每 4 步、每 16 步平均一次的本地 SGD；然后是训练进行中用滑块改变周期的本地 SGD。你将比较损失随步数和随通信字节数的变化，并观察各副本如何在两次平均之间分开、又在平均时合拢。（第 9 课更进一步：通过参数服务器做异步更新。）
#
# **你将学到**
# - 为什么 DDP 的各 rank 在每一步之后都持有完全相同的参数，而本地 SGD 的各副本在两次平均之间会逐渐分开
# - `PeriodicModelAverager(period)` all-reduce 什么、在什么时候，以及与 DDP 相比能省下多少字节
# - 周期变长时，按步数算的损失和按通信字节数算的损失各自如何变化
# - 为什么一个决定各 rank 调用哪些集合通信的设置必须由各 rank 一致使用，以及怎样做到：在同步点读取，广播一个 rank 的值
#
# **学习时间**：约 45 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：DDP 与本地 SGD 的损失随步数和随通信 MB 数的变化；各 rank 参数差异随时间的变化（本地 SGD 呈锯齿状，DDP 始终为零）；通信字节数和吞吐量如何跟随滑块变化。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, knobs, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## Data and model
#
# The setting of lesson 7: `synthetic_classification` with 64 features and 10 classes, 10,000
# training samples split across the ranks by `DistributedSampler`, 2,000 held out for testing, and
# `mlp(64, 256, 10)` (two hidden layers of 256: 85 k parameters). Batches of 32 per rank, 240 steps:
# 4 × 240 × 32 = 30,720 samples per run. `batches()` hands out the same sequence of batches in every
# run, so the runs differ only in how they synchronise.

# %% [markdown] lang=zh
# ## 数据与模型
#
# 沿用第 7 课的设置：`synthetic_classification` 生成 64 个特征、10 个类别的数据，其中 10,000 个训练样本由 `DistributedSampler` 分给各 rank，另外 2,000 个留作测试；模型是 `mlp(64, 256, 10)`（两个 256 宽的隐藏层，8.5 万个参数）。每个 rank 每批 32 个样本，训练 240 步：每次训练共 4 × 240 × 32 = 30,720 个样本。`batches()` 在每次训练中给出同样的批次序列，所以这几次训练之间唯一的区别就是同步方式。

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

def batches(steps=STEPS):
    """`steps` batches of 32 for this rank: its share of each epoch, reshuffled every epoch."""
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
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
# 和之前每一课一样。`CommCounter`（一个 DDP 通信钩子）累计 DDP 所 all-reduce 的梯度桶的字节数。每一步之后测量 `param_spread`（任一 rank 的参数与 rank 0 参数之间的最大差值）；它本身也是一次集合通信，所以字节数和计时都不把它算在内：`clock` 只累计训练所花的秒数。

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
# torch's `PeriodicModelAverager(period)` counts these calls from 0 and, on its calls 0, period,
# 2·period, ..., averages the parameters: it flattens them into one buffer, divides it by the number
# of ranks and all-reduces it (a sum), so every rank ends with the mean. A last `average_parameters`
# call from `model_averaging.utils` after the loop makes the ranks agree on one final model.
#
# The averager calls `dist.all_reduce` from Python, so `AllReduceCounter` from `ddplab.lessons.ranks`
# counts the bytes of every all-reduce made inside its `with` block.

# %% [markdown] lang=zh
# ## (b) 本地 SGD：每隔 *period* 步平均一次参数
#
# 这里没有 DDP：每个 rank 有一个普通模型和自己的优化器，在自己的批次上计算梯度，并且**独自**更新。每一步之后调用 `averager.average_parameters(model.parameters())`；torch 的 `PeriodicModelAverager(period)` 从 0 开始对这些调用计数，在第 0、period、2·period……次调用时平均参数：把参数展平成一个缓冲区，除以 rank 数，再 all-reduce（求和），于是每个 rank 都得到平均值。循环结束后，再用 `model_averaging.utils` 中的 `average_parameters` 做最后一次平均，让各 rank 得到同一个最终模型。
#
# 平均器是在 Python 中调用 `dist.all_reduce` 的，所以 `ddplab.lessons.ranks` 中的 `AllReduceCounter` 能统计其 `with` 块内每次 all-reduce 的字节数。

# %% [markdown]
# **Predict, then run.** Per step, does local SGD learn as well as DDP? Take the training loss over
# the last 20 of the 240 steps (the mean of the 4 ranks). Predict the loss of local SGD with period
# 16 as a multiple of DDP's loss: 1 means just as good, 2 means twice DDP's loss.

# %% [markdown] lang=zh
# **先预测，再运行。** 按步数算，本地 SGD 学得和 DDP 一样好吗？取 240 步中最后 20 步的训练损失（4 个 rank 的平均）。预测周期为 16 的本地 SGD 的这个损失是 DDP 的多少倍：1 表示一样好，2 表示是 DDP 损失的两倍。

# %%
predict("8.loss_p16", ...)    # period 16's loss over the last 20 steps, as a multiple of DDP's (1 = as good)

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
# 每个 rank 的损失是在它自己那批 32 个样本上算出的（在本地 SGD 中，还是用它自己的模型副本算出的）；曲线是 4 个 rank 的平均值，并按 10 步做了平滑。左图横轴是已走的步数；右图横轴是每个 rank 到目前为止 all-reduce 的兆字节数。

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
# final averaging makes them identical; it sends about 1/*period* of DDP's bytes; and every run
# learns.

# %% [markdown] lang=zh
# 检验上面的说法：DDP 在每一步都让各 rank 完全一致；本地 SGD 让它们分开，但最后一次平均使它们重新一致；它发送的字节数约为 DDP 的 1/*period*；而且每次训练都学到了东西。

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
    share = say(f" (1/{sent['DDP'] / sent[n]:.1f} of DDP's)", f"（约为 DDP 的 1/{sent['DDP'] / sent[n]:.1f}）") if n != "DDP" else ""
    print(say(f"{n}: {sent[n] / 1e6:.2f} MB{share}, loss {early[n]:.2f} -> {late[n]:.2f} "
              f"(first and last 20 steps), test accuracy {runs[0][n]['accuracy']:.1%}",
              f"{label[n]}：{sent[n] / 1e6:.2f} MB{share}，损失 {early[n]:.2f} -> {late[n]:.2f}"
              f"（前 20 步与后 20 步），测试准确率 {runs[0][n]['accuracy']:.1%}"))
print(say("DDP: the largest spread across ranks at any step was 0.0", "DDP：任何一步各 rank 之间的最大差异都是 0.0"))
reveal("8.loss_p16", float(late["local SGD, period 16"] / late["DDP"]), unit=say("× DDP's loss", "× DDP 的损失"))

# %% [markdown]
# ## How far apart do the copies drift?
#
# `param_spread` after every step, for the first 100 steps. DDP stays at exactly 0. Local SGD's
# copies move apart while each rank follows its own batches, and are pulled back to one model at
# each averaging: a saw-tooth, with taller teeth when the period is longer.

# %% [markdown] lang=zh
# ## 各副本会分开多远？
#
# 前 100 步中每一步之后的 `param_spread`。DDP 始终恰好为 0。本地 SGD 的各副本在各 rank 沿着各自的批次前进时逐渐分开，每次平均时又被拉回同一个模型：形成锯齿，周期越长，锯齿越高。

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
# 还是同样的本地 SGD，这次把它手写出来，好让周期可以随时改变：下一个单元格在**后台**训练（`%%ddp --background` 立即返回，仪表盘继续实时更新）`SECONDS` 秒，并从一个旋钮 `ddplab.knob("period", 2)` 读取周期，这个旋钮由它下面的滑块在每个 rank 上设置。训练时拖动滑块：周期越大，all-reduce 越少；只要一次 all-reduce 比一步计算更费时，仪表盘上的样本/秒也就越高。
#
# **各 rank 必须对周期达成一致。** 旋钮的新值到达各 rank 的时刻略有不同，而且在两次平均之间，各 rank 本来就不同步：rank 1 也许已到第 230 步，rank 3 还在第 227 步。如果每个 rank 都用自己恰好读到的值，就可能一个 rank 在第 232 步调用用于平均的 `all_reduce`，另一个却要到第 240 步才调用：集合通信无法再一一配对，整个组会卡住，或者把错误的张量配在一起。所以旋钮只在一个时刻读取，即**同步点**（刚做完一次平均时，每个 rank 都在同一步到达这里），而且只由 rank 0 读取：`dist.broadcast` 把 rank 0 读到的值发给所有 rank，这个很小的张量里还带着 rank 0 对“时间是否已到”的判断。此后每个 rank 都使用这个共同的周期，直到下一个同步点。

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
# 如果没有人操作、从头到尾自动运行，notebook 会自己移动滑块：下一个单元格等待 2 秒，把它设为 16，然后 `%ddp_wait` 等训练结束，并显示结果。

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
# `%ddp_history` 保存了每个 rank 记录的每一个点：它自己读到的旋钮值（`seen`）、共同约定的周期（`period`），以及它在这一步 all-reduce 的字节数（`sent`）。下面画出每个 rank 到目前为止 all-reduce 的 MB 数随时间的变化（斜率就是通信速率），以及整个组每半秒的样本/秒。

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
              "如果每个 rank 都用自己读到的值，它们就会在不同的步做平均：集合通信不匹配"))
elif min(first_read) > 1:
    print(say("this time every rank read it at the same step, by luck: run it again and drag the slider yourself",
              "这一次各 rank 碰巧在同一步读到新值：再运行一次，自己拖动滑块试试"))
lo, hi = min(by_period), max(by_period)
low, high = np.flatnonzero(periods == lo), np.flatnonzero(periods == hi)
per_step = {p: (ms["compute"][s].mean(), ms["sync"][s].mean()) for p, s in ((lo, low), (hi, high))}
gain = sum(per_step[lo]) / sum(per_step[hi])
if gain > 1.1:
    print(say(f"a step at period {lo} took {gain:.1f} times as long as a step at period {hi}: averaging fell from "
              f"{per_step[lo][1]:.2f} to {per_step[hi][1]:.2f} ms per step, against {per_step[hi][0]:.2f} ms of computing",
              f"周期 {lo} 的一步耗时是周期 {hi} 的 {gain:.1f} 倍：每步花在参数平均上的时间从 {per_step[lo][1]:.2f} 毫秒降到 "
              f"{per_step[hi][1]:.2f} 毫秒，而计算耗时为 {per_step[hi][0]:.2f} 毫秒"))
elif per_step[hi][0] > 1.2 * per_step[lo][0]:
    print(say(f"averaging fell from {per_step[lo][1]:.2f} to {per_step[hi][1]:.2f} ms per step, but computing rose from "
              f"{per_step[lo][0]:.2f} to {per_step[hi][0]:.2f} ms: something else on this machine took CPU time meanwhile",
              f"每步花在参数平均上的时间从 {per_step[lo][1]:.2f} 毫秒降到 {per_step[hi][1]:.2f} 毫秒，但计算耗时从 "
              f"{per_step[lo][0]:.2f} 毫秒升到 {per_step[hi][0]:.2f} 毫秒：这期间这台机器上有别的程序占用了 CPU 时间"))
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
# **A common claim:** "local SGD trains as well as DDP, only with less communication". **What
# actually happens:** the first part holds only loosely. Per byte, local SGD is far ahead (the right
# panel above), but per step it learns less: between averagings each rank follows the noisier
# gradient of its own 32 samples instead of the global batch's 128, and averaging copies that have
# drifted apart is not the same as averaging their gradients (the losses printed above: period 16
# ends above DDP). Whether the saved bytes buy wall time depends on what an all-reduce costs against a
# step's computing, which the slider run measured on this machine.

# %% [markdown] lang=zh
# **一种常见说法：**“本地 SGD 训练得和 DDP 一样好，只是通信更少。”**实际情况是：**前半句只是大致成立。按字节算，本地 SGD 遥遥领先（上面的右图）；但按步数算，它学到的更少：在两次平均之间，每个 rank 沿着自己 32 个样本的、噪声更大的梯度前进，而不是全局批次 128 个样本的梯度，而且把已经分开的副本取平均，与对它们的梯度取平均并不相同（见上面打印的损失：周期 16 最终高于 DDP）。省下的字节能不能换来墙钟时间，取决于一次 all-reduce 与一步计算相比有多费时，而滑块那次训练已经在这台机器上测出了这一点。

# %% [markdown]
# **What to take away.**
#
# - **Per step**, synchronising more often helps: period 16's loss falls slowest, DDP's and
#   period 4's are close (the numbers above). After the final averaging, the test accuracies are
#   close.
# - **Per byte communicated**, local SGD wins by far: its curves reach a low loss after a fraction
#   of DDP's megabytes. Where an all-reduce costs more than the computing, as on many machines over
#   a slow network, that also means more samples per second.
# - Changing how ranks communicate while they run needs **agreement**: read the setting at a point
#   every rank reaches at the same step, take one rank's value, and broadcast it.
# - Common practice is *post-local SGD*: DDP for the first steps, while the loss falls fast and the
#   copies would drift most, then local SGD (`PeriodicModelAverager(period, warmup_steps=...)`
#   together with DDP's `post_localSGD_hook`). The optimizer state (momentum) is not averaged: each
#   rank keeps its own.

# %% [markdown] lang=zh
# **要点。**
#
# - **按步数算**，同步越频繁越好：周期 16 的损失下降最慢，DDP 和周期 4 很接近（见上面的数字）。最后一次平均之后，几种方式的测试准确率很接近。
# - **按通信字节数算**，本地 SGD 遥遥领先：它只用 DDP 一小部分的兆字节就达到了很低的损失。如果一次 all-reduce 比计算还费时（通过慢速网络相连的多台机器常常如此），这同时意味着每秒处理更多样本。
# - 在运行中改变各 rank 的通信方式需要**达成一致**：在每个 rank 都于同一步到达的位置读取设置，只取一个 rank 的值，再广播出去。
# - 常见的做法是 *post-local SGD*：前面若干步用 DDP（此时损失下降最快，副本也最容易分开），之后改用本地 SGD（`PeriodicModelAverager(period, warmup_steps=...)` 配合 DDP 的 `post_localSGD_hook`）。优化器状态（动量）不做平均：每个 rank 保留自己的。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why.
#
# **8.1** How many times did the run with period 16 all-reduce the parameters in its 240 steps, the
# final averaging included? Work it out from the MB it all-reduced (printed above) and the size of
# the parameters (printed at the top), then say why it is that number. Answer with a whole number.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。
#
# **8.1** 周期 16 的那次训练在 240 步中（包括最后一次平均）一共 all-reduce 了几次参数？用它 all-reduce 的 MB 数（上面打印的）和参数的大小（开头打印的）算出来，再想想为什么是这个数。请写一个整数。

# %%
answer = ...    # how many times period 16 all-reduced the parameters, the final averaging included
check("8.1", answer, sent=sent["local SGD, period 16"], param_bytes=4 * n_params, steps=240, period=16)

# %% [markdown]
# **8.2** With SGD and momentum, local SGD with `period=1` follows DDP's loss curve up to rounding,
# although it averages parameters rather than gradients (torch warns that period 1 needs no
# averager: try it in a cell of your own). Switch both to `torch.optim.Adam`: does period 1 still
# match DDP? Answer with a letter:
#
# - (a) yes: averaging the parameters after every step is the same as averaging the gradients
#   before it, whatever the optimizer
# - (b) no: Adam divides each step by the square root of its own running mean of squared gradients,
#   which is not linear in the gradients, so the mean of the ranks' Adam steps is not the Adam step
#   of their mean gradient
# - (c) yes, because period 1 averages the optimizer state too

# %% [markdown] lang=zh
# **8.2** 使用带动量的 SGD 时，`period=1` 的本地 SGD 平均的是参数而不是梯度，却（在舍入误差内）与 DDP 的损失曲线一致（torch 会警告说周期为 1 时不需要平均器：可以在你自己的单元格里试试）。把两者都换成 `torch.optim.Adam`：周期 1 还和 DDP 一致吗？请写一个字母：
#
# - (a) 一致：每一步之后平均参数，与在这一步之前平均梯度是一回事，不管用什么优化器
# - (b) 不一致：Adam 每一步都要除以它自己的梯度平方滑动平均的平方根，这对梯度不是线性的，所以各 rank 的 Adam 步的平均，不等于用平均梯度走的 Adam 步
# - (c) 一致，因为周期 1 也会平均优化器状态

# %%
answer = ...    # a letter: "a", "b" or "c"
check("8.2", answer)

# %% [markdown]
# **8.3** In the slider run (c), how many kB would each rank all-reduce per step, on average, at
# period 32? Use the number of parameters. Answer with a number of kB.

# %% [markdown] lang=zh
# **8.3** 在滑块那次训练 (c) 中，如果周期是 32，每个 rank 平均每步会 all-reduce 多少 kB？用参数的个数来算。请写一个 kB 数。

# %%
answer = ...    # kB per step and rank, on average, at period 32
check("8.3", answer, param_bytes=4 * n_params)

# %% [markdown]
# **8.4** Post-local SGD: a run of 240 steps that uses DDP for its first 60 steps, then averages
# the parameters every 16 steps during the other 180 (12 averagings), and once more at the end. How
# many MB does each rank all-reduce? Take DDP's bytes per step from the DDP run above. Answer with a
# number of MB.

# %% [markdown] lang=zh
# **8.4** Post-local SGD：一次 240 步的训练，前 60 步用 DDP，在其余 180 步中每 16 步平均一次参数（共 12 次），最后再平均一次。每个 rank 一共 all-reduce 多少 MB？DDP 每步的字节数从上面 DDP 那次训练中取。请写一个 MB 数。

# %%
answer = ...    # MB each rank all-reduces in this post-local SGD run
check("8.4", answer, ddp_bytes=sent["DDP"], steps=240, param_bytes=4 * n_params)

# %%
%ddp_stop
