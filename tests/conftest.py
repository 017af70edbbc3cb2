"""Shared fixtures: one IPython shell with ddplab loaded, one 4-rank pool for the session."""
import collections
import os
import threading

import psutil
import pytest


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's default): two workers, or one on a one-core machine. The tests that
    share a pool, a kernel or a JupyterLab run on one worker each (xdist_group marks)."""
    return min(2, len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(items):
    """The long tests first: xdist hands out the groups (largest first), then single tests in
    collection order, and a 90-s test handed out last leaves the other worker idle meanwhile.
    And the user's environment (tests/users/accounts.py) is made here, before any test's clock
    starts, where a test of the tiers that run as a user is among those collected: on a fresh
    machine pip installs torch, TensorFlow and JAX into it (minutes, each pip call bounded)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if os.geteuid() == 0 and any(part in ("users", "notebooks") for item in items for part in item.path.parts[-3:-1]):
        from tests.users.accounts import user_env

        user_env()


def pytest_terminal_summary(terminalreporter, config):
    """Where the run's time went: worker-seconds (setup, call and teardown) by tier, and the heavy tiers'
    share (the `heavy` mark: the budget gives them at most half of the suite's 30 minutes, the rest 15)."""
    spent, heavy = collections.Counter(), 0.0
    for reports in terminalreporter.stats.values():
        for r in reports:
            if isinstance(r, pytest.TestReport):
                spent[r.nodeid.split("/")[1] if r.nodeid.startswith("tests/") else "?"] += r.duration
                heavy += r.duration if "heavy" in r.keywords else 0.0
    total = sum(spent.values())
    if total < 60:  # (a test or a few: nothing to say)
        return
    tiers = ", ".join(f"{tier} {s:.0f}" for tier, s in spent.most_common())
    terminalreporter.write_line(f"worker-seconds by tier: {tiers}; heavy {heavy:.0f} of {total:.0f} "
                                f"({100 * heavy / total:.0f} %), the rest {total - heavy:.0f}")


@pytest.fixture(scope="session")
def ip():
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "ddplab")
    return shell


@pytest.fixture(scope="session")
def magics(ip):
    return ip.magics_manager.registry["DDPMagics"]


@pytest.fixture
def no_pool(magics):
    """The magics as they are before %ddp_start, whether or not the session's pool runs."""
    saved, magics.lab = magics.lab, None
    yield magics
    magics.lab = saved


@pytest.fixture(scope="session")
def pool(ip, magics):
    """A 4-rank pool started through %ddp_start, stopped at the end of the session."""
    ip.run_line_magic("ddp_start", "4 --timeout 30")
    lab = magics.lab
    assert lab is not None and lab.running
    yield lab
    ip.run_line_magic("ddp_stop", "")


def descendants():
    """pids of this test process's live descendants (zombies count as gone)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def alive(pids):
    """Those of pids still running (zombies count as gone)."""
    from ddplab.kernel.lab import is_gone

    left = []
    for pid in pids:
        try:
            if not is_gone(psutil.Process(pid)):
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handling (KeyboardInterrupt in the main thread), as in a notebook
    kernel or a terminal, for tests that press Ctrl-C: other libraries in this long-lived test
    process (an asyncio loop's signal handler left behind, say) may have replaced it."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield lambda after: threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT))
    finally:
        signal.signal(signal.SIGINT, old)


class RunsCode:
    """What a planted file could hold: an object whose unpickling runs `touch marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))
