"""The epoch file (_native.EpochFile) and find_consistent_point (crates/rmq-store/src/epoch.rs)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from rmq_ha._native import EpochFile, find_consistent_point
from rmq_ha.errors import CorruptFileError, EpochConflictError

OPEN = 2**64 - 1


def expected_text(entries: list[tuple[int, int]]) -> str:
    block = "".join(f"{e}-{s}\n" for e, s in entries)
    return f"{len(entries)}\n{zlib.crc32(block.encode()) & 0x7FFFFFFF}\n{block}"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "epochFileCheckpoint"


def test_fresh_file_is_empty_and_writes_nothing(path: Path) -> None:
    f = EpochFile(path)
    assert f.source == "fresh"
    assert f.entries() == [] and f.last_epoch() is None
    assert f.find_by_offset(0) is None and f.find_by_epoch(1) is None
    assert not path.exists() and not Path(f"{path}.bak").exists()


def test_append_persists_main_and_backup_in_the_documented_format(path: Path) -> None:
    f = EpochFile(path)
    f.append(1, 0)
    f.append(3, 1000)
    f.append(4, 2500)
    assert f.entries() == [(1, 0, 1000), (3, 1000, 2500), (4, 2500, OPEN)]
    want = expected_text([(1, 0), (3, 1000), (4, 2500)])
    assert path.read_text() == want
    assert Path(f"{path}.bak").read_text() == want
    g = EpochFile(path)
    assert g.source == "main" and g.entries() == f.entries() and g.last_epoch() == 4


def test_lookups_by_epoch_and_offset(path: Path) -> None:
    f = EpochFile(path)
    f.append(7, 7000)
    f.append(8, 8000)
    assert f.find_by_epoch(7) == (7, 7000, 8000)
    assert f.find_by_epoch(9) is None
    assert f.find_by_offset(6999) is None
    assert f.find_by_offset(7000) == (7, 7000, 8000)
    assert f.find_by_offset(7999) == (7, 7000, 8000)
    assert f.find_by_offset(8000) == (8, 8000, OPEN)
    assert f.find_by_offset(2**63) == (8, 8000, OPEN)


def test_truncations_persist_across_reopen(path: Path) -> None:
    f = EpochFile(path)
    for e, s in [(1, 0), (2, 100), (3, 200), (4, 300)]:
        f.append(e, s)
    f.truncate_suffix_by_offset(250)  # drops entries starting at or after 250
    assert [e[:2] for e in f.entries()] == [(1, 0), (2, 100), (3, 200)]
    f.truncate_suffix_by_epoch(3)  # drops epochs >= 3
    assert [e[:2] for e in f.entries()] == [(1, 0), (2, 100)]
    assert EpochFile(path).entries() == [(1, 0, 100), (2, 100, OPEN)]
    f.append(5, 400)
    f.truncate_prefix_by_offset(400)  # entries ending at or below 400 go, never the last
    assert f.entries() == [(5, 400, OPEN)]
    f.truncate_prefix_by_offset(10**9)
    assert f.entries() == [(5, 400, OPEN)]
    f.truncate_suffix_by_epoch(0)
    assert f.entries() == []
    g = EpochFile(path)
    assert g.source == "main" and g.entries() == [], "an empty list is written explicitly"


def test_same_start_offset_replaces_the_previous_epoch_rocketmq_9689(path: Path) -> None:
    f = EpochFile(path)
    f.append(1, 0)
    f.append(5, 100)
    f.append(6, 100)  # re-elected without writes: epoch 5 owns no bytes
    assert f.entries() == [(1, 0, 100), (6, 100, OPEN)]
    assert f.find_by_epoch(5) is None
    assert EpochFile(path).entries() == [(1, 0, 100), (6, 100, OPEN)]


@pytest.mark.parametrize(("epoch", "start"), [(4, 200), (5, 200), (6, 99)])
def test_lower_or_equal_epoch_or_lower_start_is_an_epoch_conflict(
    path: Path, epoch: int, start: int
) -> None:
    f = EpochFile(path)
    f.append(5, 100)
    before = path.read_bytes()
    with pytest.raises(EpochConflictError) as ei:
        f.append(epoch, start)
    assert ei.value.definite
    assert f.entries() == [(5, 100, OPEN)]
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b"garbage", id="garbage"),
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b[:-3], id="truncated"),
        pytest.param(lambda b: b.replace(b"1000", b"1001"), id="flipped-digit"),
        pytest.param(lambda b: b"3" + b[1:], id="wrong-count"),
        pytest.param(None, id="missing"),
    ],
)
def test_corrupt_or_missing_main_file_falls_back_to_backup(path: Path, damage: object) -> None:
    f = EpochFile(path)
    f.append(1, 0)
    f.append(2, 1000)
    good = f.entries()
    if damage is None:
        os.remove(path)
    else:
        path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    g = EpochFile(path)
    assert g.source == "backup"
    assert g.entries() == good
    g.append(3, 2000)  # the next write repairs the main file
    h = EpochFile(path)
    assert h.source == "main" and h.entries()[-1] == (3, 2000, OPEN)


def test_both_files_corrupt_is_corrupt_file_error_never_an_empty_list(path: Path) -> None:
    f = EpochFile(path)
    f.append(1, 0)
    path.write_bytes(b"1\n")
    Path(f"{path}.bak").write_bytes(b"")
    with pytest.raises(CorruptFileError) as ei:
        EpochFile(path)
    assert ei.value.path == str(path)
    os.remove(path)
    with pytest.raises(CorruptFileError):
        EpochFile(path)  # main missing, backup corrupt


def test_corrupt_main_without_backup_is_corrupt_file_error(path: Path) -> None:
    EpochFile(path).append(1, 0)
    os.remove(f"{path}.bak")
    path.write_bytes(b"1\n12345\n1-0\n")  # bad CRC
    with pytest.raises(CorruptFileError):
        EpochFile(path)


def test_relative_file_name_in_the_current_directory_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    f = EpochFile("epochFileCheckpoint")
    f.append(1, 0)
    assert EpochFile(tmp_path / "epochFileCheckpoint").entries() == [(1, 0, OPEN)]


@pytest.mark.parametrize(
    ("local", "local_max", "master", "master_max", "point"),
    [
        ([(0, 0)], 1000, [(0, 0), (1, 900)], 1500, 900),  # old master cut to the new epoch
        ([(0, 0)], 900, [(0, 0), (1, 1000)], 1300, 900),  # lost tail: nothing to cut
        ([(0, 0), (1, 1000)], 1200, [(0, 0), (1, 1000), (2, 1500)], 1800, 1200),
        ([(0, 0), (1, 500)], 1000, [(0, 0), (1, 500), (2, 800)], 1100, 800),
        ([(0, 0), (2, 1000)], 1300, [(0, 0), (1, 1200)], 1500, 1000),  # unknown local epoch
        ([(0, 0), (3, 500)], 900, [(0, 0), (3, 600)], 900, 500),  # same epoch, other start
        ([(3, 0)], 100, [(4, 0)], 200, None),  # no common epoch
        ([(3, 0)], 100, [(3, 10)], 200, None),
        ([(3, 0)], 100, [], 0, None),
        ([], 0, [(1, 0)], 500, 0),  # new replica
        ([], 0, [], 0, 0),
        ([], 10, [(1, 0)], 500, None),  # data but no epochs: refuse
    ],
)
def test_find_consistent_point(
    local: list[tuple[int, int]],
    local_max: int,
    master: list[tuple[int, int]],
    master_max: int,
    point: int | None,
) -> None:
    assert find_consistent_point(local, local_max, master, master_max) == point


def test_find_consistent_point_then_truncate_the_epoch_file(path: Path) -> None:
    f = EpochFile(path)
    f.append(0, 0)
    f.append(2, 1000)
    local = [(e, s) for e, s, _ in f.entries()]
    point = find_consistent_point(local, 1300, [(0, 0), (1, 1200)], 1500)
    assert point == 1000
    f.truncate_suffix_by_offset(point)
    assert EpochFile(path).entries() == [(0, 0, OPEN)]


def test_epoch_file_problems_at_start_are_warnings() -> None:
    """Read from its backup, or missing beside a commitlog holding records: said at start
    (both were silent); a fresh file for an empty log, or a good main file, says nothing."""
    from rmq_ha.broker.ha.service import epoch_file_warnings

    assert epoch_file_warnings("main", 0, 500, "/s/ep") == []
    assert epoch_file_warnings("fresh", 0, 0, "/s/ep") == []
    (w,) = epoch_file_warnings("backup", 0, 500, "/s/ep")
    assert "/s/ep.bak" in w
    (w,) = epoch_file_warnings("fresh", 100, 500, "/s/ep")
    assert "missing" in w and "[100, 500)" in w
