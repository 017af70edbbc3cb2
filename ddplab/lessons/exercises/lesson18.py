"""Lesson 18 (debugging distributed code): the exercises' judges."""
from . import Unreadable, exercise, letter, right, whole_number, wrong


@exercise("18.1", solution=lambda run: 7, mistake=lambda run: 0)
def pairs(answer, run):
    n = whole_number(answer)
    if n == 7:
        return right("no mismatch: each group's members call the same all-reduce on it, and a collective only "
                     "waits for its own group's members. Rank 2 adds its 3 to rank 3's 4: 7.",
                     "不算集合通信不匹配：每个组的成员都在这个组上调用同一个 all-reduce，而集合通信只等待自己组里的成员。"
                     "rank 2 的 3 加上 rank 3 的 4：7。")
    if n == 0:
        return wrong("a collective must match among the members of its group only. Do ranks 2 and 3 call the same "
                     "all-reduce on their group?",
                     "集合通信只需要在它所在组的成员之间匹配。rank 2 和 3 在它们的组上调用的是同一个 all-reduce 吗？")
    if n == 10:
        return wrong("that is the sum over all 4 ranks: rank 2 all-reduces on its pair only.",
                     "这是 4 个 rank 的总和：rank 2 只在它的二人组上做 all-reduce。")
    return wrong("rank r holds r + 1 before the all-reduce; add what the members of rank 2's group hold.",
                 "all-reduce 之前 rank r 持有 r + 1；把 rank 2 所在组的成员持有的值加起来。")


@exercise("18.2", solution=lambda run: run["index"] + 1, mistake=lambda run: run["index"])
def batch_size(answer, run):
    n, index = whole_number(answer), run["index"]
    if n == index + 1:
        return right(f"batch[{index}] is the {index + 1}th element (indices start at 0): the batch needs {index + 1} "
                     f"elements, where rank 2 had {run['size']}.",
                     f"batch[{index}] 是第 {index + 1} 个元素（索引从 0 开始）：批次需要 {index + 1} 个元素，而 rank 2 "
                     f"只有 {run['size']} 个。")
    if n == index:
        return wrong(f"with {index} elements the indices go from 0 to {index - 1}.",
                     f"有 {index} 个元素时，索引是 0 到 {index - 1}。")
    return wrong("read `index` in pdb's output: which batch sizes have an element at that index?",
                 "看 pdb 输出中的 `index`：多大的批次在这个索引上有元素？")


def _ranks(answer):
    if isinstance(answer, (str, bytes)) or not hasattr(answer, "__iter__"):
        raise Unreadable("give a list of ranks, like [0, 3], or [].", "请给出一个 rank 的列表，例如 [0, 3]，或者 []。")
    return sorted(whole_number(r) for r in answer)


@exercise("18.3", solution=lambda run: [1], mistake=lambda run: [])
def skipped_step(answer, run):
    ranks = _ranks(answer)
    if ranks == [1]:
        return right("DDP keeps the gradients equal, not the parameters: rank 1 got the same averaged gradient but "
                     "did not apply it, so its parameters differ from rank 0's, and %ddp_check names it.",
                     "DDP 保证的是梯度相同，而不是参数相同：rank 1 拿到了同样的平均梯度，却没有用它更新，所以它的参数"
                     "与 rank 0 的不同，%ddp_check 会指出它。")
    if ranks == []:
        return wrong("DDP averages the gradients in backward(); who applies them to the parameters?",
                     "DDP 在 backward() 中对梯度求平均；又是谁把它们用到参数上的？")
    if ranks == [0, 2, 3]:
        return wrong("%ddp_check names the ranks whose parameters differ from rank 0's.",
                     "%ddp_check 指出的是参数与 rank 0 不同的那些 rank。")
    return wrong("only one rank skipped its step; %ddp_check compares every rank with rank 0.",
                 "只有一个 rank 跳过了更新；%ddp_check 把每个 rank 都与 rank 0 比较。")


@exercise("18.4", solution=lambda run: "c", mistake=lambda run: "a")
def one_stopped_rank_goes_on(answer, run):
    choice = letter(answer, ("a", "b", "c", "d"))
    if choice == "c":
        return right("an all-reduce on the default group finishes only when every rank of the group has called it. "
                     "Ranks 2 and 3 are there already, rank 1 is still stopped before the loop: rank 0 waits in the "
                     "first all-reduce (%ddp_step shows it waiting, for 1, stopped at a breakpoint) until rank 1 is "
                     "sent on too. Nothing is cut or timed out meanwhile.",
                     "默认进程组上的 all-reduce 只有在组内每个 rank 都调用了它之后才会结束。rank 2 和 3 已经在里面了，"
                     "rank 1 还停在循环之前：rank 0 在第一个 all-reduce 中等待（%ddp_step 显示它在等待停在断点处的 "
                     "rank 1），直到 rank 1 也被放行。在此期间没有任何东西被切断或超时。")
    if choice == "a":
        return wrong("until runs rank 0 on; can its all-reduce finish without rank 1's gradient?",
                     "until 让 rank 0 继续运行；没有 rank 1 的梯度，它的 all-reduce 能结束吗？")
    if choice == "b":
        return wrong("a collective on a group needs every rank of the group: it never leaves out a rank that is "
                     "stopped, it waits for it.",
                     "一个进程组上的集合通信需要组内的每个 rank：它从不把停住的 rank 排除在外，而是等它。")
    return wrong("ranks 2 and 3 waited for ranks 0 and 1 in that all-reduce the whole time you looked at them, and "
                 "nothing was cut: ddplab never times out a collective while a rank it waits for is stopped at a "
                 "breakpoint.",
                 "在你查看 rank 0 和 1 的整个过程中，rank 2 和 3 一直在那个 all-reduce 中等它们，什么也没有被切断："
                 "只要集合通信等待的 rank 停在断点处，ddplab 就从不让它超时。")
