# %% [markdown]
# # ddplab lessons · 课程目录
#
# Distributed data-parallel training with PyTorch, on CPU, one idea per notebook. Every lesson
# starts a real `torch.distributed` gloo group of 4 ranks on this machine with `%ddp_start`, runs
# code on every rank with `%%ddp`, and shows what happens as a picture, while the live dashboard
# follows each rank's state, loss and throughput. Each runs top to bottom in under 2 minutes on a
# 2-core machine, and ends with exercises.
#
# 在 CPU 上学习 PyTorch 分布式数据并行训练：每个 notebook 讲一个概念。每一课都用 `%ddp_start`
# 在本机启动一个真实的 4 rank gloo 进程组，用 `%%ddp` 在每个 rank 上运行代码，并把过程画出来；
# 实时仪表盘显示每个 rank 的状态、损失和吞吐量。每课在双核机器上两分钟内可以从头运行到尾，最后附有练习。
#
# | # | Lesson · 课程 | What you will see |
# |---|---|---|
# | 0 | [Quick start · 快速入门](00_quickstart.ipynb) | a gloo group of 4, `all_reduce`, a short DDP run on the live dashboard |
# | 1 | [Process groups and collectives · 进程组与集合通信](01_collectives.ipynb) | every collective drawn rank by rank, before and after; a barrier's timeline |
# | 2 | [Data parallelism by hand vs DDP · 手写数据并行与 DDP](02_data_parallel.ipynb) | parameters staying identical across ranks step after step, and what breaks that |
# | 3 | [DistributedSampler and set_epoch · 分布式采样器](03_sampler.ipynb) | which rank gets which sample, epoch by epoch; padding; the global batch |
# | 4 | [Gradient accumulation with no_sync · 梯度累积](04_no_sync.ipynb) | the same update with a quarter of the all-reduces, counted and timed |
# | 5 | [Mixed precision and DataLoader workers · 混合精度与数据加载](05_mixed_precision.ipynb) | bf16 autocast vs float32 speed and loss; loading with and without workers |
# | 6 | [Model parallelism · 模型并行](06_model_parallel.ipynb) | one model split over 4 ranks; a micro-batch pipeline's timeline and its bubble |
# | 7 | [Pruning, quantization, compressed gradients · 剪枝、量化与梯度压缩](07_compression.ipynb) | accuracy vs sparsity, model size, bytes sent with fp16/bf16 hooks |
# | 8 | [Synchronous vs less-synchronous updates · 同步与异步更新](08_local_sgd.ipynb) | loss against steps and against bytes communicated: DDP vs local SGD |
# | 9 | [Stragglers and uneven inputs · 慢节点与不均匀数据](09_stragglers.ipynb) | a slowed rank holding everyone back, live; uneven data finished with Join |
# | 10 | [Fault tolerance with checkpoints · 容错与检查点](10_fault_tolerance.ipynb) | a rank killed, seen lost, restarted, and training resumed to the same result |
# | 11 | [Communication cost and scaling · 通信开销与扩展性](11_communication.ipynb) | all_reduce time by size and ranks; bucket size; compute vs communication |
# | 12 | [The same ideas in TensorFlow · TensorFlow 中的对应概念](12_other_frameworks.ipynb) | MirroredStrategy and MultiWorkerMirroredStrategy beside what you did |
# | 13 | [From the notebook to a cluster · 从 notebook 到集群](13_cluster.ipynb) | 4 hosts in one group, a host lost, the notebook run again by torchrun |
# | 14 | [Debugging distributed code · 调试分布式代码](14_debugging.ipynb) | where each rank is, a collective mismatch named, pdb on the failed rank, `%ddp_check`, hints |
#
# **Tips.** `%ddp_start 4 --lang zh` labels the dashboard and the lesson pictures in Chinese. If a
# lesson leaves a pool running, `%ddp_stop` ends it; each lesson stops its own pool at the end.
# The lessons only need this package: `pip install ddplab` after the CPU build of torch (see README).
