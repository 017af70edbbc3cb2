"""The live dashboard as HTML updated in place: for front ends that draw no ipywidgets 8 widget.

Colab's front end renders ipywidgets 7 only (its kernels run 7.7.1) and draws nothing a thread of the
kernel sends; JupyterLab 4 and Notebook 7 render no widget of a kernel on ipywidgets 7 (their widget
manager knows the 8 models only). Every Jupyter front end updates an output in place by its display id
(update_display_data), so this view draws what the widget dashboard draws (widget.py: the state
diagram, the table, the loss and samples/s plots, the swimlanes) as one HTML output, sent again at
most once a second (the whole page, 20 to 40 KB) and at a cell's end. Where the front end draws only
what the cell's own thread sends (Colab), it draws from the kernel's main thread only: a cell in the
background is drawn while %ddp_wait waits for it (the magic says so once).
"""
import sys
import threading
import time
import uuid

from .widget import Dashboard

PAGE_EVERY = 1.0  # seconds between pages sent while a cell runs (each is the whole dashboard)


def in_colab():
    """True in a Google Colab kernel (its front end draws ipywidgets 7 only, and nothing from threads)."""
    return "google.colab" in sys.modules


def widgets_render():
    """Whether the widget dashboard renders where this kernel runs: ipywidgets 8, outside Colab."""
    if in_colab():
        return False
    try:
        import ipywidgets
    except ImportError:
        return False
    return int(ipywidgets.__version__.split(".")[0]) >= 8


class Slot:
    """What the widget dashboard keeps in an HTML widget, kept here as a string."""

    def __init__(self):
        self.value = ""


class PageDashboard(Dashboard):
    """The dashboard as one HTML output updated in place; `display(view)` shows it."""

    def __init__(self, world_size, lang="en", title="", main_thread_only=None):
        self._drawing(world_size, lang, title)
        self.header, self.diagram, self.table = Slot(), Slot(), Slot()
        self.loss_title, self.rate_title, self.timeline = Slot(), Slot(), Slot()
        self.tabs, self.panes = None, []  # (each rank's output comes with the cell's result)
        # a front end that draws only what the cell's thread sends (Colab): no frame from another thread
        self.main_thread_only = in_colab() if main_thread_only is None else main_thread_only
        self.threadsafe = not self.main_thread_only
        self.display_id = f"ddplab-{uuid.uuid4().hex}"
        self.shown = False
        self._sent, self._sent_at = None, float("-inf")
        self.told_background = False  # said once that a background cell draws at %ddp_wait
        self._in_draw = self._show_after_draw = False

    def _ipython_display_(self):
        self.show()

    def show(self):
        from IPython.display import HTML, display

        if self._in_draw:  # (a training cell's first frame: shown once it is drawn)
            self._show_after_draw = True
            return
        with self._lock:
            self._sent, self._sent_at = self.snapshot_html(live=True), time.monotonic()
            display(HTML(self._sent), display_id=self.display_id)  # (every output with this id: updated together)
            self.shown = True

    def _drawable(self):
        return not self.main_thread_only or threading.current_thread() is threading.main_thread()

    def update(self, live, final=False):
        if not self._drawable():
            return
        with self._lock:
            self._in_draw = True
            try:
                self._draw(live, final)
            finally:
                self._in_draw = False
            self._drawn_at = time.monotonic()
            if self._show_after_draw:
                self._show_after_draw = False
                self.show()
            else:
                self._send(final)

    def end(self, live):
        if self._drawable():
            super().end(live)

    def _last_frame(self, live):
        self._draw(live, final=True)
        self._send(True)

    def _send(self, final):
        """The page to every output showing it: while a cell runs at most every PAGE_EVERY s and at its
        end; between cells (start-up, a restart, the pool stopped) when it changed."""
        now = time.monotonic()
        rs = self._last_state
        running = rs is not None and rs.cell > 0 and rs.cell_ended is None  # (a cell runs)
        if not self.shown or (running and not final and now - self._sent_at < PAGE_EVERY):
            return
        page = self.snapshot_html(live=True)
        if page != self._sent:
            from IPython.display import HTML, update_display

            update_display(HTML(page), display_id=self.display_id)
            self._sent, self._sent_at = page, now

    def _plot(self, name, plot, series, final):
        self.pictures[name] = plot.render(series) or self.pictures[name]  # (render: None if unchanged)

    def _outputs(self, rs):
        pass
