"""Reading a queue record by record, and encoding a message in RocketMQ's stored-record layout
(MessageDecoder.encode) for bodies that must not be the stored bytes themselves."""

from __future__ import annotations

import ipaddress
import logging
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Final

from rmq_ha._native import Store, StoreBuffer, decode_stored_record
from rmq_ha.broker.core.storage import record_queue_offset
from rmq_ha.broker.ports import Storage
from rmq_ha.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)

Record = dict[str, object]

#: MessageDecoder.MESSAGE_MAGIC_CODE (V1: one-byte topic length).
MAGIC_V1: Final = 0xDAA320A7
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
#: Bytes one special-service read asks the store for at most.
READ_MAX_BYTES: Final = 4 << 20


def iter_records(bufs: Sequence[StoreBuffer]) -> Iterator[Record]:
    """Decodes the records of `get_messages` buffers (each may hold several back to back)."""
    for buf in bufs:
        data = buf.tobytes()
        pos = 0
        while pos + 8 <= len(data):
            size = int.from_bytes(data[pos : pos + 4], "big")
            if size <= 0:
                break
            rec = decode_stored_record(data[pos : pos + size])
            pos += size
            if "blank" not in rec:
                yield rec


def progress_within(store: Store, topic: str, queue_id: int, offset: int, what: str) -> int:
    """A special service's progress in one of its queues, not past the queue's end. Progress
    past it (a damaged or hand-edited delayOffset.json or consumerOffset.json, or a log cut
    since it was saved) would wait for offsets the queue has not reached and skip every
    message written below them: it goes back to the end, with a WARNING (RocketMQ's
    ScheduleMessageService.correctDelayOffset)."""
    qmax = store.queue_max_offset(topic, queue_id)
    if offset <= qmax:
        return offset
    log.warning(
        "%s: progress %d is past the end of %s queue %d (%d); going on from there",
        what,
        offset,
        topic,
        queue_id,
        qmax,
    )
    return qmax


def read_queue(
    store: Store,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tag_codes: Sequence[int] | None = None,
    *,
    storage: Storage | None = None,
) -> tuple[list[Record], int]:
    """Up to `max_count` records from `offset` on, and the offset to read next. An offset
    below the queue's minimum (retention) reads from the minimum; at or past the maximum
    reads nothing. Damaged (quarantined) records are read around (issue 15): with `storage`
    the read stops before one still waited for (its repair from a replica may come) and
    skips it after the wait (`Storage.judge`); without it, it is skipped at once."""
    qmin = store.queue_min_offset(topic, queue_id)
    qmax = store.queue_max_offset(topic, queue_id)
    offset = max(offset, qmin)
    if offset >= qmax:
        return [], offset
    try:
        bufs, nxt, _, _, skipped = store.read_queue(
            topic, queue_id, offset, max_count, READ_MAX_BYTES, tag_codes
        )
    except OffsetOutOfRangeError:
        # Retention moved the minimum between the two looks: start over from the new one.
        return [], store.queue_min_offset(topic, queue_id)
    if skipped and storage is not None:
        verdict = storage.judge(skipped, topic, queue_id)
        if verdict.serve_below is not None:
            bufs = [b for b in bufs if record_queue_offset(b) < verdict.serve_below]
            nxt = verdict.serve_below
    return list(iter_records(bufs)), nxt


def _host(addr: str) -> tuple[bytes, bool]:
    host, _, port = addr.rpartition(":")
    ip = ipaddress.ip_address(host.strip("[]") or "127.0.0.1")
    return ip.packed + int(port or 0).to_bytes(4, "big"), ip.version == 6


def encode_message_ext(
    *,
    topic: str,
    queue_id: int,
    body: bytes,
    properties: str,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: str,
    store_timestamp: int,
    store_host: str,
    reconsume_times: int,
    prepared_txn_offset: int,
) -> bytes:
    """One record in the V1 layout (docs/store.md; reference section 1.9), without rmq_ha's
    whole-record CRC trailer: what RocketMQ's MessageDecoder.encode produces and its clients
    decode (e.g. the body of CHECK_TRANSACTION_STATE)."""
    born, born_v6 = _host(born_host)
    stored, store_v6 = _host(store_host)
    sys_flag &= ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    sys_flag |= (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    t = topic.encode()
    p = properties.encode()
    if len(t) > 127:
        raise ValueError(f"topic {topic!r} is too long for a V1 record")
    out = bytearray(
        struct.pack(
            ">iiiiiqqi",
            0,  # total size, filled in last
            MAGIC_V1 - (1 << 32),
            zlib.crc32(body) & 0x7FFFFFFF,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
        )
    )
    out += struct.pack(">q", born_timestamp) + born
    out += struct.pack(">q", store_timestamp) + stored
    out += struct.pack(">iq", reconsume_times, prepared_txn_offset)
    out += struct.pack(">i", len(body)) + body
    out += struct.pack(">B", len(t)) + t
    out += struct.pack(">h", len(p)) + p
    out[0:4] = struct.pack(">i", len(out))
    return bytes(out)
