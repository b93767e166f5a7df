"""Administration (a small DefaultMQAdminExt): cluster list, routes, topic creation on every
master of a cluster, queue offsets, consumer offsets, offset lookup by time.

    async with Admin("127.0.0.1:9876") as admin:
        await admin.create_topic("Orders", cluster="DefaultCluster", queue_nums=8)
        route = await admin.route("Orders")
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType

import trio

from rmq_ha.client.config import ClientConfig, parse_namesrv_addrs
from rmq_ha.client.errors import BrokerNotFoundError, ClientStateError, RouteNotFoundError
from rmq_ha.client.instance import ClientInstance
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.models import MASTER_ID, ClusterInfo, MessageQueue, TopicConfig, TopicRouteData
from rmq_ha.protocol.perm import PERM_RW

AUTO_CREATE_TOPIC_KEY = "TBW102"


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    consumer_offset: int | None = None

    @property
    def lag(self) -> int | None:
        if self.consumer_offset is None:
            return None
        return max(0, self.max_offset - self.consumer_offset)


class Admin:
    def __init__(
        self, namesrv_addrs: str | Sequence[str], *, config: ClientConfig | None = None
    ) -> None:
        self.cfg = config or ClientConfig()
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self._instance: ClientInstance | None = None
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Admin:
        stack = AsyncExitStack()
        self._instance = await stack.enter_async_context(
            ClientInstance(self.namesrv_addrs, self.cfg)
        )
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None
        await self._stack.aclose()
        return None

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError("admin is not started (use `async with`)")
        return self._instance

    # ---- name server -----------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        resp = await self.instance.routes.invoke_namesrv(RC.GET_BROKER_CLUSTER_INFO)
        if resp.code != Resp.SUCCESS:
            raise RouteNotFoundError(f"cluster info: {resp.code} {resp.remark}", "")
        return ClusterInfo.from_json(resp.body)

    async def route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC (RouteNotFoundError if no name server has it)."""
        return await self.instance.routes.fetch_route(topic)

    async def master_addrs(self, cluster: str) -> dict[str, str]:
        """brokerName -> master address of every broker group of `cluster`."""
        info = await self.cluster_info()
        if cluster not in info.cluster_addr_table:
            raise BrokerNotFoundError(f"cluster {cluster!r} not found", cluster)
        out: dict[str, str] = {}
        for name in sorted(info.cluster_addr_table[cluster]):
            bd = info.broker_addr_table.get(name)
            if bd is not None and MASTER_ID in bd.broker_addrs:
                out[name] = bd.broker_addrs[MASTER_ID]
        return out

    # ---- topics ----------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        queue_nums: int = 8,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = PERM_RW,
        order: bool = False,
        wait_for_route_s: float = 0.0,
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on every master of `cluster` (mqadmin updateTopic -c), or
        on one broker. Returns the broker addresses updated. With `wait_for_route_s`, waits
        until a name server serves a route naming every one of those brokers."""
        if (cluster is None) == (broker_addr is None):
            raise ValueError("give exactly one of cluster= or broker_addr=")
        addrs = (
            [broker_addr]
            if broker_addr
            else list((await self.master_addrs(cluster or "")).values())
        )
        if not addrs:
            raise BrokerNotFoundError(f"cluster {cluster!r} has no master", cluster or "")
        tc = TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums if read_queue_nums is not None else queue_nums,
            write_queue_nums=write_queue_nums if write_queue_nums is not None else queue_nums,
            perm=perm,
            order=order,
        )
        for addr in addrs:
            await self.instance.api.create_topic(addr, tc, AUTO_CREATE_TOPIC_KEY)
        if wait_for_route_s > 0:
            await self._wait_for_route(topic, set(addrs), wait_for_route_s)
        return addrs

    async def _wait_for_route(self, topic: str, addrs: set[str], timeout_s: float) -> None:
        with trio.fail_after(timeout_s):
            while True:
                try:
                    route = await self.route(topic)
                    seen = {a for bd in route.broker_datas for a in bd.broker_addrs.values()}
                    if addrs <= seen:
                        return
                except RouteNotFoundError:
                    pass
                await trio.sleep(0.05)

    # ---- offsets ---------------------------------------------------------------------------

    async def _addr(self, mq: MessageQueue) -> str:
        routes = self.instance.routes
        addr = routes.find_broker_addr(mq.broker_name)
        if addr is None:
            await routes.update(mq.topic)
            addr = routes.find_broker_addr(mq.broker_name)
        if addr is None:
            raise BrokerNotFoundError(f"broker {mq.broker_name} not found", mq.broker_name)
        return addr

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.instance.api.max_offset(await self._addr(mq), mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.instance.api.min_offset(await self._addr(mq), mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first offset stored at or after `timestamp_ms`."""
        return await self.instance.api.search_offset(await self._addr(mq), mq, timestamp_ms)

    async def topic_offsets(self, topic: str, group: str | None = None) -> list[QueueOffsets]:
        """Min/max offset of every readable queue, plus the group's committed offset."""
        mqs = await self.instance.routes.subscribe_queues(topic)
        if mqs is None:
            raise RouteNotFoundError(f"no route info of this topic: {topic}", topic)
        out: list[QueueOffsets] = []
        for mq in sorted(mqs):
            addr = await self._addr(mq)
            api = self.instance.api
            consumer = await api.query_consumer_offset(addr, group, mq) if group else None
            out.append(
                QueueOffsets(mq, await api.min_offset(addr, mq), await api.max_offset(addr, mq),
                             consumer)
            )  # fmt: skip
        return out
