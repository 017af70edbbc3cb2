"""The classroom's magics: a learner joins or leaves a class (%ddp_class join DIR --name NAME, %ddp_class
leave), a teacher watches one (%ddp_class DIR), a learner writes a report to hand in (%ddp_report DIR).
The records themselves are kernel/classroom.py's; here, beside the lessons, a class's view knows their exercises."""
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..kernel import classroom
from ..kernel.magics import _parse
from ..shared.config import tunables


@magics_class
class DDPClassMagics(Magics):
    """%ddp_class, %ddp_report."""

    views: list[Any] = []  # the teacher's views shown in this kernel (stopped when another is shown)

    @magic_arguments()
    @argument("what", nargs="+", metavar="join DIR | leave | DIR",
              help="join DIR: add your predictions and checked answers to the class whose folder is DIR; leave: "
                   "stop; DIR (a teacher): show the class live")
    @argument("--name", default=None, help="the name your teacher sees (join; default: your account's)")
    @argument("--lang", default=None, choices=("en", "zh"), help="the view's language (default: DDPLab.lang)")
    @argument("--every", type=float, default=3.0, help="seconds between the view's updates (0: once)")
    @line_magic
    def ddp_class(self, line: str) -> None:
        """Join or leave a class (a learner), or show one live (its teacher): %ddp_class join DIR --name Ann"""
        args = _parse(self.ddp_class, line)
        verb, rest = args.what[0], args.what[1:]
        try:
            if verb == "join":
                if len(rest) != 1:
                    raise UsageError("%ddp_class join DIR --name NAME: one folder, the one your teacher gave")
                joined = classroom.join(rest[0], args.name or classroom.default_name())
                print(f"ddplab: you joined the class in {joined.dir} as {joined.name}: your predictions and checked "
                      "answers (the exercise, your answer if it is a number or a letter, right or wrong, when) are "
                      "added to it from now on; %ddp_class leave stops that")
            elif verb == "leave":
                if rest:
                    raise UsageError("%ddp_class leave takes nothing more")
                was = classroom.membership()
                classroom.forget_membership()
                print("ddplab: " + (f"you left the class in {was.dir}: nothing more is added to it (what was, stays)"
                                    if was else "you are in no class"))
            elif rest:
                raise UsageError("%ddp_class DIR (a teacher), %ddp_class join DIR --name NAME or %ddp_class leave")
            else:
                self._show(verb, args.lang or tunables().lang or "en", args.every)
        except classroom.ClassroomError as exc:
            raise UsageError(str(exc)) from None

    def _show(self, folder: str, lang: str, every: float) -> None:
        from ..dashboard.classview import ClassView
        from .exercises import lesson_exercises

        if every < 0:
            raise UsageError(f"--every {every:g}: give 0 (once) or a number of seconds")
        klass = classroom.Class(folder, exercises=lesson_exercises())

        def summarize() -> dict[str, Any]:
            klass.refresh()
            return klass.summary()

        for view in self.views:
            view.stop()
        view = ClassView(folder, summarize, lang, every)
        self.views[:] = [view]
        view.show()

    @magic_arguments()
    @argument("out", nargs="?", default="ddplab-report", help="the folder to write report.md, report.json and "
                                                                "results.json (Gradescope's) into")
    @argument("--lang", default=None, choices=("en", "zh"), help="the report's language (default: DDPLab.lang)")
    @line_magic
    def ddp_report(self, line: str) -> None:
        """Write your record (predictions and checked answers) as a report to hand in: %ddp_report my-report"""
        args = _parse(self.ddp_report, line)
        try:
            folder = classroom.write_report(args.out, lang=args.lang or tunables().lang or "en")
        except classroom.ClassroomError as exc:
            raise UsageError(str(exc)) from None
        print(f"ddplab: wrote {folder}/report.md, report.json and results.json (Gradescope's format)")
