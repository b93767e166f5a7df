"""The broker's side of the name servers: registration, the light heartbeat, and a slave's
metadata sync from its master.

* REGISTER_BROKER with every name server at once, every registerNameServerPeriod and whenever
  topics change or the role core asks (`Register`); not while fenced or pre-online (the role
  view says). A name server whose registration failed is asked again sooner (1 s, doubling up
  to the period). Every answer goes to the core (`NamesrvAnswered`: contact, and for a slave the
  master's addresses).
* The light heartbeat (classic mode): BROKER_HEARTBEAT (904, oneway), or with
  compatibleWithOldNameSrv QUERY_DATA_VERSION (322), whose answer says whether to register
  again. In controller mode 904 is the controller's.
* A slave copies topic configs, subscription groups, message request modes, consumer offsets
  and delay progress from its master every
  syncBrokerMetadataPeriod, so a new master (or a slave acting for a dead one) starts from
  recent metadata. Not while acting: then this slave's copy is the newer one, and the
  returning master pulls it back (pre-online).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from rmq_ha.broker.assignment import RequestModes
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.core.role import RoleCore
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.subgroups import SubscriptionGroupManager
from rmq_ha.broker.topics import TopicConfigManager
from rmq_ha.config import BrokerConfig
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
)
from rmq_ha.protocol.models import (
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicConfigSerializeWrapper,
)
from rmq_ha.protocol.perm import PERM_READ, PERM_WRITE
from rmq_ha.protocol.register_body import RegisterBrokerBody, encode_register_body

log = logging.getLogger(__name__)

#: The first retry of a failed registration with one name server (then doubling).
REGISTER_RETRY_S = 1.0


class DelayProgress(Protocol):
    """The delay service's progress table, as the slave sync adopts the master's."""

    def adopt(self, raw: bytes) -> None: ...


class NamesrvShell:
    def __init__(
        self,
        cfg: BrokerConfig,
        outbound: RemotingClient,
        core: RoleCore,
        feed: Callable[[ev.Event], None],
        *,
        address: str,
        ha_address: Callable[[], str],
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        subgroups: SubscriptionGroupManager,
        request_modes: RequestModes,
        delay: DelayProgress,
        delay_running: Callable[[], bool],
        adopt_topics: Callable[[], object],
        log_queues: Callable[[], list[tuple[str, int]]],
        acting_enabled: bool,
    ) -> None:
        self.cfg = cfg
        self.outbound = outbound
        self.core = core
        self.feed = feed
        self.address = address
        self.ha_address = ha_address
        self.topics = topics
        self.offsets = offsets
        self.subgroups = subgroups
        self.request_modes = request_modes
        self.delay = delay
        self.delay_running = delay_running
        self.adopt_topics = adopt_topics
        #: (topic, queue id) of the queues this replica's log holds (`Store.queues`)
        self.log_queues = log_queues
        self.acting_enabled = acting_enabled
        self._topics_changed = trio.Event()
        #: topics changes so far, and how many of them a finished registration round covers
        self._changes = 0
        self._announced = 0
        self._announced_event = trio.Event()
        #: Name servers whose last registration failed (no answer, or an error code): asked
        #: again after `_retry_s`, doubling up to registerNameServerPeriod, not only at the
        #: next period. After a partition heals, a new master's registration with the name
        #: server that was cut off waited for the next period (seconds in campaigns, 30 s by
        #: default), and that name server served a route with no master meanwhile.
        self.failed: set[str] = set()
        self._retry_s = REGISTER_RETRY_S
        #: A name server refused our registration (a later epoch holds our id).
        self.on_refused: Callable[[], None] = lambda: None

    def topics_changed(self) -> None:
        self._changes += 1
        self._topics_changed.set()

    async def wait_registered(self, timeout_s: float) -> None:
        """Return once a registration round that began after the last topics change has
        finished (at most ``timeout_s``). RocketMQ's broker registers a topic auto-created by
        a send before it answers the send (registerBrokerAll in the sending thread), so a
        consumer started on the answer finds the route; so does this one."""
        target = self._changes
        if not self.cfg.namesrv_addrs:
            return
        with trio.move_on_after(timeout_s):
            while self._announced < target:
                await self._announced_event.wait()

    async def run(self) -> None:
        async with trio.open_nursery() as n:
            if self.cfg.namesrv_addrs:
                n.start_soon(self._registration_loop)
                if not self.cfg.enable_controller_mode:
                    n.start_soon(self._heartbeat_loop)
            n.start_soon(self._slave_sync_loop)

    # ---- registration ----------------------------------------------------------------------

    def _register_command(self) -> RemotingCommand:
        h = RegisterBrokerRequestHeader(
            broker_name=self.cfg.broker_name,
            broker_addr=self.address,
            cluster_name=self.cfg.cluster_name,
            ha_server_addr=self.ha_address(),
            broker_id=self.core.runtime_broker_id,
            heartbeat_timeout_millis=self.cfg.broker_not_active_timeout_ms,
            enable_acting_master=self.acting_enabled,
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

    async def register_all(self, addrs: Sequence[str] | None = None) -> None:
        """Registers with every name server (or `addrs`) at once; a failure of one is logged
        and remembered in `failed` (retried sooner by the registration loop), not fatal.
        Fenced brokers (controller mode before the role is known) and isolated ones
        (pre-online) do not register."""
        if not self.core.registers:
            return

        async def one(addr: str) -> None:
            try:
                r = await self.outbound.invoke(addr, self._register_command(), 3.0)
            except Exception as e:  # one unreachable name server must not stop the others
                log.warning("register with %s failed: %s", addr, e)
                self.failed.add(addr)
                return
            if r.code != Resp.SUCCESS:
                log.warning("register with %s failed: %s %s", addr, r.code, r.remark)
                self.failed.add(addr)
                return
            self.failed.discard(addr)
            a = RegisterBrokerResponseHeader.from_ext(r.ext_fields)
            if a.register_refused:
                # Another broker holds our id from a later epoch: we are a stale master (say,
                # back from a partition while the controller elected another). Ask the
                # controller now rather than at the next poll.
                log.warning("register with %s refused: a later epoch holds this id", addr)
                self.on_refused()
            self.feed(ev.NamesrvAnswered(a.master_addr or None, a.ha_server_addr or None))

        async with trio.open_nursery() as n:
            for addr in self.cfg.namesrv_addrs if addrs is None else addrs:
                n.start_soon(one, addr)

    async def _registration_loop(self) -> None:
        """Every name server each registerNameServerPeriod or when topics change; between,
        the ones whose registration failed, after a back-off from REGISTER_RETRY_S doubling
        up to the period."""
        period = self.cfg.register_name_server_period_ms / 1000
        next_full = trio.current_time() + period
        while True:
            deadline = next_full
            if self.failed:
                deadline = min(deadline, trio.current_time() + self._retry_s)
            with trio.move_on_at(deadline):
                await self._topics_changed.wait()
            if self._topics_changed.is_set() or trio.current_time() >= next_full:
                self._topics_changed = trio.Event()
                next_full = trio.current_time() + period
                seen = self._changes
                await self.register_all()
                self._announced = max(self._announced, seen)
                done, self._announced_event = self._announced_event, trio.Event()
                done.set()
            else:
                await self.register_all(sorted(self.failed))
                self._retry_s = min(self._retry_s * 2, period)
            if not self.failed:
                self._retry_s = REGISTER_RETRY_S

    # ---- light heartbeat (classic mode) ----------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.broker_heartbeat_interval_ms / 1000)
            if self.core.isolated:
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
                    broker_id=self.core.runtime_broker_id,
                )
                await self.outbound.invoke_oneway(
                    addr, RemotingCommand.request(RC.BROKER_HEARTBEAT, h.to_ext())
                )
                return
            qh = QueryDataVersionRequestHeader(
                broker_name=cfg.broker_name,
                broker_addr=self.address,
                cluster_name=cfg.cluster_name,
                broker_id=self.core.runtime_broker_id,
            )
            cmd = RemotingCommand.request(
                RC.QUERY_DATA_VERSION, qh.to_ext(), self.topics.data_version.to_json()
            )
            r = await self.outbound.invoke(addr, cmd, cfg.send_heartbeat_timeout_ms / 1000)
            if r.code == Resp.SUCCESS:
                self.feed(ev.NamesrvAnswered())
                if QueryDataVersionResponseHeader.from_ext(r.ext_fields).changed:
                    self.topics_changed()  # the name server lost us (or our topics): register
        except Exception as e:  # logged; the next beat retries
            log.debug("heartbeat to %s failed: %s", addr, e)

    # ---- a slave's metadata sync -----------------------------------------------------------

    async def _slave_sync_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.sync_broker_metadata_period_ms / 1000)
            s = self.core.state
            if self.core.is_master:
                continue
            # Topics whose messages replicated before their config did (auto-created on the
            # master a moment ago) are readable here at once; an acting slave needs them most.
            self.adopt_topics()
            master = s.master_addr
            if s.acting or not master or master == self.address:
                continue
            try:
                await self.sync_from_master(master)
            except Exception as e:  # the master may be gone; the next period retries
                log.debug("metadata sync from %s failed: %s", master, e)

    async def group_addrs(self) -> dict[int, str]:
        """This group's registered replicas (id -> remoting address) from the first name
        server that knows it (GET_BROKER_CLUSTER_INFO); {} when none does."""
        for addr in self.cfg.namesrv_addrs:
            try:
                got = await _cluster_group(self.outbound, addr, self.cfg.broker_name)
            except (OSError, ValueError, RemotingError) as e:
                log.debug("cluster info from %s failed: %s", addr, e)
                continue
            if got:
                return got
        return {}

    async def sync_from_master(self, addr: str) -> None:
        out = self.outbound
        r = await out.invoke(addr, RemotingCommand.request(RC.GET_ALL_TOPIC_CONFIG), 3.0)
        if r.code == Resp.SUCCESS and r.body:
            w = TopicConfigSerializeWrapper.from_json(r.body)
            changed = False
            for name, tc in w.topic_config_table.items():
                if self.topics.get(name) != tc:
                    self.topics.update(tc)
                    changed = True
            # topics the master deleted go here too (RocketMQ's SlaveSynchronize), unless this
            # replica's log still holds messages of theirs (adopted from the log, they would
            # come back; the master's deletion marker empties them once it replicates)
            readable = {t for t, _ in self.log_queues()}
            for name in list(self.topics.table):
                if name not in w.topic_config_table and name not in readable:
                    self.topics.delete(name)
                    changed = True
            if changed:
                self.topics.persist()
        # Group configs (without them a new master refuses the groups an admin created on the
        # old one with autoCreateSubscriptionGroup=false, lets consume a group set to
        # consumeEnable=false, retries past retryMaxTimes), and pop or pull per group and
        # topic (without them it answers pull mode to a group switched to pop): taken whole.
        tables: tuple[tuple[int, Callable[[bytes], bool], str, Callable[[], int]], ...] = (
            (
                RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                self.subgroups.adopt,
                "subscription groups",
                lambda: len(self.subgroups.table),
            ),
            (
                RC.GET_ALL_MESSAGE_REQUEST_MODE,
                self.request_modes.adopt,
                "message request modes",
                lambda: len(self.request_modes.table),
            ),
        )
        for code, adopt, what, size in tables:
            r = await out.invoke(addr, RemotingCommand.request(code), 3.0)
            if r.code == Resp.SUCCESS and r.body and adopt(r.body):
                log.info("%s copied from the master %s: %d", what, addr, size())
        # Offsets and delay progress only from a master that has pulled ours back (acting
        # master: its 906 came first; RoleCore.copies_metadata).
        r = await out.invoke(addr, RemotingCommand.request(RC.GET_ALL_CONSUMER_OFFSET), 3.0)
        if r.code == Resp.SUCCESS and r.body and self.core.copies_metadata:
            self.offsets.merge_from_json(r.body)
        r = await out.invoke(addr, RemotingCommand.request(RC.GET_ALL_DELAY_OFFSET), 3.0)
        if (
            r.code == Resp.SUCCESS
            and r.body
            and self.core.copies_metadata
            and not self.delay_running()
        ):
            self.delay.adopt(r.body)


async def _cluster_group(
    outbound: RemotingClient, addr: str, broker_name: str
) -> dict[int, str] | None:
    r = await outbound.invoke(addr, RemotingCommand.request(RC.GET_BROKER_CLUSTER_INFO), 3.0)
    if r.code != Resp.SUCCESS or not r.body:
        return None
    table = json.loads(r.body).get("brokerAddrTable", {})
    addrs = table.get(broker_name, {}).get("brokerAddrs", {})
    return {int(k): str(v) for k, v in addrs.items()}
