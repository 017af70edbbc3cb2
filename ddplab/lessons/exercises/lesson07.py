"""Lesson 7: pruning, quantization and compressed gradients."""
from . import exercise, near, number, right, unit_slip, whole_number, wrong, wrong_unit

SPARSE_FROM = 1 - 4 / (4 + 2 * 8)  # (1 − s) × 20 bytes < 4 bytes per entry


@exercise("7.1", solution=lambda run: SPARSE_FROM, mistake=lambda run: 0.5)
def sparse_break_even(answer, run):
    value = number(answer)
    measured = run["smaller"]
    if 1 < value <= 100:
        return wrong("give a fraction between 0 and 1 (0.25 for 25 %).", "请给出 0 到 1 之间的小数（25% 写作 0.25）。")
    if near(value, SPARSE_FROM, rel=0, absolute=0.02):
        return right(f"0.8: a non-zero costs 4 + 16 = 20 bytes sparse against 4 bytes per entry dense, so fewer than "
                     f"1 entry in 5 may be non-zero. In the run, sparse storage was smaller from the {measured:.0%} level "
                     "on: at exactly 0.8 the two tie, and the file's few extra bytes decide.",
                     f"0.8：稀疏存储中一个非零元素要 4 + 16 = 20 字节，而稠密存储每个元素 4 字节，所以非零元素必须少于五分之一。"
                     f"在运行中，从 {measured:.0%} 这一档起稀疏存储更小：正好 0.8 时两者持平，由文件中多出的几个字节决定谁小。")
    if near(value, 0.5, rel=0, absolute=0.02):
        return wrong("that would be true if a sparse entry cost twice a dense one; count its bytes: the value and "
                     "two int64 indices.",
                     "只有当一个稀疏元素的开销是稠密元素的两倍时才是这样；数一数它的字节数：一个值加两个 int64 索引。")
    return wrong("compare bytes per entry: dense 4 for every entry; sparse 4 + 2 × 8 for each non-zero, and the "
                 "non-zeros are a fraction 1 − s of the entries.",
                 "按每个元素比较字节数：稠密存储每个元素 4 字节；稀疏存储每个非零元素 4 + 2 × 8 字节，而非零元素占 1 − s。")


@exercise("7.2", solution=lambda run: run["largest"] / 127.5, mistake=lambda run: run["largest"] / 255)
def int8_scale(answer, run):
    value, scale, largest = number(answer), run["scale"], run["largest"]
    if near(value, scale, rel=0.01):
        return right(f"torch chose {scale:.7f} = M / 127.5: the 255 steps between −128 and 127 span 2M, so one step "
                     "is 2M / 255. Every weight is rounded to the nearest step: an error of at most half a step.",
                     f"torch 选的是 {scale:.7f} = M / 127.5：−128 到 127 之间的 255 个间隔覆盖 2M，所以一个间隔是 2M / 255。"
                     "每个权重都舍入到最近的一格：误差最多半格。")
    if near(value, largest / 255, rel=0.01) or near(value, largest / 256, rel=0.01):
        return wrong("the integers cover −M to M, not 0 to M: the range is 2M wide.",
                     "这些整数覆盖的是 −M 到 M，而不是 0 到 M：范围宽 2M。")
    if near(value, 1 / scale, rel=0.05):
        return wrong("the scale multiplies the integer to give the weight: weight ≈ integer × scale.",
                     "缩放因子乘以整数得到权重：权重 ≈ 整数 × 缩放因子。")
    return wrong("the weight is integer × scale; the largest integers (about ±127) must reach ±M.",
                 "权重等于整数 × 缩放因子；最大的整数（约 ±127）要能达到 ±M。")


def mlp_parameters(features, hidden, classes):
    return features * hidden + hidden + hidden * hidden + hidden + hidden * classes + classes


def fp16_bytes(run):
    return 2 * mlp_parameters(run["features"], run["hidden"], run["classes"])


@exercise("7.3", solution=fp16_bytes, mistake=lambda run: 2 * fp16_bytes(run))
def fp16_bytes_per_step(answer, run):
    value, goal = number(answer), fp16_bytes(run)
    if near(value, goal, rel=0.01):
        return right(f"{goal:,} bytes: every parameter's gradient is all-reduced once per step, 2 bytes each in fp16 "
                     f"({goal // 2:,} parameters); the run's fp32 count, {run['fp32_per_step']:,.0f} bytes per step, is "
                     "the same rule at 4 bytes for the narrower model.",
                     f"{goal:,} 字节：每个参数的梯度每步都做一次 all-reduce，fp16 每个 2 字节（共 {goal // 2:,} 个参数）；运行中 "
                     f"fp32 每步 {run['fp32_per_step']:,.0f} 字节，是较窄的模型按每个 4 字节得到的同一规律。")
    if near(value, 2 * goal, rel=0.01):
        return wrong("that is the fp32 count: the hook halves it.", "那是 fp32 的字节数：钩子把它减半了。")
    found = unit_slip(value, goal, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong("count the parameters of the three Linear layers (weights and biases) of the wider model, then the "
                 "bytes of one fp16 number each.",
                 "数一数更宽的模型三个 Linear 层的参数（权重和偏置），再乘以每个 fp16 数的字节数。")


def structured(run):
    f, h, c = run["features"], run["hidden"], run["classes"]
    kept = h - round(run["amount"] * h)
    return (f * h + h) + (h * kept + kept) + (kept * c + c)


@exercise("7.4", solution=structured,
          mistake=lambda run: mlp_parameters(run["features"], run["hidden"], run["classes"])
          - round(run["amount"] * run["hidden"]) * (run["hidden"] + 1))
def structured_pruning(answer, run):
    n, goal = whole_number(answer), structured(run)
    full = mlp_parameters(run["features"], run["hidden"], run["classes"])
    own_only = full - round(run["amount"] * run["hidden"]) * (run["hidden"] + 1)
    if n == goal:
        return right(f"{goal:,} of {full:,}: the middle layer keeps half its rows and biases, and the output layer "
                     "loses the matching columns, since their inputs no longer exist. Unlike zeros, this really "
                     "makes the model smaller and faster.",
                     f"{full:,} 个中剩下 {goal:,} 个：中间层保留一半的行和偏置，输出层也失去对应的列，因为这些输入已经不存在了。"
                     "与置零不同，这真的让模型变小、变快。")
    if n == own_only:
        return wrong("the middle layer is right; but the layer after it also reads those neurons: its matching "
                     "weights go too.",
                     "中间层算对了；但它后面的那一层也读取这些神经元：相应的权重也要去掉。")
    if n == full - round(run["amount"] * run["hidden"]) * run["hidden"]:
        return wrong("a removed neuron takes its bias with it, and the next layer loses its column.",
                     "去掉的神经元也带走了它的偏置，下一层也失去了对应的列。")
    return wrong("rebuild the three layers with their new input and output sizes, then count weights and biases.",
                 "按新的输入和输出大小重建三个层，再数一数权重和偏置。")


def pt2_with_test_set(run):
    """The .pt2 file's bytes had X_test.clone() (rows × features float32) been the example instead of 64 rows."""
    return run["pt2"] + (run["rows"] - run["example_rows"]) * run["features"] * 4


@exercise("7.5", solution=pt2_with_test_set, mistake=lambda run: run["pt2"])
def exported_example_bytes(answer, run):
    value, goal, pt2 = number(answer), pt2_with_test_set(run), run["pt2"]
    old, new = run["example_rows"] * run["features"] * 4, run["rows"] * run["features"] * 4
    if near(value, goal, rel=0.005):
        return right(f"about {goal:,} bytes: the weights and the graph stay as they are, and the example input grows from "
                     f"{old:,} to {new:,} bytes ({run['example']:,} bytes in the run's file, with the few bytes that "
                     f"describe it). Without `.clone()`, `X_test` or even `X_test[:64]` would bring all "
                     f"{run['rows_viewed']:,} rows of X into the file: both are views of it, and saving a tensor "
                     "saves all of the storage it views. Export with a small example of its own.",
                     f"约 {goal:,} 字节：权重和计算图不变，示例输入从 {old:,} 字节变成 {new:,} 字节"
                     f"（运行中的文件里它占 {run['example']:,} 字节，包括描述它的几个字节）。"
                     f"不加 `.clone()`，`X_test` 甚至 `X_test[:64]` 都会把 X 的全部 {run['rows_viewed']:,} 行带进文件："
                     "它们都是 X 的视图，而保存一个张量会保存它所指向的整个存储。导出时请用一个单独创建的小示例输入。")
    if near(value, pt2, rel=0.002):
        return wrong("the file keeps the example input too: look at the parts the run printed for torch.export.",
                     "文件里还保存了示例输入：看看运行中为 torch.export 打印出的各个部分。")
    if near(value, pt2 + new, rel=0.005):
        return wrong("the whole test set takes the place of the 64-row example; it is not added to it.",
                     "整个测试集取代了那个 64 行的示例输入，而不是加在它之外。")
    if near(value, pt2 + (run["rows_viewed"] - run["example_rows"]) * run["features"] * 4, rel=0.005):
        return wrong("that is the file you get without `.clone()`: `X_test` is a view of all of X, and the whole "
                     "storage is saved. The question clones the 2,000 test samples.",
                     "那是不加 `.clone()` 时得到的文件：`X_test` 是整个 X 的视图，保存时会存下整个存储。"
                     "题目里克隆的是 2,000 个测试样本。")
    if near(value, new, rel=0.02):
        return wrong("that is the example input alone: the weights and the graph are in the file too.",
                     "这只是示例输入本身：文件里还有权重和计算图。")
    if near(value, pt2 * run["rows"] / run["example_rows"], rel=0.05):
        return wrong("only the example input grows with its rows: the weights and the graph do not depend on it.",
                     "随行数增长的只有示例输入：权重和计算图与它无关。")
    found = unit_slip(value, goal, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    return wrong("start from the run's file size, take out the 64-row example's bytes (64 × 64 × 4) and put in the "
                 "test set's (2,000 × 64 × 4).",
                 "从运行中的文件大小出发，去掉 64 行示例输入的字节数（64 × 64 × 4），换成测试集的字节数（2,000 × 64 × 4）。")
