# %% [markdown]
# # Lesson 14 · Scaling: 1, 2 and 4 ranks
#
# **In short.** You train the same model with DDP on 1, 2 and then 4 ranks, measure how many samples
# per second the whole group gets through, and compute the **speed-up** (samples/s on N ranks ÷
# samples/s on 1 rank) and the **efficiency** (speed-up ÷ N: 1.0 is perfect). The main measurement is
# *weak scaling*: every rank keeps its batch of 512 samples, so the global batch grows with N (what a
# DDP job usually does when it gets more GPUs). Beside it, *strong scaling*: the global batch stays
# 512 and is split N ways. Then you find where the speed-up stops and why, from your own numbers: how
# many cores this machine gives the ranks, and how much of each step the timeline shows going to
# communication.
#
# **You will learn**
# - how to measure the throughput, speed-up and efficiency of a DDP training on 1, 2 and 4 ranks
# - the difference between weak scaling (the same batch per rank) and strong scaling (the same global batch), and why strong scaling stops sooner
# - why ranks beyond the machine's cores add no speed: each rank computes on a core, and extra ranks take turns
# - how the timeline's breakdown (compute, comm, wait) shows what communication costs at each size
# - how to predict a speed-up from the measured communication time, a fixed cost per step that distributing adds (and why that is not Amdahl's law)
#
# **Study time:** about 35 minutes
#
# **Needs:** nothing beyond ddplab and torch · 1, 2 and 4 ranks
#
# **You will see:** samples/s, speed-up and efficiency on 1, 2 and 4 ranks as a table and a plot, for
# weak and strong scaling; each size's step split into compute, communication and waiting; the
# swimlanes of 4 ranks; and a verdict, from this run, on what stops the scaling here.

# %% [markdown] lang=zh
# # 第 14 课 · 扩展性：1、2、4 个 rank
#
# **简而言之**：用 DDP 在 1 个、2 个、再到 4 个 rank 上训练同一个模型，测量整个组每秒处理多少样本，并计算**加速比**（N 个 rank 的样本/秒 ÷ 1 个 rank 的样本/秒）和**并行效率**（加速比 ÷ N：1.0 为完美）。主要的测量是*弱扩展*：每个 rank 的批次始终是 512 个样本，所以全局批次随 N 增大（一个 DDP 训练分到更多 GPU 时通常就是这样做的）。作为对照，还测*强扩展*：全局批次固定为 512，分给 N 个 rank。然后根据你自己测得的数字，找出加速比在哪里停止增长、为什么停止：这台机器给各 rank 提供了多少个 CPU 核心，以及时间线显示每一步有多少时间花在通信上。
#
# **你将学到**
# - 怎样测量一次 DDP 训练在 1、2、4 个 rank 上的吞吐量、加速比和并行效率
# - 弱扩展（每个 rank 的批次不变）与强扩展（全局批次不变）的区别，以及为什么强扩展更早停止增长
# - 为什么超出机器核心数的 rank 不再带来任何加速：每个 rank 都要在一个核心上计算，多出来的 rank 只能轮流使用这些核心
# - 时间线的分解（计算、通信、等待）怎样显示每种规模下通信的代价
# - 怎样根据测得的通信时间预测加速比：通信是分布式训练每一步额外加上的固定开销（以及为什么这不是 Amdahl 定律）
#
# **学习时间**：约 35 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 1、2、4 个 rank
#
# **你将看到**：弱扩展和强扩展在 1、2、4 个 rank 上的样本/秒、加速比和并行效率（一张表和一张图）；每种规模下一步的时间如何分成计算、通信和等待；4 个 rank 的泳道图；以及根据本次运行得出的结论：在这台机器上是什么限制了扩展。

# %%
%load_ext ddplab
import os
from ddplab.shared.config import cores
from ddplab.lessons import check, draw, predict, reveal, say

# %% [markdown]
# ## 1. The machine
#
# A rank is a process, and a process computes on one core at a time (here each rank gets one torch
# thread: see below). So the first number to know is how many cores the ranks can have.
# `os.cpu_count()` counts the CPUs the machine has; `os.sched_getaffinity(0)` the ones this process
# is allowed to run on; a container may allow less still through a CPU quota, which ddplab's
# `cores()` also reads.

# %% [markdown] lang=zh
# ## 1. 这台机器
#
# 一个 rank 就是一个进程，而一个进程在同一时刻只在一个核心上计算（这里每个 rank 只有一个 torch 线程，见下文）。所以首先要知道的数字是：各 rank 能分到多少个核心。`os.cpu_count()` 统计机器上有多少个 CPU；`os.sched_getaffinity(0)` 给出允许这个进程运行的 CPU；容器还可能通过 CPU 配额允许得更少，ddplab 的 `cores()` 也会读取这个配额。

# %%
listed = os.cpu_count()
allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else listed
usable = cores()                            # the affinity, capped by a container's CPU quota
print(say(f"os.cpu_count() = {listed}; len(os.sched_getaffinity(0)) = {allowed}; usable cores: {usable}",
          f"os.cpu_count() = {listed}；len(os.sched_getaffinity(0)) = {allowed}；可用的核心：{usable} 个"))
for n in (1, 2, 4):
    if n <= usable:
        print(say(f"{n} ranks: a core each" if n > 1 else "1 rank: a core of its own",
                  f"{n} 个 rank：每个 rank 独占一个核心" if n > 1 else "1 个 rank：独占一个核心"))
    else:
        print(say(f"{n} ranks: {usable} core{'s' * (usable > 1)} for {n} ranks, about {usable / n:.2g} of a core each",
                  f"{n} 个 rank：{n} 个 rank 共用 {usable} 个核心，每个 rank 大约分到 {usable / n:.2g} 个核心"))

# %% [markdown]
# ## 2. The same training on 1, 2 and 4 ranks
#
# The model is the MLP 784-512-512-10 (669,706 parameters: 2.7 MB of float32 gradients to all-reduce
# at every step, whatever the number of ranks). `train(batch, steps)` times `steps` steps of
# `batch` samples on each rank, the ranks lined up by a barrier first, after 5 warm-up steps (DDP
# builds its buckets in its first step). It runs twice at each size:
#
# - **weak scaling**, `train(B, STEPS)`: each rank its own 512 samples per step, so N ranks process
#   N × 512 samples per step. Ideal: N times the samples/s.
# - **strong scaling**, `train(B // world_size, STEPS)`: 512 samples per step in all, each rank
#   512 / N of them. Ideal: each step N times shorter.
#
# With one rank both are the same run. The rank code is a string, `WEAK`, so that the very same
# code runs at each size: the loop starts a pool of N ranks, runs `WEAK` (and then `STRONG`) on it
# as a `%%ddp` cell would, keeps the timeline of the weak run and the seconds, and stops the pool
# before the next size (the last one, 4 ranks, stays up for the exercises). The pools run without
# a dashboard (`--no-dashboard`): three pools started from one cell would each draw one in it.
#
# Each pool is started with `--threads 1`. By default ddplab gives each rank the machine's cores
# divided by its ranks as torch threads: one rank alone would then compute with every core through
# torch's own threads, and the comparison would be threads against processes. With one thread per
# rank, N ranks ask for N cores.

# %% [markdown] lang=zh
# ## 2. 在 1、2、4 个 rank 上做同一次训练
#
# 模型是 MLP 784-512-512-10（669,706 个参数：无论有多少个 rank，每一步都要 all-reduce 2.7 MB 的 float32 梯度）。`train(batch, steps)` 先做 5 步预热（DDP 在第一步中建好它的桶），然后用 barrier 让各 rank 对齐，再对每个 rank 上 `steps` 步、每步 `batch` 个样本的训练计时。在每种规模下运行两次：
#
# - **弱扩展**，`train(B, STEPS)`：每个 rank 每步处理自己的 512 个样本，所以 N 个 rank 每步处理 N × 512 个样本。理想情况：样本/秒为 1 个 rank 时的 N 倍。
# - **强扩展**，`train(B // world_size, STEPS)`：每步一共 512 个样本，每个 rank 处理其中的 512 / N 个。理想情况：每一步的耗时减少到原来的 1/N。
#
# 只有 1 个 rank 时，两者是同一次运行。rank 上运行的代码写在字符串 `WEAK` 里，这样在每种规模下运行的都是完全相同的代码：循环先启动一个有 N 个 rank 的进程池，像 `%%ddp` 单元格那样在上面运行 `WEAK`（然后运行 `STRONG`），保存弱扩展那次运行的时间线和计时，再在换下一种规模之前停止进程池（最后一种规模，即 4 个 rank 的进程池，留给练习使用）。这些进程池不显示仪表盘（`--no-dashboard`）：三个进程池都在同一个单元格里启动，否则每个都会在里面画一个仪表盘。
#
# 每个进程池都用 `--threads 1` 启动。默认情况下，ddplab 给每个 rank 的 torch 线程数是机器的核心数除以 rank 数：这样单独一个 rank 就会通过 torch 自己的线程用上所有的核心，比较的就成了线程与进程。每个 rank 只有一个线程时，N 个 rank 要求的就是 N 个核心。

# %% [markdown]
# **Predict, then run.** Weak scaling, 512 samples per rank and step: how many times the samples/s
# of 1 rank will 4 ranks process on this machine? Part 1 printed how many cores the ranks can use.
# Answer with a number (4 = perfect scaling).

# %% [markdown] lang=zh
# **先预测，再运行。** 弱扩展，每个 rank 每步 512 个样本：在这台机器上，4 个 rank 的样本/秒是 1 个 rank 的多少倍？第 1 部分打印了各 rank 能用多少个核心。请写一个数（4 表示完美扩展）。

# %%
predict("14.weak_speedup", ...)    # samples/s on 4 ranks ÷ samples/s on 1 rank, weak scaling

# %%
B, STEPS = 512, 40                          # samples per rank and step (weak scaling); steps timed

WEAK = r'''
import time
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.workloads import mlp

model = DDP(mlp(seed=0))                    # 784-512-512-10: 2.7 MB of gradients per step
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train(batch, steps):
    """Seconds this rank takes for `steps` steps of `batch` samples, the ranks started together."""
    torch.manual_seed(rank)
    x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
    dist.barrier()
    tic = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()   # DDP all-reduces the gradients in here
        opt.step()
    return time.perf_counter() - tic

train(B, 5)                                 # warm-up
weak = train(B, STEPS)                      # B samples per rank: B * world_size per step
threads = torch.get_num_threads()
'''
STRONG = "strong = train(B // world_size, STEPS)   # B samples per step in all, split among the ranks"

sizes = [1, 2, 4]
seconds, timelines, threads = {}, {}, {}
for n in sizes:
    %ddp_start {n} --threads 1 --no-dashboard
    %ddp_push B STEPS
    get_ipython().run_cell_magic("ddp", "", WEAK)       # what a %%ddp cell holding WEAK does
    timelines[n] = %ddp_timeline
    weak = %ddp_gather weak
    threads[n] = %ddp_gather threads
    if n > 1:
        get_ipython().run_cell_magic("ddp", "", STRONG)
        strong = %ddp_gather strong
    else:
        strong = weak                                    # one rank: the same 512 samples per step
    seconds[n] = (max(weak), max(strong))                # a step ends when the slowest rank's does
    if n != sizes[-1]:
        %ddp_stop

# %% [markdown]
# ## 3. Speed-up and efficiency
#
# Samples/s is the samples of all ranks divided by the slowest rank's seconds (a step is done when
# every rank is done with it). Speed-up and efficiency compare each size with 1 rank.

# %% [markdown] lang=zh
# ## 3. 加速比与并行效率
#
# 样本/秒等于所有 rank 处理的样本数除以最慢那个 rank 的秒数（一步要等每个 rank 都做完才算完成）。加速比和并行效率都是拿每种规模和 1 个 rank 相比。

# %%
import pandas as pd

assert all(t == [1] * n for n, t in threads.items()), threads      # one torch thread per rank
rate = {"weak": {n: n * B * STEPS / seconds[n][0] for n in sizes},
        "strong": {n: B * STEPS / seconds[n][1] for n in sizes}}
speedup = {kind: {n: r[n] / r[1] for n in sizes} for kind, r in rate.items()}
efficiency = {kind: {n: s / n for n, s in su.items()} for kind, su in speedup.items()}
name = {"weak": say("weak", "弱扩展"), "strong": say("strong", "强扩展")}
table = pd.DataFrame([{say("scaling", "扩展方式"): name[kind], say("ranks", "rank 数"): n,
                       say("samples per rank", "每个 rank 的样本数"): B if kind == "weak" else B // n,
                       say("samples per step", "每步的样本数"): B * n if kind == "weak" else B,
                       say("samples/s", "样本/秒"): round(rate[kind][n]),
                       say("speed-up", "加速比"): round(speedup[kind][n], 2),
                       say("efficiency", "并行效率"): round(efficiency[kind][n], 2)}
                      for kind in ("weak", "strong") for n in sizes])
picture = draw.lines(None, panels=[
    dict(series={say("weak", "弱扩展"): (sizes, [rate["weak"][n] for n in sizes]),
                 say("strong", "强扩展"): (sizes, [rate["strong"][n] for n in sizes]),
                 say("ideal: N × 1 rank", "理想：1 个 rank 的 N 倍"): (sizes, [n * rate["weak"][1] for n in sizes])},
         xlabel=say("ranks", "rank 数"), ylabel=say("samples/s", "样本/秒"),
         title=say(f"Throughput ({usable} usable cores)", f"吞吐量（{usable} 个可用的核心）")),
    dict(series={say("weak", "弱扩展"): (sizes, [efficiency["weak"][n] for n in sizes]),
                 say("strong", "强扩展"): (sizes, [efficiency["strong"][n] for n in sizes]),
                 say("ideal", "理想"): (sizes, [1.0] * len(sizes))},
         xlabel=say("ranks", "rank 数"), ylabel=say("speed-up / N", "加速比 / N"),
         title=say("Efficiency", "并行效率")),
])
for ax in picture.axes:
    ax.set_xticks(sizes)                        # one tick per size: 1, 2, 4
draw.Picture(picture.figure)

# %%
table

# %% [markdown]
# What the numbers of this run say:

# %% [markdown] lang=zh
# 本次运行的数字说明了什么：

# %%
top = sizes[-1]
for n in sizes[1:]:  # with a core per rank, more ranks should do more: unless something else used the cores
    if n <= usable and rate["weak"][n] <= 1.1 * rate["weak"][n // 2]:
        print(say(f"{n} ranks had a core each, yet did no more than {n // 2}: other programs were using the cores "
                  "during this run (the rest of this lesson reads its numbers as they are; run it again on an idle "
                  "machine to see the gain).",
                  f"{n} 个 rank 各有一个核心，做的却没有比 {n // 2} 个 rank 多：这次运行时有别的程序在占用这些核心（本课其余部分"
                  "照实解读这些数字；在空闲的机器上再运行一次，就能看到收益）。"))
# the same 2.7 MB all-reduced per step, for less compute per rank: strong scaling is less efficient
assert efficiency["strong"][top] < efficiency["weak"][top], efficiency
for n in sizes[1:]:
    print(say(f"{n} ranks: weak scaling {speedup['weak'][n]:.2f}x the samples/s of 1 rank (efficiency "
              f"{efficiency['weak'][n]:.2f}); strong scaling {speedup['strong'][n]:.2f}x "
              f"(efficiency {efficiency['strong'][n]:.2f}).",
              f"{n} 个 rank：弱扩展的样本/秒是 1 个 rank 的 {speedup['weak'][n]:.2f} 倍（并行效率 "
              f"{efficiency['weak'][n]:.2f}）；强扩展是 {speedup['strong'][n]:.2f} 倍（并行效率 "
              f"{efficiency['strong'][n]:.2f}）。"))
reveal("14.weak_speedup", float(speedup["weak"][top]), unit=say("times", "倍"))
best = max(sizes, key=rate["weak"].get)
if best < top:
    print(say(f"Weak scaling was fastest at {best} ranks: going from {best} to {top} ranks gave "
              f"{rate['weak'][top] / rate['weak'][best]:.2f}x the samples/s: nothing gained.",
              f"弱扩展在 {best} 个 rank 时最快：从 {best} 个 rank 增加到 {top} 个，样本/秒只是原来的 "
              f"{rate['weak'][top] / rate['weak'][best]:.2f} 倍，没有任何收益。"))
else:
    print(say(f"Weak scaling still grew up to {top} ranks ({rate['weak'][top] / rate['weak'][top // 2]:.2f}x the "
              f"samples/s of {top // 2} ranks).",
              f"弱扩展一直增长到 {top} 个 rank（样本/秒是 {top // 2} 个 rank 时的 "
              f"{rate['weak'][top] / rate['weak'][top // 2]:.2f} 倍）。"))

# %% [markdown]
# > **Common claim:** "N ranks train N times as fast." **What actually happens:** only the computing
# > is shared out. Every step also all-reduces the whole gradient, 2.7 MB here, on 2 ranks or on
# > 1,000, and every rank needs a core (or a GPU) of its own to compute on. The efficiency shows what
# > is lost; the rest of the lesson finds out to what.
#
# Strong scaling loses more, and sooner: each rank's share of the batch shrinks as N grows, so its
# compute per step shrinks, while the all-reduce stays the same size. Weak scaling keeps the compute
# per rank and so keeps the communication a smaller share of each step. That is why data-parallel
# jobs grow the global batch with the number of GPUs (and then usually have to adjust the learning
# rate for the larger batch).

# %% [markdown] lang=zh
# > **常见说法：**“N 个 rank 的训练速度是 1 个 rank 的 N 倍。” **实际情况：**被分摊的只有计算。每一步还要 all-reduce 整个梯度，这里是 2.7 MB，无论是 2 个 rank 还是 1,000 个 rank 都一样；而且每个 rank 都需要一个自己的核心（或一块 GPU）来计算。并行效率显示损失了多少；这一课余下的部分找出损失在了哪里。
#
# 强扩展损失得更多，也更早：N 越大，每个 rank 分到的那份批次越小，它每一步的计算也越少，而 all-reduce 的大小不变。弱扩展保持每个 rank 的计算量不变，所以通信在每一步中所占的比例更小。这就是为什么数据并行的训练会随着 GPU 数增大全局批次（然后通常还要为更大的批次调整学习率）。

# %% [markdown]
# ## 4. Where the time of a step goes, at each size
#
# Each weak run's timeline (`%ddp_timeline`, kept in `timelines`) splits every rank's step into
# **compute** (forward, optimizer, and backward until its last gradient bucket was ready),
# **comm** (the all-reduces, less the part hidden under backward's compute and less the waiting),
# **wait** (a rank's time in an all-reduce before the last rank arrived) and **hidden** (all-reduce
# time overlapped with backward's compute). `breakdown(last=30)` averages the last 30 steps of each
# rank; below, the ranks are averaged too.

# %% [markdown] lang=zh
# ## 4. 每种规模下，一步的时间花在了哪里
#
# 每次弱扩展运行的时间线（`%ddp_timeline`，保存在 `timelines` 中）把每个 rank 的每一步分成：**compute**（计算：前向、优化器，以及反向传播直到最后一个梯度桶就绪为止）、**comm**（通信：all-reduce 的时间，减去藏在反向计算之下的部分，再减去等待）、**wait**（等待：一个 rank 在 all-reduce 中等最后一个 rank 到达的时间）和 **hidden**（与反向计算重叠的 all-reduce 时间）。`breakdown(last=30)` 对每个 rank 的最后 30 步取平均；下面再对各 rank 取平均。

# %%
import statistics

PARTS = ("compute", "comm", "wait", "hidden", "step")
per_step = {}                                   # size -> {part: ms per step, averaged over ranks}
for n, tl in timelines.items():
    ranks = tl.breakdown(last=30).values()
    per_step[n] = {k: 1e3 * statistics.mean(b[k] for b in ranks) for k in PARTS}
    p = per_step[n]
    print(say(f"{n} rank{'s' * (n > 1)}: compute {p['compute']:5.1f} ms, comm {p['comm']:5.1f} ms, wait {p['wait']:5.1f} ms, "
              f"hidden {p['hidden']:4.1f} ms; step {p['step']:5.1f} ms",
              f"{n} 个 rank：计算 {p['compute']:5.1f} 毫秒，通信 {p['comm']:5.1f} 毫秒，等待 {p['wait']:5.1f} 毫秒，"
              f"重叠 {p['hidden']:4.1f} 毫秒；一步 {p['step']:5.1f} 毫秒"))
# the bytes: every rank all-reduces all the gradients at every step, whatever the number of ranks
for n in sizes[1:]:
    spans = timelines[n].to_pandas()
    buckets = spans[(spans.phase == "comm") & spans.bucket.notna()]
    sent = buckets.groupby(["rank", "step"])["bytes"].sum()
    assert (sent.iloc[len(sent) // 2:] == 4 * 669_706).all(), sent.describe()
    assert per_step[n]["comm"] + per_step[n]["wait"] + per_step[n]["hidden"] > 0, per_step[n]
share = {n: (p["comm"] + p["wait"]) / p["step"] for n, p in per_step.items()}
solo = timelines[1].to_pandas()
solo = solo[(solo.phase == "comm") & solo.bucket.notna()]
if len(solo):
    print(say(f"On 1 rank DDP still all-reduces its buckets, in a group of one: "
              f"{1e3 * (solo.end - solo.start).mean():.2f} ms each, with nothing to exchange.",
              f"只有 1 个 rank 时，DDP 仍然对它的桶做 all-reduce，只是组里只有它自己：每次 "
              f"{1e3 * (solo.end - solo.start).mean():.2f} 毫秒，没有任何数据需要交换。"))
draw.bars(None, panels=[
    dict(values={say(f"{n} rank{'s' * (n > 1)}", f"{n} 个 rank"): per_step[n][part] for n in sizes},
         ylabel=say("ms per step", "每步毫秒数"), title=title)
    for part, title in (("compute", say("Compute", "计算")), ("comm", say("Communication", "通信")),
                        ("wait", say("Waiting for the last rank", "等待最后一个 rank")))
], fmt="{:.1f}")

# %% [markdown]
# And the swimlanes of the last steps on 4 ranks: compute on each rank's upper row, the bucket
# all-reduces on the lower row, their waiting shaded red. (The timeline's own sentence under the
# picture counts communication without the waiting, which the lines above add to it.)

# %% [markdown] lang=zh
# 再看 4 个 rank 最后几步的泳道图：每个 rank 上面一行是计算，下面一行是各个桶的 all-reduce，其中等待的部分用红色标出。（图下时间线自己给出的那句话，计算通信时不含等待；上面打印的几行则把等待也算了进去。）

# %%
timelines[top]

# %% [markdown]
# ## 5. Where it stops, and why
#
# Two things can stop the speed-up. **The cores**: a rank computes on one core; with more ranks than
# cores, the ranks take turns, so each rank's compute per step grows by about ranks ÷ cores, and the
# group does no more work per second than with one rank per core. **Communication**: the all-reduce
# is added to every step, and it does not shrink as ranks are added (each rank sends 2(N−1)/N times
# the gradient's size in a ring: lesson 12). On this machine the all-reduce is itself CPU work
# (copies through loopback), done on the same cores. What this run says:

# %% [markdown] lang=zh
# 有两样东西会让加速比停止增长。**CPU 核心**：一个 rank 在一个核心上计算；rank 比核心多时，各 rank 只能轮流使用这些核心，于是每个 rank 每一步的计算时间大约变为原来的（rank 数 ÷ 核心数）倍，整个组每秒完成的工作并不比每个 rank 独占一个核心时多。**通信**：每一步都要加上一次 all-reduce，而它不会随着 rank 增多而缩短（在环形算法中，每个 rank 发送的数据量是梯度大小的 2(N−1)/N 倍：见第 12 课）。在这台机器上，all-reduce 本身也是 CPU 的工作（经过回环接口的拷贝），由同样的这几个核心来完成。本次运行的结果：

# %%
grew = per_step[top]["compute"] / per_step[1]["compute"]
for n in sizes[1:]:
    print(say(f"{n} ranks: communication and waiting took {share[n]:.0%} of a step "
              f"({per_step[n]['comm'] + per_step[n]['wait']:.1f} of {per_step[n]['step']:.1f} ms).",
              f"{n} 个 rank：通信和等待占一步的 {share[n]:.0%}（{per_step[n]['step']:.1f} 毫秒中的 "
              f"{per_step[n]['comm'] + per_step[n]['wait']:.1f} 毫秒）。"))
print(say(f"Compute per step: {per_step[1]['compute']:.1f} ms on 1 rank, {per_step[top]['compute']:.1f} ms on each of "
          f"{top} ranks ({grew:.2f}x); {top} ranks had {usable} usable core{'s' * (usable > 1)}.",
          f"每步的计算时间：1 个 rank 时为 {per_step[1]['compute']:.1f} 毫秒，{top} 个 rank 时每个 rank 为 "
          f"{per_step[top]['compute']:.1f} 毫秒（是前者的 {grew:.2f} 倍）；{top} 个 rank 共有 {usable} 个可用的核心。"))
if top > usable and grew > 1.3:
    limit = "cores"
    print(say(f"The cores are the limit here: {top} ranks on {usable} core{'s' * (usable > 1)} take turns, so each "
              f"rank's compute per step took {grew:.1f}x as long as one rank's alone ({top / usable:.1f}x if the cores were shared evenly"
              + ("; less, because while some ranks wait in an all-reduce the others have the cores"
                 if grew < 0.9 * top / usable else "")
              + "). "
              f"The all-reduces slowed down with them: communication and waiting took "
              f"{per_step[top]['comm'] + per_step[top]['wait']:.1f} ms per step against "
              f"{per_step[top // 2]['comm'] + per_step[top // 2]['wait']:.1f} ms on {top // 2} ranks, because each step "
              f"of the ring waits for a rank that must first get a core back, and the copies need the same cores. "
              f"Hence the weak-scaling efficiency of {efficiency['weak'][top]:.2f} at {top} ranks. On a machine with "
              f"{top} or more cores, each rank would keep one rank's compute time and the speed-up would go on "
              f"growing, until communication stops it.",
              f"在这里，限制来自 CPU 核心：{top} 个 rank 轮流使用 {usable} 个核心，所以每个 rank 每一步的计算时间是单独一个 "
              f"rank 时的 {grew:.1f} 倍（如果各 rank 平分这些核心，应为 {top / usable:.1f} 倍"
              + ("；实际更少，因为一些 rank 在 all-reduce 中等待时，其他 rank 就能独占这些核心"
                 if grew < 0.9 * top / usable else "")
              + "）。all-reduce 也随之变慢：每步的"
              f"通信和等待为 {per_step[top]['comm'] + per_step[top]['wait']:.1f} 毫秒，而 {top // 2} 个 rank 时只有 "
              f"{per_step[top // 2]['comm'] + per_step[top // 2]['wait']:.1f} 毫秒，因为环上的每一步都要等待一个得先重新分到"
              f"核心的 rank，而且拷贝也要用同样的核心。所以 {top} 个 rank 时弱扩展的并行效率只有 {efficiency['weak'][top]:.2f}。"
              f"在有 {top} 个或更多核心的机器上，每个 rank 都能保持单独一个 rank 时的计算时间，加速比会继续增长，直到被"
              f"通信限制为止。"))
elif efficiency["weak"][top] < 0.8:
    limit = "communication"
    print(say(f"Communication is the limit here: every rank kept about one rank's compute time, but communication "
              f"and waiting took {share[top]:.0%} of each step at {top} ranks, so the efficiency is "
              f"{efficiency['weak'][top]:.2f}. A larger batch per rank (more compute per byte sent) or faster links "
              f"would raise it.",
              f"在这里，限制来自通信：每个 rank 基本保持了单独一个 rank 时的计算时间，但在 {top} 个 rank 时，通信和等待"
              f"占了每一步的 {share[top]:.0%}，所以并行效率只有 {efficiency['weak'][top]:.2f}。增大每个 rank 的批次（每发送"
              f"一个字节对应更多的计算）或使用更快的连接，都能提高它。"))
elif top > usable:
    limit = None
    if grew < 1:
        why = say("the 1-rank run was slower than it should be, most likely because other programs were using the "
                  "cores while it ran. Run the lesson again on an idle machine to see the cores stop the scaling.",
                  "1 个 rank 的那次运行比应有的慢，很可能是它运行时有别的程序在占用这些核心。在空闲的机器上再运行一次，"
                  "就能看到核心数限制扩展。")
    else:
        why = say("while some ranks wait in an all-reduce, the others have the cores to themselves. With more ranks "
                  "per core, or less waiting, the cores will show.",
                  "一些 rank 在 all-reduce 中等待时，其他 rank 就能独占这些核心。每个核心上的 rank 再多一些，或者等待再少"
                  "一些，核心数的限制就会显现出来。")
    print(say(f"The {top} ranks shared {usable} core{'s' * (usable > 1)}, yet each rank's compute per step took only "
              f"{grew:.2f}x one rank's alone (efficiency {efficiency['weak'][top]:.2f}): ",
              f"{top} 个 rank 共用 {usable} 个核心，可是每个 rank 每一步的计算时间只是单独一个 rank 时的 {grew:.2f} 倍"
              f"（并行效率 {efficiency['weak'][top]:.2f}）：") + why)
else:
    limit = None
    print(say(f"Nothing stops the scaling yet at {top} ranks here: each rank had a core, and communication took "
              f"{share[top]:.0%} of a step, so the efficiency is {efficiency['weak'][top]:.2f}. With more ranks the "
              f"cores or the communication will show.",
              f"在这里，到 {top} 个 rank 时扩展还没有受到限制：每个 rank 都有一个核心，通信只占一步的 {share[top]:.0%}，"
              f"所以并行效率为 {efficiency['weak'][top]:.2f}。rank 再多一些，核心数或通信的限制就会显现出来。"))

# %% [markdown]
# > **Common claim:** "Start more ranks than cores: like threads, they will fill the gaps."
# > **What actually happens:** a rank is busy computing almost all of its step, so there are no gaps
# > to fill. Extra ranks share the same cores: each computes more slowly, and the group also pays the
# > all-reduce of a larger ring, whose steps wait for processes that must first get a core back
# > (the waiting in the breakdown above). For CPU training, one rank per core, each with one
# > thread, or fewer ranks with more threads each, is the most a machine gives.

# %% [markdown] lang=zh
# > **常见说法：**“启动比核心数更多的 rank：它们会像线程一样填满空隙。” **实际情况：**一个 rank 在它的一步中几乎一直在计算，并没有空隙可填。多出来的 rank 共用同样的核心：每个 rank 算得更慢，而整个组还要为更大的环付出 all-reduce 的代价，环上的每一步都要等待那些得先重新分到核心的进程（上面分解中的等待）。在 CPU 上训练时，每个核心一个 rank、每个 rank 一个线程，或者更少的 rank、每个 rank 更多的线程，就是一台机器所能提供的全部。

# %% [markdown]
# ## Exercises
#
# Each exercise is judged against the numbers of your run. Write your answer in place of `...`
# and run the cell.

# %% [markdown] lang=zh
# ## 练习
#
# 每道练习都根据你这次运行的数字来判断。把 `...` 换成你的答案，然后运行单元格。

# %% [markdown]
# **14.1** The table gives the weak-scaling efficiency: the samples/s at N ranks, divided by the
# samples/s at 1 rank, divided by N. How many **samples/s** would the 4 ranks have had to process for a
# weak-scaling efficiency of **0.9**, with this run's samples/s at 1 rank? Answer with a number of
# samples per second.

# %% [markdown] lang=zh
# **14.1** 表格给出了弱扩展的并行效率：N 个 rank 的样本/秒，除以 1 个 rank 的样本/秒，再除以 N。按本次运行中 1 个 rank 的样本/秒，4 个 rank 每秒要处理多少个**样本**，弱扩展的并行效率才能达到 **0.9**？用每秒的样本数作答。

# %%
answer = ...    # samples/s at 4 ranks for a weak-scaling efficiency of 0.9
check("14.1", answer, rates=rate["weak"], goal=0.9)

# %% [markdown]
# **14.2** A simple model of strong scaling: a 1-rank step of T₁ seconds is cut into N pieces, but
# distributing adds the all-reduce, c seconds per step, which does not shrink: a step on N ≥ 2 ranks
# takes about T₁/N + c, and the speed-up is **T₁ / (T₁/N + c) = 1 / (1/N + c/T₁)**. This is not
# Amdahl's law. Amdahl splits the 1-rank time itself into a part that shrinks with N and a part that
# does not, T₁ · (s + (1 − s)/N), so its speed-up is exactly 1 at N = 1. Here c is not part of T₁: it
# is a fixed cost that appears as soon as there is distribution, from 2 ranks on (put N = 1 in the
# formula and it gives less than 1, for a c that one rank does not pay). Predict the **strong-scaling
# speed-up at 2 ranks** from this run's step on 1 rank (T₁) and communication plus waiting on 2 ranks
# (c), both printed in part 4. Answer with a number; the judge then compares it with what was
# measured.

# %% [markdown] lang=zh
# **14.2** 强扩展的一个简单模型：1 个 rank 时耗时 T₁ 秒的一步被分成 N 份，但分布式训练额外加上了 all-reduce（每步 c 秒），它不会缩短：N ≥ 2 个 rank 时一步大约耗时 T₁/N + c，加速比为 **T₁ / (T₁/N + c) = 1 / (1/N + c/T₁)**。这不是 Amdahl 定律。Amdahl 定律把 1 个 rank 的耗时本身分成随 N 缩短的部分和不缩短的部分，T₁ · (s + (1 − s)/N)，所以 N = 1 时它的加速比正好是 1。这里的 c 不是 T₁ 的一部分：它是一笔固定开销，只要是分布式训练（从 2 个 rank 起）就会出现（把 N = 1 代入公式，得到的值小于 1，因为算进了 1 个 rank 并不需要付出的 c）。根据本次运行中 1 个 rank 的一步（T₁）和 2 个 rank 时的通信加等待（c），两者都在第 4 部分打印出来了，预测 **2 个 rank 时强扩展的加速比**。用一个数作答；判断时还会把它和实测值作比较。

# %%
answer = ...    # 1 / (1/2 + c/T1), with T1 and c in the same unit
check("14.2", answer, T1=per_step[1]["step"], c=per_step[2]["comm"] + per_step[2]["wait"],
      measured=speedup["strong"][2])

# %% [markdown]
# **14.3** Suppose this machine had a core for each of the 4 ranks. Each rank would then compute
# as fast as one rank alone, and the step would be about one rank's compute time plus the
# communication measured at 4 ranks (leave out the waiting: with a core each, no rank is held up
# by another taking its core). Estimate the **weak-scaling samples/s at 4 ranks** on such a machine:
# 4 × 512 samples ÷ (compute on 1 rank + comm on 4 ranks), the times from part 4 in seconds. Answer
# with a number of samples per second.

# %% [markdown] lang=zh
# **14.3** 假设这台机器给 4 个 rank 每个都配一个核心。那么每个 rank 的计算速度都和单独一个 rank 时一样快，一步的耗时大约就是单独一个 rank 的计算时间，加上 4 个 rank 时测得的通信时间（不计等待：每个 rank 都有自己的核心时，不会有 rank 因为别的 rank 占用了它的核心而被拖住）。估计在这样一台机器上 **4 个 rank 时弱扩展的样本/秒**：4 × 512 个样本 ÷（1 个 rank 的计算时间 + 4 个 rank 的通信时间），时间取自第 4 部分，换算成秒。用每秒的样本数作答。

# %%
answer = ...    # samples/s at 4 ranks with a core per rank
check("14.3", answer, B=B, compute1=per_step[1]["compute"], comm4=per_step[top]["comm"], measured=rate["weak"][top])

# %% [markdown]
# **14.4** The weak-scaling efficiency at 2 ranks is about compute ÷ (compute + communication and
# waiting), per step. Compute grows in proportion to the batch per rank; the all-reduce does not
# change with it. What **batch per rank** would make the efficiency at 2 ranks about **0.9**, from
# the 2-rank numbers of part 4? Answer with a whole number of samples.

# %% [markdown] lang=zh
# **14.4** 2 个 rank 时弱扩展的并行效率，大约等于每一步的“计算 ÷（计算 + 通信与等待）”。计算时间与每个 rank 的批大小成正比；all-reduce 则不随它变化。根据第 4 部分中 2 个 rank 的数字，每个 rank 的**批次**多大，才能让 2 个 rank 时的并行效率达到约 **0.9**？用一个整数（样本数）作答。

# %%
answer = ...    # samples per rank for an efficiency of about 0.9 at 2 ranks
check("14.4", answer, B=B, compute2=per_step[2]["compute"], comm2=per_step[2]["comm"], wait2=per_step[2]["wait"])

# %%
%ddp_stop
