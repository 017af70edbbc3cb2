"""Training throughput with the live dashboard on vs off, in a real Jupyter kernel (nbclient).

    python bench/dashboard_overhead.py [--ranks 4] [--steps 1000] [--repeats 3]

The same %%ddp cell (train_ddp: MLP 784-512-512-10, batch 64 per rank, DDP, a ddplab.log per
step) runs alternately with the widget dashboard drawing live and with no view at all.
Target (issue 3): the dashboard costs at most 2% of samples/s.
"""
import argparse
import json
import statistics

import nbformat
from nbclient import NotebookClient

SETUP = "%load_ext ddplab\n%ddp_start {ranks}\nimport ddplab\n_lab = ddplab._magics[id(get_ipython())].lab\n_view = _lab.view"
TRAIN = ("%%ddp\nfrom ddplab.workloads import train_ddp\nsummary = train_ddp(steps={steps})")
BEFORE = "import json, time\n_c0, _w0 = time.process_time(), time.perf_counter()"
MEASURE = ("_cpu = (time.process_time() - _c0) / (time.perf_counter() - _w0)\n"
           "print(json.dumps([sum(s['samples_per_s'] for s in _lab.gather('summary')), _cpu]))")


def run(ranks, steps, repeats):
    cells = [nbformat.v4.new_code_cell(SETUP.format(ranks=ranks))]
    order = []
    for i in range(repeats):
        for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
            cells.append(nbformat.v4.new_code_cell(f"_lab.view = {'_view' if mode == 'on' else 'None'}\n{BEFORE}"))
            cells.append(nbformat.v4.new_code_cell(TRAIN.format(steps=steps)))
            cells.append(nbformat.v4.new_code_cell(MEASURE))
            order.append(mode)
    cells.append(nbformat.v4.new_code_cell("%ddp_stop"))
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    results = {"on": [], "off": []}
    cpu = {"on": [], "off": []}
    measured = [c for c in nb.cells if c.source == MEASURE]
    for mode, cell in zip(order, measured):
        rate, kernel_cpu = json.loads(cell.outputs[0]["text"])
        results[mode].append(rate)
        cpu[mode].append(kernel_cpu)
    return results, cpu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    r, cpu = run(args.ranks, args.steps, args.repeats)
    on, off = statistics.median(r["on"]), statistics.median(r["off"])
    for mode in ("on", "off"):
        v = r[mode]
        print(f"dashboard {mode:3s}: median {statistics.median(v):8.0f} samples/s (min {min(v):.0f}, max {max(v):.0f}); "
              f"kernel busy {100 * statistics.median(cpu[mode]):.1f}% of a core")
    print(f"ratio on/off: {on / off:.3f} (target >= 0.98) -> {'met' if on / off >= 0.98 else 'NOT met'}")
    return r


if __name__ == "__main__":
    main()
