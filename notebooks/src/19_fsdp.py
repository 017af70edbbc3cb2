# %% [markdown]
# # Lesson 19 · Sharded training with FSDP2
#
# **In short.** Lesson 15 computed on paper what ZeRO-3 saves by sharding the parameters, gradients and
# optimizer state across the ranks instead of copying them to every rank, and ran only its first stage. Here
# PyTorch's FSDP2 (`fully_shard`) runs the whole of it on the pool. You measure what each rank holds
# between steps (its quarter of DDP's parameters, gradients and Adam state, to the byte, plus what FSDP2's
# padding and Adam's step counts add) and during a step (the block being computed, gathered whole, and on CPU a second copy of it). You find
# each block's all-gathers and reduce-scatter on the timeline, see what prefetching does on CPU with gloo,
# switch `reshard_after_forward` off (FSDP1's `SHARD_GRAD_OP`: ZeRO-2's communication, not ZeRO-2's
# memory), and measure what gloo's reduce-scatter really costs.
#
# **You will learn**
# - how `fully_shard` on every block, then on the root, shards the parameters, gradients and Adam's state over a `DeviceMesh`, and why each rank then holds 16 bytes per parameter of its shard, plus padding and Adam's step counts
# - what a rank holds during a step (the gathered block, twice on CPU, and the activations), measured against DDP
# - each block's all-gathers (forward and backward) and reduce-scatter on the timeline, and what prefetching changes on CPU with gloo
# - what `reshard_after_forward=False` (FSDP1's `SHARD_GRAD_OP`) trades: no all-gather in backward for whole parameters held from forward to backward, and why that is ZeRO-2's communication but not its memory
# - why gloo's reduce-scatter costs a whole all-reduce, measured in bytes sent and in time
#
# **Study time:** about 50 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **Memory:** about 1.4 GiB at its peak: it fits Binder's 2 GiB, but not a 1 GiB session (a classroom
# hub). There, set `RANKS = 2` in the cell that starts the pool: the lesson then shards over 2 ranks
# (about 0.8 GiB; the text still speaks of 4, the outputs say what ran).
#
# **You will see:** each rank's parameters, gradients and Adam state under DDP and FSDP2 as stacked bars;
# the memory a rank holds through one step under DDP, FSDP2 and `SHARD_GRAD_OP`; one step's all-gathers and
# reduce-scatters, block by block, on a timeline, and the forward with prefetching as FSDP2 does it, explicit
# and asynchronous; and the bytes and time of gloo's all-reduce, reduce-scatter and all-gather.

# %% [markdown] lang=zh
# # 第 19 课 · 用 FSDP2 分片训练
#
# **简而言之**：第 15 课在纸面上算出了 ZeRO-3 把参数、梯度和优化器状态分片到各个 rank 上（而不是给每个 rank 各复制一份）能省下多少，但只实际运行了它的第一阶段。这一课用 PyTorch 的 FSDP2（`fully_shard`）在进程池上把它完整地跑起来。你将测量每个 rank 在两步之间持有多少（DDP 的参数、梯度和 Adam 状态中属于它的四分之一，精确到字节，再加上 FSDP2 的填充和 Adam 的步数计数），以及在一步之中持有多少（正在计算的那个块被完整地收集起来，在 CPU 上还多一份拷贝）。你将在时间线上找到每个块的 all-gather 和 reduce-scatter，看看预取在使用 gloo 的 CPU 上起什么作用，关掉 `reshard_after_forward`（即 FSDP1 的 `SHARD_GRAD_OP`：ZeRO-2 的通信方式，而不是 ZeRO-2 的内存），并测量 gloo 的 reduce-scatter 实际的开销。
#
# **你将学到**
# - 先对每个块、再对根模块调用 `fully_shard`，如何在一个 `DeviceMesh` 上把参数、梯度和 Adam 的状态分片，以及为什么每个 rank 随后为自己那一份的每个参数持有 16 字节，外加填充和 Adam 的步数计数
# - 一个 rank 在一步之中持有什么（收集起来的块，在 CPU 上有两份，以及激活值），并与 DDP 对比实测
# - 时间线上每个块的 all-gather（前向和反向各一次）和 reduce-scatter，以及预取在使用 gloo 的 CPU 上改变了什么
# - `reshard_after_forward=False`（FSDP1 的 `SHARD_GRAD_OP`）的取舍：反向中不做 all-gather，代价是从前向到反向一直持有完整的参数；以及为什么这是 ZeRO-2 的通信方式，却不是它的内存
# - 为什么 gloo 的 reduce-scatter 要花掉一次完整 all-reduce 的开销，用发送的字节数和耗时来测量
#
# **学习时间**：约 50 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **内存**：峰值约 1.4 GiB：Binder 的 2 GiB 装得下，1 GiB 的会话（课堂用的 hub）装不下。在那里，把启动进程池的单元格中的 `RANKS = 4` 改成 `RANKS = 2`：这一课就在 2 个 rank 上分片（约 0.8 GiB；正文仍然按 4 个 rank 来讲，输出会说明实际运行的是多少个）。
#
# **你将看到**：DDP 和 FSDP2 下每个 rank 的参数、梯度和 Adam 状态（堆叠柱状图）；DDP、FSDP2 和 `SHARD_GRAD_OP` 下一个 rank 在一步之中持有的内存；时间线上一步之中逐块的 all-gather 和 reduce-scatter，以及 FSDP2 默认的预取、显式预取和异步预取下的前向；以及 gloo 的 all-reduce、reduce-scatter 和 all-gather 发送的字节数和耗时。

# %%
%load_ext ddplab
from ddplab.shared.config import cores
from ddplab.lessons import check, draw, predict, reveal, say

# %%
from matplotlib.figure import Figure

PARTS = {"params": say("parameters", "参数"), "grads": say("gradients", "梯度"),
         "buckets": say("DDP's buckets", "DDP 的桶"), "optimizer": say("Adam's state", "Adam 的状态")}
COLORS = dict(zip(PARTS, draw.KIND_COLORS))          # one colour per kind of memory
KINDS = {"forward": "#4c78a8", "backward": "#f58518", "optimizer": "#54a24b",   # the timeline's colours
         "all_gather": "#b279a2", "reduce_scatter": "#e45756"}
NAMES = {"forward": say("forward", "前向"), "backward": say("backward", "反向"), "optimizer": say("optimizer", "优化器"),
         "all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}


@draw._styled                                        # the lessons' style and fonts (Chinese labels too)
def stacked(bars, title):
    """Stacked bars: bars = {bar label: {part: bytes}}, in MB."""
    fig = Figure(figsize=(7.6, 3.4), layout="constrained")
    ax = fig.subplots()
    bottom = [0.0] * len(bars)
    for part, label in PARTS.items():
        heights = [values.get(part, 0) / 1e6 for values in bars.values()]
        ax.bar(range(len(bars)), heights, bottom=bottom, label=label, color=COLORS[part])
        bottom = [b + h for b, h in zip(bottom, heights)]
    for i, total in enumerate(bottom):
        ax.text(i, total, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(bars)), list(bars), fontsize=8)
    ax.set_ylabel("MB")
    ax.set_title(title, loc="left", fontsize=10)
    ax.margins(y=0.12)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    return draw.Picture(fig)


@draw._styled
def lanes(panels, title=""):
    """Horizontal lanes, one panel per dict(title=..., rows={row label: [(start, end, kind, text), ...]}),
    times in seconds; each panel drawn in ms from its first start."""
    fig = Figure(figsize=(9.5, 0.5 + 1.05 * len(panels) * max(len(p["rows"]) for p in panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    seen = {}
    for ax, panel in zip(axes, panels):
        t0 = min(s for spans in panel["rows"].values() for s, *_ in spans)
        for y, spans in enumerate(reversed(list(panel["rows"].values()))):
            for start, end, kind, text in spans:
                bar = ax.barh(y, 1e3 * (end - start), left=1e3 * (start - t0), height=0.7, color=KINDS[kind],
                              edgecolor="white", linewidth=0.4)
                seen.setdefault(kind, bar)
                if text:
                    ax.text(1e3 * ((start + end) / 2 - t0), y, text, ha="center", va="center", fontsize=6.5,
                            color="white")
        ax.set_yticks(range(len(panel["rows"])), list(reversed(list(panel["rows"]))), fontsize=8)
        ax.set_title(panel["title"], loc="left", fontsize=9)
    axes[-1].set_xlabel(say("milliseconds since the panel's first span", "毫秒（自该图第一个时间段起）"))
    fig.legend([seen[k] for k in KINDS if k in seen], [NAMES[k] for k in KINDS if k in seen], fontsize=8,
               frameon=False, loc="outside upper right", ncols=len(seen))
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    return draw.Picture(fig)



@draw._styled
def step_picture(panels, marks):
    """Line panels of MB through one step: panels = [(title, {name: [MB at each sample]})]; marks = {sample index:
    what begins there}, drawn as ticks."""
    fig = Figure(figsize=(5.2 * len(panels), 3.3), layout="constrained")
    for ax, (title, series) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        for i, (name, values) in enumerate(series.items()):
            ax.plot(range(len(values)), values, label=name, color=draw.KIND_COLORS[i], linewidth=1.4, marker=".")
        ax.set_xticks(list(marks), list(marks.values()), fontsize=8)
        for x in marks:
            ax.axvline(x, color="#ccc", linewidth=0.6, zorder=0)
        ax.set_ylabel("MB")
        ax.set_ylim(bottom=0)
        ax.set_title(title, loc="left", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    return draw.Picture(fig)

# %%
RANKS = 4          # the pool's size: 2 in a 1 GiB session (see the top)
%ddp_start {RANKS}

# %% [markdown]
# ## 1. What a rank holds between steps
#
# The model has 8 blocks, each a `Linear(510, 510)` and a ReLU, and a head `Linear(510, 10)`. The width is
# 510, not 512, on purpose: 510 rows do not split evenly over 4 ranks, and you will see what FSDP2 does
# about it. Every rank trains on its own batch of 256 samples for 4 steps with Adam, first under DDP, as
# lesson 15 did.
#
# The cell also defines the tools of the lesson. `sharded()` builds the model under FSDP2 (next cell).
# `train()` runs the steps with a `Watch` that notes, at every block's forward and whenever backward unpacks
# a tensor that forward saved (`torch.autograd.graph.saved_tensors_hooks`), two numbers:
#
# - `whole(model)`: the bytes of the model's parameters that are whole tensors at that moment, read from
#   the model itself;
# - the bytes the C library's allocator (glibc's `malloc`, where torch's CPU tensors come from) has
#   handed out, minus what it had at the start of the step: everything the step allocated and not yet
#   freed, activations and FSDP2's buffers included. Linux with glibc reports it (`mallinfo2`); elsewhere
#   the lesson says so and does without.
#
# It also notes each block's forward compute (start, end) and the bytes the rank wrote per step (Linux's
# `/proc/self/io`: gloo's sockets write through it; part 4 uses them).

# %% [markdown] lang=zh
# ## 1. 一个 rank 在两步之间持有什么
#
# 模型有 8 个块，每个块是一个 `Linear(510, 510)` 加一个 ReLU，最后是一个输出头 `Linear(510, 10)`。宽度是 510 而不是 512，这是有意的：510 行不能平均分给 4 个 rank，你将看到 FSDP2 如何处理。每个 rank 在自己的 256 个样本的批次上用 Adam 训练 4 步，先用 DDP，和第 15 课一样。
#
# 这个单元格还定义了本课的工具。`sharded()` 构建 FSDP2 下的模型（见下一个单元格）。`train()` 运行训练的各步，并用一个 `Watch` 在每个块的前向时，以及反向每次取出前向保存的张量时（`torch.autograd.graph.saved_tensors_hooks`），记下两个数：
#
# - `whole(model)`：模型的参数中此刻是完整张量的那些所占的字节数，直接从模型本身读取；
# - C 库的分配器（glibc 的 `malloc`，torch 的 CPU 张量就是从这里分配的）已经分配出去的字节数，减去这一步开始时的值：这一步分配了、还没有释放的全部内存，包括激活值和 FSDP2 的缓冲区。使用 glibc 的 Linux 会报告这个数（`mallinfo2`）；在其他系统上，本课会说明，并在没有它的情况下继续。
#
# 它还记下每个块前向计算的起止时间，以及 rank 每一步写出的字节数（Linux 的 `/proc/self/io`：gloo 的套接字通过它写出数据；第 4 部分会用到）。

# %%
%%ddp
import ctypes
import time

from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons import say                       # in rank code too: speaks the pool's language
from ddplab.lessons.ranks import written              # bytes this process has written so far (/proc/self/io)

WIDTH, LAYERS, CLASSES, BATCH, STEPS = 510, 8, 10, 256, 4
mesh = ddplab.mesh()                                 # a DeviceMesh over the pool's ranks (CPU, gloo)


class Net(nn.Module):
    """8 blocks of Linear(510, 510) + ReLU, then a head of 10 classes."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(LAYERS)])
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        return self.head(self.body(x))


def make_model():
    torch.manual_seed(0)                             # the same model on every rank
    return Net()


def sharded(reshard_after_forward=True):
    """The model under FSDP2: one unit per block, then the root (the head's parameters, and the whole)."""
    model = make_model()
    for block in model.body:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)
    return model


try:  # glibc's count of the bytes malloc has handed out (torch's CPU tensors come from malloc)
    libc = ctypes.CDLL("libc.so.6")

    class MallInfo(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                         "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc.mallinfo2.restype = MallInfo

    def heap():
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd           # in use in the heaps + in blocks mapped one by one
except (OSError, AttributeError):                    # not glibc (macOS, musl): no count
    heap = None


def whole(model):
    """Bytes of the model's parameters that are whole tensors now: FSDP2 puts a unit's whole parameters in
    place of its DTensor shards from its all-gather until it reshards."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


class Watch:
    """What one rank holds and does in each step: samples (step, where, block, whole bytes, heap bytes above
    the step's start) at every block's forward and in backward; each block's forward compute (step, block,
    start, end); the forward's start times; and the bytes written per step. Block LAYERS is the head."""

    def __init__(self, model):
        self.model, self.block, self.step = model, None, -1
        self.samples, self.compute, self.starts, self.sent = [], [], [], []
        inner = getattr(model, "module", model)      # (under DDP, the model inside)
        inner.register_forward_pre_hook(lambda m, a: self.starts.append(time.monotonic()), prepend=True)
        for k, block in enumerate([*inner.body, inner.head]):
            first, last = (block[0], block[-1]) if isinstance(block, nn.Sequential) else (block, block)
            first.register_forward_pre_hook(lambda m, a, k=k: self.enter(k))
            last.register_forward_hook(lambda m, a, out, k=k: self.compute.append((self.step, k, self.t0, time.monotonic())))

    def enter(self, k):
        self.block, self.t0 = k, time.monotonic()
        self.sample("forward", k)

    def sample(self, where, k=-1):
        self.samples.append((self.step, where, k, whole(self.model), heap() - self.base if heap else None))

    def pack(self, tensor):                          # autograd saves a tensor in forward...
        return self.block, tensor

    def unpack(self, saved):                         # ...and unpacks it when backward needs it
        self.sample("backward", saved[0])
        return saved[1]

    def begin(self):
        self.step += 1
        self.base, self.wrote = heap() if heap else 0, written()
        self.sample("start")

    def end(self):
        self.sample("end")
        self.sent.append(written() - self.wrote if self.wrote is not None else None)


def train(model, opt, steps=STEPS):
    watch = Watch(model)
    for _ in range(steps):
        watch.begin()
        opt.zero_grad()
        watch.sample("zeroed")
        with torch.autograd.graph.saved_tensors_hooks(watch.pack, watch.unpack):
            out = model(x)
        watch.sample("between")                      # between forward and backward
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        watch.end()
        ddplab.log(loss=loss, samples=BATCH)
    return watch


torch.manual_seed(rank)
x, y = torch.randn(BATCH, WIDTH), torch.randint(0, CLASSES, (BATCH,))   # this rank's batch

model = DDP(make_model())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
watch = train(model, opt)
P = sum(p.numel() for p in model.parameters())      # parameters
T = len(list(model.parameters()))                    # parameter tensors: 9 weights, 9 biases
if rank == 0:
    print(say(f"{P:,} parameters in {T} tensors: {4 * P / 1e6:.2f} MB in float32",
              f"{P:,} 个参数，分布在 {T} 个张量中：float32 下共 {4 * P / 1e6:.2f} MB"))

# %%
tl = %ddp_timeline
ddp = tl.memory
ddp_run = %ddp_gather (watch.samples, watch.sent, heap is not None)
sizes = %ddp_gather (P, T, WIDTH, LAYERS, CLASSES, STEPS)
P, T, WIDTH, LAYERS, CLASSES, STEPS = sizes[0]
ddp.rename(columns=say({}, {"params": "参数 params", "grads": "梯度 grads", "buckets": "桶 buckets",
                            "optimizer": "优化器状态 optimizer"}))   # (in Chinese: the headers say both)

# %% [markdown]
# Now the same model under FSDP2. `fully_shard(module, mesh=mesh)` makes the module a *unit*: its
# parameters (those not in a unit already) become `DTensor`s sharded on their first dimension, the rows,
# over the mesh's ranks, and before the module runs its parameters are all-gathered into whole tensors.
# Call it bottom-up: on every block first, so that each block is gathered on its own, then on the root,
# which takes what is left (the head) and drives the others. `torch.chunk` decides the rows: each rank gets
# ⌈rows / N⌉ of them, the last ones fewer: here 128, 128, 128 and 126 of each block's 510, and 3, 3, 3 and 1
# of the head's 10. Adam, built on the sharded parameters, makes its state like them: sharded.
#
# Each rank prints the first block's weight: whole in shape, a shard in memory.

# %% [markdown] lang=zh
# 现在换成 FSDP2 下的同一个模型。`fully_shard(module, mesh=mesh)` 把这个模块变成一个*单元*：它的参数（还不属于某个单元的那些）变成在网格的各个 rank 上按第一维（行）分片的 `DTensor`；模块运行之前，它的参数先用 all-gather 收集成完整的张量。要自下而上地调用：先对每个块调用，使每个块单独收集，再对根模块调用，根模块接管剩下的参数（输出头），并驱动其他单元。由 `torch.chunk` 决定每个 rank 分到哪些行：每个 rank 分到 ⌈行数 / N⌉ 行，最后的 rank 分到的少一些：这里每个块的 510 行分成 128、128、128 和 126 行，输出头的 10 行分成 3、3、3 和 1 行。在分片后的参数上构建的 Adam，也像参数一样创建自己的状态：分片的。
#
# 每个 rank 打印第一个块的权重：形状是完整的，内存中只有一片。

# %%
%%ddp
model = sharded()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
watch = train(model, opt)
weight = model.body[0][0].weight                     # a DTensor: this rank's rows of the first block's weight
shard = sum(p.to_local().numel() for p in model.parameters())                  # elements this rank holds
stored = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters())   # bytes allocated for them
print(say(f"weight of body.0: {type(weight).__name__} of shape {tuple(weight.shape)}, {weight.placements}; "
          f"this rank's rows: {tuple(weight.to_local().shape)}; its shard of the model: {shard:,} elements",
          f"body.0 的权重：形状为 {tuple(weight.shape)} 的 {type(weight).__name__}，{weight.placements}；"
          f"这个 rank 的行：{tuple(weight.to_local().shape)}；它持有的模型分片：{shard:,} 个元素"))

# %%
tl_fsdp = %ddp_timeline
fsdp = tl_fsdp.memory
fsdp_run = %ddp_gather (watch.samples, watch.sent, watch.compute, watch.starts, shard, stored)
N = len(fsdp)
shards = [run[4] for run in fsdp_run]
d = ddp.iloc[0]
assert (ddp.params == 4 * P).all() and (ddp.grads == 4 * P).all()                  # every rank: the whole model
assert (ddp.optimizer == 8 * P + 4 * T).all()        # exp_avg, exp_avg_sq: 8 bytes a parameter; step: 4 a tensor
for row, elements in zip(fsdp.itertuples(), shards):
    assert row.params == 4 * elements and row.grads == 4 * elements and row.buckets == 0, row
    assert row.optimizer == 8 * elements + 4 * T, row                               # Adam's state of the shard
    assert row.params + row.grads + row.optimizer == 16 * elements + 4 * T          # 16 bytes a parameter
assert sum(shards) == P and fsdp.params.sum() == d.params                           # the shards add up to the whole
assert fsdp.optimizer.sum() == 8 * P + 4 * T * N     # ... but every rank keeps all T step counts
for row, elements, (*_, stored) in zip(fsdp.itertuples(), shards, fsdp_run):
    total = row.params + row.grads + row.optimizer
    print(say(f"rank {row.rank}: {elements:,} of the {P:,} parameters ({elements / P:.4f}); parameters "
              f"{row.params / 1e6:.2f} MB, gradients {row.grads / 1e6:.2f} MB, Adam {row.optimizer / 1e6:.2f} MB: "
              f"{total / 1e6:.2f} MB = 16 × {elements:,} + 4 × {T} bytes, {total / (d.params + d.grads + d.optimizer):.4f} "
              f"of DDP's; {stored - row.params:,} bytes of padding allocated with its parameters",
              f"rank {row.rank}：{P:,} 个参数中的 {elements:,} 个（{elements / P:.4f}）；参数 {row.params / 1e6:.2f} MB，"
              f"梯度 {row.grads / 1e6:.2f} MB，Adam {row.optimizer / 1e6:.2f} MB：共 {total / 1e6:.2f} MB = 16 × "
              f"{elements:,} + 4 × {T} 字节，为 DDP 的 {total / (d.params + d.grads + d.optimizer):.4f}；"
              f"与参数一起另外分配了 {stored - row.params:,} 字节的填充"))
print(say(f"DDP, every rank: parameters {d.params / 1e6:.2f} MB, gradients {d.grads / 1e6:.2f} MB, buckets "
          f"{d.buckets / 1e6:.2f} MB, Adam {d.optimizer / 1e6:.2f} MB",
          f"DDP，每个 rank：参数 {d.params / 1e6:.2f} MB，梯度 {d.grads / 1e6:.2f} MB，桶 {d.buckets / 1e6:.2f} MB，"
          f"Adam {d.optimizer / 1e6:.2f} MB"))
stacked({"DDP": {k: d[k] for k in PARTS}, **{f"FSDP2\nrank {row.rank}": {k: getattr(row, k) for k in PARTS}
                                             for row in fsdp.itertuples()}},
        say("What each rank holds between steps (ddplab's count)", "每个 rank 在两步之间持有的内存（ddplab 的统计）"))

# %% [markdown]
# Read the checks above as the arithmetic of ZeRO-3. Training in float32 with Adam, a parameter costs
# 4 bytes, its gradient 4, and Adam's two running averages (`exp_avg`, `exp_avg_sq`) 8: **16 bytes per
# parameter**, and ZeRO-3 leaves each rank 1/N of them, 16·P/N. The ZeRO paper also counts 16 bytes per
# parameter, but for *mixed-precision* training: 2 for the fp16 parameters and 2 for the fp16 gradients,
# then 12 for Adam in fp32 (a float32 master copy of the parameters, the momentum and the variance, 4 each).
# The same total, split differently: here the parameters are float32 already, so there is no master copy.
#
# What the ranks hold differs from 16·P/N in two ways, both measured above:
#
# - **Padding.** Each rank allocates ⌈rows / N⌉ rows of every tensor, so that the all-gather moves equal
#   pieces; rank 3's last rows are padding. ddplab counts a DTensor's *local shard*, the rows that are
#   really the rank's, so the shards add up exactly to DDP's whole, and rank 3's padding shows as the bytes
#   allocated with its parameters beyond them.
# - **Adam's step counts.** Adam keeps one `step` per parameter tensor, 4 bytes each, and it is not
#   sharded: every rank keeps all T of them, 4·T bytes on each rank.

# %% [markdown] lang=zh
# 上面的核对，读起来就是 ZeRO-3 的算术。用 float32 和 Adam 训练时，一个参数占 4 字节，它的梯度占 4 字节，Adam 的两个滑动平均（`exp_avg`、`exp_avg_sq`）占 8 字节：**每个参数 16 字节**，而 ZeRO-3 让每个 rank 只保留其中的 1/N，即 16·P/N。ZeRO 论文也按每个参数 16 字节计算，但那是*混合精度*训练：fp16 参数 2 字节，fp16 梯度 2 字节，再加上 fp32 的 Adam 状态 12 字节（参数的 float32 主副本、动量和方差，各 4 字节）。总数相同，拆分不同：这里的参数本来就是 float32，所以没有主副本。
#
# 各 rank 实际持有的字节数与 16·P/N 有两处不同，上面都已测出：
#
# - **填充。** 每个 rank 为每个张量分配 ⌈行数 / N⌉ 行，好让 all-gather 搬运大小相等的片段；rank 3 的最后几行是填充。ddplab 统计的是 DTensor 的*本地分片*，即真正属于这个 rank 的那些行，所以各分片加起来恰好等于 DDP 的完整模型，而 rank 3 的填充表现为与参数一起分配、超出参数本身的那些字节。
# - **Adam 的步数计数。** Adam 为每个参数张量保存一个 `step`，每个 4 字节，而且它不分片：每个 rank 都保存全部 T 个，每个 rank 上 4·T 字节。

# %% [markdown]
# ### During a step
#
# Between steps FSDP2 holds only shards, but a block computes with its whole parameters. The `Watch`
# samples show what is held at every block's forward and during backward. The picture follows one step (the
# last) on rank 0: on the left the parameters that were whole tensors at that moment, on the right what the
# rank held, counted as ddplab's figures between steps plus what the allocator had handed out since the
# step began (the gradients freed by `zero_grad()` come back in backward; the activations grow through
# forward and are freed in backward).

# %% [markdown] lang=zh
# ### 一步之中
#
# 在两步之间，FSDP2 只持有分片，但一个块要用完整的参数来计算。`Watch` 的采样显示了每个块前向时以及反向期间持有的内存。下图跟踪 rank 0 的一步（最后一步）：左边是那一刻是完整张量的参数，右边是这个 rank 持有的内存，按 ddplab 在两步之间的统计，加上这一步开始以来分配器分配出去的字节来计算（`zero_grad()` 释放的梯度在反向中重新分配；激活值在前向中增长，在反向中释放）。

# %% [markdown]
# **Predict, then run.** Between steps each rank held about 1/4 of DDP's model states. What about
# the peak *during* a step, counted as the right panel counts it? Write a number between 0 and 1:
# rank 0's peak under FSDP2 divided by its peak under DDP (4 ranks, the steps after the first).

# %% [markdown] lang=zh
# **先预测，再运行。** 在两步之间，每个 rank 持有的模型状态约为 DDP 的 1/4。那么一步*之中*的峰值呢（按右图的算法计算）？写一个 0 到 1 之间的数：FSDP2 下 rank 0 的峰值除以 DDP 下的峰值（4 个 rank，第一步之后的各步）。

# %%
predict("19.peak", ...)    # rank 0's peak during a step under FSDP2, as a fraction of its peak under DDP

# %%
has_heap = ddp_run[0][2]
block_bytes, head_bytes = 4 * WIDTH * (WIDTH + 1), 4 * CLASSES * (WIDTH + 1)   # a block's and the head's parameters
LAST = STEPS - 1                                     # the last step


def held_between(frame, r):
    row = frame.iloc[r]
    return row.params + row.grads + row.optimizer + row.buckets


def through_step(samples, frame, r, step=LAST):
    """(whole MB, held MB) at every sample of one step on rank r."""
    mine = [s for s in samples if s[0] == step]
    return ([s[3] / 1e6 for s in mine],
            [(held_between(frame, r) + s[4]) / 1e6 for s in mine] if has_heap else None)


def peak(samples, frame, r):
    """The most a rank held during a step (after the first, which builds Adam's state), in bytes."""
    return held_between(frame, r) + max(s[4] for s in samples if s[0] >= 1)


for s in fsdp_run[0][0]:                             # FSDP2: one block (and the root's head) whole at a time
    step, where, k, whole_now = s[:4]
    if where in ("forward", "backward") and k < LAYERS:
        assert whole_now == block_bytes + head_bytes, s
    elif where in ("between", "forward", "backward"):
        assert whole_now == head_bytes, s
    else:                                            # the step's start, after zero_grad(), its end: the root too
        assert whole_now == 0, s                     # was resharded, after backward
assert all(s[3] == 4 * P for s in ddp_run[0][0])     # DDP: the whole model, always
print(say(f"whole parameters at once: DDP {4 * P / 1e6:.2f} MB; FSDP2 at most {(block_bytes + head_bytes) / 1e6:.2f} MB "
          f"(one block and the head), between forward and backward only the head's {head_bytes / 1e3:.1f} kB, and "
          "none from the end of backward to the next forward",
          f"同时完整存在的参数：DDP {4 * P / 1e6:.2f} MB；FSDP2 最多 {(block_bytes + head_bytes) / 1e6:.2f} MB（一个块和输出头），"
          f"在前向和反向之间只有输出头的 {head_bytes / 1e3:.1f} kB，从反向结束到下一次前向则一个也没有"))
series_whole, series_held = {}, {}
for name, run, frame in (("DDP", ddp_run, ddp), ("FSDP2", fsdp_run, fsdp)):
    series_whole[name], series_held[name] = through_step(run[0][0], frame, 0)
if has_heap:
    peaks = {name: [peak(run[r][0], frame, r) for r in range(N)] for name, run, frame in
             (("DDP", ddp_run, ddp), ("FSDP2", fsdp_run, fsdp))}
    assert all(f < d_ for f, d_ in zip(peaks["FSDP2"], peaks["DDP"])), peaks
    first = [s for s in fsdp_run[0][0] if s[0] == LAST]
    zeroed = next(s[4] for s in first if s[1] == "zeroed")
    at_block0 = next(s[4] for s in first if s[1] == "forward" and s[2] == 0)
    copies = (at_block0 - zeroed) / (block_bytes + head_bytes)
    for r in range(N):
        print(say(f"rank {r}: at most {peaks['DDP'][r] / 1e6:.2f} MB held during a step under DDP, "
                  f"{peaks['FSDP2'][r] / 1e6:.2f} MB under FSDP2 ({peaks['FSDP2'][r] / peaks['DDP'][r]:.2f} of DDP's)",
                  f"rank {r}：一步之中最多持有 DDP {peaks['DDP'][r] / 1e6:.2f} MB，FSDP2 {peaks['FSDP2'][r] / 1e6:.2f} MB"
                  f"（为 DDP 的 {peaks['FSDP2'][r] / peaks['DDP'][r]:.2f}）"))
    reveal("19.peak", float(peaks["FSDP2"][0] / peaks["DDP"][0]), unit=say("× DDP's peak", "× DDP 的峰值"))
    print(say(f"rank 0, from zero_grad() to block 0's forward: the allocator handed out {(at_block0 - zeroed) / 1e6:.2f} MB, "
              f"{copies:.2f} times the {(block_bytes + head_bytes) / 1e6:.2f} MB of whole parameters in use",
              f"rank 0，从 zero_grad() 到块 0 的前向：分配器分配出去 {(at_block0 - zeroed) / 1e6:.2f} MB，"
              f"是正在使用的 {(block_bytes + head_bytes) / 1e6:.2f} MB 完整参数的 {copies:.2f} 倍"))
    if copies > 1.8:
        print(say("That is two copies of the gathered block: its whole parameters, and the flat buffer the all-gather "
                  "wrote into, which FSDP2 keeps until the next block's all-gather (on a GPU, so that the next copy-in "
                  "can overlap with it; read the note 'Overlapping all-gather copy-in and all-gather' in torch's "
                  "_fsdp_param_group.py). On CPU it is simply held.",
                  "这是收集起来的块的两份拷贝：它的完整参数，以及 all-gather 写入的那个扁平缓冲区。FSDP2 一直保留这个缓冲区，"
                  "直到下一个块的 all-gather（在 GPU 上，这是为了让下一次拷入能与它重叠；见 torch 的 _fsdp_param_group.py 中的"
                  "注释“Overlapping all-gather copy-in and all-gather”）。在 CPU 上，它只是被占着。"))
    else:
        print(say("That is about one copy of the gathered block: this torch frees the all-gather's flat buffer once the "
                  "block's parameters are copied out of it.",
                  "这大约是收集起来的块的一份拷贝：这个版本的 torch 在把块的参数从 all-gather 的扁平缓冲区拷出之后，就释放了缓冲区。"))
else:
    print(say("This system does not report the allocator's bytes (no glibc mallinfo2): only the whole parameters are drawn.",
              "这个系统不报告分配器的字节数（没有 glibc 的 mallinfo2）：图中只画出完整的参数。"))
wheres = [s[1] for s in fsdp_run[0][0] if s[0] == LAST]    # where each sample was taken (the same in every run)
marks = {wheres.index("forward"): say("forward", "前向"), wheres.index("between"): say("backward", "反向"),
         len(wheres) - 1: say("end", "结束")}     # (the samples before the forward: the step's start, after zero_grad)
titles = (say("Parameters whole at that moment, rank 0", "此刻完整的参数，rank 0"),
          say("Held: between-steps figures + allocated since", "持有：两步之间的数值 + 这一步以来的分配"))
step_picture([(titles[0], series_whole), *([(titles[1], series_held)] if has_heap else [])], marks)

# %% [markdown]
# Each block's whole parameters exist only between its all-gather and its reshard: the left panel steps
# from block to block at the height of one block and the head. The root's parameters (the head's) are
# gathered first in forward and stay whole through backward, which needs them first (part 3 says why);
# FSDP2 reshards them after backward, like the blocks', so from the end of backward to the next forward
# no parameter is whole (the check above). What a rank holds during a step is its shards, plus a block or two in flight,
# plus the activations, which FSDP2 does not shard at all: every rank keeps the activations of its own batch,
# as under DDP (lesson 21 trades them for recomputation).
#
# **A common claim / what actually happens.** A common claim: FSDP divides a rank's memory by N. What
# actually happens: it divides the *model states* by N, almost exactly (the bars above: padding and Adam's
# step counts aside). During a step the rank also holds the gathered block (on CPU, twice over: printed
# above) and all of its activations, which do not shrink at all with more ranks. The peak printed above is
# a fraction of DDP's, but not 1/N of it.

# %% [markdown] lang=zh
# 每个块的完整参数只存在于它的 all-gather 和它的重新分片之间：左图逐块地跳动，高度是一个块加上输出头。根模块的参数（输出头的参数）在前向中最先被收集，并一直完整地保留到反向，因为反向最先用到它们（原因见第 3 部分）；反向之后，FSDP2 像对各个块一样把它们重新分片，所以从反向结束到下一次前向，没有任何参数是完整的（见上面的检查）。一个 rank 在一步之中持有的，是它的分片，加上正在使用的一两个块，再加上激活值，而 FSDP2 根本不分片激活值：每个 rank 都保留自己批次的激活值，和 DDP 一样（第 21 课用重新计算来换掉它们）。
#
# **常见说法 / 实际情况。** 一种常见的说法是：FSDP 把一个 rank 的内存减少到原来的 1/N。实际情况是：它把*模型状态*减少到 1/N，几乎分毫不差（见上面的柱状图：除去填充和 Adam 的步数计数）。在一步之中，这个 rank 还持有收集起来的块（在 CPU 上是两份：见上面的输出）以及它全部的激活值，而激活值完全不会随 rank 数增加而减少。上面打印的峰值是 DDP 的一小部分，但不是它的 1/N。

# %% [markdown]
# ## 2. Every block's collectives on the timeline
#
# ddplab records FSDP2's collectives as they run, each with the unit it serves in the `module` column of
# `tl.to_pandas()` (`body.0` to `body.7`, and `""` for the root). Count them in every step, on every rank,
# and check what the code of FSDP2 says should happen: in forward, one all-gather per unit, the root's first;
# in backward, the blocks' all-gathers again (they were resharded after their forward; the root is not, by
# default) and one reduce-scatter per unit, which leaves each rank the gradients of its own rows, summed over
# the ranks and divided by N. An all-gather's `bytes` is the whole it gathers, padding included.

# %% [markdown] lang=zh
# ## 2. 时间线上每个块的集合通信
#
# ddplab 在 FSDP2 的集合通信运行时把它们记录下来，每一个都在 `tl.to_pandas()` 的 `module` 列中注明它服务的单元（`body.0` 到 `body.7`，根模块为 `""`）。在每个 rank 的每一步中数一数，并核对 FSDP2 的代码所说的应当发生的事情：前向中每个单元一次 all-gather，根模块最先；反向中各个块再做一次 all-gather（它们在前向之后被重新分片了；根模块默认不会），每个单元一次 reduce-scatter，让每个 rank 得到自己那些行的梯度：在各 rank 上求和，再除以 N。all-gather 的 `bytes` 是它收集得到的完整张量，包括填充。

# %%
UNITS = [f"body.{k}" for k in range(LAYERS)]                 # the blocks' units; "" is the root's (the head)
rows = {**{u: WIDTH for u in UNITS}, "": CLASSES}
padded = {u: 4 * N * -(-r // N) * (WIDTH + 1) for u, r in rows.items()}   # ⌈rows / N⌉ · N rows of a weight and its bias


def collectives(tl):
    """{(rank, step): [(op, unit, phase, start, end, bytes, wait), ...]} in time order: the FSDP2 collectives, each
    with the phase (forward, backward) of the same rank that it ran in, and its wait for the last rank."""
    frame = tl.to_pandas()
    found = {}
    for (r, step), rows in frame.groupby(["rank", "step"]):
        phases = rows[rows.phase.isin(["forward", "backward", "optimizer"])]
        comm = rows[(rows.phase == "comm") & rows.op.isin(["all_gather", "reduce_scatter"])].sort_values("start")
        found[r, step] = [(c.op, c.module, next((p.phase for p in phases.itertuples() if p.start <= c.start <= p.end), None),
                           c.start, c.end, c.bytes, c.wait) for c in comm.itertuples()]
    return found


def count(tl):
    """Per step and rank: all-gathers in forward, in backward, and reduce-scatters; checked the same on all."""
    found = collectives(tl)
    counts = {key: (sum(op == "all_gather" and ph == "forward" for op, _, ph, *_ in c),
                    sum(op == "all_gather" and ph == "backward" for op, _, ph, *_ in c),
                    sum(op == "reduce_scatter" for op, *_ in c)) for key, c in found.items()}
    assert len(set(counts.values())) == 1, counts     # every rank, every step: the same
    return found, next(iter(counts.values()))


found, (fwd, bwd, rs) = count(tl_fsdp)
assert (fwd, bwd, rs) == (LAYERS + 1, LAYERS, LAYERS + 1), (fwd, bwd, rs)
for c in found.values():
    assert [u for op, u, ph, *_ in c if op == "all_gather" and ph == "forward"] == ["", *UNITS]  # the root first
    assert sorted(u for op, u, ph, *_ in c if op == "all_gather" and ph == "backward") == UNITS  # not the root
    assert sorted(u for op, u, *_ in c if op == "reduce_scatter") == sorted(["", *UNITS])
    assert all(b == padded[u] for op, u, ph, s, e, b, w in c if op == "all_gather")             # the padded whole
print(say(f"every step, every rank: {fwd} all-gathers in forward (the root's, then body.0 to body.7), {bwd} in backward "
          f"(the blocks, from body.7 down), {rs} reduce-scatters; a block's all-gather gathers {padded['body.0']:,} bytes "
          f"({padded['body.0'] - block_bytes:,} of them padding)",
          f"每一步、每个 rank：前向中 {fwd} 次 all-gather（先是根模块的，然后 body.0 到 body.7），反向中 {bwd} 次（各个块，从 body.7 "
          f"往下），{rs} 次 reduce-scatter；一个块的 all-gather 收集 {padded['body.0']:,} 字节（其中 {padded['body.0'] - block_bytes:,} "
          f"字节是填充）"))


def label(unit):
    """A unit's name on the pictures: the block's number, or "head" for the root (it holds the head's parameters)."""
    return unit.split(".")[-1] if unit else say("head", "头")


def step_lanes(tl, r, step, title):
    """One step of rank r: forward, backward and optimizer on one row, the FSDP2 collectives on the other."""
    frame = tl.to_pandas()
    rows = frame[(frame["rank"] == r) & (frame.step == step)]
    phases = [(p.start, p.end, p.phase, "") for p in rows[rows.phase.isin(list(KINDS))].itertuples()]
    comm = [(s, e, op, label(u)) for op, u, ph, s, e, b, w in collectives(tl)[r, step]]
    return dict(title=title, rows={say(f"rank {r}: compute", f"rank {r}：计算"): phases,
                                   say(f"rank {r}: collectives", f"rank {r}：集合通信"): comm})


lanes([step_lanes(tl_fsdp, 0, LAST, say("FSDP2: one step of rank 0 (numbers: the block each collective serves)",
                                        "FSDP2：rank 0 的一步（数字：每次集合通信服务的块）"))])

# %% [markdown]
# In forward each block is gathered just before it runs and resharded after it; in backward, in reverse
# order, the next block's all-gather comes *before* the reduce-scatter of the block whose gradients are being
# computed. That is FSDP2's **backward prefetching**: in a block's pre-backward hook, right after gathering
# that block, it gathers the block that backward reaches next. The check below finds it on every rank and
# step.
#
# ddplab's own drawing of the same cell follows: every rank's last steps, each collective's unit in its
# tooltip, the waiting for the last rank to arrive in red.

# %% [markdown] lang=zh
# 前向中，每个块在运行之前才被收集，运行之后就被重新分片；反向中顺序相反，而下一个块的 all-gather 出现在正在计算梯度的那个块的 reduce-scatter *之前*。这就是 FSDP2 的**反向预取**：在一个块的反向前钩子中，收集完这个块之后，立刻收集反向接下来要用到的那个块。下面的检查在每个 rank 的每一步中都找到了它。
#
# 接着是 ddplab 自己为同一个单元格画的图：每个 rank 的最后几步，每次集合通信服务的单元写在它的提示框里，等待最后一个 rank 到达的时间用红色标出。

# %%
for c in found.values():
    order = [(op, u) for op, u, ph, *_ in c if ph == "backward"]
    for k in range(LAYERS - 1, 0, -1):               # body.k-1 gathered before body.k's gradients are reduced
        assert order.index(("all_gather", f"body.{k - 1}")) < order.index(("reduce_scatter", f"body.{k}")), order
tl_fsdp

# %% [markdown]
# ### Prefetching on CPU
#
# On a GPU, FSDP2 overlaps all-gathers with compute through CUDA streams: the all-gathers run on a stream of
# their own while the CPU thread, which only *queues* the kernels, is already at the next block, so the next
# block's all-gather is issued while the current block still computes ("implicit prefetching"). On CPU none
# of that exists: `torch.cpu.Stream` does nothing, every operation runs when it is called, on the calling
# thread, and `dist.all_gather_single(..., async_op=False)`, which FSDP2 calls, returns only once the
# all-gather is done. FSDP2 makes the same call in backward, so the backward prefetching you just found can
# change only the *order*: while a blocking all-gather runs, the rank's thread computes nothing. (The cells
# below time this in the forward; backward's blocks are not timed in this lesson.)
#
# Two ways to ask for more, each in a cell of its own:
#
# - `block.set_modules_to_forward_prefetch([next_block])`: FSDP2 all-gathers the next block right after this
#   block's own all-gather, before this block computes. On CPU that all-gather blocks too.
# - `next_block.unshard(async_op=True)` from a forward pre-hook on this block: the all-gather is handed to
#   gloo as a `Work`, which gloo runs on its own thread, and the rank's thread goes on computing this block.
#   FSDP2 waits for it at the next block's pre-forward.
#
# The picture then shows rank 0's forward in the last step for the three: each block's compute (from the
# `Watch`, put on the timeline's clock by the forward's start) and each all-gather.

# %% [markdown] lang=zh
# ### CPU 上的预取
#
# 在 GPU 上，FSDP2 借助 CUDA 流让 all-gather 与计算重叠：all-gather 在它自己的流上运行，而 CPU 线程只负责把内核*排进队列*，早已走到了下一个块，所以在当前块还在计算的时候，下一个块的 all-gather 就已经发出（“隐式预取”）。在 CPU 上这些都不存在：`torch.cpu.Stream` 什么也不做，每个操作在被调用时就在调用它的线程上运行，而 FSDP2 调用的 `dist.all_gather_single(..., async_op=False)` 要等 all-gather 完成才返回。FSDP2 在反向中做的是同样的调用，所以你刚刚找到的反向预取只能改变*顺序*：阻塞的 all-gather 运行时，rank 的线程什么也不计算。（下面的单元格在前向中测量这一点；本课不测量反向中各块的时间。）
#
# 想要更多，有两种办法，各用一个单元格：
#
# - `block.set_modules_to_forward_prefetch([next_block])`：FSDP2 在这个块自己的 all-gather 之后、这个块计算之前，立刻收集下一个块。在 CPU 上，这次 all-gather 同样会阻塞。
# - 在这个块的前向前钩子中调用 `next_block.unshard(async_op=True)`：all-gather 作为一个 `Work` 交给 gloo，gloo 在它自己的线程上运行它，而 rank 的线程继续计算这个块。FSDP2 在下一个块的前向前钩子中等待它完成。
#
# 接下来的图显示了这三种情况下 rank 0 在最后一步中的前向：每个块的计算（来自 `Watch`，按前向的开始时间对齐到时间线的时钟上）和每次 all-gather。

# %%
%%ddp
model = sharded()
blocks = list(model.body)
for block, after in zip(blocks, blocks[1:]):
    block.set_modules_to_forward_prefetch([after])   # gather the next block right after this one's
del blocks, block, after                             # (modules left in the namespace would count in ddplab's figures)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
watch = train(model, opt)

# %%
tl_explicit = %ddp_timeline
explicit_run = %ddp_gather (watch.samples, watch.sent, watch.compute, watch.starts)

# %%
%%ddp
model = sharded()
blocks = list(model.body)
for block, after in zip(blocks, blocks[1:]):          # while this block computes, gloo's thread gathers the next
    block.register_forward_pre_hook(lambda module, args, after=after: after.unshard(async_op=True) and None)
del blocks, block, after
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
watch = train(model, opt)

# %%
import statistics

tl_async = %ddp_timeline
async_run = %ddp_gather (watch.samples, watch.sent, watch.compute, watch.starts)


def forward_spans(tl, run, r, step):
    """Rank r's forward in one step: the blocks' compute spans (the Watch's clock moved onto the timeline's)
    and the all-gathers, as (start, end, kind, text)."""
    frame = tl.to_pandas()
    forwards = frame[(frame["rank"] == r) & (frame.phase == "forward")].sort_values("start")
    # the timeline's clock minus the rank's: the median over the steps, so that a rank preempted between the two
    # readings of one step's start moves none of that step's spans
    shift = statistics.median(t - w for t, w in zip(forwards.start, run[r][3]))
    compute = [(a + shift, b + shift, "forward", label(UNITS[k]) if k < LAYERS else label(""))
               for s, k, a, b in run[r][2] if s == step]
    gathers = [(s, e, op, label(u), w) for op, u, ph, s, e, b, w in collectives(tl)[r, step]
               if op == "all_gather" and ph == "forward"]
    return compute, gathers


def overlap(spans, others):
    """Seconds of `spans` that run while one of `others` runs."""
    return sum(max(0.0, min(e, e2) - max(s, s2)) for s, e, *_ in spans for s2, e2, *_ in others)


runs = {say("FSDP2 as it is", "FSDP2 原样"): (tl_fsdp, fsdp_run),
        say("explicit forward prefetch", "显式前向预取"): (tl_explicit, explicit_run),
        say("unshard(async_op=True)", "unshard(async_op=True)"): (tl_async, async_run)}
panels, prefetch = [], {}
for name, (tl, run) in runs.items():
    gathered_during, gathering, waiting, forward = [], [], [], []
    for r in range(N):
        for step in range(1, STEPS):
            compute, gathers = forward_spans(tl, run, r, step)
            gathered_during.append(overlap(gathers, compute))
            gathering.append(sum(e - s for s, e, *_ in gathers))
            waiting.append(sum(w for *_, w in gathers))
            forward.append(max(e for s, e, *_ in compute + gathers) - min(s for s, e, *_ in compute + gathers))
    prefetch[name] = tuple(sum(v) / len(v) for v in (gathered_during, gathering, forward, waiting))
    compute, gathers = forward_spans(tl, run, 0, LAST)
    panels.append(dict(title=name, rows={say("compute", "计算"): compute, "all-gather": [g[:4] for g in gathers]}))
for name, (during, gathering, forward, waiting) in prefetch.items():
    print(say(f"{name:<26} forward {1e3 * forward:5.1f} ms; all-gathers {1e3 * gathering:5.1f} ms, of which "
              f"{1e3 * waiting:4.1f} ms waiting for the last rank; in flight while a block computed: {1e3 * during:4.1f} ms",
              f"{name}：前向 {1e3 * forward:.1f} ms；all-gather {1e3 * gathering:.1f} ms，其中等待最后一个 rank "
              f"{1e3 * waiting:.1f} ms；块计算时仍在进行的：{1e3 * during:.1f} ms"))
print(say("(means over the ranks and the steps after the first)", "（各 rank 在第一步之后各步的平均值）"))
names = list(prefetch)
assert prefetch[names[0]][0] < 0.02 * prefetch[names[0]][1]     # blocking: nothing in flight during compute
assert prefetch[names[1]][0] < 0.02 * prefetch[names[1]][1]
assert prefetch[names[2]][0] > 0                                 # gloo's thread gathered while the rank computed
during, shorter = prefetch[names[2]][0], prefetch[names[0]][2] - prefetch[names[2]][2]   # (s)
waits = (1e3 * prefetch[names[0]][3], 1e3 * prefetch[names[2]][3])
print(say(f"The asynchronous all-gathers were in flight for {1e3 * during:.1f} ms of each forward while a block computed: "
          f"that is the most overlapping could save here, and less if gloo's thread, in flight, was only waiting for the "
          f"other ranks or took a core from the compute ({N} ranks share {cores()} cores).",
          f"异步 all-gather 在每次前向中有 {1e3 * during:.1f} ms 是在某个块计算时仍在进行的：这就是重叠在这里最多能省下的时间；"
          f"如果 gloo 的线程在这段时间里只是在等待其他 rank，或者从计算那里占用了 CPU 核心（{N} 个 rank 共享 {cores()} 个 CPU 核心），"
          f"能省下的就更少。"))
than = say("more", "多") if shorter < 0 else say("less", "少")
if abs(shorter) <= 1.5 * during:
    print(say(f"With it the forward took {1e3 * abs(shorter):.1f} ms {than} than FSDP2's as it is: within what the overlap "
              "can explain.",
              f"用了它之后，前向比原样运行的 FSDP2 {than}用了 {1e3 * abs(shorter):.1f} ms：在重叠能够解释的范围之内。"))
else:
    print(say(f"With it the forward took {1e3 * abs(shorter):.1f} ms {than} than FSDP2's as it is, more than the overlap can "
              f"explain: the rest is in how long the all-gathers took, their waiting for the last rank included ({waits[0]:.1f} "
              f"ms against {waits[1]:.1f} ms), and with {N} ranks on {cores()} cores that depends on how the operating system "
              "schedules them. Run the three cells again: the overlap stays, the times move.",
              f"用了它之后，前向比原样运行的 FSDP2 {than}用了 {1e3 * abs(shorter):.1f} ms，超出了重叠所能解释的范围：其余的差别"
              f"在于 all-gather 用了多长时间，包括等待最后一个 rank 的时间（{waits[0]:.1f} ms 对 {waits[1]:.1f} ms），而 {N} 个 rank "
              f"共享 {cores()} 个 CPU 核心时，这取决于操作系统如何调度它们。再运行一次这三个单元格：重叠时间不变，耗时会变。"))
lanes(panels, say("Rank 0's forward, last step: when the blocks compute and when they are gathered",
                  "rank 0 最后一步的前向：各块何时计算、何时收集"))

# %% [markdown]
# **A common claim / what actually happens.** A common claim: FSDP's prefetching hides the all-gathers
# behind the compute. What actually happens: it hides them only where something runs them beside the
# compute. On a GPU that is a CUDA stream. On this CPU pool, FSDP2 as it is and explicit prefetching both
# gather while the rank's thread waits in forward (the overlap printed above is next to nothing: under 2% of
# the all-gathers' time, as the check asserts); only an asynchronous all-gather,
# run by gloo's own thread, was in flight while a block computed, and what that saves depends on a free core
# to run it.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：FSDP 的预取把 all-gather 藏在了计算后面。实际情况是：只有当有东西在计算的同时运行 all-gather 时，才能藏得住。在 GPU 上，这个东西是 CUDA 流。在这个 CPU 进程池上，FSDP2 原样运行和显式预取时，前向中的 all-gather 都是在 rank 的线程等待时进行的（上面打印的重叠时间几乎为零：不到 all-gather 耗时的 2%，这是检查所断言的）；只有异步 all-gather 由 gloo 自己的线程运行，在块计算时仍在进行，而它能省下多少，取决于有没有空闲的 CPU 核心来运行它。

# %% [markdown]
# ## 3. `reshard_after_forward=False`: ZeRO-2's communication, not its memory
#
# After a block's forward, FSDP2 reshards it: it frees the whole parameters and must all-gather them again in
# backward. With `reshard_after_forward=False` it keeps them whole from the forward to the backward of the
# block, and reshards after backward, so between steps the rank still holds only shards. FSDP1 called this
# strategy `ShardingStrategy.SHARD_GRAD_OP`, and this lesson uses that name for it. It saves one all-gather
# per block per step, and costs the whole model's parameters held between forward and backward.
#
# It is often called ZeRO-2, which is half true. Its communication is ZeRO-2's: per step one all-gather of
# the parameters and one reduce-scatter of the gradients, 2Ψ on a ring, as much as DDP's all-reduce (lesson
# 15). Its memory is not: ZeRO-2, as the ZeRO paper and lesson 15 count it, keeps every parameter whole on
# every rank all the time, p + (g + s)/N per rank; `SHARD_GRAD_OP` keeps only shards between steps, FSDP2's
# (p + g + s)/N, and whole parameters only from forward to backward. The cell below measures both.

# %% [markdown] lang=zh
# ## 3. `reshard_after_forward=False`：ZeRO-2 的通信方式，而不是它的内存
#
# 一个块的前向结束后，FSDP2 会把它重新分片：释放完整的参数，到反向时再 all-gather 一次。使用 `reshard_after_forward=False` 时，它从这个块的前向到反向一直保留完整的参数，反向之后再重新分片，所以在两步之间 rank 仍然只持有分片。FSDP1 把这种策略叫作 `ShardingStrategy.SHARD_GRAD_OP`，本课也用这个名字称呼它。它为每个块每一步省下一次 all-gather，代价是在前向和反向之间持有整个模型的参数。
#
# 人们常把它叫作 ZeRO-2，这只说对了一半。它的通信方式是 ZeRO-2 的：每一步对参数做一次 all-gather，对梯度做一次 reduce-scatter，在环上共 2Ψ，与 DDP 的 all-reduce 一样多（第 15 课）。它的内存却不是：按 ZeRO 论文和第 15 课的算法，ZeRO-2 让每个 rank 始终持有全部完整的参数，每个 rank p + (g + s)/N；而 `SHARD_GRAD_OP` 在两步之间只持有分片，即 FSDP2 的 (p + g + s)/N，只在前向到反向之间持有完整的参数。下面的单元格把两者都测量出来。

# %%
%%ddp
model = sharded(reshard_after_forward=False)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
watch = train(model, opt)

# %%
tl_sgo = %ddp_timeline
sgo = tl_sgo.memory
sgo_run = %ddp_gather (watch.samples, watch.sent, watch.compute, watch.starts)
SGO = "SHARD_GRAD_OP"                                # FSDP1's name for reshard_after_forward=False
found2, (fwd2, bwd2, rs2) = count(tl_sgo)
assert (fwd2, bwd2, rs2) == (LAYERS + 1, 0, LAYERS + 1), (fwd2, bwd2, rs2)   # no all-gather in backward
assert (sgo[["params", "grads", "optimizer"]].values == fsdp[["params", "grads", "optimizer"]].values).all()
between = {name: [s[3] for s in run[0][0] if s[1] == "between"] for name, run in
           (("DDP", ddp_run), ("FSDP2", fsdp_run), (SGO, sgo_run))}
assert set(between[SGO]) == {4 * P} and set(between["FSDP2"]) == {head_bytes}
assert all(s[3] == 0 for s in sgo_run[0][0] if s[1] in ("start", "zeroed", "end"))   # between steps: no whole parameter
states = {"DDP": d.params + d.grads + d.optimizer, SGO: float(sgo.iloc[0][["params", "grads", "optimizer"]].sum()),
          "ZeRO-2": d.params + (d.grads + d.optimizer) / N}                        # lesson 15's count
assert states["ZeRO-2"] - states[SGO] > 0.9 * (N - 1) / N * d.params, states   # ZeRO-2 keeps the parameters whole: (N−1)/N more
print(say(f"all-gathers per step: {fwd + bwd} with FSDP2 ({fwd} in forward, {bwd} in backward), {fwd2 + bwd2} with "
          f"{SGO} ({fwd2} and {bwd2}); reduce-scatters: {rs} and {rs2}",
          f"每步 all-gather 次数：FSDP2 {fwd + bwd} 次（前向 {fwd} 次，反向 {bwd} 次），{SGO} {fwd2 + bwd2} 次"
          f"（{fwd2} 次和 {bwd2} 次）；reduce-scatter：{rs} 次和 {rs2} 次"))
print(say(f"whole parameters between forward and backward: DDP {between['DDP'][0] / 1e6:.2f} MB, FSDP2 "
          f"{between['FSDP2'][0] / 1e6:.2f} MB, {SGO} {between[SGO][0] / 1e6:.2f} MB; between steps {SGO} holds none",
          f"前向和反向之间完整的参数：DDP {between['DDP'][0] / 1e6:.2f} MB，FSDP2 {between['FSDP2'][0] / 1e6:.2f} MB，"
          f"{SGO} {between[SGO][0] / 1e6:.2f} MB；在两步之间，{SGO} 一个也不持有"))
print(say(f"model states rank 0 holds between steps: DDP {states['DDP'] / 1e6:.2f} MB; {SGO} {states[SGO] / 1e6:.2f} MB, "
          f"the same shards as FSDP2; ZeRO-2 as lesson 15 counts it, p + (g + s)/N, would hold {states['ZeRO-2'] / 1e6:.2f} MB, "
          "all the parameters whole",
          f"rank 0 在两步之间持有的模型状态：DDP {states['DDP'] / 1e6:.2f} MB；{SGO} {states[SGO] / 1e6:.2f} MB，"
          f"与 FSDP2 的分片相同；按第 15 课的算法，ZeRO-2 是 p + (g + s)/N，会持有 {states['ZeRO-2'] / 1e6:.2f} MB，"
          "其中全部参数都是完整的"))
series_whole[SGO], series_held[SGO] = through_step(sgo_run[0][0], sgo, 0)
if has_heap:
    peaks[SGO] = [peak(sgo_run[r][0], sgo, r) for r in range(N)]
    assert all(f < z < d_ for f, z, d_ in zip(peaks["FSDP2"], peaks[SGO], peaks["DDP"])), peaks
    print(say("at most held during a step, rank 0: " + ", ".join(f"{k} {v[0] / 1e6:.2f} MB" for k, v in peaks.items()),
              "一步之中最多持有，rank 0：" + "，".join(f"{k} {v[0] / 1e6:.2f} MB" for k, v in peaks.items())))
step_picture([(titles[0], series_whole), *([(titles[1], series_held)] if has_heap else [])], marks)

# %% [markdown]
# With `reshard_after_forward=False` the whole parameters pile up block by block through the forward, reach
# DDP's whole model between forward and backward, and are freed block by block in backward. The peak sits
# between FSDP2's and DDP's: the gradients and Adam's state stay sharded. Between steps it holds FSDP2's
# shards, far less than ZeRO-2's p + (g + s)/N (printed above), whose parameters stay whole. So
# `SHARD_GRAD_OP` communicates as ZeRO-2 does and, between steps, holds what ZeRO-3 holds; its trade is the
# whole parameters from forward to backward.
#
# `reshard_after_forward` also takes an integer: reshard after forward to a smaller group of ranks (for
# example the GPUs of one machine), so that backward's all-gather runs there. And the root is not resharded
# after forward by default, because backward needs it first: that is why the head's all-gather appeared only
# in forward in part 2.

# %% [markdown] lang=zh
# 使用 `reshard_after_forward=False` 时，完整的参数在前向中逐块累积，在前向和反向之间达到 DDP 的整个模型，再在反向中逐块释放。峰值介于 FSDP2 和 DDP 之间：梯度和 Adam 的状态仍然是分片的。在两步之间，它持有的是 FSDP2 的分片，远少于 ZeRO-2 的 p + (g + s)/N（见上面的输出），因为 ZeRO-2 的参数始终是完整的。所以 `SHARD_GRAD_OP` 的通信方式与 ZeRO-2 相同，而在两步之间持有的与 ZeRO-3 相同；它的取舍是从前向到反向持有完整的参数。
#
# `reshard_after_forward` 也可以是一个整数：前向之后重新分片到一个更小的 rank 组（例如同一台机器上的各个 GPU），让反向的 all-gather 在组内进行。另外，根模块默认在前向之后不重新分片，因为反向最先用到它：这就是为什么在第 2 部分中，输出头的 all-gather 只出现在前向中。

# %% [markdown]
# ## 4. What gloo's reduce-scatter costs
#
# A reduce-scatter leaves each rank the sum, over the ranks, of one N-th of a tensor. That is why ZeRO-2 and
# FSDP reduce-scatter the gradients instead of all-reducing them: each rank updates only the shard of the
# parameters it owns, with its own shard of Adam's state, so it needs the summed gradients of that shard and
# nothing more. The gradients stay sharded, and so does the optimizer state; an all-reduce would hand every
# rank the whole summed gradient, all but 1/N of it of no use to it. As a ring, a reduce-scatter is also
# the first half of a ring all-reduce (lesson 12): each rank sends (N−1)/N of the tensor, half of the
# all-reduce's 2(N−1)/N.
#
# Read how gloo does it in torch 2.13 (`ProcessGroupGloo::reduce_scatter_tensor_coalesced` in torch's
# `ProcessGroupGloo.cpp`): it clones the whole input, **all-reduces the whole clone**, and copies out this
# rank's N-th. Measure it: the bytes each rank writes (`written()`, Linux's count of what the process wrote,
# gloo's sockets included) and the time (`median_seconds`), for an all-reduce, a reduce-scatter of the same
# input and an all-gather of the same output, at three sizes.

# %% [markdown] lang=zh
# ## 4. gloo 的 reduce-scatter 的开销
#
# reduce-scatter 让每个 rank 得到一个张量的 N 分之一在各 rank 上的和。这就是 ZeRO-2 和 FSDP 对梯度做 reduce-scatter 而不是 all-reduce 的原因：每个 rank 只更新它拥有的那一份参数，用的是它自己那一份 Adam 状态，所以它需要的只是那一份的梯度之和，别的都不需要。梯度保持分片，优化器状态也一样；all-reduce 会把整个求和后的梯度交给每个 rank，而其中除了 1/N 以外对它都没有用。用环来实现时，reduce-scatter 还恰好是环形 all-reduce 的前一半（第 12 课）：每个 rank 发送张量的 (N−1)/N，是 all-reduce 的 2(N−1)/N 的一半。
#
# 看看 torch 2.13 中 gloo 是怎么做的（torch 的 `ProcessGroupGloo.cpp` 中的 `ProcessGroupGloo::reduce_scatter_tensor_coalesced`）：它复制整个输入，**对整个副本做 all-reduce**，再拷出属于这个 rank 的那 N 分之一。来测量一下：每个 rank 写出的字节数（`written()`，即 Linux 统计的这个进程写出的字节数，包括 gloo 的套接字）和耗时（`median_seconds`），分别针对 all-reduce、对同样输入做的 reduce-scatter，以及对同样输出做的 all-gather，取三种大小。

# %%
%%ddp
from ddplab.lessons.ranks import median_seconds

measured = {}
for n in (250_000, 1_000_000, 4_000_000):            # float32 elements: 1, 4 and 16 MB
    big, piece = torch.ones(n), torch.empty(n // world_size)
    ops = {"all-reduce": lambda: dist.all_reduce(big),
           "reduce-scatter": lambda: dist.reduce_scatter_single(piece, big),
           "all-gather": lambda: dist.all_gather_single(big, piece)}
    for name, op in ops.items():
        dist.barrier()
        before = written()
        op()
        sent = written() - before if before is not None else None
        measured[name, 4 * n] = (sent, median_seconds(op, repeat=9, warmup=2))
piece = torch.empty(8 // world_size)
dist.reduce_scatter_single(piece, torch.arange(8.0) + 10 * rank, op=dist.ReduceOp.MAX)   # a reduce-scatter is exact
assert piece.tolist() == (torch.arange(8.0) + 10 * (world_size - 1)).chunk(world_size)[rank].tolist()

# %%
gloo = %ddp_gather measured
sizes = sorted({b for _, b in gloo[0]})
wrote = gloo[0][next(iter(gloo[0]))][0] is not None
for b in sizes:
    ar, rsc, ag = (gloo[0][name, b] for name in ("all-reduce", "reduce-scatter", "all-gather"))
    print(say(f"{b / 1e6:4.0f} MB: all-reduce {1e3 * ar[1]:6.2f} ms, reduce-scatter {1e3 * rsc[1]:6.2f} ms, "
              f"all-gather {1e3 * ag[1]:6.2f} ms",
              f"{b / 1e6:4.0f} MB：all-reduce {1e3 * ar[1]:6.2f} ms，reduce-scatter {1e3 * rsc[1]:6.2f} ms，"
              f"all-gather {1e3 * ag[1]:6.2f} ms")
          + (say(f"; written by rank 0: {ar[0] / b:.3f}, {rsc[0] / b:.3f} and {ag[0] / b:.3f} times the {b / 1e6:.0f} MB",
                 f"；rank 0 写出的字节数：分别是 {b / 1e6:.0f} MB 的 {ar[0] / b:.3f}、{rsc[0] / b:.3f} 和 {ag[0] / b:.3f} 倍")
             if wrote else ""))
if wrote:
    for per_rank in gloo:                            # every rank: the ring's bytes (and a few kB of ddplab's own)
        for b in sizes:
            slack = max(0.01 * b, 65536)
            assert abs(per_rank["all-reduce", b][0] - 2 * (N - 1) / N * b) < slack
            assert abs(per_rank["reduce-scatter", b][0] - 2 * (N - 1) / N * b) < slack     # as much as an all-reduce
            assert abs(per_rank["all-gather", b][0] - (N - 1) / N * b) < slack
    step_sent = {name: run[0][1][LAST] for name, run in (("DDP", ddp_run), ("FSDP2", fsdp_run), (SGO, sgo_run))}
    all_units = sum(padded.values())
    expect = {"DDP": 2 * (N - 1) / N * 4 * P,
              "FSDP2": (N - 1) / N * (all_units + (all_units - padded[""])) + 2 * (N - 1) / N * all_units,
              SGO: (N - 1) / N * all_units + 2 * (N - 1) / N * all_units}
    for name, sent in step_sent.items():
        assert abs(sent - expect[name]) < 0.01 * expect[name], (name, sent, expect[name])
    one, two = (N - 1) / N, 2 * (N - 1) / N          # a ring's share of the tensor: all-gather, all-reduce
    print(say(f"per training step, rank 0 wrote: DDP {step_sent['DDP'] / 1e6:.2f} MB (its all-reduce: {two:g} × "
              f"{4 * P / 1e6:.2f} MB); FSDP2 {step_sent['FSDP2'] / 1e6:.2f} MB (all-gathers in forward {one:g} × "
              f"{all_units / 1e6:.2f} MB, in backward {one:g} × {(all_units - padded['']) / 1e6:.2f} MB, reduce-scatters "
              f"{two:g} × {all_units / 1e6:.2f} MB), {step_sent['FSDP2'] / step_sent['DDP']:.2f} times DDP's; {SGO} "
              f"{step_sent[SGO] / 1e6:.2f} MB, {step_sent[SGO] / step_sent['DDP']:.2f} times DDP's",
              f"每个训练步中 rank 0 写出：DDP {step_sent['DDP'] / 1e6:.2f} MB（它的 all-reduce：{two:g} × {4 * P / 1e6:.2f} MB）；"
              f"FSDP2 {step_sent['FSDP2'] / 1e6:.2f} MB（前向 all-gather {one:g} × {all_units / 1e6:.2f} MB，反向 all-gather "
              f"{one:g} × {(all_units - padded['']) / 1e6:.2f} MB，reduce-scatter {two:g} × {all_units / 1e6:.2f} MB），"
              f"是 DDP 的 {step_sent['FSDP2'] / step_sent['DDP']:.2f} 倍；{SGO} {step_sent[SGO] / 1e6:.2f} MB，"
              f"是 DDP 的 {step_sent[SGO] / step_sent['DDP']:.2f} 倍"))
else:
    print(say("This system has no /proc/self/io: only the times are measured.",
              "这个系统没有 /proc/self/io：只测量耗时。"))
big = sizes[-1]                                      # bandwidth, not latency, decides the largest one's time
ratio = gloo[0]["reduce-scatter", big][1] / gloo[0]["all-reduce", big][1]
if ratio > 0.8:
    print(say(f"At {big / 1e6:.0f} MB the reduce-scatter took {ratio:.2f} times an all-reduce's time: a clone and a whole "
              "all-reduce, where a ring reduce-scatter would take about half. (The 1 MB ones cost mostly each call's "
              "fixed latency, lesson 12's α, and vary more.)",
              f"在 {big / 1e6:.0f} MB 时，reduce-scatter 的耗时是 all-reduce 的 {ratio:.2f} 倍：一次复制加一次完整的 all-reduce，"
              "而环形的 reduce-scatter 大约只要一半。（1 MB 的那些主要花在每次调用的固定延迟上，即第 12 课的 α，波动也更大。）"))
else:
    print(say(f"At {big / 1e6:.0f} MB the reduce-scatter took {ratio:.2f} times an all-reduce's time, less than the whole "
              "all-reduce it runs would suggest: the timings of this shared machine are noisy (run the cell again).",
              f"在 {big / 1e6:.0f} MB 时，reduce-scatter 的耗时是 all-reduce 的 {ratio:.2f} 倍，比它实际运行的完整 all-reduce "
              "所预示的要少：这台共享机器上的计时波动很大（再运行一次这个单元格）。"))
OPS = ("all-reduce", "reduce-scatter", "all-gather")
display(draw.lines(None, panels=[dict(
    series={name: ([b / 1e6 for b in sizes], [1e3 * gloo[0][name, b][1] for b in sizes]) for name in OPS},
    xlabel=say("tensor (MB): the all-reduce's and the reduce-scatter's input, the all-gather's output",
               "张量（MB）：all-reduce 和 reduce-scatter 的输入，all-gather 的输出"),
    ylabel=say("milliseconds (median)", "毫秒（中位数）"), title=say(f"gloo, {N} ranks: time", f"gloo，{N} 个 rank：耗时"),
    logx=True)]))
if wrote:
    display(draw.bars({name: gloo[0][name, sizes[-1]][0] / sizes[-1] for name in OPS},
                      ylabel=say("bytes written / tensor bytes", "写出的字节 / 张量字节"),
                      title=say(f"gloo, {N} ranks: what rank 0 sent, {sizes[-1] / 1e6:.0f} MB",
                                f"gloo，{N} 个 rank：rank 0 发送的字节，{sizes[-1] / 1e6:.0f} MB"), fmt="{:.3f}"))

# %% [markdown]
# On gloo, FSDP2 pays for its reduce-scatters what DDP pays for its all-reduce, and the all-gathers come on
# top (the ratios printed above). With NCCL, whose reduce-scatter is a real ring, an FSDP step sends 1.5 times
# DDP's bytes: two all-gathers and a reduce-scatter of (N−1)/N each, against the all-reduce's 2(N−1)/N; and
# `SHARD_GRAD_OP`, without the backward all-gathers, sends what DDP sends, as ZeRO-2 does. Sharding is paid
# for in communication; it
# pays off where memory, not bandwidth, is what runs out.
#
# **A common claim / what actually happens.** A common claim: a reduce-scatter costs half an all-reduce.
# What actually happens: that holds for a ring, as NCCL runs it; gloo in this torch runs a whole all-reduce
# and keeps a piece, so each rank wrote exactly as many bytes for the reduce-scatter as for the all-reduce
# (printed above); the times printed with them say what that costs on this machine.
#
# Next, lesson 20 shards *within* a layer instead: tensor parallelism splits each weight's matrix product
# across ranks, with DTensor and the same `DeviceMesh`. Lesson 21 takes the activations, which FSDP left
# whole, and trades them for recomputation (activation checkpointing), and saves and loads a sharded model's
# checkpoint without gathering it on one rank.

# %% [markdown] lang=zh
# 在 gloo 上，FSDP2 为它的 reduce-scatter 付出的，就是 DDP 为它的 all-reduce 付出的，all-gather 还要另算（比值见上面的输出）。使用 NCCL 时，它的 reduce-scatter 是真正的环，FSDP 的一步发送的字节数是 DDP 的 1.5 倍：两次 all-gather 和一次 reduce-scatter 各发送 (N−1)/N，对比 all-reduce 的 2(N−1)/N；而 `SHARD_GRAD_OP` 没有反向的 all-gather，发送的字节数与 DDP 相同，和 ZeRO-2 一样。分片的代价用通信来付；在内存而不是带宽先耗尽的地方，它才划算。
#
# **常见说法 / 实际情况。** 一种常见的说法是：一次 reduce-scatter 的开销是 all-reduce 的一半。实际情况是：这对环形算法成立，NCCL 就是这样运行的；而这个版本 torch 中的 gloo 运行一次完整的 all-reduce，然后只保留其中一片，所以每个 rank 为 reduce-scatter 写出的字节数与 all-reduce 完全相同（见上面的输出）；与之一起打印的耗时，说明了这在本机上的代价。
#
# 接下来，第 20 课改为在一层*之内*分片：张量并行用 DTensor 和同样的 `DeviceMesh`，把每个权重的矩阵乘法拆到各个 rank 上。第 21 课处理 FSDP 没有分片的激活值，用重新计算来换掉它们（激活检查点），并在不把模型收集到一个 rank 上的情况下，保存和加载分片模型的检查点。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this run, and
# why.
#
# **19.1** The same model (8 blocks of 510 × 510, a head of 10 classes, float32, Adam) under FSDP2 on 16 ranks
# instead of 4. How many bytes of parameters, gradients and Adam state (as ddplab counts them) does rank 0 hold
# between steps? Write a whole number of bytes.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。
#
# **19.1** 同一个模型（8 个 510 × 510 的块，10 个类别的输出头，float32，Adam）在 16 个而不是 4 个 rank 上用 FSDP2 训练。在两步之间，rank 0 持有多少字节的参数、梯度和 Adam 状态（按 ddplab 的统计方式）？请写一个整数（字节数）。

# %%
answer = ...    # bytes rank 0 holds between steps, FSDP2 on 16 ranks
check("19.1", answer, width=510, layers=8, classes=10, ranks=16, tensors=T)

# %% [markdown]
# **19.2** Suppose this lesson's FSDP2 training (resharding after forward, as in part 2) ran on 8 ranks with
# NCCL, whose reduce-scatter is a ring. How many MB would each rank send per step? Write a number of MB.

# %% [markdown] lang=zh
# **19.2** 假设本课的 FSDP2 训练（前向之后重新分片，和第 2 部分一样）在 8 个 rank 上用 NCCL 运行，而 NCCL 的 reduce-scatter 是环形的。每个 rank 每一步会发送多少 MB？请写一个数（单位 MB）。

# %%
answer = ...    # MB each rank sends per step, 8 ranks, a ring reduce-scatter
check("19.2", answer, width=510, layers=8, classes=10, ranks=8)

# %% [markdown]
# **19.3** In part 2's backward, FSDP2 as it is gathered block k−1 before reducing block k's gradients (the
# order the check found). The lesson timed the overlap in the forward only; in backward FSDP2 gathers with the
# same call, `unshard()` with `async_op=False`. From that call and the forward's measurement: on this CPU
# pool, what can that backward all-gather run alongside? Write one letter.
#
# - (a) the computation of block k's gradients, on a CUDA-like stream of the CPU
# - (b) block k's reduce-scatter, which gloo runs on the same thread
# - (c) the optimizer step of the blocks already reduced
# - (d) nothing of the rank's own work: the call returns once the all-gather is done, and only then does the
#   rank's thread go on

# %% [markdown] lang=zh
# **19.3** 在第 2 部分的反向中，原样运行的 FSDP2 先收集块 k−1，再对块 k 的梯度做 reduce-scatter（检查找到的就是这个顺序）。本课只在前向中测量了重叠；在反向中，FSDP2 用同样的调用来收集，即 `async_op=False` 的 `unshard()`。根据这个调用和前向中的测量：在这个 CPU 进程池上，反向中的这次 all-gather 能与什么同时进行？请写一个字母。
#
# - (a) 块 k 的梯度计算，在 CPU 上一个类似 CUDA 流的流中进行
# - (b) 块 k 的 reduce-scatter，gloo 在同一个线程上运行它
# - (c) 已经做完 reduce-scatter 的那些块的优化器更新
# - (d) rank 自己的工作一样也没有：这个调用要等 all-gather 完成才返回，之后 rank 的线程才继续

# %%
answer = ...    # a, b, c or d
check("19.3", answer, overlap_ms=1e3 * prefetch[names[0]][0])

# %% [markdown]
# **19.4** Which of these did part 3 measure for `reshard_after_forward=False`, compared with FSDP2's
# default? Write one letter.
#
# - (a) backward makes no all-gather, the peak during a step rises, and between steps each rank holds the
#   same bytes as with the default
# - (b) backward makes no all-gather, and each rank keeps the whole parameters between steps too, as ZeRO-2
#   does in lesson 15, with the gradients and Adam's state sharded
# - (c) backward still all-gathers every block, from the copy kept since forward, so the count of all-gathers
#   stays and the bytes sent per step fall
# - (d) the reduce-scatters become all-reduces, since whole parameters need whole gradients, and the peak
#   rises by a whole model's gradients

# %% [markdown] lang=zh
# **19.4** 与 FSDP2 的默认设置相比，第 3 部分为 `reshard_after_forward=False` 测到的是下面哪一项？请写一个字母。
#
# - (a) 反向中不做 all-gather，一步之中的峰值升高，而在两步之间每个 rank 持有的字节数与默认设置时相同
# - (b) 反向中不做 all-gather，而且每个 rank 在两步之间也保留完整的参数，就像第 15 课中的 ZeRO-2 那样，梯度和 Adam 的状态则是分片的
# - (c) 反向中仍然对每个块做 all-gather，但收集的是前向以来保留的那份拷贝，所以 all-gather 的次数不变，每步发送的字节数减少
# - (d) reduce-scatter 变成了 all-reduce，因为完整的参数需要完整的梯度，峰值因此多出整个模型的梯度

# %%
answer = ...    # a, b, c or d
check("19.4", answer, backward_gathers=bwd2, reduce_scatters=rs2, held_mb=states[SGO] / 1e6,
      zero2_mb=states["ZeRO-2"] / 1e6)

# %%
%ddp_stop
