# %% [markdown]
# # Lesson 5 · Mixed precision on CPU and DataLoader workers
#
# **In short.** Two ways to make each training step cheaper, measured on this machine. (1) **Mixed
# precision**: inside `torch.autocast("cpu", dtype=torch.bfloat16)`, matrix multiplications run in
# bfloat16 (16 bits) while parameters, gradients and the optimizer stay float32. bf16 keeps
# float32's exponent range, so unlike float16 on GPUs it needs no loss scaler. Whether it is faster
# depends on the CPU: only CPUs with native bf16 instructions (AVX512-BF16, AMX) gain; elsewhere
# bf16 runs through slower fallback code and can be *slower*. (2) **DataLoader workers**: when reading a sample
# is slow (a file to read, an image to decode), `num_workers=2` lets two helper processes per rank
# prepare batches while the rank trains.
#
# **简介。** 两种让每个训练步更便宜的方法，都在本机上实测。(1) **混合精度**：在
# `torch.autocast("cpu", dtype=torch.bfloat16)` 中，矩阵乘法以 bfloat16（16 位）计算，而参数、梯度和
# 优化器仍是 float32。bf16 的指数范围与 float32 相同，所以不像 GPU 上的 float16 那样需要损失缩放。
# 是否更快取决于 CPU：只有带原生 bf16 指令（AVX512-BF16、AMX）的 CPU 才会受益；在其他 CPU 上 bf16
# 运算走较慢的替代实现，可能反而*更慢*。(2) **DataLoader 工作进程**：读取一个样本很慢时（读文件、解码图片），
# `num_workers=2` 让每个 rank 有两个辅助进程在它训练的同时准备批次。
#
# **You will see:** float32 and bf16 loss curves side by side and their samples/s; samples/s of a
# slow data set read with 0 and 2 workers per rank, and which processes did the reading.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %% [markdown]
# This lesson uses **2 ranks**, not 4: it measures speed, and this machine has 2 cores. With 4 ranks
# (plus 2 loader workers each, 12 processes) on 2 cores we mostly measured how the processes share
# the cores: when we tried, 2 workers per rank gave no gain over none, and the bf16 comparison took
# 4 times as long. With 2 ranks each rank has a core of its own.

# %%
%ddp_start 2

# %% [markdown]
# ## What this CPU can do in bf16
#
# `torch.backends.cpu.get_cpu_capability()` names the widest vector instructions PyTorch uses here,
# and `torch.ops.mkldnn._is_mkldnn_bf16_supported()` (a private helper) says whether oneDNN, the
# library PyTorch uses for bf16 matrix multiplications on CPU, has native bf16 kernels for this CPU.

# %%
%%ddp --ranks 0
flags = open("/proc/cpuinfo").read().split()
print("CPU capability:", torch.backends.cpu.get_cpu_capability())
print("oneDNN native bf16:", torch.ops.mkldnn._is_mkldnn_bf16_supported())
print("avx512_bf16 / amx_bf16 in /proc/cpuinfo:", "avx512_bf16" in flags, "/", "amx_bf16" in flags)

# %% [markdown]
# ## float32 vs bf16 autocast, with DDP
#
# The MLP 784-512-512-10 (`ddplab.workloads.mlp`), the same initial parameters and the same
# batches (64 per rank), 40 steps each way. The only difference is the `autocast` context around the
# forward pass and the loss; `backward()` goes outside it, as PyTorch recommends (autograd runs each
# operation's backward in the dtype its forward used). The data set has 1,024 samples, so 40 steps
# are 5 epochs and the training loss falls well.

# %%
%%ddp
import time
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.workloads import mlp, synthetic_classification

X, Y = synthetic_classification(n=1024, features=784, classes=10, seed=0).tensors
STEPS, BATCH = 40, 64

def train(bf16):
    model = DDP(mlp(seed=0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, times = [], []
    dist.barrier()
    tic = time.perf_counter()
    for step in range(STEPS):
        start = (step * world_size + rank) * BATCH % len(X)
        x, y = X[start:start + BATCH], Y[start:start + BATCH]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)                                  # bf16 matrix multiplications
            loss = nn.functional.cross_entropy(out, y)      # autocast computes the loss in float32
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - tic)
        ddplab.log(loss=loss, samples=len(x))
    dtypes = {"output": str(out.dtype), "loss": str(loss.dtype), "parameters": str(model.module[0].weight.dtype),
              "gradients": str(model.module[0].weight.grad.dtype)}
    return {"losses": losses, "times": times, "samples/s": STEPS * BATCH * world_size / times[-1], "dtypes": dtypes}

fp32 = train(bf16=False)
bf16 = train(bf16=True)
print(f"float32: {fp32['samples/s']:.0f} samples/s, final loss {fp32['losses'][-1]:.4f}")
print(f"bf16:    {bf16['samples/s']:.0f} samples/s, final loss {bf16['losses'][-1]:.4f}")
print("under bf16 autocast:", bf16["dtypes"])

# %% [markdown]
# Rank 0's loss, by step and by time (the ranks' losses differ a little: each has its own batch):

# %%
fp32 = %ddp_gather fp32
bf16 = %ddp_gather bf16
fp32, bf16 = fp32[0], bf16[0]
by_step = lambda run: (range(1, len(run["losses"]) + 1), run["losses"])
by_time = lambda run: (run["times"], run["losses"])
draw.lines(None, panels=[
    dict(series={"float32": by_step(fp32), "bf16 autocast": by_step(bf16)}, xlabel=say("step", "步"),
         ylabel=say("loss (rank 0)", "损失（rank 0）"), title=say("Loss by step: the same curve", "按步数：同一条曲线")),
    dict(series={"float32": by_time(fp32), "bf16 autocast": by_time(bf16)}, xlabel=say("seconds", "秒"),
         ylabel=say("loss (rank 0)", "损失（rank 0）"), title=say("Loss by time", "按时间")),
])

# %%
first, last = (lambda run: sum(run["losses"][:5]) / 5), (lambda run: sum(run["losses"][-5:]) / 5)
assert last(fp32) < 0.5 * first(fp32) and last(bf16) < 0.5 * first(bf16)      # both learn
gap = max(abs(a - b) for a, b in zip(fp32["losses"], bf16["losses"]))
assert gap < 0.1, gap                                                           # ... the same way
assert bf16["dtypes"] == {"output": "torch.bfloat16", "loss": "torch.float32",
                          "parameters": "torch.float32", "gradients": "torch.float32"}
print(f"loss {first(fp32):.2f} -> {last(fp32):.3f} (float32) and -> {last(bf16):.3f} (bf16), at most {gap:.3f} apart "
      f"step by step; bf16 ran at {bf16['samples/s'] / fp32['samples/s']:.2f}x the speed of float32")
draw.bars({"float32": fp32["samples/s"], "bf16 autocast": bf16["samples/s"]}, fmt="{:.0f}",
          ylabel=say("samples/s (2 ranks)", "样本/秒（2 个 rank）"), title=say("Training speed on this CPU", "本机 CPU 上的训练速度"))

# %% [markdown]
# **What this machine measured** (when we wrote the lesson): PyTorch reports capability **AVX2**,
# oneDNN has **no native bf16** kernels here, and `/proc/cpuinfo` lists neither `avx512_bf16` nor
# `amx_bf16`. bf16 autocast ran at about **1/6 of float32's speed** (1,070–1,170 against
# 6,000–7,000 samples/s with 2 ranks, in three runs): without bf16 instructions the bf16 matrix
# multiplications fall back to slower code that converts to float32 and back, so they cost more,
# not less. On CPUs with AMX (Intel Xeon since Sapphire Rapids) bf16 autocast is meant to be faster
# than float32; we could not measure that here. By step, the loss curves agree to about 0.003:
# bf16 rounds the inputs of each multiplication to 8 bits of mantissa, but the loss, the gradients
# and the update stay float32.
#
# Why no loss scaler? float16 has 5 exponent bits: values below about 6e-8 become 0, so GPU training
# in float16 multiplies the loss by a large factor (`torch.amp.GradScaler`) so that small gradients
# survive, and divides it out before the update. bf16 has float32's 8 exponent bits and the same
# range (about 1e-38 to 3e38):

# %%
import torch                                               # here in the notebook: no rank needed

tiny = torch.tensor([1e-8, 1e-20, 1e-30])
print("float32 :", tiny.tolist())
print("float16 :", tiny.half().float().tolist())
print("bfloat16:", tiny.bfloat16().float().tolist())
assert tiny.half().float().tolist() == [0.0, 0.0, 0.0] and tiny.bfloat16().float().gt(0).all()

# %% [markdown]
# ## DataLoader workers
#
# A data set whose `__getitem__` takes 2 ms per sample (`time.sleep`, standing for reading and
# decoding a file), 512 samples split by `DistributedSampler` (256 per rank), read in batches of 16
# by a `DataLoader` for 2 epochs, with a small DDP training step per batch (the dashboard shows the
# samples/s live). Each sample also reports which process read it. Three settings:
#
# * `num_workers=0`: the rank reads every sample itself, then trains on the batch;
# * `num_workers=2`: two worker processes per rank read batches ahead while the rank trains; a
#   `DataLoader` starts new workers at the beginning of every epoch;
# * `num_workers=2, persistent_workers=True`: the same, but the workers are started once and kept.

# %%
%%ddp
import os
from torch.utils.data import DataLoader, Dataset, DistributedSampler

class SlowDataset(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        time.sleep(0.002)                                   # reading and decoding a file
        return torch.full((16,), i / 512), os.getpid(), os.getppid()   # + who read it, and its parent

def read(workers, persistent=False, epochs=2):
    data = SlowDataset()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=workers, persistent_workers=persistent)
    model = DDP(nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    readers, count = set(), 0
    dist.barrier()
    tic = time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, pid, parent in loader:
            loss = model(x).pow(2).mean()                   # a (tiny) training step
            opt.zero_grad()
            loss.backward()
            opt.step()
            ddplab.log(loss=loss, samples=len(x))
            readers.update(zip(pid.tolist(), parent.tolist()))
            count += len(x)
    seconds = time.perf_counter() - tic
    del loader                                              # ends persistent workers too
    return {"samples/s": count * world_size / seconds, "count": count, "readers": sorted(readers)}

loading = {"0 workers": read(0), "2 workers": read(2), "2 workers, persistent": read(2, persistent=True)}
print(f"rank {rank} is pid {os.getpid()}; workers are started with {torch.multiprocessing.get_start_method()!r}")
for name, result in loading.items():
    print(f"{name}: {result['samples/s']:.0f} samples/s; read by (pid, parent pid): {result['readers']}")

# %%
loading = %ddp_gather loading
pids = %ddp_gather os.getpid()
settings = ["0 workers", "2 workers", "2 workers, persistent"]
for r, mine in enumerate(loading):
    assert all(mine[s]["count"] == 2 * 256 for s in settings)                # 2 epochs of 256 samples
    assert [pid for pid, _ in mine["0 workers"]["readers"]] == [pids[r]]      # the rank read them itself
    for s, processes in [("2 workers", 4), ("2 workers, persistent", 2)]:
        readers = mine[s]["readers"]
        assert len(readers) == processes and all(parent == pids[r] for _, parent in readers)  # its children
speed = {s: loading[0][s]["samples/s"] for s in settings}
print(", ".join(f"{s}: {v:.0f} samples/s" for s, v in speed.items()) + f" (without workers at most "
      f"{2 * 1 / 0.002:.0f}: 2 ranks, 2 ms per sample)")
draw.bars({say(s, z): speed[s] for s, z in zip(settings, ["0 个工作进程", "2 个工作进程", "2 个常驻工作进程"])},
          fmt="{:.0f}", ylabel=say("samples/s (2 ranks)", "样本/秒（2 个 rank）"),
          title=say("Reading 2 ms samples, 2 epochs", "读取每个 2 毫秒的样本，2 个 epoch"))

# %% [markdown]
# What happened, read from the output above:
#
# * With 0 workers the rank read every sample itself; 2 ranks × 1 sample per 2 ms is at most 1,000
#   samples/s, and the training step adds to it.
# * With 2 workers, each rank's samples were read by **child processes of the rank** (their parent
#   pid is the rank's pid): 4 different ones over 2 epochs, because a `DataLoader` starts new
#   workers every epoch. Starting them costs time at each epoch (forking the rank's process, which
#   holds all of torch), which `persistent_workers=True` pays only once (2 processes in all).
# * Measured here in three runs (other notebooks were running at the same time): 760–850 samples/s
#   with 0 workers, 1,160–1,400 with 2 workers started every epoch, 1,460–1,620 with persistent
#   workers.
#
# Workers are **forked** from the rank's engine here (the start method is `fork`, Linux's default),
# so they inherit everything the rank defined, including `SlowDataset`, a class defined in a
# notebook cell. With the `spawn` start method (the default on macOS and Windows) a worker starts a
# fresh Python and must import the data set's class, which a class defined in a cell is not: we
# tried `multiprocessing_context="spawn"` here and got `RuntimeError: DataLoader worker (pid(s) ...)
# exited unexpectedly`. Put the class in a `.py` file then. ddplab ends the workers with their rank
# (`%ddp_stop`, or the kernel dying).
#
# Workers help when reading *waits* (disk, network) or when there are spare cores to decode on. On
# this 2-core machine with 2 ranks, there are no spare cores: a real CPU-bound decoder in the
# workers would compete with training for the same 2 cores.

# %% [markdown]
# ## Exercises
#
# 1. Run the float32/bf16 comparison with `torch.float16` in `autocast` on CPU. Is it faster or
#    slower here, and does the loss curve change?
# 2. Make `__getitem__` CPU-bound instead of sleeping (e.g. `sum(range(20_000))`). Do 2 workers per
#    rank still help on this 2-core machine? Explain with the number of processes per core.
# 3. Try `num_workers=4` and `prefetch_factor=4`. Where does the speed stop improving, and why?
#
# ## 练习
#
# 1. 在 CPU 上用 `torch.float16` 做 `autocast`，重新比较 float32 与 bf16。在本机上它更快还是更慢？损失曲线会变吗？
# 2. 把 `__getitem__` 改成消耗 CPU 的计算而不是 sleep（例如 `sum(range(20_000))`）。在这台双核机器上，每个 rank 两个工作进程还有帮助吗？
#    用每个核上的进程数来解释。
# 3. 试试 `num_workers=4` 和 `prefetch_factor=4`。速度在哪里不再提高？为什么？

# %%
%ddp_stop
