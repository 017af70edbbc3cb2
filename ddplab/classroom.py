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
from .lessons.exercises import lesson_exercises

__all__ = ["COLUMNS", "KINDS", "Class", "ClassMembership", "ClassroomError", "LearnerRecord", "Skipped",
           "create_class", "join", "leave", "lesson_exercises", "make_event", "membership", "note", "parse_event",
           "record", "write_report"]


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
