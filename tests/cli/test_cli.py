"""`ddplab demo` from the installed console script, and its failure paths."""
import pathlib
import re
import subprocess
import sys

import pytest

import ddplab.kernel.cli as cli
from ddplab.shared.errors import StartFailed

from ..conftest import descendants

SCRIPT = str(pathlib.Path(sys.executable).parent / "ddplab")


def run(*args, timeout=240):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.pool
def test_demo_trains_and_prints_per_rank_progress_and_summary():
    before = descendants()
    proc = run("demo", "--ranks", "2", "--steps", "60")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "2 ranks ready in" in out
    for r in (0, 1):
        assert re.search(rf"^\[rank {r}\] done step 60 loss [\d.]+ samples/s \d+$", out, re.M)
        assert re.search(rf"^\s+{r}\s+[\d.]+\s+\d+\s+\S+$", out, re.M)  # summary row
    assert "parameters identical on every rank: yes" in out
    assert descendants() <= before


@pytest.mark.pool
def test_demo_exits_non_zero_when_a_rank_fails(monkeypatch, capsys):
    monkeypatch.setattr(cli, "DEMO_CELL", "if rank == 1: raise RuntimeError('rank one broke')\nsummary = {{}}")
    before = descendants()
    assert cli.main(["demo", "--ranks", "2", "--steps", "5"]) == 1
    err = capsys.readouterr().err
    assert "rank 1 failed" in err and "RuntimeError: rank one broke" in err
    assert descendants() <= before


@pytest.mark.parametrize("args,code,message", [
    (["demo", "--ranks", "0"], 1, "at least 1"),
    (["demo", "--ranks", "10000"], 1, "fewer ranks"),
    (["demo", "--steps", "0"], 2, "at least 1"),
    (["demo", "--ranks", "two"], 2, "invalid int"),
    (["nonsense"], 2, "invalid choice"),
])
def test_bad_arguments_say_one_clear_thing(args, code, message):
    proc = run(*args, timeout=60)
    assert proc.returncode == code
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_start_failure_exits_1(monkeypatch, capsys):
    def fail(self, progress=None):
        raise StartFailed("2 of 2 engines not ready in 120 s; ready: 0: try again, or fewer ranks")

    monkeypatch.setattr("ddplab.kernel.lab.Lab.start", fail)
    assert cli.main(["demo", "--ranks", "2"]) == 1
    assert "engines not ready" in capsys.readouterr().err
