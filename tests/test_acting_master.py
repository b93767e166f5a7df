"""Slave acting master (RIP-32), pre-online, strict locking, old-name-server compatibility and
FMQ fencing, with real processes on loopback (`rmq_jepsen.bench.cluster.ActingCluster`): a name
server with supportActingMaster, group broker-a (master + slave) and, as the escape target,
group broker-b (a master)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from rmq_jepsen.bench.cluster import ActingCluster

from rmq_ha.client import Admin, ClientConfig, Producer, ProducerConfig, PullConsumer
from rmq_ha.client.pop import PopConsumer, PopStatus
from rmq_ha.client.transaction import LocalTransactionState, TransactionProducer
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SendMessageRequestHeaderV2,
)
from rmq_ha.protocol.models import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
)

TOPIC = "ActT"
CC = ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.3)
PRODUCER = ProducerConfig(client=CC, send_msg_timeout_s=3.0, retry_times_when_send_failed=0)
SPECIAL = {
    "messageDelayLevel": "1s 2s 3s",
    "transactionTimeOut": 1000,
    "transactionCheckInterval": 300,
    "reviveInterval": 300,
}


@asynccontextmanager
async def started(c: ActingCluster) -> AsyncIterator[ActingCluster]:
    try:
        await c.start()
        for group, bid in c.members:  # pre-online done everywhere, masters registered
            await wait_status(c, group, bid, lambda s: not s["isolated"], "online", 30)
        async with Admin(c.ns_addrs[0], config=CC) as admin:
            with trio.fail_after(20):
                while set(await admin.master_addrs("ActingCluster")) != set(c.groups):
                    await trio.sleep(0.1)
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


async def wait_status(
    c: ActingCluster, group: str, bid: int, pred: Any, what: str, timeout_s: float = 20
) -> dict[str, Any]:
    with trio.move_on_after(timeout_s):
        while True:
            st = await c.status(group, bid)
            if st is not None and pred(st):
                return st
            await trio.sleep(0.05)
    raise AssertionError(f"{group}/{bid}: {what} not within {timeout_s} s: {st}")


async def route_of(admin: Admin, group: str) -> tuple[dict[int, str], int]:
    route = await admin.route(TOPIC)
    bd = next(b for b in route.broker_datas if b.broker_name == group)
    qd = next(q for q in route.queue_datas if q.broker_name == group)
    return dict(bd.broker_addrs), qd.perm


def mq(group: str, qid: int = 0, topic: str = TOPIC) -> MessageQueue:
    return MessageQueue(topic=topic, broker_name=group, queue_id=qid)


async def lock(addr: str, group: str, client: str, mqs: set[MessageQueue]) -> set[MessageQueue]:
    body = LockBatchRequestBody(consumer_group=group, client_id=client, mq_set=mqs)
    async with RemotingClient() as rc:
        r = await rc.invoke(
            addr, RemotingCommand.request(RC.LOCK_BATCH_MQ, None, body.to_json()), 5
        )
    assert r.code == Resp.SUCCESS, r.remark
    return set(LockBatchResponseBody.from_json(r.body).lock_ok_mq_set)


async def direct(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    async with RemotingClient() as rc:
        return await rc.invoke(addr, cmd, 3)


async def consumer_offsets(
    addr: str, group: str, topic: str, queues: range
) -> dict[int, int | None]:
    """QUERY_CONSUMER_OFFSET of each queue, asked of one broker (None: not found)."""
    out: dict[int, int | None] = {}
    async with RemotingClient() as rc:
        for q in queues:
            h = QueryConsumerOffsetRequestHeader(
                consumer_group=group, topic=topic, queue_id=q, set_zero_if_not_found=False
            )
            r = await rc.invoke(
                addr, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, h.to_ext()), 3
            )
            ok = r.code == Resp.SUCCESS
            out[q] = QueryConsumerOffsetResponseHeader.from_ext(r.ext_fields).offset if ok else None
    return out


async def delay_offsets(addr: str) -> dict[str, int]:
    """GET_ALL_DELAY_OFFSET: the per-level progress of a broker's delay service."""
    r = await direct(addr, RemotingCommand.request(RC.GET_ALL_DELAY_OFFSET))
    assert r.code == Resp.SUCCESS and r.body
    table: dict[str, int] = json.loads(r.body)["offsetTable"]
    return table


def send_cmd(topic: str, body: bytes) -> RemotingCommand:
    h = SendMessageRequestHeaderV2(
        producer_group="pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties="",
    )
    return RemotingCommand.request(RC.SEND_MESSAGE_V2, h.to_ext(), body)


def pull_cmd(topic: str) -> RemotingCommand:
    h = PullMessageRequestHeader(
        consumer_group="g",
        topic=topic,
        queue_id=0,
        queue_offset=0,
        max_msg_nums=1,
        sys_flag=0x4,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
        expression_type="TAG",
    )
    return RemotingCommand.request(RC.PULL_MESSAGE, h.to_ext())


async def bodies_on(admin: Admin, pc: PullConsumer, group: str, topic: str = TOPIC) -> list[str]:
    """Every message body of `topic` on one broker group, min to max of each queue."""
    out: list[str] = []
    for q in range(4):
        m = mq(group, q, topic)
        off, hi = await admin.min_offset(m), await admin.max_offset(m)
        while off < hi:
            res = await pc.pull(m, "*", off, 32)
            out.extend(x.body.decode() for x in res.messages)
            if res.next_begin_offset <= off:
                break
            off = res.next_begin_offset
    return out


@pytest.mark.timeout(150)
async def test_the_slave_acts_for_a_dead_master_and_hands_back_after_pre_online(
    tmp_path: Path,
) -> None:
    c = ActingCluster(tmp_path, broker=SPECIAL)
    async with started(c), Admin(c.ns_addrs[0], config=CC) as admin:
        ns = c.ns_addrs[0]
        master, slave = c.addr("broker-a", 0), c.addr("broker-a", 1)
        await admin.create_topic(TOPIC, cluster="ActingCluster", queue_nums=4, wait_for_route_s=10)
        await wait_status(c, "broker-a", 1, lambda s: s["slaveState"] == "TRANSFER", "transfer")
        # Ordinary messages on broker-a, half consumed by group g1 (offsets committed on the
        # master), a delayed message (level 3 = 3 s) and an undecided transaction.
        async with Producer("pg", ns, config=PRODUCER) as p:
            for i in range(20):
                await p.send(TOPIC, f"m{i}", queue=mq("broker-a", i % 4))
            t_delay = time.time()
            await p.send(TOPIC, "delayed-1", queue=mq("broker-a", 0), properties={"DELAY": "3"})
            # A timer (absolute due time) that comes due during the outage (RocketMQ #7601:
            # an escaped timer must not be delivered twice).
            due_ms = int((t_delay + 4.0) * 1000)
            await p.send(
                TOPIC,
                "timer-1",
                queue=mq("broker-a", 1),
                properties={"TIMER_DELIVER_MS": str(due_ms)},
            )
        checked: list[str] = []

        def execute(msg: Any, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        def check(msg: Any) -> LocalTransactionState:
            checked.append(msg.body.decode())
            return LocalTransactionState.COMMIT_MESSAGE

        async with TransactionProducer("txg", ns, check, config=PRODUCER) as tp:
            # Undecided halves on broker-a (the producer picks queues round robin).
            tx_on_a: list[str] = []
            for i in range(8):
                r = await tp.send_message_in_transaction(TOPIC, f"tx-{i}", execute)
                if r.send_result.queue.broker_name == "broker-a":
                    tx_on_a.append(f"tx-{i}")
            assert tx_on_a
            committed: dict[int, int] = {}
            async with PullConsumer("g1", ns, config=CC) as pc:
                for q in range(4):
                    res = await pc.pull(mq("broker-a", q), "*", 0, 2)
                    pc.update_consume_offset(mq("broker-a", q), res.next_begin_offset)
                    committed[q] = res.next_begin_offset
                await pc.commit()
            # The slave's metadata sync copies g1's offsets.
            with trio.fail_after(30):
                while await consumer_offsets(slave, "g1", TOPIC, range(4)) != committed:
                    await trio.sleep(0.05)

            # ---- the master dies -----------------------------------------------------------
            c.proc("broker-a", 0).kill()
            with trio.fail_after(10):
                while True:
                    addrs, perm = await route_of(admin, "broker-a")
                    if addrs.get(0) == slave and perm == 4:
                        break
                    await trio.sleep(0.05)
            # The core decides to act at once; the special services start in a task of their
            # own after it (they load their progress first), so a status can show acting
            # without them for a moment: wait for both.
            await wait_status(
                c,
                "broker-a",
                1,
                lambda s: s["actingMaster"] and s["specialServices"],
                "acting with the special services running",
            )

            # Master-only requests work on the acting slave.
            assert await admin.max_offset(mq("broker-a", 0)) >= 5
            assert await admin.min_offset(mq("broker-a", 0)) == 0
            assert await admin.search_offset(mq("broker-a", 0), 0) == 0
            assert await lock(slave, "og", "c1", {mq("broker-a", 2)}) == {mq("broker-a", 2)}
            # Its own commitlog stays unwritable.
            refused = await direct(slave, send_cmd(TOPIC, b"forbidden"))
            assert refused.code == Resp.SERVICE_NOT_AVAILABLE

            # Consumers keep consuming broker-a from the slave; offsets commit there.
            async with PullConsumer("g1", ns, config=CC) as pc:
                for q in range(4):
                    m = mq("broker-a", q)
                    off = await pc.fetch_consume_offset(m)
                    assert off == 2, f"g1 resumes where it committed on the master (q{q}: {off})"
                    res = await pc.pull(m, "*", off, 32)
                    assert res.messages, "the slave serves reads"
                    pc.update_consume_offset(m, res.next_begin_offset)
                await pc.commit()
                after_outage = {
                    q: await pc.fetch_consume_offset(mq("broker-a", q)) for q in range(4)
                }

            # The delayed message comes due and is delivered through broker-b.
            async with PullConsumer("drain", ns, config=CC) as dc:
                with trio.fail_after(15):
                    while "delayed-1" not in await bodies_on(admin, dc, "broker-b"):
                        await trio.sleep(0.2)
                late = time.time() - (t_delay + 3.0)
                assert late < 2.0 + 1.0, f"delivered {late:.2f}s after due"
                # The undecided transaction is escaped, checked by broker-b and committed.
                with trio.fail_after(20):
                    while not set(tx_on_a) <= set(await bodies_on(admin, dc, "broker-b")):
                        await trio.sleep(0.2)
                assert set(tx_on_a) <= set(checked)
                with trio.fail_after(15):
                    while "timer-1" not in await bodies_on(admin, dc, "broker-b"):
                        await trio.sleep(0.2)
                assert time.time() * 1000 >= due_ms, "a timer is never early"
            acting_delay = await delay_offsets(slave)

            # Pop consumers keep receiving and acking on the acting slave.
            async with PopConsumer("popg", ns, config=None) as pop:
                got: list[str] = []
                with trio.fail_after(10):
                    while len(got) < 5:
                        popped = await pop.pop(TOPIC, broker_name="broker-a", invisible_time_s=30)
                        if popped.status is PopStatus.FOUND:
                            for msg in popped.messages:
                                await pop.ack(msg)
                                got.append(msg.body.decode())
                assert all(b.startswith("m") for b in got)

            # ---- the master comes back: pre-online, then the slave stops acting -------------
            c.proc("broker-a", 0).start()
            await c.proc("broker-a", 0).wait_ready()
            st = await wait_status(c, "broker-a", 0, lambda s: not s["isolated"], "online", 30)
            assert any(x.startswith("consumerOffset@") for x in st["reverseSynced"]), st
            assert any(x.startswith("delayOffset@") for x in st["reverseSynced"]), st
            back = await delay_offsets(master)
            assert all(back.get(k, 0) >= v for k, v in acting_delay.items()), (back, acting_delay)
            await wait_status(c, "broker-a", 1, lambda s: not s["actingMaster"], "hand-back")
            with trio.fail_after(10):
                while (await route_of(admin, "broker-a")) != ({0: master, 1: slave}, 6):
                    await trio.sleep(0.05)
            async with PullConsumer("g1", ns, config=CC) as pc:
                for q in range(4):
                    now_off = await pc.fetch_consume_offset(mq("broker-a", q))
                    before = after_outage[q]
                    assert now_off is not None and before is not None
                    assert now_off >= before, f"q{q}: offset went back to {now_off}"
            # The master did not deliver the delayed message a second time.
            async with PullConsumer("drain2", ns, config=CC) as dc:
                await trio.sleep(1.5)  # time passes: a second delivery would have shown by now
                all_b = await bodies_on(admin, dc, "broker-b")
                all_a = await bodies_on(admin, dc, "broker-a")
            for once in ("delayed-1", "timer-1", *tx_on_a):
                assert all_b.count(once) + all_a.count(once) == 1, once


@pytest.mark.timeout(90)
async def test_strict_locking_never_gives_a_queue_to_two_consumers_across_the_hand_back(
    tmp_path: Path,
) -> None:
    """lockInStrictMode with 2 replicas: a lock needs both. The consumer holding a queue keeps
    it on the slave while the master is away; when the master returns with an empty lock
    table, another consumer still cannot take the queue until that lock expires."""
    c = ActingCluster(
        tmp_path,
        groups={"broker-a": 1},
        # Long enough that the checks below end well before c1's lock could expire, however
        # slow the machine (they look at three seconds of it).
        broker={"lockInStrictMode": "true", "rebalanceLockMaxLiveTime": 10_000},
    )
    async with started(c), Admin(c.ns_addrs[0], config=CC) as admin:
        master, slave = c.addr("broker-a", 0), c.addr("broker-a", 1)
        await admin.create_topic(TOPIC, cluster="ActingCluster", queue_nums=4, wait_for_route_s=10)
        await wait_status(c, "broker-a", 0, lambda s: not s["isolated"], "online")
        q = {mq("broker-a", 1)}
        with trio.fail_after(10):  # until the master has learned its group
            while await lock(master, "og", "c1", q) != q:
                await trio.sleep(0.2)
        assert await lock(slave, "og", "c2", q) == set(), "c1 holds it on the slave too"
        c.proc("broker-a", 0).kill()
        await wait_status(c, "broker-a", 1, lambda s: s["actingMaster"], "acting")
        # No quorum while the master is away: nobody gets the queue, not even c1.
        assert await lock(slave, "og", "c2", q) == set()
        assert await lock(slave, "og", "c1", q) == set()
        t_c1 = time.monotonic()  # c1's lock on the slave was renewed locally just now
        c.proc("broker-a", 0).start()
        await c.proc("broker-a", 0).wait_ready()
        await wait_status(c, "broker-a", 0, lambda s: not s["isolated"], "online", 30)
        await wait_status(c, "broker-a", 1, lambda s: not s["actingMaster"], "hand-back")
        # The returned master has an empty lock table, but the slave still holds c1's lock.
        while time.monotonic() - t_c1 < 3.0:
            assert await lock(master, "og", "c2", q) == set(), "two holders at once"
            await trio.sleep(0.2)
        with trio.fail_after(30):  # c1's lock expires: c2 gets the queue on both replicas
            while await lock(master, "og", "c2", q) != q:
                await trio.sleep(0.2)
        assert await lock(slave, "og", "c1", q) == set()


@pytest.mark.timeout(60)
async def test_old_name_server_heartbeats_by_data_version_and_member_group_by_topic_route(
    tmp_path: Path,
) -> None:
    """compatibleWithOldNameSrv against a name server without 901/904: the slave stays
    registered through QUERY_DATA_VERSION heartbeats and learns its group from the route of
    rmq_sys_SYNC_BROKER_MEMBER_broker-a, so it still takes over."""
    c = ActingCluster(
        tmp_path,
        groups={"broker-a": 1},
        namesrv_env={"RMQ_HA_FAULTS": "old-namesrv"},
        broker={"compatibleWithOldNameSrv": "true"},
    )
    async with started(c), Admin(c.ns_addrs[0], config=CC) as admin:
        slave = c.addr("broker-a", 1)
        await admin.create_topic(TOPIC, cluster="ActingCluster", queue_nums=4, wait_for_route_s=10)
        await wait_status(c, "broker-a", 1, lambda s: s["minBrokerId"] == 0, "member group")
        # Past the 2 s broker timeout, both are still routed: 322 kept them alive (time
        # passes; nothing is waited for).
        await trio.sleep(3.0)
        addrs, _ = await route_of(admin, "broker-a")
        assert set(addrs) == {0, 1}
        c.proc("broker-a", 0).signal(signal.SIGSTOP)  # no FIN: only the timeout tells
        try:
            with trio.fail_after(10):
                while (await route_of(admin, "broker-a")) != ({0: slave}, 4):
                    await trio.sleep(0.1)
            await wait_status(c, "broker-a", 1, lambda s: s["actingMaster"], "acting")
        finally:
            c.proc("broker-a", 0).signal(signal.SIGCONT)


@pytest.mark.timeout(60)
async def test_a_master_cut_off_from_name_servers_and_slaves_fences_itself(
    tmp_path: Path,
) -> None:
    """fenceWhenIsolated: a master that hears from no name server and no slave stops serving
    sends and pulls (its slave is acting elsewhere), and serves again once contact is back."""
    c = ActingCluster(tmp_path, groups={"broker-a": 1}, broker={"fenceWhenIsolated": "true"})
    async with started(c), Admin(c.ns_addrs[0], config=CC) as admin:
        master = c.addr("broker-a", 0)
        await admin.create_topic(TOPIC, cluster="ActingCluster", queue_nums=4, wait_for_route_s=10)
        await wait_status(c, "broker-a", 1, lambda s: s["slaveState"] == "TRANSFER", "transfer")
        assert (await direct(master, send_cmd(TOPIC, b"before"))).code == Resp.SUCCESS
        stopped = [c.namesrvs[0], c.proc("broker-a", 1)]
        for p in stopped:
            p.signal(signal.SIGSTOP)
        try:
            await wait_status(c, "broker-a", 0, lambda s: s["fencedIsolated"], "fenced", 15)
            r = await direct(master, send_cmd(TOPIC, b"during"))
            assert r.code == Resp.SERVICE_NOT_AVAILABLE and "fenced" in (r.remark or "")
            assert (await direct(master, pull_cmd(TOPIC))).code == Resp.SERVICE_NOT_AVAILABLE
        finally:
            for p in stopped:
                p.signal(signal.SIGCONT)
        await wait_status(c, "broker-a", 0, lambda s: not s["fencedIsolated"], "unfenced", 15)
        with trio.fail_after(10):
            while (await direct(master, send_cmd(TOPIC, b"after"))).code != Resp.SUCCESS:
                await trio.sleep(0.2)
        assert (await direct(master, pull_cmd(TOPIC))).code == Resp.SUCCESS


@pytest.mark.timeout(90)
async def test_escape_survives_a_stale_route_to_a_dead_master(tmp_path: Path) -> None:
    """RocketMQ #7923: the acting slave's escape bridge caches the route; the master it
    escaped to dies; the next due message must reach another master, once, not get lost."""
    c = ActingCluster(
        tmp_path,
        groups={"broker-a": 1, "broker-b": 0, "broker-c": 0},
        broker={"messageDelayLevel": "1s 2s 3s 6s"},
    )
    async with started(c), Admin(c.ns_addrs[0], config=CC) as admin:
        await admin.create_topic(TOPIC, cluster="ActingCluster", queue_nums=4, wait_for_route_s=10)
        await wait_status(c, "broker-a", 1, lambda s: s["slaveState"] == "TRANSFER", "transfer")
        async with Producer("pg", c.ns_addrs[0], config=PRODUCER) as p:
            await p.send(TOPIC, "d-first", queue=mq("broker-a", 0), properties={"DELAY": "1"})
            await p.send(TOPIC, "d-second", queue=mq("broker-a", 0), properties={"DELAY": "4"})
        c.proc("broker-a", 0).kill()
        await wait_status(c, "broker-a", 1, lambda s: s["actingMaster"], "acting")
        async with PullConsumer("drain", c.ns_addrs[0], config=CC) as dc:
            first_on = None
            with trio.fail_after(10):
                while first_on is None:
                    for g in ("broker-b", "broker-c"):
                        if "d-first" in await bodies_on(admin, dc, g):
                            first_on = g
                    await trio.sleep(0.1)
            other = "broker-c" if first_on == "broker-b" else "broker-b"
            # The escape target dies; the acting slave's route cache still names it.
            c.proc(first_on, 0).kill()
            with trio.fail_after(15):
                while "d-second" not in await bodies_on(admin, dc, other):
                    await trio.sleep(0.2)
            assert (await bodies_on(admin, dc, other)).count("d-second") == 1


@pytest.mark.timeout(90)
async def test_a_slave_that_never_synced_metadata_still_serves_and_hands_back_its_progress(
    tmp_path: Path,
) -> None:
    """The master dies before the slave ever copied its metadata (syncBrokerMetadataPeriod is
    longer than the test): the acting slave still serves pulls of a topic whose config it
    never got (from its log), and what it changed while acting (fewer commits than
    consumerOffsetUpdateVersionStep, one delay delivery) is newer than the master's copy, so
    pre-online takes it: no offset goes back and the delayed message is not delivered twice."""
    c = ActingCluster(tmp_path, broker={**SPECIAL, "syncBrokerMetadataPeriod": 600_000})
    async with started(c), Admin(c.ns_addrs[0], config=CC) as admin:
        ns, slave = c.ns_addrs[0], c.addr("broker-a", 1)
        await admin.create_topic(TOPIC, cluster="ActingCluster", queue_nums=4, wait_for_route_s=10)
        await wait_status(c, "broker-a", 1, lambda s: s["slaveState"] == "TRANSFER", "transfer")
        async with Producer("pg", ns, config=PRODUCER) as p:
            for i in range(8):
                await p.send(TOPIC, f"n{i}", queue=mq("broker-a", i % 4))
            await p.send(TOPIC, "late-1", queue=mq("broker-a", 0), properties={"DELAY": "2"})
        await wait_status(
            c,
            "broker-a",
            1,
            lambda s: s["maxOffset"] > 0 and s["maxOffset"] == s["confirmOffset"],
            "replicated",
        )
        c.proc("broker-a", 0).kill()
        await wait_status(c, "broker-a", 1, lambda s: s["actingMaster"], "acting")
        async with PullConsumer("g2", ns, config=CC) as pc:
            for q in range(4):
                res = await pc.pull(mq("broker-a", q), "*", 0, 32)
                assert [m.body.decode() for m in res.messages], f"q{q} served by the slave"
                pc.update_consume_offset(mq("broker-a", q), res.next_begin_offset)
            await pc.commit()
        async with PullConsumer("drain", ns, config=CC) as dc:
            with trio.fail_after(15):
                while "late-1" not in await bodies_on(admin, dc, "broker-b"):
                    await trio.sleep(0.2)
        acting_delay = await delay_offsets(slave)
        c.proc("broker-a", 0).start()
        await c.proc("broker-a", 0).wait_ready()
        st = await wait_status(c, "broker-a", 0, lambda s: not s["isolated"], "online", 30)
        assert any(x.startswith("consumerOffset@") for x in st["reverseSynced"]), st
        await wait_status(c, "broker-a", 1, lambda s: not s["actingMaster"], "hand-back")
        back = await delay_offsets(c.addr("broker-a", 0))
        assert all(back.get(k, 0) >= v for k, v in acting_delay.items()), (back, acting_delay)
        async with PullConsumer("g2", ns, config=CC) as pc:
            for q in range(4):
                off = await pc.fetch_consume_offset(mq("broker-a", q))
                assert off is not None and off >= 2, f"q{q}: g2's offset went back to {off}"
        async with PullConsumer("drain2", ns, config=CC) as dc:
            await trio.sleep(3.0)  # the master's own delay service had time to redeliver
            every = await bodies_on(admin, dc, "broker-a") + await bodies_on(admin, dc, "broker-b")
        assert every.count("late-1") == 1
