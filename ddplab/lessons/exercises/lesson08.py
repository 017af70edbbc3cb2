"""Lesson 8 (synchronous vs local SGD): the exercises' judges."""
from . import exercise, letter, near, right, unit_slip, whole_number, wrong, wrong_unit


def _averagings(run):
    return round(run["sent"] / run["param_bytes"])


@exercise("8.1", solution=_averagings, mistake=lambda run: run["steps"] // run["period"])
def averagings(answer, run):
    n, periodic = whole_number(answer), run["steps"] // run["period"]
    if n == _averagings(run):
        return right(f"{run['sent'] / 1e6:.2f} MB / {run['param_bytes'] / 1e6:.3f} MB = {n}: the averager averaged at "
                     f"its calls 0, {run['period']}, ..., {run['steps'] - run['period']} ({periodic} times), and the "
                     "final average_parameters once more.",
                     f"{run['sent'] / 1e6:.2f} MB / {run['param_bytes'] / 1e6:.3f} MB = {n}：平均器在它的第 0、"
                     f"{run['period']}、……、{run['steps'] - run['period']} 次调用时做了平均（{periodic} 次），"
                     "最后的 average_parameters 又做了一次。")
    if n == periodic:
        return wrong("That counts the averager's periodic averagings only: what else all-reduced the parameters?",
                     "这只数了平均器周期性的平均：还有什么也 all-reduce 了参数？")
    return wrong("Divide the MB this run all-reduced by the size of all the parameters in MB (4 bytes each).",
                 "用这次训练 all-reduce 的 MB 数除以全部参数的 MB 数（每个参数 4 字节）。")


@exercise("8.2", solution=lambda run: "b", mistake=lambda run: "a")
def adam(answer, run):
    choice = letter(answer, ("a", "b", "c"))
    if choice == "b":
        return right("Momentum SGD is linear in the gradients, so the mean of the ranks' steps is the step of the "
                     "mean gradient; Adam's division by the root of its second moment is not, and each rank's Adam "
                     "state is its own.",
                     "带动量的 SGD 对梯度是线性的，所以各 rank 的步的平均就是平均梯度的那一步；Adam 除以二阶矩的平方根，"
                     "这不是线性的，而且每个 rank 的 Adam 状态各是各的。")
    if choice == "c":
        return wrong("The averaging all-reduces the parameters only: the optimizer state stays on each rank.",
                     "average_parameters 只 all-reduce 参数：优化器状态留在各个 rank 上。")
    return wrong("It holds for momentum SGD, whose update is linear in the gradients. Is Adam's update linear?",
                 "这对带动量的 SGD 成立，因为它的更新对梯度是线性的。Adam 的更新是线性的吗？")


@exercise("8.3", solution=lambda run: run["param_bytes"] / 32 / 1e3, mistake=lambda run: run["param_bytes"] / 1e3)
def kb_per_step(answer, run):
    value = run["param_bytes"] / 32 / 1e3
    if near(answer, value, rel=0.1):
        return right(f"One averaging of {run['param_bytes'] / 1e3:.0f} kB every 32 steps: {value:.1f} kB per step.",
                     f"每 32 步平均一次，一次 {run['param_bytes'] / 1e3:.0f} kB：每步 {value:.1f} kB。")
    if near(answer, run["param_bytes"] / 1e3, rel=0.1):
        return wrong("That is what one averaging all-reduces; spread it over the steps between two averagings.",
                     "这是一次平均 all-reduce 的量；把它分摊到两次平均之间的各步上。")
    found = unit_slip(answer, value, "KB")
    if found:
        return wrong_unit(found, "kB")
    return wrong("Each averaging all-reduces all the parameters (4 bytes each), once every `period` steps.",
                 "每次平均都 all-reduce 全部参数（每个 4 字节），每 `period` 步一次。")


def _post_local(run):
    per_step = run["ddp_bytes"] / run["steps"]
    return (60 * per_step + 13 * run["param_bytes"]) / 1e6


@exercise("8.4", solution=_post_local, mistake=lambda run: 60 * run["ddp_bytes"] / run["steps"] / 1e6)
def post_local(answer, run):
    value, ddp_part = _post_local(run), 60 * run["ddp_bytes"] / run["steps"] / 1e6
    if near(answer, value, rel=0.08):
        return right(f"60 DDP steps ({ddp_part:.1f} MB) and 13 averagings of {run['param_bytes'] / 1e6:.2f} MB: about "
                     f"{value:.1f} MB, {value / (run['ddp_bytes'] / 1e6):.0%} of DDP's {run['ddp_bytes'] / 1e6:.1f} MB.",
                     f"60 步 DDP（{ddp_part:.1f} MB）加上 13 次各 {run['param_bytes'] / 1e6:.2f} MB 的平均：约 "
                     f"{value:.1f} MB，为 DDP 的 {run['ddp_bytes'] / 1e6:.1f} MB 的 {value / (run['ddp_bytes'] / 1e6):.0%}。")
    if near(answer, ddp_part, rel=0.05):
        return wrong("That is the DDP part only: the averagings after step 60 all-reduce bytes too.",
                     "这只是 DDP 那一部分：第 60 步之后的平均也要 all-reduce 字节。")
    found = unit_slip(answer, value, "MB")
    if found:
        return wrong_unit(found, "MB")
    return wrong("Add DDP's bytes per step times 60 and the parameters' bytes times the number of averagings.",
                 "把 DDP 每步的字节数乘以 60，再加上参数的字节数乘以平均的次数。")
