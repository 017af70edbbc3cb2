"""ddplab reads two private attributes of ipyparallel's AsyncResult (monitor.Replies); the
dependency is pinned to the versions where they were tested. This fails when either changes."""
import inspect
import re
from importlib.metadata import version

import ipyparallel
from ipyparallel.client.asyncresult import AsyncResult


def test_the_installed_ipyparallel_is_in_the_pinned_range():
    import tomllib
    from pathlib import Path

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("ipyparallel"))
    low, high = re.fullmatch(r"ipyparallel>=([\d.]+),<([\d.]+)", pin).groups()
    installed = tuple(int(x) for x in version("ipyparallel").split(".")[:2])
    assert tuple(map(int, low.split("."))) <= installed < tuple(map(int, high.split("."))), (pin, ipyparallel.__version__)


def test_async_result_keeps_one_future_and_one_metadata_dict_per_engine():
    source = inspect.getsource(AsyncResult.__init__)
    assert "self._children = children" in source
    assert "self._metadata = [f.output.metadata for f in self._children]" in source
