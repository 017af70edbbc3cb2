# %% [markdown]
# # Lesson 7 · Pruning, quantization and compressed gradients
#
# **In short.** A trained network carries more precision than it needs, in two places: the
# **model** you ship and the **gradients** ranks exchange while training. You train a small MLP
# with DDP, then shrink it three ways. **Pruning** sets the smallest weights to zero: the 4 ranks
# split the sparsity levels among themselves and draw accuracy against sparsity together.
# **Dynamic int8 quantization** stores the Linear weights in 8 bits instead of 32: size, accuracy
# and inference time side by side. After these two, the same model goes through PyTorch's **graph
# tools**, which shrink nothing: TorchScript (deprecated), `torch.export` and `torch.compile`, each
# measured against eager mode (file size, time to compile, time per call), and DDP trains a scripted
# model. **Compressed gradient communication** casts DDP's gradient buckets to 16 bits before the
# all-reduce: half the bytes, nearly the same training.
#
# **You will learn**
# - what `torch.nn.utils.prune` does (a mask, the smallest |w|), global vs per-layer pruning
# - why zeros alone save no bytes, and when sparse storage starts to pay
# - what dynamic int8 quantization stores (8-bit weights and a scale) and what it costs in accuracy
# - what TorchScript (deprecated), `torch.export` and `torch.compile` make of a trained model, what each costs and gains on a CPU, and which way round DDP and TorchScript go together
# - how a DDP communication hook sends 16-bit gradients, and what fp16 and bf16 keep and lose
#
# **Study time:** about 60 minutes
#
# **Needs:** a C++ compiler for the `torch.compile` part (without one, that part says so and the rest
# runs) · 4 ranks
#
# **Memory:** about 1.4 GiB at its peak, with its `torch.compile` part. In a 1 GiB session (a
# classroom hub) that part is skipped, and says so (the C++ compiler it runs takes up to 0.5 GiB
# more); the rest runs with 4 ranks in about 0.85 GiB.
#
# **You will see:** accuracy against sparsity (global and per-layer pruning), what pruning does to
# a layer (mask, zeros, saved size), float32 vs int8 size / accuracy / latency, TorchScript's
# deprecation warnings, the file size, time to get ready and time per call of the scripted, traced,
# exported and compiled model beside eager mode (and of its int8 version), DDP training a scripted
# model and `torch.jit.script(DDP(model))` failing, and loss curves and bytes sent with fp32, fp16
# and bf16 gradients.

# %% [markdown] lang=zh
# # 第 7 课 · 剪枝、量化与梯度压缩
#
# **简而言之**：训练好的网络在两个地方带着超出需要的精度：要发布的**模型**，以及训练时各 rank 之间交换的**梯度**。这一课先用 DDP 训练一个小 MLP，再用三种方法压缩它。**剪枝**把最小的权重置零：4 个 rank 分担不同的稀疏度，一起画出准确率随稀疏度变化的曲线。**动态 int8 量化**用 8 位而不是 32 位保存 Linear 层的权重：把模型大小、准确率和推理时间并排比较。在这两种方法之后，同一个模型还要经过 PyTorch 的**计算图工具**，它们什么也不压缩：TorchScript（已弃用）、`torch.export` 和 `torch.compile`，每一种都与 eager 模式对比测量（文件大小、编译时间、每次调用的时间），还要让 DDP 训练一个脚本化的模型。**梯度通信压缩**在 all-reduce 之前把 DDP 的桶转换成 16 位：字节数减半，训练几乎不受影响。
#
# **你将学到**
# - `torch.nn.utils.prune` 做了什么（掩码、最小的 |w|），全局剪枝与逐层剪枝的区别
# - 为什么仅仅有零并不省字节，稀疏存储从什么时候开始划算
# - 动态 int8 量化保存的是什么（8 位权重和一个缩放因子），准确率上要付出多少代价
# - TorchScript（已弃用）、`torch.export` 和 `torch.compile` 各自把训练好的模型变成什么，在 CPU 上各自的代价与收益，以及 DDP 和 TorchScript 该怎样搭配（谁在外层）
# - DDP 的通信钩子怎样发送 16 位梯度，fp16 和 bf16 各保留什么、丢掉什么
#
# **学习时间**：约 60 分钟
#
# **需要**：`torch.compile` 部分需要 C++ 编译器（没有时这部分会说明，其余部分照常运行）· 4 个 rank
#
# **内存**：包括 `torch.compile` 部分时峰值约 1.4 GiB。在 1 GiB 的会话（课堂用的 hub）里，这部分会被跳过，并给出说明（它调用的 C++ 编译器还要多占用多达 0.5 GiB）；其余部分用 4 个 rank 运行，约 0.85 GiB。
#
# **你将看到**：准确率随稀疏度的变化（全局剪枝与逐层剪枝），剪枝对一个层做了什么（掩码、零、保存后的大小），float32 与 int8 在大小、准确率和延迟上的对比，TorchScript 的弃用警告，脚本化、追踪、导出和编译后的模型（以及它的 int8 版本）与 eager 模式并排比较的文件大小、准备时间和每次调用的时间，DDP 训练一个脚本化的模型以及 `torch.jit.script(DDP(model))` 失败，以及使用 fp32、fp16、bf16 梯度时的损失曲线和发送的字节数。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## A model to compress
#
# 12,000 samples of `synthetic_classification` (64 features, 10 classes): 10,000 to train on, the
# last 2,000 held out as a test set no rank trains on. The model is `mlp(64, 256, 10)`: three Linear
# layers, 85 k parameters. DDP training as in lessons 2 and 3: `DistributedSampler` gives each rank
# a quarter of each epoch, in batches of 64 per rank (256 in all); 6 epochs, a few seconds.

# %% [markdown] lang=zh
# ## 一个待压缩的模型
#
# 用 `synthetic_classification` 生成 12,000 个样本（64 个特征，10 个类别）：10,000 个用于训练，最后 2,000 个留作测试集，任何 rank 都不在它上面训练。模型是 `mlp(64, 256, 10)`：三个 Linear 层，8.5 万个参数。DDP 训练方式与第 2、3 课相同：`DistributedSampler` 让每个 rank 分到每个 epoch 的四分之一，每个 rank 每批 64 个样本（合计 256 个）；训练 6 个 epoch，只需几秒钟。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from ddplab.workloads import synthetic_classification, mlp
from ddplab.lessons.ranks import param_spread
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

X, Y = synthetic_classification(n=12_000, features=64, classes=10).tensors
train = TensorDataset(X[:10_000], Y[:10_000])
X_test, Y_test = X[10_000:], Y[10_000:]            # held out: no rank trains on these

def accuracy(net):
    with torch.no_grad():
        return (net(X_test).argmax(dim=1) == Y_test).float().mean().item()

def loader(seed=0):
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return sampler, DataLoader(train, batch_size=64, sampler=sampler, drop_last=True)

model = DDP(mlp(features=64, hidden=256, classes=10, seed=0))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sampler, batches = loader()
for epoch in range(6):
    sampler.set_epoch(epoch)
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=len(x))

trained = model.module                              # the plain model inside DDP
base_accuracy, spread = accuracy(trained), param_spread(trained)
print(say(f"test accuracy {base_accuracy:.1%}, parameters differ across ranks by {spread}",
          f"测试准确率 {base_accuracy:.1%}，各 rank 的参数相差 {spread}"))

# %%
base_accuracy = %ddp_gather base_accuracy
spread = %ddp_gather spread
base_accuracy = base_accuracy[0]
assert spread == [0.0] * len(spread) and base_accuracy > 0.8
print(say(f"every rank holds the same trained model: {base_accuracy:.1%} on the 2,000 held-out samples",
          f"每个 rank 都持有同一个训练好的模型：在留出的 2,000 个样本上准确率为 {base_accuracy:.1%}"))

# %% [markdown]
# ## 1. Pruning: zero the smallest weights
#
# `torch.nn.utils.prune.l1_unstructured(layer, "weight", amount=0.9)` zeroes the 90 % of a layer's
# weights with the smallest absolute value. It does it through a *mask*: the layer keeps
# `weight_orig` and a `weight_mask`, and `weight` becomes their product; `prune.remove` makes it
# permanent (a plain `weight` with zeros in it). Two ways to choose:
#
# - **per layer:** each layer loses the same fraction;
# - **global** (`prune.global_unstructured`): the smallest weights of the whole network, wherever
#   they are, so a layer with many small weights loses more.
#
# Eight sparsity levels, two ways each: 16 pruned models. Each rank takes every 4th level
# (`amounts[rank::world_size]`), so the work is split across the 4 processes, and the notebook
# gathers the results. Each result also records the size of the saved `state_dict`, as it is
# (dense) and with the weight matrices stored as sparse tensors (`to_sparse()`).

# %% [markdown] lang=zh
# ## 1. 剪枝：把最小的权重置零
#
# `torch.nn.utils.prune.l1_unstructured(layer, "weight", amount=0.9)` 把一个层中绝对值最小的 90% 权重置零。它是通过*掩码*（mask）实现的：层里保存 `weight_orig` 和 `weight_mask`，而 `weight` 变成二者的乘积；`prune.remove` 让剪枝永久生效（得到一个含有零的普通 `weight`）。有两种选法：
#
# - **逐层：** 每一层去掉相同的比例；
# - **全局**（`prune.global_unstructured`）：在整个网络中挑出最小的那些权重，不管它们在哪一层，所以小权重多的层会被去掉更多。
#
# 8 个稀疏度，每个用两种方法：共 16 个剪枝后的模型。每个 rank 每隔 4 个取一个稀疏度（`amounts[rank::world_size]`），这样工作就分摊到 4 个进程上，再由 notebook 汇总结果。每个结果还记录了保存下来的 `state_dict` 的大小：原样保存（稠密），以及把权重矩阵存为稀疏张量（`to_sparse()`）时。

# %% [markdown]
# **Predict, then run.** Prune 90 % of the weights (global pruning) and save the `state_dict` as it
# is, dense. How large will the file be, as a fraction of the unpruned model's? (0.5 would be half
# the bytes.)

# %% [markdown] lang=zh
# **先预测，再运行。** 剪掉 90% 的权重（全局剪枝），再把 `state_dict` 原样（稠密）保存。保存下来的大小会是未剪枝模型的几分之几？（0.5 表示一半的字节数。）

# %%
predict("7.pruned_size", ...)    # saved bytes at 90 % global pruning (dense), as a fraction of the unpruned model's

# %%
%%ddp
import copy
import io
import torch.nn.utils.prune as prune

def saved_bytes(net, sparse=False):
    """Bytes of the saved state_dict; sparse=True stores the weight matrices as sparse tensors."""
    state = {k: v.to_sparse() if sparse and v.dim() == 2 else v for k, v in net.state_dict().items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getbuffer().nbytes

amounts = [0.0, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95]
results = []
for amount in amounts[rank::world_size]:            # rank 0: 0.0 and 0.7, rank 1: 0.2 and 0.8, ...
    for how in ("global", "per layer"):
        pruned = copy.deepcopy(trained)
        layers = [m for m in pruned if isinstance(m, nn.Linear)]
        if how == "global":
            prune.global_unstructured([(m, "weight") for m in layers],
                                      pruning_method=prune.L1Unstructured, amount=amount)
        else:
            for m in layers:
                prune.l1_unstructured(m, "weight", amount=amount)
        for m in layers:
            prune.remove(m, "weight")                  # permanent: weight_orig and the mask are gone
        results.append(dict(amount=amount, how=how, accuracy=accuracy(pruned),
                            zeros=[int((m.weight == 0).sum()) for m in layers],
                            sizes=[m.weight.numel() for m in layers],
                            dense=saved_bytes(pruned), sparse=saved_bytes(pruned, sparse=True)))
named = {"global": say("global", "全局"), "per layer": say("per layer", "逐层")}
print(say(", ", "，").join(f"{named[r['how']]} {r['amount']:.0%}: {r['accuracy']:.1%}" for r in results))

# %% [markdown]
# Check that pruning did what it says: after `prune.remove`, exactly the requested fraction of the
# weights is zero (per layer for per-layer pruning, over all layers for global pruning), and 0 %
# pruning changes nothing. Then the picture.

# %% [markdown] lang=zh
# 检查剪枝是否如其所说：`prune.remove` 之后，恰好有所要求比例的权重为零（逐层剪枝按每一层计算，全局剪枝按所有层合计计算），而 0% 的剪枝什么也不改变。然后画图。

# %%
results = %ddp_gather results
results = sorted((r for per_rank in results for r in per_rank), key=lambda r: r["amount"])
for r in results:
    if r["how"] == "per layer":
        assert r["zeros"] == [round(r["amount"] * n) for n in r["sizes"]], r
    else:
        assert sum(r["zeros"]) == round(r["amount"] * sum(r["sizes"])), r
assert all(r["accuracy"] == base_accuracy for r in results if r["amount"] == 0)
at = {(r["how"], r["amount"]): r["accuracy"] for r in results}
assert at["global", 0.6] > base_accuracy - 0.05        # most of the weights are not needed
share = [f"{z / n:.0%}" for z, n in zip(next(r["zeros"] for r in results if r["how"] == "global" and r["amount"] == 0.9),
                                       results[0]["sizes"])]
print(say(f"zeros exactly as requested. Global pruning at 90% removes {', '.join(share)} of layers 1, 2, 3; "
          f"accuracy at 90%: global {at['global', 0.9]:.1%}, per layer {at['per layer', 0.9]:.1%} "
          f"(unpruned {base_accuracy:.1%})",
          f"零的个数与要求完全一致。90% 的全局剪枝去掉了第 1、2、3 层各自 {'、'.join(share)} 的权重；"
          f"90% 时的准确率：全局 {at['global', 0.9]:.1%}，逐层 {at['per layer', 0.9]:.1%}（未剪枝 {base_accuracy:.1%}）"))
draw.lines({say(how, {"global": "全局", "per layer": "逐层"}[how]):
            ([100 * r["amount"] for r in results if r["how"] == how],
             [100 * r["accuracy"] for r in results if r["how"] == how]) for how in ("global", "per layer")},
           xlabel=say("weights set to zero (%)", "置零的权重（%）"), ylabel=say("test accuracy (%)", "测试准确率（%）"),
           title=say("Accuracy against sparsity (each rank pruned 2 of the 8 levels)",
                     "准确率随稀疏度的变化（每个 rank 负责 8 个稀疏度中的 2 个）"))

# %% [markdown]
# Most weights can go before accuracy suffers. Global pruning holds up longer: it takes most from
# the big 256 × 256 middle layer, whose many weights are each small, and less from the first layer
# and the small output layer, where each weight matters more (the shares are printed above).
#
# Zeros alone make the model neither smaller nor faster: the weight is still a dense tensor of the
# same size, zeros included. The gain comes from storing it sparsely (`weight.to_sparse()`), from
# compressing the file, or from *structured* pruning (`prune.ln_structured` removes whole rows,
# i.e. neurons, so the layer can be rebuilt smaller). The sizes each rank recorded:

# %% [markdown] lang=zh
# 去掉大部分权重之后，准确率才开始受到影响。全局剪枝坚持得更久：它主要从 256 × 256 的大中间层下手，这一层权重很多、每个都很小；而从第一层和小小的输出层去掉得较少，那里每个权重的作用更大（各层的比例已在上面打印出来）。
#
# 仅仅有零，并不会让模型变小或变快：权重仍然是一个同样大小的稠密张量，零也照样占位置。收益来自稀疏存储（`weight.to_sparse()`）、压缩文件，或者*结构化*剪枝（`prune.ln_structured` 去掉整行，也就是整个神经元，这样就能把层重建得更小）。各 rank 记录下的大小如下：

# %%
dense = {r["amount"]: r["dense"] for r in results if r["how"] == "global"}
sparse = {r["amount"]: r["sparse"] for r in results if r["how"] == "global"}
assert len(set(dense.values())) == 1                     # the same bytes at every sparsity, 0 % included
assert sparse[0.9] < dense[0.9] < sparse[0.0]            # sparse storage: smaller only when most entries are 0
smaller = min(a for a in sparse if sparse[a] < dense[a])
reveal("7.pruned_size", dense[0.9] / dense[0.0], unit=say("× the unpruned size", "× 未剪枝时的大小"))
print(say(f"saved state_dict: {dense[0.0] / 1e3:.0f} kB unpruned and {dense[0.9] / 1e3:.0f} kB with 90% of the "
          f"weights zero. Stored sparse: {sparse[0.9] / 1e3:.0f} kB at 90%, but {sparse[0.0] / 1e3:.0f} kB unpruned "
          f"(a sparse tensor keeps two int64 indices per non-zero); smaller than dense from {smaller:.0%} here",
          f"保存的 state_dict：未剪枝时 {dense[0.0] / 1e3:.0f} kB，90% 的权重为零时 {dense[0.9] / 1e3:.0f} kB。"
          f"存为稀疏张量：90% 时 {sparse[0.9] / 1e3:.0f} kB，未剪枝时却是 {sparse[0.0] / 1e3:.0f} kB"
          f"（稀疏张量为每个非零元素保存两个 int64 索引）；在这里从 {smaller:.0%} 起才比稠密存储小"))

# %% [markdown]
# **A common claim / what actually happens.** A common claim: TorchScript and XLA are PyTorch's
# tools for sparse training. What actually happens: both are **compilers**, and neither sets a
# single weight to zero. TorchScript (`torch.jit`, now deprecated: in the torch this lesson needs,
# `torch.jit.script` and `torch.jit.trace` warn that they are deprecated and point to `torch.compile`
# and `torch.export`) turns a model into a graph that can run without Python; XLA
# compiles such graphs for accelerators like TPUs (in PyTorch through the separate `torch_xla`
# package). Sparsity comes from **pruning**, which is what this section did: the zeros were counted
# above, exactly as many as requested. And zeros by themselves save nothing: the sizes just printed
# show the 90 %-pruned model saves to as many bytes as the unpruned one, until the weights are stored
# in a sparse format (or the layers rebuilt smaller). Section 3 runs TorchScript on this very model,
# beside its successors `torch.export` and `torch.compile`, and measures what each gives; XLA itself
# runs in [lesson 16](16_other_frameworks.ipynb), through JAX.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：TorchScript 和 XLA 是 PyTorch 用来做稀疏训练的工具。实际情况是：两者都是**编译器**，都不会把任何一个权重置零。TorchScript（`torch.jit`，现已弃用：在这一课所需的 torch 版本中，`torch.jit.script` 和 `torch.jit.trace` 会发出警告，说它们已被弃用，并建议改用 `torch.compile` 和 `torch.export`）把模型转换成一个不依赖 Python 也能运行的计算图；XLA 为 TPU 之类的加速器编译这样的计算图（在 PyTorch 中通过独立的 `torch_xla` 包使用）。稀疏性来自**剪枝**，也就是这一节所做的事：上面已经数过零的个数，与要求的完全一致。而零本身什么也节省不了：刚才打印出的大小表明，剪掉 90% 的模型保存下来的字节数与未剪枝的模型相同，除非把权重存成稀疏格式（或者把各层重建得更小）。第 3 节会在这个模型上实际运行 TorchScript，并与它的继任者 `torch.export` 和 `torch.compile` 并排测量各自的效果；XLA 本身则在[第 16 课](16_other_frameworks.ipynb)里通过 JAX 真正运行。

# %% [markdown]
# ### What `l1_unstructured` does, up close
#
# One layer, pruned by half, looked at before `prune.remove`: which tensors the layer holds, how
# `weight` is made, how many entries are zero, and where the cut falls. Rank 0 does it alone. For
# comparison, the cell also applies a rule sometimes given for pruning, `W − α·sign(|∇W|)`, to the
# same layer's last gradient, and counts the zeros it makes.

# %% [markdown] lang=zh
# ### 近距离看 `l1_unstructured` 做了什么
#
# 取一个层，剪掉一半，在 `prune.remove` 之前观察它：这个层持有哪些张量，`weight` 是怎样得到的，有多少个元素为零，以及切分点落在哪里。这一步只由 rank 0 来做。作为对比，这个单元格还把有时被当作剪枝方法的一条规则 `W − α·sign(|∇W|)` 应用到同一层最后一步的梯度上，并数一数它产生了多少个零。

# %%
%%ddp --ranks 0
layer = copy.deepcopy(trained[2])                   # the 256 × 256 middle layer
w = layer.weight.detach().clone()
prune.l1_unstructured(layer, "weight", amount=0.5)
mask = layer.weight_mask
rule = w - 0.01 * torch.sign(trained[2].weight.grad.abs())   # W − α·sign(|∇W|), α = 0.01
up_close = dict(
    parameters=[name for name, _ in layer.named_parameters()],   # weight_orig (trained), bias
    buffers=[name for name, _ in layer.named_buffers()],         # weight_mask (0 or 1)
    product=torch.equal(layer.weight, layer.weight_orig * mask),
    zeros=int((layer.weight == 0).sum()), size=w.numel(),
    largest_pruned=w.abs()[mask == 0].max().item(), smallest_kept=w.abs()[mask == 1].min().item(),
    mean_abs=w.abs().mean().item(), rule_zeros=int((rule == 0).sum()))

# %%
up_close = %ddp_gather up_close if rank == 0 else None
u = up_close[0]
assert u["parameters"] == ["bias", "weight_orig"] and u["buffers"] == ["weight_mask"] and u["product"]
assert u["zeros"] == round(0.5 * u["size"])                  # exactly `amount` of the entries
assert u["largest_pruned"] <= u["smallest_kept"]             # the smallest |w| went, whatever their value
assert u["rule_zeros"] == 0
print(say(f"the layer now trains weight_orig and holds weight_mask; weight == weight_orig * weight_mask: "
          f"{u['product']}. Zeros: {u['zeros']:,} of {u['size']:,}, exactly half. Every pruned |w| "
          f"(the largest {u['largest_pruned']:.6f}) is at most every kept |w| (the smallest "
          f"{u['smallest_kept']:.6f}): the cut is wherever the median |w| lies. The layer's mean |w| is "
          f"{u['mean_abs']:.4f}, so a rule zeroing tensors whose mean |w| is under 0.01 would "
          f"{'remove nothing here' if u['mean_abs'] >= 0.01 else 'zero the whole layer'}. "
          f"W − α·sign(|∇W|) made {u['rule_zeros']} zeros",
          f"这个层现在训练的是 weight_orig，并持有 weight_mask；weight == weight_orig * weight_mask："
          f"{u['product']}。零的个数：{u['size']:,} 个中的 {u['zeros']:,} 个，恰好一半。每个被剪掉的 |w|"
          f"（最大为 {u['largest_pruned']:.6f}）都不大于每个保留下来的 |w|（最小为 {u['smallest_kept']:.6f}）："
          f"切分点就落在 |w| 的中位数所在之处。这一层 |w| 的平均值为 {u['mean_abs']:.4f}，所以“平均 |w| 低于 0.01 "
          f"就把整个张量置零”的规则在这里{'什么也不会去掉' if u['mean_abs'] >= 0.01 else '会把整层置零'}。"
          f"W − α·sign(|∇W|) 产生了 {u['rule_zeros']} 个零"))

# %% [markdown]
# **A common claim / what actually happens.** A common claim about how PyTorch prunes: normalise
# the gradients, take their absolute values, keep the weights whose gradient is large and zero the
# others, with the update `W_new = W_old − α·sign(|∇W_old|)`; or zero a whole parameter tensor when
# its mean absolute value falls below a fixed threshold such as 0.01. What actually happens:
# `prune.l1_unstructured(module, "weight", amount)` never looks at a gradient. It ranks the entries
# of the weight by |w| and masks exactly `amount` of them (a fraction, or a count if you pass an
# int), the smallest, one entry at a time; there is no fixed threshold, the cut falls wherever the
# `amount`-th smallest |w| lies, and a tensor is never zeroed as a whole (unless `amount=1.0`). The
# run above shows it: `weight` is now `weight_orig * weight_mask`, recomputed before every forward,
# while the optimizer keeps training `weight_orig`; exactly half the entries are zero; and every
# pruned |w| lies at or below every kept one, while the printed mean |w| says what the fixed-threshold
# rule would have done to this layer. The quoted update is not pruning at all: `sign(|g|)` is 1
# wherever the gradient is not zero, so it subtracts α from nearly every weight, and it made no zeros
# on this layer. (To prune by another score, such as one computed from gradients, pass it yourself as
# `importance_scores`.)

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 关于 PyTorch 如何剪枝，一种常见的说法是：先对梯度做归一化，取绝对值，保留梯度大的权重、把其余的置零，更新公式为 `W_new = W_old − α·sign(|∇W_old|)`；或者当一个参数张量的平均绝对值低于某个固定阈值（例如 0.01）时，把整个张量置零。实际情况是：`prune.l1_unstructured(module, "weight", amount)` 从来不看梯度。它按 |w| 对权重的各个元素排序，逐个元素地屏蔽其中最小的、恰好 `amount` 个（传入小数表示比例，传入整数表示个数）；没有固定的阈值，切分点落在第 `amount` 小的 |w| 所在之处，而且永远不会把整个张量置零（除非 `amount=1.0`）。上面的运行说明了这一点：`weight` 现在是 `weight_orig * weight_mask`，在每次前向计算之前重新计算，而优化器继续训练的是 `weight_orig`；恰好一半的元素为零；每个被剪掉的 |w| 都不大于每个保留下来的 |w|；打印出的平均 |w| 则说明了那条固定阈值规则会对这一层做什么。上面引用的更新公式根本不是剪枝：只要梯度不为零，`sign(|g|)` 就等于 1，所以它只是从几乎每个权重中减去 α，在这一层上它一个零也没有产生。（如果想按别的分数剪枝，例如由梯度算出的分数，需要自己把它作为 `importance_scores` 传进去。）

# %% [markdown]
# ## 2. Dynamic int8 quantization
#
# `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)` replaces each
# Linear layer by one that stores its weights as 8-bit integers (plus a scale) and, at inference,
# quantizes each batch of activations on the fly ("dynamic"). It still exists and works in torch
# 2.13, but torch marks the whole `torch.ao.quantization` module deprecated in favour of **torchao**,
# a separate package (`torchao.quantization.quantize_` with `Int8DynamicActivationInt8WeightConfig`);
# the cell below silences that warning (which announces its removal "in 2.10", a date that has
# passed without it).
#
# This runs on rank 0 only (`%%ddp --ranks 0`): one model to convert, and the 3 other ranks stay
# idle so they do not compete with the timing for this machine's cores. Size is the bytes of the
# saved `state_dict`; latency the time to classify the 2,000 test samples.

# %% [markdown] lang=zh
# ## 2. 动态 int8 量化
#
# `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)` 把每个 Linear 层替换成一个用 8 位整数（外加一个缩放因子）保存权重的层，并在推理时对每个批次的激活值即时量化（即“动态”）。它在 torch 2.13 中仍然存在并且可用，但 torch 已把整个 `torch.ao.quantization` 模块标记为弃用，建议改用独立的 **torchao** 包（`torchao.quantization.quantize_` 配合 `Int8DynamicActivationInt8WeightConfig`）；下面的单元格屏蔽了这条警告。
#
# 这一步只在 rank 0 上运行（`%%ddp --ranks 0`）：只需转换一个模型，其余 3 个 rank 保持空闲，以免与计时争抢这台机器的 CPU 核心。大小指保存下来的 `state_dict` 的字节数；延迟指对 2,000 个测试样本做分类所用的时间。

# %%
%%ddp --ranks 0
import statistics
import time
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)   # "torch.ao.quantization is deprecated"
    warnings.simplefilter("ignore", UserWarning)          # quantized tensor types, same reason
    int8 = torch.ao.quantization.quantize_dynamic(trained, {nn.Linear}, dtype=torch.qint8)

def latency(net, repeat=30):
    """Median seconds to classify the 2,000 test samples (the median shrugs off other programs)."""
    times = []
    with torch.no_grad():
        net(X_test)                                       # warm-up
        for _ in range(repeat):
            tic = time.perf_counter()
            net(X_test)
            times.append(time.perf_counter() - tic)
    return statistics.median(times)

quantized = {name: dict(bytes=saved_bytes(net), accuracy=accuracy(net), seconds=latency(net))
             for name, net in (("float32", trained), ("int8", int8))}
first = dict(scale=int8[0].weight().q_scale(), largest=trained[0].weight.abs().max().item())   # layer 1
print(int8)

# %%
# %ddp_gather evaluates an expression on every rank: ranks 1-3 have no `quantized`, so they give None
quantized = %ddp_gather quantized if rank == 0 else None
quantized = quantized[0]
first = %ddp_gather first if rank == 0 else None
first = first[0]
f32, i8 = quantized["float32"], quantized["int8"]
assert i8["bytes"] < 0.35 * f32["bytes"]                  # 1 byte a weight instead of 4 (biases stay float)
assert abs(i8["accuracy"] - f32["accuracy"]) < 0.02
print(say(f"int8: {i8['bytes'] / 1e3:.0f} kB instead of {f32['bytes'] / 1e3:.0f} kB "
          f"({f32['bytes'] / i8['bytes']:.1f}x smaller), accuracy {i8['accuracy']:.1%} vs {f32['accuracy']:.1%}, "
          f"{1e3 * i8['seconds']:.1f} ms vs {1e3 * f32['seconds']:.1f} ms for 2,000 samples "
          f"({f32['seconds'] / i8['seconds']:.1f}x the speed)",
          f"int8：{i8['bytes'] / 1e3:.0f} kB，而 float32 为 {f32['bytes'] / 1e3:.0f} kB"
          f"（为 float32 的 1/{f32['bytes'] / i8['bytes']:.1f}），准确率 {i8['accuracy']:.1%}，float32 为 {f32['accuracy']:.1%}；"
          f"2,000 个样本用时 {1e3 * i8['seconds']:.1f} 毫秒，float32 为 {1e3 * f32['seconds']:.1f} 毫秒"
          f"（速度是 float32 的 {f32['seconds'] / i8['seconds']:.1f} 倍）"))
draw.bars(None, panels=[
    dict(values={k: v["bytes"] / 1e3 for k, v in quantized.items()}, ylabel="kB",
         title=say("Saved size", "保存后的大小")),
    dict(values={k: 100 * v["accuracy"] for k, v in quantized.items()}, ylabel="%",
         title=say("Test accuracy", "测试准确率")),
    dict(values={k: 1e3 * v["seconds"] for k, v in quantized.items()}, ylabel=say("ms", "毫秒"),
         title=say("Time for 2,000 samples", "2000 个样本的推理时间"))])

# %% [markdown]
# A little over a quarter of the size (the biases and the scales stay float) at nearly the same
# accuracy. The speed
# depends on the CPU (its int8 instructions) and on the layer sizes, since each batch of activations
# must be quantized first: the numbers above are this machine's. Dynamic quantization suits Linear
# and LSTM layers on CPU; convolutions need *static* quantization, which also calibrates the
# activations' range on sample data.

# %% [markdown] lang=zh
# 模型只有原来的四分之一多一点（偏置和缩放因子仍是浮点数），准确率几乎不变。速度取决于 CPU（它的 int8 指令）和层的大小，因为每个批次的激活值都要先量化：上面的数字是这台机器上测得的。动态量化适用于 CPU 上的 Linear 层和 LSTM 层；卷积层需要*静态*量化，它还要在样本数据上校准激活值的范围。

# %% [markdown]
# ## 3. The model as a graph: TorchScript, `torch.export` and `torch.compile`
#
# Pruning and quantization change the numbers a model holds. PyTorch's three graph tools change
# none of them: each captures what `forward` computes as a graph, for a different purpose.
#
# - **TorchScript** (`torch.jit.script`, `torch.jit.trace`) turns the model into a program that runs
#   without Python: `script` compiles the source of `forward` (its `if`s and loops included), `trace`
#   runs it once on an example input and records the operations it saw. `torch.jit.save` writes the
#   weights and that code into one `.pt` file, which a C++ program can load and run through libtorch.
#   **It is deprecated**: in torch 2.13 each of these calls warns, pointing to `torch.compile` and
#   `torch.export`, and TorchScript gets no new features.
# - **`torch.export`** captures the whole model ahead of time into an `ExportedProgram`: a graph of
#   ATen operators, the parameters, and the input shapes it accepts (here the batch dimension is
#   declared free with `torch.export.Dim`). `torch.export.save` writes it as a `.pt2` archive and
#   `torch.export.load` reads it back; AOTInductor (`torch._inductor.aoti_compile_and_package`) can
#   compile it further into a library that a C++ program runs without Python (not done here: it is a
#   compile of its own). It is TorchScript's successor for deployment.
# - **`torch.compile`** compiles just in time, inside the running Python program: the first call
#   traces `forward` (TorchDynamo) and hands the graph to Inductor, which on a CPU writes C++ code
#   (with OpenMP) and compiles it with gcc. That takes seconds, and is paid again for a new input
#   shape; later calls run the compiled code. It makes no file of its own: the compiled model uses
#   the same parameters as the eager one, and the generated code goes to a cache on disk (torch's
#   default is `/tmp/torchinductor_<user>`; the run prints the folder ddplab's ranks use), which
#   makes the next run's compile shorter.
#
# Rank 0 alone does it all (the 3 other ranks stay idle, as for the int8 timing), for the trained
# model and for its int8 version from section 2: it makes each form, timing how long that takes;
# saves each to a file and measures the file; checks that each gives eager mode's outputs; and times
# two batch sizes, one batch of 64 samples and the 2,000 test samples. Each form's first call at each
# size is timed apart (for `torch.compile`, that is where it compiles). Then come 200 rounds (30 with
# 2,000 samples) that each time every form once, in turn, so whatever else the machine does falls on
# all of them alike; the median is kept. Everything runs under `torch.inference_mode()`, the way to
# run inference. The dashboard's timeline is switched off meanwhile (`%ddp_timeline --off`): it
# hooks every module call, microseconds that eager mode would pay here and TorchScript would not.

# %% [markdown] lang=zh
# ## 3. 把模型变成计算图：TorchScript、`torch.export` 与 `torch.compile`
#
# 剪枝和量化改变的是模型里保存的数。PyTorch 的三个计算图工具一个数也不改：它们各自把 `forward` 所做的计算捕获成一张计算图，用途各不相同。
#
# - **TorchScript**（`torch.jit.script`、`torch.jit.trace`）把模型变成一个不依赖 Python 也能运行的程序：`script` 编译 `forward` 的源代码（连同其中的 `if` 和循环），`trace` 则用一个示例输入把模型运行一次，记录下它执行过的运算。`torch.jit.save` 把权重和这段代码写进一个 `.pt` 文件，C++ 程序可以通过 libtorch 加载并运行它。**它已被弃用**：在 torch 2.13 中，这些调用每一个都会发出警告，建议改用 `torch.compile` 和 `torch.export`；TorchScript 也不再增加新功能。
# - **`torch.export`** 提前（ahead of time）把整个模型捕获成一个 `ExportedProgram`：一张由 ATen 运算组成的计算图、模型的参数，以及它接受的输入形状（这里用 `torch.export.Dim` 声明批次这一维的大小可变）。`torch.export.save` 把它写成一个 `.pt2` 归档文件，`torch.export.load` 再把它读回来；AOTInductor（`torch._inductor.aoti_compile_and_package`）还能把它进一步编译成一个库，由 C++ 程序在没有 Python 的情况下运行（这里不做：那是另一次单独的编译）。它是 TorchScript 在部署方面的继任者。
# - **`torch.compile`** 在运行中的 Python 程序里即时（just in time）编译：第一次调用时，它追踪 `forward`（TorchDynamo），把计算图交给 Inductor；在 CPU 上，Inductor 生成 C++ 代码（带 OpenMP），再用 gcc 编译。这要花几秒钟，遇到新的输入形状还要再付一次；之后的调用运行的就是编译好的代码。它不产生自己的文件：编译后的模型与 eager 模型使用同样的参数，生成的代码放在磁盘上的缓存里（torch 默认用 `/tmp/torchinductor_<user>`；ddplab 的 rank 用的文件夹会在运行中打印出来），下一次运行时编译会更快。
#
# 这些工作全部只由 rank 0 来做（另外 3 个 rank 保持空闲，和 int8 计时时一样），对象是训练好的模型和第 2 节得到的 int8 版本：它生成每一种形式并记录所用的时间；把每一种保存成文件并测量文件大小；检查每一种给出的输出都与 eager 模式相同；再测两种批大小下的时间：一个 64 个样本的批次，以及 2,000 个测试样本。每种形式在每种批大小下的第一次调用单独计时（对 `torch.compile` 来说，编译就发生在这里）。然后是 200 轮（2,000 个样本时为 30 轮），每一轮把每种形式依次各运行一次并计时，这样机器上其他程序造成的干扰会同样落在每一种形式上；最后取中位数。全部在 `torch.inference_mode()` 下运行，推理本来就该这样运行。在此期间关掉仪表盘的时间线（`%ddp_timeline --off`）：它在每次模块调用前后都挂了钩子，这几微秒 eager 模式在这里要付，TorchScript 却不用付。

# %%
%ddp_timeline --off

# %%
%%ddp --ranks 0
import os
import tempfile
import zipfile
from torch._dynamo.utils import counters              # what torch.compile did: graphs, Inductor's cache
from ddplab.lessons import no_room_to_compile

skipped = no_room_to_compile()     # why not, in a session too small for Inductor's gcc (a hub's 1 GiB); else None

example = X_test[:64].clone()      # the example input: one batch, a tensor of its own (a slice is a view of all of X)
make_seconds, forms = {}, {"eager": trained}

def timed(name, make):
    tic = time.perf_counter()
    made = make()
    make_seconds[name] = time.perf_counter() - tic
    return made

with warnings.catch_warnings(record=True) as caught:   # keep TorchScript's warnings, to show them
    warnings.simplefilter("always", DeprecationWarning)
    forms["script"] = timed("script", lambda: torch.jit.script(trained))
    forms["trace"] = timed("trace", lambda: torch.jit.trace(trained, example))
    int8_script = torch.jit.script(int8)
    exported = timed("export", lambda: torch.export.export(trained, (example,),
                                                           dynamic_shapes={"input": {0: torch.export.Dim("batch")}}))
    forms["export"] = exported.module()                    # the graph as a module you can call, in Python
    if skipped is None:
        forms["compile"] = torch.compile(trained)          # nothing happens yet: the first call compiles
    forms["int8"], forms["int8 script"] = int8, int8_script
    try:
        torch.export.export(int8, (example,))
        int8_export = "exported"
    except Exception as exc:                               # torch.ao's int8 layers do not export
        int8_export = f"{type(exc).__name__}: {str(exc)[:160]}"

    folder = tempfile.TemporaryDirectory()                # files on disk, removed at the end
    files = {"state_dict": "model.pt", "script": "scripted.pt", "trace": "traced.pt", "export": "exported.pt2",
             "int8": "int8.pt", "int8 script": "int8_scripted.pt"}
    path = {name: os.path.join(folder.name, file) for name, file in files.items()}
    torch.save(trained.state_dict(), path["state_dict"])
    torch.jit.save(forms["script"], path["script"])
    torch.jit.save(forms["trace"], path["trace"])
    torch.export.save(exported, path["export"])
    torch.save(int8.state_dict(), path["int8"])
    torch.jit.save(int8_script, path["int8 script"])
    sizes = {name: os.path.getsize(p) for name, p in path.items()}
    inside = {name: {i.filename.split("/", 1)[1]: i.file_size for i in zipfile.ZipFile(path[name]).infolist()}
              for name in ("script", "export")}                # both files are zip archives
    loaded = {"script": torch.jit.load(path["script"]), "export": torch.export.load(path["export"]).module()}
    folder.cleanup()
deprecations = sorted({str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)})

counters.clear()
first_call, gaps, compile_error = {}, {}, skipped
with torch.inference_mode():
    for n, x in ((64, example), (2000, X_test)):
        for name, net in list(forms.items()):
            tic = time.perf_counter()
            try:
                net(x)                                     # torch.compile compiles here, once per new shape
            except Exception as exc:                       # no C++ compiler on this machine, e.g.
                if name != "compile":
                    raise
                compile_error = f"{type(exc).__name__}: {str(exc)[:300]}"
                del forms["compile"]
                continue
            first_call[name, n] = time.perf_counter() - tic
    want, want_int8 = trained(X_test), int8(X_test)
    gaps = {name: (net(X_test) - (want_int8 if name.startswith("int8") else want)).abs().max().item()
            for name, net in [*forms.items(), *(("loaded " + k, v) for k, v in loaded.items())]}
inductor = dict(graphs=counters["stats"]["unique_graphs"], cache_hits=counters["inductor"]["fxgraph_cache_hit"],
                blas_calls=counters["inductor"]["extern_calls"])

def medians(x, rounds):
    """Median seconds per call of every form, the forms taking turns round after round, and how widely
    the middle half of each form's calls spread around it (a measure of this machine's noise)."""
    times = {name: [] for name in forms}
    with torch.inference_mode():
        for net in forms.values():
            for _ in range(3):
                net(x)                                     # warm-up, not timed
        for _ in range(rounds):
            for name, net in forms.items():
                tic = time.perf_counter()
                net(x)
                times[name].append(time.perf_counter() - tic)
    quartiles = {name: statistics.quantiles(t, n=4) for name, t in times.items()}
    return ({name: q[1] for name, q in quartiles.items()},
            {name: (q[2] - q[0]) / 2 / q[1] for name, q in quartiles.items()})

per_call, noise = {}, {}
for n, x, rounds in ((64, example, 200), (2000, X_test, 30)):
    per_call[n], noise[n] = medians(x, rounds)
graphs = dict(sizes=sizes, inside=inside, make=make_seconds, first=first_call, gaps=gaps, per_call=per_call, noise=noise,
              inductor=inductor, deprecations=deprecations, int8_export=int8_export, compile_error=compile_error,
              skipped=skipped,
              params=sum(p.numel() for p in trained.parameters()), threads=torch.get_num_threads(),
              cache=os.environ.get("TORCHINDUCTOR_CACHE_DIR"),            # where Inductor keeps compiled code
              rows_viewed=X_test.untyped_storage().nbytes() // X_test[0].nbytes)   # X_test is a view of X
print(say(f"done: {len(forms)} forms, 2 batch sizes, on {torch.get_num_threads()} thread",
          f"完成：{len(forms)} 种形式，2 种批大小，使用 {torch.get_num_threads()} 个线程"))

# %% [markdown]
# First what torch said while rank 0 worked (its own words, as Python's `warnings` caught them), then
# what is in each file, and whether every form computes what eager mode computes.

# %% [markdown] lang=zh
# 先看 rank 0 工作时 torch 说了什么（torch 的原话，由 Python 的 `warnings` 捕获），再看每个文件里装了什么，以及每种形式算出的结果是否与 eager 模式相同。

# %%
%ddp_timeline --on
graphs = %ddp_gather graphs if rank == 0 else None
g = graphs[0]
sizes, inside, per_call, first_call, gaps = g["sizes"], g["inside"], g["per_call"], g["first"], g["gaps"]
weights = 4 * g["params"]                                  # float32: 4 bytes per parameter
script_weights = sum(b for f, b in inside["script"].items() if f.startswith("data/"))
script_code = sum(b for f, b in inside["script"].items() if f.startswith("code/"))
export_weights = sum(b for f, b in inside["export"].items() if f.startswith("data/weights/weight_"))
export_graph = inside["export"]["models/model.json"]
export_example = sum(b for f, b in inside["export"].items() if f.startswith("data/sample_inputs/"))

assert any("torch.jit.script" in m and "deprecated" in m for m in g["deprecations"])
assert script_weights == export_weights == weights                 # both files hold the weights, byte for byte
assert min(sizes[k] for k in ("state_dict", "script", "trace", "export")) > weights
assert export_example >= 64 * 64 * 4                               # the example input travels with the program
assert max(sizes["int8"], sizes["int8 script"]) < 0.35 * sizes["state_dict"]
assert all(gaps[k] <= 1e-6 for k in ("script", "trace", "export", "loaded script", "loaded export", "int8 script")), gaps
compiled = g["compile_error"] is None                              # False: torch.compile could not compile here
assert not compiled or gaps["compile"] <= 1e-5, gaps               # generated code may round differently
print(say("TorchScript's warnings, as torch 2.13 words them:", "TorchScript 的警告（torch 2.13 的原话）："))
for message in g["deprecations"]:
    print("   ", message)
kB = lambda b: f"{b / 1e3:.0f} kB"
if g["skipped"]:                                                   # (en, zh): why there is no compiled form
    not_compiled = (g["skipped"] + "; the rest does not need it", g["skipped"] + "；其余部分不需要它")
else:
    not_compiled = (f"torch.compile failed here ({g['compile_error']}); the rest does not need it",
                    f"torch.compile 在这里失败了（{g['compile_error']}）；其余部分不需要它")
print(say(f"saved files: state_dict {kB(sizes['state_dict'])}; jit.script {kB(sizes['script'])} (weights "
          f"{kB(script_weights)}, code {kB(script_code)}); jit.trace {kB(sizes['trace'])}; torch.export "
          f"{kB(sizes['export'])} (weights {kB(export_weights)}, graph {kB(export_graph)}, example input "
          f"{kB(export_example)}); int8 {kB(sizes['int8'])}, int8 scripted {kB(sizes['int8 script'])}. "
          f"torch.compile makes no file. torch.export of the int8 model: {g['int8_export']}"
          + ("" if compiled else f". {not_compiled[0]}"),
          f"保存的文件：state_dict {kB(sizes['state_dict'])}；jit.script {kB(sizes['script'])}（权重 "
          f"{kB(script_weights)}，代码 {kB(script_code)}）；jit.trace {kB(sizes['trace'])}；torch.export "
          f"{kB(sizes['export'])}（权重 {kB(export_weights)}，计算图 {kB(export_graph)}，示例输入 "
          f"{kB(export_example)}）；int8 {kB(sizes['int8'])}，脚本化的 int8 {kB(sizes['int8 script'])}。"
          f"torch.compile 不产生文件。对 int8 模型做 torch.export：{g['int8_export']}"
          + ("" if compiled else f"。{not_compiled[1]}")))
names = {"state_dict": "state_dict", "eager": "eager", "script": "jit.script", "trace": "jit.trace", "export": "export",
         "compile": "compile", "int8": "int8", "int8 script": "int8 jit.script",
         "loaded script": say("jit.script loaded from its file", "从文件读回的 jit.script"),
         "loaded export": say("export loaded from its file", "从文件读回的 export")}
print(say("largest difference from eager's outputs on the 2,000 test samples (int8 forms: from eager int8's): ",
          "在 2,000 个测试样本上与 eager 输出的最大差值（int8 的几种形式：与 eager int8 的输出比较）：")
      + say(", ", "，").join(f"{names[k]} {v:.1e}" for k, v in gaps.items() if k not in ("eager", "int8")))

# %% [markdown]
# Both archives hold the weights byte for byte (4 bytes × 85,002 parameters), and the rest is what
# each tool adds: TorchScript its code, `torch.export` its graph (as JSON) and the example input it
# was given. The int8 model can be scripted (the old tools work together) but not exported:
# `torch.ao`'s int8 layers keep their weights in a packed C++ object that `torch.export` cannot take
# apart. The old int8 path belongs with the old tools; torch's deprecation of `torch.ao.quantization`
# (section 2) points to torchao instead. The
# scripted, traced and exported forms, including the two loaded back from their files, give exactly
# eager mode's outputs: the same operations on the same numbers.
#
# Now the time each form took to make, and to run:

# %% [markdown] lang=zh
# 两个归档文件都逐字节地保存了权重（4 字节 × 85,002 个参数），其余部分是各个工具加上去的：TorchScript 加的是它的代码，`torch.export` 加的是计算图（以 JSON 格式）和它拿到的示例输入。int8 模型可以脚本化（旧工具之间彼此配合），却不能导出：`torch.ao` 的 int8 层把权重放在一个打包好的 C++ 对象里，`torch.export` 无法把它拆开。旧的 int8 做法只能与旧工具配合；torch 弃用 `torch.ao.quantization` 时（见第 2 节）建议改用的是 torchao。脚本化、追踪和导出得到的形式，包括从文件中读回的两个，给出的输出与 eager 模式完全相同：同样的运算，作用在同样的数上。
#
# 接下来看每种形式生成时花了多少时间，以及运行时花了多少时间：

# %%
ind = g["inductor"]
per_graph = ind["blas_calls"] // max(ind["graphs"], 1)
print(say(f"making each form: jit.script {g['make']['script']:.2f} s, jit.trace {g['make']['trace']:.2f} s, "
          f"torch.export {g['make']['export']:.2f} s",
          f"生成每种形式：jit.script {g['make']['script']:.2f} 秒，jit.trace {g['make']['trace']:.2f} 秒，"
          f"torch.export {g['make']['export']:.2f} 秒")
      + (say(f". torch.compile's first call: {first_call['compile', 64]:.1f} s with "
             f"64 samples, then {first_call['compile', 2000]:.1f} s for the first 2,000 (a new shape, compiled again); "
             f"{ind['graphs']} graphs compiled, {ind['cache_hits']} of them found in Inductor's cache on disk ({g['cache']})",
             f"。torch.compile 的第一次调用：64 个样本时 {first_call['compile', 64]:.1f} 秒，"
             f"第一次处理 2,000 个样本时又花了 {first_call['compile', 2000]:.1f} 秒（新的形状，再编译一次）；"
             f"共编译了 {ind['graphs']} 张计算图，其中 {ind['cache_hits']} 张在 Inductor 的磁盘缓存（{g['cache']}）里找到")
         if compiled else ""))
for n in (64, 2000):
    print(say(f"median per call, {n:,} samples: ", f"每次调用的中位数，{n:,} 个样本：")
          + say(", ", "，").join(f"{names[k]} {1e3 * v:.2f} {say('ms', '毫秒')}" for k, v in per_call[n].items()))
display(draw.bars(None, panels=[
    dict(values={names[k]: v / 1e3 for k, v in sizes.items()}, ylabel="kB",
         title=say("Saved file (torch.compile: none)", "保存的文件（torch.compile：无）")),
    dict(values={names["script"]: g["make"]["script"], names["trace"]: g["make"]["trace"],
                 names["export"]: g["make"]["export"],
                 **({say("compile (1st call)", "compile（第一次调用）"): first_call["compile", 64]} if compiled else {})},
         ylabel=say("s", "秒"), title=say("Time to make it ready", "准备所用的时间"))]))
draw.bars(None, panels=[
    dict(values={names[k]: 1e3 * v for k, v in per_call[n].items()}, ylabel=say("ms", "毫秒"),
         title=say(f"Time per call, {n:,} samples (median)", f"每次调用的时间，{n:,} 个样本（中位数）"))
    for n in (64, 2000)])

# %% [markdown]
# Which form is fastest depends on the CPU, the model and the batch size, so the cell below reads
# this run's numbers and says what they show (on a busy machine they vary from run to run; the
# medians and the round-robin keep the comparison fair, not the numbers fixed).

# %% [markdown] lang=zh
# 哪种形式最快，取决于 CPU、模型和批大小，所以下面的单元格读取这次运行的数字，说明它们表明了什么（机器繁忙时，这些数字每次运行都会不同；取中位数、轮流计时让比较保持公平，但不能让数字固定不变）。

# %%
share = lambda name, n, base="eager": per_call[n][name] / per_call[n][base]
noise = g["noise"]                                         # half the spread of the middle half of the calls
margin = {n: max(0.05, noise[n]["eager"]) for n in (64, 2000)}   # smaller differences: not the forms', the machine's
print(say(f"Noise: the middle half of eager's calls lay within ±{noise[64]['eager']:.0%} of their median with 64 samples "
          f"and ±{noise[2000]['eager']:.0%} with 2,000; differences smaller than that say nothing about the forms.",
          f"噪声：eager 中间一半的调用落在其中位数的 ±{noise[64]['eager']:.0%} 以内（64 个样本）和 ±{noise[2000]['eager']:.0%} "
          "以内（2,000 个样本）；比这更小的差别说明不了各种形式之间的任何问题。"))
r = share("script", 64)
if r < 1 - margin[64]:
    print(say(f"With 64 samples jit.script took {r:.0%} of eager's time: the arithmetic of one small batch is short, "
              "so Python's work of calling five modules one after another is a visible share of each call, and the "
              "TorchScript interpreter runs the graph without it.",
              f"64 个样本时，jit.script 的用时为 eager 的 {r:.0%}：这样一个批次的计算量很少，所以 Python 逐个调用五个模块的开销在每次调用中"
              "占了明显的一部分，而 TorchScript 的解释器运行计算图时没有这部分开销。"))
else:
    print(say(f"With 64 samples jit.script took {r:.0%} of eager's time: no clear gain from running without Python "
              "on this machine.",
              f"64 个样本时，jit.script 的用时为 eager 的 {r:.0%}：在这台机器上，不经过 Python 运行并没有带来明显的收益。"))
floats = ["eager", "script", "trace", *(["compile"] if compiled else [])]
low, high = (f(1e3 * per_call[2000][k] for k in floats) for f in (min, max))
if high / low - 1 <= 2 * margin[2000]:
    print(say(f"With 2,000 samples {', '.join(names[k] for k in floats)} took {low:.1f} to {high:.1f} ms, about as "
              "far apart as the noise: the three matrix products do nearly all the work, and every form hands them to "
              "the same BLAS library.",
              f"2,000 个样本时，{'、'.join(names[k] for k in floats)} 用时 {low:.1f} 到 {high:.1f} 毫秒，差别与噪声相当："
              "三次矩阵乘法几乎占了全部工作，而每种形式都把它们交给同一个 BLAS 库。"))
else:
    print(say(f"With 2,000 samples {', '.join(names[k] for k in floats)} took {low:.1f} to {high:.1f} ms, further "
              "apart than the noise, though the three matrix products, which every form hands to the same BLAS library, "
              "do nearly all the work: what is left is each form's handling of the intermediate results (eager mode "
              "writes a new 2,000 × 256 tensor for each ReLU), and a busy machine that does not slow all calls alike. "
              "Run the cell again to see which differences stay.",
              f"2,000 个样本时，{'、'.join(names[k] for k in floats)} 用时 {low:.1f} 到 {high:.1f} 毫秒，差别超过了噪声，"
              "尽管几乎全部工作都是三次矩阵乘法，而每种形式都把它们交给同一个 BLAS 库：剩下的差别来自各种形式对中间结果的处理"
              "（eager 模式为每个 ReLU 新建一个 2,000 × 256 的张量），以及繁忙的机器并不会让每次调用都同样变慢。"
              "再运行一次这个单元格，看看哪些差别保持不变。"))
if compiled:
    compile_seconds = first_call["compile", 64] + first_call["compile", 2000]
    saved_ms = 1e3 * (per_call[2000]["eager"] - per_call[2000]["compile"])
    pays = saved_ms > margin[2000] * 1e3 * per_call[2000]["eager"]
    print(say(f"torch.compile's code calls addmm (matrix product plus bias, in BLAS) {per_graph} times per call, as eager "
              "mode does, and adds its own C++ only for the ReLUs, which it applies in place to each product (eager mode "
              "writes each ReLU's result to a new tensor): for this MLP that is all there is to fuse. Compiled, "
              f"a call took {share('compile', 64):.0%} of eager's time with 64 samples (each call first checks its guards: "
              f"shapes, dtypes, grad mode) and {share('compile', 2000):.0%} with 2,000. "
              + (f"Saving {saved_ms:.2f} ms per 2,000 samples, it pays back its {compile_seconds:.1f} s of compiling after "
                 f"about {1e3 * compile_seconds / saved_ms:,.0f} such calls." if pays
                 else f"With no saving clearly above the noise, it does not pay back its {compile_seconds:.1f} s of compiling here."),
              f"torch.compile 生成的代码每次调用都和 eager 模式一样调用 {per_graph} 次 addmm（矩阵乘法加偏置，在 BLAS 中），只为 ReLU "
              f"生成自己的 C++ 代码，并把 ReLU 直接作用在每次矩阵乘法的结果上（eager 模式则把每个 ReLU 的结果写进一个新张量）："
              f"这个 MLP 能融合的就只有这些。编译后，64 个样本时一次调用的用时为 eager 的 {share('compile', 64):.0%}"
              f"（每次调用都要先检查它的守卫：形状、数据类型、梯度模式），2,000 个样本时为 {share('compile', 2000):.0%}。"
              + (f"每 2,000 个样本节省 {saved_ms:.2f} 毫秒，大约 {1e3 * compile_seconds / saved_ms:,.0f} 次这样的调用之后，"
                 f"才能赚回编译所花的 {compile_seconds:.1f} 秒。" if pays
                 else f"节省的时间没有明显超出噪声，在这里它赚不回编译所花的 {compile_seconds:.1f} 秒。")))
print(say(f"The exported program's .module() took {share('export', 64):.0%} of eager's time with 64 samples: it runs "
          "the graph as Python code (an FX GraphModule) and checks the input's shape at every call. It is there to be "
          "saved, loaded and compiled further, not to be fast in Python.",
          f"导出程序的 .module() 在 64 个样本时的用时为 eager 的 {share('export', 64):.0%}：它以 Python 代码（一个 FX GraphModule）"
          "运行计算图，每次调用都检查输入的形状。它的用处是保存、加载和进一步编译，而不是在 Python 里跑得快。"))
print(say(f"int8 took {share('int8', 2000):.0%} of float32's time with 2,000 samples and {share('int8', 64):.0%} with 64; "
          f"scripted, int8 took {share('int8 script', 64, 'int8'):.0%} of eager int8's time with 64 samples (eager int8 "
          "layers do more Python work per call than float Linear layers, and scripting removes it).",
          f"int8 在 2,000 个样本时的用时为 float32 的 {share('int8', 2000):.0%}，64 个样本时为 {share('int8', 64):.0%}；"
          f"脚本化之后，64 个样本时 int8 的用时为 eager int8 的 {share('int8 script', 64, 'int8'):.0%}（eager 模式下，int8 层每次调用"
          "要做的 Python 工作比 float 的 Linear 层多，脚本化把这部分去掉了）。"))

# %% [markdown]
# So, for a model this small on a CPU, what the graph tools can save is what lies around the three
# matrix products: Python's work, which shows on a small batch, and a pass over memory here and
# there on a large one. The products themselves, which take nearly all of the time, are computed by
# the same library in every form. What the tools are for lies elsewhere. TorchScript and `torch.export` give a
# model that lives outside the Python program that trained it, in a file that C++ or another Python
# process loads (TorchScript until now, `torch.export` from now on). `torch.compile` gives speed to
# models with many element-wise operations between their matrix products, where fusing them saves
# passes over memory (lesson 12 times it on training steps). On a GPU the picture changes: launching
# each kernel costs microseconds, and fusion and CUDA graphs save many of them.
#
# ### Can DDP train a TorchScript model?
#
# DDP wraps an `nn.Module`: it broadcasts the module's parameters from rank 0, puts a hook on each
# parameter that collects its gradient into a bucket, and all-reduces each full bucket during the
# backward pass. A scripted model is an `nn.Module` too (`torch.jit.ScriptModule` is a subclass), and
# its parameters are ordinary tensors that get gradients. So DDP may well accept it: try. All 4 ranks
# train 20 steps twice, from the same start on the same batches, once with DDP around
# `torch.jit.script(model)` and once around the eager model, and count DDP's all-reduces with
# `CommCounter` (section 4 explains it).

# %% [markdown] lang=zh
# 所以，对于 CPU 上这么小的模型，这些计算图工具能省下的，只是三次矩阵乘法周围的那些开销：Python 的工作（批次小时看得出来），以及批次大时偶尔省下的一次内存遍历。矩阵乘法本身占了几乎全部时间，而每种形式都用同一个库来算它们。这些工具的用处在别的地方。TorchScript 和 `torch.export` 给出一个可以离开训练它的那个 Python 程序而存在的模型，放在一个可以由 C++ 或另一个 Python 进程加载的文件里（以前用 TorchScript，今后用 `torch.export`）。`torch.compile` 则让那些在矩阵乘法之间有很多逐元素运算的模型变快：把这些运算融合起来，减少遍历内存的次数（第 12 课在训练步上对它计时）。在 GPU 上情况就不同了：每启动一个内核都要花几微秒，融合和 CUDA graphs 能省下很多这样的开销。
#
# ### DDP 能训练 TorchScript 模型吗？
#
# DDP 包装的是一个 `nn.Module`：它从 rank 0 广播这个模块的参数，在每个参数上挂一个钩子，把它的梯度收集到桶里，并在反向传播中对每个装满的桶做 all-reduce。脚本化的模型也是一个 `nn.Module`（`torch.jit.ScriptModule` 是它的子类），它的参数是普通的张量，也会得到梯度。所以 DDP 很可能接受它：试一试。4 个 rank 都训练两次，每次 20 步，从同一个起点出发，使用同样的批次：一次用 DDP 包装 `torch.jit.script(model)`，一次包装 eager 模型，并用 `CommCounter`（第 4 节会讲到它）统计 DDP 的 all-reduce。

# %%
%%ddp
import warnings
from ddplab.lessons.ranks import CommCounter, flat_params

def train_steps(net, steps=20):
    ddp = DDP(net)
    counter = CommCounter()                                # counts DDP's all-reduces, then does them
    ddp.register_comm_hook(None, counter.hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    sampler, batches = loader(seed=2)
    for _, (x, y) in zip(range(steps), batches):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=len(x))
    return ddp, counter

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)   # shown above
    scripted_ddp, scripted_counter = train_steps(torch.jit.script(mlp(64, 256, 10, seed=0)))
eager_ddp, eager_counter = train_steps(mlp(64, 256, 10, seed=0))
under_ddp = dict(inside=type(scripted_ddp.module).__name__, spread=param_spread(scripted_ddp.module),
                 gap=(flat_params(scripted_ddp.module) - flat_params(eager_ddp.module)).abs().max().item(),
                 calls=(scripted_counter.calls, eager_counter.calls), bytes=(scripted_counter.bytes, eager_counter.bytes))
print(say(f"DDP around a {under_ddp['inside']}: {scripted_counter.calls} all-reduces, parameters differ across ranks "
          f"by {under_ddp['spread']} and from the eager run by {under_ddp['gap']}",
          f"DDP 包装一个 {under_ddp['inside']}：{scripted_counter.calls} 次 all-reduce，各 rank 的参数相差 {under_ddp['spread']}，"
          f"与 eager 训练的参数相差 {under_ddp['gap']}"))

# %%
under_ddp = %ddp_gather under_ddp
u = under_ddp[0]
assert u["inside"] == "RecursiveScriptModule" and all(r["spread"] == 0.0 for r in under_ddp)
assert all(r["gap"] <= 1e-6 and r["calls"][0] == r["calls"][1] > 0 and r["bytes"][0] == r["bytes"][1] for r in under_ddp)
print(say(f"torch 2.13's DDP trains a scripted model: {u['calls'][0]} all-reduces of {u['bytes'][0] / u['calls'][0] / 1e3:.0f} kB "
          f"in 20 steps, as for the eager model; the {len(under_ddp)} ranks hold identical parameters, and the largest difference from "
          f"the eager run's is {max(r['gap'] for r in under_ddp)}",
          f"torch 2.13 的 DDP 可以训练脚本化的模型：20 步中做了 {u['calls'][0]} 次 all-reduce，每次 "
          f"{u['bytes'][0] / u['calls'][0] / 1e3:.0f} kB，与 eager 模型相同；{len(under_ddp)} 个 rank 持有完全相同的参数，与 eager 训练的参数"
          f"最大相差 {max(r['gap'] for r in under_ddp)}"))

# %% [markdown]
# It works: DDP needs parameters whose gradients it can hook, not Python code, and the scripted
# module has them. Its forward runs in TorchScript's interpreter, its backward in autograd as usual,
# and DDP's reducer all-reduces the same bucket as for the eager model.
#
# The other order is what fails: `torch.jit.script(DDP(model))`, scripting the wrapper. TorchScript
# compiles `forward` from its source, and DDP's `forward(self, *inputs, **kwargs)` is Python that
# TorchScript does not accept. This cell is meant to fail, so it runs with
# `%%ddp --expect NotSupportedError`: ddplab shows the failure as the point of the cell.

# %% [markdown] lang=zh
# 它能行：DDP 需要的是能挂上钩子的参数梯度，而不是 Python 代码，脚本化的模块正好有这样的参数。它的前向计算在 TorchScript 的解释器里运行，反向传播照常由 autograd 完成，DDP 的 reducer 对同一个桶做 all-reduce，与 eager 模型完全一样。
#
# 反过来的顺序才会失败：`torch.jit.script(DDP(model))`，也就是把包装器脚本化。TorchScript 是从源代码编译 `forward` 的，而 DDP 的 `forward(self, *inputs, **kwargs)` 是 TorchScript 不接受的 Python 写法。这个单元格本来就应该失败，所以用 `%%ddp --expect NotSupportedError` 运行：ddplab 把这次失败作为这个单元格要看的内容显示出来。

# %%
%%ddp --expect NotSupportedError
with warnings.catch_warnings():
    warnings.simplefilter("ignore")                       # TorchScript's warnings: seen above
    torch.jit.script(DDP(mlp(64, 256, 10, seed=0)))     # script the DDP wrapper: TorchScript reads DDP.forward

# %% [markdown]
# The file the message names is ddplab's: in a ddplab rank, DDP's `forward` is wrapped so that the
# dashboard can time it, and the code shown is torch's own `DistributedDataParallel.forward`. Plain
# torch, without ddplab, stops at the same line with the same error.
#
# So: DDP goes outside, and TorchScript, if at all, inside. Better still, train the eager model
# under DDP and turn `ddp.module`, the plain model inside, into whatever you deploy once training is
# over, as this lesson did: `trained = model.module` came out of DDP, and section 3 scripted and
# exported it. Nothing of DDP belongs in a deployed model
# (its buckets and hooks exist for the backward pass), and `torch.export` is the tool torch now
# recommends for it.

# %% [markdown] lang=zh
# 报错信息里给出的文件是 ddplab 的：在 ddplab 的 rank 里，DDP 的 `forward` 被包装了一层，好让仪表盘为它计时；显示出来的代码则是 torch 自己的 `DistributedDataParallel.forward`。不用 ddplab、只用 torch，也会在同一行以同样的错误停下。
#
# 所以：DDP 放在外层，TorchScript（如果还用的话）放在里层。更好的做法是：在 DDP 下训练 eager 模型，训练结束后，再把 `ddp.module`（包在里面的普通模型）转换成要部署的形式，就像这一课所做的那样：`trained = model.module` 取自 DDP，第 3 节再把它脚本化、导出。部署的模型里不需要 DDP 的任何东西（它的桶和钩子是为反向传播准备的），而 `torch.export` 正是 torch 现在推荐用来做这件事的工具。

# %% [markdown]
# ## 4. Compressing the gradients DDP sends
#
# During training, each step every rank all-reduces all of its gradients: 85 k float32 numbers,
# 340 kB per step here. A DDP **communication hook** replaces that all-reduce with your own
# function. torch ships `fp16_compress_hook` and `bf16_compress_hook`: cast the gradient bucket to
# 16 bits, all-reduce it, cast back. `CommCounter` wraps them and counts the bytes.
#
# - **fp16** stores 10 fraction bits (11 significant bits with the implicit leading 1) but has a small
#   range (up to 65504, down to about 6·10⁻⁸);
# - **bf16** keeps float32's range but stores only 7 fraction bits (8 significant bits with the
#   implicit leading 1; float32 stores 23).
#
# Three runs from the same start, on the same batches, in the same order: only the hook differs.
# (The dashboard shows the three runs one after another.)

# %% [markdown] lang=zh
# ## 4. 压缩 DDP 发送的梯度
#
# 训练时，每一步每个 rank 都要对它的全部梯度做 all-reduce：这里是 8.5 万个 float32 数，每步 340 kB。DDP 的**通信钩子**（communication hook）可以用你自己的函数替换这次 all-reduce。torch 自带 `fp16_compress_hook` 和 `bf16_compress_hook`：把梯度桶转换成 16 位，做 all-reduce，再转换回来。`CommCounter` 包装了它们，并统计字节数。
#
# - **fp16** 显式存储 10 位尾数（加上隐含的前导 1，共 11 位有效位），但范围很小（最大 65504，最小约 6·10⁻⁸）；
# - **bf16** 保留 float32 的范围，但只显式存储 7 位尾数（加上隐含的前导 1，共 8 位有效位；float32 存储 23 位）。
#
# 三次运行从同一个起点出发，使用同样的批次、同样的顺序：只有钩子不同。（仪表盘会依次显示这三次运行。）

# %% [markdown]
# **Predict, then run.** fp16 and bf16 hand the all-reduce half the bytes of fp32. How long will
# the fp16 run take on rank 0, as a fraction of the fp32 run's time (3 epochs each)? (0.5 would be
# half the time.)

# %% [markdown] lang=zh
# **先预测，再运行。** fp16 和 bf16 交给 all-reduce 的字节数只有 fp32 的一半。在 rank 0 上，fp16 训练的耗时会是 fp32 训练的几分之几（各训练 3 个 epoch）？（0.5 表示一半的时间。）

# %%
predict("7.fp16_time", ...)    # seconds of the fp16 run on rank 0, as a fraction of the fp32 run's

# %%
%%ddp
import time
from ddplab.lessons.ranks import CommCounter

def train_with(compress, epochs=3):
    model = DDP(mlp(features=64, hidden=256, classes=10, seed=0))
    counter = CommCounter(compress)                       # None: plain float32 all-reduce
    model.register_comm_hook(None, counter.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler, batches = loader(seed=1)
    losses, sent = [], []
    tic = time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in batches:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()                               # the hook runs here
            opt.step()
            ddplab.log(loss=loss, samples=len(x))
            losses.append(loss.item())
            sent.append(counter.bytes)                    # bytes all-reduced so far
    return dict(losses=losses, sent=sent, seconds=time.perf_counter() - tic,
                spread=param_spread(model.module), accuracy=accuracy(model.module))

runs = {name: train_with(compress) for name, compress in (("fp32", None), ("fp16", "fp16"), ("bf16", "bf16"))}
print(say("; ", "；").join(say(f"{name}: {run['sent'][-1] / len(run['sent']) / 1e3:.0f} kB per step, {run['seconds']:.1f} s",
                    f"{name}：每步 {run['sent'][-1] / len(run['sent']) / 1e3:.0f} kB，{run['seconds']:.1f} 秒")
                for name, run in runs.items()))

# %% [markdown]
# Each rank's loss is for its own 64 samples; averaging the 4 ranks gives the loss of the whole
# batch of 256. Left: that loss, step by step, for the three runs. Middle: how far the 16-bit runs
# drift from the float32 one (fp32's own line is 0). Right: the bytes handed to the all-reduce,
# added up (the fp16 and bf16 lines coincide).

# %% [markdown] lang=zh
# 每个 rank 的损失只针对它自己的 64 个样本；把 4 个 rank 的损失取平均，就得到整个 256 个样本批次的损失。左图：三次运行中这个损失逐步的变化。中图：16 位的两次运行与 float32 运行相差多少（fp32 自己的线为 0）。右图：交给 all-reduce 的字节数的累计值（fp16 和 bf16 的线重合）。

# %%
runs = %ddp_gather runs
names = ["fp32", "fp16", "bf16"]
steps = len(runs[0]["fp32"]["losses"])
loss = {n: [sum(r[n]["losses"][s] for r in runs) / len(runs) for s in range(steps)] for n in names}
sent = {n: runs[0][n]["sent"] for n in names}
per_step = {n: sent[n][-1] / steps for n in names}
late = {n: sum(loss[n][-20:]) / 20 for n in names}        # mean loss over the last 20 steps

assert per_step["fp16"] == per_step["bf16"] == per_step["fp32"] / 2    # exactly half the bytes
assert all(r[n]["spread"] == 0.0 for r in runs for n in names)          # ranks still identical
assert all(abs(late[n] - late["fp32"]) < 0.1 * late["fp32"] for n in names), late
assert all(abs(runs[0][n]["accuracy"] - runs[0]["fp32"]["accuracy"]) < 0.03 for n in names)
drift = {n: max(abs(a - b) for a, b in zip(loss[n], loss["fp32"])) for n in names}
reveal("7.fp16_time", runs[0]["fp16"]["seconds"] / runs[0]["fp32"]["seconds"], unit=say("× fp32's time", "× fp32 的耗时"))
lates = say(", ", "，").join(f"{n} {late[n]:.3f}" for n in names)
accs = say(", ", "，").join(f"{n} {runs[0][n]['accuracy']:.1%}" for n in names)
print(say(f"{per_step['fp32'] / 1e3:.0f} kB per step with fp32, {per_step['fp16'] / 1e3:.0f} kB with fp16 and bf16; "
          f"largest loss difference from fp32: fp16 {drift['fp16']:.4f}, bf16 {drift['bf16']:.4f}; "
          f"loss over the last 20 steps: {lates}; test accuracy: {accs}",
          f"fp32 每步 {per_step['fp32'] / 1e3:.0f} kB，fp16 和 bf16 每步 {per_step['fp16'] / 1e3:.0f} kB；"
          f"与 fp32 损失的最大差值：fp16 {drift['fp16']:.4f}，bf16 {drift['bf16']:.4f}；"
          f"最后 20 步的平均损失：{lates}；测试准确率：{accs}"))
draw.lines(None, panels=[
    dict(series={n: (range(1, steps + 1), loss[n]) for n in names}, xlabel=say("step", "步数"),
         ylabel=say(f"loss (mean of {len(runs)} ranks)", f"损失（{len(runs)} 个 rank 的平均）"), title=say("Training loss", "训练损失")),
    dict(series={n: (range(1, steps + 1), [abs(a - b) for a, b in zip(loss[n], loss["fp32"])]) for n in names},
         xlabel=say("step", "步数"), ylabel=say("|loss − fp32 loss|", "|损失 − fp32 损失|"),
         title=say("Drift from the fp32 run", "与 fp32 训练的偏差")),
    dict(series={n: (range(1, steps + 1), [b / 1e6 for b in sent[n]]) for n in names}, xlabel=say("step", "步数"),
         ylabel="MB", title=say("Gradient bytes all-reduced, in total", "累计 all-reduce 的梯度字节数"))])

# %% [markdown]
# The three loss curves lie on top of each other: the rounding moves the loss very little (the
# largest differences are printed above; bf16, with fewer fraction bits, rounds each gradient more
# coarsely than fp16), and the ranks still hold identical
# parameters (every rank gets the same rounded sum). Compare the seconds each run took, printed
# above: on one machine the all-reduce is a copy through memory, so halving its bytes saves little,
# and the casts to 16 bits and back cost time too. Across a real network, where communication is
# what limits data-parallel training (lesson 12), half the bytes can mean a much faster step.
# Lower precision has a price on other models: fp16 can overflow or flush tiny gradients to zero
# (bf16 does not, but rounds harder). PowerSGD (`powerSGD_hook`) compresses much further by
# sending a low-rank approximation of each gradient.

# %% [markdown] lang=zh
# 三条损失曲线相互重叠：舍入对损失的影响很小（最大差值见上面的输出；bf16 的尾数位更少，对每个梯度的舍入比 fp16 更粗）；各 rank 仍然持有完全相同的参数（每个 rank 得到的是同一个舍入后的和）。对比上面打印出的每次运行所用的秒数：在一台机器上，all-reduce 只是一次内存复制，字节数减半省不了多少时间，而转换到 16 位再转回来也要花时间。在真实的网络上，通信正是限制数据并行训练的因素（第 12 课），字节数减半可能让每一步快得多。在别的模型上，更低的精度是有代价的：fp16 可能溢出，或者让极小的梯度下溢为零（bf16 不会，但舍入更粗）。PowerSGD（`powerSGD_hook`）只发送每个梯度矩阵的一个近似：两个细长矩阵，它们的乘积近似原来的梯度（英文称 low-rank approximation），压缩得更多。

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one number: write it in place of `...` in the cell below it and run the
# cell; `check` says whether it is right for this run, and why (it never shows the answer).
#
# **7.1** `to_sparse()` stores each non-zero entry of a float32 matrix as its value (4 bytes) and its
# two indices (two int64, 8 bytes each); dense storage takes 4 bytes per entry, zero or not. From
# what sparsity (the fraction of zero entries) on is the sparse matrix the smaller of the two,
# ignoring the few bytes of headers? Answer a fraction, like 0.25, and compare it with the level the
# run printed.

# %% [markdown] lang=zh
# ## 练习
#
# 每道练习要求写出一个数：把它填在下面单元格里 `...` 的位置，然后运行这个单元格；`check` 会告诉你对这次运行来说它对不对、为什么（它从不显示答案）。
#
# **7.1** `to_sparse()` 为 float32 矩阵的每个非零元素保存它的值（4 字节）和两个索引（两个 int64，各 8 字节）；稠密存储则每个元素都占 4 字节，不管是不是零。不计文件头那几个字节，稀疏度（零元素所占的比例）从多少起，稀疏矩阵才比稠密矩阵小？请回答一个小数（例如 0.25），并与运行中打印出的稀疏度比较。

# %%
answer = ...    # the sparsity from which sparse storage is smaller than dense
check("7.1", answer, smaller=smaller)

# %% [markdown]
# **7.2** `quantize_dynamic` stores each weight of a Linear layer as an integer from −128 to 127,
# times one float **scale** per layer (here with zero point 0). The scale is chosen so that the
# integers cover the layer's weights symmetrically, from −M to M, where M is the largest |w|. This
# run's first layer has M printed below: what is its scale? Answer a number; the check compares it
# with the scale torch chose.

# %% [markdown] lang=zh
# **7.2** `quantize_dynamic` 把 Linear 层的每个权重保存为一个 −128 到 127 之间的整数，再乘以每层一个浮点**缩放因子**（这里零点为 0）。缩放因子的选取方式是让这些整数对称地覆盖该层的权重，即从 −M 到 M，其中 M 是最大的 |w|。这次运行第一层的 M 打印在下面：它的缩放因子是多少？请回答一个数；检查会把它和 torch 选定的缩放因子比较。

# %%
print(say(f"layer 1: the largest |w| is M = {first['largest']:.6f}", f"第 1 层：最大的 |w| 是 M = {first['largest']:.6f}"))
answer = ...    # the int8 scale of layer 1
check("7.2", answer, scale=first["scale"], largest=first["largest"])

# %% [markdown]
# **7.3** The run counted the bytes DDP's all-reduce sends per step with fp32, fp16 and bf16
# gradients for `mlp(64, 256, 10)`. How many bytes per step would `fp16_compress_hook` send for
# `mlp(features=64, hidden=512, classes=10)` (the same three Linear layers, twice as wide)? Answer a
# number of bytes.

# %% [markdown] lang=zh
# **7.3** 运行中统计了 `mlp(64, 256, 10)` 使用 fp32、fp16 和 bf16 梯度时，DDP 的 all-reduce 每步发送的字节数。对于 `mlp(features=64, hidden=512, classes=10)`（同样三个 Linear 层，宽度加倍），`fp16_compress_hook` 每步会发送多少字节？请回答一个字节数。

# %%
answer = ...    # bytes per step with fp16_compress_hook for mlp(64, 512, 10)
check("7.3", answer, features=64, hidden=512, classes=10, fp32_per_step=per_step["fp32"])

# %% [markdown]
# **7.4** Structured pruning removes whole neurons: `prune.ln_structured(trained[2], "weight",
# amount=0.5, n=2, dim=0)` masks half the **rows** (output neurons) of the 256 × 256 middle layer.
# Rebuilt without them, how many parameters (weights and biases) does the whole `mlp(64, 256, 10)`
# have left? Answer a whole number. (Think about what the removed neurons mean for the next layer.)

# %% [markdown] lang=zh
# **7.4** 结构化剪枝去掉的是整个神经元：`prune.ln_structured(trained[2], "weight", amount=0.5, n=2, dim=0)` 会屏蔽 256 × 256 中间层的一半**行**（输出神经元）。去掉这些行重建之后，整个 `mlp(64, 256, 10)` 还剩多少参数（权重和偏置）？请回答一个整数。（想一想被去掉的神经元对下一层意味着什么。）

# %%
answer = ...    # parameters left in the whole model after removing half the middle layer's neurons
check("7.4", answer, features=64, hidden=256, classes=10, amount=0.5)

# %% [markdown]
# **7.5** The exported `.pt2` file holds the weights, the graph and the example input that
# `torch.export` was given: here `X_test[:64].clone()`, 64 × 64 float32 numbers. Had section 3
# passed the whole test set as the example, `X_test.clone()` (2,000 × 64 float32 numbers), how many
# bytes would the `.pt2` file have been? The graph stays the same, since the batch dimension was
# declared free. Answer a number of bytes; the run's file size is printed below.

# %% [markdown] lang=zh
# **7.5** 导出的 `.pt2` 文件里有权重、计算图，以及交给 `torch.export` 的示例输入：这里是 `X_test[:64].clone()`，64 × 64 个 float32 数。如果第 3 节把整个测试集作为示例输入，即 `X_test.clone()`（2,000 × 64 个 float32 数），`.pt2` 文件会有多少字节？计算图不变，因为批次这一维已声明为可变。请回答一个字节数；这次运行的文件大小打印在下面。

# %%
print(say(f"the .pt2 file of section 3: {sizes['export']:,} bytes", f"第 3 节的 .pt2 文件：{sizes['export']:,} 字节"))
answer = ...    # bytes of the .pt2 file exported with X_test.clone() as the example input
check("7.5", answer, pt2=sizes["export"], example=export_example, example_rows=64, rows=2000, features=64,
      rows_viewed=g["rows_viewed"])

# %%
%ddp_stop
