# %% [markdown]
# # Lesson 18 · Debugging distributed code
#
# **In short.** With four processes, "it hangs" and "it fails" need new questions: *which* rank,
# *where*, and waiting for *whom*? Here you watch where each rank is while a cell runs, see ddplab
# name collectives that can never finish, open a debugger on the rank that failed with its frames
# and variables as they were, compare the ranks' models, and meet the hints ddplab gives for the
# mistakes almost everyone makes once.
#
# **You will learn**
# - how to see where each rank is while a cell runs: its line, and the collective it waits in, for how long
# - why collectives that do not match can never finish, and how ddplab names them and gives the notebook back
# - how to open a post-mortem pdb on the rank that failed, with its frames and variables as they were
# - how `%ddp_check` finds ranks whose models drifted apart, and the hints ddplab gives for common mistakes
#
# **Study time:** about 30 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** the ranks' lines and collectives while one of them lags, a mismatch report,
# a post-mortem pdb session on rank 2, `%ddp_check` naming ranks whose model drifted, and hints.

# %% [markdown] lang=zh
# # 第 18 课 · 调试分布式代码
#
# **简而言之**：有四个进程时，“程序卡住了”和“程序出错了”就需要问新的问题：是*哪个*进程（rank），卡在*哪里*，又在等*谁*？本课观察单元格运行时每个 rank 执行到了哪里，看 ddplab 如何指出永远无法完成的集合通信，在出错的 rank 上打开调试器（栈帧和变量都保持出错时的样子），比较各 rank 上的模型，并认识 ddplab 针对几乎每个人都会犯一次的错误所给出的提示。
#
# **你将学到**
# - 单元格运行时如何看到每个 rank 在哪里：它所在的代码行，以及它在哪个集合通信中等待、等了多久
# - 为什么不匹配的集合通信永远无法完成，以及 ddplab 如何指出它们并把 notebook 交还给你
# - 如何在出错的 rank 上打开事后调试的 pdb，栈帧和变量都保持出错时的样子
# - `%ddp_check` 如何找出模型已经偏离的 rank，以及 ddplab 针对常见错误给出的提示
#
# **学习时间**：约 30 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：一个 rank 落后时各 rank 所在的代码行和集合通信，一份不匹配报告，在 rank 2 上的一次事后（post-mortem）pdb 调试，`%ddp_check` 指出模型已经偏离的 rank，以及各种提示。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, lab, say

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
# A picture of the session: how long each kind of trouble held the notebook, as this run measured
# it, next to the collective timeout gloo would have waited for without ddplab.

# %% [markdown] lang=zh
# 用一张图总结本课：每种问题让 notebook 停了多久（本次运行实测），以及没有 ddplab 时 gloo 会一直等到的集合通信超时时间。

# %%
draw.bars({say("lagging rank", "落后的 rank"): lag_seconds,
           say("mismatch, named", "不匹配（已指出）"): mismatch_seconds,
           say("mismatch, gloo's timeout", "不匹配（gloo 超时）"): lab().config.timeout},
          ylabel=say("seconds until the cell returns", "单元格返回前的秒数"),
          title=say("ddplab names what can never finish", "ddplab 会指出永远无法完成的操作"), fmt="{:.1f} s")

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
# **18.1** rank 0 和 1 在 `dist.new_group([0, 1])` 上对 `torch.ones(1) * (rank + 1)` 做 all-reduce，同时 rank 2 和 3 在 `dist.new_group([2, 3])` 上对各自的张量做 all-reduce（每个 rank 都按同样的顺序创建这两个组）。这算不算会被 ddplab 中止的不匹配？如果不算，rank 2 之后持有的值是多少？请写出这个数；如果你认为这是不匹配，就写 0。（可以在你自己的 `%%ddp` 单元格里试一试。）

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

# %%
%ddp_stop
