"""Broker parts that stand alone: consumer offsets, parked pulls, queue locks."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import trio
import trio.testing

from rmq_ha.broker.locks import QueueLocks
from rmq_ha.broker.longpoll import PullHold
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.special.delay import DelayOffsets
from rmq_ha.broker.subgroups import SubscriptionGroupManager
from rmq_ha.broker.topics import TopicConfigManager
from rmq_ha.errors import CorruptFileError
from rmq_ha.protocol import json_compat
from rmq_ha.protocol.admin import SubscriptionGroupConfig
from rmq_ha.protocol.models import TopicConfig


def test_offsets_persist_in_rocketmq_shape_and_reload(tmp_path: Path) -> None:
    p = tmp_path / "config" / "consumerOffset.json"
    m = ConsumerOffsetManager(p, version_step=1)
    m.commit("g", "T", 0, 5)
    m.commit("g", "T", 3, 9)
    m.commit("g2", "T", 0, 1)
    assert m.persist()
    assert not m.persist(), "nothing changed since"
    doc = json.loads(p.read_text())
    assert doc["offsetTable"]["T@g"] == {"0": 5, "3": 9}
    assert doc["dataVersion"]["counter"] == 3
    m2 = ConsumerOffsetManager(p)
    assert m2.query("g", "T", 3) == 9
    assert m2.query("g", "T", 1) is None
    assert sorted(m2.groups_of_topic("T")) == ["g", "g2"]
    assert m2.counter == 3


def test_offsets_version_moves_by_step_and_after_adopting(tmp_path: Path) -> None:
    """consumerOffsetUpdateVersionStep: one bump per `step` commits; but the first commit
    after adopting the master's table always bumps, so a slave that acted for a dead master is
    newer than it, and the master's pre-online merge keeps the larger offset per queue."""
    master = ConsumerOffsetManager(tmp_path / "m.json", version_step=3)
    for i in range(5):
        master.commit("g", "T", 0, i + 1)
    assert master.counter == 1, "5 commits with step 3: one bump"
    master.commit("g", "T", 1, 40)  # after the slave's last copy
    slave = ConsumerOffsetManager(tmp_path / "s.json", version_step=3)
    master_before = master.to_json()
    slave.merge_from_json(master_before)
    assert slave.data_version == master.data_version
    slave.commit("g", "T", 0, 9)  # the slave acts: one commit is enough to be newer
    assert slave.data_version.compare(master.data_version) > 0
    slave.table["T@g"][1] = 30  # the slave's copy of queue 1 is older than the master's
    assert master.merge_newer(slave.to_json())
    assert master.query("g", "T", 0) == 9, "the acting slave's progress is taken"
    assert master.query("g", "T", 1) == 40, "no offset goes backwards"
    assert not master.merge_newer(master_before), "an older version is not taken"


def test_corrupt_offsets_file_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "consumerOffset.json"
    p.write_text('{"offsetTable": {"T@g": {"x": 1}}}')
    with pytest.raises(CorruptFileError, match="unreadable"):
        ConsumerOffsetManager(p)


async def test_parked_pull_wakes_on_new_messages_and_times_out() -> None:
    hold = PullHold()
    results: list[bool] = []

    async def pull(offset: int, timeout: float) -> None:
        results.append(await hold.wait("T", 1, offset, timeout))

    async with trio.open_nursery() as n:
        n.start_soon(pull, 5, 10.0)
        n.start_soon(pull, 9, 0.05)
        await trio.testing.wait_all_tasks_blocked()
        assert hold.waiting() == 2
        hold.notify("T", 1, 5)  # max offset 5: nothing new for a pull at 5
        hold.notify("T", 2, 100)  # another queue
        await trio.sleep(0.1)  # the second pull times out
        hold.notify("T", 1, 6)
    assert sorted(results) == [False, True]
    assert hold.waiting() == 0


def test_queue_locks_exclusive_until_expiry() -> None:
    locks = QueueLocks(expire_ms=1000)
    mq = ("T", "broker-a", 0)
    mq2 = ("T", "broker-a", 1)
    assert locks.try_lock_batch("g", [mq, mq2], "c1", now_ms=0) == [mq, mq2]
    assert locks.try_lock_batch("g", [mq], "c2", now_ms=500) == []
    assert locks.try_lock_batch("g", [mq], "c1", now_ms=900) == [mq], "renewal"
    assert locks.try_lock_batch("other-group", [mq], "c2", now_ms=900) == [mq]
    assert locks.try_lock_batch("g", [mq], "c2", now_ms=1800) == []
    assert locks.try_lock_batch("g", [mq], "c2", now_ms=1901) == [mq], "expired"
    locks.unlock_batch("g", [mq2], "c2")  # not the holder: no effect
    assert locks.holder("g", mq2, now_ms=999) == "c1"
    locks.unlock_batch("g", [mq2], "c1")
    assert locks.holder("g", mq2, now_ms=999) is None


async def test_pull_hold_notify_ready_rechecks_every_parked_queue() -> None:
    """Replication makes messages visible without a send on the queue (the confirm offset
    moves): every parked queue whose max offset passed its waiter's offset wakes."""
    hold = PullHold()
    maxes = {("A", 0): 5, ("B", 1): 3}
    woke: list[str] = []

    async def park(topic: str, qid: int, offset: int) -> None:
        if await hold.wait(topic, qid, offset, 5.0):
            woke.append(topic)

    with trio.fail_after(5):
        async with trio.open_nursery() as n:
            n.start_soon(park, "A", 0, 5)
            n.start_soon(park, "B", 1, 3)
            await trio.sleep(0.05)
            hold.notify_ready(lambda t, q: maxes[(t, q)])  # nothing new yet
            await trio.sleep(0.05)
            assert woke == [] and hold.waiting() == 2
            maxes[("A", 0)] = 6
            hold.notify_ready(lambda t, q: maxes[(t, q)])
            await trio.sleep(0.05)
            assert woke == ["A"] and hold.waiting() == 1
            maxes[("B", 1)] = 4
            hold.notify_ready(lambda t, q: maxes[(t, q)])
    assert sorted(woke) == ["A", "B"]


# --- config files: the previous version kept as NAME.bak and read when NAME is damaged ------


def _topics(p: Path) -> TopicConfigManager:
    return TopicConfigManager(
        p, cluster_name="C", broker_name="b", broker_permission=6, auto_create=False,
        default_queue_nums=4,
    )  # fmt: skip


def _topic_state(p: Path) -> object:
    return sorted((t, c.read_queue_nums) for t, c in _topics(p).table.items() if t.startswith("T"))


def _topic_write(p: Path, n: int) -> None:
    _topics(p).update(TopicConfig(topic_name=f"T{n}", read_queue_nums=n, write_queue_nums=n))


def _offsets_write(p: Path, n: int) -> None:
    m = ConsumerOffsetManager(p, version_step=1)
    m.commit("g", "T", 0, n)
    m.persist()


def _groups_write(p: Path, n: int) -> None:
    SubscriptionGroupManager(p).update(SubscriptionGroupConfig(group_name=f"G{n}"))


def _delay_write(p: Path, n: int) -> None:
    d = DelayOffsets(p, 1)
    d.update(1, n)
    d.persist()


CONFIG_FILES = {
    "topics": (_topic_write, _topic_state),
    "offsets": (_offsets_write, lambda p: ConsumerOffsetManager(p).query("g", "T", 0)),
    "groups": (_groups_write, lambda p: sorted(SubscriptionGroupManager(p).table)),
    "delay": (_delay_write, lambda p: DelayOffsets(p, 1).table),
}


TABLE_KEYS = {
    "topics": b"topicConfigTable",
    "offsets": b"offsetTable",
    "groups": b"subscriptionGroupTable",
    "delay": b"offsetTable",
}


def _unsealed(raw: bytes) -> bytes:
    """The file as RocketMQ (or a hand edit) would have it: without rmqHaCrc32."""
    out = re.sub(rb'^\{"rmqHaCrc32":\d+,?', b"{", raw)
    assert out != raw
    return out


DAMAGES = ["empty", "garbage", "cut", "missing", "too-deep", "overflow"]
# damage that still parses: caught by the checksum, or (unsealed) by the table's key
DAMAGES += ["digit", "key-sealed", "key-unsealed", "seal-key", "seal-digit"]
# a digit off behind what JSON readers skip before the object (a newline, a BOM): the seal is
# still checked (before, it was not found there and the file was read unchecked)
DAMAGES += ["digit-after-newline", "digit-after-bom"]


@pytest.mark.parametrize("kind", sorted(CONFIG_FILES))
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_config_file_is_read_from_its_backup(
    tmp_path: Path, kind: str, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """RocketMQ's ConfigManager: every write keeps the previous version as NAME.bak, and a
    NAME that is missing, empty or unreadable is read from it (with a WARNING naming both),
    so a damaged topics.json or consumerOffset.json costs the last change, not every topic or
    offset. Neither readable: a clear error naming both files, never a silent empty table."""
    write, state = CONFIG_FILES[kind]
    p = tmp_path / "config" / f"{kind}.json"
    write(p, 1)
    first = state(p)
    write(p, 2)
    assert state(p) != first
    assert (tmp_path / "config" / f"{kind}.json.bak").exists()
    good = p.read_bytes()
    match damage:
        case "empty":
            p.write_bytes(b"")
        case "garbage":
            p.write_bytes(b"\x00\xffnot json")
        case "cut":
            p.write_bytes(good[: len(good) // 2])
        case "missing":
            p.unlink()
        case "too-deep":
            p.write_bytes(b"[" * 100_000 + b"]" * 100_000)
        case "overflow":  # valid JSON, every integer out of range (1e999 parses as inf)
            bad = re.sub(rb":\s*\d+(?=\s*[,}\]])", b":1e999", good)
            assert bad != good
            p.write_bytes(bad)
        case "digit" | "digit-after-newline" | "digit-after-bom":
            # the value written second, one digit off: still valid JSON
            at = good.rindex(b"2")
            lead = {"digit": b"", "digit-after-newline": b"\n", "digit-after-bom": b"\xef\xbb\xbf"}
            p.write_bytes(lead[damage] + good[:at] + b"3" + good[at + 1 :])
        case "key-sealed" | "key-unsealed":  # the table's key misspelled: an empty table
            key = TABLE_KEYS[kind]
            bad = good.replace(key, key[:-1] + b"d")
            p.write_bytes(bad if damage == "key-sealed" else _unsealed(bad))
        case "seal-key":
            p.write_bytes(good.replace(b"rmqHaCrc32", b"rmqHaCrc33", 1))
        case "seal-digit":
            m = re.match(rb'\{"rmqHaCrc32":(\d)', good)
            assert m is not None
            d = b"1" if m.group(1) != b"1" else b"2"
            p.write_bytes(good[: m.start(1)] + d + good[m.end(1) :])
    damaged = p.read_bytes() if p.exists() else None
    with caplog.at_level(logging.WARNING, logger="rmq_ha.durable"):
        assert state(p) == first
    assert any(str(p) in r.getMessage() and ".bak" in r.getMessage() for r in caplog.records)
    # the damaged file is moved aside (kept for a post-mortem), so the next write cannot
    # rotate it over the good backup: damage again after that write still reads the backup
    aside = p.with_name(p.name + ".corrupt")
    assert not p.exists()
    assert (aside.read_bytes() if aside.exists() else None) == damaged
    write(p, 3)
    p.write_bytes(b"\x00" * 64)
    assert state(p) == first
    # the backup damaged too: refused, both named
    bak = p.with_name(p.name + ".bak")
    bak.write_bytes(b"{")
    p.write_bytes(b"")
    with pytest.raises(CorruptFileError) as e:
        state(p)
    assert str(p) in str(e.value) and str(bak) in str(e.value)
    # neither exists: a new broker, nothing to read
    p.unlink()
    bak.unlink()
    assert state(p) in ([], None, {})


@pytest.mark.parametrize(
    "value",
    ["1e30", "-5", "true", "250.9", '"-1"', "null", "9223372036854775808"],
)
def test_an_offset_that_is_not_an_offset_makes_the_file_damaged(
    tmp_path: Path, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-edited (unsealed) consumerOffset.json is read unchecked, but each offset must be
    a whole number from 0 to 2^63 - 1 (each queue id from 0 to 2^31 - 1, each key
    topic@group): anything else is damage and the backup is read. Before, 1e30 was kept (every
    client then failed to read it: not a Java long), -5 and true (as 1) re-delivered the
    queue, and 250.9 was read as 250."""
    p = tmp_path / "config" / "consumerOffset.json"
    _offsets_write(p, 7)
    _offsets_write(p, 250)
    raw = _unsealed(p.read_bytes())
    bad = raw.replace(b": 250", b": " + value.encode(), 1)
    assert bad != raw
    p.write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger="rmq_ha.durable"):
        assert ConsumerOffsetManager(p).query("g", "T", 0) == 7
    assert any(".bak" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("key", ["Tg", "@g", "T@"])
def test_an_offsets_key_that_names_no_topic_and_group_makes_the_file_damaged(
    tmp_path: Path, key: str
) -> None:
    p = tmp_path / "config" / "consumerOffset.json"
    _offsets_write(p, 7)
    _offsets_write(p, 250)
    raw = _unsealed(p.read_bytes())
    p.write_bytes(raw.replace(b'"T@g"', b'"' + key.encode() + b'"', 1))
    assert ConsumerOffsetManager(p).query("g", "T", 0) == 7


@pytest.mark.parametrize("kind", sorted(CONFIG_FILES))
def test_config_files_are_sealed_json_and_unsealed_files_are_still_read(
    tmp_path: Path, kind: str
) -> None:
    """A config file is JSON whose first key is the CRC32 of the rest (any JSON reader still
    reads it); a file without it (RocketMQ's own, an older rmq_ha's, a hand edit that deleted
    the key) is read as it is."""
    write, state = CONFIG_FILES[kind]
    p = tmp_path / "config" / f"{kind}.json"
    write(p, 1)
    write(p, 2)
    raw = p.read_bytes()
    assert raw.startswith(b'{"rmqHaCrc32":')
    json_compat.loads(raw)  # still JSON
    want = state(p)
    p.write_bytes(_unsealed(raw))
    assert state(p) == want


def test_a_config_file_only_moves_forward_and_a_failed_write_is_dirty_again(
    tmp_path: Path,
) -> None:
    from rmq_ha.durable import ConfigFileWriter

    w = ConfigFileWriter(tmp_path / "cfg" / "t.json")
    old = w.job(lambda: b"old", lambda: None)
    new = w.job(lambda: b"new", lambda: None)
    new()
    old()  # finished after the newer snapshot: does nothing
    assert (tmp_path / "cfg" / "t.json").read_bytes() == b"new"
    dirty: list[bool] = []
    (tmp_path / "cfg" / "t.json.tmp").mkdir()  # the temp file cannot be created

    def newest() -> bytes:
        return b"newest"

    failing = w.job(newest, lambda: dirty.append(True))
    with pytest.raises(OSError):
        failing()
    assert dirty == [True] and (tmp_path / "cfg" / "t.json").read_bytes() == b"new"


def test_runtime_config_damage_that_still_parses_reads_the_backup(tmp_path: Path) -> None:
    """runtimeConfig.json (updateBrokerConfig's persisted updates) with a flipped key name
    refused to start even though its .bak was good (probe); sealed, the flip fails the
    checksum and the backup's value is applied."""
    from rmq_ha.broker.handlers.config import overrides_path, with_runtime_overrides
    from rmq_ha.config import BrokerConfig
    from rmq_ha.durable import write_with_backup

    cfg = BrokerConfig(store_path_root_dir=str(tmp_path / "store"))
    path = overrides_path(cfg)
    path.parent.mkdir(parents=True)
    write_with_backup(path, json.dumps({"maxMessageSize": "999999"}).encode())
    write_with_backup(path, json.dumps({"maxMessageSize": "888888"}).encode())
    assert with_runtime_overrides(cfg).max_message_size == 888888
    path.write_bytes(path.read_bytes().replace(b"maxMessageSize", b"maxMessageShze"))
    assert with_runtime_overrides(cfg).max_message_size == 999999


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"maxMessageSize": 5}', "key 'maxMessageSize': the value 5 is not a string"),
        (b'["maxMessageSize"]', "not a JSON object of strings but list"),
        (b"\0" * 64, "holds NUL bytes"),
    ],
)
def test_runtime_config_damage_names_the_key_or_the_zeroes(
    tmp_path: Path, content: bytes, says: str
) -> None:
    """Storage probe (session 16): a non-string value in runtimeConfig.json was refused as
    "not an object of strings" without naming the key, and an all-NUL file as a UTF-32 decode
    error. With no backup the start is refused, saying which key or that it is zeroed."""
    from rmq_ha.broker.handlers.config import overrides_path, with_runtime_overrides
    from rmq_ha.config import BrokerConfig
    from rmq_ha.errors import CorruptFileError

    cfg = BrokerConfig(store_path_root_dir=str(tmp_path / "store"))
    path = overrides_path(cfg)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(CorruptFileError) as e:
        with_runtime_overrides(cfg)
    assert says in str(e.value) and str(path) in str(e.value)


@pytest.mark.parametrize("content", [b"banana", b"", "\u00b2".encode(), b"\xff\xfe", b"-1"])
def test_a_damaged_segment_size_record_is_refused_in_one_line(
    tmp_path: Path, content: bytes
) -> None:
    """commitlogSegmentSize holding anything but ASCII digits refuses the start with one line
    naming the file and the key. Before, '²' (a digit to str.isdigit, not to int) and bytes
    that are not UTF-8 stopped the broker with a traceback."""
    from rmq_ha.errors import ConfigError
    from rmq_ha.store import SEGMENT_SIZE_FILE, check_segment_size

    (tmp_path / SEGMENT_SIZE_FILE).write_bytes(content)
    with pytest.raises(ConfigError) as e:
        check_segment_size(tmp_path, 1 << 20, "mappedFileSizeCommitLog")
    assert e.value.key == "mappedFileSizeCommitLog"
    assert SEGMENT_SIZE_FILE in str(e.value) and "does not hold a segment size" in str(e.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [("readQueueNums", "-3"), ("writeQueueNums", "-3"), ("perm", "999"), ("perm", "-1")],
)
def test_a_topic_config_no_admin_could_store_makes_topics_json_damaged(
    tmp_path: Path, field: str, value: str
) -> None:
    """Storage probe 8: an unsealed topics.json with a negative queue count or perm bits
    beyond 1|2|4|8 was taken at start (every pull INVALID_PARAMETER, sends refused, the bad
    perm published in the routes). It is damage now, as for the admin's updateTopic: the
    backup is read."""
    p = tmp_path / "config" / "topics.json"
    _topic_write(p, 1)
    _topic_write(p, 2)
    doc = json.loads(_unsealed(p.read_bytes()))
    doc["topicConfigTable"]["T2"][field] = int(value)
    p.write_text(json.dumps(doc))  # unsealed, as by hand
    assert _topic_state(p) == [("T1", 1)]
