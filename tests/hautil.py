"""Helpers for the broker-HA tests on top of `rmq_jepsen.bench.cluster` (real processes on
loopback): sending values and reading every queue back."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio
from rmq_jepsen.bench.cluster import FAST_BROKER, HaCluster
from rmq_jepsen.launch import RMQ_HA, Proc

from rmq_ha.client import Admin, ClientConfig, Producer, ProducerConfig, PullConsumer
from rmq_ha.client.errors import ClientError
from rmq_ha.errors import RemotingError
from rmq_ha.protocol.models import MessageQueue

__all__ = ["FAST_BROKER", "RMQ_HA", "Acked", "HaCluster", "Proc", "read_all", "send_values"]


@dataclass
class Acked:
    """Sends acknowledged with SEND_OK, by value."""

    values: dict[str, tuple[int, int]] = field(default_factory=dict)  # body -> (queue, offset)


async def send_values(
    namesrv: str, topic: str, values: list[str], acked: Acked, *, timeout_s: float = 3.0
) -> list[str]:
    """Sends each value once (no retry); returns the values not acknowledged with SEND_OK."""
    failed: list[str] = []
    cfg = ProducerConfig(
        client=ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.5),
        send_msg_timeout_s=timeout_s,
        retry_times_when_send_failed=0,
    )
    async with Producer("ha-test-producer", namesrv, config=cfg) as p:
        for v in values:
            try:
                r = await p.send(topic, v.encode())
            except ClientError:
                failed.append(v)
                continue
            if r.status.name == "SEND_OK":
                acked.values[v] = (r.queue.queue_id, r.queue_offset)
            else:
                failed.append(v)
    return failed


async def read_all(namesrv: str, topic: str, timeout_s: float = 15.0) -> list[str]:
    """Every message of every queue of `topic`, from each queue's minimum to maximum; retried
    while the name servers still route to a broker that just died."""
    with trio.fail_after(timeout_s):
        while True:
            try:
                return await _read_all(namesrv, topic)
            except (ClientError, RemotingError):
                await trio.sleep(0.3)


async def _read_all(namesrv: str, topic: str) -> list[str]:
    out: list[str] = []
    cc = ClientConfig(client_ip="127.0.0.1")
    async with (
        Admin(namesrv, config=cc) as admin,
        PullConsumer("ha-test-drain", namesrv, config=cc) as pc,
    ):
        route = await admin.route(topic)
        for qd in route.queue_datas:
            for q in range(qd.read_queue_nums):
                mq = MessageQueue(topic=topic, broker_name=qd.broker_name, queue_id=q)
                off = await admin.min_offset(mq)
                hi = await admin.max_offset(mq)
                while off < hi:
                    res = await pc.pull(mq, "*", off, 32)
                    for m in res.messages:
                        out.append(m.body.decode())
                    if res.next_begin_offset <= off:
                        break
                    off = res.next_begin_offset
    return out
