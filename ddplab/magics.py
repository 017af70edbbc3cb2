"""The IPython magics: a thin skin over Lab. They parse, call Lab, and show results.

Misuse answers one line (UsageError) and changes nothing.
"""
import ast
import math
import sys
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .config import PoolConfig
from .dashboard.text import LiveOutput, Progress, TextView, in_notebook, show_result
from .errors import CellTimeout, DDPLabError, ExpectedFailureMissing, Interrupted, RankFailed, UsageProblem
from .lab import Lab
from .words import plural


def parse_ranks(spec, world_size):
    """'0,2' or '1-3' or 'all' -> sorted list of ranks; anything else -> UsageError."""
    if spec is None or spec.strip() == "all":
        return None
    ranks = set()
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


def make_view(config):
    """The live view for where we run: the widget dashboard in a notebook, text elsewhere."""
    if not in_notebook():
        return TextView(lang=config.lang)
    if not config.dashboard:
        return LiveOutput()
    from .dashboard.widget import Dashboard

    return Dashboard(config.ranks, lang=config.lang)


def _parse(magic, line):
    """Parse a magic's arguments; shlex's "No closing quotation" becomes a UsageError too."""
    try:
        return parse_argstring(magic, line)
    except ValueError as exc:
        raise UsageError(f"{exc}: check the quotes in {line!r}") from None


def _unquote(text):
    """IPython's magic argument split keeps quotes: 'p x' -> p x."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _tell(lab, text, file=None, **values):
    """Print one "ddplab: ..." line in the pool's language (words.say)."""
    print("ddplab: " + lab.config.say(text, **values), file=file)


def _not_taken(lab, waiting):
    """Say which ranks have not confirmed a change the notebook sent them (Lab.command)."""
    if waiting:
        from .words import ranks_text

        _tell(lab, "{ranks} have not said they took it yet (they get it when they join the group again)",
              ranks=ranks_text(waiting, lab.config.lang))


def _usage(fn, *args, **kwargs):
    """Call fn; turn a ddplab error about the request into a one-line UsageError."""
    try:
        return fn(*args, **kwargs)
    except UsageProblem as exc:
        raise UsageError(str(exc)) from None


def show_run(lab, run):
    """Run (or wait for) a cell and show its output, or its failure, as %%ddp does."""
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
    show_result(result)


def expect_failure(lab, name, run):
    """Run a cell meant to fail with `name` (the class of ddplab's error or of a failed rank's exception):
    show that failure as the lesson's point, on stdout, and return. Any other failure is raised as it is,
    and a cell that does not fail raises ExpectedFailureMissing."""
    try:
        run()
    except DDPLabError as exc:
        names = {k.__name__ for k in type(exc).__mro__} | {f.ename for f in getattr(exc, "failures", {}).values()}
        if name not in names:
            raise
        _tell(lab, "this cell failed as it was meant to ({name}):", name=name)
        print("\n".join(exc._render_traceback_()))
        return
    raise ExpectedFailureMissing(lab.config.say("the cell was meant to fail with {name}, but it did not", name=name))


def debug_session(lab, rank, commands=None):
    """pdb on `rank`: the given commands, or a prompt until q; the debugger is closed after."""
    try:
        if commands:
            for command in commands:
                print(f"(Pdb rank {rank}) {command}")
                print(lab.debug.command(rank, command), end="")
            return
        while True:
            try:
                command = input(f"(Pdb rank {rank}) ")
            except (EOFError, KeyboardInterrupt):
                break
            if command.strip() in ("q", "quit", "exit", "c", "cont", "continue"):
                break
            print(lab.debug.command(rank, command), end="")
    finally:
        lab.debug.end(rank)


@magics_class
class DDPMagics(Magics):
    """%ddp_start, %%ddp, %ddp_gather, %ddp_push, %ddp_status, %ddp_history, %ddp_fault, %ddp_restart,
    %ddp_export, %ddp_stop."""

    lab = None

    def _lab(self):
        if self.lab is None or not self.lab.running:
            raise UsageError("no ddplab pool is running: start one with %ddp_start")
        return self.lab

    @magic_arguments()
    @argument("ranks", nargs="?", type=int,
              help="number of ranks (default: the cores, at least 2, at most 4; attached: every engine registered)")
    @argument("--timeout", type=float, default=None,
              help="seconds a collective (all_reduce, barrier, ...) may wait for the other ranks before gloo "
                   "fails it (default 30; DDPLab.timeout). Not a limit on cells: that is %%%%ddp --timeout")
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
    @line_magic
    def ddp_start(self, line):
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
                        encrypt=args.encrypt)
        lab = Lab(config=config)
        if config.ranks:  # the dashboard shows the ranks go through starting -> init -> ready
            lab.view = make_view(config)
            lab.view.show()
        progress = None if lab.view.shows_progress else Progress()
        _usage(lab.start, progress=progress)
        self.lab = lab
        if not config.ranks:  # attached: as many ranks as engines, known now
            lab.view = make_view(lab.config)
            lab.view.show()
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
              help="seconds this cell may run; then every rank is interrupted (SIGINT) and the cell fails. "
                   "Not gloo's collective timeout: that is %%ddp_start --timeout")
    @argument("--background", action="store_true",
              help="return at once; the cell runs on (the dashboard stays live, widgets and knobs work); "
                   "%%ddp_wait shows its output")
    @argument("--expect", metavar="ERROR", default=None,
              help="the cell is meant to fail with ERROR (ddplab's error or a rank's exception, by name: "
                   "CollectiveMismatch, RankFailed, IndexError, ...): the failure is shown as expected and not "
                   "raised; a cell that does not fail so raises")
    @cell_magic
    def ddp(self, line, cell):
        """Run the cell on every rank (state is kept between cells); show each rank's output apart."""
        args = _parse(self.ddp, line)
        lab = self._lab()
        ranks = parse_ranks(args.ranks, lab.world_size)
        if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
            raise UsageError(f"--timeout {args.timeout}: give a positive number of seconds")
        if args.expect is not None and (args.background or not args.expect.isidentifier()):
            raise UsageError(f"--expect {args.expect}: give an error's name (like CollectiveMismatch), "
                             "and run the cell in the foreground")
        if args.expect:
            return expect_failure(lab, args.expect, lambda: show_run(lab, lambda: _usage(
                lab.run, cell, ranks, timeout=args.timeout)))
        if args.background:
            _usage(lab.run, cell, ranks, timeout=args.timeout, background=True)
            lab.view.show()  # the live dashboard, here: it goes on updating while other cells run
            n = len(ranks or range(lab.world_size))
            _tell(lab, "running in the background on {n} ranks; %ddp_wait shows its output, %ddp_interrupt stops it",
                  n=n)
            return
        show_run(lab, lambda: _usage(lab.run, cell, ranks, timeout=args.timeout))

    @magic_arguments()
    @argument("--timeout", type=float, default=None, help="seconds to wait (default: until it ends)")
    @line_magic
    def ddp_wait(self, line):
        """Wait for the cell running in the background (%%ddp --background); show its output."""
        args = _parse(self.ddp_wait, line)
        lab = self._lab()
        try:
            show_run(lab, lambda: _usage(lab.wait, args.timeout))
        except TimeoutError as exc:
            raise UsageError(f"{exc}: %ddp_wait again, or %ddp_interrupt") from None

    @line_magic
    def ddp_interrupt(self, line):
        """Send SIGINT to every rank (like Ctrl-C in each): stops a cell running in the background."""
        if line.strip():
            raise UsageError("%ddp_interrupt takes no arguments")
        lab = self._lab()
        lab.interrupt()
        if lab.background:
            _tell(lab, "every rank was sent SIGINT; %ddp_wait shows how the cell ended")
        else:
            _tell(lab, "every rank was sent SIGINT")

    @magic_arguments()
    @argument("name", help="the knob's name, read by rank code as ddplab.knob(name, default)")
    @argument("value", help="its new value (a number, a word, True, False or None)")
    @line_magic
    def ddp_knob(self, line):
        """Change a value that running rank code reads (ddplab.knob), e.g. %ddp_knob period 4"""
        args = _parse(self.ddp_knob, line)
        try:  # 4, 0.5, True, None as themselves; anything else a word
            value = ast.literal_eval(args.value)
        except (ValueError, SyntaxError):
            value = args.value
        lab = self._lab()
        _not_taken(lab, _usage(lab.knobs.set, args.name, value))

    @line_magic
    def ddp_gather(self, line):
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
    def ddp_push(self, line):
        """Copy notebook variables into every rank: %ddp_push lr data"""
        args = _parse(self.ddp_push, line)
        missing = [n for n in args.names if n not in self.shell.user_ns]
        if missing:
            raise UsageError(f"not defined in the notebook: {', '.join(missing)}")
        _usage(self._lab().push, **{n: self.shell.user_ns[n] for n in args.names})

    @line_magic
    def ddp_status(self, line):
        """Show ranks, engines, pids, hosts, threads, backend and states."""
        if line.strip():
            raise UsageError("%ddp_status takes no arguments")
        if self.lab is None or not self.lab.running:
            print("ddplab: no pool is running; start one with %ddp_start")
            return
        print("\n".join(self.lab.report.status()))
        self.lab.view.show()

    @magic_arguments()
    @argument("--cell", type=int, default=None, help="the notebook cell's number (default: the last %%ddp cell)")
    @argument("--save", metavar="PATH", default=None, help="write it in Chrome's trace format (Perfetto opens it)")
    @argument("--on", action="store_true", help="record the timeline in the cells that follow (the default)")
    @argument("--off", action="store_true", help="do not record it in the cells that follow (its hooks leave torch: no cost)")
    @line_magic
    def ddp_timeline(self, line):
        """The timeline of the last %%ddp cell: every rank's forward, backward, optimizer, data and each
        collective on one clock, with the waiting for the last rank; displayed, the swimlanes and the
        breakdown of a step; tl.to_pandas(), tl.summary(), tl.memory.

            tl = %ddp_timeline
            %ddp_timeline --save trace.json      # open it in https://ui.perfetto.dev
            %ddp_timeline --off                  # later cells are not recorded (--on again)
        """
        args = _parse(self.ddp_timeline, line)
        lab = self._lab()
        if args.on and args.off:
            raise UsageError("--on or --off, not both")
        if args.on or args.off:
            waiting = lab.records.record(args.on)
            _tell(lab, "the timeline is recorded in the cells that follow" if args.on
                  else "the timeline is not recorded in the cells that follow")
            _not_taken(lab, waiting)
            return None
        timeline = _usage(lab.records.timeline, args.cell)
        if args.save:
            try:
                n = timeline.save(args.save)
            except OSError as exc:
                raise UsageError(f"cannot write {args.save}: {exc.strerror}") from None
            _tell(lab, "wrote {n} spans of {ranks} ranks to {path} (Chrome's trace format: Perfetto opens it)", n=n,
                  ranks=len(timeline.ranks), path=args.save)
            return None
        return timeline

    @magic_arguments()
    @argument("--csv", metavar="PATH", default=None, help="write the history to this CSV file")
    @line_magic
    def ddp_history(self, line):
        """Every point every rank logged with ddplab.log(...), exactly: h = %ddp_history"""
        args = _parse(self.ddp_history, line)
        lab = self._lab()
        history = _usage(lab.records.history)
        if args.csv is None:
            return history
        try:
            n = history.to_csv(args.csv)
        except OSError as exc:
            raise UsageError(f"cannot write {args.csv}: {exc.strerror}") from None
        columns = ", ".join(history.columns())
        _tell(lab, "wrote {n} points to {path} (columns: {columns})", n=n, path=args.csv, columns=columns)

    @magic_arguments()
    @argument("--all", action="store_true", help="restart every rank, even if only some were lost")
    @line_magic
    def ddp_restart(self, line):
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
    @argument("kind", nargs="?", choices=("kill", "raise", "slow", "clear"),
              help="kill: the rank's engine dies; raise: the rank raises; slow: a straggler; clear: undo")
    @argument("rank", nargs="?", type=int, help="which rank")
    @argument("factor", nargs="?", type=float, help="for slow: how many times longer each step takes")
    @argument("--at-step", type=int, default=None,
              help="kill or raise when the rank logs this training step (ddplab.log), not now")
    @line_magic
    def ddp_fault(self, line):
        """Fault drills for teaching, shown live on the dashboard:

            %ddp_fault kill 2              # rank 2's engine dies now (SIGKILL)
            %ddp_fault raise 1 --at-step 30  # rank 1 raises when it logs step 30
            %ddp_fault slow 3 4            # rank 3's steps take 4x as long: a straggler
            %ddp_fault clear 3             # back to normal (no rank: all)
            %ddp_fault                     # the drills set now
        """
        args = _parse(self.ddp_fault, line)
        lab = self._lab()
        if args.kind is None:
            if not lab.drills.faults:
                _tell(lab, "no fault drills set")
            for r in sorted(lab.drills.faults):
                print(f"rank {r}: {lab.run_state.ranks[r].fault}")
            return
        if args.kind == "clear" and args.rank is None:
            for r in sorted(lab.drills.faults):
                _usage(lab.drills.set, "clear", r)
            _tell(lab, "every fault drill cleared")
            return
        if args.rank is None:
            raise UsageError(f"%ddp_fault {args.kind} needs a rank, e.g. %ddp_fault {args.kind} 1")
        if args.kind != "slow" and args.factor is not None:
            raise UsageError(f"%ddp_fault {args.kind} takes a rank only (and --at-step for kill/raise)")
        if args.kind in ("slow", "clear") and args.at_step is not None:
            raise UsageError(f"--at-step is for kill and raise, not {args.kind}")
        print(f"ddplab: {_usage(lab.drills.set, args.kind, args.rank, at_step=args.at_step, factor=args.factor)}")

    @magic_arguments()
    @argument("rank", nargs="?", type=int, default=None,
              help="the rank to debug (default: the rank that caused the last failure)")
    @argument("-c", "--command", action="append", default=None, metavar="CMD",
              help="a pdb command to run (repeat for several: -c 'p x' -c up); without it, an interactive prompt")
    @line_magic
    def ddp_debug(self, line):
        """Post-mortem pdb on a rank's last exception, driven from here: where, up, down, p EXPR,
        list, interact (a Python console in that frame; exit() leaves it), q to finish.

            %ddp_debug            # the rank that caused the last failure
            %ddp_debug 2 -c 'p x' -c up -c 'p y'
        """
        args = _parse(self.ddp_debug, line)
        lab = self._lab()
        rank, header = _usage(lab.debug.start, args.rank)
        header = header.rstrip()
        _tell(lab, "pdb on rank {rank}: {header}", rank=rank, header=header)
        debug_session(lab, rank, list(map(_unquote, args.command)) if args.command else None)

    @magic_arguments()
    @argument("names", nargs="*", help="nn.Module variables to compare (default: every one on the ranks)")
    @line_magic
    def ddp_check(self, line):
        """Compare every rank's model parameters (checksums): do the ranks hold the same model?

            %ddp_check            # every nn.Module in the ranks (a DDP model: its .module)
            %ddp_check model
        """
        args = _parse(self.ddp_check, line)
        lab = self._lab()
        found = _usage(lab.debug.check, args.names or None)
        print("\n".join(lab.report.check(found)))
        return {name: differ for name, differ in found.items()} if not in_notebook() else None

    @magic_arguments()
    @argument("path", help="where to write the script, e.g. train.py")
    @line_magic
    def ddp_export(self, line):
        """Write the %%ddp cells that ran successfully, in order, as one script that torchrun runs:

            %ddp_export train.py
            !torchrun --standalone --nproc_per_node 4 train.py

        The process group comes from torchrun's environment; rank, world_size, torch, dist, nn and
        ddplab are defined as in the notebook; notebook magics in the cells are left out."""
        args = _parse(self.ddp_export, line)
        lab = self._lab()
        try:
            n = _usage(lab.export.write, args.path)
        except OSError as exc:
            raise UsageError(f"cannot write {args.path}: {exc.strerror}") from None
        run = f"torchrun --standalone --nproc_per_node {lab.world_size} {args.path}"
        _tell(lab, "wrote {n} {cells} to {path}; run it with {run}", n=n, cells=plural(n, "cell"), path=args.path,
              run=run)

    @magic_arguments()
    @argument("--shutdown", action="store_true",
              help="an attached pool: stop its engines and their controller too (they were started elsewhere)")
    @line_magic
    def ddp_stop(self, line):
        """Stop the pool: engines, controller and every helper process. A pool attached to engines
        started elsewhere (--connect, --profile) leaves the group and the engines running, unless
        --shutdown."""
        args = _parse(self.ddp_stop, line)
        if self.lab is None or not self.lab.running:
            print("ddplab: no pool is running")
            return
        tic = time.perf_counter()
        lab = self.lab
        lost = lab.find_lost()
        hosts = sorted({row["host"] for row in lab.status() if row["host"] and row["rank"] not in lost})
        outcome = lab.stop(shutdown=args.shutdown)
        seconds = time.perf_counter() - tic
        n = lab.world_size - (len(lost) if outcome != "stopped" else 0)  # engines left running elsewhere: live ones
        if outcome == "stopped":
            _tell(lab, "stopped {n} rank{s} in {seconds:.1f} s", n=n, s="" if n == 1 else "s", seconds=seconds)
        elif outcome == "shut down":
            _tell(lab, "left the group and shut down its {n} engines and their controller in {seconds:.1f} s", n=n,
                  seconds=seconds)
        else:
            _tell(lab, "left the group in {seconds:.1f} s; the {n} engines (started elsewhere, on {hosts}) keep running: "
                  "%ddp_start --connect groups them again, %ddp_stop --shutdown stops them", seconds=seconds, n=n,
                  hosts=("、" if lab.config.lang == "zh" else ", ").join(hosts))
