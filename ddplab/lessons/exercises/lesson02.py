"""Lesson 2 (data parallelism by hand vs DDP): the exercises' judges."""
from . import exercise, near, number, right, unit_slip, whole_number, wrong, wrong_unit


@exercise("2.1", solution=lambda run: run["lr"] * 8, mistake=lambda run: run["lr"] * run["world_size"])
def forgot_to_divide(answer, run):
    lr, n = run["lr"], run["world_size"]
    if near(answer, lr * 8, rel=0.02):
        return right(f"on 8 ranks the sum is 8 times the average gradient: the same steps as a correct run with lr = 8 × {lr} = "
                     f"{8 * lr:g}. The mistake hides in the number of ranks: the same code trains differently on 4 "
                     "and on 8.",
                     f"8 个 rank 时，梯度之和是平均梯度的 8 倍：每一步都与学习率为 8 × {lr} = {8 * lr:g} 的正确训练相同。错误藏在"
                     "rank 的数量里：同一段代码在 4 个和 8 个 rank 上训练出不同的结果。")
    if near(answer, lr * n, rel=0.02):
        return wrong(f"that is for this run's {n} ranks: how many gradients does the sum add up on 8?",
                     f"这是这次运行的 {n} 个 rank 的情况：8 个 rank 时，求和要加上多少个梯度？")
    if number(answer) < lr:
        return wrong("forgetting to divide makes each step larger, not smaller.",
                     "忘记除以 world_size 会让每一步变大，而不是变小。")
    return wrong("the sum of the ranks' gradients is world_size times their average: what learning rate makes a "
                 "correct step that large?",
                 "各 rank 梯度之和是它们平均值的 world_size 倍：用什么学习率，正确的一步才有这么大？")


def _weight(run):
    return run["per_rank"] / run["small"]


@exercise("2.2", solution=_weight, mistake=lambda run: 1)
def uneven_shard(answer, run):
    value, big, small, n = _weight(run), run["per_rank"], run["small"], run["world_size"]
    if near(answer, value, rel=0.02):
        return right(f"each rank's gradient is the mean over its own samples, and DDP averages the {n} ranks: a "
                     f"sample weighs 1/({n}·{small}) on rank 3 and 1/({n}·{big}) elsewhere, {value:g} times as much. "
                     "That is not the gradient of the global batch, where every sample weighs the same.",
                     f"每个 rank 的梯度是它自己样本上的平均，DDP 再对 {n} 个 rank 求平均：rank 3 上一个样本的权重是 "
                     f"1/({n}·{small})，其他 rank 上是 1/({n}·{big})，是后者的 {value:g} 倍。这不再是全局批次的梯度，"
                     "在全局批次里每个样本的权重都相同。")
    if near(answer, 1, rel=0.02):
        return wrong("DDP averages the ranks' gradients, each a mean over its own shard: what is one sample's share "
                     "of a shard of 8, and of a shard of 16?",
                     "DDP 对各 rank 的梯度求平均，而每个梯度又是它自己分片上的平均：一个样本在 8 个样本的分片里占多少，"
                     "在 16 个样本的分片里又占多少？")
    if near(answer, 1 / value, rel=0.02):
        return wrong("the other way round: in a smaller shard each sample has a larger share of its rank's mean.",
                     "方向反了：分片越小，每个样本在它所在 rank 的平均值中所占的份额越大。")
    return wrong("write one sample's weight in the averaged gradient on rank 3 and on another rank, and divide.",
                 "写出 rank 3 上和另一个 rank 上一个样本在平均梯度中的权重，再相除。")


@exercise("2.3", solution=lambda run: run["start"], mistake=lambda run: 0.0)
def seeds_stay_apart(answer, run):
    start = run["start"]
    if near(answer, start, rel=0.02):
        return right(f"still {start:.3f}: with averaged gradients every rank takes exactly the same step, so the "
                     "differences between the ranks never change, however long you train. Only DDP's broadcast at "
                     "the start removes them.",
                     f"仍然是 {start:.3f}：梯度求平均之后，每个 rank 走的每一步都完全相同，所以各 rank 之间的差异永远"
                     "不变，无论训练多久。只有 DDP 在开始时的那次广播能消除它。")
    if near(answer, 0, absolute=start / 2):
        return wrong("averaging gives every rank the same step: does adding the same step to two different points "
                     "bring them closer?",
                     "求平均让每个 rank 走同样的一步：给两个不同的点加上同样的一步，会让它们靠近吗？")
    return wrong("look at the 'seed = rank' curve on the left: how does its spread change from step 0 to step 40?",
                 "看左图中 “seed = rank” 那条曲线：它的差值从第 0 步到第 40 步是怎样变化的？")


def _deeper(run):
    return 4 * (20 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4)


@exercise("2.4", solution=_deeper, mistake=lambda run: run["world_size"] * _deeper(run))
def deeper_bytes(answer, run):
    value, n = _deeper(run), run["world_size"]
    found = unit_slip(answer, value, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    got = whole_number(answer)
    if abs(got - value) <= 4:
        return right(f"{value // 4} parameters (the {run['bytes_per_step'] // 4} of this model and 32·32 + 32 more), 4 "
                     f"bytes each: {value} bytes, the size of the gradients, whatever the number of ranks.",
                     f"{value // 4} 个参数（这个模型的 {run['bytes_per_step'] // 4} 个，再加上 32·32 + 32 个），每个 4 "
                     f"字节：{value} 字节，正好是梯度的大小，与 rank 的数量无关。")
    if abs(got - n * value) <= 4 * n:
        return wrong("CommCounter counts what this rank hands to all_reduce: its own gradients, once, not the "
                     f"{n} ranks' together.",
                     f"CommCounter 统计的是这个 rank 交给 all_reduce 的数据：它自己的梯度，一份，而不是 {n} 个 rank "
                     "的合在一起。")
    if abs(got - value // 4) <= 1:
        return wrong("that is the number of gradients: how many bytes is a float32?",
                     "这是梯度的个数：一个 float32 是多少字节？")
    return wrong("count the weights and biases of the three Linear layers (a Linear(a, b) has a·b + b) and take 4 "
                 "bytes each.",
                 "数一数三个 Linear 层的权重和偏置（Linear(a, b) 有 a·b + b 个参数），每个 4 字节。")
