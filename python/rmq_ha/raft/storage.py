"""Durable storage for a RaftNode: what its `Ready.persist` operations ask for, on disk.

* `hardstate`: term and vote, a small JSON document with a CRC, replaced atomically;
* `snapshot`: the state machine snapshot with its last index/term and a CRC, replaced atomically;
* `log`: append-only records `[u32 length][u32 crc32][u64 index][u64 term][u8 kind][data]`;
  truncation cuts the file at a record boundary; compaction rewrites it (temp file, rename).

Every `apply` ends with an fsync of what it touched, so the core's contract holds: a durable
operation implies every earlier one is durable. On load a torn or corrupt tail of the log (a
crash mid-append, flipped bits) is cut back to the last valid record and reported; records
that do not follow on from the previous index are cut too.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from rmq_ha.durable import fsync_dir, write_atomic
from rmq_ha.errors import CorruptFileError
from rmq_ha.raft.messages import Entry, EntryKind, Snapshot
from rmq_ha.raft.outputs import (
    AppendLog,
    CompactLog,
    HardState,
    PersistedState,
    PersistOp,
    SaveHardState,
    SaveSnapshot,
    TruncateLog,
)

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">II")  # length of the rest, crc32 of the rest
_BODY = struct.Struct(">QQB")  # index, term, kind
MAX_ENTRY_BYTES = 64 << 20


def _encode(e: Entry) -> bytes:
    rest = _BODY.pack(e.index, e.term, int(e.kind)) + e.data
    return _HEAD.pack(len(rest), zlib.crc32(rest)) + rest


@dataclass
class LoadReport:
    entries: int = 0
    cut_at_byte: int | None = None
    cut_reason: str | None = None


class RaftStorage:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "log"
        self.hs_path = self.dir / "hardstate"
        self.snap_path = self.dir / "snapshot"
        #: index -> byte position of its record in the log file
        self._pos: dict[int, int] = {}
        self._end = 0
        self.report = LoadReport()

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> PersistedState:
        hs = self._load_hard_state()
        snap = self._load_snapshot()
        entries = self._load_log()
        return PersistedState(hard_state=hs, snapshot=snap, entries=entries)

    def _load_hard_state(self) -> HardState:
        try:
            raw = self.hs_path.read_bytes()
        except FileNotFoundError:
            return HardState()
        try:
            doc = json.loads(raw)
            body = json.dumps(doc["state"], sort_keys=True).encode()
            if zlib.crc32(body) != doc["crc"]:
                raise ValueError("CRC mismatch")
            return HardState(term=int(doc["state"]["term"]), voted_for=doc["state"]["voted_for"])
        except (ValueError, KeyError, TypeError) as e:
            # Never silently reset term/vote: that could let this node vote twice in a term.
            raise CorruptFileError(
                f"raft hard state {self.hs_path} is corrupt: {e}", str(self.hs_path)
            ) from None

    def _load_snapshot(self) -> Snapshot | None:
        try:
            raw = self.snap_path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) < 20 or zlib.crc32(raw[4:]) != int.from_bytes(raw[:4], "big"):
            raise CorruptFileError(
                f"raft snapshot {self.snap_path} is corrupt", str(self.snap_path)
            )
        idx, term = struct.unpack(">QQ", raw[4:20])
        return Snapshot(last_index=idx, last_term=term, data=raw[20:])

    def _load_log(self) -> list[Entry]:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[Entry] = []
        pos = 0
        reason = None
        while pos < len(data):
            if len(data) - pos < _HEAD.size:
                reason = "torn record header"
                break
            length, crc = _HEAD.unpack_from(data, pos)
            if length < _BODY.size or length > MAX_ENTRY_BYTES + _BODY.size:
                reason = f"bad record length {length}"
                break
            rest = data[pos + _HEAD.size : pos + _HEAD.size + length]
            if len(rest) < length:
                reason = "torn record"
                break
            if zlib.crc32(rest) != crc:
                reason = "record CRC mismatch"
                break
            index, term, kind = _BODY.unpack_from(rest)
            if entries and index != entries[-1].index + 1:
                reason = f"index {index} does not follow {entries[-1].index}"
                break
            try:
                k = EntryKind(kind)
            except ValueError:
                reason = f"unknown entry kind {kind}"
                break
            entries.append(Entry(index=index, term=term, data=rest[_BODY.size :], kind=k))
            self._pos[index] = pos
            pos += _HEAD.size + length
        self._end = pos
        self.report.entries = len(entries)
        if pos < len(data):
            self.report.cut_at_byte = pos
            self.report.cut_reason = reason
            log.warning(
                "raft log %s: cut %d bytes at %d (%s)", self.log_path, len(data) - pos, pos, reason
            )
            with open(self.log_path, "r+b") as f:
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())
        return entries

    # -- persisting --------------------------------------------------------------------------

    def apply(self, ops: tuple[PersistOp, ...] | list[PersistOp]) -> None:
        """Makes `ops` durable, in order (blocking: run it off the event loop)."""
        log_dirty = False
        for op in ops:
            if isinstance(op, SaveHardState):
                self._sync_log(log_dirty)
                log_dirty = False
                state = {"term": op.hard_state.term, "voted_for": op.hard_state.voted_for}
                body = json.dumps(state, sort_keys=True).encode()
                write_atomic(
                    self.hs_path, json.dumps({"state": state, "crc": zlib.crc32(body)}).encode()
                )
            elif isinstance(op, AppendLog):
                with open(self.log_path, "ab") as f:
                    for e in op.entries:
                        rec = _encode(e)
                        self._pos[e.index] = self._end
                        f.write(rec)
                        self._end += len(rec)
                log_dirty = True
            elif isinstance(op, TruncateLog):
                cut = self._pos.get(op.after_index + 1)
                if cut is not None:
                    with open(self.log_path, "r+b") as f:
                        f.truncate(cut)
                    self._end = cut
                    for i in [i for i in self._pos if i > op.after_index]:
                        del self._pos[i]
                    log_dirty = True
            elif isinstance(op, SaveSnapshot):
                self._sync_log(log_dirty)
                log_dirty = False
                s = op.snapshot
                body = struct.pack(">QQ", s.last_index, s.last_term) + s.data
                write_atomic(self.snap_path, zlib.crc32(body).to_bytes(4, "big") + body)
            elif isinstance(op, CompactLog):
                self._sync_log(log_dirty)
                log_dirty = False
                self._compact(op.through_index)
        self._sync_log(log_dirty)

    def _sync_log(self, dirty: bool) -> None:
        if not dirty:
            return
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.dir)

    def _compact(self, through_index: int) -> None:
        keep_from = self._pos.get(through_index + 1)
        if keep_from is None:
            if through_index >= max(self._pos, default=-1):
                write_atomic(self.log_path, b"")
                self._pos.clear()
                self._end = 0
            return
        with open(self.log_path, "rb") as f:
            f.seek(keep_from)
            rest = f.read()
        write_atomic(self.log_path, rest)
        self._pos = {i: p - keep_from for i, p in self._pos.items() if i > through_index}
        self._end = len(rest)
