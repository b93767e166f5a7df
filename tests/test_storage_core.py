"""The broker's storage decisions, pure (broker/core/storage.py, issue 15): how far retention
may delete while replication needs the bytes, what a read does with a damaged record, and the
role core's disk-full refusal (RocketMQ: writes refused above diskSpaceWarningLevelRatio,
accepted again at or below diskSpaceCleanForciblyRatio)."""

from __future__ import annotations

from rmq_ha.broker.core import RoleConfig, RoleCore
from rmq_ha.broker.core import events as e
from rmq_ha.broker.core.storage import (
    DamagedReads,
    SkippedUnit,
    record_queue_offset,
    retention_floor,
)
from rmq_ha.store_retention import DiskUsage, RetentionPolicy, decide


def test_retention_keeps_what_a_lagging_slave_and_the_confirm_offset_need() -> None:
    assert retention_floor(slave_positions=[], confirm_offset=None) is None
    assert retention_floor(slave_positions=[900, 300], confirm_offset=None) == 300
    # Controller mode: an in-sync member that is away freezes the confirm offset (#6662),
    # which keeps its bytes although it has no connection.
    assert retention_floor(slave_positions=[900], confirm_offset=200) == 200


Q = "quarantined: body CRC"


def test_a_damaged_record_is_waited_for_then_skipped_once_and_counted() -> None:
    d = DamagedReads(wait_ms=1000)
    units = [SkippedUnit(5, 4096, 300, Q)]
    v = d.judge(units, now_ms=10_000)
    assert v.serve_below == 5 and v.wait_until_ms == 11_000 and v.newly_skipped == []
    # The wait runs from the first reader, not from each read.
    assert d.judge(units, now_ms=10_999).serve_below == 5
    v = d.judge(units, now_ms=11_000)
    assert v.serve_below is None and v.newly_skipped == units
    assert d.skipped_units == 1
    # Later readers skip it without counting it again.
    v = d.judge(units, now_ms=20_000)
    assert v.serve_below is None and v.newly_skipped == [] and d.skipped_units == 1


def test_wait_zero_skips_at_once_and_an_index_mismatch_is_never_waited_for() -> None:
    d = DamagedReads(wait_ms=0)
    assert d.judge([SkippedUnit(1, 10, 5, Q)], 0).serve_below is None
    d = DamagedReads(wait_ms=60_000)
    mismatch = SkippedUnit(2, 20, 5, "consume queue says 5 bytes, the record at 20 has 7")
    v = d.judge([mismatch, SkippedUnit(3, 40, 5, Q)], 0)
    # The unit no replica can repair is skipped; the quarantined one after it is waited for.
    assert v.serve_below == 3 and v.newly_skipped == [mismatch]


def test_a_repaired_record_is_forgotten_and_retention_drops_old_entries() -> None:
    d = DamagedReads(wait_ms=1000)
    d.judge([SkippedUnit(1, 100, 5, Q), SkippedUnit(2, 5000, 5, Q)], 0)
    d.judge([SkippedUnit(2, 5000, 5, Q)], 0)
    assert d.waiting == 2
    d.repaired([100])
    d.forget_below(4000)
    assert d.waiting == 1 and set(d.first_seen_ms) == {5000}


def test_record_queue_offset_reads_the_stored_layout() -> None:
    rec = bytes(20) + (1234).to_bytes(8, "big") + bytes(30)
    assert record_queue_offset(rec) == 1234


def _master() -> RoleCore:
    core = RoleCore(RoleConfig(controller_mode=False))
    core.step(e.Started("10.0.0.1:10911", 0, 0, None, 0), 0)
    return core


def test_writes_are_refused_while_the_disk_is_full_and_accepted_again_after() -> None:
    """RocketMQ's CleanCommitLogService + checkStoreStatus: above the warning ratio the store
    is not writeable; it becomes writeable once usage is at or below the clean-forcibly ratio,
    not merely below the warning ratio (hysteresis)."""
    core = _master()
    assert core.write_refusal() is None
    policy = RetentionPolicy()
    full = False

    def at(ratio: float) -> tuple[str, str] | None:
        nonlocal full
        d = decide(policy, hour=12, usage=DiskUsage(100, int(100 - ratio)), disk_full_before=full)
        full = d.disk_full
        core.step(e.DiskFull(d.disk_full, f"{ratio}%"), 0)
        return core.write_refusal()

    assert at(80) is None
    refusal = at(91)
    assert refusal is not None and refusal[0] == "disk-full" and "disk is full" in refusal[1]
    assert at(88) is not None, "still full between the clean-forcibly and warning ratios"
    assert at(85) is None
    # A slave says it is a slave, full or not (the client must go to the master).
    slave = RoleCore(RoleConfig(controller_mode=False, classic_slave=True, broker_id=1))
    slave.step(e.Started("10.0.0.2:10911", 0, 0, None, 0), 0)
    slave.step(e.DiskFull(True, "95%"), 0)
    assert slave.write_refusal() is not None and slave.write_refusal()[0] == "slave"  # type: ignore[index]
