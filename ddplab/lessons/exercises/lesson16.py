"""Lesson 16 (the same ideas in TensorFlow): the exercises' judges."""
from . import Unreadable, exercise, letter, near, right, whole_number, wrong


def _three(answer):
    if isinstance(answer, str) or not hasattr(answer, "__len__") or len(answer) != 3:
        raise Unreadable("give three whole numbers, like (1, 2, 3).", "请给出三个整数，例如 (1, 2, 3)。")
    return tuple(whole_number(a) for a in answer)


@exercise("16.1", solution=lambda run: (4, 2, 4), mistake=lambda run: (4, 4, 4))
def processes_workers_replicas(answer, run):
    processes, workers, replicas = _three(answer)
    if (processes, workers, replicas) == (4, 2, 4):
        return right("torchrun starts a process per GPU: 4 (RANK 0 to 3, LOCAL_RANK 0 and 1 on each machine). "
                     "TF_CONFIG lists one worker per machine: 2, each driving its 2 GPUs; the replicas are still one "
                     "per GPU: 4.",
                     "torchrun 为每个 GPU 启动一个进程：4 个（RANK 为 0 到 3，每台机器上的 LOCAL_RANK 为 0 和 1）。"
                     "TF_CONFIG 中每台机器一个 worker：2 个，各自驱动本机的 2 个 GPU；副本仍然是每个 GPU 一个：4 个。")
    if processes != 4:
        return wrong("count torchrun's processes again: one per GPU, on every machine.",
                     "再数一数 torchrun 的进程：每台机器上，每个 GPU 一个。")
    if workers != 2:
        return wrong("a MultiWorkerMirroredStrategy worker is one process per machine, whatever its number of GPUs.",
                     "MultiWorkerMirroredStrategy 的一个 worker 就是每台机器上的一个进程，不管它有几个 GPU。")
    return wrong("num_replicas_in_sync counts replicas, one per device, over all the workers.",
                 "num_replicas_in_sync 数的是副本：所有 worker 上每个设备一个。")


@exercise("16.2", solution=lambda run: "a", mistake=lambda run: "c")
def uneven_batches(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "a":
        return right("DDP's average of the ranks' means weighs rank 3's 10 examples as much as another rank's 16; "
                     "TensorFlow's sum over 64 weighs every example equally, but divides by 64 where there are 58: "
                     "the true mean's gradient times 58/64. Give compute_average_loss the real global count and it "
                     "is right.",
                     "DDP 对各 rank 的平均值再求平均，rank 3 的 10 个样本和别的 rank 的 16 个样本权重相同；TensorFlow "
                     "把总和除以 64，每个样本的权重相同，但实际只有 58 个样本：得到的是真正平均值梯度的 58/64。把真实"
                     "的全局样本数交给 compute_average_loss，它就对了。")
    if choice == "c":
        return wrong("every example weighs the same there, but what does it divide the sum by, and how many "
                     "examples are there?",
                     "那里每个样本的权重确实相同，但它用什么数去除总和？一共又有多少个样本？")
    return wrong("in DDP's convention, how much does one of rank 3's examples weigh, against one of rank 0's?",
                 "在 DDP 的约定中，rank 3 的一个样本与 rank 0 的一个样本，权重各是多少？")


def _true_mean(run):
    return sum(l * n for l, n in zip(run["losses"], run["counts"])) / sum(run["counts"])


def _mean_of_means(run):
    return sum(run["losses"]) / len(run["losses"])


@exercise("16.3", solution=_true_mean, mistake=_mean_of_means)
def global_mean(answer, run):
    value, plain = _true_mean(run), _mean_of_means(run)
    total = sum(l * n for l, n in zip(run["losses"], run["counts"]))
    if near(answer, value, rel=0.005, absolute=1e-3):
        return right(f"the loss sums add up to {total:g} over {sum(run['counts'])} examples: {value:.4f}. The mean of "
                     f"the means, {plain:g}, counts rank 3's 10 examples as if they were 16.",
                     f"各损失之和加起来是 {total:g}，共 {sum(run['counts'])} 个样本：{value:.4f}。各平均值的平均值 "
                     f"{plain:g} 把 rank 3 的 10 个样本当成了 16 个。")
    if near(answer, plain, rel=0.005):
        return wrong("that is what strategy.reduce(MEAN) gives: the average of the means. Weigh each mean by its "
                     "number of examples.",
                     "这是 strategy.reduce(MEAN) 给出的结果：各平均值的平均值。请按各自的样本数给每个平均值加权。")
    return wrong("each replica's loss sum is its mean times its number of examples; add them up and divide by the "
                 "number of all the examples.",
                 "每个副本的损失之和等于它的平均值乘以它的样本数；把它们加起来，再除以全部样本数。")


@exercise("16.4", solution=lambda run: 8 * 3 * run["wrong_calls"] // 4, mistake=lambda run: 3 * run["right_calls"])
def calls_per_update(answer, run):
    n, per_backward = whole_number(answer), run["wrong_calls"] // 4   # section 6: k = 4, one bucket
    if n == 8 * 3 * per_backward:
        return right(f"with the forward outside no_sync, every backward all-reduces all 3 buckets: 8 × 3 = {n}, where "
                     "the forward inside would make 3 (the last micro-batch's).",
                     f"前向在 no_sync 外面时，每次反向都对全部 3 个桶做 all-reduce：8 × 3 = {n}；而前向放在里面时只有 "
                     "3 次（最后一个微批次的）。")
    if n == 3:
        return wrong("3 is what the right way (forward and backward inside no_sync) makes. Here the forward is "
                     "outside: which backward passes all-reduce?",
                     "3 是正确写法（前向和反向都在 no_sync 里）的次数。这里前向在外面：哪几次反向会做 all-reduce？")
    if n == 8:
        return wrong("DDP makes one all-reduce per bucket, not per backward.",
                     "DDP 每个桶做一次 all-reduce，而不是每次反向做一次。")
    return wrong("count the backward passes that all-reduce, then the all-reduces each of them makes (one per "
                 "bucket).",
                 "先数出会做 all-reduce 的反向有几次，再数每次反向做几次 all-reduce（每个桶一次）。")
