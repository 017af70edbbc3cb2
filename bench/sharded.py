"""Sharded (FSDP2) and tensor-parallel training in the lab against the same script under torchrun.

ddplab.workloads.train_fsdp (the MLP 784-512-512-10, fully_shard per layer, Adam, batch 64 per
rank) and train_tp (an MLP whose two column/row-split pairs span every rank, Adam, batch 64),
each with ddplab.log every step and the timeline on (every all-gather, reduce-scatter and
all-reduce recorded with its module and group). In each of five fresh kernels per workload, the
first %%ddp training right after %ddp_start and two more, against torchrun runs of the same loop,
one thread per rank, waiting beside the kernel as training's do (T K T K T K T): each run is
compared with the mean of the torchrun runs just before and just after it (>= 0.98x each), when
the host took at most 1% of the machine's CPU in each of the three (bench.common.compared).
"""
from .common import against_around, compared, more_kernels
from .training import in_notebook


def run(quick=False):
    n, steps, repeats = (2, 20, 1) if quick else (4, 300, 5)
    rows = []
    for workload, what in (("fsdp", "FSDP2 (fully_shard per layer)"), ("tp", "tensor parallelism (Colwise/Rowwise)")):
        firsts, laters, lab, alone = [], [], [], []  # (ratio, share stolen); samples/s
        while more_kernels(lab, laters, repeats, quick):
            runs, baseline = in_notebook(n, steps, ["on", "on", "on"], beside=workload)
            each = against_around(runs, baseline)  # (more kernels while the host takes too much)
            firsts.append(each[0])
            laters += each[1:]
            lab.append([r[0] for r in runs])
            alone.append([r[0] for r in baseline])
        rows += [
            compared(f"{workload}_first_vs_torchrun", f"{what}, {n} ranks, timeline on: the first %%ddp training "
                     "right after %ddp_start / the torchrun runs just before %ddp_start and just after it (their "
                     "mean), 1 thread per rank", firsts, target=(">=", 0.98), ddplab=lab, torchrun=alone),
            compared(f"{workload}_vs_torchrun", f"{what}, {n} ranks, timeline on: the second and third %%ddp "
                     "trainings in those kernels / the torchrun runs around each (their mean), 1 thread per rank",
                     laters, target=(">=", 0.98)),
        ]
    return rows
