"""`rmq-ha bench produce --quick --json`: one tiny case against rmq_ha and a real RocketMQ 5.5.0,
end to end. Checks the report's shape only; no timing assertions (figures live in docs/PERF.md).
Needs java and mvn (the Java load generator and the real broker); skipped without them."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None,
    reason="needs java and mvn (real rocketmq-client load generator, real RocketMQ broker)",
)

SIDE_KEYS = {"msgs_per_s", "bytes_per_s", "p50_ms", "p99_ms", "errors", "sends", "msgs"}
SIDE_KEYS |= {"broker_cores", "rounds_msgs_per_s"}


@pytest.mark.timeout(600)
def test_bench_produce_quick_json(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "rmq_ha.cli", "bench", "produce", "--quick", "--json"]
    proc = subprocess.Popen(
        [*cmd, "--dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=540)
    finally:
        if proc.poll() is None:
            # SIGTERM first: the bench stops the brokers and the load generator it started.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out + err[-4000:]
    r = json.loads(out)
    assert r["benchmark"] == "produce"
    assert {"cpus", "platform", "date"} <= set(r["machine"])
    assert r["flush"] == "ASYNC_FLUSH"
    assert r["rounds"] == 1
    assert len(r["cases"]) == 1
    case = r["cases"][0]
    assert (case["size"], case["batch"], case["threads"]) == (1024, 1, 4)
    for impl in ("rmq_ha", "rocketmq"):
        side = case[impl]
        assert SIDE_KEYS <= set(side), side
        assert side["msgs_per_s"] > 0 and side["errors"] == 0, side
    assert case["ratio"] == pytest.approx(
        case["rmq_ha"]["msgs_per_s"] / case["rocketmq"]["msgs_per_s"], rel=1e-2
    )
    assert r["ratio_1k_single"] == case["ratio"]
    assert r["goal_met"] == (case["ratio"] >= 1.0)
    assert list(tmp_path.iterdir()) == []  # work dirs removed
