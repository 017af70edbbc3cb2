"""The zygote's staged start: a controller is forked as soon as ipyparallel is in, while torch
is still being imported (a pool started at once does not wait for torch to start its controller)."""
import os
import time

from ddplab.zygote import Zygote


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
