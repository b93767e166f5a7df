"""Topic configs of a broker (RocketMQ's TopicConfigManager), persisted as topics.json in the
shape of TopicConfigSerializeWrapper: {"topicConfigTable": {...}, "dataVersion": {...}}.

System topics are created at start. With autoCreateTopicEnable the default topic TBW102 carries
PERM_INHERIT, which is how a producer's first send to a new topic finds a broker; the broker then
creates the topic on that first send."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from rmq_ha.clock import wall_ms as now_ms
from rmq_ha.durable import ConfigFileWriter, read_with_backup, require_keys
from rmq_ha.protocol import json_compat
from rmq_ha.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from rmq_ha.protocol.perm import PERM_INHERIT, PERM_READ, PERM_WRITE

AUTO_CREATE_TOPIC_KEY = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOPIC_MAX_LENGTH = 127
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")

log = logging.getLogger(__name__)


async def _at_once(timeout_s: float) -> None:
    """No name servers to wait for."""


#: RocketMQ's TopicValidator.SYSTEM_TOPIC_SET (GET_SYSTEM_TOPIC_LIST_FROM_BROKER).
SYSTEM_TOPIC_SET = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)


#: RocketMQ's TopicValidator.SYSTEM_TOPIC_PREFIX (pop's revive log, ...).
SYSTEM_PREFIX = "rmq_sys_"


def is_system_topic(topic: str) -> bool:
    """RocketMQ's TopicValidator.isSystemTopic."""
    return topic in SYSTEM_TOPIC_SET or topic.startswith(SYSTEM_PREFIX)


#: PermName's bits: PERM_PRIORITY 8, READ 4, WRITE 2, INHERIT 1.
PERM_BITS = 0xF


def topic_config_problem(tc: TopicConfig) -> str | None:
    """Why an admin's topic config may not be stored (name, queue counts, perm), or None."""
    why = check_topic_name(tc.topic_name or "")
    if why is not None:
        return why
    for key, n in (("readQueueNums", tc.read_queue_nums), ("writeQueueNums", tc.write_queue_nums)):
        if n is None or not 0 <= n <= MAX_QUEUE_NUMS:
            return f"bad topic config for {tc.topic_name}: {key} {n} is outside 0..{MAX_QUEUE_NUMS}"
    if tc.perm is None or tc.perm & ~PERM_BITS or tc.perm < 0:
        return (
            f"bad topic config for {tc.topic_name}: perm {tc.perm} is not a combination of"
            " 8 (priority), 4 (read), 2 (write), 1 (inherit)"
        )
    return None


#: Queues per topic an admin may configure (queue ids are ints; more is a typo).
MAX_QUEUE_NUMS = 65_535


def check_topic_name(topic: str) -> str | None:
    """None if valid, else why not (RocketMQ's TopicValidator rules)."""
    if not topic:
        return "the topic is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the topic is longer than {TOPIC_MAX_LENGTH} characters"
    if not _TOPIC_RE.match(topic):
        return f"the topic {topic!r} contains characters outside [%|a-zA-Z0-9_-]"
    return None


def reply_topic(cluster_name: str) -> str:
    """The topic request-reply answers are sent to: ``<cluster>_REPLY_TOPIC``."""
    return f"{cluster_name}_REPLY_TOPIC"


def _parse_file(raw: bytes) -> TopicConfigSerializeWrapper:
    """topics.json: a file without its table is damaged, not a broker without topics; so is
    one with a config an admin could not have stored (negative queue counts, perm bits beyond
    1|2|4|8: a hand edit or damage that still parses), which served every pull
    INVALID_PARAMETER or published the bad perm in the routes."""
    require_keys(json_compat.loads(raw), "topicConfigTable")
    w = TopicConfigSerializeWrapper.from_json(raw)
    for tc in w.topic_config_table.values():
        why = topic_config_problem(tc)
        if why is not None:
            raise ValueError(why)
    return w


class TopicConfigManager:
    def __init__(
        self,
        path: Path,
        *,
        cluster_name: str,
        broker_name: str,
        broker_permission: int,
        auto_create: bool,
        default_queue_nums: int,
        trace_topic: str | None = None,
    ) -> None:
        self.path = path
        self.default_queue_nums = default_queue_nums
        self.auto_create = auto_create
        #: Called when a change must reach the name servers (the wiring registers).
        self.on_change: Callable[[], None] = lambda: None
        #: Waits (at most the given seconds) for the registration of the last change.
        self.wait_announced: Callable[[float], Awaitable[None]] = _at_once
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion.initial(now_ms())
        self._writer = ConfigFileWriter(path)
        #: Changed since the last write (a heartbeat's retry topic: written by the broker's
        #: housekeeping off the event loop, not by the heartbeat).
        self.dirty = False
        self._load()
        rw = PERM_READ | PERM_WRITE
        system = {
            SELF_TEST_TOPIC: TopicConfig(
                topic_name=SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1
            ),
            OFFSET_MOVED_EVENT: TopicConfig(
                topic_name=OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1
            ),
            # Clients find every broker of a cluster (or a broker by name) through these routes.
            cluster_name: TopicConfig(
                topic_name=cluster_name,
                read_queue_nums=16,
                write_queue_nums=16,
                perm=broker_permission & rw,
            ),
            broker_name: TopicConfig(
                topic_name=broker_name,
                read_queue_nums=1,
                write_queue_nums=1,
                perm=broker_permission & rw,
            ),
            # request-reply answers are sent here (RocketMQ's MixAll.getReplyTopic)
            reply_topic(cluster_name): TopicConfig(
                topic_name=reply_topic(cluster_name), read_queue_nums=1, write_queue_nums=1
            ),
        }
        if trace_topic:
            # traceTopicEnable: tracing clients send their records here (RocketMQ creates it
            # with one queue, as a system topic)
            system[trace_topic] = TopicConfig(
                topic_name=trace_topic, read_queue_nums=1, write_queue_nums=1
            )
        if auto_create:
            system[AUTO_CREATE_TOPIC_KEY] = TopicConfig(
                topic_name=AUTO_CREATE_TOPIC_KEY,
                read_queue_nums=8,
                write_queue_nums=8,
                perm=PERM_INHERIT | rw,
            )
        for name, tc in system.items():
            self.table.setdefault(name, tc)
        #: the broker's own routes (cluster, broker name, reply, auto-create, self test, trace)
        self.builtin = frozenset(system)

    def protected(self, topic: str) -> bool:
        """A topic an admin may not delete: RocketMQ's system topics, ``rmq_sys_*`` and the
        broker's own routes. Deleting SCHEDULE_TOPIC_XXXX dropped every pending delayed
        message; deleting TBW102 stopped auto-creation until a restart."""
        return topic in self.builtin or is_system_topic(topic)

    def _load(self) -> None:
        w = read_with_backup(self.path, _parse_file, "topic configs")
        if w is None:
            return
        self.table.update(w.topic_config_table)
        self.data_version = w.data_version

    def persist_job(self) -> Callable[[], None] | None:
        """The write of the table as it is now (None when unchanged since the last one), to
        run here or in a worker thread."""
        if not self.dirty:
            return None
        wrapper = TopicConfigSerializeWrapper(
            topic_config_table=dict(self.table), data_version=self.data_version
        )
        return self._writer.dirty_job(self, wrapper.to_json)

    def persist(self) -> None:
        self.dirty = True
        job = self.persist_job()
        assert job is not None
        job()

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, tc: TopicConfig, *, persist_now: bool = True) -> None:
        assert tc.topic_name
        self.table[tc.topic_name] = tc
        self.data_version = self.data_version.next_version(now_ms())
        if persist_now:
            self.persist()
        else:
            self.dirty = True

    def delete(self, topic: str) -> bool:
        """DELETE_TOPIC_IN_BROKER: the topic's config goes (True when it had one)."""
        if self.table.pop(topic, None) is None:
            return False
        self.data_version = self.data_version.next_version(now_ms())
        self.persist()
        return True

    def create_on_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """A send to a topic that does not exist: created from the default topic when it exists
        and carries PERM_INHERIT (RocketMQ's createTopicInSendMessageMethod)."""
        base = self.table.get(default_topic)
        if base is None or not (base.perm & PERM_INHERIT):
            return None
        n = max(1, min(queue_nums, base.write_queue_nums))
        tc = TopicConfig(
            topic_name=topic, read_queue_nums=n, write_queue_nums=n, perm=base.perm & ~PERM_INHERIT
        )
        self.update(tc)
        return tc

    def create_system(
        self, topic: str, queue_nums: int, perm: int, *, persist_now: bool = True
    ) -> TopicConfig:
        """Retry/DLQ topics, created on demand."""
        tc = self.table.get(topic)
        if tc is None:
            tc = TopicConfig(
                topic_name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm
            )
            self.update(tc, persist_now=persist_now)
        return tc

    # ---- what the handlers use (ports.TopicsPort) -------------------------------------------

    def changed(self) -> None:
        self.on_change()

    async def announced(self, timeout_s: float) -> None:
        await self.wait_announced(timeout_s)

    def for_write(
        self, topic: str, default_topic: str | None, queue_nums: int
    ) -> TopicConfig | None:
        """The topic a send writes to: auto-created from the default topic when allowed, and
        retry/DLQ topics on demand; None when it does not exist."""
        tc = self.get(topic)
        if tc is None and self.auto_create and default_topic:
            tc = self.create_on_send(topic, default_topic, queue_nums)
            if tc is not None:
                self.changed()
        if tc is None and topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            tc = self.system(topic)
        return tc

    def system(self, topic: str, queue_nums: int = 1, *, persist_now: bool = True) -> TopicConfig:
        existed = self.get(topic) is not None
        tc = self.create_system(topic, queue_nums, PERM_READ | PERM_WRITE, persist_now=persist_now)
        if not existed:
            self.changed()
        return tc

    def adopt_queues(self, queues: Iterable[tuple[str, int]], *, system: bool = True) -> list[str]:
        """A config for every (topic, queue id) in the log whose topic has none: a topic
        auto-created on the old master just before it died (RocketMQ #9804), whose config
        never reached this slave, or whose config file was lost. Without `system`, the
        broker's own topics (RocketMQ's system set and ``rmq_sys_*``: delay, transaction and
        pop bookkeeping, which hold messages but no config) are left out. Returns the topics
        adopted."""
        adopted: list[str] = []
        counts: dict[str, int] = {}
        for topic, qid in queues:
            if not system and is_system_topic(topic):
                continue
            counts[topic] = max(counts.get(topic, 0), qid + 1)
        for topic, n in counts.items():
            if self.get(topic) is None and check_topic_name(topic) is None:
                self.update(
                    TopicConfig(
                        topic_name=topic,
                        read_queue_nums=max(n, self.default_queue_nums),
                        write_queue_nums=max(n, self.default_queue_nums),
                        perm=PERM_READ | PERM_WRITE,
                    )
                )
                log.info("topic %s adopted from the log (%d queues)", topic, n)
                adopted.append(topic)
        return adopted

    def bump_state_version(self, state_version: int) -> None:
        """A role change: the DataVersion moves on and carries the epoch (name servers keep
        the registration with the larger stateVersion, #6316)."""
        self.data_version = self.data_version.next_version(now_ms(), state_version)
        self.persist()
