"""Native store: append/read, queues, bad input, config, confirm-offset dispatch, transactions,
retention. Semantics from crates/rmq-store/src/{commitlog,store,consume_queue}.rs."""

from __future__ import annotations

import itertools
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmq_ha import _native
from rmq_ha._native import Message, Store
from rmq_ha.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidArgumentError,
    MessageIllegalError,
    OffsetOutOfRangeError,
    StoreClosedError,
)
from storeutil import (
    SEG,
    StoreFactory,
    decode,
    end_of,
    java_string_hash,
    msgs,
    read_file,
    scan_log,
    segment_path,
    split_records,
)

PREPARED = _native.TRANSACTION_PREPARED_TYPE
COMMIT = _native.TRANSACTION_COMMIT_TYPE
ROLLBACK = _native.TRANSACTION_ROLLBACK_TYPE


def segment_end(offset: int, seg: int = SEG) -> int:
    return offset - offset % seg + seg


# ---------------------------------------------------------------------------------------------
# 1. Append / read
# ---------------------------------------------------------------------------------------------


def test_append_assigns_increasing_physical_offsets_and_per_queue_offsets_from_zero(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    keys = [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("B", 0), ("A", 0)]
    placed: list[tuple[tuple[str, int], tuple[int, int, int, int]]] = []
    for round_ in range(3):
        batch = [Message(t, q, f"{t}{q}-{round_}-{i}".encode()) for i, (t, q) in enumerate(keys)]
        res = s.append_batch(batch)
        assert len(res) == len(batch)
        placed.extend(zip(keys, res, strict=True))
    offsets = [p[0] for _, p in placed]
    assert offsets[0] == 0
    for (_, (off, size, _, _)), (_, (nxt, _, _, _)) in itertools.pairwise(placed):
        assert nxt == off + size, "records of a segment are contiguous"
    seen: dict[tuple[str, int], list[int]] = {}
    for key, (_, _, qo, _) in placed:
        seen.setdefault(key, []).append(qo)
    for key, qos in seen.items():
        assert qos == list(range(len(qos))), key
    ts = [p[3] for _, p in placed]
    assert ts == sorted(ts), "store timestamps never go backwards"
    assert s.max_offset == end_of([p for _, p in placed])
    assert s.committed_offset == s.max_offset
    assert s.queues() == [("A", 0), ("A", 1), ("B", 0)]
    assert s.next_queue_offset("A", 0) == 9
    assert s.next_queue_offset("never", 0) == 0


@pytest.mark.parametrize(
    ("topic", "born_host", "store_host"),
    [
        ("TopicA", "10.1.2.3:4567", "127.0.0.1:10911"),
        ("T" * 200, "10.1.2.3:4567", "127.0.0.1:10911"),  # V2 record (2-byte topic length)
        ("Topic_v6", "[::1]:5555", "[fe80::1]:10911"),  # IPv6 hosts widen the layout
    ],
)
def test_read_record_decodes_to_exactly_what_was_appended(
    open_native: StoreFactory, topic: str, born_host: str, store_host: str
) -> None:
    s = open_native(store_host=store_host)
    s.append_batch(msgs("Other", 0, [b"pad"] * 3))  # queue offsets of `topic` still start at 0
    props = b"TAGS\x01tagA\x02KEYS\x01k1 k2\x02"
    batch = [
        Message(
            topic,
            3,
            bytes([i]) * (10 * i + 1),
            props,
            flag=7,
            born_timestamp=1_700_000_000_000 + i,
            born_host=born_host,
            reconsume_times=i,
        )
        for i in range(5)
    ]
    res = s.append_batch(batch)
    for i, (off, size, qo, ts) in enumerate(res):
        buf = s.read_record(off)
        assert (buf.offset, buf.end_offset, len(buf)) == (off, off + size, size)
        rec = decode(bytes(memoryview(buf)))
        assert rec["topic"] == topic
        assert rec["body"] == bytes([i]) * (10 * i + 1)
        assert rec["properties"] == props
        assert rec["queue_id"] == 3
        assert rec["queue_offset"] == qo == i
        assert rec["physical_offset"] == off
        assert rec["store_timestamp"] == ts
        assert rec["flag"] == 7
        assert rec["born_timestamp"] == 1_700_000_000_000 + i
        assert rec["born_host"] == born_host
        assert rec["store_host"] == store_host
        assert rec["reconsume_times"] == i
        assert rec["record_crc"] is not None
        assert buf.tobytes() == bytes(memoryview(buf))


def test_store_buffer_is_read_only_zero_length_safe_and_outlives_the_store(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    (off, size, _, _), *_ = s.append_batch(msgs("T", 0, [b"hello"]))
    buf = s.read_record(off)
    mv = memoryview(buf)
    assert mv.readonly
    assert len(mv) == size and mv.nbytes == size
    with pytest.raises(TypeError):
        mv[0] = 0
    with pytest.raises((TypeError, BufferError)):
        struct.pack_into("B", buf, 0, 1)  # asks for a writable buffer
    assert s.read_record(off).tobytes() == bytes(mv), "a failed write must not change bytes"

    empty = s.read_range(s.max_offset, 1024)
    assert (len(empty), empty.offset, empty.end_offset) == (0, s.max_offset, s.max_offset)
    emv = memoryview(empty)
    assert emv.readonly and len(emv) == 0 and bytes(emv) == b"" and empty.tobytes() == b""

    expected = bytes(mv)
    s.close()
    assert bytes(mv) == expected, "a view keeps its mapping alive after close"
    with pytest.raises(StoreClosedError):
        s.read_record(off)


def test_read_range_returns_whole_records_within_one_segment_including_the_filler(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    rng = random.Random(7)
    placed = s.append_batch(
        [Message("T", 0, rng.randbytes(rng.randrange(1, 3000))) for _ in range(200)]
    )
    offsets = {p[0]: p for p in placed}
    assert s.max_offset > 3 * SEG
    for max_bytes in (1, 4096, 50_000, 10 * SEG):
        off = 0
        fillers = 0
        while off < s.max_offset:
            buf = s.read_range(off, max_bytes)
            assert buf.offset == off and buf.end_offset == off + len(buf)
            assert buf.end_offset <= segment_end(off), "a run never crosses a segment"
            items = split_records(buf)
            assert items, "at least one record even if it exceeds max_bytes"
            records = [r for r in items if "blank" not in r]
            for r in records:
                p = offsets[r["offset"]]
                assert r["total_size"] == p[1]
            if len(records) > 1:
                assert sum(r["total_size"] for r in records) <= max_bytes
            if "blank" in items[-1]:
                fillers += 1
                assert buf.end_offset == segment_end(off), "the filler ends the segment"
            assert all("blank" not in r for r in items[:-1]), "a filler is always last"
            off = buf.end_offset
        assert off == s.max_offset
        assert fillers == s.max_offset // SEG, "every closed segment ends with a filler"

    # A limit inside a record stops before it; a limit on a boundary stops there.
    first, second = placed[0], placed[1]
    assert len(s.read_range(0, 10 * SEG, limit=second[0] + 1)) == first[1]
    assert len(s.read_range(0, 10 * SEG, limit=second[0])) == first[1]


def test_reading_past_the_end_raises_offset_out_of_range(open_native: StoreFactory) -> None:
    s = open_native()
    placed = s.append_batch(msgs("T", 0, [b"a", b"b"]))
    end = end_of(placed)
    for off in (end, end + 1, end + 10 * SEG):
        with pytest.raises(OffsetOutOfRangeError) as ei:
            s.read_record(off)
        assert ei.value.definite
        assert ei.value.offset == off
        assert ei.value.max == end
    with pytest.raises(OffsetOutOfRangeError):
        s.read_range(end + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        s.get_messages("T", 0, 2)
    with pytest.raises(OffsetOutOfRangeError):
        s.queue_unit("T", 0, 2)


def test_read_record_refuses_offsets_that_are_not_record_starts(open_native: StoreFactory) -> None:
    s = open_native()
    placed = s.append_batch([Message("T", 0, b"x" * 1000) for _ in range(80)])
    with pytest.raises(CorruptRecordError):
        s.read_record(placed[3][0] + 5)
    last_in_seg0 = max(p for p in placed if p[0] < SEG)
    filler_at = last_in_seg0[0] + last_in_seg0[1]
    assert filler_at < SEG
    with pytest.raises(CorruptRecordError):
        s.read_record(filler_at)


@pytest.mark.timeout(60)
def test_every_message_stays_readable_across_many_segment_rollovers(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    seg = 4096
    rng = random.Random(11)
    s = open_native(segment_size=seg)
    bodies = [rng.randbytes(rng.randrange(1, 1500)) for _ in range(600)]
    placed: list[tuple[int, int, int, int]] = []
    for i in range(0, len(bodies), 37):
        placed += s.append_batch(msgs("Roll", i % 3, bodies[i : i + 37]))
    files = s.segment_files()
    assert len(files) > 100
    assert [start for start, _ in files] == [i * seg for i in range(len(files))]

    def check(store: Store) -> None:
        for body, (off, size, _, _) in zip(bodies, placed, strict=True):
            rec = decode(store.read_record(off))
            assert rec["body"] == body and rec["total_size"] == size
        assert [r["body"] for r in scan_log(store)] == bodies

    check(s)
    s.close()
    again = open_native(segment_size=seg)
    assert again.max_offset == end_of(placed)
    check(again)


def test_get_messages_pages_by_count_and_bytes(open_native: StoreFactory) -> None:
    s = open_native()
    bodies = [bytes([65 + i % 26]) * (100 + i) for i in range(50)]
    placed = s.append_batch(msgs("P", 2, bodies))
    sizes = [p[1] for p in placed]
    assert (s.queue_min_offset("P", 2), s.queue_max_offset("P", 2)) == (0, 50)

    got: list[bytes] = []
    q = 0
    while q < 50:
        bufs, nxt, qmin, qmax = s.get_messages("P", 2, q, max_count=7)
        assert (qmin, qmax) == (0, 50)
        assert len(bufs) == min(7, 50 - q)
        assert nxt == q + len(bufs)
        for i, b in enumerate(bufs):
            rec = decode(b)
            assert rec["queue_offset"] == q + i
            got.append(rec["body"])
        q = nxt
    assert got == bodies

    budget = sizes[10] + sizes[11] + sizes[12] // 2
    bufs, nxt, _, _ = s.get_messages("P", 2, 10, max_count=32, max_bytes=budget)
    assert [decode(b)["queue_offset"] for b in bufs] == [10, 11]
    assert nxt == 12
    bufs, nxt, _, _ = s.get_messages("P", 2, 10, max_count=32, max_bytes=1)
    assert len(bufs) == 1 and nxt == 11, "one message is returned even if it exceeds max_bytes"
    assert s.get_messages("Absent", 0, 0)[0] == []


def test_search_offset_by_timestamp_and_earliest_store_time(open_native: StoreFactory) -> None:
    s = open_native()
    first = s.append_batch(msgs("S", 0, [b"a" * 500] * 30))
    time.sleep(0.05)
    second = s.append_batch(msgs("S", 0, [b"b" * 500] * 30))
    ta, tb = first[0][3], second[0][3]
    assert all(p[3] == ta for p in first) and all(p[3] == tb for p in second)
    assert tb >= ta + 50
    assert s.search_offset_by_timestamp("S", 0, 0) == 0
    assert s.search_offset_by_timestamp("S", 0, ta) == 0
    assert s.search_offset_by_timestamp("S", 0, ta + 1) == 30
    assert s.search_offset_by_timestamp("S", 0, tb) == 30
    assert s.search_offset_by_timestamp("S", 0, tb + 1) == 60, "none newer: the max offset"
    assert s.earliest_store_time("S", 0) == ta
    assert s.earliest_store_time("S", 1) is None


@pytest.mark.parametrize(
    "tag", ["TagA", "", "a" * 40, "hello world", "中文标签", "😀x", "-2147483648"]
)
def test_consume_queue_tag_code_is_java_string_hashcode_of_the_tag(
    open_native: StoreFactory, tag: str
) -> None:
    s = open_native()
    props = b"KEYS\x01k\x02TAGS\x01" + tag.encode() + b"\x02"
    (off, size, qo, _), (_, _, qo2, _) = s.append_batch(
        [Message("Tg", 0, b"x", props), Message("Tg", 0, b"y", b"KEYS\x01k\x02")]
    )
    assert s.queue_unit("Tg", 0, qo) == (off, size, java_string_hash(tag))
    assert s.queue_unit("Tg", 0, qo2)[2] == 0, "no TAGS property: tag code 0"


def test_append_result_items_agree_with_its_summaries(open_native: StoreFactory) -> None:
    s = open_native()
    res = s.append_batch(msgs("T", 1, [b"a", b"bb", b"ccc"]))
    items = list(res)
    assert len(res) == len(items) == 3
    assert res[-1] == items[2]
    assert res.end_offset == items[2][0] + items[2][1] == s.max_offset
    assert res.physical_offsets() == [i[0] for i in items]
    assert res.queue_offsets() == [0, 1, 2]
    with pytest.raises(IndexError):
        res[3]


def test_java_string_hash_helper_matches_known_java_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("😀") == 1772899  # two UTF-16 surrogates: 0xD83D, 0xDE00


# ---------------------------------------------------------------------------------------------
# 2. Bad input and configuration
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: Message("", 0, b"x"), id="empty-topic"),
        pytest.param(lambda: Message("a/b", 0, b"x"), id="slash-in-topic"),
        pytest.param(lambda: Message("a b", 0, b"x"), id="space-in-topic"),
        pytest.param(lambda: Message("x" * 256, 0, b"x"), id="topic-over-255"),
        pytest.param(lambda: Message("T", -1, b"x"), id="negative-queue-id"),
        pytest.param(lambda: Message("T", 0, b"x" * 1025), id="body-over-max-message-size"),
        pytest.param(lambda: Message("T", 0, b"x" * 1024, b"P\x01" + b"v" * 32760), id="props"),
    ],
)
def test_illegal_message_is_refused_and_nothing_is_written(
    open_native: StoreFactory, tmp_path: Path, bad: Callable[[], Message]
) -> None:
    s = open_native(max_message_size=1024)
    good = s.append_batch(msgs("T", 0, [b"first"]))
    before = s.max_offset
    for batch in ([bad()], [Message("T", 0, b"good"), bad()]):
        with pytest.raises(MessageIllegalError) as ei:
            s.append_batch(batch)
        assert ei.value.definite
        assert s.max_offset == before
        assert s.next_queue_offset("T", 0) == 1
    assert s.flush() == before
    tail = read_file(segment_path(tmp_path / "store", 0))[before:]
    assert tail == bytes(len(tail)), "no bytes written past the max offset"
    (off, _, qo, _), *_ = s.append_batch(msgs("T", 0, [b"x" * 1024]))  # exactly the max: ok
    assert (off, qo) == (end_of(good), 1)


def test_record_larger_than_a_segment_is_refused(open_native: StoreFactory) -> None:
    s = open_native(segment_size=4096)
    with pytest.raises(MessageIllegalError):
        s.append_batch(msgs("T", 0, [b"x" * 5000]))
    assert s.max_offset == 0
    (off, _, qo, _), *_ = s.append_batch(msgs("T", 0, [b"x" * 3000]))
    assert (off, qo) == (0, 0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment_size", 100),
        ("segment_size", 1 << 41),
        ("cq_units_per_file", 0),
        ("store_host", "nonsense"),
        ("flush_interval_ms", 0),
        ("max_message_size", 0),
        ("max_message_size", 7 * 1024 * 1024),
    ],
)
def test_bad_config_value_raises_config_error_naming_the_key(
    tmp_path: Path, key: str, value: object
) -> None:
    with pytest.raises(ConfigError) as ei:
        Store(tmp_path / "s", **{key: value})
    assert ei.value.key == key
    assert isinstance(ei.value, ValueError) and ei.value.definite


def test_reopen_with_a_smaller_segment_size_raises_config_error(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    s = open_native()
    s.append_batch(msgs("T", 0, [b"x" * 1000] * 100))
    s.close()
    with pytest.raises(ConfigError) as ei:
        Store(tmp_path / "store", segment_size=SEG // 2)
    assert ei.value.key == "segment_size"
    again = open_native()
    assert len(scan_log(again)) == 100


def test_reopen_with_a_larger_segment_size_raises_config_error_and_keeps_data(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    s = open_native()
    s.append_batch(msgs("T", 0, [b"x" * 1000] * 200))
    end = s.max_offset
    s.close()
    with pytest.raises(ConfigError) as ei:
        open_native(segment_size=2 * SEG)
    assert ei.value.key == "segment_size"
    again = open_native()
    assert again.max_offset == end
    assert len(scan_log(again)) == 200


def test_properties_without_trailing_separator_stay_readable_and_survive_reopen(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    s.append_batch([Message("T", 0, b"ok", b"TAGS\x01a\x02")])
    try:
        s.append_batch([Message("T", 0, b"odd", b"TAGS\x01a")])
        accepted = True
    except MessageIllegalError:
        accepted = False
    (_, _, qo, _), *_ = s.append_batch([Message("T", 0, b"later")])
    assert qo == (2 if accepted else 1)
    assert s.queue_max_offset("T", 0) == qo + 1
    assert s.dispatched_offset == s.max_offset
    end = s.max_offset
    s.close()
    again = open_native()
    assert again.max_offset == end
    want = [b"ok", b"odd", b"later"] if accepted else [b"ok", b"later"]
    assert [r["body"] for r in scan_log(again)] == want


# ---------------------------------------------------------------------------------------------
# 3. Confirm-offset dispatch
# ---------------------------------------------------------------------------------------------


def test_unconfirmed_messages_are_invisible_until_the_confirm_offset_passes_them(
    open_native: StoreFactory,
) -> None:
    s = open_native(confirm_follows_max=False)
    placed = s.append_batch(msgs("C", 0, [b"m%d" % i for i in range(10)]))
    assert s.confirm_offset == 0 and s.dispatched_offset == 0
    assert s.queue_max_offset("C", 0) == 0
    assert s.get_messages("C", 0, 0)[0] == []
    assert s.next_queue_offset("C", 0) == 10, "queue offsets are assigned at append"
    assert decode(s.read_record(placed[9][0]))["body"] == b"m9", "stored, just not dispatched"

    assert s.set_confirm_offset(placed[5][0]) == placed[5][0]
    assert s.queue_max_offset("C", 0) == 5
    bufs, nxt, _, qmax = s.get_messages("C", 0, 0, max_count=100)
    assert [decode(b)["body"] for b in bufs] == [b"m%d" % i for i in range(5)]
    assert (nxt, qmax) == (5, 5)

    assert s.set_confirm_offset(10**12) == s.max_offset, "clamped to the max offset"
    assert s.confirm_offset == s.max_offset == s.dispatched_offset
    assert s.queue_max_offset("C", 0) == 10


def test_confirm_offset_inside_a_record_is_refused_and_changes_nothing(
    open_native: StoreFactory,
) -> None:
    # Replicas ack whole records, so a confirm offset inside one is a caller bug: refused with a
    # definite error, nothing exposed, and the store still reopens.
    s = open_native(confirm_follows_max=False)
    placed = s.append_batch(msgs("C", 0, [b"m%d" % i for i in range(10)]))
    s.set_confirm_offset(placed[5][0])
    with pytest.raises(InvalidArgumentError):
        s.set_confirm_offset(placed[5][0] + 1)
    assert s.confirm_offset == s.dispatched_offset == placed[5][0]
    assert s.queue_max_offset("C", 0) == 5
    s.close()
    # After a reopen the dispatcher works from the commitlog instead of its in-memory queue.
    s = open_native(confirm_follows_max=False)
    assert s.queue_max_offset("C", 0) == 5
    with pytest.raises(InvalidArgumentError):
        s.set_confirm_offset(placed[7][0] + 1)
    s.set_confirm_offset(placed[7][0])
    assert s.queue_max_offset("C", 0) == 7


def test_confirm_and_dispatch_persist_across_reopen_without_exposing_unconfirmed(
    open_native: StoreFactory,
) -> None:
    s = open_native(confirm_follows_max=False)
    placed = s.append_batch(msgs("C", 1, [b"m%d" % i for i in range(10)]))
    s.set_confirm_offset(placed[6][0])
    ck = s.checkpoint()
    assert ck["confirm_offset"] == placed[6][0]
    s.close()

    s = open_native(confirm_follows_max=False)
    assert s.max_offset == end_of(placed)
    assert s.confirm_offset == placed[6][0]
    assert s.open_report["confirm_offset"] == placed[6][0]
    assert s.queue_max_offset("C", 1) == 6
    assert s.dispatched_offset <= s.confirm_offset
    bufs, _, _, _ = s.get_messages("C", 1, 0, max_count=100)
    assert [decode(b)["body"] for b in bufs] == [b"m%d" % i for i in range(6)]

    s.set_confirm_offset(s.max_offset)
    bufs, _, _, _ = s.get_messages("C", 1, 0, max_count=100)
    assert [(decode(b)["queue_offset"], decode(b)["physical_offset"]) for b in bufs] == [
        (i, placed[i][0]) for i in range(10)
    ]


def test_queue_offsets_continue_past_undispatched_records_after_reopen_rocketmq_7689(
    open_native: StoreFactory,
) -> None:
    s = open_native(confirm_follows_max=False)
    placed = s.append_batch(msgs("Q", 0, [b"m%d" % i for i in range(10)]))
    s.set_confirm_offset(placed[5][0])
    assert s.queue_max_offset("Q", 0) == 5
    s.checkpoint()
    s.close()

    s = open_native(confirm_follows_max=False)
    assert s.next_queue_offset("Q", 0) == 10
    (off, _, qo, _), *_ = s.append_batch(msgs("Q", 0, [b"new"]))
    assert qo == 10, "queue offset 5..9 are taken by undispatched records"
    s.set_confirm_offset(s.max_offset)
    bufs, _, _, qmax = s.get_messages("Q", 0, 0, max_count=100)
    recs = [decode(b) for b in bufs]
    assert [r["queue_offset"] for r in recs] == list(range(11))
    assert recs[10]["physical_offset"] == off and recs[10]["body"] == b"new"
    assert qmax == 11


# ---------------------------------------------------------------------------------------------
# 4. Transactions
# ---------------------------------------------------------------------------------------------


def test_prepared_and_rollback_records_are_stored_not_dispatched_and_take_no_queue_offset(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    batch = [
        Message("Tx", 0, b"plain"),
        Message("Tx", 0, b"prepared", sys_flag=PREPARED),
        Message("Tx", 0, b"commit", sys_flag=COMMIT),
        Message("Tx", 0, b"rollback", sys_flag=ROLLBACK),
        Message("Tx", 0, b"plain2"),
    ]
    placed = s.append_batch(batch)
    assert [p[2] for p in placed] == [0, 0, 1, 0, 2]
    prepared = decode(s.read_record(placed[1][0]))
    assert prepared["body"] == b"prepared" and prepared["queue_offset"] == 0
    assert prepared["sys_flag"] & 0xC == PREPARED
    assert s.queue_max_offset("Tx", 0) == 3
    bufs, _, _, _ = s.get_messages("Tx", 0, 0)
    assert [decode(b)["body"] for b in bufs] == [b"plain", b"commit", b"plain2"]
    assert s.next_queue_offset("Tx", 0) == 3


def test_prepared_records_take_no_queue_offset_when_redispatched_after_reopen(
    open_native: StoreFactory,
) -> None:
    s = open_native(confirm_follows_max=False)
    s.append_batch(
        [
            Message("Tx", 0, b"a"),
            Message("Tx", 0, b"p", sys_flag=PREPARED),
            Message("Tx", 0, b"b", sys_flag=COMMIT),
        ]
    )
    s.close()
    s = open_native(confirm_follows_max=False)
    assert s.next_queue_offset("Tx", 0) == 2
    s.set_confirm_offset(s.max_offset)
    bufs, _, _, qmax = s.get_messages("Tx", 0, 0)
    assert [decode(b)["body"] for b in bufs] == [b"a", b"b"] and qmax == 2


# ---------------------------------------------------------------------------------------------
# 9. Retention
# ---------------------------------------------------------------------------------------------


def _fill_segments(s: Store, n: int = 250) -> list[tuple[int, int, int, int]]:
    placed = s.append_batch(msgs("R", 0, [b"%04d" % i + b"r" * 996 for i in range(n)]))
    assert len(s.segment_files()) >= 4
    return placed


def test_delete_segments_before_removes_whole_flushed_segments_and_moves_min_offsets(
    open_native: StoreFactory,
) -> None:
    s = open_native(flush_interval_ms=10_000)
    placed = _fill_segments(s)
    assert s.delete_segments_before(10**12) == [], "nothing is flushed yet"
    assert s.min_offset == 0
    s.flush()
    deleted = s.delete_segments_before(2 * SEG + 100)
    assert deleted == [f"{0:020d}", f"{SEG:020d}"], "only segments ending at or below the offset"
    assert s.min_offset == 2 * SEG
    first_left = next(i for i, p in enumerate(placed) if p[0] >= 2 * SEG)
    assert s.queue_min_offset("R", 0) == first_left
    assert s.queue_max_offset("R", 0) == len(placed)
    with pytest.raises(OffsetOutOfRangeError):
        s.get_messages("R", 0, first_left - 1)
    with pytest.raises(OffsetOutOfRangeError):
        s.read_record(placed[0][0])
    bufs, _, qmin, _ = s.get_messages("R", 0, first_left, max_count=1)
    assert qmin == first_left and decode(bufs[0])["physical_offset"] == placed[first_left][0]
    assert s.earliest_store_time("R", 0) == placed[first_left][3]

    s.delete_segments_before(10**12)
    active = s.max_offset - s.max_offset % SEG
    assert [start for start, _ in s.segment_files()] == [active], "the active one stays"
    assert decode(s.read_record(placed[-1][0]))["body"].startswith(b"%04d" % (len(placed) - 1))
    s.close()

    s = open_native(flush_interval_ms=10_000)
    assert s.min_offset == active
    assert s.queue_min_offset("R", 0) == next(i for i, p in enumerate(placed) if p[0] >= active)
    assert s.max_offset == end_of(placed)


def test_delete_expired_zero_deletes_all_but_the_active_segment_below_dispatch(
    open_native: StoreFactory,
) -> None:
    s = open_native(confirm_follows_max=False)
    placed = _fill_segments(s)
    s.flush()
    in_seg1 = [p for p in placed if SEG <= p[0] < 2 * SEG]
    s.set_confirm_offset(in_seg1[1][0])  # dispatched into segment 1
    assert s.delete_expired(0) == [f"{0:020d}"], "only segments wholly below dispatched"
    assert s.min_offset == SEG
    s.set_confirm_offset(s.max_offset)
    names = s.delete_expired(0)
    assert names and f"{(s.max_offset // SEG) * SEG:020d}" not in names
    assert len(s.segment_files()) == 1
    assert s.min_offset == s.segment_files()[0][0]
    first_left = next(i for i, p in enumerate(placed) if p[0] >= s.min_offset)
    assert s.queue_min_offset("R", 0) == first_left
    with pytest.raises(OffsetOutOfRangeError):
        s.get_messages("R", 0, 0)


def test_retention_never_deletes_the_last_segment_so_offsets_never_go_backwards(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    placed = _fill_segments(s)
    k = next(i for i, p in enumerate(placed) if p[0] >= 2 * SEG)
    assert placed[k][0] == 2 * SEG
    s.truncate_to(2 * SEG)
    s.flush()
    s.delete_segments_before(10**12)
    assert s.segment_files(), "the segment holding the end of the log is kept"
    s.close()
    s = open_native()
    assert s.max_offset == 2 * SEG
    (off, _, qo, _), *_ = s.append_batch(msgs("R", 0, [b"after"]))
    assert off >= 2 * SEG and qo == k


# ---------------------------------------------------------------------------------------------
# Truncation and replication input
# ---------------------------------------------------------------------------------------------


def test_truncate_to_refuses_offsets_that_are_not_record_boundaries(
    open_native: StoreFactory,
) -> None:
    s = open_native()
    placed = s.append_batch(msgs("T", 0, [b"x" * 100] * 10))
    for bad in (placed[3][0] + 3, s.max_offset + 1):
        with pytest.raises((CorruptRecordError, OffsetOutOfRangeError)):
            s.truncate_to(bad)
        assert s.max_offset == end_of(placed)
        assert s.queue_max_offset("T", 0) == 10
    s.truncate_to(placed[3][0])
    assert (s.max_offset, s.queue_max_offset("T", 0), s.next_queue_offset("T", 0)) == (
        placed[3][0],
        3,
        3,
    )


def test_append_raw_replicates_read_range_output_byte_for_byte(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    master = open_native(tmp_path / "master")
    replica = open_native(tmp_path / "replica")
    rng = random.Random(3)
    master.append_batch(
        [Message("Rep", i % 2, rng.randbytes(rng.randrange(0, 2000))) for i in range(150)]
    )
    off = 0
    while off < master.max_offset:
        buf = master.read_range(off, 20_000)
        replica.append_raw(off, bytes(memoryview(buf)))
        off = buf.end_offset
    assert replica.max_offset == master.max_offset
    assert [r["body"] for r in scan_log(replica)] == [r["body"] for r in scan_log(master)]
    for q in range(2):
        assert replica.queue_max_offset("Rep", q) == master.queue_max_offset("Rep", q)

    record = bytearray(master.read_record(0).tobytes())
    record[len(record) // 2] ^= 1
    fresh = open_native(tmp_path / "fresh")
    with pytest.raises(CorruptRecordError):
        fresh.append_raw(0, bytes(record))
    assert fresh.max_offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        replica.append_raw(replica.max_offset + 1, master.read_record(0).tobytes())


def test_tag_filter_returns_only_matching_tags_and_advances_past_the_rest(
    open_native: StoreFactory,
) -> None:
    # RocketMQ filters pulls on the broker by the consume-queue tag code (Java hashCode).
    s = open_native()
    batch = [
        Message("F", 0, b"%d" % i, b"TAGS\x01" + (b"a" if i % 3 == 0 else b"b") + b"\x02")
        for i in range(30)
    ]
    s.append_batch(batch)
    bufs, nxt, _, qmax = s.get_messages("F", 0, 0, 32, tag_codes=[java_string_hash("a")])
    assert [decode(b)["body"] for b in bufs] == [b"%d" % i for i in range(0, 30, 3)]
    assert nxt == qmax == 30
    # max_count counts matches; the next offset stops right after the last match returned.
    bufs, nxt, _, _ = s.get_messages("F", 0, 0, 2, tag_codes=[java_string_hash("a")])
    assert [decode(b)["body"] for b in bufs] == [b"0", b"3"]
    assert nxt == 4
    # No tag matches: nothing returned, the whole range is skipped.
    bufs, nxt, _, _ = s.get_messages("F", 0, 0, 32, tag_codes=[java_string_hash("zzz")])
    assert bufs == [] and nxt == 30


def test_a_replica_with_another_segment_size_says_so_at_the_first_filler(
    open_native: StoreFactory, tmp_path: Path
) -> None:
    """A replica whose mappedFileSizeCommitLog differs from its master's failed every
    transfer with "partial end-of-segment filler" (operator probe): the error now says the
    sender uses another segment size."""
    master = open_native(tmp_path / "master")
    replica = open_native(tmp_path / "replica", segment_size=2 * SEG)
    master.append_batch([Message("Seg", 0, b"y" * 3000) for _ in range(3 * SEG // 3000)])
    assert master.max_offset > SEG  # it rolled: a filler ends its first segment
    off = 0
    with pytest.raises(CorruptRecordError, match="another segment size"):
        while off < master.max_offset:
            buf = master.read_range(off, 64 * 1024)
            replica.append_raw(off, bytes(memoryview(buf)))
            off = buf.end_offset
