"""ddplab's one way to say something in the pool's language (en or zh).

    say(lang, "stopped {n} ranks in {seconds:.1f} s", n=4, seconds=0.2)

The English text is the key: in Chinese it is looked up in the catalogue (zh.py, every Chinese
string of ddplab's in one place) and formatted with the same values. A key may start with a
context, "elapsed|running", where one English word needs two Chinese ones; English drops it.
A key missing from the catalogue is said in English (tests/unit/test_words.py checks none is).
"""
from collections.abc import Sequence
from typing import Any

from .zh import ZH


def say(lang: str, text: str, **values: Any) -> str:
    """`text` in `lang`, formatted with `values`."""
    template = ZH.get(text, text.rsplit("|", 1)[-1]) if lang == "zh" else text.rsplit("|", 1)[-1]
    return template.format(**values) if values else template


def plural(n: int, word: str) -> str:
    return f"{word}{'s' if n != 1 else ''}"


def ranks_text(ranks: Sequence[int], lang: str = "en") -> str:
    """"ranks 0, 1, 3" / "rank 0、1、3"."""
    if lang == "zh":
        return "rank " + "、".join(map(str, ranks))
    return f"{plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"
