"""Real Apache RocketMQ 5.x on loopback, from Maven Central jars: a namesrv + single-master
broker (`start_real`), or a controller-mode group (`RealControllerGroup`: 3 name servers with
embedded DLedger controllers and one group of 3 brokers with allAckInSyncStateSet).

The real RocketMQ pair: `rmq-ha bench produce` uses it as its baseline and
tests/interop/real_rocketmq.py (the interop tests) is a thin wrapper around it. The JVMs are
processes of the one launcher (`rmq_jepsen.launch.java_proc`): config file, log, ready once the
log says so, stopped by pid with their process groups.

It needs a source checkout of rmq_ha: the jars come from tests/interop/real/pom.xml
(`mvn dependency:copy-dependencies`, cached under tests/interop/.build/real-rocketmq/lib), and
the builds and cluster type are those of the interop harness (tests/interop/harness.py, imported
from the checkout by `interop_harness()`). Both JVMs run with small heaps, a sandboxed user.home
(logs) and a store in the given work dir, bound to 127.0.0.1 on ports picked at start-up.

Standalone use:

    python -m rmq_jepsen.bench.realrmq [--workdir DIR] [--controller] [--broker-heap-mb N ...]
    (or python tests/interop/real_rocketmq.py)

prints `namesrv=HOST:PORT broker=HOST:PORT` (with --controller: the name servers, controllers,
master and brokers of the controller-mode group) and runs until SIGINT/SIGTERM, then stops the
JVMs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

from rmq_ha.controller.client import ControllerClient
from rmq_ha.controller.messages import GetReplicaInfoRequest
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import KVTable
from rmq_jepsen import checkout
from rmq_jepsen.bench.cluster import FAST_ACTING
from rmq_jepsen.db import JVM_READY_S as JVM_READY_S  # re-exported: bench.controller uses it
from rmq_jepsen.db import JvmSizes
from rmq_jepsen.launch import (
    LOOPBACK,
    Proc,
    ProcessExited,
    free_port,
    free_ports,
    java_proc,
    kill_all,
    logs,
    wait_until,
    write_properties,
)

BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"


def add_jvm_flags(p: argparse.ArgumentParser) -> None:
    """--namesrv-heap-mb, --broker-heap-mb, --broker-direct-mb, --jvm-gc-threads (`jvm_sizes`)."""
    d = JvmSizes()
    g = p.add_argument_group("real RocketMQ JVMs")
    g.add_argument("--namesrv-heap-mb", type=int, default=d.namesrv_heap_mb)
    g.add_argument("--broker-heap-mb", type=int, default=d.broker_heap_mb)
    g.add_argument("--broker-direct-mb", type=int, default=d.broker_direct_mb)
    g.add_argument("--jvm-gc-threads", type=int, default=d.gc_threads)
    g.add_argument(
        "--rocketmq-version",
        default=None,
        help="a released RocketMQ 5.x to run (default: the one tests/interop/real/pom.xml pins)",
    )


def rocketmq_version(args: argparse.Namespace) -> str | None:
    """--rocketmq-version (None: the pinned release)."""
    v: str | None = getattr(args, "rocketmq_version", None)
    return v


def jvm_sizes(args: argparse.Namespace) -> JvmSizes:
    return JvmSizes(
        args.namesrv_heap_mb, args.broker_heap_mb, args.broker_direct_mb, args.jvm_gc_threads
    )


_NS_BOOT = re.compile(r"The Name Server boot success\. serializeType=\w+, address ([\w.\-]+:\d+)")
_BROKER_BOOT = re.compile(r"The broker\[[^,]+, ([\w.\-]+:\d+)\] boot success")


class NeedsCheckout(RuntimeError):
    """The source checkout or a build tool (java, mvn) this needs is missing."""


def source_checkout() -> Path:
    """The rmq_ha source checkout with the interop harness (see `rmq_jepsen.checkout.find`,
    also tried: the current directory)."""
    root = checkout.find(require="tests/interop/harness.py", cwd=True)
    if root is None:
        raise NeedsCheckout(
            "this needs a source checkout of rmq_ha (tests/interop/: the Java harness and the "
            "real RocketMQ pom); run it from the checkout, install rmq_jepsen editable from it "
            f"(`make dev`), or set {checkout.ENV}=/path/to/checkout"
        )
    return root


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise NeedsCheckout(
            f"{' and '.join(missing)} not found on PATH: the real RocketMQ client/broker side "
            "needs a JDK (java 17+) and Maven (mvn) to build and run"
        )


def interop_harness() -> ModuleType:
    """tests/interop/harness.py of the checkout, imported as the module `harness` (the same module
    object the interop tests use, so build caches and types are shared)."""
    if "harness" in sys.modules and hasattr(sys.modules["harness"], "real_rocketmq_lib"):
        return sys.modules["harness"]
    interop = str(source_checkout() / "tests" / "interop")
    if interop not in sys.path:
        sys.path.insert(0, interop)
    return importlib.import_module("harness")


def start_real(
    workdir: Path,
    timeout: float = 90.0,
    extra_broker_conf: Mapping[str, Any] | None = None,
    sizes: JvmSizes | None = None,
    version: str | None = None,
) -> Any:
    """Starts namesrv then broker; returns a harness.Cluster once the namesrv lists the broker's
    master. On any failure, whatever was started is stopped (by pid) before the error propagates."""
    sizes = sizes or JvmSizes()
    h = interop_harness()
    require_tools("java", "mvn")
    lib = h.real_rocketmq_lib(version) if version else h.real_rocketmq_lib()
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    procs: list[Proc] = []
    cluster = h.Cluster("real", "", "", BROKER_NAME, workdir, procs)
    try:
        ns = java_proc(
            "real namesrv",
            "org.apache.rocketmq.namesrv.NamesrvStartup",
            classpath=f"{lib}/*",
            conf=write_properties(
                workdir / "namesrv.conf", {"listenPort": 0, "bindAddress": LOOPBACK}
            ),
            log=workdir / "namesrv.out",
            ready=_NS_BOOT,
            jvm=sizes.namesrv(),
            home=home,
            cwd=workdir,
        )
        procs.append(ns.start())
        namesrv = ns.wait_ready_sync(timeout)

        # The broker listens on P, its fast (VIP) server on P-2 and its HA server on P+1.
        port = free_port((-2, 0, 1))
        store = workdir / "store"
        values: dict[str, Any] = {
            "brokerClusterName": CLUSTER_NAME,
            "brokerName": BROKER_NAME,
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": namesrv,
            "brokerIP1": LOOPBACK,
            "brokerIP2": LOOPBACK,
            "bindAddress": LOOPBACK,
            "listenPort": port,
            "haListenPort": port + 1,
            "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            "mappedFileSizeCommitLog": 67108864,
            "diskMaxUsedSpaceRatio": 95,
            **(extra_broker_conf or {}),
        }
        br = java_proc(
            "real broker",
            "org.apache.rocketmq.broker.BrokerStartup",
            classpath=f"{lib}/*",
            conf=write_properties(workdir / "broker.conf", values),
            log=workdir / "broker.out",
            ready=_BROKER_BOOT,
            jvm=sizes.broker(),
            home=home,
            cwd=workdir,
        )
        procs.append(br.start())
        broker = br.wait_ready_sync(timeout)
        wait_until(
            "real broker registered with the namesrv",
            lambda: h.cluster_brokers(namesrv).get(BROKER_NAME, {}).get("0") == broker,
            timeout,
            procs,
        )
        cluster.namesrv, cluster.broker = namesrv, broker
        return cluster
    except BaseException:
        cluster.stop()
        raise


# ---- controller mode ----------------------------------------------------------------------------

CONTROLLER_GROUP = "rmq-controller"

#: Faster scans than RocketMQ's defaults, as `rmq-ha bench ha` uses for rmq_ha (ms). The DLedger
#: election timings of an embedded controller are not configurable (ControllerConfig has no key
#: for them): its own defaults apply.
FAST_REAL_CONTROLLER: dict[str, Any] = {
    "scanNotActiveBrokerInterval": 200,
    "scanInactiveMasterInterval": 300,
}

#: The broker timings of rmq_ha's FAST_BROKER (bench/cluster.py), under the same RocketMQ keys.
FAST_REAL_BROKER: dict[str, Any] = {
    "brokerHeartbeatInterval": 200,
    "controllerHeartBeatTimeoutMills": 1500,
    "syncBrokerMetadataPeriod": 500,
    "checkSyncStateSetPeriod": 500,
    "syncControllerMetadataPeriod": 2000,
    "syncBrokerMemberGroupPeriod": 500,
    "haMaxTimeSlaveNotCatchup": 2000,
    "haSendHeartbeatInterval": 500,
    "haHousekeepingInterval": 3000,
    "slaveTimeout": 3000,
    "registerNameServerPeriod": 10000,
    "flushIntervalCommitLog": 50,
}


def controller_namesrv_conf(
    i: int,
    namesrv_port: int,
    controller_ports: list[int],
    store: Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    address: str = LOOPBACK,
    peer_hosts: list[str] | None = None,
    store_path: Path | str | None = None,
) -> dict[str, Any]:
    """namesrv-<i>.conf: a name server on `address:namesrv_port` with an embedded DLedger
    controller n<i> serving brokers on controller_ports[i] (the DLedger peer address is also the
    address brokers send controller requests to). Peer j listens on peer_hosts[j] (default:
    all on `address`); its store is `store_path` (default: <store>/controller-n<i>)."""
    hosts = peer_hosts or [address] * len(controller_ports)
    if len(hosts) != len(controller_ports):
        raise ValueError(f"{len(hosts)} peer hosts for {len(controller_ports)} controller ports")
    peers = ";".join(
        f"n{j}-{h}:{p}" for j, (h, p) in enumerate(zip(hosts, controller_ports, strict=True))
    )
    return {
        "listenPort": namesrv_port,
        "bindAddress": address,
        "enableControllerInNamesrv": "true",
        "controllerType": "DLedger",
        "controllerDLegerGroup": CONTROLLER_GROUP,
        "controllerDLegerPeers": peers,
        "controllerDLegerSelfId": f"n{i}",
        "controllerStorePath": store_path if store_path is not None else store / f"controller-n{i}",
        "mappedFileSize": 64 * 1024 * 1024,
        "enableElectUncleanMaster": "false",
        "notifyBrokerRoleChanged": "true",
        **FAST_REAL_CONTROLLER,
        **(overrides or {}),
    }


def _broker_basics(namesrv_addrs: list[str], address: str, port: int, root: Path) -> dict[str, Any]:
    """What every broker the bench launches shares, whatever its topology: addresses, ports
    (HA on port+1), store paths, async flush, auto-created topics and groups, 64 MiB segments,
    and a disk ratio that a shared build machine does not trip."""
    return {
        "namesrvAddr": ";".join(namesrv_addrs),
        "brokerIP1": address,
        "brokerIP2": address,
        "bindAddress": address,
        "listenPort": port,
        "haListenPort": port + 1,
        "storePathRootDir": root,
        "storePathCommitLog": root / "commitlog",
        "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "diskMaxUsedSpaceRatio": 95,
    }


def controller_broker_conf(
    i: int,
    port: int,
    namesrv_addrs: list[str],
    controller_addrs: list[str],
    store: Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    address: str = LOOPBACK,
    root: Path | None = None,
) -> dict[str, Any]:
    """broker-<i>.conf: replica i of the group, controller mode (its id and role come from the
    controller), every write acknowledged by the whole SyncStateSet. It listens on
    `address:port`, its fast server on port-2 and its HA server on port+1; its store is `root`
    (default: <store>/broker-<i>)."""
    root = root if root is not None else store / f"broker-{i}"
    return {
        "brokerClusterName": CLUSTER_NAME,
        "brokerName": BROKER_NAME,
        "brokerId": -1,
        "brokerRole": "SLAVE",
        "enableControllerMode": "true",
        "controllerAddr": ";".join(controller_addrs),
        "fetchControllerAddrByDnsLookup": "false",
        "allAckInSyncStateSet": "true",
        **_broker_basics(namesrv_addrs, address, port, root),
        **FAST_REAL_BROKER,
        **(overrides or {}),
    }


#: The config classes each role reads its properties file into (RocketMQ's
#: MixAll.properties2Object: key k is set through the setter set<K>).
CONFIG_CLASSES = {
    "namesrv": (
        "org.apache.rocketmq.common.namesrv.NamesrvConfig",
        "org.apache.rocketmq.remoting.netty.NettyServerConfig",
        "org.apache.rocketmq.remoting.netty.NettyClientConfig",
        "org.apache.rocketmq.common.ControllerConfig",
    ),
    "broker": (
        "org.apache.rocketmq.common.BrokerConfig",
        "org.apache.rocketmq.store.config.MessageStoreConfig",
        "org.apache.rocketmq.remoting.netty.NettyServerConfig",
        "org.apache.rocketmq.remoting.netty.NettyClientConfig",
    ),
}

_SETTER = re.compile(r"\bvoid set(\w+)\(")
_EXTENDS = re.compile(r"\bclass [\w.$]+ extends ([\w.$]+)")


def config_keys(lib: Path, role: str) -> set[str]:
    """The property names RocketMQ's config classes of `role` (and their superclasses, e.g.
    BrokerConfig's BrokerIdentity) accept, from their setters in the jars under `lib` (javap).
    RocketMQ ignores an unknown key silently, so a misspelt one would leave a default in force
    without a word."""
    keys: set[str] = set()
    todo, seen = list(CONFIG_CLASSES[role]), set()
    while todo:
        batch = [c for c in todo if c not in seen]
        todo = []
        if not batch:
            break
        seen.update(batch)
        out = subprocess.run(
            ["javap", "-cp", f"{lib}/*", *batch],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if out.returncode != 0:
            raise NeedsCheckout(
                f"javap could not read RocketMQ's config classes: {out.stderr[-300:]}"
            )
        keys |= {m[0].lower() + m[1:] for m in _SETTER.findall(out.stdout)}
        todo = [c for c in _EXTENDS.findall(out.stdout) if c.startswith("org.apache.rocketmq.")]
    return keys


def check_keys(values: Mapping[str, Any], known: set[str], what: str) -> None:
    """ValueError naming every key RocketMQ does not know (a typo would be ignored by it)."""
    bad = sorted(k for k in values if k not in known)
    if bad:
        raise ValueError(
            f"{what}: {', '.join(bad)} not a RocketMQ config key (no setter in its config "
            "classes; RocketMQ would ignore it silently)"
        )


class _RealJvms:
    """What the real-RocketMQ groups share: their config files checked against the jars, one
    JVM per name server and broker from the one launcher (`java_proc`), a broker restarted on
    a new port block if it lost its own, stop and logs. A group sets these attributes."""

    tmp: Path
    sizes: JvmSizes
    version: str | None
    home: Path
    namesrvs: list[Proc]
    brokers: list[Proc]
    ns_confs: list[dict[str, Any]]
    broker_confs: list[dict[str, Any]]
    broker_ports: list[int]
    #: File and process names: <name>.conf, <name>.out, "real <name>".
    ns_names: list[str]
    broker_names: list[str]

    def prepare(self) -> None:
        """Builds the jars (once), checks every config key, creates the processes."""
        h = interop_harness()
        require_tools("java", "mvn", "javap")
        lib = h.real_rocketmq_lib(self.version) if self.version else h.real_rocketmq_lib()
        check_keys(
            {k: v for c in self.ns_confs for k, v in c.items()},
            config_keys(lib, "namesrv"),
            "name server config",
        )
        check_keys(
            {k: v for c in self.broker_confs for k, v in c.items()},
            config_keys(lib, "broker"),
            "broker config",
        )
        self.home.mkdir(parents=True, exist_ok=True)
        for name, conf in zip(self.ns_names, self.ns_confs, strict=True):
            self.namesrvs.append(
                java_proc(
                    f"real {name}",
                    "org.apache.rocketmq.namesrv.NamesrvStartup",
                    classpath=f"{lib}/*",
                    conf=write_properties(self.tmp / f"{name}.conf", conf),
                    log=self.tmp / f"{name}.out",
                    ready=_NS_BOOT,
                    jvm=self.sizes.namesrv(),
                    home=self.home,
                    cwd=self.tmp,
                )
            )
        for name, conf in zip(self.broker_names, self.broker_confs, strict=True):
            self.brokers.append(
                java_proc(
                    f"real {name}",
                    "org.apache.rocketmq.broker.BrokerStartup",
                    classpath=f"{lib}/*",
                    conf=write_properties(self.tmp / f"{name}.conf", conf),
                    log=self.tmp / f"{name}.out",
                    ready=_BROKER_BOOT,
                    jvm=self.sizes.broker(),
                    home=self.home,
                    cwd=self.tmp,
                )
            )

    async def _broker_ready(self, i: int, timeout_s: float, tries: int = 3) -> None:
        """Waits for broker i; if it exited because a port of its block was taken meanwhile
        (ports are picked free before the JVMs start, and the controllers' own connections
        take ephemeral ports), it gets a new block and starts again, up to `tries` times."""
        p = self.brokers[i]
        for attempt in range(tries):
            try:
                await p.wait_ready(timeout_s)
                return
            except ProcessExited:
                if "Address already in use" not in p.tail(200) or attempt == tries - 1:
                    raise
            port = free_port((-2, 0, 1))
            self.broker_ports[i] = port
            self.broker_confs[i] |= {"listenPort": port, "haListenPort": port + 1}
            write_properties(self.tmp / f"{self.broker_names[i]}.conf", self.broker_confs[i])
            p.start()

    def stop(self) -> None:
        """SIGKILL, brokers first (each by its pid, with its process group)."""
        kill_all([*self.brokers, *self.namesrvs])

    def logs(self) -> str:
        return logs([*self.brokers, *self.namesrvs])


@dataclass
class RealControllerGroup(_RealJvms):
    """Real RocketMQ in controller mode on loopback: `namesrvs` name servers with embedded
    DLedger controllers and one broker group of `replicas` brokers (allAckInSyncStateSet).
    The same shape as `bench.cluster.HaCluster` (ns_addrs, brokers, start/stop, master,
    wait_sync_state_set, sync_state_size), so a benchmark drives either. The master and the
    SyncStateSet are what the controller leader says (CONTROLLER_GET_REPLICA_INFO)."""

    tmp: Path
    replicas: int = 3
    namesrv_count: int = 3
    broker: dict[str, Any] = field(default_factory=dict)
    namesrv: dict[str, Any] = field(default_factory=dict)
    sizes: JvmSizes = field(default_factory=JvmSizes)
    #: A released RocketMQ 5.x (None: the pinned one); jars fetched by the harness.
    version: str | None = None
    broker_name: str = BROKER_NAME
    namesrvs: list[Proc] = field(default_factory=list)
    brokers: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        n, r = self.namesrv_count, self.replicas
        # One call, so no port repeats; every block is free at P-2, P and P+1 (the broker's).
        ports = free_ports(2 * n + r, span=(-2, 0, 1))
        ns_ports, ctl_ports, self.broker_ports = ports[:n], ports[n : 2 * n], ports[2 * n :]
        self.ns_addrs = [f"{LOOPBACK}:{p}" for p in ns_ports]
        self.controller_addrs = [f"{LOOPBACK}:{p}" for p in ctl_ports]
        self.home = self.tmp / "home"
        self.ns_names = [f"namesrv-{i}" for i in range(n)]
        self.broker_names = [f"broker-{i}" for i in range(r)]
        self.ns_confs = [
            controller_namesrv_conf(i, p, ctl_ports, self.tmp, self.namesrv)
            for i, p in enumerate(ns_ports)
        ]
        self.broker_confs = [
            controller_broker_conf(
                i, p, self.ns_addrs, self.controller_addrs, self.tmp, self.broker
            )
            for i, p in enumerate(self.broker_ports)
        ]

    def broker_addr(self, i: int) -> str:
        return f"{LOOPBACK}:{self.broker_ports[i]}"

    async def start(self, timeout_s: float = 180.0) -> None:
        """Name servers (controllers) first, a controller leader, then the brokers; returns
        once a master is elected and its SyncStateSet holds every replica. On failure,
        everything started is stopped before the error propagates."""
        try:
            if not self.namesrvs:  # the first Maven fetch may take minutes: not in the timeout
                await trio.to_thread.run_sync(self.prepare)
            with trio.fail_after(timeout_s):
                for p in self.namesrvs:
                    p.start()
                for p in self.namesrvs:
                    await p.wait_ready(timeout_s)
                await self.controller_leader(timeout_s)
                for p in self.brokers:
                    p.start()
                for i in range(len(self.brokers)):
                    await self._broker_ready(i, timeout_s)
                m = await self.master(timeout_s)
                await self.wait_sync_state_set(m, self.replicas, timeout_s)
        except BaseException:
            self.stop()
            raise

    # ---- asking the cluster -------------------------------------------------------------------

    async def controller_leader(self, timeout_s: float = 60.0) -> str:
        """The address of the controller that says it leads (CONTROLLER_GET_METADATA_INFO)."""
        with trio.move_on_after(timeout_s):
            async with RemotingClient() as rc:
                cc = ControllerClient(rc, self.controller_addrs, timeout_s=2.0)
                while True:
                    try:
                        return await cc.find_leader()
                    except RemotingError:
                        await trio.sleep(0.2)
        raise AssertionError(f"no controller leader within {timeout_s} s\n{self.logs()}")

    async def replica_info(self) -> Any | None:
        """The controller leader's GetReplicaInfoResponse for the group (None: no answer)."""
        async with RemotingClient() as rc:
            cc = ControllerClient(rc, self.controller_addrs, timeout_s=2.0)
            try:
                resp = await cc.request(GetReplicaInfoRequest(self.broker_name), 3.0)
            except RemotingError:
                return None
        return resp if resp.ok else None

    async def _master_index(self) -> tuple[int | None, Any]:
        info = await self.replica_info()
        if info is None or not info.master_address:
            return None, info
        addrs = [self.broker_addr(i) for i in range(self.replicas)]
        return (addrs.index(info.master_address) if info.master_address in addrs else None), info

    async def master(self, timeout_s: float = 20, exclude: int | None = None) -> int:
        """The index of the broker the controller names master (not `exclude`, running), once a
        running name server routes it as the group's id 0 (clients can send to it)."""
        with trio.move_on_after(timeout_s):
            while True:
                i, _ = await self._master_index()
                if (
                    i is not None
                    and i != exclude
                    and self.brokers[i].alive
                    and await trio.to_thread.run_sync(self._routed, i)
                ):
                    return i
                await trio.sleep(0.1)
        raise AssertionError(f"no master within {timeout_s} s\n{self.logs()}")

    def _routed(self, i: int) -> bool:
        h = interop_harness()
        return any(
            h.cluster_brokers(addr).get(self.broker_name, {}).get("0") == self.broker_addr(i)
            for addr, p in zip(self.ns_addrs, self.namesrvs, strict=True)
            if p.alive
        )

    async def sync_state_size(self, i: int) -> int | None:
        """The size of the SyncStateSet while broker i is master (None: it is not, or no
        answer)."""
        j, info = await self._master_index()
        return len(info.sync_state_set) if j == i and info is not None else None

    async def wait_sync_state_set(self, i: int, size: int, timeout_s: float = 20) -> None:
        with trio.move_on_after(timeout_s):
            while await self.sync_state_size(i) != size:
                await trio.sleep(0.1)
            return
        raise AssertionError(f"SyncStateSet of broker {i} never reached {size}\n{self.logs()}")


# ---- classic groups with slave acting master ----------------------------------------------------

ACTING_CLUSTER = "ActingCluster"

#: The name server of rmq_ha's ActingCluster (bench/cluster.py), under RocketMQ's NamesrvConfig
#: keys: acting-master routes, min-broker-id notices, a 200 ms scan for silent brokers.
ACTING_REAL_NAMESRV: dict[str, Any] = {
    "supportActingMaster": "true",
    "notifyMinBrokerIdChanged": "true",
    "scanNotActiveBrokerInterval": 200,
}


def acting_namesrv_conf(
    port: int, overrides: Mapping[str, Any] | None = None, *, address: str = LOOPBACK
) -> dict[str, Any]:
    """namesrv-<i>.conf of a classic (no controller) name server that routes an acting
    master when a group's id 0 is gone."""
    return {"listenPort": port, "bindAddress": address, **ACTING_REAL_NAMESRV, **(overrides or {})}


def acting_broker_conf(
    group: str,
    broker_id: int,
    slaves: int,
    port: int,
    namesrv_addrs: list[str],
    store: Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    address: str = LOOPBACK,
    cluster: str = ACTING_CLUSTER,
) -> dict[str, Any]:
    """<group>-<id>.conf: a classic broker (id 0 SYNC_MASTER, ASYNC_MASTER when the group has
    no slave, as `bench.cluster.ActingCluster`; others SLAVE) of a group of
    1 + `slaves` with slave acting master (RIP-32) and remote escape, the timings of rmq_ha's
    FAST_ACTING (the same keys: RocketMQ spells them so). Listens on `address:port`, its fast
    server on port-2 and its HA server on port+1; its store is <store>/<group>-<id>."""
    root = store / f"{group}-{broker_id}"
    return {
        "brokerClusterName": cluster,
        "brokerName": group,
        "brokerId": broker_id,
        "brokerRole": "SLAVE" if broker_id else ("SYNC_MASTER" if slaves else "ASYNC_MASTER"),
        "totalReplicas": slaves + 1,
        **_broker_basics(namesrv_addrs, address, port, root),
        # rmq_ha's slaves serve pulls (the acting slave must: consumers read on from it);
        # RocketMQ's refuse them unless slaveReadEnable (PullMessageProcessor.rejectRequest
        # answers SYSTEM_BUSY "[REJECTREQUEST]system busy" to every pull otherwise).
        "slaveReadEnable": "true",
        **FAST_ACTING,
        **(overrides or {}),
    }


@dataclass
class RealActingGroup(_RealJvms):
    """Real RocketMQ classic groups with slave acting master on loopback: `namesrv_count`
    name servers (supportActingMaster, notifyMinBrokerIdChanged) and per group a SYNC_MASTER
    (id 0; an ASYNC_MASTER without slaves) plus `groups[name]` SLAVEs. The same shape as
    `bench.cluster.ActingCluster` (ns_addrs, members, addr, proc, start/stop,
    serving/acting/replicating), so
    `rmq-ha bench acting-master` drives either. Its state is asked of RocketMQ itself: the name
    server's cluster info, GET_BROKER_RUNTIME_INFO's brokerActive (the special services: the
    delay and transaction-check services, running on the master and on an acting slave) and
    the master's GET_BROKER_HA_STATUS."""

    tmp: Path
    groups: dict[str, int] = field(default_factory=lambda: {"broker-a": 1, "broker-b": 0})
    broker: dict[str, Any] = field(default_factory=dict)
    namesrv: dict[str, Any] = field(default_factory=dict)
    namesrv_count: int = 1
    sizes: JvmSizes = field(default_factory=JvmSizes)
    version: str | None = None
    cluster_name: str = ACTING_CLUSTER
    namesrvs: list[Proc] = field(default_factory=list)
    brokers: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.members = [(g, i) for g, n in self.groups.items() for i in range(n + 1)]
        n = self.namesrv_count
        ports = free_ports(n + len(self.members), span=(-2, 0, 1))
        ns_ports, self.broker_ports = ports[:n], ports[n:]
        self.ns_addrs = [f"{LOOPBACK}:{p}" for p in ns_ports]
        self.home = self.tmp / "home"
        self.ns_names = [f"namesrv-{i}" for i in range(n)]
        self.broker_names = [f"{g}-{i}" for g, i in self.members]
        self.ns_confs = [acting_namesrv_conf(p, self.namesrv) for p in ns_ports]
        self.broker_confs = [
            acting_broker_conf(
                g,
                i,
                self.groups[g],
                p,
                self.ns_addrs,
                self.tmp,
                self.broker,
                cluster=self.cluster_name,
            )
            for (g, i), p in zip(self.members, self.broker_ports, strict=True)
        ]

    def index(self, group: str, broker_id: int) -> int:
        return self.members.index((group, broker_id))

    def addr(self, group: str, broker_id: int) -> str:
        return f"{LOOPBACK}:{self.broker_ports[self.index(group, broker_id)]}"

    def proc(self, group: str, broker_id: int) -> Proc:
        return self.brokers[self.index(group, broker_id)]

    async def start(self, timeout_s: float = 180.0) -> None:
        """Name servers, then the brokers; returns once each broker's JVM says it booted.
        On failure, everything started is stopped before the error propagates."""
        try:
            if not self.namesrvs:  # the first Maven fetch may take minutes: not in the timeout
                await trio.to_thread.run_sync(self.prepare)
            with trio.fail_after(timeout_s):
                for p in self.namesrvs:
                    p.start()
                for p in self.namesrvs:
                    await p.wait_ready(timeout_s)
                for p in self.brokers:
                    p.start()
                for i in range(len(self.brokers)):
                    await self._broker_ready(i, timeout_s)
        except BaseException:
            self.stop()
            raise

    # ---- asking the cluster -------------------------------------------------------------------

    async def _call(self, addr: str, code: int) -> bytes | None:
        async with RemotingClient() as c:
            try:
                r = await c.invoke(addr, RemotingCommand.request(code), 2.0)
            except (RemotingError, OSError):
                return None
        return r.body if r.code == 0 and r.body else None

    async def runtime_info(self, group: str, broker_id: int) -> dict[str, str] | None:
        """GET_BROKER_RUNTIME_INFO of one broker (None: no answer)."""
        body = await self._call(self.addr(group, broker_id), RC.GET_BROKER_RUNTIME_INFO)
        return None if body is None else KVTable.from_json(body).table

    async def listed(self, group: str, broker_id: int) -> bool:
        """A running name server lists the broker under its own id (a broker in RocketMQ's
        pre-online is isolated: it neither registers nor heartbeats until that is done)."""
        h = interop_harness()
        want = self.addr(group, broker_id)

        def ask() -> bool:
            return any(
                h.cluster_brokers(a).get(group, {}).get(str(broker_id)) == want
                for a, p in zip(self.ns_addrs, self.namesrvs, strict=True)
                if p.alive
            )

        return await trio.to_thread.run_sync(ask)

    async def serving(self, group: str, broker_id: int) -> bool:
        """Registered (pre-online done); a master also runs its special services."""
        if not await self.listed(group, broker_id):
            return False
        if broker_id != 0:
            return True
        return await self.acting(group, broker_id) is True

    async def acting(self, group: str, broker_id: int) -> bool | None:
        """The broker runs the special services (brokerActive): for a slave, it acts as
        master. None: no answer."""
        info = await self.runtime_info(group, broker_id)
        return None if info is None else info.get("brokerActive") == "true"

    async def replicating(self, group: str, broker_id: int) -> bool:
        """The group's master has an HA connection from a slave in sync (GET_BROKER_HA_STATUS:
        one slave per group here, so the connection is this one's)."""
        body = await self._call(self.addr(group, 0), RC.GET_BROKER_HA_STATUS)
        if body is None:
            return False
        try:
            info = json.loads(body)
        except ValueError:
            return False
        return any(c.get("inSync") for c in info.get("haConnectionInfo") or [])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument(
        "--controller",
        action="store_true",
        help="controller mode: 3 name servers with embedded controllers, 3 brokers",
    )
    add_jvm_flags(ap)
    args = ap.parse_args(argv)
    # Stop cleanly on SIGINT and SIGTERM alike (a background shell job starts with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-rocketmq-"))
    t0 = time.monotonic()
    if args.controller:
        return _main_controller(workdir, jvm_sizes(args), rocketmq_version(args), t0)
    cluster = start_real(workdir, sizes=jvm_sizes(args), version=rocketmq_version(args))
    try:
        print(
            f"namesrv={cluster.namesrv} broker={cluster.broker} workdir={workdir} "
            f"started_in={time.monotonic() - t0:.1f}s pids={[p.pid for p in cluster.procs]}",
            flush=True,
        )
        while all(p.alive for p in cluster.procs):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


def _main_controller(workdir: Path, sizes: JvmSizes, version: str | None, t0: float) -> int:
    group = RealControllerGroup(workdir, sizes=sizes, version=version)

    async def up() -> int:
        await group.start()
        return await group.master()

    try:
        m = trio.run(up)
        print(
            f"namesrv={';'.join(group.ns_addrs)} controller={';'.join(group.controller_addrs)} "
            f"master={group.broker_addr(m)} "
            f"brokers={[group.broker_addr(i) for i in range(group.replicas)]} "
            f"workdir={workdir} started_in={time.monotonic() - t0:.1f}s",
            flush=True,
        )
        while all(p.alive for p in [*group.namesrvs, *group.brokers]):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        group.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())


def impls_of(impl: str, bench: str) -> list[str]:
    """The implementations `--impl rmq_ha|rocketmq|both` asks for; with rocketmq, the checkout
    and the tools to launch it are checked first (NeedsCheckout names the bench and what is
    missing)."""
    impls = ["rmq_ha", "rocketmq"] if impl == "both" else [impl]
    if "rocketmq" in impls:
        try:
            source_checkout()
            require_tools("java", "mvn", "javap")
        except NeedsCheckout as e:
            raise NeedsCheckout(f"bench {bench} --impl {impl}: {e}") from None
    return impls
