"""One kernel per edition for the lessons: each lesson starts from an empty namespace, as in a fresh
kernel, but the kernel (and its zygote, warm) is started once for all of them instead of once per
lesson. The kernel runs as the learners run it: as an ordinary account (made for the session,
removed after), with ddplab installed as a user installs it (`pip install .`, runtime dependencies
only, tests/users/accounts.py), on a copy of the notebooks in that account's home. The Chinese
edition's kernel is told its notebooks' folder (zh), as JupyterLab tells it."""
import json
import pathlib
import shutil
import subprocess
import threading
import time

import nbformat
import psutil
import pytest
from nbclient import NotebookClient

from tests.users.accounts import SYSTEM_PYTHON, Account, MemoryBox, account_env, scripts, user_env, user_kernel, wait_until

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
ARTIFACTS = pathlib.Path(__file__).resolve().parent / "artifacts"
BINDER = 2 * 2**30  # a Binder session's memory (mybinder.org's deploy config): the English lessons run in one


class AnonPeak(threading.Thread):
    """The most anonymous memory a box's processes held at once while a lesson ran (looked at every 0.1 s)."""

    def __init__(self, box):
        super().__init__(daemon=True)
        self.box, self.peak, self.stop = box, box.anon(), threading.Event()

    def run(self):
        while not self.stop.wait(0.1):
            self.peak = max(self.peak, self.box.anon())


class SharedKernel:
    """A kernel, run as `account`, that runs notebook after notebook, each from a reset namespace."""

    def __init__(self, account, folder=NOTEBOOKS, box=None, launcher=()):
        self.km, self.folder, self.account, self.box = None, folder, account, box  # box: a MemoryBox it runs in
        self.launcher = launcher  # what the kernel's command starts with, as the account (user_kernel)
        self.peaks = {}  # in a box: lesson -> the most anonymous memory the box held while it ran (bytes)
        self.copy = pathlib.Path(account.home) / "notebooks" / folder.relative_to(NOTEBOOKS)  # where the learner has them
        self._kernel_folder = None

    def _ensure(self):
        if self.km is None or not self.km.is_alive():
            self.km, self._kernel_folder = user_kernel(self.account, user_env(), box=self.box, launcher=self.launcher)
            session = str(self.copy / "lesson.ipynb")  # jupyter_server sets it to the notebook's path
            # DDPLAB_CHECK_EXERCISES: each unanswered check(...) makes sure its judge accepts the solution
            # and rejects a typical mistake on this very run (ddplab/lessons/exercises)
            self.km.start_kernel(cwd=str(self.copy), env=account_env(self.account, JPY_SESSION_NAME=session,
                                                                     DDPLAB_CHECK_EXERCISES="1"))
            # the learner's, not root's (once what runs before it, as root, has exec'd it: a box's join)
            assert wait_until(lambda: psutil.Process(self.pid).uids().real == self.account.uid, 10)

    @property
    def pid(self):
        return self.km.provisioner.pid

    def run(self, name, budget):
        """Execute notebooks/NAME.ipynb; return (the executed notebook, seconds it took)."""
        self._ensure()
        # nothing of the last lesson is left: a pool it left running (it failed before %ddp_stop) would make
        # this lesson's %ddp_start a no-op, and its failure this one's
        stop = ('_ip = get_ipython()\nif "ddp_stop" in _ip.magics_manager.magics["line"]:\n'
                '    _ip.run_line_magic("ddp_stop", "")')
        reset = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(stop), nbformat.v4.new_code_cell("%reset -f")])
        NotebookClient(reset, km=self.km, timeout=60).execute()
        nb = nbformat.read(self.folder / f"{name}.ipynb", as_version=4)
        tic = time.monotonic()
        out = ARTIFACTS / self.folder.relative_to(NOTEBOOKS)
        peak = AnonPeak(self.box) if self.box is not None else None
        if peak is not None:
            peak.start()
        try:
            NotebookClient(nb, km=self.km, timeout=budget, kernel_name="python3",
                           resources={"metadata": {"path": str(self.copy)}}).execute()
        except BaseException:  # what every cell printed up to the failure, to read after the run
            (out / "failed").mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out / "failed" / f"{name}.ipynb")
            raise
        finally:
            if peak is not None:
                peak.stop.set()
                peak.join(5)
                self.peaks[name] = peak.peak
                self._save_peaks(out)
        took = time.monotonic() - tic
        out.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out / f"{name}.ipynb")
        return nb, took

    def _save_peaks(self, out):
        """The peaks so far, in MiB, beside the executed lessons (peaks.json: read after a run)."""
        out.mkdir(parents=True, exist_ok=True)
        path = out / "peaks.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        known.update({name: round(b / 2**20) for name, b in self.peaks.items()})
        path.write_text(json.dumps(dict(sorted(known.items())), indent=1))

    def left_running(self):
        """The kernel's descendants, but for its zygote (kept warm between pools on purpose)."""
        kernel = psutil.Process(self.pid)
        zygotes = {p.pid for p in kernel.children() if "ddplab.processes.zygote" in " ".join(p.cmdline())}
        left = []
        for p in kernel.children(recursive=True):
            try:
                if p.pid not in zygotes and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(" ".join(p.cmdline())[:80])
            except psutil.NoSuchProcess:
                pass
        return left

    def shutdown(self):
        if self.km is not None and self.km.is_alive():
            self.km.shutdown_kernel()  # gracefully: atexit and finalizers of the lessons run
        if self._kernel_folder:
            shutil.rmtree(self._kernel_folder, ignore_errors=True)


@pytest.fixture(scope="session")
def learner():
    """An ordinary account with the notebooks in its home, as a learner's clone."""
    account = Account.make("ddpl")
    shutil.copytree(NOTEBOOKS, pathlib.Path(account.home) / "notebooks", ignore=shutil.ignore_patterns("src"))
    subprocess.run(["chown", "-R", f"{account.uid}:{account.gid}", f"{account.home}/notebooks"], check=True)
    yield account
    account.remove()


@pytest.fixture(scope="session")
def kernel(learner):
    """The English edition's kernel, in a session the size of Binder's: every process it starts in a 2 GiB
    memory cgroup (each lesson's peak is measured there) with a quota of 1 CPU, and refused user namespaces, as Binder's and
    Docker's containers refuse them (tests/users/nouserns.py: the pools share the machine's network and
    guard it as they do there)."""
    box, folder = MemoryBox(BINDER, cpus=1), scripts()
    shared = SharedKernel(learner, box=box, launcher=(SYSTEM_PYTHON, "-I", folder / "nouserns.py", "--"))
    yield shared
    shared.shutdown()
    box.remove()  # (what is left in the box is ended by pid)
    shutil.rmtree(folder)


@pytest.fixture(scope="session")
def kernel_zh(learner):
    shared = SharedKernel(learner, NOTEBOOKS / "zh")
    yield shared
    shared.shutdown()
