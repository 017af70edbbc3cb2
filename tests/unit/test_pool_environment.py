"""The environment a local pool gives its engines: the ranks' temporary files in the pool's own
folder (removed at stop); torch.compile's cache in a folder only the user can write, never torch's
default /tmp/torchinductor_USER (a name any account can take first)."""
import os

import pytest
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from ddplab.processes.hostpool import LaunchedPool
from ddplab.processes.localpool import LocalPool
from ddplab.shared.privacy import compile_cache, default_compile_cache, folder_problem, private_folder, torch_default_cache


def test_the_compile_cache_is_the_users_own_not_torchs_shared_default(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_compile_cache() == os.path.expanduser("~/.cache/ddplab/torchinductor") != default_cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_compile_cache() == str(tmp_path / "cache" / "ddplab" / "torchinductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    assert default_compile_cache() == "/somewhere/else"
    # torch writes its own default there once it used it: not a choice of the user's
    assert torch_default_cache() == default_cache_dir()  # fails if torch moves its default
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    assert default_compile_cache() == str(tmp_path / "cache" / "ddplab" / "torchinductor")


def test_a_private_folder_is_made_0700_and_one_others_can_use_is_refused(tmp_path):
    path, why = private_folder(tmp_path / "a" / "b")
    assert why is None and oct(os.stat(path).st_mode & 0o777) == "0o700"
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    assert "other users may use it (mode 777)" in folder_problem(loose)
    link = tmp_path / "link"
    link.symlink_to(path)
    assert folder_problem(link) == "it is a symbolic link"
    if os.geteuid() == 0:  # (CI and this machine run as root: a folder of another uid can be made)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 54321, 54321)
        assert folder_problem(theirs) == "it belongs to uid 54321"
        inside = tmp_path / "open"
        inside.mkdir(mode=0o777)
        os.chmod(inside, 0o777)  # writable by all, not sticky: whatever is inside can be swapped
        mine, _ = private_folder(inside / "mine")
        assert mine is None and "above it can be changed" in folder_problem(inside / "mine")


def test_a_refused_compile_cache_is_replaced_by_a_private_one_and_said_why(tmp_path, monkeypatch):
    loose = tmp_path / "shared"
    loose.mkdir()
    os.chmod(loose, 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    folder, refused = compile_cache(str(loose), lambda: pytest.fail("the user's own folder comes first"))
    assert folder == str(tmp_path / "home" / "ddplab" / "torchinductor") and folder_problem(folder) is None
    assert refused.startswith(f"torch.compile's cache {loose} was refused (other users may use it")
    os.chmod(folder, 0o755)  # the user's own folder is not private either: a new one
    folder, refused = compile_cache(str(loose), lambda: str(tmp_path / "private"))
    assert folder == str(tmp_path / "private") and refused.endswith(f"the ranks use {folder} instead")
    assert compile_cache(str(tmp_path / "mine"), lambda: pytest.fail("not needed")) == (str(tmp_path / "mine"), None)


def test_local_ranks_keep_temporary_files_in_the_pools_folder(tmp_path):
    pool = LocalPool()
    pool.workdir = str(tmp_path)
    pool.compile_cache = str(tmp_path / "cache")
    env = pool.environment()
    assert env["TMPDIR"] == str(tmp_path / "tmp") and env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache")


def test_engines_on_other_hosts_keep_their_own_temporary_folder(tmp_path):
    pool = LaunchedPool("mpi")
    pool.workdir = str(tmp_path)  # a folder of this machine, which the hosts do not have
    assert "TMPDIR" not in pool.environment() and "TORCHINDUCTOR_CACHE_DIR" not in pool.environment()


def test_an_engine_the_oom_killer_ended_is_named_killed_for_memory_once_per_kill(monkeypatch):
    """SIGKILL alone does not say why: the session's OOM kill count, which grew since the pool started by
    more than the engines already named, does (each kill names one engine)."""
    from ddplab.processes import localpool
    from ddplab.shared.words import say

    kills = [3]
    monkeypatch.setattr(localpool, "oom_kills", lambda: kills[0])
    monkeypatch.setattr(localpool, "memory_limit", lambda: 2**30)
    monkeypatch.setattr(localpool, "memory_peak", lambda: int(0.98 * 2**30))
    pool = localpool.LocalPool()
    pool._ooms = 3
    assert not pool._for_memory(0, wait=0)  # killed, but not by the OOM killer (a kill -9)
    kills[0] = 4
    assert pool._for_memory(1) and not pool._for_memory(2, wait=0)  # one kill: one engine
    kills[0] = 5
    assert pool._for_memory(2) and pool.memory_killed == {1, 2}
    assert pool.memory_why() == ("its engine was killed for memory (the kernel's OOM killer): this session may use "
                                 "1.00 GiB and held up to 0.98 GiB")
    pool._say = lambda text, **values: say("zh", text, **values)
    assert "因内存不足被终止" in pool.memory_why() and "1.00 GiB" in pool.memory_why()
