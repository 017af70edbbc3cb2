"""What ddplab needs to know about this machine and its processes."""
import os
import signal
import time

import psutil


def usable_cores():
    """CPUs this process may really use: the affinity mask, capped by a container's CPU quota
    (Binder and docker show all the host's cores but allow one or two). (config.cores() is this,
    unless DDPLab.cores says otherwise.)"""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(n, quota)) if quota else n


def cgroup_cpu_quota(root="/sys/fs/cgroup"):
    """The container's CPU limit in whole CPUs (rounded up), or None if there is none."""
    try:  # cgroup v2: "max 100000" or "150000 100000"
        with open(os.path.join(root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            return -(-int(quota) // int(period))
        return None
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            quota = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            period = int(f.read())
        return -(-quota // period) if quota > 0 else None
    except (OSError, ValueError):
        return None


def free_gib():
    return psutil.virtual_memory().available / 2**30


def loopback_interface():
    """Name of the interface holding 127.0.0.1 ('lo' on Linux, 'lo0' on macOS)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addrs):
            return name
    return "lo"


def is_gone(proc):
    """Exited, or a zombie: a process whose parent has not reaped it yet (a killed engine's DataLoader
    workers are re-parented to init, which may reap them late)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs, timeout):
    """Wait until every process is gone; return those still alive at the timeout. (Not
    psutil.wait_procs: it counts a zombie that is not our child as alive until it is reaped.)"""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not is_gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if not is_gone(p)]
    return alive


def kill(procs, sig=signal.SIGKILL):
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def exit_reason(code):
    """Why a process ended, from its exit code (negative: the signal that ended it)."""
    if code is None:
        return "its engine stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = {"SIGSEGV": "crashed: segmentation fault", "SIGABRT": "aborted", "SIGBUS": "crashed: bus error",
                "SIGFPE": "crashed: arithmetic error", "SIGKILL": "was killed"}.get(name, "was ended")
        return f"its engine {what} ({name})"
    return f"its engine exited with code {code}"
