"""Another user of the machine attacks a running pool: python3 intruder.py PLAN.json MARKER

Run as a second Unix user (stdlib only: it cannot import the owner's packages). PLAN lists the
pool's listening TCP sockets, its socket files and its private folder. To every TCP socket it
sends a pickle that would create MARKER if anything unpickled it, random bytes, and a forged
telemetry batch (a wrong signature), both raw and as a zmq peer of every kind (ZMTP 3.0, NULL
mechanism, written here by hand); it tries to connect to every socket file and to read every
file of the folder. Prints JSON: what it reached and what it could read."""
import json
import os
import pickle
import random
import socket
import struct
import sys


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


def zmtp(sock, kind, messages):
    """Handshake as a zmq socket of `kind`, then send each message (a list of frames)."""
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
    for parts in messages:
        for i, part in enumerate(parts):
            sock.sendall(frame(part, more=i < len(parts) - 1))
    try:  # read what the peer says before closing: closing on unread data resets the connection,
        sock.settimeout(0.3)  # and the peer would drop what it had not read yet
        while sock.recv(4096):
            pass
    except OSError:
        pass
    return True


def payloads(marker):
    evil = pickle.dumps(Evil(marker))
    forged = [b"\x00" * 32, json.dumps({"v": 1, "rank": 0, "cell": 1, "n": 1, "final": False, "events": [],
                                         "extras": []}).encode()] + [struct.pack("<d", 1.0)] * 4
    return evil, [[evil], [os.urandom(200)], forged, [b"", b"<IDS|MSG>", evil, evil, evil, evil]]


def attack_tcp(host, port, marker):
    evil, messages = payloads(marker)
    reached = []
    for kind in ("raw", "DEALER", "PUSH", "PUB", "ROUTER", "REQ", "PAIR"):
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                if kind == "raw":
                    s.sendall(evil + os.urandom(512))
                    ok = True
                else:
                    ok = zmtp(s, kind, messages)
                if ok:
                    reached.append(kind)
        except OSError:
            pass
    return reached


def attack_unix(path, marker):
    evil, messages = payloads(marker)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            zmtp(s, "PUSH", messages)
            return True
    except OSError:
        return False


def read_everything(folder):
    read = []
    try:
        names = os.listdir(folder)
        read.append(folder)
    except OSError:
        names = []
    for root, dirs, files in os.walk(folder):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    f.read(1)
                read.append(os.path.join(root, name))
            except OSError:
                pass
    for name in names:  # in case walking was refused but listing was not
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                f.read(1)
            read.append(path)
        except OSError:
            pass
    return read


def main(plan_path, marker):
    with open(plan_path) as f:
        plan = json.load(f)
    report = {"uid": os.getuid(), "tcp": {}, "unix": {}, "read": []}
    random.seed()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:  # many sockets, each waited on for a moment
        for (host, port), reached in zip(plan["tcp"], pool.map(lambda t: attack_tcp(*t, marker), plan["tcp"])):
            report["tcp"][f"{host}:{port}"] = reached
    for path in plan["unix"]:
        report["unix"][path] = attack_unix(path, marker)
    for folder in plan["folders"]:
        report["read"] += read_everything(folder)
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
