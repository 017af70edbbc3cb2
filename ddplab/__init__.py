"""ddplab: learn, teach and try PyTorch distributed data-parallel training in a notebook.

    %load_ext ddplab
    %ddp_start 4
    %%ddp
    ...

The folders say which process code runs in: kernel/ (the notebook's side: Lab, the magics, the wait
loop), rank/ (inside every engine; `ddplab` in rank code is ddplab.rank), processes/ (pools, the
zygote, launchers, the reaper), shared/ (pure data and the wire format), beside dashboard/ and
lessons/. Engines import ddplab.rank only, so the names below load lazily.
"""
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for type checkers (nothing is imported at run time)
    from IPython.core.interactiveshell import InteractiveShell

    from .kernel.cell import RunResult as RunResult
    from .kernel.lab import Lab as Lab
    from .kernel.magics import DDPMagics
    from .rank import checkpoint as checkpoint
    from .rank import history as history
    from .rank import jax_distributed as jax_distributed
    from .rank import knob as knob
    from .rank import log as log
    from .rank import mesh as mesh
    from .rank import phase as phase
    from .rank import tf_config as tf_config
    from .shared.config import DDPLab as DDPLab
    from .shared.config import PoolConfig as PoolConfig
    from .shared.errors import BadRequest as BadRequest
    from .shared.errors import CellTimeout as CellTimeout
    from .shared.errors import DDPLabError as DDPLabError
    from .shared.errors import Interrupted as Interrupted
    from .shared.errors import NameMissing as NameMissing
    from .shared.errors import PoolAlreadyRunning as PoolAlreadyRunning
    from .shared.errors import PoolNotRunning as PoolNotRunning
    from .shared.errors import RankFailed as RankFailed
    from .shared.errors import RankLost as RankLost
    from .shared.errors import StartFailed as StartFailed

from .shared.version import VERSION as __version__  # noqa: E402 - (the one place it is written)

logging.getLogger("ddplab").addHandler(logging.NullHandler())  # the application decides what is shown

_LAZY = {
    "Lab": "ddplab.kernel.lab",
    "RunResult": "ddplab.kernel.cell",
    "PoolConfig": "ddplab.shared.config",
    "DDPLab": "ddplab.shared.config",
    "DDPLabError": "ddplab.shared.errors",
    "BadRequest": "ddplab.shared.errors",
    "PoolNotRunning": "ddplab.shared.errors",
    "PoolAlreadyRunning": "ddplab.shared.errors",
    "StartFailed": "ddplab.shared.errors",
    "NameMissing": "ddplab.shared.errors",
    "RankFailed": "ddplab.shared.errors",
    "RankLost": "ddplab.shared.errors",
    "CellTimeout": "ddplab.shared.errors",
    "Interrupted": "ddplab.shared.errors",
}
__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension", *_LAZY]


# what rank code calls: `import ddplab` in a %%ddp cell keeps them working
_RANK = ("log", "phase", "history", "knob", "mesh", "tf_config", "jax_distributed")


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _RANK:
        return getattr(importlib.import_module("ddplab.rank"), name)
    if name == "checkpoint":
        return importlib.import_module("ddplab.rank.checkpoint")
    if name == "classroom":
        return importlib.import_module("ddplab.classroom")
    raise AttributeError(f"module 'ddplab' has no attribute {name!r}")


_magics: "dict[int, DDPMagics]" = {}  # shell -> its DDPMagics, so loading twice keeps the running pool


def load_ipython_extension(shell: "InteractiveShell") -> None:
    """%load_ext ddplab: register the %ddp_* magics (loading again is harmless)."""
    if id(shell) in _magics:
        return
    from .processes.zygote import zygote
    from .shared.config import show_log, tunables

    settings = tunables()
    settings.update_config(shell.config)  # c.DDPLab.* in ipython_config.py: before the zygote, which follows them
    zygote()  # then at once: the fork server imports torch in the background while the rest loads and the user reads
    from .kernel.inspect_magics import DDPInspectMagics
    from .kernel.magics import DDPMagics
    from .lessons.class_magics import DDPClassMagics

    show_log(settings.log_level)  # ddplab's own decisions, at DDPLab.log_level and above
    if settings not in shell.configurables:
        shell.configurables.append(settings)  # %config DDPLab.frame = 0.5
    magics = DDPMagics(shell)
    inspect = DDPInspectMagics(shell)
    inspect.pool = magics  # they look into the pool it makes
    shell.register_magics(magics, inspect, DDPClassMagics(shell))
    _magics[id(shell)] = magics
    from .shared.system import give_back_memory, memory_limit

    if memory_limit() is not None:  # Binder's 2 GiB, a hub's 1: what a cell freed goes back to the session
        shell.events.register("post_run_cell", give_back_memory)


def unload_ipython_extension(shell: "InteractiveShell") -> None:
    """%unload_ext ddplab: stop the pool and forget the magics' state."""
    magics = _magics.pop(id(shell), None)
    from .shared.system import give_back_memory

    if give_back_memory in shell.events.callbacks["post_run_cell"]:
        shell.events.unregister("post_run_cell", give_back_memory)
    if magics is not None and magics.lab is not None:
        magics.lab.stop()
        magics.lab = None
    from .kernel.lab import _running_labs
    from .processes.zygote import stop_zygote

    if not _running_labs:  # another Lab of this process may still fork from it
        stop_zygote()
