"""Durable storage for a RaftNode: what its `Ready.persist` operations ask for, on disk.

* `hardstate`: term and vote, a small JSON document with a CRC, replaced atomically;
* `snapshot`: the state machine snapshot with its last index/term and a CRC, replaced atomically;
* `log`: append-only records `[u32 length][u32 crc32][u64 index][u64 term][u8 kind][data]`;
  truncation cuts the file at a record boundary; compaction rewrites it (temp file, rename).

Every `apply` ends with an fsync of what it touched, so the core's contract holds: a durable
operation implies every earlier one is durable. On load a torn tail of the log (a crash
mid-append, or stale records left past a truncation the crash did not let reach the disk) is
cut back to the last valid record and reported. A damaged record that a later valid
continuation of the log follows (a record with a higher index and a term no lower) is not a
torn tail: those entries were fsynced, may be committed, and a node that dropped them could
vote a candidate without them into leadership. Loading then refuses (`CorruptFileError`) and
the node does not start; docs/ha.md says how to restore its log from a peer.
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
_KINDS = frozenset(int(k) for k in EntryKind)


def _encode(e: Entry) -> bytes:
    rest = _BODY.pack(e.index, e.term, int(e.kind)) + e.data
    return _HEAD.pack(len(rest), zlib.crc32(rest)) + rest


@dataclass
class LoadReport:
    entries: int = 0
    cut_at_byte: int | None = None
    cut_reason: str | None = None


def _valid_record_at(
    data: bytes, q: int, after_index: int, min_term: int
) -> tuple[int, int] | None:
    """(index, term) of an intact record at byte `q` that continues a log ending at
    `after_index` in a term no lower than `min_term`; None if there is none there."""
    if len(data) - q < _HEAD.size + _BODY.size:
        return None
    length, crc = _HEAD.unpack_from(data, q)
    if length < _BODY.size or length > MAX_ENTRY_BYTES + _BODY.size:
        return None
    end = q + _HEAD.size + length
    if end > len(data):
        return None
    index, term, kind = _BODY.unpack_from(data, q + _HEAD.size)
    if index <= after_index or term < min_term or kind not in _KINDS:
        return None  # cheap checks first: a CRC only for plausible headers
    if zlib.crc32(data[q + _HEAD.size : end]) != crc:
        return None
    return index, term


def _continuation_after(
    data: bytes, pos: int, after_index: int, min_term: int
) -> tuple[int, int, int] | None:
    """The first intact record past a damaged one at `pos` that continues the log (a higher
    index, a term no lower: stale records left by an unsynced truncation have lower terms or
    indexes) as (byte, index, term); None when what follows is a torn tail or stale."""
    if len(data) - pos >= _HEAD.size:
        # Most damage is a flipped byte inside one record whose length is intact.
        length, _ = _HEAD.unpack_from(data, pos)
        nxt = pos + _HEAD.size + length
        if _BODY.size <= length <= MAX_ENTRY_BYTES + _BODY.size:
            got = _valid_record_at(data, nxt, after_index, min_term)
            if got is not None:
                return nxt, *got
    for q in range(pos + 1, len(data) - _HEAD.size - _BODY.size + 1):
        got = _valid_record_at(data, q, after_index, min_term)
        if got is not None:
            return q, *got
    return None


def _last_index_from(data: bytes, q: int) -> int:
    """The index of the last intact record in the run of consecutive ones starting at `q`."""
    last = -1
    while (got := _valid_record_at(data, q, last, 0)) is not None:
        last = got[0]
        q += _HEAD.size + _HEAD.unpack_from(data, q)[0]
    return last


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
            last = entries[-1] if entries else None
            later = _continuation_after(data, pos, last.index if last else -1,
                                        last.term if last else 0)  # fmt: skip
            if later is not None:
                held = _last_index_from(data, later[0])
                raise CorruptFileError(
                    f"raft log {self.log_path}: the record at byte {pos} is damaged ({reason}),"
                    f" yet entry {later[1]} (term {later[2]}) follows at byte {later[0]}:"
                    " fsynced entries would be lost, so this controller does not start. Replace"
                    " its log and snapshot with those of the leader or of a controller whose log"
                    f" reaches entry {held} (docs/ha.md, 'A controller's damaged Raft log')",
                    str(self.log_path),
                )

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
