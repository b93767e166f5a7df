"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ for orderly consumers. With lockInStrictMode (and no
onlyThisBroker) a queue is locked only when a majority of the group's replicas
(totalReplicas/2+1, this one included) lock it, so while a master hands back to its acting
slave no queue can be held by two consumers at once (RIP-32)."""

from __future__ import annotations

import logging

import trio

from rmq_ha.broker.locks import quorum_locked, strict_lock_forwarded
from rmq_ha.broker.ports import Ports
from rmq_ha.clock import wall_ms as now_ms
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)

log = logging.getLogger(__name__)


def register(d: Dispatcher, p: Ports) -> None:
    async def lock_batch(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = LockBatchRequestBody.from_json(cmd.body or b"{}")
        group, client = req.consumer_group or "", req.client_id or ""
        keys = [(mq.topic, mq.broker_name, mq.queue_id) for mq in req.mq_set]
        got = p.locks.try_lock_batch(group, keys, client, now_ms())
        total = p.cfg.total_replicas
        if got and strict_lock_forwarded(p.cfg.lock_in_strict_mode, req.only_this_broker, total):
            fwd = LockBatchRequestBody(
                consumer_group=group,
                client_id=client,
                only_this_broker=True,
                mq_set={MessageQueue(topic=t, broker_name=b, queue_id=q) for t, b, q in got},
            )
            others = [
                [
                    (mq.topic, mq.broker_name, mq.queue_id)
                    for mq in LockBatchResponseBody.from_json(locked).lock_ok_mq_set
                ]
                for locked in await _on_other_replicas(p, RC.LOCK_BATCH_MQ, fwd.to_json())
            ]
            got = quorum_locked(got, others, total)
        body = LockBatchResponseBody(
            lock_ok_mq_set={MessageQueue(topic=t, broker_name=b, queue_id=q) for t, b, q in got}
        )
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def unlock_batch(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = UnlockBatchRequestBody.from_json(cmd.body or b"{}")
        keys = [(mq.topic, mq.broker_name, mq.queue_id) for mq in req.mq_set]
        p.locks.unlock_batch(req.consumer_group or "", keys, req.client_id or "")
        if p.cfg.lock_in_strict_mode and not req.only_this_broker:
            fwd = UnlockBatchRequestBody(
                consumer_group=req.consumer_group,
                client_id=req.client_id,
                only_this_broker=True,
                mq_set=req.mq_set,
            )
            await _on_other_replicas(p, RC.UNLOCK_BATCH_MQ, fwd.to_json())
        return cmd.response(Resp.SUCCESS)

    d.register(RC.LOCK_BATCH_MQ, lock_batch)
    d.register(RC.UNLOCK_BATCH_MQ, unlock_batch)


async def _on_other_replicas(p: Ports, code: int, body: bytes) -> list[bytes]:
    """Sends a request to every other live replica of the group (1 s each, 2 s in all);
    returns the bodies of the successful answers."""
    others = [a for a in p.role.group_members.values() if a != p.address]
    out: list[bytes] = []

    async def one(addr: str) -> None:
        try:
            r = await p.outbound.invoke(addr, RemotingCommand.request(code, None, body), 1.0)
        except Exception as e:  # an unreachable replica does not count
            log.debug("forward %d to %s failed: %s", code, addr, e)
            return
        if r.code == Resp.SUCCESS:
            out.append(r.body or b"{}")

    with trio.move_on_after(2.0):
        async with trio.open_nursery() as n:
            for addr in others:
                n.start_soon(one, addr)
    return out
