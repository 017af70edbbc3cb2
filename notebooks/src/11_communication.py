# %% [markdown]
# # Lesson 11 · Communication cost and scaling
#
# **In short.** Every DDP step all-reduces the gradients, so communication is part of the cost of
# every step. You measure it here. First the all-reduce alone, for tensors from 4 KB to 16 MB, on
# groups of 2 and 4 ranks: small messages cost a fixed *latency*, large ones are limited by
# *bandwidth*. Then DDP's gradient buckets (how many all-reduces one step makes), the share of a
# step that is communication (`no_sync` switches it off), and finally `torch.compile`, one way
# to make the compute part faster. All numbers are measured live on this machine (4 processes
# sharing its cores, talking over TCP on loopback), so they are noisy: read them as rough sizes.
#
# **简介。** DDP 每一步都要对梯度做 all-reduce，所以通信是每一步开销的一部分。这一课来测量它。
# 先单独测 all-reduce：张量从 4 KB 到 16 MB，进程组分别有 2 个和 4 个 rank。小消息的开销主要是
# 固定的*延迟*，大消息则受*带宽*限制。然后看 DDP 的梯度分桶（每一步做几次 all-reduce）、
# 通信占一步时间的比例（用 `no_sync` 关掉通信来比较），最后看 `torch.compile`，这是加快计算部分的
# 一种办法。所有数字都是在本机实时测得的（4 个进程共享 CPU 核，通过回环 TCP 通信），有波动，
# 只能当作大致的量级。
#
# **You will see:** all-reduce time and bandwidth against message size (log-log), all-reduce
# calls per step for four bucket sizes, a step with and without communication, and the time
# `torch.compile` takes to compile and what it saves.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

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
# steps the summed chunks go around the ring (an all-gather). Each rank sends **2(N−1)/N** times
# the tensor's size: 1× for N = 2, 1.5× for N = 4, and never more than 2×, however many ranks there
# are. The number of steps, 2(N−1), grows with N, so the latency part grows with the number of ranks.
#
# To time a group of 2, make a sub-group with `dist.new_group([0, 1])`. **Every** rank must call
# `new_group`, even ranks that are not in it; only members then use it. `median_seconds` lines the
# ranks up with a barrier before each run and returns the slowest rank's median; ranks 2 and 3
# time nothing while ranks 0 and 1 all-reduce in their pair.

# %%
%%ddp
import torch._dynamo   # (ddplab loads it in the background after %ddp_start: wait for that, for quiet timings)
from ddplab.lessons.ranks import median_seconds

pair = dist.new_group([0, 1])                     # called on all 4 ranks
sizes = [1_000, 4_000, 16_000, 64_000, 250_000, 1_000_000, 4_000_000]   # float32 elements
seconds = {2: [], 4: []}
for n in sizes:
    x = torch.ones(n)
    seconds[2].append(median_seconds(lambda: dist.all_reduce(x, group=pair) if rank < 2 else None, repeat=7, warmup=3))
    seconds[4].append(median_seconds(lambda: dist.all_reduce(x), repeat=7, warmup=3))
print("done" if rank else "4 ranks: " + ", ".join(f"{n:,} floats {1e3 * t:.2f} ms" for n, t in zip(sizes, seconds[4])))

# %%
seconds = %ddp_gather seconds
sizes = %ddp_gather sizes
seconds, sizes = seconds[0], sizes[0]                # every rank got the same (the slowest rank's) times
nbytes = [4 * n for n in sizes]
for ranks in (2, 4):
    print(f"{ranks} ranks: " + ", ".join(f"{b / 1e6:g} MB {1e3 * t:.2f} ms" for b, t in zip(nbytes, seconds[ranks])))

# a rough fit of t = alpha + n * beta on the 4-rank curve: alpha is the time of the smallest message,
# beta the slope between the two largest
alpha = seconds[4][0]
beta = (seconds[4][-1] - seconds[4][-2]) / (nbytes[-1] - nbytes[-2])
print(f"4 ranks: alpha ≈ {1e6 * alpha:.0f} µs per call, 1/beta ≈ {1 / beta / 1e9:.2f} GB/s")
print(f"16 MB on 4 ranks vs 2 ranks: {seconds[4][-1] / seconds[2][-1]:.2f}× the time (the ring alone predicts 1.5×)")
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
# the operating system's kernel), and 4 ranks share 2 cores. So α includes waiting for a core
# (a ring of 4 passes data on in at least 6 steps, each to a process that must be woken up; 2 ranks
# have a core each). For large messages,
# 4 ranks took more than the ring's 1.5× of 2 ranks' time in every run we made (between 1.8× and
# 3.4×), because each of the 4 gets less CPU.
# With NCCL between the GPUs of one machine, α is around ten microseconds and 1/β is tens to
# hundreds of GB/s, but the curves have the same shape.
#
# ## 2. DDP's gradient buckets
#
# DDP does not all-reduce each gradient on its own. It packs them into **buckets** of about
# `bucket_cap_mb` megabytes and all-reduces a bucket as soon as all its gradients
# are ready in `backward()`, while the gradients of earlier layers are still being computed.
# Smaller buckets start communicating earlier (more overlap with the backward computation) but
# pay α more often. By default (`bucket_cap_mb=None`) the first bucket holds about 1 MB, so that
# communication starts early, and the others 25 MB. A `CommCounter` hook counts the all-reduce calls
# of one step of the MLP 784-512-512-10 (669,706 parameters, 2.7 MB of gradients) for four caps.

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
if rank == 0:
    for cap, (calls, sizes, t) in buckets.items():
        print(f"bucket_cap_mb={cap:<5g} {calls} all-reduce(s) per step, elements per bucket {sizes}, "
              f"forward+backward {1e3 * t:.1f} ms")

# %% [markdown]
# A bucket is filled with whole gradients in the order they become ready (the last layer's first),
# and closed once it holds at least `bucket_cap_mb`. One tensor is never split between buckets.
# Here the two big weight matrices (512×512, 1 MB, and 784×512, 1.6 MB) each fill a bucket of
# 0.1 MB or 1 MB on their own, so those two caps give the same 2 buckets. 0.01 MB also puts the
# small last layer in a bucket of its own, and 25 MB holds everything in one. (The default is
# also 2 buckets here: its 1 MB first bucket closes after the 512×512 matrix.)

# %%
buckets = %ddp_gather buckets
buckets = buckets[0]
calls = {cap: b[0] for cap, b in buckets.items()}
assert calls == {0.01: 3, 0.1: 2, 1: 2, 25: 1}, calls
assert all(sum(b[1]) == 669_706 for b in buckets.values())          # every gradient, exactly once per step
print("all-reduce calls per step:", calls)
draw.bars(None, panels=[
    dict(values={f"{cap:g} MB": b[0] for cap, b in buckets.items()}, ylabel=say("all-reduce calls", "all-reduce 次数"),
         title=say("All-reduces per step, by bucket_cap_mb", "每步 all-reduce 次数（按 bucket_cap_mb）")),
    dict(values={f"{cap:g} MB": 1e3 * b[2] for cap, b in buckets.items()}, ylabel=say("milliseconds", "毫秒"),
         title=say("Forward + backward time", "前向 + 反向耗时")),
], fmt="{:.3g}")

# %% [markdown]
# The times differ by a few milliseconds, and which cap is fastest changed from run to run when we
# ran this lesson: on this machine the differences are within the noise. Two effects pull in
# opposite directions. Each extra all-reduce pays α again, which is large here. Smaller buckets
# let communication overlap the rest of the backward pass, but that gains little when the same
# 2 cores do both. Overlap pays off when communication runs on its own hardware (a GPU's copy
# engines and the network) while the cores compute.
#
# ## 3. How much of a step is communication?
#
# `model.no_sync()` switches DDP's all-reduce off: inside it, `backward()` only computes local
# gradients (lesson 4 uses it for gradient accumulation). Timing the same forward and backward
# with and without it shows what the communication adds to a step. The bare all-reduce of 2.7 MB,
# from part 1's method, is timed too.

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
print(f"forward+backward: {1e3 * with_comm:.1f} ms with the all-reduce, {1e3 * without_comm:.1f} ms without; "
      f"the all-reduce of 2.7 MB alone: {1e3 * allreduce_alone:.1f} ms")
print(f"communication added {share:.0%} to this step")
draw.bars({say("DDP step", "DDP 一步"): 1e3 * with_comm,
           say("no_sync step\n(compute only)", "no_sync 一步\n（只有计算）"): 1e3 * without_comm,
           say("all_reduce 2.7 MB\nalone", "单独 all_reduce\n2.7 MB"): 1e3 * allreduce_alone},
          ylabel=say("milliseconds (median)", "毫秒（中位数）"),
          title=say("Compute vs communication in one step", "一步中的计算与通信"), fmt="{:.1f}")

# %% [markdown]
# For this small model, communication is most of each step. The DDP step even costs more than the
# compute plus one bare all-reduce: with the default buckets DDP makes 2 all-reduces here (part 2),
# each paying α, and it copies the gradients into its buckets and back. This is how data parallelism
# scales: computing the gradient of a batch on each of N ranks takes 1/N of the time, but the
# all-reduce does not shrink. A rank sends 2(N−1)/N of the gradients whatever the batch size. So
# scaling works well when the compute per step is large compared with the model's size: big
# batches, few parameters per FLOP, fast networks. When it is not, the remedies are the ones in
# the other lessons: accumulate gradients and all-reduce less often (lesson 4), send fewer bytes
# (16-bit gradients, lesson 7), sync less often (local SGD, lesson 8).
#
# ## 4. Cutting compute: `torch.compile` on CPU
#
# `torch.compile` traces the model into a graph and generates fused kernels (C++ with OpenMP on
# CPU, which needs a C++ compiler; this machine has gcc). It is one way to shrink the compute
# part of a step. Compiling takes time, so first measure that, on rank 0 only (`%%ddp --ranks 0`:
# the other ranks wait). The first call of the compiled model compiles the forward and the
# backward pass. Compiled kernels are cached on disk (in `/tmp/torchinductor_<user>`), so a
# second run of this notebook compiles faster.

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

tic = time.perf_counter()
try:
    compiled = torch.compile(net)                  # the same parameters as net: compiling copies nothing
    forward_backward(compiled)                     # the first call compiles
    compile_seconds = time.perf_counter() - tic
    print(f"compiling forward and backward took {compile_seconds:.1f} s")
except Exception as exc:                           # e.g. no C++ compiler on the machine
    compiled, compile_seconds = None, None
    print(f"torch.compile failed here ({type(exc).__name__}): {str(exc)[:300]}")

# %% [markdown]
# Now compare: the compiled model's outputs and gradients must match eager mode (up to float
# rounding: fused kernels add in a different order), and we time both, one call at a time.

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
    print(f"outputs and gradients match: {same}; forward+backward: eager {eager_ms:.2f} ms, compiled {compiled_ms:.2f} ms")
    compile_report = dict(compiled=True, seconds=compile_seconds, same=same, eager_ms=eager_ms, compiled_ms=compiled_ms)
else:
    compile_report = dict(compiled=False)

# %%
found = %ddp_gather globals().get("compile_report")       # only rank 0 has one
report = found[0]
if report["compiled"]:
    compile_seconds, same, eager_ms, compiled_ms = (report[k] for k in ("seconds", "same", "eager_ms", "compiled_ms"))
    assert same                                     # compiling must not change the results
    print(f"compile: {compile_seconds:.1f} s once; then {eager_ms:.2f} ms (eager) vs {compiled_ms:.2f} ms (compiled) "
          "per forward+backward")
    if compiled_ms < 0.95 * eager_ms:
        print(f"compiling pays for itself after about {1e3 * compile_seconds / (eager_ms - compiled_ms):,.0f} steps")
    else:
        print("the compiled model is not clearly faster here (less than 5%), so compiling this model does not pay off")
else:
    print("torch.compile is not available here; the rest of the lesson does not need it")

# %% [markdown]
# On a model this small there is little to fuse: the matrix multiplications dominate and are the
# same library calls in eager and compiled mode, so compiling buys little or nothing, and the compile
# time takes many steps to pay back. `torch.compile` pays off for larger models with many
# element-wise operations between the matrix multiplications (normalisation, activations,
# attention), and with long training runs. With DDP, compile the DDP-wrapped model
# (`torch.compile(DDP(model))`): TorchDynamo then splits the graph at bucket boundaries so the
# all-reduces can still overlap the backward pass.
#
# ## Exercises
#
# 1. Time `dist.broadcast(x, src=0)` and `dist.all_gather_into_tensor` for the same sizes. Which
#    is cheapest for large messages, and why (how many bytes does each rank send)?
# 2. Repeat part 3 with `mlp(hidden=2048)` and a batch of 256. Is communication a larger or smaller share
#    of the step? Why?
# 3. Find a `bucket_cap_mb` for which this MLP needs 4 all-reduces per step, or explain why there
#    is none. (Its gradients, in the order they become ready: 10, 5,120, 512, 262,144, 512 and
#    401,408 elements of 4 bytes.)
#
# ## 练习
#
# 1. 对同样的大小测量 `dist.broadcast(x, src=0)` 和 `dist.all_gather_into_tensor` 的耗时。
#    对大消息哪个最便宜？为什么（每个 rank 发送多少字节）？
# 2. 用 `mlp(hidden=2048)` 和 256 的批大小重做第 3 部分。通信占一步时间的比例变大还是变小？为什么？
# 3. 找一个 `bucket_cap_mb`，使这个 MLP 每步需要 4 次 all-reduce；或者说明为什么找不到。
#    （按梯度就绪的顺序，各梯度的元素个数为 10、5,120、512、262,144、512 和 401,408，每个元素 4 字节。）

# %%
%ddp_stop
