"""Lesson 14 (scaling: 1, 2 and 4 ranks): the exercises, judged against the learner's own run.

run keys: rates ({ranks: weak-scaling samples/s}), goal (an efficiency); T1 (ms per step on 1 rank), c (ms
of communication and waiting per step on 2 ranks), measured (a measured speed-up or samples/s to compare
with); B (samples per rank), compute1, compute2 (ms of compute per step on 1 and 2 ranks), comm4, comm2,
wait2 (ms per step).
"""
from . import exercise, near, number, right, wrong


def _needed(run):
    return run["goal"] * 4 * run["rates"][1]


@exercise("14.1", solution=_needed, mistake=lambda run: run["goal"] * run["rates"][1])
def samples_for_efficiency(answer, run):
    value, rates, goal = number(answer), run["rates"], run["goal"]
    solution, measured = _needed(run), rates[4] / rates[1] / 4
    if near(value, solution, rel=0.03):
        return right(f"Yes: {goal} × 4 × {rates[1]:,.0f} = {solution:,.0f} samples/s: the efficiency is the samples/s "
                     f"of N ranks against N times one rank's. This run's 4 ranks processed {rates[4]:,.0f} samples/s, "
                     f"an efficiency of {measured:.2f}.",
                     f"对：{goal} × 4 × {rates[1]:,.0f} = {solution:,.0f} 样本/秒：并行效率就是拿 N 个 rank 的样本/秒和 1 个 "
                     f"rank 的 N 倍相比。本次运行中 4 个 rank 每秒处理了 {rates[4]:,.0f} 个样本，并行效率为 {measured:.2f}。")
    if near(value, goal * rates[1], rel=0.03):
        return wrong("That is 0.9 times one rank's samples/s: the efficiency compares 4 ranks with 4 times one rank.",
                     "这是 1 个 rank 的样本/秒的 0.9 倍：并行效率拿 4 个 rank 和 1 个 rank 的 4 倍相比。")
    if near(value, 4 * rates[1], rel=0.03):
        return wrong("That is the ideal, an efficiency of 1.0: how much of it is 0.9?",
                     "这是理想情况，即并行效率为 1.0：它的 0.9 是多少？")
    return wrong("Not quite: efficiency = samples/s at 4 ranks ÷ samples/s at 1 rank ÷ 4; solve it for the samples/s "
                 "at 4 ranks, with the 1-rank weak-scaling row of the table.",
                 "还不对：并行效率 = 4 个 rank 的样本/秒 ÷ 1 个 rank 的样本/秒 ÷ 4；用表格中 1 个 rank 那一行，反过来求 "
                 "4 个 rank 的样本/秒。")


def _fixed_cost(run):
    """The speed-up at 2 ranks when distributing adds a fixed c per step: T1 / (T1/2 + c)."""
    return 1 / (1 / 2 + run["c"] / run["T1"])


@exercise("14.2", solution=_fixed_cost, mistake=lambda run: 1 / (1 + run["c"] / run["T1"]))
def fixed_cost_at_2(answer, run):
    value, solution, measured = number(answer), _fixed_cost(run), run["measured"]
    if near(value, solution, rel=0.07):
        gap = measured / solution - 1
        if abs(gap) <= 0.15:
            said = ("This run measured {m:.2f}: the model holds.", "本次运行实测为 {m:.2f}：这个模型是成立的。")
        elif gap < 0:
            said = ("This run measured {m:.2f}, less: the model leaves out that the ranks' all-reduce copies run on the "
                    "same cores as their compute, and c was taken from the weak run.",
                    "本次运行实测为 {m:.2f}，更低：这个模型没有考虑到各 rank 的 all-reduce 拷贝与计算在同样的核心上进行，而且 c "
                    "取自弱扩展的那次运行。")
        else:
            said = ("This run measured {m:.2f}, more: part of the all-reduce ran hidden under the backward pass, and c "
                    "was taken from the weak run.",
                    "本次运行实测为 {m:.2f}，更高：all-reduce 有一部分藏在反向传播之下进行，而且 c 取自弱扩展的那次运行。")
        return right(f"Yes: 1 / (1/2 + {run['c']:.1f}/{run['T1']:.1f}) = {solution:.2f}. " + said[0].format(m=measured),
                     f"对：1 / (1/2 + {run['c']:.1f}/{run['T1']:.1f}) = {solution:.2f}。" + said[1].format(m=measured))
    if near(value, 2, rel=0.03):
        return wrong("That is the ideal speed-up: it leaves out c, the all-reduce that does not shrink.",
                     "这是理想的加速比：它没有算上 c，也就是不会缩短的那次 all-reduce。")
    if near(value, 1 / (1 + run["c"] / run["T1"]), rel=0.03):
        return wrong("That uses N = 1: on 2 ranks each rank computes T1/2.",
                     "这相当于取 N = 1：在 2 个 rank 上，每个 rank 的计算时间是 T1/2。")
    return wrong("Not quite: T1 is the step on 1 rank, c the comm plus wait on 2 ranks, both in ms from part 4; "
                 "put them in 1 / (1/2 + c/T1).",
                 "还不对：T1 是 1 个 rank 时的一步，c 是 2 个 rank 时的通信加等待，都取自第 4 部分（毫秒）；把它们代入 "
                 "1 / (1/2 + c/T1)。")


def _a_core_each(run):
    return 4 * run["B"] / ((run["compute1"] + run["comm4"]) / 1000)


@exercise("14.3", solution=_a_core_each, mistake=lambda run: _a_core_each(run) / 1000)
def a_core_each(answer, run):
    value, solution, measured = number(answer), _a_core_each(run), run["measured"]
    if near(value, solution, rel=0.07):
        return right(f"Yes: about {solution:,.0f} samples/s, {solution / measured:.2f}x what 4 ranks got on this "
                     "machine. It is an estimate: the comm of 4 ranks was itself measured on shared cores.",
                     f"对：大约每秒 {solution:,.0f} 个样本，是本机上 4 个 rank 实测值的 {solution / measured:.2f} 倍。"
                     "这只是一个估计：4 个 rank 的通信时间本身也是在共用的核心上测得的。")
    if value > 0 and (near(value * 1000, solution, rel=0.07) or near(value / 1000, solution, rel=0.07)):
        return wrong("Check the units: part 4 prints milliseconds; the samples per second need seconds.",
                     "检查单位：第 4 部分打印的是毫秒；每秒的样本数要用秒来算。")
    if near(value, 4 * run["B"] / (run["compute1"] / 1000), rel=0.03):
        return wrong("That leaves out the communication: a core each does not make the all-reduce free.",
                     "这没有算上通信：每个 rank 都有自己的核心，并不能让 all-reduce 不花时间。")
    return wrong(f"Not quite: 4 x {run['B']} samples per step, and a step of (compute on 1 rank + comm on 4 ranks) "
                 "seconds.",
                 f"还不对：每步 4 × {run['B']} 个样本，一步耗时为（1 个 rank 的计算时间 + 4 个 rank 的通信时间）秒。")


def _batch_for_90(run):
    return run["B"] * 9 * (run["comm2"] + run["wait2"]) / run["compute2"]


def _accepted(run):
    """The batches that follow from part 4's printout, where compute, comm and wait are each rounded to 0.1 ms
    (so each may be off by 0.05 ms), with 10% to spare."""
    compute = round(run["compute2"], 1)
    waiting = round(run["comm2"], 1) + round(run["wait2"], 1)
    low = run["B"] * 9 * max(0.0, waiting - 0.1) / (compute + 0.05)
    high = run["B"] * 9 * (waiting + 0.1) / max(0.05, compute - 0.05)
    solution = _batch_for_90(run)
    return min(low, solution) * 0.9, max(high, solution) * 1.1


def _batch_mistake(run):
    """This run's batch, the typical mistake; on a machine where that batch already is the answer (its
    efficiency at 2 ranks about 0.9), a batch far too large."""
    low, high = _accepted(run)
    if low <= run["B"] <= high:
        return 3 * high + run["B"]
    return run["B"]


@exercise("14.4", solution=lambda run: round(_batch_for_90(run)), mistake=_batch_mistake)
def batch_for_90(answer, run):
    value, solution = number(answer), _batch_for_90(run)
    low, high = _accepted(run)
    if low <= value <= high:
        return right(f"Yes: about {solution:,.0f} samples per rank. The compute must be 9 times the communication "
                     f"(0.9 = 9 / (9 + 1)), and {run['compute2']:.1f} ms of compute comes from {run['B']} samples. "
                     "Bigger batches per rank scale better, if the model still trains well with the bigger global batch.",
                     f"对：每个 rank 大约 {solution:,.0f} 个样本。计算时间必须是通信时间的 9 倍（0.9 = 9 / (9 + 1)），而 "
                     f"{run['compute2']:.1f} 毫秒的计算来自 {run['B']} 个样本。每个 rank 的批次越大，扩展性越好，前提是"
                     "模型在更大的全局批次下仍然训练得好。")
    if near(value, run["B"], rel=0.05):
        return wrong("That is the batch of this run: its efficiency at 2 ranks is what the table shows.",
                     "这是本次运行的批次：它在 2 个 rank 时的并行效率就是表格里的那个值。")
    return wrong(f"Not quite: with batch b, compute is compute2 x b / {run['B']} while the communication stays; find "
                 "the b for which compute / (compute + communication) = 0.9.",
                 f"还不对：批次为 b 时，计算时间为 compute2 × b / {run['B']}，而通信时间不变；求使“计算 /（计算 + 通信）"
                 "= 0.9”成立的 b。")
