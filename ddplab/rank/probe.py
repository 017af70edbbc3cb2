"""Looking inside a rank (engine side; each Rank holds one Probe): where its main thread is, hints
for the mistakes learners make, and a post-mortem debugger driven from the notebook.

- where(): the rank's current line of the cell and, inside torch.distributed, which collective,
  on which group, with which tensor, for how long. Read from the main thread's Python stack by
  the telemetry thread (rank.py) while a cell runs longer than WHERE_AFTER (half a second): nothing per step.
- hints: torch.distributed.init_process_group / destroy_process_group and DistributedSampler are
  wrapped so that calling init again (ddplab formed the group), destroying the group, or
  iterating a sampler again without set_epoch leave a hint the notebook shows once.
- debugger: pdb on the rank's last exception (sys.last_traceback), one command at a time.
"""
import io
import sys
import time

from .recorder import COMM, collective_bytes, inside, op_code, tensor_bytes

COLLECTIVES = {
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_single", "gather", "scatter", "barrier", "all_to_all", "all_to_all_single",
    "send", "recv",
    "monitored_barrier", "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
    "new_group", "init_process_group", "destroy_process_group",
}


def is_cell(filename):
    """A cell's code: IPython compiles each cell into a file of its own (ipykernel_<pid>/<hash>.py)."""
    return "ipykernel_" in filename or filename.startswith("<ipython-input-") or filename == "<cell>"


# ------------------------------------------------------------------ collectives this cell called
WATCHED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce",
           "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "gather", "scatter", "barrier",
           "all_to_all", "all_to_all_single",
           "broadcast_object_list", "all_gather_object")


def _count(probe, op, fn):
    """Count a collective on its way in, in `probe`, and time it in the rank's timeline (a few
    microseconds; DDP's bucket all-reduces are timed where its reducer launches them, recorder.py)."""
    import functools
    import inspect

    names = list(inspect.signature(fn).parameters)  # (torch's logging wrappers hide them from __code__)

    @functools.wraps(fn)
    def collective(*args, **kwargs):
        inside, calls = probe.inside, probe.calls
        if getattr(inside, "op", None):  # called by another collective (a deprecated name, *_object): counted once
            if inside.op == "ddp":  # a DDP comm hook's collective: its bytes go to the bucket's span
                inside.bytes += tensor_bytes(args)
            return fn(*args, **kwargs)
        calls["count"] += 1
        frame, line = sys._getframe(1), None
        while frame is not None and line is None:
            if is_cell(frame.f_code.co_filename):
                line = frame.f_lineno
            frame = frame.f_back
        arguments = dict(zip(names, args), **kwargs)
        calls["last"] = {"line": line, "op": op, **_describe_arguments(arguments)}
        inside.op = op
        recorder, start, work = probe.recorder, time.monotonic(), None
        try:
            work = fn(*args, **kwargs)
            return work
        finally:
            inside.op = None
            if recorder is not None and recorder.timing():  # (an untimed step: no span to build)
                if not recorder.labelled:  # (FSDP2 imported in this cell: its labels read from now on)
                    recorder.label_units()
                span = (op_code(op), recorder.unit(), collective_bytes(arguments.values()), calls["count"],
                        recorder.group(arguments.get("group")))
                if not arguments.get("async_op"):
                    recorder.add(COMM, start, time.monotonic(), *span[:4], group=span[4])
                elif work is not None:  # (ends when its Work completes)
                    recorder.add_when_done(work, start, *span)

    collective.__wrapped__ = fn
    return collective


def _describe(frame):
    """The group and tensor a collective was called with (from its frame's arguments)."""
    return _describe_arguments(frame.f_locals)


def _describe_arguments(args):
    group = args.get("group")
    tensor = next((args[k] for k in ("tensor", "input_tensor", "inp", "output") if hasattr(args.get(k), "shape")), None)
    if tensor is None:
        for k in ("tensor_list", "output_tensor_list", "input_tensor_list", "object_list"):
            seq = args.get(k)
            if isinstance(seq, (list, tuple)) and seq and hasattr(seq[0], "shape"):
                tensor = seq[0]
                break
    return {"group": _group_name(group), "shape": list(tensor.shape) if tensor is not None else None,
            "dtype": str(tensor.dtype).replace("torch.", "") if tensor is not None else None}


def _group_name(group):
    if group is None:
        return "default"
    try:
        import torch.distributed as dist

        ranks = dist.get_process_group_ranks(group)
        if ranks == list(range(dist.get_world_size())):
            return "default"  # (torch's collectives replace group=None by the default group before waiting)
        return "ranks " + ",".join(map(str, ranks))
    except (RuntimeError, ValueError):  # a group of another world
        return "a group"


# ------------------------------------------------------------------ the post-mortem debugger
class RemotePdb:
    """pdb on the rank's last exception, one command at a time: onecmd() returns what pdb
    printed. 'interact' switches to a Python console in the current frame until exit()."""

    def __init__(self):
        import pdb

        tb = getattr(sys, "last_traceback", None)
        while tb is not None and not is_cell(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next  # start at the cell: IPython's own frames are not the learner's
        if tb is None:
            raise LookupError("this rank has no exception to debug: the last cell ran without error")
        self.out = io.StringIO()
        self.pdb = pdb.Pdb(stdin=io.StringIO(), stdout=self.out, nosigint=True)
        self.pdb.use_rawinput = False
        self.pdb.reset()
        self.pdb.setup(None, tb)
        self.console = None
        self.error = f"{sys.last_type.__name__}: {sys.last_value}"

    def onecmd(self, line):
        self.out.seek(0)
        self.out.truncate()
        if self.console is not None:
            return self._console(line)
        if line.strip() == "interact":
            import code

            frame = self.pdb.curframe
            self.console = code.InteractiveConsole({**frame.f_globals, **self.pdb.curframe_locals})
            return "*interactive* (a Python console in this frame; exit() or quit() to leave)\n"
        self.pdb.onecmd(line)
        return self.out.getvalue()

    def _console(self, line):
        if line.strip() in ("exit()", "quit()", "exit", "quit"):
            self.console = None
            return "now exiting InteractiveConsole...\n"
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.out
        try:
            more = self.console.push(line)
        finally:
            sys.stdout, sys.stderr = old
        return self.out.getvalue() + ("... " if more else "")

    def header(self):
        self.out.seek(0)
        self.out.truncate()
        self.pdb.print_stack_entry(self.pdb.stack[self.pdb.curindex])
        return f"{self.error}\n{self.out.getvalue()}"


class Probe:
    """One rank's probes: the collectives its cell entered, where its main thread waits, the hints
    it leaves for the notebook, and its debugger."""

    def __init__(self):
        self.calls = {"count": 0, "last": None}  # how many collectives the cell entered, and the last one
        self.inside = inside
        self.recorder = None  # the rank's Recorder: explicit collectives are timed in its timeline
        self.entered = {}  # (the collective's frame, op, count) -> (time first seen, its description)
        self.hints = []  # (time, "hint", key): what the next batch carries to the notebook
        self.patched = False
        self.debugger = None

    def new_cell(self):
        self.calls["count"], self.calls["last"] = 0, None

    def cell_calls(self):
        """What the cell's collectives were: {"calls": n, "last": where-like record of the last one}."""
        return {"calls": self.calls["count"], "last": self.calls["last"]}

    def where(self, thread_id):
        """Where thread `thread_id` is: {"line", "op", "group", "shape", "dtype", "since", "calls"}."""
        frame = sys._current_frames().get(thread_id)
        found, line = None, None
        while frame is not None:
            code = frame.f_code
            if found is None and code.co_name in COLLECTIVES and "torch/distributed" in code.co_filename:
                found = frame
            if is_cell(code.co_filename):
                line = frame.f_lineno
                break
            frame = frame.f_back
        count = self.calls["count"]
        if found is None:
            self.entered.clear()
            return {"line": line, "op": None, "group": None, "shape": None, "dtype": None, "since": None,
                    "calls": count}
        # CPython reuses a frame's memory: with the count of collectives entered, a loop of calls
        # at one line is seen as many short waits, not one long one
        key = (id(found), found.f_code.co_name, count)
        first = self.entered.get(key)
        if first is None:
            self.entered.clear()
            first = self.entered[key] = (time.monotonic(), _describe(found))
        since, described = time.monotonic() - first[0], first[1]
        return {"line": line, "op": found.f_code.co_name, "since": round(since, 2), "calls": count, **described}

    # ------------------------------------------------------------------ hints
    def hint(self, key):
        self.hints.append((time.perf_counter(), "hint", key))

    def take_hints(self):
        out = list(self.hints)
        self.hints.clear()
        return out

    def patch(self, formed_by_ddplab):
        """Wrap what learners call by mistake, and count collectives (once per process).
        formed_by_ddplab() is True while the group in this process is ddplab's."""
        if self.patched:
            return
        self.patched = True
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        from torch.utils.data import DistributedSampler

        init, destroy, hint = dist.init_process_group, dist.destroy_process_group, self.hint

        def init_process_group(backend=None, *args, **kwargs):
            if dist.is_initialized() and formed_by_ddplab():
                world, rank = kwargs.get("world_size", -1), kwargs.get("rank", -1)
                if backend in (None, "gloo", "cpu:gloo") and world in (-1, dist.get_world_size()) \
                        and rank in (-1, dist.get_rank()):
                    hint("init_again")  # asks for what exists: a no-op, with a note in the notebook
                    return None
                hint("init_other")
                raise RuntimeError(f"ddplab already formed this rank's process group (gloo, rank {dist.get_rank()} "
                                   f"of {dist.get_world_size()}): init_process_group({backend!r}, ...) asks for "
                                   "another; use dist.new_group(...) for a group of some ranks, or %ddp_stop then "
                                   "%ddp_start")
            return init(backend, *args, **kwargs)

        def destroy_process_group(group=None):
            if group is None and formed_by_ddplab():
                hint("destroyed")
            return destroy(group)

        init_process_group.__wrapped__ = init
        destroy_process_group.__wrapped__ = destroy
        for module in (dist, c10d):
            module.init_process_group, module.destroy_process_group = init_process_group, destroy_process_group
        for op in WATCHED:
            counted = _count(self, op, getattr(dist, op))
            for module in (dist, c10d):
                setattr(module, op, counted)

        original_iter = DistributedSampler.__iter__

        def __iter__(sampler):  # (the epoch of its last pass kept on the sampler: an id() outlives its object)
            if getattr(sampler, "shuffle", False):
                if getattr(sampler, "_ddplab_epoch", None) == sampler.epoch and not getattr(sampler, "_ddplab_told", False):
                    sampler._ddplab_told = True
                    hint("set_epoch")
                sampler._ddplab_epoch = sampler.epoch
            return original_iter(sampler)

        DistributedSampler.__iter__ = __iter__

    # ------------------------------------------------------------------ the debugger
    def debug_start(self):
        """Open the debugger on this rank's last exception; returns the exception and where it was."""
        self.debugger = RemotePdb()
        return self.debugger.header()

    def debug_command(self, line):
        if self.debugger is None:
            raise LookupError("no debugger is open on this rank: %ddp_debug RANK opens one")
        return self.debugger.onecmd(line)

    def debug_end(self):
        self.debugger = None

    @staticmethod
    def checksums(ns, names=None):
        """{name: [(parameter, float64 checksum)]} of the nn.Modules in namespace `ns` (or of
        `names`); a DDP model is checked through .module."""
        import torch

        found = {}
        for name in names or sorted(ns):
            value = ns.get(name)
            module = getattr(value, "module", value)
            if isinstance(module, torch.nn.Module) and not name.startswith("_"):
                with torch.no_grad():
                    found[name] = [(p_name, float(p.double().sum()) + float((p.double() ** 2).sum()))
                                   for p_name, p in module.named_parameters()]
            elif names:
                found[name] = None
        return found
