"""Where each rank is, and collectives that can never finish, from what the ranks report (probe.py
sends each rank's line and collective while a cell runs longer than a second). Pure: no torch.

- where_text(): "rank 2: all_reduce (line 7), waiting 12 s; ranks 0, 1, 3: broadcast (line 5)"
- mismatch(): ranks waiting in collectives that cannot match (another op, group, shape or dtype
  on a peer they wait for), or waiting for ranks that finished the cell, or that do not run it.
- HINTS: what learners do by mistake (in Chinese too: zh.py).
"""
import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .words import say

WhereRecord = Mapping[str, Any]  # where a rank is (wire.Where: line, op, group, shape, dtype, since, calls)
CallsRecord = Mapping[str, Any]  # the collectives a finished rank entered (wire.Calls: {"calls": n, "last": where})

# (Not DDPLab settings: what counts as waiting is part of what the diagnosis means, and the lessons
# and tests teach it as it is; a collective takes milliseconds here, a second is far beyond.)
SYMMETRIC = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "all_gather_object",
             "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "barrier", "all_to_all",
             "all_to_all_single"}  # collectives no member completes before every member entered them
BLOCKED = 1.0  # seconds in a collective before a rank counts as waiting in it
SKIPPED = 1.0  # seconds ranks wait for a rank that finished the cell (it cannot come back) before it is said
POINT_TO_POINT = {"send", "recv", "isend", "irecv"}  # a send and a recv are a pair, not a mismatch

TEXTS = {  # what diagnosis says, in English (zh.py: in Chinese)
    'line': 'line {line}',
    'waiting': 'waiting {s:.0f} s',
    'stopped': 'stopped at a breakpoint (line {line})',
    'for_stopped': 'for {who}, stopped at a breakpoint',
    'running': 'running',
    'rank': 'one|rank',
    'ranks': 'many|ranks',
    'mismatch': 'collective mismatch: {calls}. Every rank of a group must call the same collectives, in the same '
                'order, with tensors of the same shape and dtype',
    'called': '{who} called {call}',
    'skipped': '{who} {wait} in {call} for {peers}, which finished the cell without calling it',
    'waits_for': '{who} {wait} in {call}; {peers}',
    'waits_in': '{who} {wait} in {call}',
    'called_and_finished': '{who} called {call} and finished the cell',
    'finished_without': '{who} finished the cell without calling it',
    'absent': '{who} {wait} in {call} for {peers}, which do not run this cell (%%ddp --ranks): a collective on '
              'the default group needs every rank',
    'at': 'at line {line}',
    'group': '{group} group',
    'default': 'default',
    'sep': 'list|; ',
}
HINTS = {  # what learners do by mistake, in English (zh.py: in Chinese)
    'init_again': 'init_process_group(...) in a cell: ddplab already formed this group (gloo, every rank), so the '
                  'line did nothing here and can go (a script started by torchrun needs it)',
    'init_other': 'init_process_group(...) asked for a group other than the one ddplab formed: use '
                  'dist.new_group(ranks) for a group of some ranks, or %ddp_stop and %ddp_start for another pool',
    'destroyed': 'the cell called dist.destroy_process_group(): ddplab formed the group again ({ms:.0f} ms), so '
                 'the next cell has one; objects made with the old group (a DDP model, a new_group) must be made '
                 'again',
    'set_epoch': 'a DistributedSampler was iterated again without set_epoch(epoch): every epoch gets the same '
                 'order of samples; call sampler.set_epoch(epoch) at the start of each epoch',
}


@dataclass
class Mismatch:
    text: str
    ranks: list[int]  # every rank involved


@functools.cache  # (a running cell's monitor asks several times a poll; never changed by its callers)
def _t(lang: str) -> dict[str, str]:
    return {key: say(lang, text) for key, text in TEXTS.items()}


def _wait(ranks: Sequence[int], lang: str) -> str:
    return say(lang, "waits" if len(ranks) == 1 else "wait")


def who(ranks: Collection[int], lang: str = "en") -> str:
    t = _t(lang)
    return f"{t['rank'] if len(ranks) == 1 else t['ranks']} {say(lang, 'list|, ').join(map(str, sorted(ranks)))}"


def call(where: WhereRecord, lang: str = "en", line: bool = True) -> str:
    """all_reduce(float32 [1], default group) at line 7"""
    t = _t(lang)
    tensor = f"{where['dtype']} {where['shape']}" if where.get("dtype") else ""
    name = where.get("group")
    group = t["group"].format(group=t["default"] if name == "default" else name) if name else ""
    inside = ", ".join(x for x in (tensor, group) if x)
    if not (line and where.get("line")):
        return f"{where['op']}({inside})"
    return say(lang, "{op}({inside}) at line {line}", op=where["op"], inside=inside, line=where["line"])


def timed_out(ranks: Collection[int], op: str, seconds: float, lang: str = "en") -> str:
    """The sentence for ranks cut after waiting longer than the pool's collective timeout."""
    return say(lang, "{who} waited in {op} longer than the pool's collective timeout ({seconds:g} s, %ddp_start "
               "--timeout): ddplab cut it, as gloo would have failed it", who=who(ranks, lang), op=op, seconds=seconds)


def where_text(wheres: Mapping[int, WhereRecord | None], lang: str = "en",
               stopped: Mapping[int, Mapping[str, Any] | None] | None = None) -> str:
    """One line for the ranks of a long cell: {rank: where or None} -> text ('' if nothing known).
    stopped: {rank: where it stopped} of ranks stopped at a breakpoint (the others' waits are for them)."""
    t = _t(lang)
    stopped = stopped or {}
    groups: dict[str, list[int]] = {}
    for r, w in sorted(wheres.items()):
        if r in stopped:
            groups.setdefault(t["stopped"].format(line=(stopped[r] or {}).get("line")), []).append(r)
            continue
        if not w:
            continue
        if w.get("op"):
            group = "" if w.get("group") in (None, "default") else f" [{w['group']}]"
            key = f"{w['op']}{group} ({t['line'].format(line=w['line'])}), {t['waiting'].format(s=w.get('since') or 0)}"
            if stopped:
                key += ", " + t["for_stopped"].format(who=who(sorted(stopped), lang))
        else:
            key = t["line"].format(line=w["line"]) if w.get("line") else t["running"]
        groups.setdefault(key, []).append(r)
    return t["sep"].join(f"{who(ranks, lang)}: {key}" for key, ranks in groups.items())


def _members(group: str | None, world_size: int) -> set[int] | None:
    if group == "default":
        return set(range(world_size))
    if group and group.startswith("ranks "):
        try:
            return {int(x) for x in group[6:].split(",")}
        except ValueError:
            return None
    return None


def _same_point(a: WhereRecord, b: WhereRecord) -> bool:
    """Whether two ranks are at the same collective of the cell (the k-th they entered). A rank
    that lags, still in the k-th while a peer waits in the next, is slow, not mismatched."""
    return a.get("calls") is None or b.get("calls") is None or a["calls"] == b["calls"]


def _signature(w: WhereRecord) -> tuple[Any, ...]:
    return (w["op"], w.get("group"), tuple(w.get("shape") or ()), w.get("dtype"))


def _completed(finished_calls: CallsRecord | None, w: WhereRecord) -> bool:
    """Whether a finished rank's last collective was the very one `w` waits in (its k-th, same signature)."""
    done = finished_calls or {}
    last = done.get("last")
    return bool(last and last.get("op") and done.get("calls") == w.get("calls") is not None
                and _signature(last) == _signature(w))


def _entered_by_all(w: WhereRecord, members: Iterable[int], wheres: Mapping[int, WhereRecord | None],
                    running: Collection[int], finished: Collection[int], calls: Mapping[int, CallsRecord | None]) -> bool:
    """Whether every member of w's group entered the very collective w waits in (the same k-th one,
    op, group, shape and dtype): the ranks that finished went through it, so it is not stuck, only
    late to say so (a slow rank, a busy machine). Shapes that differ are a mismatch, even when gloo
    lets some ranks through."""
    k = w.get("calls")
    if k is None:
        return False
    for q in members:
        if q in finished:
            c = calls.get(q) or {}
            if c.get("calls") != k or not c.get("last") or _signature(c["last"]) != _signature(w):
                return False
        elif q in running:
            v = wheres.get(q) or {}
            if not v.get("op") or v.get("calls") != k or _signature(v) != _signature(w):
                return False
        else:
            return False
    return True


def mismatch(wheres: Mapping[int, WhereRecord | None], running: Collection[int], finished: Collection[int],
             world_size: int, lang: str = "en", cell_ranks: Iterable[int] | None = None,
             calls: Mapping[int, CallsRecord | None] | None = None) -> Mismatch | None:
    """A Mismatch if ranks wait in collectives that can never finish, else None.

    wheres: rank -> where (probe.py) of the ranks still running; finished: ranks of the cell that
    ended; cell_ranks: the ranks running the cell (all by default); calls: rank -> the collectives a
    finished rank entered ({"calls": n, "last": its last one}), when it said."""
    t, calls = _t(lang), calls or {}
    cell_ranks = set(range(world_size) if cell_ranks is None else cell_ranks)
    waiting = {r: w for r, w in wheres.items() if r in running and w and w.get("op")
               and w["op"] not in POINT_TO_POINT and (w.get("since") or 0) >= BLOCKED}
    for _, w in sorted(waiting.items()):
        members = _members(w.get("group"), world_size)
        if members is None:
            continue
        same = sorted(q for q, v in wheres.items() if q in running and v and v.get("op")
                      and _signature(v) == _signature(w))  # every rank there, however long it has waited
        absent = sorted(members - cell_ranks)
        if absent:
            return Mismatch(t["absent"].format(who=who(same, lang), wait=_wait(same, lang), call=call(w, lang),
                                               peers=who(absent, lang)), same + absent)
        gone = sorted(members & set(finished))
        if gone and _entered_by_all(w, members, wheres, running, finished, calls):
            continue  # peers finished this very collective: it completes here too (the report is a moment old)
        # every peer that finished completed this very collective (one no member completes before all entered
        # it), and no running peer is seen in another: the running ranks' reports are a moment old (a rank
        # seen before it entered, one paused by py-spy, a busy machine); one that never said where it is is
        # waited for a moment only
        peers = [wheres.get(q) for q in members & set(running)]
        completed = (w["op"] in SYMMETRIC and bool(gone) and all(_completed(calls.get(g), w) for g in gone)
                     and all(_signature(v) == _signature(w) for v in peers if v and v.get("op"))
                     and (all(v is not None for v in peers) or (w.get("since") or 0) < SKIPPED + 3))
        if gone and not completed and (w.get("since") or 0) >= SKIPPED:
            k = w.get("calls")
            if k is not None and w["since"] < SKIPPED + 3 and any(
                    ((calls.get(g) or {}).get("calls") or 0) > k for g in gone):
                continue  # a finished rank went past this collective: the waiting rank's report is old
            others = sorted(q for q in members & set(running) if q not in same)
            known = {q: v for q in others if (v := wheres.get(q)) and v.get("op")}
            if len(known) < len(others) and w["since"] < SKIPPED + 3:
                continue  # a moment for the other running ranks' stacks to say where they wait
            return Mismatch(_waiting_for_finished(w, same, gone, calls, lang, known), same + others + gone)
        clashing = {q: v for q, v in waiting.items() if q in members and _signature(v) != _signature(w)
                    and _same_point(v, w)}
        if clashing and all(q in waiting for q in members & set(running)):
            by_call: dict[str, list[int]] = {}
            for q in sorted(members & set(waiting)):
                by_call.setdefault(call(waiting[q], lang), []).append(q)
            text = t["sep"].join(t["called"].format(who=who(qs, lang), call=c)
                             for c, qs in sorted(by_call.items(), key=lambda kv: kv[1]))
            return Mismatch(t["mismatch"].format(calls=text), sorted(members & set(waiting)))
    return None


def _waiting_for_finished(w: WhereRecord, same: list[int], gone: list[int], calls: Mapping[int, CallsRecord | None],
                          lang: str, others: Mapping[int, WhereRecord] | None = None) -> str:
    """Ranks wait in collective number k of the cell for ranks that finished it: what those did
    (and where the other ranks still running wait: others, rank -> where)."""
    t = _t(lang)
    k = w.get("calls")
    if k is None or not any(g in calls for g in gone):
        text = t["skipped"].format(who=who(same, lang), wait=_wait(same, lang), call=call(w, lang),
                                   peers=who(gone, lang))
        return t["sep"].join([text, *_waiting(others or {}, lang)])
    parts: dict[str, list[int]] = {}
    for g in gone:
        done = calls.get(g) or {}
        last = done.get("last")
        if (done.get("calls") or 0) >= k and last and last.get("op"):
            parts.setdefault(t["called_and_finished"].format(who="{who}", call=call(last, lang)), []).append(g)
        else:
            parts.setdefault(t["finished_without"], []).append(g)
    peers = t["sep"].join([*_waiting(others or {}, lang), *(text.format(who=who(ranks, lang)) for text, ranks in parts.items())])
    return t["waits_for"].format(who=who(same, lang), wait=_wait(same, lang), call=call(w, lang), peers=peers)


def _waiting(wheres: Mapping[int, WhereRecord], lang: str) -> list[str]:
    """'rank 2 waits in all_reduce(...)' for each kind of call the given ranks wait in."""
    t, groups = _t(lang), dict[str, list[int]]()
    for q, v in sorted(wheres.items()):
        groups.setdefault(call(v, lang), []).append(q)
    return [t["waits_in"].format(who=who(qs, lang), wait=_wait(qs, lang), call=c) for c, qs in groups.items()]


def hint_text(key: str, lang: str = "en", **values: Any) -> str:
    return say(lang, HINTS[key], **values)
