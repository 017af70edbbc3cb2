"""The baseline training script for torchrun: the same loop as a %%ddp cell, no notebook.

    python -m torch.distributed.run --standalone --nproc_per_node 4 bench/ddp_script.py --steps 1000 --threads 1
    ... bench/ddp_script.py --workload fsdp     (or tp: ddplab.workloads.train_fsdp, train_tp)
    ... bench/ddp_script.py --serve FIFO        (bench.common.Torchrun: one run per line "<workload> <steps>")

Prints "BENCH <total samples/s>" on rank 0 after each run.
"""
import argparse
import datetime
import json
import os

import torch
import torch.distributed as dist

from ddplab.rank import workloads


def train(workload, steps):
    """One run, as a %%ddp cell makes it (a fresh model and loader); rank 0 prints the pool's samples/s."""
    summary = getattr(workloads, f"train_{workload}")(steps=steps)
    rates = [None] * dist.get_world_size()
    dist.all_gather_object(rates, summary["samples_per_s"])
    if dist.get_rank() == 0:
        print("BENCH " + json.dumps(sum(rates)), flush=True)


def serve(fifo):
    """Runs on command: rank 0 reads "<workload> <steps>" lines from `fifo` (blocked, no CPU, between
    runs; the other ranks wait in a broadcast) until "stop" or the writer closes it."""
    if dist.get_rank() == 0:
        print("READY", flush=True)
    lines = open(fifo) if dist.get_rank() == 0 else None
    while True:
        command = [(next(lines, "stop") if lines else "").split()]
        dist.broadcast_object_list(command, src=0)
        if command[0][0] == "stop":
            return
        train(command[0][0], int(command[0][1]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workload", choices=("ddp", "fsdp", "tp"), default="ddp")
    p.add_argument("--serve", metavar="FIFO", help="run on command, read from this named pipe")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # serving: the ranks wait between runs as long as the notebook's side takes
    dist.init_process_group("gloo", timeout=datetime.timedelta(hours=3))
    if args.serve:
        serve(args.serve)
    else:
        train(args.workload, args.steps)
    dist.barrier()
    # leave without torch's C++ teardown: with several threads per rank it sometimes aborts at
    # exit ("terminate called without an active exception"), after the work is done
    os._exit(0)


if __name__ == "__main__":
    main()
