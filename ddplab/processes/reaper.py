"""Ends a pool whose notebook kernel died without stopping it (kill -9, a crash).

    python -m ddplab.processes.reaper KERNEL_PID WORKDIR

Lab.start runs one per pool, in its own session, and Lab.stop ends it. It checks twice a
second: if the pool's private directory is gone, the pool was stopped normally and it exits;
if the kernel is gone, it kills every process listed in WORKDIR/pool.pids and all their
descendants (DataLoader workers included), removes WORKDIR and exits.
"""
import os
import shutil
import signal
import sys
import time

import psutil

EVERY = 0.5  # seconds between looks at the kernel (a separate process: not a DDPLab setting)


def _listed(workdir):
    """The pool's processes, as pool.pids lists them ("pid start-time" a line)."""
    try:
        with open(os.path.join(workdir, "pool.pids")) as f:
            lines = [line.split() for line in f if line.strip()]
    except OSError:
        return []
    procs = []
    for fields in lines:
        try:
            proc = psutil.Process(int(fields[0]))
            if len(fields) < 2 or abs(proc.create_time() - float(fields[1])) < 0.01:  # still that process
                procs.append(proc)
        except (psutil.Error, ValueError):
            continue
    return procs


def reap(workdir):
    procs = []
    for proc in _listed(workdir):
        try:
            procs.extend([proc, *proc.children(recursive=True)])
        except psutil.Error:
            pass
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=3)
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None):
    kernel_pid, workdir = (argv or sys.argv[1:])[:2]
    try:
        kernel = psutil.Process(int(kernel_pid))
    except psutil.NoSuchProcess:
        reap(workdir)
        return
    while os.path.isdir(workdir):
        time.sleep(EVERY)
        try:
            alive = kernel.is_running() and kernel.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            reap(workdir)
            return


if __name__ == "__main__":
    main()
