"""The magics that look into a running pool and play with it: knobs, the timeline, the history, fault
drills, pdb on a rank, the models compared, the export to torchrun. Like magics.py, they parse,
call Lab, and show results; they use the pool %ddp_start made (DDPMagics.lab).
"""
import ast
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..dashboard.text import in_notebook
from ..shared.wire import TIMED_FIRST
from ..shared.words import plural
from .magics import _not_taken, _parse, _tell, _unquote, _usage

if TYPE_CHECKING:
    from ..shared.metrics import History
    from ..shared.timeline import Timeline
    from .lab import Lab
    from .magics import DDPMagics


@magics_class
class DDPInspectMagics(Magics):
    """%ddp_knob, %ddp_timeline, %ddp_history, %ddp_fault, %ddp_debug, %ddp_step, %ddp_stacks, %ddp_check,
    %ddp_export."""

    pool: "DDPMagics | None" = None  # the DDPMagics whose pool these look into (load_ipython_extension sets it)

    def _lab(self) -> "Lab":
        assert self.pool is not None  # (load_ipython_extension sets it)
        return self.pool._lab()

    @magic_arguments()
    @argument("name", help="the knob's name, read by rank code as ddplab.knob(name, default)")
    @argument("value", help="its new value (a number, a word, True, False or None)")
    @line_magic
    def ddp_knob(self, line: str) -> None:
        """Change a value that running rank code reads (ddplab.knob), e.g. %ddp_knob period 4"""
        args = _parse(self.ddp_knob, line)
        value: Any
        try:  # 4, 0.5, True, None as themselves; anything else a word
            value = ast.literal_eval(args.value)
        except (ValueError, SyntaxError):
            value = args.value
        lab = self._lab()
        _not_taken(lab, _usage(lab.knobs.set, args.name, value))

    @magic_arguments()
    @argument("--cell", type=int, default=None, help="the notebook cell's number (default: the last %%ddp cell)")
    @argument("--save", metavar="PATH", default=None, help="write it in Chrome's trace format (Perfetto opens it)")
    @argument("--on", action="store_true", help="record the timeline in the cells that follow (the default)")
    @argument("--off", action="store_true", help="do not record it in the cells that follow (its hooks leave torch: no cost)")
    @argument("--every", type=int, metavar="N", default=None,
              help="in the cells that follow, time a cell's steps after its first 20 every N-th (default 10; 1: all)")
    @line_magic
    def ddp_timeline(self, line: str) -> "Timeline | None":
        """The timeline of the last %%ddp cell: every rank's forward, backward, optimizer, data and each
        collective on one clock, with the waiting for the last rank; displayed, the swimlanes and the
        breakdown of a step; tl.to_pandas(), tl.summary(), tl.memory.

            tl = %ddp_timeline
            %ddp_timeline --save trace.json      # open it in https://ui.perfetto.dev
            %ddp_timeline --off                  # later cells are not recorded (--on again)
            %ddp_timeline --every 1              # time every step of a cell (default: its first 20,
                                                 # then every 10th: timing a step costs it)
        """
        args = _parse(self.ddp_timeline, line)
        lab = self._lab()
        if args.on and args.off:
            raise UsageError("--on or --off, not both")
        if args.every is not None and (args.off or args.every < 1):
            raise UsageError("--every takes a whole number of steps, 1 or more (1: time every step), and not with --off")
        if args.on or args.off or args.every is not None:
            waiting = lab.records.record(not args.off, args.every)
            if args.off:
                _tell(lab, "the timeline is not recorded in the cells that follow")
            else:
                every = lab.records.every
                _tell(lab, "the timeline is recorded in the cells that follow (a cell: every step)" if every == 1 else
                      "the timeline is recorded in the cells that follow (a cell: its first {first} steps, then one "
                      "in {every})", first=TIMED_FIRST, every=every)
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
    def ddp_history(self, line: str) -> "History | None":
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
        return None

    @magic_arguments()
    @argument("kind", nargs="?", choices=("kill", "raise", "slow", "clear"),
              help="kill: the rank's engine dies; raise: the rank raises; slow: a straggler; clear: undo")
    @argument("rank", nargs="?", type=int, help="which rank")
    @argument("factor", nargs="?", type=float, help="for slow: how many times longer each step takes")
    @argument("--at-step", type=int, default=None,
              help="kill or raise when the rank logs this training step (ddplab.log), not now")
    @line_magic
    def ddp_fault(self, line: str) -> None:
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
    def ddp_debug(self, line: str) -> None:
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
        lab.debug.session(rank, list(map(_unquote, args.command)) if args.command else None)

    @magic_arguments()
    @argument("ranks", nargs="*", type=int, help="the ranks (default: every rank of the cell that runs, or of the pool)")
    @argument("--native", action="store_true", help="C and C++ frames too (where gloo waits, say)")
    @line_magic
    def ddp_stacks(self, line: str) -> dict[int, str] | None:
        """Every rank's stacks, as py-spy dumps them (each rank dumps itself; with --native, the C and C++
        frames too). For a cell stuck in the background, or between cells:

            %ddp_stacks              # every rank
            %ddp_stacks 3 --native   # rank 3, down to gloo's frames
        """
        args = _parse(self.ddp_stacks, line)
        lab = self._lab()
        found = _usage(lab.debug.stacks, args.ranks or None, args.native)
        print("\n".join(f"── rank {r} ──\n{text.rstrip()}" for r, text in found.items()))
        return None if in_notebook() else found

    @line_magic
    def ddp_step(self, line: str) -> None:
        """A pdb command to ranks stopped at a breakpoint() in a background cell (%%ddp --bg), their replies
        side by side; without a command, where every rank is. Ranks in brackets, else every stopped rank:

            %ddp_step                      # who is stopped where, who waits for them
            %ddp_step p grad.norm()        # every stopped rank
            %ddp_step [0,2] next           # ranks 0 and 2 only
            %ddp_step c                    # continue: the cell runs on (%ddp_wait for its result)

        (A foreground %%ddp cell asks for these commands itself, in the input box.)"""
        lab = self._lab()
        stepper = lab.debug.stepper
        if not line.strip():
            print(stepper.status() or "")
            return
        print(stepper.show(_usage(lab.debug.step, line)))

    @magic_arguments()
    @argument("names", nargs="*", help="nn.Module variables to compare (default: every one on the ranks)")
    @line_magic
    def ddp_check(self, line: str) -> dict[str, list[int]] | None:
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
    def ddp_export(self, line: str) -> None:
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
