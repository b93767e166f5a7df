"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361), with long polling.

Outcomes follow RocketMQ's store statuses and their response codes:
* messages found -> SUCCESS, body = the stored records concatenated (as clients decode them),
  built by one native call (Store.read_queue_body: no Python object per record);
* offset == max (nothing new) -> park until a message arrives or the suspend timeout, then
  PULL_NOT_FOUND;
* offset > max, or below min -> PULL_OFFSET_MOVED with nextBeginOffset corrected to max/min;
* an empty queue asked for a non-zero offset -> PULL_OFFSET_MOVED to 0;
* on a broker that is not the master (a slave, an acting slave, a replica still waiting for
  its role) those two answer PULL_RETRY_IMMEDIATELY instead, with the client's own offset as
  nextBeginOffset and the master suggested, unless offsetCheckInSlave (RocketMQ's
  nextOffsetCorrection): a replica's queue may end below the master's (a restarted master
  that lost its unreplicated tail, a slave behind) or start above it, and moving the client's
  offset there re-delivered what it had consumed, or would skip what the master still holds;
* units exist but none matches the tag filter, or (an SQL92 subscription, with
  enablePropertyFilter) no record read matches the expression on its properties ->
  PULL_RETRY_IMMEDIATELY past them; a held pull woken by such arrivals holds on from past
  them until a matching one arrives or its suspend time ends (then PULL_NOT_FOUND there);
* a damaged (quarantined) record (issue 15): the records before it are served; while it may
  still be repaired from a replica (damagedRecordWaitMs from the first reader) the pull stops
  before it — held until a repair or the end of the wait, then PULL_NOT_FOUND at the same
  offset —; after that it is skipped (counted, logged) and the records after it are served,
  or PULL_RETRY_IMMEDIATELY past it when nothing else is there.
A pull that carries a commit offset also commits it (sysFlag bit 0).
"""

from __future__ import annotations

import trio

from rmq_ha._native import decode_stored_record
from rmq_ha.broker.core.storage import record_queue_offset
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.sqlfilter import SqlFilter, SqlFilterError, compile_sql
from rmq_ha.errors import OffsetOutOfRangeError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from rmq_ha.protocol.message import decode_properties, java_hash, parse_tag_expression
from rmq_ha.protocol.models import ExpressionType, SubscriptionData
from rmq_ha.protocol.perm import is_readable

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MAX_PULL_BYTES = 4 << 20


def register(d: Dispatcher, p: Ports) -> None:
    async def pull(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await pull_message(p, cmd, conn.peer)

    d.register(RC.PULL_MESSAGE, pull)
    d.register(RC.LITE_PULL_MESSAGE, pull)


def _filter(
    p: Ports, h: PullMessageRequestHeader
) -> tuple[list[int] | None, SqlFilter | None, tuple[int, str] | None]:
    """What the pull filters on: tag codes (checked against the consume queue), or an SQL92
    filter (checked against each record's properties); or the refusal (code, remark)."""
    if h.sys_flag & FLAG_SUBSCRIPTION:
        expr, etype = h.subscription, h.expression_type
        if (h.consumer_group, h.topic) not in p.clients.compensated:
            p.clients.compensate(
                h.consumer_group, SubscriptionData.build(h.topic, expr, etype, h.sub_version or 0)
            )
    else:
        sub = p.clients.subscription(h.consumer_group, h.topic)
        expr, etype = (sub.sub_string, sub.expression_type) if sub is not None else (None, None)
    if etype and etype != ExpressionType.TAG:
        if etype != ExpressionType.SQL92 or not p.cfg.enable_property_filter:
            return (
                None,
                None,
                (
                    Resp.SYSTEM_ERROR,
                    f"The broker does not support consumer to filter message by {etype}",
                ),
            )
        try:
            return None, compile_sql(expr or ""), None
        except SqlFilterError as e:
            return None, None, (Resp.SUBSCRIPTION_PARSE_FAILED, f"bad SQL92 expression: {e}")
    tags = parse_tag_expression(expr)
    return ([java_hash(t) for t in tags] if tags is not None else None), None, None


def _sql_matching(body: bytes, sql: SqlFilter) -> tuple[bytes, int]:
    """The records of a pull body (stored records back to back) whose properties match."""
    kept: list[bytes] = []
    view = memoryview(body)
    at = 0
    while at + 4 <= len(view):
        size = int.from_bytes(view[at : at + 4], "big")
        if size <= 0 or at + size > len(view):
            break
        record = body[at : at + size]
        raw_props = decode_stored_record(record).get("properties")
        if sql.matches(decode_properties(raw_props if isinstance(raw_props, bytes) else b"")):
            kept.append(record)
        at += size
    return b"".join(kept), len(kept)


def _refusal(p: Ports, h: PullMessageRequestHeader, peer: str) -> tuple[int, str] | None:
    """Why this pull may not read now (broker or topic not readable, no such topic or queue,
    the group may not consume); checked when it arrives and again when a held pull wakes."""
    if not is_readable(p.cfg.broker_permission):
        return Resp.NO_PERMISSION, f"the broker[{p.cfg.broker_name}] pulling message is forbidden"
    tc = p.topics.get(h.topic)
    if tc is None:
        return Resp.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
    if not is_readable(tc.perm):
        return Resp.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
    if not 0 <= h.queue_id < tc.read_queue_nums:
        return (
            Resp.INVALID_PARAMETER,
            f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
            f"[{tc.read_queue_nums}] consumer:[/{peer}]",
        )
    refusal = p.subgroups.consume_refusal(h.consumer_group)
    if refusal is not None:
        return Resp.NO_PERMISSION, refusal
    return None


async def pull_message(p: Ports, cmd: RemotingCommand, peer: str = "") -> RemotingCommand:
    h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
    refused = _refusal(p, h, peer)
    if refused is not None:
        return cmd.response(*refused)
    tag_codes, sql, filter_refusal = _filter(p, h)
    if filter_refusal is not None:
        return cmd.response(*filter_refusal)
    if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
        p.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    may_suspend = bool(h.sys_flag & FLAG_SUSPEND) and p.cfg.long_polling_enable
    timeout_s = (h.suspend_timeout_millis if may_suspend else 0) / 1000
    max_bytes = min(h.max_msg_bytes or MAX_PULL_BYTES, MAX_PULL_BYTES)
    store = p.store.native
    offset = h.queue_offset  # moves past messages the filter drops while the pull is held
    hold_until = trio.current_time() + timeout_s
    woke = False
    while True:
        qmin = store.queue_min_offset(h.topic, h.queue_id)
        qmax = store.queue_max_offset(h.topic, h.queue_id)
        if qmax == 0:
            if offset != 0:
                return _moved(p, cmd, offset, 0, qmin, qmax)
            status, nxt = Resp.PULL_NOT_FOUND, 0
        elif offset < qmin:
            return _moved(p, cmd, offset, qmin, qmin, qmax)
        elif offset > qmax:
            return _moved(p, cmd, offset, qmax, qmin, qmax)
        elif offset == qmax:
            status, nxt = Resp.PULL_NOT_FOUND, offset
        else:
            try:
                # One native call: the records served, back to back (no object per record).
                body, n, nxt, qmin, qmax, skipped = store.read_queue_body(
                    h.topic,
                    h.queue_id,
                    offset,
                    max(1, h.max_msg_nums),
                    max_bytes,
                    tag_codes,
                )
            except OffsetOutOfRangeError:
                continue  # retention moved the minimum between the checks: look again
            wait_until = None
            if skipped:
                # Damaged records (docs/store.md "Damaged records in pulls"): serve what is
                # before one still waited for; past the wait, skip it (counted, logged).
                verdict = p.storage.judge(skipped, h.topic, h.queue_id)
                if verdict.serve_below is not None:
                    body, n = _records_below(body, verdict.serve_below)
                    nxt, wait_until = verdict.serve_below, verdict.wait_until_ms
            if sql is not None and n:
                body, n = _sql_matching(body, sql)
            if n:
                p.traffic.got(h.topic, h.consumer_group, n, len(body), h.queue_id, nxt)
                return _respond(cmd, Resp.SUCCESS, nxt, qmin, qmax, body)
            if wait_until is None:
                left_s = hold_until - trio.current_time()
                if not (woke and nxt >= qmax and left_s > 0):
                    # Filtered out, or only skipped damaged records: move past them.
                    return _respond(cmd, Resp.PULL_RETRY_IMMEDIATELY, nxt, qmin, qmax)
                # A held pull woken by arrivals its filter drops holds on from past them, as
                # RocketMQ's hold service wakes a pull only for a message its filter matches
                # (an answer per arrival costs every tag-filtered group a round trip each).
                offset, status, timeout_s = nxt, Resp.PULL_NOT_FOUND, left_s
            else:
                # The first record is damaged and may still be repaired: hold the pull until a
                # repair or the end of the wait (within the suspend timeout), then look again.
                left_s = min(timeout_s, max(0.0, wait_until / 1000 - trio.current_time()))
                if left_s <= 0:
                    return _respond(cmd, Resp.PULL_NOT_FOUND, offset, qmin, qmax)
                deadline = trio.current_time() + timeout_s
                await p.storage.wait_repair(left_s)
                timeout_s = max(0.0, deadline - trio.current_time())
                continue
        if timeout_s <= 0:
            return _respond(cmd, status, nxt, qmin, qmax)
        arrived = await p.hold.wait(h.topic, h.queue_id, offset, timeout_s)
        timeout_s = 0  # one more look after waking, then answer
        if not arrived:
            return _respond(cmd, status, nxt, qmin, qmax)
        woke = True
        # The look after waking checks the pull again as RocketMQ re-runs a held pull: the
        # group, topic or broker may have lost read permission (consumeEnable=false), and
        # the filter is the group's subscription as it is now (a consumer that resubscribed
        # while its pull was held must not get a message of its old subscription).
        refused = _refusal(p, h, peer)
        if refused is not None:
            return cmd.response(*refused)
        tag_codes, sql, filter_refusal = _filter(p, h)
        if filter_refusal is not None:
            return cmd.response(*filter_refusal)


def _records_below(body: bytes, queue_offset: int) -> tuple[bytes, int]:
    """The leading records of a pull body (stored records back to back, in queue order, each
    starting with its 4-byte size) whose queue offset is below `queue_offset`, and their count.
    Only for the rare pull that skipped a damaged record."""
    view = memoryview(body)
    at = n = 0
    while at + 4 <= len(view):
        size = int.from_bytes(view[at : at + 4], "big")
        if size <= 0 or record_queue_offset(body[at : at + size]) >= queue_offset:
            break
        at += size
        n += 1
    return body[:at], n


def _moved(
    p: Ports, cmd: RemotingCommand, offset: int, corrected: int, qmin: int, qmax: int
) -> RemotingCommand:
    """The client's offset is outside this queue: a master moves it (PULL_OFFSET_MOVED to
    `corrected`); any other replica sends the client to the master with its offset as it was
    (RocketMQ's answer on a slave without offsetCheckInSlave)."""
    if p.role.is_master or p.cfg.offset_check_in_slave:
        return _respond(cmd, Resp.PULL_OFFSET_MOVED, corrected, qmin, qmax)
    return _respond(cmd, Resp.PULL_RETRY_IMMEDIATELY, offset, qmin, qmax)


def _respond(
    cmd: RemotingCommand,
    code: int,
    next_offset: int,
    qmin: int,
    qmax: int,
    body: bytes | None = None,
) -> RemotingCommand:
    rh = PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=next_offset, min_offset=qmin, max_offset=qmax
    )
    return cmd.response(code, None, rh.to_ext(), body)
