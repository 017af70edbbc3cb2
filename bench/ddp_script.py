"""The baseline training script for torchrun: the same loop as a %%ddp cell, no notebook.

    python -m torch.distributed.run --standalone --nproc_per_node 4 bench/ddp_script.py --steps 1000 --threads 1
    ... bench/ddp_script.py --workload fsdp     (or tp: ddplab.workloads.train_fsdp, train_tp)

Prints "BENCH <total samples/s>" on rank 0.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist

from ddplab.rank import workloads


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workload", choices=("ddp", "fsdp", "tp"), default="ddp")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    summary = getattr(workloads, f"train_{args.workload}")(steps=args.steps)
    rates = [None] * dist.get_world_size()
    dist.all_gather_object(rates, summary["samples_per_s"])
    if dist.get_rank() == 0:
        print("BENCH " + json.dumps(sum(rates)), flush=True)
    dist.barrier()
    # leave without torch's C++ teardown: with several threads per rank it sometimes aborts at
    # exit ("terminate called without an active exception"), after the work is done
    os._exit(0)


if __name__ == "__main__":
    main()
