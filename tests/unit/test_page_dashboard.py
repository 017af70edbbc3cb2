"""The dashboard as HTML updated in place (dashboard/page.py): chosen where widgets do not render (Colab,
a kernel on ipywidgets 7), sent at most once a second and at a cell's end, and in Colab only from the
kernel's main thread."""
import sys
import threading
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from ddplab.dashboard import page
from ddplab.dashboard.page import PageDashboard
from ddplab.shared import state as st
from ddplab.shared.config import PoolConfig, tunables
from ddplab.shared.metrics import LiveMetrics


@pytest.fixture
def sent(monkeypatch):
    """What the view sends to the front end: ("display" or "update", html, display_id, thread name)."""
    import IPython.display

    out = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=None: out.append(
        ("display", obj.data, display_id, threading.current_thread().name)))
    monkeypatch.setattr(IPython.display, "update_display", lambda obj, display_id=None: out.append(
        ("update", obj.data, display_id, threading.current_thread().name)))
    return out


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(page.time, "monotonic", lambda: now[0])
    return now


def training(n=2):
    lab = SimpleNamespace(run_state=st.RunState(n), metrics=LiveMetrics(n), spans=None)
    lab.run_state.set_all(st.INIT)
    lab.run_state.set_all(st.READY)
    lab.run_state.begin_cell(list(range(n)), 0.0)
    return lab


def log(lab, start, n=10):
    for r in range(lab.run_state.world_size):
        steps = np.arange(start, start + n)
        step, loss, rate = lab.metrics.add_points(r, steps, steps * 0.1 + 1.0, 1.0 / (1 + steps), np.full(n, 8.0))
        lab.run_state.points_arrived(r, step, loss, rate, 1.0, n)


def test_the_page_is_chosen_where_widgets_do_not_render(monkeypatch):
    import ipywidgets

    from ddplab.dashboard import choice, text
    from ddplab.dashboard.widget import Dashboard

    monkeypatch.setattr(text, "in_notebook", lambda: True)
    config = PoolConfig.make(2)
    assert type(choice.for_here(config)) is Dashboard  # ipywidgets 8, not Colab
    monkeypatch.setattr(ipywidgets, "__version__", "7.7.1")  # a kernel on Colab's ipywidgets
    view = choice.for_here(config)
    assert isinstance(view, PageDashboard) and not view.main_thread_only and view.threadsafe
    monkeypatch.setattr(ipywidgets, "__version__", "8.1.5")
    monkeypatch.setitem(sys.modules, "google.colab", ModuleType("google.colab"))  # Colab, whatever its ipywidgets
    view = choice.for_here(config)
    assert isinstance(view, PageDashboard) and view.main_thread_only and not view.threadsafe
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.setattr(tunables(), "widgets", False)  # %config DDPLab.widgets = False
    assert isinstance(choice.for_here(config), PageDashboard)


def test_the_page_draws_what_the_widgets_draw_and_is_sent_at_most_once_a_second(sent, clock):
    lab = training()
    view = PageDashboard(2, title="my pool")
    view.show()  # (%ddp_start's output)
    assert [s[0] for s in sent] == ["display"] and sent[0][2] == view.display_id
    log(lab, 0)
    view.update(lab)  # the ranks train: the page in the cell's output too, the same display id, drawn
    kind, html, display_id, _ = sent[-1]
    assert (kind, display_id, len(sent)) == ("display", view.display_id, 2)
    assert 'class="ddplab-dashboard ddplab-page"' in html and "my pool" in html
    assert html.count('class="rank-token"') == 2 and html.count('<tr class="ddplab-rank') == 2
    assert html.count("<polyline") >= 2  # the two ranks' losses
    log(lab, 10)
    clock[0] += 0.5
    view.update(lab)
    assert len(sent) == 2  # within a second of the last page: nothing sent
    clock[0] += 0.6
    view.update(lab)
    assert sent[-1][:3:2] == ("update", view.display_id) and sent[-1][1] != html
    log(lab, 20)
    clock[0] += 0.3
    view.update(lab, final=True)  # a cell's last frame: at once
    assert len(sent) == 4
    lab.run_state.set_all(st.DONE)
    lab.run_state.end_cell(2.0)
    view.in_cell = False
    view.end(lab)  # drawn from a timer (the widget dashboard's way), the pages shown get its last frame
    view._pending.join(5)
    assert 'data-state="done"' in sent[-1][1] and sent[-1][0] == "update"


def test_a_training_cell_shows_the_page_live_then_keeps_a_still_picture(sent, monkeypatch):
    import IPython.display

    cleared = []
    monkeypatch.setattr(IPython.display, "clear_output", lambda: cleared.append(True))
    lab = training()
    view = PageDashboard(2)
    lab.run_state.set_all(st.TRAINING)
    log(lab, 0)
    view.update(lab)  # the first frame while ranks train: the page in the cell's output
    assert [s[0] for s in sent] == ["display"] and 'data-state="training"' in sent[0][1]
    lab.run_state.set_all(st.DONE)
    lab.run_state.end_cell(1.0)
    view.end(lab)
    assert cleared and sent[-1][0] == "display" and sent[-1][2] is None  # the still picture: no display id
    assert "ddplab-snapshot" in sent[-1][1] and sent[-2][0] == "update"  # (after the live page's last frame)


def test_in_colab_only_the_main_thread_draws(sent, clock):
    lab = training()
    view = PageDashboard(2, main_thread_only=True)
    view.show()
    log(lab, 0)
    clock[0] += 2

    def from_a_thread():
        view.update(lab, final=True)
        view.end(lab)

    worker = threading.Thread(target=from_a_thread, name="watcher")
    worker.start()
    worker.join(5)
    assert len(sent) == 1 and view.frames == 0  # nothing drawn, nothing sent from another thread
    view.update(lab)
    assert len(sent) == 2 and sent[-1][3] == threading.main_thread().name
    lab.run_state.set_all(st.DONE)
    lab.run_state.end_cell(1.0)
    view.end(lab)  # a quick cell's last frame: here and now (the widget dashboard draws it from a timer)
    assert sent[-1][3] == threading.main_thread().name and 'data-state="done"' in sent[-1][1]
