"""What decides who else can reach a pool, checked without one: folders checked without following
links (and inside the pool's user namespace, the notebook's own check standing for folders whose
owner it cannot see), accounts counted through NSS and running processes, the setting an
administrator can change for a private namespace, the kernel's view of socket owners, and no key
in a log line."""
import io
import logging
import os
import socket
import time
from types import SimpleNamespace

import pytest

from ddplab.processes.owned import ipp_log
from ddplab.shared import privacy
from ddplab.shared.config import show_log


def test_a_symbolic_link_above_a_folder_is_followed_and_checked_not_trusted(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (real / "cache").mkdir(mode=0o700)
    (tmp_path / "via").symlink_to(real)
    assert privacy.folder_problem(tmp_path / "via" / "cache") is None  # a link of the user's own, to a safe place
    os.chmod(real, 0o777)  # where it leads, anyone may swap the folder: refused, though the link itself is fine
    assert "above it can be changed by others" in privacy.folder_problem(tmp_path / "via" / "cache")
    if os.geteuid() != 0:
        pytest.fail("the rest makes a link of another uid: run as root (CI and this machine do)")
    os.chmod(real, 0o755)
    os.lchown(tmp_path / "via", 54321, 54321)  # a link someone else owns can be pointed elsewhere at any time
    assert privacy.folder_problem(tmp_path / "via" / "cache") == f"{tmp_path / 'via'} above it is a symbolic link of uid 54321"


def test_inside_the_pools_user_namespace_the_notebooks_check_stands_for_unmapped_owners(tmp_path, monkeypatch):
    """In the pool's user namespace root's /home and another account's folder both show as the
    overflow uid: the rank accepts such a folder above only for the path the notebook checked."""
    if os.geteuid() != 0:
        pytest.fail("makes a folder of the overflow uid: run as root (CI and this machine do)")
    above = tmp_path / "home"
    above.mkdir(mode=0o755)
    (above / "cache").mkdir(mode=0o700)
    os.chown(above, 65534, 65534)
    monkeypatch.setattr(privacy, "overflow_uid", lambda: 65534)
    monkeypatch.setattr(privacy, "user_namespace", lambda: True)
    assert "above it can be changed by" in privacy.folder_problem(above / "cache")
    assert privacy.folder_problem(above / "cache", checked_outside=True) is None
    monkeypatch.setattr(privacy, "user_namespace", lambda: False)  # outside a namespace 65534 is just another account
    assert "above it can be changed by" in privacy.folder_problem(above / "cache", checked_outside=True)
    os.chmod(above, 0o777)  # whoever owns it: writable by all is never accepted
    monkeypatch.setattr(privacy, "user_namespace", lambda: True)
    assert "above it can be changed by others" in privacy.folder_problem(above / "cache", checked_outside=True)


def test_other_accounts_come_from_nss_and_from_running_processes(tmp_path, monkeypatch):
    me = os.getuid()
    people = [SimpleNamespace(pw_uid=me, pw_name="me", pw_shell="/bin/bash"),
              SimpleNamespace(pw_uid=1001, pw_name="ldapstudent", pw_shell="/bin/bash"),  # from LDAP, say
              SimpleNamespace(pw_uid=1002, pw_name="daemonish", pw_shell="/usr/sbin/nologin"),
              SimpleNamespace(pw_uid=5, pw_name="games", pw_shell="/bin/sh")]
    monkeypatch.setattr("pwd.getpwall", lambda: people)
    proc = tmp_path / "proc"
    for pid in ("1", "77", "78", "self"):
        (proc / pid).mkdir(parents=True)
    owners = {"1": 0, "77": 1777, "78": me}  # pid 77: an account NSS does not enumerate (SSSD's default)
    real_stat = os.stat
    monkeypatch.setattr(privacy.os, "stat", lambda p, *a, **k: SimpleNamespace(st_uid=owners[os.path.basename(p)])
                        if str(p).startswith(str(proc)) else real_stat(p, *a, **k))
    assert privacy.other_accounts(login_defs=str(tmp_path / "none"), proc=str(proc)) == ["ldapstudent", "uid 1777"]


def test_the_setting_that_refuses_a_private_namespace_is_named(tmp_path):
    def proc(**files):
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for path, text in files.items():
            (root / path.replace("__", "/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.replace("__", "/")).write_text(text)
        return str(root)

    cause, fix = privacy.namespace_refusal(proc(sys__kernel__apparmor_restrict_unprivileged_userns="1\n"))
    assert "AppArmor" in cause and "kernel.apparmor_restrict_unprivileged_userns=0" in fix
    cause, fix = privacy.namespace_refusal(proc(sys__user__max_user_namespaces="0\n"))
    assert "user.max_user_namespaces=15000" in fix
    cause, fix = privacy.namespace_refusal(proc(self__status="Name:\tpython\nSeccomp:\t2\n"))
    assert "seccomp" in cause and "--security-opt seccomp=" in fix
    assert privacy.namespace_refusal(proc(sys__user__max_user_namespaces="15000\n", self__status="Seccomp:\t0\n")) is None


def test_the_kernel_names_the_owner_of_the_other_end_of_every_connection():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        ours = {local: (remote, uid) for _, fd, local, remote, uid in privacy.connections()}
        assert ours[client.getsockname()] == (server.getsockname(), os.getuid())
        assert ours[accepted.getsockname()] == (client.getsockname(), os.getuid())
        assert server.getsockname() in privacy.listening().values()
        # the fast path (sock_diag) and /proc/net/tcp agree (on this socket: others come and go meanwhile)
        inode = os.fstat(client.fileno()).st_ino
        fast, slow = ([r for r in rows if r[0] == inode] for rows in (privacy.tcp_sockets(), privacy.tcp_table()))
        assert fast == slow == [(inode, privacy.ESTABLISHED, client.getsockname(), server.getsockname(), os.getuid())]
    finally:
        for s in (client, accepted, server):
            s.close()


def test_one_connection_is_looked_up_alone_in_either_family_and_its_closing_seen():
    """tcp_socket: the exact lookup a rank makes each second for its known gloo links (a dump of the table
    costs milliseconds however few sockets there are), IPv4 and dual-stack alike."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")):
        server = socket.create_server((host, 0), family=family, dualstack_ipv6=family == socket.AF_INET6)
        client = socket.create_connection(("127.0.0.1", server.getsockname()[1]))
        accepted, _ = server.accept()
        try:
            local, peer = ("127.0.0.1", accepted.getsockname()[1]), client.getsockname()  # (as sock_diag names them)
            assert privacy.tcp_socket(local, peer) == (privacy.ESTABLISHED, os.getuid())
            assert privacy.tcp_socket(peer, local) == (privacy.ESTABLISHED, os.getuid())
            assert privacy.tcp_socket(local, ("127.0.0.1", 1)) is None  # no such connection
            client.close()  # the peer went: our end is no longer established (CLOSE_WAIT until closed)
            deadline = time.monotonic() + 5
            while privacy.tcp_socket(local, peer)[0] == privacy.ESTABLISHED and time.monotonic() < deadline:
                time.sleep(0.01)
            assert privacy.tcp_socket(local, peer) == (8, os.getuid())  # TCP_CLOSE_WAIT
        finally:
            for s in (client, accepted, server):
                s.close()


def test_a_rank_reads_the_socket_table_only_when_it_has_new_sockets_and_cuts_when_a_link_closes_and_it_stopped(
        monkeypatch):
    from ddplab.rank import Rank
    from ddplab.shared import privacy as shared_privacy

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    rank, cuts, reads = Rank(), [], []
    rank.in_cell, rank.formed, rank.group_ports = True, True, {server.getsockname()[1]}
    monkeypatch.setattr(rank, "cut", lambda ports=(): cuts.append(set(ports)))
    real = shared_privacy.connections
    monkeypatch.setattr(shared_privacy, "connections", lambda: reads.append(1) or real())
    try:
        rank.free_from_closed_peer()
        assert len(reads) == 1 and len(rank._links) == 2 and not cuts  # both ends of the link, read once
        rank.free_from_closed_peer()
        assert len(reads) == 1 and not cuts  # the same sockets: each link looked up alone
        client.close()
        rank.recorder.opt_steps += 1  # the cell went on since the last look (a step): not looked at
        rank.free_from_closed_peer()
        assert not cuts
        rank.free_from_closed_peer()  # and then stopped (a collective waiting for the peer that went)
        assert len(reads) == 1 and cuts == [{server.getsockname()[1]}]  # a link closed: the rank cut its links
    finally:
        for s in (accepted, server):
            s.close()


def test_no_key_reaches_a_log_line(monkeypatch):
    """ipyparallel logs the script its SSH launcher runs, environment included (DDPLab.debug)."""
    from ddplab.shared.privacy import REDACT

    stream = io.StringIO()
    show_log("DEBUG")
    level = ipp_log.level
    ipp_log.setLevel(logging.DEBUG)  # (a pool started in this process set it to CRITICAL)
    handler = next(h for h in logging.getLogger("ddplab").handlers if getattr(h, "_ddplab", False))
    monkeypatch.setattr(handler, "stream", stream)
    key = os.urandom(16).hex()
    REDACT.hide(key, b"\x00member-secret\x01")
    try:
        ipp_log.debug("Running script via ssh:\n%s", f"export IPP_SESSION_KEY={key}\nexport X=1\npython -m engine")
        logging.getLogger("ddplab.zap").info("client %s with 'key': '%s'", "a", key)
        logging.getLogger("ddplab").warning("sent %r", b"\x00member-secret\x01")
    finally:
        show_log("WARNING")
        ipp_log.setLevel(level)
    out = stream.getvalue()
    assert key not in out and "member-secret" not in out and out.count("<hidden>") >= 3, out
    assert "export X=1" in out and "python -m engine" in out
