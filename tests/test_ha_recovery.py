"""Issue 13, without processes: what a replica owes after recovery cut its log, and how the
broker's HA service reconciles its epoch file and refuses promotion until it caught up."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_ha._native import EpochFile, Message
from rmq_ha.broker.ha import catchup
from rmq_ha.broker.ha.catchup import CatchUp, catch_up_after_recovery, epoch_of_byte
from rmq_ha.broker.ha.service import EPOCH_FILE, HaService, RoleRefused
from rmq_ha.config import BrokerConfig, from_mapping
from rmq_ha.store import open_store


def test_epoch_of_byte_is_the_epoch_owning_the_byte_below() -> None:
    entries = [(1, 0), (3, 100), (5, 400)]
    assert epoch_of_byte(entries, 400) == 3  # byte 399 is epoch 3's
    assert epoch_of_byte(entries, 401) == 5
    assert epoch_of_byte(entries, 1) == 1
    assert epoch_of_byte([], 10) == 0


def test_a_log_cut_below_its_last_epoch_start_owes_that_start() -> None:
    """The crash loop's replica: master of epoch 5 from 392889, recovered to 348953."""
    debt = catch_up_after_recovery([(1, 0), (3, 100_000), (5, 392_889)], 348_953, None, None)
    assert debt is not None and (debt.offset, debt.epoch) == (392_889, 3)
    assert "epoch 5" in debt.reason


def test_the_clamped_confirm_offset_and_a_persisted_debt_count_too() -> None:
    entries = [(1, 0), (2, 500)]
    debt = catch_up_after_recovery(entries, 600, 900, None)
    assert debt is not None and (debt.offset, debt.epoch) == (900, 2)
    # A second crash before catching up: the persisted, larger debt survives.
    old = CatchUp(1_200, 2, "epoch 3 started at 1200")
    assert catch_up_after_recovery([(1, 0), (2, 500)], 600, None, old) == old
    # Nothing lost: no debt; a debt already paid is dropped.
    assert catch_up_after_recovery(entries, 600, 550, None) is None
    assert catch_up_after_recovery(entries, 1_300, None, old) is None


def test_debt_files_round_trip_and_a_damaged_one_keeps_the_replica_unelectable(
    tmp_path: Path,
) -> None:
    assert catchup.load(tmp_path) is None
    debt = CatchUp(7, 1, "why")
    catchup.save(tmp_path, debt)
    assert catchup.load(tmp_path) == debt
    (tmp_path / catchup.FILE_NAME).write_bytes(b"{not json")
    loaded = catchup.load(tmp_path)
    assert loaded is not None and loaded.offset > 2**62
    catchup.clear(tmp_path)
    assert catchup.load(tmp_path) is None


async def test_ha_service_reconciles_the_epoch_file_and_refuses_to_lead_until_caught_up(
    tmp_path: Path,
) -> None:
    """A controller-mode replica whose epoch file says epoch 2 started at an offset its log no
    longer reaches: the entry is cut at start, the debt persisted and reported, promotion
    refused (no EpochConflictError, nothing changed), then allowed once the log reaches it."""
    cfg, _ = from_mapping(
        BrokerConfig,
        {
            "brokerClusterName": "c",
            "brokerName": "b",
            "brokerId": "-1",
            "enableControllerMode": "true",
            "controllerAddr": "127.0.0.1:1",
            "storePathRootDir": str(tmp_path),
        },
    )
    async with open_store(tmp_path, segment_size=1 << 20, confirm_follows_max=False) as store:
        placed = store.native.append_batch([Message("T", 0, b"x" * 100) for _ in range(4)])
        end = placed.end_offset
    epochs = EpochFile(tmp_path / EPOCH_FILE)
    epochs.append(1, 0)
    epochs.append(2, end + 5_000)  # elected at an offset whose bytes were then torn away
    del epochs
    async with open_store(tmp_path, segment_size=1 << 20, confirm_follows_max=False) as store:
        ha = HaService(cfg, store, 3)
        assert [(e, s) for e, s, _ in ha.epochs.entries()] == [(1, 0)]
        debt = ha.catch_up()
        assert debt is not None and (debt.offset, debt.epoch) == (end + 5_000, 1)
        assert catchup.load(tmp_path) == debt
        with pytest.raises(RoleRefused, match="must catch up"):
            ha.change_to_master(3, frozenset({3}), 3)
        assert not ha.is_master
        assert [(e, s) for e, s, _ in ha.epochs.entries()] == [(1, 0)]
        # Replication brings the log back past the debt: cleared, promotion works.
        while store.native.max_offset < end + 5_000:
            store.native.append_batch([Message("T", 0, b"y" * 1000)])
        assert ha.catch_up() is None
        assert catchup.load(tmp_path) is None
        assert ha.change_to_master(3, frozenset({3}), 3)
        assert ha.is_master and ha.epochs.last_epoch() == 3
