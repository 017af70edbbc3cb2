"""Checkpoints for fault tolerance: atomic save on rank 0, load and broadcast to every rank.

    ddplab.checkpoint.save("ckpt.pt", model, opt, step)     # every rank calls it
    step = ddplab.checkpoint.load("ckpt.pt", model, opt)    # every rank ends with the same state

save writes to a temporary file next to the target (created exclusively, with a random name and
mode 0600: no symlink is followed, nothing someone else made is reused), fsyncs it and renames it
over the target, so a process killed while saving leaves the previous checkpoint whole. load reads tensors and
plain values only (torch.load's weights_only): a file someone else put at that path cannot run
code in the ranks. What rank 0 read reaches the others as data, never as a pickle: the state's
shape as JSON (dicts, lists, numbers, strings) and every tensor's bytes in one uint8 tensor, each
sent with dist.broadcast (broadcast_object_list would unpickle whatever arrives). Works without a
process group too (one process is rank 0).
"""
import contextlib
import glob
import json
import os
import stat
import tempfile
from typing import Any

import torch
import torch.distributed as dist

Path = str | os.PathLike[str]
State = dict[str, Any]  # {"model", "optimizer", "step", "extra"}, as save() wrote it


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)  # a DDP-wrapped model saves its inner module


def save(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, step: int = 0,
         **extra: Any) -> None:
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


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Rank 0 reads the checkpoint and broadcasts it; every rank loads it. Returns the step.

    Extra values saved with it are returned by load_extra()."""
    state = _read_and_broadcast(path)
    _unwrap(model).load_state_dict(state["model"])
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def load_extra(path: Path) -> dict[str, Any]:
    """The extra keyword values given to save()."""
    return _read_and_broadcast(path)["extra"]


ERRORS: dict[str, type[Exception]] = {  # what rank 0 may report, re-raised as such on every rank
    e.__name__: e for e in (OSError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                            ValueError, RuntimeError)}


def _read_and_broadcast(path: Path) -> State:
    """Rank 0 reads; every rank gets the state, or raises what rank 0 met (none is left waiting
    in the broadcast for a rank that failed)."""
    state: Any = None  # what torch.load read: a State, from a file save() wrote
    error: Exception | None = None
    if _rank() == 0:
        try:
            state = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - every rank raises what rank 0 met
            if type(exc).__name__ == "UnpicklingError":  # objects whose loading would run code: never loaded
                error = ValueError(f"{path} holds more than tensors and plain values, so ddplab does not load it "
                                   "(a file someone else wrote could run code): save extras as numbers, strings, "
                                   "lists, dicts or tensors, or read a file you trust with "
                                   "torch.load(path, weights_only=False)")
            elif isinstance(exc, OSError):  # missing, a folder, not allowed
                error = exc
            else:
                error = RuntimeError(f"could not read checkpoint {path}: {type(exc).__name__}: {exc}")
    if dist.is_initialized():
        state, error = _broadcast(state, error)
    if error is not None:
        raise error
    return state


def _broadcast(state: State | None, error: Exception | None) -> tuple[State | None, Exception | None]:
    """Rank 0's (state, error) on every rank, as data: a JSON header, then the tensors' bytes."""
    if _rank() == 0:
        tensors: list[torch.Tensor] = []
        header: dict[str, Any]
        try:
            header = {"state": _plain(state, tensors)} if error is None else {}
        except TypeError as exc:  # (weights_only lets through a few types JSON cannot say)
            header, tensors = {}, []
            error = RuntimeError(f"could not send the checkpoint to the other ranks: {exc}")
        if error is not None:
            header = {"error": [type(error).__name__ if type(error).__name__ in ERRORS else "RuntimeError", str(error)]}
        header["tensors"] = [[str(t.dtype).removeprefix("torch."), list(t.shape)] for t in tensors]
        text = torch.frombuffer(bytearray(json.dumps(header).encode()), dtype=torch.uint8)
        payload = torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors]) if tensors \
            else torch.empty(0, dtype=torch.uint8)
        sizes = torch.tensor([text.numel(), payload.numel()], dtype=torch.int64)
    else:
        sizes = torch.empty(2, dtype=torch.int64)
    dist.broadcast(sizes, src=0)
    if _rank() != 0:
        text, payload = (torch.empty(int(n), dtype=torch.uint8) for n in sizes)
    dist.broadcast(text, src=0)
    dist.broadcast(payload, src=0)
    if _rank() == 0:
        return state, error
    header = json.loads(bytes(text.numpy()))
    if "error" in header:
        kind, message = header["error"]
        return None, ERRORS.get(kind, RuntimeError)(message)
    tensors, offset = [], 0
    for dtype, shape in header["tensors"]:
        dtype = getattr(torch, dtype)
        n = torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
        tensors.append(payload[offset:offset + n].clone().view(dtype).reshape(shape))  # (a copy: aligned for its dtype)
        offset += n
    return _restore(header["state"], tensors), None


def _plain(value: Any, tensors: list[torch.Tensor]) -> dict[str, Any]:
    """`value` as JSON-able data; its tensors appended to `tensors` (and named by their place)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if isinstance(value, dict):
        return {"dict": [[_plain(k, tensors), _plain(v, tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_plain(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, (torch.dtype, torch.Size)):
        return {"dtype": str(value).removeprefix("torch.")} if isinstance(value, torch.dtype) else \
            {"size": list(value)}
    raise TypeError(f"{type(value).__name__} is not a tensor or a plain value")


def _restore(data: dict[str, Any], tensors: list[torch.Tensor]) -> Any:
    """The value _plain described."""
    kind, value = next(iter(data.items()))
    if kind == "tensor":
        return tensors[value]
    if kind == "dict":
        return {_restore(k, tensors): _restore(v, tensors) for k, v in value}
    if kind in ("list", "tuple"):
        items = [_restore(v, tensors) for v in value]
        return items if kind == "list" else tuple(items)
    if kind == "dtype":
        return getattr(torch, value)
    if kind == "size":
        return torch.Size(value)
    return value
