"""What request handlers and special services may read and do: small Protocols, and `Ports`,
the record the wiring (broker.py) hands them. No handler depends on the `Broker` object or on
another component's insides: the role is read through `RoleView`, topics through
`TopicsPort`, replication through `Replication`, the special services' routing through
`SpecialRouting`, the storage services through `Storage`; the store, offsets, clients, locks
and parked pulls are components of their own with small APIs of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rmq_ha.broker.clients import ClientManager
from rmq_ha.broker.core.storage import ReadVerdict
from rmq_ha.broker.locks import QueueLocks
from rmq_ha.broker.longpoll import PullHold
from rmq_ha.broker.metrics import Traffic
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.config import BrokerConfig
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.admin import SubscriptionGroupConfig
from rmq_ha.protocol.models import DataVersion, TopicConfig
from rmq_ha.store import AsyncStore


class RoleView(Protocol):
    """The broker's role as the data plane sees it (implemented by `core.RoleCore`)."""

    @property
    def is_master(self) -> bool: ...

    @property
    def serving_master(self) -> bool: ...

    @property
    def acting(self) -> bool:
        """A classic slave acting for its dead master (RIP-32)."""
        ...

    @property
    def data_plane_fenced(self) -> bool:
        """FMQ: an isolated master that refuses sends, pulls, pops, acks, locks, commits."""
        ...

    @property
    def group_members(self) -> dict[int, str]:
        """The group's live replicas (id -> address), as last learned."""
        ...

    def write_refusal(self) -> tuple[str, str] | None: ...


#: How long a request that created a topic waits for the name servers to hear of it before
#: it is answered (RocketMQ's registerBrokerAll waits for each name server, 3 s by default).
ANNOUNCE_TIMEOUT_S = 3.0


class TopicsPort(Protocol):
    """Topic configs, and the registration their changes trigger."""

    @property
    def table(self) -> dict[str, TopicConfig]: ...

    @property
    def data_version(self) -> DataVersion: ...

    def get(self, topic: str) -> TopicConfig | None: ...

    def update(self, tc: TopicConfig) -> None: ...

    def delete(self, topic: str) -> bool: ...

    def protected(self, topic: str) -> bool:
        """A system topic or one of the broker's own routes: an admin may not delete it."""
        ...

    def for_write(
        self, topic: str, default_topic: str | None, queue_nums: int
    ) -> TopicConfig | None: ...

    def system(self, topic: str, queue_nums: int = 1, *, persist_now: bool = True) -> TopicConfig:
        """A read-write system topic (retry, DLQ, ...), created and announced if new."""
        ...

    def changed(self) -> None:
        """Register with the name servers soon: the table changed."""
        ...

    async def announced(self, timeout_s: float) -> None:
        """Return once a registration with the name servers that began after the last change
        has finished (at most ``timeout_s``; at once without name servers)."""
        ...


class ReplicationOutcomeLike(Protocol):
    @property
    def ok(self) -> bool: ...

    @property
    def reason(self) -> str: ...


class Replication(Protocol):
    """The send path's view of replication."""

    def after_append(self) -> None: ...

    async def wait_replicated(self, end_offset: int) -> ReplicationOutcomeLike: ...

    def when_replicated(
        self, end_offset: int, done: Callable[[ReplicationOutcomeLike], None]
    ) -> None: ...


class SpecialRouting(Protocol):
    """Where the special services make a send go (transaction halves, delays, timers)."""

    def not_allowed_send(self, topic: str, producer_group: str = "") -> bool: ...

    def may_route(self, props: bytes) -> bool: ...

    def send_refusal(self, props: bytes) -> str | None:
        """Why the special services refuse a send (None: taken); only for `may_route`."""
        ...

    def route_send(
        self, topic: str, queue_id: int, props: bytes, sys_flag: int
    ) -> tuple[str, int, bytes, int]: ...


class Storage(Protocol):
    """The storage services (broker/io/storage.py): damaged records in reads, health,
    retention on request."""

    def judge(
        self, skipped: Sequence[tuple[int, int, int, str]], topic: str, queue_id: int
    ) -> ReadVerdict:
        """What a read that met these skipped units (`Store.read_queue`) serves now."""
        ...

    async def wait_repair(self, timeout_s: float) -> None:
        """Returns after a repair or the timeout."""
        ...

    def health(self) -> dict[str, Any]: ...

    async def manual_round(self) -> None:
        """A retention round now (DELETE_EXPIRED_COMMITLOG)."""
        ...

    def out_of_space(self, why: str) -> None:
        """A write failed for want of space: the disk is full now (writes are refused until a
        retention round finds room)."""
        ...


class SubscriptionGroups(Protocol):
    """The operator's subscription-group configs, as the consume paths check them."""

    def consume_refusal(self, group: str) -> str | None:
        """Why the group may not consume (consumeEnable=false), or None."""
        ...

    def retry_max_times(self, group: str) -> int:
        """The group's retryMaxTimes (16 without a config)."""
        ...

    def ensure(self, group: str, *, persist_now: bool = True) -> bool:
        """Creates a default config for a group without one; True when it did."""
        ...

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, None without one."""
        ...


@dataclass
class Ports:
    """Everything a handler or special service may use, wired once by broker.py. Not frozen
    for one reason: UPDATE_BROKER_CONFIG replaces `cfg` as a whole with a record that differs
    only in runtime-safe keys (broker/handlers/config.py); nothing else is reassigned."""

    cfg: BrokerConfig
    #: "host:port" announced to name servers and clients; the store host written into records.
    address: str
    store_host: tuple[str, int]
    store: AsyncStore
    topics: TopicsPort
    offsets: ConsumerOffsetManager
    clients: ClientManager
    locks: QueueLocks
    hold: PullHold
    role: RoleView
    replication: Replication
    #: The client this broker uses towards other brokers and name servers.
    outbound: RemotingClient
    storage: Storage
    subgroups: SubscriptionGroups
    #: Messages and bytes in and out (rocketmq_messages_in_total ...; broker/metrics.py).
    traffic: Traffic = field(default_factory=Traffic)
    #: Called before a special service writes to this broker's store (a delayed message coming
    #: due, a transaction op): the role decides isolation now, as it does for a client's
    #: request, not at its next tick (a scanner waking right after SIGCONT wrote one delayed
    #: message before the fence). The wiring sets it.
    before_internal_write: Callable[[], None] = field(default=lambda: None)
