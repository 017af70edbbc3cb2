"""Lesson 16 (one algorithm in three frameworks: PyTorch, TensorFlow and JAX): the exercises' judges."""
from . import Unreadable, exercise, letter, near, number, right, whole_number, wrong


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
        return right("DDP's average of the ranks' means weighs each of the last replica's 10 examples more than "
                     "another rank's; TensorFlow's sum over 64 weighs every example equally, but divides by 64 where "
                     "there are fewer: the true mean's gradient times (examples there are) / 64. Give "
                     "compute_average_loss the real global count and it is right.",
                     "DDP 对各 rank 的平均值再求平均，最后那个副本的 10 个样本中每一个的权重都比别的 rank 的样本大；"
                     "TensorFlow 把总和除以 64，每个样本的权重相同，但实际的样本没有 64 个：得到的是真正平均值梯度的"
                     "（实际样本数 / 64）倍。把真实的全局样本数交给 compute_average_loss，它就对了。")
    if choice == "c":
        return wrong("every example weighs the same there, but what does it divide the sum by, and how many "
                     "examples are there?",
                     "那里每个样本的权重确实相同，但它用什么数去除总和？一共又有多少个样本？")
    return wrong("in DDP's convention, how much does one of the last replica's 10 examples weigh, against one of "
                 "another rank's?",
                 "在 DDP 的约定中，最后那个副本 10 个样本中的一个，与别的 rank 的一个样本相比，权重各是多少？")


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
                     f"the means, {plain:g}, counts the last replica's 10 examples as if they were 16.",
                     f"各损失之和加起来是 {total:g}，共 {sum(run['counts'])} 个样本：{value:.4f}。各平均值的平均值 "
                     f"{plain:g} 把最后那个副本的 10 个样本当成了 16 个。")
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


def _habit_lr(run):
    return run["lr"] / run["ratio"]


@exercise("16.5", solution=_habit_lr, mistake=lambda run: run["lr"] * run["ratio"])
def habit_learning_rate(answer, run):
    value, lr, n = _habit_lr(run), run["lr"], run["replicas"]
    given = number(answer)
    if near(given, value, rel=0.01):
        return right(f"the habit's gradient is the sum of {n} replicas' local-mean gradients: {run['ratio']:.3f} times "
                     f"DDP's average (section 3). SGD moves by lr × gradient, so lr = {lr:g} / {run['ratio']:.3f} = "
                     f"{value:.4g} makes the same step. That holds for updates proportional to the gradient (SGD, "
                     "with or without momentum) only: Adam divides the scale out by itself (up to its epsilon), and a "
                     "weight decay added to the gradient is not scaled, so fixing the loss (compute_average_loss) is "
                     "the real cure.",
                     f"PyTorch 习惯得到的梯度是 {n} 个副本各自本地平均梯度之和：是 DDP 平均梯度的 {run['ratio']:.3f} "
                     f"倍（第 3 节）。SGD 每步移动 lr × 梯度，所以 lr = {lr:g} / {run['ratio']:.3f} = {value:.4g} 走出同样"
                     "的一步。这只对与梯度成正比的更新成立（SGD，有没有动量都一样）：Adam 自己就会把这个倍数除掉（只差"
                     "它的 epsilon），加在梯度上的权重衰减也不会跟着放大，所以真正的解决办法是改损失"
                     "（compute_average_loss）。")
    if near(given, lr * run["ratio"], rel=0.01):
        return wrong("that makes each step larger still. Is the habit's gradient too large or too small?",
                     "这样每一步会更大。PyTorch 习惯得到的梯度是太大还是太小？")
    if near(given, lr, rel=0.01):
        return wrong("with lr unchanged, each update is the gradient's ratio to DDP's (section 3) times DDP's.",
                     "学习率不变时，每次更新都是 DDP 更新的若干倍，倍数就是第 3 节测得的梯度之比。")
    return wrong("section 3 printed how many times DDP's gradient the habit's is; SGD's step is lr × gradient.",
                 "第 3 节打印了 PyTorch 习惯的梯度是 DDP 梯度的多少倍；SGD 的一步是 lr × 梯度。")


def _two(answer):
    if isinstance(answer, str) or not hasattr(answer, "__len__") or len(answer) != 2:
        raise Unreadable("give two whole numbers, like (8, 16).", "请给出两个整数，例如 (8, 16)。")
    return tuple(whole_number(a) for a in answer)


@exercise("16.6", solution=lambda run: (32, 64), mistake=lambda run: (32, 32))
def two_workers(answer, run):
    per_replica, global_batch = _two(answer)
    if (per_replica, global_batch) == (32, 64):
        return right("dataset.batch(64) is the global batch: 2 replicas get 32 examples each, and "
                     "compute_average_loss divides each replica's sum by the global 64. The sum of the two replicas' "
                     "gradients is then the gradient of the mean over 64, DDP's update with 4 ranks of 16.",
                     "dataset.batch(64) 是全局批次：2 个副本各拿到 32 个样本，compute_average_loss 把每个副本的总和"
                     "除以全局的 64。两个副本梯度之和就是 64 个样本平均损失的梯度，也就是 4 个 rank、每个 16 个样本的 "
                     "DDP 的更新。")
    if per_replica == 16:
        return wrong("16 per replica on 2 replicas is a global batch of 32: half the examples DDP's step sees.",
                     "2 个副本、每个 16 个样本，全局批次只有 32：只是 DDP 一步所见样本的一半。")
    if per_replica != 32:
        return wrong("the global batch of 64 is cut evenly among the replicas: how many does each get?",
                     "64 个样本的全局批次平均分给各个副本：每个拿到多少？")
    if global_batch == 32:
        return wrong("dividing by the replica's own 32 is the PyTorch habit: with the gradients summed over 2 replicas, "
                     "the update comes out twice DDP's. Divide by what?",
                     "除以副本自己的 32 正是 PyTorch 的习惯：梯度再在 2 个副本之间求和，更新就成了 DDP 的 2 倍。应该除以什么？")
    return wrong("compute_average_loss divides each replica's sum by the global batch: how many examples does one "
                 "step see in all?",
                 "compute_average_loss 把每个副本的总和除以全局批大小：一步一共看到多少个样本？")
