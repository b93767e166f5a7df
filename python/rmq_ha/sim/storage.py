"""A node's disk in the simulator: what survives a crash.

Operations become durable only when the node's fsync completes; a crash keeps a prefix of the
batch being written (storage is prefix-durable, as the driver contract requires) and loses the
rest. The model is deliberately independent of `RaftLog`, so it cross-checks the core.
"""

from __future__ import annotations

from rmq_ha.raft.messages import Entry, Snapshot
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


class StorageError(Exception):
    """The core asked storage for something impossible (a core bug)."""


class DurableStorage:
    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []

    @property
    def last_index(self) -> int:
        if self.entries:
            return self.entries[-1].index
        return self.snapshot.last_index if self.snapshot is not None else -1

    def term_at(self, index: int) -> int | None:
        if self.entries:
            pos = index - self.entries[0].index
            if 0 <= pos < len(self.entries):
                return self.entries[pos].term
        if self.snapshot is not None and index == self.snapshot.last_index:
            return self.snapshot.last_term
        return -1 if index == -1 else None

    def apply(self, op: PersistOp) -> None:
        if isinstance(op, SaveHardState):
            hs = op.hard_state
            if hs.term < self.hard_state.term:
                raise StorageError(f"term goes back from {self.hard_state.term} to {hs.term}")
            if (
                hs.term == self.hard_state.term
                and self.hard_state.voted_for is not None
                and hs.voted_for != self.hard_state.voted_for
            ):
                raise StorageError(
                    f"vote in term {hs.term} changes from {self.hard_state.voted_for} "
                    f"to {hs.voted_for}"
                )
            self.hard_state = hs
        elif isinstance(op, AppendLog):
            expected = self.last_index + 1
            for e in op.entries:
                if e.index != expected:
                    raise StorageError(f"append of {e.index}, storage expects {expected}")
                expected += 1
            self.entries.extend(op.entries)
        elif isinstance(op, TruncateLog):
            if self.entries:
                keep = op.after_index + 1 - self.entries[0].index
                del self.entries[max(0, keep) :]
        elif isinstance(op, SaveSnapshot):
            self.snapshot = op.snapshot
        elif isinstance(op, CompactLog):
            if self.entries:
                cut = op.through_index + 1 - self.entries[0].index
                if cut > 0:
                    del self.entries[:cut]

    def reset_log(self, entries: tuple[Entry, ...]) -> None:
        """Recovery cuts what does not chain onto the snapshot (see `RaftLog.restore`)."""
        self.entries = list(entries)

    def persisted(self) -> PersistedState:
        return PersistedState(self.hard_state, self.snapshot, tuple(self.entries))
