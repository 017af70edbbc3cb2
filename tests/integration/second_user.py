"""A second Unix user for the security tests: made for the tests that need one, removed after them,
and the intruder script (intruder.py) run as that user. Needs root (CI and this machine run as
root); where it cannot make the user, the test fails saying why."""
import json
import os
import secrets
import shutil
import subprocess
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def make_user():
    """Yield the name of a new, unprivileged login account (uid >= 1000), removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("this test makes a second Unix user and needs root (CI and this machine run as root)")
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: cannot make a second user to attack the pool as")
    name = f"ddpx{secrets.token_hex(3)}"
    # a login account, as a student's on a shared server (uid >= UID_MIN, a shell); no home needed
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], capture_output=True, text=True)
    if made.returncode:
        pytest.fail(f"could not make a second user: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def python_for_others():
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if python is None:
        pytest.fail("no system python3 for the second user to run (install Debian's python3)")
    return python


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
