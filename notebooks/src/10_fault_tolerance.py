# %% [markdown]
# # Lesson 10 · Fault tolerance with checkpoints
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
# **简介。** 进程一多，迟早会有一个崩溃：机器故障，或者某个进程被内存不足（OOM）机制杀掉。
# 其他进程随后会卡在下一次 all-reduce 中，而训练保存在内存里的一切都会丢失。办法是
# **检查点**：每隔几步保存模型、优化器状态和步数，并把训练循环写成可以从最近的检查点重新开始。
# 这一课先完整运行一次确定性的训练循环，然后在第二次运行中途杀掉 rank 2，用 `%ddp_restart`
# 把它恢复，再从最近的检查点继续训练。最终参数与不中断的运行完全相同，逐位一致。
#
# **You will see:** rank 2 lost on the dashboard, a restart, the run resumed from step 30, and
# its loss curve matching the uninterrupted run step for step.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## A training loop that can resume
#
# Checkpoints go in a temporary directory made here in the notebook. (On several machines it
# would be storage that all of them can reach.)

# %%
import os
import tempfile

ckpt_dir = tempfile.mkdtemp(prefix="ddplab-lesson10-")
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
#    step of the uninterrupted run. We measured it with this loop: without the warm-up the
#    checksums after 60 steps differed in the 8th digit. (With 2 ranks they were equal: the order
#    does not matter when there are only two values, `a+b == b+a`.)

# %%
def train(steps, path, resume=False, every=10):
    """Train for `steps` steps (on every rank), saving a checkpoint every `every` steps.
    resume=True: start from the checkpoint at `path`. Returns the DDP model."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)                                      # the same initial model on every rank
    model = DDP(nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.zeros(1, 20)).sum().backward()                # warm-up: fixes DDP's bucket order (3.)
    opt.zero_grad()
    start = ddplab.checkpoint.load(path, model, opt) if resume else 0
    if resume:
        print(f"resuming from the checkpoint of step {start}")

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
    return model

# %%
%ddp_push train ckpt_dir

# %% [markdown]
# ## 1. The reference: 60 steps, no interruption
#
# `param_checksum` sums all parameters into one number that changes if any parameter changes.

# %%
%%ddp
import os
from ddplab.workloads import param_checksum

model = train(60, os.path.join(ckpt_dir, "reference.pt"))
reference = param_checksum(model.module)
print(f"after 60 steps: checksum {reference!r}")

# %% [markdown]
# ## 2. The same run, and rank 2 dies at step 35
#
# `%ddp_fault kill 2 --at-step 35` makes rank 2's process kill itself (SIGKILL, as the
# out-of-memory killer would) when it logs step 35. Checkpoints are saved at steps 10, 20 and 30;
# the last one before the crash is step 30.

# %%
%ddp_fault kill 2 --at-step 35

# %% [markdown]
# Run it. This cell fails, as it should. Watch the dashboard: rank 2 goes to *lost*, and ranks 0, 1
# and 3, which were waiting for rank 2's gradients in the all-reduce of step 36, are stopped within
# about a second, not after the group's timeout.

# %% tags=["raises-exception"]
%%ddp
path = os.path.join(ckpt_dir, "run.pt")
model = train(60, path)

# %% [markdown]
# `%ddp_status` shows the pool: rank 2's engine is gone (*lost*), the others *failed* in the cell
# but are alive.

# %%
%ddp_status

# %% [markdown]
# ## 3. Restart the lost rank
#
# `%ddp_restart` starts a new process for rank 2 and forms the gloo group again. Ranks 0, 1 and 3
# are the same processes as before and keep their variables. The objects tied to the old group
# (their DDP `model`) cannot be used any more, but `train` builds a new one each time. Rank 2 is a
# new process: it has nothing from before, not even `train`.

# %%
%ddp_restart

# %%
has_train = %ddp_gather "train" in globals()
has_reference = %ddp_gather "reference" in globals()
print("train defined on each rank:    ", has_train)
print("reference defined on each rank:", has_reference)
assert has_train == [True, True, False, True] and has_reference == [True, True, False, True]

# %% [markdown]
# What survived on every rank is what was on disk: the checkpoint of step 30. Send `train` and
# `ckpt_dir` to the ranks again (rank 2 needs them), and resume:

# %%
%ddp_push train ckpt_dir

# %%
%%ddp
import os
from ddplab.workloads import param_checksum

path = os.path.join(ckpt_dir, "run.pt")
model = train(60, path, resume=True)
resumed = param_checksum(model.module)
print(f"after 60 steps: checksum {resumed!r}")

# %% [markdown]
# ## 4. The same result, bit for bit

# %%
reference = %ddp_gather globals().get("reference")
resumed = %ddp_gather resumed
print("reference:", reference)
print("resumed:  ", resumed)
assert len(set(reference[:2] + reference[3:])) == 1      # rank 2's reference died with its process
assert resumed == [reference[0]] * 4                     # exactly equal: ==, not approximately
print("the resumed run ended with exactly the parameters of the run that never stopped")

# %% [markdown]
# `%ddp_history` holds every step each rank logged. Rank 0 lived through the whole lesson, so its
# history has all three runs: the reference, the run that crashed, and the resumed one. (Rank 2's
# history started again with its new process.)

# %%
h = %ddp_history
rows = h.where(rank=0)
cells = sorted({row["cell"] for row in rows})             # rank 0's three training cells, in order
runs = [{row["step"]: row["loss"] for row in rows if row["cell"] == c} for c in cells]
reference_run, crashed_run, resumed_run = runs
print(f"crashed run: steps {min(crashed_run)}-{max(crashed_run)}; resumed run: steps {min(resumed_run)}-{max(resumed_run)}")
assert max(crashed_run) == 35 and min(resumed_run) == 31 and max(resumed_run) == 60
assert all(crashed_run[s] == reference_run[s] for s in crashed_run)      # same losses, exactly
assert all(resumed_run[s] == reference_run[s] for s in resumed_run)

# %% [markdown]
# The picture: on the left, the crashed run stops at step 35, and the resumed run starts again
# after the checkpoint of step 30, so steps 31-35 are computed twice (the two lines are the same
# there, one on top of the other). On the right, the difference from the uninterrupted run's loss at
# every step: zero.

# %%
top = max(reference_run.values())
draw.lines(None, panels=[
    dict(series={say("resumed from step 30", "从第 30 步恢复"): (list(resumed_run), list(resumed_run.values())),
                 say("crashed run", "崩溃的运行"): (list(crashed_run), list(crashed_run.values())),
                 say("last checkpoint (step 30)", "最近的检查点（第 30 步）"): ([30, 30], [0, top]),
                 say("killed: rank 2 (step 35)", "被杀：rank 2（第 35 步）"): ([35, 35], [0, top])},
         xlabel=say("step", "步"), ylabel=say("loss (rank 0)", "损失（rank 0）"),
         title=say("Rank 2 killed at step 35, resumed from step 30", "rank 2 在第 35 步被杀，从第 30 步恢复")),
    dict(series={say("resumed run", "恢复的运行"): (list(resumed_run), [resumed_run[s] - reference_run[s] for s in resumed_run]),
                 say("crashed run", "崩溃的运行"): (list(crashed_run), [crashed_run[s] - reference_run[s] for s in crashed_run])},
         xlabel=say("step", "步"), ylabel=say("loss − uninterrupted run's loss", "损失 − 不中断运行的损失"),
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

# %%
import shutil

print(sorted(os.listdir(ckpt_dir)))
shutil.rmtree(ckpt_dir)

# %% [markdown]
# ## Exercises
#
# 1. Delete the two warm-up lines in `train` (`model(torch.zeros(1, 20))...` and the
#    `opt.zero_grad()` after it), push it again and repeat sections 1-3. How many digits of the
#    checksums still agree? Then try the same with `%ddp_start 2`.
# 2. Save only the model: `ddplab.checkpoint.save(path, model, None, step + 1)` and
#    `ddplab.checkpoint.load(path, model)`. Does the resumed run still end equal? Why not? (Which
#    state does SGD with momentum keep?)
# 3. Kill rank 0 instead (`%ddp_fault kill 0 --at-step 35`). Rank 0 is the rank that writes the
#    checkpoints: is the checkpoint of step 30 still whole? Resume from it.
#
# ## 练习
#
# 1. 删除 `train` 中的两行预热代码（`model(torch.zeros(1, 20))...` 及其后的 `opt.zero_grad()`），
#    重新推送并重复第 1-3 节。校验和还有几位相同？再用 `%ddp_start 2` 试一次。
# 2. 只保存模型：`ddplab.checkpoint.save(path, model, None, step + 1)` 和
#    `ddplab.checkpoint.load(path, model)`。恢复后的结果还相同吗？为什么？（带动量的 SGD 保存了什么状态？）
# 3. 改为杀掉 rank 0（`%ddp_fault kill 0 --at-step 35`）。rank 0 负责写检查点：第 30 步的检查点还完整吗？
#    从它恢复训练。

# %%
%ddp_stop
