"""Issue 18: a check on a real Spark standalone cluster (master + 2 workers on loopback, started
by rmq_check.cluster, the code behind `make spark-cluster`) gives the same results as local[2].

Slow (three JVMs, two checks in fresh processes): it runs under `make test-spark-cluster`
(RMQ_CHECK_CLUSTER_TEST=1), not in the default suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("RMQ_CHECK_CLUSTER_TEST") != "1",
        reason="starts a Spark standalone cluster: make test-spark-cluster",
    ),
]


def _check(run: Path, out: Path, *args: str) -> dict[str, Any]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmq_ha.cli",
            "check",
            str(run),
            "--out",
            str(out),
            "--json",
            "--driver-memory",
            "1g",
            "--shuffle-partitions",
            "4",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 1, p.stderr[-3000:]  # the injected anomalies fail the run
    res: dict[str, Any] = json.loads(p.stdout)
    return res


def _answers(res: dict[str, Any]) -> dict[str, Any]:
    return {
        "valid": res["valid"],
        "safety_failed": res["safety_failed"],
        "analyses": {n: (r["valid"], r["count"]) for n, r in res["analyses"].items()},
        "ops": res["stats"]["ops"],
    }


def test_a_check_on_a_standalone_cluster_matches_local(tmp_path):
    from rmq_check import cluster
    from rmq_check.synth import Anomalies, Synth, expected, generate

    a = Anomalies(**{k: 1 for k in Anomalies.__dataclass_fields__})
    run = tmp_path / "run"
    run.mkdir()
    generate(Synth(ops=20_000, anomalies=a), run / "history.parquet")
    d = tmp_path / "cluster"
    state = cluster.start(d, workers=2)
    try:
        # the campaign runner's argv (--master and --conf passed through), with a setting
        # whose effect the master shows: the application's name
        from rmq_jepsen.runner import check_argv

        argv = check_argv(run, state["master"], ["spark.app.name=rmq-check-on-cluster"])
        on_cluster = _check(run, tmp_path / "c", *argv[argv.index("--master") :])
        with urllib.request.urlopen(f"http://127.0.0.1:{state['ui_port']}/json/", timeout=10) as r:
            ui = json.loads(r.read())
        assert ui["aliveworkers"] == 2
        assert [x["name"] for x in ui["completedapps"]] == ["rmq-check-on-cluster"]  # it ran there
    finally:
        cluster.stop(d)
    assert not cluster.status(d)["running"]
    local = _check(run, tmp_path / "l")
    assert _answers(on_cluster) == _answers(local)
    assert on_cluster["analyses"]["lost"]["count"] == expected(a)["lost"]
