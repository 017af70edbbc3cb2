"""%ddp_export: the %%ddp cells that ran successfully, in order, as one script for torchrun.

    torchrun --nproc_per_node 4 lesson.py                      # one machine, as in the notebook
    torchrun --nnodes 2 --nproc_per_node 4 --rdzv-endpoint HOST:29500 lesson.py   # several

The script forms the process group from torchrun's environment and defines what ddplab defines
in every rank (rank, world_size, torch, dist, nn, ddplab: ddplab.log and ddplab.phase work without
a notebook, keeping the points in memory), with the pool's threads per rank. Notebook magics and
shell lines in the cells are left out, each with a comment; a cell run on some ranks only
(%%ddp --ranks) runs under `if rank in (...)`.
"""
import ast
import textwrap

HEADER = '''\
#!/usr/bin/env python
"""{title}

Exported by ddplab's %ddp_export from the %%ddp cells that ran successfully, in order.
Run it with torchrun, e.g.:  torchrun --nproc_per_node {world_size} {name}
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import ddplab.rank as ddplab  # ddplab.log(...) and ddplab.phase(...) as in the notebook (points kept in memory)

torch.set_num_threads({threads})  # as the notebook's pool had it: {threads} thread(s) per rank
dist.init_process_group("gloo")  # from torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world_size = dist.get_rank(), dist.get_world_size()
'''
FOOTER = '''
dist.destroy_process_group()
'''


def _left_out(line):
    """A notebook-only line (%magic, %%magic, !shell, x = !shell, x = %magic): None if plain Python."""
    stripped = line.strip()
    if stripped.startswith(("%", "!")):
        return stripped
    head, sep, tail = stripped.partition("=")
    if sep and tail.strip().startswith(("%", "!")) and head.strip().isidentifier():
        return stripped
    return None


def script_cell(code):
    """A cell's code for a script: notebook-only lines become comments."""
    out = []
    for line in code.splitlines():
        magic = _left_out(line)
        if magic is None:
            out.append(line)
        else:
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}pass  # left out by %ddp_export (works only in a notebook): {magic}")
    return "\n".join(out)


def script(cells, world_size, threads, title="A ddplab notebook, as a torchrun script", name="script.py"):
    """The script's text. cells: (notebook cell number, code, ranks or None for every rank)."""
    parts = [HEADER.format(title=title, world_size=world_size, threads=threads, name=name)]
    for number, code, ranks in cells:
        body = script_cell(code).rstrip()
        label = f"# --- cell {number}" + (f", on ranks {', '.join(map(str, ranks))}" if ranks else "") + " ---"
        if ranks:
            body = f"if rank in {tuple(ranks)!r}:\n" + textwrap.indent(body or "pass", "    ")
        parts.append(f"\n{label}\n{body}\n")
    parts.append(FOOTER)
    text = "".join(parts)
    ast.parse(text)  # a cell that is not Python after all fails here, not under torchrun
    return text
