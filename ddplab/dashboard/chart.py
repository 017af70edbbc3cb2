"""A live line chart drawn in the browser (anywidget): the kernel sends, each frame, only the points
added since the last (a few dozen numbers), where it used to format and send the whole plot as SVG
(tens of kilobytes, 4 times a second, on a core the ranks train on). chart.js draws it with
plots.py's axes, ticks and lines. The whole picture is synced as the widget's state once per cell
(its last frame: a reloaded page, a saved notebook), and a view made mid-cell asks for the points so far.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..shared.metrics import Series

Lines = Mapping[Any, tuple[Series, str, float]]  # key (a rank, "total") -> (series, colour, line width)


class LiveChart(anywidget.AnyWidget):
    _esm = Path(__file__).with_name("chart.js")
    width = traitlets.Int(396).tag(sync=True)
    height = traitlets.Int(207).tag(sync=True)
    min_x = traitlets.Float(1.0).tag(sync=True)  # the x axis starts this wide, so short runs never change it
    headroom = traitlets.Float(1.15).tag(sync=True)  # room above the highest point
    y_from_zero = traitlets.Bool(True).tag(sync=True)
    lines = traitlets.Dict().tag(sync=True)  # key -> [colour, width]
    saved = traitlets.Dict().tag(sync=True)  # key -> [xs, ys]: the whole picture, at a cell's last frame

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sent: dict[str, tuple[int, int]] = {}  # key -> (points sent, the series' generation then)
        self._series: Lines = {}
        self.frames = 0  # messages with new points sent
        self.on_msg(self._asked)

    def push(self, series: Lines, final: bool = False) -> bool:
        """Send the points each series gained since the last push (all of a series that was thinned
        out); at a cell's last frame, also the whole picture as state. True if anything was sent."""
        series = self._series = {str(key): line for key, line in series.items()}  # (JSON's keys are strings)
        styles = {key: [color, width] for key, (_, color, width) in series.items()}
        if styles != self.lines:
            self.lines = styles
        points: dict[str, list[Any]] = {}
        for key, (s, _, _) in series.items():
            done, generation = self._sent.get(key, (0, s.generation))
            start = done if generation == s.generation and done <= len(s) else 0
            if start < len(s):
                points[key] = [start, s.x[start:], s.y[start:]]
            self._sent[key] = (len(s), s.generation)
        if points:
            self.send({"points": points})
            self.frames += 1
        if final:
            self.saved = {key: [list(s.x), list(s.y)] for key, (s, _, _) in series.items()}
        return bool(points)

    def reset(self) -> None:
        """A new cell: empty axes (its first points start the lines again)."""
        self._sent, self._series = {}, {}
        self.send({"reset": True})

    def _asked(self, _widget: object, content: Any, _buffers: object) -> None:
        if isinstance(content, dict) and content.get("hello"):  # a new view: every point so far
            self.send({"reset": True, "points": {key: [0, s.x, s.y] for key, (s, _, _) in self._series.items()}})
