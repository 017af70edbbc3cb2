"""The accept gate: no other account's connection ever reaches a rank's listeners (rank side, where
the pool has no private network namespace): gloo's, and those of libraries the rank runs (TensorFlow's
gRPC server, JAX's coordinator and its gloo).

gloo listens for its peers, and any account can connect there first and race the real peer for a
pair (guard.py catches that after the fact and forms the group again); TensorFlow's gRPC server
listens on every interface and authenticates nothing. The gate closes the race itself: a seccomp
filter on the rank's process turns every accept(2)/accept4(2) of the threads made after it (gloo's,
TensorFlow's, JAX's) into a question to a keeper (seccomp user notification, Linux 5.14+, no
privilege needed). The keeper takes the listener from the rank (pidfd_getfd), accepts the pending
connections itself, asks the kernel who owns the other end (sock_diag), closes those of other
accounts (counted, by account), and hands the caller the first of its own account as the result of
its accept, as if nothing stood in between. No library sees a stranger's connection: no pair taken,
no descriptor spent, no group formed again.

The keeper is a small process of its own, the rank's child, not a thread of the rank: a library
that blocks in native code holding the GIL while its peers connect (TensorFlow's
MultiWorkerMirroredStrategy() does) would otherwise keep the keeper from answering the very accepts
it waits for. The keeper imports nothing but the standard library and ddplab.shared.privacy.

What it does not judge, it lets the kernel do as usual: accepts of other processes (a DataLoader
worker inherits the filter), of sockets that are not TCP, of a blocking listener. Connections from
other hosts are let in where the pool spans hosts (their owner cannot be known) and refused in a
local pool, whose ranks are all on this machine (TensorFlow's server listens on every interface).
Where the machine refuses the filter (an older kernel, a container that forbids seccomp) or the
keeper may not take the rank's listeners (ptrace refused), install() says why and guard.py's check
stays the only line.
"""
import atexit
import ctypes
import errno
import fcntl
import logging
import os
import platform
import select
import signal
import socket
import struct
import subprocess
import sys
import threading

log = logging.getLogger("ddplab")

ARCH = {"x86_64": (0xC000003E, 317, (43, 288)), "aarch64": (0xC00000B7, 277, (202, 242))}  # audit arch, seccomp, accepts
PIDFD_OPEN, PIDFD_GETFD = 434, 438  # (the same on x86_64 and aarch64)
LD_W_ABS, JEQ, RET = 0x20, 0x15, 0x06
RET_ALLOW, RET_USER_NOTIF = 0x7FFF0000, 0x7FC00000
PR_SET_NO_NEW_PRIVS, PR_SET_PTRACER, SECCOMP_SET_MODE_FILTER, FILTER_FLAG_NEW_LISTENER = 38, 0x59616D61, 1, 8
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID, NOTIF_ADDFD = 0xC0502100, 0xC0182101, 0x40082102, 0x40182103  # ('!', 0..3)
FLAG_CONTINUE, ADDFD_FLAG_SEND = 1, 2
AT_ONCE = 64  # strangers' connections closed per accept at most: then the caller's loop thread goes on (EAGAIN)
SOCK_NONBLOCK, SOCK_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC  # (Linux: the same bits)
KEEPER_READY = 10.0  # seconds install() waits for the keeper to say it can take the rank's listeners
REPORT = struct.Struct("=iI")  # a report from the keeper: (uid, or -1 for another host; connections closed)
KEEPER = "ddplab-gate-keeper"  # the keeper process's run name (it runs this file alone: start())


class Notif(ctypes.Structure):  # struct seccomp_notif
    _fields_ = [("id", ctypes.c_uint64), ("pid", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("nr", ctypes.c_int32), ("arch", ctypes.c_uint32), ("ip", ctypes.c_uint64),
                ("args", ctypes.c_uint64 * 6)]


class Resp(ctypes.Structure):  # struct seccomp_notif_resp
    _fields_ = [("id", ctypes.c_uint64), ("val", ctypes.c_int64), ("error", ctypes.c_int32), ("flags", ctypes.c_uint32)]


class AddFd(ctypes.Structure):  # struct seccomp_notif_addfd
    _fields_ = [("id", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("srcfd", ctypes.c_uint32),
                ("newfd", ctypes.c_uint32), ("newfd_flags", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
_libc.accept4.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
_libc.process_vm_readv.restype = _libc.process_vm_writev.restype = ctypes.c_ssize_t


def _error(what):
    return f"{what}: {os.strerror(ctypes.get_errno())}"


class Gate:
    """One per process (GATE), the rank's end. install() from the thread that will make gloo's groups."""

    def __init__(self):
        self.keeper = None  # the keeper's process (subprocess.Popen)
        self.why_not = None  # why the gate could not be put up, once tried
        self.refused = {}  # uid (or "another host") -> connections closed before a library saw them (take_refused)
        self.dropped = 0  # reports from the keeper that made no sense (dropped, counted)
        self._sock = None  # to the keeper: its reports
        self._ready = False  # the filter is up and the keeper has its listener
        self._lock = threading.Lock()

    @property
    def up(self):
        return self._ready and self.keeper is not None

    def start(self, local=True):
        """Start the keeper, to be put to work by install() (the rank goes on meanwhile: a new Python
        takes some 60 ms to start). local: the pool's ranks are all on this machine (connections from
        other hosts are refused too). Before the filter: the keeper's own accepts are not gated."""
        if self.keeper is not None or self.why_not is not None or platform.machine() not in ARCH:
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        _libc.prctl(PR_SET_PTRACER, os.getpid(), 0, 0, 0)  # Yama (Ubuntu): a descendant may take our sockets
        here = os.path.abspath(__file__)
        root = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # the folder ddplab is in
        # this file alone, by path: importing ddplab.rank (the rank's whole side) would cost the keeper time
        code = f"import sys, runpy; sys.path.insert(0, {root!r}); runpy.run_path({here!r}, run_name={KEEPER!r})"
        try:
            self.keeper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", code, str(theirs.fileno()), str(os.getpid()), str(mine.fileno()),
                 "local" if local else "hosts"], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.why_not = f"its keeper could not be started: {exc}"
            mine.close()
            return
        finally:
            theirs.close()
        self._sock = mine
        atexit.register(self.stop)

    def install(self, local=True):
        """Put the gate up for the calling thread and the threads it makes from now on; True if up
        (else why_not says why)."""
        if self._ready or self.why_not is not None:
            return self.up
        machine = ARCH.get(platform.machine())
        if machine is None:
            self.why_not = f"no seccomp numbers for {platform.machine()}"
            return False
        self.start(local)
        try:
            self.why_not = self.why_not or self._install(machine)
        except OSError as exc:  # (the keeper could not be talked to)
            self.why_not = f"its keeper: {exc}"
        if self.why_not:
            self.stop()
            log.info("the accept gate is not up: %s", self.why_not)
        else:
            self._ready = True
        return self.up

    def _install(self, machine):
        """See that the keeper may take this process's sockets, then put up the filter and hand the
        keeper its listener."""
        mine = self._sock
        mine.settimeout(KEEPER_READY)
        try:
            answer = mine.recv(512).decode(errors="replace")
        except TimeoutError:
            return f"its keeper did not answer in {KEEPER_READY:.0f} s"
        if answer != "ok":
            return answer or "its keeper ended"
        arch, seccomp_nr, accepts = machine
        code = [(LD_W_ABS, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, RET_ALLOW), (LD_W_ABS, 0, 0, 0)]
        code += [(JEQ, 0, 1, accepts[0]), (RET, 0, 0, RET_USER_NOTIF)]  # accept
        code += [(JEQ, 0, 1, accepts[1]), (RET, 0, 0, RET_USER_NOTIF), (RET, 0, 0, RET_ALLOW)]  # accept4
        program = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in code))
        fprog = ctypes.create_string_buffer(struct.pack("HL", len(code), ctypes.addressof(program)))
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return _error("prctl(NO_NEW_PRIVS)")
        fd = _libc.syscall(seccomp_nr, SECCOMP_SET_MODE_FILTER, FILTER_FLAG_NEW_LISTENER,
                           ctypes.c_void_p(ctypes.addressof(fprog)))
        if fd < 0:
            return _error("seccomp user notification refused")
        try:
            socket.send_fds(mine, [b"listener"], [fd])
        finally:
            os.close(fd)  # the keeper's alone now: if it ended, accepts would fail (ENOSYS), never hang
        mine.setblocking(False)
        return None

    def take_refused(self):
        """{uid (or "another host"): connections closed} since the last call (guard.py reports them,
        once a second): the keeper's reports read."""
        with self._lock:
            while self._sock is not None:
                try:
                    data = self._sock.recv(64)
                except BlockingIOError:
                    break
                except OSError:
                    log.warning("the accept gate's keeper is gone: accepts of this rank now fail")
                    break
                if not data:
                    log.warning("the accept gate's keeper ended: accepts of this rank now fail")
                    self._sock.close()
                    self._sock = None
                    break
                if len(data) != REPORT.size:
                    self.dropped += 1
                    continue
                uid, n = REPORT.unpack(data)
                who = "another host" if uid < 0 else uid
                self.refused[who] = self.refused.get(who, 0) + n
            refused, self.refused = self.refused, {}
        return refused

    def stop(self):
        """End the keeper (at exit; it also ends by itself when this process does)."""
        keeper, self.keeper = self.keeper, None
        if keeper is not None and keeper.poll() is None:
            keeper.kill()
            keeper.wait(5)


# ---------------------------------------------------------------------- the keeper (its own process)
def keep():
    """The keeper's main: `python -c ... SOCK RANK_PID RANK_SOCK local|hosts`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the rank (a terminal's goes to the whole group)
    sock_fd, rank, rank_sock, where = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sock = socket.socket(fileno=sock_fd)
    pidfd = _libc.syscall(PIDFD_OPEN, rank, 0)
    probe = _libc.syscall(PIDFD_GETFD, pidfd, rank_sock, 0) if pidfd >= 0 else -1
    if probe < 0:
        sock.send(_error("pidfd_open" if pidfd < 0 else "taking the rank's sockets (pidfd_getfd)").encode())
        return
    os.close(probe)
    sock.send(b"ok")
    try:
        _, fds, _, _ = socket.recv_fds(sock, 64, 1)
    except OSError:
        return
    if not fds:
        return  # the rank could not put the filter up: it says why
    Keeper(fds[0], pidfd, rank, sock, where == "local").serve()


class Keeper:
    def __init__(self, notify, pidfd, rank, sock, local):
        self.notify, self.pidfd, self.rank, self.sock, self.local = notify, pidfd, rank, sock, local
        self.untold = {}  # uid -> closed, not reported yet (the rank reads its reports when it can)
        self.accept4 = ARCH[platform.machine()][2][1]

    def serve(self):
        sock = self.sock
        sock.setblocking(False)
        poller = select.poll()
        poller.register(self.notify, select.POLLIN)
        poller.register(sock, select.POLLIN)  # (only its end: the rank is gone)
        while True:
            for fd, events in poller.poll(1000 if self.untold else None):
                if fd == sock.fileno() or events & (select.POLLHUP | select.POLLERR):
                    return  # the rank ended (or every process under the filter did)
                notif = Notif()
                if _libc.ioctl(self.notify, NOTIF_RECV, ctypes.byref(notif)) != 0:
                    if ctypes.get_errno() in (errno.EINTR, errno.ENOENT):  # (ENOENT: its caller is gone)
                        continue
                    return
                try:
                    self.answer(notif)
                except Exception:  # noqa: BLE001 - a syscall left unanswered would hang its thread: let it through
                    self.reply(notif.id, flags=FLAG_CONTINUE)
            self.report()

    def answer(self, notif):
        if not os.path.exists(f"/proc/{self.rank}/task/{notif.pid}"):
            return self.reply(notif.id, flags=FLAG_CONTINUE)  # another process's (a child's): not ours to judge
        fd = _libc.syscall(PIDFD_GETFD, self.pidfd, int(notif.args[0]), 0)
        if fd < 0:
            return self.reply(notif.id, flags=FLAG_CONTINUE)
        try:
            if not _judged(fd) or not self.valid(notif.id):  # (invalid: the caller was interrupted; fd maybe reused)
                return self.reply(notif.id, flags=FLAG_CONTINUE)
            flags = int(notif.args[3]) if notif.nr == self.accept4 else 0
            self.hand_over(notif, fd, flags)
        finally:
            os.close(fd)

    def hand_over(self, notif, fd, flags):
        """Accept on the rank's listener `fd` until a connection of the rank's own account comes, and
        make it the caller's accept's result; close the others."""
        address = ctypes.create_string_buffer(128)
        for _ in range(AT_ONCE):
            length = ctypes.c_uint32(128)
            new = _libc.accept4(fd, address, ctypes.byref(length), (flags & SOCK_NONBLOCK) | SOCK_CLOEXEC)
            if new < 0:
                code = ctypes.get_errno()
                if code == errno.EINTR:
                    continue
                return self.reply(notif.id, error=-code)  # EAGAIN: nothing (left) to accept
            uid = _owner(new, self.local)
            if uid == os.geteuid():
                break
            os.close(new)  # another account's, another host's, or gone already: no library sees it
            if uid is not None:
                self.untold[uid] = self.untold.get(uid, 0) + 1
        else:  # a flood: the caller's thread (gloo's event loop, which serves every pair) must not wait on it
            return self.reply(notif.id, error=-errno.EAGAIN)
        try:
            addr, addrlen = int(notif.args[1]), int(notif.args[2])
            if addr and addrlen:  # the caller's accept fills in the peer's address, in the rank's memory
                given = ctypes.c_uint32()
                if _peek(self.rank, addrlen, given) and _poke(self.rank, addr, address.raw[:min(given.value, length.value)]):
                    _poke(self.rank, addrlen, struct.pack("=I", length.value))
            add = AddFd(notif.id, ADDFD_FLAG_SEND, new, 0, os.O_CLOEXEC if flags & SOCK_CLOEXEC else 0)
            if _libc.ioctl(self.notify, NOTIF_ADDFD, ctypes.byref(add)) < 0:  # the caller's accept returns it
                code = ctypes.get_errno()
                if code != errno.ENOENT:  # (ENOENT: the caller is gone, interrupted: nothing to answer)
                    self.reply(notif.id, error=-code)
        finally:
            os.close(new)

    def valid(self, id_):
        return _libc.ioctl(self.notify, NOTIF_ID_VALID, ctypes.byref(ctypes.c_uint64(id_))) == 0

    def reply(self, id_, error=0, flags=0):
        resp = Resp(id_, 0, error, flags)
        _libc.ioctl(self.notify, NOTIF_SEND, ctypes.byref(resp))  # (ENOENT: its caller is gone)

    def report(self):
        """Tell the rank whom the gate refused (it reads when it can: what does not fit waits here)."""
        for uid, n in list(self.untold.items()):
            try:
                self.sock.send(REPORT.pack(uid, n))
            except BlockingIOError:
                return
            except OSError:
                return
            del self.untold[uid]


def _judged(fd):
    """A non-blocking TCP listener: the gate answers its accepts."""
    try:
        if not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK:
            return False  # (a blocking accept would hold the keeper: the kernel does it)
        with socket.socket(fileno=os.dup(fd)) as s:
            return s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM
    except OSError:
        return False


def _owner(fd, local):
    """The account that owns the other end of connection `fd`; -1 for another host's (None: let in, if
    the pool spans hosts, whose owner cannot be known here), None for one gone already."""
    from ddplab.shared.privacy import tcp_owner

    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            local_address, peer = _plain(*s.getsockname()[:2]), _plain(*s.getpeername()[:2])
    except OSError:
        return None
    if not (peer[0] == local_address[0] or peer[0].startswith("127.") or peer[0] == "::1"):
        return -1 if local else os.geteuid()
    return tcp_owner(peer, local_address)  # the connecting socket: its own address is our peer's


def _plain(ip, port):
    """An IPv4 peer of a dual-stack socket as sock_diag names it (privacy._ip_bytes)."""
    return (ip[7:] if ip.startswith("::ffff:") and "." in ip else ip), port


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _peek(pid, address, value):
    """Read a u32 of process `pid`'s memory (process_vm_readv: the keeper may, as it may take its fds)."""
    local, remote = _IoVec(ctypes.addressof(value), 4), _IoVec(address, 4)
    return _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == 4


def _poke(pid, address, data):
    buf = ctypes.create_string_buffer(data, len(data))
    local, remote = _IoVec(ctypes.addressof(buf), len(data)), _IoVec(address, len(data))
    return _libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == len(data)


GATE = Gate()


if __name__ == KEEPER:
    keep()
