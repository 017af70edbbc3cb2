"""Lesson 13 · A ring all-reduce by hand: the judges of its exercises (see __init__.py)."""
from . import exercise, letter, near, number, right, unit_slip, whole_number, wrong, wrong_unit


def ring_bytes(n, size):
    """What each rank of a ring of n ranks sends to all-reduce `size` bytes: 2(n-1)/n of them."""
    return 2 * (n - 1) * size / n


@exercise("13.1", solution=lambda run: ring_bytes(8, run["size"]), mistake=lambda run: 2 * run["size"])
def bytes_on_8_ranks(answer, run):
    size, value = run["size"], number(answer)
    if near(value, ring_bytes(8, size), rel=0.01):
        return right(f"2(N−1)/N × {size:,} bytes with N = 8: 7/8 of the tensor in the reduce-scatter and 7/8 in the "
                     f"all-gather. Your 4-rank ring sent {run['sent_by_4']:,} bytes, 1.5 times the tensor; 8 ranks only take it "
                     "to 1.75 times.",
                     f"N = 8 时为 2(N−1)/N × {size:,} 字节：reduce-scatter 中发送张量的 7/8，all-gather 中再发送 7/8。"
                     f"你的 4 个 rank 的环中每个 rank 发送了 {run['sent_by_4']:,} 字节，是张量的 1.5 倍；"
                     "8 个 rank 时也只是 1.75 倍。")
    if near(value, 2 * size, rel=0.01):
        return wrong("2 × the tensor is the limit for infinitely many ranks: with 8, each phase sends 7 of the 8 chunks.",
                     "张量的 2 倍是 rank 无穷多时的极限：8 个 rank 时，每个阶段发送 8 块中的 7 块。")
    if near(value, 7 * size, rel=0.01) or near(value, 14 * size, rel=0.01):
        return wrong("that counts whole tensors; a ring step sends one chunk, 1/N of the tensor.",
                     "这样数的是整个张量；环的每一步只发送一块，也就是张量的 1/N。")
    found = unit_slip(value, ring_bytes(8, size), "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong(f"count the chunks: the tensor ({size:,} bytes) is cut into 8; how many does a rank send in each of "
                 "the two phases?",
                 f"数一数块数：张量（{size:,} 字节）被切成 8 块；在两个阶段中，一个 rank 各发送几块？")


@exercise("13.2", solution=lambda run: 2 * (8 - 1), mistake=lambda run: 8 - 1)
def steps_on_8_ranks(answer, run):
    steps = whole_number(answer)
    if steps == 14:
        return right(f"2(N−1): 7 reduce-scatter steps and 7 all-gather steps (your 4-rank ring made "
                     f"{run['steps_for_4']}). The step count, and with it the fixed cost per call, grows with N.",
                     f"2(N−1)：7 步 reduce-scatter 加 7 步 all-gather（你的 4 个 rank 的环走了 {run['steps_for_4']} 步）。"
                     "步数随 N 增长，每次调用的固定开销也随之增长。")
    if steps == 7:
        return wrong("that is one phase: after the reduce-scatter each rank holds only one complete chunk.",
                     "这只是一个阶段：reduce-scatter 之后，每个 rank 只持有一个完整的块。")
    return wrong("count the steps of each phase in the picture of part 1 (4 ranks), then redo it for 8.",
                 "在第 1 部分的图中（4 个 rank）数一数每个阶段的步数，再换成 8 个 rank 算一遍。")


@exercise("13.3", solution=lambda run: "d", mistake=lambda run: "a")
def one_rank_receives_first(answer, run):
    choice = letter(answer, ("a", "b", "c", "d"))
    if choice == "d":
        return right("first 3→0: rank 0's recv lets rank 3's send finish. Rank 3, done sending, receives from rank 2: "
                     "2→3. Rank 2, done sending, receives from rank 1: 1→2. Rank 0 called its send to rank 1 right "
                     "after its recv, but that send waits until rank 1, done sending, calls its recv: 0→1 comes last. "
                     "One rank that receives first breaks the cycle of waits, but the four transfers run one after "
                     "another, against the ring's direction (3→0, 2→3, 1→2, 0→1): the exchange takes four transfers' "
                     "time instead of one.",
                     "首先是 3→0：rank 0 的 recv 让 rank 3 的 send 得以完成。rank 3 发完之后从 rank 2 接收：2→3。rank 2 发完"
                     "之后从 rank 1 接收：1→2。rank 0 在 recv 之后立即调用了发给 rank 1 的 send，但这个 send 要等到 rank 1 发完、"
                     "调用了自己的 recv 才能完成：0→1 排在最后。只要有一个 rank 先接收，等待的环就被打破了，但四次传输是逆着环"
                     "的方向一个接一个进行的（3→0、2→3、1→2、0→1）：这次交换要花四次传输的时间，而不是一次。")
    if choice == "a":
        return wrong("follow rank 3: it sends to rank 0. What is rank 0 doing at that moment?",
                     "跟着 rank 3 走一遍：它向 rank 0 发送。此时 rank 0 在做什么？")
    if choice == "b":
        return wrong("each recv names its source (src=): a rank can only receive from the neighbour it asked for.",
                     "每个 recv 都指定了来源（src=）：一个 rank 只能收到它指定的那个邻居发来的数据。")
    return wrong("point-to-point calls are not collectives: ddplab does not match them across ranks (part 5).",
                 "点对点调用不是集合通信：ddplab 不会在各 rank 之间匹配它们（第 5 部分）。")


@exercise("13.4", solution=lambda run: 16 / 2, mistake=lambda run: 16 - 1)
def naive_against_ring(answer, run):
    value = number(answer)
    measured = run["naive_rank0_for_4"] / run["ring_for_4"]
    if near(value, 8, rel=0.02):
        return right(f"(N−1) · S against 2(N−1)/N · S: N/2, {measured:g} for your 4 ranks, 8 for 16. Rank 0's load "
                     "grows with N; a ring rank's stays under 2 S.",
                     f"(N−1) · S 比 2(N−1)/N · S，等于 N/2：你的 4 个 rank 时为 {measured:g}，16 个 rank 时为 8。rank 0 的负担"
                     "随 N 增长，而环中每个 rank 的负担始终不到 2 S。")
    if near(value, 15, rel=0.02) or near(value, 16, rel=0.02):
        return wrong("that compares with one tensor; a ring rank sends 2(N−1)/N of a tensor, almost 2.",
                     "这是在和一个张量比；环中一个 rank 发送的是张量的 2(N−1)/N 倍，接近 2 倍。")
    return wrong("write both as formulas of N (rank 0 of the naive scheme: N−1 tensors; a ring rank: 2(N−1)/N of one), "
                 f"check their ratio gives your {measured:g} at N = 4, then put N = 16.",
                 f"把两者都写成 N 的式子（朴素做法的 rank 0：N−1 个张量；环中一个 rank：一个张量的 2(N−1)/N 倍），检查它们的比值"
                 f"在 N = 4 时是否等于你测得的 {measured:g}，再代入 N = 16。")
