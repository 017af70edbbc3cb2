"""The few words ddplab's messages share, in the pool's language (en or zh)."""


def say(lang, en, zh):
    """The message for `lang`: say(config.lang, "stopped", "已停止")."""
    return zh if lang == "zh" else en


def plural(n, word):
    return f"{word}{'s' if n != 1 else ''}"


def ranks_text(ranks, lang="en"):
    """"ranks 0, 1, 3" / "rank 0、1、3"."""
    if lang == "zh":
        return "rank " + "、".join(map(str, ranks))
    return f"{plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"
