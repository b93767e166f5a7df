"""Server-side load balancing (RocketMQ 5's QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE).

A consumer built with ``clientRebalance=false``, or whose group an admin switched to pop mode
(``mqadmin setConsumeMode`` / ``DefaultMQAdminExt.setMessageRequestMode``), does not compute
its own queues: it asks a broker of the topic, every rebalance (20 s, and on a group change),
and reads what the answer names, by pull or by pop. The broker allocates with the client's
strategy over every readable queue of the topic's route and the group's clients it knows from
heartbeats (every client heartbeats every broker), so any broker gives the same answer.

Pure: ``assign`` takes the queues and the client ids; `RequestModes` is the persisted table
of modes (``config/messageRequestMode.json``, kept with a backup like the other config files).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rmq_ha.client.allocate import (
    allocate_averagely,
    allocate_averagely_by_circle,
    sort_client_ids,
    sort_queues,
)
from rmq_ha.durable import read_with_backup, write_with_backup
from rmq_ha.protocol.models import MessageQueue, SetMessageRequestModeRequestBody

RETRY_PREFIX = "%RETRY%"
PULL = "PULL"
POP = "POP"
MODES = (PULL, POP)
#: AllocateMessageQueueStrategy.getName() of the strategies a broker runs (RocketMQ's set).
STRATEGIES = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
}


def assign(
    *,
    client_id: str,
    model: str,
    strategy: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
    mode: str = PULL,
    pop_share: int = 0,
) -> list[MessageQueue] | None:
    """The queues `client_id` reads, or None when there is no valid answer (an unknown
    strategy; the consumer then keeps what it has). BROADCASTING: every queue. CLUSTERING in
    pull mode: the strategy's share. In pop mode: with ``pop_share <= 0`` every broker of the
    topic as one queue id -1 (pop from any of its queues), else the client's share plus the
    shares of the ``pop_share`` clients after it (more consumers than queues: one queue each,
    round robin)."""
    if model == "BROADCASTING":
        return sort_queues(mq_all)
    alloc = STRATEGIES.get(strategy)
    if alloc is None:
        return None
    mqs = sort_queues(mq_all)
    cids = sort_client_ids(cid_all)
    if not mqs or client_id not in cids:
        return []
    if mode != POP:
        return alloc(client_id, mqs, cids)
    if pop_share <= 0:
        brokers = sorted({(q.topic, q.broker_name) for q in mqs})
        return [MessageQueue(topic=t, broker_name=b, queue_id=-1) for t, b in brokers]
    index = cids.index(client_id)
    if len(cids) > len(mqs):
        return [mqs[index % len(mqs)]]
    out = list(alloc(client_id, mqs, cids))
    for k in range(1, pop_share + 1):
        out += alloc(cids[(index + k) % len(cids)], mqs, cids)
    seen: set[tuple[str, str, int]] = set()
    unique = []
    for q in out:
        key = (q.topic, q.broker_name, q.queue_id)
        if key not in seen:
            seen.add(key)
            unique.append(q)
    return unique


class RequestModes:
    """(topic, group) -> how the group reads the topic, persisted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[tuple[str, str], SetMessageRequestModeRequestBody] = {}
        read_with_backup(path, self._adopt, "message request modes")

    def _adopt(self, raw: bytes) -> bool:
        doc = json.loads(raw)
        table: dict[tuple[str, str], SetMessageRequestModeRequestBody] = {}
        for topic, groups in doc["messageRequestModeMap"].items():
            for group, body in groups.items():
                m = SetMessageRequestModeRequestBody.from_obj(body)
                if m.mode not in MODES or not isinstance(m.pop_share_queue_num, int):
                    raise ValueError(f"{topic}@{group}: bad mode {m.mode!r}")
                table[(str(topic), str(group))] = m
        self.table = table
        return True

    def get(self, topic: str, group: str) -> SetMessageRequestModeRequestBody:
        """The mode set for the pair; PULL when none was (a retry topic is always PULL)."""
        m = self.table.get((topic, group))
        if m is None or topic.startswith(RETRY_PREFIX):
            return SetMessageRequestModeRequestBody(topic=topic, consumer_group=group, mode=PULL)
        return m

    def set(self, body: SetMessageRequestModeRequestBody) -> None:
        self.table[(body.topic, body.consumer_group)] = body
        self.persist()

    def to_json(self) -> bytes:
        """The table as RocketMQ's MessageRequestModeSerializeWrapper (the file's shape, and
        GET_ALL_MESSAGE_REQUEST_MODE's body)."""
        modes: dict[str, dict[str, object]] = {}
        for (topic, group), m in sorted(self.table.items()):
            modes.setdefault(topic, {})[group] = m.to_obj()
        return json.dumps({"messageRequestModeMap": modes}, sort_keys=True).encode()

    def adopt(self, raw: bytes) -> bool:
        """A slave's copy of its master's table (RocketMQ's syncMessageRequestMode), taken
        whole; True when it changed. A bad body changes nothing (ValueError)."""
        before = dict(self.table)
        self._adopt(raw)
        if self.table == before:
            return False
        self.persist()
        return True

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_with_backup(self.path, self.to_json())
