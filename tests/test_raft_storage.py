"""Durable Raft storage and the message codec."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmq_ha.errors import CorruptFileError
from rmq_ha.raft.messages import (
    AppendRequest,
    AppendResponse,
    Code,
    Entry,
    EntryKind,
    InstallSnapshotRequest,
    Snapshot,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmq_ha.raft.outputs import (
    AppendLog,
    CompactLog,
    HardState,
    SaveHardState,
    SaveSnapshot,
    TruncateLog,
)
from rmq_ha.raft.storage import RaftStorage
from rmq_ha.raft.wire import RaftWireError, decode, encode


def entries(lo: int, hi: int, term: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(index=i, term=term, data=b"e%d" % i) for i in range(lo, hi))


def test_append_truncate_compact_and_reload(tmp_path: Path) -> None:
    s = RaftStorage(tmp_path)
    s.apply([SaveHardState(HardState(3, "n2")), AppendLog(entries(1, 11))])
    s.apply([TruncateLog(after_index=7), AppendLog(entries(8, 10, term=3))])
    s.apply([SaveSnapshot(Snapshot(last_index=4, last_term=1, data=b"snap")), CompactLog(4)])
    st = RaftStorage(tmp_path).load()
    assert st.hard_state == HardState(3, "n2")
    assert st.snapshot == Snapshot(4, 1, b"snap")
    assert [(e.index, e.term) for e in st.entries] == [(5, 1), (6, 1), (7, 1), (8, 3), (9, 3)]


@pytest.mark.parametrize("damage", ["torn", "flip", "garbage"])
def test_a_corrupt_log_tail_is_cut_back_to_the_last_valid_entry(
    tmp_path: Path, damage: str
) -> None:
    s = RaftStorage(tmp_path)
    s.apply([AppendLog(entries(1, 6))])
    size = os.path.getsize(tmp_path / "log")
    with open(tmp_path / "log", "r+b") as f:
        if damage == "torn":
            f.truncate(size - 3)
        elif damage == "flip":
            f.seek(size - 2)
            b = f.read(1)
            f.seek(size - 2)
            f.write(bytes([b[0] ^ 0x10]))
        else:
            f.seek(size)
            f.write(b"\x00\x00\x00\x30garbage-after-the-end")
    s2 = RaftStorage(tmp_path)
    st = s2.load()
    want = 5 if damage == "garbage" else 4
    assert [e.index for e in st.entries] == list(range(1, want + 1))
    assert s2.report.cut_reason is not None
    # Appends continue after the cut and survive another reload.
    s2.apply([AppendLog(entries(want + 1, want + 3, term=2))])
    assert [e.index for e in RaftStorage(tmp_path).load().entries] == list(range(1, want + 3))


@pytest.mark.parametrize("where", ["one flipped byte", "a zeroed header", "two damaged records"])
def test_damage_that_valid_entries_follow_refuses_to_load(tmp_path: Path, where: str) -> None:
    """A flipped byte in an early entry cut the log there and dropped every later entry,
    committed ones included; the node then voted, and a candidate without them was elected
    (the probe lost 30 acknowledged messages). Damage that a valid continuation follows is
    not a torn tail: load refuses, naming the byte and the entry that follows."""
    s = RaftStorage(tmp_path)
    s.apply([AppendLog(entries(1, 4)), AppendLog(entries(4, 9, term=2))])
    data = bytearray((tmp_path / "log").read_bytes())
    rec = 8 + 17 + 2  # header, index/term/kind, b"eN"
    at = 2 * rec  # entry 3
    if where == "one flipped byte":
        data[at + 20] ^= 0x01
    elif where == "a zeroed header":
        data[at : at + 8] = bytes(8)
    else:
        data[at + 20] ^= 0x01
        data[at + rec + 20] ^= 0x01
    (tmp_path / "log").write_bytes(bytes(data))
    with pytest.raises(
        CorruptFileError, match=rf"byte {at} is damaged .*yet entry \d+ \(term.*reaches entry 8 "
    ):
        RaftStorage(tmp_path).load()
    assert (tmp_path / "log").read_bytes() == bytes(data), "nothing cut"


def test_stale_records_past_an_unsynced_truncation_are_still_cut(tmp_path: Path) -> None:
    """A crash after a truncation and a shorter re-append, before the fsync, can leave the old
    records' bytes past the new ones: they have lower terms (or indexes), so they are a tail
    to cut, not lost entries."""
    s = RaftStorage(tmp_path)
    s.apply([AppendLog(tuple(Entry(i, 2, b"old-entry-%d" % i) for i in range(1, 9)))])
    old = (tmp_path / "log").read_bytes()
    s.apply([TruncateLog(after_index=2), AppendLog((Entry(3, 3, b"new"),))])
    new = (tmp_path / "log").read_bytes()
    (tmp_path / "log").write_bytes(new + old[len(new) :])  # the truncation never reached disk
    st = RaftStorage(tmp_path).load()
    assert [(e.index, e.term) for e in st.entries] == [(1, 2), (2, 2), (3, 3)]


def test_corrupt_hard_state_or_snapshot_is_an_error_not_a_reset(tmp_path: Path) -> None:
    s = RaftStorage(tmp_path)
    s.apply([SaveHardState(HardState(5, "n1")), SaveSnapshot(Snapshot(1, 1, b"x"))])
    (tmp_path / "hardstate").write_text('{"state": {"term": 9, "voted_for": null}, "crc": 1}')
    with pytest.raises(CorruptFileError, match="hard state"):
        RaftStorage(tmp_path).load()
    s.apply([SaveHardState(HardState(5, "n1"))])
    raw = bytearray((tmp_path / "snapshot").read_bytes())
    raw[-1] ^= 1
    (tmp_path / "snapshot").write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="snapshot"):
        RaftStorage(tmp_path).load()


def test_wire_round_trip_of_every_message_shape() -> None:
    msgs = [
        VoteRequest("a", "b", 3, 10, 2, 77),
        VoteResponse("b", "a", 3, VoteResult.ACCEPT, 77),
        AppendRequest(
            "a", "b", 3, 9, 2, (*entries(10, 12), Entry(12, 3, b"", EntryKind.NOOP)), 9, 5
        ),
        AppendResponse("b", "a", 3, Code.INCONSISTENT_STATE, 5, 7, 6),
        InstallSnapshotRequest("a", "b", 3, Snapshot(100, 3, bytes(range(256))), 8),
    ]
    for m in msgs:
        assert decode(encode(m)) == m


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"@": "Nope"}',
        b'{"@": "VoteRequest", "src": "a"}',
        b'{"@": "VoteResponse", "src": "a", "dst": "b", "term": 1, "result": "???",'
        b' "request_id": 1}',
        b'{"@": "VoteRequest", "src": 1, "dst": "b", "term": 1, "ledger_end_index": 0,'
        b' "ledger_end_term": 0, "request_id": 1}',
    ],
)
def test_malformed_messages_are_rejected(raw: bytes) -> None:
    with pytest.raises(RaftWireError):
        decode(raw)
