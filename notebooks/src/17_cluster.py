# %% [markdown]
# # Lesson 17 · From the notebook to a cluster
#
# **In short.** So far every rank ran on this machine. On a cluster each host brings its own cores,
# and the same code runs there: ipyparallel starts engines on the hosts (by SSH, MPI or a Slurm job,
# or you start `ipengine` by hand), and `%ddp_start --connect` makes every engine a rank of one gloo
# group. Here you attach to 4 hosts, see what changes (each rank's own address and interface, the
# rendezvous, a host that is lost), and then leave the lab: you see what `torchrun` gives every
# process it starts (the environment `init_process_group` reads), and turn the notebook into a
# script that `torchrun` runs, ending with the same losses, digit for digit.
#
# **You will learn**
# - how ipyparallel engines on several hosts become the ranks of one gloo group (`%ddp_start --connect`)
# - what changes across hosts: each rank's address and network interface, the rendezvous store, DNS
# - what happens when a host is lost in the middle of a collective, and how to go on with the hosts left
# - what `torchrun` gives every process it starts, and why `init_process_group` needs `MASTER_ADDR` and `MASTER_PORT`
# - how to turn the notebook into a script that `torchrun` runs to the same losses, digit for digit
#
# **Study time:** about 45 minutes
#
# **Needs:** root (and the `ip` and `unshare` commands) to make 4 hosts as network namespaces, else it falls back to 4 local engines; `torchrun` (comes with torch) · 4, then 3, then 4 ranks
#
# **Memory:** about 1.5 GiB at its peak: it fits Binder's 2 GiB, but not a 1 GiB session (a classroom
# hub). There, set `RANKS = 2` in the cell that makes the hosts: the lesson then attaches 2 hosts, loses
# one, and runs torchrun with 2 processes (about 0.9 GiB; the text and the exercises still speak of 4,
# the outputs say what ran).
#
# **You will see:** 4 hosts and the ranks on them, an all-reduce across hosts, a host lost and
# the group formed again on the 3 left, the environment torchrun sets for each of 4 processes, and
# the notebook's training run again by `torchrun`.

# %% [markdown] lang=zh
# # 第 17 课 · 从 notebook 到集群
#
# **简而言之**：到目前为止，所有进程（rank）都在本机上运行。在集群上，每台主机都有自己的 CPU 核心，而同样的代码照样可以在那里运行：ipyparallel 在各台主机上启动引擎（通过 SSH、MPI 或 Slurm 作业，或者由你亲手运行 `ipengine`），`%ddp_start --connect` 把每个引擎变成同一个 gloo 进程组中的一个 rank。本课连接到 4 台主机，看看有哪些变化（每个 rank 有自己的地址和网卡、集合点 rendezvous、一台主机失联）；然后离开 ddplab：看看 `torchrun` 为它启动的每个进程准备了什么（也就是 `init_process_group` 读取的环境变量），再把 notebook 变成一个由 `torchrun` 运行的脚本，最后得到的损失逐位相同。
#
# **你将学到**
# - 多台主机上的 ipyparallel 引擎如何成为同一个 gloo 进程组的各个 rank（`%ddp_start --connect`）
# - 跨主机时有哪些变化：每个 rank 的地址和网络接口、集合点的 store、DNS
# - 一台主机在集合通信中途失联时会发生什么，以及如何用剩下的主机继续
# - `torchrun` 给它启动的每个进程提供了什么，以及为什么 `init_process_group` 需要 `MASTER_ADDR` 和 `MASTER_PORT`
# - 如何把 notebook 变成一个由 `torchrun` 运行的脚本，并得到逐位相同的损失
#
# **学习时间**：约 45 分钟
#
# **需要**：需要 root 权限（以及 `ip` 和 `unshare` 命令）把 4 台主机做成网络命名空间，否则退回为 4 个本地引擎；`torchrun`（随 torch 提供）· 先 4 个、再 3 个、最后 4 个 rank
#
# **内存**：峰值约 1.5 GiB：Binder 的 2 GiB 装得下，1 GiB 的会话（课堂用的 hub）装不下。在那里，把创建主机的单元格中的 `RANKS = 4` 改成 `RANKS = 2`：这一课就连接 2 台主机、失去其中一台，并用 torchrun 启动 2 个进程（约 0.9 GiB；正文和练习仍然按 4 个来讲，输出会说明实际运行的是多少个）。
#
# **你将看到**：4 台主机及其上的 rank，一次跨主机的 all-reduce，一台主机失联后在剩下的 3 台上重新组成进程组，`torchrun` 为 4 个进程分别设置的环境变量，以及由 `torchrun` 重新运行的 notebook 训练。

# %%
%load_ext ddplab
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

from ddplab.lessons import check, draw, lab, predict, reveal, say
from ddplab.lessons.hosts import check as check_hosts, hosts_or_local

# %% [markdown]
# ## Four hosts
#
# A real cluster needs real machines. Here, as root on Linux, each "host" is a **network
# namespace**: its own network interfaces, its own address on a bridge (on a 10.77.X subnet that no
# interface of this machine uses yet), its own hostname (h1 to h4), and, as on many cluster nodes, no
# DNS that answers. An ipyparallel controller listens on the bridge's address, and one `ipengine`
# runs on each host, started the way you would start it by hand on a real one:
#
# ```
# ipcontroller --ip=ADDRESS        # on the head node: ADDRESS, its address on the cluster's network
# ipengine --file=~/.ipython/profile_default/security/ipcontroller-engine.json   # on each host
# ```
#
# The cell prints the addresses this run got. Without root (or on a Mac), the same cell starts 4
# engines on this machine instead, and the lesson runs the same way, but every rank has the same host
# and address.

# %% [markdown] lang=zh
# ## 四台主机
#
# 真正的集群需要真正的机器。这里在 Linux 上以 root 身份运行，每台“主机”都是一个**网络命名空间**（network namespace）：它有自己的网络接口、网桥上自己的地址（在本机还没有任何网络接口使用的一个 10.77.X 子网中）、自己的主机名（h1 到 h4），而且和许多集群节点一样，没有能应答的 DNS。一个 ipyparallel 控制器在网桥的地址上监听，每台主机上运行一个 `ipengine`，启动方式与在真实主机上手动启动完全相同：
#
# ```
# ipcontroller --ip=ADDRESS        # 在头节点上：ADDRESS 是它在集群网络上的地址
# ipengine --file=~/.ipython/profile_default/security/ipcontroller-engine.json   # 在每台主机上
# ```
#
# 下面的单元格会打印这次运行得到的地址。如果没有 root 权限（或者在 Mac 上），同一个单元格会改为在本机上启动 4 个引擎，课程照样进行，只是每个 rank 的主机和地址都相同。

# %%
RANKS = 4          # the hosts and the pools' size: 2 in a 1 GiB session (see the top)
hosts = hosts_or_local(RANKS)
if hosts.addresses:
    print(say("hosts: ", "主机：") + say(", ", "，").join(f"{h} {a}" for h, a in zip(hosts.hostnames, hosts.addresses)))
    print(say(f"the controller listens on {hosts.controller_address}, the bridge's address; started by hand it would be:",
              f"控制器在网桥的地址 {hosts.controller_address} 上监听；手动启动的话就是："))
    print(f"ipcontroller --ip={hosts.controller_address}")
else:
    print(say(f"no network namespaces here ({check_hosts()}): {RANKS} engines on this machine, the controller on "
              f"{hosts.controller_address}",
              f"这里不能创建网络命名空间（{check_hosts()}）：在本机上启动 {RANKS} 个引擎，控制器在 {hosts.controller_address} 上"))
hosts.client_file        # the controller's connection file, the one ipyparallel.Client reads

# %% [markdown]
# `%ddp_start --connect` attaches to the engines of that controller, through the same
# `ipcontroller-client.json` that `ipyparallel.Client` reads. `4` waits until 4 engines have
# registered. Every engine becomes a rank, ordered by host, then engine id. (`%ddp_start --profile
# NAME` attaches to the cluster that `ipcluster start --profile NAME` made; see the README.)

# %% [markdown] lang=zh
# `%ddp_start --connect` 通过 `ipyparallel.Client` 读取的同一个 `ipcontroller-client.json`，连接到这个控制器的引擎。`4` 表示等到 4 个引擎都注册之后再继续。每个引擎成为一个 rank，先按主机、再按引擎编号排序。（`%ddp_start --profile NAME` 连接到 `ipcluster start --profile NAME` 创建的集群；详见 [README](../../README.md)。）

# %%
import time

tic = time.perf_counter()
%ddp_start {RANKS} --connect {hosts.client_file} --threads 1
attach_seconds = time.perf_counter() - tic

# %% [markdown]
# Before it forms the group, ddplab asks every engine where it is: which of its addresses reaches
# the controller (the route its packets take: no name lookup, whatever its hostname resolves to),
# on which interface. Each rank then pins gloo to that interface (`GLOO_SOCKET_IFNAME`), so a host
# with several networks (these have a second one, `mgmt0`) uses the right one. `%ddp_status`
# shows it:

# %% [markdown] lang=zh
# 在组建进程组之前，ddplab 先问每个引擎它在哪里：它的哪个地址能到达控制器（看数据包实际走的路由，不做任何名字解析，不管它的主机名解析成什么），经由哪个网络接口。随后每个 rank 把 gloo 固定在那个接口上（`GLOO_SOCKET_IFNAME`），这样有多个网络的主机（这些主机还有第二个网络 `mgmt0`）也会用对网络。`%ddp_status` 会显示这些信息：

# %%
%ddp_status

# %%
controller = say(f"controller {hosts.controller_address}", f"控制器 {hosts.controller_address}")
kind = say(hosts.kind, "网络命名空间" if hosts.kind == "network namespaces" else "本机上的引擎")
draw.hosts(lab().status(), controller, title=say(f"{RANKS} hosts ({kind}), one rank each", f"{RANKS} 台主机（{kind}），每台一个 rank"))

# %% [markdown]
# ## The same code, across hosts
#
# A cell runs on every rank as before. Each rank prints its hostname and the interface gloo uses:

# %% [markdown] lang=zh
# ## 同样的代码，跨主机运行
#
# 单元格照旧在每个 rank 上运行。每个 rank 打印自己的主机名和 gloo 使用的网络接口：

# %%
%%ddp
import os, socket
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
print(socket.gethostname(), os.environ.get("GLOO_SOCKET_IFNAME"), t.item())

# %% [markdown]
# **The rendezvous.** To form a group, the ranks first exchange their gloo addresses through a
# key-value store. `torchrun` and `init_process_group("tcp://...")` use torch's `TCPStore` on rank
# 0: it accepts anyone who can reach its port, and each client looks up the name of its own
# address when it connects. Where DNS does not answer (these hosts, many cluster nodes) each of those
# lookups waits about 10 s before it gives up. ddplab's rank 0 serves a small store of its own
# instead, on its own address only, that signs every message with the pool's key and looks up no
# names (the cell after the training prints how long `%ddp_start` took here).
#
# DDP works as on one machine: every rank ends with the same parameters.

# %% [markdown] lang=zh
# **集合点（rendezvous）。** 为了组建进程组，各 rank 先通过一个键值存储（store）交换各自的 gloo 地址。`torchrun` 和 `init_process_group("tcp://...")` 使用 torch 在 rank 0 上的 `TCPStore`：任何能连上它端口的人它都接受，而且每个客户端在连接时都会反查自己地址对应的名字。在 DNS 不应答的地方（这些主机，以及许多集群节点），每次这样的反查都要等大约 10 秒才放弃。ddplab 的 rank 0 则运行一个自己的小型 store，只监听自己的地址，用进程池的密钥给每条消息签名，并且不做任何名字解析（训练之后的那个单元格会打印 `%ddp_start` 在这里用了多长时间）。
#
# DDP 的表现与单机上一样：每个 rank 最后的参数都完全相同。

# %%
%%ddp
from ddplab.workloads import train_ddp
summary = train_ddp(steps=60)
print(f"{socket.gethostname()}: loss={summary['loss']:.4f} samples_per_s={summary['samples_per_s']:.0f}")

# %%
summaries = %ddp_gather summary
assert len({s["checksum"] for s in summaries}) == 1   # identical parameters on every host
print(say("parameters identical on every host:", "每台主机上的参数完全相同："), len({s["checksum"] for s in summaries}) == 1)
print(say(f"%ddp_start took {attach_seconds:.1f} s in all: waiting for the {RANKS} engines, asking each where it is, and "
          "forming the group through ddplab's store",
          f"%ddp_start 一共用了 {attach_seconds:.1f} 秒：等待 {RANKS} 个引擎、询问每个引擎的位置，并通过 ddplab 的 store 组建进程组"))
if attach_seconds < 10:
    print(say("That is less than a single name lookup takes where DNS does not answer (about 10 s), and a TCPStore "
              "makes one for every connection.",
              "这比在 DNS 不应答的地方做一次名字反查所需的时间（约 10 秒）还短，而 TCPStore 每个连接都要反查一次。"))
else:
    print(say("That includes waiting for the engines; ddplab's store itself looked up no names, where a TCPStore "
              "would have waited about 10 s for every connection.",
              "这包括等待引擎的时间；ddplab 的 store 本身不做任何名字解析，而 TCPStore 每个连接都要等约 10 秒。"))

# %% [markdown]
# ## A host is lost
#
# On a cluster, a host can fail in the middle of a run. Here rank 2's host goes away a second into
# the next cell: its engine and the engine's nanny are killed at once, with no chance to tell anyone,
# while every rank all-reduces. The other ranks' connections to it break; the controller stops hearing
# the engine (ipyparallel's heartbeat); ddplab names the rank and its host, and gives you the notebook
# back within seconds. The cell runs with `%%ddp --expect RankLost`: the lost rank is the point, so
# ddplab shows its report as expected instead of raising.

# %% [markdown] lang=zh
# ## 一台主机失联
#
# 在集群上，一台主机可能在运行途中出故障。这里，在下一个单元格开始一秒后，rank 2 所在的主机消失了：它的引擎和引擎的守护进程（nanny）同时被杀死，来不及通知任何一方，而此时每个 rank 都在做 all-reduce。其他 rank 与它的连接断开；控制器不再收到这个引擎的消息（ipyparallel 的心跳）；ddplab 指出是哪个 rank、在哪台主机上，并在几秒内把 notebook 交还给你。这个单元格用 `%%ddp --expect RankLost` 运行：失联的 rank 正是要演示的内容，所以 ddplab 把它的报告作为预期的结果显示出来，而不是抛出异常。

# %%
import threading

lost_row = lab().status()[RANKS // 2]           # rank 2 of 4
threading.Timer(1.0, hosts.lose_host_of, (lost_row,)).start()

# %%
%%ddp --expect RankLost
import time
for step in range(400):
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(0.05)

# %%
draw.hosts(lab().status(), controller, lost=[lost_row["host"]],
           title=say(f"{lost_row['host']} is lost", f"{lost_row['host']} 失联"))

# %% [markdown]
# ddplab did not start these engines, so it cannot start a new one on a lost host (`%ddp_restart`
# says so). `%ddp_stop` leaves the group and the engines keep running; `%ddp_start --connect`
# again makes a group of the 3 that are left:

# %% [markdown] lang=zh
# 这些引擎不是 ddplab 启动的，所以它无法在失联的主机上启动新引擎（`%ddp_restart` 会这样告诉你）。`%ddp_stop` 退出进程组，引擎继续运行；再次执行 `%ddp_start --connect`，就用剩下的 3 个引擎组成一个进程组：

# %%
%ddp_stop

# %%
%ddp_start {RANKS - 1} --connect {hosts.client_file} --threads 1

# %%
%%ddp
import socket
t = torch.ones(1)
dist.all_reduce(t)
print(socket.gethostname(), t.item())

# %% [markdown]
# `%ddp_stop --shutdown` stops the engines and their controller too (as `ipcluster stop` would).
# Then the 4 hosts are taken down.

# %% [markdown] lang=zh
# `%ddp_stop --shutdown` 还会停止这些引擎及其控制器（就像 `ipcluster stop` 那样）。然后拆除这 4 台主机。

# %%
assert len(lab().status()) == RANKS - 1            # the engines left
%ddp_stop --shutdown
hosts.down()

# %% [markdown]
# ## The same job outside the lab: torchrun
#
# On a cluster you usually run a script, not a notebook: `torchrun` starts one process per rank on
# each host and gives each process its place in environment variables, from which
# `init_process_group` forms the group. `%ddp_export PATH` writes the `%%ddp` cells that ran
# successfully, in order, as such a script. Here is a deterministic training on a local pool of 4,
# which torchrun will then run again.

# %% [markdown] lang=zh
# ## 离开 ddplab 运行同一个作业：torchrun
#
# 在集群上，通常运行的是脚本而不是 notebook：`torchrun` 在每台主机上为每个 rank 启动一个进程，并通过环境变量告诉每个进程它所处的位置，`init_process_group` 再根据这些变量组建进程组。`%ddp_export PATH` 把成功运行过的 `%%ddp` 单元格按顺序写成这样一个脚本。下面在一个 4 个 rank 的本地进程池上做一次确定性训练，随后再由 torchrun 把它重新运行一遍。

# %%
%ddp_start {RANKS}

# %% [markdown]
# First each rank shows how it was started: which of torchrun's variables it has, and the result
# of one all-reduce of its rank + 1.

# %% [markdown] lang=zh
# 首先，每个 rank 展示自己是如何启动的：它有哪些 torchrun 的环境变量，以及对自己的 rank + 1 做一次 all-reduce 的结果。

# %%
%%ddp
import json, os
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "OMP_NUM_THREADS")
started_with = {k: os.environ[k] for k in names if k in os.environ}
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)                       # 1 + 2 + 3 + 4 on every rank (of 4)
print(json.dumps({"pid": os.getpid(), "env": started_with, "all_reduce": t.item()}))

# %%
in_notebook = %ddp_gather started_with
assert all(set(env) <= {"OMP_NUM_THREADS"} for env in in_notebook)

# %% [markdown]
# In the notebook the ranks have none of them but `OMP_NUM_THREADS` (ddplab sets each rank's
# threads): ddplab formed their group through a `FileStore` in the pool's private directory, not
# from the environment. Now the training:

# %% [markdown] lang=zh
# 在 notebook 里，各 rank 除了 `OMP_NUM_THREADS`（ddplab 用它设置每个 rank 的线程数）之外，一个也没有：ddplab 是通过进程池私有目录中的一个 `FileStore` 组建进程组的，而不是根据环境变量。接下来是训练：

# %%
%%ddp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(512, 16, generator=g), torch.randn(512, 1, generator=g))
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=32, sampler=sampler)

# %%
%%ddp
for epoch in range(3):
    sampler.set_epoch(epoch)          # a new shuffle each epoch, the same on every rank
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=len(x))
print(f"rank={rank} loss={loss.item()!r}")

# %%
work = tempfile.TemporaryDirectory(prefix="ddplab-lesson17-")  # removed with the kernel (or %reset)
script = work.name + "/train.py"
%ddp_export {script}
notebook_output = "".join(lab().last_result.stdout)       # the ranks' last lines, for torchrun's to match
%ddp_stop
text = open(script).read()
print(text[:text.index("# --- cell 2")].rstrip())        # the script's start and its first cell

# %% [markdown]
# The script forms the group from torchrun's environment, defines `rank`, `world_size`, `torch`,
# `dist`, `nn` and `ddplab` as the notebook's ranks had them (`ddplab.log` keeps its points in
# memory), and sets the same threads per rank. The notebook's ranks are stopped first (their last
# lines kept): torchrun starts 4 new Pythons, each importing torch, and a Binder session has 2 GiB
# for all of them.
#
# **What torchrun gives each process.** The script starts with `dist.init_process_group("gloo")`:
# no address, no rank, no world size. With no `init_method`, `init_process_group` takes all of
# them from environment variables (the `env://` method). Run it with 4 processes, as
# `torchrun --standalone --nproc_per_node 4 train.py` would in a terminal (`--standalone`: one
# machine; torchrun finds a free port for the processes to meet at). From the notebook, `torchrun`
# is `python -m torch.distributed.run` with the notebook's own Python, which is what the `torchrun`
# command runs. `launch` waits for it at most 120 s, and past that ends it and every process it
# started.

# %% [markdown] lang=zh
# 这个脚本根据 torchrun 设置的环境变量组建进程组，像 notebook 里的各个 rank 一样定义好 `rank`、`world_size`、`torch`、`dist`、`nn` 和 `ddplab`（`ddplab.log` 把数据点保存在内存中），并为每个 rank 设置相同的线程数。notebook 的 rank 先停掉了（保留了它们最后打印的几行）：torchrun 要启动 4 个新的 Python，每个都导入 torch，而一个 Binder 会话总共只有 2 GiB 内存。
#
# **torchrun 给了每个进程什么。** 脚本以 `dist.init_process_group("gloo")` 开头：没有地址，没有 rank，也没有 world size。不指定 `init_method` 时，`init_process_group` 从环境变量中读取所有这些信息（即 `env://` 方式）。用 4 个进程运行它，相当于在终端里执行 `torchrun --standalone --nproc_per_node 4 train.py`（`--standalone` 表示单机运行；torchrun 自己找一个空闲端口，作为各进程的会合点）。在 notebook 里，`torchrun` 就是用 notebook 自己的 Python 执行 `python -m torch.distributed.run`，这正是 `torchrun` 命令实际运行的东西。`launch` 最多等它 120 秒，超时就结束它以及它启动的所有进程。

# %%
torchrun = [sys.executable, "-m", "torch.distributed.run"]     # what the torchrun command runs


def launch(*command, env=None, timeout=120):
    """Run a command as a terminal would; past `timeout` s end it and every process it started."""
    env = (os.environ if env is None else env) | {"TMPDIR": work.name}  # torchrun's log folders go with `work`
    p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    return p.returncode, out, err


code, out, err = launch(*torchrun, "--standalone", "--nproc_per_node", str(RANKS), script)
assert code == 0, err[-3000:]
found = [json.JSONDecoder().raw_decode(out, m.start())[0] for m in re.finditer(r'\{"pid"', out)]
procs = sorted(found, key=lambda p: int(p["env"]["RANK"]))     # (4 processes' lines may run together)
shown = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"]
print("pid      " + "  ".join(shown) + "  all_reduce")
for p in procs:
    print(f"{p['pid']:<8} " + "  ".join(f"{p['env'].get(k, '-'):<{len(k)}}" for k in shown) + f"  {p['all_reduce']}")
run_ids = {p["env"]["TORCHELASTIC_RUN_ID"] for p in procs}
print(say("TORCHELASTIC_RUN_ID, the same in every process:", "TORCHELASTIC_RUN_ID，每个进程都相同："), *run_ids)
omp = procs[0]["env"].get("OMP_NUM_THREADS")
if omp and "OMP_NUM_THREADS" not in os.environ:
    print(say(f"OMP_NUM_THREADS={omp}: torchrun set it, as it does when it is not set, so that {len(procs)} processes "
              "do not each start a thread per core (ddplab gives each rank its share for the same reason)",
              f"OMP_NUM_THREADS={omp}：这是 torchrun 设置的，没有设置时它总会这样做，免得 {len(procs)} 个进程各自"
              "为每个核心启动一个线程（ddplab 出于同样的原因只给每个 rank 分配它那一份核心）"))
assert [p["env"]["RANK"] for p in procs] == [str(r) for r in range(RANKS)] and len(run_ids) == 1
assert [p["all_reduce"] for p in procs] == [RANKS * (RANKS + 1) / 2] * RANKS   # 1 + 2 + 3 + 4, as in the notebook

# %% [markdown]
# Each row is one process, as it printed itself:
#
# - `RANK` and `WORLD_SIZE`: its place in the whole job and the job's size, what
#   `dist.get_rank()` and `dist.get_world_size()` return.
# - `LOCAL_RANK` and `LOCAL_WORLD_SIZE`: its place among the processes on its own host, and how
#   many run there. On one host they equal `RANK` and `WORLD_SIZE`; on 2 hosts of 4 processes, the
#   second host's processes have `RANK` 4 to 7 and `LOCAL_RANK` 0 to 3. On a GPU machine
#   `LOCAL_RANK` picks the process's GPU (`torch.cuda.set_device(local_rank)`).
# - `GROUP_RANK`: the number of its host (its torchrun) in the job, one of `GROUP_WORLD_SIZE`.
# - `MASTER_ADDR` and `MASTER_PORT`: where the key-value store is through which the processes
#   exchange their addresses (the rendezvous above), the same for all of them.
# - `TORCHELASTIC_RUN_ID`: the job's id (`--rdzv-id`; `--standalone` makes a random one); only
#   processes of the same job meet. `TORCHELASTIC_RESTART_COUNT` counts torchrun's restarts of
#   the workers (`--max-restarts`, lesson 11).
#
# Started by hand, with no torchrun, the same script has none of this. Give it a rank and a world
# size, as a script that starts its processes itself would, and run it:

# %% [markdown] lang=zh
# 每一行是一个进程，内容由它自己打印：
#
# - `RANK` 和 `WORLD_SIZE`：它在整个作业中的位置，以及作业的规模，也就是 `dist.get_rank()` 和 `dist.get_world_size()` 的返回值。
# - `LOCAL_RANK` 和 `LOCAL_WORLD_SIZE`：它在本主机上各进程中的位置，以及本主机上运行的进程数。只有一台主机时，它们等于 `RANK` 和 `WORLD_SIZE`；如果有 2 台主机、每台 4 个进程，第二台主机上进程的 `RANK` 是 4 到 7，`LOCAL_RANK` 是 0 到 3。在 GPU 机器上，由 `LOCAL_RANK` 选择进程使用的 GPU（`torch.cuda.set_device(local_rank)`）。
# - `GROUP_RANK`：它所在主机（即它的 torchrun）在作业中的编号，共有 `GROUP_WORLD_SIZE` 台。
# - `MASTER_ADDR` 和 `MASTER_PORT`：键值存储所在的位置，各进程通过它交换彼此的地址（即上文的集合点），所有进程都相同。
# - `TORCHELASTIC_RUN_ID`：作业的 ID（`--rdzv-id`；`--standalone` 会随机生成一个），只有同一个作业的进程才会会合。`TORCHELASTIC_RESTART_COUNT` 记录 torchrun 重启 worker 的次数（`--max-restarts`，见[第 11 课](11_fault_tolerance.ipynb)）。
#
# 如果不用 torchrun、手动启动，同一个脚本就什么也拿不到。像自己启动进程的脚本那样，给它一个 rank 和一个 world size，然后运行：

# %% [markdown]
# **Predict, then run.** Started this way, with `RANK=0` and `WORLD_SIZE=4` but no torchrun, what
# does the script do? Write a letter:
#
# - (a) it runs the training on its own, as a job of one process
# - (b) it waits for the 3 other processes, until a timeout
# - (c) it stops at once, with an error

# %% [markdown] lang=zh
# **先预测，再运行。** 这样启动时（有 `RANK=0` 和 `WORLD_SIZE=4`，但没有 torchrun），这个脚本会怎样？写一个字母：
#
# - (a) 自己运行训练，当作只有一个进程的作业
# - (b) 等待另外 3 个进程，直到超时
# - (c) 立即报错退出

# %%
predict("17.by_hand", ...)    # a, b or c: what the script does, started by hand with RANK and WORLD_SIZE only

# %%
by_hand = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
hand_code, _, hand_err = launch(sys.executable, script, env=by_hand | {"RANK": "0", "WORLD_SIZE": "4"}, timeout=60)
error = hand_err.strip().splitlines()[-1]
print(f"$ RANK=0 WORLD_SIZE=4 python train.py\n{error}\n$ echo $?\n{hand_code}")
reveal("17.by_hand", "c" if hand_code != 0 else "a")      # (waiting until a timeout would have raised above)
assert hand_code != 0 and "MASTER_ADDR" in error

# %% [markdown]
# **A common claim:** to run a distributed job without a launcher, start the processes yourself
# (with `torch.multiprocessing`, say) and have each call
# `init_process_group(backend, rank=rank, world_size=size)`.
# **What actually happens:** a rank and a world size tell a process who it is, not where the others
# are. The processes must also meet somewhere, and with no `init_method` that place comes from
# `MASTER_ADDR` and `MASTER_PORT`: without them `init_process_group` fails at once, as the line
# above shows. Such a script works only if it sets them itself (`os.environ["MASTER_ADDR"] =
# "127.0.0.1"` and a free port, the same in every process), or passes
# `init_method="tcp://HOST:PORT"`, or a store (ddplab's pools on one machine meet through a
# `FileStore`). torchrun sets them, and everything else in the table, for every process it starts.
#
# And the training itself: the losses the 4 processes printed under torchrun, against the
# notebook's.

# %% [markdown] lang=zh
# **一个常见的说法：** 不用启动器也能运行分布式作业，只要自己启动各个进程（比如用 `torch.multiprocessing`），让每个进程调用 `init_process_group(backend, rank=rank, world_size=size)` 就行。**实际情况是：** rank 和 world size 只告诉一个进程“我是谁”，没有告诉它“其他进程在哪里”。各进程还必须有一个会合的地方；不指定 `init_method` 时，这个地方来自 `MASTER_ADDR` 和 `MASTER_PORT`：没有它们，`init_process_group` 会立即失败，正如上面那一行所示。这样的脚本只有在自己设置了它们（`os.environ["MASTER_ADDR"] = "127.0.0.1"` 加一个空闲端口，每个进程都相同），或者传入 `init_method="tcp://HOST:PORT"`，或者传入一个 store（ddplab 在单机上的进程池就是通过一个 `FileStore` 会合的）时才能运行。torchrun 则为它启动的每个进程设置好这两个变量，以及表中的其他所有变量。
#
# 再看训练本身：在 torchrun 下，4 个进程打印的损失与 notebook 中的对比。

# %%
loss_line = r"rank=(\d) loss=([-+0-9.e]+)"
notebook_losses = {int(r): v for r, v in re.findall(loss_line, notebook_output)}
script_losses = {int(r): v for r, v in re.findall(loss_line, out)}
print(say("notebook:", "notebook："), notebook_losses)
print("torchrun:", dict(sorted(script_losses.items())))
assert script_losses == notebook_losses and len(notebook_losses) == RANKS   # every digit

# %%
draw.bars(None, fmt="{:.6f}", panels=[
    dict(values={f"rank {r}": float(notebook_losses[r]) for r in range(RANKS)}, ylabel=say("final loss", "最终损失"),
         title=say("the same run: in the notebook (%%ddp)", "同一次运行：在 notebook 中（%%ddp）")),
    dict(values={f"rank {r}": float(script_losses[r]) for r in range(RANKS)},
         title=say("... and under torchrun", "……以及在 torchrun 下"))])

# %% [markdown]
# **On a real cluster**, the same script runs with one torchrun per host, e.g. on 2 hosts of 4
# processes each:
#
# ```
# torchrun --nnodes 2 --nproc_per_node 4 --rdzv-backend c10d --rdzv-endpoint head:29500 train.py
# ```
#
# Three things change from one machine, whichever way the job starts:
#
# 1. **Interfaces.** Tell gloo which network to use (`GLOO_SOCKET_IFNAME=eth0` on every host, or
#    `%ddp_start --ifname eth0`), or it picks the address its hostname resolves to, which is
#    `127.0.1.1` on many Debian and Ubuntu hosts.
# 2. **The store.** torchrun's rendezvous store is a `TCPStore`: it has no authentication, so run
#    jobs on a private network, and give the hosts working (reverse) DNS or expect 10 s per
#    connection. ddplab's own pools across hosts use its signed store instead.
# 3. **Firewalls.** The ranks connect to each other on ports chosen at random: the hosts must
#    reach each other on every port of that network.

# %% [markdown] lang=zh
# **在真正的集群上**，同一个脚本在每台主机上各由一个 torchrun 运行，例如 2 台主机、每台 4 个进程：
#
# ```
# torchrun --nnodes 2 --nproc_per_node 4 --rdzv-backend c10d --rdzv-endpoint head:29500 train.py
# ```
#
# 无论作业以哪种方式启动，与单机相比都有三点不同：
#
# 1. **网络接口。** 告诉 gloo 使用哪个网络（在每台主机上设置 `GLOO_SOCKET_IFNAME=eth0`，或者 `%ddp_start --ifname eth0`），否则它会选用主机名解析出的地址，而在许多 Debian 和 Ubuntu 主机上，这个地址是 `127.0.1.1`。
# 2. **store。** torchrun 的集合点 store 是一个 `TCPStore`：它没有任何身份验证，所以要在私有网络上运行作业；还要让各主机的（反向）DNS 正常工作，否则每次连接都要多等 10 秒。ddplab 自己的跨主机进程池则使用它带签名的 store。
# 3. **防火墙。** 各 rank 之间通过随机选择的端口互相连接：主机之间在这个网络的所有端口上都必须能互相访问。

# %% [markdown]
# ## Exercises
#
# Write your answer in place of `...` and run the cell: `check` says whether it is right, and why.
#
# **17.1** Under torchrun on one machine, every process had `LOCAL_RANK` equal to its `RANK` (the
# table above). Now run the same script on 2 hosts with 4 processes on each (`torchrun --nnodes 2
# --nproc_per_node 4 ...` on both). What is the `RANK` of the process with `GROUP_RANK` 1
# and `LOCAL_RANK` 2? Answer with a whole number.

# %% [markdown] lang=zh
# ## 练习
#
# 把 `...` 换成你的答案并运行单元格：`check` 会告诉你答案对不对，以及为什么。
#
# **17.1** 在一台机器上用 torchrun 运行时，每个进程的 `LOCAL_RANK` 都等于它的 `RANK`（见上面的表格）。现在在 2 台主机上运行同一个脚本，每台主机上 4 个进程（两台都执行 `torchrun --nnodes 2 --nproc_per_node 4 ...`）。`GROUP_RANK` 为 1、`LOCAL_RANK` 为 2 的进程，`RANK` 是多少？请写一个整数。

# %%
answer = ...    # the RANK of the process with GROUP_RANK 1 and LOCAL_RANK 2
check("17.1", answer, per_host=4)

# %% [markdown]
# **17.2** After rank 2's host was lost, `%ddp_start 3 --connect` formed a group of the engines
# left. Suppose the cross-host cell that all-reduces `torch.ones(1) * (rank + 1)` ran again in that
# group. What value would every rank print? Answer with a number.

# %% [markdown] lang=zh
# **17.2** rank 2 所在的主机失联后，`%ddp_start 3 --connect` 用剩下的引擎组成了一个进程组。假设那个跨主机的单元格（对 `torch.ones(1) * (rank + 1)` 做 all-reduce）在这个进程组里再运行一次，每个 rank 会打印什么值？请写一个数。

# %%
answer = ...    # what every rank prints: the all-reduce of rank + 1 in the group of the engines left
check("17.2", answer, ranks_left=3, lost_rank=2, world_before=4)

# %% [markdown]
# **17.3** In the training that torchrun ran again, 512 samples were split by the `DistributedSampler`
# over 4 processes, in batches of 32, for 3 epochs. How many optimizer steps did each process take?
# (With 4 ranks, check it with `%ddp_history`: the points each rank logged.) Answer with a whole number.

# %% [markdown] lang=zh
# **17.3** 在 torchrun 重新运行的那次训练中，512 个样本由 `DistributedSampler` 分给 4 个进程，批大小 32，训练 3 个 epoch。每个进程做了多少步优化器更新？（用 4 个 rank 运行时，可以用 `%ddp_history` 核对：每个 rank 记录的数据点。）请写一个整数。

# %%
answer = ...    # optimizer steps per process
check("17.3", answer, samples=512, processes=4, batch=32, epochs=3)

# %% [markdown]
# **17.4** A script that starts its processes itself gives each one `RANK` and `WORLD_SIZE`, and calls
# `dist.init_process_group("gloo")` with no `init_method`, as the hand-started run above did. Which
# two environment variables must it set as well, the same in every process? Answer with their two
# names, like `("A", "B")`.

# %% [markdown] lang=zh
# **17.4** 一个自己启动各进程的脚本，给每个进程设置了 `RANK` 和 `WORLD_SIZE`，并像上面手动启动的那次运行一样，不指定 `init_method` 就调用 `dist.init_process_group("gloo")`。它还必须设置哪两个环境变量（每个进程都相同）？请写出这两个名字，例如 `("A", "B")`。

# %%
answer = ...    # the two variables besides RANK and WORLD_SIZE
check("17.4", answer, error=error)

# %%
%ddp_stop
