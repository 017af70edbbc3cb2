"""Lesson 3 (DistributedSampler and set_epoch): the exercises' judges."""
import math

from . import Unreadable, exercise, near, right, whole_number, wrong


def counts(answer, n):
    """A list of n whole numbers, or Unreadable."""
    if not isinstance(answer, (list, tuple)) or len(answer) != n:
        example = list(range(1, n + 1))
        raise Unreadable(f"give a list of {n} whole numbers, like {example}.", f"请给出一个含 {n} 个整数的列表，例如 {example}。")
    return [whole_number(v) for v in answer]


def _split(n_samples, ranks):
    """[per rank, repeated] without drop_last, [per rank, left out] with it."""
    padded, dropped = math.ceil(n_samples / ranks), n_samples // ranks
    return [padded, padded * ranks - n_samples, dropped, n_samples - dropped * ranks]


@exercise("3.1", solution=lambda run: _split(run["N"], run["world_size"]),
          mistake=lambda run: _split(run["N"] - 1, run["world_size"]))
def twenty_three(answer, run):
    n, ranks = run["N"], run["world_size"]
    per, repeated, kept, left_out = _split(n, ranks)
    got = counts(answer, 4)
    if got == [per, repeated, kept, left_out]:
        return right(f"without drop_last: ⌈{n} / {ranks}⌉ = {per} per rank, {per * ranks} read, so {repeated} "
                     f"repeated; with it: ⌊{n} / {ranks}⌋ = {kept} per rank, {kept * ranks} read, {left_out} left out.",
                     f"不设 drop_last：每个 rank ⌈{n} / {ranks}⌉ = {per} 个，共读 {per * ranks} 个，所以重复 {repeated} 个；"
                     f"设置之后：每个 rank ⌊{n} / {ranks}⌋ = {kept} 个，共读 {kept * ranks} 个，漏掉 {left_out} 个。")
    if got == _split(n - 1, ranks):
        return wrong(f"those are the numbers of the lesson's {n - 1} samples: one more sample changes the padding and "
                     "what is dropped.",
                     f"这是课上 {n - 1} 个样本时的数字：多一个样本，填充和丢弃的个数都会变。")
    if got[0] == per and got[2] == kept:
        return wrong("the samples per rank are right: now compare what the ranks read together with the size of the "
                     "data set, both ways.",
                     "每个 rank 的样本数对了：再把各 rank 合起来读到的个数与数据集的大小比较一下，两种情况都要比较。")
    return wrong("without drop_last every rank gets the data set's size divided by the ranks, rounded up; with it, "
                 "rounded down.",
                 "不设 drop_last 时，每个 rank 拿到数据集大小除以 rank 数、向上取整的个数；设置之后则向下取整。")


def _padded(run):
    """The first len(padding) indices of epoch 0's shuffle, read twice."""
    everything = [i for per_rank in run["orders"] for i in per_rank[0]]  # orders[rank][epoch]
    return sorted({i for i in everything if everything.count(i) > 1})


def _mean(run):
    everything = [i for per_rank in run["orders"] for i in per_rank[0]]
    return sum(everything) / len(everything)


@exercise("3.2", solution=_mean, mistake=lambda run: (run["N"] - 1) / 2)
def padded_mean(answer, run):
    value, twice, true = _mean(run), _padded(run), (run["N"] - 1) / 2
    if near(answer, value, rel=0, absolute=5e-3):
        total = sum(range(run["N"]))
        return right(f"({total} + {' + '.join(map(str, twice))}) / {run['N'] + len(twice)} = {value:.4f}, not "
                     f"{true}: samples {twice} count twice. To fix it, count each index once (all_gather the indices "
                     "and drop the repeats), or evaluate on one rank.",
                     f"({total} + {' + '.join(map(str, twice))}) / {run['N'] + len(twice)} = {value:.4f}，而不是 {true}："
                     f"样本 {twice} 被算了两次。修正的办法：每个索引只算一次（用 all_gather 收集索引，去掉重复的），"
                     "或者只在一个 rank 上评估。")
    if near(answer, true, rel=0, absolute=5e-3):
        return wrong(f"that is the true mean of 0..{run['N'] - 1}: the ranks together read more than {run['N']} "
                     "samples in epoch 0. Which ones twice?",
                     f"这是 0..{run['N'] - 1} 真正的均值：epoch 0 中各 rank 合起来读到的样本多于 {run['N']} 个。"
                     "哪些被读了两次？")
    return wrong("add up every value the 4 ranks read in epoch 0 (the repeated ones twice) and divide by how many "
                 "they read.",
                 "把 4 个 rank 在 epoch 0 中读到的每个值加起来（重复的算两次），再除以读到的个数。")


def _never_read(run):
    from torch.utils.data import DistributedSampler

    n, ranks, odd = run["N"], run["world_size"], run["odd_rank"]
    read = set()
    for r in range(ranks):
        sampler = DistributedSampler(list(range(n)), num_replicas=ranks, rank=r, shuffle=True, seed=1 if r == odd else 0)
        sampler.set_epoch(0)
        read.update(sampler)
    return n - len(read)


@exercise("3.3", solution=_never_read, mistake=lambda run: 0)
def other_seed(answer, run):
    value, got = _never_read(run), whole_number(answer)
    if got == value:
        return right(f"{value} samples: rank {run['odd_rank']} takes its slice of another permutation, so it reads "
                     "some samples that another rank reads too and misses some that nobody else reads. Nothing "
                     "fails and nothing warns: the ranks never compare their indices.",
                     f"{value} 个样本：rank {run['odd_rank']} 从另一个排列中取自己的那一份，所以它读到的一些样本别的 "
                     "rank 也读了，又漏掉了一些别人都没读的样本。什么都不会报错，也没有任何警告：各 rank 从来不比较"
                     "各自的索引。")
    if got == 0:
        return wrong("the ranks do not agree on one permutation any more: can the slices of two different "
                     "permutations still cover every sample?",
                     "各 rank 不再使用同一个排列：从两个不同排列中各取一份，还能覆盖全部样本吗？")
    return wrong("make the 4 samplers of epoch 0 in a cell of your own (rank 2 with seed=1) and count the indices "
                 "none of them lists.",
                 "在你自己的单元格里创建 epoch 0 的 4 个采样器（rank 2 用 seed=1），数一数哪些索引不在任何一个里面。")


@exercise("3.4", solution=lambda run: run["batch_size"] * run["world_size"] // run["new_ranks"],
          mistake=lambda run: run["batch_size"])
def same_global_batch(answer, run):
    global_batch = run["batch_size"] * run["world_size"]
    value, got = global_batch // run["new_ranks"], whole_number(answer)
    if got == value:
        return right(f"the global batch is batch_size × world_size: {run['batch_size']} × {run['world_size']} = "
                     f"{global_batch} = {value} × {run['new_ranks']}. With the same global batch, the same learning "
                     "rate fits.",
                     f"全局批次是 batch_size × world_size：{run['batch_size']} × {run['world_size']} = {global_batch} = "
                     f"{value} × {run['new_ranks']}。全局批次不变，同样的学习率就仍然合适。")
    if got == run["batch_size"]:
        return wrong(f"with batch_size {got} on {run['new_ranks']} ranks a step sees {got * run['new_ranks']} "
                     "samples: the global batch shrinks.",
                     f"在 {run['new_ranks']} 个 rank 上用 batch_size {got}，每一步只看到 {got * run['new_ranks']} 个样本："
                     "全局批次变小了。")
    return wrong("the global batch is batch_size × world_size: keep it the same with fewer ranks.",
                 "全局批次是 batch_size × world_size：rank 变少时，让它保持不变。")
