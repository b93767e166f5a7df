"""REGISTER_BROKER (103) body: RegisterBrokerBody, in JSON or RocketMQ's compressed form.

JSON form: `{"filterServerList":[...], "topicConfigSerializeWrapper":{"topicConfigTable":{...},
"dataVersion":{...}, "topicQueueMappingInfoMap":{...}, "topicQueueMappingDetailMap":{...},
"mappingDataVersion":{...}}}`.

Compressed form (`RegisterBrokerBody.encode(true)`, used when the broker sets
`compressedRegister=true`): one zlib stream (Java `DeflaterOutputStream`, BEST_COMPRESSION)
holding, with big-endian i32 lengths and counts:

    len + DataVersion JSON
    count, then per topic: len + TopicConfig *text* (see `topic_config_to_text`)
    len + filterServerList JSON array
    count, then per mapping: len + TopicQueueMappingInfo JSON   (read only when the sender's
                                                                 version >= V5_0_0)

The text form drops `topicSysFlag` and `order`, and there is no topicQueueMappingDetailMap.
RocketMQ 5.3.x brokers send `compressed=false` in the header even when they compress the body
(BrokerOuterAPI sets it so unconditionally), so `decode_register_body` also recognises a zlib
stream by its first byte.

The header's `bodyCrc32` is `body_crc32(body)`; 0 means "not checked".
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

from rmq_ha.protocol.json_compat import BodyDecodeError, dumps, loads
from rmq_ha.protocol.jsonmodel import JsonModel
from rmq_ha.protocol.models import (
    DataVersion,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicConfigSerializeWrapper,
)

#: MQVersion ordinal of V5_0_0: from it on, the compressed body has the mapping section.
VERSION_5_0_0: Final = 413

_I32: Final = struct.Struct(">i")


def body_crc32(body: bytes | None) -> int:
    """RocketMQ's UtilAll.crc32: CRC32 masked to 31 bits; 0 for no body."""
    return zlib.crc32(body) & 0x7FFFFFFF if body else 0


@dataclass(slots=True)
class RegisterBrokerBody(JsonModel):
    topic_config_serialize_wrapper: TopicConfigAndMappingSerializeWrapper = field(
        default_factory=TopicConfigAndMappingSerializeWrapper
    )
    filter_server_list: list[str] = field(default_factory=list)


def topic_config_to_text(tc: TopicConfig) -> str:
    """TopicConfig.encode(): `name read write perm filterType attributesJson`, space-separated."""
    attrs = json.dumps(tc.attributes, ensure_ascii=False, separators=(",", ":"))
    return " ".join(
        [
            str(tc.topic_name),
            str(tc.read_queue_nums),
            str(tc.write_queue_nums),
            str(tc.perm),
            str(tc.topic_filter_type),
            attrs,
        ]
    )


def topic_config_from_text(text: str) -> TopicConfig:
    """TopicConfig.decode(). Unparseable attributes are dropped, as RocketMQ does."""
    parts = text.split(" ")
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings
        parts.pop()
    if len(parts) < 5:
        raise BodyDecodeError(f"topic config text has {len(parts)} fields: {text!r}")
    try:
        tc = TopicConfig(
            topic_name=parts[0],
            read_queue_nums=int(parts[1]),
            write_queue_nums=int(parts[2]),
            perm=int(parts[3]),
            topic_filter_type=parts[4],
        )
    except ValueError:
        raise BodyDecodeError(f"bad number in topic config text: {text!r}") from None
    if len(parts) > 5:
        try:
            attrs = loads(" ".join(parts[5:]))
        except BodyDecodeError:
            attrs = None
        if isinstance(attrs, dict):
            tc.attributes = {str(k): str(v) for k, v in attrs.items()}
    return tc


def encode_register_body(body: RegisterBrokerBody, *, compressed: bool = False) -> bytes:
    if not compressed:
        return body.to_json()
    w = body.topic_config_serialize_wrapper
    out = bytearray()

    def put(blob: bytes) -> None:
        out.extend(_I32.pack(len(blob)))
        out.extend(blob)

    put(w.data_version.to_json())
    out.extend(_I32.pack(len(w.topic_config_table)))
    for tc in w.topic_config_table.values():
        put(topic_config_to_text(tc).encode())
    put(dumps(body.filter_server_list))
    out.extend(_I32.pack(len(w.topic_queue_mapping_info_map)))
    for info in w.topic_queue_mapping_info_map.values():
        put(dumps(info))
    return zlib.compress(bytes(out), 9)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def i32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise BodyDecodeError("compressed register body is truncated")
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def blob(self) -> bytes:
        n = self.i32()
        if n < 0 or self.pos + n > len(self.data):
            raise BodyDecodeError(f"compressed register body: bad length {n}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def _decode_compressed(body: bytes, version: int) -> RegisterBrokerBody:
    try:
        raw = zlib.decompress(body)
    except zlib.error as e:
        raise BodyDecodeError(f"register body is not a zlib stream: {e}") from None
    r = _Reader(raw)
    wrapper = TopicConfigAndMappingSerializeWrapper(data_version=DataVersion.from_json(r.blob()))
    for _ in range(r.i32()):
        tc = topic_config_from_text(r.blob().decode("utf-8", errors="replace"))
        wrapper.topic_config_table[str(tc.topic_name)] = tc
    filters = loads(r.blob())
    filter_list = [str(x) for x in filters] if isinstance(filters, list) else []
    if version >= VERSION_5_0_0:
        for _ in range(r.i32()):
            info: Any = loads(r.blob())
            if isinstance(info, dict):
                wrapper.topic_queue_mapping_info_map[str(info.get("topic"))] = info
    return RegisterBrokerBody(
        topic_config_serialize_wrapper=wrapper, filter_server_list=filter_list
    )


def decode_register_body(
    body: bytes | None, *, compressed: bool = False, version: int = VERSION_5_0_0
) -> RegisterBrokerBody:
    """Decode a REGISTER_BROKER body. `version` is the request's `version` header field.

    No body gives an empty table with DataVersion all zero (as the name server does). A zlib
    stream is decoded as the compressed form whatever the header says. A JSON body that is a
    bare TopicConfigSerializeWrapper (pre-3.0.11 brokers) is accepted too.
    """
    if not body:
        return RegisterBrokerBody()
    if compressed or body[:1] == b"\x78":
        return _decode_compressed(body, version)
    obj = loads(body)
    if (
        isinstance(obj, dict)
        and "topicConfigTable" in obj
        and "topicConfigSerializeWrapper" not in obj
    ):
        legacy = TopicConfigSerializeWrapper.from_obj(obj)
        return RegisterBrokerBody(
            topic_config_serialize_wrapper=TopicConfigAndMappingSerializeWrapper(
                topic_config_table=legacy.topic_config_table, data_version=legacy.data_version
            )
        )
    return RegisterBrokerBody.from_obj(obj)
