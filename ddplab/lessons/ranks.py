"""Lesson helpers that run inside ranks: `from ddplab.lessons.ranks import ...` in a %%ddp cell.

Imports torch only (no notebook or widget code), so plain torchrun scripts can use it too.
"""
import contextlib
import statistics
import time

import torch
import torch.distributed as dist


def flat_params(model):
    """All parameters of a model as one detached vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def param_spread(model, group=None):
    """The largest difference between any parameter on any rank and the same one on rank 0.

    0.0 means every rank holds identical parameters (what DDP promises). Every rank gets the
    same answer; all ranks must call it.
    """
    mine = flat_params(model)
    first = mine.clone()
    dist.broadcast(first, src=0, group=group)
    gap = first.sub_(mine).abs_().max().reshape(1)  # in place: two copies of the model at most, not four
    dist.all_reduce(gap, op=dist.ReduceOp.MAX, group=group)
    return gap.item()


class CommCounter:
    """A DDP communication hook that counts what DDP sends, then all-reduces as usual.

        counter = CommCounter()                      # or CommCounter("bf16") to compress
        model.register_comm_hook(None, counter.hook)
        ... train ...
        counter.calls, counter.bytes                 # all-reduce calls (one per bucket), bytes sent

    compress: None (plain float32 all-reduce), "fp16" or "bf16" (torch's compression hooks:
    the gradient bucket is cast to 16 bits, all-reduced, and cast back).
    """

    def __init__(self, compress=None):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hooks = {None: default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                 "bf16": default_hooks.bf16_compress_hook}
        if compress not in hooks:
            raise ValueError(f"compress must be None, 'fp16' or 'bf16', not {compress!r}")
        self.compress, self._inner = compress, hooks[compress]
        self.calls = self.bytes = 0
        self.sizes = []  # elements per all-reduce call (the bucket sizes)

    def hook(self, state, bucket):
        buffer = bucket.buffer()
        self.calls += 1
        self.sizes.append(buffer.numel())
        self.bytes += buffer.numel() * (2 if self.compress else buffer.element_size())
        return self._inner(state, bucket)

    def reset(self):
        self.calls = self.bytes = 0
        self.sizes = []


class Timeline:
    """Records what each rank did and when, for draw.timeline:

        tl = Timeline()                  # all ranks: agrees on a common time zero
        with tl("forward", "F1"): ...    # kind (colour) and label of a bar
        tl.events                        # [(start s, end s, kind, label), ...]

    Times are wall-clock seconds since rank 0's zero, so bars of different ranks line up.
    """

    def __init__(self):
        zero = torch.tensor([time.time()], dtype=torch.float64)
        dist.broadcast(zero, src=0)
        self.zero = zero.item()
        self.events = []

    def now(self):
        return time.time() - self.zero

    @contextlib.contextmanager
    def __call__(self, kind, label=""):
        start = self.now()
        try:
            yield
        finally:
            self.events.append((start, self.now(), kind, label))


def written():
    """Bytes this process has written so far (Linux's /proc/self/io: gloo's sockets among them), or None."""
    try:
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("wchar:")).split()[1])
    except (OSError, StopIteration):
        return None


def median_seconds(fn, repeat=5, warmup=1):
    """Median wall time of fn() over `repeat` runs, ranks lined up by a barrier before each run;
    every rank returns the slowest rank's median (a collective is as slow as its slowest rank)."""
    times = []
    for i in range(warmup + repeat):
        dist.barrier()
        tic = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - tic)
    slowest = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item()


class AllReduceCounter:
    """Counts the `dist.all_reduce` calls made inside `with counter:` and the bytes they reduce,
    whoever makes them (e.g. torch's model averagers, which call dist.all_reduce from Python):

        counter = AllReduceCounter()
        with counter:
            averager.average_parameters(model.parameters())
        counter.calls, counter.bytes

    DDP all-reduces its gradient buckets from C++, not through dist.all_reduce: count those with
    CommCounter. Not thread-safe: it swaps dist.all_reduce for the length of the `with`.
    """

    def __init__(self):
        self.calls = self.bytes = 0
        self._original = None

    def __enter__(self):
        self._original = original = dist.all_reduce

        def counted(tensor, *args, **kwargs):
            self.calls += 1
            self.bytes += tensor.numel() * tensor.element_size()
            return original(tensor, *args, **kwargs)

        dist.all_reduce = counted
        return self

    def __exit__(self, *exc):
        dist.all_reduce = self._original
        return False
