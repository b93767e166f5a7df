"""Strict JSON helpers shared by the event codec and the snapshot codec.

Both formats end up in the Raft log or a Raft snapshot, so a decoder must refuse anything it
did not write rather than guess: a wrong type is an error, never a coercion.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


class DecodeError(ValueError):
    """Bytes that are not a well-formed controller event or snapshot."""


def dumps(obj: Any) -> bytes:
    # Sorted keys and fixed separators: equal values always encode to equal bytes.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DecodeError(f"not JSON: {exc}") from exc


def as_object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise DecodeError(f"{what}: expected an object")
    return value


def exact_keys(obj: Mapping[str, Any], keys: Iterable[str], what: str) -> None:
    expected = set(keys)
    if set(obj) != expected:
        raise DecodeError(f"{what}: keys {sorted(obj)} != {sorted(expected)}")


def get_int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    # bool is an int subclass in Python; a true/false in an id field is corruption.
    if not isinstance(value, int) or isinstance(value, bool):
        raise DecodeError(f"{key}: expected an integer")
    return value


def get_opt_int(obj: Mapping[str, Any], key: str) -> int | None:
    return None if obj.get(key) is None else get_int(obj, key)


def get_str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise DecodeError(f"{key}: expected a string")
    return value


def get_bool(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key)
    if not isinstance(value, bool):
        raise DecodeError(f"{key}: expected a boolean")
    return value


def get_int_set(obj: Mapping[str, Any], key: str) -> frozenset[int]:
    value = obj.get(key)
    if not isinstance(value, list):
        raise DecodeError(f"{key}: expected a list")
    ids = frozenset(get_int({"v": v}, "v") for v in value)
    if len(ids) != len(value):
        raise DecodeError(f"{key}: duplicate ids")
    return ids


def get_opt_int_set(obj: Mapping[str, Any], key: str) -> frozenset[int] | None:
    return None if obj.get(key) is None else get_int_set(obj, key)
