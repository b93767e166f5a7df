"""Queue allocation among the consumers of a group (RocketMQ's AllocateMessageQueueStrategy).

Every member computes its own share from the same inputs (all queues, all client ids), so the
algorithm and the sort orders must be exactly Java's for a mixed Java/Python group to agree:
queues sorted by (topic, brokerName, queueId) with Java String.compareTo (UTF-16 code units),
client ids sorted the same way."""

from __future__ import annotations

from collections.abc import Sequence

from rmq_ha.protocol.models import MessageQueue


def java_str_key(s: str) -> bytes:
    """Sort key matching Java's String.compareTo (UTF-16 code unit order)."""
    return s.encode("utf-16-be", "surrogatepass")


def sort_queues(mqs: Sequence[MessageQueue]) -> list[MessageQueue]:
    """MessageQueue.compareTo: topic, then brokerName, then queueId."""
    return sorted(
        mqs, key=lambda q: (java_str_key(q.topic), java_str_key(q.broker_name), q.queue_id)
    )


def sort_client_ids(cids: Sequence[str]) -> list[str]:
    return sorted(cids, key=java_str_key)


def allocate_averagely(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """AllocateMessageQueueAveragely: consecutive blocks; the first `len(mq) % len(cid)`
    consumers get one extra queue. Inputs must already be sorted (the caller sorts, as
    RebalanceImpl does). A client not in the list gets nothing."""
    if not current_cid or not mq_all or not cid_all or current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    n_mq, n_cid = len(mq_all), len(cid_all)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n_mq - start)
    return [mq_all[(start + i) % n_mq] for i in range(max(0, count))]


def allocate_averagely_by_circle(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """AllocateMessageQueueAveragelyByCircle: queue i goes to consumer i % len(cid)."""
    if not current_cid or not mq_all or not cid_all or current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    return [mq for i, mq in enumerate(mq_all) if i % len(cid_all) == index]
