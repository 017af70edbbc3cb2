# %% [markdown]
# # Lesson 18 · Debugging distributed code
#
# **In short.** With four processes, "it hangs" and "it fails" need new questions: *which* rank,
# *where*, and waiting for *whom*? Here you watch where each rank is while a cell runs, see ddplab
# name collectives that can never finish, open a debugger on the rank that failed with its frames
# and variables as they were, stop two ranks at a breakpoint and step them from the notebook,
# compare the ranks' models, meet the hints ddplab gives for the mistakes almost everyone makes
# once, and run torch's own tools on the same faults: `TORCH_DISTRIBUTED_DEBUG=DETAIL`,
# `monitored_barrier`, the flight recorder, and py-spy's stacks of a hung rank.
#
# **You will learn**
# - how to see where each rank is while a cell runs: its line and the collective it waits in, and with py-spy (`%ddp_stacks`) its whole stack, down to gloo's C++ frames
# - why collectives that do not match can never finish, how ddplab names them, and what torch's own checks (`TORCH_DISTRIBUTED_DEBUG=DETAIL`, `monitored_barrier`, the flight recorder) say about the same faults
# - how to stop chosen ranks at a breakpoint and step them from the notebook, and how to open a post-mortem pdb on the rank that failed
# - how `%ddp_check` finds ranks whose models drifted apart, and the hints ddplab gives for common mistakes
#
# **Study time:** about 50 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** the ranks' lines and collectives while one of them lags, a mismatch report,
# a post-mortem pdb session on rank 2, two ranks' gradients compared at a breakpoint before and after
# their all-reduce while the others wait for them, `%ddp_check` naming ranks whose model drifted,
# hints, and torch's reports and py-spy's stacks of a hung rank beside ddplab's.

# %% [markdown] lang=zh
# # 第 18 课 · 调试分布式代码
#
# **简而言之**：有四个进程时，“程序卡住了”和“程序出错了”就需要问新的问题：是*哪个*进程（rank），卡在*哪里*，又在等*谁*？本课观察单元格运行时每个 rank 执行到了哪里，看 ddplab 如何指出永远无法完成的集合通信，在出错的 rank 上打开调试器（栈帧和变量都保持出错时的样子），让两个 rank 停在断点处并在 notebook 中单步执行它们，比较各 rank 上的模型，认识 ddplab 针对几乎每个人都会犯一次的错误所给出的提示，最后用 torch 自己的工具检查同样的故障：`TORCH_DISTRIBUTED_DEBUG=DETAIL`、`monitored_barrier`、飞行记录器，以及 py-spy 给出的卡住的 rank 的调用栈。
#
# **你将学到**
# - 单元格运行时如何看到每个 rank 在哪里：它所在的代码行和它在其中等待的集合通信，以及借助 py-spy（`%ddp_stacks`）看到它的整个调用栈，一直到 gloo 的 C++ 栈帧
# - 为什么不匹配的集合通信永远无法完成，ddplab 如何指出它们，以及 torch 自己的检查手段（`TORCH_DISTRIBUTED_DEBUG=DETAIL`、`monitored_barrier`、飞行记录器）对同样的故障说了什么
# - 如何让选定的 rank 停在断点处并在 notebook 中单步执行它们，以及如何在出错的 rank 上打开事后调试的 pdb
# - `%ddp_check` 如何找出模型已经偏离的 rank，以及 ddplab 针对常见错误给出的提示
#
# **学习时间**：约 50 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：一个 rank 落后时各 rank 所在的代码行和集合通信，一份集合通信不匹配报告，在 rank 2 上的一次事后（post-mortem）pdb 调试，在断点处比较两个 rank 在 all-reduce 之前和之后的梯度（其他 rank 同时在等它们），`%ddp_check` 指出模型已经偏离的 rank，各种提示，以及与 ddplab 的显示并列的 torch 的报告和 py-spy 给出的卡住的 rank 的调用栈。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, lab, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## Where is each rank?
#
# When a cell runs longer than half a second, each rank's telemetry thread reads the rank's own
# Python stack four times a second and sends where it is: its line in the cell and, inside
# `torch.distributed`, which collective, on which group, for how long. The dashboard shows it above
# its table while the cell runs. Here rank 0 works for 4 seconds before the all-reduce the others
# already wait in:

# %% [markdown] lang=zh
# ## 每个 rank 在哪里？
#
# 当一个单元格运行超过半秒时，每个 rank 的遥测线程每秒四次读取该 rank 自己的 Python 调用栈，并发送它所在的位置：它在单元格中的哪一行；如果在 `torch.distributed` 内部，还有是哪个集合通信、在哪个进程组上、已经等了多久。单元格运行期间，仪表盘会在表格上方显示这些信息。下面 rank 0 先工作 4 秒，然后才进入其他 rank 早已在其中等待的 all-reduce：

# %%
%%ddp
import time
t = torch.ones(1)
if rank == 0:
    time.sleep(4)          # rank 0 is busy (a slow step, a big batch ...)
dist.all_reduce(t)

# %%
lag_seconds = lab().last_result.seconds   # how long the cell took
print(lab().last_result.waited)           # the last picture of the ranks while some of them waited
assert "all_reduce" in lab().last_result.waited

# %% [markdown]
# Nothing is wrong here: rank 0 arrives, and all four leave together. ddplab does not interrupt a
# rank that computes. It does when the waiting can never end.
#
# ## A collective that can never finish
#
# Every rank of a group must call the same collectives, in the same order, with tensors of the
# same shape and dtype. Here rank 3 all-reduces 3 numbers while the others all-reduce 4 (think of
# a buffer sized from a rank's own data). gloo would wait for the group's timeout; ddplab sees the
# ranks waiting in `all_reduce` calls that cannot match (and what ranks that gloo let through
# called before they finished the cell), names them with their lines, and cuts the collectives
# short within a few seconds. The cell runs with `%%ddp --expect CollectiveMismatch`: it is meant to
# fail, so ddplab shows its report as expected instead of raising.

# %% [markdown] lang=zh
# 这里并没有出错：rank 0 到达之后，四个 rank 一起离开。ddplab 不会打断一个正在计算的 rank；只有当等待永远不会结束时，它才会出手。
#
# ## 永远无法完成的集合通信
#
# 同一进程组中的每个 rank 都必须以相同的顺序调用相同的集合通信，张量的形状和数据类型也必须相同。下面 rank 3 对 3 个数做 all-reduce，而其他 rank 对 4 个数做 all-reduce（设想一个缓冲区的大小取决于某个 rank 自己的数据）。gloo 会一直等到进程组超时；ddplab 则看到这些 rank 在无法匹配的 `all_reduce` 调用中等待（对于被 gloo 放行、已经结束单元格的 rank，也会指出它们之前调用了什么），连同行号一起指出来，并在几秒之内中止这些集合通信。这个单元格用 `%%ddp --expect CollectiveMismatch` 运行：它本来就是要失败的，所以 ddplab 把它的报告作为预期的结果显示出来，而不是抛出异常。

# %%
%%ddp --expect CollectiveMismatch
t = torch.ones(3 if rank == 3 else 4)
dist.all_reduce(t)

# %%
mismatch_seconds = lab().last_result.seconds
print(say(f"the cell returned after {mismatch_seconds:.1f} s; without ddplab, the waiting ranks would have stayed "
          f"in all_reduce until gloo's timeout: {lab().config.timeout:.0f} s in this pool, 30 minutes by torch's default",
          f"单元格在 {mismatch_seconds:.1f} 秒后返回；如果没有 ddplab，等待中的 rank 会一直停在 all_reduce 里，"
          f"直到 gloo 超时：在这个进程池中是 {lab().config.timeout:.0f} 秒，torch 的默认值则是 30 分钟"))
assert mismatch_seconds < lab().config.timeout

# %% [markdown]
# The group was formed again on the same engines, so nothing is lost: every rank keeps its variables.
#
# ## A post-mortem debugger on one rank
#
# Rank 2 fails below: its index is out of range. The failure report shows the traceback; to look
# at the variables as they were, `%ddp_debug` opens pdb on that rank's last exception, driven from
# here (with no rank number it takes the rank that caused the last failure). Interactively it
# reads commands from a prompt (`where`, `up`, `down`, `p x`, `list`, `interact`, `q`); here `-c`
# gives them in advance. The failing cell runs with `%%ddp --expect IndexError` (the exception rank 2
# raises), so the report below, with rank 2's traceback, is expected.

# %% [markdown] lang=zh
# 进程组已在同样的引擎上重新组建，所以什么也没有丢失：每个 rank 都保留着自己的变量。
#
# ## 在一个 rank 上做事后调试
#
# 下面 rank 2 会出错：它的索引越界了。失败报告会显示调用栈（traceback）；若要查看出错时各变量的值，`%ddp_debug` 会针对该 rank 最近一次的异常打开 pdb，并在这里操控它（不指定 rank 编号时，它选择导致最近一次失败的那个 rank）。交互使用时，它从提示符读取命令（`where`、`up`、`down`、`p x`、`list`、`interact`、`q`）；这里用 `-c` 预先给出这些命令。出错的单元格用 `%%ddp --expect IndexError`（rank 2 抛出的异常）运行，所以下面带有 rank 2 调用栈的报告是预期之中的。

# %%
%%ddp --expect IndexError
sizes = [8, 8, 6, 16]                    # rank 2 got a shorter batch
def pick(batch, index):
    return batch[index]
batch = torch.arange(sizes[rank])
value = pick(batch, 3 * rank + 2)

# %%
%ddp_debug -c where -c 'p index, len(batch)' -c up -c 'p rank, sizes[rank]' -c list

# %% [markdown]
# ## Stopping ranks at a breakpoint
#
# A post-mortem shows a rank after it failed. To look at ranks while they run, stop them:
# `breakpoint()` in a `%%ddp` cell stops every rank that reaches it, in pdb driven from this
# notebook, and `ddplab.breakpoint(ranks=[0, 1])` stops only those. Below, each rank computes a
# gradient on its own data, then averages the gradients with a hand-written all-reduce loop (as a
# training step without DDP would); ranks 0 and 1 stop just before that loop, where each still holds
# its own gradient. A cell in the foreground asks for pdb's commands in an input box; this one runs
# in the background (`%%ddp --background`), and the next cells step it with `%ddp_step`.

# %% [markdown] lang=zh
# ## 让 rank 停在断点处
#
# 事后调试看到的是 rank 出错之后的样子。要在 rank 运行时查看它们，就得让它们停下来：`%%ddp` 单元格中的 `breakpoint()` 会让到达它的每个 rank 停在 pdb 中，而 pdb 由这个 notebook 操控；`ddplab.breakpoint(ranks=[0, 1])` 则只让这两个 rank 停下。下面每个 rank 先在自己的数据上算出梯度，再用一个手写的 all-reduce 循环对梯度求平均（不用 DDP 的训练步就是这样做的）；rank 0 和 1 停在这个循环之前，此时每个 rank 持有的还是它自己的梯度。在前台运行的单元格会在输入框中向你要 pdb 命令；这个单元格在后台运行（`%%ddp --background`），后面的单元格用 `%ddp_step` 单步执行它。

# %%
%%ddp --background
torch.manual_seed(0)
model = nn.Linear(4, 1)                             # the same start on every rank
x, y = torch.randn(8, 4) + rank, torch.randn(8, 1)  # each rank its own data
nn.functional.mse_loss(model(x), y).backward()      # so each rank its own gradient
ddplab.breakpoint(ranks=[0, 1])                     # ranks 0 and 1 stop here; 2 and 3 go on
for p in model.parameters():
    dist.all_reduce(p.grad)                         # the sum over the ranks ...
    p.grad /= world_size                            # ... divided: the average
averaged = model.weight.grad.clone()

# %%
import ast
import re
import time

debug = lab().debug


def line_of(r):
    """Rank r's line of what %ddp_step shows: stopped at a breakpoint (where), waiting (in what) or running."""
    return next(line for line in debug.stepper.status().splitlines() if re.match(rf"rank {r}[:：]", line))


deadline = time.monotonic() + 30
while sorted(debug.stopped()) != [0, 1] or not all("all_reduce" in line_of(r) for r in (2, 3)):
    assert time.monotonic() < deadline, debug.stepper.status()
    time.sleep(0.1)
%ddp_step

# %% [markdown]
# Ranks 0 and 1 stopped on line 6, the loop, before running it. Ranks 2 and 3 went on and wait in
# the loop's first all-reduce, for the two stopped ranks: nothing is cut or timed out while a rank
# is stopped at a breakpoint, however long you look. A pdb command sent to both (`%ddp_step` sends
# it to every stopped rank, `%ddp_step [0] ...` to rank 0 only); the replies come side by side:

# %% [markdown] lang=zh
# rank 0 和 1 停在第 6 行，也就是循环那一行，还没有执行它。rank 2 和 3 继续运行，在循环的第一个 all-reduce 中等待这两个停住的 rank：只要有 rank 停在断点处，无论你看多久，都不会有任何东西被切断或超时。下面把一条 pdb 命令发给这两个 rank（`%ddp_step` 发给每个停住的 rank，`%ddp_step [0] ...` 只发给 rank 0），它们的回复并排显示：

# %%
%ddp_step p model.weight.grad

# %% [markdown]
# From code, `lab().debug.step(...)` does the same and returns the replies rank by rank (pdb's
# output in `"out"`), to check them. Then `until 9` runs both ranks on until line 9: through the
# loop, whose all-reduces ranks 2 and 3 have been waiting in, and there they stop again.

# %% [markdown] lang=zh
# 在代码中，`lab().debug.step(...)` 做同样的事，并按 rank 返回各自的回复（pdb 的输出在 `"out"` 中），便于检查。接着 `until 9` 让这两个 rank 一直运行到第 9 行：穿过 rank 2 和 3 一直在其中等待的那些 all-reduce，然后在那里再次停下。

# %%
def weight_grads():
    """Ranks 0 and 1's weight gradients, read in pdb."""
    replies = debug.step("p model.weight.grad.flatten().tolist()")
    return {r: ast.literal_eval(reply["out"].strip()) for r, reply in replies.items()}


before = weight_grads()
assert before[0] != before[1]                       # each rank its own gradient
%ddp_step [0,1] until 9
assert {r: where["line"] for r, where in debug.stopped().items()} == {0: 9, 1: 9}
%ddp_step p model.weight.grad
after = weight_grads()
assert after[0] == after[1] and after[0] != before[0]
print(say(f"before the all-reduce, rank 0's weight gradient began with {before[0][0]:.4f} and rank 1's with "
          f"{before[1][0]:.4f}; after it, both begin with {after[0][0]:.4f}: the average over the four ranks",
          f"all-reduce 之前，rank 0 的权重梯度以 {before[0][0]:.4f} 开头，rank 1 的以 {before[1][0]:.4f} 开头；"
          f"之后两者都以 {after[0][0]:.4f} 开头：这是四个 rank 的平均值"))

# %% [markdown]
# `%ddp_step c` continues both ranks, and `%ddp_wait` waits for the cell's end. Every rank now
# holds the same averaged gradient, the one ranks 0 and 1 showed at line 9:

# %% [markdown] lang=zh
# `%ddp_step c` 让这两个 rank 继续运行，`%ddp_wait` 等待单元格结束。现在每个 rank 持有同样的平均梯度，也就是 rank 0 和 1 在第 9 行显示的那个：

# %%
%ddp_step c
%ddp_wait
averaged = %ddp_gather averaged
assert all(a.flatten().tolist() == after[0] for a in averaged)
print(say("the averaged weight gradient on every rank:", "每个 rank 上的平均权重梯度："),
      [round(v, 4) for v in averaged[0].flatten().tolist()])

# %% [markdown]
# ## Do the ranks still hold the same model?
#
# DDP keeps every rank's parameters equal by averaging gradients. Code that steps a model
# *without* DDP, or steps only on some ranks, lets them drift apart silently. `%ddp_check`
# compares a checksum of every parameter across ranks and names the ranks that differ:

# %% [markdown] lang=zh
# ## 各 rank 上的模型还一样吗？
#
# DDP 通过对梯度求平均，让每个 rank 的参数保持一致。如果代码*不经过* DDP 就更新模型，或者只在部分 rank 上更新，各 rank 的参数就会悄无声息地逐渐偏离。`%ddp_check` 在各 rank 之间比较每个参数的校验和，并指出哪些 rank 与众不同：

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
plain = nn.Linear(8, 1)                  # not wrapped in DDP
synced = DDP(nn.Linear(8, 1))
x, y = torch.randn(16, 8) + rank, torch.randn(16, 1)    # each rank its own data
for model in (plain, synced):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()

# %%
%ddp_check plain synced

# %%
assert lab().debug.check(["plain", "synced"]) == {"plain": [1, 2, 3], "synced": []}

# %% [markdown]
# ## Hints for common mistakes
#
# Code copied from a tutorial or a script often does what ddplab already did. Each of these cells
# runs, and ddplab says once what happened:
#
# - `init_process_group` again: the group exists (gloo, every rank); the line does nothing here.
# - `destroy_process_group()`: ddplab forms the group again after the cell, so the next one has it.
# - `import ddplab` in a cell: `ddplab.log` and `ddplab.phase` keep working.
# - a `DistributedSampler` iterated again without `set_epoch(epoch)`: every epoch would see the
#   same order of samples.

# %% [markdown] lang=zh
# ## 常见错误的提示
#
# 从教程或脚本里复制来的代码，常常会重做 ddplab 已经做过的事。下面每个单元格都能运行，ddplab 会就发生的情况提示一次：
#
# - 再次调用 `init_process_group`：进程组已经存在（gloo，包含所有 rank），这一行在这里什么也不做。
# - `destroy_process_group()`：ddplab 会在单元格结束后重新组建进程组，下一个单元格照样有进程组可用。
# - 在单元格中 `import ddplab`：`ddplab.log` 和 `ddplab.phase` 照常工作。
# - 没有调用 `set_epoch(epoch)` 就再次遍历 `DistributedSampler`：每个 epoch 看到的样本顺序都会一模一样。

# %%
%%ddp
dist.init_process_group("gloo")
x = dist.get_world_size()

# %%
%%ddp
dist.destroy_process_group()

# %%
%%ddp
import ddplab
t = torch.ones(1)
dist.all_reduce(t)                       # the group is there again
ddplab.log(loss=t.item(), samples=1)

# %%
%%ddp
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(list(range(32)), shuffle=True)
loader = DataLoader(range(32), sampler=sampler, batch_size=4)
orders = [list(sampler) for epoch in range(2)]           # forgot sampler.set_epoch(epoch)
same = orders[0] == orders[1]

# %%
same = %ddp_gather same
assert same == [True] * 4
print(say("without set_epoch, epoch 1 repeats epoch 0's order on every rank:",
          "没有 set_epoch 时，每个 rank 上第 1 个 epoch 都重复第 0 个 epoch 的顺序："), same)

# %% [markdown]
# ## torch's own tools, beside ddplab's
#
# ddplab watches the ranks from outside, without changing their code, and only in a notebook. torch
# has tools of its own for the same faults, which work in any script (under `torchrun`, on a
# cluster). Each runs below on this pool, beside what ddplab showed for the same fault.
#
# ### A rank that never arrives: `monitored_barrier`
#
# Rank 3's data loader hangs (for 3 seconds here; a stuck file system or a dead loader process
# hangs for good). ddplab does not cut a rank that computes: from outside, a hung loader and a long
# step look alike, and the dashboard only shows where each rank is (as in the first part).
# `dist.monitored_barrier(timeout=...)` is a barrier that names who is missing: rank 0 waits, at
# most `timeout` in all, for each other rank in turn, and raises naming the first that did not
# arrive (`wait_all_ranks=True` names them all); the others raise too, pointing to rank 0. Only the
# gloo backend has it.

# %% [markdown] lang=zh
# ## torch 自己的工具，与 ddplab 并列
#
# ddplab 从外部观察各 rank，不改动它们的代码，而且只在 notebook 中可用。torch 针对同样的故障有自己的工具，它们在任何脚本中都能用（在 `torchrun` 下，在集群上）。下面在这个进程池上逐一运行它们，与 ddplab 对同一故障的显示并列。
#
# ### 一个永远不到的 rank：`monitored_barrier`
#
# rank 3 的数据加载器卡住了（这里卡 3 秒；文件系统卡死或加载进程崩溃时会一直卡下去）。ddplab 不会打断一个正在计算的 rank：从外部看，卡住的加载器和一个很长的步看起来一样，仪表盘只显示每个 rank 在哪里（和第一部分一样）。`dist.monitored_barrier(timeout=...)` 是一个会指出谁没到的 barrier：rank 0 依次等待其他每个 rank，总共最多等 `timeout`，并在抛出的异常中指出第一个没有到达的 rank（`wait_all_ranks=True` 则指出所有没到的 rank）；其他 rank 也会抛出异常，并让你去看 rank 0。只有 gloo 后端支持它。

# %%
%%ddp --expect RuntimeError
import datetime


def load_batch(hang):
    """This rank's next batch; rank 3's loader hangs for `hang` seconds."""
    if rank == 3:
        time.sleep(hang)
    return torch.ones(4)


batch = load_batch(3)
dist.monitored_barrier(timeout=datetime.timedelta(seconds=1))     # rank 0 names who did not arrive

# %%
failed = lab().last_result.failed                   # rank -> its error
said = {r: failed[r].evalue.splitlines()[0] for r in (0, 1, 2)}
for r, text in said.items():
    print(f"rank {r}:", text)
assert "Rank 3 failed to pass monitoredBarrier" in said[0]
assert all("rank 0 logs" in said[r] for r in (1, 2))
barrier_seconds = lab().last_result.seconds

# %% [markdown]
# torch names rank 3, from rank 0, once the timeout is over; it does not say where rank 3 is. For
# that, look at the ranks while the hang lasts. The same hang, in the background this time, with a
# loader that does not come back: ranks 0, 1 and 2 wait for rank 3 in a plain `dist.barrier()`.
#
# ### The same hang, while it lasts: ddplab's where, py-spy's stacks, the flight recorder
#
# torch 2.13 records every collective each rank calls, gloo's too, in a **flight recorder** (on by
# default: nothing to set): a ring buffer of the latest calls (its size: `TORCH_FR_BUFFER_SIZE`),
# each with its name, its group, its sequence number on that group and its tensors' sizes.
# `torch._C._distributed_c10d._dump_fr_trace_json(True, True)` returns it as JSON. A rank stuck in a
# collective cannot run that itself, so the cell starts a thread that does, a second into the hang.

# %% [markdown] lang=zh
# torch 在超时之后从 rank 0 指出了 rank 3，但没有说 rank 3 在哪里。要知道这一点，就得在卡住的时候查看各 rank。还是同样的卡住，这次放在后台运行，而且加载器不再返回：rank 0、1、2 在一个普通的 `dist.barrier()` 中等待 rank 3。
#
# ### 同样的卡住，趁它还卡着：ddplab 的位置、py-spy 的调用栈、飞行记录器
#
# torch 2.13 会把每个 rank 调用的每个集合通信（gloo 的也包括在内）记录在一个**飞行记录器**（flight recorder）中（默认就是开着的，无需设置）：一个保存最近若干次调用的环形缓冲区（大小由 `TORCH_FR_BUFFER_SIZE` 决定），每条记录都有名称、进程组、在该进程组上的序号以及张量的大小。`torch._C._distributed_c10d._dump_fr_trace_json(True, True)` 把它以 JSON 的形式返回。卡在集合通信中的 rank 自己无法调用它，所以这个单元格启动一个线程，在卡住一秒后替它调用。

# %%
%%ddp --background
import json
import threading
from torch._C._distributed_c10d import _dump_fr_trace_json


def dump_flight_recorder(after):
    """`after` seconds from now, this rank's flight recorder, as JSON (the cell's own thread is stuck by then)."""
    time.sleep(after)
    global recorded
    recorded = json.loads(_dump_fr_trace_json(True, True))


dist.all_reduce(torch.ones(1))                      # a step all four finish
threading.Thread(target=dump_flight_recorder, args=(1.0,)).start()
batch = load_batch(600)                             # rank 3's loader hangs, for 10 minutes
dist.barrier()                                      # ranks 0, 1 and 2 wait for it here

# %%
deadline = time.monotonic() + 30
while not all("barrier" in line_of(r) for r in (0, 1, 2)):
    assert time.monotonic() < deadline, debug.stepper.status()
    time.sleep(0.1)
time.sleep(1.0)                                     # (the flight recorder is read a second into the hang)
%ddp_step

# %% [markdown]
# This is what ddplab shows (on the dashboard's where line, and with `%ddp_step` here): ranks 0, 1
# and 2 wait in `barrier`, rank 3 runs a line of notebook code: the line of `time.sleep` in
# `load_batch`, numbered in the cell that defined the function (a line number does not say which
# cell). ddplab does not cut it: rank 3 may be computing. **py-spy** reads a process's stacks from
# outside, with no change to its code (it pauses the process for the moment it reads):
# `%ddp_stacks` makes each rank run `py-spy dump` on itself and returns the text, every thread of
# the engine (its message loops, ddplab's telemetry ...). The cell below prints the main thread
# only, from the innermost frame down to the cell's own, for every rank:

# %% [markdown] lang=zh
# 这就是 ddplab 显示的内容（在仪表盘的位置行中，这里则用 `%ddp_step` 显示）：rank 0、1、2 在 `barrier` 中等待，rank 3 正在运行 notebook 中的一行代码：`load_batch` 中 `time.sleep` 那一行，行号是按定义这个函数的那个单元格来算的（行号并不说明是哪个单元格）。ddplab 不会打断它：rank 3 也许正在计算。**py-spy** 从外部读取一个进程的调用栈，不需要改动它的代码（读取的那一瞬间它会让进程暂停）：`%ddp_stacks` 让每个 rank 对自己运行 `py-spy dump`，并返回其文本，包括引擎的每个线程（它的消息循环、ddplab 的遥测线程……）。下面的单元格只打印每个 rank 的主线程，从最内层的栈帧一直到单元格自己的栈帧：

# %%
def main_thread(dump, width=100):
    """The main thread's frames in a py-spy dump, innermost first, down to the cell's own frame (<module>)."""
    frames = []
    for line in dump.split('"MainThread"', 1)[1].splitlines()[1:]:
        if not line.startswith("    "):
            break
        frame = line.strip()
        frames.append(frame if len(frame) <= width else frame[:width - 1] + "…")
        if frame.startswith("<module>"):
            break
    return frames


stacks = debug.stacks()                             # %ddp_stacks, from code: {rank: py-spy's dump}
assert all('"MainThread"' in dump for dump in stacks.values()), stacks[0][:300]   # (each rank's whole dump)
for r, dump in stacks.items():
    print(f"── rank {r} ──")
    print("\n".join("    " + frame for frame in main_thread(dump)))
assert all(main_thread(stacks[r])[0].startswith("barrier ") for r in (0, 1, 2))
assert main_thread(stacks[3])[0].startswith("load_batch ")
sleeping = re.search(r":(\d+)\)$", main_thread(stacks[3])[0]).group(1)  # the line of load_batch py-spy names ...
assert re.search(rf"(line|第) {sleeping}\b", line_of(3))                # ... is the line ddplab's where line shows
print(say("py-spy gives what the where line cannot: the whole chain. Rank 3 is in load_batch, at the line "
          "the where line showed, called from this cell's line with load_batch(600) (a cell's file is named by "
          "a number); ranks 0, 1 and 2 are in torch's barrier, called through ddplab's probe, which counts "
          "collectives.",
          "py-spy 给出了位置行给不出的东西：整条调用链。rank 3 在 load_batch 中，正是位置行显示的那一行，它是从这个"
          "单元格中 load_batch(600) 那一行调用的（单元格的文件以一个数字命名）；rank 0、1、2 在 torch 的 barrier 中，"
          "是经由 ddplab 用来统计集合通信的探针调用的。"))

# %% [markdown]
# Python frames end where C begins; with `--native` (`%ddp_stacks 0 3 --native`) py-spy reads the C
# and C++ frames too:

# %% [markdown] lang=zh
# Python 栈帧在 C 代码开始的地方就断了；加上 `--native`（`%ddp_stacks 0 3 --native`），py-spy 也会读出 C 和 C++ 的栈帧：

# %%
native = debug.stacks(ranks=[0, 3], native=True)   # %ddp_stacks 0 3 --native
assert all('"MainThread"' in dump for dump in native.values()), native[0][:300]
for r, dump in native.items():
    print(f"── rank {r} ──")
    print("\n".join("    " + frame for frame in main_thread(dump)))
assert any("Work::wait" in frame for frame in main_thread(native[0]))
assert any("cond_wait" in frame for frame in main_thread(native[0]))
assert any("sleep" in frame for frame in main_thread(native[3])[:2])
print(say("Rank 0's Python thread sleeps in c10d::Work::wait, on a condition variable (pthread_cond_wait): gloo "
          "moves the bytes on threads of its own, and the rank's thread waits for them to say the barrier is done. "
          "Rank 3 sleeps in the C library (clock_nanosleep, called by Python's time.sleep). That is as much as "
          "the stacks say.",
          "rank 0 的 Python 线程在 c10d::Work::wait 中、在一个条件变量上（pthread_cond_wait）休眠：gloo 在它自己的"
          "线程上搬运字节，rank 的线程等它们报告 barrier 已经完成。rank 3 在 C 库中休眠（clock_nanosleep，由 Python "
          "的 time.sleep 调用）。调用栈能告诉我们的就这么多。"))

# %% [markdown]
# `%ddp_interrupt` ends the cell: rank 3's `time.sleep` raises `KeyboardInterrupt`, and ddplab frees
# the ranks waiting for it in the barrier.

# %% [markdown] lang=zh
# `%ddp_interrupt` 结束这个单元格：rank 3 的 `time.sleep` 抛出 `KeyboardInterrupt`，ddplab 则让在 barrier 中等它的各 rank 脱身。

# %%
%ddp_interrupt
from ddplab import RankFailed

try:
    lab().wait(30)                                  # %ddp_wait, from code (it would show the failure as an error)
    raise AssertionError("the hung cell ended without an error")
except RankFailed as failure:
    hang = failure
assert hang.failures[3].ename == "KeyboardInterrupt"
print(say("the cell ended: ", "单元格结束：") + say("; ", "；").join(hang.result.recovery))

# %% [markdown]
# Now the flight recorder, as the thread read it a second into the hang. For each rank: its last
# collective on the default group, and the group's counters (the last collective the rank called,
# "enqueued", and the last that finished, "completed"):

# %% [markdown] lang=zh
# 现在来看线程在卡住一秒后读出的飞行记录器。对每个 rank：它在默认进程组上的最后一次集合通信，以及这个进程组的计数器（这个 rank 调用的最后一次集合通信 “enqueued”，和已经结束的最后一次 “completed”）：

# %%
def last_call(dump):
    """A rank's last collective on the default group in its flight recorder, and that group's counters."""
    mine = [e for e in dump.get("entries", []) if e["process_group"][1] == "default_pg"]
    entry = max(mine, key=lambda e: e["record_id"])
    return entry, dump["pg_status"][str(entry["pg_id"])]


recorded = %ddp_gather recorded
calls = [last_call(dump) for dump in recorded]
for r, (entry, counters) in enumerate(calls):
    name, number, state, retired = (entry["profiling_name"], entry["collective_seq_id"], entry["state"],
                                     entry["retired"])
    enqueued, completed = counters["last_enqueued_collective"], counters["last_completed_collective"]
    print(say(f"rank {r}: {name} #{number}, state {state!r}, retired {retired} · enqueued {enqueued}, "
              f"completed {completed}",
              f"rank {r}：{name}，第 {number} 次，state {state!r}，retired {retired} · enqueued {enqueued}，"
              f"completed {completed}"))
barrier = calls[0][0]["collective_seq_id"]
assert all(e["profiling_name"] == "gloo:barrier" and e["collective_seq_id"] == barrier and not e["retired"]
           for e, _ in calls[:3])
assert calls[3][0]["profiling_name"] == "gloo:all_reduce" and calls[3][0]["collective_seq_id"] == barrier - 1
assert all(int(c["last_completed_collective"]) == barrier - 1 for _, c in calls)
assert all(e["state"] == "scheduled" and e["time_discovered_started_ns"] == e["time_discovered_completed_ns"] == 0
           for e, _ in calls)                       # (gloo's collectives are not timed)

# %% [markdown]
# Read across the ranks: ranks 0, 1 and 2 called collective number N on the default group, a
# barrier, and it had not finished (`retired` is false, and "completed" is one short of
# "enqueued"); rank 3's last call is number N−1, the all-reduce all four finished. So rank 3 never
# called the barrier: the recorder names the missing rank as ddplab's where line did, from records
# any script can dump (on a cluster, with NCCL, torch can write them to files when a collective
# times out). What it does not tell, with gloo: `state` stays `"scheduled"` and the times it was
# seen to start and to finish stay 0, as gloo's collectives are not timed; so the recorder says which
# collectives each rank *called* and how far each group's counters got, not how long a rank waited,
# nor where a rank that called nothing is. And only a dump taken during the hang shows it: once the
# cell has ended, the barrier that failed counts as finished.

# %% [markdown] lang=zh
# 横向比较各 rank：rank 0、1、2 在默认进程组上调用了第 N 次集合通信，一个 barrier，它还没有结束（`retired` 为 false，“completed” 比 “enqueued” 少一）；rank 3 的最后一次调用是第 N−1 次，也就是四个 rank 都完成了的那次 all-reduce。所以 rank 3 从未调用这个 barrier：飞行记录器指出了缺席的 rank，和 ddplab 的位置行一样，而它依据的是任何脚本都能导出的记录（在集群上使用 NCCL 时，torch 可以在集合通信超时时把它们写入文件）。在 gloo 上它不能告诉你的是：`state` 始终是 `"scheduled"`，记录到的开始时间和结束时间始终为 0，因为 gloo 的集合通信不计时；所以飞行记录器说的是每个 rank *调用了*哪些集合通信、每个进程组的计数器走到了哪里，而不是一个 rank 等了多久，也不说明一个什么都没调用的 rank 在哪里。而且只有在卡住期间导出的记录才显示这一点：单元格结束之后，那个失败的 barrier 也算作已经结束了。

# %%
%%ddp
afterwards = json.loads(_dump_fr_trace_json(True, True))

# %%
afterwards = %ddp_gather afterwards
same = [next(e for e in dump["entries"] if e["record_id"] == entry["record_id"])
        for dump, (entry, _) in zip(afterwards, calls)]
assert all(e["retired"] for e in same[:3])
print(say(f"dumped after the cell: the barrier #{barrier} of ranks 0, 1 and 2 is now retired, like a collective "
          "that finished",
          f"单元格结束后导出：rank 0、1、2 的第 {barrier} 次集合通信（barrier）现在已经 retired，与一次正常结束的集合通信无异"))

# %% [markdown]
# ### A shape mismatch caught before the collective: `TORCH_DISTRIBUTED_DEBUG=DETAIL`
#
# The mismatch of the second part again (rank 3 all-reduces 3 numbers, the others 4), on a group
# that torch checks. With `TORCH_DISTRIBUTED_DEBUG=DETAIL`, each group made from then on is wrapped:
# before every collective, the ranks exchange a fingerprint of it (its kind, sequence number, shapes
# and dtypes) and raise if they differ. torch reads the variable when `torch.distributed` is
# imported, and again when told to (`dist.set_debug_level_from_env()`), and the level is fixed for a
# group when it is made: the pool's own group stays unchecked, and setting the variable back to
# `OFF` makes later groups plain again. Each rank catches its error here, so the cell runs to its end.

# %% [markdown] lang=zh
# ### 在集合通信之前就发现形状不匹配：`TORCH_DISTRIBUTED_DEBUG=DETAIL`
#
# 再来一次第二部分的不匹配（rank 3 对 3 个数做 all-reduce，其他 rank 对 4 个数），这次在一个由 torch 检查的进程组上。设置 `TORCH_DISTRIBUTED_DEBUG=DETAIL` 之后，此后创建的每个进程组都会被包装起来：在每次集合通信之前，各 rank 先交换它的“指纹”（种类、序号、形状和数据类型），不一致就抛出异常。torch 在导入 `torch.distributed` 时读取这个变量，被告知时（`dist.set_debug_level_from_env()`）会再读一次，而一个进程组的检查级别在创建时就固定下来：进程池自己的进程组仍然不受检查，把变量设回 `OFF` 之后创建的进程组也不再受检查。这里每个 rank 都捕获自己的错误，所以单元格能运行到结束。

# %%
%%ddp
import os

os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
dist.set_debug_level_from_env()                     # torch reads the variable now ...
checked = dist.new_group(list(range(world_size)))   # ... and checks every collective of the groups made from now on
os.environ["TORCH_DISTRIBUTED_DEBUG"] = "OFF"
dist.set_debug_level_from_env()                     # (groups made after this are plain again)
plain = dist.new_group(list(range(world_size)))

t = torch.ones(3 if rank == 3 else 4)
tic = time.perf_counter()
try:
    dist.all_reduce(t, group=checked)               # the mismatch of the second part, on the checked group
except RuntimeError as error:
    caught, caught_after = str(error), time.perf_counter() - tic

# %%
caught = %ddp_gather caught
caught_after = %ddp_gather caught_after
short = lambda message: re.sub(r"CollectiveFingerPrint\((SequenceNumber=\d+, OpType=\w+, TensorShape=\[[\d, ]*\]).*?\)\)\)",
                               r"(\1, ...)", message)        # (the fingerprints, shortened)
for r in (0, 3):
    print(f"rank {r}:", short(caught[r]))
assert all(c.startswith("Detected mismatch between collectives") for c in caught) and "4vs 3" in caught[0]
detail_seconds = max(caught_after)
print(say(f"every rank raised {1e3 * detail_seconds:.0f} ms after the call; ddplab named the same mismatch after "
          f"{mismatch_seconds:.1f} s, from outside",
          f"每个 rank 都在调用后 {1e3 * detail_seconds:.0f} 毫秒内抛出异常；ddplab 从外部指出同一个不匹配用了 "
          f"{mismatch_seconds:.1f} 秒"))

# %% [markdown]
# Every rank knows at once what differs (`Tensor shapes: 4vs 3`), before any number is sent, and
# the group is still usable: nothing was left half done. The price is paid on every collective,
# mismatched or not. The flight recorder shows it: one all-reduce on `checked` against one on
# `plain`, and the time of each.

# %% [markdown] lang=zh
# 每个 rank 立刻就知道哪里不同（`Tensor shapes: 4vs 3`），而且是在发送任何数据之前；进程组也仍然可用：没有任何操作做到一半。代价则由每一次集合通信来付，无论匹配与否。飞行记录器可以说明这一点：在 `checked` 上做一次 all-reduce，与在 `plain` 上做一次相比，再看看各自的耗时。

# %% [markdown]
# **Predict, then run.** An all-reduce of 1,000 numbers on `checked` (DETAIL) takes how many times
# as long as the same all-reduce on `plain`? Write a number: 1 means the check costs nothing.

# %% [markdown] lang=zh
# **先预测，再运行。** 在 `checked`（DETAIL）上对 1,000 个数做一次 all-reduce，耗时是在 `plain` 上做同样的 all-reduce 的多少倍？写一个数：1 表示检查不花任何时间。

# %%
predict("18.detail", ...)    # time of one all_reduce of 1,000 numbers on checked / on plain

# %%
%%ddp
def recorded_during(call):
    """The names of the collectives the flight recorder holds for what call() did."""
    last = json.loads(_dump_fr_trace_json(True, True))["entries"][-1]["record_id"]
    call()
    return [e["profiling_name"] for e in json.loads(_dump_fr_trace_json(True, True))["entries"]
            if e["record_id"] > last]


def ms_per_all_reduce(group, n=50):
    t = torch.ones(1000)
    dist.barrier()
    tic = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t, group=group)
    return 1e3 * (time.perf_counter() - tic) / n


t = torch.ones(1000)
for_plain = recorded_during(lambda: dist.all_reduce(t, group=plain))
for_checked = recorded_during(lambda: dist.all_reduce(t, group=checked))
plain_ms, checked_ms = ms_per_all_reduce(plain), ms_per_all_reduce(checked)

# %%
for_plain = %ddp_gather for_plain
for_checked = %ddp_gather for_checked
plain_ms = %ddp_gather plain_ms
checked_ms = %ddp_gather checked_ms
plain_ms, checked_ms = max(plain_ms), max(checked_ms)          # (the slowest rank sets the pace)
print(say("one all_reduce on plain:", "在 plain 上做一次 all_reduce："), for_plain[0])
print(say("one all_reduce on checked:", "在 checked 上做一次 all_reduce："), for_checked[0])
assert for_plain[0] == ["gloo:all_reduce"] and for_checked[0][-1] == "gloo:all_reduce" and len(for_checked[0]) > 1
print(say(f"{len(for_checked[0])} collectives instead of 1: each all_reduce of 1,000 numbers took {checked_ms:.2f} ms "
          f"on checked, {plain_ms:.2f} ms on plain ({checked_ms / plain_ms:.1f}x)",
          f"{len(for_checked[0])} 次集合通信而不是 1 次：每次对 1,000 个数的 all_reduce，在 checked 上耗时 "
          f"{checked_ms:.2f} ms，在 plain 上耗时 {plain_ms:.2f} ms（是后者的 {checked_ms / plain_ms:.1f} 倍）"))
reveal("18.detail", float(checked_ms / plain_ms), unit=say("× plain's time", "× plain 的耗时"))

# %% [markdown]
# So DETAIL is a switch for hunting a mismatch, not for training: each collective becomes several,
# and small collectives, whose time is mostly waiting, take longer with them. ddplab adds no
# collective (the recorder saw only the all-reduce on `plain`: ddplab counts the ranks' calls and
# reads their stacks a few times a second while a cell runs), names a mismatch a second or two after
# the ranks block, and works only in a notebook.

# %% [markdown] lang=zh
# 所以 DETAIL 是用来排查不匹配的开关，而不是训练时用的：每次集合通信都变成了好几次，而小的集合通信耗时主要花在等待上，多出来的几次让它们更慢。ddplab 不增加任何集合通信（飞行记录器在 `plain` 上只看到了那次 all-reduce：ddplab 只是统计各 rank 的调用，并在单元格运行时每秒读取几次它们的调用栈），在各 rank 阻塞一两秒后指出不匹配，而且只在 notebook 中可用。

# %% [markdown]
# A picture of the session: how long each kind of trouble took to show itself, as this run measured
# it (the cell's time; for DETAIL, until every rank had raised), next to the collective timeout gloo
# would have waited for without ddplab.

# %% [markdown] lang=zh
# 用一张图总结本课：每种问题过了多久才显现出来（本次运行实测：单元格的耗时；DETAIL 则是到每个 rank 都抛出异常为止），以及没有 ddplab 时 gloo 会一直等到的集合通信超时时间。

# %%
draw.bars({say("lagging rank", "落后的 rank"): lag_seconds,
           say("mismatch, named by ddplab", "集合通信不匹配（ddplab 指出）"): mismatch_seconds,
           say("mismatch, DETAIL raises", "集合通信不匹配（DETAIL 抛出异常）"): detail_seconds,
           say("mismatch, gloo's timeout", "集合通信不匹配（gloo 超时）"): lab().config.timeout},
          ylabel=say("seconds", "秒"),
          title=say("How long each took to show itself", "每种情况过了多久才显现出来"), fmt="{:.1f} s")

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right, and why.
#
# **18.1** Ranks 0 and 1 all-reduce `torch.ones(1) * (rank + 1)` on `dist.new_group([0, 1])`
# while ranks 2 and 3 all-reduce theirs on `dist.new_group([2, 3])` (every rank creates both groups,
# in the same order). Is that a mismatch that ddplab would cut short, and if not, what value does rank
# 2 hold afterwards? Answer with that number, or with 0 if you think it is a mismatch. (Try it in a
# `%%ddp` cell of your own.)

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你答案对不对，以及为什么。
#
# **18.1** rank 0 和 1 在 `dist.new_group([0, 1])` 上对 `torch.ones(1) * (rank + 1)` 做 all-reduce，同时 rank 2 和 3 在 `dist.new_group([2, 3])` 上对各自的张量做 all-reduce（每个 rank 都按同样的顺序创建这两个组）。这算不算会被 ddplab 中止的集合通信不匹配？如果不算，rank 2 之后持有的值是多少？请写出这个数；如果你认为这是不匹配，就写 0。（可以在你自己的 `%%ddp` 单元格里试一试。）

# %%
answer = ...    # the value rank 2 holds after the all-reduce on its pair (0: a mismatch)
check("18.1", answer)

# %% [markdown]
# **18.2** In the post-mortem above, rank 2 failed on `batch[index]` (pdb printed `index` and
# `len(batch)`). How many elements would rank 2's batch need at least for the cell to run on every
# rank, with the same index? Answer with a whole number.

# %% [markdown] lang=zh
# **18.2** 在上面的事后调试中，rank 2 在 `batch[index]` 处出错（pdb 打印了 `index` 和 `len(batch)`）。索引不变的话，rank 2 的批次至少要有多少个元素，这个单元格才能在每个 rank 上都顺利运行？请写一个整数。

# %%
answer = ...    # the smallest batch size of rank 2 for which batch[index] works
check("18.2", answer, index=3 * 2 + 2, size=6)

# %% [markdown]
# **18.3** Make rank 1 skip `opt.step()` for `synced` (the DDP model) in the cell of `%ddp_check`,
# run it again and then `%ddp_check synced`. Which ranks does it name? Answer with a list of ranks,
# like `[0, 3]`, or `[]` if it names none.

# %% [markdown] lang=zh
# **18.3** 在 `%ddp_check` 前面那个单元格里，让 rank 1 对 `synced`（DDP 模型）跳过 `opt.step()`，重新运行它，再运行 `%ddp_check synced`。它会指出哪些 rank？请写一个 rank 的列表，例如 `[0, 3]`；如果一个也不指出，就写 `[]`。

# %%
answer = ...    # the ranks %ddp_check names for synced when rank 1 skips its step
check("18.3", answer)

# %% [markdown]
# **18.4** In the breakpoint part, ranks 0 and 1 were stopped before the all-reduce loop and went on
# together with `%ddp_step [0,1] until 9`. Suppose you had sent `%ddp_step [0] until 9` instead,
# to rank 0 only. Where would rank 0 be then? Write a letter:
#
# - **a**: stopped at line 9, holding the gradient averaged over the four ranks
# - **b**: stopped at line 9, holding the gradient averaged over ranks 0, 2 and 3
# - **c**: waiting in the loop's first all-reduce, until rank 1 is sent on too
# - **d**: failed: ddplab cuts a collective that waits for a rank stopped at a breakpoint

# %% [markdown] lang=zh
# **18.4** 在断点那一部分，rank 0 和 1 停在 all-reduce 循环之前，然后用 `%ddp_step [0,1] until 9` 一起继续运行。假如你发送的是 `%ddp_step [0] until 9`，只发给 rank 0，那么 rank 0 会在哪里？写一个字母：
#
# - **a**：停在第 9 行，持有四个 rank 平均后的梯度
# - **b**：停在第 9 行，持有 rank 0、2、3 平均后的梯度
# - **c**：在循环的第一个 all-reduce 中等待，直到 rank 1 也被放行
# - **d**：失败：ddplab 会切断等待断点处 rank 的集合通信

# %%
answer = ...    # a, b, c or d
check("18.4", answer)

# %%
%ddp_stop
