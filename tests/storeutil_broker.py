"""Helpers for the broker-side store tests (issue 15): sending values, reading queues with the
Python client, damaging a stopped broker's commitlog, and the store-health request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmq_ha.client import ClientConfig, MessageQueue, Producer, ProducerConfig, PullConsumer
from rmq_ha.client.api import PullStatus
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand

CC = ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.5)
PC = ProducerConfig(client=CC, send_msg_timeout_s=3.0, retry_times_when_send_failed=0)
#: Header bytes before the body of an IPv4 record (docs/store.md): a byte at +120 is in a
#: 200-byte body.
BODY_BYTE = 120


def body(i: int) -> bytes:
    return f"v{i:06d}".encode().ljust(200, b".")


async def create_topic(namesrv: str, broker_addr: str, topic: str) -> None:
    """A one-queue topic on one broker (every value goes to queue 0)."""
    from rmq_ha.client import Admin

    async with Admin(namesrv, config=CC) as admin:
        await admin.create_topic(topic, broker_addr=broker_addr, queue_nums=1, wait_for_route_s=10)


async def send_all(namesrv: str, topic: str, n: int, first: int = 0) -> list[int]:
    """Sends values first..first+n-1 (200 bytes each); returns their queue offsets, all
    acknowledged with SEND_OK."""
    from rmq_ha.client import SendStatus

    offs = []
    async with Producer("store-test-producer", namesrv, config=PC) as p:
        for i in range(first, first + n):
            r = await p.send(topic, body(i))
            assert r.status is SendStatus.SEND_OK, r
            offs.append(r.queue_offset)
    return offs


async def read_queue(
    namesrv: str, broker: str, topic: str, queue_id: int = 0, start: int = 0
) -> tuple[list[bytes], list[tuple[str, int]]]:
    """Every message of a queue from `start` to its max, and each pull's (status, next)."""
    out: list[bytes] = []
    answers: list[tuple[str, int]] = []
    async with PullConsumer("store-test-drain", namesrv, config=CC) as pc:
        mq = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
        off = start
        for _ in range(10_000):
            res = await pc.pull(mq, "*", off, 32)
            answers.append((res.status.name, res.next_begin_offset))
            out += [m.body for m in res.messages]
            if res.status is PullStatus.NO_NEW_MSG or res.next_begin_offset == off:
                break
            off = res.next_begin_offset
    return out, answers


def flip(store_root: Path, phys: int, segment_size: int, at: int = BODY_BYTE) -> None:
    """Flips one byte of the commitlog record at physical offset `phys`."""
    seg = phys - phys % segment_size
    path = store_root / "commitlog" / f"{seg:020d}"
    with open(path, "r+b") as f:
        f.seek(phys - seg + at)
        b = f.read(1)
        f.seek(phys - seg + at)
        f.write(bytes([b[0] ^ 0x5A]))


async def store_health(addr: str) -> dict[str, Any]:
    async with RemotingClient() as c:
        r = await c.invoke(addr, RemotingCommand.request(RC.RMQHA_STORE_HEALTH), 5.0)
    assert r.code == 0 and r.body, (r.code, r.remark)
    out: dict[str, Any] = json.loads(r.body)
    return out


async def delete_expired(addr: str) -> None:
    async with RemotingClient() as c:
        r = await c.invoke(addr, RemotingCommand.request(RC.DELETE_EXPIRED_COMMITLOG), 30.0)
    assert r.code == 0, (r.code, r.remark)
