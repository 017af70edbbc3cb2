"""Widgets that change a training while it runs (lessons 7, 8 and 10): each moves a knob on every
rank (Lab.knobs), which rank code reads with ddplab.knob(name, default), e.g. each step.

    %%ddp --background                 # the cell returns at once; the dashboard stays live
    for step in range(2000):
        time.sleep(0.01 * ddplab.knob("slow", 0) if rank == 2 else 0)
        ...
    knobs.slider("slow", 0, 5, value=0, description="rank 2 slower ×")   # drag it: the dashboard reacts

Widget events reach the kernel only while no cell runs: that is why the training runs in the
background (%%ddp --background), and %ddp_wait collects its output at the end.
"""
from . import lab as running_lab


def _lab():
    lab = running_lab()
    if lab is None:
        raise RuntimeError("no pool is running: %ddp_start first")
    return lab


def slider(name, low, high, value, step=1, description=None):
    """A slider that sets knob `name` on every rank as it moves (ints if all bounds are ints)."""
    import ipywidgets as W

    lab = _lab()
    whole = all(isinstance(v, int) for v in (low, high, value, step))
    kind = W.IntSlider if whole else W.FloatSlider
    widget = kind(value=value, min=low, max=high, step=step, description=description or name,
                  continuous_update=True, style={"description_width": "initial"},
                  layout=W.Layout(width="420px"))
    return _bound(lab, widget, name)


def toggle(name, value=False, description=None):
    """A check box that sets knob `name` (True/False) on every rank."""
    import ipywidgets as W

    lab = _lab()
    widget = W.Checkbox(value=value, description=description or name, indent=False)
    return _bound(lab, widget, name)


def _bound(lab, widget, name):
    """The widget, setting knob `name` on every rank now and whenever it changes."""
    widget.add_class(f"ddplab-knob-{name}")
    lab.knobs.set(name, widget.value)
    widget.observe(lambda change: lab.knobs.set(name, change["new"], wait=False), names="value")
    return widget
