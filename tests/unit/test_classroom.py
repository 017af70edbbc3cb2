"""The classroom's data, without a kernel: events kept short (never code), the learner's own record,
the class folder made and checked as nbgrader's exchange is (mode 3733, checked at every use), the
teacher's reader (skips counted, refreshes reading only what was appended, 400,000 events), the
summary, the report to hand in (report.md, report.json against its schema, Gradescope's results.json)
and the command line. These run as root: the tests between accounts come in another tier."""
import grp
import json
import os
import stat
import subprocess
import sys
import time

import pytest

import ddplab
from ddplab.kernel import classroom as c
from ddplab.kernel import cli

OTHER = 54321  # a uid and gid no account has


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """A home of the test's own: ~/.ddplab is made there, never in root's."""
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(folder))
    return folder


def event(kind="check", key="4.1", answer=3, ok=True, learner="Ann Lee", attempt=1, **more):
    return c.make_event(kind, key, answer, ok, learner=learner, attempt=attempt, when=more.pop("when", 1.7e9), **more)


def class_folder(tmp_path, name="class"):
    """A class folder someone else (the teacher, OTHER) owns, as learners see it."""
    path = c.create_class(tmp_path / name)
    os.chown(path, OTHER, -1)
    os.chmod(path, c.CLASS_MODE)  # (chown may drop setgid)
    return path


def write_lines(path, lines):
    with open(path, "ab") as f:
        f.write(b"".join(x if isinstance(x, bytes) else c.line(x) for x in lines))


# ------------------------------------------------------------------ events
@pytest.mark.parametrize("answer,kept", [
    (3, 3), (2.5, 2.5), (True, True), ("b", "b"), ("MASTER_ADDR", "MASTER_ADDR"), (("A", "B"), "('A', 'B')"),
    ("-1.5e+3", "-1.5e+3"), (None, None),
])
def test_short_plain_answers_are_kept(answer, kept):
    e = event(answer=answer)
    assert e["answer"] == kept and type(e["answer"]) is type(kept) and "answer_kept" not in e
    assert c.parse_event(c.line(e)) == e


@pytest.mark.parametrize("answer", [
    "import os; os.system('rm -rf /')",  # code
    "x" * 41,  # long text
    "print(open('/etc/passwd').read())",
    "a\nb", 'say "hi"', "é",
    float("nan"), float("inf"), 2**60,
    [[1, 2], [3]], {"a": 1}, object(), b"bytes",
])
def test_code_long_text_and_objects_are_stored_as_null(answer):
    e = event(answer=answer)
    assert e["answer"] is None and e["answer_kept"] is False
    assert c.parse_event(c.line(e)) == e


def test_make_event_checks_what_it_is_given():
    for bad in (dict(kind="guess"), dict(key="4"), dict(key="four.1"), dict(learner="a/b"), dict(attempt=0),
                dict(attempt=True), dict(ok="yes"), dict(measured=1.0), dict(when=float("nan"))):
        args = {"kind": "check", "key": "4.1", "learner": "Ann", "attempt": 1, "ok": True, **bad}
        with pytest.raises(ValueError):
            c.make_event(args.pop("kind"), args.pop("key"), 3, args.pop("ok"), **args)
    with pytest.raises(ValueError, match="reveal"):
        c.make_event("reveal", "4.a", None, learner="Ann", attempt=1)  # no measured value
    reveal = c.make_event("reveal", "4.a", None, learner="Ann", attempt=0, measured=2)
    assert reveal["measured"] == 2.0 and reveal["attempt"] == 0
    long = event(reason="很长的理由" * 200)  # 1000 characters, 3 bytes each: cut to fit the line
    assert len(long["reason"]) <= 500 and len(c.line(long)) <= c.MAX_LINE and c.parse_event(c.line(long)) == long


GOOD = {"v": 1, "learner": "Ann", "kind": "check", "key": "4.1", "lesson": 4, "answer": 3, "ok": True, "attempt": 1,
        "time": 1.7e9}


GOOD_LINE = json.dumps(GOOD)


def variant(**change):
    d = dict(GOOD)
    for k, v in change.items():
        if v is KeyError:
            del d[k]
        else:
            d[k] = v
    return json.dumps(d)


@pytest.mark.parametrize("text", [
    "not json", "[1, 2]", "", "null", '"a string"',
    variant(v=2), variant(v=True), variant(kind="guess"), variant(kind=["check"]),
    variant(key="4"), variant(key="4.X"), variant(key="a.1"), variant(key=4.1), variant(lesson=5), variant(lesson="4"),
    variant(attempt=0), variant(attempt="1"), variant(attempt=True), variant(attempt=1.0),
    variant(ok="yes"), variant(ok=1),
    variant(time=-1), variant(time="now"), variant(time=10**400), variant(time=True),
    variant(time=KeyError), variant(learner=KeyError),
    variant(learner=""), variant(learner="a" * 41), variant(learner="rm -rf /"), variant(learner=["Ann"]),
    variant(answer="print(1); import os"), variant(answer="x" * 41), variant(answer={"a": 1}), variant(answer=[1]),
    variant(answer=2**60),
    variant(answer_kept=True, answer=None), variant(answer_kept=False),
    variant(code="print(1)"),  # a field no event has
    variant(measured=1.0),  # a check measures nothing
    variant(kind="prediction", reason="why"),
    variant(kind="reveal", answer=None),  # a reveal carries what was measured
    variant(kind="reveal", answer=None, measured=None),
    variant(reason="x" * 501), variant(reason=5),
    GOOD_LINE.replace("1700000000.0", "NaN"), GOOD_LINE.replace("1700000000.0", "Infinity"),
    GOOD_LINE.replace("1700000000.0", "1e400"), GOOD_LINE.replace('"answer": 3', '"answer": 1e400'),
    variant(kind="prediction").replace("}", ', "measured": -Infinity}'), variant(kind="prediction", measured=10**400),
    variant(kind="prediction", measured=True), variant(kind="prediction", measured="1"),
    variant(key="\u0664.1"),  # a digit, but not 0-9
    "[" * 1500 + "]" * 1500,
    variant(reason="x" * 400).encode() + b" " * 1700,  # over 2,000 bytes
    variant(answer="b").encode().replace(b'"b"', b'"\xff"'),  # not UTF-8
])
def test_parse_event_rejects_every_kind_of_bad_line(text):
    assert c.parse_event(GOOD_LINE) == GOOD  # (the good line passes: what is rejected is what changed)
    assert c.parse_event(text) is None


def test_parse_event_accepts_each_kind():
    for line in (GOOD_LINE, variant(kind="prediction", ok=None, measured=None), variant(reason="close: count again"),
                 variant(kind="reveal", answer=None, ok=None, attempt=0, measured=0.5), variant(answer=None, answer_kept=False),
                 variant(key="12.speedup_2", lesson=12), variant(learner="张伟")):
        assert c.parse_event(line) == json.loads(line), line
        assert c.parse_event(line.encode() + b"\n") == json.loads(line)


# ------------------------------------------------------------------ the learner's own record
def test_nothing_is_written_until_something_is_recorded(home, tmp_path):
    record = c.LearnerRecord()
    assert record.path == home / ".ddplab" / "record.jsonl"
    assert record.events() == [] and record.attempts("check", "4.1") == 0 and c.membership() is None
    c.Class(class_folder(tmp_path))
    assert not (home / ".ddplab").exists()
    c.note("check", "4.1", 3, True)
    assert stat.S_IMODE(os.stat(home / ".ddplab").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(record.path).st_mode) == 0o600
    assert [e["answer"] for e in record.events()] == [3]


def test_attempts_are_counted_per_kind_and_key_and_a_reveal_names_its_prediction(home):
    record = c.LearnerRecord()
    for answer in (1, 2, 3):
        assert c.note("check", "4.1", answer, answer == 3, reason="counted") is None
    c.note("check", "4.2", "b", False)
    c.note("prediction", "4.1", 0.5)
    c.note("prediction", "4.1", 0.7)
    c.note("reveal", "4.1", measured=0.75)
    c.note("reveal", "5.a", measured=1.0)  # nothing predicted: attempt 0
    got = [(e["kind"], e["key"], e["attempt"]) for e in record.events()]
    assert got == [("check", "4.1", 1), ("check", "4.1", 2), ("check", "4.1", 3), ("check", "4.2", 1),
                   ("prediction", "4.1", 1), ("prediction", "4.1", 2), ("reveal", "4.1", 2), ("reveal", "5.a", 0)]
    assert record.attempts("check", "4.1") == 3 and record.attempts("prediction", "4.1") == 2
    assert {e["learner"] for e in record.events()} == {c.default_name()}


def test_the_record_skips_and_counts_bad_lines(home):
    record = c.LearnerRecord()
    record.append(event())
    write_lines(record.path, [b"not json\n", b'{"v": 1}\n', b"x" * 5000 + b"\n", event(answer=4), b'{"v": 1, "unfinished'])
    assert [e["answer"] for e in record.events()] == [3, 4]
    assert record.malformed == 3  # the unfinished last line may still be being written: not counted
    write_lines(record.path, [b'"}\n', event(answer=5)])
    assert [e["answer"] for e in record.events()] == [3, 4, 5] and record.malformed == 4


def test_the_record_refuses_a_link_or_someone_elses_file(home, tmp_path):
    folder = home / ".ddplab"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.jsonl"
    (folder / "record.jsonl").symlink_to(target)
    with pytest.raises(c.ClassroomError, match="record.jsonl is a symbolic link: remove it"):
        c.LearnerRecord().append(event())
    assert not target.exists()
    warning = c.note("check", "4.1", 3, True)  # recording never raises into the lesson
    assert "symbolic link" in warning
    (folder / "record.jsonl").unlink()
    (folder / "record.jsonl").write_text("")
    os.chown(folder / "record.jsonl", OTHER, -1)
    with pytest.raises(c.ClassroomError, match=f"owned by uid {OTHER}: move it away"):
        c.LearnerRecord().append(event())
    with pytest.raises(c.ClassroomError, match=f"owned by uid {OTHER}"):
        c.LearnerRecord().events()
    (folder / "record.jsonl").unlink()
    os.mkfifo(folder / "record.jsonl")  # opened for writing, a FIFO nobody reads would wait forever
    with pytest.raises(c.ClassroomError, match="record.jsonl is not a regular file: move it away"):
        c.LearnerRecord().append(event())
    with pytest.raises(c.ClassroomError, match="record.jsonl is not a regular file"):
        c.LearnerRecord().events()
    (folder / "record.jsonl").unlink()
    folder.rmdir()
    folder.symlink_to(tmp_path)
    with pytest.raises(c.ClassroomError, match="cannot hold your record: it is a symbolic link"):
        c.LearnerRecord().append(event())


def test_the_record_takes_only_events():
    with pytest.raises(ValueError):
        c.LearnerRecord().append({**event(), "code": "print(1)"})


# ------------------------------------------------------------------ the class folder
def test_create_class_makes_a_folder_learners_can_write_but_not_list(tmp_path):
    parent = tmp_path / "courses"
    parent.mkdir()
    os.chown(parent, -1, OTHER)
    os.chmod(parent, 0o2755)  # a setgid folder: what is made in it takes its group, unless create_class sets its own
    group = grp.getgrgid(os.getgid()).gr_name
    path = c.create_class(parent / "ddp", learners_group=group)
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == 0o3733 and stat.S_ISDIR(st.st_mode)
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert os.listdir(path) == [".class.json"]
    meta = os.stat(path / ".class.json")
    assert stat.S_IMODE(meta.st_mode) == 0o600
    info = json.loads((path / ".class.json").read_text())
    assert info["v"] == 1 and info["learners_group"] == group and info["created"] <= time.time()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert c.create_class(empty) == empty and json.loads((empty / ".class.json").read_text())["learners_group"] is None


def test_create_class_refuses_a_folder_in_use(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("")
    with pytest.raises(c.ClassroomError, match="exists and is not empty: choose a new folder"):
        c.create_class(full)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, -1)
    with pytest.raises(c.ClassroomError, match=f"belongs to uid {OTHER}"):
        c.create_class(theirs)
    (tmp_path / "link").symlink_to(tmp_path / "empty-target")
    (tmp_path / "empty-target").mkdir()
    with pytest.raises(c.ClassroomError, match="exists and is not a folder"):
        c.create_class(tmp_path / "link")
    with pytest.raises(c.ClassroomError, match="cannot be made: there is no folder .*missing; make it first"):
        c.create_class(tmp_path / "missing" / "class")
    with pytest.raises(c.ClassroomError, match="no group 'no-such-group-46'"):
        c.create_class(tmp_path / "new", learners_group="no-such-group-46")
    assert not (tmp_path / "new").exists()
    assert stat.S_IMODE(os.stat(tmp_path / "empty-target").st_mode) != 0o3733


def test_join_makes_the_learners_own_file_0640_and_remembers_it(tmp_path, home):
    os.umask(0o077)  # the umask would take the group's read: the file is still 0640
    try:
        folder = class_folder(tmp_path)
        os.chown(folder, -1, OTHER)  # the teacher's group
        os.chmod(folder, c.CLASS_MODE)
        joined = c.join(folder, "Ann Lee")
    finally:
        os.umask(0o022)
    assert joined.dir == str(folder) and joined.name == "Ann Lee" and joined.owner == OTHER
    assert c.FILE_NAME.fullmatch(joined.file) and joined.file.startswith("ann-lee-")
    st = os.lstat(joined.path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert (st.st_uid, st.st_gid) == (os.getuid(), OTHER)  # the folder's group, through setgid
    assert st.st_size == 0
    membership = home / ".ddplab" / "class.json"
    assert stat.S_IMODE(os.stat(membership).st_mode) == 0o600
    assert c.membership() == joined
    assert c.join(folder, "Ann Lee") == joined  # another kernel: the same file
    for name in ("Ann", "ann lee"):  # another name (even of the same slug): another file
        again = c.join(folder, name)
        assert again.file != joined.file and again.file.startswith(c.slug(name) + "-")
    other = c.join(folder, "Bob")
    assert other.file != joined.file and other.file.startswith("bob-") and c.membership() == other
    other.leave()
    assert c.membership() is None and other.path.exists()  # the file stays, for the teacher


def test_join_creates_its_file_exclusively(tmp_path, monkeypatch):
    folder = class_folder(tmp_path)
    monkeypatch.setattr(c.secrets, "token_hex", lambda n: "0123456789abcdef")
    (folder / "ann-0123456789abcdef.jsonl").symlink_to(tmp_path / "victim")
    with pytest.raises(c.ClassroomError, match="ann-0123456789abcdef.jsonl is in the class folder .* already, made by "
                                               "someone else: join again"):
        c.join(folder, "Ann")
    assert not (tmp_path / "victim").exists()


@pytest.mark.parametrize("name", ["", "a" * 41, "a/b", " Ann", "Ann ", "Ann;rm", "...", "Ann\n", "$(id)", 42])
def test_join_refuses_a_bad_name(tmp_path, name):
    with pytest.raises(c.ClassroomError, match="a name .*choose another name"):
        c.join(class_folder(tmp_path), name)


def test_join_refuses_a_folder_not_set_up_for_a_class(tmp_path):
    folder = class_folder(tmp_path)
    os.chmod(folder, 0o755)
    with pytest.raises(c.ClassroomError) as info:
        c.join(folder, "Ann")
    assert str(info.value) == (f"the class folder {folder} is not set up for a class (mode 755, expected 3733): ask your "
                               f"teacher to run `ddplab class create {folder}`")
    os.chmod(folder, 0o1733)  # no setgid: the teacher's group would not get the files
    with pytest.raises(c.ClassroomError, match="mode 1733, expected 3733"):
        c.join(folder, "Ann")
    os.chmod(folder, c.CLASS_MODE)
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(c.ClassroomError, match="is a symbolic link"):
        c.join(tmp_path / "link", "Ann")
    with pytest.raises(c.ClassroomError, match="there is no class folder"):
        c.join(tmp_path / "missing", "Ann")
    (tmp_path / "file").write_text("")
    os.chmod(tmp_path / "file", c.CLASS_MODE)
    with pytest.raises(c.ClassroomError, match="cannot be opened .*Not a directory"):
        c.join(tmp_path / "file", "Ann")
    mine = c.create_class(tmp_path / "mine")
    with pytest.raises(c.ClassroomError, match="is your own: .*own_folder=True"):
        c.join(mine, "Ann")
    assert c.join(mine, "Ann", own_folder=True).own_folder  # the teacher trying the class out
    assert c.membership() is not None


def test_a_recorded_event_goes_to_the_own_record_and_the_class(tmp_path):
    joined = c.join(class_folder(tmp_path), "Ann Lee")
    assert c.note("check", "4.1", 3, True) is None
    assert c.note("prediction", "4.a", 0.5) is None
    in_class = [c.parse_event(line) for line in joined.path.read_bytes().splitlines()]
    assert [(e["kind"], e["learner"]) for e in in_class] == [("check", "Ann Lee"), ("prediction", "Ann Lee")]
    assert c.LearnerRecord().events() == in_class


def test_every_append_checks_the_folder_again(tmp_path, caplog):
    folder = class_folder(tmp_path)
    joined = c.join(folder, "Ann")
    record = c.LearnerRecord()
    assert c.record(event(learner="Ann")) is None
    size = joined.path.stat().st_size
    os.chmod(folder, 0o755)
    with caplog.at_level("WARNING", logger="ddplab"):
        warning = c.record(event(learner="Ann", answer=4))
    assert warning == (f"not added to the class: the class folder {folder} is not set up for a class (mode 755, expected "
                       f"3733): ask your teacher to run `ddplab class create {folder}`")
    assert "mode 755" in caplog.text
    assert joined.path.stat().st_size == size  # nothing written to the class
    assert [e["answer"] for e in record.events()] == [3, 4]  # the own record still has it
    os.chmod(folder, c.CLASS_MODE)
    os.chown(folder, OTHER + 1, -1)  # someone else's folder at the same path now
    os.chmod(folder, c.CLASS_MODE)
    assert "now belongs to uid 54322" in c.record(event(learner="Ann"))
    os.chown(folder, OTHER, -1)
    os.chmod(folder, c.CLASS_MODE)
    joined.path.unlink()
    joined.path.symlink_to(tmp_path / "elsewhere")
    assert "cannot be opened (Too many levels of symbolic links): join the class again" in c.record(event(learner="Ann"))
    assert not (tmp_path / "elsewhere").exists()
    joined.path.unlink()
    os.mkfifo(joined.path)
    assert "cannot be opened (No such device or address)" in c.record(event(learner="Ann"))  # (no wait)
    joined.path.unlink()
    assert "is gone: join the class again" in c.record(event(learner="Ann"))
    joined.path.write_text("")
    os.chown(joined.path, OTHER, -1)
    assert "no longer your own file" in c.record(event(learner="Ann"))
    assert len(record.events()) == 7


# ------------------------------------------------------------------ the teacher's reader
def learner_file(folder, name, events, suffix="0" * 16):
    path = folder / f"{c.slug(name)}-{suffix}.jsonl"
    write_lines(path, events)
    return path


def test_the_reader_skips_and_counts_what_is_not_a_learners_events(tmp_path):
    folder = c.create_class(tmp_path / "class")
    learner_file(folder, "Ann", [event(learner="Ann"), b"not json\n", b"{}\n", b"x" * 3000 + b"\n",
                                 event(learner="Ann", answer=4)])
    learner_file(folder, "Bob", [event(learner="Bob"), event(learner="Eve")])  # two learners in one file
    learner_file(folder, "Cy", [event(learner="Dee")])  # a name that is not the file's
    big = folder / f"big-{'1' * 16}.jsonl"
    with open(big, "wb") as f:
        f.truncate(c.MAX_FILE + 1)  # (sparse: nothing to read, and nothing is)
    (folder / f"link-{'2' * 16}.jsonl").symlink_to(folder / f"ann-{'0' * 16}.jsonl")
    write_lines(folder / "notes.jsonl", [event(learner="Ann")])
    write_lines(folder / f"many-{'3' * 16}.jsonl", [b"x\n"] * (c.MAX_LINES + 1))
    os.mkdir(folder / f"dir-{'4' * 16}.jsonl")
    (folder / "readme.txt").write_text("not read")
    klass = c.Class(folder)
    assert klass.skipped == {"malformed line": 3, "more than one learner": 1, "name not matching the file": 1,
                             "too large": 1, "symlink": 1, "not a learner's file name": 1, "too many lines": 1,
                             "not a regular file": 1}
    assert klass.skipped.total == 10
    assert [(e["learner"], e["answer"]) for e in klass.events()] == [("Ann", 3), ("Ann", 4)]
    assert len(klass) == 2
    assert klass.bytes_read < 100_000  # the large file was not read


def test_lines_are_read_across_reads_and_a_line_too_long_is_not_kept(tmp_path):
    path = tmp_path / "f.jsonl"
    lines = [c.line(event(attempt=n)) for n in range(1, 4)]
    path.write_bytes(lines[0] + b"y" * 5000 + b"\n" + lines[1] + b"z" * 3000 + b"\n" + lines[2] + b'{"v": 1, "unfin')
    for chunk in (7, 100, 1 << 20):
        state = c._File()
        fd = os.open(path, os.O_RDONLY)
        try:
            got = list(c._read_lines(fd, state, path.stat().st_size, chunk))
        finally:
            os.close(fd)
        assert got[0] + b"\n" == lines[0] and got[2] + b"\n" == lines[1] and got[4] + b"\n" == lines[2], chunk
        assert len(got) == 5 and len(got[1]) > c.MAX_LINE and len(got[3]) > c.MAX_LINE, chunk
        if chunk < 1000:  # a line longer than one read is dropped as it is read, never kept whole
            assert got[1] is c.TOO_LONG and got[3] is c.TOO_LONG
        assert state.offset == path.stat().st_size - len(b'{"v": 1, "unfin') and state.read == path.stat().st_size


def test_the_reader_keeps_the_learners_group_only(tmp_path):
    folder = c.create_class(tmp_path / "class", learners_group=grp.getgrgid(os.getgid()).gr_name)
    learner_file(folder, "Ann", [event(learner="Ann")])
    os.chown(learner_file(folder, "Eve", [event(learner="Eve")]), OTHER, -1)
    klass = c.Class(folder)
    assert [e["learner"] for e in klass.events()] == ["Ann"] and klass.skipped == {"outside the class": 1}
    assert c.Class(folder, learners_group=None).learners_group is not None  # (from .class.json)
    assert [r["account"] for r in klass.rows()] == ["root"]


def test_refresh_reads_only_what_was_appended(tmp_path):
    folder = c.create_class(tmp_path / "class")
    ann = learner_file(folder, "Ann", [event(learner="Ann", attempt=n) for n in range(1, 51)])
    learner_file(folder, "Bob", [event(learner="Bob")])
    klass = c.Class(folder)
    assert klass.bytes_read == ann.stat().st_size + (folder / f"bob-{'0' * 16}.jsonl").stat().st_size
    assert klass.refresh() == 0 and len(klass) == 51
    added = c.line(event(learner="Ann", attempt=51, answer=9))
    write_lines(ann, [added])
    assert klass.refresh() == len(added)
    assert len(klass) == 52 and klass.events()[50]["answer"] == 9
    line = c.line(event(learner="Ann", attempt=52))
    write_lines(ann, [line[:30]])  # a line being written: left for later
    assert klass.refresh() == 30 and len(klass) == 52 and klass.skipped == {}
    write_lines(ann, [line[30:]])
    assert klass.refresh() == len(line) and len(klass) == 53 and klass.skipped == {}
    ann.write_bytes(c.line(event(learner="Ann")))  # rewritten, smaller: read again whole
    assert klass.refresh() == ann.stat().st_size and len(klass) == 2
    (folder / f"bob-{'0' * 16}.jsonl").unlink()
    assert klass.refresh() == 0 and len(klass) == 1


def small_class(tmp_path):
    """Three learners of lessons 4 and 5 (exercises 4.1 and 4.2; prediction 4.a)."""
    folder = c.create_class(tmp_path / "class")
    t = iter(range(1_700_000_000, 1_800_000_000, 10))

    def e(learner, kind, key, answer=None, ok=None, attempt=1, **more):
        return c.make_event(kind, key, answer, ok, learner=learner, attempt=attempt, when=float(next(t)), **more)

    learner_file(folder, "Ann", [e("Ann", "check", "4.1", 7, False), e("Ann", "check", "4.1", 8, True, 2),
                                 e("Ann", "check", "4.2", "b", True), e("Ann", "prediction", "4.a", 2.0),
                                 e("Ann", "reveal", "4.a", measured=2.5)])
    learner_file(folder, "Bob", [e("Bob", "check", "4.1", 7, False), e("Bob", "check", "4.1", 7, False, 2),
                                 e("Bob", "check", "4.1", 6, False, 3), e("Bob", "check", "4.1", "n = 4; print(n)", False, 4),
                                 e("Bob", "prediction", "4.a", 1.0), e("Bob", "prediction", "4.a", 3.0, attempt=2),
                                 e("Bob", "check", "5.1", 1, True)])
    learner_file(folder, "Cy", [e("Cy", "check", "4.1", 9, False), e("Cy", "check", "4.2", "a", False),
                                e("Cy", "check", "4.2", "c", False, 2), e("Cy", "check", "4.1", 8, True, 2)])
    return folder


def test_rows_and_to_pandas_fold_a_reveal_into_its_prediction(tmp_path, monkeypatch):
    klass = c.Class(small_class(tmp_path))
    rows = klass.rows()
    assert len(rows) == 15 and set(rows[0]) == set(c.COLUMNS)
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)
    ann = [r for r in rows if r["learner"] == "Ann" and r["kind"] == "prediction"]
    assert [(r["key"], r["answer"], r["measured"], r["attempt"]) for r in ann] == [("4.a", 2.0, 2.5, 1)]
    assert all(r["kind"] != "reveal" for r in rows)
    frame = klass.to_pandas()
    assert list(frame.columns) == list(c.COLUMNS) and len(frame) == 15
    assert frame.loc[(frame.learner == "Bob") & (frame.key == "4.1"), "ok"].tolist() == [False] * 4
    assert frame.loc[frame.kind == "prediction", "measured"].isna().sum() == 2
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ModuleNotFoundError, match="^to_pandas needs pandas: pip install pandas$"):
        klass.to_pandas()


def test_summary_counts_who_started_finished_and_the_common_wrong_answers(tmp_path):
    klass = c.Class(small_class(tmp_path), exercises={4: ["4.1", "4.2"], 5: ["5.1", "5.2"]})
    s = klass.summary()
    assert s["learners"] == 3 and s["skipped"] == {}
    assert s["lessons"] == {4: {"started": ["Ann", "Bob", "Cy"], "finished": ["Ann"]},
                            5: {"started": ["Bob"], "finished": []}}
    assert s["exercises"]["4.1"] == {"tried": 3, "right": 2, "wrong": [(7, 3), (6, 1), (9, 1)]}  # (code: not kept)
    assert s["exercises"]["4.2"] == {"tried": 2, "right": 1, "wrong": [("a", 1), ("c", 1)]}
    assert s["exercises"]["5.1"] == {"tried": 1, "right": 1, "wrong": []}
    assert s["predictions"] == {"4.a": {"learners": ["Ann", "Bob"], "predicted": [2.0, 1.0], "measured": [2.5, None]}}
    assert klass.summary(exercises={4: ["4.1"]})["lessons"][4]["finished"] == ["Ann", "Cy"]
    (tmp_path / "again").mkdir()
    assert c.Class(small_class(tmp_path / "again")).summary()["lessons"][4]["finished"] is None  # exercises unknown


def test_the_public_module_knows_the_lessons_exercises(tmp_path):
    assert ddplab.classroom.Class is not c.Class and issubclass(ddplab.classroom.Class, c.Class)
    known = ddplab.classroom.lesson_exercises()
    assert "4.1" in known[4] and sum(map(len, known.values())) >= 80
    s = ddplab.classroom.Class(small_class(tmp_path)).summary()
    assert len(known[4]) > 2 and s["lessons"][4]["finished"] == []  # lesson 4 has more than 4.1 and 4.2
    assert s["lessons"][1] == {"started": [], "finished": []}
    for name in ddplab.classroom.__all__:
        assert getattr(ddplab.classroom, name) is not None


def test_the_data_layer_imports_nothing_heavy():
    code = ("import sys; import ddplab.kernel.classroom; "
            "print(sorted(m for m in ('torch', 'IPython', 'ipyparallel', 'ipywidgets', 'matplotlib', 'pandas', 'zmq') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(ddplab.__file__))})
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ the report
def report_record(home):
    record = c.LearnerRecord()
    for e in [event(key="4.1", answer=7, ok=False, reason="count the updates, not the micro-batches."),
              event(key="4.1", answer=6, ok=True, attempt=2, reason="one all-reduce per update."),
              event(key="4.2", answer="import os; os.system('x')", ok=False),
              event("prediction", "4.a", 2.0, None), event("reveal", "4.a", None, None, measured=2.5),
              event("prediction", "4.a", 3.0, None, attempt=2),
              event("prediction", "5.b", "b", None), event("reveal", "5.b", None, None, measured=0.0),
              event(key="5.1", answer=True, ok=True)]:
        record.append(e)
    write_lines(record.path, [b"garbage\n"])
    return record


def test_write_report_writes_markdown_json_and_gradescopes_results(home, tmp_path):
    import jsonschema

    report_record(home)
    out = c.write_report(tmp_path / "out")
    assert sorted(os.listdir(out)) == ["report.json", "report.md", "results.json"]
    report = json.loads((out / "report.json").read_text())
    schema = json.loads(c.SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(report, schema, cls=jsonschema.Draft202012Validator)
    assert len(report["events"]) == 9 and report["malformed_lines"] == 1 and report["learner"] == "Ann Lee"
    assert report["summary"]["score"] == 2 and report["summary"]["max_score"] == 3
    predictions = report["summary"]["predictions"]
    assert [(p["key"], p["attempt"], p["predicted"], p["measured"], p["difference"], p["relative"]) for p in predictions] \
        == [("4.a", 1, 2.0, 2.5, -0.5, -0.2), ("4.a", 2, 3.0, None, None, None), ("5.b", 1, None, 0.0, None, None)]
    tampered = dict(report, events=[dict(report["events"][0], answer="import os; os.system('x')")])
    with pytest.raises(jsonschema.ValidationError):  # (the schema does refuse what an event may not hold)
        jsonschema.validate(tampered, schema, cls=jsonschema.Draft202012Validator)

    results = json.loads((out / "results.json").read_text())
    assert results["score"] == 2.0
    assert [(t["name"], t["number"], t["score"], t["max_score"], t["status"], t["visibility"]) for t in results["tests"]] == [
        ("Exercise 4.1", "4.1", 1.0, 1.0, "passed", "visible"), ("Exercise 4.2", "4.2", 0.0, 1.0, "failed", "visible"),
        ("Exercise 5.1", "5.1", 1.0, 1.0, "passed", "visible")]
    assert results["tests"][0]["output"] == "one all-reduce per update."  # the judge's reason for the right answer
    assert results["tests"][1]["output"] == "not yet right; attempts: 1"
    assert all(isinstance(t["output"], str) for t in results["tests"])

    md = (out / "report.md").read_text()
    assert md.startswith("# ddplab report: Ann Lee\n") and "2 of 3 exercises right, 3 predictions." in md
    assert md.index("## Lesson 4") < md.index("## Lesson 5")
    assert "| 4.1 | 2 | right | 7, 6 |" in md and "| 4.2 | 1 | not yet right | - |" in md
    assert "| 4.a | 2 | 2.5 | -0.5 | -20% |" in md and "| 4.a | 3 | - | - | - |" in md
    assert "import os" not in md + json.dumps(report) + json.dumps(results)


def test_a_report_in_chinese(home, tmp_path):
    report_record(home)
    md = (c.write_report(tmp_path / "zh", lang="zh") / "report.md").read_text()
    assert "## 第 4 课" in md and "### 练习" in md and "### 预测" in md and "| 练习 | 尝试次数 | 结果 | 你的答案 |" in md
    assert json.loads((tmp_path / "zh" / "results.json").read_text())["tests"][0]["name"] == "练习 4.1"


def test_write_report_says_what_is_missing(home, tmp_path):
    with pytest.raises(c.ClassroomError, match="there is no record at .*record.jsonl yet"):
        c.write_report(tmp_path / "out")
    report_record(home)
    (tmp_path / "file").write_text("")
    with pytest.raises(c.ClassroomError, match="is not a folder"):
        c.write_report(tmp_path / "file")
    with pytest.raises(c.ClassroomError, match="lang must be en or zh"):
        c.write_report(tmp_path / "out", lang="fr")


# ------------------------------------------------------------------ the command line
def test_ddplab_class_create(tmp_path, capsys):
    assert cli.main(["class", "create", str(tmp_path / "ddp")]) == 0
    assert stat.S_IMODE(os.stat(tmp_path / "ddp").st_mode) == 0o3733
    out = capsys.readouterr().out
    assert f"class folder {tmp_path / 'ddp'} made" in out and "ddplab.classroom.join(" in out
    assert cli.main(["class", "create", str(tmp_path / "ddp")]) == 1
    err = capsys.readouterr().err
    assert err == f"ddplab: {tmp_path / 'ddp'} exists and is not empty: choose a new folder for the class\n"
    assert cli.main(["class", "create", str(tmp_path / "x"), "--learners-group", "no-such-group-46"]) == 1
    assert capsys.readouterr().err.startswith("ddplab: there is no group 'no-such-group-46'")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["class"])
    assert exit_.value.code == 2


def test_ddplab_report(home, tmp_path, capsys):
    assert cli.main(["report", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ddplab: there is no record at ") and err.count("\n") == 1
    report_record(home)
    assert cli.main(["report", "--out", str(tmp_path / "out"), "--lang", "zh"]) == 0
    assert "wrote report.md, report.json and results.json" in capsys.readouterr().out
    assert "第 4 课" in (tmp_path / "out" / "report.md").read_text()
    moved = tmp_path / "record.jsonl"
    os.rename(home / ".ddplab" / "record.jsonl", moved)
    assert cli.main(["report", "--out", str(tmp_path / "two"), "--record", str(moved)]) == 0
    assert json.loads((tmp_path / "two" / "results.json").read_text())["score"] == 2.0
    (tmp_path / "file").write_text("")
    assert cli.main(["report", "--out", str(tmp_path / "file"), "--record", str(moved)]) == 1
    assert "is not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", "--out", str(tmp_path / "x"), "--lang", "fr"])
    assert exit_.value.code == 2
