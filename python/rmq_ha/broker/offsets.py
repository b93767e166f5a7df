"""Consumer offsets per (topic, group, queue id), persisted like RocketMQ's consumerOffset.json.

File shape: {"offsetTable": {"<topic>@<group>": {"<queueId>": offset, ...}, ...},
"dataVersion": {"timestamp": ms, "counter": n, "stateVersion": 0}}. Written atomically (temp
file, fsync, rename, fsync dir) by `persist()`, which the broker calls every
flushConsumerOffsetInterval and at shutdown.

The DataVersion (RocketMQ's, with consumerOffsetUpdateVersionStep) moves on once every `step`
commits, and always on the first commit after the table was adopted from the master: a slave
copies its master's table and version, so any commit made while it acts for a dead master makes
its version newer, and the returning master pulls the table back (pre-online, `merge_newer`).
RocketMQ #9711 lost that reverse sync through a badly initialised version; here a fresh table
starts at counter 0 with its creation time, which a slave's bumped version always beats.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from rmq_ha.durable import ConfigFileWriter, read_with_backup, require_keys
from rmq_ha.protocol.models import DataVersion

LONG_MAX = (1 << 63) - 1


def _offset(v: object) -> int:
    """An offset as the file holds it: a whole number from 0 to 2^63 - 1 (a string of digits
    too, as RocketMQ's reader takes it). Anything else (1e30, -5, true, 250.9) is damage: a
    client cannot read it, or it rewinds or skips the group."""
    if isinstance(v, str) and v.isascii() and v.isdigit():
        v = int(v)
    if type(v) is not int or not 0 <= v <= LONG_MAX:
        raise ValueError(f"offset {v!r} is not a whole number from 0 to 2^63 - 1")
    return v


def _queue_id(q: object) -> int:
    n = int(str(q)) if str(q).isascii() and str(q).isdigit() else -1
    if not 0 <= n < 1 << 31:
        raise ValueError(f"queue id {q!r} is not a whole number from 0 to 2^31 - 1")
    return n


def _table_key(key: object) -> str:
    topic, sep, group = str(key).partition("@")
    if not (sep and topic and group):
        raise ValueError(f"key {key!r} is not topic@group")
    return str(key)


class ConsumerOffsetManager:
    def __init__(self, path: Path, version_step: int = 500) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        self.version_step = max(1, version_step)
        self.data_version = DataVersion.initial(_now_ms())
        self._commits = 0
        #: The table was adopted from another replica: the next commit bumps the version.
        self._adopted = False
        #: Commits were made here since the table was last adopted from the master.
        self._local = False
        self._dirty = False
        self._writer = ConfigFileWriter(path)
        self._load()

    def _load(self) -> None:
        read_with_backup(self.path, self.load_json, "consumer offsets")

    def load_json(self, raw: bytes) -> None:
        """The table as `persist` wrote it (also: whether it holds commits of its own the
        master may lack, so a restarted slave still keeps them; see `merge_from_json`)."""
        doc = require_keys(json.loads(raw), "offsetTable")
        # parsed whole before anything changes: a bad file leaves the table as it was
        table = {
            _table_key(key): {_queue_id(q): _offset(o) for q, o in queues.items()}
            for key, queues in doc.get("offsetTable", {}).items()
        }
        dv = doc.get("dataVersion") or {}
        version = DataVersion(
            state_version=int(dv.get("stateVersion", 0)),
            timestamp=int(dv.get("timestamp", 0)),
            counter=int(dv.get("counter", 0)),
        )
        local = bool(doc.get("localCommits", False))
        self.table.update(table)
        self.data_version = version
        self._local = local

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    @property
    def counter(self) -> int:
        return self.data_version.counter

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self._local = True
        self._commits += 1
        if self._adopted or self._commits >= self.version_step:
            self._commits = 0
            self._adopted = False
            self.data_version = self.data_version.next_version(_now_ms())
        self._dirty = True

    def merge_from_json(self, raw: bytes) -> None:
        """A slave adopts its master's offsets and their version (the master is where
        consumers commit). A commit made here since the last adoption (while this slave acted
        for the master, or from a client's stale route) is kept while it is ahead of the
        master's, and so is this table's version, until the master has pulled it back
        (pre-online or a hand-back): adopting the master's older table would drop what this
        slave acknowledged (found by the acting-master simulator, issue 14)."""
        doc = json.loads(raw)
        theirs = {
            str(key): {int(q): int(o) for q, o in queues.items()}
            for key, queues in doc.get("offsetTable", {}).items()
        }
        ahead = self._local and any(
            o > theirs.get(key, {}).get(q, -1)
            for key, queues in self.table.items()
            for q, o in queues.items()
        )
        for key, queues in theirs.items():
            mine = self.table.setdefault(key, {})
            for q, o in queues.items():
                cur = mine.get(q)
                if cur == o or (ahead and cur is not None and cur > o):
                    continue
                mine[q] = o
                self._dirty = True
        if ahead:
            return
        self._local = False
        dv = _version(doc)
        if dv is not None and dv != self.data_version:
            self.data_version = dv
            self._dirty = True
        self._adopted = True

    def arm_version_bump(self) -> None:
        """The next commit moves the version on (a slave starts acting for its master)."""
        self._adopted = True

    def merge_newer(self, raw: bytes) -> bool:
        """Pre-online: takes back what another replica holds beyond ours, the larger offset of
        each queue (an offset never goes backwards), whatever the two DataVersions say; the
        version moves on to theirs when it is newer. True when anything was taken.

        RocketMQ takes the other table only when its version is not older (local <= remote),
        but the versions of tables that diverged are not comparable: a master restarted from
        its file and a slave that acted from its last copy each moved their counter on, and a
        slave that acted with fewer version bumps than the master made after that copy looked
        older, so what it acknowledged was dropped (found by the acting-master simulator,
        issue 14). The cost: an offset reset on the master in the few seconds before the slave
        copied it can come back at the next pull."""
        doc = json.loads(raw)
        dv = _version(doc)
        changed = False
        for key, queues in doc.get("offsetTable", {}).items():
            mine = self.table.setdefault(str(key), {})
            for q, o in queues.items():
                if int(o) > mine.get(int(q), -1):
                    mine[int(q)] = int(o)
                    changed = True
        if dv is not None and dv.compare(self.data_version) > 0:
            self.data_version = dv
            changed = True
        if changed:
            self._dirty = True
        return changed

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def remove(self, *, topic: str | None = None, group: str | None = None) -> int:
        """Drops the offsets of a topic (every group) or of a group (every topic), or of one
        pair; returns how many topic@group entries went (DELETE_TOPIC_IN_BROKER,
        DELETE_SUBSCRIPTIONGROUP with cleanOffset)."""
        if topic is None and group is None:
            raise ValueError("give topic= or group=")
        gone = [
            k
            for k in self.table
            if (topic is None or k.split("@", 1)[0] == topic)
            and (group is None or k.split("@", 1)[1] == group)
        ]
        for k in gone:
            del self.table[k]
        if gone:
            self.data_version = self.data_version.next_version(_now_ms())
            self._dirty = True
        return len(gone)

    def clone(self, src: str, dest: str, topic: str) -> int:
        """Copies `src`'s committed offsets on `topic` to `dest` (CLONE_GROUP_OFFSET); returns
        how many queues it copied."""
        queues = dict(self.table.get(self.key(topic, src), {}))
        for qid, offset in sorted(queues.items()):
            self.commit(dest, topic, qid, offset)
        return len(queues)

    def topics_of_group(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.table if k.split("@", 1)[1] == group)

    def groups_of_topic(self, topic: str) -> list[str]:
        return [k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic]

    def to_json(self, *, for_file: bool = False) -> bytes:
        """RocketMQ's ConsumerOffsetSerializeWrapper; the file adds `localCommits` when this
        table holds commits of its own since it last adopted the master's."""
        return _encode(self.table, self.data_version, for_file and self._local)

    def persist_job(self, force: bool = False) -> Callable[[], None] | None:
        """The write of the table as it is now (None when nothing changed), to run here or in
        a worker thread: the copy is taken now, the JSON is built by the job."""
        if not (self._dirty or force):
            return None
        table = {k: dict(v) for k, v in self.table.items()}
        version, local = self.data_version, self._local
        self._dirty = False

        def dirty_again() -> None:
            self._dirty = True

        return self._writer.job(lambda: _encode(table, version, local), dirty_again)

    def persist(self, force: bool = False) -> bool:
        job = self.persist_job(force)
        if job is None:
            return False
        job()
        return True


def _encode(table: dict[str, dict[int, int]], version: DataVersion, local: bool) -> bytes:
    doc: dict[str, object] = {
        "offsetTable": {
            k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(table.items())
        },
        "dataVersion": {
            "timestamp": version.timestamp,
            "counter": version.counter,
            "stateVersion": version.state_version,
        },
    }
    if local:
        doc["localCommits"] = True
    return json.dumps(doc, sort_keys=False).encode()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _version(doc: dict[str, object]) -> DataVersion | None:
    dv = doc.get("dataVersion")
    if not isinstance(dv, dict):
        return None
    return DataVersion(
        state_version=int(dv.get("stateVersion", 0)),
        timestamp=int(dv.get("timestamp", 0)),
        counter=int(dv.get("counter", 0)),
    )
