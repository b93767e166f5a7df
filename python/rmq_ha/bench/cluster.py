"""A replicated cluster of real processes on loopback, for the broker-HA benchmark and tests:
three name servers with embedded controllers and one broker group (controller mode, or classic
master/slave). Every process is started with a ready file and stopped by its pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand

#: Raft and scans fast enough for a failover in about a second (ms).
FAST_CONTROLLER = {
    "heartBeatTimeIntervalMs": 100,
    "maxHeartBeatLeak": 3,
    "minVoteIntervalMs": 30,
    "maxVoteIntervalMs": 100,
    "scanNotActiveBrokerInterval": 200,
    "scanInactiveMasterInterval": 300,
}


def free_ports(n: int) -> list[int]:
    """Loopback ports free right now (peers must know each other's ports up front)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def write_properties(path: Path, values: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


async def wait_for(pred: Callable[[], Any], timeout_s: float, what: str) -> Any:
    with trio.move_on_after(timeout_s):
        while True:
            got = pred()
            if got:
                return got
            await trio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


RMQ_HA = [sys.executable, "-m", "rmq_ha.cli"]

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


@dataclass
class Proc:
    args: list[str]
    log: Path
    ready: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.ready.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                [*self.args, "--ready-file", str(self.ready)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, **(self.env or {})},
            )

    async def wait_ready(self, timeout_s: float = 30) -> str:
        p = self.popen
        assert p is not None
        await wait_for(lambda: self.ready.exists() or p.poll() is not None, timeout_s, "ready")
        if not self.ready.exists():
            raise AssertionError(f"{self.args} exited:\n{self.log.read_text()[-4000:]}")
        return self.ready.read_text().strip()

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        if self.popen is not None:
            if self.popen.poll() is None:
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
            self.popen = None


def role_proc(
    tmp: Path, role: str, name: str, values: dict[str, Any], env: dict[str, str] | None = None
) -> Proc:
    """An `rmq-ha <role> -c <tmp>/<name>.conf` process with its log and ready file in `tmp`."""
    conf = write_properties(tmp / f"{name}.conf", values)
    return Proc([*RMQ_HA, role, "-c", str(conf)], tmp / f"{name}.log", tmp / f"{name}.ready", env)


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
        for p in [*self.brokers, *self.namesrvs]:
            p.kill()

    def logs(self) -> str:
        out = []
        for p in [*self.brokers, *self.namesrvs]:
            if p.log.exists():
                out.append(f"--- {p.log.name}\n{p.log.read_text()[-3000:]}")
        return "\n".join(out)


@dataclass
class HaCluster(ProcessCluster):
    tmp: Path
    replicas: int = 3
    broker: dict[str, Any] = field(default_factory=dict)
    controller_mode: bool = True
    broker_name: str = "broker-a"
    broker_env: dict[str, str] = field(default_factory=dict)
    broker_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = free_ports(3)
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
            }
            self.namesrvs.append(role_proc(self.tmp, "namesrv", f"namesrv-{i}", values))
        self.broker_ports = free_ports(self.replicas)
        for i in range(self.replicas):
            values = {
                "brokerClusterName": "HaCluster",
                "brokerName": self.broker_name,
                "listenPort": self.broker_ports[i],
                "namesrvAddr": ";".join(self.ns_addrs),
                "storePathRootDir": str(self.tmp / f"broker-{i}"),
                **FAST_BROKER,
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
                role_proc(self.tmp, "broker", f"broker-{i}", values, self.broker_env)
            )

    def broker_addr(self, i: int) -> str:
        return f"127.0.0.1:{self.broker_ports[i]}"

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
    SYNC_MASTER (id 0) plus `slaves` SLAVEs (ids 1..). `groups` maps broker name -> slave count.
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
        ports = free_ports(self.namesrv_count)
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
        self.members = [(g, i) for g, n in self.groups.items() for i in range(n + 1)]
        self.broker_ports = free_ports(len(self.members))
        for (group, bid), port in zip(self.members, self.broker_ports, strict=True):
            values = {
                "brokerClusterName": "ActingCluster",
                "brokerName": group,
                "brokerId": bid,
                "brokerRole": "SYNC_MASTER" if bid == 0 else "SLAVE",
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
