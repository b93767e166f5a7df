"""Pop consumption (broker/special/pop.py) with the Python PopConsumer: pop / ack, revive of
what was not acked after the invisible time (through the pop retry topic), change of the
invisible time, long polling, revive across a restart, the revive records' keys, and a CK of
another broker group that cannot be read (the acting-master cases: test_special_acting.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio

from rmq_ha._native import decode_stored_record
from rmq_ha.broker.special.base import InnerMessage
from rmq_ha.broker.special.pop import (
    REVIVE_GROUP,
    REVIVE_TOPIC_PREFIX,
    SQL_POP_SCAN,
    CheckPoint,
    remote_retry_wait_ms,
)
from rmq_ha.client import Admin, MessageExt, MessageQueue, PopConsumer, PopStatus, Producer
from rmq_ha.client.errors import BrokerResponseError
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.message import decode_properties
from rmq_ha.protocol.pop import ExtraInfo
from specialutil import SpecialEnv, eventually, special_cluster
from test_client_cluster import FAST_CONSUMER, FAST_PRODUCER, create_topic

pytestmark = pytest.mark.timeout(60)

FAST_REVIVE = {"revive_interval_ms": 100, "revive_queue_num": 2}


async def produce(env: SpecialEnv, topic: str, bodies: list[str]) -> None:
    async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
        for b in bodies:
            await p.send(topic, b, tags="T")


async def wait_broker_time(env: SpecialEnv, wall_ms: int) -> None:
    """Lets time pass until the broker's wall clock reaches `wall_ms` (same host clock)."""
    while (now := int(time.time() * 1000)) < wall_ms:
        await trio.sleep((wall_ms - now) / 1000)


def revive_records(env: SpecialEnv) -> list[tuple[str, dict[str, object], dict[str, str]]]:
    store = env.broker.store.native
    topic = REVIVE_TOPIC_PREFIX + env.cfg.cluster_name
    out = []
    for q in range(env.cfg.revive_queue_num):
        for i in range(store.queue_max_offset(topic, q)):
            phys, _, _ = store.queue_unit(topic, q, i)
            rec = decode_stored_record(store.read_record(phys).tobytes())
            props = decode_properties(rec["properties"])  # type: ignore[arg-type]
            out.append((props["TAGS"], json.loads(rec["body"]), props))  # type: ignore[arg-type]
    return out


@pytest.mark.timeout(30)
async def test_pop_ack_and_revive_after_the_invisible_time(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PopT", queues=2)
        await produce(env, "PopT", [f"m{i}" for i in range(6)])
        async with PopConsumer("pcg", env.namesrv, ["PopT"], config=FAST_CONSUMER) as c:
            r = await c.pop("PopT", invisible_time_s=1.0)
            assert r.status is PopStatus.FOUND and r.rest_num == 0
            got = {m.body.decode(): m for m in r.messages}
            assert sorted(got) == [f"m{i}" for i in range(6)]
            lease = ExtraInfo.parse(got["m4"].properties["POP_CK"])
            for name in ("m0", "m1", "m2", "m3"):
                await c.ack(got[name])
            # Invisible: nothing to pop until the lease ends, then the two un-acked come back.
            assert (await c.pop("PopT")).status is PopStatus.NO_NEW_MSG
            again: list[MessageExt] = []
            while len(again) < 2:
                r2 = await c.pop("PopT", invisible_time_s=5.0, poll_time_s=1.0)
                again += r2.messages
            assert sorted(m.body.decode() for m in again) == ["m4", "m5"]
            for m in again:
                # Revived no earlier than the lease's end, by the broker's own clock.
                assert m.store_timestamp_ms >= lease.pop_time + lease.invisible_time
                assert m.topic == "PopT" and m.reconsume_times == 1
                assert ExtraInfo.parse(m.properties["POP_CK"]).retry
                assert m.properties["ORIGIN_GROUP"] == "pcg" and "1ST_POP_TIME" in m.properties
                await c.ack(m)
            # Once revive has settled every checkpoint, nothing is left to come back.
            pop = env.broker.special.pop
            await eventually(lambda: pop.stats()["pending"] == 0, 10)
            assert (await c.pop("PopT")).status is PopStatus.NO_NEW_MSG
        # Acked retries are not revived again, and the group's offsets moved at pop time.
        assert env.max_offset("%RETRY%pcg_PopT") == 2
        assert env.broker.offsets.query("pcg", "PopT", 0) is not None
        cks = [(tag, body, props) for tag, body, props in revive_records(env) if tag == "ck"]
        assert cks and all(body["bn"] == "broker-a" for _, body, _ in cks)
        assert all(props["UNIQ_KEY"].split("@")[5] == "broker-a" for _, _, props in cks)


@pytest.mark.timeout(30)
async def test_change_invisible_time_extends_and_shortens_the_lease(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "CitT", queues=1)
        await produce(env, "CitT", ["long", "short"])
        async with PopConsumer("ccg", env.namesrv, ["CitT"], config=FAST_CONSUMER) as c:
            r = await c.pop("CitT", invisible_time_s=2.0)
            msgs = {m.body.decode(): m for m in r.messages}
            first = ExtraInfo.parse(msgs["long"].properties["POP_CK"])
            old_ck = msgs["long"].properties["POP_CK"]
            await c.change_invisible_time(msgs["long"], 30.0)
            assert msgs["long"].properties["POP_CK"] != old_ck
            await c.change_invisible_time(msgs["short"], 0.2)
            new_short = ExtraInfo.parse(msgs["short"].properties["POP_CK"])
            assert new_short.invisible_time == 200  # the lease the broker now keeps
            r2 = await c.pop("CitT", poll_time_s=3.0, invisible_time_s=30.0)
            # Only "short" is back: had the changes been ignored, both would come back
            # together when the first lease ended.
            assert [m.body for m in r2.messages] == [b"short"]
            # Past the first lease of "long" (by the broker's clock): still invisible under
            # its new one. Waiting lets time pass; it synchronises nothing.
            await wait_broker_time(env, first.pop_time + first.invisible_time + 500)
            assert (await c.pop("CitT")).status is PopStatus.NO_NEW_MSG
            await c.ack(msgs["long"])  # with its new extraInfo
            await c.ack(r2.messages[0])
        pop = env.broker.special.pop
        await eventually(lambda: pop.stats()["pending"] == 0, 3)


@pytest.mark.timeout(30)
async def test_pop_long_polls_until_a_message_arrives(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PollT", queues=2)
        async with PopConsumer("lcg", env.namesrv, ["PollT"], config=FAST_CONSUMER) as c:
            assert (await c.pop("PollT", poll_time_s=0.4)).status is PopStatus.NO_NEW_MSG
            got: list[bytes] = []

            async def popper() -> None:
                # A poll longer than the test's limit: an answer with the message means the
                # arrival woke it.
                r = await c.pop("PollT", poll_time_s=120.0)
                got.extend(m.body for m in r.messages)

            async with trio.open_nursery() as n:
                n.start_soon(popper)
                await eventually(lambda: env.broker.hold.waiting("PollT", 0) > 0, 10)
                await produce(env, "PollT", ["wake"])
            assert got == [b"wake"]


@pytest.mark.timeout(30)
async def test_a_parked_pop_is_refused_when_its_group_was_disabled_meanwhile(
    tmp_path: Path,
) -> None:
    from rmq_ha.protocol.admin import SubscriptionGroupConfig

    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PollD", queues=1)
        async with PopConsumer("dcg", env.namesrv, ["PollD"], config=FAST_CONSUMER) as c:
            errors: list[BrokerResponseError] = []

            async def popper() -> None:
                try:
                    await c.pop("PollD", poll_time_s=120.0)
                except BrokerResponseError as e:
                    errors.append(e)

            async with trio.open_nursery() as n:
                n.start_soon(popper)
                await eventually(lambda: env.broker.hold.waiting("PollD", 0) > 0, 10)
                env.broker.subgroups.update(
                    SubscriptionGroupConfig(group_name="dcg", consume_enable=False)
                )
                await produce(env, "PollD", ["not for a disabled group"])
            assert [e.code for e in errors] == [Resp.NO_PERMISSION]


@pytest.mark.timeout(40)
async def test_revive_survives_a_restart(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PopRT", queues=1)
        await produce(env, "PopRT", ["a", "b", "c"])
        async with PopConsumer("rcg", env.namesrv, ["PopRT"], config=FAST_CONSUMER) as c:
            r = await c.pop("PopRT", invisible_time_s=1.5)
            assert len(r.messages) == 3
            await c.ack(r.messages[0])
        await env.restart_broker()
        await eventually(lambda: env.max_offset("%RETRY%rcg_PopRT") == 2, 10)
        # Revive acked what it revived and moved its progress past every record.
        await eventually(lambda: env.broker.special.pop.stats()["pending"] == 0, 10)
        env.broker.offsets.persist(force=True)
        await env.restart_broker()
        await eventually(lambda: env.broker.special.pop.stats()["pending"] == 0, 10)
        # Not revived twice: the revived messages were acked in the revive topic.
        assert env.max_offset("%RETRY%rcg_PopRT") == 2
        async with PopConsumer("rcg", env.namesrv, ["PopRT"], config=FAST_CONSUMER) as c:
            got: list[bytes] = []
            with trio.fail_after(10):
                while len(got) < 2:
                    r = await c.pop("PopRT", invisible_time_s=30, poll_time_s=1.0)
                    got += [m.body for m in r.messages]
            assert sorted(got) == [b"b", b"c"]


def test_the_remote_read_back_off_doubles_up_to_its_cap() -> None:
    """A CK whose messages another group cannot give is retried after the revive interval
    doubled per failure, capped at 10 s, so a dead group costs few reads."""
    assert [remote_retry_wait_ms(200, n) for n in range(1, 8)] == [
        400, 800, 1600, 3200, 6400, 10_000, 10_000,
    ]  # fmt: skip
    assert remote_retry_wait_ms(0, 1) == 2  # a zero interval still backs off
    assert remote_retry_wait_ms(200, 10_000) == 10_000


@pytest.mark.timeout(40)
async def test_a_checkpoint_of_an_unreachable_broker_group_waits_with_back_off(
    tmp_path: Path,
) -> None:
    """A CK escaped here by another group's acting slave whose messages cannot be read (no
    route names that group): kept pending, retried with a doubling back-off, never dropped;
    the revive progress stays behind it; a local CK after it is revived meanwhile."""
    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PopZT", queues=1)
        await produce(env, "PopZT", ["local"])
        pop = env.broker.special.pop
        now = int(time.time() * 1000)

        def ck(broker_name: str) -> InnerMessage:
            c = CheckPoint(
                start_offset=0,
                pop_time=now,
                invisible_time=100,
                queue_id=0,
                topic="PopZT",
                cid="zg",
                broker_name=broker_name,
                diffs=[0],
            )
            return InnerMessage(
                topic=pop.revive_topic,
                queue_id=0,
                body=c.to_json(),
                properties={"TAGS": "ck", "UNIQ_KEY": c.uniq_id()},
            )

        r = await env.broker.special.escape.put([ck("broker-z"), ck("broker-a")])
        assert r.ok and r.queue_offsets == (0, 1)
        await eventually(lambda: env.max_offset("%RETRY%zg_PopZT") == 1, 5)
        # Tried again and again (on the back-off of remote_retry_wait_ms), never dropped.
        await eventually(lambda: pop.stats()["remote_read_failures"] >= 3, 20)
        st = pop.stats()
        assert st["pending"] == 1  # broker-z's, still there
        assert env.broker.offsets.query(REVIVE_GROUP, pop.revive_topic, 0) == 0
        assert env.max_offset("%RETRY%zg_PopZT") == 1  # nothing revived for broker-z


@pytest.mark.timeout(30)
async def test_an_unreadable_group_costs_one_failed_read_per_revive_pass(tmp_path: Path) -> None:
    """Three due CKs of an unreachable group and a local one behind them: a revive pass tries
    one of the group's (the rest wait for a later pass) and still revives the local one."""
    async with special_cluster(tmp_path, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PopPT", queues=1)
        await produce(env, "PopPT", ["local"])
        pop = env.broker.special.pop
        await pop.stop()  # passes by hand below
        now = int(time.time() * 1000) - 1000  # due
        records = []
        for i, name in enumerate(["broker-z", "broker-z", "broker-z", "broker-a"]):
            c = CheckPoint(
                start_offset=0,
                pop_time=now + i,
                invisible_time=100,
                queue_id=0,
                topic="PopPT",
                cid="pg",
                broker_name=name,
                diffs=[0],
            )
            records.append(
                InnerMessage(
                    topic=pop.revive_topic,
                    queue_id=1,
                    body=c.to_json(),
                    properties={"TAGS": "ck", "UNIQ_KEY": c.uniq_id()},
                )
            )
        assert (await env.broker.special.escape.put(records)).ok
        assert await pop.revive_once() == 1  # the local CK, behind the unreadable ones
        assert env.max_offset("%RETRY%pg_PopPT") == 1
        assert pop.stats()["remote_read_failures"] == 1 and pop.stats()["pending"] == 3
        # The next pass: the first one waits out its back-off, the second is tried.
        assert await pop.revive_once() == 0
        assert pop.stats()["remote_read_failures"] == 2 and pop.stats()["pending"] == 3
        assert env.broker.offsets.query(REVIVE_GROUP, pop.revive_topic, 1) == 0


MQ_SQL = MessageQueue("PopSql", "broker-a", 0)


@pytest.mark.timeout(60)
async def test_sql92_pops_lease_only_matching_messages(tmp_path: Path) -> None:
    """With enablePropertyFilter, a pop with an SQL92 expression leases only the messages whose
    properties match; the others are moved past (the group's offset goes on), not leased."""
    async with special_cluster(tmp_path, enable_property_filter=True, **FAST_REVIVE) as env:
        await create_topic(env.namesrv, "PopSql", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(8):
                await p.send("PopSql", f"m{i}", tags="T", properties={"n": str(i)})
        async with PopConsumer("sqlcg", env.namesrv, ["PopSql"], config=FAST_CONSUMER) as c:
            r = await c.pop("PopSql", expression="n >= 5 OR n = 1", expression_type="SQL92")
            assert sorted(m.body.decode() for m in r.messages) == ["m1", "m5", "m6", "m7"]
            for m in r.messages:
                await c.ack(m)
            assert env.broker.offsets.query("sqlcg", "PopSql", 0) == 8
            r = await c.pop("PopSql", expression="n > 100", expression_type="SQL92")
            assert r.status is PopStatus.NO_NEW_MSG
            # a selective filter over a backlog: the pop reads on past what does not match
            # (in batches, and past SQL_POP_SCAN records without parking) within one request
            async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
                for i in range(8, 8 + SQL_POP_SCAN + 300):
                    props = {"n": str(i)}
                    await p.send("PopSql", f"m{i}", tags="T", properties=props, queue=MQ_SQL)
            last = 8 + SQL_POP_SCAN + 299
            r = await c.pop(
                "PopSql", max_nums=1, poll_time_s=30.0, expression=f"n = {last}",
                expression_type="SQL92",
            )  # fmt: skip
            assert [m.body.decode() for m in r.messages] == [f"m{last}"]
            with pytest.raises(BrokerResponseError) as e:
                await c.pop("PopSql", expression="n >", expression_type="SQL92")
            assert e.value.code == Resp.SUBSCRIPTION_PARSE_FAILED


@pytest.mark.timeout(30)
@pytest.mark.parametrize("clear", [True, False])
async def test_deleting_a_topic_deletes_its_pop_retry_topics(tmp_path: Path, clear: bool) -> None:
    """clearRetryTopicWhenDeleteTopic (RocketMQ's BrokerConfig, default true): deleteTopic
    also deletes the pop retry topic (%RETRY%group_topic) of each group that consumed it, its
    config and its messages. Before, they stayed for ever (docs/operations.md, "not done");
    with the key false they still do. Another topic's retry topic is not touched."""
    async with special_cluster(
        tmp_path, clear_retry_topic_when_delete_topic=clear, **FAST_REVIVE
    ) as env:
        for t in ("DelT", "KeepT"):
            await create_topic(env.namesrv, t, queues=1)
            await produce(env, t, ["a", "b"])
        async with PopConsumer("dg", env.namesrv, ["DelT", "KeepT"], config=FAST_CONSUMER) as c:
            for t in ("DelT", "KeepT"):
                got: list[MessageExt] = []
                while len(got) < 2:
                    got += (await c.pop(t, invisible_time_s=0.5, poll_time_s=1.0)).messages
        # not acked: revived into each topic's pop retry topic
        for t in ("DelT", "KeepT"):
            await eventually(lambda t=t: env.max_offset(f"%RETRY%dg_{t}") == 2, 10)
        async with Admin(env.namesrv) as admin:
            await admin.delete_topic("DelT", env.cfg.cluster_name)
        topics, native = env.broker.topics, env.broker.store.native
        assert topics.get("DelT") is None
        assert topics.get("KeepT") is not None and topics.get("%RETRY%dg_KeepT") is not None
        assert env.max_offset("%RETRY%dg_KeepT") == 2
        gone = topics.get("%RETRY%dg_DelT") is None
        assert gone is clear
        held = any(t == "%RETRY%dg_DelT" for t, _ in native.queues())
        assert held is not clear, "its messages go with it"
