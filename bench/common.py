"""Shared pieces of the benchmarks: statistics, results, running cells in a real kernel."""
import json
import operator
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import weakref

import psutil

OPS = {"<=": operator.le, ">=": operator.ge}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def result(name, what, values, unit="x", target=None, **details):
    """One line of the table: min/median/max of `values` (ratios or measures) and the target; with a target
    and 4 values or more, the median's 90 % interval too (median_interval)."""
    values = [float(v) for v in values]
    med = statistics.median(values)
    met = None if target is None else OPS[target[0]](med, target[1])
    row = {"name": name, "what": what, "unit": unit, "values": values, "min": min(values), "median": med,
           "max": max(values), "target": list(target) if target else None, "met": met, "details": details}
    if target is not None and len(values) >= 4:
        row["interval"] = median_interval(values)
    return row


def median_interval(values, share=0.9, resamples=2000):
    """Where the median of runs like these falls `share` of the time: the percentile interval of the
    medians of `resamples` resamplings (bootstrap, a fixed seed: the same runs give the same interval).
    Runs here spread by +-10 % even on a quiet host, so a median of 10 moves by a few %: a median beside
    its target with the target inside this interval is not a measured miss (nor a measured hit)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    cut = int(resamples * (1 - share) / 2)
    return [medians[cut], medians[-cut - 1]]


def ratios(a, b):
    return [x / y for x, y in zip(a, b)]


# a run counts for a target when the hypervisor took at most this share of the machine's CPU time during
# it and during the runs it is compared with: such runs are the "quiet machine" the targets are for
QUIET = 0.01


def compared(name, what, pairs, target=None, **details):
    """result() of (ratio, share stolen) pairs: the ratios of the quiet ones (all, and the row says so,
    when none was quiet); every ratio and share are kept in the details."""
    quiet = [r for r, stole in pairs if stole <= QUIET]
    return result(name, what, quiet or [r for r, _ in pairs], target=target, quiet=bool(quiet),
                  left_out=len(pairs) - len(quiet) if quiet else 0, every_ratio=[r for r, _ in pairs],
                  stolen=[round(stole, 4) for _, stole in pairs], **details)


def more_kernels(kernels, laters, repeats, quick):
    """Whether to run another kernel: until `repeats`, then (not in a quick run) while fewer than `repeats`
    of the later ratios, (ratio, share stolen), were quiet, up to twice `repeats`."""
    enough = quick or len(kernels) >= 2 * repeats or sum(stole <= QUIET for _, stole in laters) >= repeats
    return len(kernels) < repeats or not enough


def against_around(runs, baseline):
    """For runs alternating T K T K ... T, rows [samples/s, kernel CPU, share stolen]: each K run's rate
    / the mean of the T runs just before and just after it, with the largest share stolen in the three.
    This VM's speed drifts over a bench (torchrun's own runs rose 9% in one half hour); the two sides
    cancel a steady drift, where one side alone takes it for the lab's cost (or hides it)."""
    return [(k[0] / ((before[0] + after[0]) / 2), max(k[2], before[2], after[2]))
            for k, before, after in zip(runs, baseline, baseline[1:])]


def ipc_kernel():
    """A kernel manager whose kernel talks over socket files in a private temporary folder: no TCP
    ports to race for when kernels start side by side, none open to other users."""
    from jupyter_client import KernelManager

    folder = tempfile.mkdtemp()
    km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(folder, "kernel"))
    weakref.finalize(km, shutil.rmtree, folder, True)  # the folder goes with its manager
    return km


def in_kernel(cells, timeout=1800):
    """Run cells in a fresh Jupyter kernel (nbclient); every line a cell prints as
    'BENCH <json>' is returned, in order."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    km = ipc_kernel()  # no TCP ports to race for, nor to expose
    try:
        NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": ROOT}}).execute(cwd=ROOT)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    found = []
    for cell in nb.cells:
        for out in cell.outputs:
            for line in (out.get("text") or "").splitlines():
                if line.startswith("BENCH "):
                    found.append(json.loads(line[6:]))
    return found


def cpu_ticks():
    """The machine's CPU time so far (/proc/stat), in ticks: (taken by the hypervisor, all). On a VM
    the host takes time from the guest's CPUs (steal) when its neighbours are busy, and a run of gloo's
    ranks, waking and sleeping at every collective, then slows by up to a third."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]  # user ... steal (guest time is in user)
    return fields[7], sum(fields)


def stolen(since):
    """The share of the machine's CPU time the hypervisor took since `since` (a cpu_ticks())."""
    steal, total = cpu_ticks()
    return (steal - since[0]) / max(1, total - since[1])


def timed(fn, *args, **kwargs):
    tic = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - tic


def python(*args, env=None, timeout=1800):
    """Run a Python module/script of this repository; return its stdout. Its temporary files
    (torchrun's log folders) are removed after it."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": tmp, **(env or {})})
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


class Torchrun:
    """torchrun's ranks kept waiting between runs (bench/ddp_script.py --serve): `run(workload, steps)`
    trains once and returns the pool's samples/s. A notebook's runs and these can then alternate run by
    run, seconds apart, where a fresh torchrun per run takes 10 s to start."""

    def __init__(self, n, threads=1, timeout=300):
        self.folder = tempfile.mkdtemp(prefix="ddplab-bench-")
        self.fifo = os.path.join(self.folder, "commands")
        os.mkfifo(self.fifo, 0o600)
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
             "bench/ddp_script.py", f"--threads={threads}", f"--serve={self.fifo}"],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,  # (the kernel's process group: killed with it)
            env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": self.folder, "OMP_NUM_THREADS": str(threads)})
        self.lines = queue.Queue()  # its stdout, line by line (None: closed), read by a thread of its own
        threading.Thread(target=lambda: [*map(self.lines.put, self.proc.stdout), self.lines.put(None)],
                         daemon=True).start()
        self._line("READY")
        self.commands = os.open(self.fifo, os.O_WRONLY)  # rank 0 opens it right after READY
        agent = psutil.Process(self.proc.pid)
        self.procs = [agent, *agent.children(recursive=True)]
        self._signal(signal.SIGSTOP)

    def _line(self, prefix):
        """The next line of the ranks' output starting with `prefix` (its rest), within the timeout."""
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                line = self.lines.get(timeout=max(0, deadline - time.monotonic()))
                if line is None:
                    break
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
        except queue.Empty:
            pass
        self.close()
        raise RuntimeError(f"torchrun gave no {prefix!r} line within {self.timeout} s")

    def run(self, workload, steps):
        self._signal(signal.SIGCONT)
        os.write(self.commands, f"{workload} {steps}\n".encode())
        rate = json.loads(self._line("BENCH "))
        self._signal(signal.SIGSTOP)
        return rate

    def _signal(self, signum):
        """Stopped (SIGSTOP) between runs: torchrun's agent looks at its ranks ten times a second, CPU
        the notebook's runs beside them should not pay for."""
        for proc in getattr(self, "procs", ()):
            try:
                proc.send_signal(signum)
            except psutil.NoSuchProcess:
                pass

    def close(self):
        if self.proc.poll() is None:
            self._signal(signal.SIGCONT)
            try:
                os.write(self.commands, b"stop\n")
                self.proc.wait(30)
            except (AttributeError, OSError, subprocess.TimeoutExpired):
                self._signal(signal.SIGKILL)
                self.proc.kill()
                self.proc.wait(30)
        commands = self.__dict__.pop("commands", None)  # (closed once: a failed _line closes, then __exit__ again)
        if commands is not None:
            os.close(commands)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
