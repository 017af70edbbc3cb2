"""ddplab's messages in the pool's language: one way to say them (words.say), the Chinese in one
catalogue (zh.py), complete, and with the same placeholders as the English."""
import ast
import pathlib
import re
import string

from ddplab.shared.config import PoolConfig
from ddplab.shared.words import plural, ranks_text, say
from ddplab.shared.zh import ZH

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "ddplab"
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_rank_lists_read_as_each_language_writes_them():
    assert ranks_text([2]) == "rank 2" and ranks_text([0, 1, 3]) == "ranks 0, 1, 3"
    assert ranks_text([0, 1, 3], "zh") == "rank 0、1、3"
    assert plural(1, "cell") == "cell" and plural(0, "cell") == "cells"


def test_a_pool_speaks_its_language():
    text = "stopped {n} rank{s} in {seconds:.1f} s"
    assert say("en", text, n=4, s="s", seconds=0.25) == "stopped 4 ranks in 0.2 s"
    assert say("en", text, n=1, s="", seconds=0.25) == "stopped 1 rank in 0.2 s"
    assert say("zh", text, n=4, s="s", seconds=0.25) == "已停止 4 个 rank，用时 0.2 秒"
    assert PoolConfig.make(2, lang="zh").say("every rank was sent SIGINT") == "已向每个 rank 发送 SIGINT"
    assert say("en", "dashboard|running") == "running" and say("zh", "dashboard|running") == "运行中"
    assert say("zh", "not in the catalogue") == "not in the catalogue"  # (the test below keeps this from happening)


def _literals(node):
    """The strings an argument can be: a literal, or either side of `a if c else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _literals(node.body) | _literals(node.orelse)
    return set()


def said_texts():
    """Every literal text ddplab says: the first string argument of each say(...) / .say(...) /
    _tell(...) call, and the tables of texts (diagnosis, hints, the script header, the dashboard)."""
    from ddplab.dashboard import html
    from ddplab.kernel import export
    from ddplab.rank import frameworks
    from ddplab.shared import diagnose, errors, swimlane

    found = set()
    for path in PACKAGE.rglob("*.py"):
        if "lessons" in path.parts:
            continue  # the lessons' say(en, zh) is lesson content, written in both languages there
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("say", "_tell"):
                    texts = [_literals(a) for a in node.args]
                    found.update(next((t for t in texts if t), ()))
    found |= set(diagnose.TEXTS.values()) | set(diagnose.HINTS.values()) | set(export.WORDS.values())
    found |= {"dashboard|" + text for text in html.LABELS.values()}
    found |= set(swimlane.TEXTS) | set(errors.LOST_WHY) | set(frameworks.TEXTS)
    return found


def test_every_text_has_its_chinese_with_the_same_placeholders():
    texts = said_texts()
    assert len(texts) > 80
    missing = sorted(t for t in texts if t not in ZH)
    assert missing == [], missing
    fields = string.Formatter()
    english_only = {"s", "cells", "engines", "thread_s", "was", "start"}  # plural endings and verbs: Chinese has none
    for en, zh in ZH.items():
        en_names, zh_names = ({f[1] for f in fields.parse(text) if f[1]} for text in (en, zh))
        assert zh_names <= en_names and en_names - zh_names <= english_only, (en, zh)
    unused = sorted(set(ZH) - texts)
    assert unused == [], unused


def test_no_chinese_outside_the_catalogue():
    for path in PACKAGE.rglob("*.py"):
        if path.name == "zh.py" or "lessons" in path.parts:
            continue
        lines = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                 if CJK.search(line) and "中文" not in line]  # (--lang's help names the language in it)
        assert lines == [], (path, lines)
