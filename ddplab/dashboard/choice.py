"""Which view shows a pool where it runs (Lab.use_view): imported by the Lab, it imports the view it
chooses only (no widgets in a terminal)."""


def for_here(config):
    """The view for where we run: the widget dashboard in a notebook (just the cells' output with
    dashboard=False; the same dashboard as HTML updated in place where widgets do not render, page.py),
    lines of text elsewhere (a terminal, a script)."""
    from ..shared.config import tunables
    from .page import widgets_render
    from .text import LiveOutput, TextView, in_notebook

    if not in_notebook():
        return TextView(lang=config.lang)
    if not config.dashboard:
        return LiveOutput()
    if not (tunables().widgets and widgets_render()):  # Colab, a kernel on ipywidgets 7: HTML updated in place
        from .page import PageDashboard

        return PageDashboard(config.ranks, lang=config.lang)
    from .widget import Dashboard

    return Dashboard(config.ranks, lang=config.lang)
