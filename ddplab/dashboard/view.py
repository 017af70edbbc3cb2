"""The view protocol: what shows a pool live (the widget dashboard, text views, or nothing).

The Lab calls a view with its `Live` (run_state: rank states and facts; metrics: live series):

    begin(live)    a cell starts on live.run_state.running
    update(live)   while it runs, at most every DDPLab.frame seconds, and only when something
                   changed; between cells on start-up progress, restarts and drills; and from
                   the Lab's watcher thread (a rank lost while idle) only if `threadsafe`
    end(live)      the cell ended (its result is about to be printed)
    show()         display the view where the user is (%ddp_start, %ddp_status); views that print
                   as they go have nothing to display
    shows_progress True if the view itself shows start-up progress (the magics then print none)
    background     set by the Lab while a cell runs in the background: update only, display nothing
                   (the notebook's other cells are running)
    main_thread_only  True where the front end draws only what the cell's own thread sends (Colab):
                   the view ignores calls from other threads, and %ddp_wait draws a background
                   cell's frames (told_background: the notebook has said so once)

A view that raises is reported once on stderr and left alone for the rest of the cell: it never
breaks a cell. No widget imports here: the Lab imports this module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..shared.metrics import LiveMetrics
    from ..shared.state import RunState


class Live(Protocol):
    """What a view is given: the Lab's `Live` (kernel/telemetry.py, above this module), as far as views read it."""

    @property
    def run_state(self) -> RunState: ...

    @property
    def metrics(self) -> LiveMetrics: ...

    @property
    def spans(self) -> object: ...  # the running cell's timeline.CellSpans, or None


class View:
    """A view that shows nothing: the default for scripts (and the base of every view)."""

    threadsafe: bool = False
    shows_progress: bool = False
    background: bool = False
    main_thread_only: bool = False
    told_background: bool = False

    def begin(self, live: Live) -> None:
        pass

    def update(self, live: Live) -> None:
        pass

    def end(self, live: Live) -> None:
        pass

    def show(self) -> None:
        pass

