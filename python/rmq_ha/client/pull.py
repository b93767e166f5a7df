"""Pull-style consumers.

`PullConsumer` (RocketMQ's DefaultMQPullConsumer): the application picks queues and offsets.

    async with PullConsumer("cg", ns) as c:
        for mq in await c.fetch_subscribe_queues("T"):
            offset = await c.fetch_consume_offset(mq) or 0
            r = await c.pull(mq, "*", offset, 32)
            ...
            c.update_consume_offset(mq, r.next_begin_offset)
        await c.commit()          # UPDATE_CONSUMER_OFFSET for every updated queue

`LitePullConsumer` (DefaultLitePullConsumer, subscribe mode): queues are assigned by the same
rebalance as the push consumer, pull loops fill a bounded buffer, `poll()` hands out batches.
With auto-commit (default) a polled batch counts as consumed: its offset is committed with the
next periodic commit (persistConsumerOffsetInterval) or `commit()`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType

import trio

from rmq_ha.client.api import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from rmq_ha.client.api import PullResult as PullResult
from rmq_ha.client.api import PullStatus as PullStatus
from rmq_ha.client.config import ClientConfig, ConsumerConfig, parse_namesrv_addrs
from rmq_ha.client.consumer import (
    ConsumerCore,
    ProcessQueue,
    _Assignment,
    build_subscription,
    filter_by_tags,
    reset_retry_topic,
)
from rmq_ha.client.errors import BrokerNotFoundError, ClientStateError, RouteNotFoundError
from rmq_ha.client.instance import ClientInstance
from rmq_ha.client.message import MessageExt
from rmq_ha.client.offsets import RemoteBrokerOffsetStore
from rmq_ha.protocol.models import (
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)

log = logging.getLogger(__name__)


class PullConsumer:
    consume_type = ConsumeType.CONSUME_ACTIVELY

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        *,
        config: ClientConfig | None = None,
        broker_suspend_max_time_s: float = 20.0,
    ) -> None:
        self.group = group
        self.cfg = config or ClientConfig()
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self.broker_suspend_max_time_s = broker_suspend_max_time_s
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._instance: ClientInstance | None = None
        self._offsets: RemoteBrokerOffsetStore | None = None
        self._stack: AsyncExitStack | None = None
        self._dirty: set[MessageQueue] = set()

    async def __aenter__(self) -> PullConsumer:
        stack = AsyncExitStack()
        self._instance = await stack.enter_async_context(
            ClientInstance(self.namesrv_addrs, self.cfg)
        )
        self._instance.consumers[self.group] = self
        self._offsets = RemoteBrokerOffsetStore(self._instance, self.group)
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None
        with trio.move_on_after(self.cfg.mq_client_api_timeout_s * 2) as scope:
            scope.shield = True
            await self.commit()
            await self.instance.unregister_client(consumer_group=self.group)
        await self._stack.aclose()
        return None

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

    # ---- the instance's view ---------------------------------------------------------------

    def topics(self) -> list[str]:
        return list(self._subscriptions)

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=self.consume_type,
            message_model=MessageModel.CLUSTERING,
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=list(self._subscriptions.values()),
        )

    def rebalance_now(self) -> None:
        """A pull consumer does not rebalance."""

    async def reset_offsets(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        """A pull consumer's caller keeps its offsets: a broker's reset notice changes nothing
        here (as RocketMQ's client, which resets push consumers only); the caller reads the
        committed offsets again if it wants them."""
        log.info(
            "pull consumer %s: offsets of %s reset by the broker (%d queues); "
            "not applied, the caller keeps its own offsets",
            self.group,
            topic,
            len(table),
        )

    # ---- queues and pulls ------------------------------------------------------------------

    async def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of the topic (fetchSubscribeMessageQueues)."""
        if topic not in self._subscriptions:
            self._subscriptions[topic] = build_subscription(topic, "*")
        mqs = await self.instance.routes.subscribe_queues(topic)
        if mqs is None:
            raise RouteNotFoundError(f"no route info of this topic: {topic}", topic)
        return sorted(mqs)

    async def _addr(self, mq: MessageQueue) -> str:
        routes = self.instance.routes
        addr = routes.find_broker_addr(mq.broker_name)
        if addr is None:
            await routes.update(mq.topic)
            addr = routes.find_broker_addr(mq.broker_name)
        if addr is None:
            raise BrokerNotFoundError(f"broker {mq.broker_name} not found", mq.broker_name)
        return addr

    async def pull(
        self,
        mq: MessageQueue,
        expression: str | None,
        offset: int,
        max_nums: int = 32,
        *,
        block: bool = False,
        timeout_s: float | None = None,
    ) -> PullResult:
        """One PULL_MESSAGE. With `block`, the broker holds the request until a message
        arrives or `broker_suspend_max_time_s` passes (pullBlockIfNotFound)."""
        sub = build_subscription(mq.topic, expression)
        flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if block else 0)
        suspend = self.broker_suspend_max_time_s if block else 0.0
        if timeout_s is None:
            timeout_s = suspend + self.cfg.mq_client_api_timeout_s * (3 if block else 1)
        else:
            suspend = min(suspend, timeout_s * 2 / 3)  # the broker must answer in time
        result = await self.instance.api.pull(
            await self._addr(mq),
            mq.broker_name,
            group=self.group,
            mq=mq,
            offset=offset,
            max_nums=max_nums,
            sys_flag=flag,
            suspend_timeout_s=suspend,
            subscription=sub.sub_string,
            sub_version=sub.sub_version,
            timeout_s=timeout_s,
        )
        result.messages = filter_by_tags(result.messages, sub)
        return result

    # ---- offsets ---------------------------------------------------------------------------

    async def fetch_consume_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset at the broker; None if it has none."""
        return await self.offsets.read_from_store(mq)

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        self.offsets.update(mq, offset, increase_only=False)
        self._dirty.add(mq)

    async def commit(self) -> None:
        """Writes every updated offset to its broker, waiting for the answers."""
        dirty, self._dirty = self._dirty, set()
        await self.offsets.persist_all(dirty, oneway=False)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.instance.api.max_offset(await self._addr(mq), mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.instance.api.min_offset(await self._addr(mq), mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self.instance.api.search_offset(await self._addr(mq), mq, timestamp_ms)


class LitePullConsumer(ConsumerCore):
    consume_type = ConsumeType.CONSUME_ACTIVELY

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        subscriptions: str | Mapping[str, str],
        *,
        expression: str = "*",
        config: ConsumerConfig | None = None,
        auto_commit: bool = True,
        buffer_batches: int = 256,
    ) -> None:
        super().__init__(group, namesrv_addrs, subscriptions, expression=expression, config=config)
        self.auto_commit = auto_commit
        self._send, self._recv = trio.open_memory_channel[tuple[_Assignment, list[MessageExt]]](
            buffer_batches
        )
        self._polled: dict[MessageQueue, tuple[ProcessQueue, list[MessageExt]]] = {}

    async def __aenter__(self) -> LitePullConsumer:
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

    async def _dispatch(self, a: _Assignment, msgs: list[MessageExt]) -> None:
        # Waits while the buffer is full: that is the flow control of this consumer.
        await self._send.send((a, msgs))

    async def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        """The next pulled batch (one queue, in order), or [] after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            with trio.move_on_after(max(0.0, deadline - time.monotonic())):
                a, msgs = await self._recv.receive()
                if a.pq.dropped:
                    continue  # the queue went to another consumer; it reads them again
                reset_retry_topic(msgs, self.group)
                if self.auto_commit:
                    offset = a.pq.remove(msgs)
                    if offset >= 0:
                        self.offsets.update(a.mq, offset, increase_only=True)
                else:
                    self._polled.setdefault(a.mq, (a.pq, []))[1].extend(msgs)
                return msgs
            return []

    async def commit(self) -> None:
        """commitSync: everything polled so far counts as consumed; offsets are written now."""
        for mq, (pq, msgs) in list(self._polled.items()):
            offset = pq.remove(msgs)
            if offset >= 0 and not pq.dropped:
                self.offsets.update(mq, offset, increase_only=True)
        self._polled.clear()
        await self.offsets.persist_all(list(self.assigned), oneway=False)

    def assignment(self) -> list[MessageQueue]:
        return sorted(self.assigned)
