"""Lesson 20 (tensor parallelism and 2D meshes): the exercises' judges."""
from . import exercise, letter, near, number, right, unit_slip, whole_number, wrong, wrong_unit


def _activation(run):
    return run["batch"] * run["tokens"] * run["hidden"] * 4


@exercise("20.1", solution=_activation, mistake=lambda run: 4 * _activation(run))
def wider_mlp(answer, run):
    value, goal = number(answer), _activation(run)
    if near(value, goal, rel=0.01):
        return right(f"{goal:,} bytes, as before (the timeline recorded {run['recorded']:,}): the all-reduce sums the "
                     f"row-split layer's partial outputs, {run['batch']} × {run['tokens']} × {run['hidden']} floats of 4 "
                     "bytes. The inner width changes the weights and the work, never the activations between blocks.",
                     f"{goal:,} 字节，和原来一样（时间线记录的是 {run['recorded']:,}）：all-reduce 求和的是按行切分的层的部分"
                     f"输出，即 {run['batch']} × {run['tokens']} × {run['hidden']} 个 4 字节的浮点数。中间层的宽度改变的是"
                     "权重和计算量，从不改变块与块之间的激活。")
    if near(value, 4 * goal, rel=0.01):
        return wrong("the wider layer is split over the ranks and never leaves them; what does the all-reduce sum: "
                     "the hidden features, or the partial outputs of the layer that comes after them?",
                     "加宽的那一层被切分到各个 rank 上，从不离开它们；all-reduce 求和的是什么：是隐藏特征，"
                     "还是它们之后那一层的部分输出？")
    if near(value, 2 * goal, rel=0.01):
        return wrong("twice the size: that counts the backward all-reduce too (or is a weight matrix of the original "
                     "block); the question asks for the forward all-reduce alone.",
                     "多了一倍：这把反向的 all-reduce 也算进去了（或者是原来那个块的一个权重矩阵）；"
                     "题目只问前向的那一次 all-reduce。")
    if near(value, 8 * goal, rel=0.01):
        return wrong("that is one of the wider block's weight matrices; each rank keeps its slice of the weights, and "
                     "they never travel.",
                     "这是加宽后的块的一个权重矩阵；每个 rank 保留自己那一片权重，权重从不传输。")
    found = unit_slip(value, goal, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong("the forward all-reduce carries the row-split layer's output: batch × tokens × hidden size × 4 bytes.",
                 "前向的 all-reduce 传的是按行切分的层的输出：批大小 × 词元数 × 隐藏维度 × 4 字节。")


@exercise("20.2", solution=lambda run: 2, mistake=lambda run: 1)
def no_input_gradient(answer, run):
    n = whole_number(answer)
    if n == 2:
        return right(f"still 2 (the timeline recorded {run['recorded']} per step with the input's gradient): between "
                     "the input and the column-split layer sits the LayerNorm, whose weight and bias need the gradient "
                     "of its output, and that gradient is the sum of the ranks' shares. Autograd skips f's all-reduce "
                     "only when nothing before the column-split layer needs a gradient.",
                     f"仍然是 2 次（有输入梯度时，时间线记录的是每步 {run['recorded']} 次）：输入和按列切分的层之间隔着 "
                     "LayerNorm，它的权重和偏置需要它的输出的梯度，而这个梯度是各 rank 那几份的和。只有当按列切分的层之前"
                     "没有任何东西需要梯度时，autograd 才会跳过 f 的 all-reduce。")
    if n == 1:
        return wrong("the input needs no gradient, but does anything between the input and the column-split layer "
                     "need one? Look at the block's first layer.",
                     "输入不需要梯度，但在输入和按列切分的层之间，有没有别的东西需要梯度？看看块的第一层。")
    return wrong("count the forward's (after the row-split layer) and ask whether backward still needs f's: which "
                 "gradients does autograd have to compute?",
                 "先数前向中的（在按行切分的层之后），再问反向是否仍然需要 f 的那一次：autograd 必须计算哪些梯度？")


def _sp_sent(run):
    n, b = run["ranks"], run["activation"]
    return 2 * (n - 1) / n * b


@exercise("20.3", solution=_sp_sent, mistake=lambda run: 1.5 * run["activation"])
def sequence_parallel_bytes(answer, run):
    value, goal, n, b = number(answer), _sp_sent(run), run["ranks"], run["activation"]
    if near(value, goal, rel=0.01):
        return right(f"{goal:,.0f} bytes: the all-gather sends (N − 1) pieces of {b // n:,} bytes, the reduce-scatter "
                     f"(N − 1)/N of {b:,} bytes, together 2 × {n - 1}/{n} × {b:,}, what one all-reduce of the "
                     "activations would send. More ranks bring it closer to twice the activations, never beyond.",
                     f"{goal:,.0f} 字节：all-gather 发送 (N − 1) 片，每片 {b // n:,} 字节；reduce-scatter 发送 {b:,} 字节"
                     f"的 (N − 1)/N；合起来是 2 × {n - 1}/{n} × {b:,}，正是对激活做一次 all-reduce 要发送的量。rank 越多，"
                     "它越接近激活的两倍，但不会超过。")
    if near(value, 1.5 * b, rel=0.01):
        return wrong("that is the count for this lesson's 4 ranks; with 8, each piece is smaller and there are more of "
                     "them.",
                     "这是本课 4 个 rank 时的数；8 个 rank 时，每一片更小，片数更多。")
    if near(value, 2 * b, rel=0.01) or near(value, b / n + b, rel=0.01):
        return wrong("that counts the tensors the collectives were called with; on a ring a rank does not send its "
                     "own piece of the result to itself.",
                     "这数的是调用集合通信时传入的张量；在环中，一个 rank 不会把结果中属于它自己的那一片发给自己。")
    found = unit_slip(value, goal, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong("on a ring, an all-gather of pieces of p bytes sends (N − 1)·p, a reduce-scatter of b bytes "
                 "(N − 1)/N·b; the piece is the activations split by N.",
                 "在环中，每片 p 字节的 all-gather 发送 (N − 1)·p，b 字节的 reduce-scatter 发送 (N − 1)/N·b；"
                 "每一片是激活的 1/N。")


@exercise("20.4", solution=lambda run: "b", mistake=lambda run: "a")
def mesh_layout(answer, run):
    choice = letter(answer, ("a", "b", "c", "d"))
    share = run["tp_share"]
    if choice == "b":
        return right(f"the tensor-parallel all-reduces stop every block's forward and backward until they are done "
                     f"({share:.0%} of rank 0's forward here, on loopback), so they need the fastest links. With "
                     "ddplab.mesh(2, 4, names=('dp', 'tp')) and ranks numbered machine by machine, each row of 4, "
                     "mesh['tp'], is one machine, and FSDP2's gathers and reduce-scatters cross the network.",
                     f"张量并行的 all-reduce 会让每个块的前向和反向停下来，直到它们完成（这里在回环接口上占 rank 0 前向的 "
                     f"{share:.0%}），所以它们需要最快的连接。用 ddplab.mesh(2, 4, names=('dp', 'tp')) 并按机器依次给 rank "
                     "编号时，每一行的 4 个 rank，即 mesh['tp']，正好是一台机器，而 FSDP2 的 all-gather 和 reduce-scatter "
                     "走机器之间的网络。")
    if choice == "a":
        return wrong("tensor parallelism sends the activations of every block twice per step: more bytes than a "
                     "step's weights at real batch sizes (part 2: this block's were equal at about 4H tokens per step), "
                     "and on the critical path.",
                     "张量并行每一步对每个块的激活传两次：在真实的批大小下比一步的权重字节数还多（第 2 部分：这个块在每步约 "
                     "4H 个词元时两者相等），而且处在关键路径上。")
    if choice == "c":
        ratio = run.get("sp_ratio")
        measured = (f" (on this gloo part 3 measured {ratio:.2f} times tensor parallelism's bytes)" if ratio else "")
        measured_zh = (f"（在这个 gloo 上，第 3 部分测得它是张量并行字节数的 {ratio:.2f} 倍）" if ratio else "")
        return wrong(f"sequence parallelism sends as many bytes as the all-reduces on a ring, and more on gloo{measured}; "
                     "smaller messages, twice as many, pay the network's latency more often. And each of them still "
                     "holds up the computation that follows.",
                     f"序列并行在环上发送的字节数与 all-reduce 相同，在 gloo 上更多{measured_zh}；消息更小、数量加倍，"
                     "付出网络延迟的次数就更多。而且每一次仍然会拖住紧随其后的计算。")
    return wrong("with ranks numbered machine by machine, ddplab.mesh(2, 4) puts one machine in each row: the "
                 "collectives of the dimension of size 4 stay inside a machine, and only the other dimension's cross "
                 "the network. Which collectives should those be?",
                 "按机器依次给 rank 编号时，ddplab.mesh(2, 4) 让每一行正好是一台机器：大小为 4 的那个维度上的集合通信"
                 "留在机器内部，只有另一个维度上的才经过网络。应该让哪一种走网络？")
