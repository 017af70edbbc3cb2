"""Who else on this machine can reach a pool, and the folders only its owner may write.

Stdlib only at import: ranks use `folder_problem`, `private_folder` and the socket-owner checks too
(the compile cache is checked again in every rank before torch.compile may use it; gloo's
connections are checked by ddplab.rank.guard).

    private_folder(path)     -> (path, None) once it is a folder only this user can use, else (None, why)
    compile_cache(wanted, fallback) -> (folder for the ranks' torch.compile, why `wanted` was refused)
    other_accounts()         -> accounts of this machine other than this user's (NSS and running processes)
    kernel_channel()         -> how the notebook's own kernel talks to Jupyter (private or not)
    namespace_refusal()      -> why this machine refuses a private network namespace, and the setting to change
    tcp_listeners(pid), network_namespace(pid)   -> what a process listens on, and where
    connections()            -> this process's TCP connections, with the account owning each other end
(report.py says all of it in words, for %ddp_status and %ddp_start.)
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

Address = tuple[str, int]  # (ip, port)
SocketRow = tuple[int, int, Address, Address, int]  # (inode, TCP state, local, remote, uid of its owner)
Pid = int | str  # a process id, or "self"

UID_MIN_DEFAULT = 1000
NO_LOGIN = ("nologin", "false", "sync", "shutdown", "halt")


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return f"uid {uid}"


def user_namespace() -> bool:
    """Whether this process lives in a user namespace other than the machine's own: there, every
    uid but those mapped (the account's own) shows as the overflow uid (65534, "nobody")."""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def overflow_uid() -> int:
    try:
        with open("/proc/sys/kernel/overflowuid") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65534


def folder_problem(path: str, checked_outside: bool = False) -> str | None:
    """Why `path` is not a folder that only this user can write and read (0700, its own, reached
    through folders nobody else can swap), or None if it is. Nothing on the way is followed blindly:
    each folder above is looked at itself (lstat), a symbolic link among them must be root's or the
    user's, and the folders above where it leads are checked too.

    checked_outside: the notebook checked this very path outside the pool's user namespace, where it
    sees who owns each folder. Inside it, root's folders (/, /home, /tmp) and another account's alike
    show as the overflow uid: those are then left to the notebook's check (decided before entering)."""
    me = os.getuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != me:
        return f"it belongs to {_owner(st.st_uid)}"
    if st.st_mode & 0o077:
        return f"other users may use it (mode {stat.S_IMODE(st.st_mode):o})"
    trusted = {0, me} | ({overflow_uid()} if checked_outside and user_namespace() else set())
    path = os.path.abspath(path)
    for chain in (path, os.path.realpath(path)):
        why = _parents_problem(chain, trusted)
        if why:
            return why
    return None


def _parents_problem(path: str, trusted: set[int]) -> str | None:
    """Why a folder above `path` lets someone else swap what is below it, or None."""
    parent = os.path.dirname(path)
    while True:
        try:
            pst = os.lstat(parent)
        except OSError as exc:
            return f"{parent} cannot be checked ({exc.strerror})"
        if stat.S_ISLNK(pst.st_mode):  # whoever owns a link can point it elsewhere (where it leads: the real chain)
            if pst.st_uid not in trusted:
                return f"{parent} above it is a symbolic link of {_owner(pst.st_uid)}"
        else:  # a folder others may write (and is not sticky, as /tmp is) lets them swap what is in it
            writable_by_others = pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX
            if pst.st_uid not in trusted or writable_by_others:
                who = _owner(pst.st_uid) if pst.st_uid not in trusted else "others"
                return f"{parent} above it can be changed by {who}"
        if parent == os.path.dirname(parent):
            return None
        parent = os.path.dirname(parent)


def private_folder(path: str, checked_outside: bool = False) -> tuple[str, None] | tuple[None, str]:
    """Make `path` (and the folders to it) if missing, as this user's only (0700); return (path,
    None) if it then is private, else (None, why not): nothing is ever used that someone else
    made or can change. checked_outside: see folder_problem."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.lexists(path):
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:  # made meanwhile, by someone: checked below like any other
            pass
        except OSError as exc:
            return None, f"it cannot be made ({exc.strerror})"
    why = folder_problem(path, checked_outside)
    return (path, None) if why is None else (None, why)


def home_compile_cache() -> str:
    """~/.cache/ddplab/torchinductor (or under $XDG_CACHE_HOME): the user's own folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddplab", "torchinductor")


def torch_default_cache() -> str:
    """torch's own default, /tmp/torchinductor_USER (its cache_dir_utils.default_cache_dir): a name any
    account of the machine can take first. torch writes it into TORCHINDUCTOR_CACHE_DIR itself once
    it has used it, so that value there is not a choice of the user's."""
    import re
    import tempfile

    try:
        import getpass

        user = getpass.getuser()
    except (KeyError, OSError, ImportError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def default_compile_cache() -> str:
    """$TORCHINDUCTOR_CACHE_DIR if the user set it, else home_compile_cache() (never torch's default)."""
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) != torch_default_cache():
        return chosen
    return home_compile_cache()


def compile_cache(wanted: str, last_resort: Callable[[], str], checked_outside: bool = False) -> tuple[str, str | None]:
    """The folder the ranks' torch.compile may use: `wanted` if it is private, else the user's own
    home_compile_cache(), else `last_resort()` (a new private folder). Returns (folder, None) or
    (the folder used, a sentence saying why `wanted` was refused). checked_outside: the notebook
    chose `wanted` and checked it outside this rank's user namespace (folder_problem)."""
    path, why = private_folder(wanted, checked_outside)
    if path is not None:
        return path, None
    refusals = [f"{wanted}: {why}"]
    for candidate in (home_compile_cache(), None):
        candidate = candidate if candidate is not None else last_resort()
        if os.path.abspath(candidate) == os.path.abspath(wanted):
            continue
        path, other_why = private_folder(candidate)
        if path is not None:
            return path, f"torch.compile's cache {wanted} was refused ({why}): the ranks use {path} instead"
        refusals.append(f"{candidate}: {other_why}")
    raise OSError("no private folder for torch.compile's cache: " + "; ".join(refusals))


def uid_min(login_defs: str = "/etc/login.defs") -> int:
    """The first uid of people's accounts (UID_MIN of login.defs, else 1000)."""
    try:
        with open(login_defs) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "UID_MIN" and parts[1].isdigit():
                    return int(parts[1])
    except OSError:
        pass
    return UID_MIN_DEFAULT


def other_accounts(login_defs: str = "/etc/login.defs", proc: str = "/proc") -> list[str]:
    """Accounts of this machine other than this user's that could connect to what listens on its
    loopback: people's accounts (uid >= UID_MIN, a login shell) from the system's account database
    (NSS: /etc/passwd, and LDAP or SSSD where the machine enumerates them), and the owners of running
    processes (an account NSS does not list still shows by what it runs). Names, or "uid N"."""
    first, me, nobody = uid_min(login_defs), os.getuid(), overflow_uid()
    found: dict[int, str] = {}
    try:
        import pwd

        for entry in pwd.getpwall():
            if entry.pw_uid >= first and entry.pw_uid not in (me, nobody) and \
                    os.path.basename(entry.pw_shell) not in NO_LOGIN:
                found[entry.pw_uid] = entry.pw_name
    except ImportError:  # (not a Unix)
        return []
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            uid = os.stat(os.path.join(proc, pid)).st_uid
        except OSError:  # ended meanwhile
            continue
        if uid >= first and uid not in (me, nobody) and uid not in found:
            found[uid] = _owner(uid)
    return [found[uid] for uid in sorted(found)]


class Redact:
    """A logging filter that keeps keys out of log lines: the values of settings named like a key
    (IPP_SESSION_KEY=..., "key": "...", a CurveZMQ secret) and every secret registered with
    hide(). ipyparallel logs the script an SSH or batch launcher runs, environment and all
    (DDPLab.debug); the 'ddplab' loggers pass through this filter."""

    import re as _re

    NAMED = _re.compile(r"""(?i)(\b[\w.-]*(?:key|secret|token|password)['"]?\s*[=:]\s*b?['"]?)([^\s'",}]+)""")

    def __init__(self) -> None:
        self.secrets: set[str] = set()

    def hide(self, *secrets: object) -> None:
        """Never log these (bytes as hex and as text, or strings)."""
        for secret in secrets:
            if isinstance(secret, bytes):  # as hex, as text, and as Python writes bytes
                self.secrets.update({secret.hex(), secret.decode("latin-1"), repr(secret)[2:-1]})
            elif secret:
                self.secrets.add(str(secret))

    def text(self, text: str) -> str:
        text = self.NAMED.sub(lambda m: m.group(1) + "<hidden>", text)
        for secret in self.secrets:
            if len(secret) >= 8:
                text = text.replace(secret, "<hidden>")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = self.text(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


REDACT = Redact()


def namespace_refusal(proc: str = "/proc") -> tuple[str, str] | None:
    """What keeps this machine from giving an ordinary account a private network namespace, and the
    setting an administrator can change: (cause, fix), or None if nothing known does."""
    def read(path: str) -> str | None:
        try:
            with open(os.path.join(proc, path)) as f:
                return f.read()
        except OSError:
            return None

    if (read("sys/kernel/apparmor_restrict_unprivileged_userns") or "").strip() == "1":
        return ("AppArmor refuses unprivileged user namespaces (Ubuntu 23.10 and later)",
                "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (and the same line, without sudo "
                "sysctl -w, in /etc/sysctl.d/60-userns.conf to keep it), or an AppArmor profile that allows "
                "'userns,' for this Python")
    if (read("sys/user/max_user_namespaces") or "").strip() == "0":
        return ("user.max_user_namespaces is 0", "sudo sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/)")
    if (read("sys/kernel/unprivileged_userns_clone") or "").strip() == "0":
        return ("kernel.unprivileged_userns_clone is 0",
                "sudo sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/)")
    status = read("self/status") or ""
    if any(line.split() == ["Seccomp:", "2"] for line in status.splitlines()):
        return ("a seccomp filter refuses user namespaces (Docker's default profile does)",
                "run the container with a seccomp profile that allows unshare and clone with CLONE_NEWUSER "
                "(docker run --security-opt seccomp=PROFILE.json), or give the notebook its own machine")
    return None


KERNEL_IPC = "c.KernelManager.transport = 'ipc'"  # what an administrator sets (code: said as is in every language)
KERNEL_ENCRYPTED = "c.KernelManager.transport_encryption = 'required'"  # (jupyter_client >= 8.10)


def kernel_channel() -> dict[str, Any] | None:
    """How this notebook's kernel talks to Jupyter: {"private": bool, "transport": "tcp" or "ipc",
    "encrypted": bool, "ip": ...}, or None outside a Jupyter kernel."""
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        return None
    if not IPKernelApp.initialized():
        return None
    from traitlets.config import MultipleInstanceError

    try:
        app = IPKernelApp.instance()
    except MultipleInstanceError:  # the one application is terminal IPython's (initialized() sees any): no kernel
        return None
    encrypted = bool(getattr(app, "curve_secretkey", None))
    return {"private": encrypted or app.transport == "ipc", "transport": app.transport, "encrypted": encrypted,
            "ip": app.ip}


def socket_inodes(pid: Pid = "self") -> dict[int, int]:
    """{socket inode: fd} of process `pid`'s open sockets."""
    found: dict[int, int] = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            found[int(target[8:-1])] = int(fd)
    return found


ESTABLISHED, LISTEN = 1, 10  # the kernel's TCP states (include/net/tcp_states.h)


def tcp_table(pid: Pid = "self") -> list[SocketRow]:
    """Every TCP socket of the network namespace process `pid` lives in, read in that namespace
    (psutil reads the caller's: it would not see a rank's sockets in a private namespace), as
    (inode, state, (local ip, port), (remote ip, port), uid of the socket's owner). The kernel
    writes the owner of each socket, whoever made it: /proc/net/tcp is readable by every account.
    (For this process's own namespace, tcp_sockets() asks the kernel directly, 50 times faster.)"""
    rows: list[SocketRow] = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                lines = f.readlines()
        except (OSError, StopIteration):
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10:
                continue
            rows.append((int(parts[9]), int(parts[3], 16), _address(parts[1], width), _address(parts[2], width),
                         int(parts[7])))
    return rows


def tcp_sockets(states: Iterable[int] = (ESTABLISHED, LISTEN)) -> list[SocketRow]:
    """The TCP sockets of this process's network namespace in `states`, as tcp_table() gives them,
    asked of the kernel through netlink (sock_diag, as `ss` does; no privilege needed): a fraction
    of a millisecond where reading /proc/net/tcp takes ten on a machine with a few hundred sockets.
    Falls back to /proc where netlink is refused."""
    import socket

    mask = sum(1 << state for state in states)
    rows: list[SocketRow] = []
    try:
        for family in (socket.AF_INET, socket.AF_INET6):
            rows += _diag_dump(family, mask)
    except OSError:
        return [row for row in tcp_table() if row[1] in states]
    return rows


def tcp_owner(local: Address, remote: Address) -> int | None:
    """The owner (uid) of the TCP socket of this network namespace whose own address is `local` and
    whose peer is `remote` ((ip, port) each), asked of the kernel for that one socket (sock_diag, an
    exact lookup: the same few microseconds with ten sockets or ten thousand); None if there is none."""
    found = tcp_socket(local, remote)
    return None if found is None else found[1]


def tcp_socket(local: Address, remote: Address) -> tuple[int, int] | None:
    """(state, owner uid) of the TCP socket `local` -> `remote` of this network namespace, if there is one,
    by sock_diag's exact lookup (a few microseconds, where a dump of the table walks the kernel's whole
    hash table: ~2 ms on this machine, however few sockets there are). An IPv4 pair is looked for as a
    dual-stack (IPv6) socket too, as _ip_bytes names those."""
    import socket

    if ":" in local[0]:
        return _diag_one(socket.AF_INET6, local, remote)
    return (_diag_one(socket.AF_INET, local, remote)
            or _diag_one(socket.AF_INET6, ("::ffff:" + local[0], local[1]), ("::ffff:" + remote[0], remote[1])))


def _diag_one(family: int, local: Address, remote: Address) -> tuple[int, int] | None:
    import socket
    import struct

    src, dst = (socket.inet_pton(family, ip).ljust(16, b"\0") for ip in (local[0], remote[0]))
    sockid = struct.pack(">HH", local[1], remote[1]) + src + dst + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFF) + sockid  # inet_diag_req_v2
    header = struct.pack("=IHHII", 16 + len(request), 20, 0x1, 1, 0)  # SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4) as s:
        s.send(header + request)
        data = s.recv(1 << 12)
    if len(data) < 16 + 88 or struct.unpack_from("=H", data, 4)[0] != 20 or data[16 + 1] == LISTEN:
        return None  # NLMSG_ERROR: no such socket (gone already); or the listener on `local`, which the kernel
        # gives where no connection matches
    return data[16 + 1], struct.unpack_from("=I", data, 16 + 64)[0]  # struct inet_diag_msg's idiag_state, idiag_uid


def _diag_dump(family: int, mask: int) -> list[SocketRow]:
    import socket
    import struct

    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, mask) + bytes(48)  # inet_diag_req_v2
    header = struct.pack("=IHHII", 16 + len(request), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY, REQUEST | DUMP
    width = 4 if family == socket.AF_INET else 16
    rows: list[SocketRow] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4) as s:  # NETLINK_SOCK_DIAG
        s.send(header + request)
        while True:
            data, off = s.recv(1 << 16), 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if kind == 3:  # NLMSG_DONE
                    return rows
                if kind == 2:  # NLMSG_ERROR
                    raise OSError("sock_diag refused the request")
                state = data[off + 17]  # struct inet_diag_msg: family, state, timer, retrans, sockid, ...
                sport, dport = struct.unpack_from(">HH", data, off + 20)
                src, dst = data[off + 24:off + 24 + width], data[off + 40:off + 40 + width]
                uid, inode = struct.unpack_from("=II", data, off + 80)
                rows.append((inode, state, (_ip_bytes(src), sport), (_ip_bytes(dst), dport), uid))
                off += (length + 3) & ~3
            if not data:
                return rows


def _ip_bytes(raw: bytes) -> str:
    import socket

    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    ip = socket.inet_ntop(socket.AF_INET6, raw)
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip  # an IPv4 peer of a dual-stack socket


def tcp_listeners(pid: Pid) -> list[Address]:
    """[(ip, port)] of the TCP sockets process `pid` listens on (in its own network namespace)."""
    mine = socket_inodes(pid)
    return [local for inode, state, local, _, _ in tcp_table(pid) if state == LISTEN and inode in mine]


def listening() -> dict[int, Address]:
    """{inode: (ip, port)} of this process's listening TCP sockets."""
    mine = socket_inodes()
    return {inode: local for inode, state, local, _, _ in tcp_sockets((LISTEN,)) if inode in mine}


def connections() -> list[tuple[int, int, Address, Address, int | None]]:
    """[(inode, fd, (local ip, port), (remote ip, port), owner uid of the other end or None)] of this
    process's established TCP connections. The other end's owner is known when it is on this machine
    (in this network namespace): its socket is the one with the two addresses swapped."""
    mine, rows = socket_inodes(), tcp_sockets((ESTABLISHED,))
    owners = {(local, remote): uid for inode, state, local, remote, uid in rows if inode}
    return [(inode, mine[inode], local, remote, owners.get((remote, local)))
            for inode, state, local, remote, _ in rows if inode in mine]


def _address(field: str, width: int) -> Address:
    hexa, port = field.split(":")
    return _ip(hexa, width), int(port, 16)


def _ip(hexa: str, width: int) -> str:
    import socket

    raw = bytes.fromhex(hexa)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return _ip_bytes(words)


def private_network() -> bool:
    """This process lives in a network namespace with nothing but a loopback interface (a pool's own)."""
    import socket

    return [name for _, name in socket.if_nameindex()] == ["lo"]


def network_namespace(pid: Pid) -> str | None:
    """An id of the network namespace process `pid` lives in (compare two; None if unknown)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None
