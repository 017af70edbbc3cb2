"""The kinds of pool (pool.py), and the one a PoolConfig asks for."""
from ..shared.system import memory_limit
from .hostpool import AttachedPool, LaunchedPool
from .localpool import LocalPool
from .pool import log
from .zygote import stop_idle_zygotes

__all__ = ["make_pool", "AttachedPool", "LaunchedPool", "LocalPool"]


def make_pool(config):
    """The Pool a PoolConfig asks for: engines started elsewhere, here, or on other hosts by a launcher."""
    if not config.local and memory_limit() is not None:
        # a session with a memory limit (Binder, a hub) whose engines are started elsewhere does not keep an
        # idle zygote warm for a local pool it may never start: lesson 17's four simulated hosts need its room
        if stop_idle_zygotes():
            log.info("the idle engine fork server was stopped: this session's memory is limited and its pool is elsewhere")
    if config.attached:
        return AttachedPool(config.connect, config.profile, config.cluster_id, config.ifname)
    if config.local:
        return LocalPool(config.launcher, config.threads, config.rendezvous, say=config.say)
    return LaunchedPool(config.launcher, config.profile, config.ifname, config.encrypt, config.threads)
