# %% [markdown]
# # Lesson 16 · The same ideas in TensorFlow
#
# **In short.** Most of this course has a counterpart in TensorFlow 2's `tf.distribute`: the
# synchronous data parallelism of DDP, and also lesson 9's asynchronous updates through a parameter
# server (`ParameterServerStrategy`); a few things have none there (section 2 says which).
# This lesson puts them side by side: how the workers are started and find each other
# (torchrun's environment variables vs `TF_CONFIG`), DDP vs `MirroredStrategy` (one process for
# all GPUs of a machine) and `MultiWorkerMirroredStrategy` (one process per machine, collective
# all-reduce), `DistributedSampler` vs tf.data auto-sharding, per-replica vs global batch
# size, `strategy.reduce` vs `dist.all_reduce`, checkpoints and restarts, and gradient
# accumulation. TensorFlow is not installed here; its code is shown, not run. The PyTorch side
# runs live on the 4 ranks.
#
# **You will learn**
# - how torchrun's environment variables and TensorFlow's `TF_CONFIG` tell each worker its place
# - DDP (one process per device) beside `MirroredStrategy` and `MultiWorkerMirroredStrategy`
# - why TensorFlow's loss over the global batch with summed gradients is DDP's update, and what the PyTorch habit does there
# - `strategy.reduce` done with `dist.all_reduce`, and a true mean from (sum, count) when batches differ
# - gradient accumulation in both: `no_sync` around the forward *and* backward, `apply_gradients` every k steps
#
# **Study time:** about 35 minutes
#
# **Needs:** nothing beyond ddplab and torch (TensorFlow is not needed: its code is shown, not run) · 4 ranks
#
# **You will see:** each rank's torchrun environment next to the `TF_CONFIG` it would have, sharding and
# batch sizes compared, `strategy.reduce(SUM/MEAN)` done with all-reduce (as a picture), the two
# conventions for scaling the loss giving the same gradients, what the PyTorch convention does
# to the gradients in a TensorFlow custom loop, and DDP's all-reduces counted with `no_sync` around the
# forward and backward, and around the backward only.

# %% [markdown] lang=zh
# # 第 16 课 · TensorFlow 中的对应概念
#
# **简而言之**：本课程的大部分内容在 TensorFlow 2 的 `tf.distribute` 中都有对应物：DDP 的同步数据并行是这样，第 9 课通过参数服务器做的异步更新也是这样（`ParameterServerStrategy`）；也有少数内容在那里没有对应物（第 2 节会说明是哪些）。这一课把它们并排比较：各个 worker 如何启动、如何互相找到（torchrun 的环境变量与 `TF_CONFIG`），DDP 与 `MirroredStrategy`（一个进程驱动一台机器上的所有 GPU）以及 `MultiWorkerMirroredStrategy`（每台机器一个进程，用集合通信做 all-reduce），`DistributedSampler` 与 tf.data 的自动分片，每个副本的批大小与全局批大小，`strategy.reduce` 与 `dist.all_reduce`，检查点与重启，以及梯度累积。这里没有安装 TensorFlow，它的代码只展示、不运行；PyTorch 这一边在 4 个进程（rank）上实时运行。
#
# **你将学到**
# - torchrun 的环境变量和 TensorFlow 的 `TF_CONFIG` 如何告诉每个 worker 它的位置
# - DDP（每个设备一个进程）与 `MirroredStrategy`、`MultiWorkerMirroredStrategy` 的对照
# - 为什么 TensorFlow 按全局批大小计算损失、再对梯度求和，得到的就是 DDP 的更新，以及 PyTorch 的习惯在那里会造成什么
# - 用 `dist.all_reduce` 实现 `strategy.reduce`，以及各批大小不同时如何用（总和，样本数）求出真正的平均值
# - 两边的梯度累积：`no_sync` 要同时包住前向*和*反向；`apply_gradients` 每 k 步调用一次
#
# **学习时间**：约 35 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他（不需要安装 TensorFlow：它的代码只展示、不运行）· 4 个 rank
#
# **你将看到**：每个 rank 的 torchrun 环境变量，以及它作为 TensorFlow worker 时会拿到的 `TF_CONFIG`；分片方式与批大小的对比；用 all-reduce 实现的 `strategy.reduce(SUM/MEAN)`（配图）；两种缩放损失的约定得到相同的梯度；把 PyTorch 的约定用在 TensorFlow 自定义循环中时，梯度会变成什么样；以及用 `no_sync` 包住前向和反向、只包住反向时，分别数出的 DDP all-reduce 次数。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, say

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
# one of 4 single-device workers. ([Lesson 17](17_cluster.ipynb) runs torchrun for real and prints
# what each process gets.)

# %% [markdown] lang=zh
# ## 1. 启动 worker，并让它们互相找到
#
# <table>
# <tr><th>PyTorch（torchrun）</th><th>TensorFlow 2（tf.distribute）</th></tr>
# <tr><td><pre>
# # 在每台机器上：
# torchrun --nnodes=2 --nproc-per-node=2 \
#     --rdzv-backend=c10d --rdzv-endpoint=host0:29500 train.py
# # 在 train.py 中（每个进程）；init_process_group 读取环境变量：
# dist.init_process_group("gloo")
# rank = dist.get_rank()
# </pre></td><td><pre>
# # 每个 worker 都是一个进程，由你或集群管理器启动：
# os.environ["TF_CONFIG"] = json.dumps({
#     "cluster": {"worker": ["host0:12345", "host1:12345"]},
#     "task": {"type": "worker", "index": 0}})
# strategy = tf.distribute.MultiWorkerMirroredStrategy()
# task = strategy.cluster_resolver.task_id
# </pre></td></tr>
# </table>
#
# - **torchrun** 为每个设备启动一个进程，并通过环境变量告诉每个进程它的位置：`RANK`、`WORLD_SIZE`、`LOCAL_RANK`、`LOCAL_WORLD_SIZE`，以及 `MASTER_ADDR`/`MASTER_PORT`，即各进程会合的**唯一**地址（一个键值存储）。各 rank 通过这个存储得知彼此的地址。
# - **TensorFlow** 读取 `TF_CONFIG`：这是一个 JSON 字符串，包含**整个集群**（每个 worker 的 `host:port`，每个 worker 都在那里运行一个 gRPC 服务器）以及本进程自己的 `task`（类型和编号）。0 号 worker 同时是 *chief*：和 rank 0 一样，由它写检查点和摘要。每个 worker 运行同一个程序。
#
# ddplab 两者都不需要：它的各个 rank 通过私有目录中的一个文件（`FileStore`）会合。不过每个 rank 都可以展示 torchrun 本会给它什么，以及作为 4 个单设备 worker 之一时它会拿到的 `TF_CONFIG`。（[第 17 课](17_cluster.ipynb)会真正运行 torchrun，并打印每个进程拿到的内容。）

# %%
%%ddp
import json

torchrun_env = {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world_size,
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500}
tf_config = {"cluster": {"worker": [f"127.0.0.1:{12345 + r}" for r in range(world_size)]},
             "task": {"type": "worker", "index": rank}}
print(f"dist.get_backend() = {dist.get_backend()!r}, dist.get_rank() = {dist.get_rank()}, "
      f"dist.get_world_size() = {dist.get_world_size()}")
print("torchrun ->", " ".join(f"{k}={v}" for k, v in torchrun_env.items()))
print("TF_CONFIG ->", json.dumps(tf_config))

# %%
configs = %ddp_gather tf_config
assert [c["task"]["index"] for c in configs] == [0, 1, 2, 3]
assert all(c["cluster"] == configs[0]["cluster"] for c in configs)     # the same cluster, a different task
print(say("every worker gets the same cluster list and its own task index (= its rank)",
          "每个 worker 拿到相同的集群列表，以及自己的 task 编号（= 它的 rank）"))

# %% [markdown]
# ## 2. One process per device, or one process for many devices
#
# | | PyTorch | TensorFlow 2 |
# |---|---|---|
# | one machine, several GPUs | `DistributedDataParallel`: **one process per GPU** (`nn.DataParallel`, one process with a thread per GPU, is the old way and is slower) | `tf.distribute.MirroredStrategy()`: **one process** drives all GPUs of the machine; a replica per GPU, variables mirrored on each; all-reduce by `cross_device_ops` (`NcclAllReduce`, the default on GPUs; `HierarchicalCopyAllReduce`; `ReductionToOneDevice`) |
# | several machines | DDP again, the same code: ranks on all machines in one process group (NCCL on GPUs, gloo on CPUs) | `tf.distribute.MultiWorkerMirroredStrategy()`: **one process per machine** (a *worker*), each with its local replicas; collective all-reduce across workers |
# | how the all-reduce is done | the backend: `init_process_group("nccl" or "gloo")` | pass a `CommunicationOptions(implementation=...)` (from `tf.distribute.experimental`) as `communication_options`: `RING` (TensorFlow's own ring collectives over gRPC), `NCCL` (GPUs), `AUTO` (let TensorFlow choose). `CollectiveCommunication` is the older name of `CommunicationImplementation`. |
# | gradient buckets | `DDP(..., bucket_cap_mb=25)` (lesson 12) | `CommunicationOptions(bytes_per_pack=...)` (0: automatic) |
# | number of replicas | `dist.get_world_size()` | `strategy.num_replicas_in_sync` |
# | which replica am I | `dist.get_rank()` | `tf.distribute.get_replica_context().replica_id_in_sync_group` (inside `strategy.run`) |
# | asynchronous updates through a parameter server (lesson 9) | no ready-made strategy: lesson 9 builds one from `dist.send` and `dist.recv` (`torch.distributed.rpc` can host one too) | `tf.distribute.ParameterServerStrategy`: the variables live on parameter-server tasks (`"ps"` in `TF_CONFIG`, beside `"worker"` and a `"chief"` that coordinates); a `tf.distribute.coordinator.ClusterCoordinator` schedules steps on the workers, and each worker's update is applied to the variables without waiting for the others |
#
# Not everything has a counterpart: `tf.distribute` has no strategy that pipelines a model over devices
# (lesson 6) or averages the parameters every few steps as local SGD does (lesson 8).
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

# %% [markdown] lang=zh
# ## 2. 每个设备一个进程，还是一个进程管多个设备
#
# | | PyTorch | TensorFlow 2 |
# |---|---|---|
# | 单机多 GPU | `DistributedDataParallel`：**每个 GPU 一个进程**（`nn.DataParallel` 是一个进程、每个 GPU 一个线程，这是旧做法，而且更慢） | `tf.distribute.MirroredStrategy()`：**一个进程**驱动本机的所有 GPU；每个 GPU 一个副本，变量在每个 GPU 上都有镜像；all-reduce 由 `cross_device_ops` 完成（`NcclAllReduce`，GPU 上的默认选项；`HierarchicalCopyAllReduce`；`ReductionToOneDevice`） |
# | 多台机器 | 还是 DDP，代码不变：所有机器上的 rank 同属一个进程组（GPU 上用 NCCL，CPU 上用 gloo） | `tf.distribute.MultiWorkerMirroredStrategy()`：**每台机器一个进程**（一个 *worker*），各自管理本机的副本；worker 之间用集合通信做 all-reduce |
# | all-reduce 如何实现 | 由后端决定：`init_process_group("nccl" 或 "gloo")` | 把一个 `CommunicationOptions(implementation=...)`（来自 `tf.distribute.experimental`）作为 `communication_options` 传入：`RING`（TensorFlow 自己基于 gRPC 的环形集合通信）、`NCCL`（GPU）、`AUTO`（由 TensorFlow 选择）。`CollectiveCommunication` 是 `CommunicationImplementation` 的旧名字。 |
# | 梯度桶 | `DDP(..., bucket_cap_mb=25)`（[第 12 课](12_communication.ipynb)） | `CommunicationOptions(bytes_per_pack=...)`（0 表示自动） |
# | 副本数量 | `dist.get_world_size()` | `strategy.num_replicas_in_sync` |
# | 我是哪个副本 | `dist.get_rank()` | `tf.distribute.get_replica_context().replica_id_in_sync_group`（在 `strategy.run` 内部） |
# | 通过参数服务器的异步更新（第 9 课） | 没有现成的策略：第 9 课用 `dist.send` 和 `dist.recv` 自己搭了一个（也可以用 `torch.distributed.rpc` 来搭） | `tf.distribute.ParameterServerStrategy`：变量放在参数服务器任务上（`TF_CONFIG` 中的 `"ps"`，此外还有 `"worker"` 和负责协调的 `"chief"`）；由 `tf.distribute.coordinator.ClusterCoordinator` 把各步分派给 worker，每个 worker 的更新直接应用到变量上，不等待其他 worker |
#
# 并不是所有内容都有对应物：`tf.distribute` 没有把模型分成流水线放到多个设备上的策略（第 6 课），也没有像本地 SGD 那样每隔几步平均一次参数的策略（第 8 课）。
#
# 让模型变成分布式的方式也不同：
#
# <table>
# <tr><th>PyTorch</th><th>TensorFlow 2</th></tr>
# <tr><td><pre>
# model = DDP(make_model())
# opt = torch.optim.SGD(model.parameters(), lr=0.1)
# for x, y in loader:
#     opt.zero_grad()
#     loss = loss_fn(model(x), y)
#     # 在这里做 all-reduce：
#     loss.backward()
#     opt.step()
# </pre></td><td><pre>
# # 在 strategy.scope() 中创建的变量都有镜像：
# with strategy.scope():
#     model = make_model()
#     model.compile(optimizer="sgd", loss=loss_fn)
# # fit 内部做 all-reduce：
# model.fit(dataset, epochs=3)
# # 或者自定义循环：strategy.run(train_step, args=(batch,))
# </pre></td></tr>
# </table>
#
# 实际的区别在于：在 PyTorch 中，每个 rank 都是一个独立的 Python 进程，不论在一台还是多台机器上，所以 1 个 GPU、8 个 GPU 还是 8 台机器，代码都一样。使用 `MirroredStrategy` 时，一个 Python 进程运行本机所有 GPU 上的副本：要启动和照看的进程只有一个，但它一旦失败，这台机器上的所有副本都会随之失败。

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

# %% [markdown] lang=zh
# ## 3. 数据：分片与批大小
#
# **分片。** PyTorch：`DistributedSampler` 把样本 r、r+N、r+2N……分给 rank *r*（每个 epoch 用 `set_epoch` 重新打乱）。TensorFlow：`strategy.experimental_distribute_dataset(dataset)` 按照 `options.experimental_distribute.auto_shard_policy` 中的 `AutoShardPolicy` 把数据集分片给各个 worker：`FILE`（每个 worker 读取属于自己的输入文件）、`DATA`（每个 worker 读取全部数据，只保留每 N 个元素中的一个：`dataset.shard(N, index)`）、`AUTO`（默认值：能用 `FILE` 就用 `FILE`，否则用 `DATA`）、`HINT`，或者 `OFF`。使用 `strategy.distribute_datasets_from_function(fn)` 时，你用 `input_context.num_input_pipelines` 和 `input_context.input_pipeline_id` 自己分片，它们就相当于采样器中的 `num_replicas` 和 `rank`。
#
# 不打乱时，`DistributedSampler` 和 `shard(N, index)` 选出的元素完全相同：

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
print(say("the same split, and together the ranks cover every element once",
          "划分方式相同，而且所有 rank 合起来恰好把每个元素覆盖一次"))

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
# live: each rank computes its gradient both ways and all-reduces it both ways. It also tries a
# third way, the PyTorch habit carried into a TensorFlow custom loop: the mean over the local batch,
# with the gradients summed.

# %% [markdown] lang=zh
# **批大小的含义不同。**
#
# | | PyTorch DDP | TensorFlow `tf.distribute` |
# |---|---|---|
# | 你写的是 | 每个 rank 上的 `DataLoader(..., batch_size=16)` | `dataset.batch(64)`：**全局**批大小 |
# | 每个副本拿到 | 16（每个副本的批大小） | 64 / `num_replicas_in_sync` = 16 |
# | 全局批大小 | 16 × world size = 64 | 64 |
# | 损失 | 对本地批次取平均；DDP 对梯度**求平均**（求和 ÷ N） | `tf.nn.compute_average_loss(per_example_loss, global_batch_size=64)`：求和 ÷ 全局批大小；梯度在各副本之间**求和** |
#
# 当每个 rank 的批次都是满的时，这两种损失约定得到相同的梯度。下面实际验证一下：每个 rank 用两种方式分别计算梯度，再用两种方式分别做 all-reduce。它还会试试第三种方式，也就是把 PyTorch 的习惯带进 TensorFlow 的自定义训练循环：对本地批次取平均，而梯度求和。

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

# The PyTorch habit in a TensorFlow custom loop: mean over the LOCAL batch, then gradients SUMMED
model.zero_grad()
nn.functional.mse_loss(model(x), y).backward()
habit_grad = model.weight.grad.clone()
dist.all_reduce(habit_grad, op=dist.ReduceOp.SUM)

same = torch.allclose(ddp_grad, tf_grad, atol=1e-6)
habit_ratio = (habit_grad.norm() / ddp_grad.norm()).item()
print(f"torch.allclose(ddp_grad, tf_grad) = {same}   |habit_grad| / |ddp_grad| = {habit_ratio:.3f}")

# %%
same = %ddp_gather same
habit_ratio = %ddp_gather habit_ratio
assert same == [True] * 4 and all(abs(r - 4) < 1e-3 for r in habit_ratio)
print(say("mean-then-average (DDP) = sum-over-global-batch-then-sum (TensorFlow), on every rank",
          "对本地批次取平均、再对梯度求平均（DDP）= 按全局批大小归一化、再对梯度求和（TensorFlow），每个 rank 上都成立"))
print(say(f"the PyTorch habit with summed gradients: {habit_ratio[0]:.3f} times DDP's gradient, on {len(same)} ranks",
          f"按 PyTorch 的习惯对本地批次取平均、再对梯度求和：得到的梯度是 DDP 的 {habit_ratio[0]:.3f} 倍（共 {len(same)} 个 rank）"))

# %% [markdown]
# **A common claim:** `MirroredStrategy` does what DDP does: it averages the replicas' gradients
# with an all-reduce. **What actually happens:** the all-reduce *sums* them; the averaging is in the
# loss, which is divided by the **global** batch (`tf.nn.compute_average_loss` in a custom loop;
# Keras's `fit` scales its loss the same way by itself). The result is the same update as DDP's,
# as the first check above shows. Divide by the local batch instead, as in PyTorch, and the
# gradients are summed over the replicas unaveraged: the second line printed how many times too
# large they came out, which is the number of replicas. With plain SGD that is a learning rate
# that many times larger.

# %% [markdown] lang=zh
# **一个常见的说法：** `MirroredStrategy` 和 DDP 做的事一样：用 all-reduce 对各副本的梯度求平均。**实际情况是：** all-reduce 对梯度*求和*；求平均这一步放在损失里，损失除以的是**全局**批大小（在自定义循环中用 `tf.nn.compute_average_loss`；Keras 的 `fit` 会自动以同样的方式缩放损失）。结果与 DDP 的更新完全相同，正如上面第一项检查所示。如果像在 PyTorch 中那样除以本地批大小，梯度就会在各副本之间直接相加而没有取平均：上面打印的第二行给出了梯度因此被放大的倍数，正好等于副本数。对普通 SGD 来说，这相当于学习率也放大了这么多倍。

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
#
# **Which torch `ReduceOp.AVG` needs.** gloo accepts `AVG` in recent torch versions only: older ones
# reject it on gloo (torch's own `ReduceOp` documentation still says it is for NCCL only). This course
# needs torch 2.13 or newer, whose gloo has it, so the cells here use it, as section 3 did. On an
# older torch, all-reduce with `SUM` and divide by `dist.get_world_size()`: the same mean, on any
# backend.

# %% [markdown] lang=zh
# ## 4. 归约：`strategy.reduce` 与 `dist.all_reduce`
#
# <table>
# <tr><th>PyTorch</th><th>TensorFlow 2</th></tr>
# <tr><td><pre>
# t = torch.tensor([local_loss])
# dist.all_reduce(t, op=dist.ReduceOp.SUM)
# # 就地完成，在每个 rank 上
# dist.all_reduce(t, op=dist.ReduceOp.AVG)   # 平均值
# </pre></td><td><pre>
# per_replica = strategy.run(step, args=(batch,))
# total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
# mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)
# # 在副本函数内部：
# ctx = tf.distribute.get_replica_context()
# s = ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
# </pre></td></tr>
# </table>
#
# `strategy.reduce` 在副本之外调用（即“跨副本上下文”，cross-replica context），它把一个值**返回**给程序。`dist.all_reduce` 由每个 rank 调用，结果**就地**留在每个 rank 上。在 `strategy.run` 内部，`get_replica_context().all_reduce` 才是与它完全对应的操作。下面每个 rank 持有一个“每副本”的损失和一个样本数，我们来对它们做归约：
#
# **`ReduceOp.AVG` 需要哪个版本的 torch。** 只有较新的 torch 版本中的 gloo 才接受 `AVG`：较早的版本在 gloo 上会拒绝它（torch 自己的 `ReduceOp` 文档至今仍说它只适用于 NCCL）。本课程需要 torch 2.13 或更新的版本，其中的 gloo 支持它，所以这里的单元格和第 3 节一样使用它。在较早的 torch 上，用 `SUM` 做 all-reduce，再除以 `dist.get_world_size()`：在任何后端上都得到同样的平均值。

# %%
%%ddp
per_replica = torch.tensor([0.5 + rank, 16.0])        # (this replica's loss, its sample count)
summed, averaged = per_replica.clone(), per_replica.clone()
dist.all_reduce(summed, op=dist.ReduceOp.SUM)         # strategy.reduce(ReduceOp.SUM, ...)
dist.all_reduce(averaged, op=dist.ReduceOp.AVG)       # strategy.reduce(ReduceOp.MEAN, ...)
print(f"per_replica {per_replica.tolist()} -> SUM {summed.tolist()}, MEAN {averaged.tolist()}")

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
# | with the high-level loop | (write the loop yourself, as in lesson 11) | `model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)])`: backs up at the end of each epoch (or every `save_freq` batches) and, when `fit` starts again after a crash, continues from the backup |
# | after a crash | `torchrun --max-restarts=3` restarts all workers; your script loads the newest checkpoint (lesson 11; ddplab's `%ddp_restart` restarts only the lost rank) | the cluster manager (e.g. Kubernetes) restarts the workers with the same `TF_CONFIG`; `BackupAndRestore` or your own `restore` continues |
#
# ## 6. Gradient accumulation
#
# PyTorch: run the **forward and the backward** of k−1 micro-batches inside `with model.no_sync():`,
# then one normal forward and backward, whose all-reduce sends the sum of the k gradients (lesson 4).
# The forward must be inside too: it is DDP's forward that decides whether the next backward
# all-reduces. When `no_sync` is off, `forward` calls `reducer.prepare_for_backward`, and the gradient
# hooks of that backward all-reduce every bucket, even if the `backward()` call itself runs inside
# `no_sync` (torch's `no_sync` docstring warns about it). The cell below counts DDP's all-reduces for
# k = 4 micro-batches both ways.
#
# TensorFlow has no `no_sync`. In a custom loop, `optimizer.apply_gradients` all-reduces (sums) the
# gradients across replicas by default, so to accumulate you add the gradients of k steps into
# per-replica variables and call `apply_gradients` once every k steps: one all-reduce per k steps, as
# with `no_sync`. Keras 3 optimizers also take `gradient_accumulation_steps=k`, which updates the
# weights once every k steps.

# %% [markdown] lang=zh
# ## 5. 检查点与重启
#
# | | PyTorch（以及 ddplab） | TensorFlow 2 |
# |---|---|---|
# | 保存 | `ddplab.checkpoint.save(path, model, opt, step)`：rank 0 写入，所有 rank 等待；在纯 PyTorch 中：`if rank == 0: torch.save(...)`，然后 `dist.barrier()` | `ckpt = tf.train.Checkpoint(model=model, optimizer=opt)`，`manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=3)`，`manager.save()`。有多个 worker 时，**所有** worker 都必须调用它（保存时可能要做 all-reduce）；chief 保存的才是正式的那一份，其他 worker 写到临时目录后再删掉（TensorFlow 多 worker 教程中的做法）。 |
# | 加载 | `ddplab.checkpoint.load(path, model, opt)`：rank 0 读取并广播 | 在每个 worker 上执行 `ckpt.restore(manager.latest_checkpoint)` |
# | 使用高层训练循环时 | （自己写循环，如[第 11 课](11_fault_tolerance.ipynb)） | `model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)])`：在每个 epoch 结束时（或每 `save_freq` 个批次）做备份；崩溃后再次启动 `fit` 时，从备份处继续 |
# | 崩溃之后 | `torchrun --max-restarts=3` 重启所有 worker；你的脚本加载最新的检查点（[第 11 课](11_fault_tolerance.ipynb)；ddplab 的 `%ddp_restart` 只重启丢失的那个 rank） | 集群管理器（例如 Kubernetes）用相同的 `TF_CONFIG` 重启各个 worker；由 `BackupAndRestore` 或你自己的 `restore` 接着训练 |
#
# ## 6. 梯度累积
#
# PyTorch：前 k−1 个微批次的**前向和反向**都放在 `with model.no_sync():` 里运行，然后做一次普通的前向和反向，它的 all-reduce 发送 k 个梯度之和（[第 4 课](04_no_sync.ipynb)）。前向也必须放在里面：决定下一次反向是否做 all-reduce 的，正是 DDP 的前向。`no_sync` 没有生效时，`forward` 会调用 `reducer.prepare_for_backward`，于是这次反向的梯度钩子会对每个桶做 all-reduce，即使 `backward()` 这个调用本身是在 `no_sync` 里运行的（torch 在 `no_sync` 的文档字符串中对此有警告）。下面的单元格对 k = 4 个微批次，按两种写法分别统计 DDP 的 all-reduce 次数。
#
# TensorFlow 没有 `no_sync`。在自定义循环中，`optimizer.apply_gradients` 默认会在各副本之间对梯度做 all-reduce（求和），所以要做梯度累积，就把 k 步的梯度加到每个副本各自的变量里，每 k 步才调用一次 `apply_gradients`：每 k 步一次 all-reduce，与 `no_sync` 相同。Keras 3 的优化器还接受 `gradient_accumulation_steps=k` 参数，每 k 步才更新一次权重。

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from ddplab.lessons.ranks import CommCounter

torch.manual_seed(0)
acc_model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
counter = CommCounter()                              # counts DDP's all-reduces (one per bucket)
acc_model.register_comm_hook(None, counter.hook)
torch.manual_seed(1 + rank)
micro = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(4)]   # k = 4 micro-batches

def loss_of(x, y):
    return nn.functional.mse_loss(acc_model(x), y)

def forward_and_backward_inside():
    for x, y in micro[:-1]:
        with acc_model.no_sync():
            loss_of(x, y).backward()                 # forward and backward inside: nothing sent
    loss_of(*micro[-1]).backward()                   # the last micro-batch all-reduces the sum

def backward_only_inside():
    for x, y in micro[:-1]:
        loss = loss_of(x, y)                         # forward outside: DDP prepares to all-reduce
        with acc_model.no_sync():
            loss.backward()                          # ... and this backward does, no_sync or not
    loss_of(*micro[-1]).backward()

accumulated = {}
for way in (forward_and_backward_inside, backward_only_inside):
    acc_model.zero_grad()
    way()                                            # once first: DDP builds its buckets at its first backward
    acc_model.zero_grad()
    counter.reset()
    way()
    accumulated[way.__name__] = counter.calls       # all-reduce calls (one per bucket) for the k micro-batches
print(f"all-reduces for k = {len(micro)} micro-batches: {accumulated}")

# %%
accumulated = %ddp_gather accumulated
assert all(a == accumulated[0] for a in accumulated)            # the same on every rank
right_calls, wrong_calls = accumulated[0]["forward_and_backward_inside"], accumulated[0]["backward_only_inside"]
assert right_calls == 1 and wrong_calls == 4                    # this small model's gradients fill one bucket
print(say(f"forward and backward inside no_sync: {right_calls} all-reduce for 4 micro-batches, the last one's; "
          f"backward only inside: {wrong_calls}, one per micro-batch, as if there were no no_sync",
          f"前向和反向都在 no_sync 里：4 个微批次一共 {right_calls} 次 all-reduce，就是最后一个微批次的那次；"
          f"只有反向在 no_sync 里：{wrong_calls} 次，每个微批次一次，和没有 no_sync 一样"))

# %% [markdown]
# ## 7. The same training, live
#
# A small DDP run with a per-rank batch of 16, which is a global batch of 64: in TensorFlow,
# `dataset.batch(64)` under `MultiWorkerMirroredStrategy` with 4 single-device workers. Watch the dashboard.

# %% [markdown] lang=zh
# ## 7. 同样的训练，实时运行
#
# 一次小规模的 DDP 训练，每个 rank 的批大小是 16，也就是全局批大小 64：在 TensorFlow 中，这相当于在有 4 个单设备 worker 的 `MultiWorkerMirroredStrategy` 下使用 `dataset.batch(64)`。请留意仪表盘。

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
print(f"steps = {steps}, len(x) = 16, param_spread(model) = {spread}")

# %%
steps = %ddp_gather steps
spread = %ddp_gather spread
assert steps == [128] * 4 and spread == [0.0] * 4
print(say("4 ranks × 16 = a global batch of 64; 4096 samples / 64 = 64 steps per epoch; identical parameters",
          "4 个 rank × 16 = 全局批大小 64；4096 个样本 / 64 = 每个 epoch 64 步；各 rank 参数完全相同"))

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right, and why.
#
# **16.1** Two machines with 2 GPUs each. In PyTorch, torchrun starts one process per GPU; in
# TensorFlow, `MultiWorkerMirroredStrategy` runs one worker per machine, with a replica per GPU. How
# many processes does torchrun start in all, how many workers does `TF_CONFIG`'s cluster list, and what
# is `strategy.num_replicas_in_sync`? Answer with three whole numbers, like `(1, 2, 3)`.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你答案对不对，以及为什么。
#
# **16.1** 两台机器，各有 2 个 GPU。在 PyTorch 中，torchrun 为每个 GPU 启动一个进程；在 TensorFlow 中，`MultiWorkerMirroredStrategy` 每台机器运行一个 worker，每个 GPU 一个副本。torchrun 一共启动几个进程？`TF_CONFIG` 的集群列表中有几个 worker？`strategy.num_replicas_in_sync` 是多少？请写三个整数，例如 `(1, 2, 3)`。

# %%
answer = ...    # (processes torchrun starts, workers in TF_CONFIG, strategy.num_replicas_in_sync)
check("16.1", answer)

# %% [markdown]
# **16.2** In the loss cell of section 3, give rank 3 only 10 examples instead of 16 (58 examples in
# all), keep `global_batch = 64` as `tf.nn.compute_average_loss` would be told, and compare
# the gradients with the gradient of the mean loss over all 58 examples. Which gives that true mean's
# gradient? Answer with a letter:
#
# - (a) neither of them
# - (b) DDP's convention: the mean over each rank's own examples, then the average over ranks
# - (c) TensorFlow's convention: the sum divided by the global batch of 64, then summed over replicas

# %% [markdown] lang=zh
# **16.2** 在第 3 节计算损失的单元格里，让 rank 3 只有 10 个样本而不是 16 个（一共 58 个样本），`global_batch` 仍然是 64（就像告诉 `tf.nn.compute_average_loss` 的那样），把得到的梯度与全部 58 个样本的平均损失的梯度相比较。哪一种给出的是这个真正平均值的梯度？请写一个字母：
#
# - (a) 两者都不是
# - (b) DDP 的约定：先对每个 rank 自己的样本取平均，再在各 rank 之间求平均
# - (c) TensorFlow 的约定：总和除以全局批大小 64，再在各副本之间求和

# %%
answer = ...    # a, b or c
check("16.2", answer)

# %% [markdown]
# **16.3** In section 4 the replicas' mean losses were 0.5, 1.5, 2.5 and 3.5 (printed above), over
# 16 examples each. Suppose rank 3's batch had only 10 examples, with the same mean loss.
# `strategy.reduce(MEAN, ...)` of the four means gives their plain average. What is the true mean loss
# per example over all the examples? (One `all_reduce` of `(loss sum, sample count)` computes it:
# divide the two sums.) Answer with a number.

# %% [markdown] lang=zh
# **16.3** 在第 4 节中，各副本的平均损失为 0.5、1.5、2.5 和 3.5（见上面的输出），每个副本各有 16 个样本。假设 rank 3 的批次只有 10 个样本，平均损失不变。对这四个平均值做 `strategy.reduce(MEAN, ...)`，得到的是它们的简单平均。所有样本上每个样本的真正平均损失是多少？（对 `(损失之和, 样本数)` 做一次 `all_reduce` 就能算出它：用两个和相除。）请写一个数。

# %%
answer = ...    # the mean loss per example over all the examples
check("16.3", answer, losses=[float(b[0]) for b in before], counts=[16, 16, 16, 10])

# %% [markdown]
# **16.4** In section 6, the accumulation with only the backward inside `no_sync` made
# one all-reduce per micro-batch. Written that way, with k = 8 micro-batches per update and a model
# whose gradients fill 3 buckets, how many all-reduce calls does DDP make per update? Answer with a
# whole number.

# %% [markdown] lang=zh
# **16.4** 在第 6 节中，只把反向放在 `no_sync` 里的梯度累积，每个微批次都做了一次 all-reduce。如果照这样写，每次更新用 k = 8 个微批次，而模型的梯度装满 3 个桶，DDP 每次更新要调用几次 all-reduce？请写一个整数。

# %%
answer = ...    # all-reduce calls per update: k = 8, 3 buckets, forward outside no_sync
check("16.4", answer, right_calls=right_calls, wrong_calls=wrong_calls)

# %%
%ddp_stop
