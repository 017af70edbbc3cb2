"""Rank states are an Enum (state.RankState) that is still a plain string wherever one is carried:
on the wire (JSON), in text (format, f-strings, str), in comparisons and as dict keys."""
import json
import pickle

import pytest

from ddplab.shared import state as st

NAMES = ["starting", "init", "ready", "running", "training", "done", "failed", "lost", "stopped"]


def test_the_states_are_the_enum_in_its_order():
    assert list(st.RankState) == list(st.STATES)
    assert [s.value for s in st.STATES] == NAMES
    assert st.READY is st.RankState.READY and st.RankState("ready") is st.READY
    assert set(st.ALLOWED) == set(st.RankState)


@pytest.mark.parametrize("state", st.STATES)
def test_a_state_is_its_plain_name_on_the_wire(state):
    name = state.value
    assert state == name and name == state and isinstance(state, str)
    assert hash(state) == hash(name)
    assert json.dumps(state) == json.dumps(name)
    assert json.dumps({state: [state]}) == json.dumps({name: [name]})
    assert json.loads(json.dumps({"state": state})) == {"state": name}
    assert str(state) == f"{state}" == format(state) == name
    assert "{}".format(state) == "%s" % state == name  # noqa: UP031, UP032 - the old ways format it too
    assert f"{state:>10}" == f"{name:>10}"
    assert "dashboard|" + state == "dashboard|" + name
    assert pickle.loads(pickle.dumps(state)) is state


def test_states_are_looked_up_by_the_plain_name():
    """Dicts keyed by states (ALLOWED, the dashboard's nodes) answer the name as the wire carries it, and
    the reverse; sets and `in` treat the two alike."""
    assert st.ALLOWED["ready"] == st.ALLOWED[st.READY]
    labels = {"ready": "Ready", "failed": "Failed"}  # keyed by plain strings (a catalogue, a table)
    assert labels[st.READY] == "Ready" and labels.get(st.FAILED) == "Failed"
    assert "lost" in {st.LOST, st.STOPPED} and st.DONE in ("done", "failed", "lost")
    assert st.LOST not in {"starting"}


def test_rank_states_carry_the_enum_and_compare_to_strings():
    s = st.RankStates(2)
    s.set(0, st.INIT)
    s.set(0, "ready")  # a plain name is taken as its state
    assert s[0] is st.READY and list(s) == ["ready", "starting"] and s.count("ready") == 1 and s.count(st.STARTING) == 1
    assert json.dumps(list(s)) == '["ready", "starting"]'


@pytest.mark.parametrize("new", [st.DONE, "done", "no such state"])
def test_a_bad_transition_still_raises(new):
    s = st.RankStates(1)
    with pytest.raises(st.BadTransition, match="rank 0: starting -> ") as raised:
        s.set(0, new)
    assert f"starting -> {new} is not an allowed transition" in str(raised.value)
    assert s[0] is st.STARTING
    rs = st.RunState(1)
    with pytest.raises(st.BadTransition):
        rs.set_state(0, st.TRAINING)
    assert rs.states[0] == "starting" and rs.version == 0


def test_the_run_state_reports_plain_names():
    rs = st.RunState(2)
    rs.set_all(st.INIT)
    rs.set_all(st.READY)
    rs.begin_cell([0, 1], 0.0)
    rs.points_arrived(0, 1, 0.5, 10.0, 0.1, 1)
    rs.fail(1, "boom", lost=True)
    assert list(rs.states) == ["training", "lost"]
    assert json.dumps({"states": list(rs.states)}) == '{"states": ["training", "lost"]}'
