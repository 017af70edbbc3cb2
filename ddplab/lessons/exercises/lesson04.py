"""Lesson 4 (gradient accumulation with no_sync): the exercises' judges."""
from . import exercise, letter, near, number, right, whole_number, wrong


@exercise("4.1", solution=lambda run: run["lr"] / run["K"], mistake=lambda run: run["lr"] * run["K"])
def undivided_loss(answer, run):
    lr, k = run["lr"], run["K"]
    if near(answer, lr / k, rel=0.02):
        return right(f"without / {k} the {k} micro-batches add up to {k} times the gradient of the mean loss, so "
                     f"lr / {k} = {lr / k:g} gives the big batch's steps again. Both accumulating ways still agree "
                     "with each other (they add the same gradients); only the big batch differs.",
                     f"不除以 {k} 时，{k} 个微批次的梯度加起来是平均损失梯度的 {k} 倍，所以用 lr / {k} = {lr / k:g} "
                     "就又能走出与大批次相同的步。两种累积做法仍然彼此一致（它们加起来的是同样的梯度）；只有大批次"
                     "不同。")
    if near(answer, lr * k, rel=0.02):
        return wrong("the gradients are already too large: should the learning rate grow or shrink to make up for it?",
                     "梯度已经太大了：学习率应该变大还是变小来抵消它？")
    if near(answer, lr, rel=0.02):
        return wrong(f"with lr = {lr:g} every accumulated step is {k} times too large: the gradients add up, they are "
                     "not averaged.",
                     f"学习率为 {lr:g} 时，每一步累积的更新都是应有大小的 {k} 倍：梯度是相加的，而不是求平均。")
    return wrong(f"how much larger is the sum of {k} gradients of the undivided loss than the gradient of the mean?",
                 f"不除以 {k} 的损失，{k} 个梯度之和比平均损失的梯度大多少？")


@exercise("4.2", solution=lambda run: "a", mistake=lambda run: "b")
def all_inside(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "a":
        return right("no backward of that step was prepared for an all-reduce, so the counter does not move, and "
                     "opt.step() applies each rank's own gradient: the ranks differ from then on, and DDP never "
                     "brings them back (it all-reduces gradients, not parameters).",
                     "这一步里没有哪次反向传播为 all-reduce 做过准备，所以计数器不动，opt.step() 用的是每个 rank 自己的"
                     "梯度：从此各 rank 就不一样了，DDP 也不会把它们拉回来（它 all-reduce 的是梯度，不是参数）。")
    if choice == "b":
        return wrong("opt.step() runs before the next forward, and zero_grad() clears the gradients first: what "
                     "would be left to all-reduce?",
                     "opt.step() 在下一次前向计算之前就运行了，而且 zero_grad() 会先清空梯度：还剩下什么可以 "
                     "all-reduce？")
    return wrong("the same start is not enough: the ranks trained on different micro-batches, so their gradients "
                 "differ.",
                 "起点相同还不够：各 rank 在不同的微批次上训练，所以它们的梯度不同。")


@exercise("4.3", solution=lambda run: 8 * run["buckets"], mistake=lambda run: 8)
def eight_micro_batches(answer, run):
    buckets, got = run["buckets"], whole_number(answer)
    if got == 8 * buckets:
        return right(f"8 backward() calls, each all-reducing the {buckets} buckets: {8 * buckets} calls per step (no_sync "
                     f"and the big batch still make {buckets}). The buckets depend on the model, not on the size of a "
                     "micro-batch.",
                     f"8 次 backward()，每次都 all-reduce {buckets} 个桶：每步 {8 * buckets} 次调用（no_sync 和大批次"
                     f"仍然是 {buckets} 次）。桶取决于模型，与微批次的大小无关。")
    if got == 8:
        return wrong("CommCounter counts one call per bucket: how many buckets does each backward() all-reduce?",
                     "CommCounter 每个桶计一次调用：每次 backward() 要 all-reduce 几个桶？")
    if got == buckets:
        return wrong("that is no_sync's count: syncing every micro-batch all-reduces at every backward().",
                     "这是 no_sync 的次数：每个微批次都同步时，每次 backward() 都要 all-reduce。")
    return wrong("count the backward() calls of one optimizer step, and the buckets each of them all-reduces.",
                 "数一数一次优化器更新中有几次 backward()，以及每次要 all-reduce 几个桶。")


def _one_cap_buckets(run):
    """Buckets per step with bucket_cap_mb=25 given: every bucket, the first included, closes at 25 MiB."""
    cap, total = 25 * 2**20, run["grad_bytes"]
    return 1 if total < cap else None  # this model's gradients (2.7 MB) all fit in one


@exercise("4.4", solution=_one_cap_buckets, mistake=lambda run: run["buckets"])
def cap_25(answer, run):
    got, mb = whole_number(answer), run["grad_bytes"] / 1e6
    if got == _one_cap_buckets(run):
        return right(f"one bucket of all {mb:.2f} MB: the 1 MiB first bucket is DDP's default only while bucket_cap_mb "
                     "is left unset (None); given any value, the first bucket closes at that cap too, and 25 MiB "
                     "holds every gradient. That one bucket is ready only when the first layer's gradient is, at the "
                     "very end of backward: no all-reduce overlaps the computing any more.",
                     f"一个桶装下全部 {mb:.2f} MB：只有在不设置 bucket_cap_mb（None）时，DDP 才默认使用 1 MiB 的第一个桶；"
                     "只要给了任何值，第一个桶也按这个上限封口，而 25 MiB 装得下所有梯度。这个桶要等到第一层的梯度算好"
                     "才就绪，也就是反向传播的最后：all-reduce 不再与计算重叠。")
    if got == run["buckets"]:
        return wrong("25 MiB is the default of the later buckets, but is the first bucket still capped at 1 MiB when "
                     "you pass bucket_cap_mb yourself? Read how DDP picks first_bucket_bytes_cap.",
                     "25 MiB 是后面各个桶的默认上限；但你自己传入 bucket_cap_mb 时，第一个桶还是 1 MiB 吗？看看 DDP "
                     "怎样确定 first_bucket_bytes_cap。")
    if number(answer) < 1:
        return wrong("every step all-reduces every gradient once, in at least one bucket.",
                     "每一步都要把每个梯度 all-reduce 一次，至少要一个桶。")
    return wrong(f"a bucket closes once it holds at least its cap: how many buckets do {mb:.2f} MB fill with a "
                 "25 MiB cap on every bucket?",
                 f"一个桶装到至少达到上限时封口：如果每个桶的上限都是 25 MiB，{mb:.2f} MB 能装满几个桶？")
