"""The check runs no Python task in Spark (issue 18's hang).

Every finished Python task (a parallelized Python list, a Python UDF) makes the JVM's DAG
scheduler send an accumulator update to the Python driver and wait for its acknowledgement on
its event-loop thread. That wait is where the checker's shared session hung late in long test
processes (docs/PERF.md). A check plans everything in the JVM, so no such update is ever sent:
this test counts the updates that reach the driver's accumulator server."""

from __future__ import annotations

import threading
from dataclasses import fields
from pathlib import Path

import pytest
from rmq_check.synth import Anomalies, Synth, generate

from rmq_ha.cli import main

pytestmark = pytest.mark.timeout(240)


class UpdateCounter:
    """Counts the accumulator-update messages the Python driver's accumulator server reads.

    pyspark's server thread reads each message's length with the module-level ``read_int``;
    wrapping it counts messages without changing what is read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import pyspark.accumulators as acc

        self.n = 0
        self._lock = threading.Lock()
        real = acc.read_int

        def counting_read_int(stream):  # type: ignore[no-untyped-def]
            with self._lock:
                self.n += 1
            return real(stream)

        monkeypatch.setattr(acc, "read_int", counting_read_int)


def test_the_probe_sees_a_python_task(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    # the control: a parallelized Python list runs Python tasks, and the probe counts them
    c = UpdateCounter(monkeypatch)
    assert spark.createDataFrame([(1,), (2,)], "a long").count() == 2
    assert c.n > 0


@pytest.mark.parametrize("inject", [0, 1])
def test_a_check_runs_no_python_task(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inject: int
) -> None:
    anomalies = Anomalies(**{f.name: inject for f in fields(Anomalies)})
    generate(Synth(ops=3_000, anomalies=anomalies), tmp_path / "history.jsonl")
    c = UpdateCounter(monkeypatch)
    rc = main(["check", str(tmp_path), "--shuffle-partitions", "2"])
    assert rc == (1 if inject else 0)
    assert c.n == 0, f"the check sent {c.n} accumulator updates: it ran Python tasks"
