"""Messages as the client sees them: what a producer sends (`Message`), what a consumer
receives (`MessageExt`), what a send returns (`SendResult`), and the client-side message id
(the `UNIQ_KEY` property, generated like RocketMQ's MessageClientIDSetter)."""

from __future__ import annotations

import enum
import ipaddress
import itertools
import os
import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from rmq_ha._native import decode_pull_body
from rmq_ha.client.errors import InvalidMessageError
from rmq_ha.protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    offset_msg_id,
)
from rmq_ha.protocol.models import MessageQueue

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
PROPERTY_DELAY_LEVEL: Final = "DELAY"
KEY_SEPARATOR: Final = " "
TOPIC_MAX_LENGTH: Final = 127
_TOPIC_RE: Final = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


# ---------------------------------------------------------------------------------------------
# Outgoing


@dataclass(slots=True)
class Message:
    """A message to send. `properties` are user properties; tags, keys and the message id go
    into RocketMQ's reserved keys when the message is encoded."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    wait_store_msg_ok: bool = True
    #: Set by the producer at send time (kept across retries, so a retry has the same id).
    uniq_id: str | None = None

    def wire_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else KEY_SEPARATOR.join(self.keys)
            props[PROPERTY_KEYS] = keys
        props[PROPERTY_WAIT] = "true" if self.wait_store_msg_ok else "false"
        if self.uniq_id is not None:
            props[PROPERTY_UNIQ_KEY] = self.uniq_id
        return props


def check_topic(topic: str) -> None:
    """RocketMQ's Validators.checkTopic."""
    if not topic or not topic.strip():
        raise InvalidMessageError("the specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidMessageError(f"the topic is longer than {TOPIC_MAX_LENGTH} characters")
    if not _TOPIC_RE.match(topic):
        raise InvalidMessageError(
            f"the topic {topic!r} contains characters outside [%|a-zA-Z0-9_-]"
        )


def check_message(msg: Message, max_size_bytes: int) -> None:
    """RocketMQ's Validators.checkMessage, plus the property separators we cannot encode."""
    check_topic(msg.topic)
    if not msg.body:
        raise InvalidMessageError("the message body length is zero")
    if len(msg.body) > max_size_bytes:
        raise InvalidMessageError(
            f"the message body size over max value, MAX: {max_size_bytes}, got {len(msg.body)}"
        )
    for k, v in msg.wire_properties().items():
        if not k or any(c in k or c in v for c in "\x01\x02"):
            raise InvalidMessageError(f"property {k!r} is empty or contains \\x01 / \\x02")


# ---------------------------------------------------------------------------------------------
# Send results


class SendStatus(enum.Enum):
    """SEND_OK: stored as asked. The others: stored on the master, but not flushed or not
    replicated in time (the message may be lost if the master dies now)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    #: The client id (UNIQ_KEY); comma-separated for a batch.
    msg_id: str
    #: The broker's offset message id (store host + commitlog offset); comma-separated for a batch.
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    #: True when an earlier attempt of this send ended with an unknown outcome (a timeout) and
    #: the client retried anyway (`retry_after_timeout`): the message may be stored twice.
    possible_duplicate: bool = False
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK


# ---------------------------------------------------------------------------------------------
# Message ids


class UniqIdGenerator:
    """RocketMQ's MessageClientIDSetter: 16 bytes as 32 upper-case hex characters.

    ip (4 bytes) + pid (2) + a random per-process int (4; Java uses its class loader's hash)
    + milliseconds since the start of the current month (4) + a counter (2). Ids of one process
    sort by time within a month; the counter keeps ids made in the same millisecond apart."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            packed = ipaddress.ip_address(ip).packed
        except ValueError:
            packed = random.randbytes(4)
        self._prefix = (
            (packed + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.randbytes(4)).hex().upper()
        )
        self._counter = itertools.count()
        self._month_start_ms, self._next_month_ms = self._month_bounds(time.time())

    @staticmethod
    def _month_bounds(now_s: float) -> tuple[int, int]:
        t = datetime.fromtimestamp(now_s)
        start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
        return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)

    def next_id(self) -> str:
        now_ms = int(time.time() * 1000)
        if now_ms >= self._next_month_ms:
            self._month_start_ms, self._next_month_ms = self._month_bounds(now_ms / 1000)
        diff = max(0, now_ms - self._month_start_ms) & 0xFFFFFFFF
        count = next(self._counter) & 0xFFFF
        return f"{self._prefix}{diff:08X}{count:04X}"


# ---------------------------------------------------------------------------------------------
# Incoming


@dataclass(slots=True)
class MessageExt:
    """A received message (RocketMQ's MessageExt). `topic` is the original topic for a
    message redelivered from the group's retry topic; `queue` is where it was read."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    store_host: str
    born_host: str
    born_timestamp_ms: int
    store_timestamp_ms: int
    reconsume_times: int
    sys_flag: int
    flag: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def offset_msg_id(self) -> str:
        host, port = split_host_port(self.store_host)
        return offset_msg_id(host, port, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """The UNIQ_KEY if the producer set one, else the offset message id (as Java's
        MessageClientExt.getMsgId)."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def retry_topic_origin(self) -> str | None:
        return self.properties.get(PROPERTY_RETRY_TOPIC)


def split_host_port(addr: str) -> tuple[str, int]:
    """ "1.2.3.4:5" or "[::1]:5" -> (host, port)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def decode_messages(body: bytes | None, broker_name: str) -> list[MessageExt]:
    """Splits a PULL_MESSAGE body (stored records back to back) and decodes each record: one
    native call for the whole body (RemotingDecodeError on a bad record)."""
    if not body:
        return []
    return [
        MessageExt(
            topic=topic,
            body=data,
            properties=props,
            queue=MessageQueue(topic=topic, broker_name=broker_name, queue_id=qid),
            queue_offset=qo,
            commit_log_offset=phys,
            store_host=store_host,
            born_host=born_host,
            born_timestamp_ms=born_ts,
            store_timestamp_ms=store_ts,
            reconsume_times=reconsume,
            sys_flag=sys_flag,
            flag=flag,
        )
        for (
            topic,
            data,
            props,
            qid,
            qo,
            phys,
            store_host,
            born_host,
            born_ts,
            store_ts,
            reconsume,
            sys_flag,
            flag,
        ) in decode_pull_body(body)
    ]
