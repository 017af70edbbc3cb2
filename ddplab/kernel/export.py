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
import os
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from ..shared.words import say

HEADER = '''\
#!/usr/bin/env python
"""{title}

{exported}
{run_it}  torchrun --nproc_per_node {world_size} {name}
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import ddplab.rank as ddplab  # {log_note}

torch.set_num_threads({threads})  # {threads_note}
dist.init_process_group("gloo")  # {env_note}
rank, world_size = dist.get_rank(), dist.get_world_size()
'''
WORDS = {  # the header's prose, in English (zh.py: in Chinese; the code is the same)
    'title': 'A ddplab notebook, as a torchrun script',
    'exported': "Exported by ddplab's %ddp_export from the %%ddp cells that ran successfully, in order.",
    'run_it': 'Run it with torchrun, e.g.:',
    'log_note': 'ddplab.log(...) and ddplab.phase(...) as in the notebook (points kept in memory)',
    'threads_note': "as the notebook's pool had it: {threads} thread(s) per rank",
    'env_note': "from torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
    'left_out': 'left out by %ddp_export (works only in a notebook)',
    'footer_note': ("a DDP model holds its group: the models go first (one left for the interpreter's exit, after "
                    "its group, can abort the process)"),
}
FOOTER = '''
# {footer_note}
for _name in [n for n, v in globals().items() if isinstance(v, nn.parallel.DistributedDataParallel)]:
    del globals()[_name]
gc.collect()
dist.destroy_process_group()
'''


def _left_out(line: str) -> str | None:
    """A notebook-only line (%magic, %%magic, !shell, x = !shell, x = %magic): None if plain Python."""
    stripped = line.strip()
    if stripped.startswith(("%", "!")):
        return stripped
    head, sep, tail = stripped.partition("=")
    if sep and tail.strip().startswith(("%", "!")) and head.strip().isidentifier():
        return stripped
    return None


def script_cell(code: str, lang: str = "en") -> str:
    """A cell's code for a script: notebook-only lines become comments."""
    out = []
    for line in code.splitlines():
        magic = _left_out(line)
        if magic is None:
            out.append(line)
        else:
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}pass  # {say(lang, WORDS['left_out'])}: {magic}")
    return "\n".join(out)


def script(cells: Iterable[tuple[int, str, Sequence[int] | None]], world_size: int, threads: int, title: str | None = None,
           name: str = "script.py", lang: str = "en") -> str:
    """The script's text. cells: (notebook cell number, code, ranks or None for every rank); its
    comments in `lang` (en or zh)."""
    words = {key: say(lang, text).format(threads=threads) for key, text in WORDS.items()}
    parts = [HEADER.format(**{**words, "title": title or words["title"]}, world_size=world_size, threads=threads,
                           name=name)]
    for number, code, ranks in cells:
        body = script_cell(code, lang).rstrip()
        label = f"# --- cell {number}" + (f", on ranks {', '.join(map(str, ranks))}" if ranks else "") + " ---"
        if ranks:
            body = f"if rank in {tuple(ranks)!r}:\n" + textwrap.indent(body or "pass", "    ")
        parts.append(f"\n{label}\n{body}\n")
    parts.append(FOOTER.format(**words))
    text = "".join(parts)
    ast.parse(text)  # a cell that is not Python after all fails here, not under torchrun
    return text


class Export:
    """lab.export: the cells that ran successfully (recorded as they run), written as a script."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab  # the Lab that made this (lab.py imports this module, so the import contracts keep the type out)
        # (notebook cell number, code, ranks or None): the cells that ran well
        self.cells: list[tuple[int, str, Sequence[int] | None]] = []

    def record(self, number: int, code: str, ranks: Sequence[int] | None) -> None:
        self.cells.append((number, code, ranks))

    def write(self, path: str | os.PathLike[str], title: str | None = None) -> int:
        """Write the cells that ran successfully, in order, as a script for torchrun; returns how
        many cells it holds."""
        from ..shared.errors import BadRequest

        lab = self.lab
        if not self.cells:
            raise BadRequest("no %%ddp cell has run successfully yet: nothing to export")
        threads = sorted({i.get("threads") for i in lab.info if i.get("threads")}) or [lab.threads]
        try:
            text = script(self.cells, lab.world_size, threads[0], title, os.path.basename(path), lab.config.lang)
        except SyntaxError as exc:
            raise BadRequest(f"a cell is not Python that a script can run (line {exc.lineno}: {exc.msg})") from exc
        with open(path, "w") as f:
            f.write(text)
        return len(self.cells)
