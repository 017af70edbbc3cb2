# %% [markdown]
# # Lesson 5 · Mixed precision on CPU and DataLoader workers
#
# **In short.** Two ways to make each training step cheaper, measured on this machine. (1) **Mixed
# precision**: inside `torch.autocast("cpu", dtype=torch.bfloat16)`, matrix multiplications run in
# bfloat16 (16 bits) while parameters, gradients and the optimizer stay float32. bf16 keeps
# float32's exponent range, so unlike float16 on GPUs it needs no loss scaler. Whether it is faster
# depends on the CPU: CPUs with native bf16 instructions (AVX512-BF16 or AMX on x86, BF16 on Arm) can
# gain; elsewhere bf16 is emulated through conversions to float32 and is often *slower*. (2)
# **DataLoader workers**: when reading a sample is slow (a file to read, an image to decode),
# `num_workers=2` lets two helper **processes** per rank prepare batches while the rank trains; how
# they are started (`fork`, `forkserver`, `spawn`) decides what they inherit and what they cost to
# start.
#
# **You will learn**
# - what bf16 autocast computes in 16 bits and what stays float32 (parameters, gradients, loss)
# - how to tell whether a CPU has native bf16 instructions, and why that decides the speed
# - what autocast halves in memory (saved activations) and what it does not (parameters, gradients, optimizer state)
# - why bf16 needs no loss scaler while float16 does
# - that DataLoader workers are processes, when they help, and what fork, forkserver and spawn require
#
# **Study time:** about 50 minutes
#
# **Needs:** nothing beyond ddplab and torch · 2 ranks
#
# **You will see:** float32 and bf16 loss curves side by side and their samples/s, with the reason
# for the speed this CPU gives; the bytes autocast saves for the backward pass; samples/s of a slow
# data set read with 0 and 2 workers per rank, which processes did the reading, and what starting
# workers costs with `fork` and with `forkserver`.

# %% [markdown] lang=zh
# # 第 5 课 · CPU 上的混合精度与 DataLoader 工作进程
#
# **简而言之**：这一课在本机上实测两种让每个训练步更便宜的方法。(1) **混合精度**：在 `torch.autocast("cpu", dtype=torch.bfloat16)` 里面，矩阵乘法用 bfloat16（16 位）计算，而参数、梯度和优化器仍然是 float32。bf16 保留了 float32 的指数范围，所以不像 GPU 上的 float16 那样需要损失缩放。它是否更快取决于 CPU：带有原生 bf16 指令（x86 上的 AVX512-BF16 或 AMX，Arm 上的 BF16）的 CPU 可能变快；在其他 CPU 上，bf16 要靠与 float32 之间的来回转换来模拟，常常反而*更慢*。(2) **DataLoader 工作进程**：读取一个样本很慢时（要读文件、解码图片），`num_workers=2` 让每个 rank 各有两个辅助**进程**，在它训练的同时准备批次；这些进程的启动方式（`fork`、`forkserver`、`spawn`）决定了它们能继承什么，以及启动要花多少时间。
#
# **你将学到**
# - bf16 autocast 用 16 位计算什么，什么仍然是 float32（参数、梯度、损失）
# - 怎样判断一台 CPU 有没有原生 bf16 指令，以及为什么这决定了速度
# - autocast 在内存上减半的是什么（为反向保存的激活值），不减半的又是什么（参数、梯度、优化器状态）
# - 为什么 bf16 不需要损失缩放，而 float16 需要
# - DataLoader 工作进程是进程；它们什么时候有帮助；fork、forkserver 和 spawn 各有什么要求
#
# **学习时间**：约 50 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 2 个 rank
#
# **你将看到**：float32 与 bf16 的损失曲线并排对比、各自的样本/秒，以及这台 CPU 上得到这个速度的原因；autocast 为反向计算保存的字节数；一个读取很慢的数据集在每个 rank 用 0 个和 2 个工作进程时的样本/秒、实际读取数据的是哪些进程，以及用 `fork` 和 `forkserver` 启动工作进程各要花多少时间。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %% [markdown]
# This lesson uses **2 ranks**, not 4: it measures speed, and many machines a lesson runs on (a
# laptop, a Binder session, a small cloud instance) have only a few cores. With 4 ranks plus 2 loader
# workers each, 12 processes would share those cores, and we would mostly measure how they take
# turns. The cell after `%ddp_start` prints how many cores this machine has and how many this kernel
# (and the ranks it starts) may use: the cores its affinity mask allows, capped by a container's
# CPU quota (Binder and docker show all the host's cores but may allow only one or two).

# %% [markdown] lang=zh
# 这一课只用 **2 个 rank**，而不是 4 个：它要测量速度，而运行课程的很多机器（笔记本电脑、Binder 会话、小型云主机）只有几个 CPU 核心。如果用 4 个 rank，每个再带 2 个数据加载工作进程，就是 12 个进程挤在这些核心上，测到的主要是它们如何轮流占用 CPU。`%ddp_start` 之后的单元格会打印这台机器有几个核心，以及这个内核（和它启动的各个 rank）能用几个核心：即它的亲和性掩码（affinity mask）允许的核心数，再以容器的 CPU 配额为上限（Binder 和 docker 显示的是宿主机的全部核心，但可能只允许使用一两个）。

# %%
%ddp_start 2

# %%
import os
from ddplab.shared.system import usable_cores

cores = os.cpu_count()
usable = usable_cores()            # the affinity mask (os.sched_getaffinity), capped by a container's CPU quota
print(say(f"this machine has {cores} cores; this kernel and its ranks may use {usable} of them",
          f"这台机器有 {cores} 个核心；这个内核及其 rank 可以使用其中 {usable} 个"))
if usable >= 2 + 2 * 2:
    print(say("enough for the 2 ranks and their 4 loader workers to run at the same time",
              "足够让 2 个 rank 和它们的 4 个数据加载工作进程同时运行"))
elif usable >= 2:
    print(say("each of the 2 ranks can have a core of its own; loader workers will share cores with them",
              "2 个 rank 各自可以独占一个核心；数据加载工作进程要和它们共用核心"))
else:
    print(say("the 2 ranks take turns on one core: the speeds measured below are lower than with a core per rank",
              "2 个 rank 轮流使用一个核心：下面测得的速度会低于每个 rank 独占一个核心时的速度"))

# %% [markdown]
# ## What this CPU can do in bf16
#
# `torch.backends.cpu.get_cpu_capability()` names the widest vector instructions PyTorch's own
# kernels use here (e.g. `AVX2`, `AVX512` on x86, `SVE256` or `DEFAULT` on Arm). Whether the CPU has
# **native bf16 instructions** is a separate question, asked two ways:
#
# - PyTorch's private helpers `torch.cpu._is_avx512_bf16_supported()` and
#   `torch.cpu._is_amx_tile_supported()` check x86's AVX512-BF16 (a bf16 dot product in one
#   instruction) and AMX (Intel's matrix tiles, since Xeon Sapphire Rapids); on other CPUs they
#   return False.
# - The flags the operating system lists for the CPU (`/proc/cpuinfo` on Linux): `avx512_bf16` and
#   `amx_bf16` on x86, `bf16` among the `Features` on Arm (AArch64).
#
# `torch.ops.mkldnn._is_mkldnn_bf16_supported()` answers yet another question: whether oneDNN, the
# library PyTorch uses for bf16 matrix multiplications on CPU, **can run bf16 at all** here. On x86 it
# is true on every CPU with AVX-512 (or the newer AVX-NE-CONVERT), including those without bf16
# arithmetic, where oneDNN *emulates* bf16 by converting to float32; on Arm it is true only with the
# bf16 instructions. So on x86 it is not a test for native bf16.

# %% [markdown] lang=zh
# ## 这台 CPU 的 bf16 能力
#
# `torch.backends.cpu.get_cpu_capability()` 给出 PyTorch 自带的内核在这里使用的最宽的向量指令集（例如 x86 上的 `AVX2`、`AVX512`，Arm 上的 `SVE256` 或 `DEFAULT`）。CPU 是否有**原生 bf16 指令**是另一个问题，这里从两个方面来问：
#
# - PyTorch 的私有辅助函数 `torch.cpu._is_avx512_bf16_supported()` 和 `torch.cpu._is_amx_tile_supported()` 检查 x86 的 AVX512-BF16（一条指令完成一次 bf16 点积）和 AMX（Intel 的矩阵 tile 单元，从 Xeon Sapphire Rapids 开始提供）；在其他 CPU 上它们返回 False。
# - 操作系统为 CPU 列出的标志（Linux 上的 `/proc/cpuinfo`）：x86 上的 `avx512_bf16` 和 `amx_bf16`，Arm（AArch64）上 `Features` 中的 `bf16`。
#
# `torch.ops.mkldnn._is_mkldnn_bf16_supported()` 回答的又是另一个问题：oneDNN（PyTorch 在 CPU 上做 bf16 矩阵乘法所用的库）在这里**能不能运行 bf16**。在 x86 上，凡是支持 AVX-512（或较新的 AVX-NE-CONVERT）的 CPU 它都返回 True，包括那些没有 bf16 运算指令的 CPU：在那些 CPU 上，oneDNN 通过转换成 float32 来*模拟* bf16；在 Arm 上，只有带 bf16 指令时它才返回 True。所以在 x86 上，它并不能用来判断是否有原生 bf16。

# %%
%%ddp
import platform

def cpu_flags():
    """The first CPU's flags (x86) or Features (Arm) from /proc/cpuinfo; None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return None

flags = cpu_flags()
found = {"AVX512_BF16": torch.cpu._is_avx512_bf16_supported() or "avx512_bf16" in (flags or ()),
         "AMX": torch.cpu._is_amx_tile_supported() or "amx_bf16" in (flags or ()),
         "Arm BF16": platform.machine() in ("aarch64", "arm64") and "bf16" in (flags or ())}
cpu = {"capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
       "flags_read": flags is not None, "native": [name for name, has in found.items() if has],
       "onednn_bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported()}

# %%
cpu = %ddp_gather cpu
cpu = cpu[0]                                               # both ranks run on this machine
yes = lambda flag: say("yes", "是") if flag else say("no", "否")
native = cpu["native"]
print(say(f"CPU: {cpu['machine']}; the capability PyTorch's kernels use: {cpu['capability']}",
          f"CPU：{cpu['machine']}；PyTorch 内核使用的指令集：{cpu['capability']}"))
if native:
    print(say(f"native bf16 instructions: {', '.join(native)}", f"原生 bf16 指令：{'、'.join(native)}"))
elif cpu["flags_read"]:
    print(say("native bf16 instructions: none (neither PyTorch's checks nor the CPU's flags list any)",
              "原生 bf16 指令：没有（PyTorch 的检查和 CPU 的标志都没有列出）"))
else:
    print(say("native bf16 instructions: none that PyTorch's x86 checks see; the CPU's flags could not be read here "
              "(no /proc/cpuinfo), so an Arm CPU's bf16 would go unseen",
              "原生 bf16 指令：PyTorch 的 x86 检查没有发现；这里读不到 CPU 的标志（没有 /proc/cpuinfo），所以 Arm CPU 的 "
              "bf16 指令可能没被发现"))
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
# 模型是 MLP 784-512-512-10（`ddplab.workloads.mlp`），两种方式使用相同的初始参数和相同的批次（每个 rank 每批 64 个样本），各训练 40 步。唯一的区别是前向计算和损失外面的 `autocast` 上下文；`backward()` 放在它外面，这是 PyTorch 推荐的做法（autograd 对每个运算的反向计算，使用该运算前向计算时的数据类型）。数据集有 1,024 个样本，所以 40 步就是 5 个 epoch，训练损失会明显下降。

# %% [markdown]
# **Predict, then run.** Read what the cell above found about this CPU and bf16. How fast will the
# bf16 autocast run be, in samples/s, as a multiple of the float32 run's? (2 would mean twice as
# fast, 0.5 half as fast.)

# %% [markdown] lang=zh
# **先预测，再运行。** 先看看上面的单元格关于这台 CPU 和 bf16 查到了什么。bf16 autocast 训练的速度（样本/秒）会是 float32 训练的多少倍？（2 表示速度是 float32 的 2 倍，0.5 表示速度只有它的一半。）

# %%
predict("5.bf16_speed", ...)    # bf16 autocast's samples/s as a multiple of float32's (2 = twice as fast)

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
reveal("5.bf16_speed", ratio, unit=say("× float32's speed", "× float32 的速度"))
if ratio > 1.15 and native:
    print(say(f"Faster: this CPU has native bf16 instructions ({' and '.join(native)}). oneDNN multiplies bf16 matrices "
              "with them: twice as many values per instruction as float32 (AMX's tiles far more), and half the bytes "
              "to move.",
              f"更快：这台 CPU 有原生 bf16 指令（{'和'.join(native)}）。oneDNN 用它们做 bf16 矩阵乘法：每条指令处理的数值"
              "是 float32 的两倍（AMX 的 tile 还要多得多），要搬运的字节数也只有一半。"))
elif ratio > 1.15:
    print(say("Faster, although no native bf16 instructions were found: this CPU has a fast bf16 path this lesson "
              "does not detect, or moving half the bytes paid off here.",
              "更快，尽管没有发现原生 bf16 指令：这台 CPU 有这一课检测不到的快速 bf16 途径，或者在这里只搬运一半字节"
              "带来了收益。"))
elif ratio < 0.87 and native:
    print(say(f"Slower, although this CPU has native bf16 instructions ({' and '.join(native)}): for matrices this "
              "small, casting the inputs of every layer to bf16 and the results back costs more than the faster "
              "multiplications save.",
              f"更慢，尽管这台 CPU 有原生 bf16 指令（{'和'.join(native)}）：矩阵这么小，把每一层的输入转换成 bf16、"
              "再把结果转换回来的开销，超过了更快的乘法所节省的时间。"))
elif ratio < 0.87 and cpu["onednn_bf16"]:
    print(say(f"Slower: no native bf16 instructions were found, yet oneDNN runs bf16 here ({cpu['capability']}), so it "
              "emulates bf16: it converts the values to float32 and multiplies in float32. The arithmetic is not "
              "sped up, and the conversions cost extra.",
              f"更慢：没有发现原生 bf16 指令，但 oneDNN 在这里（{cpu['capability']}）仍能运行 bf16，所以它只能模拟 bf16："
              "把数值转换成 float32，再用 float32 做乘法。计算没有加速，转换还要额外花时间。"))
elif ratio < 0.87:
    print(say("Slower: no native bf16 instructions were found and oneDNN does not run bf16 here at all. The bf16 "
              "matrix multiplications fall back to generic code that converts every value to float32 and back, far "
              "slower than the tuned float32 kernels.",
              "更慢：没有发现原生 bf16 指令，oneDNN 在这里也根本不运行 bf16。bf16 矩阵乘法退回到通用代码，把每个数值"
              "转换成 float32 再转换回来，比经过调优的 float32 内核慢得多。"))
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
# inputs of each multiplication to 8 significant bits (7 stored fraction bits plus the implicit
# leading 1; float32 has 23 + 1 = 24), but the loss, the gradients and the update stay float32.
#
# Why no loss scaler? float16 has 5 exponent bits: its smallest value is about 6e-8 and anything
# below about 3e-8 rounds to 0, so GPU training in float16 multiplies the loss by a large factor
# (`torch.amp.GradScaler`) so that small gradients survive, and divides it out before the update.
# bf16 has float32's 8 exponent bits and the same range (about 1e-38 to 3e38):

# %% [markdown] lang=zh
# 按步数看，两条损失曲线非常接近（最大差值见上面的输出）：bf16 把每次乘法的输入舍入到 8 位有效位（显式存储的 7 位尾数，加上隐含的前导 1；float32 是 23 + 1 = 24 位），但损失、梯度和参数更新仍然是 float32。
#
# 为什么不需要损失缩放？float16 只有 5 个指数位：它能表示的最小值约为 6e-8，小于约 3e-8 的值都会舍入为 0，所以在 GPU 上用 float16 训练时，要把损失乘上一个很大的系数（`torch.amp.GradScaler`），让很小的梯度得以保留，再在参数更新之前把这个系数除掉。bf16 有与 float32 相同的 8 个指数位，表示范围也相同（约 1e-38 到 3e38）：

# %%
import torch                                               # here in the notebook: no rank needed

tiny = torch.tensor([1e-8, 1e-20, 1e-30])
print("float32 :", tiny.tolist())
print("float16 :", tiny.half().float().tolist())
print("bfloat16:", tiny.bfloat16().float().tolist())
assert tiny.half().float().tolist() == [0.0, 0.0, 0.0] and tiny.bfloat16().float().gt(0).all()

# %% [markdown]
# ## What autocast halves in memory, and what it does not
#
# A common shortcut says bf16 "halves the memory". Measured here, in the notebook, on one forward
# pass of the same MLP with a batch of 64: `torch.autograd.graph.saved_tensors_hooks` sees every
# tensor autograd keeps for the backward pass, and the cell adds up the bytes of those that are not
# the parameters themselves (a saved parameter costs no extra memory). Under autocast, some of them
# are bf16 **copies of the weights**, which autocast makes (and caches) so that the multiplications
# can run in bf16; the cell counts them apart from the activations.

# %% [markdown] lang=zh
# ## autocast 在内存上减半了什么，没有减半什么
#
# 一种简化的说法是 bf16“让内存减半”。这里在 notebook 中实测：同一个 MLP、64 个样本的批次，做一次前向计算；`torch.autograd.graph.saved_tensors_hooks` 能看到 autograd 为反向计算保存的每一个张量，单元格把其中不是参数本身的那些张量的字节数加起来（保存一个参数不占额外内存）。在 autocast 下，其中一些是**权重的 bf16 副本**：autocast 生成（并缓存）它们，好让乘法用 bf16 计算；单元格把它们和激活值分开统计。

# %% [markdown]
# **Predict, then run.** One forward pass with a batch of 64: add up the bytes autograd saves for the
# backward pass, activations and weight copies together. Under bf16 autocast, what multiple of the
# float32 total will that be? (0.5 would be half.)

# %% [markdown] lang=zh
# **先预测，再运行。** 用 64 个样本的批次做一次前向计算：把 autograd 为反向计算保存的字节数加起来，激活值和权重副本都算在内。在 bf16 autocast 下，这个总数会是 float32 下的多少倍？（0.5 表示一半。）

# %%
predict("5.saved_bytes", ...)    # bytes saved for backward under autocast, as a multiple of float32's (batch 64)

# %%
import torch.nn as nn
from ddplab.workloads import mlp, synthetic_classification

def saved_bytes(bf16, batch=64):
    """Bytes autograd saves for backward in one forward pass: {"activations": ..., "weight copies": ...}."""
    model = mlp(seed=0)
    X, Y = synthetic_classification(n=batch, features=784, classes=10, seed=0).tensors
    params = list(model.parameters())
    found = {}

    def pack(t):
        if not any(t.data_ptr() == p.data_ptr() for p in params):          # a parameter itself: no new memory
            copy = any(t.shape == w.shape and torch.equal(t, w.to(t.dtype))                  # Linear saves W.t()
                       for p in params for w in (p.detach(), p.detach().t()) if p.dim() == 2)
            found[t.data_ptr()] = ("weight copies" if copy else "activations", t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            nn.functional.cross_entropy(model(X), Y)
    return {kind: sum(n for k, n in found.values() if k == kind) for kind in ("activations", "weight copies")}

mem32, mem16 = saved_bytes(bf16=False), saved_bytes(bf16=True)
n_params = sum(p.numel() for p in mlp(seed=0).parameters())
halved = mem16["activations"] / mem32["activations"]
assert 0.45 < halved < 0.6 and mem32["weight copies"] == 0 < mem16["weight copies"]
print(say(f"saved for backward, batch 64: activations {mem32['activations'] / 1e3:.0f} kB in float32, "
          f"{mem16['activations'] / 1e3:.0f} kB under bf16 autocast ({halved:.2f} times as many bytes); bf16 weight copies: "
          f"none in float32, {mem16['weight copies'] / 1e3:.0f} kB under autocast",
          f"批次为 64 时为反向计算保存的：激活值在 float32 下 {mem32['activations'] / 1e3:.0f} kB，在 bf16 autocast 下 "
          f"{mem16['activations'] / 1e3:.0f} kB（是 float32 的 {halved:.2f} 倍）；权重的 bf16 副本：float32 下没有，autocast 下 "
          f"{mem16['weight copies'] / 1e3:.0f} kB"))
print(say(f"not halved: the {n_params:,} parameters, their gradients and SGD's momentum stay float32, "
          f"{3 * 4 * n_params / 1e6:.1f} MB under autocast as without it",
          f"没有减半的：{n_params:,} 个参数、它们的梯度和 SGD 的动量仍然是 float32，无论用不用 autocast 都是 "
          f"{3 * 4 * n_params / 1e6:.1f} MB"))
total32, total16 = sum(mem32.values()), sum(mem16.values())
reveal("5.saved_bytes", total16 / total32, unit=say("× float32's bytes", "× float32 的字节数"))
if total16 < total32:
    print(say(f"in all, autocast kept {total16 / 1e3:.0f} kB instead of {total32 / 1e3:.0f} kB for this batch",
              f"合计：对这个批次，autocast 保存了 {total16 / 1e3:.0f} kB，而 float32 是 {total32 / 1e3:.0f} kB"))
else:
    print(say(f"in all, autocast kept {total16 / 1e3:.0f} kB instead of {total32 / 1e3:.0f} kB: at a batch of 64 the "
              "weight copies cost more than the halved activations save",
              f"合计：autocast 保存了 {total16 / 1e3:.0f} kB，而 float32 是 {total32 / 1e3:.0f} kB：批次为 64 时，权重副本"
              "占用的内存比激活值减半省下的还多"))

# %% [markdown]
# The activations, which grow with the batch, come out at about half: not exactly, because the
# labels are int64 and the loss's log-softmax stays float32 (autocast computes the loss in float32).
# The weight copies grow with the model, not the batch, so with large batches (or long sequences)
# the halved activations win. The parameters, gradients and optimizer state are not touched by
# autocast at all: to shrink those, you would store the model itself in bf16
# (`model.to(torch.bfloat16)`), which is a different thing with its own risk (an update smaller
# than the weight's last bit is lost).

# %% [markdown] lang=zh
# 随批次增长的激活值大约减半：并不正好是一半，因为标签是 int64，而损失中的 log-softmax 仍然是 float32（autocast 用 float32 计算损失）。权重副本随模型而不是随批次增长，所以批次很大（或序列很长）时，激活值减半的收益会占上风。参数、梯度和优化器状态完全不受 autocast 影响：要缩小它们，就得把模型本身存成 bf16（`model.to(torch.bfloat16)`），那是另一回事，也有它自己的风险（小于权重最后一位的更新会丢失）。

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
# 一个 `__getitem__` 每读一个样本要花 2 毫秒的数据集（用 `time.sleep` 代表读取和解码文件），共 512 个样本，由 `DistributedSampler` 分给各 rank（每个 rank 256 个），再由 `DataLoader` 按每批 16 个读取 2 个 epoch，每读一批就做一个小的 DDP 训练步（仪表盘实时显示样本/秒）。每个样本还会报告是谁读了它：进程号（`os.getpid()`）、父进程号，以及 `torch.utils.data.get_worker_info()` 给出的工作进程编号（由 rank 自己读取样本时为 `None`）。三种设置：
#
# * `num_workers=0`：rank 自己读取每个样本，然后用这一批训练；
# * `num_workers=2`：每个 rank 有两个工作进程，在 rank 训练的同时提前读取批次；`DataLoader` 在每个 epoch 开始时都会启动新的工作进程；
# * `num_workers=2, persistent_workers=True`：同上，但工作进程只启动一次，之后一直保留。
#
# 工作进程的**启动方式**被固定下来：`multiprocessing_context="fork"`。如果不指定，`DataLoader` 就用 Python 的默认方式，而默认方式并非处处相同：在 Linux 上，Python 3.13 及以前是 `fork`，从 Python 3.14 起是 `forkserver`；在 macOS 和 Windows 上是 `spawn`。后面讲启动方式的一节会说明这为什么重要。

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
              f"每个 rank 用 2 个工作进程时，速度是不用工作进程时的 {fresh / alone:.1f} 倍：rank 用一个批次训练的同时，它的两个工作进程在读取"
              f"后面的批次，同时读两个样本（2 个 rank 最多每秒 {4 / 0.002:.0f} 个样本）。"))
else:
    print(say(f"2 workers per rank gained little or nothing ({fresh / alone:.2f}x): the workers need CPU time too "
              "(to start, and to hand every batch over to the rank), and when the machine is busy they wait for a "
              "core instead of reading.",
              f"每个 rank 用 2 个工作进程几乎没有收益（速度是不用工作进程时的 {fresh / alone:.2f} 倍）：工作进程本身也需要 CPU 时间（启动，以及"
              "把每个批次交给 rank），机器繁忙时，它们就在等待 CPU 核心，而不是在读数据。"))
if kept > 1.1 * fresh:
    print(say(f"Persistent workers were faster still ({kept / fresh:.2f}x): a DataLoader starts new workers every "
              "epoch, and each start costs time; persistent workers are started once.",
              f"常驻工作进程还要更快（速度是非常驻时的 {kept / fresh:.2f} 倍）：DataLoader 每个 epoch 都要启动新的工作进程，每次启动都"
              "要花时间；常驻工作进程只启动一次。"))
elif kept >= 0.9 * fresh:
    print(say(f"Persistent workers were about as fast ({kept / fresh:.2f}x): forking a worker is cheap here (measured "
              "below), next to 2 epochs of reading.",
              f"常驻工作进程的速度差不多（是非常驻时的 {kept / fresh:.2f} 倍）：在这里 fork 一个工作进程很便宜（下面会测量），"
              "与 2 个 epoch 的读取时间相比可以忽略。"))
else:
    print(say(f"Persistent workers were slower this time ({kept / fresh:.2f}x), although they start only once: "
              "most likely noise from other programs on this machine. Run the cell again.",
              f"这一次常驻工作进程反而更慢（速度是非常驻时的 {kept / fresh:.2f} 倍），尽管它们只启动一次：这很可能是本机上其他程序"
              "带来的噪声。请再运行一次。"))

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
# **常见说法 / 实际情况。** 一种常见的说法是：`DataLoader` 的工作进程是在训练进程内部并行加载数据的线程。实际情况是：每个工作进程都是由 rank 启动的一个独立的**进程**。上面的运行显示了这一点：样本是由一些有自己进程号的进程读取的，它们的进程号与 rank 不同，父进程正是 rank，而 `get_worker_info()` 把它们编号为 0 和 1（在 rank 自己里面它返回 `None`）。既然是进程，工作进程就有自己的内存和自己的 Python 解释器（与训练循环不共享同一把锁）：批次通过队列和共享内存回到 rank；工作进程对数据集对象做的修改，rank 永远看不到；启动工作进程也要花时间，下一节就来测量。

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
#
# **Expected failure.** That last attempt fails on purpose: the two workers cannot unpickle
# `SlowDataset`, and each prints its traceback (ending in `AttributeError: Can't get attribute
# 'SlowDataset' on <module '__main__'...>`) to rank 0's stderr, shown under the cell. Those
# tracebacks are expected; the rank catches the `RuntimeError` the `DataLoader` then raises and goes on.

# %% [markdown] lang=zh
# ## 工作进程如何启动：fork、forkserver、spawn
#
# * **fork** 复制 rank 的进程（写时复制，所以很快）：工作进程一开始就有 torch，以及 rank 定义过的一切，包括 `SlowDataset` 这个在 notebook 单元格里定义的类。什么都不需要 pickle。（如果被 fork 的进程里还有别的线程，而某个线程恰好持有一把锁，fork 出来的进程就可能死锁；这正是 Python 3.14 把 Linux 上的默认方式改掉的原因。）
# * **forkserver** 第一次使用时启动一个干净的服务进程，之后每个工作进程都从这个服务进程 fork 出来。**spawn** 为每个工作进程启动一个全新的 Python。无论哪种，工作进程都没有 rank 的内存：它收到的是 **pickle** 过的数据集，而 pickle 把对象的类记录为模块名加类名，工作进程必须能够 **import** 它。在 notebook 单元格里定义的类只存在于 rank 的 `__main__` 中，所以在那里会失败；应该把它放进一个 `.py` 文件。
#
# 下一个单元格只在 rank 0 上运行，测量从创建一个带 2 个工作进程的 `DataLoader` 到拿到第一个批次所需的时间：用 `fork` 测一次；用 `forkserver` 测两次（第一次要启动服务进程；它会预先导入 torch，即 `set_forkserver_preload(["torch"])`，这样从它 fork 出来的工作进程就不必各自导入 torch）；再用 `forkserver` 读取 `SlowDataset`（设置 `timeout=2`，这样失败会在 2 秒后而不是 5 秒后报告出来）。
#
# **预期的失败。** 最后这一次是故意让它失败的：两个工作进程无法 unpickle `SlowDataset`，各自把报错的 traceback（最后一行是 `AttributeError: Can't get attribute 'SlowDataset' on <module '__main__'...>`）打印到 rank 0 的 stderr，显示在单元格下方。这些 traceback 是预期之中的；rank 会捕获 `DataLoader` 随后抛出的 `RuntimeError`，然后继续运行。

# %%
%%ddp --ranks 0
import multiprocessing
from torch.utils.data import TensorDataset
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

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
print(say("Next, SlowDataset with forkserver: its workers will fail to unpickle it. The tracebacks they print "
          "below are expected.",
          "接下来用 forkserver 读取 SlowDataset：它的工作进程将无法 unpickle 它。它们在下面打印的 traceback 是预期之中的。"),
      flush=True)
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
          "torch. spawn pays that for every worker, and again every epoch unless "
          "persistent_workers=True.",
          f"第一个使用 forkserver 的 DataLoader 耗时是 fork 的 {new / fork:.0f} 倍：要启动一个全新的 Python 并导入 torch。"
          "spawn 为每个工作进程都要付出这个代价，而且除非设置 persistent_workers=True，"
          "每个 epoch 还要再付一次。"))
if running < 2 * fork:
    print(say("Once the server runs, a worker forked from it starts about as fast as one forked from the rank.",
              "服务进程运行起来之后，从它 fork 出的工作进程启动得和从 rank fork 出的差不多快。"))
else:
    print(say(f"Even with the server running, a worker took {running / fork:.1f}x as long as a fork of the rank: it "
              "receives the data set pickled and starts its loop from scratch, and on a busy machine it waits for a core.",
              f"即使服务进程已经在运行，一个工作进程的启动时间仍是 fork rank 的 {running / fork:.1f} 倍：它要接收 pickle "
              "过的数据集，从头开始自己的循环，机器繁忙时还要等待 CPU 核心。"))
print(say(f"SlowDataset, defined in a cell, with forkserver: {started['cell class']}. The workers could not unpickle "
          "it (their tracebacks in rank 0's stderr above were expected): its class is __main__.SlowDataset, and the server's "
          "__main__ has no such class. With fork it worked.",
          f"在单元格里定义的 SlowDataset 配合 forkserver：{started['cell class']}。工作进程无法 unpickle 它（上面 rank 0 的 stderr 中"
          "它们的 traceback 正是预期之中的）：它的类是 __main__.SlowDataset，而服务进程的 __main__ 里没有这个类。用 fork 时"
          "则一切正常。"))

# %% [markdown]
# So: pin the start method (`multiprocessing_context=`) so that the same code behaves the same on
# every machine and Python version; with `forkserver` or `spawn`, keep data sets, `collate_fn` and
# `worker_init_fn` in an importable `.py` file, and use `persistent_workers=True` so that workers
# start once. ddplab ends the workers with their rank (`%ddp_stop`, or the kernel dying).
#
# Workers help when reading *waits* (disk, network) or when there are spare cores to decode on:
# cores the ranks themselves do not keep busy. How many this machine has:

# %% [markdown] lang=zh
# 所以：固定启动方式（`multiprocessing_context=`），让同样的代码在每台机器、每个 Python 版本上行为一致；使用 `forkserver` 或 `spawn` 时，把数据集、`collate_fn` 和 `worker_init_fn` 放在一个可以 import 的 `.py` 文件里，并设置 `persistent_workers=True`，让工作进程只启动一次。ddplab 会让工作进程随它们的 rank 一起结束（`%ddp_stop`，或者内核崩溃时）。
#
# 当读取数据需要*等待*（磁盘、网络），或者有空闲的 CPU 核心可以用来解码时，工作进程才有帮助：所谓空闲，是指 rank 自己没有占用的核心。这台机器上有几个：

# %%
spare = usable - 2                                         # the cores the 2 ranks leave free
if spare >= 4:
    print(say(f"{usable} usable cores, 2 ranks: {spare} spare cores, enough for 2 CPU-bound workers per rank to "
              "decode while the ranks train",
              f"可用 {usable} 个核心，2 个 rank：空闲 {spare} 个核心，足够让每个 rank 的 2 个消耗 CPU 的工作进程在 rank "
              "训练的同时解码"))
elif spare > 0:
    print(say(f"{usable} usable cores, 2 ranks: {spare} spare core{'s' if spare > 1 else ''}, fewer than the 4 workers: "
              "CPU-bound workers would partly compete with training for cores",
              f"可用 {usable} 个核心，2 个 rank：空闲 {spare} 个核心，少于 4 个工作进程：消耗 CPU 的工作进程会有一部分"
              "和训练争抢 CPU 核心"))
else:
    print(say(f"{usable} usable core{'s' if usable > 1 else ''}, 2 ranks: no spare core. Workers that only wait (as "
              "here) still help; a real CPU-bound decoder in the workers would compete with training for the same cores.",
              f"可用 {usable} 个核心，2 个 rank：没有空闲的核心。只是在等待的工作进程（如这里）仍然有帮助；如果工作进程里是一个"
              "真正消耗 CPU 的解码器，它就会和训练争抢同样的核心。"))


# %% [markdown]
# ## Exercises
#
# Each exercise asks for one value: write it in place of `...` in the cell below it and run the cell;
# `check` says whether it is right for this run, and why (it never shows the answer).
#
# **5.1** bf16 keeps 8 significant bits: 7 stored fraction bits plus the implicit leading 1. What is
# the smallest bf16 number greater than 1? Answer a number. (You can test a guess `g` with
# `torch.tensor(g).bfloat16().item()`.)

# %% [markdown] lang=zh
# ## 练习
#
# 每道练习要求写出一个值：把它填在下面单元格里 `...` 的位置，然后运行这个单元格；`check` 会告诉你对这次运行来说它对不对、为什么（它从不显示答案）。
#
# **5.1** bf16 保留 8 位有效位：显式存储的 7 位尾数，加上隐含的前导 1。比 1 大的最小 bf16 数是多少？请回答一个数。（可以用 `torch.tensor(g).bfloat16().item()` 检验你的猜测 `g`。）

# %%
answer = ...    # the smallest bfloat16 number greater than 1
check("5.1", answer)

# %% [markdown]
# **5.2** In the memory measurement above (a batch of 64), autocast saved fewer bytes of activations
# but added the bf16 weight copies, whose size does not depend on the batch. From the printed
# numbers, from what batch size on does bf16 autocast keep fewer bytes for the backward pass than
# float32 (activations and weight copies together)? Answer a number of samples; the cell passes the
# measured bytes to the check.

# %% [markdown] lang=zh
# **5.2** 在上面的内存测量中（批次为 64），autocast 保存的激活值字节数更少，但多出了权重的 bf16 副本，而副本的大小与批次无关。根据打印出来的数字，批大小从多少起，bf16 autocast 为反向计算保存的字节数（激活值加权重副本）才比 float32 少？请回答一个样本数；单元格会把测得的字节数传给检查。

# %%
answer = ...    # the batch size from which autocast keeps fewer bytes for backward than float32
check("5.2", answer, activations32=mem32["activations"], activations16=mem16["activations"],
      copies=mem16["weight copies"], batch=64)

# %% [markdown]
# **5.3** The cell above counted this machine's spare cores for this lesson's 2 ranks. Now take a
# machine with **16** usable cores that runs **4** ranks. What is the largest `num_workers` per rank
# such that every rank and every worker can have a core of its own (so that CPU-bound workers do not
# slow training down)? Answer a whole number (0 if there is none).

# %% [markdown] lang=zh
# **5.3** 上面的单元格数出了这台机器为本课的 2 个 rank 留下的空闲核心。现在换一台有 **16** 个可用核心、运行 **4** 个 rank 的机器。要让每个 rank 和每个工作进程都能独占一个核心（这样消耗 CPU 的工作进程就不会拖慢训练），每个 rank 的 `num_workers` 最大能是多少？请回答一个整数（一个也不行就答 0）。

# %%
answer = ...    # the largest num_workers per rank that leaves every process a core of its own
check("5.3", answer, usable=16, ranks=4)

# %% [markdown]
# **5.4** The "2 workers" run (no `persistent_workers`) read 2 epochs, and the cell after it checked
# how many different worker processes (pids) read each rank's samples. If that run had read
# **5 epochs** instead, how many worker processes would have been started in all, over both ranks?
# Answer a whole number.

# %% [markdown] lang=zh
# **5.4** “2 个工作进程”的那次运行（没有设置 `persistent_workers`）读了 2 个 epoch，它后面的单元格检查了读取每个 rank 样本的不同工作进程（pid）有多少个。如果那次运行读的是 **5 个 epoch**，两个 rank 合计一共会启动多少个工作进程？请回答一个整数。

# %%
answer = ...    # worker processes started in all, 2 ranks, num_workers=2, 5 epochs, not persistent
check("5.4", answer, ranks=2, workers=2, epochs=5, seen=len(loading[0]["2 workers"]["readers"]))

# %%
%ddp_stop
