"""A pool across 4 hosts (network namespaces, ddplab/lessons/hosts.py: needs root), engines
registered and torch imported in them:
- `%ddp_start --connect` until the gloo group has formed (<= 3 s), beside the bare way: every
  engine calling `init_process_group(init_method="tcp://<rank 0>:PORT")`, whose TCPStore clients
  look up their own address's name on every connection (10 s each where DNS does not answer);
- how long after a host is lost the notebook has control back, naming it (<= 10 s).
"""
import os
import subprocess
import sys
import time

from ddplab.shared.errors import RankFailed, RankLost

from .common import result

BARE = """\
import datetime, os, sys, time
import torch.distributed as dist
rank, host = int(sys.argv[1]), sys.argv[2]
os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
dist.init_process_group("gloo", init_method=f"tcp://{host}:29511", rank=rank, world_size=4,
                        timeout=datetime.timedelta(seconds=120))
dist.barrier()
"""


def bare(hosts):
    """Seconds until 4 plain processes, one per host, have formed a group with a TCPStore."""
    script = os.path.join(hosts.profile, "bare.py")
    with open(script, "w") as f:
        f.write(BARE)
    tic = time.perf_counter()
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, script, str(r), hosts.addresses[0]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for r, ns in enumerate(hosts.names)]
    for p in procs:
        p.wait(300)
    return time.perf_counter() - tic


def run(quick=False):
    from ddplab import Lab
    from ddplab.lessons.hosts import Hosts, check

    why = check()
    if why:
        print(f"   hosts: not measured ({why})")
        return []
    import ipyparallel as ipp

    n, repeats = (2, 1) if quick else (4, 3)
    formed, lost_after, bare_s = [], [], []
    with Hosts(n) as hosts:
        client = ipp.Client(hosts.client_file)
        client.wait_for_engines(n, timeout=120, interactive=False)
        client[:].execute("import torch, torch._dynamo, torch.distributed", block=False).get(timeout=120)
        client.close()
        if not quick:
            bare_s.append(bare(hosts))
        for _ in range(repeats):
            tic = time.perf_counter()
            lab = Lab(connect=hosts.client_file, threads_per_rank=1).start()
            formed.append(time.perf_counter() - tic)
            lab.stop()
        lab = Lab(connect=hosts.client_file, threads_per_rank=1).start()
        tic = time.perf_counter()
        hosts.lose(n - 1)
        try:
            lab.run("import time\nfor _ in range(1000):\n    t = torch.ones(1); dist.all_reduce(t); time.sleep(0.02)")
        except (RankFailed, RankLost):  # naming the lost rank: what is measured (its time, not its text)
            pass
        lost_after.append(time.perf_counter() - tic)
        lab.stop()
    rows = [result("hosts_group", f"%ddp_start --connect to {n} hosts until the group has formed (s; engines "
                   "registered, torch imported)", formed, unit="s", target=("<=", 3.0),
                   bare_init_process_group_s=bare_s),
            result("hosts_lost", "a host lost in the middle of a cell: seconds until the cell returns, naming it",
                   lost_after, unit="s", target=("<=", 10.0))]
    return rows
