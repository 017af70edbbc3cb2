"""Sharded (FSDP2) and tensor-parallel training in the lab against the same script under torchrun.

ddplab.workloads.train_fsdp (the MLP 784-512-512-10, fully_shard per layer, Adam, batch 64 per
rank) and train_tp (an MLP whose two column/row-split pairs span every rank, Adam, batch 64),
each with ddplab.log every step and the timeline on (every all-gather, reduce-scatter and
all-reduce recorded with its module and group). In each of five fresh kernels per workload, the
first %%ddp training right after %ddp_start and the second, against torchrun runs of the same
loop, one thread per rank, between the kernels (T K T K T K T): each is compared with the mean of
the torchrun runs just before and just after its kernel, as training's are (>= 0.98x each).
"""
from .common import around, in_kernel, ratios, result
from .training import torchrun

SETUP = "%load_ext ddplab\n%ddp_start {n}\nimport ddplab, json\n_lab = ddplab._magics[id(get_ipython())].lab"
TRAIN = "%%ddp\nfrom ddplab.workloads import train_{workload}\nsummary = train_{workload}(steps={steps})"
REPORT = "print('BENCH ' + json.dumps(sum(s['samples_per_s'] for s in _lab.gather('summary'))))"


def in_notebook(workload, n, steps, runs=2):
    cells = [SETUP.format(n=n)]
    for _ in range(runs):
        cells += [TRAIN.format(workload=workload, steps=steps), REPORT]
    return in_kernel([*cells, "%ddp_stop"])


def run(quick=False):
    n, steps, repeats = (2, 20, 1) if quick else (4, 300, 5)
    rows = []
    for workload, what in (("fsdp", "FSDP2 (fully_shard per layer)"), ("tp", "tensor parallelism (Colwise/Rowwise)")):
        alone = [torchrun(n, steps, 1, workload)]
        firsts, laters = [], []
        for _ in range(repeats):
            first, later = in_notebook(workload, n, steps)
            firsts.append(first)
            laters.append(later)
            alone.append(torchrun(n, steps, 1, workload))
        baseline = around(alone)
        rows += [
            result(f"{workload}_first_vs_torchrun", f"{what}, {n} ranks, timeline on: the first %%ddp training right "
                   "after %ddp_start / the torchrun runs just before and after its fresh kernel (their mean), 1 thread per rank",
                   ratios(firsts, baseline), target=(">=", 0.98), ddplab=firsts, torchrun=alone),
            result(f"{workload}_vs_torchrun", f"{what}, {n} ranks, timeline on: the second %%ddp training in those "
                   "kernels / the torchrun runs around its kernel (their mean), 1 thread per rank",
                   ratios(laters, baseline), target=(">=", 0.98), ddplab=laters, torchrun=alone),
        ]
    return rows
