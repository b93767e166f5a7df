"""Declarative JSON bodies: dataclasses mapped to and from RocketMQ's JSON shapes.

A body model is a dataclass deriving from `JsonModel` whose fields all have defaults. The JSON
key is the camelCase attribute name unless `field(metadata=json_name("clientID"))` says
otherwise. Supported annotations: `str`, `int`, `bool`, `float`, `X | None`, `list[X]`,
`set[X]`, `frozenset[X]`, `dict[str, X]`, `dict[int, X]` (Java Long/Integer keys), nested
`JsonModel` subclasses, and `Any` (raw JSON, passed through).

Emitting follows fastjson's defaults: None fields are left out, sets become arrays (sorted here,
for stable output), integer map keys become strings, keys are sorted.

Parsing is lenient like fastjson: unknown keys are ignored, absent or null fields keep their
defaults, numeric strings are accepted for numbers, "true"/"false" and 0/1 for booleans, and
bare numeric map keys are accepted (see `json_compat`). A value of the wrong shape raises
`BodyDecodeError` naming its JSON path.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Self, Union, get_args, get_origin, get_type_hints

from rmq_ha.protocol.json_compat import BodyDecodeError, dumps, loads

_JSON_KEY: Final = "rmq_json_name"
_ALIASES_KEY: Final = "rmq_json_aliases"
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")


def json_name(name: str | None = None, *, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    """Field metadata: the JSON key (`json_name("clientID")`) and other keys accepted when
    parsing (`json_name(aliases=("topicSynFlag",))`)."""
    meta: dict[str, Any] = {_ALIASES_KEY: aliases}
    if name is not None:
        meta[_JSON_KEY] = name
    return meta


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


Encoder = Callable[[Any], Any]
Decoder = Callable[[Any, str], Any]


@dataclass(frozen=True, slots=True)
class _Codec:
    encode: Encoder
    decode: Decoder


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, JsonModel)


def _dec_str(v: Any, path: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    raise BodyDecodeError(f"expected a string, got {type(v).__name__}", path)


def _dec_int(v: Any, path: str) -> int:
    if isinstance(v, bool):
        raise BodyDecodeError("expected an integer, got a boolean", path)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and _INT_RE.fullmatch(v.strip()):
        return int(v)
    raise BodyDecodeError(f"expected an integer, got {v!r}", path)


def _dec_bool(v: Any, path: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise BodyDecodeError(f"expected a boolean, got {v!r}", path)


def _dec_float(v: Any, path: str) -> float:
    if isinstance(v, bool):
        raise BodyDecodeError("expected a number, got a boolean", path)
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise BodyDecodeError(f"expected a number, got {v!r}", path)


def _same(v: Any) -> Any:
    return v


def _raw(v: Any, path: str) -> Any:
    return v


_SCALARS: Final[dict[Any, _Codec]] = {
    str: _Codec(_same, _dec_str),
    int: _Codec(_same, _dec_int),
    bool: _Codec(_same, _dec_bool),
    float: _Codec(_same, _dec_float),
    Any: _Codec(_same, _raw),
}


def _sort_key(encoded: Any) -> str:
    return json.dumps(encoded, sort_keys=True)


def _codec_for(tp: Any, where: str) -> _Codec:
    if tp in _SCALARS:
        return _SCALARS[tp]
    if _is_model(tp):
        model: type[JsonModel] = tp
        return _Codec(lambda v: v.to_obj(), model.from_obj)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"{where}: unsupported union {tp!r}")
        inner = _codec_for(rest[0], where)
        return _Codec(
            lambda v: None if v is None else inner.encode(v),
            lambda v, p: None if v is None else inner.decode(v, p),
        )
    if origin in (list, set, frozenset):
        item = _codec_for(args[0], where)
        ctor: Callable[[Any], Any] = origin

        def enc_seq(v: Any) -> Any:
            items = [item.encode(x) for x in v]
            return items if origin is list else sorted(items, key=_sort_key)

        def dec_seq(v: Any, path: str) -> Any:
            if not isinstance(v, list):
                raise BodyDecodeError(f"expected an array, got {type(v).__name__}", path)
            return ctor(item.decode(x, f"{path}[{i}]") for i, x in enumerate(v))

        return _Codec(enc_seq, dec_seq)
    if origin is dict:
        key_tp, val_tp = args
        if key_tp not in (str, int):
            raise TypeError(f"{where}: map keys must be str or int, not {key_tp!r}")
        val = _codec_for(val_tp, where)
        int_keys = key_tp is int

        def enc_map(v: Any) -> Any:
            return {str(k): val.encode(x) for k, x in v.items()}

        def dec_map(v: Any, path: str) -> Any:
            if not isinstance(v, dict):
                raise BodyDecodeError(f"expected an object, got {type(v).__name__}", path)
            out: dict[Any, Any] = {}
            for k, x in v.items():
                key: Any = _dec_int(k, f"{path}<key {k!r}>") if int_keys else k
                out[key] = val.decode(x, f"{path}.{k}")
            return out

        return _Codec(enc_map, dec_map)
    raise TypeError(f"{where}: unsupported body field type {tp!r}")


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    attr: str
    key: str
    aliases: tuple[str, ...]
    codec: _Codec


_SPECS: dict[type, tuple[_FieldSpec, ...]] = {}


def _specs(cls: type) -> tuple[_FieldSpec, ...]:
    specs = _SPECS.get(cls)
    if specs is None:
        hints = get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{f.name}: body fields need defaults")
            where = f"{cls.__name__}.{f.name}"
            key = f.metadata.get(_JSON_KEY, _camel(f.name))
            aliases = f.metadata.get(_ALIASES_KEY, ())
            out.append(_FieldSpec(f.name, key, aliases, _codec_for(hints[f.name], where)))
        specs = tuple(out)
        _SPECS[cls] = specs
    return specs


class JsonModel:
    """Base of every JSON body model (a dataclass whose fields all have defaults)."""

    __slots__ = ()

    def to_obj(self) -> dict[str, Any]:
        """The JSON-ready dict (None fields omitted)."""
        out: dict[str, Any] = {}
        for spec in _specs(type(self)):
            value = getattr(self, spec.attr)
            if value is not None:
                out[spec.key] = spec.codec.encode(value)
        return out

    def to_json(self) -> bytes:
        """Standard JSON bytes, ready to be a command body."""
        return dumps(self.to_obj())

    @classmethod
    def from_obj(cls, obj: Any, path: str = "$") -> Self:
        if not isinstance(obj, dict):
            raise BodyDecodeError(f"expected an object, got {type(obj).__name__}", path)
        kwargs: dict[str, Any] = {}
        for spec in _specs(cls):
            key, value = spec.key, obj.get(spec.key)
            for alias in spec.aliases:
                if value is not None:
                    break
                key, value = alias, obj.get(alias)
            if value is not None:
                kwargs[spec.attr] = spec.codec.decode(value, f"{path}.{key}")
        factory: Callable[..., Self] = cls
        return factory(**kwargs)

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str | None) -> Self:
        """Parse a body leniently; an empty or absent body gives the defaults."""
        if data is None or len(data) == 0:
            return cls.from_obj({})
        return cls.from_obj(loads(data))


def json_keys(cls: type[JsonModel]) -> tuple[str, ...]:
    """The JSON keys a model emits, in declaration order (used by gen_docs and tests)."""
    return tuple(spec.key for spec in _specs(cls))
