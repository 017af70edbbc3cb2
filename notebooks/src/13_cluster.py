# %% [markdown]
# # Lesson 13 · From the notebook to a cluster
#
# **In short.** So far every rank ran on this machine. On a cluster each host brings its own cores,
# and the same code runs there: ipyparallel starts engines on the hosts (by SSH, MPI or a Slurm job,
# or you start `ipengine` by hand), and `%ddp_start --connect` makes every engine a rank of one gloo
# group. Here you attach to 4 hosts, see what changes (each rank's own address and interface, the
# rendezvous, a host that is lost), and then turn the notebook into a script that `torchrun` runs,
# ending with the same losses, digit for digit.
#
# **简介。** 到目前为止，所有 rank 都在本机上运行。在集群上，每台主机都有自己的 CPU 核心，
# 而同样的代码可以照样运行：ipyparallel 在各台主机上启动引擎（通过 SSH、MPI 或 Slurm 作业，
# 或者你亲手运行 `ipengine`），`%ddp_start --connect` 把每个引擎变成同一个 gloo 进程组里的一个
# rank。本课连接到 4 台主机，看看有什么不同（每个 rank 有自己的地址和网卡、集合点
# rendezvous、一台主机失联），然后把 notebook 变成一个 `torchrun` 能运行的脚本，最后得到的
# 损失逐位相同。
#
# **You will see:** 4 hosts and the ranks on them, an all-reduce across hosts, a host lost and
# the group formed again on the 3 left, and the notebook's training run again by `torchrun`.

# %%
%load_ext ddplab
import re
import sys
import tempfile

from ddplab.lessons import draw, lab, say
from ddplab.lessons.hosts import hosts_or_local

# %% [markdown]
# ## Four hosts
#
# A real cluster needs real machines. Here, as root on Linux, each "host" is a **network
# namespace**: its own network interfaces, its own address (10.77.0.11 to .14) on a bridge, its
# own hostname (h1 to h4), and, as on many cluster nodes, no DNS that answers. An ipyparallel
# controller listens on the bridge (10.77.0.1), and one `ipengine` runs on each host, started the
# way you would start it by hand on a real one:
#
# ```
# ipcontroller --ip=10.77.0.1                                   # on the head node
# ipengine --file=~/.ipython/profile_default/security/ipcontroller-engine.json   # on each host
# ```
#
# Without root (or on a Mac), the same cell starts 4 engines on this machine instead, and the lesson
# runs the same way, but every rank has the same host and address.

# %%
hosts = hosts_or_local(4)
print(f"4 hosts as {hosts.kind}; the controller's connection file: {hosts.client_file}")

# %% [markdown]
# `%ddp_start --connect` attaches to the engines of that controller, through the same
# `ipcontroller-client.json` that `ipyparallel.Client` reads. `4` waits until 4 engines have
# registered. Every engine becomes a rank, ordered by host, then engine id. (`%ddp_start --profile
# NAME` attaches to the cluster that `ipcluster start --profile NAME` made; see the README.)

# %%
%ddp_start 4 --connect {hosts.client_file} --threads 1

# %% [markdown]
# Before it forms the group, ddplab asks every engine where it is: which of its addresses reaches
# the controller (the route its packets take: no name lookup, whatever its hostname resolves to),
# on which interface. Each rank then pins gloo to that interface (`GLOO_SOCKET_IFNAME`), so a host
# with several networks (these have a second one, `mgmt0`) uses the right one. `%ddp_status`
# shows it:

# %%
%ddp_status

# %%
controller = f"controller {hosts.controller_address}"
draw.hosts(lab().status(), controller, title=say("4 hosts, one rank each", "4 台主机，每台一个 rank"))

# %% [markdown]
# ## The same code, across hosts
#
# A cell runs on every rank as before. Each rank prints its hostname and the interface gloo uses:

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
# address when it connects. Where DNS does not answer (these hosts, many cluster nodes) each lookup
# waits 10 s: 4 hosts took 13 to 20 s to form a group here. ddplab's rank 0 serves a small store of
# its own instead, on its own address only, that signs every message with the pool's key and looks
# up no names: the group above formed in a fraction of a second.
#
# DDP works as on one machine: every rank ends with the same parameters.

# %%
%%ddp
from ddplab.workloads import train_ddp
summary = train_ddp(steps=60)
print(f"{socket.gethostname()}: loss {summary['loss']:.4f}, {summary['samples_per_s']:.0f} samples/s")

# %%
summaries = %ddp_gather summary
assert len({s["checksum"] for s in summaries}) == 1   # identical parameters on every host
print("parameters identical on every host:", len({s["checksum"] for s in summaries}) == 1)

# %% [markdown]
# ## A host is lost
#
# On a cluster, a host can fail in the middle of a run. Here rank 2's host goes away a second into
# the next cell: its engine and the engine's nanny are killed at once, with no goodbye, while every
# rank all-reduces. The other ranks' connections to it break; the controller stops hearing the
# engine (ipyparallel's heartbeat); ddplab names the rank and its host, and gives you the notebook
# back within seconds.

# %%
import threading

lost_row = lab().status()[2]
threading.Timer(1.0, hosts.lose_host_of, (lost_row,)).start()

# %% tags=["raises-exception"]
%%ddp
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

# %%
%ddp_stop

# %%
%ddp_start 3 --connect {hosts.client_file} --threads 1

# %%
%%ddp
import socket
t = torch.ones(1)
dist.all_reduce(t)
print(socket.gethostname(), t.item())

# %% [markdown]
# `%ddp_stop --shutdown` stops the engines and their controller too (as `ipcluster stop` would).
# Then the 4 hosts are taken down.

# %%
%ddp_stop --shutdown
hosts.down()

# %% [markdown]
# ## The same job outside the lab: torchrun
#
# On a cluster you usually run a script, not a notebook: `torchrun` starts one process per rank on
# each host and sets its environment (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), from
# which `init_process_group` forms the group. `%ddp_export PATH` writes the `%%ddp` cells that ran
# successfully, in order, as such a script. Here is a deterministic training on a local pool of 2:

# %%
%ddp_start 2

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
print(f"rank {rank} final loss {loss.item()!r}")

# %%
script = tempfile.mkdtemp(prefix="ddplab-lesson13-") + "/train.py"
%ddp_export {script}
print(open(script).read()[:900])

# %% [markdown]
# The script forms the group from torchrun's environment, defines `rank`, `world_size`, `torch`,
# `dist`, `nn` and `ddplab` as the notebook's ranks had them (`ddplab.log` keeps its points in
# memory), and sets the same threads per rank. Run it, from the notebook, with torchrun:

# %%
notebook_losses = {int(r): v for r, v in re.findall(r"rank (\d) final loss ([-+0-9.e]+)", "".join(lab().last_result.stdout))}
run = !{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 {script}
script_losses = {int(r): v for r, v in re.findall(r"rank (\d) final loss ([-+0-9.e]+)", "\n".join(run))}
print("notebook:", notebook_losses)
print("torchrun:", script_losses)
assert script_losses == notebook_losses and len(notebook_losses) == 2   # every digit

# %%
draw.bars({f"{say('notebook', 'notebook')} r{r}": float(notebook_losses[r]) for r in (0, 1)}
          | {f"torchrun r{r}": float(script_losses[r]) for r in (0, 1)},
          ylabel=say("final loss", "最终损失"), title=say("the same run, two launchers", "同一次运行，两种启动方式"),
          fmt="{:.6f}")

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
#
# ## Exercises
#
# 1. Attach again with `--ifname mgmt0` (`%ddp_start 4 --connect ... --ifname mgmt0`). What does
#    ddplab say, and why can the ranks not use that network?
# 2. `%ddp_export` a lesson you did before (say lesson 3) and run it with torchrun. Which cells had
#    to be left out, and why?
# 3. In the exported script, replace `dist.init_process_group("gloo")` with
#    `dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=int(os.environ["RANK"]),
#    world_size=int(os.environ["WORLD_SIZE"]))`. What does each argument replace?
#
# ## 练习
#
# 1. 用 `--ifname mgmt0` 重新连接（`%ddp_start 4 --connect ... --ifname mgmt0`）。ddplab 说了什么？
#    为什么各个 rank 不能使用那个网络？
# 2. 用 `%ddp_export` 导出你之前做过的一课（比如第 3 课），再用 torchrun 运行它。哪些单元格被省略了，为什么？
# 3. 在导出的脚本中，把 `dist.init_process_group("gloo")` 换成
#    `dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=int(os.environ["RANK"]),
#    world_size=int(os.environ["WORLD_SIZE"]))`。每个参数替代了什么？

# %%
%ddp_stop
