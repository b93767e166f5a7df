"""REGISTER_BROKER body: JSON and the compressed form of RegisterBrokerBody.encode(true)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.models import (
    DataVersion,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
)
from rmq_ha.protocol.register_body import (
    VERSION_5_0_0,
    RegisterBrokerBody,
    body_crc32,
    decode_register_body,
    encode_register_body,
    topic_config_from_text,
    topic_config_to_text,
)

DV = DataVersion(state_version=1, timestamp=1_700_000_000_000, counter=5)


def make_body() -> RegisterBrokerBody:
    wrapper = TopicConfigAndMappingSerializeWrapper(
        topic_config_table={
            "T1": TopicConfig(topic_name="T1", read_queue_nums=8, write_queue_nums=8, perm=6),
            "%RETRY%G": TopicConfig(
                topic_name="%RETRY%G", read_queue_nums=1, write_queue_nums=1, perm=6,
                attributes={"+message.type": "NORMAL"},
            ),
        },
        data_version=DV,
    )  # fmt: skip
    return RegisterBrokerBody(topic_config_serialize_wrapper=wrapper, filter_server_list=[])


def java_style_compressed(*, with_mapping: bool) -> bytes:
    """Build the stream the way RegisterBrokerBody.encode(true) lays it out."""
    out = bytearray()

    def blob(b: bytes) -> None:
        out.extend(struct.pack(">i", len(b)))
        out.extend(b)

    blob(b'{"counter":5,"stateVersion":1,"timestamp":1700000000000}')
    out.extend(struct.pack(">i", 2))
    blob(b"T1 8 8 6 SINGLE_TAG {}")
    blob(b'%RETRY%G 1 1 6 SINGLE_TAG {"+message.type":"NORMAL"}')
    blob(b'["10.0.0.9:45454"]')
    if with_mapping:
        out.extend(struct.pack(">i", 1))
        blob(b'{"bname":"broker-a","currIdMap":{0:0},"epoch":1,"topic":"ST","totalQueues":1}')
    return zlib.compress(bytes(out), 9)


def test_json_shape_and_round_trip() -> None:
    body = make_body()
    raw = encode_register_body(body)
    obj = json.loads(raw)
    assert set(obj) == {"topicConfigSerializeWrapper", "filterServerList"}
    assert set(obj["topicConfigSerializeWrapper"]) == {
        "topicConfigTable", "dataVersion", "topicQueueMappingInfoMap",
        "topicQueueMappingDetailMap", "mappingDataVersion",
    }  # fmt: skip
    assert decode_register_body(raw) == body


def test_decode_java_compressed_stream() -> None:
    got = decode_register_body(java_style_compressed(with_mapping=True), compressed=True)
    w = got.topic_config_serialize_wrapper
    assert w.data_version == DV
    assert w.topic_config_table["T1"] == TopicConfig(
        topic_name="T1", read_queue_nums=8, write_queue_nums=8, perm=6
    )
    assert w.topic_config_table["%RETRY%G"].attributes == {"+message.type": "NORMAL"}
    assert got.filter_server_list == ["10.0.0.9:45454"]
    # The mapping JSON is fastjson output with bare Integer keys.
    assert w.topic_queue_mapping_info_map["ST"]["currIdMap"] == {"0": 0}


def test_mapping_section_is_read_only_from_5_0_0() -> None:
    old = decode_register_body(
        java_style_compressed(with_mapping=False), compressed=True, version=VERSION_5_0_0 - 1
    )
    assert old.topic_config_serialize_wrapper.topic_queue_mapping_info_map == {}
    with pytest.raises(BodyDecodeError, match="truncated"):
        decode_register_body(java_style_compressed(with_mapping=False), compressed=True)


def test_compressed_is_recognised_even_when_the_header_says_false() -> None:
    # RocketMQ 5.3.x brokers always send compressed=false in the header.
    got = decode_register_body(java_style_compressed(with_mapping=True), compressed=False)
    assert set(got.topic_config_serialize_wrapper.topic_config_table) == {"T1", "%RETRY%G"}


def test_compressed_round_trip_loses_what_java_loses() -> None:
    body = make_body()
    body.topic_config_serialize_wrapper.topic_config_table["T1"].order = True
    body.topic_config_serialize_wrapper.topic_config_table["T1"].topic_sys_flag = 3
    raw = encode_register_body(body, compressed=True)
    assert raw[:2] == b"\x78\xda"  # zlib, best compression, as java.util.zip.Deflater(9)
    got = decode_register_body(raw, compressed=True)
    t1 = got.topic_config_serialize_wrapper.topic_config_table["T1"]
    assert (t1.order, t1.topic_sys_flag) == (False, 0)  # not in the text form
    t1.order, t1.topic_sys_flag = True, 3
    assert got == body


def test_empty_body_and_legacy_wrapper() -> None:
    empty = decode_register_body(None)
    assert empty.topic_config_serialize_wrapper.data_version == DataVersion(0, 0, 0)
    assert decode_register_body(b"") == empty
    legacy = b'{"dataVersion":{"counter":5,"stateVersion":1,"timestamp":1700000000000},'
    legacy += b'"topicConfigTable":{"T1":{"topicName":"T1","perm":4}}}'
    got = decode_register_body(legacy)
    assert got.topic_config_serialize_wrapper.data_version == DV
    assert got.topic_config_serialize_wrapper.topic_config_table["T1"].perm == 4


@pytest.mark.parametrize(
    "raw",
    [
        b"\x78\x9c garbage",
        zlib.compress(b"\x00\x00"),
        zlib.compress(struct.pack(">i", 1000) + b"{}"),
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3)
                      + b"a b"),
    ],
)  # fmt: skip
def test_corrupt_compressed_bodies(raw: bytes) -> None:
    with pytest.raises(BodyDecodeError):
        decode_register_body(raw, compressed=True)


def test_topic_config_text() -> None:
    tc = TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=2, perm=6,
                     topic_filter_type="MULTI_TAG", attributes={"k": "v"})  # fmt: skip
    text = topic_config_to_text(tc)
    assert text == 'T 4 2 6 MULTI_TAG {"k":"v"}'
    assert topic_config_from_text(text) == tc
    # Java's split drops trailing empty strings; unparseable attributes are ignored.
    assert topic_config_from_text("T 1 1 6 SINGLE_TAG ").attributes == {}
    assert topic_config_from_text("T 1 1 6 SINGLE_TAG {oops").attributes == {}
    with pytest.raises(BodyDecodeError):
        topic_config_from_text("T 1 x 6 SINGLE_TAG")


def test_body_crc32_is_masked_to_31_bits() -> None:
    assert body_crc32(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF == 907060870
    assert body_crc32(b"") == 0 and body_crc32(None) == 0
    assert all(body_crc32(bytes([i]) * 7) < 2**31 for i in range(256))
