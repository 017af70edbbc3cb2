"""The benchmark suite runs end to end (quick mode: tiny sizes; the numbers are not checked)."""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPECTED = {"log", "start_cold", "start_warm", "cells_after_ready", "cells_settled", "cells_vs_bare_pool",
            "ranks_cpu_after_ready", "stop",
            "restart", "restart_lost", "train_first_vs_torchrun", "train_vs_torchrun", "train_untimed_vs_torchrun",
            "train_vs_all_cores", "fsdp_first_vs_torchrun", "fsdp_vs_torchrun", "tp_first_vs_torchrun", "tp_vs_torchrun",
            "dashboard_on_off", "log_overhead", "timeline_on_off", "scaling", "history_bytes", "history_build",
            "kernel_bytes_per_item", "dashboard_frame",
            "dashboard_cpu", "hosts_group", "hosts_lost",  # hosts: root makes namespaces (CI and here)
            "pool_mib_torch", "pool_mib_tensorflow", "pool_mib_jax", "tf_strategy_form", "step_ms_torch",
            "step_ms_tensorflow", "step_ms_jax", "lesson_slowest", "lesson_median"}


@pytest.mark.pool
@pytest.mark.slow
@pytest.mark.timeout(600)  # (every section once, tiny: about 5 minutes on 2 cores)
def test_the_suite_runs_and_writes_json_and_a_plot(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["quick"] is True and report["machine"]["cores"] >= 1
    results = {r["name"]: r for r in report["results"]}
    assert set(results) == EXPECTED
    for r in results.values():  # idle ranks may use no CPU the clock can see: 0 is a measure too
        assert r["min"] <= r["median"] <= r["max"] and (r["median"] > 0 or r["name"] == "ranks_cpu_after_ready"), r
    assert (tmp_path / "results.png").stat().st_size > 10_000
    for name in results:  # the printed table has a row per result
        assert f"\n{name} " in proc.stdout


def test_unknown_benchmarks_are_refused():
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "nope"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "unknown benchmark(s) nope" in proc.stderr


def test_only_some_benchmarks_keep_the_other_rows_of_the_last_full_run_with_their_date(tmp_path):
    from bench.__main__ import kept, order

    def row(name, suite):
        return {"name": name, "suite": suite, "median": 1.0}

    earlier = {"machine": {"date": "2026-01-02"}, "quick": False,
               "results": [row("log", "log_cost"), row("train_vs_torchrun", "training"), row("hosts_group", "hosts")]}
    (tmp_path / "results.json").write_text(json.dumps(earlier))
    fresh = [{**row("timeline_on_off", "training"), "date": "2026-03-04"}]
    merged = sorted(kept(tmp_path / "results.json", fresh, quick=False) + fresh, key=order)
    assert [(r["name"], r["date"]) for r in merged] == [
        ("log", "2026-01-02"), ("timeline_on_off", "2026-03-04"), ("hosts_group", "2026-01-02")]  # training's old row gone
    assert kept(tmp_path / "results.json", fresh, quick=True) == []  # a quick run never mixes with a full one
    assert kept(tmp_path / "missing.json", fresh, quick=False) == []


def test_a_ratio_counts_for_its_target_only_when_the_host_took_little_cpu_in_each_of_its_runs():
    from bench.__main__ import quiet_note
    from bench.common import QUIET, against_around, compared

    # T K T K T: samples/s, kernel CPU, share of the machine's CPU the host took (steal)
    torchrun = [[100, None, 0.0], [110, None, 0.0], [100, None, 5 * QUIET]]
    kernel = [[105, 0.02, 0.0], [99, 0.02, 0.0]]
    pairs = against_around(kernel, torchrun)
    assert pairs == [(1.0, 0.0), (99 / 105, 5 * QUIET)]  # each against the mean of its neighbours
    row = compared("x", "what", pairs, target=(">=", 0.99))
    assert row["values"] == [1.0] and row["met"] is True  # the noisy one left out of the figure ...
    assert row["details"]["every_ratio"] == [1.0, 99 / 105] and row["details"]["left_out"] == 1  # ... not lost
    assert quiet_note(row) == "1 of 2 left out: the host took over 1% of the CPU in them"
    noisy = compared("x", "what", pairs[1:], target=(">=", 0.99))
    assert noisy["values"] == [99 / 105] and noisy["met"] is False and noisy["details"]["quiet"] is False
    assert quiet_note(noisy).startswith("no run was quiet")
    assert quiet_note(compared("x", "what", pairs[:1])) == ""


def test_a_median_beside_its_target_says_whether_the_runs_can_tell_them_apart():
    from bench.__main__ import interval_note
    from bench.common import median_interval, result

    spread = [0.88, 0.93, 0.96, 0.97, 0.99, 1.01, 1.04, 1.12]  # runs as they spread here on a quiet host
    low, high = median_interval(spread)
    assert 0.88 <= low < 0.98 < high <= 1.12 and median_interval(spread) == [low, high]  # (a fixed seed)
    row = result("x", "what", spread, target=(">=", 0.99))
    assert row["met"] is False and row["interval"] == [low, high]  # the median (0.98) misses, by less than the noise
    assert interval_note(row) == (f"the median's 90 % interval, {low:.2f}-{high:.2f}, holds the target: "
                                  "within what these runs can tell")
    tight = result("x", "what", [0.95, 0.951, 0.952, 0.953, 0.954], target=(">=", 0.99))
    assert tight["met"] is False and interval_note(tight) == ""  # a miss the runs do measure
    assert "interval" not in result("x", "what", spread[:3], target=(">=", 0.99))  # too few runs to say
    assert "interval" not in result("x", "what", spread)  # no target


def test_the_share_the_host_took_is_read_from_proc_stat():
    from bench.common import cpu_ticks, stolen

    steal, total = cpu_ticks()
    assert 0 <= steal <= total and total > 0
    assert 0.0 <= stolen((steal, total)) <= 1.0
