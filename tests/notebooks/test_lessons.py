"""Every lesson notebook, executed top to bottom by nbclient in a real kernel, within its budget.

The notebooks check their own results (assert cells: identical parameters, expected sums, ...), so
a wrong result fails here. One kernel runs them all (conftest.py), each from an empty namespace.
Executed copies are saved to tests/notebooks/artifacts/ for people to read.
"""
import pathlib
import re

import nbformat
import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
LESSONS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if not p.stem.startswith("00_"))
BUDGET = 120  # seconds: a lesson runs top to bottom in at most 2 minutes on a 2-core machine
CJK = re.compile(r"[\u4e00-\u9fff]")
pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("lessons")]  # one shared kernel


def test_there_are_fourteen_lessons_in_order():
    assert [int(n[:2]) for n in LESSONS] == list(range(1, 15))


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_end_to_end_within_budget(kernel, name):
    nb, took = kernel.run(name, BUDGET)
    code = [c for c in nb.cells if c.cell_type == "code"]
    meant_to_fail = [c for c in code if "raises-exception" in c.metadata.get("tags", [])]
    errors = [(c.source[:60], o.get("ename"), o.get("evalue")) for c in code if c not in meant_to_fail
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    for c in meant_to_fail:  # a cell tagged to fail must really fail (the lesson shows an error)
        assert any(o.output_type == "error" for o in c.outputs), c.source[:60]
    assert took <= BUDGET, f"{name} took {took:.0f} s"

    # opens with a summary in English and in Chinese, ends with exercises in both
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert "In short" in markdown[0] and CJK.search(markdown[0])
    assert any("## Exercises" in m for m in markdown) and any("## 练习" in m for m in markdown)
    # uses the pool, shows at least one picture, and leaves nothing running
    sources = "\n".join(c.source for c in code)
    assert "%ddp_start" in sources and "%%ddp" in sources
    pictures = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})
                or "data:image/png" in o.get("data", {}).get("text/html", "")]  # or the dashboard's picture
    assert pictures, "a lesson shows what happens as a picture"
    assert code[-1].source.strip() == "%ddp_stop"
    assert "stopped" in "".join(o.get("text", "") for o in code[-1].outputs)
    assert kernel.left_running() == []


def test_the_index_links_every_lesson():
    index = nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4)
    text = "\n".join(c.source for c in index.cells)
    for name in ["00_quickstart", *LESSONS]:
        assert f"({name}.ipynb)" in text
