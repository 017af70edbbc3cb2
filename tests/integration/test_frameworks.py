"""TensorFlow and JAX on a real pool beside torch: MultiWorkerMirroredStrategy forms across the ranks
behind the accept gate (which it hung before: its constructor holds the GIL while it waits for its
peers), the same MLP gives the same loss step by step under DDP, TensorFlow and JAX, MirroredStrategy
runs over logical CPU devices, a TensorFlow worker that raises, is killed or is interrupted is dealt
with as a torch rank is, importing both leaves torch, gloo and the timeline as they were, and the
frameworks refuse to open a port another account could reach.

One pool of 4 ranks for the module (ddplab.Lab, not the magics: the session's shared pool may live in
this worker too), its ranks restarted between frameworks as a learner would (%ddp_restart --all).
"""
import json
import os
import re
import subprocess
import time

import numpy as np
import pytest

from ddplab import Lab
from ddplab.shared.config import tunables
from ddplab.shared.errors import RankFailed

pytestmark = [pytest.mark.pool, pytest.mark.slow, pytest.mark.heavy, pytest.mark.xdist_group("frameworks")]
STEPS = 12
TOLERANCE = 1e-5  # float32 sums in each framework's own order: ~6e-8 apart on losses of about 0.5

TF_STRATEGY = """
ddplab.tf_config()
import tensorflow as tf
tf.get_logger().setLevel("ERROR")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from ddplab.lessons.frameworks import *
"""
TF_STEP = """
import numpy as np
with strategy.scope():
    model = keras_mlp(initial_weights())
    opt = tf.keras.optimizers.SGD(0.1)
@tf.function
def step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.reduce_mean(tf.square(model(x) - y), axis=1), global_batch_size=64)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(replica, args=(x, y)), axis=None)
"""


def losses_of(result_stdout):
    """Each rank's list printed after LOSSES."""
    return [json.loads(re.search(r"LOSSES (\[.*?\])", out).group(1)) for out in result_stdout]


@pytest.fixture(scope="module")
def lab():
    lab = Lab(ranks=4, timeout=60).start()
    yield lab
    lab.stop()


@pytest.fixture(scope="module")
def pair(lab):
    """Two ranks, for the failures (TensorFlow's import costs each rank seconds of CPU): the 4-rank pool
    stopped first."""
    if lab.running:
        lab.stop()
    pair = Lab(ranks=2, timeout=60).start()
    yield pair
    pair.stop()


def fresh(lab):
    """Fresh ranks, as %ddp_restart --all gives (TensorFlow's collectives and JAX's runtime start once
    per process)."""
    lab.restart(everything=True)


def test_the_same_loss_step_by_step_under_ddp_tensorflow_and_jax_and_torch_unharmed(lab):
    fresh(lab)
    out = lab.run(f"from ddplab.lessons.frameworks import *\nimport json\nl, _ = train_torch({STEPS}, world_size, rank)\n"
                  "print('LOSSES', json.dumps(l))").stdout
    torch_losses = losses_of(out)
    assert all(ls == torch_losses[0] for ls in torch_losses)

    tic = time.monotonic()
    out = lab.run(TF_STRATEGY + f"l, _ = train_tf(strategy, {STEPS})\nimport json\nprint('LOSSES', json.dumps(l))\n"
                                "print('REPLICAS', strategy.num_replicas_in_sync)", timeout=180).stdout
    assert time.monotonic() - tic < 120  # it formed (with the gate up: no hang)
    assert all("REPLICAS 4" in o for o in out)
    tf_losses = losses_of(out)
    # each worker's loss and throughput reached the notebook as a torch rank's do (ddplab.log)
    history = lab.records.history()
    for r in range(4):
        points = history.where(rank=r, cell=max(p["cell"] for p in history.where(rank=r)))
        assert [p["loss"] for p in points] == pytest.approx(tf_losses[r]) and {p["samples"] for p in points} == {16}
    assert list(lab.states) == ["done"] * 4

    # TensorFlow beside torch in the same ranks: DDP trains, gloo sums, the timeline records
    out = lab.run("from ddplab.lessons.frameworks import *\nimport json\nl, _ = train_torch(5, world_size, rank)\n"
                  "t = torch.ones(1)\ndist.all_reduce(t)\nprint('LOSSES', json.dumps(l), t.item())").stdout
    assert losses_of(out) == [torch_losses[0][:5]] * 4
    assert all(o.strip().endswith("4.0") for o in out)
    frame = lab.records.timeline().to_pandas()  # this cell's spans, from every rank
    assert set(frame["rank"]) == {0, 1, 2, 3} and set(frame["phase"]) >= {"forward", "backward", "optimizer", "comm"}
    assert frame["step"].max() >= 4 and "all_reduce" in set(frame["op"])  # (the last sum: a step after the 5th)

    fresh(lab)
    out = lab.run(f"ddplab.jax_distributed()\nfrom ddplab.lessons.frameworks import *\nimport json\n"
                  f"l, _ = train_jax({STEPS})\nprint('LOSSES', json.dumps(l))", timeout=180).stdout
    jax_losses = losses_of(out)
    out = lab.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout  # JAX's gloo beside torch's
    assert out == ["4.0\n"] * 4

    reference = np.array(torch_losses[0])
    for name, losses in (("TensorFlow", tf_losses), ("JAX", jax_losses)):
        for rank_losses in losses:
            gap = np.max(np.abs(np.array(rank_losses) - reference))
            assert gap < TOLERANCE, f"{name}: {gap:.2e} from DDP's losses"
    assert reference[-1] < reference[0]  # it learned


def test_mirrored_strategy_over_logical_cpu_devices_and_keras_fit(lab):
    fresh(lab)
    out = lab.run("""
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
from ddplab.lessons.frameworks import *
import json
l, _ = train_tf(strategy, 6)
with strategy.scope():
    model = keras_mlp(initial_weights())
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
xs, ys = zip(*(global_batch(s) for s in range(6)))
history = model.fit(tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys))).batch(64), verbose=0)
print("LOSSES", json.dumps(l), strategy.num_replicas_in_sync, len(history.history["loss"]))
""".replace("np.", "__import__('numpy')."), ranks=[0], timeout=120).stdout
    assert out[0].strip().endswith(" 4 1"), out  # 4 replicas; fit ran its epoch
    losses = losses_of(out)[0]
    lab.run("from ddplab.lessons.frameworks import *\nl, _ = train_torch(6, world_size, rank)")
    assert np.max(np.abs(np.array(losses) - lab.gather("l")[0])) < TOLERANCE  # one process, 4 replicas: DDP's losses


TRAIN_UNTIL = """
import numpy as np, os
rng = np.random.default_rng(rank)
for i in range(40):
    x, y = rng.standard_normal((16, 8), 'float32'), rng.standard_normal((16, 1), 'float32')
    if rank == {rank} and i == 5:
        {fault}
    ddplab.log(loss=step(x, y), samples=16)
"""


def failing_tensorflow_cell(lab, rank, fault):
    """Fresh ranks train with MultiWorkerMirroredStrategy until `fault` strikes on `rank` at step 5: the
    report, once the cell failed (within 20 s: the others were freed, not left to a timeout)."""
    fresh(lab)
    lab.run(TF_STRATEGY + TF_STEP, timeout=180)
    tic = time.monotonic()
    with pytest.raises(RankFailed) as failed:
        lab.run(TRAIN_UNTIL.format(rank=rank, fault=fault), timeout=60)
    assert time.monotonic() - tic < 20
    return failed.value, "\n".join(failed.value.report(color=False))


def all_reduce_works(lab):
    n = lab.world_size
    return lab.run("t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())").stdout == [f"{float(n)}\n"] * n


def test_a_tensorflow_worker_that_raises_is_named_and_the_other_freed(pair):
    failed, report = failing_tensorflow_cell(pair, 1, "raise ValueError('boom in a tensorflow worker')")
    assert failed.ranks[0] == 1 and report.startswith("rank 1 failed")
    assert "ValueError: boom in a tensorflow worker" in report
    assert "rank 0 stopped: its collective was cut off by rank 1" in report
    assert "TensorFlow aborted its collectives on" in report and "%ddp_restart --all" in report
    assert list(pair.states) == ["failed"] * 2  # the state diagram: as for torch ranks cut off by one that raised
    assert all_reduce_works(pair)


def test_a_tensorflow_worker_killed_mid_step_is_named_lost_and_the_pool_comes_back(pair):
    failed, report = failing_tensorflow_cell(pair, 1, "os.kill(os.getpid(), 9)")
    assert report.startswith("rank 1 lost") and "rank 0 stopped" in report, report
    assert list(pair.states) == ["failed", "lost"]
    assert "restarted rank 1" in pair.restart()
    assert all_reduce_works(pair)


def test_ctrl_c_stops_a_tensorflow_cell(pair, ctrl_c):
    """Ctrl-C while the workers train: SIGINT, then (a worker still inside a TensorFlow collective, whose
    peers left it) its links cut, and one that still does not stop killed and restarted, as for torch."""
    fresh(pair)
    pair.run(TF_STRATEGY + TF_STEP + "steps = 0", timeout=180)
    timer = ctrl_c(3.0)
    timer.start()
    tic = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            pair.run("import numpy as np\nrng = np.random.default_rng(rank)\nwhile True:\n"
                    "    x, y = rng.standard_normal((16, 8), 'float32'), rng.standard_normal((16, 1), 'float32')\n"
                    "    ddplab.log(loss=step(x, y), samples=16)\n    steps += 1", timeout=60)
    finally:
        timer.cancel()
    assert time.monotonic() - tic < 3.0 + 15
    assert all_reduce_works(pair)
    said = str(stopped.value)
    steps = [int(o) for o in pair.run("print(globals().get('steps', -1))").stdout]
    for r, n in enumerate(steps):  # it trained until Ctrl-C; a rank that was restarted is said so
        assert n > 0 or (n == -1 and "restarted" in said and str(r) in said), (steps, said)


@pytest.fixture
def shared_network(lab, pair):
    """The next pool on the machine's network (as where no private namespace can be had): the module's
    pools stopped first (the fork server follows DDPLab.private_network once no pool forks from it)."""
    for running in (lab, pair):
        if running.running:
            running.stop()
    settings = tunables()
    saved = settings.private_network, settings.accept_gate
    settings.private_network = False
    yield settings
    settings.private_network, settings.accept_gate = saved


def test_without_a_private_network_or_the_gate_the_frameworks_refuse_in_one_line(shared_network):
    shared_network.accept_gate = False
    with Lab(ranks=2, timeout=30).start() as lab:
        assert lab.pool.network[0] == "shared"
        for call in ("ddplab.tf_config()", "ddplab.jax_distributed()"):
            with pytest.raises(RankFailed) as failed:
                lab.run(call)
            error = failed.value.failures[0]
            assert error.ename == "FrameworkError" and "\n" not in error.evalue
            assert "with no authentication" in error.evalue and "accept_gate = True" in error.evalue
        assert lab.run("import sys\nprint('tensorflow' in sys.modules, 'jax' in sys.modules)").stdout == \
            ["False False\n"] * 2  # refused before anything was started


def test_in_a_local_pool_the_gate_refuses_another_hosts_connection_to_tensorflows_port(shared_network):
    """TensorFlow's gRPC server listens on every interface; a local pool's ranks are all on this machine,
    so the gate closes a connection from another host (here a network namespace on a veth pair) before
    TensorFlow sees it, and counts it."""
    ns, outside, inside = f"ddpfw{os.getpid() % 10000}", "10.213.0.1", "10.213.0.2"
    ip = ["ip"]
    subprocess.run([*ip, "netns", "add", ns], check=True)
    try:
        subprocess.run([*ip, "link", "add", f"{ns}a", "type", "veth", "peer", "name", f"{ns}b"], check=True)
        subprocess.run([*ip, "link", "set", f"{ns}b", "netns", ns], check=True)
        subprocess.run([*ip, "addr", "add", f"{outside}/30", "dev", f"{ns}a"], check=True)
        subprocess.run([*ip, "link", "set", f"{ns}a", "up"], check=True)
        subprocess.run([*ip, "-n", ns, "addr", "add", f"{inside}/30", "dev", f"{ns}b"], check=True)
        subprocess.run([*ip, "-n", ns, "link", "set", f"{ns}b", "up"], check=True)
        with Lab(ranks=2, timeout=60).start() as lab:
            assert [i["gate"] for i in lab.info] == [True, True]
            lab.run(TF_STRATEGY + "port = int(json.loads(os.environ['TF_CONFIG'])['cluster']['worker'][rank]"
                                  ".rsplit(':', 1)[1])".replace("json.", "__import__('json').")
                    .replace("os.environ", "__import__('os').environ"), timeout=120)
            port = lab.gather("port")[0]
            probe = (f"import socket\ns = socket.create_connection(('{outside}', {port}), timeout=5)\ns.settimeout(5)\n"
                     "s.sendall(b'PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n')\ntry:\n    print(repr(s.recv(100)))\n"
                     "except OSError as e:\n    print(type(e).__name__)")
            seen = subprocess.run([*ip, "netns", "exec", ns, "python3", "-c", probe], capture_output=True, text=True,
                                  timeout=30)
            assert seen.stdout.strip() in ("b''", "ConnectionResetError"), seen  # closed, not TensorFlow's answer
            lab.run("x = 1")  # (the ranks report what the gate refused with their next batch)
            refused = lab.run("from ddplab.rank.guard import GUARD\nGUARD.sweep()\nprint(GUARD.refused)").stdout[0]
            assert "another host" in refused, refused
            # and the ranks' own connections still work: TensorFlow trains across them
            out = lab.run(TF_STEP + "import numpy as np\nprint(float(step(np.ones((16, 8), 'float32'), "
                                    "np.ones((16, 1), 'float32'))))", timeout=60).stdout
            assert len(set(out)) == 1 and re.match(r"^[\d.]+\n$", out[0])
    finally:
        subprocess.run([*ip, "netns", "del", ns], capture_output=True)
        subprocess.run([*ip, "link", "del", f"{ns}a"], capture_output=True)


def test_the_names_ddplab_uses_in_tensorflow_and_jax_are_there_as_installed():
    """tests/unit/test_upstream.py checks every other package's names (without importing TensorFlow)."""
    from tests.unit.test_upstream import moved_names

    moved = moved_names(frameworks=True)
    assert not moved, "names ddplab relies on moved:\n" + moved
