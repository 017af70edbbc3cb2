"""The dashboard's HTML pieces as plain strings: the state diagram (SVG), the per-rank table,
the header. Pure functions of a RunState, so they are tested without a browser.

SVG and HTML (not matplotlib) because browser fonts draw Chinese labels.
"""
from html import escape

from ..shared import state as st
from ..shared.words import say

LABELS = {  # the dashboard's words, in English (zh.py: in Chinese, under the context 'dashboard|')
    'starting': 'starting',
    'init': 'init',
    'ready': 'ready',
    'running': 'running',
    'training': 'training',
    'done': 'done',
    'failed': 'failed',
    'lost': 'lost',
    'stopped': 'stopped',
    'rank': 'rank',
    'state': 'state',
    'step': 'step',
    'loss': 'loss',
    'rate': 'samples/s',
    'heard': 'last heard',
    'ago': 's ago',
    'ranks': 'ranks',
    'cell': 'cell',
    'total': 'total',
    'running_for': 'elapsed|running',
    'took': 'took',
    'no_points': 'no points yet: call ddplab.log(loss=..., samples=...) in rank code',
    'loss_title': 'loss per rank, by step',
    'rate_title': 'samples/s per rank and total, by time (s)',
    'output': 'output',
    'stopped_pool': 'pool stopped',
}

# the diagram: the seed lesson's init -> training -> done across the top, ready / failed / lost below
NODE_W, NODE_H = 124, 58
NODES = {  # node -> top-left corner
    st.INIT: (40, 14), st.TRAINING: (250, 14), st.DONE: (460, 14),
    st.READY: (145, 118), st.FAILED: (330, 118), st.LOST: (480, 118),
}
NODE_OF = {st.STARTING: st.INIT, st.INIT: st.INIT, st.READY: st.READY, st.RUNNING: st.TRAINING,
           st.TRAINING: st.TRAINING, st.DONE: st.DONE, st.FAILED: st.FAILED, st.LOST: st.LOST,
           st.STOPPED: st.INIT}
NODE_COLORS = {st.INIT: "#e8eef7", st.READY: "#eef5ec", st.TRAINING: "#fff4dc", st.DONE: "#e3f1e3",
               st.FAILED: "#fde2e1", st.LOST: "#e6e6e6"}
NODE_STROKE = {st.FAILED: "#d62728", st.LOST: "#555"}
EDGES = [  # (from, to, dashed)
    (st.INIT, st.TRAINING, False), (st.TRAINING, st.DONE, False), (st.INIT, st.READY, False),
    (st.READY, st.TRAINING, False), (st.DONE, st.READY, True), (st.TRAINING, st.FAILED, True),
    (st.TRAINING, st.LOST, True),
]
TOKEN_R, PER_ROW, MAX_TOKENS = 8, 6, 12
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31"]


def rank_color(rank):
    """The colour of a rank everywhere: diagram token, table swatch, plot line."""
    return PALETTE[rank % len(PALETTE)]


def labels(lang):
    return {key: say(lang, "dashboard|" + text) for key, text in LABELS.items()}


def _center(node):
    x, y = NODES[node]
    return x + NODE_W / 2, y + NODE_H / 2


def _edge_points(a, b):
    """From the border of node a to the border of node b, along the line between centres."""
    (ax, ay), (bx, by) = _center(a), _center(b)

    def clip(cx, cy, dx, dy):
        tx = (NODE_W / 2) / abs(dx) if dx else float("inf")
        ty = (NODE_H / 2) / abs(dy) if dy else float("inf")
        t = min(tx, ty)
        return cx + dx * t, cy + dy * t

    dx, dy = bx - ax, by - ay
    x1, y1 = clip(ax, ay, dx, dy)
    x2, y2 = clip(bx, by, -dx, -dy)
    return x1, y1, x2, y2


def token_positions(run_state):
    """rank -> (x, y) of its token, grouped at the node of its state."""
    by_node = {}
    for r in range(run_state.world_size):
        by_node.setdefault(NODE_OF[run_state.states[r]], []).append(r)
    pos = {}
    for node, ranks in by_node.items():
        x0, y0 = NODES[node]
        for i, r in enumerate(ranks[:MAX_TOKENS]):
            row, col = divmod(i, PER_ROW)
            pos[r] = (x0 + 14 + col * (2 * TOKEN_R + 3), y0 + 32 + row * (2 * TOKEN_R + 2))
    return pos, by_node


def diagram_svg(run_state, lang="en", previous=None):
    """The state diagram with every rank drawn at its node. `previous` (rank -> (x, y)) makes
    tokens that changed node slide over from where they were."""
    lab = labels(lang)
    pos, by_node = token_positions(run_state)
    out = ['<svg class="ddplab-diagram" xmlns="http://www.w3.org/2000/svg" width="480" height="147" '
           'viewBox="0 0 620 190" font-family="sans-serif" font-size="13">',
           '<defs><marker id="ddplab-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>']
    # [*] -> init ... done -> [*], as in the seed lesson's state diagram
    ix, iy = _center(st.INIT)
    out.append(f'<circle cx="16" cy="{iy}" r="6" fill="#333"/>')
    out.append(f'<line x1="22" y1="{iy}" x2="{NODES[st.INIT][0] - 1}" y2="{iy}" stroke="#666" '
               'marker-end="url(#ddplab-arrow)"/>')
    dx, dy = _center(st.DONE)
    ex = NODES[st.DONE][0] + NODE_W
    out.append(f'<line x1="{ex}" y1="{dy}" x2="{ex + 22}" y2="{dy}" stroke="#666" marker-end="url(#ddplab-arrow)"/>')
    out.append(f'<circle cx="{ex + 31}" cy="{dy}" r="7" fill="none" stroke="#333"/>'
               f'<circle cx="{ex + 31}" cy="{dy}" r="4" fill="#333"/>')
    for a, b, dashed in EDGES:
        x1, y1, x2, y2 = _edge_points(a, b)
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        out.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#666"{dash} '
                   'marker-end="url(#ddplab-arrow)"/>')
    for node, (x, y) in NODES.items():
        ranks = by_node.get(node, [])
        stroke = NODE_STROKE.get(node, "#8a9bb0")
        width = 2.5 if node == st.FAILED and ranks else 1.2
        out.append(f'<g class="state-node" data-node="{node}" data-count="{len(ranks)}">'
                   f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="9" '
                   f'fill="{NODE_COLORS[node]}" stroke="{stroke}" stroke-width="{width}"/>'
                   f'<text x="{x + 10}" y="{y + 17}" font-weight="bold" fill="#333">{escape(lab[node])}</text>')
        if ranks:
            out.append(f'<text x="{x + NODE_W - 8}" y="{y + 17}" text-anchor="end" fill="#555">{len(ranks)}</text>')
        if len(ranks) > MAX_TOKENS:
            out.append(f'<text x="{x + NODE_W - 8}" y="{y + NODE_H - 6}" text-anchor="end" fill="#555">'
                       f'+{len(ranks) - MAX_TOKENS}</text>')
        out.append("</g>")
    for r, (x, y) in pos.items():
        state = run_state.states[r]
        failed = state in (st.FAILED, st.LOST)
        ring = ' stroke="#d62728" stroke-width="2.5"' if state == st.FAILED else ' stroke="#fff" stroke-width="1"'
        dash = ' stroke-dasharray="2 2" stroke="#333" stroke-width="1.2"' if state == st.RUNNING else ""
        fill = "#999" if state in (st.LOST, st.STOPPED) else rank_color(r)
        slide = ""
        if previous and r in previous and previous[r] != (x, y):
            px, py = previous[r]
            slide = (f'<animateTransform attributeName="transform" type="translate" from="{px - x} {py - y}" '
                     'to="0 0" dur="0.35s" fill="freeze"/>')
        marked = ' data-failed="1"' if failed else ""
        out.append(f'<g class="rank-token" data-rank="{r}" data-state="{state}"{marked}>'
                   f'{slide}<circle cx="{x}" cy="{y}" r="{TOKEN_R}" fill="{fill}"{ring}{dash}/>'
                   f'<text x="{x}" y="{y + 4}" text-anchor="middle" font-size="10" fill="#fff">{r}</text>'
                   f'<title>rank {r}: {escape(lab[state])}</title></g>')
    out.append("</svg>")
    return "".join(out), pos


def _fmt(value, spec):
    return "–" if value is None else format(value, spec)


def rank_table(run_state, now, lang="en"):
    """One row per rank: rank, state, step, last loss, samples/s, seconds since last heard."""
    lab = labels(lang)
    head = "".join(f"<th>{escape(lab[k])}</th>" for k in ("rank", "state", "step", "loss", "rate", "heard"))
    rows = []
    for r, s in enumerate(run_state.ranks):
        state = run_state.states[r]
        name = lab[state] + (f" · {s.phase}" if s.phase else "") + (f" · {s.fault}" if s.fault else "")
        heard = "–" if s.heard is None else f"{now - s.heard:.1f} {lab['ago']}"
        cls = "ddplab-failed" if state in (st.FAILED, st.LOST) else ""
        title = f' title="{escape(s.error)}"' if s.error else ""
        rows.append(
            f'<tr class="ddplab-rank {cls}" data-rank="{r}" data-state="{state}"{title}>'
            f'<td><span style="color:{rank_color(r)}">&#9679;</span> {r}</td><td>{escape(name)}</td>'
            f'<td>{_fmt(s.step, "d")}</td><td>{_fmt(s.loss, ".4f")}</td><td>{_fmt(s.rate, ",.0f")}</td>'
            f'<td>{heard}</td></tr>')
    return (f'<table class="ddplab-table">'
            f'<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def header(lab_info, run_state, metrics, now, lang="en"):
    """One line: pool, cell, time, total throughput, or the start-up message."""
    lab = labels(lang)
    parts = [f"<b>ddplab</b> · {run_state.world_size} {lab['ranks']} · gloo"]
    if lab_info:
        parts.append(escape(lab_info))
    if run_state.cell:
        verb = lab["took"] if run_state.cell_ended else lab["running_for"]
        parts.append(f"{lab['cell']} {run_state.cell} · {verb} {run_state.elapsed(now):.1f} s")
    rates = [r for r in metrics.current if r is not None]
    if rates:
        parts.append(f"{lab['total']} {sum(rates):,.0f} {lab['rate']}")
    if all(s == st.STOPPED for s in run_state.states):
        parts.append(lab["stopped_pool"])
    elif run_state.message:  # start-up progress, or what was done after a failure
        parts.append(escape(run_state.message))
    notices = "".join(f'<div class="ddplab-notice">⚠ {escape(n)}</div>' for n in run_state.notices.values())
    return " · ".join(parts) + notices + where_line(run_state, lang)


def where_line(run_state, lang="en"):
    """Where each rank of a long cell is: its line, the collective it waits in and for how long."""
    from ..shared.diagnose import where_text

    if run_state.cell_ended is not None:
        return ""
    stopped = {r: run_state.ranks[r].stopped for r in run_state.stopped_ranks()}  # (at a breakpoint)
    text = where_text({r: run_state.ranks[r].where for r in run_state.running}, lang, stopped)
    return f'<div class="ddplab-where">{escape(text)}</div>' if text else ""


STYLE = """<style>
.ddplab-dashboard {font-family: sans-serif; font-size: 13px;}
.ddplab-dashboard .ddplab-table {border-collapse: collapse; font-size: 12px; font-family: sans-serif;}
.ddplab-dashboard .ddplab-table th, .ddplab-dashboard .ddplab-table td {padding: 2px 7px; text-align: right;
  border-bottom: 1px solid #e5e5e5; white-space: nowrap; line-height: 1.5;}
.ddplab-dashboard .ddplab-table th:nth-child(2), .ddplab-dashboard .ddplab-table td:nth-child(2) {text-align: left;}
.ddplab-dashboard tr.ddplab-failed td {background: #fde2e1; color: #b00000; font-weight: bold;}
.ddplab-dashboard .ddplab-title {font-size: 12px; color: #444; font-family: sans-serif; margin: 2px 0 0 6px;}
.ddplab-dashboard pre {margin: 0; font-size: 11px; max-height: 180px; overflow-y: auto;}
.ddplab-dashboard .ddplab-notice {color: #8a5a00; font-size: 12px;}
.ddplab-dashboard .ddplab-where {color: #444; font-size: 12px; font-family: monospace;}
</style>"""
