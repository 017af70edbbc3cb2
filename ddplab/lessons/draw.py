"""Lesson pictures, drawn in the notebook with matplotlib (no pyplot: nothing shows twice).

Each function returns a Picture: the last expression of a cell shows it as a PNG. Ranks have the
dashboard's colours; texts follow `%ddp_start --lang` when the caller passes say(en, zh) texts.
"""
import functools
import io

from matplotlib import font_manager, rc_context
from matplotlib.figure import Figure

from ..dashboard.html import rank_color

KIND_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "SimHei")


def _fonts():
    """DejaVu Sans for Latin text, then a CJK font (if installed) for Chinese labels."""
    cjk = _cjk_font()
    return {"font.family": ["DejaVu Sans", *([cjk] if cjk else [])],
            "axes.spines.top": False, "axes.spines.right": False}


_found: list[str | None] = []


def _cjk_font():
    """The name of an installed CJK font, or None. Matplotlib's font list is cached from
    before a font package may have been installed: look for the files too, once."""
    if not _found:
        names = {f.name for f in font_manager.fontManager.ttflist}
        if not names.intersection(CJK_FONTS):
            for path in sorted(font_manager.findSystemFonts()):
                if any(key in path for key in ("NotoSansCJK-Regular", "wqy-microhei", "wqy-zenhei", "simhei")):
                    font_manager.fontManager.addfont(path)
                    names = {f.name for f in font_manager.fontManager.ttflist}
                    break
        _found.append(next((n for n in CJK_FONTS if n in names), None))
    return _found[0]


class Picture:
    """A finished figure: shown as PNG by Jupyter; .figure and .axes for a closer look."""

    def __init__(self, figure):
        self.figure, self.axes = figure, figure.axes
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
        self.png = buffer.getvalue()

    def _repr_png_(self):
        return self.png

    def texts(self):
        """Every text in the picture (titles, labels, ticks, annotations): for checks."""
        found = [self.figure._suptitle.get_text()] if self.figure._suptitle else []
        for ax in self.axes:
            found += [ax.get_title(loc) for loc in ("left", "center", "right")] + [ax.get_xlabel(), ax.get_ylabel()]
            found += [t.get_text() for t in ax.texts + ax.get_xticklabels() + ax.get_yticklabels()]
            legend = ax.get_legend()
            if legend:
                found += [t.get_text() for t in legend.get_texts()]
        return [t for t in found if t]


def _styled(draw):
    """Draw a whole picture (texts, legends, saving) with the lesson style and CJK font fallback."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with rc_context(_fonts()):
            return draw(*args, **kwargs)
    return drawn


def _figure(rows=1, cols=1, width=6.4, height=3.2, **kw):
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def _values(x):
    """A tensor, list or number -> a flat list of floats."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if not isinstance(x, (list, tuple)):
        return [float(x)]
    flat = []
    for v in x:
        flat += _values(v)
    return flat


@_styled
def collectives(results, title="", before="before", after="after"):
    """Each collective as two panels, before | after: one row of boxes per rank, with values.

    results: {name: (per-rank values before, per-rank values after)}, values as tensors or lists
    (None: the rank holds nothing there, e.g. a receive buffer not yet filled). The colour follows
    the data: a box after the collective has the colour of the rank whose value it holds; a box
    striped in every rank's colour holds a combination (a sum) of several ranks' values.
    """
    fig, axes = _figure(len(results), 2, width=8, height=1.1 + 0.35 * sum(len(b) for b, _ in results.values()))
    for row, (name, (first, then)) in enumerate(results.items()):
        for col, per_rank in enumerate((first, then)):
            ax = axes[row][col]
            _boxes(ax, per_rank, origins=_origins(first, then) if col else None)
            ax.set_title(f"{name}: {after if col else before}", fontsize=10, loc="left")
    if title:
        fig.suptitle(title)
    return Picture(fig)


def _origins(first, then):
    """For each value after: the ranks whose values before it is ([r]), or None: a combination."""
    owners = {}
    for r, v in enumerate(first):
        for value in _values(v) if v is not None else []:
            owners.setdefault(value, r)
    return [[[owners[value]] if value in owners else None for value in _values(v)] if v is not None else []
            for v in then]


def _boxes(ax, per_rank, origins=None):
    width = max([len(_values(v)) for v in per_rank if v is not None] + [1])
    everyone = list(range(len(per_rank)))
    for r, v in enumerate(per_rank):
        y = len(per_rank) - 1 - r
        ax.text(-0.2, y + 0.4, f"rank {r}", ha="right", va="center", fontsize=9, color=rank_color(r))
        for i, value in enumerate(_values(v) if v is not None else []):
            whose = [r] if origins is None else (origins[r][i] or everyone)
            for j, q in enumerate(whose):  # one stripe per rank the value came from
                ax.add_patch(_rect(i + 0.9 * j / len(whose), y, rank_color(q), 0.9 / len(whose)))
            ax.add_patch(_frame(i, y))
            ax.text(i + 0.45, y + 0.4, f"{value:g}", ha="center", va="center", fontsize=8)
    ax.set_xlim(-1.3, width)
    ax.set_ylim(-0.1, len(per_rank))
    ax.axis("off")


def _rect(x, y, color, width=0.9):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), width, 0.8, facecolor=color, alpha=0.3, edgecolor="none")


def _frame(x, y):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 0.9, 0.8, facecolor="none", edgecolor="#888888", lw=0.6)


@_styled
def partitions(order, n, title="", xlabel="sample index", ylabel="epoch"):
    """Which rank sees which sample, epoch by epoch (DistributedSampler).

    order: per epoch, per rank, the list of sample indices that rank got (in order). Each box is
    coloured by the rank that reads the sample (a legend names the ranks) and shows when that rank
    reads it (0 = first). A sample read more than once in an epoch (the sampler's padding) is split
    into one stacked part per read and marked with a black dot.
    """
    from matplotlib.patches import Patch, Rectangle

    fig, axes = _figure(width=max(6.0, n * 0.3 + 1.2), height=0.9 + 0.45 * len(order))
    ax = axes[0][0]
    for e, per_rank in enumerate(order):
        reads = {}  # sample -> [(rank, position in that rank's order)]
        for r, indices in enumerate(per_rank):
            for pos, i in enumerate(indices):
                reads.setdefault(i, []).append((r, pos))
        for i, readers in reads.items():
            height = 0.8 / len(readers)
            for k, (r, pos) in enumerate(readers):
                y = -e - 0.2 - (k + 1) * height
                ax.add_patch(Rectangle((i, y), 0.9, height, facecolor=rank_color(r), alpha=0.25, edgecolor=rank_color(r)))
                ax.text(i + 0.45, y + height / 2, str(pos), ha="center", va="center", fontsize=6 if len(readers) == 1 else 5)
            if len(readers) > 1:
                ax.plot(i + 0.45, -e - 0.1, "k.", markersize=4)
    ranks = max((len(per_rank) for per_rank in order), default=0)
    ax.legend(handles=[Patch(facecolor=rank_color(r), alpha=0.25, edgecolor=rank_color(r), label=f"rank {r}")
                       for r in range(ranks)], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_xlim(0, n)
    ax.set_ylim(-len(order) - 0.2, 0)
    step = 1 if n <= 40 else 5 if n <= 200 else max(1, n // 40)
    ax.set_xticks([i + 0.45 for i in range(0, n, step)], [str(i) for i in range(0, n, step)], fontsize=7)
    ax.tick_params(axis="x", length=0)
    ax.set_yticks([-e - 0.6 for e in range(len(order))], [str(e) for e in range(len(order))])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left", fontsize=10)
    return Picture(fig)


@_styled
def timeline(events_by_rank, title="", xlabel="seconds", kinds=None):
    """Per rank, what it did when: events_by_rank[r] = [(start, end, kind, label), ...].

    Bars are coloured by kind (a legend names the kinds) and show their label.
    """
    kinds = list(kinds or dict.fromkeys(e[2] for events in events_by_rank for e in events))
    fig, axes = _figure(width=8, height=0.8 + 0.45 * len(events_by_rank))
    ax = axes[0][0]
    for r, events in enumerate(events_by_rank):
        y = len(events_by_rank) - 1 - r
        for start, end, kind, label in events:
            color = KIND_COLORS[kinds.index(kind) % len(KIND_COLORS)]
            ax.barh(y, end - start, left=start, height=0.7, color=color, edgecolor="white", linewidth=0.5)
            if label is not None and label != "":  # 0 is a label too (micro-batch 0)
                ax.text((start + end) / 2, y, str(label), ha="center", va="center", fontsize=7, color="white")
    for i, kind in enumerate(kinds):
        ax.barh(0, 0, color=KIND_COLORS[i % len(KIND_COLORS)], label=kind)
    ax.set_yticks(range(len(events_by_rank)), [f"rank {r}" for r in reversed(range(len(events_by_rank)))])
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return Picture(fig)


@_styled
def lines(series, xlabel="", ylabel="", title="", logx=False, logy=False, panels=None):
    """Line plots: series = {label: (xs, ys)}; a label "rank N" gets that rank's colour.

    panels: several plots side by side, as a list of dicts with these same arguments.
    """
    specs = panels or [dict(series=series, xlabel=xlabel, ylabel=ylabel, title=title, logx=logx, logy=logy)]
    fig, axes = _figure(1, len(specs), width=4.2 * len(specs) + 1, height=3.2)
    for ax, spec in zip(axes[0], specs):
        for i, (label, (xs, ys)) in enumerate(spec["series"].items()):
            color = rank_color(int(label.split()[1])) if str(label).startswith("rank ") else KIND_COLORS[i % 8]
            ax.plot(list(xs), list(ys), label=label, color=color, linewidth=1.4, marker="." if len(ys) < 30 else None)
        ax.set_xscale("log" if spec.get("logx") else "linear")
        ax.set_yscale("log" if spec.get("logy") else "linear")
        ax.set_xlabel(spec.get("xlabel", ""))
        ax.set_ylabel(spec.get("ylabel", ""))
        ax.set_title(spec.get("title", ""), loc="left", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    return Picture(fig)


@_styled
def bars(values, ylabel="", title="", panels=None, fmt="{:.3g}"):
    """Bar charts: values = {label: number}, each bar labelled with its value.

    panels: several charts side by side, as a list of dicts with these same arguments.
    """
    specs = panels or [dict(values=values, ylabel=ylabel, title=title)]
    fig, axes = _figure(1, len(specs), width=3.6 * len(specs) + 0.8, height=3.0)
    for ax, spec in zip(axes[0], specs):
        labels, heights = list(spec["values"]), [float(v) for v in spec["values"].values()]
        colors = [KIND_COLORS[i % 8] for i in range(len(labels))]
        drawn = ax.bar(range(len(labels)), heights, color=colors)
        ax.bar_label(drawn, [fmt.format(h) for h in heights], fontsize=8)
        ax.set_xticks(range(len(labels)), labels, fontsize=8, rotation=15 if len(labels) > 3 else 0)
        ax.set_ylabel(spec.get("ylabel", ""))
        ax.set_title(spec.get("title", ""), loc="left", fontsize=10)
        ax.margins(y=0.15)
    return Picture(fig)


@_styled
def hosts(status, controller, title="", lost=()):
    """The pool across hosts: one box per host with its address, the ranks on it in their
    colours, and a line from each host to the controller. status: %ddp_status rows (Lab.status());
    lost: hosts to draw crossed out."""
    by_host = {}
    for row in status:
        by_host.setdefault(row["host"], []).append(row)
    names = sorted(by_host)
    fig, axes = _figure(1, 1, width=1.9 * max(3, len(names)) + 0.6, height=2.6)
    ax = axes[0][0]
    ax.set_xlim(-0.1, len(names))
    ax.set_ylim(-0.15, 2.3)
    ax.axis("off")
    cx = (len(names) - 1) / 2 + 0.45
    ax.add_patch(_box(cx - 0.6, 1.8, 1.2, 0.42, "#eeeeee"))
    ax.text(cx, 2.01, controller, ha="center", va="center", fontsize=8)
    for i, name in enumerate(names):
        rows = by_host[name]
        address = (rows[0].get("address") or "").split(" ")[0]
        gone = name in lost
        ax.plot([i + 0.45, cx], [1.05, 1.8], color="#bbbbbb" if gone else "#888888", lw=1, ls=":" if gone else "-")
        ax.add_patch(_box(i + 0.05, 0.0, 0.8, 1.05, "#f6f6f6" if gone else "#e8eef7"))
        ax.text(i + 0.45, 0.88, name, ha="center", fontsize=9, weight="bold", color="#999999" if gone else "#222222")
        ax.text(i + 0.45, 0.7, address, ha="center", fontsize=7, color="#555555")
        for j, row in enumerate(rows):
            ax.add_patch(_box(i + 0.15, 0.1 + 0.22 * j, 0.6, 0.18, "#cccccc" if gone else rank_color(row["rank"])))
            ax.text(i + 0.45, 0.19 + 0.22 * j, f"rank {row['rank']}", ha="center", va="center", fontsize=7,
                    color="white")
        if gone:
            ax.plot([i + 0.05, i + 0.85], [0.0, 1.05], color="#d62728", lw=2)
            ax.plot([i + 0.05, i + 0.85], [1.05, 0.0], color="#d62728", lw=2)
    ax.set_title(title, loc="left", fontsize=10)
    return Picture(fig)


def _box(x, y, w, h, color):
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.04", facecolor=color,
                          edgecolor="#8a9bb0", lw=0.8)
