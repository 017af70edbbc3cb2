"""Text rendering of ranks' output and of progress, for notebooks and terminals.

In a Jupyter front end, live views are display_data outputs updated in place
(display_id); in a terminal they print lines.
"""
import sys
import time

from .view import View


def in_notebook():
    """True in a Jupyter kernel, whose front end can update an output in place."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _labelled(label, text):
    """'[rank 0] text' for one line; the label on its own line above several."""
    if not text:
        return ""
    text = text if text.endswith("\n") else text + "\n"
    sep = " " if text.count("\n") == 1 else "\n"
    return f"{label}{sep}{text}"


def rank_streams(result):
    """(stdout text, stderr text) of a RunResult, grouped by rank and labelled."""
    out = "".join(_labelled(f"[rank {o.rank}]", o.stdout) for o in result.outputs)
    err = "".join(_labelled(f"[rank {o.rank} stderr]", o.stderr) for o in result.outputs)
    return out, err


def show_result(result):
    """Print each rank's output apart, then its displays and the value of its last expression,
    then what the cell did by mistake (once)."""
    out, err = rank_streams(result)
    err += "".join(f"ddplab: {hint}\n" for hint in getattr(result, "hints", []))
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    from IPython import get_ipython

    shell = get_ipython()
    for o in result.outputs:
        for d in o.displays:
            if shell is not None:
                shell.display_pub.publish(data=d["data"], metadata=dict(d.get("metadata") or {}, rank=o.rank))
        if o.result:
            text = o.result.get("text/plain", "")
            rich = {k: v for k, v in o.result.items() if k != "text/plain"}
            if rich and shell is not None:
                print(f"Out[rank {o.rank}]:")
                shell.display_pub.publish(data=o.result, metadata={"rank": o.rank})
            else:
                sep = "\n" if "\n" in text else " "
                print(f"Out[rank {o.rank}]:{sep}{text}")


class LiveOutput(View):
    """A view for notebooks without the dashboard: each rank's latest output lines, updated in place.

    Shown only once the cell has run for `after` seconds; removed when the cell ends (the
    full output is printed then).
    """

    def __init__(self, tail=8, after=1.0):
        self.tail, self.after = tail, after
        self.handle = None
        self.last_text = None

    def begin(self, live):
        self.handle, self.last_text = None, None

    def update(self, live):
        rs = live.run_state
        if rs.cell_started is None or rs.elapsed(time.monotonic()) < self.after or rs.cell_ended:
            return
        blocks = []
        for r in rs.running:
            lines = rs.ranks[r].output.splitlines()[-self.tail:]
            blocks.append(f"[rank {r}] " + (("\n" + "\n".join(lines)) if lines else "(no output yet)"))
        text = f"running on {len(rs.running)} rank(s), {rs.elapsed(time.monotonic()):.0f} s\n" + "\n".join(blocks)
        if text == self.last_text:
            return
        from IPython.display import display

        data = {"text/plain": text}
        if self.handle is None:
            self.handle = display(data, raw=True, display_id=True)
        else:
            self.handle.update(data, raw=True)
        self.last_text = text

    def end(self, live):
        """Remove the live view. A %%ddp cell prints nothing before it, so clearing the cell's
        output removes only the live view; the full output is printed right after."""
        if self.handle is not None:
            from IPython.display import clear_output

            clear_output()
            self.handle = None


class TextView(View):
    """Outside a notebook front end (terminal IPython, the CLI): the dashboard's facts as compact
    lines, every `every` seconds while ranks train; a rank that dies, at once."""

    def __init__(self, every=2.0, stream=None, lang="en"):
        self.every, self.lang = every, lang
        self.stream = stream
        self.last = 0.0
        self.told = {}
        self.noticed = {}  # notices printed: each once (and again if its count grows)

    def _print(self, line):
        print(line, file=self.stream or sys.stdout, flush=True)

    def begin(self, live):
        self.last = time.monotonic()
        self.told = {}

    def _notices(self, rs):
        for topic, text in rs.notices.items():
            if self.noticed.get(topic) != text:
                self.noticed[topic] = text
                self._print(f"ddplab: {text}")

    def update(self, live):
        from ..shared import state as st

        rs = live.run_state
        self._notices(rs)
        if rs.cell_ended is not None:
            return  # between cells (e.g. a restart): the cell's own report said it all
        for r in rs.running:  # a rank that dies mid-cell is news at once; errors come in the report
            if rs.states[r] == st.LOST and r not in self.told:
                self.told[r] = st.LOST
                self._print(f"[rank {r}] lost: {rs.ranks[r].error or ''}".rstrip())
        now = time.monotonic()
        stuck = any(rs.ranks[r].where or rs.ranks[r].stopped for r in rs.running)
        if now - self.last >= self.every and (stuck or any(rs.ranks[r].points for r in rs.running)):
            self.last = now
            self._lines(live, now)

    def _lines(self, live, now):
        rs = live.run_state
        for r in rs.running:
            s = rs.ranks[r]
            if s.points:
                loss = "" if s.loss is None else f" loss {s.loss:.4f}"
                rate = "" if s.rate is None else f" samples/s {s.rate:.0f}"
                self._print(f"[rank {r}] {rs.states[r]} step {s.step}{loss}{rate}")
        from ..shared.diagnose import where_text

        wheres = {r: rs.ranks[r].where for r in rs.running}
        waiting = any((w or {}).get("since") and w["since"] >= 2 for w in wheres.values()) or rs.stopped_ranks()
        if rs.cell_ended is None and (waiting or not any(rs.ranks[r].points for r in rs.running)):
            stopped = {r: rs.ranks[r].stopped for r in rs.stopped_ranks()}
            where = where_text(wheres, self.lang, stopped)  # only when it helps: a rank waits, or nothing is logged
            if where:
                self._print(f"[where]  {where}")
        total = [x for x in live.metrics.current if x is not None]
        if len(total) > 1:
            self._print(f"[all]    {rs.elapsed(now):.1f} s, {sum(total):.0f} samples/s in total")

    def end(self, live):
        self._notices(live.run_state)
        if any(live.run_state.ranks[r].points for r in live.run_state.running):
            self._lines(live, time.monotonic())
        if live.spans is not None and len(live.spans.rows):  # where each rank's steps went
            for line in live.spans.timeline(self.lang, tail=1000).lines(last=10):  # (the last steps, as the dashboard)
                self._print(f"[time]   {line}")


class Progress:
    """Start-up progress: one line updated in place in a notebook, printed lines in a terminal.

    Nothing is shown until `after` seconds have passed (quick steps stay quiet).
    """

    def __init__(self, after=0.5, stream=None):
        self.after = after
        self.started = time.monotonic()
        self.notebook = in_notebook()
        self.stream = stream or sys.stderr
        self.handle = None
        self.pending = None

    def __call__(self, message):
        self.pending = message
        if time.monotonic() - self.started < self.after:
            return
        self._show(message)

    def _show(self, message):
        text = f"ddplab: {message}"
        if not self.notebook:
            print(text, file=self.stream, flush=True)
            return
        from IPython.display import display

        if self.handle is None:
            self.handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)

    def done(self, message):
        """The final line is always shown: in place of the progress line, or printed."""
        if self.handle is not None:
            self._show(message)
        else:
            print(f"ddplab: {message}", flush=True)
