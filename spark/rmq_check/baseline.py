"""Single-process pure-Python lost/duplicate analysis: the benchmark's baseline.

The same definitions as the Spark ``lost`` and ``duplicated`` analyses (acknowledged SEND_OK
sends never read; values at two positions or delivered twice to one consumer group), in one
pass over the history with dicts and sets, as OpenChaos's QueueChecker or Jepsen's total-queue
would do it. Reads Parquet batch by batch (pyarrow, columns converted to Python objects) or
JSONL line by line; the time to turn the file into Python objects is part of the baseline, as
reading the file is part of the Spark figure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

COLUMNS = ["type", "f", "process", "value"]


def _ops(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        f = pq.ParquetFile(str(path))
        for batch in f.iter_batches(batch_size=65_536, columns=COLUMNS):
            yield from batch.to_pylist()
    else:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield json.loads(line)


def lost_duplicated(path: str | Path) -> dict[str, int]:
    acked: set[int] = set()
    read: set[int] = set()
    positions: dict[int, tuple[Any, ...]] = {}
    at_two: set[int] = set()
    delivered: set[tuple[int, str]] = set()
    redelivered: set[int] = set()
    ops = 0
    for op in _ops(Path(path)):
        ops += 1
        f = op["f"]
        v = op["value"] or {}
        if f == "send":
            if op["type"] == "ok" and op["process"] >= 0:
                x = v["value"]
                status = v.get("status")
                if status is None or status == "SEND_OK":
                    acked.add(x)
                if v.get("queue_offset") is not None:
                    pos = (v.get("topic"), v.get("broker"), v.get("queue_id"), v["queue_offset"])
                    p0 = positions.setdefault(x, pos)
                    if p0 != pos:
                        at_two.add(x)
        elif (f == "poll" or f == "drain") and op["type"] == "ok":
            group = v.get("group") or ""
            for m in v.get("messages") or ():
                x = m["value"]
                read.add(x)
                pos = (m["topic"], m.get("broker"), m["queue_id"], m["queue_offset"])
                p0 = positions.setdefault(x, pos)
                if p0 != pos:
                    at_two.add(x)
                if f == "poll":
                    k = (x, group)
                    if k in delivered:
                        redelivered.add(x)
                    else:
                        delivered.add(k)
    return {
        "ops": ops,
        "lost": len(acked - read),
        "duplicated": len(at_two | redelivered),
        "redelivered": len(redelivered),
        "at_two_offsets": len(at_two),
    }
