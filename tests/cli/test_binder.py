"""binder/ works: what repo2docker installs (binder/requirements.txt, then binder/postBuild's
`pip install .`) resolves to the CPU build of torch, no CUDA package, and ddplab with its
dependencies; and postBuild's command is the one the README and the docs tell users to run, the
one the tests' user environment installs ddplab with (tests/users/accounts.py), so that what the
tests run as a user is what users install. (The quickstart runs through binder/start within 2 GB
in tests/notebooks.)"""
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import tomllib

from tests.users.accounts import post_build_commands

ROOT = pathlib.Path(__file__).resolve().parents[2]


def ddplab_install_lines(path, heading):
    """The `pip install` lines but torch's (comments aside) of the first bash block after `heading` in path."""
    text = (ROOT / path).read_text()
    assert heading in text, f"{path}: no {heading!r} any more (where users are told how to install ddplab)"
    block = re.search(r"```bash\n(.*?)```", text[text.index(heading):], re.S)
    assert block, f"{path}: no bash block after {heading!r}"
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line.startswith("pip install") and "torch" not in shlex.split(line)]


def test_users_binder_and_the_tests_install_ddplab_with_the_same_command():
    """Users install ddplab with `pip install .`, then (optional) the frameworks extra with
    `pip install "ddplab[frameworks]"`; Binder and the tests' user environment run both at once:
    `pip install ".[frameworks]"`."""
    for path, heading in (("README.md", "\nElsewhere"), ("docs/getting-started.md", "## Installing it elsewhere")):
        assert ddplab_install_lines(path, heading) == ["pip install .", 'pip install "ddplab[frameworks]"'], \
            f"{path} tells users to install ddplab otherwise than `pip install .` and its frameworks extra, which " \
            "Binder installs (binder/postBuild) and the tests run as a user (tests/users/accounts.py)"
    commands = post_build_commands()
    assert len(commands) == 1 and shlex.split(commands[0])[:2] == ["python", "-m"], \
        f"binder/postBuild: one `python -m pip install ...` line expected (the tests' user environment runs it), not {commands}"
    assert [word for word in shlex.split(commands[0])[2:] if word != "--no-cache-dir"] == \
        ["pip", "install", ".[frameworks]"], \
        f"binder/postBuild installs ddplab otherwise than the README says (with its frameworks extra): {commands[0]}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(re.split(r"[<>=;\s]", r)[0] for r in extras["frameworks"]) == ["jax", "tensorflow", "tensorflow-cpu"]


def test_binder_installs_cpu_torch_and_ddplab_and_no_cuda(tmp_path):
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
    then = would_install("--no-build-isolation", ".[frameworks]")  # (postBuild's command)
    assert "ddplab" in then and not [n for n in then if n == "torch" or "nvidia" in n or "cuda" in n], then
