"""Lesson 19 (sharded training with FSDP2): the exercises' judges."""
from . import exercise, letter, near, right, unit_slip, whole_number, wrong, wrong_unit


def _rows(rows, ranks, rank):
    """The rows `rank` holds of a tensor of `rows` rows sharded over `ranks` (torch.chunk, as FSDP2 does)."""
    size = -(-rows // ranks)
    return max(0, min(size, rows - rank * size))


def _held(run, rank=0):
    """Bytes of parameters, gradients and Adam's state a rank holds between steps: 16 per element of its shard,
    and 4 per parameter tensor for Adam's step counts (whole on every rank)."""
    width, ranks = run["width"], run["ranks"]
    elements = (run["layers"] * _rows(width, ranks, rank) + _rows(run["classes"], ranks, rank)) * (width + 1)
    return 16 * elements + 4 * run["tensors"]


def _params(run):
    return run["layers"] * run["width"] * (run["width"] + 1) + run["classes"] * (run["width"] + 1)


@exercise("19.1", solution=_held, mistake=lambda run: 16 * _params(run) // run["ranks"] + 4 * run["tensors"])
def held_on_sixteen(answer, run):
    value, ranks, tensors = _held(run), run["ranks"], run["tensors"]
    size = -(-run["width"] // ranks)
    try:
        n = whole_number(answer)
    except ValueError:  # (a number of MB, say)
        n = None
    if n == value - 4 * tensors:
        return wrong("almost: Adam's step counts are not sharded, and every rank keeps all of them.",
                     "差一点：Adam 的步数计数不分片，每个 rank 都保存全部。")
    if near(answer, value, rel=1e-5):  # (to a few bytes)
        return right(f"rank 0 holds ⌈{run['width']} / {ranks}⌉ = {size} rows of each block and "
                     f"{_rows(run['classes'], ranks, 0)} of the head, each row {run['width'] + 1} elements (weights and "
                     f"a bias): 16 bytes per element, plus Adam's {tensors} step counts, 4 bytes each: {value:,} bytes.",
                     f"rank 0 持有每个块的 ⌈{run['width']} / {ranks}⌉ = {size} 行和输出头的 {_rows(run['classes'], ranks, 0)} "
                     f"行，每行 {run['width'] + 1} 个元素（权重加一个偏置）：每个元素 16 字节，"
                     f"再加上 Adam 的 {tensors} 个步数计数，各 4 字节：共 {value:,} 字节。")
    if n is not None and n in (16 * _params(run) // ranks + 4 * tensors, 16 * _params(run) // ranks):
        return wrong("that spreads the parameters evenly; FSDP2 splits each tensor by rows, ⌈rows / N⌉ to a rank, "
                     "the first ranks first.",
                     "这是把参数平均分开了；FSDP2 按行切分每个张量，每个 rank 分到 ⌈行数 / N⌉ 行，从前面的 rank 开始分。")
    if n is not None and n == 16 * _params(run) + 4 * tensors:
        return wrong("that is the whole model's, as DDP holds it: how much of it is rank 0's?",
                     "这是整个模型的，就像 DDP 持有的那样：其中多少属于 rank 0？")
    slip = unit_slip(answer, value, "bytes")
    if slip:
        return wrong_unit(slip, "bytes")
    return wrong("count rank 0's rows of each tensor (⌈rows / N⌉), then 16 bytes per element and Adam's step counts, "
                 "as part 1 checked.",
                 "先数 rank 0 在每个张量中分到的行数（⌈行数 / N⌉），再按每个元素 16 字节计算，并加上 Adam 的步数计数，"
                 "就像第 1 部分核对的那样。")


def _units(run):
    """Padded bytes of all units, and of the root's (the head), on run["ranks"] ranks."""
    width, ranks = run["width"], run["ranks"]
    block = 4 * ranks * -(-width // ranks) * (width + 1)
    head = 4 * ranks * -(-run["classes"] // ranks) * (width + 1)
    return run["layers"] * block + head, head


def _ring_mb(run):
    everything, head = _units(run)
    n = run["ranks"]
    return (n - 1) / n * (everything + (everything - head) + everything) / 1e6


def _gloo_mb(run):
    everything, head = _units(run)
    n = run["ranks"]
    return ((n - 1) / n * (2 * everything - head) + 2 * (n - 1) / n * everything) / 1e6


@exercise("19.2", solution=_ring_mb, mistake=_gloo_mb)
def sent_on_eight(answer, run):
    value, n = _ring_mb(run), run["ranks"]
    everything, head = _units(run)
    if near(answer, value, rel=0.01):
        return right(f"two all-gathers (forward: every unit; backward: the blocks, not the root) and one ring "
                     f"reduce-scatter, each sending ({n}−1)/{n} of the padded units: {(n - 1) / n:.3f} × "
                     f"({everything / 1e6:.2f} + {(everything - head) / 1e6:.2f} + {everything / 1e6:.2f}) MB = "
                     f"{value:.2f} MB.",
                     f"两次 all-gather（前向：每个单元；反向：各个块，不含根模块）和一次环形 reduce-scatter，各发送填充后单元的 "
                     f"({n}−1)/{n}：{(n - 1) / n:.3f} × ({everything / 1e6:.2f} + {(everything - head) / 1e6:.2f} + "
                     f"{everything / 1e6:.2f}) MB = {value:.2f} MB。")
    if near(answer, _gloo_mb(run), rel=0.01):
        return wrong("that is gloo's reduce-scatter, which sends as much as an all-reduce; a ring reduce-scatter sends "
                     "(N−1)/N of its input.",
                     "这是 gloo 的 reduce-scatter，它发送的字节数与 all-reduce 相同；环形 reduce-scatter 只发送输入的 (N−1)/N。")
    four = dict(run, ranks=4)
    if near(answer, _ring_mb(four), rel=0.01) or near(answer, _gloo_mb(four), rel=0.01):
        return wrong(f"that is for 4 ranks: on {n}, each rank sends ({n}−1)/{n} of each collective's tensor.",
                     f"这是 4 个 rank 时的结果：在 {n} 个 rank 上，每个 rank 发送每次集合通信张量的 ({n}−1)/{n}。")
    if near(answer, (n - 1) / n * 2 * everything / 1e6, rel=0.01):
        return wrong("FSDP2 reshards the blocks after forward: backward all-gathers them again.",
                     "FSDP2 在前向之后把各个块重新分片了：反向时要再 all-gather 一次。")
    slip = unit_slip(answer, value, "MB")
    if slip:
        return wrong_unit(slip, "MB")
    return wrong("add up what each collective of one step sends: its tensor (padded) times (N−1)/N for an all-gather "
                 "and for a ring reduce-scatter; part 4 broke a step down the same way.",
                 "把一步中每次集合通信发送的字节加起来：all-gather 和环形 reduce-scatter 都发送（填充后的）张量的 "
                 "(N−1)/N；第 4 部分就是这样拆分一步的。")


@exercise("19.3", solution=lambda run: "d", mistake=lambda run: "a")
def prefetch_on_cpu(answer, run):
    choice = letter(answer, ("a", "b", "c", "d"))
    if choice == "d":
        return right(f"FSDP2 gathers with async_op=False in backward as in forward, and on CPU that call returns only "
                     f"once the all-gather is done: the prefetch changes the order, not the overlap. The lesson measured "
                     f"it in the forward, {run['overlap_ms']:.2f} ms of FSDP2's all-gathers in flight while a block "
                     "computed; backward's blocks were not timed, so to see it there, time them with hooks of your own.",
                     f"FSDP2 在反向中和在前向中一样以 async_op=False 收集，而在 CPU 上这个调用要等 all-gather 完成才返回："
                     f"预取改变的是顺序，而不是重叠。本课在前向中测量了这一点：块计算时仍在进行的 FSDP2 all-gather 为 "
                     f"{run['overlap_ms']:.2f} ms；反向中的各块没有计时，想在那里看到它，就用你自己的钩子给它们计时。")
    if choice == "a":
        return wrong("torch.cpu.Stream does nothing: CPU operations run on the thread that calls them, when it calls "
                     "them.",
                     "torch.cpu.Stream 什么也不做：CPU 上的操作在调用它的线程上、在调用的那一刻运行。")
    if choice == "b":
        return wrong("the all-gather comes before block k's gradients are computed, and the reduce-scatter needs those "
                     "gradients.",
                     "all-gather 发生在块 k 的梯度算出之前，而 reduce-scatter 需要这些梯度。")
    return wrong("the optimizer steps once backward is over, after every reduce-scatter.",
                 "优化器在反向结束之后、所有 reduce-scatter 完成之后才更新。")


@exercise("19.4", solution=lambda run: "a", mistake=lambda run: "b")
def shard_grad_op(answer, run):
    choice = letter(answer, ("a", "b", "c", "d"))
    if choice == "a":
        return right(f"part 3 counted {run['backward_gathers']} all-gathers in backward, the whole parameters piled up "
                     "through the forward until backward freed them block by block, and between steps each rank held "
                     f"FSDP2's shards, {run['held_mb']:.2f} MB on rank 0: ZeRO-2's communication, not its memory.",
                     f"第 3 部分在反向中数到 {run['backward_gathers']} 次 all-gather，完整的参数在前向中逐块累积，直到反向"
                     f"才逐块释放；而在两步之间每个 rank 持有的是 FSDP2 的分片，rank 0 为 {run['held_mb']:.2f} MB："
                     "这是 ZeRO-2 的通信方式，而不是它的内存。")
    if choice == "b":
        return wrong(f"part 3 checked that between steps each rank held the same shards as FSDP2's default "
                     f"({run['held_mb']:.2f} MB on rank 0, where ZeRO-2's p + (g + s)/N would be {run['zero2_mb']:.2f} MB): "
                     "FSDP2 reshards after backward.",
                     f"第 3 部分核对过：在两步之间，每个 rank 持有的分片与 FSDP2 默认设置时相同（rank 0 为 "
                     f"{run['held_mb']:.2f} MB，而 ZeRO-2 的 p + (g + s)/N 会是 {run['zero2_mb']:.2f} MB）："
                     "FSDP2 在反向之后重新分片。")
    if choice == "c":
        return wrong(f"part 3 counted {run['backward_gathers']} all-gathers in backward: the whole parameters are still "
                     "there, so there is nothing to gather.",
                     f"第 3 部分在反向中数到 {run['backward_gathers']} 次 all-gather：完整的参数还在，没有什么需要收集。")
    return wrong(f"part 3 still counted {run['reduce_scatters']} reduce-scatters per step: each rank updates only its "
                 "shard, so it needs only its shard's summed gradients.",
                 f"第 3 部分每步仍然数到 {run['reduce_scatters']} 次 reduce-scatter：每个 rank 只更新自己的分片，"
                 "所以它只需要自己那一份的梯度之和。")
