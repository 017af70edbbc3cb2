"""Lesson 5: mixed precision on CPU and DataLoader workers."""
from . import exercise, near, number, right, whole_number, wrong

BF16_AFTER_ONE = 1 + 2 ** -7  # 7 stored fraction bits: the last one is worth 2**-7


@exercise("5.1", solution=lambda run: BF16_AFTER_ONE, mistake=lambda run: 1 + 2 ** -8)
def bf16_after_one(answer, run):
    value = number(answer)
    if near(value, BF16_AFTER_ONE, rel=0, absolute=1e-5):
        return right("1 + 2⁻⁷ = 1.0078125: with 7 stored fraction bits, the last one is worth 2⁻⁷ next to 1; "
                     "everything between 1 and it rounds to one of the two.",
                     "1 + 2⁻⁷ = 1.0078125：存储 7 位尾数时，在 1 附近最后一位的值是 2⁻⁷；1 与它之间的数都会舍入为两者之一。")
    if near(value, 1 + 2 ** -8, rel=0, absolute=1e-6):
        return wrong("that would need 8 stored fraction bits; the 8th significant bit of bf16 is the implicit "
                     "leading 1.",
                     "那需要显式存储 8 位尾数；bf16 的第 8 位有效位是隐含的前导 1。")
    if value <= 1:
        return wrong("the number must be greater than 1.", "这个数必须大于 1。")
    if value < BF16_AFTER_ONE:
        return wrong("bf16 cannot hold that number: it rounds to 1 (test it with .bfloat16()). Think of the value "
                     "of the last stored fraction bit.",
                     "bf16 表示不了这个数：它会舍入为 1（用 .bfloat16() 试一试）。想一想最后一位存储的尾数位值多少。")
    return wrong("bf16 has a number closer to 1 than that: what is the last of 7 fraction bits worth?",
                 "bf16 中还有比它更接近 1 的数：7 位尾数中的最后一位值多少？")


def break_even(run):
    saved_per_sample = (run["activations32"] - run["activations16"]) / run["batch"]
    return run["copies"] / saved_per_sample


@exercise("5.2", solution=break_even, mistake=lambda run: run["copies"] * run["batch"] / run["activations32"])
def autocast_break_even(answer, run):
    value, goal = number(answer), break_even(run)
    if near(value, goal, rel=0.1):
        return right(f"about {goal:.0f} samples: each sample saves the difference of the two activation sizes "
                     "divided by 64, and the weight copies cost the same whatever the batch; beyond this batch "
                     "autocast keeps fewer bytes.",
                     f"约 {goal:.0f} 个样本：每个样本省下的是两种激活值大小之差除以 64，而权重副本无论批次多大都是同样的"
                     "开销；批次超过这个大小，autocast 保存的字节数就更少。")
    if near(value, run["copies"] * run["batch"] / run["activations32"], rel=0.1):
        return wrong("autocast does not remove the activations, it halves them: count what one sample saves, "
                     "the difference between the float32 and the bf16 activations (per sample).",
                     "autocast 并没有去掉激活值，只是把它们减半：算一算一个样本省下多少，即 float32 与 bf16 激活值之差"
                     "（按每个样本算）。")
    return wrong("set the weight copies' bytes equal to what the batch saves: (float32 activations − bf16 "
                 "activations) / 64 per sample, times the batch.",
                 "让权重副本的字节数等于整个批次省下的字节数：每个样本省下（float32 激活值 − bf16 激活值）/ 64，再乘以批大小。")


def own_cores(run):
    return max(0, (run["usable"] - run["ranks"]) // run["ranks"])


@exercise("5.3", solution=own_cores, mistake=lambda run: run["usable"])
def workers_with_a_core(answer, run):
    n, goal = whole_number(answer), own_cores(run)
    if n == goal:
        return right(f"{goal}: {run['usable']} usable cores, minus one per rank, leaves "
                     f"{max(0, run['usable'] - run['ranks'])}, shared by the {run['ranks']} ranks' workers.",
                     f"{goal}：{run['usable']} 个可用的核心，每个 rank 先占一个，剩下 {max(0, run['usable'] - run['ranks'])} "
                     f"个，由 {run['ranks']} 个 rank 的工作进程分。")
    if n < 0:
        return wrong("a number of workers is 0 or more.", "工作进程数是 0 或更多。")
    if n > goal:
        return wrong("too many: count all processes, the ranks themselves too, and the workers of every rank, "
                     "against the usable cores.",
                     "太多了：把所有进程都算上，包括 rank 自己和每个 rank 的工作进程，再和可用的核心数比较。")
    return wrong("more would still fit: each rank needs one core, the rest is for the workers of all the ranks.",
                 "还能多放一些：每个 rank 需要一个核心，其余的核心归所有 rank 的工作进程。")


def started(run):
    return run["ranks"] * run["workers"] * run["epochs"]


@exercise("5.4", solution=started, mistake=lambda run: run["ranks"] * run["workers"])
def workers_started(answer, run):
    n, goal = whole_number(answer), started(run)
    if n == goal:
        return right(f"{goal}: without persistent_workers a DataLoader starts new workers at every epoch, "
                     f"{run['workers']} per rank, so {run['ranks']} × {run['workers']} × {run['epochs']}; the run "
                     f"showed {run['seen']} different worker pids per rank for 2 epochs.",
                     f"{goal}：不设置 persistent_workers 时，DataLoader 每个 epoch 都启动新的工作进程，每个 rank "
                     f"{run['workers']} 个，所以是 {run['ranks']} × {run['workers']} × {run['epochs']}；运行中每个 rank "
                     f"在 2 个 epoch 里出现了 {run['seen']} 个不同的工作进程 pid。")
    if n == run["ranks"] * run["workers"]:
        return wrong("that is what persistent workers would start. Look at how many different worker pids one rank "
                     "saw in 2 epochs without them.",
                     "这是常驻工作进程才会启动的数量。看看不设置它时，一个 rank 在 2 个 epoch 里出现了多少个不同的工作进程 pid。")
    if n == run["workers"] * run["epochs"]:
        return wrong("that is one rank's count: every rank has its own workers.",
                     "这是一个 rank 的数量：每个 rank 都有自己的工作进程。")
    return wrong("count per epoch: how many workers does each rank start, and how many ranks are there?",
                 "按 epoch 来数：每个 rank 每个 epoch 启动几个工作进程？一共有几个 rank？")
