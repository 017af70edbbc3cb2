"""The environment a local pool gives its engines: the ranks' temporary files in the pool's own
folder (removed at stop), torch.compile's cache where torch keeps it."""
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from ddplab.pool import LocalPool, inductor_cache


def test_the_compile_cache_is_torchs_default_or_the_users_choice(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert inductor_cache() == default_cache_dir()  # fails if torch moves its default
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    assert inductor_cache() == "/somewhere/else"


def test_local_ranks_keep_temporary_files_in_the_pools_folder(tmp_path):
    pool = LocalPool()
    pool.workdir = str(tmp_path)
    env = pool.environment()
    assert env["TMPDIR"] == str(tmp_path / "tmp") and env["TORCHINDUCTOR_CACHE_DIR"] == inductor_cache()


def test_engines_on_other_hosts_keep_their_own_temporary_folder(tmp_path):
    pool = LocalPool(launcher="mpi")
    pool.workdir = str(tmp_path)  # a folder of this machine, which the hosts do not have
    assert "TMPDIR" not in pool.environment()
