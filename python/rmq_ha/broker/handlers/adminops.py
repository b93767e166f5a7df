"""The admin requests behind mqadmin's topic, group, connection, progress and message-query
commands:

    GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204)   consumerConnection,
                                                                            producerConnection
    DELETE_TOPIC_IN_BROKER (215)                                      deleteTopic
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), DELETE_SUBSCRIPTIONGROUP (207),
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)                            updateSubGroup, deleteSubGroup
    GET_TOPIC_STATS_INFO (202)                                        topicStatus
    GET_CONSUME_STATS (208)                                           consumerProgress
    INVOKE_BROKER_TO_RESET_OFFSET (222)                               resetOffsetByTime
    QUERY_MESSAGE (12)                                                queryMsgByKey, queryMsgById
    QUERY_TOPIC_CONSUME_BY_WHO (300)                                  topicList -c

QUERY_MESSAGE has no hash index behind it (RocketMQ's IndexFile): it scans each of the topic's
queues backwards from the last message stored at or before endTimestamp down to the first
stored at or after beginTimestamp (the consume queues' time search), reading each record's
KEYS / UNIQ_KEY, in a worker thread; it answers the newest maxNum matches (as RocketMQ's index
does) and reads at most `QUERY_SCAN_LIMIT` records, shared evenly by the queues. Correct, but
its cost grows with the messages in the time range.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import trio

from rmq_ha._native import client_record, decode_stored_record
from rmq_ha.broker.clients import ClientInfo
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.subgroups import SubscriptionGroupManager
from rmq_ha.broker.topics import check_topic_name
from rmq_ha.errors import StoreError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.admin import (
    UNIQUE_MSG_QUERY_FLAG,
    ClientConnection,
    ConsumerConnection,
    ConsumeStats,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    GroupList,
    OffsetWrapper,
    ProducerConnection,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
    TopicOffset,
    TopicStatsTable,
)
from rmq_ha.protocol.codes import LanguageCode
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.message import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, decode_properties
from rmq_ha.protocol.models import MessageQueue
from rmq_ha.protocol.pop import pop_retry_topic

log = logging.getLogger(__name__)

#: At most this many records are read by one QUERY_MESSAGE.
QUERY_SCAN_LIMIT: Final = 200_000
_BATCH: Final = 64
#: MessageConst.KEY_SEPARATOR: the KEYS property holds keys separated by one space.
KEY_SEPARATOR: Final = " "


def language_name(code: int) -> str:
    """A client's LanguageCode as RocketMQ prints it (the number when unknown)."""
    try:
        return LanguageCode(code).name
    except ValueError:
        return str(code)


def _connection(c: ClientInfo) -> ClientConnection:
    return ClientConnection(
        client_id=c.client_id,
        client_addr=c.conn.peer,
        language=language_name(c.language),
        version=c.version,
    )


def store_time(p: Ports, topic: str, queue_id: int, queue_offset: int) -> int:
    """Store timestamp of the message at `queue_offset`, 0 when it cannot be read."""
    native = p.store.native
    try:
        phys, _size, _tag = native.queue_unit(topic, queue_id, queue_offset)
        rec = decode_stored_record(native.read_record(phys).tobytes())
    except Exception:  # gone by retention, quarantined, or not dispatched yet
        return 0
    ts = rec.get("store_timestamp", 0)
    return ts if isinstance(ts, int) else 0


def topic_stats(p: Ports, topic: str) -> TopicStatsTable:
    tc = p.topics.get(topic)
    assert tc is not None
    native = p.store.native
    table: dict[MessageQueue, TopicOffset] = {}
    for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
        lo, hi = native.queue_min_offset(topic, qid), native.queue_max_offset(topic, qid)
        last = store_time(p, topic, qid, hi - 1) if hi > lo else 0
        table[MessageQueue(topic, p.cfg.broker_name, qid)] = TopicOffset(lo, hi, last)
    return TopicStatsTable(table)


def consume_stats(p: Ports, group: str, topic: str | None) -> ConsumeStats:
    topics = [topic] if topic else p.offsets.topics_of_group(group)
    native = p.store.native
    table: dict[MessageQueue, OffsetWrapper] = {}
    tps = 0.0
    for t in topics:
        tc = p.topics.get(t)
        if tc is None:
            continue
        tps += p.traffic.consume_tps(t, group)
        for qid in range(tc.read_queue_nums):
            committed = p.offsets.query(group, t, qid)
            consumer = committed if committed is not None else 0
            broker = native.queue_max_offset(t, qid)
            last = store_time(p, t, qid, consumer - 1) if consumer > 0 else 0
            pulled = p.traffic.pulled.get((t, group, qid), 0)
            table[MessageQueue(t, p.cfg.broker_name, qid)] = OffsetWrapper(
                broker_offset=broker,
                consumer_offset=consumer,
                # where the group's last pull asked to go on from (RocketMQ's pull offset)
                pull_offset=max(consumer, pulled),
                last_timestamp=last,
            )
    return ConsumeStats(table, tps)


def reset_offsets(p: Ports, h: ResetOffsetRequestHeader) -> dict[MessageQueue, int]:
    """RocketMQ's Broker2Client.resetOffset rule per queue: the offset of the first message
    stored at or after `timestamp` (the queue's end for timestamp -1, as mqadmin's
    skipAccumulatedMessage asks; or the given `offset`), unless not forced and the group
    is already before it. Commits the result in the broker's offset table."""
    tc = p.topics.get(h.topic)
    assert tc is not None
    native = p.store.native
    out: dict[MessageQueue, int] = {}
    qids = range(tc.read_queue_nums) if h.queue_id < 0 else [h.queue_id]
    for qid in qids:
        if h.offset is not None and h.offset >= 0:
            target = min(
                max(h.offset, native.queue_min_offset(h.topic, qid)),
                native.queue_max_offset(h.topic, qid),
            )
        elif h.timestamp == -1:
            # skipAccumulatedMessage: to the end of the queue (it rewound to 0 here)
            target = native.queue_max_offset(h.topic, qid)
        else:
            target = native.search_offset_by_timestamp(h.topic, qid, h.timestamp)
        current = p.offsets.query(h.group, h.topic, qid)
        offset = target if h.is_force or current is None or target < current else current
        p.offsets.commit(h.group, h.topic, qid, offset)
        out[MessageQueue(h.topic, p.cfg.broker_name, qid)] = offset
    return out


def query_messages(p: Ports, h: QueryMessageRequestHeader, unique: bool) -> list[bytes]:
    """Records of `h.topic` stored in [begin, end] whose key matches, newest first and at most
    maxNum of them, as RocketMQ's index answers (it walks each key's entries from the latest):
    each queue is read backwards from its last message stored at or before `end` (see module
    doc)."""
    native = p.store.native
    queues = sorted(q for t, q in native.queues() if t == h.topic)
    limit = max(1, h.max_num)
    found: list[tuple[int, int, bytes]] = []  # (store time, commitlog offset, record)
    # each queue has its share of the budget, so one long queue cannot use it up before the
    # newest records of the others are read
    per_queue = max(1, QUERY_SCAN_LIMIT // max(1, len(queues)))
    for qid in queues:
        scanned = 0
        lo = native.search_offset_by_timestamp(h.topic, qid, h.begin_timestamp)
        hi = (
            native.search_offset_by_timestamp(h.topic, qid, h.end_timestamp + 1)
            if h.end_timestamp < 2**63 - 1
            else native.queue_max_offset(h.topic, qid)
        )
        mine = 0
        while hi > lo and mine < limit and scanned < per_queue:
            start = max(lo, hi - _BATCH)
            window: list[bytes] = []
            offset = start
            while offset < hi:
                # read around quarantined records (damage): the intact ones are still found
                bufs, nxt, _lo, _hi, _skipped = native.read_queue(h.topic, qid, offset, hi - offset)
                if nxt <= offset:
                    break
                window.extend(b.tobytes() for b in bufs)
                offset = nxt
            for raw in reversed(window):
                scanned += 1
                rec = decode_stored_record(raw)
                ts = rec.get("store_timestamp", 0)
                if not isinstance(ts, int) or not h.begin_timestamp <= ts <= h.end_timestamp:
                    continue
                props_raw = rec.get("properties")
                props = decode_properties(props_raw if isinstance(props_raw, bytes) else b"")
                if unique:
                    hit = props.get(PROPERTY_UNIQ_KEY) == h.key
                else:
                    hit = h.key in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR)
                if hit:
                    phys = rec.get("physical_offset", 0)
                    found.append((ts, phys if isinstance(phys, int) else 0, raw))
                    mine += 1
                    if mine >= limit:
                        break
            hi = start
    found.sort(key=lambda f: (-f[0], -f[1]))
    return [raw for _, _, raw in found[:limit]]


def group_problem(cfg: SubscriptionGroupConfig) -> str | None:
    """Why a subscription group config may not be stored, or None."""
    if not cfg.group_name or check_topic_name(cfg.group_name) is not None:
        return f"bad subscription group config: groupName {cfg.group_name!r}"
    if cfg.retry_queue_nums < 0 or cfg.retry_max_times < -1:
        return "bad subscription group config: retryQueueNums must be >= 0 and retryMaxTimes >= -1"
    return None


def consumer_groups_of(p: Ports, topic: str) -> set[str]:
    """Groups consuming `topic`: online members subscribed to it, and groups with offsets
    committed on it (RocketMQ's whichGroupByTopic, both sources)."""
    online = {g for g, cg in p.clients.consumers.items() if topic in cg.subscriptions}
    return online | set(p.offsets.groups_of_topic(topic))


def _delete_topic(p: Ports, topic: str) -> str | None:
    """Deletes a topic's config, offsets, traffic counts and messages (RocketMQ destroys the
    consume queues): a master appends the store's deletion marker, which replicates, so its
    slaves drop them when they reach it; a topic created again under this name starts empty.
    A slave only drops the config (its master's marker comes with the log). Returns why it
    failed, or None."""
    native = p.store.native
    marker = None
    if p.role.is_master and any(t == topic for t, _ in native.queues()):
        try:
            marker = native.delete_topic(topic)
        except StoreError as e:
            return f"deleting topic {topic}: {e}"
    existed = p.topics.delete(topic)
    dropped = p.offsets.remove(topic=topic)
    p.traffic.forget(topic=topic)
    p.clients.forget(topic=topic)
    if existed:
        p.topics.changed()
    log.info(
        "topic %s deleted (config %s, %d group offsets dropped, messages %s)",
        topic,
        "removed" if existed else "absent",
        dropped,
        "none" if marker is None else f"hidden below commitlog offset {marker}",
    )
    return None


def register(d: Dispatcher, p: Ports, groups: SubscriptionGroupManager) -> None:
    async def consumer_connections(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_ext(cmd.ext_fields)
        g = p.clients.consumers.get(h.consumer_group)
        if g is None or not g.clients:
            return cmd.response(Resp.CONSUMER_NOT_ONLINE, "the consumer group not online")
        body = ConsumerConnection(
            connection_set=[_connection(c) for _, c in sorted(g.clients.items())],
            subscription_table=dict(g.subscriptions),
            consume_type=g.consume_type,
            message_model=g.message_model,
            consume_from_where=g.consume_from_where,
        )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def producer_connections(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_ext(cmd.ext_fields)
        clients = p.clients.producers.get(h.producer_group) or {}
        if not clients:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist"
            )
        body = ProducerConnection([_connection(c) for _, c in sorted(clients.items())])
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def delete_topic(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_ext(cmd.ext_fields)
        why = check_topic_name(h.topic)
        if why is not None:
            return cmd.response(Resp.SYSTEM_ERROR, why)
        if p.topics.protected(h.topic):
            return cmd.response(
                Resp.SYSTEM_ERROR,
                f"the topic {h.topic} is a system topic: it cannot be deleted",
            )
        # RocketMQ's clearRetryTopicWhenDeleteTopic: the pop retry topic of every group that
        # consumed the topic goes with it (messages a group can no longer be subscribed to)
        retries: list[str] = []
        if p.cfg.clear_retry_topic_when_delete_topic:
            retries = [
                r
                for r in sorted(
                    {pop_retry_topic(h.topic, g) for g in p.offsets.groups_of_topic(h.topic)}
                )
                if p.topics.get(r) is not None
            ]
        for topic in [h.topic, *retries]:
            why = _delete_topic(p, topic)
            if why is not None:
                return cmd.response(Resp.SYSTEM_ERROR, why)
        return cmd.response(Resp.SUCCESS)

    async def update_group(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            cfg = SubscriptionGroupConfig.from_json(cmd.body)
        except BodyDecodeError as e:
            return cmd.response(Resp.SYSTEM_ERROR, f"bad subscription group config: {e}")
        why = group_problem(cfg)
        if why is not None:
            return cmd.response(Resp.SYSTEM_ERROR, why)
        groups.update(cfg)
        return cmd.response(Resp.SUCCESS)

    async def update_groups(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: all or none (every config is checked
        before any is stored)."""
        try:
            cfgs = SubscriptionGroupList.from_json(cmd.body).group_config_list
        except BodyDecodeError as e:
            return cmd.response(Resp.INVALID_PARAMETER, f"bad subscription group list: {e}")
        for cfg in cfgs:
            why = group_problem(cfg)
            if why is not None:
                return cmd.response(Resp.INVALID_PARAMETER, why)
        for cfg in cfgs:
            groups.update(cfg)
        return cmd.response(Resp.SUCCESS)

    async def all_groups(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, groups.wrapper().to_json())

    async def delete_group(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext(cmd.ext_fields)
        groups.delete(h.group_name)
        p.traffic.forget(group=h.group_name)
        p.clients.forget(group=h.group_name)
        if h.clean_offset:
            p.offsets.remove(group=h.group_name)
        return cmd.response(Resp.SUCCESS)

    async def stats(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_ext(cmd.ext_fields)
        if p.topics.get(h.topic) is None:
            return cmd.response(Resp.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        body = topic_stats(p, h.topic)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def group_stats(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext(cmd.ext_fields)
        if h.topic and p.topics.get(h.topic) is None:
            return cmd.response(Resp.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        body = consume_stats(p, h.consumer_group, h.topic)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def reset_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_ext(cmd.ext_fields)
        if p.topics.get(h.topic) is None:
            return cmd.response(
                Resp.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        table = reset_offsets(p, h)
        body = ResetOffsetBody(table).to_json()
        # Online clients hold offsets in memory: tell them (RESET_CONSUMER_CLIENT_OFFSET, 220).
        g = p.clients.consumers.get(h.group)
        notice = ResetOffsetRequestHeader(
            topic=h.topic, group=h.group, timestamp=h.timestamp, is_force=h.is_force
        ).to_ext()
        for c in list(g.clients.values()) if g is not None else []:
            try:
                await c.conn.send(
                    RemotingCommand.request(
                        RC.RESET_CONSUMER_CLIENT_OFFSET, notice, body, oneway=True
                    )
                )
            except Exception as e:  # a client that went away is dropped by its close hook
                log.debug("reset notice to %s failed: %s", c.client_id, e)
        log.info(
            "offsets of %s on %s reset to %s (timestamp %d, force %s)",
            h.group,
            h.topic,
            {mq.queue_id: o for mq, o in table.items()},
            h.timestamp,
            h.is_force,
        )
        return cmd.response(Resp.SUCCESS, None, None, body)

    async def query_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(cmd.ext_fields)
        unique = (cmd.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) or "").lower() == "true"
        if h.end_timestamp < h.begin_timestamp:
            return cmd.response(Resp.SYSTEM_ERROR, "endTimestamp is before beginTimestamp")
        found = await trio.to_thread.run_sync(query_messages, p, h, unique)
        if not found:
            return cmd.response(
                Resp.QUERY_NOT_FOUND, "can not find message, maybe time range not correct"
            )
        rh = QueryMessageResponseHeader(
            index_last_update_timestamp=int(time.time() * 1000),
            index_last_update_phyoffset=p.store.native.max_offset,
        )
        # as clients are served records: without the store's whole-record CRC trailer
        body = b"".join(client_record(r) for r in found)
        return cmd.response(Resp.SUCCESS, None, rh.to_ext(), body)

    d.register(RC.GET_CONSUMER_CONNECTION_LIST, consumer_connections)
    d.register(RC.GET_PRODUCER_CONNECTION_LIST, producer_connections)
    d.register(RC.DELETE_TOPIC_IN_BROKER, delete_topic)
    d.register(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, update_group)
    d.register(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, update_groups)
    d.register(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, all_groups)
    d.register(RC.DELETE_SUBSCRIPTIONGROUP, delete_group)
    d.register(RC.GET_TOPIC_STATS_INFO, stats)
    d.register(RC.GET_CONSUME_STATS, group_stats)
    d.register(RC.INVOKE_BROKER_TO_RESET_OFFSET, reset_offset)

    async def consumed_by(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_ext(cmd.ext_fields)
        body = GroupList(group_list=consumer_groups_of(p, h.topic))
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    d.register(RC.QUERY_MESSAGE, query_message)
    d.register(RC.QUERY_TOPIC_CONSUME_BY_WHO, consumed_by)
