"""The producer (RocketMQ's DefaultMQProducer), for Trio.

    async with Producer("pg", "127.0.0.1:9876") as p:
        r = await p.send("Orders", b"hello", tags="A", keys="k1")
        await p.send_oneway("Orders", b"fire and forget")
        await p.send_async("Orders", b"later", callback)   # returns at once; see send_async
        r = await p.send_batch("Orders", [b"a", b"b", Message("Orders", b"c", tags="T")])
        r = await p.send("Orders", b"in order", selector=select_by_hash, arg=order_id)

Java behaviour kept (DefaultMQProducerImpl.sendDefaultImpl, MQFaultStrategy):
* queue selection: round robin over the topic's writable queues, skipping the broker of the
  previous failed attempt and, with sendLatencyFaultEnable, brokers isolated by a recent
  failure (10 s) or a slow answer (latencyMax / notAvailableDuration);
* a sync send is tried up to 1 + retryTimesWhenSendFailed times within sendMsgTimeout in
  total; an async send 1 + retryTimesWhenSendAsyncFailed; a oneway send and a send to a
  chosen queue (or through a selector) once;
* retried: connect errors, and the broker codes of DefaultMQProducer.retryResponseCodes
  (TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, SYSTEM_BUSY, NO_PERMISSION,
  NO_BUYER_ID, NOT_IN_CURRENT_UNIT, GO_AWAY); other codes fail at once;
* a topic with no route is sent through the auto-create default topic (TBW102).

Where we differ on purpose: Java also retries after a timeout, silently creating possible
duplicates. Here a timeout (or a connection lost while waiting) ends the send with
`SendTimeoutError` (definite=False), unless `retry_after_timeout` is set, in which case a
later success says `possible_duplicate=True`. Every error says whether it is definite.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Final

import trio

from rmq_ha._native import TRANSACTION_PREPARED_TYPE, encode_batch_body
from rmq_ha.client.config import ProducerConfig, parse_namesrv_addrs
from rmq_ha.client.errors import (
    BrokerResponseError,
    ClientStateError,
    InvalidMessageError,
    SendAttempt,
    SendError,
    SendTimeoutError,
)
from rmq_ha.client.instance import ClientInstance
from rmq_ha.client.message import (
    RETRY_GROUP_TOPIC_PREFIX,
    Message,
    SendResult,
    SendStatus,
    UniqIdGenerator,
    check_message,
    check_topic,
)
from rmq_ha.client.routes import TopicPublishInfo
from rmq_ha.errors import RemotingConnectError, RemotingError, RemotingTimeoutError, RmqHaError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import HeaderError
from rmq_ha.protocol.headers import SendMessageRequestHeaderV2, SendMessageResponseHeader
from rmq_ha.protocol.message import (
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT,
    encode_properties,
    java_hash,
)
from rmq_ha.protocol.models import MessageQueue

log = logging.getLogger(__name__)

#: DefaultMQProducer.retryResponseCodes.
RETRY_RESPONSE_CODES: Final = frozenset(
    {
        Resp.TOPIC_NOT_EXIST,
        Resp.SERVICE_NOT_AVAILABLE,
        Resp.SYSTEM_ERROR,
        Resp.SYSTEM_BUSY,
        Resp.NO_PERMISSION,
        Resp.NO_BUYER_ID,
        Resp.NOT_IN_CURRENT_UNIT,
        Resp.GO_AWAY,
    }
)

_SEND_STATUS: Final = {
    Resp.SUCCESS: SendStatus.SEND_OK,
    Resp.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    Resp.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    Resp.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

#: MQFaultStrategy: answers slower than latencyMax[i] ms make the broker unavailable for
#: notAvailableDuration[i] ms.
LATENCY_MAX_MS: Final = (50, 100, 550, 1800, 3000, 5000, 15000)
NOT_AVAILABLE_DURATION_MS: Final = (0, 0, 2000, 5000, 6000, 10000, 30000)

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
SendCallback = Callable[[SendResult | None, RmqHaError | None], Awaitable[None] | None]


def select_by_hash(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: abs(arg.hashCode()) % len (Java's hash for str/int)."""
    h = java_hash(arg) if isinstance(arg, str) else hash(arg)
    return mqs[abs(h) % len(mqs)]


def select_random(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByRandom."""
    return random.choice(list(mqs))


class CommunicationMode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


class FaultStrategy:
    """MQFaultStrategy, simply: a broker that failed (or answered slowly) is avoided until a
    deadline; the broker of the previous attempt is skipped on a retry."""

    def __init__(self, enabled: bool, isolation_s: float) -> None:
        self.enabled = enabled
        self.isolation_s = isolation_s
        self._available_at: dict[str, float] = {}
        self._index: dict[str, itertools.count[int]] = {}

    def is_available(self, broker: str) -> bool:
        return time.monotonic() >= self._available_at.get(broker, 0.0)

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        queues = info.queues
        counter = self._index.setdefault(info.topic, itertools.count(random.randrange(1 << 16)))
        filters: list[Callable[[MessageQueue], bool]] = []
        if self.enabled:
            filters.append(
                lambda q: self.is_available(q.broker_name) and q.broker_name != last_broker
            )
        filters.append(lambda q: q.broker_name != last_broker)
        for keep in filters:
            for _ in range(len(queues)):
                mq = queues[next(counter) % len(queues)]
                if keep(mq):
                    return mq
        return queues[next(counter) % len(queues)]

    def update(self, broker: str, latency_s: float, *, isolation: bool) -> None:
        if not self.enabled:
            return
        latency_ms = 10_000 if isolation else latency_s * 1000
        duration_ms = 0
        for limit, duration in zip(
            reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS), strict=True
        ):
            if latency_ms >= limit:
                duration_ms = duration
                break
        if isolation:
            duration_ms = int(self.isolation_s * 1000)
        self._available_at[broker] = time.monotonic() + duration_ms / 1000


class _Outgoing:
    """What one send carries: a message, or a batch encoded into one body."""

    __slots__ = ("body", "flag", "ids", "is_batch", "properties", "topic")

    def __init__(
        self, topic: str, body: bytes, properties: dict[str, str], flag: int, ids: list[str],
        is_batch: bool,
    ) -> None:  # fmt: skip
        self.topic = topic
        self.body = body
        self.properties = properties
        self.flag = flag
        self.ids = ids
        self.is_batch = is_batch


class Producer:
    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        *,
        config: ProducerConfig | None = None,
    ) -> None:
        self.group = group
        self.cfg = config or ProducerConfig()
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self._instance: ClientInstance | None = None
        self._stack: AsyncExitStack | None = None
        self._async_nursery_cm: Any = None
        self._async_nursery: trio.Nursery | None = None
        self._async_slots = trio.Semaphore(max(1, self.cfg.back_pressure_for_async_send_num))
        self._fault = FaultStrategy(self.cfg.send_latency_fault_enable, self.cfg.isolation_s)
        self._ids = UniqIdGenerator(self.cfg.client.client_ip)

    # ---- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        stack = AsyncExitStack()
        self._instance = await stack.enter_async_context(
            ClientInstance(self.namesrv_addrs, self.cfg.client)
        )
        self._instance.producer_groups.add(self.group)
        self._stack = stack
        self._async_nursery_cm = trio.open_nursery()
        self._async_nursery = await self._async_nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            # Pending async sends finish first (each is bounded by its send timeout).
            # Not given the body's exception: that would cancel pending sends and wrap the
            # exception in an ExceptionGroup.
            await self._async_nursery_cm.__aexit__(None, None, None)
        finally:
            self._async_nursery = None
            assert self._instance is not None and self._stack is not None
            with trio.move_on_after(self.cfg.client.mq_client_api_timeout_s) as scope:
                scope.shield = True
                await self._instance.unregister_client(producer_group=self.group)
            await self._stack.aclose()
        return None

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError("the producer is not started (use `async with`)")
        return self._instance

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues `send` chooses from (fetchPublishMessageQueues)."""
        info = await self._publish_info(topic)
        return list(info.queues)

    # ---- sending ---------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_s: float | None = None,
        flag: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> SendResult:
        """Sends one message and waits for the broker. Raises SendError / SendTimeoutError
        (with `definite`), InvalidMessageError or RouteNotFoundError (definite)."""
        msg = _message(topic, body, tags, keys, properties, flag, wait_store_msg_ok)
        return await self.send_message(
            msg, queue=queue, selector=selector, arg=arg, timeout_s=timeout_s
        )

    async def send_message(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_s: float | None = None,
        mode: CommunicationMode = CommunicationMode.SYNC,
    ) -> SendResult:
        result = await self._send(msg, mode, queue, selector, arg, timeout_s)
        assert result is not None
        return result

    async def send_oneway(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        """Queues the message for the broker and returns; no answer comes back. Only a
        failure to reach the broker is reported (definite)."""
        msg = _message(topic, body, tags, keys, properties, 0, True)
        await self._send(msg, CommunicationMode.ONEWAY, queue, selector, arg, None)

    async def send_async(
        self,
        topic: str,
        body: bytes | str,
        callback: SendCallback,
        *,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_s: float | None = None,
    ) -> None:
        """RocketMQ's send(msg, SendCallback) in Trio terms: the send runs as a task of the
        producer's nursery and `callback(result, None)` or `callback(None, error)` (sync or
        async) is called when it ends. Returns once the send is started; waits only when
        backPressureForAsyncSendNum sends are already in flight. Closing the producer waits
        for every started send. (Inside your own nursery, `nursery.start_soon(p.send, ...)`
        is the other idiomatic way.)"""
        msg = _message(topic, body, tags, keys, properties, 0, True)
        check_message(msg, self.cfg.max_message_size_bytes)
        nursery = self._async_nursery
        if nursery is None:
            raise ClientStateError("the producer is not started (use `async with`)")
        await self._async_slots.acquire()

        async def run() -> None:
            try:
                result: SendResult | None = None
                error: RmqHaError | None = None
                try:
                    result = await self._send(
                        msg, CommunicationMode.ASYNC, queue, selector, arg, timeout_s
                    )
                except RmqHaError as e:
                    error = e
                try:
                    ret = callback(result, error)
                    if inspect.isawaitable(ret):
                        await ret
                except Exception:  # a callback bug must not take the producer down
                    log.exception("send callback failed")
            finally:
                self._async_slots.release()

        nursery.start_soon(run)

    async def send_batch(
        self,
        topic: str,
        messages: Sequence[Message | bytes | str],
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_s: float | None = None,
    ) -> SendResult:
        """One SEND_BATCH_MESSAGE: every message gets its own UNIQ_KEY, all land on one queue
        with consecutive offsets (`queue_offset` is the first). `msg_id` and `offset_msg_id`
        are comma-separated, in order."""
        if not messages:
            raise InvalidMessageError("the batch is empty")
        check_topic(topic)
        msgs: list[Message] = []
        for m in messages:
            msg = m if isinstance(m, Message) else _message(topic, m, None, None, None, 0, True)
            if msg.topic != topic:
                raise InvalidMessageError("every message of a batch must have the batch topic")
            if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise InvalidMessageError("retry-topic messages cannot be batched")
            if msgs and msg.wait_store_msg_ok != msgs[0].wait_store_msg_ok:
                raise InvalidMessageError("every message of a batch must have the same WAIT")
            check_message(msg, self.cfg.max_message_size_bytes)
            if msg.uniq_id is None:
                msg.uniq_id = self._ids.next_id()
            msgs.append(msg)
        body = encode_batch_body(
            [(m.flag, m.body, encode_properties(m.wire_properties()).encode()) for m in msgs]
        )
        if len(body) > self.cfg.max_message_size_bytes:
            raise InvalidMessageError(
                f"the batch body is {len(body)} bytes, over {self.cfg.max_message_size_bytes}"
            )
        out = _Outgoing(
            topic,
            body,
            {PROPERTY_WAIT: "true" if msgs[0].wait_store_msg_ok else "false"},
            0,
            [m.uniq_id for m in msgs if m.uniq_id],
            True,
        )
        result = await self._send_outgoing(
            out, msgs[0], CommunicationMode.SYNC, queue, selector, arg, timeout_s
        )
        assert result is not None
        return result

    # ---- the send path ---------------------------------------------------------------------

    async def _publish_info(self, topic: str) -> TopicPublishInfo:
        return await self.instance.routes.publish_info(
            topic,
            default_topic=self.cfg.create_topic_key,
            default_queue_nums=self.cfg.default_topic_queue_nums,
        )

    async def _send(
        self,
        msg: Message,
        mode: CommunicationMode,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        timeout_s: float | None,
    ) -> SendResult | None:
        check_message(msg, self.cfg.max_message_size_bytes)
        if msg.uniq_id is None:
            msg.uniq_id = self._ids.next_id()
        out = _Outgoing(msg.topic, msg.body, msg.wire_properties(), msg.flag, [msg.uniq_id], False)
        return await self._send_outgoing(out, msg, mode, queue, selector, arg, timeout_s)

    async def _send_outgoing(
        self,
        out: _Outgoing,
        msg: Message,
        mode: CommunicationMode,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        timeout_s: float | None,
    ) -> SendResult | None:
        timeout = timeout_s if timeout_s is not None else self.cfg.send_msg_timeout_s
        start = time.monotonic()
        deadline = start + timeout
        info = await self._publish_info(out.topic)
        fixed: MessageQueue | None = queue
        if fixed is None and selector is not None:
            fixed = selector(info.queues, msg, arg)
        if fixed is not None:
            total = 1
        elif mode is CommunicationMode.SYNC:
            total = 1 + max(0, self.cfg.retry_times_when_send_failed)
        elif mode is CommunicationMode.ASYNC:
            total = 1 + max(0, self.cfg.retry_times_when_send_async_failed)
        else:
            total = 1
        attempts: list[SendAttempt] = []
        last_broker: str | None = None
        possible_duplicate = False
        not_ok: SendResult | None = None
        routes = self.instance.routes
        cap = self.cfg.send_msg_max_timeout_per_request_s
        for n in range(total):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            mq = fixed if fixed is not None else self._fault.select(info, last_broker)
            last_broker = mq.broker_name
            addr = routes.master_addr(mq.broker_name)
            if addr is None:
                await routes.update(out.topic)
                addr = routes.master_addr(mq.broker_name)
            if addr is None:
                attempts.append(
                    SendAttempt(mq.broker_name, None, mq.queue_id, "no master address", True, 0.0)
                )
                continue
            cmd = self._request(out, mq, oneway=mode is CommunicationMode.ONEWAY)
            t0 = time.monotonic()
            attempt_deadline = deadline
            if cap is not None and n + 1 < total:
                attempt_deadline = min(deadline, t0 + cap)
            try:
                resp = await self._invoke(
                    addr, cmd, attempt_deadline, oneway=mode is CommunicationMode.ONEWAY
                )
            except RemotingConnectError as e:
                self._fault.update(mq.broker_name, time.monotonic() - t0, isolation=True)
                attempts.append(_attempt(mq, addr, e, True, t0))
                log.info("send to %s failed (definite), trying again: %s", addr, e)
                continue
            except RemotingError as e:
                # Timeout or connection lost while waiting: the broker may have stored it.
                self._fault.update(mq.broker_name, time.monotonic() - t0, isolation=True)
                attempts.append(_attempt(mq, addr, e, False, t0))
                if not self.cfg.retry_after_timeout:
                    raise SendTimeoutError(
                        f"send to {out.topic} via {addr}: outcome unknown: {e}",
                        attempts=tuple(attempts),
                    ) from e
                log.warning("send to %s: outcome unknown (%s); retrying (possible duplicate)",
                            addr, e)  # fmt: skip
                possible_duplicate = True
                continue
            if resp is None:  # oneway: handed to the connection
                return None
            elapsed = time.monotonic() - t0
            status = _SEND_STATUS.get(resp.code)  # type: ignore[call-overload]
            if status is not None:
                self._fault.update(mq.broker_name, elapsed, isolation=False)
                result = self._result(out, mq, resp, status, possible_duplicate, len(attempts) + 1)
                if (
                    status is not SendStatus.SEND_OK
                    and self.cfg.retry_another_broker_when_not_store_ok
                    and fixed is None
                ):
                    # Stored, but not as durably as asked: RocketMQ may send it again elsewhere.
                    not_ok = result
                    possible_duplicate = True
                    attempts.append(_attempt(mq, addr, f"stored with {status.value}", False, t0))
                    continue
                return result
            self._fault.update(mq.broker_name, elapsed, isolation=True)
            err = BrokerResponseError(resp.code, resp.remark, addr)
            attempts.append(_attempt(mq, addr, err, True, t0, code=resp.code))
            if resp.code in RETRY_RESPONSE_CODES:
                continue
            if not_ok is not None:
                return not_ok
            raise SendError(
                f"send to {out.topic} refused: {err}",
                definite=all(a.definite for a in attempts),
                attempts=tuple(attempts),
                code=resp.code,
            ) from err
        if not_ok is not None:
            return not_ok
        definite = all(a.definite for a in attempts)
        timed_out = time.monotonic() >= deadline
        what = "timed out" if timed_out else "failed"
        brokers = ", ".join(f"{a.broker_name}({a.error})" for a in attempts) or "none"
        if attempts and not attempts[-1].definite:
            raise SendTimeoutError(
                f"send to {out.topic}: outcome unknown after {len(attempts)} attempt(s); "
                f"brokers: {brokers}",
                attempts=tuple(attempts),
            )
        raise SendError(
            f"send to {out.topic} {what} after {len(attempts)} attempt(s) in "
            f"{time.monotonic() - start:.3f} s; brokers: {brokers}",
            definite=definite,
            attempts=tuple(attempts),
            code=attempts[-1].code if attempts else None,
        )

    async def _invoke(
        self, addr: str, cmd: RemotingCommand, deadline: float, *, oneway: bool
    ) -> RemotingCommand | None:
        """Connect (a failure or a deadline here is definite: nothing was sent), then send
        and wait for the answer (a failure here is not definite)."""
        remoting = self.instance.remoting
        conn = None
        with trio.move_on_after(max(0.0, deadline - time.monotonic())):
            conn = await remoting.connection(addr)
        if conn is None:
            raise RemotingConnectError(f"connect to {addr} did not finish before the send deadline")
        if oneway:
            cmd.flag |= 2
            await conn.send(cmd)
            return None
        timeout_s = max(0.001, deadline - time.monotonic())
        try:
            return await conn.request(cmd, timeout_s)
        except RemotingTimeoutError:
            remoting.timed_out(addr, conn, cmd.code, timeout_s)  # as every request does
            raise

    def _request(self, out: _Outgoing, mq: MessageQueue, *, oneway: bool) -> RemotingCommand:
        props = out.properties
        reconsume: int | None = None
        max_reconsume: int | None = None
        if out.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            reconsume = int(props.get(PROPERTY_RECONSUME_TIME, "0") or 0)
            if PROPERTY_MAX_RECONSUME_TIMES in props:
                max_reconsume = int(props[PROPERTY_MAX_RECONSUME_TIMES])
        h = SendMessageRequestHeaderV2(
            producer_group=self.group,
            topic=out.topic,
            default_topic=self.cfg.create_topic_key,
            default_topic_queue_nums=self.cfg.default_topic_queue_nums,
            queue_id=mq.queue_id,
            # A transaction half carries the prepared type too (DefaultMQProducerImpl).
            sys_flag=TRANSACTION_PREPARED_TYPE if _is_half(props) else 0,
            born_timestamp=int(time.time() * 1000),
            flag=out.flag,
            properties=encode_properties(props),
            reconsume_times=reconsume if reconsume is not None else 0,
            unit_mode=False,
            max_reconsume_times=max_reconsume,
            batch=out.is_batch,
            broker_name=mq.broker_name,
        )
        if out.is_batch:
            code, ext = RC.SEND_BATCH_MESSAGE, h.to_ext()
        elif self.cfg.use_v2_header:
            code, ext = RC.SEND_MESSAGE_V2, h.to_ext()
        else:
            code, ext = RC.SEND_MESSAGE, h.to_v1().to_ext()
        return RemotingCommand.request(
            code,
            ext,
            out.body,
            oneway=oneway,
            serialize_type=self.cfg.client.serialize_type.value,
        )

    def _result(
        self,
        out: _Outgoing,
        mq: MessageQueue,
        resp: RemotingCommand,
        status: SendStatus,
        possible_duplicate: bool,
        attempts: int,
    ) -> SendResult:
        try:
            rh = SendMessageResponseHeader.from_ext(resp.ext_fields)
        except HeaderError as e:
            # Stored (the code says so) but the answer is malformed: report what we know.
            log.warning("send response from %s does not decode: %s", mq.broker_name, e)
            return SendResult(status, ",".join(out.ids), "", mq, -1, possible_duplicate, attempts)
        return SendResult(
            status=status,
            msg_id=",".join(out.ids),
            offset_msg_id=rh.msg_id,
            queue=MessageQueue(out.topic, mq.broker_name, rh.queue_id),
            queue_offset=rh.queue_offset,
            possible_duplicate=possible_duplicate,
            attempts=attempts,
        )


def _is_half(props: Mapping[str, str]) -> bool:
    return props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"


def _message(
    topic: str,
    body: bytes | str,
    tags: str | None,
    keys: str | list[str] | None,
    properties: Mapping[str, str] | None,
    flag: int,
    wait: bool,
) -> Message:
    return Message(
        topic=topic,
        body=body.encode() if isinstance(body, str) else bytes(body),
        tags=tags,
        keys=keys,
        properties=dict(properties or {}),
        flag=flag,
        wait_store_msg_ok=wait,
    )


def _attempt(
    mq: MessageQueue,
    addr: str,
    err: BaseException | str,
    definite: bool,
    t0: float,
    code: int | None = None,
) -> SendAttempt:
    return SendAttempt(
        mq.broker_name, addr, mq.queue_id, str(err), definite, time.monotonic() - t0, code
    )
