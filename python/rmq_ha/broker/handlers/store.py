"""The store's health and self-repair requests (issue 15):

* RMQHA_STORE_HEALTH (ours): the storage services' view as JSON: the store's counters and
  offsets, the quarantine list, what the last open found (cuts, quarantines, rebuilt consume
  queues) and the broker's damage and retention counters (`rmq-ha admin store-health`).
* RMQHA_READ_COMMITLOG (ours): exact commitlog bytes for a replica repairing a quarantined
  range. Answered only when every byte is held and none is quarantined here; the asking store
  checks them again (CRCs, positions, sizes, queue) before writing them back.
* DELETE_EXPIRED_COMMITLOG (329, RocketMQ's `deleteExpiredCommitLog`): a retention round now,
  whatever the hour (the usual rules: expired files, never past what replication or dispatch
  needs).
* CLEAN_EXPIRED_CONSUMEQUEUE (306, RocketMQ's `cleanExpiredCQ`): deleted topics' emptied
  consume queues are retired now (closed, files deleted; the store does it at every
  checkpoint anyway, docs/operations.md) by a checkpoint.
* CLEAN_UNUSED_TOPIC (316, RocketMQ's `cleanUnusedTopic`): on a master, the messages of every
  topic the store holds that has no topic config (and is not a system topic) are deleted as
  deleteTopic deletes them (a marker that replicates), and their queues retired. A slave
  answers without doing anything: its master's markers reach it with the log.
"""

from __future__ import annotations

import json
import logging

import trio

from rmq_ha._native import TOPIC_DELETED
from rmq_ha.broker.ports import Ports
from rmq_ha.errors import StoreError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand

#: The largest range one RMQHA_READ_COMMITLOG answers (a quarantined range lies in one segment
#: and is one damaged record or run of bytes; frames stay below the 16 MiB limit).
MAX_READ_BYTES = 8 << 20

log = logging.getLogger(__name__)


def register(d: Dispatcher, p: Ports) -> None:
    async def store_health(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = json.dumps(p.storage.health(), default=str).encode()
        return cmd.response(Resp.SUCCESS, None, None, body)

    async def read_commitlog(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return read_range(p, cmd)

    async def delete_expired(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await p.storage.manual_round()
        return cmd.response(Resp.SUCCESS, None)

    async def clean_expired_cq(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            await trio.to_thread.run_sync(p.store.native.checkpoint)
        except StoreError as e:
            return cmd.response(Resp.SYSTEM_ERROR, f"checkpoint failed: {e}")
        return cmd.response(Resp.SUCCESS, None)

    async def clean_unused_topic(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not p.role.is_master:
            return cmd.response(
                Resp.SUCCESS, "a slave deletes nothing itself: its master's deletions replicate"
            )
        native = p.store.native
        try:
            gone = unused_topics(p)
            for topic in gone:
                marker = native.delete_topic(topic)
                # what deleteTopic drops with a topic (broker/handlers/adminops.delete_topic)
                p.offsets.remove(topic=topic)
                p.traffic.forget(topic=topic)
                p.clients.forget(topic=topic)
                log.info(
                    "cleanUnusedTopic: topic %s has no config: its messages are hidden below"
                    " commitlog offset %d",
                    topic,
                    marker,
                )
            await trio.to_thread.run_sync(native.checkpoint)  # retires the emptied queues
        except StoreError as e:
            return cmd.response(Resp.SYSTEM_ERROR, f"cleanUnusedTopic: {e}")
        return cmd.response(Resp.SUCCESS, f"{len(gone)} unused topics cleaned")

    d.register(RC.RMQHA_STORE_HEALTH, store_health)
    d.register(RC.CLEAN_UNUSED_TOPIC, clean_unused_topic)
    d.register(RC.CLEAN_EXPIRED_CONSUMEQUEUE, clean_expired_cq)
    d.register(RC.RMQHA_READ_COMMITLOG, read_commitlog)
    d.register(RC.DELETE_EXPIRED_COMMITLOG, delete_expired)


def unused_topics(p: Ports) -> list[str]:
    """Topics with messages still readable in the store and no topic config: not a system
    topic or one of the broker's own, not the store's deletion markers."""
    native = p.store.native
    out = set()
    for topic, qid in native.queues():
        if qid < 0 or topic == TOPIC_DELETED or topic in out:
            continue
        if p.topics.get(topic) is not None or p.topics.protected(topic):
            continue
        if native.queue_max_offset(topic, qid) > native.queue_min_offset(topic, qid):
            out.add(topic)
    return sorted(out)


def read_range(p: Ports, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext_fields or {}
    try:
        offset, size = int(ext["offset"]), int(ext["size"])
    except (KeyError, ValueError):
        return cmd.response(Resp.SYSTEM_ERROR, "offset and size (integers) are required")
    if offset < 0 or not 0 < size <= MAX_READ_BYTES:
        return cmd.response(
            Resp.SYSTEM_ERROR, f"bad range: offset {offset}, size {size} (1..{MAX_READ_BYTES})"
        )
    try:
        buf = p.store.native.read_range(offset, size, offset + size)
    except StoreError as e:  # quarantined here too, deleted, or past the end
        return cmd.response(Resp.SYSTEM_ERROR, f"not held intact: {e}")
    if len(buf) != size:
        return cmd.response(
            Resp.SYSTEM_ERROR, f"only {len(buf)} of {size} bytes at {offset} are held here"
        )
    return cmd.response(Resp.SUCCESS, None, None, buf.tobytes())
