"""Delayed and timer messages (broker/special/delay.py) on an in-process broker: a message comes
due at its level and not before, progress survives a restart without redelivery, the
DataVersion steps, consumer retries wait their delay level, timers ride the levels."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from rmq_ha._native import decode_stored_record
from rmq_ha.broker.special.delay import (
    SCHEDULE_TOPIC,
    DelayOffsets,
    deliver_at,
    parse_delay_levels,
)
from rmq_ha.client import MessageQueue, Producer, PullConsumer, PullStatus
from rmq_ha.errors import ConfigError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import ConsumerSendMsgBackRequestHeader
from rmq_ha.protocol.message import parse_offset_msg_id
from specialutil import SpecialEnv, eventually, special_cluster
from test_client_cluster import FAST_CLIENT, FAST_PRODUCER, create_topic

pytestmark = pytest.mark.timeout(60)


async def wait_arrival(env: SpecialEnv, topic: str, count: int, timeout_s: float) -> None:
    """Until `topic` queue 0 holds `count` messages."""
    await eventually(lambda: env.max_offset(topic) >= count, timeout_s, 0.005)


def test_delay_levels_parse_and_reject_garbage() -> None:
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")[
        -3:
    ] == [1_800_000, 3_600_000, 7_200_000]
    assert parse_delay_levels("250ms 1d") == [250, 86_400_000]
    for bad in ("", "5", "1x", "-1s", "0s"):
        with pytest.raises(ConfigError):
            parse_delay_levels(bad)


def test_delay_offsets_step_the_data_version_and_merge_newer(tmp_path: Path) -> None:
    d = DelayOffsets(tmp_path / "delayOffset.json", version_step=3)
    v0 = d.data_version
    for i in range(1, 3):
        d.update(1, i)
    assert d.data_version == v0  # two updates: below the step
    d.update(2, 7)
    assert d.data_version.counter == v0.counter + 1
    for i in range(3):
        d.update(1, 10 + i)
    assert d.data_version.counter == v0.counter + 2
    d.persist()
    doc = json.loads((tmp_path / "delayOffset.json").read_bytes())
    assert doc["offsetTable"] == {"1": 12, "2": 7} and doc["dataVersion"]["counter"] == 2
    again = DelayOffsets(tmp_path / "delayOffset.json", version_step=3)
    assert again.table == {1: 12, 2: 7} and again.data_version == d.data_version
    # A replica that got further (newer version) wins, level by level (progress never goes
    # back: level 2 keeps our 7); an older one does not.
    newer = DelayOffsets(tmp_path / "other.json", version_step=1)
    newer.table = {1: 99, 2: 3}
    newer.data_version = d.data_version.next_version(d.data_version.timestamp + 1)
    assert again.merge_newer(newer.to_json()) and again.table == {1: 99, 2: 7}
    assert not again.merge_newer(d.to_json()) and again.table == {1: 99, 2: 7}
    # A slave copying its master takes table and version; its next update is newer.
    slave = DelayOffsets(tmp_path / "slave.json", version_step=200)
    slave.adopt(d.to_json())
    assert slave.table == d.table and slave.data_version == d.data_version
    slave.update(1, 13)
    assert slave.data_version.compare(d.data_version) > 0


def record_at(env: SpecialEnv, topic: str, index: int, queue_id: int = 0) -> dict[str, Any]:
    store = env.broker.store.native
    phys, _, _ = store.queue_unit(topic, queue_id, index)
    return decode_stored_record(store.read_record(phys).tobytes())


def stored_at(env: SpecialEnv, topic: str, queue_id: int, index: int) -> int:
    """The broker's store timestamp of a queue's `index`-th record."""
    ts = record_at(env, topic, index, queue_id)["store_timestamp"]
    assert isinstance(ts, int)
    return ts


@pytest.mark.timeout(30)
async def test_delayed_message_comes_due_at_its_level_and_not_before(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, message_delay_level="300ms 1200ms") as env:
        await create_topic(env.namesrv, "DelayT", queues=2)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            mq = MessageQueue("DelayT", env.cfg.broker_name, 1)
            r = await p.send("DelayT", b"later", tags="TagA", properties={"DELAY": "2"}, queue=mq)
            # Answered with the queue asked for; stored on the schedule topic, queue level-1.
            assert r.queue.queue_id == 1 and env.max_offset(SCHEDULE_TOPIC, 1) == 1
            assert env.max_offset("DelayT", 1) == 0
            # A level past the last one is clamped to it.
            await p.send("DelayT", b"clamped", properties={"DELAY": "99"}, queue=mq)
            await eventually(lambda: env.max_offset("DelayT", 1) >= 2, 10, 0.005)
        async with PullConsumer("cg", env.namesrv, config=FAST_CLIENT) as c:
            res = await c.pull(mq, "*", 0, max_nums=8)
        assert res.status is PullStatus.FOUND
        [first, second] = res.messages
        # Delivered no earlier than its level (1200 ms) after it was stored, by the broker's
        # clock (how late is the benchmark's business).
        scheduled = stored_at(env, SCHEDULE_TOPIC, 1, 0)
        assert first.store_timestamp_ms >= scheduled + 1200
        assert first.body == b"later" and first.tags == "TagA"
        assert "DELAY" not in first.properties
        assert first.properties["REAL_TOPIC"] == "DelayT" and first.properties["REAL_QID"] == "1"
        assert second.body == b"clamped"
        assert env.broker.special.delay.offsets.table[2] == 2


@pytest.mark.timeout(40)
async def test_progress_survives_a_restart_without_redelivery(tmp_path: Path) -> None:
    async with special_cluster(
        tmp_path, message_delay_level="300ms 1s", delay_offset_update_version_step=2
    ) as env:
        await create_topic(env.namesrv, "RestartT", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(3):
                await p.send("RestartT", f"m{i}", properties={"DELAY": "1"})
            await wait_arrival(env, "RestartT", 3, 5)
            # Due while the broker is down: delivered once, after the restart.
            await p.send("RestartT", "during-restart", properties={"DELAY": "2"})
        await env.stop_broker()
        doc = json.loads((env.cfg.store_root / "config" / "delayOffset.json").read_bytes())
        assert doc["offsetTable"] == {"1": 3}
        assert doc["dataVersion"]["counter"] == 1  # 3 updates, step 2
        await trio.sleep(1.2)  # time passes while the broker is down: the message falls due
        await env.start_broker()
        await wait_arrival(env, "RestartT", 4, 5)
        # Both levels looked at twice more: nothing delivered a second time.
        delay = env.broker.special.delay
        before = dict(delay.scans)
        await eventually(
            lambda: all(delay.scans.get(lv, 0) >= before.get(lv, 0) + 2 for lv in (1, 2)), 10
        )
        assert env.max_offset("RestartT") == 4
        store = env.broker.store.native
        bodies = []
        for i in range(4):
            phys, _, _ = store.queue_unit("RestartT", 0, i)
            bodies.append(decode_stored_record(store.read_record(phys).tobytes())["body"])
        assert bodies == [b"m0", b"m1", b"m2", b"during-restart"]
        assert env.broker.special.delay.offsets.table == {1: 3, 2: 1}


@pytest.mark.timeout(30)
async def test_send_back_retry_waits_its_delay_level(tmp_path: Path) -> None:
    levels = "100ms 100ms 1500ms 100ms"
    async with special_cluster(tmp_path, message_delay_level=levels) as env:
        await create_topic(env.namesrv, "SbT", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            r = await p.send("SbT", b"fails")
        _, _, off = parse_offset_msg_id(r.offset_msg_id)
        async with RemotingClient() as c:

            async def send_back(offset: int, level: int) -> None:
                h = ConsumerSendMsgBackRequestHeader(
                    offset=offset, group="g", delay_level=level, max_reconsume_times=16
                )
                resp = await c.invoke(
                    env.addr, RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, h.to_ext())
                )
                assert resp.code == Resp.SUCCESS, resp.remark

            # delayLevel 0: the broker picks 3 + reconsumeTimes = level 3 (1.5 s), so the
            # retry waits on the schedule topic's queue 2, and arrives no earlier than 1.5 s
            # after it was stored there (by the broker's clock).
            await send_back(off, 0)
            assert env.max_offset(SCHEDULE_TOPIC, 2) == 1 and env.max_offset("%RETRY%g") == 0
            await wait_arrival(env, "%RETRY%g", 1, 10)
            retry = record_at(env, "%RETRY%g", 0)
            assert retry["store_timestamp"] >= stored_at(env, SCHEDULE_TOPIC, 2, 0) + 1500
            assert retry["reconsume_times"] == 1 and retry["body"] == b"fails"
            # A level the consumer chose is used as it is: level 1, the schedule's queue 0.
            phys, _, _ = env.broker.store.native.queue_unit("%RETRY%g", 0, 0)
            await send_back(phys, 1)
            assert env.max_offset(SCHEDULE_TOPIC, 0) == 1
            await wait_arrival(env, "%RETRY%g", 2, 10)


@pytest.mark.timeout(30)
async def test_timer_message_rides_the_levels_to_its_delivery_time(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, message_delay_level="200ms 1s") as env:
        await create_topic(env.namesrv, "TimerT", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            deliver = int(time.time() * 1000) + 2500
            r = await p.send("TimerT", b"at", properties={"TIMER_DELIVER_MS": str(deliver)})
            await p.send("TimerT", b"in", properties={"TIMER_DELAY_SEC": "1"})
            await wait_arrival(env, "TimerT", 2, 10)
        # Each no earlier than its time, by the broker's clock; the 1 s one first.
        first, second = record_at(env, "TimerT", 0), record_at(env, "TimerT", 1)
        assert first["body"] == b"in" and second["body"] == b"at"
        assert second["store_timestamp"] >= deliver
        assert first["store_timestamp"] >= first["born_timestamp"] + 1000
        assert b"TIMER_DELIVER_MS" not in second["properties"]  # type: ignore[operator]
        assert r.queue.topic == "TimerT"


@pytest.mark.timeout(20)
async def test_system_topics_refuse_sends_and_delay_offsets_are_served(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, message_delay_level="200ms") as env:
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            await create_topic(env.namesrv, "GT", queues=1)
            await p.send("GT", b"x", properties={"DELAY": "1"})
            await wait_arrival(env, "GT", 1, 3)
        async with RemotingClient() as c:
            r = await c.invoke(env.addr, RemotingCommand.request(RC.GET_ALL_DELAY_OFFSET))
            assert r.code == Resp.SUCCESS
            assert json.loads(r.body or b"")["offsetTable"] == {"1": 1}
        from test_broker import send_cmd

        async with RemotingClient() as c:
            for topic in (
                SCHEDULE_TOPIC,
                "RMQ_SYS_TRANS_HALF_TOPIC",
                "rmq_sys_REVIVE_LOG_DefaultCluster",
            ):
                r = await c.invoke(env.addr, send_cmd(topic, b"forged"))
                assert r.code == Resp.NO_PERMISSION, topic


@pytest.mark.timeout(20)
async def test_a_timer_message_due_past_the_max_delay_is_refused(tmp_path: Path) -> None:
    """timerMaxDelaySec (3 days by default, as RocketMQ's): a timer message due later is
    refused MESSAGE_ILLEGAL and nothing is stored; one due within it is taken."""
    async with special_cluster(tmp_path, timer_max_delay_sec=60) as env:
        await create_topic(env.namesrv, "FarT", queues=1)
        from test_broker import send_cmd

        async with RemotingClient() as c:
            far = {
                "TIMER_DELAY_SEC": "61",
                "TIMER_DELAY_MS": "61000",
                "TIMER_DELIVER_MS": str(int(time.time() * 1000) + 3_600_000),
            }
            for key, value in far.items():
                r = await c.invoke(env.addr, send_cmd("FarT", b"too far", extra={key: value}))
                assert r.code == Resp.MESSAGE_ILLEGAL, (key, r.code, r.remark)
                assert "max delay 60000ms" in (r.remark or ""), r.remark
            # a timer that is not a number is refused too (it was delivered at once)
            for key in ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS"):
                r = await c.invoke(env.addr, send_cmd("FarT", b"nan", extra={key: "abc"}))
                assert r.code == Resp.MESSAGE_ILLEGAL, (key, r.code, r.remark)
                assert "is not a number" in (r.remark or ""), r.remark
            near = send_cmd("FarT", b"near", extra={"TIMER_DELAY_SEC": "59"})
            r = await c.invoke(env.addr, near)
            assert r.code == Resp.SUCCESS, r.remark
        # only the near one was stored (parked on a delay level's queue)
        native = env.broker.store.native
        assert sum(native.queue_max_offset(SCHEDULE_TOPIC, q) for q in range(18)) == 1
    with pytest.raises(ConfigError, match="timerMaxDelaySec"):
        from rmq_ha.config import BrokerConfig, replace_keys

        replace_keys(BrokerConfig(), {"timerMaxDelaySec": "0"})


def test_a_store_time_ahead_of_the_clock_is_delivered_now_not_never() -> None:
    """After the clock stepped back (or the broker once ran with it ahead), a message's store
    time is in the future. It was due at now + delay on every look, i.e. never; RocketMQ's
    correctDeliverTimestamp delivers it at once. Normal messages wait their level."""
    now = 1_800_000_000_000
    assert deliver_at(now - 2_000, 5_000, now) == now + 3_000  # waiting its level
    assert deliver_at(now - 9_000, 5_000, now) == now - 4_000  # overdue: at once
    assert deliver_at(now + 600_000, 5_000, now) == now  # stored ahead of the clock
    assert deliver_at(now, 5_000, now) == now + 5_000  # stored just now: the full delay


@pytest.mark.timeout(40)
@pytest.mark.parametrize("stored", [1000, 2**63 - 1])
async def test_progress_past_the_schedule_queues_end_goes_back_to_it(
    tmp_path: Path, stored: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Storage probe 3: delayOffset.json holding an offset past the schedule queue's end (a
    hand edit, damage that still parses, or a log cut since it was saved) left that level
    waiting for offsets the queue never reached: every delayed message sent after it was
    acknowledged and never delivered. The level goes back to the queue's end with a WARNING
    (RocketMQ's correctDelayOffset), and delivers."""
    async with special_cluster(tmp_path, message_delay_level="300ms 1s") as env:
        await create_topic(env.namesrv, "PastT", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            await p.send("PastT", "before", properties={"DELAY": "1"})
            await wait_arrival(env, "PastT", 1, 5)
        await env.stop_broker()
        path = env.cfg.store_root / "config" / "delayOffset.json"
        path.write_text(json.dumps({"offsetTable": {"1": stored}}))  # unsealed, as by hand
        path.with_name(path.name + ".bak").unlink(missing_ok=True)
        await env.start_broker()
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(3):
                await p.send("PastT", f"after{i}", properties={"DELAY": "1"})
        await wait_arrival(env, "PastT", 4, 10)
        assert env.broker.special.delay.offsets.table[1] == env.max_offset(SCHEDULE_TOPIC, 0)
        assert any("past the end" in r.getMessage() for r in caplog.records)
