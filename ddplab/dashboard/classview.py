"""The teacher's view of a class (%ddp_class DIR): per lesson who started and finished, per exercise how
many tried and got it right and the commonest wrong answers, per prediction the class's predictions as a
histogram beside what was measured. One HTML output, made for a projector (large type), updated in place
(its display id) every few seconds while it is shown: every front end updates an output so."""
import html
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..shared import words

STYLE = ("<style>.ddplab-class{font-size:22px;line-height:1.35;font-family:sans-serif}"
         ".ddplab-class table{border-collapse:collapse;margin:0.4em 0 1em}"
         ".ddplab-class td,.ddplab-class th{padding:0.15em 0.8em;border-bottom:1px solid #ccc;text-align:left}"
         ".ddplab-class h3{margin:0.6em 0 0.2em;font-size:1.2em}.ddplab-class .small{font-size:0.75em;color:#666}"
         "</style>")


def _e(value: object) -> str:
    return html.escape(str(value))


def histogram(predicted: Sequence[float | None], measured: Sequence[float | None], width: int = 420,
              height: int = 120, bins: int = 12) -> str:
    """An inline SVG: the predictions in bins, the measured median as a red line (values on one axis)."""
    guesses = [p for p in predicted if isinstance(p, (int, float)) and math.isfinite(p)]
    seen = [m for m in measured if isinstance(m, (int, float)) and math.isfinite(m)]
    if not guesses and not seen:
        return ""
    values = guesses + seen
    low, high = min(values), max(values)
    if high == low:
        low, high = low - 0.5 * (abs(low) or 1), high + 0.5 * (abs(high) or 1)
    step = (high - low) / bins
    counts = [0] * bins
    for g in guesses:
        counts[min(bins - 1, int((g - low) / step))] += 1
    top = max(counts) or 1
    bar = width / bins
    parts = [f'<svg width="{width}" height="{height + 24}" role="img">']
    for i, c in enumerate(counts):
        h = (height - 4) * c / top
        parts.append(f'<rect x="{i * bar + 1:.1f}" y="{height - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                     f'fill="#4a7bb7"><title>{c}</title></rect>')
    if seen:
        mid = sorted(seen)[len(seen) // 2]
        x = (mid - low) / (high - low) * width
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height}" stroke="#d62728" stroke-width="3"/>')
    parts.append(f'<text x="0" y="{height + 18}" font-size="14">{low:.3g}</text>'
                 f'<text x="{width}" y="{height + 18}" font-size="14" text-anchor="end">{high:.3g}</text></svg>')
    return "".join(parts)


def _median(values: Sequence[float | None]) -> str:
    seen = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    return f"{seen[len(seen) // 2]:.4g}" if seen else "-"


def class_html(folder: str, summary: dict[str, Any], lang: str = "en", every: float = 0.0) -> str:
    """The view of Class.summary() as HTML, in `lang` (the zh catalogue)."""
    def say(text: str, **values: Any) -> str:  # (named so: the catalogue's test finds the texts said)
        return _e(words.say(lang, text, **values))

    def names(learners: Sequence[str]) -> str:  # who, as far as a projector line holds them
        shown = ", ".join(learners[:12]) + (", ..." if len(learners) > 12 else "")
        return f'{len(learners)} <span class="small">{_e(shown)}</span>' if learners else "0"

    skipped = summary.get("skipped") or {}
    head = [f'<h3>{say("Class {dir}", dir=folder)}</h3><div>{say("{n} learners", n=summary["learners"])}']
    if skipped:
        what = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
        head.append(f' · <span style="color:#b35900">{say("skipped: {what}", what=what)}</span>')
    if every:
        head.append(f' <span class="small">({say("updated every {s:g} s", s=every)})</span>')
    head.append("</div>")
    body: list[str] = []
    lessons = {k: v for k, v in summary["lessons"].items() if v["started"]}
    if lessons:
        rows = "".join(f"<tr><td>{lesson}</td><td>{names(v['started'])}</td>"
                       f"<td>{'-' if v['finished'] is None else names(v['finished'])}</td></tr>"
                       for lesson, v in sorted(lessons.items()))
        body.append(f"<table><tr><th>{say('lesson')}</th><th>{say('started')}</th><th>{say('finished')}</th></tr>{rows}</table>")
    if summary["exercises"]:
        rows = "".join(f"<tr><td>{_e(key)}</td><td>{v['tried']}</td><td>{v['right']}</td><td>"
                       + _e(", ".join(f"{a} ({n})" for a, n in v["wrong"])) + "</td></tr>"
                       for key, v in summary["exercises"].items())
        body.append(f"<table><tr><th>{say('exercise')}</th><th>{say('tried')}</th><th>{say('class view|right')}</th>"
                    f"<th>{say('commonest wrong answers')}</th></tr>{rows}</table>")
    for key, v in summary["predictions"].items():
        n = sum(p is not None for p in v["predicted"])
        body.append(f"<div><b>{say('prediction')} {_e(key)}</b> · {say('predicted')}: {n} · {say('measured (median)')}: "
                    f"{_median(v['measured'])}</div>" + (histogram(v["predicted"], v["measured"]) or say("no prediction")))
    if not body:
        body.append(f"<p>{say('nothing recorded yet: learners appear here as they predict and check answers')}</p>")
    return f'{STYLE}<div class="ddplab-class">{"".join(head)}{"".join(body)}</div>'


class ClassView:
    """The live view: shown once, then updated in place every `every` seconds from a daemon thread until
    stop() (or the kernel ends). `summarize()` reads the class (Class.refresh + summary)."""

    def __init__(self, folder: str, summarize: Callable[[], dict[str, Any]], lang: str = "en",
                 every: float = 3.0) -> None:
        self.folder, self.summarize, self.lang, self.every = folder, summarize, lang, every
        self.stopped = threading.Event()
        self.handle: Any = None
        self.last = ""

    def html(self) -> str:
        return class_html(self.folder, self.summarize(), self.lang, self.every)

    def show(self) -> None:
        from IPython.display import HTML, display

        self.last = self.html()
        self.handle = display(HTML(self.last), display_id=True)
        if self.every > 0:
            threading.Thread(target=self._run, name="ddplab-class-view", daemon=True).start()

    def _run(self) -> None:
        import logging

        from IPython.display import HTML

        while not self.stopped.wait(self.every):
            try:
                page = self.html()
            except Exception:  # noqa: BLE001 - the class folder went away or turned unreadable: said, view kept
                logging.getLogger("ddplab").warning("the class view could not read the class", exc_info=True)
                continue
            if page != self.last:
                self.last = page
                self.handle.update(HTML(page))

    def stop(self) -> None:
        self.stopped.set()
