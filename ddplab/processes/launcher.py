"""ipyparallel launchers that fork the controller and the engines from this process's zygote (see
zygote.py) instead of starting `python -m ipyparallel.controller/engine` from scratch.

ipyparallel still owns the cluster: ForkedControllerLauncher and ForkedEngineSetLauncher are its
local launchers with one change, how each process comes to be. The zygote is shared by every
local pool this process starts, kept warm across %ddp_restart and %ddp_stop / %ddp_start, started
as early as %load_ext ddplab (it imports torch in the background while the user reads), and ended
with the process (or %unload_ext ddplab). Each pool binds its launchers to the zygote it started from
(`forking_from`): a replacement rank is forked where its peers were, whatever the settings say now.
"""
import os
from typing import Any

import psutil
from ipyparallel.cluster.launcher import LocalControllerLauncher, LocalEngineLauncher, LocalEngineSetLauncher

from ..shared import upstream
from .zygote import Zygote


def forking_from(launcher: type, zygote: Zygote) -> type:
    """`launcher` (a class ipyparallel makes instances of) bound to one zygote."""
    return type(launcher.__name__, (launcher,), {"zygote": zygote})


class _Forked:
    """The start() of a local launcher, by a fork of the zygote instead of Popen."""

    main: str | None = None  # "engine" or "controller"
    command: Any = ()  # the command line ipyparallel would run, to strip from its arguments
    zygote: Zygote  # (forking_from)

    def start(self):
        env = {**os.environ, **self.get_env()}
        args = self.find_args()[len(self.command):]
        self.pid = self.zygote.fork(self.main, env, os.path.abspath(self.work_dir), self.output_file, args)
        self.process = psutil.Process(self.pid)
        self.notify_start(self.pid)
        # ipyparallel's thread that notices the process end (the pool notices it by its pid in any case)
        wait = upstream.get("ipyparallel.cluster.launcher:LocalProcessLauncher._start_waiting", self)
        if wait is not None:
            wait()


class ForkedControllerLauncher(_Forked, LocalControllerLauncher):
    """The controller, forked: it needs ipyparallel only, which the zygote has imported."""

    main = "controller"

    @property
    def command(self):
        return self.controller_cmd


class ForkedEngineLauncher(_Forked, LocalEngineLauncher):
    """One engine, forked. No nanny process: for a local pool the Lab signals engines and notices
    their death by pid itself, and a nanny (a fresh Python process) would cost each engine about
    a second of start-up. Nor does the engine watch the controller's pings (a Python wake-up per
    ping: 3.8% of a core for 4 idle engines at 0.1 s beats, 1.6% without): the Lab and the reaper
    end local engines, where a remote engine needs the pings to notice its controller is gone."""

    main = "engine"

    @property
    def command(self):
        return self.engine_cmd

    @property
    def zygote(self):  # (the engine set's, which forking_from bound)
        return self.parent.zygote

    def find_args(self):
        return [*super().find_args(), "--IPEngine.enable_nanny=False",
                "--IPEngine.max_heartbeat_misses=0"]


class ForkedEngineSetLauncher(LocalEngineSetLauncher):
    launcher_class = ForkedEngineLauncher
    delay = 0.0  # forks are cheap: no need to space engines out
