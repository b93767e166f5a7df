"""A broker's controller-facing side and nothing else, for tests and the benchmark.

It does what RocketMQ's ReplicasManager does against a controller group (section 2.11-2.12):
GET_NEXT_BROKER_ID -> APPLY_BROKER_ID -> REGISTER_BROKER, BROKER_HEARTBEAT (904, oneway) to
every controller, ELECT_MASTER, ALTER_SYNC_STATE_SET; and it listens on its own address for
NOTIFY_BROKER_ROLE_CHANGED (1008), which it records. `stop()` closes its connections, which a
controller treats as the broker going away.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.net.server import RemotingServer
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
)
from rmq_ha.protocol.models import SyncStateSet


class RefusedError(RuntimeError):
    def __init__(self, what: str, resp: m.Response) -> None:
        super().__init__(f"{what} refused: {resp.code!r} {resp.remark}")
        self.response = resp


class TestBroker:
    __test__ = False  # not a pytest class

    def __init__(
        self,
        controllers: list[str],
        broker_name: str = "broker-a",
        cluster: str = "DefaultCluster",
        *,
        heartbeat_timeout_ms: int = 3000,
        election_priority: int | None = None,
        timeout_s: float = 3.0,
    ) -> None:
        self.controllers = controllers
        self.broker_name = broker_name
        self.cluster = cluster
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.election_priority = election_priority
        self.timeout_s = timeout_s
        self.broker_id: int | None = None
        self.epoch = 0
        self.max_offset = 0
        self.notices: list[tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]] = []
        self.notice_event = trio.Event()
        d = Dispatcher("test-broker")
        d.register(RC.NOTIFY_BROKER_ROLE_CHANGED, self._on_notice)
        self.server = RemotingServer(d, "127.0.0.1", 0)
        self.client = RemotingClient()
        self.cc = ControllerClient(self.client, controllers, timeout_s)
        self._cancel = trio.CancelScope()
        self._nursery: trio.Nursery | None = None

    @property
    def address(self) -> str:
        return self.server.address

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serves notices (and heartbeats, once `join` gave an id) until `stop`."""
        with self._cancel:
            async with self.client, trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.server.serve)
                task_status.started(self.address)
                await trio.sleep_forever()

    def start_heartbeats(self, interval_s: float) -> None:
        """Heartbeats every `interval_s` until `stop` (call after `run` started)."""
        assert self._nursery is not None
        self._nursery.start_soon(self.heartbeat_loop, interval_s)

    def stop(self) -> None:
        """Stops serving and heartbeating; every connection closes."""
        self._cancel.cancel()

    async def _on_notice(self, conn: Connection, cmd: RemotingCommand) -> None:
        header = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
        self.notices.append((header, SyncStateSet.from_json(cmd.body)))
        self.notice_event.set()
        self.notice_event = trio.Event()

    async def request(self, req: m.Request, deadline_s: float | None = None) -> Any:
        return await self.cc.request(req, deadline_s)

    async def _ok(self, req: m.Request, deadline_s: float | None) -> Any:
        resp = await self.request(req, deadline_s)
        if not resp.ok:
            raise RefusedError(type(req).__name__, resp)
        return resp

    async def join(self, deadline_s: float = 10.0) -> m.RegisterBrokerResponse:
        """Gets an id, applies it, registers, and sends a first heartbeat."""
        nxt = await self._ok(m.GetNextBrokerIdRequest(self.cluster, self.broker_name), deadline_s)
        broker_id = nxt.next_broker_id
        code = f"{self.address};{int(time.time() * 1000)}"
        await self._ok(
            m.ApplyBrokerIdRequest(self.cluster, self.broker_name, broker_id, code), deadline_s
        )
        self.broker_id = broker_id
        reg = m.RegisterBrokerRequest(self.cluster, self.broker_name, broker_id, self.address)
        resp: m.RegisterBrokerResponse = await self._ok(reg, deadline_s)
        await self.heartbeat()
        return resp

    def heartbeat_header(self) -> BrokerHeartbeatRequestHeader:
        return BrokerHeartbeatRequestHeader(
            cluster_name=self.cluster,
            broker_addr=self.address,
            broker_name=self.broker_name,
            broker_id=self.broker_id,
            epoch=self.epoch,
            max_offset=self.max_offset,
            confirm_offset=self.max_offset,
            heartbeat_timeout_mills=self.heartbeat_timeout_ms,
            election_priority=self.election_priority,
        )

    async def heartbeat(self) -> int:
        """One oneway heartbeat to every controller; how many it reached."""
        ext = self.heartbeat_header().to_ext()
        sent = 0
        for addr in self.controllers:
            cmd = RemotingCommand.request(RC.BROKER_HEARTBEAT, ext, oneway=True)
            try:
                with trio.fail_after(self.timeout_s):
                    await self.client.invoke_oneway(addr, cmd)
                sent += 1
            except (RemotingError, trio.TooSlowError):
                self.client.close_connection(addr)
        return sent

    async def heartbeat_loop(self, interval_s: float) -> None:
        while True:
            await self.heartbeat()
            await trio.sleep(interval_s)

    async def elect(self, deadline_s: float | None = None) -> m.ElectMasterResponse:
        """A broker-triggered election (brokerElect)."""
        assert self.broker_id is not None
        req = m.ElectMasterRequest.of_broker_trigger(self.cluster, self.broker_name, self.broker_id)
        resp: m.ElectMasterResponse = await self.request(req, deadline_s)
        return resp

    async def replica_info(self) -> m.GetReplicaInfoResponse:
        resp: m.GetReplicaInfoResponse = await self.request(
            m.GetReplicaInfoRequest(self.broker_name)
        )
        return resp
