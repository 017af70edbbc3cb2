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
# **简介。** 训练好的网络在两个地方带着多余的精度：要发布的**模型**，以及训练时各 rank 之间
# 交换的**梯度**。这一课先用 DDP 训练一个小 MLP，再用三种方法压缩。**剪枝**把最小的权重置零：
# 4 个 rank 分担不同的稀疏度，一起画出准确率随稀疏度的变化。**动态 int8 量化**用 8 位而不是
# 32 位保存 Linear 层的权重：对比模型大小、准确率和推理时间。**梯度通信压缩**在 all-reduce 之前
# 把 DDP 的梯度桶转换为 16 位：字节数减半，训练几乎不变。
#
# **You will see:** accuracy against sparsity (global and per-layer pruning), float32 vs int8
# size / accuracy / latency, and loss curves and bytes sent with fp32, fp16 and bf16 gradients.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## A model to compress
#
# 12,000 samples of `synthetic_classification` (64 features, 10 classes): 10,000 to train on, the
# last 2,000 held out as a test set no rank trains on. The model is `mlp(64, 256, 10)`: three Linear
# layers, 85 k parameters. DDP training as in lessons 2 and 3: `DistributedSampler` gives each rank
# a quarter of each epoch, in batches of 64 per rank (256 in all); 6 epochs, a few seconds.

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from ddplab.workloads import synthetic_classification, mlp
from ddplab.lessons.ranks import param_spread

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
print(f"test accuracy {base_accuracy:.1%}, parameters differ across ranks by {spread}")

# %%
base_accuracy = %ddp_gather base_accuracy
spread = %ddp_gather spread
base_accuracy = base_accuracy[0]
assert spread == [0.0] * 4 and base_accuracy > 0.8
print(f"every rank holds the same trained model: {base_accuracy:.1%} on the 2,000 held-out samples")

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
# gathers the results.

# %%
%%ddp
import copy
import torch.nn.utils.prune as prune

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
                            sizes=[m.weight.numel() for m in layers]))
print(", ".join(f"{r['how']} {r['amount']:.0%}: {r['accuracy']:.1%}" for r in results))

# %% [markdown]
# Check that pruning did what it says: after `prune.remove`, exactly the requested fraction of the
# weights is zero (per layer for per-layer pruning, over all layers for global pruning), and 0 %
# pruning changes nothing. Then the picture.

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
print(f"zeros exactly as requested. Global pruning at 90% removes {', '.join(share)} of layers 1, 2, 3; "
      f"accuracy at 90%: global {at['global', 0.9]:.1%}, per layer {at['per layer', 0.9]:.1%} "
      f"(unpruned {base_accuracy:.1%})")
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
# i.e. neurons, so the layer can be rebuilt smaller).

# %% [markdown]
# ## 2. Dynamic int8 quantization
#
# `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)` replaces each
# Linear layer by one that stores its weights as 8-bit integers (plus a scale) and, at inference,
# quantizes each batch of activations on the fly ("dynamic"). It exists and works in torch 2.13,
# but torch marks the whole `torch.ao.quantization` module deprecated in favour of **torchao**, a
# separate package (`torchao.quantization.quantize_` with `Int8DynamicActivationInt8WeightConfig`);
# the cell below silences that warning.
#
# This runs on rank 0 only (`%%ddp --ranks 0`): one model to convert, and the 3 other ranks stay
# idle so they do not compete with the timing for this machine's 2 cores. Size is the bytes of the
# saved `state_dict`; latency the time to classify the 2,000 test samples.

# %%
%%ddp --ranks 0
import io
import statistics
import time
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)   # "torch.ao.quantization is deprecated"
    warnings.simplefilter("ignore", UserWarning)          # quantized tensor types, same reason
    int8 = torch.ao.quantization.quantize_dynamic(trained, {nn.Linear}, dtype=torch.qint8)

def saved_bytes(net):
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    return buffer.getbuffer().nbytes

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
print(int8)

# %%
# %ddp_gather evaluates an expression on every rank: ranks 1-3 have no `quantized`, so they give None
quantized = %ddp_gather quantized if rank == 0 else None
quantized = quantized[0]
f32, i8 = quantized["float32"], quantized["int8"]
assert i8["bytes"] < 0.35 * f32["bytes"]                  # 1 byte a weight instead of 4 (biases stay float)
assert abs(i8["accuracy"] - f32["accuracy"]) < 0.02
print(f"int8: {i8['bytes'] / 1e3:.0f} kB instead of {f32['bytes'] / 1e3:.0f} kB "
      f"({f32['bytes'] / i8['bytes']:.1f}x smaller), accuracy {i8['accuracy']:.1%} vs {f32['accuracy']:.1%}, "
      f"{1e3 * i8['seconds']:.1f} ms vs {1e3 * f32['seconds']:.1f} ms for 2,000 samples "
      f"({f32['seconds'] / i8['seconds']:.1f}x the speed)")
draw.bars(None, panels=[
    dict(values={k: v["bytes"] / 1e3 for k, v in quantized.items()}, ylabel="kB",
         title=say("Saved size", "保存后的大小")),
    dict(values={k: 100 * v["accuracy"] for k, v in quantized.items()}, ylabel="%",
         title=say("Test accuracy", "测试准确率")),
    dict(values={k: 1e3 * v["seconds"] for k, v in quantized.items()}, ylabel=say("ms", "毫秒"),
         title=say("Time for 2,000 samples", "2000 个样本的推理时间"))])

# %% [markdown]
# Almost four times smaller (the biases and the scales stay float) at the same accuracy. The speed
# depends on the CPU (its int8 instructions) and on the layer sizes, since each batch of activations
# must be quantized first: the numbers above are this machine's. Dynamic quantization suits Linear
# and LSTM layers on CPU; convolutions need *static* quantization, which also calibrates the
# activations' range on sample data.

# %% [markdown]
# ## 3. Compressing the gradients DDP sends
#
# During training, each step every rank all-reduces all of its gradients: 85 k float32 numbers,
# 340 kB per step here. A DDP **communication hook** replaces that all-reduce with your own
# function. torch ships `fp16_compress_hook` and `bf16_compress_hook`: cast the gradient bucket to
# 16 bits, all-reduce it, cast back. `CommCounter` wraps them and counts the bytes.
#
# - **fp16** keeps 10 bits of mantissa but a small range (up to 65504, down to about 6·10⁻⁸);
# - **bf16** keeps float32's range but only 7 bits of mantissa.
#
# Three runs from the same start, on the same batches, in the same order: only the hook differs.
# (The dashboard shows the three runs one after another.)

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
print(", ".join(f"{name}: {run['sent'][-1] / len(run['sent']) / 1e3:.0f} kB per step, {run['seconds']:.1f} s"
                for name, run in runs.items()))

# %% [markdown]
# Each rank's loss is for its own 64 samples; averaging the 4 ranks gives the loss of the whole
# batch of 256. Left: that loss, step by step, for the three runs. Middle: how far the 16-bit runs
# drift from the float32 one (fp32's own line is 0). Right: the bytes handed to the all-reduce,
# added up (the fp16 and bf16 lines coincide).

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
print(f"{per_step['fp32'] / 1e3:.0f} kB per step with fp32, {per_step['fp16'] / 1e3:.0f} kB with fp16 and bf16; "
      f"largest loss difference from fp32: fp16 {drift['fp16']:.4f}, bf16 {drift['bf16']:.4f}; "
      "loss over the last 20 steps: " + ", ".join(f"{n} {late[n]:.3f}" for n in names) + "; test accuracy: "
      + ", ".join(f"{n} {runs[0][n]['accuracy']:.1%}" for n in names))
draw.lines(None, panels=[
    dict(series={n: (range(1, steps + 1), loss[n]) for n in names}, xlabel=say("step", "步数"),
         ylabel=say("loss (mean of 4 ranks)", "损失（4 个 rank 的平均）"), title=say("Training loss", "训练损失")),
    dict(series={n: (range(1, steps + 1), [abs(a - b) for a, b in zip(loss[n], loss["fp32"])]) for n in names},
         xlabel=say("step", "步数"), ylabel=say("|loss − fp32 loss|", "|损失 − fp32 损失|"),
         title=say("Drift from the fp32 run", "与 fp32 训练的偏差")),
    dict(series={n: (range(1, steps + 1), [b / 1e6 for b in sent[n]]) for n in names}, xlabel=say("step", "步数"),
         ylabel="MB", title=say("Gradient bytes all-reduced, in total", "累计 all-reduce 的梯度字节数"))])

# %% [markdown]
# The three loss curves lie on top of each other: the rounding moves the loss by less than a
# thousandth, a little more with bf16 (fewer mantissa bits), and the ranks still hold identical
# parameters (every rank gets the same rounded sum). Compare the seconds each run took, printed
# above: on one machine the all-reduce is a copy through memory, so halving its bytes saves little,
# and the casts to 16 bits and back cost time too. Across a real network, where communication is
# what limits data-parallel training (lesson 11), half the bytes can mean a much faster step.
# Lower precision has a price on other models: fp16 can overflow or flush tiny gradients to zero
# (bf16 does not, but rounds harder). PowerSGD (`powerSGD_hook`) compresses much further by
# sending a low-rank approximation of each gradient.

# %% [markdown]
# ## Exercises
#
# 1. Replace global L1 pruning by **structured** pruning: `prune.ln_structured(layer, "weight",
#    amount=0.5, n=2, dim=0)` removes whole output neurons. Rebuild the layers without the removed
#    rows and columns: how many parameters are left, and what accuracy?
# 2. Quantize the 90 %-pruned model. Does int8 still keep the accuracy? How large is the saved file
#    after `gzip` (`import gzip; len(gzip.compress(buffer.getvalue()))`), pruned or not?
# 3. Use `powerSGD_hook` from `torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook` with
#    `PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=10)`.
#    How does the loss compare with fp32? (Counting its bytes needs your own wrapper: a rank-1
#    approximation of an n × m matrix sends n + m numbers.)
#
# ## 练习
#
# 1. 把全局 L1 剪枝换成**结构化**剪枝：`prune.ln_structured(layer, "weight", amount=0.5, n=2, dim=0)`
#    会删除整个输出神经元。去掉被删除的行和列、重建各层：还剩多少参数？准确率是多少？
# 2. 对剪枝 90% 后的模型做量化。int8 还能保持准确率吗？用 `gzip` 压缩后，保存的文件有多大
#    （`import gzip; len(gzip.compress(buffer.getvalue()))`）？剪枝与否有何不同？
# 3. 使用 `torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook` 中的 `powerSGD_hook`，状态为
#    `PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=10)`。
#    损失与 fp32 相比如何？（统计它发送的字节需要自己写一个包装：n × m 矩阵的秩 1 近似只发送 n + m 个数。）

# %%
%ddp_stop
