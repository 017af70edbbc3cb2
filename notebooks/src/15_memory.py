# %% [markdown]
# # Lesson 15 · Memory per rank
#
# **In short.** Data parallelism copies the whole model to every rank, and not only the model: every
# rank also holds the gradients, DDP's buckets and the optimizer's state. This lesson measures all four
# on each rank, for SGD, SGD with momentum and Adam, and checks them against what you compute from the
# parameter count. It then looks at a rank's resident memory (rss), which is far larger than its
# tensors, and says why. Finally it computes what ZeRO and FSDP save by sharding these tensors across
# the ranks instead of copying them, and runs ZeRO-1 with `ZeroRedundancyOptimizer`: each rank then
# holds about 1/N of Adam's state.
#
# **You will learn**
# - what a DDP rank holds to train: parameters, gradients, DDP's buckets and optimizer state, each computed from the parameter count
# - why plain SGD keeps no optimizer state, momentum one buffer per parameter and Adam two (plus a step count)
# - what a rank's resident memory (rss) counts, and why it is much larger than the tensors it holds
# - what ZeRO-1, ZeRO-2 and ZeRO-3 / FSDP shard, and how many bytes per rank each leaves for N ranks
# - how `ZeroRedundancyOptimizer` leaves each rank about 1/N of Adam's state, measured on the ranks
#
# **Study time:** about 40 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **Memory:** about 1.1 GiB at its peak with 4 ranks. In a 1 GiB session (a classroom hub), start 2
# ranks instead: write `%ddp_start 2` where it says `%ddp_start 4`; every check holds with 2 ranks
# (about 0.7 GiB).
#
# **You will see:** each rank's parameters, gradients, buckets and optimizer state for SGD, momentum
# and Adam as stacked bars; each rank's rss split into libraries, the tensors and the rest; the bytes
# per rank of DDP, ZeRO-1, ZeRO-2 and ZeRO-3 against the number of ranks; and ZeRO-1's measured share
# of Adam's state on every rank.

# %% [markdown] lang=zh
# # 第 15 课 · 每个 rank 的内存
#
# **简而言之**：数据并行把整个模型复制到每个 rank 上，而且复制的不只是模型：每个 rank 还持有梯度、DDP 的桶和优化器状态。这一课在每个 rank 上测量这四样东西，分别针对 SGD、带动量的 SGD 和 Adam，并与你根据参数个数算出的数值核对。接着看一个 rank 的常驻内存（rss）：它远大于 rank 持有的张量，这一课会说明原因。最后计算 ZeRO 和 FSDP 把这些张量分片到各个 rank 上（而不是每个 rank 各存一份）能省下多少，并用 `ZeroRedundancyOptimizer` 实际运行 ZeRO-1：每个 rank 只保存 Adam 状态的大约 1/N。
#
# **你将学到**
# - 一个 DDP rank 训练时持有什么：参数、梯度、DDP 的桶和优化器状态，以及如何由参数个数算出每一项
# - 为什么普通 SGD 没有优化器状态，动量为每个参数保存一份缓冲区，而 Adam 保存两份（外加一个步数计数）
# - 一个 rank 的常驻内存（rss）统计的是什么，为什么它远大于 rank 持有的张量
# - ZeRO-1、ZeRO-2 和 ZeRO-3 / FSDP 各自分片哪些张量，N 个 rank 时每个 rank 还剩多少字节
# - `ZeroRedundancyOptimizer` 如何让每个 rank 只保存 Adam 状态的大约 1/N，并在各 rank 上实测
#
# **学习时间**：约 40 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **内存**：4 个 rank 时峰值约 1.1 GiB。在 1 GiB 的会话（课堂用的 hub）里，请改为启动 2 个 rank：把 `%ddp_start 4` 改成 `%ddp_start 2`；用 2 个 rank 时每项检查都成立（约 0.7 GiB）。
#
# **你将看到**：SGD、动量和 Adam 下每个 rank 的参数、梯度、桶和优化器状态（堆叠柱状图）；每个 rank 的 rss 拆分为库、张量和其余部分；DDP、ZeRO-1、ZeRO-2 和 ZeRO-3 每个 rank 的字节数随 rank 数的变化；以及 ZeRO-1 在每个 rank 上实测到的 Adam 状态份额。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
from matplotlib.figure import Figure


COLORS = dict(zip(["params", "grads", "buckets", "optimizer", "files", "tensors", "other"],
                  [draw.KIND_COLORS[i] for i in (0, 1, 2, 3, 4, 5, 7)]))      # one colour per kind of memory


@draw._styled                                      # the lessons' style and fonts (Chinese labels too)
def stacked(panels):
    """Stacked bars, one panel per dict: bars = {bar label: {part: value}}, parts = {part: legend label}."""
    fig = Figure(figsize=(5.6 * len(panels) + 0.6, 3.4), layout="constrained")
    for ax, spec in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        bars, parts = spec["bars"], spec["parts"]
        bottom = [0.0] * len(bars)
        for part, label in parts.items():
            heights = [float(values.get(part, 0.0)) for values in bars.values()]
            ax.bar(range(len(bars)), heights, bottom=bottom, label=label, color=COLORS[part])
            bottom = [b + h for b, h in zip(bottom, heights)]
        for i, total in enumerate(bottom):
            ax.text(i, total, f"{total:.3g}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(bars)), list(bars), fontsize=8)
        ax.set_ylabel(spec.get("ylabel", ""))
        ax.set_title(spec.get("title", ""), loc="left", fontsize=10)
        ax.margins(y=0.12)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    return draw.Picture(fig)

# %%
%ddp_start 4

# %% [markdown]
# ## 1. Four kinds of tensors on every rank
#
# A rank that trains with DDP holds four kinds of tensors:
#
# - **parameters**: the model, the same on every rank. A float32 parameter takes 4 bytes, so *P*
#   parameters take 4·*P* bytes.
# - **gradients**: `p.grad`, one per parameter, of the same shape: 4·*P* bytes more once `backward()`
#   has run.
# - **DDP's buckets**: DDP packs the gradients into flat buckets to all-reduce them (lessons 2 and 12).
#   By default (`gradient_as_bucket_view=False`) the buckets are a second copy of the gradients:
#   `backward()` writes `p.grad`, DDP copies it into its bucket, all-reduces the bucket and copies the
#   average back.
# - **optimizer state**: what the optimizer keeps between steps. Plain SGD keeps nothing. With
#   momentum, SGD keeps one `momentum_buffer` per parameter. Adam keeps two (`exp_avg` and
#   `exp_avg_sq`, running averages of the gradient and of its square), plus its `step` count: one
#   float32 number per parameter *tensor* (a tensor of one element).
#
# ddplab measures them for you. At the end of every `%%ddp` cell each rank adds up the bytes of the
# models and optimizers its namespace holds (each tensor once, from the objects themselves), and its
# resident memory; `tl = %ddp_timeline` then has them in `tl.memory`, one row per rank. The model is 8
# linear layers of 512 × 512 with ReLU between them; each rank trains it for 5 steps on its own batch.
# One cell per optimizer: rebinding `model` and `opt` drops the previous ones from the namespace, so
# each cell's figures are those of one model and one optimizer.

# %% [markdown] lang=zh
# ## 1. 每个 rank 上的四类张量
#
# 用 DDP 训练的 rank 持有四类张量：
#
# - **参数**：模型本身，每个 rank 上都一样。一个 float32 参数占 4 字节，所以 *P* 个参数占 4·*P* 字节。
# - **梯度**：`p.grad`，每个参数一个，形状与参数相同：`backward()` 运行之后又多出 4·*P* 字节。
# - **DDP 的桶**：DDP 把梯度装进扁平的桶里做 all-reduce（第 2 课和第 12 课）。默认情况下（`gradient_as_bucket_view=False`），桶是梯度的第二份拷贝：`backward()` 写入 `p.grad`，DDP 把它拷进自己的桶，对桶做 all-reduce，再把平均值拷回去。
# - **优化器状态**：优化器在两步之间保存的东西。普通 SGD 什么也不保存。带动量时，SGD 为每个参数保存一个 `momentum_buffer`。Adam 保存两个（`exp_avg` 和 `exp_avg_sq`，分别是梯度及其平方的滑动平均），外加它的步数 `step`：每个参数*张量*一个 float32 数（一个只有一个元素的张量）。
#
# ddplab 会替你测量它们。每个 `%%ddp` 单元格结束时，每个 rank 把自己命名空间中所有模型和优化器的字节数加起来（每个张量只算一次，直接从对象本身读取），并记下自己的常驻内存；之后 `tl = %ddp_timeline` 的 `tl.memory` 中就有这些数字，每个 rank 一行。模型是 8 个 512 × 512 的线性层，层与层之间是 ReLU；每个 rank 在自己的批次上训练 5 步。每种优化器用一个单元格：重新绑定 `model` 和 `opt` 会把之前的模型和优化器从命名空间中去掉，所以每个单元格的数字只对应一个模型和一个优化器。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

WIDTH, LAYERS, STEPS = 512, 8, 5
torch.manual_seed(rank)
x, target = torch.randn(32, WIDTH), torch.randn(32, WIDTH)    # this rank's batch

def make_model():
    torch.manual_seed(0)                                       # the same model on every rank
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers)

def train(model, opt):
    for _ in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()                                        # DDP all-reduces the buckets in here
        opt.step()
        ddplab.log(loss=loss, samples=len(x))

model = DDP(make_model())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train(model, opt)
P = sum(p.numel() for p in model.parameters())                # parameters
T = len(list(model.parameters()))                             # parameter tensors: 8 weights, 8 biases
size = next(model.parameters()).element_size()                # bytes per parameter
print(say(f"{P:,} parameters in {T} tensors, {size} bytes each: {size * P / 1e6:.2f} MB",
          f"{P:,} 个参数，分布在 {T} 个张量中，每个 {size} 字节：{size * P / 1e6:.2f} MB"))

# %%
tl = %ddp_timeline
held = {"SGD": tl.memory}
tl.memory.rename(columns=say({}, {"params": "参数 params", "grads": "梯度 grads", "buckets": "桶 buckets",
                                  "optimizer": "优化器状态 optimizer"}))   # (in Chinese: the headers say both)

# %% [markdown]
# The same model (same seed) with momentum, then with Adam. After Adam's run each rank also keeps its
# trained parameters as one flat tensor, `after_adam`, to compare with ZeRO in part 3. A plain tensor
# is not a model or an optimizer: ddplab's figures do not count it.

# %% [markdown] lang=zh
# 同一个模型（同一个随机种子）先配上动量，再配上 Adam。Adam 训练完之后，每个 rank 还把训练好的参数保存成一个扁平张量 `after_adam`，以便在第 3 部分与 ZeRO 比较。普通张量既不是模型也不是优化器：ddplab 的数字不统计它。

# %%
%%ddp
model = DDP(make_model())
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
train(model, opt)

# %%
tl = %ddp_timeline
held["SGD + momentum"] = tl.memory

# %% [markdown]
# **Predict, then run.** With DDP and Adam, how many bytes per parameter does each rank hold:
# parameters, gradients, DDP's buckets and Adam's state together? Write a number of bytes per
# parameter before you run the Adam cell below.

# %% [markdown] lang=zh
# **先预测，再运行。** 使用 DDP 和 Adam 时，每个 rank 为每个参数持有多少字节（参数、梯度、DDP 的桶和 Adam 的状态加在一起）？在运行下面 Adam 的单元格之前，写下一个数：每个参数的字节数。

# %%
predict("15.adam", ...)    # bytes per parameter on each rank, DDP + Adam, all four kinds together

# %%
%%ddp
model = DDP(make_model())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
train(model, opt)
after_adam = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
kinds = sorted(next(iter(opt.state.values())))               # what Adam keeps for each parameter tensor
print(say(f"Adam's state for each parameter tensor: {kinds}", f"Adam 为每个参数张量保存的状态：{kinds}"))

# %%
tl = %ddp_timeline
held["Adam"] = tl.memory

# %% [markdown]
# Now compute what each rank should hold from *P* and *T* alone, and check it against what every rank
# measured: parameters, gradients and buckets 4·*P* bytes each; optimizer state 0 for SGD, 4·*P* for
# momentum, 2 · 4·*P* + 4·*T* for Adam.

# %% [markdown] lang=zh
# 现在只根据 *P* 和 *T* 算出每个 rank 应该持有多少，再与每个 rank 的实测值核对：参数、梯度和桶各 4·*P* 字节；优化器状态在 SGD 下为 0，动量下为 4·*P*，Adam 下为 2 · 4·*P* + 4·*T*。

# %%
sizes = %ddp_gather (P, T)
P, T = sizes[0]
expected = {"SGD": 0, "SGD + momentum": 4 * P, "Adam": 2 * 4 * P + 4 * T}
for name, frame in held.items():
    for row in frame.itertuples():
        assert row.params == 4 * P and row.grads == 4 * P, (name, row)             # 4 bytes per parameter
        assert abs(row.buckets - row.grads) <= 0.01 * row.grads, (name, row)       # buckets: a copy of the grads
        assert row.optimizer == expected[name], (name, row, expected[name])        # exactly what we computed
names = {"SGD": "SGD", "SGD + momentum": say("SGD + momentum", "SGD + 动量"), "Adam": "Adam"}
for name, frame in held.items():
    row = frame.iloc[0]
    total = row.params + row.grads + row.buckets + row.optimizer
    print(say(f"{names[name]:<15} every rank: parameters {row.params / 1e6:.2f} MB, gradients {row.grads / 1e6:.2f} MB, "
              f"buckets {row.buckets / 1e6:.2f} MB, optimizer state {row.optimizer / 1e6:.2f} MB: "
              f"{total / 1e6:.2f} MB, {total / P:.0f} bytes per parameter",
              f"{names[name]:<15} 每个 rank：参数 {row.params / 1e6:.2f} MB，梯度 {row.grads / 1e6:.2f} MB，"
              f"桶 {row.buckets / 1e6:.2f} MB，优化器状态 {row.optimizer / 1e6:.2f} MB："
              f"共 {total / 1e6:.2f} MB，每个参数 {total / P:.0f} 字节"))
reveal("15.adam", float(held["Adam"].iloc[0][["params", "grads", "buckets", "optimizer"]].sum() / P),
       unit=say("bytes per parameter", "字节/参数"))
parts = {"params": say("parameters", "参数"), "grads": say("gradients", "梯度"),
         "buckets": say("DDP buckets", "DDP 的桶"), "optimizer": say("optimizer state", "优化器状态")}
stacked([dict(bars={names[n]: {k: f.iloc[0][k] / 1e6 for k in parts} for n, f in held.items()}, parts=parts,
              ylabel="MB", title=say("What one rank holds to train (every rank the same)",
                                     "一个 rank 训练时持有的张量（每个 rank 都一样）"))])

# %% [markdown]
# **A common claim / what actually happens.** A common claim: Adam doubles a model's memory. What
# actually happens: Adam's state is twice the *parameters*, but the parameters are only part of what a
# rank holds. With DDP and Adam every rank held 4 + 4 + 4 + 8 = 20 bytes per parameter in this run
# (the printout above): 5 times the model. And the momentum run shows that "the optimizer" is not one
# fixed cost: plain SGD keeps nothing at all.
#
# The buckets' copy can go: `DDP(model, gradient_as_bucket_view=True)` makes each `p.grad` a view into
# its bucket, which, says torch's documentation, saves as much memory as the gradients take. (ddplab's
# table then counts those bytes once, as gradients, and shows no buckets.)

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：Adam 会让模型占用的内存翻倍。实际情况是：Adam 的状态是*参数*的两倍，但参数只是一个 rank 所持有内容的一部分。在这次运行中，使用 DDP 和 Adam 时每个 rank 每个参数要占 4 + 4 + 4 + 8 = 20 字节（见上面的输出）：是模型本身的 5 倍。而动量那次运行说明，“优化器”并不是一笔固定的开销：普通 SGD 根本不保存任何东西。
#
# 桶的那份拷贝是可以省掉的：`DDP(model, gradient_as_bucket_view=True)` 让每个 `p.grad` 成为其所在桶的一个视图（view），torch 的文档说，这样省下的内存与梯度所占的一样多。（打开这个选项时，ddplab 的表格只把这些字节算一次，记作梯度，桶那一栏为 0。）

# %% [markdown]
# ## 2. Resident memory: much more than the tensors
#
# The `rss` column is each rank's **resident set size**: the bytes of the process's memory that sit
# in RAM right now, whatever they hold. Put it beside the tensors that ddplab counted:

# %% [markdown] lang=zh
# ## 2. 常驻内存：远多于张量
#
# `rss` 一列是每个 rank 的**常驻内存**（resident set size）：进程的内存中此刻位于物理内存（RAM）里的字节数，不管里面装的是什么。把它和 ddplab 统计的张量放在一起看：

# %% [markdown]
# **Predict, then run.** After the Adam cell, rank 0's rss is how many times the tensors ddplab
# counted on it (parameters, gradients, buckets and Adam's state)? Write a number: 1 means rss is
# the tensors and nothing more.

# %% [markdown] lang=zh
# **先预测，再运行。** Adam 的单元格运行之后，rank 0 的 rss 是 ddplab 在它上面统计到的张量（参数、梯度、桶和 Adam 的状态）的多少倍？写一个数：1 表示 rss 就是这些张量，没有别的。

# %%
predict("15.rss", ...)    # rank 0's rss after the Adam cell, as a multiple of the tensors ddplab counted

# %%
frame = held["Adam"]
tensors = frame.params + frame.grads + frame.buckets + frame.optimizer
for row, t in zip(frame.itertuples(), tensors):
    print(say(f"rank {row.rank}: rss {row.rss / 1e6:.0f} MB, of which tensors {t / 1e6:.1f} MB "
              f"({100 * t / row.rss:.0f}%): rss is {row.rss / t:.1f}x the tensors",
              f"rank {row.rank}：rss {row.rss / 1e6:.0f} MB，其中张量 {t / 1e6:.1f} MB（{100 * t / row.rss:.0f}%）："
              f"rss 是张量的 {row.rss / t:.1f} 倍"))
assert (frame.rss > 2 * tensors).all(), frame                  # the tensors are the smaller part
reveal("15.rss", float(frame.rss.iloc[0] / tensors.iloc[0]), unit=say("× the tensors", "× 张量"))
first, last = held["SGD"].iloc[0], frame.iloc[0]
more_rss = (last.rss - first.rss) / 1e6
more_tensors = (last.optimizer - first.optimizer) / 1e6        # the rest was the same in both cells
print(say(f"rank 0, from the SGD cell to the Adam cell: the tensors grew by {more_tensors:.1f} MB, rss by "
          f"{more_rss:.1f} MB",
          f"rank 0，从 SGD 的单元格到 Adam 的单元格：张量增加了 {more_tensors:.1f} MB，rss 增加了 {more_rss:.1f} MB"))
if more_rss > 1.5 * more_tensors:
    print(say("rss grew more than the tensors: memory freed with the earlier cells' models need not go back to the "
              "operating system (the allocator may keep it for reuse), and code run for the first time, such as "
              "Adam's, allocates memory of its own.",
              "rss 增加得比张量多：随前面单元格的模型一起释放的内存不一定还给操作系统（分配器可能留着以后再用），"
              "而第一次运行的代码（比如 Adam 的）也会分配自己的内存。"))
elif more_rss < 0.5 * more_tensors:
    print(say("rss grew less than the tensors: Adam's state could reuse memory that the earlier cells' models had "
              "freed and the allocator had kept.",
              "rss 增加得比张量少：Adam 的状态可以重用前面单元格的模型释放后、分配器仍然留着的内存。"))
else:
    print(say("rss grew by about as much as the tensors this time, but it does not follow them one for one.",
              "这一次 rss 增加的量与张量差不多，但它并不与张量一一对应。"))

# %% [markdown]
# Where does the rest go? On Linux, `/proc/self/status` splits rss in two: **file-backed** pages
# (`RssFile`: the code and data of the program and its libraries, read from their files) and
# **anonymous** pages (`RssAnon`: memory the process allocated, tensors among it). psutil's
# `memory_maps()` says which files take most. The cell below also checks what rss counts: it asks
# torch for an empty 64 MiB tensor, then writes it, then deletes it, and reads rss after each.

# %% [markdown] lang=zh
# 其余的内存去哪儿了？在 Linux 上，`/proc/self/status` 把 rss 分成两部分：**文件映射**的页（`RssFile`：程序及其库的代码和数据，从它们的文件读入）和**匿名**页（`RssAnon`：进程自己分配的内存，张量也在其中）。psutil 的 `memory_maps()` 可以告诉我们哪些文件占得最多。下面的单元格还检验 rss 统计的到底是什么：先向 torch 要一个 64 MiB 的空张量，然后写满它，最后删除它，每一步之后都读一次 rss。

# %%
%%ddp
import os
import psutil

me = psutil.Process()
before = me.memory_info().rss
big = torch.empty(64 * 2**20 // 4)            # 64 MiB of float32, allocated, not written yet
allocated = me.memory_info().rss
big.fill_(1.0)                                 # every page written
written = me.memory_info().rss
del big
freed = me.memory_info().rss
growth = [(v - before) / 2**20 for v in (allocated, written, freed)]     # MiB more than before

split = {}
if os.path.exists("/proc/self/status"):        # Linux: how rss splits
    for line in open("/proc/self/status"):
        if line.startswith(("RssAnon:", "RssFile:")):
            key, value = line.split(":")
            split[key] = int(value.split()[0]) * 1024                     # kB -> bytes
files = []
try:
    for m in me.memory_maps(grouped=True):
        if m.path.startswith("/") and os.path.isfile(m.path):
            files.append((m.rss, os.path.getsize(m.path), os.path.basename(m.path)))
except (AttributeError, psutil.Error):           # not on every system
    pass
files = sorted(files, reverse=True)[:3]
try:
    unique = me.memory_full_info().uss         # the pages no other process shares
except (AttributeError, psutil.Error):
    unique = None
print(say(f"64 MiB tensor: rss {growth[0]:+.1f} MiB when allocated, {growth[1]:+.1f} MiB once written, "
          f"{growth[2]:+.1f} MiB after del",
          f"64 MiB 的张量：分配后 rss 变化 {growth[0]:+.1f} MiB，写满后 {growth[1]:+.1f} MiB，del 之后 {growth[2]:+.1f} MiB"))

# %%
tl = %ddp_timeline
now = tl.memory
found = %ddp_gather (growth, split, files, unique)
growth, split, files, unique = found[0]
assert all(g[0] < 32 and g[1] > 60 for g, *_ in found), [g for g, *_ in found]   # pages count once written
print(say(f"rank 0: with a 64 MiB tensor, rss moved {growth[0]:+.1f} MiB when it was allocated and {growth[1]:+.1f} MiB "
          "once it was written: rss counts the pages written, not the bytes asked for.",
          f"rank 0：有了一个 64 MiB 的张量，分配时 rss 变化 {growth[0]:+.1f} MiB，写满后变化 {growth[1]:+.1f} MiB："
          "rss 统计的是写过的页，而不是申请的字节数。"))
after_del = [g[2] for g, *_ in found]                 # MiB above the start, after del, on each rank
lo, hi = f"{min(after_del):+.1f}", f"{max(after_del):+.1f}"
spread = (say(f"{lo} MiB on each of the {len(found)} ranks", f"{len(found)} 个 rank 上都是 {lo} MiB") if lo == hi else
          say(f"on the {len(found)} ranks: {lo} to {hi} MiB", f"{len(found)} 个 rank 上为 {lo} 到 {hi} MiB"))
if max(abs(a) for a in after_del) < 8:
    print(say(f"After del, rss was back where it started, give or take what else the process allocated or freed "
              f"meanwhile ({spread}): a block this large came straight from the operating system and went straight back.",
              f"del 之后，rss 回到了开始时的水平，差别只在于这期间进程另外分配或释放的内存（{spread}）："
              "这么大的内存块是直接向操作系统要的，释放时也直接还给了操作系统。"))
else:
    print(say(f"After del, rss stayed higher on some rank ({spread}): the allocator kept the freed block for later "
              "tensors instead of giving it back to the operating system.",
              f"del 之后，在某个 rank 上 rss 仍然更高（{spread}）：分配器把释放的内存块留给以后的张量，而没有还给操作系统。"))
if files:
    print(say("largest files in rank 0's rss: ", "rank 0 的 rss 中占用最多的文件：")
          + say("; ", "；").join(say(f"{name} {r / 1e6:.0f} MB of its {size / 1e6:.0f} MB",
                                    f"{name} {r / 1e6:.0f} MB（文件共 {size / 1e6:.0f} MB）") for r, size, name in files))
bars = {}
for (_, split_r, _, _), row in zip(found, now.itertuples()):
    counted = row.params + row.grads + row.buckets + row.optimizer
    if split_r:
        bars[f"rank {row.rank}"] = {"files": split_r["RssFile"] / 1e6, "tensors": counted / 1e6,
                                    "other": (row.rss - split_r["RssFile"] - counted) / 1e6}
    else:
        bars[f"rank {row.rank}"] = {"tensors": counted / 1e6, "other": (row.rss - counted) / 1e6}
if split:
    print(say(f"rank 0: rss {now.rss[0] / 1e6:.0f} MB = files {split['RssFile'] / 1e6:.0f} MB + anonymous "
              f"{split['RssAnon'] / 1e6:.0f} MB (read a moment apart), of which the model's tensors "
              f"{bars['rank 0']['tensors']:.0f} MB",
              f"rank 0：rss {now.rss[0] / 1e6:.0f} MB = 文件映射 {split['RssFile'] / 1e6:.0f} MB + 匿名 "
              f"{split['RssAnon'] / 1e6:.0f} MB（两次读取相隔片刻），其中模型的张量 {bars['rank 0']['tensors']:.0f} MB"))
else:
    print(say("this system does not say how rss splits (no /proc/self/status): the picture shows tensors and the rest",
              "这个系统不提供 rss 的拆分（没有 /proc/self/status）：图中只分张量和其余部分"))
if unique is not None:
    print(say(f"rank 0: {unique / 1e6:.0f} MB of its {now.rss[0] / 1e6:.0f} MB of rss is its own (uss: pages no other "
              f"process shares); the other {(now.rss[0] - unique) / 1e6:.0f} MB are pages it shares with other processes",
              f"rank 0：它 {now.rss[0] / 1e6:.0f} MB 的 rss 中有 {unique / 1e6:.0f} MB 是它独有的（uss：没有其他进程共享的页）；"
              f"其余 {(now.rss[0] - unique) / 1e6:.0f} MB 是它与其他进程共享的页"))
stacked([dict(bars=bars, parts={"files": say("files (libraries, program)", "文件映射（库、程序）"),
                                 "tensors": say("model's tensors (ddplab)", "模型的张量（ddplab）"),
                                 "other": say("other anonymous memory", "其余匿名内存")},
              ylabel="MB", title=say("Resident memory (rss) of each rank", "每个 rank 的常驻内存（rss）"))])

# %% [markdown]
# What is in "the rest", on every rank, before any model exists:
#
# - **libraries**: torch's compiled code, above all `libtorch_cpu.so`, the library of every CPU operator,
#   and Python's own. Only the pages a rank has touched count (compare each file's share in rss with its
#   size above). These pages are read from the same files, so the operating system shares them between
#   the ranks: adding up the 4 ranks' rss counts them 4 times.
# - **pages shared since the fork**: by default ddplab starts the ranks on this machine by forking them from one
#   process that imported torch first (its fork server, `ddplab/processes/zygote.py`). What that process had in
#   memory, each rank shares with it until the rank writes a page. rss counts shared pages in full in
#   every process; `uss` (printed above where the system reports it) counts only a rank's own.
# - **Python and torch's own objects**: every imported module (torch imports hundreds), torch's table of
#   operators and their kernels, the interpreter's objects, the engine that runs `%%ddp` cells, the
#   threads' stacks.
# - **the allocator**: torch asks the C library's allocator for a tensor's memory. Large blocks, like the
#   64 MiB one, come straight from the operating system and count only once written; small ones are
#   carved from a heap that may keep freed memory for reuse, so rss does not always fall when a tensor is
#   freed.
#
# **A common claim / what actually happens.** A common claim: a rank's memory use (its rss) is its model
# and optimizer. What actually happens: in this run the model's tensors were a fraction of each rank's
# rss (printed above); most of it is torch and Python themselves, the same whatever the model, and much of
# it shared with the other ranks (a rank's uss, printed above, is what it has to itself). For a large
# model the tensors dominate: each rank pays for them in full, and they are what ZeRO and FSDP shard.

# %% [markdown] lang=zh
# 在还没有任何模型之前，每个 rank 上的“其余部分”就已经包括：
#
# - **库**：torch 编译好的代码，首先是 `libtorch_cpu.so`（所有 CPU 算子所在的库），以及 Python 自己的库。只有 rank 访问过的页才计入（对比上面每个文件在 rss 中的份额和文件的大小）。这些页读自同样的文件，所以操作系统让各 rank 共享它们：把 4 个 rank 的 rss 加起来，会把它们算 4 次。
# - **fork 之后仍共享的页**：默认情况下，ddplab 在本机启动各 rank 的方式，是从一个先导入了 torch 的进程（它的 fork 服务器，`ddplab/processes/zygote.py`）fork 出它们。那个进程内存中已有的东西，每个 rank 都与它共享，直到 rank 写了那一页为止。rss 在每个进程中都把共享的页算作完整的一份；`uss`（系统提供时见上面的输出）只统计一个 rank 独有的页。
# - **Python 和 torch 自己的对象**：每个导入的模块（torch 会导入几百个），torch 的算子及其内核的注册表，解释器的对象，运行 `%%ddp` 单元格的引擎，以及各线程的栈。
# - **分配器**：torch 向 C 库的分配器申请张量的内存。大块内存（比如那个 64 MiB 的）直接来自操作系统，写过之后才计入；小块则从堆中切出，堆可能把释放的内存留着以后再用，所以释放一个张量时 rss 不一定下降。
#
# **常见说法 / 实际情况。** 一种常见的说法是：一个 rank 占用的内存（它的 rss）就是它的模型和优化器。实际情况是：在这次运行中，模型的张量只占每个 rank 的 rss 的一小部分（见上面的输出）；大部分是 torch 和 Python 本身，与模型无关，而且其中很多是与其他 rank 共享的（上面输出的 uss 才是一个 rank 独有的部分）。对于大模型，张量才是大头：每个 rank 都要为它们付出完整的一份，而 ZeRO 和 FSDP 分片的正是它们。

# %% [markdown]
# ## 3. What ZeRO and FSDP shard
#
# With DDP, all N ranks hold the same parameters, gradients and optimizer state: N copies of each.
# **ZeRO** (Zero Redundancy Optimizer, from DeepSpeed) removes the copies in three stages; each rank keeps
# only its 1/N share of:
#
# - **ZeRO-1**: the optimizer state. Each rank updates only its share of the parameters, then the
#   updated parameters are all-gathered, so that every rank has all of them again.
# - **ZeRO-2**: the optimizer state and the gradients. The gradients are reduce-scattered instead of
#   all-reduced: each rank receives the summed gradients of its own share only.
# - **ZeRO-3**: the optimizer state, the gradients and the parameters. A layer's parameters are
#   all-gathered just before the layer runs (forward and backward) and freed after. PyTorch's **FSDP2**,
#   `fully_shard` (`from torch.distributed.fsdp import fully_shard`), does this; lesson 19 runs it.
#   (The older FSDP1, `FullyShardedDataParallel` with `ShardingStrategy.FULL_SHARD`, is deprecated in its
#   favour.)
#
# **What they communicate.** The ZeRO paper counts the bytes of a step in units of Ψ, the model's
# parameters. DDP's all-reduce is a reduce-scatter followed by an all-gather (lesson 13's ring), about Ψ
# each ((N−1)/N · Ψ exactly): 2Ψ per rank and step. ZeRO-1 and ZeRO-2 keep that volume: they reduce-scatter the gradients
# (each rank needs the sums of its own share only), update their share, and all-gather the updated
# parameters: Ψ + Ψ, the same 2Ψ as DDP. Only ZeRO-3 costs more, 3Ψ (1.5 times DDP's): the parameters
# are all-gathered in the forward and again in the backward, and the gradients reduce-scattered.
#
# From the figures measured with Adam (*p*, *g*, *s*: a rank's parameters, gradients and optimizer
# state), a rank holds p + g + s with DDP, p + g + s/N with ZeRO-1, p + (g + s)/N with ZeRO-2 and
# (p + g + s)/N with ZeRO-3. These are what the ZeRO paper calls the *model states* (buckets, the
# gathered layers of ZeRO-3 and the activations are working memory on top). The paper counts their
# bytes for mixed-precision training, though: with Adam, 2 + 2 + 12 = 16 bytes per parameter, for the
# fp16 parameters (2), the fp16 gradients (2) and an fp32 master copy of the parameters, Adam's momentum
# and its variance (4 + 4 + 4 = 12). This lesson trains in float32: 4 + 4 + 8 = 16 bytes per parameter,
# for the parameters, the gradients and Adam's two states. The totals happen to be the same; the parts
# are not: what ZeRO-1 shards is 12 of the paper's 16 bytes, and 8 of this lesson's.

# %% [markdown] lang=zh
# ## 3. ZeRO 和 FSDP 分片什么
#
# 使用 DDP 时，所有 N 个 rank 持有同样的参数、梯度和优化器状态：每样都有 N 份。**ZeRO**（Zero Redundancy Optimizer，零冗余优化器，出自 DeepSpeed）分三个阶段去掉这些副本；每个 rank 只保留下面这些张量中属于自己的 1/N：
#
# - **ZeRO-1**：优化器状态。每个 rank 只更新属于自己的那一份参数，然后用 all-gather 收集更新后的参数，让每个 rank 重新拥有全部参数。
# - **ZeRO-2**：优化器状态和梯度。梯度不再做 all-reduce，而是做 reduce-scatter：每个 rank 只收到属于自己那一份的梯度之和。
# - **ZeRO-3**：优化器状态、梯度和参数。一层的参数在这一层运行（前向和反向）之前才用 all-gather 收集起来，用完就释放。PyTorch 的 **FSDP2**，即 `fully_shard`（`from torch.distributed.fsdp import fully_shard`），做的就是这个；第 19 课会实际运行它。（较早的 FSDP1，即 `FullyShardedDataParallel` 配合 `ShardingStrategy.FULL_SHARD`，已被弃用，由它取代。）
#
# **它们通信多少。** ZeRO 论文以 Ψ（模型的参数量）为单位统计一步的通信量。DDP 的 all-reduce 就是一次 reduce-scatter 加一次 all-gather（第 13 课的环），各约为 Ψ（准确地说是 (N−1)/N · Ψ）：每个 rank 每步 2Ψ。ZeRO-1 和 ZeRO-2 保持这个通信量：它们对梯度做 reduce-scatter（每个 rank 只需要自己那一份的梯度之和），更新自己的那一份，再对更新后的参数做 all-gather：Ψ + Ψ，与 DDP 一样是 2Ψ。只有 ZeRO-3 的通信更多，为 3Ψ（是 DDP 的 1.5 倍）：参数在前向中 all-gather 一次，在反向中再 all-gather 一次，梯度再做一次 reduce-scatter。
#
# 根据 Adam 下的实测值（*p*、*g*、*s*：一个 rank 的参数、梯度和优化器状态），一个 rank 持有的字节数为：DDP 是 p + g + s，ZeRO-1 是 p + g + s/N，ZeRO-2 是 p + (g + s)/N，ZeRO-3 是 (p + g + s)/N。这些就是 ZeRO 论文所说的*模型状态*（桶、ZeRO-3 收集起来的层以及激活值，是另外的工作内存）。不过论文统计的是混合精度训练的字节数：使用 Adam 时每个参数 2 + 2 + 12 = 16 字节，即 fp16 参数（2）、fp16 梯度（2），以及参数的 fp32 主副本、Adam 的动量和方差（4 + 4 + 4 = 12）。这一课用 float32 训练：每个参数 4 + 4 + 8 = 16 字节，即参数、梯度和 Adam 的两份状态。两者的总数碰巧相同，组成却不同：ZeRO-1 分片的是论文那 16 字节中的 12 字节，而在这一课中是 8 字节。

# %%
adam = held["Adam"].iloc[0]                         # every rank holds the same (checked in part 1)
p, g, s = int(adam.params), int(adam.grads), int(adam.optimizer)
N = len(held["Adam"])                               # the ranks of this pool

def per_rank(n):
    """(parameters, gradients, optimizer state) bytes on each of n ranks."""
    return {"DDP": (p, g, s), "ZeRO-1": (p, g, s / n), "ZeRO-2": (p, g / n, s / n), "ZeRO-3 / FSDP": (p / n, g / n, s / n)}

for stage, held_by_rank in per_rank(N).items():
    print(say(f"{stage:<14} on {N} ranks: {sum(held_by_rank) / 1e6:6.2f} MB per rank "
              f"({sum(held_by_rank) / (p + g + s):.0%} of DDP's)",
              f"{stage:<14} {N} 个 rank：每个 rank {sum(held_by_rank) / 1e6:6.2f} MB（为 DDP 的 {sum(held_by_rank) / (p + g + s):.0%}）"))
ns = [1, 2, 4, 8, 16, 32, 64]
kind = ("params", "grads", "optimizer")
pic = stacked([dict(bars={stage: {k: v / 1e6 for k, v in zip(kind, states)} for stage, states in per_rank(N).items()},
                    parts={k: parts[k] for k in kind}, ylabel=say("MB per rank", "每个 rank 的 MB"),
                    title=say(f"Model states per rank, {N} ranks", f"每个 rank 的模型状态，{N} 个 rank"))])
display(pic)
draw.lines(None, panels=[dict(
    series={stage: (ns, [sum(per_rank(n)[stage]) / 1e6 for n in ns]) for stage in per_rank(1)},
    logx=True, logy=True, xlabel=say("ranks N", "rank 数 N"), ylabel=say("MB per rank", "每个 rank 的 MB"),
    title=say("Model states per rank against N (this model, Adam)", "每个 rank 的模型状态随 N 的变化（本模型，Adam）"))])

# %% [markdown]
# ZeRO-1 and ZeRO-2 level off: however many ranks, each still holds all the parameters (and, with
# ZeRO-1, all the gradients). Only ZeRO-3 keeps falling as 1/N, at the price of all-gathering every
# layer's parameters in every forward and backward.
#
# ### ZeRO-1 on the ranks: `ZeroRedundancyOptimizer`
#
# `torch.distributed.optim.ZeroRedundancyOptimizer` wraps an optimizer class and gives each rank its
# share of the parameter tensors: sorted from largest to smallest, each goes to the rank with the
# fewest parameters so far. A tensor is never split. Each rank's own optimizer (`opt.optim`, here an
# `Adam`) updates its share only, so it holds state for that share only; after every step each rank
# broadcasts its updated parameters to the others. DDP is left as it is: it still all-reduces the whole
# gradients, so every rank receives the sums of all of them, though it updates only its share.
#
# The wrapper keeps no state of its own: ddplab's memory count looks inside it and counts the state of
# this rank's Adam (`opt.optim`, named `shard` below to look at its share).

# %% [markdown] lang=zh
# ZeRO-1 和 ZeRO-2 的曲线会走平：无论有多少个 rank，每个 rank 仍然持有全部参数（ZeRO-1 还持有全部梯度）。只有 ZeRO-3 一直按 1/N 下降，代价是每次前向和反向都要对每一层的参数做 all-gather。
#
# ### 在各 rank 上运行 ZeRO-1：`ZeroRedundancyOptimizer`
#
# `torch.distributed.optim.ZeroRedundancyOptimizer` 包装一个优化器类，并把参数张量分给各个 rank：按从大到小排序，每个张量交给目前参数最少的那个 rank。一个张量从不被拆开。每个 rank 自己的优化器（`opt.optim`，这里是一个 `Adam`）只更新属于自己的那一份，所以也只为这一份保存状态；每一步之后，每个 rank 把自己更新过的参数广播给其他 rank。DDP 保持原样：它仍然对全部梯度做 all-reduce，所以每个 rank 都收到全部梯度之和，尽管它只更新自己的那一份。
#
# 包装器本身不保存状态：ddplab 统计内存时会看进它的内部，统计这个 rank 的 Adam（`opt.optim`，下面起名为 `shard`，用来查看它负责的那一份）的状态。

# %%
%%ddp
from torch.distributed.optim import ZeroRedundancyOptimizer

model = DDP(make_model())
opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
shard = opt.optim                      # this rank's Adam: its share of the parameters (and their state)
train(model, opt)
mine = [q for group in shard.param_groups for q in group["params"]]
P_mine, T_mine = sum(q.numel() for q in mine), len(mine)
gap = (torch.cat([q.detach().reshape(-1) for q in model.parameters()]) - after_adam).abs().max().item()
print(say(f"this rank updates {T_mine} of the {T} tensors ({P_mine:,} parameters); after {STEPS} steps its "
          f"parameters differ from plain Adam's by at most {gap:.1e}",
          f"这个 rank 更新 {T} 个张量中的 {T_mine} 个（{P_mine:,} 个参数）；{STEPS} 步之后，它的参数与普通 Adam "
          f"训练出的参数最多相差 {gap:.1e}"))

# %%
tl = %ddp_timeline
zero = tl.memory
shares = %ddp_gather (P_mine, T_mine, gap)
for row, (p_mine, t_mine, gap) in zip(zero.itertuples(), shares):
    assert row.params == p and row.grads == g and row.buckets == adam.buckets, row   # still whole on every rank
    assert row.optimizer == 2 * 4 * p_mine + 4 * t_mine, (row, p_mine, t_mine)     # Adam's state of its share
    assert abs(row.optimizer - s / N) <= 0.1 * s / N, (row.optimizer, s / N)        # about 1/N of Adam's
    assert gap < 1e-5, gap                                                          # the same training as Adam
assert zero.optimizer.sum() == s                     # the shares add up to one whole Adam state
for row in zero.itertuples():
    print(say(f"rank {row.rank}: optimizer state {row.optimizer / 1e6:.2f} MB = {row.optimizer / s:.3f} of Adam's "
              f"{s / 1e6:.2f} MB; everything counted {(row.params + row.grads + row.buckets + row.optimizer) / 1e6:.2f} MB "
              f"(DDP with Adam: {(p + g + adam.buckets + s) / 1e6:.2f} MB)",
              f"rank {row.rank}：优化器状态 {row.optimizer / 1e6:.2f} MB，为 Adam 的 {s / 1e6:.2f} MB 的 "
              f"{row.optimizer / s:.3f}；统计到的全部张量 {(row.params + row.grads + row.buckets + row.optimizer) / 1e6:.2f} MB"
              f"（DDP 配合 Adam：{(p + g + adam.buckets + s) / 1e6:.2f} MB）"))
stacked([dict(bars={"DDP + Adam": {k: adam[k] / 1e6 for k in parts},
                    **{f"ZeRO-1\nrank {row.rank}": {k: getattr(row, k) / 1e6 for k in parts} for row in zero.itertuples()}},
              parts=parts, ylabel="MB", title=say("Measured on each rank: Adam vs ZeRO-1", "各 rank 的实测值：Adam 与 ZeRO-1"))])

# %% [markdown]
# **A common claim / what actually happens.** A common claim: ZeRO-1 divides a rank's memory by N. What
# actually happens: it divides the *optimizer state* by N, and nothing else. In this run each rank's
# Adam state fell to about 1/N, but its parameters, gradients and buckets stayed whole, so what each rank
# holds fell far less (printed above). With plain SGD, which keeps no state, ZeRO-1 would save nothing.
# And the shares are whole tensors: they are equal here because the 16 tensors split evenly (8 weights and
# 8 biases over 4 ranks); a model with one huge tensor would leave one rank with most of the state.
#
# The extra communication, too, is torch's, not ZeRO-1's. Here, after every step each parameter is
# broadcast from the rank that updated it (`_sync_params` in torch's `zero_redundancy_optimizer.py`), on
# top of DDP's all-reduce of the whole gradients: about 2Ψ + Ψ = 3Ψ per step. That is how
# `ZeroRedundancyOptimizer` works, a wrapper around an optimizer that leaves DDP untouched. ZeRO-1 as the
# paper describes it replaces DDP's all-reduce by a reduce-scatter of the gradients and an all-gather of
# the updated parameters: 2Ψ, no more than DDP (part 3).

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：ZeRO-1 把一个 rank 的内存减少到原来的 1/N。实际情况是：它只把*优化器状态*减少到 1/N，其他都不变。在这次运行中，每个 rank 的 Adam 状态减少到大约 1/N，但参数、梯度和桶都还是完整的，所以每个 rank 持有的总量下降得少得多（见上面的输出）。对于不保存状态的普通 SGD，ZeRO-1 什么也省不下。而且分到各 rank 的是整个张量：这里各份相等，是因为 16 个张量正好能平均分给 4 个 rank（8 个权重和 8 个偏置）；如果模型中有一个特别大的张量，某一个 rank 就会持有大部分状态。
#
# 多出来的通信也是 torch 的实现带来的，而不是 ZeRO-1 本身的。在这里，每一步之后，每个参数都要由更新它的那个 rank 广播出去（torch 的 `zero_redundancy_optimizer.py` 中的 `_sync_params`），这是在 DDP 对全部梯度做的 all-reduce 之外额外的通信：每步大约 2Ψ + Ψ = 3Ψ。`ZeroRedundancyOptimizer` 就是这样工作的：它是包在优化器外面的一层，不改动 DDP。论文所描述的 ZeRO-1 则用梯度的 reduce-scatter 加上更新后参数的 all-gather 取代 DDP 的 all-reduce：通信量为 2Ψ，并不比 DDP 多（第 3 部分）。

# %% [markdown]
# ## Exercises
#
# **15.1** A model of 16 linear layers of 1024 × 1024 (weights and biases, float32) is trained with Adam.
# How many bytes of optimizer state does each rank hold with DDP, counted as ddplab counts them? Write a
# whole number of bytes.

# %% [markdown] lang=zh
# ## 练习
#
# **15.1** 一个由 16 个 1024 × 1024 线性层（含权重和偏置，float32）组成的模型用 Adam 训练。使用 DDP 时，按 ddplab 的统计方式，每个 rank 持有多少字节的优化器状态？请写一个整数（字节数）。

# %%
answer = ...    # bytes of Adam's state for 16 layers of 1024 x 1024
check("15.1", answer, width=1024, layers=16)

# %% [markdown]
# **15.2** Take this run's Adam figures per rank (parameters *p*, gradients *g*, optimizer state *s*,
# printed in part 1). How many bytes of model states (no buckets) would each rank hold with ZeRO-2 on
# 8 ranks? Write a number of bytes.

# %% [markdown] lang=zh
# **15.2** 取这次运行中 Adam 下每个 rank 的数值（参数 *p*、梯度 *g*、优化器状态 *s*，见第 1 部分的输出）。在 8 个 rank 上使用 ZeRO-2 时，每个 rank 持有多少字节的模型状态（不含桶）？请写一个字节数。

# %%
answer = ...    # bytes per rank, ZeRO-2, 8 ranks
check("15.2", answer, params=p, grads=g, optimizer=s, ranks=8)

# %% [markdown]
# **15.3** Which of these keeps only a share of the **parameters** on each rank? Write one letter.
#
# - (a) `ZeroRedundancyOptimizer` around Adam
# - (b) `DDP(model, gradient_as_bucket_view=True)`
# - (c) ZeRO-2
# - (d) FSDP2's `fully_shard` (lesson 19)

# %% [markdown] lang=zh
# **15.3** 下面哪一种让每个 rank 只保存一部分**参数**？请写一个字母。
#
# - (a) 包装 Adam 的 `ZeroRedundancyOptimizer`
# - (b) `DDP(model, gradient_as_bucket_view=True)`
# - (c) ZeRO-2
# - (d) FSDP2 的 `fully_shard`（第 19 课）

# %%
answer = ...    # a, b, c or d
check("15.3", answer)

# %% [markdown]
# **15.4** Part 3's cell with `optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9` instead of Adam:
# how many bytes of optimizer state would each of this pool's ranks hold for this lesson's model? Write a
# number of bytes (you may run it in a cell of your own to check).

# %% [markdown] lang=zh
# **15.4** 把第 3 部分的单元格中的 Adam 换成 `optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9`：对于本课的模型，这个进程池的每个 rank 会持有多少字节的优化器状态？请写一个字节数（可以在你自己的单元格中运行来验证）。

# %%
answer = ...    # bytes of optimizer state per rank, ZeRO-1 with momentum SGD
check("15.4", answer, parameters=P, tensors=T, ranks=N)

# %%
%ddp_stop
