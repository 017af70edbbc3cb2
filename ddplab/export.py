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

from .words import say

HEADER = '''\
#!/usr/bin/env python
"""{title}

{exported}
{run_it}  torchrun --nproc_per_node {world_size} {name}
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import ddplab.rank as ddplab  # {log_note}

torch.set_num_threads({threads})  # {threads_note}
dist.init_process_group("gloo")  # {env_note}
rank, world_size = dist.get_rank(), dist.get_world_size()
'''
WORDS = {  # the header's prose, in the pool's language (the code is the same)
    "title": ("A ddplab notebook, as a torchrun script", "一个 ddplab notebook，导出为 torchrun 脚本"),
    "exported": ("Exported by ddplab's %ddp_export from the %%ddp cells that ran successfully, in order.",
                 "由 ddplab 的 %ddp_export 从成功运行过的 %%ddp 单元格按顺序导出。"),
    "run_it": ("Run it with torchrun, e.g.:", "用 torchrun 运行它，例如："),
    "log_note": ("ddplab.log(...) and ddplab.phase(...) as in the notebook (points kept in memory)",
                 "ddplab.log(...) 和 ddplab.phase(...) 与 notebook 中一样（数据点留在内存里）"),
    "threads_note": ("as the notebook's pool had it: {threads} thread(s) per rank",
                     "与 notebook 的进程池相同：每个 rank {threads} 个线程"),
    "env_note": ("from torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
                 "从 torchrun 设置的环境变量读取：RANK、WORLD_SIZE、MASTER_ADDR、MASTER_PORT"),
    "left_out": ("left out by %ddp_export (works only in a notebook)", "%ddp_export 略去了这一行（只能在 notebook 中运行）"),
}
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


def script_cell(code, lang="en"):
    """A cell's code for a script: notebook-only lines become comments."""
    out = []
    for line in code.splitlines():
        magic = _left_out(line)
        if magic is None:
            out.append(line)
        else:
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}pass  # {say(lang, *WORDS['left_out'])}: {magic}")
    return "\n".join(out)


def script(cells, world_size, threads, title=None, name="script.py", lang="en"):
    """The script's text. cells: (notebook cell number, code, ranks or None for every rank); its
    comments in `lang` (en or zh)."""
    words = {key: say(lang, *pair).format(threads=threads) for key, pair in WORDS.items()}
    parts = [HEADER.format(**{**words, "title": title or words["title"]}, world_size=world_size, threads=threads,
                           name=name)]
    for number, code, ranks in cells:
        body = script_cell(code, lang).rstrip()
        label = f"# --- cell {number}" + (f", on ranks {', '.join(map(str, ranks))}" if ranks else "") + " ---"
        if ranks:
            body = f"if rank in {tuple(ranks)!r}:\n" + textwrap.indent(body or "pass", "    ")
        parts.append(f"\n{label}\n{body}\n")
    parts.append(FOOTER)
    text = "".join(parts)
    ast.parse(text)  # a cell that is not Python after all fails here, not under torchrun
    return text
