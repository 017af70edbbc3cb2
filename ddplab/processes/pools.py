"""The kinds of pool (pool.py), and the one a PoolConfig asks for."""
from .hostpool import AttachedPool, LaunchedPool
from .localpool import LocalPool

__all__ = ["make_pool", "AttachedPool", "LaunchedPool", "LocalPool"]


def make_pool(config):
    """The Pool a PoolConfig asks for: engines started elsewhere, here, or on other hosts by a launcher."""
    if config.attached:
        return AttachedPool(config.connect, config.profile, config.cluster_id, config.ifname)
    if config.local:
        return LocalPool(config.launcher, config.threads, config.rendezvous, say=config.say)
    return LaunchedPool(config.launcher, config.profile, config.ifname, config.encrypt, config.threads)
