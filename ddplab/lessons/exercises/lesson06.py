"""Lesson 6: model parallelism, a GPipe pipeline over 4 ranks (or 2: a stage of two blocks each)."""
from . import exercise, near, number, right, unit_slip, whole_number, wrong, wrong_unit


def bubble(run):
    p, m = run["stages"], run["micro"]
    return (p - 1) / (m + p - 1)


@exercise("6.1", solution=bubble, mistake=lambda run: (run["stages"] - 1) / run["micro"])
def bubble_share(answer, run):
    value, goal, p, m = number(answer), bubble(run), run["stages"], run["micro"]
    if near(value, goal, rel=0.03):
        return right(f"(p − 1) / (m + p − 1) = {p - 1}/{m + p - 1} ≈ {goal:.3f}: the step lasts m + p − 1 "
                     f"micro-batch slots, and each rank computes in m of them.",
                     f"(p − 1) / (m + p − 1) = {p - 1}/{m + p - 1} ≈ {goal:.3f}：一步持续 m + p − 1 个微批次时段，每个 rank "
                     f"只在其中 m 个时段里计算。")
    if value > 1:
        return wrong("give a fraction between 0 and 1 (0.25 for a quarter).", "请给出 0 到 1 之间的小数（四分之一写作 0.25）。")
    if near(value, (p - 1) / m, rel=0.03):
        return wrong("the idle slots are right, but the step is longer than m slots: the last micro-batch still "
                     "has to go through the other stages.",
                     "空闲的时段数对了，但一步不止 m 个时段：最后一个微批次还要走完其余各段。")
    return wrong("count slots of one micro-batch on one stage: how many does the whole step last, and in how "
                 "many of them does a given rank compute?",
                 "以“一个微批次在一段上”为一个时段来数：整步持续多少个时段？某个 rank 在其中多少个时段里计算？")


def boundary_bytes(run):
    return 2 * (run["stages"] - 1) * run["batch"] * run["hidden"] * 4


@exercise("6.2", solution=boundary_bytes, mistake=lambda run: boundary_bytes(run) * run["micro"])
def bytes_between_stages(answer, run):
    value, goal = number(answer), boundary_bytes(run)
    if near(value, goal, rel=0.02):
        sizes = f"{run['stages'] - 1} × 2 × {run['batch']} × {run['hidden']} × 4"
        return right(f"{goal:,} bytes ({goal / 2 ** 20:.0f} MiB): {sizes} (boundaries × directions × samples × "
                     f"features × bytes). The micro-batches make {run['micro']} times as many messages, each "
                     f"{run['micro']} times smaller, so the total does not depend on m.",
                     f"{goal:,} 字节（{goal / 2 ** 20:.0f} MiB）：{sizes}（分界 × 方向 × 样本数 × 特征数 × 字节）。"
                     f"微批次让消息的个数变为原来的 {run['micro']} 倍，而每条消息减少到原来的 1/{run['micro']}，"
                     f"所以总量与 m 无关。")
    if near(value, goal * run["micro"], rel=0.02):
        return wrong("each micro-batch carries only its share of the batch: its messages are smaller.",
                     "每个微批次只带着批次中属于它的那一份：它的消息更小。")
    found = unit_slip(value, goal, "bytes")
    if found:
        return wrong_unit(found, "bytes")
    if near(value, goal / 2, rel=0.02):
        return wrong("gradients come back across the same boundaries: count both directions.",
                     "梯度还要沿同样的分界传回来：两个方向都要算上。")
    return wrong("per boundary and direction, the whole batch's activations (or their gradients) cross once: "
                 "samples × features × 4 bytes.",
                 "每个分界、每个方向上，整个批次的激活值（或它们的梯度）各穿过一次：样本数 × 特征数 × 4 字节。")


def one_f_one_b(run):
    return min(run["micro"], run["stages"] - run["rank"])


@exercise("6.3", solution=one_f_one_b, mistake=lambda run: run["micro"])
def activations_kept(answer, run):
    n, goal = whole_number(answer), one_f_one_b(run)
    if n == goal:
        return right(f"{goal}: rank 0 runs p − 0 = {goal} forwards first; from then on every backward frees one "
                     f"micro-batch's activations before the next forward adds one. GPipe would hold all "
                     f"{run['micro']}.",
                     f"{goal}：rank 0 先做 p − 0 = {goal} 次前向；此后每做一次反向就释放一个微批次的激活值，下一次前向"
                     f"再加上一个。GPipe 要保存全部 {run['micro']} 个。")
    if n == run["micro"]:
        return wrong("that is GPipe, which runs all forwards first. Under 1F1B, when does rank 0 start freeing "
                     "activations?",
                     "那是 GPipe：它先做完所有前向。在 1F1B 下，rank 0 从什么时候开始释放激活值？")
    return wrong("count the forwards rank 0 runs before its first backward; after that, each backward frees "
                 "one before the next forward.",
                 "数一数 rank 0 在第一次反向之前做了几次前向；此后每次反向都会在下一次前向之前释放一个。")


def perfect_step(run):
    p, m = run["stages"], run["micro"]
    return run["t1_ms"] * (m + p - 1) / (m * p)


@exercise("6.4", solution=perfect_step, mistake=lambda run: run["t1_ms"] / run["micro"])
def predicted_step(answer, run):
    value, goal = number(answer), perfect_step(run)
    p, m = run["stages"], run["micro"]
    if near(value, goal, rel=0.05):
        measured, cores = run["t8_ms"], run["usable"]
        why = (f"the {p} ranks shared {cores} core{'s' if cores > 1 else ''}, and smaller micro-batches compute "
               "less efficiently" if cores < p else "smaller micro-batches compute less efficiently, and each "
               "message costs time")
        why_zh = (f"{p} 个 rank 共用 {cores} 个核心，而且较小的微批次计算效率较低" if cores < p
                  else "较小的微批次计算效率较低，而且每条消息都要花时间")
        return right(f"about {goal:.0f} ms: with 1 micro-batch the step is p stage times in a row, "
                     f"T₁ = p·t; with m the step is m + p − 1 slots of t/m, so T₁ × {m + p - 1}/{m * p}. "
                     f"This run measured {measured:.0f} ms, {measured / goal:.2f} times that: {why}.",
                     f"约 {goal:.0f} 毫秒：只有 1 个微批次时，一步是 p 段依次计算，T₁ = p·t；有 m 个时，一步是 m + p − 1 个"
                     f"长为 t/m 的时段，所以是 T₁ × {m + p - 1}/{m * p}。这次运行实测 {measured:.0f} 毫秒，是它的 "
                     f"{measured / goal:.2f} 倍：{why_zh}。")
    if near(value * 1000, goal, rel=0.05):
        return wrong_unit("seconds", "ms")
    if near(value, run["t1_ms"] / m, rel=0.05) or near(value, run["t1_ms"] / p, rel=0.05):
        return wrong("the pipeline never keeps all ranks busy: it fills at the start and drains at the end.",
                     "流水线从来不能让所有 rank 一直忙着：开头要填满，结尾要排空。")
    return wrong("write T₁ as p times one stage's time t on the whole batch; a micro-batch takes t/m per stage, "
                 "and a perfect step lasts m + p − 1 such slots.",
                 "把 T₁ 写成 p 乘以一段处理整个批次的时间 t；一个微批次在每段上要 t/m，理想的一步持续 m + p − 1 个这样的时段。")
