"""Lesson 9 (asynchronous updates, a parameter server): the exercises' judges."""
from . import exercise, near, number, right, unit_slip, whole_number, wrong, wrong_unit


def _count(run, w):
    return run["count"][w] if w in run["count"] else run["count"][str(w)]


def _estimate(run):
    """This run: the others' gradients per round trip of rank 3."""
    return (_count(run, 1) + _count(run, 2)) / _count(run, 3)


def _twice(run):
    """With rank 3's round trips twice as long, the others at their pace: twice as many of theirs per trip."""
    return 2 * _estimate(run)


def _measured(run):
    stale = run["mean_stale"]
    return stale[3] if 3 in stale else stale["3"]


@exercise("9.1", solution=_twice, mistake=_estimate)
def slow_staleness(answer, run):
    value, estimate, measured = number(answer), _estimate(run), _measured(run)
    if near(value, _twice(run), rel=0.1):
        return right(f"The others sent {_count(run, 1) + _count(run, 2)} gradients while rank 3 made {_count(run, 3)} "
                     f"round trips: about {estimate:.1f} of theirs per trip of rank 3 in this run (measured: "
                     f"{measured:.1f}). A trip twice as long spans twice as many: about {_twice(run):.1f}. The slower "
                     "a worker, the staler its gradients.",
                     f"rank 3 完成 {_count(run, 3)} 次往返的同时，其他 worker 发来了 {_count(run, 1) + _count(run, 2)} 个"
                     f"梯度：在这次运行中，rank 3 每次往返约有 {estimate:.1f} 个（测得的是 {measured:.1f}）。往返时间加倍，"
                     f"跨过的梯度也加倍：约 {_twice(run):.1f}。worker 越慢，它的梯度就越陈旧。")
    if near(value, estimate, rel=0.1) or near(value, measured, rel=0.1):
        return wrong("That is rank 3's staleness in this run. With each of its trips twice as long, how many of the "
                     "others' gradients arrive during one?",
                     "这是这次运行中 rank 3 的陈旧度。如果它的每次往返都要花两倍的时间，一次往返期间会到达其他 worker 的"
                     "多少个梯度？")
    if near(value, 2, rel=0.1):
        return wrong("W − 1 holds for workers that are equally fast; rank 3's round trip is longer than the others'. "
                     "How many of their gradients fit into one of its trips?",
                     "W − 1 只对同样快的 worker 成立；rank 3 的一次往返比其他 worker 的长。"
                     "它的一次往返里能装下其他 worker 的多少个梯度？")
    return wrong("Divide the gradients the other two workers sent by the round trips rank 3 made in the same time: "
                 "that is one trip as it was; then make the trip twice as long.",
                 "用另外两个 worker 发送的梯度数，除以同一段时间里 rank 3 完成的往返次数：这是原来的一次往返；再让往返"
                 "时间加倍。")


def _mb(run):
    messages = 3 * run["workers"] + 2 * run["updates"]   # first parameters, each update's gradient and reply, stop
    return messages * 4 * (run["n_params"] + 1) / 1e6


@exercise("9.2", solution=_mb, mistake=lambda run: run["updates"] * 4 * (run["n_params"] + 1) / 1e6)
def server_traffic(answer, run):
    value, one_way = _mb(run), run["updates"] * 4 * (run["n_params"] + 1) / 1e6
    if near(answer, value, rel=0.03):
        return right(f"{3 * run['workers'] + 2 * run['updates']} messages of {4 * (run['n_params'] + 1) / 1e6:.2f} MB: "
                     f"{value:.0f} MB through one process, while a DDP rank all-reduces its share in parallel with the others.",
                     f"{3 * run['workers'] + 2 * run['updates']} 条消息，每条 {4 * (run['n_params'] + 1) / 1e6:.2f} MB："
                     f"{value:.0f} MB 都经过同一个进程，而 DDP 的各 rank 是同时并行地 all-reduce 各自那一份的。")
    if near(answer, one_way, rel=0.05):
        return wrong("That counts the gradients received only: the server also sends the parameters back for each one.",
                     "这只算了收到的梯度：服务器对每个梯度还要把参数发回去。")
    found = unit_slip(answer, value, "MB")
    if found:
        return wrong_unit(found, "MB")
    return wrong("Count the messages (each gradient comes in, the parameters go back out, plus the first and the "
                 "last ones) and multiply by the size of one message: (parameters + 1) × 4 bytes.",
                 "数一数消息条数（每个梯度收进来，参数发回去，再加上最开始和最后的那几条），乘以一条消息的大小："
                 "（参数个数 + 1）× 4 字节。")


@exercise("9.3", solution=lambda run: round(run["updates"] / 3), mistake=lambda run: _count(run, 3))
def no_slow_worker(answer, run):
    n, even = whole_number(answer), run["updates"] / 3
    if near(n, even, rel=0.15):
        return right(f"Three equally fast workers share the 960 gradients about evenly, about {even:.0f} each (run it: "
                     "the counts vary a little from run to run).",
                     f"三个同样快的 worker 大致平分这 960 个梯度，每个约 {even:.0f} 个（运行一下：每次运行的计数会略有出入）。")
    if n == _count(run, 3):
        return wrong("That is what the slow rank 3 sent. Without its extra 10 ms, how fast is it compared with the others?",
                     "这是慢的 rank 3 发送的数目。没有那多出的 10 毫秒，它和其他 worker 比起来有多快？")
    return wrong("No worker waits for another: each sends gradients at its own pace. What share does each get when all "
                 "are equally fast?",
                 "没有哪个 worker 等别人：每个 worker 按自己的节奏发送梯度。当它们一样快时，每个分到多少？")
