"""Helpers shared by the storage-layer tests (imported by the test modules, not a test file)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rmq_ha import _native
from rmq_ha._native import Message, Store, StoreBuffer

SEG = 64 * 1024
"""Default segment size of the tests: small, so a few hundred messages roll over."""

StoreFactory = Callable[..., Store]
"""The `open_native` fixture's type: opens a Store (closed by the fixture)."""

Placement = tuple[int, int, int, int]
"""(physical_offset, size, queue_offset, store_timestamp) as returned by append_batch."""


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units) as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        unit = (data[i] << 8) | data[i + 1]
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def decode(buf: StoreBuffer | bytes | memoryview) -> dict[str, Any]:
    """Decodes one whole stored record (validating every CRC); fails on a filler."""
    data = bytes(memoryview(buf)) if isinstance(buf, StoreBuffer) else bytes(buf)
    rec = _native.decode_stored_record(data)
    assert "blank" not in rec, "expected a record, got an end-of-segment filler"
    assert rec["total_size"] == len(data), "buffer must hold exactly one record"
    return rec


def split_records(buf: StoreBuffer) -> list[dict[str, Any]]:
    """Splits a read_range buffer into records and fillers, decoding (validating) each one.

    Each item gets an ``offset`` key (its commitlog offset). Fillers appear as
    ``{"blank": n, "offset": ...}``.
    """
    data = bytes(memoryview(buf))
    out: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        assert 8 <= size <= len(data) - pos, f"record at {buf.offset + pos} overruns the buffer"
        item = dict(_native.decode_stored_record(data[pos : pos + size]))
        if "blank" not in item:
            assert item["total_size"] == size
            assert item["physical_offset"] == buf.offset + pos
            assert item["record_crc"] is not None, "stored records carry a whole-record CRC"
        item["offset"] = buf.offset + pos
        out.append(item)
        pos += size
    return out


def scan_log(store: Store, chunk: int = 256 * 1024) -> list[dict[str, Any]]:
    """Every record in [min_offset, max_offset) via read_range (fillers dropped)."""
    out: list[dict[str, Any]] = []
    off = store.min_offset
    end = store.max_offset
    while off < end:
        buf = store.read_range(off, chunk)
        assert buf.offset == off
        assert buf.end_offset > off, "read_range made no progress"
        out.extend(r for r in split_records(buf) if "blank" not in r)
        off = buf.end_offset
    assert off == end
    return out


def msgs(
    topic: str, queue_id: int, bodies: Iterable[bytes], properties: bytes | None = None
) -> list[Message]:
    return [Message(topic, queue_id, b, properties) for b in bodies]


def end_of(placements: Sequence[Placement]) -> int:
    """Offset just past the last placed record."""
    off, size, _, _ = placements[-1]
    return off + size


def segment_path(root: Path, start: int) -> Path:
    return root / "commitlog" / f"{start:020d}"


def read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_at(path: Path, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def flip_bit(path: Path, pos: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << bit)]))
