"""Ordinary accounts for the tests, and the Python environment a user installs.

The suite runs as root (CI and this machine do); ddplab's users do not. `Account.make()` adds a login
account (uid >= 1000, a home folder, a shell) and `remove()` deletes it with its home and what it
put in /tmp (`in_tmp()`), after ending its processes, every one of them a descendant of a command the
tests ran as it, by pid. `user_env()`
is ddplab installed as a user installs it, `pip install .` with its runtime dependencies only (no test
extras), into a virtual environment made from the system's Python (/usr/bin/python3: root's Python
lives under /root, mode 0700, where an account cannot read it) in a folder every account can read,
kept between runs under /var/cache/ddplab-tests (keyed by the dependencies and the install command)
and given the current ddplab each session by binder/postBuild's own command, run in a copy of the
checkout (what Binder runs; the README's `pip install .`: tests/cli/test_binder.py). `run_as()` runs
a command as an account, where user namespaces are allowed, or (refuse="userns") where they are
refused as Ubuntu 24.04 and Docker refuse them (nouserns.py: a seccomp filter on that command alone;
the machine is not changed).
"""
import functools
import hashlib
import json
import os
import pathlib
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
SYSTEM_PYTHON = "/usr/bin/python3"
CACHE = pathlib.Path("/var/cache/ddplab-tests")
TORCH = "torch==2.13.0"
POST_BUILD = ROOT / "binder" / "postBuild"


def need_root():
    if os.geteuid() != 0:
        pytest.fail("this tier makes ordinary accounts and needs root (CI and this machine run as root)")
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: cannot make the ordinary accounts this tier runs as")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.fail(f"no {SYSTEM_PYTHON}: install Debian's python3 (and python3-venv)")


class Account:
    def __init__(self, name):
        import pwd

        self.name = name
        entry = pwd.getpwnam(name)
        self.uid, self.gid, self.home = entry.pw_uid, entry.pw_gid, entry.pw_dir
        self._tmp_before = self._in_tmp()  # (its uid may be a removed account's: what that one left is not its)

    @classmethod
    def make(cls, prefix="ddpu"):
        need_root()
        name = f"{prefix}{secrets.token_hex(3)}"
        made = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], capture_output=True, text=True)
        if made.returncode:
            pytest.fail(f"could not make an ordinary account: {made.stderr.strip()}")
        return cls(name)

    def processes(self):
        """Its processes still running (a zombie has ended: here, pid 1 does not reap what it inherits)."""
        return [p for p in psutil.process_iter(["uids", "status"]) if p.info["uids"] and p.info["uids"].real == self.uid
                and p.info["status"] != psutil.STATUS_ZOMBIE]

    def _in_tmp(self):
        found = set()
        for entry in os.scandir(tempfile.gettempdir()):
            try:
                if entry.stat(follow_symlinks=False).st_uid == self.uid:
                    found.add(entry.name)
            except OSError:
                continue
        return found

    def in_tmp(self):
        """What it has put in /tmp since it was made."""
        return sorted(self._in_tmp() - self._tmp_before)

    def remove(self):
        left = self.processes()
        for p in left:  # (descendants of what run_as started: ended by pid)
            try:
                p.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(left, timeout=10)
        for name in self.in_tmp():  # userdel --remove removes its home, not these
            path = os.path.join(tempfile.gettempdir(), name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
        subprocess.run(["userdel", "--remove", "--force", self.name], capture_output=True)  # (--force: its zombies)


@functools.cache  # once a session: reinstalling under running kernels would pull ddplab from under them
def user_env():
    """The python of a virtual environment with ddplab installed as a user installs it (the test tiers
    that run as ordinary accounts share it; one of them at a time makes or updates it)."""
    import fcntl

    need_root()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True).stdout
    install = _install_command()
    key = hashlib.sha256(json.dumps([TORCH, project["dependencies"], version, install]).encode()).hexdigest()[:12]
    venv = CACHE / f"venv-{key}"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    CACHE.mkdir(parents=True, exist_ok=True)
    os.chmod(CACHE, 0o755)
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "made").exists():
            for old in CACHE.glob("venv-*"):  # made for other dependencies: a checkout since has other ones
                shutil.rmtree(old, ignore_errors=True)
            subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True, capture_output=True)
            subprocess.run([*pip, TORCH], check=True, timeout=1200)  # (pip's cache: root's, where the wheel is)
            (venv / "made").touch()
        stamp = _source_stamp()
        if not (venv / "ddplab-installed").exists() or (venv / "ddplab-installed").read_text() != stamp:
            _install_ddplab(python, install)
            (venv / "ddplab-installed").write_text(stamp)
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    return python


def cached_venv(name, key, fill):
    """The python of a virtual environment CACHE/NAME-<hash of key>, made from this Python once (fill(python)
    puts its packages in) and kept between runs; one made for another key is removed."""
    import fcntl

    venv = CACHE / f"{name}-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]}"
    python = venv / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"lock-{name}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "made").exists():
            for old in CACHE.glob(f"{name}-*"):
                shutil.rmtree(old, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            fill(python)
            (venv / "made").touch()
    return python


def _source_stamp():
    """What ddplab's install depends on in this checkout, as a hash."""
    digest = hashlib.sha256()
    for path in sorted([ROOT / "pyproject.toml", *(ROOT / "ddplab").rglob("*.py")]):
        digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()


def post_build_commands():
    """The commands of binder/postBuild, its comments and `set` line aside."""
    return [line.strip() for line in POST_BUILD.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith(("#", "set "))]


def _install_command():
    """binder/postBuild's one command, as words: how Binder installs ddplab in a clone, and the README
    tells users to (`pip install .`, tests/cli/test_binder.py)."""
    commands = post_build_commands()
    if len(commands) != 1 or shlex.split(commands[0])[:4] != ["python", "-m", "pip", "install"]:
        pytest.fail(f"binder/postBuild: one `python -m pip install ...` line expected, found {commands}")
    return shlex.split(commands[0])


def _install_ddplab(python, install):
    """binder/postBuild's command (`python` the virtual environment's) run in a copy of this checkout,
    as in a user's clone: ddplab with its runtime dependencies only, as users and Binder install it."""
    source = pathlib.Path(tempfile.mkdtemp(prefix="ddplab-src-"))
    try:
        for item in ("pyproject.toml", "README.md", "ddplab"):
            if (ROOT / item).is_dir():
                shutil.copytree(ROOT / item, source / item, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(ROOT / item, source / item)
        subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "ddplab"], capture_output=True)
        done = subprocess.run([str(python), *install[1:]], cwd=source, capture_output=True, text=True, timeout=1200)
        if done.returncode:
            pytest.fail(f"binder/postBuild's `{shlex.join(install)}` failed in a copy of the checkout:\n"
                        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    finally:
        shutil.rmtree(source, ignore_errors=True)


def user_kernel(account, python, launcher=(), box=None):
    """A Jupyter kernel manager whose kernel runs as `account` with `python` (user_env()), over socket
    files in a folder of the account's (ipc: no TCP port), as JupyterLab would start it for that user.
    (The manager, as root, writes the connection file and hands it to the account.) `launcher`: a
    command that ends by exec-ing the rest (`bash binder/start`, as Binder's), run as the account.
    `box`: a MemoryBox the kernel (and so everything it starts) joins before it becomes the account."""
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpec

    folder = tempfile.mkdtemp(prefix="ddplab-kernel-")
    os.chown(folder, account.uid, account.gid)

    class AsAccount(KernelManager):
        def write_connection_file(self, **kwargs):
            super().write_connection_file(**kwargs)
            os.chown(self.connection_file, account.uid, account.gid)

    km = AsAccount(kernel_name="python3", transport="ipc", ip=os.path.join(folder, "kernel"),
                   connection_file=os.path.join(folder, "kernel.json"))
    # setpriv runs the kernel itself as the account (no process in between: its pid is the kernel's)
    km._kernel_spec = KernelSpec(argv=[*(box.join() if box else ()),
                                       "setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--init-groups",
                                       *map(str, launcher), str(python), "-m", "ipykernel_launcher", "-f",
                                       "{connection_file}"],
                                 display_name="python3", language="python")
    return km, folder


class MemoryBox:
    """A session's limits, as Binder's (2 GiB, 1 CPU) or a hub's (1 GiB, 1 CPU): a memory cgroup made
    under this process's own (cgroup v1's memory controller, or v2), limited to `limit` bytes, and with
    `cpus` a CPU quota of that many CPUs (v1's cpu controller, or cpu.max in the same v2 cgroup), for
    every process that joins it and every process those start. Removed (remove()) once they are gone."""

    def __init__(self, limit, cpus=None):
        from ddplab.shared.system import cgroups, memory_cgroups

        version, parent = next((v, f) for v, f in memory_cgroups() if os.path.isdir(f))
        name = f"ddplab-box-{secrets.token_hex(3)}"
        self.version, self.path = version, os.path.join(parent, name)
        os.mkdir(self.path)
        self._write("memory.limit_in_bytes" if version == 1 else "memory.max", str(limit))
        if version == 1:
            self._write("memory.swappiness", "0")  # (a session without swap: Binder's)
        self.limit, self.cpu_path = limit, None
        if cpus and version == 2:
            self._write("cpu.max", f"{cpus * 100_000} 100000")
        elif cpus:
            parent = next(f for v, f in cgroups("cpu") if v == 1 and os.path.isdir(f))
            self.cpu_path = os.path.join(parent, name)
            os.mkdir(self.cpu_path)
            self._write("cpu.cfs_period_us", "100000", self.cpu_path)
            self._write("cpu.cfs_quota_us", str(cpus * 100_000), self.cpu_path)

    def _write(self, name, text, folder=None):
        with open(os.path.join(folder or self.path, name), "w") as f:
            f.write(text)

    def _read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def join(self):
        """A command prefix (run as root) that moves itself into the box, then execs the rest."""
        joins = " && ".join(f"echo $$ > {folder}/cgroup.procs" for folder in (self.path, self.cpu_path) if folder)
        return ["sh", "-c", f'{joins} && exec "$@"', "box"]

    def peak(self):
        """The most the box's processes held at once, page cache included (bytes)."""
        return int(self._read("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"))

    def anon(self):
        """The anonymous memory the box's processes hold now, page cache excluded (bytes)."""
        key = "total_rss" if self.version == 1 else "anon"
        return next(int(line.split()[1]) for line in self._read("memory.stat").splitlines() if line.split()[0] == key)

    def oom_kills(self):
        """Processes the kernel's OOM killer ended in the box."""
        text = self._read("memory.oom_control" if self.version == 1 else "memory.events")
        return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")), 0)

    def remove(self):
        left = [int(pid) for pid in self._read("cgroup.procs").split()]
        for pid in left:  # (what the test started in it, by pid: a kernel that did not shut down)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not self._read("cgroup.procs").split(), 10)
        os.rmdir(self.path)
        if self.cpu_path:
            os.rmdir(self.cpu_path)


def account_env(account, **extra):
    """The environment an account's own session would give its processes (none of root's)."""
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ", "TERM")}
    return {**keep, "HOME": account.home, "USER": account.name, "LOGNAME": account.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin", **extra}


def scripts():
    """This folder's scripts, copied where every account can read them."""
    box = pathlib.Path(tempfile.mkdtemp(prefix="ddplab-users-"))
    os.chmod(box, 0o755)
    for script in HERE.glob("*.py"):
        shutil.copy(script, box / script.name)
        os.chmod(box / script.name, 0o644)
    return box


class Run:
    """A command started as an account (see run_as); finish() waits (bounded) and returns what it printed."""

    def __init__(self, account, argv, refuse=None, env=None, box=None, files=None):
        command = ["runuser", "-u", account.name, "--", "env", f"HOME={account.home}", f"USER={account.name}",
                   "PATH=/usr/local/bin:/usr/bin:/bin", *[f"{k}={v}" for k, v in (env or {}).items()]]
        if files:  # a machine whose hard limit of open files is low (some containers)
            command += ["prlimit", f"--nofile={files}:{files}", "--"]
        if refuse:
            command += [SYSTEM_PYTHON, "-I", str(box / "nouserns.py"), *(["--only-loopback"] if refuse == "loopback"
                                                                          else []), "--"]
        self.proc = subprocess.Popen([*command, *map(str, argv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=account.home, start_new_session=True)

    def finish(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"{self.proc.args[-3:]} did not finish in {timeout} s:\n{out[-3000:]}\n{err[-3000:]}")
        return self.proc.returncode, out, err

    def report(self, timeout):
        """The JSON object the command printed last, once it ended with exit code 0."""
        code, out, err = self.finish(timeout)
        assert code == 0, f"exit code {code}\n{out[-4000:]}\n{err[-4000:]}"
        return json.loads(out.strip().splitlines()[-1])

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: what it started, by its process group
        except ProcessLookupError:
            pass


def run_as(account, argv, refuse=None, env=None, box=None, files=None):
    return Run(account, argv, refuse, env, box, files)


def wait_until(predicate, timeout, every=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


__all__ = ["Account", "MemoryBox", "user_env", "user_kernel", "account_env", "scripts", "run_as", "wait_until", "sys"]
