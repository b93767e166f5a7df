"""Type stub for the Rust extension `rmq_ha._native` (crates/rmq-py). Checked against the built
module by `python -m rmq_ha._stubcheck` (part of `make lint`)."""

from collections.abc import Iterable, Sequence
from os import PathLike

TRANSACTION_PREPARED_TYPE: int
TRANSACTION_COMMIT_TYPE: int
TRANSACTION_ROLLBACK_TYPE: int
#: the topic of the store's topic-deletion markers (Store.delete_topic); producers may not use it
TOPIC_DELETED: str

class Message:
    def __init__(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: bytes | None = None,
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_txn_offset: int = 0,
    ) -> None: ...
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def body(self) -> bytes: ...

class StoreBuffer:
    """Zero-copy, read-only view of stored records (buffer protocol)."""

    @property
    def offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def tobytes(self) -> bytes: ...

class AppendResult:
    """Where each message of an append went; items are built lazily."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> tuple[int, int, int, int]: ...
    @property
    def end_offset(self) -> int: ...
    def physical_offsets(self) -> list[int]: ...
    def queue_offsets(self) -> list[int]: ...

class Store:
    def __init__(
        self,
        root: str | PathLike[str],
        *,
        segment_size: int = 1073741824,
        cq_units_per_file: int = 300000,
        store_host: str = "127.0.0.1:10911",
        flush_interval_ms: int = 500,
        checkpoint_interval_ms: int = 1000,
        max_message_size: int = 4194304,
        confirm_follows_max: bool = True,
    ) -> None: ...
    @property
    def open_report(self) -> dict[str, object]: ...
    def append_batch(self, messages: Sequence[Message]) -> AppendResult: ...
    def append_bodies(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: bytes | None = None,
        born_host: str = "127.0.0.1:0",
        born_timestamp: int = 0,
    ) -> tuple[int, int, int]: ...
    def append_raw(self, offset: int, data: bytes) -> int: ...
    def read_record(self, offset: int) -> StoreBuffer: ...
    def read_range(self, offset: int, max_bytes: int, limit: int | None = None) -> StoreBuffer: ...
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4194304,
        tag_codes: Sequence[int] | None = None,
    ) -> tuple[list[StoreBuffer], int, int, int]: ...
    def read_queue(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4194304,
        tag_codes: Sequence[int] | None = None,
    ) -> tuple[list[StoreBuffer], int, int, int, list[tuple[int, int, int, str]]]:
        """(buffers, next_offset, min_offset, max_offset, skipped); skipped lists
        (queue_offset, physical_offset, size, reason) of units not served (quarantined)."""
    def read_queue_body(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        max_bytes: int = 4194304,
        tag_codes: Sequence[int] | None = None,
    ) -> tuple[bytes, int, int, int, int, list[tuple[int, int, int, str]]]:
        """(body, count, next_offset, min_offset, max_offset, skipped): as read_queue, but the
        `count` records served come back concatenated in one bytes object (a pull body),
        read and copied with the GIL released."""
    def quarantined(self) -> list[dict[str, object]]:
        """Quarantined ranges: offset, size, reason, detected_ms, topic, queue_id,
        queue_offset (the last three None when not known)."""
    def repair_record(self, offset: int, data: bytes) -> list[tuple[str, int, int]]:
        """Writes good bytes over the quarantined range at `offset` after checking them;
        returns the (topic, queue_id, queue_offset) made readable again."""
    def scrub(self, offset: int) -> tuple[int, list[dict[str, object]]]:
        """Validates the segment holding `offset` from there on; (next offset, new ranges)."""
    def status(self) -> dict[str, object]: ...
    def start_at(self, offset: int) -> None:
        """Starts an EMPTY store at `offset` (a segment boundary)."""
    def queue_min_offset(self, topic: str, queue_id: int) -> int: ...
    def queue_max_offset(self, topic: str, queue_id: int) -> int: ...
    def queue_unit(self, topic: str, queue_id: int, index: int) -> tuple[int, int, int]: ...
    def next_queue_offset(self, topic: str, queue_id: int) -> int: ...
    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def earliest_store_time(self, topic: str, queue_id: int) -> int | None: ...
    def queues(self) -> list[tuple[str, int]]: ...
    def delete_topic(self, topic: str) -> int:
        """Hides every message of `topic` below a marker appended now (offsets go on)."""
    def set_confirm_offset(self, offset: int) -> int: ...
    def truncate_to(self, offset: int) -> None: ...
    def flush(self) -> int: ...
    def request_flush(self, offset: int) -> None: ...
    def wait_flushed(self, offset: int, timeout_s: float) -> int: ...
    def flush_notify_fd(self) -> int: ...
    def flush_error(self) -> str | None: ...
    def checkpoint(self) -> dict[str, int]: ...
    def delete_expired(
        self,
        reserved_ms: int,
        *,
        clean_immediately: bool = False,
        max_files: int = 10,
        keep_from: int | None = None,
    ) -> list[str]:
        """`keep_from`: never delete a segment that does not end at or below it."""
    def delete_segments_before(self, offset: int) -> list[str]: ...
    def segment_files(self) -> list[tuple[int, str]]: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def flushed_offset(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def confirm_offset(self) -> int: ...
    @property
    def dispatched_offset(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...

class EpochFile:
    def __init__(self, path: str | PathLike[str]) -> None: ...
    @property
    def source(self) -> str: ...
    def entries(self) -> list[tuple[int, int, int]]: ...
    def last_epoch(self) -> int | None: ...
    def append(self, epoch: int, start_offset: int) -> None: ...
    def truncate_suffix_by_epoch(self, epoch: int) -> None: ...
    def truncate_suffix_by_offset(self, offset: int) -> None: ...
    def truncate_prefix_by_offset(self, offset: int) -> None: ...
    def reconcile(
        self, min_offset: int, max_offset: int
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]: ...
    def find_by_epoch(self, epoch: int) -> tuple[int, int, int] | None: ...
    def find_by_offset(self, offset: int) -> tuple[int, int, int] | None: ...

def find_consistent_point(
    local: Sequence[tuple[int, int]],
    local_max: int,
    master: Sequence[tuple[int, int]],
    master_max: int,
) -> int | None: ...
def decode_stored_record(data: bytes) -> dict[str, object]: ...
def client_record(data: bytes) -> bytes: ...
def decode_pull_body(
    body: bytes,
) -> list[tuple[str, bytes, dict[str, str], int, int, int, str, str, int, int, int, int, int]]:
    """Every message of a pull body in one call: (topic, body, properties, queue_id,
    queue_offset, physical_offset, store_host, born_host, born_timestamp, store_timestamp,
    reconsume_times, sys_flag, flag); RemotingDecodeError on a bad size or record."""

def baseline_sequential_write(
    path: str | PathLike[str],
    batch_bytes: int,
    batches: int,
    every_batch: bool,
    interval_ms: int = 500,
) -> tuple[int, float, int]: ...

# Remoting codec (crates/rmq-py/src/remoting.rs). Wire tuple, as in rmq_ha.protocol.command:
# (code, language, version, opaque, flag, remark, ext_fields, body, serialize_type).
_WireTuple = tuple[int, int, int, int, int, str | None, dict[str, str] | None, bytes | None, int]
_Buffer = bytes | bytearray | memoryview

#: Largest frame, counting its 4-byte length field (16 MiB).
MAX_FRAME_LEN: int

def decode_frames(buf: _Buffer, max_frame_len: int = 16777216) -> tuple[list[_WireTuple], int]: ...
def encode_frames(frames: Iterable[_WireTuple]) -> bytes: ...
def decode_batch_body(data: _Buffer) -> list[tuple[int, bytes, bytes]]: ...
def encode_batch_body(messages: Iterable[tuple[int, _Buffer, _Buffer]]) -> bytes: ...

# The native send path (crates/rmq-py/src/send.rs; rules in crates/rmq-wire/src/send.rs).
class SendPath:
    """Answers ordinary SEND_MESSAGE / V2 / SEND_BATCH_MESSAGE requests of a received buffer
    natively (one store append); hands every other frame back."""

    def __init__(
        self,
        store: Store,
        store_host: str,
        *,
        max_message_size: int,
        size_buckets: list[int],
        cluster: str = "",
    ) -> None: ...
    def set_topics(self, topics: list[tuple[str, int, int, int]]) -> None: ...
    def set_max_message_size(self, max_message_size: int) -> None: ...
    def counters(self) -> tuple[int, int, int]:
        """(messages stored, requests answered, send requests handed back) so far."""
    def process(
        self,
        buf: _Buffer,
        peer: str,
        enabled: bool,
        max_frame_len: int = 16777216,
        *,
        defer: bool = False,
    ) -> tuple[
        list[_WireTuple],
        int,
        bytes | None,
        list[tuple[str, int]],
        list[tuple[str, int, int, list[int]]],
        list[tuple[int, int, int]],
        int,
        list[tuple[_WireTuple, int, bool, int]],
    ]:
        """(frames handed back, bytes used, encoded responses, touched (topic, queue),
        per topic (topic, messages, body bytes, size-bucket counts), answered
        (request code, response code, n), end offset of the append or 0, deferred
        (SEND_OK wire tuple, end offset to wait for, wait wanted, request code): with
        `defer` the stored requests are answered by the caller after its wait)."""

# HA replication records (crates/rmq-py/src/ha.rs; formats in crates/rmq-wire/src/ha.rs).
# Offsets are non-negative (ValueError otherwise); epochs are i32, broker ids i64.

HA_READY: int
HA_HANDSHAKE: int
HA_TRANSFER: int
HA_SUSPEND: int
HA_SHUTDOWN: int

def encode_slave_handshake(sync_from_last_file: bool, async_learner: bool, broker_id: int) -> bytes:
    """The 16-byte slave -> master handshake."""

def encode_slave_ack(max_offset: int) -> bytes:
    """The 12-byte slave -> master ack (the slave's max commitlog offset)."""

def encode_master_handshake(
    max_offset: int, last_epoch: int, entries: Iterable[tuple[int, int]]
) -> bytes:
    """The master -> slave handshake: 20 bytes + 12 per (epoch, start_offset) entry (at most
    1,000,000 entries)."""

def encode_transfer_header(
    offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int, body_size: int
) -> bytes:
    """The 36-byte transfer header; the caller sends `body_size` bytes of commitlog after it
    (0: a heartbeat). ValueError when `body_size` exceeds 2**31 - 1."""

def stamp_properties(props: bytes, cluster: str) -> bytes:
    """``props`` (``k\\x01v\\x02...``) with the properties the broker puts on every stored
    message: MSG_REGION, TRACE_ON and (when ``cluster`` is not empty) CLUSTER."""

class HaMasterSideDecoder:
    """Decodes the stream a master receives from a slave. Each record of `feed` is
    ``("handshake", sync_from_last_file: bool, async_learner: bool, broker_id: int)`` or
    ``("ack", max_offset: int)``; an incomplete record stays buffered until the rest arrives.
    Malformed bytes raise `rmq_ha.errors.RemotingDecodeError` (``offset``: where the bad record
    starts, counted from the first byte fed), and every later `feed` raises it again."""

    def __init__(self) -> None: ...
    def feed(self, data: _Buffer) -> list[tuple[object, ...]]: ...
    @property
    def buffered(self) -> int: ...
    def take_buffered(self) -> bytes:
        """Hands over the bytes of an incomplete record and empties the buffer."""

class HaSlaveSideDecoder:
    """Decodes the stream a slave receives from its master. Each record of `feed` is
    ``("handshake", max_offset: int, last_epoch: int, entries: list[tuple[int, int]])`` or
    ``("transfer", offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int,
    body: bytes)``; a transfer body above `max_body` bytes is an error. Errors as for
    `HaMasterSideDecoder`."""

    def __init__(self, max_body: int = 67108864) -> None: ...
    def feed(self, data: _Buffer) -> list[tuple[object, ...]]: ...
    @property
    def buffered(self) -> int: ...
    def take_buffered(self) -> bytes:
        """Hands over the bytes of an incomplete record and empties the buffer."""

class HaMasterLoop:
    """A master's streaming to one slave in a thread of its own: commitlog batches that never
    cross an epoch, heartbeats, and the slave's acks (`broker/ha/master.py`'s `_write` and
    `_read_acks` rules). `fd` is duplicated; `acks`: bytes the slave sent, not decoded yet."""

    def __init__(
        self,
        store: Store,
        epochs: EpochFile,
        fd: int,
        start: int,
        acks: bytes,
        controller_mode: bool,
        batch_bytes: int,
        heartbeat_ms: int,
        write_timeout_ms: int,
    ) -> None: ...
    @property
    def wake_fd(self) -> int:
        """Readable when `take()` has news."""
    def poke(self) -> None:
        """The log grew: the thread sends what is new."""
    def take(
        self,
    ) -> tuple[int | None, int | None, bool, int, str | None, str | None, bytes | None]:
        """(ack, transferring, idle, pos, end_kind, end_message, leftover) since the previous
        call; end_kind: None while running, else "stopped", "closed", "io", "protocol" or
        "held" (quarantined bytes at `pos`: the caller goes on with `leftover`)."""
    def stop(self) -> None: ...
    def join(self) -> None: ...

class HaSlaveLoop:
    """A slave's TRANSFER phase in a thread of its own (receive, append, epochs, confirm
    offset, acks; `broker/ha/slave.py`'s `_apply` rules). `fd` is duplicated; `pending`: bytes
    received and not decoded yet; `reported`: the max offset last acked."""

    def __init__(
        self,
        store: Store,
        epochs: EpochFile,
        fd: int,
        pending: bytes,
        reported: int,
        controller_mode: bool,
        heartbeat_ms: int,
        housekeeping_ms: int,
        max_body: int = 67108864,
    ) -> None: ...
    @property
    def wake_fd(self) -> int:
        """Readable when `take()` has news."""
    def take(
        self,
    ) -> tuple[int, int, bool, bool, int, int, str | None, str | None]:
        """(max_offset, confirm_offset, grew, visible, transfers, acked, end_kind,
        end_message); end_kind: None while running, else "stopped", "closed", "silent",
        "io" or "protocol"."""
    def stop(self) -> None: ...
    def join(self) -> None: ...
