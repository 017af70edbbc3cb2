"""ddplab builds as a wheel holding the package, its console script and its dependencies."""
import pathlib
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_wheel_contents(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    wheel = next(tmp_path.glob("ddplab-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("__init__", "kernel/lab", "kernel/magics", "rank/__init__", "shared/state", "shared/errors",
                   "kernel/cli", "rank/workloads", "processes/zygote", "workloads", "checkpoint", "dashboard/text",
                   "lessons/__init__", "lessons/ranks", "lessons/draw"):
        assert f"ddplab/{module}.py" in names
    assert "ddplab/py.typed" in names  # PEP 561: users' type checkers read ddplab's annotations
    assert not any(n.startswith("tests/") for n in names)
    dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    meta = zipfile.ZipFile(wheel).read(f"{dist}/METADATA").decode()
    for dep in ("torch", "ipyparallel", "ipywidgets", "matplotlib", "jupyterlab"):
        assert f"Requires-Dist: {dep}" in meta
    assert "ddplab = ddplab.kernel.cli:main" in zipfile.ZipFile(wheel).read(f"{dist}/entry_points.txt").decode()
