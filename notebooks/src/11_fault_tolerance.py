# %% [markdown]
# # Lesson 11 · Fault tolerance with checkpoints
#
# **In short.** With many processes, one of them will crash sooner or later: a machine fails, or
# the out-of-memory killer picks one process. The others then wait in their next all-reduce, and
# everything the run kept in memory is gone.
# The remedy is a **checkpoint**: every few steps, save the model, the optimizer state and the step
# number, and write the training loop so that it can start again from the last one. Here you run
# a deterministic training loop once without interruption, then kill rank 2 in the middle of a
# second run, bring it back with `%ddp_restart`, and resume from the last checkpoint. The final
# parameters equal those of the uninterrupted run exactly, bit for bit.
#
# **You will learn**
# - what a checkpoint must hold for a resumed run to continue exactly: parameters, optimizer state, step, and data that depends on the step only
# - how `ddplab.checkpoint` saves atomically on rank 0 and loads safely (`weights_only=True`) onto every rank
# - why a `try`/`except` around training cannot survive a lost rank, and what recovery takes instead
# - why rank 0 alone may save under DDP, and what sharded training needs instead: ZeRO-1's consolidated optimizer state, FSDP's `torch.distributed.checkpoint`
#
# **Study time:** about 40 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** what a checkpoint holds, in plain torch; rank 2 lost on the dashboard while the
# others' try/except catches nothing worth having; a restart, the run resumed from step 30, and its
# loss curve matching the uninterrupted run step for step.

# %% [markdown] lang=zh
# # 第 11 课 · 用检查点实现容错
#
# **简而言之**：进程一多，迟早会有一个崩溃：某台机器出了故障，或者内存不足（OOM）机制挑中了某个进程把它杀掉。其余进程（rank）随后会卡在下一次 all-reduce 里，而这次运行保存在内存中的一切都丢失了。补救的办法是**检查点**：每隔几步保存模型、优化器状态和步数，并把训练循环写成可以从最近的检查点重新开始的样子。这一课先不间断地运行一次确定性的训练循环，然后在第二次运行的中途杀掉 rank 2，用 `%ddp_restart` 把它恢复，再从最近的检查点继续训练。最终的参数与从未中断的那次运行完全相同，逐位一致。
#
# **你将学到**
# - 要让恢复后的运行精确地接着进行，检查点必须保存什么：参数、优化器状态、步数，以及只取决于步数的数据
# - `ddplab.checkpoint` 如何在 rank 0 上原子地保存，又如何安全地（`weights_only=True`）加载到每个 rank 上
# - 为什么包在训练外面的 `try`/`except` 挽救不了丢失的 rank，恢复实际上需要做什么
# - 为什么在 DDP 下只由 rank 0 保存就够了，而分片训练需要什么：ZeRO-1 要先汇总优化器状态，FSDP 要用 `torch.distributed.checkpoint`
#
# **学习时间**：约 40 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：用普通的 torch 代码看检查点里保存了什么；仪表盘上 rank 2 丢失，而其他 rank 的 try/except 捕获不到任何有用的东西；一次重启，从第 30 步恢复的运行，以及它的损失曲线与不中断的运行逐步吻合。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## A training loop that can resume
#
# Checkpoints go in a temporary directory made here in the notebook. (On several machines it
# would be storage that all of them can reach.)

# %% [markdown] lang=zh
# ## 一个可以恢复的训练循环
#
# 检查点保存在 notebook 这里创建的一个临时目录中。（在多台机器上，它应当是所有机器都能访问的存储。）

# %%
import os
import tempfile

ckpt_dir = tempfile.mkdtemp(prefix="ddplab-lesson11-")
ckpt_dir

# %% [markdown]
# The training loop is a function, like a training script that `torchrun` would start on every
# worker. We write it here in the notebook and send it to every rank with `%ddp_push`. When a
# rank calls it, it runs with that rank's own names (`rank`, `world_size`, `torch`, `nn`, `ddplab`).
#
# Three things make a resumed run continue exactly where the first one stopped:
#
# 1. **The checkpoint holds all the state**: `ddplab.checkpoint.save(path, model, opt, step)`
#    saves the parameters, the optimizer state (SGD's momentum buffers are state too) and the
#    step. Rank 0 writes a temporary file, then renames it over the old one, so a crash while
#    saving leaves the previous checkpoint whole. `ddplab.checkpoint.load` reads the file on rank 0
#    and broadcasts it, so every rank continues from the same state.
# 2. **The data of a step depends only on (step, rank)**, not on how many steps this process
#    has run before, so step 31 gets the same batch whether the run started at 0 or at 30.
#    (With a `DistributedSampler`, save the epoch and call `set_epoch` when you resume.)
# 3. **One warm-up backward pass before training.** On its first step, DDP puts the gradients into
#    its all-reduce buckets in the order of `model.parameters()`. From the second step on it uses
#    the order in which the gradients became ready (the reverse). The all-reduce adds the 4 ranks'
#    values in an order that depends on where a value sits in its bucket, and floating-point
#    addition is not associative: `(a+b)+(c+d)` can differ from `((a+b)+c)+d` in the last bit.
#    Without the warm-up, the resumed run's first step would add in a different order from the same
#    step of the uninterrupted run. When this loop was run without the warm-up, the checksums
#    after 60 steps differed in the 8th digit (the digit can vary with the machine and the torch
#    version). With 2 ranks they were equal: the order does not matter when there are only two
#    values, `a+b == b+a`.

# %% [markdown] lang=zh
# 训练循环是一个函数，就像 `torchrun` 会在每个 worker 上启动的训练脚本。我们在 notebook 中写好它，再用 `%ddp_push` 把它发送到每个 rank。某个 rank 调用它时，它使用的是该 rank 自己的名字（`rank`、`world_size`、`torch`、`nn`、`ddplab`）。
#
# 有三点保证恢复后的运行从第一次运行停下的地方精确地继续：
#
# 1. **检查点保存了全部状态**：`ddplab.checkpoint.save(path, model, opt, step)` 保存参数、优化器状态（SGD 的动量缓冲区也是状态）和步数。rank 0 先写一个临时文件，再把它重命名、覆盖旧文件，所以保存过程中崩溃也会留下完整的上一个检查点。`ddplab.checkpoint.load` 在 rank 0 上读取文件并广播出去，这样每个 rank 都从同一个状态继续。
# 2. **每一步的数据只取决于 (step, rank)**，而与这个进程之前已经跑了多少步无关，所以无论运行是从第 0 步还是第 30 步开始，第 31 步拿到的都是同一个批次。（使用 `DistributedSampler` 时，要保存 epoch，并在恢复时调用 `set_epoch`。）
# 3. **训练前先做一次预热的反向传播。** 在第一步，DDP 按 `model.parameters()` 的顺序把梯度放进用于 all-reduce 的桶；从第二步起，它改用梯度实际就绪的顺序（正好相反）。all-reduce 把 4 个 rank 的值相加的顺序，取决于一个值在桶中的位置，而浮点加法不满足结合律：`(a+b)+(c+d)` 与 `((a+b)+c)+d` 可能在最后一位上不同。如果没有预热，恢复后运行的第一步与不中断运行的同一步会以不同的顺序相加。这个循环在没有预热的情况下运行时，60 步之后的校验和在第 8 位有效数字上出现了差异（具体是第几位，可能随机器和 torch 版本而不同）。用 2 个 rank 时两者相等：只有两个值时顺序无关紧要，`a+b == b+a`。

# %%
def train(steps, path, resume=False, every=10):
    """Train for `steps` steps (on every rank), saving a checkpoint every `every` steps.
    resume=True: start from the checkpoint at `path`. Returns the DDP model and its optimizer."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddplab.lessons import say                            # in rank code: speaks the pool's language

    torch.manual_seed(0)                                      # the same initial model on every rank
    model = DDP(nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.zeros(1, 20)).sum().backward()                # warm-up: fixes DDP's bucket order (3.)
    opt.zero_grad()
    start = ddplab.checkpoint.load(path, model, opt) if resume else 0
    if resume:
        print(say(f"resuming from the checkpoint of step {start}", f"从第 {start} 步的检查点恢复"))

    for step in range(start, steps):
        g = torch.Generator().manual_seed(1000 * step + rank)  # this step's batch: depends on (step, rank) only
        x = torch.randn(32, 20, generator=g)
        y = torch.sin(x).sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=len(x), step=step + 1)
        if (step + 1) % every == 0:
            ddplab.checkpoint.save(path, model, opt, step + 1)
    return model, opt

# %%
%ddp_push train ckpt_dir

# %% [markdown]
# ## 1. The reference: 60 steps, no interruption
#
# `param_checksum` sums all parameters into one number that changes if any parameter changes. The
# momentum buffers, SGD's state, get a checksum too.

# %% [markdown] lang=zh
# ## 1. 参照：60 步，不中断
#
# `param_checksum` 把所有参数汇总成一个数，任何一个参数变了，这个数都会变。SGD 的状态，也就是动量缓冲区，也算一个校验和。

# %%
%%ddp
import os
from ddplab.workloads import param_checksum
from ddplab.lessons import say

model, opt = train(60, os.path.join(ckpt_dir, "reference.pt"))
reference = param_checksum(model.module)
momentum = sum(float(s["momentum_buffer"].double().sum()) for s in opt.state.values())
print(say(f"after 60 steps: parameter checksum {reference!r}, momentum checksum {momentum!r}",
          f"60 步之后：参数校验和 {reference!r}，动量校验和 {momentum!r}"))

# %%
after_60 = %ddp_gather (reference, momentum)
assert len(set(after_60)) == 1, after_60
print(say(f"every rank holds the same parameters (checksum {after_60[0][0]!r}) and the same optimizer "
          f"state (momentum checksum {after_60[0][1]!r})",
          f"每个 rank 都持有相同的参数（校验和 {after_60[0][0]!r}）和相同的优化器状态"
          f"（动量校验和 {after_60[0][1]!r}）"))

# %% [markdown]
# ## What a checkpoint holds, in plain torch
#
# `ddplab.checkpoint` is a few lines of plain torch (`ddplab/rank/checkpoint.py`). `save(path, model,
# opt, step)`, called on every rank, does this on rank 0:
#
# ```python
# state = {"model": model.module.state_dict(),   # the module inside DDP: keys without "module."
#          "step": int(step),
#          "extra": extra,                        # any other keywords given to save()
#          "optimizer": opt.state_dict() if opt is not None else None}   # SGD's momentum buffers
# fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=folder)  # a new file, a random name
# with open(fd, "wb") as f:
#     torch.save(state, f)
#     f.flush()
#     os.fsync(f.fileno())                        # the bytes are on disk ...
# os.replace(tmp, path)                           # ... before the rename, which is atomic
# ```
#
# then every rank waits in `dist.barrier()` until the file is written. (The temporary file is
# created exclusively, readable by its owner only, and never through a link someone planted; save
# removes its own temporary files left by a save that was killed, and fsyncs the folder so that the
# rename itself is durable.) `load(path, model, opt)` reads the file on rank 0 only, with
# `torch.load(path, map_location="cpu", weights_only=True)`, sends it to the other ranks as data
# (the state's shape as JSON and every tensor's bytes, each with `dist.broadcast`; not
# `dist.broadcast_object_list`, which pickles, so a rank would load whatever arrived), and on every
# rank calls `model.module.load_state_dict(...)` and `opt.load_state_dict(...)`; it returns the
# step. If rank 0 cannot read the file, it broadcasts the error instead, and every rank raises it:
# none is left waiting in the broadcast.
#
# Random number generator states are **not** in it. This loop does not need them: each step's batch
# comes from a generator seeded with (step, rank). A loop that shuffles data or uses dropout with
# torch's global generator would also save every rank's `torch.get_rng_state()` (each rank has its
# own), and restore it with `torch.set_rng_state`.
#
# `weights_only=True` (torch.load's default since torch 2.6) unpickles only tensors, numbers, strings
# and plain containers, never arbitrary Python objects, so a file someone else put at that path
# cannot run code in the ranks. ddplab always loads this way, never with `weights_only=False`. So
# the extras given to `save` should be tensors or plain values (numbers, strings, lists, dicts):
# `save` does not check them, but `load` refuses a file that holds anything else. Rank 0's
# `torch.load` then fails with an `UnpicklingError`, and every rank raises a `ValueError` saying
# that the file holds more than tensors and plain values; only for a file you trust does that
# message point you to reading it yourself with `torch.load(path, weights_only=False)`. (Loading
# with `weights_only=True` had holes of its own before torch 2.10: CVE-2025-32434, fixed in 2.6, and
# CVE-2026-24747, fixed in 2.10. ddplab needs torch 2.13 or newer.) Rank 0 looks inside the
# reference run's checkpoint the same way:

# %% [markdown] lang=zh
# ## 用普通的 torch 代码看检查点里有什么
#
# `ddplab.checkpoint` 只是几行普通的 torch 代码（`ddplab/rank/checkpoint.py`）。`save(path, model, opt, step)` 在每个 rank 上调用，而在 rank 0 上做的是：
#
# ```python
# state = {"model": model.module.state_dict(),   # DDP 里面的模块：键不带 "module." 前缀
#          "step": int(step),
#          "extra": extra,                        # 传给 save() 的其他关键字参数
#          "optimizer": opt.state_dict() if opt is not None else None}   # SGD 的动量缓冲区
# fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=folder)  # 一个新文件，名字是随机的
# with open(fd, "wb") as f:
#     torch.save(state, f)
#     f.flush()
#     os.fsync(f.fileno())                        # 先确保数据已经写到磁盘上……
# os.replace(tmp, path)                           # ……再重命名，而重命名是原子操作
# ```
#
# 然后每个 rank 都在 `dist.barrier()` 中等待，直到文件写完。（临时文件以独占方式新建，只有所有者可读，绝不会顺着别人放下的链接写下去；save 会删除被杀掉的保存过程遗留下来的、它自己的临时文件，并对所在目录做 fsync，让重命名本身也持久生效。）`load(path, model, opt)` 只在 rank 0 上用 `torch.load(path, map_location="cpu", weights_only=True)` 读取文件，再以数据的形式发送给其他 rank（状态的结构用 JSON，每个张量的字节用 `dist.broadcast`；不用 `dist.broadcast_object_list`，因为它用 pickle，rank 会加载收到的任何东西），然后在每个 rank 上调用 `model.module.load_state_dict(...)` 和 `opt.load_state_dict(...)`；它返回步数。如果 rank 0 读不了这个文件，它就把遇到的错误广播出去，每个 rank 都抛出这个错误：没有哪个 rank 会一直等在广播里。
#
# 检查点里**没有**随机数生成器的状态。这个循环不需要它：每一步的批次都来自一个以 (step, rank) 为种子的生成器。如果训练循环用 torch 的全局生成器来打乱数据或做 dropout，就还要保存每个 rank 的 `torch.get_rng_state()`（每个 rank 各有一份），恢复时用 `torch.set_rng_state` 设置回去。
#
# `weights_only=True`（自 torch 2.6 起是 torch.load 的默认值）只反序列化张量、数字、字符串和普通容器，绝不还原任意的 Python 对象，所以别人放在那个路径上的文件没法在 rank 里运行代码。ddplab 总是这样加载，从不使用 `weights_only=False`。所以传给 `save` 的额外内容应当是张量或普通值（数字、字符串、列表、字典）：`save` 不检查它们，但 `load` 会拒绝含有其他东西的文件。这时 rank 0 的 `torch.load` 因 `UnpicklingError` 而失败，每个 rank 都抛出一个 `ValueError`，说明这个文件里不只有张量和普通值；只有对你信任的文件，这条消息才建议你自己用 `torch.load(path, weights_only=False)` 去读。（`weights_only=True` 在 torch 2.10 之前也有自己的漏洞：CVE-2025-32434 在 2.6 修复，CVE-2026-24747 在 2.10 修复。ddplab 需要 torch 2.13 或更新的版本。）让 rank 0 用同样的方式看看参照运行的检查点里面：

# %%
%%ddp --ranks 0
state = torch.load(os.path.join(ckpt_dir, "reference.pt"), map_location="cpu", weights_only=True)
print(sorted(state), "step:", state["step"])
print("model:", {name: tuple(t.shape) for name, t in state["model"].items()})
print("optimizer:", sorted(state["optimizer"]), "momentum_buffer:",
      [tuple(s["momentum_buffer"].shape) for s in state["optimizer"]["state"].values()])

# %% [markdown]
# **Why rank 0 alone may write it.** Under DDP every rank holds **identical** parameters and
# **identical** optimizer state after every step: the ranks start from rank 0's parameters, receive
# the same averaged gradients and apply the same update, so their momentum buffers are equal too.
# The checksums printed after the reference run show it. So rank 0's copy is everyone's copy.
#
# That is **not** true of sharded training, where each rank holds a **different** share of some of
# that state, and rank 0's share alone would lose the rest. What to do depends on what is sharded:
#
# - **ZeRO-1 with `ZeroRedundancyOptimizer`** (lesson 15) shards the optimizer state only. The model is
#   still DDP's, identical on every rank, so rank 0's `model.state_dict()` is still everyone's; rank 0's
#   optimizer, though, holds the state of its own share of the parameters. Its route to the whole state
#   is its own: `opt.consolidate_state_dict(to=0)`, called on **every** rank (each sends its share to
#   rank 0), then `opt.state_dict()` on rank 0, which saves it with the model as above (on another rank,
#   `opt.state_dict()` raises). To resume, every rank calls `opt.load_state_dict(state)` with the whole
#   state and keeps its own share.
# - **FSDP** (`fully_shard`, lesson 19) shards the parameters, the gradients and the optimizer state.
#   There every rank saves its own shards with **`torch.distributed.checkpoint`** (DCP), called on every
#   rank (lesson 21, sharded checkpoints with DCP, runs it):
#
# ```python
# import torch.distributed.checkpoint as dcp
# from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
#
# model_state, opt_state = get_state_dict(model, opt)          # this rank's shards
# dcp.save({"model": model_state, "optim": opt_state}, checkpoint_id=folder)
# ...
# model_state, opt_state = get_state_dict(model, opt)          # the shapes to fill in
# state = {"model": model_state, "optim": opt_state}
# dcp.load(state, checkpoint_id=folder)                        # also onto a different number of ranks
# set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
# ```
#
# Or gather FSDP's whole state onto one rank first
# (`get_state_dict(..., options=StateDictOptions(full_state_dict=True, cpu_offload=True))`), which
# works only while it fits in one process's memory, as ZeRO-1's consolidated state must. DCP also helps
# large models under DDP: it spreads the writing of replicated tensors over the ranks, and
# `dcp.async_save` lets training go on while the files are written.

# %% [markdown] lang=zh
# **为什么只由 rank 0 来写。** 在 DDP 下，每一步之后每个 rank 持有的参数**完全相同**，优化器状态也**完全相同**：各 rank 从 rank 0 的参数出发，收到同样的平均梯度，做同样的更新，所以它们的动量缓冲区也相等。参照运行之后打印的校验和说明了这一点。所以 rank 0 的那一份就是每个 rank 的那一份。
#
# 对于分片训练，这**并不**成立：每个 rank 持有其中某些状态的**各不相同**的一部分，只保存 rank 0 的那一部分会丢掉其余部分。怎么做取决于分片的是什么：
#
# - **使用 `ZeroRedundancyOptimizer` 的 ZeRO-1**（第 15 课）只分片优化器状态。模型仍然是 DDP 的，在每个 rank 上都相同，所以 rank 0 的 `model.state_dict()` 仍然就是每个 rank 的那一份；但 rank 0 的优化器只持有它自己那一份参数的状态。要得到完整的状态，它有自己的办法：在**每个** rank 上调用 `opt.consolidate_state_dict(to=0)`（每个 rank 把自己的那一份发给 rank 0），然后在 rank 0 上调用 `opt.state_dict()`，像上面那样把它和模型一起保存（在其他 rank 上，`opt.state_dict()` 会抛出错误）。恢复时，每个 rank 都用完整的状态调用 `opt.load_state_dict(state)`，只留下属于自己的那一份。
# - **FSDP**（`fully_shard`，第 19 课）把参数、梯度和优化器状态都分片了。这时每个 rank 都要用 **`torch.distributed.checkpoint`**（DCP）保存自己的分片，在每个 rank 上调用（第 21 课会用 DCP 实际保存分片检查点）：
#
# ```python
# import torch.distributed.checkpoint as dcp
# from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
#
# model_state, opt_state = get_state_dict(model, opt)          # 这个 rank 的分片
# dcp.save({"model": model_state, "optim": opt_state}, checkpoint_id=folder)
# ...
# model_state, opt_state = get_state_dict(model, opt)          # 提供要填充的形状
# state = {"model": model_state, "optim": opt_state}
# dcp.load(state, checkpoint_id=folder)                        # 也可以加载到不同数量的 rank 上
# set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
# ```
#
# 或者先把 FSDP 的完整状态收集到一个 rank 上（`get_state_dict(..., options=StateDictOptions(full_state_dict=True, cpu_offload=True))`），但这只在它放得进单个进程的内存时才可行，ZeRO-1 汇总后的状态也一样。对于 DDP 下的大模型，DCP 同样有用：它把复制在各 rank 上的张量分摊给各 rank 去写，而 `dcp.async_save` 让训练在写文件的同时继续进行。

# %% [markdown]
# ## 2. The same run, and rank 2 dies at step 35
#
# `%ddp_fault kill 2 --at-step 35` makes rank 2's process kill itself (SIGKILL, as the
# out-of-memory killer would) when it logs step 35. Checkpoints are saved at steps 10, 20 and 30;
# the last one before the crash is step 30.

# %% [markdown] lang=zh
# ## 2. 同样的运行，rank 2 在第 35 步死掉
#
# `%ddp_fault kill 2 --at-step 35` 让 rank 2 的进程在记录第 35 步时杀掉自己（SIGKILL，就像内存不足机制会做的那样）。检查点在第 10、20、30 步保存；崩溃之前的最后一个检查点是第 30 步的。

# %%
%ddp_fault kill 2 --at-step 35

# %% [markdown]
# Run it. This time the training is wrapped in `try`/`except`, as if that could handle a failure:
# a rank that catches an exception notes what it was, then tries one more collective on the same
# group. The cell is meant to fail, because rank 2 is lost: `%%ddp --expect RankLost` shows
# ddplab's report of that failure as the expected outcome instead of raising it. Watch the
# dashboard: rank 2 goes to *lost*, and ranks 0, 1 and 3, which were waiting for rank 2's gradients
# in the all-reduce of step 36, get an error soon after (the wait is printed below), not after the
# group's timeout.

# %% [markdown] lang=zh
# 运行它。这一次训练被包在 `try`/`except` 里，仿佛这样就能处理故障：捕获到异常的 rank 记下异常的内容，然后在同一个进程组上再试一次集合通信。这个单元格注定会失败，因为 rank 2 丢失了：`%%ddp --expect RankLost` 把 ddplab 对这次失败的报告作为预期的结果显示出来，而不是抛出错误。注意看仪表盘：rank 2 变为*丢失*，而 rank 0、1、3 正在第 36 步的 all-reduce 中等待 rank 2 的梯度，它们很快就收到错误（等待了多久，下面会打印出来），而不是等到进程组超时。

# %% [markdown]
# **Predict, then run.** Rank 2 dies at step 35. What happens to the one more `all_reduce` that
# ranks 0, 1 and 3 try on the same group in their `except` clause? Answer with a letter:
#
# - (a) it works: ranks 0, 1 and 3 carry on as a group of three
# - (b) it fails too: a group that has lost a rank cannot be used again
# - (c) it never runs: ranks 0, 1 and 3 catch no exception

# %% [markdown] lang=zh
# **先预测，再运行。** rank 2 在第 35 步死掉。rank 0、1、3 在各自的 `except` 子句里，还会在同一个进程组上再试一次 `all_reduce`，这一次会怎样？请写一个字母：
#
# - (a) 成功：rank 0、1、3 作为一个三人组继续下去
# - (b) 同样失败：一个失去了成员的进程组不能再用了
# - (c) 根本不会运行：rank 0、1、3 捕获不到任何异常

# %%
predict("11.retry", ...)    # a letter: "a", "b" or "c"

# %%
%%ddp --expect RankLost
import time

def said(exc):
    """The exception's type and first two sentences (without gloo's source-file prefix)."""
    text = str(exc).splitlines()[0].split("] ", 1)[-1]
    return f"{type(exc).__name__}: {'. '.join(text.split('. ')[:2])}"

path = os.path.join(ckpt_dir, "run.pt")
caught = retried = None
tic = time.perf_counter()
try:
    model, opt = train(60, path)
except Exception as exc:                          # what a try/except around training catches
    failed_after = time.perf_counter() - tic        # seconds into the cell
    caught = said(exc)
    try:
        dist.all_reduce(torch.zeros(1))             # carry on with the same group?
        retried = "worked"
    except Exception as again:
        retried = said(again)

# %% [markdown]
# `%ddp_status` shows the pool: rank 2's engine is gone (*lost*). Ranks 0, 1 and 3 are alive and
# even *done*: they caught the exception, so their cell ended without an error.

# %% [markdown] lang=zh
# `%ddp_status` 显示进程池的状态：rank 2 的引擎已经不在了（*丢失*）。rank 0、1、3 还活着，甚至处于*完成*状态：它们捕获了异常，所以它们的单元格没有报错就结束了。

# %%
%ddp_status

# %% [markdown]
# ## 3. Restart the lost rank
#
# `%ddp_restart` starts a new process for rank 2 and forms the gloo group again. Ranks 0, 1 and 3
# are the same processes as before and keep their variables. The objects tied to the old group
# (their DDP `model`) cannot be used any more, but `train` builds a new one each time. Rank 2 is a
# new process: it has nothing from before, not even `train`.

# %% [markdown] lang=zh
# ## 3. 重启丢失的 rank
#
# `%ddp_restart` 为 rank 2 启动一个新进程，并重新组建 gloo 进程组。rank 0、1、3 还是原来的进程，保留着它们的变量。与旧进程组绑定的对象（它们的 DDP `model`）不能再用了，不过 `train` 每次都会新建一个。rank 2 是一个新进程：之前的东西它一样也没有，连 `train` 都没有。

# %%
%ddp_restart

# %%
has_train = %ddp_gather "train" in globals()
has_reference = %ddp_gather "reference" in globals()
print(say("train defined on each rank:    ", "各 rank 上是否定义了 train：    "), has_train)
print(say("reference defined on each rank:", "各 rank 上是否定义了 reference："), has_reference)
assert has_train == [True, True, False, True] and has_reference == [True, True, False, True]

# %% [markdown]
# What did the `except` clauses catch? Ranks 0, 1 and 3 kept their variables:

# %% [markdown] lang=zh
# `except` 子句捕获到了什么？rank 0、1、3 保留着它们的变量：

# %%
caught = %ddp_gather globals().get("caught")
retried = %ddp_gather globals().get("retried")
failed_after = %ddp_gather globals().get("failed_after")
h = %ddp_history
for r in range(4):
    if r == 2:
        print(say("rank 2: nothing (SIGKILL ends a process without running any more Python)",
                  "rank 2：什么也没有（SIGKILL 直接结束进程，不会再运行任何 Python 代码）"))
        continue
    rows = h.where(rank=r)
    crashed = [row for row in rows if row["cell"] == max(row["cell"] for row in rows)]   # its last training cell
    waited = failed_after[r] - max(row["time"] for row in crashed)     # from its last logged step to the error
    print(say(f"rank {r}, {waited:.1f} s after its step {max(row['step'] for row in crashed)}, caught: {caught[r]}\n"
              f"        then, on the same group: {retried[r]}",
              f"rank {r} 在第 {max(row['step'] for row in crashed)} 步之后 {waited:.1f} 秒捕获到：{caught[r]}\n"
              f"        然后在同一个进程组上再试：{retried[r]}"))
outcome = ("c" if not all(caught[r] for r in (0, 1, 3))                # what the run says of 11.retry
           else "a" if any(retried[r] == "worked" for r in (0, 1, 3)) else "b")
reveal("11.retry", outcome)
assert caught[2] is None and all(caught[r] and retried[r] and retried[r] != "worked" for r in (0, 1, 3))

# %% [markdown]
# **A common claim / what actually happens.** A common claim: communication failures are handled by
# wrapping the communication in `try`/`except`. What actually happens, in the run above: rank 2 could
# catch nothing, since SIGKILL ends a process without running another line of Python. Ranks 0, 1 and
# 3 did catch an exception, but only once their all-reduce of step 36 had failed, and the one more
# collective each tried on the same group failed at once as well (both errors are printed above):
# a process group that has lost a member is broken for good. Here the error came after the short
# wait printed, long before any timeout, because the dead process's connections closed and ddplab
# cuts the lost rank's links; a rank that hangs instead of dying, or a backend that does not notice
# the loss, leaves the others blocked inside the collective until the group's timeout (`timeout=`
# of `init_process_group`: 30 minutes by default in torch, 30 s in ddplab). Either way the `except`
# clause has nothing to carry on with: rank 2's process and everything in its memory are gone, and
# the step never finished. Recovery means what this lesson does next: start a new process for the
# lost rank, form a new group, and resume every rank from the last checkpoint.

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：把通信代码包在 `try`/`except` 里，就能处理通信故障。上面的运行中实际发生的是：rank 2 什么也捕获不到，因为 SIGKILL 直接结束进程，不会再运行任何一行 Python 代码。rank 0、1、3 确实捕获到了异常，但那是在它们第 36 步的 all-reduce 已经失败之后；而它们在同一个进程组上再试一次集合通信，也同样立即失败（两个错误都打印在上面）：一个失去了成员的进程组就此彻底损坏。这里的错误在打印出的短暂等待之后就到来，远早于任何超时，是因为死掉的进程的连接被关闭了，而且 ddplab 会切断丢失的 rank 的连接；如果某个 rank 不是死掉而是卡住，或者后端察觉不到成员的丢失，其他 rank 就会一直阻塞在集合通信里，直到进程组超时（`init_process_group` 的 `timeout=`：torch 默认 30 分钟，ddplab 中为 30 秒）。无论哪种情况，`except` 子句都没有可以继续下去的东西：rank 2 的进程以及它内存中的一切都已经没有了，那一步也永远没有完成。恢复意味着做这一课接下来要做的事：为丢失的 rank 启动一个新进程，组建一个新的进程组，让每个 rank 都从最近的检查点继续。

# %% [markdown]
# What survived on every rank is what was on disk: the checkpoint of step 30. Send `train` and
# `ckpt_dir` to the ranks again (rank 2 needs them), and resume:

# %% [markdown] lang=zh
# 在每个 rank 上幸存下来的，是磁盘上的东西：第 30 步的检查点。再次把 `train` 和 `ckpt_dir` 发送给各 rank（rank 2 需要它们），然后恢复训练：

# %%
%ddp_push train ckpt_dir

# %%
%%ddp
import os
from ddplab.workloads import param_checksum
from ddplab.lessons import say                   # rank 2 is a new process: it needs its imports again

path = os.path.join(ckpt_dir, "run.pt")
model, opt = train(60, path, resume=True)
resumed = param_checksum(model.module)
print(say(f"after 60 steps: checksum {resumed!r}", f"60 步之后：校验和 {resumed!r}"))

# %% [markdown]
# ## 4. The same result, bit for bit

# %% [markdown] lang=zh
# ## 4. 同样的结果，逐位一致

# %%
reference = %ddp_gather globals().get("reference")
resumed = %ddp_gather resumed
print(say("reference:", "参照：  "), reference)
print(say("resumed:  ", "恢复后："), resumed)
assert len(set(reference[:2] + reference[3:])) == 1      # rank 2's reference died with its process
assert resumed == [reference[0]] * 4                     # exactly equal: ==, not approximately
print(say("the resumed run ended with exactly the parameters of the run that never stopped",
          "恢复后的运行最终得到的参数，与从未中断的运行完全相同"))

# %% [markdown]
# `%ddp_history` holds every step each rank logged. Rank 0 lived through the whole lesson, so its
# history has all three runs: the reference, the run that crashed, and the resumed one. (Rank 2's
# history started again with its new process.)

# %% [markdown] lang=zh
# `%ddp_history` 保存着每个 rank 记录的每一步。rank 0 经历了整节课，所以它的历史里有全部三次运行：参照运行、崩溃的运行，以及恢复后的运行。（rank 2 的历史随着它的新进程重新开始。）

# %%
h = %ddp_history
rows = h.where(rank=0)
cells = sorted({row["cell"] for row in rows})             # rank 0's three training cells, in order
runs = [{row["step"]: row["loss"] for row in rows if row["cell"] == c} for c in cells]
reference_run, crashed_run, resumed_run = runs
print(say(f"crashed run: steps {min(crashed_run)}-{max(crashed_run)}; "
          f"resumed run: steps {min(resumed_run)}-{max(resumed_run)}",
          f"崩溃的运行：第 {min(crashed_run)}-{max(crashed_run)} 步；恢复后的运行：第 {min(resumed_run)}-{max(resumed_run)} 步"))
assert max(crashed_run) == 35 and min(resumed_run) == 31 and max(resumed_run) == 60
assert all(crashed_run[s] == reference_run[s] for s in crashed_run)      # same losses, exactly
assert all(resumed_run[s] == reference_run[s] for s in resumed_run)

# %% [markdown]
# The picture: on the left, the crashed run stops at step 35, and the resumed run starts again
# after the checkpoint of step 30, so steps 31-35 are computed twice (the two lines are the same
# there, one on top of the other). On the right, the difference from the uninterrupted run's loss at
# every step: zero.

# %% [markdown] lang=zh
# 看图：左图中，崩溃的运行停在第 35 步，恢复后的运行从第 30 步的检查点之后重新开始，所以第 31-35 步被计算了两次（两条线在这一段完全相同，一条叠在另一条上）。右图是每一步与不中断运行的损失之差：零。

# %%
top = max(reference_run.values())
draw.lines(None, panels=[
    dict(series={say("resumed from step 30", "从第 30 步恢复"): (list(resumed_run), list(resumed_run.values())),
                 say("crashed run", "崩溃的运行"): (list(crashed_run), list(crashed_run.values())),
                 say("last checkpoint (step 30)", "最近的检查点（第 30 步）"): ([30, 30], [0, top]),
                 say("killed: rank 2 (step 35)", "被杀：rank 2（第 35 步）"): ([35, 35], [0, top])},
         xlabel=say("step", "步数"), ylabel=say("loss (rank 0)", "损失（rank 0）"),
         title=say("Rank 2 killed at step 35, resumed from step 30", "rank 2 在第 35 步被杀，从第 30 步恢复")),
    dict(series={say("resumed run", "恢复的运行"): (list(resumed_run), [resumed_run[s] - reference_run[s] for s in resumed_run]),
                 say("crashed run", "崩溃的运行"): (list(crashed_run), [crashed_run[s] - reference_run[s] for s in crashed_run])},
         xlabel=say("step", "步数"), ylabel=say("loss − uninterrupted run's loss", "损失 − 不中断运行的损失"),
         title=say("Difference from the run that never stopped", "与不中断运行的差")),
])

# %% [markdown]
# In real jobs the same pattern works at scale. `torchrun --max-restarts=3` (elastic launch)
# restarts **all** workers when one dies, and each runs the script again from the top; the script
# loads the newest checkpoint, exactly as `train(..., resume=True)` does here. ddplab restarts only
# the lost rank, but the rule is the same: whatever you need after a crash must be in the
# checkpoint, not only in a process's memory. How often to save is a trade-off: each save costs
# time, and every step since the last save is computed again (here steps 31-35).
#
# Clean up the checkpoints:

# %% [markdown] lang=zh
# 在真实的训练任务中，同样的模式可以大规模地使用。`torchrun --max-restarts=3`（弹性启动）在一个 worker 死掉时重启**所有** worker，每个 worker 都从头再运行一遍脚本；脚本加载最新的检查点，正如这里的 `train(..., resume=True)` 所做的那样。ddplab 只重启丢失的 rank，但规则是一样的：崩溃之后你需要的一切，都必须在检查点里，而不能只存在于某个进程的内存中。多久保存一次是一种权衡：每次保存都要花时间，而上次保存之后的每一步都要重新计算（这里是第 31-35 步）。
#
# 清理检查点：

# %%
import shutil

print(sorted(os.listdir(ckpt_dir)))
shutil.rmtree(ckpt_dir)

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why.
#
# **11.1** Suppose `train` saved a checkpoint every 4 steps instead of every 10 (`every=4`), and
# rank 2 died at the same step as in this run. How many steps would the resumed run compute a
# second time? Answer with a whole number; then say what saving more often costs.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。
#
# **11.1** 假设 `train` 每 4 步而不是每 10 步保存一次检查点（`every=4`），而 rank 2 死在与这次运行相同的那一步。恢复后的运行要把多少步再算一遍？请写一个整数；然后说说更频繁地保存要付出什么代价。

# %%
answer = ...    # steps computed twice with a checkpoint every 4 steps
check("11.1", answer, killed=max(crashed_run), resumed_from=min(resumed_run) - 1, every=4)

# %% [markdown]
# **11.2** Save only the model: `ddplab.checkpoint.save(path, model, None, step + 1)` and
# `ddplab.checkpoint.load(path, model)`. Would the resumed run still end with exactly the
# parameters of the uninterrupted run? Answer with a letter (and try it, if you like):
#
# - (a) no: SGD's momentum buffers would start again from zero at step 31, so every later step
#   moves the parameters differently
# - (b) yes, bit for bit: the parameters are all the state the training needs
# - (c) no: the batches of steps 31 to 60 would be different

# %% [markdown] lang=zh
# **11.2** 只保存模型：`ddplab.checkpoint.save(path, model, None, step + 1)` 和 `ddplab.checkpoint.load(path, model)`。恢复后的运行最终还会与不中断的运行得到完全相同的参数吗？请写一个字母（愿意的话，也可以试一试）：
#
# - (a) 不会：SGD 的动量缓冲区会在第 31 步从零重新开始，所以之后的每一步对参数的改变都不一样
# - (b) 会，逐位一致：参数就是训练需要的全部状态
# - (c) 不会：第 31 到 60 步的批次会不一样

# %%
answer = ...    # a letter: "a", "b" or "c"
check("11.2", answer)

# %% [markdown]
# **11.3** Someone replaces `run.pt` with a file whose `extra` holds an object of a class of their
# own (a pickled Python object). What does `ddplab.checkpoint.load(path, model, opt)` do on the 4
# ranks? Read `ddplab/rank/checkpoint.py` if you like, and answer with a letter:
#
# - (a) it loads the file: ddplab reads checkpoints with `weights_only=False`
# - (b) rank 0 raises, and ranks 1-3 wait in the broadcast until the group's timeout
# - (c) rank 0's `torch.load(..., weights_only=True)` refuses the object; every rank raises a
#   `ValueError` saying the file holds more than tensors and plain values, and nothing is loaded

# %% [markdown] lang=zh
# **11.3** 有人把 `run.pt` 换成了一个文件，它的 `extra` 里有一个他自己定义的类的对象（一个 pickle 过的 Python 对象）。`ddplab.checkpoint.load(path, model, opt)` 在 4 个 rank 上会怎样？愿意的话可以读一读 `ddplab/rank/checkpoint.py`，然后写一个字母：
#
# - (a) 加载这个文件：ddplab 用 `weights_only=False` 读取检查点
# - (b) rank 0 抛出错误，rank 1-3 则在广播中一直等到进程组超时
# - (c) rank 0 的 `torch.load(..., weights_only=True)` 拒绝这个对象；每个 rank 都抛出一个 `ValueError`，说明文件里不只有张量和普通值，什么也没有加载

# %%
answer = ...    # a letter: "a", "b" or "c"
check("11.3", answer)

# %%
%ddp_stop
