"""%ddp_start N --engines LAUNCHER starts engines through ipyparallel's own launchers: MPI for real
(Open MPI's mpiexec, which ./dev test installs), SSH and Slurm by the command lines they would run
(no ssh server or Slurm here)."""
import os
import shutil

import pytest

from ddplab import Lab
from ddplab.processes.hostpool import LaunchedPool
from ddplab.shared.config import PoolConfig
from ddplab.shared.system import is_gone

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("launchers")]


def test_mpi_engines_form_a_group(monkeypatch):
    import psutil

    if shutil.which("mpiexec") is None:
        pytest.fail("mpiexec is missing: ./dev test installs Debian's openmpi-bin")
    import mpi4py  # noqa: F401 - the engines use it for their ids (a test dependency)
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")  # Open MPI refuses root unless told (CI runs as root)
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    lab = Lab(2, launcher="mpi", threads_per_rank=1).start()
    try:
        assert lab.pool.launch_args and lab.pool.launch_args[0].startswith("mpiexec -n 2 ")
        result = lab.run("t = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nprint(t.item())")
        assert result.stdout == ["3.0\n", "3.0\n"]
        pids = lab.pids()
        assert len(pids) >= 3  # controller, mpiexec, 2 engines
    finally:
        lab.stop()
    assert [p for p in pids if psutil.pid_exists(p) and not is_gone(psutil.Process(p))] == []


def profile_with(tmp_path, config):
    """An IPython profile whose ipcluster_config.py holds `config`; its name, with IPYTHONDIR set."""
    folder = tmp_path / "profile_lab"
    folder.mkdir()
    (folder / "ipcluster_config.py").write_text(config)
    return "lab"


def engine_set(tmp_path, monkeypatch, launcher, config, n=4):
    """The engine launcher ddplab's pool would start (ipyparallel's, with the profile's settings)."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    pool = LaunchedPool(launcher, profile=profile_with(tmp_path, config), threads=1)
    cluster = pool.make_cluster()
    es = cluster.engine_launcher_class(work_dir=str(tmp_path), parent=cluster, log=cluster.log, profile_dir=cluster.profile_dir,
                                       cluster_id=cluster.cluster_id, engine_set_id="x")
    return cluster, es


def test_slurm_engines_are_started_by_the_profiles_batch_script(tmp_path, monkeypatch):
    cluster, es = engine_set(tmp_path, monkeypatch, "slurm",
                             "c.SlurmEngineSetLauncher.queue = 'gpu'\nc.SlurmEngineSetLauncher.timelimit = '1:00:00'\n")
    assert PoolConfig.make(4, launcher="slurm", profile="lab").launcher == "slurm"
    es.n = 4
    es.write_batch_script(4)
    script = open(es.batch_file).read()
    assert "#SBATCH --ntasks=4" in script and "#SBATCH --partition=gpu" in script and "#SBATCH --time=1:00:00" in script
    assert "srun " in script and "-m ipyparallel.engine" in script  # the connection comes in its environment
    assert es.find_args()[0] == "sbatch"


def test_ssh_engines_are_started_on_the_profiles_hosts(tmp_path, monkeypatch):
    cluster, es = engine_set(tmp_path, monkeypatch, "ssh",
                             "c.SSHEngineSetLauncher.engines = {'node1': 2, 'node2': 2}\n")
    assert es.engines == {"node1": 2, "node2": 2}
    one = es.launcher_class(work_dir=str(tmp_path), parent=es, log=es.log, profile_dir=cluster.profile_dir,
                            cluster_id=cluster.cluster_id, hostname="node1")
    command = [*one.find_args(), one.location, *one.program, *one.program_args]  # what start() runs
    assert command[:2] == ["ssh", "node1"] and "ipyparallel.engine" in " ".join(command)


def test_launcher_options_that_cannot_work_are_one_line_errors(tmp_path):
    from ddplab.shared.errors import BadRequest

    client_file = tmp_path / "ipcontroller-client.json"
    client_file.write_text("{}")
    for kw in (dict(connect=str(tmp_path / "missing.json")), dict(connect=str(client_file), profile="x"),
               dict(cluster_id="c"), dict(connect=str(client_file), launcher="mpi"), dict(ifname="")):
        with pytest.raises(BadRequest) as info:
            PoolConfig.make(**kw)
        assert "\n" not in str(info.value)
    attached = PoolConfig.make(connect=str(client_file))
    assert attached.attached and attached.ranks is None and attached.threads == 0
    assert os.path.isabs(attached.connect)
