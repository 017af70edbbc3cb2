"""A rank's timeline (engine side): spans of forward, backward, optimizer, data and comm on one clock,
recorded with no change to the learner's code, and the rank's memory.

    forward    the outermost nn.Module call (torch's global module hooks; nested modules are inside it),
               or a DDP model's forward, which times itself and takes those hooks out for the rest of the cell
    backward   torch.autograd.backward (loss.backward() calls it): DDP's bucket all-reduces run inside it
    optimizer  Optimizer.step (torch's global optimizer hooks)
    data       the next batch of a DataLoader (_BaseDataLoaderIter.__next__)
    comm       every collective: each DDP bucket's all-reduce, from the moment the reducer launches it (through
               a timed group, or the learner's own comm hook, wrapped: still run, and timed) to the moment it
               completes, with the bucket's index and bytes; every dist.* collective the cell calls
               (probe.py counts them), FSDP2's among them, with the unit (module) it serves; and
               DTensor's functional collectives (tensor parallelism), from the call to completion

A step is the stretch between two ddplab.log calls, or between optimizer steps when the cell does not
log. Times are time.monotonic() (one clock for every process of a machine; the notebook aligns other
hosts). Spans are appended to columns (about 50 bytes each) and go to the notebook with the rank's
telemetry batches (wire.py); nothing is sent per span. Recording costs a few microseconds per span,
plus what the hooks cost torch (see _ddp_patches); %ddp_timeline --off takes them all out (follow()).
"""
import functools
import inspect
import logging
import os
import threading
import time
import warnings
import weakref
from array import array

from ..shared import upstream
from ..shared.wire import TIMED_EVERY, TIMED_FIRST

log = logging.getLogger("ddplab")
# torch's internal names the per-bucket comm spans need (upstream.py): all there, or the buckets go untimed
QUEUE_CALLBACK = "torch.autograd:Variable._execution_engine.queue_callback"
TIMED_GROUP_NAMES = ("torch.distributed:Reducer._update_process_group", "torch.distributed:ProcessGroup._register_backend",
                     "torch.distributed:ProcessGroup._get_backend", "torch.distributed:ProcessGroup.BackendType.CUSTOM")

# FSDP2 names the unit (module) it gathers or reduces for in its record_function labels: read there
FSDP_LABELS = "torch.distributed.fsdp._fully_shard._fsdp_param_group:record_function"
# the functional collectives DTensor redistributes with (tensor parallelism): timed where it calls them
FUNCTIONAL = ("torch.distributed._functional_collectives:all_reduce",
              "torch.distributed._functional_collectives:all_gather_single",
              "torch.distributed._functional_collectives:reduce_scatter_single")
ASYNC_TENSOR = "torch.distributed._functional_collectives:AsyncCollectiveTensor"
RESOLVE_GROUP = "torch.distributed.distributed_c10d:_resolve_process_group"  # (a c10d group name -> its group)
FUNCTIONAL_SEQ = 1 << 30  # (their numbers, counted apart from the cell's dist.* calls: waits match across ranks)

PHASES = ("forward", "backward", "optimizer", "data", "comm")
FORWARD, BACKWARD, OPTIMIZER, DATA, COMM = range(len(PHASES))
OPS = ("", "all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce", "gather", "scatter", "barrier",
       "all_to_all", "send", "recv", "other")
ALL_REDUCE = OPS.index("all_reduce")
inside = threading.local()  # .op: the collective this thread is in (the collectives it calls are not the cell's)
FIELDS = (("cell", "i"), ("step", "i"), ("phase", "b"), ("op", "b"), ("bucket", "i"), ("bytes", "q"),
          ("start", "d"), ("end", "d"), ("group", "b"), ("seq", "i"))


def unit_of(label):
    """The module an FSDP2 label names: "FSDP::all_gather (layers.0)" or "... (layers.0) [pg=2]" ->
    "layers.0"; "FSDP::backward_prefetch for layers.1" -> "layers.1"; the root module's -> ""."""
    if label.endswith("]") and " [" in label:
        label = label[:label.rindex(" [")]
    if label.endswith(")") and " (" in label:
        return label[label.rindex(" (") + 2:-1]
    return label.rsplit(" for ", 1)[1] if " for " in label else ""


class _UnitLabel:
    """FSDP2's record_function, and the unit it names on this thread while it is open (inside.units)."""

    __slots__ = ("real", "unit")

    def __init__(self, real, unit):
        self.real, self.unit = real, unit

    def __enter__(self):
        units = getattr(inside, "units", None)
        if units is None:
            units = inside.units = []
        units.append(self.unit)
        return self.real.__enter__()

    def __exit__(self, *exc):
        inside.units.pop()
        return self.real.__exit__(*exc)


def op_code(name):
    """The code of a collective's name (all_gather_into_tensor, all_gather_single -> all_gather)."""
    for i, op in enumerate(OPS[1:-1], 1):
        if name == op or name.startswith(op + "_"):
            return i
    return len(OPS) - 1


def _bytes(value):
    if hasattr(value, "element_size"):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)) and value and hasattr(value[0], "element_size"):
        return sum(t.numel() * t.element_size() for t in value if hasattr(t, "element_size"))
    return 0


def tensor_bytes(args):
    """Bytes of the first tensor (or list of tensors) among args."""
    return next((n for n in map(_bytes, args) if n), 0)


def collective_bytes(values):
    """A collective's size: the largest tensor (or list of tensors) among what it was called with, i.e.
    the whole tensor it reduces, gathers or scatters (an all-gather's output, a reduce-scatter's input:
    nccl-tests' "size"), whatever the order of its arguments."""
    return max(map(_bytes, values), default=0)


class Spans:
    """Columns of spans (array.array: 8 bytes a float, 4 an int)."""

    def __init__(self):
        for name, code in FIELDS:
            setattr(self, name, array(code))

    def __len__(self):
        return len(self.seq)  # appended last: a span counts once all its columns have it

    def since(self, start, stop):
        return {name: getattr(self, name)[start:stop] for name, _ in FIELDS}


class Recorder:
    """One rank's spans (see the module docstring). rank: the Rank (its cell, its logged step)."""

    def __init__(self, rank):
        self.rank = rank
        self.enabled = True  # %ddp_timeline --off / --on (a command from the notebook)
        self.every = TIMED_EVERY  # a cell's steps after the first TIMED_FIRST: every `every`-th is timed
        self.spans = Spans()
        self.lock = threading.Lock()  # (a cell's other threads may add spans too)
        self.installed = False
        self._handles, self._patched = [], []  # torch's hook handles, and (owner, name, our function) patched in
        self._module_hooks, self._module_handles = None, []  # (pre, post) global module hooks; their handles
        self.opt_steps = 0  # optimizer steps in this cell
        self._depth = 0  # nesting of module calls in the main thread
        self._forward_start = 0.0
        self._main = threading.main_thread().ident
        # DDP models whose reducer has a TimedGroup, and that group (held here: torch calls a Python group's
        # methods only while its Python object lives; not in the model, which must still pickle); None: the
        # model's buckets go untimed (torch moved a name they need: upstream.py)
        self.timed_models = weakref.WeakKeyDictionary()
        self._flying = []  # DDP's bucket all-reduces in flight: (future, start, bytes, bucket, step)
        self._queued, self._queue_callback = False, None  # our final callback is queued in this backward; autograd's
        # (None where torch moved it: DDP's buckets go untimed, upstream.py)
        self.units, self._named = {}, set()  # FSDP units: name -> index (this process's); indices named this cell
        self.functional = 0  # DTensor's collectives this cell
        self.labelled = False  # FSDP2's labels are read (label_units), or there is no FSDP2 to read yet
        # process groups: c10d group name -> index (this process's), (label, ranks) per index, indices named
        # this cell; a DeviceMesh dimension's name per c10d group name (ddplab.mesh, DTensor's calls)
        self.groups, self.group_info, self._named_groups, self.dim_names = {}, {}, set(), {}
        # tensor-parallel layers: the modules being called (main thread), the last one to return, and per
        # root module the names of its modules that hold DTensor parameters; the layer whose backward runs
        self._modules, self._left, self._layers, self._names_of, self._grad_module = [], None, {}, {}, None
        self._layer_hooks = {}  # id(layer) -> the handle of its forward hook that names its backward

    def new_cell(self):
        self.opt_steps = self._depth = self.functional = 0
        self._named, self._named_groups = set(), set()
        self._modules, self._left, self._grad_module = [], None, None

    def step(self):
        """The step a span belongs to: counted by ddplab.log if the cell logs, else by optimizer steps."""
        logged = self.rank.step
        return logged + 1 if logged >= 0 else self.opt_steps

    def sampled(self, step):
        """Whether this step of a cell is timed: each of the cell's first TIMED_FIRST, then every
        `every`-th (DDP's own logger samples its iterations alike: the first 10, then every 100th)."""
        return step < TIMED_FIRST or step % self.every == 0

    def timing(self):
        """Whether the timeline is on and times the step running now (a collective's span, FSDP2's label)."""
        return self.enabled and self.sampled(self.step())

    def add(self, phase, start, end, op=0, bucket=-1, nbytes=0, seq=-1, step=None, group=-1, cell=None):
        step = self.step() if step is None else step
        if not self.sampled(step):
            return  # (a step not timed: none of its spans, so every step recorded is whole)
        s = self.spans
        with self.lock:
            s.cell.append(self.rank.cell if cell is None else cell)
            s.step.append(step)
            s.phase.append(phase)
            s.op.append(op)
            s.bucket.append(bucket)
            s.bytes.append(nbytes)
            s.start.append(start)
            s.end.append(end)
            s.group.append(group)
            s.seq.append(seq)  # last: now the span counts

    def add_when_done(self, work, start, op, bucket, nbytes, seq, group):
        """An async collective (async_op=True): its span ends when its Work completes (a callback on
        the thread that completes it), in the cell and step it was called in."""
        cell, step = self.rank.cell, self.step()

        def done(_future):
            self.add(COMM, start, time.monotonic(), op, bucket, nbytes, seq, step, group, cell)

        try:
            work.get_future().add_done_callback(done)
        except (AttributeError, RuntimeError):  # a Work with no future (another backend): untimed
            log.debug("an async collective's Work has no future: not timed", exc_info=True)

    def later(self, work, start, nbytes, bucket, group=-1):
        """Time one of DDP's bucket all-reduces (a Work or a Future), on this thread only: at the first
        bucket of a backward pass, a callback of ours joins autograd's final callbacks, ahead of DDP's
        (which DDP queues once its last bucket is launched) and waits for each bucket in turn, as DDP
        would next: each ends when it completes. A bucket done before then ends when this thread sees
        it done (the next bucket's launch). No other thread runs for it: a Python callback on the
        future runs on gloo's thread and must take the GIL: that cost about 2% of the training's speed
        (4 ranks on 2 cores, 2 buckets a step)."""
        if self._queue_callback is None:
            return
        if not self._queued:
            try:
                self._queue_callback(self._end_buckets)
            except RuntimeError:  # not in a backward pass (DDP's join() shadowing others' buckets): untimed
                return
            self._queued = True
        self.poll()
        future = work.get_future() if hasattr(work, "get_future") else work
        self._flying.append((future, start, nbytes, bucket, self.step(), group))

    def poll(self):
        """End the bucket all-reduces that are done."""
        if self._flying:
            done, flying = [], []
            for item in self._flying:
                (done if item[0].done() else flying).append(item)
            if done:
                self._flying, now = flying, time.monotonic()
                for item in done:
                    self._end(item, now)

    def _end(self, item, end):
        _, start, nbytes, bucket, step, group = item
        self.add(COMM, start, end, ALL_REDUCE, bucket, nbytes, step, step, group)

    def _end_buckets(self):
        """Autograd's final callback (before DDP's): wait for each bucket in turn, and end its span."""
        self._queued = False
        flying, self._flying = self._flying, []
        for item in flying:
            try:
                item[0].wait()  # (without the GIL, as DDP's own wait)
            except Exception:  # noqa: BLE001 - it failed (a peer gone, a cut): DDP raises it next
                log.debug("a bucket's all-reduce failed", exc_info=True)
            self._end(item, time.monotonic())

    def settle(self):
        """At a cell's end: the bucket all-reduces done by now get their spans; any still in flight
        (a failed step) get none."""
        self.poll()
        if self._flying:
            log.debug("%d bucket all-reduces still in flight at the cell's end: not timed", len(self._flying))
        self._flying, self._queued = [], False

    # ------------------------------------------------------------------ torch's hooks
    def unit(self):
        """The code of the module the collective being called serves: the FSDP unit its label names, or
        the tensor-parallel layer being called (in forward) or whose backward runs (-2 - its index among
        this rank's modules, named to the notebook by a "unit" event the first time), or -1 for none."""
        units = getattr(inside, "units", None)
        name = units[-1] if units else self.layer()
        if name is None:
            return -1
        index = self.units.get(name)
        if index is None:
            index = self.units[name] = len(self.units)
        if index not in self._named:  # (named again in each cell: the notebook keeps a cell's names with it)
            self._named.add(index)
            with self.rank.lock:
                self.rank.events.append((self.rank.cell, time.perf_counter() - self.rank.cell_t0, "unit",
                                         f"{index}|{name}"))
        return -2 - index

    def layer(self):
        """The tensor-parallel layer (a module holding DTensor parameters) a collective on the main thread
        serves: in forward, the module that just returned (a Rowwise layer all-reduces in its output hook,
        which runs after the global ones) or the innermost being called; in backward, the last layer whose
        output's gradient arrived (autograd runs a CPU backward on the calling thread)."""
        if threading.get_ident() != self._main:
            return None
        if not self._modules:
            return self._grad_module
        names = self._layers
        if self._left is not None and id(self._left) in names:
            return names[id(self._left)]
        for module in reversed(self._modules):
            if id(module) in names:
                return names[id(module)]
        return None

    def layers_of(self, root):
        """{id(module): name} of root's modules that hold DTensor parameters, kept until a parameter is
        registered anywhere (parallelize_module replaces them: then looked up again)."""
        import sys

        found = self._names_of.get(id(root))
        if found is None:
            DTensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
            if DTensor is None:
                return {}  # (no DTensor anywhere: looked up again once there is)
            found = {}
            for name, m in root.named_modules():
                if any(isinstance(p, DTensor) for p in m.parameters(recurse=False)):
                    found[id(m)] = name
                    self._name_backward(m, name)
            self._names_of[id(root)] = found
        return found

    def _name_backward(self, layer, name):
        """A forward hook on `layer`, after its own (parallelize_module's output hook redistributes its
        output): the gradient of what it returns names the layer whose backward runs from then on."""
        old = self._layer_hooks.pop(id(layer), None)
        if old is not None:
            old.remove()  # (again at the end: hooks the layer got since run before it)
        recorder = self

        def named(module, args, output):
            if recorder.enabled and getattr(output, "requires_grad", False) and threading.get_ident() == recorder._main:
                output.register_hook(lambda grad: setattr(recorder, "_grad_module", name))

        self._layer_hooks[id(layer)] = layer.register_forward_hook(named, always_call=True)

    def group(self, group):
        """The code of the process group a collective runs on (named to the notebook by a "group" event,
        "index|label|ranks", the first time in a cell), or -1 where it cannot be told. group: what the
        collective was called with: None (the default group), a ProcessGroup, (DeviceMesh, dim), a
        DeviceMesh or a c10d group name."""
        try:
            pg = self._process_group(group)
            name = pg.group_name if pg is not None else str(group)
        except (AttributeError, RuntimeError, ValueError, IndexError, KeyError, TypeError):
            log.debug("a collective's group could not be told", exc_info=True)
            return -1
        index = self.groups.get(name)
        if index is None:
            index = self.groups[name] = len(self.groups)
            self.group_info[index] = self._describe(pg, name)
        if index not in self._named_groups:
            self._named_groups.add(index)
            label, ranks = self.group_info[index]
            with self.rank.lock:
                self.rank.events.append((self.rank.cell, time.perf_counter() - self.rank.cell_t0, "group",
                                         f"{index}|{label}|{','.join(map(str, ranks))}"))
        return index if index < 128 else -1  # (one byte a span)

    def _process_group(self, group):
        import torch.distributed as dist

        if group is None:
            return dist.group.WORLD
        if isinstance(group, tuple) and len(group) == 2:  # (DeviceMesh, dim): DTensor's collectives
            mesh, dim = group
            pg = mesh.get_group(dim)
            if mesh.mesh_dim_names:
                self.dim_names.setdefault(pg.group_name, mesh.mesh_dim_names[dim])
            return pg
        if hasattr(group, "get_group"):  # a 1D DeviceMesh
            return group.get_group()
        if isinstance(group, str):
            resolve = upstream.get(RESOLVE_GROUP)
            return resolve(group) if resolve is not None else None
        return group

    def _describe(self, pg, name):
        """(label, ranks) of a group: its mesh dimension's name, "world", or "ranks 0,2"."""
        import torch.distributed as dist

        ranks = tuple(dist.get_process_group_ranks(pg)) if pg is not None else ()
        if name in self.dim_names:
            return self.dim_names[name], ranks
        if ranks == tuple(range(dist.get_world_size())):
            return "world", ranks
        return ("ranks " + ",".join(map(str, ranks))) if ranks else "a group", ranks

    def label_units(self):
        """Once FSDP2 is imported: its labels say which unit each collective serves (unit())."""
        import sys

        module = sys.modules.get(FSDP_LABELS.partition(":")[0])
        if module is None or not self.installed or getattr(module.record_function, "_ddplab", False):
            self.labelled = module is not None and self.installed
            return
        self.labelled = True
        real = upstream.get(FSDP_LABELS)
        if real is None:
            return

        recorder, units = self, {}  # (unit_of per label: FSDP2 has a few, entered ~20 times a step)

        def labelled(label, *args, **kwargs):
            if not recorder.timing():
                return real(label, *args, **kwargs)  # (an untimed step: no collective of it is recorded)
            unit = units.get(label)
            if unit is None:
                unit = units[label] = unit_of(str(label))
            return _UnitLabel(real(label, *args, **kwargs), unit)

        labelled._ddplab, labelled.__wrapped__ = True, real
        module.record_function = labelled
        self._patched.append((module, "record_function", labelled))

    def follow(self):
        """At a cell's start, on the cell's thread: hook torch if the timeline is on, unhook it if off.
        Off costs nothing then: torch's fast paths come back (a module call with no global hook; DDP with
        no comm hook divides the gradients while it copies them into its buckets, one pass less)."""
        if self.enabled and not self.installed:
            self.install()
        elif not self.enabled and self.installed:
            self.uninstall()
        elif self.installed and not self._module_handles:
            self._hook_modules()  # (a DDP forward took them out for the rest of the cell before)
        if self.installed and not self.labelled:
            self.label_units()

    def _hook_modules(self):
        import torch.nn.modules.module as modules

        pre, post = self._module_hooks
        self._module_handles = [modules.register_module_forward_pre_hook(pre),
                                modules.register_module_forward_hook(post, always_call=True)]

    def unhook_modules(self):
        """For the rest of the cell, no global module hooks: a DDP model times its own forward, and
        the modules inside it take torch's fast path again (a module call with a global hook costs
        several microseconds more)."""
        for handle in self._module_handles:
            handle.remove()
        self._module_handles, self._depth = [], 0

    def install(self):
        """Hook torch: global module and optimizer hooks, autograd.backward, DataLoader iterators, and
        DistributedDataParallel's comm hook (undone by uninstall)."""
        if self.installed:
            return
        self.installed = True
        import torch
        import torch.optim.optimizer as optimizers

        recorder, clock = self, time.monotonic
        # Inside code torch.compile traces, every hook returns at once: dynamo folds the test to a
        # constant, so the compiled graph has no trace of them and no graph break (the compiled
        # module's own call, which runs eagerly, still times the forward).
        compiling = torch.compiler.is_compiling

        def pre_forward(module, args):
            if compiling():
                return
            if recorder.enabled and threading.get_ident() == recorder._main:
                if recorder._depth == 0:
                    recorder._forward_start = clock()
                    recorder._layers = recorder.layers_of(module)
                recorder._depth += 1
                recorder._modules.append(module)
                recorder._left = None

        def post_forward(module, args, output):
            if compiling():
                return
            if recorder._depth and threading.get_ident() == recorder._main:
                recorder._depth -= 1
                if recorder._modules:
                    recorder._modules.pop()
                recorder._left = module
                if recorder._depth == 0:
                    recorder.add(FORWARD, recorder._forward_start, clock())
                    recorder._left = None

        # torch.compile warns at every compiled module's call that global hooks fire once more for
        # it: ours count nesting, so that is harmless, and the warning is not the user's to act on.
        warnings.filterwarnings("ignore", r"Using `torch\.compile\(module\)` when there are global hooks", UserWarning)
        backward = torch.autograd.backward

        def timed_backward(*args, **kwargs):
            if not recorder.enabled:
                return backward(*args, **kwargs)
            start, recorder._grad_module = clock(), None
            try:
                return backward(*args, **kwargs)
            finally:
                recorder._grad_module = None
                recorder.add(BACKWARD, start, clock())
                recorder._queued = False  # (its final callbacks have run, or it failed)
                recorder.poll()

        started = {}

        def pre_step(optimizer, args, kwargs):
            if not compiling():
                started[id(optimizer)] = clock()

        def post_step(optimizer, args, kwargs):
            if compiling():
                return
            start, step = started.pop(id(optimizer), None), recorder.step()  # (the step it ends)
            recorder.opt_steps += 1
            if start is not None and recorder.enabled:
                recorder.add(OPTIMIZER, start, clock(), step=step)
            recorder.rank.sender.measure()  # memory, between steps, on the cell's thread only

        iterators = upstream.get("torch.utils.data.dataloader:_BaseDataLoaderIter")  # (None: no data spans)
        next_batch = iterators.__next__ if iterators is not None else None

        def timed_next(iterator):
            if not recorder.enabled:
                return next_batch(iterator)
            start = clock()
            try:
                return next_batch(iterator)
            finally:
                recorder.add(DATA, start, clock())

        self._queue_callback = upstream.get(QUEUE_CALLBACK)
        self._module_hooks = (pre_forward, post_forward)
        self._hook_modules()
        import torch.nn.modules.module as modules

        def parameter_registered(module, name, param):
            recorder._names_of.clear()  # (parallelize_module made some of them DTensors: look again)

        self._handles = [optimizers.register_optimizer_step_pre_hook(pre_step),
                         optimizers.register_optimizer_step_post_hook(post_step),
                         modules.register_module_parameter_registration_hook(parameter_registered)]
        self._patched = [(torch.autograd, "backward", timed_backward),
                         *([(iterators, "__next__", timed_next)] if iterators is not None else []), *self._ddp_patches(),
                         *self._functional_patches()]
        for owner, name, patch in self._patched:
            patch.__wrapped__ = getattr(owner, name)
            setattr(owner, name, patch)

    def uninstall(self):
        """Take every hook of install() out again: each DDP reducer gets its own group back (a learner's
        comm hook stays wrapped, as DDP has no way to remove a hook: the wrapper runs it untimed while off)."""
        if not self.installed:
            return
        self.unhook_modules()
        self.untime_models()
        for handle in [*self._handles, *self._layer_hooks.values()]:
            handle.remove()
        self._layer_hooks, self._names_of, self._layers = {}, {}, {}
        for owner, name, patch in self._patched:
            if getattr(owner, name) is patch:  # (not if someone patched it over ours since)
                setattr(owner, name, patch.__wrapped__)
        self.installed, self._handles, self._patched, self.labelled = False, [], [], False

    def _functional_patches(self):
        """DTensor's collectives (a tensor-parallel layer's all-reduce, a redistribution's gather) are
        functional ones: each returns at once with a tensor that waits when it is used. Timed here
        from the call to its completion (waited for at once: the layer uses it next)."""
        import torch

        module = upstream.get(FUNCTIONAL[0].partition(":")[0])
        waits = upstream.get(ASYNC_TENSOR)
        if module is None or waits is None:
            return []
        recorder, clock, compiling = self, time.monotonic, torch.compiler.is_compiling

        def timed_call(real, op):
            at = list(inspect.signature(real).parameters).index("group")  # (where each takes its group)

            def timed(*args, **kwargs):
                if not recorder.timing() or compiling() or getattr(inside, "op", None):
                    return real(*args, **kwargs)
                start = clock()
                out = real(*args, **kwargs)
                if isinstance(out, waits):
                    out = out.wait()
                recorder.functional += 1
                recorder.add(COMM, start, clock(), op, recorder.unit(), collective_bytes([*args, *kwargs.values(), out]),
                             FUNCTIONAL_SEQ + recorder.functional,
                             group=recorder.group(kwargs["group"] if "group" in kwargs else args[at] if len(args) > at else None))
                return out
            return timed

        patches = []
        for path in FUNCTIONAL:
            real = upstream.get(path)
            if real is not None:
                name = path.partition(":")[2]
                patches.append((module, name, timed_call(real, op_code(name))))
        return patches

    def _ddp_patches(self):
        """DDP's buckets are timed where the reducer all-reduces them: at a DDP model's first forward its
        reducer is given a TimedGroup around the model's own group (taken back at uninstall), so DDP
        keeps its fastest path (with no comm hook it divides the gradients while it copies them into
        its buckets; any comm hook costs it one more pass over them). A learner's own comm hook is
        wrapped instead (still run, and timed), and the collectives it calls are DDP's, not the cell's."""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        recorder, clock, compiling = self, time.monotonic, torch.compiler.is_compiling
        register, forward = DDP.register_comm_hook, DDP.forward
        # each name checked (and said, if it moved) before any is used
        timed_groups = all([upstream.has(path) for path in TIMED_GROUP_NAMES]) and self._queue_callback is not None

        class TimedGroup(dist.ProcessGroup):
            """The group a DDP reducer all-reduces its buckets through: the model's own, each call
            timed from the moment the bucket is ready to the moment its all-reduce completes. Buckets
            are launched in index order, counted from the model's forward."""

            def __init__(self, real):
                super().__init__(real.rank(), real.size())
                self.real, self.launched, self.used = real, 0, True  # used: the reducer holds this group
                try:  # collectives not overridden here go to the real group's own backend
                    self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM,
                                           real._get_backend(torch.device("cpu")))
                except RuntimeError:
                    log.debug("DDP's group has no CPU backend to fall back on", exc_info=True)

            def getBackendName(self):
                return "ddplab-timed"  # ("gloo" would make torch look this group's backend up by its name)

            def allreduce(self, tensors, opts):
                start, work = clock(), self.real.allreduce(tensors, opts)
                if recorder.enabled:
                    tensor = tensors[0]
                    if tensor.dtype == torch.int32:  # the map of parameters used (find_unused_parameters)
                        index = -1
                    else:
                        index, self.launched = self.launched, self.launched + 1
                    recorder.later(work, start, tensor.numel() * tensor.element_size(), index, recorder.group(self.real))
                return work

            def broadcast(self, tensors, opts):  # the buckets' order, agreed once after the first step
                return self.real.broadcast(tensors, opts)

        def timed_hook(ddp):
            def hook(state, bucket):
                user_state, user_hook = ddp._ddplab_hook
                if not recorder.timing():
                    return user_hook(user_state, bucket)
                start, buffer = clock(), bucket.buffer()
                inside.op, inside.bytes = "ddp", 0  # the collectives a hook calls are DDP's, not the cell's
                try:
                    future = user_hook(user_state, bucket)
                finally:
                    inside.op = None
                # the bytes its collectives sent (a compression hook sends fewer than the bucket holds)
                recorder.later(future, start, inside.bytes or buffer.numel() * buffer.element_size(), bucket.index(),
                               recorder.group(ddp.process_group))
                return future

            return hook

        def register_comm_hook(ddp, state, hook):
            first = not hasattr(ddp, "_ddplab_hook")
            ddp._ddplab_hook = (state, hook)
            if first:
                register(ddp, None, timed_hook(ddp))
            # (a hook registered after ours: it replaces the one our wrapper runs)

        def timed_group(ddp):
            """A TimedGroup around `ddp`'s own group, put in its reducer; None where torch moved what it needs."""
            if not (timed_groups and upstream.has("torch.nn.parallel:DistributedDataParallel.reducer", ddp)
                    and upstream.has("torch.nn.parallel:DistributedDataParallel.process_group", ddp)):
                return None
            group = TimedGroup(ddp.process_group or dist.group.WORLD)
            ddp.reducer._update_process_group(group)
            return group

        def timed_forward(ddp, *args, **kwargs):
            if ddp not in recorder.timed_models:
                recorder.timed_models[ddp] = timed_group(ddp)
            group = recorder.timed_models[ddp]
            if group is not None and not compiling():
                group.launched = 0
                # an untimed step's buckets go straight to the model's own group (between steps no bucket
                # is in flight: DDP waited for them all at the end of backward)
                timed = recorder.timing()
                if timed != group.used:
                    ddp.reducer._update_process_group(group if timed else group.real)
                    group.used = timed
            if not recorder.enabled or compiling() or threading.get_ident() != recorder._main:
                return forward(ddp, *args, **kwargs)
            # DDP times its own forward (from the outermost module's start, if a global hook saw one)
            start = recorder._forward_start if recorder._depth else clock()
            if recorder._module_handles:
                recorder.unhook_modules()
            try:
                return forward(ddp, *args, **kwargs)
            finally:
                recorder.add(FORWARD, start, clock())

        return [(DDP, "register_comm_hook", register_comm_hook), (DDP, "forward", timed_forward)]

    def untime_models(self):
        """Give each DDP model's reducer its own group back (at uninstall, between cells: no bucket in flight)."""
        for ddp, group in list(self.timed_models.items()):
            if group is not None:
                ddp.reducer._update_process_group(group.real)
        self.timed_models.clear()


def memory(namespace):
    """What this rank holds: resident memory, and bytes of parameters, gradients, optimizer state and DDP
    buckets of the objects in `namespace` (each tensor counted once), exact from the objects themselves.
    A ZeroRedundancyOptimizer counts the state of this rank's share; DDP with gradient_as_bucket_view
    has no buckets apart from its gradients. A DTensor (FSDP2's sharded parameters, their gradients and
    optimizer state; a tensor-parallel layer's) counts its local shard, what this rank holds of it; FSDP2's
    gathered parameters count while they are gathered (they are then the module's parameters)."""
    import sys

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    # (a DTensor exists only where its module was imported: not imported here, mid-training, for DDP alone)
    DTensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", ())

    seen, found = set(), {"rss": _rss(), "params": 0, "grads": 0, "optimizer": 0, "buckets": 0}

    def count(kind, tensor):
        if not isinstance(tensor, torch.Tensor):
            return
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor  # (a new object each call: keyed by memory)
        if local.is_meta or local.layout != torch.strided:
            return  # (no memory here; a sparse tensor's is not its numel)
        key = (local.untyped_storage().data_ptr(), local.storage_offset(), local.numel(), local.dtype)
        if local.numel() and key not in seen:
            seen.add(key)
            found[kind] += local.numel() * local.element_size()

    values = [value for value in namespace.values() if _holds_tensors(type(value))]  # (most are modules, functions)
    for value in values:
        if isinstance(value, DDP) and not value.gradient_as_bucket_view:
            # (with gradient_as_bucket_view the gradients are views into the buckets: counted once, as grads)
            logging_data = upstream.get("torch.nn.parallel:DistributedDataParallel._get_ddp_logging_data")
            try:
                sizes = str(logging_data(value).get("bucket_sizes", "")) if logging_data else ""  # "1022040,26214400"
                found["buckets"] += sum(int(s) for s in sizes.split(",") if s.strip().isdigit())  # (bytes)
            except (RuntimeError, AttributeError):  # not built yet
                pass
        if isinstance(value, torch.nn.Module):
            for p in value.parameters():
                count("params", p)
                count("grads", p.grad)
    for value in values:
        if isinstance(value, torch.optim.Optimizer):
            # a ZeroRedundancyOptimizer keeps its state in the optimizer of this rank's share (.optim)
            inner = getattr(value, "optim", None)
            value = inner if isinstance(inner, torch.optim.Optimizer) else value
            for state in value.state.values():
                for tensor in state.values():
                    count("optimizer", tensor)
    return found


@functools.lru_cache(maxsize=512)
def _holds_tensors(cls: type) -> bool:
    """Whether memory() looks into an object of this class: a module or an optimizer."""
    import torch

    return issubclass(cls, (torch.nn.Module, torch.optim.Optimizer))


def _rss() -> int:
    """This process's resident memory (bytes), from /proc (psutil's way, without making a Process each time)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # (not Linux)
        import psutil

        return psutil.Process().memory_info().rss
