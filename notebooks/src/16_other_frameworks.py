# %% [markdown]
# # Lesson 16 · One algorithm in three frameworks: PyTorch, TensorFlow and JAX
#
# **In short.** The same data-parallel training runs here under three frameworks: torch's DDP,
# TensorFlow's `MultiWorkerMirroredStrategy` and JAX's `jit`. The same MLP, the same initial weights
# (copied from torch, Dense kernels transposed), the same global batches split the same way over the
# replicas and the same SGD give the same loss step by step, and the lesson asserts it within a
# float32 tolerance it explains. On the way, every TensorFlow convention is run against DDP's on the
# same numbers: `TF_CONFIG` against torchrun's environment, tf.data's sharding against
# `DistributedSampler`, the global batch and `compute_average_loss` against DDP's averaging,
# `strategy.reduce` against `dist.all_reduce`. One process with 4 replicas (`MirroredStrategy` over
# logical CPU devices) runs `model.fit` as the course's source article writes it, and JAX shows where
# XLA puts the all-reduce. Each framework's time per step is measured and taken apart.
#
# **You will learn**
# - how `TF_CONFIG` and torchrun's environment tell each worker its place, and how `MultiWorkerMirroredStrategy` forms across processes
# - TensorFlow's conventions against DDP's on the same numbers: the global batch, `compute_average_loss` with summed gradients, `strategy.reduce`
# - why three frameworks give the same loss step by step, and what float32 tolerance that "same" needs
# - how `jax.jit` compiles a data-parallel step with XLA, which inserts the all-reduce itself
# - where each framework's time per step goes on this machine, measured: the step alone, its all-reduces, tracing and compiling
#
# **Study time:** about 50 minutes
#
# **Needs:** the frameworks extra, `pip install "ddplab[frameworks]"` (TensorFlow and JAX, about 1.7 GB on disk) · 4 ranks (fewer TensorFlow workers where memory is short: 4 of them hold about 2.2 GiB)
#
# **Memory:** Binder's 2 GiB runs it with 2 TensorFlow workers. It does not fit a 1 GiB session (a
# classroom hub): 2 TensorFlow workers need about 1.1 GiB beside the notebook, and one would have nothing
# to reduce; there the cell that sizes the first pool says so in one line, before any pool starts. Open it
# on Binder or on a laptop.
#
# **You will see:** every rank's torchrun environment beside the `TF_CONFIG` it really got; tf.data's
# shards and per-replica batches beside `DistributedSampler`'s; the same gradients from DDP's averaging
# and from `compute_average_loss`, and the PyTorch habit's gradients as many times too large as there are
# replicas; `strategy.reduce` and `dist.all_reduce` on the same values (as a picture); gradient
# accumulation's all-reduces with `no_sync` and with `apply_gradients` every k steps; the losses of DDP,
# `MultiWorkerMirroredStrategy`, `MirroredStrategy` and JAX on one plot, with their differences against
# the tolerance; `model.fit` over 4 logical devices; the all-reduce XLA inserted; and each framework's
# time per step taken apart, as bars.

# %% [markdown] lang=zh
# # 第 16 课 · 一个算法，三个框架：PyTorch、TensorFlow 与 JAX
#
# **简而言之**：同一个数据并行训练在这里用三个框架各跑一遍：torch 的 DDP、TensorFlow 的 `MultiWorkerMirroredStrategy`，以及 JAX 的 `jit`。同一个 MLP、同样的初始权重（从 torch 复制过去，Dense 层的 kernel 取转置）、同样的全局批次以同样的方式分给各个副本、同样的 SGD，每一步得到的损失都相同；本课会用断言检查这一点，所用的 float32 容差也会讲清楚。一路上，TensorFlow 的每个约定都和 DDP 的约定在同样的数字上并排运行：`TF_CONFIG` 对 torchrun 的环境变量，tf.data 的分片对 `DistributedSampler`，全局批次和 `compute_average_loss` 对 DDP 的求平均，`strategy.reduce` 对 `dist.all_reduce`。一个带 4 个副本的进程（在逻辑 CPU 设备上运行 `MirroredStrategy`）按本课程所依据的那篇文章的写法运行 `model.fit`；JAX 则展示 XLA 把 all-reduce 放在了哪里。每个框架每一步的时间都会被测量并拆开来看。
#
# **你将学到**
# - `TF_CONFIG` 和 torchrun 的环境变量如何告诉每个 worker 它的位置，以及 `MultiWorkerMirroredStrategy` 如何跨进程组建起来
# - 在同样的数字上对照 TensorFlow 与 DDP 的约定：全局批次、`compute_average_loss` 加上梯度求和、`strategy.reduce`
# - 为什么三个框架每一步给出相同的损失，以及这个“相同”需要怎样的 float32 容差
# - `jax.jit` 如何用 XLA 编译一个数据并行的训练步，而 all-reduce 是 XLA 自己插入的
# - 在这台机器上，每个框架每一步的时间花在哪里（实测）：单独运行这一步、它的 all-reduce、跟踪（tracing）与编译
#
# **学习时间**：约 50 分钟
#
# **需要**：frameworks 附加依赖，`pip install "ddplab[frameworks]"`（TensorFlow 和 JAX，约占 1.7 GB 磁盘空间）· 4 个 rank（内存不足时 TensorFlow worker 会少一些：4 个 worker 大约占 2.2 GiB）
#
# **内存**：在 Binder 的 2 GiB 中，它用 2 个 TensorFlow worker 运行。1 GiB 的会话（课堂用的 hub）装不下它：除了 notebook 本身，2 个 TensorFlow worker 还需要约 1.1 GiB，而只有一个 worker 就没有什么可归约的；在那里，为第一个进程池确定大小的单元格会在启动任何进程池之前用一行话说明这一点。请在 Binder 或笔记本电脑上打开它。
#
# **你将看到**：每个 rank 的 torchrun 环境变量，以及它实际拿到的 `TF_CONFIG`；tf.data 的分片和每个副本的批次，与 `DistributedSampler` 的并排；DDP 的求平均和 `compute_average_loss` 得到相同的梯度，而 PyTorch 的习惯得到的梯度是它的若干倍（倍数等于副本数）；`strategy.reduce` 与 `dist.all_reduce` 作用在相同的值上（配图）；用 `no_sync` 以及每 k 步调用一次 `apply_gradients` 做梯度累积时的 all-reduce；DDP、`MultiWorkerMirroredStrategy`、`MirroredStrategy` 和 JAX 的损失画在同一张图上，它们之间的差与容差相比较；在 4 个逻辑设备上运行的 `model.fit`；XLA 插入的 all-reduce；以及每个框架每一步时间的拆分（柱状图）。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say, require_frameworks
from ddplab.lessons.frameworks import jax_ranks, tf_workers, versions

require_frameworks()    # TensorFlow and JAX are installed, or one line says what to install (and Run All stops)
print(", ".join(f"{name} {version}" for name, version in versions().items()))

# %% [markdown]
# ## How this lesson runs: three pools, one after another
#
# TensorFlow and JAX start their distributed runtimes once per process, and first:
# `MultiWorkerMirroredStrategy` must be made before TensorFlow runs any other op in the process
# (else: "Collective ops must be configured at program startup"), and `jax.distributed.initialize`
# runs once per process. Memory counts too: 4 ranks with TensorFlow imported hold about 2.2 GiB,
# 4 with JAX about 1.1 GiB, and a Binder session has 2 GiB for everything. So the lesson starts three
# pools, one after the other, and keeps what each one measured in the notebook:
#
# 1. **TensorFlow workers** (sections 1 to 6): `TF_CONFIG`, sharding, the loss conventions,
#    `strategy.reduce`, gradient accumulation, and the training under `MultiWorkerMirroredStrategy`;
# 2. **one rank**, a single process with 4 logical CPU devices (section 7): `MirroredStrategy`, and
#    `model.fit`;
# 3. **4 ranks** for JAX and DDP (sections 8 to 10), and the three frameworks side by side.
#
# `tf_workers` decides from this session's free memory how many TensorFlow workers fit: 4, or else 2,
# each then training a larger part of the same global batch of 64. The update is the same, so the
# losses are too. One worker would have nothing to reduce: where not even 2 fit, it says what the
# lesson needs in one line, and "Run All" stops there, before any pool starts.

# %% [markdown] lang=zh
# ## 本课如何运行：三个进程池，一个接一个
#
# TensorFlow 和 JAX 在每个进程里只能启动一次各自的分布式运行时，而且要最先启动：`MultiWorkerMirroredStrategy` 必须在 TensorFlow 于该进程中运行任何其他 op 之前创建（否则会报错 “Collective ops must be configured at program startup”），`jax.distributed.initialize` 每个进程只能运行一次。内存也是个问题：导入了 TensorFlow 的 4 个 rank 大约占 2.2 GiB，导入了 JAX 的 4 个 rank 大约占 1.1 GiB，而一个 Binder 会话总共只有 2 GiB。所以本课先后启动三个进程池，并把每个进程池测得的结果保存在 notebook 里：
#
# 1. **TensorFlow worker**（第 1 到第 6 节）：`TF_CONFIG`、分片、损失的约定、`strategy.reduce`、梯度累积，以及在 `MultiWorkerMirroredStrategy` 下的训练；
# 2. **一个 rank**，即一个带 4 个逻辑 CPU 设备的进程（第 7 节）：`MirroredStrategy` 和 `model.fit`；
# 3. **4 个 rank**，运行 JAX 和 DDP（第 8 到第 10 节），并把三个框架并排比较。
#
# `tf_workers` 根据这个会话的空闲内存决定能放下几个 TensorFlow worker：4 个；放不下时用 2 个，每个 worker 训练同一个 64 样本全局批次中更大的一部分。更新是一样的，所以损失也一样。只有一个 worker 就没有什么可归约的：连 2 个都放不下时，它用一行话说明这一课需要多少内存，“运行全部”在这里停下，不会启动任何进程池。

# %%
tf_n, why = tf_workers(4)    # 4 TensorFlow workers if this session's memory holds them, else 2 (at least)
print(say(f"TensorFlow workers: {tf_n}", f"TensorFlow worker：{tf_n} 个") + (f" ({why})" if why else ""))

# %%
%ddp_start {tf_n}

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
#   `host:port`: each worker runs a gRPC server there) and this process's own `task` (type and
#   index). Worker 0 is also the *chief*: it writes checkpoints and summaries, like rank 0.
#   Every worker runs the same program.
#
# ddplab's ranks met through a file in a private directory (a `FileStore`), so no torchrun variables
# were needed; the cell prints the ones torchrun would have set. The `TF_CONFIG` is real:
# `ddplab.tf_config()`, called on every rank, picks a free port on each, exchanges them over the
# pool's gloo group, and sets `os.environ["TF_CONFIG"]` with this rank as worker `rank`. Then
# `MultiWorkerMirroredStrategy()` reads it and waits until every worker has connected. The cell
# prints how long the import and the strategy took: expect about 15 s on 4 ranks, mostly
# `import tensorflow`. ([Lesson 17](17_cluster.ipynb) runs torchrun for real.)

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
# ddplab 的各个 rank 通过私有目录中的一个文件（`FileStore`）会合，所以用不到 torchrun 的环境变量；下面的单元格打印的是 torchrun 本会设置的那些。`TF_CONFIG` 则是真的：每个 rank 都调用 `ddplab.tf_config()`，它在每个 rank 上选一个空闲端口，通过进程池的 gloo 进程组交换这些端口，再把本 rank 作为第 `rank` 号 worker 写进 `os.environ["TF_CONFIG"]`。接着 `MultiWorkerMirroredStrategy()` 读取它，并一直等到所有 worker 都连上。单元格会打印导入和创建 strategy 各用了多长时间：4 个 rank 上大约 15 秒，大部分花在 `import tensorflow` 上。（[第 17 课](17_cluster.ipynb)会真正运行 torchrun。）

# %%
%%ddp
import json, os, time
from ddplab.lessons import say                 # in rank code too: speaks the pool's language

tic = time.perf_counter()
config = ddplab.tf_config()                  # this rank's TF_CONFIG (worker `rank`), set in os.environ
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"     # TensorFlow's C++ logs: errors only
import tensorflow as tf
tf.get_logger().setLevel("ERROR")            # and its Python logs
imported = time.perf_counter() - tic
strategy = tf.distribute.MultiWorkerMirroredStrategy()    # reads TF_CONFIG; every worker waits for all
formed = time.perf_counter() - tic - imported
task = strategy.cluster_resolver.task_id

torchrun_env = {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world_size,
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500}
print("torchrun  ->", " ".join(f"{k}={v}" for k, v in torchrun_env.items()))
print("TF_CONFIG ->", os.environ["TF_CONFIG"])
print(f"strategy.cluster_resolver.task_id = {task}, "
      f"num_replicas_in_sync = {strategy.num_replicas_in_sync}; "
      + say(f"import {imported:.1f} s, strategy {formed:.1f} s", f"导入 {imported:.1f} 秒，创建 strategy {formed:.1f} 秒"))

# %%
configs = %ddp_gather config
tasks = %ddp_gather task
assert [c["task"]["index"] for c in configs] == tasks == list(range(tf_n))
assert all(c["cluster"] == configs[0]["cluster"] for c in configs)     # the same cluster, a different task
print(say(f"every worker got the same cluster of {tf_n} and its own task index (= its rank); worker 0 is the chief",
          f"每个 worker 拿到同一个 {tf_n} 个 worker 的集群，以及自己的 task 编号（= 它的 rank）；0 号 worker 是 chief"))
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
# **What does not run here, said plainly.** `ParameterServerStrategy` needs a cluster of its own kind:
# parameter-server tasks, a chief that runs a `ClusterCoordinator` and schedules steps, and workers,
# each a separate TensorFlow server, so it does not fit a pool of equal ranks; this lesson does not
# run it (lesson 9 builds an asynchronous parameter server from torch's point-to-point calls instead).
# `TPUStrategy` needs TPUs, and there are none here. `MultiWorkerMirroredStrategy` (sections 1 to 6)
# and `MirroredStrategy` (section 7) run for real.
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
# and if it fails, all replicas of that machine fail with it. Section 7 runs such a process, with 4
# logical CPU devices standing in for 4 GPUs.

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
# **这里不能运行的，直说。** `ParameterServerStrategy` 需要一种专门的集群：参数服务器任务、一个运行 `ClusterCoordinator` 并分派各步的 chief，以及若干 worker，每一个都是单独的 TensorFlow 服务器，所以它放不进由对等的 rank 组成的进程池；本课不运行它（第 9 课改用 torch 的点对点通信搭了一个异步参数服务器）。`TPUStrategy` 需要 TPU，而这里没有。`MultiWorkerMirroredStrategy`（第 1 到第 6 节）和 `MirroredStrategy`（第 7 节）都是真正运行的。
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
# 实际的区别在于：在 PyTorch 中，每个 rank 都是一个独立的 Python 进程，不论在一台还是多台机器上，所以 1 个 GPU、8 个 GPU 还是 8 台机器，代码都一样。使用 `MirroredStrategy` 时，一个 Python 进程运行本机所有 GPU 上的副本：要启动和照看的进程只有一个，但它一旦失败，这台机器上的所有副本都会随之失败。第 7 节就运行这样一个进程，用 4 个逻辑 CPU 设备代替 4 个 GPU。

# %% [markdown]
# ## 3. Data: sharding and the batch size
#
# **Sharding.** PyTorch: `DistributedSampler` gives rank *r* the samples r, r+N, r+2N, ...
# (shuffled each epoch with `set_epoch`). TensorFlow: `strategy.experimental_distribute_dataset(dataset)`
# shards the dataset across workers by the `AutoShardPolicy` in
# `options.experimental_distribute.auto_shard_policy`: `FILE` (each worker reads its own input
# files), `DATA` (every worker reads everything and keeps its share: `dataset.shard(N, index)` keeps
# every N-th element), `AUTO` (the default: `FILE` if it can, else `DATA`), `HINT`, or `OFF`. With
# `strategy.distribute_datasets_from_function(fn)` you shard yourself with
# `input_context.num_input_pipelines` and `input_context.input_pipeline_id`, like `num_replicas` and
# `rank` in a sampler.
#
# Without shuffling, `DistributedSampler` and `shard(N, index)` pick exactly the same elements. Both
# run below, on every rank:

# %% [markdown] lang=zh
# ## 3. 数据：分片与批大小
#
# **分片。** PyTorch：`DistributedSampler` 把样本 r、r+N、r+2N……分给 rank *r*（每个 epoch 用 `set_epoch` 重新打乱）。TensorFlow：`strategy.experimental_distribute_dataset(dataset)` 按照 `options.experimental_distribute.auto_shard_policy` 中的 `AutoShardPolicy` 把数据集分片给各个 worker：`FILE`（每个 worker 读取属于自己的输入文件）、`DATA`（每个 worker 读取全部数据，只保留自己那一份：`dataset.shard(N, index)` 保留每 N 个元素中的一个）、`AUTO`（默认值：能用 `FILE` 就用 `FILE`，否则用 `DATA`）、`HINT`，或者 `OFF`。使用 `strategy.distribute_datasets_from_function(fn)` 时，你用 `input_context.num_input_pipelines` 和 `input_context.input_pipeline_id` 自己分片，它们就相当于采样器中的 `num_replicas` 和 `rank`。
#
# 不打乱时，`DistributedSampler` 和 `shard(N, index)` 选出的元素完全相同。下面在每个 rank 上把两者都真正运行一次：

# %%
%%ddp
from torch.utils.data import DistributedSampler

mine = list(DistributedSampler(range(16), shuffle=False))                        # what rank `rank` reads in torch
tf_shard = [int(i) for i in tf.data.Dataset.range(16).shard(world_size, rank)]   # and as TensorFlow's worker `rank`
print(f"DistributedSampler: {mine}   Dataset.range(16).shard({world_size}, {rank}): {tf_shard}")

# %%
mine = %ddp_gather mine
tf_shard = %ddp_gather tf_shard
assert mine == tf_shard and sorted(sum(mine, [])) == list(range(16))
print(say("the same split in both frameworks, and together the ranks cover every element once",
          "两个框架的划分方式相同，而且所有 rank 合起来恰好把每个元素覆盖一次"))

# %% [markdown]
# **The batch size means different things.**
#
# | | PyTorch DDP | TensorFlow `tf.distribute` |
# |---|---|---|
# | what you write | `DataLoader(..., batch_size=16)` on every rank | `dataset.batch(64)`: the **global** batch |
# | each replica gets | 16 (the per-replica batch) | 64 / `num_replicas_in_sync` |
# | the global batch | 16 × world size = 64 | 64 |
# | loss | mean over the local batch; DDP **averages** the gradients (sum ÷ N) | `tf.nn.compute_average_loss(per_example_loss, global_batch_size=64)`: sum ÷ global batch; the gradients are **summed** across replicas |
#
# Here is the global batch at work: a dataset of 128 numbers, batched by 64, distributed by the
# strategy. Each worker prints the batches its replica gets.

# %% [markdown] lang=zh
# **批大小的含义不同。**
#
# | | PyTorch DDP | TensorFlow `tf.distribute` |
# |---|---|---|
# | 你写的是 | 每个 rank 上的 `DataLoader(..., batch_size=16)` | `dataset.batch(64)`：**全局**批大小 |
# | 每个副本拿到 | 16（每个副本的批大小） | 64 / `num_replicas_in_sync` |
# | 全局批大小 | 16 × world size = 64 | 64 |
# | 损失 | 对本地批次取平均；DDP 对梯度**求平均**（求和 ÷ N） | `tf.nn.compute_average_loss(per_example_loss, global_batch_size=64)`：求和 ÷ 全局批大小；梯度在各副本之间**求和** |
#
# 下面看看全局批次是怎么起作用的：一个包含 128 个数的数据集，按 64 分批，再交给 strategy 分发。每个 worker 打印它的副本拿到的批次。

# %%
%%ddp
dataset = tf.data.Dataset.range(128).batch(64)                 # batched by the GLOBAL batch size
replica_batches = [strategy.experimental_local_results(batch)[0].numpy().tolist()
                   for batch in strategy.experimental_distribute_dataset(dataset)]
print(say(f"batch(64) -> this replica's batches of {[len(b) for b in replica_batches]}: "
          f"{[f'{b[0]}..{b[-1]}' for b in replica_batches]}",
          f"batch(64) -> 本副本拿到的批次，大小为 {[len(b) for b in replica_batches]}："
          f"{[f'{b[0]}..{b[-1]}' for b in replica_batches]}"))

# %%
replica_batches = %ddp_gather replica_batches
per_replica = 64 // tf_n
assert all(len(b) == per_replica for batches in replica_batches for b in batches)
assert sorted(i for batches in replica_batches for b in batches for i in b) == list(range(128))
print(say(f"dataset.batch(64) over {tf_n} replicas: {per_replica} examples each per step, 64 in all, "
          "every example once; in DDP you would write batch_size=" + str(per_replica) + " on every rank",
          f"dataset.batch(64) 分给 {tf_n} 个副本：每步每个副本 {per_replica} 个样本，合起来 64 个，每个样本恰好一次；"
          f"在 DDP 中你要在每个 rank 上写 batch_size={per_replica}"))
in_order = all(b == list(range(64 * k + per_replica * r, 64 * k + per_replica * (r + 1)))
               for r, batches in enumerate(replica_batches) for k, b in enumerate(batches))
if in_order:   # (how this TensorFlow cut them; the training below cuts its batches the same way)
    print(say("each global batch was cut into consecutive parts in replica order: replica r got its r-th part",
              "每个全局批次都按副本顺序切成连续的几部分：第 r 个副本拿到第 r 部分"))

# %% [markdown]
# The two loss conventions give the same gradients when every replica has a full batch. Measure it in
# both frameworks at once: on every rank, the same MLP (torch's initial weights; the Keras copy's
# Dense kernels are their transposes), this replica's part of the same global batch of 64, and:
#
# - **DDP's way**, in torch: the mean loss over the local batch, `backward()`, and the gradients
#   averaged over the ranks (`all_reduce` with `AVG`, as DDP does);
# - **TensorFlow's way**, in TensorFlow: each example's loss, `tf.nn.compute_average_loss(...,
#   global_batch_size=64)`, the gradient under `tf.GradientTape`, and the gradients *summed* across
#   replicas (the replica context's `all_reduce(SUM)`, which `apply_gradients` does by itself);
# - **the PyTorch habit carried into TensorFlow**: the mean over the local batch
#   (`tf.reduce_mean`), with the gradients summed.

# %% [markdown] lang=zh
# 当每个副本的批次都是满的时，这两种损失约定得到相同的梯度。下面在两个框架中同时测量：每个 rank 上是同一个 MLP（torch 的初始权重；Keras 副本中 Dense 层的 kernel 是它们的转置），同一个 64 样本全局批次中属于本副本的那一部分，然后：
#
# - **DDP 的做法**，在 torch 中：对本地批次的损失取平均，`backward()`，再在各 rank 之间对梯度求平均（用 `AVG` 做 `all_reduce`，和 DDP 一样）；
# - **TensorFlow 的做法**，在 TensorFlow 中：每个样本各自的损失，`tf.nn.compute_average_loss(..., global_batch_size=64)`，用 `tf.GradientTape` 求梯度，再在各副本之间对梯度*求和*（副本上下文的 `all_reduce(SUM)`，`apply_gradients` 会自己做这一步）；
# - **把 PyTorch 的习惯带进 TensorFlow**：对本地批次取平均（`tf.reduce_mean`），梯度仍然求和。

# %% [markdown]
# **Predict, then run.** The PyTorch habit (the mean over the replica's own batch, the gradients
# summed) gives a gradient how many times DDP's (the ratio of their norms), on this run's
# TensorFlow workers (their number is printed above)? Write a number.

# %% [markdown] lang=zh
# **先预测，再运行。** 按 PyTorch 的习惯（对本副本自己的批次取平均，再对梯度求和）得到的梯度是 DDP 梯度的多少倍（两者范数之比）？以这次运行的 TensorFlow worker 为准（个数见上面的输出）。写一个数。

# %%
predict("16.habit", ...)    # |the habit's gradient| / |DDP's gradient|, on this run's TensorFlow workers

# %%
%%ddp
import numpy as np
from ddplab.lessons.frameworks import initial_weights, global_batch, my_slice, torch_mlp, keras_mlp

weights = initial_weights()                                   # [(weight (out, in), bias), ...], seeded
x, y = global_batch(0)                                        # 64 examples, the same on every rank
x_mine, y_mine = my_slice(x, rank, world_size), my_slice(y, rank, world_size)   # this replica's part

# DDP's way (torch): the mean over the local batch, then the gradients AVERAGED over the ranks
net = torch_mlp(weights)
nn.functional.mse_loss(net(torch.from_numpy(x_mine)), torch.from_numpy(y_mine)).backward()
ddp_grads = [p.grad for p in net.parameters()]
for g in ddp_grads:
    dist.all_reduce(g, op=dist.ReduceOp.AVG)

# TensorFlow's way: the loss over the GLOBAL batch on each replica, then the gradients SUMMED
with strategy.scope():
    keras_model = keras_mlp(weights)                          # Dense kernels = torch's weights transposed

@tf.function
def summed_gradients(x, y, local_mean):
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(keras_model(x) - y), axis=1)
            if local_mean:                                    # the PyTorch habit: the mean over this replica
                loss = tf.reduce_mean(per_example)
            else:                                             # TensorFlow's: sum / global batch
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=64)
        grads = tape.gradient(loss, keras_model.trainable_variables)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
    return strategy.run(replica_fn, args=(x, y))

def part_of(a):     # each replica's part of a global array, by its replica id
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(my_slice(a, ctx.replica_id_in_sync_group, strategy.num_replicas_in_sync)))

tf_grads = summed_gradients(part_of(x), part_of(y), local_mean=False)
habit_grads = summed_gradients(part_of(x), part_of(y), local_mean=True)

def as_torch(grads):   # Keras's (in, out) kernels back to torch's (out, in)
    return [g.numpy().T if len(g.shape) == 2 else g.numpy() for g in grads]

grad_gap = max(float(np.abs(t - d.numpy()).max()) for t, d in zip(as_torch(tf_grads), ddp_grads))
habit_ratio = float(np.sqrt(sum((h ** 2).sum() for h in as_torch(habit_grads)))
                    / np.sqrt(sum((d.numpy() ** 2).sum() for d in ddp_grads)))
print(f"max |tf_grads - ddp_grads| = {grad_gap:.1e}   |habit_grads| / |ddp_grads| = {habit_ratio:.4f}")

# %%
grad_gap = %ddp_gather grad_gap
habit_ratio = %ddp_gather habit_ratio
assert max(grad_gap) < 1e-6 and all(abs(r - tf_n) < 1e-3 for r in habit_ratio)
print(say(f"DDP's mean-then-average (torch) = TensorFlow's sum-over-the-global-batch-then-sum, on {tf_n} ranks: "
          f"{max(grad_gap):.1e} apart at most (float32 rounding)",
          f"DDP 的先取平均再求平均（torch）= TensorFlow 的按全局批大小归一化再求和，{tf_n} 个 rank 上都成立："
          f"最多相差 {max(grad_gap):.1e}（float32 舍入）"))
print(say(f"the PyTorch habit with summed gradients: {habit_ratio[0]:.3f} times DDP's gradient, with "
          f"{tf_n} replicas", f"按 PyTorch 的习惯对本地批次取平均、再对梯度求和：得到的梯度是 DDP 的 "
          f"{habit_ratio[0]:.3f} 倍（{tf_n} 个副本）"))
reveal("16.habit", float(habit_ratio[0]), unit=say("× DDP's gradient", "× DDP 的梯度"))

# %% [markdown]
# **A common claim:** `MirroredStrategy` does what DDP does: it averages the replicas' gradients
# with an all-reduce. **What actually happens:** the all-reduce *sums* them; the averaging is in the
# loss, which is divided by the **global** batch (`tf.nn.compute_average_loss` in a custom loop;
# Keras's `fit` scales its loss the same way by itself). The result is DDP's update, as the first
# line above shows, measured in TensorFlow itself. Divide by the local batch instead, as in PyTorch,
# and the gradients come out as many times too large as there are replicas (the second line): with
# plain SGD, a learning rate that many times larger. (With fewer replicas than 4 on a small session,
# the factor is that smaller number: it is the number of replicas, whatever it is.)

# %% [markdown] lang=zh
# **一个常见的说法：** `MirroredStrategy` 和 DDP 做的事一样：用 all-reduce 对各副本的梯度求平均。**实际情况是：** all-reduce 对梯度*求和*；求平均这一步放在损失里，损失除以的是**全局**批大小（在自定义循环中用 `tf.nn.compute_average_loss`；Keras 的 `fit` 会自动以同样的方式缩放损失）。结果就是 DDP 的更新，正如上面第一行所示，而且是在 TensorFlow 中实测的。如果像在 PyTorch 中那样除以本地批大小，梯度就会变成应有值的若干倍，倍数等于副本数（第二行）：对普通 SGD 来说，这相当于学习率也变成了原来的那么多倍。（在小会话中副本少于 4 个时，这个倍数就是那个更小的数：它总是等于副本数。）

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
# counterpart (section 3 used it for the gradients). Here each replica holds a "per-replica" loss and
# a sample count, and the cell reduces them both ways, TensorFlow's and torch's, on every rank:
#
# **Which torch `ReduceOp.AVG` needs.** gloo accepts `AVG` in recent torch versions only: older ones
# reject it on gloo (torch's own `ReduceOp` documentation still says it is for NCCL only). This course
# needs torch 2.13 or newer, whose gloo has it. On an older torch, all-reduce with `SUM` and divide by
# `dist.get_world_size()`: the same mean, on any backend.

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
# `strategy.reduce` 在副本之外调用（即“跨副本上下文”，cross-replica context），它把一个值**返回**给程序。`dist.all_reduce` 由每个 rank 调用，结果**就地**留在每个 rank 上。在 `strategy.run` 内部，`get_replica_context().all_reduce` 才是与它完全对应的操作（第 3 节就用它对梯度求和）。下面每个副本持有一个“每副本”的损失和一个样本数，单元格在每个 rank 上用两种方式（TensorFlow 的和 torch 的）对它们做归约：
#
# **`ReduceOp.AVG` 需要哪个版本的 torch。** 只有较新的 torch 版本中的 gloo 才接受 `AVG`：较早的版本在 gloo 上会拒绝它（torch 自己的 `ReduceOp` 文档至今仍说它只适用于 NCCL）。本课程需要 torch 2.13 或更新的版本，其中的 gloo 支持它。在较早的 torch 上，用 `SUM` 做 all-reduce，再除以 `dist.get_world_size()`：在任何后端上都得到同样的平均值。

# %%
%%ddp
values = [0.5 + rank, 16.0]                                     # this replica's (loss, sample count)
per_replica = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(values))
tf_sum = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy().tolist()
tf_mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None).numpy().tolist()
summed, averaged = torch.tensor(values), torch.tensor(values)
dist.all_reduce(summed, op=dist.ReduceOp.SUM)
dist.all_reduce(averaged, op=dist.ReduceOp.AVG)
print(f"{values}: strategy.reduce SUM {tf_sum}, MEAN {tf_mean} | "
      f"dist.all_reduce SUM {summed.tolist()}, AVG {averaged.tolist()}")

# %%
values = %ddp_gather values
tf_sum = %ddp_gather tf_sum
tf_mean = %ddp_gather tf_mean
summed = %ddp_gather summed
averaged = %ddp_gather averaged
total = [sum(v[0] for v in values), 16.0 * tf_n]
assert all(s == total and a.tolist() == s for s, a in zip(tf_sum, summed))
assert all(m == [total[0] / tf_n, 16.0] and a.tolist() == m for m, a in zip(tf_mean, averaged))
draw.collectives({"SUM": (values, summed), "MEAN (AVG)": (values, averaged)},
                 title=say("strategy.reduce(SUM / MEAN) = dist.all_reduce(SUM / AVG): (loss, samples) per replica",
                           "strategy.reduce(SUM / MEAN) = dist.all_reduce(SUM / AVG)：每个副本的（损失，样本数）"),
                 before=say("per replica", "每个副本"), after=say("reduced", "归约之后"))

# %% [markdown]
# ## 5. Gradient accumulation
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
# with `no_sync`. The second cell below does that on the TensorFlow workers, with k = 4 micro-batches
# of the global batches (each micro-batch's loss divided by the update's whole batch, 4 × 64), counts
# the collective ops in each traced function, and checks the weights against one SGD step on the 4
# micro-batches together, in torch. (Keras 3 optimizers also take `gradient_accumulation_steps=k`,
# which updates the weights once every k steps.)

# %% [markdown] lang=zh
# ## 5. 梯度累积
#
# PyTorch：前 k−1 个微批次的**前向和反向**都放在 `with model.no_sync():` 里运行，然后做一次普通的前向和反向，它的 all-reduce 发送 k 个梯度之和（[第 4 课](04_no_sync.ipynb)）。前向也必须放在里面：决定下一次反向是否做 all-reduce 的，正是 DDP 的前向。`no_sync` 没有生效时，`forward` 会调用 `reducer.prepare_for_backward`，于是这次反向的梯度钩子会对每个桶做 all-reduce，即使 `backward()` 这个调用本身是在 `no_sync` 里运行的（torch 在 `no_sync` 的文档字符串中对此有警告）。下面的单元格对 k = 4 个微批次，按两种写法分别统计 DDP 的 all-reduce 次数。
#
# TensorFlow 没有 `no_sync`。在自定义循环中，`optimizer.apply_gradients` 默认会在各副本之间对梯度做 all-reduce（求和），所以要做梯度累积，就把 k 步的梯度加到每个副本各自的变量里，每 k 步才调用一次 `apply_gradients`：每 k 步一次 all-reduce，与 `no_sync` 相同。下面第二个单元格就在 TensorFlow worker 上这样做：取全局批次作为 k = 4 个微批次（每个微批次的损失都除以这次更新的整个批次，4 × 64），数一数每个跟踪出的函数中的集合通信 op，再用 torch 对这 4 个微批次合起来做一步 SGD，与得到的权重相比较。（Keras 3 的优化器还接受 `gradient_accumulation_steps=k` 参数，每 k 步才更新一次权重。）

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

# %%
%%ddp
K = 4                                          # micro-batches per update, as above
with strategy.scope():
    acc_keras = keras_mlp(weights)
    acc_opt = tf.keras.optimizers.SGD(0.1)
    sums = [tf.Variable(tf.zeros_like(v), trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM) for v in acc_keras.trainable_variables]  # per replica

@tf.function
def accumulate(x, y):      # one micro-batch: its gradients added to this replica's sums; nothing is sent
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(acc_keras(x) - y), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=64 * K)   # the update's whole batch
        for s, g in zip(sums, tape.gradient(loss, acc_keras.trainable_variables)):
            s.assign_add(g)
    strategy.run(replica_fn, args=(x, y))

@tf.function
def apply():               # every K micro-batches: apply_gradients all-reduces (sums) the sums, once
    def replica_fn():
        acc_opt.apply_gradients(zip([tf.identity(s) for s in sums], acc_keras.trainable_variables))
        for s in sums:
            s.assign(tf.zeros_like(s))
    strategy.run(replica_fn)

for k in range(K):
    x_k, y_k = global_batch(k)
    accumulate(part_of(x_k), part_of(y_k))
apply()

def collective_ops(fn, *args):                 # the collective ops in fn's traced graph
    return sum(op.type.startswith("Collective") for op in fn.get_concrete_function(*args).graph.get_operations())

tf_acc_ops = {"accumulate": collective_ops(accumulate, part_of(x_k), part_of(y_k)), "apply": collective_ops(apply)}
big = torch_mlp(weights)                       # the same update as ONE step on the K micro-batches together, in torch
x_all, y_all = (torch.from_numpy(np.concatenate(parts)) for parts in zip(*(global_batch(k) for k in range(K))))
nn.functional.mse_loss(big(x_all), y_all).backward()
torch.optim.SGD(big.parameters(), lr=0.1).step()
acc_gap = max(float(np.abs(a - p.detach().numpy()).max())
              for a, p in zip(as_torch(acc_keras.trainable_variables), big.parameters()))
print(say(f"collective ops: accumulate {tf_acc_ops['accumulate']}, apply {tf_acc_ops['apply']}; the weights after "
          f"{K} micro-batches and one apply_gradients vs one SGD step on all {64 * K} examples: {acc_gap:.1e} apart",
          f"集合通信 op：accumulate 中 {tf_acc_ops['accumulate']} 个，apply 中 {tf_acc_ops['apply']} 个；{K} 个微批次加一次 "
          f"apply_gradients 之后的权重，与对全部 {64 * K} 个样本做一步 SGD 的权重相差 {acc_gap:.1e}"))

# %%
tf_acc_ops = %ddp_gather tf_acc_ops
acc_gap = %ddp_gather acc_gap
K = 4
assert all(o["accumulate"] == 0 and o["apply"] >= 1 for o in tf_acc_ops) and max(acc_gap) < 1e-6
print(say(f"TensorFlow: the accumulating step sends nothing; apply_gradients, once per {K} micro-batches, all-reduces "
          f"the sums, and the update is the big batch's (to {max(acc_gap):.0e}): no_sync's effect, without no_sync",
          f"TensorFlow：累积的那一步什么都不发送；apply_gradients 每 {K} 个微批次一次，对累积的和做 all-reduce，更新就是大批次的更新"
          f"（相差不到 {max(acc_gap):.0e}）：效果和 no_sync 一样，却不需要 no_sync"))

# %% [markdown]
# ## 6. The training under `MultiWorkerMirroredStrategy`
#
# Now the training itself: 20 steps of SGD (learning rate 0.1) on the MLP, each step on a global batch
# of 64 made from the step's number alone (`global_batch(step)`: the same wherever it is made), cut
# into equal parts in replica order. `train_tf` (in `ddplab/lessons/frameworks.py`) is a custom loop
# with TensorFlow's conventions; beside it, the DDP loop that section 8 runs on the same data:
#
# <table>
# <tr><th>PyTorch DDP (<code>train_torch</code>)</th><th>TensorFlow (<code>train_tf</code>)</th></tr>
# <tr><td><pre>
# model = DDP(torch_mlp(initial_weights()))
# opt = torch.optim.SGD(model.parameters(), lr=0.1)
# for step in range(steps):
#     x, y = my_slice(global_batch(step), rank)
#     opt.zero_grad()
#     loss = mse_loss(model(x), y)   # local mean
#     loss.backward()      # all-reduce: average
#     opt.step()
#     dist.all_reduce(loss)            # for the log
# </pre></td><td><pre>
# with strategy.scope():
#     model = keras_mlp(initial_weights())
#     opt = tf.keras.optimizers.SGD(0.1)
# @tf.function
# def step_fn(x, y):
#     def replica_step(x, y):
#         with tf.GradientTape() as tape:
#             per_example = mean(square(model(x) - y), axis=1)
#             loss = tf.nn.compute_average_loss(
#                 per_example, global_batch_size=64)
#         grads = tape.gradient(loss, model.trainable_variables)
#         opt.apply_gradients(zip(grads, ...))  # all-reduce: sum
#         return loss
#     per_replica = strategy.run(replica_step, args=(x, y))
#     return strategy.reduce(SUM, per_replica, axis=None)
# </pre></td></tr>
# </table>
#
# Each replica's part of the batch goes in with
# `strategy.experimental_distribute_values_from_function`, by the replica's id. The loss the loop
# records is `strategy.reduce(SUM)` of the replicas' losses, each already divided by the global batch:
# the mean over all 64 examples, on every worker. Every worker logs it, so the dashboard draws the
# run. The cell also times the same step alone on each worker (no strategy, no all-reduce) and the
# step's collectives alone (the gradients' all-reduce and `strategy.reduce` of the loss, on arrays of
# the same shapes): section 10 takes the time per step apart with them.

# %% [markdown] lang=zh
# ## 6. 在 `MultiWorkerMirroredStrategy` 下训练
#
# 现在进入训练本身：对这个 MLP 做 20 步 SGD（学习率 0.1），每一步的全局批次有 64 个样本，只由步数生成（`global_batch(step)`：在哪里生成都一样），并按副本顺序切成相等的几部分。`train_tf`（在 `ddplab/lessons/frameworks.py` 中）是一个采用 TensorFlow 约定的自定义循环；旁边是第 8 节在同样的数据上运行的 DDP 循环：
#
# <table>
# <tr><th>PyTorch DDP（<code>train_torch</code>）</th><th>TensorFlow（<code>train_tf</code>）</th></tr>
# <tr><td><pre>
# model = DDP(torch_mlp(initial_weights()))
# opt = torch.optim.SGD(model.parameters(), lr=0.1)
# for step in range(steps):
#     x, y = my_slice(global_batch(step), rank)
#     opt.zero_grad()
#     # 本地平均：
#     loss = mse_loss(model(x), y)
#     # all-reduce：求平均
#     loss.backward()
#     opt.step()
#     # 为了记录损失：
#     dist.all_reduce(loss)
# </pre></td><td><pre>
# with strategy.scope():
#     model = keras_mlp(initial_weights())
#     opt = tf.keras.optimizers.SGD(0.1)
# @tf.function
# def step_fn(x, y):
#     def replica_step(x, y):
#         with tf.GradientTape() as tape:
#             per_example = mean(square(model(x) - y), axis=1)
#             loss = tf.nn.compute_average_loss(
#                 per_example, global_batch_size=64)
#         grads = tape.gradient(loss, model.trainable_variables)
#         # all-reduce：求和
#         opt.apply_gradients(zip(grads, ...))
#         return loss
#     per_replica = strategy.run(replica_step, args=(x, y))
#     return strategy.reduce(SUM, per_replica, axis=None)
# </pre></td></tr>
# </table>
#
# 每个副本的那部分批次通过 `strategy.experimental_distribute_values_from_function` 按副本编号送进去。循环记录的损失是各副本损失（每个都已除以全局批大小）的 `strategy.reduce(SUM)`：也就是全部 64 个样本上的平均损失，每个 worker 上都一样。每个 worker 都记录它，所以仪表盘会画出这次训练。这个单元格还在每个 worker 上单独计时同样的一步（没有 strategy，没有 all-reduce），以及单独计时这一步的集合通信（梯度的 all-reduce 和损失的 `strategy.reduce`，数组形状与训练中相同）：第 10 节用它们把每一步的时间拆开。

# %%
%%ddp
from ddplab.lessons.frameworks import train_tf, step_alone, collectives_seconds

tf_record = {}
tf_losses, tf_step = train_tf(strategy, 20, record=tf_record)            # 20 steps, lr 0.1, global batch 64
tf_alone = step_alone("tensorflow", replica=rank, replicas=world_size)   # the same step, this worker alone
tf_comm = collectives_seconds("tensorflow", strategy)                     # the step's collectives, alone
tf_result = dict(losses=tf_losses, step=tf_step, first=tf_record["first"], collectives=tf_record["collectives"],
                 alone=tf_alone, comm=tf_comm)
print(say(f"loss {tf_losses[0]:.4f} -> {tf_losses[-1]:.4f}; {tf_step * 1e3:.1f} ms a step "
          f"(the first, which traces the tf.function: {tf_record['first']:.2f} s)",
          f"损失 {tf_losses[0]:.4f} -> {tf_losses[-1]:.4f}；每步 {tf_step * 1e3:.1f} 毫秒"
          f"（第一步要跟踪 tf.function：{tf_record['first']:.2f} 秒）"))

# %%
tf_results = %ddp_gather tf_result
assert all(r["losses"] == tf_results[0]["losses"] for r in tf_results)   # strategy.reduce: the same on every worker
tf_losses = tf_results[0]["losses"]
assert tf_losses[-1] < tf_losses[0]
print(say(f"{tf_n} workers, every one with the same global loss each step: {tf_losses[0]:.4f} -> {tf_losses[-1]:.4f}",
          f"{tf_n} 个 worker，每一步的全局损失在每个 worker 上都相同：{tf_losses[0]:.4f} -> {tf_losses[-1]:.4f}"))

# %% [markdown]
# **Why a custom loop, and not `model.fit`?** With Keras 3, `model.fit` under
# `MultiWorkerMirroredStrategy` fails: it hands a `PerReplica` value (each replica's batch) to an op
# that expects a tensor ([keras-team/keras#20585](https://github.com/keras-team/keras/issues/20585),
# open). The cell below tries it on the same model and catches the error. The older `tf_keras`
# package (Keras 2) can run `fit` there, but `pip install tf-keras` pulls the full `tensorflow`
# package beside `tensorflow-cpu`, so this lesson does not install it. `fit` does run under
# `MirroredStrategy`, one process with several replicas: section 7.
#
# One more property of `MultiWorkerMirroredStrategy` to know before you experiment: once a worker fails
# in the middle of a collective, TensorFlow aborts its collectives in every worker, for good, in
# those processes. ddplab then says so and tells you to run `%ddp_restart --all` (fresh processes),
# then `ddplab.tf_config()` and the strategy again.

# %% [markdown] lang=zh
# **为什么用自定义循环，而不用 `model.fit`？** 在 Keras 3 中，`MultiWorkerMirroredStrategy` 下的 `model.fit` 会失败：它把一个 `PerReplica` 值（每个副本的批次）交给了一个需要张量的 op（[keras-team/keras#20585](https://github.com/keras-team/keras/issues/20585)，尚未解决）。下面的单元格在同一个模型上试一试，并捕获这个错误。较早的 `tf_keras` 包（Keras 2）在那里可以运行 `fit`，但 `pip install tf-keras` 会在 `tensorflow-cpu` 旁边再装上完整的 `tensorflow` 包，所以本课不安装它。`fit` 在 `MirroredStrategy`（一个进程、多个副本）下可以运行：见第 7 节。
#
# 动手实验之前，还要知道 `MultiWorkerMirroredStrategy` 的一个特点：一旦某个 worker 在集合通信进行到一半时失败，TensorFlow 就会在每个 worker 中中止它的集合通信，而且在这些进程里再也无法恢复。这时 ddplab 会说明情况，并告诉你运行 `%ddp_restart --all`（换成全新的进程），然后再调用 `ddplab.tf_config()` 并重新创建 strategy。

# %%
%%ddp
with strategy.scope():
    fit_model = keras_mlp(weights)
    fit_model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
try:
    fit_model.fit(tf.data.Dataset.from_tensor_slices(global_batch(0)).batch(64), epochs=1, verbose=0, shuffle=False)
    fit_error = None
except ValueError as error:                                  # Keras 3: "Attempt to convert a value (PerReplica..."
    fit_error = str(error).splitlines()[0][:60]
print("model.fit:", fit_error or say("it ran", "运行成功"))

# %%
fit_errors = %ddp_gather fit_error
if all(fit_errors):
    print(say(f"model.fit under MultiWorkerMirroredStrategy failed on all {tf_n} workers ({fit_errors[0]}...): "
              "keras-team/keras#20585, as said above",
              f"MultiWorkerMirroredStrategy 下的 model.fit 在全部 {tf_n} 个 worker 上都失败了（{fit_errors[0]}……）："
              "即上面说的 keras-team/keras#20585"))
else:
    print(say("model.fit ran under MultiWorkerMirroredStrategy here: this Keras has the fix for keras-team/keras#20585",
              "这里 MultiWorkerMirroredStrategy 下的 model.fit 运行成功了：这个版本的 Keras 已经修复了 keras-team/keras#20585"))

# %% [markdown]
# The TensorFlow workers have done their part; their results are in the notebook (`tf_results`).
# Stop them, to give their memory back before the next pool.

# %% [markdown] lang=zh
# TensorFlow worker 的任务完成了，它们的结果已经保存在 notebook 里（`tf_results`）。停止它们，在启动下一个进程池之前把内存还回去。

# %%
%ddp_stop

# %% [markdown]
# ## 7. One process, four replicas: `MirroredStrategy` and `model.fit`
#
# `MirroredStrategy` is the single-machine strategy: **one** process drives all the devices of the
# machine, a replica on each, and the variables are mirrored on all of them. There is no GPU here, so
# the cell below splits this process's CPU into 4 *logical* devices, which TensorFlow treats as 4
# devices (4 replicas; all-reduce between them inside the process). That must happen before
# TensorFlow does anything else in the process (before any op, or even listing the logical devices),
# which is why it runs on a fresh pool of one rank. Then `tf.distribute.MirroredStrategy()`, as one
# writes it for GPUs, takes the 4 devices it finds.
#
# The same `train_tf` runs on it: the same 20 steps on the same global batches, now cut into 4 parts
# for the 4 replicas of one process. Section 9 compares its losses with the 4 workers' and DDP's.

# %% [markdown] lang=zh
# ## 7. 一个进程，四个副本：`MirroredStrategy` 与 `model.fit`
#
# `MirroredStrategy` 是单机的策略：**一个**进程驱动本机的所有设备，每个设备上一个副本，变量在所有设备上都有镜像。这里没有 GPU，所以下面的单元格把这个进程的 CPU 分成 4 个*逻辑*设备，TensorFlow 会把它们当作 4 个设备（4 个副本；它们之间的 all-reduce 在进程内部完成）。这一步必须在 TensorFlow 于该进程中做任何其他事情之前完成（在任何 op 之前，甚至在列出逻辑设备之前），所以它运行在一个新的、只有一个 rank 的进程池上。然后，`tf.distribute.MirroredStrategy()` 就像在 GPU 上那样写，它会拿到找到的 4 个设备。
#
# 同一个 `train_tf` 在它上面运行：同样的 20 步、同样的全局批次，现在切成 4 部分，分给一个进程中的 4 个副本。第 9 节把它的损失与 4 个 worker 的以及 DDP 的损失相比较。

# %%
%ddp_start 1

# %%
%%ddp
import os, time, warnings
from ddplab.lessons import say
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
tf.get_logger().setLevel("ERROR")

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)   # first of all
strategy = tf.distribute.MirroredStrategy()        # as written for GPUs: every device it finds
print(f"num_replicas_in_sync = {strategy.num_replicas_in_sync}:",
      ", ".join(d.split("/")[-1] for d in strategy.extended.worker_devices))

from ddplab.lessons.frameworks import train_tf, collectives_seconds, epoch_clock

mirrored_record = {}
mirrored_losses, mirrored_step = train_tf(strategy, 20, record=mirrored_record)
mirrored_result = dict(losses=mirrored_losses, step=mirrored_step, first=mirrored_record["first"],
                       collectives=mirrored_record["collectives"], comm=collectives_seconds("tensorflow", strategy))
print(say(f"loss {mirrored_losses[0]:.4f} -> {mirrored_losses[-1]:.4f}; {mirrored_step * 1e3:.1f} ms a step",
          f"损失 {mirrored_losses[0]:.4f} -> {mirrored_losses[-1]:.4f}；每步 {mirrored_step * 1e3:.1f} 毫秒"))

# %% [markdown]
# **`model.fit`, as the course's source article writes it.** The article trains ResNet50 on GPUs:
#
# ```python
# strategy = tf.distribute.MirroredStrategy()
# with strategy.scope():
#     model = ...
#     model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
# train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32).prefetch(tf.data.AUTOTUNE)
# model.fit(train_dataset, epochs=10)
# ```
#
# Here it runs as written, with three changes: the 4 logical CPU devices instead of GPUs (the strategy
# above), a small model instead of ResNet50, and data made here (2048 points of 8 numbers in 3
# classes, by the signs of two sums). `batch(32)` is the *global* batch: 8 examples per replica, 64
# steps per epoch. Keras's `fit` scales the loss by the global batch by itself and sums the gradients
# across the replicas (section 3's convention). The run does 2 epochs rather than the article's 10,
# to keep the lesson within its time, and adds two things that do not change the training: a clock
# (a Keras callback, `epoch_clock()`) that times each epoch and its steps, which the cell after it
# reads to say where an epoch's time went, and `verbose=2`, one line per epoch instead of a progress
# bar.

# %% [markdown] lang=zh
# **`model.fit`，按本课程所依据的那篇文章的写法。** 那篇文章在 GPU 上训练 ResNet50：
#
# ```python
# strategy = tf.distribute.MirroredStrategy()
# with strategy.scope():
#     model = ...
#     model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
# train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32).prefetch(tf.data.AUTOTUNE)
# model.fit(train_dataset, epochs=10)
# ```
#
# 这里照原样运行，只改三处：用 4 个逻辑 CPU 设备代替 GPU（即上面的 strategy），用一个小模型代替 ResNet50，数据在这里生成（2048 个点，每个点 8 个数，按两个和的符号分成 3 类）。`batch(32)` 是*全局*批大小：每个副本 8 个样本，每个 epoch 64 步。Keras 的 `fit` 会自己按全局批大小缩放损失，并在各副本之间对梯度求和（第 3 节的约定）。为了让本课在规定时间内跑完，这次只跑 2 个 epoch，而不是文章中的 10 个；另外加了两样不改变训练的东西：一个计时器（Keras 回调 `epoch_clock()`），记下每个 epoch 及其各步的时间，后面的单元格读取它来说明一个 epoch 的时间花在了哪里；以及 `verbose=2`，每个 epoch 打印一行，而不是进度条。

# %%
%%ddp
import numpy as np
warnings.filterwarnings("ignore", message=".*shuffle=True.*")   # Keras: fit's shuffle=True does not apply to a Dataset

rng = np.random.default_rng(0)                                  # data made here: 2048 points, 3 classes
x_train = rng.standard_normal((2048, 8)).astype("float32")
y_train = (x_train[:, :4].sum(axis=1) > 0).astype("int64") + (x_train[:, 4:].sum(axis=1) > 0)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(3, activation="softmax")])   # a small model, not ResNet50
    model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32).prefetch(tf.data.AUTOTUNE)
clock = epoch_clock()                                           # times each epoch, and its steps
history = model.fit(train_dataset, epochs=2, callbacks=[clock], verbose=2)
fit_epochs, fit_accuracy = clock.epochs, history.history["accuracy"]

# %%
fit_epochs = %ddp_gather fit_epochs
fit_accuracy = %ddp_gather fit_accuracy
mirrored_result = %ddp_gather mirrored_result
fit_epochs, fit_accuracy, mirrored_result = fit_epochs[0], fit_accuracy[0], mirrored_result[0]
(first, first_steps, n), (second, second_steps, _) = fit_epochs      # (seconds, seconds in the steps, steps)
print(say(f"fit: accuracy {fit_accuracy[0]:.2f} after the first epoch, {fit_accuracy[-1]:.2f} after the second; the "
          f"first epoch took {first:.1f} s (its first step traces the train step: {first_steps:.1f} s in its steps), "
          f"the second {second:.2f} s: its {n} steps {second_steps:.2f} s, around them {second - second_steps:.2f} s",
          f"fit：第一个 epoch 后准确率 {fit_accuracy[0]:.2f}，第二个之后 {fit_accuracy[-1]:.2f}；第一个 epoch 用了 "
          f"{first:.1f} 秒（它的第一步要跟踪训练步：各步一共 {first_steps:.1f} 秒），第二个 epoch 用了 {second:.2f} 秒："
          f"{n} 步一共 {second_steps:.2f} 秒，这些步之外 {second - second_steps:.2f} 秒"))

# %% [markdown]
# Around the steps, `fit` makes a new iterator over the dataset for each epoch, and with a strategy
# that iterator feeds 4 devices (a `MultiDeviceIterator`: a pipeline and a buffer per device). Keras
# 3.15 makes one at the start of every epoch and another when the epoch's data runs out (its
# `EpochIterator`). Making them and dropping the old ones is the time "around" the steps printed
# above: on this CPU, a good part of a second per epoch, and several seconds when the machine is busy
# with other work. That is why this run has few epochs of many steps. With a real model on GPUs a
# step takes far longer and this cost vanishes in it; with a small model, give each epoch more steps
# (more data, or `steps_per_epoch` on a repeated dataset). The accuracy rising is `fit` learning, with
# 4 replicas summing their gradients every step.

# %% [markdown] lang=zh
# 在这些步之外，`fit` 每个 epoch 都要为数据集新建一个迭代器，而有 strategy 时这个迭代器要给 4 个设备供数（一个 `MultiDeviceIterator`：每个设备一条流水线和一个缓冲区）。Keras 3.15 在每个 epoch 开始时建一个，在这个 epoch 的数据取完时又建一个（见它的 `EpochIterator`）。新建这些迭代器、丢掉旧的，就是上面打印的花在各步“之外”的时间：在这个 CPU 上，每个 epoch 要花去零点几秒，机器忙于别的工作时要好几秒。所以这次运行只有少数几个 epoch，每个 epoch 的步数较多。在 GPU 上训练真正的模型时，一步要长得多，这点开销就微不足道了；模型很小时，就让每个 epoch 多跑几步（更多数据，或者对重复的数据集设置 `steps_per_epoch`）。准确率在上升，说明 `fit` 在学习：4 个副本每一步都对梯度求和。

# %%
%ddp_stop
# %% [markdown]
# ## 8. JAX: `jit`, XLA, and the all-reduce XLA inserts
#
# The last pool: 4 fresh ranks, for JAX and then DDP. `ddplab.jax_distributed()`, called on every
# rank, starts `jax.distributed` across them: a coordinator on rank 0 (the counterpart of
# `MASTER_ADDR`), and gloo for the collectives between the processes, on the CPU. Then `jax.devices()`
# lists the devices of *every* process (4 CPU devices, one per rank) and `jax.local_devices()` this
# rank's own. gloo says so as it connects: the `[Gloo] Rank N is connected to 3 peer ranks` lines.
#
# `train_jax` lays the 4 devices out as a `Mesh` with one axis, `"dp"`, shards each global batch
# along it (`NamedSharding(mesh, P("dp"))`: each device holds its 16 rows, put there by its own
# process with `jax.make_array_from_process_local_data`) and replicates the parameters (`P()`). The
# step itself is the code for one device: the mean loss over the batch, `jax.value_and_grad`, and
# `p - lr * g`. No `psum`, no all-reduce is written anywhere. `jax.jit` traces the step once and
# hands it to **XLA**, the compiler, which compiles it for the mesh: its SPMD partitioner sees a mean
# over an axis that is spread over 4 devices, and gradients of replicated parameters computed from
# sharded data, and inserts the all-reduce itself. The cell prints it, from the compiled program's
# text (HLO): one instruction, whose operands are the four gradients and the loss's sum, combined.

# %% [markdown] lang=zh
# ## 8. JAX：`jit`、XLA，以及 XLA 插入的 all-reduce
#
# 最后一个进程池：4 个全新的 rank，先运行 JAX，再运行 DDP。每个 rank 都调用 `ddplab.jax_distributed()`，它在这些 rank 之间启动 `jax.distributed`：rank 0 上有一个协调者（相当于 `MASTER_ADDR`），进程之间的集合通信在 CPU 上用 gloo 完成。之后 `jax.devices()` 列出*所有*进程的设备（4 个 CPU 设备，每个 rank 一个），`jax.local_devices()` 列出本 rank 自己的设备。gloo 连接时会报告一声：就是那几行 `[Gloo] Rank N is connected to 3 peer ranks`。
#
# `train_jax` 把 4 个设备排成一个只有一个轴 `"dp"` 的 `Mesh`，把每个全局批次沿这个轴分片（`NamedSharding(mesh, P("dp"))`：每个设备持有自己的 16 行，由它所在的进程用 `jax.make_array_from_process_local_data` 放上去），参数则在各设备上复制（`P()`）。训练步本身就是单设备的代码：对批次取平均损失，`jax.value_and_grad`，然后 `p - lr * g`。任何地方都没有写 `psum`，也没有写 all-reduce。`jax.jit` 把这一步跟踪一次，交给编译器 **XLA**，由它针对这个网格编译：它的 SPMD 分区器看到一个沿着分布在 4 个设备上的轴求平均的运算，以及由分片数据算出的、复制参数的梯度，于是自己插入 all-reduce。单元格从编译后程序的文本（HLO）中把它打印出来：一条指令，它的操作数是四个梯度和损失的和，合在一起。

# %%
jax_n, why = jax_ranks(4)    # 4 ranks if this session's memory holds them with JAX, else 2
print(say(f"ranks for JAX and DDP: {jax_n}", f"运行 JAX 和 DDP 的 rank：{jax_n} 个") + (f" ({why})" if why else ""))

# %%
%ddp_start {jax_n}

# %%
%%ddp
from ddplab.lessons import say
devices = ddplab.jax_distributed()          # jax.distributed across the ranks: every rank, once per process
import jax
from ddplab.lessons.frameworks import train_jax, train_torch, step_alone, collectives_seconds

jax_record = {}
jax_losses, jax_step = train_jax(20, record=jax_record)     # jit over every process's device, the batch on "dp"
jax_result = dict(losses=jax_losses, step=jax_step, first=jax_record["first"], collectives=jax_record["collectives"],
                  alone=step_alone("jax", replica=rank), comm=collectives_seconds("jax"))
print(f"jax.devices() = {devices}, jax.local_devices() = {jax.local_devices()}")
print(say(f"loss {jax_losses[0]:.4f} -> {jax_losses[-1]:.4f}; {jax_step * 1e3:.1f} ms a step "
          f"(the first, which traces the step and compiles it with XLA: {jax_record['first']:.2f} s)",
          f"损失 {jax_losses[0]:.4f} -> {jax_losses[-1]:.4f}；每步 {jax_step * 1e3:.1f} 毫秒"
          f"（第一步要跟踪这一步并用 XLA 编译：{jax_record['first']:.2f} 秒）"))
if rank == 0:
    print(say(f"XLA's all-reduce instructions in the compiled step: {jax_record['collectives']}",
              f"编译后的训练步中 XLA 的 all-reduce 指令：{jax_record['collectives']} 条"))
    for line in jax_record["all_reduces"]:
        print("  ", line[:line.index(" all-reduce")] if " all-reduce" in line else line[:120])

# %% [markdown]
# The operands' shapes are the gradients of the two layers' weights and biases, `f32[32,8]`,
# `f32[32]`, `f32[1,32]`, `f32[1]`, and the loss's partial sum `f32[]`: here XLA combined what would
# be five all-reduces into one (its all-reduce combiner), where DDP packs the gradients into buckets
# (lesson 12) and TensorFlow packs them too (`CommunicationOptions(bytes_per_pack=...)`).
#
# Now DDP, in the same ranks (torch's gloo group is untouched by JAX's): `train_torch` on the same
# weights and data. A second run plays the PyTorch habit carried into TensorFlow's loop: section 3
# measured its gradients as many times DDP's as there are replicas, which with SGD is DDP with the
# learning rate that many times larger, so it runs as DDP with `lr = 0.1 × 4`.

# %% [markdown] lang=zh
# 操作数的形状就是两层的权重和偏置的梯度 `f32[32,8]`、`f32[32]`、`f32[1,32]`、`f32[1]`，以及损失的部分和 `f32[]`：这里 XLA 把本来要做的五次 all-reduce 合成了一次（它的 all-reduce 合并器），就像 DDP 把梯度装进桶里（第 12 课）、TensorFlow 也把梯度打包（`CommunicationOptions(bytes_per_pack=...)`）一样。
#
# 现在在同样的 rank 上运行 DDP（JAX 的 gloo 不会影响 torch 的 gloo 进程组）：`train_torch` 使用同样的权重和数据。第二次运行扮演被带进 TensorFlow 循环里的 PyTorch 习惯：第 3 节测得它的梯度是 DDP 的若干倍（倍数等于副本数），对 SGD 来说，这就等于把 DDP 的学习率乘以同样的倍数，所以它以 `lr = 0.1 × 4` 的 DDP 来运行。

# %%
%%ddp
torch_record = {}
torch_losses, torch_step = train_torch(20, world_size, rank, record=torch_record)     # DDP: lr 0.1, 16 examples a rank
habit_losses, _ = train_torch(20, world_size, rank, lr=0.1 * world_size)            # the habit: lr × replicas
torch_result = dict(losses=torch_losses, step=torch_step, first=torch_record["first"],
                    collectives=torch_record["collectives"], alone=step_alone("torch", replica=rank),
                    comm=collectives_seconds("torch"))
print(say(f"DDP: loss {torch_losses[0]:.4f} -> {torch_losses[-1]:.4f}; {torch_step * 1e3:.1f} ms a step; "
          f"the habit: -> {habit_losses[-1]:.4f}",
          f"DDP：损失 {torch_losses[0]:.4f} -> {torch_losses[-1]:.4f}；每步 {torch_step * 1e3:.1f} 毫秒；"
          f"PyTorch 的习惯：-> {habit_losses[-1]:.4f}"))

# %% [markdown]
# ## 9. The same loss, step by step
#
# Four runs of one algorithm: DDP on 4 ranks, `MultiWorkerMirroredStrategy` on the TensorFlow workers,
# `MirroredStrategy` with 4 replicas in one process, and JAX on 4 ranks. Each reports the global mean
# loss at each step. The cell asserts that they all stay within **1e-5** of DDP's, step by step.
#
# **Why a tolerance, and why this one.** The runs compute the same sums, but not in the same order:
# each framework reduces across the replicas in its own order (gloo's ring in torch, TensorFlow's
# ring collectives, XLA's gloo), and its kernels add up each example's terms in their
# own order too. Float addition is not associative: float32 keeps 24 bits of mantissa, so between 0.5
# and 1 its numbers are 2⁻²⁴ ≈ 6e-8 apart (one *unit in the last place*), and a sum done in another
# order may round to the next one. Those differences then ride on the weights into the next steps.
# The losses here are about 0.5, so 1e-5 allows well over a hundred units, while a real difference
# of method is far larger: the habit's run (the gradient 4 times too large) differs from the first
# update on. The cell prints each run's largest difference, in units of 2⁻²⁴ too, and draws them
# against the tolerance.

# %% [markdown] lang=zh
# ## 9. 每一步都相同的损失
#
# 同一个算法跑了四次：4 个 rank 上的 DDP、TensorFlow worker 上的 `MultiWorkerMirroredStrategy`、一个进程中 4 个副本的 `MirroredStrategy`，以及 4 个 rank 上的 JAX。每次运行都报告每一步的全局平均损失。下面的单元格断言：每一步，它们与 DDP 的损失都相差不到 **1e-5**。
#
# **为什么需要容差，为什么是这个容差。** 这几次运行计算的是同样的和，但顺序不同：每个框架都按自己的顺序在各副本之间做归约（torch 中 gloo 的环、TensorFlow 的环形集合通信、XLA 的 gloo），它们的算子把每个样本的各项加起来时也有自己的顺序。浮点加法不满足结合律：float32 有 24 位尾数，所以在 0.5 和 1 之间，相邻两个 float32 数相差 2⁻²⁴ ≈ 6e-8（即*最后一位的一个单位*），换一种顺序求和，结果可能舍入到相邻的那个数上。这些差别随后又随着权重带到之后的各步中。这里的损失大约是 0.5，所以 1e-5 能容下一百多个这样的单位；而方法上真正的差别要大得多：PyTorch 习惯那次运行（梯度是应有值的 4 倍）从第一次更新起就不同了。单元格打印每次运行的最大差值（也以 2⁻²⁴ 为单位），并把它们和容差画在一起。

# %%
import numpy as np

jax_results = %ddp_gather jax_result
torch_results = %ddp_gather torch_result
habit_losses = %ddp_gather habit_losses
TOLERANCE = 1e-5                  # absolute, on losses of about 0.5: float32 sums in each framework's own order
runs = {"DDP (torch)": torch_results, f"MultiWorkerMirroredStrategy ({tf_n})": tf_results,
        say("MirroredStrategy (1 process, 4)", "MirroredStrategy（1 个进程，4 个）"): [mirrored_result],
        "JAX (jit)": jax_results}
reference = np.array(torch_results[0]["losses"])
gaps = {name: max(float(np.abs(np.array(r["losses"]) - reference).max()) for r in results)
        for name, results in runs.items()}
habit_gap = np.abs(np.array(habit_losses[0]) - reference)
for name, gap in gaps.items():
    print(say(f"{name:36} largest |loss - DDP's| over 20 steps and every rank: {gap:.1e} = {gap / 2**-24:.1f} × 2^-24",
              f"{name:36} 20 步、所有 rank 中最大的 |损失 - DDP 的损失|：{gap:.1e} = {gap / 2**-24:.1f} × 2^-24"))
print(say(f"the habit (gradients × {jax_n}): {habit_gap[1]:.1e} after one step, {habit_gap.max():.1e} at most",
          f"PyTorch 的习惯（梯度 × {jax_n}）：一步之后差 {habit_gap[1]:.1e}，最多差 {habit_gap.max():.1e}"))
assert all(gap < TOLERANCE for gap in gaps.values()), gaps
assert habit_gap[1] > 100 * TOLERANCE

steps = list(range(20))
floor = 1e-9                      # (an exact agreement is drawn at 1e-9: a log scale has no 0)
draw.lines(None, panels=[
    dict(series={**{name: (steps, results[0]["losses"]) for name, results in runs.items()},
                 say(f"the habit (lr × {jax_n})", f"PyTorch 的习惯（lr × {jax_n}）"): (steps, habit_losses[0])},
         xlabel=say("step", "步"), ylabel=say("global mean loss", "全局平均损失"),
         title=say("the same loss under three frameworks", "三个框架下相同的损失")),
    dict(series={**{name: (steps, np.maximum(np.abs(np.array(results[0]["losses"]) - reference), floor))
                    for name, results in runs.items()},
                 say("the habit", "PyTorch 的习惯"): (steps, np.maximum(habit_gap, floor)),
                 say("tolerance 1e-5", "容差 1e-5"): (steps, [TOLERANCE] * 20)},
         xlabel=say("step", "步"), ylabel=say("|loss - DDP's loss|", "|损失 - DDP 的损失|"), logy=True,
         title=say("distance from DDP's loss", "与 DDP 损失的距离"))])

# %% [markdown]
# On the left, the four curves lie on one another: only the habit's leaves them. On the right, DDP's
# distance from itself is zero (drawn at the bottom), every other framework's stays at float32's
# rounding (the cell printed it in units of 2⁻²⁴), orders of magnitude under the tolerance, and the
# habit's is far above it from the first update on.
#
# **A common claim:** "the same model trained in two frameworks never gives the same numbers, so
# comparing them is pointless". **What actually happens:** with the same initial weights, the same
# data in the same split and the same update rule, the losses agree to float32 rounding, step by step,
# as measured above. Where two frameworks' runs really differ, look first for a difference of method:
# the weight initialisation (Keras's Glorot uniform against torch's Kaiming uniform, if
# the weights are not copied), the loss scaling (section 3), the data order, the optimizer's defaults
# (Adam's epsilon is 1e-7 in Keras and 1e-8 in torch).

# %% [markdown] lang=zh
# 左图中，四条曲线互相重叠：只有 PyTorch 习惯那条偏离了它们。右图中，DDP 与自己的距离为零（画在最底部），其他每个框架与 DDP 的距离都停留在 float32 的舍入误差上（单元格以 2⁻²⁴ 为单位打印了它），比容差小几个数量级；而 PyTorch 习惯的距离从第一次更新起就远在容差之上。
#
# **一个常见的说法：**“同一个模型在两个框架里训练，数字永远对不上，所以比较它们毫无意义”。**实际情况是：** 只要初始权重相同、数据相同且划分方式相同、更新规则相同，损失每一步都在 float32 舍入误差之内一致，正如上面测得的那样。两个框架的运行结果真的不同时，先找方法上的差别：权重初始化（如果不复制权重，Keras 用 Glorot 均匀分布，torch 用 Kaiming 均匀分布）、损失的缩放（第 3 节）、数据的顺序、优化器的默认值（Adam 的 epsilon 在 Keras 中是 1e-7，在 torch 中是 1e-8）。

# %% [markdown]
# ## 10. Time per step, taken apart
#
# Each run timed its steps. The first step is set apart: it pays once for what makes the later ones
# fast (TensorFlow traces the `tf.function` into a graph, `jax.jit` traces the step and XLA compiles
# it, DDP builds its buckets). The time per step is the median of the 19 others. Beside it, each
# framework measured two more things on the same ranks: **the same step alone** (`step_alone`: the
# same SGD step on one replica's part of the batch, in one process, with no strategy, no sharding and
# no all-reduce), and **the step's collectives alone** (`collectives_seconds`: the collectives a step
# makes, done as the framework does them in the training, on arrays of the same shapes, with nothing
# else around them). And each counted its collectives per step: DDP's bucket all-reduces (counted by
# a communication hook) plus the loss's, the collective ops in TensorFlow's traced step, the
# all-reduce instructions in XLA's compiled one. The cell puts them side by side and says, from the
# numbers, where a step's time goes.

# %% [markdown] lang=zh
# ## 10. 把每一步的时间拆开
#
# 每次运行都给各步计了时。第一步单独列出：它一次性地付出让后面各步变快的代价（TensorFlow 把 `tf.function` 跟踪成图，`jax.jit` 跟踪这一步并由 XLA 编译，DDP 建立它的桶）。每步时间取其余 19 步的中位数。此外，每个框架还在同样的 rank 上测了两样东西：**单独运行同样的一步**（`step_alone`：在一个进程中，对一个副本那部分批次做同样的 SGD 一步，没有 strategy、没有分片、没有 all-reduce），以及**单独运行这一步的集合通信**（`collectives_seconds`：按框架在训练中的做法、用形状相同的数组做一步中的那些集合通信，周围不做别的事）。每个框架还数了每一步的集合通信次数：DDP 的桶 all-reduce（由通信钩子计数）加上损失的那一次，TensorFlow 跟踪出的训练步中的集合通信 op，XLA 编译出的训练步中的 all-reduce 指令。下面的单元格把它们并排列出，并根据这些数字说明一步的时间花在了哪里。

# %%
import pandas as pd

def summary(results, alone=None):
    """The slowest rank's numbers (a synchronous step is as slow as its slowest rank), in ms."""
    def slowest(key):
        return max(r[key] for r in results) * 1e3
    return dict(step=slowest("step"), first=slowest("first"), alone=slowest("alone") if alone is None else alone,
                comm=slowest("comm"), collectives=results[0]["collectives"])

timing = {"DDP (torch)": summary(torch_results), f"MWMS ({tf_n})": summary(tf_results),
          "Mirrored (1 × 4)": summary([mirrored_result], alone=summary(tf_results)["alone"]),
          "JAX (jit)": summary(jax_results)}
display(pd.DataFrame({say("a step, ms", "每步，毫秒"): [round(t["step"], 1) for t in timing.values()],
                      say("the first step, s", "第一步，秒"): [round(t["first"] / 1e3, 2) for t in timing.values()],
                      say("the step alone, ms", "单独运行这一步，毫秒"): [round(t["alone"], 1) for t in timing.values()],
                      say("collectives per step", "每步的集合通信次数"): [t["collectives"] for t in timing.values()],
                      say("they alone, ms", "单独运行它们，毫秒"): [round(t["comm"], 1) for t in timing.values()]},
                     index=list(timing)))
display(draw.bars(None, panels=[
    dict(values={n: t["step"] for n, t in timing.items()}, ylabel=say("ms", "毫秒"),
         title=say("a step (median)", "一步（中位数）")),
    dict(values={n: t["alone"] for n, t in timing.items()}, ylabel=say("ms", "毫秒"),
         title=say("the same step alone", "单独运行同样的一步")),
    dict(values={n: t["comm"] for n, t in timing.items()}, ylabel=say("ms", "毫秒"),
         title=say("its collectives alone", "单独运行它的集合通信"))], fmt="{:.1f}"))
for name, t in timing.items():
    rest = t["step"] - t["alone"] - t["comm"]
    noise = say(" (timed apart, the parts can add up to more than the step)", "（分开计时，各部分加起来可能超过一步）") \
        if rest < 1 else ""
    print(say(f"{name}: {t['step']:.1f} ms a step: the step alone {t['alone']:.1f} ms, its {t['collectives']:.0f} "
              f"collective(s) alone {t['comm']:.1f} ms, the rest {rest:.1f} ms{noise}; the first step {t['first'] / 1e3:.2f} s",
              f"{name}：每步 {t['step']:.1f} 毫秒：单独运行这一步 {t['alone']:.1f} 毫秒，单独运行它的 {t['collectives']:.0f} 次"
              f"集合通信 {t['comm']:.1f} 毫秒，其余 {rest:.1f} 毫秒{noise}；第一步 {t['first'] / 1e3:.2f} 秒"))
across = {name: t for name, t in timing.items() if name != "Mirrored (1 × 4)"}      # the runs of several processes
print(say(f"across processes: the step alone {min(t['alone'] for t in across.values()):.1f} to "
          f"{max(t['alone'] for t in across.values()):.1f} ms, its collectives alone "
          f"{min(t['comm'] for t in across.values()):.1f} to {max(t['comm'] for t in across.values()):.1f} ms; "
          f"in one process (MirroredStrategy), its collective alone {timing['Mirrored (1 × 4)']['comm']:.1f} ms",
          f"跨进程时：单独运行这一步 {min(t['alone'] for t in across.values()):.1f} 到 "
          f"{max(t['alone'] for t in across.values()):.1f} 毫秒，单独运行它的集合通信 "
          f"{min(t['comm'] for t in across.values()):.1f} 到 {max(t['comm'] for t in across.values()):.1f} 毫秒；"
          f"在一个进程中（MirroredStrategy），单独运行它的集合通信 {timing['Mirrored (1 × 4)']['comm']:.1f} 毫秒"))

# %% [markdown]
# How to read it. The model is tiny (321 parameters, 16 examples per replica), so the step alone, the
# arithmetic, is a few milliseconds at most in every framework. What fills a distributed step here is
# coordination: each collective is a round trip among processes that share this machine's cores, and
# its cost is set by the framework's runtime, not by the bytes (321 floats are 1.3 KB, the same in all
# three). The frameworks make different numbers of them: DDP one per bucket plus the loss's all-reduce
# for the log, TensorFlow its packed gradients plus `strategy.reduce`, XLA one combined instruction
# (whose operands are five arrays rather than one flat buffer). The rest is what neither column holds:
# dispatching the step (a `tf.function` call, a call of XLA's program with arrays on 4 processes'
# devices), making and feeding the batch, waiting for the slowest process while the others compute on
# the shared cores. `MirroredStrategy`'s one process has no process to wait for, and its all-reduce
# never leaves the process. The first step's seconds are the price of the graph (TensorFlow) and of
# the compilation (JAX), paid once. (The parts are timed apart, at other moments, on a machine that
# may be busy with other work: they add up to the step only roughly, sometimes to a little more.)
#
# These are this machine's numbers for this toy model. They say nothing about how the frameworks
# compare on a real model, whose step is mostly compute and bandwidth (and, on GPUs, NCCL's
# collectives, which all three can use).

# %% [markdown] lang=zh
# 怎么读这些数字。模型非常小（321 个参数，每个副本 16 个样本），所以在每个框架中，单独运行这一步（也就是纯计算）最多只要几毫秒。在这里填满一个分布式训练步的是协调：每次集合通信都是在共享这台机器 CPU 核心的几个进程之间走一个来回，它的代价取决于框架的运行时，而不是字节数（321 个浮点数是 1.3 KB，三个框架都一样）。各框架的集合通信次数不同：DDP 每个桶一次，再加上为了记录损失的那次 all-reduce；TensorFlow 是打包后的梯度加上 `strategy.reduce`；XLA 是合并后的一条指令（它的操作数是五个数组，而不是一块扁平的缓冲区）。“其余”是两栏都不包含的部分：分派这一步（调用一次 `tf.function`，或者调用一次输入数组分布在 4 个进程设备上的 XLA 程序）、生成并送入批次、在其他进程占用共享的 CPU 核心计算时等待最慢的那个进程。`MirroredStrategy` 只有一个进程，没有别的进程要等，它的 all-reduce 也从不离开这个进程。第一步的那几秒是计算图（TensorFlow）和编译（JAX）的代价，只付一次。（各部分是分开、在不同时刻计时的，而这台机器可能还在忙别的事：它们加起来只是大致等于一步的时间，有时还会稍多一些。）
#
# 这些是这台机器上这个玩具模型的数字。它们并不能说明三个框架在真实模型上孰快孰慢：真实模型的一步主要花在计算和带宽上（在 GPU 上还有 NCCL 的集合通信，三个框架都可以用它）。

# %% [markdown]
# ## 11. Checkpoints and restarts
#
# | | PyTorch (and ddplab) | TensorFlow 2 |
# |---|---|---|
# | save | `ddplab.checkpoint.save(path, model, opt, step)`: rank 0 writes, all ranks wait; in plain PyTorch: `if rank == 0: torch.save(...)`, then `dist.barrier()` | `ckpt = tf.train.Checkpoint(model=model, optimizer=opt)`, `manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=3)`, `manager.save()`. With several workers **all** of them must call it (saving may all-reduce); the chief's copy is the real one, the others write to a temporary directory and delete it (the pattern of TensorFlow's multi-worker tutorial). |
# | load | `ddplab.checkpoint.load(path, model, opt)`: rank 0 reads and broadcasts | `ckpt.restore(manager.latest_checkpoint)` on every worker |
# | with the high-level loop | (write the loop yourself, as in lesson 11) | `model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)])`: backs up at the end of each epoch (or every `save_freq` batches) and, when `fit` starts again after a crash, continues from the backup |
# | after a crash | `torchrun --max-restarts=3` restarts all workers; your script loads the newest checkpoint (lesson 11; ddplab's `%ddp_restart` restarts only the lost rank) | the cluster manager (e.g. Kubernetes) restarts the workers with the same `TF_CONFIG`; `BackupAndRestore` or your own `restore` continues |

# %% [markdown] lang=zh
# ## 11. 检查点与重启
#
# | | PyTorch（以及 ddplab） | TensorFlow 2 |
# |---|---|---|
# | 保存 | `ddplab.checkpoint.save(path, model, opt, step)`：rank 0 写入，所有 rank 等待；在纯 PyTorch 中：`if rank == 0: torch.save(...)`，然后 `dist.barrier()` | `ckpt = tf.train.Checkpoint(model=model, optimizer=opt)`，`manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=3)`，`manager.save()`。有多个 worker 时，**所有** worker 都必须调用它（保存时可能要做 all-reduce）；chief 保存的才是正式的那一份，其他 worker 写到临时目录后再删掉（TensorFlow 多 worker 教程中的做法）。 |
# | 加载 | `ddplab.checkpoint.load(path, model, opt)`：rank 0 读取并广播 | 在每个 worker 上执行 `ckpt.restore(manager.latest_checkpoint)` |
# | 使用高层训练循环时 | （自己写循环，如[第 11 课](11_fault_tolerance.ipynb)） | `model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)])`：在每个 epoch 结束时（或每 `save_freq` 个批次）做备份；崩溃后再次启动 `fit` 时，从备份处继续 |
# | 崩溃之后 | `torchrun --max-restarts=3` 重启所有 worker；你的脚本加载最新的检查点（[第 11 课](11_fault_tolerance.ipynb)；ddplab 的 `%ddp_restart` 只重启丢失的那个 rank） | 集群管理器（例如 Kubernetes）用相同的 `TF_CONFIG` 重启各个 worker；由 `BackupAndRestore` 或你自己的 `restore` 接着训练 |

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right, and why,
# judged against this run's numbers where the question depends on them.
#
# **16.1** Two machines with 2 GPUs each. In PyTorch, torchrun starts one process per GPU; in
# TensorFlow, `MultiWorkerMirroredStrategy` runs one worker per machine, with a replica per GPU. How
# many processes does torchrun start in all, how many workers does `TF_CONFIG`'s cluster list, and what
# is `strategy.num_replicas_in_sync`? Answer with three whole numbers, like `(1, 2, 3)`.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你答案对不对，以及为什么；题目与运行结果有关时，按这次运行的数字来判断。
#
# **16.1** 两台机器，各有 2 个 GPU。在 PyTorch 中，torchrun 为每个 GPU 启动一个进程；在 TensorFlow 中，`MultiWorkerMirroredStrategy` 每台机器运行一个 worker，每个 GPU 一个副本。torchrun 一共启动几个进程？`TF_CONFIG` 的集群列表中有几个 worker？`strategy.num_replicas_in_sync` 是多少？请写三个整数，例如 `(1, 2, 3)`。

# %%
answer = ...    # (processes torchrun starts, workers in TF_CONFIG, strategy.num_replicas_in_sync)
check("16.1", answer)

# %% [markdown]
# **16.2** In section 3's gradient cell, give the last replica only 10 examples instead of its full
# share, keep `global_batch_size=64` as `tf.nn.compute_average_loss` was told, and compare the
# gradients with the gradient of the mean loss over all the examples there are. Which gives that true
# mean's gradient? Answer with a letter:
#
# - (a) neither of them
# - (b) DDP's convention: the mean over each rank's own examples, then the average over ranks
# - (c) TensorFlow's convention: the sum divided by the global batch of 64, then summed over replicas

# %% [markdown] lang=zh
# **16.2** 在第 3 节计算梯度的单元格里，让最后一个副本只有 10 个样本，而不是它应得的那一份，`global_batch_size` 仍然是告诉 `tf.nn.compute_average_loss` 的 64，再把得到的梯度与实际全部样本上的平均损失的梯度相比较。哪一种给出的是这个真正平均值的梯度？请写一个字母：
#
# - (a) 两者都不是
# - (b) DDP 的约定：先对每个 rank 自己的样本取平均，再在各 rank 之间求平均
# - (c) TensorFlow 的约定：总和除以全局批大小 64，再在各副本之间求和

# %%
answer = ...    # a, b or c
check("16.2", answer)

# %% [markdown]
# **16.3** In section 4 each replica held a mean loss (0.5, 1.5, ... by replica, printed there) over
# 16 examples. Suppose the last replica's batch had only 10 examples, with the same mean loss.
# `strategy.reduce(MEAN, ...)` of the means gives their plain average. What is the true mean loss per
# example over all the examples? (One `all_reduce` of `(loss sum, sample count)` computes it: divide
# the two sums.) Answer with a number.

# %% [markdown] lang=zh
# **16.3** 在第 4 节中，每个副本持有一个平均损失（按副本依次为 0.5、1.5……，见那里的输出），各有 16 个样本。假设最后一个副本的批次只有 10 个样本，平均损失不变。对这些平均值做 `strategy.reduce(MEAN, ...)`，得到的是它们的简单平均。所有样本上每个样本的真正平均损失是多少？（对 `(损失之和, 样本数)` 做一次 `all_reduce` 就能算出它：用两个和相除。）请写一个数。

# %%
answer = ...    # the mean loss per example over all the examples
check("16.3", answer, losses=[v[0] for v in values], counts=[16] * (len(values) - 1) + [10])

# %% [markdown]
# **16.4** In section 5, the accumulation with only the backward inside `no_sync` made one
# all-reduce per micro-batch. Written that way, with k = 8 micro-batches per update and a model whose
# gradients fill 3 buckets, how many all-reduce calls does DDP make per update? Answer with a whole
# number.

# %% [markdown] lang=zh
# **16.4** 在第 5 节中，只把反向放在 `no_sync` 里的梯度累积，每个微批次都做了一次 all-reduce。如果照这样写，每次更新用 k = 8 个微批次，而模型的梯度装满 3 个桶，DDP 每次更新要调用几次 all-reduce？请写一个整数。

# %%
answer = ...    # all-reduce calls per update: k = 8, 3 buckets, forward outside no_sync
check("16.4", answer, right_calls=right_calls, wrong_calls=wrong_calls)

# %% [markdown]
# **16.5** A learner ports the DDP loop to TensorFlow's custom loop with this run's TensorFlow workers
# and keeps the PyTorch habit: `loss = tf.reduce_mean(per_example)` over the replica's own batch,
# while `apply_gradients` still sums the gradients across the replicas. Section 3 measured what that
# does to the gradients. Rather than fix the loss, they want to change only SGD's learning rate so
# that every update equals DDP's with `lr = 0.1`. What learning rate? Answer with a number.

# %% [markdown] lang=zh
# **16.5** 一位学习者用这次运行中的 TensorFlow worker，把 DDP 循环移植到 TensorFlow 的自定义循环，却保留了 PyTorch 的习惯：对副本自己的批次取 `loss = tf.reduce_mean(per_example)`，而 `apply_gradients` 仍然在各副本之间对梯度求和。第 3 节测出了这样做对梯度的影响。他们不想改损失，只想改 SGD 的学习率，使每次更新都等于 `lr = 0.1` 的 DDP 的更新。学习率应该是多少？请写一个数。

# %%
answer = ...    # the learning rate that makes the habit's update DDP's with lr = 0.1
check("16.5", answer, lr=0.1, ratio=habit_ratio[0], replicas=tf_n)

# %% [markdown]
# **16.6** On a session with memory for only 2 TensorFlow workers, `tf_workers` gives 2, and the same
# training must still make DDP's updates with 4 ranks of 16 examples (a global batch of 64). With
# `dataset.batch(...)` and `tf.nn.compute_average_loss(..., global_batch_size=...)`, how many examples
# does each of the 2 replicas get per step, and what `global_batch_size` must the loss be given?
# Answer with two whole numbers, like `(8, 16)`.

# %% [markdown] lang=zh
# **16.6** 在一个只放得下 2 个 TensorFlow worker 的会话中，`tf_workers` 给出 2，而同样的训练仍然要做出与 4 个 rank、每个 16 个样本（全局批次 64）的 DDP 相同的更新。使用 `dataset.batch(...)` 和 `tf.nn.compute_average_loss(..., global_batch_size=...)` 时，2 个副本中每个每步拿到多少个样本？损失的 `global_batch_size` 应该是多少？请写两个整数，例如 `(8, 16)`。

# %%
answer = ...    # (examples per replica per step, global_batch_size for compute_average_loss)
check("16.6", answer)

# %%
%ddp_stop
