"""Client pieces without a network: queue allocation (Java's exact results), the process
queue's offset rules, queue selection with fault avoidance, subscriptions and tag re-checks,
publish info from routes, and the RocketMQ-5.x DLQ behaviour the broker should have."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import trio

from rmq_ha.client import (
    ConcurrentContext,
    ConsumerConfig,
    ConsumeStatus,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    allocate_averagely,
    allocate_averagely_by_circle,
)
from rmq_ha.client.allocate import sort_client_ids, sort_queues
from rmq_ha.client.consumer import ProcessQueue, build_subscription, filter_by_tags
from rmq_ha.client.message import decode_messages
from rmq_ha.client.producer import FaultStrategy
from rmq_ha.client.routes import TopicPublishInfo, publish_info, subscribe_queues
from rmq_ha.errors import RemotingDecodeError
from rmq_ha.protocol.message import java_hash
from rmq_ha.protocol.models import BrokerData, QueueData, TopicRouteData
from test_client_cluster import FAST_CLIENT, FAST_CONSUMER, client_cluster, create_topic

pytestmark = pytest.mark.timeout(60)


def mqs(n: int, broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue("T", broker, i) for i in range(n)]


def test_allocate_averagely_matches_java() -> None:
    q = mqs(8)
    cids = ["c0", "c1", "c2"]
    # Java: mod = 2; c0, c1 get 3 (0-2, 3-5), c2 gets 2 (6-7).
    assert [x.queue_id for x in allocate_averagely("c0", q, cids)] == [0, 1, 2]
    assert [x.queue_id for x in allocate_averagely("c1", q, cids)] == [3, 4, 5]
    assert [x.queue_id for x in allocate_averagely("c2", q, cids)] == [6, 7]
    # More consumers than queues: the first ones get one each, the rest nothing.
    five = [f"c{i}" for i in range(5)]
    got = [allocate_averagely(c, mqs(3), five) for c in five]
    assert [[x.queue_id for x in g] for g in got] == [[0], [1], [2], [], []]
    assert allocate_averagely("stranger", q, cids) == []
    assert [x.queue_id for x in allocate_averagely_by_circle("c1", q, cids)] == [1, 4, 7]
    # Every split covers every queue exactly once.
    for n_mq in range(1, 13):
        for n_c in range(1, 6):
            cs = [f"c{i}" for i in range(n_c)]
            parts = [allocate_averagely(c, mqs(n_mq), cs) for c in cs]
            flat = [x for p in parts for x in p]
            assert sorted(flat) == mqs(n_mq)


def test_sort_orders_are_javas() -> None:
    a, b = MessageQueue("T", "broker-b", 0), MessageQueue("T", "broker-a", 10)
    c = MessageQueue("S", "broker-z", 0)
    assert sort_queues([a, b, c]) == [c, b, a]
    assert sort_queues(mqs(12))[2].queue_id == 2  # numeric, not "10" < "2"
    # UTF-16 code unit order: U+FF5E sorts after U+1F600's high surrogate (0xD83D).
    assert sort_client_ids(["\uff5e", "\U0001f600", "a"]) == ["a", "\U0001f600", "\uff5e"]


def _msg(offset: int, body: bytes = b"x", tags: str | None = None) -> MessageExt:
    return MessageExt(
        topic="T", body=body, properties={"TAGS": tags} if tags else {},
        queue=MessageQueue("T", "b", 0), queue_offset=offset, commit_log_offset=offset * 100,
        store_host="127.0.0.1:10911", born_host="127.0.0.1:1", born_timestamp_ms=0,
        store_timestamp_ms=0, reconsume_times=0, sys_flag=0, flag=0,
    )  # fmt: skip


def test_process_queue_commits_only_below_the_oldest_unconsumed() -> None:
    pq = ProcessQueue()
    msgs = [_msg(i) for i in range(10, 15)]
    pq.put(msgs)
    pq.put(msgs[:2])  # a duplicate pull is ignored
    assert pq.msg_count == 5 and pq.max_span() == 4
    # 12 and 13 done, 10 still in flight: the commit offset stays at 10.
    assert pq.remove([msgs[2], msgs[3]]) == 10
    assert pq.remove([msgs[0]]) == 11
    assert pq.remove([msgs[1], msgs[4]]) == 15
    assert pq.remove([]) == -1  # nothing cached
    # Orderly: take, roll back, take again, commit after the batch.
    pq.put([_msg(i) for i in range(15, 19)])
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [15, 16]
    pq.make_consume_again(first)
    assert [m.queue_offset for m in pq.take(3)] == [15, 16, 17]
    assert pq.commit() == 18 and pq.commit() == -1


def test_fault_strategy_round_robin_skips_failed_brokers() -> None:
    info = TopicPublishInfo("T", tuple(mqs(2, "a") + mqs(2, "b")))
    fs = FaultStrategy(enabled=True, isolation_s=10)
    picks = [fs.select(info, None) for _ in range(8)]
    assert {m.broker_name for m in picks} == {"a", "b"}
    assert len({(m.broker_name, m.queue_id) for m in picks}) == 4
    # The broker of the failed attempt is avoided on the retry.
    assert all(fs.select(info, "a").broker_name == "b" for _ in range(6))
    fs.update("b", 0.01, isolation=True)
    assert all(fs.select(info, None).broker_name == "a" for _ in range(6))
    # Everyone isolated and the last broker excluded: still a queue (of the other broker).
    fs.update("a", 0.01, isolation=True)
    assert fs.select(info, "a").broker_name == "b"
    # Disabled: plain round robin.
    off = FaultStrategy(enabled=False, isolation_s=10)
    off.update("a", 1.0, isolation=True)
    assert {off.select(info, None).broker_name for _ in range(8)} == {"a", "b"}


def test_subscription_and_client_side_tag_check() -> None:
    sub = build_subscription("T", " TagA || TagB ")
    assert sub.tags_set == {"TagA", "TagB"}
    assert sub.code_set == {java_hash("TagA"), java_hash("TagB")}
    assert build_subscription("T", "*").tags_set == set()
    assert build_subscription("T", None).sub_string == "*"
    msgs = [_msg(0, tags="TagA"), _msg(1, tags="TagC"), _msg(2)]
    assert [m.queue_offset for m in filter_by_tags(msgs, sub)] == [0]
    assert len(filter_by_tags(msgs, build_subscription("T", "*"))) == 3


def test_publish_and_subscribe_info_from_a_route() -> None:
    route = TopicRouteData(
        queue_datas=[
            QueueData(broker_name="b", read_queue_nums=2, write_queue_nums=2, perm=6),
            QueueData(broker_name="a", read_queue_nums=3, write_queue_nums=1, perm=6),
            QueueData(broker_name="ro", read_queue_nums=2, write_queue_nums=2, perm=4),
            QueueData(broker_name="nomaster", read_queue_nums=1, write_queue_nums=1, perm=6),
        ],
        broker_datas=[
            BrokerData(broker_name="a", broker_addrs={0: "h:1"}),
            BrokerData(broker_name="b", broker_addrs={0: "h:2", 1: "h:3"}),
            BrokerData(broker_name="ro", broker_addrs={0: "h:4"}),
            BrokerData(broker_name="nomaster", broker_addrs={1: "h:5"}),
        ],
    )
    info = publish_info("T", route)
    assert [(q.broker_name, q.queue_id) for q in info.queues] == [("a", 0), ("b", 0), ("b", 1)]
    subs = subscribe_queues("T", route)
    assert len(subs) == 3 + 2 + 2 + 1  # every readable queue, master or not
    route.order_topic_conf = "b:2;a:1"
    assert [(q.broker_name, q.queue_id) for q in publish_info("T", route).queues] == [
        ("b", 0), ("b", 1), ("a", 0),
    ]  # fmt: skip


def test_decode_messages_rejects_garbage() -> None:
    assert decode_messages(b"", "b") == []
    with pytest.raises(RemotingDecodeError):
        decode_messages(b"\x00\x00\x00\x30" + b"\x00" * 10, "b")
    with pytest.raises(RemotingDecodeError):
        decode_messages(b"\x00\x00\x00\x10" + b"\xff" * 12, "b")


def test_consumer_config_defaults_are_rocketmqs() -> None:
    cfg = ConsumerConfig()
    assert cfg.pull_batch_size == 32 and cfg.pull_threshold_for_queue == 1000
    assert cfg.consume_concurrently_max_span == 2000
    assert (cfg.broker_suspend_max_time_s, cfg.consumer_timeout_when_suspend_s) == (15.0, 30.0)
    assert (cfg.rebalance_interval_s, cfg.lock_interval_s, cfg.lock_max_live_time_s) == (20, 20, 30)
    assert cfg.client.persist_consumer_offset_interval_s == 5.0


@pytest.mark.timeout(60)
async def test_dead_letters_can_be_read_back(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "DlqT", queues=1)
        tries = 0

        def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
            nonlocal tries
            tries += 1
            return ConsumeStatus.RECONSUME_LATER

        cfg = replace(FAST_CONSUMER, max_reconsume_times=1)
        async with PushConsumer("dg", env.namesrv, "DlqT", listener, config=cfg) as c:
            async with Producer("pg", env.namesrv) as p:
                await p.send("DlqT", b"poison")
            with trio.fail_after(20):
                while c.stats["sent_back"] < 2:
                    await trio.sleep(0.05)
        async with PullConsumer("reader", env.namesrv, config=FAST_CLIENT) as pc:
            r = await pc.pull(MessageQueue("%DLQ%dg", "broker-a", 0), "*", 0, 32)
            assert r.status is PullStatus.FOUND and r.messages[0].body == b"poison"
