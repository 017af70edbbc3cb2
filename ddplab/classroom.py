"""The classroom: what learners predicted and answered, for the learner (a report to hand in) and for
the teacher (a class folder, read into a table).

    ddplab class create /srv/class/ddp             # the teacher, once (a shell)
    ddplab.classroom.join("/srv/class/ddp", "Ann")  # each learner, once (a notebook)
    ddplab.classroom.Class("/srv/class/ddp").to_pandas()   # the teacher, any time
    ddplab report --out my-report                   # a learner: report.md, report.json, results.json

The data layer is ddplab.kernel.classroom (stdlib only); this module names it for users and knows
the lessons' exercises (for Class.summary's "finished").
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .kernel.classroom import (
    COLUMNS,
    KINDS,
    ClassMembership,
    ClassroomError,
    LearnerRecord,
    Skipped,
    create_class,
    join,
    make_event,
    membership,
    note,
    parse_event,
    record,
    write_report,
)
from .kernel.classroom import Class as _Class

__all__ = ["COLUMNS", "KINDS", "Class", "ClassMembership", "ClassroomError", "LearnerRecord", "Skipped",
           "create_class", "join", "leave", "lesson_exercises", "make_event", "membership", "note", "parse_event",
           "record", "write_report"]


def lesson_exercises() -> dict[int, list[str]]:
    """Each lesson's exercises, from ddplab.lessons.exercises: {4: ["4.1", "4.2", ...], ...}."""
    import importlib
    import pkgutil

    from .lessons import exercises

    for module in pkgutil.iter_modules(exercises.__path__):
        if module.name.startswith("lesson"):
            importlib.import_module(f"{exercises.__name__}.{module.name}")
    found: dict[int, list[str]] = {}
    for key in exercises.EXERCISES:
        found.setdefault(int(key.split(".")[0]), []).append(key)
    return {lesson: sorted(keys, key=lambda k: int(k.split(".")[1])) for lesson, keys in sorted(found.items())}


class Class(_Class):
    """The teacher's reader of a class folder (ddplab.kernel.classroom.Class); summary() knows which
    exercises each lesson has (lesson_exercises()) unless given `exercises`."""

    def summary(self, exercises: Mapping[int, Iterable[str]] | None = None) -> dict[str, Any]:
        if exercises is None and self.exercises is None:
            self.exercises = lesson_exercises()
        return super().summary(exercises)


def leave() -> None:
    """Stop adding to the class joined (its file stays in the class folder, for the teacher)."""
    joined = membership()
    if joined is not None:
        joined.leave()
