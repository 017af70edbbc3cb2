"""20 start/stop cycles in one process: no process left behind, no file descriptors leaked."""
import psutil
import pytest

from ddplab import Lab

from ..conftest import alive, descendants

pytestmark = pytest.mark.pool
CYCLES = 20


@pytest.mark.slow
def test_twenty_start_stop_cycles_leave_nothing_behind():
    me = psutil.Process()
    before = descendants()
    from ddplab.processes.zygote import running_zygote

    lab = Lab(2)
    lab.start().stop()  # the first cycle loads what stays loaded (modules, zmq context, the zygote)
    zygote = running_zygote().pid
    fds = me.num_fds()
    threads = me.num_threads()
    seen = []
    for _ in range(CYCLES - 1):
        lab.start()
        lab.run("t = torch.ones(1)\ndist.all_reduce(t)\nddplab.log(loss=t.item())")
        seen.extend(lab.pids())
        lab.stop()
    assert alive(seen) == []
    assert running_zygote().pid == zygote  # one fork server, warm across every cycle
    assert descendants() <= before | {zygote}  # the zygote stays, started by the first cycle if need be
    assert me.num_fds() <= fds + 8, (fds, me.num_fds())
    assert me.num_threads() <= threads + 2, (threads, me.num_threads())
