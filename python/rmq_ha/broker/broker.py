"""The broker role (`rmq-ha broker -c FILE`): a single master for now (replication has its own
issue). It wires the store, the topic/offset/client managers and the request handlers
(send.py, pull.py, and the small ones here) to a remoting server, and keeps itself registered
with every name server: a full registration every registerNameServerPeriod and whenever topics
change, plus a light heartbeat every brokerHeartbeatInterval."""

from __future__ import annotations

import dataclasses
import json
import logging

import trio

from rmq_ha.broker.acting import FENCED_CODES, SYNC_BROKER_MEMBER_PREFIX, ActingMaster
from rmq_ha.broker.clients import ClientInfo, ClientManager
from rmq_ha.broker.ha.replicas import ReplicasManager
from rmq_ha.broker.ha.service import HaService
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
from rmq_ha.config import BrokerConfig
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
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from rmq_ha.protocol.models import (
    EpochEntry,
    EpochEntryCache,
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
        self.offsets = ConsumerOffsetManager(
            root / "consumerOffset.json", cfg.consumer_offset_update_version_step
        )
        self.clients = ClientManager()
        self.locks = QueueLocks(cfg.lock_expire_ms)
        self.hold = PullHold()
        # Delayed/transaction/pop services and their request processors (broker/special).
        self.special = SpecialServices(self)
        self.server = server
        server.handler = self._on_request
        # Replication. Controller mode starts fenced: no writes and no registration until the
        # controller has told this broker its role.
        self.ha = HaService(cfg, store, max(cfg.broker_id, 0))
        self.runtime_broker_id = cfg.broker_id
        self.fenced = cfg.enable_controller_mode
        self.master_addr: str | None = None  # the group's master, as a slave knows it
        #: Slave acting master (RIP-32): this slave is the group's smallest live id while the
        #: master is gone, runs the special services and serves master-only requests.
        self.acting_master = False
        # Replication can make messages visible without a local send (acks move the confirm
        # offset; a slave appends what it copied): parked pulls must re-check then.
        self.ha.master.on_visible = self.ha.slave.on_visible = self.wake_parked_pulls
        self.outbound = RemotingClient()
        self.replicas = ReplicasManager(self) if cfg.enable_controller_mode else None
        # Classic mode: slave acting master, pre-online and FMQ fencing (acting.py).
        self.acting = ActingMaster(self)
        if self.acting.enabled:
            # Old name servers serve the group through this topic's route (compat mode).
            self.topics.create_system(
                SYNC_BROKER_MEMBER_PREFIX + cfg.broker_name, 1, PERM_READ | PERM_WRITE
            )
        self._topics_changed = trio.Event()
        d = Dispatcher("broker")
        from rmq_ha.broker import pull, send

        send.register(d, self)
        pull.register(d, self)
        self.special.register(d)
        self.acting.register(d)
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
        d.register(RC.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offsets)
        d.register(RC.NOTIFY_BROKER_ROLE_CHANGED, self.role_changed_notice)
        d.register(RC.GET_BROKER_EPOCH_CACHE, self.epoch_cache)
        self.dispatcher = d

    # ---- addresses -----------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The address announced to name servers and clients."""
        return f"{self.cfg.broker_ip}:{self.server.port}"

    @property
    def store_host(self) -> tuple[str, int]:
        return self.cfg.broker_ip, self.server.port

    @property
    def nursery(self) -> trio.Nursery:
        """The broker's task group (services started at run time live here)."""
        return self._nursery

    async def _on_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if "closed_hook" not in conn.attrs:
            conn.attrs["closed_hook"] = True
            self._nursery.start_soon(self._watch_connection, conn)
        if self.acting.fenced and cmd.code in FENCED_CODES:
            if cmd.is_oneway:
                return None
            return cmd.response(
                Resp.SERVICE_NOT_AVAILABLE,
                "this master is fenced: it reaches no name server and none of its slaves "
                "(fenceWhenIsolated)",
            )
        return await self.dispatcher(conn, cmd)

    async def _watch_connection(self, conn: Connection) -> None:
        await conn.wait_closed()
        for group in self.clients.drop_connection(conn):
            await self.notify_consumer_ids_changed(group)

    # ---- lifecycle -----------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        async with self.outbound, trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.ha.bind()
            await nursery.start(self.server.serve)
            self.topics.persist()
            nursery.start_soon(self.ha.run)
            if self.replicas is not None:
                nursery.start_soon(self.replicas.run)
                # Ready once the controller knows us, or after a while regardless: the broker
                # stays fenced (no writes, no registration) and keeps retrying the controllers.
                with trio.move_on_after(self.cfg.controller_heartbeat_timeout_ms / 1000 * 3):
                    await self.replicas.running.wait()
                if not self.replicas.running.is_set():
                    log.warning("no controller reachable yet: serving fenced, still retrying")
            else:
                self.ha.start_classic()
            if self.cfg.namesrv_addrs:
                await self.register_all()  # not while pre-online (isolated)
                nursery.start_soon(self._registration_loop)
                if self.replicas is None:
                    # In controller mode BROKER_HEARTBEAT (904) is the controller's (which may
                    # live in the name servers); liveness there comes from registrations.
                    nursery.start_soon(self._heartbeat_loop)
            nursery.start_soon(self._housekeeping_loop)
            if self.replicas is None:
                # Classic mode: the master runs the special services, or the slave acting for
                # it; pre-online first when enabled (acting.py). In controller mode the role
                # changes start and stop them.
                await self.acting.start()
                nursery.start_soon(self.acting.run)
            nursery.start_soon(self._slave_sync_loop)
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
            ha_server_addr=self.ha.ha_address,
            broker_id=self.runtime_broker_id,
            heartbeat_timeout_millis=self.cfg.broker_not_active_timeout_ms,
            enable_acting_master=self.acting.enabled,
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

    async def register_all(self) -> list[RegisterBrokerResponseHeader]:
        """Registers with every name server at once; a failure of one is logged, not fatal.
        A slave takes its master's HA address from the answers. Fenced brokers (controller
        mode before the role is known) and isolated ones (pre-online) do not register."""
        if self.fenced or self.acting.isolated:
            return []
        answers: list[RegisterBrokerResponseHeader] = []

        async def one(addr: str) -> None:
            try:
                r = await self.outbound.invoke(addr, self._register_command(), 3.0)
                if r.code != Resp.SUCCESS:
                    log.warning("register with %s failed: %s %s", addr, r.code, r.remark)
                    return
                answers.append(RegisterBrokerResponseHeader.from_ext(r.ext_fields))
                self.acting.heard_from_namesrv()
            except Exception as e:  # one unreachable name server must not stop the others
                log.warning("register with %s failed: %s", addr, e)

        async with trio.open_nursery() as n:
            for addr in self.cfg.namesrv_addrs:
                n.start_soon(one, addr)
        if not self.ha.is_master and not self.acting_master:
            self._follow_master(answers)
        return answers

    def _follow_master(self, answers: list[RegisterBrokerResponseHeader]) -> bool:
        """Points the HA client at the master the name servers name (the controller's choice
        in controller mode: only that master's address is accepted)."""
        for a in answers:
            if not a.master_addr or not a.ha_server_addr:
                continue
            if self.replicas is not None and a.master_addr != self.master_addr:
                continue
            if self.replicas is None:
                self.master_addr = a.master_addr
            self.ha.slave.set_master(a.ha_server_addr)
            return True
        if self.replicas is None and self.cfg.ha_master_address:
            self.ha.slave.set_master(self.cfg.ha_master_address)
            return True
        return False

    # ---- roles ---------------------------------------------------------------------------

    def role_is_master(self) -> bool:
        return self.ha.is_master and not self.fenced

    def wake_parked_pulls(self) -> None:
        self.hold.notify_ready(self.store.native.queue_max_offset)

    async def became_master(self, epoch: int) -> None:
        """After HaService.change_to_master: topics of every queue in the log exist (a topic
        auto-created on the old master just before it died, #9804), the data version carries
        the epoch (the name server prefers the larger, #6316), then register."""
        self.adopt_topics_from_log()
        self.runtime_broker_id = 0
        self.master_addr = self.address
        self.topics.data_version = self.topics.data_version.next_version(now_ms(), epoch)
        self.topics.persist()
        self.fenced = False
        await self.special.change_status(True, self._nursery)
        await self.register_all()

    async def became_slave(self, epoch: int, master_addr: str | None) -> None:
        self.runtime_broker_id = self.ha.self_id
        self.master_addr = master_addr
        self.topics.data_version = self.topics.data_version.next_version(now_ms(), epoch)
        await self.special.change_status(False, self._nursery)
        self.fenced = False
        self._nursery.start_soon(self._find_master_ha, epoch)

    async def _find_master_ha(self, epoch: int) -> None:
        """Finds the HA address of the controller's master and hands it to the HA client:
        asked of the master itself (EXCHANGE_BROKER_HA_INFO, 906), so a slave follows as soon
        as the master has taken its role, however slow or cut off the name servers are (the
        new master acknowledges writes alone until a slave rejoins, issue 13); otherwise from
        a name server's answer to our registration (it may still list the old master for a
        moment)."""
        while not self.ha.is_master and self.ha.master_epoch == epoch:
            master = self.master_addr
            if master is not None and master != self.address:
                ha_addr = await self.acting.ask_master_ha(master)
                if ha_addr and not self.ha.is_master and self.ha.master_epoch == epoch:
                    self.ha.slave.set_master(ha_addr)
                    await self.register_all()
                    return
            if self._follow_master(await self.register_all()):
                return
            await trio.sleep(0.3)

    def adopt_topics_from_log(self) -> None:
        queues: dict[str, int] = {}
        for topic, qid in self.store.native.queues():
            queues[topic] = max(queues.get(topic, 0), qid + 1)
        for topic, n in queues.items():
            if self.topics.get(topic) is None and check_topic_name(topic) is None:
                self.topics.update(
                    TopicConfig(
                        topic_name=topic,
                        read_queue_nums=max(n, self.cfg.default_topic_queue_nums),
                        write_queue_nums=max(n, self.cfg.default_topic_queue_nums),
                        perm=PERM_READ | PERM_WRITE,
                    )
                )
                log.info("topic %s adopted from the log (%d queues)", topic, n)

    async def role_changed_notice(self, conn: Connection, cmd: RemotingCommand) -> None:
        if self.replicas is not None:
            await self.replicas.on_notice(cmd)

    async def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE (1007): this replica's epochs and offsets, as JSON."""
        native = self.store.native
        debt = self.ha.catch_up()
        cache = EpochEntryCache(
            cluster_name=self.cfg.cluster_name,
            broker_name=self.cfg.broker_name,
            broker_id=self.ha.self_id,
            epoch_list=[
                EpochEntry(epoch=e, start_offset=s, end_offset=min(end, 2**63 - 1))
                for e, s, end in self.ha.epochs.entries()
            ],
            max_offset=native.max_offset,
        )
        # RocketMQ's fields, then ours: the replica's role and replication state.
        body = json.loads(cache.to_json()) | {
            "confirmOffset": native.confirm_offset,
            "role": "MASTER" if self.role_is_master() else "SLAVE",
            "masterEpoch": self.ha.master_epoch,
            "syncStateSet": sorted(self.ha.core.effective_set()) if self.ha.is_master else [],
            "committedSyncStateSet": sorted(self.ha.core.sync_state_set),
            "slaveState": self.ha.slave.status.state,
            "refused": self.ha.slave.status.refused,
            "truncatedTo": self.ha.slave.status.truncated_to,
            # Issue 13: what this replica lost and must catch up to before it may be master.
            "catchUp": None if debt is None else dataclasses.asdict(debt),
            # Slave acting master (classic mode) and FMQ fencing.
            "actingMaster": self.acting_master,
            "isolated": self.acting.isolated,
            "fencedIsolated": self.acting.fenced,
            "minBrokerId": self.acting.min_broker_id,
            "reverseSynced": self.acting.reverse_synced,
            "specialServices": self.special.running,
        }
        return cmd.response(Resp.SUCCESS, None, None, json.dumps(body).encode())

    async def all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, self.offsets.to_json())

    async def _slave_sync_loop(self) -> None:
        """A slave copies topic configs, consumer offsets and delay progress from its master
        every syncBrokerMetadataPeriod, so a new master (or a slave acting for a dead one)
        starts from recent metadata. Not while acting: then this slave's copy is the newer
        one, and the returning master pulls it back (pre-online)."""
        while True:
            await trio.sleep(self.cfg.sync_broker_metadata_period_ms / 1000)
            if self.ha.is_master:
                continue
            # Topics whose messages replicated before their config did (auto-created on the
            # master a moment ago) are readable here at once; an acting slave needs them most.
            self.adopt_topics_from_log()
            if self.acting_master or not self.master_addr or self.master_addr == self.address:
                continue
            try:
                await self.sync_from_master(self.master_addr)
            except Exception as e:  # the master may be gone; the next period retries
                log.debug("metadata sync from %s failed: %s", self.master_addr, e)

    async def sync_from_master(self, addr: str) -> None:
        r = await self.outbound.invoke(addr, RemotingCommand.request(RC.GET_ALL_TOPIC_CONFIG), 3.0)
        if r.code == Resp.SUCCESS and r.body:
            w = TopicConfigSerializeWrapper.from_json(r.body)
            changed = False
            for name, tc in w.topic_config_table.items():
                if self.topics.get(name) != tc:
                    self.topics.update(tc)
                    changed = True
            if changed:
                self.topics.persist()
        r = await self.outbound.invoke(
            addr, RemotingCommand.request(RC.GET_ALL_CONSUMER_OFFSET), 3.0
        )
        if r.code == Resp.SUCCESS and r.body and not self.acting_master:
            self.offsets.merge_from_json(r.body)
        r = await self.outbound.invoke(addr, RemotingCommand.request(RC.GET_ALL_DELAY_OFFSET), 3.0)
        delay = self.special.delay
        if r.code == Resp.SUCCESS and r.body and not self.acting_master and not delay.running:
            delay.offsets.adopt(r.body)

    def topics_changed(self) -> None:
        self._topics_changed.set()

    async def _registration_loop(self) -> None:
        while True:
            with trio.move_on_after(self.cfg.register_name_server_period_ms / 1000):
                await self._topics_changed.wait()
            self._topics_changed = trio.Event()
            await self.register_all()

    async def _heartbeat_loop(self) -> None:
        """The light heartbeat to every name server: BROKER_HEARTBEAT (904, oneway), or with
        compatibleWithOldNameSrv QUERY_DATA_VERSION (322), which old name servers also take as
        a heartbeat (and whose answer says whether the topics must be registered again)."""
        while True:
            await trio.sleep(self.cfg.broker_heartbeat_interval_ms / 1000)
            if self.acting.isolated:
                continue
            async with trio.open_nursery() as n:
                for addr in self.cfg.namesrv_addrs:
                    n.start_soon(self._heartbeat_one, addr)

    async def _heartbeat_one(self, addr: str) -> None:
        cfg = self.cfg
        try:
            if not cfg.compatible_with_old_name_srv:
                h = BrokerHeartbeatRequestHeader(
                    cluster_name=cfg.cluster_name,
                    broker_addr=self.address,
                    broker_name=cfg.broker_name,
                    broker_id=self.runtime_broker_id,
                )
                await self.outbound.invoke_oneway(
                    addr, RemotingCommand.request(RC.BROKER_HEARTBEAT, h.to_ext())
                )
                return
            qh = QueryDataVersionRequestHeader(
                broker_name=cfg.broker_name,
                broker_addr=self.address,
                cluster_name=cfg.cluster_name,
                broker_id=self.runtime_broker_id,
            )
            cmd = RemotingCommand.request(
                RC.QUERY_DATA_VERSION, qh.to_ext(), self.topics.data_version.to_json()
            )
            r = await self.outbound.invoke(addr, cmd, cfg.send_heartbeat_timeout_ms / 1000)
            if r.code == Resp.SUCCESS:
                self.acting.heard_from_namesrv()
                if QueryDataVersionResponseHeader.from_ext(r.ext_fields).changed:
                    self.topics_changed()  # the name server lost us (or our topics): register
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
        if self.ha.is_master and self.replicas is not None:
            await self._forward_to_replicas(cmd)
        await self.register_all()
        return cmd.response(Resp.SUCCESS)

    async def _forward_to_replicas(self, cmd: RemotingCommand) -> None:
        """A topic created on the master reaches the other replicas before the answer, so a
        failover right after cannot lose it (RocketMQ #9804: the periodic slave sync alone
        leaves a window of up to syncBrokerMetadataPeriod)."""

        async def one(addr: str) -> None:
            fwd = RemotingCommand.request(cmd.code, dict(cmd.ext_fields or {}), cmd.body)
            try:
                await self.outbound.invoke(addr, fwd, 2.0)
            except Exception as e:  # a dead replica catches up through the periodic sync
                log.info("topic forward to %s failed: %s", addr, e)

        assert self.replicas is not None
        async with trio.open_nursery() as n:
            for bid, addr in self.replicas.replica_addrs.items():
                if bid != self.ha.self_id and addr != self.address:
                    n.start_soon(one, addr)

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
        """LOCK_BATCH_MQ: lock here; with lockInStrictMode (and no onlyThisBroker) a queue is
        locked only when a majority of the group's replicas (totalReplicas/2+1, this one
        included) lock it, so while a master hands back to its acting slave no queue can be
        held by two consumers at once."""
        req = LockBatchRequestBody.from_json(cmd.body or b"{}")
        group, client = req.consumer_group or "", req.client_id or ""
        keys = [(mq.topic, mq.broker_name, mq.queue_id) for mq in req.mq_set]
        got = self.locks.try_lock_batch(group, keys, client, now_ms())
        quorum = self.cfg.total_replicas // 2 + 1
        if self.cfg.lock_in_strict_mode and not req.only_this_broker and quorum > 1 and got:
            counts = dict.fromkeys(got, 1)
            fwd = LockBatchRequestBody(
                consumer_group=group,
                client_id=client,
                only_this_broker=True,
                mq_set={MessageQueue(topic=t, broker_name=b, queue_id=q) for t, b, q in got},
            )
            for locked in await self._on_other_replicas(RC.LOCK_BATCH_MQ, fwd.to_json()):
                for mq in LockBatchResponseBody.from_json(locked).lock_ok_mq_set:
                    k = (mq.topic, mq.broker_name, mq.queue_id)
                    if k in counts:
                        counts[k] += 1
            got = [k for k, n in counts.items() if n >= quorum]
        body = LockBatchResponseBody(
            lock_ok_mq_set={MessageQueue(topic=t, broker_name=b, queue_id=q) for t, b, q in got}
        )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = UnlockBatchRequestBody.from_json(cmd.body or b"{}")
        keys = [(mq.topic, mq.broker_name, mq.queue_id) for mq in req.mq_set]
        self.locks.unlock_batch(req.consumer_group or "", keys, req.client_id or "")
        if self.cfg.lock_in_strict_mode and not req.only_this_broker:
            fwd = UnlockBatchRequestBody(
                consumer_group=req.consumer_group,
                client_id=req.client_id,
                only_this_broker=True,
                mq_set=req.mq_set,
            )
            await self._on_other_replicas(RC.UNLOCK_BATCH_MQ, fwd.to_json())
        return cmd.response(Resp.SUCCESS)

    async def _on_other_replicas(self, code: int, body: bytes) -> list[bytes]:
        """Sends a request to every other live replica of the group (1 s each, 2 s in all);
        returns the bodies of the successful answers."""
        others = [a for a in self.acting.members.values() if a != self.address]
        out: list[bytes] = []

        async def one(addr: str) -> None:
            try:
                r = await self.outbound.invoke(addr, RemotingCommand.request(code, None, body), 1.0)
            except Exception as e:  # an unreachable replica does not count
                log.debug("forward %d to %s failed: %s", code, addr, e)
                return
            if r.code == Resp.SUCCESS:
                out.append(r.body or b"{}")

        with trio.move_on_after(2.0):
            async with trio.open_nursery() as n:
                for addr in others:
                    n.start_soon(one, addr)
        return out


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
        # In controller mode the confirm offset is the replication's to move (HaCore); every
        # other broker exposes what it has (RocketMQ's rule for a one-member set, #7656).
        confirm_follows_max=not cfg.enable_controller_mode or cfg.read_uncommitted,
    ) as store:
        await Broker(cfg, store, server).serve(task_status=task_status)
