"""Small training workloads that run inside ranks (the demo, the quickstart, benchmarks).

Imports only torch: safe in engines and in plain torchrun scripts.
"""
import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ddplab.rank as ddplab


def synthetic_classification(n: int = 8192, features: int = 784, classes: int = 10, seed: int = 0) -> TensorDataset:
    """A fixed labelled dataset: the same on every rank (the sampler splits it)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def mlp(features: int = 784, hidden: int = 512, classes: int = 10, seed: int = 0) -> nn.Sequential:
    """The MLP 784-512-512-10 used by the demo and the benchmarks."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def param_checksum(model: nn.Module) -> float:
    """One float summarising the parameters: equal on every rank iff DDP kept them in sync."""
    with torch.no_grad():
        return float(sum((p.double() * (i + 1)).sum() for i, p in enumerate(model.parameters())))


def train_ddp(steps: int = 200, batch: int = 64, lr: float = 0.05, momentum: float = 0.9, seed: int = 0,
              log: bool = True) -> dict[str, Any]:
    """Train the MLP with DistributedDataParallel + DistributedSampler for `steps` steps.

    Every step is logged with ddplab.log (the dashboard draws it; log=False: not logged, to
    measure what logging costs); returns a summary dict (final loss, samples/s, checksum).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    data = synthetic_classification(seed=seed)
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        data, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=batch, sampler=sampler, drop_last=True)
    model = DDP(mlp(seed=seed))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()
    step, epoch, loss = 0, 0, torch.tensor(0.0)
    tic = time.perf_counter()
    while step < steps:
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            step += 1
            if log:
                ddplab.log(loss=loss, samples=len(x), step=step)
            if step == steps:
                break
        epoch += 1
    seconds = time.perf_counter() - tic
    return {"rank": rank, "steps": steps, "loss": loss.item(), "seconds": seconds,
            "samples_per_s": steps * batch / seconds, "checksum": param_checksum(model.module)}


def _train_replicated(model: nn.Module, steps: int, batch: int, lr: float, seed: int, log: bool,
                      shard_data: bool) -> dict[str, Any]:
    """The loop of train_fsdp and train_tp: Adam on `model`, the synthetic data in batches (each rank
    its own part of every batch if shard_data, else the same batch on every rank, as tensor
    parallelism needs); a summary as train_ddp's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x_all, y_all = synthetic_classification(seed=seed).tensors
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    loss, n = torch.tensor(0.0), len(x_all)
    tic = time.perf_counter()
    for step in range(1, steps + 1):
        lo = ((step - 1) * batch * (world if shard_data else 1)) % (n - batch * world)
        if shard_data:
            lo += rank * batch
        x, y = x_all[lo:lo + batch], y_all[lo:lo + batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if log:
            ddplab.log(loss=loss, samples=len(x), step=step)
    seconds = time.perf_counter() - tic
    return {"rank": rank, "steps": steps, "loss": float(loss.detach()), "seconds": seconds,
            "samples_per_s": steps * batch / seconds}


def train_fsdp(steps: int = 200, batch: int = 64, lr: float = 1e-3, seed: int = 0, log: bool = True) -> dict[str, Any]:
    """Train the MLP 784-512-512-10 sharded with FSDP2 (fully_shard per Linear, then the whole) over
    every rank, Adam, each rank its own batch; a summary as train_ddp's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = mlp(seed=seed)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train_replicated(model, steps, batch, lr, seed, log, shard_data=True)


def train_tp(steps: int = 200, batch: int = 64, lr: float = 1e-3, seed: int = 0, log: bool = True,
             hidden: int = 1024) -> dict[str, Any]:
    """Train an MLP 784-hidden-512-hidden-10 with tensor parallelism over every rank (column- then
    row-split pairs, parallelize_module), Adam, the same batch on every rank; a summary as train_ddp's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 512), nn.ReLU(),
                          nn.Linear(512, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel(),
                                     "4": ColwiseParallel(), "6": RowwiseParallel()})
    return _train_replicated(model, steps, batch, lr, seed, log, shard_data=False)


def train_resumable(steps: int, path: str | os.PathLike[str], every: int = 5, resume: bool = False, seed: int = 0,
                    batch: int = 16) -> tuple[DDP, int]:
    """Deterministic DDP training that saves a checkpoint every `every` steps and can resume
    from the last one: a run killed mid-way and resumed ends with the same parameters, bit
    for bit, as a run that was never stopped. Returns (model, the step it started from)."""
    from ddplab.rank import checkpoint

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    model = DDP(nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # DDP buckets the gradients in parameter order for its first step, then re-orders them by when
    # they are ready; with more than 2 ranks that changes the order in which the all-reduce adds
    # them (and the last bits of the sums). One backward pass first: every real step, resumed or
    # not, then uses the same buckets.
    model(torch.zeros(1, 20)).sum().backward()
    opt.zero_grad()
    start = checkpoint.load(path, model, opt) if resume else 0
    for step in range(start, steps):
        # each (step, rank) has its own batch, so the data does not depend on where a run started
        g = torch.Generator().manual_seed(seed * 1_000_003 + step * world + rank)
        x = torch.randn(batch, 20, generator=g)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ddplab.log(loss=loss, samples=batch, step=step + 1)
        if (step + 1) % every == 0:
            checkpoint.save(path, model, opt, step + 1)
    return model, start
