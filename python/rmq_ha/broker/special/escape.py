"""The escape bridge (RocketMQ's EscapeBridge, RIP-32 "消息逃逸"): where the output of the special
services goes, and how they read a message another broker holds.

`EscapeBridge.put` decides per call:

* this broker is the master: its own store, through the send path (`LocalEscape`);
* it is a slave acting for a dead master, with enableSlaveActingMaster and enableRemoteEscape:
  another broker-set's master, with SEND_MESSAGE_V2 (`put_remote`). A slave's commitlog is a
  copy of its master's and must never fork, so nothing is ever written locally there;
* otherwise: refused with SERVICE_NOT_AVAILABLE (the caller keeps its progress and retries).

Remote puts:

* A message parked on a broker-local system topic goes out in its original form, so the
  receiving master routes it again: a half message (RMQ_SYS_TRANS_HALF_TOPIC) to its real
  topic with TRAN_MSG and the prepared flag; a timer hop (SCHEDULE_TOPIC_XXXX) to its real
  topic with its TIMER_* property (its absolute due time is kept, so it is not late twice).
* Transaction op records are never sent anywhere: their bodies are offsets in *this* group's
  half queue and would resolve unrelated halves on another broker. They are refused with
  NO_PERMISSION; the transaction service keeps such decisions in memory while acting.
* The target is a writable queue of the topic on a broker-set other than ours whose route has
  a master, chosen by a hash of (our broker name, topic), so records that must meet (a pop
  checkpoint and its ack) land on the same broker; revive-topic records keep their queue id.
  When no other broker-set has the topic (a pop retry topic only the dead master had, say),
  a master that routes the auto-create topic TBW102 gets it with TBW102 as the default topic,
  and creates it as RocketMQ's auto-create does.
* Only SEND_OK counts as delivered (a copy a master stored without its replicas, or without
  a flush, is not). A failed send (a dead master behind a stale route, RocketMQ #7923)
  refreshes the route and tries the next broker-set; if every one fails the put fails and
  the caller retries later, so a message is never dropped. Duplicates are possible (a send
  that timed out may have been stored), never loss: every escaped message keeps its
  UNIQ_KEY.
"""

from __future__ import annotations

import enum
import logging
import zlib
from collections.abc import Sequence
from typing import Final

from rmq_ha._native import TRANSACTION_PREPARED_TYPE, decode_stored_record
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.special.base import (
    INNER_PRODUCER_GROUP_PREFIX,
    TRANSACTION_TYPE_MASK,
    InnerMessage,
    LocalEscape,
    PutResult,
    real_destination,
)
from rmq_ha.client.errors import RouteNotFoundError
from rmq_ha.client.routes import RouteCache
from rmq_ha.clock import wall_ms
from rmq_ha.errors import RemotingError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
)
from rmq_ha.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT,
    TIMER_PROPERTIES,
    encode_properties,
)
from rmq_ha.protocol.models import MASTER_ID
from rmq_ha.protocol.perm import is_readable, is_writeable

log = logging.getLogger(__name__)

SEND_TIMEOUT_S: Final = 3.0
#: A remote read for pop revive: short, so a frozen group does not hold a revive pass long.
PULL_TIMEOUT_S: Final = 3.0
#: The auto-create default topic: a broker with autoCreateTopicEnable routes it, and creates a
#: topic it does not know from it when a send names it as the default topic.
AUTO_CREATE_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"
#: Pull flag: the request carries its own subscription ("*"), so no consumer group is needed.
_FLAG_SUBSCRIPTION: Final = 0x4


class Gone(enum.Enum):
    """`get_message`: the replica answered, and the message no longer exists."""

    GONE = "gone"


GONE: Final = Gone.GONE
#: Pull answers that carry the queue's real min/max offsets.
_PULL_ANSWERS: Final = frozenset(
    {Resp.PULL_NOT_FOUND, Resp.PULL_OFFSET_MOVED, Resp.PULL_RETRY_IMMEDIATELY}
)


class EscapeBridge:
    """The one `Escape` the special services write through (see the module doc)."""

    def __init__(self, ports: Ports) -> None:
        self.ports = ports
        self.local = LocalEscape(ports)
        self._routes: RouteCache | None = None

    @property
    def routes(self) -> RouteCache:
        if self._routes is None:
            self._routes = RouteCache(self.ports.outbound, self.ports.cfg.namesrv_addrs)
        return self._routes

    def remote_allowed(self) -> bool:
        cfg = self.ports.cfg
        return (
            cfg.enable_slave_acting_master and cfg.enable_remote_escape and bool(cfg.namesrv_addrs)
        )

    async def put(self, msgs: Sequence[InnerMessage]) -> PutResult:
        if self.ports.role.is_master:
            return await self.local.put(msgs)
        if not self.remote_allowed():
            return PutResult(
                Resp.SERVICE_NOT_AVAILABLE,
                "this broker is a slave and remote escape is off (enableSlaveActingMaster and "
                "enableRemoteEscape)",
            )
        phys: list[int] = []
        qoffs: list[int] = []
        for m in msgs:
            r = await self.put_remote(m)
            if not r.ok:
                return PutResult(r.code, r.remark, tuple(phys), tuple(qoffs), wall_ms())
            phys.extend(r.physical_offsets)
            qoffs.extend(r.queue_offsets)
        return PutResult(Resp.SUCCESS, None, tuple(phys), tuple(qoffs), wall_ms())

    # ---- remote put ------------------------------------------------------------------------

    async def put_remote(self, msg: InnerMessage) -> PutResult:
        if msg.topic == OP_TOPIC:
            return PutResult(
                Resp.NO_PERMISSION, "transaction op records stay with their own broker group"
            )
        out = outgoing_form(msg)
        own = self.ports.cfg.broker_name
        tried: set[str] = set()
        last = "no other broker-set with a master has a writable queue of the topic"
        for attempt in range(2):
            if attempt:
                # A stale route (the chosen master died, RocketMQ #7923): ask again.
                await self._refresh(out.topic)
            targets = await self._targets(out, out.topic, own)
            if not targets:
                if attempt:
                    await self._refresh(AUTO_CREATE_TOPIC)
                targets = await self._targets(out, AUTO_CREATE_TOPIC, own)
            for name, addr, qid in targets:
                if name in tried:
                    continue
                tried.add(name)
                r = await self._send(addr, name, out, qid)
                if r.ok:
                    return r
                last = f"{name} at {addr}: {r.code} {r.remark}"
                log.info(
                    "escape of a %s message to %s failed, trying another: %s", out.topic, name, last
                )
        return PutResult(Resp.SYSTEM_ERROR, f"remote escape of {out.topic} failed: {last}")

    async def _refresh(self, topic: str) -> None:
        try:
            await self.routes.update(topic)
        except (RouteNotFoundError, RemotingError) as e:
            log.debug("route of %s: %s", topic, e)

    async def _targets(
        self, msg: InnerMessage, route_topic: str, own: str
    ) -> list[tuple[str, str, int]]:
        """(broker name, master address, queue id) of the other broker-sets routing
        `route_topic`, in the order the hash picks them."""
        try:
            route = await self.routes.get(route_topic)
        except (RouteNotFoundError, RemotingError) as e:
            log.debug("no route of %s for escape: %s", route_topic, e)
            return []
        if route is None:
            return []
        masters = {
            bd.broker_name: bd.broker_addrs[MASTER_ID]
            for bd in route.broker_datas
            if MASTER_ID in bd.broker_addrs and bd.broker_name != own
        }
        options = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if qd.broker_name in masters and is_writeable(qd.perm) and qd.write_queue_nums > 0:
                options.append((qd.broker_name, masters[qd.broker_name], qd.write_queue_nums))
        if not options:
            return []
        key = zlib.crc32(f"{msg.topic}@{own}".encode())
        start = key % len(options)
        out = []
        for i in range(len(options)):
            name, addr, nums = options[(start + i) % len(options)]
            if route_topic != msg.topic:
                qid = 0  # a topic the receiver creates: queue 0 exists whatever its count
            elif msg.topic.startswith(REVIVE_TOPIC_PREFIX) and msg.queue_id < nums:
                qid = msg.queue_id  # a checkpoint and its ack must meet in one revive queue
            else:
                qid = key % nums
            out.append((name, addr, qid))
        return out

    async def _send(self, addr: str, broker_name: str, msg: InnerMessage, qid: int) -> PutResult:
        cfg = self.ports.cfg
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP) or (
            f"{INNER_PRODUCER_GROUP_PREFIX}{cfg.broker_name}_{self.ports.cfg.broker_id}"
        )
        h = SendMessageRequestHeaderV2(
            producer_group=group,
            topic=msg.topic,
            default_topic=AUTO_CREATE_TOPIC,
            default_topic_queue_nums=4,
            queue_id=qid,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp or wall_ms(),
            flag=msg.flag,
            properties=encode_properties(msg.properties),
            reconsume_times=msg.reconsume_times,
            broker_name=broker_name,
        )
        cmd = RemotingCommand.request(RC.SEND_MESSAGE_V2, h.to_ext(), msg.body)
        try:
            resp = await self.ports.outbound.invoke(addr, cmd, SEND_TIMEOUT_S)
        except RemotingError as e:
            return PutResult(Resp.SYSTEM_ERROR, f"send to {addr} failed: {e}")
        if resp.code != Resp.SUCCESS:
            # Only SEND_OK counts (stricter than RocketMQ, whose put result counts these codes
            # as stored, as `PutResult.ok` does for a local put): a copy stored on a master
            # whose replicas did not get it (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT) or that
            # did not flush it may be the only one, on a master about to be replaced; progress
            # moved past it would lose the message with that master (fault probe: 47 delayed
            # and transaction messages). The caller tries another broker-set or retries later;
            # a copy stored anyway is a duplicate at worst.
            why = f"{addr} answered {resp.code} ({resp.remark or 'no remark'})"
            if PutResult(resp.code).ok:
                return PutResult(Resp.SYSTEM_ERROR, f"{why}: stored without SEND_OK")
            return PutResult(resp.code, why)
        rh = SendMessageResponseHeader.from_ext(resp.ext_fields)
        return PutResult(resp.code, None, (), (rh.queue_offset,), wall_ms())

    # ---- remote get ------------------------------------------------------------------------

    async def get_message(
        self, broker_name: str, topic: str, queue_id: int, offset: int
    ) -> InnerMessage | Gone | None:
        """The message at `offset` of a queue another broker-set holds, read from whatever its
        route shows as id 0 (its master, or the slave acting for it); `GONE` when that replica
        says the offset is below the queue's minimum (retention removed it: nothing left to
        read); None when no replica answers (try again later). RocketMQ's
        getMessageFromRemote."""
        for attempt in range(2):
            if attempt:
                await self._refresh(topic)
            try:
                route = await self.routes.get(topic)
            except (RouteNotFoundError, RemotingError):
                route = None
            if route is None:
                continue
            addr = next(
                (
                    bd.broker_addrs.get(MASTER_ID)
                    for bd in route.broker_datas
                    if bd.broker_name == broker_name
                ),
                None,
            )
            readable = any(
                qd.broker_name == broker_name and is_readable(qd.perm) for qd in route.queue_datas
            )
            if addr is None or not readable:
                continue
            rec = await self._pull_one(addr, broker_name, topic, queue_id, offset)
            if rec is not None:
                return rec
        return None

    async def _pull_one(
        self, addr: str, broker_name: str, topic: str, queue_id: int, offset: int
    ) -> InnerMessage | Gone | None:
        h = PullMessageRequestHeader(
            consumer_group=f"InnerConsumerGroup_{self.ports.cfg.broker_name}",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=1,
            sys_flag=_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
            expression_type="TAG",
            bname=broker_name,
        )
        cmd = RemotingCommand.request(RC.PULL_MESSAGE, h.to_ext())
        try:
            resp = await self.ports.outbound.invoke(addr, cmd, PULL_TIMEOUT_S)
        except RemotingError as e:
            log.debug("remote get %s:%d@%d from %s failed: %s", topic, queue_id, offset, addr, e)
            return None
        if resp.code != Resp.SUCCESS or not resp.body or len(resp.body) < 4:
            if resp.code in _PULL_ANSWERS:
                try:
                    rh = PullMessageResponseHeader.from_ext(resp.ext_fields)
                except ValueError:  # HeaderError: no offsets in the answer
                    return None
                if offset < rh.min_offset:
                    return GONE
            return None
        size = int.from_bytes(resp.body[:4], "big")
        try:
            rec = decode_stored_record(resp.body[:size])
        except ValueError as e:
            log.warning("remote get from %s: bad record: %s", addr, e)
            return None
        if rec.get("queue_offset") != offset:
            return None
        return InnerMessage.from_record(rec)


def outgoing_form(msg: InnerMessage) -> InnerMessage:
    """The form in which a message leaves for another broker-set: a parked half or timer goes
    back to its real topic with what makes the receiver park it again."""
    dest = real_destination(msg.properties)
    if msg.topic not in (HALF_TOPIC, SCHEDULE_TOPIC) or dest is None:
        return msg
    props = dict(msg.properties)
    props.pop(PROPERTY_REAL_TOPIC, None)
    props.pop(PROPERTY_REAL_QUEUE_ID, None)
    props[PROPERTY_WAIT] = "false"
    sys_flag = msg.sys_flag
    if msg.topic == HALF_TOPIC:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        sys_flag = (sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_PREPARED_TYPE
    elif any(k in props for k in TIMER_PROPERTIES):
        props.pop(PROPERTY_DELAY, None)  # the timer's own due time decides, not a level
    return InnerMessage(
        topic=dest[0],
        queue_id=dest[1],
        body=msg.body,
        properties=props,
        flag=msg.flag,
        sys_flag=sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        prepared_txn_offset=0,
    )
