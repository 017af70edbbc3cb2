"""Live line plots, cheap enough to redraw 4-5 times a second beside training on a 2-core machine.

matplotlib draws what it does well and what rarely changes: the axes, ticks, grid (a PNG,
the *background*). The lines themselves, which change every frame, are an SVG *overlay* of
polylines in the background's pixel coordinates: each frame only formats the new points.
Drawing axes costs ~25 ms here and encoding a PNG ~4 ms, far too much to do every frame;
so the background is redrawn only when data leaves the axes, whose limits grow in steps
(1, 2, 5 x 10^k). Titles live in HTML around the plot, where browser fonts draw any language.
"""
import io
import math


def nice_ceiling(value):
    """The smallest of 1, 2, 5 x 10^k at least `value` (for axis limits that grow rarely)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if m * exp >= value * (1 - 1e-12):
            return m * exp
    return 10 * exp


class LivePlot:
    """Lines fed by metrics.Series. render() -> (background PNG or None, overlay SVG or None):
    None where nothing changed since the last call."""

    def __init__(self, width=4.4, height=2.3, dpi=90, y_from_zero=True, min_x=1.0, headroom=1.15):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        self.fig = Figure(figsize=(width, height), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_subplot()
        self.ax.tick_params(labelsize=8)
        self.ax.xaxis.set_major_locator(MaxNLocator(6))  # fewer labels: text is what costs
        self.ax.yaxis.set_major_locator(MaxNLocator(5))
        self.ax.grid(True, color="#e8e8e8", linewidth=0.6)
        self.fig.subplots_adjust(left=0.14, right=0.97, top=0.95, bottom=0.13)
        self.width, self.height = self.canvas.get_width_height()
        self.y_from_zero = y_from_zero
        self.min_x = min_x  # the x axis starts this wide, so short runs never redraw it
        self.headroom = headroom  # room above the highest point, so a rising line rarely leaves
        self.limits = None
        self.paths = {}  # key -> [points drawn, series generation, "x,y x,y ..." pieces]
        self.background = None
        self.backgrounds = self.frames = 0
        # matplotlib's first draw loads fonts and caches (~30-80 ms): do it now, not in a live
        # frame, and keep its picture (empty axes) to show until the first points arrive
        self._draw_axes(self._limits({}))
        self.limits, self.backgrounds = None, 0

    # ------------------------------------------------------------------ axes (the background)
    def _limits(self, series):
        xs = [x for s, _, _ in series.values() for x in s.x]
        ys = [y for s, _, _ in series.values() for y in s.y]
        if not xs:
            return (0.0, self.min_x, 0.0, 1.0)
        lo, hi = min(ys), max(ys)
        if self.y_from_zero and lo >= 0:
            lo = 0.0
        else:
            lo = -nice_ceiling(-lo * 1.1) if lo < 0 else lo * 0.9
        return (0.0, max(self.min_x, nice_ceiling(max(xs) * 1.05)), lo, nice_ceiling(hi * self.headroom) if hi > 0 else 1.0)

    def _draw_axes(self, limits):
        from PIL import Image

        self.limits = limits
        self.ax.set_xlim(limits[0], limits[1])
        self.ax.set_ylim(limits[2], limits[3])
        self.canvas.draw()
        (x0, y0), (x1, y1) = self.ax.get_window_extent().get_points()
        # data -> overlay pixels (SVG's y grows downwards)
        self._sx = (x1 - x0) / (limits[1] - limits[0])
        self._sy = (y1 - y0) / (limits[3] - limits[2])
        self._x0, self._y0 = x0, self.height - y0
        self.box = (x0, self.height - y1, x1 - x0, y1 - y0)
        buf = io.BytesIO()
        Image.frombuffer("RGBA", (self.width, self.height), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1) \
            .convert("RGB").save(buf, format="png", compress_level=1)
        self.background = buf.getvalue()
        self.backgrounds += 1
        self.paths = {}

    def _inside(self, series):
        x0, x1, y0, y1 = self.limits
        for key, (s, _, _) in series.items():
            done, gen, _ = self.paths.get(key, (0, s.generation, None))
            start = done if gen == s.generation else 0
            for x, y in zip(s.x[start:], s.y[start:]):
                if not (x0 <= x <= x1 and y0 <= y <= y1):
                    return False
        return True

    # ------------------------------------------------------------------ lines (the overlay)
    def _extend(self, key, s):
        path = self.paths.get(key)
        if path is None or path[1] != s.generation:  # new, or thinned out: format it all again
            path = self.paths[key] = [0, s.generation, []]
        done = path[0]
        if len(s) == done:
            return False
        sx, sy, px, py, xmin, ymin = self._sx, self._sy, self._x0, self._y0, self.limits[0], self.limits[2]
        path[2].extend(f"{px + (x - xmin) * sx:.1f},{py - (y - ymin) * sy:.1f}"
                       for x, y in zip(s.x[done:], s.y[done:]))
        path[0] = len(s)
        return True

    def overlay(self, series, frame=None):
        x, y, w, h = self.box
        lines = "".join(
            f'<polyline points="{" ".join(self.paths[key][2])}" fill="none" stroke="{color}" '
            f'stroke-width="{width}" stroke-linejoin="round"/>'
            for key, (s, color, width) in series.items() if key in self.paths and len(self.paths[key][2]) > 1)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" data-frame="{self.frames if frame is None else frame}" '
                f'style="display:block"><clipPath id="c{id(self)}"><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
                f'height="{h:.1f}"/></clipPath><g clip-path="url(#c{id(self)})">{lines}</g></svg>')

    def render(self, series, axes_allowed=True):
        """series: {key: (metrics.Series, colour, line width)}. With axes_allowed=False a frame
        that would need new axes is skipped (the caller spreads such costly frames out)."""
        background = None
        if self.limits is None or not self._inside(series):
            if not axes_allowed:
                return None, None
            self._draw_axes(self._limits(series))
            background = self.background
        changed = [self._extend(key, s) for key, (s, _, _) in series.items()]
        if background is None and not any(changed):
            return None, None
        self.frames += 1
        return background, self.overlay(series)

    def reset(self):
        self.limits = None
        self.paths = {}

    def snapshot_html(self, overlay):
        """Background and lines as one static piece of HTML."""
        import base64

        data = base64.b64encode(self.background or b"").decode()
        return (f'<div style="position:relative;width:{self.width}px;height:{self.height}px">'
                f'<img src="data:image/png;base64,{data}" style="position:absolute;left:0;top:0">'
                f'<div style="position:absolute;left:0;top:0">{overlay}</div></div>')
