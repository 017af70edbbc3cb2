"""Another user of the machine attacks running pools: python3 intruder.py MODE PLAN.json

Run as a second Unix user (stdlib only: it cannot import the owner's packages). PLAN lists the
pools' listening TCP sockets, their socket files and private folders. Prints JSON.

listen  connect to every TCP socket as a zmq SUB peer (ZMTP 3.0, NULL mechanism, written here by
        hand), subscribe to everything, and read for PLAN["seconds"]: how many bytes each socket
        sent, and whether PLAN["secret"] was among them. PLAN["control"] is a socket that does
        publish the secret (the test's own): reading it shows the listener works.
junk    for PLAN["seconds"], send to every TCP socket, over and over: random bytes, bytes shaped as an
        old-style ZMTP/1.0 peer (which zmq still accepts as frames), a pickle that would create
        PLAN["marker"] if anything unpickled it, and forged messages as a zmq peer of every kind;
        try to connect to every socket file and to read every file of the folders. Reports what it
        reached, and which sockets hung up at once on the ZMTP/1.0 greeting (a CurveZMQ server
        refuses a peer that cannot do the CURVE handshake before reading any frame).
"""
import json
import os
import pickle
import random
import socket
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def frame(body, more=False, command=False):
    flags = (0x01 if more else 0) | (0x04 if command else 0)
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def handshake(sock, kind):
    """ZMTP 3.0 greeting and READY as a zmq socket of `kind`; False if the peer hung up."""
    sock.sendall(b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
    got = b""
    while len(got) < 64:
        chunk = sock.recv(64 - len(got))
        if not chunk:
            return False
        got += chunk
    name = b"Socket-Type"
    sock.sendall(frame(b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(kind)) + kind.encode(),
                       command=True))
    return True


def zmtp1_junk():
    """An old-style (ZMTP/1.0) peer: an identity frame, then frames of random bytes ([length incl.
    flags][flags][body]); zmq takes a first byte other than 0xFF as such a peer."""
    out = b"\x01\x00"  # an empty identity
    for _ in range(random.randint(1, 6)):
        body = os.urandom(random.randint(0, 200))
        out += bytes([len(body) + 1, random.choice((0, 1))]) + body
    return out


def hangs_up(sock, seconds=1.0):
    """Whether the peer closes the connection within `seconds` (without sending anything of note)."""
    sock.settimeout(seconds)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except TimeoutError:
        return False
    except OSError:  # reset: it closed with our bytes unread
        return True


# ------------------------------------------------------------------ listen
def listen(host, port, seconds, secret):
    got = b""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            if not handshake(s, "SUB"):
                return {"connected": True, "bytes": 0, "secret": False}
            s.sendall(frame(b"\x01"))  # ZMTP 3.0 subscription: everything
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                s.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    chunk = s.recv(65536)
                except OSError:
                    continue
                if not chunk:
                    break
                got += chunk
    except OSError:
        return {"connected": False, "bytes": 0, "secret": False}
    return {"connected": True, "bytes": len(got), "secret": secret.encode() in got}


def unix_reachable(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            return True
    except OSError:
        return False


# ------------------------------------------------------------------ junk
def payloads(marker):
    evil = pickle.dumps(Evil(marker))
    forged = [b"\x00" * 32, json.dumps({"v": 1, "rank": 0, "gen": 1, "seq": 10**9, "cell": 1, "n": 1,
                                         "final": False, "events": [], "extras": []}).encode()] + [struct.pack("<d", 1.0)] * 4
    return evil, [[evil], [os.urandom(200)], forged, [b"", b"<IDS|MSG>", evil, evil, evil, evil]]


def junk_once(host, port, marker):
    """One round of every shape at one socket: (reached, hung up on the ZMTP/1.0 greeting)."""
    evil, messages = payloads(marker)
    reached, refused = [], None
    for kind in ("raw", "zmtp1", "DEALER", "PUSH", "PUB", "ROUTER", "REQ", "PAIR"):
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                if kind == "raw":
                    s.sendall(os.urandom(random.randint(1, 512)) + evil)
                elif kind == "zmtp1":
                    s.sendall(zmtp1_junk())
                    refused = hangs_up(s)
                elif handshake(s, kind):
                    for parts in messages:
                        s.sendall(b"".join(frame(p, more=i < len(parts) - 1) for i, p in enumerate(parts)))
                    hangs_up(s, 0.2)  # read before closing: closing on unread data resets the connection
                reached.append(kind)
        except OSError:
            pass
    return reached, refused


def junk(plan):
    seconds, marker = plan["seconds"], plan["marker"]
    report = {"tcp": {}, "refused_zmtp1": {}, "unix": {}, "read": [], "rounds": 0}
    deadline = time.monotonic() + seconds
    with ThreadPoolExecutor(16) as pool:
        while True:
            results = pool.map(lambda t: junk_once(*t, marker), plan["tcp"])
            for (host, port), (reached, refused) in zip(plan["tcp"], results):
                key = f"{host}:{port}"
                report["tcp"][key] = sorted(set(report["tcp"].get(key, [])) | set(reached))
                if refused is not None:
                    report["refused_zmtp1"][key] = refused
            report["rounds"] += 1
            if time.monotonic() >= deadline:
                break
    for path in plan["unix"]:
        report["unix"][path] = unix_reachable(path)
    for folder in plan["folders"]:
        report["read"] += read_everything(folder)
    return report


def read_everything(folder):
    read = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                if os.path.isdir(path):
                    os.listdir(path)
                else:
                    with open(path, "rb") as f:
                        f.read(1)
                read.append(path)
            except OSError:
                pass
    try:
        os.listdir(folder)
        read.append(folder)
    except OSError:
        pass
    return read


def main(mode, plan_path):
    with open(plan_path) as f:
        plan = json.load(f)
    random.seed()
    if mode == "listen":
        targets = [*plan["tcp"], *([plan["control"]] if plan.get("control") else [])]
        with ThreadPoolExecutor(max(1, len(targets))) as pool:
            heard = list(pool.map(lambda t: listen(*t, plan["seconds"], plan["secret"]), targets))
        report = {"uid": os.getuid(), "tcp": {f"{h}:{p}": r for (h, p), r in zip(plan["tcp"], heard)},
                  "control": heard[-1] if plan.get("control") else None,
                  "unix": {path: unix_reachable(path) for path in plan["unix"]}}
    else:
        report = {"uid": os.getuid(), **junk(plan)}
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
