# %% [markdown]
# # Lesson 6 · Model parallelism: one model across ranks
#
# **In short.** Data parallelism gives every rank a whole copy of the model; when the model is too
# big for one device, you split **the model** instead. Here a network of 4 stages is cut so that
# rank *r* holds only stage *r*: activations travel forward from rank to rank with `send`/`recv`,
# and gradients travel back the same way. One batch at a time, only one rank works while three
# wait; cutting the batch into **micro-batches** (a GPipe pipeline) lets the ranks overlap and
# shrinks the idle "bubble". The gradients equal those of the whole model on one process (up to
# float rounding); at the end the pipeline is timed against plain data parallelism (DDP).
#
# **简介。** 数据并行让每个 rank 持有一份完整的模型；当模型大到一台设备放不下时，就要切分
# **模型**本身。这一课把一个 4 段（stage）的网络切开，rank *r* 只持有第 *r* 段：激活值通过
# `send`/`recv` 逐个 rank 向前传，梯度再沿原路传回。一次只送一个 batch 时，只有一个 rank 在
# 工作，其余三个在等；把 batch 切成若干 **micro-batch**（GPipe 流水线）后，各 rank 的工作可以
# 重叠，空闲的"气泡"随之变小。流水线算出的梯度与整个模型在单个进程上算出的相同（在浮点舍入
# 误差内）；最后把流水线与同一模型的数据并行（DDP）做速度对比。
#
# **You will see:** the pipeline's timeline with 1, 4 and 8 micro-batches (the bubble shrinking),
# its gradients checked against the whole model, and a pipeline-vs-DDP comparison of time per batch
# and parameters held per rank.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## The model, in 4 stages
#
# Four blocks of the same size, so every stage has the same amount of work: three
# `Linear(1024, 1024) + ReLU` blocks, and a last one that also holds the small output layer (10
# classes). The function is defined here in the notebook and pushed to every rank, so the notebook
# can build the very same model later to check the ranks' work.

# %%
import torch
import torch.nn as nn
from ddplab.workloads import synthetic_classification

HIDDEN, CLASSES, BATCH = 1024, 10, 1024

def build_model(seed=0):
    torch.manual_seed(seed)   # the same seed everywhere: every copy starts with the same weights
    return nn.Sequential(
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),                      # stage 0
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),                      # stage 1
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()),                      # stage 2
        nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)))  # stage 3

print([sum(p.numel() for p in stage.parameters()) for stage in build_model()], "parameters per stage")

# %%
%ddp_push build_model HIDDEN CLASSES BATCH

# %% [markdown]
# Every rank builds the whole model (cheap here) and keeps only its own stage, `rank`. On a real
# model too big for one device, each rank would build only its own part. The data is the same on
# every rank; only rank 0 reads the inputs and only rank 3 the labels.

# %%
%%ddp
from ddplab.workloads import synthetic_classification

stage = build_model()[rank]          # rank r keeps stage r; the other three are dropped
first, last = rank == 0, rank == world_size - 1
loss_fn = nn.CrossEntropyLoss()
data = synthetic_classification(n=2048, features=HIDDEN, classes=CLASSES)
x, y = data.tensors[0][:BATCH], data.tensors[1][:BATCH]     # one batch of 1024
print(f"rank {rank} holds stage {rank}: {sum(p.numel() for p in stage.parameters())} parameters")

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
print("loss", round(loss.item(), 4) if last else "(only rank 3 knows the loss)",
      "· sent", "nothing forward" if last else f"activations {tuple(out.shape)}",
      "· sent", "nothing back" if first else f"input gradient {tuple(inp.grad.shape)}")

# %% [markdown]
# Did the four ranks compute what one process would? The notebook builds the same model, runs the
# whole batch through it in one piece, and compares every stage's gradients with the rank that
# holds the stage.

# %%
data = synthetic_classification(n=2048, features=HIDDEN, classes=CLASSES)
x, y = data.tensors[0][:BATCH], data.tensors[1][:BATCH]
whole = build_model()
nn.CrossEntropyLoss()(whole(x), y).backward()
reference = [[p.grad for p in stage.parameters()] for stage in whole]   # per stage

def same_grads(per_rank):
    return all(torch.allclose(g, ref, rtol=1e-4, atol=1e-6)
               for r in range(4) for g, ref in zip(per_rank[r], reference[r]))

grads = %ddp_gather grads
assert same_grads(grads)
print("every stage's gradients equal those of the whole model run in one process")

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

# %%
grads = %ddp_gather grads
assert same_grads(grads)
print("8 micro-batches give the same gradients as the whole batch in one piece")

# %% [markdown]
# Now the timelines. With **1 micro-batch** the work moves down the ranks and back like a relay
# baton: one rank at a time. The title counts how many ranks compute at once, on average over the
# step (the bars' total length divided by the step's length): at most 1 here.

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
                                   f"{micro} 个 micro-batch：一步 {ms:.0f} 毫秒，平均同时有 {n:.1f} 个 rank 在计算"))

show(1)

# %% [markdown]
# With **4** and then **8** micro-batches, rank 1 starts on micro-batch 0 while rank 0 computes
# micro-batch 1, and the backwards overlap too. What stays idle, at the start and the end of the
# step, is the *bubble*. With *p* = 4 equal stages and *m* micro-batches, a perfect pipeline has
# 4*m* / (*m* + *p* − 1) ranks computing at once: 1 for *m* = 1, 2.3 for 4, 2.9 for 8. Here 4 ranks
# share 2 cores, so only 2 can truly run at once: bars that overlap share a core and stretch (with
# one device per rank they would not), and the picture shows the schedule more than the speed.

# %%
show(4)

# %%
show(8)

# %%
# what the pictures show: with 1 micro-batch no two ranks ever compute at the same time
one = sorted((start, end) for rank_events in events for start, end, _, _ in rank_events[1])
assert all(later[0] >= earlier[1] - 1e-3 for earlier, later in zip(one, one[1:])), one
# with 8, rank 1 already works on micro-batch 0 before rank 0 has finished its forwards
assert events[1][8][0][0] < events[0][8][7][1], (events[0][8], events[1][8])
print(f"ranks computing at once, on average: {at_once(1):.1f} with 1 micro-batch, {at_once(4):.1f} with 4, "
      f"{at_once(8):.1f} with 8 (a perfect pipeline: 1, 2.3, 2.9; 2 cores truly run at most 2)")

# %% [markdown]
# ## Training with the pipeline
#
# Training is `pipeline_step` plus an optimizer per rank: each rank updates **only its own stage**,
# with its own gradients (no all-reduce: nobody else holds these parameters). Only rank 3 knows the
# loss, so the dashboard's loss chart has a single line; all ranks log their samples.

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
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps")

# %%
losses = %ddp_gather losses
losses = losses[3]                                      # rank 3's list: the others logged None
assert losses[-1] < 0.5 * losses[0], losses
print(f"the pipeline trains: rank 3's loss fell from {losses[0]:.2f} to {losses[-1]:.2f}")

# %% [markdown]
# ## Pipeline or data parallelism?
#
# The same model and the same batch of 1024, timed four ways: the pipeline with 1, 4 and 8
# micro-batches, and DDP (every rank the whole model and a quarter of the batch, gradients
# all-reduced). `median_seconds` times a step on all ranks together and returns the slowest rank's
# median.

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import median_seconds

seconds = {f"pipeline m={m}": median_seconds(lambda: pipeline_step(x, y, m), repeat=5) for m in (1, 4, 8)}

replica = DDP(build_model())                             # the whole model on every rank
mine = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)

def ddp_step():
    replica.zero_grad()
    loss_fn(replica(x[mine]), y[mine]).backward()        # DDP averages the gradients here

seconds["DDP"] = median_seconds(ddp_step, repeat=5)
held = {"pipeline": sum(p.numel() for p in stage.parameters()),
        "DDP": sum(p.numel() for p in replica.parameters())}

# %%
seconds = %ddp_gather seconds
held = %ddp_gather held
seconds = {k: seconds[0][k] for k in ("pipeline m=1", "pipeline m=4", "pipeline m=8", "DDP")}  # same on every rank
per_rank = {say("pipeline (largest stage)", "流水线（最大的一段）"): max(h["pipeline"] for h in held),
            "DDP": held[0]["DDP"]}
assert sum(h["pipeline"] for h in held) == held[0]["DDP"]     # the 4 stages make the whole model
assert max(h["pipeline"] for h in held) < 0.3 * held[0]["DDP"]  # each pipeline rank: about a quarter
fastest = min(seconds, key=seconds.get)
print(", ".join(f"{k}: {1000 * v:.0f} ms" for k, v in seconds.items()), f"per batch of {BATCH}; "
      f"fastest here: {fastest}. Parameters per rank: {max(per_rank.values()) / min(per_rank.values()):.1f}x "
      "as many with DDP")
draw.bars(None, panels=[
    dict(values={say(k, k.replace("pipeline", "流水线")): 1000 * v for k, v in seconds.items()},
         ylabel=say("ms per batch", "每个 batch 的毫秒数"),
         title=say(f"Time per batch of {BATCH}", f"每个 batch（{BATCH}）的时间")),
    dict(values={k: v / 1e6 for k, v in per_rank.items()}, ylabel=say("million parameters", "百万参数"),
         title=say("Parameters held by one rank", "每个 rank 持有的参数"))], fmt="{:.3g}")

# %% [markdown]
# Which one is faster depends on the machine, the model and the batch, and times on this shared
# 2-core machine move by tens of percent from run to run: read the printed numbers, not a rule.
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

# %% [markdown]
# ## Exercises
#
# 1. Run the pipeline with 16 and 32 micro-batches (`events` for `micro in (1, 16, 32)`). Does the
#    bubble keep shrinking? What grows instead (look at the number and the size of the messages)?
# 2. Make the stages uneven: give stage 1 two `Linear(1024, 1024)` layers and the others one. Predict
#    the timeline, then draw it: which rank sets the pace of the pipeline?
# 3. Write the *1F1B* schedule: after the first *p* forwards, each rank alternates one forward and one
#    backward. Check it gives the same gradients, and count how many activations each rank has to
#    keep at most (GPipe keeps all *m*).
#
# ## 练习
#
# 1. 用 16 和 32 个 micro-batch 运行流水线（`for micro in (1, 16, 32)`）。气泡是否继续变小？
#    什么随之增加（看看消息的数量和大小）？
# 2. 让各段不均衡：第 1 段用两个 `Linear(1024, 1024)`，其余各段一个。先预测时间线，再画出来：
#    哪个 rank 决定了流水线的节奏？
# 3. 实现 *1F1B* 调度：前 *p* 次前向之后，每个 rank 交替做一次前向、一次反向。检查梯度是否相同，
#    并统计每个 rank 最多需要保存多少个激活值（GPipe 要保存全部 *m* 个）。

# %%
%ddp_stop
