"""The dashboard in the two front ends users open notebooks in, JupyterLab and Notebook 7 (the
`notebook` package), rendered by headless Chromium (driven by Playwright).

Runs the quickstart notebook with Run > Run All in each and watches the live dashboard while it trains.
"""
import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "ui" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("jupyterlab")]  # one worker: the servers, one browser

# What differs between the front ends: the server's command (python -m MODULE), where a notebook opens, the
# name the page gives itself (jupyter-config-data's appName), and the screenshots' names. The page itself
# (Lumino menus, notebook panel, toolbar, output areas) is made of the same JupyterLab components in both.
FRONT_ENDS = {
    "jupyterlab": {"module": "jupyterlab", "open": "/lab/tree/{}?reset&", "app": "JupyterLab", "suffix": "",
                   "how": "./dev test installs it (a dependency of ddplab)"},  # reset: only this notebook open
    "notebook7": {"module": "notebook", "open": "/notebooks/{}?", "app": "Jupyter Notebook", "suffix": "-notebook7",
                  "how": "./dev test installs it (notebook>=7, in the test extra)"},
}
# no "would you like to get notified about Jupyter news?" toast over the pictures
NO_NEWS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                                "checkForUpdates": False}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_server(tmp_path_factory, front_end, kernels=None):
    """The front end's own server (python -m jupyterlab, python -m notebook) on loopback with a token,
    serving a copy of the quick start; ended by its pid. kernels: a folder of kernel specs found first
    (JUPYTER_PATH), e.g. a python3 on ipywidgets 7."""
    fe = FRONT_ENDS[front_end]
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: ./dev test installs Debian's chromium package")
    try:
        __import__(fe["module"])
    except ImportError:
        pytest.fail(f"{fe['module']} is not installed: {fe['how']}")
    if front_end == "notebook7":
        import notebook
        if int(notebook.__version__.split(".")[0]) < 7:
            pytest.fail(f"notebook {notebook.__version__} is not Notebook 7: {fe['how']}")
    root = tmp_path_factory.mktemp(front_end)
    shutil.copy(ROOT / "notebooks" / "00_quickstart.ipynb", root)
    port, token = free_port(), "ddplab-test-token"
    home = tmp_path_factory.mktemp(f"{front_end}-home")  # settings and workspaces of this server only
    for name, settings in NO_NEWS.items():
        (home / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / name).write_text(json.dumps(settings))
    log = open(home / "jupyter.log", "w")  # (not in root: the file browser of the pictures shows root)
    server = subprocess.Popen(
        [sys.executable, "-m", fe["module"], "--no-browser", "--allow-root", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", "--ServerApp.open_browser=False"],
        stdout=log, stderr=subprocess.STDOUT, cwd=root,
        # both front ends read their settings and workspaces from JUPYTERLAB_*_DIR
        env=dict(os.environ, PYTHONPATH=str(ROOT), JUPYTER_CONFIG_DIR=str(home / "config"),
                 JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
                 JUPYTERLAB_WORKSPACES_DIR=str(home / "ws"), **({"JUPYTER_PATH": str(kernels)} if kernels else {})))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError as exc:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{front_end} did not start:\n" + (home / "jupyter.log").read_text()[-3000:]) from exc
                time.sleep(0.3)  # the server answers nothing we could wait on before it listens
        yield url, token, root
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        log.close()


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    with jupyter_server(tmp_path_factory, "jupyterlab") as server:
        yield server


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    with jupyter_server(tmp_path_factory, "notebook7") as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


# one look at the first (live: %ddp_start's) dashboard: the ranks' states, each plot's frame and the number of
# points its lines have, the swimlanes
LOOK = """() => {
  const dash = document.querySelector('.ddplab-dashboard');
  if (!dash) return null;
  const plot = (cls) => { const s = dash.querySelector(`.${cls} svg`);
    return s ? {frame: s.dataset.frame, points: Array.from(s.querySelectorAll('polyline'))
      .reduce((n, l) => n + l.getAttribute('points').trim().split(/\\s+/).length, 0)} : null; };
  const lanes = dash.querySelector('.ddplab-timeline-view svg.ddplab-swimlane');
  return {states: Array.from(dash.querySelectorAll('g.rank-token')).map(g => g.dataset.state),
    loss: plot('ddplab-loss-plot'), rate: plot('ddplab-rate-plot'),
    lanes: lanes && {backward: lanes.querySelectorAll('rect.span-backward').length,
      ranks: Array.from(lanes.querySelectorAll('text')).map(t => t.textContent)
        .filter(t => t.startsWith('rank ')).map(t => +t.slice(5)),
      x: Array.from(lanes.querySelectorAll('rect.span-backward')).map(r => r.getAttribute('x')).join(',')}};
}"""
# every change of the dashboard, recorded in the page as it happens (polling from here can miss a state that
# lasts less than a round trip when the machine is busy)
WATCH = """() => {
  window.__ddplabLooks = [];
  let last = null;
  new MutationObserver(() => {
    const look = (""" + LOOK + """)();
    if (look && look.states.length && JSON.stringify(look) !== last) {
      last = JSON.stringify(look);
      window.__ddplabLooks.push(look);
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true,
                              attributeFilter: ['data-state', 'data-frame']});
}"""
# the loss plot's frames drawn while some rank trained, as the page saw them
TRAINING_FRAMES = """() => new Set(window.__ddplabLooks.filter(l => l.states.includes('training') && l.loss)
  .map(l => l.loss.frame)).size"""
FINISHED = """() => { const looks = window.__ddplabLooks;
  return looks.some(l => l.states.includes('training')) && looks[looks.length - 1].states.every(s => s === 'stopped'); }"""


def run_all(browser, url, token, notebook, height, width=1400, front_end="jupyterlab"):
    """Open the notebook in the front end, wait for its kernel, then Run > Run All (both front ends have it)."""
    fe = FRONT_ENDS[front_end]
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    page.goto(f"{url}{fe['open'].format(notebook)}token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell >> visible=true", timeout=90_000)
    app = page.evaluate("() => JSON.parse(document.getElementById('jupyter-config-data').textContent).appName")
    assert app == fe["app"], f"{front_end}: the page is {app!r}"
    # the front end may ask which kernel to start: take the one the notebook names (Python 3)
    try:
        page.click(".jp-Dialog .jp-mod-accept", timeout=10_000)
    except Exception:  # noqa: BLE001, S110 - Playwright's TimeoutError: no dialog, the kernel started by itself
        pass
    page.wait_for_selector(".jp-NotebookPanel-toolbar :text('Python 3 (ipykernel)')", timeout=60_000)
    page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
                           "?.dataset.status === 'idle'", timeout=60_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-item[data-command='runmenu:run-all']")  # Run All Cells
    return page


@pytest.fixture(params=list(FRONT_ENDS))
def front_end(request):
    """(name, (url, token, root)): the front end's server, started when the first test needs it."""
    return request.param, request.getfixturevalue(request.param)


def test_dashboard_renders_and_updates_live(front_end, browser):
    name, (url, token, root) = front_end
    follow_the_quickstart(browser, name, url, token, FRONT_ENDS[name]["suffix"], frames=4)


def shoot(element, path, tries=3):
    """A picture of an element; where the page redraws its output in place (the HTML dashboard, once a
    second) the element may be replaced while the picture is taken: the new one is taken instead."""
    for attempt in range(tries):
        try:
            return element.screenshot(path=str(path))
        except Exception as exc:  # noqa: BLE001 - Playwright's Error: "Element is not attached to the DOM"
            if "not attached" not in str(exc) or attempt == tries - 1:
                raise


def follow_the_quickstart(browser, name, url, token, suffix, frames):
    """Run the quick start and follow its live dashboard (`frames`: the loss plot's frames to see while it trains)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page = run_all(browser, url, token, "00_quickstart.ipynb", height=1000, front_end=name)
    page.evaluate(WATCH)
    began = time.monotonic()

    def looks():
        return page.evaluate("() => window.__ddplabLooks")

    def timed_out(what):
        page.screenshot(path=str(ARTIFACTS / f"timeout{suffix}.png"), full_page=True)
        pytest.fail(f"{name}: {what} in 180 s; the last states seen: {[l['states'] for l in looks()[-5:]]}")

    # mid-training (the loss plot's 4th frame while training): the pictures of the live dashboard
    try:
        page.wait_for_function(f"() => ({TRAINING_FRAMES})() >= {frames}", timeout=180_000, polling=50)
    except Exception:  # noqa: BLE001 - Playwright's TimeoutError
        timed_out(f"the loss plot did not draw {frames} frames while the ranks trained")
    live = page.locator(".ddplab-dashboard").first
    live.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))  # the front end around it (docs/getting-started.md)
    shoot(live, ARTIFACTS / f"dashboard-live{suffix}.png")
    try:
        page.wait_for_function(FINISHED, timeout=max(1_000, 180_000 - 1000 * (time.monotonic() - began)))
    except Exception:  # noqa: BLE001 - Playwright's TimeoutError
        timed_out("the notebook did not finish")

    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']:has-text('Error')")
    assert errors.count() == 0, errors.first.inner_text()
    seen = looks()
    # each rank went init -> training -> done, and ended done before %ddp_stop (as the page saw it change)
    states_seen = [tuple(l["states"]) for i, l in enumerate(seen) if i == 0 or l["states"] != seen[i - 1]["states"]]
    assert ("init",) * 4 in states_seen  # start-up shown live (ready passes too fast to see with Run All)
    assert any("training" in s for s in states_seen)
    assert states_seen[-2] == ("done",) * 4 and states_seen[-1] == ("stopped",) * 4, states_seen[-5:]
    training = [l for l in seen if "training" in l["states"]]
    # both plots were drawn again and again while the ranks trained, their lines growing
    for plot in ("loss", "rate"):
        drawn = [l[plot] for l in training if l[plot]]
        seen_frames = {d["frame"] for d in drawn}
        assert len(seen_frames) >= min(frames, 3), f"{name}: {plot} plot frames while training: {len(seen_frames)}"
        points = [d["points"] for d in drawn]
        assert max(points) > min(points), f"{name}: the {plot} plot's lines did not grow: {drawn}"
    # the timeline's swimlanes were drawn while the ranks trained, with their backward passes, and changed as the
    # steps went by: redrawn at most once a second while the cell runs (widget.TIMELINE_EVERY; the page view, once a
    # second in all), and at the cell's end. Until the training's first spans come the lanes of the cell before it
    # stay (no backward); a training of 2-3 s may then show its own lanes once before its end
    def lanes_of(looks):
        return [json.loads(lane) for lane in {json.dumps(l["lanes"], sort_keys=True) for l in looks if l["lanes"]}]

    lanes = lanes_of(training)
    ended = lanes_of([l for l in seen if l["states"] == ["done"] * 4])  # the cell's last frame, before %ddp_stop
    assert all(set(lane["ranks"]) == {0, 1, 2, 3} for lane in lanes + ended), lanes + ended
    frames_seen = len({l["loss"]["frame"] for l in training if l["loss"]})
    while_training = [lane for lane in lanes if lane["backward"] > 0]
    assert len(while_training) >= (frames_seen >= 3), f"{name}: swimlanes in {frames_seen} frames: {lanes}"
    changed = {json.dumps(lane, sort_keys=True) for lane in while_training + ended if lane["backward"] > 0}
    assert len(changed) >= 1 + (frames_seen >= 3), f"{name}: the swimlanes did not change as the steps went by: " \
        f"{lanes}, then {ended}"

    # the training cell keeps a static picture of its end: one row per rank, every rank at done
    snap = page.locator(".ddplab-snapshot").first
    snap.scroll_into_view_if_needed()
    assert snap.locator("tr.ddplab-rank").count() == 4
    assert snap.locator("g.rank-token[data-state='done']").count() == 4
    snap.screenshot(path=str(ARTIFACTS / f"dashboard-snapshot{suffix}.png"))
    assert live.locator("tr.ddplab-rank").count() == 4
    for error in ("Error displaying widget", "Click to show javascript error", "Failed to load model class"):
        assert page.get_by_text(error).count() == 0, f"{name}: {error!r} on the page"  # a widget the front end could not draw
    return page


WIDGETS7 = ["ipywidgets==7.7.1", "ipython_genutils==0.2.0"]  # what Colab's kernels run (ipywidgets 7 imports the second)


@pytest.fixture(scope="module")
def widgets7_kernels(tmp_path_factory):
    """A folder of kernel specs whose python3 is this environment with ipywidgets 7.7.1 in front: a small
    virtual environment (kept under /var/cache/ddplab-tests) holding only those, and a .pth file that puts
    this environment's packages after them."""
    import site

    from tests.users.accounts import cached_venv

    base = site.getsitepackages()[0]

    def fill(python):
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *WIDGETS7], check=True,
                       capture_output=True, timeout=300)
        own = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                             capture_output=True, text=True).stdout.strip()
        pathlib.Path(own, "ddplab-test-env.pth").write_text(base + "\n")

    python = cached_venv("widgets7", [WIDGETS7, sys.version, base], fill)
    found = subprocess.run([str(python), "-c", "import ipywidgets, ipykernel, torch; print(ipywidgets.__version__)"],
                           capture_output=True, text=True, timeout=120)
    assert found.stdout.strip() == "7.7.1", found.stdout + found.stderr
    kernels = tmp_path_factory.mktemp("widgets7-kernels")
    spec = kernels / "kernels" / "python3" / "kernel.json"
    spec.parent.mkdir(parents=True)
    spec.write_text(json.dumps({"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                                "display_name": "Python 3 (ipykernel)", "language": "python"}))
    return kernels


@pytest.mark.parametrize("name", list(FRONT_ENDS))
def test_on_colabs_ipywidgets_7_the_dashboard_is_html_updated_in_place(name, widgets7_kernels, browser,
                                                                        tmp_path_factory):
    """Colab's kernels run ipywidgets 7.7.1, which JupyterLab 4 and Notebook 7 cannot draw (their widget
    manager knows the models of 8 only), nor Colab ipywidgets 8: there the dashboard is one HTML output
    updated in place (dashboard/page.py), about once a second while the ranks train."""
    with jupyter_server(tmp_path_factory, name, kernels=widgets7_kernels) as (url, token, root):
        page = follow_the_quickstart(browser, name, url, token, FRONT_ENDS[name]["suffix"] + "-ipywidgets7", frames=2)
        assert page.locator(".ddplab-page").count() >= 1  # the page view, not widgets


FITS = """() => Array.from(document.querySelectorAll('.ddplab-dashboard .ddplab-table')).map(t => {
  const area = t.closest('.jp-OutputArea-output').getBoundingClientRect();
  const box = t.getBoundingClientRect();
  const cut = Array.from(t.querySelectorAll('th, td')).some(c => c.scrollWidth > c.clientWidth + 1
      || c.getBoundingClientRect().right > area.right + 1);
  return {inside: box.right <= area.right + 1, cut, right: box.right, area: area.right};
})"""

ZH_NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "%load_ext ddplab\n%ddp_start 2 --lang zh"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "%%ddp\nfrom ddplab.workloads import train_ddp\nsummary = train_ddp(steps=80)"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,  # (Run All stops at errors)
         "source": "try:\n    get_ipython().run_cell_magic('ddp', '', 'secret = 41 + rank\\nraise ValueError(\"boom\")')\n"
                   "except Exception:\n    pass"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "%ddp_debug 1"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def test_chinese_labels_render_with_a_cjk_font(jupyterlab, browser):
    url, token, root = jupyterlab
    (root / "zh.ipynb").write_text(json.dumps(ZH_NOTEBOOK))
    page = run_all(browser, url, token, "zh.ipynb", height=900, width=1280)  # a laptop, side bar open
    page.wait_for_function(
        "() => { const t = document.querySelectorAll('.ddplab-snapshot g.rank-token[data-state=\"done\"]');"
        " return t.length === 2; }", timeout=180_000)
    live = page.locator(".ddplab-dashboard").first
    text = live.inner_text()
    for word in ("状态", "步数", "损失", "样本/秒", "前向", "反向", "等待"):
        assert word in text
    svg = live.locator("svg.ddplab-diagram").inner_html()
    for word in ("初始化", "训练中", "完成", "失败", "丢失"):
        assert word in svg
    # a CJK font is installed, so 训 is drawn as itself: its pixels differ from the box drawn for a
    # code point no font has (U+E000)
    assert page.evaluate("""() => {
        const draw = (ch) => { const c = document.createElement('canvas'); c.width = c.height = 32;
            const g = c.getContext('2d'); g.font = '24px sans-serif'; g.fillText(ch, 2, 26);
            return Array.from(g.getImageData(0, 0, 32, 32).data).join(','); };
        return draw('训') !== draw(String.fromCharCode(0xE000)) && draw('训') !== draw('川'); }""")
    # %ddp_debug asks for pdb commands through JupyterLab's input box
    box = page.locator(".jp-Stdin-input").first
    box.wait_for(timeout=60_000)
    box.fill("p secret")
    box.press("Enter")
    page.wait_for_function("() => document.body.innerText.includes('(Pdb rank 1)') && "
                           "/\\n42\\n/.test(document.body.innerText)", timeout=30_000)
    page.locator(".jp-Stdin-input").first.fill("q")
    page.locator(".jp-Stdin-input").first.press("Enter")
    live.scroll_into_view_if_needed()
    # Chromium runs an SVG's animations only once it is on screen: the picture after the tokens' slide
    live.locator("svg.ddplab-diagram").wait_for(timeout=10_000)
    page.wait_for_function("() => document.querySelector('.ddplab-dashboard svg.ddplab-diagram')"
                           ".getCurrentTime() > 0.5", timeout=10_000)
    live.scroll_into_view_if_needed()  # the notebook may have scrolled on as the debugger ended
    live.screenshot(path=str(ARTIFACTS / "dashboard-zh.png"))
    # nothing clipped at 1280 px with the file browser open: every table (live and the cell's
    # still picture) ends inside its output area, and no cell of it is cut
    assert page.locator(".jp-SideBar .lm-TabBar-tab.lm-mod-current").count() >= 1  # the side bar is open
    fits = page.evaluate(FITS)
    assert len(fits) >= 2 and all(f["inside"] and not f["cut"] for f in fits), fits
    page.click(".lm-MenuBar-itemLabel:text-is('Kernel')")
    page.click(".lm-Menu-item[data-command='kernelmenu:shutdown']")


def code_cells(*sources):
    return json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
                  for s in sources],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5})


KNOB_NOTEBOOK = code_cells(
    "%load_ext ddplab\n%ddp_start 4",
    "%%ddp --background\nimport time\nwhile not ddplab.knob('stop', False):\n"
    "    time.sleep(0.02 * (1 + ddplab.knob('slow', 0) * (rank == 2)))\n    ddplab.log(loss=1.0, samples=1)",
    "from ddplab.lessons import knobs\n"
    "display(knobs.slider('slow', 0, 8, value=0, description='rank 2 slower'), knobs.toggle('stop'))")

RATES = """() => Array.from(document.querySelectorAll('.ddplab-dashboard tr.ddplab-rank')).slice(0, 4)
    .map(tr => parseFloat(tr.querySelectorAll('td')[4].innerText.replace(/,/g, '')))"""


def test_a_slider_changes_a_training_running_in_the_background(jupyterlab, browser):
    """%%ddp --background leaves the kernel free, so a widget's events reach it while the ranks
    train: moving the slider slows rank 2, and the live table shows it within a second or two."""
    url, token, root = jupyterlab
    (root / "knob.ipynb").write_text(KNOB_NOTEBOOK)
    page = run_all(browser, url, token, "knob.ipynb", height=1000)
    readout = page.locator(".ddplab-knob-slow .widget-readout")
    readout.wait_for(timeout=180_000)
    page.wait_for_function(f"() => ({RATES})().length === 4 && ({RATES})().every(r => r > 30)", timeout=60_000)
    before = page.evaluate(RATES)
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("4")
    page.keyboard.press("Enter")
    moved = time.monotonic()
    # rank 2 now sleeps 5x longer a step: its samples/s falls below 80% of the others'
    page.wait_for_function(f"""() => {{ const r = ({RATES})();
        return r[2] < 0.8 * Math.min(r[0], r[1], r[3]); }}""", timeout=10_000, polling=50)
    reacted = time.monotonic() - moved
    after = page.evaluate(RATES)
    print(f"samples/s before {before}, after {after}; the table reacted {reacted:.2f} s after the slider moved")
    assert reacted < 2.5, f"the dashboard took {reacted:.1f} s to show the slower rank"
    page.locator(".ddplab-dashboard").first.screenshot(path=str(ARTIFACTS / "dashboard-knob.png"))
    page.locator(".ddplab-knob-stop input[type=checkbox]").click()  # the loop ends: every rank done
    page.wait_for_function(
        "() => { const t = document.querySelectorAll('.ddplab-dashboard g.rank-token[data-state=\"done\"]');"
        " return t.length >= 4; }", timeout=30_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Kernel')")
    page.click(".lm-Menu-item[data-command='kernelmenu:shutdown']")


BREAKPOINT_NOTEBOOK = code_cells(
    "%load_ext ddplab\n%ddp_start 2",
    "%%ddp\nx = 7 * (rank + 1)\nbreakpoint()\ny = x + 1",
    "%ddp_stop")


LAST_RANK0_STOPPED = """() => { const t = document.body.innerText, i = t.lastIndexOf('rank 0: ');
    return t.slice(i).startsWith('rank 0: stopped at a breakpoint'); }"""


def test_a_breakpoint_asks_for_commands_in_the_input_box(front_end, browser):
    """breakpoint() in a %%ddp cell stops both ranks; the front end's input box takes pdb commands for
    them, and their replies come back side by side; `c` lets the cell end."""
    name, (url, token, root) = front_end
    (root / "breakpoint.ipynb").write_text(BREAKPOINT_NOTEBOOK)
    page = run_all(browser, url, token, "breakpoint.ipynb", height=900, front_end=name)

    def answer(text):
        box = page.locator(".jp-Stdin-input").last
        box.wait_for(timeout=120_000)
        box.fill(text)
        box.press("Enter")

    # The prompt waits stepping.GATHER_WAIT for the ranks to reach the breakpoint; on a machine loaded
    # beyond that, an empty command asks again, with where every rank is now (at most 5 times).
    statuses = "() => document.body.innerText.split('rank 1: stopped at a breakpoint').length - 1"
    for _ in range(5):
        page.locator(".jp-Stdin-input").last.wait_for(timeout=120_000)
        if page.evaluate(LAST_RANK0_STOPPED):
            break
        seen = page.evaluate(statuses)
        answer("")
        page.wait_for_function(f"() => ({statuses})() > {seen}", timeout=60_000)
    answer("p x")  # (a busy machine: the ranks answer within stepping.REPLY_WAIT)
    try:
        page.wait_for_function("() => /rank 0[^\\n]*│ rank 1/.test(document.body.innerText) && "
                               "/\\n7\\s+│ 14\\n/.test(document.body.innerText)", timeout=90_000)
    except Exception:  # noqa: BLE001 - Playwright's TimeoutError: what the page showed, to read after the run
        page.screenshot(path=str(ARTIFACTS / f"breakpoint-timeout{FRONT_ENDS[name]['suffix']}.png"), full_page=True)
        pytest.fail(f"{name}: no side-by-side reply to 'p x' in 90 s; the page's text ends with:\n"
                    + page.inner_text("body")[-1500:])
    assert "rank 1: stopped at a breakpoint, cell line 3" in page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / f"breakpoint{FRONT_ENDS[name]['suffix']}.png"), full_page=True)
    answer("c")
    page.wait_for_function("() => document.body.innerText.includes('stopped 2 ranks')", timeout=60_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Kernel')")
    page.click(".lm-Menu-item[data-command='kernelmenu:shutdown']")
