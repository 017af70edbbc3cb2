"""Target 7: the dashboard at scale, no engines: RANKS simulated ranks each sending 10 points a
second through the real telemetry socket, merge (Monitor.poll) and render (Dashboard) path, in a
real kernel. Reports the time per drawn frame and the kernel's CPU share."""
from .common import in_kernel, result

CELL = """\
import json, statistics, subprocess, sys, time, types
from ddplab import state
from ddplab.metrics import LiveMetrics
from ddplab.monitor import FRAME, Monitor, Telemetry
from ddplab.dashboard.widget import Dashboard

class _AR:  # stands in for the cell's AsyncResult: no engines here
    def __init__(self, n):
        self._children, self._metadata = [], [{} for _ in range(n)]
    def wait(self, timeout):
        time.sleep(timeout)
        return False

n, seconds = {ranks}, {seconds}
lab = types.SimpleNamespace(run_state=state.RunState(n), metrics=LiveMetrics(n), telemetry=Telemetry(), cell_of={},
                            view=Dashboard(n))
lab.show = lambda what: getattr(lab.view, what)(lab) or True
lab.run_state.set_all(state.INIT); lab.run_state.set_all(state.READY)
lab.view.show()
lab.run_state.begin_cell(list(range(n)), time.monotonic())
lab.view.begin(lab)
sender = subprocess.Popen([sys.executable, "-m", "bench.simulate", lab.telemetry.address, str(n), "10", str(seconds + 1)])
frames = []
draw = Monitor.draw
def timed_draw(self, now=None):
    t = time.perf_counter(); draw(self, now); frames.append(time.perf_counter() - t)
Monitor.draw = timed_draw
mon = Monitor(lab, _AR(n), list(range(n)))
time.sleep(1.0)  # the sender starts
c0, w0 = time.process_time(), time.perf_counter()
while time.perf_counter() - w0 < seconds:
    mon.ar.wait(0.05)
    mon.poll()
cpu = (time.process_time() - c0) / (time.perf_counter() - w0)
sender.wait(30)
points = sum(s.points for s in lab.run_state.ranks)
print("BENCH " + json.dumps([frames, cpu, points]))
"""


def run(quick=False):
    ranks, seconds = (32, 3) if quick else (256, 20)
    cell = CELL.replace("{ranks}", str(ranks)).replace("{seconds}", str(seconds))
    (frames, cpu, points), = in_kernel([cell])
    frames_ms = [f * 1000 for f in frames]
    return [
        result("dashboard_frame", f"dashboard frame with {ranks} simulated ranks x 10 points/s (ms per frame)",
               frames_ms, unit="ms", target=("<=", 50.0), frames=len(frames), points_merged=points),
        result("dashboard_cpu", f"kernel CPU with {ranks} simulated ranks x 10 points/s (share of one core)",
               [cpu], unit="core", target=("<=", 0.25)),
    ]
