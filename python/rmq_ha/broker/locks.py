"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager): a consumer group's
client holds a message queue for `lock_expire_ms` unless it renews; others cannot take it
until then. Pure: time is passed in."""

from __future__ import annotations

from dataclasses import dataclass

#: (topic, brokerName, queueId)
QueueKey = tuple[str, str, int]


@dataclass
class LockEntry:
    client_id: str
    last_update_ms: int


class QueueLocks:
    def __init__(self, expire_ms: int) -> None:
        self.expire_ms = expire_ms
        self._table: dict[str, dict[QueueKey, LockEntry]] = {}

    def _live(self, e: LockEntry, now_ms: int) -> bool:
        return now_ms - e.last_update_ms <= self.expire_ms

    def try_lock_batch(
        self, group: str, mqs: list[QueueKey], client_id: str, now_ms: int
    ) -> list[QueueKey]:
        """Locks (or renews) every queue not held by another live client; returns those now
        held by `client_id`."""
        table = self._table.setdefault(group, {})
        got = []
        for mq in mqs:
            e = table.get(mq)
            if e is None or e.client_id == client_id or not self._live(e, now_ms):
                table[mq] = LockEntry(client_id, now_ms)
                got.append(mq)
        return got

    def unlock_batch(self, group: str, mqs: list[QueueKey], client_id: str) -> None:
        table = self._table.get(group, {})
        for mq in mqs:
            e = table.get(mq)
            if e is not None and e.client_id == client_id:
                del table[mq]

    def any_live(self, group: str, now_ms: int) -> bool:
        """Whether some queue is locked by the group (an orderly consumer's group; RocketMQ's
        ``!isLockAllExpired``)."""
        return any(self._live(e, now_ms) for e in self._table.get(group, {}).values())

    def holder(self, group: str, mq: QueueKey, now_ms: int) -> str | None:
        e = self._table.get(group, {}).get(mq)
        return e.client_id if e is not None and self._live(e, now_ms) else None


def strict_quorum(total_replicas: int) -> int:
    """lockInStrictMode: how many replicas of the group (this one included) must lock a queue
    before a client holds it: a majority of totalReplicas."""
    return total_replicas // 2 + 1


def strict_lock_forwarded(strict: bool, only_this_broker: bool, total_replicas: int) -> bool:
    """Whether LOCK_BATCH_MQ must be forwarded to the other replicas (strict mode, not a
    forward itself, and a quorum larger than this replica)."""
    return strict and not only_this_broker and strict_quorum(total_replicas) > 1


def quorum_locked(
    got: list[QueueKey], others: list[list[QueueKey]], total_replicas: int
) -> list[QueueKey]:
    """The queues of `got` (locked here) that enough replicas locked: `others` holds what each
    other replica that answered the forward locked."""
    counts = dict.fromkeys(got, 1)
    for locked in others:
        for k in locked:
            if k in counts:
                counts[k] += 1
    need = strict_quorum(total_replicas)
    return [k for k, n in counts.items() if n >= need]
