"""zmq sockets across a network that only the pool's own members can use.

ddplab's sockets on TCP (the notebook's telemetry, rank 0's rendezvous store: pools across hosts,
or a local pool's rendezvous="tcp://...") use CurveZMQ both ways: the members know the server's
public key, and the server checks each client's key against the pool's member key (a ZAP handler:
pyzmq's ThreadAuthenticator). A peer without that key is refused during the handshake, before zmq
reads a frame of it. That bound matters: zmq's MAXMSGSIZE bounds one frame, not a message, and zmq
assembles a multi-frame message whole before handing it over (1 GiB in one message took a process
from 20 MiB to 1 GiB); a handshake's messages are bounded. The member key pair reaches the ranks
through ipyparallel's signed channel (encrypted too with --encrypt).

Each server lives in a zmq context of its own: a ZAP handler answers for every CURVE server of its
context, and the notebook's kernel may have others (Jupyter's own, encrypted).

    member = zmq.curve_keypair()              # the pool's (notebook)
    server = MembersOnly(zmq.ROUTER, member[0]); port = server.socket.bind_to_random_port("tcp://ADDR")
    sock = member_socket(zmq.DEALER, server.public, member)   # in a rank: then sock.connect(...)
"""
import logging

import zmq

Key = bytes | str  # a CurveZMQ key, z85-encoded

log = logging.getLogger("ddplab")


class MembersOnly:
    """A zmq socket of `kind` (a CurveZMQ server) that admits clients holding the key pair whose
    public half is `member` (z85 bytes or str); `refused` counts the others."""

    FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH

    def __init__(self, kind: int, member: Key) -> None:
        import threading

        from zmq.auth.thread import ThreadAuthenticator

        self.member = member.encode() if isinstance(member, str) else member
        self._refused = 0
        self._lock = threading.Lock()
        self.context = zmq.Context()
        self.auth = ThreadAuthenticator(self.context, log=logging.getLogger("ddplab.zap"))
        self.auth.start()
        self.auth.configure_curve_callback("*", credentials_provider=self)
        self.public, secret = zmq.curve_keypair()
        self.socket = self.context.socket(kind)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.curve_server = True
        self.socket.curve_secretkey = secret
        self._events = self.socket.get_monitor_socket(self.FAILED)  # handshakes that failed: peers refused

    def callback(self, domain: str, client_key: bytes) -> bool:
        """The ZAP handler's question: may this client key connect?"""
        return client_key == self.member

    @property
    def refused(self) -> int:
        """Connections refused so far: without the pool's key, or not speaking CurveZMQ at all."""
        from zmq.utils.monitor import parse_monitor_message

        with self._lock:
            while True:
                try:
                    event = parse_monitor_message(self._events.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    return self._refused
                if event["event"] & self.FAILED:
                    self._refused += 1
                    log.info("a connection without the pool's key refused (%d so far)", self._refused)

    def close(self) -> None:
        with self._lock:
            self.socket.disable_monitor()
            self._events.close(linger=0)
        self.socket.close(linger=0)
        self.auth.stop()
        self.context.term()


def member_socket(kind: int, serverkey: Key, member: tuple[Key, Key], context: zmq.Context | None = None) -> zmq.Socket:
    """A zmq socket of `kind` that connects to a MembersOnly server (public key `serverkey`) as a
    member (`member`: the pool's (public, secret) key pair)."""
    def raw(key: Key) -> bytes:
        return key.encode() if isinstance(key, str) else key

    sock = (context or zmq.Context.instance()).socket(kind)
    sock.curve_serverkey = raw(serverkey)
    sock.curve_publickey, sock.curve_secretkey = raw(member[0]), raw(member[1])
    return sock
