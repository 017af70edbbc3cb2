"""A signed key-value store for the gloo rendezvous across hosts, served by rank 0.

torch's TCPStore accepts anyone who reaches its port (PyTorch's SECURITY.md), and its client
looks up the name of its own address on every connection: on a host whose DNS server does not
answer (a network namespace, a cluster node without reverse DNS) that costs 10 s a connection,
20 s to form a group of 4. This store does no name lookups, and every request and reply carries
an HMAC-SHA256 of its bytes with the pool's key (which reaches the ranks through ipyparallel's
signed channel); what is not signed is dropped unread.

    port, public = serve(address, key, member[0])                           # in rank 0: a thread answers
    store = SignedStore(f"tcp://{address}:{port}", key, public, member)       # in every rank: a torch Store

A request is [signature, JSON header, value]; the header names the operation (set, get, add,
compare_set, wait, check, delete_key, num_keys), the client (random per store object) and the
request's number: the server answers a client's request only if its number is higher than the
last it answered for that client, so a signed request sent again (a replay) is dropped and counted.
The key is the pool's key bound to one forming of the group (rank.store_key): nothing signed for an
earlier forming is accepted. get and wait are answered when their keys exist (or with an error
after the timeout the request carries). The store is bounded (MAX_* below: message size, keys,
bytes, waiting requests, clients): beyond that a request is refused, never kept. Only the pool's
members can connect at all (CurveZMQ, the client's key checked: members.py), so its traffic is
encrypted too. zmq carries the bytes: it resolves no names.
"""
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from datetime import timedelta

import torch.distributed as dist
import zmq

from ..shared.members import MembersOnly, member_socket

_servers: list["_Server"] = []  # the servers of this process (rank 0): ended when the group is formed again
log = logging.getLogger("ddplab")
MAX_MESSAGE = 1 << 20  # bytes: gloo's rendezvous values are addresses, a few hundred bytes
MAX_KEYS = 4096
MAX_BYTES = 16 << 20  # all values together
MAX_PARKED = 1024  # get/wait requests waiting for their keys
MAX_CLIENTS = 4096


def _sign(key, frames):
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for frame in frames:
        mac.update(len(frame).to_bytes(8, "little"))
        mac.update(frame)
    return mac.digest()


def serve(address, key, member, port=0):
    """Start a store server bound to `address` (rank 0's own interface) on `port` (0: a free one),
    admitting the pool's members only (members.py: `member` is the pool's public member key);
    (its port, its CurveZMQ public key)."""
    stop()
    server = _Server(address, key, member, port)
    _servers.append(server)
    return server.port, server.public


def stop():
    while _servers:
        _servers.pop().close()


class _Server:
    def __init__(self, address, key, member, port=0):
        self.key, self.data, self.parked = key, {}, []  # parked: (deadline, peer, request) waiting for keys
        self.dropped = {}  # why -> count: unsigned, malformed, replayed, too much
        self.answered = {}  # client -> the number of its last request answered
        self.members = MembersOnly(zmq.ROUTER, member)
        self.socket, self.public = self.members.socket, self.members.public
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        if port:
            self.socket.bind(f"tcp://{address}:{port}")
            self.port = port
        else:
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
                for _ in range(1000):  # bounded: a flood cannot starve the parked requests
                    try:
                        frames = self.socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    except zmq.ZMQError:  # too large: zmq dropped it
                        continue
                    why = self._handle(frames)
                    if why is not None:
                        self.dropped[why] = self.dropped.get(why, 0) + 1
                        log.debug("rendezvous store: a %s request dropped", why)
            self._retry_parked()
        self.members.close()

    def _handle(self, frames):
        """Answer or park one request; why it was dropped, or None."""
        if len(frames) != 4 or not hmac.compare_digest(frames[1], _sign(self.key, frames[2:])):
            return "unsigned"  # not signed with this forming's key: dropped unread
        try:
            request = json.loads(frames[2])
            op, keys, client, number = request["op"], request.get("keys", []), request["client"], request["id"]
            if not (isinstance(op, str) and isinstance(keys, list) and all(isinstance(k, str) for k in keys)
                    and isinstance(client, str) and isinstance(number, int) and not isinstance(number, bool)):
                raise ValueError("bad request")
            deadline = time.monotonic() + min(float(request.get("timeout", 300)), 3600.0)
        except (ValueError, KeyError, TypeError):
            return "malformed"
        if number <= self.answered.get(client, 0):
            return "replayed"
        if client not in self.answered and len(self.answered) >= MAX_CLIENTS:
            return "too many clients"
        self.answered[client] = number
        if op in ("set", "add", "compare_set") and (len(self.data) >= MAX_KEYS and keys[:1] and keys[0] not in self.data
                            or sum(map(len, self.data.values())) + len(frames[3]) > MAX_BYTES):
            self._reply(frames[0], request, {"error": "the rendezvous store is full"})
            return "too much"
        try:
            answered = self._answer(frames[0], request, frames[3])
        except (ValueError, TypeError, KeyError, IndexError) as exc:  # signed, yet not a request this store can do
            self._reply(frames[0], request, {"error": f"malformed request ({type(exc).__name__}: {exc})"})
            return "malformed"
        if not answered:
            if len(self.parked) >= MAX_PARKED:
                self._reply(frames[0], request, {"error": "too many requests wait in the rendezvous store"})
                return "too much"
            self.parked.append((deadline, frames[0], request, frames[3]))
        return None

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
        if op in ("set", "get", "add", "compare_set", "delete_key") and len(keys) != 1:
            raise ValueError(f"{op} takes one key, not {len(keys)}")
        if op == "add" and (isinstance(request.get("amount"), bool) or not isinstance(request.get("amount"), int)):
            raise TypeError("add takes a whole number")
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
        header = json.dumps({"id": request.get("id"), "client": request.get("client"), **reply}).encode()
        self.socket.send_multipart([peer, _sign(self.key, [header, value]), header, value])


class SignedStore(dist.Store):
    """A torch.distributed.Store whose server is `serve(...)` in rank 0 (see the module docstring)."""

    def __init__(self, address, key, serverkey, member, timeout=timedelta(seconds=300)):
        super().__init__()
        self.address, self.key, self.wait_limit = address, key, timeout
        self.lock = threading.Lock()
        self.socket = member_socket(zmq.DEALER, serverkey, member)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        self.socket.connect(address)
        self.client = secrets.token_hex(8)  # with next_id: each request is answered once
        self.next_id = 0

    def _call(self, op, keys=(), value=b"", timeout=None, **extra):
        seconds = (timeout or self.wait_limit).total_seconds()
        with self.lock:
            self.next_id += 1
            header = json.dumps({"op": op, "keys": list(keys), "client": self.client, "id": self.next_id,
                                 "timeout": seconds, **extra}).encode()
            self.socket.send_multipart([_sign(self.key, [header, value]), header, value])
            deadline = time.monotonic() + seconds + 5
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not self.socket.poll(int(left * 1000)):
                    raise RuntimeError(f"the rendezvous store at {self.address} did not answer {op} in {seconds:.0f} s")
                try:
                    frames = self.socket.recv_multipart()
                except zmq.ZMQError:  # too large: dropped by zmq
                    continue
                if len(frames) != 3 or not hmac.compare_digest(frames[0], _sign(self.key, frames[1:])):
                    continue  # not from the pool's server: dropped
                reply = json.loads(frames[1])
                if reply.get("id") != self.next_id or reply.get("client") != self.client:
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
