"""The special-service frame (broker/special/services.py): services stop cleanly (no task left,
progress saved) and start again, do nothing while stopped, and write only through the
escape, so a bridge to another master can replace the local store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from rmq_ha.broker.special.base import InnerMessage, LocalEscape, PutResult
from rmq_ha.broker.special.delay import SCHEDULE_TOPIC
from rmq_ha.client import PopConsumer, Producer
from rmq_ha.protocol.codes import ResponseCode as Resp
from specialutil import eventually, special_cluster
from test_client_cluster import FAST_CONSUMER, FAST_PRODUCER, create_topic

pytestmark = pytest.mark.timeout(60)


def special_tasks() -> list[str]:
    """Names of the living tasks running code of broker/special (walks the task tree)."""
    out: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        code = getattr(task.coro, "cr_code", None)
        if code is not None and "broker/special/" in code.co_filename.replace("\\", "/"):
            out.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return sorted(out)


@pytest.mark.timeout(30)
async def test_services_stop_cleanly_and_start_again(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, message_delay_level="300ms 1s") as env:
        special = env.broker.special
        assert special.running and all(s.running for s in special.services)
        await create_topic(env.namesrv, "SvcT", queues=1)
        running = special_tasks()
        # Each service's own task, 2 level scanners + the offset flusher, the transaction
        # checker, the reviver.
        assert len(running) == 3 + 2 + 1 + 1 + 1, running
        await special.stop()
        assert not special.running
        assert special_tasks() == []
        await special.stop()  # stopping twice is harmless
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            await p.send("SvcT", b"while-stopped", properties={"DELAY": "1"})
            await trio.sleep(0.8)  # time passes: it is due, but nobody scans (stopped)
            assert env.max_offset("SvcT") == 0 and env.max_offset(SCHEDULE_TOPIC, 0) == 1
            await special.change_status(True, env.nursery)
            await special.start(env.nursery)  # starting twice is harmless
            assert special_tasks() == running
            await eventually(lambda: env.max_offset("SvcT") == 1, 5)
        # Stop persisted the progress; a stop/start cycle under load delivers each once.
        await special.stop()
        saved = (env.cfg.store_root / "config" / "delayOffset.json").read_bytes()
        assert b'"1": 1' in saved
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(20):
                await p.send("SvcT", f"x{i}", properties={"DELAY": "1"})
                if i % 5 == 0:
                    await special.start(env.nursery)
                elif i % 5 == 3:
                    await special.stop()
            await special.start(env.nursery)
            await eventually(lambda: env.max_offset("SvcT") == 21, 10)
            # Level 1 looked at twice more: nothing delivered a second time.
            scans = special.delay.scans.get(1, 0)
            await eventually(lambda: special.delay.scans.get(1, 0) >= scans + 2, 10)
            assert env.max_offset("SvcT") == 21


class RecordingEscape:
    """Stands in for the acting-master escape bridge: records, writes nothing."""

    def __init__(self) -> None:
        self.puts: list[list[InnerMessage]] = []
        self.refuse = False

    async def put(self, msgs: Sequence[InnerMessage]) -> PutResult:
        if self.refuse:
            return PutResult(Resp.SERVICE_NOT_AVAILABLE, "no master to escape to")
        self.puts.append(list(msgs))
        n = len(self.puts)
        return PutResult(Resp.SUCCESS, None, tuple(range(n, n + len(msgs))), (0,) * len(msgs))


@pytest.mark.timeout(30)
async def test_service_output_goes_only_through_the_escape(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, message_delay_level="200ms") as env:
        special = env.broker.special
        await create_topic(env.namesrv, "EscT", queues=1)
        escape = RecordingEscape()
        escape.refuse = True
        special.escape = escape
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            await p.send("EscT", b"escaped", properties={"DELAY": "1"})
        # Refused: the level keeps its place and tries again.
        await eventually(lambda: special.delay.refused >= 2, 10)
        assert special.delay.offsets.get(1) == 0 and not escape.puts
        escape.refuse = False
        await eventually(lambda: len(escape.puts) == 1, 5)
        [[msg]] = escape.puts
        assert (msg.topic, msg.queue_id, msg.body) == ("EscT", 0, b"escaped")
        assert "DELAY" not in msg.properties
        assert env.max_offset("EscT") == 0  # never written locally
        # Pop checkpoints go the same way: popping with no master to escape to fails.
        escape.refuse = True
        special.escape = escape
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            await p.send("EscT", b"to-pop")
        async with PopConsumer("ecg", env.namesrv, ["EscT"], config=FAST_CONSUMER) as c:
            from rmq_ha.client import BrokerResponseError

            with pytest.raises(BrokerResponseError) as e:
                await c.pop("EscT")
            assert e.value.code == Resp.SERVICE_NOT_AVAILABLE
            special.escape = LocalEscape(env.broker.ports)
            r = await c.pop("EscT")
            assert [m.body for m in r.messages] == [b"to-pop"]
