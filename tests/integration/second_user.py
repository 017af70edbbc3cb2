"""A second Unix user for the security tests: made for the tests that need one, removed after them,
and the intruder script (intruder.py) run as that user. Needs root (CI and this machine run as
root); where it cannot make the user, the test fails saying why."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from tests.users.accounts import SYSTEM_PYTHON, Account

HERE = os.path.dirname(os.path.abspath(__file__))


def make_user():
    """Yield the name of a new, unprivileged login account (uid >= 1000), removed afterwards."""
    account = Account.make("ddpx")
    try:
        yield account.name
    finally:
        account.remove()


def python_for_others():
    return SYSTEM_PYTHON


def start_as(user, mode, plan):
    """Start intruder.py MODE PLAN as `user`; returns (process, the folder to remove after it)."""
    box = tempfile.mkdtemp(prefix="ddplab-intruder-")
    os.chmod(box, 0o755)
    script = shutil.copy(os.path.join(HERE, "intruder.py"), box)
    os.chmod(script, 0o644)
    path = os.path.join(box, "plan.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    os.chmod(path, 0o644)
    proc = subprocess.Popen(["runuser", "-u", user, "--", python_for_others(), "-I", script, mode, path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    return proc, box


def finish(proc, box, timeout=180):
    """The intruder's JSON report, once it ends (bounded)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the intruder did not finish in {timeout} s: {err[-2000:]}")
    finally:
        shutil.rmtree(box, ignore_errors=True)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out)


def run_as(user, mode, plan, timeout=180):
    return finish(*start_as(user, mode, plan), timeout=timeout)
