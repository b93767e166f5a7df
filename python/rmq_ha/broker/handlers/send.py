"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36).

Checks in RocketMQ's order: topic name, topic existence (auto-created from the default topic
when allowed), write permission, queue id, message size; then one store append per request
(a batch is one append), a wait for durability when the broker flushes synchronously, and the
response with the offset message id and queue offset. Parked pulls on the queue are woken.
"""

from __future__ import annotations

import logging
import random

import trio

from rmq_ha._native import AppendResult, Message, decode_batch_body, decode_stored_record
from rmq_ha.broker.ports import Ports, SpecialRouting
from rmq_ha.broker.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, check_topic_name
from rmq_ha.config import FlushDiskType
from rmq_ha.errors import MessageIllegalError, RemotingDecodeError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageResponseHeader,
    parse_send_message_header,
)
from rmq_ha.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_WAIT,
    decode_properties,
    encode_properties,
    offset_msg_id,
)
from rmq_ha.protocol.perm import is_writeable

log = logging.getLogger(__name__)

DEFAULT_MAX_RECONSUME_TIMES = 16


def register(d: Dispatcher, p: Ports, special: SpecialRouting) -> None:
    async def send(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await send_message(p, special, conn, cmd)

    async def send_back(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await consumer_send_msg_back(p, special, cmd)

    for code in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
        d.register(code, send)
    d.register(RC.CONSUMER_SEND_MSG_BACK, send_back)


async def send_message(
    p: Ports, special: SpecialRouting, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = parse_send_message_header(cmd.code, cmd.ext_fields)
    if not is_writeable(p.cfg.broker_permission):
        return cmd.response(
            Resp.NO_PERMISSION, f"the broker {p.cfg.broker_name} sending message is forbidden"
        )
    why = check_topic_name(h.topic)
    if why is not None:
        return cmd.response(Resp.SYSTEM_ERROR, why)
    if special.not_allowed_send(h.topic, h.producer_group):
        return cmd.response(
            Resp.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden."
        )
    tc = p.topics.for_write(h.topic, h.default_topic, h.default_topic_queue_nums)
    if tc is None:
        return cmd.response(
            Resp.TOPIC_NOT_EXIST,
            f"topic[{h.topic}] not exist, apply first please!",
        )
    if not is_writeable(tc.perm):
        return cmd.response(
            Resp.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden"
        )
    queue_id = h.queue_id
    if queue_id < 0:
        queue_id = random.randrange(tc.write_queue_nums)
    if queue_id >= tc.write_queue_nums:
        return cmd.response(
            Resp.SYSTEM_ERROR,
            f"request queueId[{queue_id}] is illegal, topic {h.topic} has "
            f"{tc.write_queue_nums} write queues",
        )
    body = cmd.body or b""
    props = (h.properties or "").encode()
    is_batch = cmd.code == RC.SEND_BATCH_MESSAGE or bool(h.batch)
    topic, store_qid, sys_flag = h.topic, queue_id, h.sys_flag
    if not is_batch and special.may_route(props):
        # Transaction halves and delayed/timer messages are stored on system topics first.
        topic, store_qid, props, sys_flag = special.route_send(topic, queue_id, props, sys_flag)
    try:
        entries = decode_batch_body(body) if is_batch else [(h.flag, body, props)]
    except RemotingDecodeError as e:
        return cmd.response(Resp.MESSAGE_ILLEGAL, f"the batch body does not decode: {e}")
    if not entries:
        return cmd.response(Resp.MESSAGE_ILLEGAL, "the batch is empty")
    sizes = [len(b) for _, b, _ in entries]
    for _, b, prop in entries:
        if len(b) > p.cfg.max_message_size:
            return cmd.response(
                Resp.MESSAGE_ILLEGAL,
                f"the message body size over max value, MAX: {p.cfg.max_message_size}",
            )
        if len(prop) > 32767:
            return cmd.response(Resp.MESSAGE_ILLEGAL, "the message properties are too long")
    msgs = [
        Message(
            topic,
            store_qid,
            b,
            prop,
            flag=f,
            sys_flag=sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=conn.peer,
            reconsume_times=h.reconsume_times or 0,
        )
        for f, b, prop in entries
    ]
    resp = await append_and_respond(p, cmd, msgs, wait=_wants_wait(props))
    if resp.ext_fields and "queueId" in resp.ext_fields:
        # Stored (whatever replication answered): counted once per request, by the topic the
        # producer named.
        mtype = _message_type(topic, h.topic)
        p.traffic.put(h.topic, mtype, len(msgs), sum(sizes))
        p.traffic.sized(h.topic, mtype, sizes)
        if store_qid != queue_id:
            resp.ext_fields["queueId"] = str(queue_id)  # RocketMQ answers the requested queue
        uniq = _uniq_key(props) if not is_batch else None
        if uniq:
            # SendMessageProcessor answers the UNIQ_KEY as transactionId (a transactional
            # producer reports it as the transaction id).
            resp.ext_fields["transactionId"] = uniq
    return resp


def _message_type(stored_topic: str, topic: str) -> str:
    """RocketMQ's message_type label: a send the special services routed to a system topic
    is a transaction half or a delayed message; FIFO is not told apart from Normal."""
    if stored_topic == topic:
        return "Normal"
    return "Transaction" if "TRANS" in stored_topic.upper() else "Delay"


def _uniq_key(props: bytes) -> str | None:
    """The UNIQ_KEY property without decoding every property (this runs on every send)."""
    key = b"UNIQ_KEY\x01"
    i = props.find(key)
    if i < 0 or (i > 0 and props[i - 1] != 2):
        return None
    j = props.find(b"\x02", i)
    return props[i + len(key) : j if j >= 0 else len(props)].decode("utf-8", "replace")


def _wants_wait(props: bytes) -> bool:
    return decode_properties(props).get(PROPERTY_WAIT, "true").lower() != "false"


async def append_and_respond(
    p: Ports, cmd: RemotingCommand, msgs: list[Message], *, wait: bool
) -> RemotingCommand:
    refused = _refuse_write(p, cmd)
    if refused is not None:
        return refused
    try:
        placed = p.store.append_batch(msgs)
    except MessageIllegalError as e:
        return cmd.response(Resp.MESSAGE_ILLEGAL, str(e))
    p.replication.after_append()
    topic, queue_id = msgs[0].topic, msgs[0].queue_id
    p.hold.notify(topic, queue_id, p.store.native.queue_max_offset(topic, queue_id))
    if wait and p.cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        with trio.move_on_after(p.cfg.sync_flush_timeout_ms / 1000) as scope:
            await p.store.wait_durable(placed.end_offset)
        if scope.cancelled_caught:
            # Written but not yet durable: RocketMQ answers FLUSH_DISK_TIMEOUT, which the
            # client treats as a send that may or may not survive a crash.
            return _send_response(p, cmd, placed, queue_id, Resp.FLUSH_DISK_TIMEOUT)
    if wait:
        outcome = await p.replication.wait_replicated(placed.end_offset)
        if not outcome.ok:
            # Stored here but not (yet) on enough replicas: the client must treat the send as
            # possibly lost on a failover, exactly as RocketMQ reports it.
            code = (
                Resp.SLAVE_NOT_AVAILABLE
                if outcome.reason == "no-slave"
                else (Resp.FLUSH_SLAVE_TIMEOUT)
            )
            return _send_response(p, cmd, placed, queue_id, code)
    return _send_response(p, cmd, placed, queue_id, Resp.SUCCESS)


#: How the role's refusal of a write reaches the client (RocketMQ's answers).
_REFUSAL_CODES = {
    "fenced": Resp.SERVICE_NOT_AVAILABLE,
    "slave": Resp.SERVICE_NOT_AVAILABLE,
    "disk-full": Resp.SERVICE_NOT_AVAILABLE,  # RocketMQ: the store is not writeable
    "in-sync": Resp.SYSTEM_ERROR,  # IN_SYNC_REPLICAS_NOT_ENOUGH, as the client sees it
}


def _refuse_write(p: Ports, cmd: RemotingCommand) -> RemotingCommand | None:
    """Writes only on a serving master; and, with replication, only with at least
    minInSyncReplicas in sync (refused, never half-done)."""
    refusal = p.role.write_refusal()
    if refusal is None:
        return None
    kind, remark = refusal
    return cmd.response(_REFUSAL_CODES[kind], remark)


def _send_response(
    p: Ports, cmd: RemotingCommand, placed: AppendResult, queue_id: int, code: int
) -> RemotingCommand:
    host, port = p.store_host
    offsets = placed.physical_offsets()
    queue_offsets = placed.queue_offsets()
    msg_id = ",".join(offset_msg_id(host, port, o) for o in offsets)
    rh = SendMessageResponseHeader(msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offsets[0])
    ext = rh.to_ext()
    ext["MSG_REGION"] = "DefaultRegion"
    ext["TRACE_ON"] = "true"
    return cmd.response(code, None, ext)


async def consumer_send_msg_back(
    p: Ports, special: SpecialRouting, cmd: RemotingCommand
) -> RemotingCommand:
    """A consumer failed a message: re-store it on the group's retry topic, or on its
    dead-letter topic once it has been retried maxReconsumeTimes (or when delayLevel < 0).
    A retry waits its delay level (the consumer's, else 3 + reconsumeTimes, as RocketMQ) on
    the schedule topic (broker/special/delay.py)."""
    h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
    try:
        buf = p.store.native.read_record(h.offset)
    except Exception as e:  # out of range or not a record: nothing to send back
        return cmd.response(Resp.SYSTEM_ERROR, f"look message by offset failed, {h.offset}: {e}")
    orig = decode_stored_record(buf.tobytes())
    props = decode_properties(orig["properties"])  # type: ignore[arg-type]
    orig_topic = str(orig["topic"])
    reconsume = int(orig["reconsume_times"]) + 1  # type: ignore[call-overload]
    max_times = (
        h.max_reconsume_times if h.max_reconsume_times is not None else DEFAULT_MAX_RECONSUME_TIMES
    )
    if not orig_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        # Consumers read the original topic back from this property.
        props[PROPERTY_RETRY_TOPIC] = orig_topic
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, h.origin_msg_id or "")
    dead = reconsume > max_times or h.delay_level < 0
    if dead:
        topic = DLQ_GROUP_TOPIC_PREFIX + h.group
        p.topics.system(topic)
        p.topics.changed()
        props.pop(PROPERTY_DELAY, None)
    else:
        topic = RETRY_GROUP_TOPIC_PREFIX + h.group
        p.topics.system(topic)
        level = h.delay_level if h.delay_level > 0 else 3 + reconsume - 1  # 3 + orig's
        props[PROPERTY_DELAY] = str(level)
    store_topic, store_qid, store_props, _ = special.route_send(
        topic, 0, encode_properties(props).encode(), 0
    )
    msg = Message(
        store_topic,
        store_qid,
        orig["body"],  # type: ignore[arg-type]
        store_props,
        flag=int(orig["flag"]),  # type: ignore[call-overload]
        sys_flag=int(orig["sys_flag"]) & ~0xC,  # type: ignore[call-overload]
        born_timestamp=int(orig["born_timestamp"]),  # type: ignore[call-overload]
        born_host=str(orig["born_host"]),
        reconsume_times=reconsume,
    )
    resp = await append_and_respond(p, cmd, [msg], wait=True)
    if dead and resp.ext_fields and "queueId" in resp.ext_fields:  # stored
        p.traffic.dead_letter(props.get(PROPERTY_RETRY_TOPIC, orig_topic), h.group)
    # The retry's answer carries no message id; RocketMQ answers plain SUCCESS.
    return cmd.response(resp.code, resp.remark)
