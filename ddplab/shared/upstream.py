"""Every name of another package's internals that ddplab relies on, in one place.

ddplab times DDP's buckets inside torch's reducer, guards gloo where torch builds it, forks ipyparallel's
processes, and so on, through names those packages do not promise to keep (a leading underscore, or an
attribute their documentation does not mention). Each is listed in NAMES with the package it belongs to
and what of ddplab needs it. tests/unit/test_upstream.py checks every one against the installed packages
and names the one that moved; pyproject pins torch and ipyparallel to the releases it has passed with.

At run time a call site asks for the name here:

    queue = upstream.get("torch.autograd:Variable._execution_engine.queue_callback")   # None if it moved
    reducer = upstream.get("torch.nn.parallel:DistributedDataParallel.reducer", ddp)   # an instance's

and a name that moved turns its feature off with one line on the "ddplab" logger, once per process:

    ddplab turned off the timeline's spans of DDP's bucket all-reduces: torch 2.14.0 has no
    torch.distributed.Reducer._update_process_group

The zygote checks the names of what it imported and the notebook says them (zygote.py); a rank reports
those it found moved when it joins (Pool.track). No import here but the standard library's: the rank side
and the notebook's both use this module.
"""
import importlib
import importlib.util
import logging
import sys
import threading
from typing import Any, NamedTuple

log = logging.getLogger("ddplab")


class Name(NamedTuple):
    owner: str  # the distribution it belongs to (its version is said with it)
    path: str  # "module:Object.attribute" (or "module"): what ddplab reads, calls or patches; the key call sites use
    feature: str  # what of ddplab needs it, in a user's words
    instance: bool = False  # an attribute of the object's instances: checked as "self.<attribute>" in its module's source
    uses: str = ""  # text the source of `path` must contain: how the package uses it, or calls ddplab back

    @property
    def shown(self) -> str:
        return self.path.replace(":", ".")


# ------------------------------------------------------------------ what needs what
BUCKETS = "the timeline's spans of DDP's bucket all-reduces"
BUCKET_BYTES = "DDP's bucket bytes in each rank's memory figures"
DATA = "the timeline's data spans (a DataLoader's next batch)"
UNITS = "the FSDP unit (module) each collective on the timeline serves"
FUNCTIONAL = "the timeline's spans of DTensor's collectives (tensor parallelism)"
GROUPS = "the group of a collective called with a group's name, on the timeline"
GUARD = ("the check that each gloo connection is your own account's (it matters where the ranks share the "
         "machine's network: %ddp_status says whether they do)")
PRELOAD = "the imports an engine needs done once, in the zygote, before the first cell"
CLIENT = "dropping malformed messages before they stop the notebook's ipyparallel client"
REPLIES = "watching each rank's reply and output on its own (every cell needs it)"
ENDED = "ipyparallel's own record that a forked controller or engine ended"
HEARTS = "a new engine counted at its first heartbeat (a faster start of a local pool)"
BEATS = "a local pool's controller pinging its engines every second once they are in (not 10 times a second)"
IPC = "the local pool's controller on socket files (ipc://; a local pool cannot start without it)"
EXIT_CODE = "the exit code of a local-spawn engine that died"
TRACEBACK = "ddplab's errors in a few lines instead of a long traceback"
TITLE = "the lessons' checks of a figure's title"
FIRST = "the one-line error when TensorFlow or JAX ran before ddplab.tf_config() / ddplab.jax_distributed()"

NAMES: dict[str, Name] = {n.path: n for n in (
    # torch: the timeline (recorder.py)
    Name("torch", "torch.autograd:Variable._execution_engine.queue_callback", BUCKETS),
    Name("torch", "torch.distributed:Reducer._update_process_group", BUCKETS),
    Name("torch", "torch.distributed:ProcessGroup._register_backend", BUCKETS),
    Name("torch", "torch.distributed:ProcessGroup._get_backend", BUCKETS),
    Name("torch", "torch.distributed:ProcessGroup.BackendType.CUSTOM", BUCKETS),
    Name("torch", "torch.nn.parallel:DistributedDataParallel.reducer", BUCKETS, instance=True),
    Name("torch", "torch.nn.parallel:DistributedDataParallel.process_group", BUCKETS, instance=True),
    Name("torch", "torch.nn.parallel:DistributedDataParallel._get_ddp_logging_data", BUCKET_BYTES),
    Name("torch", "torch.utils.data.dataloader:_BaseDataLoaderIter", DATA),
    # torch: FSDP2 names the unit it gathers or reduces for in its record_function labels (recorder.label_units)
    Name("torch", "torch.distributed.fsdp._fully_shard._fsdp_param_group:record_function", UNITS),
    # torch: DTensor redistributes through these (recorder._functional_patches)
    Name("torch", "torch.distributed._functional_collectives", FUNCTIONAL),
    Name("torch", "torch.distributed._functional_collectives:all_reduce", FUNCTIONAL),
    Name("torch", "torch.distributed._functional_collectives:all_gather_single", FUNCTIONAL),
    Name("torch", "torch.distributed._functional_collectives:reduce_scatter_single", FUNCTIONAL),
    # torch: a c10d group name (what a functional collective may be given) -> its group (recorder.group)
    Name("torch", "torch.distributed.distributed_c10d:_resolve_process_group", GROUPS),
    Name("torch", "torch.distributed._functional_collectives:AsyncCollectiveTensor", FUNCTIONAL),
    # torch: the gloo guard (guard.py) replaces the class distributed_c10d builds every gloo backend with
    Name("torch", "torch.distributed.distributed_c10d:ProcessGroupGloo", GUARD),
    # (built by the module's own global name: in 2.13 inside _new_process_group_helper, in 2.14 in
    # _create_gloo_process_group, the gloo creator it registers)
    Name("torch", "torch.distributed.distributed_c10d", GUARD, uses="ProcessGroupGloo("),
    # torch, IPython, ipykernel: what the zygote and each rank import ahead of the first cell (zygote.py, rank.py)
    Name("torch", "torch._dynamo", PRELOAD),
    Name("ipykernel", "ipykernel.debugger", PRELOAD),
    Name("ipython", "IPython.core.completerlib", PRELOAD),
    Name("ipython", "IPython.core.oinspect", PRELOAD),
    Name("ipython", "IPython.extensions.storemagic", PRELOAD),
    Name("ipython", "IPython.core.logger", PRELOAD),
    # ipyparallel and pyzmq: the notebook's client (pool.guard_client)
    Name("ipyparallel", "ipyparallel.client.client:Client._query_stream", CLIENT, instance=True),
    Name("ipyparallel", "ipyparallel.client.client:Client._control_stream", CLIENT, instance=True),
    Name("ipyparallel", "ipyparallel.client.client:Client._mux_stream", CLIENT, instance=True),
    Name("ipyparallel", "ipyparallel.client.client:Client._task_stream", CLIENT, instance=True),
    Name("ipyparallel", "ipyparallel.client.client:Client._iopub_stream", CLIENT, instance=True),
    Name("ipyparallel", "ipyparallel.client.client:Client._notification_stream", CLIENT, instance=True),
    Name("ipyparallel", "ipyparallel.client.client:Client._broadcast_stream", CLIENT, instance=True),
    Name("pyzmq", "zmq.eventloop.zmqstream:ZMQStream._recv_callback", CLIENT, instance=True),
    # ipyparallel: each rank's reply (monitor.Replies)
    Name("ipyparallel", "ipyparallel.client.asyncresult:AsyncResult._children", REPLIES, instance=True),
    Name("ipyparallel", "ipyparallel.client.asyncresult:AsyncResult._metadata", REPLIES, instance=True),
    # ipyparallel: processes forked from the zygote (launcher.py; in the controller, zygote.py)
    Name("ipyparallel", "ipyparallel.cluster.launcher:LocalProcessLauncher._start_waiting", ENDED),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.handle_pong", HEARTS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.handle_new_hearts", HEARTS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.hearts", HEARTS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.responses", HEARTS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.start", BEATS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.beat", BEATS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.pong_stream", BEATS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.period", BEATS),
    Name("ipyparallel", "ipyparallel.controller.heartmonitor:HeartMonitor.on_probation", BEATS),
    Name("ipyparallel", "ipyparallel.controller.app:IPController.construct_url", IPC),
    Name("ipyparallel", "ipyparallel.controller.app:IPController.engine_info", IPC),
    Name("ipyparallel", "ipyparallel.controller.app:IPController.client_info", IPC),
    Name("ipyparallel", "ipyparallel.controller.app:IPController.internal_info", IPC, instance=True),
    # psutil: a local-spawn engine's exit code, which ipyparallel's launcher thread reaps (localpool.py)
    Name("psutil", "psutil:Process._exitcode", EXIT_CODE, instance=True),
    # IPython calls DDPLabError._render_traceback_ (errors.py, magics.py)
    Name("ipython", "IPython.core.interactiveshell:InteractiveShell.showtraceback", TRACEBACK,
         uses="_render_traceback_"),
    # TensorFlow and JAX, where the frameworks extra is installed: did they run already? (frameworks.py)
    Name("tensorflow-cpu", "tensorflow.python.eager.context:Context._initialized", FIRST, instance=True),
    Name("jax", "jax._src.xla_bridge:backends_are_initialized", FIRST),
    # matplotlib: the lessons' pictures (lessons/draw.py; matplotlib >= 3.8 has Figure.get_suptitle())
    Name("matplotlib", "matplotlib.figure:Figure._suptitle", TITLE, instance=True),
)}

_MISSING = object()
_off: set[str] = set()  # the paths turned off in this process (each said once)
_off_lock = threading.Lock()


# ------------------------------------------------------------------ at run time
def get(path: str, obj: object = None, default: Any = None) -> Any:
    """The object `path` names (a registered name), or, given `obj`, that attribute of `obj`; where it
    is gone, `default`, and its feature is turned off (said once: feature_off)."""
    name = NAMES[path]  # (a KeyError: the name is not listed here, and must be)
    try:
        if obj is None:
            return resolve(name.path)
        return getattr(obj, _attribute(name.path))
    except (ImportError, AttributeError):
        feature_off(path)
        return default


def has(path: str, obj: object = None) -> bool:
    """Whether `path` (or that attribute of `obj`) is there; if not, its feature is turned off (said once)."""
    return get(path, obj, _MISSING) is not _MISSING


def feature_off(path: str, quiet: bool = False) -> None:
    """Turn off what needs `path`: one warning on the "ddplab" logger the first time in this process
    (quiet: recorded, not said: the notebook says it, zygote.py)."""
    name = NAMES[path]
    with _off_lock:
        if path in _off:
            return
        _off.add(path)
    if not quiet:
        log.warning("ddplab turned off %s: %s %s has no %s", name.feature, name.owner, version(name.owner), name.shown)


def turned_off() -> list[str]:
    """The paths turned off in this process so far, sorted."""
    with _off_lock:
        return sorted(_off)


# ------------------------------------------------------------------ checking
def check(imported_only: bool = False, deep: bool = True) -> dict[str, str]:
    """{path: why} for each listed name that moved in the installed packages. imported_only: only those
    whose module is imported already (nothing imported here); deep: also the `uses` checks, which read a
    function's source (a few tens of milliseconds each)."""
    moved = {}
    for path, name in NAMES.items():
        if imported_only and name.path.partition(":")[0] not in sys.modules:
            continue
        why = problem(name, deep)
        if why:
            moved[path] = why
    return moved


def problem(name: Name, deep: bool = True) -> str | None:
    """Why `name` is not as ddplab needs it in the installed package, or None."""
    import inspect

    try:
        if name.instance:  # set on each instance (in __init__, or later): its module's source must still set it
            owner, _, attribute = name.path.rpartition(".")
            module = importlib.import_module(resolve(owner).__module__)
            with open(inspect.getsourcefile(module), encoding="utf-8") as f:  # type: ignore[arg-type]  # (None: TypeError)
                if f"self.{attribute} =" not in f.read():
                    return f"{name.shown} (no self.{attribute} = in {module.__name__})"
        elif deep and name.uses:
            if name.uses not in inspect.getsource(resolve(name.path)):
                return f"{name.shown} (it no longer has {name.uses!r} in it)"
        elif ":" not in name.path:  # a module: found, not run (torch._dynamo takes a second to import)
            if importlib.util.find_spec(name.path) is None:
                return f"{name.shown} (no such module)"
        else:
            resolve(name.path)
    except (ImportError, AttributeError, OSError, TypeError, ValueError) as exc:
        return f"{name.shown} ({type(exc).__name__}: {exc})"
    return None


def resolve(path: str) -> Any:
    """The object "module:Object.attribute" (or "module") names, importing the module if it must."""
    module, _, attributes = path.partition(":")
    found = importlib.import_module(module)
    for attribute in filter(None, attributes.split(".")):
        found = getattr(found, attribute)
    return found


def version(owner: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(owner)
    except PackageNotFoundError:
        return "(version unknown)"


def _attribute(path: str) -> str:
    return path.rpartition(":")[2].rpartition(".")[2]
