# %% [markdown]
# # ddplab lessons · 课程目录
#
# Distributed data-parallel training with PyTorch, on CPU, one idea per notebook. Every lesson
# starts a real `torch.distributed` gloo group of 4 ranks (2 in lesson 5) on this machine with
# `%ddp_start`, runs code on every rank with `%%ddp`, and shows what happens as a picture, while
# the live dashboard follows each rank's state, loss and throughput. Each runs top to bottom in under 2 minutes on a
# 2-core machine, and ends with exercises.
#
# 在 CPU 上学习 PyTorch 分布式数据并行训练：每个 notebook 讲一个概念。每一课都用 `%ddp_start` 在本机启动一个真实的 4 rank gloo 进程组（第 5 课为 2 个 rank），用 `%%ddp` 在每个 rank 上运行代码，并把过程画出来；实时仪表盘显示每个 rank 的状态、损失和吞吐量。每课在双核机器上两分钟内可以从头运行到尾，最后附有练习。每一课都有中文版：点击下表中的中文课程名。
#
# Each lesson's English title opens it in English, its Chinese title opens its Chinese edition (in
# `zh/`). **Needs** says what a lesson uses beyond ddplab and torch, how many ranks it starts, and
# about how long it ran top to bottom on a 2-core machine (kernel start included).
#
# | # | Lesson · 课程 | What you will see | Needs |
# |---|---|---|---|
# | 0 | [Quick start](00_quickstart.ipynb) · [快速入门](zh/00_quickstart.ipynb) | a gloo group of 4, `all_reduce`, a short DDP run on the live dashboard | nothing more · 4 ranks · ~5 s |
# | 1 | [Process groups and collectives](01_collectives.ipynb) · [进程组与集合通信](zh/01_collectives.ipynb) | every collective drawn rank by rank, before and after; a barrier's timeline | nothing more · 4 ranks · ~18 s |
# | 2 | [Data parallelism by hand vs DDP](02_data_parallel.ipynb) · [手写数据并行与 DDP](zh/02_data_parallel.ipynb) | parameters staying identical across ranks step after step, and what breaks that | nothing more · 4 ranks · ~8 s |
# | 3 | [DistributedSampler and set_epoch](03_sampler.ipynb) · [分布式采样器](zh/03_sampler.ipynb) | which rank gets which sample, epoch by epoch; padding; the global batch | nothing more · 4 ranks · ~4 s |
# | 4 | [Gradient accumulation with no_sync](04_no_sync.ipynb) · [梯度累积](zh/04_no_sync.ipynb) | the same update with a quarter of the all-reduces, counted and timed | nothing more · 4 ranks · ~6 s |
# | 5 | [Mixed precision and DataLoader workers](05_mixed_precision.ipynb) · [混合精度与数据加载](zh/05_mixed_precision.ipynb) | bf16 autocast vs float32 speed and loss; loading with and without workers | nothing more · 2 ranks (it measures speed on 2 cores) · ~11 s |
# | 6 | [Model parallelism](06_model_parallel.ipynb) · [模型并行](zh/06_model_parallel.ipynb) | one model split over 4 ranks; a micro-batch pipeline's timeline and its bubble | nothing more · 4 ranks · ~21 s |
# | 7 | [Pruning, quantization, compressed gradients](07_compression.ipynb) · [剪枝、量化与梯度压缩](zh/07_compression.ipynb) | accuracy vs sparsity, model size, bytes sent with fp16/bf16 hooks | nothing more · 4 ranks · ~15 s |
# | 8 | [Synchronous vs less-synchronous updates](08_local_sgd.ipynb) · [同步与异步更新](zh/08_local_sgd.ipynb) | loss against steps and against bytes communicated: DDP vs local SGD | nothing more · 4 ranks · ~22 s |
# | 9 | [Stragglers and uneven inputs](09_stragglers.ipynb) · [慢节点与不均匀数据](zh/09_stragglers.ipynb) | a slowed rank holding everyone back, live; uneven data finished with Join | nothing more · 4 ranks · ~14 s |
# | 10 | [Fault tolerance with checkpoints](10_fault_tolerance.ipynb) · [容错与检查点](zh/10_fault_tolerance.ipynb) | a rank killed, seen lost, restarted, and training resumed to the same result | nothing more · 4 ranks · ~7 s |
# | 11 | [Communication cost and scaling](11_communication.ipynb) · [通信开销与扩展性](zh/11_communication.ipynb) | all_reduce time by size and ranks; bucket size; compute vs communication | a C++ compiler for the `torch.compile` part (without one, that part says so and the rest runs) · 4 ranks · ~26 s |
# | 12 | [The same ideas in TensorFlow](12_other_frameworks.ipynb) · [TensorFlow 中的对应概念](zh/12_other_frameworks.ipynb) | MirroredStrategy and MultiWorkerMirroredStrategy beside what you did | nothing more: TensorFlow is not needed (its code is shown, not run) · 4 ranks · ~4 s |
# | 13 | [From the notebook to a cluster](13_cluster.ipynb) · [从 notebook 到集群](zh/13_cluster.ipynb) | 4 hosts in one group, a host lost, the notebook run again by torchrun | root (and the `ip` and `unshare` commands) to make 4 hosts as network namespaces, else it falls back to 4 local engines; `torchrun` (comes with torch) · 4, then 3, then 4 ranks · ~41 s |
# | 14 | [Debugging distributed code](14_debugging.ipynb) · [调试分布式代码](zh/14_debugging.ipynb) | where each rank is, a collective mismatch named, pdb on the failed rank, `%ddp_check`, hints | nothing more · 4 ranks · ~9 s |
#
# **Tips.** The Chinese editions are the same notebooks with their text in Chinese; their dashboard
# and pictures are labelled in Chinese by themselves (`%ddp_start 4 --lang zh` does the same in a
# notebook of your own). If a lesson leaves a pool running, `%ddp_stop` ends it; each lesson stops
# its own pool at the end. The lessons only need this package: `pip install ddplab` after the CPU
# build of torch (see the [README](../README.md)).

# %% [markdown] lang=zh
# # ddplab 课程目录
#
# **简而言之**：在 CPU 上学习 PyTorch 的分布式数据并行训练，每个 notebook 讲一个概念。每一课都用 `%ddp_start` 在本机启动一个由 4 个进程（rank）组成的真实 `torch.distributed` gloo 进程组（第 5 课为 2 个），用 `%%ddp` 在每个 rank 上运行代码，并把发生的事情画成图，同时实时仪表盘跟踪每个 rank 的状态、损失和吞吐量。每一课在双核机器上都能在 2 分钟内从头运行到尾，最后附有练习。
#
# 下表中的课程名打开该课的中文版。**需要**一栏说明这一课在 ddplab 和 torch 之外还用到什么、启动几个 rank，以及它在双核机器上从头运行到尾大约用了多长时间（包括内核启动）。
#
# | # | 课程 | 你将看到 | 需要 |
# |---|---|---|---|
# | 0 | [快速入门](00_quickstart.ipynb) | 一个 4 rank 的 gloo 进程组、`all_reduce`，以及在实时仪表盘上观看的一次简短 DDP 训练 | 无其他要求 · 4 个 rank · 约 5 秒 |
# | 1 | [进程组与集合通信](01_collectives.ipynb) | 逐个 rank 画出每个集合通信调用前后的数据；一次 barrier 的时间线 | 无其他要求 · 4 个 rank · 约 18 秒 |
# | 2 | [手写数据并行与 DDP](02_data_parallel.ipynb) | 各 rank 的参数一步接一步保持一致，以及哪些做法会破坏这种一致 | 无其他要求 · 4 个 rank · 约 8 秒 |
# | 3 | [DistributedSampler 与 set_epoch](03_sampler.ipynb) | 每个 epoch 中哪个 rank 拿到哪个样本；填充；全局批次 | 无其他要求 · 4 个 rank · 约 4 秒 |
# | 4 | [用 no_sync 做梯度累积](04_no_sync.ipynb) | 只用四分之一的 all-reduce 得到同样的更新，有计数也有计时 | 无其他要求 · 4 个 rank · 约 6 秒 |
# | 5 | [混合精度与 DataLoader 工作进程](05_mixed_precision.ipynb) | bf16 autocast 与 float32 的速度和损失对比；使用与不使用工作进程加载数据 | 无其他要求 · 2 个 rank（这一课在 2 个核心上测速度）· 约 11 秒 |
# | 6 | [模型并行](06_model_parallel.ipynb) | 一个模型拆分到 4 个 rank 上；微批次流水线的时间线和其中的气泡 | 无其他要求 · 4 个 rank · 约 21 秒 |
# | 7 | [剪枝、量化与梯度压缩](07_compression.ipynb) | 准确率随稀疏度的变化、模型大小、用 fp16/bf16 通信钩子发送的字节数 | 无其他要求 · 4 个 rank · 约 15 秒 |
# | 8 | [同步与异步更新](08_local_sgd.ipynb) | 损失随步数和随通信字节数的变化：DDP 与本地 SGD 对比 | 无其他要求 · 4 个 rank · 约 22 秒 |
# | 9 | [慢节点与不均匀数据](09_stragglers.ipynb) | 实时看到一个被拖慢的 rank 拖住所有 rank；用 Join 处理不均匀的数据 | 无其他要求 · 4 个 rank · 约 14 秒 |
# | 10 | [容错与检查点](10_fault_tolerance.ipynb) | 一个 rank 被杀掉、被发现丢失、被重启，训练恢复后得到相同的结果 | 无其他要求 · 4 个 rank · 约 7 秒 |
# | 11 | [通信开销与扩展性](11_communication.ipynb) | all_reduce 的耗时随数据大小和 rank 数的变化；桶大小；计算与通信 | `torch.compile` 一节需要 C++ 编译器（没有时这一节会说明，其余部分照常运行）· 4 个 rank · 约 26 秒 |
# | 12 | [TensorFlow 中的对应概念](12_other_frameworks.ipynb) | 把 MirroredStrategy 和 MultiWorkerMirroredStrategy 与你做过的内容对照 | 无其他要求：不需要安装 TensorFlow（它的代码只展示、不运行）· 4 个 rank · 约 4 秒 |
# | 13 | [从 notebook 到集群](13_cluster.ipynb) | 4 台主机组成一个进程组、一台主机失联、用 torchrun 再次运行这个 notebook | 需要 root 权限（以及 `ip` 和 `unshare` 命令）把 4 台主机做成网络命名空间，否则退回为 4 个本地引擎；`torchrun`（随 torch 提供）· 先 4 个、再 3 个、最后 4 个 rank · 约 41 秒 |
# | 14 | [调试分布式代码](14_debugging.ipynb) | 每个 rank 停在哪里、被点名的集合通信不匹配、在失败的 rank 上用 pdb 调试、`%ddp_check`、常见错误提示 | 无其他要求 · 4 个 rank · 约 9 秒 |
#
# **提示。** 中文版和英文版是同样的 notebook，只是文字换成了中文；它们的仪表盘和图会自动使用中文（在你自己的 notebook 中，`%ddp_start 4 --lang zh` 也能做到）。如果某一课留下了一个正在运行的进程池，用 `%ddp_stop` 结束它；每一课结束时都会停止自己的进程池。这些课程只需要这个包：先安装 CPU 版的 torch，再 `pip install ddplab`（见 [README](../../README.md)）。
