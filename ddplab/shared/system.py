"""What ddplab needs to know about this machine and its processes."""
import functools
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable

import psutil


def usable_cores() -> int:
    """CPUs this process may really use: the affinity mask, capped by a container's CPU quota
    (Binder and docker show all the host's cores but allow one or two). (config.cores() is this,
    unless DDPLab.cores says otherwise.)"""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(n, quota)) if quota else n


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> int | None:
    """The session's CPU limit in whole CPUs (rounded up), or None if there is none: the smallest quota
    over this process's cpu cgroup and each one above it (v2's cpu.max, v1's cpu.cfs_quota_us), as a
    container (Binder, docker) shows it at the root or a hub's spawner sets it on the session's own."""
    quotas = []
    for version, folder in cgroups("cpu", root, proc):
        if version == 2:  # "max 100000" or "150000 100000"
            try:
                with open(os.path.join(folder, "cpu.max")) as f:
                    quota, period = f.read().split()[:2]
                if quota != "max":
                    quotas.append(-(-int(quota) // int(period)))
            except (OSError, ValueError):
                pass
        else:
            quota_us = _read_int(os.path.join(folder, "cpu.cfs_quota_us"))
            period_us = _read_int(os.path.join(folder, "cpu.cfs_period_us"))
            if quota_us is not None and quota_us > 0 and period_us:
                quotas.append(-(-quota_us // period_us))
    return min(quotas) if quotas else None


UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a huge number (9223372036854771712)
MEMORY_FILES: dict[int, tuple[str, str, str]] = {
    2: ("memory.max", "memory.current", "inactive_file"),  # limit, usage, reclaimable cache
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}


def cgroups(controller: str, root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> list[tuple[int, str]]:
    """[(cgroup version, folder)] of this process's cgroup for `controller` ("memory", "cpu") and each
    one above it (a limit anywhere above holds too), then the root's as a container shows it."""
    found: list[tuple[int, str]] = []
    try:
        with open(proc) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            version, base = 2, root
        elif controller in controllers.split(","):
            version, base = 1, os.path.join(root, controller)
        else:
            continue
        parts = [p for p in path.split("/") if p]
        found += [(version, os.path.join(base, *parts[:i])) for i in range(len(parts), 0, -1)]
    return found + [(2, root), (1, os.path.join(root, controller))]


def memory_cgroups(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> list[tuple[int, str]]:
    """cgroups("memory"): where the session's memory limit may be."""
    return cgroups("memory", root, proc)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _limiting(root: str, proc: str) -> tuple[int, int, str] | None:
    """(limit in bytes, cgroup version, folder) of the smallest memory limit over this process, or None."""
    limits = []
    for version, folder in memory_cgroups(root, proc):
        n = _read_int(os.path.join(folder, MEMORY_FILES[version][0]))
        if n is not None and 0 < n < UNLIMITED:
            limits.append((n, version, folder))
    return min(limits) if limits else None


def memory_limit(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> int | None:
    """The memory this session may use, in bytes (the smallest cgroup limit over this process, v2's
    memory.max or v1's memory.limit_in_bytes: Binder's 2 GiB, a hub's 1 GiB), or None if none."""
    found = _limiting(root, proc)
    return found[0] if found else None


def memory_available(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> int:
    """Bytes this session can still take: its cgroup's limit less what the cgroup holds (but page
    cache it can drop), or the machine's available memory where that is less."""
    available = psutil.virtual_memory().available
    found = _limiting(root, proc)
    if found is None:
        return available
    limit, version, folder = found
    _, usage, cache = MEMORY_FILES[version]
    used = _read_int(os.path.join(folder, usage))
    if used is None:
        return min(available, limit)
    reclaimable = 0
    try:
        with open(os.path.join(folder, "memory.stat")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == cache:
                    reclaimable = int(value)
    except (OSError, ValueError):
        pass
    return max(0, min(available, limit - used + reclaimable))


OOM_FILES = {2: "memory.events", 1: "memory.oom_control"}  # each has an "oom_kill N" line (Linux >= 4.13)
PEAK_FILES = {2: "memory.peak", 1: "memory.max_usage_in_bytes"}  # (v2's since Linux 5.19)


def oom_kills(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup", vmstat: str = "/proc/vmstat") -> int | None:
    """Processes the kernel's OOM killer has ended so far where this session's memory is limited: in
    the cgroup that limits it, or, with no limit, on the whole machine (vmstat). None if unknown."""
    found = _limiting(root, proc)
    path = os.path.join(found[2], OOM_FILES[found[1]]) if found else vmstat
    try:
        with open(path) as f:
            return next((int(line.split()[1]) for line in f if line.startswith("oom_kill ")), None)
    except (OSError, ValueError, IndexError):
        return None


def memory_peak(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> int | None:
    """The most this session's limited cgroup has held at once (bytes, page cache included), or None."""
    found = _limiting(root, proc)
    return _read_int(os.path.join(found[2], PEAK_FILES[found[1]])) if found else None


def loopback_interface() -> str:
    """Name of the interface holding 127.0.0.1 ('lo' on Linux, 'lo0' on macOS)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addrs):
            return name
    return "lo"


def is_gone(proc: psutil.Process) -> bool:
    """Exited, or a zombie: a process whose parent has not reaped it yet (a killed engine's DataLoader
    workers are re-parented to init, which may reap them late)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process is gone; return those still alive at the timeout. (Not
    psutil.wait_procs: it counts a zombie that is not our child as alive until it is reaped.)"""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not is_gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if not is_gone(p)]
    return alive


def kill(procs: Iterable[psutil.Process], sig: int = signal.SIGKILL) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def exit_reason(code: int | None) -> str:
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


# what the OOM killer adds to a process's score (oom_score_adj, -1000..1000): where a session runs out of memory it
# takes a rank (said as "killed for memory", with what fits) or the idle zygote before the notebook's kernel, which
# holds the learner's work. Any process may raise its own; lowering it again needs CAP_SYS_RESOURCE.
OOM_RANK, OOM_HELPER = 500, 200


def offer_to_oom_killer(adj: int) -> None:
    """Raise this process's oom_score_adj to `adj` (where /proc has it: Linux)."""
    try:
        with open("/proc/self/oom_score_adj", "r+") as f:
            if int(f.read() or 0) < adj:
                f.seek(0)
                f.write(str(adj))
    except (OSError, ValueError):
        logging.getLogger("ddplab").debug("oom_score_adj not raised to %d", adj, exc_info=True)


@functools.cache
def _malloc_trim() -> "Callable[[int], object] | None":
    """glibc's malloc_trim, looked up once; None where the C library has none (musl)."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        logging.getLogger("ddplab").debug("no malloc_trim in this C library: freed memory stays with the process")
        return None


def give_back_memory(*_: object) -> bool:
    """Return the memory this process has freed to the system (glibc's malloc_trim: free() keeps freed
    blocks in the middle of the heap, charged to the session's memory limit); False where the C library
    has no malloc_trim. Takes about 1 ms per 25 MB freed. Arguments are ignored (an IPython event's)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
