"""Pure decisions of the broker's storage services (issue 15): how far retention may delete,
and what a read does with a record the store has quarantined. No Trio, no clock, no I/O: the
shell (broker/io/storage.py) and the readers (handlers/pull.py, special/records.py) pass the
time in.

**Retention floor.** The store never deletes past min(flushed, dispatched). The broker adds
what replication still needs: every connected slave's position (its last ack, or where the
master started or is sending it, whichever is lower) and, in controller mode, the confirm
offset — the minimum ack of the SyncStateSet, frozen while a member has no connection
(RocketMQ #6662), so an in-sync replica that is briefly away keeps its bytes until the master
drops it from the set. A slave that is neither connected nor in the set is not waited for (it
could be gone for ever); when it comes back below the master's min offset it is told so and
must be reset (docs/store.md).

**Damaged records in reads.** `Store.read_queue` returns the records around a quarantined one
and lists it as skipped. `DamagedReads.judge` decides per damaged record (keyed by its
physical offset): for `wait_ms` after a reader first met it, readers stop before it (a repair
from a replica may still come); after that it is skipped — served past, counted and reported
once. `wait_ms` 0 skips at once. Units skipped for any other reason (a consume-queue unit that
names no record of its queue) are skipped at once: no replica's bytes can repair an index.

**Scrub.** Damage in a segment nobody reads (an old segment of a slave, of a master whose
consumers are caught up) would otherwise be found only when a read reaches it, perhaps after
the replica holding a good copy is gone. `ScrubPass` walks the whole commitlog at a bounded
pace, so what it quarantines is repaired from a replica while one still has it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmq_ha._native import StoreBuffer


def retention_floor(*, slave_positions: Iterable[int], confirm_offset: int | None) -> int | None:
    """The lowest commitlog offset replication still needs (None: nothing holds retention
    back). `confirm_offset` is given in controller mode only."""
    needs = list(slave_positions)
    if confirm_offset is not None:
        needs.append(confirm_offset)
    return min(needs) if needs else None


@dataclass(frozen=True)
class SkippedUnit:
    """A consume-queue unit `read_queue` did not serve."""

    queue_offset: int
    phys_offset: int
    size: int
    reason: str

    @property
    def quarantined(self) -> bool:
        return self.reason.startswith("quarantined")

    @classmethod
    def of(cls, raw: tuple[int, int, int, str]) -> SkippedUnit:
        return cls(raw[0], raw[1], raw[2], raw[3])


@dataclass(frozen=True)
class ReadVerdict:
    #: Serve only records whose queue offset is below this (None: serve everything read).
    serve_below: int | None
    #: When the first waited-for record will be skipped (ms; None: nothing waited for).
    wait_until_ms: int | None
    #: Units skipped for the first time now (to log and count once).
    newly_skipped: list[SkippedUnit]


@dataclass
class DamagedReads:
    """Per damaged record: when a reader first met it, and whether it was skipped."""

    wait_ms: int
    first_seen_ms: dict[int, int] = field(default_factory=dict)
    skipped: set[int] = field(default_factory=set)
    #: Counters for the broker's status.
    skipped_units: int = 0
    waited_reads: int = 0

    def judge(self, units: Sequence[SkippedUnit], now_ms: int) -> ReadVerdict:
        """What a read that met `units` (in queue order) serves now."""
        newly: list[SkippedUnit] = []
        for u in units:
            if u.phys_offset in self.skipped:
                continue
            if u.quarantined:
                seen = self.first_seen_ms.setdefault(u.phys_offset, now_ms)
                until = seen + self.wait_ms
                if now_ms < until:
                    self.waited_reads += 1
                    return ReadVerdict(u.queue_offset, until, newly)
            self.skipped.add(u.phys_offset)
            self.skipped_units += 1
            newly.append(u)
        return ReadVerdict(None, None, newly)

    def repaired(self, phys_offsets: Iterable[int]) -> None:
        """Records made readable again: forget them (a later damage starts a new wait)."""
        for off in phys_offsets:
            self.first_seen_ms.pop(off, None)
            self.skipped.discard(off)

    def forget_below(self, min_offset: int) -> None:
        """Retention deleted everything below `min_offset`."""
        for off in [o for o in self.first_seen_ms if o < min_offset]:
            del self.first_seen_ms[off]
        self.skipped = {o for o in self.skipped if o >= min_offset}

    @property
    def waiting(self) -> int:
        return sum(1 for o in self.first_seen_ms if o not in self.skipped)


@dataclass
class ScrubPass:
    """Where the background scrub stands (ours): one pass validates the commitlog from its
    min offset to its max, a segment per call (`Store.scrub`), pausing after each as long as
    reading it at `bytes_per_second` takes. The log moves under it: retention deletes ahead of
    the cursor (it goes on from the new min), an HA truncation cuts below it (the pass ends),
    and a cut then regrown log may leave it inside a record (it goes back to its segment's
    start, a record boundary, or past a segment whose start is refused)."""

    bytes_per_second: int
    cursor: int | None = None  # None: no pass under way
    #: Counters for the broker's status.
    passes: int = 0
    scrubbed_bytes: int = 0
    found: int = 0

    def begin(self, min_offset: int) -> None:
        self.cursor = min_offset

    def next_call(self, min_offset: int, max_offset: int) -> int | None:
        """Where the next `scrub` call starts; None when the pass is over (counted)."""
        if self.cursor is None:
            return None
        self.cursor = max(self.cursor, min_offset)
        if self.cursor >= max_offset:
            self.cursor = None
            self.passes += 1
            return None
        return self.cursor

    def scrubbed(self, start: int, end: int, found: int) -> float:
        """A call validated [start, end) and quarantined `found` new ranges: the pause (s)
        before the next call."""
        self.cursor = end
        self.scrubbed_bytes += max(0, end - start)
        self.found += found
        return max(0, end - start) / self.bytes_per_second

    def not_a_boundary(self, at: int, segment_size: int) -> None:
        """The store refused `at` as a record boundary."""
        seg_start = at - at % segment_size
        self.cursor = seg_start if seg_start != at else at + segment_size


def record_queue_offset(buf: bytes | StoreBuffer) -> int:
    """QUEUEOFFSET of a stored record (bytes 20..28, docs/store.md)."""
    return int.from_bytes(memoryview(buf)[20:28], "big", signed=True)


#: SYSFLAG bit: the born host is IPv6 (16 address bytes instead of 4).
BORNHOST_V6_FLAG = 0x1 << 4


def record_store_timestamp(buf: bytes | StoreBuffer) -> int:
    """STORETIMESTAMP (ms) of a stored record: after SYSFLAG (36..40), BORNTIMESTAMP (40..48)
    and BORNHOST (address + 4-byte port; IPv4 or IPv6 by SYSFLAG), docs/store.md."""
    m = memoryview(buf)
    sys_flag = int.from_bytes(m[36:40], "big")
    at = 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    if len(m) < at + 8:
        raise ValueError(f"record of {len(m)} bytes has no store timestamp at {at}")
    return int.from_bytes(m[at : at + 8], "big", signed=True)
