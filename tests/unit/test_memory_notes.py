"""The note after a cell whose ranks the kernel's OOM killer ended: it says what fits, a smaller pool than
the one that ran out of memory, or (where not one rank fits, or the pool had one) to close other notebooks."""
from types import SimpleNamespace

import pytest

from ddplab.kernel import running
from ddplab.shared.config import POOL_MIB, RANK_MIB, PoolConfig

MiB = 2**20


def notes(monkeypatch, world: int, killed: set[int], lost: list[int], free_ranks: int, lang: str = "en") -> list[str]:
    """memory_notes for a pool of `world` ranks, `killed` of them by the OOM killer, with room for
    `free_ranks` ranks once the pool is stopped."""
    monkeypatch.setattr(running, "memory_available", lambda: (POOL_MIB + free_ranks * RANK_MIB) * MiB)
    monkeypatch.setattr(running, "zygote_held", lambda: 0)
    lab = SimpleNamespace(world_size=world, pool=SimpleNamespace(memory_killed=killed), pool_memory=lambda: 0,
                          config=PoolConfig(ranks=world, timeout=60, threads=1, lang=lang))
    return running.Runner(lab).memory_notes(lost)


@pytest.mark.parametrize("world, killed, free, said", [
    (2, {1}, 8, "ended rank 1: %ddp_restart may run out of memory again; %ddp_stop, then %ddp_start 1, fits"),
    (4, {1, 2}, 8, "ended ranks 1, 2: %ddp_restart may run out of memory again; %ddp_stop, then %ddp_start 2, fits"),
    # the OOM killer took both ranks (the second while the first one's memory was being freed): one fits
    (2, {0, 1}, 8, "ended ranks 0, 1: %ddp_restart may run out of memory again; %ddp_stop, then %ddp_start 1, fits"),
    (4, {0, 1}, 1, "ended ranks 0, 1: %ddp_restart may run out of memory again; %ddp_stop, then %ddp_start 1, fits"),
    (2, {0, 1}, 0, "ended ranks 0, 1: %ddp_restart may run out of memory again; close other notebooks"),
    (1, {0}, 8, "ended rank 0: %ddp_restart may run out of memory again; close other notebooks"),
])
def test_the_note_after_an_oom_kill_names_a_smaller_pool_that_fits(monkeypatch, world, killed, free, said):
    [note] = notes(monkeypatch, world, killed, sorted(killed), free)
    assert note.startswith("the kernel's OOM killer " + said), note


def test_ranks_lost_otherwise_get_no_memory_note(monkeypatch):
    assert notes(monkeypatch, 4, {1}, [2, 3], 8) == []
    assert notes(monkeypatch, 4, set(), [0, 1], 8) == []


def test_the_note_speaks_the_pools_language(monkeypatch):
    [note] = notes(monkeypatch, 2, {0, 1}, [0, 1], 8, lang="zh")
    assert "%ddp_start 1" in note and "rank 0、1" in note and "OOM killer ended" not in note, note
