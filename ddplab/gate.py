"""The accept gate: no other account's connection ever reaches gloo (rank side, where the pool has
no private network namespace).

gloo listens on the machine's loopback for its peers, and any account can connect there first and
race the real peer for a pair (guard.py catches that after the fact and forms the group again). The
gate closes the race itself: a seccomp filter on this process turns every accept(2)/accept4(2) of
the threads made after it (gloo's included) into a question to a supervisor thread of this process
(seccomp user notification, Linux 5.14+, no privilege needed). The supervisor accepts the pending
connections itself, asks the kernel who owns the other end (sock_diag), closes those of other
accounts (counted, by account), and hands the caller the first of its own account as the result of
its accept, as if nothing stood in between. gloo never sees a stranger's connection: no pair taken,
no descriptor spent, no group formed again.

What it does not judge, it lets the kernel do as usual: accepts of other processes (a DataLoader
worker inherits the filter), of sockets that are not TCP, of a blocking listener, and connections
from other hosts (their owner cannot be known). Where the machine refuses the filter (an older
kernel, a container that forbids seccomp), install() says why and guard.py's check stays the only
line.
"""
import ctypes
import errno
import fcntl
import logging
import os
import platform
import socket
import struct
import threading

log = logging.getLogger("ddplab")

ARCH = {"x86_64": (0xC000003E, 317, (43, 288)), "aarch64": (0xC00000B7, 277, (202, 242))}  # audit arch, seccomp, accepts
LD_W_ABS, JEQ, RET = 0x20, 0x15, 0x06
RET_ALLOW, RET_USER_NOTIF = 0x7FFF0000, 0x7FC00000
PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, FILTER_FLAG_NEW_LISTENER = 38, 1, 8
NOTIF_RECV, NOTIF_SEND, NOTIF_ADDFD = 0xC0502100, 0xC0182101, 0x40182103  # _IOWR/_IOW('!', 0/1/3, ...)
FLAG_CONTINUE, ADDFD_FLAG_SEND = 1, 2
AT_ONCE = 64  # strangers' connections closed per accept at most: then gloo's loop thread goes on (EAGAIN)
SOCK_NONBLOCK, SOCK_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC  # (Linux: the same bits)


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


class Gate:
    """One per process (GATE). install() from the thread that will make gloo's groups."""

    def __init__(self):
        self.fd = None  # the seccomp listener
        self.why_not = None  # why the gate could not be put up, once tried
        self.refused = {}  # uid -> connections closed before gloo saw them, not yet taken (take_refused)
        self.handled = 0  # accepts answered
        self._lock = threading.Lock()
        self._ready = threading.Event()

    @property
    def up(self):
        return self.fd is not None

    def install(self):
        """Put the gate up for the calling thread and the threads it makes from now on; True if up
        (else why_not says why)."""
        if self.fd is not None or self.why_not is not None:
            return self.up
        machine = ARCH.get(platform.machine())
        if machine is None:
            self.why_not = f"no seccomp numbers for {platform.machine()}"
            return False
        # the supervisor first: made before the filter, so its own accept4 calls are not gated
        supervisor = threading.Thread(target=self._supervise, name="ddplab-gate", daemon=True)
        supervisor.start()
        arch, seccomp_nr, accepts = machine
        code = [(LD_W_ABS, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, RET_ALLOW), (LD_W_ABS, 0, 0, 0)]
        code += [(JEQ, 0, 1, nr) for nr in accepts[:1]] + [(RET, 0, 0, RET_USER_NOTIF)]  # accept
        code += [(JEQ, 0, 1, accepts[1]), (RET, 0, 0, RET_USER_NOTIF), (RET, 0, 0, RET_ALLOW)]  # accept4
        program = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in code))
        fprog = ctypes.create_string_buffer(struct.pack("HL", len(code), ctypes.addressof(program)))
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            self.why_not = f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
        else:
            fd = _libc.syscall(seccomp_nr, SECCOMP_SET_MODE_FILTER, FILTER_FLAG_NEW_LISTENER,
                               ctypes.c_void_p(ctypes.addressof(fprog)))
            if fd < 0:
                self.why_not = f"seccomp user notification refused: {os.strerror(ctypes.get_errno())}"
            else:
                self.fd = fd
        self._ready.set()
        if self.why_not:
            log.info("the accept gate is not up: %s", self.why_not)
        return self.up

    # ------------------------------------------------------------------ the supervisor
    def _supervise(self):
        self._ready.wait()
        if self.fd is None:
            return
        while True:
            notif = Notif()
            if _libc.ioctl(self.fd, NOTIF_RECV, ctypes.byref(notif)) != 0:
                code = ctypes.get_errno()
                if code in (errno.EINTR, errno.ENOENT):  # (ENOENT: the caller was gone before we read it)
                    continue
                log.error("the accept gate stopped: %s (accepts of this process now fail)", os.strerror(code))
                return
            self.handled += 1
            try:
                self._answer(notif)
            except Exception:  # noqa: BLE001 - a syscall left unanswered would hang its thread: let it through
                log.exception("the accept gate failed on one accept: the kernel does it unchecked")
                self._reply(notif.id, flags=FLAG_CONTINUE)

    def _answer(self, notif):
        fd, flags = int(notif.args[0]), int(notif.args[3]) if notif.nr == ARCH[platform.machine()][2][1] else 0
        if not os.path.exists(f"/proc/self/task/{notif.pid}") or not self._judged(fd):
            return self._reply(notif.id, flags=FLAG_CONTINUE)  # not ours to judge: as without the gate
        address = ctypes.create_string_buffer(128)
        for _ in range(AT_ONCE):
            length = ctypes.c_uint32(128)
            new = _libc.accept4(fd, address, ctypes.byref(length), (flags & SOCK_NONBLOCK) | SOCK_CLOEXEC)
            if new < 0:
                code = ctypes.get_errno()
                if code == errno.EINTR:
                    continue
                return self._reply(notif.id, error=-code)  # EAGAIN: nothing (left) to accept
            uid = self._owner(new)
            if uid is None or uid == os.geteuid():
                break
            os.close(new)  # another account's (or a socket gone already): gloo never sees it
            if uid >= 0:
                with self._lock:
                    self.refused[uid] = self.refused.get(uid, 0) + 1
        else:  # a flood: the caller's thread (gloo's event loop, which serves every pair) must not wait on it
            return self._reply(notif.id, error=-errno.EAGAIN)
        try:
            addr, addrlen = int(notif.args[1]), int(notif.args[2])
            if addr and addrlen:  # the caller's accept fills in the peer's address (this process's memory)
                given = ctypes.c_uint32.from_address(addrlen)
                ctypes.memmove(addr, address, min(given.value, length.value))
                given.value = length.value
            add = AddFd(notif.id, ADDFD_FLAG_SEND, new, 0, os.O_CLOEXEC if flags & SOCK_CLOEXEC else 0)
            if _libc.ioctl(self.fd, NOTIF_ADDFD, ctypes.byref(add)) < 0:  # the caller's accept returns it
                code = ctypes.get_errno()
                if code != errno.ENOENT:  # (ENOENT: the caller is gone, interrupted: nothing to answer)
                    self._reply(notif.id, error=-code)
        finally:
            os.close(new)

    def take_refused(self):
        """{uid: connections closed} since the last call (guard.py reports them, once a second)."""
        with self._lock:
            refused, self.refused = self.refused, {}
        return refused

    @staticmethod
    def _judged(fd):
        """A non-blocking TCP listener of this process: the gate answers its accepts."""
        try:
            if not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK:
                return False  # (a blocking accept would hold the supervisor: the kernel does it)
            with socket.socket(fileno=os.dup(fd)) as s:
                return s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM
        except OSError:
            return False

    @staticmethod
    def _owner(fd):
        """The account that owns the other end of connection `fd`; None when it is not on this machine."""
        from .privacy import tcp_owner

        with socket.socket(fileno=os.dup(fd)) as s:
            local, peer = (_plain(*s.getsockname()[:2]), _plain(*s.getpeername()[:2]))
        if not (peer[0] == local[0] or peer[0].startswith("127.") or peer[0] == "::1"):
            return None  # another host's: who it is there cannot be known here
        uid = tcp_owner(peer, local)  # the connecting socket: its own address is our peer's
        return -1 if uid is None else uid  # (None: on this machine, but gone already: no one's to let in)

    def _reply(self, id_, error=0, flags=0):
        resp = Resp(id_, 0, error, flags)
        if _libc.ioctl(self.fd, NOTIF_SEND, ctypes.byref(resp)) != 0 and ctypes.get_errno() != errno.ENOENT:
            log.error("the accept gate could not answer an accept: %s", os.strerror(ctypes.get_errno()))


def _plain(ip, port):
    """An IPv4 peer of a dual-stack socket as sock_diag names it (privacy._ip_bytes)."""
    return (ip[7:] if ip.startswith("::ffff:") and "." in ip else ip), port


GATE = Gate()
