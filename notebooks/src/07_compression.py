# %% [markdown]
# # Lesson 7 · Pruning, quantization and compressed gradients
#
# **In short.** A trained network carries more precision than it needs, in two places: the
# **model** you ship and the **gradients** ranks exchange while training. You train a small MLP
# with DDP, then shrink it three ways. **Pruning** sets the smallest weights to zero: the 4 ranks
# split the sparsity levels among themselves and draw accuracy against sparsity together.
# **Dynamic int8 quantization** stores the Linear weights in 8 bits instead of 32: size, accuracy
# and inference time side by side. **Compressed gradient communication** casts DDP's gradient
# buckets to 16 bits before the all-reduce: half the bytes, nearly the same training.
#
# **You will learn**
# - what `torch.nn.utils.prune` does (a mask, the smallest |w|), global vs per-layer pruning
# - why zeros alone save no bytes, and when sparse storage starts to pay
# - what dynamic int8 quantization stores (8-bit weights and a scale) and what it costs in accuracy
# - how a DDP communication hook sends 16-bit gradients, and what fp16 and bf16 keep and lose
#
# **Study time:** about 45 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** accuracy against sparsity (global and per-layer pruning), what pruning does to
# a layer (mask, zeros, saved size), float32 vs int8 size / accuracy / latency, and loss curves
# and bytes sent with fp32, fp16 and bf16 gradients.

# %% [markdown] lang=zh
# # 第 7 课 · 剪枝、量化与梯度压缩
#
# **简而言之**：训练好的网络在两个地方带着超出需要的精度：要发布的**模型**，以及训练时各 rank 之间交换的**梯度**。这一课先用 DDP 训练一个小 MLP，再用三种方法压缩它。**剪枝**把最小的权重置零：4 个 rank 分担不同的稀疏度，一起画出准确率随稀疏度变化的曲线。**动态 int8 量化**用 8 位而不是 32 位保存 Linear 层的权重：把模型大小、准确率和推理时间并排比较。**梯度通信压缩**在 all-reduce 之前把 DDP 的桶转换成 16 位：字节数减半，训练几乎不受影响。
#
# **你将学到**
# - `torch.nn.utils.prune` 做了什么（掩码、最小的 |w|），全局剪枝与逐层剪枝的区别
# - 为什么仅仅有零并不省字节，稀疏存储从什么时候开始划算
# - 动态 int8 量化保存的是什么（8 位权重和一个缩放因子），准确率上要付出多少代价
# - DDP 的通信钩子怎样发送 16 位梯度，fp16 和 bf16 各保留什么、丢掉什么
#
# **学习时间**：约 45 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：准确率随稀疏度的变化（全局剪枝与逐层剪枝），剪枝对一个层做了什么（掩码、零、保存后的大小），float32 与 int8 在大小、准确率和延迟上的对比，以及使用 fp32、fp16、bf16 梯度时的损失曲线和发送的字节数。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, say

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
assert spread == [0.0] * 4 and base_accuracy > 0.8
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
# in a sparse format (or the layers rebuilt smaller).

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：TorchScript 和 XLA 是 PyTorch 用来做稀疏训练的工具。实际情况是：两者都是**编译器**，都不会把任何一个权重置零。TorchScript（`torch.jit`，现已弃用：在这一课所需的 torch 版本中，`torch.jit.script` 和 `torch.jit.trace` 会发出警告，说它们已被弃用，并建议改用 `torch.compile` 和 `torch.export`）把模型转换成一个不依赖 Python 也能运行的计算图；XLA 为 TPU 之类的加速器编译这样的计算图（在 PyTorch 中通过独立的 `torch_xla` 包使用）。稀疏性来自**剪枝**，也就是这一节所做的事：上面已经数过零的个数，与要求的完全一致。而零本身什么也节省不了：刚才打印出的大小表明，剪掉 90% 的模型保存下来的字节数与未剪枝的模型相同，除非把权重存成稀疏格式（或者把各层重建得更小）。

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
# ## 3. Compressing the gradients DDP sends
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
# ## 3. 压缩 DDP 发送的梯度
#
# 训练时，每一步每个 rank 都要对它的全部梯度做 all-reduce：这里是 8.5 万个 float32 数，每步 340 kB。DDP 的**通信钩子**（communication hook）可以用你自己的函数替换这次 all-reduce。torch 自带 `fp16_compress_hook` 和 `bf16_compress_hook`：把梯度桶转换成 16 位，做 all-reduce，再转换回来。`CommCounter` 包装了它们，并统计字节数。
#
# - **fp16** 显式存储 10 位尾数（加上隐含的前导 1，共 11 位有效位），但范围很小（最大 65504，最小约 6·10⁻⁸）；
# - **bf16** 保留 float32 的范围，但只显式存储 7 位尾数（加上隐含的前导 1，共 8 位有效位；float32 存储 23 位）。
#
# 三次运行从同一个起点出发，使用同样的批次、同样的顺序：只有钩子不同。（仪表盘会依次显示这三次运行。）

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
loss = {n: [sum(r[n]["losses"][s] for r in runs) / 4 for s in range(steps)] for n in names}
sent = {n: runs[0][n]["sent"] for n in names}
per_step = {n: sent[n][-1] / steps for n in names}
late = {n: sum(loss[n][-20:]) / 20 for n in names}        # mean loss over the last 20 steps

assert per_step["fp16"] == per_step["bf16"] == per_step["fp32"] / 2    # exactly half the bytes
assert all(r[n]["spread"] == 0.0 for r in runs for n in names)          # ranks still identical
assert all(abs(late[n] - late["fp32"]) < 0.1 * late["fp32"] for n in names), late
assert all(abs(runs[0][n]["accuracy"] - runs[0]["fp32"]["accuracy"]) < 0.03 for n in names)
drift = {n: max(abs(a - b) for a, b in zip(loss[n], loss["fp32"])) for n in names}
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
         ylabel=say("loss (mean of 4 ranks)", "损失（4 个 rank 的平均）"), title=say("Training loss", "训练损失")),
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

# %%
%ddp_stop
