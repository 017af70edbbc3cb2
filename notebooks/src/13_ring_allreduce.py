# %% [markdown]
# # Lesson 13 · A ring all-reduce by hand
#
# **In short.** gloo's `dist.all_reduce` is a ring: the tensor is cut into N chunks that travel from
# rank to rank, summed on the way round (a reduce-scatter), then copied round (an all-gather). Here
# you build that ring yourself from point-to-point `isend` and `recv`, watch every chunk go round,
# check on every rank that it gives the sum `dist.all_reduce` gives, count the bytes each rank sends
# against the formula 2(N−1)/N × the tensor's size, compare it with a naive scheme that sends
# everything to rank 0, time it against gloo's own ring, see why the order of `send` and `recv`
# matters, and step a ring that deadlocks, rank by rank, in a debugger.
#
# **You will learn**
# - how a ring all-reduce sums a tensor cut into N chunks in N−1 reduce-scatter and N−1 all-gather steps
# - why each rank sends 2(N−1)/N times the tensor's bytes, never twice as much, however many ranks there are
# - why "everyone sends to rank 0" moves as many bytes in total but loads rank 0 with N−1 tensors
# - where a ring written in Python loses time against gloo's, for small and for large tensors
# - why a ring in which every rank calls a blocking `send` first never finishes, how `isend` avoids it, and how to watch that deadlock form by stepping the ranks in pdb
#
# **Study time:** about 55 minutes
#
# **Needs:** nothing beyond ddplab and torch · 4 ranks
#
# **You will see:** every rank's chunks after each step of the ring, the bytes each rank sends for 2,
# 3 and 4 ranks, the hand ring timed against `dist.all_reduce` and on a timeline, and a ring that
# deadlocks, stepped rank by rank until every rank waits in `send`.

# %% [markdown] lang=zh
# # 第 13 课 · 亲手实现环形 all-reduce
#
# **简而言之**：gloo 的 `dist.all_reduce` 是一个环：张量被切成 N 块，在各 rank 之间依次传递，先在传一圈的路上求和（reduce-scatter），再把求和后的块传一圈（all-gather）。这一课用点对点的 `isend` 和 `recv` 亲手搭出这个环，看清每一块在环上的走向；在每个 rank 上检查它的结果与 `dist.all_reduce` 相同；统计每个 rank 发送的字节数，与公式“2(N−1)/N × 张量大小”对照；与一种把所有数据都发给 rank 0 的朴素做法比较；与 gloo 自己的环比较耗时；看清 `send` 和 `recv` 的先后顺序为什么重要；最后在调试器里一个 rank 一个 rank 地单步执行一个会死锁的环。
#
# **你将学到**
# - 环形 all-reduce 怎样把张量切成 N 块，用 N−1 步 reduce-scatter 和 N−1 步 all-gather 求出总和
# - 为什么每个 rank 发送的字节数是张量的 2(N−1)/N 倍，无论有多少个 rank 都达不到 2 倍
# - 为什么“所有人都发给 rank 0”的做法传输的总字节数一样多，却让 rank 0 一个人承担 N−1 个张量
# - 用 Python 写的环在小张量和大张量上分别比 gloo 的环慢在哪里
# - 为什么每个 rank 都先调用阻塞的 `send` 的环永远无法完成，`isend` 怎样避免这种情况，以及怎样在 pdb 中单步执行各 rank，看着死锁形成
#
# **学习时间**：约 55 分钟
#
# **需要**：除 ddplab 和 torch 外无需其他 · 4 个 rank
#
# **你将看到**：环的每一步之后每个 rank 上的各块；2、3、4 个 rank 时每个 rank 发送的字节数；亲手实现的环与 `dist.all_reduce` 的耗时对比及其时间线；以及一个发生死锁的环，一个 rank 一个 rank 地单步执行，直到每个 rank 都在 `send` 中等待。

# %%
%load_ext ddplab
from ddplab.lessons import check, draw, lab, predict, reveal, say

# %%
# a collective, or a send, that waits 10 s fails (part 6 waits for that)
%ddp_start 4 --timeout 10

# %% [markdown]
# ## 1. The ring, step by step
#
# The N ranks sit on a ring: rank *r* sends only to its right neighbour *r*+1 and receives only from
# its left neighbour *r*−1 (rank N−1's right neighbour is rank 0). Each rank cuts its tensor into N
# chunks, numbered 0 to N−1.
#
# - **Reduce-scatter, steps 1 to N−1.** At step *s* rank *r* sends its chunk (*r*−*s*+1) mod N
#   and receives chunk (*r*−*s*) mod N, which it **adds** to its own copy of that chunk. A chunk
#   thus picks up one more rank's numbers at every step. After N−1 steps, rank *r* holds chunk
#   (*r*+1) mod N summed over all N ranks: each rank owns one complete chunk.
# - **All-gather, steps 1 to N−1.** The complete chunks go round the same way: at step *s* rank
#   *r* sends chunk (*r*−*s*+2) mod N (complete) and **copies** the complete chunk (*r*−*s*+1) mod N
#   it receives over its own. After N−1 more steps every rank holds every complete chunk.
#
# Each step, a rank sends one chunk and receives one chunk at the same time. A blocking `dist.send`
# on gloo returns only once the receiver has called its `recv` (part 5 shows what that does to a
# ring), so the function below starts its send with `dist.isend`, which returns at once, then
# waits in `dist.recv` for the left neighbour's chunk, then for its own send to be done. It
# receives every chunk into one buffer, `incoming`, then adds the buffer to its chunk (reduce-scatter)
# or copies it over its chunk (all-gather). It returns the bytes the rank sent. `ranks` lets a ring run on the first few ranks only (part 3),
# and `timeline` records each step (part 4).

# %% [markdown] lang=zh
# ## 1. 一步一步看环
#
# N 个 rank 围成一个环：rank *r* 只向右边的邻居 *r*+1 发送，只从左边的邻居 *r*−1 接收（rank N−1 右边的邻居是 rank 0）。每个 rank 把自己的张量切成 N 块，编号从 0 到 N−1。
#
# - **reduce-scatter，第 1 到 N−1 步。** 在第 *s* 步，rank *r* 发出自己的第 (*r*−*s*+1) mod N 块，同时收到第 (*r*−*s*) mod N 块，并把它**加到**自己的这一块上。这样，每一块每走一步就多加上一个 rank 的数。N−1 步之后，rank *r* 持有的第 (*r*+1) mod N 块已经是所有 N 个 rank 的和：每个 rank 各拥有一个完整的块。
# - **all-gather，第 1 到 N−1 步。** 完整的块沿着同一个方向再传一圈：在第 *s* 步，rank *r* 发出（完整的）第 (*r*−*s*+2) mod N 块，并用收到的完整的第 (*r*−*s*+1) mod N 块**覆盖**自己的那一块。再过 N−1 步，每个 rank 就持有所有完整的块。
#
# 每一步中，一个 rank 同时发送一块、接收一块。在 gloo 上，阻塞的 `dist.send` 要等到接收方调用了它的 `recv` 才返回（第 5 部分会看到这对一个环意味着什么），所以下面的函数先用立即返回的 `dist.isend` 开始发送，然后在 `dist.recv` 中等待左邻居发来的块，最后再等自己的发送完成。它把每一块都收到同一个缓冲区 `incoming` 里，然后把缓冲区加到自己的那一块上（reduce-scatter），或者用它覆盖自己的那一块（all-gather）。它返回这个 rank 发送的字节数。参数 `ranks` 让环只在前几个 rank 上运行（第 3 部分），`timeline` 记录每一步（第 4 部分）。

# %%
%%ddp
from contextlib import nullcontext
from ddplab.lessons import say


def ring_all_reduce(x, ranks=None, states=None, timeline=None):
    """Sum x over `ranks` (default: every rank), in place, around a ring; return the bytes this rank sent.
    states: a list that gets a copy of x after each step; timeline: a ddplab.lessons.ranks.Timeline."""
    ranks = list(range(world_size)) if ranks is None else ranks
    if rank not in ranks:
        return 0
    n, me = len(ranks), ranks.index(rank)
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    chunks = x.tensor_split(n)                      # n views into x: chunk c is the same part of x on every rank
    incoming = torch.empty_like(chunks[0])
    sent = 0

    def step(out, into, add):
        """Send chunk `out` to the right, receive chunk `into` from the left, add it to ours or copy it over ours."""
        nonlocal sent
        buffer = incoming[:chunks[into].numel()]
        with timeline("send/recv", out) if timeline else nullcontext():
            sending = dist.isend(chunks[out], dst=right)   # starts at once
            dist.recv(buffer, src=left)                     # waits for the left neighbour's chunk
            sending.wait()                                  # and for ours to be taken
        with timeline("add" if add else "copy", into) if timeline else nullcontext():
            if add:
                chunks[into].add_(buffer)
            else:
                chunks[into].copy_(buffer)
        sent += chunks[out].numel() * chunks[out].element_size()
        if states is not None:
            states.append(x.clone())

    for s in range(1, n):                           # reduce-scatter, steps 1 to n-1
        step(out=(me - s + 1) % n, into=(me - s) % n, add=True)
    for s in range(1, n):                           # all-gather, steps 1 to n-1
        step(out=(me - s + 2) % n, into=(me - s + 1) % n, add=False)
    return sent


x = torch.full((world_size,), 2.0 ** rank)          # one number per chunk: rank r holds 2**r
states = [x.clone()]
ring_all_reduce(x, states=states)
reference = torch.full((world_size,), 2.0 ** rank)
dist.all_reduce(reference)
print(say("after the ring:", "环结束后："), x.tolist(), say("· dist.all_reduce:", "· dist.all_reduce："), reference.tolist())

# %% [markdown]
# Each rank started with `2**rank` in every chunk, so a sum tells whose numbers it holds: 5 = 1 + 4
# is ranks 0 and 2, 15 holds all four. The next cell draws one panel per step with matplotlib (its
# code is only the drawing: skip it if you like). A row is a rank, a box is a chunk, striped in the
# colours of the ranks whose numbers it has summed and labelled with them (023: ranks 0, 2 and 3);
# the box each rank has just received (from its left neighbour) is framed in black. The last panel is not
# a step of the ring: it is what `dist.all_reduce` gave, for comparison.

# %% [markdown] lang=zh
# 每个 rank 开始时每一块里都是 `2**rank`，所以一个和就说明了它包含哪些 rank 的数：5 = 1 + 4 是 rank 0 和 rank 2 的数，15 包含全部四个 rank 的数。下一个单元格用 matplotlib 为每一步画一个面板（那些代码只是画图用的，可以跳过）。每一行是一个 rank，每个格子是一块，用它已经加上的那些 rank 的颜色画成条纹，并标出这些 rank（023：rank 0、2 和 3）；每个 rank 刚刚（从左邻居那里）收到的那一块用黑框标出。最后一个面板不是环的一步，而是 `dist.all_reduce` 给出的结果，用来对照。

# %%
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from ddplab.dashboard.html import rank_color

states = %ddp_gather states
reference = %ddp_gather reference
N = len(states)
whose = lambda v: [q for q in range(N) if int(v) >> q & 1]          # 5 -> [0, 2]
held = [[[whose(v) for v in states[r][k].tolist()] for r in range(N)] for k in range(len(states[0]))]
titles = [say("start", "开始")] + [say(f"reduce-scatter, step {s}", f"reduce-scatter 第 {s} 步") for s in range(1, N)] \
    + [say(f"all-gather, step {s}", f"all-gather 第 {s} 步") for s in range(1, N)]
panels = [(t, h, {(r, c) for r in range(N) for c in range(N) if k and h[r][c] != held[k - 1][r][c]})
          for k, (t, h) in enumerate(zip(titles, held))]
panels.append(("dist.all_reduce", [[whose(v) for v in reference[r].tolist()] for r in range(N)], set()))

with rc_context(draw._fonts()):                     # the lessons' style, with a font for Chinese labels
    fig = Figure(figsize=(2.9 * N, 5.2), layout="constrained")
    for ax, (title, boxes, fresh) in zip(fig.subplots(2, N).flat, panels):
        for r in range(N):
            y = N - 1 - r
            ax.text(-0.15, y + 0.4, f"rank {r}", ha="right", va="center", fontsize=8, color=rank_color(r))
            for c, ranks in enumerate(boxes[r]):
                for j, q in enumerate(ranks):       # one stripe per rank whose number the chunk holds
                    ax.add_patch(Rectangle((c + 0.9 * j / len(ranks), y), 0.9 / len(ranks), 0.8,
                                           facecolor=rank_color(q), alpha=0.35, lw=0))
                new = (r, c) in fresh
                ax.add_patch(Rectangle((c, y), 0.9, 0.8, fill=False, ec="black" if new else "#999999", lw=2 if new else 0.6))
                ax.text(c + 0.45, y + 0.4, "".join(map(str, ranks)), ha="center", va="center", fontsize=7)
        ax.set_xticks([c + 0.45 for c in range(N)], [say(f"chunk {c}", f"块 {c}") for c in range(N)], fontsize=7)
        ax.tick_params(length=0)
        ax.set_yticks([])
        ax.set_xlim(-1.3, N)
        ax.set_ylim(-0.1, N)
        ax.set_frame_on(False)
        ax.set_title(title, fontsize=9, loc="left")
    fig.suptitle(say("A ring all-reduce on 4 ranks: whose numbers each chunk holds after each step",
                     "4 个 rank 上的环形 all-reduce：每一步之后，每一块包含哪些 rank 的数"), fontsize=10)
    picture = draw.Picture(fig)
picture

# %% [markdown]
# Follow one chunk. Chunk 0 starts on rank 0 (reduce-scatter, step 1: rank 0 sends it to rank 1,
# which adds it: 01), goes on to rank 2 (012) and rank 3 (0123): complete after N−1 = 3
# steps, on rank 3. In the all-gather it goes on to ranks 0, 1 and 2, copied, not added. Every
# step, every rank sends one chunk and receives one: no rank is idle and no link carries more than
# one chunk at a time. Check what the picture says, on every rank:

# %% [markdown] lang=zh
# 跟着一块走一遍。第 0 块从 rank 0 出发（reduce-scatter 第 1 步：rank 0 把它发给 rank 1，rank 1 把它加上：01），接着到 rank 2（012）和 rank 3（0123）：N−1 = 3 步之后，它在 rank 3 上成为完整的块。在 all-gather 中，它继续传到 rank 0、1 和 2，这一次是覆盖，而不是相加。每一步，每个 rank 都发送一块、接收一块：没有哪个 rank 闲着，也没有哪条链路同时传输一块以上的数据。在每个 rank 上核对图中所示的内容：

# %%
everyone = list(range(N))
for r in range(N):
    assert held[N - 1][r][(r + 1) % N] == everyone                 # after reduce-scatter: chunk r+1 is complete
    assert sum(box == everyone for box in held[N - 1][r]) == 1     # and only that one
    assert all(box == everyone for box in held[-1][r])             # after all-gather: every chunk, complete
    assert states[r][-1].tolist() == reference[r].tolist()         # the same numbers as dist.all_reduce
print(say(f"after {N - 1} reduce-scatter steps each rank held one complete chunk; after {N - 1} all-gather steps, "
          f"all {N}, the same as dist.all_reduce",
          f"{N - 1} 步 reduce-scatter 之后，每个 rank 持有一个完整的块；再经过 {N - 1} 步 all-gather，持有全部 {N} 块，"
          "与 dist.all_reduce 的结果相同"))

# %% [markdown]
# ## 2. The same sum as `dist.all_reduce`
#
# Small integers are exact. Real gradients are not: each rank now takes a million random numbers,
# and the ring's result is compared with `dist.all_reduce`'s **on every rank**, with
# `torch.testing.assert_close` (a rank whose result differs fails the cell).

# %% [markdown] lang=zh
# ## 2. 与 `dist.all_reduce` 的和相同
#
# 小整数的运算是精确的，真实的梯度则不然：现在每个 rank 取一百万个随机数，**在每个 rank 上**用 `torch.testing.assert_close` 比较环的结果和 `dist.all_reduce` 的结果（只要有一个 rank 的结果不同，这个单元格就会失败）。

# %%
%%ddp
torch.manual_seed(rank)
x = torch.randn(1_000_000)
ours, theirs = x.clone(), x.clone()
ring_all_reduce(ours)
dist.all_reduce(theirs)
torch.testing.assert_close(ours, theirs)            # on this rank: raises if they differ
worst, identical = (ours - theirs).abs().max().item(), torch.equal(ours, theirs)

# %%
worst = %ddp_gather worst
identical = %ddp_gather identical
assert max(worst) < 1e-4, worst
print(say(f"the ring and dist.all_reduce agree on every rank; largest difference {max(worst):.2g}",
          f"在每个 rank 上，环与 dist.all_reduce 的结果一致；最大差值为 {max(worst):.2g}"))
if all(identical):
    print(say("and identical to the last bit this time, although gloo's ring adds each chunk's numbers in another order "
              "(float32 addition in another order may round differently)",
              "而且这一次它们每一位都相同，尽管 gloo 的环以另一种顺序把每一块中的数加起来（float32 的加法换一个顺序，舍入可能不同）"))
else:
    print(say(f"not identical to the last bit on {sum(not i for i in identical)} rank(s): gloo's ring goes round the "
              "other way (it sends to rank r−1) and adds in other pieces, so a chunk's four numbers are added in "
              "another order, and float32 addition rounds differently in another order",
              f"有 {sum(not i for i in identical)} 个 rank 上的结果并非每一位都相同：gloo 的环沿另一个方向传递（它发给 rank r−1），"
              "而且分成别的小段来加，所以一块中的四个数相加的顺序不同，而 float32 的加法换一个顺序，舍入就会不同"))

# %% [markdown]
# ## 3. Bytes per rank: the ring against "everyone sends to rank 0"
#
# In each phase a rank sends N−1 of its N chunks, so with a tensor of *S* bytes it sends
# **2(N−1)/N · S** in all. For comparison, a naive all-reduce: every rank sends its whole tensor to
# rank 0, which adds them up and sends the sum back to each. `naive_all_reduce` does that with the
# same point-to-point calls. Both run on the first 2, 3 and 4 ranks (the others wait) for a tensor
# of 3 MiB, which splits evenly into 2, 3 or 4 chunks; each counts the bytes its rank sent.

# %% [markdown] lang=zh
# ## 3. 每个 rank 的字节数：环与“所有人都发给 rank 0”
#
# 每个阶段中，一个 rank 发出它 N 块中的 N−1 块，所以对于 *S* 字节的张量，它总共发送 **2(N−1)/N · S**。作为对比，看一种朴素的 all-reduce：每个 rank 把整个张量发给 rank 0，rank 0 把它们加起来，再把和分别发回给每个 rank。`naive_all_reduce` 用同样的点对点调用来实现它。两者都分别在前 2、3、4 个 rank 上运行（其余的 rank 等待），张量为 3 MiB，正好能均分成 2、3 或 4 块；它们各自统计自己的 rank 发送的字节数。

# %% [markdown]
# **Predict, then run.** Take 4 ranks and the 3 MiB tensor, and add up the bytes that all 4 ranks
# send. Predict the ring's total as a multiple of the naive scheme's total (0.5 = the ring sends
# half as much, 1 = the same).

# %% [markdown] lang=zh
# **先预测，再运行。** 取 4 个 rank 和 3 MiB 的张量，把 4 个 rank 发送的字节数加起来。预测环的总量是朴素做法总量的多少倍（0.5 表示环只发送一半，1 表示一样多）。

# %%
predict("13.total_bytes", ...)    # all 4 ranks' bytes in the ring, as a multiple of the naive scheme's

# %%
%%ddp
def naive_all_reduce(x, ranks=None):
    """Sum x over `ranks`: everyone sends x to the first rank, which adds and sends the sum back; return the bytes sent."""
    ranks = list(range(world_size)) if ranks is None else ranks
    if rank not in ranks:
        return 0
    root, nbytes = ranks[0], x.numel() * x.element_size()
    if rank != root:
        dist.send(x, dst=root)                      # the whole tensor to the root
        dist.recv(x, src=root)                      # and the whole sum back
        return nbytes
    incoming = torch.empty_like(x)
    for r in ranks[1:]:
        dist.recv(incoming, src=r)
        x.add_(incoming)
    for sending in [dist.isend(x, dst=r) for r in ranks[1:]]:
        sending.wait()
    return (len(ranks) - 1) * nbytes

S = 786_432                                         # float32 numbers: 3 MiB
sent = {}                                           # ranks in the ring -> (bytes sent by the ring, by the naive scheme)
for n in (2, 3, 4):
    members = list(range(n))
    ring, naive = torch.ones(S), torch.ones(S)
    sent[n] = (ring_all_reduce(ring, members), naive_all_reduce(naive, members))
    if rank < n:
        assert (ring == n).all() and (naive == n).all()
    dist.barrier()

# %%
sent = %ddp_gather sent
size = 4 * 786_432                                  # the tensor's bytes
rows = {}
for n in (2, 3, 4):
    ring = [sent[r][n][0] for r in range(n)]
    naive = [sent[r][n][1] for r in range(n)]
    assert ring == [2 * (n - 1) * size // n] * n                   # 2(N-1)/N of the tensor, on every rank
    assert naive == [(n - 1) * size] + [size] * (n - 1)            # rank 0: N-1 tensors; the others: one
    assert sum(ring) == sum(naive) == 2 * (n - 1) * size           # the same total
    rows[n] = ring, naive
    print(say(f"{n} ranks: ring {ring[0] / 2**20:.2f} MiB from every rank (2·{n - 1}/{n} × 3 MiB); "
              f"naive: rank 0 {naive[0] / 2**20:.0f} MiB, the others {naive[1] / 2**20:.0f} MiB each; "
              f"total {sum(ring) / 2**20:.0f} MiB both ways",
              f"{n} 个 rank：环中每个 rank 发送 {ring[0] / 2**20:.2f} MiB（2·{n - 1}/{n} × 3 MiB）；"
              f"朴素做法中 rank 0 发送 {naive[0] / 2**20:.0f} MiB，其余每个 rank {naive[1] / 2**20:.0f} MiB；"
              f"两种做法的总量都是 {sum(ring) / 2**20:.0f} MiB"))
reveal("13.total_bytes", float(sum(rows[4][0]) / sum(rows[4][1])), unit=say("× the naive total", "× 朴素做法的总量"))
ns = list(rows)
draw.lines(None, panels=[
    dict(series={say("ring, every rank", "环，每个 rank"): (ns, [rows[n][0][0] / 2**20 for n in ns]),
                 say("naive, rank 0", "朴素做法，rank 0"): (ns, [rows[n][1][0] / 2**20 for n in ns]),
                 say("naive, other ranks", "朴素做法，其他 rank"): (ns, [rows[n][1][1] / 2**20 for n in ns])},
         xlabel=say("ranks", "rank 数"), ylabel=say("MiB sent by one rank", "一个 rank 发送的 MiB"),
         title=say("Bytes one rank sends (3 MiB tensor)", "一个 rank 发送的字节数（3 MiB 张量）")),
    dict(series={say("ring", "环"): (ns, [sum(rows[n][0]) / 2**20 for n in ns]),
                 say("naive", "朴素做法"): (ns, [sum(rows[n][1]) / 2**20 for n in ns])},
         xlabel=say("ranks", "rank 数"), ylabel=say("MiB sent by all ranks", "所有 rank 发送的 MiB"),
         title=say("Bytes all ranks send together", "所有 rank 发送的字节总数")),
])

# %% [markdown]
# **A common claim / what actually happens.** A common claim: a ring all-reduce sends fewer bytes
# than gathering everything on one rank. What actually happens: both send 2(N−1) · *S* bytes in
# total (the right panel; in the naive scheme N−1 tensors go to rank 0 and N−1 sums come back), as
# the run above counted. The ring wins by **spreading** them: no rank sends more than
# 2(N−1)/N · *S*, less than 2 *S* however many ranks there are, while rank 0 of the naive scheme
# sends (N−1) · *S* and receives as much. Between machines, each with its own network link, the
# naive scheme's time grows with N (rank 0's link carries it all); for large tensors the ring's
# hardly changes.
#
# The ring pays for that with steps: 2(N−1) of them, each waiting for a neighbour, so for small
# tensors, whose time is the fixed cost of each message, the ring gets slower as N grows (lesson 12
# measured that cost for `dist.all_reduce`).

# %% [markdown] lang=zh
# **常见说法 / 实际情况。** 一种常见的说法是：环形 all-reduce 比把所有数据集中到一个 rank 上发送的字节更少。实际情况是：两者发送的总字节数都是 2(N−1) · *S*（右边的面板；朴素做法中，N−1 个张量发到 rank 0，N−1 个和再发回去），上面的运行正是这样统计出来的。环的优势在于把字节**分摊**开：没有哪个 rank 发送超过 2(N−1)/N · *S*，无论有多少个 rank，都不到 2 *S*；而朴素做法中 rank 0 要发送 (N−1) · *S*，还要接收同样多。在机器之间，每台机器有自己的网络链路，朴素做法的耗时随 N 增长（rank 0 的链路要承担全部数据）；对大张量而言，环的耗时几乎不变。
#
# 环为此付出的代价是步数：一共 2(N−1) 步，每一步都要等一个邻居。所以对于耗时主要是每条消息固定开销的小张量，N 越大，环越慢（第 12 课对 `dist.all_reduce` 测量过这种开销）。

# %% [markdown]
# ## 4. Timing the hand ring against gloo's
#
# `dist.all_reduce` runs the same algorithm inside one C++ call. `median_seconds` (lesson 12)
# times the hand ring, gloo's all-reduce and the naive scheme on 4 ranks, for tensors from 4 KB to
# 16 MB.

# %% [markdown] lang=zh
# ## 4. 亲手实现的环与 gloo 的环比较耗时
#
# `dist.all_reduce` 在一次 C++ 调用中运行同样的算法。下面用 `median_seconds`（第 12 课）在 4 个 rank 上对亲手实现的环、gloo 的 all-reduce 和朴素做法计时，张量从 4 KB 到 16 MB。

# %% [markdown]
# **Predict, then run.** For the smallest tensor, 4 KB on 4 ranks, which of the three is fastest?
# Answer with a letter:
#
# - (a) `dist.all_reduce`: gloo's ring, in C++
# - (b) the hand ring, in Python
# - (c) the naive scheme: everyone sends to rank 0

# %% [markdown] lang=zh
# **先预测，再运行。** 对最小的张量，即 4 个 rank 上的 4 KB，三者中哪个最快？请写一个字母：
#
# - (a) `dist.all_reduce`：gloo 的环，用 C++ 实现
# - (b) 亲手实现的环，用 Python 写成
# - (c) 朴素做法：所有人都发给 rank 0

# %%
predict("13.small_fastest", ...)    # a letter: "a", "b" or "c"

# %%
%%ddp
from ddplab.lessons.ranks import median_seconds

sizes = [1_024, 16_384, 262_144, 4_194_304]        # float32 numbers: 4 KB to 16 MB
seconds = {"ring": [], "all_reduce": [], "naive": []}
for numel in sizes:
    x = torch.ones(numel)                           # (summed again at every call: 4**k stays exact)
    seconds["ring"].append(median_seconds(lambda: ring_all_reduce(x), repeat=9, warmup=2))
    seconds["all_reduce"].append(median_seconds(lambda: dist.all_reduce(x), repeat=9, warmup=2))
    seconds["naive"].append(median_seconds(lambda: naive_all_reduce(x), repeat=9, warmup=2))

# %%
seconds = %ddp_gather seconds
seconds = seconds[0]                                # every rank got the same (the slowest rank's) times
nbytes = [4 * n for n in (1_024, 16_384, 262_144, 4_194_304)]
label = {"ring": say("hand ring", "亲手实现的环"), "all_reduce": "dist.all_reduce", "naive": say("naive", "朴素做法")}
for i, b in enumerate(nbytes):
    print(f"{b / 1024:>6g} KiB  " + "  ".join(f"{label[k]} {1e3 * seconds[k][i]:.2f} ms" for k in seconds))
fastest = min(seconds, key=lambda k: seconds[k][0])              # at 4 KB
reveal("13.small_fastest", {"all_reduce": "a", "ring": "b", "naive": "c"}[fastest])
draw.lines(None, panels=[
    dict(series={label[k]: (nbytes, t) for k, t in seconds.items()}, logx=True, logy=True,
         xlabel=say("tensor size (bytes)", "张量大小（字节）"), ylabel=say("seconds", "秒"),
         title=say("All-reduce time on 4 ranks", "4 个 rank 上 all-reduce 的耗时")),
    dict(series={say("hand ring / dist.all_reduce", "亲手实现的环 / dist.all_reduce"):
                 (nbytes, [a / b for a, b in zip(seconds["ring"], seconds["all_reduce"])]),
                 say("naive / dist.all_reduce", "朴素做法 / dist.all_reduce"):
                 (nbytes, [a / b for a, b in zip(seconds["naive"], seconds["all_reduce"])])},
         logx=True, xlabel=say("tensor size (bytes)", "张量大小（字节）"), ylabel=say("time ratio", "耗时之比"),
         title=say("Time relative to dist.all_reduce", "耗时与 dist.all_reduce 之比")),
])

# %% [markdown]
# What this run says, read from its numbers. They are noisy: 4 processes share this machine's cores,
# with whatever else runs on it. Run the timing cell again to see how much they move.

# %% [markdown] lang=zh
# 本次运行的数字说明了什么。这些数字波动较大：4 个进程与本机上运行的其他程序共享 CPU 核心。再运行一次计时单元格，看看它们变化多大。

# %%
from ddplab.shared.config import cores

ring, gloo, naive = seconds["ring"], seconds["all_reduce"], seconds["naive"]
print(say(f"4 KB on 4 ranks ({cores()} cores for them): hand ring {1e3 * ring[0]:.2f} ms ({1e3 * ring[0] / 6:.2f} ms for "
          f"each of its 6 steps), dist.all_reduce {1e3 * gloo[0]:.2f} ms, naive {1e3 * naive[0]:.2f} ms.",
          f"4 KB，4 个 rank（它们共有 {cores()} 个核心）：亲手实现的环 {1e3 * ring[0]:.2f} ms（6 步中每步 "
          f"{1e3 * ring[0] / 6:.2f} ms），dist.all_reduce {1e3 * gloo[0]:.2f} ms，朴素做法 {1e3 * naive[0]:.2f} ms。"))
if naive[0] < 0.8 * min(ring[0], gloo[0]):
    print(say("At this size the bytes hardly count: the time is waiting. The naive scheme was the fastest: ranks 1 to 3 "
              "call send at once; rank 0 receives from rank 1, then rank 2, then rank 3, in that order (a rank whose "
              "turn has not come waits in its send), adding each, then sends the sum to all three at once with isend. "
              "That is 3 receives and one round of sends. In a ring, each of the 2(N-1) = 6 steps waits for the "
              "neighbour to finish the step before: a chain that goes round the ring twice. That is the price of "
              "spreading the bytes evenly, and why NCCL and MPI implementations use other algorithms (trees, recursive "
              "doubling) for small messages.",
              "在这个大小上，字节数几乎无关紧要：时间都花在等待上。朴素做法最快：rank 1 到 3 同时调用 send；rank 0 依次从 "
              "rank 1、rank 2、rank 3 接收（还没轮到的 rank 就在它的 send 里等着），每收到一个就加上，最后用 isend 同时把和"
              "发回给这三个 rank。这只是 3 次接收加一轮发送。而在环中，2(N-1) = 6 步中的每一步都要等邻居完成上一步：这条"
              "等待链要绕环两圈。这就是把字节均匀分摊的代价，也是 NCCL 和各种 MPI 实现对小消息改用其他算法（树、递归倍增）"
              "的原因。"))
else:
    print(say("At this size the bytes hardly count: the time is waiting, and in a ring each of the 2(N-1) = 6 steps "
              "waits for the neighbour to finish the step before.",
              "在这个大小上，字节数几乎无关紧要：时间都花在等待上，而在环中，2(N-1) = 6 步中的每一步都要等邻居完成上一步。"))
small = ring[0] / gloo[0]
if small > 1.2:
    print(say(f"The hand ring took {small:.2f}x gloo's time: between two of its steps the rank's Python code must run "
              "again (isend, recv, wait and add are calls of their own), so at every step the rank needs a core and "
              "Python's interpreter lock; gloo's steps follow one another inside one C++ call, on gloo's own threads.",
              f"亲手实现的环的耗时是 gloo 的 {small:.2f} 倍：在它的两步之间，这个 rank 的 Python 代码必须再次运行（isend、"
              "recv、wait 和相加各是一次调用），所以每一步这个 rank 都需要分到一个 CPU 核心并拿到 Python 的解释器锁；而 gloo 的"
              "各步是在一次 C++ 调用内部、在 gloo 自己的线程上接连完成的。"))
elif small < 0.83:
    print(say(f"The hand ring took only {small:.2f}x gloo's time: gloo cuts each chunk into at least two segments, so "
              "for a small tensor it sends twice as many messages, each one more wait.",
              f"亲手实现的环的耗时只有 gloo 的 {small:.2f} 倍：gloo 把每一块至少再切成两段，所以对小张量来说，它发送的消息"
              "是我们的两倍，每多一条消息就多一次等待。"))
else:
    print(say(f"The hand ring took about as long as gloo's ({small:.2f}x): the waiting between steps outweighed the "
              "Python calls around them.",
              f"亲手实现的环与 gloo 的耗时差不多（为它的 {small:.2f} 倍）：步与步之间的等待超过了它们周围那些 Python 调用的"
              "开销。"))
large = ring[-1] / gloo[-1]
print(say(f"16 MB: hand ring {1e3 * ring[-1]:.1f} ms, dist.all_reduce {1e3 * gloo[-1]:.1f} ms ({large:.2f}x), "
          f"naive {1e3 * naive[-1]:.1f} ms.",
          f"16 MB：亲手实现的环 {1e3 * ring[-1]:.1f} ms，dist.all_reduce {1e3 * gloo[-1]:.1f} ms（环的耗时是它的 "
          f"{large:.2f} 倍），朴素做法 {1e3 * naive[-1]:.1f} ms。"))
if large > 1.2:
    print(say("Both rings send the same bytes, so the difference is in how the steps use the time: gloo cuts each chunk "
              "into segments and adds one segment while the next is on its way; the hand ring receives a whole chunk, "
              "then adds it, then starts the next step, so adding and sending never overlap.",
              "两个环发送的字节数相同，所以差别在于各步怎样利用时间：gloo 把每一块切成若干小段，在下一段传输的同时把上一段加"
              "起来；亲手实现的环则先收完一整块，再把它加起来，然后才开始下一步，所以相加和发送从不重叠。"))
elif large < 0.83:
    print(say("The hand ring was faster for a large tensor. Both send the same bytes; the hand ring sends each chunk as "
              "one message, where gloo cuts it into segments and sends those one after another.",
              "对大张量来说，亲手实现的环反而更快。两者发送的字节数相同；亲手实现的环把每一块作为一条消息发送，而 gloo 把它"
              "切成若干小段，一段接一段地发送。"))
else:
    print(say("For a large tensor the two rings took about as long: both send the same bytes, 2(N-1)/N of the tensor "
              "from each rank, and at this size moving the bytes is most of the time, whoever calls send and recv.",
              "对大张量来说，两个环的耗时差不多：它们发送的字节数相同，都是每个 rank 发送张量的 2(N-1)/N 倍，而在这个大小上，"
              "大部分时间都花在搬运字节上，与由谁来调用 send 和 recv 无关。"))
ratio = naive[-1] / ring[-1]
between = say(" Between machines, each with its own network link, rank 0's link would carry N-1 tensors each way, and "
              "the naive scheme's time would grow with N.",
              "在机器之间，每台机器有自己的网络链路，rank 0 的链路每个方向都要承担 N-1 个张量，朴素做法的耗时会随 N 增长。")
if ratio > 1.3:
    print(say(f"The naive scheme took {ratio:.2f}x the hand ring's time: rank 0 received and added the 3 tensors one "
              "after another, in rank order, then sent the sum to 3 ranks, while the other ranks waited; in the ring "
              "every rank works at every step.",
              f"朴素做法的耗时是亲手实现的环的 {ratio:.2f} 倍：rank 0 按 rank 的顺序依次接收并加上 3 个张量，再把和发给 3 个 "
              "rank，其他 rank 只能等待；而在环中，每一步每个 rank 都在工作。") + between)
elif ratio >= 0.77:
    print(say(f"The naive scheme took about as long ({ratio:.2f}x the hand ring's time): on one machine the bytes are "
              "copied by the CPU cores the ranks share, so what counts is their total, 2(N-1) tensors for both, not how "
              "it is spread over the ranks.",
              f"朴素做法的耗时差不多（为亲手实现的环的 {ratio:.2f} 倍）：在一台机器上，字节是由各 rank 共享的 CPU 核心来拷贝的，"
              "起作用的是字节总量（两者都是 2(N-1) 个张量），而不是它在各 rank 之间怎样分摊。") + between)
else:
    print(say(f"The naive scheme was even faster ({ratio:.2f}x the hand ring's time): it sends 6 whole tensors where the "
              "ring sends 24 chunks in 6 chained steps, and on one machine the bytes are copied by the CPU cores the "
              "ranks share, so what counts is their total, 2(N-1) tensors for both, not how it is spread over the ranks.",
              f"朴素做法甚至更快（耗时为亲手实现的环的 {ratio:.2f} 倍）：它发送 6 个完整的张量，而环要在环环相扣的 6 步中发送 24 "
              "块；在一台机器上，字节是由各 rank 共享的 CPU 核心来拷贝的，起作用的是字节总量（两者都是 2(N-1) 个张量），而不是它"
              "在各 rank 之间怎样分摊。") + between)

# %% [markdown]
# ### One hand ring on a timeline
#
# ddplab's own timeline (`%ddp_timeline`) records collectives such as `dist.all_reduce`, not
# point-to-point calls, so the ring records its own steps with `Timeline` (lesson 1): for one
# 16 MB all-reduce, each rank's send/recv and then its add (reduce-scatter) or its copy of the
# buffer over the chunk (all-gather), on one clock. The label of a bar is the chunk sent or the chunk
# received.

# %% [markdown] lang=zh
# ### 一次环形 all-reduce 的时间线
#
# ddplab 自己的时间线（`%ddp_timeline`）记录的是 `dist.all_reduce` 这样的集合通信，而不记录点对点调用，所以这里让环用 `Timeline`（第 1 课）自己记录每一步：对一次 16 MB 的 all-reduce，记录每个 rank 的 send/recv，以及随后的相加（reduce-scatter）或用缓冲区覆盖那一块（all-gather），时间都在同一个时钟上。每一段上的标签是发出的块或收到的块的编号。

# %%
%%ddp
from ddplab.lessons.ranks import Timeline

timeline = Timeline()
x = torch.ones(4_194_304)
dist.barrier()
ring_all_reduce(x, timeline=timeline)
events = timeline.events

# %%
events = %ddp_gather events
start = min(e[0] for per_rank in events for e in per_rank)
kind = {"send/recv": say("send/recv", "send/recv"), "add": say("add (reduce-scatter)", "相加（reduce-scatter）"),
        "copy": say("copy of the buffer (all-gather)", "用缓冲区覆盖（all-gather）")}
bars = [[(1e3 * (a - start), 1e3 * (b - start), kind[k], c) for a, b, k, c in per_rank] for per_rank in events]
spent = {k: sum(b - a for per_rank in events for a, b, kk, _ in per_rank if kk == k) for k in kind}
assert all(len(per_rank) == 2 * 2 * (N - 1) for per_rank in events)    # 6 steps, each a transfer then an add or copy
share = spent["send/recv"] / sum(spent.values())
print(say(f"Over the 4 ranks, {100 * share:.0f}% of the ring's time went to send/recv (waiting for the neighbour "
          f"included), {100 * spent['add'] / sum(spent.values()):.0f}% to adding and "
          f"{100 * spent['copy'] / sum(spent.values()):.0f}% to copying the buffer over the chunk.",
          f"在 4 个 rank 上，环的时间有 {100 * share:.0f}% 花在 send/recv 上（包括等待邻居），"
          f"{100 * spent['add'] / sum(spent.values()):.0f}% 花在相加上，{100 * spent['copy'] / sum(spent.values()):.0f}% 花在用缓冲区覆盖那一块上。"))
draw.timeline(bars, title=say("One 16 MB hand ring: 3 reduce-scatter steps, then 3 all-gather steps",
                              "一次 16 MB 的环：3 步 reduce-scatter，然后 3 步 all-gather"),
              xlabel=say("milliseconds", "毫秒"), kinds=list(kind.values()))

# %% [markdown]
# The steps line up across the ranks: a rank cannot start step *s*+1 before its left neighbour has
# sent the chunk of step *s*, so the slowest rank at each step sets the pace of the whole ring.
# During an add or a copy, the rank sends nothing: this is the overlap gloo's segments win back.
#
# The adds belong to the ring: a reduce-scatter must sum what it receives. The copies do not: they are
# this code's own. It receives every chunk into one buffer, `incoming`, and so must copy it over the
# chunk in the all-gather; receiving straight into the chunk, `dist.recv(chunks[into], src=left)`, would
# leave nothing to copy, and the all-gather steps would be send/recv alone.

# %% [markdown] lang=zh
# 各 rank 的步在时间上是对齐的：一个 rank 要等左邻居发出第 *s* 步的块，才能开始第 *s*+1 步，所以每一步中最慢的 rank 决定了整个环的节奏。在相加或覆盖的时候，这个 rank 什么也不发送：gloo 把块切成小段，赢回的正是这部分重叠。
#
# 相加是环本身的一部分：reduce-scatter 必须把收到的数加起来。覆盖则不是：它是这段代码自己加上的。这段代码把每一块都收到同一个缓冲区 `incoming` 里，所以在 all-gather 中必须再把它拷贝到那一块上；如果直接收到那一块里，即 `dist.recv(chunks[into], src=left)`，就没有什么需要拷贝的了，all-gather 的每一步就只剩 send/recv。

# %% [markdown]
# ## 5. The order of send and recv
#
# Why `isend` and not `send`? On gloo a blocking `dist.send` returns only once the receiver has
# called the matching `recv`. If every rank first sends to its right neighbour with `dist.send`,
# then receives, every rank waits in `send` for a neighbour that is itself waiting in `send`: no one
# ever reaches `recv`. That is a **deadlock**. ddplab does not diagnose waits in point-to-point
# calls (a `send` waiting for its `recv` is normal), so the cell runs with `--timeout 2`: after 2
# seconds every rank is interrupted, and ranks stuck inside gloo have their links cut so the `send`
# fails; the group is formed again and the ranks keep their variables.

# %% [markdown] lang=zh
# ## 5. send 和 recv 的顺序
#
# 为什么用 `isend` 而不用 `send`？在 gloo 上，阻塞的 `dist.send` 要等接收方调用了对应的 `recv` 才返回。如果每个 rank 都先用 `dist.send` 发给右邻居，再接收，那么每个 rank 都在 `send` 中等待一个同样在 `send` 中等待的邻居：谁也到不了 `recv`。这就是**死锁**。ddplab 不诊断点对点调用中的等待（`send` 等待它的 `recv` 是正常的），所以这个单元格以 `--timeout 2` 运行：2 秒后每个 rank 都被中断，卡在 gloo 内部的 rank 会被切断链路，使 `send` 失败；随后进程组重新组建，各 rank 保留自己的变量。

# %%
%%ddp --timeout 2 --expect CellTimeout
chunk = torch.ones(1_000)
dist.send(chunk, dst=(rank + 1) % world_size)     # every rank sends first: each waits for its neighbour's recv
dist.recv(chunk, src=(rank - 1) % world_size)     # never reached

# %% [markdown]
# ## 6. Stepping into the deadlock
#
# A debugger shows that deadlock forming, one rank at a time. `breakpoint()` in a `%%ddp` cell
# stops every rank that reaches it, in pdb driven from this notebook: `%ddp_step` shows where every
# rank of the cell is, and `%ddp_step [0] next` sends pdb's `next` to rank 0 only (`%ddp_step next`
# sends it to every stopped rank), with the replies side by side. A cell in the foreground asks for
# these commands in an input box; this one runs in the background (`%%ddp --background`), so that
# the next cells can step it. The same ring as above, stopped just before the exchange:

# %% [markdown] lang=zh
# ## 6. 单步走进死锁
#
# 调试器可以让我们看着这个死锁一个 rank 一个 rank 地形成。`%%ddp` 单元格中的 `breakpoint()` 会让到达它的每个 rank 停在 pdb 中，而 pdb 由这个 notebook 操控：`%ddp_step` 显示单元格的每个 rank 在哪里，`%ddp_step [0] next` 只把 pdb 的 `next` 命令发给 rank 0（`%ddp_step next` 则发给每个停住的 rank），各 rank 的回复并排显示。在前台运行的单元格会在输入框中向你要这些命令；这个单元格在后台运行（`%%ddp --background`），这样后面的单元格就可以单步执行它。还是上面那个环，停在交换之前：

# %%
%%ddp --background
chunk = torch.ones(1_000)
breakpoint()                                      # every rank stops here, before its exchange
dist.send(chunk, dst=(rank + 1) % world_size)     # every rank sends first
dist.recv(chunk, src=(rank - 1) % world_size)

# %%
import re
import time

debug = lab().debug
deadline = time.monotonic() + 30
while sorted(debug.stopped()) != list(range(N)):  # {rank: where it stopped}: wait for all four
    assert time.monotonic() < deadline, "the ranks did not all stop at the breakpoint"
    time.sleep(0.1)
%ddp_step

# %% [markdown]
# Every rank stopped on line 3, the `send`, before running it. Now rank 0 runs its `send` (`next`),
# then rank 1, rank 2 and rank 3, one at a time. The next cell does it from code:
# `lab().debug.step("[0] next")` is `%ddp_step [0] next`, returning the replies rank by rank; after
# each step it prints every rank's line of what `%ddp_step` shows.

# %% [markdown] lang=zh
# 每个 rank 都停在第 3 行，也就是 `send` 那一行，还没有执行它。现在先让 rank 0 执行它的 `send`（`next`），再依次让 rank 1、rank 2 和 rank 3 执行，一次一个。下一个单元格用代码来做这件事：`lab().debug.step("[0] next")` 就是 `%ddp_step [0] next`，它按 rank 返回各自的回复；每走一步，它就打印 `%ddp_step` 所显示的每个 rank 的那一行。

# %%
def line_of(r):
    """Rank r's line of the status: stopped at a breakpoint (where), waiting (in what) or running."""
    return next(line for line in debug.stepper.status().splitlines() if re.match(rf"rank {r}[:：]", line))


for r in range(N):
    replies = debug.step(f"[{r}] next")            # rank r runs its send ...
    assert replies[r]["kind"] == "resumed"         # ... and pdb does not get rank r back: the send does not return
    deadline = time.monotonic() + 10
    while not all("send" in line_of(q) for q in range(r + 1)):     # (its telemetry: a moment)
        assert time.monotonic() < deadline, debug.stepper.status()
        time.sleep(0.1)
    assert sorted(debug.stopped()) == list(range(r + 1, N))      # the others are still stopped
    print(say(f"after [{r}] next:", f"[{r}] next 之后："))
    for q in range(N):
        print("   ", line_of(q))
assert debug.stopped() == {} and all("send" in line_of(q) and "recv" not in line_of(q) for q in range(N))
print(say(f"all {N} ranks wait in send; none is stopped, and none will reach line 4, recv",
          f"全部 {N} 个 rank 都在 send 中等待；没有一个停在断点处，也没有一个会到达第 4 行的 recv"))

# %% [markdown]
# Read it from the top. pdb's `next` runs one line and stops at the next one; for rank 0 it did not
# come back: its `send` waits for rank 1's `recv`, and rank 1 is stopped before its own `send`. Each
# rank stepped joins the wait, and once rank 3 has called its `send`, all four wait in `send`: none
# will ever reach line 4. (After "for", the status names every rank of the cell still stopped at
# the breakpoint, whether or not that rank is the one a wait is for. A `send` waits for one rank only,
# its receiver: rank 0 for rank 1, rank 3 for rank 0.)
#
# Nothing on the ranks' side can end this wait; the pool's timeout does. The notebook cuts a
# collective or a `send` that has waited longer than the pool's timeout, which this lesson's pool set
# to 10 s (`%ddp_start 4 --timeout 10`; 30 s by default), not counting the time any rank was stopped
# at a breakpoint (so stepping is never cut short): it breaks the ranks' gloo links, and every
# `send` fails at once. (`%ddp_interrupt` would end it sooner the same way: its SIGINT cannot reach a
# rank waiting inside gloo's `send`, so ddplab goes on to cut the links, as the `--timeout` of part 5
# does.) pdb, still stepping through each rank's cell, stops at the error, on the line of the
# `send`. The next cell waits for that and prints each rank's error.

# %% [markdown] lang=zh
# 从上往下读。pdb 的 `next` 执行一行，然后停在下一行；而对 rank 0，它没有回来：rank 0 的 `send` 在等 rank 1 的 `recv`，而 rank 1 停在它自己的 `send` 之前。每单步执行一个 rank，就多一个 rank 加入等待；等 rank 3 也调用了它的 `send`，四个 rank 就都在 `send` 中等待：谁也到不了第 4 行。（状态中“等待停在断点处的 rank”后面列出的，是这个单元格中所有仍停在断点处的 rank，不管这个 rank 是不是那次等待真正在等的对象。一个 `send` 只等一个 rank，也就是它的接收方：rank 0 等 rank 1，rank 3 等 rank 0。）
#
# 各 rank 自己无法结束这种等待，进程池的超时可以。notebook 会切断等待时间超过进程池超时的集合通信或 `send`；本课的进程池把超时设成了 10 秒（`%ddp_start 4 --timeout 10`；默认 30 秒），而且不计任何 rank 停在断点处的时间（所以单步调试永远不会被提前打断）：它切断各 rank 的 gloo 链路，每个 `send` 都立即失败。（`%ddp_interrupt` 会用同样的办法更早地结束它：它的 SIGINT 到达不了在 gloo 的 `send` 内部等待的 rank，于是 ddplab 接着切断链路，正如第 5 部分的 `--timeout` 所做的那样。）pdb 仍在逐个 rank 单步执行单元格，会停在出错的地方，也就是 `send` 那一行。下一个单元格等到这一刻，并打印每个 rank 的错误。

# %%
deadline = time.monotonic() + 60
while sorted(debug.stopped()) != list(range(N)):  # until every rank's send has failed and pdb stopped on it
    assert time.monotonic() < deadline, debug.stepper.status()
    time.sleep(0.2)
errors = {r: where["out"].splitlines()[0] for r, where in sorted(debug.stopped().items())}
for r, error in errors.items():
    print(f"rank {r}:", re.sub(r"\[/\S+\] ", "", error)[:110])  # (without the path of gloo's source file)
assert all(where["line"] == 3 for where in debug.stopped().values())  # on the send: none got past it
assert all(error.startswith("RuntimeError") for error in errors.values())
print(say(f"every rank's send failed when ddplab cut the links, {lab().config.timeout:g} s (the pool's timeout) after "
          "the last rank was stopped at the breakpoint",
          f"在最后一个 rank 离开断点 {lab().config.timeout:g} 秒（进程池的超时）之后，ddplab 切断了链路，每个 rank 的 send 都失败了"))

# %% [markdown]
# `%ddp_step c` lets every rank continue: each raises its error, the cell ends, and ddplab forms the
# group again (the ranks keep their variables). `%ddp_wait` would show that failure as an error;
# the cell below calls what it calls, `lab().wait()`, and catches the failure to print how the cell
# ended.

# %% [markdown] lang=zh
# `%ddp_step c` 让每个 rank 继续运行：每个 rank 都抛出它的错误，单元格结束，ddplab 重新组建进程组（各 rank 保留自己的变量）。`%ddp_wait` 会把这个失败显示为一个错误；下面的单元格调用它所调用的 `lab().wait()`，捕获这个失败，打印单元格是怎样结束的。

# %%
%ddp_step c
from ddplab import RankFailed

try:
    lab().wait(30)
    raise AssertionError("the deadlocked cell ended without an error")
except RankFailed as failure:
    ended = failure
assert sorted(ended.failures) == list(range(N)) and all(e.ename == "RuntimeError" for e in ended.failures.values())
print(say(f"the cell ended with a RuntimeError on all {N} ranks; ", f"单元格结束，全部 {N} 个 rank 都抛出了 RuntimeError；")
      + say("; ", "；").join(ended.result.recovery))

# %% [markdown]
# After both deadlocks, the ring of part 1 is still defined on every rank, and works:

# %% [markdown] lang=zh
# 经历了这两次死锁，第 1 部分的环在每个 rank 上仍然有定义，而且照常工作：

# %%
%%ddp
x = torch.ones(8)
ring_all_reduce(x)
assert (x == world_size).all()
print(x.tolist())

# %% [markdown]
# ## Exercises

# %% [markdown] lang=zh
# ## 练习

# %% [markdown]
# **13.1** In part 3 every rank of a 4-rank ring sent 1.5 × the 3 MiB tensor. How many **bytes**
# does each rank send to all-reduce the same tensor with a ring of 8 ranks? Write a number.

# %% [markdown] lang=zh
# **13.1** 在第 3 部分中，4 个 rank 的环里每个 rank 发送了 3 MiB 张量的 1.5 倍。用 8 个 rank 的环对同一个张量做 all-reduce，每个 rank 要发送多少**字节**？写一个数。

# %%
answer = ...    # bytes each rank sends, 8 ranks, the 3 MiB tensor
check("13.1", answer, size=size, sent_by_4=rows[4][0][0])

# %% [markdown]
# **13.2** How many steps (each: send one chunk to the right, receive one from the left) does every
# rank make in a ring all-reduce over 8 ranks? Write a whole number.

# %% [markdown] lang=zh
# **13.2** 在 8 个 rank 上做一次环形 all-reduce，每个 rank 要走多少步（每一步：向右发一块，从左收一块）？写一个整数。

# %%
answer = ...    # steps of a ring all-reduce over 8 ranks
check("13.2", answer, steps_for_4=len(states[0]) - 1)

# %% [markdown]
# **13.3** In part 5 every rank called the blocking `dist.send` first and the ring never finished.
# Now only **rank 0** changes its order: it calls `dist.recv` from rank 3 first, then `dist.send` to
# rank 1; ranks 1, 2 and 3 still send first, then receive. What happens? (You can watch it: change the
# cell of part 6 and step the ranks.) Write a letter:
#
# - **a**: it still deadlocks: every rank waits forever
# - **b**: it finishes, but some ranks receive the wrong neighbour's numbers
# - **c**: ddplab stops it with a collective mismatch
# - **d**: it finishes with the right result, but the four transfers happen one after another

# %% [markdown] lang=zh
# **13.3** 在第 5 部分中，每个 rank 都先调用阻塞的 `dist.send`，环永远无法完成。现在只有 **rank 0** 改变顺序：先从 rank 3 调用 `dist.recv`，再向 rank 1 调用 `dist.send`；rank 1、2、3 仍然先发送、再接收。会发生什么？（你可以亲眼看一看：改一改第 6 部分的单元格，再单步执行各 rank。）写一个字母：
#
# - **a**：仍然死锁：每个 rank 都永远等待下去
# - **b**：能完成，但有的 rank 收到的是错误邻居的数
# - **c**：ddplab 以集合通信不匹配（collective mismatch）为由终止它
# - **d**：能完成，结果正确，但四次传输是一个接一个进行的

# %%
answer = ...    # a, b, c or d
check("13.3", answer)

# %% [markdown]
# **13.4** In part 3, rank 0 of the naive scheme sent 2 × what each rank of the ring sent, with 4
# ranks. With **16 ranks** and the same tensor, how many times what a ring rank sends does rank 0 of
# the naive scheme send? Write a number.

# %% [markdown] lang=zh
# **13.4** 在第 3 部分中，4 个 rank 时，朴素做法中 rank 0 发送的字节数是环中每个 rank 的 2 倍。换成 **16 个 rank**、同一个张量，朴素做法中 rank 0 发送的字节数是环中一个 rank 的几倍？写一个数。

# %%
answer = ...    # rank 0's bytes in the naive scheme / a ring rank's bytes, 16 ranks
check("13.4", answer, naive_rank0_for_4=rows[4][1][0], ring_for_4=rows[4][0][0])

# %%
%ddp_stop
