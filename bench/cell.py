"""Target 2: a trivial `%%ddp` cell on 4 ranks against `view.execute` of the same code on the
same engines, in a real kernel with the live dashboard shown (nbclient)."""
from .common import in_kernel, ratios, result

SETUP = """\
%load_ext ddplab
%ddp_start {n}
import ddplab, json, statistics, time
_lab = ddplab._magics[id(get_ipython())].lab
_raw = _lab.pool.client[_lab.pool.engine_ids]
time.sleep(3)  # settled: right after start the engines import torch._dynamo in the background (~1.5 s)
"""
MEASURE = """\
_ours, _base = [], []
for _block in range({blocks}):
    a, b = [], []
    for _ in range({calls}):
        t = time.perf_counter(); get_ipython().run_cell_magic("ddp", "", "x = 1"); a.append(time.perf_counter() - t)
        t = time.perf_counter(); _raw.execute("x = 1", block=True); b.append(time.perf_counter() - t)
    _ours.append(statistics.median(a)); _base.append(statistics.median(b))
print("BENCH " + json.dumps([_ours, _base]))
"""


def run(quick=False):
    n, blocks, calls = (4, 2, 5) if quick else (4, 5, 30)
    (ours, base), = in_kernel([SETUP.format(n=n), MEASURE.format(blocks=blocks, calls=calls), "%ddp_stop"])
    return [result("cell", f"trivial %%ddp cell on {n} ranks (dashboard on) / view.execute of it",
                   ratios(ours, base), target=("<=", 1.1), ddplab_ms=[x * 1000 for x in ours],
                   view_execute_ms=[x * 1000 for x in base])]
