# %% [markdown]
# # Lesson 14 · Debugging distributed code
#
# **In short.** With four processes, "it hangs" and "it fails" need new questions: *which* rank,
# *where*, and waiting for *whom*? Here you watch where each rank is while a cell runs, see ddplab
# name collectives that can never finish, open a debugger on the rank that failed with its frames
# and variables as they were, compare the ranks' models, and meet the hints ddplab gives for the
# mistakes almost everyone makes once.
#
# **简介。** 有四个进程时，"程序卡住了"和"程序出错了"需要问新的问题：是*哪个* rank，卡在
# *哪里*，又在等*谁*？这一课观察单元格运行时每个 rank 所在的位置，看 ddplab 如何指出永远
# 无法完成的集合通信，在出错的 rank 上打开调试器（栈帧和变量保持出错时的样子），比较各 rank
# 的模型，并认识 ddplab 针对几乎每个人都会犯一次的错误给出的提示。
#
# **You will see:** the ranks' lines and collectives while one of them lags, a mismatch report,
# a post-mortem pdb session on rank 2, `%ddp_check` naming ranks whose model drifted, and hints.

# %%
%load_ext ddplab
from ddplab.lessons import draw, lab, say

# %%
%ddp_start 4

# %% [markdown]
# ## Where is each rank?
#
# When a cell runs longer than a second, each rank's telemetry thread reads the rank's own Python
# stack four times a second and sends where it is: its line in the cell and, inside
# `torch.distributed`, which collective, on which group, for how long. The dashboard shows it above
# its table while the cell runs. Here rank 0 works for 4 seconds before the all-reduce the others
# already wait in:

# %%
%%ddp
import time
t = torch.ones(1)
if rank == 0:
    time.sleep(4)          # rank 0 is busy (a slow step, a big batch ...)
dist.all_reduce(t)

# %%
print(lab().last_result.waited)   # the last picture of the ranks while some of them waited
assert "all_reduce" in lab().last_result.waited and "rank 0: line 4" in lab().last_result.waited

# %% [markdown]
# Nothing is wrong here: rank 0 arrives, and all four leave together. ddplab does not interrupt a
# rank that computes. It does when the waiting can never end.
#
# ## A collective that can never finish
#
# Every rank of a group must call the same collectives, in the same order, with tensors of the
# same shape and dtype. Here rank 3 all-reduces 3 numbers while the others all-reduce 4 (think of
# a buffer sized from a rank's own data). gloo would wait for the group's timeout; ddplab sees all
# four ranks waiting in `all_reduce` calls that cannot match, names them with their lines, and
# cuts the collectives short within a few seconds:

# %% tags=["raises-exception"]
%%ddp
t = torch.ones(3 if rank == 3 else 4)
dist.all_reduce(t)

# %% [markdown]
# The group was formed again on the same engines, so nothing is lost: every rank keeps its variables.
#
# ## A post-mortem debugger on one rank
#
# Rank 2 fails below: its index is out of range. The failure report shows the traceback; to look
# at the variables as they were, `%ddp_debug` opens pdb on that rank's last exception, driven from
# here (with no rank number it takes the rank that caused the last failure). Interactively it
# reads commands from a prompt (`where`, `up`, `down`, `p x`, `list`, `interact`, `q`); here `-c`
# gives them in advance:

# %% tags=["raises-exception"]
%%ddp
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
assert lab().check(["plain", "synced"]) == {"plain": [1, 2, 3], "synced": []}

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
# A picture of the session: how long each kind of trouble held the notebook.

# %%
draw.bars({say("lagging rank", "落后的 rank"): 4.0,
           say("mismatch, named", "不匹配（已指出）"): 3.0,
           say("mismatch, gloo alone", "不匹配（仅 gloo）"): 30.0},
          ylabel=say("seconds until the cell returns", "单元格返回前的秒数"),
          title=say("ddplab names what can never finish", "ddplab 会指出永远无法完成的操作"), fmt="{:.0f} s")

# %% [markdown]
# ## Exercises
#
# 1. Make ranks 0 and 1 call `all_reduce` on a `dist.new_group([0, 1])` while ranks 2 and 3 call it
#    on `dist.new_group([2, 3])`. Is that a mismatch? Why not?
# 2. Run `%ddp_debug` with no `-c` and explore interactively: `where`, `up`, `interact`, then
#    `print(batch)` in the console, `exit()`, `q`.
# 3. Make rank 1 skip `opt.step()` for `synced` (the DDP model) and run `%ddp_check synced`. Does
#    DDP keep the ranks equal when one of them does not step?
#
# ## 练习
#
# 1. 让 rank 0 和 1 在 `dist.new_group([0, 1])` 上调用 `all_reduce`，而 rank 2 和 3 在
#    `dist.new_group([2, 3])` 上调用。这算不匹配吗？为什么？
# 2. 不加 `-c` 运行 `%ddp_debug`，交互式地探索：`where`、`up`、`interact`，然后在控制台中
#    `print(batch)`、`exit()`、`q`。
# 3. 让 rank 1 对 `synced`（DDP 模型）跳过 `opt.step()`，再运行 `%ddp_check synced`。当某个 rank
#    不更新时，DDP 还能让各 rank 保持一致吗？

# %%
%ddp_stop
