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

import json
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
    value: int | None
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
        unknown = set(d) - set(_VALUE_FIELDS)
        if unknown:
            raise HistoryError(f"value has unknown fields {sorted(unknown)}")
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
    def from_json(d: dict[str, Any]) -> Op:
        op = Op(
            index=int(d["index"]),
            time_ns=int(d["time_ns"]),
            process=int(d["process"]),
            node=d.get("node"),
            type=str(d["type"]),
            f=str(d["f"]),
            value=Value.from_json(d.get("value") or {}),
            error=d.get("error"),
            definite=d.get("definite"),
        )
        validate(op)
        return op


class HistoryError(ValueError):
    """A history line that does not follow the schema."""


def validate(op: Op) -> None:
    """Raise HistoryError naming what is wrong with ``op``."""
    if op.type not in TYPES:
        raise HistoryError(f"op {op.index}: type {op.type!r} is not one of {TYPES}")
    if op.process == NEMESIS_PROCESS:
        if op.f not in NEMESIS_FS:
            raise HistoryError(f"op {op.index}: nemesis f {op.f!r} is not one of {NEMESIS_FS}")
        if op.value.fault not in FAULT_KINDS:
            raise HistoryError(f"op {op.index}: fault {op.value.fault!r} not in {FAULT_KINDS}")
        if op.value.fault_id is None:
            raise HistoryError(f"op {op.index}: nemesis op without fault_id")
        if op.f != "fault-stop":
            _no_fault_times(op)
        return
    _no_fault_times(op)
    if op.f not in CLIENT_FS:
        raise HistoryError(f"op {op.index}: f {op.f!r} is not one of {CLIENT_FS}")
    if op.type == "fail" and op.definite is False:
        raise HistoryError(f"op {op.index}: a fail is definite by definition")
    if op.f == "send" and op.value.value is None:
        raise HistoryError(f"op {op.index}: send without a value")
    if op.value.txn is not None and op.value.txn not in TXN_STATES:
        raise HistoryError(f"op {op.index}: txn {op.value.txn!r} is not one of {TXN_STATES}")


def _no_fault_times(op: Op) -> None:
    if op.value.applied_ns is not None or op.value.healing_ns is not None:
        raise HistoryError(f"op {op.index}: only fault-stop carries applied_ns / healing_ns")


def dumps(op: Op) -> str:
    return json.dumps(op.to_json(), separators=(",", ":"))


def write(out: IO[str], ops: Iterable[Op]) -> int:
    n = 0
    for op in ops:
        out.write(dumps(op))
        out.write("\n")
        n += 1
    return n


def read(path: str | Path) -> Iterator[Op]:
    """Parse a JSONL history, validating every line; errors name the line number."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield Op.from_json(json.loads(line))
            except (KeyError, TypeError, ValueError) as e:
                raise HistoryError(f"{path}:{lineno}: {e}") from e


_READ_DDL: Final = (
    "struct<topic:string,queue_id:int,queue_offset:bigint,value:bigint,key:string,broker:string>"
)

#: The explicit Spark schema of one JSONL line (``DataFrameReader.schema(SPARK_DDL)``).
SPARK_DDL: Final = (
    "index bigint, time_ns bigint, process int, node string, type string, f string, "
    "value struct<"
    "topic:string,queue_id:int,queue_offset:bigint,value:bigint,key:string,broker:string,"
    "status:string,group:string,"
    f"messages:array<{_READ_DDL}>,"
    "offset:bigint,master:string,epoch:int,fault:string,fault_id:int,"
    "targets:array<string>,detail:string,"
    "delay_ms:bigint,txn:string,invisible_ms:bigint,applied_ns:bigint,healing_ns:bigint>, "
    "error string, definite boolean"
)


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
