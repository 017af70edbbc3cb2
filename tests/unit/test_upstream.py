"""ddplab.shared.upstream: every private name of torch, ipyparallel, pyzmq, psutil, IPython, ipykernel and
matplotlib that ddplab relies on is listed there, is there in the packages installed here, and a
name that moves turns its feature off with one warning, once."""
import ast
import io
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddplab.shared import upstream

PACKAGE = Path(upstream.__file__).parents[1]  # ddplab/
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "upstream.py")


@pytest.fixture
def fresh(monkeypatch):
    """A process that has turned nothing off yet (each name is said once per process)."""
    monkeypatch.setattr(upstream, "_off", set())


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "ddplab" and r.levelno == logging.WARNING]


# ------------------------------------------------------------------ the installed packages
FRAMEWORKS = ("tensorflow-cpu", "jax")  # theirs: tests/integration/test_frameworks.py (importing TensorFlow takes ~7 s)


def moved_names(frameworks):
    """What upstream.problem() says of each listed name of the frameworks (or of every other package),
    one line each; "" when every name is as ddplab needs it."""
    names = [n for n in upstream.NAMES.values() if (n.owner in FRAMEWORKS) == frameworks]
    assert names
    return "\n".join(f"  {n.owner} {upstream.version(n.owner)}: {why} -- needed for {n.feature}"
                     for n, why in ((n, upstream.problem(n)) for n in names) if why)


def test_every_listed_name_is_there_in_the_installed_packages():
    import ipyparallel  # noqa: F401 - the real packages, as installed here
    import psutil  # noqa: F401
    import torch  # noqa: F401

    moved = moved_names(frameworks=False)
    assert not moved, "names ddplab relies on moved:\n" + moved


def test_the_pinned_packages_have_an_upper_bound_the_installed_version_meets():
    from importlib.metadata import version

    import tomllib
    from packaging.requirements import Requirement

    deps = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {r.name: r for r in map(Requirement, deps)}
    for owner in ("torch", "ipyparallel", "psutil", "pyzmq"):
        assert any(s.operator == "<" for s in pins[owner].specifier), f"{owner} needs an upper bound: {pins[owner]}"
        assert pins[owner].specifier.contains(version(owner), prereleases=True), (owner, version(owner))


# ------------------------------------------------------------------ a name that moved
def test_a_moved_name_turns_its_feature_off_with_one_line(fresh, monkeypatch, caplog):
    path = "torch.autograd:Variable._execution_engine.queue_callback"
    gone = upstream.NAMES[path]._replace(path="torch.autograd:Variable._execution_engine.queue_callback_moved")
    monkeypatch.setitem(upstream.NAMES, path, gone)
    with caplog.at_level(logging.WARNING, logger="ddplab"):
        assert upstream.get(path) is None
        assert upstream.get(path, default="off") == "off" and not upstream.has(path)
    assert warnings_of(caplog) == [  # (the distribution's version: 2.14.1, where torch.__version__ says 2.14.1+cu130)
        f"ddplab turned off the timeline's spans of DDP's bucket all-reduces: torch {upstream.version('torch')} has no "
        "torch.autograd.Variable._execution_engine.queue_callback_moved"]
    assert upstream.turned_off() == [path]
    moved = {p: why for p, why in upstream.check().items() if upstream.NAMES[p].owner not in FRAMEWORKS}  # (where installed)
    assert list(moved) == [path] and "queue_callback_moved" in moved[path]
    assert (upstream.NAMES[path].owner, upstream.NAMES[path].feature) == ("torch", upstream.BUCKETS)


def test_the_timeline_times_no_bucket_where_torch_moved_a_name(fresh, monkeypatch, caplog):
    """The recorder's call sites: a moved queue_callback leaves DDP's buckets untimed (no TimedGroup in any
    reducer), said once; the rest of the timeline is installed as usual and taken out again."""
    import torch

    from ddplab.rank.recorder import QUEUE_CALLBACK, Recorder

    gone = upstream.NAMES[QUEUE_CALLBACK]._replace(path="torch.autograd:Variable._no_such_engine.queue_callback")
    monkeypatch.setitem(upstream.NAMES, QUEUE_CALLBACK, gone)
    backward = torch.autograd.backward
    recorder = Recorder(SimpleNamespace(step=-1, cell=1))
    with caplog.at_level(logging.WARNING, logger="ddplab"):
        recorder.install()
        try:
            assert recorder._queue_callback is None and torch.autograd.backward is not backward
            recorder.later(work=None, start=0.0, nbytes=8, bucket=0)  # a bucket launched: not timed, no error
            assert recorder._flying == [] and not recorder._queued
        finally:
            recorder.uninstall()
    assert torch.autograd.backward is backward
    assert len(warnings_of(caplog)) == 1 and "_no_such_engine" in warnings_of(caplog)[0]


def test_the_notebook_says_what_the_zygote_and_the_ranks_found_moved(fresh, caplog):
    from ddplab.processes.pool import Pool
    from ddplab.processes.zygote import Zygote

    zygote = Zygote.__new__(Zygote)  # its reply only: no process
    zygote.stages, zygote._network = [], None
    zygote.proc = SimpleNamespace(stdout=io.StringIO(json.dumps({"ready": "engine", "moved": ["torch._dynamo"]}) + "\n"))
    with caplog.at_level(logging.WARNING, logger="ddplab"):
        zygote._reply()
        pool = SimpleNamespace(hosts={})
        Pool.track(pool, [{"host": "a", "moved": ["torch._dynamo"]},
                          {"host": "a", "moved": ["torch.nn.parallel:DistributedDataParallel._get_ddp_logging_data"]}])
    said = warnings_of(caplog)
    assert len(said) == 2 and "torch._dynamo" in said[0] and "_get_ddp_logging_data" in said[1], said
    assert zygote.stages == ["engine"] and pool.hosts == {0: "a", 1: "a"}


def test_the_zygote_leaves_out_a_listed_module_that_is_gone_and_no_other(fresh, monkeypatch):
    from ddplab.processes import zygote

    monkeypatch.setitem(upstream.NAMES, "torch._gone", upstream.Name("torch", "torch._gone", upstream.PRELOAD))
    monkeypatch.setattr(zygote, "STAGES", {"engine": ("torch._gone",)})
    zygote.preload(lambda stage: None)
    assert "torch._gone" in zygote.moved_names()
    monkeypatch.setattr(zygote, "STAGES", {"engine": ("ddplab._not_listed_anywhere",)})
    with pytest.raises(ImportError):
        zygote.preload(lambda stage: None)


def test_a_client_stream_without_its_callback_goes_unguarded_said_once(fresh, caplog):
    from ddplab.processes.pool import guard_client

    streams = {f"_{c}_stream": SimpleNamespace(_recv_callback=print) for c in
               ("query", "control", "mux", "task", "iopub", "notification", "broadcast")}
    streams["_iopub_stream"] = SimpleNamespace()  # a pyzmq whose ZMQStream keeps its callback elsewhere
    client = SimpleNamespace(session=None, **streams)
    with caplog.at_level(logging.WARNING, logger="ddplab"):
        guard_client(client)
        guard_client(client)
    assert streams["_query_stream"]._recv_callback is not print  # guarded
    said = warnings_of(caplog)
    assert len(said) == 1 and "ZMQStream._recv_callback" in said[0] and "pyzmq" in said[0], said


# ------------------------------------------------------------------ the list is complete, and no longer than needed
# Names upstream documents, though they start with an underscore: not internals.
DOCUMENTED = {
    "_getframe", "_current_frames", "_exit",  # sys._getframe, sys._current_frames, os._exit
    "_repr_png_", "_repr_html_", "_ipython_display_",  # IPython's display protocol
    "_asdict", "_replace", "_fields", "_make",  # namedtuple's
}
# What the issue named, and what each moved before: each must be listed (a scan by text, whatever the code's shape)
KNOWN = [r"_update_process_group", r"_register_backend", r"_get_backend", r"BackendType", r"_get_ddp_logging_data",
         r"_execution_engine", r"queue_callback", r"_recv_callback", r"construct_url", r"_start_waiting", r"_exitcode",
         r"\b_[a-z]+_stream\b", r"\b_children\b", r"\b_metadata\b", r"_BaseDataLoaderIter", r"\btorch\._[A-Za-z]\w*",
         r"\bProcessGroupGloo\b", r"\bhandle_pong\b", r"\bhandle_new_hearts\b", r"_suptitle", r"_render_traceback_"]


def listed_words():
    """Every part of a listed path, and the names listed as what upstream code uses (`uses`)."""
    return ({w for path in upstream.NAMES for w in re.split(r"[.:]", path)} | set(upstream.NAMES)
            | {re.sub(r"\W", "", n.uses) for n in upstream.NAMES.values()})


def private_parts(text):
    return [p for p in re.split(r"[.:]", text) if re.fullmatch(r"_[A-Za-z]\w*", p) and not p.endswith("__")]


def scan(source):
    """(names ddplab defines, [(private name used, line)]) of one module's source."""
    defined, used = set(), []

    def targets(node):
        if isinstance(node, ast.Name):
            defined.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            defined.add(node.attr)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                targets(element)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            defined.add(node.asname)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets(node.optional_vars)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.comprehension)):
            for target in getattr(node, "targets", None) or [node.target]:
                targets(target)
        elif isinstance(node, ast.Attribute):
            used += [(p, node.lineno) for p in private_parts(node.attr)]
        elif isinstance(node, ast.Import):
            used += [(p, node.lineno) for alias in node.names for p in private_parts(alias.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith("ddplab"):
            used += [(p, node.lineno) for p in private_parts(node.module or "")]
            used += [(p, node.lineno) for alias in node.names for p in private_parts(alias.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w.:]+", node.value):
            used += [(p, node.lineno) for p in private_parts(node.value)]
    return defined, used


def test_every_private_name_of_another_package_that_ddplab_uses_is_listed():
    """Each name with a leading underscore that ddplab's code reads, writes, calls or imports, and does not
    define itself, is listed in upstream.NAMES (or is one of the few DOCUMENTED ones)."""
    defined, used = set(), []
    for path in SOURCES:
        d, u = scan(path.read_text())
        defined |= d
        used += [(name, f"{path.relative_to(PACKAGE.parent)}:{line}") for name, line in u]
    assert len(SOURCES) > 30 and len(used) > 100, "the scan read too little to mean anything"
    listed = listed_words()
    unlisted = sorted({(name, where) for name, where in used
                       if name not in defined | DOCUMENTED | listed and not name.startswith("_ddplab")})
    assert not unlisted, ("private names of other packages not in ddplab/shared/upstream.py (list each with its owner and "
                          "the feature that needs it, or define it in ddplab):\n" + "\n".join(
                              f"  {name} at {where}" for name, where in unlisted))


def test_the_names_the_issue_named_are_listed_wherever_ddplab_uses_them():
    text = {path: path.read_text() for path in SOURCES}
    listed = listed_words()
    for pattern in KNOWN:
        found = {(m.group(0), path.name) for path, source in text.items() for m in re.finditer(pattern, source)}
        assert found, f"{pattern!r} no longer appears in ddplab: drop it from KNOWN (and upstream.NAMES if listed)"
        missing = sorted((word, where) for word, where in found
                         if word not in listed and word.rpartition(".")[2] not in listed)
        assert not missing, f"used but not in upstream.NAMES: {missing}"


def test_every_listed_name_is_still_used_by_ddplab():
    text = "\n".join(path.read_text() for path in SOURCES)
    for name in upstream.NAMES.values():
        word = re.sub(r"\W+$", "", name.uses) or name.path.rpartition(":")[2].rpartition(".")[2] or name.path
        assert word in text, f"{name.path} is listed in upstream.NAMES, but ddplab no longer uses {word!r}"
