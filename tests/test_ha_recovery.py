"""Issue 13, without processes: what a replica owes after recovery cut its log, and how the
broker's HA service reconciles its epoch file and refuses promotion until it caught up."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_ha._native import EpochFile, Message
from rmq_ha.broker.broker import role_config
from rmq_ha.broker.core import Role, RoleCore
from rmq_ha.broker.core import actions as act
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.ha import catchup
from rmq_ha.broker.ha.catchup import CatchUp, catch_up_after_recovery, epoch_of_byte
from rmq_ha.broker.ha.service import HaService
from rmq_ha.config import BrokerConfig, from_mapping
from rmq_ha.errors import CorruptFileError
from rmq_ha.store import open_store


def _controller_mode(root: Path | None) -> BrokerConfig:
    """A controller-mode broker's config (its store in `root`, when given)."""
    values = {
        "brokerClusterName": "c",
        "brokerName": "b",
        "brokerId": "-1",
        "enableControllerMode": "true",
        "controllerAddr": "127.0.0.1:1",
    }
    if root is not None:
        values["storePathRootDir"] = str(root)
    cfg, _ = from_mapping(BrokerConfig, values)
    return cfg


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
    # a directory in its place: the start is refused naming the file (was a bare
    # IsADirectoryError, probe)
    (tmp_path / catchup.FILE_NAME).mkdir()
    with pytest.raises(CorruptFileError, match=f"catch-up record .*{catchup.FILE_NAME}"):
        catchup.load(tmp_path)


async def test_recovery_reconciles_the_epoch_file_and_the_core_refuses_to_lead_until_caught_up(
    tmp_path: Path,
) -> None:
    """A controller-mode replica whose epoch file says epoch 2 started at an offset its log no
    longer reaches: the HA service cuts the entry at start and persists the debt; the role
    core refuses to lead (no epoch appended, still fenced, asks for an election), then leads
    once replication brought the log to the debt's offset."""
    cfg = _controller_mode(tmp_path)
    async with open_store(tmp_path, segment_size=1 << 20, confirm_follows_max=False) as store:
        placed = store.native.append_batch([Message("T", 0, b"x" * 100) for _ in range(4)])
        end = placed.end_offset
    epochs = EpochFile(tmp_path / "epochFileCheckpoint")
    epochs.append(1, 0)
    epochs.append(2, end + 5_000)  # elected at an offset whose bytes were then torn away
    del epochs
    async with open_store(tmp_path, segment_size=1 << 20, confirm_follows_max=False) as store:
        core = RoleCore(role_config(cfg))
        ha = HaService(cfg, store, lambda: core.ha, lambda e: None, lambda: 3)
        debt = ha.recover()
        assert [(e, s) for e, s, _ in ha.epochs.entries()] == [(1, 0)]
        assert debt is not None and (debt.offset, debt.epoch) == (end + 5_000, 1)
        assert catchup.load(tmp_path) == debt
        core = RoleCore(role_config(cfg), debt)
        native = store.native
        core.step(ev.Started("a:1", native.max_offset, 0, *ha.last_epoch()), 0)
        core.step(ev.IdAssigned(3), 0)
        out = core.step(ev.MasterInfo(3, "a:1", 3, 3, frozenset({3}), "elect"), 0)
        assert not any(isinstance(x, act.AppendEpoch) for x in out)
        assert core.state.role is Role.NONE and core.state.fence is not None
        assert "must catch up" in core.state.fence and core.state.masterless
        assert core.write_refusal() is not None
        assert act.RequestElection() in core.step(ev.Tick(), 1_000)
        # Replication brings the log back past the debt: cleared, leading works.
        while native.max_offset < end + 5_000:
            native.append_batch([Message("T", 0, b"y" * 1000)])
        out = core.step(ev.LogGrew(native.max_offset, 0), 2_000)
        assert act.ClearCatchUp() in out and core.state.catch_up is None
        out = core.step(ev.MasterInfo(3, "a:1", 3, 3, frozenset({3}), "elect"), 2_000)
        assert act.AppendEpoch(3, native.max_offset) in out
        assert core.serving_master and core.write_refusal() is None


def test_fsynced_bytes_found_missing_are_owed_up_to_the_durable_offset() -> None:
    """A slave acknowledges what it stored before its confirm offset catches up: bytes between
    the confirm offset and the durable (fsynced) one may be acknowledged writes. Recovery that
    finds them missing (zeroed, truncated) must make the replica owe them, as a cut below the
    confirm offset does; the probe's slave was elected without them and the others cut theirs."""
    entries = [(1, 0), (2, 500)]
    debt = catch_up_after_recovery(entries, 600, None, None, 836)
    assert debt is not None and (debt.offset, debt.epoch) == (836, 2)
    assert "236 fsynced bytes below 836 are missing" in debt.reason
    # The largest of the known facts wins; nothing missing above the log: no debt.
    debt = catch_up_after_recovery(entries, 600, 900, None, 836)
    assert debt is not None and debt.offset == 900
    assert catch_up_after_recovery(entries, 836, None, None, 836) is None


async def test_a_replica_whose_fsynced_tail_was_zeroed_owes_it_at_start(tmp_path: Path) -> None:
    cfg = _controller_mode(tmp_path)
    async with open_store(tmp_path, segment_size=1 << 20, confirm_follows_max=False) as store:
        first = store.native.append_batch([Message("T", 0, b"x" * 100) for _ in range(3)])
        last = store.native.append_batch([Message("T", 0, b"acked" * 20)])
    epochs = EpochFile(tmp_path / "epochFileCheckpoint")
    epochs.append(1, 0)
    del epochs
    seg = tmp_path / "commitlog" / f"{0:020d}"
    with open(seg, "r+b") as f:  # the last, fsynced record zeroed
        f.seek(first.end_offset)
        f.write(bytes(last.end_offset - first.end_offset))
    async with open_store(tmp_path, segment_size=1 << 20, confirm_follows_max=False) as store:
        assert store.native.max_offset == first.end_offset
        core = RoleCore(role_config(cfg))
        ha = HaService(cfg, store, lambda: core.ha, lambda e: None, lambda: 3)
        debt = ha.recover()
        assert debt is not None and debt.offset == last.end_offset, debt
        assert catchup.load(tmp_path) == debt


def test_a_replica_whose_checkpoint_is_lost_owes_an_unknown_catch_up() -> None:
    """Without its checkpoint a replica cannot tell a zeroed tail from the end of its log (the
    probe's slave lost 101 acknowledged messages that way and was elected). It owes what its
    master will show it (of any epoch, when it has no epoch left)."""
    debt = catch_up_after_recovery([(1, 0), (2, 500)], 600, None, None, None, True)
    assert debt is not None and debt.offset == catchup.UNKNOWN_OFFSET and debt.epoch == 2
    assert "checkpoint is missing or damaged" in debt.reason
    debt = catch_up_after_recovery([], 0, None, None, None, True)
    assert debt is not None and (debt.offset, debt.epoch) == (catchup.UNKNOWN_OFFSET, 0)
    assert catch_up_after_recovery([], 600, None, None, None, False) is None


def test_following_a_master_turns_an_unknown_debt_into_what_that_master_held() -> None:
    cfg = _controller_mode(None)
    unknown = CatchUp(catchup.UNKNOWN_OFFSET, 2, "checkpoint lost")
    core = RoleCore(role_config(cfg), unknown)
    core.step(ev.Started("a:1", 400, 0, 2, 0), 0)
    # a master of an older epoch than the debt's proves nothing
    core.step(ev.SlaveFollowing(900, 1), 10)
    assert core.state.catch_up == unknown
    core.step(ev.SlaveFollowing(900, 3), 20)
    assert core.state.catch_up is not None and core.state.catch_up.offset == 900
    out = core.step(ev.LogGrew(900, 0), 30)
    assert act.ClearCatchUp() in out and core.state.catch_up is None
    # a known debt is not lowered by what a master holds
    known = CatchUp(5_000, 2, "epoch 2 started at 5000")
    core = RoleCore(role_config(cfg), known)
    core.step(ev.Started("a:1", 400, 0, 2, 0), 0)
    core.step(ev.SlaveFollowing(900, 3), 10)
    assert core.state.catch_up == known


async def _written_at_epoch_1(root: Path) -> None:
    """A store holding three records, its epoch file one entry (1, 0)."""
    async with open_store(root, segment_size=1 << 20, confirm_follows_max=False) as store:
        store.native.append_batch([Message("T", 0, b"x" * 100) for _ in range(3)])
    epochs = EpochFile(root / "epochFileCheckpoint")
    epochs.append(1, 0)


async def _recovered_debt(cfg: BrokerConfig, root: Path) -> tuple[CatchUp | None, int]:
    """What the HA service's recovery of the store at `root` says the replica owes, and the
    recovered log's end."""
    async with open_store(root, segment_size=1 << 20, confirm_follows_max=False) as store:
        core = RoleCore(role_config(cfg))
        ha = HaService(cfg, store, lambda: core.ha, lambda e: None, lambda: 3)
        return ha.recover(), store.native.max_offset


async def test_a_deleted_checkpoint_at_start_is_an_unknown_debt(tmp_path: Path) -> None:
    cfg = _controller_mode(tmp_path)
    await _written_at_epoch_1(tmp_path)
    (tmp_path / "checkpoint").unlink()
    debt, _ = await _recovered_debt(cfg, tmp_path)
    assert debt is not None and debt.offset == catchup.UNKNOWN_OFFSET


@pytest.mark.parametrize("kept", ["epoch file", "identity", "nothing"])
async def test_a_replica_whose_store_was_deleted_owes_an_unknown_catch_up(
    tmp_path: Path, kept: str
) -> None:
    """Operator probe: a SyncStateSet member whose commitlog, consume queues and checkpoint
    were deleted (by hand, or a replaced disk) started with an empty log, owed nothing, was
    elected, and the replica holding every acknowledged message cut its log to 0. An empty
    log without its checkpoint owes what a master will show it, when the replica had epochs
    or a controller identity; a store that never ran owes nothing."""
    import shutil

    cfg = _controller_mode(tmp_path)
    await _written_at_epoch_1(tmp_path)
    (tmp_path / "brokerIdentity").write_text("c#b#2")
    for name in ("commitlog", "consumequeue", "checkpoint", "cqmanifest"):
        p = tmp_path / name
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    if kept != "epoch file":
        for p in tmp_path.glob("epochFileCheckpoint*"):  # and its backup
            p.unlink()
    if kept != "identity":
        (tmp_path / "brokerIdentity").unlink()
    debt, end = await _recovered_debt(cfg, tmp_path)
    assert end == 0
    if kept == "nothing":
        assert debt is None
    else:
        assert debt is not None and debt.offset == catchup.UNKNOWN_OFFSET, debt
        assert debt.epoch == (1 if kept == "epoch file" else 0)
        assert catchup.load(tmp_path) == debt


def test_reset_replica_leaves_a_debt_so_the_emptied_replica_is_not_elected(tmp_path: Path) -> None:
    """reset-replica keeps the broker's identity: the emptied replica could still be a
    SyncStateSet member and was elected with an empty log (operator probe). It now owes what
    the master it follows next holds."""
    from rmq_ha.storeadmin import reset_replica

    cfg = _controller_mode(tmp_path)
    (tmp_path / "commitlog").mkdir()
    epochs = EpochFile(tmp_path / "epochFileCheckpoint")
    epochs.append(3, 0)
    del epochs
    moved, backup = reset_replica(cfg, confirm=True)
    assert "commitlog" in moved and "epochFileCheckpoint" in moved
    debt = catchup.load(tmp_path)
    assert debt is not None and (debt.offset, debt.epoch) == (catchup.UNKNOWN_OFFSET, 0)
    assert backup.name in debt.reason


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
def test_reset_replica_refuses_a_classic_masters_store(tmp_path: Path, role: str) -> None:
    """Storage probe: reset-replica moved a classic master's log away. That master starts
    again empty and stays master, and its slaves cut their logs to it at the handshake:
    every copy goes. Only a slave (or any replica in controller mode) is reset."""
    from rmq_ha.config import BrokerConfig, from_mapping
    from rmq_ha.storeadmin import ResetRefusedError, reset_replica

    (tmp_path / "commitlog").mkdir()
    cfg, _ = from_mapping(
        BrokerConfig, {"storePathRootDir": str(tmp_path), "brokerRole": role, "listenPort": "1"}
    )
    with pytest.raises(ResetRefusedError, match="classic master"):
        reset_replica(cfg, confirm=True)
    assert (tmp_path / "commitlog").is_dir(), "nothing moved"
    slave, _ = from_mapping(
        BrokerConfig,
        {
            "storePathRootDir": str(tmp_path),
            "brokerRole": "SLAVE",
            "brokerId": "1",
            "listenPort": "1",
        },
    )
    moved, _ = reset_replica(slave, confirm=True)
    assert "commitlog" in moved
