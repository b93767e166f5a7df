"""The typed operation history shared by the bench (`jepsen/`) and the checker (`spark/`).

One operation per JSONL line. A client operation is recorded twice: an ``invoke`` when it
starts and a completion (``ok``, ``fail`` or ``info``) when it ends, both with the same
``process``. ``fail`` means the operation certainly had no effect (``definite`` is true);
``info`` means it may or may not have happened (a timeout, a lost connection). Nemesis
operations are in the same stream, with ``process == NEMESIS_PROCESS`` and type ``info``.

The schema is flat and typed so that Spark can read it with an explicit schema (``SPARK_DDL``)
and nothing needs inference. This module is stdlib-only: the bench and the checker both import
it, and neither drags the other's dependencies in.

Functions (``f``):

* ``send``      value: topic, key, value (unique integer); completion adds queue_id,
                queue_offset, broker, status (SendStatus name; a non-OK status is kept).
* ``poll``      value: topic, group; ``ok`` carries ``messages`` read by this process
                (a consumer in ``group``), in the order delivered.
* ``drain``     like ``poll``, by the final drain (a fresh reader from each queue's minimum
                offset to its maximum); ``group`` is the drain's own group.
* ``offsets``   admin reads: value: topic, queue_id, broker, detail ("max" | "min" | "search");
                ``ok`` adds ``offset``.
* ``metadata``  controller metadata observed: value: broker (group name), master, epoch.
* ``pop``       a pop consumer's POP_MESSAGE: value: topic, group, invisible_ms; ``ok`` carries
                ``messages`` (a message popped again after its invisible time is a new read).
* ``ack``       ACK_MESSAGE of one popped message: value: topic, group, value (null for a
                body that did not parse), broker, queue_id, queue_offset (where it was popped
                from).
* ``change-invisible``  CHANGE_MESSAGE_INVISIBLETIME of one popped message: as ``ack``, plus
                invisible_ms (the new lease, counted from the request).
* ``fault-start`` / ``fault-stop``  nemesis: value: fault (kind), fault_id (pairs start/stop),
                targets (nodes), detail (free text). ``fault-start`` is written as the fault's
                first action begins, ``fault-stop`` once its last undo action finished, so
                [start, stop] holds every moment any part of the fault was in force. A fault
                whose target did not exist (no master, no leader, nothing running) is recorded
                as a start and an immediate stop with no targets and ``detail`` "skipped: ...".

Fault timing (schema version 3): ``fault-stop`` also carries ``applied_ns``, when the start
action had finished on every target (null if it never took effect), and ``healing_ns``, when
the undo actions began (on every target at once); both on the ``time_ns`` clock. So a fault was
being applied over [start, applied_ns], wholly in force over [applied_ns, healing_ns], and being
healed over [healing_ns, stop].

Special sends (schema version 2; every addition is a nullable field or a new ``f``, so a
version-1 history reads unchanged):

* a delayed or timer send carries ``delay_ms``: its delay relative to the send's invoke, so
  the message is due at ``invoke time_ns + delay_ms`` on the history's clock;
* a transactional send carries ``txn``, the transaction's fate (``TXN_STATES``): on the invoke
  the plan (what the producer's check listener answers for it), on the completion what the
  producer decided after its half message was stored. A rolled-back transaction completes
  ``fail`` (definite: it must never be delivered); one that commits completes ``ok``.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

#: 1: the bench's first schema; 2 adds the pop / ack / change-invisible functions and the
#: nullable value fields delay_ms, txn and invisible_ms (a version-1 history is valid in 2);
#: 3 adds the nullable applied_ns and healing_ns of fault-stop (every older history is valid).
SCHEMA_VERSION: Final = 3

NEMESIS_PROCESS: Final = -1

TYPES: Final = ("invoke", "ok", "fail", "info")
CLIENT_FS: Final = (
    "send",
    "poll",
    "drain",
    "offsets",
    "metadata",
    "pop",
    "ack",
    "change-invisible",
)
#: A transaction's fate: committed by the producer, rolled back by it, or left unknown by the
#: local transaction and then resolved by the check listener.
TXN_STATES: Final = ("commit", "rollback", "unknown-commit", "unknown-rollback")
TXN_COMMITTED: Final = ("commit", "unknown-commit")
NEMESIS_FS: Final = ("fault-start", "fault-stop")
FAULT_KINDS: Final = ("partition", "kill", "pause", "clock", "netem", "file")


@dataclass(slots=True)
class Read:
    """One message seen by a poll or drain."""

    topic: str
    queue_id: int
    queue_offset: int
    #: null (or absent) for a body that did not parse, as the Spark reader reads it
    value: int | None = None
    key: str | None = None
    broker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "value": self.value,
            "key": self.key,
            "broker": self.broker,
        }


@dataclass(slots=True)
class Value:
    """Everything an operation carries; fields a function does not use stay None."""

    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    value: int | None = None
    key: str | None = None
    broker: str | None = None
    status: str | None = None
    group: str | None = None
    messages: list[Read] | None = None
    offset: int | None = None
    master: str | None = None
    epoch: int | None = None
    fault: str | None = None
    fault_id: int | None = None
    targets: list[str] | None = None
    detail: str | None = None
    delay_ms: int | None = None
    txn: str | None = None
    invisible_ms: int | None = None
    applied_ns: int | None = None
    healing_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _VALUE_FIELDS:
            v = getattr(self, name)
            if v is None:
                continue
            if name == "messages":
                v = [m.to_json() for m in v]
            out[name] = v
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> Value:
        _check_type(d, "value", "value")
        kw = dict(d)
        if kw.get("messages") is not None:
            kw["messages"] = [Read(**m) for m in kw["messages"]]
        return Value(**kw)


_VALUE_FIELDS: Final = (
    "topic",
    "queue_id",
    "queue_offset",
    "value",
    "key",
    "broker",
    "status",
    "group",
    "messages",
    "offset",
    "master",
    "epoch",
    "fault",
    "fault_id",
    "targets",
    "detail",
    "delay_ms",
    "txn",
    "invisible_ms",
    "applied_ns",
    "healing_ns",
)
#: The value's field names, in schema order (JSON keys, Spark and Arrow struct fields).
VALUE_FIELDS: Final = _VALUE_FIELDS


@dataclass(slots=True)
class Op:
    index: int
    time_ns: int
    process: int
    type: str
    f: str
    value: Value = field(default_factory=Value)
    node: str | None = None
    error: str | None = None
    definite: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "time_ns": self.time_ns,
            "process": self.process,
            "node": self.node,
            "type": self.type,
            "f": self.f,
            "value": self.value.to_json(),
            "error": self.error,
            "definite": self.definite,
        }

    @staticmethod
    def from_json(d: Any) -> Op:
        """One decoded JSON line; every field's type is checked against the schema
        (``OP_FIELDS``), unknown fields are refused, then the op against the rules."""
        if not isinstance(d, dict):
            raise HistoryError(f"not a JSON object: {_show(d)}")
        _check_fields(d, OP_FIELDS, "")
        for name in REQUIRED_OP_FIELDS:
            if d.get(name) is None:
                raise HistoryError(f"{name} is missing")
        raw = d.get("value")
        kw = dict(raw) if raw else {}
        if kw.get("messages") is not None:
            kw["messages"] = [Read(**m) for m in kw["messages"]]
        op = Op(
            index=d["index"],
            time_ns=d["time_ns"],
            process=d["process"],
            node=d.get("node"),
            type=d["type"],
            f=d["f"],
            value=Value(**kw),
            error=d.get("error"),
            definite=d.get("definite"),
        )
        validate(op)
        return op


class HistoryError(ValueError):
    """A history line that does not follow the schema."""


# ---- the rules, as data --------------------------------------------------------------------
# Both readers apply exactly these: `read` / `validate` here, and the checker's Spark
# validation (rmq_check.validate), which builds its expressions from the same tables; a test
# (tests/spark/test_check_validate.py) runs every rule through both.

#: SendStatus names (rmq_ha.client.message.SendStatus; a test keeps them equal).
SEND_STATUSES: Final = (
    "SEND_OK",
    "FLUSH_DISK_TIMEOUT",
    "FLUSH_SLAVE_TIMEOUT",
    "SLAVE_NOT_AVAILABLE",
)
OFFSET_DETAILS: Final = ("max", "min", "search")
#: Field types, in schema order: "int" (32-bit), "bigint" (64-bit), "string", "boolean",
#: "array<string>", "array<read>" (READ_FIELDS), "value" (VALUE_FIELD_TYPES).
READ_FIELDS: Final = (
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "bigint"),
    ("value", "bigint"),
    ("key", "string"),
    ("broker", "string"),
)
VALUE_FIELD_TYPES: Final = (
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "bigint"),
    ("value", "bigint"),
    ("key", "string"),
    ("broker", "string"),
    ("status", "string"),
    ("group", "string"),
    ("messages", "array<read>"),
    ("offset", "bigint"),
    ("master", "string"),
    ("epoch", "int"),
    ("fault", "string"),
    ("fault_id", "int"),
    ("targets", "array<string>"),
    ("detail", "string"),
    ("delay_ms", "bigint"),
    ("txn", "string"),
    ("invisible_ms", "bigint"),
    ("applied_ns", "bigint"),
    ("healing_ns", "bigint"),
)
OP_FIELDS: Final = (
    ("index", "bigint"),
    ("time_ns", "bigint"),
    ("process", "int"),
    ("node", "string"),
    ("type", "string"),
    ("f", "string"),
    ("value", "value"),
    ("error", "string"),
    ("definite", "boolean"),
)
assert tuple(n for n, _ in VALUE_FIELD_TYPES) == VALUE_FIELDS
#: Fields every line carries (not null).
REQUIRED_OP_FIELDS: Final = ("index", "time_ns", "process", "type", "f")
#: Fields every message of a poll / drain / pop carries.
REQUIRED_READ_FIELDS: Final = ("topic", "queue_id", "queue_offset")
#: value fields an op must carry, per f and type ("*": every type of that f).
REQUIRED_VALUE_FIELDS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("send", "*"): ("value",),
    ("poll", "ok"): ("messages",),
    ("drain", "ok"): ("messages",),
    ("pop", "ok"): ("messages",),
    ("offsets", "*"): ("topic", "queue_id", "detail"),
    ("offsets", "ok"): ("offset",),
    ("metadata", "*"): ("broker",),
    ("fault-start", "*"): ("fault", "fault_id"),
    ("fault-stop", "*"): ("fault", "fault_id"),
}
#: Allowed values of value fields, when present: (f or "*", field) -> values.
VALUE_ENUMS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("*", "txn"): TXN_STATES,
    ("*", "fault"): FAULT_KINDS,
    ("send", "status"): SEND_STATUSES,
    ("offsets", "detail"): OFFSET_DETAILS,
}
#: value fields only some functions may carry.
ONLY_ON: Final[dict[str, tuple[str, ...]]] = {
    "applied_ns": ("fault-stop",),
    "healing_ns": ("fault-stop",),
}
#: Integer fields that may not be negative (process: -1 is the nemesis, checked apart).
NON_NEGATIVE: Final = ("index", "time_ns")
#: The checker orders deliveries by (index, place in the op) packed into one 64-bit number:
#: an index below 2**43 and at most 2**20 messages per op keep that exact.
MAX_INDEX: Final = (1 << 43) - 1
MAX_MESSAGES: Final = 1 << 20
_INT_RANGE: Final = {"int": 1 << 31, "bigint": 1 << 63}


def _show(x: Any) -> str:
    s = json.dumps(x) if not isinstance(x, str) else repr(x)
    return s if len(s) <= 60 else s[:57] + "..."


def _check_fields(d: dict[str, Any], fields: tuple[tuple[str, str], ...], where: str) -> None:
    known = dict(fields)
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise HistoryError(f"{where.rstrip('.') or 'the op'} has unknown fields {unknown}")
    for name, t in fields:
        _check_type(d.get(name), t, where + name)


def _check_type(x: Any, t: str, name: str) -> None:
    if x is None:
        return
    if t in _INT_RANGE:
        lim = _INT_RANGE[t]
        if isinstance(x, bool) or not isinstance(x, int) or not -lim <= x < lim:
            bits = "" if t == "bigint" else " (32-bit)"
            raise HistoryError(f"{name}: expected an integer{bits}, got {_show(x)}")
    elif t == "string":
        if not isinstance(x, str):
            raise HistoryError(f"{name}: expected a string, got {_show(x)}")
    elif t == "boolean":
        if not isinstance(x, bool):
            raise HistoryError(f"{name}: expected true or false, got {_show(x)}")
    elif t == "array<string>":
        if not isinstance(x, list) or not all(isinstance(e, str) for e in x):
            raise HistoryError(f"{name}: expected a list of strings, got {_show(x)}")
    elif t == "array<read>":
        if not isinstance(x, list):
            raise HistoryError(f"{name}: expected a list of messages, got {_show(x)}")
        for i, m in enumerate(x):
            if not isinstance(m, dict):
                raise HistoryError(f"{name}[{i}]: expected a message object, got {_show(m)}")
            _check_fields(m, READ_FIELDS, f"{name}[{i}].")
            for r in REQUIRED_READ_FIELDS:
                if m.get(r) is None:
                    raise HistoryError(f"{name}[{i}].{r} is missing")
    elif t == "value":
        if not isinstance(x, dict):
            raise HistoryError(f"{name}: expected an object, got {_show(x)}")
        _check_fields(x, VALUE_FIELD_TYPES, "value.")
    else:  # pragma: no cover - the tables above use only these
        raise AssertionError(t)


def validate(op: Op) -> None:
    """Raise HistoryError naming what is wrong with ``op`` (the rules above)."""
    pre = f"op {op.index}: "
    if op.type not in TYPES:
        raise HistoryError(f"{pre}type {op.type!r} is not one of {TYPES}")
    for name in NON_NEGATIVE:
        if getattr(op, name) < 0:
            raise HistoryError(f"{pre}{name} {getattr(op, name)} is negative")
    if op.index > MAX_INDEX:
        raise HistoryError(f"{pre}index {op.index} is above {MAX_INDEX} (2^43 - 1)")
    if op.value.messages is not None and len(op.value.messages) > MAX_MESSAGES:
        raise HistoryError(
            f"{pre}value.messages holds {len(op.value.messages)} messages, "
            f"more than {MAX_MESSAGES} in one op"
        )
    if op.process == NEMESIS_PROCESS:
        if op.f not in NEMESIS_FS:
            raise HistoryError(f"{pre}nemesis f {op.f!r} is not one of {NEMESIS_FS}")
        if op.type != "info":
            raise HistoryError(f"{pre}nemesis type {op.type!r} is not 'info'")
    elif op.process < 0:
        raise HistoryError(f"{pre}process {op.process} is negative (only the nemesis is -1)")
    elif op.f not in CLIENT_FS:
        raise HistoryError(f"{pre}f {op.f!r} is not one of {CLIENT_FS}")
    for name, fs in ONLY_ON.items():
        if getattr(op.value, name) is not None and op.f not in fs:
            raise HistoryError(f"{pre}only {' / '.join(fs)} carries {name}")
    if op.type == "fail" and op.definite is False:
        raise HistoryError(f"{pre}a fail is definite by definition")
    if op.type == "info" and op.definite is True:
        raise HistoryError(
            f"{pre}an info is indefinite by definition (a definite failure is a fail)"
        )
    for (f, t), names in REQUIRED_VALUE_FIELDS.items():
        if f == op.f and t in ("*", op.type):
            for name in names:
                if getattr(op.value, name) is None:
                    raise HistoryError(f"{pre}{op.f} {op.type} without value.{name}")
    for (f, name), allowed in VALUE_ENUMS.items():
        x = getattr(op.value, name)
        if f in ("*", op.f) and x is not None and x not in allowed:
            raise HistoryError(f"{pre}{name} {x!r} is not one of {allowed}")


class Pairing:
    """Invoke / completion pairing per client process, fed in file order: a process runs one
    operation at a time, so its ops alternate invoke, completion (same f), ... (a last invoke
    may stay open: the op never completed), with increasing index."""

    def __init__(self) -> None:
        self._last: dict[int, Op] = {}

    def feed(self, op: Op) -> None:
        if op.process == NEMESIS_PROCESS:
            return
        prev = self._last.get(op.process)
        self._last[op.process] = op
        why = pairing_error(
            op.type,
            op.f,
            op.index,
            None if prev is None else (prev.type, prev.f, prev.index),
            (op.value.value, op.value.topic),
            None if prev is None else (prev.value.value, prev.value.topic),
            op.time_ns,
            None if prev is None else prev.time_ns,
        )
        if why:
            raise HistoryError(f"op {op.index}: process {op.process}: {why}")


class Seen:
    """Integers seen so far, as sorted disjoint runs [lo, hi]: a history's indexes (dense)
    and its send values (runs per producer) take a few runs, not one entry each."""

    def __init__(self) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []

    def add(self, x: int) -> bool:
        """Adds ``x``; False if it was already there."""
        lo, hi = self._lo, self._hi
        if hi and x == hi[-1] + 1:  # the common case: the next of the last run
            hi[-1] = x
            return True
        i = bisect.bisect_right(lo, x) - 1  # the run starting at or before x
        if i >= 0 and x <= hi[i]:
            return False
        joins_left = i >= 0 and hi[i] + 1 == x
        joins_right = i + 1 < len(lo) and lo[i + 1] == x + 1
        if joins_left and joins_right:
            hi[i] = hi[i + 1]
            del lo[i + 1], hi[i + 1]
        elif joins_left:
            hi[i] = x
        elif joins_right:
            lo[i + 1] = x
        else:
            lo.insert(i + 1, x)
            hi.insert(i + 1, x)
        return True


class Unique:
    """History-wide uniqueness (both readers apply it): no index twice, and no value sent by
    two send invokes (a run's values are unique)."""

    def __init__(self) -> None:
        self._index = Seen()
        self._sent = Seen()

    def feed(self, op: Op) -> None:
        if not self._index.add(op.index):
            raise HistoryError(f"op {op.index}: index {op.index} appears twice in the history")
        v = op.value.value
        if op.f == "send" and op.type == "invoke" and v is not None and not self._sent.add(v):
            raise HistoryError(f"op {op.index}: value {v} is sent twice (values are unique)")


#: What a completion must say as its invoke did, when both say it (value.value, value.topic).
PAIRED_VALUE_FIELDS: Final = ("value", "topic")


def pairing_error(
    type_: str,
    f: str,
    index: int,
    prev: tuple[str, str, int] | None,
    says: tuple[Any, ...] = (),
    prev_says: tuple[Any, ...] | None = None,
    time_ns: int | None = None,
    prev_time_ns: int | None = None,
) -> str:
    """What is wrong with an op of a client process given the previous op of that process
    (type, f, index), or "" (the rule both readers apply). ``says`` / ``prev_says``: the two
    ops' ``PAIRED_VALUE_FIELDS``; a completion naming another value or topic than its invoke
    would pair one send's invoke with another's outcome. ``time_ns`` / ``prev_time_ns``: a
    completion before its own invoke is a negative latency, on a clock that is not one (a
    delayed message's due time and a fault window are judged on it). An invoke earlier than
    the process's previous completion is accepted: it changes no pairing and no latency."""
    if prev is not None and prev[2] >= index:
        return f"index {index} does not follow the process's previous op (index {prev[2]})"
    if prev is not None and type_ != "invoke" and prev[0] == "invoke":
        if time_ns is not None and prev_time_ns is not None and time_ns < prev_time_ns:
            return (
                f"{type_} of {f} at time_ns {time_ns} is before its invoke (index {prev[2]},"
                f" time_ns {prev_time_ns})"
            )
    if type_ == "invoke":
        if prev is not None and prev[0] == "invoke":
            return f"invoke while its {prev[1]} invoke (index {prev[2]}) has not completed"
        return ""
    if prev is None or prev[0] != "invoke":
        return f"{type_} of {f} without an invoke"
    if prev[1] != f:
        return f"{type_} of {f} completes a {prev[1]} invoke (index {prev[2]})"
    for name, mine, theirs in zip(PAIRED_VALUE_FIELDS, says, prev_says or (), strict=False):
        if mine is not None and theirs is not None and mine != theirs:
            return f"{type_} of {f} names another value.{name} than its invoke (index {prev[2]})"
    return ""


def dumps(op: Op) -> str:
    return json.dumps(op.to_json(), separators=(",", ":"))


def write(out: IO[str], ops: Iterable[Op]) -> int:
    n = 0
    for op in ops:
        out.write(dumps(op))
        out.write("\n")
        n += 1
    return n


class DuplicateField(ValueError):
    """A JSON object naming one field twice (``json.loads`` would keep the last silently)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        twice = sorted(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise DuplicateField(f"has a field twice {twice}: ambiguous JSON")
    return d


def loads(line: str) -> Any:
    """One history line as JSON, refusing an object that names a field twice (``json`` would
    take the last, Spark's reader the last or the first: the line is ambiguous)."""
    return json.loads(line, object_pairs_hook=_no_duplicates)


#: What a blank line may hold (skipped by both readers): ASCII whitespace only, the same set in
#: Spark's reader (rmq_check.load); another character alone on a line is not JSON.
BLANK: Final = " \t\n\r\f\v"


def is_utf8(line: str) -> bool:
    """Whether a line read with errors="surrogateescape" was valid UTF-8 (an invalid byte
    becomes a lone surrogate, which does not encode)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read(path: str | Path) -> Iterator[Op]:
    """Parse a JSONL history, validating every line (its fields' types, the rules above) and
    the invoke / completion pairing of each process; errors name the file and line number."""
    pairing = Pairing()
    unique = Unique()
    # utf-8-sig: a byte-order mark some editors write is skipped (Spark's reader skips it too);
    # bytes that are not UTF-8 are kept as surrogates, so the line can be refused by number
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip(BLANK):
                continue
            try:
                if not is_utf8(line):
                    raise HistoryError("is not valid UTF-8 text")
                try:
                    d = loads(line)
                except DuplicateField as e:
                    raise HistoryError(str(e)) from e
                except ValueError as e:
                    raise HistoryError(f"not JSON ({e})") from e
                op = Op.from_json(d)
                pairing.feed(op)
                unique.feed(op)
            except (HistoryError, TypeError) as e:
                raise HistoryError(f"{path}:{lineno}: {e}") from e
            yield op


def _ddl(t: str) -> str:
    if t == "array<read>":
        return "array<struct<" + ",".join(f"{n}:{_ddl(x)}" for n, x in READ_FIELDS) + ">>"
    if t == "value":
        return "struct<" + ",".join(f"{n}:{_ddl(x)}" for n, x in VALUE_FIELD_TYPES) + ">"
    return t


#: The explicit Spark schema of one JSONL line (``DataFrameReader.schema(SPARK_DDL)``), from
#: the field tables above.
SPARK_DDL: Final = ", ".join(f"{n} {_ddl(t)}" for n, t in OP_FIELDS)


def arrow_schema() -> Any:
    """The same schema as Arrow types, for Parquet writers (the bench's export, the checker's
    synthetic generator). Imports pyarrow on call: rmq_ha itself does not depend on it."""
    import pyarrow as pa  # type: ignore[import-untyped]

    read = pa.struct(
        [
            ("topic", pa.string()),
            ("queue_id", pa.int32()),
            ("queue_offset", pa.int64()),
            ("value", pa.int64()),
            ("key", pa.string()),
            ("broker", pa.string()),
        ]
    )
    value = pa.struct(
        [
            ("topic", pa.string()),
            ("queue_id", pa.int32()),
            ("queue_offset", pa.int64()),
            ("value", pa.int64()),
            ("key", pa.string()),
            ("broker", pa.string()),
            ("status", pa.string()),
            ("group", pa.string()),
            ("messages", pa.list_(read)),
            ("offset", pa.int64()),
            ("master", pa.string()),
            ("epoch", pa.int32()),
            ("fault", pa.string()),
            ("fault_id", pa.int32()),
            ("targets", pa.list_(pa.string())),
            ("detail", pa.string()),
            ("delay_ms", pa.int64()),
            ("txn", pa.string()),
            ("invisible_ms", pa.int64()),
            ("applied_ns", pa.int64()),
            ("healing_ns", pa.int64()),
        ]
    )
    return pa.schema(
        [
            ("index", pa.int64()),
            ("time_ns", pa.int64()),
            ("process", pa.int32()),
            ("node", pa.string()),
            ("type", pa.string()),
            ("f", pa.string()),
            ("value", value),
            ("error", pa.string()),
            ("definite", pa.bool_()),
        ]
    )
