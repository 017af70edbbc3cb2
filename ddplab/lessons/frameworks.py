"""One algorithm in three frameworks, run on the ranks (lesson 16): the same MLP, the same initial
weights, the same data split the same way and the same SGD, under torch DDP, TensorFlow's
MultiWorkerMirroredStrategy (or MirroredStrategy over logical devices) and JAX.

    from ddplab.lessons.frameworks import train_torch, train_tf, train_jax

Each `train_*` returns (the global mean loss at each step, seconds per step): the median of the steps
after the first, whose time goes mostly to tracing (tf.function), compiling (jax.jit) or DDP's first
bucket building. Pass `record={}` to have it filled with the first step's seconds ("first"), every
later step's ("steps") and the collectives one step makes ("collectives"). `step_alone` times the same
step on this rank's slice with no communication, `collectives_seconds` the collectives of one step
done alone, as each framework does them: a step's time taken apart. `torch_mlp` and `keras_mlp` build
the MLP from given weights, `epoch_clock` times Keras fit's epochs, `versions` says which versions are
installed (read in the notebook, importing nothing). The weights come from
torch's nn.Linear initialisation (seeded), as numpy arrays; Keras's Dense keeps its kernel as
(inputs, outputs), the transpose of torch's Linear weight. Step s's global batch is made from seed
s alone and cut into `replicas` equal slices in replica order: replica r trains on slice r, as
MirroredStrategy splits a batch and as DDP's ranks each take their own. The loss is the mean squared
error over the global batch, so every framework computes the same sums in float32, in its own order.

Rank side: imports numpy at first; torch, TensorFlow or JAX only in the function that needs it.
"""
import re
import time

SIZES = (8, 32, 1)  # the MLP: 8 inputs, 32 hidden (ReLU), 1 output
GLOBAL_BATCH = 64  # examples per step, split evenly over the replicas (16 each on 4)
LR = 0.1
TF_RANK_MIB = 560  # what a rank holds with torch and TensorFlow imported and a strategy made (PSS; bench frameworks)
JAX_RANK_MIB = 270  # with torch and JAX imported, jax.distributed started and a step jitted (PSS; bench frameworks)
POOL_MIB = 200  # a pool's controller and fork server, and the room a step needs
ALL_REDUCE = re.compile(r"= .*\ball-reduce(-start)?\(")  # an all-reduce instruction in XLA's compiled HLO text


def versions():
    """{framework: version} of torch, TensorFlow (tensorflow or tensorflow-cpu), Keras and JAX, read from the
    installed packages' metadata (nothing is imported; a missing one is left out)."""
    from importlib import metadata

    found = {}
    for name, dists in (("torch", ("torch",)), ("TensorFlow", ("tensorflow", "tensorflow-cpu")), ("Keras", ("keras",)),
                        ("JAX", ("jax",))):
        for dist in dists:
            try:
                found[name] = metadata.version(dist).split("+")[0]
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def initial_weights(seed=0, sizes=SIZES):
    """[(weight (out, in), bias (out,)), ...] of torch's nn.Linear layers made after manual_seed(seed)."""
    import torch

    torch.manual_seed(seed)
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    return [(layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()) for layer in layers]


def global_batch(step, size=GLOBAL_BATCH, sizes=SIZES):
    """Step `step`'s global batch (x, y), float32: the same wherever and by whomever it is made."""
    import numpy as np

    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((size, sizes[0])).astype(np.float32)
    y = (np.sin(x.sum(axis=1, keepdims=True)) + 0.1 * rng.standard_normal((len(x), sizes[-1]))).astype(np.float32)
    return x, y


def my_slice(a, replica, replicas):
    """Replica `replica`'s part of a global batch cut into `replicas` equal parts, in replica order."""
    n = len(a) // replicas
    return a[replica * n:(replica + 1) * n]


class NoRoom(MemoryError):
    """Lesson 16 needs more memory than this session has (a 1 GiB hub): one line in a notebook, where "Run All"
    stops, before any pool starts."""

    def _render_traceback_(self):  # IPython: the one line, no traceback
        return [f"{type(self).__name__}: {self}"]


def ranks_that_fit(want, rank_mib, what):
    """(ranks, why): `want` ranks if this session's free memory holds them at `rank_mib` each beside a pool's own
    POOL_MIB, else 2 (each then trains a larger part of the same global batch: the same update); `why` says so in
    the pool's language, or is None. Fewer than 2 would leave nothing to reduce: NoRoom says what the lesson
    needs. what: (English, Chinese) names of the ranks, plural. Run it in the notebook, with no pool running."""
    from ..shared.system import memory_available
    from . import say

    room = memory_available() / 2**20 - POOL_MIB
    ranks = next((n for n in (want, 2) if n * rank_mib <= room), 0)
    values = dict(room=room, want=want, need=want * rank_mib, least=2 * rank_mib, ranks=ranks, what=what[0],
                  what_zh=what[1], each=GLOBAL_BATCH // ranks if ranks else None)
    if not ranks:
        raise NoRoom(say("this session has room for {room:.0f} MiB more, and this lesson needs 2 {what} at least "
                         "(about {least} MiB): open it where a session has 2 GiB or more (Binder, a laptop)".format(**values),
                         "这个会话还能再用 {room:.0f} MiB，而这一课至少需要 2 个{what_zh}（约 {least} MiB）：请在有 2 GiB "
                         "或更多内存的会话里打开它（Binder、笔记本电脑）".format(**values)))
    if ranks == want:
        return ranks, None
    return ranks, say("this session has room for {room:.0f} MiB more, and {want} {what} need about {need} MiB: "
                      "{ranks} {what}, each training {each} examples a step, make the same global batch of 64 and the "
                      "same update".format(**values),
                      "这个会话还能再用 {room:.0f} MiB，而 {want} 个{what_zh}大约需要 {need} MiB：改用 {ranks} 个，"
                      "每个每步训练 {each} 个样本，全局批次仍是同样的 64 个样本，更新也相同".format(**values))


def tf_workers(want=4):
    """(workers, why): how many TensorFlow workers of `want` fit in this session's memory (ranks_that_fit), a rank
    with TensorFlow holding about TF_RANK_MIB."""
    return ranks_that_fit(want, TF_RANK_MIB, ("TensorFlow workers", " TensorFlow worker"))


def jax_ranks(want=4):
    """(ranks, why): how many ranks of `want` fit for JAX and then DDP (ranks_that_fit), a rank with JAX holding
    about JAX_RANK_MIB."""
    return ranks_that_fit(want, JAX_RANK_MIB, ("ranks with JAX", "运行 JAX 的 rank"))


def torch_mlp(weights):
    """The MLP in torch (Linear, ReLU, Linear), its parameters copied from `weights`."""
    import torch

    layers = []
    for weight, bias in weights:
        layer = torch.nn.Linear(weight.shape[1], weight.shape[0])
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(weight))
            layer.bias.copy_(torch.from_numpy(bias))
        layers += [layer, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def train_torch(steps, replicas, replica, lr=LR, seed=0, record=None):
    """DDP on the pool's group (this rank is `replica` of `replicas`): the global mean loss per step."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(torch_mlp(initial_weights(seed)))
    counter = None
    if record is not None:  # count DDP's all-reduces (one per bucket): the same all-reduce, counted
        from .ranks import CommCounter

        counter = CommCounter()
        model.register_comm_hook(None, counter.hook)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses, times = [], []
    for step in range(steps):
        tic = time.perf_counter()
        x, y = (torch.from_numpy(my_slice(a, replica, replicas)) for a in global_batch(step))
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)  # this replica's mean; DDP averages the gradients
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the global mean loss, for the record (equal slices: the mean of the means)
        losses.append(mean.item() / replicas)
        times.append(time.perf_counter() - tic)
        _log(losses[-1], len(x))
    if counter is not None:
        record["collectives"] = counter.calls / steps + 1  # DDP's buckets, and the loss's all-reduce
    return losses, _timed(times, record)


def keras_mlp(weights):
    """The same MLP in Keras, its Dense kernels the transposes of torch's weights."""
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input((weights[0][0].shape[1],))] + [
        tf.keras.layers.Dense(w.shape[0], activation="relu" if i < len(weights) - 1 else None)
        for i, (w, _) in enumerate(weights)])
    for layer, (w, b) in zip(model.layers, weights):
        layer.set_weights([w.T, b])
    return model


def train_tf(strategy, steps, lr=LR, seed=0, record=None):
    """A custom training loop under `strategy` (MultiWorkerMirroredStrategy on the ranks, or
    MirroredStrategy over logical devices): TensorFlow's conventions, each replica's loss summed
    over its examples and divided by the *global* batch (compute_average_loss), the gradients summed
    across replicas by apply_gradients. The global mean loss per step (strategy.reduce SUM)."""
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        model = keras_mlp(initial_weights(seed))
        opt = tf.keras.optimizers.SGD(lr)

    @tf.function
    def step_fn(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(x) - y), axis=1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces (sums) the gradients
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y)), axis=None)

    losses, times = [], []
    for step in range(steps):
        tic = time.perf_counter()
        x, y = global_batch(step)

        def mine(context, a):  # each replica's slice, by its global replica id
            return tf.constant(my_slice(a, context.replica_id_in_sync_group, replicas))

        xs = strategy.experimental_distribute_values_from_function(lambda c, a=x: mine(c, a))
        ys = strategy.experimental_distribute_values_from_function(lambda c, a=y: mine(c, a))
        losses.append(float(step_fn(xs, ys)))
        times.append(time.perf_counter() - tic)
        _log(losses[-1], GLOBAL_BATCH // replicas * len(strategy.extended.worker_devices))  # this worker's examples
        if step == 0 and record is not None:  # the collective ops of the traced step, per replica of this worker
            graph = step_fn.get_concrete_function(xs, ys).graph
            ops = [op for op in graph.get_operations() if op.type.startswith("Collective")]
            record["collectives"] = len(ops) / len(strategy.extended.worker_devices)
    return losses, _timed(times, record)


def train_jax(steps, lr=LR, seed=0, record=None):
    """jit over every process's devices (jax.distributed started): the batch sharded along "dp", the
    parameters replicated; XLA inserts the all-reduce of the gradients (gloo between processes). The
    global mean loss per step."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()
    replicas = len(devices)
    mesh = jax.sharding.Mesh(np.array(devices), ("dp",))
    batch, replicated = NamedSharding(mesh, P("dp")), NamedSharding(mesh, P())
    params = jax.device_put([(jnp.asarray(w), jnp.asarray(b)) for w, b in initial_weights(seed)], replicated)

    step_fn = _jax_sgd_step(lr)
    local = [devices.index(d) for d in jax.local_devices()]  # the replicas (slices) this process holds
    losses, times, compiled = [], [], None
    for step in range(steps):
        tic = time.perf_counter()
        x, y = global_batch(step)
        xs = jax.make_array_from_process_local_data(batch, np.concatenate([my_slice(x, r, replicas) for r in local]))
        ys = jax.make_array_from_process_local_data(batch, np.concatenate([my_slice(y, r, replicas) for r in local]))
        if compiled is None:  # jit's trace and XLA's compilation, once, in the first step
            compiled = step_fn.lower(params, xs, ys).compile()
            if record is not None:  # what XLA compiled: its all-reduces
                hlo = compiled.as_text()
                record["all_reduces"] = [line.strip() for line in hlo.splitlines() if ALL_REDUCE.search(line)]
                record["collectives"] = len(record["all_reduces"])
        params, loss = compiled(params, xs, ys)
        losses.append(float(loss))
        times.append(time.perf_counter() - tic)
        _log(losses[-1], GLOBAL_BATCH // replicas * len(local))
    return losses, _timed(times, record)


def _jax_sgd_step(lr):
    """The MLP's SGD step in JAX, jitted: (params, x, y) -> (new params, loss); params [(w, b), ...]."""
    import jax
    import jax.numpy as jnp

    def loss_of(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w.T + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return jnp.mean(jnp.square(h - y))

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_of)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return step


def step_alone(framework, steps=20, replica=0, replicas=4, lr=LR, seed=0):
    """Seconds per step (median, after one warm-up step) of the same SGD step on replica `replica`'s
    slice of each global batch, in this process alone: no strategy, no sharding, no all-reduce.
    framework: "torch", "tensorflow" or "jax"."""
    import numpy as np

    weights = initial_weights(seed)
    batches = [tuple(my_slice(a, replica, replicas) for a in global_batch(s)) for s in range(steps + 1)]
    if framework == "torch":
        import torch

        model = torch_mlp(weights)
        opt = torch.optim.SGD(model.parameters(), lr=lr)

        def step(x, y):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            opt.step()
            return loss.item()
    elif framework == "tensorflow":
        import tensorflow as tf

        model, opt = keras_mlp(weights), tf.keras.optimizers.SGD(lr)

        @tf.function
        def traced(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss

        def step(x, y):
            return float(traced(tf.constant(x), tf.constant(y)))
    elif framework == "jax":
        import jax.numpy as jnp

        params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in weights]

        jitted = _jax_sgd_step(lr)

        def step(x, y):
            nonlocal params
            params, loss = jitted(params, jnp.asarray(x), jnp.asarray(y))
            return float(loss)
    else:
        raise ValueError(f"framework: 'torch', 'tensorflow' or 'jax', not {framework!r}")
    times = []
    for x, y in batches:
        tic = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - tic)
    return float(np.median(times[1:]))


def gradient_shapes(sizes=SIZES, keras=False):
    """The shapes of the MLP's gradients, layer by layer: weight (out, in) (Keras: kernel (in, out)), bias."""
    shapes = []
    for a, b in zip(sizes, sizes[1:]):
        shapes += [(a, b) if keras else (b, a), (b,)]
    return shapes


def collectives_seconds(framework, strategy=None, repeats=30):
    """Seconds (median, after one warm-up) of the collectives one training step makes, done alone, as the
    framework does them in train_*, on arrays of the step's shapes (the gradients, then the loss):
    torch, DDP's one bucket of the 321 gradient numbers (dist.all_reduce of one flat tensor) and the
    loss's all_reduce; TensorFlow, under `strategy`, the replica context's all_reduce of the gradient
    list (which TensorFlow packs) and strategy.reduce of the loss, in one tf.function; JAX, a jitted sum
    over the "dp" axis of the four gradients and the loss, which XLA combines into one all-reduce, as in
    the step. Every rank calls it."""
    import numpy as np

    if framework == "torch":
        import torch
        import torch.distributed as dist

        bucket, loss = torch.ones(sum(int(np.prod(s)) for s in gradient_shapes())), torch.ones(())

        def once():
            dist.all_reduce(bucket)
            dist.all_reduce(loss)
    elif framework == "tensorflow":
        import tensorflow as tf

        @tf.function
        def collectives():
            def replica_fn():
                grads = tf.distribute.get_replica_context().all_reduce(
                    "sum", [tf.ones(s) for s in gradient_shapes(keras=True)])
                return tf.reduce_sum(grads[-1])  # (a per-replica value: the loss's place)
            return strategy.reduce("sum", strategy.run(replica_fn), axis=None)

        def once():
            collectives().numpy()
    elif framework == "jax":
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("dp",))
        local = len(jax.local_devices())
        parts = [jax.make_array_from_process_local_data(NamedSharding(mesh, P("dp")), np.ones((local, *shape), np.float32))
                 for shape in [*gradient_shapes(), ()]]
        summed = jax.jit(lambda arrays: [jnp.sum(a, axis=0) for a in arrays])

        def once():
            jax.block_until_ready(summed(parts))
    else:
        raise ValueError(f"framework: 'torch', 'tensorflow' or 'jax', not {framework!r}")
    times = []
    for _ in range(repeats + 1):
        tic = time.perf_counter()
        once()
        times.append(time.perf_counter() - tic)
    return float(np.median(times[1:]))


def epoch_clock():
    """A Keras callback for fit that times every epoch: .epochs = [(the epoch's seconds, the seconds of its
    train steps, its steps)]; the rest of an epoch is what fit does around the steps (making the input
    iterator, the callbacks, the metrics)."""
    import tensorflow as tf

    class EpochClock(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epochs = []

        def on_epoch_begin(self, epoch, logs=None):
            self._begin, self._in_steps, self._steps = time.perf_counter(), 0.0, 0

        def on_train_batch_begin(self, batch, logs=None):
            self._tic = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self._in_steps += time.perf_counter() - self._tic
            self._steps += 1

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append((time.perf_counter() - self._begin, self._in_steps, self._steps))

    return EpochClock()


def _timed(times, record):
    """Seconds per step: the median of the steps after the first (which traces, compiles or builds)."""
    import numpy as np

    if record is not None:
        record["first"], record["steps"] = times[0], times[1:]
    return float(np.median(times[1:] or times))


def _log(loss, samples):
    import sys

    rank = sys.modules.get("ddplab.rank")
    if rank is not None and rank.RANK.formed:
        rank.RANK.log(loss=loss, samples=samples)
