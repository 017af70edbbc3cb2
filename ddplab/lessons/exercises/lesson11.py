"""Lesson 11 (fault tolerance with checkpoints): the exercises' judges."""
from . import exercise, letter, right, whole_number, wrong


def _again(run):
    return run["killed"] - run["killed"] // run["every"] * run["every"]


@exercise("11.1", solution=_again, mistake=lambda run: run["killed"] - run["resumed_from"])
def steps_again(answer, run):
    n, killed, every = whole_number(answer), run["killed"], run["every"]
    last = killed // every * every
    if n == _again(run):
        return right(f"The last checkpoint before step {killed} would be step {last}, so steps {last + 1} to {killed} are "
                     f"computed again: {n}. The price: a save every {every} steps instead of every 10, each one a write "
                     "while every rank waits at the barrier.",
                     f"第 {killed} 步之前的最后一个检查点是第 {last} 步，所以第 {last + 1} 到 {killed} 步要再算一遍：{n} 步。"
                     f"代价是每 {every} 步而不是每 10 步保存一次：每次保存都要写文件，而每个 rank 都在 barrier 处等它写完。")
    if n == killed - run["resumed_from"]:
        return wrong(f"That is this run, with a checkpoint every 10 steps. Which is the last multiple of {every} "
                     f"up to step {killed}?",
                     f"这是这次运行的情况，每 10 步一个检查点。不超过第 {killed} 步的最后一个 {every} 的倍数是多少？")
    return wrong(f"Find the last checkpoint saved before the crash (a multiple of {every}), and count the steps after it "
                 f"up to step {killed}.",
                 f"找出崩溃之前保存的最后一个检查点（{every} 的倍数），再数它之后到第 {killed} 步为止有几步。")


@exercise("11.2", solution=lambda run: "a", mistake=lambda run: "b")
def model_only(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "a":
        return right("SGD with momentum keeps a buffer per parameter; without it the resumed steps start with no "
                     "momentum, and the parameters no longer match the uninterrupted run.",
                     "带动量的 SGD 为每个参数保存一个缓冲区；没有它，恢复后的步从零动量开始，参数就不再与不中断的运行一致。")
    if choice == "c":
        return wrong("Each step's batch comes from a generator seeded with (step, rank): it does not depend on the "
                     "checkpoint.",
                     "每一步的批次来自以 (step, rank) 为种子的生成器：它与检查点无关。")
    return wrong("Which state does torch.optim.SGD with momentum=0.9 keep between steps (look at opt.state)?",
                 "momentum=0.9 的 torch.optim.SGD 在两步之间保存了什么状态（看看 opt.state）？")


@exercise("11.3", solution=lambda run: "c", mistake=lambda run: "a")
def foreign_object(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "c":
        return right("ddplab's load reads with weights_only=True only; rank 0 turns the UnpicklingError into a "
                     "ValueError that it broadcasts, so every rank raises it and none waits.",
                     "load 只用 weights_only=True 读取；rank 0 把 UnpicklingError 变成一个 ValueError 并广播出去，"
                     "所以每个 rank 都抛出它，没有哪个 rank 在等待。")
    if choice == "b":
        return wrong("Look at _read_and_broadcast in ddplab/rank/checkpoint.py: what does rank 0 broadcast when "
                     "torch.load fails?",
                     "看看 ddplab/rank/checkpoint.py 中的 _read_and_broadcast：torch.load 失败时，rank 0 广播的是什么？")
    return wrong("Look at the torch.load call in ddplab/rank/checkpoint.py: which weights_only does it pass?",
                 "看看 ddplab/rank/checkpoint.py 中对 torch.load 的调用：它传的 weights_only 是什么？")
