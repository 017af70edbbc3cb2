"""lab.records: what the ranks recorded. The history of every ddplab.log point, pulled from the ranks
exactly (the live view may skip points), and the timeline of each cell (spans of forward, backward,
optimizer, data and comm on one clock, timeline.py), which arrives with the telemetry as the cell runs."""
from typing import Any

from ..shared.errors import BadRequest
from ..shared.metrics import History
from ..shared.timeline import Timeline
from ..shared.wire import TIMED_EVERY


class Records:
    def __init__(self, lab: Any) -> None:
        self.lab = lab  # the Lab that made this (lab.py imports this module, so the import contracts keep the type out)

    def history(self) -> History:
        """Every point every rank logged with ddplab.log, exactly (pulled from the ranks)."""
        from ..rank import call

        lab = self.lab
        ranks = lab.check_ranks(None)
        points = lab.answers(lab.view_on(ranks).apply_async(call, "history"), ranks, "gathering the history")
        return History.from_ranks(dict(zip(ranks, points)), lab.live.cell_of)

    def timeline(self, cell: int | None = None) -> Timeline:
        """The Timeline of the last %%ddp cell (or of notebook cell `cell`)."""
        lab = self.lab
        timelines = lab.live.timelines
        if not timelines:
            raise BadRequest("no %%ddp cell has run yet: nothing on the timeline")
        if cell is None:
            cell = max(timelines)
        if cell not in timelines:
            raise BadRequest(f"no timeline for cell {cell}: the %%ddp cells with one are "
                             f"{', '.join(map(str, sorted(timelines)))}")
        return timelines[cell].timeline(lab.config.lang)

    @property
    def every(self) -> int:
        """A cell's steps after its first 20: every `every`-th is timed."""
        return self.lab.group.timeline_every if self.lab.group is not None else TIMED_EVERY

    def record(self, on: bool, every: int | None = None) -> list[int]:
        """Record the timeline in later cells (on), or not, timing a cell's steps after its first 20
        every `every`-th (1: all; None: as before): once every rank has been told (ranks that join later
        are told when they join); the ranks that have not said so in time."""
        lab = self.lab
        lab.check_running()
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise BadRequest(f"every must be a whole number of steps, 1 or more (1: time every step), not {every!r}")
        group = lab.group
        group.timeline, group.timeline_every = bool(on), every or group.timeline_every
        return lab.command("timeline", on=bool(on), every=group.timeline_every)
