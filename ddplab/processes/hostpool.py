"""Pools whose engines may be on other hosts: ipyparallel over TCP (signed; encrypted with CurveZMQ
when asked), each rank located by the route toward the controller, the rendezvous a signed store
on rank 0 (store.py), telemetry over signed TCP. Two kinds:

- `AttachedPool`: engines someone else started (`ipcluster start`, `ipengine` by hand, a Slurm job),
  reached through their controller's connection file; never stopped unless asked;
- `LaunchedPool`: a controller and engines this notebook starts with an ipyparallel launcher
  (mpi, ssh, slurm, ...: their settings from an IPython profile).
"""
import json
import os
import shutil
import signal
import socket
import tempfile
import time

from ..shared.errors import BadRequest, StartFailed
from .owned import OwnedCluster, ipp_log
from .pool import Pool, guard_client, log


def route_to(ip):
    """This machine's address on the route to `ip` (UDP connect: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((ip, 9))
        return s.getsockname()[0]


class HostsPool(Pool):
    """What pools across hosts share (see the module docstring)."""

    network_words = "the ranks are on other hosts: they talk over the network"

    def connection_info(self):
        raise NotImplementedError

    def controller_ip(self):
        """The controller's address as its connection file gives it."""
        info = self.connection_info()
        host = info["interface"].split("://", 1)[-1].rsplit(":", 1)[0]
        if host in ("*", "0.0.0.0", ""):
            host = info.get("location") or "127.0.0.1"
        return socket.gethostbyname(host)  # an address stays as it is; a name is looked up here, once

    @property
    def encrypted(self):
        return bool(self.connection_info().get("curve_serverkey"))

    def exposure(self):
        return {"local": False, "network": "shared", "network_why": self.network_words,
                "signed": bool(self.connection_info().get("key")), "encrypted": self.encrypted,
                "controller": self.controller_ip()}

    def telemetry_where(self):
        """TCP on the address this machine uses toward the controller (signed: wire.py)."""
        return f"tcp://{route_to(self.controller_ip())}"

    def rendezvous(self, generation, key, member):
        """The signed store rank 0 serves on its own address, for the pool's members (store.py)."""
        return self.signed_store(self.facts[0]["ip"], key, generation, member)

    def rendezvous_text(self):
        return f"signed store on rank 0 ({self.facts[0]['ip']})" if self.facts else "signed store on rank 0"

    def located(self, eids, deadline):
        """Ask each engine where it is (Rank.reach); return (eids ordered by host, then engine id;
        their facts in the same order)."""
        from ..rank import call

        ar = self.client[list(eids)].apply_async(call, "reach", self.controller_ip(), self.ifname)
        if not ar.wait(max(0.1, deadline - time.perf_counter())):
            raise StartFailed("the engines did not say where they are in time: are they busy?")
        try:
            facts = ar.get()
        except Exception as exc:  # noqa: BLE001 - e.g. --ifname names an interface a host lacks
            raise StartFailed(f"an engine could not find its address: {getattr(exc, 'evalue', exc)}") from exc
        order = sorted(zip(facts, eids), key=lambda fe: (fe[0]["host"], fe[1]))
        return [e for _, e in order], [f for f, _ in order]

    def clock_offsets(self, rounds=5):
        """Each rank's host clock against this machine's, by round trips (NTP's way): the offset is
        the host's clock minus the middle of the best (shortest) round trip; its error at most half
        that round trip."""
        import time

        from ..rank import call

        offsets, error = {}, 0.0
        for r, eid in enumerate(self.engine_ids):
            best = None
            for _ in range(rounds):
                sent = time.monotonic()
                theirs = self.client[eid].apply_sync(call, "clock")
                back = time.monotonic()
                if best is None or back - sent < best[0]:
                    best = (back - sent, theirs - (sent + back) / 2)
            offsets[r] = best[1]
            error = max(error, best[0] / 2)
        log.info("clock offsets of the hosts (s): %s, known within %.1f ms", offsets, 1000 * error)
        return offsets, error

    def signal_remote(self, eids, sig):
        """Signal engines through ipyparallel (the engine's nanny, on its host); True if every one
        answered ok within DDPLab.control_timeout (a broken channel must not hold the notebook)."""
        import concurrent.futures

        from ..shared.config import tunables

        timeout = tunables().control_timeout
        future = self.client.send_signal(sig, targets=eids, block=False)
        try:
            replies = future.result(timeout)
        except concurrent.futures.TimeoutError:
            log.warning("engines %s did not answer signal %s within %g s", eids, sig, timeout)
            return False
        except Exception as exc:  # noqa: BLE001 - ipyparallel raises what the engine reported
            log.info("signal %s to engines %s: %s", sig, eids, exc)
            return False
        return all(m["content"]["status"] == "ok" for m in replies)

    def kill(self, ranks, why=None):
        """SIGKILL the engines through their nannies (ipengine starts one by default), or, without
        a nanny, ask the engine to shut down."""
        eids = [self.engine_ids[r] for r in ranks if self.client is not None and self.engine_ids[r] in self.client.ids]
        if eids and not self.signal_remote(eids, signal.SIGKILL):
            log.info("no nanny answered for engines %s: asking them to shut down", eids)
            self.client.shutdown(targets=eids, block=False)
        if why:
            for r in ranks:
                self.mark_lost(r, why)

    def interrupt(self, ranks):
        live = [self.engine_ids[r] for r in ranks if r not in self.lost(ranks)]
        if live:
            self.signal_remote(live, signal.SIGINT)


class AttachedPool(HostsPool):
    """Engines someone else started, reached through their controller's ipcontroller-client.json
    (connect=PATH) or the cluster that `ipcluster start --profile NAME [--cluster-id ID]` made.
    Every registered engine becomes a rank, ordered by host, then engine id. It never starts
    engines, and stops them only when asked (stop(shutdown=True)). A lost engine is one the
    controller no longer hears: ipyparallel's heartbeat (or the engine's nanny, which tells the
    controller at once when its engine dies)."""

    def __init__(self, connect=None, profile=None, cluster_id=None, ifname=None):
        super().__init__(ifname)
        self.connect, self.profile, self.cluster_id = connect, profile, cluster_id
        self.cluster = None

    def describe(self):
        return self.connect or f"profile {self.profile}" + (f", cluster {self.cluster_id}" if self.cluster_id else "")

    def connection_info(self):
        if self.connect:
            with open(self.connect) as f:
                return json.load(f)
        info = self.cluster.controller.get_connection_info()
        if hasattr(info, "__await__"):
            import asyncio

            info = asyncio.run(info)
        client = info["client"]
        if isinstance(client, str):
            with open(client) as f:
                client = json.load(f)
        return client

    def start(self, n, deadline, say):
        import ipyparallel as ipp

        self.workdir = tempfile.mkdtemp(prefix="ddplab-")
        say("attaching to the engines of {what} ...", what=self.describe())
        try:
            if self.connect:
                # (the path goes first: ipyparallel 9.2 ignores its url_file= keyword)
                self.client = ipp.Client(self.connect, timeout=max(1.0, deadline - time.perf_counter()))
            else:
                self.cluster = ipp.Cluster.from_file(profile=self.profile, cluster_id=self.cluster_id or "",
                                                     log=ipp_log)
                self.client = self.cluster.connect_client_sync()
        except (OSError, ipp.error.TimeoutError, KeyError, ValueError) as exc:
            raise StartFailed(f"cannot reach the controller of {self.describe()}: {exc}") from exc
        self.dropped = guard_client(self.client)
        want = n or 1
        while len(self.client.ids) < want:
            if time.perf_counter() > deadline:
                have = len(self.client.ids)
                raise StartFailed(f"{have} engine{'s' if have != 1 else ''} registered with the controller of "
                                  f"{self.describe()}, {want} wanted: start engines there (ipengine, ipcluster)")
            time.sleep(0.05)
        eids = sorted(self.client.ids)
        self.place(*self.located(eids[:n] if n else eids, deadline))
        return self.engine_ids

    def _gone_why(self, rank):
        if self.client is not None and rank < len(self.engine_ids) and self.engine_ids[rank] not in self.client.ids:
            return "its engine is gone: the controller no longer hears it (the engine died, or its host)"
        return None

    def replace(self, ranks, deadline, say):
        hosts = ", ".join(sorted({self.hosts.get(r, "?") for r in ranks}))
        raise BadRequest(f"ranks {', '.join(map(str, ranks))} ran on engines started elsewhere ({hosts}): start new "
                         "engines there (ipengine), then %ddp_stop and %ddp_start --connect again; or %ddp_stop and "
                         "%ddp_start --connect to group the engines that are left")

    def renew(self, deadline, say):
        """The same engines, emptied: they are not ours to restart."""
        self.client[list(self.engine_ids)].execute("%reset -f", block=False).get(max(1.0, deadline - time.perf_counter()))
        return True

    def pids(self):
        return []  # its processes are not this notebook's: nothing here may end them

    def stop(self, shutdown=False):
        """Leave the group and the engines running (they are not ours), or with shutdown=True stop
        their cluster."""
        from ..rank import call
        from ..shared.config import tunables

        outcome = "left"
        if self.client is not None:
            live = [e for e in self.engine_ids if e in self.client.ids]
            try:
                self.client[live].apply_async(call, "leave").get(timeout=tunables().control_timeout)
            except Exception:  # noqa: BLE001 - a rank that cannot leave still has its engine; nothing to end
                log.info("some engines did not leave the group cleanly", exc_info=True)
            try:
                if shutdown and self.cluster is not None:
                    self.cluster.stop_cluster_sync()
                elif shutdown:
                    self.client.shutdown(targets="all", hub=True, block=False)
                outcome = "shut down" if shutdown else "left"
            finally:
                self.client.close(linger=0)
                self.client = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        return outcome


class LaunchedPool(OwnedCluster, HostsPool):
    """Engines this notebook starts through an ipyparallel engine launcher ("mpi", "ssh", "slurm",
    ...) with `profile`'s settings, and their controller (here, on TCP; encrypt=True: CurveZMQ)."""

    def __init__(self, launcher, profile=None, ifname=None, encrypt=False, threads=0):
        super().__init__(ifname)
        self.launcher, self.profile, self.encrypt, self.threads = launcher, profile, encrypt, threads

    def start(self, n, deadline, say):
        self.open_workdir()
        return self.start_cluster(n, deadline, say)

    def engine_launcher(self):
        return self.launcher

    def controller_launcher(self):
        return "local"

    def controller_args(self):
        return ["--IPController.enable_curve=True"] if self.encrypt else []

    def environment(self):
        """What the engines are started with (the hosts keep their own temporary folders and caches);
        threads, when given, before torch is imported (0: each host's cores, set when they join)."""
        env = {"DDPLAB_PARENT_PID": str(os.getpid())}
        if self.threads:
            env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        return env

    def track(self, info):
        super().track(info)
        self.write_pids()  # (the launcher's own processes here: mpiexec, ...)
