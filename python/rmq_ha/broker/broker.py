"""The broker role (`rmq-ha broker -c FILE`): a single master for now (replication has its own
issue). It wires the store, the topic/offset/client managers and the request handlers
(send.py, pull.py, and the small ones here) to a remoting server, and keeps itself registered
with every name server: a full registration every registerNameServerPeriod and whenever topics
change, plus a light heartbeat every brokerHeartbeatInterval."""

from __future__ import annotations

import logging

import trio

from rmq_ha.broker.clients import ClientInfo, ClientManager
from rmq_ha.broker.locks import QueueLocks
from rmq_ha.broker.longpoll import PullHold
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.special.services import SpecialServices
from rmq_ha.broker.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfigManager,
    check_topic_name,
)
from rmq_ha.clock import wall_ms as now_ms
from rmq_ha.config import BrokerConfig, BrokerRole
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.net.server import RemotingServer
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    NotifyConsumerIdsChangedRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RegisterBrokerRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from rmq_ha.protocol.models import (
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicConfigSerializeWrapper,
    UnlockBatchRequestBody,
)
from rmq_ha.protocol.perm import PERM_READ, PERM_WRITE
from rmq_ha.protocol.register_body import RegisterBrokerBody, encode_register_body
from rmq_ha.store import AsyncStore, open_store

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, cfg: BrokerConfig, store: AsyncStore, server: RemotingServer) -> None:
        self.cfg = cfg
        self.store = store
        root = cfg.store_root / "config"
        self.topics = TopicConfigManager(
            root / "topics.json",
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_permission=cfg.broker_permission,
            auto_create=cfg.auto_create_topic_enable,
            default_queue_nums=cfg.default_topic_queue_nums,
        )
        self.offsets = ConsumerOffsetManager(root / "consumerOffset.json")
        self.clients = ClientManager()
        self.locks = QueueLocks(cfg.lock_expire_ms)
        self.hold = PullHold()
        # Delayed/transaction/pop services and their request processors (broker/special).
        self.special = SpecialServices(self)
        self.server = server
        server.handler = self._on_request
        self.outbound = RemotingClient()
        self._topics_changed = trio.Event()
        d = Dispatcher("broker")
        from rmq_ha.broker import pull, send

        send.register(d, self)
        pull.register(d, self)
        self.special.register(d)
        d.register(RC.QUERY_CONSUMER_OFFSET, self.query_consumer_offset)
        d.register(RC.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset)
        d.register(RC.GET_MAX_OFFSET, self.get_max_offset)
        d.register(RC.GET_MIN_OFFSET, self.get_min_offset)
        d.register(RC.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset)
        d.register(RC.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time)
        d.register(RC.VIEW_MESSAGE_BY_ID, self.view_message)
        d.register(RC.HEART_BEAT, self.heartbeat)
        d.register(RC.UNREGISTER_CLIENT, self.unregister_client)
        d.register(RC.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)
        d.register(RC.LOCK_BATCH_MQ, self.lock_batch)
        d.register(RC.UNLOCK_BATCH_MQ, self.unlock_batch)
        d.register(RC.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        d.register(RC.GET_ALL_TOPIC_CONFIG, self.all_topic_config)
        self.dispatcher = d

    # ---- addresses -----------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The address announced to name servers and clients."""
        return f"{self.cfg.broker_ip}:{self.server.port}"

    @property
    def store_host(self) -> tuple[str, int]:
        return self.cfg.broker_ip, self.server.port

    async def _on_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if "closed_hook" not in conn.attrs:
            conn.attrs["closed_hook"] = True
            self._nursery.start_soon(self._watch_connection, conn)
        return await self.dispatcher(conn, cmd)

    async def _watch_connection(self, conn: Connection) -> None:
        await conn.wait_closed()
        for group in self.clients.drop_connection(conn):
            await self.notify_consumer_ids_changed(group)

    # ---- lifecycle -----------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        async with self.outbound, trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.server.serve)
            self.topics.persist()
            if self.cfg.namesrv_addrs:
                await self.register_all()
                nursery.start_soon(self._registration_loop)
                nursery.start_soon(self._heartbeat_loop)
            nursery.start_soon(self._housekeeping_loop)
            if self.cfg.broker_id == 0 and self.cfg.broker_role is not BrokerRole.SLAVE:
                # The master runs the special services (the acting-master work moves them).
                await self.special.start(nursery)
            log.info("broker %s ready on %s", self.cfg.broker_name, self.address)
            task_status.started(self.address)
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    self.offsets.persist()

    async def _housekeeping_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.consumer_offset_flush_interval_ms / 1000)
            self.offsets.persist()
            for group in self.clients.expire(now_ms()):
                await self.notify_consumer_ids_changed(group)

    # ---- name servers --------------------------------------------------------------------

    def _register_command(self) -> RemotingCommand:
        h = RegisterBrokerRequestHeader(
            broker_name=self.cfg.broker_name,
            broker_addr=self.address,
            cluster_name=self.cfg.cluster_name,
            ha_server_addr="",
            broker_id=self.cfg.broker_id,
            heartbeat_timeout_millis=self.cfg.broker_not_active_timeout_ms,
            enable_acting_master=False,
        )
        table = {}
        for name, tc in self.topics.table.items():
            # The broker-wide permission caps every topic (a read-only broker, say).
            table[name] = TopicConfig(
                topic_name=name,
                read_queue_nums=tc.read_queue_nums,
                write_queue_nums=tc.write_queue_nums,
                perm=tc.perm & (self.cfg.broker_permission | ~(PERM_READ | PERM_WRITE)),
                topic_sys_flag=tc.topic_sys_flag,
                order=tc.order,
            )
        body = RegisterBrokerBody(
            topic_config_serialize_wrapper=TopicConfigAndMappingSerializeWrapper(
                topic_config_table=table, data_version=self.topics.data_version
            )
        )
        return RemotingCommand.request(RC.REGISTER_BROKER, h.to_ext(), encode_register_body(body))

    async def register_all(self) -> None:
        """Registers with every name server at once; a failure of one is logged, not fatal."""

        async def one(addr: str) -> None:
            try:
                r = await self.outbound.invoke(addr, self._register_command(), 3.0)
                if r.code != Resp.SUCCESS:
                    log.warning("register with %s failed: %s %s", addr, r.code, r.remark)
            except Exception as e:  # one unreachable name server must not stop the others
                log.warning("register with %s failed: %s", addr, e)

        async with trio.open_nursery() as n:
            for addr in self.cfg.namesrv_addrs:
                n.start_soon(one, addr)

    def topics_changed(self) -> None:
        self._topics_changed.set()

    async def _registration_loop(self) -> None:
        while True:
            with trio.move_on_after(self.cfg.register_name_server_period_ms / 1000):
                await self._topics_changed.wait()
            self._topics_changed = trio.Event()
            await self.register_all()

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.broker_heartbeat_interval_ms / 1000)
            h = BrokerHeartbeatRequestHeader(
                cluster_name=self.cfg.cluster_name,
                broker_addr=self.address,
                broker_name=self.cfg.broker_name,
                broker_id=self.cfg.broker_id,
            )
            for addr in self.cfg.namesrv_addrs:
                try:
                    await self.outbound.invoke_oneway(
                        addr, RemotingCommand.request(RC.BROKER_HEARTBEAT, h.to_ext())
                    )
                except Exception as e:  # logged; the next beat retries
                    log.debug("heartbeat to %s failed: %s", addr, e)

    # ---- topics --------------------------------------------------------------------------

    def topic_for_write(
        self, topic: str, default_topic: str | None, queue_nums: int
    ) -> TopicConfig | None:
        tc = self.topics.get(topic)
        if tc is None and self.cfg.auto_create_topic_enable and default_topic:
            tc = self.topics.create_on_send(topic, default_topic, queue_nums)
            if tc is not None:
                self.topics_changed()
        if tc is None and topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            tc = self.retry_topic(topic)
        return tc

    def retry_topic(self, topic: str) -> TopicConfig:
        existed = self.topics.get(topic) is not None
        tc = self.topics.create_system(topic, 1, PERM_READ | PERM_WRITE)
        if not existed:
            self.topics_changed()
        return tc

    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        why = check_topic_name(h.topic)
        if why is not None:
            return cmd.response(Resp.SYSTEM_ERROR, why)
        tc = TopicConfig(
            topic_name=h.topic,
            read_queue_nums=h.read_queue_nums,
            write_queue_nums=h.write_queue_nums,
            perm=h.perm,
            topic_sys_flag=h.topic_sys_flag or 0,
            order=bool(h.order),
        )
        self.topics.update(tc)
        self.topics_changed()
        await self.register_all()
        return cmd.response(Resp.SUCCESS)

    async def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        w = TopicConfigSerializeWrapper(
            topic_config_table=self.topics.table, data_version=self.topics.data_version
        )
        return cmd.response(Resp.SUCCESS, None, None, w.to_json())

    # ---- consumer offsets ----------------------------------------------------------------

    async def query_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if off is None:
            # RocketMQ's rule: a group new to a queue whose messages all still exist starts at
            # 0; otherwise the client decides (consumeFromWhere).
            if (
                h.set_zero_if_not_found is not False
                and self.store.native.queue_min_offset(h.topic, h.queue_id) == 0
            ):
                off = 0
            else:
                return cmd.response(
                    Resp.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
                )
        return cmd.response(
            Resp.SUCCESS, None, QueryConsumerOffsetResponseHeader(offset=off).to_ext()
        )

    async def update_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(Resp.SUCCESS)

    # ---- offsets and messages ------------------------------------------------------------

    async def get_max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = self.store.native.queue_max_offset(h.topic, h.queue_id)
        return cmd.response(Resp.SUCCESS, None, GetMaxOffsetResponseHeader(offset=off).to_ext())

    async def get_min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = self.store.native.queue_min_offset(h.topic, h.queue_id)
        return cmd.response(Resp.SUCCESS, None, GetMinOffsetResponseHeader(offset=off).to_ext())

    async def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = await trio.to_thread.run_sync(
            self.store.native.search_offset_by_timestamp, h.topic, h.queue_id, h.timestamp
        )
        return cmd.response(Resp.SUCCESS, None, SearchOffsetResponseHeader(offset=off).to_ext())

    async def earliest_store_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext(cmd.ext_fields)
        ts = self.store.native.earliest_store_time(h.topic, h.queue_id)
        if ts is None:
            return cmd.response(Resp.SYSTEM_ERROR, f"no message in {h.topic}:{h.queue_id}")
        return cmd.response(
            Resp.SUCCESS, None, GetEarliestMsgStoretimeResponseHeader(timestamp=ts).to_ext()
        )

    async def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(cmd.ext_fields)
        try:
            buf = self.store.native.read_record(h.offset)
        except Exception as e:  # offset out of range, or not a record
            return cmd.response(Resp.SYSTEM_ERROR, f"no message at offset {h.offset}: {e}")
        return cmd.response(Resp.SUCCESS, None, None, buf.tobytes())

    # ---- clients -------------------------------------------------------------------------

    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        hb = HeartbeatData.from_json(cmd.body or b"{}")
        info = ClientInfo(hb.client_id, conn, cmd.language, cmd.version, now_ms())
        for p in hb.producer_data_set:
            self.clients.register_producer(p.group_name, info)
        for c in hb.consumer_data_set:
            # Every consumer group has a retry topic its members subscribe to.
            self.retry_topic(RETRY_GROUP_TOPIC_PREFIX + c.group_name)
            if self.clients.register_consumer(c, info):
                await self.notify_consumer_ids_changed(c.group_name)
        return cmd.response(Resp.SUCCESS)

    async def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(cmd.ext_fields)
        for group in self.clients.unregister(h.client_id, h.producer_group, h.consumer_group):
            await self.notify_consumer_ids_changed(group)
        return cmd.response(Resp.SUCCESS)

    async def notify_consumer_ids_changed(self, group: str) -> None:
        g = self.clients.consumers.get(group)
        if g is None:
            return
        h = NotifyConsumerIdsChangedRequestHeader(consumer_group=group)
        for c in list(g.clients.values()):
            try:
                cmd = RemotingCommand.request(
                    RC.NOTIFY_CONSUMER_IDS_CHANGED, h.to_ext(), oneway=True
                )
                await c.conn.send(cmd)
            except Exception as e:  # a client that went away is dropped by its close hook
                log.debug("notify %s failed: %s", c.client_id, e)

    async def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext(cmd.ext_fields)
        ids = self.clients.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}"
            )
        body = GetConsumerListByGroupResponseBody(consumer_id_list=ids)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = LockBatchRequestBody.from_json(cmd.body or b"{}")
        keys = [(mq.topic, mq.broker_name, mq.queue_id) for mq in req.mq_set]
        got = self.locks.try_lock_batch(
            req.consumer_group or "", keys, req.client_id or "", now_ms()
        )
        body = LockBatchResponseBody(
            lock_ok_mq_set={MessageQueue(topic=t, broker_name=b, queue_id=q) for t, b, q in got}
        )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = UnlockBatchRequestBody.from_json(cmd.body or b"{}")
        keys = [(mq.topic, mq.broker_name, mq.queue_id) for mq in req.mq_set]
        self.locks.unlock_batch(req.consumer_group or "", keys, req.client_id or "")
        return cmd.response(Resp.SUCCESS)


async def serve(
    cfg: BrokerConfig, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """Binds, opens the store, runs the broker until cancelled; reports its address when
    listening. The port is bound first so the store host written into every record (and so
    the offset message ids clients derive from it) is the real one, even with port 0."""
    cfg.store_root.mkdir(parents=True, exist_ok=True)
    server = RemotingServer(Dispatcher("broker"), cfg.broker_ip, cfg.listen_port)
    port = await server.bind()
    async with open_store(
        cfg.store_root,
        segment_size=cfg.commitlog_segment_bytes,
        cq_units_per_file=cfg.cq_units_per_file,
        store_host=f"{cfg.broker_ip}:{port}",
        flush_interval_ms=cfg.flush_interval_ms,
        max_message_size=cfg.max_message_size,
    ) as store:
        await Broker(cfg, store, server).serve(task_status=task_status)
