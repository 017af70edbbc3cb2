"""The process layer: engines that run the ranks, behind one interface (`Pool`).

A pool knows engines and processes, never cells: it starts engines (in rank order), tells which
ranks are lost and why, kills or interrupts ranks, says where the ranks meet (the rendezvous) and
what protects them, and stops. It is the only owner of lost-rank bookkeeping. Three kinds, and
everything that differs between them lives inside them:

- `LocalPool` (localpool.py): engines on this machine, forked from a zygote (or started by
  ipyparallel's local launcher), talking over socket files in the pool's private folder;
- `AttachedPool` (hostpool.py): engines someone else started, on any hosts, through their
  controller's connection file;
- `LaunchedPool` (hostpool.py): engines ddplab starts on other hosts with an ipyparallel launcher
  (mpi, ssh, slurm, ...).
"""
import abc
import hmac
import logging
import threading
from dataclasses import dataclass

from ..shared import upstream

log = logging.getLogger("ddplab")


@dataclass(frozen=True)
class Lost:
    """A rank whose engine is gone."""

    rank: int
    host: str
    why: str  # "its engine exited with code 3", "its engine was killed (SIGKILL)", ...


CLIENT_STREAMS = tuple(f"ipyparallel.client.client:Client.{name}" for name in (  # (upstream.py)
    "_query_stream", "_control_stream", "_mux_stream", "_task_stream", "_iopub_stream", "_notification_stream",
    "_broadcast_stream"))
RECV_CALLBACK = "zmq.eventloop.zmqstream:ZMQStream._recv_callback"


def guard_client(client):
    """Keep a malformed message from breaking ipyparallel's Client. Its controller relays what it
    receives; the Client's handler raises on a message without its delimiter ("DELIM not in
    msg_list"), the exception escapes the stream's event handler (a traceback in the notebook), and
    the stream stops reading (zmq's edge-triggered descriptor): no more output from the ranks. Each
    handler is wrapped: a message that is not a signed message of this session is dropped and
    counted, unread; a well-formed one goes to ipyparallel's handler, and should that raise, it is a
    bug, logged as one (with its traceback), never taken for a stranger's message. Returns the counts:
    channel -> messages dropped. (Private names of ipyparallel 9.2 and pyzmq's ZMQStream, listed in
    upstream.py: a channel whose names moved goes unguarded, said once.)"""
    dropped = {}

    def guarded(channel, handler):
        def receive(msg):
            if not well_formed(client.session, msg):
                dropped[channel] = dropped.get(channel, 0) + 1
                log.debug("ipyparallel's %s channel: a malformed message dropped", channel)
                return None
            try:
                return handler(msg)
            except Exception:  # noqa: BLE001 - a bug, not a stranger: said as one; the stream must read on
                log.error("ipyparallel's %s channel: handling a message of this pool failed", channel, exc_info=True)
        return receive

    for path in CLIENT_STREAMS:
        stream = upstream.get(path, client)
        if stream is None or not upstream.has(RECV_CALLBACK, stream) or stream._recv_callback is None:
            continue
        channel = path.rpartition("._")[2].split("_")[0]  # ("query", ...)
        stream._recv_callback = guarded(channel, stream._recv_callback)
    return dropped


def well_formed(session, msg):
    """Whether `msg` (a zmq message's frames) is a message of this session: identities, the delimiter,
    then header, parent, metadata and content signed with its key. Nothing is kept (the session's
    replay check is left to its own handler)."""
    try:  # (zmq Frames, as ipyparallel's streams give them, or bytes; a result's buffers are not copied)
        _, parts = session.feed_identities(msg, copy=not hasattr(msg[0], "bytes"))
        parts = [getattr(p, "bytes", p) for p in parts[:5]]
    except (ValueError, TypeError, IndexError):
        return False
    if len(parts) < 5:
        return False
    return session.auth is None or hmac.compare_digest(parts[0], session.sign(parts[1:5]))


class Pool(abc.ABC):
    """Engines that run the ranks, in rank order: the interface every kind of pool implements.

    After start(): client (ipyparallel's Client), engine_ids (rank -> engine id), hosts (rank ->
    host), facts (per rank: host, pid, ip, ifname, cores; across hosts), workdir (the pool's
    private 0700 folder on this machine), dropped (ipyparallel channel -> malformed messages its
    Client dropped). say(en, zh) reports progress, in the pool's language.
    """

    def __init__(self, ifname=None):
        self.client = self.workdir = None
        self.engine_ids, self.facts = [], []
        self.hosts = {}  # rank -> host, from track()
        self.dropped = {}
        self.ifname = ifname  # the interface every rank uses toward its peers, if the user named one
        self._lost = {}  # rank -> Lost: the one record of lost ranks
        self._lost_lock = threading.Lock()  # (a background cell's monitor and the notebook both ask)

    # ------------------------------------------------------------------ what every kind does
    @abc.abstractmethod
    def start(self, n, deadline, say):
        """Start (or find) the engines and put them in rank order; their engine ids."""

    @abc.abstractmethod
    def replace(self, ranks, deadline, say):
        """Fresh engines for `ranks` (their old ones killed), in their places."""

    @abc.abstractmethod
    def renew(self, deadline, say):
        """Every rank as new, for %ddp_restart --all: True if the engines were kept (their variables
        cleared), False if every rank got a fresh engine."""

    @abc.abstractmethod
    def kill(self, ranks, why=None):
        """SIGKILL the engines of `ranks` (and what they started); `why` marks them lost."""

    @abc.abstractmethod
    def interrupt(self, ranks):
        """SIGINT to `ranks`, like Ctrl-C in each."""

    @abc.abstractmethod
    def pids(self):
        """Every process of the pool on this machine that stop() ends (none for engines not ours)."""

    @abc.abstractmethod
    def stop(self, shutdown=False):
        """End the pool; return what was done: "stopped" (every process of it ended), "left" (the
        group left, the engines someone else started running on) or "shut down" (those too)."""

    @abc.abstractmethod
    def telemetry_where(self):
        """Where the notebook's telemetry socket listens ("ipc://DIR" or "tcp://HOST")."""

    @abc.abstractmethod
    def rendezvous(self, generation, key, member):
        """Where the ranks meet for forming `generation` of the group: (address for rank.join, the
        CurveZMQ public key of the store that serves it, or None). member: the pool's member key
        pair (members.py), which a store on TCP admits."""

    def signed_store(self, address, key, generation, member, port=0):
        """Rank 0 serves the signed store of this forming on `address` (store.py): (its address for
        rank.join, its public key)."""
        from ..rank import call

        port, public = self.client[self.engine_ids[0]].apply_sync(call, "serve_store", address, key, generation,
                                                                  member[0], port)
        return f"signed://{address}:{port}", public

    @abc.abstractmethod
    def exposure(self):
        """Facts for privacy.protections: local, network, network_why, signed, encrypted, controller."""

    @property
    def encrypted(self):
        """Whether what crosses hosts is encrypted (CurveZMQ); ddplab's own traffic follows it."""
        return False

    def compile_folder(self):
        """The folder the ranks' torch.compile may use, checked now (before every forming of the
        group): None lets each rank's host choose (privacy.default_compile_cache)."""
        return None

    compile_cache = compile_refused = None  # the folder compile_folder() chose, and why not the configured one

    def rendezvous_text(self):
        """Where the ranks meet, for %ddp_status."""
        return "file (private folder)"

    def clock_offsets(self):
        """({rank: its host's monotonic clock minus this machine's}, how well they are known in
        seconds): every rank here shares this machine's clock."""
        return {}, 0.0

    # ------------------------------------------------------------------ shared bookkeeping
    def place(self, eids, facts=()):
        """These engines, in this order, are the ranks."""
        self.engine_ids, self.facts = list(eids), list(facts)
        self.hosts = {r: f["host"] for r, f in enumerate(self.facts)}

    def track(self, info):
        """What each rank reported when it joined the group (pid, host): rank order. The names of other
        packages a rank found moved (upstream.py) are said here, once each."""
        self.hosts = {r: i.get("host", "") for r, i in enumerate(info)}
        for path in sorted({p for i in info for p in i.get("moved", ()) if p in upstream.NAMES}):
            upstream.feature_off(path)

    def threads_per_rank(self, configured):
        """Torch threads per rank: as configured, or the cores of the rank's host shared among the
        ranks on that host (at least 1)."""
        if configured or not self.facts:
            return [configured or 1] * len(self.engine_ids)
        per_host = {}
        for f in self.facts:
            per_host[f["host"]] = per_host.get(f["host"], 0) + 1
        return [max(1, f["cores"] // per_host[f["host"]]) for f in self.facts]

    def lost(self, ranks=None):
        """rank -> Lost for every rank (of `ranks`) whose engine is gone; cheap enough per poll."""
        with self._lost_lock:
            for r in range(len(self.engine_ids)) if ranks is None else ranks:
                if r not in self._lost:
                    why = self._gone_why(r)
                    if why is not None:
                        self._lost[r] = Lost(r, self.hosts.get(r, ""), why)
                        log.info("rank %s lost: %s", r, why)
            return {r: lost for r, lost in self._lost.items() if ranks is None or r in ranks}

    def mark_lost(self, rank, why):
        with self._lost_lock:
            self._lost[rank] = Lost(rank, self.hosts.get(rank, ""), why)
        log.info("rank %s lost: %s", rank, why)

    def found_again(self, rank):
        with self._lost_lock:
            self._lost.pop(rank, None)

    def _gone_why(self, rank):
        """Why this rank's engine is gone, or None while it lives (the controller's view)."""
        if self.client is not None and rank < len(self.engine_ids) and self.engine_ids[rank] not in self.client.ids:
            return "its engine is gone: the controller no longer hears it"
        return None
