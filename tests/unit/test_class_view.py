"""The teacher's view (%ddp_class DIR: dashboard/classview.py) and the classroom's magics, in an IPython
shell without a pool: what a class's records show, in English and Chinese, and the one-line errors."""
import os

import pytest
from IPython.core.error import UsageError

from ddplab.dashboard.classview import class_html, histogram
from ddplab.kernel import classroom as c
from ddplab.lessons.class_magics import DDPClassMagics
from tests.unit.test_classroom import home  # noqa: F401 - its own HOME for each test (autouse)

OTHER = 54321


@pytest.fixture
def shell(ip):
    """The session's shell, with ddplab loaded (tests/conftest.py): the classroom's magics registered."""
    assert "ddp_class" in ip.magics_manager.magics["line"]
    return ip


def a_class(tmp_path):
    """Three learners' files: Ann right at 4.1 after a wrong 7, Bo wrong twice with 7, Cy only predicting."""
    path = c.create_class(tmp_path / "class")
    lines = {
        "ann": [c.make_event("check", "4.1", 7, False, learner="ann", attempt=1),
                c.make_event("check", "4.1", 3, True, learner="ann", attempt=2),
                c.make_event("prediction", "4.overlap", 0.5, learner="ann", attempt=1),
                c.make_event("reveal", "4.overlap", measured=0.2, learner="ann", attempt=1)],
        "bo": [c.make_event("check", "4.1", 7, False, learner="bo", attempt=1),
               c.make_event("check", "4.1", 7, False, learner="bo", attempt=2),
               c.make_event("prediction", "4.overlap", 0.1, learner="bo", attempt=1)],
        "cy": [c.make_event("prediction", "4.overlap", 0.25, learner="cy", attempt=1)],
    }
    for name, events in lines.items():
        with open(path / f"{name}-{'0' * 16}.jsonl", "wb") as f:
            f.write(b"".join(c.line(e) for e in events))
    os.symlink("/etc/passwd", path / f"dan-{'1' * 16}.jsonl")  # planted: skipped and counted
    return path


def test_the_view_counts_what_the_learners_did(tmp_path):
    path = a_class(tmp_path)
    klass = c.Class(path, exercises={4: ["4.1"]})
    page = class_html(str(path), klass.summary())
    assert "3 learners" in page and "skipped: 1 symlink" in page
    # lesson 4: started by 3 (named), finished by ann alone
    assert '<td>4</td><td>3 <span class="small">ann, bo, cy</span></td><td>1 <span class="small">ann</span></td>' in page
    assert "<td>4.1</td><td>2</td><td>1</td><td>7 (3)</td>" in page  # tried 2, right 1, 7 three times
    assert "prediction 4.overlap</b> · predicted: 3 · measured (median): 0.2" in page and "<svg" in page
    zh = class_html(str(path), klass.summary(), lang="zh")
    assert "3 名学员" in zh and "最常见的错误答案" in zh and "learners" not in zh


def test_the_histogram_bins_every_prediction_and_marks_the_measurement():
    svg = histogram([0.1, 0.1, 0.5, None], [0.3])
    assert svg.count("<rect") == 12 and "<title>2</title>" in svg and svg.count("<title>1</title>") == 1
    assert 'stroke="#d62728"' in svg and histogram([], []) == ""


def test_an_empty_class_says_who_will_appear(tmp_path):
    path = c.create_class(tmp_path / "empty")
    assert "nothing recorded yet" in class_html(str(path), c.Class(path).summary())


def test_the_magic_shows_a_class_joins_and_leaves(tmp_path, shell, capsys):
    path = a_class(tmp_path)
    shell.run_line_magic("ddp_class", f"{path} --every 0")
    view = DDPClassMagics.views[-1]  # (displayed, which a terminal shell does not print: the page it showed)
    assert "3 learners" in view.last and "skipped: 1 symlink" in view.last and view.stopped.is_set() is False
    teacher = tmp_path / "teacher"
    c.create_class(teacher)
    os.chown(teacher, OTHER, -1)
    os.chmod(teacher, c.CLASS_MODE)
    shell.run_line_magic("ddp_class", f"join {teacher} --name Ann")
    assert "you joined the class" in capsys.readouterr().out and c.membership().name == "Ann"
    shell.run_line_magic("ddp_class", "leave")
    assert "you left the class" in capsys.readouterr().out and c.membership() is None


@pytest.mark.parametrize("line,said", [
    ("join", "one folder"), ("leave now", "takes nothing more"), ("a b", "%ddp_class DIR"),
    ("join /nonexistent/x --name Ann", "/nonexistent/x"), ("/tmp --every -1", "--every"),
])
def test_bad_input_is_one_line(shell, line, said):
    with pytest.raises(UsageError, match=said.replace("%", "%")):
        shell.run_line_magic("ddp_class", line)


def test_the_report_magic_writes_the_three_files_or_says_why_not(tmp_path, shell, capsys):
    with pytest.raises(UsageError, match="no record"):
        shell.run_line_magic("ddp_report", str(tmp_path / "r"))
    c.LearnerRecord().append(c.make_event("check", "4.1", 3, True, learner="ann", attempt=1))
    shell.run_line_magic("ddp_report", str(tmp_path / "r"))
    assert "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["report.json", "report.md", "results.json"]


def test_the_view_updates_in_place_while_learners_work(tmp_path):
    import threading
    import time

    from ddplab.dashboard.classview import ClassView

    path = a_class(tmp_path)
    klass = c.Class(path, exercises={4: ["4.1"]})

    def summarize():
        klass.refresh()
        return klass.summary()

    pages = []

    class Handle:  # (what display(..., display_id=True) returns: update() replaces the output in place)
        def update(self, obj):
            pages.append(obj.data)

    view = ClassView(str(path), summarize, every=0.05)
    view.handle, view.last = Handle(), view.html()
    thread = threading.Thread(target=view._run, daemon=True)
    thread.start()
    try:
        time.sleep(0.3)
        assert pages == []  # nothing changed: nothing sent
        with open(path / f"bo-{'0' * 16}.jsonl", "ab") as f:
            f.write(c.line(c.make_event("check", "4.1", 3, True, learner="bo", attempt=3)))
        deadline = time.monotonic() + 10
        while not pages and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pages and '<td>4.1</td><td>2</td><td>2</td>' in pages[-1]  # bo now right too
    finally:
        view.stop()
        thread.join(5)
    assert not thread.is_alive()
