"""Lesson 1 (process groups and collectives): the exercises' judges."""
from . import Unreadable, exercise, letter, number, right, wrong, wrong_unit


def values(answer, n):
    """A list of n numbers (a list, a tuple or a tensor), or Unreadable."""
    if hasattr(answer, "tolist"):
        answer = answer.tolist()
    if not isinstance(answer, (list, tuple)) or len(answer) != n:
        example = [float(i) for i in range(n)]
        raise Unreadable(f"give a list of {n} numbers, like {example}.", f"请给出一个含 {n} 个数的列表，例如 {example}。")
    return [number(v) for v in answer]


def same(answer, expected):
    return all(abs(a - b) < 1e-6 for a, b in zip(answer, expected))


def _max(run):
    top = run["world_size"] - 1
    return [10.0 * top, 10.0 * top + 1]


def _sum(run):
    ranks = range(run["world_size"])
    return [sum(10.0 * r for r in ranks), sum(10.0 * r + 1 for r in ranks)]


@exercise("1.1", solution=_max, mistake=_sum)
def all_reduce_max(answer, run):
    got = values(answer, 2)
    if same(got, _max(run)):
        return right(f"MAX keeps, element by element, the largest value of any rank: rank {run['world_size'] - 1}'s "
                     f"{_max(run)}, on every rank.",
                     f"MAX 逐元素保留所有 rank 中最大的值：也就是 rank {run['world_size'] - 1} 的 {_max(run)}，"
                     "每个 rank 上都一样。")
    if same(got, _sum(run)):
        return wrong("that is the SUM, all_reduce's default: MAX keeps one value per element instead of adding them.",
                     "这是 all_reduce 默认的 SUM：MAX 对每个元素只保留一个值，而不是把它们相加。")
    if same(got, [0.0, 1.0]):
        return wrong("that is rank 0's tensor, what broadcast(src=0) gives: which rank holds the largest values?",
                     "这是 rank 0 的张量，也就是 broadcast(src=0) 的结果：哪个 rank 持有最大的值？")
    return wrong("rank r starts with [10·r, 10·r + 1]: take, element by element, the largest over all ranks.",
                 "rank r 一开始持有 [10·r, 10·r + 1]：逐元素取所有 rank 中最大的值。")


def _chunk_of_rank1(run, interleaved=False):
    """What rank 1 holds after reduce_scatter_single of arange(2·world_size) + 10·rank into 2 values."""
    n = run["world_size"]
    offset = sum(10.0 * r for r in range(n))
    indices = (1, 1 + n) if interleaved else (2, 3)
    return [n * i + offset for i in indices]


@exercise("1.2", solution=_chunk_of_rank1, mistake=lambda run: _chunk_of_rank1(run, interleaved=True))
def reduce_scatter_chunk(answer, run):
    got = values(answer, 2)
    if same(got, _chunk_of_rank1(run)):
        return right(f"the {2 * run['world_size']} values are cut in {run['world_size']} consecutive chunks of 2; "
                     f"rank 1 keeps chunk 1, values 2 and 3, summed over the ranks: {_chunk_of_rank1(run)}.",
                     f"{2 * run['world_size']} 个值被切成 {run['world_size']} 段连续的块，每块 2 个；rank 1 保留第 1 块，"
                     f"即第 2、3 个值，在所有 rank 上求和：{_chunk_of_rank1(run)}。")
    if same(got, _chunk_of_rank1(run, interleaved=True)):
        return wrong("the chunks are consecutive slices of the input (like torch.chunk), not every "
                     f"{run['world_size']}th value as DistributedSampler takes them.",
                     f"块是输入中连续的几段（和 torch.chunk 一样），而不是像 DistributedSampler 那样每隔 "
                     f"{run['world_size']} 个取一个。")
    if same(got, [12.0, 13.0]):
        return wrong("that is rank 1's own chunk: reduce_scatter first sums it over all ranks.",
                     "这是 rank 1 自己的那一块：reduce_scatter 先在所有 rank 上对它求和。")
    return wrong(f"cut the {2 * run['world_size']} values in {run['world_size']} chunks of 2, take chunk 1 and add it "
                 "up over the ranks (rank k's values are 10·k higher than rank 0's).",
                 f"把 {2 * run['world_size']} 个值切成 {run['world_size']} 块、每块 2 个，取第 1 块，在所有 rank 上相加"
                 "（rank k 的值比 rank 0 的大 10·k）。")


def _leave(run, per_rank=0.3):
    """When every rank leaves the barrier if rank r works per_rank·r s: the slowest rank's work, plus this run's
    overhead (how much later than 0.2·(n-1) the ranks left)."""
    slowest = run["world_size"] - 1
    return per_rank * slowest + max(0.0, run["left"] - 0.2 * slowest)


@exercise("1.3", solution=_leave,
          mistake=lambda run: 0.3 * sum(range(run["world_size"])) + max(0.0, run["left"] - 0.2 * (run["world_size"] - 1)))
def barrier_leave(answer, run):
    slowest, late = run["world_size"] - 1, max(0.0, run["left"] - 0.2 * (run["world_size"] - 1))
    value = number(answer)
    if abs(value - _leave(run)) <= 0.08 + late:
        return right(f"everyone waits for the last rank to arrive: rank {slowest}, after 0.3 × {slowest} = "
                     f"{0.3 * slowest:.1f} s (here the ranks left {late * 1e3:.0f} ms after the last one's work, the "
                     "barrier's own time).",
                     f"所有 rank 都要等最后一个 rank 到达：rank {slowest}，在 0.3 × {slowest} = {0.3 * slowest:.1f} 秒"
                     f"之后（这次运行中，各 rank 在最后一个 rank 工作结束后 {late * 1e3:.0f} 毫秒离开，这是 barrier 本身"
                     "的耗时）。")
    if abs(value / 1000 - _leave(run)) <= 0.08 + late:
        return wrong_unit("milliseconds", "seconds")
    if value > 0.3 * slowest + late + 0.3:
        return wrong("the ranks work at the same time, not one after the other: the barrier ends when the slowest "
                     "one arrives.",
                     "各 rank 是同时工作的，而不是一个接一个：最慢的 rank 到达时，barrier 就结束了。")
    return wrong("a rank leaves the barrier only when every rank has arrived: when does the slowest one arrive?",
                 "只有所有 rank 都到达之后，每个 rank 才能离开 barrier：最慢的 rank 什么时候到达？")


@exercise("1.4", solution=lambda run: "c", mistake=lambda run: "b")
def shapes(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "c":
        return right("a collective trusts every rank to pass the same number of elements (and the same dtype): gloo "
                     "sends each rank's pieces as they are, so the pieces do not fit together. Some ranks can even "
                     "return, with a result nobody should use, while the others wait; ddplab sees ranks waiting in "
                     "all_reduce with different shapes, names them and cuts the collective short (without ddplab, nothing "
                     "would name the cause).",
                     "集合通信相信每个 rank 传入的元素个数（以及 dtype）都相同：gloo 按原样发送每个 rank 的数据块，"
                     "所以这些数据块彼此对不上。有的 rank 甚至会返回，带着一个谁都不该用的结果，而其他 rank 还在等待；"
                     "ddplab 看到各 rank 带着不同的形状在 all_reduce 中等待，就点名指出它们，并提前结束这次集合通信"
                     "（没有 ddplab 的话，没有谁会指出原因）。")
    if choice == "a":
        return wrong("no collective pads a tensor: gloo sends exactly the bytes each rank gave it.",
                     "没有哪个集合通信会帮你补齐张量：gloo 只发送每个 rank 交给它的那些字节。")
    return wrong("to compare the shapes, the ranks would first have to send them to each other: does all_reduce "
                 "make that extra exchange before every call?",
                 "要比较形状，各 rank 得先把形状互相发送一遍：all_reduce 每次调用之前会多做这样一次交换吗？")
