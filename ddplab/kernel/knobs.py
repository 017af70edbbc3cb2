"""lab.knobs: values rank code reads with ddplab.knob(name, default), set from the notebook even
while a cell runs (a slider, %ddp_knob NAME VALUE): they reach the ranks as signed telemetry
commands within a tick, and ranks that join later (restarted) get them when they join."""
import logging
from typing import Any

from ..shared.errors import BadRequest

log = logging.getLogger("ddplab")
Knob = bool | int | float | str | None  # what a knob may hold


class Knobs:
    def __init__(self, lab: Any) -> None:
        self.lab = lab  # the Lab that made this (lab.py imports this module, so the import contracts keep the type out)
        self.values: dict[str, Knob] = {}  # name -> value: what set() told the ranks

    def set(self, name: str, value: "Knob", wait: bool = True) -> list[int]:
        """Set a knob on every rank, now. Values: numbers, strings, True/False, None. With wait, once
        each rank has it (a slider does not wait): the ranks that have not said so in time."""
        if not isinstance(name, str) or not name.isidentifier():
            raise BadRequest(f"a knob's name is a word such as 'period', got {name!r}")
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise BadRequest(f"knob {name}: a number, a string, True/False or None, got {type(value).__name__}")
        lab = self.lab
        lab.check_running()
        self.values[name] = value
        lab.group.knobs = self.values
        waiting = lab.command("knob", wait, name=name, value=value)
        if waiting:
            log.info("knob %s: ranks %s have not said they took it (they get it when they join again)", name, waiting)
        return waiting
