"""ddplab's messages in the pool's language."""
from ddplab.config import PoolConfig
from ddplab.words import plural, ranks_text, say


def test_rank_lists_read_as_each_language_writes_them():
    assert ranks_text([2]) == "rank 2" and ranks_text([0, 1, 3]) == "ranks 0, 1, 3"
    assert ranks_text([0, 1, 3], "zh") == "rank 0、1、3"
    assert plural(1, "cell") == "cell" and plural(0, "cell") == "cells"


def test_a_pool_speaks_its_language():
    assert say("zh", "stopped", "已停止") == "已停止" and say("en", "stopped", "已停止") == "stopped"
    assert PoolConfig.make(2, lang="zh").say("stopped", "已停止") == "已停止"
    assert PoolConfig.make(2).say("stopped", "已停止") == "stopped"
