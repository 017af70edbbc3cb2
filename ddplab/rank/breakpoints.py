"""Breakpoints in %%ddp cells, rank side: `breakpoint()` (or `ddplab.breakpoint(ranks=...)`) in a cell
stops this rank in pdb. Its commands come from the notebook, on the signed command channel of the
rank's telemetry ("debug" commands, rank.py); what pdb prints goes back as events of the same
telemetry, sent at once:

    "paused"  JSON {"id", "out", "file", "line", "function", "cell", "code"}: pdb waits for a command
              (id: the command just carried out, 0 for none; out: what it printed, or where pdb stopped)
    "resumed" JSON {"id", "out", "quit"}: a command let the program run on (continue, next, step, until,
              return; quit: q, which ends the cell)

Only the thread that runs cells stops; a breakpoint elsewhere (another thread, outside a cell) is
passed over with a warning, as no one could answer it. Ctrl-C (SIGINT) while stopped quits pdb: the
cell ends, and the pool goes on.
"""
import json
import linecache
import logging
import os
import pdb
import queue
import re
import sys
import threading
import time

from .probe import is_cell

log = logging.getLogger("ddplab")
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # (colours py-spy may print all the same)
OUT_LIMIT = 16_000  # characters of one reply sent (a huge printout is cut, and says so)
CONTEXT = 2  # lines of code shown around the stopped line


def where(frame):
    """What the notebook shows of a stopped frame: its file, line, function, and the code around it."""
    code = frame.f_code
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    first = max(1, frame.f_lineno - CONTEXT)
    around = [[n, lines[n - 1].rstrip("\n")] for n in range(first, min(len(lines), frame.f_lineno + CONTEXT) + 1)]
    return {"file": "" if is_cell(code.co_filename) else os.path.basename(code.co_filename),
            "line": frame.f_lineno, "function": code.co_name, "cell": is_cell(code.co_filename), "code": around}


class Console:
    """pdb's stdin and stdout: lines from the notebook's commands ((id, line), queued by the telemetry
    thread), output kept for the next report."""

    def __init__(self, stopped):
        self.lines = queue.Queue()
        self.out = []
        self.stopped = stopped  # () -> None: pdb waits for a command: say so
        self.waiting = False  # pdb waits for a command now
        self.command_id = 0  # the command being carried out (0: none)

    def write(self, text):
        self.out.append(text)

    def flush(self):
        pass

    def take(self):
        text, self.out = "".join(self.out), []
        return text if len(text) <= OUT_LIMIT else text[:OUT_LIMIT] + f"\n... ({len(text) - OUT_LIMIT} characters more)\n"

    def readline(self):
        self.stopped()
        self.waiting = True
        try:
            while True:
                try:
                    self.command_id, line = self.lines.get(timeout=0.5)
                    return line + "\n"
                except queue.Empty:
                    continue
        except KeyboardInterrupt:  # Ctrl-C in the notebook: leave pdb, end the cell
            self.write("--KeyboardInterrupt--\n")
            return "q\n"
        finally:
            self.waiting = False


# IPython runs a cell one top-level statement at a time, each its own code object, from these modules:
# stepping passes through them (and through ddplab's wrappers around torch's collectives) to the next
# statement, as if the cell were one piece of code
SKIPPED = ("IPython.*", "ipykernel.*", "ipyparallel.*", "traitlets.*", "zmq.*", "tornado.*", "asyncio.*",
           "codeop", "ast", "contextlib", "warnings", "ddplab.rank", "ddplab.rank.probe", "ddplab.rank.recorder",
           "ddplab.rank.breakpoints")


class RankPdb(pdb.Pdb):
    """pdb on this rank's cell thread, driven by the notebook (Console). It stops on lines only where a
    top-level statement of the cell begins or ends (not "--Call--" and "--Return--" at each of them)."""

    def __init__(self, report):
        self.console = Console(self._stopped)
        super().__init__(stdin=self.console, stdout=self.console, nosigint=True, skip=SKIPPED)
        self.use_rawinput, self.prompt = False, ""
        self.report = report  # (kind, payload dict) -> None: an event to the notebook, sent at once

    def print_stack_entry(self, frame_lineno, prompt_prefix=pdb.line_prefix):
        """A cell's frame as "> cell line 5" (not its temporary file's path), then its line."""
        frame, lineno = frame_lineno
        if not is_cell(frame.f_code.co_filename):
            return super().print_stack_entry(frame_lineno, prompt_prefix)
        name = frame.f_code.co_name
        line = linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals).strip()
        self.message(f"> cell line {lineno}" + ("" if name == "<module>" else f", in {name}()")
                     + (f"{prompt_prefix}{line}" if line else ""))

    def _statement(self, frame):
        """A top-level statement of a cell (its own code object, run by IPython)."""
        return frame.f_code.co_name == "<module>" and is_cell(frame.f_code.co_filename)

    def user_call(self, frame, argument_list):
        if not self._statement(frame):
            super().user_call(frame, argument_list)

    def user_return(self, frame, return_value):
        if self._statement(frame):
            self.set_step()  # on to the next statement's first line
        else:
            super().user_return(frame, return_value)

    def _stopped(self):
        console = self.console
        self.report("paused", {"id": console.command_id, "out": console.take(), **where(self.curframe)})
        console.command_id = 0

    def do_interact(self, arg):
        """interact: a Python console in the current frame (its globals and locals); exit() leaves it."""
        import code

        self.python = code.InteractiveConsole({**self.curframe.f_globals, **self.curframe_locals})
        self.message("*interactive* (a Python console in this frame, on this rank; exit() leaves it)")

    def _python(self, line):
        """One line for the console of interact, its output in the reply."""
        if line.strip() in ("exit()", "quit()", "exit", "quit"):
            self.python = None
            self.message("now exiting InteractiveConsole...")
            return
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.console
        try:
            more = self.python.push(line)
        finally:
            sys.stdout, sys.stderr = old
        if more:
            self.message("...")

    def onecmd(self, line):
        if getattr(self, "python", None) is not None:
            self._python(line)
            return False
        stop = super().onecmd(line)
        if stop:  # the program runs on (or quits): said now, not at the next stop
            console = self.console
            self.report("resumed", {"id": console.command_id, "out": console.take(),
                                    "quit": bool(getattr(self, "quitting", False))})
            console.command_id = 0
        return stop


class Breakpoints:
    """This rank's breakpoint hook, and its debugger (one at a time: the cell's thread)."""

    def __init__(self, rank):
        self.rank = rank
        self.debugger = None  # the RankPdb of this cell's last breakpoint, or None

    def install(self):
        sys.breakpointhook = self.hook

    def hook(self, *args, ranks=None, **kwargs):
        """breakpoint(): stop here, in pdb driven from the notebook (ranks: only these ranks stop)."""
        rank = self.rank
        if ranks is not None and rank.rank not in ranks:
            return
        if not (rank.formed and rank.in_cell and threading.get_ident() == rank.sender.main_thread):
            log.warning("rank %s: a breakpoint outside a %%%%ddp cell's thread is passed over (no one could "
                        "answer it)", rank.rank)
            return
        self.debugger = RankPdb(self._report)
        self.debugger.set_trace(sys._getframe(1))

    def command(self, line, command_id):
        """A "debug" command from the notebook (telemetry thread): queued for pdb if it waits for one;
        False if this rank is not stopped."""
        debugger = self.debugger
        if debugger is None or not debugger.console.waiting:
            return False
        debugger.console.lines.put((command_id, line))
        return True

    @property
    def paused(self):
        debugger = self.debugger
        return debugger is not None and debugger.console.waiting

    def _report(self, kind, payload):
        rank = self.rank
        with rank.lock:
            rank.events.append((rank.cell, time.perf_counter() - rank.cell_t0, kind, json.dumps(payload)))
        rank.sender.flush(force=True)

    def end_cell(self):
        """The cell ended: its debugger with it (tracing off: a `b` breakpoint set in it stops no later cell)."""
        if self.debugger is not None:
            self.debugger = None
            sys.settrace(None)


def py_spy():
    """The py-spy beside this Python (a runtime dependency of ddplab), or on PATH; None if neither."""
    import shutil

    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def own_stack(native=False, timeout=20.0):
    """This process's stacks as `py-spy dump` prints them (every thread; C/C++ frames too if native), or a
    line saying why not. py-spy runs as this process's child: where Yama allows ptrace to ancestors only
    (Ubuntu), this process names itself its ptracer first (PR_SET_PTRACER: itself and its descendants)."""
    import ctypes
    import subprocess

    spy = py_spy()
    if spy is None:
        return "py-spy is not installed beside this Python (pip install py-spy)"
    try:
        ctypes.CDLL(None, use_errno=True).prctl(0x59616D61, os.getpid(), 0, 0, 0)  # PR_SET_PTRACER (EINVAL: no Yama)
    except (OSError, AttributeError):
        log.debug("PR_SET_PTRACER failed", exc_info=True)
    try:
        done = subprocess.run([spy, "dump", "--pid", str(os.getpid()), *(["--native"] if native else [])],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "NO_COLOR": "1", "CLICOLOR": "0", "CLICOLOR_FORCE": "0"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"py-spy failed: {exc}"
    text = ANSI.sub("", done.stdout if done.returncode == 0 else f"py-spy failed: {(done.stderr or done.stdout).strip()}")
    return text
