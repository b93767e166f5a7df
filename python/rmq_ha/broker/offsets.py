"""Consumer offsets per (topic, group, queue id), persisted like RocketMQ's consumerOffset.json.

File shape: {"offsetTable": {"<topic>@<group>": {"<queueId>": offset, ...}, ...},
"dataVersion": {"timestamp": ms, "counter": n, "stateVersion": 0}}. Written atomically (temp
file, fsync, rename, fsync dir) by `persist()`, which the broker calls every
flushConsumerOffsetInterval and at shutdown. The data version is bumped on every commit; the
slave-acting-master work compares it across replicas.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rmq_ha.durable import write_atomic
from rmq_ha.errors import CorruptFileError


class ConsumerOffsetManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        self.counter = 0
        self.timestamp_ms = 0
        self._dirty = False
        self._load()

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            for key, queues in doc.get("offsetTable", {}).items():
                self.table[str(key)] = {int(q): int(o) for q, o in queues.items()}
            dv = doc.get("dataVersion") or {}
            self.counter = int(dv.get("counter", 0))
            self.timestamp_ms = int(dv.get("timestamp", 0))
        except (ValueError, TypeError, AttributeError) as e:
            raise CorruptFileError(
                f"consumer offsets {self.path} are unreadable: {e}", str(self.path)
            ) from None

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self.counter += 1
        self.timestamp_ms = int(time.time() * 1000)
        self._dirty = True

    def merge_from_json(self, raw: bytes) -> None:
        """A slave adopts its master's offsets (the master is where consumers commit)."""
        doc = json.loads(raw)
        for key, queues in doc.get("offsetTable", {}).items():
            mine = self.table.setdefault(str(key), {})
            for q, o in queues.items():
                if mine.get(int(q)) != int(o):
                    mine[int(q)] = int(o)
                    self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of_topic(self, topic: str) -> list[str]:
        return [k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "offsetTable": {
                    k: {str(q): o for q, o in sorted(v.items())}
                    for k, v in sorted(self.table.items())
                },
                "dataVersion": {
                    "timestamp": self.timestamp_ms,
                    "counter": self.counter,
                    "stateVersion": 0,
                },
            },
            sort_keys=False,
        ).encode()

    def persist(self, force: bool = False) -> bool:
        if not (self._dirty or force):
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, self.to_json())
        self._dirty = False
        return True
