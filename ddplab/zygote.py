"""A fork server for a pool's processes: it imports torch (and everything an engine or the
controller needs) once, then forks them with all of it already loaded.

    python -m ddplab.zygote WORKDIR        (one JSON request per line on stdin, a reply on stdout)

Importing torch costs about 1.2 s of CPU per process, and torch._dynamo (which the first
DistributedDataParallel() imports) 1.2 s more; four engines on two cores doing that in turn
take most of a pool's start-up, and slow the first cells after it. The zygote pays it once,
for every pool of its notebook (launcher.py starts it at %load_ext ddplab), and its forks share
the loaded pages copy-on-write (less memory too). Nothing here may start a thread before forking.

Requests: {"main": "engine" | "controller", "env": {...}, "cwd": "...", "output": "path/to/log",
"args": [...]} -> reply {"pid": N}. The zygote reaps its children and appends "pid exit-code"
lines to WORKDIR/exits. It exits when its stdin closes (the notebook's process is gone).
"""
import json
import os
import shutil
import signal
import sys


def preload():
    """What every engine needs before it can register, join the group and run DDP at once."""
    import ipyparallel.controller.app  # noqa: F401
    import ipyparallel.engine.app  # noqa: F401 - ipykernel, IPython, zmq, traitlets
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - DistributedDataParallel() imports it
    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    import ddplab.rank  # noqa: F401
    import ddplab.workloads  # noqa: F401



def _reap(exits_path):
    def handler(signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with open(os.open(exits_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
                f.write(f"{pid} {code}\n")
    return handler


def _become(request, inherited):
    """In the forked child: a fresh session, its environment and log, then ipengine/ipcontroller."""
    os.setsid()  # like ipyparallel's start_new_session: signals to the notebook do not reach it
    for fd in inherited:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the owner's only
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])
    import random

    random.seed()  # forks share the zygote's random state; separate processes would not
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    os.chdir(request["cwd"])
    main = request.get("main", "engine")
    if main == "controller":
        os.umask(0o077)  # its connection files, logs and database: the owner's only (engines keep the user's umask)
    sys.argv = [f"ip{main}", *request.get("args", [])]
    code = 0
    try:
        if main == "controller":
            from ipyparallel.controller.app import main
        else:
            from ipyparallel.engine.app import main
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report, then leave without running the zygote's code
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv=None):
    workdir = (argv or sys.argv[1:])[0]
    preload()
    exits = os.path.join(workdir, "exits")
    signal.signal(signal.SIGCHLD, _reap(exits))
    requests, replies = sys.stdin, sys.stdout
    inherited = [requests.fileno(), replies.fileno()]
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    replies.flush()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become(request, inherited)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
    shutil.rmtree(workdir, ignore_errors=True)  # the notebook is gone: nobody else will


if __name__ == "__main__":
    main()
