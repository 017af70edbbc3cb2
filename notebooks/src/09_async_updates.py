# %% [markdown]
# # Lesson 9 · Asynchronous updates (a parameter server)
#
# **In short.** DDP and local SGD (lesson 8) are synchronous whenever they communicate: every rank
# waits in the same collective. **Asynchronous** training goes further: a **parameter server** applies
# each worker's gradient the moment it arrives, and no worker ever waits for another. Here you build
# one from point-to-point messages, a parameter server on rank 0 fed by workers on ranks 1-3, one of
# them slower than the others, and train the model of lesson 8 with it. You compare its loss against
# wall time with DDP's on the same samples, and measure how stale each gradient was when the server
# applied it.
#
# **You will learn**
# - how a parameter server works, built from `dist.send` and `dist.recv` (which gloo supports on CPU)
# - what the staleness of a gradient is, and why it grows with the number of workers and is largest for a slow one
# - why a slow worker holds nobody back in asynchronous training, and what that costs in the quality of each update
# - why the one server is a bottleneck every gradient passes through
#
# **Study time:** about 35 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** the loss against wall time of DDP and of the asynchronous run; the staleness of
# every gradient the parameter server applied, by worker; how many gradients the slow worker sent.

# %% [markdown] lang=zh
# # 第 9 课 · 异步更新（参数服务器）
#
# **简而言之**：DDP 和本地 SGD（第 8 课）在通信的时刻都是同步的：每个 rank 都在同一次集合通信中等待。**异步**训练走得更远：**参数服务器**一收到某个工作进程（worker）的梯度就立即应用，没有哪个 worker 需要等待别人。这一课用点对点消息搭建一个参数服务器：rank 0 上的参数服务器，由 rank 1-3 上的 worker 提供梯度，其中一个 worker 比其他的慢；再用它训练第 8 课的模型。你将在相同的样本上比较它与 DDP 的损失随墙钟时间的变化，并测量服务器应用每个梯度时，这个梯度有多“陈旧”。
#
# **你将学到**
# - 参数服务器如何工作：用 `dist.send` 和 `dist.recv`（gloo 在 CPU 上支持它们）搭建
# - 什么是梯度的陈旧度，为什么它随 worker 数增加而增大，而慢 worker 的梯度最陈旧
# - 为什么在异步训练中慢 worker 不会拖累任何人，以及这在每次更新的质量上要付出什么代价
# - 为什么唯一的服务器是每个梯度都要经过的瓶颈
#
# **学习时间**：约 35 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：DDP 和异步训练的损失随墙钟时间的变化；参数服务器应用的每个梯度的陈旧度（按 worker 分开）；慢 worker 发送了多少个梯度。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, predict, reveal, say

# %%
%ddp_start 4

# %% [markdown]
# ## Data, model, and a synchronous reference
#
# The setting of lesson 8: `synthetic_classification` with 64 features and 10 classes, 10,000
# training samples, 2,000 held out for testing, and `mlp(64, 256, 10)` (85 k parameters), batches of
# 32. `batches(steps, replicas, index)` gives one rank its share of the data through
# `DistributedSampler`, reshuffled every epoch: the 4 ranks' shares for DDP, the 3 workers' shares for
# the parameter server.
#
# The reference is lesson 8's DDP run: 240 steps of 4 × 32 samples, 30,720 samples in all, with SGD
# (lr 0.05, momentum 0.9). `clock` adds up the seconds spent training.

# %% [markdown] lang=zh
# ## 数据、模型和一个同步的参照
#
# 沿用第 8 课的设置：`synthetic_classification` 生成 64 个特征、10 个类别的数据，10,000 个训练样本，另外 2,000 个留作测试；模型是 `mlp(64, 256, 10)`（8.5 万个参数），每批 32 个样本。`batches(steps, replicas, index)` 通过 `DistributedSampler` 给一个 rank 它那一份数据，每个 epoch 重新打乱：DDP 时是 4 个 rank 的份额，参数服务器时是 3 个 worker 的份额。
#
# 参照是第 8 课的 DDP 训练：240 步，每步 4 × 32 个样本，共 30,720 个样本，优化器是 SGD（学习率 0.05，动量 0.9）。`clock` 只累计训练所花的秒数。

# %%
%%ddp
import time
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from ddplab.workloads import synthetic_classification, mlp

STEPS = 240
X, Y = synthetic_classification(n=12_000, features=64, classes=10).tensors
train = TensorDataset(X[:10_000], Y[:10_000])
X_test, Y_test = X[10_000:], Y[10_000:]

def batches(steps=STEPS, replicas=world_size, index=rank):
    """`steps` batches of 32 for share `index` of `replicas`, reshuffled every epoch."""
    sampler = DistributedSampler(train, num_replicas=replicas, rank=index, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=32, sampler=sampler, drop_last=True)
    step, epoch = 0, 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            yield x, y
            step += 1
            if step == steps:
                return
        epoch += 1

def accuracy(net):
    with torch.no_grad():
        return (net(X_test).argmax(dim=1) == Y_test).float().mean().item()

def train_ddp():
    model = DDP(mlp(features=64, hidden=256, classes=10, seed=0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, clock, seconds = [], [], 0.0
    for x, y in batches():
        tic = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                                   # all-reduce of every gradient, every step
        opt.step()
        seconds += time.perf_counter() - tic
        ddplab.log(loss=loss, samples=len(x))
        losses.append(loss.item())
        clock.append(seconds)                             # seconds spent training so far
    return dict(losses=losses, clock=clock, accuracy=accuracy(model.module))

n_params = sum(p.numel() for p in mlp(features=64, hidden=256, classes=10).parameters())
ddp = train_ddp()

# %% [markdown]
# ## A parameter server
#
# Now no collective at all, only point-to-point messages (`dist.send` and `dist.recv`, which gloo
# supports on CPU). **Rank 0 is the parameter server**: it holds the parameters, as one vector, and
# the momentum. **Ranks 1-3 are workers**: each one repeatedly
#
# 1. takes the parameters the server last sent it, together with their **version** (how many
#    updates the server had applied when it sent them);
# 2. computes a gradient on its next batch of 32;
# 3. sends the gradient and that version to the server, and waits for the reply.
#
# The server `dist.recv`s from **whichever worker sends first** (`dist.recv` without `src` returns
# the sender's rank), applies that gradient at once (SGD with momentum 0.9, lr 0.05, the same
# update `torch.optim.SGD` makes), and sends that worker the current parameters. Nobody waits for
# anybody else. But while a worker computed, the server may have applied the others' gradients:
# the worker's gradient is **stale**. Its **staleness** is the server's version when it applies the
# gradient minus the version the gradient was computed on; 0 would mean fresh, as in synchronous SGD.
#
# Rank 3 is made a slower (or busier) machine: each gradient takes it 10 ms longer. The server
# stops after 960 gradients of 32 (as many samples as the DDP run), whoever sent them, and answers
# every later message with version −1: "stop".

# %% [markdown] lang=zh
# ## 参数服务器
#
# 这次完全不用集合通信，只用点对点消息（`dist.send` 和 `dist.recv`，gloo 在 CPU 上支持它们）。**rank 0 是参数服务器**：它保存参数（一个向量）和动量。**rank 1-3 是 worker**：每个 worker 反复执行：
#
# 1. 取出服务器最近一次发来的参数，以及它们的**版本号**（服务器发送时已经应用了多少次更新）；
# 2. 在自己的下一批 32 个样本上计算梯度；
# 3. 把梯度和那个版本号一起发给服务器，然后等待回复。
#
# 服务器用 `dist.recv` 接收**最先发来的那个 worker** 的消息（不指定 `src` 的 `dist.recv` 会返回发送者的 rank），立即应用这个梯度（动量 0.9、学习率 0.05 的 SGD，与 `torch.optim.SGD` 做的更新相同），再把当前参数发回给这个 worker。谁也不等谁。但在某个 worker 计算期间，服务器可能已经应用了其他 worker 的梯度：这个 worker 的梯度就**陈旧**了。它的**陈旧度**（staleness）等于服务器应用该梯度时的版本号减去计算该梯度时所用参数的版本号；0 表示新鲜，就像同步 SGD 那样。
#
# 我们让 rank 3 成为一台较慢（或较忙）的机器：它每算一个梯度要多花 10 毫秒。服务器在收到 960 个各含 32 个样本的梯度后停止（与 DDP 那次训练的样本数相同），不管这些梯度来自谁；之后收到的每条消息，它都以版本号 −1 回复，意思是“停止”。

# %% [markdown]
# **Predict, then run.** The server applies 960 gradients of 32 samples: 30,720 samples, as many as
# DDP's 240 steps of 4 × 32. Predict the asynchronous run's final training loss as a multiple of
# DDP's: 1 means just as good. (Final: the mean over the last 60 gradients, and over DDP's last 20
# steps.)

# %% [markdown] lang=zh
# **先预测，再运行。** 服务器一共应用 960 个梯度，每个 32 个样本：共 30,720 个样本，与 DDP 的 240 步（每步 4 × 32）一样多。预测异步训练最终的训练损失是 DDP 的多少倍：1 表示一样好。（最终损失：异步训练取最后 60 个梯度的平均，DDP 取最后 20 步的平均。）

# %%
predict("9.async_loss", ...)    # the asynchronous run's final loss, as a multiple of DDP's (1 = as good)

# %%
%%ddp
from torch.nn.utils import parameters_to_vector, vector_to_parameters

UPDATES = STEPS * world_size                             # 960 gradients of 32 samples, as in the DDP run
WORKERS = [1, 2, 3]                                      # the ranks that compute gradients

def parameter_server():
    """Rank 0: apply each gradient as soon as it arrives; reply with the current parameters."""
    model = mlp(features=64, hidden=256, classes=10, seed=0)
    weights = parameters_to_vector(model.parameters()).detach()
    velocity = torch.zeros_like(weights)                 # the momentum buffer
    message = torch.zeros(len(weights) + 1)              # a gradient + the version it was computed on
    version, stopped, applied = 0, 0, []
    for worker in WORKERS:
        dist.send(torch.cat([weights, torch.tensor([0.0])]), dst=worker)
    t0 = time.perf_counter()
    while stopped < len(WORKERS):
        worker = dist.recv(message)                      # from whichever worker sends first
        if version < UPDATES:
            staleness = version - int(message[-1])       # updates applied since its parameters were sent
            applied.append((time.perf_counter() - t0, worker, staleness))
            velocity.mul_(0.9).add_(message[:-1])        # SGD with momentum, as torch.optim.SGD does it
            weights.sub_(0.05 * velocity)
            version += 1
            reply = torch.cat([weights, torch.tensor([float(version)])])
        else:
            reply, stopped = torch.cat([weights, torch.tensor([-1.0])]), stopped + 1   # -1: stop
        dist.send(reply, dst=worker)
    vector_to_parameters(weights, model.parameters())
    return dict(applied=applied, accuracy=accuracy(model))

def worker(slow_rank=3):
    model = mlp(features=64, hidden=256, classes=10, seed=0)
    reply = torch.zeros(sum(p.numel() for p in model.parameters()) + 1)
    dist.recv(reply, src=0)
    t0, losses = time.perf_counter(), []
    for x, y in batches(steps=UPDATES, replicas=len(WORKERS), index=WORKERS.index(rank)):
        if reply[-1] < 0:                                # the server says stop
            break
        vector_to_parameters(reply[:-1].clone(), model.parameters())   # parameters of version reply[-1]
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if rank == slow_rank:
            time.sleep(0.010)                            # a slower (or busier) machine: 10 ms more per gradient
        gradient = parameters_to_vector(p.grad for p in model.parameters())
        dist.send(torch.cat([gradient, reply[-1:]]), dst=0)
        dist.recv(reply, src=0)                          # meanwhile others' gradients may have been applied
        losses.append((time.perf_counter() - t0, loss.item()))
        ddplab.log(loss=loss, samples=len(x))
    return dict(losses=losses)

dist.barrier()
asynchronous = parameter_server() if rank == 0 else worker() if rank in WORKERS else dict(losses=[])

# %% [markdown]
# Left, the loss of both runs against the seconds spent training: DDP's as the mean of the 4 ranks
# (smoothed over 10 steps), the asynchronous one from the workers' losses in the order they were
# computed (smoothed over 30). Right, the staleness of each gradient the server applied, by worker,
# against the same clock (smoothed over 10 gradients of that worker).

# %% [markdown] lang=zh
# 左图：两次训练的损失随训练所花秒数的变化。DDP 取 4 个 rank 的平均（按 10 步平滑）；异步训练取各 worker 按计算先后排列的损失（按 30 个点平滑）。右图：服务器所应用的每个梯度的陈旧度，按 worker 分开，横轴是同一个时钟（按该 worker 的 10 个梯度平滑）。

# %%
ddp = %ddp_gather ddp
asynchronous = %ddp_gather asynchronous
n_params = %ddp_gather n_params
n_params = n_params[0]

def smooth(values, k=10):
    return [sum(values[max(0, i - k + 1):i + 1]) / len(values[max(0, i - k + 1):i + 1]) for i in range(len(values))]

ddp_loss = [sum(r["losses"][s] for r in ddp) / 4 for s in range(len(ddp[0]["losses"]))]
applied = asynchronous[0]["applied"]                     # (seconds, worker, staleness) per gradient applied
workers = sorted({who for _, who, _ in applied})
worker_losses = sorted(point for r in workers for point in asynchronous[r]["losses"])
name_async = say("asynchronous (parameter server)", "异步（参数服务器）")
curves = {"DDP": (ddp[0]["clock"], smooth(ddp_loss)),
          name_async: ([t for t, _ in worker_losses], smooth([l for _, l in worker_losses], 30))}
stale = {w: [(t, s) for t, who, s in applied if who == w] for w in workers}
draw.lines(None, panels=[
    dict(series=curves, xlabel=say("seconds spent training", "训练所花的秒数"), ylabel=say("training loss", "训练损失"),
         title=say("Loss against wall time", "损失 vs 墙钟时间")),
    dict(series={f"rank {w}": ([t for t, _ in stale[w]], smooth([s for _, s in stale[w]])) for w in workers},
         xlabel=say("seconds", "秒"), ylabel=say("staleness (updates)", "陈旧度（更新次数）"),
         title=say("How stale each applied gradient was", "每个被应用的梯度有多陈旧"))])

# %% [markdown]
# Check what the run shows: gradients were applied stale; the slow worker's were the stalest and it
# sent fewer of them; and asynchronous training learns too.

# %% [markdown] lang=zh
# 检验这次训练显示的结果：梯度在应用时已经陈旧；慢 worker 的梯度最陈旧，它发送的梯度也更少；而异步训练同样能学到东西。

# %%
import statistics

mean_stale = {w: statistics.mean(s for _, s in stale[w]) for w in (1, 2, 3)}
count = {w: len(stale[w]) for w in (1, 2, 3)}
losses_async = [l for _, l in worker_losses]
early = {"DDP": statistics.mean(ddp_loss[:20]), "async": statistics.mean(losses_async[:60])}
late = {"DDP": statistics.mean(ddp_loss[-20:]), "async": statistics.mean(losses_async[-60:])}
seconds = {"DDP": ddp[0]["clock"][-1], "async": applied[-1][0]}
accuracy = {"DDP": ddp[0]["accuracy"], "async": asynchronous[0]["accuracy"]}
assert len(applied) == 960 and max(s for _, _, s in applied) > 0            # stale gradients were applied
assert mean_stale[3] > max(mean_stale[1], mean_stale[2]) and count[3] < min(count[1], count[2])
assert late["async"] < 0.6 * early["async"], (early["async"], late["async"])   # it learns (less surely: stale steps)
for w in (1, 2, 3):
    print(say(f"rank {w}{' (slow)' if w == 3 else ''}: {count[w]} of the 960 gradients, staleness "
              f"{mean_stale[w]:.1f} on average, at most {max(s for _, s in stale[w])}",
              f"rank {w}{'（慢）' if w == 3 else ''}：960 个梯度中的 {count[w]} 个，陈旧度平均 {mean_stale[w]:.1f}，"
              f"最大 {max(s for _, s in stale[w])}"))
for n in ("DDP", "async"):
    shown = "DDP" if n == "DDP" else name_async
    print(say(f"{shown}: {seconds[n]:.1f} s training, loss {early[n]:.2f} -> {late[n]:.2f}, test accuracy {accuracy[n]:.1%}",
              f"{shown}：训练 {seconds[n]:.1f} 秒，损失 {early[n]:.2f} -> {late[n]:.2f}，测试准确率 {accuracy[n]:.1%}"))
reveal("9.async_loss", float(late["async"] / late["DDP"]), unit=say("× DDP's loss", "× DDP 的损失"))
if late["async"] > late["DDP"]:
    print(say("On the same 30,720 samples the asynchronous run ended at a higher loss than DDP: each stale "
              "update of 32 samples did less than one of DDP's fresh updates of 128.",
              "在同样的 30,720 个样本上，异步训练最终的损失高于 DDP：每次基于 32 个样本的陈旧更新，"
              "效果不如 DDP 一次基于 128 个样本的新鲜更新。"))
else:
    print(say("On the same 30,720 samples the asynchronous run did as well as DDP: its 960 small updates, "
              "stale as they were, made up for DDP's 240 large fresh ones.",
              "在同样的 30,720 个样本上，异步训练与 DDP 一样好：它的 960 次小更新尽管陈旧，"
              "抵得上 DDP 的 240 次大的新鲜更新。"))
if seconds["async"] < seconds["DDP"]:
    print(say("It also finished sooner than DDP: no all-reduce, and nobody waited for the slow rank 3, "
              "although only 3 of the 4 ranks computed gradients.",
              "它也比 DDP 更早完成：没有 all-reduce，也没有人等慢的 rank 3，尽管 4 个 rank 中只有 3 个在算梯度。"))
else:
    print(say("It took longer than DDP: every gradient passed through the one server, one at a time, and "
              "only 3 of the 4 ranks computed gradients.",
              "它比 DDP 用时更长：每个梯度都要逐个经过唯一的服务器，而且 4 个 rank 中只有 3 个在算梯度。"))

# %% [markdown]
# **What you see.** No worker waited for another: the slow rank 3 simply sent fewer gradients, and
# the fast workers did the rest of the 960. The price is staleness. While one worker computes, the
# others' gradients land on the server, so a worker's gradient is about as stale as the number of
# gradients the others send during one of its round trips: with *W* equally fast workers about
# *W* − 1, and much more for a slow worker, whose round trip spans many of the others' updates.
# More workers, or slower ones, mean staler gradients. A stale gradient points downhill from where
# the parameters *were*, not where they are, so it helps less than a fresh one; with momentum,
# staleness also acts like extra momentum, and a learning rate that is fine synchronously can
# become too large. And the server is a single point every gradient passes through: with many
# workers it becomes the bottleneck, which is why real systems shard it.
#
# **A common claim:** "asynchronous updates let each device update the parameters as soon as it has
# finished computing, without waiting for the others". **What actually happens:** the first half is
# true, as the counts above show: the slow worker held nobody back. But "updating the parameters"
# means applying a gradient computed on parameters that are several updates old (the staleness
# printed above, largest for the slow worker), so not waiting is paid for in the quality of each
# update; compare the losses printed above on the same number of samples.

# %% [markdown] lang=zh
# **你看到了什么。** 没有哪个 worker 等过别人：慢的 rank 3 只是发送的梯度更少，960 个梯度中的其余部分由快的 worker 完成。代价是陈旧度。在一个 worker 计算的同时，其他 worker 的梯度陆续到达服务器，所以一个 worker 的梯度的陈旧度，大约等于它完成一次往返期间其他 worker 发来的梯度数：如果有 *W* 个同样快的 worker，约为 *W* − 1；慢 worker 则要大得多，因为它的一次往返跨越了其他 worker 的许多次更新。worker 越多、越慢，梯度就越陈旧。陈旧的梯度指向的是参数*过去*所在位置的下坡方向，而不是参数现在的位置，所以它的帮助不如新鲜的梯度；有动量时，陈旧度的作用还像额外的动量，一个在同步训练中合适的学习率在这里可能就太大了。此外，服务器是每个梯度都必须经过的单点：worker 多了它就会成为瓶颈，所以实际系统会把它分片。
#
# **一种常见说法：**“异步更新让每台设备算完就立即更新参数，无需等待其他设备。”**实际情况是：**前半句没错，上面的计数说明了这一点：慢 worker 没有拖累任何人。但“更新参数”意味着应用一个在几次更新之前的参数上算出的梯度（陈旧度见上面打印的数字，慢 worker 最大），所以不等待的代价体现在每次更新的质量上；请比较上面打印的、在相同样本数下的损失。

# %% [markdown]
# **What to take away.**
#
# - **Asynchronous** training never waits: each worker contributes gradients at its own pace, and a
#   slow worker just contributes fewer.
# - It pays in **staleness**, which grows with the number and slowness of the workers: each update
#   follows a gradient of parameters that are already gone.
# - Every gradient and every reply passes through the **server**, so it is a bottleneck; real
#   systems shard the parameters over several servers.
# - That is why PyTorch ships DDP and model averaging (synchronous whenever they communicate)
#   ready-made, and leaves parameter servers to be built from `send`/`recv` or
#   `torch.distributed.rpc`.

# %% [markdown] lang=zh
# **要点。**
#
# - **异步**训练从不等待：每个 worker 按自己的节奏贡献梯度，慢 worker 只是贡献得少一些。
# - 它要付出**陈旧度**的代价，worker 越多、越慢，陈旧度越大：每次更新所沿的梯度，是在已经过去的参数上算出来的。
# - 每个梯度和每次回复都要经过**服务器**，所以它是瓶颈；实际系统把参数分片到多个服务器上。
# - 这就是为什么 PyTorch 现成提供的是 DDP 和模型平均（它们在通信的时刻都是同步的），而参数服务器要用 `send`/`recv` 或 `torch.distributed.rpc` 自己搭建。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right for this
# run, and why.
#
# **9.1** A worker's gradient is about as stale as the number of gradients the other workers send
# during one of its round trips. Suppose each of rank 3's round trips took **twice** as long as in this
# run, while ranks 1 and 2 kept their pace. From the counts printed above only (how many gradients
# each worker sent in the same time), estimate the mean staleness of rank 3's gradients then. Answer
# with a number.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你，对这次运行来说答案对不对，以及为什么。
#
# **9.1** 一个 worker 的梯度的陈旧度，大约等于它完成一次往返期间其他 worker 发来的梯度数。假设 rank 3 的每次往返都要花这次运行中的**两倍**时间，而 rank 1 和 2 的节奏不变。只用上面打印的计数（同一段时间里每个 worker 发送了多少个梯度），估算那时 rank 3 的梯度的平均陈旧度。请写一个数。

# %%
answer = ...    # your estimate of rank 3's mean staleness with round trips twice as long, from the counts
check("9.1", answer, count=count, mean_stale=mean_stale)

# %% [markdown]
# **9.2** How many MB passed through the server (sent plus received) in this run? Each message is
# the parameters (or a gradient) plus one number, in float32: count the messages, including the
# first parameters sent to each worker and the last gradient each worker sent, answered with
# "stop". Compare with what each DDP rank all-reduced in lesson 8. Answer with a number of MB.

# %% [markdown] lang=zh
# **9.2** 这次训练中，一共有多少 MB 经过服务器（发送加接收）？每条消息是全部参数（或一个梯度）再加一个数，都是 float32：数一数消息的条数，包括最开始发给每个 worker 的参数，以及每个 worker 发来的、被回复“停止”的最后一个梯度。再与第 8 课中每个 DDP rank all-reduce 的量比较。请写一个 MB 数。

# %%
answer = ...    # MB through the server, sent plus received
check("9.2", answer, n_params=n_params, updates=len(applied), workers=len(workers))

# %% [markdown]
# **9.3** Run again without a slow worker (`worker(slow_rank=None)`), and predict before you do: how
# many of the 960 gradients would rank 3 send? Answer with a whole number.

# %% [markdown] lang=zh
# **9.3** 去掉慢 worker（`worker(slow_rank=None)`）再运行一次，先预测再动手：960 个梯度中，rank 3 会发送多少个？请写一个整数。

# %%
answer = ...    # gradients rank 3 would send, out of 960, with no slow worker
check("9.3", answer, count=count, updates=len(applied))

# %%
%ddp_stop
