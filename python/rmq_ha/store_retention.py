"""Retention and disk protection with RocketMQ's rules (`CleanCommitLogService`).

The decision is pure (`decide`: a policy, the hour, the disk usage and the previous disk-full
flag in; what to delete and whether writes are refused out); the I/O is two thin shells:
`disk_usage` reads the filesystem and `apply` calls the store's retention primitive.

RocketMQ's rules, as implemented here:

* A round deletes commitlog files when it is one of the `deleteWhen` hours, or the disk is
  above `diskMaxUsedSpaceRatio` (75 %), or an operator asked for it. It deletes, oldest first
  and at most `deleteFileBatchMax` (10) files, those last written more than `fileReservedTime`
  hours (72) ago, stopping at the first file that is not expired (a file in the middle is never
  deleted) and never the file being written.
* Above `diskSpaceCleanForciblyRatio` (85 %) files go even before they expire
  (`cleanFileForciblyEnable`).
* Above `diskSpaceWarningLevelRatio` (90 %) the disk is "full": writes are refused; they are
  accepted again once usage is at or below `diskSpaceCleanForciblyRatio` (RocketMQ's
  hysteresis: between the two ratios the flag keeps its value).
* `diskMaxUsedSpaceRatio` is clamped into [10, 95] like RocketMQ's getter; the other two are
  used as configured.
* `destroyMapedFileIntervalForcibly` has no effect: RocketMQ waits that long for readers still
  holding a deleted file's mapping; rmq_ha unlinks at once and a reader's zero-copy buffer keeps
  the bytes (the space is freed when the last buffer is dropped).

The store itself never deletes past min(flushed, dispatched) offsets. After a deletion the
epoch file's prefix must follow the new min offset: `apply` calls `on_min_offset(new_min)` for
that (for example `lambda m: epochs.reconcile(m, store.max_offset)`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rmq_ha._native import Store
from rmq_ha.config import BrokerConfig, parse_delete_when

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class RetentionPolicy:
    file_reserved_time_h: int = 72
    delete_when: tuple[int, ...] = (4,)
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    delete_file_batch_max: int = 10
    clean_file_forcibly_enable: bool = True
    delete_commit_log_files_interval_ms: int = 100

    @classmethod
    def from_config(cls, cfg: BrokerConfig) -> RetentionPolicy:
        return cls(
            file_reserved_time_h=cfg.file_reserved_time_h,
            delete_when=parse_delete_when(cfg.delete_when),
            disk_max_used_space_ratio=cfg.disk_max_used_space_ratio,
            disk_space_clean_forcibly_ratio=cfg.disk_space_clean_forcibly_ratio,
            disk_space_warning_level_ratio=cfg.disk_space_warning_level_ratio,
            delete_file_batch_max=cfg.delete_file_batch_max,
            clean_file_forcibly_enable=cfg.clean_file_forcibly_enable,
            delete_commit_log_files_interval_ms=cfg.delete_commit_log_files_interval_ms,
        )

    @property
    def max_used_ratio(self) -> float:
        """diskMaxUsedSpaceRatio as a fraction, clamped into [0.10, 0.95] (RocketMQ)."""
        return min(max(self.disk_max_used_space_ratio, 10), 95) / 100


@dataclass(frozen=True)
class DiskUsage:
    total_bytes: int
    available_bytes: int

    @property
    def used_ratio(self) -> float:
        """Used fraction of the filesystem as RocketMQ computes it: (total - usable) / total;
        -1 when unknown (RocketMQ then runs a deletion round, and does not refuse writes)."""
        if self.total_bytes <= 0:
            return -1.0
        return (self.total_bytes - self.available_bytes) / self.total_bytes


@dataclass(frozen=True)
class RetentionDecision:
    #: Run a deletion round.
    delete: bool
    #: Delete files last written more than this long ago (ms).
    reserved_ms: int
    #: Delete files whatever their age (the disk is too full).
    clean_immediately: bool
    #: At most this many files this round.
    max_files: int
    #: Writes must be refused (the disk is above the warning ratio).
    disk_full: bool
    #: Why a round runs (or why not), for logs.
    reason: str


def decide(
    policy: RetentionPolicy,
    *,
    hour: int,
    usage: DiskUsage,
    disk_full_before: bool,
    manual: bool = False,
) -> RetentionDecision:
    """One round of RocketMQ's CleanCommitLogService for the commitlog's filesystem."""
    ratio = usage.used_ratio
    warning = policy.disk_space_warning_level_ratio / 100
    forcibly = policy.disk_space_clean_forcibly_ratio / 100
    if ratio > warning:
        disk_full, clean_now = True, True
    elif ratio > forcibly:
        disk_full, clean_now = disk_full_before, True
    else:
        disk_full, clean_now = False, False
    time_up = hour in policy.delete_when
    space = ratio < 0 or ratio > policy.max_used_ratio
    reasons = [
        r
        for r, on in (
            (f"deleteWhen hour {hour:02d}", time_up),
            (f"disk {ratio:.0%} used", space),
            ("requested", manual),
        )
        if on
    ]
    return RetentionDecision(
        delete=bool(reasons),
        reserved_ms=policy.file_reserved_time_h * HOUR_MS,
        clean_immediately=clean_now and policy.clean_file_forcibly_enable,
        max_files=policy.delete_file_batch_max,
        disk_full=disk_full,
        reason=", ".join(reasons) or "nothing due",
    )


def disk_usage(path: str | os.PathLike[str]) -> DiskUsage:
    """The filesystem holding `path` (os.statvfs: usable space, as Java's getUsableSpace)."""
    st = os.statvfs(Path(path))
    return DiskUsage(
        total_bytes=st.f_blocks * st.f_frsize, available_bytes=st.f_bavail * st.f_frsize
    )


def apply(
    store: Store,
    decision: RetentionDecision,
    on_min_offset: Callable[[int], None] | None = None,
    *,
    keep_from: int | None = None,
    max_files: int | None = None,
) -> list[str]:
    """Runs the deletion a decision asks for (blocking: call it off the event loop); returns
    the deleted commitlog files. `on_min_offset(new_min)` runs when files were deleted (the
    epoch file's prefix follows the commitlog's min offset). `keep_from`: never delete a
    segment that does not end at or below it (what replication still needs); `max_files`
    overrides the decision's (the broker deletes one file at a time, pausing between)."""
    if not decision.delete:
        return []
    deleted = store.delete_expired(
        decision.reserved_ms,
        clean_immediately=decision.clean_immediately,
        max_files=decision.max_files if max_files is None else max_files,
        keep_from=keep_from,
    )
    if deleted and on_min_offset is not None:
        on_min_offset(store.min_offset)
    return deleted
