"""Every magic, fed arbitrary argument strings, answers a clear usage error or works: it never
hangs, never leaves a process behind, never shows an internal traceback."""
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from ddplab.errors import DDPLabError

from ..conftest import descendants

pytestmark = pytest.mark.pool

WORDS = ["--ranks", "--timeout", "--threads", "--lang", "--no-dashboard", "--at-step", "--csv", "--all",
         "kill", "raise", "slow", "clear", "zh", "en", "all", "0", "1", "3", "7", "-1", "2.5", "0,2", "1-3",
         "nan", "inf", "1e9", "x", "'", '"', "=", "--", "-", ",", "rank", "t.item()", "None"]
ARGS = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join),
)
SAFE_EXPR = st.from_regex(r"[a-z_0-9 .+*\-\[\],]{0,14}", fullmatch=True)  # gather evaluates on ranks
MAGICS = ["ddp_start", "ddp_status", "ddp_history", "ddp_fault", "ddp_push", "ddp_restart", "ddp_stop"]


class Hung(Exception):
    pass


def bounded(seconds, fn, *args):
    """Run fn; fail the test (not hang) if it takes longer than `seconds`."""
    def alarm(signum, frame):
        raise Hung(f"{fn.__name__}{args} took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def clear_or_works(ip, capsys, call, *args):
    """The call works, or raises a one-line UsageError / ddplab error; no internal traceback."""
    try:
        bounded(60, call, *args)
    except UsageError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip()
    except DDPLabError as exc:
        assert len(exc._render_traceback_()) >= 1
    out = capsys.readouterr()
    assert "Traceback (most recent call last)" not in out.out + out.err


@pytest.fixture
def fuzz_pool(ip, pool, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # %ddp_history --csv writes where it is told
    pids = set(pool.pids()) | {pool.pool.reaper_pid}
    before = descendants() - pids
    yield pool
    if pool.find_lost():
        pool.restart()
    for r in list(pool.faults):
        pool.fault("clear", r)
    assert pool.running
    assert descendants() - set(pool.pids()) - {pool.pool.reaper_pid} <= before  # nothing left behind


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(magic=st.sampled_from(MAGICS), line=ARGS)
def test_line_magics_with_arbitrary_arguments(ip, fuzz_pool, capsys, magic, line):
    if magic in ("ddp_stop", "ddp_restart") and line.strip() in ("", "--all"):
        line = line + " extra"  # these would stop or restart the shared pool: valid, tested elsewhere
    clear_or_works(ip, capsys, ip.run_line_magic, magic, line)
    if fuzz_pool.find_lost():  # a valid "%ddp_fault kill N" worked: bring the pool back
        fuzz_pool.restart()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(line=ARGS)
def test_cell_magic_with_arbitrary_arguments(ip, fuzz_pool, capsys, line):
    clear_or_works(ip, capsys, ip.run_cell_magic, "ddp", line, "fuzz_ok = 1")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(expr=SAFE_EXPR)
def test_gather_with_arbitrary_expressions(ip, fuzz_pool, capsys, expr):
    clear_or_works(ip, capsys, ip.run_line_magic, "ddp_gather", expr)
