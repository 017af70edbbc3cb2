"""Lesson 21 (two kinds of checkpoints: activations and sharded state): the exercises' judges."""
from . import exercise, letter, near, right, unit_slip, wrong, wrong_unit


def _saved(run, checkpointed=None, loss=True, relu_twice=False):
    """Bytes saved for backward per rank: a block keeps its input and its ReLU's output (one storage), a
    checkpointed block its input only, and the loss the model's output and the target."""
    b, w, h, blocks = run["batch"], run["width"], run["hidden"], run["blocks"]
    n = run["checkpointed"] if checkpointed is None else checkpointed
    per_block = w + (2 * h if relu_twice else h)
    return 4 * b * ((blocks - n) * per_block + n * w + (2 * w if loss else 0))


@exercise("21.1", solution=lambda run: _saved(run) / 1e6, mistake=lambda run: _saved(run, loss=False) / 1e6)
def saved_for_backward(answer, run):
    value, n, blocks = _saved(run) / 1e6, run["checkpointed"], run["blocks"]
    if near(answer, value, rel=0.01):
        return right(f"{blocks - n} blocks keep their input and their ReLU's output ({run['width']} + {run['hidden']} numbers "
                     f"a row), {n} keep their input only ({run['width']}), and the loss keeps the output and the target "
                     f"({2 * run['width']}): 4 bytes × {run['batch']} rows × {_saved(run) // (4 * run['batch'])} = "
                     f"{value:.2f} MB.",
                     f"{blocks - n} 个块保留它们的输入和 ReLU 的输出（每行 {run['width']} + {run['hidden']} 个数），"
                     f"{n} 个块只保留输入（{run['width']} 个），损失函数保留输出和目标值（{2 * run['width']} 个）："
                     f"4 字节 × {run['batch']} 行 × {_saved(run) // (4 * run['batch'])} = {value:.2f} MB。")
    found = unit_slip(answer, value, "MB")
    if found:
        return wrong_unit(found, "MB")
    if near(answer, _saved(run, loss=False) / 1e6, rel=0.01):
        return wrong("almost: the loss keeps two tensors of its own for backward. Which?",
                     "差一点：损失函数自己也为反向传播保留了两个张量。是哪两个？")
    if near(answer, _saved(run, checkpointed=blocks - n) / 1e6, rel=0.01):
        return wrong(f"that is {blocks - n} blocks checkpointed and {n} not: the question checkpoints the first {n}.",
                     f"这是 {blocks - n} 个块使用激活检查点、{n} 个块不用：题目是对前 {n} 个块使用。")
    if near(answer, _saved(run, relu_twice=True) / 1e6, rel=0.01):
        return wrong("the ReLU's output is saved twice (by the ReLU and by the second Linear), but it is one tensor: "
                     "one piece of memory, counted once.",
                     "ReLU 的输出被保存了两次（ReLU 一次，第二个 Linear 一次），但它是同一个张量：只占一份内存，只算一次。")
    if near(answer, _saved(run, checkpointed=0) / 1e6, rel=0.01) or near(answer, _saved(run, checkpointed=blocks) / 1e6,
                                                                         rel=0.01):
        return wrong("that is one of part 1's settings (none, or every block): count 6 checkpointed blocks and 2 others.",
                     "这是第 1 部分的某种设置（不用，或者每个块都用）：请按 6 个使用激活检查点的块和 2 个不用的块来算。")
    return wrong("count per row: a block without checkpointing keeps width + hidden numbers, a checkpointed one width, "
                 "the loss 2 × width; then 4 bytes a number, times the batch.",
                 "按每一行来数：不用激活检查点的块保留 width + hidden 个数，用的块保留 width 个，损失函数保留 2 × width 个；"
                 "再乘以每个数 4 字节和批大小。")


def _product(run):
    return 2 * run["batch"] * run["width"] * run["hidden"] / 1e9  # GFLOP of one Linear's product in forward


def _no_early_stop(run):
    return run["gflop_none"] + run["blocks"] * 2 * _product(run)


@exercise("21.2", solution=_no_early_stop,
          mistake=lambda run: run["gflop_none"] + run["blocks"] * _product(run))
def no_early_stop(answer, run):
    value, one, blocks = _no_early_stop(run), _product(run), run["blocks"]
    if near(answer, value, rel=0.01):
        early = run["gflop_none"] + blocks * one
        return right(f"without early stop the recompute runs each block's whole forward, both products: "
                     f"{run['gflop_none']:.2f} + {blocks} × 2 × {one:.3f} = {value:.2f} GFLOP, "
                     f"{value / run['gflop_none'] - 1:.0%} more than without checkpointing, where early stop made it "
                     f"{early / run['gflop_none'] - 1:.0%}.",
                     f"没有提前停止时，重新计算会运行每个块完整的前向，两次乘法都做：{run['gflop_none']:.2f} + {blocks} × 2 × "
                     f"{one:.3f} = {value:.2f} GFLOP，比不用激活检查点时多 {value / run['gflop_none'] - 1:.0%}，"
                     f"而有提前停止时只多 {early / run['gflop_none'] - 1:.0%}。")
    if near(answer, value * 1e9, rel=0.01):
        return wrong_unit("FLOP", "GFLOP")
    if near(answer, run["gflop_none"] + blocks * one, rel=0.01):
        return wrong("that is what part 1 measured, with early stop: without it, which product runs again too?",
                     "这是第 1 部分有提前停止时测到的：没有它时，还有哪次乘法也要再运行一遍？")
    if near(answer, run["gflop_none"], rel=0.01):
        return wrong("that is a step without checkpointing: the recompute adds products of its own.",
                     "这是不用激活检查点时的一步：重新计算会另外增加一些乘法。")
    return wrong("start from part 1's step without checkpointing, and add what the recompute runs: each block's "
                 "forward, two Linear products of 2 × batch × width × hidden FLOPs each.",
                 "从第 1 部分不用激活检查点的那一步出发，再加上重新计算运行的东西：每个块的前向，两次 Linear 乘法，"
                 "每次 2 × batch × width × hidden 次浮点运算。")


@exercise("21.3", solution=lambda run: "a", mistake=lambda run: "b")
def rank0_state_dict(answer, run):
    choice, shard, n = letter(answer, ("a", "b", "c")), run["shard"], run["ranks"]
    if choice == "a":
        return right(f"under FSDP2, state_dict() returns DTensors, and rank 0's DTensors hold only its shards: "
                     f"{shard / 1e6:.2f} MB of the model's {n * shard / 1e6:.2f} MB. torch.save writes them (a "
                     f"DTensor pickles its local shard and its layout), and the other {n - 1} shards are in no file. "
                     "Hence DCP, or a full state dict gathered first.",
                     f"在 FSDP2 下，state_dict() 返回的是 DTensor，而 rank 0 的 DTensor 只含它自己的分片：模型的 "
                     f"{n * shard / 1e6:.2f} MB 中的 {shard / 1e6:.2f} MB。torch.save 会把它们写下来（DTensor 被 pickle 时"
                     f"保存的是本地分片和它的布局），另外 {n - 1} 个分片不在任何文件里。"
                     "所以要用 DCP，或者先收集完整的状态字典。")
    if choice == "b":
        return wrong("look at part 2's printout: what shape is blocks.0.0.weight's local part on a rank? state_dict() "
                     "does not gather; full_tensor() or a full state dict (StateDictOptions) does.",
                     "看看第 2 部分的输出：blocks.0.0.weight 在一个 rank 上的本地部分是什么形状？state_dict() 不做收集；"
                     "做收集的是 full_tensor() 或者完整状态字典（StateDictOptions）。")
    return wrong("torch.save can write a DTensor (it pickles the local shard and the layout): the question is what "
                 "that shard holds. Try it on the pool of 2.",
                 "torch.save 能写 DTensor（它 pickle 的是本地分片和布局）：问题在于那个分片里有什么。在有 2 个 rank 的"
                 "进程池上试一试。")


def _files(run):
    """The saved files (their ranks) that hold rows of rank `rank` of `loaded_by`, for a tensor of `rows`
    rows saved by `saved_by` ranks, both split as torch.chunk splits."""
    rows, saved, loaded, k = run["rows"], run["saved_by"], run["loaded_by"], run["rank"]
    size, piece = -(-rows // loaded), -(-rows // saved)
    start, end = k * size, min((k + 1) * size, rows)
    return start, end, {s for s in range(saved) if s * piece < end and min((s + 1) * piece, rows) > start}


CHOICES = {"a": {1}, "b": {0, 1}, "c": {1, 2}, "d": {0, 1, 2, 3}}


def _right_letter(run):
    return next((c for c, files in CHOICES.items() if files == _files(run)[2]), None)


@exercise("21.4", solution=_right_letter, mistake=lambda run: "a")
def reshard_onto_three(answer, run):
    choice = letter(answer, tuple(CHOICES))
    start, end, files = _files(run)
    piece = -(-run["rows"] // run["saved_by"])
    if CHOICES[choice] == files:
        return right(f"rank {run['rank']} of {run['loaded_by']} holds rows {start}-{end - 1}; the checkpoint's chunks are "
                     f"{piece} rows each, so those rows lie in the files of ranks "
                     f"{' and '.join(str(s) for s in sorted(files))}: DCP reads the overlap of each, and nothing else.",
                     f"{run['loaded_by']} 个 rank 中的 rank {run['rank']} 持有第 {start}-{end - 1} 行；检查点中的每块是 "
                     f"{piece} 行，所以这些行在 rank {' 和 '.join(str(s) for s in sorted(files))} 的文件中：DCP 从每个文件中"
                     "只读重叠的部分。")
    if choice == "a":
        return wrong("the files are cut by the old layout (4 ranks), not by rank numbers: which rows does rank 1 of 3 "
                     "hold, and which chunks contain them?",
                     "文件是按旧的布局（4 个 rank）切分的，与 rank 的编号无关：3 个 rank 中的 rank 1 持有哪些行？"
                     "哪些块包含这些行？")
    if choice == "d":
        return wrong("DCP reads only the chunks that overlap the rows a rank holds now: which chunks overlap rows "
                     f"{start}-{end - 1}?",
                     f"DCP 只读取与一个 rank 现在持有的行有重叠的块：哪些块与第 {start}-{end - 1} 行重叠？")
    return wrong(f"rank 1 of 3 holds rows {start}-{end - 1}; compare them with the chunks printed in part 3 "
                 f"({piece} rows each).",
                 f"3 个 rank 中的 rank 1 持有第 {start}-{end - 1} 行；把它们与第 3 部分输出的各块（每块 {piece} 行）比较一下。")
