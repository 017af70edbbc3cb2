"""Build the notebooks from their sources: notebooks/src/NN_name.py -> notebooks/NN_name.ipynb.

Sources are plain Python in the "percent" format (as jupytext and VS Code read it):

    # %% [markdown]
    # # A title
    # Some text.

    # %%
    %ddp_start 4

    # %% tags=["raises-exception"]
    ...a cell that is meant to fail (nbclient goes on after it)

Run `python tools/make_notebooks.py` after editing a source; `--check` fails if a notebook
is out of date with its source (the tests run it). Notebooks are committed without outputs.
"""
import json
import pathlib
import re
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
MARKER = re.compile(r"^# %%( \[markdown\])?(?: tags=(\[.*\]))?\s*$")


def cells_of(text):
    cells, kind, tags, lines = [], None, [], []

    def close():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(re.sub(r"^# ?", "", line) for line in body.splitlines())
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in text.splitlines():
        m = MARKER.match(line)
        if m:
            close()
            kind, tags, lines = ("markdown" if m.group(1) else "code"), json.loads(m.group(2) or "[]"), []
        elif kind is not None:
            lines.append(line)
    close()
    return cells


def notebook_of(source):
    nb = nbformat.v4.new_notebook(cells=cells_of(source.read_text()), metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    for i, cell in enumerate(nb.cells):  # stable ids: rebuilding an unchanged source changes nothing
        cell.id = f"{source.stem[:2]}-{i:02d}"
    return nbformat.writes(nb) + "\n"


def main(check=False):
    stale = []
    for source in sorted((ROOT / "src").glob("*.py")):
        target = ROOT / f"{source.stem}.ipynb"
        text = notebook_of(source)
        if target.exists() and target.read_text() == text:
            continue
        if check:
            stale.append(target.name)
        else:
            target.write_text(text)
            print("wrote", target.relative_to(ROOT.parent))
    if stale:
        sys.exit(f"out of date with notebooks/src: {', '.join(stale)}; run python tools/make_notebooks.py")


if __name__ == "__main__":
    main(check="--check" in sys.argv[1:])
