"""Producers and consumers known to a broker, from their heartbeats (RocketMQ's
ConsumerManager / ProducerManager). A consumer group's membership change is announced to its
members (NOTIFY_CONSUMER_IDS_CHANGED) so they rebalance at once.

Clients are kept per connection, as RocketMQ keys them by channel: two processes that use one
client id (the same instanceName on one host, a container image run twice) are two entries, so
one of them leaving does not take the other out of its group (Go probe: killing one emptied
the group until the other's next heartbeat). The group's consumer id list names each id once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rmq_ha.net.connection import Connection
from rmq_ha.protocol.models import ConsumerData, SubscriptionData


@dataclass
class ClientInfo:
    client_id: str
    conn: Connection
    language: int
    version: int
    last_update_ms: int

    @property
    def key(self) -> ClientKey:
        """Its entry: the client id on this connection."""
        return (self.client_id, id(self.conn))


#: (client id, id of its connection): the connection is held by the entry, so its id is not
#: reused while the entry exists.
ClientKey = tuple[str, int]


@dataclass
class ConsumerGroup:
    clients: dict[ClientKey, ClientInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


class ClientManager:
    def __init__(self, expire_ms: int = 120_000) -> None:
        self.expire_ms = expire_ms
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict[ClientKey, ClientInfo]] = {}
        #: (group, topic) -> the subscription a pull carried (bounded by the groups and
        #: topics that pull)
        self.compensated: dict[tuple[str, str], SubscriptionData] = {}

    def register_consumer(self, data: ConsumerData, info: ClientInfo) -> bool:
        """Returns True when the group's membership changed."""
        g = self.consumers.setdefault(data.group_name, ConsumerGroup())
        changed = info.client_id not in self._ids(g.clients)
        g.clients[info.key] = info
        g.consume_type = data.consume_type
        g.message_model = data.message_model
        g.consume_from_where = data.consume_from_where
        for sub in data.subscription_data_set:
            g.subscriptions[sub.topic] = sub
        return changed

    def register_producer(self, group: str, info: ClientInfo) -> None:
        self.producers.setdefault(group, {})[info.key] = info

    @staticmethod
    def _ids(clients: dict[ClientKey, ClientInfo]) -> set[str]:
        return {cid for cid, _ in clients}

    def unregister(
        self,
        client_id: str,
        producer_group: str | None,
        consumer_group: str | None,
        conn: Connection,
    ) -> list[str]:
        """UNREGISTER_CLIENT on `conn`: that connection's entry leaves the groups (another
        process with the same id stays). Returns the consumer groups whose membership
        changed."""
        key = (client_id, id(conn))
        if producer_group:
            clients = self.producers.get(producer_group)
            if clients is not None:
                clients.pop(key, None)
                if not clients:  # an emptied group goes (RocketMQ's ProducerManager)
                    del self.producers[producer_group]
        changed = []
        if consumer_group:
            g = self.consumers.get(consumer_group)
            if g is not None and g.clients.pop(key, None) is not None:
                changed.append(consumer_group)
                if not g.clients:
                    del self.consumers[consumer_group]
        return changed

    def drop_connection(self, conn: Connection) -> list[str]:
        """A connection closed: every client on it leaves its groups."""
        return self._drop(lambda c: c.conn is conn)

    def expire(self, now_ms: int) -> list[str]:
        return self._drop(lambda c: now_ms - c.last_update_ms > self.expire_ms)

    def _drop(self, pred: Callable[[ClientInfo], bool]) -> list[str]:
        changed = []
        for group, g in list(self.consumers.items()):
            gone = [k for k, c in g.clients.items() if pred(c)]
            for k in gone:
                del g.clients[k]
            if gone:
                changed.append(group)
            if not g.clients:
                del self.consumers[group]
        for group, clients in list(self.producers.items()):
            for k in [k for k, c in clients.items() if pred(c)]:
                del clients[k]
            if not clients:  # a short-lived producer group each kept an entry (probe)
                del self.producers[group]
        return changed

    def consumer_ids(self, group: str) -> list[str]:
        g = self.consumers.get(group)
        return sorted(self._ids(g.clients)) if g else []

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The group's subscription to `topic`: from its members' heartbeats, else the one
        its last pull carried (RocketMQ's compensateSubscribeData)."""
        g = self.consumers.get(group)
        sub = g.subscriptions.get(topic) if g else None
        return sub if sub is not None else self.compensated.get((group, topic))

    def compensate(self, group: str, sub: SubscriptionData) -> None:
        """A pull that carried its subscription (a pull consumer without heartbeat
        subscriptions): remembered for the admin views (queryCq, consume stats)."""
        self.compensated[(group, sub.topic)] = sub

    def forget(self, *, topic: str | None = None, group: str | None = None) -> int:
        """Drops the subscriptions pulls carried for a deleted topic or group (kept for ever
        before, one per (group, topic), probe); returns how many went."""
        gone = [
            k
            for k in self.compensated
            if (topic is not None and k[1] == topic) or (group is not None and k[0] == group)
        ]
        for k in gone:
            del self.compensated[k]
        return len(gone)

    def producer_by_id(self, client_id: str) -> Connection | None:
        """The live connection of the producer client ``client_id`` (any group): where a
        request-reply answer is pushed (RocketMQ's ProducerManager.findChannel)."""
        for clients in self.producers.values():
            for c in clients.values():
                if c.client_id == client_id and not c.conn.closed:
                    return c.conn
        return None

    def consumer_connection(self, group: str, client_id: str) -> Connection | None:
        """The live connection of consumer ``client_id`` of ``group`` (RocketMQ's
        ConsumerManager.findChannel): where an admin's question to that client goes."""
        g = self.consumers.get(group)
        for c in g.clients.values() if g is not None else ():
            if c.client_id == client_id and not c.conn.closed:
                return c.conn
        return None

    def producer_connection(self, group: str) -> Connection | None:
        """A live connection of the producer group (for CHECK_TRANSACTION_STATE)."""
        for c in self.producers.get(group, {}).values():
            if not c.conn.closed:
                return c.conn
        return None
