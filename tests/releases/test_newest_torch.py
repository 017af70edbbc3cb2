"""The newest torch ddplab declares, beside the 2.13 the rest of the suite runs on.

torch 2.14.1 is the newest release on this machine's disk (a CUDA build of about 5.5 GB; run here on
the CPU). This tier installs it in a virtual environment of its own, kept between runs under
/var/cache/ddplab-tests (keyed by the torch release, ddplab's dependencies and the Python), gives it the
current ddplab as users install it (`pip install .`, runtime dependencies only, in a copy of the
checkout), and runs there the tests of every private torch name ddplab reads (upstream.py), the core
pool, and the timeline (DDP's buckets, torch.compile, FSDP2, tensor parallelism).
"""
import fcntl
import os
import pathlib
import subprocess
import sys

import pytest
import tomllib
from packaging.requirements import Requirement

from tests.users.accounts import CACHE, _install_ddplab, _source_stamp, cached_venv

ROOT = pathlib.Path(__file__).resolve().parents[2]
NEWEST, OLDEST = "2.14.1", "2.13.0"  # the torch releases the suite runs on (pyproject declares the range)
TESTS = ["tests/unit/test_upstream.py", "tests/integration/test_pool.py", "tests/integration/test_timeline.py"]
pytestmark = [pytest.mark.pool, pytest.mark.slow, pytest.mark.heavy, pytest.mark.xdist_group("newest-torch")]


def torch_env(release):
    """The python of a virtual environment with torch `release` and the current ddplab, made once (the
    wheel's 5.5 GB are copied from pip's cache on this disk) and kept; ddplab reinstalled when it changed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def fill(python):
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        done = subprocess.run([*pip, f"torch=={release}"], capture_output=True, text=True, timeout=1500)
        if done.returncode:
            pytest.fail(f"pip install torch=={release} failed:\n{done.stderr[-3000:]}")
        # what the tests run with (pytest's own plugins as the suite's); nothing of ddplab's test extras
        subprocess.run([*pip, "pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "ipykernel>=6.29"],
                       check=True, capture_output=True, timeout=600)

    python = cached_venv(f"torch-{release}", [release, project["dependencies"], sys.version], fill)
    venv = python.parent.parent
    with open(CACHE / f"lock-torch-{release}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = _source_stamp()
        if not (venv / "ddplab-installed").exists() or (venv / "ddplab-installed").read_text() != stamp:
            _install_ddplab(python, ["python", "-m", "pip", "install", "--no-cache-dir", "."])
            (venv / "ddplab-installed").write_text(stamp)
    return str(python)


def test_the_declared_range_admits_both_releases_the_suite_runs():
    torch = next(Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
                 if Requirement(d).name == "torch")
    assert torch.specifier.contains(NEWEST) and torch.specifier.contains(OLDEST), torch
    assert not torch.specifier.contains("2.15.0"), f"{torch}: a release no test has run"


@pytest.mark.timeout(2400)  # (the first run copies the 5.5 GB wheel into the environment)
def test_the_pool_ddp_the_timeline_and_fsdp2_run_on_the_newest_torch():
    python = torch_env(NEWEST)
    found = subprocess.run([python, "-c", "import torch, ddplab; print(torch.__version__)"], capture_output=True,
                           text=True, cwd="/", timeout=120)
    assert found.stdout.startswith(NEWEST), found.stdout + found.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}  # (not this run's)
    done = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-rs", *TESTS],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    print(tail)
    assert done.returncode == 0, f"on torch {NEWEST}:\n{tail}"
    assert " passed" in tail and "skipped" not in tail, tail
