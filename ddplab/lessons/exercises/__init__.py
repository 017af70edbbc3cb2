"""Exercises a learner can check: in a lesson, `check("4.2", answer, **run)` says whether the answer is
right and why, in the pool's language, without printing the solution.

Each lesson's exercises live in `lessonNN.py` beside this file, one judge per exercise:

    @exercise("4.2", solution=lambda run: run["calls"] // 4, mistake=lambda run: run["calls"])
    def all_reduces_per_update(answer, run):
        n = whole_number(answer)
        if n == run["calls"] // 4:
            return right("Yes: ...", "对：……")
        return wrong("Not quite: ...", "还不对：……")

`run` is what the lesson passes from the learner's own run (check("4.2", answer, calls=calls)), so an
answer is judged against the numbers on this machine. `solution` and `mistake` say what a right and a
typical wrong answer are for that run: with DDPLAB_CHECK_EXERCISES=1 in the kernel's environment (the
tests set it) an unanswered check also makes sure its judge accepts the one and rejects the other, on
the real run, so a judge that cannot tell them apart fails the lesson.
"""
import importlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from .. import say


@dataclass(frozen=True)
class Verdict:
    ok: bool
    en: str
    zh: str


def right(en, zh):
    return Verdict(True, en, zh)


def wrong(en, zh):
    return Verdict(False, en, zh)


class Unreadable(ValueError):
    """The answer is not of the kind asked for (the message says which kind, in both languages)."""

    def __init__(self, en, zh):
        super().__init__(en)
        self.en, self.zh = en, zh


@dataclass(frozen=True)
class Exercise:
    key: str
    judge: Callable
    solution: Callable
    mistake: Callable


EXERCISES: dict[str, Exercise] = {}


def exercise(key, solution, mistake):
    """Register the decorated judge(answer, run) -> Verdict as exercise `key` ("lesson.number")."""
    def register(judge):
        EXERCISES[key] = Exercise(key, judge, solution, mistake)
        return judge
    return register


def find(key):
    """The exercise "N.k", loading lesson N's judges."""
    lesson, _, number = str(key).partition(".")
    if not (lesson.isdigit() and number.isdigit()):
        raise KeyError(f"{key!r}: exercises are named like '4.2' (lesson 4, exercise 2)")
    if key in EXERCISES:
        return EXERCISES[key]
    try:
        importlib.import_module(f"{__name__}.lesson{int(lesson):02d}")
    except ModuleNotFoundError:
        raise KeyError(f"lesson {int(lesson)} has no exercises to check") from None
    if key not in EXERCISES:
        raise KeyError(f"lesson {int(lesson)} has no exercise {key}")
    return EXERCISES[key]


def lesson_exercises():
    """Each lesson's exercises, every lesson's judges loaded: {4: ["4.1", "4.2", ...], ...}."""
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("lesson"):
            importlib.import_module(f"{__name__}.{module.name}")
    found = {}
    for key in EXERCISES:
        found.setdefault(int(key.split(".")[0]), []).append(key)
    return {lesson: sorted(keys, key=lambda k: int(k.split(".")[1])) for lesson, keys in sorted(found.items())}


def self_check(ex, run):
    """The judge accepts the solution and rejects the typical mistake, on this run."""
    good, bad = ex.solution(run), ex.mistake(run)
    if not ex.judge(good, run).ok:
        raise AssertionError(f"exercise {ex.key}: its judge rejects its own solution {good!r}")
    if ex.judge(bad, run).ok:
        raise AssertionError(f"exercise {ex.key}: its judge accepts the mistake {bad!r}")


def check(key, answer=..., **run):
    """Judge `answer` to exercise `key` against this run's numbers (`run`), print the verdict and why,
    and return True or False (None while unanswered)."""
    ex = find(key)
    if answer is ... or answer is None:
        if os.environ.get("DDPLAB_CHECK_EXERCISES"):
            self_check(ex, run)
        print(say(f"Exercise {key}: write your answer in place of ... and run this cell again.",
                  f"练习 {key}：把 ... 换成你的答案，再运行这个单元格。"))
        return None
    try:
        verdict = ex.judge(answer, run)
    except Unreadable as exc:
        print(say(f"Exercise {key}: {exc.en}", f"练习 {key}：{exc.zh}"))
        return False
    mark = ("Right", "正确") if verdict.ok else ("Not yet", "还不对")
    print(say(f"Exercise {key} · {mark[0]}. {verdict.en}", f"练习 {key} · {mark[1]}。{verdict.zh}"))
    from ..prediction import recorded_check

    recorded_check(key, answer, verdict.ok, say(verdict.en, verdict.zh))  # the learner's record (and class's)
    return verdict.ok


# ------------------------------------------------------------------ reading answers
def number(answer):
    """A finite number, or Unreadable."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) and not hasattr(answer, "__float__"):
        raise Unreadable("give a number, like 0.25.", "请给出一个数，例如 0.25。")
    value = float(answer)
    if not math.isfinite(value):
        raise Unreadable("give a finite number.", "请给出一个有限的数。")
    return value


def whole_number(answer):
    """An integer (3, or 3.0), or Unreadable."""
    value = number(answer)
    if value != int(value):
        raise Unreadable("give a whole number, like 3.", "请给出一个整数，例如 3。")
    return int(value)


def near(answer, value, rel=0.1, absolute=0.0):
    """Whether the number `answer` is within rel (a fraction) or absolute of value."""
    return abs(number(answer) - value) <= max(rel * abs(value), absolute)


def letter(answer, options):
    """One of the options ("a", "b", ...), case and spaces ignored, or Unreadable."""
    text = str(answer).strip().lower().strip("()")
    if text not in options:
        listed = ", ".join(repr(o) for o in options)
        raise Unreadable(f"answer with one of {listed}.", f"请用 {listed} 之一作答。")
    return text


UNITS = {"bytes": 1, "KB": 1e3, "KiB": 2**10, "MB": 1e6, "MiB": 2**20, "GB": 1e9, "GiB": 2**30}


def unit_slip(answer, value, unit):
    """The unit the answer is in when it is `value` (given in `unit`, a key of UNITS) written in another
    unit of UNITS (MB for MiB, bytes for MiB, ...), else None. Call it once the right answer is ruled out."""
    given, base = number(answer), value * UNITS[unit]
    for other, size in UNITS.items():
        if other != unit and base and abs(given - base / size) <= 0.005 * abs(base / size):
            return other
    return None


def wrong_unit(found, unit):
    """The verdict for an answer that is right in another unit: say so, not "count again"."""
    return wrong(f"the number is right in {found}, but the question asks for {unit}: check the unit.",
                 f"这个数按 {found} 算是对的，但题目问的是 {unit}：请检查单位。")
