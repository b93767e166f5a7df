"""The broker over real sockets on loopback, with a name server: send (V1, V2, batch), pull
(long polling, tag filter, offset correction), consumer offsets, client heartbeats and
consumer lists, queue locks, retry/DLQ, and bad input."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from rmq_jepsen.launch import RMQ_HA, Proc, ReadyFile, kill_all

from rmq_ha._native import decode_batch_body, decode_pull_body, encode_batch_body
from rmq_ha.broker.broker import Broker, open_broker
from rmq_ha.config import BrokerConfig, NamesrvConfig
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.admin import SubscriptionGroupConfig
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import SERIALIZE_ROCKETMQ, RemotingCommand
from rmq_ha.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from rmq_ha.protocol.message import decode_properties, encode_properties, parse_offset_msg_id
from rmq_ha.protocol.models import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    SubscriptionData,
    TopicConfig,
)

assert decode_batch_body  # imported for the batch round trip below


@dataclass
class Cluster:
    namesrv: str
    broker: str
    client: RemotingClient
    store_root: Path
    node: Broker


async def wait_until(pred: Callable[[], bool], timeout_s: float = 20) -> None:
    with trio.fail_after(timeout_s):
        while not pred():
            await trio.sleep(0.01)


@asynccontextmanager
async def cluster(tmp_path: Path, **broker_kw: object) -> AsyncIterator[Cluster]:
    async with trio.open_nursery() as n:
        ns = Nameserver(NamesrvConfig(listen_port=0))
        await n.start(ns.serve)
        kw: dict[str, Any] = {"commitlog_segment_bytes": 1 << 20, **broker_kw}
        cfg = BrokerConfig(
            listen_port=0,
            namesrv_addr=ns.address,
            store_path_root_dir=str(tmp_path / "store"),
            **kw,
        )
        async with open_broker(cfg) as node, RemotingClient() as c:
            yield Cluster(ns.address, node.address, c, tmp_path / "store", node)
        n.cancel_scope.cancel()


def consumer_heartbeat(client_id: str, group: str, topic: str) -> HeartbeatData:
    """A heartbeat of one clustering consumer of `group` subscribed to all of `topic`."""
    return HeartbeatData(
        client_id=client_id,
        consumer_data_set=[
            ConsumerData(
                group_name=group,
                consume_type="CONSUME_PASSIVELY",
                message_model="CLUSTERING",
                consume_from_where="CONSUME_FROM_LAST_OFFSET",
                subscription_data_set=[SubscriptionData(topic=topic, sub_string="*")],
            )
        ],
    )


def send_cmd(
    topic: str,
    body: bytes,
    queue_id: int = 0,
    tags: str = "",
    v2: bool = True,
    extra: dict[str, str] | None = None,
) -> RemotingCommand:
    props = {"UNIQ_KEY": f"u-{body.hex()}", **(extra or {})}
    if tags:
        props["TAGS"] = tags
    h = SendMessageRequestHeader(
        producer_group="pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties(props),
    )
    if v2:
        return RemotingCommand.request(RC.SEND_MESSAGE_V2, h.to_v2().to_ext(), body)
    return RemotingCommand.request(RC.SEND_MESSAGE, h.to_ext(), body)


def pull_cmd(topic: str, queue_id: int, offset: int, *, group: str = "cg", suspend_ms: int = 0,
             expr: str = "*", commit: int = -1) -> RemotingCommand:  # fmt: skip
    flag = 0x4 | (0x2 if suspend_ms else 0) | (0x1 if commit >= 0 else 0)
    h = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=flag,
        commit_offset=max(commit, 0),
        suspend_timeout_millis=suspend_ms,
        subscription=expr,
        sub_version=0,
        expression_type="TAG",
    )
    return RemotingCommand.request(RC.PULL_MESSAGE, h.to_ext())


def bodies_of(pull_body: bytes | None) -> list[bytes]:
    """Splits a pull body (stored records back to back) into message bodies."""
    from rmq_ha._native import decode_stored_record

    out, data, pos = [], pull_body or b"", 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        rec = decode_stored_record(data[pos : pos + size])
        out.append(rec["body"])  # type: ignore[arg-type]
        pos += size
    return out


async def test_send_auto_creates_the_topic_and_pull_reads_it_back(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        ids = []
        for i, v2 in enumerate([True, False, True]):
            r = await c.client.invoke(c.broker, send_cmd("Orders", b"m%d" % i, 1, v2=v2))
            assert r.code == Resp.SUCCESS, r.remark
            assert r.ext_fields["queueOffset"] == str(i)
            ids.append(r.ext_fields["msgId"])
        host, port, off = parse_offset_msg_id(ids[1])
        assert f"{host}:{port}" == c.broker and off > 0
        # The route appears at the name server (registered on topic creation).
        with trio.fail_after(5):
            while True:
                r = await c.client.invoke(
                    c.namesrv,
                    RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}),
                )
                if r.code == Resp.SUCCESS:
                    break
                await trio.sleep(0.05)
        route = json.loads(r.body or b"")
        assert route["brokerDatas"][0]["brokerAddrs"]["0"] == c.broker
        for ser in (0, SERIALIZE_ROCKETMQ):
            cmd = pull_cmd("Orders", 1, 0)
            cmd.serialize_type = ser
            r = await c.client.invoke(c.broker, cmd)
            assert r.code == Resp.SUCCESS
            assert bodies_of(r.body) == [b"m0", b"m1", b"m2"]
            assert r.ext_fields["nextBeginOffset"] == "3"
        # VIEW_MESSAGE_BY_ID with the offset from the message id.
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(off)})
        )
        assert bodies_of(r.body) == [b"m1"]


@pytest.mark.parametrize("trigger", ["send", "heartbeat"])
async def test_a_topic_auto_created_by_a_send_is_routed_when_the_send_is_answered(
    tmp_path: Path, trigger: str
) -> None:
    """RocketMQ registers a topic its send auto-created before it answers the send, so a
    consumer started on the answer finds the route (a Go push consumer's Start() failed
    here with "route info not found" when the name server heard of it a moment later). The
    name server below holds that registration until the test lets it go: the send must not
    be answered before. The same for the retry topic a new consumer group's first heartbeat
    creates (Go probe: a consumer that looked its route up too early pulled no retried
    message for up to 30 s)."""
    from rmq_ha.net.connection import Connection

    held, arrived, release = [False], trio.Event(), trio.Event()

    class Held(Nameserver):
        async def register_broker(self, conn: Connection, cmd: RemotingCommand) -> Any:
            if held[0]:
                arrived.set()
                await release.wait()
            return await super().register_broker(conn, cmd)

    async with trio.open_nursery() as n:
        ns = Held(NamesrvConfig(listen_port=0))
        await n.start(ns.serve)
        cfg = BrokerConfig(listen_port=0, namesrv_addr=ns.address,
                           store_path_root_dir=str(tmp_path / "store"),
                           commitlog_segment_bytes=1 << 20)  # fmt: skip
        async with open_broker(cfg) as node, RemotingClient() as c:
            await wait_until(lambda: ns.routes.route(cfg.cluster_name) is not None)  # at start
            held[0] = True
            answers: list[RemotingCommand] = []

            topic = "Fresh" if trigger == "send" else "%RETRY%fresh-group"
            hb = consumer_heartbeat("c-1", "fresh-group", "Fresh")
            cmd = (
                send_cmd("Fresh", b"x")
                if trigger == "send"
                else RemotingCommand.request(RC.HEART_BEAT, body=hb.to_json())
            )

            async def send() -> None:
                answers.append(await c.invoke(node.address, cmd))

            n.start_soon(send)
            with trio.fail_after(10):
                await arrived.wait()
            # the registration naming the topic is held: no answer may come meanwhile (the
            # wait only gives a wrong early answer time to show; a right one never comes)
            with trio.move_on_after(0.5):
                while not answers:
                    await trio.sleep(0.01)
            assert not answers
            release.set()
            await wait_until(lambda: bool(answers))
            assert answers[0].code == Resp.SUCCESS, answers[0].remark
            q = await c.invoke(
                ns.address, RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            )
            assert q.code == Resp.SUCCESS, q.remark
        n.cancel_scope.cancel()


async def test_long_poll_wakes_on_arrival_and_times_out_otherwise(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        assert (await c.client.invoke(c.broker, send_cmd("LP", b"first"))).code == Resp.SUCCESS
        hold = c.node.hold
        got: list[RemotingCommand] = []

        async def pull(suspend_ms: int) -> None:
            got.append(
                await c.client.invoke(c.broker, pull_cmd("LP", 0, 1, suspend_ms=suspend_ms), 200)
            )

        # Nothing new: parked, then PULL_NOT_FOUND when its suspend time ends.
        async with trio.open_nursery() as n:
            n.start_soon(pull, 300)
            await wait_until(lambda: hold.waiting("LP", 0) == 1)
        assert got.pop().code == Resp.PULL_NOT_FOUND and hold.waiting("LP", 0) == 0
        # Parked for longer than the test may run: an answer means the arrival woke it.
        async with trio.open_nursery() as n:
            n.start_soon(pull, 150_000)
            await wait_until(lambda: hold.waiting("LP", 0) == 1)
            await c.client.invoke(c.broker, send_cmd("LP", b"second"))
        assert got[0].code == Resp.SUCCESS and bodies_of(got[0].body) == [b"second"]


async def test_offsets_out_of_range_are_corrected(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        for i in range(3):
            await c.client.invoke(c.broker, send_cmd("OR", b"%d" % i))
        r = await c.client.invoke(c.broker, pull_cmd("OR", 0, 99))
        assert (r.code, r.ext_fields["nextBeginOffset"]) == (Resp.PULL_OFFSET_MOVED, "3")
        r = await c.client.invoke(c.broker, pull_cmd("OR", 1, 5))  # empty queue, non-zero offset
        assert (r.code, r.ext_fields["nextBeginOffset"]) == (Resp.PULL_OFFSET_MOVED, "0")
        r = await c.client.invoke(
            c.broker, pull_cmd("OR", 9, 0)
        )  # RocketMQ: 29, naming the consumer
        assert r.code == Resp.INVALID_PARAMETER and "queueId" in (r.remark or "")
        assert "consumer:[/127.0.0.1:" in (r.remark or "")
        r = await c.client.invoke(c.broker, pull_cmd("Missing", 0, 0))
        assert r.code == Resp.TOPIC_NOT_EXIST


async def test_a_replica_that_is_not_master_keeps_the_clients_offset_and_sends_it_to_the_master(
    tmp_path: Path,
) -> None:
    """A slave (or a restarted master that is a slave now, with a shorter queue) answered an
    offset outside its queue with PULL_OFFSET_MOVED: the Java client moved its offset back and
    re-consumed what it had consumed (probe: 500 duplicates over two failovers), and an offset
    below a replica's min would have skipped messages the master still holds. RocketMQ answers
    PULL_RETRY_IMMEDIATELY there, the client's offset unchanged, the master suggested; with
    offsetCheckInSlave it corrects the offset as a master does."""
    from rmq_ha.config import BrokerRole

    for check, want in (
        (False, (Resp.PULL_RETRY_IMMEDIATELY, "5")),
        (True, (Resp.PULL_OFFSET_MOVED, "0")),
    ):
        async with cluster(
            tmp_path / str(check),
            broker_role=BrokerRole.SLAVE,
            broker_id=1,
            offset_check_in_slave=check,
        ) as c:
            c.node.topics.update(
                TopicConfig(topic_name="SL", read_queue_nums=1, write_queue_nums=1)
            )
            r = await c.client.invoke(c.broker, pull_cmd("SL", 0, 5))
            assert (r.code, r.ext_fields["nextBeginOffset"]) == want, (check, r.code, r.remark)
            assert r.ext_fields["suggestWhichBrokerId"] == "0"


async def test_tag_filter_on_pull(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        for i in range(6):
            await c.client.invoke(c.broker, send_cmd("TG", b"%d" % i, tags="a" if i % 2 else "b"))
        r = await c.client.invoke(c.broker, pull_cmd("TG", 0, 0, expr="a || c"))
        assert bodies_of(r.body) == [b"1", b"3", b"5"]
        r = await c.client.invoke(c.broker, pull_cmd("TG", 0, 0, expr="zzz"))
        assert r.code == Resp.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "6"


async def test_batch_send_is_one_append_with_a_message_id_per_message(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        entries = [
            (0, b"b%d" % i, encode_properties({"UNIQ_KEY": f"k{i}"}).encode()) for i in range(5)
        ]
        cmd = send_cmd("Batch", b"", 2)
        cmd.code = RC.SEND_BATCH_MESSAGE
        cmd.body = encode_batch_body(entries)
        r = await c.client.invoke(c.broker, cmd)
        assert r.code == Resp.SUCCESS, r.remark
        assert len(r.ext_fields["msgId"].split(",")) == 5
        assert r.ext_fields["queueOffset"] == "0"
        r = await c.client.invoke(c.broker, pull_cmd("Batch", 2, 0))
        assert bodies_of(r.body) == [b"b%d" % i for i in range(5)]


def test_a_message_counts_as_in_memory_within_the_ratio_of_memory_from_the_log_end() -> None:
    from rmq_ha.broker.handlers.queries import PHYSICAL_MEMORY_BYTES, in_memory

    window = PHYSICAL_MEMORY_BYTES * 40 // 100
    assert in_memory(0, window, 40)
    assert not in_memory(0, window + 1, 40)
    assert in_memory(10, window + 10, 40)
    assert in_memory(5, 5, 0) and not in_memory(5, 6, 0)


async def test_a_new_group_starts_at_0_only_while_message_0_is_in_memory(tmp_path: Path) -> None:
    """RocketMQ answers a new group's QUERY_CONSUMER_OFFSET with 0 only when the queue still
    holds message 0 and it is in memory (checkInMemByConsumeOffset); otherwise QUERY_NOT_FOUND
    and the client's consumeFromWhere decides. We answered 0 whenever the min offset was 0, so
    a new CONSUME_FROM_LAST_OFFSET group on a large old backlog replayed all of it."""
    q = {"consumerGroup": "new", "topic": "Old", "queueId": "0"}
    for ratio, want in ((40, (Resp.SUCCESS, "0")), (0, (Resp.QUERY_NOT_FOUND, None))):
        async with cluster(tmp_path / str(ratio), access_message_in_memory_max_ratio=ratio) as c:
            for i in range(3):
                assert (await c.client.invoke(c.broker, send_cmd("Old", b"m%d" % i))).code == 0
            r = await c.client.invoke(
                c.broker, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, q)
            )
            assert (r.code, r.ext_fields.get("offset")) == want, (ratio, r.code, r.remark)
            # a queue that never held a message starts at 0: nothing sent before the
            # client's next request is skipped
            e = {**q, "queueId": "3"}
            r = await c.client.invoke(
                c.broker, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, e)
            )
            assert (r.code, r.ext_fields.get("offset")) == (Resp.SUCCESS, "0")


async def test_consumer_offsets_heartbeat_consumer_list_and_locks(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.client.invoke(c.broker, send_cmd("CO", b"x"))
        q = RemotingCommand.request(
            RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "CO", "queueId": "0"}
        )
        r = await c.client.invoke(c.broker, q)
        assert (r.code, r.ext_fields.get("offset")) == (Resp.SUCCESS, "0"), (
            "new group, queue from 0"
        )
        u = {"consumerGroup": "g", "topic": "CO", "queueId": "0", "commitOffset": "1"}
        await c.client.invoke(c.broker, RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, u))
        r = await c.client.invoke(c.broker, q)
        assert r.ext_fields["offset"] == "1"
        # A pull can commit too.
        await c.client.invoke(c.broker, pull_cmd("CO", 0, 1, group="g", commit=7))
        assert (await c.client.invoke(c.broker, q)).ext_fields["offset"] == "7"

        hb = consumer_heartbeat("client-1", "g", "CO")
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.HEART_BEAT, body=hb.to_json())
        )
        assert r.code == Resp.SUCCESS
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"})
        )
        assert json.loads(r.body or b"")["consumerIdList"] == ["client-1"]

        mq = MessageQueue(topic="CO", broker_name="broker-a", queue_id=0)
        for client, expect in (("client-1", 1), ("client-2", 0), ("client-1", 1)):
            body = LockBatchRequestBody(consumer_group="g", client_id=client, mq_set={mq}).to_json()
            r = await c.client.invoke(
                c.broker, RemotingCommand.request(RC.LOCK_BATCH_MQ, body=body)
            )
            assert len(json.loads(r.body or b"")["lockOKMQSet"]) == expect, client


async def test_two_connections_with_one_client_id_are_two_members(tmp_path: Path) -> None:
    """Two processes with one client id (the same instanceName twice, Go probe): one of them
    leaving (its connection closes, or it unregisters) does not take the other out of the
    group. RocketMQ keys consumers by channel; the id list names each id once."""

    async def ids(client: RemotingClient, broker: str) -> list[str]:
        r = await client.invoke(
            broker, RemotingCommand.request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"})
        )
        return list(json.loads(r.body or b"{}").get("consumerIdList") or [])

    async def beat(client: RemotingClient, broker: str, cid: str) -> None:
        hb = consumer_heartbeat(cid, "g", "DUP")
        r = await client.invoke(broker, RemotingCommand.request(RC.HEART_BEAT, body=hb.to_json()))
        assert r.code == Resp.SUCCESS

    async with cluster(tmp_path) as c:
        await beat(c.client, c.broker, "other")
        async with RemotingClient() as second:
            await beat(second, c.broker, "dup")
            async with RemotingClient() as first:
                await beat(first, c.broker, "dup")
                await beat(first, c.broker, "first-only")
                assert await ids(c.client, c.broker) == ["dup", "first-only", "other"]
            # `first` closed its connection; once the broker has seen that ("first-only" is
            # gone with it), `second` is still a member
            with trio.fail_after(10):
                while "first-only" in (got := await ids(c.client, c.broker)):
                    await trio.sleep(0.02)
            assert got == ["dup", "other"]
            # an unregistration on another connection leaves it alone too
            h = {"clientID": "dup", "consumerGroup": "g"}
            r = await c.client.invoke(c.broker, RemotingCommand.request(RC.UNREGISTER_CLIENT, h))
            assert r.code == Resp.SUCCESS
            assert await ids(c.client, c.broker) == ["dup", "other"]
            r = await second.invoke(c.broker, RemotingCommand.request(RC.UNREGISTER_CLIENT, h))
            assert await ids(c.client, c.broker) == ["other"]


async def test_send_back_goes_to_retry_then_dead_letter(tmp_path: Path) -> None:
    # Retries wait their delay level (3 + reconsume times): short levels keep this quick.
    async with cluster(tmp_path, message_delay_level="100ms 100ms 100ms") as c:
        r = await c.client.invoke(c.broker, send_cmd("RT", b"fails"))
        first_id = r.ext_fields["msgId"]
        _, _, off = parse_offset_msg_id(first_id)
        h = ConsumerSendMsgBackRequestHeader(
            offset=off, group="g", delay_level=0, max_reconsume_times=1
        )
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, h.to_ext())
        )
        assert r.code == Resp.SUCCESS, r.remark
        with trio.fail_after(5):
            while (r := await c.client.invoke(c.broker, pull_cmd("%RETRY%g", 0, 0))).code:
                await trio.sleep(0.05)
        from rmq_ha._native import decode_stored_record

        rec = decode_stored_record((r.body or b"")[: int.from_bytes((r.body or b"")[:4], "big")])
        assert rec["body"] == b"fails" and rec["reconsume_times"] == 1
        assert b"RETRY_TOPIC\x01RT" in rec["properties"]  # type: ignore[operator]
        # ORIGIN_MESSAGE_ID: the original's offset message id, as RocketMQ sets it (the id the
        # send answered), not the client's uniq id
        props = decode_properties(rec["properties"])  # type: ignore[arg-type]
        assert props["ORIGIN_MESSAGE_ID"] == first_id, props
        # Failing again past maxReconsumeTimes: the dead-letter topic.
        h.offset = int(rec["physical_offset"])  # type: ignore[call-overload]
        await c.client.invoke(
            c.broker, RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, h.to_ext())
        )
        tc = json.loads(
            (await c.client.invoke(c.broker, RemotingCommand.request(RC.GET_ALL_TOPIC_CONFIG))).body
            or b""
        )["topicConfigTable"]
        assert "%DLQ%g" in tc


@pytest.mark.parametrize("auto", [True, False])
async def test_a_consumers_heartbeat_creates_its_groups_config(tmp_path: Path, auto: bool) -> None:
    """autoCreateSubscriptionGroup (RocketMQ's default true): a group gets a default config
    (retryMaxTimes 16, ...) at its first heartbeat, so admin tools list it and show its
    settings; an operator's config is left as it is; off, nothing is created."""
    from rmq_ha.protocol.admin import SubscriptionGroupWrapper

    def hb(group: str) -> RemotingCommand:
        data = HeartbeatData(
            client_id="client-1",
            consumer_data_set=[
                ConsumerData(
                    group_name=group,
                    consume_type="CONSUME_PASSIVELY",
                    message_model="CLUSTERING",
                    consume_from_where="CONSUME_FROM_LAST_OFFSET",
                    subscription_data_set=[SubscriptionData(topic="HB", sub_string="*")],
                )
            ],
        )
        return RemotingCommand.request(RC.HEART_BEAT, body=data.to_json())

    async with cluster(tmp_path, auto_create_subscription_group=auto) as c:
        assert c.node is not None
        c.node.subgroups.update(SubscriptionGroupConfig(group_name="set", retry_max_times=3))
        for g in ("hbg", "set"):
            assert (await c.client.invoke(c.broker, hb(g))).code == Resp.SUCCESS
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )
        table = SubscriptionGroupWrapper.from_json(r.body or b"").subscription_group_table
        assert table["set"].retry_max_times == 3
        if auto:
            assert table["hbg"].retry_max_times == 16 and table["hbg"].consume_enable
        else:
            assert "hbg" not in table
        if auto:
            # Written by housekeeping (off the event loop) or at shutdown, not by the
            # heartbeat: the default flush interval has not passed yet.
            files = c.store_root / "config"
            assert "hbg" not in (files / "subscriptionGroup.json").read_text()
            assert "%RETRY%hbg" not in (files / "topics.json").read_text()
    if auto:
        assert "hbg" in (files / "subscriptionGroup.json").read_text()
        assert "%RETRY%hbg" in (files / "topics.json").read_text()


async def test_config_tables_are_written_off_the_event_loop_by_housekeeping(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, consumer_offset_flush_interval_ms=50) as c:
        assert c.node is not None
        c.node.subgroups.ensure("later", persist_now=False)
        c.node.offsets.commit("later", "T", 0, 7)
        path = c.store_root / "config" / "subscriptionGroup.json"
        await wait_until(lambda: path.exists() and "later" in path.read_text())
        offsets = c.store_root / "config" / "consumerOffset.json"
        await wait_until(lambda: offsets.exists() and '"T@later"' in offsets.read_text())


async def test_a_send_to_a_retry_topic_past_its_limit_is_a_dead_letter(tmp_path: Path) -> None:
    """RocketMQ's handleRetryAndDLQ: an orderly consumer (and a concurrent one whose send-back
    failed) sends an exhausted message itself, to %RETRY%group, with reconsumeTimes and
    maxReconsumeTimes. Past the limit, or when the group holds queue locks (it consumes
    orderly), the broker stores it on %DLQ%group at once (DELAY -1). It used to go to the
    retry topic, where it came back out of order and without end."""

    def retry_send(reconsume: int, limit: int | None, body: bytes) -> RemotingCommand:
        props = {"UNIQ_KEY": f"u-{body.hex()}", "RETRY_TOPIC": "RT", "DELAY": "3",
                 "RECONSUME_TIME": str(reconsume)}  # fmt: skip
        h = SendMessageRequestHeader(
            producer_group="pg", topic="%RETRY%g", default_topic="TBW102",
            default_topic_queue_nums=4, queue_id=0, sys_flag=0,
            born_timestamp=int(time.time() * 1000), flag=0,
            properties=encode_properties(props), reconsume_times=reconsume,
            max_reconsume_times=limit,
        )  # fmt: skip
        return RemotingCommand.request(RC.SEND_MESSAGE, h.to_ext(), body)

    async def dead_letters() -> list[bytes]:
        r = await c.client.invoke(c.broker, pull_cmd("%DLQ%g", 0, 0))
        if r.code != Resp.SUCCESS:
            return []
        return [m[1] for m in decode_pull_body(r.body or b"")]

    async with cluster(tmp_path, message_delay_level="100ms 100ms 100ms") as c:
        r = await c.client.invoke(c.broker, retry_send(1, 1, b"again"))
        assert r.code == Resp.SUCCESS, r.remark
        assert await dead_letters() == []
        r = await c.client.invoke(c.broker, retry_send(2, 1, b"exhausted"))
        assert r.code == Resp.SUCCESS, r.remark
        got = await dead_letters()
        assert got == [b"exhausted"]
        r = await c.client.invoke(c.broker, pull_cmd("%DLQ%g", 0, 0))
        props = decode_pull_body(r.body or b"")[0][2]
        assert props["RETRY_TOPIC"] == "RT" and props["DELAY"] == "-1"
        # without maxReconsumeTimes: the group's retryMaxTimes (16 without a config)
        r = await c.client.invoke(c.broker, retry_send(16, None, b"sixteen"))
        assert r.code == Resp.SUCCESS and await dead_letters() == [b"exhausted"]
        r = await c.client.invoke(c.broker, retry_send(17, None, b"seventeen"))
        assert await dead_letters() == [b"exhausted", b"seventeen"]
        # a group that holds queue locks consumes orderly: its retries are dead letters
        mq = MessageQueue(topic="RT", broker_name="broker-a", queue_id=0)
        body = LockBatchRequestBody(consumer_group="g", client_id="c1", mq_set={mq}).to_json()
        await c.client.invoke(c.broker, RemotingCommand.request(RC.LOCK_BATCH_MQ, body=body))
        r = await c.client.invoke(c.broker, retry_send(0, 1, b"orderly"))
        assert r.code == Resp.SUCCESS
        assert await dead_letters() == [b"exhausted", b"seventeen", b"orderly"]


async def test_system_topic_list_and_earliest_time_of_an_empty_queue(tmp_path: Path) -> None:
    """GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305: RocketMQ's system topic set, with the cluster's
    and broker's names; the dashboard tells user topics from it) and GET_EARLIEST_MSG_STORETIME
    of an empty queue (-1, as RocketMQ; it was an error)."""
    async with cluster(tmp_path) as c:
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
        )
        names = set(json.loads(r.body or b"")["topicList"])
        assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC", "DefaultCluster"} <= names
        assert "broker-a" in names
        r = await c.client.invoke(c.broker, send_cmd("ET", b"x", queue_id=0))
        for qid, found in ((0, True), (1, False)):
            ext = {"topic": "ET", "queueId": str(qid)}
            r = await c.client.invoke(
                c.broker, RemotingCommand.request(RC.GET_EARLIEST_MSG_STORETIME, ext)
            )
            assert r.code == Resp.SUCCESS, r.remark
            ts = int(r.ext_fields["timestamp"])
            assert ts > 0 if found else ts == -1


async def test_a_send_that_finds_no_space_is_refused_as_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC before a retention round judged the disk full (a small or fast-filling disk):
    the send is refused with the disk-full answer (SERVICE_NOT_AVAILABLE, nothing stored)
    instead of SYSTEM_ERROR and a traceback, and a round runs at once; writes resume when it
    finds room."""
    import errno

    from rmq_ha.errors import StoreIOError

    monkeypatch.setenv("RMQ_HA_NATIVE_SEND", "0")  # the Python append path
    async with cluster(tmp_path) as c:
        assert c.node is not None
        store = c.node.store
        real = store.append_batch

        def full(msgs: Any) -> Any:
            raise StoreIOError("I/O error on commitlog: No space left on device", "x", errno.ENOSPC)

        monkeypatch.setattr(store, "append_batch", full)
        r = await c.client.invoke(c.broker, send_cmd("NS", b"x"))
        assert r.code == Resp.SERVICE_NOT_AVAILABLE, r.remark
        assert "disk is full" in (r.remark or "")
        monkeypatch.setattr(store, "append_batch", real)
        with trio.fail_after(10):  # the round the failure asked for finds room
            while (r := await c.client.invoke(c.broker, send_cmd("NS", b"y"))).code:
                await trio.sleep(0.05)
        assert store.native.queue_max_offset("NS", 0) == 1


async def test_bad_sends_get_clear_codes_and_write_nothing(tmp_path: Path) -> None:
    async with cluster(tmp_path, max_message_size=1024) as c:
        r = await c.client.invoke(c.broker, send_cmd("bad topic!", b"x"))
        assert r.code == Resp.SYSTEM_ERROR and "characters" in (r.remark or "")
        r = await c.client.invoke(c.broker, send_cmd("Big", b"x" * 2000))
        assert r.code == Resp.MESSAGE_ILLEGAL
        r = await c.client.invoke(c.broker, send_cmd("Q", b"x", queue_id=99))
        assert r.code == Resp.INVALID_PARAMETER and "queueId" in (r.remark or "")
        cmd = send_cmd("Batch", b"", 0)
        cmd.code, cmd.body = RC.SEND_BATCH_MESSAGE, b"\x00\x00\x00\x09garbage!!"
        r = await c.client.invoke(c.broker, cmd)
        assert r.code == Resp.MESSAGE_ILLEGAL
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.SEND_MESSAGE_V2, {"b": "T"}, b"x")
        )
        assert r.code == Resp.SYSTEM_ERROR and "null" in (r.remark or "")
        r = await c.client.invoke(c.broker, RemotingCommand.request(12345))
        assert r.code == Resp.REQUEST_CODE_NOT_SUPPORTED
        # The broker still works.
        assert (await c.client.invoke(c.broker, send_cmd("Fine", b"ok"))).code == Resp.SUCCESS


async def test_sync_flush_acks_only_durable_messages(tmp_path: Path) -> None:
    # With a 60 s flush interval only a requested sync can make a message durable, so every
    # SUCCESS must find the store flushed up to its end; ASYNC_FLUSH must not wait for it.
    from rmq_ha.broker.broker import open_broker
    from rmq_ha.config import FlushDiskType

    for mode in (FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH):
        root = tmp_path / mode.value
        cfg = BrokerConfig(listen_port=0, store_path_root_dir=str(root), flush_disk_type=mode,
                           flush_interval_ms=60_000, commitlog_segment_bytes=1 << 20)  # fmt: skip
        async with open_broker(cfg) as broker:
            store = broker.store
            async with RemotingClient() as client:
                unflushed_acks = 0
                for i in range(20):
                    r = await client.invoke(broker.address, send_cmd("SF", b"%d" % i))
                    assert r.code == Resp.SUCCESS
                    if store.native.flushed_offset < store.native.max_offset:
                        unflushed_acks += 1
            if mode is FlushDiskType.SYNC_FLUSH:
                assert unflushed_acks == 0
            else:
                assert unflushed_acks > 0, "async acks do not wait for a sync"


@pytest.mark.timeout(60)
def test_processes_start_from_the_cli_and_stop_on_sigterm(tmp_path: Path) -> None:
    ns = Proc(
        "namesrv",
        [*RMQ_HA, "namesrv", "--listen-port", "0", "--ready-file", str(tmp_path / "ns")],
        tmp_path / "ns.log",
        ReadyFile(tmp_path / "ns"),
    )
    procs = [ns.start()]
    try:
        ns_addr = ns.wait_ready_sync(20)
        conf = tmp_path / "broker.conf"
        conf.write_text(
            f"brokerName=broker-x\nlistenPort=0\nnamesrvAddr={ns_addr}\n"
            f"storePathRootDir={tmp_path / 'store'}\n"
        )
        b = Proc(
            "broker",
            [*RMQ_HA, "broker", "-c", str(conf), "--ready-file", str(tmp_path / "b")],
            tmp_path / "b.log",
            ReadyFile(tmp_path / "b"),
        )
        procs.append(b.start())
        b.wait_ready_sync(20)
        # A second broker on the same store is refused (the store's lock file), with one line
        # naming the cause, not a trio traceback; the first one is untouched.
        conf2 = tmp_path / "broker2.conf"
        conf2.write_text(conf.read_text().replace("broker-x", "broker-y"))
        second = subprocess.run(
            [*RMQ_HA, "broker", "-c", str(conf2)], capture_output=True, text=True, timeout=30
        )
        assert second.returncode == 1, second.stderr
        assert "already open" in second.stderr and "Traceback" not in second.stderr
        assert [ln for ln in second.stderr.splitlines() if ln.startswith("rmq-ha broker:")]
        for p in (b, ns):
            p.signal(signal.SIGTERM)
            assert p.wait(10) == 0, p.tail()
        assert (tmp_path / "store" / "config" / "topics.json").exists()
    finally:
        kill_all(procs)


async def test_oneway_commit_sent_just_before_close_is_applied(tmp_path: Path) -> None:
    # Java and Go clients commit offsets oneway at shutdown and close the connection at once;
    # the request must still be carried out (it once was cancelled with the connection).
    from rmq_ha._native import encode_frames

    async with cluster(tmp_path) as c:
        await c.client.invoke(c.broker, send_cmd("OW", b"x"))
        host, port = c.broker.split(":")
        for ser, offset in ((0, 5), (SERIALIZE_ROCKETMQ, 9)):
            u = {"consumerGroup": "g", "topic": "OW", "queueId": "0", "commitOffset": str(offset)}
            cmd = RemotingCommand.request(
                RC.UPDATE_CONSUMER_OFFSET, u, oneway=True, serialize_type=ser
            )
            raw = await trio.open_tcp_stream(host, int(port))
            await raw.send_all(encode_frames([cmd.to_wire()]))
            await raw.aclose()
            q = RemotingCommand.request(
                RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "OW", "queueId": "0"}
            )
            with trio.fail_after(5):
                while (await c.client.invoke(c.broker, q)).ext_fields.get("offset") != str(offset):
                    await trio.sleep(0.02)


async def test_a_reply_is_pushed_to_its_requester_and_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SEND_REPLY_MESSAGE_V2 (RocketMQ's ReplyMessageProcessor): the reply goes to the
    producer its REPLY_TO_CLIENT property names, as PUSH_REPLY_MESSAGE_TO_CLIENT on that
    producer's own connection, and is stored on the reply topic; without a requester to push
    to the answer is SYSTEM_ERROR saying why (stored all the same); a system topic producers
    may not write is refused as for a send, and nothing is pushed."""
    from rmq_ha.protocol.headers import ReplyMessageRequestHeader
    from rmq_ha.protocol.message import decode_properties
    from rmq_ha.protocol.models import ProducerData

    pushed: list[RemotingCommand] = []

    async def on_request(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        pushed.append(cmd)
        return cmd.response(Resp.SUCCESS)

    topic = "DefaultCluster_REPLY_TOPIC"

    def reply(props: dict[str, str], to: str = topic) -> RemotingCommand:
        h = SendMessageRequestHeader(
            producer_group="P_replier",
            topic=to,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=0,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=encode_properties({"MSG_TYPE": "reply", **props}),
        )
        return RemotingCommand.request(RC.SEND_REPLY_MESSAGE_V2, h.to_v2().to_ext(), b"answer")

    async with cluster(tmp_path) as c, RemotingClient(handler=on_request) as requester:  # type: ignore[arg-type]
        hb = HeartbeatData(client_id="req-1", producer_data_set=[ProducerData(group_name="P_req")])
        r = await requester.invoke(
            c.broker, RemotingCommand.request(RC.HEART_BEAT, None, hb.to_json())
        )
        assert r.code == Resp.SUCCESS
        r = await c.client.invoke(
            c.broker, reply({"REPLY_TO_CLIENT": "req-1", "CORRELATION_ID": "c1"})
        )
        assert r.code == Resp.SUCCESS, r.remark
        assert [p.code for p in pushed] == [RC.PUSH_REPLY_MESSAGE_TO_CLIENT]
        assert pushed[0].body == b"answer"
        ph = ReplyMessageRequestHeader.from_ext(pushed[0].ext_fields)
        props = decode_properties(ph.properties)
        assert (ph.topic, ph.queue_id, props["CORRELATION_ID"]) == (topic, 0, "c1")
        assert "PUSH_REPLY_TIME" in props and ph.store_host == c.node.address
        assert r.ext_fields is not None and r.ext_fields["queueOffset"] == "0"
        assert c.node.store.native.queue_max_offset(topic, 0) == 1
        for props, why in (
            ({"REPLY_TO_CLIENT": "gone", "CORRELATION_ID": "c2"}, "channel of <gone> not found"),
            ({"CORRELATION_ID": "c3"}, "properties[REPLY_TO_CLIENT] is null"),
        ):
            r = await c.client.invoke(c.broker, reply(props))
            assert r.code == Resp.SYSTEM_ERROR and why in (r.remark or ""), r.remark
        # the broker says so in its log too (RocketMQ does; it said nothing, probe)
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("REPLY_TO_CLIENT is null" in m for m in said), said
        assert any("requester <gone> not connected" in m for m in said), said
        assert c.node.store.native.queue_max_offset(topic, 0) == 3
        r = await c.client.invoke(
            c.broker, reply({"REPLY_TO_CLIENT": "req-1"}, to="SCHEDULE_TOPIC_XXXX")
        )
        assert r.code == Resp.NO_PERMISSION and "forbidden" in (r.remark or ""), r.remark
        assert len(pushed) == 1


async def test_a_broker_without_write_permission_refuses_only_ordered_topics(
    tmp_path: Path,
) -> None:
    """brokerPermission 4 (an operator draining the broker): RocketMQ's msgCheck refuses
    sends to ordered topics only; a producer on a cached route still gets its other sends
    stored (its next route refresh shows the broker read-only and it stops writing there)."""
    async with cluster(tmp_path) as c:
        for name, order in (("Plain", False), ("Ordered", True)):
            c.node.topics.update(
                TopicConfig(topic_name=name, read_queue_nums=2, write_queue_nums=2, order=order)
            )
        await c.node.apply_config(dataclasses.replace(c.node.cfg, broker_permission=4))
        r = await c.client.invoke(c.broker, send_cmd("Plain", b"still-taken"))
        assert r.code == Resp.SUCCESS, r.remark
        r = await c.client.invoke(c.broker, send_cmd("Ordered", b"refused"))
        assert r.code == Resp.NO_PERMISSION and "forbidden" in (r.remark or ""), r.remark
        assert c.node.store.native.queue_max_offset("Plain", 0) == 1
        assert c.node.store.native.queue_max_offset("Ordered", 0) == 0
        await c.node.apply_config(dataclasses.replace(c.node.cfg, broker_permission=6))
        r = await c.client.invoke(c.broker, send_cmd("Ordered", b"writable again"))
        assert r.code == Resp.SUCCESS, r.remark


async def test_clients_get_records_without_the_stores_crc_trailer(tmp_path: Path) -> None:
    """The store ends every record's properties with `__CRC32#` (its whole-record CRC);
    RocketMQ's brokers hand out no such property, so pulls, views by id and key queries
    serve each record without it (sizes adjusted), and the client's properties are exactly
    what it sent (a probe saw Java consumers read the extra property)."""
    from rmq_ha._native import decode_stored_record
    from rmq_ha.protocol.admin import QueryMessageRequestHeader

    async with cluster(tmp_path) as c:
        extra = {"KEYS": "k1", "Color": "blue"}
        r = await c.client.invoke(c.broker, send_cmd("CrcT", b"payload", 0, extra=extra))
        assert r.code == Resp.SUCCESS, r.remark
        off = parse_offset_msg_id(r.ext_fields["msgId"])[2]
        stored = c.node.store.native.read_record(off).tobytes()
        assert b"__CRC32#" in stored  # the store keeps it
        served: list[bytes] = []
        r = await c.client.invoke(c.broker, pull_cmd("CrcT", 0, 0))
        assert r.code == Resp.SUCCESS and bodies_of(r.body) == [b"payload"]
        served.append(r.body or b"")
        r = await c.client.invoke(
            c.broker, RemotingCommand.request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(off)})
        )
        served.append(r.body or b"")
        q = QueryMessageRequestHeader(
            topic="CrcT", key="k1", max_num=32, begin_timestamp=0, end_timestamp=2**63 - 1
        )
        r = await c.client.invoke(c.broker, RemotingCommand.request(RC.QUERY_MESSAGE, q.to_ext()))
        assert r.code == Resp.SUCCESS, r.remark
        served.append(r.body or b"")
        for body in served:
            assert len(body) == len(stored) - 20 == int.from_bytes(body[:4], "big")
            assert b"__CRC32#" not in body
            rec = decode_stored_record(body)
            props = decode_properties(rec["properties"])  # type: ignore[arg-type]
            assert {k: props[k] for k in extra} == extra and "__CRC32#" not in props
            assert rec["physical_offset"] == off and rec["body"] == b"payload"


async def test_a_held_pull_filters_with_the_subscription_it_has_when_it_wakes(
    tmp_path: Path,
) -> None:
    """A pull held (long polling, no subscription of its own: the group's from heartbeats)
    while its consumer resubscribes from * to tag b, then a tag-a message arrives: the look
    after waking filters with b, as RocketMQ re-runs a held pull (it served the a message)."""

    def heartbeat(expr: str, version: int) -> RemotingCommand:
        hb = HeartbeatData(
            client_id="client-rs",
            consumer_data_set=[
                ConsumerData(
                    group_name="rs",
                    consume_type="CONSUME_PASSIVELY",
                    message_model="CLUSTERING",
                    consume_from_where="CONSUME_FROM_LAST_OFFSET",
                    subscription_data_set=[
                        SubscriptionData(topic="RS", sub_string=expr, sub_version=version)
                    ],
                )
            ],
        )
        return RemotingCommand.request(RC.HEART_BEAT, body=hb.to_json())

    async with cluster(tmp_path) as c:
        assert (await c.client.invoke(c.broker, send_cmd("RS", b"0", tags="b"))).code == 0
        assert (await c.client.invoke(c.broker, heartbeat("*", 1))).code == Resp.SUCCESS
        held = pull_cmd("RS", 0, 1, group="rs", suspend_ms=150_000)
        held.ext_fields["sysFlag"] = "2"  # suspend only: the group's subscription applies
        got: list[RemotingCommand] = []

        async def pull() -> None:
            got.append(await c.client.invoke(c.broker, held, 200))

        hold = c.node.hold
        async with trio.open_nursery() as n:
            n.start_soon(pull)
            await wait_until(lambda: hold.waiting("RS", 0) == 1)
            assert (await c.client.invoke(c.broker, heartbeat("b", 2))).code == Resp.SUCCESS
            await c.client.invoke(c.broker, send_cmd("RS", b"1", tags="a"))
            # Woken, it found only the filtered message and holds on past it (not answered).
            await wait_until(lambda: hold.waiting("RS", 0, above=1) == 1)
            assert not got
            await c.client.invoke(c.broker, send_cmd("RS", b"2", tags="b"))
        (r,) = got
        assert r.code == Resp.SUCCESS and bodies_of(r.body) == [b"2"], (r.code, r.remark)
        assert r.ext_fields["nextBeginOffset"] == "3"


async def test_a_held_pull_is_checked_again_when_it_wakes(tmp_path: Path) -> None:
    """A pull held while its group is disabled (updateSubGroup -s false) then woken by a
    message: refused as RocketMQ re-runs the whole pull; it was served (a message per queue
    reached a disabled group in the probe)."""
    async with cluster(tmp_path) as c:
        assert c.node is not None
        assert (await c.client.invoke(c.broker, send_cmd("GE", b"0"))).code == Resp.SUCCESS
        got: list[RemotingCommand] = []

        async def pull() -> None:
            cmd = pull_cmd("GE", 0, 1, group="ge", suspend_ms=150_000)
            got.append(await c.client.invoke(c.broker, cmd, 200))

        async with trio.open_nursery() as n:
            n.start_soon(pull)
            await wait_until(lambda: c.node.hold.waiting("GE", 0) == 1)
            c.node.subgroups.update(SubscriptionGroupConfig(group_name="ge", consume_enable=False))
            await c.client.invoke(c.broker, send_cmd("GE", b"1"))
        (r,) = got
        assert r.code == Resp.NO_PERMISSION and not r.body, (r.code, r.remark)


async def test_a_held_pull_holds_on_past_arrivals_its_filter_drops(tmp_path: Path) -> None:
    """RocketMQ wakes a held pull only for a message its filter matches; ours woke on every
    arrival and answered PULL_RETRY_IMMEDIATELY, so a tag-filtered consumer made one round
    trip per message of other tags. Now it holds on until its suspend time, then answers
    PULL_NOT_FOUND with the offset past what it dropped."""
    async with cluster(tmp_path) as c:
        assert (await c.client.invoke(c.broker, send_cmd("HF", b"0", tags="want"))).code == 0
        hold = c.node.hold
        got: list[RemotingCommand] = []

        async def pull(suspend_ms: int) -> None:
            at = int(got[-1].ext_fields["nextBeginOffset"]) if got else 1
            cmd = pull_cmd("HF", 0, at, expr="want", suspend_ms=suspend_ms)
            got.append(await c.client.invoke(c.broker, cmd, 200))

        async with trio.open_nursery() as n:
            n.start_soon(pull, 150_000)
            await wait_until(lambda: hold.waiting("HF", 0) == 1)
            for i in range(3):
                await c.client.invoke(c.broker, send_cmd("HF", b"other-%d" % i, tags="other"))
                await wait_until(lambda i=i: hold.waiting("HF", 0, above=i + 2) == 1)
            assert not got  # three arrivals, no answer
            await c.client.invoke(c.broker, send_cmd("HF", b"mine", tags="want"))
        (r,) = got
        assert r.code == Resp.SUCCESS and bodies_of(r.body) == [b"mine"]
        assert r.ext_fields["nextBeginOffset"] == "5"
        # Only others arrive: the suspend time ends with PULL_NOT_FOUND past them.
        async with trio.open_nursery() as n:
            n.start_soon(pull, 1_000)
            await wait_until(lambda: hold.waiting("HF", 0) == 1)
            await c.client.invoke(c.broker, send_cmd("HF", b"other-3", tags="other"))
        r = got[-1]
        assert r.code == Resp.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "6"


async def test_clean_unused_topic_deletes_the_messages_of_topics_without_a_config(
    tmp_path: Path,
) -> None:
    """mqadmin cleanUnusedTopic (CLEAN_UNUSED_TOPIC, 316) was not answered. A topic the store
    holds but whose config is gone (a lost topics file, a config removed by hand) kept its
    messages and consume-queue files for ever."""
    async with cluster(tmp_path) as c:
        for t in ("Keep", "Orphan"):
            for i in range(3):
                assert (
                    await c.client.invoke(c.broker, send_cmd(t, b"%s%d" % (t.encode(), i)))
                ).code == 0
        native = c.node.store.native
        assert c.node.topics.delete("Orphan")  # the config is lost; the messages are not
        r = await c.client.invoke(c.broker, RemotingCommand.request(RC.CLEAN_UNUSED_TOPIC), 10)
        assert r.code == Resp.SUCCESS, r.remark
        assert r.remark == "1 unused topics cleaned"
        assert native.queue_min_offset("Orphan", 0) == native.queue_max_offset("Orphan", 0) == 3
        assert not (c.store_root / "consumequeue" / "Orphan").exists()
        r = await c.client.invoke(c.broker, pull_cmd("Keep", 0, 0))
        assert bodies_of(r.body) == [b"Keep0", b"Keep1", b"Keep2"]
        # system topics and the broker's own are never unused; a second round finds nothing
        r = await c.client.invoke(c.broker, RemotingCommand.request(RC.CLEAN_UNUSED_TOPIC), 10)
        assert r.remark == "0 unused topics cleaned"


async def test_an_escaped_message_counts_as_delivered_only_with_send_ok(tmp_path: Path) -> None:
    """The escape bridge took a remote master's SLAVE_NOT_AVAILABLE (stored, no replica has
    it) as delivered: an acting slave moved its delay progress past messages whose only copy
    was on a master that was then replaced (fault probe: 47 delayed and transaction messages
    lost). RocketMQ's escape counts only SEND_OK."""
    from rmq_ha.broker.special.base import InnerMessage
    from rmq_ha.config import BrokerRole

    async with (
        cluster(tmp_path / "a") as a,
        cluster(tmp_path / "b", broker_role=BrokerRole.SYNC_MASTER, broker_name="broker-b") as b,
    ):
        bridge = a.node.special.bridge
        msg = InnerMessage(topic="EscT", queue_id=0, body=b"due", properties={"UNIQ_KEY": "e1"})
        r = await bridge._send(b.broker, "broker-b", msg, 0)
        assert not r.ok, (r.code, r.remark)  # a SYNC_MASTER with no slave stored it alone
        assert "stored without SEND_OK" in (r.remark or "")
        a_plain = await bridge._send(a.broker, "broker-a", msg, 0)  # an ASYNC_MASTER: SEND_OK
        assert a_plain.ok and a_plain.queue_offsets == (0,), (a_plain.code, a_plain.remark)


async def test_a_changed_segment_size_is_refused_at_start_naming_the_key(tmp_path: Path) -> None:
    """Operator probe: with a one-segment commitlog, a new mappedFileSizeCommitLog was taken
    silently (the file grown to it), and replication from a master rolling at the old size
    then failed every second. With more segments the refusal named an internal key. The
    size a store was written with is recorded; another one is refused, naming the key."""
    from rmq_ha.errors import ConfigError
    from rmq_ha.store import SEGMENT_SIZE_FILE

    async with cluster(tmp_path) as c:
        assert (await c.client.invoke(c.broker, send_cmd("Seg", b"x"))).code == 0
    assert (tmp_path / "store" / SEGMENT_SIZE_FILE).read_text().strip() == str(1 << 20)
    for size in (2 << 20, 1 << 19):
        cfg = BrokerConfig(
            listen_port=0,
            namesrv_addr="127.0.0.1:1",  # refused before it registers anywhere
            store_path_root_dir=str(tmp_path / "store"),
            commitlog_segment_bytes=size,
        )
        with pytest.raises(ConfigError) as e:
            async with open_broker(cfg):
                pass
        assert e.value.key == "mappedFileSizeCommitLog", e.value
        assert f"{1 << 20}-byte segments" in str(e.value)
    async with cluster(tmp_path) as c:  # the recorded size opens as before
        r = await c.client.invoke(c.broker, pull_cmd("Seg", 0, 0))
        assert bodies_of(r.body) == [b"x"]


async def test_missing_offset_files_beside_known_groups_are_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both consumerOffset.json and its .bak gone while subscriptionGroup.json lists groups
    (a deleted or lost config file): every group would start again from consumeFromWhere, so
    the start says so at WARNING naming the file. A fresh broker, or one whose offsets file is
    there, says nothing."""
    from rmq_ha.protocol.admin import SubscriptionGroupConfig

    def said() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "consumerOffset.json" in r.getMessage()
        ]

    async with cluster(tmp_path) as c:
        c.node.subgroups.update(SubscriptionGroupConfig(group_name="g1"))
        c.node.offsets.commit("g1", "T", 0, 5)
        c.node.offsets.persist(force=True)
    assert said() == [], "a fresh broker"
    conf = tmp_path / "store" / "config"
    async with cluster(tmp_path):
        pass
    assert said() == [], "the offsets file is there"
    for f in (conf / "consumerOffset.json", conf / "consumerOffset.json.bak"):
        f.unlink(missing_ok=True)
    async with cluster(tmp_path):
        pass
    (line,) = said()
    assert "1 consumer groups" in line and "subscriptionGroup.json" in line
