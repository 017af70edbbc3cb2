import pytest

from ddplab.shared import state as st


def test_happy_path_through_a_training_cell():
    s = st.RankStates(2)
    for new in (st.INIT, st.READY, st.RUNNING, st.TRAINING, st.DONE, st.RUNNING, st.DONE, st.READY):
        s.set(0, new)
    assert s[0] == st.READY and s[1] == st.STARTING


@pytest.mark.parametrize("old,new", [
    (st.STARTING, st.TRAINING), (st.INIT, st.DONE), (st.READY, st.DONE), (st.LOST, st.READY),
    (st.STOPPED, st.RUNNING), (st.DONE, st.TRAINING),
])
def test_forbidden_transitions_raise(old, new):
    s = st.RankStates(1)
    s.states[0] = old
    with pytest.raises(st.BadTransition, match=f"{old} -> {new}"):
        s.set(0, new)
    assert s[0] == old


@pytest.mark.parametrize("live", [st.STARTING, st.INIT, st.READY, st.RUNNING, st.TRAINING, st.DONE])
@pytest.mark.parametrize("ending", [st.FAILED, st.LOST, st.STOPPED])
def test_every_live_state_can_fail_be_lost_or_stop(live, ending):
    s = st.RankStates(1)
    s.states[0] = live
    assert s.set(0, ending) is True and s[0] == ending


def test_a_rank_that_fails_after_its_pool_stopped_stays_stopped():
    """Lab.stop() from one thread while another's cell waits on the ranks: the cell's monitor then
    finds them gone, which must not raise (stopped -> lost is no transition)."""
    from ddplab.shared.state import RunState

    rs = RunState(2)
    rs.states.set_all(st.STOPPED)
    rs.fail(1, "its engine is gone", lost=True)
    assert list(rs.states) == [st.STOPPED] * 2 and rs.ranks[1].error == "its engine is gone"


def test_setting_the_same_state_is_a_no_op():
    s = st.RankStates(3)
    assert s.set(1, st.STARTING) is False
    s.set_all(st.INIT)
    assert list(s) == [st.INIT] * 3 and s.count(st.INIT) == 3


def test_every_state_has_rules():
    assert set(st.ALLOWED) == set(st.STATES)
    for targets in st.ALLOWED.values():
        assert targets <= set(st.STATES)


def test_every_change_to_the_run_state_takes_its_lock():
    """The monitor, the watch thread, drills and a background cell change it from different threads:
    each method that changes it holds RunState.lock (a method that assigns and is not locked fails)."""
    import inspect
    import re

    from ddplab.shared.state import RunState

    changes = re.compile(r"self\.(?!lock\b)\w+(\.\w+|\[[^\]]*\])*(\.\w+)? *(=|\+=)(?!=)|self\.states\.set\(|\.touch\(\)")
    unlocked = [name for name, fn in vars(RunState).items()
                if callable(fn) and name not in ("__init__", "touch") and changes.search(inspect.getsource(fn))
                and not hasattr(fn, "__wrapped__")]
    assert unlocked == []
    rs = RunState(2)
    with rs.lock:  # re-entrant: a locked method may call another
        rs.fail(1, "boom", lost=True)
    assert rs.states[1] == "lost"
