"""Replicated clusters of real processes on loopback, for the broker-HA and acting-master
benchmarks and tests: name servers (with embedded controllers, or with supportActingMaster) and
broker groups (controller mode, or classic master/slave). Every process comes from the one
launcher (`rmq_jepsen.launch`): started with its config and ready file, stopped by its pid."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_jepsen.launch import Proc, free_ports, kill_all, logs, role_proc

#: Raft and scans fast enough for a failover in about a second (ms).
FAST_CONTROLLER = {
    "heartBeatTimeIntervalMs": 100,
    "maxHeartBeatLeak": 3,
    "minVoteIntervalMs": 30,
    "maxVoteIntervalMs": 100,
    "scanNotActiveBrokerInterval": 200,
    "scanInactiveMasterInterval": 300,
}


#: Timings for tests: a dead master is noticed in about 1.5 s.
FAST_BROKER = {
    "brokerHeartbeatInterval": 200,
    "controllerHeartBeatTimeoutMills": 1500,
    "syncBrokerMetadataPeriod": 500,
    "checkSyncStateSetPeriod": 500,
    "haMaxTimeSlaveNotCatchup": 2000,
    "haSendHeartbeatInterval": 500,
    "haHousekeepingInterval": 3000,
    "slaveTimeout": 3000,
    "registerNameServerPeriod": 2000,
    "flushIntervalCommitLog": 50,
}


#: Metrics on a free loopback port (issue 20; the port is read from --metrics-file).
METRICS_ON = {
    "metricsExporterType": "PROM",
    "metricsPromExporterHost": "127.0.0.1",
    "metricsPromExporterPort": 0,
}


@dataclass
class ProcessCluster:
    """Name servers and brokers as processes: started in that order (each waits for its ready
    file), stopped by pid, their logs' tails for failure messages."""

    namesrvs: list[Proc] = field(default_factory=list, kw_only=True)
    brokers: list[Proc] = field(default_factory=list, kw_only=True)

    async def start(self) -> None:
        for p in self.namesrvs:
            p.start()
        for p in self.namesrvs:
            await p.wait_ready()
        for p in self.brokers:
            p.start()
        for p in self.brokers:
            await p.wait_ready()

    def stop(self) -> None:
        """SIGKILL, brokers first (each by its pid, with its process group)."""
        kill_all([*self.brokers, *self.namesrvs])

    def logs(self) -> str:
        return logs([*self.brokers, *self.namesrvs])


@dataclass
class HaCluster(ProcessCluster):
    tmp: Path
    replicas: int = 3
    broker: dict[str, Any] = field(default_factory=dict)
    controller_mode: bool = True
    broker_name: str = "broker-a"
    broker_env: dict[str, str] = field(default_factory=dict)
    broker_ports: list[int] = field(default_factory=list)
    #: Every process serves Prometheus metrics on a free loopback port and writes its
    #: host:port to <tmp>/<name>.metrics (`metrics_addr`).
    metrics: bool = False

    def __post_init__(self) -> None:
        extra: dict[str, Any] = METRICS_ON if self.metrics else {}
        # One call, so that no broker port repeats a name server's.
        got = free_ports(3 + self.replicas)
        ports, self.broker_ports = got[:3], got[3:]
        self.ns_addrs = [f"127.0.0.1:{p}" for p in ports]
        for i in range(3):
            values: dict[str, Any] = {
                "controllerDLegerGroup": "ha-group",
                "controllerDLegerPeers": ";".join(
                    f"n{j}-127.0.0.1:{p}" for j, p in enumerate(ports)
                ),
                "controllerDLegerSelfId": f"n{i}",
                "controllerStorePath": str(self.tmp / "ctl"),
                **FAST_CONTROLLER,
                "listenPort": ports[i],
                "enableControllerInNamesrv": "true",
                **extra,
            }
            name = f"namesrv-{i}"
            self.namesrvs.append(
                role_proc(self.tmp, "namesrv", name, values, args=self._args(name))
            )
        for i in range(self.replicas):
            values = {
                "brokerClusterName": "HaCluster",
                "brokerName": self.broker_name,
                "listenPort": self.broker_ports[i],
                "namesrvAddr": ";".join(self.ns_addrs),
                "storePathRootDir": str(self.tmp / f"broker-{i}"),
                **FAST_BROKER,
                **extra,
            }
            if self.controller_mode:
                values |= {
                    "brokerId": -1,
                    "enableControllerMode": "true",
                    "controllerAddr": ";".join(self.ns_addrs),
                    "allAckInSyncStateSet": "true",
                }
            else:
                values |= {
                    "brokerId": i,
                    "brokerRole": "SYNC_MASTER" if i == 0 else "SLAVE",
                }
            values |= self.broker
            self.brokers.append(
                role_proc(
                    self.tmp,
                    "broker",
                    f"broker-{i}",
                    values,
                    self.broker_env,
                    args=self._args(f"broker-{i}"),
                )
            )

    def _args(self, name: str) -> list[str]:
        return ["--metrics-file", str(self.tmp / f"{name}.metrics")] if self.metrics else []

    def broker_addr(self, i: int) -> str:
        return f"127.0.0.1:{self.broker_ports[i]}"

    def metrics_addr(self, proc: Proc) -> str:
        """host:port of a process's metrics endpoint (`metrics=True`), as it wrote it."""
        return (self.tmp / f"{proc.name}.metrics").read_text().strip()

    # ---- state --------------------------------------------------------------------------

    async def status(self, i: int) -> dict[str, Any] | None:
        """GET_BROKER_EPOCH_CACHE from broker i (None if it does not answer)."""
        async with RemotingClient() as c:
            try:
                r = await c.invoke(
                    self.broker_addr(i), RemotingCommand.request(RC.GET_BROKER_EPOCH_CACHE), 2.0
                )
            except (RemotingError, OSError):
                return None
        return json.loads(r.body) if r.body else None

    async def master(self, timeout_s: float = 20, exclude: int | None = None) -> int:
        """The index of the broker that says it is master (and is not `exclude`), once a
        running name server routes it as the group's id 0 (clients can send to it)."""
        with trio.move_on_after(timeout_s):
            while True:
                for i, p in enumerate(self.brokers):
                    if i == exclude or not p.alive:
                        continue
                    st = await self.status(i)
                    if st is not None and st["role"] == "MASTER" and await self._routed(i):
                        return i
                await trio.sleep(0.1)
        raise AssertionError(f"no master within {timeout_s} s\n{self.logs()}")

    async def _routed(self, i: int) -> bool:
        """A running name server lists broker i as id 0 of the group
        (GET_BROKER_CLUSTER_INFO); tests stop name servers, so any live one will do."""
        async with RemotingClient() as c:
            for addr, proc in zip(self.ns_addrs, self.namesrvs, strict=True):
                if not proc.alive:
                    continue
                try:
                    r = await c.invoke(
                        addr, RemotingCommand.request(RC.GET_BROKER_CLUSTER_INFO), 2.0
                    )
                except (RemotingError, OSError):
                    continue
                table = json.loads(r.body or b"{}").get("brokerAddrTable", {})
                if table.get(self.broker_name, {}).get("brokerAddrs", {}).get(
                    "0"
                ) == self.broker_addr(i):
                    return True
        return False

    async def sync_state_size(self, i: int) -> int | None:
        """The size of broker i's SyncStateSet as it reports it (None: no answer)."""
        st = await self.status(i)
        return None if st is None else len(st["syncStateSet"])

    async def wait_sync_state_set(self, i: int, size: int, timeout_s: float = 20) -> list[int]:
        with trio.move_on_after(timeout_s):
            while True:
                st = await self.status(i)
                if st is not None and len(st["syncStateSet"]) == size:
                    return list(st["syncStateSet"])
                await trio.sleep(0.1)
        raise AssertionError(f"SyncStateSet of broker {i} never reached {size}\n{self.logs()}")


#: Timings for slave-acting-master tests and the benchmark (ms): the name server drops a
#: silent broker after 2 s and scans every 200 ms; brokers poll their group every 200 ms.
FAST_ACTING = {
    "brokerHeartbeatInterval": 200,
    "brokerNotActiveTimeoutMillis": 2000,
    "syncBrokerMemberGroupPeriod": 200,
    "syncBrokerMetadataPeriod": 500,
    "haSendHeartbeatInterval": 500,
    "haHousekeepingInterval": 3000,
    "slaveTimeout": 3000,
    "registerNameServerPeriod": 2000,
    "flushIntervalCommitLog": 50,
    "enableSlaveActingMaster": "true",
    "enableRemoteEscape": "true",
    "compatibleWithOldNameSrv": "false",
}


@dataclass
class ActingCluster(ProcessCluster):
    """Classic master/slave groups with slave acting master (RIP-32): name servers with
    supportActingMaster and notifyMinBrokerIdChanged (no controller), and per group a
    SYNC_MASTER (id 0) plus `slaves` SLAVEs (ids 1..); a group without slaves has an
    ASYNC_MASTER (a SYNC_MASTER with none answers every send SLAVE_NOT_AVAILABLE, which the
    escape bridge does not count as delivered). `groups` maps broker name -> slave count.
    Brokers are indexed in (group, id) order: `index("broker-a", 1)`."""

    tmp: Path
    groups: dict[str, int] = field(default_factory=lambda: {"broker-a": 1, "broker-b": 0})
    broker: dict[str, Any] = field(default_factory=dict)
    namesrv: dict[str, Any] = field(default_factory=dict)
    namesrv_count: int = 1
    namesrv_env: dict[str, str] = field(default_factory=dict)
    members: list[tuple[str, int]] = field(default_factory=list)
    broker_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.members = [(g, i) for g, n in self.groups.items() for i in range(n + 1)]
        got = free_ports(self.namesrv_count + len(self.members))
        ports, self.broker_ports = got[: self.namesrv_count], got[self.namesrv_count :]
        self.ns_addrs = [f"127.0.0.1:{p}" for p in ports]
        for i, port in enumerate(ports):
            values: dict[str, Any] = {
                "listenPort": port,
                "supportActingMaster": "true",
                "notifyMinBrokerIdChanged": "true",
                "scanNotActiveBrokerInterval": 200,
                **self.namesrv,
            }
            self.namesrvs.append(
                role_proc(self.tmp, "namesrv", f"namesrv-{i}", values, self.namesrv_env)
            )
        for (group, bid), port in zip(self.members, self.broker_ports, strict=True):
            values = {
                "brokerClusterName": "ActingCluster",
                "brokerName": group,
                "brokerId": bid,
                "brokerRole": "SLAVE"
                if bid
                else ("SYNC_MASTER" if self.groups[group] else "ASYNC_MASTER"),
                "totalReplicas": self.groups[group] + 1,
                "listenPort": port,
                "namesrvAddr": ";".join(self.ns_addrs),
                "storePathRootDir": str(self.tmp / f"{group}-{bid}"),
                **FAST_ACTING,
                **self.broker,
            }
            self.brokers.append(role_proc(self.tmp, "broker", f"{group}-{bid}", values))

    def index(self, group: str, broker_id: int) -> int:
        return self.members.index((group, broker_id))

    def addr(self, group: str, broker_id: int) -> str:
        return f"127.0.0.1:{self.broker_ports[self.index(group, broker_id)]}"

    def proc(self, group: str, broker_id: int) -> Proc:
        return self.brokers[self.index(group, broker_id)]

    async def status(self, group: str, broker_id: int) -> dict[str, Any] | None:
        """GET_BROKER_EPOCH_CACHE of one broker (role, acting, isolated, fenced, ...)."""
        async with RemotingClient() as c:
            try:
                r = await c.invoke(
                    self.addr(group, broker_id),
                    RemotingCommand.request(RC.GET_BROKER_EPOCH_CACHE),
                    2.0,
                )
            except (RemotingError, OSError):
                return None
        return json.loads(r.body) if r.body else None

    async def serving(self, group: str, broker_id: int) -> bool:
        """Up and past its pre-online (not isolated)."""
        st = await self.status(group, broker_id)
        return st is not None and not st["isolated"]

    async def acting(self, group: str, broker_id: int) -> bool | None:
        """The slave acts as its group's master (None: no answer)."""
        st = await self.status(group, broker_id)
        return None if st is None else bool(st["actingMaster"])

    async def replicating(self, group: str, broker_id: int) -> bool:
        """The slave copies its master's log (its HA client is in TRANSFER)."""
        st = await self.status(group, broker_id)
        return st is not None and st["slaveState"] == "TRANSFER"
