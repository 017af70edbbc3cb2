# %% [markdown]
# # ddplab lessons
#
# Distributed data-parallel training with PyTorch, on CPU, one idea per notebook. Every lesson starts a
# real `torch.distributed` gloo group on this machine with `%ddp_start`, runs code on every rank with
# `%%ddp`, and shows what happens as a picture, while the live dashboard follows each rank's state,
# loss, throughput and timeline. Every number a lesson prints is measured on your machine as it runs,
# and its claims are checked on that run. Each lesson ends with exercises you can check: write your
# answer, run the cell, and `check` says whether it is right and why.
#
# **Study time** is what a lesson takes a learner: reading, running the cells, looking at the
# pictures, and the exercises. The cells themselves run in well under two minutes per lesson.
# **Needs** says what a lesson uses beyond ddplab and torch, and how many ranks it starts.
#
# <!-- lessons -->
#
# **Where to start.** Lessons 1 to 4 are the core of data parallelism: collectives, DDP, the sampler
# and gradient accumulation. After them the lessons can be taken in any order; lesson 13 (a ring
# all-reduce by hand) and lesson 14 (scaling) are best after lesson 12 (communication cost). Lessons
# 19 to 21 go beyond data parallelism: sharded training with FSDP2 (after lesson 15, memory per
# rank), tensor parallelism and 2D meshes (after lessons 6 and 12, and 19 for its 2D part), and
# activation checkpointing with sharded checkpoints (after lessons 11 and 19).
#
# **What you need.** The lessons need torch <!-- torch --> or newer (what ddplab itself requires)
# and this package, installed from a clone of its repository: `./dev demo` sets up everything in
# `.venv`; or install the CPU build of torch, then `pip install .` (see the
# [README](../README.md)). Each lesson stops its own pool at the end; if one is left running,
# `%ddp_stop` ends it.
#
# **In Chinese.** Every lesson has a whole Chinese edition (the Chinese title in the table opens it):
# the same code, its text in Chinese, and its dashboard and pictures labelled in Chinese by themselves
# (`%ddp_start 4 --lang zh` does the same in a notebook of your own).

# %% [markdown] lang=zh
# # ddplab 课程目录
#
# 在 CPU 上学习 PyTorch 的分布式数据并行训练，每个 notebook 讲一个概念。每一课都用 `%ddp_start` 在本机启动一个真实的 `torch.distributed` gloo 进程组，用 `%%ddp` 在每个 rank 上运行代码，并把发生的事情画成图，同时实时仪表盘跟踪每个 rank 的状态、损失、吞吐量和时间线。每一课打印的每个数字都是运行时在你的机器上测得的，它的结论也都在这次运行上得到检验。每一课最后都有可以自己核对的练习：写下答案，运行单元格，`check` 会告诉你答案对不对，以及为什么。
#
# **学习时间**是学习者学完一课所需的时间：阅读、运行单元格、看图和做练习。单元格本身的运行时间每课都远少于两分钟。**需要**一栏说明这一课在 ddplab 和 torch 之外还用到什么，以及启动几个 rank。
#
# <!-- lessons -->
#
# **从哪里开始。** 第 1 到 4 课是数据并行的核心：集合通信、DDP、采样器和梯度累积。学完这几课，其余各课可以按任意顺序学习；第 13 课（亲手实现环形 all-reduce）和第 14 课（扩展性）最好在第 12 课（通信开销）之后学习。第 19 到 21 课超越了数据并行：用 FSDP2 分片训练（在第 15 课“每个 rank 的内存”之后），张量并行与二维设备网格（在第 6 课和第 12 课之后，二维部分还要在第 19 课之后），以及激活检查点与分片检查点（在第 11 课和第 19 课之后）。
#
# **需要准备什么。** 这些课程需要 torch <!-- torch --> 或更新的版本（这也是 ddplab 本身的要求），以及从本仓库克隆安装的这个包：`./dev demo` 会在 `.venv` 中装好一切；也可以先安装 CPU 版的 torch，再运行 `pip install .`（见 [README](../../README.md)）。每一课结束时都会停止自己的进程池；如果有进程池还在运行，用 `%ddp_stop` 结束它。
#
# **术语表。** 各课对同一个概念始终使用同一个译名，英文术语只在第一次出现时附在括号里。下表“不用”一栏中的说法不在课程中使用。
#
# | English | 译名 | 不用 |
# |---|---|---|
# | rank | rank（进程的编号，也指这个进程） | 秩、等级 |
# | process group | 进程组 | 进程群 |
# | collective (operation) | 集合通信 | 集体通信、集合操作 |
# | collective mismatch | 集合通信不匹配 | 集合通信错配、错配 |
# | all-reduce, broadcast, all-gather, reduce-scatter | 保留英文：all-reduce、broadcast、all-gather、reduce-scatter | 全归约、全规约、广播归约 |
# | ring all-reduce | 环形 all-reduce | 环状 all-reduce |
# | gradient | 梯度 | |
# | bucket (DDP's gradient bucket) | 桶 | 梯度桶子、分桶器 |
# | batch size | 批大小 | 批次大小 |
# | micro-batch | 微批次（第一次出现时可附英文 micro-batch） | 微批量、小批次 |
# | gradient accumulation | 梯度累积 | 梯度累加 |
# | mixed precision | 混合精度 | |
# | DataLoader worker | 工作进程 | 工作者、worker 进程 |
# | pipeline, bubble | 流水线、气泡 | 管线、空泡 |
# | pruning, quantization | 剪枝、量化 | |
# | local SGD | 本地 SGD | 局部 SGD |
# | parameter server | 参数服务器 | |
# | staleness (of a gradient) | 陈旧度 | 过时 |
# | straggler | 慢节点 | 掉队者、落后者 |
# | checkpoint | 检查点 | 存档点 |
# | timeline | 时间线 | |
# | throughput | 吞吐量 | |
# | speed-up, (parallel) efficiency | 加速比、并行效率 | 加速倍数 |
# | latency, bandwidth | 延迟、带宽 | 时延 |
# | engine, pool | 引擎、进程池 | |
# | CPU core | 核心（CPU 核心；不单用“核”，“内核”指 kernel） | 核数、个核上、个核的、个核来 |
# | cell | 单元格 | |
# | step | 步 | |
# | shard, sharding | 分片 | 切片 |
# | tensor parallelism | 张量并行 | |
# | sequence parallelism | 序列并行 | |
# | device mesh (`DeviceMesh`) | 设备网格 | 设备网络 |
# | activation checkpointing | 激活检查点 | 梯度检查点 |
# | prefetch | 预取 | |
# | recompute | 重新计算 | 重计算 |
# | activation (kept for backward) | 激活（激活值） | |
# | FSDP unit | FSDP 单元 | |
# | reshard, resharding | 重新分片 | |
# | padding | 填充 | |
# | master copy (of the parameters) | 主副本 | |
# | root module | 根模块 | |
# | sharded checkpoint, state dict | 分片检查点、状态字典 | |
# | token | 词元 | 令牌 |
# | column-parallel, row-parallel (Linear) | 按列并行、按行并行 | |
# | partial sum | 部分和 | |
# | placement (of a DTensor) | 布局 | |
# | early stop (of a recomputation) | 提前停止 | |
# | wall-clock time | 墙钟时间 | |
# | span (of the timeline) | 时间段 | |
# | breakpoint, step (in a debugger) | 断点、单步 | |
# | flight recorder | 飞行记录器 | |
#
# **英文版。** 每一课都有英文版（英文目录中的英文课程名打开它），代码与中文版完全相同。
