"""Checkpoints for fault tolerance: atomic save on rank 0, load and broadcast to every rank.

    ddplab.checkpoint.save("ckpt.pt", model, opt, step)     # every rank calls it
    step = ddplab.checkpoint.load("ckpt.pt", model, opt)    # every rank ends with the same state

save writes to a temporary file next to the target (created exclusively, with a random name and
mode 0600: no symlink is followed, nothing someone else made is reused), fsyncs it and renames it
over the target, so a process killed while saving leaves the previous checkpoint whole. load reads tensors and
plain values only (torch.load's weights_only): a file someone else put at that path cannot run
code in the ranks. Works without a process group too (one process is rank 0).
"""
import contextlib
import glob
import os
import stat
import tempfile

import torch
import torch.distributed as dist


def _rank():
    return dist.get_rank() if dist.is_initialized() else 0


def _unwrap(model):
    return getattr(model, "module", model)  # a DDP-wrapped model saves its inner module


def save(path, model, optimizer=None, step=0, **extra):
    """Rank 0 writes {model, optimizer, step, extra} atomically; all ranks wait for it. extra:
    tensors and plain values (numbers, strings, lists, dicts), which is what load() reads."""
    path = os.fspath(path)
    if _rank() == 0:
        state = {"model": _unwrap(model).state_dict(), "step": int(step), "extra": extra,
                 "optimizer": optimizer.state_dict() if optimizer is not None else None}
        directory, name = os.path.split(os.path.abspath(path))
        prefix = f".{name}.tmp-"
        for stale in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*")):
            st = os.lstat(stale)  # left by a save that was killed: only our own regular files
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                os.remove(stale)
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)  # O_EXCL | O_NOFOLLOW, 0600, a random name
        try:
            with open(fd, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic: readers see the old file or the new one, never half of one
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            raise
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)  # make the rename itself durable
        finally:
            os.close(fd)
    if dist.is_initialized():
        dist.barrier()


def load(path, model, optimizer=None):
    """Rank 0 reads the checkpoint and broadcasts it; every rank loads it. Returns the step.

    Extra values saved with it are returned by load_extra()."""
    state = _read_and_broadcast(path)
    _unwrap(model).load_state_dict(state["model"])
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def load_extra(path):
    """The extra keyword values given to save()."""
    return _read_and_broadcast(path)["extra"]


def _read_and_broadcast(path):
    """Rank 0 reads; every rank gets the state, or raises what rank 0 met (none is left waiting
    in the broadcast for a rank that failed)."""
    box = [None]
    if _rank() == 0:
        try:
            box[0] = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - every rank raises what rank 0 met
            if type(exc).__name__ == "UnpicklingError":  # objects whose loading would run code: never loaded
                box[0] = ValueError(f"{path} holds more than tensors and plain values, so ddplab does not load it "
                                    "(a file someone else wrote could run code): save extras as numbers, strings, "
                                    "lists, dicts or tensors, or read a file you trust with "
                                    "torch.load(path, weights_only=False)")
            elif isinstance(exc, OSError):  # missing, a folder, not allowed
                box[0] = exc
            else:  # (as text: not every exception survives the broadcast's pickling)
                box[0] = RuntimeError(f"could not read checkpoint {path}: {type(exc).__name__}: {exc}")
    if dist.is_initialized():
        dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], Exception):
        raise box[0]
    return box[0]
