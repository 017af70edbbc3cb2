"""Target 7: the dashboard at scale, no engines: RANKS simulated ranks each sending 10 points a
second through the real telemetry socket, merge (Monitor.poll) and render (Dashboard) path, in a
real kernel. Reports the time per drawn frame and the kernel's CPU share."""
from .common import in_kernel, result

CELL = """\
import json, statistics, subprocess, sys, time
from ddplab.shared import state
from ddplab.kernel.monitor import Hooks, Monitor
from ddplab.kernel.telemetry import Live, Telemetry
from ddplab.dashboard.widget import Dashboard

class _Replies:  # stands in for the cell's replies: no engines here, no rank ever finishes
    def done(self, rank): return False
    def failed(self, rank): return False
    def reply(self, rank): return None
    def field(self, rank, key): return None
    def wait(self, timeout): time.sleep(timeout)

n, seconds = {ranks}, {seconds}
import secrets
import tempfile
where = "ipc://" + tempfile.mkdtemp(prefix="ddplab-bench-")  # (a local pool's telemetry: a socket file)
live, telemetry, view = Live.new(n), Telemetry(where, secrets.token_bytes(32)), Dashboard(n)
live.run_state.set_all(state.INIT); live.run_state.set_all(state.READY)
view.show()
live.run_state.begin_cell(list(range(n)), time.monotonic())
view.begin(live)
sender = subprocess.Popen([sys.executable, "-m", "bench.simulate", telemetry.address, telemetry.key.hex(), str(n), "10",
                           str(seconds + 1)])
frames = []
draw = Monitor.draw
def timed_draw(self, now=None):
    t = time.perf_counter(); draw(self, now); frames.append(time.perf_counter() - t)
Monitor.draw = timed_draw
hooks = Hooks(lost=lambda ranks: {}, kill=None, interrupt=None, close_group=None,
              draw=lambda: view.update(live) or True)
mon = Monitor(_Replies(), list(range(n)), live, telemetry, hooks)
time.sleep(1.0)  # the sender starts
c0, w0 = time.process_time(), time.perf_counter()
while time.perf_counter() - w0 < seconds:
    mon.replies.wait(0.05)
    mon.poll()
cpu = (time.process_time() - c0) / (time.perf_counter() - w0)
try:
    sender.wait(30)
except subprocess.TimeoutExpired:
    sender.kill()
    sender.wait()
points = sum(s.points for s in live.run_state.ranks)
print("BENCH " + json.dumps([frames, cpu, points]))
"""


def run(quick=False):
    ranks, seconds = (32, 3) if quick else (256, 20)
    cell = CELL.replace("{ranks}", str(ranks)).replace("{seconds}", str(seconds))
    (frames, cpu, points), = in_kernel([cell])
    if not points:  # frames of nothing would time nothing
        raise RuntimeError("no simulated telemetry reached the dashboard: its frames measured nothing")
    frames_ms = [f * 1000 for f in frames]
    return [
        result("dashboard_frame", f"dashboard frame with {ranks} simulated ranks x 10 points/s (ms per frame)",
               frames_ms, unit="ms", target=("<=", 50.0), frames=len(frames), points_merged=points),
        result("dashboard_cpu", f"kernel CPU with {ranks} simulated ranks x 10 points/s (share of one core)",
               [cpu], unit="core", target=("<=", 0.25)),
    ]
