"""The history writer: dense indices, invoke/complete pairs, typed outcomes, schema-checked,
readable by rmq_ha.history, and exported to Parquet with the shared schema."""

import json

import pytest
from rmq_jepsen.recorder import Recorder, export_parquet

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(60)


def _clock():
    t = iter(range(1000, 10**9, 5))
    return lambda: next(t)


def test_invoke_complete_and_nemesis_lines(tmp_path):
    p = tmp_path / "history.jsonl"
    with Recorder(p, clock_ns=_clock()) as rec:
        inv = rec.invoke(3, "send", h.Value(topic="T", value=1, key="k0"))
        rec.complete(
            inv,
            "ok",
            h.Value(
                topic="T",
                value=1,
                key="k0",
                queue_id=2,
                queue_offset=7,
                broker="broker-a",
                status="FLUSH_SLAVE_TIMEOUT",
            ),
        )
        inv2 = rec.invoke(4, "send", h.Value(topic="T", value=2))
        rec.complete(inv2, "fail", error="no route")
        inv3 = rec.invoke(5, "send", h.Value(topic="T", value=3))
        rec.complete(inv3, "info", error="timeout", definite=False)
        rec.nemesis("fault-start", "partition", 1, ["n1", "n2"], "partition-halves")
        rec.nemesis("fault-stop", "partition", 1, ["n1", "n2"], "partition-halves")
        assert rec.ops == 8
        assert rec.counts[("send", "ok")] == 1
    ops = list(h.read(p))
    assert [o.index for o in ops] == list(range(8))
    assert [o.time_ns for o in ops] == sorted(o.time_ns for o in ops)
    assert ops[1].value.status == "FLUSH_SLAVE_TIMEOUT", "a non-OK status is kept"
    assert ops[3].type == "fail" and ops[3].definite is True and ops[3].value.value == 2
    assert ops[5].type == "info" and ops[5].definite is False
    assert ops[6].process == h.NEMESIS_PROCESS and ops[6].value.targets == ["n1", "n2"]
    assert ops[6].value.fault_id == ops[7].value.fault_id == 1
    assert all(o.process == i.process for o, i in [(ops[1], ops[0]), (ops[3], ops[2])])


def test_schema_violations_are_refused(tmp_path):
    with Recorder(tmp_path / "h.jsonl") as rec:
        with pytest.raises(h.HistoryError):
            rec.invoke(1, "enqueue", h.Value(topic="T", value=1))
        with pytest.raises(h.HistoryError):
            rec.nemesis("fault-start", "meteor", 1, [])
        with pytest.raises(h.HistoryError):
            rec.invoke(1, "send", h.Value(topic="T"))
        assert rec.ops == 0, "nothing invalid reached the file"


def test_lines_are_flushed_on_flush(tmp_path):
    p = tmp_path / "h.jsonl"
    rec = Recorder(p)
    rec.invoke(1, "poll", h.Value(topic="T", group="g"))
    rec.flush()
    assert json.loads(p.read_text())["f"] == "poll"
    rec.close()
    rec.close()  # idempotent


def test_parquet_export_matches_the_shared_schema(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "h.jsonl"
    with Recorder(p) as rec:
        for i in range(10):
            inv = rec.invoke(i % 3, "send", h.Value(topic="T", value=i))
            rec.complete(
                inv,
                "ok",
                h.Value(
                    topic="T", value=i, queue_id=0, queue_offset=i, broker="b", status="SEND_OK"
                ),
            )
        inv = rec.invoke(9, "poll", h.Value(topic="T", group="g"))
        rec.complete(
            inv, "ok", h.Value(topic="T", group="g", messages=[h.Read("T", 0, 1, 1, None, "b")])
        )
        rec.nemesis("fault-start", "kill", 1, ["n3"])
    n = export_parquet(p, tmp_path / "h.parquet", batch_ops=7)
    assert n == 23
    table = pq.read_table(tmp_path / "h.parquet")
    assert table.num_rows == 23
    assert table.column_names == [
        "index",
        "time_ns",
        "process",
        "node",
        "type",
        "f",
        "value",
        "error",
        "definite",
    ]
    # Every top-level and value field of the Spark DDL is present, with the same names.
    value_fields = [f.name for f in table.schema.field("value").type]
    for name in value_fields:
        assert f"{name}:" in h.SPARK_DDL
    rows = table.to_pylist()
    assert rows[21]["value"]["messages"][0]["queue_offset"] == 1
    assert rows[22]["value"]["targets"] == ["n3"]
