"""Lesson 17 (from the notebook to a cluster): the exercises' judges."""
import re

from . import Unreadable, exercise, near, right, whole_number, wrong


@exercise("17.1", solution=lambda run: run["per_host"] + 2, mistake=lambda run: 2)
def rank_on_second_host(answer, run):
    n, per_host = whole_number(answer), run["per_host"]
    if n == per_host + 2:
        return right(f"the first host's processes have RANK 0 to {per_host - 1}; the second host's go on from "
                     f"{per_host}, in the order of their LOCAL_RANK: {per_host} + 2 = {n}.",
                     f"第一台主机上的进程 RANK 为 0 到 {per_host - 1}；第二台主机上的进程从 {per_host} 接着编号，"
                     f"按 LOCAL_RANK 的顺序：{per_host} + 2 = {n}。")
    if n == 2:
        return wrong("that is its LOCAL_RANK, its place on its own host; RANK is its place in the whole job.",
                     "这是它的 LOCAL_RANK，即它在本主机上的位置；RANK 是它在整个作业中的位置。")
    return wrong("the processes of host GROUP_RANK 0 come first in RANK; how many are there?",
                 "GROUP_RANK 为 0 的主机上的进程排在 RANK 的最前面；它们一共有几个？")


def _renumbered(run):
    return run["ranks_left"] * (run["ranks_left"] + 1) / 2


def _kept_numbers(run):
    return run["world_before"] * (run["world_before"] + 1) / 2 - (run["lost_rank"] + 1)


@exercise("17.2", solution=_renumbered, mistake=_kept_numbers)
def after_the_loss(answer, run):
    value, kept, left = _renumbered(run), _kept_numbers(run), run["ranks_left"]
    if near(answer, value, rel=0, absolute=1e-9):
        return right(f"the new group numbers its {left} ranks 0 to {left - 1} again, so they hold 1 to {left}: "
                     f"{value:g}. A rank is a place in a group, not a name for an engine.",
                     f"新的进程组把它的 {left} 个 rank 重新编号为 0 到 {left - 1}，所以它们持有 1 到 {left}："
                     f"{value:g}。rank 是进程组中的位置，而不是某个引擎的名字。")
    if near(answer, kept, rel=0, absolute=1e-9):
        return wrong("that keeps the old numbers and leaves out the lost rank's. Which ranks does a new group of "
                     f"{left} have?",
                     f"这是沿用旧编号、去掉失联 rank 的值。一个由 {left} 个 rank 组成的新进程组，有哪些 rank？")
    return wrong(f"every rank adds rank + 1 over the ranks of the new group: {left} of them, numbered from 0.",
                 f"每个 rank 对新进程组中所有 rank 的 rank + 1 求和：一共 {left} 个，从 0 开始编号。")


def _steps(run):
    per_process = -(-run["samples"] // run["processes"])          # DistributedSampler pads to a multiple
    return -(-per_process // run["batch"]) * run["epochs"]


@exercise("17.3", solution=_steps, mistake=lambda run: run["samples"] // run["batch"] * run["epochs"])
def steps(answer, run):
    n, value = whole_number(answer), _steps(run)
    per_process = -(-run["samples"] // run["processes"])
    if n == value:
        return right(f"each process reads {per_process} samples an epoch, {per_process // run['batch']} batches of "
                     f"{run['batch']}, for {run['epochs']} epochs: {value}.",
                     f"每个进程每个 epoch 读 {per_process} 个样本，即 {per_process // run['batch']} 个大小为 "
                     f"{run['batch']} 的批次，共 {run['epochs']} 个 epoch：{value}。")
    if n == run["samples"] // run["batch"] * run["epochs"]:
        return wrong("that is the steps of one process reading all the samples: the sampler gives each process its "
                     "own share.",
                     "这是一个进程读完全部样本的步数：采样器只给每个进程它自己的那一份。")
    return wrong("first the samples each process gets per epoch, then the batches they make, then the epochs.",
                 "先算每个进程每个 epoch 拿到的样本数，再算它们组成几个批次，最后乘以 epoch 数。")


def _names(answer):
    if isinstance(answer, str):
        items = [w for w in re.split(r"[\s,;/&+]+", answer.strip(" ()[]")) if w.lower() != "and"]
    elif hasattr(answer, "__iter__"):
        items = list(answer)
    else:
        items = []
    names = {str(a).strip().strip("'\"").upper() for a in items if str(a).strip()}
    if not names or not all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", n) for n in names):
        raise Unreadable('give the names of environment variables, like ("A", "B").',
                         '请给出环境变量的名字，例如 ("A", "B")。')
    return names


@exercise("17.4", solution=lambda run: ("MASTER_ADDR", "MASTER_PORT"),
          mistake=lambda run: ("LOCAL_RANK", "LOCAL_WORLD_SIZE"))
def meeting_place(answer, run):
    names = _names(answer)
    if names == {"MASTER_ADDR", "MASTER_PORT"}:
        return right("the env:// method meets at MASTER_ADDR:MASTER_PORT, where rank 0 serves the store through which "
                     "the processes exchange their addresses; the hand-started run failed for lack of "
                     f"{'MASTER_ADDR' if 'MASTER_ADDR' in run['error'] else 'them'}.",
                     "env:// 方式在 MASTER_ADDR:MASTER_PORT 会合：rank 0 在那里提供 store，各进程通过它交换彼此的地址；"
                     f"手动启动的那次运行就是因为缺少 {'MASTER_ADDR' if 'MASTER_ADDR' in run['error'] else '它们'}而失败的。")
    if names & {"MASTER_ADDR", "MASTER_PORT"}:
        return wrong("one of them is right; a meeting place needs a host and one more thing.",
                     "其中一个是对的；一个会合的地方需要一台主机，还需要另一样东西。")
    return wrong("RANK and WORLD_SIZE say who a process is; read the error of the hand-started run: what does it "
                 "still lack?",
                 "RANK 和 WORLD_SIZE 说明一个进程是谁；读一读手动启动那次运行的错误信息：它还缺什么？")
