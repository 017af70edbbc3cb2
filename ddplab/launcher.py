"""ipyparallel launchers that fork the controller and the engines from this process's zygote (see
zygote.py) instead of starting `python -m ipyparallel.controller/engine` from scratch.

ipyparallel still owns the cluster: ForkedControllerLauncher and ForkedEngineSetLauncher are its
local launchers with one change, how each process comes to be. The zygote is shared by every
local pool this process starts, kept warm across %ddp_restart and %ddp_stop / %ddp_start, started
as early as %load_ext ddplab (it imports torch in the background while the user reads), and ended
with the process (or %unload_ext ddplab).
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import psutil
from ipyparallel.cluster.launcher import LocalControllerLauncher, LocalEngineLauncher, LocalEngineSetLauncher

_zygote = None
_zygote_lock = threading.Lock()


def zygote():
    """This process's zygote, started if it is not running (it then imports in the background)."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = Zygote()
        return _zygote


def running_zygote():
    """The zygote if one runs, else None (never starts one)."""
    return _zygote if _zygote is not None and _zygote.proc.poll() is None else None


@atexit.register
def stop_zygote():
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.stop()
            _zygote = None


class Zygote:
    """The notebook's handle on a zygote process: ask it to fork, read how its children ended.
    Its folder (0700) holds the exit codes of what it forked."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix="ddplab-zygote-")
        # one thread while importing: each fork sets its own share (torch.set_num_threads)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "ddplab.zygote", self.workdir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self.lock = threading.Lock()
        self.ready = False

    @property
    def pid(self):
        return self.proc.pid

    def wait_ready(self):
        """Block until the zygote has imported everything (it may have started long ago)."""
        with self.lock:
            if not self.ready:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the engine fork server exited (code {self.proc.wait()})")
                self.ready = True

    def fork(self, main, env, cwd, output, args=()):
        """A new process running ipyparallel's `main` ("engine" or "controller"); its pid."""
        self.wait_ready()
        request = {"main": main, "env": env, "cwd": cwd, "output": output, "args": list(args)}
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the engine fork server exited")
        return json.loads(line)["pid"]

    def exit_code(self, pid):
        """How a forked process ended (negative: the signal), or None if not known (yet)."""
        try:
            with open(os.path.join(self.workdir, "exits")) as f:
                for line in f:
                    p, code = line.split()
                    if int(p) == pid:
                        return int(code)
        except (OSError, ValueError):
            pass
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


class _Forked:
    """The start() of a local launcher, by a fork of the zygote instead of Popen."""

    main = None  # "engine" or "controller"
    command = ()  # the command line ipyparallel would run, to strip from its arguments

    def start(self):
        env = {**os.environ, **self.get_env()}
        args = self.find_args()[len(self.command):]
        self.pid = zygote().fork(self.main, env, os.path.abspath(self.work_dir), self.output_file, args)
        self.process = psutil.Process(self.pid)
        self.notify_start(self.pid)
        self._start_waiting()


class ForkedControllerLauncher(_Forked, LocalControllerLauncher):
    """The controller, forked: it needs ipyparallel only, which the zygote has imported."""

    main = "controller"

    @property
    def command(self):
        return self.controller_cmd


class ForkedEngineLauncher(_Forked, LocalEngineLauncher):
    """One engine, forked. No nanny process: for a local pool the Lab signals engines and notices
    their death by pid itself, and a nanny (a fresh Python process) would cost each engine about
    a second of start-up."""

    main = "engine"

    @property
    def command(self):
        return self.engine_cmd

    def find_args(self):
        return [*super().find_args(), "--IPEngine.enable_nanny=False"]


class ForkedEngineSetLauncher(LocalEngineSetLauncher):
    launcher_class = ForkedEngineLauncher
    delay = 0.0  # forks are cheap: no need to space engines out
