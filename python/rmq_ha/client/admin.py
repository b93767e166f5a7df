"""Administration (DefaultMQAdminExt's calls behind mqadmin): cluster list, routes, topic
creation and deletion, queue and consumer offsets, offset lookup and reset by time, broker
config and runtime info, subscription groups, client connections, message queries by id, key
and offset. `rmq_ha.mqadmin` is the command line over it.

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

from rmq_ha.client.api import PULL_FLAG_SUBSCRIPTION
from rmq_ha.client.config import ClientConfig, parse_namesrv_addrs
from rmq_ha.client.errors import (
    BrokerNotFoundError,
    BrokerResponseError,
    ClientStateError,
    RouteNotFoundError,
)
from rmq_ha.client.instance import ClientInstance
from rmq_ha.client.message import MessageExt, decode_messages
from rmq_ha.config import parse_properties
from rmq_ha.errors import RemotingError
from rmq_ha.protocol.admin import (
    UNIQUE_MSG_QUERY_FLAG,
    BrokerStatsData,
    BrokerWritePermRequestHeader,
    CloneGroupOffsetRequestHeader,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicsByClusterRequestHeader,
    GetTopicStatsInfoRequestHeader,
    GroupList,
    ProducerConnection,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicList,
    TopicStatsTable,
    ViewBrokerStatsDataRequestHeader,
)
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import ViewMessageRequestHeader
from rmq_ha.protocol.message import parse_offset_msg_id
from rmq_ha.protocol.models import (
    MASTER_ID,
    ClusterInfo,
    ConsumerOffsetSerializeWrapper,
    KVTable,
    MessageQueue,
    TopicConfig,
    TopicRouteData,
)
from rmq_ha.protocol.perm import PERM_RW

AUTO_CREATE_TOPIC_KEY = "TBW102"
#: The consumer group of queryMsgByOffset's one-message pull (it commits nothing).
ADMIN_PULL_GROUP = "TOOLS_CONSUMER"


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
                QueueOffsets(
                    mq, await api.min_offset(addr, mq), await api.max_offset(addr, mq), consumer
                )
            )
        return out

    # ---- mqadmin's commands (rmq_ha.mqadmin) -------------------------------------------------

    async def _namesrv_each(
        self, code: int, ext: dict[str, str] | None = None
    ) -> list[tuple[str, RemotingCommand | str]]:
        """A request to every name server: (address, answer or why there is none)."""
        out: list[tuple[str, RemotingCommand | str]] = []
        for addr in self.namesrv_addrs:
            try:
                out.append((addr, await self.instance.api.call(addr, code, ext)))
            except (BrokerResponseError, RemotingError) as e:
                out.append((addr, str(e)))
        return out

    async def set_write_perm(self, broker_name: str, writable: bool) -> list[tuple[str, int | str]]:
        """mqadmin wipeWritePerm / addWritePerm: WIPE_WRITE_PERM_OF_BROKER (205) or
        ADD_WRITE_PERM_OF_BROKER (327) on every name server. Returns (name server, topics
        changed, or why it failed)."""
        code = RC.ADD_WRITE_PERM_OF_BROKER if writable else RC.WIPE_WRITE_PERM_OF_BROKER
        ext = BrokerWritePermRequestHeader(broker_name=broker_name).to_ext()
        out: list[tuple[str, int | str]] = []
        for addr, r in await self._namesrv_each(code, ext):
            if isinstance(r, str):
                out.append((addr, r))
            elif r.code != Resp.SUCCESS:
                out.append((addr, f"code {r.code}: {r.remark}"))
            else:
                key = "addTopicCount" if writable else "wipeTopicCount"
                out.append((addr, int(r.ext_fields.get(key, "0"))))
        return out

    async def topic_list(self, cluster: str | None = None) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), or GET_TOPICS_BY_CLUSTER (224)."""
        if cluster is None:
            resp = await self.instance.routes.invoke_namesrv(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            ext = GetTopicsByClusterRequestHeader(cluster=cluster).to_ext()
            resp = await self.instance.routes.invoke_namesrv(RC.GET_TOPICS_BY_CLUSTER, ext)
        if resp.code != Resp.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, "name server")
        return sorted(TopicList.from_json(resp.body).topic_list)

    async def topic_consumed_by(self, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (300) on the topic's brokers: the groups consuming it."""
        groups: set[str] = set()
        for addr in sorted(set((await self._route_masters(topic)).values())):
            h = QueryTopicConsumeByWhoRequestHeader(topic=topic)
            resp = await self.instance.api.call(addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, h.to_ext())
            groups |= GroupList.from_json(resp.body).group_list
        return sorted(groups)

    async def broker_addrs(
        self, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        """One broker address (-b), or the masters of a cluster (-c)."""
        if broker_addr:
            return [broker_addr]
        if not cluster:
            raise ValueError("give a cluster (-c) or a broker address (-b)")
        addrs = list((await self.master_addrs(cluster)).values())
        if not addrs:
            raise BrokerNotFoundError(f"cluster {cluster!r} has no master", cluster)
        return addrs

    async def broker_name_of(self, addr: str) -> str:
        """The broker (group) name serving at `addr`, from the cluster info."""
        info = await self.cluster_info()
        for name, bd in info.broker_addr_table.items():
            if addr in bd.broker_addrs.values():
                return name
        raise BrokerNotFoundError(f"no broker at {addr} in the cluster info", addr)

    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG (26): the broker's config as RocketMQ's key=value text."""
        resp = await self.instance.api.call(addr, RC.GET_BROKER_CONFIG)
        return parse_properties((resp.body or b"").decode("utf-8", "replace"))

    async def update_broker_config(self, addr: str, values: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG (25); BrokerResponseError with the broker's reason if refused."""
        body = "".join(f"{k}={v}\n" for k, v in values.items()).encode()
        await self.instance.api.call(addr, RC.UPDATE_BROKER_CONFIG, body=body)

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO (28)."""
        resp = await self.instance.api.call(addr, RC.GET_BROKER_RUNTIME_INFO)
        return KVTable.from_json(resp.body).table

    async def clone_group_offset(
        self, src: str, dest: str, topic: str, *, offline: bool = False
    ) -> list[str]:
        """mqadmin cloneGroupOffset: CLONE_GROUP_OFFSET (314) on every master of the topic's
        route. Returns the brokers."""
        ext = CloneGroupOffsetRequestHeader(
            src_group=src, dest_group=dest, topic=topic, offline=offline
        ).to_ext()
        addrs = sorted((await self._route_masters(topic)).values())
        for addr in addrs:
            await self.instance.api.call(addr, RC.CLONE_GROUP_OFFSET, ext)
        return addrs

    async def topic_stats_data(
        self, topic: str, group: str | None = None
    ) -> tuple[float, int] | None:
        """VIEW_BROKER_STATS_DATA (315) on every master of the topic's route, summed: (messages
        per second over the last minute, messages in the last day) stored to `topic`, or with
        `group` served to it from `topic`; None when no broker counted any."""
        name, key = ("GROUP_GET_NUMS", f"{topic}@{group}") if group else ("TOPIC_PUT_NUMS", topic)
        ext = ViewBrokerStatsDataRequestHeader(stats_name=name, stats_key=key).to_ext()
        tps, day, seen = 0.0, 0, False
        for addr in sorted((await self._route_masters(topic)).values()):
            resp = await self.instance.api.call(
                addr, RC.VIEW_BROKER_STATS_DATA, ext, ok=(Resp.SUCCESS, Resp.SYSTEM_ERROR)
            )
            if resp.code != Resp.SUCCESS:
                continue  # nothing counted on that broker ("The stats <...> not exist")
            data = BrokerStatsData.from_json(resp.body)
            tps += data.stats_minute.tps
            day += data.stats_day.sum
            seen = True
        return (tps, day) if seen else None

    async def broker_consume_stats(self, addr: str, is_order: bool = False) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS (317): every subscription group's progress on one broker."""
        ext = GetConsumeStatsInBrokerHeader(is_order=is_order).to_ext()
        resp = await self.instance.api.call(addr, RC.GET_BROKER_CONSUME_STATS, ext)
        return ConsumeStatsList.from_json(resp.body)

    async def _route_masters(self, topic: str) -> dict[str, str]:
        """brokerName -> master address of the brokers serving `topic`."""
        route = await self.route(topic)
        out = {}
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(MASTER_ID)
            if addr is None and bd.broker_addrs:  # no master: the smallest-id replica
                addr = bd.broker_addrs[min(bd.broker_addrs)]
            if addr:
                out[bd.broker_name] = addr
        return out

    async def topic_stats(self, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO (202) of every broker of the topic's route, merged."""
        merged = TopicStatsTable()
        for _name, addr in sorted((await self._route_masters(topic)).items()):
            h = GetTopicStatsInfoRequestHeader(topic=topic)
            resp = await self.instance.api.call(addr, RC.GET_TOPIC_STATS_INFO, h.to_ext())
            merged.offset_table.update(TopicStatsTable.from_json(resp.body).offset_table)
        return merged

    async def consume_stats(
        self, group: str, topic: str | None = None, *, cluster: str | None = None
    ) -> ConsumeStats:
        """GET_CONSUME_STATS (208) merged over the topic's brokers, or (no topic) over every
        master of `cluster` (all clusters when None)."""
        if topic:
            addrs = list((await self._route_masters(topic)).values())
        else:
            info = await self.cluster_info()
            clusters = [cluster] if cluster else info.retrieve_all_cluster_names()
            addrs = [a for c in clusters for a in (await self.master_addrs(c)).values()]
        merged = ConsumeStats()
        for addr in sorted(set(addrs)):
            h = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
            resp = await self.instance.api.call(addr, RC.GET_CONSUME_STATS, h.to_ext())
            got = ConsumeStats.from_json(resp.body)
            merged.offset_table.update(got.offset_table)
            merged.consume_tps += got.consume_tps
        return merged

    async def _every_master(self, cluster: str | None) -> list[str]:
        info = await self.cluster_info()
        clusters = [cluster] if cluster else info.retrieve_all_cluster_names()
        return sorted({a for c in clusters for a in (await self.master_addrs(c)).values()})

    async def consumer_connection(
        self, group: str, cluster: str | None = None
    ) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST (203) from every master, connections merged;
        BrokerResponseError(CONSUMER_NOT_ONLINE) when no broker knows the group online."""
        merged: ConsumerConnection | None = None
        last: BrokerResponseError | None = None
        for addr in await self._every_master(cluster):
            h = GetConsumerConnectionListRequestHeader(consumer_group=group)
            try:
                resp = await self.instance.api.call(
                    addr, RC.GET_CONSUMER_CONNECTION_LIST, h.to_ext()
                )
            except BrokerResponseError as e:
                last = e
                continue
            got = ConsumerConnection.from_json(resp.body)
            if merged is None:
                merged = got
                continue
            seen = {c.client_id for c in merged.connection_set}
            merged.connection_set += [c for c in got.connection_set if c.client_id not in seen]
            merged.subscription_table.update(got.subscription_table)
        if merged is None:
            raise last or BrokerNotFoundError("no master broker answered", group)
        return merged

    async def producer_connection(self, group: str, topic: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST (204) from the topic's brokers, merged."""
        merged = ProducerConnection()
        last: BrokerResponseError | None = None
        for addr in sorted(set((await self._route_masters(topic)).values())):
            h = GetProducerConnectionListRequestHeader(producer_group=group)
            try:
                resp = await self.instance.api.call(
                    addr, RC.GET_PRODUCER_CONNECTION_LIST, h.to_ext()
                )
            except BrokerResponseError as e:
                last = e
                continue
            seen = {c.client_id for c in merged.connection_set}
            got = ProducerConnection.from_json(resp.body).connection_set
            merged.connection_set += [c for c in got if c.client_id not in seen]
        if not merged.connection_set and last is not None:
            raise last
        return merged

    async def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """mqadmin deleteTopic: DELETE_TOPIC_IN_BROKER (215) on every master of `cluster`,
        then DELETE_TOPIC_IN_NAMESRV (216) on every name server. Returns the brokers."""
        addrs = await self.broker_addrs(cluster=cluster)
        for addr in addrs:
            h = DeleteTopicRequestHeader(topic=topic)
            await self.instance.api.call(addr, RC.DELETE_TOPIC_IN_BROKER, h.to_ext())
        ext = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster).to_ext()
        failed = [
            f"{a}: {r}"
            for a, r in await self._namesrv_each(RC.DELETE_TOPIC_IN_NAMESRV, ext)
            if isinstance(r, str) or r.code != Resp.SUCCESS
        ]
        if failed:
            raise RouteNotFoundError(f"delete {topic} on name servers: {'; '.join(failed)}", topic)
        self.instance.routes.forget(topic)
        return addrs

    async def update_subscription_group(self, addr: str, cfg: SubscriptionGroupConfig) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200)."""
        await self.instance.api.call(
            addr, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=cfg.to_json()
        )

    async def subscription_groups(self, addr: str) -> dict[str, SubscriptionGroupConfig]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)."""
        resp = await self.instance.api.call(addr, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return SubscriptionGroupWrapper.from_json(resp.body).subscription_group_table

    async def consumer_groups(self, cluster: str | None = None) -> list[str]:
        """Every consumer group the masters know: those with a subscription-group config
        (201) and those with committed offsets (GET_ALL_CONSUMER_OFFSET, 43)."""
        groups: set[str] = set()
        for addr in await self._every_master(cluster):
            groups.update(await self.subscription_groups(addr))
            resp = await self.instance.api.call(addr, RC.GET_ALL_CONSUMER_OFFSET)
            table = ConsumerOffsetSerializeWrapper.from_json(resp.body).offset_table
            groups.update(key.split("@", 1)[1] for key in table if "@" in key)
        return sorted(groups)

    async def delete_subscription_group(
        self, addr: str, group: str, *, clean_offset: bool = False
    ) -> None:
        """DELETE_SUBSCRIPTIONGROUP (207)."""
        h = DeleteSubscriptionGroupRequestHeader(group_name=group, clean_offset=clean_offset)
        await self.instance.api.call(addr, RC.DELETE_SUBSCRIPTIONGROUP, h.to_ext())

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID (33) at the store host the offset message id names."""
        host, port, offset = parse_offset_msg_id(offset_msg_id)
        addr = f"{host}:{port}"
        h = ViewMessageRequestHeader(offset=offset)
        resp = await self.instance.api.call(addr, RC.VIEW_MESSAGE_BY_ID, h.to_ext())
        try:
            name = await self.broker_name_of(addr)
        except BrokerNotFoundError:
            name = ""
        msgs = decode_messages(resp.body, name)
        if not msgs:
            raise BrokerResponseError(Resp.QUERY_NOT_FOUND, "empty answer", addr)
        return msgs[0]

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int = 2**63 - 1,
        unique: bool = False,
    ) -> list[MessageExt]:
        """QUERY_MESSAGE (12) on every broker of the topic's route: messages whose KEYS hold
        `key` (or, with `unique`, whose UNIQ_KEY is `key`, i.e. a client message id), the
        newest `max_num` of them, newest first."""
        out: list[MessageExt] = []
        for name, addr in sorted((await self._route_masters(topic)).items()):
            h = QueryMessageRequestHeader(
                topic=topic,
                key=key,
                max_num=max_num,
                begin_timestamp=begin_ms,
                end_timestamp=end_ms,
            )
            ext = h.to_ext()
            if unique:
                ext[UNIQUE_MSG_QUERY_FLAG] = "true"
            resp = await self.instance.api.call(
                addr, RC.QUERY_MESSAGE, ext, ok=(Resp.SUCCESS, Resp.QUERY_NOT_FOUND)
            )
            if resp.code == Resp.SUCCESS:
                out += decode_messages(resp.body, name)
        # the newest `max_num` of every broker's answer, newest first (RocketMQ's index)
        newest = sorted(out, key=lambda m: (m.store_timestamp_ms, m.commit_log_offset))
        return newest[::-1][:max_num]

    async def query_by_offset(self, mq: MessageQueue, offset: int) -> MessageExt | None:
        """The message at `offset` of the queue (a one-message pull, as mqadmin
        queryMsgByOffset), None when there is none."""
        addr = await self._addr(mq)
        r = await self.instance.api.pull(
            addr,
            mq.broker_name,
            group=ADMIN_PULL_GROUP,
            mq=mq,
            offset=offset,
            max_nums=1,
            # With its subscription, as a pull consumer sends: RocketMQ refuses a pull of a
            # group it has no heartbeat from otherwise ("the consumer's group info not exist").
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            subscription="*",
        )
        for m in r.messages:
            if m.queue_offset == offset:
                return m
        return None

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET (222) on every broker of the topic: the group's
        offsets move to the first message stored at or after `timestamp_ms` (only backwards
        unless `force`). Returns the new offsets. A broker that refuses with
        CONSUMER_NOT_ONLINE (RocketMQ resets only through online clients) gets mqadmin's
        fallback: each queue's offset searched by time and committed with
        UPDATE_CONSUMER_OFFSET."""
        out: dict[MessageQueue, int] = {}
        for name, addr in sorted((await self._route_masters(topic)).items()):
            h = ResetOffsetRequestHeader(
                topic=topic, group=group, timestamp=timestamp_ms, is_force=force
            )
            code = RC.INVOKE_BROKER_TO_RESET_OFFSET
            ok = (Resp.SUCCESS, Resp.CONSUMER_NOT_ONLINE)
            resp = await self.instance.api.call(addr, code, h.to_ext(), ok=ok)
            if resp.code == Resp.SUCCESS:
                out.update(ResetOffsetBody.from_json(resp.body).offset_table)
                continue
            out.update(await self._reset_offline(addr, name, group, topic, timestamp_ms, force))
        return out

    async def _reset_offline(
        self, addr: str, name: str, group: str, topic: str, timestamp_ms: int, force: bool
    ) -> dict[MessageQueue, int]:
        api = self.instance.api
        route = await self.route(topic)
        qd = next((q for q in route.queue_datas if q.broker_name == name), None)
        out: dict[MessageQueue, int] = {}
        for qid in range(qd.read_queue_nums if qd is not None else 0):
            mq = MessageQueue(topic, name, qid)
            target = await api.search_offset(addr, mq, timestamp_ms)
            current = await api.query_consumer_offset(addr, group, mq)
            offset = target if force or current is None or target < current else current
            await api.update_consumer_offset(addr, group, mq, offset, oneway=False)
            out[mq] = offset
        return out
