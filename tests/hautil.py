"""A replicated cluster of real processes on loopback for the broker-HA tests: three name
servers with embedded controllers and one broker group (controller mode, or classic
master/slave). Every process is started with a ready file and stopped by its pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from controllerutil import controller_values, free_ports, wait_for, write_properties
from rmq_ha.client import Admin, ClientConfig, Producer, ProducerConfig, PullConsumer
from rmq_ha.client.errors import ClientError
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import MessageQueue

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


@dataclass
class HaCluster:
    tmp: Path
    replicas: int = 3
    broker: dict[str, Any] = field(default_factory=dict)
    controller_mode: bool = True
    broker_name: str = "broker-a"
    broker_env: dict[str, str] = field(default_factory=dict)
    namesrvs: list[Proc] = field(default_factory=list)
    brokers: list[Proc] = field(default_factory=list)
    broker_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = free_ports(3)
        self.ns_addrs = [f"127.0.0.1:{p}" for p in ports]
        for i in range(3):
            values = controller_values(ports, i, self.tmp / "ctl") | {
                "listenPort": ports[i],
                "enableControllerInNamesrv": "true",
                "scanNotActiveBrokerInterval": 200,
            }
            conf = write_properties(self.tmp / f"namesrv-{i}.conf", values)
            self.namesrvs.append(
                Proc(
                    [*RMQ_HA, "namesrv", "-c", str(conf)],
                    self.tmp / f"namesrv-{i}.log",
                    self.tmp / f"namesrv-{i}.ready",
                )
            )
        self.broker_ports = free_ports(self.replicas)
        for i in range(self.replicas):
            values: dict[str, Any] = {
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
            conf = write_properties(self.tmp / f"broker-{i}.conf", values)
            self.brokers.append(
                Proc(
                    [*RMQ_HA, "broker", "-c", str(conf)],
                    self.tmp / f"broker-{i}.log",
                    self.tmp / f"broker-{i}.ready",
                    self.broker_env,
                )
            )

    def broker_addr(self, i: int) -> str:
        return f"127.0.0.1:{self.broker_ports[i]}"

    async def start(self) -> None:
        for p in self.namesrvs:
            p.start()
        for p in self.namesrvs:
            await p.wait_ready()
        for i in range(self.replicas):
            self.brokers[i].start()
        for i in range(self.replicas):
            await self.brokers[i].wait_ready()

    def stop(self) -> None:
        for p in [*self.brokers, *self.namesrvs]:
            p.kill()

    def logs(self) -> str:
        out = []
        for p in [*self.brokers, *self.namesrvs]:
            if p.log.exists():
                out.append(f"--- {p.log.name}\n{p.log.read_text()[-3000:]}")
        return "\n".join(out)

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
        """The index of the broker that says it is master (and is not `exclude`)."""
        with trio.move_on_after(timeout_s):
            while True:
                for i, p in enumerate(self.brokers):
                    if i == exclude or not p.alive:
                        continue
                    st = await self.status(i)
                    if st is not None and st["role"] == "MASTER":
                        return i
                await trio.sleep(0.1)
        raise AssertionError(f"no master within {timeout_s} s\n{self.logs()}")

    async def wait_sync_state_set(self, i: int, size: int, timeout_s: float = 20) -> list[int]:
        with trio.move_on_after(timeout_s):
            while True:
                st = await self.status(i)
                if st is not None and len(st["syncStateSet"]) == size:
                    return list(st["syncStateSet"])
                await trio.sleep(0.1)
        raise AssertionError(f"SyncStateSet of broker {i} never reached {size}\n{self.logs()}")


@dataclass
class Acked:
    """Sends acknowledged with SEND_OK, by value."""

    values: dict[str, tuple[int, int]] = field(default_factory=dict)  # body -> (queue, offset)


async def send_values(
    namesrv: str, topic: str, values: list[str], acked: Acked, *, timeout_s: float = 3.0
) -> list[str]:
    """Sends each value once (no retry); returns the values not acknowledged with SEND_OK."""
    failed: list[str] = []
    cfg = ProducerConfig(
        client=ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.5),
        send_msg_timeout_s=timeout_s,
        retry_times_when_send_failed=0,
    )
    async with Producer("ha-test-producer", namesrv, config=cfg) as p:
        for v in values:
            try:
                r = await p.send(topic, v.encode())
            except ClientError:
                failed.append(v)
                continue
            if r.status.name == "SEND_OK":
                acked.values[v] = (r.queue.queue_id, r.queue_offset)
            else:
                failed.append(v)
    return failed


async def read_all(namesrv: str, topic: str) -> list[str]:
    """Every message of every queue of `topic`, from each queue's minimum to maximum."""
    out: list[str] = []
    cc = ClientConfig(client_ip="127.0.0.1")
    async with (
        Admin(namesrv, config=cc) as admin,
        PullConsumer("ha-test-drain", namesrv, config=cc) as pc,
    ):
        route = await admin.route(topic)
        for qd in route.queue_datas:
            for q in range(qd.read_queue_nums):
                mq = MessageQueue(topic=topic, broker_name=qd.broker_name, queue_id=q)
                off = await admin.min_offset(mq)
                hi = await admin.max_offset(mq)
                while off < hi:
                    res = await pc.pull(mq, "*", off, 32)
                    for m in res.messages:
                        out.append(m.body.decode())
                    if res.next_begin_offset <= off:
                        break
                    off = res.next_begin_offset
    return out
