"""The remoting frame codec and the SEND_BATCH_MESSAGE body codec (rmq_ha._native)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_ha._native import (
    MAX_FRAME_LEN,
    decode_batch_body,
    decode_frames,
    encode_batch_body,
    encode_frames,
)
from rmq_ha.errors import RemotingDecodeError, RmqHaError
from rmq_ha.protocol.command import RemotingCommand, WireTuple

JSON, BINARY = 0, 1

ROUTE_REQUEST_JSON: WireTuple = (105, 0, 479, 7, 0, None, {"topic": "T"}, None, JSON)
ROUTE_REQUEST_BINARY: WireTuple = (105, 0, 479, 7, 0, None, {"topic": "T"}, None, BINARY)


def frame(ser_type: int, header: bytes, body: bytes = b"") -> bytes:
    """A frame around raw header bytes, following the reference layout."""
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (ser_type << 24) | len(header))
        + header
        + body
    )


def binary_header(
    code: int = 105,
    language: int = 0,
    version: int = 479,
    opaque: int = 7,
    flag: int = 0,
    remark: bytes = b"",
    ext: bytes = b"",
) -> bytes:
    return (
        struct.pack(">hBhii", code, language, version, opaque, flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )


def ext_entry(key: bytes, val: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + struct.pack(">i", len(val)) + val


# --- byte-exact vectors ---------------------------------------------------------------------


def test_json_vector_get_routeinfo_by_topic() -> None:
    header = (
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":479}'
    )
    expected = struct.pack(">ii", 4 + len(header), len(header)) + header
    assert encode_frames([ROUTE_REQUEST_JSON]) == expected
    assert decode_frames(expected) == ([ROUTE_REQUEST_JSON], len(expected))


def test_binary_vector_get_routeinfo_by_topic() -> None:
    expected = bytes.fromhex(
        "00000025"  # total_len = 4 + 33
        "01000021"  # ROCKETMQ, header_len 33
        "0069"  # code 105
        "00"  # JAVA
        "01df"  # version 479
        "00000007"  # opaque
        "00000000"  # flag
        "00000000"  # remark_len (null)
        "0000000c"  # ext_len 12
        "0005" + b"topic".hex() + "00000001" + b"T".hex()
    )
    assert encode_frames([ROUTE_REQUEST_BINARY]) == expected
    assert decode_frames(expected) == ([ROUTE_REQUEST_BINARY], len(expected))


def test_response_with_remark_and_body_binary_vector() -> None:
    t: WireTuple = (17, 3, 479, 9, 1, "no topic", {"a": "1", "bb": ""}, b"\x00body", BINARY)
    header = binary_header(
        17, 3, 479, 9, 1, b"no topic", ext_entry(b"a", b"1") + ext_entry(b"bb", b"")
    )
    expected = frame(BINARY, header, b"\x00body")
    assert encode_frames([t]) == expected
    assert decode_frames(expected) == ([t], len(expected))


def test_buffer_types_and_coalesced_write() -> None:
    frames = [ROUTE_REQUEST_JSON, ROUTE_REQUEST_BINARY, ROUTE_REQUEST_JSON]
    data = encode_frames(frames)
    for buf in (data, bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert decode_frames(buf) == (frames, len(data))
    assert encode_frames(iter(frames)) == data
    assert encode_frames([]) == b""
    assert decode_frames(b"") == ([], 0)


def test_remoting_command_round_trip() -> None:
    req = RemotingCommand.request(310, {"a": "G", "b": "T"}, b"payload", oneway=True)
    [got], _ = decode_frames(encode_frames([req.to_wire()]))
    assert RemotingCommand.from_wire(got) == req
    resp = req.response(0, remark="ok", body=b"x")
    resp.serialize_type = BINARY
    [got], _ = decode_frames(encode_frames([resp.to_wire()]))
    assert RemotingCommand.from_wire(got) == resp


# --- lenient JSON reading --------------------------------------------------------------------


def test_lenient_json_header() -> None:
    header = json.dumps(
        {
            "code": "12",
            "language": "GO",
            "version": 401,
            "unknown": {"nested": [1, 2, None]},
            "extFields": {"n": 5, "t": True, "f": 1.5, "gone": None, "s": "v"},
            "serializeTypeCurrentRPC": "ROCKETMQ",
            "remark": None,
        }
    ).encode()
    [t], _ = decode_frames(frame(JSON, header, b"B"))
    assert t == (12, 9, 401, 0, 0, None, {"n": "5", "t": "true", "f": "1.5", "s": "v"}, b"B", 0)
    [t], _ = decode_frames(frame(JSON, b'{"code":3,"language":12,"extFields":{}}'))
    assert t == (3, 12, 0, 0, 0, None, None, None, 0)
    [t], _ = decode_frames(frame(JSON, b'{"code":3,"language":"COBOL"}'))
    assert t[1] == 7  # OTHER
    [t], _ = decode_frames(frame(JSON, b'{"code":3,"language":200}'))
    assert t[1] == 200
    assert encode_frames([t])[8:].startswith(b'{"code":3,"flag":0,"language":200,')


def test_empty_string_rules() -> None:
    # JSON keeps "" everywhere; binary turns an empty remark into None (RocketMQ's rule) but
    # keeps empty extFields values; an empty body is None and an empty map None in both.
    t: WireTuple = (1, 0, 0, 0, 0, "", {"k": "", "": "v"}, b"", JSON)
    [got], _ = decode_frames(encode_frames([t]))
    assert got == (1, 0, 0, 0, 0, "", {"k": "", "": "v"}, None, JSON)
    [got], _ = decode_frames(encode_frames([(*t[:8], BINARY)]))
    assert got == (1, 0, 0, 0, 0, None, {"k": "", "": "v"}, None, BINARY)
    for ser in (JSON, BINARY):
        [got], _ = decode_frames(encode_frames([(1, 0, 0, 0, 0, None, {}, None, ser)]))
        assert got[6] is None


def test_duplicate_binary_keys_last_wins() -> None:
    header = binary_header(ext=ext_entry(b"k", b"1") + ext_entry(b"k", b"2"))
    [t], _ = decode_frames(frame(BINARY, header))
    assert t[6] == {"k": "2"}


# --- malformed input -------------------------------------------------------------------------

GOOD_BINARY = binary_header(remark=b"r", ext=ext_entry(b"k", b"v"))


def with_bytes(b: bytes, at: int, new: bytes) -> bytes:
    return b[:at] + new + b[at + len(new) :]


MALFORMED = {
    "negative total": struct.pack(">i", -1),
    "total below 4": struct.pack(">i", 3),
    "header_len beyond frame": struct.pack(">iI", 4, 1),
    "unknown ser type": frame(2, b"{}"),
    "json missing code": frame(JSON, b'{"opaque":1}'),
    "json not an object": frame(JSON, b"[1,2]"),
    "json truncated": frame(JSON, b'{"code":1'),
    "json trailing garbage": frame(JSON, b'{"code":1}x'),
    "json empty header": frame(JSON, b""),
    "json bad utf8": frame(JSON, b'{"code":1,"remark":"\xff"}'),
    "json code not integer": frame(JSON, b'{"code":1.5}'),
    "json code beyond i32": frame(JSON, b'{"code":2147483648}'),
    "json language beyond u8": frame(JSON, b'{"code":1,"language":256}'),
    "json extFields not object": frame(JSON, b'{"code":1,"extFields":"x"}'),
    "binary too short": frame(BINARY, GOOD_BINARY[:20]),
    "binary negative remark": frame(BINARY, with_bytes(GOOD_BINARY, 13, struct.pack(">i", -5))),
    "binary remark beyond header": frame(
        BINARY, with_bytes(GOOD_BINARY, 13, struct.pack(">i", 1000))
    ),
    "binary negative ext_len": frame(BINARY, with_bytes(GOOD_BINARY, 18, struct.pack(">i", -1))),
    "binary ext_len beyond header": frame(
        BINARY, with_bytes(GOOD_BINARY, 18, struct.pack(">i", 99))
    ),
    "binary negative key_len": frame(BINARY, with_bytes(GOOD_BINARY, 22, struct.pack(">h", -1))),
    "binary key beyond ext": frame(BINARY, with_bytes(GOOD_BINARY, 22, struct.pack(">h", 9))),
    "binary negative val_len": frame(BINARY, with_bytes(GOOD_BINARY, 25, struct.pack(">i", -1))),
    "binary bad utf8 remark": frame(BINARY, with_bytes(GOOD_BINARY, 17, b"\xff")),
    "binary bad utf8 key": frame(BINARY, with_bytes(GOOD_BINARY, 24, b"\x80")),
    "binary trailing bytes": frame(BINARY, GOOD_BINARY + b"\x00"),
    "oversize": struct.pack(">i", MAX_FRAME_LEN - 3),
}


def test_good_binary_header_decodes() -> None:
    [t], _ = decode_frames(frame(BINARY, GOOD_BINARY))
    assert t == (105, 0, 479, 7, 0, "r", {"k": "v"}, None, BINARY)


@pytest.mark.parametrize("data", MALFORMED.values(), ids=list(MALFORMED))
def test_malformed_raises(data: bytes) -> None:
    with pytest.raises(RemotingDecodeError) as e:
        decode_frames(data)
    assert e.value.offset == 0
    assert isinstance(e.value, RmqHaError) and not e.value.definite


def test_error_offset_names_the_bad_frame() -> None:
    good = encode_frames([ROUTE_REQUEST_JSON, ROUTE_REQUEST_BINARY])
    with pytest.raises(RemotingDecodeError, match="frame at byte") as e:
        decode_frames(good + MALFORMED["json missing code"])
    assert e.value.offset == len(good)


def test_oversize_frame_limit() -> None:
    # The limit counts the 4-byte length field, like Netty's frameMaxLength.
    assert decode_frames(struct.pack(">i", MAX_FRAME_LEN - 4)) == ([], 0)
    small = encode_frames([ROUTE_REQUEST_JSON])
    assert decode_frames(small, max_frame_len=len(small)) == ([ROUTE_REQUEST_JSON], len(small))
    with pytest.raises(RemotingDecodeError, match="exceeds the maximum"):
        decode_frames(small[:4], max_frame_len=len(small) - 1)
    with pytest.raises(ValueError, match="exceeds the maximum"):
        encode_frames([(1, 0, 0, 0, 0, None, None, bytes(MAX_FRAME_LEN), JSON)])


def test_encode_rejects_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="code"):
        encode_frames([(40000, 0, 0, 0, 0, None, None, None, BINARY)])
    with pytest.raises(ValueError, match="version"):
        encode_frames([(1, 0, -40000, 0, 0, None, None, None, BINARY)])
    with pytest.raises(ValueError, match="serialize type"):
        encode_frames([(1, 0, 0, 0, 0, None, None, None, 2)])
    with pytest.raises(ValueError, match="key"):
        encode_frames([(1, 0, 0, 0, 0, None, {"k" * 40000: "v"}, None, BINARY)])
    with pytest.raises(OverflowError):
        encode_frames([(2**31, 0, 0, 0, 0, None, None, None, JSON)])
    with pytest.raises(TypeError):
        encode_frames([(1, 0, 0, 0, 0, None, {"k": 1}, None, JSON)])


# --- properties ------------------------------------------------------------------------------

# The first st.text() draw of a fresh run builds Hypothesis' character tables (about a second).
tolerate_slow_start = settings(suppress_health_check=[HealthCheck.too_slow])

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(max_size=20)


@st.composite
def wire_tuples(draw: st.DrawFn) -> WireTuple:
    ser = draw(st.sampled_from([JSON, BINARY]))
    wide = i32 if ser == JSON else i16
    return (
        draw(wide),
        draw(st.integers(0, 255)),
        draw(wide),
        draw(i32),
        draw(i32),
        draw(st.none() | text),
        draw(st.none() | st.dictionaries(text, text, max_size=5)),
        draw(st.none() | st.binary(max_size=300)),
        ser,
    )


def normalized(t: WireTuple) -> WireTuple:
    code, lang, ver, opaque, flag, remark, ext, body, ser = t
    if ser == BINARY and remark == "":
        remark = None
    return (code, lang, ver, opaque, flag, remark, ext or None, body or None, ser)


@tolerate_slow_start
@given(st.lists(wire_tuples(), max_size=6))
def test_round_trip(frames: list[WireTuple]) -> None:
    data = encode_frames(frames)
    decoded, n = decode_frames(data)
    assert n == len(data)
    assert decoded == [normalized(t) for t in frames]
    assert encode_frames(decoded) == data


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(wire_tuples(), min_size=1, max_size=4))
def test_incremental_feeding_at_every_split(frames: list[WireTuple]) -> None:
    data = encode_frames(frames)
    whole, _ = decode_frames(data)
    for cut in range(len(data) + 1):
        buf = bytearray(data[:cut])
        got, n = decode_frames(buf)
        del buf[:n]
        buf += data[cut:]
        more, m = decode_frames(buf)
        assert m == len(buf)
        assert got + more == whole


@tolerate_slow_start
@given(st.lists(wire_tuples(), min_size=1, max_size=4), st.data())
def test_incremental_feeding_in_random_chunks(frames: list[WireTuple], data: st.DataObject) -> None:
    wire = encode_frames(frames)
    buf = bytearray()
    got: list[WireTuple] = []
    pos = 0
    while pos < len(wire):
        step = data.draw(st.integers(1, len(wire) - pos))
        buf += wire[pos : pos + step]
        pos += step
        fs, n = decode_frames(buf)
        got += fs
        del buf[:n]
    assert not buf
    assert got == [normalized(t) for t in frames]


@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data: bytes) -> None:
    try:
        frames, n = decode_frames(data)
    except RemotingDecodeError:
        return
    assert 0 <= n <= len(data)
    assert decode_frames(encode_frames(frames))[0] == frames


# --- SEND_BATCH_MESSAGE body -----------------------------------------------------------------


def java_entry(flag: int, body: bytes, props: bytes, crc: int = 0, magic: int = 0) -> bytes:
    """MessageDecoder.encodeMessage's layout (Java writes 0 for MAGICCODE and BODYCRC)."""
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return (
        struct.pack(">iiiii", size, magic, crc, flag, len(body))
        + body
        + struct.pack(">h", len(props))
        + props
    )


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def test_batch_java_vector() -> None:
    raw = java_entry(9, b"abc", b"K\x01V\x02") + java_entry(0, b"", b"")
    assert decode_batch_body(raw) == [(9, b"abc", b"K\x01V\x02"), (0, b"", b"")]
    # We write the real body CRC where Java writes 0; everything else is identical.
    ours = java_entry(9, b"abc", b"K\x01V\x02", crc=body_crc(b"abc")) + java_entry(0, b"", b"")
    assert encode_batch_body([(9, b"abc", b"K\x01V\x02"), (0, b"", b"")]) == ours
    assert decode_batch_body(bytearray(ours)) == decode_batch_body(memoryview(raw))
    assert decode_batch_body(b"") == []


BATCH_MALFORMED = {
    "truncated fixed part": java_entry(1, b"ab", b"")[:10],
    "truncated body": java_entry(1, b"abcdef", b"p")[:23],
    "truncated properties": java_entry(1, b"ab", b"props")[:-1],
    "totalsize mismatch": with_bytes(java_entry(1, b"ab", b""), 0, struct.pack(">i", 99)),
    "negative body": with_bytes(java_entry(1, b"ab", b""), 16, struct.pack(">i", -1)),
    "negative properties": with_bytes(java_entry(1, b"", b""), 20, struct.pack(">h", -1)),
    "crc mismatch": java_entry(1, b"ab", b"", crc=body_crc(b"ab") ^ 1),
}


@pytest.mark.parametrize("data", BATCH_MALFORMED.values(), ids=list(BATCH_MALFORMED))
def test_batch_malformed(data: bytes) -> None:
    with pytest.raises(RemotingDecodeError):
        decode_batch_body(data)


def test_batch_error_offset_and_encode_limits() -> None:
    good = java_entry(1, b"x", b"")
    with pytest.raises(RemotingDecodeError) as e:
        decode_batch_body(good + BATCH_MALFORMED["crc mismatch"])
    assert e.value.offset == len(good)
    with pytest.raises(ValueError, match="32767"):
        encode_batch_body([(0, b"", b"p" * 32768)])


@given(
    st.lists(
        st.tuples(i32, st.binary(max_size=300), st.binary(max_size=100)),
        max_size=8,
    )
)
def test_batch_round_trip(messages: list[tuple[int, bytes, bytes]]) -> None:
    data = encode_batch_body(messages)
    assert decode_batch_body(data) == messages


@given(st.binary(max_size=200))
def test_batch_random_bytes_never_crash(data: bytes) -> None:
    try:
        decode_batch_body(data)
    except RemotingDecodeError:
        pass
