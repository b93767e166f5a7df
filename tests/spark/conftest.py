"""One local[2] SparkSession for every checker test, and a small DSL for hand-written
histories in the shared schema (rmq_ha.history), written as JSONL like the bench writes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_ha import history as h

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from rmq_check.load import session

    s = session("local[2]", shuffle_partitions=2, driver_memory="1g")
    yield s
    s.stop()


class Hist:
    """Builds a history op by op; times advance 1 ms per op unless given."""

    def __init__(self) -> None:
        self.ops: list[h.Op] = []
        self.t = 0

    def op(
        self,
        process: int,
        type_: str,
        f: str,
        value: h.Value,
        *,
        at_ms: float | None = None,
        **kw: Any,
    ) -> h.Op:
        self.t = int(at_ms * 1e6) if at_ms is not None else self.t + 1_000_000
        o = h.Op(len(self.ops), self.t, process, type_, f, value, **kw)
        h.validate(o)
        self.ops.append(o)
        return o

    def invoke_send(
        self, p: int, v: int, key: str | None = None, at_ms: float | None = None
    ) -> None:
        self.op(p, "invoke", "send", h.Value(topic="T", value=v, key=key), at_ms=at_ms)

    def complete_send(
        self,
        p: int,
        v: int,
        outcome: str = "ok",
        *,
        q: int = 0,
        off: int | None = None,
        key: str | None = None,
        status: str = "SEND_OK",
        broker: str = "b0",
        at_ms: float | None = None,
    ) -> None:
        if outcome == "ok":
            val = h.Value(
                topic="T",
                value=v,
                key=key,
                queue_id=q,
                queue_offset=off,
                broker=broker,
                status=status,
            )
            self.op(p, "ok", "send", val, at_ms=at_ms)
        else:
            self.op(
                p,
                outcome,
                "send",
                h.Value(topic="T", value=v, key=key),
                at_ms=at_ms,
                error="boom",
                definite=True if outcome == "fail" else None,
            )

    def send(
        self,
        p: int,
        v: int,
        outcome: str = "ok",
        *,
        key: str | None = None,
        at_ms: tuple[float, float] | None = None,
        **kw: Any,
    ) -> None:
        self.invoke_send(p, v, key, at_ms[0] if at_ms else None)
        self.complete_send(p, v, outcome, key=key, at_ms=at_ms[1] if at_ms else None, **kw)

    def poll(
        self,
        p: int,
        msgs: list[tuple[int, int, int | None]],
        *,
        group: str = "g",
        f: str = "poll",
        key: str | None = None,
        broker: str = "b0",
        outcome: str = "ok",
        at_ms: tuple[float, float] | None = None,
    ) -> None:
        """msgs: (queue_id, offset, value)."""
        self.op(p, "invoke", f, h.Value(topic="T", group=group), at_ms=at_ms[0] if at_ms else None)
        if outcome != "ok":
            self.op(
                p,
                outcome,
                f,
                h.Value(topic="T", group=group),
                at_ms=at_ms[1] if at_ms else None,
                error="boom",
                definite=True if outcome == "fail" else None,
            )
            return
        reads = [h.Read("T", q, o, v, key, broker) for q, o, v in msgs]
        self.op(
            p,
            "ok",
            f,
            h.Value(topic="T", group=group, messages=reads),
            at_ms=at_ms[1] if at_ms else None,
        )

    def drain(
        self,
        p: int,
        msgs: list[tuple[int, int, int | None]],
        *,
        ends: dict[int, int] | None = None,
        lows: dict[int, int] | None = None,
        **kw: Any,
    ) -> None:
        """The bench's final drain: min and max offsets of every queue, then the reads (one
        op; msgs are (queue_id, offset, value) of topic T). By default each queue's max is one
        past the highest offset read there (the drain read every queue to its end) and its
        min 0."""
        broker = kw.get("broker", "b0")
        reads = [h.Read("T", q, o, v, None, broker) for q, o, v in msgs]
        self.bounds(
            p,
            reads,
            ends={("T", q): e for q, e in (ends or {}).items()},
            lows={("T", q): e for q, e in (lows or {}).items()},
        )
        self.poll(p, msgs, group="drain", f="drain", **kw)

    def bounds(
        self,
        p: int,
        reads: list[h.Read],
        ends: dict[tuple[str, int], int] | None = None,
        lows: dict[tuple[str, int], int] | None = None,
        topics: set[str] | None = None,
    ) -> None:
        """The drain's `offsets` min / max ops (rmq_jepsen.workload._drain_queue) for every
        queue that acknowledged a send so far (of `topics`, when given) and every queue in
        `reads`; a queue's max is ends[(topic, queue_id)], else one past the highest offset in
        `reads` (0 if none). A later call answers again for every such queue: the last
        answers are the final drain's (a max that went down lost what was read past it)."""
        queues = {(r.topic, r.queue_id, r.broker) for r in reads}
        queues |= {
            (o.value.topic, o.value.queue_id, o.value.broker)
            for o in self.ops
            if o.f == "send"
            and o.type == "ok"
            and o.value.queue_id is not None
            and (topics is None or o.value.topic in topics)
        }
        for topic, q, broker in sorted(queues, key=str):
            top = max(
                (r.queue_offset for r in reads if (r.topic, r.queue_id) == (topic, q)), default=-1
            )
            hi = (ends or {}).get((topic, q), top + 1)
            lo = (lows or {}).get((topic, q), 0)  # a min above 0: retention removed the head
            for detail, off in (("min", lo), ("max", hi)):
                val = h.Value(topic=topic, queue_id=q, broker=broker, detail=detail)
                self.op(p, "invoke", "offsets", val)
                done = h.Value(topic=topic, queue_id=q, broker=broker, detail=detail, offset=off)
                self.op(p, "ok", "offsets", done)

    def metadata(
        self, p: int, broker: str, master: str | None, epoch: int, overlap: bool = False
    ) -> None:
        self.op(p, "invoke", "metadata", h.Value(broker=broker))
        self.op(p, "ok", "metadata", h.Value(broker=broker, master=master, epoch=epoch))

    def fault(self, fid: int, start_ms: float, stop_ms: float | None, kind: str = "kill") -> None:
        self.op(
            -1,
            "info",
            "fault-start",
            h.Value(fault=kind, fault_id=fid, targets=["n1"]),
            at_ms=start_ms,
        )
        if stop_ms is not None:
            self.op(
                -1,
                "info",
                "fault-stop",
                h.Value(fault=kind, fault_id=fid, targets=["n1"]),
                at_ms=stop_ms,
            )

    def write(self, d: Path) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        p = d / "history.jsonl"
        with open(p, "w", encoding="utf-8") as f:
            # the bench writes in index order; a history sorted by time would do too
            h.write(f, sorted(self.ops, key=lambda o: o.index))
        return d


@pytest.fixture
def hist() -> Hist:
    return Hist()


@pytest.fixture
def run_check(spark: Any, tmp_path: Path) -> Any:
    from rmq_check.check import check
    from rmq_check.core import Config
    from rmq_check.load import load

    def _run(hst: Hist, only: list[str] | None = None, **cfg: Any) -> dict[str, Any]:
        d = hst.write(tmp_path / "run")
        return check(load(spark, d), Config(**cfg), only=only)

    return _run
