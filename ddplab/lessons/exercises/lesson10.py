"""Lesson 10 (stragglers and uneven inputs): the exercises' judges."""
from . import exercise, near, number, right, whole_number, wrong


def _step(run):
    """Seconds per step before rank 2 slowed: a batch over each rank's samples/s (their mean)."""
    return run["batch"] / (sum(run["before"]) / len(run["before"]))


def _predicted(run):
    extra = run["batch"] * run["seconds_per_sample"] * run["slow"]
    return len(run["before"]) * run["batch"] / (_step(run) + extra)


def _only_rank_2(run):
    """The typical mistake: as if only rank 2 slowed down, to 1 / (1 + slow) of its speed."""
    return sum(run["before"]) - run["before"][2] * (1 - 1 / (1 + run["slow"]))


@exercise("10.1", solution=_predicted, mistake=_only_rank_2)
def slow_one(answer, run):
    value, step = _predicted(run), _step(run)
    extra = run["batch"] * run["seconds_per_sample"] * run["slow"]
    if near(answer, value, rel=0.15):
        return right(f"A step took {1e3 * step:.0f} ms; rank 2's {1e3 * extra:.0f} ms of extra work makes every rank's step "
                     f"{1e3 * (step + extra):.0f} ms, as all wait for it in the all-reduce: about {value:,.0f} samples/s.",
                     f"一步原来要 {1e3 * step:.0f} 毫秒；rank 2 多出的 {1e3 * extra:.0f} 毫秒工作量让每个 rank 的一步都变成 "
                     f"{1e3 * (step + extra):.0f} 毫秒，因为大家都在 all-reduce 中等它：约 {value:,.0f} 样本/秒。")
    if near(answer, _only_rank_2(run), rel=0.05):
        return wrong("That slows rank 2 only; but ranks 0, 1 and 3 wait for it at every all-reduce.",
                     "这只让 rank 2 变慢了；可是 rank 0、1、3 在每次 all-reduce 时都要等它。")
    return wrong("Find the time of one step before (64 samples over a rank's samples/s), add rank 2's extra work, "
                 "and count 4 × 64 samples per step.",
                 "先求出之前一步的时间（64 个样本除以一个 rank 的样本/秒），加上 rank 2 多出的工作量，每步按 4 × 64 个样本算。")


def _ideal(run):
    return (3 * (1 + run["slow"]) + 1) / 4


@exercise("10.2", solution=_ideal, mistake=lambda run: 1 + run["slow"])
def ideal_speedup(answer, run):
    value, measured = _ideal(run), run["balanced"] / run["even"]
    k = 1 + run["slow"]
    if near(answer, value, rel=0.03):
        return right(f"With 64 each a step lasts rank 2's 64 × {k:g} units of work; split by speed, 256 samples over a "
                     f"total speed of 3 + 1/{k:g} take 256 / {3 + 1 / k:.2f} units: {value:.2f} times as many steps/s. The "
                     f"run measured {measured:.1f}: the forward, backward and all-reduce of each step do not shrink.",
                     f"各 64 个样本时，一步的长度是 rank 2 的 64 × {k:g} 份工作；按速度拆分时，256 个样本由总速度 3 + 1/{k:g} "
                     f"来处理，只要 256 / {3 + 1 / k:.2f} 份：每秒步数是原来的 {value:.2f} 倍。这次运行测得 {measured:.1f} 倍："
                     "每一步的前向、反向和 all-reduce 都不会变短。")
    if near(answer, 1 + run["slow"], rel=0.03):
        return wrong("Splitting by speed does not make rank 2 as fast as the others: the group's total speed is what the "
                     "split can use. What is the sum of the four speeds, with rank 2 at 1/4?",
                     "按速度拆分并不会让 rank 2 和其他 rank 一样快：拆分能用上的是整个组的总速度。"
                     "rank 2 的速度为 1/4 时，四个速度之和是多少？")
    return wrong("Compare a step's length: 64 samples at rank 2's speed, against 256 samples at the sum of the four speeds.",
                 "比较一步的长度：64 个样本按 rank 2 的速度处理，对比 256 个样本按四个速度之和处理。")


@exercise("10.3", solution=lambda run: 1 / run["world_size"], mistake=lambda run: 1.0)
def join_average(answer, run):
    value = number(answer)
    if near(value, 1 / run["world_size"], rel=0.02):
        return right(f"The all-reduce sums rank 3's gradient and {run['world_size'] - 1} zeros, and DDP still divides by the "
                     f"initial {run['world_size']} ranks: 1/{run['world_size']} of it, smaller steps at the end.",
                     f"all-reduce 把 rank 3 的梯度和 {run['world_size'] - 1} 个零相加，而 DDP 仍然除以最初的 "
                     f"{run['world_size']} 个 rank：只剩它的 1/{run['world_size']}，最后几步的步子更小。")
    if near(value, 1.0, rel=0.02):
        return wrong("That is what divide_by_initial_world_size=False gives. By default, what does DDP divide the sum by?",
                     "这是 divide_by_initial_world_size=False 时的结果。默认情况下，DDP 用什么去除这个和？")
    return wrong("The joined ranks add zeros to the sum; by default DDP divides it by the initial number of ranks.",
                 "已加入的 rank 往和里加的是零；默认情况下 DDP 用最初的 rank 数去除它。")


@exercise("10.4", solution=lambda run: min(run["steps"]) + 1, mistake=lambda run: min(run["steps"]))
def hang_step(answer, run):
    n, last = whole_number(answer), min(run["steps"])
    if n == last + 1:
        return right(f"Rank 0 joined the all-reduces of steps 1 to {last}, and never calls the one of step {last + 1}.",
                     f"rank 0 参加了第 1 到第 {last} 步的 all-reduce，却永远不会调用第 {last + 1} 步的那一次。")
    if n == last:
        return wrong(f"Step {last} is rank 0's last batch: it takes part in that step's all-reduce. Which one does it miss?",
                     f"第 {last} 步是 rank 0 的最后一个批次：它参加了这一步的 all-reduce。它缺席的是哪一次？")
    return wrong("Rank 0 has 10 batches, one all-reduce each (the model's gradients fit in one bucket).",
                 "rank 0 有 10 个批次，每个批次一次 all-reduce（这个模型的梯度放得进一个桶）。")
