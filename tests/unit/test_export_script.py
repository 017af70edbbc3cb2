"""The exported torchrun script's text (export.py), without engines: the same code in either
language, its prose in the pool's."""
import ast
import re

from ddplab.kernel.export import script

CELLS = [(1, "x = 1\n%time y = 2", None), (3, "print(rank)", [0, 2])]


def _comments(text):
    return re.findall(r"#[^!\n].*|\"\"\"[\s\S]*?\"\"\"", text)


def test_the_script_is_the_same_code_in_either_language():
    en, zh = script(CELLS, 4, 2, name="t.py"), script(CELLS, 4, 2, name="t.py", lang="zh")
    strip = lambda text: [ast.dump(node) for node in ast.parse(text).body[1:]]  # noqa: E731 - [0]: the docstring
    assert strip(en) == strip(zh)
    assert "torchrun --nproc_per_node 4 t.py" in en and "torchrun --nproc_per_node 4 t.py" in zh
    assert "if rank in (0, 2):" in zh and "torch.set_num_threads(2)" in zh


def test_a_zh_script_explains_itself_in_chinese():
    zh = script(CELLS, 4, 2, name="t.py", lang="zh")
    prose = [c for c in _comments(zh) if not c.startswith("# --- cell")]
    assert prose, zh
    for comment in prose:  # code, names and commands stay as they are; the words are Chinese
        words = re.sub(r"%+\w+|\w+\.\w+\(\.\.\.\)|torchrun.*|[A-Z_]{3,}|ddplab|notebook|rank", "", comment)
        assert not re.search(r"[A-Za-z]{3,}", words), comment
    assert "每个 rank 2 个线程" in zh and "%time y = 2" in zh


def test_an_en_script_keeps_its_english_and_a_given_title():
    en = script(CELLS, 4, 1, title="Lesson 3", name="t.py")
    assert en.splitlines()[1] == '"""Lesson 3'
    assert "left out by %ddp_export (works only in a notebook): %time y = 2" in en
