"""The {bench-results} directive: the benchmark suite's results file as tables, at docs build time.

    ```{bench-results} performance/results.json
    ```

renders what `./dev bench` (python -m bench --out docs/performance) wrote: the machine and date,
whether it was a quick run, a row per benchmark (min, median, max over repeats, the target and
whether it was met, what is compared with what) and, if the run measured it, the scaling table.
Numbers are formatted as the bench's own printed table formats them (bench.__main__.fmt).
"""
import json

from ddplab_magics import inline
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

SIGNS = {"<=": "≤", ">=": "≥", "<": "<", ">": ">"}


def table(headers, rows, widths=None):
    """A docutils table: headers and rows of cells (a string or a list of inline nodes)."""
    tgroup = nodes.tgroup(cols=len(headers))
    for width in widths or [1] * len(headers):
        tgroup += nodes.colspec(colwidth=width)

    def row(cells):
        tr = nodes.row()
        for cell in cells:
            content = inline(cell) if isinstance(cell, str) else cell
            tr += nodes.entry("", nodes.paragraph("", "", *content))
        return tr

    tgroup += nodes.thead("", row(headers))
    tgroup += nodes.tbody("", *[row(r) for r in rows])
    return nodes.table("", tgroup)


class BenchResults(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self):
        from bench.__main__ import fmt, interval_note, quiet_note

        rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(rel)
        with open(path) as f:
            report = json.load(f)
        m = report["machine"]
        out = []
        said = (f"Measured on {m['date']}: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Python "
                f"{m['python']}, torch {m['torch']}, ipyparallel {m['ipyparallel']}.")
        out.append(nodes.paragraph("", said))
        if report.get("quick"):
            note = nodes.warning()
            note += nodes.paragraph("", "A quick run (python -m bench --quick): tiny sizes and few repeats, which "
                                        "show that the suite runs, not what ddplab achieves; its targets are not "
                                        "checked. ./dev bench measures them for real.")
            out.append(note)
        rows = []
        for r in report["results"]:
            unit = r["unit"]

            def value(x, unit=unit):
                return f"{fmt(x, unit)}x" if unit == "x" else f"{fmt(x, unit)}\u00a0{unit}"  # no break inside

            target = f"{SIGNS[r['target'][0]]}\u00a0{value(r['target'][1])}" if r["target"] else ""
            met = {True: "yes", False: "no", None: ""}[None if report.get("quick") else r["met"]]
            what = [nodes.literal(r["name"], r["name"]), nodes.Text(": "), *inline(r["what"])]
            if r.get("date", m["date"]) != m["date"]:  # kept from an earlier full run (bench --only)
                what.append(nodes.emphasis("", f" (measured on {r['date']})"))
            for note in (quiet_note(r), interval_note(r)):
                if note:
                    what.append(nodes.emphasis("", f" ({note})"))
            rows.append([what, value(r["min"]), [nodes.strong("", value(r["median"]))], value(r["max"]), target, met])
        out.append(table(["benchmark: what is compared", "min", "median", "max", "target", "met"], rows,
                         [12, 2, 2, 2, 2, 1]))
        scaling = next((r for r in report["results"] if r["name"] == "scaling"), None)
        if scaling:
            d = scaling["details"]
            out.append(nodes.paragraph("", f"Scaling: one process using every core, plain (no DDP), trains at "
                                           f"{d['single_process']:.0f} samples/s. N ranks:"))
            rates = d["samples_per_s"]
            out.append(table(["ranks", "samples/s", "efficiency"],
                             [[str(n), f"{rates[str(n)]:.0f}", f"{eff:.2f}"]
                              for n, eff in zip(d["sizes"], scaling["values"])]))
        return out


def setup(app):
    app.add_directive("bench-results", BenchResults)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
