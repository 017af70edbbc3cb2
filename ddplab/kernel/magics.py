"""The IPython magics that make, run and stop a pool: a thin skin over Lab. They parse, call Lab,
and show results (the ones that look into a running pool: inspect_magics.py).

Misuse answers one line (UsageError) and changes nothing.
"""
import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import IO, Any, ParamSpec, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..dashboard.text import Progress, show_result
from ..processes.zygote import held as zygote_held
from ..shared.config import PoolConfig
from ..shared.errors import CellTimeout, DDPLabError, Interrupted, RankFailed, UsageProblem
from ..shared.words import plural, say
from .lab import Lab

T = TypeVar("T")
P = ParamSpec("P")


def parse_ranks(spec: str | None, world_size: int) -> list[int] | None:
    """'0,2' or '1-3' or 'all' -> sorted list of ranks; anything else -> UsageError."""
    if spec is None or spec.strip() == "all":
        return None
    ranks: set[int] = set()
    try:
        for part in spec.split(","):
            lo, sep, hi = part.strip().partition("-")
            ranks.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise UsageError(f"--ranks {spec!r}: give ranks like 0,2 or 1-3") from None
    bad = sorted(r for r in ranks if not 0 <= r < world_size)
    if bad or not ranks:
        raise UsageError(f"--ranks {spec!r}: this pool has ranks 0..{world_size - 1}")
    return sorted(ranks)


_DEFAULTS: dict[Any, argparse.Namespace] = {}  # magic's function -> its arguments parsed from an empty line


def _parse(magic: Callable[..., Any], line: str) -> argparse.Namespace:
    """Parse a magic's arguments; shlex's "No closing quotation" becomes a UsageError too. An empty line
    (most %%ddp cells) gives a copy of the defaults parsed once (argparse: 0.07 ms of each cell)."""
    empty = not line.strip()
    key = getattr(magic, "__func__", magic)
    if empty and key in _DEFAULTS:
        return argparse.Namespace(**vars(_DEFAULTS[key]))
    try:
        args = parse_argstring(magic, line)
    except ValueError as exc:
        raise UsageError(f"{exc}: check the quotes in {line!r}") from None
    if empty:
        _DEFAULTS[key] = argparse.Namespace(**vars(args))
    return args


def _unquote(text: str) -> str:
    """IPython's magic argument split keeps quotes: 'p x' -> p x."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _tell(lab: Lab, text: str, file: IO[str] | None = None, **values: Any) -> None:
    """Print one "ddplab: ..." line in the pool's language (words.say)."""
    print("ddplab: " + lab.config.say(text, **values), file=file)


def _not_taken(lab: Lab, waiting: list[int]) -> None:
    """Say which ranks have not confirmed a change the notebook sent them (Lab.command)."""
    if waiting:
        from ..shared.words import ranks_text

        _tell(lab, "{ranks} have not said they took it yet (they get it when they join the group again)",
              ranks=ranks_text(waiting, lab.config.lang))


def _usage(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call fn; turn a ddplab error about the request into a one-line UsageError."""
    try:
        return fn(*args, **kwargs)
    except UsageProblem as exc:
        raise UsageError(str(exc)) from None


def show_run(lab: Lab, run: Callable[[], T]) -> T:
    """Run (or wait for) a cell and show its output, or its failure, as %%ddp does. Returns what run
    returned (an expected failure, Lab.run(expect=...): its ranks' output is shown first)."""
    try:
        result = run()
    except RankFailed as exc:
        if exc.result is not None:
            show_result(exc.result)
        raise
    except (KeyboardInterrupt, CellTimeout) as exc:
        if lab.last_result is not None:
            show_result(lab.last_result)
        if isinstance(exc, CellTimeout):
            raise
        done = str(exc) or "the pool is still running"
        raise Interrupted(f"every rank of the cell was sent SIGINT (Ctrl-C); {done}") from None
    if isinstance(result, DDPLabError):  # the failure a lesson's cell was meant to have
        shown = getattr(result, "result", None)  # (a RankFailed's RunResult)
        if shown is not None:
            show_result(shown)
        return result
    show_result(result)
    return result


@magics_class
class DDPMagics(Magics):
    """%ddp_start, %%ddp, %ddp_wait, %ddp_interrupt, %ddp_gather, %ddp_push, %ddp_status, %ddp_restart,
    %ddp_stop."""

    lab: Lab | None = None

    def _lab(self) -> Lab:
        if self.lab is None or not self.lab.running:
            raise UsageError("no ddplab pool is running: start one with %ddp_start")
        return self.lab

    @magic_arguments()
    @argument("ranks", nargs="?", type=int,
              help="number of ranks (default: the cores, at least 2, at most 4; attached: every engine registered)")
    @argument("--timeout", type=float, default=None,
              help="seconds a collective (all_reduce, barrier, ...) may wait for the other ranks before ddplab "
                   "cuts it and the cell fails with CollectiveTimeout; time stopped at a breakpoint does not count "
                   "(default 30; DDPLab.timeout). Not a limit on cells: that is %%%%ddp --timeout")
    @argument("--threads", type=int, default=None,
              help="torch threads per rank (default: the host's cores // its ranks, at least 1)")
    @argument("--lang", choices=("en", "zh"), default=None, help="dashboard labels and messages: en or zh (中文)")
    @argument("--no-dashboard", action="store_true", help="no live dashboard (text output only)")
    @argument("--connect", metavar="PATH", default=None,
              help="attach to the engines of a running controller, through its ipcontroller-client.json")
    @argument("--profile", metavar="NAME", default=None,
              help="attach to the cluster `ipcluster start --profile NAME` made (or, with --engines, start one "
                   "with that profile's settings)")
    @argument("--cluster-id", metavar="ID", default=None, help="which cluster of the --profile (ipcluster --cluster-id)")
    @argument("--engines", metavar="LAUNCHER", default=None,
              help="start the engines with this ipyparallel launcher: mpi, ssh, slurm, ... (settings: --profile)")
    @argument("--ifname", metavar="NAME", default=None,
              help="the network interface every rank uses toward its peers (default: the one that reaches the "
                   "controller)")
    @argument("--encrypt", action="store_true",
              help="with --engines: encrypt ipyparallel's traffic across hosts (CurveZMQ); ddplab's telemetry "
                   "and rendezvous always are")
    @argument("--force", action="store_true",
              help="start the ranks even where this session's memory will not hold them (ddplab says what fits "
                   "otherwise, and starts nothing)")
    @line_magic
    def ddp_start(self, line: str) -> None:
        """Start N ipyparallel engines that form one gloo process group, or attach to engines that
        are already running (on this machine or others) and make them a group.

        Every rank then has rank, world_size, torch, dist and nn defined.
        Defaults come from %config DDPLab (e.g. %config DDPLab.lang = "zh").

            %ddp_start 4                                   # 4 engines on this machine
            %ddp_start --connect ~/cluster/ipcontroller-client.json   # every engine of that controller
            %ddp_start --profile mycluster                 # the cluster ipcluster started with that profile
            %ddp_start 8 --engines slurm --profile slurm   # start 8 engines through Slurm
        """
        tic = time.perf_counter()
        args = _parse(self.ddp_start, line)
        if args.timeout is not None and not math.isfinite(args.timeout):
            raise UsageError(f"--timeout {args.timeout}: give a number of seconds, e.g. --timeout 60")
        if self.lab is not None and self.lab.running:
            n = self.lab.world_size
            _tell(self.lab, "a pool of {n} ranks is already running; nothing changed. Use %ddp_restart for a fresh "
                  "pool, or %ddp_stop then %ddp_start N.", file=sys.stderr, n=n)
            return
        config = _usage(PoolConfig.make, args.ranks, args.timeout, args.threads, lang=args.lang,
                        dashboard=False if args.no_dashboard else None, launcher=args.engines,
                        connect=args.connect, profile=args.profile, cluster_id=args.cluster_id, ifname=args.ifname,
                        encrypt=args.encrypt, force=args.force, held=zygote_held())
        lab = Lab(config=config)
        if config.ranks:  # the dashboard shows the ranks go through starting -> init -> ready
            lab.use_view()
        progress = None if lab.view.shows_progress else Progress()
        _usage(lab.start, progress=progress)
        self.lab = lab
        if not config.ranks:  # attached: as many ranks as engines, known now
            lab.use_view()
            lab.show("update")
        lab.start_seconds = time.perf_counter() - tic  # what the user waited, the dashboard's making too
        message = lab.report.ready() + lab.config.say("; run code on every rank with %%ddp")
        if progress is not None:
            progress.done(message)
        else:
            print(f"ddplab: {message}")
        for warning, sentence in lab.report.exposure():
            print(f"ddplab: {sentence}", file=sys.stderr if warning else sys.stdout)

    @magic_arguments()
    @argument("--ranks", default=None, help="only these ranks, e.g. 0,2 or 1-3 (default: all)")
    @argument("--timeout", type=float, default=None,
              help="seconds this cell may run, not counting time stopped at a breakpoint; then every rank is "
                   "interrupted (SIGINT) and the cell fails. "
                   "Not the collective timeout: that is %%ddp_start --timeout")
    @argument("--background", "--bg", action="store_true",
              help="return at once; the cell runs on (the dashboard stays live, widgets and knobs work); "
                   "%%ddp_wait shows its output")
    @argument("--expect", metavar="ERROR", default=None,
              help="the cell is meant to fail with ERROR (ddplab's error or a rank's exception, by name: "
                   "CollectiveMismatch, RankFailed, IndexError, ...): the failure is shown as expected and not "
                   "raised; a cell that does not fail so raises")
    @cell_magic
    def ddp(self, line: str, cell: str) -> None:
        """Run the cell on every rank (state is kept between cells); show each rank's output apart."""
        args = _parse(self.ddp, line)
        lab = self._lab()
        ranks = parse_ranks(args.ranks, lab._size())
        if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
            raise UsageError(f"--timeout {args.timeout}: give a positive number of seconds")
        if args.expect is not None and (args.background or not args.expect.isidentifier()):
            raise UsageError(f"--expect {args.expect}: give an error's name (like CollectiveMismatch), "
                             "and run the cell in the foreground")
        if args.expect:
            expect: str = args.expect

            def run_expecting() -> DDPLabError:  # (Lab.run with expect= returns the failure)
                return lab.run(cell, ranks, timeout=args.timeout, expect=expect)

            failure = show_run(lab, lambda: _usage(run_expecting))
            _tell(lab, "this cell failed as it was meant to ({name}):", name=args.expect)
            print("\n".join(failure._render_traceback_()))
            return
        if args.background:
            _usage(lab.run, cell, ranks, timeout=args.timeout, background=True)
            lab.view.show()  # the live dashboard, here: it goes on updating while other cells run
            n = len(ranks or range(lab._size()))
            _tell(lab, "running in the background on {n} ranks; %ddp_wait shows its output, %ddp_interrupt stops it",
                  n=n)
            if lab.view.main_thread_only and not lab.view.told_background:
                lab.view.told_background = True  # (once)
                _tell(lab, "this front end draws nothing the kernel sends from a thread (Colab): the dashboard of a "
                           "cell in the background is drawn while %ddp_wait waits for it")
            return
        show_run(lab, lambda: _usage(lab.run, cell, ranks, timeout=args.timeout))

    @magic_arguments()
    @argument("--timeout", type=float, default=None, help="seconds to wait (default: until it ends)")
    @line_magic
    def ddp_wait(self, line: str) -> None:
        """Wait for the cell running in the background (%%ddp --background); show its output."""
        args = _parse(self.ddp_wait, line)
        lab = self._lab()
        try:
            show_run(lab, lambda: _usage(lab.wait, args.timeout))
        except TimeoutError as exc:
            raise UsageError(f"{exc}: %ddp_wait again, or %ddp_interrupt") from None

    @line_magic
    def ddp_interrupt(self, line: str) -> None:
        """Send SIGINT to every rank (like Ctrl-C in each): stops a cell running in the background."""
        if line.strip():
            raise UsageError("%ddp_interrupt takes no arguments")
        lab = self._lab()
        lab.interrupt()
        if lab.background:
            _tell(lab, "every rank was sent SIGINT; %ddp_wait shows how the cell ended")
        else:
            _tell(lab, "every rank was sent SIGINT")

    @line_magic
    def ddp_gather(self, line: str) -> list[Any]:
        """Return a variable (or expression) from every rank, as a list indexed by rank.

            ts = %ddp_gather t
            %ddp_gather model.weight.sum().item()
        """
        if not line.strip():
            raise UsageError("%ddp_gather needs a variable name or expression, e.g. %ddp_gather loss")
        return _usage(self._lab().gather, line.strip())

    @magic_arguments()
    @argument("names", nargs="+", help="notebook variables to copy into every rank")
    @line_magic
    def ddp_push(self, line: str) -> None:
        """Copy notebook variables into every rank: %ddp_push lr data

        ipyparallel sends them: a small dict arrives with its keys sorted (send a list of pairs where
        the order matters), and a class defined in the notebook whose methods call super() cannot be
        sent (define it in a %%ddp cell)."""
        args = _parse(self.ddp_push, line)
        shell = self.shell
        assert shell is not None  # (a magic runs in a shell)
        missing = [n for n in args.names if n not in shell.user_ns]
        if missing:
            raise UsageError(f"not defined in the notebook: {', '.join(missing)}")
        _usage(self._lab().push, **{n: shell.user_ns[n] for n in args.names})

    def _lang(self) -> str:
        """The language of the last pool, or of the next one (DDPLab.lang, the notebook's folder)."""
        from ..shared.config import tunables

        return self.lab.config.lang if self.lab is not None else (tunables().lang or "en")

    @line_magic
    def ddp_status(self, line: str) -> None:
        """Show ranks, engines, pids, hosts, threads, backend and states."""
        if line.strip():
            raise UsageError("%ddp_status takes no arguments")
        if self.lab is None or not self.lab.running:
            print("ddplab: " + say(self._lang(), "no pool is running; start one with %ddp_start"))
            return
        print("\n".join(self.lab.report.status()))
        self.lab.view.show()

    @magic_arguments()
    @argument("--all", action="store_true", help="restart every rank, even if only some were lost")
    @line_magic
    def ddp_restart(self, line: str) -> None:
        """Bring back a full group: restart the lost ranks (the others keep their variables), or,
        if none is lost (or with --all), every rank with the same settings (variables are lost).
        To change the size: %ddp_stop, then %ddp_start N."""
        args = _parse(self.ddp_restart, line)
        lab = self._lab()
        progress = None if lab.view.shows_progress else Progress()
        message = _usage(lab.restart, progress=progress, everything=args.all)
        if progress is not None:
            progress.done(message)
        else:
            print(f"ddplab: {message}")

    @magic_arguments()
    @argument("--shutdown", action="store_true",
              help="an attached pool: stop its engines and their controller too (they were started elsewhere)")
    @line_magic
    def ddp_stop(self, line: str) -> None:
        """Stop the pool: engines, controller and every helper process. A pool attached to engines
        started elsewhere (--connect, --profile) leaves the group and the engines running, unless
        --shutdown."""
        args = _parse(self.ddp_stop, line)
        if self.lab is None or not self.lab.running:
            print("ddplab: " + say(self._lang(), "no pool is running"))
            return
        tic = time.perf_counter()
        lab = self.lab
        lost = lab.find_lost()
        hosts = sorted({row["host"] for row in lab.status() if row["host"] and row["rank"] not in lost})
        outcome = lab.stop(shutdown=args.shutdown)
        seconds = time.perf_counter() - tic
        n = lab._size() - (len(lost) if outcome != "stopped" else 0)  # engines left running elsewhere: live ones
        if outcome == "stopped":
            _tell(lab, "stopped {n} rank{s} in {seconds:.1f} s", n=n, s="" if n == 1 else "s", seconds=seconds)
        elif outcome == "shut down":
            _tell(lab, "left the group and shut down its {n} {engines} and their controller in {seconds:.1f} s", n=n,
                  engines=plural(n, "engine"), seconds=seconds)
        else:
            _tell(lab, "left the group in {seconds:.1f} s; the {n} {engines} (started elsewhere, on {hosts}) keep running: "
                  "%ddp_start --connect groups them again, %ddp_stop --shutdown stops them", seconds=seconds, n=n,
                  engines=plural(n, "engine"), hosts=("、" if lab.config.lang == "zh" else ", ").join(hosts))
