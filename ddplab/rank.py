"""The part of ddplab that runs inside every engine (rank).

Keep it light: engines import only this module of ddplab, never widget or
client code.
"""
import datetime
import os
import socket


def _user_ns():
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else globals()


def form_group(rank, world_size, rendezvous, timeout, threads):
    """Join the gloo process group and preload the names every cell can use.

    rendezvous is "file:///path" (a FileStore: opens no network port) or
    "tcp://host:port" (rank 0 hosts a TCPStore there; needed across hosts).
    """
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    if dist.is_initialized():
        dist.destroy_process_group()
    kind, _, where = rendezvous.partition("://")
    wait = datetime.timedelta(seconds=timeout)
    if kind == "file":
        store = dist.FileStore(where, world_size)
    elif kind == "tcp":
        host, _, port = where.rpartition(":")
        store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=wait)
    else:
        raise ValueError(f"unknown rendezvous {rendezvous!r}: use file:///path or tcp://host:port")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=wait)

    import ddplab.rank as this

    _user_ns().update(rank=rank, world_size=world_size, torch=torch, dist=dist, nn=torch.nn, ddplab=this)
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "threads": torch.get_num_threads(),
        "backend": dist.get_backend(),
    }
