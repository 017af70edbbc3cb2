# %% [markdown]
# # Lesson 6 · Model parallelism: one model across ranks
#
# **In short.** Data parallelism gives every rank a whole copy of the model; when the model is too
# big for one device, you split **the model** instead. Here a network of 4 stages is cut so that
# rank *r* holds only stage *r*: activations travel forward from rank to rank with `send`/`recv`,
# and gradients travel back the same way. One batch at a time, only one rank works while three
# wait; cutting the batch into **micro-batches** (a GPipe pipeline) lets the ranks overlap and
# shrinks the idle "bubble". The gradients equal those of the whole model on one process (up to
# float rounding); at the end the pipeline is timed against plain data parallelism (DDP), and the
# same step is run by PyTorch's own pipeline API, `torch.distributed.pipelining`.
#
# **You will learn**
# - how activations go forward and gradients come back between stages with `send`/`recv`, without deadlock
# - why one batch at a time leaves 3 of 4 ranks idle, and how micro-batches shrink the bubble
# - how to compute a perfect pipeline's bubble from the number of stages and micro-batches
# - what a pipeline rank holds and sends compared with a DDP rank, and when to use which
# - how `torch.distributed.pipelining` runs the same GPipe schedule for you
#
# **Study time:** about 50 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **Memory:** about 1.5 GiB at its peak: it fits Binder's 2 GiB, but not a 1 GiB session (a classroom
# hub). There, set `RANKS = 2` in the cell that starts the pool: each rank then holds two of the 4
# stages, of a model half as wide (`HIDDEN` 512; about 0.75 GiB; the text still speaks of 4 ranks,
# the outputs say what ran).
#
# **You will see:** the pipeline's timeline with 1, 4 and 8 micro-batches (the bubble shrinking),
# its gradients checked against the whole model, a pipeline-vs-DDP comparison of time per batch
# and parameters held per rank, and `torch.distributed.pipelining` giving the same gradients.

# %% [markdown] lang=zh
# # 第 6 课 · 模型并行：把一个模型分到多个 rank 上
#
# **简而言之**：数据并行让每个 rank 都持有一份完整的模型；当模型大到一台设备放不下时，就改为切分**模型**本身。这一课把一个由 4 段（stage）组成的网络切开，让 rank *r* 只持有第 *r* 段：激活值通过 `send`/`recv` 从一个 rank 向前传到下一个 rank，梯度再沿原路传回。一次只送一个批次时，只有一个 rank 在工作，其余三个都在等待；把批次切成若干微批次（micro-batch，即 GPipe 流水线）之后，各 rank 的工作可以重叠，空闲的“气泡”（bubble）随之变小。流水线算出的梯度与整个模型在单个进程上算出的梯度相同（在浮点舍入误差之内）；最后把流水线与普通的数据并行（DDP）比较每个批次的用时，并用 PyTorch 自带的流水线 API `torch.distributed.pipelining` 跑同样的一步。
#
# **你将学到**
# - 激活值怎样用 `send`/`recv` 在各段之间向前传、梯度怎样传回来，而且不会死锁
# - 为什么一次只送一个批次会让 4 个 rank 中的 3 个空闲，微批次又怎样缩小气泡
# - 怎样根据段数和微批次数算出理想流水线的气泡
# - 流水线的 rank 与 DDP 的 rank 各持有、各发送什么，什么时候该用哪一种
# - `torch.distributed.pipelining` 怎样替你运行同样的 GPipe 调度
#
# **学习时间**：约 50 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **内存**：峰值约 1.5 GiB：Binder 的 2 GiB 装得下，1 GiB 的会话（课堂用的 hub）装不下。在那里，把启动进程池的单元格中的 `RANKS = 4` 改成 `RANKS = 2`：每个 rank 就持有 4 段中的两段，模型也窄一半（`HIDDEN` 为 512；约 0.75 GiB；正文仍然按 4 个 rank 来讲，输出会说明实际运行的是多少个）。
#
# **你将看到**：使用 1、4、8 个微批次时流水线的时间线（气泡逐渐变小），流水线的梯度与整个模型的梯度对照检查，流水线与 DDP 在每个批次用时和每个 rank 持有参数量上的对比，以及 `torch.distributed.pipelining` 得到相同的梯度。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
RANKS = 4          # the pool's size: 2 in a 1 GiB session (see the top)
%ddp_start {RANKS}

# %% [markdown]
# ## The model, in 4 stages
#
# Four blocks of the same size, so every stage has the same amount of work: three
# `Linear(1024, 1024) + ReLU` blocks, and a last one that also holds the small output layer (10
# classes). The function is defined here in the notebook and pushed to every rank, so the notebook
# can build the very same model later to check the ranks' work.

# %% [markdown] lang=zh
# ## 分成 4 段的模型
#
# 四个同样大小的块，因此每一段的计算量相同：三个 `Linear(1024, 1024) + ReLU` 块，以及最后一个还包含小输出层（10 个类别）的块。这个函数在 notebook 中定义，再推送到每个 rank 上，这样 notebook 之后可以构建一模一样的模型，用来检查各 rank 的计算结果。

# %%
import torch
import torch.nn as nn
from ddplab.workloads import synthetic_classification

HIDDEN, CLASSES, BATCH = 1024 if RANKS == 4 else 512, 10, 1024   # a smaller model with 2 ranks (a 1 GiB session)

def build_model(seed=0):
    torch.manual_seed(seed)   # the same seed everywhere: every copy starts with the same weights
    return nn.Sequential(
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),                      # stage 0
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),                      # stage 1
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),                      # stage 2
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)))  # stage 3

print(say("parameters per stage:", "每段的参数量："), [sum(p.numel() for p in stage.parameters()) for stage in build_model()])

# %%
%ddp_push build_model HIDDEN CLASSES BATCH

# %% [markdown]
# Every rank builds the whole model (cheap here) and keeps only its own stage, `rank`. On a real
# model too big for one device, each rank would build only its own part. The data is the same on
# every rank; only rank 0 reads the inputs and only rank 3 the labels.

# %% [markdown] lang=zh
# 每个 rank 都构建整个模型（这里代价很小），只保留属于自己的那一段，即第 `rank` 段。对于一台设备放不下的真实模型，每个 rank 只会构建自己的那一部分。数据在每个 rank 上都一样；只有 rank 0 读取输入，只有 rank 3 读取标签。

# %%
%%ddp
from ddplab.workloads import synthetic_classification
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

blocks = slice(rank * 4 // world_size, (rank + 1) * 4 // world_size)   # 4 ranks: block r (2 ranks: two blocks each)
stage = build_model()[blocks]        # rank r keeps stage r; the other blocks are dropped
first, last = rank == 0, rank == world_size - 1
loss_fn = nn.CrossEntropyLoss()
data = synthetic_classification(n=2048, features=HIDDEN, classes=CLASSES)
x, y = data.tensors[0][:BATCH], data.tensors[1][:BATCH]     # one batch of 1024
n = sum(p.numel() for p in stage.parameters())
mine = list(range(4))[blocks]                   # the stages this rank holds: [rank] with 4 ranks
print(say(f"rank {rank} holds stage{'s' * (len(mine) > 1)} {' and '.join(map(str, mine))}: {n} parameters",
          f"rank {rank} 持有第 {'、'.join(map(str, mine))} 段：{n} 个参数"))

# %% [markdown]
# ## One batch through the pipe
#
# **Forward:** rank 0 runs stage 0 and sends its output (the *activations*) to rank 1; rank 1 waits
# for them (`recv`), runs stage 1, sends on; rank 3 runs stage 3 and computes the loss.
#
# **Backward:** rank 3 calls `loss.backward()`; that fills the gradients of its parameters *and* of
# its input, because the received tensor was marked `requires_grad_()`. It sends that input
# gradient back to rank 2, which calls `out.backward(grad)`: autograd continues from where rank 3
# stopped. And so on down to rank 0.
#
# Sends are `isend`: they start in the background and never block, so a rank only ever waits in
# `recv`, for a message its neighbour sends without waiting for anything in return. The waits form
# a chain (forward from rank 0, backward from rank 3), never a cycle, so nothing can deadlock. The
# sends are waited for (`.wait()`) at the end of the step, before their tensors are reused.

# %% [markdown] lang=zh
# ## 一个批次穿过流水线
#
# **前向：** rank 0 运行第 0 段，把输出（*激活值*）发送给 rank 1；rank 1 等待接收（`recv`），运行第 1 段，再发给下一个；rank 3 运行第 3 段并计算损失。
#
# **反向：** rank 3 调用 `loss.backward()`；这会填好它的参数的梯度，*以及*它的输入的梯度，因为收到的张量被标记了 `requires_grad_()`。它把这个输入梯度发回给 rank 2，rank 2 调用 `out.backward(grad)`：autograd 从 rank 3 停下的地方接着算下去。依此类推，一直到 rank 0。
#
# 发送用的是 `isend`：它在后台开始、从不阻塞，所以一个 rank 只会在 `recv` 里等待，等的是邻居发来的消息，而邻居发送时不需要等待任何回应。这些等待构成一条链（前向从 rank 0 开始，反向从 rank 3 开始），从不成环，所以不会死锁。在这一步结束、这些张量被再次使用之前，要等待所有发送完成（`.wait()`）。

# %%
%%ddp
stage.zero_grad()
sends = []                                              # background sends, waited for at the end

# forward: receive activations from the left, compute, send them to the right
if first:
    inp = x
else:
    inp = torch.empty(BATCH, HIDDEN)
    dist.recv(inp, src=rank - 1)
    inp.requires_grad_()                                # so backward gives us d loss / d input
out = stage(inp)
if last:
    loss = loss_fn(out, y)
else:
    sends.append(dist.isend(out.detach(), dst=rank + 1))

# backward: receive the gradient of our output from the right, continue, send d input to the left
if last:
    loss.backward()
else:
    grad_out = torch.empty_like(out)
    dist.recv(grad_out, src=rank + 1)
    out.backward(grad_out)
if not first:
    sends.append(dist.isend(inp.grad, dst=rank - 1))
for s in sends:
    s.wait()

grads = [p.grad.clone() for p in stage.parameters()]
print(say("loss", "损失"), round(loss.item(), 4) if last else say(f"(only rank {world_size - 1} knows the loss)", f"（只有 rank {world_size - 1} 知道损失）"),
      "·", say("sent nothing forward", "没有向前发送") if last else say(f"sent activations {tuple(out.shape)}", f"发送了激活值 {tuple(out.shape)}"),
      "·", say("sent nothing back", "没有向后发送") if first else say(f"sent input gradient {tuple(inp.grad.shape)}",
                                                                 f"发送了输入梯度 {tuple(inp.grad.shape)}"))

# %% [markdown]
# Did the four ranks compute what one process would? The notebook builds the same model, runs the
# whole batch through it in one piece, and compares every stage's gradients with the rank that
# holds the stage.

# %% [markdown] lang=zh
# 四个 rank 算出的结果和单个进程算出的一样吗？notebook 构建同一个模型，让整个批次一次性穿过它，再把每一段的梯度与持有该段的 rank 算出的梯度逐一比较。

# %%
data = synthetic_classification(n=2048, features=HIDDEN, classes=CLASSES)
x, y = data.tensors[0][:BATCH], data.tensors[1][:BATCH]
whole = build_model()
nn.CrossEntropyLoss()(whole(x), y).backward()
reference = [p.grad for p in whole.parameters()]   # stage 0's first, the last stage's last

def same_grads(per_rank):
    grads = [g for rank_grads in per_rank for g in rank_grads]   # rank 0's, rank 1's, ...: the model's order
    return len(grads) == len(reference) and all(torch.allclose(g, ref, rtol=1e-4, atol=1e-6)
                                                for g, ref in zip(grads, reference))

grads = %ddp_gather grads
assert same_grads(grads)
print(say("every stage's gradients equal those of the whole model run in one process",
          "每一段的梯度都与整个模型在单个进程中算出的梯度相同"))

# %% [markdown]
# ## Micro-batches: a pipeline
#
# With one batch, rank 1 can do nothing until rank 0 is done, and rank 0 nothing until the gradient
# has come all the way back: at any time 3 of the 4 ranks are idle. **GPipe** cuts the batch into
# *m* micro-batches: rank 0 sends micro-batch 0 on and starts on micro-batch 1 while rank 1 works on
# micro-batch 0. All forwards first, then all backwards (last micro-batch first). The gradients of
# the micro-batches add up in `.grad`; dividing each micro-batch's loss by *m* makes the sum the
# mean over the whole batch, so the result is the same as before.
#
# `pipeline_step` records every forward and backward in a `Timeline` (only the computing: time
# spent waiting in `recv` is left out, so a gap in the picture is a rank sitting idle).

# %% [markdown] lang=zh
# ## 微批次：流水线
#
# 只有一个批次时，rank 1 在 rank 0 算完之前什么也做不了，而 rank 0 在梯度一路传回来之前也什么都做不了：任何时刻 4 个 rank 中都有 3 个空闲。**GPipe** 把批次切成 *m* 个微批次：rank 0 把微批次 0 发出去之后就开始算微批次 1，与此同时 rank 1 在处理微批次 0。先做完所有前向，再做所有反向（从最后一个微批次开始）。各个微批次的梯度在 `.grad` 中累加；把每个微批次的损失除以 *m*，累加的结果就是整个批次上的平均，因此结果与之前相同。
#
# `pipeline_step` 把每一次前向和反向都记录在一个 `Timeline` 中（只记录计算：在 `recv` 中等待的时间不计入，所以图中的空隙就是某个 rank 闲着的时候）。

# %% [markdown]
# **Predict, then run.** With 8 micro-batches, on this machine, how many of the 4 ranks compute at
# the same time, on average over the step? That is the length of all the ranks' compute bars added
# up, divided by the length of the step: 1 means one rank at a time, 4 means no rank ever idle.

# %% [markdown] lang=zh
# **先预测，再运行。** 用 8 个微批次时，在这台机器上，4 个 rank 中平均同时有几个在计算（对整个一步取平均）？也就是把所有 rank 的计算条形的长度加起来，再除以这一步的长度：1 表示每次只有一个 rank 在算，4 表示没有任何 rank 闲着。

# %%
predict("6.at_once", ...)    # ranks computing at once on average, 8 micro-batches (at most one per rank)

# %%
%%ddp
import contextlib
from ddplab.lessons.ranks import Timeline

def pipeline_step(x, y, micro, timeline=None):
    """One training step of the GPipe schedule; returns the loss on the last rank (None elsewhere)."""
    record = timeline or (lambda kind, label: contextlib.nullcontext())
    xs, ys = x.chunk(micro), y.chunk(micro)
    inputs, outputs, sends = [], [], []
    for i in range(micro):                              # all forwards
        if first:
            inp = xs[i]
        else:
            inp = torch.empty(len(xs[i]), HIDDEN)
            dist.recv(inp, src=rank - 1)
            inp.requires_grad_()
        with record("forward", str(i)):
            out = stage(inp)
        if last:
            out = loss_fn(out, ys[i]) / micro               # mean over the batch = sum of these
        else:
            sends.append(dist.isend(out.detach(), dst=rank + 1))
        inputs.append(inp)
        outputs.append(out)
    for i in reversed(range(micro)):                    # all backwards, last micro-batch first
        grad_out = None
        if not last:
            grad_out = torch.empty_like(outputs[i])
            dist.recv(grad_out, src=rank + 1)
        with record("backward", str(i)):
            outputs[i].backward(grad_out)
        if not first:
            sends.append(dist.isend(inputs[i].grad, dst=rank - 1))
    for s in sends:
        s.wait()
    return sum(o.item() for o in outputs) if last else None

events = {}
for micro in (1, 4, 8):
    pipeline_step(x, y, micro)                          # a warm-up run, not recorded
    stage.zero_grad()
    timeline = Timeline()                               # time zero agreed by all ranks
    pipeline_step(x, y, micro, timeline)
    events[micro] = timeline.events
grads = [p.grad.clone() for p in stage.parameters()]    # from the 8 micro-batch run

# %% [markdown]
# The same gradients with 8 micro-batches as with the whole batch:

# %% [markdown] lang=zh
# 用 8 个微批次得到的梯度与整个批次一次算出的相同：

# %%
grads = %ddp_gather grads
assert same_grads(grads)
print(say("8 micro-batches give the same gradients as the whole batch in one piece",
          "8 个微批次得到的梯度与整个批次一次算出的梯度相同"))

# %% [markdown]
# Now the timelines. With **1 micro-batch** the work moves down the ranks and back like a relay
# baton: one rank at a time. The title counts how many ranks compute at once, on average over the
# step (the bars' total length divided by the step's length): at most 1 here.

# %% [markdown] lang=zh
# 现在来看时间线。只有 **1 个微批次**时，工作像接力棒一样沿着各 rank 传下去再传回来：每次只有一个 rank 在工作。标题给出这一步中平均有几个 rank 同时在计算（所有条形的总长度除以这一步的时长）：这里最多为 1。

# %%
events = %ddp_gather events

def step_seconds(micro):
    bars = [e for rank_events in events for e in rank_events[micro]]
    return max(e[1] for e in bars) - min(e[0] for e in bars)

def at_once(micro):
    """How many ranks compute at the same time, on average: total bar length / step length."""
    bars = [e for rank_events in events for e in rank_events[micro]]
    return sum(e[1] - e[0] for e in bars) / step_seconds(micro)

def show(micro):
    ms, n = 1000 * step_seconds(micro), at_once(micro)
    named = {"forward": say("forward", "前向"), "backward": say("backward", "反向")}
    bars = [[(start, end, named[kind], label) for start, end, kind, label in e[micro]] for e in events]
    return draw.timeline(bars, kinds=list(named.values()), xlabel=say("seconds", "秒"),
                         title=say(f"{micro} micro-batch{'es' if micro > 1 else ''}: step {ms:.0f} ms, "
                                   f"{n:.1f} ranks computing at once on average",
                                   f"{micro} 个微批次：一步 {ms:.0f} 毫秒，平均同时有 {n:.1f} 个 rank 在计算"))

show(1)

# %% [markdown]
# With **4** and then **8** micro-batches, rank 1 starts on micro-batch 0 while rank 0 computes
# micro-batch 1, and the backwards overlap too. What stays idle, at the start and the end of the
# step, is the *bubble*. With *p* equal stages and *m* micro-batches, a perfect pipeline has
# *p*·*m* / (*m* + *p* − 1) ranks computing at once, on average (the cell after the pictures works it
# out for this run's *p* = 4 and *m*). That holds when every rank has a processor of its own. If
# this machine lets the ranks use fewer cores than there are ranks (that cell prints both), ranks
# take turns: bars that overlap share a core and stretch, and the picture shows the schedule more
# than the speed.

# %% [markdown] lang=zh
# 用 **4** 个、再用 **8** 个微批次时，rank 0 计算微批次 1 的同时，rank 1 已经开始处理微批次 0，反向计算也同样相互重叠。在一步的开头和结尾仍然空闲的部分，就是*气泡*。对于 *p* 个相同的段和 *m* 个微批次，理想的流水线平均同时有 *p*·*m* / (*m* + *p* − 1) 个 rank 在计算（画完图之后的单元格会按这次运行的 *p* = 4 和 *m* 算出来）。这要求每个 rank 都有一个属于自己的处理器。如果这台机器让各 rank 使用的核心比 rank 还少（那个单元格会把两者都打印出来），各 rank 就要轮流使用 CPU：相互重叠的条形在共用一个核心，因而被拉长，这张图展示的更多是调度方式，而不是速度。

# %%
show(4)

# %%
show(8)

# %%
# what the pictures show: with 1 micro-batch no two ranks ever compute at the same time
one = sorted((start, end) for rank_events in events for start, end, _, _ in rank_events[1])
assert all(later[0] >= earlier[1] - 1e-3 for earlier, later in zip(one, one[1:])), one
import os
from ddplab.shared.system import usable_cores

n_stages = len(events)                                    # one stage per rank
perfect = {m: n_stages * m / (m + n_stages - 1) for m in (1, 4, 8)}
usable = usable_cores()             # the affinity mask (os.sched_getaffinity), capped by a container's CPU quota
# with 8, rank 1 already works on micro-batch 0 before rank 0 has finished its forwards: sure where each rank
# has a core; with fewer cores the ranks take turns, and a busy machine may run all of rank 0's forwards first
overlapped = events[1][8][0][0] < events[0][8][7][1]
assert overlapped or usable < n_stages, (events[0][8], events[1][8])
if not overlapped:
    print(say("this time rank 0 ran all 8 forwards before rank 1 got a core: the ranks took turns on too few cores",
              "这一次 rank 0 跑完了全部 8 个前向计算，rank 1 才分到核心：核心太少，各 rank 只能轮流计算"))
reveal("6.at_once", at_once(8), unit=say("ranks", "个 rank"))
print(say(f"ranks computing at once, on average: {at_once(1):.1f} with 1 micro-batch, {at_once(4):.1f} with 4, "
          f"{at_once(8):.1f} with 8; a perfect pipeline of {n_stages} stages: "
          + ", ".join(f"{v:.1f}" for v in perfect.values()),
          f"平均同时在计算的 rank 数：1 个微批次时 {at_once(1):.1f}，4 个时 {at_once(4):.1f}，8 个时 {at_once(8):.1f}；"
          f"{n_stages} 段的理想流水线：" + "、".join(f"{v:.1f}" for v in perfect.values())))
if usable >= n_stages:
    print(say(f"the ranks may use {usable} cores here (the machine has {os.cpu_count()}): each of the {n_stages} ranks can "
              "run on a core of its own, so bars that overlap really ran at the same time",
              f"这里各 rank 可以使用 {usable} 个核心（这台机器共有 {os.cpu_count()} 个）：{n_stages} 个 rank 都能各自独占一个核心，"
              "所以相互重叠的条形确实是在同时运行"))
else:
    print(say(f"the ranks may use {usable} core{'s' if usable > 1 else ''} here (the machine has {os.cpu_count()}), "
              f"fewer than the {n_stages} ranks: at most {usable} of them truly compute at once; the others share cores, so "
              "bars that overlap stretch",
              f"这里各 rank 只能使用 {usable} 个核心（这台机器共有 {os.cpu_count()} 个），少于 {n_stages} 个 rank：真正同时"
              f"计算的最多只有 {usable} 个；更多的 rank 只能共用核心，相互重叠的条形因此被拉长"))

# %% [markdown]
# ## Training with the pipeline
#
# Training is `pipeline_step` plus an optimizer per rank: each rank updates **only its own stage**,
# with its own gradients (no all-reduce: nobody else holds these parameters). Only rank 3 knows the
# loss, so the dashboard's loss chart has a single line; all ranks log their samples.

# %% [markdown] lang=zh
# ## 用流水线训练
#
# 训练就是 `pipeline_step` 再加上每个 rank 各自的优化器：每个 rank **只更新自己的那一段**，用的是自己的梯度（不需要 all-reduce：没有别的 rank 持有这些参数）。只有 rank 3 知道损失，所以仪表盘的损失图中只有一条线；所有 rank 都会记录各自处理的样本数。

# %%
%%ddp
opt = torch.optim.Adam(stage.parameters(), lr=1e-3)
X, Y = data.tensors                                     # 2048 samples: 8 batches of 256
losses = []
for epoch in range(3):
    for b in range(0, len(X), 256):
        opt.zero_grad()
        loss = pipeline_step(X[b:b + 256], Y[b:b + 256], micro=4)
        opt.step()                                      # each rank: its own stage only
        ddplab.log(loss=loss, samples=256)              # loss is None except on rank 3
        losses.append(loss)
if last:
    print(say(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps",
              f"损失 {losses[0]:.3f} -> {losses[-1]:.3f}，共 {len(losses)} 步"))

# %%
losses = %ddp_gather losses
last_rank = len(losses) - 1
losses = losses[last_rank]                              # the last rank's list: the others logged None
assert losses[-1] < 0.5 * losses[0], losses
print(say(f"the pipeline trains: rank {last_rank}'s loss fell from {losses[0]:.2f} to {losses[-1]:.2f}",
          f"流水线确实在训练：rank {last_rank} 的损失从 {losses[0]:.2f} 降到了 {losses[-1]:.2f}"))

# %% [markdown]
# ## Pipeline or data parallelism?
#
# The same model and the same batch of 1024, timed four ways: the pipeline with 1, 4 and 8
# micro-batches, and DDP (every rank the whole model and a quarter of the batch, gradients
# all-reduced). `median_seconds` times a step on all ranks together and returns the slowest rank's
# median. Each rank also counts the parameters it holds, in the pipeline and in DDP.

# %% [markdown] lang=zh
# ## 流水线还是数据并行？
#
# 同一个模型、同一个 1024 的批次，用四种方式计时：分别使用 1、4、8 个微批次的流水线，以及 DDP（每个 rank 持有整个模型、处理四分之一的批次，梯度做 all-reduce）。`median_seconds` 让所有 rank 一起为一步计时，返回最慢的那个 rank 的中位数。每个 rank 还会统计自己在流水线和 DDP 中各持有多少参数。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import median_seconds, param_spread

seconds = {f"pipeline m={m}": median_seconds(lambda: pipeline_step(x, y, m), repeat=5) for m in (1, 4, 8)}

replica = DDP(build_model())                             # the whole model on every rank
mine = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)

def ddp_step():
    replica.zero_grad()
    loss_fn(replica(x[mine]), y[mine]).backward()        # DDP averages the gradients here

seconds["DDP"] = median_seconds(ddp_step, repeat=5)
held = {"pipeline": sum(p.numel() for p in stage.parameters()),
        "DDP": sum(p.numel() for p in replica.parameters())}
replica_spread = param_spread(replica)                   # 0.0: the DDP copies are the same model
del replica                                              # not needed again: its memory goes back

# %%
seconds = %ddp_gather seconds
held = %ddp_gather held
replica_spread = %ddp_gather replica_spread
seconds = {k: seconds[0][k] for k in ("pipeline m=1", "pipeline m=4", "pipeline m=8", "DDP")}  # same on every rank
stages = [h["pipeline"] for h in held]                   # rank r: the parameters of stage r
whole = held[0]["DDP"]
per_rank = {say("pipeline (largest stage)", "流水线（最大的一段）"): max(stages), "DDP": whole}
assert all(h["DDP"] == whole for h in held) and set(replica_spread) == {0.0}   # DDP: the same whole model everywhere
assert sum(stages) == whole                                                    # the stages make the whole model
assert max(stages) < 1.1 * whole / len(stages)                                 # each pipeline rank: about 1/N of it
fastest = min(seconds, key=seconds.get)
times = ", ".join(f"{k}: {1000 * v:.0f} ms" for k, v in seconds.items())
times_zh = "，".join(f"{k.replace('pipeline', '流水线')}：{1000 * v:.0f} 毫秒" for k, v in seconds.items())
print(say(f"{times} per batch of {BATCH}; fastest here: {fastest}",
          f"每个 {BATCH} 的批次：{times_zh}；这里最快的是 {fastest.replace('pipeline', '流水线')}"))
print(say(f"parameters held by each rank: DDP {whole:,} on every rank (the whole model, identical on all {len(held)}: "
          f"spread {max(replica_spread)}); pipeline {stages} on ranks 0-{len(held) - 1} (one stage each, {sum(stages):,} "
          f"together): {whole / max(stages):.1f}x as many with DDP",
          f"每个 rank 持有的参数：DDP 每个 rank 都是 {whole:,}（整个模型，{len(held)} 个 rank 上完全相同：相差 "
          f"{max(replica_spread)}）；流水线的 rank 0-{len(held) - 1} 分别是 {stages}（各持有一段，合起来是 {sum(stages):,}）："
          f"DDP 是它的 {whole / max(stages):.1f} 倍"))
draw.bars(None, panels=[
    dict(values={say(k, k.replace("pipeline", "流水线")): 1000 * v for k, v in seconds.items()},
         ylabel=say("ms per batch", "每个批次的毫秒数"),
         title=say(f"Time per batch of {BATCH}", f"每个批次（{BATCH}）的时间")),
    dict(values={k: v / 1e6 for k, v in per_rank.items()}, ylabel=say("million parameters", "百万参数"),
         title=say("Parameters held by one rank", "每个 rank 持有的参数"))], fmt="{:.3g}")

# %% [markdown]
# Which one is faster depends on the machine, the model and the batch, and on a machine with fewer
# cores than ranks (or shared with other programs) times move by tens of percent from run to run:
# read the printed numbers, not a rule.
# What does not move is the structure:
#
# - A **DDP** rank computes all the time on its quarter of the batch; its only communication is
#   one all-reduce of the gradients, as large as the model (4.2 M parameters = 17 MB here). But
#   every rank holds the **whole** model, its gradients and its optimizer state.
# - A **pipeline** rank holds a **quarter** of the model. It sends activations forward and their
#   gradients back across each of the 3 boundaries: 1024 × 1024 floats = 4 MB each way per
#   boundary per batch, growing with the batch, not the model. It sits idle in the bubble.
#
# So:
#
# - **The model fits on one device, you want to get through more data:** data parallelism (DDP).
# - **The model is too big for one device:** model parallelism. Pipelining (this lesson) splits it
#   by layers; *tensor parallelism* splits each layer's matrices across ranks; sharding (FSDP,
#   ZeRO) stays data-parallel but stores only a slice of the parameters on each rank and gathers
#   them when needed.
# - Large models combine them: pipeline stages, each stage data-parallel over several ranks.

# %% [markdown] lang=zh
# 哪一种更快，取决于机器、模型和批次；在核心数少于 rank 数（或与其他程序共享）的机器上，各次运行的时间会相差几十个百分点：请看打印出来的数字，而不要把它当成规律。不会变的是两者的结构：
#
# - **DDP** 的每个 rank 一直在自己那四分之一的批次上计算；它唯一的通信是对梯度做一次 all-reduce，数据量与模型一样大（这里是 420 万个参数 = 17 MB）。但每个 rank 都持有**整个**模型、它的梯度和它的优化器状态。
# - **流水线**的每个 rank 只持有模型的**四分之一**。它要在 3 个分界处，把激活值向前传、把激活值的梯度向后传：每个分界每个批次每个方向 1024 × 1024 个浮点数 = 4 MB，这个量随批大小增长，而不是随模型大小增长。它还会在气泡中闲着。
#
# 所以：
#
# - **模型放得进一台设备，你想处理更多数据：** 用数据并行（DDP）。
# - **模型大到一台设备放不下：** 用模型并行。流水线并行（本课）按层切分模型；*张量并行*把每一层的矩阵切分到多个 rank 上；分片（FSDP、ZeRO）仍然是数据并行，但每个 rank 只保存参数的一部分，需要时再收集起来。
# - 大模型会把它们组合起来：分成若干流水线段，每一段再在多个 rank 上做数据并行。

# %% [markdown]
# **A common claim / what actually happens.** A common claim: DDP is a form of model parallelism,
# or does data parallelism and model parallelism at once. What actually happens: DDP is data
# parallelism only. It **replicates** the whole model on every rank and splits the *data*;
# model parallelism splits the *model* itself. The counts printed above show it: with DDP every rank
# holds all of the model's parameters, identical on the 4 ranks (spread 0.0), while in the pipeline
# each rank holds a different stage, and only the 4 stages together make the model. DDP itself never
# splits a model: every rank must hold a whole replica. (You may wrap in DDP a model you have already
# split over several devices of one process; DDP then replicates that whole model on every rank.
# `find_unused_parameters=True`, which appears in such claims, only tells DDP that some parameters
# may get no gradient in a step; it splits nothing.) To split a model, use pipelining as here,
# tensor parallelism, or sharding (FSDP).

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：DDP 也是一种模型并行，或者说它同时实现了数据并行和模型并行。实际情况是：DDP 只是数据并行。它在每个 rank 上**复制**整个模型，切分的是*数据*；模型并行切分的是*模型*本身。上面打印出的数字说明了这一点：使用 DDP 时，每个 rank 都持有模型的全部参数，而且 4 个 rank 上完全相同（相差 0.0）；而在流水线中，每个 rank 持有的是不同的一段，只有 4 段合在一起才是整个模型。DDP 本身从不切分模型：每个 rank 都必须持有一份完整的副本。（你可以把一个已经由你自己切分到同一进程的多台设备上的模型交给 DDP 包装；DDP 随后会在每个 rank 上复制这整个模型。这类说法中常出现的 `find_unused_parameters=True` 只是告诉 DDP 某些参数在某一步里可能得不到梯度；它什么也不切分。）要切分模型，请使用本课这样的流水线并行、张量并行，或者分片（FSDP）。

# %% [markdown]
# ## Beyond the hand-made pipeline: torch.distributed.pipelining
#
# Writing the sends, receives and schedule by hand shows how a pipeline works; for real work,
# PyTorch ships it as `torch.distributed.pipelining`:
#
# - `PipelineStage(module, stage_index, num_stages, device)` wraps one rank's part of the model
#   and does the `send`/`recv` of activations and gradients for it;
# - a **schedule** runs the micro-batches: `ScheduleGPipe` (all forwards, then all backwards, as
#   here), `Schedule1F1B` (one forward, one backward: fewer activations kept at once), and
#   interleaved and zero-bubble schedules that shrink the bubble further;
# - `pipeline(model, mb_args, split_spec={...: SplitPoint.BEGINNING})` traces a whole model and
#   cuts it into stages for you, instead of building each stage by hand (`pipe.build_stage(rank,
#   device)` then gives each rank its stage).
#
# Here each rank wraps a fresh copy of its stage in a `PipelineStage` and runs one step of
# `ScheduleGPipe` with 8 micro-batches. Rank 0 passes the whole batch (the schedule cuts it), rank 3
# the labels; the schedule computes the loss with `loss_fn` and divides the gradients by the number
# of micro-batches, as `pipeline_step` did.

# %% [markdown] lang=zh
# ## 超越手写流水线：torch.distributed.pipelining
#
# 手写发送、接收和调度，能让你看清流水线是怎样工作的；在实际工作中，PyTorch 以 `torch.distributed.pipelining` 的形式提供了这一切：
#
# - `PipelineStage(module, stage_index, num_stages, device)` 包装一个 rank 持有的那部分模型，并替它完成激活值和梯度的 `send`/`recv`；
# - 由一个**调度器**（schedule）来运行各个微批次：`ScheduleGPipe`（先做完所有前向，再做所有反向，和本课一样）、`Schedule1F1B`（一次前向、一次反向交替进行：同时保存的激活值更少），以及进一步缩小气泡的交错（interleaved）调度和零气泡（zero-bubble）调度；
# - `pipeline(model, mb_args, split_spec={...: SplitPoint.BEGINNING})` 会追踪整个模型并替你把它切成若干段，不必手工构建每一段（然后用 `pipe.build_stage(rank, device)` 给每个 rank 分配它的那一段）。
#
# 这里每个 rank 把自己那一段的一个全新副本包装进 `PipelineStage`，再用 8 个微批次运行一步 `ScheduleGPipe`。rank 0 传入整个批次（由调度器切分），rank 3 传入标签；调度器用 `loss_fn` 计算损失，并把梯度除以微批次的个数，和 `pipeline_step` 的做法一样。

# %%
%%ddp
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

fresh = build_model()[blocks]                            # untrained, like the notebook's reference model
piped = PipelineStage(fresh, stage_index=rank, num_stages=world_size, device=torch.device("cpu"))
schedule = ScheduleGPipe(piped, n_microbatches=8, loss_fn=loss_fn)
micro_losses = []
if first:
    schedule.step(x)                                     # the inputs go in on the first stage
elif last:
    schedule.step(target=y, losses=micro_losses)         # the labels on the last; one loss per micro-batch
else:
    schedule.step()                                      # the middle stages only pass things on
grads = [p.grad.clone() for p in fresh.parameters()]
if last:
    mean = sum(l.item() for l in micro_losses) / len(micro_losses)
    print(say(f"loss (mean of {len(micro_losses)} micro-batches): {mean:.4f}",
              f"损失（{len(micro_losses)} 个微批次的平均）：{mean:.4f}"))

# %%
grads = %ddp_gather grads
assert same_grads(grads)
print(say("torch.distributed.pipelining with ScheduleGPipe gives the same gradients as the whole model "
          "in one process, and as our hand-made pipeline",
          "使用 ScheduleGPipe 的 torch.distributed.pipelining 得到的梯度，与整个模型在单个进程中算出的梯度、"
          "以及我们手写的流水线算出的梯度都相同"))

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one number: write it in place of `...` in the cell below it and run the
# cell; `check` says whether it is right for this run, and why (it never shows the answer).
#
# **6.1** With *p* equal stages and *m* micro-batches, what fraction of a perfect GPipe step is the
# bubble, the time an average rank sits idle? Answer for this lesson's 4 stages and **16**
# micro-batches, as a fraction (like 0.25). (To see it, you can rerun the timelines with
# `for micro in (1, 16, 32)`.)

# %% [markdown] lang=zh
# ## 练习
#
# 每道练习要求写出一个数：把它填在下面单元格里 `...` 的位置，然后运行这个单元格；`check` 会告诉你对这次运行来说它对不对、为什么（它从不显示答案）。
#
# **6.1** 对于 *p* 个相同的段和 *m* 个微批次，理想的 GPipe 一步中，气泡（平均每个 rank 空闲的时间）占多大比例？请按本课的 4 段、**16** 个微批次回答，写成小数（例如 0.25）。（想亲眼看看，可以用 `for micro in (1, 16, 32)` 重新画时间线。）

# %%
answer = ...    # the bubble's share of a perfect step, 4 stages, 16 micro-batches
check("6.1", answer, stages=4, micro=16)

# %% [markdown]
# **6.2** In one training step of the pipeline with **8** micro-batches and this lesson's batch of
# 1024 samples of 1024 float32 features, how many bytes cross the 3 boundaries between stages in
# all: activations forward and their gradients back? Answer a number of bytes. (Think about how the
# number and the size of the messages change with *m*.)

# %% [markdown] lang=zh
# **6.2** 使用 **8** 个微批次时，在流水线的一个训练步中（本课的批次是 1024 个样本，每个样本 1024 个 float32 特征），穿过各段之间 3 个分界处的字节数一共是多少：包括向前传的激活值和向后传的梯度？请回答一个字节数。（想一想消息的个数和大小怎样随 *m* 变化。）

# %%
answer = ...    # bytes sent across all stage boundaries, both directions, in one step with 8 micro-batches
check("6.2", answer, batch=BATCH, hidden=HIDDEN, stages=n_stages, micro=8)

# %% [markdown]
# **6.3** GPipe keeps the activations of all *m* micro-batches until their backwards. The **1F1B**
# schedule (`Schedule1F1B`) lets rank *r* run only *p* − *r* forwards before it alternates one
# backward and one forward. With 4 stages and 8 micro-batches, at most how many micro-batches'
# activations does **rank 0** hold at once under 1F1B? Answer a whole number.

# %% [markdown] lang=zh
# **6.3** GPipe 要保存全部 *m* 个微批次的激活值，直到它们的反向计算完成。**1F1B** 调度（`Schedule1F1B`）让 rank *r* 先只做 *p* − *r* 次前向，之后交替做一次反向、一次前向。4 段、8 个微批次时，在 1F1B 下 **rank 0** 最多同时保存多少个微批次的激活值？请回答一个整数。

# %%
answer = ...    # micro-batches whose activations rank 0 holds at most at once, 1F1B, 4 stages, 8 micro-batches
check("6.3", answer, stages=4, micro=8, rank=0)

# %% [markdown]
# **6.4** The timeline with 1 micro-batch gave this run's step time, in its title. On a machine
# where every rank has a processor of its own, and if a stage's time is proportional to the samples
# it computes, how many milliseconds would a perfect 8-micro-batch step take? Answer in ms; the
# check passes it your run's measured times, and tells you how far the real 8-micro-batch step was.

# %% [markdown] lang=zh
# **6.4** 只有 1 个微批次的时间线在标题中给出了这次运行一步的用时。如果每个 rank 都有一个属于自己的处理器，并且每一段的用时与它计算的样本数成正比，那么理想情况下使用 8 个微批次的一步要多少毫秒？请以毫秒为单位回答；单元格会把你这次运行测得的时间传给检查，并告诉你实际的 8 个微批次的一步与它相差多少。

# %%
answer = ...    # ms of a perfect 8-micro-batch step, from the 1-micro-batch step's time
check("6.4", answer, t1_ms=1000 * step_seconds(1), t8_ms=1000 * step_seconds(8), stages=n_stages, micro=8,
      usable=usable)

# %%
%ddp_stop
