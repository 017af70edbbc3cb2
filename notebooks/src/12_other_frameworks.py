# %% [markdown]
# # Lesson 12 · The same ideas in TensorFlow
#
# **In short.** Everything in this course has a counterpart in TensorFlow 2's `tf.distribute`.
# This lesson puts them side by side: how the workers are started and find each other
# (torchrun's environment variables vs `TF_CONFIG`), DDP vs `MirroredStrategy` (one process for
# all GPUs of a machine) and `MultiWorkerMirroredStrategy` (one process per machine, collective
# all-reduce), `DistributedSampler` vs tf.data auto-sharding, per-replica vs global batch
# size, `strategy.reduce` vs `dist.all_reduce`, checkpoints and restarts, and gradient
# accumulation. TensorFlow is not installed here; its code is shown, not run. The PyTorch side
# runs live on the 4 ranks.
#
# **简介。** 本课程中的每个概念在 TensorFlow 2 的 `tf.distribute` 中都有对应。这一课把它们
# 并排比较：进程如何启动并互相找到（torchrun 的环境变量与 `TF_CONFIG`）、DDP 与
# `MirroredStrategy`（一个进程管一台机器上的所有 GPU）和 `MultiWorkerMirroredStrategy`
# （每台机器一个进程，用集合通信做 all-reduce）、`DistributedSampler` 与 tf.data 的自动分片、
# 每个副本的批大小与全局批大小、`strategy.reduce` 与 `dist.all_reduce`、检查点与重启，以及梯度累积。
# 这里没有安装 TensorFlow：它的代码只展示、不运行；PyTorch 这一边在 4 个 rank 上实时运行。
#
# **You will see:** each rank's torchrun environment next to the `TF_CONFIG` it would have, sharding and
# batch sizes compared, `strategy.reduce(SUM/MEAN)` done with all-reduce (as a picture), and the two
# conventions for scaling the loss giving the same gradients.

# %%
%load_ext ddplab
from ddplab.lessons import draw, say

# %%
%ddp_start 4

# %% [markdown]
# ## 1. Starting the workers and finding each other
#
# <table>
# <tr><th>PyTorch (torchrun)</th><th>TensorFlow 2 (tf.distribute)</th></tr>
# <tr><td><pre>
# # on every machine:
# torchrun --nnodes=2 --nproc-per-node=2 \
#     --rdzv-backend=c10d --rdzv-endpoint=host0:29500 train.py
# # in train.py (each process):
# dist.init_process_group("gloo")   # reads the env vars
# rank = dist.get_rank()
# </pre></td><td><pre>
# # each worker process, started by you or a cluster manager:
# os.environ["TF_CONFIG"] = json.dumps({
#     "cluster": {"worker": ["host0:12345", "host1:12345"]},
#     "task": {"type": "worker", "index": 0}})
# strategy = tf.distribute.MultiWorkerMirroredStrategy()
# task = strategy.cluster_resolver.task_id
# </pre></td></tr>
# </table>
#
# - **torchrun** starts one process per device and gives each one its place in environment
#   variables: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, and `MASTER_ADDR`/`MASTER_PORT`,
#   **one** address where the processes meet (a key-value store). Through that store the ranks find
#   each other's addresses.
# - **TensorFlow** reads `TF_CONFIG`, a JSON string with the **whole cluster** (every worker's
#   `host:port`, each worker runs a gRPC server there) and this process's own `task` (type and
#   index). Worker 0 is also the *chief*: it writes checkpoints and summaries, like rank 0.
#   Every worker runs the same program.
#
# ddplab needs neither: its ranks meet through a file in a private directory (a `FileStore`).
# But each rank can show what torchrun would have given it, and the `TF_CONFIG` it would have as
# one of 4 single-device workers:

# %%
%%ddp
import json

torchrun_env = {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world_size,
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500}
tf_config = {"cluster": {"worker": [f"127.0.0.1:{12345 + r}" for r in range(world_size)]},
             "task": {"type": "worker", "index": rank}}
print("torch.distributed:", dist.get_backend(), "rank", dist.get_rank(), "of", dist.get_world_size())
print("torchrun would set:", " ".join(f"{k}={v}" for k, v in torchrun_env.items()))
print("TF_CONFIG would be:", json.dumps(tf_config))

# %%
configs = %ddp_gather tf_config
assert [c["task"]["index"] for c in configs] == [0, 1, 2, 3]
assert all(c["cluster"] == configs[0]["cluster"] for c in configs)     # the same cluster, a different task
print("every worker gets the same cluster list and its own task index (= its rank)")

# %% [markdown]
# ## 2. One process per device, or one process for many devices
#
# | | PyTorch | TensorFlow 2 |
# |---|---|---|
# | one machine, several GPUs | `DistributedDataParallel`: **one process per GPU** (`nn.DataParallel`, one process with a thread per GPU, is the old way and is slower) | `tf.distribute.MirroredStrategy()`: **one process** drives all GPUs of the machine; a replica per GPU, variables mirrored on each; all-reduce by `cross_device_ops` (`NcclAllReduce`, the default on GPUs; `HierarchicalCopyAllReduce`; `ReductionToOneDevice`) |
# | several machines | DDP again, the same code: ranks on all machines in one process group (NCCL on GPUs, gloo on CPUs) | `tf.distribute.MultiWorkerMirroredStrategy()`: **one process per machine** (a *worker*), each with its local replicas; collective all-reduce across workers |
# | how the all-reduce is done | the backend: `init_process_group("nccl" or "gloo")` | pass a `CommunicationOptions(implementation=...)` (from `tf.distribute.experimental`) as `communication_options`: `RING` (TensorFlow's own ring collectives over gRPC), `NCCL` (GPUs), `AUTO` (let TensorFlow choose). `CollectiveCommunication` is the older name of `CommunicationImplementation`. |
# | gradient buckets | `DDP(..., bucket_cap_mb=25)` (lesson 11) | `CommunicationOptions(bytes_per_pack=...)` (0: automatic) |
# | number of replicas | `dist.get_world_size()` | `strategy.num_replicas_in_sync` |
# | which replica am I | `dist.get_rank()` | `tf.distribute.get_replica_context().replica_id_in_sync_group` (inside `strategy.run`) |
#
# The model is made distributed differently too:
#
# <table>
# <tr><th>PyTorch</th><th>TensorFlow 2</th></tr>
# <tr><td><pre>
# model = DDP(make_model())
# opt = torch.optim.SGD(model.parameters(), lr=0.1)
# for x, y in loader:
#     opt.zero_grad()
#     loss = loss_fn(model(x), y)
#     loss.backward()    # all-reduce here
#     opt.step()
# </pre></td><td><pre>
# with strategy.scope():   # variables made here are mirrored
#     model = make_model()
#     model.compile(optimizer="sgd", loss=loss_fn)
# model.fit(dataset, epochs=3)  # all-reduce inside
# # or a custom loop: strategy.run(train_step, args=(batch,))
# </pre></td></tr>
# </table>
#
# The practical difference: in PyTorch every rank is its own Python process, on one machine or
# many, so the code is the same for 1 GPU, 8 GPUs or 8 machines. With `MirroredStrategy`, one
# Python process runs the replicas of all GPUs of its machine: one process to start and watch,
# and if it fails, all replicas of that machine fail with it.

# %% [markdown]
# ## 3. Data: sharding and the batch size
#
# **Sharding.** PyTorch: `DistributedSampler` gives rank *r* the samples r, r+N, r+2N, ...
# (shuffled each epoch with `set_epoch`). TensorFlow: `strategy.experimental_distribute_dataset(dataset)`
# shards the dataset across workers by the `AutoShardPolicy` in
# `options.experimental_distribute.auto_shard_policy`: `FILE` (each worker reads its own input
# files), `DATA` (every worker reads everything and keeps every N-th element:
# `dataset.shard(N, index)`), `AUTO` (the default: `FILE` if it can, else `DATA`), `HINT`, or
# `OFF`. With `strategy.distribute_datasets_from_function(fn)` you shard yourself with
# `input_context.num_input_pipelines` and `input_context.input_pipeline_id`, like
# `num_replicas` and `rank` in a sampler.
#
# Without shuffling, `DistributedSampler` and `shard(N, index)` pick exactly the same elements:

# %%
%%ddp
from torch.utils.data import DistributedSampler

mine = list(DistributedSampler(range(16), shuffle=False))   # what rank `rank` reads
tf_shard = list(range(16))[rank::world_size]                   # dataset.shard(world_size, rank)
print(f"DistributedSampler: {mine}   shard({world_size}, {rank}): {tf_shard}")

# %%
mine = %ddp_gather mine
tf_shard = %ddp_gather tf_shard
assert mine == tf_shard and sorted(sum(mine, [])) == list(range(16))
print("the same split, and together the ranks cover every element once")

# %% [markdown]
# **The batch size means different things.**
#
# | | PyTorch DDP | TensorFlow `tf.distribute` |
# |---|---|---|
# | what you write | `DataLoader(..., batch_size=16)` on every rank | `dataset.batch(64)`: the **global** batch |
# | each replica gets | 16 (the per-replica batch) | 64 / `num_replicas_in_sync` = 16 |
# | the global batch | 16 × world size = 64 | 64 |
# | loss | mean over the local batch; DDP **averages** the gradients (sum ÷ N) | `tf.nn.compute_average_loss(per_example_loss, global_batch_size=64)`: sum ÷ global batch; the gradients are **summed** across replicas |
#
# The two loss conventions give the same gradients when every rank has a full batch. Check it
# live: each rank computes its gradient both ways and all-reduces it both ways.

# %%
%%ddp
torch.manual_seed(0)
model = nn.Linear(8, 1)                              # the same weights on every rank
torch.manual_seed(1 + rank)
x, y = torch.randn(16, 8), torch.randn(16, 1)        # this rank's 16 examples
global_batch = 16 * world_size

# PyTorch DDP: mean over the local batch, then average the gradients over ranks
model.zero_grad()
nn.functional.mse_loss(model(x), y).backward()
ddp_grad = model.weight.grad.clone()
dist.all_reduce(ddp_grad, op=dist.ReduceOp.AVG)

# TensorFlow: per-example losses summed and divided by the GLOBAL batch, then gradients SUMMED
model.zero_grad()
per_example = ((model(x) - y) ** 2).squeeze(1)
(per_example.sum() / global_batch).backward()        # = tf.nn.compute_average_loss(per_example, global_batch_size=64)
tf_grad = model.weight.grad.clone()
dist.all_reduce(tf_grad, op=dist.ReduceOp.SUM)

same = torch.allclose(ddp_grad, tf_grad, atol=1e-6)
print("same gradient both ways:", same)

# %%
same = %ddp_gather same
assert same == [True] * 4
print("mean-then-average (DDP) = sum-over-global-batch-then-sum (TensorFlow), on every rank")

# %% [markdown]
# ## 4. Reductions: `strategy.reduce` and `dist.all_reduce`
#
# <table>
# <tr><th>PyTorch</th><th>TensorFlow 2</th></tr>
# <tr><td><pre>
# t = torch.tensor([local_loss])
# dist.all_reduce(t, op=dist.ReduceOp.SUM)
# # in place, on every rank
# dist.all_reduce(t, op=dist.ReduceOp.AVG)   # mean
# </pre></td><td><pre>
# per_replica = strategy.run(step, args=(batch,))
# total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
# mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)
# # inside a replica function:
# ctx = tf.distribute.get_replica_context()
# s = ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
# </pre></td></tr>
# </table>
#
# `strategy.reduce` is called outside the replicas (in "cross-replica context") and **returns** one
# value to the program. `dist.all_reduce` is called by every rank and leaves the result **in place**
# on every rank. Inside `strategy.run`, `get_replica_context().all_reduce` is the exact
# counterpart. Here each rank holds a "per-replica" loss and a sample count, and we reduce them:

# %%
%%ddp
per_replica = torch.tensor([0.5 + rank, 16.0])        # (this replica's loss, its sample count)
summed, averaged = per_replica.clone(), per_replica.clone()
dist.all_reduce(summed, op=dist.ReduceOp.SUM)         # strategy.reduce(ReduceOp.SUM, ...)
dist.all_reduce(averaged, op=dist.ReduceOp.AVG)       # strategy.reduce(ReduceOp.MEAN, ...)
print(f"per replica {per_replica.tolist()} -> SUM {summed.tolist()}, MEAN {averaged.tolist()}")

# %%
before = %ddp_gather per_replica
summed = %ddp_gather summed
averaged = %ddp_gather averaged
assert all(s.tolist() == [8.0, 64.0] for s in summed) and all(a.tolist() == [2.0, 16.0] for a in averaged)
draw.collectives({"SUM": (before, summed), "MEAN (AVG)": (before, averaged)},
                 title=say("strategy.reduce(SUM / MEAN) done with dist.all_reduce: (loss, samples) per rank",
                           "用 dist.all_reduce 实现 strategy.reduce(SUM / MEAN)：每个 rank 的（损失，样本数）"),
                 before=say("per replica", "每个副本"), after=say("after all_reduce", "all_reduce 之后"))

# %% [markdown]
# ## 5. Checkpoints and restarts
#
# | | PyTorch (and ddplab) | TensorFlow 2 |
# |---|---|---|
# | save | `ddplab.checkpoint.save(path, model, opt, step)`: rank 0 writes, all ranks wait; in plain PyTorch: `if rank == 0: torch.save(...)`, then `dist.barrier()` | `ckpt = tf.train.Checkpoint(model=model, optimizer=opt)`, `manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=3)`, `manager.save()`. With several workers **all** of them must call it (saving may all-reduce); the chief's copy is the real one, the others write to a temporary directory and delete it (the pattern of TensorFlow's multi-worker tutorial). |
# | load | `ddplab.checkpoint.load(path, model, opt)`: rank 0 reads and broadcasts | `ckpt.restore(manager.latest_checkpoint)` on every worker |
# | with the high-level loop | (write the loop yourself, as in lesson 10) | `model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)])`: backs up at the end of each epoch (or every `save_freq` batches) and, when `fit` starts again after a crash, continues from the backup |
# | after a crash | `torchrun --max-restarts=3` restarts all workers; your script loads the newest checkpoint (lesson 10; ddplab's `%ddp_restart` restarts only the lost rank) | the cluster manager (e.g. Kubernetes) restarts the workers with the same `TF_CONFIG`; `BackupAndRestore` or your own `restore` continues |
#
# ## 6. Gradient accumulation
#
# PyTorch: `with model.no_sync(): loss.backward()` for k−1 micro-batches, then one normal
# `backward()` that all-reduces the sum (lesson 4). TensorFlow has no `no_sync`. In a custom loop,
# `optimizer.apply_gradients` all-reduces (sums) the gradients across replicas by default, so to
# accumulate you add the gradients of k steps into per-replica variables and call `apply_gradients`
# once every k steps: one all-reduce per k steps, as with `no_sync`. Keras 3 optimizers also take
# `gradient_accumulation_steps=k`, which updates the weights once every k steps.
#
# ## 7. The same training, live
#
# A small DDP run with a per-rank batch of 16, which is a global batch of 64: in TensorFlow,
# `dataset.batch(64)` under `MultiWorkerMirroredStrategy` with 4 single-device workers. Watch the dashboard.

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from ddplab.lessons.ranks import param_spread

torch.manual_seed(0)
data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))   # the same data on every rank
sampler = DistributedSampler(data)                                 # ~ auto-sharding (DATA policy, shuffled)
loader = DataLoader(data, batch_size=16, sampler=sampler)          # per-replica batch 16, global 64
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))   # ~ model built under strategy.scope()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):                                             # ~ model.fit(dataset, epochs=2)
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=len(x))
steps = len(loader) * 2
spread = param_spread(model)
print(f"{steps} steps of 16 samples per rank; parameters identical: {spread == 0.0}")

# %%
steps = %ddp_gather steps
spread = %ddp_gather spread
assert steps == [128] * 4 and spread == [0.0] * 4
print("4 ranks × 16 = a global batch of 64; 4096 samples / 64 = 64 steps per epoch; identical parameters")

# %% [markdown]
# ## Exercises
#
# 1. Two machines with 2 GPUs each. How many processes does torchrun start, and what are their
#    `RANK` and `LOCAL_RANK`? With `MultiWorkerMirroredStrategy`, how many workers are in
#    `TF_CONFIG`, and what is `strategy.num_replicas_in_sync`?
# 2. Give rank 3 only 10 examples instead of 16 in the loss cell of section 3. Do the two
#    conventions still agree? Which one gives the true mean over all examples?
# 3. `strategy.reduce(MEAN, ...)` of per-replica *mean* losses is not the mean loss per example
#    when replicas have different batch sizes. Compute the correct global mean with one
#    `all_reduce` of `(loss sum, sample count)`, as in section 4.
#
# ## 练习
#
# 1. 两台机器，各有 2 个 GPU。torchrun 会启动几个进程？它们的 `RANK` 和 `LOCAL_RANK` 分别是什么？
#    使用 `MultiWorkerMirroredStrategy` 时，`TF_CONFIG` 中有几个 worker？`strategy.num_replicas_in_sync` 是多少？
# 2. 在第 3 节计算损失的单元格里，让 rank 3 只有 10 个样本而不是 16 个。两种约定的结果还一致吗？
#    哪一种给出的是所有样本上真正的平均值？
# 3. 当各副本的批大小不同时，对各副本*平均*损失做 `strategy.reduce(MEAN, ...)` 得到的并不是每个样本的平均损失。
#    像第 4 节那样，对 `(损失之和, 样本数)` 做一次 `all_reduce`，算出正确的全局平均值。

# %%
%ddp_stop
