"""Every magic, fed arbitrary argument strings, answers a clear usage error or works: it never
hangs, never leaves a process behind, never shows an internal traceback."""
import re
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from ddplab.shared.errors import DDPLabError

from ..conftest import descendants

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("shared-pool")]  # one worker holds the session pool

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


# what an internal error looks like when it leaks out as a message: not an answer a user can act on
UNCLEAR = re.compile(r"Traceback|object has no attribute|index out of range|NoneType|unsupported operand|"
                     r"not subscriptable|unexpected keyword|positional argument|object is not|^\s*$")


def assert_clear(message):
    """One line a user can act on: not empty, not an internal error's text."""
    assert "\n" not in message.strip(), message
    ours = re.sub(r"failed on rank \d+: .*", "failed on rank N: (the user's expression's own error)", message)
    assert not UNCLEAR.search(ours), message


def clear_or_works(ip, capsys, call, *args):
    """The call works, or raises a one-line UsageError / ddplab error that is clear; no traceback."""
    try:
        bounded(60, call, *args)
    except UsageError as exc:
        assert_clear(str(exc))
    except DDPLabError as exc:
        lines = exc._render_traceback_()
        assert lines and lines[0].startswith(type(exc).__name__), lines
        assert_clear(lines[0])
    out = capsys.readouterr()
    assert "Traceback (most recent call last)" not in out.out + out.err


def test_the_clearness_check_can_fail():
    for unclear in ("'NoneType' object has no attribute 'world_size'", "list index out of range", "",
                    "first line\nsecond line"):
        with pytest.raises(AssertionError):
            assert_clear(unclear)
    assert_clear("--ranks '9': this pool has ranks 0..3")
    assert_clear("evaluating 'rank.x' failed on rank 0: AttributeError: 'int' object has no attribute 'x'")


def parses(ip, magic, line):
    from ddplab.kernel.magics import _parse

    try:
        registry = ip.magics_manager.registry
        owner = next(m for m in (registry["DDPMagics"], registry["DDPInspectMagics"]) if hasattr(m, magic))
        _parse(getattr(owner, magic), line)
        return True
    except UsageError:
        return False


@pytest.fixture
def fuzz_pool(ip, pool, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # %ddp_history --csv writes where it is told
    return pool, helpers(pool)


def helpers(pool):
    """What the pool may have besides its own processes now: checked after every example."""
    return descendants() - set(pool.pids()) - {pool.pool.reaper_pid}


def whole_and_no_leak(pool, before):
    """After one example: the pool whole again (a valid "%ddp_fault kill N" worked), drills
    cleared, and no process left behind by the example."""
    if pool.find_lost():
        pool.restart()
    for r in list(pool.drills.faults):
        pool.drills.set("clear", r)
    assert pool.running
    assert helpers(pool) <= before


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(magic=st.sampled_from(MAGICS), line=ARGS)
def test_line_magics_with_arbitrary_arguments(ip, fuzz_pool, capsys, magic, line):
    pool, before = fuzz_pool
    if magic in ("ddp_stop", "ddp_restart") and parses(ip, magic, line):
        line = line + " extra"  # these would stop or restart the shared pool: valid, tested elsewhere
    clear_or_works(ip, capsys, ip.run_line_magic, magic, line)
    whole_and_no_leak(pool, before)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(line=ARGS)
def test_cell_magic_with_arbitrary_arguments(ip, fuzz_pool, capsys, line):
    clear_or_works(ip, capsys, ip.run_cell_magic, "ddp", line, "fuzz_ok = 1")
    whole_and_no_leak(*fuzz_pool)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(expr=SAFE_EXPR)
def test_gather_with_arbitrary_expressions(ip, fuzz_pool, capsys, expr):
    clear_or_works(ip, capsys, ip.run_line_magic, "ddp_gather", expr)
    whole_and_no_leak(*fuzz_pool)
