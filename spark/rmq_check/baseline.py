"""Single-process pure-Python lost/duplicate analysis: the benchmark's baseline.

The same definitions as the Spark ``lost`` and ``duplicated`` analyses (acknowledged SEND_OK
sends never read, or read and then missing from the final drain; values at two positions or
delivered twice to one consumer group), in one pass over the history with dicts and sets, as
OpenChaos's QueueChecker or Jepsen's total-queue would do it. Reads Parquet batch by batch
(pyarrow, columns converted to Python objects) or JSONL line by line; the time to turn the
file into Python objects is part of the baseline, as reading the file is part of the Spark
figure. Parquet leaf columns are converted by pyarrow, so what is measured is the Python
analysis loop, not row decoding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

COLUMNS = ["type", "f", "process", "value"]

Row = tuple[str, str, int, Any, Any, Any, Any, Any, Any, Any, list[tuple[Any, ...]] | None]


def _ops(path: Path) -> Iterator[Row]:
    """(type, f, process, value, status, topic, broker, queue_id, queue_offset, group,
    messages) per op. Parquet leaf columns are turned into Python lists by pyarrow (C++),
    never whole nested rows, so the baseline pays for its Python loop, not for decoding."""
    if path.suffix == ".parquet":
        f = pq.ParquetFile(str(path))
        for batch in f.iter_batches(batch_size=65_536, columns=COLUMNS):
            val = batch.column("value")
            msgs = val.field("messages")
            offs = msgs.offsets.to_pylist()
            mv = msgs.values
            mcols = [mv.field(k).to_pylist() for k in ("topic", "broker", "queue_id")]
            m_off = mv.field("queue_offset").to_pylist()
            m_val = mv.field("value").to_pylist()
            m_valid = msgs.is_valid().to_pylist()
            cols = [
                batch.column("type").to_pylist(),
                batch.column("f").to_pylist(),
                batch.column("process").to_pylist(),
                *(
                    val.field(k).to_pylist()
                    for k in ("value", "status", "topic", "broker", "queue_id", "queue_offset")
                ),
                val.field("group").to_pylist(),
            ]
            for i, row in enumerate(zip(*cols, strict=True)):
                m = None
                if m_valid[i]:
                    a, b = offs[i], offs[i + 1]
                    m = list(
                        zip(
                            mcols[0][a:b],
                            mcols[1][a:b],
                            mcols[2][a:b],
                            m_off[a:b],
                            m_val[a:b],
                            strict=True,
                        )
                    )
                yield (*row, m)
    else:
        with open(path, encoding="utf-8-sig") as fh:
            for line in fh:
                if not line.strip():
                    continue
                op = json.loads(line)
                v = op.get("value") or {}
                ms = v.get("messages")
                yield (
                    op["type"],
                    op["f"],
                    op["process"],
                    v.get("value"),
                    v.get("status"),
                    v.get("topic"),
                    v.get("broker"),
                    v.get("queue_id"),
                    v.get("queue_offset"),
                    v.get("group"),
                    None
                    if ms is None
                    else [
                        (m["topic"], m.get("broker"), m["queue_id"], m["queue_offset"], m["value"])
                        for m in ms
                    ],
                )


def lost_duplicated(path: str | Path) -> dict[str, int]:
    acked: set[int] = set()
    read: set[int] = set()
    drained: set[int] = set()
    positions: dict[int, tuple[Any, ...]] = {}
    at_two: set[int] = set()
    delivered: set[tuple[int, str]] = set()
    redelivered: set[int] = set()
    ops = 0
    for type_, f, process, x, status, topic, broker, qid, qoff, group, msgs in _ops(Path(path)):
        ops += 1
        if f == "send":
            if type_ == "ok" and process >= 0:
                if status is None or status == "SEND_OK":
                    acked.add(x)
                if qoff is not None:
                    pos = (topic, broker, qid, qoff)
                    if positions.setdefault(x, pos) != pos:
                        at_two.add(x)
        elif (f == "poll" or f == "drain") and type_ == "ok" and msgs:
            g = group or ""
            for m_topic, m_broker, m_qid, m_off, mx in msgs:
                read.add(mx)
                if f == "drain":
                    drained.add(mx)
                pos = (m_topic, m_broker, m_qid, m_off)
                if positions.setdefault(mx, pos) != pos:
                    at_two.add(mx)
                if f == "poll":
                    k = (mx, g)
                    if k in delivered:
                        redelivered.add(mx)
                    else:
                        delivered.add(k)
    return {
        "ops": ops,
        # never read, or read and then not in the final drain (the synthetic history's drain
        # reads every queue from offset 0 to its end, so it vouches for every value)
        "lost": len(acked - drained) if drained else len(acked - read),
        "duplicated": len(at_two | redelivered),
        "redelivered": len(redelivered),
        "at_two_positions": len(at_two),
    }
