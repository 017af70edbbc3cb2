"""A signed key-value store for the gloo rendezvous across hosts, served by rank 0.

torch's TCPStore accepts anyone who reaches its port (PyTorch's SECURITY.md), and its client
looks up the name of its own address on every connection: on a host whose DNS server does not
answer (a network namespace, a cluster node without reverse DNS) that costs 10 s a connection,
20 s to form a group of 4. This store does no name lookups, and every request and reply carries
an HMAC-SHA256 of its bytes with the pool's key (which reaches the ranks through ipyparallel's
signed channel); what is not signed is dropped unread.

    port = serve(address, key)                          # in rank 0: a thread answers requests
    store = SignedStore(f"tcp://{address}:{port}", key)  # in every rank: a torch.distributed.Store

A request is [signature, JSON header, value]; the header names the operation (set, get, add,
compare_set, wait, check, delete_key, num_keys). get and wait are answered when their keys exist
(or with an error after the timeout the request carries). zmq carries the bytes: it resolves no
names.
"""
import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta

import torch.distributed as dist
import zmq

_servers = []  # the servers of this process (rank 0): ended when the group is formed again


def _sign(key, frames):
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for frame in frames:
        mac.update(len(frame).to_bytes(8, "little"))
        mac.update(frame)
    return mac.digest()


def serve(address, key):
    """Start a store server bound to `address` (rank 0's own interface) on a free port; its port."""
    stop()
    server = _Server(address, key)
    _servers.append(server)
    return server.port


def stop():
    while _servers:
        _servers.pop().close()


class _Server:
    def __init__(self, address, key):
        self.key, self.data, self.parked = key, {}, []  # parked: (deadline, peer, request) waiting for keys
        self.dropped = 0
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.port = self.socket.bind_to_random_port(f"tcp://{address}")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="ddplab-store", daemon=True)
        self.thread.start()

    def close(self):
        self.stopping.set()
        self.thread.join(5)

    def _loop(self):
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while not self.stopping.is_set():
            if poller.poll(50):
                while True:
                    try:
                        frames = self.socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(frames)
            self._retry_parked()
        self.socket.close(linger=0)

    def _handle(self, frames):
        if len(frames) != 4 or not hmac.compare_digest(frames[1], _sign(self.key, frames[2:])):
            self.dropped += 1  # not signed with the pool's key: dropped unread
            return
        try:
            request = json.loads(frames[2])
            op, keys = request["op"], request.get("keys", [])
            if not (isinstance(op, str) and isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
                raise ValueError("bad request")
        except (ValueError, KeyError, TypeError):
            self.dropped += 1
            return
        if not self._answer(frames[0], request, frames[3]):
            self.parked.append((time.monotonic() + float(request.get("timeout", 300)), frames[0], request, frames[3]))

    def _retry_parked(self):
        now, still = time.monotonic(), []
        for deadline, peer, request, value in self.parked:
            if self._answer(peer, request, value):
                continue
            if now > deadline:
                self._reply(peer, request, {"error": f"timed out waiting for keys {request['keys']}"})
            else:
                still.append((deadline, peer, request, value))
        self.parked = still

    def _answer(self, peer, request, value):
        """Reply if the request can be answered now; False to park it until its keys exist."""
        op, keys, data = request["op"], request.get("keys", []), self.data
        if op in ("get", "wait") and not all(k in data for k in keys):
            return False
        out, reply = b"", {}
        if op == "set":
            data[keys[0]] = value
        elif op == "get":
            out = data[keys[0]]
        elif op == "add":
            total = int(data.get(keys[0], b"0")) + int(request["amount"])
            data[keys[0]] = str(total).encode()
            reply["value"] = total
        elif op == "compare_set":
            expected, desired = bytes.fromhex(request["expected"]), value
            current = data.get(keys[0])
            if (current is None and not expected) or current == expected:
                data[keys[0]] = current = desired
            out = current if current is not None else expected
        elif op == "check":
            reply["value"] = all(k in data for k in keys)
        elif op == "delete_key":
            reply["value"] = data.pop(keys[0], None) is not None
        elif op == "num_keys":
            reply["value"] = len(data)
        elif op != "wait":
            reply["error"] = f"unknown operation {op!r}"
        self._reply(peer, request, reply, out)
        return True

    def _reply(self, peer, request, reply, value=b""):
        header = json.dumps({"id": request.get("id"), **reply}).encode()
        self.socket.send_multipart([peer, _sign(self.key, [header, value]), header, value])


class SignedStore(dist.Store):
    """A torch.distributed.Store whose server is `serve(...)` in rank 0 (see the module docstring)."""

    def __init__(self, address, key, timeout=timedelta(seconds=300)):
        super().__init__()
        self.address, self.key, self.wait_limit = address, key, timeout
        self.lock = threading.Lock()
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self.next_id = 0

    def _call(self, op, keys=(), value=b"", timeout=None, **extra):
        seconds = (timeout or self.wait_limit).total_seconds()
        with self.lock:
            self.next_id += 1
            header = json.dumps({"op": op, "keys": list(keys), "id": self.next_id, "timeout": seconds,
                                 **extra}).encode()
            self.socket.send_multipart([_sign(self.key, [header, value]), header, value])
            deadline = time.monotonic() + seconds + 5
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not self.socket.poll(int(left * 1000)):
                    raise RuntimeError(f"the rendezvous store at {self.address} did not answer {op} in {seconds:.0f} s")
                frames = self.socket.recv_multipart()
                if len(frames) != 3 or not hmac.compare_digest(frames[0], _sign(self.key, frames[1:])):
                    continue  # not from the pool's server: dropped
                reply = json.loads(frames[1])
                if reply.get("id") != self.next_id:
                    continue  # a late answer to an earlier request
                if "error" in reply:
                    raise RuntimeError(f"rendezvous store: {reply['error']}")
                return reply, frames[2]

    # the torch.distributed.Store interface
    def set(self, key, value):
        self._call("set", [key], value if isinstance(value, bytes) else str(value).encode())

    def get(self, key):
        return self._call("get", [key])[1]

    def add(self, key, amount):
        return self._call("add", [key], amount=int(amount))[0]["value"]

    def compare_set(self, key, expected, desired):
        expected = expected if isinstance(expected, bytes) else str(expected).encode()
        desired = desired if isinstance(desired, bytes) else str(desired).encode()
        return self._call("compare_set", [key], desired, expected=expected.hex())[1]

    def wait(self, keys, timeout=None):
        self._call("wait", keys, timeout=timeout)

    def check(self, keys):
        return self._call("check", keys)[0]["value"]

    def delete_key(self, key):
        return self._call("delete_key", [key])[0]["value"]

    def num_keys(self):
        return self._call("num_keys")[0]["value"]

    def set_timeout(self, timeout):
        self.wait_limit = timeout
