"""The gloo process group over a pool's engines: form (and re-form), close.

Where the ranks meet is the pool's to say (Pool.rendezvous): locally a FileStore in the pool's
private folder (it opens no network port); across hosts a signed store that rank 0 serves on its
own address (store.py): torch's TCPStore accepts anyone, and its clients look up their own
address's name on every connection (10 s each where DNS does not answer). gloo is pinned to each
rank's own interface.
"""
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..shared.config import tunables
from ..shared.errors import StartFailed
from ..shared.wire import TIMED_EVERY

if TYPE_CHECKING:
    from ..processes.pool import Pool
    from ..shared.config import PoolConfig
    from .telemetry import Telemetry

log = logging.getLogger("ddplab")


class Group:
    """One gloo group over `pool`'s engines, formed again (a new generation) whenever needed."""

    def __init__(self, pool: "Pool", config: "PoolConfig", telemetry: "Telemetry | None" = None) -> None:
        self.pool, self.config, self.telemetry = pool, config, telemetry
        self.generation = 0
        self.info: list[dict[str, Any]] = []  # per rank, what it reported on joining: rank, engine, pid, host, threads, ports
        self.knobs: dict[str, Any] = {}  # the Lab's knobs: a rank that joins (a restarted one) gets them too
        self.store_public: bytes | None = None  # CurveZMQ public key of rank 0's store (a signed store: members.py)
        self.where: str | None = None  # the rendezvous of the last forming (file://..., signed://host:port)
        self.timeline = True  # ranks record their timeline (Records.record)
        self.timeline_every = TIMED_EVERY  # a cell's steps after its first 20: every this many-th is timed
        self.clock_offsets: dict[int, float] = {}  # rank -> its host's monotonic clock minus the notebook's (0 on this machine)
        self.clock_error = 0.0  # how well the offsets are known (seconds: half the best round trip)
        self.refused: dict[str, list[int]] = {}  # account -> [gloo connections refused, pairs taken] in the last forming
        self.formed = False  # the last forming succeeded

    def form(self, deadline: float, say: Callable[..., object] | None = None) -> tuple[float, list[tuple[str, str]]]:
        """(Re-)form the group on every rank. Returns (seconds, objects tied to the old group:
        [(name, kind)]) and keeps what each rank reported in self.info."""
        from ..rank import call

        tic = time.perf_counter()
        pool, cfg = self.pool, self.config
        n, eids, client = cfg.ranks, pool.engine_ids, pool.client
        assert n is not None  # (an attached pool's size is known once its engines are: Lab.start)
        self.formed = False  # until every rank has joined: a forming that fails is tried again (Lab.check_ranks)
        self.generation += 1
        if self.telemetry is not None:
            self.telemetry.generation = self.generation  # batches of the forming before are late from now
        key = self.telemetry.key if self.telemetry else b""
        member = self.telemetry.member if self.telemetry else None  # the pool's member key pair (members.py)
        self.where, self.store_public = pool.rendezvous(self.generation, key, member)
        where = self.where
        if say:
            say("starting {n} ranks: forming the gloo group", n=n)
        address = self.telemetry.address if self.telemetry else None
        threads = pool.threads_per_rank(cfg.threads)
        ifnames = [f["ifname"] for f in pool.facts] if pool.facts else [None] * n
        curve = {"member": member, "telemetry": self.telemetry.public if self.telemetry else None,
                 "store": self.store_public}
        compile_folder = pool.compile_folder()
        ars = [client[eid].apply_async(call, "join", r, n, where, cfg.timeout, threads[r], address, tunables().flush,
                                       key, ifnames[r], self.knobs, cfg.lang, self.generation, curve,
                                       compile_folder, self.timeline and self.timeline_every,
                                       tunables().accept_gate)
               for r, eid in enumerate(eids)]
        for ar in ars:
            if not ar.wait(max(0.0, deadline - time.perf_counter())):
                raise StartFailed(f"the gloo group did not form in {cfg.start_timeout:.0f} s: try again")
        for r, ar in enumerate(ars):
            try:
                ar.get()
            except Exception as exc:  # noqa: BLE001 - reported with its text
                raise StartFailed(f"rank {r} could not join the gloo group: {exc}") from exc
        self.info = [dict(ar.get(), engine=eid) for eid, ar in zip(eids, ars)]
        ports = sorted({p for i in self.info for p in i.get("ports", ())})  # each rank learns every rank's listeners
        for ar in [client[eid].apply_async(call, "know_ports", ports) for eid in eids]:
            ar.get(max(0.1, deadline - time.perf_counter()))
        for i, facts in zip(self.info, pool.facts):
            i.update(address=facts["ip"], ifname=facts["ifname"])
        stale = sorted({tuple(s) for i in self.info for s in i.pop("stale", [])})
        self.refused = {}  # other accounts' gloo connections the ranks refused while it formed (ddplab.rank.guard)
        for i in self.info:
            for account, (n, taken) in i.pop("refused", {}).items():
                self.refused[account] = [a + b for a, b in zip(self.refused.get(account, [0, 0]), (n, taken))]
        self.clock_offsets, self.clock_error = pool.clock_offsets()
        self.formed = True
        return time.perf_counter() - tic, stale

    def close(self, ranks: Sequence[int]) -> None:
        """Close the group on `ranks` (idle ones), so peers blocked on them fail at once."""
        from ..rank import call

        ports = sorted({p for i in self.info for p in i.get("ports", ())})
        try:
            engines = self.pool.client[[self.pool.engine_ids[r] for r in ranks]]
            engines.apply_async(call, "close_group", ports).get(timeout=tunables().control_timeout)
        except Exception:  # noqa: BLE001 - a rank that cannot close its group is dealt with by kill
            log.info("closing the group on ranks %s failed; escalation deals with them", ranks, exc_info=True)
