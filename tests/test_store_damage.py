"""Issue 15, storage half: every damage case of the issue's table at the store level (no
broker), and the primitives the broker integration will call: reads around quarantined
records, repair with a replica's bytes, scrub, the health counters, consume-queue rebuild,
retention, and starting an empty store at a segment boundary (syncFromLastFile).

The issue's setup: 20,000 acknowledged 200-byte messages on 4 queues, the store closed cleanly,
then damaged by hand and reopened, every queue read back from its min offset."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from rmq_ha._native import EpochFile, Message, Store
from rmq_ha.errors import (
    CorruptFileError,
    CorruptRecordError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    QuarantinedRecordError,
)
from rmq_ha.store import health, log_open_report, open_store
from rmq_ha.store_retention import DiskUsage, RetentionPolicy, apply, decide, disk_usage
from storeutil import StoreFactory, decode, read_file, segment_path, write_at

pytestmark = pytest.mark.timeout(120)

TOPIC = "Dmg"
QUEUES = 4
GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class Rec:
    offset: int
    size: int
    queue_id: int
    queue_offset: int
    raw: bytes

    @property
    def end(self) -> int:
        return self.offset + self.size


def write(s: Store, n: int, body_len: int = 200, start: int = 0) -> list[Rec]:
    """`n` messages round-robin on 4 queues, 500 per append, each body naming its index."""
    out: list[Rec] = []
    for lo in range(start, start + n, 500):
        hi = min(lo + 500, start + n)
        batch = [
            Message(TOPIC, i % QUEUES, (b"%08d|" % i).ljust(body_len, b"m")) for i in range(lo, hi)
        ]
        for i, (off, size, qo, _) in zip(range(lo, hi), s.append_batch(batch), strict=True):
            out.append(Rec(off, size, i % QUEUES, qo, b""))
    # The stored bytes (with store timestamps and CRC trailers), read back once.
    return [
        Rec(r.offset, r.size, r.queue_id, r.queue_offset, s.read_record(r.offset).tobytes())
        for r in out
    ]


def flip(path: Path, pos: int, n: int) -> None:
    data = bytearray(read_file(path)[pos : pos + n])
    write_at(path, pos, bytes(b ^ 0xFF for b in data))


def read_back(s: Store) -> tuple[dict[tuple[int, int], bytes], list[tuple[int, int]]]:
    """Every queue from its min offset with read_queue: (served records by (queue, queue
    offset), skipped (queue, queue offset))."""
    got: dict[tuple[int, int], bytes] = {}
    skipped: list[tuple[int, int]] = []
    for q in range(QUEUES):
        off, hi = s.queue_min_offset(TOPIC, q), s.queue_max_offset(TOPIC, q)
        while off < hi:
            bufs, nxt, _, _, skip = s.read_queue(TOPIC, q, off, 256, 8 * MIB)
            skipped_here = {k[0] for k in skip}
            it = iter(bufs)
            for qo in range(off, nxt):
                if qo in skipped_here:
                    skipped.append((q, qo))
                else:
                    got[(q, qo)] = next(it).tobytes()
            assert next(it, None) is None
            assert nxt > off
            off = nxt
    return got, skipped


def contents_via_get_messages(s: Store) -> dict[tuple[int, int], bytes]:
    """Every queue from its min offset with get_messages (a store without damage)."""
    got: dict[tuple[int, int], bytes] = {}
    for q in range(QUEUES):
        off, hi = s.queue_min_offset(TOPIC, q), s.queue_max_offset(TOPIC, q)
        while off < hi:
            bufs, nxt, _, _ = s.get_messages(TOPIC, q, off, 256, 8 * MIB)
            for qo, b in zip(range(off, nxt), bufs, strict=True):
                got[(q, qo)] = b.tobytes()
            off = nxt
    return got


def queue_offsets(s: Store) -> list[tuple[int, int, int]]:
    return [
        (s.queue_min_offset(TOPIC, q), s.queue_max_offset(TOPIC, q), s.next_queue_offset(TOPIC, q))
        for q in range(QUEUES)
    ]


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def test_four_flipped_body_bytes_mid_segment_lose_no_other_record(
    open_native: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Row 1: before, the 9,999 intact records after the bad one were zeroed and nothing was
    said. Now the bad record is quarantined (logged at ERROR with its queue position), the
    19,999 others are served, queue offsets do not move and new sends continue after them."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=GIB)
    recs = write(s, 20_000)
    end = s.max_offset
    before = queue_offsets(s)
    s.close()
    bad = recs[10_000]
    flip(segment_path(root, 0), bad.offset + 100, 4)

    s = open_native(root, segment_size=GIB)
    assert s.max_offset == end, "the records after the bad one were cut"
    assert s.read_record(recs[10_001].offset).tobytes() == recs[10_001].raw
    assert queue_offsets(s) == before
    got, skipped = read_back(s)
    assert skipped == [(bad.queue_id, bad.queue_offset)]
    assert len(got) == 19_999
    for r in recs:
        if r is not bad:
            assert got[(r.queue_id, r.queue_offset)] == r.raw
    with pytest.raises(QuarantinedRecordError) as ei:
        s.read_record(bad.offset)
    assert (ei.value.offset, ei.value.size) == (bad.offset, bad.size)
    report = s.open_report
    assert report["cut_offset"] is None
    (q,) = report["quarantined"]
    assert q["offset"] == bad.offset and q["size"] == bad.size
    assert (q["topic"], q["queue_id"], q["queue_offset"]) == (TOPIC, bad.queue_id, bad.queue_offset)
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        assert log_open_report(report) == 1
    (line,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert (
        str(bad.offset) in line.getMessage()
        and f"queue offset {bad.queue_offset}" in line.getMessage()
    )
    (off, _, qo, _), *_ = s.append_batch([Message(TOPIC, bad.queue_id, b"after")])
    assert off == end and qo == before[bad.queue_id][1]
    st = s.status()
    assert st["quarantined_records"] == 1 and st["quarantined_bytes"] == bad.size
    assert st["skipped_reads"] == 1


@pytest.mark.parametrize("retention", [False, True], ids=["from-0", "after-retention"])
def test_deleted_consumequeue_dir_is_rebuilt_with_identical_offsets(
    open_native: StoreFactory, tmp_path: Path, retention: bool
) -> None:
    """Row 2: before, every queue reported max offset 0 and new sends reused offsets 0, 1, ...
    that groups had consumed. Now the queues are rebuilt from the commitlog's min offset with
    the same min/max offsets and contents, and new sends continue at the old max."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    write(s, 20_000)
    if retention:
        s.flush()
        assert s.delete_segments_before(2 * MIB) == [f"{0:020d}", f"{MIB:020d}"]
    before = queue_offsets(s)
    contents = contents_via_get_messages(s)
    s.close()
    shutil.rmtree(root / "consumequeue")

    s = open_native(root, segment_size=MIB)
    assert queue_offsets(s) == before
    assert contents_via_get_messages(s) == contents
    after, skipped = read_back(s)
    assert after == contents and not skipped
    rebuilt = s.open_report["cq_rebuilt"]
    assert sorted((t, q) for t, q, _ in rebuilt) == [(TOPIC, q) for q in range(QUEUES)]
    placed = s.append_batch([Message(TOPIC, q, b"next") for q in range(QUEUES)])
    assert [p[2] for p in placed] == [b[1] for b in before]
    s.close()
    s = open_native(root, segment_size=MIB)
    assert s.open_report["cq_rebuilt"] == [], "rebuilt once, durable after"
    assert [s.queue_max_offset(TOPIC, q) for q in range(QUEUES)] == [b[1] + 1 for b in before]


def test_flipped_body_in_an_old_segment_is_read_around_and_reported(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """Row 3 (1 MiB segments): before, every pull batch containing the bad record failed, so a
    consumer stopped at that queue for ever. Now a pull returns the records before it, and
    read_queue the records around it with the skipped queue offset; the record is quarantined
    (persistently) and never served."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 20_000)
    s.close()
    bad = next(r for r in recs if r.offset > MIB + 1000 and r.end < 2 * MIB)
    flip(segment_path(root, MIB), bad.offset - MIB + 150, 4)

    s = open_native(root, segment_size=MIB)
    q, qo = bad.queue_id, bad.queue_offset
    bufs, nxt, _, _ = s.get_messages(TOPIC, q, qo - 3, 32)
    assert [b.tobytes() for b in bufs] == [
        r.raw for r in recs if r.queue_id == q and qo - 3 <= r.queue_offset < qo
    ]
    assert nxt == qo
    with pytest.raises(QuarantinedRecordError):
        s.get_messages(TOPIC, q, qo, 32)
    assert s.open_report["quarantined"] == [], "recovery validates only the last segment"
    bufs, nxt, _, _, skipped = s.read_queue(TOPIC, q, qo - 3, 32)
    assert skipped == [(qo, bad.offset, bad.size, skipped[0][3])]
    assert skipped[0][3].startswith("quarantined: ")
    assert len(bufs) == 32 and nxt == qo - 3 + 33
    assert all(decode(b)["queue_offset"] != qo for b in bufs)
    (e,) = s.quarantined()
    assert (e["offset"], e["size"], e["topic"], e["queue_id"], e["queue_offset"]) == (
        bad.offset,
        bad.size,
        TOPIC,
        q,
        qo,
    )
    assert s.status()["quarantined_at_runtime"] == 1
    got, skipped_all = read_back(s)
    assert skipped_all == [(q, qo)] and len(got) == 19_999
    s.close()
    s = open_native(root, segment_size=MIB)
    assert [x["offset"] for x in s.quarantined()] == [bad.offset]


def test_a_flipped_bit_in_the_newest_record_is_quarantined_not_cut(
    open_native: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Storage probe 1: one flipped bit in the newest record of a cleanly closed store cut the
    log there (nothing valid follows it), so the next append took that record's queue offset
    and a consumer already past it never saw the new message (acknowledged, never delivered).
    A bad record that is one whole record ending exactly at the checkpoint's durable point (its
    header claims that size, its last bytes are there) was fsynced whole: it is damage, not a
    torn tail. It is quarantined with its queue offset kept (a replica can repair it), nothing
    is cut, and the next append goes on after it. A zeroed or cut tail is still cut (below)."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=GIB)
    recs = write(s, 2_000)
    end = s.max_offset
    s.close()
    last = recs[-1]
    flip(segment_path(root, 0), last.offset + 100, 1)  # a body byte
    s = open_native(root, segment_size=GIB)
    assert s.max_offset == end
    report = s.open_report
    assert report["cut_offset"] is None and report["missing_durable"] is None
    q = s.quarantined()
    assert [(e["offset"], e["size"], e["queue_offset"]) for e in q] == [
        (last.offset, last.size, last.queue_offset)
    ]
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        assert log_open_report(report, store="s") >= 1
    got, skipped = read_back(s)
    assert skipped == [(last.queue_id, last.queue_offset)] and len(got) == len(recs) - 1
    (nxt,) = s.append_batch([Message(TOPIC, last.queue_id, b"after")])
    assert nxt[0] == end and nxt[2] == last.queue_offset + 1, "its queue offset is not reused"


@pytest.mark.parametrize("damage", ["zero-last-64k", "truncate-mid-record", "corrupt-checkpoint"])
def test_damaged_end_of_the_log_is_cut_to_the_last_valid_record_and_reported(
    open_native: StoreFactory, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Row 4: before, the store came back cut (or whole) and said nothing. Now: when nothing
    valid follows the damage it is still cut to the last valid record, and the report (logged
    at ERROR) says where, how much, and that bytes below the durable point were lost; a corrupt
    checkpoint loses nothing and is reported."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=GIB)
    recs = write(s, 20_000)
    end = s.max_offset
    s.close()
    seg0 = segment_path(root, 0)
    if damage == "zero-last-64k":
        write_at(seg0, end - 65536, bytes(65536))
        survivors = [r for r in recs if r.end <= end - 65536]
    elif damage == "truncate-mid-record":
        os.truncate(seg0, recs[15_000].offset + 77)
        survivors = recs[:15_000]
    else:
        ck = bytearray(read_file(root / "checkpoint"))
        ck[33] ^= 0x40
        (root / "checkpoint").write_bytes(bytes(ck))
        survivors = recs

    s = open_native(root, segment_size=GIB)
    last = survivors[-1].end
    assert s.max_offset == last
    report = s.open_report
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        loud = log_open_report(report, store="s")
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if damage == "corrupt-checkpoint":
        assert str(report["checkpoint"]).startswith("corrupt")
        assert report["cut_offset"] is None
        assert loud == 1 and "checkpoint corrupt" in messages[0]
    else:
        assert report["cut_offset"] == last
        assert report["cut_bytes"] > 0
        assert report["cut_below_durable"] is True
        assert report["missing_durable"] == (last, end)
        assert report["durable_offset"] == end
        assert any(f"{end - last} bytes of fsynced data are missing" in m for m in messages)
        assert any(f"cut the commitlog at {last}" in m for m in messages)
        assert any("confirm offset" in m for m in messages)
        assert loud == 3  # the cut, the missing durable bytes, the clamped confirm offset
    got, skipped = read_back(s)
    assert not skipped and len(got) == len(survivors)


def test_a_cut_segment_before_the_last_is_reported_at_error_and_never_served(
    open_native: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A commitlog segment that is not the last, cut short from outside (mid-record): the
    open reports it at ERROR, naming the file (before, it was extended back with zeros
    silently and the loss showed only when a read reached it); reads serve every record
    before the cut and skip the rest of that segment, never a torn record."""
    root = tmp_path / "store"
    seg = 64 * 1024
    s = open_native(root, segment_size=seg)
    recs = write(s, 2000)
    s.close()
    assert recs[-1].end > 3 * seg
    cut_at = recs[100].offset + 77  # mid-record, in the first segment
    os.truncate(segment_path(root, 0), cut_at)
    s = open_native(root, segment_size=seg)
    report = s.open_report
    assert report["short_segments"] == [(segment_path(root, 0).name, cut_at)]
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        log_open_report(report, store="s")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(segment_path(root, 0).name in m and "cut from outside" in m for m in errors)
    got, skipped = read_back(s)
    lost = {(r.queue_id, r.queue_offset) for r in recs if r.offset < seg and r.end > cut_at}
    assert set(skipped) == lost
    for r in recs:
        if (r.queue_id, r.queue_offset) not in lost:
            assert got[(r.queue_id, r.queue_offset)] == r.raw


async def test_open_store_logs_what_recovery_did(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Trio facade the broker opens its store with logs the report (ERROR for a
    quarantined record), so an operator is told."""
    root = tmp_path / "store"
    s = Store(root, segment_size=MIB)
    recs = write(s, 300)
    s.close()
    flip(segment_path(root, 0), recs[100].offset + 80, 4)
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        async with open_store(root, segment_size=MIB) as st:
            assert st.native.max_offset == recs[-1].end
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and f"at {recs[100].offset}" in errors[0]


@pytest.mark.parametrize("also", ["nothing", "the manifest"])
def test_deleted_last_segments_are_reported_as_missing_durable_bytes(
    open_native: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, also: str
) -> None:
    """The last commitlog segments deleted from outside (after a clean close): their records
    had been fsynced, so the open reports missing durable bytes at ERROR (it used to say
    nothing when the remaining log ended exactly at a segment end), and the queues end where
    the log ends."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 12_000)
    end = recs[-1].end
    s.close()
    last_start = end - end % MIB
    os.remove(segment_path(root, last_start))
    if also == "the manifest":
        os.remove(root / "cqmanifest")
    s = open_native(root, segment_size=MIB)
    report = s.open_report
    assert report["missing_durable"] == (last_start, end)
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        log_open_report(report, store="s")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("bytes of fsynced data are missing" in m for m in errors), errors
    got, skipped = read_back(s)
    assert not skipped and len(got) == sum(1 for r in recs if r.end <= last_start)


def test_an_unreadable_manifest_rebuilds_every_queue(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """A damaged consume-queue manifest plus a damaged queue: without the manifest's counts
    the damage cannot be told from a short queue, so every queue is rebuilt from the log (a
    queue used to open empty and give its offsets out again)."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 4000)
    s.close()
    flip(root / "cqmanifest", 20, 1)
    shutil.rmtree(root / "consumequeue" / TOPIC / "1")
    s = open_native(root, segment_size=MIB)
    rebuilt = {(t, q) for t, q, _ in s.open_report["cq_rebuilt"]}
    assert rebuilt == {(TOPIC, q) for q in range(QUEUES)}
    assert s.next_queue_offset(TOPIC, 1) == sum(1 for r in recs if r.queue_id == 1)
    got, skipped = read_back(s)
    assert not skipped and len(got) == len(recs)


async def test_a_quarantine_list_read_from_its_backup_names_the_main_files_problem(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The quarantine list's main file damaged: the list comes from its backup, and the
    WARNING says the problem was the main file's (it used to label it "backup")."""
    root = tmp_path / "store"
    s = Store(root, segment_size=MIB)
    recs = write(s, 300)
    s.close()
    flip(segment_path(root, 0), recs[100].offset + 80, 4)
    s = Store(root, segment_size=MIB)
    s.close()  # the list (and its backup) now hold the damaged record
    flip(root / "quarantine", 10, 1)
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        async with open_store(root, segment_size=MIB) as st:
            assert [e["offset"] for e in st.native.quarantined()] == [recs[100].offset]
    (warning,) = [
        r.getMessage() for r in caplog.records if "quarantine list read from its backup" in
        r.getMessage()
    ]  # fmt: skip
    assert "(backup; the main file: " in warning and "CRC" in warning


# ---------------------------------------------------------------------------------------------
# Primitives for the broker integration
# ---------------------------------------------------------------------------------------------


def replicate(src: Store, dst: Store, start: int = 0) -> None:
    off = start
    while off < src.max_offset:
        buf = src.read_range(off, 64 * 1024)
        dst.append_raw(off, buf.tobytes())
        off = buf.end_offset
    dst.set_confirm_offset(off)


def test_repair_record_with_a_replicas_bytes(open_native: StoreFactory, tmp_path: Path) -> None:
    """A replica's bytes for a quarantined range are checked (whole-record CRC, position,
    size, the record the consume queue names) and written back; the record is readable again
    and released from the quarantine. Wrong bytes are refused and change nothing."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    replica = open_native(tmp_path / "replica", segment_size=MIB, confirm_follows_max=False)
    recs = write(s, 2000)
    replicate(s, replica)
    s.close()
    bad, neighbour = recs[700], recs[701]
    flip(segment_path(root, 0), bad.offset + 60, 4)
    s = open_native(root, segment_size=MIB)
    (e,) = s.quarantined()
    good = replica.read_range(e["offset"], e["size"], e["offset"] + e["size"]).tobytes()
    assert good == bad.raw
    with pytest.raises(InvalidArgumentError, match="no quarantined range"):
        s.repair_record(neighbour.offset, neighbour.raw)
    with pytest.raises(InvalidArgumentError, match="bytes"):
        s.repair_record(bad.offset, good[:-1])
    corrupt = bytearray(good)
    corrupt[80] ^= 1
    with pytest.raises(InvalidArgumentError, match="not a valid record"):
        s.repair_record(bad.offset, bytes(corrupt))
    moved = bytearray(recs[704].raw)  # same size, but another record (position check)
    if len(moved) == len(good):
        with pytest.raises(InvalidArgumentError):
            s.repair_record(bad.offset, bytes(moved))
    assert len(s.quarantined()) == 1
    assert s.repair_record(bad.offset, good) == [(TOPIC, bad.queue_id, bad.queue_offset)]
    assert s.quarantined() == []
    assert s.read_record(bad.offset).tobytes() == bad.raw
    got, skipped = read_back(s)
    assert not skipped and len(got) == 2000
    assert s.status()["repaired"] == 1


def test_scrub_quarantines_damage_segment_by_segment(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    s = open_native(root)  # 64 KiB segments
    recs = write(s, 2000)
    s.close()
    targets = [recs[50], recs[1500]]
    for r in targets:
        seg = r.offset - r.offset % (64 * 1024)
        flip(segment_path(root, seg), r.offset - seg + r.size - 30, 2)
    s = open_native(root)
    off, found = s.min_offset, []
    while off < s.max_offset:
        off, new = s.scrub(off)
        found += new
    assert [(e["offset"], e["queue_offset"]) for e in found] == [
        (r.offset, r.queue_offset) for r in targets
    ]
    with pytest.raises(InvalidArgumentError):
        s.scrub(recs[10].offset + 1)
    with pytest.raises(OffsetOutOfRangeError):
        s.scrub(s.max_offset + 100)
    h = health(s)
    assert len(h["quarantined"]) == 2
    assert h["status"]["quarantined_at_runtime"] == 2


def test_start_at_starts_an_empty_store_at_a_segment_boundary(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """syncFromLastFile: an empty replica takes the master's last segment as its first."""
    seg = 64 * 1024
    master = open_native(tmp_path / "m")
    recs = write(master, 1500)
    last = master.segment_files()[-1][0]
    assert last >= 4 * seg
    slave = open_native(tmp_path / "s", confirm_follows_max=False)
    with pytest.raises(InvalidArgumentError, match="segment boundary"):
        slave.start_at(last + 20)
    slave.start_at(last)
    assert (slave.min_offset, slave.max_offset) == (last, last)
    replicate(master, slave, last)
    with pytest.raises(InvalidArgumentError, match="not empty"):
        slave.start_at(0)
    first = [r for r in recs if r.offset >= last]
    for q in range(QUEUES):
        mine = [r for r in first if r.queue_id == q]
        assert slave.queue_min_offset(TOPIC, q) == mine[0].queue_offset
        assert slave.queue_max_offset(TOPIC, q) == master.queue_max_offset(TOPIC, q)
    slave.close()
    slave = open_native(tmp_path / "s", confirm_follows_max=False)
    assert (slave.min_offset, slave.max_offset) == (last, master.max_offset)
    assert slave.read_record(first[0].offset).tobytes() == first[0].raw


def test_retention_round_deletes_expired_segments_and_the_epoch_prefix_follows(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """The policy module drives the store primitive: an over-full disk cleans before expiry,
    at most deleteFileBatchMax files a round, never the segment being written, and the epoch
    file's prefix follows the new min offset."""
    s = open_native()
    write(s, 2000)
    s.flush()
    n = len(s.segment_files())
    assert n >= 6
    epochs = EpochFile(tmp_path / "epochFileCheckpoint")
    epochs.append(1, 0)
    epochs.append(2, 3 * 64 * 1024 + 10)
    policy = RetentionPolicy(delete_file_batch_max=3)
    hour = (time.localtime().tm_hour + 12) % 24  # not a deleteWhen hour
    calm = decide(policy, hour=hour, usage=_usage(0.5), disk_full_before=False)
    assert apply(s, calm, epochs.truncate_prefix_by_offset) == []
    # Above 75 % only expired files go: nothing is 72 h old.
    busy = decide(policy, hour=hour, usage=_usage(0.8), disk_full_before=False)
    assert busy.delete and not busy.clean_immediately
    assert apply(s, busy, epochs.truncate_prefix_by_offset) == []
    # Above 85 %: files go before they expire, 3 per round.
    full = decide(policy, hour=hour, usage=_usage(0.88), disk_full_before=False)
    assert full.clean_immediately and not full.disk_full
    deleted = apply(s, full, epochs.truncate_prefix_by_offset)
    assert deleted == [f"{i * 64 * 1024:020d}" for i in range(3)]
    assert s.min_offset == 3 * 64 * 1024
    assert [e[:2] for e in epochs.entries()] == [(1, 0), (2, 3 * 64 * 1024 + 10)]
    deleted = apply(s, full, lambda m: epochs.reconcile(m, s.max_offset))
    assert len(deleted) == 3 and s.min_offset == 6 * 64 * 1024
    assert [e[:2] for e in epochs.entries()] == [(2, 3 * 64 * 1024 + 10)]
    while apply(s, full):
        pass
    assert len(s.segment_files()) == 1, "the segment being written stays"
    assert s.status()["retention_segments"] == n - 1
    usage = disk_usage(tmp_path)
    assert usage.total_bytes > 0 and 0 <= usage.used_ratio <= 1


def _usage(ratio: float) -> DiskUsage:
    total = 1_000_000
    return DiskUsage(total_bytes=total, available_bytes=int(total * (1 - ratio)))


def _units(root: Path, queue_id: int) -> bytes:
    return read_file(root / "consumequeue" / TOPIC / str(queue_id) / f"{0:020d}")


def _point_unit(root: Path, queue_id: int, index: int, phys: int, size: int | None = None) -> None:
    unit_file = root / "consumequeue" / TOPIC / str(queue_id) / f"{0:020d}"
    write_at(unit_file, index * 20, phys.to_bytes(8, "big"))
    if size is not None:
        write_at(unit_file, index * 20 + 8, size.to_bytes(4, "big"))


@pytest.mark.parametrize("damage", ["mid-record", "other-queue", "run-of-three"])
def test_a_damaged_unit_in_the_middle_is_found_again_and_rewritten(
    open_native: StoreFactory, tmp_path: Path, damage: str
) -> None:
    """A consume-queue unit in the middle of a queue that names no record of its queue (the log
    is fine): the read finds the records between the good units around it, rewrites the units
    (durably) and serves every message; nothing is skipped."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 400)
    s.close()
    before = _units(root, 1)
    q1 = {r.queue_offset: r for r in recs if r.queue_id == 1}
    hit = [20, 21, 22] if damage == "run-of-three" else [20]
    for i in hit:
        if damage == "other-queue":
            # a valid record of queue 2 that keeps the units in physical order
            other = next(r for r in recs if r.queue_id == 2 and q1[i - 1].end <= r.offset)
            _point_unit(root, 1, i, other.offset, other.size)
        else:
            _point_unit(root, 1, i, q1[i].offset + 8)
    assert _units(root, 1) != before
    # The first and last units are checked on open; these in the middle are found on read.
    s = open_native(root, segment_size=MIB)
    bufs, nxt, _, _, skipped = s.read_queue(TOPIC, 1, 18, 8)
    assert skipped == []
    assert [b.tobytes() for b in bufs] == [q1[i].raw for i in range(18, 26)]
    assert nxt == 26
    st = s.status()
    assert st["cq_units_repaired"] == len(hit)
    assert st["cq_mismatches"] >= 1
    assert s.quarantined() == [], "the log is fine: nothing is quarantined"
    s.close()
    assert _units(root, 1) == before, "the rewritten units reached the file"
    s = open_native(root, segment_size=MIB)
    assert [b.tobytes() for b in s.get_messages(TOPIC, 1, 20, 3)[0]] == [
        q1[i].raw for i in (20, 21, 22)
    ]
    assert s.status()["cq_units_repaired"] == 0


@pytest.mark.parametrize("size", [2**31 - 1, 0])
def test_a_unit_of_impossible_size_found_while_running_is_rewritten(
    open_native: StoreFactory, tmp_path: Path, size: int
) -> None:
    """Storage probe 2: a consume-queue unit given a size no dispatch writes (here while the
    store runs: open's checks would have rebuilt the queue) failed the whole read, so every
    pull from below it answered SYSTEM_ERROR until a restart. The unit is judged like one that
    names no record of its queue: its record is found again, the unit rewritten, and the read
    serves everything."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 400)
    s.flush()
    s.checkpoint()  # the units reach their file (not read from the write buffer)
    q1 = {r.queue_offset: r for r in recs if r.queue_id == 1}
    before = _units(root, 1)
    _point_unit(root, 1, 20, q1[20].offset, size)
    bufs, nxt, _, _, skipped = s.read_queue(TOPIC, 1, 18, 8)
    assert skipped == []
    assert [b.tobytes() for b in bufs] == [q1[i].raw for i in range(18, 26)]
    assert nxt == 26
    assert s.status()["cq_units_repaired"] == 1
    s.close()
    assert _units(root, 1) == before, "the rewritten unit reached the file"


@pytest.mark.parametrize("keep_units", [0, 150, 299])
def test_a_consume_queue_file_cut_while_running_says_so_and_a_restart_rebuilds_it(
    open_native: StoreFactory, tmp_path: Path, keep_units: int
) -> None:
    """Storage probe (session 16): a consume-queue file cut short under the running store
    failed every read from the cut on with a bare short read ("failed to fill whole
    buffer"). The read still fails (nothing is made up for the lost units: skipping them
    would hand consumers past records the commitlog holds), but it says what happened, which
    file, and that a restart rebuilds the queue; the restart does, and every record is
    served."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 1200)
    s.flush()
    s.checkpoint()  # the units reach their file (not read from the write buffer)
    q1 = [r for r in recs if r.queue_id == 1]
    assert len(q1) == 300
    unit_file = root / "consumequeue" / TOPIC / "1" / f"{0:020d}"
    os.truncate(unit_file, keep_units * 20 + 7)  # a torn unit after the whole ones
    if keep_units:
        got = s.get_messages(TOPIC, 1, 0, keep_units)[0]
        assert [b.tobytes() for b in got] == [r.raw for r in q1[:keep_units]]
    with pytest.raises(CorruptFileError) as e:
        s.read_queue(TOPIC, 1, keep_units, 8)
    assert str(unit_file) in str(e.value)
    assert "shorter than the units it holds" in str(e.value)
    assert "a restart of the store rebuilds the queue" in str(e.value)
    s.close()
    s = open_native(root, segment_size=MIB)
    got = s.get_messages(TOPIC, 1, 0, 300)[0]
    assert [b.tobytes() for b in got] == [r.raw for r in q1]
    bufs, nxt, _, _, skipped = s.read_queue(TOPIC, 1, 0, 300)
    assert (len(bufs), nxt, skipped) == (300, 300, [])


def test_get_messages_keeps_failing_where_a_damaged_unit_cannot_be_found_again(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """Units in the middle of a queue that point into the middle of records, too many in a row
    to look for their records (no good unit within 64 positions on both sides of any of them):
    the read skips them and says why, get_messages fails on them; nothing is rewritten."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 2000)
    s.close()
    q1 = {r.queue_offset: r for r in recs if r.queue_id == 1}
    for i in range(20, 300):
        _point_unit(root, 1, i, q1[i].offset + 8)
    s = open_native(root, segment_size=MIB)
    bufs, _, _, _, skipped = s.read_queue(TOPIC, 1, 18, 5)
    assert [k[0] for k in skipped][:3] == [20, 21, 22]
    assert "points at no valid record" in skipped[0][3]
    assert [b.tobytes() for b in bufs][:2] == [q1[18].raw, q1[19].raw]
    with pytest.raises(CorruptRecordError):
        s.get_messages(TOPIC, 1, 20, 5)
    assert s.status()["cq_mismatches"] >= 1
    assert s.status()["cq_units_repaired"] == 0
    assert s.quarantined() == [], "the log is fine: nothing is quarantined"


async def test_trio_facade_still_closes(tmp_path: Path) -> None:
    async with open_store(tmp_path / "x", segment_size=MIB) as st:
        await trio.sleep(0)
        assert st.native.status()["quarantined_records"] == 0


def test_a_missing_checkpoint_beside_records_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint deleted (or lost) beside a commitlog holding records: the whole log is
    validated and re-dispatched, and the open says so at WARNING (it was silent). A new,
    empty store says nothing."""
    from rmq_ha._native import Store

    root = tmp_path / "s"
    s = Store(str(root))
    s.append_batch([Message(TOPIC, 0, b"x")])
    s.close()
    del s
    (root / "checkpoint").unlink()
    s = Store(str(root))
    with caplog.at_level(logging.INFO, logger="rmq_ha.store"):
        assert log_open_report(s.open_report) == 1
    assert any("no checkpoint" in r.getMessage() for r in caplog.records)
    assert s.queue_max_offset(TOPIC, 0) == 1
    s.close()
    fresh = Store(str(tmp_path / "new"))
    assert log_open_report(fresh.open_report) == 0
    fresh.close()


def _tagged(s: Store, n: int) -> list[tuple[int, str]]:
    """`n` messages on queue 0 of TOPIC, tags alternating A / B; (queue offset, tag) each."""
    from rmq_ha.protocol.message import encode_properties

    out: list[tuple[int, str]] = []
    batch = []
    for i in range(n):
        tag = "A" if i % 2 == 0 else "B"
        batch.append(Message(TOPIC, 0, b"%08d" % i, encode_properties({"TAGS": tag}).encode()))
    for (_, _, qo, _), m in zip(s.append_batch(batch), range(n), strict=True):
        out.append((qo, "A" if m % 2 == 0 else "B"))
    return out


def _set_tag_code(root: Path, index: int, code: int) -> None:
    unit_file = root / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    write_at(unit_file, index * 20 + 12, code.to_bytes(8, "big", signed=True))


def _filtered_offsets(s: Store, tag: str) -> list[int]:
    from rmq_ha.protocol.message import java_hash

    got: list[int] = []
    off = 0
    while True:
        bufs, nxt, _, hi = s.get_messages(TOPIC, 0, off, 16, tag_codes=[java_hash(tag)])
        got += [int(decode(b)["queue_offset"]) for b in bufs]
        if nxt >= hi:
            return got
        off = nxt


def test_a_damaged_tag_code_hides_no_message_from_a_tag_filter(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """A consume-queue unit whose tag code was damaged (the offset and size are fine): a
    tag-filtered read used to skip the message for good, as RocketMQ's does. Now a filtered-out
    unit is checked against its record once, and a wrong code is rewritten from the record's
    TAGS: the A reader gets every A message (the damaged one too), the B reader does not get
    the A message that now claims B, and the units on disk are right again."""
    from rmq_ha.protocol.message import java_hash

    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    tags = _tagged(s, 60)
    s.close()
    before = read_file(root / "consumequeue" / TOPIC / "0" / f"{0:020d}")
    _set_tag_code(root, 10, java_hash("B"))  # an A message that claims B: hidden from A
    _set_tag_code(root, 21, java_hash("A"))  # a B message that claims A: served to A
    _set_tag_code(root, 30, 0x5A5A5A5A5A)  # an A message with a code no tag has
    s = open_native(root, segment_size=MIB)
    want_a = [qo for qo, t in tags if t == "A"]
    want_b = [qo for qo, t in tags if t == "B"]
    assert _filtered_offsets(s, "A") == want_a
    assert _filtered_offsets(s, "B") == want_b
    assert s.status()["cq_tag_codes_repaired"] == 3
    s.close()
    after = read_file(root / "consumequeue" / TOPIC / "0" / f"{0:020d}")
    assert after[: 60 * 20] == before[: 60 * 20], "the rewritten units reached the file"


@pytest.mark.parametrize("damage", ["truncated", "zeroed"])
def test_lost_tail_units_past_a_stale_manifest_are_rebuilt(
    open_native: StoreFactory, tmp_path: Path, damage: str
) -> None:
    """A consume queue that lost its last units below the checkpoint's dispatch point, while
    the manifest's counts are older (counts that only grew are refreshed at most every few
    seconds, so after a crash they lag): the queue opened short with nothing reported, and its
    offsets were given out again. The manifest now says at which dispatch offset its counts
    were taken, and the records dispatched after it are checked against the queues on open:
    the queue is rebuilt, every message is served and the next offset follows them."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    write(s, 200)  # queue 1: offsets 0..49
    s.checkpoint()
    stale = (root / "cqmanifest").read_bytes()
    recs = write(s, 200, start=200)  # queue 1: offsets 50..99
    s.close()
    # the manifest of the first checkpoint, as a crash inside its refresh interval leaves it
    (root / "cqmanifest").write_bytes(stale)
    unit_file = root / "consumequeue" / TOPIC / "1" / f"{0:020d}"
    if damage == "truncated":
        os.truncate(unit_file, 80 * 20)  # units 80..99 gone
    else:
        write_at(unit_file, 80 * 20, bytes(20 * 20))
    s = open_native(root, segment_size=MIB)
    rebuilt = {(t, q): why for t, q, why in s.open_report["cq_rebuilt"]}
    assert "below the dispatch point" in rebuilt[(TOPIC, 1)]
    assert s.queue_max_offset(TOPIC, 1) == 100
    bufs, nxt, _, _, skipped = s.read_queue(TOPIC, 1, 80, 20)
    assert skipped == [] and nxt == 100
    q1 = {r.queue_offset: r.raw for r in recs if r.queue_id == 1}
    assert [b.tobytes() for b in bufs] == [q1[i] for i in range(80, 100)]
    ((_, _, qo, _),) = s.append_batch([Message(TOPIC, 1, b"new")])
    assert qo == 100, "no queue offset is given out twice"


@pytest.mark.parametrize("damage", ["body", "misplaced-copy", "filler"])
def test_the_ha_transfer_quarantines_damage_it_meets_first(
    open_native: StoreFactory, tmp_path: Path, damage: str
) -> None:
    """Damage in an old segment that recovery does not scan, met first by the HA master's
    transfer (read_range from where a replica's log ends): a flipped body, a valid record
    copied over another of the same size (its CRCs hold but it sits at the wrong physical
    offset), or a damaged end-of-segment filler (it belongs to no queue, so no read ever finds
    it). read_range failed with CorruptRecordError at every call, quarantined nothing, and
    served the misplaced copy (which a replica then refused): replication stopped there for
    good. Now the range is quarantined at once (QuarantinedRecordError: the master holds the
    replica there and repairs it from another), and a read of a misplaced copy is damage too."""
    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    recs = write(s, 12_000)
    s.close()
    in_seg1 = [r for r in recs if MIB + 1000 < r.offset and r.end < 2 * MIB]
    bad = in_seg1[len(in_seg1) // 2]
    if damage == "body":
        flip(segment_path(root, MIB), bad.offset - MIB + 150, 4)
    elif damage == "misplaced-copy":
        src = next(r for r in recs if r.size == bad.size and r.queue_id != bad.queue_id)
        write_at(segment_path(root, MIB), bad.offset - MIB, src.raw)
    else:
        last = max((r for r in recs if r.end <= 2 * MIB), key=lambda r: r.offset)
        bad = Rec(last.end, 2 * MIB - last.end, -1, -1, b"")  # the filler after it
        flip(segment_path(root, MIB), bad.offset - MIB + 4, 4)  # its magic code
    s = open_native(root, segment_size=MIB)
    assert s.open_report["quarantined"] == [], "recovery validates only the last segment"
    with pytest.raises(QuarantinedRecordError):
        s.read_range(bad.offset, 1 << 20)
    (e,) = s.quarantined()
    assert (e["offset"], e["size"]) == (bad.offset, bad.size)
    assert s.status()["quarantined_at_runtime"] == 1
    # the records before it are served up to it, never past it
    prev = max((r for r in recs if r.end <= bad.offset), key=lambda r: r.offset)
    assert s.read_range(prev.offset, 1 << 20).tobytes() == prev.raw
    if damage != "filler":
        bufs, _, _, _, skipped = s.read_queue(TOPIC, bad.queue_id, bad.queue_offset, 1)
        assert skipped[0][:3] == (bad.queue_offset, bad.offset, bad.size)
        assert all(decode(b)["queue_offset"] != bad.queue_offset for b in bufs)


def test_a_random_tag_code_in_cold_data_is_caught_without_the_page_cache(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """As above, for records not in the page cache (evicted here): a filtered-out unit whose
    code is one of the queue's real tags is not read from disk then (a random flip does not
    make another tag's code), but one with an unknown code is, and it is repaired."""
    from rmq_ha.protocol.message import java_hash

    root = tmp_path / "store"
    s = open_native(root, segment_size=MIB)
    tags = _tagged(s, 60)
    s.close()
    _set_tag_code(root, 10, 0x1234_5678_9ABC)  # an A message with a code no tag has
    seg = root / "commitlog" / f"{0:020d}"
    fd = os.open(seg, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    s = open_native(root, segment_size=MIB)
    assert _filtered_offsets(s, "B") == [qo for qo, t in tags if t == "B"]
    assert _filtered_offsets(s, "A") == [qo for qo, t in tags if t == "A"]
    assert s.status()["cq_tag_codes_repaired"] == 1
    assert s.queue_unit(TOPIC, 0, 10)[2] == java_hash("A")
