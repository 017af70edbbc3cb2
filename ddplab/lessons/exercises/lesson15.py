"""Lesson 15 (memory per rank): the exercises' judges."""
from . import exercise, letter, near, right, unit_slip, whole_number, wrong, wrong_unit


def _adam_bytes(run):
    layers, width = run["layers"], run["width"]
    params = layers * (width * width + width)  # a weight and a bias per layer
    return 2 * 4 * params + 4 * 2 * layers  # exp_avg and exp_avg_sq, and a 4-byte step per tensor


def _params(run):
    return run["layers"] * (run["width"] ** 2 + run["width"])


@exercise("15.1", solution=_adam_bytes, mistake=lambda run: 4 * _params(run))
def adam_state(answer, run):
    found = unit_slip(answer, _adam_bytes(run), "bytes")
    if found:
        return wrong_unit(found, "bytes")
    n, params, tensors = whole_number(answer), _params(run), 2 * run["layers"]
    if n == _adam_bytes(run):
        return right(f"{params:,} parameters in {tensors} tensors: 2 × 4 × {params:,} bytes for exp_avg and "
                     f"exp_avg_sq, and 4 × {tensors} for the step counts: {n:,} bytes.",
                     f"{params:,} 个参数，分布在 {tensors} 个张量中：exp_avg 和 exp_avg_sq 占 2 × 4 × {params:,} 字节，"
                     f"步数计数占 4 × {tensors} 字节：共 {n:,} 字节。")
    if n == 2 * 4 * params:
        return wrong("almost: Adam also keeps its step count, one 4-byte tensor per parameter tensor.",
                     "差一点：Adam 还保存步数计数，每个参数张量一个 4 字节的张量。")
    if n == 4 * params:
        return wrong("that is one float32 copy of the parameters: how many does Adam keep?",
                     "这是参数的一份 float32 拷贝：Adam 保存几份？")
    if n in (2 * params, params * 2 + 2 * run["layers"]):
        return wrong("count the bytes, not the numbers: each float32 takes 4 bytes.",
                     "要数的是字节，不是数的个数：每个 float32 占 4 字节。")
    return wrong("count the parameters first (a layer has a weight of width × width and a bias of width), then what "
                 "Adam keeps for each, as part 1 measured.",
                 "先数参数（每层有一个 width × width 的权重和一个长度为 width 的偏置），再看 Adam 为每个参数保存什么，"
                 "正如第 1 部分测得的那样。")


def _zero2(run):
    return run["params"] + (run["grads"] + run["optimizer"]) / run["ranks"]


@exercise("15.2", solution=_zero2,
          mistake=lambda run: (run["params"] + run["grads"] + run["optimizer"]) / run["ranks"])
def zero2(answer, run):
    p, g, s, n = run["params"], run["grads"], run["optimizer"], run["ranks"]
    if near(answer, _zero2(run), rel=0.01):
        return right(f"ZeRO-2 keeps the whole parameters and 1/{n} of the gradients and optimizer state: "
                     f"{p / 1e6:.2f} + ({g / 1e6:.2f} + {s / 1e6:.2f}) / {n} = {_zero2(run) / 1e6:.2f} MB.",
                     f"ZeRO-2 保留完整的参数，梯度和优化器状态只保留 1/{n}：{p / 1e6:.2f} + ({g / 1e6:.2f} + "
                     f"{s / 1e6:.2f}) / {n} = {_zero2(run) / 1e6:.2f} MB。")
    if near(answer, (p + g + s) / n, rel=0.01):
        return wrong("that shards the parameters too: which stage does that?",
                     "这把参数也分片了：那是哪个阶段？")
    if near(answer, p + g + s / n, rel=0.01):
        return wrong("that shards only the optimizer state (ZeRO-1): what does ZeRO-2 add?",
                     "这只分片了优化器状态（ZeRO-1）：ZeRO-2 又多分片了什么？")
    if near(answer, p + g + s, rel=0.01):
        return wrong("that is DDP, with nothing sharded.", "这是什么都不分片的 DDP。")
    found = unit_slip(answer, _zero2(run), "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong("take p, g and s from part 1's printout (in bytes), and divide by 8 only what ZeRO-2 shards.",
                 "从第 1 部分的输出中取 p、g 和 s（以字节计），只把 ZeRO-2 分片的那些除以 8。")


@exercise("15.3", solution=lambda run: "d", mistake=lambda run: "a")
def shards_parameters(answer, run):
    choice = letter(answer, ("a", "b", "c", "d"))
    if choice == "d":
        return right("fully_shard (FSDP2, ZeRO-3) shards the parameters too, and all-gathers a layer's parameters just "
                     "before it runs (lesson 19 runs it).",
                     "fully_shard（FSDP2，ZeRO-3）把参数也分片了，并在一层运行之前才用 all-gather 收集这一层的参数"
                     "（第 19 课会运行它）。")
    if choice == "a":
        return wrong("in part 3 every rank still held all the parameters with it: which stage shards them?",
                     "第 3 部分中，用它时每个 rank 仍然持有全部参数：哪个阶段才分片参数？")
    if choice == "c":
        return wrong("ZeRO-2 shards the gradients and the optimizer state; part 3's picture keeps its parameters "
                     "whole on every rank.",
                     "ZeRO-2 分片的是梯度和优化器状态；第 3 部分的图中，它的参数在每个 rank 上仍然是完整的。")
    return wrong("that shares memory between the gradients and the buckets on each rank; every rank still holds "
                 "the whole model.",
                 "它让每个 rank 上的梯度和桶共用内存；每个 rank 仍然持有整个模型。")


def _momentum_share(run):
    return 4 * run["parameters"] / run["ranks"]


@exercise("15.4", solution=_momentum_share, mistake=lambda run: 4 * run["parameters"])
def momentum_share(answer, run):
    value, whole = _momentum_share(run), 4 * run["parameters"]
    if near(answer, value, rel=0.02):
        return right(f"one momentum buffer per parameter of its share: 4 × {run['parameters']:,} / {run['ranks']} "
                     f"= {value:,.0f} bytes, since the {run['tensors']} tensors split evenly; momentum SGD keeps "
                     "no step count.",
                     f"为自己那一份的每个参数保存一个动量缓冲区：4 × {run['parameters']:,} / {run['ranks']} = "
                     f"{value:,.0f} 字节，因为 {run['tensors']} 个张量正好平均分开；带动量的 SGD 不保存步数计数。")
    if near(answer, whole, rel=0.02):
        return wrong("that is momentum's state for all the parameters: ZeroRedundancyOptimizer shards it.",
                     "这是全部参数的动量状态：ZeroRedundancyOptimizer 会把它分片。")
    if near(answer, 2 * value, rel=0.02):
        return wrong("momentum SGD keeps one buffer per parameter, not two as Adam does.",
                     "带动量的 SGD 为每个参数保存一个缓冲区，而不是像 Adam 那样保存两个。")
    found = unit_slip(answer, value, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong("momentum keeps 4 bytes per parameter (part 1); each rank keeps it only for its share.",
                 "动量为每个参数保存 4 字节（第 1 部分）；每个 rank 只为自己那一份保存。")
