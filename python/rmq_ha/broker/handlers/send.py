"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36).

Checks in RocketMQ's order: topic name, topic existence (auto-created from the default topic
when allowed), write permission, queue id, message size; then one store append per request
(a batch is one append), a wait for durability when the broker flushes synchronously, and the
response with the offset message id and queue offset. Parked pulls on the queue are woken.

`NativeSends` is the native send path in front of all this (issue 16): one native call per
received buffer (`_native.SendPath.process`) answers the ordinary sends of a plain writable
master with no wait (ASYNC_FLUSH, no replication wait, no ACL) with the same checks, codes,
remarks and response fields as `send_message`, and hands every other frame back to the
dispatcher, which runs them here.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from rmq_ha._native import (
    AppendResult,
    Message,
    SendPath,
    decode_batch_body,
    decode_stored_record,
    stamp_properties,
)
from rmq_ha.broker.metrics import MESSAGE_SIZE_BUCKETS
from rmq_ha.broker.ports import (
    ANNOUNCE_TIMEOUT_S,
    Ports,
    ReplicationOutcomeLike,
    SpecialRouting,
)
from rmq_ha.broker.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, check_topic_name
from rmq_ha.clock import wall_ms as now_ms
from rmq_ha.config import FlushDiskType
from rmq_ha.errors import (
    ConfigError,
    MessageIllegalError,
    RemotingClosedError,
    RemotingDecodeError,
    RemotingError,
    StoreError,
    StoreIOError,
)
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand, WireTuple
from rmq_ha.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
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

#: Environment switch of the native send path: "1" (default) or "0" (every send in Python).
NATIVE_SEND_ENV = "RMQ_HA_NATIVE_SEND"


def native_send_wanted() -> bool:
    v = os.environ.get(NATIVE_SEND_ENV, "1")
    if v not in ("0", "1"):
        raise ConfigError(
            f"bad config {NATIVE_SEND_ENV}={v!r}: expected 0 (off) or 1 (on)", NATIVE_SEND_ENV
        )
    return v == "1"


class NativeSends:
    """The native send path as a connection's frame filter (net/connection.FrameFilter).

    `config_allows` is what the wiring decides once (no ACL guard). `defer`: the broker waits
    before answering a stored send (SYNC_FLUSH, SYNC_MASTER, controller mode), so the native
    call only appends those and hands their SEND_OK back; a task per such send waits as
    `append_and_respond` does (`wait_outcome`: group commit, the ack watermark) and sends it
    with the code the wait decides (a task runs in the broker's nursery: a failure is answered
    SYSTEM_ERROR and logged, as the connection does for a handler). Per received buffer,
    before the native call, the role decides (`write_refusal`: fenced, slave or acting slave,
    disk full, too few in-sync replicas; the FMQ data-plane fence; brokerPermission) — a few
    attribute reads, not a look at the messages. The topic table the native side checks is refreshed
    when the topic manager's data version changes; it holds only topics a producer may send
    to as ordinary messages (no retry/DLQ or special-service topics, valid names), so every
    other topic — unknown ones too, which may be auto-created — is Python's.

    After a native call that stored messages: one `after_append` (HA wake-up, LogGrew), one
    wake-up of parked pulls per queue, and the traffic metrics in one update per topic."""

    def __init__(
        self,
        p: Ports,
        special: SpecialRouting,
        *,
        config_allows: bool,
        defer: bool = False,
        spawn: Callable[[Callable[..., Awaitable[None]], Any], None] | None = None,
        on_request: Callable[[Connection], None] = lambda conn: None,
        judge: Callable[[], None] | None = None,
    ) -> None:
        host, port = p.store_host
        self.native = SendPath(
            p.store.native,
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            max_message_size=p.cfg.max_message_size,
            size_buckets=list(MESSAGE_SIZE_BUCKETS),
            cluster=p.cfg.cluster_name,
        )
        self.config_allows = config_allows
        if defer and spawn is None:
            raise ValueError("NativeSends: defer needs spawn (a task per waiting send)")
        self.defer = defer
        self._spawn = spawn
        self._p = p
        self._special = special
        self._on_request = on_request
        #: Run before each buffer's gate (the wiring's: the FMQ fence decided at the
        #: request's time, as `Broker._on_request` does before a fenced code).
        self._judge = judge
        self._seen: tuple[object, int] | None = None
        self._cfg = p.cfg

    def _refresh(self) -> None:
        p = self._p
        topics = p.topics
        seen = (topics.data_version, len(topics.table))
        if self._seen is None or seen[0] is not self._seen[0] or seen[1] != self._seen[1]:
            self._seen = seen
            self.native.set_topics(
                [
                    (name, tc.write_queue_nums, tc.read_queue_nums, tc.perm)
                    for name, tc in topics.table.items()
                    if not name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
                    and check_topic_name(name) is None
                    and not self._special.not_allowed_send(name, "")
                ]
            )
        if p.cfg is not self._cfg:
            self._cfg = p.cfg
            self.native.set_max_message_size(p.cfg.max_message_size)

    def enabled(self) -> bool:
        p = self._p
        if self._judge is not None:
            self._judge()
        return (
            self.config_allows
            and is_writeable(p.cfg.broker_permission)
            and not p.role.data_plane_fenced
            and p.role.write_refusal() is None
        )

    def __call__(
        self, conn: Connection, buf: bytes | bytearray
    ) -> tuple[list[WireTuple], int, bytes | None]:
        started = time.perf_counter()
        self._refresh()
        frames, used, out, touched, topics, answered, _end, deferred = self.native.process(
            buf, conn.peer, self.enabled(), defer=self.defer
        )
        if answered or deferred:
            self._after(conn, touched, topics, answered, started)
            if deferred:
                assert self._spawn is not None
                no_flush_wait = self._p.cfg.flush_disk_type is not FlushDiskType.SYNC_FLUSH
                for t, end_offset, wait, request in deferred:
                    if not no_flush_wait:
                        self._spawn(self._finish, (conn, t, end_offset, wait, request, started))
                    elif not wait:
                        self._answer(conn, t, request, started, Resp.SUCCESS)
                    else:
                        # No task per send: answered when replication settles, with the
                        # others its acks release (issue 16).
                        answer = functools.partial(
                            self._answer_replicated, conn, t, request, started
                        )
                        self._p.replication.when_replicated(end_offset, answer)
        return frames, used, out

    def _answer_replicated(
        self,
        conn: Connection,
        t: WireTuple,
        request: int,
        started: float,
        outcome: ReplicationOutcomeLike,
    ) -> None:
        self._answer(conn, t, request, started, replication_code(outcome))

    def _answer(
        self, conn: Connection, t: WireTuple, request: int, started: float, code: int
    ) -> None:
        resp = RemotingCommand.from_wire(t)
        resp.code = code
        self._p.traffic.answered(request, code, (time.perf_counter() - started) * 1000)
        if not conn.send_nowait(resp) and not conn.closed:
            assert self._spawn is not None
            self._spawn(_send_later, (conn, resp))

    async def _finish(self, args: tuple[Connection, WireTuple, int, bool, int, float]) -> None:
        conn, t, end_offset, wait, request, started = args
        p = self._p
        resp = RemotingCommand.from_wire(t)
        try:
            resp.code = await wait_outcome(p, end_offset, wait)
        except Exception as e:  # answered as the connection answers a failed handler
            log.exception("waiting for a native send (opaque %d) failed", resp.opaque)
            resp.code, resp.ext_fields = Resp.SYSTEM_ERROR, {}
            resp.remark = f"{type(e).__name__}: {e}"
        p.traffic.answered(request, resp.code, (time.perf_counter() - started) * 1000)
        try:
            await conn.send(resp)
        except RemotingClosedError:
            pass

    def _after(
        self,
        conn: Connection,
        touched: list[tuple[str, int]],
        topics: list[tuple[str, int, int, list[int]]],
        answered: list[tuple[int, int, int]],
        started: float,
    ) -> None:
        p = self._p
        self._on_request(conn)
        if touched:
            p.replication.after_append()
            native = p.store.native
            for topic, qid in touched:
                p.hold.notify(topic, qid, native.queue_max_offset(topic, qid))
        for topic, n, nbytes, counts in topics:
            p.traffic.put(topic, "Normal", n, nbytes)
            p.traffic.sized_counts(topic, "Normal", counts, nbytes)
        ms = (time.perf_counter() - started) * 1000
        for req, resp, n in answered:
            p.traffic.answered_many(req, resp, ms, n)


def register(d: Dispatcher, p: Ports, special: SpecialRouting) -> None:
    async def send(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await send_message(p, special, conn, cmd)

    async def send_back(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await consumer_send_msg_back(p, special, cmd)

    async def reply(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await send_reply(p, special, conn, cmd)

    for code in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
        d.register(code, send)
    d.register(RC.CONSUMER_SEND_MSG_BACK, send_back)
    d.register(RC.SEND_REPLY_MESSAGE, reply)
    d.register(RC.SEND_REPLY_MESSAGE_V2, reply)


#: How long the requester has to take a pushed reply (RocketMQ's Broker2Client.callClient).
PUSH_REPLY_TIMEOUT_S = 10.0
PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"


async def send_reply(
    p: Ports, special: SpecialRouting, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """SEND_REPLY_MESSAGE / _V2 (RocketMQ's ReplyMessageProcessor): a consumer's answer to a
    request (``DefaultMQProducer.request``). It is pushed to the requesting producer, named
    by the ``REPLY_TO_CLIENT`` property, as PUSH_REPLY_MESSAGE_TO_CLIENT on that producer's
    connection; the answer is SUCCESS once the requester took it, else SYSTEM_ERROR saying
    why. With ``storeReplyMessageEnable`` (the default) it is also stored on its topic
    (``<cluster>_REPLY_TOPIC``); a store failure is logged and the answer stays the push's,
    as RocketMQ answers. System topics producers may not write are refused as for a send."""
    h = parse_send_message_header(cmd.code, cmd.ext_fields)
    queue_id = _write_queue(p, special, cmd, h)
    if isinstance(queue_id, RemotingCommand):
        return queue_id
    body = cmd.body or b""
    if len(body) > p.cfg.max_message_size:
        return cmd.response(
            Resp.MESSAGE_ILLEGAL,
            f"the message body size over max value, MAX: {p.cfg.max_message_size}",
        )
    props = decode_properties(h.properties or "")
    pushed, remark = await _push_reply(p, conn, h, queue_id, props, body)
    code = Resp.SUCCESS if pushed else Resp.SYSTEM_ERROR
    # not stored: RocketMQ answers msgId "0" and queue offset 0
    ext = SendMessageResponseHeader(msg_id="0", queue_id=queue_id, queue_offset=0).to_ext()
    resp = cmd.response(code, None, {**ext, "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    if p.cfg.store_reply_message_enable and _refuse_write(p, cmd) is None:
        msg = Message(
            h.topic,
            queue_id,
            body,
            (h.properties or "").encode(),
            flag=h.flag,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=conn.peer,
            reconsume_times=h.reconsume_times or 0,
        )
        try:
            placed = p.store.append_batch([msg])
        except StoreError as e:
            log.warning("reply message to %s not stored: %s", h.topic, e)
        else:
            p.replication.after_append()
            p.hold.notify(h.topic, queue_id, p.store.native.queue_max_offset(h.topic, queue_id))
            resp = _send_response(p, cmd, placed, queue_id, code)
    if not pushed:
        resp.remark = remark
    return resp


async def _push_reply(
    p: Ports,
    conn: Connection,
    h: SendMessageRequestHeader,
    queue_id: int,
    props: dict[str, str],
    body: bytes,
) -> tuple[bool, str]:
    """(pushed, why not) for a reply: to the requester's connection, as RocketMQ does."""
    sender = props.get(PROPERTY_REPLY_TO_CLIENT)
    if sender is None:
        # RocketMQ logs it too: a reply to a message that was not a request
        log.warning(
            "reply from %s to %s: %s is null, cannot reply",
            conn.peer,
            h.topic,
            PROPERTY_REPLY_TO_CLIENT,
        )
        return False, f"reply message properties[{PROPERTY_REPLY_TO_CLIENT}] is null"
    target = p.clients.producer_by_id(sender)
    if target is None:
        log.warning("reply from %s to %s: requester <%s> not connected", conn.peer, h.topic, sender)
        return False, f"push reply message fail, channel of <{sender}> not found."
    host, port = p.store_host
    props = {**props, PROPERTY_PUSH_REPLY_TIME: str(now_ms())}
    rh = ReplyMessageRequestHeader(
        producer_group=h.producer_group,
        topic=h.topic,
        default_topic=h.default_topic,
        default_topic_queue_nums=h.default_topic_queue_nums,
        queue_id=queue_id,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        flag=h.flag,
        properties=encode_properties(props),
        reconsume_times=h.reconsume_times,
        unit_mode=bool(h.unit_mode),
        born_host=conn.peer,
        store_host=f"{host}:{port}",
        store_timestamp=now_ms(),
    )
    req = RemotingCommand.request(RC.PUSH_REPLY_MESSAGE_TO_CLIENT, rh.to_ext(), body)
    try:
        answer = await target.request(req, PUSH_REPLY_TIMEOUT_S)
    except RemotingError as e:
        log.warning("push reply message to <%s> failed: %s", sender, e)
        return False, f"push reply message to {sender} fail."
    if answer.code != Resp.SUCCESS:
        log.warning("push reply message to <%s> refused: %s", sender, answer.remark)
        return False, f"push reply message to {sender} fail."
    return True, ""


def _write_queue(
    p: Ports, special: SpecialRouting, cmd: RemotingCommand, h: SendMessageRequestHeader
) -> int | RemotingCommand:
    """The queue a send (or a reply) writes to, or the refusal: the topic's name and
    existence (auto-created when allowed), the topic's write permission, the queue id (a
    random one for -1), and the system topics producers may not write.

    A broker without write permission (brokerPermission 4, an operator draining it) refuses
    ordered topics only, as RocketMQ's msgCheck does: producers of the rest stop writing
    there once their route shows it, and the sends still on a cached route are taken."""
    why = check_topic_name(h.topic)
    if why is not None:
        return cmd.response(Resp.SYSTEM_ERROR, why)
    if special.not_allowed_send(h.topic, h.producer_group):
        return cmd.response(
            Resp.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden."
        )
    if not is_writeable(p.cfg.broker_permission):
        known = p.topics.get(h.topic)
        if known is not None and known.order:
            return cmd.response(
                Resp.NO_PERMISSION,
                f"the broker[{p.cfg.broker_name}] sending message is forbidden",
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
    # RocketMQ's msgCheck takes any queue below max(write, read): a producer on a cached
    # route keeps writing while an operator shrinks writeQueueNums (the consumers still read
    # those queues), so its sends are not refused
    limit = max(tc.write_queue_nums, tc.read_queue_nums)
    if queue_id >= limit:
        # INVALID_PARAMETER as RocketMQ 5.5.0 answers (measured); SYSTEM_ERROR is in the
        # producer's retry list, so a send naming a bad queue was retried for nothing
        return cmd.response(
            Resp.INVALID_PARAMETER,
            f"request queueId[{queue_id}] is illegal, topic {h.topic} has "
            f"{tc.write_queue_nums} write and {tc.read_queue_nums} read queues",
        )
    return queue_id


async def send_message(
    p: Ports, special: SpecialRouting, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = parse_send_message_header(cmd.code, cmd.ext_fields)
    new_topic = p.topics.get(h.topic) is None
    queue_id = _write_queue(p, special, cmd, h)
    if isinstance(queue_id, RemotingCommand):
        return queue_id
    if new_topic and p.topics.get(h.topic) is not None:
        # auto-created by this send: the name servers hear of it before the producer does,
        # so a consumer started on this answer finds the route (RocketMQ registers in the
        # sending thread too); a name server that does not answer in time delays no longer
        await p.topics.announced(ANNOUNCE_TIMEOUT_S)
    body = cmd.body or b""
    # every message sent alone is stored naming its region, the trace switch and the cluster
    # (RocketMQ's send processors do: a traced consumer reports only messages naming their
    # region, a request-reply consumer addresses its reply from the cluster); a batch's
    # messages are not (neither in RocketMQ); as the native path does
    cluster = p.cfg.cluster_name

    def stamp(pr: bytes) -> bytes:
        return stamp_properties(pr, cluster)

    props = stamp((h.properties or "").encode())
    is_batch = cmd.code == RC.SEND_BATCH_MESSAGE or bool(h.batch)
    dead_of = _dead_letter_group(p, h) if not is_batch else None
    topic = h.topic
    if dead_of is not None:
        # RocketMQ's handleRetryAndDLQ: the retry went past the group's limit (or the group
        # consumes orderly): the message goes to the group's dead-letter queue instead, at
        # once, with DELAY -1 (as RocketMQ stores it; never routed to the schedule topic)
        topic, queue_id = DLQ_GROUP_TOPIC_PREFIX + dead_of, 0
        p.topics.system(topic)  # created (and announced) the first time
        props = _dead_letter_delay(props)
    store_qid, sys_flag = queue_id, h.sys_flag
    if not is_batch and dead_of is None and special.may_route(props):
        why = special.send_refusal(props)
        if why is not None:
            return cmd.response(Resp.MESSAGE_ILLEGAL, why)
        # Transaction halves and delayed/timer messages are stored on system topics first.
        topic, store_qid, props, sys_flag = special.route_send(topic, queue_id, props, sys_flag)
    try:
        entries = (
            # a batch's messages keep their own properties only (as RocketMQ stores them)
            [(f, b, pr) for f, b, pr in decode_batch_body(body)]
            if is_batch
            else [(h.flag, body, props)]
        )
    except RemotingDecodeError as e:
        return cmd.response(Resp.MESSAGE_ILLEGAL, f"the batch body does not decode: {e}")
    if not entries:
        return cmd.response(Resp.MESSAGE_ILLEGAL, "the batch is empty")
    if is_batch and len(body) > p.cfg.max_message_size:
        # RocketMQ refuses a batch larger than maxMessageSize as a whole, not only each body
        return cmd.response(
            Resp.MESSAGE_ILLEGAL, batch_too_large(len(body), p.cfg.max_message_size)
        )
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
        mtype = _message_type(topic, h.topic) if dead_of is None else "Normal"
        p.traffic.put(h.topic, mtype, len(msgs), sum(sizes))
        p.traffic.sized(h.topic, mtype, sizes)
        if dead_of is not None:
            origin = decode_properties(props).get(PROPERTY_RETRY_TOPIC, h.topic)
            p.traffic.dead_letter(origin, dead_of)
        if store_qid != queue_id:
            resp.ext_fields["queueId"] = str(queue_id)  # RocketMQ answers the requested queue
        uniq = _uniq_key(props) if not is_batch else None
        if uniq:
            # SendMessageProcessor answers the UNIQ_KEY as transactionId (a transactional
            # producer reports it as the transaction id).
            resp.ext_fields["transactionId"] = uniq
    return resp


def _offset_msg_id_of(store_host: str, offset: int, fallback: str | None) -> str:
    """The offset message id of the record at ``offset`` stored by ``store_host`` ("ip:port");
    ``fallback`` (the client's id) when the address does not parse."""
    host, _, port = store_host.rpartition(":")
    try:
        return offset_msg_id(host.strip("[]"), int(port), offset)
    except ValueError:
        return fallback or ""


def _dead_letter_group(p: Ports, h: SendMessageRequestHeader) -> str | None:
    """The group whose dead-letter queue a send to its retry topic goes to instead: when the
    message was reconsumed more often than the group allows (the send's maxReconsumeTimes, else
    the group's retryMaxTimes), or the group holds queue locks (an orderly consumer's retries
    are dead letters at once); None for any other send (RocketMQ's handleRetryAndDLQ)."""
    if not h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return None
    group = h.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    limit = (
        h.max_reconsume_times
        if h.max_reconsume_times is not None
        else p.subgroups.retry_max_times(group)
    )
    if (h.reconsume_times or 0) > limit or p.locks.any_live(group, now_ms()):
        return group
    return None


def _dead_letter_delay(props: bytes) -> bytes:
    """A dead letter's DELAY: -1, as RocketMQ's handleRetryAndDLQ writes it."""
    d = decode_properties(props)
    d[PROPERTY_DELAY] = "-1"
    return encode_properties(d).encode()


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
    except StoreIOError as e:
        if e.errno != errno.ENOSPC:
            raise
        # The disk filled before a retention round saw it: refused as a full disk is
        # (nothing was stored), and writes stop until a round finds room again.
        p.storage.out_of_space(str(e))
        return cmd.response(
            Resp.SERVICE_NOT_AVAILABLE,
            "service not available now: the broker's disk is full (no space left writing the "
            "commitlog); writes resume once retention frees space",
        )
    p.replication.after_append()
    topic, queue_id = msgs[0].topic, msgs[0].queue_id
    p.hold.notify(topic, queue_id, p.store.native.queue_max_offset(topic, queue_id))
    code = await wait_outcome(p, placed.end_offset, wait)
    return _send_response(p, cmd, placed, queue_id, code)


async def wait_outcome(p: Ports, end_offset: int, wait: bool) -> int:
    """The answer to a stored send once the broker's waits are over: SUCCESS, or RocketMQ's
    code for a write that is stored here but not yet durable / not yet on enough replicas."""
    if wait and p.cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        with trio.move_on_after(p.cfg.sync_flush_timeout_ms / 1000) as scope:
            await p.store.wait_durable(end_offset)
        if scope.cancelled_caught:
            # Written but not yet durable: RocketMQ answers FLUSH_DISK_TIMEOUT, which the
            # client treats as a send that may or may not survive a crash.
            return Resp.FLUSH_DISK_TIMEOUT
    if wait:
        return replication_code(await p.replication.wait_replicated(end_offset))
    return Resp.SUCCESS


def replication_code(outcome: ReplicationOutcomeLike) -> int:
    """SUCCESS, or, for a write stored here but not (yet) on enough replicas, RocketMQ's
    code: the client must treat the send as possibly lost on a failover."""
    if outcome.ok:
        return Resp.SUCCESS
    return Resp.SLAVE_NOT_AVAILABLE if outcome.reason == "no-slave" else Resp.FLUSH_SLAVE_TIMEOUT


async def _send_later(args: tuple[Connection, RemotingCommand]) -> None:
    conn, resp = args
    try:
        await conn.send(resp)
    except RemotingClosedError:
        pass


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
        h.max_reconsume_times
        if h.max_reconsume_times is not None
        else p.subgroups.retry_max_times(h.group)
    )
    if not orig_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        # Consumers read the original topic back from this property.
        props[PROPERTY_RETRY_TOPIC] = orig_topic
    if not props.get(PROPERTY_ORIGIN_MESSAGE_ID):
        # the first failure: the original's offset message id (RocketMQ takes the msgId of the
        # message it looked up by offset); a retry keeps the one its first failure set
        props[PROPERTY_ORIGIN_MESSAGE_ID] = _offset_msg_id_of(
            str(orig["store_host"]), h.offset, h.origin_msg_id
        )
    dead = reconsume > max_times or h.delay_level < 0
    if dead:
        topic = DLQ_GROUP_TOPIC_PREFIX + h.group
        p.topics.system(topic)  # created (and announced) the first time
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


def batch_too_large(size: int, limit: int) -> str:
    """The refusal of a batch whose encoded body is over maxMessageSize (the native path says
    the same)."""
    return f"the batch of {size} bytes is over the max message size, MAX: {limit}"
