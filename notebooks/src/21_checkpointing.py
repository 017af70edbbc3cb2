# %% [markdown]
# # Lesson 21 · Two kinds of checkpoints: activations and sharded state
#
# **In short.** "Checkpoint" names two different tools in distributed training. **Activation
# checkpointing** saves memory *inside a step*: instead of keeping every intermediate tensor of the
# forward pass for backward, a block keeps only its input and runs its forward again during backward.
# **Sharded checkpoints** save the training state *to disk*: with FSDP every rank holds a different
# quarter of the parameters and of Adam's state, so every rank writes its own shards with
# `torch.distributed.checkpoint` (DCP). This lesson trains a model sharded by FSDP2 on 4 ranks with no
# block, every other block and every block checkpointed, measures what autograd keeps for backward and
# what the recomputation costs, then saves the model and Adam's state with DCP, one file per rank, and
# loads them onto a pool of 2 ranks: every tensor comes back exactly.
#
# **You will learn**
# - what autograd keeps for backward, block by block, measured with `saved_tensors_hooks`, and what `torch.utils.checkpoint.checkpoint` keeps instead
# - what activation checkpointing costs: the FLOPs and CPU time of the recomputation (less than a whole forward, thanks to early stop), with gradients bit for bit the same
# - why FSDP shards the parameters, gradients and optimizer state but not the activations
# - how DCP saves a sharded model and Adam's state, one file per rank plus metadata, and what gathering a full state dict on rank 0 costs instead
# - how DCP loads the shards of 4 ranks onto 2 ranks (resharding), checked tensor for tensor
#
# **Study time:** about 45 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks, then 2
#
# **Memory:** about 1.2 GiB at its peak: it fits Binder's 2 GiB, but not a 1 GiB session (a classroom
# hub). There, set `RANKS = 2` in the cell that starts the pool: the lesson then saves with 2 ranks and
# loads onto 1 (about 0.8 GiB; the text still speaks of 4 and 2, the outputs say what ran).
#
# **You will see:** the memory saved for backward against the compute time of a step, for three
# settings, beside what FSDP2 shards; the recomputation on the timeline, as forward inside backward;
# the checkpoint's files, and the bytes each rank writes with DCP and with a full state dict; and the
# files each of 2 ranks reads to load the shards of 4.

# %% [markdown] lang=zh
# # 第 21 课 · 两种检查点：激活与分片状态
#
# **简而言之**：在分布式训练里，“检查点”指两种不同的工具。**激活检查点**在*一步之内*节省内存：一个块不再为反向传播保留前向过程中的每个中间张量，而是只保留自己的输入，到反向传播时再把自己的前向运行一遍。**分片检查点**把训练状态保存*到磁盘上*：使用 FSDP 时，每个 rank 持有参数和 Adam 状态中各不相同的四分之一，所以每个 rank 都用 `torch.distributed.checkpoint`（DCP）写下自己的分片。这一课先在 4 个 rank 上训练一个由 FSDP2 分片的模型，分别不用激活检查点、每隔一个块用一次、每个块都用，测量 autograd 为反向传播保留了多少、重新计算又花了多少；然后用 DCP 保存模型和 Adam 的状态（每个 rank 一个文件），再把它们加载到一个只有 2 个 rank 的进程池中：每个张量都原样回来。
#
# **你将学到**
# - autograd 为反向传播逐块保留了什么（用 `saved_tensors_hooks` 测量），以及 `torch.utils.checkpoint.checkpoint` 改为只保留什么
# - 激活检查点的代价：重新计算的浮点运算次数和 CPU 时间（由于提前停止，少于一整次前向），而梯度逐位不变
# - 为什么 FSDP 分片参数、梯度和优化器状态，却不分片激活
# - DCP 如何保存分片的模型和 Adam 状态（每个 rank 一个文件，外加元数据），以及改为在 rank 0 上收集完整的状态字典要付出什么
# - DCP 如何把 4 个 rank 的分片加载到 2 个 rank 上（重新分片），并逐个张量核对
#
# **学习时间**：约 45 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 先 4 个 rank，再 2 个
#
# **内存**：峰值约 1.2 GiB：Binder 的 2 GiB 装得下，1 GiB 的会话（课堂用的 hub）装不下。在那里，把启动进程池的单元格中的 `RANKS = 4` 改成 `RANKS = 2`：这一课就用 2 个 rank 保存，再加载到 1 个 rank 上（约 0.8 GiB；正文仍然按 4 个和 2 个来讲，输出会说明实际运行的是多少个）。
#
# **你将看到**：三种设置下，为反向传播保存的内存与一步的计算时间的对比，以及旁边 FSDP2 分片的那些张量；时间线上的重新计算，即反向传播之中的前向；检查点的文件，以及用 DCP 和用完整状态字典时每个 rank 写下的字节数；还有 2 个 rank 中的每一个为加载 4 个 rank 的分片读了哪些文件。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
RANKS = 4          # the pool that trains and saves; section 3 loads its checkpoint onto half as many
%ddp_start {RANKS}

# %% [markdown]
# ## 1. Activation checkpointing: memory against time
#
# The model: 8 blocks, each `Linear(128, 512)`, `ReLU`, `Linear(512, 128)`, about a million
# parameters. `build` shards each block with FSDP2's `fully_shard` over `ddplab.mesh()` (a device mesh
# of the pool's ranks), then the whole model, as lesson 19 does: at rest each rank holds a quarter of
# every parameter, and a block's parameters are all-gathered just before it runs. Each rank trains on
# its own batch of `B` = 1024 samples.
#
# `build(seed, checkpointed)` runs the blocks listed in `checkpointed` under
# `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`: such a block keeps only its input
# `x` for backward, and backward runs the block's forward again to get the rest (the **recompute**)
# before it goes back through the block. `use_reentrant=False` is the variant torch's documentation
# recommends; without the argument torch warns and falls back to the older, reentrant one. (A block
# with dropout would get the same random mask in the recompute: `checkpoint` saves the random number
# generator's state and restores it, `preserve_rng_state=True` by default.) The function is written
# here in the notebook and sent to the ranks with `%ddp_push`, as lesson 11 sends its training loop.

# %% [markdown] lang=zh
# ## 1. 激活检查点：内存与时间的交换
#
# 模型：8 个块，每个块是 `Linear(128, 512)`、`ReLU`、`Linear(512, 128)`，大约一百万个参数。`build` 先用 FSDP2 的 `fully_shard` 在 `ddplab.mesh()`（由进程池的各个 rank 组成的设备网格）上把每个块分片，再把整个模型分片，就像第 19 课那样：静止时每个 rank 持有每个参数的四分之一，一个块的参数在它运行之前才用 all-gather 收集起来。每个 rank 用自己的批次训练，批大小 `B` = 1024。
#
# `build(seed, checkpointed)` 让 `checkpointed` 中列出的块在 `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` 之下运行：这样的块只为反向传播保留它的输入 `x`，反向传播先把这个块的前向再运行一遍，得到其余的张量（**重新计算**），然后才穿过这个块往回走。`use_reentrant=False` 是 torch 文档推荐的实现；不传这个参数时，torch 会发出警告，并退回到较老的可重入（reentrant）实现。（带 dropout 的块在重新计算时会得到同样的随机掩码：`checkpoint` 会保存随机数生成器的状态并在重新计算时恢复它，默认 `preserve_rng_state=True`。）这个函数写在 notebook 里，再用 `%ddp_push` 发送到各个 rank，就像第 11 课发送它的训练循环那样。

# %%
W, H, L, B = 128, 512, 8, 1024     # width, hidden width, blocks, samples per rank and step
STEPS = 6                          # training steps of each setting
# the settings, in order: (name, the blocks checkpointed)
SETTINGS = [("none", []), ("every other block", list(range(0, L, 2))), ("every block", list(range(L)))]


def build(seed, checkpointed=()):
    """The lesson's model on this rank: L blocks, each an FSDP2 unit over the pool's ranks; the blocks
    whose index is in `checkpointed` run under activation checkpointing."""
    from torch.distributed.fsdp import fully_shard
    from torch.utils.checkpoint import checkpoint

    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(W, H), nn.ReLU(), nn.Linear(H, W)) for _ in range(L))

        def forward(self, x):
            for i, block in enumerate(self.blocks):
                if i in checkpointed:
                    x = checkpoint(block, x, use_reentrant=False)   # keeps x; runs the block again in backward
                else:
                    x = block(x)                                    # keeps what its backward needs
            return x

    torch.manual_seed(seed)                     # the same initial model on every rank
    model = Blocks()
    mesh = ddplab.mesh()                        # a 1D device mesh: every rank of the pool
    for block in model.blocks:
        fully_shard(block, mesh=mesh)           # one FSDP unit per block: gathered when it runs
    return fully_shard(model, mesh=mesh)

# %%
%ddp_push W H L B STEPS SETTINGS build

# %% [markdown]
# **What autograd keeps for backward.** For each block, in float32 (4 bytes a number), for a batch of
# `B` rows:
#
# - the first `Linear`'s input, `B`·128 numbers: its weight's gradient is the product of that input
#   and the gradient that comes back;
# - the `ReLU`'s output, `B`·512 numbers: `ReLU`'s backward needs it (where it is zero), and the second
#   `Linear` needs it as its input. One tensor, saved twice: one piece of memory;
# - nothing of the second `Linear`'s output: that is the next block's input, counted there.
#
# That is `B`·(128 + 512)·4 bytes a block. The loss, `mse_loss`, keeps the model's output and the
# target: `B`·128·4 bytes each. A checkpointed block keeps its input only: `B`·128·4 bytes.
#
# **How it is measured.** Inside `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`, autograd
# calls `pack` with every tensor it saves for backward; `SavedForBackward` below notes the memory (the
# storage) each one lives in, counts each storage once, and returns the tensor unchanged. Parameters are
# not counted: their memory belongs to the model, which holds it anyway. Two more measurements:
# `FlopCounterMode` (`torch.utils.flop_counter`) counts the floating-point operations of every matrix
# product that runs, in forward, backward and the recompute; and `time.thread_time()` is the CPU time of
# the rank's own thread. That is all of torch's compute only if torch computes on that thread alone, and
# ddplab gives each rank's torch `cores // ranks` threads, at least one (the cell below prints how many
# this pool has): with two or more, a matrix product runs on several threads, and this thread's time
# misses the others'. So for these measurements the cell pins torch to one thread per rank,
# `torch.set_num_threads(1)`, and gives the pool's setting back after. It also reads
# `time.process_time()`, the CPU time of all the rank's threads, and checks that this one did most of it
# (the rest: gloo's threads, which run the all-gathers and reduce-scatters, and ddplab's).
# Thread time counts neither the time a rank waits for the others in FSDP's collectives (waiting takes
# no CPU), nor the time it waits for a core: 4 ranks share the machine's cores, and where they outnumber
# the cores, wall-clock times mostly measure that sharing.
#
# Each setting trains a new model from the same seed, on the same batch, for `STEPS` = 6 steps with Adam.
# The three take their steps in turn (a step of each, then the next round), so that whatever else the
# machine is doing meanwhile weighs on the three alike; and each step's CPU time is compared with that of
# the step without checkpointing in the same round, so that a slow moment of the machine is compared with
# itself. The first round (which also counts FLOPs) is left out; what a setting costs is the middle
# (median) of its 5 rounds' ratios, on each rank.

# %% [markdown] lang=zh
# **autograd 为反向传播保留了什么。** 对每个块，以 float32 计（每个数 4 字节），批次有 `B` 行：
#
# - 第一个 `Linear` 的输入，`B`·128 个数：它的权重的梯度就是这个输入与传回来的梯度之积；
# - `ReLU` 的输出，`B`·512 个数：`ReLU` 的反向传播需要它（看哪里为零），第二个 `Linear` 也需要它，因为它是第二个 `Linear` 的输入。一个张量被保存了两次：只占一份内存；
# - 第二个 `Linear` 的输出一点也不保留：它是下一个块的输入，算在下一个块里。
#
# 所以每个块是 `B`·(128 + 512)·4 字节。损失函数 `mse_loss` 保留模型的输出和目标值：各 `B`·128·4 字节。使用激活检查点的块只保留它的输入：`B`·128·4 字节。
#
# **怎样测量。** 在 `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` 之内，autograd 每为反向传播保存一个张量，就用这个张量调用一次 `pack`；下面的 `SavedForBackward` 记下每个张量所在的那块内存（它的 storage），每块内存只算一次，然后原样返回这个张量。参数不计入：它们的内存属于模型，模型无论如何都持有它。另外还有两项测量：`FlopCounterMode`（`torch.utils.flop_counter`）统计实际运行的每个矩阵乘法的浮点运算次数，包括前向、反向和重新计算；`time.thread_time()` 是 rank 自己那个线程的 CPU 时间。只有当 torch 只在这一个线程上计算时，它才是 torch 的全部计算，而 ddplab 给每个 rank 的 torch `cores // ranks` 个线程，至少一个（下面的单元格会打印这个进程池的线程数）：有两个或更多线程时，一次矩阵乘法会在几个线程上运行，这个线程的时间就漏掉了其他线程的时间。所以在这些测量中，单元格让每个 rank 的 torch 只用一个线程（`torch.set_num_threads(1)`），测完再恢复进程池原来的设置。它还读取 `time.process_time()`，即 rank 所有线程的 CPU 时间，并核对其中的大部分是这个线程做的（其余的是 gloo 的线程，它们运行 all-gather 和 reduce-scatter，以及 ddplab 的线程）。线程时间既不计 rank 在 FSDP 的集合通信中等待其他 rank 的时间（等待不占用 CPU），也不计它等待 CPU 核心的时间：4 个 rank 共用这台机器的 CPU 核心，在 rank 比核心多的地方，墙钟时间测到的主要是这种共用。
#
# 每种设置都从同一个随机种子新建一个模型，在同一个批次上用 Adam 训练 `STEPS` = 6 步。三者轮流走各自的一步（每种设置各走一步，再进入下一轮），这样无论这台机器同时还在做什么，对三者的影响都一样；而且每一步的 CPU 时间都与同一轮中不用激活检查点的那一步相比，这样机器慢下来的时刻只与它自己相比。第一轮（它还要统计浮点运算次数）不计；一种设置的代价是它 5 轮比值的中位数，在每个 rank 上分别计算。

# %% [markdown]
# **Predict, then run.** Every block checkpointed, against no block checkpointed, on each rank:
#
# - the bytes saved for backward: what fraction of those saved without? Write a number between 0 and 1.
# - the FLOPs of a step (forward, backward and the recompute): how many times those without? Write a
#   number: 1 means no more work.

# %% [markdown] lang=zh
# **先预测，再运行。** 每个块都使用激活检查点，与一个块也不用相比，在每个 rank 上：
#
# - 为反向传播保存的字节数：是不用时的多少？写一个 0 到 1 之间的数。
# - 一步的浮点运算次数（前向、反向和重新计算）：是不用时的多少倍？写一个数：1 表示没有多出任何计算。

# %%
predict("21.saved", ...)    # bytes saved for backward, every block checkpointed / no block checkpointed

# %%
predict("21.flops", ...)    # FLOPs of a step, every block checkpointed / no block checkpointed

# %%
%%ddp
import contextlib
import statistics
import time

from torch.distributed.tensor import DTensor
from torch.utils.flop_counter import FlopCounterMode


class SavedForBackward(torch.autograd.graph.saved_tensors_hooks):
    """Inside it, .bytes adds up what autograd saves for backward: each storage once, parameters not."""

    def __init__(self, model):
        self.model, self.storages = model, {}
        super().__init__(self.pack, lambda tensor: tensor)

    def pack(self, tensor):
        # the block that runs holds its gathered parameters as plain tensors (at rest: DTensor shards)
        params = {p.untyped_storage().data_ptr() for p in self.model.parameters() if not isinstance(p, DTensor)}
        storage = tensor.untyped_storage()                 # the memory the tensor (or the view) lives in
        if storage.data_ptr() not in params:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor                                      # saved as it is: we only look

    @property
    def bytes(self):
        return sum(self.storages.values())


torch.manual_seed(100 + rank)
x, y = torch.randn(B, W), torch.randn(B, W)                # this rank's batch, the same in every setting
threads = torch.get_num_threads()                          # the pool's setting: cores // ranks, at least 1
torch.set_num_threads(1)                                   # torch computes on this thread alone
models = {name: build(seed=0, checkpointed=checkpointed) for name, checkpointed in SETTINGS}
opts = {name: torch.optim.Adam(m.parameters(), lr=1e-3) for name, m in models.items()}
runs, first_grads, final = {"threads": threads}, {}, {}
cpu, cpu_all = {name: [] for name in models}, {name: [] for name in models}
for step in range(STEPS):
    for name, model in models.items():                     # a step of each setting in turn
        saved, flops = SavedForBackward(model), FlopCounterMode(display=False)
        tic, tic_all = time.thread_time(), time.process_time()    # this thread's CPU time, all threads'
        with flops if step == 0 else contextlib.nullcontext():   # the first step's FLOPs
            with saved:                                    # the forward: what it leaves for backward
                loss = nn.functional.mse_loss(model(x), y)
            loss.backward()                                # runs the checkpointed blocks again first
        cpu[name].append(time.thread_time() - tic)
        cpu_all[name].append(time.process_time() - tic_all)
        if step == 0:
            runs[name] = {"saved": saved.bytes, "flops": flops.get_total_flops()}
            first_grads[name] = [p.grad.to_local().clone() for p in model.parameters()]   # this rank's shards
        opts[name].step()
        opts[name].zero_grad()
        ddplab.log(loss=loss, samples=B)
for name, model in models.items():
    final[name] = [p.detach().to_local().clone() for p in model.parameters()]
    runs[name].update(cpu=statistics.median(cpu[name][1:]),   # (step 0 also counted FLOPs)
                      vs_none=statistics.median(a / b for a, b in zip(cpu[name][1:], cpu["none"][1:])),  # same round
                      thread_share=sum(cpu[name][1:]) / sum(cpu_all[name][1:]),   # this thread's part of the rank's
                      same_grads=all(torch.equal(a, b) for a, b in zip(first_grads["none"], first_grads[name])),
                      same_params=all(torch.equal(a, b) for a, b in zip(final["none"], final[name])))
model, opt = models["every block"], opts["every block"]    # (kept for part 2; the other two go)
del models, opts
torch.set_num_threads(threads)                             # the pool's setting back

# %% [markdown]
# Now check every rank's measurements against the arithmetic: the bytes saved for backward, the FLOPs,
# and whether the gradients of the first step and the parameters after the 6 steps are those of the run
# without checkpointing, bit for bit (`torch.equal` on each rank's shards).
#
# The FLOPs: one `Linear`'s matrix product in forward is `B`·128·512 multiply-adds, 2·`B`·128·512
# FLOPs. Backward takes two such products per `Linear` (the gradient of the weight and that of the
# input), except for the first `Linear` of the model, whose input (the batch) needs no gradient.

# %% [markdown] lang=zh
# 现在把每个 rank 的测量值与算术核对：为反向传播保存的字节数、浮点运算次数，以及第一步的梯度和 6 步之后的参数是否与不用激活检查点的那次运行逐位相同（在每个 rank 的分片上用 `torch.equal` 比较）。
#
# 浮点运算次数：一个 `Linear` 在前向中的矩阵乘法是 `B`·128·512 次乘加，即 2·`B`·128·512 次浮点运算。反向传播中每个 `Linear` 要做两次这样的乘法（权重的梯度和输入的梯度），只有模型的第一个 `Linear` 例外：它的输入（批次）不需要梯度。

# %%
runs = %ddp_gather runs
tl = %ddp_timeline
settings = dict(SETTINGS)                             # name: the blocks checkpointed, in order
NAMES = {"none": say("none", "不用"), "every other block": say("every other block", "每隔一个块"),
         "every block": say("every block", "每个块")}
F1 = 2 * B * W * H                                    # FLOPs of one Linear's product in forward


def saved_expected(n):
    """Bytes saved for backward with n blocks checkpointed."""
    return 4 * B * ((L - n) * (W + H) + n * W + 2 * W)


def flops_without():
    return 3 * L * 2 * F1 - F1                        # forward, backward twice over, less the batch's gradient


for r, run in enumerate(runs):
    for name, checkpointed in settings.items():
        assert run[name]["saved"] == saved_expected(len(checkpointed)), (r, name, run[name])
        assert run[name]["same_grads"] and run[name]["same_params"], (r, name)
cpu = {name: sum(run[name]["cpu"] for run in runs) / len(runs) for name in settings}   # the ranks' mean
vs_none = {name: sum(run[name]["vs_none"] for run in runs) / len(runs) for name in settings}   # paired, the ranks' mean
flops = {name: runs[0][name]["flops"] for name in settings}
saved = {name: runs[0][name]["saved"] for name in settings}
extra = {name: (flops[name] - flops_without()) / F1 for name in settings}   # in Linear products
for name, checkpointed in settings.items():
    print(say(f"{NAMES[name]:<18} saved for backward {saved[name] / 1e6:5.2f} MB per rank, "
              f"{flops[name] / 1e9:.2f} GFLOP per step, CPU {1000 * cpu[name]:.0f} ms per step",
              f"{NAMES[name]}：每个 rank 为反向传播保存 {saved[name] / 1e6:.2f} MB，"
              f"每步 {flops[name] / 1e9:.2f} GFLOP，每步 CPU 时间 {1000 * cpu[name]:.0f} ms"))
none, half, every = settings
for name in (half, every):
    print(say(f"{NAMES[name]} checkpointed: {saved[name] / saved[none]:.0%} of the bytes saved without, "
              f"{flops[name] / flops[none] - 1:+.0%} FLOPs, {vs_none[name] - 1:+.0%} CPU time",
              f"{NAMES[name]}使用激活检查点：保存的字节数为不用时的 {saved[name] / saved[none]:.0%}，"
              f"浮点运算次数 {flops[name] / flops[none] - 1:+.0%}，CPU 时间 {vs_none[name] - 1:+.0%}"))
reveal("21.saved", float(saved[every] / saved[none]), unit=say("× the bytes without", "× 不用时的字节数"))
reveal("21.flops", float(flops[every] / flops[none]), unit=say("× the FLOPs without", "× 不用时的浮点运算次数"))
print(say(f"in every setting, on every rank: the first step's gradients and the parameters after {STEPS} steps are bit "
          "for bit those of the run without checkpointing",
          f"在每种设置下、每个 rank 上：第一步的梯度和 {STEPS} 步之后的参数都与不用激活检查点的那次运行逐位相同"))
shares = [run[name]["thread_share"] for run in runs for name in settings]
print(say(f"torch threads per rank: {runs[0]['threads']} in this pool (cores // ranks), 1 for these measurements; the "
          f"computing thread's CPU time was {min(shares):.0%} to {max(shares):.0%} of all the rank's threads' "
          "(the ranks and settings)",
          f"每个 rank 的 torch 线程数：这个进程池是 {runs[0]['threads']} 个（cores // ranks），这些测量中是 1 个；"
          f"计算的那个线程的 CPU 时间占 rank 所有线程的 {min(shares):.0%} 到 {max(shares):.0%}（各 rank、各设置）"))
assert flops[none] == flops_without()
assert [extra[name] for name in settings] == [len(c) for c in settings.values()]   # one product per block
assert vs_none[every] > 1, vs_none                    # the recompute is work: it takes CPU time
assert min(shares) > 0.6, shares                      # torch computed on the timed thread (with 2 it would be ~half)

# %% [markdown]
# The recompute added exactly **one** `Linear` product per checkpointed block (the `assert` above),
# not two: not a whole forward of the block. That is **early stop**, on by default in the
# non-reentrant variant: the recompute stops as soon as it has every tensor backward needs from the
# block. The last ones are those the second `Linear` saves, its input (the `ReLU`'s output) and its
# weight, and autograd saves a product's inputs as the product starts, before computing it; so the
# second product is never run again. (`torch.utils.checkpoint.set_checkpoint_early_stop(False)` turns
# early stop off; exercise 21.2 asks what that would cost.)
#
# The recompute is on the timeline too. A checkpointed block's forward runs again *inside* backward,
# and ddplab's timeline records it there, as a `forward` span within the `backward` span of its step:

# %% [markdown] lang=zh
# 重新计算让每个使用激活检查点的块恰好多做了**一次** `Linear` 乘法（见上面的 `assert`），而不是两次：并不是这个块完整的一次前向。这就是**提前停止**（early stop），非可重入实现默认打开它：一旦得到了反向传播需要这个块提供的每个张量，重新计算就停下来。最后需要的是第二个 `Linear` 保存的那些张量，即它的输入（`ReLU` 的输出）和它的权重，而 autograd 在一次乘法开始时、算出结果之前就保存了它的输入；所以第二次乘法永远不会再运行。（`torch.utils.checkpoint.set_checkpoint_early_stop(False)` 可以关掉提前停止；练习 21.2 问的就是那样要付出多少。）
#
# 重新计算在时间线上也看得到。使用激活检查点的块的前向在反向传播*之中*又运行了一遍，ddplab 的时间线就在那里记录它：在那一步的 `backward` 时间段之内的一个 `forward` 时间段：

# %%
spans = tl.to_pandas()
recomputed, recompute_ms = {}, {}
for r, mine in spans.groupby("rank"):
    forward = mine[mine.phase == "forward"]
    backward = mine[mine.phase == "backward"].sort_values("start")     # one per step, in order
    inside = [forward[(forward.start >= b.start) & (forward.end <= b.end)] for b in backward.itertuples()]
    recomputed[r] = [len(f) for f in inside]
    recompute_ms[r] = [1000 * float((f.end - f.start).sum()) for f in inside]
expected = [len(c) for _ in range(STEPS) for c in settings.values()]  # a round of steps, a step of each setting
assert all(counts == expected for counts in recomputed.values()), recomputed
for i, name in enumerate(settings):
    n = recomputed[0][i]
    ms = sum(recompute_ms[0][i::len(settings)]) / STEPS
    print(say(f"{NAMES[name]:<18} rank 0: {n} forward spans inside each backward, {ms:.1f} ms of it per step",
              f"{NAMES[name]}：rank 0 每次反向传播之中有 {n} 个前向时间段，每步共 {ms:.1f} ms"))

# %% [markdown]
# (These are wall-clock times: where the ranks outnumber the cores, they stretch while a rank waits for
# a core. The count of spans is what to trust here, and the CPU time above is the fair measure of what
# the recompute costs.)
#
# The picture. On the left, the trade: bytes saved for backward against the CPU time of a step. On
# the right, what each rank holds, measured by ddplab (`tl.memory`, lesson 15) for the parameters and
# Adam's state, beside the bytes saved for backward: FSDP2 gave each rank a quarter of the model's
# states, but the activations come from the rank's own batch, whole.

# %% [markdown] lang=zh
# （这些是墙钟时间：在 rank 比 CPU 核心多的地方，rank 等待核心时它们会被拉长。这里可以信赖的是时间段的个数，而衡量重新计算的代价，公平的尺度是上面的 CPU 时间。）
#
# 看图。左图是这笔交换：为反向传播保存的字节数与一步的 CPU 时间的对比。右图是每个 rank 持有的东西：参数和 Adam 状态由 ddplab 测量（`tl.memory`，第 15 课），旁边是为反向传播保存的字节数：FSDP2 让每个 rank 只持有模型状态的四分之一，但激活来自 rank 自己的批次，是完整的。

# %%
from matplotlib.figure import Figure

memory = tl.memory.iloc[0]                           # rank 0: its shards of the model kept (every block) and Adam


@draw._styled                                        # the lessons' style and fonts (Chinese labels too)
def tradeoff():
    fig = Figure(figsize=(10.6, 3.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    xs, ys = [1000 * cpu[n] for n in settings], [saved[n] / 1e6 for n in settings]
    left.plot(xs, ys, color=draw.KIND_COLORS[0], marker="o")
    for name, x_, y_ in zip(settings, xs, ys):
        left.annotate(NAMES[name], (x_, y_), textcoords="offset points", xytext=(6, 4), fontsize=8)
    left.set_xlabel(say("CPU time per step (ms, mean of the ranks)", "每步的 CPU 时间（ms，各 rank 的平均）"))
    left.set_ylabel(say("MB saved for backward, per rank", "为反向传播保存的 MB（每个 rank）"))
    left.set_title(say("Activation checkpointing: memory against time", "激活检查点：内存与时间的交换"),
                   loc="left", fontsize=10)
    left.set_ylim(0, max(ys) * 1.15)
    left.margins(x=0.25)
    parts = {"params": say("parameters (shard)", "参数（分片）"), "optimizer": say("Adam state (shard)", "Adam 状态（分片）"),
             "saved": say("saved for backward", "为反向传播保存")}
    bottom = [0.0] * len(settings)
    for i, (part, label) in enumerate(parts.items()):
        heights = [(saved[n] if part == "saved" else float(memory[part])) / 1e6 for n in settings]
        right.bar(range(len(settings)), heights, bottom=bottom, label=label, color=draw.KIND_COLORS[[0, 3, 4][i]])
        bottom = [b + h for b, h in zip(bottom, heights)]
    for i, total in enumerate(bottom):
        right.text(i, total, f"{total:.3g}", ha="center", va="bottom", fontsize=8)
    right.set_xticks(range(len(settings)), [NAMES[n] for n in settings], fontsize=8)
    right.set_ylabel(say("MB per rank", "每个 rank 的 MB"))
    right.set_title(say("Rank 0: model states (shards), saved for backward", "rank 0：模型状态（分片）与为反向传播保存的张量"),
                    loc="left", fontsize=10)
    handles, labels = right.get_legend_handles_labels()
    right.legend(handles[::-1], labels[::-1], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    return draw.Picture(fig)


tradeoff()

# %%
states = float(memory["params"] + memory["optimizer"])
print(say(f"rank 0's shards of the parameters and Adam's state: {states / 1e6:.2f} MB; saved for backward without "
          f"checkpointing: {saved[none] / 1e6:.2f} MB, {saved[none] / states:.1f} times as much, and "
          f"{saved[every] / 1e6:.2f} MB with every block checkpointed",
          f"rank 0 持有的参数和 Adam 状态的分片：{states / 1e6:.2f} MB；不用激活检查点时为反向传播保存的："
          f"{saved[none] / 1e6:.2f} MB，是前者的 {saved[none] / states:.1f} 倍；每个块都用激活检查点时为 "
          f"{saved[every] / 1e6:.2f} MB"))
P = L * (W * H + H + H * W + W)                      # the model's parameters
assert memory["params"] == 4 * P / RANKS             # float32 (4 bytes), a share on each rank: a quarter of 4
assert saved[none] > 2 * states

# %% [markdown]
# **A common claim / what actually happens.** A common claim: activation checkpointing halves the
# memory, for free. What actually happens, in this run (printed above): checkpointing every block kept
# about a quarter of the bytes saved without it, and every other block about three fifths; neither is
# a half, because what a checkpoint saves depends on what the block would have kept (here its input is
# 128 of the 640 numbers per row). It is not free: every checkpointed block's first product ran again,
# and the CPU time per step grew by the share printed above. Nor does it touch the model's states: the
# parameters and Adam's state (the right panel), and the gradients, are the same bytes in every
# setting.
#
# That is also why FSDP and activation checkpointing go together. FSDP (lesson 19) shards what is the
# same on every rank, the model's states, down to 1/N each; the activations are different on every rank,
# computed from its own batch, and FSDP leaves them whole. Here, without checkpointing, they were
# several times the rank's share of the model's states (printed above); in a transformer they grow with
# the batch size times the sequence length. Activation checkpointing is the tool for them, and it works
# the same with or without FSDP. A common recipe checkpoints each transformer layer; checkpointing every
# other layer (or a chosen op inside a layer) trades less memory for less recompute.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：激活检查点能让内存减半，而且没有代价。这次运行中实际发生的是（见上面的输出）：每个块都用激活检查点时，保存的字节数大约是不用时的四分之一，每隔一个块用一次时大约是五分之三；两者都不是一半，因为检查点省下多少，取决于这个块原本要保留什么（这里它的输入是每行 640 个数中的 128 个）。它也不是没有代价：每个使用激活检查点的块的第一次乘法又运行了一遍，每步的 CPU 时间增加的比例见上面的输出。它也碰不到模型状态：参数和 Adam 状态（右图），还有梯度，在每种设置下都是同样的字节数。
#
# 这也是为什么 FSDP 和激活检查点相辅相成。FSDP（第 19 课）分片的是在每个 rank 上都相同的东西，即模型状态，每个 rank 只剩 1/N；激活在每个 rank 上都不同，由它自己的批次算出，FSDP 让它们保持完整。在这里，不用激活检查点时，它们是 rank 那一份模型状态的好几倍（见上面的输出）；在 transformer 中，它们随批大小乘以序列长度而增长。对付它们的工具是激活检查点，有没有 FSDP 都一样用。一种常见的做法是对每个 transformer 层使用激活检查点；每隔一层使用（或者只对层内选定的运算使用）则是少省一些内存，换来少一些重新计算。

# %% [markdown]
# ## 2. A sharded checkpoint: every rank writes its own shards
#
# Lesson 11 saved a DDP model from rank 0 alone: under DDP every rank holds the same parameters and
# optimizer state, so rank 0's copy is everyone's. Under FSDP2 each rank holds a different quarter: here
# the model kept from part 1 (every block checkpointed; activation checkpointing changes nothing in the
# state) and its Adam. `torch.distributed.checkpoint` (DCP) saves it as it lies, called on every rank:
#
# - `get_state_dict(model, opt)` gives the model's and the optimizer's state as two dicts keyed by the
#   parameters' names: DTensors whose local part is this rank's shard (and Adam's step counts, plain
#   tensors, the same on every rank);
# - `dcp.save(state, checkpoint_id=folder)` makes a plan on every rank, agrees on it through rank 0
#   (who writes what, without writing a tensor twice), and each rank then writes its own file; rank 0
#   adds `.metadata`, the map of where every piece of every tensor lies.
#
# First each rank computes a **fingerprint** of the whole state: for every tensor, all-gathered whole
# (`full_tensor()`), the SHA-256 of its bytes, so that the state loaded later can be compared exactly.
# The checkpoint goes in a temporary folder made here in the notebook (on several machines, storage
# that all of them can reach).

# %% [markdown] lang=zh
# ## 2. 分片检查点：每个 rank 写下自己的分片
#
# 第 11 课只由 rank 0 保存 DDP 模型：在 DDP 下每个 rank 持有相同的参数和优化器状态，所以 rank 0 的那一份就是每个 rank 的那一份。在 FSDP2 下，每个 rank 持有各不相同的四分之一：这里是第 1 部分留下的那个模型（每个块都用激活检查点；激活检查点不改变状态里的任何东西）和它的 Adam。`torch.distributed.checkpoint`（DCP）照它们原本分布的样子保存，在每个 rank 上调用：
#
# - `get_state_dict(model, opt)` 给出模型和优化器的状态，是两个以参数名为键的字典：其中是 DTensor，它们的本地部分就是这个 rank 的分片（还有 Adam 的步数计数，它们是普通张量，每个 rank 上都一样）；
# - `dcp.save(state, checkpoint_id=folder)` 在每个 rank 上制定一个计划，经由 rank 0 协商一致（谁写什么，同一个张量不写两次），然后每个 rank 写自己的文件；rank 0 另外写下 `.metadata`，即每个张量的每一块放在哪里的地图。
#
# 每个 rank 先计算整个状态的一个**指纹**：每个张量先用 all-gather 收集成完整的张量（`full_tensor()`），再取它的字节的 SHA-256，这样以后加载回来的状态就可以与它精确比较。检查点保存在 notebook 这里创建的一个临时目录中（在多台机器上，它应当是所有机器都能访问的存储）。

# %%
import os
import tempfile

ckpt_dir = tempfile.mkdtemp(prefix="ddplab-lesson21-")


def fingerprint(model, opt):
    """{name: SHA-256 of the whole tensor} for the model's parameters and the optimizer's state: the same on
    every rank (each DTensor is all-gathered whole first, so every rank must call it)."""
    import hashlib

    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.tensor import DTensor

    model_state, opt_state = get_state_dict(model, opt)
    tensors = {f"model {name}": t for name, t in model_state.items()}
    tensors.update({f"optim {name} {kind}": t for name, state in opt_state["state"].items() for kind, t in state.items()})
    found = {}
    for name in sorted(tensors):                      # the same order on every rank: the gathers match
        t = tensors[name]
        whole = t.full_tensor() if isinstance(t, DTensor) else t
        found[name] = hashlib.sha256(whole.detach().contiguous().numpy().tobytes()).hexdigest()
    return found

# %%
%ddp_push fingerprint ckpt_dir

# %%
%%ddp
import os

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

saved_fingerprint = fingerprint(model, opt)
model_state, opt_state = get_state_dict(model, opt)         # this rank's shards, keyed by name
tensors = [*model_state.values(), *(t for state in opt_state["state"].values() for t in state.values())]
shard_bytes = sum(t.to_local().nbytes for t in tensors if isinstance(t, DTensor))     # this rank's part
whole_bytes = sum(t.nbytes for t in tensors)                # (a DTensor's nbytes: the whole tensor's)
dtensors = sum(isinstance(t, DTensor) for t in tensors)   # sharded: each rank writes its piece
count = len(tensors)                                        # (the rest: Adam's step counts, one value each)
dcp.save({"model": model_state, "optim": opt_state}, checkpoint_id=os.path.join(ckpt_dir, "sharded"))
weight = model_state["blocks.0.0.weight"]
layout = (tuple(weight.shape), tuple(weight.to_local().shape), sorted(opt_state["state"]["blocks.0.0.weight"]))

# %% [markdown]
# What each rank held, and what the folder holds now:

# %% [markdown] lang=zh
# 每个 rank 持有什么，以及目录里现在有什么：

# %%
before = %ddp_gather saved_fingerprint
shards = %ddp_gather shard_bytes
info = %ddp_gather (whole_bytes, count, dtensors, layout)
whole, count, dtensors, layout = info[0]
assert all(f == before[0] for f in before)                  # the fingerprint is the whole state's: the same everywhere
whole_shape, local_shape, kinds = layout
print(say(f"blocks.0.0.weight: whole {whole_shape}, each rank's shard {local_shape}; Adam keeps {kinds} for it",
          f"blocks.0.0.weight：完整形状 {whole_shape}，每个 rank 的分片 {local_shape}；Adam 为它保存 {kinds}"))
folder = os.path.join(ckpt_dir, "sharded")
files = {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
for name, size in files.items():
    print(f"  {name:<14} {size:>10,} " + say("bytes", "字节"))
written = {r: files[f"__{r}_0.distcp"] for r in range(RANKS)}
assert sorted(files) == [".metadata"] + [f"__{r}_0.distcp" for r in range(RANKS)]   # one file per rank, and the map
records = RANKS * dtensors + (count - dtensors)           # tensors written: 4 pieces of each sharded one
framing = (sum(written.values()) - sum(shards)) / records
for r in range(RANKS):
    print(say(f"rank {r}: its shards {shards[r] / 1e6:.2f} MB, its file {written[r] / 1e6:.2f} MB",
              f"rank {r}：它的分片 {shards[r] / 1e6:.2f} MB，它的文件 {written[r] / 1e6:.2f} MB"))
    assert shards[r] < written[r] < 1.1 * shards[r], (r, shards[r], written[r])
print(say(f"the {count} tensors of the state take {whole / 1e6:.2f} MB whole; the {RANKS} files {sum(written.values()) / 1e6:.2f} MB: "
          f"about {framing:.0f} bytes more per piece written (DCP stores each as a small torch.save record)",
          f"状态中的 {count} 个张量完整时占 {whole / 1e6:.2f} MB；{RANKS} 个文件共 {sum(written.values()) / 1e6:.2f} MB："
          f"写下的每一块大约多出 {framing:.0f} 字节（DCP 把每一块存成一条小小的 torch.save 记录）"))

# %% [markdown]
# Each rank wrote its own shards, a quarter of the state, and nothing else: four files of about the
# same size, written at the same time, with no tensor sent anywhere. Adam's step counts, the same on
# every rank, are written once, by one rank (DCP's plan removes the duplicates).
#
# The other way is lesson 11's way: gather the whole state onto rank 0 and let it write one file.
# `get_state_dict(..., options=StateDictOptions(full_state_dict=True, cpu_offload=True))` all-gathers
# every tensor and keeps the whole of it on rank 0 (in CPU memory), nothing on the others:

# %% [markdown] lang=zh
# 每个 rank 写下了自己的分片，即状态的四分之一，别的什么也没写：四个大小差不多的文件，同时写出，没有哪个张量需要发送到别处。Adam 的步数计数在每个 rank 上都一样，只由一个 rank 写一次（DCP 的计划会去掉重复的部分）。
#
# 另一种做法是第 11 课的做法：把完整的状态收集到 rank 0 上，由它写一个文件。`get_state_dict(..., options=StateDictOptions(full_state_dict=True, cpu_offload=True))` 对每个张量做 all-gather，把完整的张量留在 rank 0 上（放在 CPU 内存中），其他 rank 上什么也不留：

# %%
%%ddp
from torch.distributed.checkpoint.state_dict import StateDictOptions

full_model, full_opt = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
held = sum(t.nbytes for t in full_model.values()) + sum(
    t.nbytes for state in full_opt.get("state", {}).values() for t in state.values())
if rank == 0:
    torch.save({"model": full_model, "optim": full_opt}, os.path.join(ckpt_dir, "full.pt"))
del full_model, full_opt

# %%
held = %ddp_gather held
full = os.path.getsize(os.path.join(ckpt_dir, "full.pt"))
assert held[0] == whole and held[1:] == [0] * (RANKS - 1), held   # rank 0 held the whole state at once
assert abs(full - sum(written.values())) < 0.1 * full
print(say(f"full state dict: rank 0 held {held[0] / 1e6:.2f} MB at once and wrote {full / 1e6:.2f} MB; ranks 1-{RANKS - 1} wrote nothing",
          f"完整状态字典：rank 0 一次持有 {held[0] / 1e6:.2f} MB，写了 {full / 1e6:.2f} MB；rank 1-{RANKS - 1} 什么也没写"))
print(say(f"DCP: each rank wrote about {sum(written.values()) / RANKS / 1e6:.2f} MB, its own shards, and held nothing more",
          f"DCP：每个 rank 写了大约 {sum(written.values()) / RANKS / 1e6:.2f} MB，即它自己的分片，没有多持有任何东西"))


@draw._styled
def written_by_rank():
    fig = Figure(figsize=(6.4, 3.2), layout="constrained")
    ax = fig.subplots()
    ways = {say("DCP (sharded)", "DCP（分片）"): [written[r] / 1e6 for r in range(RANKS)],
            say("full state dict (rank 0)", "完整状态字典（rank 0）"): [(full if r == 0 else 0) / 1e6 for r in range(RANKS)]}
    for i, (label, values) in enumerate(ways.items()):
        xs = [r + (i - 0.5) * 0.38 for r in range(RANKS)]
        bars = ax.bar(xs, values, width=0.38, label=label, color=draw.KIND_COLORS[i])
        ax.bar_label(bars, [f"{v:.2f}" if v else "0" for v in values], fontsize=8)
    ax.set_xticks(range(RANKS), [f"rank {r}" for r in range(RANKS)])
    ax.set_ylabel(say("MB written", "写入的 MB"))
    ax.set_title(say("Bytes each rank writes to save the same state", "保存同样的状态时每个 rank 写入的字节"),
                 loc="left", fontsize=10)
    ax.margins(y=0.15)
    ax.legend(fontsize=8, frameon=False)
    return draw.Picture(fig)


written_by_rank()

# %% [markdown]
# **A common claim / what actually happens.** A common claim: to checkpoint an FSDP model, gather it
# onto rank 0 and save it there, as with DDP. What actually happens: it works, but in this run rank 0
# had to hold the whole state at once and write every byte of it while ranks 1-3 wrote nothing (printed
# above). For this small model that is a few megabytes; for a model sharded *because* its state does not
# fit in one process, the gather itself cannot be done. DCP writes the same bytes, a quarter from each
# rank, in parallel, and no rank ever holds more than its shards. (It can also write in the background
# while training goes on, with `dcp.async_save`.) The full state dict keeps one use: a single file for a
# program that knows nothing of DCP or of the sharding.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：要给 FSDP 模型保存检查点，就像 DDP 那样把它收集到 rank 0 上再保存。实际情况是：这样做可行，但在这次运行中，rank 0 必须一次持有完整的状态，并亲自写下其中的每一个字节，而 rank 1-3 什么也没写（见上面的输出）。对这个小模型来说这只是几兆字节；而对于*正因为*单个进程放不下它的状态才分片的模型，这次收集本身就做不到。DCP 写的是同样的字节，每个 rank 写四分之一，并行地写，而且没有哪个 rank 持有超过自己分片的东西。（它还可以用 `dcp.async_save` 在后台写，同时训练继续进行。）完整状态字典仍有一个用处：给一个对 DCP 和分片一无所知的程序一个单独的文件。

# %% [markdown]
# ## 3. Load the shards of 4 ranks onto 2
#
# Stop the pool of 4: its processes, and every tensor they held, are gone. What is left is the folder.
# A new pool of 2 ranks builds the same model, from another seed so that its parameters differ, and
# shards it over *its* 2 ranks: each now holds half of every parameter, 256 rows of a 512-row weight,
# where each of the 4 held 128.

# %% [markdown] lang=zh
# ## 3. 把 4 个 rank 的分片加载到 2 个 rank 上
#
# 停止有 4 个 rank 的进程池：它的进程，以及它们持有的每个张量，都没有了。剩下的是那个目录。一个只有 2 个 rank 的新进程池构建同样的模型，用另一个随机种子，好让它的参数不同，再在*它自己的* 2 个 rank 上分片：现在每个 rank 持有每个参数的一半，一个 512 行的权重中的 256 行，而原来 4 个 rank 中的每一个持有 128 行。

# %%
%ddp_stop

# %%
LOADED = RANKS // 2
%ddp_start {LOADED}

# %%
%ddp_push W H L build fingerprint ckpt_dir

# %% [markdown]
# Loading is the saving's mirror, called on every rank: `get_state_dict` gives the state dicts to fill
# in, with this pool's layout (for a new Adam it first creates the state, with one step of zero
# gradients at learning rate 0, which changes no parameter); `dcp.load` fills them in place from the
# files; `set_state_dict` puts them into the model and the optimizer. `ReadLog` is DCP's default load
# planner, which also notes, for each piece this rank reads, the file it comes from (looked up in the
# metadata).

# %% [markdown] lang=zh
# 加载是保存的镜像，也在每个 rank 上调用：`get_state_dict` 给出要填写的状态字典，采用这个进程池的布局（对于新建的 Adam，它先用一步零梯度、学习率为 0 的更新创建状态，这一步不改变任何参数）；`dcp.load` 从文件中原地填写它们；`set_state_dict` 把它们放进模型和优化器。`ReadLog` 就是 DCP 默认的加载规划器，只是另外记下这个 rank 读的每一块来自哪个文件（在元数据中查到）。

# %%
%%ddp
import math
import os

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


class ReadLog(DefaultLoadPlanner):
    """DCP's default load planner, noting the bytes this rank reads from each file (.read: {file: bytes})."""

    def create_local_plan(self):
        plan = super().create_local_plan()
        self.read = {}
        for item in plan.items:
            meta = self.metadata.state_dict_metadata[item.storage_index.fqn]
            if isinstance(meta, TensorStorageMetadata):         # (param_groups' numbers are small pickles)
                file = self.metadata.storage_data[item.storage_index].relative_path
                nbytes = math.prod(item.lengths) * meta.properties.dtype.itemsize
                self.read[file] = self.read.get(file, 0) + nbytes
        return plan


model = build(seed=1)                                        # another seed: not the saved parameters
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
fresh = fingerprint(model, opt)
model_state, opt_state = get_state_dict(model, opt)          # the shapes to fill in: this pool's halves
state = {"model": model_state, "optim": opt_state}
planner = ReadLog()
dcp.load(state, checkpoint_id=os.path.join(ckpt_dir, "sharded"), planner=planner)
set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
loaded = fingerprint(model, opt)
read = planner.read
name = "model.blocks.0.0.weight"                             # where its pieces lie, from the metadata
chunks = [(c.offsets[0], c.offsets[0] + c.sizes[0], planner.metadata.storage_data[MetadataIndex(name, c.offsets)].relative_path)
          for c in planner.metadata.state_dict_metadata[name].chunks]
mine = tuple(model.blocks[0][0].weight.to_local().shape)

# %%
fresh = %ddp_gather fresh
loaded = %ddp_gather loaded
saved_state = before[0]
assert all(mine == saved_state for mine in loaded)           # every tensor, whole, byte for byte
model_names = [n for n in saved_state if n.startswith("model ")]
assert all(fresh[0][n] != saved_state[n] for n in model_names)   # (the new model did start elsewhere)
optim = [n for n in saved_state if n.startswith("optim ")]
print(say(f"loaded on {LOADED} ranks: all {len(saved_state)} tensors ({len(model_names)} parameters, {len(optim)} of Adam's "
          f"state) are, whole, byte for byte those the {RANKS} ranks saved",
          f"加载到 {LOADED} 个 rank 上：全部 {len(saved_state)} 个张量（{len(model_names)} 个参数，{len(optim)} 个 Adam 状态）"
          f"在完整的形式下与 {RANKS} 个 rank 保存的逐字节相同"))

# %% [markdown]
# How did each of the 2 ranks find its half? The metadata, written by rank 0 of the pool of 4, lists
# every tensor's chunks: where each starts and how big it is, and which file holds it. Each loading
# rank compares those chunks with the part of the tensor it holds *now* and reads the overlaps, and only
# those. That is **resharding** at load: the layout on disk need not be the layout in memory.

# %% [markdown] lang=zh
# 2 个 rank 各自是怎样找到自己那一半的？由 4 个 rank 的进程池中的 rank 0 写下的元数据，列出了每个张量的各个块：每块从哪里开始、有多大、在哪个文件里。每个负责加载的 rank 把这些块与它*现在*持有的那部分张量相比较，读取重叠的部分，而且只读这些部分。这就是加载时的**重新分片**：磁盘上的布局不必与内存中的布局相同。

# %%
chunks = %ddp_gather chunks
chunks = chunks[0]                                           # (the same on every rank: the metadata's)
mine = %ddp_gather mine
read = %ddp_gather read
print(say("blocks.0.0.weight in the checkpoint:", "检查点中的 blocks.0.0.weight："))
for start, end, file in chunks:
    print(say(f"  rows {start:>3}-{end - 1:<3} in {file}", f"  第 {start:>3}-{end - 1:<3} 行在 {file} 中"))
rows = mine[0][0]
for r in range(LOADED):
    print(say(f"rank {r} of {LOADED} holds rows {r * rows}-{(r + 1) * rows - 1} now; it read "
              + ", ".join(f"{b / 1e6:.2f} MB from {f}" if b > 1e4 else f"{b} bytes from {f}" for f, b in sorted(read[r].items())),
              f"{LOADED} 个 rank 中的 rank {r} 现在持有第 {r * rows}-{(r + 1) * rows - 1} 行；它读了 "
              + "，".join(f"{f} 中的 {b / 1e6:.2f} MB" if b > 1e4 else f"{f} 中的 {b} 字节" for f, b in sorted(read[r].items()))))
    own = {f"__{2 * r}_0.distcp", f"__{2 * r + 1}_0.distcp"}               # the files of the ranks it replaces
    assert sum(b for f, b in read[r].items() if f not in own) <= 4 * L * 4, read[r]   # only step counts elsewhere
    assert all(read[r][f] > 0.45 * whole / RANKS for f in own), read[r]


@draw._styled
def read_by_rank():
    fig = Figure(figsize=(6.4, 3.2), layout="constrained")
    ax = fig.subplots()
    bottom = [0.0] * LOADED
    for s in range(RANKS):                                   # one colour per file: the rank of 4 that wrote it
        heights = [read[r].get(f"__{s}_0.distcp", 0) / 1e6 for r in range(LOADED)]
        ax.bar(range(LOADED), heights, bottom=bottom, width=0.5, color=draw.rank_color(s),
               label=say(f"rank {s}'s file, __{s}_0.distcp", f"rank {s} 的文件 __{s}_0.distcp"))   # (not _...: hidden)
        for r, h in enumerate(heights):
            if h > 0.1:
                ax.text(r, bottom[r] + h / 2, f"{h:.2f}", ha="center", va="center", fontsize=8, color="white")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(range(LOADED), [say(f"rank {r} of {LOADED}", f"{LOADED} 个 rank 中的 rank {r}") for r in range(LOADED)])
    ax.set_xlim(-0.6, LOADED - 0.4)
    ax.margins(y=0.08)
    ax.set_ylabel(say("MB read", "读取的 MB"))
    ax.set_title(say(f"Loading on {LOADED} ranks: what each reads from each file", f"在 {LOADED} 个 rank 上加载：每个 rank 从每个文件读了多少"),
                 loc="left", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    return draw.Picture(fig)


read_by_rank()

# %% [markdown]
# Rank 0 of 2 read the files of ranks 0 and 1 of the old pool, rank 1 those of ranks 2 and 3, and each
# only a few bytes from the others: Adam's step counts, which every rank needs and which DCP had
# stored once, wherever its save plan put them.
#
# **A common claim / what actually happens.** A common claim: a sharded checkpoint can only be loaded
# by as many ranks as saved it. What actually happens: the checkpoint of 4 ranks was loaded by 2, and
# every tensor came back whole and exact, Adam's state included (the `assert` above). The metadata
# describes the tensors, not the ranks: any layout whose pieces can be read from the chunks can load
# it, another number of ranks, another device mesh, or one process reading it all. That makes
# resuming a job on fewer (or more) machines after a failure (lesson 11) a matter of loading, not of
# converting files.

# %% [markdown] lang=zh
# 2 个 rank 中的 rank 0 读了旧进程池中 rank 0 和 rank 1 的文件，rank 1 读了 rank 2 和 rank 3 的文件，从其他文件中各自只读了几个字节：Adam 的步数计数，每个 rank 都需要它们，而 DCP 只存了一份，放在它的保存计划所安排的地方。
#
# **常见说法 / 实际情况。** 一种常见的说法是：分片检查点只能由与保存时同样多的 rank 来加载。实际情况是：4 个 rank 的检查点由 2 个 rank 加载，每个张量都完整、精确地回来了，包括 Adam 的状态（见上面的 `assert`）。元数据描述的是张量，而不是 rank：只要一种布局的各个部分能从那些块中读出来，就能加载它，无论是另一个 rank 数、另一个设备网格，还是由一个进程读取全部。因此，在故障之后用更少（或更多）的机器恢复训练（第 11 课），只是加载的问题，而不需要转换文件。

# %% [markdown]
# Clean up the checkpoints:

# %% [markdown] lang=zh
# 清理检查点：

# %%
import shutil

shutil.rmtree(ckpt_dir)

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why. Try things out in cells of your own (before the last cell, `%ddp_stop`): the pool of 2
# is still running, with `build` on every rank.
#
# **21.1** Checkpoint the first 6 of the 8 blocks (`checkpointed=range(6)`), with this lesson's batch.
# How many MB (10⁶ bytes) would each rank save for backward, counted as `SavedForBackward` counts?

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。可以在你自己的单元格里动手试试（放在最后一个单元格 `%ddp_stop` 之前）：有 2 个 rank 的进程池还在运行，每个 rank 上都有 `build`。
#
# **21.1** 对 8 个块中的前 6 个使用激活检查点（`checkpointed=range(6)`），批次与本课相同。按 `SavedForBackward` 的统计方式，每个 rank 会为反向传播保存多少 MB（10⁶ 字节）？

# %%
answer = ...    # MB saved for backward per rank, the first 6 blocks checkpointed
check("21.1", answer, batch=B, width=W, hidden=H, blocks=L, checkpointed=6)

# %% [markdown]
# **21.2** Turn early stop off: build and run the model under
# `with torch.utils.checkpoint.set_checkpoint_early_stop(False):`, every block checkpointed. How many
# GFLOP would one step count then (forward, backward and recompute, as `FlopCounterMode` counted them
# in part 1)?

# %% [markdown] lang=zh
# **21.2** 关掉提前停止：在 `with torch.utils.checkpoint.set_checkpoint_early_stop(False):` 之下运行这个模型，每个块都用激活检查点。这时一步会统计到多少 GFLOP（前向、反向和重新计算，按第 1 部分中 `FlopCounterMode` 的统计方式）？

# %%
answer = ...    # GFLOP per step, every block checkpointed, no early stop
check("21.2", answer, gflop_none=flops["none"] / 1e9, batch=B, width=W, hidden=H, blocks=L)

# %% [markdown]
# **21.3** Suppose that on the pool of 4, with the model sharded by FSDP2, rank 0 alone had run
# `torch.save(model.state_dict(), path)`, as lesson 11 does for DDP. What would the file have held?
# Write one letter (and try it on the pool of 2, if you like):
#
# - (a) rank 0's shard of each parameter, as DTensors: a quarter of the model; the other shards are in
#   no file
# - (b) the whole model: `state_dict()` all-gathers each parameter first
# - (c) nothing: `torch.save` refuses a DTensor, and rank 0 raises

# %% [markdown] lang=zh
# **21.3** 在有 4 个 rank 的进程池上，模型由 FSDP2 分片，假如只由 rank 0 运行 `torch.save(model.state_dict(), path)`，就像第 11 课对 DDP 所做的那样。这个文件里会有什么？请写一个字母（愿意的话，可以在有 2 个 rank 的进程池上试一试）：
#
# - (a) rank 0 持有的每个参数的分片，以 DTensor 的形式：模型的四分之一；其余的分片不在任何文件里
# - (b) 整个模型：`state_dict()` 会先对每个参数做 all-gather
# - (c) 什么也没有：`torch.save` 拒绝 DTensor，rank 0 抛出错误

# %%
answer = ...    # a letter: "a", "b" or "c"
check("21.3", answer, shard=int(memory["params"]), ranks=RANKS)

# %% [markdown]
# **21.4** Load the checkpoint of 4 ranks onto 3 instead. FSDP2 splits a parameter's rows as
# `torch.chunk` does: ⌈512 / 3⌉ = 171 rows to each rank, the last rank the rest. From which of the
# saved files does rank 1 of 3 read its rows of `blocks.0.0.weight` (the chunks printed in part 3)?
# Write one letter:
#
# - (a) `__1_0.distcp` only: rank 1 loads what rank 1 saved
# - (b) `__0_0.distcp` and `__1_0.distcp`
# - (c) `__1_0.distcp` and `__2_0.distcp`
# - (d) all four files

# %% [markdown] lang=zh
# **21.4** 改为把 4 个 rank 的检查点加载到 3 个 rank 上。FSDP2 按 `torch.chunk` 的方式切分一个参数的各行：每个 rank 分到 ⌈512 / 3⌉ = 171 行，最后一个 rank 分到剩下的行。3 个 rank 中的 rank 1 要从保存下来的哪些文件中读取它的那些 `blocks.0.0.weight` 的行（各个块见第 3 部分的输出）？请写一个字母：
#
# - (a) 只有 `__1_0.distcp`：rank 1 加载 rank 1 保存的东西
# - (b) `__0_0.distcp` 和 `__1_0.distcp`
# - (c) `__1_0.distcp` 和 `__2_0.distcp`
# - (d) 全部四个文件

# %%
answer = ...    # a letter: "a", "b", "c" or "d"
check("21.4", answer, rows=whole_shape[0], saved_by=4, loaded_by=3, rank=1)

# %%
%ddp_stop
