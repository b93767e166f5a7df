"""The DB lifecycle: topologies, role configs, install, start / stop / kill -9 / pause / resume
by pid, readiness, and collecting logs and data directories; plus asking the cluster who the
master of each broker group and the controller leader are (targets are resolved, not guessed).

Every role lives in `<host.workdir>/<role>/` on its node: `role.conf` (RocketMQ key names),
`role.log`, `pid`, `ready` (written by `--ready-file`), `store/`, `controller/`.
"""

from __future__ import annotations

import functools
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from rmq_jepsen import checkout, existing
from rmq_jepsen.control import Control, Host, Remote
from rmq_jepsen.existing import Deployment, ExistingRole
from rmq_jepsen.launch import java_argv
from rmq_jepsen.secure import Security
from rmq_jepsen.state import StateDir

log = logging.getLogger("rmq_jepsen.db")

CLUSTER = "RmqJepsen"
NAMESRV_PORT = 9876
BROKER_PORT = 10911
HA_PORT = 10912
#: Prometheus endpoints (issue 20): name servers at RocketMQ's default 5557, brokers at 5558
#: (+ SLOT_STRIDE per further broker on a node); the bench scrapes them during a run.
NS_METRICS_PORT = 5557
BROKER_METRICS_PORT = 5558
#: Second and later brokers on one node move up by this much.
SLOT_STRIDE = 20
#: --db rocketmq: a real RocketMQ name server's embedded controller listens on its own (DLedger
#: peer) port, where brokers and the bench send controller requests; next to the name server's.
ROCKETMQ_CONTROLLER_PORT = 9878

#: The databases a campaign can deploy (--db).
DBS = ("rmq_ha", "rocketmq")
#: The topologies --db rocketmq can deploy.
ROCKETMQ_TOPOLOGIES = ("controller",)


@dataclass(frozen=True)
class Topology:
    name: str
    mode: str  # "controller" | "classic" | "single"
    nameservers: int = 3
    groups: int = 1
    replicas: int = 3
    all_ack: bool = True
    min_in_sync: int = 1
    master_role: str = "SYNC_MASTER"
    #: Slave acting master (RIP-32): name servers present a masterless group's slave as a
    #: read-only id 0, and that slave runs the special services through an escape.
    acting: bool = False
    doc: str = ""


TOPOLOGIES: dict[str, Topology] = {
    t.name: t
    for t in (
        Topology(
            "controller",
            "controller",
            doc="3 name servers with embedded controllers; "
            "one broker group of 3 replicas, allAckInSyncStateSet=true",
        ),
        Topology(
            "controller-2r",
            "controller",
            replicas=2,
            min_in_sync=2,
            doc="a group of 2 replicas, allAckInSyncStateSet, minInSyncReplicas=2",
        ),
        Topology(
            "controller-mis2",
            "controller",
            min_in_sync=2,
            doc="3 replicas, allAckInSyncStateSet, minInSyncReplicas=2: no single-copy window "
            "(a new master refuses writes until a slave has rejoined its SyncStateSet)",
        ),
        Topology(
            "controller-noack",
            "controller",
            all_ack=False,
            doc="3 replicas, allAckInSyncStateSet=false (acks from the master alone)",
        ),
        Topology("controller-2g", "controller", groups=2, doc="two groups of 3 replicas"),
        Topology("classic", "classic", doc="3 name servers; SYNC_MASTER + 2 SLAVEs (fixed ids)"),
        Topology(
            "classic-async",
            "classic",
            master_role="ASYNC_MASTER",
            doc="3 name servers; ASYNC_MASTER + 2 SLAVEs",
        ),
        Topology(
            "acting-master",
            "classic",
            nameservers=2,
            groups=2,
            replicas=2,
            acting=True,
            doc="2 name servers (supportActingMaster); groups broker-a and broker-b, each a "
            "SYNC_MASTER + 1 SLAVE with enableSlaveActingMaster and enableRemoteEscape; every "
            "broker on its own node when there are enough",
        ),
        Topology(
            "single",
            "single",
            nameservers=1,
            groups=1,
            replicas=1,
            doc="1 name server, 1 single-replica broker",
        ),
        Topology(
            "independent",
            "single",
            nameservers=1,
            groups=3,
            replicas=1,
            doc="1 name server, 3 single-replica broker groups (no replication)",
        ),
    )
}


#: A controller-mode broker's GET_REPLICA_INFO poll and SyncStateSet check (both databases).
CONTROLLER_SYNC_PERIOD_MS = 5_000


@dataclass(frozen=True)
class Timing:
    """Faster-than-default timeouts, so a 60 s campaign sees failovers finish."""

    raft_heartbeat_ms: int = 500
    raft_max_leak: int = 3
    min_vote_ms: int = 300
    max_vote_ms: int = 1000
    scan_ms: int = 1000
    broker_expired_ms: int = 10_000
    register_period_ms: int = 5_000
    controller_heartbeat_timeout_ms: int = 3_000
    ha_not_catchup_ms: int = 5_000
    commitlog_bytes: int = 64 << 20
    # special messages (every topology): short delay levels, fast transaction checks and
    # pop revives, so the delay / transaction / pop workloads settle within a short campaign
    delay_levels: str = "1s 2s 3s 4s 5s 10s 30s 1m"
    transaction_timeout_ms: int = 2_000
    transaction_check_ms: int = 2_000
    revive_ms: int = 500
    # slave acting master (acting-master topology): a name server drops a broker that sent no
    # heartbeat for this long, so the slave takes over within a few seconds
    broker_not_active_ms: int = 4_000
    broker_heartbeat_ms: int = 1_000
    member_group_sync_ms: int = 1_000


@dataclass
class Role:
    name: str
    kind: str  # "namesrv" | "broker"
    node: str
    port: int
    values: dict[str, Any]
    group: str | None = None
    replica: int = 0
    ha_port: int | None = None
    pid: int | None = None
    #: --db rocketmq name servers: the embedded controller's port (None: the name server's own).
    ctl_port: int | None = None

    def dir(self, host: Host) -> str:
        return f"{host.workdir}/{self.name}"

    def metrics_addr(self) -> str | None:
        """host:port of the role's Prometheus endpoint, when its config turns it on."""
        if str(self.values.get("metricsExporterType", "")).upper() != "PROM":
            return None
        return f"{self.values['metricsPromExporterHost']}:{self.values['metricsPromExporterPort']}"


#: --db rocketmq: each role's main class, and the line its log shows once it is up.
ROCKETMQ_MAIN = {
    "namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
    "broker": "org.apache.rocketmq.broker.BrokerStartup",
}
ROCKETMQ_READY = {
    "namesrv": r"The Name Server boot success[^\n]*",
    "broker": r"The broker\[[^]]*\] boot success",
}
#: How long a JVM may take to say it is up on a loaded 2-core machine (s).
JVM_READY_S = 180.0


@dataclass(frozen=True)
class JvmSizes:
    """Heap and direct-memory sizes (MiB) and GC threads of --db rocketmq's JVMs; the same class
    as the real-RocketMQ launcher's (bench.realrmq re-exports it)."""

    namesrv_heap_mb: int = 256
    broker_heap_mb: int = 512
    broker_direct_mb: int = 1024
    gc_threads: int = 2

    def __post_init__(self) -> None:
        for key in ("namesrv_heap_mb", "broker_heap_mb", "broker_direct_mb", "gc_threads"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, not {getattr(self, key)}")

    def _gc(self) -> list[str]:
        return [f"-XX:ParallelGCThreads={self.gc_threads}", "-XX:CICompilerCount=2"]

    def namesrv(self) -> list[str]:
        h = self.namesrv_heap_mb
        return [f"-Xms{min(h, 128)}m", f"-Xmx{h}m", "-XX:+UseSerialGC", "-XX:CICompilerCount=2"]

    def broker(self) -> list[str]:
        h = self.broker_heap_mb
        return [
            f"-Xms{h}m",
            f"-Xmx{h}m",
            f"-XX:MaxDirectMemorySize={self.broker_direct_mb}m",
            "-XX:+UseG1GC",
            *self._gc(),
        ]


@dataclass
class Install:
    """How nodes run `rmq-ha`: on local hosts (namespaces, loopback: this machine's filesystem)
    the bench's own environment (same code, same path: a checkout's .venv, or a virtualenv
    with the wheels installed); elsewhere the rmq-ha wheel (`wheel`, `--wheel PATH`; else
    built from the checkout the bench runs from) installed into /opt/rmq-jepsen/venv."""

    rmq_ha_bin: str = ""
    python: str = ""
    faketime_lib: str | None = None
    wheel: str | None = None


def plan_roles(topo: Topology, hosts: list[Host], timing: Timing) -> list[Role]:
    nodes = [h.name for h in hosts]
    by = {h.name: h for h in hosts}
    n = len(nodes)
    nns = min(topo.nameservers, n)
    if topo.replicas > n:
        raise ValueError(f"topology {topo.name} needs {topo.replicas} nodes, have {n}")
    roles: list[Role] = []
    ns_nodes = nodes[:nns]

    def port(node: str, base: int, slot: int = 0) -> int:
        return base + by[node].port_offset + slot * SLOT_STRIDE

    ns_addrs = [f"{by[x].address}:{port(x, NAMESRV_PORT)}" for x in ns_nodes]
    peers = ";".join(f"n{i}-{a}" for i, a in enumerate(ns_addrs))
    for i, x in enumerate(ns_nodes):
        v: dict[str, Any] = {
            "listenHost": by[x].address,
            "listenPort": port(x, NAMESRV_PORT),
            "scanNotActiveBrokerInterval": timing.scan_ms,
            "brokerChannelExpiredTime": timing.broker_expired_ms,
            **_metrics(by[x].address, port(x, NS_METRICS_PORT)),
        }
        if topo.acting:
            v.update({"supportActingMaster": "true", "notifyMinBrokerIdChanged": "true"})
        if topo.mode == "controller":
            v.update(
                {
                    "enableControllerInNamesrv": "true",
                    "controllerDLegerGroup": "RmqJepsenController",
                    "controllerDLegerPeers": peers,
                    "controllerDLegerSelfId": f"n{i}",
                    "heartBeatTimeIntervalMs": timing.raft_heartbeat_ms,
                    "maxHeartBeatLeak": timing.raft_max_leak,
                    "minVoteIntervalMs": timing.min_vote_ms,
                    "maxVoteIntervalMs": timing.max_vote_ms,
                    "scanInactiveMasterInterval": timing.scan_ms,
                }
            )
        roles.append(Role(f"ns{i + 1}", "namesrv", x, port(x, NAMESRV_PORT), v))
    slots: dict[str, int] = {}
    start = nns % n if n > nns else 0
    for g in range(topo.groups):
        gname = f"broker-{chr(ord('a') + g)}"
        for r in range(topo.replicas):
            x = broker_node(topo, nodes, nns, g, r) if topo.acting else nodes[(start + g + r) % n]
            slot = slots.get(x, 0)
            slots[x] = slot + 1
            bport, hport = port(x, BROKER_PORT, slot), port(x, HA_PORT, slot)
            v = {
                "brokerClusterName": CLUSTER,
                "brokerName": gname,
                "brokerIP1": by[x].address,
                "brokerIP2": by[x].address,
                "listenPort": bport,
                "haListenPort": hport,
                "namesrvAddr": ";".join(ns_addrs),
                "mappedFileSizeCommitLog": timing.commitlog_bytes,
                "registerNameServerPeriod": timing.register_period_ms,
                "brokerHeartbeatInterval": timing.broker_heartbeat_ms,
                "flushDiskType": "ASYNC_FLUSH",
                "autoCreateTopicEnable": "true",
                "messageDelayLevel": timing.delay_levels,
                "transactionTimeOut": timing.transaction_timeout_ms,
                "transactionCheckInterval": timing.transaction_check_ms,
                "reviveInterval": timing.revive_ms,
                **_metrics(by[x].address, port(x, BROKER_METRICS_PORT, slot)),
            }
            if topo.mode == "controller":
                v.update(
                    {
                        "enableControllerMode": "true",
                        "controllerAddr": ";".join(ns_addrs),
                        "allAckInSyncStateSet": str(topo.all_ack).lower(),
                        "minInSyncReplicas": topo.min_in_sync,
                        "inSyncReplicas": topo.replicas if topo.all_ack else 1,
                        "haMaxTimeSlaveNotCatchup": timing.ha_not_catchup_ms,
                        "controllerHeartBeatTimeoutMills": timing.controller_heartbeat_timeout_ms,
                        "syncBrokerMetadataPeriod": CONTROLLER_SYNC_PERIOD_MS,
                        "checkSyncStateSetPeriod": CONTROLLER_SYNC_PERIOD_MS,
                    }
                )
            elif topo.mode == "classic":
                v.update({"brokerId": r, "brokerRole": topo.master_role if r == 0 else "SLAVE"})
                if topo.acting:
                    v.update(
                        {
                            "enableSlaveActingMaster": "true",
                            "enableRemoteEscape": "true",
                            "totalReplicas": topo.replicas,
                            "compatibleWithOldNameSrv": "false",
                            "brokerNotActiveTimeoutMillis": timing.broker_not_active_ms,
                            "syncBrokerMemberGroupPeriod": timing.member_group_sync_ms,
                            "lockInStrictMode": "false",
                            # ours: a master that lost both name servers and every slave
                            # stops serving (no second, diverging view while partitioned)
                            "fenceWhenIsolated": "true",
                        }
                    )
            else:
                v.update({"brokerId": 0, "brokerRole": "ASYNC_MASTER"})
            name = f"{gname}-{r}"
            roles.append(Role(name, "broker", x, bport, v, gname, r, hport))
    return roles


def plan_rocketmq_roles(topo: Topology, hosts: list[Host], timing: Timing) -> list[Role]:
    """The roles of `topo` as real Apache RocketMQ runs them (--db rocketmq): the same nodes,
    names and ports as `plan_roles` (a name server's controller on ROCKETMQ_CONTROLLER_PORT, a
    broker's fast server on its port - 2 and HA server on port + 1), their configs from the code
    `bench.realrmq.RealControllerGroup` uses (RocketMQ's own keys), with the campaign's timings
    under RocketMQ's names. Stores are under each role's directory (<workdir>/<role>/)."""
    if topo.name not in ROCKETMQ_TOPOLOGIES:
        raise ValueError(
            f"--db rocketmq: topology {topo.name} is not supported "
            f"(supported: {', '.join(ROCKETMQ_TOPOLOGIES)})"
        )
    from rmq_jepsen.bench import realrmq

    by = {h.name: h for h in hosts}
    roles = plan_roles(topo, hosts, timing)
    ns = [r for r in roles if r.kind == "namesrv"]
    for r in ns:
        r.ctl_port = r.port - NAMESRV_PORT + ROCKETMQ_CONTROLLER_PORT
    ctl_ports = [r.ctl_port for r in ns if r.ctl_port is not None]
    peer_hosts = [by[r.node].address for r in ns]
    ns_addrs = [f"{by[r.node].address}:{r.port}" for r in ns]
    ctl_addrs = [f"{by[r.node].address}:{r.ctl_port}" for r in ns]
    for i, r in enumerate(ns):
        d = Path(r.dir(by[r.node]))
        r.values = realrmq.controller_namesrv_conf(
            i,
            r.port,
            ctl_ports,
            d,
            # The campaign's timings, as rmq_ha's name servers get them (the launcher's own
            # are faster: a compare run detected a paused master sooner on RocketMQ's side).
            {
                "scanNotActiveBrokerInterval": timing.scan_ms,
                "scanInactiveMasterInterval": timing.scan_ms,
            },
            address=by[r.node].address,
            peer_hosts=peer_hosts,
            store_path=d / "controller",
        )
    for r in roles:
        if r.kind != "broker":
            continue
        d = Path(r.dir(by[r.node]))
        r.values = realrmq.controller_broker_conf(
            r.replica,
            r.port,
            ns_addrs,
            ctl_addrs,
            d,
            {
                "brokerClusterName": CLUSTER,
                "brokerName": r.group,
                "allAckInSyncStateSet": str(topo.all_ack).lower(),
                "minInSyncReplicas": topo.min_in_sync,
                "inSyncReplicas": topo.replicas if topo.all_ack else 1,
                "controllerHeartBeatTimeoutMills": timing.controller_heartbeat_timeout_ms,
                "haMaxTimeSlaveNotCatchup": timing.ha_not_catchup_ms,
                # As rmq_ha's brokers in the same campaign (plan_roles), not the launcher's
                # faster bench timings.
                "brokerHeartbeatInterval": timing.broker_heartbeat_ms,
                "registerNameServerPeriod": timing.register_period_ms,
                "syncBrokerMetadataPeriod": CONTROLLER_SYNC_PERIOD_MS,
                "checkSyncStateSetPeriod": CONTROLLER_SYNC_PERIOD_MS,
                "mappedFileSizeCommitLog": timing.commitlog_bytes,
                "messageDelayLevel": timing.delay_levels,
                "transactionTimeOut": timing.transaction_timeout_ms,
                "transactionCheckInterval": timing.transaction_check_ms,
                "reviveInterval": timing.revive_ms,
            },
            address=by[r.node].address,
            root=d / "store",
        )
        r.ha_port = r.port + 1
    for r in roles:  # paths as text: role configs go into config.json
        r.values = {k: str(v) if isinstance(v, Path) else v for k, v in r.values.items()}
    return roles


#: Files of a --secure role that are never collected into the run directory.
SECRET_FILES = ("*/plain_acl.yml", "*/*.key")
#: role.conf keys whose values are secrets (redacted in collected copies).
SECRET_KEYS = ("innerClientAuthenticationCredentials",)


def redact_secrets(properties: str) -> str:
    """A role.conf with the values of `SECRET_KEYS` replaced by ***."""
    out = []
    for line in properties.splitlines():
        key = line.split("=", 1)[0].strip()
        out.append(f"{key}=***" if key in SECRET_KEYS and "=" in line else line)
    return "\n".join(out) + ("\n" if properties.endswith("\n") else "")


def _writer(path: str, text: str) -> Any:
    """A Remote call that writes `text` to `path` on the node."""
    return lambda r: r.put_text(path, text)


def _metrics(address: str, port: int) -> dict[str, Any]:
    return {
        "metricsExporterType": "PROM",
        "metricsPromExporterHost": address,
        "metricsPromExporterPort": port,
    }


def broker_node(topo: Topology, nodes: list[str], nns: int, group: int, replica: int) -> str:
    """Where replica `replica` of group `group` runs in a slave-acting-master topology: on the
    nodes without a name server when there are at least two, one broker per node when they
    suffice; otherwise a group's replicas on consecutive nodes, shifted by one per group, so
    no two masters and no master and its own slave share a node. Killing or isolating one
    master then leaves its slave (the acting master) and the other group's master (where the
    acting master escapes to) up."""
    rest = nodes[nns:] if len(nodes) - nns >= 2 else nodes
    k = len(rest)
    if k >= topo.groups * topo.replicas:
        return rest[group * topo.replicas + replica]
    return rest[(group + replica) % k]


def render_properties(values: Mapping[str, Any]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


class InstallError(RuntimeError):
    """The nodes cannot be given rmq_ha (no wheel, nothing to build one from)."""


def wheel_for_hosts(spec: Install, state_root: Path, source: Path | None) -> Path:
    """The rmq-ha wheel remote hosts install: `spec.wheel` when given, else one built from the
    checkout `source` (the same build as `make wheels`)."""
    if spec.wheel:
        wheel = Path(spec.wheel)
        if not (wheel.is_file() and wheel.name.startswith("rmq_ha-") and wheel.suffix == ".whl"):
            raise InstallError(f"--wheel {wheel}: not an rmq_ha wheel file (rmq_ha-*.whl)")
        return wheel
    if source is None:
        raise InstallError(
            "these hosts need the rmq-ha wheel and the bench is not running from a source "
            "checkout it could build one from: pass --wheel PATH (`make wheels` in a checkout "
            f"builds it into dist/), or set {checkout.ENV}=/path/to/checkout"
        )
    from rmq_jepsen.wheels import build_rmq_ha

    return build_rmq_ha(source, state_root / "wheels")


def local_rmq_ha_bin() -> str:
    """The `rmq-ha` script of the environment the bench runs in (beside this interpreter)."""
    beside = Path(sys.executable).with_name("rmq-ha")
    if beside.exists():
        return str(beside)
    found = shutil.which("rmq-ha")
    if found is None:
        raise InstallError(f"no rmq-ha script beside {sys.executable} or on PATH")
    return found


class DB:
    def __init__(
        self,
        control: Control,
        topology: Topology,
        *,
        state: StateDir,
        timing: Timing | None = None,
        clock_faults: bool = False,
        install: Install | None = None,
        security: Security | None = None,
        kind: str = "rmq_ha",
        jvm: JvmSizes | None = None,
        rocketmq_version: str | None = None,
        deployment: Deployment | None = None,
    ) -> None:
        if kind not in DBS:
            raise ValueError(f"--db {kind}: unknown database (known: {', '.join(DBS)})")
        if kind == "rocketmq" and security is not None:
            raise ValueError("--db rocketmq with --secure is not supported")
        if deployment is not None and kind != "rocketmq":
            raise ValueError("a host file with a [deployment] runs against it: --db rocketmq")
        #: An existing RocketMQ deployment (rmq_jepsen.existing): nothing installed, configured
        #: or started by the bench; its JVMs found by their command lines.
        self.deployment = deployment
        #: The brokers' brokerClusterName (topics are created in it).
        self.cluster_name = deployment.cluster if deployment is not None else CLUSTER
        self.control = control
        #: Which database the roles run: rmq_ha, or real Apache RocketMQ (JVMs, --db rocketmq).
        self.kind = kind
        self.jvm = jvm or JvmSizes()
        self.rocketmq_version = rocketmq_version
        #: --db rocketmq: the directory of RocketMQ's jars (set by `install`).
        self.rocketmq_lib: str | None = None
        #: How long a role may take to say it is up (a JVM takes longer on a loaded machine).
        self.ready_timeout_s = 30.0 if kind == "rmq_ha" else JVM_READY_S
        #: role -> the size of its role.log when it was last started (readiness by log line).
        self._log_offset: dict[str, int] = {}
        #: --secure: ACL and TLS on every role, the bench's clients signing (rmq_jepsen.secure).
        self.security = security
        self.topology = topology
        self.timing = timing or Timing()
        self.state = state
        self.clock_faults = clock_faults
        self.install_spec = install or Install()
        plan = plan_rocketmq_roles if kind == "rocketmq" else plan_roles
        if deployment is not None:
            self.roles = existing_roles(deployment)
        else:
            self.roles = plan(topology, control.hosts, self.timing)
        self.by_name = {r.name: r for r in self.roles}
        #: Roles that are supposed to be down right now (killed by a nemesis, not restarted).
        self.down: set[str] = set()

    # ---- queries -----------------------------------------------------------------------------

    def host(self, role: Role) -> Host:
        return self.control.host(role.node)

    def remote(self, role: Role) -> Remote:
        return self.control.on(role.node)

    def namesrvs(self) -> list[Role]:
        return [r for r in self.roles if r.kind == "namesrv"]

    def brokers(self) -> list[Role]:
        return [r for r in self.roles if r.kind == "broker"]

    def namesrv_addr(self) -> str:
        return ";".join(f"{self.host(r).address}:{r.port}" for r in self.namesrvs())

    def controller_addrs(self) -> list[str]:
        if self.topology.mode != "controller":
            return []
        return [f"{self.host(r).address}:{r.ctl_port or r.port}" for r in self.namesrvs()]

    def role_at(self, addr: str) -> Role | None:
        """The role listening at host:port (a name server also at its controller's port)."""
        for r in self.roles:
            ports = (r.port,) if r.ctl_port is None else (r.port, r.ctl_port)
            if any(f"{self.host(r).address}:{p}" == addr for p in ports):
                return r
        return None

    def roles_on(self, node: str) -> list[Role]:
        return [r for r in self.roles if r.node == node]

    def groups(self) -> list[str]:
        return sorted({r.group for r in self.brokers() if r.group})

    # ---- install and setup -------------------------------------------------------------------

    async def install(self, source: Path | None = None) -> None:
        """Local hosts (namespaces, loopback) share this machine's filesystem: they run the
        bench's own environment. Other hosts get the rmq-ha wheel (`Install.wheel`, else one
        built from the checkout `source`)."""
        spec = self.install_spec
        if self.deployment is not None:
            await self._find_running()
            return
        if self.kind == "rocketmq":
            await self._install_rocketmq()
        if not spec.rmq_ha_bin:
            spec.rmq_ha_bin = local_rmq_ha_bin()
            spec.python = sys.executable
        local = all(h.netns or h.ssh_host is None for h in self.control.hosts)
        if not local:
            wheel = await trio.to_thread.run_sync(
                wheel_for_hosts, spec, Path(self.state.root), source
            )
            spec.rmq_ha_bin = "/opt/rmq-jepsen/venv/bin/rmq-ha"
            spec.python = "/opt/rmq-jepsen/venv/bin/python"

            async def put(node: str) -> None:
                remote_whl = f"/opt/rmq-jepsen/{wheel.name}"
                await self.control.call(node, lambda r: r.upload(wheel, remote_whl))
                await self.control.run(
                    node,
                    "test -x /opt/rmq-jepsen/venv/bin/python || python3 -m venv "
                    "/opt/rmq-jepsen/venv; /opt/rmq-jepsen/venv/bin/pip install -q "
                    f"--force-reinstall --no-deps {remote_whl} && "
                    f"/opt/rmq-jepsen/venv/bin/pip install -q {remote_whl}",
                    timeout_s=900,
                )

            await self.control.on_all(self.control.nodes, put)
        bin_q = shlex.quote(spec.rmq_ha_bin)

        async def check(node: str) -> None:
            await self.control.run(node, f"test -x {bin_q}")

        await self.control.on_all(self.control.nodes, check)
        if self.clock_faults and not spec.faketime_lib:
            from rmq_jepsen.hosts import FAKETIME_LIBS

            r = await self.control.run(
                self.control.nodes[0],
                f"ls {' '.join(FAKETIME_LIBS)} 2>/dev/null | head -1",
                check=False,
            )
            spec.faketime_lib = r.out.strip() or None
            if not spec.faketime_lib:
                raise RuntimeError("clock faults need libfaketime on the nodes (apt: faketime)")

    async def _install_rocketmq(self) -> None:
        """--db rocketmq: RocketMQ's jars (fetched once by Maven into the interop cache, on this
        machine: the nodes must share its filesystem, i.e. local namespaces or loopback) and a
        check of every config key against its config classes; then `java` on every node."""
        remote = [h.name for h in self.control.hosts if not (h.netns or h.ssh_host is None)]
        if remote:
            raise InstallError(
                f"--db rocketmq runs on local hosts only (namespaces or loopback); "
                f"{', '.join(remote)} are remote (copying RocketMQ's jars to them is not "
                "supported yet)"
            )
        from rmq_jepsen.bench import realrmq

        def fetch() -> str:
            h = realrmq.interop_harness()
            realrmq.require_tools("java", "mvn", "javap")
            v = self.rocketmq_version
            lib = Path(h.real_rocketmq_lib(v) if v else h.real_rocketmq_lib())
            for kind in ("namesrv", "broker"):
                known = realrmq.config_keys(lib, kind)
                for r in self.roles:
                    if r.kind == kind:
                        realrmq.check_keys(r.values, known, f"{r.name} config")
            return str(lib)

        self.rocketmq_lib = await trio.to_thread.run_sync(fetch)

        async def check(node: str) -> None:
            await self.control.run(node, "command -v java >/dev/null")

        await self.control.on_all(self.control.nodes, check)

    # ---- an existing deployment (rmq_jepsen.existing) -----------------------------------------

    def _existing(self, role: Role) -> ExistingRole:
        assert self.deployment is not None
        return self.deployment.role(role.name)

    async def find_pid(self, role: Role) -> int:
        """The pid of the role's JVM in an existing deployment (DeploymentError: none or
        several java processes match its regex)."""
        e = self._existing(role)
        r = await self.control.run(role.node, existing.pid_command(e), check=False)
        return existing.parse_pids(e, r.out)

    async def _find_running(self) -> None:
        """Every role of the existing deployment runs: its pid (errors name every role that
        does not, or is ambiguous)."""
        errors: list[str] = []

        async def one(role: Role) -> None:
            try:
                role.pid = await self.find_pid(role)
            except existing.DeploymentError as e:
                errors.append(str(e))

        async with trio.open_nursery() as nursery:
            for role in self.roles:
                nursery.start_soon(one, role)
        if errors:
            raise existing.DeploymentError("; ".join(sorted(errors)))

    async def _start_existing(self, role: Role) -> int:
        """Runs the deployment's own start command for the role, then finds its new JVM."""
        await self.control.run(role.node, existing.start_command(self._existing(role)))
        deadline = trio.current_time() + self.ready_timeout_s
        while True:
            try:
                pid = await self.find_pid(role)
                break
            except existing.DeploymentError:
                if trio.current_time() > deadline:
                    raise
                await trio.sleep(0.2)
        role.pid = pid
        self.down.discard(role.name)
        return pid

    def _command(self, role: Role) -> str:
        """The command line that runs `role` on its node."""
        d = role.dir(self.host(role))
        if self.kind == "rocketmq":
            if self.rocketmq_lib is None:
                raise InstallError("--db rocketmq: start before install (no RocketMQ jars)")
            ns = role.kind == "namesrv"
            argv = java_argv(
                ROCKETMQ_MAIN[role.kind],
                classpath=f"{self.rocketmq_lib}/*",
                conf=f"{d}/role.conf",
                jvm=self.jvm.namesrv() if ns else self.jvm.broker(),
                home=d,
            )
            return shlex.join(argv)
        sub = "namesrv" if role.kind == "namesrv" else "broker"
        return (
            f"{shlex.quote(self.install_spec.rmq_ha_bin)} {sub} -c {d}/role.conf "
            f"--ready-file {d}/ready"
        )

    async def setup(self) -> None:
        """Wipes each role's directory and writes its config (and the fake-clock file); an
        existing deployment is left as it is."""
        if self.deployment is not None:
            return

        async def one(role: Role) -> None:
            h = self.host(role)
            d = role.dir(h)
            v = dict(role.values)
            if self.kind == "rocketmq":
                pass  # plan_rocketmq_roles put the stores under the role's directory
            elif role.kind == "broker":
                v["storePathRootDir"] = f"{d}/store"
            elif "controllerDLegerPeers" in v:
                v["controllerStorePath"] = f"{d}/controller"
            sec = self.security
            if sec is not None:
                v.update(sec.role_values(d))
            q = shlex.quote(d)
            await self.control.run(role.node, f"rm -rf {q} && mkdir -p {q}")
            await self.control.call(
                role.node, lambda r: r.put_text(f"{d}/role.conf", render_properties(v))
            )
            if sec is not None:
                for name, text in sec.files.items():
                    await self.control.call(role.node, _writer(f"{d}/{name}", text))
                await self.control.run(role.node, f"chmod 600 {q}/*.key {q}/plain_acl.yml")
            if self.clock_faults:
                await self.control.call(
                    role.node, lambda r: r.put_text(f"{h.workdir}/faketime", "+0\n")
                )

        async with trio.open_nursery() as nursery:
            for role in self.roles:
                nursery.start_soon(one, role)

    # ---- processes ---------------------------------------------------------------------------

    def _env(self, role: Role) -> dict[str, str]:
        env = {"PYTHONUNBUFFERED": "1"}
        if self.clock_faults and self.install_spec.faketime_lib:
            h = self.host(role)
            env.update(
                {
                    "LD_PRELOAD": self.install_spec.faketime_lib,
                    "FAKETIME_TIMESTAMP_FILE": f"{h.workdir}/faketime",
                    "FAKETIME_CACHE_DURATION": "1",
                }
            )
        return env

    def proc_key(self, role: Role) -> str:
        return f"{role.node}/{role.name}"

    async def start(self, role: Role) -> int:
        if self.deployment is not None:
            return await self._start_existing(role)
        h = self.host(role)
        d = role.dir(h)
        cmd = self._command(role)
        await self.control.run(role.node, f"rm -f {d}/ready")
        if self.kind == "rocketmq":  # readiness: a line logged after this start
            r = await self.control.run(
                role.node, f"stat -c %s {d}/role.log 2>/dev/null || echo 0", check=False
            )
            self._log_offset[role.name] = int(r.out.strip() or 0)
        # Bookkeeping before the start: `hosts down` finds the pidfile even if we crash now.
        self.state.set_proc(
            self.proc_key(role), {"host": h.to_json(), "role": role.name, "pidfile": f"{d}/pid"}
        )
        pid = await self.control.call(
            role.node,
            lambda r: r.start_daemon(
                cmd, cwd=d, log_file=f"{d}/role.log", pidfile=f"{d}/pid", env=self._env(role)
            ),
        )
        role.pid = pid
        self.state.set_proc(
            self.proc_key(role),
            {"host": h.to_json(), "role": role.name, "pidfile": f"{d}/pid", "pid": pid},
        )
        self.down.discard(role.name)
        return pid

    def _ready_probe(self, role: Role) -> str:
        """A shell command that prints the role's address once it is up (else nothing)."""
        d = role.dir(self.host(role))
        if self.deployment is not None:  # its log is its own: up once it listens
            e = self._existing(role)
            return f"{existing.listening_command(e)} && echo {shlex.quote(e.addr)}"
        if self.kind == "rocketmq":
            off = self._log_offset.get(role.name, 0) + 1
            pat = shlex.quote(ROCKETMQ_READY[role.kind])
            return f"tail -c +{off} {d}/role.log 2>/dev/null | grep -m1 -oE {pat}"
        return f"cat {d}/ready 2>/dev/null"

    async def wait_ready(self, role: Role, timeout_s: float | None = None) -> str:
        d = role.dir(self.host(role))
        timeout_s = self.ready_timeout_s if timeout_s is None else timeout_s
        deadline = trio.current_time() + timeout_s
        while True:
            r = await self.control.run(role.node, self._ready_probe(role), check=False)
            if r.rc == 0 and r.out.strip():
                return r.out.strip()
            if role.pid is not None and not await self.alive(role):
                tail = await self.control.run(role.node, f"tail -n 20 {d}/role.log", check=False)
                raise RuntimeError(f"{role.name} on {role.node} exited before ready:\n{tail.out}")
            if trio.current_time() > deadline:
                raise RuntimeError(f"{role.name} on {role.node} not ready in {timeout_s} s")
            await trio.sleep(0.1)

    async def alive(self, role: Role) -> bool:
        if role.pid is None:
            return False
        pid = role.pid
        st = await self.control.call(role.node, lambda r: r.proc_state(pid))
        return st is not None and st != "Z"

    async def start_all(self, timeout_s: float | None = None) -> float:
        """Name servers first, then brokers; returns the seconds it took. Real RocketMQ's
        brokers start once its controllers have elected a leader (as RealControllerGroup)."""
        timeout_s = max(60.0, self.ready_timeout_s) if timeout_s is None else timeout_s
        t0 = time.monotonic()
        if self.deployment is not None:  # already running (install found every JVM)
            async with trio.open_nursery() as nursery:
                for r in self.roles:
                    nursery.start_soon(self.wait_ready, r, timeout_s)
            return time.monotonic() - t0
        for kind in ("namesrv", "broker"):
            rs = [r for r in self.roles if r.kind == kind]
            async with trio.open_nursery() as nursery:
                for r in rs:
                    nursery.start_soon(self.start, r)
            async with trio.open_nursery() as nursery:
                for r in rs:
                    nursery.start_soon(self.wait_ready, r, timeout_s)
            if kind == "namesrv" and self.kind == "rocketmq" and self.controller_addrs():
                await self._wait_controller_leader(t0 + timeout_s - time.monotonic())
        return time.monotonic() - t0

    async def _wait_controller_leader(self, timeout_s: float) -> None:
        view = ClusterView(self)
        with trio.move_on_after(max(timeout_s, 1.0)):
            while await view.controller_leader() is None:
                await trio.sleep(0.25)
            return
        raise RuntimeError(f"no controller leader in {timeout_s:.0f} s ({view.last_error})")

    async def signal(self, role: Role, sig: str) -> bool:
        if self.deployment is not None and role.name not in self.down:
            try:  # the JVM running now (someone else may have restarted it)
                role.pid = await self.find_pid(role)
            except existing.DeploymentError:
                return False
        if role.pid is None:
            return False
        pid = role.pid
        return await self.control.call(role.node, lambda r: r.signal(pid, sig))

    async def kill(self, role: Role) -> None:
        await self.signal(role, "CONT")  # a paused process dies on KILL anyway; be explicit
        await self.signal(role, "KILL")
        self.down.add(role.name)

    async def pause(self, role: Role) -> None:
        await self.signal(role, "STOP")

    async def resume(self, role: Role) -> None:
        await self.signal(role, "CONT")

    async def stop(self, role: Role, grace_s: float = 5.0) -> None:
        """SIGCONT + SIGTERM, then SIGKILL after `grace_s`; forgets the process. A role of an
        existing deployment is never stopped: resumed, and started again if a fault killed it,
        so the deployment is left running as it was found."""
        if self.deployment is not None:
            await self.signal(role, "CONT")
            if role.name in self.down or not await self.alive(role):
                await self.restart(role)
            return
        if role.pid is not None:
            await self.signal(role, "CONT")
            await self.signal(role, "TERM")
            with trio.move_on_after(grace_s):
                while await self.alive(role):
                    await trio.sleep(0.1)
            if await self.alive(role):
                await self.signal(role, "KILL")
        self.state.set_proc(self.proc_key(role), None)
        self.down.add(role.name)

    async def stop_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for r in self.roles:
                nursery.start_soon(self.stop, r)

    async def restart(self, role: Role, ready_timeout_s: float | None = None) -> None:
        if await self.alive(role):
            return
        await self.start(role)
        await self.wait_ready(role, ready_timeout_s)

    async def process_states(self) -> dict[str, str | None]:
        """role -> ps state letter (T = stopped) or None when not running."""
        out: dict[str, str | None] = {}
        for r in self.roles:
            pid = r.pid
            if pid is None:
                out[r.name] = None
                continue
            out[r.name] = await self.control.call(r.node, functools.partial(_proc_state, pid=pid))
        return out

    # ---- collection ----------------------------------------------------------------------------

    async def collect(self, run_dir: Path, *, data: bool = True) -> dict[str, int]:
        """Copies each node's role directories (logs, configs, and with `data` the stores)
        into run_dir/nodes/<node>/."""
        out: dict[str, int] = {}
        if self.deployment is not None:
            return await self._collect_existing(run_dir)
        exclude: tuple[str, ...] = () if data else ("*/store", "*/controller")
        if self.security is not None:
            exclude += SECRET_FILES  # --secure: keys and the ACL file stay on the nodes

        async def one(node: str) -> None:
            # This run's roles only: a node's work directory keeps the role directories of
            # earlier runs with other topologies (a broker-a-2 from hours before showed up
            # beside this run's broker-a-0 and was read as this run's).
            h = self.control.host(node)
            n = 0
            for role in (r for r in self.roles if r.node == node):
                dest = run_dir / "nodes" / node / role.name
                fetch = functools.partial(_fetch_role, src=role.dir(h), dest=dest, exclude=exclude)
                n += await self.control.call(node, fetch)
            out[node] = n

        await self.control.on_all(self.control.nodes, one)
        if self.security is not None:
            for conf in (run_dir / "nodes").glob("*/*/role.conf"):
                conf.write_text(redact_secrets(conf.read_text()))
        return out

    async def _collect_existing(self, run_dir: Path) -> dict[str, int]:
        """Copies the `logs` paths of each role of an existing deployment into
        run_dir/nodes/<node>/<role>/ (directories as trees, files as files)."""
        out: dict[str, int] = {}

        async def one(role: Role) -> None:
            for i, path in enumerate(self._existing(role).logs):
                dest = run_dir / "nodes" / role.node / role.name / f"{i}-{Path(path).name}"
                n = await self.control.call(
                    role.node, functools.partial(_fetch_path, path=path, dest=dest)
                )
                out[role.node] = out.get(role.node, 0) + n

        async with trio.open_nursery() as nursery:
            for role in self.roles:
                nursery.start_soon(one, role)
        return out


def _fetch_role(remote: Remote, src: str, dest: Path, exclude: tuple[str, ...]) -> int:
    """A role's directory as a tree (bytes copied; 0 when it does not exist)."""
    return remote.fetch_tree(src, dest, exclude=exclude)


def _fetch_path(remote: Remote, path: str, dest: Path) -> int:
    """A directory as a tree, a file as itself; bytes copied (0: neither exists)."""
    if remote.run(f"test -d {shlex.quote(path)}", check=False).rc == 0:
        return remote.fetch_tree(path, dest)
    if remote.run(f"test -f {shlex.quote(path)}", check=False).rc != 0:
        return 0
    remote.fetch(path, dest)
    return dest.stat().st_size


def existing_roles(dep: Deployment) -> list[Role]:
    """The bench's roles for an existing deployment: names, nodes and ports from its host
    file; no config (RocketMQ's own files on the hosts are not the bench's)."""
    replica: dict[str, int] = {}
    out = []
    for e in dep.roles:
        r = Role(e.name, e.kind, e.node, e.port, {}, e.group, 0, e.ha_port)
        if e.group is not None:
            r.replica = replica.get(e.group, 0)
            replica[e.group] = r.replica + 1
        r.ctl_port = e.controller_port
        out.append(r)
    return out


def _proc_state(remote: Remote, pid: int) -> str | None:
    return remote.proc_state(pid)


# ---- asking the cluster -----------------------------------------------------------------------


@dataclass
class ClusterView:
    """Resolves "the master" and "the controller leader" by asking the cluster."""

    db: DB
    timeout_s: float = 3.0
    client_ip: str = "127.0.0.1"
    last_error: str | None = field(default=None)

    def _remoting(self) -> Any:
        from rmq_ha.net.client import RemotingClient

        sec = self.db.security
        return RemotingClient() if sec is None else sec.remoting_client()

    async def masters(self) -> dict[str, Role | None]:
        """group -> the role registered as brokerId 0 at a name server (None if no master)."""
        from rmq_ha.client import Admin, ClientConfig
        from rmq_ha.errors import RmqHaError

        out: dict[str, Role | None] = {g: None for g in self.db.groups()}
        cfg = ClientConfig(client_ip=self.client_ip)
        if self.db.security is not None:
            cfg = self.db.security.client_config(cfg)
        try:
            with trio.fail_after(self.timeout_s):
                async with Admin(self.db.namesrv_addr(), config=cfg) as admin:
                    info = await admin.cluster_info()
        except (RmqHaError, trio.TooSlowError, OSError) as e:
            self.last_error = f"cluster info: {e!r}"
            return out
        classic = self.db.topology.mode == "classic"
        for name, bd in info.broker_addr_table.items():
            addr = bd.broker_addrs.get(0)
            role = self.db.role_at(addr) if addr else None
            if name not in out or role is None:
                continue
            if classic and role.replica != 0:
                # A slave acting as master (RIP-32) may be shown as id 0; it is not the
                # master, whose configured id is 0 (killing it would take the whole group).
                continue
            out[name] = role
        return out

    async def controller_leader(self) -> Role | None:
        addrs = self.db.controller_addrs()
        if not addrs:
            return None
        from rmq_ha.controller.client import ControllerClient
        from rmq_ha.errors import RemotingError

        addr: str | None = None
        try:
            with trio.fail_after(self.timeout_s * 2):
                async with self._remoting() as client:
                    # Caught inside: out of the client's nursery it would be an ExceptionGroup.
                    try:
                        addr = await ControllerClient(client, addrs, self.timeout_s).find_leader()
                    except RemotingError as e:
                        self.last_error = f"controller leader: {e!r}"
        except (RemotingError, trio.TooSlowError, OSError) as e:
            self.last_error = f"controller leader: {e!r}"
        return None if addr is None else self.db.role_at(addr)

    async def classic_lag(self) -> dict[str, str]:
        """Classic topologies: group -> why its slaves are not in step with its configured
        master (brokerId 0), from that master's GET_BROKER_HA_STATUS (RocketMQ's
        HARuntimeInfo, which Apache RocketMQ answers too); {} when every configured slave of
        every group is connected with nothing left to receive."""
        import json

        from rmq_ha.errors import RemotingError
        from rmq_ha.protocol.codes import RequestCode as RC
        from rmq_ha.protocol.codes import ResponseCode as Resp
        from rmq_ha.protocol.command import RemotingCommand

        out: dict[str, str] = {}
        for g in self.db.groups():
            members = [r for r in self.db.brokers() if r.group == g]
            master = next((r for r in members if r.replica == 0), None)
            slaves = len(members) - 1
            if master is None or slaves <= 0:
                continue
            addr = f"{self.db.host(master).address}:{master.port}"
            r = None
            try:
                with trio.fail_after(self.timeout_s * 2):
                    async with self._remoting() as client:
                        # Caught inside: out of the client's nursery it would be an
                        # ExceptionGroup.
                        try:
                            r = await client.invoke(
                                addr,
                                RemotingCommand.request(RC.GET_BROKER_HA_STATUS),
                                self.timeout_s,
                            )
                        except (RemotingError, OSError) as e:
                            out[g] = f"its master {master.name} does not answer: {e!r}"
            except trio.TooSlowError as e:
                out[g] = f"its master {master.name} does not answer: {e!r}"
            if r is None:
                continue
            if r.code != Resp.SUCCESS or not r.body:
                out[g] = f"its master {master.name} answered {r.code}: {r.remark}"
                continue
            info = json.loads(r.body)
            if not info.get("master"):
                out[g] = f"{master.name} is not master"
                continue
            conns = info.get("haConnectionInfo") or []
            caught = [c for c in conns if int(c.get("diff", 1)) == 0]
            if len(caught) < slaves:
                behind = {c.get("addr"): c.get("diff") for c in conns if c not in caught}
                out[g] = (
                    f"{len(caught)} of {slaves} slaves connected and caught up to "
                    f"{info.get('masterCommitLogMaxOffset')} (behind, bytes: {behind})"
                )
        return out

    async def replica_info(self) -> dict[str, tuple[str | None, int | None]]:
        """group -> (master address, master epoch) from the controller (controller mode)."""
        return {
            name: (info.master_address or None, info.master_epoch)
            for name, info in (await self.replicas()).items()
        }

    async def replicas(self) -> dict[str, Any]:
        """group -> the controller's ReplicasInfo (master, epoch, in-sync and not-in-sync
        replicas) in controller mode; {} without controllers or an answer (`last_error`)."""
        addrs = self.db.controller_addrs()
        if not addrs:
            return {}
        from rmq_ha.controller import messages as m
        from rmq_ha.controller.client import ControllerClient
        from rmq_ha.errors import RemotingError

        with trio.fail_after(self.timeout_s * 2):
            async with self._remoting() as client:
                cc = ControllerClient(client, addrs, self.timeout_s)
                try:
                    resp = await cc.request(m.GetSyncStateDataRequest(tuple(self.db.groups())))
                except RemotingError as e:
                    self.last_error = f"replica info: {e!r}"
                    return {}
        return dict(getattr(resp, "replicas_info", {}))

    async def wait_masters(self, timeout_s: float) -> dict[str, Role | None]:
        """Waits until every group has a registered master (or the timeout)."""
        deadline = trio.current_time() + timeout_s
        while True:
            got = await self.masters()
            if all(got.values()) or trio.current_time() > deadline:
                return got
            await trio.sleep(0.25)
