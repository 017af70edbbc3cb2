"""The live dashboard (ipywidgets): state diagram, per-rank table, loss and throughput plots,
each rank's output in its own tab.

It is a View (view.py): the Lab calls update(live) at most 4 times a second while a cell runs,
and the dashboard only sends what changed. Shown at %ddp_start and by %ddp_status;
a training cell also shows it live in its own output, and leaves a static picture there
when it ends (so a saved notebook shows what happened).
"""
import threading
import time
from html import escape

from ..shared import state as st
from ..shared.config import tunables
from . import html
from .plots import LivePlot
from .view import View

OUTPUT_TAIL = 200  # lines of each rank's output kept in its tab
MAX_LINES = 16  # ranks drawn in the plots; above that, this many spread evenly (0 and the last included)
MAX_TABS = 16  # above that, one output pane and a rank selector instead of a tab per rank
TIMELINE_TAIL = 64  # spans per rank the live swimlanes are drawn from: the last steps (a frame's work stays small)
TIMELINE_EVERY = 1.0  # seconds between redraws of the live swimlanes while a cell runs (~5 ms each: at every
# frame, 2% of a core taken from the ranks; the cell's last frame always draws them)


def plotted_ranks(world_size):
    if world_size <= MAX_LINES:
        return list(range(world_size))
    return sorted({round(i * (world_size - 1) / (MAX_LINES - 1)) for i in range(MAX_LINES)})


class Dashboard(View):
    """The live dashboard; `display(dashboard)` (or leaving it last in a cell) shows it."""

    threadsafe = True  # widget updates may come from the Lab's watcher thread (a rank died while idle)
    shows_progress = True  # the ranks go through starting -> init -> ready in the diagram

    def __init__(self, world_size, lang="en", title=""):
        import ipywidgets as W

        self._drawing(world_size, lang, title)
        self.header = W.HTML()
        self.diagram = W.HTML()
        self.table = W.HTML()
        # The live plots are drawn in the browser from the points each frame adds (chart.py); the static
        # picture a finished cell keeps is drawn here, once, at the cell's last frame (plots.py)
        self.loss_view = self._chart(W, self.loss_plot, "ddplab-loss-plot")
        self.rate_view = self._chart(W, self.rate_plot, "ddplab-rate-plot")
        self.loss_title = W.HTML()
        self.rate_title = W.HTML()
        self.timeline = W.HTML()  # the last steps' swimlanes and breakdown (swimlane.py)
        self.timeline.add_class("ddplab-timeline-view")
        if world_size <= MAX_TABS:
            self.panes = [W.HTML() for _ in range(world_size)]
            self.tabs = W.Tab(children=self.panes)
            for r in range(world_size):
                self.tabs.set_title(r, f"rank {r}")
            outputs = self.tabs
        else:  # hundreds of tabs help nobody: pick a rank, see its output
            self.panes, self.tabs = [W.HTML()], None
            self.pick = W.Dropdown(options=[(f"rank {r}", r) for r in range(world_size)], value=0,
                                   description="output of", layout=W.Layout(width="220px"))
            outputs = W.VBox([self.pick, self.panes[0]])
        # rows wrap: in a narrow notebook (JupyterLab at 1280 px with its side bar open) the table and
        # the second plot go below instead of being clipped
        wrap = W.Layout(flex_flow="row wrap", align_items="flex-start")
        plots = W.HBox([W.VBox([self.loss_title, self.loss_view]), W.VBox([self.rate_title, self.rate_view])],
                       layout=wrap)
        self.box = W.VBox([W.HTML(html.STYLE), self.header, W.HBox([self.diagram, self.table], layout=wrap), plots,
                           self.timeline, outputs])
        self.box.add_class("ddplab-dashboard")

    def _drawing(self, world_size, lang, title):
        """What every frame draws from, whatever shows it (widgets here, HTML in page.py)."""
        self.world_size, self.lang, self.title = world_size, lang, title
        self.labels = html.labels(lang)
        # x axes start at 100 steps and 10 s; samples/s leaves room for ranks still warming up
        self.loss_plot, self.rate_plot = LivePlot(min_x=100), LivePlot(min_x=10, headroom=1.6)
        self.pictures = {"loss": self.loss_plot.svg({}), "rate": self.rate_plot.svg({})}  # the plots as SVG
        self._fresh = True  # a new cell: the charts start again at its first points
        self._timeline_drawn = None
        self._timeline_at = float("-inf")  # when the swimlanes were last drawn (monotonic)
        self.plotted = plotted_ranks(world_size)
        self.plotted_once = False  # a cell has drawn points: its picture stays until the next one's
        self.positions, self._last_state = None, None
        self.in_cell = False
        self._lock = threading.RLock()  # the monitor, the Lab's watcher and last-frame threads all draw
        self.frames = 0
        self._pending, self._drawn_at = None, 0.0  # the after-cell frame still to come; last drawn

    # ------------------------------------------------------------------ the view protocol
    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)

    def show(self):
        from IPython.display import display

        display(self)

    def begin(self, live):
        """A cell starts: fresh plots; the cell shows the dashboard once its ranks train.
        (No drawing here: the first frame comes a quarter second into the cell, so a quick
        cell costs the dashboard nothing until it ends.)"""
        with self._lock:
            self.loss_plot.reset()
            self.rate_plot.reset()
            self._fresh, self.in_cell = True, False

    def update(self, live, final=False):
        with self._lock:
            self._draw(live, final)
            self._drawn_at = time.monotonic()

    def _deferred_frame(self, live):
        with self._lock:
            self._pending = None
            self.update(live, final=True)  # (a quick cell's last frame)

    def _draw(self, live, final=False):
        now = time.monotonic()
        rs, metrics = live.run_state, live.metrics
        self._last_state = rs
        training = any(rs.states[r] == st.TRAINING for r in range(rs.world_size))
        if training and not self.in_cell and rs.cell_ended is None and not self.background:
            self.in_cell = True
            self.show()  # a second view of the same widgets, in the running cell's output
        self._set(self.header, html.header(self.title, rs, metrics, now, self.lang))
        svg, self.positions = html.diagram_svg(rs, self.lang, self.positions)
        self._set(self.diagram, svg)
        self._set(self.table, html.rank_table(rs, now, self.lang))
        self._plots(rs, metrics, final)
        self._timeline(live, now, final)
        self._outputs(rs)
        self.frames += 1

    def _outputs(self, rs):
        """Each rank's output, the last lines, in its tab (or the picked rank's pane)."""
        shown = range(self.world_size) if self.tabs is not None else [self.pick.value]
        for pane, r in zip(self.panes, shown):
            text = "\n".join(rs.ranks[r].output.splitlines()[-OUTPUT_TAIL:])
            self._set(pane, f"<pre>{escape(text)}</pre>")
            if self.tabs is not None:
                title = f"rank {r}" + (" ✗" if rs.states[r] in (st.FAILED, st.LOST) else "")
                if self.tabs.get_title(r) != title:
                    self.tabs.set_title(r, title)

    def end(self, live):
        """The cell ended: last frame; in the cell, the live view becomes a static picture.
        A cell that did not train draws its last frame in the background, 50 ms later, so
        the cell itself returns at once (widget updates may come from any thread)."""
        if self.background:  # the notebook has moved on: the last frame only, in place
            with self._lock:
                self._last_frame(live)
            return
        if not self.in_cell and not self.threadsafe:  # (a front end that draws nothing a thread sends)
            with self._lock:
                self._last_frame(live)
            return
        if not self.in_cell:
            # a moment later: a thread drawing right away would take the GIL from the cell's end.
            # One pending frame at most, a FRAME after the last one: many quick cells in a row
            # (a loop of %%ddp calls) redraw 4 times a second, not once per cell.
            with self._lock:
                if self._pending is None:
                    delay = max(0.05, self._drawn_at + tunables().frame - time.monotonic())
                    self._pending = threading.Timer(delay, self._deferred_frame, args=(live,))
                    self._pending.daemon = True
                    self._pending.start()
            return
        from IPython.display import HTML, clear_output, display

        with self._lock:
            self._last_frame(live)
            clear_output()  # a %%ddp cell prints nothing before its dashboard
            display(HTML(self.snapshot_html()))
            self.in_cell = False

    def _last_frame(self, live):
        self._draw(live, final=True)

    # ------------------------------------------------------------------ drawing
    @staticmethod
    def _set(widget, value):
        if widget.value != value:
            widget.value = value

    def _plots(self, rs, metrics, final=False):
        lab = self.labels
        has_points = any(len(s) for s in metrics.loss) or any(len(s) for s in metrics.rate)
        if not has_points and self.plotted_once:
            return  # keep the last cell's picture, with its titles, until the new cell's first points
        self.plotted_once = self.plotted_once or has_points
        some = f" ({len(self.plotted)} of {rs.world_size} ranks)" if len(self.plotted) < rs.world_size else ""
        self._set(self.loss_title, f'<div class="ddplab-title">{escape(lab["loss_title"] + some)}</div>')
        rate_title = lab["rate_title"] if has_points else lab["no_points"]
        self._set(self.rate_title, f'<div class="ddplab-title">{escape(rate_title)}</div>')
        loss = {r: (metrics.loss[r], html.rank_color(r), 1.4) for r in self.plotted}
        rates = {r: (metrics.rate[r], html.rank_color(r), 1.4) for r in self.plotted}
        rates["total"] = (metrics.total, "#222222", 2.0)
        if not has_points:
            return  # empty axes until the first points
        for name, plot, series in (("loss", self.loss_plot, loss), ("rate", self.rate_plot, rates)):
            self._plot(name, plot, series, final)
        self._fresh = False

    def _plot(self, name, plot, series, final):
        """The browser draws the points the frame adds (chart.py); the cell's last frame, the still picture."""
        chart = self.loss_view if name == "loss" else self.rate_view
        if self._fresh:
            chart.reset()  # (here, not at the cell's start: a quick cell sends nothing)
        chart.push(series, final)
        if final:
            self.pictures[name] = plot.render(series) or plot.svg(series)  # (render: None if unchanged)

    def _timeline(self, live, now, final=False):
        """The swimlanes of the last steps and their breakdown, from the tail of the cell's spans (drawn
        once a cell has spans, at most every TIMELINE_EVERY s but at the cell's end; the last cell's
        stays until then)."""
        from ..shared.swimlane import live as live_view

        spans = getattr(live, "spans", None)
        if spans is None or not len(spans.rows) or (spans, len(spans.rows)) == self._timeline_drawn:
            return
        if not final and now - self._timeline_at < TIMELINE_EVERY:
            return
        self._timeline_drawn, self._timeline_at = (spans, len(spans.rows)), now  # (drawn again only when spans came)
        self._set(self.timeline, live_view(spans.timeline(self.lang, tail=TIMELINE_TAIL)))

    @staticmethod
    def _chart(W, plot, css_class):
        """A live chart with the plot's size and axes, empty until the first points."""
        from .chart import LiveChart

        chart = LiveChart(width=plot.width, height=plot.height, min_x=plot.min_x, headroom=plot.headroom,
                          y_from_zero=plot.y_from_zero,
                          layout=W.Layout(width=f"{plot.width}px", height=f"{plot.height}px"))
        chart.add_class(css_class)
        return chart

    def snapshot_html(self, live=False):
        """The dashboard as static HTML (SVG, table, plots): what a finished cell keeps (live: what
        page.py shows while it runs, the diagram's tokens sliding)."""
        def plot(name, title, css_class):
            box = f'<div class="{css_class}" style="display:inline-block;vertical-align:top;margin-right:8px">'
            return f'{box}{title.value}{self.pictures[name]}</div>'

        # (the still picture without the sliding animation)
        diagram = self.diagram.value if live else html.diagram_svg(self._last_state, self.lang)[0]
        kind = "ddplab-page" if live else "ddplab-snapshot"
        return (f'<div class="ddplab-dashboard {kind}">{html.STYLE}<div>{self.header.value}</div>'
                f'<div style="display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start">{diagram}{self.table.value}</div>'
                f'<div>{plot("loss", self.loss_title, "ddplab-loss-plot")}{plot("rate", self.rate_title, "ddplab-rate-plot")}'
                f'</div><div class="ddplab-timeline-view">{self.timeline.value}</div></div>')
