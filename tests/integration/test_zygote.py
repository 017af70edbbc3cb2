"""The zygote's staged start: a controller is forked as soon as ipyparallel is in, while torch
is still being imported (a pool started at once does not wait for torch to start its controller);
it follows the settings of a config file from the start, and a running pool keeps its own."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from ddplab import Lab
from ddplab.processes.zygote import Zygote


def test_a_controller_is_forked_before_torch_is_imported_and_engines_after(tmp_path):
    z = Zygote()
    try:
        z.wait_ready("controller")
        pid = z.fork("controller", dict(os.environ), str(tmp_path), str(tmp_path / "controller.log"), ["--version"])
        assert z.stages == ["controller"], "the fork waited for the engines' imports"
        deadline = time.monotonic() + 60
        while z.exit_code(pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert z.exit_code(pid) == 0, (tmp_path / "controller.log").read_text()
        z.wait_ready("engine")
        assert z.stages == ["controller", "engine"]
    finally:
        z.stop()
    assert not os.path.exists(z.workdir)


def test_the_fork_server_follows_the_config_file_from_the_start():
    """c.DDPLab.private_network = False in a config: %load_ext starts the zygote with it (not with the
    default, then again)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = textwrap.dedent("""
        from traitlets.config import Config
        from IPython.core.interactiveshell import InteractiveShell
        import ddplab
        from ddplab.processes.zygote import running_zygote
        c = Config()
        c.DDPLab.private_network = False
        shell = InteractiveShell.instance(config=c)
        ddplab.load_ipython_extension(shell)
        first = running_zygote()
        print(first.private_network_asked, first.network[0])
        first.stop()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                         env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "shared"], out.stdout


@pytest.mark.pool
@pytest.mark.xdist_group("shared-pool")
def test_changing_private_network_while_a_pool_runs_is_for_the_next_pool(pool):
    """The zygote a running pool forks from stays, whatever the setting says meanwhile: a rank started
    again lives in the same network namespace as its peers; a pool started meanwhile gets the setting
    as it is now (a second fork server), which stops once nothing forks from it."""
    from ddplab.processes.zygote import zygote
    from ddplab.shared.config import tunables
    from ddplab.shared.privacy import network_namespace

    ours = pool.pool.zygote
    t = tunables()
    was = ours.network[0]
    t.private_network = was != "private"
    try:
        pool.report.status()
        with Lab(ranks=2, timeout=30).start() as other:
            second = other.pool.zygote
            assert other.pool.network[0] != was and second is not ours
            assert other.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout == ["2.0\n"] * 2
            pool.pool.kill([2], "a test")
            pool.restart()
        namespaces = {network_namespace(i["pid"]) for i in pool.info}
        assert len(namespaces) == 1 and pool.pool.zygote is ours and pool.pool.network[0] == was
        assert pool.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout == ["4.0\n"] * 4
    finally:
        t.private_network = was == "private"
    assert zygote() is ours and second.proc.poll() is not None  # the idle one is stopped at the next ask
