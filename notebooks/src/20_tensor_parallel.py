# %% [markdown]
# # Lesson 20 · Tensor parallelism and 2D meshes
#
# **In short.** Pipelining (lesson 6) cuts a model between its layers; **tensor parallelism** cuts
# every layer's weight matrices, so all ranks work on every layer at once, each on its slice. Here a
# Transformer's MLP block is split the way Megatron-LM splits it: the first Linear by its output
# features, the second by its input features, so each rank computes its slice with no communication
# in between and one all-reduce sums the partial outputs. You build it by hand from `dist.all_reduce`,
# then let `parallelize_module` do it, and read off the timeline what it costs: collectives of the
# *activations*, in forward and in backward, in every block. **Sequence parallelism** turns each
# all-reduce into an all-gather and a reduce-scatter, the same bytes on a ring (on this pool's gloo you
# measure what the pair costs), and splits the rest of the block by tokens. Finally a **2D mesh** of
# 2 × 2 ranks runs FSDP2 over one dimension and tensor
# parallelism over the other, and the timeline shows which collective ran on which.
#
# **You will learn**
# - how a column-split and a row-split Linear make an MLP that needs one all-reduce in forward and one in backward (Megatron's f and g)
# - how `parallelize_module` with `ColwiseParallel` and `RowwiseParallel` does the same on a `DeviceMesh`, and why its collectives carry activations, not weights
# - what sequence parallelism trades: an all-gather and a reduce-scatter instead of an all-reduce, for 1/N of the activations outside the matmuls, and what that pair costs on gloo, measured
# - how a 2D mesh combines FSDP2 (data parallelism, sharded) with tensor parallelism, and how to read which collective runs on which dimension
#
# **Study time:** about 50 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** the hand-split block checked against the whole one (and what goes wrong
# without the backward all-reduce), the timeline of a tensor-parallel block with each all-reduce
# named by its layer, the bytes and the activations of tensor and sequence parallelism side by side,
# and one training step of FSDP2 × TP on a 2 × 2 mesh, every collective on its own dimension.

# %% [markdown] lang=zh
# # 第 20 课 · 张量并行与二维设备网格
#
# **简而言之**：流水线并行（第 6 课）在层与层之间切分模型；**张量并行**则切分每一层的权重矩阵，于是所有 rank 同时处理每一层，各自负责其中一片。这一课按 Megatron-LM 的方式切分 Transformer 的一个 MLP 块：第一个 Linear 按输出特征切分，第二个按输入特征切分，这样每个 rank 算自己那一片时中间不需要任何通信，最后用一次 all-reduce 把各 rank 的部分输出加起来。你先用 `dist.all_reduce` 亲手搭出它，再交给 `parallelize_module` 来做，并从时间线上读出它的代价：在每个块的前向和反向中，都要对*激活*做集合通信。**序列并行**把每次 all-reduce 换成一次 all-gather 加一次 reduce-scatter（在环上字节数相同；在这个进程池的 gloo 上，你将测量这一对的开销），并把块的其余部分按词元（token）切分。最后，一个 2 × 2 的**二维设备网格**在一个维度上运行 FSDP2，在另一个维度上运行张量并行，时间线会显示每个集合通信运行在哪个维度上。
#
# **你将学到**
# - 按列切分和按行切分的两个 Linear 怎样组成一个 MLP，使它在前向和反向中各只需要一次 all-reduce（Megatron 的 f 和 g）
# - `parallelize_module` 怎样用 `ColwiseParallel` 和 `RowwiseParallel` 在一个 `DeviceMesh` 上完成同样的切分，以及为什么它的集合通信传的是激活而不是权重
# - 序列并行做了怎样的取舍：用一次 all-gather 加一次 reduce-scatter 代替一次 all-reduce，换来矩阵乘法之外的激活只剩 1/N，以及这一对在 gloo 上的实测开销
# - 二维设备网格怎样把 FSDP2（分片的数据并行）与张量并行结合起来，以及怎样读出哪个集合通信运行在哪个维度上
#
# **学习时间**：约 50 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：亲手切分的块与完整的块对照检查（以及缺少反向的 all-reduce 时会出什么错），一个张量并行块的时间线（每次 all-reduce 都标出它所属的层），张量并行与序列并行的字节数和激活并排比较，以及在 2 × 2 设备网格上 FSDP2 × 张量并行的一个训练步，每个集合通信各在自己的维度上。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## The block
#
# The part of a Transformer that tensor parallelism splits first is its MLP block: a LayerNorm, a
# Linear from the hidden size H up to 4H, a GELU, a Linear back down to H, and the residual that adds
# the block's input to its output. The sizes are small, to run fast on a few cores: H = 256, and a
# batch of 8 sequences of 64 tokens, so the block's input and output are 8 × 64 × 256 floats.
#
# Every rank builds the whole block with the same seed (the same weights everywhere) and runs it
# once on the same batch: that is the reference every split below must match. The batch stands for
# the output of earlier layers, which need its gradient, so it `requires_grad_()`.

# %% [markdown] lang=zh
# ## 这个块
#
# Transformer 中最先被张量并行切分的部分是它的 MLP 块：一个 LayerNorm，一个把隐藏维度从 H 升到 4H 的 Linear，一个 GELU，一个再降回 H 的 Linear，以及把块的输入加到输出上的残差连接。为了在几个 CPU 核心上跑得快，尺寸都很小：H = 256，一个批次是 8 个序列、每个序列 64 个词元，所以块的输入和输出都是 8 × 64 × 256 个浮点数。
#
# 每个 rank 都用同一个随机种子构建整个块（各处的权重都相同），并在同一个批次上运行一次：下面每一种切分都必须与这个参照结果一致。这个批次代表前面各层的输出，前面的层需要它的梯度，所以对它调用了 `requires_grad_()`。

# %%
H, B, S = 256, 8, 64        # hidden size, sequences per batch, tokens per sequence
%ddp_push H B S

# %%
%%ddp
import torch.nn.functional as F
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

class Block(nn.Module):
    """A Transformer's MLP block: LayerNorm, Linear H -> 4H, GELU, Linear 4H -> H, plus the residual."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)                # the same seed everywhere: every copy has the same weights
        self.norm, self.up, self.act, self.down = nn.LayerNorm(H), nn.Linear(H, 4 * H), nn.GELU(), nn.Linear(4 * H, H)

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))

def close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)

torch.manual_seed(1)
x = torch.randn(B, S, H)                       # the same batch on every rank
whole = Block()
x_whole = x.clone().requires_grad_()           # stands for earlier layers: they need this gradient
out_whole = whole(x_whole)
out_whole.square().mean().backward()           # a stand-in loss
if rank == 0:
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in whole.named_children() if name != "act"}
    print(say(f"parameters: {counts}, {sum(counts.values()):,} in all; activations in and out: {tuple(x.shape)}",
              f"参数量：{counts}，共 {sum(counts.values()):,} 个；输入和输出的激活：{tuple(x.shape)}"))

# %% [markdown]
# ## 1. Splitting the two matrices by hand
#
# `up` computes h = x·Wᵀ + b with a weight W of shape (4H, H): one row per hidden feature. Give each
# of the N = 4 ranks a quarter of those rows (and of the bias): rank *r* computes hidden features
# 256·*r* to 256·*r* + 255 for every token, and GELU, which works feature by feature, runs on them
# right there. This is the **column-parallel** Linear (the columns of Wᵀ, the rows of W).
#
# `down` has a weight of shape (H, 4H): each output feature reads all 4H hidden features. Give each
# rank the 256 *columns* that read its own hidden features: its product is then a **partial sum** of
# every output feature, and the four partial sums add up to the whole output. One `all_reduce` makes
# that sum on every rank. This is the **row-parallel** Linear. The LayerNorm, `down`'s bias and the
# residual stay whole on every rank (the bias is added once, after the sum).
#
# Backward mirrors it. Each rank needs the gradient of the whole output: after the all-reduce every
# rank has the whole output, so its gradient is already there, and the all-reduce's backward is the
# identity. But the gradient of `up`'s *input* is, on each rank, only what its quarter of the rows
# contributes: the four add up to the true gradient, so here backward needs an all-reduce. Megatron-LM
# names the pair **f** (forward: identity, backward: all-reduce), placed before the column-split
# layer, and **g** (forward: all-reduce, backward: identity), after the row-split layer. Each is a
# few lines of `torch.autograd.Function`.

# %% [markdown] lang=zh
# ## 1. 亲手切分两个矩阵
#
# `up` 计算 h = x·Wᵀ + b，权重 W 的形状是 (4H, H)：每个隐藏特征对应一行。把这些行（以及偏置）分给 N = 4 个 rank，每个 rank 一份四分之一：rank *r* 为每个词元计算第 256·*r* 到 256·*r* + 255 个隐藏特征，而 GELU 是逐个特征计算的，当场就能作用在它们上面。这就是**按列并行**的 Linear（Wᵀ 的列，也就是 W 的行）。
#
# `down` 的权重形状是 (H, 4H)：每个输出特征都要读取全部 4H 个隐藏特征。把读取本 rank 那些隐藏特征的 256 *列*分给这个 rank：它的乘积就是每个输出特征的一个**部分和**，四个部分和加起来才是完整的输出。一次 `all_reduce` 就在每个 rank 上求出这个和。这就是**按行并行**的 Linear。LayerNorm、`down` 的偏置和残差连接在每个 rank 上都保持完整（偏置在求和之后只加一次）。
#
# 反向计算是它的镜像。每个 rank 都需要完整输出的梯度：all-reduce 之后每个 rank 都有完整的输出，所以它的梯度本来就在那里，all-reduce 的反向就是恒等映射。但 `up` 的*输入*的梯度，在每个 rank 上只是它那四分之一的行贡献的部分：四个部分加起来才是真正的梯度，所以反向计算在这里需要一次 all-reduce。Megatron-LM 把这一对操作叫作 **f**（前向：恒等，反向：all-reduce），放在按列切分的层之前；以及 **g**（前向：all-reduce，反向：恒等），放在按行切分的层之后。每一个都只需几行 `torch.autograd.Function`。

# %%
%%ddp
class CopyToTP(torch.autograd.Function):
    """Megatron's f: forward, the identity; backward, an all-reduce of the gradient."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)                  # each rank's gradient is only its rows' share: sum them
        return grad

class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: forward, an all-reduce of the partial outputs; backward, the identity."""

    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)                     # the partial sums of every output feature: add them
        return t

    @staticmethod
    def backward(ctx, grad):
        return grad

inner = 4 * H // world_size                    # this rank's share of the 4H hidden features
mine = slice(rank * inner, (rank + 1) * inner)
hand = Block()                                 # the same weights as `whole`, then cut
w_up = nn.Parameter(hand.up.weight.detach()[mine].clone())         # rows: (inner, H)
b_up = nn.Parameter(hand.up.bias.detach()[mine].clone())
w_down = nn.Parameter(hand.down.weight.detach()[:, mine].clone())  # columns: (H, inner)

def hand_block(x, f=CopyToTP.apply):
    h = F.gelu(F.linear(f(hand.norm(x)), w_up, b_up))   # this rank's hidden features: no communication
    partial = F.linear(h, w_down)                        # this rank's share of every output feature
    return x + ReduceFromTP.apply(partial) + hand.down.bias

x_hand = x.clone().requires_grad_()
out_hand = hand_block(x_hand)
out_hand.square().mean().backward()
grads_hand = {"up": w_up.grad.clone(), "down": w_down.grad.clone()}
same_hand = {"output": close(out_hand, out_whole), "input gradient": close(x_hand.grad, x_whole.grad),
             "up's gradient": close(w_up.grad, whole.up.weight.grad[mine]),
             "down's gradient": close(w_down.grad, whole.down.weight.grad[:, mine]),
             "norm's gradient": close(hand.norm.weight.grad, whole.norm.weight.grad)}
held = {"split": w_up.numel() + b_up.numel() + w_down.numel(), "whole": sum(p.numel() for p in whole.parameters())}

# the same, without f: backward skips the all-reduce of the input's gradient
for p in (w_up, b_up, w_down, *hand.parameters()):
    p.grad = None
x_no_f = x.clone().requires_grad_()
hand_block(x_no_f, f=lambda t: t).square().mean().backward()
off_no_f = ((x_no_f.grad - x_whole.grad).abs().max() / x_whole.grad.abs().max()).item()
norm_no_f = close(hand.norm.weight.grad, whole.norm.weight.grad)

# %%
same_hand = %ddp_gather same_hand
held = %ddp_gather held
off_no_f = %ddp_gather off_no_f
norm_no_f = %ddp_gather norm_no_f
assert all(all(s.values()) for s in same_hand), same_hand
assert min(off_no_f) > 0.01 and not any(norm_no_f), (off_no_f, norm_no_f)
split, total = held[0]["split"], held[0]["whole"]
print(say(f"with f and g: the output and every gradient on all 4 ranks equal the whole block's ({', '.join(same_hand[0])})",
          "有了 f 和 g：4 个 rank 上的输出和每个梯度都与完整的块相同（输出、输入的梯度、up、down 和 norm 的梯度）"))
print(say(f"each rank holds {split:,} of the {4 * split:,} split parameters (up's weight and bias, down's weight): a "
          f"quarter; with the LayerNorm and down's bias, which stay whole, {split + 2 * H + H:,} of the block's {total:,}",
          f"每个 rank 持有被切分的 {4 * split:,} 个参数（up 的权重和偏置、down 的权重）中的 {split:,} 个：四分之一；"
          f"再加上保持完整的 LayerNorm 和 down 的偏置，共 {split + 2 * H + H:,} 个，整个块是 {total:,} 个"))
print(say(f"without f, the input's gradient is off by up to {max(off_no_f):.0%} of its largest value on some rank, "
          f"and the LayerNorm's gradients are wrong on every rank: each rank back-propagated only its quarter",
          f"没有 f 时，输入的梯度在某个 rank 上最多偏离了其最大值的 {max(off_no_f):.0%}，而且每个 rank 上 LayerNorm 的"
          "梯度都是错的：每个 rank 只反向传播了自己那四分之一"))

# %% [markdown]
# ## 2. The same with `parallelize_module`
#
# PyTorch does this split for you. A **`DeviceMesh`** names the ranks a model is split over
# (`ddplab.mesh()` makes one over the pool's 4 ranks); `parallelize_module(model, mesh, plan)`
# replaces the parameters named in the plan by **DTensors**, tensors that know how they are laid out
# over the mesh: `ColwiseParallel` gives `up`'s weight the placement `Shard(0)` (rows), and
# `RowwiseParallel` gives `down`'s weight `Shard(1)` (columns). They also insert the collectives: the
# row-split layer all-reduces its output (g), and the column-split layer's input, "replicated" on all
# ranks, gets its gradient all-reduced in backward (f).
#
# Three steps of the same block and batch, each ended by `ddplab.log`, so the timeline counts steps.

# %% [markdown] lang=zh
# ## 2. 用 `parallelize_module` 做同样的事
#
# PyTorch 可以替你做这种切分。**`DeviceMesh`**（设备网格）指明模型切分到哪些 rank 上（`ddplab.mesh()` 在进程池的 4 个 rank 上建一个）；`parallelize_module(model, mesh, plan)` 把切分方案（参数 `plan`）中点名的参数换成 **DTensor**，即知道自己怎样分布在设备网格上的张量：`ColwiseParallel` 让 `up` 的权重采用 `Shard(0)` 布局（按行），`RowwiseParallel` 让 `down` 的权重采用 `Shard(1)`（按列）。它们还会插入集合通信：按行切分的层对它的输出做 all-reduce（g），而按列切分的层的输入在所有 rank 上是“复制”的，它的梯度在反向中做 all-reduce（f）。
#
# 用同一个块、同一个批次运行三步，每一步都以 `ddplab.log` 结束，这样时间线就能数出步数。

# %%
%%ddp
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

mesh = ddplab.mesh()                           # a DeviceMesh over the 4 ranks: one dimension
tp = Block()                                   # the same weights again, split by torch this time
parallelize_module(tp, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
for step in range(3):
    x_tp = x.clone().requires_grad_()
    tp.zero_grad()
    out_tp = tp(x_tp)
    loss = out_tp.square().mean()
    loss.backward()
    ddplab.log(loss=loss, samples=B)
layout = {name: (repr(p.placements[0]), tuple(p.to_local().shape)) for name, p in tp.named_parameters()
          if name.startswith(("up", "down"))}
same_tp = {"output": close(out_tp, out_whole) and close(out_tp, out_hand),
           "input gradient": close(x_tp.grad, x_whole.grad),
           "up's gradient": close(tp.up.weight.grad.to_local(), grads_hand["up"]),
           "down's gradient": close(tp.down.weight.grad.to_local(), grads_hand["down"]),
           "norm's gradient": close(tp.norm.weight.grad, whole.norm.weight.grad)}

# %%
layout = %ddp_gather layout
same_tp = %ddp_gather same_tp
assert all(all(s.values()) for s in same_tp), same_tp
for name, (placement, shape) in layout[0].items():
    print(f"  {name:12} {placement:16} {say('local shape', '本地形状')} {shape}")
print(say("parallelize_module's block: the same output and gradients as the hand-split block and the whole block, "
          "on all 4 ranks",
          "parallelize_module 切分的块：在 4 个 rank 上，输出和梯度都与亲手切分的块以及完整的块相同"))

# %% [markdown]
# Now its timeline: on every rank, the forward and backward of each step on the upper row, and
# under them the collectives DTensor ran, each at the moment it ran.

# %% [markdown] lang=zh
# 现在看它的时间线：每个 rank 上面一行是每一步的前向和反向，下面一行是 DTensor 运行的集合通信，各自画在它实际运行的时刻。

# %%
tl = %ddp_timeline
tl

# %%
frame = tl.to_pandas()
comm = frame[frame["phase"] == "comm"]
activation = B * S * H * 4                             # bytes of the block's input (or output), float32
weights = 4 * H * H * 4                                # bytes of one of the two weight matrices

def inside(row, phase):
    """Whether a collective ran inside a forward (or backward) span of its rank."""
    spans = frame[(frame["rank"] == row["rank"]) & (frame["phase"] == phase)]
    return bool(((spans["start"] <= row["start"]) & (row["end"] <= spans["end"])).any())

for (r, step), ops in comm.groupby(["rank", "step"]):
    assert list(ops["op"]) == ["all_reduce", "all_reduce"], ops     # two collectives per step, no more
    assert list(ops["module"]) == ["down", "up"], ops                # g after down, f's backward before up
    assert inside(ops.iloc[0], "forward") and inside(ops.iloc[1], "backward"), ops
    assert (ops["bytes"] == activation).all(), ops                   # the activations, not the weights
steps = comm["step"].nunique()
forward = frame[(frame["phase"] == "forward") & (frame["rank"] == 0)]
in_forward = comm[(comm["rank"] == 0) & (comm["module"] == "down")]   # rank 0's forward all-reduces
share = (in_forward["end"] - in_forward["start"]).sum() / (forward["end"] - forward["start"]).sum()
print(say(f"every rank, each of the {steps} steps: one all-reduce inside forward, served to `down` (g), one inside "
          f"backward, served to `up` (f's backward), each {activation:,} bytes = {B} × {S} × {H} × 4, the block's "
          f"activations; one of its weight matrices is {weights:,} bytes",
          f"每个 rank 的 {steps} 步中，每一步都是：前向里一次 all-reduce，属于 `down`（g）；反向里一次，属于 `up`"
          f"（f 的反向）；每次 {activation:,} 字节 = {B} × {S} × {H} × 4，即这个块的激活；而它的一个权重矩阵是 "
          f"{weights:,} 字节"))
print(say(f"rank 0's forwards spent {share:.0%} of their time in the all-reduce (waiting for the other ranks included): "
          "the residual cannot be added, nor the next layer start, before it is done",
          f"rank 0 的前向把 {share:.0%} 的时间花在了 all-reduce 上（包括等待其他 rank）：它完成之前，既不能加上残差，"
          "下一层也不能开始"))
ddp_bytes, tp_bytes = 4 * total, 2 * activation          # per step: DDP's gradients, TP's two all-reduces
even = ddp_bytes / (2 * H * 4)                          # tokens per step at which the two are equal
print(say(f"per step, DDP would all-reduce this block's {total:,} gradients, {ddp_bytes:,} bytes; tensor parallelism "
          f"all-reduces 2 × {activation:,} = {tp_bytes:,} bytes of activations for its {B * S} tokens; the two are "
          f"equal at {even:,.0f} tokens per step, and tensor parallelism's grow with the tokens beyond that",
          f"每一步，DDP 要对这个块的 {total:,} 个梯度做 all-reduce，即 {ddp_bytes:,} 字节；张量并行为它的 {B * S} 个词元"
          f"对激活做 all-reduce，2 × {activation:,} = {tp_bytes:,} 字节；每步 {even:,.0f} 个词元时两者相等，超过之后"
          "张量并行的字节数随词元数继续增长"))

# %% [markdown]
# The collectives of tensor parallelism move **activations**: their size is batch × tokens × H,
# whatever the size of the weights. The weights never travel; each rank keeps its slice and
# computes with it. Where a collective runs, the next computation needs its result: the forward
# all-reduce sits between the block's matmuls and the residual, and the backward one between the
# block's backward and the layers before it. There is no work of the same layer to hide it under, as
# DDP hides its bucket all-reduces under the backward of earlier layers (lesson 12).
#
# **A common claim / what actually happens.** A common claim: tensor parallelism cuts communication,
# since no rank needs the whole model. What actually happens: it *adds* communication. DDP
# all-reduces each gradient once per step, the model's size in bytes, in buckets it can overlap with
# backward. Tensor parallelism all-reduces the activations of every block twice per step (once in
# forward, once in backward), and each of them stops the rank until it is done. For this block the
# two are equal at about 4H tokens per step (the figures are printed above), and real training runs
# tens of thousands of tokens per step through every block. What tensor parallelism cuts is each
# rank's share of the weights (their gradients and optimizer state too) and of the matmuls' work.
# That is why it runs over the fastest links there are, between the GPUs of one machine.

# %% [markdown] lang=zh
# 张量并行的集合通信搬运的是**激活**：它的大小是批大小 × 词元数 × H，与权重有多大无关。权重从不传输；每个 rank 保留自己的那一片并用它计算。集合通信在哪里运行，下一步计算就需要它的结果：前向的 all-reduce 夹在块的矩阵乘法和残差之间，反向的 all-reduce 夹在块的反向和它前面各层之间。同一层里没有别的计算可以把它藏起来，不像 DDP 可以把桶的 all-reduce 藏在前面各层的反向计算之下（第 12 课）。
#
# **常见说法 / 实际情况。** 一种常见的说法是：张量并行减少了通信，因为没有哪个 rank 需要整个模型。实际情况是：它*增加*了通信。DDP 每一步对每个梯度做一次 all-reduce，字节数等于模型的大小，而且分成桶，可以与反向计算重叠。张量并行每一步要对每个块的激活做两次 all-reduce（前向一次，反向一次），每一次都让 rank 停下来，直到它完成。对这个块来说，每步大约 4H 个词元时两者相等（上面打印了具体数字），而真实的训练每一步都有数万个词元流过每个块。张量并行减少的是每个 rank 分到的权重（以及它们的梯度和优化器状态）和矩阵乘法的计算量。所以它运行在现有最快的连接上，即同一台机器内的各个 GPU 之间。

# %% [markdown]
# ## 3. Sequence parallelism
#
# In the tensor-parallel block every rank still runs the LayerNorm, the residual and anything else
# outside the two matmuls on the **whole** activations, the same work four times over, and keeps
# those whole activations for backward. **Sequence parallelism** splits that part by tokens: each
# rank normalizes a quarter of every sequence. Before the column-split layer, which needs every
# token, an **all-gather** assembles the tokens; after the row-split layer, a **reduce-scatter**
# sums the partial outputs *and* leaves each rank only its quarter of the tokens. In the plan:
# `SequenceParallel()` on the LayerNorm, and the two Linears told that their input, and their
# output, are split on dimension 1, the tokens (`Shard(1)`).
#
# Each rank now gets only its own quarter of the tokens as input and returns its quarter of the
# output; the loss is each rank's share of the mean, so the four add up to the whole loss.

# %% [markdown] lang=zh
# ## 3. 序列并行
#
# 在张量并行的块中，每个 rank 仍然在**完整的**激活上运行 LayerNorm、残差连接以及两个矩阵乘法之外的其他一切，同样的计算做了四遍，还要为反向保存这些完整的激活。**序列并行**把这一部分按词元切分：每个 rank 对每个序列的四分之一做归一化。在需要所有词元的按列切分的层之前，一次 **all-gather** 把各个词元收集齐；在按行切分的层之后，一次 **reduce-scatter** 把部分输出加起来，*同时*只给每个 rank 留下它那四分之一的词元。在切分方案中：对 LayerNorm 用 `SequenceParallel()`，并告诉两个 Linear：它们的输入和输出按第 1 维（词元）切分（`Shard(1)`）。
#
# 现在每个 rank 的输入只是它自己那四分之一的词元，输出也只是它那四分之一；损失是每个 rank 分担的那一份平均值，四份加起来就是整个损失。

# %%
%%ddp
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import SequenceParallel

sp = Block()
parallelize_module(sp, mesh, {"norm": SequenceParallel(),                          # LayerNorm on this rank's tokens
                              "up": ColwiseParallel(input_layouts=Shard(1)),       # all-gather the tokens first
                              "down": RowwiseParallel(output_layouts=Shard(1))})   # reduce-scatter them after
tokens = slice(rank * S // world_size, (rank + 1) * S // world_size)   # this rank's quarter of every sequence
for step in range(3):
    x_sp = x[:, tokens].clone().requires_grad_()
    sp.zero_grad()
    out_sp = sp(x_sp)                                   # (B, S/4, H): this rank's tokens only
    loss = out_sp.square().sum() / out_whole.numel()    # this rank's share of the mean
    loss.backward()
    ddplab.log(samples=B)

# %%
tl_sp = %ddp_timeline
comm_sp = tl_sp.to_pandas()
comm_sp = comm_sp[comm_sp["phase"] == "comm"]
n = 4
for (r, step), ops in comm_sp.groupby(["rank", "step"]):
    assert list(ops["op"]) == ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"], ops
    assert list(ops["bytes"]) == [activation] * 4, ops                                # (each the whole tensor)
    assert list(ops["module"]) == ["up", "down", "down", "up"], ops                   # forward, then backward
print(say(f"every rank, each step: in forward an all-gather of the tokens for up (each rank gives its quarter, "
          f"{activation // n:,} bytes, and gets all {activation:,}), then a reduce-scatter of down's partial outputs "
          f"({activation:,} bytes in, a quarter of the sums back); in backward the same two the other way round: an "
          f"all-gather of the gradient of down's output, a reduce-scatter of up's input gradient",
          f"每个 rank 的每一步：前向中先为 up 对词元做一次 all-gather（每个 rank 给出自己的四分之一，{activation // n:,} "
          f"字节，拿回全部 {activation:,} 字节），再对 down 的部分输出做一次 reduce-scatter（放进 {activation:,} 字节，"
          f"拿回四分之一的和）；反向中方向相反的同样两次：对 down 的输出梯度做 all-gather，对 up 的输入梯度做 "
          f"reduce-scatter"))

# %% [markdown]
# A span's `bytes` is the collective's size, the whole tensor it works on: for an all-gather, what
# every rank has at the end (all the tokens); for a reduce-scatter, the whole tensor each rank puts
# in, of which it gets a quarter back, summed. To compare with the all-reduce, count what each rank
# **sends** when the collective runs as a ring (lesson 12; NCCL's algorithm, and the one lesson 13
# builds): an all-reduce of *b* bytes is a reduce-scatter followed by an all-gather, 2(N−1)/N·*b*; a
# reduce-scatter alone sends (N−1)/N·*b*, and so does an all-gather of *b* bytes (each rank passes on
# the N−1 pieces that are not its own). gloo does not run its reduce-scatter as a ring, though: lesson
# 19 measured it writing as much as a whole all-reduce. After the ring's counts, the pool measures what
# the two blocks really send here.

# %% [markdown] lang=zh
# 时间段的 `bytes` 是这个集合通信的大小，即它处理的整个张量：对 all-gather 来说，是结束时每个 rank 都拥有的全部内容（所有词元）；对 reduce-scatter 来说，是每个 rank 放进去的整个张量，它只拿回其中求过和的四分之一。要和 all-reduce 比较，就数一数集合通信以环的方式运行时每个 rank **发送**多少字节（第 12 课；这是 NCCL 的算法，也是第 13 课亲手实现的算法）：对 *b* 字节做 all-reduce，就是先 reduce-scatter 再 all-gather，发送 2(N−1)/N·*b*；单独的 reduce-scatter 发送 (N−1)/N·*b*，对 *b* 字节做 all-gather 也一样（每个 rank 转发不属于自己的 N−1 片）。不过 gloo 并不以环的方式运行 reduce-scatter：第 19 课测得它写出的字节数与一次完整的 all-reduce 一样多。先算出环的计数，然后在进程池上测量这两个块在这里实际发送了多少。

# %%
def ring_sent(op, nbytes, n=4):
    """Bytes one rank sends in a ring collective called with a tensor of nbytes (lesson 12)."""
    return {"all_reduce": 2 * (n - 1) / n * nbytes, "reduce_scatter": (n - 1) / n * nbytes,
            "all_gather": (n - 1) / n * nbytes}[op]

def sent_per_step(comm):
    sent = comm.assign(sent=[ring_sent(o, b) for o, b in zip(comm["op"], comm["bytes"])])
    per = sent.groupby(["rank", "step"])["sent"].sum()
    assert per.nunique() == 1, per                     # the same on every rank, every step
    return per.iloc[0]

sent_tp, sent_sp = sent_per_step(comm), sent_per_step(comm_sp)
assert sent_tp == sent_sp == 2 * 2 * 3 / 4 * activation
print(say(f"sent by each rank per step on a ring: tensor parallel {sent_tp:,.0f} bytes (2 all-reduces), sequence "
          f"parallel {sent_sp:,.0f} bytes (2 all-gathers + 2 reduce-scatters): the same",
          f"环形算法下每个 rank 每步发送的字节数：张量并行 {sent_tp:,.0f} 字节（2 次 all-reduce），序列并行 "
          f"{sent_sp:,.0f} 字节（2 次 all-gather + 2 次 reduce-scatter）：完全相同"))

# %% [markdown]
# That is the ring. Now this pool's gloo. The next cell runs one more step of each block, the same
# forward, loss and backward as in parts 2 and 3 (the gradients stay those of one step), and counts the
# bytes each rank writes meanwhile (Linux's `/proc/self/io`, as in lesson 19: gloo's sockets write
# through it). It also times, with `median_seconds`, an all-reduce of the block's activations against the
# all-gather and the reduce-scatter that replace it.

# %% [markdown] lang=zh
# 这是环的情况。现在看这个进程池的 gloo。下一个单元格让每个块再运行一步，前向、损失和反向都与第 2、3 部分相同（梯度仍然是一步的梯度），并统计这期间每个 rank 写出的字节数（Linux 的 `/proc/self/io`，和第 19 课一样：gloo 的套接字通过它写出数据）。它还用 `median_seconds` 给一次对块的激活做的 all-reduce 计时，并与替换它的 all-gather 和 reduce-scatter 对比。

# %% [markdown]
# **Predict, then run.** On a ring the two blocks send the same bytes per step. On this gloo, rank 0
# writes how many times as many bytes in one step of the sequence-parallel block as in one step of the
# tensor-parallel block? Write a number: 1 means the same.

# %% [markdown] lang=zh
# **先预测，再运行。** 在环上，两个块每步发送的字节数相同。在这个 gloo 上，rank 0 在序列并行块的一步中写出的字节数，是它在张量并行块的一步中写出的多少倍？写一个数：1 表示相同。

# %%
predict("20.sp_bytes", ...)    # bytes rank 0 writes in a sequence-parallel step / in a tensor-parallel step, gloo

# %%
%%ddp
from ddplab.lessons.ranks import median_seconds, written   # written(): bytes this process wrote (/proc/self/io)

step_of = {"tp": (tp, x, lambda out: out.square().mean()),                       # part 2's step
           "sp": (sp, x[:, tokens], lambda out: out.square().sum() / out_whole.numel())}   # part 3's
wrote = {}
for name, (block, inp, loss_of) in step_of.items():
    block.zero_grad()
    inp = inp.clone().requires_grad_()
    dist.barrier()
    before = written()
    loss_of(block(inp)).backward()
    wrote[name] = written() - before if before is not None else None
act, piece = torch.ones(B * S * H), torch.empty(B * S * H // world_size)         # the block's activations
pair_time = {"all-reduce": median_seconds(lambda: dist.all_reduce(act), repeat=9, warmup=2),
             "all-gather + reduce-scatter": median_seconds(
                 lambda: (dist.all_gather_single(act, piece), dist.reduce_scatter_single(piece, act)), repeat=9, warmup=2)}

# %%
wrote = %ddp_gather wrote
pair_time = %ddp_gather pair_time
pair_time = pair_time[0]                               # (every rank returns the slowest rank's median)
ar_ms, pair_ms = (1e3 * pair_time[k] for k in ("all-reduce", "all-gather + reduce-scatter"))
gloo_tp = 2 * ring_sent("all_reduce", activation)                                      # gloo's all-reduce: a ring's
gloo_sp = 2 * (ring_sent("all_gather", activation) + ring_sent("all_reduce", activation))   # its reduce-scatter: a whole all-reduce
if wrote[0]["tp"] is not None:
    for w in wrote:                                    # every rank (and a few kB of ddplab's own)
        assert abs(w["tp"] - gloo_tp) < 0.02 * gloo_tp and abs(w["sp"] - gloo_sp) < 0.02 * gloo_sp, (w, gloo_tp, gloo_sp)
    measured = {"tp": wrote[0]["tp"], "sp": wrote[0]["sp"]}
    print(say(f"written by rank 0 in one step on this gloo: tensor parallel {measured['tp']:,} bytes, sequence parallel "
              f"{measured['sp']:,} bytes, {measured['sp'] / measured['tp']:.2f} times as much (on a ring: {sent_sp:,.0f} "
              "bytes each)",
              f"在这个 gloo 上，rank 0 一步写出的字节数：张量并行 {measured['tp']:,} 字节，序列并行 {measured['sp']:,} 字节，"
              f"是前者的 {measured['sp'] / measured['tp']:.2f} 倍（在环上：两者都是 {sent_sp:,.0f} 字节）"))
    reveal("20.sp_bytes", float(measured["sp"] / measured["tp"]), unit=say("× tensor parallel's bytes", "× 张量并行的字节数"))
else:
    measured = None
    print(say("This system has no /proc/self/io: only the times are measured.",
              "这个系统没有 /proc/self/io：只测量耗时。"))
print(say(f"one all-reduce of the activations ({activation:,} bytes): {ar_ms:.2f} ms; the all-gather and the "
          f"reduce-scatter that replace it: {pair_ms:.2f} ms, {pair_ms / ar_ms:.2f} times as long (medians, slowest rank)",
          f"对激活（{activation:,} 字节）做一次 all-reduce：{ar_ms:.2f} ms；替换它的 all-gather 和 reduce-scatter："
          f"{pair_ms:.2f} ms，是前者的 {pair_ms / ar_ms:.2f} 倍（中位数，最慢的 rank）"))

# %% [markdown]
# So sequence parallelism sends the same bytes as tensor parallelism on a ring, and more on this gloo
# (the ratio printed above): each of its reduce-scatters is a whole all-reduce, and its all-gathers come
# on top. The times printed with them say what that costs on this machine. What sequence parallelism
# buys is memory. Autograd keeps, during forward, the
# tensors each operation will need in backward: the **activations** a rank holds until backward. A
# `saved_tensors_hooks` pair sees each of them as it is kept; the cell below adds up their bytes by
# the block's layer (each tensor once, the parameters left out) for the tensor-parallel block on the
# whole batch and the sequence-parallel one on a quarter of the tokens, and checks the
# sequence-parallel block's output and gradients against the whole block's. The LayerNorm's weight
# gradient is a DTensor there too: each rank's holds only its tokens' share (`Partial`), and
# `full_tensor()` sums them (an optimizer step would do the same: a small all-reduce of 2 × H
# floats).

# %% [markdown] lang=zh
# 所以在环上，序列并行发送的字节数与张量并行相同，而在这个 gloo 上更多（比值见上面的输出）：它的每次 reduce-scatter 都是一次完整的 all-reduce，all-gather 还要另算。与之一起打印的耗时，说明了这在本机上的代价。序列并行换来的是内存。在前向中，autograd 会保存每个操作在反向中需要用到的张量：这些就是一个 rank 一直持有到反向计算时的**激活**。一对 `saved_tensors_hooks` 能看到每个被保存的张量；下面的单元格按块中的层把它们的字节数加起来（每个张量只算一次，不计参数），分别针对在整个批次上运行的张量并行块和只在四分之一词元上运行的序列并行块，并把序列并行块的输出和梯度与完整的块对照检查。在那里，LayerNorm 权重的梯度也是一个 DTensor：每个 rank 上的只包含它那些词元的那一份（`Partial`），`full_tensor()` 把它们加起来（优化器的一步也会这样做：对 2 × H 个浮点数做一次很小的 all-reduce）。

# %%
%%ddp
def kept_for_backward(model, inp):
    """Bytes autograd keeps for backward in one forward, by the block's layer that keeps them
    (each tensor once; the parameters, which a rank holds anyway, left out)."""
    def storage(t):
        with torch.no_grad():
            return (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()
    params = {storage(p).data_ptr() for p in model.parameters()}
    seen, kept, current = set(params), {}, ["norm"]
    hooks = [m.register_forward_pre_hook(lambda m, args, name=name: current.__setitem__(0, name))
             for name, m in model.named_children()]

    def pack(t):
        s = storage(t)
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            kept[current[0]] = kept.get(current[0], 0) + s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(inp)
    for h in hooks:
        h.remove()
    return kept

kept = {"tp": kept_for_backward(tp, x.clone().requires_grad_()),
        "sp": kept_for_backward(sp, x[:, tokens].clone().requires_grad_())}
same_sp = {"output": close(out_sp, out_whole[:, tokens]), "input gradient": close(x_sp.grad, x_whole.grad[:, tokens]),
           "up's gradient": close(sp.up.weight.grad.to_local(), grads_hand["up"]),
           "down's gradient": close(sp.down.weight.grad.to_local(), grads_hand["down"]),
           "norm's gradient": close(sp.norm.weight.grad.full_tensor(), whole.norm.weight.grad)}

# %%
kept = %ddp_gather kept
same_sp = %ddp_gather same_sp
assert all(all(s.values()) for s in same_sp), same_sp
assert all(k == kept[0] for k in kept)                       # the same on every rank
tp_kept, sp_kept = kept[0]["tp"], kept[0]["sp"]
assert sp_kept["norm"] * n == tp_kept["norm"]                # outside the matmuls: a quarter
matmuls = ("up", "act", "down")
assert all(sp_kept[k] == tp_kept[k] for k in matmuls)        # inside them: the same
print(say("sequence parallelism: the same output (each rank its quarter of the tokens) and gradients as the whole block",
          "序列并行：输出（每个 rank 是它那四分之一的词元）和梯度都与完整的块相同"))
for name in ("norm", *matmuls):
    print(f"  {name:5} {say('kept for backward: ', '为反向保存：')}{say('tensor parallel', '张量并行')} "
          f"{tp_kept[name] / 1024:6.0f} KiB   {say('sequence parallel', '序列并行')} {sp_kept[name] / 1024:6.0f} KiB")
print(say(f"per rank: {sum(tp_kept.values()) / 1024:.0f} KiB -> {sum(sp_kept.values()) / 1024:.0f} KiB; the "
          f"LayerNorm's share {tp_kept['norm'] / 1024:.0f} -> {sp_kept['norm'] / 1024:.0f} KiB, a quarter",
          f"每个 rank：{sum(tp_kept.values()) / 1024:.0f} KiB -> {sum(sp_kept.values()) / 1024:.0f} KiB；其中 LayerNorm "
          f"的部分 {tp_kept['norm'] / 1024:.0f} -> {sp_kept['norm'] / 1024:.0f} KiB，只剩四分之一"))
label = {"tp": say("tensor parallel", "张量并行"), "sp": say("sequence parallel", "序列并行")}
draw.bars(None, panels=[
    dict(values={f"{label[k]}\n{way}": v / 1024 for k, ring in (("tp", sent_tp), ("sp", sent_sp))
                 for way, v in ((say("ring", "环"), ring), *(((say("gloo, measured", "gloo，实测"), measured[k]),) if measured else ()))},
         ylabel=say("KiB sent by one rank per step", "每个 rank 每步发送的 KiB"),
         title=say("Communication: on a ring and on this gloo", "通信：在环上与在这个 gloo 上")),
    dict(values={f"{label[k]}\n{part}": sum(v for name, v in kept[0][k].items() if (name == "norm") == (part == "norm")) / 1024
                 for k in ("tp", "sp") for part in ("norm", say("up, GELU, down", "up、GELU、down"))},
         ylabel=say("KiB kept for backward, one rank", "每个 rank 为反向保存的 KiB"),
         title=say("Activations: the LayerNorm's drop to 1/4", "激活：LayerNorm 的降到 1/4")),
], fmt="{:.0f}")

# %% [markdown]
# Outside the matmuls, a quarter: the LayerNorm keeps its input and statistics for its quarter of
# the tokens only, and computes a quarter of the work. In a whole Transformer layer that part is more
# than one LayerNorm (two LayerNorms, and the dropout masks after attention and after the MLP), and
# it is a large share of the layer's activations: that is what sequence parallelism was made for. Inside the matmuls
# nothing changed: `up` still keeps the whole all-gathered input for its weight gradient.
# Megatron-LM goes one step further and keeps only its quarter, gathering it again in backward, one
# more all-gather to save those bytes too; DTensor's plan here does not.

# %% [markdown] lang=zh
# 在矩阵乘法之外，只剩四分之一：LayerNorm 只为它那四分之一的词元保存输入和统计量，计算量也只有四分之一。在一个完整的 Transformer 层中，这一部分不止一个 LayerNorm（有两个 LayerNorm，还有注意力和 MLP 之后的 dropout 掩码），它占这一层激活的很大一部分：序列并行正是为此而设计的。矩阵乘法内部没有变化：`up` 仍然要为它的权重梯度保存 all-gather 得到的完整输入。Megatron-LM 更进一步，只保存它那四分之一，在反向中再做一次 all-gather，多一次通信来把这些字节也省下；这里 DTensor 的切分方案没有这样做。

# %% [markdown]
# ## 4. Two dimensions: FSDP2 × tensor parallelism
#
# Tensor parallelism splits each layer over a few ranks joined by fast links; to use more ranks, you
# add **data parallelism** over another dimension. A **2D mesh** lays the ranks out in a grid:
# `ddplab.mesh(2, 2, names=("dp", "tp"))` puts them row by row, [[0, 1], [2, 3]]. `mesh["tp"]` is this
# rank's row (ranks 0 and 1 split the layers between them, and so do 2 and 3), `mesh["dp"]` its
# column (0 and 2 work on the same tensor-parallel slice of the layers and see different data, and
# so do 1 and 3).
#
# The model is two blocks. First `parallelize_module` on `mesh["tp"]` splits their matrices between
# the two ranks of a row; then `fully_shard` (FSDP2, lesson 19) on `mesh["dp"]` shards what each rank
# holds again between the two ranks of a column, and gathers it back layer by layer when it is
# needed. The two ranks of a row see the same half of the batch (8 sequences); the two rows see
# different halves. Four steps of SGD with momentum, each logged.

# %% [markdown] lang=zh
# ## 4. 两个维度：FSDP2 × 张量并行
#
# 张量并行把每一层切分到由快速连接相连的少数几个 rank 上；要用上更多的 rank，就在另一个维度上加上**数据并行**。**二维设备网格**把各个 rank 排成一个网格：`ddplab.mesh(2, 2, names=("dp", "tp"))` 把它们逐行排列为 [[0, 1], [2, 3]]。`mesh["tp"]` 是本 rank 所在的行（rank 0 和 1 之间切分各层，rank 2 和 3 也是如此），`mesh["dp"]` 是它所在的列（rank 0 和 2 负责各层张量并行切分出的同一片，看到的数据不同，rank 1 和 3 也是如此）。
#
# 模型由两个块组成。先在 `mesh["tp"]` 上用 `parallelize_module` 把它们的矩阵切分给一行中的两个 rank；再在 `mesh["dp"]` 上用 `fully_shard`（FSDP2，第 19 课）把每个 rank 持有的部分在一列的两个 rank 之间再分片一次，并在需要时逐层把它收集回来。同一行的两个 rank 看到批次中相同的一半（8 个序列）；两行看到的是不同的两半。用带动量的 SGD 训练四步，每一步都记录下来。

# %%
%%ddp
from torch.distributed.fsdp import fully_shard

STEPS = 4
mesh2 = ddplab.mesh(2, 2, names=("dp", "tp"))           # [[0, 1], [2, 3]]: rows are tp, columns dp

def two_blocks():
    return nn.Sequential(Block(seed=0), Block(seed=1))

model = two_blocks()
parallelize_module(model, mesh2["tp"], {f"{i}.{name}": style() for i in range(2)
                                        for name, style in (("up", ColwiseParallel), ("down", RowwiseParallel))})
for block in model:
    fully_shard(block, mesh=mesh2["dp"])                 # each block one FSDP unit, sharded over dp
fully_shard(model, mesh=mesh2["dp"])
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

torch.manual_seed(2)
X, Y = torch.randn(STEPS, 2 * B, S, H), torch.randn(STEPS, 2 * B, S, H)   # the same data on every rank
d = mesh2["dp"].get_local_rank()                         # which row: which half of each batch
half = slice(d * B, (d + 1) * B)
losses = []
for step in range(STEPS):
    loss = F.mse_loss(model(X[step, half]), Y[step, half])
    opt.zero_grad()
    loss.backward()
    opt.step()
    ddplab.log(loss=loss, samples=B)
    losses.append(loss.item())
groups = {"tp": mesh2["tp"].mesh.tolist(), "dp": mesh2["dp"].mesh.tolist()}

# %%
tl2 = %ddp_timeline
tl2

# %% [markdown]
# The same timeline as a table: on each rank, every collective with the module it served and the
# group it ran on, compared with the ranks of the mesh's dimensions that each rank reported.

# %% [markdown] lang=zh
# 把同一条时间线当作表格来读：每个 rank 上的每个集合通信、它服务的模块以及它运行在哪个组上，再与每个 rank 报告的设备网格各维度的 rank 对照。

# %%
frame2 = tl2.to_pandas()
comm2 = frame2[frame2["phase"] == "comm"]
calls = comm2[comm2["rank"] == 0].groupby(["group", "op", "module"]).size()           # rank 0, 4 steps
calls.index.names = [say("group", "组"), say("op", "集合通信"), say("module", "模块")]
print(calls.to_frame(say("calls", "次数")).to_string())
groups = %ddp_gather groups                       # each rank's mesh2["tp"] and mesh2["dp"], as the mesh says
assert {(label, tuple(ranks)) for label, ranks in tl2.groups} == \
    {(dim, tuple(g[dim])) for g in groups for dim in ("tp", "dp")}   # the timeline's groups: the mesh's rows and columns
for r in range(4):
    mine = comm2[comm2["rank"] == r]
    tp_ops, fsdp_ops = mine[mine["op"] == "all_reduce"], mine[mine["op"] != "all_reduce"]
    assert set(tp_ops["module"]) == {"0.up", "0.down", "1.up", "1.down"}, tp_ops     # named by the layer
    assert set(fsdp_ops["module"]) == {"0", "1"} and set(fsdp_ops["op"]) == {"all_gather", "reduce_scatter"}
    assert set(tp_ops["group"]) == {"tp"} and set(fsdp_ops["group"]) == {"dp"}, mine[["op", "module", "group"]]
    assert r in groups[r]["tp"] and r in groups[r]["dp"] and set(groups[r]["tp"]) & set(groups[r]["dp"]) == {r}
    per_step = mine.groupby("step")["op"].value_counts().unstack().iloc[-1].to_dict()
    assert per_step == {"all_gather": 4, "all_reduce": 4, "reduce_scatter": 2}, per_step
print(say(f"rank 0, each step: {per_step['all_reduce']} all-reduces on tp (with ranks {groups[0]['tp']}), one per "
          f"split layer and direction, named 0.up, 0.down, 1.up, 1.down; {per_step['all_gather']} all-gathers and "
          f"{per_step['reduce_scatter']} reduce-scatters on dp (with ranks {groups[0]['dp']}), named by FSDP unit, "
          "0 and 1",
          f"rank 0 的每一步：tp 上 {per_step['all_reduce']} 次 all-reduce（与 rank {groups[0]['tp']} 一起），每个被切分的层、"
          f"每个方向一次，名字是 0.up、0.down、1.up、1.down；dp 上 {per_step['all_gather']} 次 all-gather 和 "
          f"{per_step['reduce_scatter']} 次 reduce-scatter（与 rank {groups[0]['dp']} 一起），以 FSDP 单元命名：0 和 1"))

last = comm2[comm2["step"] == comm2["step"].max() - 1]
kinds = {"all_gather": say("all-gather (dp)", "all-gather（dp）"), "reduce_scatter": say("reduce-scatter (dp)", "reduce-scatter（dp）"),
         "all_reduce": say("all-reduce (tp)", "all-reduce（tp）")}
t0 = last["start"].min()
draw.timeline([[(s - t0, e - t0, kinds[o], m) for s, e, o, m in last[last["rank"] == r][["start", "end", "op", "module"]].values]
               for r in range(4)], kinds=list(kinds.values()), xlabel=say("seconds", "秒"),
              title=say("One step of FSDP2 × TP: each collective, labelled by the module it serves",
                        "FSDP2 × 张量并行的一步：每个集合通信，标出它服务的模块"))

# %% [markdown]
# Read each rank's row from left to right: in forward, each block's unit is first all-gathered over
# dp (FSDP2 fetches, from the other rank of this rank's column, the half of its slice stored there),
# then the block runs, and its row-split layer all-reduces over tp. In backward, the blocks come in
# reverse: gathered again, the column-split layer's input gradient all-reduced over tp, and the
# unit's gradients reduce-scattered over dp. The two dimensions never mix: a tp collective joins the
# two ranks of a row of the mesh, a dp one the two ranks of a column.
#
# Is it still the same training? Rank 0 trains the unsplit two blocks on the whole batch of 16
# sequences, with the same optimizer and data, and compares its losses and its parameters after
# four steps with the 2D model's, gathered whole with `full_tensor()` (on every rank: it is a
# collective).

# %% [markdown] lang=zh
# 从左往右看每个 rank 的那一行：前向中，每个块所在的单元先在 dp 上做 all-gather（FSDP2 从同一列的另一个 rank 取回本 rank 那一片中由对方保存的一半），然后运行这个块，它按行切分的层再在 tp 上做 all-reduce。反向中，各块按相反的顺序进行：再收集一次，在 tp 上对按列切分的层的输入梯度做 all-reduce，再在 dp 上对这个单元的梯度做 reduce-scatter。两个维度从不混在一起：tp 上的集合通信连接设备网格中同一行的两个 rank，dp 上的连接同一列的两个 rank。
#
# 这还是同一个训练吗？rank 0 用同样的优化器和数据，在 16 个序列的整个批次上训练未切分的两个块，并在四步之后把它的损失和参数与二维模型的作比较；二维模型的参数用 `full_tensor()` 收集成完整的张量（在每个 rank 上调用：它是一个集合通信）。

# %%
%%ddp
import logging
logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)  # (it warns that two
# dimensions take two all-gathers, one after the other: for a check, that does not matter)
whole_params = [p.full_tensor() for p in model.parameters()]   # gathered over both dimensions, on every rank
held_2d = sum(p.to_local().numel() for p in model.parameters())
count = sum(p.numel() for p in whole_params)
same_2d = None
if rank == 0:
    ref = two_blocks()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    ref_losses = []
    for step in range(STEPS):
        loss = F.mse_loss(ref(X[step]), Y[step])          # the whole batch of 16, unsplit, on one rank
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    same_2d = (ref_losses, all(close(p, q) for p, q in zip(whole_params, ref.parameters())))

# %%
same_2d = %ddp_gather same_2d
losses = %ddp_gather losses
held_2d = %ddp_gather held_2d
count = %ddp_gather count
ref_losses, same_params = same_2d[0]
mean_2d = [(a + b) / 2 for a, b in zip(losses[0], losses[2])]   # the two rows' halves of each batch
assert losses[0] == losses[1] and losses[2] == losses[3]        # the two ranks of a row: the same loss
assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(mean_2d, ref_losses)) and same_params, (mean_2d, ref_losses)
assert all(h < 0.26 * count[0] for h in held_2d)
print(say(f"losses of the 2D model (the mean of the two rows): {', '.join(f'{v:.4f}' for v in mean_2d)}; "
          f"of the unsplit model on the whole batch: {', '.join(f'{v:.4f}' for v in ref_losses)}; after {len(mean_2d)} "
          "steps every parameter equal",
          f"二维模型的损失（两行的平均）：{'，'.join(f'{v:.4f}' for v in mean_2d)}；未切分的模型在整个批次上的损失："
          f"{'，'.join(f'{v:.4f}' for v in ref_losses)}；{len(mean_2d)} 步之后每个参数都相同"))
print(say(f"each rank holds {held_2d[0]:,} of the {count[0]:,} parameters ({held_2d[0] / count[0]:.1%}): a half of "
          "each matrix from tp, a half of that from dp; the LayerNorms and down's biases are split by dp only",
          f"每个 rank 持有 {count[0]:,} 个参数中的 {held_2d[0]:,} 个（{held_2d[0] / count[0]:.1%}）：tp 给了每个矩阵的"
          "一半，dp 又给了这一半中的一半；LayerNorm 和 down 的偏置只按 dp 分片"))

# %% [markdown]
# ## Which split, when
#
# - **Data parallelism** (DDP, lesson 2) replicates the model and splits the batch; it sends the
#   gradients once per step, overlapped with backward.
# - **Sharded data parallelism** (FSDP2, lesson 19) splits the batch too, and stores 1/N of the
#   parameters, gradients and optimizer state on each rank; it gathers each layer's parameters when
#   it is needed, a collective of the *weights*, which it can fetch ahead of time.
# - **Pipelining** (lesson 6) splits the model between layers; it sends activations between stages
#   and leaves a bubble.
# - **Tensor parallelism** splits every layer; it sends *activations*, twice per block per step, on
#   the critical path, so it stays within a machine's fast links, in groups of 2 to 8.
#   **Sequence parallelism** comes with it: fewer activations, for the same bytes on a ring (NCCL's
#   algorithm); on gloo, whose reduce-scatter is a whole all-reduce, for more (part 3 measured how much).
#
# Large models combine them on a mesh with one dimension each: tensor parallelism inside a machine,
# FSDP (and pipelining) across machines. Lesson 12's arithmetic decides which dimension gets which
# link. Saving and loading such a model, whose every parameter is a DTensor spread over two
# dimensions, is lesson 21's subject: checkpointing.

# %% [markdown] lang=zh
# ## 什么时候用哪种切分
#
# - **数据并行**（DDP，第 2 课）复制模型、切分批次；它每一步发送一次梯度，与反向计算重叠。
# - **分片的数据并行**（FSDP2，第 19 课）同样切分批次，并在每个 rank 上只保存 1/N 的参数、梯度和优化器状态；它在需要某一层时收集这一层的参数，这是对*权重*的集合通信，可以提前取回。
# - **流水线并行**（第 6 课）在层与层之间切分模型；它在各段之间传递激活，并留下气泡。
# - **张量并行**切分每一层；它每一步对每个块传两次*激活*，而且处在关键路径上，所以它留在一台机器内部的快速连接上，每组 2 到 8 个 rank。**序列并行**随它一起使用：激活更少，在环上（NCCL 的算法）字节数相同；在 gloo 上，它的 reduce-scatter 是一次完整的 all-reduce，字节数更多（第 3 部分测出了多多少）。
#
# 大模型在一个设备网格上把它们组合起来，每种切分占一个维度：张量并行在机器内部，FSDP（以及流水线并行）跨越机器。第 12 课的算术决定哪个维度用哪种连接。保存和加载这样的模型（它的每个参数都是分布在两个维度上的 DTensor）是第 21 课的主题：检查点。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why (it never shows the answer).
#
# **20.1** Make part 2's MLP four times wider: its inner layer 16H = 4096 features instead of 4H,
# with the same batch of 8 sequences of 64 tokens and H = 256. How many bytes would the forward
# all-reduce of one step carry? Answer in bytes.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么（它从不显示答案）。
#
# **20.1** 把第 2 部分的 MLP 加宽为原来的四倍：它的中间层有 16H = 4096 个特征，而不是 4H；批次仍是 8 个序列、每个 64 个词元，H = 256。一步中前向的 all-reduce 要传多少字节？请以字节为单位回答。

# %%
answer = ...    # bytes of the forward all-reduce, inner layer 16H
check("20.1", answer, batch=B, tokens=S, hidden=H, recorded=activation)

# %% [markdown]
# **20.2** Run part 2's block on an input that needs no gradient (`x_tp = x.clone()`, as if the block
# were the model's first layer, fed with data). How many all-reduces does one forward and backward
# make on each rank? Answer with a whole number, then try it: change the cell, run it and the
# timeline's cell.

# %% [markdown] lang=zh
# **20.2** 让第 2 部分的块运行在一个不需要梯度的输入上（`x_tp = x.clone()`，就好像这个块是模型的第一层，直接读入数据）。每个 rank 上一次前向加反向要做几次 all-reduce？请写一个整数，然后试一试：改动那个单元格，运行它和时间线的单元格。

# %%
answer = ...    # all-reduces per forward + backward when the block's input needs no gradient
check("20.2", answer, recorded=len(comm) // (4 * steps))

# %% [markdown]
# **20.3** Sequence parallelism on **8** ranks instead of 4, with the same batch and block: how many
# bytes does each rank send in one forward, its all-gather and its reduce-scatter together, when both
# run as rings? Answer in bytes.

# %% [markdown] lang=zh
# **20.3** 在 **8** 个 rank（而不是 4 个）上做序列并行，批次和块都不变：两者都以环的方式运行时，每个 rank 在一次前向中（它的 all-gather 和 reduce-scatter 加在一起）发送多少字节？请以字节为单位回答。

# %%
answer = ...    # bytes one rank sends in one sequence-parallel forward, 8 ranks
check("20.3", answer, activation=activation, ranks=8)

# %% [markdown]
# **20.4** Two machines with 4 GPUs each: fast links (hundreds of GB/s) inside a machine, a slower
# network between them. You train on a 2 × 4 mesh, FSDP2 on one dimension and tensor parallelism on
# the other. How do you lay it out? Answer with a letter:
#
# - (a) tensor parallelism across the machines and FSDP2 inside each: FSDP2 moves every layer's weights
#   and gradients at every step, tensor parallelism only activations, so FSDP2 is the one that needs the
#   fast links
# - (b) tensor parallelism inside each machine and FSDP2 across them: each tensor-parallel collective holds
#   up the computation that follows it, while FSDP2 can gather a layer's weights before the layer runs
# - (c) tensor parallelism across the machines, with sequence parallelism: its all-gathers and
#   reduce-scatters send smaller messages than the all-reduces they replace, which suits a slow network
# - (d) it makes no difference: on a 2 × 4 mesh, the collectives of both dimensions cross the network
#   whichever way it is laid out

# %% [markdown] lang=zh
# **20.4** 两台机器，每台 4 个 GPU：机器内部是快速连接（每秒数百 GB），机器之间是较慢的网络。你在一个 2 × 4 的设备网格上训练，一个维度上用 FSDP2，另一个维度上用张量并行。应该怎样排布？请写一个字母：
#
# - (a) 张量并行跨越机器，FSDP2 在每台机器内部：FSDP2 每一步都要搬运每一层的权重和梯度，张量并行只搬运激活，所以需要快速连接的是 FSDP2
# - (b) 张量并行在每台机器内部，FSDP2 跨越机器：张量并行的每次集合通信都会拖住紧随其后的计算，而 FSDP2 可以在一层运行之前就收集它的权重
# - (c) 张量并行跨越机器，再加上序列并行：它的 all-gather 和 reduce-scatter 发送的消息比被替换掉的 all-reduce 小，适合慢速网络
# - (d) 怎样排布都一样：在 2 × 4 的设备网格上，无论怎样排布，两个维度的集合通信都要经过网络

# %%
answer = ...    # a, b, c or d
check("20.4", answer, tp_share=share, sp_ratio=measured["sp"] / measured["tp"] if measured else None)

# %%
%ddp_stop
