"""A pool across 4 hosts: network namespaces on one machine (ddplab/lessons/hosts.py), each with its
own address, hostname and no working DNS, an ipcontroller on the bridge and one ipengine per host,
then %ddp_start --connect. Needs root (CI and this machine run as root); where it cannot make the
namespaces it fails saying why."""
import re
import time

import pytest
from IPython.core.error import UsageError

from ddplab.errors import RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("hosts")]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def hosts():
    from ddplab.lessons.hosts import Hosts, HostsUnavailable, check

    why = check()
    if why:
        pytest.fail(f"cannot make 4 hosts from network namespaces here: {why}")
    try:
        with Hosts(4) as made:
            yield made
    except HostsUnavailable as exc:
        pytest.fail(f"cannot make 4 hosts from network namespaces here: {exc}")


def registered(hosts, n, timeout=60):
    """Wait until n engines are registered; import torch in them (what a first cell would), so that
    what is timed next is the group, not torch's import."""
    import ipyparallel as ipp

    client = ipp.Client(hosts.client_file)
    try:
        client.wait_for_engines(n, timeout=timeout, interactive=False)
        client[:].execute("import torch, torch._dynamo, torch.distributed", block=True)
        return len(client.ids)
    finally:
        client.close()


def ddp(ip, cell, line=""):
    return ip.run_cell(f"%%ddp {line}\n{cell}")


def test_a_pool_attached_to_four_hosts(ip, no_pool, hosts, capsys):
    assert registered(hosts, 4) == 4
    tic = time.perf_counter()
    ip.run_line_magic("ddp_start", f"--connect {hosts.client_file} --threads 1")
    took = time.perf_counter() - tic
    lab = no_pool.lab
    out = capsys.readouterr().out
    assert "4 ranks ready" in out and "on 4 hosts" in out, out
    assert took < 10, took  # bench/hosts.py measures it (the goal: 3 s)

    # every rank: its own host and address, gloo on that host's interface
    ip.run_line_magic("ddp_status", "")
    status = capsys.readouterr().out
    for r, (host, address) in enumerate(zip(hosts.hostnames, hosts.addresses)):
        assert re.search(rf"^{r}\s+\d+\s+\d+\s+{host}\s+{re.escape(address)} \(eth0\)\s+1\s+ready$", status, re.M), status
    assert ddp(ip, "import os\nt = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\n"
                   "print(os.environ['GLOO_SOCKET_IFNAME'], t.item())").success
    out = capsys.readouterr().out
    assert all(f"[rank {r}] eth0 10.0" in out for r in range(4)), out

    # DDP training: the same parameters on every rank; every rank's points reach the dashboard
    from ddplab.dashboard.widget import Dashboard

    board = lab.view = Dashboard(4)
    assert ddp(ip, "from ddplab.workloads import train_ddp\nsummary = train_ddp(steps=30)").success
    summaries = ip.run_line_magic("ddp_gather", "summary")
    assert len({s["checksum"] for s in summaries}) == 1
    assert [lab.run_state.ranks[r].points for r in range(4)] == [30] * 4
    assert board.table.value.count('data-state="done"') == 4 and board.frames >= 1
    assert len(lab.history().where(cell=lab.run_state.cell)) == 4 * 30
    capsys.readouterr()

    # a rank that raises frees the others at once, across hosts too
    tic = time.monotonic()
    res = ddp(ip, "if rank == 1:\n    raise ValueError('boom on h2')\nt = torch.ones(1)\ndist.all_reduce(t)")
    assert time.monotonic() - tic < 20
    assert isinstance(res.error_in_exec, RankFailed) and res.error_in_exec.ranks[0] == 1
    report = ANSI.sub("", "\n".join(res.error_in_exec.report()))
    assert "rank 1 failed" in report and "h2" in report and "group re-formed" in report
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)").success

    # a host is lost in the middle of a cell: named like a local death, control back within 10 s
    import threading

    loss = threading.Timer(1.0, hosts.lose, (2,))  # rank 2 is on h3: it goes a second into the cell
    loss.start()
    tic = time.monotonic()
    res = ddp(ip, "import time\nfor _ in range(400):\n    t = torch.ones(1)\n    dist.all_reduce(t)\n"
                  "    time.sleep(0.05)")
    seconds = time.monotonic() - tic - 1.0
    loss.join()
    report = ANSI.sub("", "\n".join(res.error_in_exec.report()))
    assert seconds < 10, (seconds, report)
    assert re.search(r"^rank 2 lost \(.*h3\): its engine is gone", report, re.M), report
    with pytest.raises(UsageError, match="started elsewhere"):
        ip.run_line_magic("ddp_restart", "")
    capsys.readouterr()

    # stop leaves the engines running and says so; --connect again groups the 3 that are left
    ip.run_line_magic("ddp_stop", "")
    out = capsys.readouterr().out
    assert "keep running" in out and "h1, h2, h4" in out, out
    assert registered(hosts, 3) == 3
    ip.run_line_magic("ddp_start", f"--connect {hosts.client_file} --threads 1")
    assert no_pool.lab.world_size == 3 and "3 ranks ready" in capsys.readouterr().out
    assert ddp(ip, "t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item(), socket_host := __import__('socket')"
                   ".gethostname())").success
    out = capsys.readouterr().out
    assert [f"[rank {r}] 3.0 {h}" in out for r, h in enumerate(["h1", "h2", "h4"])] == [True] * 3, out

    # --shutdown: the engines and their controller end too
    ip.run_line_magic("ddp_stop", "--shutdown")
    assert "shut down its 3 engines" in capsys.readouterr().out
    deadline = time.monotonic() + 15
    while any(p.poll() is None for p in hosts.engines.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(p.poll() is not None for p in hosts.engines.values())
