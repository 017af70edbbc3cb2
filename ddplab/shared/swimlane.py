"""The timeline drawn: one swimlane per rank over the last steps (forward, backward, optimizer and data on
its upper row; each collective on its lower row, drawn where it really ran, so DDP's bucket all-reduces
show their overlap with backward, and the part spent waiting for the last rank shaded apart), and a
per-rank breakdown of a step. Plain SVG and HTML strings: browsers draw Chinese labels, and the
dashboard, a Timeline in a notebook and the docs show the same picture.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .words import say

if TYPE_CHECKING:
    import numpy.typing as npt

    Array = npt.NDArray[Any]  # timeline.SPAN rows


class Drawn(Protocol):
    """What is drawn of a timeline.Timeline (this module is below it: it cannot import it)."""

    rows: Array
    ranks: list[int]
    lang: str
    units: list[str]
    groups: list[tuple[str, tuple[int, ...]]]
    _memory: Mapping[int, Mapping[str, int]]

    def verdict(self) -> str: ...

    def breakdown(self, last: int | None = None) -> dict[int, dict[str, float]]: ...

PHASES = ("forward", "backward", "optimizer", "data", "comm")  # the codes recorder.py sends
FORWARD, BACKWARD, OPTIMIZER, DATA, COMM = range(len(PHASES))

TEXTS = ("timeline|forward", "timeline|backward", "timeline|optimizer", "timeline|data", "timeline|comm", "timeline|wait",
         "timeline|rank", "timeline|compute", "timeline|step", "timeline|rss", "timeline|params", "timeline|grads",
         "timeline|optimizer state", "timeline|buckets")  # the words drawn (said through words.say)
COLORS = {FORWARD: "#4c78a8", BACKWARD: "#f58518", OPTIMIZER: "#54a24b", DATA: "#9d9d9d", COMM: "#b279a2"}
WAIT = "#d62728"


def window(rows: Array, steps: int) -> Array:
    """The rows of the last `steps` steps that every rank has reached."""
    if not len(rows):
        return rows
    step = rows["step"].astype(np.int64)  # (unsigned in the rows: last - steps must not wrap)
    last = min(int(step[rows["rank"] == r].max()) for r in np.unique(rows["rank"]))
    return rows[(step > last - steps) & (step <= last)]


def svg(rows: Array, ranks: Sequence[int], lang: str = "en", steps: int = 3, width: int = 640, lane: int = 34,
        units: Sequence[str] = (), groups: Sequence[tuple[str, Sequence[int]]] = ()) -> str:
    """The swimlanes of the last `steps` steps (rows: timeline.SPAN rows of one cell; units: the modules its
    collectives serve, groups: (label, ranks) of the groups they ran on, named in each one's tooltip)."""
    shown = window(rows, steps)
    left, top = 62, 18
    height = top + lane * len(ranks) + 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="ddplab-swimlane" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">']
    if not len(shown):
        empty = say(lang, "no spans yet: a training step (forward, backward, a collective) draws here")
        parts.append(f'<text x="{left}" y="{top + 14}" fill="#777">{escape(empty)}</text></svg>')
        return "".join(parts)
    t0, t1 = float(shown["start"].min()), float(shown["end"].max())
    scale = (width - left - 10) / max(t1 - t0, 1e-6)

    def x(t: float) -> float:
        return left + (float(t) - t0) * scale

    for i, r in enumerate(ranks):
        y = top + i * lane
        parts.append(f'<text x="4" y="{y + lane / 2 + 4:.0f}">rank {r}</text>'
                     f'<line x1="{left}" x2="{width - 10}" y1="{y + lane - 2}" y2="{y + lane - 2}" stroke="#eee"/>')
        mine = shown[shown["rank"] == r]
        for row in mine:
            phase = int(row["phase"])
            x0, x1 = x(row["start"]), max(x(row["end"]), x(row["start"]) + 0.8)
            y0, h = (y + 2, lane / 2 - 3) if phase != COMM else (y + lane / 2, lane / 2 - 4)
            unit = -2 - int(row["bucket"]) if phase == COMM and row["bucket"] <= -2 else -1
            served = f" [{units[unit] or 'root'}]" if 0 <= unit < len(units) else ""  # (the module it serves)
            if phase == COMM and 0 <= row["group"] < len(groups):
                served += f" @{groups[row['group']][0]}"  # (the group it ran on)
            title = escape(f"{say(lang, 'timeline|' + PHASES[phase])}{served} {1000 * (row['end'] - row['start']):.2f} ms"
                           + (f", {say(lang, 'timeline|wait')} {1000 * row['wait']:.2f} ms" if phase == COMM else ""))
            parts.append(f'<rect class="span-{PHASES[phase]}" x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
                         f'height="{h:.1f}" fill="{COLORS[phase]}"><title>{title}</title></rect>')
            if phase == COMM and row["wait"] > 0:
                parts.append(f'<rect class="span-wait" x="{x0:.1f}" y="{y0:.1f}" width="{row["wait"] * scale:.1f}" '
                             f'height="{h:.1f}" fill="{WAIT}" fill-opacity="0.45"/>')
    axis = top + lane * len(ranks) + 12
    parts.append(f'<text x="{left}" y="{axis}" fill="#555">{1000 * t0:.0f} ms</text>'
                 f'<text x="{width - 10}" y="{axis}" text-anchor="end" fill="#555">{1000 * t1:.0f} ms</text>')
    legend = [(COLORS[p], say(lang, "timeline|" + PHASES[p])) for p in (FORWARD, BACKWARD, OPTIMIZER, DATA, COMM)]
    legend.append((WAIT, say(lang, "timeline|wait")))
    lx = left + 80
    for color, label in legend:
        parts.append(f'<rect x="{lx}" y="{axis - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{lx + 13}" y="{axis}">{escape(label)}</text>')
        lx += 16 + 7 * len(label) + (14 if lang == "zh" else 0)
    parts.append("</svg>")
    return "".join(parts)


def breakdown_html(parts: Mapping[int, Mapping[str, float]], lang: str = "en") -> str:
    """A table: per rank, ms per step of compute, communication, waiting and data."""
    head = "".join(f"<th>{escape(say(lang, 'timeline|' + h))}</th>" for h in ("rank", "compute", "comm", "wait", "data",
                                                                           "step"))
    body = "".join(f"<tr><td>{r}</td>" + "".join(f"<td>{1000 * b[k]:.1f}</td>" for k in ("compute", "comm", "wait",
                                                                                          "data", "step")) + "</tr>"
                   for r, b in parts.items())
    caption = escape(say(lang, "milliseconds per step"))
    return f'<table class="ddplab-breakdown"><caption>{caption}</caption><tr>{head}</tr>{body}</table>'


def lanes(timeline: Drawn, steps: int) -> str:
    return svg(timeline.rows, timeline.ranks, timeline.lang, steps, units=timeline.units, groups=timeline.groups)


def live(timeline: Drawn, steps: int = 3) -> str:
    """What the dashboard shows while a cell runs: the last steps' swimlanes, their breakdown and the
    verdict (timeline: the tail of the cell's spans)."""
    lang = timeline.lang
    return (f'<div class="ddplab-timeline">{lanes(timeline, steps)}'
            f"<p>{escape(timeline.verdict())}</p>{breakdown_html(timeline.breakdown(last=steps * 2), lang)}</div>")


def picture(timeline: Drawn, steps: int = 4) -> str:
    """A Timeline in full: the swimlanes, the breakdown, the verdict and each rank's memory."""
    lang = timeline.lang
    memory = ""
    if timeline._memory:
        head = "".join(f"<th>{escape(say(lang, 'timeline|' + k))}</th>" for k in ("rank", "rss", "params", "grads",
                                                                               "optimizer state", "buckets"))
        rows = "".join(f"<tr><td>{r}</td>" + "".join(f"<td>{(m.get(k) or 0) / 2**20:.1f}</td>" for k in
                                                     ("rss", "params", "grads", "optimizer", "buckets")) + "</tr>"
                       for r, m in sorted(timeline._memory.items()))
        memory = (f'<table class="ddplab-memory"><caption>{escape(say(lang, "memory per rank (MiB)"))}</caption>'
                  f"<tr>{head}</tr>{rows}</table>")
    return (f'<div class="ddplab-timeline">{lanes(timeline, steps)}'
            f"<p>{escape(timeline.verdict())}</p>{breakdown_html(timeline.breakdown(), lang)}{memory}</div>")
