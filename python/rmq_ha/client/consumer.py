"""The push consumer (RocketMQ's DefaultMQPushConsumer), for Trio.

    async def on_messages(msgs: list[MessageExt], ctx: ConcurrentContext) -> ConsumeStatus:
        ...
        return ConsumeStatus.CONSUME_SUCCESS

    async with PushConsumer("cg", "127.0.0.1:9876", {"Orders": "TagA || TagB"}, on_messages):
        await trio.sleep_forever()

How it maps to the Java client:
* start: routes of the subscribed topics and of `%RETRY%<group>` (always subscribed, as
  RocketMQ's copySubscription), HEART_BEAT to every broker, then a rebalance; heartbeats every
  heartbeatBrokerInterval, routes every pollNameServerInterval (ClientInstance);
* rebalance (RebalanceImpl.rebalanceByTopic, clustering): every `rebalance_interval_s` and at
  once on NOTIFY_CONSUMER_IDS_CHANGED; GET_CONSUMER_LIST_BY_GROUP from a broker of the topic,
  both lists sorted as Java sorts them, AllocateMessageQueueAveragely; queues no longer ours
  are dropped (offset persisted, orderly: unlocked), new ones start from the committed offset
  (QUERY_CONSUMER_OFFSET) or, when there is none, from the consume_from rule
  (computePullFromWhereWithException);
* one pull task per assigned queue (DefaultMQPushConsumerImpl.pullMessage): PULL_MESSAGE with
  long polling (suspend 15 s, request timeout 30 s), the in-memory offset piggy-backed as the
  commit offset, flow control on cached count/size/span; FOUND -> consume;
  PULL_NOT_FOUND / PULL_RETRY_IMMEDIATELY -> next offset, pull again at once;
  PULL_OFFSET_MOVED -> drop the queue, store the corrected offset, rebalance at once;
  errors -> pull again after 3 s;
* client-side tag re-check by tag string (PullAPIWrapper.processPullResult);
* concurrent consumption (ConsumeMessageConcurrentlyService): RECONSUME_LATER (or an
  exception) sends the messages back (CONSUMER_SEND_MSG_BACK); if that fails they are
  consumed again locally 5 s later; the committed offset is the smallest offset still in
  flight (ProcessQueue.removeMessage), so nothing unconsumed is ever committed;
* messages read from the retry topic get their original topic back (RETRY_TOPIC property);
* orderly consumption (ConsumeMessageOrderlyService): LOCK_BATCH_MQ before a queue is taken
  and every 20 s, one task per queue consuming in order only while the lock is held and not
  older than 30 s, SUSPEND_CURRENT_QUEUE_A_MOMENT retries the same messages after 1 s; a queue
  lost in a rebalance is unlocked (UNLOCK_BATCH_MQ) once its current batch has finished;
* offsets (RemoteBrokerOffsetStore): UPDATE_CONSUMER_OFFSET oneway every 5 s; at shutdown
  (after in-flight batches finish or `await_termination_s`) synchronously; then UNLOCK of
  every orderly queue and UNREGISTER_CLIENT.
"""

from __future__ import annotations

import enum
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Final, TypeVar

import trio

from rmq_ha.client.allocate import allocate_averagely, sort_client_ids, sort_queues
from rmq_ha.client.api import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullResult,
    PullStatus,
)
from rmq_ha.client.config import ConsumeFrom, ConsumerConfig, parse_namesrv_addrs
from rmq_ha.client.errors import BrokerNotFoundError, BrokerResponseError, ClientStateError
from rmq_ha.client.instance import ClientInstance
from rmq_ha.client.message import (
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    RETRY_GROUP_TOPIC_PREFIX,
    MessageExt,
    retry_topic,
)
from rmq_ha.client.offsets import RemoteBrokerOffsetStore
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.message import PROPERTY_RETRY_TOPIC
from rmq_ha.protocol.models import (
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)

log = logging.getLogger(__name__)

#: Default maxReconsumeTimes of a concurrent consumer (-1 in the config).
DEFAULT_MAX_RECONSUME_TIMES: Final = 16
#: PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL.
PULL_DELAY_WHEN_BROKER_FLOW_CONTROL_S: Final = 0.02
#: UNLOCK_DELAY_TIME_MILLS: a dropped orderly queue is unlocked at the latest this long after
#: its last lock, even if its consumer is still busy.
UNLOCK_DELAY_S: Final = 20.0
INTEGER_MAX: Final = 2**31 - 1


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class OrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(slots=True)
class ConcurrentContext:
    """ConsumeConcurrentlyContext. `ack_index`: on CONSUME_SUCCESS, messages after it are
    still sent back. `delay_level_when_next_consume`: 0 lets the broker choose, -1 DLQ."""

    queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = INTEGER_MAX


@dataclass(slots=True)
class OrderlyContext:
    """ConsumeOrderlyContext. With `auto_commit` the offset advances after every SUCCESS."""

    queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_s: float | None = None


ConcurrentListener = Callable[
    [list[MessageExt], ConcurrentContext], Awaitable[ConsumeStatus] | ConsumeStatus
]
OrderlyListener = Callable[
    [list[MessageExt], OrderlyContext], Awaitable[OrderlyStatus] | OrderlyStatus
]

T = TypeVar("T")


async def _call(fn: Callable[..., Awaitable[T] | T], *args: Any) -> T:
    ret = fn(*args)
    if inspect.isawaitable(ret):
        return await ret
    return ret


def build_subscription(topic: str, expression: str | None) -> SubscriptionData:
    """FilterAPI.buildSubscriptionData for TAG expressions."""
    return SubscriptionData.build(topic, expression, "TAG", int(time.time() * 1000))


def filter_by_tags(msgs: list[MessageExt], sub: SubscriptionData) -> list[MessageExt]:
    """The client-side re-check: the broker filters by tag hash code, which can collide."""
    if not sub.tags_set:
        return msgs
    return [m for m in msgs if m.tags is not None and m.tags in sub.tags_set]


def reset_retry_topic(msgs: Iterable[MessageExt], group: str) -> None:
    """resetRetryAndNamespace: a message from %RETRY%<group> shows its original topic."""
    rt = retry_topic(group)
    for m in msgs:
        origin = m.properties.get(PROPERTY_RETRY_TOPIC)
        if origin and m.topic == rt:
            m.topic = origin


# ---------------------------------------------------------------------------------------------
# Process queue


class ProcessQueue:
    """Messages pulled from one queue and not yet consumed (RocketMQ's ProcessQueue). Dicts
    keep insertion order and offsets arrive increasing, so the first key is the smallest."""

    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self.queue_offset_max = -1
        self.msg_size = 0
        self.dropped = False
        self.locked = False
        self.last_lock_time = time.monotonic()
        self.last_pull_time = time.monotonic()
        self.consume_lock = trio.Lock()
        self.changed = trio.Event()  # new messages, a new lock, or dropped
        self.pull_scope: trio.CancelScope | None = None
        self.previously_locked = False
        self.releasing = False
        #: The group's offsets were reset (RESET_CONSUMER_CLIENT_OFFSET): nothing consumed
        #: from this queue before may commit any more.
        self.reset = False

    @property
    def msg_count(self) -> int:
        return len(self.msgs)

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def set_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_time = time.monotonic()
        self.wake()

    def lock_expired(self, max_live_s: float) -> bool:
        return time.monotonic() - self.last_lock_time > max_live_s

    def drop(self) -> None:
        self.dropped = True
        if self.pull_scope is not None:
            self.pull_scope.cancel()
        self.wake()

    def put(self, msgs: Sequence[MessageExt]) -> None:
        for m in msgs:
            if m.queue_offset not in self.msgs and m.queue_offset > self.queue_offset_max:
                self.msgs[m.queue_offset] = m
                self.msg_size += len(m.body)
                self.queue_offset_max = m.queue_offset
        self.wake()

    def max_span(self) -> int:
        if not self.msgs:
            return 0
        return self.queue_offset_max - next(iter(self.msgs))

    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """removeMessage: drops consumed messages; returns the offset safe to commit (the
        smallest still cached, or max + 1), -1 if nothing was cached."""
        if not self.msgs:
            return -1
        result = self.queue_offset_max + 1
        for m in msgs:
            if self.msgs.pop(m.queue_offset, None) is not None:
                self.msg_size -= len(m.body)
        if self.msgs:
            result = next(iter(self.msgs))
        else:
            self.msg_size = 0
        return result

    # orderly
    def take(self, n: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        while self.msgs and len(out) < n:
            offset = next(iter(self.msgs))
            m = self.msgs.pop(offset)
            self.consuming[offset] = m
            out.append(m)
        return out

    def commit(self) -> int:
        """Offset after the consumed batch, -1 if nothing was being consumed."""
        if not self.consuming:
            return -1
        offset = max(self.consuming) + 1
        self.msg_size -= sum(len(m.body) for m in self.consuming.values())
        self.consuming.clear()
        return offset

    def make_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        again = {m.queue_offset: m for m in msgs}
        for off in again:
            self.consuming.pop(off, None)
        self.msgs = dict(sorted({**self.msgs, **again}.items()))


@dataclass(slots=True)
class _Assignment:
    mq: MessageQueue
    pq: ProcessQueue
    next_offset: int
    consume_scope: trio.CancelScope | None = field(default=None)


# ---------------------------------------------------------------------------------------------
# The core shared by the push and lite-pull consumers


class ConsumerCore:
    """Rebalance, pull loops, offsets and locks. Subclasses say how pulled messages are
    consumed (`_dispatch`)."""

    consume_type: str = ConsumeType.CONSUME_PASSIVELY
    orderly: bool = False

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        subscriptions: str | Mapping[str, str],
        *,
        expression: str = "*",
        config: ConsumerConfig | None = None,
    ) -> None:
        self.group = group
        self.cfg = config or ConsumerConfig()
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        subs = (
            {subscriptions: expression} if isinstance(subscriptions, str) else dict(subscriptions)
        )
        self.subscriptions: dict[str, SubscriptionData] = {
            t: build_subscription(t, e) for t, e in subs.items()
        }
        # RocketMQ's copySubscription: clustering consumers also read their retry topic.
        self.subscriptions.setdefault(
            retry_topic(group), build_subscription(retry_topic(group), "*")
        )
        self.assigned: dict[MessageQueue, _Assignment] = {}
        self._instance: ClientInstance | None = None
        self._offsets: RemoteBrokerOffsetStore | None = None
        self._stack: AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._scopes: set[trio.CancelScope] = set()
        self._rebalance_event = trio.Event()
        self._rebalance_soon = False
        self._rebalance_lock = trio.Lock()
        self._suggested_broker: dict[MessageQueue, int] = {}
        self._stopping = False
        self._inflight = 0
        self._idle = trio.Event()
        self._idle.set()
        self.stats: dict[str, int] = {
            "pulled": 0,
            "consumed": 0,
            "sent_back": 0,
            "retried_local": 0,
        }

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError("the consumer is not started (use `async with`)")
        return self._instance

    @property
    def offsets(self) -> RemoteBrokerOffsetStore:
        if self._offsets is None:
            raise ClientStateError("the consumer is not started (use `async with`)")
        return self._offsets

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    async def start(self) -> None:
        stack = AsyncExitStack()
        self._instance = await stack.enter_async_context(
            ClientInstance(self.namesrv_addrs, self.cfg.client)
        )
        self._offsets = RemoteBrokerOffsetStore(self._instance, self.group)
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._stack = stack
        self._instance.consumers[self.group] = self
        try:
            await self._instance.routes.update_all(self.subscriptions)
            await self._instance.send_heartbeat_to_all_brokers()
            await self.do_rebalance()
            self.spawn(self._rebalance_loop)
            self.spawn(self._persist_loop)
            if self.orderly:
                self.spawn(self._lock_loop)
        except BaseException:
            await self.shutdown()
            raise

    async def shutdown(self) -> None:
        """Stops pulling, lets in-flight consumption finish (bounded), commits offsets,
        releases orderly locks, unregisters. Every step is bounded by a timeout."""
        if self._stack is None:
            return
        stack = self._stack
        try:
            self._stopping = True
            for a in self.assigned.values():
                if a.pq.pull_scope is not None:
                    a.pq.pull_scope.cancel()
                a.pq.wake()
            with trio.move_on_after(self.cfg.await_termination_s):
                await self._idle.wait()
            for scope in list(self._scopes):
                scope.cancel()
            timeout = self.cfg.client.mq_client_api_timeout_s
            with trio.move_on_after(timeout * 2) as shielded:
                shielded.shield = True
                await self.offsets.persist_all(self.assigned, oneway=False)
                if self.orderly:
                    await self._unlock_all(oneway=False)
                await self.instance.unregister_client(consumer_group=self.group)
        finally:
            for a in self.assigned.values():
                a.pq.dropped = True
            self.instance.consumers.pop(self.group, None)
            self._stack = None
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
            self._nursery = None
            await stack.aclose()

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> trio.CancelScope:
        """Runs a background job in its own cancel scope (so shutdown can stop the jobs and
        still talk to brokers from this task). Exceptions are logged, not raised."""
        if self._nursery is None:
            raise ClientStateError("the consumer is not started (use `async with`)")
        scope = trio.CancelScope()
        self._scopes.add(scope)

        async def run() -> None:
            try:
                with scope:
                    await fn(*args)
            except Exception:
                log.exception("consumer %s: background job %s failed", self.group, fn)
            finally:
                self._scopes.discard(scope)

        self._nursery.start_soon(run)
        return scope

    # ---- the instance's view ---------------------------------------------------------------

    def topics(self) -> Iterable[str]:
        return self.subscriptions.keys()

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=self.consume_type,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=self.cfg.consume_from.value,
            subscription_data_set=list(self.subscriptions.values()),
            unit_mode=False,
        )

    def rebalance_now(self) -> None:
        self._rebalance_event.set()

    def route_problem(self, topic: str) -> str | None:
        """Why a subscribed topic has no route yet (no name server answered, the topic does not
        exist, a refusal); None once it has one."""
        return self.instance.routes.missing_because(topic)

    async def reset_offsets(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (220; resetOffset in RocketMQ's client): the group's
        offsets on `topic` were reset (mqadmin resetOffsetByTime). The queues of the topic this
        consumer holds are dropped with what they had pulled (nothing consumed from them may
        commit afterwards), each reset offset this consumer holds is committed again, so that a
        persist sent before the notice cannot leave the old one on the broker, and a rebalance
        takes the queues again from there."""
        async with self._rebalance_lock:
            held = [mq for mq in self.assigned if mq.topic == topic]
            for mq in held:
                a = self.assigned.pop(mq)
                a.pq.reset = True
                a.pq.drop()
                self.offsets.remove(mq)
            for mq in held:
                off = table.get(mq)
                if off is None:
                    continue
                self.offsets.update(mq, off, increase_only=False)
                await self._persist_quietly(mq)
                self.offsets.remove(mq)
        log.info(
            "consumer %s: offsets of %s reset by the broker (%d queues held here): "
            "taking them again from the reset offsets",
            self.group,
            topic,
            len(held),
        )
        self.rebalance_now()

    # ---- periodic jobs ---------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        while True:
            wait = (
                self.cfg.rebalance_retry_when_lock_failed_s
                if self._rebalance_soon
                else self.cfg.rebalance_interval_s
            )
            with trio.move_on_after(wait):
                await self._rebalance_event.wait()
            self._rebalance_event = trio.Event()
            self._rebalance_soon = False
            await self.do_rebalance()

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.client.persist_consumer_offset_interval_s)
            await self.offsets.persist_all(list(self.assigned), oneway=True)

    async def _lock_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.lock_interval_s)
            await self.lock_all()

    # ---- rebalance -------------------------------------------------------------------------

    async def do_rebalance(self) -> None:
        async with self._rebalance_lock:
            for topic in list(self.subscriptions):
                if self._stopping:
                    return
                try:
                    await self._rebalance_topic(topic)
                except Exception as e:  # the next round tries again
                    log.warning("rebalance of %s/%s failed: %s", self.group, topic, e)

    async def _rebalance_topic(self, topic: str) -> None:
        routes = self.instance.routes
        mq_set = await routes.subscribe_queues(topic)
        if mq_set is None:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.info("rebalance %s: topic %s has no route yet", self.group, topic)
            return
        addr = routes.any_broker_addr_of_topic(topic)
        if addr is None:
            return
        try:
            cids = await self.instance.api.consumer_id_list(addr, self.group)
        except BrokerResponseError as e:
            log.info("rebalance %s/%s: no consumer list: %s", self.group, topic, e)
            return
        mine = allocate_averagely(self.client_id, sort_queues(list(mq_set)), sort_client_ids(cids))
        await self._update_assignments(topic, set(mine))

    async def _update_assignments(self, topic: str, allocated: set[MessageQueue]) -> None:
        for mq, a in list(self.assigned.items()):
            if mq.topic == topic and mq not in allocated:
                a.pq.drop()
                if await self._remove_unnecessary(a):
                    self.assigned.pop(mq, None)
        all_locked = True
        for mq in sort_queues(list(allocated)):
            if mq in self.assigned or self._stopping:
                continue
            if self.orderly and not await self.lock_one(mq):
                all_locked = False
                continue
            self.offsets.remove(mq)
            try:
                offset = await self._compute_pull_from_where(mq)
            except Exception as e:  # retried at the next rebalance
                log.warning("rebalance %s: cannot compute the offset of %s: %s", self.group, mq, e)
                continue
            pq = ProcessQueue()
            pq.set_locked(True)
            a = _Assignment(mq, pq, offset)
            self.assigned[mq] = a
            log.info(
                "consumer %s (%s) takes %s from offset %d", self.group, self.client_id, mq, offset
            )
            self._start_queue(a)
        if not all_locked:
            self._rebalance_soon = True  # rebalanceLater(500)

    def _start_queue(self, a: _Assignment) -> None:
        a.pq.pull_scope = self.spawn(self._pull_loop, a)

    async def _remove_unnecessary(self, a: _Assignment) -> bool:
        """removeUnnecessaryMessageQueue: persist the offset; orderly: unlock once the current
        batch is done (deferred to a background job if that takes longer than 0.5 s)."""
        if not self.orderly:
            await self._persist_quietly(a.mq)
            self.offsets.remove(a.mq)
            return True
        got = False
        with trio.move_on_after(self.cfg.unlock_wait_s):
            await a.pq.consume_lock.acquire()
            got = True
        if got:
            try:
                await self._release_orderly(a)
            finally:
                a.pq.consume_lock.release()
            return True
        if not a.pq.releasing:
            a.pq.releasing = True
            self.spawn(self._release_orderly_later, a)
        return False

    async def _release_orderly(self, a: _Assignment) -> None:
        await self._persist_quietly(a.mq)
        self.offsets.remove(a.mq)
        a.pq.set_locked(False)
        await self.unlock(a.mq, oneway=True)

    async def _release_orderly_later(self, a: _Assignment) -> None:
        """The queue's consumer was busy: unlock once its batch is done, or at the latest
        UNLOCK_DELAY_S after the last lock (tryRemoveOrderMessageQueue's forceUnlock)."""
        got = False
        with trio.move_on_after(max(0.0, a.pq.last_lock_time + UNLOCK_DELAY_S - time.monotonic())):
            await a.pq.consume_lock.acquire()
            got = True
        try:
            await self._release_orderly(a)
        finally:
            if got:
                a.pq.consume_lock.release()
        if self.assigned.get(a.mq) is a:
            self.assigned.pop(a.mq, None)
        self.rebalance_now()

    async def _persist_quietly(self, mq: MessageQueue) -> None:
        try:
            await self.offsets.persist(mq)
        except Exception as e:  # the new owner may then see an older offset (duplicates)
            log.info("persist offset of %s failed: %s", mq, e)

    async def _compute_pull_from_where(self, mq: MessageQueue) -> int:
        last = await self.offsets.read_from_store(mq)
        if last is not None and last >= 0:
            return last
        rule = self.cfg.consume_from
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if rule is ConsumeFrom.FIRST_OFFSET:
            return 0
        addr = await self.broker_addr(mq)
        if rule is ConsumeFrom.LAST_OFFSET:
            return 0 if is_retry else await self.instance.api.max_offset(addr, mq)
        if is_retry:
            return await self.instance.api.max_offset(addr, mq)
        ts = self.cfg.consume_timestamp_ms
        if ts is None:
            ts = int(time.time() * 1000) - 30 * 60 * 1000
        return await self.instance.api.search_offset(addr, mq, ts)

    async def broker_addr(self, mq: MessageQueue) -> str:
        """The broker to read `mq` from: the suggested replica, else the master, else any."""
        routes = self.instance.routes
        bid = self._suggested_broker.get(mq, 0)
        addr = routes.find_broker_addr(mq.broker_name, bid)
        if addr is None:
            await routes.update(mq.topic)
            addr = routes.find_broker_addr(mq.broker_name, bid)
        if addr is None:
            raise BrokerNotFoundError(f"broker {mq.broker_name} not in the routes", mq.broker_name)
        return addr

    # ---- locks (orderly) -------------------------------------------------------------------

    async def lock_one(self, mq: MessageQueue) -> bool:
        addr = self.instance.routes.find_broker_addr(mq.broker_name, only_this_broker=True)
        if addr is None:
            return False
        try:
            got = await self.instance.api.lock_batch(addr, self.group, self.client_id, [mq], 1.0)
        except Exception as e:
            log.info("lock of %s failed: %s", mq, e)
            return False
        for m in got:
            a = self.assigned.get(m)
            if a is not None:
                a.pq.set_locked(True)
        return mq in got

    async def lock_all(self) -> None:
        """lockAll: renew every held queue, per broker; a queue not granted is marked
        unlocked (its consumption stops until a later lock succeeds)."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq, a in self.assigned.items():
            if not a.pq.dropped:
                by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            addr = self.instance.routes.find_broker_addr(broker, only_this_broker=True)
            if addr is None:
                continue
            try:
                got = await self.instance.api.lock_batch(addr, self.group, self.client_id, mqs, 1.0)
            except Exception as e:
                log.info("lockBatch at %s failed: %s", addr, e)
                continue
            for mq in mqs:
                held = self.assigned.get(mq)
                if held is not None:
                    if mq in got:
                        held.pq.set_locked(True)
                    elif held.pq.locked:
                        log.warning("lost the lock of %s", mq)
                        held.pq.set_locked(False)

    async def unlock(self, mq: MessageQueue, *, oneway: bool) -> None:
        addr = self.instance.routes.find_broker_addr(mq.broker_name, only_this_broker=True)
        if addr is None:
            return
        try:
            await self.instance.api.unlock_batch(
                addr, self.group, self.client_id, [mq], oneway=oneway
            )
        except Exception as e:  # the broker lock expires on its own
            log.info("unlock of %s failed: %s", mq, e)

    async def _unlock_all(self, *, oneway: bool) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self.assigned:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            addr = self.instance.routes.find_broker_addr(broker, only_this_broker=True)
            if addr is None:
                continue
            try:
                await self.instance.api.unlock_batch(
                    addr, self.group, self.client_id, mqs, oneway=oneway
                )
            except Exception as e:
                log.info("unlockBatch at %s failed: %s", addr, e)
        for a in self.assigned.values():
            a.pq.set_locked(False)

    # ---- pulling ---------------------------------------------------------------------------

    async def _pull_loop(self, a: _Assignment) -> None:
        while not a.pq.dropped and not self._stopping:
            delay = await self._pull_once(a)
            if delay > 0:
                with trio.move_on_after(delay):
                    await a.pq.changed.wait()

    async def _pull_once(self, a: _Assignment) -> float:
        """One PULL_MESSAGE; returns how long to wait before the next (0: at once)."""
        pq, mq, cfg = a.pq, a.mq, self.cfg
        pq.last_pull_time = time.monotonic()
        if pq.msg_count > cfg.pull_threshold_for_queue:
            return cfg.pull_time_delay_when_flow_control_s
        if pq.msg_size > cfg.pull_threshold_size_for_queue_bytes:
            return cfg.pull_time_delay_when_flow_control_s
        if self.orderly:
            if not pq.locked:
                return cfg.pull_time_delay_when_exception_s
            if not pq.previously_locked:
                try:
                    a.next_offset = await self._compute_pull_from_where(mq)
                except Exception as e:
                    log.info("pull %s: offset lookup failed: %s", mq, e)
                    return cfg.pull_time_delay_when_exception_s
                pq.previously_locked = True
        elif pq.max_span() > cfg.consume_concurrently_max_span:
            return cfg.pull_time_delay_when_flow_control_s
        sub = self.subscriptions.get(mq.topic)
        if sub is None:
            return cfg.pull_time_delay_when_exception_s
        commit = self.offsets.read(mq)
        sys_flag = PULL_FLAG_SUSPEND
        if commit is not None and commit > 0:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        post_sub = cfg.post_subscription_when_pull
        if post_sub:
            sys_flag |= PULL_FLAG_SUBSCRIPTION
        try:
            addr = await self.broker_addr(mq)
            result = await self.instance.api.pull(
                addr,
                mq.broker_name,
                group=self.group,
                mq=mq,
                offset=a.next_offset,
                max_nums=cfg.pull_batch_size,
                sys_flag=sys_flag,
                commit_offset=commit if commit is not None and commit > 0 else 0,
                suspend_timeout_s=cfg.broker_suspend_max_time_s,
                subscription=sub.sub_string if post_sub else None,
                sub_version=sub.sub_version,
                max_bytes=cfg.pull_batch_size_bytes,
                timeout_s=cfg.consumer_timeout_when_suspend_s,
            )
        except BrokerResponseError as e:
            log.info("pull %s failed: %s", mq, e)
            if e.code == Resp.FLOW_CONTROL:
                return PULL_DELAY_WHEN_BROKER_FLOW_CONTROL_S
            return cfg.pull_time_delay_when_exception_s
        except Exception as e:  # network or decode trouble: try again later
            log.info("pull %s failed: %s", mq, e)
            return cfg.pull_time_delay_when_exception_s
        if pq.dropped:
            return 0
        self._suggested_broker[mq] = result.suggest_which_broker_id
        self._process_pull_result(result, sub)
        if result.status is PullStatus.FOUND:
            a.next_offset = result.next_begin_offset
            if result.messages:
                self.stats["pulled"] += len(result.messages)
                pq.put(result.messages)
                await self._dispatch(a, result.messages)
                return cfg.pull_interval_s
            return 0
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            a.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset
                self.offsets.update(mq, result.next_begin_offset, increase_only=True)
            return 0
        # OFFSET_ILLEGAL: restart the queue from the corrected offset.
        log.warning("pull %s: offset %d illegal, corrected to %d", mq, a.next_offset,
                    result.next_begin_offset)  # fmt: skip
        a.next_offset = result.next_begin_offset
        pq.dropped = True
        self.offsets.update(mq, result.next_begin_offset, increase_only=False)
        await self._persist_quietly(mq)
        if self.assigned.get(mq) is a:
            self.assigned.pop(mq, None)
            self.offsets.remove(mq)
        self.rebalance_now()
        return 0

    @staticmethod
    def _process_pull_result(result: PullResult, sub: SubscriptionData) -> None:
        if result.status is not PullStatus.FOUND:
            return
        result.messages = filter_by_tags(result.messages, sub)
        for m in result.messages:
            m.properties[PROPERTY_MIN_OFFSET] = str(result.min_offset)
            m.properties[PROPERTY_MAX_OFFSET] = str(result.max_offset)

    async def _dispatch(self, a: _Assignment, msgs: list[MessageExt]) -> None:
        raise NotImplementedError

    # ---- in-flight accounting --------------------------------------------------------------

    def _begin(self) -> None:
        self._inflight += 1
        if self._idle.is_set():
            self._idle = trio.Event()

    def _end(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    # ---- sending back ----------------------------------------------------------------------

    def max_reconsume_times(self) -> int:
        if self.cfg.max_reconsume_times >= 0:
            return self.cfg.max_reconsume_times
        return INTEGER_MAX if self.orderly else DEFAULT_MAX_RECONSUME_TIMES

    async def send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the broker the message was read from."""
        routes = self.instance.routes
        addr = routes.master_addr(mq.broker_name) or msg.store_host
        try:
            await self.instance.api.send_back(
                addr,
                msg,
                group=self.group,
                delay_level=delay_level,
                max_reconsume_times=self.max_reconsume_times(),
                broker_name=mq.broker_name,
            )
        except Exception as e:
            log.warning("send back of %s to %s failed: %s", msg.msg_id, addr, e)
            return False
        self.stats["sent_back"] += 1
        rt = retry_topic(self.group)
        if not any(q.topic == rt for q in self.assigned):
            self.rebalance_now()  # pick up the retry topic's queue soon
        return True


# ---------------------------------------------------------------------------------------------
# Push consumer


class PushConsumer(ConsumerCore):
    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        subscriptions: str | Mapping[str, str],
        listener: ConcurrentListener | OrderlyListener,
        *,
        expression: str = "*",
        orderly: bool = False,
        consume_from: ConsumeFrom | None = None,
        config: ConsumerConfig | None = None,
    ) -> None:
        cfg = config or ConsumerConfig()
        if consume_from is not None:
            cfg = replace(cfg, consume_from=consume_from)
        super().__init__(group, namesrv_addrs, subscriptions, expression=expression, config=cfg)
        self.orderly = orderly
        self.listener = listener
        self._limiter = trio.CapacityLimiter(max(1, cfg.consume_concurrency))

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.shutdown()
        return None

    # ---- dispatch --------------------------------------------------------------------------

    def _start_queue(self, a: _Assignment) -> None:
        super()._start_queue(a)
        if self.orderly:
            a.consume_scope = self.spawn(self._consume_orderly_loop, a)

    async def _dispatch(self, a: _Assignment, msgs: list[MessageExt]) -> None:
        if self.orderly:
            return  # the queue's own task picks them up (pq.put woke it)
        n = max(1, self.cfg.consume_message_batch_max_size)
        for i in range(0, len(msgs), n):
            self._begin()
            self.spawn(self._consume_concurrently, a, msgs[i : i + n], 0.0)

    # ---- concurrent ------------------------------------------------------------------------

    async def _consume_concurrently(
        self, a: _Assignment, msgs: list[MessageExt], delay_s: float
    ) -> None:
        try:
            if delay_s > 0:
                await trio.sleep(delay_s)
            if a.pq.dropped or self._stopping:
                return
            async with self._limiter:
                if a.pq.dropped or self._stopping:
                    return
                await self._consume_concurrently_now(a, msgs)
        finally:
            self._end()

    async def _consume_concurrently_now(self, a: _Assignment, msgs: list[MessageExt]) -> None:
        reset_retry_topic(msgs, self.group)
        ctx = ConcurrentContext(a.mq)
        status: ConsumeStatus | None
        try:
            status = await _call(self.listener, msgs, ctx)  # type: ignore[arg-type]
        except trio.Cancelled:
            raise
        except Exception:
            log.exception("consumer %s: listener failed on %d messages of %s", self.group,
                          len(msgs), a.mq)  # fmt: skip
            status = None
        if not isinstance(status, ConsumeStatus):
            status = ConsumeStatus.RECONSUME_LATER
        if status is ConsumeStatus.CONSUME_SUCCESS:
            ack = min(ctx.ack_index, len(msgs) - 1)
            self.stats["consumed"] += ack + 1
        else:
            ack = -1
        back_failed: list[MessageExt] = []
        for m in msgs[ack + 1 :]:
            if not await self.send_back(m, a.mq, ctx.delay_level_when_next_consume):
                m.reconsume_times += 1
                back_failed.append(m)
        done = [m for m in msgs if not any(m is f for f in back_failed)]
        offset = a.pq.remove(done)
        if offset >= 0 and not a.pq.dropped:
            self.offsets.update(a.mq, offset, increase_only=True)
        if back_failed:
            # The broker did not take them back: consume them again here, later.
            self.stats["retried_local"] += len(back_failed)
            self._begin()
            self.spawn(
                self._consume_concurrently, a, back_failed, self.cfg.send_back_failed_delay_s
            )

    # ---- orderly ---------------------------------------------------------------------------

    async def _consume_orderly_loop(self, a: _Assignment) -> None:
        pq, mq = a.pq, a.mq
        while not pq.dropped and not self._stopping:
            if pq.msg_count == 0:
                await pq.changed.wait()
                continue
            if not pq.locked or pq.lock_expired(self.cfg.lock_max_live_time_s):
                # tryLockLaterAndReconsume
                if not await self.lock_one(mq):
                    with trio.move_on_after(self.cfg.pull_time_delay_when_exception_s):
                        await pq.changed.wait()
                continue
            suspend_s = 0.0
            self._begin()
            try:
                async with self._limiter, pq.consume_lock:
                    if pq.dropped or self._stopping:
                        return
                    suspend_s = await self._consume_orderly_once(a)
            finally:
                self._end()
            if suspend_s > 0:
                await trio.sleep(suspend_s)

    async def _consume_orderly_once(self, a: _Assignment) -> float:
        pq, mq = a.pq, a.mq
        msgs = pq.take(max(1, self.cfg.consume_message_batch_max_size))
        if not msgs:
            return 0.0
        reset_retry_topic(msgs, self.group)
        ctx = OrderlyContext(mq)
        status: OrderlyStatus | None
        try:
            status = await _call(self.listener, msgs, ctx)  # type: ignore[arg-type]
        except trio.Cancelled:
            pq.make_consume_again(msgs)
            raise
        except Exception:
            log.exception("consumer %s: orderly listener failed on %s", self.group, mq)
            status = None
        if not isinstance(status, OrderlyStatus):
            status = OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        suspend_s = 0.0
        commit = -1
        if status is OrderlyStatus.SUCCESS:
            self.stats["consumed"] += len(msgs)
            commit = pq.commit() if ctx.auto_commit else -1
        elif await self._needs_suspend(msgs, mq):
            pq.make_consume_again(msgs)
            suspend_s = (
                ctx.suspend_current_queue_time_s
                if ctx.suspend_current_queue_time_s is not None
                else self.cfg.suspend_current_queue_time_s
            )
        else:
            commit = pq.commit()  # every message went to the dead-letter queue
        # Unlike RocketMQ, a batch finished after the queue was dropped in a rebalance is still
        # committed while our lock holds: nobody else can have read the queue meanwhile, and
        # the new owner then starts after it instead of consuming it again.
        still_ours = pq.locked and not pq.lock_expired(self.cfg.lock_max_live_time_s)
        if commit >= 0 and not pq.reset and (not pq.dropped or still_ours):
            self.offsets.update(mq, commit, increase_only=False)
        return suspend_s

    async def _needs_suspend(self, msgs: list[MessageExt], mq: MessageQueue) -> bool:
        """checkReconsumeTimes: a message retried maxReconsumeTimes goes to the DLQ (delay
        level -1); otherwise the batch is consumed again after a pause."""
        suspend = False
        for m in msgs:
            if m.reconsume_times >= self.max_reconsume_times():
                if not await self.send_back(m, mq, -1):
                    suspend = True
                    m.reconsume_times += 1
            else:
                suspend = True
                m.reconsume_times += 1
        return suspend
