"""The native send path (issue 16, broker/handlers/send.NativeSends): for the same requests on
two fresh brokers, one with the native path and one without, the responses are byte for byte
the same (but for the store port inside offset message ids, which each broker's own port
sets), in both header serializations and both header versions; the cases the native path
leaves to Python go there (its counters say which path answered)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from rmq_ha._native import decode_frames, decode_stored_record, encode_batch_body, encode_frames
from rmq_ha.broker.broker import Broker, open_broker
from rmq_ha.broker.handlers.send import NATIVE_SEND_ENV, NativeSends
from rmq_ha.config import BrokerConfig, BrokerRole, FlushDiskType
from rmq_ha.errors import ConfigError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RemotingCommand
from rmq_ha.protocol.headers import SendMessageRequestHeader
from rmq_ha.protocol.message import encode_properties, parse_offset_msg_id
from rmq_ha.protocol.models import TopicConfig

MAX_BODY = 4096


@asynccontextmanager
async def broker(tmp_path: Path, native: bool, **kw: object) -> AsyncIterator[Broker]:
    cfg = BrokerConfig(
        listen_port=0,
        namesrv_addr="",
        store_path_root_dir=str(tmp_path / ("native" if native else "python")),
        commitlog_segment_bytes=1 << 20,
        max_message_size=MAX_BODY,
        auto_create_topic_enable=False,
        **kw,  # type: ignore[arg-type]
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(NATIVE_SEND_ENV, "1" if native else "0")
        async with open_broker(cfg) as node:
            node.topics.update(TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=4))
            node.topics.update(
                TopicConfig(topic_name="RO", read_queue_nums=2, write_queue_nums=2, perm=4)
            )
            yield node


def request(
    code: int,
    ser: int,
    opaque: int,
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    props: dict[str, str] | None = None,
) -> bytes:
    h = SendMessageRequestHeader(
        producer_group="G",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=encode_properties(props) if props else None,
    )
    ext = h.to_ext() if code == RC.SEND_MESSAGE else h.to_v2().to_ext()
    cmd = RemotingCommand(
        code=code, opaque=opaque, ext_fields=ext, body=body or None, serialize_type=ser
    )
    return encode_frames([cmd.to_wire()])


def batch(*bodies: bytes) -> bytes:
    return encode_batch_body([(0, b, b"") for b in bodies])


def cases(ser: int) -> list[tuple[str, bytes, bool]]:
    """(name, request bytes, answered natively)."""
    v2, v1, b = RC.SEND_MESSAGE_V2, RC.SEND_MESSAGE, RC.SEND_BATCH_MESSAGE
    return [
        ("ordinary v2", request(v2, ser, 1, "T", b"x" * 1024, props={"UNIQ_KEY": "U1"}), True),
        ("ordinary v1", request(v1, ser, 2, "T", b"y" * 10, queue_id=3, props={"K": "v"}), True),
        ("no uniq key", request(v2, ser, 3, "T", b"z", queue_id=1), True),
        ("batch", request(b, ser, 4, "T", batch(b"a", b"bb", b"ccc"), queue_id=2), True),
        ("empty batch", request(b, ser, 5, "T", b""), True),
        ("bad topic", request(v2, ser, 6, "Nope", b"x"), False),
        ("no permission", request(v2, ser, 7, "RO", b"x"), True),
        ("bad queue id", request(v2, ser, 8, "T", b"x", queue_id=4), True),
        ("oversized body", request(v2, ser, 9, "T", b"x" * (MAX_BODY + 1)), True),
        ("oversized in batch", request(b, ser, 10, "T", batch(b"a", b"x" * (MAX_BODY + 1))), True),
        ("long properties", request(v2, ser, 11, "T", b"x", props={"K": "v" * 32767}), True),
    ]


async def exchange(address: str, data: bytes, n: int) -> list[bytes]:
    """Sends raw bytes and returns the raw bytes of the `n` responses, in opaque order."""
    host, port = address.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    try:
        await stream.send_all(data)
        buf = b""
        frames: list[bytes] = []
        with trio.fail_after(20):
            while len(frames) < n:
                buf += await stream.receive_some(1 << 16)
                while len(buf) >= 4:
                    size = int.from_bytes(buf[:4], "big") + 4
                    if len(buf) < size:
                        break
                    frames.append(buf[:size])
                    buf = buf[size:]
        return sorted(frames, key=lambda f: decode_frames(f)[0][0][3])
    finally:
        await stream.aclose()


def with_port(frame: bytes, port: int) -> bytes:
    """The frame with the store port of every offset message id set to `port`."""
    (t,), _ = decode_frames(frame)
    ext = t[6]
    if ext and "msgId" in ext:
        ids = []
        for mid in ext["msgId"].split(","):
            _, _, off = parse_offset_msg_id(mid)
            ids.append(mid[:8] + f"{port:08X}" + f"{off:016X}")
        ext = {**ext, "msgId": ",".join(ids)}
    return encode_frames([(*t[:6], ext, *t[7:])])


def stored_records(node: Broker, responses: list[bytes]) -> list[dict[str, object]]:
    """The records the answered sends stored, without what differs between two brokers and
    two connections by design: store time and host, the born port, and the record CRC (which
    covers them)."""
    out = []
    for f in responses:
        (t,), _ = decode_frames(f)
        ids = (t[6] or {}).get("msgId")
        for mid in ids.split(",") if ids else []:
            _, _, off = parse_offset_msg_id(mid)
            r = decode_stored_record(node.store.native.read_record(off).tobytes())
            for k in ("store_timestamp", "store_host", "record_crc"):
                r.pop(k, None)
            r["born_host"] = str(r["born_host"]).rsplit(":", 1)[0]
            props = r["properties"]
            assert isinstance(props, bytes)
            r["properties"] = props[: props.find(b"__CRC32#")]
            out.append(r)
    return out


#: Broker configs: answered at once; after the group-commit flush; after the replicas (none
#: here: SLAVE_NOT_AVAILABLE, as RocketMQ answers a SYNC_MASTER without a slave).
CONFIGS: list[dict[str, object]] = [
    {},
    {"flush_disk_type": FlushDiskType.SYNC_FLUSH},
    {"broker_role": BrokerRole.SYNC_MASTER},
]


@pytest.mark.parametrize("kw", CONFIGS, ids=["async", "sync-flush", "sync-master"])
@pytest.mark.parametrize("ser", [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])
async def test_native_and_python_answer_byte_for_byte_alike(
    tmp_path: Path, ser: int, kw: dict[str, object]
) -> None:
    cs = cases(ser)
    got: dict[bool, list[bytes]] = {}
    records: dict[bool, list[dict[str, object]]] = {}
    for native in (True, False):
        async with broker(tmp_path, native, **kw) as node:
            out: list[bytes] = []
            for _, data, _ in cs:  # one at a time: both brokers store in the same order
                out += await exchange(node.address, data, 1)
            got[native] = out
            records[native] = stored_records(node, out)
            fast = node.native_sends
            if native:
                assert fast is not None
                assert fast.defer == bool(kw)
                stored, answered, back = fast.native.counters()
                assert answered == sum(1 for c in cs if c[2])
                assert back == sum(1 for c in cs if not c[2])
                assert stored == 1 + 1 + 1 + 3
                port = int(node.address.rsplit(":", 1)[1])
            else:
                assert fast is None
    assert len(got[True]) == len(cs)
    for (name, _, _), a, b in zip(cs, got[True], got[False], strict=True):
        assert a == with_port(b, port), name
    assert len(records[True]) == 6
    assert records[True] == records[False]
    # both paths name the region, the trace switch and the cluster in every message sent
    # alone (RocketMQ's send processors; a traced consumer reports only messages naming their
    # region, a request-reply consumer replies from the cluster); a batch's messages keep
    # their own properties only, as RocketMQ 5.5.0 stores them
    for r in records[True]:
        props = r["properties"]
        assert isinstance(props, bytes)
        stamped = [s in props for s in (b"CLUSTER\x01DefaultCluster", b"MSG_REGION\x01Default",
                                         b"TRACE_ON\x01true\x02")]  # fmt: skip
        in_batch = r["body"] in (b"a", b"bb", b"ccc")
        assert stamped == [not in_batch] * 3, r
    ok = Resp.SLAVE_NOT_AVAILABLE if kw.get("broker_role") else Resp.SUCCESS
    codes = [decode_frames(f)[0][0][0] for f in got[True]]
    assert codes == [ok, ok, ok, ok, 13, 17, 16, 29, 13, 13, 13]


async def test_a_buffer_of_many_frames_is_one_native_call(tmp_path: Path) -> None:
    """Many sends in one write: all answered, stored once each, in arrival order per queue."""
    async with broker(tmp_path, True) as node:
        data = b"".join(
            request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, i, "T", f"m{i}".encode(), queue_id=i % 2)
            for i in range(1, 201)
        )
        frames = await exchange(node.address, data, 200)
        offsets: dict[int, list[int]] = {0: [], 1: []}
        for f in frames:
            (t,), _ = decode_frames(f)
            assert t[0] == Resp.SUCCESS
            offsets[int(t[6]["queueId"])].append(int(t[6]["queueOffset"]))  # type: ignore[index]
        assert offsets == {0: list(range(100)), 1: list(range(100))}
        assert node.native_sends is not None
        assert node.native_sends.native.counters()[:2] == (200, 200)
        assert node.store.native.queue_max_offset("T", 0) == 100
        traffic = node.ports.traffic
        nbytes = sum(len(f"m{i}") for i in range(1, 201))
        assert traffic.inbound[("T", "Normal")] == [200, nbytes]
        sizes = traffic.sizes[("T", "Normal")]
        assert sizes.counts[0] == 200 and sizes.total == nbytes  # all under 1 KiB
        assert sum(traffic.rpc[(RC.SEND_MESSAGE_V2, Resp.SUCCESS)].counts) == 200


@pytest.mark.parametrize(
    "props",
    [{"DELAY": "2"}, {"TRAN_MSG": "true", "PGROUP": "G"}, {"TIMER_DELAY_SEC": "5"}],
)
async def test_special_messages_go_to_python(tmp_path: Path, props: dict[str, str]) -> None:
    async with broker(tmp_path, True) as node:
        data = request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", b"x", props=props)
        (f,) = await exchange(node.address, data, 1)
        (t,), _ = decode_frames(f)
        assert t[0] == Resp.SUCCESS
        assert node.native_sends is not None
        assert node.native_sends.native.counters() == (0, 0, 1)
        assert node.store.native.queue_max_offset("T", 0) == 0  # routed to a system topic


async def test_a_broker_without_write_permission_is_pythons(tmp_path: Path) -> None:
    """Python decides (it refuses ordered topics only, as RocketMQ's msgCheck)."""
    async with broker(tmp_path, True, broker_permission=4) as node:
        data = request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", b"x")
        (f,) = await exchange(node.address, data, 1)
        (t,), _ = decode_frames(f)
        assert t[0] == Resp.SUCCESS
        assert node.native_sends is not None
        assert node.native_sends.native.counters() == (0, 0, 1)


async def test_a_sync_flush_send_is_answered_once_durable(tmp_path: Path) -> None:
    """Deferred: stored natively, answered by the waiting task after the group commit."""
    async with broker(tmp_path, True, flush_disk_type=FlushDiskType.SYNC_FLUSH) as node:
        data = b"".join(
            request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, i, "T", b"x" * 100) for i in range(1, 51)
        )
        frames = await exchange(node.address, data, 50)
        assert [decode_frames(f)[0][0][0] for f in frames] == [Resp.SUCCESS] * 50
        assert node.store.native.flushed_offset >= node.store.native.max_offset
        assert node.native_sends is not None
        assert node.native_sends.native.counters()[:2] == (50, 50)


async def test_a_slave_hands_every_send_to_python(tmp_path: Path) -> None:
    async with broker(tmp_path, True, broker_role=BrokerRole.SLAVE, broker_id=1) as node:
        data = request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", b"x")
        (f,) = await exchange(node.address, data, 1)
        (t,), _ = decode_frames(f)
        assert t[0] == Resp.SERVICE_NOT_AVAILABLE
        assert node.native_sends is not None
        assert node.native_sends.native.counters() == (0, 0, 1)


def test_the_switch_refuses_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmq_ha.broker.handlers.send import native_send_wanted

    monkeypatch.setenv(NATIVE_SEND_ENV, "yes")
    with pytest.raises(ConfigError, match=NATIVE_SEND_ENV):
        native_send_wanted()
    assert NativeSends  # the class the wiring installs


async def test_config_and_topic_changes_reach_the_native_path(tmp_path: Path) -> None:
    """maxMessageSize changed at runtime and a topic created after start are what the native
    path checks next; a topic made read-only is refused natively."""
    async with broker(tmp_path, True) as node:
        fast = node.native_sends
        assert fast is not None
        big = request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", b"x" * 2000)
        (f,) = await exchange(node.address, big, 1)
        assert decode_frames(f)[0][0][0] == Resp.SUCCESS
        await node.apply_config(dataclasses.replace(node.cfg, max_message_size=1000))
        (f,) = await exchange(node.address, big, 1)
        (t,), _ = decode_frames(f)
        assert (t[0], t[5]) == (
            Resp.MESSAGE_ILLEGAL,
            "the message body size over max value, MAX: 1000",
        )
        node.topics.update(TopicConfig(topic_name="New", read_queue_nums=1, write_queue_nums=1))
        (f,) = await exchange(node.address, request(RC.SEND_MESSAGE, 1, 2, "New", b"y"), 1)
        assert decode_frames(f)[0][0][0] == Resp.SUCCESS
        node.topics.update(
            TopicConfig(topic_name="New", read_queue_nums=1, write_queue_nums=1, perm=4)
        )
        (f,) = await exchange(node.address, request(RC.SEND_MESSAGE, 1, 3, "New", b"y"), 1)
        assert decode_frames(f)[0][0][0] == Resp.NO_PERMISSION
        assert fast.native.counters() == (2, 4, 0)


async def test_a_send_handed_back_takes_the_later_sends_of_its_buffer_along(
    tmp_path: Path,
) -> None:
    """A buffer: a native send, a send to an unknown topic (Python's: TOPIC_NOT_EXIST here),
    then sends to the first one's queue: the later ones go to Python too, so none of them is
    stored natively ahead of the one handed back. (Among themselves Python's tasks run in
    Trio's order, not necessarily arrival order: as before the native path.)"""
    async with broker(tmp_path, True) as node:
        frames = [
            request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", b"a"),
            request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 2, "Fresh", b"b"),
            *(request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, i, "T", b"c") for i in range(3, 9)),
        ]
        got = await exchange(node.address, b"".join(frames), len(frames))
        answers = [decode_frames(f)[0][0] for f in got]
        assert answers[1][0] == Resp.TOPIC_NOT_EXIST
        offsets = [int(t[6]["queueOffset"]) for i, t in enumerate(answers) if i != 1]  # type: ignore[index]
        assert offsets[0] == 0 and sorted(offsets) == list(range(7))
        assert node.native_sends is not None
        assert node.native_sends.native.counters() == (1, 1, 7)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
async def test_a_send_may_name_any_queue_below_the_read_queue_count(
    tmp_path: Path, native: bool
) -> None:
    """An operator shrinking writeQueueNums (4 -> 2) leaves producers on a cached route
    writing queues 2 and 3, which consumers still read: RocketMQ's msgCheck takes a queue id
    below max(write, read), and so do both send paths; the next one up is refused."""
    async with broker(tmp_path, native) as node:
        node.topics.update(TopicConfig(topic_name="W", read_queue_nums=4, write_queue_nums=2))
        data = request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "W", b"cached", queue_id=3)
        data += request(RC.SEND_MESSAGE_V2, SERIALIZE_JSON, 2, "W", b"beyond", queue_id=4)
        taken, refused = await exchange(node.address, data, 2)
        (t,), _ = decode_frames(taken)
        assert t[0] == Resp.SUCCESS and t[6]["queueId"] == "3", t  # type: ignore[index]
        (t,), _ = decode_frames(refused)
        assert t[0] == Resp.INVALID_PARAMETER, t
        assert t[5] == "request queueId[4] is illegal, topic W has 2 write and 4 read queues"
        assert node.store.native.queue_max_offset("W", 3) == 1
        assert node.store.native.queue_max_offset("W", 2) == 0
        fast = node.native_sends
        if native:
            assert fast is not None and fast.native.counters()[:2] == (1, 2)


@pytest.mark.parametrize("native", [False, True])
async def test_a_batch_over_the_max_message_size_is_refused_whole(
    tmp_path: Path, native: bool
) -> None:
    """Each body under maxMessageSize, the batch over it: RocketMQ refuses it; we stored it
    (five 1 MiB messages in one 4 MiB-limited batch, probe). Both paths refuse it alike."""
    async with broker(tmp_path, native) as node:
        body = batch(b"a" * 3000, b"b" * 3000)
        (f,) = await exchange(node.address, request(RC.SEND_BATCH_MESSAGE, 1, 1, "T", body), 1)
        (t,), _ = decode_frames(f)
        assert (t[0], t[5]) == (
            Resp.MESSAGE_ILLEGAL,
            f"the batch of {len(body)} bytes is over the max message size, MAX: {MAX_BODY}",
        )
        assert node.store.native.max_offset == 0
        small = batch(b"a" * 1000, b"b" * 1000)
        (f,) = await exchange(node.address, request(RC.SEND_BATCH_MESSAGE, 1, 2, "T", small), 1)
        assert decode_frames(f)[0][0][0] == Resp.SUCCESS
