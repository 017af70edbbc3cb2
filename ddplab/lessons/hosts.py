"""Several "hosts" on one Linux machine, for trying a pool across hosts: network namespaces
(iproute2: a bridge, one veth per namespace, addresses on the bridge's subnet), an ipyparallel
controller on the bridge's address and one `ipengine` per namespace, each with its own hostname
(which resolves to nothing), no working DNS, and a second network interface, as many cluster
nodes have. Needs root; lesson 17 and the tests use it.

    with Hosts(4) as hosts:                  # h1..h4: 10.77.0.11..14, controller on 10.77.0.1
        %ddp_start --connect {hosts.client_file}
        ...
        hosts.lose(2)                        # host h3 (rank 2's) is gone: engine and nanny killed

Everything it makes it removes (namespaces, links, processes, by their process group and pid).
"""
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from ..processes.owned import NO_RECORDS, ONE_PROCESS

log = logging.getLogger("ddplab")


class HostsUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, no iproute2, ...)."""


def check():
    """Why namespaces cannot be made here, or None if they can."""
    from . import say

    if os.geteuid() != 0:
        return say("making network namespaces needs root", "创建网络命名空间需要 root 权限")
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return say(f"the {tool} command is missing (Debian: iproute2, util-linux)",
                       f"缺少 {tool} 命令（Debian：iproute2、util-linux）")
    return None


def _run(*args):
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        raise HostsUnavailable(f"{' '.join(args)}: {out.stderr.strip()}")


def free_subnet():
    """A 10.77.X subnet no interface of this machine has an address in (10.77.0 if it is free)."""
    import random

    import psutil

    used = {a.address.rsplit(".", 1)[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    free = [f"10.77.{x}" for x in range(256) if f"10.77.{x}" not in used]
    if not free:
        raise HostsUnavailable("every 10.77.X subnet is in use on this machine")
    return free[0] if free[0] == "10.77.0" else random.choice(free)


class Hosts:
    """`n` namespaces on a bridge, a controller, one engine each (see the module docstring)."""

    def __init__(self, n=4, subnet=None, heartbeat_ms=1000, misses=4, python=sys.executable, encrypt=True):
        why = check()
        if why:
            raise HostsUnavailable(why)
        subnet = subnet or free_subnet()  # two sets at once (a lesson and a test) must not share one
        self.n, self.subnet, self.python = n, subnet, python
        self.tag = secrets.token_hex(2)  # names are unique: two sets can exist at once
        self.bridge = f"ddpbr{self.tag}"
        self.names = [f"ddp{self.tag}h{i + 1}" for i in range(n)]
        self.hostnames = [f"h{i + 1}" for i in range(n)]
        self.addresses = [f"{subnet}.{11 + i}" for i in range(n)]
        self.controller_address = f"{subnet}.1"
        self.heartbeat_ms, self.misses = heartbeat_ms, misses
        self.encrypt = encrypt  # CurveZMQ between the hosts and the controller (and so ddplab's own traffic)
        self.profile = tempfile.mkdtemp(prefix="ddplab-hosts-")  # 0700: the connection files
        self.controller = None
        self.engines = {}  # host index -> Popen (its own session: ended by process group)
        self._made = []

    @property
    def client_file(self):
        return os.path.join(self.profile, "security", "ipcontroller-client.json")

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self):
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        _run("ip", "addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        self._claim_subnet()
        _run("ip", "link", "set", self.bridge, "up")
        for i, (ns, address) in enumerate(zip(self.names, self.addresses)):
            veth = f"ddpv{self.tag}{i + 1}"
            _run("ip", "netns", "add", ns)
            self._made.append(("netns", ns))
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._made.append(("link", veth))
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "route", "add", "default", "via", self.controller_address)
            # a second interface, as real hosts have (a storage or management network): the pool
            # must use the one that reaches the controller, not this one
            _run("ip", "-n", ns, "link", "add", "mgmt0", "type", "veth", "peer", "name", "mgmt1")
            _run("ip", "-n", ns, "addr", "add", f"192.168.{77 + i}.1/24", "dev", "mgmt0")
            _run("ip", "-n", ns, "link", "set", "mgmt0", "up")
        self.start_controller()
        for i in range(self.n):
            self.start_engine(i)

    def _claim_subnet(self):
        """If another set took the same subnet meanwhile (both found it free), move to another."""
        import psutil

        holders = [name for name, addrs in psutil.net_if_addrs().items()
                   if any(a.address == self.controller_address for a in addrs)]
        if holders == [self.bridge]:
            return
        _run("ip", "addr", "del", f"{self.controller_address}/24", "dev", self.bridge)
        self.subnet = free_subnet()
        self.addresses = [f"{self.subnet}.{11 + i}" for i in range(self.n)]
        self.controller_address = f"{self.subnet}.1"
        _run("ip", "addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        self._claim_subnet()

    def start_controller(self):
        log = open(os.path.join(self.profile, "controller.log"), "w")
        self.controller = subprocess.Popen(
            [self.python, "-m", "ipyparallel.controller", f"--ip={self.controller_address}",
             f"--profile-dir={self.profile}", f"--HeartMonitor.period={self.heartbeat_ms}",
             f"--HeartMonitor.max_heartmonitor_misses={self.misses}", *ONE_PROCESS, *NO_RECORDS,
             *(["--IPController.enable_curve=True"] if self.encrypt else [])],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            # the messages' HMAC key, kept with CurveZMQ (ipyparallel would drop it); in the environment, not
            # on the command line, where every account could read it
            env={**os.environ, "IPP_SESSION_KEY": secrets.token_hex(16)})
        deadline = time.monotonic() + 60
        files = [os.path.join(self.profile, "security", f"ipcontroller-{kind}.json") for kind in ("engine", "client")]
        while not all(os.path.exists(f) for f in files):
            if self.controller.poll() is not None or time.monotonic() > deadline:
                raise HostsUnavailable("the controller did not start: " + open(log.name).read()[-2000:])
            time.sleep(0.05)

    def start_engine(self, i):
        """An ipengine in namespace i, with hostname h{i+1} (a UTS namespace of its own)."""
        engine_file = os.path.join(self.profile, "security", "ipcontroller-engine.json")
        log = open(os.path.join(self.profile, f"engine-{self.hostnames[i]}.log"), "a")
        script = f"hostname {self.hostnames[i]} && exec {self.python} -m ipyparallel.engine --file={engine_file}"
        self.engines[i] = subprocess.Popen(
            ["ip", "netns", "exec", self.names[i], "unshare", "--uts", "sh", "-c", script],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})

    def lose(self, i):
        """Host i is gone: its engine and the engine's nanny are killed at once (no goodbye)."""
        proc = self.engines.pop(i, None)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)

    def lose_host_of(self, row):
        """The host of a rank (a row of Lab.status()) is lost."""
        self.lose(self.hostnames.index(row["host"]))

    def down(self):
        for i in list(self.engines):
            self.lose(i)
        if self.controller is not None:
            try:
                os.killpg(self.controller.pid, signal.SIGTERM)
                self.controller.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.controller.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.controller = None
        for kind, name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name] if kind == "netns" else ["ip", "link", "del", name],
                           capture_output=True)
        self._made = []
        shutil.rmtree(self.profile, ignore_errors=True)


class LocalEngines:
    """The same shape as Hosts where namespaces cannot be made (not root, not Linux): a controller
    and n engines on this machine, started by ipyparallel as `ipcluster start` would."""

    kind = "engines on this machine"

    def __init__(self, n=4):
        import ipyparallel as ipp

        self.n = n
        self.profile = tempfile.mkdtemp(prefix="ddplab-hosts-")
        self.cluster = ipp.Cluster(n=n, profile_dir=self.profile, cluster_id="", log_level=40, shutdown_atexit=True,
                                   controller_ip="127.0.0.1", engines="local", controller_args=[*ONE_PROCESS, *NO_RECORDS])
        self.hostnames, self.addresses, self.controller_address = [], [], "127.0.0.1"

    @property
    def client_file(self):
        return os.path.join(self.profile, "security", "ipcontroller-client.json")

    def __enter__(self):
        self.cluster.start_cluster_sync()
        return self

    def __exit__(self, *exc):
        self.down()

    def lose(self, i):
        """Engine i is gone (and its nanny: like a host lost)."""
        launchers = [l for es in self.cluster.engines.values() for l in es.launchers.values()]
        proc = launchers[i].process
        for p in [*proc.children(recursive=True), proc]:
            try:
                p.kill()
            except psutil.Error:  # gone already
                continue

    def lose_host_of(self, row):
        """The engine of a rank (a row of Lab.status()) dies; its nanny tells the controller."""
        import psutil

        try:
            psutil.Process(row["pid"]).kill()
        except psutil.Error:
            pass

    def down(self):
        try:
            self.cluster.stop_cluster_sync()
        except Exception:  # noqa: BLE001 - its engines may be gone already (lost on purpose): said, not raised
            log.info("stopping the local engines' cluster failed", exc_info=True)
        shutil.rmtree(self.profile, ignore_errors=True)


def hosts_or_local(n=4):
    """Hosts(n) where this machine can make namespaces, else LocalEngines(n); started."""
    if check() is None:
        made = Hosts(n)
        made.kind = "network namespaces"
    else:
        made = LocalEngines(n)
    return made.__enter__()
