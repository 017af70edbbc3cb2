"""Only the notebook's owner can use the pool. A second Unix user attacks running pools: it listens on
every socket, sends junk to every listener while cells run, plants a folder for compiled code, and
replays telemetry. Nothing is read, no cell waits without bound, nothing compiled lands in its
folder, and what was dropped is counted and shown.

Two local pools are attacked: the session's (forked into a network namespace of its own: no port
of it is reachable) and one that lives on the machine's network as where the machine refuses a
private namespace (engines started by ipyparallel: gloo on the shared loopback) with its telemetry
on TCP, as a pool across hosts has it."""
import os
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from html import escape

import pytest
import zmq

from ddplab import Lab
from ddplab.dashboard import html
from ddplab.processes.localpool import LocalPool
from ddplab.shared.errors import RankFailed
from ddplab.shared.members import member_socket
from ddplab.shared.privacy import folder_problem, tcp_listeners

from .second_user import finish, make_user, start_as

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]
TRAIN = ("from ddplab.workloads import train_ddp\nsummary = train_ddp(steps=30)\n"
         "print('trained', summary['loss'] < 2.3)")


@pytest.fixture(scope="module")
def intruder():
    yield from make_user()


@pytest.fixture(scope="module")
def exposed():
    """A pool on the machine's network (gloo on loopback), its telemetry on TCP (members only) and its
    rendezvous store on rank 0 (members only)."""
    original = LocalPool.telemetry_where
    LocalPool.telemetry_where = lambda self: "tcp://127.0.0.1"
    try:
        lab = Lab(2, launcher="local-spawn", rendezvous="tcp://127.0.0.1:0").start()  # (rank 0 serves the store)
    finally:
        LocalPool.telemetry_where = original
    yield lab
    lab.stop()


def targets(*labs):
    """Every TCP listener of the pools' processes (read in their own network namespaces), their socket
    files, and their private folders."""
    tcp, unix, folders = set(), set(), []
    for lab in labs:
        for pid in lab.pids():
            tcp.update(tcp_listeners(pid))
        for root, _, files in os.walk(lab.pool.workdir):
            unix.update(os.path.join(root, f) for f in files if stat.S_ISSOCK(os.lstat(os.path.join(root, f)).st_mode))
        if lab.telemetry.address.startswith("tcp://"):
            host, port = lab.telemetry.address[len("tcp://"):].rsplit(":", 1)
            tcp.add((host, int(port)))
        folders.append(lab.pool.workdir)
    return {"tcp": sorted(tcp), "unix": sorted(unix), "folders": folders}


def test_another_user_reads_nothing_a_pool_prints_or_returns(intruder, pool, exposed):
    secret = secrets.token_hex(8)
    plan = targets(pool, exposed)
    assert any(p.endswith("/telemetry") for p in plan["unix"]) and len(plan["unix"]) >= 20  # ipyparallel's files too
    ranks = {i["pid"] for lab in (pool, exposed) for i in lab.info}
    assert {pid: tcp_listeners(pid) for lab in (pool, exposed) for pid in lab.pids() if pid not in ranks} == \
        {pid: [] for lab in (pool, exposed) for pid in lab.pids() if pid not in ranks}  # no port of ipyparallel's
    exposed_ports = {f"{ip}:{port}" for i in exposed.info for ip, port in tcp_listeners(i["pid"])}  # gloo's, the store
    # a socket that does publish the secret on loopback: what the intruder hears there shows it listens well
    control = zmq.Context.instance().socket(zmq.PUB)
    port = control.bind_to_random_port("tcp://127.0.0.1")
    proc, box = start_as(intruder, "listen", {**plan, "seconds": 8, "secret": secret, "control": ["127.0.0.1", port]})
    try:
        time.sleep(2)  # connected and subscribed
        for _ in range(3):
            for lab in (pool, exposed):
                result = lab.run(f"print('{secret}')\n'{secret}'")
                assert result.stdout == [f"{secret}\n"] * lab.world_size
                assert result[0].result["text/plain"] == f"'{secret}'"
            control.send(secret.encode())
            time.sleep(0.5)
        report = finish(proc, box)
    finally:
        control.close(0)
    assert report["control"]["secret"], report  # it hears what a PUB socket on loopback says ...
    assert report["unix"] and not any(report["unix"].values()), report  # ... cannot open a socket file ...
    assert not any(r["secret"] for r in report["tcp"].values()), report  # ... and hears nothing of the pools
    reached = {k for k, r in report["tcp"].items() if r["connected"]}
    assert reached and reached <= exposed_ports | {exposed.telemetry.address[len("tcp://"):]}, report
    assert not reached & {f"127.0.0.1:{p}" for i in pool.info for p in i["ports"]}  # its own namespace


def bounded(lab, code, limit, timeout=None):
    """Run a cell; (ok, what it said) once it ended, which must be within `limit` seconds."""
    tic = time.monotonic()
    try:
        result = lab.run(code, timeout=timeout)
        ok, said = True, result.stdout
    except RankFailed as exc:
        ok, said = False, "\n".join(exc.report())
    took = time.monotonic() - tic
    assert took < limit, (took, said)
    assert "BadTransition" not in str(said) and "Traceback (most recent call last)" not in str(said)[:200], said
    return ok, said


def test_junk_from_another_user_ends_every_cell_in_bounded_time(intruder, pool, exposed, capfd):
    marker = f"/tmp/ddplab-pwned-{secrets.token_hex(4)}"
    plan = targets(pool, exposed)
    loop = ("import time\nt = torch.ones(1000)\nfor _ in range(150):\n    dist.all_reduce(t)\n"
            "    time.sleep(0.01)\nprint('done', t[0].item())")
    proc, box = start_as(intruder, "junk", {**plan, "seconds": 15, "marker": marker})
    outcomes = []
    deadline = time.monotonic() + 14
    while time.monotonic() < deadline:  # cells right before junk arrives, and all_reduce while it does
        for lab in (pool, exposed):
            bounded(lab, "x = 1", 30)
            ok, said = bounded(lab, loop, 30 + lab.timeout, timeout=30)
            outcomes.append(ok)
            if not ok:  # a clear error, and the next cell works
                assert "rank" in said, said
                assert bounded(lab, "t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())", 30)[1] == \
                    [f"{float(lab.world_size)}\n"] * lab.world_size
    report = finish(proc, box)
    assert report["rounds"] >= 2 and report["uid"] != 0, report
    assert any(report["tcp"].values()), report  # it did reach the exposed pool's TCP sockets ...
    assert not os.path.exists(marker)  # ... yet nothing it sent ran
    assert report["unix"] and not any(report["unix"].values()) and report["read"] == [], report
    assert outcomes.count(True) >= len(outcomes) // 2, outcomes  # junk at gloo's ports rarely breaks a collective
    for lab in (pool, exposed):  # both train as before, with every rank's output
        result = lab.run(TRAIN)
        assert result.stdout == ["trained True\n"] * lab.world_size
        assert len({s["checksum"] for s in lab.gather("summary")}) == 1
    err = capfd.readouterr().err
    assert "Traceback" not in err and "DELIM" not in err, err[-2000:]
    # the telemetry socket on TCP refused every connection without the pool's key (its handshake: not a
    # frame of it was read, so nothing unsigned even arrived), and the dashboard says so, once
    assert exposed.telemetry.refused > 0 and not [t for t in exposed.run_state.notices if t[0] == "unsigned"]
    drops = {topic: text for topic, text in exposed.run_state.notices.items() if topic == ("refused", "telemetry")}
    assert [re.sub(r"^\d+ ", "N ", t) for t in drops.values()] == \
        ["N connection(s) without the pool's key refused by the telemetry socket"], exposed.run_state.notices
    header = html.header("", exposed.run_state, exposed.metrics, 0.0)
    for text in drops.values():
        assert header.count(escape(text)) == 1


def test_a_replayed_telemetry_message_is_dropped_and_counted(exposed):
    """A batch sent again (over TCP, from a new connection: as someone who saw it on the network
    would), or one of an earlier forming of the group, is dropped, counted and shown once."""
    from ddplab.shared import wire

    exposed.run("for s in range(5):\n    ddplab.log(loss=1.0, samples=1)")
    gen, seq = exposed.telemetry.last_accepted(0)
    assert gen == exposed.group.generation and seq >= 1

    def batch(gen, seq):  # what rank 0 sent (signed with the pool's key, its own counters)
        cols = {c: __import__("array").array("q" if c == "step" else "d", [0]) for c in wire.COLUMNS}
        return wire.encode(exposed.telemetry.key, 0, 1, cols, gen=gen, seq=seq)

    sent, earlier = batch(gen, seq), batch(gen - 1, seq + 100)
    before = dict(exposed.telemetry.dropped)
    # (as a member: someone who had the pool's member key pair, say from an unencrypted ipyparallel channel)
    sock = member_socket(zmq.DEALER, exposed.telemetry.public, exposed.telemetry.member)
    sock.connect(exposed.telemetry.address)
    try:
        sock.send_multipart(sent)
        sock.send_multipart(earlier)
        time.sleep(0.5)
        result = exposed.run("for s in range(3):\n    ddplab.log(loss=2.0, samples=1)")
    finally:
        sock.close(0)
    new = {k: v - before.get(k, 0) for k, v in exposed.telemetry.dropped.items() if v != before.get(k, 0)}
    assert {why for why, _ in new} == {"replayed", "late"} and sum(new.values()) == 2, new
    assert result.seconds < 10 and exposed.run_state.ranks[0].points == 3  # the real batches still count
    replays = [text for topic, text in exposed.run_state.notices.items() if topic[0] == "replayed"]
    assert replays == ["1 replayed telemetry message dropped from 127.0.0.1 (not from this pool's ranks: ignored)"], \
        exposed.run_state.notices


def test_compiled_code_never_lands_in_a_folder_someone_else_made(intruder, pool):
    """The other user makes torch's default cache folder (/tmp/torchinductor_USER, 0777) and the
    folder the owner configured, before the ranks compile: both are refused, with a message, and
    what torch.compile writes lands in a private folder."""
    from ddplab.shared.config import tunables

    default = "/tmp/torchinductor_" + __import__("getpass").getuser()
    aside = None
    if os.path.lexists(default):  # (made by an earlier compile of the owner's: the intruder must make it)
        aside = f"{default}.aside-{secrets.token_hex(3)}"
        os.rename(default, aside)
    planted = f"/tmp/ddplab-planted-{secrets.token_hex(3)}"
    t = tunables()
    configured = t.compile_cache
    try:
        for folder in (default, planted):
            made = subprocess.run(["runuser", "-u", intruder, "--", "mkdir", "-m", "777", folder],
                                  capture_output=True, text=True)
            assert made.returncode == 0, made.stderr
        t.compile_cache = planted
        pool.restart()  # formed again: the folder is checked before every use
        refused = [text for warning, text in pool.report.exposure() if warning]
        assert any(f"torch.compile's cache {planted} was refused (it belongs to {intruder})" in w for w in refused), refused
        used = {i["compile_cache"] for i in pool.info}
        assert len(used) == 1 and folder_problem(used.pop()) is None
        result = pool.run("f = torch.compile(lambda x: torch.sin(x) + x)\nprint(f(torch.ones(3)).sum().item())",
                          ranks=[0])
        assert float(result.stdout[0]) == pytest.approx(3 * 1.8414709848078965, rel=1e-5)
        assert os.listdir(default) == [] and os.listdir(planted) == []  # nothing of the compile in their folders
        compiled = [f for _, _, files in os.walk(pool.info[0]["compile_cache"]) for f in files]
        assert any(f.endswith((".so", ".py")) for f in compiled), compiled
    finally:
        t.compile_cache = configured
        shutil.rmtree(default, ignore_errors=True)
        shutil.rmtree(planted, ignore_errors=True)
        if aside:
            os.rename(aside, default)
        pool.restart()
    assert [text for warning, text in pool.report.exposure() if warning] == []


def test_an_account_without_root_gets_a_private_network_too(intruder):
    """The zygote's isolate() as an unprivileged user (a student's account): a user namespace that maps
    the user to itself, with a network namespace of its own whose loopback works."""
    import ddplab.processes.zygote
    import ddplab.shared.upstream

    box = tempfile.mkdtemp(prefix="ddplab-isolate-")
    os.chmod(box, 0o755)
    script = os.path.join(box, "probe.py")
    with open(script, "w") as f:
        source = open(ddplab.processes.zygote.__file__).read().replace('if __name__ == "__main__":', "if False:")
        source = source.replace("from ..shared import upstream", "sys.path.insert(0, os.path.dirname(__file__))\nimport upstream")
        f.write(source + '''
import json, socket
before, uid = os.readlink("/proc/self/ns/net"), os.getuid()
why = isolate()
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
client = socket.create_connection(server.getsockname(), timeout=2)
print(json.dumps({"why": why, "uid_kept": os.getuid() == uid, "own_net": os.readlink("/proc/self/ns/net") != before,
                  "interfaces": sorted(name for _, name in socket.if_nameindex())}))
''')
    shutil.copy(ddplab.shared.upstream.__file__, box)  # (the zygote's one import of ddplab's own)
    os.chmod(script, 0o644)
    try:
        out = subprocess.run(["runuser", "-u", intruder, "--", "/usr/bin/python3", "-I", script], capture_output=True,
                             text=True, timeout=60, cwd="/")
    finally:
        shutil.rmtree(box, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    report = __import__("json").loads(out.stdout)
    assert report == {"why": None, "uid_kept": True, "own_net": True, "interfaces": ["lo"]}, report


def test_an_oversized_message_from_a_stranger_is_never_held(exposed):
    """zmq assembles a multi-frame message whole before anyone reads a frame (MAXMSGSIZE bounds each
    frame, not the message). On ddplab's TCP sockets only members get past the handshake: a stranger's
    256 MiB in one message is refused unread, by the notebook's telemetry and by rank 0's store."""
    import socket
    import struct

    import psutil

    telemetry = exposed.telemetry.address[len("tcp://"):].rsplit(":", 1)
    store = exposed.group.where[len("signed://"):].rsplit(":", 1)
    holders = {"telemetry": psutil.Process(), "store": psutil.Process(exposed.info[0]["pid"])}
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32  # ZMTP 3.0, no CURVE
    frame = b"\x03" + struct.pack(">Q", 4 << 20) + bytes(4 << 20)  # 4 MiB, "more" set: one message goes on
    for name, (host, port) in (("telemetry", telemetry), ("store", store)):
        before, sent = holders[name].memory_info().rss, 0
        with socket.create_connection((host, int(port)), timeout=5) as s:
            try:
                s.sendall(greeting)
                for _ in range(64):
                    s.sendall(frame)
                    sent += len(frame)
            except OSError:  # refused: the connection closed under it
                pass
        time.sleep(0.5)
        grown = holders[name].memory_info().rss - before
        assert sent < 32 << 20 and grown < 16 << 20, (name, sent, grown)  # (a socket buffer's worth at most)
    result = exposed.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())")
    assert result.stdout == ["2.0\n", "2.0\n"]
