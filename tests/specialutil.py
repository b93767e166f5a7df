"""Support for the special-message tests: a name server and one broker over loopback whose
`Broker` object the test can reach (to look at its store, stop and start its special
services, or swap its escape), and which can be restarted on the same store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from rmq_ha.broker.broker import Broker, open_broker
from rmq_ha.config import BrokerConfig, NamesrvConfig
from rmq_ha.nameserver.server import Nameserver

#: 18 short levels: a retry's default level (3 + reconsume times) waits 600 ms.
FAST_LEVELS = "200ms 400ms 600ms 800ms 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


async def run_broker(
    cfg: BrokerConfig, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED
) -> None:
    """`broker.serve()`, but reporting the Broker object (`open_broker`)."""
    async with open_broker(cfg) as broker:
        task_status.started(broker)
        await trio.sleep_forever()


@dataclass
class SpecialEnv:
    namesrv: str
    cfg: BrokerConfig
    nursery: trio.Nursery
    broker: Broker = field(init=False)
    _scope: trio.CancelScope = field(init=False)
    _stopped: trio.Event = field(init=False)

    @property
    def addr(self) -> str:
        return self.broker.address

    async def broker_status(self) -> dict[str, Any]:
        """GET_BROKER_EPOCH_CACHE over the wire (what admin tools see)."""
        import json

        from rmq_ha.net.client import RemotingClient
        from rmq_ha.protocol.codes import RequestCode
        from rmq_ha.protocol.command import RemotingCommand

        async with RemotingClient() as c:
            r = await c.invoke(
                self.addr, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), 5.0
            )
        out: dict[str, Any] = json.loads(r.body or b"{}")
        return out

    def max_offset(self, topic: str, queue_id: int = 0) -> int:
        return self.broker.store.native.queue_max_offset(topic, queue_id)

    async def start_broker(self) -> Broker:
        scope = trio.CancelScope()
        stopped = trio.Event()

        async def run(*, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await run_broker(self.cfg, task_status=task_status)
            finally:
                stopped.set()

        self._scope, self._stopped = scope, stopped
        self.broker = await self.nursery.start(run)
        return self.broker

    async def stop_broker(self) -> None:
        self._scope.cancel()
        await self._stopped.wait()

    async def restart_broker(self) -> Broker:
        await self.stop_broker()
        return await self.start_broker()


@asynccontextmanager
async def special_cluster(tmp_path: Path, **broker_kw: Any) -> AsyncIterator[SpecialEnv]:
    async with trio.open_nursery() as n:
        ns = Nameserver(NamesrvConfig(listen_port=0))
        await n.start(ns.serve)
        cfg = BrokerConfig(
            listen_port=0,
            namesrv_addr=ns.address,
            store_path_root_dir=str(tmp_path / "store"),
            **({"commitlog_segment_bytes": 1 << 20} | broker_kw),
        )
        env = SpecialEnv(ns.address, cfg, n)
        await env.start_broker()
        yield env
        n.cancel_scope.cancel()


async def eventually(pred: Any, timeout_s: float = 10.0, interval_s: float = 0.02) -> None:
    with trio.fail_after(timeout_s):
        while not pred():
            await trio.sleep(interval_s)
