"""Slave acting master (RIP-32) and FMQ fencing for classic master/slave groups.

With enableSlaveActingMaster (classic mode only; controller mode elects a real master):

* Member group. Every syncBrokerMemberGroupPeriod the broker asks a name server for its group
  (GET_BROKER_MEMBER_GROUP, 901; with compatibleWithOldNameSrv the route of the topic
  `rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`), and name servers with notifyMinBrokerIdChanged
  push NOTIFY_MIN_BROKER_ID_CHANGE (905). Both feed `on_min_broker_change`.
* Acting. A slave whose id is the group's smallest live id while the master (id 0) is gone acts
  for it: `broker.acting_master` is set and the special services (delay, transactions, pop
  revive) run here, writing through the escape bridge to another master (never into this
  slave's own commitlog). The name servers show this slave as a read-only id 0, so consumers
  read, pop, lock and look up offsets here. When id 0 comes back the slave stops acting, stops
  the services and follows the master's HA address again.
* Pre-online (unless skipPreOnline, and only with totalReplicas > 1): a starting broker is
  isolated (no registration, no heartbeats, no special services). A master fetches its member
  group without registering, sends EXCHANGE_BROKER_HA_INFO (906) to every slave in id order,
  waits for the slave's HA connection, then pulls consumer offsets and delay progress back when
  the slave's DataVersion is newer (it was acting while we were gone), then registers. A slave
  asks the master (906) for its HA address, waits until it transfers, then registers; with no
  master it registers at once. No consumer offset goes backwards across a master restart
  (RocketMQ #9711): a slave's first commit while acting always moves its DataVersion on, and
  the merge keeps the larger offset of each queue.

With fenceWhenIsolated (ours, after FMQ): a classic master that has had a slave connected, and
then hears from no name server and from none of its slaves for the isolation timeout
(max(brokerNotActiveTimeoutMillis, 2 x haSendHeartbeatInterval)), is on the losing side of a
partition: the name servers have dropped it and its slave is acting. It stops serving
(sends, pulls, pops, acks, locks, offset commits and end-transaction get SERVICE_NOT_AVAILABLE)
and stops its special services, so no client sees a second, diverging view. It serves again as
soon as a name server or a slave is heard from.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from rmq_ha.clock import monotonic_ms
from rmq_ha.errors import RemotingError
from rmq_ha.net.connection import Connection
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    ExchangeHAInfoRequestHeader,
    ExchangeHAInfoResponseHeader,
    GetBrokerMemberGroupRequestHeader,
    GetRouteInfoRequestHeader,
    NotifyMinBrokerIdChangeRequestHeader,
)
from rmq_ha.protocol.models import GetBrokerMemberGroupResponseBody, TopicRouteData

if TYPE_CHECKING:
    from rmq_ha.broker.broker import Broker
    from rmq_ha.net.dispatch import Dispatcher

log = logging.getLogger(__name__)

MASTER_ID: Final = 0
SYNC_BROKER_MEMBER_PREFIX: Final = "rmq_sys_SYNC_BROKER_MEMBER_"
PRE_ONLINE_RETRY_S: Final = 1.0
#: How long pre-online waits for a slave's HA connection before trying the round again.
HA_WAIT_S: Final = 10.0
#: Requests a fenced master refuses (the data plane: what could show a diverging view).
FENCED_CODES: Final = frozenset(
    {
        RC.SEND_MESSAGE,
        RC.SEND_MESSAGE_V2,
        RC.SEND_BATCH_MESSAGE,
        RC.SEND_REPLY_MESSAGE,
        RC.SEND_REPLY_MESSAGE_V2,
        RC.CONSUMER_SEND_MSG_BACK,
        RC.PULL_MESSAGE,
        RC.LITE_PULL_MESSAGE,
        RC.POP_MESSAGE,
        RC.ACK_MESSAGE,
        RC.CHANGE_MESSAGE_INVISIBLETIME,
        RC.END_TRANSACTION,
        RC.LOCK_BATCH_MQ,
        RC.UPDATE_CONSUMER_OFFSET,
    }
)


class ActingMaster:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.cfg
        self.enabled = cfg.enable_slave_acting_master and not cfg.enable_controller_mode
        self.self_id = cfg.broker_id
        #: The group's smallest live id and its address, as last learned.
        self.min_broker_id: int | None = None
        self.min_broker_addr: str | None = None
        #: The group's live replicas (id -> address), from the last member-group answer.
        self.members: dict[int, str] = {}
        #: Pre-online: not registered, no heartbeats, no special services yet.
        self.isolated = self.enabled and not cfg.skip_pre_online and cfg.total_replicas > 1
        #: What pre-online pulled back, for status and tests: ["consumerOffset@<addr>", ...].
        self.reverse_synced: list[str] = []
        # FMQ fencing.
        self.fence_enabled = cfg.fence_when_isolated and not cfg.enable_controller_mode
        self.isolation_timeout_ms = max(
            cfg.broker_not_active_timeout_ms, 2 * cfg.ha_send_heartbeat_interval_ms
        )
        self.namesrv_contact_ms = monotonic_ms()
        self.fenced = False
        self._change_lock = trio.Lock()

    # ---- wiring ----------------------------------------------------------------------------

    def register(self, d: Dispatcher) -> None:
        d.register(RC.NOTIFY_MIN_BROKER_ID_CHANGE, self.min_broker_id_changed)
        d.register(RC.EXCHANGE_BROKER_HA_INFO, self.exchange_ha_info)

    def heard_from_namesrv(self) -> None:
        self.namesrv_contact_ms = monotonic_ms()

    async def start(self) -> None:
        """Called before the broker reports ready: a broker that is not isolated starts its
        special services now (a plain classic master, or with acting master on, the master or
        the smallest-id slave)."""
        if self.isolated:
            return
        if self.enabled:
            await self._start_service(*self._initial_min())
        elif self.broker.ha.is_master:
            await self.broker.special.start(self.broker.nursery)

    async def run(self) -> None:
        """Pre-online (when isolated), then the member-group poll and the fence watch."""
        async with trio.open_nursery() as n:
            if self.fence_enabled and self.self_id == MASTER_ID:
                n.start_soon(self._fence_loop)
            if self.isolated:
                await self._pre_online()
            if self.enabled or self.fence_enabled or self.broker.cfg.lock_in_strict_mode:
                await self._member_group_loop()

    def _initial_min(self) -> tuple[int, str | None]:
        if self.self_id == MASTER_ID:
            return MASTER_ID, self.broker.address
        return MASTER_ID, None  # assume a master until the name servers say otherwise

    # ---- member group ----------------------------------------------------------------------

    async def fetch_member_group(self) -> dict[int, str] | None:
        """The group's live replicas from the first name server that knows the group ({}
        when the name servers answer but know none of it); None when none answers."""
        cfg = self.broker.cfg
        answered = False
        for addr in cfg.namesrv_addrs:
            try:
                members = await self._member_group_from(addr)
            except (RemotingError, OSError, ValueError) as e:
                log.debug("member group from %s failed: %s", addr, e)
                continue
            self.heard_from_namesrv()
            answered = True
            if members:
                return members
        return {} if answered else None

    async def _member_group_from(self, addr: str) -> dict[int, str] | None:
        cfg = self.broker.cfg
        out = self.broker.outbound
        timeout = cfg.send_heartbeat_timeout_ms / 1000 * 3
        if cfg.compatible_with_old_name_srv:
            topic = SYNC_BROKER_MEMBER_PREFIX + cfg.broker_name
            h = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
            r = await out.invoke(
                addr, RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, h.to_ext()), timeout
            )
            if r.code != Resp.SUCCESS or not r.body:
                return {}
            route = TopicRouteData.from_json(r.body)
            for bd in route.broker_datas:
                if bd.broker_name == cfg.broker_name:
                    return dict(bd.broker_addrs)
            return {}
        mh = GetBrokerMemberGroupRequestHeader(
            cluster_name=cfg.cluster_name, broker_name=cfg.broker_name
        )
        r = await out.invoke(
            addr, RemotingCommand.request(RC.GET_BROKER_MEMBER_GROUP, mh.to_ext()), timeout
        )
        if r.code != Resp.SUCCESS or not r.body:
            return {}
        body = GetBrokerMemberGroupResponseBody.from_json(r.body)
        group = body.broker_member_group
        return dict(group.broker_addrs) if group is not None else {}

    async def _member_group_loop(self) -> None:
        period = self.broker.cfg.sync_broker_member_group_period_ms / 1000
        while True:
            await trio.sleep(period)
            await self.sync_member_group()

    async def sync_member_group(self) -> None:
        members = await self.fetch_member_group()
        if not members:
            return  # no answer, or the name servers do not know the group (yet)
        self.members = members
        if not self.enabled:
            return
        # The name servers may not list us (registration pending): count ourselves.
        live = dict(members)
        live.setdefault(self.self_id, self.broker.address)
        min_id = min(live)
        offline = None
        if self.min_broker_addr is not None and self.min_broker_addr not in live.values():
            offline = self.min_broker_addr
        await self.on_min_broker_change(min_id, live[min_id], offline, None)

    async def min_broker_id_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE (905, oneway) from a name server."""
        if not self.enabled or self.isolated:
            return None
        h = NotifyMinBrokerIdChangeRequestHeader.from_ext(cmd.ext_fields)
        if h.broker_name != self.broker.cfg.broker_name or h.min_broker_id is None:
            return None
        await self.on_min_broker_change(
            h.min_broker_id, h.min_broker_addr, h.offline_broker_addr, h.ha_broker_addr
        )
        return None

    async def on_min_broker_change(
        self,
        min_id: int,
        min_addr: str | None,
        offline_addr: str | None,
        ha_addr: str | None,
    ) -> None:
        """RocketMQ's onMinBrokerChange (slaves only): start or stop acting; forget a master
        that went offline; follow a master that came back."""
        if self.self_id == MASTER_ID:
            return
        async with self._change_lock:
            b = self.broker
            if min_id == self.min_broker_id and min_addr == self.min_broker_addr:
                return
            log.info(
                "group %s: smallest live id %s at %s (was %s; offline %s)",
                b.cfg.broker_name,
                min_id,
                min_addr,
                self.min_broker_id,
                offline_addr,
            )
            self.min_broker_id, self.min_broker_addr = min_id, min_addr
            if offline_addr is not None and offline_addr == b.master_addr:
                b.outbound.close_connection(offline_addr)
                b.ha.slave.set_master(None)
                b.master_addr = None
            await self._set_acting(min_id == self.self_id)
            if min_id == MASTER_ID and min_addr:
                b.master_addr = min_addr
                if not ha_addr:
                    ha_addr = await self.ask_master_ha(min_addr)
                if ha_addr:
                    b.ha.slave.set_master(ha_addr)
                b.wake_parked_pulls()

    async def _set_acting(self, acting: bool) -> None:
        b = self.broker
        if acting == b.acting_master:
            return
        b.acting_master = acting
        if acting:
            # What changes while acting must look newer than the master's copy whether or not
            # a metadata sync ran since the last version bump (pre-online takes it back).
            b.offsets.arm_version_bump()
            b.special.delay.offsets.arm_version_bump()
            # Serve every queue in the log, also of topics whose config never reached us.
            b.adopt_topics_from_log()
            b.ha.slave.set_master(None)
            log.warning(
                "%s id %d acts as master (its master is gone)", b.cfg.broker_name, self.self_id
            )
        else:
            log.info("%s id %d stops acting as master", b.cfg.broker_name, self.self_id)
        await b.special.change_status(acting, b.nursery)

    async def ask_master_ha(self, master_addr: str) -> str | None:
        """EXCHANGE_BROKER_HA_INFO with no HA address: the master answers with its own."""
        cmd = RemotingCommand.request(
            RC.EXCHANGE_BROKER_HA_INFO, ExchangeHAInfoRequestHeader().to_ext()
        )
        try:
            r = await self.broker.outbound.invoke(master_addr, cmd, 3.0)
        except (RemotingError, OSError) as e:
            log.debug("HA info from %s: %s", master_addr, e)
            return None
        if r.code != Resp.SUCCESS:
            return None
        return ExchangeHAInfoResponseHeader.from_ext(r.ext_fields).master_ha_address

    async def exchange_ha_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """906: a master pushes its HA address (a slave follows it), or a slave asks for it."""
        h = ExchangeHAInfoRequestHeader.from_ext(cmd.ext_fields)
        b = self.broker
        if h.master_ha_address:
            if b.ha.is_master:
                return cmd.response(Resp.SYSTEM_ERROR, "this broker is a master")
            if h.master_address:
                b.master_addr = h.master_address
            b.ha.slave.set_master(h.master_ha_address)
            return cmd.response(Resp.SUCCESS)
        if not b.ha.is_master:
            return cmd.response(Resp.SYSTEM_ERROR, "this broker is not a master")
        rh = ExchangeHAInfoResponseHeader(
            master_ha_address=b.ha.ha_address,
            master_flush_offset=b.store.native.max_offset,
            master_address=b.address,
        )
        return cmd.response(Resp.SUCCESS, None, rh.to_ext())

    # ---- pre-online ------------------------------------------------------------------------

    async def _pre_online(self) -> None:
        log.info("%s id %d pre-online (isolated)", self.broker.cfg.broker_name, self.self_id)
        while True:
            try:
                if await self._pre_online_once():
                    return
            except (RemotingError, OSError, ValueError) as e:
                log.info("pre-online round failed: %s", e)
            await trio.sleep(PRE_ONLINE_RETRY_S)

    async def _pre_online_once(self) -> bool:
        b = self.broker
        members = await self.fetch_member_group()
        if members is None:
            if b.cfg.namesrv_addrs:
                return False  # no name server answers: try again
            members = {}
        members = {i: a for i, a in members.items() if a != b.address}
        self.members = members
        if self.self_id == MASTER_ID:
            for bid in sorted(members):
                if not await self._pre_online_slave(bid, members[bid]):
                    return False
            await self._start_service(MASTER_ID, b.address)
            return True
        master = members.get(MASTER_ID)
        if master is not None:
            ha = await self.ask_master_ha(master)
            if ha is None:
                return False
            b.master_addr = master
            b.ha.slave.set_master(ha)
            with trio.move_on_after(HA_WAIT_S):
                while b.ha.slave.status.state != "TRANSFER":
                    await trio.sleep(0.05)
            if b.ha.slave.status.state != "TRANSFER":
                return False
            await self._start_service(MASTER_ID, master)
            return True
        others = sorted(members)
        if others and others[0] < self.self_id:
            await self._start_service(others[0], members[others[0]])
        else:
            await self._start_service(self.self_id, b.address)
        return True

    async def _pre_online_slave(self, bid: int, addr: str) -> bool:
        """Pushes our HA info to one slave, waits (bounded) for its HA connection, pulls back
        what it changed while it acted for us. False when the slave cannot be reached."""
        b = self.broker
        h = ExchangeHAInfoRequestHeader(
            master_ha_address=b.ha.ha_address,
            master_flush_offset=b.store.native.max_offset,
            master_address=b.address,
        )
        r = await b.outbound.invoke(
            addr, RemotingCommand.request(RC.EXCHANGE_BROKER_HA_INFO, h.to_ext()), 3.0
        )
        if r.code != Resp.SUCCESS:
            log.info("pre-online: slave %d at %s refused HA info: %s", bid, addr, r.remark)
            return False
        with trio.move_on_after(HA_WAIT_S):
            while bid not in b.ha.master.connections:
                await trio.sleep(0.05)
        if bid not in b.ha.master.connections:
            # A slave that cannot follow (it refuses to sync, say) must not keep the master
            # offline for ever: its metadata is taken anyway, and it catches up later.
            log.warning(
                "pre-online: slave %d at %s has no HA connection after %.0f s; going on",
                bid,
                addr,
                HA_WAIT_S,
            )
        await self._reverse_sync(addr)
        return True

    async def _reverse_sync(self, addr: str) -> None:
        b = self.broker
        r = await b.outbound.invoke(addr, RemotingCommand.request(RC.GET_ALL_CONSUMER_OFFSET), 3.0)
        if r.code == Resp.SUCCESS and r.body and b.offsets.merge_newer(r.body):
            b.offsets.persist(force=True)
            self.reverse_synced.append(f"consumerOffset@{addr}")
            log.info("pre-online: consumer offsets taken from %s (newer)", addr)
        r = await b.outbound.invoke(addr, RemotingCommand.request(RC.GET_ALL_DELAY_OFFSET), 3.0)
        delay = b.special.delay.offsets
        if r.code == Resp.SUCCESS and r.body and delay.merge_newer(r.body):
            await trio.to_thread.run_sync(delay.persist)
            self.reverse_synced.append(f"delayOffset@{addr}")
            log.info("pre-online: delay progress taken from %s (newer)", addr)
        # Timers ride the delay levels here (no timing wheel), so the delay progress is also
        # the timer checkpoint RocketMQ pulls with GET_TIMER_CHECK_POINT.

    async def _start_service(self, min_id: int, min_addr: str | None) -> None:
        """RocketMQ's startService: the min broker, the special services if we are it,
        registration, and the end of isolation."""
        b = self.broker
        self.min_broker_id, self.min_broker_addr = min_id, min_addr
        if self.self_id == MASTER_ID:
            await b.special.start(b.nursery)
        else:
            await self._set_acting(min_id == self.self_id)
        self.isolated = False
        log.info("%s id %d online (smallest id %d)", b.cfg.broker_name, self.self_id, min_id)
        await b.register_all()

    # ---- FMQ fencing -----------------------------------------------------------------------

    async def _fence_loop(self) -> None:
        b = self.broker
        while True:
            await trio.sleep(0.2)
            now = monotonic_ms()
            last_slave = b.ha.master.last_ack_ms
            if last_slave is None:
                continue  # never had a slave: nothing to be partitioned from
            isolated = (
                now - last_slave > self.isolation_timeout_ms
                and now - self.namesrv_contact_ms > self.isolation_timeout_ms
            )
            if isolated and not self.fenced:
                self.fenced = True
                log.error(
                    "%s master fenced: no name server and no slave heard for %d ms",
                    b.cfg.broker_name,
                    self.isolation_timeout_ms,
                )
                await b.special.stop()
            elif not isolated and self.fenced:
                self.fenced = False
                log.warning("%s master unfenced: contact is back", b.cfg.broker_name)
                await b.special.start(b.nursery)
