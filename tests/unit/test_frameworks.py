"""TensorFlow and JAX beside torch, the pure parts: a failure's notes, the refusal where other accounts
could connect, lesson 16's first cell without the frameworks, and the session's memory limit read from
cgroups (v1 and v2) for the lesson's choice of workers."""
import sys

import pytest

from ddplab.kernel.cell import framework_notes
from ddplab.lessons import MissingFramework, require_frameworks
from ddplab.lessons import frameworks as lesson
from ddplab.rank import frameworks
from ddplab.shared import system
from ddplab.shared.errors import RankError, RankFailed, is_echo

TF_ABORT = ("UnavailableError", "Graph execution error:\n\nDetected at node sgd/CollectiveReduceV2 ...\n"
            "Collective ops is aborted by: Collective ops is aborted by: Socket closed")


def test_tensorflows_aborted_collectives_are_echoes_of_the_rank_that_failed():
    boom = RankError("ValueError", "boom")
    assert not is_echo(boom) and is_echo(RankError(*TF_ABORT))
    report = RankFailed({2: boom, 0: RankError(*TF_ABORT), 1: RankError(*TF_ABORT)}).report(color=False)
    assert report[0].startswith("rank 2 failed") and "ranks 0, 1 stopped: their collective was cut off by rank 2" in report


def test_a_failure_that_aborted_tensorflows_collectives_says_to_restart_every_rank():
    class Result:
        failed = {2: RankError("ValueError", "boom"), 0: RankError(*TF_ABORT), 3: RankError(*TF_ABORT)}

    notes = framework_notes(Result())
    assert notes == ["TensorFlow aborted its collectives on ranks 0, 3 and cannot run them again in these processes: "
                     "%ddp_restart --all gives fresh ranks; then call ddplab.tf_config() and make the strategy again"]
    assert "TensorFlow 中止了 rank 0、3 上的集合通信" in framework_notes(Result(), "zh")[0]

    class TorchOnly:
        failed = {1: RankError("RuntimeError", "Connection closed by peer [127.0.0.1]:1234")}

    assert framework_notes(TorchOnly()) == []


@pytest.mark.parametrize("private, gate, refused", [(True, False, False), (False, True, False), (False, False, True)])
def test_a_framework_starts_only_where_nobody_else_can_reach_it(monkeypatch, private, gate, refused):
    from ddplab.rank.gate import GATE

    monkeypatch.setattr(frameworks, "private_network", lambda: private)
    monkeypatch.setattr(GATE, "_ready", gate)
    monkeypatch.setattr(GATE, "keeper", object() if gate else None)
    monkeypatch.setattr(GATE, "why_not", None if gate else "seccomp user notification refused: Function not implemented")
    why = frameworks.exposure(frameworks.TF_LISTENS)
    if not refused:
        assert why is None
        return
    assert why.startswith("TensorFlow's gRPC server listens on every interface of this machine with no authentication")
    assert "(seccomp user notification refused: Function not implemented)" in why and "\n" not in why
    assert "%config DDPLab.accept_gate = True" in why
    with pytest.raises(frameworks.FrameworkError, match="any account could connect"):
        frameworks.tf_config(0)
    zh = frameworks.exposure(frameworks.JAX_LISTENS, "zh")
    assert zh.startswith("JAX 的协调服务和 gloo 在这台机器的地址上监听，不做任何认证")


def test_lesson_16s_first_cell_says_what_to_install_when_the_frameworks_are_missing(monkeypatch):
    assert require_frameworks() == ["JAX", "TensorFlow"]  # (installed here: the test extras bring them)
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if not installed: import refused
    with pytest.raises(MissingFramework) as missing:
        require_frameworks()
    text = str(missing.value)
    assert 'this lesson runs TensorFlow beside torch, and they are not installed: run pip install "ddplab[frameworks]"' \
        in text and "restart the kernel" in text
    assert missing.value._render_traceback_() == [f"MissingFramework: {text}"]  # one line in a notebook


def test_the_same_global_batch_everywhere_cut_in_replica_order():
    x, y = lesson.global_batch(3)
    again, _ = lesson.global_batch(3)
    assert x.shape == (64, 8) and y.shape == (64, 1) and (x == again).all() and x.dtype == "float32"
    parts = [lesson.my_slice(x, r, 4) for r in range(4)]
    assert all(len(p) == 16 for p in parts) and (sum(p.sum() for p in parts) - x.sum()) < 1e-3
    assert (lesson.my_slice(x, 1, 2) == x[32:]).all()


@pytest.mark.parametrize("room, want, workers", [(10_000, 4, 4), (1500, 4, 2), (1500, 2, 2)])
def test_tensorflow_workers_that_fit_the_sessions_memory(monkeypatch, room, want, workers):
    monkeypatch.setattr(system, "memory_available", lambda: (room + lesson.POOL_MIB) * 2**20)
    got, why = lesson.tf_workers(want)
    assert got == workers
    assert (why is None) == (workers == want)
    if why:
        assert f"{want} TensorFlow workers need about {want * lesson.TF_RANK_MIB} MiB" in why
        assert f"{workers} TensorFlow workers, each training {64 // workers} examples a step" in why


@pytest.mark.parametrize("what", ["tf_workers", "jax_ranks"])
def test_where_two_do_not_fit_the_lesson_says_what_it_needs_in_one_line(monkeypatch, what):
    """One worker (or rank) would reduce nothing: the lesson stops at its first cell, before any pool starts."""
    need = lesson.TF_RANK_MIB if what == "tf_workers" else lesson.JAX_RANK_MIB
    monkeypatch.setattr(system, "memory_available", lambda: (2 * need - 1 + lesson.POOL_MIB) * 2**20)
    with pytest.raises(lesson.NoRoom) as no_room:
        getattr(lesson, what)(4)
    text = str(no_room.value)
    assert f"needs 2 {'TensorFlow workers' if what == 'tf_workers' else 'ranks with JAX'} at least (about {2 * need} MiB)" \
        in text and "2 GiB or more" in text, text
    assert no_room.value._render_traceback_() == [f"NoRoom: {text}"]  # one line in a notebook
    monkeypatch.setattr(system, "memory_available", lambda: (2 * need + lesson.POOL_MIB) * 2**20)
    assert getattr(lesson, what)(4)[0] == 2


def cgroup(tmp_path, version, own, files):
    """A fake /sys/fs/cgroup and /proc/self/cgroup: this process in cgroup `own`; files {path: text}."""
    root = tmp_path / "cgroup"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    proc = tmp_path / "self-cgroup"
    proc.write_text(f"0::{own}\n" if version == 2 else f"4:memory:{own}\n3:cpu,cpuacct:/\n")
    return str(root), str(proc)


def test_the_memory_limit_of_a_cgroup_v2_session_and_what_is_left(tmp_path):
    root, proc = cgroup(tmp_path, 2, "/user/session", {
        "memory.max": "max\n", "user/memory.max": str(2 * 2**30), "user/session/memory.max": "max\n",
        "user/memory.current": str(2**30), "user/memory.stat": f"anon 700\ninactive_file {2**28}\n"})
    assert system.memory_limit(root, proc) == 2 * 2**30  # the limit is on the cgroup above
    assert system.memory_available(root, proc) == min(2 * 2**30 - 2**30 + 2**28, system.psutil.virtual_memory().available)


def test_the_memory_limit_of_a_cgroup_v1_session(tmp_path):
    unlimited = "9223372036854771712\n"
    root, proc = cgroup(tmp_path, 1, "/binder/box", {
        "memory/memory.limit_in_bytes": unlimited, "memory/binder/memory.limit_in_bytes": unlimited,
        "memory/binder/box/memory.limit_in_bytes": str(2**30), "memory/binder/box/memory.usage_in_bytes": str(2**29),
        "memory/binder/box/memory.stat": "cache 5\ntotal_inactive_file 0\n"})
    assert system.memory_limit(root, proc) == 2**30
    assert system.memory_available(root, proc) == 2**29


def test_no_limit_is_none(tmp_path):
    root, proc = cgroup(tmp_path, 1, "/", {"memory/memory.limit_in_bytes": "9223372036854771712\n"})
    assert system.memory_limit(root, proc) is None
    assert system.memory_available(root, proc) == pytest.approx(system.psutil.virtual_memory().available, rel=0.05)


def test_the_oom_kills_and_the_peak_of_the_cgroup_that_limits_the_session(tmp_path):
    """What names an engine "killed for memory": the limiting cgroup's oom_kill count (v2's memory.events,
    v1's memory.oom_control), the machine's where nothing limits the session."""
    root, proc = cgroup(tmp_path, 2, "/user/session", {
        "memory.max": "max\n", "user/memory.max": str(2**30), "user/session/memory.max": "max\n",
        "user/memory.events": "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n",
        "user/memory.peak": str(2**30 - 5)})
    assert system.oom_kills(root, proc) == 2 and system.memory_peak(root, proc) == 2**30 - 5
    root, proc = cgroup(tmp_path / "v1", 1, "/box", {
        "memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/box/memory.limit_in_bytes": str(2**30),
        "memory/box/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        "memory/box/memory.max_usage_in_bytes": "1000\n"})
    assert system.oom_kills(root, proc) == 1 and system.memory_peak(root, proc) == 1000
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 5\noom_kill 7\n")
    root, proc = cgroup(tmp_path / "none", 1, "/", {"memory/memory.limit_in_bytes": "9223372036854771712\n"})
    assert system.oom_kills(root, proc, str(vmstat)) == 7 and system.memory_peak(root, proc) is None
