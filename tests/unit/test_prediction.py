"""Predict, then reveal (ddplab.lessons.prediction): what the learner sees and what their record keeps."""
import json

import pytest

from ddplab.lessons import check, predict, prediction, reveal


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(prediction, "_committed", {})
    return tmp_path


def kept(home):
    path = home / ".ddplab" / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_prediction_is_shown_beside_the_measurement_and_kept(home, capsys):
    assert predict("6.bubble", 0.5) == 0.5
    shown = reveal("6.bubble", 0.25, unit="s")
    out = capsys.readouterr().out
    assert "committed" in out and "you predicted 0.5 s; measured 0.25 s" in out and "2x what was measured" in out
    assert shown == {"predicted": 0.5, "measured": 0.25, "ratio": 2.0}
    events = kept(home)
    assert [(e["kind"], e["answer"], e["attempt"], e.get("measured")) for e in events] == \
        [("prediction", 0.5, 1, None), ("reveal", None, 1, 0.25)]


def test_after_the_reveal_a_new_prediction_is_a_second_attempt_beside_the_first(home, capsys):
    predict("6.bubble", 0.5)
    reveal("6.bubble", 0.48)
    predict("6.bubble", 0.3)
    out = capsys.readouterr().out
    assert "within 10 %" in out and "committed as attempt 2; your earlier one, 0.5, stays beside it" in out
    assert [e["answer"] for e in kept(home) if e["kind"] == "prediction"] == [0.5, 0.3]


def test_nothing_predicted_the_measurement_still_runs_says_so_and_nothing_is_written(home, capsys):
    assert predict("6.bubble") is None
    assert reveal("6.bubble", 0.43) == {"predicted": None, "measured": 0.43, "ratio": None}
    out = capsys.readouterr().out
    assert "write your prediction in place of ..." in out and "none was committed" in out
    assert not (home / ".ddplab").exists()


def test_a_prediction_that_is_not_a_number_or_a_letter_is_refused_and_not_kept(home, capsys):
    assert predict("6.bubble", "import os; os.system('rm -rf ~')") is None
    assert "give a number" in capsys.readouterr().out and kept(home) == []


def test_a_choice_is_right_when_it_names_what_was_measured(home, capsys):
    predict("19.order", "b")
    reveal("19.order", "b")
    assert "the measurement says b: right." in capsys.readouterr().out


def test_a_checked_answer_is_kept_with_its_verdict_and_reason(home, capsys):
    check("3.1", [6, 6, 6, 5], N=23, world_size=4)
    events = kept(home)
    assert len(events) == 1 and events[0]["kind"] == "check" and events[0]["answer"] == "(6, 6, 6, 5)"
    assert events[0]["ok"] in (True, False) and events[0]["reason"]


def test_a_prediction_of_zero_is_told_how_far_it_is(home, capsys):
    predict("2.spread_after", 0)
    reveal("2.spread_after", 0.03)
    assert "you predicted 0; measured 0.03: 0.03 apart." in capsys.readouterr().out
