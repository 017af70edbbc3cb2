"""The lesson pictures (ddplab.lessons.draw) and the language they speak."""
import pathlib
import subprocess
import sys

import pytest
import torch

from ddplab import lessons
from ddplab.lessons import draw

ROOT = pathlib.Path(__file__).resolve().parents[2]


def require_cjk_font():
    installed = [p for p in pathlib.Path("/usr/share/fonts").rglob("*") if "NotoSansCJK" in p.name or "wqy" in p.name]
    assert installed, "no CJK font installed: ./dev test installs Debian's fonts-noto-cjk"


def is_png(picture):
    return picture._repr_png_().startswith(b"\x89PNG") and len(picture.png) > 1000


def test_collectives_draw_one_row_of_boxes_per_rank_and_value():
    before = [torch.tensor([float(r), 10.0 + r]) for r in range(4)]
    after = [torch.tensor([6.0, 46.0])] * 4
    pic = draw.collectives({"all_reduce": (before, after), "recv": ([None, 1, None, 3], [0, 1, 2, 3])})
    assert is_png(pic) and len(pic.axes) == 4
    texts = pic.texts()
    assert "all_reduce: before" in texts and "recv: after" in texts
    assert texts.count("46") == 4 and texts.count("rank 3") == 4
    left = pic.axes[2]  # recv before: ranks 0 and 2 hold nothing yet
    assert len(left.patches) == 2 * 2  # a coloured box and its frame, for ranks 1 and 3


def test_the_colour_follows_the_data():
    from matplotlib.colors import to_hex

    from ddplab.dashboard.html import rank_color

    def colours(ax):  # the fill colours of the boxes, frames left out
        return [to_hex(p.get_facecolor(), keep_alpha=False) for p in ax.patches if p.get_facecolor()[3] > 0]

    before = [torch.tensor([10.0 * r, 10.0 * r + 1]) for r in range(4)]
    pic = draw.collectives({"broadcast": (before, [before[0]] * 4),
                            "all_reduce": (before, [torch.tensor([60.0, 64.0])] * 4),
                            "all_gather": ([[r * r] for r in range(4)], [[0, 1, 4, 9]] * 4)})
    broadcast, reduced, gathered = pic.axes[1], pic.axes[3], pic.axes[5]
    assert set(colours(broadcast)) == {rank_color(0)}  # every rank now holds rank 0's values
    assert len(colours(reduced)) == 4 * 2 * 4 and set(colours(reduced)) == {rank_color(r) for r in range(4)}  # sums
    assert colours(gathered)[:4] == [rank_color(r) for r in range(4)]  # value i came from rank i


def test_partitions_mark_samples_two_ranks_share():
    order = [[[0, 2, 4], [1, 3, 0]]]  # 5 samples on 2 ranks: sample 0 is padding, seen twice
    pic = draw.partitions(order, 5, title="t")
    ax = pic.axes[0]
    assert len(ax.patches) == 6 and len(ax.lines) == 1


def test_partitions_name_the_ranks_and_show_both_reads_of_a_padded_sample():
    order = [[[0, 2, 4], [1, 3, 0]]]
    pic = draw.partitions(order, 5)
    ax = pic.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["rank 0", "rank 1"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3", "4"]
    shared = sorted((p.get_y(), p.get_height()) for p in ax.patches if p.get_x() == 0)
    assert len(shared) == 2 and shared[0][1] == shared[1][1] == pytest.approx(0.4)  # stacked halves
    assert shared[0][0] + shared[0][1] == pytest.approx(shared[1][0])               # one above the other


def test_timeline_bars_and_kinds():
    events = [[(0, 1, "forward", "F0"), (1, 1.5, "backward", "B0")], [(1, 2, "forward", "F0")]]
    pic = draw.timeline(events, title="pipeline")
    assert is_png(pic)
    assert [t for t in pic.texts() if t in ("forward", "backward")] == ["forward", "backward"]
    assert "pipeline" in pic.texts() and "F0" in pic.texts()


def test_lines_and_bars_take_ranks_colours_and_panels():
    pic = draw.lines({"rank 1": ([1, 2], [3, 4]), "total": ([1, 2], [5, 6])}, "step", "loss", logy=True)
    (ax,) = pic.axes
    assert ax.get_yscale() == "log" and ax.lines[0].get_color() == "#ff7f0e"
    pic = draw.bars(None, panels=[dict(values={"a": 1, "b": 2}, title="x"), dict(values={"c": 3}, title="y")])
    assert len(pic.axes) == 2 and "2" in pic.texts()


def test_chinese_labels_render_with_a_cjk_font():
    require_cjk_font()
    assert draw._fonts()["font.family"][1] in draw.CJK_FONTS  # found even if matplotlib's cache predates it
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font" would be a warning
        pic = draw.bars({"同步": 1, "异步": 2}, ylabel="秒", title="通信")
    assert is_png(pic)


def test_say_follows_the_pool_language(monkeypatch):
    assert lessons.say("loss", "损失") == "loss"  # no pool: English

    class Config:
        lang = "zh"

    class Running:
        running, config = True, Config()

    monkeypatch.setattr(lessons, "lab", lambda: Running())
    assert lessons.say("loss", "损失") == "损失"


def test_lessons_package_stays_light_for_ranks():
    code = ("import sys, ddplab.lessons.ranks; "
            "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'IPython', 'zmq') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_notebooks_match_their_sources():
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_notebooks.py"), "--check"], check=True)


def test_chinese_legends_render_with_a_cjk_font_too():
    require_cjk_font()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a legend made outside _figure() used to miss the CJK fallback
        lines = draw.lines({"全局": ([0, 1], [1, 0]), "逐层": ([0, 1], [0, 1])}, title="剪枝")
        timeline = draw.timeline([[(0, 1, "前向", "0")], [(1, 2, "反向", "0")]], title="流水线")
    assert is_png(lines) and is_png(timeline)
    assert "全局" in lines.texts() and "反向" in timeline.texts()


def test_say_in_rank_code_speaks_the_language_of_the_pool(monkeypatch):
    from ddplab import rank
    from ddplab.lessons import say

    assert say("loss", "损失") == "loss"  # the notebook, no pool
    monkeypatch.setattr(rank.RANK, "formed", True)
    monkeypatch.setattr(rank.RANK, "lang", "zh")  # as join(..., lang="zh") sets it in a rank
    assert say("loss", "损失") == "损失"
