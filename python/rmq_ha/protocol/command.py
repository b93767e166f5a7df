"""The remoting command: one frame of RocketMQ's remoting protocol, decoded.

The wire codec lives in Rust (`rmq_ha._native.decode_frames` / `encode_frames`), which works on
plain tuples for speed; this dataclass is what the rest of the Python code handles.

Wire tuple (both directions), in this order:
    (code, language, version, opaque, flag, remark, ext_fields, body, serialize_type)
    code: int            request or response code
    language: int        LanguageCode (JAVA 0 ... PYTHON 3 ... GO 9 ... RUST 12)
    version: int         sender version (MQVersion ordinal)
    opaque: int          request id (i32); a response carries its request's
    flag: int            bit 0 RESPONSE, bit 1 ONEWAY
    remark: str | None
    ext_fields: dict[str, str] | None
    body: bytes | None
    serialize_type: int  0 JSON, 1 ROCKETMQ (binary header)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final

FLAG_RESPONSE: Final = 1
FLAG_ONEWAY: Final = 2

SERIALIZE_JSON: Final = 0
SERIALIZE_ROCKETMQ: Final = 1

LANGUAGE_JAVA: Final = 0
LANGUAGE_PYTHON: Final = 3
LANGUAGE_GO: Final = 9

#: MQVersion ordinal we announce: V5_3_3 (>= V4_9_4 = 401, so name servers answer with
#: standard JSON).
CURRENT_VERSION: Final = 479

WireTuple = tuple[int, int, int, int, int, str | None, dict[str, str] | None, bytes | None, int]

_opaque = itertools.count(1)


def next_opaque() -> int:
    """A process-wide request id, wrapping within i32."""
    return next(_opaque) & 0x7FFFFFFF


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    language: int = LANGUAGE_PYTHON
    version: int = CURRENT_VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        oneway: bool = False,
        serialize_type: int = SERIALIZE_JSON,
    ) -> RemotingCommand:
        return cls(
            code=code,
            opaque=next_opaque(),
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=dict(ext_fields or {}),
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """The response to this request: same opaque, same serialization (as RocketMQ does)."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
            serialize_type=self.serialize_type,
        )

    def to_wire(self) -> WireTuple:
        return (
            self.code,
            self.language,
            self.version,
            self.opaque,
            self.flag,
            self.remark,
            self.ext_fields or None,
            self.body,
            self.serialize_type,
        )

    @classmethod
    def from_wire(cls, t: WireTuple) -> RemotingCommand:
        code, language, version, opaque, flag, remark, ext, body, ser = t
        return cls(
            code=code,
            opaque=opaque,
            flag=flag,
            remark=remark,
            ext_fields=ext or {},
            body=body,
            language=language,
            version=version,
            serialize_type=ser,
        )
