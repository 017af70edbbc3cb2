"""TensorFlow and JAX on the ranks (the frameworks extra): what a pool holds with each, what forming
TensorFlow's MultiWorkerMirroredStrategy costs, and the same MLP's step under each framework (lesson 16).

Memory is the proportional set size of every process of the pool (controller, fork server, engines,
their gate keepers; shared pages split among the processes that share them), summed: what a session's
memory limit counts. Measured with 4 ranks after a DDP training (torch only), after ddplab.tf_config(),
`import tensorflow` and MultiWorkerMirroredStrategy() on every rank, and, on fresh ranks, after
ddplab.jax_distributed() and a jitted step.
"""
import time

import psutil

from .common import result

STEPS = 20


def pool_mib():
    """PSS of this process's descendants (the pool), MiB."""
    total = 0
    for p in psutil.Process().children(recursive=True):
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            continue
    return total / 2**20


def run(quick=False):
    from ddplab import Lab

    ranks, steps = (2, 3) if quick else (4, STEPS)
    lab = Lab(ranks=ranks, timeout=120).start()
    try:
        lab.run(f"from ddplab.lessons.frameworks import *\nl, torch_step = train_torch({steps}, world_size, rank)")
        torch_mib, torch_step = pool_mib(), max(lab.gather("torch_step"))
        tic = time.perf_counter()
        lab.run("ddplab.tf_config()\nimport tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()",
                timeout=300)
        tf_form = time.perf_counter() - tic
        lab.run(f"l, tf_step = train_tf(strategy, {steps})", timeout=300)
        tf_mib, tf_step = pool_mib(), max(lab.gather("tf_step"))
        lab.restart(everything=True)
        lab.run(f"ddplab.jax_distributed()\nfrom ddplab.lessons.frameworks import *\nl, jax_step = train_jax({steps})",
                timeout=300)
        jax_mib, jax_step = pool_mib(), max(lab.gather("jax_step"))
    finally:
        lab.stop()
    where = f"{ranks} ranks, the pool's processes (PSS)"
    return [
        result("pool_mib_torch", f"{where}, after a DDP training: torch only", [torch_mib], unit="MiB"),
        result("pool_mib_tensorflow", f"{where}, TensorFlow imported and MultiWorkerMirroredStrategy made on every rank",
               [tf_mib], unit="MiB", per_rank_over_torch_mib=round((tf_mib - torch_mib) / ranks)),
        result("pool_mib_jax", f"{where}, fresh ranks after jax.distributed and a jitted step", [jax_mib], unit="MiB",
               per_rank_over_torch_mib=round((jax_mib - torch_mib) / ranks)),
        result("tf_strategy_form", f"ddplab.tf_config() + import tensorflow + MultiWorkerMirroredStrategy() on {ranks} "
               "ranks (s)", [tf_form], unit="s"),
        result("step_ms_torch", f"the lesson-16 MLP's step, global batch 64 over {ranks} ranks: DDP (ms)",
               [torch_step * 1000], unit="ms"),
        result("step_ms_tensorflow", "the same step: MultiWorkerMirroredStrategy, custom loop (ms)", [tf_step * 1000],
               unit="ms"),
        result("step_ms_jax", "the same step: JAX jit over every process's devices (ms)", [jax_step * 1000], unit="ms"),
    ]
