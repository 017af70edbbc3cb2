"""The classroom's data: what a learner predicted and answered, kept in the learner's own record and,
for a class, in a folder the teacher reads. Plain files and the file system's permissions, as
nbgrader's exchange does; stdlib only.

    make_event(kind, key, answer, ok, learner=..., attempt=...) -> an event (a dict), checked
    parse_event(line)            -> the event a JSON line holds, or None if it is not a good one
    LearnerRecord(path=None)     -> ~/.ddplab/record.jsonl: append(event), events(), attempts(kind, key)
    create_class(dir)            -> the teacher's class folder (mode 3733: learners write, cannot list)
    join(dir, name)              -> ClassMembership: the learner's own file in it, remembered in ~/.ddplab/class.json
    record(event), note(kind, key, ...) -> into the own record and the class (a warning, never an exception, for the class)
    Class(dir)                   -> the teacher's reader: events(), rows(), to_pandas(), summary(), refresh()
    write_report(out_dir)        -> report.md, report.json and Gradescope's results.json from the own record

An event is one JSON object a line: {"v": 1, "learner", "kind": "prediction" | "check" | "reveal", "key":
"4.2", "lesson": 4, "answer", "ok", "attempt", "time"} (+ "measured" on predictions and reveals, "reason"
on checks, "answer_kept": false where an answer was not kept). Only short answers are kept (numbers,
bools, short words): never code, outputs or file contents.
"""
from __future__ import annotations

import grp
import json
import logging
import math
import numbers
import os
import pwd
import re
import secrets
import stat
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from ..shared.errors import DDPLabError
from ..shared.privacy import private_folder
from ..shared.words import say

if TYPE_CHECKING:
    import pandas

log = logging.getLogger("ddplab")

VERSION = 1
KINDS = ("prediction", "check", "reveal")
MAX_LINE = 2000  # bytes of one event's line
MAX_FILE = 2 << 20  # bytes of one learner's file in a class folder
MAX_LINES = 20_000  # lines of one learner's file
MAX_ANSWER = 40
MAX_REASON = 500
CLASS_MODE = 0o3733  # setgid + sticky; the owner rwx, the group and others -wx: create, never list
FILE_MODE = 0o640  # a learner's file: the folder's group (the teacher's, through setgid) reads it

KEY = re.compile(r"[0-9]{1,4}\.[a-z0-9_]{1,32}")
ANSWER = re.compile(r"[A-Za-z0-9.,\-+_()' ]{0,40}")
FILE_NAME = re.compile(r"([a-z0-9-]{1,40})-[0-9a-f]{16}\.jsonl")
NAME_MARKS = " -_."

FIELDS = frozenset({"v", "learner", "kind", "key", "lesson", "answer", "ok", "attempt", "time"})
OPTIONAL = {"prediction": frozenset({"measured", "answer_kept"}), "check": frozenset({"reason", "answer_kept"}),
            "reveal": frozenset({"measured"})}

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_PATH = getattr(os, "O_PATH", os.O_RDONLY)  # a folder learners may not read can still be opened as a path


class ClassroomError(DDPLabError):
    """A record or a class folder that cannot be used; the message says what to do."""


Event = dict[str, Any]
# what a file's reader keeps of an event (its learner is the file's): kind, key, lesson, answer, ok,
# attempt, time, measured, reason, answer_kept
Compact = tuple[str, str, int, Any, Any, int, float, Any, Any, Any]


# ------------------------------------------------------------------ events
def name_problem(name: object) -> str | None:
    """Why `name` cannot name a learner, or None: 1 to 40 letters, digits, spaces, - _ or ."""
    if not isinstance(name, str) or not 1 <= len(name) <= 40:
        return "a name is 1 to 40 characters"
    if name != name.strip() or not any(c.isalnum() for c in name):
        return "a name has a letter or a digit and no space at either end"
    if not all(c.isalnum() or c in NAME_MARKS for c in name) or unicodedata.normalize("NFC", name) != name:
        return "a name is made of letters, digits, spaces, - _ and ."
    return None


def slug(name: str) -> str:
    """The file-name form of a learner's name: "Ann Lee" -> "ann-lee" (letters outside ASCII dropped)."""
    ascii_ = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", ascii_).strip("-")[:40].strip("-") or "learner"


def keep_answer(answer: object) -> tuple[Any, bool]:
    """(what is kept of `answer`, whether it was kept): a finite number, a bool, or a short plain string
    (a tuple of such, as Python writes it: "('A', 'B')"). Anything else is dropped."""
    if answer is None or isinstance(answer, bool):
        return answer, True
    if isinstance(answer, numbers.Integral):
        value = int(answer)
        return (value, True) if abs(value) < 2**53 else (None, False)
    if isinstance(answer, numbers.Real):
        number = float(answer)
        return (number, True) if math.isfinite(number) else (None, False)
    if isinstance(answer, (tuple, list)) and len(answer) <= 8 and \
            all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in answer):
        answer = repr(tuple(answer))
    if isinstance(answer, str) and len(answer) <= MAX_ANSWER and ANSWER.fullmatch(answer):
        return answer, True
    return None, False


def _finite(value: object) -> bool:
    """A finite float, or an int a float holds exactly (never a bool)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and -2**53 < value < 2**53


def make_event(kind: str, key: str, answer: object = None, ok: bool | None = None, *, learner: str, attempt: int,
               measured: float | None = None, reason: str | None = None, when: float | None = None) -> Event:
    """One event, checked (ValueError says what is wrong). The answer is kept only if short and plain
    (keep_answer); a reason longer than 500 characters, or than the line allows, is cut."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise ValueError(f"key must be like '4.2' or '4.speedup', not {key!r}")
    why = name_problem(learner)
    if why:
        raise ValueError(f"{why}: {learner!r} is not")
    event: Event = {"v": VERSION, "learner": learner, "kind": kind, "key": key, "lesson": int(key.split(".")[0])}
    if kind == "reveal":
        if answer is not None:
            raise ValueError("a reveal has no answer: it carries what was measured")
        if not _finite(measured):
            raise ValueError(f"a reveal carries the measured value, a finite number, not {measured!r}")
    kept, was_kept = keep_answer(answer)
    event["answer"] = kept
    if not was_kept:
        event["answer_kept"] = False
    if ok is not None and not isinstance(ok, bool):
        raise ValueError(f"ok must be True, False or None, not {ok!r}")
    event["ok"] = ok
    lowest = 0 if kind == "reveal" else 1  # a reveal names the prediction it reveals; 0: there was none
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not lowest <= attempt < 2**31:
        raise ValueError(f"attempt must be a whole number from {lowest}, not {attempt!r}")
    event["attempt"] = attempt
    event["time"] = time.time() if when is None else when
    if not _finite(event["time"]) or not 0 <= event["time"] < 2**53:
        raise ValueError(f"time must be a finite number of seconds, not {event['time']!r}")
    event["time"] = float(event["time"])
    if measured is not None:
        if kind == "check":
            raise ValueError("a check carries no measured value")
        if not _finite(measured):
            raise ValueError(f"measured must be a finite number, not {measured!r}")
        event["measured"] = float(measured)
    if reason is not None:
        if kind != "check":
            raise ValueError("only a check carries the judge's reason")
        if not isinstance(reason, str):
            raise ValueError(f"reason must be a string, not {type(reason).__name__}")
        event["reason"] = reason[:MAX_REASON]
        while len(line(event)) > MAX_LINE:  # (long UTF-8: cut further)
            event["reason"] = event["reason"][:-20]
    if len(line(event)) > MAX_LINE:
        raise ValueError("this event does not fit one line")
    return event


def line(event: Mapping[str, Any]) -> bytes:
    """An event as its line of JSON Lines (UTF-8, newline-ended)."""
    return (json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number an event may hold")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]  # (json's own scanner)
_KEYS: dict[str, tuple[str, int]] = {}  # a key seen valid -> (that key: one str for all events, its lesson)
_NAMES: set[str] = set()  # learner names seen valid
_KIND = {kind: kind for kind in KINDS}


def _known_key(key: str) -> tuple[str, int] | None:
    """(key, its lesson) for a valid key ("4.2" -> ("4.2", 4)), else None."""
    known = _KEYS.get(key)
    if known is None and KEY.fullmatch(key):
        known = (key, int(key.split(".")[0]))
        if len(_KEYS) < 100_000:
            _KEYS[key] = known
    return known


def _good_name(name: str) -> bool:
    if name in _NAMES:
        return True
    if name_problem(name) is not None:
        return False
    if len(_NAMES) < 100_000:
        _NAMES.add(name)
    return True


def parse_event(text: str | bytes) -> Event | None:
    """The event one line holds, or None: JSON of one object, at most 2,000 bytes, every field of its
    kind of the right type (numbers finite), nothing else."""
    raw = text.encode() if isinstance(text, str) else text
    raw = raw.rstrip(b"\r\n")
    if len(raw) > MAX_LINE:
        return None
    try:
        obj = _DECODER.decode(raw.decode())
    except (ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        return None
    return obj if _valid(obj) else None


_ALLOWED = {kind: FIELDS | extra for kind, extra in OPTIONAL.items()}


def _valid(obj: object) -> bool:
    """Whether a decoded line is an event (parse_event's rules)."""
    return _checked(obj) is not None


def _checked(obj: Any) -> Compact | None:
    """What a reader keeps of a decoded line if it is an event (parse_event's rules), else None.
    (Written for speed: a class folder holds hundreds of thousands.)"""
    if type(obj) is not dict or len(obj) < 9:
        return None
    try:
        v, kind, key, lesson, answer = obj["v"], obj["kind"], obj["key"], obj["lesson"], obj["answer"]
        ok, attempt, when, learner = obj["ok"], obj["attempt"], obj["time"], obj["learner"]
    except KeyError:
        return None
    if type(v) is not int or v != VERSION or type(kind) is not str or type(key) is not str:
        return None
    allowed = _ALLOWED.get(kind)
    if allowed is None or len(obj) > 9 and not obj.keys() <= allowed:
        return None
    known = _KEYS.get(key) or _known_key(key)
    if known is None or type(lesson) is not int or known[1] != lesson:
        return None
    if type(attempt) is not int or not (kind != "reveal") <= attempt < 2**31:
        return None
    if type(when) is not float and type(when) is not int or not 0 <= when < 2**53:
        return None
    if ok is not None and type(ok) is not bool:
        return None
    if type(learner) is not str or learner not in _NAMES and not _good_name(learner):
        return None
    if answer is not None and type(answer) is not bool:
        if type(answer) is str:
            if not ANSWER.fullmatch(answer):
                return None
        elif type(answer) is int:
            if not -2**53 < answer < 2**53:
                return None
        elif type(answer) is not float or not math.isfinite(answer):
            return None
    measured = reason = kept = None
    if len(obj) > 9:
        kept = obj.get("answer_kept")
        if "answer_kept" in obj and (kept is not False or answer is not None):
            return None
        measured = obj.get("measured")
        if measured is not None and (type(measured) is bool or not _finite(measured)):
            return None
        reason = obj.get("reason")
        if "reason" in obj and (type(reason) is not str or len(reason) > MAX_REASON):
            return None
    if kind == "reveal" and (answer is not None or measured is None):
        return None
    return (_KIND[kind], known[0], lesson, answer, ok, attempt, float(when), measured, reason, kept)


def _expand(learner: str, c: Compact) -> Event:
    kind, key, lesson, answer, ok, attempt, when, measured, reason, kept = c
    event: Event = {"v": VERSION, "learner": learner, "kind": kind, "key": key, "lesson": lesson, "answer": answer,
                    "ok": ok, "attempt": attempt, "time": when}
    if kept is not None:
        event["answer_kept"] = kept
    if measured is not None:
        event["measured"] = measured
    if reason is not None:
        event["reason"] = reason
    return event


# ------------------------------------------------------------------ reading a file of events
@dataclass
class _File:
    """What has been read of one file of events: up to `offset` (the end of its last whole line)."""
    ident: tuple[int, int, int] = (0, -1, 0)  # (inode, size, mtime_ns) when last read
    offset: int = 0
    lines: int = 0
    learner: str | None = None
    learners: list[str] = field(default_factory=list)  # per event, where a file may name several (the own record)
    events: list[Compact] = field(default_factory=list)
    malformed: int = 0
    problem: str | None = None  # why the whole file is skipped
    uid: int = -1
    read: int = 0  # bytes read, in all
    partial: tuple[int, _Partial] | None = None  # (events counted, the file's share of Class.summary)


TOO_LONG = b"x" * (MAX_LINE + 1)  # stands for a line too long to keep: counted as a malformed one


def _read_lines(fd: int, state: _File, end: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The whole lines of fd from state.offset to `end` (bytes), advancing state.offset past each; a
    line too long that spans reads is dropped as it is read (TOO_LONG stands for it), so that memory is
    bounded by `chunk`. An unfinished last line is left for later."""
    position = state.offset
    pending = b""
    discarding = False
    while position < end:
        data = os.pread(fd, min(chunk, end - position), position)
        if not data:
            break
        state.read += len(data)
        start, position = position, position + len(data)
        if discarding:
            newline = data.find(b"\n")
            if newline < 0:
                continue
            state.offset, discarding = start + newline + 1, False
            data = data[newline + 1:]
            yield TOO_LONG
        parts = (pending + data).split(b"\n")
        pending = parts.pop()
        for part in parts:
            state.offset += len(part) + 1
            yield part
        if len(pending) > MAX_LINE:
            discarding, pending = True, b""


def _take(state: _File, lines: Iterable[bytes], file_slug: str | None, max_lines: int | None) -> None:
    """Parse lines into state: events, malformed lines, and for a learner's file (file_slug) the one learner."""
    scan, checked, intern, events = _SCAN, _checked, _intern, state.events
    for raw in lines:
        state.lines += 1
        if max_lines is not None and state.lines > max_lines:
            _fail(state, "too many lines")
            return
        event: Compact | None = None
        if len(raw) <= MAX_LINE:
            try:
                text = raw.decode()
                obj, end = scan(text, 0)  # (json.loads without its checks of what surrounds the object)
                if end == len(text) or not text[end:].strip():
                    event = checked(obj)
            except (ValueError, RecursionError, StopIteration):
                event = None
        if event is None:
            state.malformed += 1
            continue
        learner = obj["learner"]
        if file_slug is None:
            state.learners.append(intern(learner))
        elif state.learner is None:
            if slug(learner) != file_slug:
                _fail(state, "name not matching the file")
                return
            state.learner = learner
        elif learner != state.learner:
            _fail(state, "more than one learner")
            return
        events.append(event)


_INTERNED: dict[str, str] = {}


def _intern(text: str) -> str:
    return _INTERNED.setdefault(text, text) if len(_INTERNED) < 100_000 else text


def _fail(state: _File, problem: str) -> None:
    state.problem, state.events, state.learners, state.learner = problem, [], [], None


# ------------------------------------------------------------------ the learner's own record
def home() -> Path:
    """~/.ddplab: the learner's record and class membership."""
    return Path(os.path.expanduser("~")) / ".ddplab"


def _own_file(path: Path, flags: int, mode: int = 0o600) -> int:
    """An fd of `path`, which must be a regular file of this user's, reached without following a link."""
    try:
        fd = os.open(path, flags | O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC, mode)  # (a FIFO put there: no hang)
    except FileNotFoundError:
        raise
    except OSError:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise ClassroomError(f"{path} is a symbolic link: remove it (ddplab writes only to a file of its own)") from None
        if not stat.S_ISREG(st.st_mode):
            raise ClassroomError(f"{path} is not a regular file: move it away so that ddplab can make its own") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by {_account(st.st_uid)}"
        raise ClassroomError(f"{path} is {what}: move it away so that ddplab can make its own")
    return fd


def _private_dir(folder: Path) -> None:
    """Make `folder` (0700) if missing; refuse one that is a link, someone else's or open to others."""
    made, why = private_folder(str(folder))
    if made is None:
        raise ClassroomError(f"{folder} cannot hold your record: {why}; move it away (ddplab makes its own, mode 0700)")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class LearnerRecord:
    """The learner's own record of predictions and checked answers: ~/.ddplab/record.jsonl (0600, in a
    0700 folder), written only when something is appended."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else home() / "record.jsonl"
        self._state = _File()

    def append(self, event: Mapping[str, Any]) -> None:
        """Add one event (it must be a valid one: make_event)."""
        data = line(event)
        if len(data) > MAX_LINE or not _valid(json.loads(data)):
            raise ValueError("not an event: make one with make_event")
        _private_dir(self.path.parent)
        fd = _own_file(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
                os.fchmod(fd, 0o600)
            _write_all(fd, data)
        finally:
            os.close(fd)

    def _read(self) -> _File:
        """The record read so far, its new lines added (the whole file again if it was replaced)."""
        if os.path.islink(self.path.parent):
            raise ClassroomError(f"{self.path.parent} is a symbolic link: move it away (ddplab makes its own folder)")
        try:
            fd = _own_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._state = _File()
            return self._state
        try:
            st = os.fstat(fd)
            state = self._state
            if st.st_ino != state.ident[0] or st.st_size < state.offset:
                state = self._state = _File()
            if (st.st_ino, st.st_size, st.st_mtime_ns) != state.ident:
                _take(state, _read_lines(fd, state, st.st_size), None, None)
                state.ident = (st.st_ino, st.st_size, st.st_mtime_ns)
        finally:
            os.close(fd)
        return state

    def events(self) -> list[Event]:
        """Every event of the record, oldest first (bad lines skipped: `malformed` counts them)."""
        state = self._read()
        return [_expand(who, c) for who, c in zip(state.learners, state.events)]

    @property
    def malformed(self) -> int:
        """Lines of the record that are not events (as of the last read)."""
        return self._state.malformed

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def attempts(self, kind: str, key: str) -> int:
        """How many events of this kind the record holds for exercise or prediction `key`."""
        return sum(1 for c in self._read().events if c[0] == kind and c[1] == key)


# ------------------------------------------------------------------ the class folder
def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def create_class(dir: str | os.PathLike[str], learners_group: str | None = None) -> Path:
    """Make the class folder `dir` (or take an empty one of the caller's): the caller's, of the caller's
    primary group, mode 3733 (setgid and sticky; learners may create files in it, not list it, nor remove
    or rename others' files). learners_group: the Unix group whose members are the class (the reader
    then skips files of anyone else), kept in DIR/.class.json, which only the teacher reads."""
    path = Path(os.path.abspath(dir))
    gid = None
    if learners_group is not None:
        try:
            gid = grp.getgrnam(learners_group).gr_gid
        except KeyError:
            raise ClassroomError(f"there is no group {learners_group!r} on this machine: check its name "
                                 "(getent group), or leave --learners-group out") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            os.mkdir(path, 0o700)
        except FileNotFoundError:
            raise ClassroomError(f"{path} cannot be made: there is no folder {path.parent}; make it first") from None
        except OSError as exc:
            raise ClassroomError(f"{path} cannot be made ({exc.strerror}): choose a folder in a place you can "
                                 "write") from None
    except OSError as exc:
        raise ClassroomError(f"{path} cannot be checked ({exc.strerror}): choose another folder") from None
    else:
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise ClassroomError(f"{path} exists and is not a folder: choose a new folder for the class")
        if st.st_uid != os.getuid():
            raise ClassroomError(f"{path} belongs to {_account(st.st_uid)}: choose a new folder for the class")
        try:
            full = bool(os.listdir(path))
        except OSError as exc:
            raise ClassroomError(f"{path} cannot be listed ({exc.strerror}): choose a new folder for the class") from None
        if full:
            raise ClassroomError(f"{path} exists and is not empty: choose a new folder for the class")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    except OSError as exc:
        raise ClassroomError(f"{path} cannot be opened ({exc.strerror}): choose a new folder for the class") from None
    try:
        os.fchown(fd, -1, os.getgid())  # (a folder made in a setgid folder took that folder's group)
        os.fchmod(fd, CLASS_MODE)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode != CLASS_MODE:
            raise ClassroomError(f"the file system of {path} keeps mode {mode:o} where {CLASS_MODE:o} was set: "
                                 "make the class folder on a local file system")
        info = {"v": VERSION, "created": time.time(), "learners_group": learners_group, "gid": gid}
        meta = os.open(".class.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            os.fchmod(meta, 0o600)
            _write_all(meta, json.dumps(info).encode() + b"\n")
        finally:
            os.close(meta)
    except OSError as exc:
        raise ClassroomError(f"{path} cannot be set up as a class folder ({exc.strerror}): choose a folder of "
                             "your own") from None
    finally:
        os.close(fd)
    return path


def group_sharers(path: str | os.PathLike[str]) -> list[str]:
    """Accounts other than the owner's in the group of class folder `path`: they could read a learner's
    file if they knew its name (the names are random, and the folder cannot be listed)."""
    st = os.stat(path)
    try:
        group = grp.getgrgid(st.st_gid)
    except KeyError:
        return []
    owner = _account(st.st_uid)
    names = set(group.gr_mem) | {p.pw_name for p in pwd.getpwall() if p.pw_gid == st.st_gid}
    return sorted(names - {owner})


def _open_class(dir: str) -> tuple[int, os.stat_result]:
    """An fd (a path only: a learner may not read the folder) of the class folder, checked: a real
    folder, not a link, of mode 3733."""
    how = f"ask your teacher to run `ddplab class create {dir}`"
    try:
        st = os.lstat(dir)
    except FileNotFoundError:
        raise ClassroomError(f"there is no class folder {dir}: check the path with your teacher") from None
    except OSError as exc:
        raise ClassroomError(f"the class folder {dir} cannot be reached ({exc.strerror}): check the path with your "
                             "teacher") from None
    if stat.S_ISLNK(st.st_mode):
        raise ClassroomError(f"the class folder {dir} is a symbolic link: join the folder it stands for, or {how}")
    try:
        fd = os.open(dir, O_PATH | os.O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    except OSError as exc:
        raise ClassroomError(f"the class folder {dir} cannot be opened ({exc.strerror}): {how}") from None
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = f"the class folder {dir} is not a folder: {how}"
    elif mode != CLASS_MODE:
        problem = f"the class folder {dir} is not set up for a class (mode {mode:o}, expected {CLASS_MODE:o}): {how}"
    if problem:
        os.close(fd)
        raise ClassroomError(problem)
    return fd, st


@dataclass(frozen=True)
class ClassMembership:
    """A learner in a class: the folder, the learner's file in it, the name, the folder's owner."""
    dir: str
    file: str
    name: str
    owner: int
    own_folder: bool = False

    @property
    def path(self) -> Path:
        return Path(self.dir) / self.file

    def check(self) -> tuple[int, os.stat_result]:
        """The class folder's fd, checked as at joining (the caller closes it)."""
        fd, st = _open_class(self.dir)
        if st.st_uid != self.owner:
            os.close(fd)
            raise ClassroomError(f"the class folder {self.dir} now belongs to {_account(st.st_uid)}, not to "
                                 f"{_account(self.owner)} who ran the class: ask your teacher, then join again")
        return fd, st

    def append(self, event: Mapping[str, Any]) -> None:
        """Add one event to the learner's file, the folder and the file checked again first."""
        data = line(event)
        if len(data) > MAX_LINE or not _valid(json.loads(data)) or event["learner"] != self.name:
            raise ValueError(f"not an event of {self.name!r}: make one with make_event")
        folder, _ = self.check()
        try:
            try:
                fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC,
                             dir_fd=folder)
            except FileNotFoundError:
                raise ClassroomError(f"your file in the class folder {self.dir} is gone: join the class again") from None
            except OSError as exc:
                raise ClassroomError(f"your file {self.file} in the class folder {self.dir} cannot be opened "
                                     f"({exc.strerror}): join the class again") from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                    raise ClassroomError(f"{self.file} in the class folder {self.dir} is no longer your own file: "
                                         "join the class again")
                _write_all(fd, data)
            finally:
                os.close(fd)
        finally:
            os.close(folder)

    def leave(self) -> None:
        """Stop adding to the class (the file stays, for the teacher)."""
        forget_membership()


def _membership_path() -> Path:
    return home() / "class.json"


def membership() -> ClassMembership | None:
    """The class this learner joined (~/.ddplab/class.json), or None."""
    path = _membership_path()
    try:
        fd = _own_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, 1 << 14)
    finally:
        os.close(fd)
    try:
        info = json.loads(data)
        kept = ClassMembership(info["dir"], info["file"], info["name"], info["owner"], info.get("own_folder", False))
    except (ValueError, KeyError, TypeError) as exc:
        raise ClassroomError(f"{path} is not a class membership ({exc}): remove it, then join the class again") from None
    if not (isinstance(kept.dir, str) and isinstance(kept.file, str) and FILE_NAME.fullmatch(kept.file)
            and name_problem(kept.name) is None and isinstance(kept.owner, int)):
        raise ClassroomError(f"{path} is not a class membership: remove it, then join the class again")
    return kept


def forget_membership() -> None:
    try:
        os.unlink(_membership_path())
    except FileNotFoundError:
        pass


def join(dir: str | os.PathLike[str], name: str, own_folder: bool = False) -> ClassMembership:
    """Join the class whose folder is `dir` as `name`: a file of the learner's own in it (mode 0640; the
    teacher's group reads it), remembered in ~/.ddplab/class.json so that later kernels add to the same
    file. own_folder: the teacher trying the class out in a folder of the teacher's own."""
    why = name_problem(name)
    if why:
        raise ClassroomError(f"{why}: {name!r} is not; choose another name")
    path = os.path.abspath(dir)
    _private_dir(home())  # (before a file is made in the class folder: the membership must be kept)
    folder, st = _open_class(path)
    try:
        if st.st_uid == os.getuid() and not own_folder:
            raise ClassroomError(f"the class folder {path} is your own: a class folder is your teacher's; to try "
                                 "your own class, join it with own_folder=True")
        known = None
        try:
            known = membership()
        except (OSError, ClassroomError) as exc:
            log.warning("the class joined before is forgotten: %s", exc)
        # the same file again only for the same name: a file names one learner
        if known is not None and (known.dir, known.name, known.owner) == (path, name, st.st_uid) and \
                _is_own_file(folder, known.file):
            kept = ClassMembership(path, known.file, name, st.st_uid, own_folder)
        else:
            kept = ClassMembership(path, _new_file(folder, path, name), name, st.st_uid, own_folder)
    finally:
        os.close(folder)
    _remember(kept)
    return kept


def _is_own_file(folder: int, file: str) -> bool:
    try:
        st = os.stat(file, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def _new_file(folder: int, path: str, name: str) -> str:
    file = f"{slug(name)}-{secrets.token_hex(8)}.jsonl"
    try:
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | os.O_APPEND | O_CLOEXEC, FILE_MODE,
                     dir_fd=folder)
    except FileExistsError:  # (a random name taken: someone made it first)
        raise ClassroomError(f"{file} is in the class folder {path} already, made by someone else: join again (a new "
                             "name is drawn)") from None
    except OSError as exc:
        raise ClassroomError(f"no file of yours can be made in the class folder {path} ({exc.strerror}): ask your "
                             "teacher to run `ddplab class create` for it") from None
    try:
        os.fchmod(fd, FILE_MODE)  # (the umask may have taken the group's read)
    finally:
        os.close(fd)
    return file


def _remember(kept: ClassMembership) -> None:
    folder = home()
    _private_dir(folder)
    info = {"v": VERSION, "dir": kept.dir, "file": kept.file, "name": kept.name, "owner": kept.owner,
            "own_folder": kept.own_folder, "joined": time.time()}
    path = _membership_path()
    fd = _own_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.fchmod(fd, 0o600)
        _write_all(fd, json.dumps(info).encode() + b"\n")
    finally:
        os.close(fd)


# ------------------------------------------------------------------ recording
JOINED: Final = "joined"  # record()'s default: the class remembered in ~/.ddplab/class.json, if any


def record(event: Mapping[str, Any], own: LearnerRecord | None = None,
           klass: ClassMembership | Literal["joined"] | None = JOINED) -> str | None:
    """Add `event` to the learner's own record and, if the learner joined a class, to the class's file
    (klass: the membership; by default the one remembered; None: no class). Returns None, or a short
    warning when it could not be written (logged too): recording never breaks the lesson that records.
    An event that is not one (make_event), or not of the class's learner name, raises ValueError."""
    own = own if own is not None else LearnerRecord()
    warnings = []
    try:
        own.append(event)
    except (OSError, ClassroomError) as exc:
        log.warning("the event was not added to your record %s: %s", own.path, exc)
        warnings.append(f"not added to your record: {exc}")
    try:
        joined = membership() if klass == JOINED else klass
        if isinstance(joined, ClassMembership):
            joined.append(event)
    except (OSError, ClassroomError) as exc:
        log.warning("the event was not added to the class: %s", exc)
        warnings.append(f"not added to the class: {exc}")
    return "; ".join(warnings) or None


def default_name() -> str:
    """The name events carry when the learner joined no class: the account's, if it is a good name."""
    try:
        name = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return "me"
    return name if name_problem(name) is None else "me"


def note(kind: str, key: str, answer: object = None, ok: bool | None = None, *, measured: float | None = None,
         reason: str | None = None, own: LearnerRecord | None = None) -> str | None:
    """Record a prediction, a checked answer or a reveal (what a prediction turned out to be): its attempt
    number counted from the own record (a reveal takes its prediction's), its learner the class name if
    the learner joined one. Returns record()'s warning, if any."""
    own = own if own is not None else LearnerRecord()
    warnings = []
    klass = None
    try:
        klass = membership()
    except (OSError, ClassroomError) as exc:
        log.warning("the class cannot be found: %s", exc)
        warnings.append(f"not added to the class: {exc}")
    try:
        if kind == "reveal":
            attempt = own.attempts("prediction", key)
        else:
            attempt = own.attempts(kind, key) + 1
    except (OSError, ClassroomError) as exc:
        log.warning("your record cannot be read: %s", exc)
        attempt = 1 if kind != "reveal" else 0
        warnings.append(f"your record cannot be read: {exc}")
    event = make_event(kind, key, answer, ok, learner=klass.name if klass else default_name(), attempt=attempt,
                       measured=measured, reason=reason)
    warning = record(event, own, klass)
    return "; ".join(warnings + ([warning] if warning else [])) or None


# ------------------------------------------------------------------ the teacher's reader
class Skipped(dict[str, int]):
    """What a reader skipped: reason -> how many (files, or lines for "malformed line")."""

    @property
    def total(self) -> int:
        return sum(self.values())


COLUMNS = ("learner", "account", "lesson", "key", "kind", "attempt", "answer", "ok", "measured", "time")


class Class:
    """The teacher's view of a class folder: every learner's events, read again only where files grew.

        c = Class("/srv/class/ddp")
        c.to_pandas()        # one row per prediction or checked answer
        c.summary()          # who started and finished each lesson, the common wrong answers
        c.refresh()          # later: reads what was appended since (returns the bytes read)
    """

    def __init__(self, dir: str | os.PathLike[str], learners_group: str | None = None,
                 exercises: Mapping[int, Iterable[str]] | None = None) -> None:
        self.dir = Path(os.path.abspath(dir))
        self.exercises = {int(k): list(v) for k, v in exercises.items()} if exercises is not None else None
        self._files: dict[str, _File] = {}
        self._dir_skips: Counter[str] = Counter()
        self.bytes_read = 0
        if learners_group is None:
            learners_group = self._settings().get("learners_group")
        self.learners_group = learners_group
        self._learners = self._members(learners_group) if learners_group is not None else None
        self.refresh()

    def _settings(self) -> dict[str, Any]:
        """DIR/.class.json, if the folder's owner wrote it (create_class)."""
        path = self.dir / ".class.json"
        try:
            fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("%s cannot be read (%s): the class's files are read without a learners' group", path, exc.strerror)
            return {}
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.stat(self.dir).st_uid:
                log.warning("%s is not the class's own (not a file of the folder's owner): ignored", path)
                return {}
            info = json.loads(os.read(fd, 1 << 14))
        except ValueError as exc:
            log.warning("%s is not JSON (%s): the class's files are read without a learners' group", path, exc)
            return {}
        finally:
            os.close(fd)
        return info if isinstance(info, dict) else {}

    @staticmethod
    def _members(group: str) -> set[int]:
        try:
            g = grp.getgrnam(group)
        except KeyError:
            raise ClassroomError(f"there is no group {group!r} on this machine: check the class's learners' group") from None
        uids = {p.pw_uid for p in pwd.getpwall() if p.pw_gid == g.gr_gid}
        for member in g.gr_mem:
            try:
                uids.add(pwd.getpwnam(member).pw_uid)
            except KeyError:
                log.debug("group %s names %s, who has no account", group, member)
        return uids

    def refresh(self) -> int:
        """Read what changed since the last read: new files whole, grown files from where they were read
        to, replaced files again. Returns how many bytes were read."""
        read = 0
        skips: Counter[str] = Counter()
        seen = set()
        try:
            folder = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
        except OSError as exc:
            raise ClassroomError(f"the class folder {self.dir} cannot be read ({exc.strerror}): read it as its "
                                 "owner (the teacher)") from None
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    if not name.endswith(".jsonl"):
                        continue
                    seen.add(name)
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        seen.discard(name)
                        continue
                    if stat.S_ISLNK(st.st_mode):
                        skips["symlink"] += 1
                        seen.discard(name)
                    elif not stat.S_ISREG(st.st_mode):
                        skips["not a regular file"] += 1
                        seen.discard(name)
                    else:
                        state = self._files.get(name)
                        if state is None or state.ident != (st.st_ino, st.st_size, st.st_mtime_ns):
                            read += self._read(folder, name, state, skips)
        finally:
            os.close(folder)
        for gone in set(self._files) - seen:
            del self._files[gone]
        self._dir_skips = skips
        self.bytes_read += read
        return read

    def _read(self, folder: int, name: str, state: _File | None, skips: Counter[str]) -> int:
        try:
            fd = os.open(name, os.O_RDONLY | O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            self._files.pop(name, None)
            return 0
        except OSError as exc:
            if exc.errno == getattr(os, "ELOOP", 40):
                skips["symlink"] += 1
            else:
                log.warning("%s in the class folder cannot be read: %s", name, exc.strerror)
                skips["unreadable"] += 1
            self._files.pop(name, None)
            return 0
        try:
            st = os.fstat(fd)
            ident = (st.st_ino, st.st_size, st.st_mtime_ns)
            grew = state is not None and st.st_ino == state.ident[0] and st.st_size > state.ident[1] >= 0 \
                and (state.problem is not None or state.offset <= st.st_size)
            if not grew:
                state = _File(uid=st.st_uid)
            assert state is not None
            self._files[name] = state
            state.ident = ident
            if state.problem is not None:
                return 0  # (grown, the file stays what it was: skipped)
            matched = FILE_NAME.fullmatch(name)
            if not stat.S_ISREG(st.st_mode):
                _fail(state, "not a regular file")
            elif matched is None:
                _fail(state, "not a learner's file name")
            elif st.st_size > MAX_FILE:
                _fail(state, "too large")
            elif self._learners is not None and st.st_uid not in self._learners:
                _fail(state, "outside the class")
            if state.problem is not None or matched is None:
                return 0
            before = state.read
            _take(state, _read_lines(fd, state, st.st_size), matched.group(1), MAX_LINES)
            return state.read - before
        finally:
            os.close(fd)

    @property
    def skipped(self) -> Skipped:
        """reason -> count: files skipped (a symlink, too large, outside the class, more than one learner,
        a name not matching the file's, ...) and malformed lines."""
        counts: Counter[str] = Counter(self._dir_skips)
        for state in self._files.values():
            if state.problem is not None:
                counts[state.problem] += 1
            elif state.malformed:
                counts["malformed line"] += state.malformed
        return Skipped(sorted(counts.items()))

    def __len__(self) -> int:
        """How many events were read (in the files not skipped)."""
        return sum(len(s.events) for s in self._files.values() if s.problem is None)

    def _learner_files(self) -> Iterator[_File]:
        for name in sorted(self._files):
            state = self._files[name]
            if state.problem is None and state.learner is not None:
                yield state

    def events(self) -> list[Event]:
        """Every event, file by file, oldest first in each."""
        return [_expand(s.learner, c) for s in self._learner_files() if s.learner for c in s.events]

    def rows(self) -> list[dict[str, Any]]:
        """One row (COLUMNS) per prediction or checked answer, a prediction's reveal folded into its
        `measured`; in order of time."""
        rows = []
        for state in self._learner_files():
            account = _account(state.uid)
            revealed = {(c[1], c[5]): c[7] for c in state.events if c[0] == "reveal"}
            for kind, key, lesson, answer, ok, attempt, when, measured, _, _ in state.events:
                if kind == "reveal":
                    continue
                if kind == "prediction":
                    measured = revealed.get((key, attempt), measured)
                rows.append({"learner": state.learner, "account": account, "lesson": lesson, "key": key, "kind": kind,
                             "attempt": attempt, "answer": answer, "ok": ok, "measured": measured, "time": when})
        rows.sort(key=lambda r: (r["time"], r["learner"]))
        return rows

    def to_pandas(self) -> pandas.DataFrame:
        """rows() as a DataFrame (pandas is needed only here)."""
        try:
            import pandas
        except ModuleNotFoundError:
            raise ModuleNotFoundError("to_pandas needs pandas: pip install pandas", name="pandas") from None
        return pandas.DataFrame(self.rows(), columns=list(COLUMNS))

    def summary(self, exercises: Mapping[int, Iterable[str]] | None = None) -> dict[str, Any]:
        """The teacher's view, as plain data:
        lessons: {lesson: {"started": [learners], "finished": [learners] (every exercise of the lesson
                 right at least once; None where the lesson's exercises are not known)}}
        exercises: {key: {"tried": learners, "right": learners, "wrong": [(answer, count)] (the 3 most common)}}
        predictions: {key: {"learners": [...], "predicted": [first prediction, a number or None],
                     "measured": [the last measured, or None]}}
        exercises: the keys of each lesson's exercises ({4: ["4.1", "4.2"]}; default: the Class's)."""
        known = {int(k): list(v) for k, v in exercises.items()} if exercises is not None else self.exercises
        started: dict[int, set[str]] = {}
        right: dict[str, set[str]] = {}
        tried: dict[str, set[str]] = {}
        wrong: dict[str, Counter[str]] = {}
        predicted: dict[str, dict[str, Any]] = {}
        measured: dict[str, dict[str, Any]] = {}
        for state in self._learner_files():  # each file's share, kept while it has not grown: an update of the
            learner = state.learner  # view after a few files grew reads and counts only those
            assert learner is not None
            part, who = _partial(state), learner
            for lesson in part.lessons:
                started.setdefault(lesson, set()).add(who)
            for key in part.tried:
                tried.setdefault(key, set()).add(who)
            for key in part.right:
                right.setdefault(key, set()).add(who)
            for key, answers in part.wrong.items():
                wrong.setdefault(key, Counter()).update(answers)
            for key, value in part.predicted.items():  # (a learner who joined again has two files: the first's)
                predicted.setdefault(key, {}).setdefault(who, value)
            for key, value in part.measured.items():
                measured.setdefault(key, {})[who] = value
        lessons: dict[int, dict[str, Any]] = {}
        for lesson in sorted(set(started) | set(known or {})):
            learners = started.get(lesson, set())
            keys = (known or {}).get(lesson)
            done = None if not keys else sorted(w for w in learners if all(w in right.get(k, ()) for k in keys))
            lessons[lesson] = {"started": sorted(learners), "finished": done}
        checks = {key: {"tried": len(tried[key]), "right": len(right.get(key, ())),
                        "wrong": [(json.loads(a), n) for a, n in wrong.get(key, Counter()).most_common(3)]}
                  for key in sorted(tried, key=_key_order)}
        predictions = {}
        for key in sorted(predicted.keys() | measured.keys(), key=_key_order):
            names = sorted(predicted.get(key, {}).keys() | measured.get(key, {}).keys())
            predictions[key] = {"learners": names, "predicted": [predicted.get(key, {}).get(w) for w in names],
                                "measured": [measured.get(key, {}).get(w) for w in names]}
        return {"learners": len({s.learner for s in self._learner_files()}), "lessons": lessons, "exercises": checks,
                "predictions": predictions, "skipped": dict(self.skipped)}


@dataclass
class _Partial:
    """One learner file's share of Class.summary: lessons started, exercises tried and right, wrong answers,
    the first prediction and the last measured value of each prediction key."""
    lessons: set[int] = field(default_factory=set)
    tried: set[str] = field(default_factory=set)
    right: set[str] = field(default_factory=set)
    wrong: dict[str, Counter[str]] = field(default_factory=dict)
    predicted: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)


def _partial(state: _File) -> _Partial:
    if state.partial is not None and state.partial[0] == len(state.events):
        return state.partial[1]
    part = _Partial()
    first: dict[str, tuple[int, Any]] = {}
    last: dict[str, tuple[float, Any]] = {}
    for kind, key, lesson, answer, ok, attempt, when, measured, _, _ in state.events:
        part.lessons.add(lesson)
        if kind == "check":
            part.tried.add(key)
            if ok is True:
                part.right.add(key)
            elif ok is False and answer is not None:
                part.wrong.setdefault(key, Counter())[json.dumps(answer)] += 1
        elif kind == "prediction" and (key not in first or attempt < first[key][0]):
            first[key] = (attempt, answer if _finite(answer) else None)
        if measured is not None and (key not in last or when >= last[key][0]):
            last[key] = (when, measured)
    part.predicted = {key: value for key, (_, value) in first.items()}
    part.measured = {key: value for key, (_, value) in last.items()}
    state.partial = (len(state.events), part)
    return part


def _key_order(key: str) -> tuple[int, int, str]:
    lesson, _, rest = key.partition(".")
    return (int(lesson), int(rest) if rest.isdigit() else 1 << 30, rest)


# ------------------------------------------------------------------ the report a learner hands in
SCHEMA = Path(__file__).with_name("report_schema.json")


def _exercise_results(events: list[Event]) -> list[dict[str, Any]]:
    """Per exercise checked: attempts, right (at least once), the answers, the judge's reason of the
    deciding attempt (the first right one, else the last)."""
    by_key: dict[str, list[Event]] = {}
    for event in events:
        if event["kind"] == "check":
            by_key.setdefault(event["key"], []).append(event)
    results = []
    for key in sorted(by_key, key=_key_order):
        tries = by_key[key]
        deciding = next((e for e in tries if e["ok"] is True), tries[-1])
        results.append({"key": key, "lesson": tries[0]["lesson"], "attempts": len(tries),
                        "right": any(e["ok"] is True for e in tries), "answers": [e["answer"] for e in tries],
                        "reason": deciding.get("reason")})
    return results


def _prediction_results(events: list[Event]) -> list[dict[str, Any]]:
    """Per prediction made: the predicted value beside what was measured, and how far apart."""
    revealed = {(e["key"], e["attempt"]): e["measured"] for e in events if e["kind"] == "reveal"}
    results = []
    for e in events:
        if e["kind"] != "prediction":
            continue
        measured = revealed.get((e["key"], e["attempt"]), e.get("measured"))
        predicted = e["answer"] if _finite(e["answer"]) else None
        difference = relative = None
        if predicted is not None and measured is not None:
            difference = predicted - measured
            relative = difference / abs(measured) if measured else None
        results.append({"key": e["key"], "lesson": e["lesson"], "attempt": e["attempt"], "answer": e["answer"],
                        "predicted": predicted, "measured": measured, "difference": difference, "relative": relative})
    results.sort(key=lambda r: (_key_order(r["key"]), r["attempt"]))
    return results


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _markdown(learner: str | None, exercises: list[dict[str, Any]], predictions: list[dict[str, Any]], lang: str,
              when: float) -> str:
    lines = [f"# {say(lang, 'ddplab report: {learner}', learner=learner or '-')}", "",
             say(lang, "Written {when}. {right} of {n} exercises right, {p} predictions.",
                 when=time.strftime("%Y-%m-%d %H:%M", time.localtime(when)), right=sum(r["right"] for r in exercises),
                 n=len(exercises), p=len(predictions)), ""]
    for lesson in sorted({r["lesson"] for r in exercises} | {r["lesson"] for r in predictions}):
        lines += [f"## {say(lang, 'Lesson {n}', n=lesson)}", ""]
        mine = [r for r in exercises if r["lesson"] == lesson]
        if mine:
            lines += [f"### {say(lang, 'Exercises')}", "",
                      f"| {say(lang, 'Exercise')} | {say(lang, 'Attempts')} | {say(lang, 'Result')} | "
                      f"{say(lang, 'Your answers')} |", "| --- | --- | --- | --- |"]
            for r in mine:
                result = say(lang, "right") if r["right"] else say(lang, "not yet right")
                answers = ", ".join(_value(a) for a in r["answers"])
                lines.append(f"| {r['key']} | {r['attempts']} | {result} | {answers} |")
            lines.append("")
        guesses = [r for r in predictions if r["lesson"] == lesson]
        if guesses:
            lines += [f"### {say(lang, 'Predictions')}", "",
                      f"| {say(lang, 'Prediction')} | {say(lang, 'You predicted')} | {say(lang, 'Measured')} | "
                      f"{say(lang, 'Difference')} | {say(lang, 'Relative difference')} |",
                      "| --- | --- | --- | --- | --- |"]
            for r in guesses:
                relative = "-" if r["relative"] is None else f"{r['relative']:+.0%}"
                lines.append(f"| {r['key']} | {_value(r['answer'])} | {_value(r['measured'])} | "
                             f"{_value(r['difference'])} | {relative} |")
            lines.append("")
    return "\n".join(lines)


def _gradescope(exercises: list[dict[str, Any]], predictions: list[dict[str, Any]], lang: str) -> dict[str, Any]:
    """Gradescope's results.json (gradescope-autograders.readthedocs.io/en/latest/specs/): one test per
    exercise, 1 point if it was answered right."""
    tests = []
    for r in exercises:
        output = r["reason"] or (say(lang, "right; attempts: {n}", n=r["attempts"]) if r["right"]
                                 else say(lang, "not yet right; attempts: {n}", n=r["attempts"]))
        tests.append({"name": say(lang, "Exercise {key}", key=r["key"]), "number": r["key"],
                      "score": 1.0 if r["right"] else 0.0, "max_score": 1.0,
                      "status": "passed" if r["right"] else "failed", "output": output, "visibility": "visible"})
    score = float(sum(t["score"] for t in tests))
    return {"score": score, "output": say(lang, "Written {when}. {right} of {n} exercises right, {p} predictions.",
                                          when=time.strftime("%Y-%m-%d %H:%M"), right=int(score), n=len(tests),
                                          p=len(predictions)),
            "visibility": "visible", "tests": tests}


def _write(folder: Path, name: str, text: str) -> None:
    """Write folder/name whole (a temporary file renamed over it)."""
    temporary = folder / f".{name}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
    try:
        _write_all(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(temporary, folder / name)


def write_report(out_dir: str | os.PathLike[str], record: LearnerRecord | str | os.PathLike[str] | None = None,
                 lang: str = "en") -> Path:
    """Write report.md (readable), report.json (the events and a summary; report_schema.json describes it)
    and Gradescope's results.json into out_dir, from the learner's own record. Returns out_dir."""
    if lang not in ("en", "zh"):
        raise ClassroomError(f"lang must be en or zh, not {lang!r}")
    own = record if isinstance(record, LearnerRecord) else LearnerRecord(record)
    if not own.exists():
        raise ClassroomError(f"there is no record at {own.path} yet: it is written when you check an exercise or "
                             "make a prediction in a lesson")
    try:
        events = own.events()
    except OSError as exc:
        raise ClassroomError(f"your record {own.path} cannot be read ({exc.strerror})") from None
    folder = Path(out_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ClassroomError(f"{folder} is not a folder: choose a folder for the report") from None
    except OSError as exc:
        raise ClassroomError(f"{folder} cannot be made ({exc.strerror}): choose a folder you can write") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ClassroomError(f"{folder} is not writable: choose a folder you can write")
    when = time.time()
    learner = events[-1]["learner"] if events else None
    exercises, predictions = _exercise_results(events), _prediction_results(events)
    report = {"v": VERSION, "learner": learner, "written": when, "lang": lang, "events": events,
              "malformed_lines": own.malformed,
              "summary": {"score": sum(1 for r in exercises if r["right"]), "max_score": len(exercises),
                          "exercises": exercises, "predictions": predictions}}
    try:
        _write(folder, "report.md", _markdown(learner, exercises, predictions, lang, when))
        _write(folder, "report.json", json.dumps(report, ensure_ascii=False, indent=1, allow_nan=False) + "\n")
        _write(folder, "results.json", json.dumps(_gradescope(exercises, predictions, lang), ensure_ascii=False,
                                                  indent=1) + "\n")
    except OSError as exc:
        raise ClassroomError(f"the report cannot be written in {folder} ({exc.strerror}): choose a folder you can "
                             "write") from None
    return folder


def join_configured() -> None:
    """c.DDPLab.class_folder: join that class (as DDPLab.class_name, else the account's name) before the first
    record, unless this learner is in a class already. Said in the log, never raised, if it cannot be."""
    from ..shared.config import tunables

    folder = tunables().class_folder
    if not folder:
        return
    try:
        if membership() is None:
            join(folder, tunables().class_name or default_name())
    except (OSError, ClassroomError) as exc:
        log.warning("DDPLab.class_folder = %r: not joined (%s)", folder, exc)
