"""The admin requests about consumer groups on one broker that mqadmin's brokerConsumeStats,
queryCq and the admin API's queryTopicsByConsumer / querySubscriptionByConsumer /
queryConsumeTimeSpan send:

    GET_BROKER_CONSUME_STATS (317)        every subscription group's progress on each topic it
                                          has offsets on, and the broker's total lag
    QUERY_TOPICS_BY_CONSUMER (343)        the topics a group has offsets on
    QUERY_SUBSCRIPTION_BY_CONSUMER (345)  an online group's subscription to a topic
    QUERY_CONSUME_TIME_SPAN (303)         per write queue: first, last and last-consumed
                                          store times, and how long the next message waits
    QUERY_CONSUME_QUEUE (321)             raw consume-queue units of a queue
    CLONE_GROUP_OFFSET (314)              one group's offsets copied to another
    GET_ALL_PRODUCER_INFO (328)           every connected producer, by group
    GET_SUBSCRIPTIONGROUP_CONFIG (352)    one subscription group's config
    VIEW_BROKER_STATS_DATA (315)          a topic's stored / a group's served messages over
                                          the last minute, hour and day (mqadmin statsAll)

The rules are RocketMQ's AdminBrokerProcessor's. Pure functions over `Ports` compute the
bodies; the handlers only decode and answer.
"""

from __future__ import annotations

import logging
import time

from rmq_ha.broker.clients import ClientInfo
from rmq_ha.broker.handlers.adminops import consume_stats, language_name, store_time
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.subgroups import SubscriptionGroupManager
from rmq_ha.errors import RmqHaError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.admin import (
    BrokerStatsData,
    BrokerStatsItem,
    CloneGroupOffsetRequestHeader,
    ConsumeQueueData,
    ConsumeStatsList,
    GetConsumeStatsInBrokerHeader,
    GetSubscriptionGroupConfigRequestHeader,
    ProducerInfo,
    ProducerTableInfo,
    QueryConsumeQueueRequestHeader,
    QueryConsumeQueueResponseBody,
    QueryConsumeTimeSpanBody,
    QueryConsumeTimeSpanRequestHeader,
    QuerySubscriptionByConsumerRequestHeader,
    QuerySubscriptionResponseBody,
    QueryTopicsByConsumerRequestHeader,
    QueueTimeSpan,
    TopicList,
    ViewBrokerStatsDataRequestHeader,
)
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import MessageQueue

log = logging.getLogger(__name__)

#: At most this many units are answered by one QUERY_CONSUME_QUEUE.
MAX_CQ_UNITS = 1000


def broker_consume_stats(p: Ports, groups: list[str], is_order: bool) -> ConsumeStatsList:
    """Every subscription group's ConsumeStats on each topic it has offsets on (a topic with
    no config here, not orderly when `is_order`, or outside the subscriptions of an online
    group is left out), with the total lag."""
    out = []
    total = inflight = 0
    for group in groups:
        stats = []
        online = p.clients.consumers.get(group)
        for topic in p.offsets.topics_of_group(group):
            tc = p.topics.get(topic)
            if tc is None or (is_order and not tc.order):
                continue
            if online is not None and online.subscriptions and topic not in online.subscriptions:
                continue
            cs = consume_stats(p, group, topic)
            for w in cs.offset_table.values():
                total += w.diff
                inflight += w.inflight
            stats.append(cs)
        out.append({group: stats})
    return ConsumeStatsList(out, p.address, total, inflight)


def time_spans(p: Ports, topic: str, group: str, now_ms: int) -> list[QueueTimeSpan]:
    """Per write queue: store time of the first and the last message, of the last one the
    group consumed (the first one's when it consumed none), and, when messages wait, how long
    the next one has waited."""
    tc = p.topics.get(topic)
    assert tc is not None
    native = p.store.native
    out = []
    for qid in range(tc.write_queue_nums):
        first = native.earliest_store_time(topic, qid)
        min_ts = first if first is not None and first > 0 else -1  # -1: empty, as RocketMQ
        hi = native.queue_max_offset(topic, qid)
        committed = p.offsets.query(group, topic, qid)
        consumed = committed if committed is not None and committed > 0 else 0
        consume_ts = store_time(p, topic, qid, consumed - 1) if consumed > 0 else min_ts
        delay = 0
        if consumed < hi:
            nxt = store_time(p, topic, qid, max(consumed, native.queue_min_offset(topic, qid)))
            delay = max(0, now_ms - nxt) if nxt > 0 else 0
        out.append(
            QueueTimeSpan(
                message_queue=MessageQueue(topic, p.cfg.broker_name, qid),
                min_time_stamp=min_ts,
                max_time_stamp=store_time(p, topic, qid, hi - 1) if min_ts > 0 else -1,
                consume_time_stamp=consume_ts,
                delay_time=delay,
            )
        )
    return out


def cq_units(p: Ports, h: QueryConsumeQueueRequestHeader) -> QueryConsumeQueueResponseBody | None:
    """`h.count` units of the queue from `h.index` (those in [min, max)); None when the queue
    does not exist on this broker."""
    native = p.store.native
    if not any(t == h.topic and q == h.queue_id for t, q in native.queues()):
        return None
    lo = native.queue_min_offset(h.topic, h.queue_id)
    hi = native.queue_max_offset(h.topic, h.queue_id)
    body = QueryConsumeQueueResponseBody(max_queue_index=hi, min_queue_index=lo)
    if h.consumer_group is not None:
        sub = p.clients.subscription(h.consumer_group, h.topic)
        body.subscription_data = sub
        if sub is None:
            body.filter_data = f"{h.consumer_group}@{h.topic} is not online!"
    start = max(h.index, lo)
    for index in range(start, min(hi, h.index + max(0, min(h.count, MAX_CQ_UNITS)))):
        try:
            phys, size, tag = native.queue_unit(h.topic, h.queue_id, index)
        except RmqHaError as e:  # removed by retention meanwhile, or unreadable
            body.queue_data.append(ConsumeQueueData(msg=f"unit {index}: {e}"))
            continue
        body.queue_data.append(
            ConsumeQueueData(physic_offset=phys, physic_size=size, tags_code=tag)
        )
    return body


def clone_offsets(p: Ports, h: CloneGroupOffsetRequestHeader) -> int:
    """CLONE_GROUP_OFFSET: `h.src_group`'s offsets copied to `h.dest_group` on `h.topic` (every
    topic the source has offsets on, when empty); a topic without config here, or (unless
    offline) outside the subscriptions of the online source group, is left out. Returns how
    many queues were copied. (RocketMQ copies only the named topic even when it loops over
    all of them; here each topic of the loop is copied.)"""
    topics = [h.topic] if h.topic else p.offsets.topics_of_group(h.src_group)
    online = p.clients.consumers.get(h.src_group)
    n = 0
    for topic in topics:
        if p.topics.get(topic) is None:
            continue
        if not h.offline and online is not None and online.subscriptions:
            if topic not in online.subscriptions:
                continue
        n += p.offsets.clone(h.src_group, h.dest_group, topic)
    return n


def producer_table(p: Ports) -> ProducerTableInfo:
    """GET_ALL_PRODUCER_INFO: every producer group with its connected producers."""
    data: dict[str, list[ProducerInfo]] = {}
    for group, clients in sorted(p.clients.producers.items()):
        if clients:
            data[group] = [_producer_info(c) for _, c in sorted(clients.items())]
    return ProducerTableInfo(data=data)


def _producer_info(c: ClientInfo) -> ProducerInfo:
    return ProducerInfo(
        client_id=c.client_id,
        remote_ip=c.conn.peer,
        language=language_name(c.language),
        version=c.version,
        last_update_timestamp=c.last_update_ms,
    )


def broker_stats_data(p: Ports, name: str, key: str) -> BrokerStatsData | None:
    """VIEW_BROKER_STATS_DATA: the stats item `name` (TOPIC_PUT_NUMS of a topic,
    GROUP_GET_NUMS of "topic@group") over the last minute, hour and day since the broker
    started; None when the broker has counted nothing for it. avgpt is 0: no processing time
    is kept per item."""
    w = p.traffic.stats_item(name, key)
    if w is None:
        return None
    snap = w.snapshot(p.traffic.now_s())

    def item(which: str) -> BrokerStatsItem:
        total, tps = snap[which]
        return BrokerStatsItem(sum=total, tps=tps)

    return BrokerStatsData(
        stats_minute=item("minute"), stats_hour=item("hour"), stats_day=item("day")
    )


def register(d: Dispatcher, p: Ports, groups: SubscriptionGroupManager) -> None:
    async def broker_stats(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsInBrokerHeader.from_ext(cmd.ext_fields)
        names = sorted(groups.wrapper().subscription_group_table)
        body = broker_consume_stats(p, names, h.is_order)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def topics_of(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryTopicsByConsumerRequestHeader.from_ext(cmd.ext_fields)
        body = TopicList(topic_list=set(p.offsets.topics_of_group(h.group)), broker_addr=p.address)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def subscription_of(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QuerySubscriptionByConsumerRequestHeader.from_ext(cmd.ext_fields)
        body = QuerySubscriptionResponseBody(
            subscription_data=p.clients.subscription(h.group, h.topic), group=h.group, topic=h.topic
        )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def time_span(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeTimeSpanRequestHeader.from_ext(cmd.ext_fields)
        if p.topics.get(h.topic) is None:
            return cmd.response(Resp.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        spans = time_spans(p, h.topic, h.group, int(time.time() * 1000))
        body = QueryConsumeTimeSpanBody(consume_time_span_set=spans)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def consume_queue(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_ext(cmd.ext_fields)
        body = cq_units(p, h)
        if body is None:
            return cmd.response(Resp.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def clone(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CloneGroupOffsetRequestHeader.from_ext(cmd.ext_fields)
        n = clone_offsets(p, h)
        log.info(
            "offsets of %s cloned to %s (%s): %d queues",
            h.src_group,
            h.dest_group,
            h.topic or "every topic",
            n,
        )
        return cmd.response(Resp.SUCCESS)

    async def producers(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, producer_table(p).to_json())

    async def group_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetSubscriptionGroupConfigRequestHeader.from_ext(cmd.ext_fields)
        cfg = groups.get(h.group)
        if cfg is None:
            return cmd.response(Resp.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return cmd.response(Resp.SUCCESS, None, None, cfg.to_json())

    async def stats_data(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_ext(cmd.ext_fields)
        body = broker_stats_data(p, h.stats_name, h.stats_key)
        if body is None:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    d.register(RC.VIEW_BROKER_STATS_DATA, stats_data)
    d.register(RC.CLONE_GROUP_OFFSET, clone)
    d.register(RC.GET_ALL_PRODUCER_INFO, producers)
    d.register(RC.GET_SUBSCRIPTIONGROUP_CONFIG, group_config)
    d.register(RC.GET_BROKER_CONSUME_STATS, broker_stats)
    d.register(RC.QUERY_TOPICS_BY_CONSUMER, topics_of)
    d.register(RC.QUERY_SUBSCRIPTION_BY_CONSUMER, subscription_of)
    d.register(RC.QUERY_CONSUME_TIME_SPAN, time_span)
    d.register(RC.QUERY_CONSUME_QUEUE, consume_queue)
