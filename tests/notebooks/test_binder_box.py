"""Lesson 16's English edition, run in a session the size of Binder's: 2 GiB of memory and 1 CPU for the
kernel and everything it starts (memory and cpu cgroups, as a Binder container's), run as the learner with Binder's
install (the frameworks extra: binder/postBuild) and binder/start's single thread, and checked as every
lesson is (test_lessons.check_lesson; its Chinese edition runs there, with the machine's memory). Four
TensorFlow workers would hold about 2.2 GiB here: the lesson reads the session's limit, runs TensorFlow
in fewer workers, says why, and still gets the same losses; nothing is killed for memory."""
import threading

import nbformat
import psutil
import pytest

from tests.users.accounts import MemoryBox

from .conftest import ARTIFACTS, SharedKernel
from .run_like_binder import pss, tree
from .test_lessons import IN_A_BOX, check_lesson

LIMIT = 2 * 2**30  # a Binder session
pytestmark = [pytest.mark.pool, pytest.mark.slow, pytest.mark.heavy, pytest.mark.xdist_group("binder-box")]


class Peak(threading.Thread):
    """The largest PSS the kernel and its descendants held at once, looked at twice a second."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self):
        while not self.stop.wait(0.5):
            try:
                self.peak = max(self.peak, pss(tree(self.pid)))
            except psutil.Error:
                continue


def test_lesson_16_runs_within_a_binder_sessions_memory(learner):
    box = MemoryBox(LIMIT, cpus=1)
    kernel = SharedKernel(learner, box=box)
    try:
        kernel._ensure()
        peak = Peak(kernel.pid)
        peak.start()
        try:
            check_lesson(kernel, IN_A_BOX, "en")
        finally:
            peak.stop.set()
            peak.join(5)
        killed, charged = box.oom_kills(), box.peak()
    finally:
        kernel.shutdown()
        box.remove()  # (what is left in the box is ended by pid)
    nb = nbformat.read(ARTIFACTS / f"{IN_A_BOX}.ipynb", as_version=4)  # (check_lesson kept the executed copy)
    said = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "TensorFlow workers: 2" in said and "TensorFlow workers need about" in said  # fewer, and why
    assert killed == 0, "a process of the session was killed for memory"
    print(f"lesson 16 in 2 GiB: peak {peak.peak / 2**20:.0f} MiB PSS, cgroup peak {charged / 2**20:.0f} MiB")
    assert 0 < peak.peak < LIMIT
