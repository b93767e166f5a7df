"""Push, lite-pull and pull consumers against an in-process name server + broker: delivery,
offset commits and resume after a restart, rebalancing between members of a group, retries
through the broker's retry topic, tag filtering, offset correction, and orderly consumption
under queue locks."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from rmq_ha.client import (
    Admin,
    ConcurrentContext,
    ConsumeStatus,
    LitePullConsumer,
    MessageExt,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SerializeType,
    select_by_hash,
)
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import LockBatchRequestBody, LockBatchResponseBody
from test_client_cluster import (
    FAST_CLIENT,
    FAST_CONSUMER,
    FAST_PRODUCER,
    client_cluster,
    create_topic,
)

pytestmark = pytest.mark.timeout(60)


async def eventually(pred: Callable[[], bool], timeout_s: float = 10, what: str = "") -> None:
    with trio.fail_after(timeout_s):
        while not pred():
            await trio.sleep(0.02)


async def produce(namesrv: str, topic: str, bodies: list[str], **kw: object) -> None:
    async with Producer("pg", namesrv, config=FAST_PRODUCER) as p:
        for b in bodies:
            await p.send(topic, b, **kw)  # type: ignore[arg-type]


async def committed(namesrv: str, topic: str, group: str) -> dict[int, tuple[int, int | None]]:
    """queue id -> (max offset, the group's committed offset)."""
    async with Admin(namesrv, config=FAST_CLIENT) as admin:
        return {
            q.queue.queue_id: (q.max_offset, q.consumer_offset)
            for q in await admin.topic_offsets(topic, group)
        }


def topic_queues(c: PushConsumer | LitePullConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in c.assigned if mq.topic == topic}


@pytest.mark.timeout(60)
async def test_concurrent_push_delivers_commits_and_resumes_after_restart(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "PushT", queues=4)
        await produce(env.namesrv, "PushT", [f"a{i}" for i in range(100)])
        seen: collections.Counter[str] = collections.Counter()

        async def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
            for m in msgs:
                assert m.topic == "PushT" and m.queue == ctx.queue
                seen[m.body.decode()] += 1
            return ConsumeStatus.CONSUME_SUCCESS

        async with PushConsumer("cg", env.namesrv, "PushT", listener, config=FAST_CONSUMER) as c:
            await eventually(lambda: len(seen) == 100)
            assert len(topic_queues(c, "PushT")) == 4
        # Offsets were committed at shutdown: every queue fully consumed.
        offs = await committed(env.namesrv, "PushT", "cg")
        assert sum(m for m, _ in offs.values()) == 100
        assert all(c_off == m for m, c_off in offs.values()), offs

        # While the group is away, more messages; the restarted consumer gets exactly those
        # (duplicates would be allowed; we count them).
        await produce(env.namesrv, "PushT", [f"b{i}" for i in range(50)])
        first = dict(seen)
        seen.clear()
        async with PushConsumer("cg", env.namesrv, "PushT", listener, config=FAST_CONSUMER):
            await eventually(lambda: sum(1 for k in seen if k.startswith("b")) == 50)
            await trio.sleep(0.3)  # time passes: a duplicate would show (nothing is awaited)
        assert {k for k in seen if k.startswith("b")} == {f"b{i}" for i in range(50)}
        duplicates = sum(n - 1 for n in seen.values()) + sum(1 for k in seen if k in first)
        assert duplicates == 0, f"{duplicates} duplicates after a clean restart"


@pytest.mark.timeout(60)
async def test_two_consumers_split_the_queues_and_the_survivor_takes_all(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "SplitT", queues=4)
        got: dict[str, list[str]] = {"A": [], "B": []}

        def listener_for(name: str):  # type: ignore[no-untyped-def]
            def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
                got[name].extend(m.body.decode() for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            return listener

        a = PushConsumer("sg", env.namesrv, "SplitT", listener_for("A"), config=FAST_CONSUMER)
        b = PushConsumer("sg", env.namesrv, "SplitT", listener_for("B"), config=FAST_CONSUMER)
        async with a:
            await eventually(lambda: len(topic_queues(a, "SplitT")) == 4)
            async with b:
                # NOTIFY_CONSUMER_IDS_CHANGED makes A give up half at once.
                await eventually(
                    lambda: (
                        len(topic_queues(a, "SplitT")) == 2 and len(topic_queues(b, "SplitT")) == 2
                    )
                )
                assert not topic_queues(a, "SplitT") & topic_queues(b, "SplitT")
                await produce(env.namesrv, "SplitT", [f"m{i}" for i in range(40)])
                await eventually(lambda: len(got["A"]) + len(got["B"]) >= 40)
                assert got["A"] and got["B"], "both members consumed"
                assert sorted(got["A"] + got["B"]) == sorted(f"m{i}" for i in range(40))
            # B left (unregistered): A takes every queue back and consumes everything.
            await eventually(lambda: len(topic_queues(a, "SplitT")) == 4)
            await produce(env.namesrv, "SplitT", [f"n{i}" for i in range(20)])
            await eventually(lambda: sum(1 for x in got["A"] if x.startswith("n")) == 20)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ser", [SerializeType.JSON, SerializeType.ROCKETMQ])
async def test_reconsume_later_goes_through_the_retry_topic(
    tmp_path: Path, ser: SerializeType
) -> None:
    cfg = replace(FAST_CONSUMER, client=replace(FAST_CLIENT, serialize_type=ser))
    # Retries wait their delay level (3 + reconsume times): short levels keep this quick.
    async with client_cluster(tmp_path, message_delay_level="100ms 100ms 100ms") as env:
        await create_topic(env.namesrv, "RetryT", queues=2)
        deliveries: list[tuple[str, int, str, str]] = []

        async def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
            m = msgs[0]
            deliveries.append((m.body.decode(), m.reconsume_times, m.topic, ctx.queue.topic))
            return (
                ConsumeStatus.RECONSUME_LATER
                if m.reconsume_times == 0
                else ConsumeStatus.CONSUME_SUCCESS
            )

        async with PushConsumer("rg", env.namesrv, "RetryT", listener, config=cfg) as c:
            await produce(env.namesrv, "RetryT", ["r0", "r1", "r2"], tags="T", keys="K")
            await eventually(lambda: len(deliveries) >= 6, 20)
            assert c.stats["sent_back"] == 3
        first = [d for d in deliveries if d[1] == 0]
        again = [d for d in deliveries if d[1] >= 1]
        assert sorted(d[0] for d in first) == ["r0", "r1", "r2"]
        assert sorted(d[0] for d in again) == ["r0", "r1", "r2"]
        # Redelivered from %RETRY%rg, shown with the original topic.
        assert all(d[2] == "RetryT" and d[3] == "%RETRY%rg" for d in again)


@pytest.mark.timeout(60)
async def test_failed_send_back_is_retried_locally(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "LocalT", queues=1)
        times: list[int] = []

        async def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
            times.append(msgs[0].reconsume_times)
            return (
                ConsumeStatus.RECONSUME_LATER if len(times) == 1 else ConsumeStatus.CONSUME_SUCCESS
            )

        async with PushConsumer("lg", env.namesrv, "LocalT", listener, config=FAST_CONSUMER) as c:

            async def refuse(*args: object, **kw: object) -> None:
                raise OSError("broker unreachable for send-back")

            c.instance.api.send_back = refuse  # type: ignore[method-assign]
            await produce(env.namesrv, "LocalT", ["x"])
            await eventually(lambda: len(times) >= 2)
            assert times[:2] == [0, 1] and c.stats["retried_local"] == 1
            await eventually(
                lambda: (c.offsets.read(MessageQueue("LocalT", "broker-a", 0)) or 0) == 1
            )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("post_subscription", [True, False])
async def test_tag_filter_and_offset_correction(tmp_path: Path, post_subscription: bool) -> None:
    """With post_subscription False (RocketMQ's default) the broker filters with the
    subscription it got in the heartbeat."""
    cfg = replace(FAST_CONSUMER, post_subscription_when_pull=post_subscription)
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "TagT", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(9):
                await p.send("TagT", f"m{i}", tags=["A", "B", "C"][i % 3])
        # A committed offset beyond the queue's end: PULL_OFFSET_MOVED corrects it.
        mq = MessageQueue("TagT", "broker-a", 0)
        async with PullConsumer("tg", env.namesrv, config=FAST_CLIENT) as pc:
            pc.update_consume_offset(mq, 999)
            await pc.commit()
        bodies: list[str] = []

        def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
            bodies.extend(m.body.decode() for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        async with PushConsumer(
            "tg", env.namesrv, "TagT", listener, expression="A || C", config=cfg
        ) as c:
            await eventually(lambda: (c.offsets.read(mq) or 0) == 9)
            await produce(env.namesrv, "TagT", ["late-A"], tags="A")
            await produce(env.namesrv, "TagT", ["late-B"], tags="B")
            await produce(env.namesrv, "TagT", ["late-C"], tags="C")
            # One queue, consumed in order: once late-C is in, late-B was passed over.
            await eventually(lambda: "late-C" in bodies)
        assert bodies == ["late-A", "late-C"], (
            "old messages skipped (offset moved to the end), B filtered"
        )


@pytest.mark.timeout(60)
async def test_orderly_consumer_consumes_each_queue_in_order(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "OrdT", queues=4)
        orders = [f"o{k}" for k in range(8)]
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for step in range(15):
                for o in orders:
                    await p.send("OrdT", f"{o}:{step}", selector=select_by_hash, arg=o)
        seen: dict[str, list[int]] = collections.defaultdict(list)
        active: set[int] = set()
        overlap = False
        fail_once = {"o3:5"}

        async def listener(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyStatus:
            nonlocal overlap
            q = ctx.queue.queue_id
            overlap |= q in active
            active.add(q)
            try:
                await trio.sleep(0.001)
                o, step = msgs[0].body.decode().split(":")
                if msgs[0].body.decode() in fail_once:
                    fail_once.clear()
                    return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                seen[o].append(int(step))
                return OrderlyStatus.SUCCESS
            finally:
                active.discard(q)

        async with PushConsumer(
            "og", env.namesrv, "OrdT", listener, orderly=True, config=FAST_CONSUMER
        ) as c:
            await eventually(lambda: sum(len(v) for v in seen.values()) == 120, 30)
            assert all(a.pq.locked for a in c.assigned.values())
        assert not overlap, "two batches of one queue were consumed at the same time"
        assert {o: seen[o] for o in orders} == {o: list(range(15)) for o in orders}


async def raw_lock(
    broker: str, group: str, client_id: str, mqs: set[MessageQueue]
) -> set[MessageQueue]:
    body = LockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=mqs).to_json()
    async with RemotingClient() as rc:
        r = await rc.invoke(broker, RemotingCommand.request(RC.LOCK_BATCH_MQ, body=body))
    return LockBatchResponseBody.from_json(r.body).lock_ok_mq_set


@pytest.mark.timeout(60)
async def test_orderly_locks_keep_a_second_consumer_off_held_queues(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "LockT", queues=2)
        mqs = {MessageQueue("LockT", "broker-a", q) for q in range(2)}
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for step in range(10):
                for q in sorted(mqs):
                    await p.send("LockT", f"{q.queue_id}:{step}", queue=q)
        log: list[tuple[str, int, int]] = []  # (consumer, queue, step)
        release = trio.Event()

        def listener_for(name: str, block: bool):  # type: ignore[no-untyped-def]
            async def listener(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyStatus:
                if block and not release.is_set():
                    await release.wait()
                q, step = msgs[0].body.decode().split(":")
                log.append((name, int(q), int(step)))
                return OrderlyStatus.SUCCESS

            return listener

        a = PushConsumer("lkg", env.namesrv, "LockT", listener_for("A", True), orderly=True,
                         config=FAST_CONSUMER)  # fmt: skip
        b = PushConsumer("lkg", env.namesrv, "LockT", listener_for("B", False), orderly=True,
                         config=FAST_CONSUMER)  # fmt: skip
        async with a:
            await eventually(lambda: topic_queues(a, "LockT") == mqs)
            # A holds both locks: nobody else in the group gets them.
            assert await raw_lock(env.broker, "lkg", "intruder", mqs) == set()
            async with b:
                # B is assigned one queue but A is mid-batch on it and keeps the lock (time
                # passes for B's rebalance to try; nothing is awaited).
                await trio.sleep(1.5)
                assert not [e for e in log if e[0] == "B"], "B consumed a queue A holds"
                assert topic_queues(b, "LockT") == set(), "B's LOCK_BATCH_MQ must have failed"
                assert topic_queues(a, "LockT") == mqs
                release.set()
                # A finishes its batch, unlocks the queue it lost; B locks it and goes on.
                await eventually(lambda: len(log) >= 20, 20)
                await trio.sleep(0.2)
                assert topic_queues(a, "LockT") | topic_queues(b, "LockT") == mqs
                assert not topic_queues(a, "LockT") & topic_queues(b, "LockT")
        for q in range(2):
            steps = [s for _, qq, s in log if qq == q]
            assert steps == list(range(10)), f"queue {q}: {steps}"
        assert {n for n, _, _ in log} == {"A", "B"}


@pytest.mark.timeout(60)
async def test_lite_pull_consumer_polls_and_commits(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "LiteT", queues=2)
        await produce(env.namesrv, "LiteT", [f"l{i}" for i in range(30)])
        got: list[str] = []
        async with LitePullConsumer("lpg", env.namesrv, "LiteT", config=FAST_CONSUMER) as c:
            deadline = time.monotonic() + 10
            while len(got) < 30 and time.monotonic() < deadline:
                got.extend(m.body.decode() for m in await c.poll(0.5))
            assert sorted(got) == sorted(f"l{i}" for i in range(30))
            assert await c.poll(0.2) == []
            assert set(c.assignment()) >= {MessageQueue("LiteT", "broker-a", q) for q in range(2)}
        offs = await committed(env.namesrv, "LiteT", "lpg")
        assert all(c_off == m for m, c_off in offs.values()), offs


@pytest.mark.timeout(60)
async def test_pull_consumer_manual_offsets(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "ManT", queues=1)
        await produce(env.namesrv, "ManT", [f"p{i}" for i in range(5)], tags="X")
        async with PullConsumer(
            "mg", env.namesrv, config=FAST_CLIENT, broker_suspend_max_time_s=0.6
        ) as c:
            (mq,) = await c.fetch_subscribe_queues("ManT")
            assert await c.fetch_consume_offset(mq) in (None, 0)
            r = await c.pull(mq, "X", 0, 3)
            assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [
                b"p0",
                b"p1",
                b"p2",
            ]
            c.update_consume_offset(mq, r.next_begin_offset)
            await c.commit()
            assert await c.fetch_consume_offset(mq) == 3
            r = await c.pull(mq, "Y", 3, 32)
            assert r.messages == [] and r.next_begin_offset == 5
            # Nothing new: the broker parks the pull (long polling) until its timeout.
            hold = env.node.hold if env.node is not None else None
            assert hold is not None
            async with trio.open_nursery() as n:
                results = []

                async def blocked() -> None:
                    results.append(await c.pull(mq, "*", 5, 32, block=True, timeout_s=1))

                n.start_soon(blocked)
                await eventually(lambda: hold.waiting(mq.topic, mq.queue_id) == 1)
            assert results[0].status is PullStatus.NO_NEW_MSG
            assert hold.waiting(mq.topic, mq.queue_id) == 0
            assert await c.max_offset(mq) == 5 and await c.min_offset(mq) == 0


@pytest.mark.timeout(60)
async def test_clients_pass_body_exceptions_through_and_survive_cancellation(
    tmp_path: Path,
) -> None:
    def ok(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
        return ConsumeStatus.CONSUME_SUCCESS

    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "ExcT", queues=2)
        with pytest.raises(ValueError, match="boom"):
            async with Producer("pg", env.namesrv, config=FAST_PRODUCER):
                raise ValueError("boom")
        with pytest.raises(KeyError):
            async with PushConsumer("eg", env.namesrv, "ExcT", ok, config=FAST_CONSUMER):
                raise KeyError("x")
        # Cancelled from outside while running: shutdown still completes, and a new member
        # of the group gets every queue.
        with trio.move_on_after(0.5):
            async with PushConsumer("eg", env.namesrv, "ExcT", ok, config=FAST_CONSUMER):
                await trio.sleep_forever()
        async with PushConsumer("eg", env.namesrv, "ExcT", ok, config=FAST_CONSUMER) as c:
            await eventually(lambda: len(topic_queues(c, "ExcT")) == 2)


@pytest.mark.timeout(60)
async def test_an_online_push_consumer_takes_a_reset_offset_by_time(tmp_path: Path) -> None:
    """mqadmin resetOffsetByTime while the group's push consumer is online: the broker resets
    the committed offsets and notifies the client (RESET_CONSUMER_CLIENT_OFFSET); the
    consumer drops its queues, commits the reset offsets again and consumes everything since
    the timestamp a second time. Without the notice handled, its next persist would write its
    old offsets back and nothing would be consumed again."""
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "ResetT", queues=2)
        await produce(env.namesrv, "ResetT", [f"a{i}" for i in range(20)])
        seen: collections.Counter[str] = collections.Counter()

        async def listener(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
            for m in msgs:
                seen[m.body.decode()] += 1
            return ConsumeStatus.CONSUME_SUCCESS

        async with PushConsumer("rg", env.namesrv, "ResetT", listener, config=FAST_CONSUMER) as c:
            await eventually(lambda: len(seen) == 20)
            await c.offsets.persist_all(list(c.assigned), oneway=False)
            offs = await committed(env.namesrv, "ResetT", "rg")
            assert all(c_off == m for m, c_off in offs.values()), offs
            async with Admin(env.namesrv, config=FAST_CLIENT) as admin:
                table = await admin.reset_offset_by_time("rg", "ResetT", 0)
            assert sorted(table.values()) == [0, 0]
            await eventually(lambda: all(seen[f"a{i}"] == 2 for i in range(20)), 20)
            # The consumer's own commits now move forward from the reset, not back to 20.
            await c.offsets.persist_all(list(c.assigned), oneway=False)
            offs = await committed(env.namesrv, "ResetT", "rg")
            assert all(c_off == m for m, c_off in offs.values()), offs
        assert sum(seen.values()) == 40
