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
   the group again, with a fresh device (new listeners, new numbers): ATTEMPTS times at most, then
   GroupTaken names the account.

Once formed, a group's listener serves nobody, but gloo keeps it open (only root may filter a TCP
socket on recent kernels, so it cannot be closed to others). Each second the rank's telemetry
thread shuts down other accounts' connections to it (sweep): gloo then closes those that have not
sent their 8 bytes; one that has is held until the group ends. So that a flood of those does not run
gloo out of descriptors (it aborts the process then), install() raises the rank's open-files limit
to what the machine allows; a rank that dies of it anyway is restarted by the notebook (Lab).

The check alone cannot keep a group forming against an account that wins the race to each new
listener, time after time (it can see each one the moment it opens, and gloo's numbers are
predictable): that account would read nothing and run nothing, but the group would not form
(GroupTaken). So install() also puts up the accept gate (gate.py): gloo's accepts are answered by
the rank itself, which closes another account's connection before gloo sees it, so that there is
no race to win, no descriptor to spend, and the checks above find nothing. Where the machine
refuses the gate (no seccomp user notification), the checks are the line, and a network namespace
of the pool's own (zygote.py) the cure.

Whoever tried is reported through `on_refused` (the rank tells the notebook, which names the
account once). Where the ranks have a network namespace of their own, nobody else can connect and
this costs one look through sock_diag and one store round trip per group (about 2 + 7 ms here).
Linux only. Private torch names it uses: distributed_c10d.ProcessGroupGloo, the module global that
distributed_c10d builds every gloo backend with (torch 2.13 in _new_process_group_helper, 2.14 in
_create_gloo_process_group; upstream.py checks the module still calls it; a torch without it turns the
guard off with a warning).
"""
import functools
import json
import logging
import os
import resource
import socket

from ..shared import upstream
from ..shared.privacy import connections, listening, private_network
from .gate import GATE

log = logging.getLogger("ddplab")
ATTEMPTS = 5  # builds of one group before giving up (another account winning a race 5 times running)
EPOLLIN, EPOLLONESHOT = 0x1, 1 << 30


class GroupTaken(RuntimeError):
    """Another account took a connection of this group every time it was built."""


def install(on_refused=None, gate=True, local=True):
    """Build every gloo backend of this process through GuardedGloo (idempotent); on_refused(account,
    n, taken) hears of the connections of one account refused at once (n, of them `taken` had taken a
    pair). Also lets the rank hold as many descriptors as the machine allows it (a flood of
    connections must not run gloo out of them), and, with `gate`, puts up the accept gate (gate.py)
    for the calling thread, which makes gloo's groups (local: every rank of the pool is on this machine)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    GUARD.on_refused = on_refused
    raise_descriptor_limit()
    if gate:
        GATE.install(local)
    if not dist.is_gloo_available():
        return
    real = upstream.get("torch.distributed.distributed_c10d:ProcessGroupGloo")  # (None: the guard is off, said once)
    if real is None or real is GuardedGloo:
        return
    GuardedGloo.real = real
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
    (ddplab.rank.guard). GuardedGloo(store, rank, size, ...) returns a real ProcessGroupGloo."""

    real = None  # torch's class

    def __new__(cls, store, rank, size, *args, **kwargs):
        return GUARD.build(cls.real, store, rank, size, args, kwargs)


class Guard:
    def __init__(self):
        import threading

        self.on_refused = None
        self.refused = {}  # account -> [connections refused, of them pairs taken], since the process began
        self.groups, self.takers = 0, set()  # (the accounts that took a pair of the group forming)
        self.forming = threading.RLock()  # a sweep waits while a group forms (its check decides what was taken)

    def build(self, real, store, rank, size, args, kwargs):
        with self.forming:
            return self._build(real, store, rank, size, args, kwargs)

    def _build(self, real, store, rank, size, args, kwargs):
        from torch.distributed import PrefixStore

        self.groups += 1
        group, self.takers = self.groups, set()
        for attempt in range(ATTEMPTS):
            where = store if attempt == 0 else PrefixStore(f"ddplab-guard-retry-{attempt}/", store)
            pg = real(where, rank, size, *args, **kwargs)
            if size == 1:
                return pg
            verdicts = self.agree(store, attempt, rank, size, self.check())
            if not any(verdicts):
                return pg
            self.takers.update(account for takers in verdicts for account in takers)
            log.warning("gloo group %d, attempt %d: another account took a connection (ranks %s): built again",
                        group, attempt + 1, [r for r, takers in enumerate(verdicts) if takers])
            del pg  # its device goes with it: listeners, pairs, connections held for nobody
        raise GroupTaken(f"the gloo group could not be formed: another account ({', '.join(sorted(self.takers))}) took "
                         f"one of its connections each of {ATTEMPTS} times it was built; ask an administrator to allow "
                         "a private network namespace (%ddp_status says how)")

    def check(self):
        """Shut down every gloo connection of this process (accepted by one of its listeners, or one
        gloo's event loop waits on) whose other end is another account's; the accounts to whom gloo
        had given one of them for a pair (the group is taken), sorted."""
        me, armed, found = os.getuid(), _epoll_armed(), {}
        for uid, n in GATE.take_refused().items():  # closed by the gate before gloo saw them: none taken
            found.setdefault(uid, [0, 0])[0] += n
        ports = {port for _, port in listening().values()}
        for inode, fd, local, _, uid in connections():
            if uid is None or uid == me:
                continue  # ours, or not on this machine (a peer on another host)
            in_pair = armed is None or inode in armed  # (where gloo's epoll cannot be read: assume the worst)
            if in_pair or local[1] in ports:  # (else not gloo's: a connection the rank's own code made)
                shut_down(fd, inode)
                counts = found.setdefault(uid, [0, 0])
                counts[0] += 1
                counts[1] += in_pair
        self.tell(found)
        return sorted({_account(uid) for uid, (_, taken) in found.items() if taken})

    def tell(self, found):
        """Count and report {uid: [connections refused, of them pairs taken]}, one line an account."""
        for uid, (n, taken) in found.items():
            account = _account(uid)
            counts = self.refused.setdefault(account, [0, 0])
            counts[0] += n
            counts[1] += taken
            log.warning("%d connection(s) of %s (%s) to the rank's listeners refused%s", n, account,
                        uid if isinstance(uid, str) else f"uid {uid}", f" ({taken} had taken a pair)" if taken else "")
            if self.on_refused is not None:
                self.on_refused(account, n, taken)

    def sweep(self):
        """Between formings (the rank's telemetry thread, each second): shut down another account's
        connections to this process's gloo listeners, which only a flood makes once the groups are
        formed. gloo lets go of (closes) those that have not sent their 8 bytes yet; one that has is
        kept by gloo until its group ends (its descriptor, not its data: nothing reads it)."""
        if not self.forming.acquire(blocking=False):
            return
        try:
            found = {}
            for uid, n in GATE.take_refused().items():  # closed by the gate before gloo saw them
                found.setdefault(uid, [0, 0])[0] += n
            if not GATE.up and not alone():  # (the socket tables read here cost ~5 ms of a rank's second)
                me, ports = os.getuid(), {port for _, port in listening().values()}
                for inode, fd, local, _, uid in connections():
                    if uid is not None and uid != me and local[1] in ports and shut_down(fd, inode):
                        found.setdefault(uid, [0, 0])[0] += 1
            self.tell(found)
        finally:
            self.forming.release()

    @staticmethod
    def agree(store, attempt, rank, size, takers):
        """Every member's verdict (the accounts that took one of its pairs; [] for none), through the
        group's own store: each rank then knows whether to build again, and whom to name."""
        store.set(f"ddplab-guard/{attempt}/{rank}", json.dumps(takers))
        return [takers if r == rank else json.loads(store.get(f"ddplab-guard/{attempt}/{r}")) for r in range(size)]


GUARD = Guard()
alone = functools.cache(private_network)  # the pool's own network namespace: nobody else can connect (for life)


def _account(uid):
    if isinstance(uid, str):  # ("another host": the gate refuses other hosts' connections to a local pool)
        return uid
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
