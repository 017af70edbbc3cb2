"""check(): an exercise's answer judged against the learner's run, right or wrong and why, in the pool's
language, never printing the solution; and the self-check the lesson tests run on every judge."""
import pytest

from ddplab import lessons
from ddplab.lessons import exercises
from ddplab.lessons.exercises import EXERCISES, check, exercise, right, whole_number, wrong


@pytest.fixture
def toy():
    @exercise("99.1", solution=lambda run: run["calls"] // 4, mistake=lambda run: run["calls"])
    def per_update(answer, run):
        if whole_number(answer) == run["calls"] // 4:
            return right("one all-reduce per update.", "每次更新一次 all-reduce。")
        return wrong("count the updates, not the micro-batches.", "数的是更新次数，不是微批次数。")

    yield "99.1"
    del EXERCISES["99.1"]


def test_a_right_and_a_wrong_answer_are_judged_on_the_run(toy, capsys):
    assert check(toy, 6, calls=24) is True
    assert capsys.readouterr().out == "Exercise 99.1 · Right. one all-reduce per update.\n"
    assert check(toy, 24, calls=24) is False
    out = capsys.readouterr().out
    assert out.startswith("Exercise 99.1 · Not yet.") and "6" not in out  # the solution is not shown


def test_an_unreadable_answer_says_what_kind_is_asked(toy, capsys):
    assert check(toy, "six", calls=24) is False
    assert "give a number" in capsys.readouterr().out
    assert check(toy, 6.5, calls=24) is False
    assert "whole number" in capsys.readouterr().out


def test_unanswered_says_what_to_do_and_the_tests_self_check_the_judge(toy, capsys, monkeypatch):
    monkeypatch.delenv("DDPLAB_CHECK_EXERCISES", raising=False)
    assert check(toy, ..., calls=24) is None
    assert "in place of ..." in capsys.readouterr().out
    monkeypatch.setenv("DDPLAB_CHECK_EXERCISES", "1")
    assert check(toy, ..., calls=24) is None  # its judge accepts 6 and rejects 24
    EXERCISES["99.1"] = exercises.Exercise("99.1", EXERCISES["99.1"].judge, lambda run: 5, lambda run: 24)
    with pytest.raises(AssertionError, match="rejects its own solution 5"):
        check(toy, ..., calls=24)
    EXERCISES["99.1"] = exercises.Exercise("99.1", EXERCISES["99.1"].judge, lambda run: 6, lambda run: 6)
    with pytest.raises(AssertionError, match="accepts the mistake 6"):
        check(toy, ..., calls=24)


def test_the_verdict_speaks_the_pools_language(toy, capsys, monkeypatch):
    monkeypatch.setattr(exercises, "say", lambda en, zh: zh)
    check(toy, 6, calls=24)
    assert capsys.readouterr().out == "练习 99.1 · 正确。每次更新一次 all-reduce。\n"
    assert lessons.say is not exercises.say


def test_unknown_exercises_are_named():
    with pytest.raises(KeyError, match="like '4.2'"):
        check("four", 1)
    with pytest.raises(KeyError, match="lesson 98 has no exercises"):
        check("98.1", 1)


def test_a_unit_slip_is_named_as_one():
    from ddplab.lessons.exercises import unit_slip, wrong_unit

    assert unit_slip(3_000_000 / 2**20, 3.0, "MB") == "MiB"
    assert unit_slip(3e6, 3.0, "MB") == "bytes"
    assert unit_slip(2.9, 3.0, "MB") is None  # a wrong number, not a wrong unit
    assert unit_slip(3.0, 3.0, "MB") is None
    assert "check the unit" in wrong_unit("MiB", "MB").en
