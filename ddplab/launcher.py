"""ipyparallel engine launchers that fork engines from a zygote (see zygote.py) instead of
starting `python -m ipyparallel.engine` from scratch.

ipyparallel still owns the engine set: ForkedEngineSetLauncher is its LocalEngineSetLauncher
with one change, how each engine process comes to be. Cluster(engines=ForkedEngineSetLauncher).
"""
import json
import os
import subprocess
import sys
import threading

import psutil
from ipyparallel.cluster.launcher import LocalEngineLauncher, LocalEngineSetLauncher

_zygotes = {}  # profile dir -> Zygote


class Zygote:
    """The notebook's handle on a zygote process: ask it to fork, read how children ended."""

    def __init__(self, workdir, env):
        self.workdir = workdir
        self.proc = subprocess.Popen([sys.executable, "-m", "ddplab.zygote", workdir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, **env},
                                     start_new_session=True)
        self.lock = threading.Lock()
        self.ready = False
        _zygotes[workdir] = self

    def wait_ready(self):
        """Block until the zygote has imported everything (it started while the controller did)."""
        with self.lock:
            if not self.ready:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the engine fork server exited (code {self.proc.wait()})")
                self.ready = True

    def fork(self, env, cwd, output, args=()):
        self.wait_ready()
        with self.lock:
            self.proc.stdin.write(json.dumps({"env": env, "cwd": cwd, "output": output, "args": list(args)}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the engine fork server exited")
        return json.loads(line)["pid"]

    def exit_code(self, pid):
        """How a forked engine ended (negative: the signal), or None if not known (yet)."""
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
        _zygotes.pop(self.workdir, None)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()


class ForkedEngineLauncher(LocalEngineLauncher):
    """One engine, forked by the pool's zygote. No nanny process: for a local pool the Lab
    signals engines and notices their death by pid itself, and starting a nanny (a fresh
    Python process) would cost each engine about a second of start-up."""

    def start(self):
        zygote = _zygotes[self.profile_dir]
        env = {**os.environ, **self.get_env()}
        self.pid = zygote.fork(env, os.path.abspath(self.work_dir), self.output_file,
                               [*self.engine_args, "--IPEngine.enable_nanny=False"])
        self.process = psutil.Process(self.pid)
        self.notify_start(self.pid)
        self._start_waiting()


class ForkedEngineSetLauncher(LocalEngineSetLauncher):
    launcher_class = ForkedEngineLauncher
    delay = 0.0  # forks are cheap: no need to space engines out
