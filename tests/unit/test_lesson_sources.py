"""What every lesson source (notebooks/src) must be, checked without running it: a header that says what
you will learn and how long it takes; checkable exercises whose judges exist; English lessons in English;
Chinese prose without hard line breaks inside sentences, with "N 倍" that cannot be misread and one term
per concept (the zh index's glossary); cells meant to fail marked as expected."""
import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
LESSONS = [s for s in SOURCES if not s.stem.startswith("00_")]
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
CHECK = re.compile(r'check\("(\d+)\.(\d+)"')


def tools():
    spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "tools" / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = tools()


def markdown(source, lang):
    return [c.source for c in make.cells_of(source.read_text(), lang) if c.cell_type == "markdown"]


def code(source):
    return [c.source for c in make.cells_of(source.read_text(), "en") if c.cell_type == "code"]


def prose(text):
    """Markdown without code: fenced blocks, `spans` and link targets removed."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def test_the_lessons_are_numbered_1_to_21_in_order():
    assert [int(s.stem[:2]) for s in LESSONS] == list(range(1, 22))
    for s in SOURCES:
        for lang in ("en", "zh"):
            assert make.header(s, lang)["number"] == int(s.stem[:2]), (s.name, lang)


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_each_opens_with_what_you_will_learn_and_a_study_time(source):
    for lang in ("en", "zh"):
        h = make.header(source, lang)  # raises SourceError if a part is missing or not 3-5 points
        assert 10 <= h["minutes"] <= 120, (lang, h["minutes"])
    assert make.header(source, "en")["minutes"] == make.header(source, "zh")["minutes"]
    assert len(make.header(source, "en")["learn"]) == len(make.header(source, "zh")["learn"])


@pytest.mark.parametrize("source", LESSONS, ids=lambda s: s.stem)
def test_each_ends_with_exercises_the_learner_can_check(source):
    sys.path.insert(0, str(ROOT))
    from ddplab.lessons.exercises import EXERCISES, find

    number = int(source.stem[:2])
    en, zh = markdown(source, "en"), markdown(source, "zh")
    assert any(m.startswith("## Exercises") for m in en) and any(m.startswith("## 练习") for m in zh)
    keys = [f"{a}.{b}" for cell in code(source) for a, b in CHECK.findall(cell)]
    assert keys and all(k.startswith(f"{number}.") for k in keys), keys
    assert len(keys) == len(set(keys)) >= 3, f"{source.stem}: at least 3 checked exercises, each checked once"
    for key in keys:
        find(key)
    registered = sorted(k for k in EXERCISES if k.startswith(f"{number}."))
    assert registered == sorted(keys), "every judge of the lesson is used by it"
    cells = code(source)
    assert cells[-1].strip() == "%ddp_stop"


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_english_lessons_are_in_english(source):
    for text in markdown(source, "en"):
        assert not CJK.search(prose(text)), text[:200]


def zh_paragraph_breaks(text):
    """Lines of a paragraph that continue the line above (a hard break that shows as a stray space)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    breaks, previous = [], ""
    for line in text.splitlines():
        starts_block = re.match(r"\s*([-*+] |\d+\. |#|\||>|<)", line) or not line.strip()
        if previous and not starts_block and CJK.search(line + previous):
            breaks.append(line[:40])
        previous = "" if not line.strip() or line.lstrip().startswith(("#", "|")) else line
    return breaks


@pytest.mark.parametrize("source", [*SOURCES, ROOT / "notebooks" / "src" / "index.py"], ids=lambda s: s.stem)
def test_chinese_prose_has_no_hard_breaks_inside_paragraphs(source):
    for text in markdown(source, "zh"):
        assert zh_paragraph_breaks(text) == [], text[:80]


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_chinese_times_are_phrased_so_they_cannot_be_misread(source):
    # "快了 3 倍" is read by many as 4x as fast: say "是……的 3 倍" or "为原来的 3 倍"
    ambiguous = re.compile(r"(快|慢|大|小|多|少|高|低|长|短|增加|减少|提高|降低)了?\s*[0-9.{][^倍，。；\n]{0,12}倍")
    code_text = "\n".join(code(source))
    for text in [*markdown(source, "zh"), code_text]:
        found = [m.group() for m in ambiguous.finditer(prose(text))]
        assert found == [], found


def glossary():
    """The zh index's glossary: {variant not to use: the term to use}."""
    index = markdown(ROOT / "notebooks" / "src" / "index.py", "zh")[0]
    out = {}
    for line in index.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("English", "---") and cells[2]:
            for variant in re.split(r"[、，]", cells[2]):
                out[variant.strip()] = cells[1]
    return out


def test_the_glossary_lists_terms_not_to_use():
    assert {"微批量", "掉队者", "秩"} <= set(glossary())


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_chinese_lessons_use_one_term_per_concept(source):
    variants = glossary()
    for text in markdown(source, "zh"):
        used = [(v, term) for v, term in variants.items() if v in prose(text)]
        assert used == [], used


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_cells_meant_to_fail_say_so(source):
    text = source.read_text()
    assert "raises-exception" not in text, "a cell meant to fail runs with %%ddp --expect ERROR"


def test_the_index_states_the_torch_floor_of_pyproject():
    index = "\n".join(markdown(ROOT / "notebooks" / "src" / "index.py", "en"))
    assert "<!-- torch -->" in index and "<!-- lessons -->" in index
    built = (ROOT / "notebooks" / "index.ipynb").read_text()
    assert f"torch {make.torch_floor()} or newer" in built


def test_the_readme_lists_every_lesson_from_its_header():
    readme = (ROOT / "README.md").read_text()
    table = make.README_TABLE.search(readme)
    assert table, "README.md keeps its lessons table between <!-- lessons:start --> and <!-- lessons:end -->"
    assert table.group(0) == table.group(1) + make.readme_table() + table.group(2), \
        "README.md's lessons table is stale: run python tools/make_notebooks.py"
    assert [int(row.split("|")[1]) for row in make.readme_table().splitlines()[2:]] == list(range(0, 22))
