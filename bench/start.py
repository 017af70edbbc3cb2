"""Target 1: `%ddp_start 4` until the group is formed and torch imported on every rank, against
bare ipyparallel (Cluster(n=4).start_and_connect_sync() + `import torch` on all engines).
Target 5: stop and restart wall times (stop against ipyparallel's stop_cluster_sync).
"""
import shutil
import tempfile
import time

import psutil

from .common import ratios, result


def bare_ipyparallel(n):
    """(seconds to a connected cluster with torch imported on every engine, seconds to stop it)."""
    import ipyparallel as ipp

    profile = tempfile.mkdtemp(prefix="bench-ipp-")
    tic = time.perf_counter()
    cluster = ipp.Cluster(n=n, profile_dir=profile, log_level=40)
    client = cluster.start_and_connect_sync()
    client[:].execute("import torch", block=True)
    started = time.perf_counter() - tic
    pids = [l.process.pid for es in cluster.engines.values() for l in es.launchers.values()]
    client.close()
    tic = time.perf_counter()
    cluster.stop_cluster_sync()
    stopped = time.perf_counter() - tic
    for pid in pids:  # its nannies may outlive it by seconds; end anything left, by pid
        try:
            for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                p.kill()
        except psutil.Error:
            pass
    shutil.rmtree(profile, ignore_errors=True)
    return started, stopped


def ddplab_start_stop(n):
    """(start seconds, stop seconds, full restart seconds, one lost rank restart seconds)."""
    from ddplab import Lab

    tic = time.perf_counter()
    lab = Lab(n).start()
    started = time.perf_counter() - tic
    tic = time.perf_counter()
    lab.restart(everything=True)
    restart_all = time.perf_counter() - tic
    lab.fault("kill", n - 1)
    tic = time.perf_counter()
    lab.restart()
    restart_one = time.perf_counter() - tic
    tic = time.perf_counter()
    lab.stop()
    return started, time.perf_counter() - tic, restart_all, restart_one


def run(quick=False):
    n, repeats = (2, 1) if quick else (4, 3)
    bare, ours = [], []
    for _ in range(repeats):
        bare.append(bare_ipyparallel(n))
        ours.append(ddplab_start_stop(n))
    b_start, b_stop = zip(*bare)
    start, stop, restart_all, restart_one = zip(*ours)
    return [
        result("start", f"%ddp_start {n} (group formed, torch on every rank) / bare ipyparallel start + import torch",
               ratios(start, b_start), target=("<=", 0.4), ddplab_s=start, bare_s=b_start),
        result("stop", f"%ddp_stop, {n} ranks with torch loaded (s)", stop, unit="s", target=("<=", 1.5),
               ipyparallel_stop_cluster_s=b_stop),
        result("restart", f"%ddp_restart --all, {n} ranks (s)", restart_all, unit="s"),
        result("restart_lost", "%ddp_restart of one lost rank, the others keep their variables (s)",
               restart_one, unit="s"),
    ]
