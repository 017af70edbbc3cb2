"""Only the notebook's owner can talk to the pool. A second Unix user attacks running pools: every
listening socket and socket file of their processes, every file of their private folders. Nothing
of theirs runs, nothing is read, the pools still train right, and what was dropped is shown."""
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
from html import escape

import psutil
import pytest

from ddplab import Lab
from ddplab.dashboard import html
from ddplab.pool import LocalPool

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = ("from ddplab.workloads import train_ddp\nsummary = train_ddp(steps=30)\n"
         "print('trained', summary['loss'] < 2.3)")


@pytest.fixture(scope="module")
def intruder():
    """A second Unix user, made for this test and removed after it."""
    if os.geteuid() != 0:
        pytest.fail("this test makes a second Unix user and needs root (CI and this machine run as root)")
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: cannot make a second user to attack the pool as")
    name = f"ddplab-intruder-{secrets.token_hex(3)}"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.fail(f"could not make a second user: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def tcp_pool():
    """A pool whose telemetry listens on TCP, as a pool with ranks on other hosts does (signed)."""
    original = LocalPool.telemetry_where
    LocalPool.telemetry_where = lambda self: "tcp://127.0.0.1"
    try:
        lab = Lab(2).start()
    finally:
        LocalPool.telemetry_where = original
    yield lab
    lab.stop()


def listening(lab):
    """Every TCP listener and socket file of the pool's processes and of this process's telemetry."""
    tcp, unix = set(), set()
    for pid in lab.pids() + [os.getpid()]:
        for c in psutil.Process(pid).net_connections("all"):
            if c.type == 1 and c.status == psutil.CONN_LISTEN and isinstance(c.laddr, tuple):
                tcp.add((c.laddr.ip, c.laddr.port))
            elif c.family == 1 and c.laddr:  # AF_UNIX with a path
                unix.add(c.laddr)
    if lab.telemetry.address.startswith("ipc://"):
        unix.add(lab.telemetry.address[len("ipc://"):])
    return sorted(tcp), sorted(unix)


def run_as(user, args):
    """Run the intruder script as `user` with a Python it can execute (the owner's may sit in /root)."""
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if python is None:
        pytest.fail("no system python3 for the second user to run (install Debian's python3)")
    box = tempfile.mkdtemp(prefix="ddplab-intruder-")
    os.chmod(box, 0o755)
    script = shutil.copy(os.path.join(HERE, "intruder.py"), box)
    os.chmod(script, 0o644)
    files = []
    for i, arg in enumerate(args):
        if isinstance(arg, dict):
            path = os.path.join(box, f"plan{i}.json")
            with open(path, "w") as f:
                json.dump(arg, f)
            os.chmod(path, 0o644)
            files.append(path)
        else:
            files.append(arg)
    try:
        out = subprocess.run(["runuser", "-u", user, "--", python, "-I", script, *files], capture_output=True,
                             text=True, timeout=180, cwd="/")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    finally:
        shutil.rmtree(box, ignore_errors=True)


def private_files(folder):
    """Files or folders under `folder` that someone other than the owner could read."""
    loose = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            if stat.S_IMODE(os.lstat(path).st_mode) & 0o077:
                loose.append((path, oct(stat.S_IMODE(os.lstat(path).st_mode))))
    return loose


def test_another_user_can_neither_run_code_nor_read_nor_disturb(intruder, pool, tcp_pool, capfd):
    from ddplab.zygote import running_zygote

    pool.run("t = torch.ones(1)\ndist.all_reduce(t)")  # every listener is up (gloo's too)
    marker = f"/tmp/ddplab-pwned-{secrets.token_hex(4)}"
    folders = [pool.pool.workdir, tcp_pool.pool.workdir, running_zygote().workdir]
    for folder in folders:
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert private_files(folder) == []
    tcp, unix = zip(*(listening(lab) for lab in (pool, tcp_pool)))
    plan = {"tcp": sorted({t for ts in tcp for t in ts}), "unix": sorted({u for us in unix for u in us}),
            "folders": folders}
    assert len(plan["tcp"]) >= 8 and any(p.endswith("/telemetry") for p in plan["unix"])
    assert [tcp_pool.telemetry.address.rsplit(":", 1)[1]] == [str(p) for h, p in plan["tcp"]
                                                               if str(p) == tcp_pool.telemetry.address.rsplit(":", 1)[1]]
    report = run_as(intruder, [plan, marker])

    assert report["uid"] == pwd.getpwnam(intruder).pw_uid != 0
    assert any(report["tcp"].values()), report  # it did reach the TCP sockets (loopback is not private) ...
    assert not os.path.exists(marker)  # ... yet nothing it sent ran
    assert report["unix"] and not any(report["unix"].values()), report  # the socket files: not even reached
    assert report["read"] == []  # nothing of the folders

    # the pools train as before, with every rank's output, and no traceback reached the notebook
    for lab in (pool, tcp_pool):
        result = lab.run(TRAIN)
        assert result.stdout == ["trained True\n"] * lab.world_size
        summaries = lab.gather("summary")
        assert len({s["checksum"] for s in summaries}) == 1
    err = capfd.readouterr().err
    assert "Traceback" not in err and "DELIM" not in err, err[-2000:]

    # ipyparallel's client dropped the junk its controller relayed, and said so once
    assert any(topic[0] == "ipyparallel" for topic in pool.run_state.notices), pool.run_state.notices

    # the signed telemetry dropped the unsigned batches, and the dashboard says so, once, per sender
    drops = {topic: text for topic, text in tcp_pool.run_state.notices.items() if topic[0] == "unsigned"}
    assert drops, tcp_pool.run_state.notices
    header = html.header("", tcp_pool.run_state, tcp_pool.metrics, 0.0)
    assert any("unsigned telemetry messages dropped from 127.0.0.1" in text for text in drops.values()), drops
    for text in drops.values():
        assert header.count(escape(text)) == 1
    assert tcp_pool.run_state.ranks[0].points == 30 and tcp_pool.run_state.ranks[1].points == 30  # the real ones
