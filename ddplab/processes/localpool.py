"""A pool on this machine: a controller forked from the zygote, and engines forked from it too
("local") or started by ipyparallel's local launcher ("local-spawn"). Every socket of ipyparallel
and of the telemetry is a file in the pool's private 0700 folder (ipc://): the pool opens no TCP
port but gloo's, and those live in the zygote's network namespace where the machine allows one
(zygote.py). The rendezvous is a file in that folder. A reaper ends the pool if the kernel dies.
"""
import os
import signal
import time
from typing import TYPE_CHECKING

from ..shared import upstream
from ..shared.config import tunables
from ..shared.errors import FLOODED, english
from ..shared.privacy import compile_cache
from ..shared.system import exit_reason, is_gone, kill, loopback_interface, memory_limit, memory_peak, oom_kills
from .owned import OwnedCluster
from .pool import Pool, log

if TYPE_CHECKING:
    from .zygote import Zygote


def flooded(output_file):
    """Whether an engine's output ends with gloo's abort for want of descriptors ("accept: Too many
    open files"): only a flood of connections to its listener does that (guard.py)."""
    try:
        with open(output_file, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return b"accept: Too many open files" in f.read()
    except (OSError, TypeError):
        return False


class LocalPool(OwnedCluster, Pool):
    """Engines on this machine (see the module docstring). rendezvous: "file" or "tcp://HOST:PORT"."""

    # its engines' deaths are seen by their pids, so the controller need not drop a silent one soon: a
    # rank paused for seconds (py-spy --native, %ddp_stacks, reading its stack on a loaded machine) was
    # dropped after 2 s and its group could not form again
    silence_dropped_s = 60.0

    def __init__(self, launcher="local", threads=1, rendezvous="file", say=english):
        super().__init__()
        self.launcher, self.threads, self.rendezvous_asked = launcher, threads, rendezvous
        self.profile = None
        self.forked = launcher == "local"  # engines forked from the zygote (the controller always is)
        self._procs = {}  # rank -> the launcher of its engine (signalled by pid)
        self.zygote: Zygote | None = None  # the fork server this pool's processes come from (start)
        self.memory_killed: set[int] = set()  # lost ranks whose engine the kernel's OOM killer ended
        self._ooms: int | None = None  # the session's OOM kills when the pool started (system.oom_kills)
        self._ooms_named = 0  # of them, the engines named killed for memory
        self._say = say  # a sentence in the pool's language (PoolConfig.say)

    # ------------------------------------------------------------------ start
    def start(self, n, deadline, say):
        from .zygote import started_zygote

        self._ooms = oom_kills()
        self.open_workdir()
        self.compile_folder()
        self.zygote = started_zygote()  # usually started at %load_ext ddplab, and warm since (it forks the controller too)
        self.zygote.pools.add(self)
        return self.start_cluster(n, deadline, say)

    def engine_launcher(self):
        from .launcher import ForkedEngineSetLauncher, forking_from

        return forking_from(ForkedEngineSetLauncher, self.zygote) if self.forked else "local"

    def controller_launcher(self):
        from .launcher import ForkedControllerLauncher, forking_from

        return forking_from(ForkedControllerLauncher, self.zygote)

    def controller_args(self):
        # every socket a file in the private folder: no TCP port (zygote.py makes the names agree)
        return ["--IPController.transport=ipc", f"--IPController.ip={os.path.join(self.workdir, 'ipp')}"]

    def engine_config(self, config):
        if not self.forked:  # as forked engines: no TCP port of ipyparallel's. No nanny (it listens on one; engines
            # here are signalled by pid), and no watching the controller's pings (a SUB socket bound on 127.0.0.1)
            config.LocalEngineSetLauncher.engine_args = ["--IPEngine.enable_nanny=False",
                                                        "--IPEngine.max_heartbeat_misses=0"]
        return config

    def environment(self):
        return {
            # each rank's share of the cores: read by local-spawn engines when they import torch, and by the
            # processes a rank starts (forked engines inherit torch from the zygote: Rank.join's set_num_threads)
            "OMP_NUM_THREADS": str(self.threads),
            "MKL_NUM_THREADS": str(self.threads),
            "DDPLAB_PARENT_PID": str(os.getpid()),
            "GLOO_SOCKET_IFNAME": loopback_interface(),  # gloo listens on loopback only
            # what the ranks and their children (DataLoader workers, a forkserver) put in temporary
            # files goes to the pool's private folder: stop kills them before they can remove it
            "TMPDIR": os.path.join(self.workdir, "tmp"),
            "TORCHINDUCTOR_CACHE_DIR": self.compile_cache,  # outlives the pool; the ranks check it again
        }

    def located(self, new, deadline):
        return new, []  # every engine is here, on loopback

    def track(self, info):
        super().track(info)
        launchers = {l.process.pid: l for l in self.launchers() if l.process is not None}
        self._procs = {r: launchers[i["pid"]] for r, i in enumerate(info) if i.get("pid") in launchers}
        self.write_pids()

    # ------------------------------------------------------------------ what protects it
    def compile_folder(self):
        self.compile_cache, self.compile_refused = compile_cache(
            tunables().compile_cache, lambda: os.path.join(self.workdir, "tmp", "torchinductor"))
        if self.compile_refused:
            log.warning(self.compile_refused)
        return self.compile_cache

    @property
    def network(self):
        """("private", None): the controller and ranks live in a network namespace of their own;
        ("shared", why): on the machine's network (gloo's ports reachable from its loopback)."""
        if not self.forked:
            return "shared", "local-spawn engines are started by ipyparallel, not forked into a private network"
        from .zygote import started_zygote

        return (self.zygote or started_zygote()).network

    def exposure(self):
        network, why = self.network
        return {"local": True, "network": network, "network_why": why, "signed": True, "encrypted": False,
                "controller": None}

    def telemetry_where(self):
        return f"ipc://{self.workdir}"  # a socket file in the private folder: other users cannot reach it

    def rendezvous(self, generation, key, member):
        if self.rendezvous_asked == "file":
            path = os.path.join(self.workdir, f"rendezvous-{generation}")
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # torch's FileStore keeps this mode
            return "file://" + path, None
        # asked for TCP: ddplab's signed store on rank 0 at that address, for the pool's members only
        # (torch's TCPStore would accept anyone, and listens on every interface whatever host it is given)
        host, _, port = self.rendezvous_asked[len("tcp://"):].rpartition(":")
        return self.signed_store(host or "127.0.0.1", key, generation, member, int(port or 0))

    def rendezvous_text(self):
        return "file (private folder)" if self.rendezvous_asked == "file" else \
            f"signed store on rank 0 ({self.rendezvous_asked[len('tcp://'):]})"

    # ------------------------------------------------------------------ its processes
    def _gone_why(self, rank):
        launcher = self._procs.get(rank)
        if launcher is None:
            return super()._gone_why(rank)
        if self._gone(launcher.process):  # its process tells, with its exit code
            code = self._exit_code(launcher.process)
            if code == -signal.SIGKILL and self._for_memory(rank):
                return self.memory_why()
            why = exit_reason(code)
            return f"{why}: {FLOODED}" if flooded(getattr(launcher, "output_file", None)) else why
        return None

    def _for_memory(self, rank, wait=0.5):
        """Whether the OOM killer ended this rank's engine (it died of SIGKILL): the session's count of OOM
        kills grew since the pool started by more than the engines already named so. The kernel counts
        the kill after sending the signal (and logging it): the count is looked at for up to `wait` s."""
        if self._ooms is None:
            return False
        deadline = time.monotonic() + wait
        while (now := oom_kills()) is not None and now - self._ooms <= self._ooms_named:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        if now is None:
            return False
        self._ooms_named += 1
        self.memory_killed.add(rank)
        return True

    def found_again(self, rank):
        self.memory_killed.discard(rank)  # (restarted: a later loss has its own reason)
        super().found_again(rank)

    def memory_why(self):
        """Why an engine the OOM killer ended is gone, with the session's limit and its peak."""
        limit, peak, say = memory_limit(), memory_peak(), self._say
        if limit and peak:
            return say("its engine was killed for memory (the kernel's OOM killer): this session may use "
                       "{limit:.2f} GiB and held up to {peak:.2f} GiB", limit=limit / 2**30, peak=peak / 2**30)
        if limit:
            return say("its engine was killed for memory (the kernel's OOM killer): this session may use "
                       "{limit:.2f} GiB", limit=limit / 2**30)
        return say("its engine was killed for memory (the kernel's OOM killer: this machine ran out)")

    def _gone(self, proc):
        """Cheap (this runs on every poll): a signal-0 probe; the zygote reaps its engines at
        once, so a dead forked engine has no pid left. Otherwise psutil, which tells zombies."""
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # a pid reused by another user's process: ours is gone
            return True
        return False if self.forked else is_gone(proc)

    def _exit_code(self, proc, wait=0.5):
        """The exit code of a dead engine. Its parent reaps it: the zygote (which writes it down)
        or ipyparallel's launcher thread (psutil keeps it on that Process object; waiting here too
        would race that thread)."""
        deadline = time.monotonic() + wait
        while True:
            if self.forked and self.zygote is not None:
                code = self.zygote.exit_code(proc.pid)
            elif upstream.has("psutil:Process._exitcode", proc):
                code = proc._exitcode
            else:  # (psutil moved it: the loss is said without its exit code)
                return None
            if isinstance(code, int) or time.monotonic() > deadline:
                return code if isinstance(code, int) else None
            time.sleep(0.02)

    def kill(self, ranks, why=None):
        self.kill_processes([self._procs[r].process for r in ranks if r in self._procs])
        if why:
            for r in ranks:
                self.mark_lost(r, why)

    def interrupt(self, ranks):
        live = [r for r in ranks if r not in self.lost(ranks)]
        kill([self._procs[r].process for r in live if r in self._procs], signal.SIGINT)

    def stop(self, shutdown=False):
        self._procs = {}
        outcome = super().stop(shutdown)
        if self.zygote is not None:
            self.zygote.pools.discard(self)
        return outcome
