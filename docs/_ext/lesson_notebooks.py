"""The lessons, with their outputs, for the docs site: docs/lessons/ (en) and docs/lessons/zh/ (zh).

Every notebook of notebooks/ and notebooks/zh/ (the quick start, the 21 lessons and the index) is
copied to docs/lessons/ with its outputs, which myst-nb renders as they are (nb_execution_mode
"off"). The outputs come, in this order, from:

1. tests/notebooks/artifacts/[zh/]NAME.ipynb: the copy the test suite executed (./dev test runs the
   lessons, then builds the docs, so in CI no lesson runs twice);
2. docs/_build/executed/[zh/]NAME.ipynb: a copy an earlier docs build executed;
3. otherwise the notebook is executed now, once, in a fresh kernel (as tools/run_lesson.py does),
   and kept in docs/_build/executed/ for the next build. On a fresh clone `./dev docs` executes
   every lesson this way (a few minutes); a notebook without code cells (the index) is copied.

An executed copy is used only if its code cells are those of the notebook now (the cells' ids and
sources): the markdown is always the notebook's own. A notebook that fails where it is not meant
to (a cell without the raises-exception tag) fails the build.

Links from a lesson to the repository's README point to the docs' getting-started page instead.
Runs as a Sphinx extension (at builder-inited, before Sphinx looks for pages), or by hand:
`python docs/_ext/lesson_notebooks.py` prepares docs/lessons/ and says where each came from.
Environment: DDPLAB_DOCS_EXECUTE=never renders a notebook with no executed copy without outputs
(with a warning) instead of executing it.
"""
import copy
import logging
import os
import pathlib
import re
import sys
import time

DOCS = pathlib.Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "tests" / "notebooks" / "artifacts"
EXECUTED = DOCS / "_build" / "executed"
OUT = DOCS / "lessons"
README_LINK = re.compile(r"\]\((?:\.\./)+README\.md\)")
# The lesson tests run the lessons one after another in one kernel, so a lesson's %load_ext ddplab
# says what it would not say in a fresh kernel: that line is left out of the pages.
HARNESS = "The ddplab extension is already loaded. To reload it, use:\n  %reload_ext ddplab\n"
# and what %ddp_start says of the test machine's other accounts (the ones the test tiers make): a
# reader's machine is not that one.
TEST_MACHINE = re.compile(r"^ddplab: (this machine has \d+ other account|本机还有 \d+ 个其他账户).*\n?", re.M)
# The tests run the notebooks as an account made for the run (tests/users/accounts.py: ddp + hex):
# its home is the reader's ~.
TEST_HOME = re.compile(r"/home/ddp[a-z]?[0-9a-f]{6,}")


def editions():
    """(folder relative to notebooks/, notebook path) of every notebook of both editions."""
    for sub in ("", "zh"):
        for path in sorted((NOTEBOOKS / sub).glob("*.ipynb")):
            yield sub, path


def code_of(nb):
    return [(c.get("id"), c.source) for c in nb.cells if c.cell_type == "code"]


def merged(source, executed):
    """The notebook `source` with the outputs of `executed`, or None if their code differs."""
    if executed is None or code_of(source) != code_of(executed):
        return None
    outputs = {c.get("id"): c for c in executed.cells if c.cell_type == "code"}
    nb = copy.deepcopy(source)
    for cell in nb.cells:
        if cell.cell_type == "code":
            done = outputs[cell.get("id")]
            cell.outputs = [o for o in done.outputs if not (o.output_type == "stream" and o.text == HARNESS)]
            for o in cell.outputs:
                if o.output_type == "stream":
                    o.text = TEST_HOME.sub("~", TEST_MACHINE.sub("", o.text))
            cell.execution_count = done.execution_count
            cell.metadata = {**cell.metadata, **{k: v for k, v in done.metadata.items() if k == "execution"}}
    if "widgets" in executed.metadata:  # the widgets' saved state: the dashboards render from it
        nb.metadata["widgets"] = executed.metadata["widgets"]
    return nb


def read(path):
    import nbformat

    return nbformat.read(path, as_version=4) if path.exists() else None


def unexpected_errors(nb):
    return [f"cell {i}: {o.get('ename')}: {o.get('evalue')}" for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and "raises-exception" not in c.metadata.get("tags", [])
            for o in c.outputs if o.output_type == "error"]


def execute(path):
    """Run a notebook top to bottom in a fresh kernel in its own folder (the zh edition's pool then
    speaks Chinese, as in JupyterLab); return the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    from bench.common import ipc_kernel

    quiet = logging.getLogger("lesson_notebooks.kernel")  # not nbclient's progress lines
    quiet.setLevel(logging.ERROR)
    nb = nbformat.read(path, as_version=4)
    km = ipc_kernel()  # socket files in a private folder: no TCP port
    km.log = quiet
    km.start_kernel(cwd=str(path.parent), env={**os.environ, "JPY_SESSION_NAME": str(path)})
    try:
        NotebookClient(nb, km=km, timeout=300, allow_errors=True, log=quiet,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        km.shutdown_kernel()  # gracefully: the lesson's pool and helpers end with it
    return nb


def prepare(say=print, warn=print, run=None):
    """Fill docs/lessons/; return {relative path: where its outputs came from}."""
    import nbformat

    run = os.environ.get("DDPLAB_DOCS_EXECUTE", "auto") != "never" if run is None else run
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # bench.common, for the kernel
    origins, wanted = {}, set()
    for sub, path in editions():
        rel = pathlib.Path(sub) / path.name
        source = nbformat.read(path, as_version=4)
        if not code_of(source):
            nb, origin = source, "copied (no code)"
        else:
            nb, origin = None, None
            for folder, name in ((ARTIFACTS, "tests/notebooks/artifacts"), (EXECUTED, "docs/_build/executed")):
                nb = merged(source, read(folder / rel))
                if nb is not None:
                    origin = name
                    break
            if nb is None and run:
                tic = time.monotonic()
                say(f"lesson_notebooks: executing notebooks/{rel} (no executed copy of this version)")
                done = execute(path)
                (EXECUTED / rel).parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(done, EXECUTED / rel)
                nb, origin = merged(source, done), f"executed now ({time.monotonic() - tic:.0f} s)"
            elif nb is None:
                nb, origin = source, "not executed (DDPLAB_DOCS_EXECUTE=never)"
                warn(f"notebooks/{rel}: no executed copy, rendered without outputs")
            failed = unexpected_errors(nb)
            if failed:
                warn(f"notebooks/{rel} ({origin}) failed: " + "; ".join(failed))
        for cell in nb.cells:  # the README's place in the docs: getting started
            if cell.cell_type == "markdown":
                cell.source = README_LINK.sub("](" + "../" * len(rel.parts[:-1]) + "../getting-started.md)",
                                              cell.source)
        nb.metadata.setdefault("ddplab", {})["outputs_from"] = origin
        text = nbformat.writes(nb) + "\n"
        target = OUT / rel
        wanted.add(target)
        if not target.exists() or target.read_text() != text:  # unchanged pages stay unchanged for Sphinx
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        origins[str(rel)] = origin
    for stale in OUT.rglob("*.ipynb"):  # a notebook that is gone from notebooks/
        if stale not in wanted:
            stale.unlink()
    return origins


def seconds(nb):
    """How long the notebook took to run, from its cells' execution times (None if not recorded)."""
    from datetime import datetime

    times = [c.metadata.get("execution", {}) for c in nb.cells if c.cell_type == "code"]
    try:
        start = datetime.fromisoformat(times[0]["iopub.execute_input"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(times[-1]["shell.execute_reply"].replace("Z", "+00:00"))
    except (IndexError, KeyError, ValueError):
        return None
    return (end - start).total_seconds()


def _builder_inited(app):
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    origins = prepare(say=log.info, warn=lambda text: log.warning(text, type="ddplab", subtype="lessons"))
    counts = {}
    for origin in origins.values():
        key = origin.split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    log.info("lesson_notebooks: " + ", ".join(f"{n} {key}" for key, n in sorted(counts.items())))


def _lesson_table(app, docname, source):
    """The {lesson-table} placeholder: one row per notebook, both editions, with how long each ran."""
    marker = "```{lesson-table}\n```"
    if marker not in source[0]:
        return
    import nbformat

    rows = ["| # | English | 中文 | study time | ran in (en / zh) |", "| --- | --- | --- | --- | --- |"]
    for path in sorted(OUT.glob("[0-9][0-9]_*.ipynb")):
        number = int(path.name[:2])
        cells, study = {}, "—"
        for lang, p in (("en", path), ("zh", OUT / "zh" / path.name)):
            if p.exists():
                nb = nbformat.read(p, as_version=4)
                title = nb.cells[0].source.splitlines()[0].lstrip("# ").strip()
                took = seconds(nb)
                minutes = re.search(r"\*\*Study time:\*\* about (\d+) minutes", nb.cells[0].source)
                study = f"~{minutes.group(1)} min" if minutes else study
                cells[lang] = (f"[{title}](lessons/{'zh/' if lang == 'zh' else ''}{path.name})",
                               f"{took:.0f} s" if took is not None else "—")
            else:
                cells[lang] = ("—", "—")
        rows.append(f"| {number} | {cells['en'][0]} | {cells['zh'][0]} | {study} | {cells['en'][1]} / {cells['zh'][1]} |")
    source[0] = source[0].replace(marker, "\n".join(rows))


def setup(app):
    app.connect("builder-inited", _builder_inited)
    app.connect("source-read", _lesson_table)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for rel, origin in prepare().items():
        print(f"docs/lessons/{rel:28} {origin}")
