"""Lab and magic argument checks: bad input answers one clear line and starts nothing."""
import pytest
from IPython.core.error import UsageError

import ddplab
from ddplab.kernel.lab import Lab, cores, default_ranks, max_local_ranks
from ddplab.kernel.magics import parse_ranks
from ddplab.shared.errors import BadRequest, RankError, RankFailed

from ..conftest import descendants


@pytest.mark.parametrize("ranks", [0, -1, 10000, True, 2.5, "4"])
def test_bad_rank_counts(ranks):
    with pytest.raises(BadRequest):
        Lab(ranks)


@pytest.mark.parametrize("kw", [dict(timeout=0), dict(timeout=-3), dict(timeout="x"), dict(timeout=float("nan")),
                                dict(threads_per_rank=0), dict(rendezvous="env://")])
def test_bad_settings(kw):
    with pytest.raises(BadRequest):
        Lab(2, **kw)


def test_defaults_follow_the_machine():
    lab = Lab()
    assert lab.world_size == default_ranks() == min(4, max(2, cores()))
    assert lab.threads == max(1, cores() // lab.world_size)
    assert Lab(4).threads == max(1, cores() // 4)
    assert Lab(2, threads_per_rank=3).threads == 3
    assert not lab.running
    assert 1 <= max_local_ranks() <= max(8, 4 * cores())


def test_the_too_many_ranks_message_says_what_to_do():
    with pytest.raises(BadRequest) as info:
        Lab(10000)
    msg = str(info.value)
    assert "10000" in msg and "cores" in msg and "fewer" in msg and "\n" not in msg


@pytest.mark.parametrize("line", ["0", "-1", "abc", "10000", "--bogus", "4 5", "--timeout -3", "--timeout inf",
                                  "--threads 0", "--threads x", "2 --timeout"])
def test_bad_ddp_start_is_a_usage_error_and_starts_nothing(ip, no_pool, line):
    from ddplab.processes.zygote import running_zygote

    zygote = running_zygote()  # (%load_ext started it: its own start, a helper process of a moment, is not this test's)
    if zygote is not None:
        zygote.wait_network()
    before = descendants()
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("ddp_start", line)
    assert "\n" not in str(info.value).strip()
    assert no_pool.lab is None
    assert descendants() == before


@pytest.mark.parametrize("magic,args", [("ddp_gather", "t"), ("ddp_push", "x"), ("ddp_restart", "")])
def test_magics_need_a_pool(ip, no_pool, magic, args):
    ip.user_ns["x"] = 1
    with pytest.raises(UsageError, match="%ddp_start"):
        ip.run_line_magic(magic, args)


def test_cell_magic_needs_a_pool(ip, no_pool):
    with pytest.raises(UsageError, match="%ddp_start"):
        ip.run_cell_magic("ddp", "", "print(rank)")


def test_status_and_stop_without_pool_just_say_so(ip, no_pool, capsys):
    ip.run_line_magic("ddp_status", "")
    ip.run_line_magic("ddp_stop", "")
    out = capsys.readouterr().out
    assert "no pool is running" in out


def test_loading_twice_keeps_one_magics_object(ip, magics):
    ddplab.load_ipython_extension(ip)
    assert ip.magics_manager.registry["DDPMagics"] is magics


@pytest.mark.parametrize("spec,expect", [("0,2", [0, 2]), ("1-3", [1, 2, 3]), ("all", None), (None, None),
                                         ("3, 1", [1, 3])])
def test_parse_ranks(spec, expect):
    assert parse_ranks(spec, 4) == expect


@pytest.mark.parametrize("spec", ["4", "-1", "a", "0,,1", "", "2-x"])
def test_parse_ranks_rejects(spec):
    with pytest.raises(UsageError):
        parse_ranks(spec, 4)


def test_rank_failed_report_names_root_cause_first_and_groups_echoes():
    boom = RankError("ValueError", "boom", ["In[3] line", "ValueError: boom"], 2, 111, "h", step=37)
    echo = [RankError("RuntimeError", "[pair.cc:553] Connection closed by peer [127.0.0.1]:1", [f"In[{i}] x"],
                      i, 100 + i, "h") for i in (0, 1)]

    class Result:
        recovery = ["group re-formed in 40 ms; variables kept"]

    exc = RankFailed({2: boom, 0: echo[0], 1: echo[1]}, Result())
    lines = exc.report()
    assert lines == ["rank 2 failed at step 37 (engine 2, pid 111, h)", "In[3] line", "ValueError: boom",
                     "ranks 0, 1 stopped: their collective was cut off by rank 2",
                     "group re-formed in 40 ms; variables kept"]
    assert exc.ranks == [2, 0, 1] and str(exc) == "rank 2: ValueError: boom"
    assert exc._render_traceback_() == lines


def test_rank_failed_names_ranks_that_failed_the_same_way_once():
    same = [RankError("NameError", "name 'x' is not defined", [f"In[{i}] x", "NameError: x"], i, i, "h")
            for i in range(3)]
    lost = RankError("RankLost", "its engine was killed (SIGKILL)", [], 3, 9, "h", step=5)
    lines = RankFailed({3: lost, 0: same[0], 1: same[1], 2: same[2]}).report()
    assert lines == ["rank 3 lost at step 5 (engine 3, pid 9, h): its engine was killed (SIGKILL)",
                     "rank 0 failed (engine 0, pid 0, h)", "ranks 1, 2 failed the same way", "In[0] x",
                     "NameError: x"]
    assert RankFailed({0: same[0]}).report(color=False)[0] == "rank 0 failed (engine 0, pid 0, h)"


def test_cores_follow_a_container_quota(tmp_path, monkeypatch):
    from ddplab.shared.config import cores
    from ddplab.shared.system import cgroup_cpu_quota

    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(str(v1)) == 1
    assert cgroup_cpu_quota(str(tmp_path / "none")) is None
    # a hub's spawner puts the quota on the session's own cgroup, below the root: found there too
    proc = tmp_path / "cgroup"
    nested = tmp_path / "nested"
    (nested / "cpu" / "hub" / "alice").mkdir(parents=True)
    (nested / "cpu" / "hub" / "alice" / "cpu.cfs_quota_us").write_text("-1\n")
    (nested / "cpu" / "hub" / "cpu.cfs_quota_us").write_text("150000\n")
    (nested / "cpu" / "hub" / "cpu.cfs_period_us").write_text("100000\n")
    proc.write_text("4:memory:/hub/alice\n3:cpu,cpuacct:/hub/alice\n")
    assert cgroup_cpu_quota(str(nested), str(proc)) == 2
    (nested / "session").mkdir()
    (nested / "session" / "cpu.max").write_text("100000 100000\n")
    proc.write_text("0::/session\n")
    assert cgroup_cpu_quota(str(nested), str(proc)) == 1
    from ddplab.shared.config import DDPLab, tunables

    monkeypatch.setenv("DDPLAB_CORES", "3")
    assert DDPLab().cores == 3  # the environment variable is the default of DDPLab.cores
    monkeypatch.setattr(tunables(), "cores", 3)
    assert cores() == 3


def test_rank_failed_reports_in_the_pool_language():
    from functools import partial

    from ddplab.shared.words import say

    lost = RankError("RankLost", "its engine was killed (SIGKILL) by %ddp_fault kill", [], 2, 9, "h", step=35)
    echo = [RankError("RuntimeError", "[pair.cc:553] Connection closed by peer", [], i, i, "h") for i in (0, 1)]
    lines = RankFailed({2: lost, 0: echo[0], 1: echo[1]}, say=partial(say, "zh")).report()
    assert lines == ["rank 2 在第 35 步丢失（engine 2, pid 9, h）：它的引擎被 %ddp_fault kill 终止了（SIGKILL）",
                     "rank 0、1 已停止：它们的集合通信被 rank 2 中断了"]


def test_ranks_this_sessions_memory_will_not_hold_are_named_before_anything_starts(monkeypatch, ip, no_pool):
    """A 1 GiB hub: 4 ranks do not fit; one line says so and what fits, nothing starts; --force starts them."""
    from ddplab.kernel import lab, magics
    from ddplab.shared import config, system

    monkeypatch.setattr(system, "memory_available", lambda *a: config.need_mib(2) * 2**20 + 2**20)
    monkeypatch.setattr(system, "memory_limit", lambda *a: 2**30)
    for module in (lab, magics):  # (no fork server's memory held yet)
        monkeypatch.setattr(module, "zygote_held", lambda: 0)
    before = descendants()
    with pytest.raises(BadRequest) as info:
        Lab(4)
    msg = str(info.value)
    assert msg.startswith("4 ranks need about") and "free of its 1.00 GiB" in msg and "%ddp_start 2 fits" in msg
    assert "%ddp_start 4 --force" in msg and "\n" not in msg
    with pytest.raises(BadRequest, match="放得下"):
        config.PoolConfig.make(4, lang="zh")
    with pytest.raises(UsageError, match="%ddp_start 2 fits"):
        ip.run_line_magic("ddp_start", "4")
    assert no_pool.lab is None and descendants() == before
    assert Lab(4, force=True).world_size == 4 and Lab(2).world_size == 2  # (made, not started)
    assert default_ranks() == 2  # the default takes what fits
    monkeypatch.setattr(system, "memory_available", lambda *a: config.POOL_MIB * 2**20)
    with pytest.raises(BadRequest, match="not one rank fits; close other notebooks"):
        Lab(1)
    assert config.memory_check(1, held=config.ZYGOTE_MIB * 2**20) is None  # a warm fork server's memory counts


def test_a_cell_with_no_options_gets_fresh_defaults_each_time(magics):
    from ddplab.kernel.magics import _parse

    first = _parse(magics.ddp, "")
    assert (first.ranks, first.timeout, first.background, first.expect) == (None, None, False, None)
    first.ranks = "0"  # (a caller changing its copy changes no later cell's)
    assert _parse(magics.ddp, "  ").ranks is None
    assert _parse(magics.ddp, "--ranks 1").ranks == "1" and _parse(magics.ddp, "").ranks is None
    with pytest.raises(UsageError, match="check the quotes"):
        _parse(magics.ddp, "--expect 'x")
