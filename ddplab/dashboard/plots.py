"""Live line plots, cheap enough to redraw 4 times a second beside training on a 2-core machine.

A plot is one SVG: axes, grid, ticks and labels, and the lines as polylines. matplotlib chooses
the ticks (MaxNLocator: pure arithmetic); drawing them is a few dozen SVG elements, formatted
only when the data leaves the axes, whose limits grow in steps (1, 2, 5 x 10^k). Each frame
only formats the new points. (matplotlib drawing the axes as a picture took 25 ms here, 40-60 ms
beside training: bursts that held a core while the ranks waited for each other in the
all-reduce.) Titles live in HTML around the plot, where browser fonts draw any language.
"""
import math
from html import escape


def nice_ceiling(value):
    """The smallest of 1, 2, 5 x 10^k at least `value` (for axis limits that grow rarely)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if m * exp >= value * (1 - 1e-12):
            return m * exp
    return 10 * exp


def tick_label(value, step, thousands=False):
    """A tick's label with as many decimals as the tick spacing needs; in thousands ("20k") on an
    axis that reaches 10,000."""
    if thousands and value:
        value, step, suffix = value / 1000, step / 1000, "k"
    else:
        suffix = ""
    decimals = next((d for d in range(7) if abs(round(step, d) - step) <= 1e-9 * step), 6)  # 0.25: 2
    return f"{value:.{decimals}f}{suffix}"


class LivePlot:
    """Lines fed by metrics.Series. render() -> the plot's SVG, or None where nothing changed
    since the last call."""

    def __init__(self, width=396, height=207, y_from_zero=True, min_x=1.0, headroom=1.15):
        self.width, self.height = width, height
        # the axes' box in pixels (SVG's y grows downwards), room for tick labels left and below
        self.box = (56.0, 10.0, width - 68.0, height - 37.0)
        self.y_from_zero = y_from_zero
        self.min_x = min_x  # the x axis starts this wide, so short runs never change it
        self.headroom = headroom  # room above the highest point, so a rising line rarely leaves
        self.limits = None
        self.paths = {}  # key -> [points drawn, series generation, "x,y x,y ..." pieces]
        self.axes_drawn = self.frames = 0
        self._draw_axes(self._limits({}))  # empty axes, shown until the first points arrive
        self.limits, self.axes_drawn = None, 0

    # ------------------------------------------------------------------ axes
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
        from matplotlib.ticker import MaxNLocator

        self.limits = limits
        bx, by, bw, bh = self.box
        self._sx = bw / (limits[1] - limits[0])
        self._sy = bh / (limits[3] - limits[2])
        self._x0, self._y0 = bx, by + bh  # data -> pixels: the bottom-left corner is (xmin, ymin)
        grid, ticks, labels = [], [], []
        for axis, (lo, hi), bins in (("x", limits[:2], 6), ("y", limits[2:], 5)):
            values = [v for v in MaxNLocator(bins).tick_values(lo, hi) if lo - 1e-9 * (hi - lo) <= v <= hi * (1 + 1e-9) + 1e-12]
            step = values[1] - values[0] if len(values) > 1 else hi - lo
            thousands = max(abs(lo), abs(hi)) >= 10_000 and step >= 1000
            for v in values:
                text = escape(tick_label(v, step, thousands))
                if axis == "x":
                    px = self._x0 + (v - lo) * self._sx
                    grid.append(f"M{px:.1f} {by:.1f}V{by + bh:.1f}")
                    ticks.append(f"M{px:.1f} {by + bh:.1f}v3.5")
                    labels.append(f'<text x="{px:.1f}" y="{by + bh + 14:.1f}" text-anchor="middle">{text}</text>')
                else:
                    py = self._y0 - (v - lo) * self._sy
                    grid.append(f"M{bx:.1f} {py:.1f}H{bx + bw:.1f}")
                    ticks.append(f"M{bx:.1f} {py:.1f}h-3.5")
                    labels.append(f'<text x="{bx - 6:.1f}" y="{py + 3.5:.1f}" text-anchor="end">{text}</text>')
        self.axes = (f'<rect width="{self.width}" height="{self.height}" fill="#fff"/>'
                     f'<path d="{"".join(grid)}" stroke="#e8e8e8" stroke-width="0.6"/>'
                     f'<path d="{"".join(ticks)}" stroke="#000" stroke-width="0.8"/>'
                     f'<rect x="{bx:.1f}" y="{by:.1f}" width="{bw:.1f}" height="{bh:.1f}" fill="none" '
                     f'stroke="#000" stroke-width="0.8"/>'
                     f'<g font-family="DejaVu Sans, Arial, sans-serif" font-size="10">{"".join(labels)}</g>')
        self.axes_drawn += 1
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

    # ------------------------------------------------------------------ lines
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

    def svg(self, series, frame=None):
        """The whole plot: axes, then the lines clipped to the axes' box."""
        x, y, w, h = self.box
        lines = "".join(
            f'<polyline points="{" ".join(self.paths[key][2])}" fill="none" stroke="{color}" '
            f'stroke-width="{width}" stroke-linejoin="round"/>'
            for key, (s, color, width) in series.items() if key in self.paths and len(self.paths[key][2]) > 1)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" data-frame="{self.frames if frame is None else frame}" '
                f'style="display:block">{self.axes}<clipPath id="c{id(self)}"><rect x="{x:.1f}" y="{y:.1f}" '
                f'width="{w:.1f}" height="{h:.1f}"/></clipPath><g clip-path="url(#c{id(self)})">{lines}</g></svg>')

    def render(self, series):
        """series: {key: (metrics.Series, colour, line width)} -> the SVG, or None if nothing changed."""
        new_axes = self.limits is None or not self._inside(series)
        if new_axes:
            self._draw_axes(self._limits(series))
        changed = [self._extend(key, s) for key, (s, _, _) in series.items()]
        if not new_axes and not any(changed):
            return None
        self.frames += 1
        return self.svg(series)

    def reset(self):
        self.limits = None
        self.paths = {}
