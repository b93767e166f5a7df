"""Declarative custom headers: dataclasses mapped to and from `extFields` (dict[str, str]).

RocketMQ flattens a request's "custom header" object into `extFields`: one entry per non-null
field, keyed by the Java field name, valued by `toString()`. Decoding parses each entry by the
field's Java type and fails when a `@CFNotNull` field is absent.

Here a header is a keyword-only dataclass deriving from `CommandHeader`:

* the wire name is the camelCase form of the attribute name, unless the field's metadata
  says otherwise (`field(metadata=wire("a"))`);
* the wire type comes from the annotation: `str`, `int` (a Java long), `I32` (a Java int),
  `bool`, `float` (a Java double), each optionally `| None`;
* a field is required when it has no default, or when its metadata says `required=True`
  (RocketMQ's `@CFNotNull` on a field that also has a Java default).

Parsing follows Java where that is harmless and is strict where Java silently drops data:
booleans are Java-lenient (only "true", any case, is True); integers must be plain decimal
within the Java type's range, else `MalformedHeaderField`.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ClassVar,
    Final,
    Self,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from rmq_ha.errors import RmqHaError


class _Int32:
    """Marker for `Annotated[int, ...]`: a Java `int`/`Integer` field."""

    def __repr__(self) -> str:
        return "I32"


_INT32_MARK: Final = _Int32()

#: A Java `int`/`Integer` header field (a plain `int` annotation is a Java `long`).
I32 = Annotated[int, _INT32_MARK]

_WIRE_KEY: Final = "rmq_wire_name"
_REQUIRED_KEY: Final = "rmq_required"


def wire(name: str | None = None, *, required: bool = False) -> dict[str, Any]:
    """Field metadata: `field(metadata=wire("a"))` renames, `wire(required=True)` requires."""
    meta: dict[str, Any] = {}
    if name is not None:
        meta[_WIRE_KEY] = name
    if required:
        meta[_REQUIRED_KEY] = True
    return meta


class HeaderError(RmqHaError, ValueError):
    """A custom header could not be decoded from extFields. Nothing was executed."""

    definite = True

    def __init__(self, message: str, header: str, field: str) -> None:
        super().__init__(message)
        self.header = header
        self.field = field


class MissingHeaderField(HeaderError):
    """A required (`@CFNotNull`) field is absent. `field` is its wire name."""

    def __init__(self, header: str, field: str) -> None:
        super().__init__(f"{header}: the custom field <{field}> is null", header, field)


class MalformedHeaderField(HeaderError):
    """A present field does not parse as its type (or is out of range)."""

    def __init__(self, header: str, field: str, value: str, expected: str) -> None:
        super().__init__(
            f"{header}: field <{field}> = {value!r} is not a valid {expected}", header, field
        )
        self.value = value
        self.expected = expected


_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE: Final = re.compile(
    r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?"
)
_I32_RANGE: Final = (-(2**31), 2**31 - 1)
_I64_RANGE: Final = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    attr: str
    wire: str
    kind: str  # "str" | "i32" | "i64" | "bool" | "float"
    required: bool


def camel(name: str) -> str:
    """`producer_group` -> `producerGroup` (the default wire name)."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _kind_of(hint: Any, where: str) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{where}: unsupported union {hint!r}")
        return _kind_of(args[0], where)
    if origin is Annotated:
        base, *marks = get_args(hint)
        if base is int and _INT32_MARK in marks:
            return "i32"
        return _kind_of(base, where)
    kinds: dict[Any, str] = {str: "str", int: "i64", bool: "bool", float: "float"}
    if hint in kinds:
        return kinds[hint]
    raise TypeError(f"{where}: unsupported header field type {hint!r}")


_SPECS: dict[type, tuple[FieldSpec, ...]] = {}


def header_fields(cls: type) -> tuple[FieldSpec, ...]:
    """The wire fields of a header class, computed once per class."""
    specs = _SPECS.get(cls)
    if specs is None:
        hints = get_type_hints(cls, include_extras=True)
        out = []
        for f in dataclasses.fields(cls):
            no_default = (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            out.append(
                FieldSpec(
                    attr=f.name,
                    wire=f.metadata.get(_WIRE_KEY, camel(f.name)),
                    kind=_kind_of(hints[f.name], f"{cls.__name__}.{f.name}"),
                    required=no_default or bool(f.metadata.get(_REQUIRED_KEY, False)),
                )
            )
        specs = tuple(out)
        wires = [s.wire for s in specs]
        if len(set(wires)) != len(wires):
            raise TypeError(f"{cls.__name__}: duplicate wire names {wires}")
        _SPECS[cls] = specs
    return specs


def _parse(header: str, spec: FieldSpec, value: str) -> object:
    kind = spec.kind
    if kind == "str":
        return value
    if kind == "bool":
        return value.lower() == "true"  # Java Boolean.parseBoolean
    if kind in ("i32", "i64"):
        lo, hi = _I32_RANGE if kind == "i32" else _I64_RANGE
        if _INT_RE.fullmatch(value) is None or not lo <= int(value) <= hi:
            expected = "Java int" if kind == "i32" else "Java long"
            raise MalformedHeaderField(header, spec.wire, value, expected)
        return int(value)
    if _FLOAT_RE.fullmatch(value) is None:
        raise MalformedHeaderField(header, spec.wire, value, "Java double")
    return float(value.rstrip("fFdD"))


def _format(kind: str, value: object) -> str:
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float":
        f = float(value)  # type: ignore[arg-type]
        # Java's Double.toString: "NaN", "Infinity", "1.0".
        if f != f:
            return "NaN"
        if f in (float("inf"), float("-inf")):
            return "Infinity" if f > 0 else "-Infinity"
        return repr(f)
    return str(value)


class CommandHeader:
    """Base of every custom header. Subclasses are `@dataclass(kw_only=True, slots=True)`."""

    __slots__ = ()

    #: The request or response code this header travels with (documentation and routing).
    CODES: ClassVar[tuple[int, ...]] = ()

    @classmethod
    def from_ext(cls, ext: Mapping[str, str] | None) -> Self:
        """Decode from extFields. Unknown keys are ignored, as RocketMQ does."""
        ext = ext or {}
        kwargs: dict[str, object] = {}
        for spec in header_fields(cls):
            value = ext.get(spec.wire)
            if value is None:
                if spec.required:
                    raise MissingHeaderField(cls.__name__, spec.wire)
                continue
            kwargs[spec.attr] = _parse(cls.__name__, spec, value)
        factory: Callable[..., Self] = cls
        return factory(**kwargs)

    def to_ext(self) -> dict[str, str]:
        """Encode to extFields; None-valued fields are left out, as RocketMQ does."""
        out: dict[str, str] = {}
        for spec in header_fields(type(self)):
            value = getattr(self, spec.attr)
            if value is not None:
                out[spec.wire] = _format(spec.kind, value)
        return out
