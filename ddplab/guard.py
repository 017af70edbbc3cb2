"""Every gloo connection of a rank belongs to its own account: checked before a group's first collective.

gloo authenticates nothing. Each group a rank builds gets a listener of its own on the rank's
address; a peer connects to it and sends 8 bytes, the sequence number of the pair it wants, and
gloo gives the connection to that pair, or keeps it until such a pair asks. Where the ranks share
the machine's network (no private namespace: zygote.py), any account can see a new listener in
/proc/net/tcp, connect first with a likely number, and become a rank's peer: read what the rank
sends, put its own bytes in a collective, and (through broadcast_object_list) have its pickle
loaded. And each connection costs the rank a file descriptor: gloo aborts the process when
accept() runs out of them.

So that no group is used that another account got into, `install()` puts `GuardedGloo` where
torch's distributed_c10d builds every gloo backend (init_process_group, new_group, a DeviceMesh,
a re-formed group, the helper group of TORCH_DISTRIBUTED_DEBUG=DETAIL). It builds the real
ProcessGroupGloo, and before handing it back (so before any collective on it):

1. it looks at the rank's established TCP connections and who owns each other end (the kernel
   says: privacy.connections()). One of another account is shut down at once. If gloo had given
   it to a pair, the group is taken: a pair's socket sits armed in gloo's event loop (its epoll
   entry reads EPOLLIN), where a connection gloo merely keeps for a pair nobody asked for is
   disarmed (EPOLLONESHOT, fired);
2. every member says in the group's store (a file in the pool's private folder, or ddplab's signed
   store: nobody else writes there) whether its group was taken; if any was, every member builds
   the group again, with a fresh device (new listeners, new numbers): ATTEMPTS times at most;
3. it seals the group's new listeners: a socket filter that drops every packet, so nobody can
   connect to them any more (gloo needs them only while its pairs connect, which is done).

Whoever tried is reported through `on_refused` (the rank tells the notebook, which names the
account once). Where the ranks have a network namespace of their own, nobody else can connect and
this costs one look at /proc and one store round trip per group. Linux only; elsewhere nothing is
checked (said in the log). Private torch names it uses: distributed_c10d.ProcessGroupGloo.
"""
import ctypes
import json
import logging
import os
import resource
import socket
import struct

from .privacy import SYN_SENT, connections, listening, socket_inodes, tcp_sockets

log = logging.getLogger("ddplab")
ATTEMPTS = 5  # builds of one group before giving up (another account winning a race 5 times running)
EPOLLIN, EPOLLONESHOT = 0x1, 1 << 30
SO_ATTACH_FILTER = 26


class GroupTaken(RuntimeError):
    """Another account took a connection of this group every time it was built."""


def install(on_refused=None):
    """Build every gloo backend of this process through GuardedGloo (idempotent); on_refused(record)
    hears of each connection refused: {"uid", "account", "taken", "group"}. Also lets the rank hold
    as many descriptors as the machine allows it (a flood of connections while a group forms must
    not run gloo out of them)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    GUARD.on_refused = on_refused
    raise_descriptor_limit()
    if not getattr(c10d, "_GLOO_AVAILABLE", False) or c10d.ProcessGroupGloo is GuardedGloo:
        return
    GuardedGloo.real = c10d.ProcessGroupGloo
    c10d.ProcessGroupGloo = GuardedGloo
    if getattr(dist, "ProcessGroupGloo", None) is GuardedGloo.real:
        dist.ProcessGroupGloo = GuardedGloo


def raise_descriptor_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            log.info("could not raise the open files limit from %s to %s", soft, hard, exc_info=True)


class _Delegating(type):
    """The guarded class answers isinstance and attribute questions as torch's ProcessGroupGloo."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls.real)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls.real)

    def __getattr__(cls, name):
        return getattr(cls.real, name)


class GuardedGloo(metaclass=_Delegating):
    """torch's ProcessGroupGloo, built so that none of its connections is another account's
    (ddplab.guard). GuardedGloo(store, rank, size, ...) returns a real ProcessGroupGloo."""

    real = None  # torch's class

    def __new__(cls, store, rank, size, *args, **kwargs):
        return GUARD.build(cls.real, store, rank, size, args, kwargs)


class Guard:
    def __init__(self):
        self.on_refused = None
        self.refused = []  # every record, in order (the rank's join() returns those of its group)
        self.groups = 0

    def build(self, real, store, rank, size, args, kwargs):
        from torch.distributed import PrefixStore

        self.groups += 1
        group = self.groups
        for attempt in range(ATTEMPTS):
            where = store if attempt == 0 else PrefixStore(f"ddplab-guard-retry-{attempt}/", store)
            before = listening()
            if attempt == 0 or size == 1:
                pg = real(where, rank, size, *args, **kwargs)
            else:  # someone raced the last build: this one lets nobody else's connection in at all
                pg = gated(real, where, rank, size, args, kwargs)
            if size == 1:
                return pg
            taken = self.check(group)
            verdicts = self.agree(store, attempt, rank, size, taken)
            if not any(verdicts):
                seal(set(listening()) - set(before))
                return pg
            log.warning("gloo group %d, attempt %d: another account took a connection (ranks %s): built again",
                        group, attempt + 1, [r for r, t in enumerate(verdicts) if t])
            del pg  # its device goes with it: listeners, pairs, connections held for nobody
        accounts = sorted({r["account"] for r in self.refused if r["group"] == group})
        raise GroupTaken(f"the gloo group could not be formed: another account ({', '.join(accounts)}) took one of its "
                         f"connections each of {ATTEMPTS} times it was built; ask an administrator to allow a private "
                         "network namespace (%ddp_status says how)")

    def check(self, group):
        """Shut down every gloo connection of this process (accepted by one of its listeners, or one
        gloo's event loop waits on) whose other end is another account's; True if gloo had given one
        of them to a pair (the group is taken)."""
        me, armed, taken = os.getuid(), _epoll_armed(), False
        ports = {port for _, port in listening().values()}
        for inode, fd, local, _, uid in connections():
            if uid is None or uid == me:
                continue  # ours, or not on this machine (a peer on another host)
            in_pair = armed is None or inode in armed  # (where gloo's epoll cannot be read: assume the worst)
            if not in_pair and local[1] not in ports:
                continue  # not gloo's: a connection the rank's own code made
            taken |= in_pair
            shut_down(fd, inode)
            record = {"uid": uid, "account": _account(uid), "taken": in_pair, "group": group}
            self.refused.append(record)
            log.warning("a gloo connection from %s (uid %d) to port %d refused%s", record["account"], uid, local[1],
                        " (it had taken a pair)" if in_pair else "")
            if self.on_refused is not None:
                self.on_refused(record)
        return taken

    @staticmethod
    def agree(store, attempt, rank, size, taken):
        """Every member's verdict (True: taken), through the group's own store."""
        store.set(f"ddplab-guard/{attempt}/{rank}", json.dumps(bool(taken)))
        return [taken if r == rank else json.loads(store.get(f"ddplab-guard/{attempt}/{r}")) for r in range(size)]


GUARD = Guard()


def _account(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _epoll_armed():
    """Inodes of the sockets some epoll instance of this process waits on for input (gloo's pairs),
    or None if fdinfo cannot be read."""
    armed = set()
    try:
        fds = os.listdir("/proc/self/fdinfo")
    except OSError:
        return None
    for fd in fds:
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                lines = [line for line in f if line.startswith("tfd:")]
        except OSError:  # closed meanwhile
            continue
        for line in lines:  # "tfd:        9 events:       19 data: ... pos:0 ino:1b2f sdev:8"
            fields = line.split()
            try:
                events = int(fields[fields.index("events:") + 1], 16)
                inode = int(next(f for f in fields if f.startswith("ino:"))[4:], 16)
            except (ValueError, StopIteration):
                return None
            if events & EPOLLIN and not events & EPOLLONESHOT:
                armed.add(inode)
    return armed


def _same_socket(fd, inode):
    """A duplicate of `fd` if it still is socket `inode` (a number read earlier may belong to another
    file by now), else None. Acting on the duplicate reaches the socket, whatever happens to `fd`."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    if os.fstat(dup).st_ino != inode:
        os.close(dup)
        return None
    return dup


def shut_down(fd, inode):
    """Shut down socket `inode` (open as `fd` when it was listed): its peer and whoever waits on it
    see it closed; the descriptor stays its owner's (gloo's)."""
    dup = _same_socket(fd, inode)
    if dup is None:
        return False
    s = socket.socket(fileno=dup)
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected any more
        pass
    finally:
        s.close()  # (the duplicate only)
    return True


def seal(inodes):
    """Drop every packet that reaches these listening sockets: nobody can connect to them any more."""
    mine = socket_inodes()
    for inode in inodes:
        dup = _same_socket(mine[inode], inode) if inode in mine else None
        if dup is not None:
            _attach(dup, [])


# ---------------------------------------------------------------- a gated build
def gated(real, store, rank, size, args, kwargs):
    """Build a ProcessGroupGloo whose listeners admit this account's own connections only. The
    group's devices are made here, and each listener is closed to everyone at once (a socket filter
    dropping every packet) before its address is published; while torch connects the pairs, a
    thread looks for connections being opened to it (SYN_SENT, in /proc/net/tcp) by this account's
    processes and opens the filter to exactly their source address and port. Nobody else's
    connection reaches gloo. Only for listeners on this machine's loopback, where every peer's
    socket can be seen (IPv4); costs the peers a retransmitted SYN (the kernel waits 1 s)."""
    import datetime
    import threading

    timeout = kwargs.get("timeout", args[0] if args else datetime.timedelta(minutes=30))
    if not isinstance(timeout, datetime.timedelta):  # built with an Options object: left as asked
        return real(store, rank, size, *args, **kwargs)
    interfaces = [i for i in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if i]
    before = set(os.listdir("/proc/self/fd"))
    devices = [real.create_device(interface=i) for i in interfaces] or [real.create_default_device()]
    gates = []
    for fd in set(os.listdir("/proc/self/fd")) - before:  # the devices' listeners: closed to all, at once
        gate = Gate.at(int(fd))
        if gate is not None:
            gates.append(gate)
    options = real._Options()
    options._devices, options._timeout, options._threads = devices, timeout, 2 * len(devices)
    done = threading.Event()
    watcher = threading.Thread(target=_open_gates, args=(gates, done), name="ddplab-gloo-gate", daemon=True)
    watcher.start()
    try:
        return real(store, rank, size, options)
    finally:
        done.set()
        watcher.join()
        for gate in gates:
            gate.close()


class Gate:
    """A listening socket whose filter admits a set of (IPv4 source, port) only."""

    def __init__(self, dup, address):
        self.dup, self.address, self.allowed = dup, address, set()
        _attach(dup, [])

    @classmethod
    def at(cls, fd):
        """A gate on `fd` if it is an IPv4 listening socket (closed to everyone), else None."""
        try:
            dup = os.dup(fd)
        except OSError:  # closed meanwhile
            return None
        address = None
        try:
            s = socket.socket(fileno=dup)
        except OSError:  # not a socket (gloo's epoll, an eventfd)
            os.close(dup)
            return None
        try:
            if s.family == socket.AF_INET and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                address = s.getsockname()
        finally:
            s.detach()
        if address is None:
            os.close(dup)
            return None
        return cls(dup, address)

    def admit(self, source):
        if source not in self.allowed:
            self.allowed.add(source)
            _attach(self.dup, sorted(self.allowed))

    def close(self):
        _attach(self.dup, [])  # sealed: the pairs are connected
        os.close(self.dup)


def _open_gates(gates, done):
    me = os.getuid()
    where = {gate.address: gate for gate in gates}
    while not done.wait(0.05):  # (the peers resend their SYN after 1 s)
        for _, _, local, remote, uid in tcp_sockets((SYN_SENT,)):
            if uid == me and remote in where:
                where[remote].admit(local)


SKF_NET_OFF = -0x100000
LD_W_ABS, LD_H_ABS, JEQ_K, RET_K = 0x20, 0x28, 0x15, 0x06


def program(allowed):
    """Classic BPF for a TCP socket (the packet starts at its TCP header): accept what comes from one
    of `allowed` [(IPv4 address, port)], drop everything else."""
    code = []
    for i, (ip, port) in enumerate(allowed):
        after = 4 * (len(allowed) - i - 1)  # instructions of the entries after this one
        code += [(LD_W_ABS, 0, 0, (SKF_NET_OFF + 12) & 0xFFFFFFFF),  # IPv4 source address
                 (JEQ_K, 0, 2, int.from_bytes(socket.inet_aton(ip), "big")),
                 (LD_H_ABS, 0, 0, 0),  # TCP source port
                 (JEQ_K, after + 1, 0, port)]  # -> accept (past the entries left and the drop)
    code += [(RET_K, 0, 0, 0), (RET_K, 0, 0, 0xFFFFFFFF)]  # drop; accept
    return code


def _attach(fd, allowed):
    """Set the socket filter of socket `fd` to program(allowed) ([]: drop everything)."""
    code = program(allowed)
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in code))
    fprog = struct.pack("HL", len(code), ctypes.addressof(buf))  # struct sock_fprog {len; filter*}
    s = socket.socket(fileno=os.dup(fd))
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    except OSError:
        log.warning("could not set a gloo listener's filter", exc_info=True)
    finally:
        s.close()
