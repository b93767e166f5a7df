"""The history writer: one `rmq_ha.history.Op` per JSONL line, written as it happens.

Indices are dense and in write order; `time_ns` is nanoseconds since the recorder opened,
on the control node's monotonic clock (the wall time of that instant is `start_wall_ns`, kept
in the run's config). Everything runs on the Trio thread, so there is no lock; lines go to a
1 MiB buffer, flushed every second by the runner and on close, so a crashed bench loses at most
the last second.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rmq_ha import history as h
from rmq_ha.history import NEMESIS_PROCESS, Op, Value

BUFFER_BYTES = 1 << 20


class Recorder:
    def __init__(
        self,
        path: str | Path,
        *,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        validate: bool = True,
    ) -> None:
        self.path = Path(path)
        self._out: IO[str] = open(self.path, "w", encoding="utf-8", buffering=BUFFER_BYTES)
        self._clock = clock_ns
        self._t0 = clock_ns()
        self.start_wall_ns = time.time_ns()
        self._index = 0
        self._validate = validate
        #: (f, type) -> count, for the progress display and the run summary.
        self.counts: Counter[tuple[str, str]] = Counter()
        self.closed = False

    @property
    def ops(self) -> int:
        return self._index

    def now_ns(self) -> int:
        return self._clock() - self._t0

    def record(
        self,
        process: int,
        type_: str,
        f: str,
        value: Value,
        *,
        node: str | None = None,
        error: str | None = None,
        definite: bool | None = None,
    ) -> Op:
        op = Op(
            index=self._index,
            time_ns=self._clock() - self._t0,
            process=process,
            type=type_,
            f=f,
            value=value,
            node=node,
            error=error,
            definite=definite,
        )
        if self._validate:
            h.validate(op)
        self._out.write(h.dumps(op))
        self._out.write("\n")
        self._index += 1
        self.counts[(f, type_)] += 1
        return op

    def invoke(self, process: int, f: str, value: Value, *, node: str | None = None) -> Op:
        return self.record(process, "invoke", f, value, node=node)

    def complete(
        self,
        invoke: Op,
        type_: str,
        value: Value | None = None,
        *,
        node: str | None = None,
        error: str | None = None,
        definite: bool | None = None,
    ) -> Op:
        """The completion of `invoke`: same process and f; `value` defaults to the invoke's."""
        if type_ == "fail":
            definite = True
        return self.record(
            invoke.process,
            type_,
            invoke.f,
            value if value is not None else invoke.value,
            node=node if node is not None else invoke.node,
            error=error,
            definite=definite,
        )

    def nemesis(
        self,
        f: str,
        fault: str,
        fault_id: int,
        targets: list[str],
        detail: str | None = None,
        *,
        error: str | None = None,
        applied_ns: int | None = None,
        healing_ns: int | None = None,
    ) -> Op:
        """A `fault-start` / `fault-stop` line (type info, process -1); a fault-stop may carry
        when the fault was wholly applied and when its healing began (`now_ns()` values)."""
        return self.record(
            NEMESIS_PROCESS,
            "info",
            f,
            Value(
                fault=fault,
                fault_id=fault_id,
                targets=list(targets),
                detail=detail,
                applied_ns=applied_ns,
                healing_ns=healing_ns,
            ),
            error=error,
        )

    def flush(self) -> None:
        if not self.closed:
            self._out.flush()

    def close(self) -> None:
        if not self.closed:
            self._out.flush()
            self._out.close()
            self.closed = True

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_ops(path: str | Path) -> Iterator[Op]:
    return h.read(path)


# ---- Parquet export ---------------------------------------------------------------------------


def _arrow_schema() -> Any:
    """The Arrow schema equal to `history.SPARK_DDL` (defined once, in rmq_ha.history)."""
    return h.arrow_schema()


_VALUE_KEYS = h.VALUE_FIELDS


def _row(op: Op) -> dict[str, Any]:
    d = op.to_json()
    v = d["value"]
    d["value"] = {k: v.get(k) for k in _VALUE_KEYS}
    return d


def export_parquet(jsonl: str | Path, out: str | Path, *, batch_ops: int = 65_536) -> int:
    """Writes the history as Parquet with the shared schema, in row groups of `batch_ops`
    (never the whole history in memory). Returns the number of ops."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema()
    n = 0
    with pq.ParquetWriter(str(out), schema, compression="zstd") as writer:
        rows: list[dict[str, Any]] = []
        for op in h.read(jsonl):
            rows.append(_row(op))
            if len(rows) >= batch_ops:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                n += len(rows)
                rows = []
        if rows or n == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            n += len(rows)
    return n
