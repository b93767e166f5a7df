"""Raft messages on the wire: JSON documents (bytes as base64), decoded strictly against the
message dataclasses' annotations. A malformed message raises `RaftWireError`; the driver drops
it (a lost message is something Raft already tolerates)."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import types
from typing import Any, Union, get_args, get_origin, get_type_hints

from rmq_ha.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    Message,
    Snapshot,
    VoteRequest,
    VoteResponse,
)

MESSAGE_TYPES: dict[str, type[Any]] = {
    c.__name__: c
    for c in (
        VoteRequest,
        VoteResponse,
        HeartBeatRequest,
        HeartBeatResponse,
        AppendRequest,
        AppendResponse,
        InstallSnapshotRequest,
        InstallSnapshotResponse,
    )
}


class RaftWireError(ValueError):
    pass


def _to_json(v: Any) -> Any:
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, enum.Enum):
        return v.value
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _to_json(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple | list):
        return [_to_json(x) for x in v]
    return v


def encode(msg: Message) -> bytes:
    doc = _to_json(msg)
    doc["@"] = type(msg).__name__
    return json.dumps(doc, separators=(",", ":")).encode()


def _from_json(hint: Any, v: Any, where: str) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = get_args(hint)
        if v is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _from_json(inner, v, where)
    if origin is tuple:
        item = get_args(hint)[0]
        if not isinstance(v, list):
            raise RaftWireError(f"{where}: expected a list")
        return tuple(_from_json(item, x, where) for x in v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(v)
        except ValueError:
            raise RaftWireError(f"{where}: {v!r} is not a {hint.__name__}") from None
    if hint is bytes:
        if not isinstance(v, str):
            raise RaftWireError(f"{where}: expected base64 text")
        try:
            return base64.b64decode(v, validate=True)
        except ValueError:
            raise RaftWireError(f"{where}: bad base64") from None
    if hint is int:
        if not isinstance(v, int) or isinstance(v, bool):
            raise RaftWireError(f"{where}: expected an integer")
        return v
    if hint is str:
        if not isinstance(v, str):
            raise RaftWireError(f"{where}: expected a string")
        return v
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, v, where)
    raise RaftWireError(f"{where}: unsupported type {hint!r}")


def _dataclass(cls: Any, doc: Any, where: str) -> Any:
    if not isinstance(doc, dict):
        raise RaftWireError(f"{where}: expected an object")
    hints = get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in doc:
            kwargs[f.name] = _from_json(hints[f.name], doc[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING:
            raise RaftWireError(f"{where}: missing {f.name}")
    return cls(**kwargs)


def decode(data: bytes) -> Message:
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise RaftWireError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RaftWireError("expected an object")
    cls = MESSAGE_TYPES.get(doc.pop("@", None))
    if cls is None:
        raise RaftWireError("unknown message type")
    msg: Message = _dataclass(cls, doc, cls.__name__)
    return msg


__all__ = ["MESSAGE_TYPES", "Entry", "RaftWireError", "Snapshot", "decode", "encode"]
