"""The retention decision (rmq_ha.store_retention.decide), pure: RocketMQ's CleanCommitLogService
rules for deleteWhen, fileReservedTime, diskMaxUsedSpaceRatio, diskSpaceCleanForciblyRatio,
diskSpaceWarningLevelRatio (with its hysteresis), cleanFileForciblyEnable and
deleteFileBatchMax; and the config keys (storePathEpochFile included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_ha.config import BrokerConfig, from_mapping
from rmq_ha.errors import ConfigError
from rmq_ha.store_retention import (
    HOUR_MS,
    DiskUsage,
    RetentionPolicy,
    decide,
)

DEFAULT = RetentionPolicy()


def used(ratio: float) -> DiskUsage:
    return DiskUsage(total_bytes=10_000, available_bytes=round(10_000 * (1 - ratio)))


def test_defaults_are_rocketmqs() -> None:
    cfg, _ = from_mapping(BrokerConfig, {})
    p = RetentionPolicy.from_config(cfg)
    assert p == DEFAULT
    assert (p.file_reserved_time_h, p.delete_when) == (72, (4,))
    assert (
        p.disk_max_used_space_ratio,
        p.disk_space_clean_forcibly_ratio,
        p.disk_space_warning_level_ratio,
    ) == (75, 85, 90)
    assert (p.delete_file_batch_max, p.clean_file_forcibly_enable) == (10, True)
    assert cfg.destroy_mapped_file_interval_forcibly_ms == 120_000


def test_expired_files_go_at_the_delete_when_hour_only_while_the_disk_is_calm() -> None:
    at_4 = decide(DEFAULT, hour=4, usage=used(0.2), disk_full_before=False)
    assert at_4.delete and not at_4.clean_immediately and not at_4.disk_full
    assert at_4.reserved_ms == 72 * HOUR_MS and at_4.max_files == 10
    assert "deleteWhen hour 04" in at_4.reason
    at_5 = decide(DEFAULT, hour=5, usage=used(0.2), disk_full_before=False)
    assert not at_5.delete and at_5.reason == "nothing due"
    p = RetentionPolicy(delete_when=(4, 16))
    assert decide(p, hour=16, usage=used(0.2), disk_full_before=False).delete


def test_above_disk_max_used_space_ratio_expired_files_go_at_any_hour() -> None:
    d = decide(DEFAULT, hour=13, usage=used(0.76), disk_full_before=False)
    assert d.delete and not d.clean_immediately and not d.disk_full
    assert not decide(DEFAULT, hour=13, usage=used(0.74), disk_full_before=False).delete


def test_above_clean_forcibly_ratio_files_go_before_they_expire() -> None:
    d = decide(DEFAULT, hour=13, usage=used(0.86), disk_full_before=False)
    assert d.delete and d.clean_immediately and not d.disk_full
    off = RetentionPolicy(clean_file_forcibly_enable=False)
    d = decide(off, hour=13, usage=used(0.86), disk_full_before=False)
    assert d.delete and not d.clean_immediately


def test_above_the_warning_ratio_writes_are_refused_until_below_clean_forcibly() -> None:
    """diskSpaceWarningLevelRatio: the disk-full flag is set above 90 % and cleared only at or
    below 85 % (between the two it keeps its value, as RocketMQ's runningFlags do)."""
    d = decide(DEFAULT, hour=13, usage=used(0.91), disk_full_before=False)
    assert d.disk_full and d.clean_immediately and d.delete
    assert decide(DEFAULT, hour=13, usage=used(0.87), disk_full_before=True).disk_full
    assert not decide(DEFAULT, hour=13, usage=used(0.87), disk_full_before=False).disk_full
    assert not decide(DEFAULT, hour=13, usage=used(0.85), disk_full_before=True).disk_full


def test_disk_max_used_space_ratio_is_clamped_like_rocketmq() -> None:
    assert RetentionPolicy(disk_max_used_space_ratio=99).max_used_ratio == 0.95
    assert RetentionPolicy(disk_max_used_space_ratio=5).max_used_ratio == 0.10
    p = RetentionPolicy(disk_max_used_space_ratio=99)
    assert decide(p, hour=13, usage=used(0.96), disk_full_before=False).delete


def test_unknown_usage_runs_a_round_without_refusing_writes() -> None:
    d = decide(DEFAULT, hour=13, usage=DiskUsage(0, 0), disk_full_before=False)
    assert d.delete and not d.disk_full and not d.clean_immediately


def test_a_manual_request_runs_a_round() -> None:
    d = decide(DEFAULT, hour=13, usage=used(0.1), disk_full_before=False, manual=True)
    assert d.delete and d.reason == "requested"


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"deleteWhen": "4am"}, "deleteWhen"),
        ({"deleteWhen": "24"}, "deleteWhen"),
        ({"deleteWhen": ";"}, "deleteWhen"),
        ({"fileReservedTime": "-1"}, "fileReservedTime"),
        ({"diskMaxUsedSpaceRatio": "0"}, "diskMaxUsedSpaceRatio"),
        ({"diskSpaceWarningLevelRatio": "101"}, "diskSpaceWarningLevelRatio"),
        (
            {"diskSpaceWarningLevelRatio": "50", "diskSpaceCleanForciblyRatio": "85"},
            "diskSpaceWarningLevelRatio",
        ),
        ({"deleteFileBatchMax": "0"}, "deleteFileBatchMax"),
        ({"destroyMapedFileIntervalForcibly": "0"}, "destroyMapedFileIntervalForcibly"),
    ],
)
def test_bad_retention_config_names_the_key(values: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        from_mapping(BrokerConfig, values)
    assert ei.value.key == key


def test_delete_when_accepts_several_hours() -> None:
    cfg, unknown = from_mapping(BrokerConfig, {"deleteWhen": "04;16; 23", "fileReservedTime": 48})
    assert not unknown
    p = RetentionPolicy.from_config(cfg)
    assert (p.delete_when, p.file_reserved_time_h) == ((4, 16, 23), 48)


def test_store_path_epoch_file_defaults_to_the_store_root_and_can_be_moved(
    tmp_path: Path,
) -> None:
    cfg, _ = from_mapping(BrokerConfig, {"storePathRootDir": str(tmp_path / "s")})
    assert cfg.epoch_file_path == tmp_path / "s" / "epochFileCheckpoint"
    cfg, _ = from_mapping(
        BrokerConfig,
        {"storePathRootDir": str(tmp_path / "s"), "storePathEpochFile": str(tmp_path / "e" / "ep")},
    )
    assert cfg.epoch_file_path == tmp_path / "e" / "ep"


def test_ha_service_opens_the_epoch_file_at_store_path_epoch_file(tmp_path: Path) -> None:
    from rmq_ha._native import Store
    from rmq_ha.broker.ha.core import HaCore
    from rmq_ha.broker.ha.service import HaService
    from rmq_ha.store import AsyncStore

    cfg, _ = from_mapping(
        BrokerConfig,
        {
            "storePathRootDir": str(tmp_path / "s"),
            "storePathEpochFile": str(tmp_path / "elsewhere" / "epochs"),
        },
    )
    native = Store(tmp_path / "s", segment_size=64 * 1024)
    try:
        svc = HaService(
            cfg, AsyncStore(native), lambda: HaCore(0, False), lambda e: None, lambda: 0
        )
        svc.epochs.append(1, 0)
        assert (tmp_path / "elsewhere" / "epochs").exists()
        assert not (tmp_path / "s" / "epochFileCheckpoint").exists()
    finally:
        native.close()


async def test_writes_resume_in_the_round_that_freed_the_space(tmp_path: Path) -> None:
    """A full disk: the round that deleted enough files judged the disk only at its start, so
    writes stayed refused until the next round, cleanResourceInterval later (operator probe:
    10 s)."""
    from rmq_ha._native import EpochFile, Message
    from rmq_ha.broker.core import events as ev
    from rmq_ha.broker.io.storage import StorageService
    from rmq_ha.config import BrokerConfig
    from rmq_ha.net.client import RemotingClient
    from rmq_ha.store import open_store
    from rmq_ha.store_retention import DiskUsage

    cfg = BrokerConfig(
        store_path_root_dir=str(tmp_path),
        commitlog_segment_bytes=1 << 20,
        delete_commit_log_files_interval_ms=0,
    )
    events: list[ev.Event] = []
    async with open_store(tmp_path, segment_size=1 << 20) as store, RemotingClient() as rc:
        for _ in range(4):
            store.native.append_batch([Message("R", 0, b"x" * 1000) for _ in range(1000)])
        store.native.flush()
        assert len(store.native.segment_files()) >= 4

        def usage(_: Path) -> DiskUsage:  # full while 3 or more segments remain
            left = len(store.native.segment_files())
            return DiskUsage(100, 4 if left >= 3 else 60)

        async def no_sources() -> list[str]:
            return []

        svc = StorageService(
            cfg,
            store,
            epochs=EpochFile(tmp_path / "epochFileCheckpoint"),
            feed=events.append,
            outbound=rc,
            replication_floor=lambda: None,
            repair_sources=no_sources,
            on_repaired=lambda _: None,
            usage=usage,
        )
        deleted = await svc.retention_round()
        assert deleted, "the full disk made the round delete"
        full = [e for e in events if isinstance(e, ev.DiskFull)]
        assert [e.full for e in full] == [True, False], full
        assert svc.disk_full is False
