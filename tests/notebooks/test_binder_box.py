"""Lesson 16 in a session the size of Binder's: 2 GiB of memory for the kernel and everything it
starts (a memory cgroup, as a Binder container's), run as the learner with Binder's install (the
frameworks extra: binder/postBuild) and binder/start's single thread. Four TensorFlow workers would
hold about 2.2 GiB there: the lesson reads the session's limit, runs TensorFlow in fewer workers,
says why, and still gets the same losses; nothing is killed for memory."""
import pathlib
import shutil

import pytest

from tests.users.accounts import MemoryBox, account_env, user_env, user_kernel

from .run_like_binder import run

LIMIT = 2 * 2**30  # a Binder session
pytestmark = [pytest.mark.pool, pytest.mark.slow, pytest.mark.xdist_group("binder-box")]


def test_lesson_16_runs_within_a_binder_sessions_memory(learner):
    box = MemoryBox(LIMIT)
    notebook = pathlib.Path(learner.home) / "notebooks" / "16_other_frameworks.ipynb"
    km, folder = user_kernel(learner, user_env(), box=box)
    try:
        env = account_env(learner, JPY_SESSION_NAME=str(notebook), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        nb, measured = run(notebook, km, env, "from ddplab.system import memory_limit\nprint(memory_limit())")
        killed, peak = box.oom_kills(), box.peak()
    finally:
        box.remove()  # (the kernel was shut down by run(); what is left in the box is ended by pid)
        shutil.rmtree(folder, ignore_errors=True)
    errors = [(c.source[:60], o.get("ename"), o.get("evalue")) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert int(measured["probe"].split()[-1]) == LIMIT  # the kernel saw the session's limit
    said = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "TensorFlow workers need about" in said  # it chose fewer workers, and said why
    assert killed == 0, "a process of the session was killed for memory"
    print(f"lesson 16 in 2 GiB: peak {measured['peak_pss'] / 2**20:.0f} MiB PSS, cgroup peak {peak / 2**20:.0f} MiB")
    assert measured["peak_pss"] < LIMIT
