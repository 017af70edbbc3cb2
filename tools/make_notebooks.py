"""Build the notebooks from their sources: notebooks/src/NN_name.py -> notebooks/NN_name.ipynb
(English) and notebooks/zh/NN_name.ipynb (Chinese), the same code cells in both.

Sources are plain Python in the "percent" format (as jupytext and VS Code read it):

    # %% [markdown]
    # # A title
    # Some text.

    # %% [markdown] lang=zh
    # # 标题
    # 一些文字。（the Chinese edition of the markdown cell just above）

    # %%
    %ddp_start 4

    # %% tags=["hide-input"]
    ...cell tags, as JSON (a cell meant to fail uses `%%ddp --expect ErrorName` instead of a tag)

A source with any `lang=zh` cell has a Chinese edition, and then every markdown cell must have
its Chinese twin. (The Chinese edition's pool speaks Chinese by itself: ddplab reads the notebook's
folder, zh.) Run `python tools/make_notebooks.py [NN ...]` after editing a source (all, or the
lessons numbered NN; the index's and the README's lessons tables are made from the lessons' headers);
`--check` fails if a notebook or the README's table is out of date with the sources (the tests run
it). Notebooks are committed without outputs.
"""
import itertools
import json
import pathlib
import re
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
MARKER = re.compile(r"^# %%( \[markdown\])?(?: lang=(zh))?(?: tags=(\[.*\]))?\s*$")
LINKS = {"en": "\n\n*[中文版 · Chinese edition](zh/{name}.ipynb)*",
         "zh": "\n\n*[English edition · 英文版](../{name}.ipynb)*"}


CELL_IDS = itertools.count()


class SourceError(ValueError):
    pass


def new_cell(kind, source):
    """A cell as nbformat.v4.new_{kind}_cell makes it, without validating each alone (most of this tool's
    time): nbformat.writes validates the whole notebook."""
    extra = {"execution_count": None, "outputs": []} if kind == "code" else {}
    return nbformat.NotebookNode(id=f"cell-{next(CELL_IDS)}", cell_type=kind, metadata=nbformat.NotebookNode(),
                                 source=source, **extra)  # (ids made stable in notebook_of)


def cells_of(text, lang="en"):
    """The cells of one edition. Markdown cells come in English, each followed by its Chinese twin
    (lang=zh) in sources that have a Chinese edition; code cells are the same in both."""
    cells, kind, tags, lines, zh = [], None, [], [], False

    def close():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(re.sub(r"^# ?", "", line) for line in body.splitlines())
            cell = new_cell("markdown", body)
            cell.metadata["lang"] = "zh" if zh else "en"
        else:
            cell = new_cell("code", body)
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in text.splitlines():
        m = MARKER.match(line)
        if m:
            close()
            kind, zh = ("markdown" if m.group(1) else "code"), bool(m.group(2))
            tags, lines = json.loads(m.group(3) or "[]"), []
        elif kind is not None:
            lines.append(line)
    close()
    return edition(cells, lang)


def edition(cells, lang):
    """Keep the markdown of one language: each English cell, or its Chinese twin."""
    out = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            out.append(cell)
            continue
        mine = cell.metadata.pop("lang")
        if mine == "zh":
            continue
        twin = cells[i + 1] if i + 1 < len(cells) and cells[i + 1].metadata.get("lang") == "zh" else None
        if lang == "zh":
            if twin is None:
                raise SourceError(f"a markdown cell has no Chinese twin: {cell.source[:60]!r}")
            twin = new_cell("markdown", twin.source)
            out.append(twin)
        else:
            out.append(cell)
    return out


def has_zh(source):
    return any((m := MARKER.match(line)) and m.group(2) for line in source.read_text().splitlines())


# A lesson's first cell opens with its title, then says what you will learn (3-5 points), how long it takes
# to study, and what it needs; the index's table is made from these (the index source holds the
# placeholders), so the two cannot disagree.
HEADER = {
    "en": dict(title=r"^# Lesson (\d+) · (.+)$", learn=r"^\*\*You will learn\*\*\n((?:- .+\n?)+)",
               time=r"^\*\*Study time:\*\* about (\d+) minutes", needs=r"^\*\*Needs:\*\* (.+)$",
               see=r"^\*\*You will see:\*\* (.+(?:\n.+)*)"),
    "zh": dict(title=r"^# 第 (\d+) 课 · (.+)$", learn=r"^\*\*你将学到\*\*\n((?:- .+\n?)+)",
               time=r"^\*\*学习时间\*\*：约 (\d+) 分钟", needs=r"^\*\*需要\*\*：(.+)$",
               see=r"^\*\*你将看到\*\*：(.+(?:\n.+)*)"),
}
TABLE_HEAD = {"en": "| # | Lesson · 课程 | You will learn | Study time | Needs |\n|---|---|---|---|---|",
              "zh": "| # | 课程 | 你将学到 | 学习时间 | 需要 |\n|---|---|---|---|---|"}


def header(source, lang):
    """{number, title, learn: [points], minutes, needs} from a lesson's first cell, or SourceError."""
    first = cells_of(source.read_text(), lang)[0].source + "\n"
    found = {k: re.search(pattern, first, re.M) for k, pattern in HEADER[lang].items()}
    missing = [k for k, m in found.items() if m is None]
    if missing:
        raise SourceError(f"{source.name} ({lang}): the first cell lacks its {', '.join(missing)} (see HEADER)")
    points = [line[2:].strip() for line in found["learn"].group(1).strip().splitlines()]
    if not 3 <= len(points) <= 5:
        raise SourceError(f"{source.name} ({lang}): says {len(points)} things you will learn, not 3 to 5")
    return dict(number=int(found["title"].group(1)), title=found["title"].group(2).strip(), learn=points,
                minutes=int(found["time"].group(1)), needs=found["needs"].group(1).strip(),
                see=" ".join(found["see"].group(1).split()))


def torch_floor():
    """The torch version pyproject.toml requires at least ("2.13")."""
    text = (ROOT.parent / "pyproject.toml").read_text()
    return re.search(r'"torch>=([0-9.]+)', text).group(1)


def lessons_table(lang):
    rows = [TABLE_HEAD[lang]]
    for source in sorted((ROOT / "src").glob("[0-9][0-9]_*.py")):
        h = header(source, lang)
        if lang == "en":
            zh = header(source, "zh")
            link = f"[{h['title']}]({source.stem}.ipynb) · [{zh['title']}](zh/{source.stem}.ipynb)"
        else:
            link = f"[{h['title']}]({source.stem}.ipynb)"
        minutes = f"~{h['minutes']} min" if lang == "en" else f"约 {h['minutes']} 分钟"
        rows.append(f"| {h['number']} | {link} | {'<br>'.join(h['learn'])} | {minutes} | {h['needs']} |")
    return "\n".join(rows)


README_TABLE = re.compile(r"(<!-- lessons:start -->\n).*?(<!-- lessons:end -->)", re.S)


def readme_table():
    """The README's lessons table (between its lessons:start/end markers), from the same headers."""
    rows = ["| # | lesson | 中文 | what you will see | study time |", "| --- | --- | --- | --- | --- |"]
    for source in sorted((ROOT / "src").glob("[0-9][0-9]_*.py")):
        en, zh = header(source, "en"), header(source, "zh")
        rows.append(f"| {en['number']} | [{en['title']}](notebooks/{source.stem}.ipynb) | "
                    f"[{zh['title']}](notebooks/zh/{source.stem}.ipynb) | {en['see']} | {en['minutes']} min |")
    return "\n".join(rows) + "\n"


def notebook_of(source, lang="en"):
    cells = cells_of(source.read_text(), lang)
    if source.stem == "index":  # the placeholders: <!-- lessons --> and <!-- torch -->
        for cell in cells:
            cell.source = cell.source.replace("<!-- lessons -->", lessons_table(lang)).replace(
                "<!-- torch -->", torch_floor())
    if has_zh(source) and cells and cells[0].cell_type == "markdown":
        cells[0].source += LINKS[lang].format(name=source.stem)
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    for i, cell in enumerate(nb.cells):  # stable ids: rebuilding an unchanged source changes nothing
        cell.id = f"{source.stem[:2]}-{lang}-{i:02d}" if lang == "zh" else f"{source.stem[:2]}-{i:02d}"
    return nbformat.writes(nb) + "\n"


def targets(source):
    """(language, notebook path) of every edition a source has."""
    yield "en", ROOT / f"{source.stem}.ipynb"
    if has_zh(source):
        yield "zh", ROOT / "zh" / f"{source.stem}.ipynb"


def main(check=False, names=()):
    stale = []
    for source in sorted((ROOT / "src").glob("*.py")):
        if names and source.stem not in names and source.stem[:2] not in names:
            continue
        for lang, target in targets(source):
            text = notebook_of(source, lang)
            if target.exists() and target.read_text() == text:
                continue
            if check:
                stale.append(str(target.relative_to(ROOT)))
            else:
                target.parent.mkdir(exist_ok=True)
                target.write_text(text)
                print("wrote", target.relative_to(ROOT.parent))
    readme = ROOT.parent / "README.md"
    text = readme.read_text()
    fresh = README_TABLE.sub(lambda m: m.group(1) + readme_table() + m.group(2), text)
    if fresh != text:
        if check:
            stale.append("../README.md (its lessons table)")
        else:
            readme.write_text(fresh)
            print("wrote README.md's lessons table")
    if stale:
        sys.exit(f"out of date with notebooks/src: {', '.join(stale)}; run python tools/make_notebooks.py")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(check="--check" in args, names=[a for a in args if not a.startswith("--")])
