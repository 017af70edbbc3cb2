"""ddplab as its users run it: an ordinary account (made here, removed after), ddplab installed as a
user installs it (`pip install .`, runtime dependencies only, from the system's Python), where the
machine allows unprivileged user namespaces (Debian, Fedora, Arch) and where it refuses them
(Ubuntu 24.04's AppArmor, Docker's seccomp profile: a seccomp filter on the test's own commands),
and where a namespace can be made but not completed. A second ordinary account attacks a pool
whose groups form again and again.
"""
import os
import secrets
import shutil

import pytest

from .accounts import SYSTEM_PYTHON, Account, run_as, scripts, user_env

pytestmark = [pytest.mark.pool, pytest.mark.xdist_group("users"), pytest.mark.slow]
WAYS = {None: "user namespaces allowed", "userns": "user namespaces refused", "loopback": "a namespace half made"}


@pytest.fixture(scope="module")
def env():
    return user_env()


@pytest.fixture(scope="module")
def box():
    folder = scripts()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def owner():
    account = Account.make("ddpo")
    yield account
    account.remove()


@pytest.fixture(scope="module")
def intruder():
    account = Account.make("ddpx")
    yield account
    account.remove()


@pytest.mark.parametrize("refuse", [None, "userns"], ids=["namespaces", "no-namespaces"])
def test_the_demo_runs_for_an_ordinary_account(env, box, owner, refuse):
    code, out, err = run_as(owner, [env.parent / "ddplab", "demo", "--ranks", "2", "--steps", "20"], refuse,
                            box=box).finish(180)
    assert code == 0, out + err
    assert "parameters identical on every rank: yes" in out
    assert owner.processes() == []  # stop left nothing running


@pytest.mark.parametrize("refuse", list(WAYS), ids=["namespaces", "no-namespaces", "half-made"])
def test_an_ordinary_accounts_pool_trains_checkpoints_compiles_and_stops_clean(env, box, owner, refuse):
    report = run_as(owner, [env, box / "as_user.py", "pool"], refuse, box=box).report(300)
    network, why = report["network"]
    if refuse is None:
        assert (network, why) == ("private", None)
        assert any("network namespace of their own" in text for _, text in report["protections"])
    elif refuse == "userns":
        assert network == "shared" and "does not allow a private network namespace" in why, why
    else:  # made, not completed: never entered, said as what it is, and the pool runs on the fallback
        assert network == "shared" and "could not be completed" in why, why
    if refuse:  # what protects it instead, in %ddp_status and at %ddp_start (the machine has other accounts)
        gloo = dict(report["protections"])["gloo"]
        assert "checked to be yours" in gloo and why in gloo
        assert any("another account's is refused" in text for text in report["exposure"]), report["exposure"]
        # and what an administrator can change for a private network (here: the seccomp filter, as Docker's)
        assert any("an administrator can run" in text and "seccomp" in text for text in report["exposure"])
    assert report["trained"] == ["trained True\n"] * 2
    assert report["checkpoint"] == [True, True]
    assert report["compiled"] == pytest.approx(3 * 1.8414709848078965, rel=1e-4)
    assert report["cache"] == os.path.join(owner.home, ".cache", "ddplab", "torchinductor")
    assert report["cache_files"] > 0 and report["cache_mode"] == "0o700"
    assert report["loader"] == [[[float(i * i) for i in range(8)], 2]] * 2  # read by 2 worker processes per rank
    assert report["group"] == [[3.0, 3.0, 3.0]] * 2
    assert "restarted" in report["restart"] and report["after_restart"] == ["2.0\n"] * 2
    assert report["refused"] == {}  # nobody tried
    assert report["left"] == [] and not report["workdir_left"]
    assert owner.processes() == []


def attacked(env, box, owner, intruder, mode, seconds, refuse=None, files=None, steady=False, gate=True, lag=0.0):
    """The owner's groups form again and again (a new_group in each cell, ddplab's own every third)
    while the intruder attacks (intruder_gloo.py MODE) for `seconds`; then, the attack over, one more
    cell: (the owner's report, the intruder's). gate=False: the pool without its accept gate. lag: one
    rank comes to each new_group that late (as_user.target), so the race for rank 0's pairs is one the
    intruder can win however busy the machine."""
    marker = f"/tmp/ddplab-pwned-{secrets.token_hex(4)}"
    target = run_as(owner, [env, box / "as_user.py", "target", seconds, SECRET, seconds + 3, int(steady), int(gate),
                              lag],
                    refuse, box=box, files=files)
    attack = run_as(intruder, [SYSTEM_PYTHON, "-I", box / "intruder_gloo.py", mode, owner.uid, seconds, SECRET,
                               marker], box=box)
    try:
        report = target.report(seconds + 240)
        seen = attack.report(120)
    finally:
        target.kill()
        attack.kill()
    assert not os.path.exists(marker)  # nothing it sent ran
    assert not seen["secret"] and seen["tensor_bytes"] == 0 and seen["injected"] == 0, seen  # nothing read or put in
    assert all(ok == [True, True] for _, _, ok in report["cells"]), report  # every sum is the pool's own
    assert report["after"] == ["2.0\n", "2.0\n"] and report["after_seconds"] < 10, report
    assert max(report["starts"], default=0) < 60, report["starts"]  # (the pool's starts: a cell's time is apart)
    # no message held: one oversized message alone is 256 MiB (cells that form groups again and again grow by tens);
    # none to weigh where the intruder won every start of the window (the race test allows it)
    assert max((g for g in report["rss_growth_mib"] if g is not None), default=0) < 128, report["rss_growth_mib"]
    return report, seen


SECRET = 1234.5678


@pytest.mark.parametrize("refuse", [None, "userns"], ids=["namespaces", "no-namespaces"])
def test_a_flood_from_another_account_reads_nothing_runs_nothing_and_stops_nothing(env, box, owner, intruder, refuse):
    """Half-open connections, 8-byte ones gloo keeps, junk, pickles and a 256 MiB multi-frame zmq
    message at every listener of the owner's, again and again: every cell works in its usual time,
    and the account is named once. In its own network namespace the pool shows no listener at all."""
    report, seen = attacked(env, box, owner, intruder, "flood", 20 if refuse else 10, refuse)
    cells = report["cells"]
    assert len(cells) >= 10 and report["failures"] == [], report["failures"]
    assert max(took for _, took, _ in cells) < 10, cells
    if refuse is None:
        assert report["network"] == ["private", None]
        assert seen["listeners"] == 0 and report["refused"] == {}, seen  # no port of the pool reachable at all
        return
    assert seen["listeners"] >= 5 and seen["flood"] > 0, seen  # it did reach gloo's listeners
    assert list(report["refused"]) == [intruder.name], report["refused"]
    named = [n for n in report["notices"] if f"the account {intruder.name} connected" in n]
    assert len(named) == 1, report["notices"]  # said once, in one line


def test_a_race_for_gloo_pairs_is_never_won_and_the_pool_works_all_along(env, box, owner, intruder):
    """Without namespaces another account can connect to each new gloo listener the moment it opens, with
    the number of the pair gloo is about to connect, to become a rank's peer. With the accept gate each
    rank answers gloo's accepts itself and closes that account's connections before gloo reads a byte of
    them: for 30 s of racing, groups form again and again, every cell works in its usual time, no pair
    is taken, nothing read or put in, and the account is named."""
    report, seen = attacked(env, box, owner, intruder, "take", 30, "userns")
    assert report["gate"] == [True, True], report.get("gate")
    assert seen["connected"] > 0, seen  # it did race for the pairs
    connections, taken = report["refused"][intruder.name]
    assert connections > 0 and taken == 0, report["refused"]  # each one closed before gloo saw it
    cells = report["cells"]
    assert len(cells) >= 15 and report["failures"] == [], report["failures"]
    assert max(took for _, took, _ in cells) < 10, cells
    assert any(f"the account {intruder.name} connected" in n for n in report["notices"]), report["notices"]


def test_without_the_gate_a_race_is_caught_before_any_collective_and_the_account_named(env, box, owner, intruder):
    """Where the machine refuses the gate (here turned off), the pairs the other account takes are found
    before a group is used, refused, and the group built again; against one that wins every time the
    group cannot form: the cell says so, naming it, and the pool works again once it stops."""
    report, seen = attacked(env, box, owner, intruder, "take", 20, "userns", gate=False, lag=0.5)
    assert report["gate"] == [None, None], report.get("gate")
    assert seen["connected"] > 0, seen
    connections, taken = report["refused"][intruder.name]
    assert taken > 0, report["refused"]  # it did take pairs, and every one was found
    for _, why in report["failures"]:  # a group it kept from forming: said, with its name
        assert f"another account ({intruder.name}) took one of its connections" in why, why
    assert any(f"the account {intruder.name} connected" in n for n in report["notices"]), report["notices"]


def test_a_flood_where_an_account_holds_few_files_kills_no_rank_behind_the_gate(env, box, owner, intruder):
    """Where an account may hold few files (here 1024, as the hard limit of some containers), a flood of
    connections to the listener of a group that lives on: the gate closes each one before gloo holds
    it, so no rank runs out of descriptors, and every cell works."""
    report, seen = attacked(env, box, owner, intruder, "flood", 20, "userns", files=1024, steady=True)
    assert seen["flood"] > 0, seen
    assert report["failures"] == [] and not [n for n in report["notices"] if "ran out of file descriptors" in n]
    assert list(report["refused"]) == [intruder.name], report["refused"]


def test_a_rank_a_flood_kills_comes_back_by_itself(env, box, owner, intruder):
    """Without the gate (a machine that refuses it; here turned off) the same flood, of connections that
    gloo keeps (8 bytes each), runs a rank out of descriptors, and gloo aborts it. The next cell finds
    it lost for that reason, restarts it and forms the group again, and says so in one line: usable
    again within 10 s, without %ddp_restart."""
    report, seen = attacked(env, box, owner, intruder, "flood", 30, "userns", files=1024, steady=True, gate=False)
    died = [n for n in report["notices"] if "ran out of file descriptors" in n]
    assert died, (report["notices"], report["failures"], seen)
    ok_times = [t for t, _, _ in report["cells"]]
    for t, why in report["failures"]:  # each failure is followed by a working cell within 10 s
        assert any(t < ok < t + 10 for ok in ok_times) or report["after_seconds"] < 10, (t, why, ok_times)


def test_another_account_reaches_neither_tensorflow_nor_jax_on_ranks_without_a_private_network(env, box, owner, intruder):
    """Where user namespaces are refused, TensorFlow's gRPC server (on every interface: it ignores the
    address in TF_CONFIG) and JAX's coordinator and gloo listen on the machine's network. For 40 s
    another account connects to every listener of the owner's ranks, once a second each, speaking first
    as a gRPC client does (a gRPC server answers at once): the accept gate closes each connection before
    TensorFlow or JAX sees it, so not one byte comes back, while the owner's MultiWorkerMirroredStrategy
    and jax.distributed (which formed behind the gate: TensorFlow's hung there before) keep computing
    right, and the account is named."""
    target = run_as(owner, [env, box / "as_user.py", "frameworks", 40], "userns", box=box)
    attack = run_as(intruder, [SYSTEM_PYTHON, "-I", box / "intruder_gloo.py", "probe", owner.uid, 40, 0,
                               "/nonexistent"], box=box)
    try:
        report = target.report(420)
        seen = attack.report(120)
    finally:
        target.kill()
        attack.kill()
    assert report["network"][0] == "shared" and report["gate"] == [True, True], report
    assert report["failures"] == [] and len(report["steps"]) >= 3, report
    assert report["steps"] == [[[float(i + 1), 3.0]] * 2 for i in range(len(report["steps"]))]
    assert set(map(str, report["tf_ports"])) <= set(seen["ports"]), (report["tf_ports"], seen["ports"])  # reached
    assert seen["connected"] >= 20 and seen["answered"] == 0 and seen["bytes_read"] == 0, seen
    assert list(report["refused"]) == [intruder.name] and report["refused"][intruder.name] >= seen["connected"] // 2
