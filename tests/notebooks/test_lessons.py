"""Every lesson notebook, in English and in its whole Chinese edition, executed top to bottom by
nbclient in a real kernel, none running away (the 2 minutes a lesson takes are the bench's: bench/lessons.py).

The notebooks check their own results (assert cells: identical parameters, expected sums, ...), so
a wrong result fails here. One kernel per edition runs them all (conftest.py), each from an empty
namespace. Executed copies are saved to tests/notebooks/artifacts/ (zh/ for the Chinese edition).
"""
import json
import os
import pathlib
import re
import tempfile

import nbformat
import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
LESSONS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if not p.stem.startswith("00_"))
IN_A_BOX = "16_other_frameworks"  # its English edition runs in a Binder-sized session instead (test_binder_box.py)
# seconds: a lesson runs top to bottom in at most 2 minutes on a 2-core machine, which the bench measures
# (bench/lessons.py, on a quiet machine); here, on a host that may be busy or slow, three times that
# catches a lesson gone wrong (a wait that times out, a pool started twice) without timing the host
RUNAWAY = 3 * 120
# a lesson's processes hold under 1.6 GiB of anonymous memory at once in a Binder session (2 GiB), in the
# kernel the lessons share (peaks.json beside the executed copies says how much each held)
PEAK = 1.6 * 2**30
CJK = re.compile(r"[\u4e00-\u9fff]")
ALSO_IN_ZH = ("00_quickstart", "index")  # not lessons, but also in Chinese


def test_there_are_twenty_one_lessons_in_order_each_with_a_whole_chinese_edition():
    assert [int(n[:2]) for n in LESSONS] == list(range(1, 22))
    for name in [*LESSONS, *ALSO_IN_ZH]:
        en, zh = (nbformat.read(NOTEBOOKS / folder / f"{name}.ipynb", as_version=4) for folder in ("", "zh"))
        assert [c.source for c in en.cells if c.cell_type == "code"] == \
            [c.source for c in zh.cells if c.cell_type == "code"], f"{name}: the editions' code differs"
        markdown = [c.source for c in zh.cells if c.cell_type == "markdown"]
        assert len(markdown) == len([c for c in en.cells if c.cell_type == "markdown"])
        untranslated = [m[:60] for m in markdown if not CJK.search(m)]
        assert untranslated == [], f"{name}: markdown cells of the zh edition without Chinese"


def litter():
    """What killed DataLoader workers (their socket folders) and torchrun (its log folders) leave in
    /tmp when nobody points their TMPDIR elsewhere, as ddplab's pools and lesson 17 do."""
    return {f for f in os.listdir(tempfile.gettempdir()) if f.startswith(("pymp-", "torchelastic_"))}


def check_lesson(kernel, name, lang):
    before = litter()
    nb, took = kernel.run(name, RUNAWAY)
    if kernel.box is not None:  # a Binder-sized session: the lesson runs in it, nothing killed for memory
        assert kernel.box.oom_kills() == 0, f"{name}: a process of the session was killed for memory"
        assert kernel.peaks[name] < PEAK, f"{name}: {kernel.peaks[name] / 2**20:.0f} MiB at its peak, 1.6 GiB at most"
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [(c.source[:60], o.get("ename"), o.get("evalue")) for c in code for o in c.outputs
              if o.output_type == "error"]
    assert errors == []  # (an unanswered exercise's check also made sure its judge tells right from wrong)
    failed_as_meant = "failed as it was meant to" if lang == "en" else "如预期那样失败了"
    for c in code:  # a cell meant to fail shows its failure as expected, not as an error
        if c.source.startswith("%%ddp") and "--expect" in c.source.splitlines()[0]:
            assert failed_as_meant in "".join(o.get("text", "") for o in c.outputs), c.source[:60]
    checks = [c for c in code if re.search(r'(?<![.\w])check\("\d+\.\d+"', c.source)]  # the exercises' cells
    said = "Exercise " if lang == "en" else "练习 "
    assert len(checks) >= 3 and all(said in "".join(o.get("text", "") for o in c.outputs) for c in checks)
    # predict, then reveal: at least one prediction a lesson; left unanswered (as here), its measuring cell
    # runs and says that nothing was predicted, beside the measured value
    predicted = set(re.findall(r'(?<![.\w])predict\("(\d+\.[a-z0-9_]+)"', "\n".join(c.source for c in code)))
    revealed = [c for c in code if re.search(r'(?<![.\w])reveal\("\d+\.[a-z0-9_]+"', c.source)]
    skipped = "none was committed" if lang == "en" else "没有提交预测"
    assert predicted and revealed, f"{name}: no predict(...) before a reveal(...)"
    for key in predicted:
        assert any(f"{key}" in t and skipped in t for t in ("".join(o.get("text", "") for o in c.outputs)
                                                            for c in revealed)), f"{name}: {key} is never revealed"
    assert took <= RUNAWAY, f"{name} took {took:.0f} s"

    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    if lang == "en":  # opens with a summary and what you will learn, ends with exercises
        assert "In short" in markdown[0] and "You will learn" in markdown[0]
        assert any("## Exercises" in m for m in markdown)
    else:  # wholly Chinese, and the pool spoke Chinese: the dashboard's labels
        assert "简而言之" in markdown[0] and "你将学到" in markdown[0] and any("## 练习" in m for m in markdown)
        assert "## Exercises" not in "\n".join(markdown)
        widgets = json.dumps(nb.metadata.get("widgets", {}), ensure_ascii=False)
        starts = re.findall(r"%ddp_start[^\n]*", "\n".join(c.source for c in code))
        if any("--no-dashboard" not in line for line in starts):  # (lesson 14 times its pools without one)
            assert "损失" in widgets and "样本/秒" in widgets
        english = [line for c in code for o in c.outputs for line in o.get("text", "").splitlines()
                   if line.startswith("ddplab: ") and not CJK.search(line)]  # what ddplab itself said
        assert english == [], f"{name}: ddplab spoke English in the Chinese edition: {english[:3]}"
    # uses the pool, shows at least one picture, and leaves nothing running
    sources = "\n".join(c.source for c in code)
    assert "%ddp_start" in sources and "%%ddp" in sources
    pictures = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})
                or "ddplab-snapshot" in o.get("data", {}).get("text/html", "")]  # or the dashboard's picture
    assert pictures, "a lesson shows what happens as a picture"
    assert code[-1].source.strip() == "%ddp_stop"
    # the last pool it started is stopped (by the last cell, or before: lesson 17 stops its ranks before torchrun)
    said = "stopped" if lang == "en" else "已停止"
    stopped = [i for i, c in enumerate(code) if said in "".join(o.get("text", "") for o in c.outputs)]
    assert stopped and not any("%ddp_start" in c.source for c in code[stopped[-1] + 1:]), name
    assert kernel.left_running() == []
    assert litter() - before == set(), "left in /tmp"


@pytest.mark.pool
@pytest.mark.heavy  # in a session box the size of Binder's (conftest.py)
@pytest.mark.xdist_group("lessons")  # one shared kernel
@pytest.mark.parametrize("name", [n for n in LESSONS if n != IN_A_BOX])
def test_lesson_runs_end_to_end(kernel, name):
    check_lesson(kernel, name, "en")


@pytest.mark.pool
@pytest.mark.xdist_group("lessons-zh")  # another shared kernel, in another worker
@pytest.mark.parametrize("name", LESSONS)
def test_chinese_edition_runs_end_to_end(kernel_zh, name):
    check_lesson(kernel_zh, name, "zh")


@pytest.mark.pool
@pytest.mark.xdist_group("lessons-zh")
def test_the_chinese_quickstart_runs_and_speaks_chinese(kernel_zh):
    nb, took = kernel_zh.run("00_quickstart", RUNAWAY)
    errors = [o.get("evalue") for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == [] and took <= RUNAWAY
    assert "损失" in json.dumps(nb.metadata.get("widgets", {}), ensure_ascii=False)
    assert kernel_zh.left_running() == []


def test_the_index_links_every_lesson():
    index = nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4)
    text = "\n".join(c.source for c in index.cells)
    for name in ["00_quickstart", *LESSONS]:
        assert f"({name}.ipynb)" in text and f"(zh/{name}.ipynb)" in text
    zh = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / "zh" / "index.ipynb", as_version=4).cells)
    for name in ["00_quickstart", *LESSONS]:
        assert f"({name}.ipynb)" in zh
