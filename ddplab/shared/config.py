"""The pool's settings, validated once, and ddplab's tunables.

`PoolConfig` is what one pool is (ranks, timeouts, threads, rendezvous, lang, ...): the magics,
the CLI, `Lab(...)` and `%ddp_restart` all build or reuse one, and `PoolConfig.make` is the only
place that checks them.

`DDPLab` holds the tunables (intervals, debug, cores, and the defaults of the pool settings) as
traitlets, the IPython way, so they can be set like any IPython option:

    %config DDPLab                      # list them with their help
    %config DDPLab.frame = 0.5          # redraw twice a second
    c.DDPLab.lang = "zh"                # in ipython_config.py: every pool labelled in Chinese

Pure: no torch, IPython or widget imports. Also the machine as the settings see it: cores(),
default_ranks(), max_local_ranks().
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from traitlets import Bool, Float, Int, TraitError, Unicode, default, observe, validate
from traitlets.config import SingletonConfigurable

from .errors import BadRequest
from .system import usable_cores
from .words import say

LAUNCHERS = ("local", "local-spawn")  # local pools; any other name is an ipyparallel engine launcher
ATTACHED = "attached"  # engines someone else started: --connect PATH or --profile NAME


class DDPLab(SingletonConfigurable):
    """ddplab's tunables. Read anywhere with `tunables()`; set with %config DDPLab.NAME = value."""

    # --- defaults of the pool settings (each %ddp_start option overrides its own)
    ranks = Int(0, help="Ranks of a new pool when %ddp_start gives none (0: from the cores, 2 to 4).").tag(config=True)
    timeout = Float(30.0, help="Seconds a collective (all_reduce, ...) may wait for the other ranks before "
                               "ddplab cuts it, not counting the time a rank is stopped at a breakpoint (gloo's "
                               "own timeout is made long); %ddp_start --timeout.").tag(config=True)
    lang = Unicode(help="Dashboard, picture and message language: en or zh; %ddp_start --lang. Default: "
                        "$DDPLAB_LANG, else zh for a notebook in a folder named zh (the lessons' Chinese "
                        "editions: JupyterLab tells the kernel its notebook's path), else en.").tag(config=True)
    dashboard = Bool(True, help="Show the live dashboard in notebooks; %ddp_start --no-dashboard.").tag(config=True)
    widgets = Bool(True, help="Draw the live dashboard with ipywidgets where they render (ipywidgets 8, not in Colab); "
                              "False: as HTML updated in place, as in Colab, at most once a second.").tag(config=True)
    class_folder = Unicode(help="A class folder your teacher made (`ddplab class create DIR`): your predictions and "
                                "checked answers are added to it, as after %ddp_class join DIR.").tag(config=True)
    class_name = Unicode(help="The name your teacher sees with class_folder (default: your account's).").tag(config=True)
    start_timeout = Float(120.0, help="Seconds a pool may take to start before ddplab gives up.").tag(config=True)

    # --- how often things happen
    poll = Float(0.25, help="Seconds between looks at telemetry and output while a cell runs (a failed rank's "
                 "reply, or the last one, is looked at as soon as it comes).").tag(config=True)
    frame = Float(0.25, help="Seconds between redraws of the live view while a cell runs (4 a second).").tag(config=True)
    flush = Float(0.25, help="Seconds between telemetry batches a rank sends (ddplab.log points).").tag(config=True)
    fail_fast = Float(0.3, help="Seconds a failed or dead rank may go unanswered before the group is closed "
                                "under the ranks still waiting for it.").tag(config=True)
    escalate = Float(1.5, help="Seconds each step of the escalation waits after SIGINT (Ctrl-C, a cell's timeout) "
                               "while ranks still run (stuck in a C++ collective): then their links are cut, then "
                               "one rank at a time is killed and restarted (docs: internals, escalation).").tag(
        config=True)
    leave_grace = Float(6.0, help="Seconds a rank whose stack says it left the cell's code (its result is on the way) "
                                  "is given before the escalation kills it anyway.").tag(config=True)
    reply_grace = Float(10.0, help="Seconds a rank may take to say it began a cell, and its result to arrive after it "
                                   "said it finished; later, ipyparallel lost the message on the way (a broken "
                                   "connection) and the cell ends with an error for that rank instead of "
                                   "waiting forever.").tag(config=True)
    after_cut = Float(3.0, help="Seconds after ranks' links were cut (a collective that can never finish) before they "
                                "are sent SIGINT, if the cut did not free them.").tag(config=True)
    last_batch = Float(2.0, help="Seconds a cell waits, once every rank has answered, for each rank's last telemetry "
                                 "batch (its last points).").tag(config=True)
    control_timeout = Float(5.0, help="Seconds to wait for engines to answer a control request (a signal through "
                                      "their nanny, closing or leaving the group) before going on without them.").tag(
        config=True)
    answer_timeout = Float(60.0, help="Seconds ranks with no cell running may take to answer a request: %ddp_gather, "
                                      "%ddp_push, the history, the parameters' checksums. On a busy machine a small "
                                      "answer has taken over 10 s; the pool's timeout bounds collectives, not "
                                      "these.").tag(config=True)
    look_every = Float(0.25, help="Seconds between looks for dead engines while a cell runs.").tag(config=True)
    watch_every = Float(1.0, help="Seconds between looks for dead engines while no cell runs.").tag(config=True)
    heartbeat_ms = Int(100, help="The controller's heartbeat (ms): a new engine counts as registered at its first "
                                 "pong (a local pool), or one to two beats after it (ipyparallel's default, 3000, "
                                 "makes a start wait). The controller drops an engine on other hosts silent for 2 s of beats "
                                 "(as at ipyparallel's 10 misses of 200 ms); a local pool's after 60 s, as it sees "
                                 "its engines end by their pids. A local pool's controller beats this often only "
                                 "while an engine registers, and 10 times slower once they are in.").tag(config=True)

    # --- who else can reach the pool
    private_network = Bool(True, help="Run a local pool's controller and ranks in a network namespace of their own "
                                      "(only a loopback interface), where the machine allows it (root, or "
                                      "unprivileged user namespaces): no other account of the machine can reach "
                                      "gloo's ports. The ranks then have no network: download data in the notebook "
                                      "and pass a path. False: the ranks use the machine's network (gloo on its "
                                      "loopback). It applies to the next pool started (a running pool keeps its network). "
                                      "%ddp_status says which is in force.").tag(config=True)
    accept_gate = Bool(True, help="Where the ranks share the machine's network: answer every accept of gloo's listeners "
                                  "in the rank itself (seccomp user notification, gate.py), so that no other account's "
                                  "connection ever reaches gloo. False: only the check before each group is used "
                                  "(guard.py). Takes effect for ranks started after.").tag(config=True)
    compile_cache = Unicode(help="Where the ranks' torch.compile keeps compiled code: a folder only you can write "
                                 "(0700, yours), checked before every pool; a folder someone else owns or can "
                                 "write is refused and a private one used. Default: $TORCHINDUCTOR_CACHE_DIR, "
                                 "else ~/.cache/ddplab/torchinductor.").tag(config=True)

    # --- the machine and diagnostics
    cores = Int(help="CPUs the pool may use (0: the affinity mask, capped by a container's CPU quota). "
                     "Default: $DDPLAB_CORES, else 0.").tag(config=True)
    log_level = Unicode("WARNING", help="How much of ddplab's own decisions (restarts, cuts, kills, dropped messages, "
                                        "lost ranks) the 'ddplab' logger prints to stderr: DEBUG, INFO, WARNING "
                                        "(default) or ERROR.").tag(config=True)
    debug = Bool(help="Send ipyparallel's own log (engine start-up output, ...) to the 'ddplab.ipyparallel' "
                      "logger at DEBUG level. Default: $DDPLAB_DEBUG.").tag(config=True)

    @validate("log_level")
    def _check_log_level(self, proposal: Any) -> str:
        level = str(proposal["value"]).upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise TraitError(f"DDPLab.log_level must be DEBUG, INFO, WARNING or ERROR, got {proposal['value']!r}")
        return level

    @observe("log_level")
    def _set_log_level(self, change: Any) -> None:
        show_log(change["new"])

    @default("lang")
    def _lang_from_env(self) -> str:
        if os.environ.get("DDPLAB_LANG") in ("en", "zh"):
            return os.environ["DDPLAB_LANG"]
        notebook = os.environ.get("JPY_SESSION_NAME", "")  # set by jupyter_server: the notebook's path
        return "zh" if "zh" in notebook.replace("\\", "/").split("/")[:-1] else "en"

    @default("compile_cache")
    def _compile_cache_default(self) -> str:
        from .privacy import default_compile_cache

        return default_compile_cache()

    @default("cores")
    def _cores_from_env(self) -> int:
        value = os.environ.get("DDPLAB_CORES", "")
        return int(value) if value.isdigit() else 0

    @default("debug")
    def _debug_from_env(self) -> bool:
        return os.environ.get("DDPLAB_DEBUG", "") not in ("", "0")


def tunables() -> DDPLab:
    """The one DDPLab instance (made on first use; %load_ext ddplab gives it the shell's config)."""
    return DDPLab.instance()


def show_log(level: str | int) -> None:
    """Print the 'ddplab' logger's records of `level` and above to stderr (one handler, made once)."""
    import logging
    import sys

    from .privacy import REDACT

    logger = logging.getLogger("ddplab")
    logger.setLevel(level)
    if not any(getattr(h, "_ddplab", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("ddplab [%(levelname)s] %(message)s"))
        handler.addFilter(REDACT)  # no key in a log line, whichever of ddplab's loggers made it
        handler._ddplab = True  # type: ignore[attr-defined]  # (our mark: the handler made once)
        logger.addHandler(handler)


# What a local pool charges to the session's memory cgroup, measured on torch 2.13 (charge less inactive page
# cache: the fork server 250 MiB once torch is in, the controller and the rest 110, each rank 67 after 60 DDP steps
# of the workloads' MLP), with some room
ZYGOTE_MIB = 250  # the fork server (zygote.py), started at %load_ext ddplab: the session may hold it already
POOL_MIB = ZYGOTE_MIB + 130  # the pool besides its ranks: fork server, controller, reaper
RANK_MIB = 80  # each rank
MAX_DEFAULT_RANKS = 4


def cores() -> int:
    """CPUs the pool may use: DDPLab.cores if set, else what this process may really use
    (system.usable_cores: the affinity mask, capped by a container's CPU quota)."""
    return tunables().cores if tunables().cores > 0 else usable_cores()


def need_mib(ranks: int) -> int:
    """About what a local pool of `ranks` ranks holds (MiB): its own processes and each rank's."""
    return POOL_MIB + ranks * RANK_MIB


def ranks_that_fit(available: int | None = None, held: int = 0) -> int:
    """How many ranks a local pool can start in `available` bytes (this session's memory left, by
    default: its cgroup's limit less what it holds, or the machine's available memory), `held` bytes of
    the pool's being held already (a warm fork server)."""
    if available is None:
        from .system import memory_available

        available = memory_available()
    return max(0, int(((available + held) / 2**20 - POOL_MIB) // RANK_MIB))


def default_ranks() -> int:
    """Two ranks at least (one rank teaches nothing about communication), cores at most 4, and no
    more than this session's memory holds (but one)."""
    return max(1, min(MAX_DEFAULT_RANKS, max(2, cores()), ranks_that_fit()))


def max_local_ranks() -> int:
    """How many engines this machine can hold: 4 per core, and the memory they need."""
    return max(1, min(max(8, 4 * cores()), ranks_that_fit()))


def memory_check(ranks: int, lang: str = "en", held: int = 0) -> str | None:
    """One line saying that `ranks` ranks will not fit this session's memory, and what fits; None if they do.
    held: bytes of the pool's the session holds already (a warm fork server: zygote.held())."""
    from .system import memory_available, memory_limit

    available, limit = memory_available(), memory_limit()
    if need_mib(ranks) * 2**20 <= available + held:
        return None
    fits = ranks_that_fit(available, held)
    values = dict(ranks=ranks, need=need_mib(ranks) / 1024, free=available / 2**30, fits=fits,
                  limit=(limit or 0) / 2**30)
    if limit and fits:
        return say(lang, "{ranks} ranks need about {need:.2f} GiB and this session has {free:.2f} GiB free of its "
                         "{limit:.2f} GiB: %ddp_start {fits} fits, or %ddp_start {ranks} --force starts them anyway",
                   **values)
    if limit:
        return say(lang, "{ranks} ranks need about {need:.2f} GiB and this session has {free:.2f} GiB free of its "
                         "{limit:.2f} GiB: not one rank fits; close other notebooks (their kernels hold memory), or "
                         "%ddp_start {ranks} --force starts them anyway", **values)
    if fits:
        return say(lang, "{ranks} ranks need about {need:.2f} GiB and this machine has {free:.2f} GiB free: "
                         "%ddp_start {fits} fits, or %ddp_start {ranks} --force starts them anyway", **values)
    return say(lang, "{ranks} ranks need about {need:.2f} GiB and this machine has {free:.2f} GiB free: not one rank "
                     "fits; close other notebooks (their kernels hold memory), or %ddp_start {ranks} --force starts "
                     "them anyway", **values)


def _whole(value: object, what: str, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be a whole number, got {value!r}")
    if value < low:
        raise BadRequest(f"{what} must be at least {low}, got {value}")
    return value


def _seconds(value: object, what: str, limit: float = 86400) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < limit:
        raise BadRequest(f"{what} must be a positive number of seconds (under a day), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class PoolConfig:
    """What one pool is. Build it with PoolConfig.make(...), which checks every value.

    ranks: how many (None for an attached pool: every engine registered); timeout: seconds a
    collective may wait before the notebook cuts it (not gloo: its own is a day; time stopped at a
    breakpoint does not count); threads: torch threads per rank (0: each rank's host's cores shared
    among its ranks on that host); rendezvous: "file" (a FileStore in the pool's private folder: no
    port) or "tcp://HOST:PORT" (a local pool only); launcher: "local" (engines forked from a
    zygote), "local-spawn" (ipyparallel's own local launcher), an ipyparallel engine launcher
    ("mpi", "ssh", "slurm", ...: started with the settings of `profile`), or "attached" (engines
    someone else started, through the controller's connection file `connect` or an ipcluster's
    `profile` and `cluster_id`); ifname: the network interface every rank uses toward its peers;
    encrypt: CurveZMQ encryption of ipyparallel's traffic across hosts, for a pool whose controller
    ddplab starts (an attached pool is encrypted when its controller was started with it; ddplab's
    own telemetry and rendezvous on TCP always are, and admit the pool's members only); lang,
    dashboard: how the notebook shows it; start_timeout: seconds a start may take.
    """

    ranks: int | None  # (None: an attached pool, every engine registered)
    timeout: float
    threads: int
    rendezvous: str = "file"
    launcher: str = "local"
    lang: str = "en"
    dashboard: bool = True
    start_timeout: float = 120.0
    connect: str | None = None
    profile: str | None = None
    cluster_id: str | None = None
    ifname: str | None = None
    encrypt: bool = False

    @property
    def local(self) -> bool:
        return self.launcher in LAUNCHERS

    def say(self, text: str, **values: Any) -> str:
        """A message in the pool's language (words.say): config.say("stopped {n} ranks", n=4)."""
        return say(self.lang, text, **values)

    @property
    def attached(self) -> bool:
        return self.launcher == ATTACHED

    @classmethod
    def make(cls, ranks: int | None = None, timeout: float | None = None, threads: int | None = None, *,
             rendezvous: str = "file", launcher: str | None = None, lang: str | None = None,
             dashboard: bool | None = None, start_timeout: float | None = None, connect: str | None = None,
             profile: str | None = None, cluster_id: str | None = None, ifname: str | None = None,
             encrypt: bool = False, force: bool = False, held: int = 0) -> PoolConfig:
        """Check every setting once; None takes the DDPLab default. Raises BadRequest (one line).
        force: start a local pool even where its ranks will not fit this session's memory; held: bytes
        of what the pool needs that the session holds already (a warm fork server: zygote.held())."""
        t = tunables()
        launcher = _launcher(launcher, connect, profile, cluster_id)
        ranks = _whole(ranks, "the number of ranks", 1)
        lang = t.lang if lang is None else lang
        if lang not in ("en", "zh"):
            raise BadRequest(f"lang must be 'en' or 'zh', got {lang!r}")
        if launcher in LAUNCHERS:
            ranks = ranks or t.ranks or default_ranks()
            most = max(8, 4 * cores())
            if ranks > most:
                raise BadRequest(say(lang, "{ranks} ranks is more than this machine's {cores} cores can run (at most "
                                           "{most}): ask for fewer ranks", ranks=ranks, cores=cores(), most=most))
            short = None if force else memory_check(ranks, lang, held)
            if short is not None:
                raise BadRequest(short)
        elif launcher != ATTACHED:
            ranks = ranks or t.ranks or default_ranks()
        timeout = _seconds(t.timeout if timeout is None else timeout, "timeout")
        threads = _whole(threads, "threads per rank", 1)
        if threads is None:
            threads = max(1, cores() // ranks) if launcher in LAUNCHERS and ranks else 0  # 0: per host, on the ranks
        if rendezvous != "file" and not (str(rendezvous).startswith("tcp://") and launcher in LAUNCHERS):
            raise BadRequest(f"rendezvous must be 'file' or (a local pool) 'tcp://HOST:PORT', got {rendezvous!r}; "
                             "pools across hosts use ddplab's signed store on rank 0")
        if ifname is not None and (not isinstance(ifname, str) or not ifname.strip() or "/" in ifname):
            raise BadRequest(f"--ifname names a network interface, such as eth0, got {ifname!r}")
        start_timeout = _seconds(t.start_timeout if start_timeout is None else start_timeout, "start_timeout")
        dashboard = t.dashboard if dashboard is None else bool(dashboard)
        if encrypt and launcher in LAUNCHERS:
            raise BadRequest("--encrypt is for pools across hosts: a local pool talks over socket files only its "
                             "owner can open (nothing crosses a network to encrypt)")
        if encrypt and launcher == ATTACHED:
            raise BadRequest("--encrypt cannot change a controller started elsewhere: start it with "
                             "ipcontroller --IPController.enable_curve=True (ddplab then encrypts too)")
        return cls(ranks, timeout, threads, rendezvous, launcher, lang, dashboard, start_timeout,
                   connect and os.path.abspath(os.path.expanduser(connect)), profile, cluster_id, ifname,
                   bool(encrypt))


def _launcher(launcher: object, connect: str | None, profile: str | None, cluster_id: str | None) -> str:
    """Which kind of pool the options ask for (checks they fit together)."""
    if connect is not None and profile is not None:
        raise BadRequest("--connect and --profile both say where the controller is: give one")
    if cluster_id is not None and profile is None:
        raise BadRequest("--cluster-id picks a cluster of a --profile: give the profile too")
    if connect is not None:
        if launcher not in (None, ATTACHED):
            raise BadRequest("--connect attaches to engines already running: --engines cannot start more there")
        path = os.path.abspath(os.path.expanduser(connect))
        if not os.path.isfile(path):
            raise BadRequest(f"no file {path}: give the controller's ipcontroller-client.json (in its profile's "
                             "security folder, e.g. ~/.ipython/profile_default/security/)")
        return ATTACHED
    if launcher is None:
        return ATTACHED if profile is not None else "local"
    if not isinstance(launcher, str) or not launcher.strip():
        raise BadRequest(f"launcher must be a name such as 'local', 'mpi', 'ssh' or 'slurm', got {launcher!r}")
    return launcher


__all__ = ["DDPLab", "PoolConfig", "tunables", "cores", "default_ranks", "max_local_ranks", "need_mib", "ranks_that_fit",
           "memory_check"]
