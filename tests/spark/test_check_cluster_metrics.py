"""The report's cluster-metrics panel (issue 20): the bench's metrics.jsonl is read with its bad
lines counted and skipped, drawn under the fault bands, and never changes the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rmq_check import clustermetrics
from rmq_check.synth import Synth, generate

from rmq_ha.cli import main

pytestmark = pytest.mark.timeout(240)


def write_metrics(path: Path, t0_ns: int = 0, n: int = 20) -> None:
    lines = []
    for i in range(n):
        t = t0_ns + i * 1_000_000_000
        master = "b0" if i < n // 2 else "b1"
        for node in ("b0", "b1"):
            up = 0 if node == "b0" and i >= n // 2 else 1
            m = {
                "rmq_ha_broker_role": "MASTER" if node == master else "SLAVE",
                "rmq_ha_broker_epoch": 1 if i < n // 2 else 2,
                "rmq_ha_sync_state_set_size": 2 if node == master else 0,
            }
            if node == master:
                m["rmq_ha_replication_lag_bytes"] = {"2": 4096 if i % 5 == 0 else 0}
            rec = {"time_ns": t, "node": node, "up": up}
            if up:
                rec["m"] = m
            lines.append(json.dumps(rec))
        lines.append(
            json.dumps(
                {"time_ns": t, "node": "ns1", "up": 1, "m": {"rmq_ha_controller_raft_is_leader": 1}}
            )
        )
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"time_ns": "soon", "node": "b0", "up": 1}))
    lines.insert(7, json.dumps({"time_ns": 1, "node": "b0", "up": 2}))
    path.write_text("\n".join(lines) + "\n")


def test_load_counts_bad_lines_and_aligns_to_t0(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    write_metrics(p, t0_ns=5_000_000_000)
    cm = clustermetrics.load(p, 5_000_000_000)
    assert cm["bad_lines"] == 3 and cm["bad_examples"] == [4, 6, 8]
    b0 = cm["nodes"]["b0"]
    assert b0["t_s"][:3] == [0.0, 1.0, 2.0]
    assert b0["role"][0] == "MASTER" and b0["role"][-1] is None and b0["up"][-1] == 0
    assert cm["nodes"]["b1"]["lag"]["2"][-5] == 4096
    assert len(b0["lag"]["2"]) == len(b0["t_s"])  # padded where b0 was not master
    assert clustermetrics.brokers(cm) == ["b0", "b1"]
    assert clustermetrics.controllers(cm) == ["ns1"]


def test_load_thins_to_a_bounded_number_of_points(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(clustermetrics, "MAX_POINTS", 7)
    p = tmp_path / "metrics.jsonl"
    write_metrics(p, n=40)
    cm = clustermetrics.load(p, 0)
    for s in cm["nodes"].values():
        assert len(s["t_s"]) == 7
        assert s["t_s"][0] == 0.0 and s["t_s"][-1] == 39.0
        assert all(len(c) == 7 for c in s["lag"].values())


def test_check_draws_the_cluster_metrics_and_keeps_the_verdict(spark, tmp_path: Path) -> None:
    generate(Synth(ops=4_000), tmp_path / "history.jsonl")
    write_metrics(tmp_path / "metrics.jsonl")
    rc = main(["check", str(tmp_path), "--shuffle-partitions", "2"])
    assert rc == 0
    assert (tmp_path / "cluster-metrics.png").stat().st_size > 0
    page = (tmp_path / "report.html").read_text()
    assert "cluster-metrics.png" in page and "3 malformed lines skipped" in page
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["valid"] is True
    assert res["cluster_metrics"]["bad_lines"] == 3
    assert set(res["cluster_metrics"]["nodes"]) == {"b0", "b1", "ns1"}
