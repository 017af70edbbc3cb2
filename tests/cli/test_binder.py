"""binder/ works: its requirements install CPU-only torch and ddplab into a fresh virtual
environment, the quickstart runs there, and a kernel with a pool of 4 fits in 2 GB (PSS)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIMIT = 2 * 10**9  # bytes: a Binder session has 2 GB


@pytest.mark.timeout(900)
def test_binder_environment_runs_the_quickstart_in_2_gb(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_ = venv / "bin"
    # download.pytorch.org may be unreachable (as here): fail over to the other indexes at once
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", VIRTUAL_ENV=str(venv),
               PIP_RETRIES="0", PIP_TIMEOUT="10", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    subprocess.run([bin_ / "python", "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"],
                   cwd=ROOT, env=env, check=True, timeout=600)
    source = tmp_path / "repo"  # postBuild runs in a copy, as repo2docker runs it in its own clone
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info",
                                                                  "__pycache__", "artifacts", "results"))
    subprocess.run(["bash", "binder/postBuild"], cwd=source, env=env, check=True, timeout=600)
    installed = subprocess.run([bin_ / "python", "-m", "pip", "list", "--format=freeze"], env=env,
                               capture_output=True, text=True, check=True).stdout
    assert "torch==2.13.0+cpu" in installed and "nvidia" not in installed.lower()
    assert "ddplab==" in installed

    out = tmp_path / "result.json"
    subprocess.run(["bash", "binder/start", str(bin_ / "python"), str(ROOT / "tests/cli/run_in_binder_env.py"),
                    str(source / "notebooks/00_quickstart.ipynb"), str(out)],
                   cwd=source, env=env, check=True, timeout=300)
    result = json.loads(out.read_text())
    assert result["errors"] == [] and result["torch"].endswith("+cpu")
    assert any("parameters identical on every rank: True" in o for o in result["outputs"])
    assert result["processes"] >= 4
    print(f"kernel + pool of 4 after training: {result['peak_pss'] / 1e6:.0f} MB PSS")
    assert 0 < result["peak_pss"] < LIMIT
