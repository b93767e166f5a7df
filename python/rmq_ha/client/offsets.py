"""Consumer offsets kept by the broker (RocketMQ's RemoteBrokerOffsetStore).

The consumer advances offsets in memory as messages are consumed; `persist_all` writes every
assigned queue's offset to its broker (UPDATE_CONSUMER_OFFSET, oneway, as RocketMQ) every
persistConsumerOffsetInterval; `persist` writes one queue synchronously (a rebalance loss, a
shutdown). `read_from_store` asks the broker (QUERY_CONSUMER_OFFSET): None means the group has
no offset on that queue yet."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rmq_ha.client.errors import BrokerNotFoundError
from rmq_ha.client.instance import ClientInstance
from rmq_ha.protocol.models import MessageQueue

log = logging.getLogger(__name__)


class RemoteBrokerOffsetStore:
    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def read(self, mq: MessageQueue) -> int | None:
        """The in-memory offset (READ_FROM_MEMORY)."""
        return self.table.get(mq)

    async def _addr(self, mq: MessageQueue) -> str:
        routes = self.instance.routes
        addr = routes.master_addr(mq.broker_name) or routes.find_broker_addr(mq.broker_name)
        if addr is None:
            await routes.update(mq.topic)
            addr = routes.master_addr(mq.broker_name) or routes.find_broker_addr(mq.broker_name)
        if addr is None:
            raise BrokerNotFoundError(f"broker {mq.broker_name} not found", mq.broker_name)
        return addr

    async def read_from_store(self, mq: MessageQueue) -> int | None:
        """READ_FROM_STORE: the broker's committed offset (also cached); None if not found."""
        addr = await self._addr(mq)
        off = await self.instance.api.query_consumer_offset(addr, self.group, mq)
        if off is not None:
            self.update(mq, off, increase_only=False)
        return off

    async def persist(self, mq: MessageQueue) -> None:
        """One queue, waiting for the broker's answer."""
        off = self.table.get(mq)
        if off is None:
            return
        addr = await self._addr(mq)
        await self.instance.api.update_consumer_offset(addr, self.group, mq, off, oneway=False)

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        """Every given queue that has an offset; a failure is logged, the others still go."""
        for mq in sorted(mqs):
            off = self.table.get(mq)
            if off is None:
                continue
            try:
                addr = await self._addr(mq)
                await self.instance.api.update_consumer_offset(
                    addr, self.group, mq, off, oneway=oneway
                )
            except Exception as e:  # next round retries
                log.info("persist offset %d of %s failed: %s", off, mq, e)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
