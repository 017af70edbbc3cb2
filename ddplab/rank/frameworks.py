"""TensorFlow and JAX on the pool's ranks (rank side): each framework's workers find each other through
the pool's own gloo group, and listen where nobody else can reach them.

    ddplab.tf_config()        # every rank: its TF_CONFIG (set in os.environ), then
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ddplab.jax_distributed()  # every rank: jax.distributed over gloo on the CPU

Both are collectives of the pool (every rank calls them, as it calls dist.all_reduce): each rank picks
a free port and the ranks exchange them as integers over gloo (no pickle crosses). TensorFlow's gRPC
server listens on every interface whatever TF_CONFIG says, and authenticates nothing; JAX's
coordinator is bound to the pool's address here, its gloo to the host's. So before either starts, the
rank checks that what it is about to open is as private as gloo's ports: the ranks live in a network
namespace of their own (only a loopback interface), or the accept gate is up (gate.py: no other
account's connection reaches any listener of the rank, and in a local pool no other host's). Else
the call refuses in one line that says why and what to change.
"""
import json
import os
import socket
import sys

from ..shared import upstream
from ..shared.privacy import private_network
from ..shared.words import say

LOOPBACK = "127.0.0.1"
TF_STARTED = "tensorflow.python.eager.context:Context._initialized"  # (where False: the check is skipped)
JAX_STARTED = "jax._src.xla_bridge:backends_are_initialized"


class FrameworkError(RuntimeError):
    """A framework cannot be started on the ranks as asked (said in one line, with what to do)."""


TF_LISTENS = "TensorFlow's gRPC server listens on every interface of this machine"
JAX_LISTENS = "JAX's coordinator and gloo listen on this machine's addresses"
EXPOSED = ("{listens} with no authentication, and these ranks share the machine's network without the accept gate "
           "({why}): any account could connect. Turn the gate on (%config DDPLab.accept_gate = True, then "
           "%ddp_restart), or give the pool a network of its own (%ddp_status says what an administrator can change)")
TF_TOO_LATE = ("TensorFlow already ran an op in this rank, and MultiWorkerMirroredStrategy must be made before any "
               "(\"Collective ops must be configured at program startup\"): %ddp_restart --all gives fresh ranks; then "
               "call ddplab.tf_config() and make the strategy first")
JAX_TOO_LATE = ("JAX already ran a computation in this rank, and jax.distributed must start before any: %ddp_restart "
                "--all gives fresh ranks; then call ddplab.jax_distributed() first")
JAX_AGAIN = ("JAX's distributed runtime was started here as process {index} of {count}, and it starts once per "
             "process: %ddp_restart --all gives fresh ranks")

TEXTS = (TF_LISTENS, JAX_LISTENS, EXPOSED, TF_TOO_LATE, JAX_TOO_LATE, JAX_AGAIN, "turned off (DDPLab.accept_gate = False)")


def exposure(listens, lang="en"):
    """None if what a framework opens in this rank (`listens`: where, in words) is reached by nobody else;
    else why not, in one line (in the pool's language)."""
    from .gate import GATE

    if private_network() or GATE.up:
        return None
    why = GATE.why_not or say(lang, "turned off (DDPLab.accept_gate = False)")
    return say(lang, EXPOSED, listens=say(lang, listens), why=why)


def _address(ifname):
    """This rank's IPv4 address toward its peers: loopback in a local pool, else its interface's."""
    if not ifname:
        return LOOPBACK
    import psutil

    found = [a.address for a in psutil.net_if_addrs().get(ifname, ()) if a.family == socket.AF_INET]
    if not found:
        raise FrameworkError(f"this rank's interface {ifname!r} has no IPv4 address")
    return found[0]


def _free_port(ip):
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _exchange(values):
    """Every rank's list of integers (the same length on every rank), through the pool's gloo group."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [[int(v) for v in t] for t in every]


def _endpoints(ifname):
    """["ip:port"] of a free port on every rank, in rank order."""
    ip = _address(ifname)
    packed = int.from_bytes(socket.inet_aton(ip), "big")
    return [f"{socket.inet_ntoa(a.to_bytes(4, 'big'))}:{port}" for a, port in _exchange([packed, _free_port(ip)])]


def tf_config(rank, ifname=None, lang="en"):
    """The TF_CONFIG of this rank as one of the pool's TensorFlow workers (worker `rank`; worker 0 is the
    chief), set in os.environ, where MultiWorkerMirroredStrategy() reads it. Call it on every rank
    before TensorFlow runs anything: the strategy must be made before any other TensorFlow op."""
    why = exposure(TF_LISTENS, lang)
    if why:
        raise FrameworkError(why)
    if _tensorflow_started():
        raise FrameworkError(say(lang, TF_TOO_LATE))
    config = {"cluster": {"worker": _endpoints(ifname)}, "task": {"type": "worker", "index": rank}}
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def _tensorflow_started():
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return bool(upstream.get(TF_STARTED, context.context(), False))


def jax_distributed(rank, world_size, ifname=None, timeout=300, cpu_devices=None, lang="en"):
    """jax.distributed.initialize across the pool's ranks (process `rank` of `world_size`), with gloo's
    collectives on the CPU and the coordinator on rank 0, bound to the pool's address. cpu_devices: CPU
    devices per process (jax_num_cpu_devices). Returns jax.devices() (every process's)."""
    why = exposure(JAX_LISTENS, lang)
    if why:
        raise FrameworkError(why)
    import jax

    if jax.distributed.is_initialized():
        if (jax.process_index(), jax.process_count()) == (rank, world_size):
            return jax.devices()  # (a second call: as it is)
        raise FrameworkError(say(lang, JAX_AGAIN, index=jax.process_index(), count=jax.process_count()))
    if upstream.get(JAX_STARTED, default=lambda: False)():
        raise FrameworkError(say(lang, JAX_TOO_LATE))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", int(cpu_devices))
    coordinator = _endpoints(ifname)[0]  # rank 0's
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=world_size, process_id=rank,
                               coordinator_bind_address=coordinator, initialization_timeout=int(timeout))
    return jax.devices()
