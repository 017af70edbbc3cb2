"""The live dashboard (ipywidgets): state diagram, per-rank table, loss and throughput plots,
each rank's output in its own tab.

It is a view of a Lab: the monitor calls update(lab) at most 5 times a second while a cell
runs, and the dashboard only sends what changed. Shown at %ddp_start and by %ddp_status;
a training cell also shows it live in its own output, and leaves a static picture there
when it ends (so a saved notebook shows what happened).
"""
import time
from html import escape

from .. import state as st
from . import html
from .plots import LivePlot

OUTPUT_TAIL = 200  # lines of each rank's output kept in its tab


class Dashboard:
    threadsafe = True  # widget updates may come from the Lab's watcher thread (a rank died while idle)

    def __init__(self, world_size, lang="en", title=""):
        import ipywidgets as W

        self.world_size, self.lang, self.title = world_size, lang, title
        self.labels = html.labels(lang)
        self.header = W.HTML()
        self.diagram = W.HTML()
        self.table = W.HTML()
        # x axes start at 100 steps and 10 s; samples/s leaves room for ranks still warming up
        self.loss_plot, self.rate_plot = LivePlot(min_x=100), LivePlot(min_x=10, headroom=1.6)
        self.loss_view, self.loss_bg, self.loss_lines = self._plot_widgets(W, self.loss_plot, "ddplab-loss-plot")
        self.rate_view, self.rate_bg, self.rate_lines = self._plot_widgets(W, self.rate_plot, "ddplab-rate-plot")
        self.loss_title = W.HTML()
        self.rate_title = W.HTML()
        self.panes = [W.HTML() for _ in range(world_size)]
        self.tabs = W.Tab(children=self.panes)
        for r in range(world_size):
            self.tabs.set_title(r, f"rank {r}")
        plots = W.HBox([W.VBox([self.loss_title, self.loss_view]), W.VBox([self.rate_title, self.rate_view])])
        self.box = W.VBox([W.HTML(html.STYLE), self.header, W.HBox([self.diagram, self.table]), plots,
                           self.tabs])
        self.box.add_class("ddplab-dashboard")
        self.positions = None
        self.in_cell = False
        self.frames = 0

    # ------------------------------------------------------------------ the view protocol
    def show(self):
        from IPython.display import display

        display(self.box)

    def begin(self, lab):
        """A cell starts: fresh plots; the cell shows the dashboard once its ranks train."""
        self.loss_plot.reset()
        self.rate_plot.reset()
        self.in_cell = False
        self.update(lab)

    def update(self, lab):
        now = time.monotonic()
        rs, metrics = lab.run_state, lab.metrics
        self._last_state = rs
        training = any(rs.states[r] == st.TRAINING for r in range(rs.world_size))
        if training and not self.in_cell and rs.cell_ended is None:
            self.in_cell = True
            self.show()  # a second view of the same widgets, in the running cell's output
        self._set(self.header, html.header(self.title, rs, metrics, now, self.lang))
        svg, self.positions = html.diagram_svg(rs, self.lang, self.positions)
        self._set(self.diagram, svg)
        self._set(self.table, html.rank_table(rs, now, self.lang))
        self._plots(rs, metrics)
        for r, pane in enumerate(self.panes):
            text = "\n".join(rs.ranks[r].output.splitlines()[-OUTPUT_TAIL:])
            self._set(pane, f"<pre>{escape(text)}</pre>")
            failed = rs.states[r] in (st.FAILED, st.LOST)
            title = f"rank {r}" + (" ✗" if failed else "")
            if self.tabs.get_title(r) != title:
                self.tabs.set_title(r, title)
        self.frames += 1

    def end(self, lab):
        """The cell ended: last frame; in the cell, the live view becomes a static picture."""
        self.update(lab)
        if self.in_cell:
            from IPython.display import HTML, clear_output, display

            clear_output()  # a %%ddp cell prints nothing before its dashboard
            display(HTML(self.snapshot_html()))
            self.in_cell = False

    # ------------------------------------------------------------------ drawing
    @staticmethod
    def _set(widget, value):
        if widget.value != value:
            widget.value = value

    def _plots(self, rs, metrics):
        lab = self.labels
        has_points = any(len(s) for s in metrics.loss) or any(len(s) for s in metrics.rate)
        self._set(self.loss_title, f'<div class="ddplab-title">{escape(lab["loss_title"])}</div>')
        self._set(self.rate_title, f'<div class="ddplab-title">{escape(lab["rate_title"] if has_points else lab["no_points"])}</div>')
        wide = 1.4 if rs.world_size <= 16 else 0.6
        loss = {r: (s, html.rank_color(r), wide) for r, s in enumerate(metrics.loss)}
        rates = {r: (s, html.rank_color(r), wide) for r, s in enumerate(metrics.rate)}
        rates["total"] = (metrics.total, "#222222", 2.0)
        for plot, series, bg, lines in ((self.loss_plot, loss, self.loss_bg, self.loss_lines),
                                        (self.rate_plot, rates, self.rate_bg, self.rate_lines)):
            if not has_points and len(bg.value):
                continue  # keep the last picture until the new cell's first points
            background, overlay = plot.render(series)
            if background is not None:
                bg.value = background
            if overlay is not None:
                lines.value = overlay

    @staticmethod
    def _plot_widgets(W, plot, css_class):
        """A plot is two widgets stacked in one grid cell: the axes (PNG) under the lines (SVG)."""
        size = dict(width=f"{plot.width}px", height=f"{plot.height}px", grid_area="plot")
        bg = W.Image(format="png", layout=W.Layout(**size))
        lines = W.HTML(layout=W.Layout(**size))
        view = W.GridBox([bg, lines], layout=W.Layout(grid_template_areas='"plot"', width=f"{plot.width}px"))
        view.add_class(css_class)
        return view, bg, lines

    def snapshot_html(self):
        """The dashboard as static HTML (SVG, table, plots): what a finished cell keeps."""
        def img(plot, lines, title):
            return (f'<div style="display:inline-block;vertical-align:top;margin-right:8px">{title.value}'
                    f'{plot.snapshot_html(lines.value)}</div>')

        diagram, _ = html.diagram_svg(self._last_state, self.lang)  # without the sliding animation
        return (f'<div class="ddplab-dashboard ddplab-snapshot">{html.STYLE}<div>{self.header.value}</div>'
                f'<div style="display:flex;gap:12px;align-items:flex-start">{diagram}{self.table.value}</div>'
                f'<div>{img(self.loss_plot, self.loss_lines, self.loss_title)}'
                f'{img(self.rate_plot, self.rate_lines, self.rate_title)}</div></div>')
