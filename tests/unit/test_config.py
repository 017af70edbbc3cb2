"""One config: PoolConfig checks every setting once; the tunables are IPython configurables."""
import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

from ddplab.shared.config import DDPLab, PoolConfig, tunables
from ddplab.shared.errors import BadRequest


def test_pool_config_fills_defaults_and_checks_each_setting():
    c = PoolConfig.make(2)
    assert (c.ranks, c.timeout, c.rendezvous, c.launcher, c.lang, c.local) == (2, 30.0, "file", "local", "en", True)
    assert not PoolConfig.make(2, launcher="mpi").local
    for bad in (dict(ranks=0), dict(ranks=2.5), dict(timeout=0), dict(timeout=float("nan")), dict(threads=0),
                dict(rendezvous="env://"), dict(lang="fr"), dict(start_timeout=-1), dict(launcher="")):
        with pytest.raises(BadRequest) as info:
            PoolConfig.make(**{"ranks": 2, **bad})
        assert "\n" not in str(info.value)
    with pytest.raises(dataclasses.FrozenInstanceError):  # a pool's settings do not change under it
        c.ranks = 3


def test_config_magic_sets_tunables_and_pool_defaults(ip, capsys):
    t = tunables()
    saved = (t.frame, t.lang)
    try:
        ip.run_line_magic("config", "DDPLab.frame = 0.5")
        ip.run_line_magic("config", "DDPLab.lang = 'zh'")
        assert t.frame == 0.5 and PoolConfig.make(2).lang == "zh"
        ip.run_line_magic("config", "DDPLab")
        out = capsys.readouterr().out
        for name in ("frame", "poll", "flush", "fail_fast", "escalate", "debug", "cores", "heartbeat_ms"):
            assert f"DDPLab.{name}" in out
    finally:
        t.frame, t.lang = saved


def test_ipython_config_file_reaches_the_tunables(tmp_path):
    (tmp_path / "ipython_config.py").write_text('c.DDPLab.lang = "zh"\nc.DDPLab.escalate = 3.0\n')
    script = textwrap.dedent(f"""
        from IPython.terminal.ipapp import TerminalIPythonApp
        app = TerminalIPythonApp.instance()
        app.initialize(["--profile-dir", {str(tmp_path)!r}, "--no-banner"])
        app.shell.run_line_magic("load_ext", "ddplab")
        from ddplab.shared.config import PoolConfig, tunables
        print(tunables().escalate, PoolConfig.make(2).lang)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "IPYTHONDIR": str(tmp_path)})
    assert out.stdout.split()[-2:] == ["3.0", "zh"], out.stderr


def test_environment_variables_are_the_defaults_of_their_tunables(monkeypatch):
    monkeypatch.setenv("DDPLAB_CORES", "7")
    monkeypatch.setenv("DDPLAB_DEBUG", "1")
    fresh = DDPLab()
    assert fresh.cores == 7 and fresh.debug
    monkeypatch.setenv("DDPLAB_DEBUG", "0")
    assert not DDPLab().debug


def test_each_timeout_says_what_it_limits(ip):
    start = " ".join(ip.find_line_magic("ddp_start").__doc__.split())
    cell = " ".join(ip.find_cell_magic("ddp").__doc__.split())
    assert "--timeout TIMEOUT" in start and "seconds a collective" in start and "%%ddp --timeout" in start
    assert "seconds this cell may run" in cell and "%ddp_start --timeout" in cell


def test_unloading_ends_the_zygote_only_when_no_lab_uses_it(monkeypatch):
    import weakref

    from IPython.core.events import EventManager, available_events

    import ddplab
    import ddplab.processes.zygote
    from ddplab.kernel import lab

    stopped = []
    monkeypatch.setattr(ddplab.processes.zygote, "stop_zygote", lambda: stopped.append(True))
    monkeypatch.setattr(lab, "_running_labs", weakref.WeakSet())  # whatever pools this test session runs

    class Shell:
        events = EventManager(None, available_events)

    shell = Shell()
    monkeypatch.setitem(ddplab._magics, id(shell), type("M", (), {"lab": None})())
    running = type("Running", (), {})()
    lab._running_labs.add(running)  # another Lab of this process still forks from the zygote
    ddplab.unload_ipython_extension(shell)
    assert stopped == []
    lab._running_labs.discard(running)
    monkeypatch.setitem(ddplab._magics, id(shell), type("M", (), {"lab": None})())
    ddplab.unload_ipython_extension(shell)
    assert stopped == [True]


def test_the_language_follows_the_notebooks_folder_or_the_environment(monkeypatch):
    monkeypatch.delenv("DDPLAB_LANG", raising=False)
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/ddplab/notebooks/zh/03_sampler.ipynb")
    assert DDPLab().lang == "zh"
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/ddplab/notebooks/03_sampler.ipynb")
    assert DDPLab().lang == "en"
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/zh_notes.ipynb")  # a file name is not a folder
    assert DDPLab().lang == "en"
    monkeypatch.setenv("DDPLAB_LANG", "zh")
    assert DDPLab().lang == "zh"


GIVE_BACK = """\
import sys
from ddplab.shared.system import give_back_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
blobs = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]  # 200 MB in blocks malloc keeps in its heap
kept = blobs[::100]  # one in 100 stays: free() cannot shrink the heap past them, and keeps the space between
del blobs
freed = rss()
assert give_back_memory(*sys.argv[1:]) is True
print(freed - rss())
"""


def test_memory_a_process_freed_goes_back_to_the_system_and_only_where_the_session_is_limited(ip):
    import subprocess
    import sys

    from ddplab.shared.system import give_back_memory, memory_limit

    out = subprocess.run([sys.executable, "-c", GIVE_BACK, "result"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 150 * 2**20, out.stdout  # free() alone keeps the 198 MB between
    # the notebook's kernel gives back after each cell only in a session with a memory limit (the hub tier has one)
    assert memory_limit() is None, "this test runs where the session's memory is not limited"
    assert give_back_memory not in ip.events.callbacks["post_run_cell"]
