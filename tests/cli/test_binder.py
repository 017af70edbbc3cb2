"""binder/ works: what repo2docker installs (binder/requirements.txt, then binder/postBuild's
`pip install .`) resolves to the CPU build of torch, no CUDA package, and ddplab with its
dependencies. (The quickstart runs through binder/start within 2 GB in tests/notebooks.)"""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_binder_installs_cpu_torch_and_ddplab_and_no_cuda(tmp_path):
    post_build = [line for line in (ROOT / "binder/postBuild").read_text().splitlines()
                  if line.strip() and not line.startswith(("#", "set "))]
    assert post_build == ["python -m pip install --no-cache-dir ."]
    env = dict(os.environ, PIP_RETRIES="0", PIP_TIMEOUT="10", PIP_DISABLE_PIP_VERSION_CHECK="1")

    def would_install(*args):
        report = tmp_path / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--report", str(report), *args],
                       cwd=ROOT, env=env, check=True, timeout=600)
        return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}

    # first repo2docker installs the requirements into a fresh environment (--ignore-installed: as if
    # nothing were there; download.pytorch.org may be unreachable, as here: PIP_RETRIES=0 falls over)
    first = would_install("--ignore-installed", "-r", "binder/requirements.txt")
    assert first["torch"] == "2.13.0+cpu"
    assert not [name for name in first if "nvidia" in name or "cuda" in name or name == "triton"]
    # then postBuild installs ddplab: with that torch in place, nothing replaces it (this venv has
    # the same torch; its other packages are what ./dev test installed from pyproject)
    import torch

    assert torch.__version__ == "2.13.0+cpu"
    then = would_install("--no-build-isolation", ".")
    assert "ddplab" in then and not [n for n in then if n == "torch" or "nvidia" in n or "cuda" in n], then
