"""The HA replication wire format (rmq_ha._native: encoders and the two stream decoders).

Expected bytes are built here with `struct` from the layouts in the reference (section 2.3), not
with the encoders under test.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha._native import (
    HA_HANDSHAKE,
    HA_READY,
    HA_SHUTDOWN,
    HA_SUSPEND,
    HA_TRANSFER,
    HaMasterSideDecoder,
    HaSlaveSideDecoder,
    encode_master_handshake,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer_header,
)
from rmq_ha.errors import RemotingDecodeError, RmqHaError

I64_MAX = 2**63 - 1
MAX_ENTRIES = 1_000_000
DEFAULT_MAX_BODY = 64 << 20

offsets = st.one_of(st.integers(0, 10_000), st.integers(0, I64_MAX))
epochs = st.integers(-(2**31), 2**31 - 1)
broker_ids = st.integers(-(2**63), I64_MAX)


def slave_handshake(sync: int, learner: int, broker_id: int) -> bytes:
    return struct.pack(">ihhq", HA_HANDSHAKE, sync, learner, broker_id)


def slave_ack(offset: int) -> bytes:
    return struct.pack(">iq", HA_TRANSFER, offset)


def master_handshake(
    max_offset: int, last_epoch: int, entries: list[tuple[int, int]], body_size: int | None = None
) -> bytes:
    size = 12 * len(entries) if body_size is None else body_size
    body = b"".join(struct.pack(">iq", e, s) for e, s in entries)
    return struct.pack(">iiqi", HA_HANDSHAKE, size, max_offset, last_epoch) + body


def transfer(
    offset: int, epoch: int, start: int, confirm: int, body: bytes, body_size: int | None = None
) -> bytes:
    size = len(body) if body_size is None else body_size
    return struct.pack(">iiqiqq", HA_TRANSFER, size, offset, epoch, start, confirm) + body


def feed_all(
    dec: HaMasterSideDecoder | HaSlaveSideDecoder,
    chunks: Sequence[bytes | bytearray | memoryview],
) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for c in chunks:
        out.extend(dec.feed(c))
    return out


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    out, last = [], 0
    for p in [*points, len(data)]:
        out.append(data[last:p])
        last = p
    return out


# --- constants and byte-exact vectors -------------------------------------------------------


def test_state_constants() -> None:
    assert (HA_READY, HA_HANDSHAKE, HA_TRANSFER, HA_SUSPEND, HA_SHUTDOWN) == (0, 1, 2, 3, 4)


def test_slave_records_are_byte_exact() -> None:
    assert encode_slave_handshake(True, False, 3) == slave_handshake(1, 0, 3)
    assert encode_slave_handshake(False, True, -7) == slave_handshake(0, 1, -7)
    assert len(encode_slave_handshake(False, False, 0)) == 16
    assert encode_slave_ack(0x010203040506) == bytes.fromhex("00000002 0000010203040506")
    assert len(encode_slave_ack(0)) == 12


def test_master_records_are_byte_exact() -> None:
    entries = [(7, 7000), (8, 8000)]
    assert encode_master_handshake(9000, 8, entries) == master_handshake(9000, 8, entries)
    assert encode_master_handshake(0, -1, []) == master_handshake(0, -1, [])
    header = encode_transfer_header(100, 8, 8000, 90, 3)
    assert header == transfer(100, 8, 8000, 90, b"", body_size=3)
    assert len(header) == 36
    assert encode_transfer_header(5, 1, 0, 5, 0) == transfer(5, 1, 0, 5, b"")


# --- round trips ----------------------------------------------------------------------------

slave_records = st.one_of(
    st.tuples(st.just("handshake"), st.booleans(), st.booleans(), broker_ids),
    st.tuples(st.just("ack"), offsets),
)

master_records = st.one_of(
    st.tuples(
        st.just("handshake"),
        offsets,
        epochs,
        st.lists(st.tuples(epochs, offsets), max_size=30),
    ),
    st.tuples(st.just("transfer"), offsets, epochs, offsets, offsets, st.binary(max_size=300)),
)


def encode_slave(rec: tuple[object, ...]) -> bytes:
    if rec[0] == "handshake":
        _, sync, learner, broker_id = rec
        assert isinstance(sync, bool) and isinstance(learner, bool) and isinstance(broker_id, int)
        return encode_slave_handshake(sync, learner, broker_id)
    _, offset = rec
    assert isinstance(offset, int)
    return encode_slave_ack(offset)


def encode_master(rec: tuple[object, ...]) -> bytes:
    if rec[0] == "handshake":
        _, max_offset, last_epoch, entries = rec
        assert isinstance(max_offset, int) and isinstance(last_epoch, int)
        assert isinstance(entries, list)
        return encode_master_handshake(max_offset, last_epoch, entries)
    _, offset, epoch, start, confirm, body = rec
    assert isinstance(offset, int) and isinstance(epoch, int)
    assert isinstance(start, int) and isinstance(confirm, int) and isinstance(body, bytes)
    return encode_transfer_header(offset, epoch, start, confirm, len(body)) + body


@given(st.lists(slave_records, max_size=10))
def test_slave_stream_roundtrip(records: list[tuple[object, ...]]) -> None:
    data = b"".join(encode_slave(r) for r in records)
    dec = HaMasterSideDecoder()
    assert dec.feed(data) == records
    assert dec.buffered == 0


@given(st.lists(master_records, max_size=6))
def test_master_stream_roundtrip(records: list[tuple[object, ...]]) -> None:
    data = b"".join(encode_master(r) for r in records)
    dec = HaSlaveSideDecoder()
    assert dec.feed(data) == records
    assert dec.buffered == 0


@given(st.lists(slave_records, min_size=1, max_size=6))
@settings(max_examples=50)
def test_slave_stream_byte_by_byte(records: list[tuple[object, ...]]) -> None:
    data = b"".join(encode_slave(r) for r in records)
    dec = HaMasterSideDecoder()
    got = []
    for i in range(len(data)):
        got.extend(dec.feed(data[i : i + 1]))
        assert dec.buffered < 16
    assert got == records
    assert dec.buffered == 0


@given(st.lists(master_records, min_size=1, max_size=4))
@settings(max_examples=50)
def test_master_stream_byte_by_byte(records: list[tuple[object, ...]]) -> None:
    data = b"".join(encode_master(r) for r in records)
    dec = HaSlaveSideDecoder()
    got = []
    for i in range(len(data)):
        got.extend(dec.feed(data[i : i + 1]))
    assert got == records
    assert dec.buffered == 0


@given(
    st.lists(slave_records, min_size=1, max_size=8),
    st.lists(master_records, min_size=1, max_size=4),
    st.lists(st.integers(0, 2000), max_size=8),
    st.sampled_from([bytes, bytearray, memoryview]),
)
def test_any_split_gives_the_same_records(
    slave: list[tuple[object, ...]],
    master: list[tuple[object, ...]],
    cuts: list[int],
    kind: type[bytes] | type[bytearray] | type[memoryview],
) -> None:
    data = b"".join(encode_slave(r) for r in slave)
    assert feed_all(HaMasterSideDecoder(), [kind(c) for c in chunked(data, cuts)]) == slave
    data = b"".join(encode_master(r) for r in master)
    assert feed_all(HaSlaveSideDecoder(), [kind(c) for c in chunked(data, cuts)]) == master


def test_master_handshake_with_5000_entries() -> None:
    entries = [(e, e * 4096) for e in range(1, 5001)]
    data = encode_master_handshake(I64_MAX, 5000, entries)
    assert len(data) == 20 + 12 * 5000
    assert data == master_handshake(I64_MAX, 5000, entries)
    assert HaSlaveSideDecoder().feed(data) == [("handshake", I64_MAX, 5000, entries)]
    # Split into odd pieces, with a transfer behind it.
    tail = transfer(1, 5000, 0, 1, b"xyz")
    dec = HaSlaveSideDecoder()
    got = feed_all(dec, chunked(data + tail, list(range(0, len(data) + 40, 1001))))
    assert got == [("handshake", I64_MAX, 5000, entries), ("transfer", 1, 5000, 0, 1, b"xyz")]


def test_a_12_byte_prefix_of_a_handshake_waits() -> None:
    hs = encode_slave_handshake(True, True, 0x0000000200000002)
    dec = HaMasterSideDecoder()
    # 12 bytes would make a whole ack: the decoder must look at the state and wait for 16.
    assert dec.feed(hs[:12]) == []
    assert dec.buffered == 12
    assert dec.feed(hs[12:] + encode_slave_ack(9)[:5]) == [
        ("handshake", True, True, 0x0000000200000002)
    ]
    assert dec.buffered == 5
    assert dec.feed(encode_slave_ack(9)[5:]) == [("ack", 9)]
    # Every prefix of a handshake waits.
    for cut in range(16):
        dec = HaMasterSideDecoder()
        assert dec.feed(hs[:cut]) == []
        assert dec.buffered == cut


def test_a_transfer_header_prefix_and_partial_body_wait() -> None:
    rec = transfer(10, 2, 0, 10, b"0123456789")
    for cut in range(len(rec)):
        dec = HaSlaveSideDecoder()
        assert dec.feed(rec[:cut]) == []
        assert dec.feed(rec[cut:]) == [("transfer", 10, 2, 0, 10, b"0123456789")]


def test_heartbeat_and_zero_entry_handshake() -> None:
    data = master_handshake(0, -1, []) + transfer(0, 1, 0, 0, b"")
    assert HaSlaveSideDecoder().feed(data) == [
        ("handshake", 0, -1, []),
        ("transfer", 0, 1, 0, 0, b""),
    ]


# --- malformed input ------------------------------------------------------------------------


def raises_decode(
    dec: HaMasterSideDecoder | HaSlaveSideDecoder, data: bytes, match: str
) -> RemotingDecodeError:
    with pytest.raises(RemotingDecodeError, match=match) as info:
        dec.feed(data)
    assert isinstance(info.value, RmqHaError)
    return info.value


@pytest.mark.parametrize("state", [HA_READY, HA_SUSPEND, HA_SHUTDOWN, 5, -1, 2**31 - 1])
def test_bad_state(state: int) -> None:
    # As soon as the 4 state bytes are in, before anything else.
    raises_decode(HaMasterSideDecoder(), struct.pack(">i", state), "slave sent state")
    raises_decode(HaSlaveSideDecoder(), struct.pack(">i", state), "master sent state")


def test_bad_state_after_good_records_names_its_offset() -> None:
    dec = HaMasterSideDecoder()
    assert dec.feed(encode_slave_ack(1)) == [("ack", 1)]
    err = raises_decode(dec, encode_slave_ack(2) + struct.pack(">iq", 3, 0), "SUSPEND")
    assert err.offset == 24
    # The stream cannot be trusted any more: the decoder keeps failing.
    err2 = raises_decode(dec, encode_slave_ack(3), "SUSPEND")
    assert err2.offset == 24


@pytest.mark.parametrize("state", [HA_HANDSHAKE, HA_TRANSFER])
def test_negative_body_size(state: int) -> None:
    raises_decode(HaSlaveSideDecoder(), struct.pack(">ii", state, -12), "bodySize is negative")


def test_oversize_body() -> None:
    raises_decode(HaSlaveSideDecoder(max_body=100), struct.pack(">ii", 2, 101), "exceeds the limit")
    dec = HaSlaveSideDecoder(max_body=100)
    assert dec.feed(struct.pack(">ii", 2, 100)) == []  # at the limit: waits
    raises_decode(
        HaSlaveSideDecoder(), struct.pack(">ii", 2, DEFAULT_MAX_BODY + 1), "exceeds the limit"
    )
    assert HaSlaveSideDecoder().feed(struct.pack(">ii", 2, DEFAULT_MAX_BODY)) == []


@pytest.mark.parametrize("size", [1, 11, 13, 24 + 6])
def test_handshake_body_not_multiple_of_12(size: int) -> None:
    raises_decode(HaSlaveSideDecoder(), struct.pack(">ii", 1, size), "whole number of 12-byte")


def test_too_many_epoch_entries() -> None:
    raises_decode(
        HaSlaveSideDecoder(), struct.pack(">ii", 1, 12 * (MAX_ENTRIES + 1)), "epoch entries"
    )
    assert HaSlaveSideDecoder().feed(struct.pack(">ii", 1, 12 * MAX_ENTRIES)) == []


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (transfer(-1, 1, 0, 0, b"", body_size=5), "offset"),
        (transfer(0, 1, -1, 0, b"", body_size=5), "epochStartOffset"),
        (transfer(0, 1, 0, -1, b"", body_size=5), "confirmOffset"),
        (master_handshake(-1, 1, [], body_size=12), "masterMaxPhyOffset"),
        (master_handshake(0, 1, [(1, -5)]), "epoch entry startOffset"),
    ],
)
def test_negative_offsets_from_master(record: bytes, field: str) -> None:
    # The header fields fail before the body arrives.
    raises_decode(HaSlaveSideDecoder(), record, f"{field} is negative")


def test_negative_ack_and_bad_flags_from_slave() -> None:
    raises_decode(HaMasterSideDecoder(), slave_ack(-1), "slaveMaxPhyOffset is negative")
    raises_decode(HaMasterSideDecoder(), slave_handshake(2, 0, 1), "syncFromLastFile is 2")
    raises_decode(HaMasterSideDecoder(), slave_handshake(0, -1, 1), "asyncLearner is -1")


def master_side() -> HaMasterSideDecoder:
    return HaMasterSideDecoder()


def slave_side() -> HaSlaveSideDecoder:
    return HaSlaveSideDecoder(max_body=64)


@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=4))
def test_garbage_never_misbehaves(data: bytes, cuts: list[int]) -> None:
    """Arbitrary bytes either decode or raise the decode error at the same stream offset
    however they are split; what decodes re-encodes to the bytes consumed."""
    for make, encode in ((master_side, encode_slave), (slave_side, encode_master)):
        whole: list[tuple[object, ...]] = []
        whole_err = None
        try:
            whole = make().feed(data)
        except RemotingDecodeError as e:
            whole_err = e.offset
        dec = make()
        split: list[tuple[object, ...]] = []
        split_err = None
        try:
            for c in chunked(data, cuts):
                split.extend(dec.feed(c))
        except RemotingDecodeError as e:
            split_err = e.offset
        assert split_err == whole_err
        if whole_err is None:
            assert split == whole
            consumed = b"".join(encode(r) for r in whole)
            assert data.startswith(consumed)
            assert dec.buffered == len(data) - len(consumed)


# --- encoder arguments ----------------------------------------------------------------------


def test_encoders_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="negative"):
        encode_slave_ack(-1)
    with pytest.raises(ValueError, match="negative"):
        encode_master_handshake(-1, 0, [])
    with pytest.raises(ValueError, match="negative"):
        encode_master_handshake(0, 0, [(1, 0), (2, -1)])
    for args in [(-1, 0, 0, 0, 0), (0, 0, -1, 0, 0), (0, 0, 0, -1, 0), (0, 0, 0, 0, -1)]:
        with pytest.raises(ValueError, match="negative"):
            encode_transfer_header(*args)
    with pytest.raises(ValueError, match="i32"):
        encode_transfer_header(0, 0, 0, 0, 2**31)
    with pytest.raises(OverflowError):
        encode_slave_ack(2**63)
    with pytest.raises(OverflowError):
        encode_transfer_header(0, 2**31, 0, 0, 0)


def test_encode_master_handshake_accepts_any_iterable() -> None:
    entries = [(1, 0), (2, 100)]
    assert encode_master_handshake(5, 2, iter(entries)) == master_handshake(5, 2, entries)
    assert encode_master_handshake(5, 2, tuple(entries)) == master_handshake(5, 2, entries)
