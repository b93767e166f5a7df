"""Slave acting master (RIP-32), pre-online and FMQ fencing: the I/O. The decisions are the role
core's (broker/core/role.py); this shell asks the name servers and the other replicas and feeds
the answers back as events.

* Member group: every syncBrokerMemberGroupPeriod the broker asks a name server for its group
  (GET_BROKER_MEMBER_GROUP, 901; with compatibleWithOldNameSrv the route of the topic
  `rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`) -> `MemberGroup`; name servers push
  NOTIFY_MIN_BROKER_ID_CHANGE (905) -> `MinBrokerChanged`.
* EXCHANGE_BROKER_HA_INFO (906): a master answers with its HA address; a slave takes the
  address a master pushes (pre-online of a returning master) -> `MasterPushedHa`.
* Pre-online actions: `FetchMemberGroup`, `PushHaInfo` (906 to a slave), `AskMasterHa`, and
  `ReverseSync`: consumer offsets and delay progress pulled back from a slave when its
  DataVersion is newer, keeping the larger offset of each queue (RocketMQ #9711).

FMQ fencing (`fenceWhenIsolated`, ours) needs no I/O of its own: name-server answers and slave
acks reach the core as events, and the core fences on its tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, Protocol

import trio

from rmq_ha.broker.core import events as ev
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.ports import RoleView
from rmq_ha.config import BrokerConfig
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
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

log = logging.getLogger(__name__)

SYNC_BROKER_MEMBER_PREFIX: Final = "rmq_sys_SYNC_BROKER_MEMBER_"
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


class DelayOffsets(Protocol):
    """The delay service's progress table, as pre-online merges it."""

    def merge_newer(self, raw: bytes) -> bool: ...

    def persist(self) -> None: ...


class ActingShell:
    def __init__(
        self,
        cfg: BrokerConfig,
        outbound: RemotingClient,
        role: RoleView,
        feed: Callable[[ev.Event], None],
        *,
        address: str,
        ha_address: Callable[[], str],
        max_offset: Callable[[], int],
        offsets: ConsumerOffsetManager,
        delay_offsets: DelayOffsets,
    ) -> None:
        self.cfg = cfg
        self.outbound = outbound
        self.role = role
        self.feed = feed
        self.address = address
        self.ha_address = ha_address
        self.max_offset = max_offset
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.enabled = cfg.enable_slave_acting_master and not cfg.enable_controller_mode
        #: What pre-online pulled back, for status and tests: ["consumerOffset@<addr>", ...].
        self.reverse_synced: list[str] = []

    def register(self, d: Dispatcher) -> None:
        d.register(RC.NOTIFY_MIN_BROKER_ID_CHANGE, self.min_broker_id_changed)
        d.register(RC.EXCHANGE_BROKER_HA_INFO, self.exchange_ha_info)

    async def run(self) -> None:
        """The member-group poll (acting master, FMQ fencing and strict locks need the group)."""
        cfg = self.cfg
        if not (self.enabled or cfg.fence_when_isolated or cfg.lock_in_strict_mode):
            return
        period = cfg.sync_broker_member_group_period_ms / 1000
        while True:
            await trio.sleep(period)
            self.feed(ev.MemberGroup(await self.fetch_member_group()))

    # ---- member group ----------------------------------------------------------------------

    async def fetch_member_group(self) -> dict[int, str] | None:
        """The group's live replicas from the first name server that knows the group ({}
        when the name servers answer but know none of it); None when none answers."""
        answered = False
        for addr in self.cfg.namesrv_addrs:
            try:
                members = await self._member_group_from(addr)
            except (RemotingError, OSError, ValueError) as e:
                log.debug("member group from %s failed: %s", addr, e)
                continue
            answered = True
            if members:
                return members
        return {} if answered else None

    async def _member_group_from(self, addr: str) -> dict[int, str] | None:
        cfg = self.cfg
        timeout = cfg.send_heartbeat_timeout_ms / 1000 * 3
        if cfg.compatible_with_old_name_srv:
            topic = SYNC_BROKER_MEMBER_PREFIX + cfg.broker_name
            h = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
            r = await self.outbound.invoke(
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
        r = await self.outbound.invoke(
            addr, RemotingCommand.request(RC.GET_BROKER_MEMBER_GROUP, mh.to_ext()), timeout
        )
        if r.code != Resp.SUCCESS or not r.body:
            return {}
        body = GetBrokerMemberGroupResponseBody.from_json(r.body)
        group = body.broker_member_group
        return dict(group.broker_addrs) if group is not None else {}

    async def min_broker_id_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE (905, oneway) from a name server."""
        if not self.enabled:
            return None
        h = NotifyMinBrokerIdChangeRequestHeader.from_ext(cmd.ext_fields)
        if h.broker_name != self.cfg.broker_name or h.min_broker_id is None:
            return None
        self.feed(
            ev.MinBrokerChanged(
                h.min_broker_id, h.min_broker_addr, h.offline_broker_addr, h.ha_broker_addr
            )
        )
        return None

    # ---- EXCHANGE_BROKER_HA_INFO (906) -----------------------------------------------------

    async def exchange_ha_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """906: a master pushes its HA address (a slave follows it), or a slave asks for it."""
        h = ExchangeHAInfoRequestHeader.from_ext(cmd.ext_fields)
        if h.master_ha_address:
            if self.role.is_master:
                return cmd.response(Resp.SYSTEM_ERROR, "this broker is a master")
            self.feed(ev.MasterPushedHa(h.master_address, h.master_ha_address))
            return cmd.response(Resp.SUCCESS)
        if not self.role.is_master:
            return cmd.response(Resp.SYSTEM_ERROR, "this broker is not a master")
        rh = ExchangeHAInfoResponseHeader(
            master_ha_address=self.ha_address(),
            master_flush_offset=self.max_offset(),
            master_address=self.address,
        )
        return cmd.response(Resp.SUCCESS, None, rh.to_ext())

    async def ask_master_ha(self, master_addr: str) -> str | None:
        """906 with no HA address: the master answers with its own (None: no answer)."""
        cmd = RemotingCommand.request(
            RC.EXCHANGE_BROKER_HA_INFO, ExchangeHAInfoRequestHeader().to_ext()
        )
        try:
            r = await self.outbound.invoke(master_addr, cmd, 3.0)
        except (RemotingError, OSError) as e:
            log.debug("HA info from %s: %s", master_addr, e)
            return None
        if r.code != Resp.SUCCESS:
            return None
        return ExchangeHAInfoResponseHeader.from_ext(r.ext_fields).master_ha_address

    async def push_ha_info(self, broker_id: int, addr: str) -> bool:
        """Pre-online (a master): give a slave our HA address."""
        h = ExchangeHAInfoRequestHeader(
            master_ha_address=self.ha_address(),
            master_flush_offset=self.max_offset(),
            master_address=self.address,
        )
        try:
            r = await self.outbound.invoke(
                addr, RemotingCommand.request(RC.EXCHANGE_BROKER_HA_INFO, h.to_ext()), 3.0
            )
        except (RemotingError, OSError) as e:
            log.info("pre-online: slave %d at %s unreachable: %s", broker_id, addr, e)
            return False
        if r.code != Resp.SUCCESS:
            log.info("pre-online: slave %d at %s refused HA info: %s", broker_id, addr, r.remark)
            return False
        return True

    async def reverse_sync(self, addr: str) -> bool:
        """Pull back what a slave changed while it acted for us: consumer offsets and delay
        progress, each only when the slave's DataVersion is newer (per-queue max)."""
        try:
            r = await self.outbound.invoke(
                addr, RemotingCommand.request(RC.GET_ALL_CONSUMER_OFFSET), 3.0
            )
            if r.code == Resp.SUCCESS and r.body and self.offsets.merge_newer(r.body):
                self.offsets.persist(force=True)
                self.reverse_synced.append(f"consumerOffset@{addr}")
                log.info("pre-online: consumer offsets taken from %s (newer)", addr)
            r = await self.outbound.invoke(
                addr, RemotingCommand.request(RC.GET_ALL_DELAY_OFFSET), 3.0
            )
            if r.code == Resp.SUCCESS and r.body and self.delay_offsets.merge_newer(r.body):
                await trio.to_thread.run_sync(self.delay_offsets.persist)
                self.reverse_synced.append(f"delayOffset@{addr}")
                log.info("pre-online: delay progress taken from %s (newer)", addr)
        except (RemotingError, OSError, ValueError) as e:
            log.info("pre-online: metadata of %s not pulled: %s", addr, e)
            return False
        # Timers ride the delay levels here (no timing wheel), so the delay progress is also
        # the timer checkpoint RocketMQ pulls with GET_TIMER_CHECK_POINT.
        return True
