"""The dashboard in a real JupyterLab, rendered by headless Chromium (driven by Playwright).

Runs the quickstart notebook with Run > Run All and watches the live dashboard while it trains.
"""
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
pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("jupyterlab")]  # one server


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """JupyterLab on loopback with a token, serving a copy of the notebooks; ended by its pid."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: ./dev test installs Debian's chromium package")
    root = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "notebooks" / "00_quickstart.ipynb", root)
    port, token = free_port(), "ddplab-test-token"
    home = tmp_path_factory.mktemp("jupyter-home")  # settings and workspaces of this server only
    log = open(root / "jupyter.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", "--ServerApp.open_browser=False", f"--LabApp.workspaces_dir={home / 'ws'}",
         f"--LabApp.user_settings_dir={home / 'settings'}"],
        stdout=log, stderr=subprocess.STDOUT, cwd=root,
        env=dict(os.environ, PYTHONPATH=str(ROOT), JUPYTER_CONFIG_DIR=str(home / "config"),
                 JUPYTER_RUNTIME_DIR=str(home / "runtime")))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError as exc:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + (root / "jupyter.log").read_text()[-3000:]) from exc
                time.sleep(0.3)
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
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


TOKEN_STATES = """() => {
  const dash = document.querySelector('.ddplab-dashboard');
  if (!dash) return null;
  return Array.from(dash.querySelectorAll('g.rank-token')).map(g => g.dataset.state);
}"""
# every change of the tokens' states, recorded in the page as it happens (polling from here can miss a
# state that lasts less than a round trip when the machine is busy)
WATCH_STATES = """() => {
  window.__ddplabStates = [];
  let last = null;
  new MutationObserver(() => {
    const states = (""" + TOKEN_STATES + """)();
    if (states && states.length && JSON.stringify(states) !== last) {
      last = JSON.stringify(states);
      window.__ddplabStates.push(states);
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-state']});
}"""
# the loss plot's lines (an SVG over the axes picture) carry the number of the frame they show
LOSS_FRAME = "() => { const s = document.querySelector('.ddplab-loss-plot svg'); return s ? s.dataset.frame : null; }"


def run_all(browser, url, token, notebook, height, width=1400):
    """Open the notebook in JupyterLab, wait for its kernel, then Run > Run All."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}")  # reset: only this notebook open
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell >> visible=true", timeout=90_000)
    # JupyterLab may ask which kernel to start: take the one the notebook names (Python 3)
    try:
        page.click(".jp-Dialog .jp-mod-accept", timeout=10_000)
    except Exception:  # noqa: BLE001, S110 - Playwright's TimeoutError: no dialog, the kernel started by itself
        pass
    page.wait_for_selector(".jp-NotebookPanel-toolbar :text('Python 3 (ipykernel)')", timeout=60_000)
    page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
                           "?.dataset.status === 'idle'", timeout=60_000)
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-item[data-command='runmenu:run-all']")
    return page


def test_dashboard_renders_and_updates_live_in_jupyterlab(jupyterlab, browser):
    url, token, root = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    page = run_all(browser, url, token, "00_quickstart.ipynb", height=1000)
    page.evaluate(WATCH_STATES)

    frames, states_seen, training_frames, live_shot, lanes = set(), [], set(), False, set()
    deadline = time.monotonic() + 180
    last_states = None
    while time.monotonic() < deadline:
        states = page.evaluate(TOKEN_STATES)
        src = page.evaluate(LOSS_FRAME)
        if states:
            if states != last_states:
                states_seen.append(tuple(states))
                last_states = states
            lane = page.evaluate(SWIMLANE)
            if lane and "training" in states:
                lanes.add(lane)
            if src:
                frames.add(src)
                if "training" in states:
                    training_frames.add(src)
                    if len(training_frames) == 4 and not live_shot:  # mid-training, for the README
                        page.locator(".ddplab-dashboard").first.screenshot(path=str(ARTIFACTS / "dashboard-live.png"))
                        live_shot = True
            if all(s == "stopped" for s in states) and len(states_seen) > 2:
                break
        time.sleep(0.05)
    else:
        page.screenshot(path=str(ARTIFACTS / "timeout.png"), full_page=True)
        pytest.fail(f"the notebook did not finish in 180 s; states seen: {states_seen[-5:]}")

    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']:has-text('Error')")
    assert errors.count() == 0, errors.first.inner_text()
    # each rank went init -> training -> done, and ended done before %ddp_stop (as the page saw it change)
    states_seen = [tuple(s) for s in page.evaluate("() => window.__ddplabStates")]
    assert ("init",) * 4 in states_seen  # start-up shown live (ready passes too fast to see with Run All)
    assert any("training" in s for s in states_seen)
    assert states_seen[-2] == ("done",) * 4 and states_seen[-1] == ("stopped",) * 4
    assert len(training_frames) >= 3, f"loss plot frames while training: {len(training_frames)}"
    # the timeline's swimlanes were drawn while the ranks trained, and changed as the steps went by
    assert len(lanes) >= 2 and all(lane["backward"] > 0 and set(lane["ranks"]) == {0, 1, 2, 3}
                                   for lane in map(json.loads, lanes)), lanes

    # the training cell keeps a static picture of its end: one row per rank, every rank at done
    snap = page.locator(".ddplab-snapshot").first
    snap.scroll_into_view_if_needed()
    assert snap.locator("tr.ddplab-rank").count() == 4
    assert snap.locator("g.rank-token[data-state='done']").count() == 4
    snap.screenshot(path=str(ARTIFACTS / "dashboard-snapshot.png"))
    live = page.locator(".ddplab-dashboard").first
    assert live.locator("tr.ddplab-rank").count() == 4
    live.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"))


SWIMLANE = """() => { const s = document.querySelector('.ddplab-dashboard .ddplab-timeline-view svg.ddplab-swimlane');
  if (!s) return null;
  return JSON.stringify({backward: s.querySelectorAll('rect.span-backward').length,
    comm: s.querySelectorAll('rect.span-comm').length, ranks: Array.from(s.querySelectorAll('text'))
      .map(t => t.textContent).filter(t => t.startsWith('rank ')).map(t => +t.slice(5)),
    x: Array.from(s.querySelectorAll('rect.span-backward')).map(r => r.getAttribute('x')).join(',')}); }"""

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
