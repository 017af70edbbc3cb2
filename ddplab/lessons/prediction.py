"""Predict, then reveal: a learner commits a prediction before the cell that measures it, and that cell
shows the prediction beside what was measured (Crouch et al. 2004: predicting first is what makes a
demonstration teach).

    predict("6.bubble", 0.4)          # the learner's cell, before the measurement
    reveal("6.bubble", measured)      # in the cell that measures: both, and how far apart

Both are kept in the learner's record (ddplab.classroom: their home folder, and their class's folder if
they joined one). A prediction cannot be changed once revealed: predicting again is a second attempt,
kept beside the first. Unanswered (`...`), the measuring cell still runs and says that nothing was
predicted.
"""
import logging
import math
from dataclasses import dataclass

from . import say

log = logging.getLogger("ddplab")


@dataclass
class Prediction:
    answer: object
    attempt: int
    revealed: bool = False


_committed: dict[str, Prediction] = {}  # this kernel's latest prediction per key


def _note(kind, key, answer=None, ok=None, measured=None, reason=None):
    """Keep the event in the learner's record; a record that cannot be written is said once, never fatal."""
    from ..kernel.classroom import join_configured, note

    join_configured()  # (c.DDPLab.class_folder: joined before the first record)
    try:
        warning = note(kind, key, answer, ok, measured=measured, reason=reason)
    except ValueError as exc:  # (an event that is not one: the key or the answer; the lesson goes on)
        log.warning("not recorded: %s", exc)
        return None
    if warning and not _warned:
        _warned.append(warning)
        print(say(f"(ddplab: {warning})", f"（ddplab：{warning}）"))
    return warning


_warned: list[str] = []  # the record could not be written: said once a kernel


def _attempts(key):
    from ..kernel.classroom import ClassroomError, LearnerRecord

    try:
        return LearnerRecord().attempts("prediction", key)
    except (OSError, ClassroomError):
        return _committed[key].attempt if key in _committed else 0


def _readable(answer):
    """A prediction is a number (or a letter, for a choice)."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, (int, float)) or hasattr(answer, "__float__"):
        value = float(answer)
        return value if math.isfinite(value) else None
    if isinstance(answer, str) and 0 < len(answer.strip()) <= 20:
        return answer.strip()
    return None


def predict(key, answer=...):
    """Commit your prediction for measurement `key` before the cell that measures it."""
    if answer is ... or answer is None:
        print(say(f"Prediction {key}: write your prediction in place of ... and run this cell, before the cell "
                  "that measures it (or go on: that cell will say nothing was predicted).",
                  f"预测 {key}：把 ... 换成你的预测，在测量它的单元格之前运行这个单元格"
                  "（也可以直接往下：那个单元格会说明没有预测）。"))
        return None
    value = _readable(answer)
    if value is None:
        print(say(f"Prediction {key}: give a number (like 0.25), or a letter for a choice.",
                  f"预测 {key}：请给出一个数（例如 0.25），选择题给出一个字母。"))
        return None
    before = _committed.get(key)
    _note("prediction", key, value)
    attempt = _attempts(key) or ((before.attempt if before else 0) + 1)
    _committed[key] = Prediction(value, attempt)
    if before is not None and before.revealed:
        print(say(f"Prediction {key}: {_show(value)} committed as attempt {attempt}; your earlier one, "
                  f"{_show(before.answer)}, stays beside it.",
                  f"预测 {key}：{_show(value)} 已作为第 {attempt} 次尝试提交；你先前的 {_show(before.answer)} 仍保留在旁边。"))
    else:
        print(say(f"Prediction {key}: {_show(value)}, committed. The cell that measures it shows it beside the "
                  "measurement.", f"预测 {key}：{_show(value)}，已提交。测量它的单元格会把它和测量值放在一起。"))
    return value


def _show(value, unit=""):
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip()


def reveal(key, measured, unit="", right=None):
    """In the cell that measures `key`: the committed prediction beside `measured`, and how far apart.
    `right`: for a choice, the letter that the measurement makes right (measured is then that letter).
    Returns {"predicted", "measured", "ratio"} (ratio: predicted / measured, for numbers)."""
    committed = _committed.get(key)
    value = measured if isinstance(measured, str) else float(measured)
    shown = _show(value, unit)
    if committed is None:
        print(say(f"Prediction {key}: none was committed (predict(\"{key}\", ...) above commits one). Measured: "
                  f"{shown}.", f"预测 {key}：没有提交预测（上面的 predict(\"{key}\", ...) 用来提交）。测量值：{shown}。"))
        return {"predicted": None, "measured": value, "ratio": None}
    committed.revealed = True
    _note("reveal", key, measured=value if isinstance(value, float) and math.isfinite(value) else None)
    guess = committed.answer
    if isinstance(guess, float) and isinstance(value, float):
        ratio = guess / value if value else math.inf
        if value and abs(ratio - 1) < 0.1:
            how = say("within 10 %: well predicted.", "相差不到 10%：预测得好。")
        elif guess and value and ratio > 0:
            how = say(f"your prediction is {ratio:.2g}x what was measured.", f"你的预测是测量值的 {ratio:.2g} 倍。")
        else:  # (a zero, or a sign apart: no ratio says it)
            apart = _show(abs(guess - value), unit)
            how = say(f"{apart} apart.", f"相差 {apart}。")
        print(say(f"Prediction {key}: you predicted {_show(guess, unit)}; measured {shown}: {how}",
                  f"预测 {key}：你预测 {_show(guess, unit)}；测量值 {shown}：{how}"))
        return {"predicted": guess, "measured": value, "ratio": ratio}
    same = str(guess).strip().lower() == str(right if right is not None else value).strip().lower()
    print(say(f"Prediction {key}: you predicted {guess}; the measurement says {shown}" + (": right." if same else "."),
              f"预测 {key}：你预测 {guess}；测量结果是 {shown}" + ("：正确。" if same else "。")))
    return {"predicted": guess, "measured": value, "ratio": None}


def recorded_check(key, answer, ok, reason):
    """exercises.check's answer, kept in the learner's record (the answer only if it is a number or a letter)."""
    _note("check", key, answer, ok, reason=reason[:500] if reason else None)
