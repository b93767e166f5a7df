"""Message-level conventions shared by broker and client: the property encoding
(`key\\x01value\\x02...`), well-known property keys, Java's String.hashCode (tag codes), tag
expressions, and the offset message id."""

from __future__ import annotations

import ipaddress
from typing import Final

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

PROPERTY_TAGS: Final = "TAGS"
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_WAIT: Final = "WAIT"
PROPERTY_DELAY: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_CLUSTER: Final = "CLUSTER"
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
#: the properties that make a message a timer message, in the order its due time is read
#: (the first present decides: broker.special.delay.timer_deliver_ms)
TIMER_PROPERTIES: Final = (
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
)
PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_POP_CK: Final = "POP_CK"
PROPERTY_FIRST_POP_TIME: Final = "1ST_POP_TIME"
PROPERTY_ORIGIN_GROUP: Final = "ORIGIN_GROUP"

SUB_ALL: Final = "*"


def encode_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def decode_properties(s: str | bytes | None) -> dict[str, str]:
    """The properties string as a map, as Java's MessageDecoder.string2messageProperties
    reads it: an entry with an empty name or an empty value is dropped (a property stored as
    ``s=""`` is absent: NULL to a SQL92 filter, as on RocketMQ)."""
    if not s:
        return {}
    text = s.decode("utf-8", "replace") if isinstance(s, bytes) else s
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        k, sep, v = item.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            out[k] = v
    return out


def java_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int (the tag code)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def parse_tag_expression(expr: str | None) -> list[str] | None:
    """ "TagA || TagB" -> ["TagA", "TagB"]; "*" or empty -> None (every tag)."""
    if expr is None or not expr.strip() or expr.strip() == SUB_ALL:
        return None
    tags = [t.strip() for t in expr.split("||") if t.strip()]
    return tags or None


def offset_msg_id(store_host: str, store_port: int, commit_offset: int) -> str:
    """RocketMQ's offset message id: store address (IPv4 4 bytes or IPv6 16) + port (4 bytes)
    + commitlog offset (8 bytes), upper-case hex."""
    addr = ipaddress.ip_address(store_host)
    return (
        (addr.packed + store_port.to_bytes(4, "big") + commit_offset.to_bytes(8, "big"))
        .hex()
        .upper()
    )


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Inverse of `offset_msg_id`: (host, port, commitlog offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) == 16:
        return (
            str(ipaddress.IPv4Address(raw[:4])),
            int.from_bytes(raw[4:8], "big"),
            int.from_bytes(raw[8:], "big"),
        )
    if len(raw) == 28:
        return (
            str(ipaddress.IPv6Address(raw[:16])),
            int.from_bytes(raw[16:20], "big"),
            int.from_bytes(raw[20:], "big"),
        )
    raise ValueError(f"not an offset message id: {msg_id!r}")
