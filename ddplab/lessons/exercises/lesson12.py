"""Lesson 12 (communication cost): the exercises' judges."""
from . import exercise, letter, near, right, unit_slip, whole_number, wrong, wrong_unit


def _ring_mb(run):
    n = run["ranks"]
    return 2 * (n - 1) / n * run["nbytes"] / 1e6


@exercise("12.1", solution=_ring_mb, mistake=lambda run: run["nbytes"] / 1e6)
def ring_bytes(answer, run):
    value, size, n = _ring_mb(run), run["nbytes"] / 1e6, run["ranks"]
    if near(answer, value, rel=0.03):
        return right(f"2(N−1)/N of the tensor: N − 1 chunks of 1/N in the reduce-scatter and N − 1 more in the "
                     f"all-gather, so 2 × {n - 1}/{n} × {size:g} MB = {value:g} MB; however many ranks, never more "
                     "than twice the tensor.",
                     f"张量大小的 2(N−1)/N：reduce-scatter 中发送 N − 1 块、每块 1/N，all-gather 中再发送 N − 1 块，"
                     f"所以是 2 × {n - 1}/{n} × {size:g} MB = {value:g} MB；无论有多少个 rank，都不会超过张量大小的两倍。")
    if near(answer, size, rel=0.03):
        return wrong("that is the tensor's size: in a ring each rank sends its chunks twice, once summing and once "
                     "passing on the sums.",
                     "这是张量本身的大小：在环中每个 rank 要把它的块发送两轮，一轮求和，一轮把求和结果传下去。")
    if near(answer, 2 * size, rel=0.03):
        return wrong("twice the tensor is the limit for many ranks; with N ranks each phase sends N − 1 chunks of 1/N.",
                     "两倍的张量大小是 rank 很多时的极限；N 个 rank 时，每一轮发送 N − 1 块、每块为张量的 1/N。")
    if n != 4 and near(answer, 1.5 * size, rel=0.03):
        return wrong(f"that is 2(N−1)/N for 4 ranks, 1.5 times the tensor; here N = {n}.",
                     f"这是 4 个 rank 时的 2(N−1)/N，即张量的 1.5 倍；这里 N = {n}。")
    found = unit_slip(answer, value, "MB")
    if found:
        return wrong_unit(found, "MB")
    return wrong("count the chunks: the tensor is cut into N; each phase of the ring sends N − 1 of them.",
                 "数一数块数：张量被切成 N 块；环的每一轮发送其中的 N − 1 块。")


def _predicted_ms(run):
    return 1e3 * (run["alpha"] + 64e6 * run["beta"])


@exercise("12.2", solution=_predicted_ms, mistake=lambda run: 1e3 * run["alpha"])
def predict_64mb(answer, run):
    value, alpha_ms = _predicted_ms(run), 1e3 * run["alpha"]
    if near(answer, value, rel=0.1):
        return right(f"α + n·β = {alpha_ms:.2f} ms + 64e6 bytes / {1 / run['beta'] / 1e9:.2f} GB/s = {value:.1f} ms: at "
                     "this size the bytes dominate, so the model gives close to 4 times the 16 MB time. Time it to see how "
                     "well a straight line fits this machine.",
                     f"α + n·β = {alpha_ms:.2f} ms + 64e6 字节 / {1 / run['beta'] / 1e9:.2f} GB/s = {value:.1f} ms：这么大"
                     "的消息，时间主要花在字节上，所以模型给出的接近 16 MB 耗时的 4 倍。实际计时看看，直线模型与这台机器"
                     "吻合得怎样。")
    if near(answer, alpha_ms, rel=0.1):
        return wrong("α alone is the cost of a tiny message; add the time of the bytes, n·β.",
                     "单独的 α 是一条很小的消息的开销；还要加上字节所需的时间 n·β。")
    if near(answer, value / 1e3, rel=0.1):
        return wrong_unit("seconds", "milliseconds")
    if near(answer, value * 1e3, rel=0.1):
        return wrong_unit("microseconds", "milliseconds")
    return wrong("n is 64e6 bytes; β is 1 / (the printed GB/s × 1e9) seconds per byte; α is in µs.",
                 "n 是 64e6 字节；β 是每字节 1 / (打印的 GB/s × 1e9) 秒；α 的单位是 µs。")


def buckets_for(grads, cap_mb):
    """The number of buckets DDP makes: whole gradients, in order, each bucket closed once it holds at
    least cap_mb MiB (the last one with whatever is left)."""
    cap, held, count = cap_mb * 1024 * 1024, 0, 0
    for n in grads:
        held += 4 * n
        if held >= cap:
            count, held = count + 1, 0
    return count + (held > 0)


@exercise("12.3", solution=lambda run: buckets_for(run["grads"], run["cap_mb"]), mistake=lambda run: len(run["grads"]))
def tiny_cap(answer, run):
    n, value = whole_number(answer), buckets_for(run["grads"], run["cap_mb"])
    cap = run["cap_mb"] * 1024 * 1024
    if n == value:
        return right(f"the cap is {cap:.0f} bytes: the first gradient ({4 * run['grads'][0]} bytes) is below it, so "
                     f"the first bucket takes the second one too; every later gradient reaches the cap on its own: "
                     f"{value} all-reduces. (No cap gives 4 here: try 0.01 and 0.1.)",
                     f"上限是 {cap:.0f} 字节：第一个梯度（{4 * run['grads'][0]} 字节）不到上限，所以第一个桶还要装入第二个"
                     f"梯度；之后的每个梯度单独就能达到上限：{value} 次 all-reduce。（在这里，没有哪个上限能得到 4 次："
                     "试试 0.01 和 0.1。）")
    if n == len(run["grads"]):
        return wrong("a bucket closes once it holds at least its cap: does the first gradient alone reach it?",
                     "一个桶装入的量至少达到上限时才封口：第一个梯度单独能达到上限吗？")
    return wrong("multiply each gradient's elements by 4 bytes and fill buckets in order, closing each once it holds "
                 f"at least {cap:.0f} bytes.",
                 f"把每个梯度的元素个数乘以 4 字节，按顺序装桶，装入的量至少达到 {cap:.0f} 字节时就封口。")


@exercise("12.4", solution=lambda run: "b", mistake=lambda run: "a")
def bigger_model(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "b":
        return right(f"the bytes grow with the parameters (about 9 times), the compute with the parameters times the "
                     f"batch (about 9 × 8 times), so communication's share, {run['share']:.0%} here, shrinks. That is "
                     "why scaling works best with large batches.",
                     f"字节数随参数数量增长（约为原来的 9 倍），计算量随参数数量乘以批大小增长（约为 9 × 8 倍），所以通信"
                     f"所占的比例（这里是 {run['share']:.0%}）会变小。这就是为什么批次大时扩展的效果最好。")
    if choice == "a":
        return wrong("the bytes do grow about 9 times; what happens to the compute, with 9 times the parameters and 8 "
                     "times the batch?",
                     "字节数确实约为原来的 9 倍；而参数为 9 倍、批次为 8 倍时，计算量会怎样？")
    return wrong("the all-reduce does not depend on the batch size; does the compute?",
                 "all-reduce 与批大小无关；计算量呢？")
