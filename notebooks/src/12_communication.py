# %% [markdown]
# # Lesson 12 · Communication cost: latency, buckets and bf16 gradients
#
# **In short.** Every DDP step all-reduces the gradients, so communication is part of the cost of
# every step. You measure it here. First the all-reduce alone, for tensors from 4 KB to 16 MB, on
# groups of 2 and 4 ranks: small messages cost a fixed *latency*, large ones are limited by
# *bandwidth*. Then DDP's gradient buckets (how many all-reduces one step makes), the share of a
# step that is communication (`no_sync` switches it off), `torch.compile`, one way to make the
# compute part faster (here it stands in for TorchScript, the older way to compile PyTorch models,
# and XLA, which needs a device and backend of its own), and finally a job you steer while it runs: a switch that makes DDP send its gradients
# in bf16, half the bytes. All numbers are measured live on this machine (4 processes sharing its
# cores, talking over TCP on loopback), so they are noisy: read them as rough sizes.
#
# **You will learn**
# - the latency–bandwidth model t ≈ α + n·β of an all-reduce, fitted on this machine, and why a ring sends 2(N−1)/N of the tensor
# - how DDP packs gradients into buckets (whole tensors, closed once at least the cap), and what the bucket size trades
# - how much of a DDP step is communication, measured with `no_sync`, and why that share limits scaling
# - what `torch.compile` does to the compute part (and why TorchScript and XLA are compilers, not sparsity)
# - how a communication hook sends bf16 gradients, switched on by all ranks at the same step while the job runs
#
# **Study time:** about 50 minutes
#
# **Needs:** a C++ compiler for the `torch.compile` part (without one, that part says so and the rest runs) · 4 ranks
#
# **Memory:** about 1.5 GiB at its peak, with its `torch.compile` part. In a 1 GiB session (a
# classroom hub) that part is skipped, and says so (the C++ compiler it runs takes up to 0.5 GiB
# more); the rest runs with 4 ranks in about 0.9 GiB.
#
# **You will see:** all-reduce time and bandwidth against message size (log-log), all-reduce
# calls per step for four bucket sizes, a step with and without communication, the time
# `torch.compile` takes to compile and what it saves, and the bytes of a running job dropping by
# half when you flip a switch.

# %% [markdown] lang=zh
# # 第 12 课 · 通信开销：延迟、桶与 bf16 梯度
#
# **简而言之**：DDP 每一步都要对梯度做 all-reduce，所以通信是每一步开销的一部分。这一课就来测量它。先单独测 all-reduce：张量从 4 KB 到 16 MB，进程组分别由 2 个和 4 个进程（rank）组成：小消息的开销主要是固定的*延迟*，大消息则受*带宽*限制。然后看 DDP 的梯度桶（一步要做几次 all-reduce）、一步中通信所占的比例（用 `no_sync` 关掉通信来对比），再看 `torch.compile`：它是加快计算部分的一种办法（这里用它代替 TorchScript 和 XLA：前者是 PyTorch 较早的、已被弃用的编译方式，后者需要自己的设备和后端）。最后是一个可以在运行中操控的训练：拨动一个开关，DDP 就改用 bf16 发送梯度，字节数减半。所有数字都是在本机上实时测得的（4 个进程共享本机的 CPU 核心，通过回环接口上的 TCP 通信），波动较大：只能当作大致的量级。
#
# **你将学到**
# - all-reduce 的延迟–带宽模型 t ≈ α + n·β（在本机上拟合），以及为什么环形算法发送的是张量大小的 2(N−1)/N
# - DDP 如何把梯度装进桶里（整个张量地装，装到至少达到上限就封口），以及桶的大小意味着怎样的取舍
# - 一步 DDP 中有多少是通信（用 `no_sync` 测量），以及为什么这个比例限制了扩展性
# - `torch.compile` 对计算部分做了什么（以及为什么 TorchScript 和 XLA 是编译器，而不是稀疏化技术）
# - 通信钩子如何以 bf16 发送梯度，并在训练运行中让所有 rank 在同一步一起切换
#
# **学习时间**：约 50 分钟
#
# **需要**：`torch.compile` 一节需要 C++ 编译器（没有时这一节会说明，其余部分照常运行）· 4 个 rank
#
# **内存**：包括 `torch.compile` 部分时峰值约 1.5 GiB。在 1 GiB 的会话（课堂用的 hub）里，这部分会被跳过，并给出说明（它调用的 C++ 编译器还要多占用多达 0.5 GiB）；其余部分用 4 个 rank 运行，约 0.9 GiB。
#
# **你将看到**：all-reduce 的耗时和带宽随消息大小的变化（双对数坐标）；四种桶大小下每步的 all-reduce 次数；有通信和没有通信时的一步；`torch.compile` 编译所需的时间及其节省的时间；以及拨动开关后，一个正在运行的训练每步发送的字节数减半。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, knobs, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## 1. The all-reduce alone: latency and bandwidth
#
# A simple model of the time to all-reduce *n* bytes is **t ≈ α + n·β**. α is the fixed cost of
# each call (system calls, waking the other processes, handshakes); β is the time per byte, so
# 1/β is a bandwidth. Small messages cost about α whatever their size; large ones cost about n·β.
#
# gloo's all-reduce is a **ring**: the tensor is cut into N chunks; in N−1 steps each rank passes
# one chunk to its neighbour and adds the chunk it receives (a reduce-scatter), then in N−1 more
# steps the summed chunks go around the ring (an all-gather). Count what one rank sends: one chunk,
# 1/N of the tensor, at each of the 2(N−1) steps, so **2(N−1)/N** times the tensor's size: 2 × 1/2 = 1×
# for N = 2, 6 × 1/4 = 1.5× for N = 4, and never more than 2×, however many ranks there are. The
# number of steps, 2(N−1), grows with N, so the latency part grows with the number of ranks.
# (Lesson 13 builds this ring by hand, and shows each chunk on its way.)
#
# To time a group of 2, make a sub-group with `dist.new_group([0, 1])`. **Every** rank must call
# `new_group`, even ranks that are not in it; only members then use it. `median_seconds` lines the
# ranks up with a barrier before each run and returns the slowest rank's median; ranks 2 and 3
# time nothing while ranks 0 and 1 all-reduce in their pair.

# %% [markdown] lang=zh
# ## 1. 单独的 all-reduce：延迟与带宽
#
# 对 *n* 字节做一次 all-reduce 所需的时间，有一个简单的模型：**t ≈ α + n·β**。α 是每次调用的固定开销（系统调用、唤醒其他进程、握手）；β 是每个字节所需的时间，所以 1/β 是一个带宽。小消息无论大小，开销都约为 α；大消息的开销约为 n·β。
#
# gloo 的 all-reduce 是一个**环**：张量被切成 N 块；在 N−1 步中，每个 rank 把一块传给它的邻居，并把收到的那块加到自己的数据上（reduce-scatter），然后再用 N−1 步让求和后的各块沿着环传一圈（all-gather）。数一数一个 rank 发送了多少：2(N−1) 步中每一步发送一块，即张量的 1/N，所以一共是张量大小的 **2(N−1)/N** 倍：N = 2 时为 2 × 1/2 = 1 倍，N = 4 时为 6 × 1/4 = 1.5 倍，无论有多少个 rank，都不会超过 2 倍。而步数 2(N−1) 随 N 增长，所以延迟部分随 rank 数增长。（第 13 课会亲手实现这个环，并展示每一块怎样在环上传递。）
#
# 要对 2 个 rank 的组计时，用 `dist.new_group([0, 1])` 建一个子组。**每个** rank 都必须调用 `new_group`，即使它不在这个组里；之后只有组内成员使用它。`median_seconds` 在每次运行前用一个 barrier 让各 rank 对齐，并返回最慢那个 rank 的中位数；rank 0 和 1 在它们的二人组里做 all-reduce 的时候，rank 2 和 3 什么也不计时。

# %%
%%ddp
from ddplab.lessons.ranks import median_seconds

pair = dist.new_group([0, 1])                     # called on all 4 ranks
sizes = [1_000, 4_000, 16_000, 64_000, 250_000, 1_000_000, 4_000_000]   # float32 elements
seconds = {2: [], 4: []}
for n in sizes:
    x = torch.ones(n)
    seconds[2].append(median_seconds(lambda: dist.all_reduce(x, group=pair) if rank < 2 else None, repeat=7, warmup=3))
    seconds[4].append(median_seconds(lambda: dist.all_reduce(x), repeat=7, warmup=3))

# %%
seconds = %ddp_gather seconds
sizes = %ddp_gather sizes
seconds, sizes = seconds[0], sizes[0]                # every rank got the same (the slowest rank's) times
nbytes = [4 * n for n in sizes]
for ranks in (2, 4):
    print(say(f"{ranks} ranks: ", f"{ranks} 个 rank：")
          + say(", ", "，").join(f"{b / 1e6:g} MB {1e3 * t:.2f} ms" for b, t in zip(nbytes, seconds[ranks])))

# a rough fit of t = alpha + n * beta on the 4-rank curve: alpha is the time of a small message (the
# fastest of the three smallest: they all cost about alpha, and the fastest is the least disturbed by
# other programs), beta the slope between the two largest (or, if noise made the largest no slower,
# between the smallest and the largest)
alpha = min(seconds[4][:3])
beta = (seconds[4][-1] - seconds[4][-2]) / (nbytes[-1] - nbytes[-2])
if beta <= 0:
    print(say("(the 16 MB all-reduce was not slower than the 4 MB one this time, which is noise: beta is taken from "
              "the smallest and the largest message instead)",
              "（这一次 16 MB 的 all-reduce 并不比 4 MB 的慢，这是噪声：改用最小和最大的消息来求 beta）"))
    beta = (seconds[4][-1] - seconds[4][0]) / (nbytes[-1] - nbytes[0])
print(say(f"4 ranks: alpha ≈ {1e6 * alpha:.0f} µs per call, 1/beta ≈ {1 / beta / 1e9:.2f} GB/s",
          f"4 个 rank：alpha ≈ 每次调用 {1e6 * alpha:.0f} µs，1/beta ≈ {1 / beta / 1e9:.2f} GB/s"))
model = [alpha + b * beta for b in nbytes]
draw.lines(None, panels=[
    dict(series={say("2 ranks", "2 个 rank"): (nbytes, seconds[2]), say("4 ranks", "4 个 rank"): (nbytes, seconds[4]),
                 say("α + n·β (4 ranks)", "α + n·β（4 个 rank）"): (nbytes, model)},
         xlabel=say("message size (bytes)", "消息大小（字节）"), ylabel=say("seconds per all_reduce", "每次 all_reduce 的秒数"),
         title=say("all_reduce time", "all_reduce 耗时"), logx=True, logy=True),
    dict(series={say("2 ranks", "2 个 rank"): (nbytes, [b / t / 1e9 for b, t in zip(nbytes, seconds[2])]),
                 say("4 ranks", "4 个 rank"): (nbytes, [b / t / 1e9 for b, t in zip(nbytes, seconds[4])])},
         xlabel=say("message size (bytes)", "消息大小（字节）"), ylabel=say("GB/s (size / time)", "GB/s（大小 / 时间）"),
         title=say("Algorithm bandwidth", "算法带宽"), logx=True, logy=True),
])

# %% [markdown]
# Read the picture from left to right. For small messages the time hardly changes with size: that
# is α. At the other end it grows in proportion to the size: that is β. The bandwidth (size / time)
# is low for small messages, which spend their time on the fixed cost, and levels off for large
# ones. The lesson for DDP: **a few large all-reduces are cheaper than many small ones.** That is
# why DDP packs gradients into buckets instead of all-reducing each parameter on its own.
#
# On this machine "the network" is the loopback interface: moving bytes is CPU work (copies through
# the operating system's kernel), done by the same cores the ranks share. What that did to this run:

# %% [markdown] lang=zh
# 从左往右看这张图。消息很小时，耗时几乎不随大小变化：这就是 α。另一端，耗时与大小成正比：这就是 β。带宽（大小 / 时间）对小消息很低，因为它们的时间都花在固定开销上；对大消息则趋于平稳。对 DDP 的启示是：**少数几次大的 all-reduce 比许多次小的更便宜。**这就是为什么 DDP 把梯度装进桶里，而不是对每个参数单独做 all-reduce。
#
# 在这台机器上，“网络”是回环接口：搬运字节是 CPU 的工作（经过操作系统内核的拷贝），而且由各 rank 共享的那几个核心来完成。这对本次运行的影响如下：

# %%
from ddplab.shared.config import cores

small, large = [min(seconds[2][:3]), min(seconds[4][:3])], [seconds[2][-1], seconds[4][-1]]
print(say(f"The small all-reduces (4 to 64 kB) took {1e6 * small[0]:.0f} µs at best with 2 ranks and {1e6 * small[1]:.0f} µs with 4; "
          f"the largest (16 MB) {1e3 * large[0]:.1f} ms and {1e3 * large[1]:.1f} ms ({large[1] / large[0]:.2f}x). "
          f"This machine has {cores()} cores for the 4 ranks.",
          f"小的 all-reduce（4 到 64 kB）在 2 个 rank 时最快耗时 {1e6 * small[0]:.0f} µs，4 个 rank 时 {1e6 * small[1]:.0f} µs；"
          f"最大的（16 MB）分别为 {1e3 * large[0]:.1f} ms 和 {1e3 * large[1]:.1f} ms（{large[1] / large[0]:.2f} 倍）。"
          f"这台机器有 {cores()} 个核心供 4 个 rank 使用。"))
if small[1] > 1.3 * small[0]:
    print(say(f"α grew with the ranks ({small[1] / small[0]:.1f}x): a ring of 4 passes data on in 6 steps where 2 ranks "
              "need 2, and each step waits for a process that must be woken up and given a core.",
              f"α 随 rank 数增大（{small[1] / small[0]:.1f} 倍）：4 个 rank 的环要传 6 步，2 个 rank 只要 2 步，而每一步"
              "都要等待一个进程被唤醒并分到 CPU 核心。"))
else:
    print(say("α hardly grew from 2 to 4 ranks this time, although a ring of 4 has 6 steps where 2 ranks have 2: "
              "the fixed cost of a call (system calls, waking a process) dominated both.",
              "这一次 α 从 2 个 rank 到 4 个 rank 几乎没有增大，尽管 4 个 rank 的环有 6 步、2 个 rank 只有 2 步："
              "两者的时间都主要花在每次调用的固定开销（系统调用、唤醒进程）上。"))
if large[1] > 1.7 * large[0]:
    print(say(f"For 16 MB, 4 ranks took more than the ring's 1.5x of 2 ranks' time: each rank's bytes are copied by "
              f"the CPU, and 4 ranks on {cores()} cores each get less of it than 2 ranks do.",
              f"对 16 MB，4 个 rank 的耗时超过了环形算法预测的 2 个 rank 的 1.5 倍：每个 rank 的字节都要由 CPU 来拷贝，"
              f"而 4 个 rank 分 {cores()} 个核心，每个分到的 CPU 比 2 个 rank 时少。"))
elif large[1] >= 1.3 * large[0]:
    print(say("For 16 MB, 4 ranks took about the ring's 1.5x of 2 ranks' time: for large messages the time is the "
              "bytes each rank sends, 2(N-1)/N of the tensor.",
              "对 16 MB，4 个 rank 的耗时约为 2 个 rank 的 1.5 倍，正如环形算法所预测：大消息的耗时取决于每个 rank "
              "发送的字节数，即张量大小的 2(N-1)/N 倍。"))
else:
    print(say("For 16 MB, 4 ranks took less than the ring's 1.5x of 2 ranks' time: the 2-rank timing was slowed down "
              "by other programs on this machine (the timings are noisy on a shared machine). Run part 1 again.",
              "对 16 MB，4 个 rank 的耗时不到环形算法预测的 2 个 rank 的 1.5 倍：2 个 rank 计时的时候被本机上的其他"
              "程序拖慢了（在共享的机器上计时波动很大）。请再运行一次第 1 部分。"))

# %% [markdown]
# With NCCL between the GPUs of one machine, α is around ten microseconds and 1/β is tens to
# hundreds of GB/s, but the curves have the same shape.
#
# ## 2. DDP's gradient buckets
#
# DDP does not all-reduce each gradient on its own. It packs them into **buckets** and all-reduces
# a bucket as soon as all its gradients are ready in `backward()`, while the gradients of earlier
# layers are still being computed. A bucket takes whole gradients until it holds **at least** its
# cap, `bucket_cap_mb` mebibytes (1 MiB = 1,048,576 bytes), and then closes; the next gradient opens
# a new one. Smaller buckets start communicating earlier (more overlap with the backward computation)
# but pay α more often. By default (`bucket_cap_mb=None`) the first bucket's cap is 1 MiB, so that
# communication starts early, and the others' 25 MiB; a `bucket_cap_mb` you give is the cap of every
# bucket, the first included. A `CommCounter` hook counts the all-reduce calls of one step of the MLP
# 784-512-512-10 (669,706 parameters, 2.7 MB of gradients) for four caps.

# %% [markdown] lang=zh
# 在同一台机器的 GPU 之间使用 NCCL 时，α 大约是十微秒，1/β 是每秒几十到几百 GB，但曲线的形状是一样的。
#
# ## 2. DDP 的梯度桶
#
# DDP 并不对每个梯度单独做 all-reduce。它把梯度装进**桶**里，一个桶中的梯度在 `backward()` 中全部就绪后，马上对这个桶做 all-reduce，此时前面各层的梯度还在计算之中。一个桶只装入完整的梯度，直到装入的量**至少**达到它的上限 `bucket_cap_mb` MiB（1 MiB = 1,048,576 字节）才封口；下一个梯度再开一个新桶。桶越小，通信开始得越早（与反向计算重叠得越多），但付出 α 的次数也越多。默认情况下（`bucket_cap_mb=None`），第一个桶的上限是 1 MiB，好让通信尽早开始，其余的桶是 25 MiB；如果你给出 `bucket_cap_mb`，它就是每个桶的上限，第一个桶也不例外。下面用一个 `CommCounter` 钩子，统计 MLP 784-512-512-10（669,706 个参数，2.7 MB 梯度）在四种桶容量上限下每一步的 all-reduce 次数。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import CommCounter
from ddplab.workloads import mlp

torch.manual_seed(rank)
x, y = torch.randn(32, 784), torch.randint(0, 10, (32,))

def step(model):
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()      # DDP all-reduces the buckets in here

buckets = {}
for cap in (0.01, 0.1, 1, 25):
    model = DDP(mlp(), bucket_cap_mb=cap)
    counter = CommCounter()
    model.register_comm_hook(None, counter.hook)
    step(model)                                    # after its first step DDP rebuilds its buckets
    counter.reset()                                #   in the order the gradients became ready
    step(model)
    calls, sizes = counter.calls, list(counter.sizes)
    buckets[cap] = (calls, sizes, median_seconds(lambda: step(model), repeat=10))
grads = [p.numel() for p in reversed(list(model.parameters()))]   # elements per gradient, in the order they get ready

# %%
buckets = %ddp_gather buckets
grads = %ddp_gather grads
buckets, grads = buckets[0], grads[0]
for cap, (calls, sizes, t) in buckets.items():
    print(say(f"bucket_cap_mb={cap:<5g} {calls} all-reduce(s) per step, elements per bucket {sizes}, "
              f"forward+backward {1e3 * t:.1f} ms",
              f"bucket_cap_mb={cap:<5g} 每步 {calls} 次 all-reduce，每个桶的元素数 {sizes}，前向+反向 {1e3 * t:.1f} ms"))
calls = {cap: b[0] for cap, b in buckets.items()}
assert calls == {0.01: 3, 0.1: 2, 1: 2, 25: 1}, calls
assert all(sum(b[1]) == 669_706 for b in buckets.values())          # every gradient, exactly once per step
draw.bars(None, panels=[
    dict(values={f"{cap:g} MiB": b[0] for cap, b in buckets.items()}, ylabel=say("all-reduce calls", "all-reduce 次数"),
         title=say("All-reduces per step, by bucket_cap_mb", "每步 all-reduce 次数（按 bucket_cap_mb）")),
    dict(values={f"{cap:g} MiB": 1e3 * b[2] for cap, b in buckets.items()}, ylabel=say("milliseconds", "毫秒"),
         title=say("Forward + backward time", "前向 + 反向耗时")),
], fmt="{:.3g}")

# %% [markdown]
# A bucket is filled with whole gradients in the order they become ready (the last layer's first),
# and closed once it holds at least its cap. One tensor is never split between buckets. Here the two
# big weight matrices (512×512: 1 MiB, and 784×512: 1.5 MiB) each bring a bucket to a cap of 0.1 or
# 1 MiB on their own, so those two caps give the same 2 buckets. 0.01 MiB also closes a bucket
# after the small last layer, and 25 MiB holds everything in one. (The default is also 2 buckets
# here: its first bucket reaches its 1 MiB cap with the 512×512 matrix.)
#
# Two effects pull the times in opposite directions. Each extra all-reduce pays α again, which is
# large on loopback (part 1). Smaller buckets let communication overlap the rest of the backward pass, but that
# gains little when the same cores do both. Overlap pays off when communication runs on its own
# hardware (a GPU's copy engines and the network) while the cores compute. In this run:

# %% [markdown] lang=zh
# 桶按梯度就绪的顺序（最后一层的最先）装入完整的梯度，装入的量至少达到上限时就封口。一个张量永远不会被拆到两个桶里。这里的两个大权重矩阵（512×512：1 MiB；784×512：1.5 MiB）各自就能让一个桶达到 0.1 MiB 或 1 MiB 的上限，所以这两种上限得到的都是同样的 2 个桶。0.01 MiB 还会在很小的最后一层之后就让一个桶封口，而 25 MiB 的桶能装下全部梯度。（默认设置在这里也是 2 个桶：它的第一个桶装入 512×512 矩阵时达到 1 MiB 的上限。）
#
# 有两种效应把耗时往相反的方向拉。每多一次 all-reduce，就要再付一次 α，而在回环接口上 α 很大（第 1 部分）。桶越小，通信越能与反向计算的其余部分重叠，但当计算和通信都由同样的几个核心来完成时，这几乎没有好处。只有当通信在自己的硬件上进行（GPU 的拷贝引擎和网络）、同时 CPU 核心在计算时，重叠才划算。本次运行的结果：

# %%
times = {cap: 1e3 * b[2] for cap, b in buckets.items()}
fastest, slowest = min(times, key=times.get), max(times, key=times.get)
spread = times[slowest] / times[fastest] - 1
if spread < 0.15:
    print(say(f"The four caps took {min(times.values()):.1f} to {max(times.values()):.1f} ms: within {spread:.0%} of each "
              "other, which is within the noise of this machine. Neither effect won clearly.",
              f"四种上限的耗时在 {min(times.values()):.1f} 到 {max(times.values()):.1f} ms 之间：相差不超过 {spread:.0%}，"
              "在本机的噪声范围之内。两种效应都没有明显胜出。"))
elif calls[fastest] == min(calls.values()):
    print(say(f"The fewest all-reduces won: bucket_cap_mb={fastest:g} ({calls[fastest]} per step) took {times[fastest]:.1f} ms, "
              f"{spread:.0%} less than the slowest, {slowest:g} ({calls[slowest]} per step, {times[slowest]:.1f} ms). Each "
              "call pays α, and overlapping gains little when the same cores compute and communicate.",
              f"all-reduce 最少的胜出：bucket_cap_mb={fastest:g}（每步 {calls[fastest]} 次）耗时 {times[fastest]:.1f} ms，比最慢的 "
              f"{slowest:g}（每步 {calls[slowest]} 次，{times[slowest]:.1f} ms）少 {spread:.0%}。每次调用都要付 α，而计算和通信由"
              "同样的核心完成时，重叠几乎没有好处。"))
else:
    print(say(f"bucket_cap_mb={fastest:g} ({calls[fastest]} all-reduces per step) was fastest, {times[fastest]:.1f} ms against "
              f"{times[slowest]:.1f} ms for {slowest:g}: starting communication earlier, overlapped with the rest of the "
              "backward pass, paid off here, or the timings are noise. Run the cell again to see which.",
              f"bucket_cap_mb={fastest:g}（每步 {calls[fastest]} 次 all-reduce）最快，{times[fastest]:.1f} ms，而 {slowest:g} 为 "
              f"{times[slowest]:.1f} ms：要么更早开始通信、与反向计算的其余部分重叠在这里起了作用，要么这只是计时噪声。"
              "再运行一次这个单元格就能分辨。"))

# %% [markdown]
# ## 3. How much of a step is communication?
#
# `model.no_sync()` switches DDP's all-reduce off: a forward and its backward run inside it compute
# local gradients only (lesson 4 uses it for gradient accumulation; the forward must be inside too,
# as `local_step` does here). Timing the same forward and backward
# with and without it shows what the communication adds to a step. The bare all-reduce of 2.7 MB,
# from part 1's method, is timed too.

# %% [markdown] lang=zh
# ## 3. 一步中有多少是通信？
#
# `model.no_sync()` 关掉 DDP 的 all-reduce：在它里面运行的前向及其反向只计算本地梯度（第 4 课用它做梯度累积；前向也必须放在里面，正如这里的 `local_step` 所做的那样）。对同样的前向和反向计算，分别在有它和没有它的情况下计时，就能看出通信给一步增加了多少时间。同时还用第 1 部分的方法，对 2.7 MB 的单独 all-reduce 计时。

# %% [markdown]
# **Predict, then run.** One DDP step of this MLP on 4 ranks: a batch of 32 per rank, 2.7 MB of
# gradients. What share of the step's forward+backward time does communication add? That is
# (time with the all-reduce − time without) ÷ time with it. Answer in percent.

# %% [markdown] lang=zh
# **先预测，再运行。** 这个 MLP 在 4 个 rank 上的一步 DDP：每个 rank 32 个样本，2.7 MB 梯度。通信在这一步的前向+反向时间中占多少？即（有 all-reduce 的耗时 − 没有时的耗时）÷ 有 all-reduce 的耗时。请用百分数作答。

# %%
predict("12.comm_share", ...)    # the share of the DDP step that communication adds, in percent

# %%
%%ddp
model = DDP(mlp())                                  # default buckets: 2 all-reduces per step here
counter = CommCounter()
model.register_comm_hook(None, counter.hook)

def local_step():
    with model.no_sync():                           # no all-reduce: gradients stay local
        step(model)

step(model)
counter.reset()
local_step()
calls_no_sync = counter.calls                       # 0: nothing was sent
with_comm = median_seconds(lambda: step(model), repeat=10)
without_comm = median_seconds(local_step, repeat=10)
flat = torch.zeros(669_706)
allreduce_alone = median_seconds(lambda: dist.all_reduce(flat), repeat=10)

# %%
measured = %ddp_gather (with_comm, without_comm, allreduce_alone, calls_no_sync)
with_comm, without_comm, allreduce_alone, calls_no_sync = measured[0]     # the same on every rank
assert calls_no_sync == 0
share = (with_comm - without_comm) / with_comm
print(say(f"forward+backward: {1e3 * with_comm:.1f} ms with the all-reduce, {1e3 * without_comm:.1f} ms without; "
          f"the all-reduce of 2.7 MB alone: {1e3 * allreduce_alone:.1f} ms",
          f"前向+反向：有 all-reduce 时 {1e3 * with_comm:.1f} ms，没有时 {1e3 * without_comm:.1f} ms；"
          f"单独对 2.7 MB 做 all-reduce：{1e3 * allreduce_alone:.1f} ms"))
reveal("12.comm_share", float(100 * share), unit="%")
if share > 0.5:
    print(say(f"Communication added {share:.0%} to this step: for this small model it is most of each step.",
              f"通信占了这一步的 {share:.0%}：对这个小模型来说，它是每一步的主要部分。"))
elif share > 0.2:
    print(say(f"Communication added {share:.0%} to this step: a large part of it, though not most.",
              f"通信占了这一步的 {share:.0%}：虽然不是大部分，但也相当可观。"))
else:
    print(say(f"Communication added only {share:.0%} to this step: here the computing dominated (or the timings were noisy).",
              f"通信只占了这一步的 {share:.0%}：这里计算占主导（或者计时受到了噪声干扰）。"))
if with_comm > without_comm + allreduce_alone:
    print(say("The DDP step even cost more than the compute plus one bare all-reduce: with the default buckets DDP makes "
              "2 all-reduces here (part 2), each paying α, and it copies the gradients into its buckets and back.",
              "DDP 的一步甚至比计算加上一次单独的 all-reduce 还要贵：使用默认的桶时，DDP 在这里做 2 次 all-reduce"
              "（第 2 部分），每次都要付 α，而且它还要把梯度拷进桶里、再拷回来。"))
else:
    print(say("The DDP step cost no more than the compute plus one bare all-reduce: DDP overlapped part of its "
              "all-reduces with the backward pass, which made up for its 2 calls and its copies into buckets.",
              "DDP 的一步并不比计算加上一次单独的 all-reduce 更贵：DDP 把部分 all-reduce 与反向计算重叠起来，"
              "抵消了它的 2 次调用和拷进桶里的开销。"))
draw.bars({say("DDP step", "DDP 一步"): 1e3 * with_comm,
           say("no_sync step\n(compute only)", "no_sync 一步\n（只有计算）"): 1e3 * without_comm,
           say("all_reduce 2.7 MB\nalone", "单独 all_reduce\n2.7 MB"): 1e3 * allreduce_alone},
          ylabel=say("milliseconds (median)", "毫秒（中位数）"),
          title=say("Compute vs communication in one step", "一步中的计算与通信"), fmt="{:.1f}")

# %% [markdown]
# This is how data parallelism scales (lesson 14 measures it on 1, 2 and 4 ranks): computing the gradient of a batch on each of N ranks takes
# 1/N of the time, but the all-reduce does not shrink. A rank sends 2(N−1)/N of the gradients
# whatever the batch size. So scaling works well when the compute per step is large compared with
# the model's size: big batches, few parameters per FLOP, fast networks. When it is not, the
# remedies are the ones in the other lessons: accumulate gradients and all-reduce less often
# (lesson 4), send fewer bytes (16-bit gradients, lesson 7, and part 5 below), sync less often
# (local SGD, lesson 8).
#
# ## 4. Cutting compute: `torch.compile` on CPU
#
# `torch.compile` traces the model into a graph and generates fused kernels (C++ with OpenMP on
# CPU, which needs a C++ compiler such as gcc). It is one way to shrink the compute
# part of a step. Compiling takes time, so first measure that, on rank 0 only (`%%ddp --ranks 0`:
# the other ranks wait). The first call of the compiled model compiles the forward and the
# backward pass. Compiled kernels are cached on disk (in ddplab's ranks, `~/.cache/ddplab/torchinductor`, a folder
# only you can write; torch's own default is `/tmp/torchinductor_<user>`), so a
# second run of this notebook compiles faster.
#
# **Why `torch.compile`, and not TorchScript or XLA?** All three capture a model's computation as a
# graph and hand it to a compiler that fuses operations. **TorchScript** (`torch.jit.script`,
# `torch.jit.trace`) was PyTorch's first way to do it: it turns a model into a static program that
# runs without Python. It is deprecated: PyTorch's documentation sends you to `torch.export` for
# deployment, and `torch.compile` is the way to make training faster; TorchScript gets no new
# features. **XLA** is the compiler behind JAX and TensorFlow; PyTorch reaches it through the
# separate `torch_xla` package, which runs a model on an XLA device (a TPU, or XLA's GPU or CPU
# backend) and compiles the operations it records into fused XLA programs. That needs its own
# device and backend, not installed here. `torch.compile` is the one that does graph capture and
# fusion on CPU in plain PyTorch, so it stands in for both in this lesson.

# %% [markdown] lang=zh
# 数据并行就是这样扩展的（第 14 课会在 1、2、4 个 rank 上测量它）：在 N 个 rank 上各算一部分，计算一个批次的梯度只需 1/N 的时间，但 all-reduce 并不会缩短。无论批大小如何，一个 rank 都要发送梯度总量的 2(N−1)/N。所以，只有当每一步的计算量相对于模型大小很大时，扩展才有好的效果：大批次、每次浮点运算对应的参数少、网络快。否则，补救办法就是其他几课里讲的：累积梯度，减少 all-reduce 的次数（第 4 课）；发送更少的字节（16 位梯度，第 7 课，以及下面的第 5 部分）；降低同步频率（本地 SGD，第 8 课）。
#
# ## 4. 减少计算：CPU 上的 `torch.compile`
#
# `torch.compile` 把模型追踪成一张图，并生成融合后的内核（在 CPU 上是带 OpenMP 的 C++ 代码，需要 gcc 之类的 C++ 编译器）。它是缩短一步中计算部分的一种办法。编译要花时间，所以先只在 rank 0 上测量编译时间（`%%ddp --ranks 0`：其他 rank 等待）。编译后的模型第一次被调用时，会编译前向和反向计算。编译好的内核缓存在磁盘上（在 ddplab 的 rank 中是 `~/.cache/ddplab/torchinductor`，一个只有你能写入的文件夹；torch 自己的默认位置是 `/tmp/torchinductor_<user>`），所以第二次运行这个 notebook 时编译会更快。
#
# **为什么用 `torch.compile`，而不是 TorchScript 或 XLA？** 这三者都把模型的计算捕获成一张图，再交给一个会融合运算的编译器。**TorchScript**（`torch.jit.script`、`torch.jit.trace`）是 PyTorch 最早的做法：它把模型变成一个不需要 Python 就能运行的静态程序。它已被弃用：PyTorch 的文档让你在部署时改用 `torch.export`，而要让训练更快，应该用 `torch.compile`；TorchScript 不再增加新功能。**XLA** 是 JAX 和 TensorFlow 背后的编译器；PyTorch 要通过单独的 `torch_xla` 包才能用上它：这个包在 XLA 设备（TPU，或者 XLA 的 GPU、CPU 后端）上运行模型，把记录下来的运算编译成融合后的 XLA 程序。这需要它自己的设备和后端，而本机没有安装。在普通的 PyTorch 里、在 CPU 上做图捕获和运算融合的，正是 `torch.compile`，所以这一课用它来代表这两者。

# %%
%%ddp --ranks 0
import statistics
import time

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
xb = torch.randn(64, 256)

def forward_backward(m):
    m.zero_grad()
    out = m(xb)
    out.sum().backward()
    return out

from ddplab.lessons import no_room_to_compile

skipped = no_room_to_compile()                     # why not, in a session too small for Inductor's gcc; else None
compiled, compile_seconds, compile_error = None, None, None
if skipped is None:
    tic = time.perf_counter()
    try:
        compiled = torch.compile(net)              # the same parameters as net: compiling copies nothing
        forward_backward(compiled)                 # the first call compiles
        compile_seconds = time.perf_counter() - tic
    except Exception as exc:                       # e.g. no C++ compiler on the machine
        compiled, compile_error = None, f"{type(exc).__name__}: {str(exc)[:300]}"

# %% [markdown]
# Now compare: the compiled model's outputs and gradients must match eager mode (up to float
# rounding: fused kernels add in a different order), and we time both, one call at a time.

# %% [markdown] lang=zh
# 现在来比较：编译后模型的输出和梯度必须与 eager 模式一致（只差浮点舍入：融合后的内核按不同的顺序做加法），然后对两者计时，每次调用一次。

# %%
%%ddp --ranks 0
def median_ms(fn, repeat=30):
    fn()                                           # warm-up
    times = []
    for _ in range(repeat):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return 1e3 * statistics.median(times)

if compiled is not None:
    eager_out = forward_backward(net).detach()
    eager_grad = net[0].weight.grad.clone()
    compiled_out = forward_backward(compiled).detach()
    same = torch.allclose(eager_out, compiled_out, atol=1e-5) and torch.allclose(eager_grad, net[0].weight.grad, atol=1e-5)
    eager_ms, compiled_ms = median_ms(lambda: forward_backward(net)), median_ms(lambda: forward_backward(compiled))
    compile_report = dict(compiled=True, seconds=compile_seconds, same=same, eager_ms=eager_ms, compiled_ms=compiled_ms,
                          params=sum(p.numel() for p in compiled.parameters()),
                          zeros=sum((p == 0).sum().item() for p in compiled.parameters()))
else:
    compile_report = dict(compiled=False, error=compile_error, skipped=skipped)

# %%
found = %ddp_gather globals().get("compile_report")       # only rank 0 has one
report = found[0]
if report["compiled"]:
    compile_seconds, same, eager_ms, compiled_ms = (report[k] for k in ("seconds", "same", "eager_ms", "compiled_ms"))
    assert same                                     # compiling must not change the results
    print(say(f"compiling forward and backward took {compile_seconds:.1f} s once; then {eager_ms:.2f} ms (eager) vs "
              f"{compiled_ms:.2f} ms (compiled) per forward+backward; outputs and gradients match",
              f"编译前向和反向一次花了 {compile_seconds:.1f} 秒；之后每次前向+反向：eager {eager_ms:.2f} ms，编译后 "
              f"{compiled_ms:.2f} ms；输出和梯度一致"))
    if compiled_ms < 0.95 * eager_ms:
        print(say(f"Compiling saved {1 - compiled_ms / eager_ms:.0%} per step: the fused kernels combine the element-wise "
                  f"operations (the GELUs and their gradients) into fewer passes over memory, with no Python between "
                  f"them. It pays for itself after about {1e3 * compile_seconds / (eager_ms - compiled_ms):,.0f} steps.",
                  f"编译后每步节省了 {1 - compiled_ms / eager_ms:.0%}：融合后的内核把逐元素运算（GELU 及其梯度）合并起来，"
                  f"遍历内存的次数更少，运算之间也不再经过 Python。大约 {1e3 * compile_seconds / (eager_ms - compiled_ms):,.0f} "
                  "步之后，编译的开销就能赚回来。"))
    elif compiled_ms > 1.1 * eager_ms:
        print(say(f"The compiled model was slower here ({compiled_ms / eager_ms:.1f}x the time): on a model this small "
                  "there is little to fuse, and the compiled code adds its own costs to every call (guards that check "
                  "the inputs, calls into the generated kernels); on a busy machine, noise adds to the gap. Compiling "
                  "this model does not pay off.",
                  f"编译后的模型在这里反而更慢（耗时为 {compiled_ms / eager_ms:.1f} 倍）：这么小的模型没有多少可以融合的，"
                  "而编译后的代码在每次调用时都有自己的开销（检查输入的守卫、对生成的内核的调用）；机器繁忙时，噪声"
                  "还会让差距更大。编译这个模型并不划算。"))
    else:
        print(say("The compiled model is not clearly faster here (less than 5%): on a model this small there is little "
                  "to fuse. The matrix multiplications dominate, and they are the same library calls in eager and "
                  "compiled mode, so compiling this model does not pay off.",
                  "编译后的模型在这里没有明显变快（不到 5%）：这么小的模型没有多少可以融合的。矩阵乘法占了大部分时间，"
                  "而在 eager 模式和编译模式下，它们调用的是同样的库函数，所以编译这个模型并不划算。"))
elif report["skipped"]:
    print(report["skipped"] + say("; the rest of the lesson does not need it", "；本课其余部分不需要它"))
else:
    print(say(f"torch.compile failed here ({report['error']}); the rest of the lesson does not need it",
              f"torch.compile 在这里失败了（{report['error']}）；本课其余部分不需要它"))

# %% [markdown]
# `torch.compile` pays off for larger models with many element-wise operations between the matrix
# multiplications (normalisation, activations, attention), and with long training runs. With DDP,
# compile the DDP-wrapped model (`torch.compile(DDP(model))`): TorchDynamo then splits the graph at
# bucket boundaries so the all-reduces can still overlap the backward pass.
#
# **A common claim / what actually happens.** A common claim: TorchScript and XLA are techniques
# for sparse training. What actually happens: they are compilers. Like `torch.compile` above, they
# capture the computation as a graph and change *how* it is computed (fused kernels, less memory
# traffic, no Python between operations), never *what*: no weight is set to zero and no
# multiplication is skipped. The run above shows it for `torch.compile`: the compiled model has the
# same parameters as before, none of them made zero, and gives the same outputs and gradients as
# eager mode (printed below). Sparsity, setting weights to zero so that they can be stored or
# skipped, is what pruning does ([lesson 7](07_compression.ipynb)).

# %% [markdown] lang=zh
# 对于较大的模型，尤其是矩阵乘法之间有很多逐元素运算（归一化、激活函数、注意力）的模型，以及长时间的训练，`torch.compile` 才划算。与 DDP 一起使用时，要编译包装后的 DDP 模型（`torch.compile(DDP(model))`）：这样 TorchDynamo 会在桶的边界处切分计算图，all-reduce 仍然可以与反向计算重叠。
#
# **常见说法 / 实际情况。** 一种常见的说法是：TorchScript 和 XLA 是用于稀疏训练的技术。实际情况是：它们是编译器。和上面的 `torch.compile` 一样，它们把计算捕获成一张图，改变的是计算*怎样*进行（融合后的内核、更少的内存访问、运算之间不再经过 Python），而不是计算*什么*：没有任何权重被置零，也没有任何乘法被跳过。上面的运行对 `torch.compile` 展示了这一点：编译后的模型参数与之前相同，没有一个被置零，输出和梯度也与 eager 模式相同（见下面的输出）。稀疏性，即把权重置零以便少存储或跳过计算，是剪枝所做的事（[第 7 课](07_compression.ipynb)）。

# %%
if report["compiled"]:
    print(say(f"the compiled model: {report['params']:,} parameters, {report['zeros']} of them zero; outputs and "
              f"gradients equal to eager mode's: {report['same']}",
              f"编译后的模型：{report['params']:,} 个参数，其中为零的有 {report['zeros']} 个；输出和梯度与 eager 模式"
              f"相同：{report['same']}"))

# %% [markdown]
# ## 5. Steer a running job: compress the gradients while it trains
#
# DDP lets you replace what it does with each bucket: `model.register_comm_hook(state, hook)` makes
# DDP call `hook(state, bucket)` for every bucket of gradients, and the hook must all-reduce them and
# return a future of the result. torch ships hooks for the usual choices: `allreduce_hook` (what DDP
# does anyway) and `bf16_compress_hook` (cast the bucket to bf16, all-reduce half the bytes, cast
# back; lesson 7 compares the compressed gradients with float32 ones). The hook below picks one or
# the other at every step, and counts the bytes it hands to the all-reduce.
#
# The next cell trains **in the background** (`%%ddp --background` returns at once; the dashboard
# stays live) for `SECONDS` seconds, and reads a knob, `ddplab.knob("compress", False)`, that the
# check box below it sets on every rank. Tick it while the job runs: from the next step on, the
# ranks send bf16.
#
# **The ranks must agree before they change what they send.** A knob's new value reaches each rank
# at a slightly different moment. If each rank used its own reading, one rank could all-reduce a
# bf16 bucket while another all-reduces the same bucket in float32: the two collectives no longer
# match (another dtype, half the bytes), and the group fails or hangs. So at the start of every step
# only rank 0 reads the knob, and `dist.broadcast` hands its reading to every rank, in a tiny tensor
# that also carries rank 0's decision whether time is up. Every rank then uses the agreed value for
# the whole step. The broadcast costs one α per step; a job that cares could agree every k steps
# instead.

# %% [markdown] lang=zh
# ## 5. 操控正在运行的训练：在训练过程中压缩梯度
#
# DDP 允许你替换它对每个桶所做的处理：`model.register_comm_hook(state, hook)` 让 DDP 对每个梯度桶调用 `hook(state, bucket)`，钩子必须对这些梯度做 all-reduce，并返回结果的 future。torch 为常见的选择提供了现成的钩子：`allreduce_hook`（DDP 本来就做的事）和 `bf16_compress_hook`（把桶转换成 bf16，对一半的字节做 all-reduce，再转换回来；第 7 课比较了压缩后的梯度与 float32 梯度）。下面的钩子在每一步中选用其中之一，并统计它交给 all-reduce 的字节数。
#
# 下一个单元格在**后台**训练 `SECONDS` 秒（`%%ddp --background` 立即返回，仪表盘继续实时更新），并读取一个旋钮 `ddplab.knob("compress", False)`，这个旋钮由它下面的复选框在每个 rank 上设置。在训练运行时勾选它：从下一步起，各 rank 就改用 bf16 发送。
#
# **各 rank 必须先达成一致，才能改变发送的内容。** 旋钮的新值到达各 rank 的时刻略有不同。如果每个 rank 都用自己读到的值，就可能一个 rank 对某个桶做 bf16 的 all-reduce，而另一个 rank 对同一个桶做 float32 的 all-reduce：这两个集合通信不再匹配（数据类型不同，字节数差一半），整个组会出错或卡住。所以在每一步开始时，只由 rank 0 读取旋钮，再用 `dist.broadcast` 把它读到的值发给每个 rank；这个很小的张量里还带着 rank 0 对“时间是否已到”的判断。随后每个 rank 在整个这一步中都使用这个共同的值。这次广播每步要多付一次 α；在意这一点的训练也可以每 k 步才协商一次。

# %% [markdown]
# **Predict, then run.** In bf16 each step all-reduces half the bytes: 1.3 MB instead of 2.7 MB.
# Predict the median time of a bf16 step as a multiple of a float32 step's, on this machine
# (0.5 = twice as fast, 1 = no change).

# %% [markdown] lang=zh
# **先预测，再运行。** 用 bf16 时，每步 all-reduce 的字节减半：1.3 MB，而不是 2.7 MB。预测在这台机器上，bf16 一步耗时的中位数是 float32 一步的多少倍（0.5 表示快一倍，1 表示不变）。

# %%
predict("12.bf16_time", ...)    # a bf16 step's median time as a multiple of a float32 step's (1 = no change)

# %%
%%ddp --background
import time
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from ddplab.workloads import synthetic_classification

SECONDS = 5                                             # rank 0's clock decides when to stop

class Switch:                                           # the hook's state: what this step sends
    compress = False
    bytes = 0

def hook(switch, bucket):
    """DDP calls this for every bucket of gradients; it returns a future of the averaged bucket."""
    switch.bytes += bucket.buffer().numel() * (2 if switch.compress else 4)
    if switch.compress:
        return default_hooks.bf16_compress_hook(None, bucket)  # to bf16, all-reduce, back to float32
    return default_hooks.allreduce_hook(None, bucket)          # all-reduce float32, as DDP does

X, Y = synthetic_classification(n=1024, features=784, classes=10, seed=0).tensors
model = DDP(mlp(seed=0))
switch = Switch()
model.register_comm_hook(switch, hook)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
t0 = time.perf_counter()
for step in range(10**9):
    plan = torch.tensor([float(ddplab.knob("compress", False)), time.perf_counter() - t0 > SECONDS])
    dist.broadcast(plan, src=0)                         # everyone takes rank 0's reading
    switch.compress, stop = bool(plan[0]), bool(plan[1])
    if stop:
        break
    tic, switch.bytes = time.perf_counter(), 0
    start = (step * world_size + rank) * 32 % len(X)
    loss = nn.functional.cross_entropy(model(X[start:start + 32]), Y[start:start + 32])
    opt.zero_grad()
    loss.backward()                                     # the hook runs in here, once per bucket
    opt.step()
    ddplab.log(loss=loss, samples=32, bytes=switch.bytes, compressed=int(switch.compress),
               seen=int(ddplab.knob("compress", False)), ms=1e3 * (time.perf_counter() - tic))

# %%
toggle = knobs.toggle("compress", False, description=say("send gradients in bf16", "以 bf16 发送梯度"))
toggle

# %% [markdown]
# Run top to bottom without you, the notebook ticks the box itself: the next cell waits 2 seconds,
# sets `toggle.value = True` (what a click does), and `%ddp_wait` waits for the training to end and
# shows how it went. To play by hand, set `SECONDS = 60` above, run the two cells, and tick and
# untick the box while the dashboard runs.

# %% [markdown] lang=zh
# 如果没有人操作、从头到尾自动运行，notebook 会自己勾选这个复选框：下一个单元格等待 2 秒，设置 `toggle.value = True`（与点击一下的效果相同），然后 `%ddp_wait` 等待训练结束，并显示结果。想亲手试一试的话，把上面的 `SECONDS` 改成 60，运行这两个单元格，然后在仪表盘运行时反复勾选、取消勾选。

# %%
import time

time.sleep(2)
toggle.value = True
%ddp_wait

# %% [markdown]
# `%ddp_history` holds every point each rank logged: the agreed choice (`compressed`), the rank's own
# reading of the knob (`seen`), the bytes it handed to the all-reduce (`bytes`) and the step's time
# (`ms`).

# %% [markdown] lang=zh
# `%ddp_history` 保存了每个 rank 记录的每一个点：共同约定的选择（`compressed`）、该 rank 自己读到的旋钮值（`seen`）、它交给 all-reduce 的字节数（`bytes`），以及这一步的耗时（`ms`）。

# %%
import numpy as np

h = %ddp_history
h = h.where(cell=h.array("cell").max())                   # the points of the background cell
per_rank = [h.where(rank=r) for r in range(4)]
agreed = [r.array("compressed") for r in per_rank]
assert all(len(a) == len(agreed[0]) and (a == agreed[0]).all() for a in agreed)   # the same choice at every step
sent, ms, on = per_rank[0].array("bytes"), per_rank[0].array("ms"), agreed[0] == 1
assert on.any() and (~on).any(), "the job needs steps with and without compression: run the cells again"
assert set(sent[~on]) == {4 * 669_706} and set(sent[on]) == {2 * 669_706}      # bf16: exactly half the bytes
switched = int(np.argmax(on))                             # the first compressed step
seen_at = [int(np.argmax(r.array("seen") == 1)) for r in per_rank]
plain_ms, bf16_ms = np.median(ms[~on]), np.median(ms[on])
print(say(f"float32: {sent[~on][0] / 1e6:.2f} MB all-reduced per step, {plain_ms:.1f} ms per step (median); "
          f"bf16: {sent[on][0] / 1e6:.2f} MB per step, {bf16_ms:.1f} ms per step",
          f"float32：每步 all-reduce {sent[~on][0] / 1e6:.2f} MB，每步 {plain_ms:.1f} ms（中位数）；"
          f"bf16：每步 {sent[on][0] / 1e6:.2f} MB，每步 {bf16_ms:.1f} ms"))
reveal("12.bf16_time", float(bf16_ms / plain_ms), unit=say("× float32's time", "× float32 的耗时"))
print(say(f"the ranks first read the new value at their steps {seen_at}; all switched together at step {switched}",
          f"各 rank 第一次读到新值是在各自的第 {seen_at} 步；所有 rank 在第 {switched} 步一起切换"))
if len(set(seen_at)) > 1:
    print(say("had each used its own reading, some would have sent bf16 while others sent float32: a collective mismatch",
              "如果每个 rank 都用自己读到的值，就会有的 rank 发送 bf16、有的发送 float32：集合通信不匹配"))
else:
    print(say("this time every rank read it at the same step, by luck: run it again and tick the box yourself",
              "这一次各 rank 碰巧在同一步读到新值：再运行一次，自己勾选试试"))
if bf16_ms < 0.9 * plain_ms:
    print(say(f"bf16 steps were faster ({bf16_ms / plain_ms:.2f}x the time): half the bytes to copy through loopback "
              "saved more than casting the gradients to bf16 and back cost.",
              f"bf16 的步更快（耗时为 {bf16_ms / plain_ms:.2f} 倍）：经回环接口拷贝的字节减半，省下的时间超过了把梯度"
              "转换成 bf16 再转换回来的开销。"))
elif bf16_ms <= 1.1 * plain_ms:
    print(say(f"bf16 steps took about as long ({bf16_ms / plain_ms:.2f}x the time): on loopback, where 'the network' is "
              "a memory copy, halving the bytes saves about what the casts to bf16 and back cost. Between machines, "
              "where bytes are slow, halving them pays off.",
              f"bf16 的步耗时差不多（为 {bf16_ms / plain_ms:.2f} 倍）：在回环接口上，“网络”就是一次内存拷贝，字节减半"
              "省下的时间，大约正好抵消了与 bf16 之间来回转换的开销。在机器之间，字节传得慢，减半就划算了。"))
else:
    print(say(f"bf16 steps were slower ({bf16_ms / plain_ms:.2f}x the time): on loopback, where 'the network' is a "
              "memory copy, the casts to bf16 and back cost more than the halved bytes saved (or other programs took "
              "the cores). Between machines, where bytes are slow, halving them pays off.",
              f"bf16 的步反而更慢（耗时为 {bf16_ms / plain_ms:.2f} 倍）：在回环接口上，“网络”就是一次内存拷贝，与 "
              "bf16 之间来回转换的开销超过了字节减半省下的时间（或者是其他程序占用了 CPU 核心）。在机器之间，字节传得"
              "慢，减半就划算了。"))
steps = per_rank[0].array("step")
draw.lines(None, panels=[
    dict(series={f"rank {r}": (per_rank[r].array("step"), per_rank[r].array("bytes") / 1e6) for r in range(4)},
         xlabel=say("step", "步数"), ylabel=say("MB all-reduced in the step", "这一步 all-reduce 的 MB"),
         title=say("Bytes follow the switch, on every rank", "每个 rank 的字节数都跟随开关变化")),
    dict(series={say("rank 0", "rank 0"): (steps, ms)}, xlabel=say("step", "步数"),
         ylabel=say("milliseconds", "毫秒"), title=say("Time per step", "每步耗时")),
])

# %% [markdown]
# ### The same job on the timeline
#
# The background cell has a timeline too (lesson 4 introduces it): every bucket's all-reduce, on
# every rank, at every step, with the part spent waiting for the last rank to arrive. Its steps are
# the steps `ddplab.log` counted, so the history's `compressed` column says which of them sent bf16.
# Displayed, it draws the last steps (bf16 ones) as swimlanes: forward, backward and optimizer on each
# rank's upper row; under them the small broadcast that opens each step and the two buckets'
# all-reduces, the waiting shaded red. (No rank is slower by design here: if the verdict names one,
# it is the rank that other programs on this machine held up most.)

# %% [markdown] lang=zh
# ### 在时间线上看同一个训练
#
# 后台单元格也有自己的时间线（第 4 课介绍过）：每一步、每个 rank 上每个桶的 all-reduce，以及其中等待最后一个 rank 到达的那一部分。时间线上的步就是 `ddplab.log` 计数的步，所以历史记录中的 `compressed` 列说明了其中哪些步发送的是 bf16。显示出来的时间线把最后几步（都是 bf16 的步）画成泳道：每个 rank 上面一行是前向、反向和优化器，下面一行是每步开头那次很小的广播和两个桶的 all-reduce，等待的部分用红色标出。（这里没有哪个 rank 被故意放慢：如果结论点了某个 rank 的名，那只是被本机其他程序拖慢得最多的 rank。）

# %%
tl = %ddp_timeline
tl

# %% [markdown]
# Two things to read from the spans. **The bytes.** A span's `bytes` is what its all-reduce put on
# the wire: the whole float32 bucket, or, where the hook cast it to bf16, exactly half of it. They
# agree with what `hook` counted itself, step by step. **The time.** A span runs from the moment
# its bucket was ready to the moment its all-reduce completed, casts to bf16 and back included.
# Less its `wait`, it is the all-reduce itself, once every rank had arrived: the part that the
# number of bytes can change. The waiting depends on when the ranks arrive, not on what they send.
# The timeline times a DDP cell's first 20 steps, then one step in 10, each whole: timing each bucket
# costs its rank a little, and a sample says the same (`%ddp_timeline --every 1` times every step).
# The check below reads the steps it timed.

# %% [markdown] lang=zh
# 从这些时间段中可以读出两样东西。**字节数。** 时间段的 `bytes` 是它的 all-reduce 实际发送的字节数：要么是整个 float32 桶，要么（钩子把它转换成 bf16 时）恰好是它的一半。它们与 `hook` 自己逐步统计的字节数一致。**时间。** 一个时间段从它的桶就绪的那一刻开始，到它的 all-reduce 完成为止，其中包括与 bf16 之间的来回转换。减去它的 `wait`，就是所有 rank 都到达之后 all-reduce 本身所用的时间：字节数能影响的正是这一部分。等待则取决于各 rank 何时到达，与它们发送什么无关。时间线会记录 DDP 单元格的前 20 步，之后每 10 步记录一步，每一步都完整记录：给每个桶计时会让它的 rank 多花一点时间，而抽样得出的结论是一样的（`%ddp_timeline --every 1` 会记录每一步）。下面的检查读取的是被记录的那些步。

# %%
import statistics

mode = dict(zip(steps.astype(int).tolist(), on.tolist()))    # step -> sent bf16?
spans = {}                                                  # (rank, step) -> {bucket index: its all-reduce span}
for s in tl.records():
    if s["phase"] == "comm" and s["bucket"] is not None:
        spans.setdefault((s["rank"], s["step"]), {})[s["bucket"]] = s
for r in range(4):
    counted = dict(zip(per_rank[r].array("step").astype(int).tolist(), per_rank[r].array("bytes").tolist()))
    timed = sorted(step for rr, step in spans if rr == r and step >= 1)   # step 0: one bucket, before DDP rebuilt them
    assert timed[:19] == list(range(1, 20)) and all(step % 10 == 0 for step in timed[19:]), timed
    for step in timed:
        found = spans[(r, step)]
        half = 2 if mode[step] else 1                       # bf16 sends half of each float32 bucket
        assert {b: s["bytes"] for b, s in found.items()} == {0: 1_071_144 // half, 1: 1_607_680 // half}
        assert counted[step] * half == 4 * 669_706          # the hook counted the same: all of it, or exactly half
        assert sum(s["bytes"] for s in found.values()) == counted[step]

def median_ms(bucket, compressed, part):
    """The median over ranks and steps (from step 1) of part(span) for one bucket, in ms."""
    return 1e3 * statistics.median(part(found[bucket]) for (r, step), found in spans.items()
                                   if step >= 1 and mode.get(step) == compressed)

alone = {(b, c): median_ms(b, c, lambda s: s["end"] - s["start"] - s["wait"]) for b in (0, 1) for c in (False, True)}
waited = {(b, c): median_ms(b, c, lambda s: s["wait"]) for b in (0, 1) for c in (False, True)}
for b, size in ((0, 1_071_144), (1, 1_607_680)):
    print(say(f"bucket {b} ({size / 1e6:.2f} MB of float32 gradients): the all-reduce once every rank had arrived "
              f"{alone[b, False]:.1f} ms sending float32, {alone[b, True]:.1f} ms sending bf16 ({size / 2e6:.2f} MB); "
              f"waiting for the last rank {waited[b, False]:.1f} and {waited[b, True]:.1f} ms (medians)",
              f"桶 {b}（{size / 1e6:.2f} MB 的 float32 梯度）：所有 rank 到达之后的 all-reduce，发送 float32 时 "
              f"{alone[b, False]:.1f} 毫秒，发送 bf16（{size / 2e6:.2f} MB）时 {alone[b, True]:.1f} 毫秒；等待最后一个 "
              f"rank 分别为 {waited[b, False]:.1f} 和 {waited[b, True]:.1f} 毫秒（中位数）"))
ratio = (alone[0, True] + alone[1, True]) / (alone[0, False] + alone[1, False])
if ratio < 0.9:
    print(say(f"With half the bytes the all-reduces took {ratio:.2f}x the time: on this machine the bytes not moved "
              "saved more than the casts to bf16 and back cost.",
              f"字节减半后，all-reduce 的耗时变为原来的 {ratio:.2f} 倍：在这台机器上，少搬运的字节省下的时间，超过了与 "
              "bf16 之间来回转换的开销。"))
elif ratio <= 1.1:
    print(say(f"With half the bytes the all-reduces took about as long ({ratio:.2f}x the time): the casts to bf16 and back "
              "cost about what the halved bytes saved on loopback.",
              f"字节减半后，all-reduce 的耗时差不多（为原来的 {ratio:.2f} 倍）：在回环接口上，与 bf16 之间来回转换的"
              "开销，大约抵消了字节减半省下的时间。"))
else:
    print(say(f"With half the bytes the all-reduces took longer ({ratio:.2f}x the time): the casts to bf16 and back cost "
              "more than the halved bytes saved on loopback, or other programs took the cores.",
              f"字节减半后，all-reduce 反而更慢了（耗时为原来的 {ratio:.2f} 倍）：在回环接口上，与 bf16 之间来回转换"
              "的开销超过了字节减半省下的时间，或者是其他程序占用了 CPU 核心。"))
label = {False: "float32", True: "bf16"}
draw.bars(None, panels=[
    dict(values={f"{say('bucket', '桶')} {b}\n{label[c]}": alone[b, c] for b in (0, 1) for c in (False, True)},
         ylabel=say("milliseconds (median)", "毫秒（中位数）"),
         title=say("All-reduce, once every rank had arrived", "所有 rank 到达之后的 all-reduce")),
    dict(values={f"{say('bucket', '桶')} {b}\n{label[c]}": waited[b, c] for b in (0, 1) for c in (False, True)},
         ylabel=say("milliseconds (median)", "毫秒（中位数）"), title=say("Waiting for the last rank", "等待最后一个 rank")),
], fmt="{:.1f}")

# %% [markdown]
# Compression shrinks only the part of communication that moves bytes. Between machines, where
# bytes are slow and the casts are cheap next to them, that is most of it; on loopback it may be
# little. Neither the fixed cost α of each all-reduce nor the waiting for a slower rank (lesson 10)
# gets any smaller.

# %% [markdown] lang=zh
# 压缩只能缩短通信中搬运字节的那一部分。在机器之间，字节传得慢，数据类型转换相比之下很便宜，这一部分占了通信的大头；在回环接口上，它可能只占一小部分。而每次 all-reduce 的固定开销 α，以及等待较慢 rank 的时间（第 10 课），都丝毫不会减少。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why.
#
# **12.1** In a ring all-reduce of N ranks, how many bytes does each rank send (part 1)? Part 1's
# largest message was 16 MB. How many MB would each rank send to all-reduce it on **3** ranks? Answer
# with a number (MB).

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。
#
# **12.1** 在 N 个 rank 的环形 all-reduce 中，每个 rank 发送多少字节（第 1 部分）？第 1 部分最大的消息是 16 MB。在 **3** 个 rank 上对它做 all-reduce，每个 rank 要发送多少 MB？请写一个数（单位 MB）。

# %%
answer = ...    # MB each of 3 ranks would send to all-reduce the 16 MB message
check("12.1", answer, nbytes=nbytes[-1], ranks=3)

# %% [markdown]
# **12.2** Predict from your fit of part 1: how long would one all-reduce of 64 MB take on the 4
# ranks, t ≈ α + n·β with the α and 1/β printed there? Answer with a number of milliseconds.
# (Then time it in a `%%ddp` cell of your own with `median_seconds`: how close is the model?)

# %% [markdown] lang=zh
# **12.2** 用第 1 部分拟合的结果来预测：在 4 个 rank 上，对 64 MB 做一次 all-reduce 需要多长时间？按 t ≈ α + n·β 计算，α 和 1/β 用那里打印的值。请写一个毫秒数。（然后在你自己的 `%%ddp` 单元格里用 `median_seconds` 计时：这个模型有多准？）

# %%
answer = ...    # milliseconds for a 64 MB all-reduce on 4 ranks, by the fitted model
check("12.2", answer, alpha=alpha, beta=beta)

# %% [markdown]
# **12.3** In the order they become ready, the MLP's gradients have 10, 5,120, 512, 262,144, 512 and
# 401,408 elements of 4 bytes. How many all-reduces per step would DDP make with
# `bucket_cap_mb=0.001`? Work it out from the rule of part 2 (a bucket closes once it holds at least
# its cap), then try it. Answer with a whole number.

# %% [markdown] lang=zh
# **12.3** 按就绪的顺序，这个 MLP 各梯度的元素个数为 10、5,120、512、262,144、512 和 401,408，每个元素 4 字节。使用 `bucket_cap_mb=0.001` 时，DDP 每步要做几次 all-reduce？用第 2 部分的规则（一个桶装入的量至少达到上限时就封口）算出来，再试一试。请写一个整数。

# %%
answer = ...    # all-reduces per step with bucket_cap_mb=0.001
check("12.3", answer, grads=grads, cap_mb=0.001)

# %% [markdown]
# **12.4** Repeat part 3 with `mlp(hidden=2048)` and a batch of 256 instead of 32. Does communication
# become a larger or a smaller share of the step? Answer with a letter:
#
# - (a) larger: the model has about 9 times as many parameters, so the all-reduce sends about 9 times
#   the bytes
# - (b) smaller: the compute grows with the parameters *and* with the batch, the bytes with the
#   parameters only
# - (c) about the same: compute and communication both grow with the number of parameters

# %% [markdown] lang=zh
# **12.4** 用 `mlp(hidden=2048)` 和 256（而不是 32）的批大小重做第 3 部分。通信在一步中所占的比例变大了还是变小了？请写一个字母：
#
# - (a) 变大：模型的参数约为原来的 9 倍，all-reduce 发送的字节也约为原来的 9 倍
# - (b) 变小：计算量随参数数量*和*批大小增长，而字节数只随参数数量增长
# - (c) 差不多：计算和通信都随参数数量增长

# %%
answer = ...    # a, b or c
check("12.4", answer, share=share)

# %%
%ddp_stop
