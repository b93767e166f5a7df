"""The in-memory Raft log: an optional snapshot followed by contiguous entries.

Entries start at `start`, which is at most one past the snapshot's last index; entries at or
below the snapshot index may be kept (trailing entries for slow followers). The log always
reaches the snapshot: `last_index >= snapshot index`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rmq_ha.raft.messages import Entry, Snapshot


class RaftLog:
    __slots__ = ("_entries", "_snapshot", "_start", "last_index")

    def __init__(self, snapshot: Snapshot | None = None, entries: Sequence[Entry] = ()) -> None:
        self._snapshot = snapshot
        self._entries: list[Entry] = list(entries)
        snap_index = snapshot.last_index if snapshot is not None else -1
        self._start = self._entries[0].index if self._entries else snap_index + 1
        #: Index of the last entry (the snapshot's when no entry follows it); read-only.
        self.last_index = self._start + len(self._entries) - 1
        self._check()

    @classmethod
    def restore(cls, snapshot: Snapshot | None, entries: Iterable[Entry]) -> RaftLog:
        """Rebuilds a log from what storage returned after a restart, keeping only what is
        consistent: entries are cut at the first gap or term decrease, and dropped entirely
        unless they chain onto the snapshot (a torn snapshot install leaves an old log that
        may disagree with the snapshot)."""
        valid: list[Entry] = []
        for e in entries:
            if valid and (e.index != valid[-1].index + 1 or e.term < valid[-1].term):
                break
            valid.append(e)
        snap_index = snapshot.last_index if snapshot is not None else -1
        snap_term = snapshot.last_term if snapshot is not None else -1
        if valid:
            first, last = valid[0].index, valid[-1].index
            if first > snap_index + 1 or last < snap_index:
                valid = []
            elif first <= snap_index and valid[snap_index - first].term != snap_term:
                valid = []
            elif last > snap_index and valid[snap_index + 1 - first].term < snap_term:
                valid = valid[: snap_index + 1 - first]
        return cls(snapshot, valid)

    def _check(self) -> None:
        snap_index = self.snapshot_index
        if self._start > snap_index + 1 or self.last_index < snap_index:
            raise ValueError(f"log [{self._start}, {self.last_index}] does not reach {snap_index}")

    # -- reading -----------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    @property
    def snapshot_index(self) -> int:
        return self._snapshot.last_index if self._snapshot is not None else -1

    @property
    def start(self) -> int:
        """Index of the first entry held (entries below were compacted)."""
        return self._start

    @property
    def last_term(self) -> int:
        if self._entries:
            return self._entries[-1].term
        return self._snapshot.last_term if self._snapshot is not None else -1

    def __len__(self) -> int:
        return len(self._entries)

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index`, or None when unknown (compacted or beyond)."""
        pos = index - self._start
        if 0 <= pos < len(self._entries):
            return self._entries[pos].term
        if self._snapshot is not None and index == self._snapshot.last_index:
            return self._snapshot.last_term
        if index == -1:
            return -1
        return None

    def entry(self, index: int) -> Entry:
        pos = index - self._start
        if not 0 <= pos < len(self._entries):
            raise IndexError(f"entry {index} not in [{self._start}, {self.last_index}]")
        return self._entries[pos]

    def entries_from(self, index: int, max_count: int, max_bytes: int) -> list[Entry]:
        """Up to `max_count` entries from `index` on, stopping before `max_bytes` of data
        (at least one entry is returned if there is one)."""
        pos = index - self._start
        if pos < 0:
            raise IndexError(f"entry {index} was compacted (start {self._start})")
        out: list[Entry] = []
        size = 0
        for e in self._entries[pos : pos + max_count]:
            size += len(e.data)
            if out and size > max_bytes:
                break
            out.append(e)
        return out

    def all_entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    # -- changing ----------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        expected = self.last_index + 1
        for e in entries:
            if e.index != expected:
                raise ValueError(f"append of entry {e.index}, expected {expected}")
            expected += 1
        self._entries.extend(entries)
        self.last_index = expected - 1

    def truncate_after(self, index: int) -> None:
        """Drops every entry above `index` (never below the snapshot)."""
        if index < self.snapshot_index:
            raise ValueError(f"truncate to {index} below the snapshot {self.snapshot_index}")
        del self._entries[max(0, index + 1 - self._start) :]
        self.last_index = self._start + len(self._entries) - 1

    def set_snapshot(self, snapshot: Snapshot) -> None:
        """Records a snapshot of a prefix this log holds (a local snapshot)."""
        if self.term_at(snapshot.last_index) != snapshot.last_term:
            raise ValueError(f"snapshot at {snapshot.last_index} does not match the log")
        if snapshot.last_index < self.snapshot_index:
            raise ValueError("snapshot goes backwards")
        self._snapshot = snapshot

    def compact_through(self, index: int) -> None:
        """Drops the entries up to and including `index` (they must be in the snapshot)."""
        if index > self.snapshot_index:
            raise ValueError(f"compact through {index} beyond the snapshot {self.snapshot_index}")
        cut = index + 1 - self._start
        if cut > 0:
            del self._entries[:cut]
            self._start = index + 1

    def install_snapshot(self, snapshot: Snapshot) -> bool:
        """Replaces the prefix with a leader's snapshot. Keeps the entries after it when the
        log holds the snapshot's last entry with the same term; otherwise empties the log.
        Returns whether the suffix was kept."""
        keep = self.term_at(snapshot.last_index) == snapshot.last_term
        if not keep:
            self._entries = []
        else:
            del self._entries[: max(0, snapshot.last_index + 1 - self._start)]
        self._start = snapshot.last_index + 1
        self._snapshot = snapshot
        self.last_index = self._start + len(self._entries) - 1
        return keep
