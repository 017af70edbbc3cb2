# %% [markdown]
# # Lesson 5 · Mixed precision on CPU and DataLoader workers
#
# **In short.** Two ways to make each training step cheaper, measured on this machine. (1) **Mixed
# precision**: inside `torch.autocast("cpu", dtype=torch.bfloat16)`, matrix multiplications run in
# bfloat16 (16 bits) while parameters, gradients and the optimizer stay float32. bf16 keeps
# float32's exponent range, so unlike float16 on GPUs it needs no loss scaler. Whether it is faster
# depends on the CPU: CPUs with native bf16 instructions (AVX512-BF16, AMX) gain; elsewhere bf16 is
# emulated through conversions to float32 and is often *slower*. (2) **DataLoader workers**: when
# reading a sample is slow (a file to read, an image to decode), `num_workers=2` lets two helper
# **processes** per rank prepare batches while the rank trains; how they are started (`fork`,
# `forkserver`, `spawn`) decides what they inherit and what they cost to start.
#
# **简介。** 两种让每个训练步更便宜的方法，都在本机上实测。(1) **混合精度**：在
# `torch.autocast("cpu", dtype=torch.bfloat16)` 中，矩阵乘法以 bfloat16（16 位）计算，而参数、梯度和
# 优化器仍是 float32。bf16 的指数范围与 float32 相同，所以不像 GPU 上的 float16 那样需要损失缩放。
# 是否更快取决于 CPU：带原生 bf16 指令（AVX512-BF16、AMX）的 CPU 会受益；在其他 CPU 上 bf16
# 要靠与 float32 之间的转换来模拟，常常反而*更慢*。(2) **DataLoader 工作进程**：读取一个样本很慢时
# （读文件、解码图片），`num_workers=2` 让每个 rank 有两个辅助**进程**在它训练的同时准备批次；
# 它们的启动方式（`fork`、`forkserver`、`spawn`）决定了它们继承什么、启动要花多少时间。
#
# **You will see:** float32 and bf16 loss curves side by side and their samples/s, with the reason
# for the speed this CPU gives; samples/s of a slow data set read with 0 and 2 workers per rank, which
# processes did the reading, and what starting workers costs with `fork` and with `forkserver`.

# %% [markdown] lang=zh
# # 第 5 课 · CPU 上的混合精度与 DataLoader 工作进程
#
# **简而言之**：这一课在本机上实测两种让每个训练步更便宜的方法。(1) **混合精度**：在
# `torch.autocast("cpu", dtype=torch.bfloat16)` 里面，矩阵乘法用 bfloat16（16 位）计算，而参数、
# 梯度和优化器仍然是 float32。bf16 保留了 float32 的指数范围，所以不像 GPU 上的 float16 那样需要
# 损失缩放。它是否更快取决于 CPU：带有原生 bf16 指令（AVX512-BF16、AMX）的 CPU 会变快；在其他 CPU
# 上，bf16 要靠与 float32 之间的来回转换来模拟，常常反而*更慢*。(2) **DataLoader 工作进程**：读取
# 一个样本很慢时（要读文件、解码图片），`num_workers=2` 让每个进程（rank）各有两个辅助**进程**，
# 在它训练的同时准备批次；这些进程的启动方式（`fork`、`forkserver`、`spawn`）决定了它们能继承什么，
# 以及启动要花多少时间。
#
# **你将看到**：float32 与 bf16 的损失曲线并排对比、各自的样本/秒，以及这台 CPU 上得到这个速度的
# 原因；一个读取很慢的数据集在每个 rank 用 0 个和 2 个工作进程时的样本/秒、实际读取数据的是哪些
# 进程，以及用 `fork` 和 `forkserver` 启动工作进程各要花多少时间。

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %% [markdown]
# This lesson uses **2 ranks**, not 4: it measures speed, and small machines like this one (or a
# Binder session) have 2 cores. With 4 ranks plus 2 loader workers each, 12 processes would share
# 2 cores, and we would mostly measure how they take turns. With 2 ranks each rank has a core of its
# own.

# %% [markdown] lang=zh
# 这一课只用 **2 个 rank**，而不是 4 个：它要测量速度，而像本机这样的小机器（或者一个 Binder
# 会话）只有 2 个 CPU 核。如果用 4 个 rank，每个再带 2 个数据加载工作进程，就是 12 个进程挤在
# 2 个核上，测到的主要是它们如何轮流占用 CPU。用 2 个 rank，每个 rank 都有一个属于自己的核。

# %%
%ddp_start 2

# %% [markdown]
# ## What this CPU can do in bf16
#
# `torch.backends.cpu.get_cpu_capability()` names the widest vector instructions PyTorch's own
# kernels use here (e.g. `AVX2`, `AVX512`). `torch.cpu._is_avx512_bf16_supported()` and
# `torch.cpu._is_amx_tile_supported()` say whether the CPU has **native bf16 instructions**: AVX512-BF16
# (a bf16 dot product in one instruction) and AMX (Intel's matrix tiles, since Xeon Sapphire Rapids).
# `torch.ops.mkldnn._is_mkldnn_bf16_supported()` answers a different question: whether oneDNN, the
# library PyTorch uses for bf16 matrix multiplications on CPU, **can run bf16 at all** here. It is
# true on every CPU with AVX-512 (or Arm's bf16), including those without bf16 instructions, where
# oneDNN *emulates* bf16 by converting to float32. So it is not a test for native bf16. (The three
# `_is_...` functions are private helpers of PyTorch.)

# %% [markdown] lang=zh
# ## 这台 CPU 的 bf16 能力
#
# `torch.backends.cpu.get_cpu_capability()` 给出 PyTorch 自带的内核在这里使用的最宽的向量指令集
# （例如 `AVX2`、`AVX512`）。`torch.cpu._is_avx512_bf16_supported()` 和
# `torch.cpu._is_amx_tile_supported()` 说明 CPU 是否有**原生 bf16 指令**：AVX512-BF16（一条指令完成
# 一次 bf16 点积）和 AMX（Intel 的矩阵 tile 单元，从 Xeon Sapphire Rapids 开始提供）。
# `torch.ops.mkldnn._is_mkldnn_bf16_supported()` 回答的是另一个问题：oneDNN（PyTorch 在 CPU 上做
# bf16 矩阵乘法所用的库）在这里**能不能运行 bf16**。凡是支持 AVX-512（或 Arm bf16）的 CPU，它都
# 返回 true，包括那些没有 bf16 指令的 CPU：在那些 CPU 上，oneDNN 通过转换成 float32 来*模拟* bf16。
# 所以它并不能用来判断是否有原生 bf16。（这三个 `_is_...` 函数都是 PyTorch 的私有辅助函数。）

# %%
%%ddp
cpu = {"capability": torch.backends.cpu.get_cpu_capability(),
       "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
       "amx": torch.cpu._is_amx_tile_supported(),
       "onednn_bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported()}

# %%
cpu = %ddp_gather cpu
cpu = cpu[0]                                               # both ranks run on this machine
yes = lambda flag: say("yes", "是") if flag else say("no", "否")
native = [name for name, flag in [("AVX512_BF16", cpu["avx512_bf16"]), ("AMX", cpu["amx"])] if flag]
print(say(f"CPU capability PyTorch uses: {cpu['capability']}", f"PyTorch 使用的 CPU 指令集：{cpu['capability']}"))
print(say(f"native bf16 instructions: AVX512_BF16 {yes(cpu['avx512_bf16'])}, AMX {yes(cpu['amx'])}",
          f"原生 bf16 指令：AVX512_BF16 {yes(cpu['avx512_bf16'])}，AMX {yes(cpu['amx'])}"))
print(say(f"oneDNN can run bf16 here (natively or by emulation): {yes(cpu['onednn_bf16'])}",
          f"oneDNN 能在这里运行 bf16（原生或模拟）：{yes(cpu['onednn_bf16'])}"))

# %% [markdown]
# ## float32 vs bf16 autocast, with DDP
#
# The MLP 784-512-512-10 (`ddplab.workloads.mlp`), the same initial parameters and the same
# batches (64 per rank), 40 steps each way. The only difference is the `autocast` context around the
# forward pass and the loss; `backward()` goes outside it, as PyTorch recommends (autograd runs each
# operation's backward in the dtype its forward used). The data set has 1,024 samples, so 40 steps
# are 5 epochs and the training loss falls well.

# %% [markdown] lang=zh
# ## 使用 DDP 时，float32 与 bf16 autocast 的对比
#
# 模型是 MLP 784-512-512-10（`ddplab.workloads.mlp`），两种方式使用相同的初始参数和相同的批次
# （每个 rank 每批 64 个样本），各训练 40 步。唯一的区别是前向计算和损失外面的 `autocast` 上下文；
# `backward()` 放在它外面，这是 PyTorch 推荐的做法（autograd 对每个运算的反向计算，使用该运算前向
# 计算时的数据类型）。数据集有 1,024 个样本，所以 40 步就是 5 个 epoch，训练损失会明显下降。

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

# %% [markdown]
# Rank 0's loss, by step and by time (the ranks' losses differ a little: each has its own batch):

# %% [markdown] lang=zh
# rank 0 的损失，按步数和按时间画出（各 rank 的损失略有不同：每个 rank 有自己的批次）：

# %%
fp32 = %ddp_gather fp32
bf16 = %ddp_gather bf16
fp32, bf16 = fp32[0], bf16[0]
by_step = lambda run: (range(1, len(run["losses"]) + 1), run["losses"])
by_time = lambda run: (run["times"], run["losses"])
draw.lines(None, panels=[
    dict(series={"float32": by_step(fp32), "bf16 autocast": by_step(bf16)}, xlabel=say("step", "步数"),
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
print(say(f"under bf16 autocast: the model's output is {bf16['dtypes']['output']}; the loss, the parameters and "
          "their gradients stay torch.float32",
          f"在 bf16 autocast 下：模型输出是 {bf16['dtypes']['output']}；损失、参数及其梯度仍是 torch.float32"))
print(say(f"loss {first(fp32):.2f} -> {last(fp32):.3f} (float32) and -> {last(bf16):.3f} (bf16), at most {gap:.3f} "
          f"apart step by step; float32 {fp32['samples/s']:.0f} samples/s, bf16 {bf16['samples/s']:.0f} samples/s",
          f"损失 {first(fp32):.2f} -> {last(fp32):.3f}（float32）和 -> {last(bf16):.3f}（bf16），逐步比较最多相差 "
          f"{gap:.3f}；float32 {fp32['samples/s']:.0f} 样本/秒，bf16 {bf16['samples/s']:.0f} 样本/秒"))
draw.bars({"float32": fp32["samples/s"], "bf16 autocast": bf16["samples/s"]}, fmt="{:.0f}",
          ylabel=say("samples/s (2 ranks)", "样本/秒（2 个 rank）"), title=say("Training speed on this CPU", "本机 CPU 上的训练速度"))

# %% [markdown]
# **What this machine measured**, and why:

# %% [markdown] lang=zh
# **本机测得的结果**，以及原因：

# %%
ratio = bf16["samples/s"] / fp32["samples/s"]
print(say(f"PyTorch reports {cpu['capability']}; bf16 autocast ran at {ratio:.2f}x the speed of float32.",
          f"PyTorch 报告的指令集是 {cpu['capability']}；bf16 autocast 的速度是 float32 的 {ratio:.2f} 倍。"))
if ratio > 1.15 and native:
    print(say(f"Faster: this CPU has native bf16 instructions ({' and '.join(native)}). oneDNN multiplies bf16 matrices "
              "with them: twice as many values per instruction as float32 (AMX's tiles far more), and half the bytes "
              "to move.",
              f"更快：这台 CPU 有原生 bf16 指令（{'和'.join(native)}）。oneDNN 用它们做 bf16 矩阵乘法：每条指令处理的数值"
              "是 float32 的两倍（AMX 的 tile 还要多得多），要搬运的字节数也只有一半。"))
elif ratio > 1.15:
    print(say("Faster, although PyTorch reports neither AVX512_BF16 nor AMX: this CPU has another fast bf16 path "
              "(such as Arm's bf16 instructions), or moving half the bytes paid off here.",
              "更快，尽管 PyTorch 报告既没有 AVX512_BF16 也没有 AMX：这台 CPU 有别的快速 bf16 途径（例如 Arm 的 bf16 "
              "指令），或者在这里只搬运一半字节带来了收益。"))
elif ratio < 0.87 and native:
    print(say(f"Slower, although this CPU has native bf16 instructions ({' and '.join(native)}): for matrices this "
              "small, casting the inputs of every layer to bf16 and the results back costs more than the faster "
              "multiplications save.",
              f"更慢，尽管这台 CPU 有原生 bf16 指令（{'和'.join(native)}）：矩阵这么小，把每一层的输入转换成 bf16、"
              "再把结果转换回来的开销，超过了更快的乘法所节省的时间。"))
elif ratio < 0.87 and cpu["onednn_bf16"]:
    print(say("Slower: this CPU has AVX-512 but no bf16 instructions, so oneDNN emulates bf16: it converts the values "
              "to float32 and multiplies in float32. Memory is halved, the arithmetic is not sped up, and the "
              "conversions cost extra.",
              "更慢：这台 CPU 有 AVX-512，但没有 bf16 指令，所以 oneDNN 只能模拟 bf16：把数值转换成 float32，再用 "
              "float32 做乘法。内存减半了，计算却没有加速，转换还要额外花时间。"))
elif ratio < 0.87:
    print(say("Slower: this CPU has neither bf16 instructions nor AVX-512, so oneDNN does not run bf16 here at all. "
              "The bf16 matrix multiplications fall back to generic code that converts every value to float32 and "
              "back, far slower than the tuned float32 kernels: memory halved, compute not sped up.",
              "更慢：这台 CPU 既没有 bf16 指令，也没有 AVX-512，所以 oneDNN 在这里根本不运行 bf16。bf16 矩阵乘法退回到"
              "通用代码，把每个数值转换成 float32 再转换回来，比经过调优的 float32 内核慢得多：内存减半了，计算却"
              "没有加速。"))
else:
    print(say("About the same speed: whatever bf16 saves (half the bytes"
              + (", faster bf16 instructions" if native else "") + ") is about what converting to bf16 and back "
              "costs, and part of every step does not change under autocast at all: DDP's all-reduce of float32 "
              "gradients and the optimizer.",
              "速度差不多：bf16 省下的（一半的字节" + ("、更快的 bf16 指令" if native else "") + "）大约正好抵消了与 bf16 "
              "之间来回转换的开销；而且每一步中有一部分在 autocast 下完全不变：DDP 对 float32 梯度的 all-reduce，"
              "以及优化器。"))

# %% [markdown]
# By step, the two loss curves agree closely (the largest gap is printed above): bf16 rounds the
# inputs of each multiplication to 8 bits of mantissa, but the loss, the gradients and the update
# stay float32.
#
# Why no loss scaler? float16 has 5 exponent bits: values below about 6e-8 become 0, so GPU training
# in float16 multiplies the loss by a large factor (`torch.amp.GradScaler`) so that small gradients
# survive, and divides it out before the update. bf16 has float32's 8 exponent bits and the same
# range (about 1e-38 to 3e38):

# %% [markdown] lang=zh
# 按步数看，两条损失曲线非常接近（最大差值见上面的输出）：bf16 把每次乘法的输入舍入到 8 位尾数，
# 但损失、梯度和参数更新仍然是 float32。
#
# 为什么不需要损失缩放？float16 只有 5 个指数位：小于约 6e-8 的值会变成 0，所以在 GPU 上用 float16
# 训练时，要把损失乘上一个很大的系数（`torch.amp.GradScaler`），让很小的梯度得以保留，再在参数更新
# 之前把这个系数除掉。bf16 有与 float32 相同的 8 个指数位，表示范围也相同（约 1e-38 到 3e38）：

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
# samples/s live). Each sample also reports who read it: the process id (`os.getpid()`), its parent's
# id, and the worker's number from `torch.utils.data.get_worker_info()` (`None` when the rank reads
# the sample itself). Three settings:
#
# * `num_workers=0`: the rank reads every sample itself, then trains on the batch;
# * `num_workers=2`: two worker processes per rank read batches ahead while the rank trains; a
#   `DataLoader` starts new workers at the beginning of every epoch;
# * `num_workers=2, persistent_workers=True`: the same, but the workers are started once and kept.
#
# The workers' **start method** is pinned: `multiprocessing_context="fork"`. Left to itself, a
# `DataLoader` uses Python's default, which is not the same everywhere: `fork` on Linux up to Python
# 3.13, `forkserver` on Linux from Python 3.14, `spawn` on macOS and Windows. The section on start
# methods below shows why that matters.

# %% [markdown] lang=zh
# ## DataLoader 工作进程
#
# 一个 `__getitem__` 每读一个样本要花 2 毫秒的数据集（用 `time.sleep` 代表读取和解码文件），共 512
# 个样本，由 `DistributedSampler` 分给各 rank（每个 rank 256 个），再由 `DataLoader` 按每批 16 个读取
# 2 个 epoch，每读一批就做一个小的 DDP 训练步（仪表盘实时显示样本/秒）。每个样本还会报告是谁读了它：
# 进程号（`os.getpid()`）、父进程号，以及 `torch.utils.data.get_worker_info()` 给出的工作进程编号
# （由 rank 自己读取样本时为 `None`）。三种设置：
#
# * `num_workers=0`：rank 自己读取每个样本，然后用这一批训练；
# * `num_workers=2`：每个 rank 有两个工作进程，在 rank 训练的同时提前读取批次；`DataLoader` 在每个
#   epoch 开始时都会启动新的工作进程；
# * `num_workers=2, persistent_workers=True`：同上，但工作进程只启动一次，之后一直保留。
#
# 工作进程的**启动方式**被固定下来：`multiprocessing_context="fork"`。如果不指定，`DataLoader` 就用
# Python 的默认方式，而默认方式并非处处相同：在 Linux 上，Python 3.13 及以前是 `fork`，从 Python 3.14
# 起是 `forkserver`；在 macOS 和 Windows 上是 `spawn`。后面讲启动方式的一节会说明这为什么重要。

# %%
%%ddp
import os
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info

class SlowDataset(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        time.sleep(0.002)                                   # reading and decoding a file
        worker = get_worker_info()                          # None in the rank itself
        return torch.full((16,), i / 512), os.getpid(), os.getppid(), -1 if worker is None else worker.id

def read(workers, persistent=False, epochs=2):
    data = SlowDataset()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=workers, persistent_workers=persistent,
                        multiprocessing_context="fork" if workers else None)   # pinned: not the default everywhere
    model = DDP(nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    readers, count = set(), 0
    dist.barrier()
    tic = time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, pid, parent, worker in loader:
            loss = model(x).pow(2).mean()                   # a (tiny) training step
            opt.zero_grad()
            loss.backward()
            opt.step()
            ddplab.log(loss=loss, samples=len(x))
            readers.update(zip(pid.tolist(), parent.tolist(), worker.tolist()))
            count += len(x)
    seconds = time.perf_counter() - tic
    del loader                                              # ends persistent workers too
    return {"samples/s": count * world_size / seconds, "count": count, "readers": sorted(readers)}

loading = {"0 workers": read(0), "2 workers": read(2), "2 workers, persistent": read(2, persistent=True)}

# %%
loading = %ddp_gather loading
pids = %ddp_gather os.getpid()
settings = ["0 workers", "2 workers", "2 workers, persistent"]
for r, mine in enumerate(loading):
    assert all(mine[s]["count"] == 2 * 256 for s in settings)                # 2 epochs of 256 samples
    assert [(pid, w) for pid, _, w in mine["0 workers"]["readers"]] == [(pids[r], -1)]   # the rank itself
    for s, processes in [("2 workers", 4), ("2 workers, persistent", 2)]:
        readers = mine[s]["readers"]
        assert len(readers) == processes and all(parent == pids[r] for _, parent, _ in readers)  # its children
        assert sorted({w for _, _, w in readers}) == [0, 1] and pids[r] not in [p for p, _, _ in readers]
speed = {s: loading[0][s]["samples/s"] for s in settings}
names = dict(zip(settings, [say(s, z) for s, z in zip(settings, ["0 个工作进程", "2 个工作进程", "2 个常驻工作进程"])]))
print(say("; ".join(f"{s}: {v:.0f} samples/s" for s, v in speed.items()),
          "；".join(f"{names[s]}：{v:.0f} 样本/秒" for s, v in speed.items())))
for r, mine in enumerate(loading):
    workers = mine["2 workers, persistent"]["readers"]
    print(say(f"rank {r} is pid {pids[r]}; with persistent workers its samples were read by "
              + " and ".join(f"worker {w} (pid {p})" for p, _, w in workers) + f", both children of pid {pids[r]}",
              f"rank {r} 的 pid 为 {pids[r]}；使用常驻工作进程时，它的样本由"
              + "和".join(f"工作进程 {w}（pid {p}）" for p, _, w in workers) + f"读取，两者都是 pid {pids[r]} 的子进程"))
draw.bars({names[s]: speed[s] for s in settings}, fmt="{:.0f}", ylabel=say("samples/s (2 ranks)", "样本/秒（2 个 rank）"),
          title=say("Reading 2 ms samples, 2 epochs", "读取每个 2 毫秒的样本，2 个 epoch"))

# %% [markdown]
# What this machine measured, and what it means:

# %% [markdown] lang=zh
# 本机测得的结果，以及它们的含义：

# %%
alone, fresh, kept = (speed[s] for s in settings)
print(say(f"Without workers a rank reads one sample per 2 ms: 2 ranks read at most {2 / 0.002:.0f} samples/s, "
          f"and the training steps come on top. Measured: {alone:.0f}.",
          f"没有工作进程时，一个 rank 每 2 毫秒读一个样本：2 个 rank 最多每秒读 {2 / 0.002:.0f} 个样本，训练步的时间"
          f"还要另算。实测：{alone:.0f}。"))
if fresh > 1.15 * alone:
    print(say(f"2 workers per rank were {fresh / alone:.1f}x as fast: while the rank trained on one batch, its two "
              f"workers were reading the next ones, two samples at a time (at most {4 / 0.002:.0f} samples/s for "
              "2 ranks).",
              f"每个 rank 用 2 个工作进程时快了 {fresh / alone:.1f} 倍：rank 用一个批次训练的同时，它的两个工作进程在读取"
              f"后面的批次，同时读两个样本（2 个 rank 最多每秒 {4 / 0.002:.0f} 个样本）。"))
else:
    print(say(f"2 workers per rank gained little or nothing ({fresh / alone:.2f}x): the workers need CPU time too "
              "(to start, and to hand every batch over to the rank), and when the machine is busy they wait for a "
              "core instead of reading.",
              f"每个 rank 用 2 个工作进程几乎没有收益（{fresh / alone:.2f} 倍）：工作进程本身也需要 CPU 时间（启动，以及"
              "把每个批次交给 rank），机器繁忙时，它们就在等待 CPU 核，而不是在读数据。"))
if kept > 1.1 * fresh:
    print(say(f"Persistent workers were faster still ({kept / fresh:.2f}x): a DataLoader starts new workers every "
              "epoch, and each start costs time; persistent workers are started once.",
              f"常驻工作进程还要更快（{kept / fresh:.2f} 倍）：DataLoader 每个 epoch 都要启动新的工作进程，每次启动都"
              "要花时间；常驻工作进程只启动一次。"))
elif kept >= 0.9 * fresh:
    print(say(f"Persistent workers were about as fast ({kept / fresh:.2f}x): forking a worker is cheap here (measured "
              "below), next to 2 epochs of reading.",
              f"常驻工作进程的速度差不多（{kept / fresh:.2f} 倍）：在这里 fork 一个工作进程很便宜（下面会测量），"
              "与 2 个 epoch 的读取时间相比可以忽略。"))
else:
    print(say(f"Persistent workers were slower this time ({kept / fresh:.2f}x), although they start only once: "
              "noise from other programs on this machine. Run the cell again.",
              f"这一次常驻工作进程反而更慢（{kept / fresh:.2f} 倍），尽管它们只启动一次：这是本机上其他程序带来的"
              "噪声。请再运行一次。"))

# %% [markdown]
# **A common claim / what actually happens.** A common claim: `DataLoader` workers are threads that
# load data in parallel inside the training process. What actually happens: each worker is a
# separate **process**, started by the rank. The run above shows it: the samples were read by
# processes with their own ids, different from the rank's, whose parent is the rank, and
# `get_worker_info()` numbered them 0 and 1 (in the rank itself it returns `None`). Being processes,
# workers have their own memory and their own Python interpreter (no lock shared with the training
# loop): batches come back to the rank through queues and shared memory, a change a worker makes to
# the data set object is never seen by the rank, and starting workers costs time, as the next
# section measures.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：`DataLoader` 的工作进程是在训练进程内部并行加载数据的
# 线程。实际情况是：每个工作进程都是由 rank 启动的一个独立的**进程**。上面的运行显示了这一点：样本是由
# 一些有自己进程号的进程读取的，它们的进程号与 rank 不同，父进程正是 rank，而 `get_worker_info()` 把
# 它们编号为 0 和 1（在 rank 自己里面它返回 `None`）。既然是进程，工作进程就有自己的内存和自己的 Python
# 解释器（与训练循环不共享同一把锁）：批次通过队列和共享内存回到 rank；工作进程对数据集对象做的修改，
# rank 永远看不到；启动工作进程也要花时间，下一节就来测量。

# %% [markdown]
# ## How workers are started: fork, forkserver, spawn
#
# * **fork** copies the rank's process (copy-on-write, so it is quick): the worker already has torch
#   and everything the rank defined, including `SlowDataset`, a class defined in a notebook cell.
#   Nothing has to be pickled. (Forking a process that runs threads can deadlock if a thread held a
#   lock at that moment; that is why Python 3.14 moved Linux's default away from it.)
# * **forkserver** starts one clean server process the first time, then forks every worker from that
#   server. **spawn** starts a fresh Python for every worker. Either way the worker does not have the
#   rank's memory: it receives the data set **pickled**, and pickle stores an object's class as its
#   module and name, which the worker must be able to **import**. A class defined in a notebook cell
#   lives in the rank's `__main__` only, so it fails there; put it in a `.py` file.
#
# On rank 0 alone, the next cell measures the time from creating a `DataLoader` with 2 workers to its
# first batch: with `fork`; with `forkserver` twice (the first time the server starts; it preloads
# torch, `set_forkserver_preload(["torch"])`, so that workers forked from it need not import torch
# themselves); and `SlowDataset` with `forkserver` (with `timeout=2`, so that the failure is reported
# after 2 s rather than 5).

# %% [markdown] lang=zh
# ## 工作进程如何启动：fork、forkserver、spawn
#
# * **fork** 复制 rank 的进程（写时复制，所以很快）：工作进程一开始就有 torch，以及 rank 定义过的一切，
#   包括 `SlowDataset` 这个在 notebook 单元格里定义的类。什么都不需要 pickle。（如果被 fork 的进程里还有
#   别的线程，而某个线程恰好持有一把锁，fork 出来的进程就可能死锁；这正是 Python 3.14 把 Linux 上的
#   默认方式改掉的原因。）
# * **forkserver** 第一次使用时启动一个干净的服务进程，之后每个工作进程都从这个服务进程 fork 出来。
#   **spawn** 为每个工作进程启动一个全新的 Python。无论哪种，工作进程都没有 rank 的内存：它收到的是
#   **pickle** 过的数据集，而 pickle 把对象的类记录为模块名加类名，工作进程必须能够 **import** 它。
#   在 notebook 单元格里定义的类只存在于 rank 的 `__main__` 中，所以在那里会失败；应该把它放进一个
#   `.py` 文件。
#
# 下一个单元格只在 rank 0 上运行，测量从创建一个带 2 个工作进程的 `DataLoader` 到拿到第一个批次所需的
# 时间：用 `fork` 测一次；用 `forkserver` 测两次（第一次要启动服务进程；它会预先导入 torch，即
# `set_forkserver_preload(["torch"])`，这样从它 fork 出来的工作进程就不必各自导入 torch）；再用
# `forkserver` 读取 `SlowDataset`（设置 `timeout=2`，这样失败会在 2 秒后而不是 5 秒后报告出来）。

# %%
%%ddp --ranks 0
import multiprocessing
from torch.utils.data import TensorDataset

def first_batch(data, context, timeout=0):
    """Seconds from a new DataLoader with 2 workers to its first batch."""
    tic = time.perf_counter()
    next(iter(DataLoader(data, batch_size=16, num_workers=2, multiprocessing_context=context, timeout=timeout)))
    return time.perf_counter() - tic

server = multiprocessing.get_context("forkserver")
server.set_forkserver_preload(["torch"])                  # the server imports torch once, for all its workers
tensors = TensorDataset(torch.rand(64, 16))               # its class can be imported: torch.utils.data
started = {"default": multiprocessing.get_start_method(), "fork": first_batch(tensors, "fork"),
           "forkserver, new": first_batch(tensors, server), "forkserver, running": first_batch(tensors, server)}
try:
    first_batch(SlowDataset(), server, timeout=2)         # a class defined in a notebook cell
    started["cell class"] = None
except RuntimeError as exc:
    started["cell class"] = str(exc)

# %%
import sys

started = %ddp_gather globals().get("started")           # only rank 0 has it
started = started[0]
fork, new, running = started["fork"], started["forkserver, new"], started["forkserver, running"]
assert started["cell class"] is not None                 # a class defined in a cell cannot reach a forkserver worker
assert new > fork, started                               # the server's start costs more than a fork
print(say(f"Python {sys.version.split()[0]} on {sys.platform}: the default start method here is "
          f"{started['default']!r}. First batch from 2 new workers: fork {fork:.2f} s; forkserver {new:.2f} s while "
          f"its server started, {running:.2f} s once it ran.",
          f"{sys.platform} 上的 Python {sys.version.split()[0]}：这里的默认启动方式是 {started['default']!r}。"
          f"从 2 个新工作进程拿到第一个批次：fork {fork:.2f} 秒；forkserver 在服务进程启动时 {new:.2f} 秒，服务进程"
          f"运行之后 {running:.2f} 秒。"))
print(say(f"The first forkserver loader took {new / fork:.0f}x as long as fork: a fresh Python started and imported "
          "torch (seconds of CPU). spawn pays that for every worker, and again every epoch unless "
          "persistent_workers=True.",
          f"第一个使用 forkserver 的 DataLoader 耗时是 fork 的 {new / fork:.0f} 倍：要启动一个全新的 Python 并导入 torch"
          "（要花几秒 CPU 时间）。spawn 为每个工作进程都要付出这个代价，而且除非设置 persistent_workers=True，"
          "每个 epoch 还要再付一次。"))
if running < 2 * fork:
    print(say("Once the server runs, a worker forked from it starts about as fast as one forked from the rank.",
              "服务进程运行起来之后，从它 fork 出的工作进程启动得和从 rank fork 出的差不多快。"))
else:
    print(say(f"Even with the server running, a worker took {running / fork:.1f}x as long as a fork of the rank: it "
              "receives the data set pickled and starts its loop from scratch, and on a busy machine it waits for a core.",
              f"即使服务进程已经在运行，一个工作进程的启动时间仍是 fork rank 的 {running / fork:.1f} 倍：它要接收 pickle "
              "过的数据集，从头开始自己的循环，机器繁忙时还要等待 CPU 核。"))
print(say(f"SlowDataset, defined in a cell, with forkserver: {started['cell class']}. The workers could not unpickle "
          "it (their own error is in rank 0's stderr above): its class is __main__.SlowDataset, and the server's "
          "__main__ has no such class. With fork it worked.",
          f"在单元格里定义的 SlowDataset 配合 forkserver：{started['cell class']}。工作进程无法 unpickle 它（它们自己的"
          "报错见上面 rank 0 的 stderr）：它的类是 __main__.SlowDataset，而服务进程的 __main__ 里没有这个类。用 fork 时"
          "则一切正常。"))

# %% [markdown]
# So: pin the start method (`multiprocessing_context=`) so that the same code behaves the same on
# every machine and Python version; with `forkserver` or `spawn`, keep data sets, `collate_fn` and
# `worker_init_fn` in an importable `.py` file, and use `persistent_workers=True` so that workers
# start once. ddplab ends the workers with their rank (`%ddp_stop`, or the kernel dying).
#
# Workers help when reading *waits* (disk, network) or when there are spare cores to decode on. On a
# 2-core machine with 2 ranks there are no spare cores: a real CPU-bound decoder in the workers would
# compete with training for the same 2 cores.

# %% [markdown] lang=zh
# 所以：固定启动方式（`multiprocessing_context=`），让同样的代码在每台机器、每个 Python 版本上行为
# 一致；使用 `forkserver` 或 `spawn` 时，把数据集、`collate_fn` 和 `worker_init_fn` 放在一个可以
# import 的 `.py` 文件里，并设置 `persistent_workers=True`，让工作进程只启动一次。ddplab 会让工作进程
# 随它们的 rank 一起结束（`%ddp_stop`，或者内核崩溃时）。
#
# 当读取数据需要*等待*（磁盘、网络），或者有空闲的 CPU 核可以用来解码时，工作进程才有帮助。在一台跑
# 2 个 rank 的双核机器上，没有空闲的核：如果工作进程里是一个真正消耗 CPU 的解码器，它就会和训练争抢
# 同样的 2 个核。

# %% [markdown]
# ## Exercises
#
# 1. Run the float32/bf16 comparison with `torch.float16` in `autocast` on CPU. Is it faster or
#    slower here, and does the loss curve change?
# 2. Make `__getitem__` CPU-bound instead of sleeping (e.g. `sum(range(20_000))`). Do 2 workers per
#    rank still help on this 2-core machine? Explain with the number of processes per core.
# 3. Try `num_workers=4` and `prefetch_factor=4`. Where does the speed stop improving, and why?
# 4. Write `SlowDataset` to a file `slow_data.py` in a folder on `sys.path`, import it from there,
#    and read it with `multiprocessing_context="forkserver"` and with `"spawn"`. Does it work now?
#    How long does the first batch take with `spawn`?
#
# ## 练习
#
# 1. 在 CPU 上用 `torch.float16` 做 `autocast`，重新比较 float32 与 bf16。在本机上它更快还是更慢？损失曲线会变吗？
# 2. 把 `__getitem__` 改成消耗 CPU 的计算而不是 sleep（例如 `sum(range(20_000))`）。在这台双核机器上，每个 rank 两个工作进程还有帮助吗？
#    用每个核上的进程数来解释。
# 3. 试试 `num_workers=4` 和 `prefetch_factor=4`。速度在哪里不再提高？为什么？
# 4. 把 `SlowDataset` 写进 `sys.path` 中某个文件夹里的 `slow_data.py` 文件，从那里 import 它，再分别用
#    `multiprocessing_context="forkserver"` 和 `"spawn"` 读取。现在能用了吗？用 `spawn` 拿到第一个批次要多久？

# %% [markdown] lang=zh
# ## 练习
#
# 1. 在 CPU 上的 `autocast` 中改用 `torch.float16`，重新做 float32 与 bf16 的比较。在本机上它更快
#    还是更慢？损失曲线会变吗？
# 2. 把 `__getitem__` 改成消耗 CPU 的计算，而不是 sleep（例如 `sum(range(20_000))`）。在这台双核
#    机器上，每个 rank 用 2 个工作进程还有帮助吗？用每个核上的进程数来解释。
# 3. 试试 `num_workers=4` 和 `prefetch_factor=4`。速度到哪里就不再提高了？为什么？
# 4. 把 `SlowDataset` 写进 `sys.path` 中某个文件夹里的 `slow_data.py` 文件，从那里 import 它，再分别用
#    `multiprocessing_context="forkserver"` 和 `"spawn"` 读取。现在能用了吗？用 `spawn` 拿到第一个
#    批次要多久？

# %%
%ddp_stop
