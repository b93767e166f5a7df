"""The producer against an in-process name server + broker: sync, oneway, async and batch
sends read back with a pull consumer; ordered sends through a selector; both header
serializations and both send headers; message ids."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from rmq_ha.client import (
    InvalidMessageError,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PullStatus,
    SendResult,
    SendStatus,
    SerializeType,
    UniqIdGenerator,
    select_by_hash,
)
from rmq_ha.errors import RmqHaError
from rmq_ha.protocol.message import parse_offset_msg_id
from test_client_cluster import FAST_CLIENT, FAST_PRODUCER, client_cluster, create_topic

pytestmark = pytest.mark.timeout(60)


async def read_all(
    namesrv: str, topic: str, expected: int, timeout_s: float = 10
) -> list[MessageExt]:
    """Every message of every queue of `topic`, by queue then offset (waits for `expected`)."""
    out: list[MessageExt] = []
    async with PullConsumer("reader", namesrv, config=FAST_CLIENT) as c:
        with trio.fail_after(timeout_s):
            while True:
                out = []
                for mq in await c.fetch_subscribe_queues(topic):
                    offset = 0
                    while True:
                        r = await c.pull(mq, "*", offset, 32)
                        if r.status is not PullStatus.FOUND:
                            break
                        out.extend(r.messages)
                        offset = r.next_begin_offset
                if len(out) >= expected:
                    return out
                await trio.sleep(0.05)


@pytest.mark.timeout(30)
async def test_sync_send_result_and_read_back(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "SyncT", queues=4)
        results: list[SendResult] = []
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(8):
                results.append(
                    await p.send("SyncT", f"m{i}", tags="TagA", keys=["k", f"id{i}"],
                                 properties={"color": "red"})
                )  # fmt: skip
        assert all(r.status is SendStatus.SEND_OK and r.ok for r in results)
        # Round robin: every queue used, twice.
        assert sorted(r.queue.queue_id for r in results) == [0, 0, 1, 1, 2, 2, 3, 3]
        assert {r.queue.broker_name for r in results} == {"broker-a"}
        assert all(re.fullmatch(r"[0-9A-F]{32}", r.msg_id) for r in results)
        assert len({r.msg_id for r in results}) == 8
        host, port, _ = parse_offset_msg_id(results[0].offset_msg_id)
        assert f"{host}:{port}" == env.broker
        msgs = await read_all(env.namesrv, "SyncT", 8)
        by_id = {m.msg_id: m for m in msgs}
        for i, r in enumerate(results):
            m = by_id[r.msg_id]
            assert m.body == f"m{i}".encode() and m.tags == "TagA" and m.keys == ["k", f"id{i}"]
            assert m.properties["color"] == "red"
            assert m.queue == r.queue and m.queue_offset == r.queue_offset
            assert m.offset_msg_id == r.offset_msg_id


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ser", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest.mark.parametrize("v2", [True, False])
async def test_serializations_and_send_headers(
    tmp_path: Path, ser: SerializeType, v2: bool
) -> None:
    cfg = replace(FAST_PRODUCER, client=replace(FAST_CLIENT, serialize_type=ser), use_v2_header=v2)
    async with client_cluster(tmp_path) as env:
        # No topic created: the first send goes through TBW102 and the broker creates it.
        async with Producer("pg", env.namesrv, config=cfg) as p:
            r1 = await p.send("AutoT", b"one", tags="x")
            r2 = await p.send("AutoT", b"two")
        assert r1.ok and r2.ok
        msgs = await read_all(env.namesrv, "AutoT", 2)
        assert sorted(m.body for m in msgs) == [b"one", b"two"]


@pytest.mark.timeout(30)
async def test_oneway_and_async_sends(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "OneT", queues=2)
        await create_topic(env.namesrv, "AsyncT", queues=2)
        got: list[tuple[SendResult | None, RmqHaError | None]] = []

        async def callback(result: SendResult | None, error: RmqHaError | None) -> None:
            got.append((result, error))

        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(20):
                assert await p.send_oneway("OneT", f"o{i}") is None
            for i in range(30):
                await p.send_async("AsyncT", f"a{i}", callback)
        # Leaving the producer waited for every async send.
        assert len(got) == 30
        assert all(r is not None and r.ok and e is None for r, e in got)
        assert len({r.msg_id for r, _ in got if r}) == 30
        msgs = await read_all(env.namesrv, "AsyncT", 30)
        assert sorted(m.body for m in msgs) == sorted(f"a{i}".encode() for i in range(30))
        msgs = await read_all(env.namesrv, "OneT", 20)
        assert sorted(m.body for m in msgs) == sorted(f"o{i}".encode() for i in range(20))


@pytest.mark.timeout(30)
async def test_batch_send_gives_each_message_its_own_id(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "BatchT", queues=2)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            r = await p.send_batch(
                "BatchT",
                [b"b0", "b1", Message("BatchT", b"b2", tags="T2", keys="key2"), b"b3", b"b4"],
            )
            r2 = await p.send_batch("BatchT", [b"c0", b"c1"], queue=r.queue)
            with pytest.raises(InvalidMessageError):
                await p.send_batch("BatchT", [Message("Other", b"x")])
        ids = r.msg_id.split(",")
        assert len(ids) == 5 and len(set(ids)) == 5
        assert len(r.offset_msg_id.split(",")) == 5
        assert r2.queue == r.queue and r2.queue_offset == r.queue_offset + 5
        msgs = [m for m in await read_all(env.namesrv, "BatchT", 7) if m.queue == r.queue]
        assert [m.body for m in msgs] == [b"b0", b"b1", b"b2", b"b3", b"b4", b"c0", b"c1"]
        assert [m.msg_id for m in msgs[:5]] == ids
        assert [m.queue_offset for m in msgs] == list(range(r.queue_offset, r.queue_offset + 7))
        assert msgs[2].tags == "T2" and msgs[2].keys == ["key2"]


@pytest.mark.timeout(30)
async def test_selector_sends_each_order_to_one_queue_in_order(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "OrderT", queues=4)
        orders = [f"order-{k}" for k in range(6)]
        sent: dict[str, list[SendResult]] = {o: [] for o in orders}
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for step in range(10):
                for o in orders:
                    sent[o].append(
                        await p.send("OrderT", f"{o}:{step}", selector=select_by_hash, arg=o)
                    )
        msgs = await read_all(env.namesrv, "OrderT", 60)
        for o in orders:
            assert len({r.queue for r in sent[o]}) == 1, "one queue per order id"
            offsets = [r.queue_offset for r in sent[o]]
            assert offsets == sorted(offsets)
            q = sent[o][0].queue
            in_queue = [
                m.body.decode()
                for m in msgs
                if m.queue == q and m.body.startswith(o.encode() + b":")
            ]
            assert in_queue == [f"{o}:{s}" for s in range(10)]


@pytest.mark.timeout(30)
async def test_invalid_messages_are_refused_before_sending(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        cfg = replace(FAST_PRODUCER, max_message_size_bytes=100)
        async with Producer("pg", env.namesrv, config=cfg) as p:
            for topic, body in (("bad topic", b"x"), ("T", b""), ("T", b"x" * 101)):
                with pytest.raises(InvalidMessageError) as e:
                    await p.send(topic, body)
                assert e.value.definite
            with pytest.raises(InvalidMessageError):
                await p.send("T", b"x", properties={"k": "a\x01b"})


def test_uniq_ids_are_unique_and_time_ordered() -> None:
    gen = UniqIdGenerator("10.1.2.3")
    ids = [gen.next_id() for _ in range(5000)]
    assert len(set(ids)) == 5000
    assert all(re.fullmatch(r"0A010203[0-9A-F]{24}", i) for i in ids)
    times = [int(i[20:28], 16) for i in ids]
    assert times == sorted(times)
