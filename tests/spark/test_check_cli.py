"""`rmq-ha check` end to end: outputs in the run dir, exit codes, and the bench smoke run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rmq_check.schema import schema_ddl
from rmq_check.synth import Anomalies, Synth, generate

from rmq_ha.cli import main

pytestmark = pytest.mark.timeout(240)


def test_arrow_schema_matches_the_shared_spark_ddl():
    from rmq_ha.history import SPARK_DDL

    norm = lambda s: s.replace(" ", "")  # noqa: E731
    assert norm(schema_ddl()) == norm(SPARK_DDL)


def test_check_writes_outputs_and_exits_1_on_a_safety_failure(spark, tmp_path, capsys):
    generate(Synth(ops=6_000, anomalies=Anomalies(lost_write=1)), tmp_path / "history.jsonl")
    rc = main(["check", str(tmp_path), "--shuffle-partitions", "2"])
    assert rc == 1
    for f in (
        "results.json",
        "report.html",
        "latency-raw.png",
        "latency-quantiles.png",
        "rate.png",
        "availability.png",
    ):
        assert (tmp_path / f).stat().st_size > 0, f
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["safety_failed"] == ["lost", "lost-write"]
    assert res["analyses"]["lost"]["examples"][0]["history"]  # traced ops of the example
    assert "INVALID: lost, lost-write" in (tmp_path / "report.html").read_text()
    assert "INVALID" in capsys.readouterr().out
    assert spark.sparkContext._jsc is not None  # the shared session survived the CLI


def test_check_exits_0_on_a_clean_run_and_2_without_a_history(tmp_path):
    """The real entry point, in a fresh process (no Spark session exists when it starts)."""
    generate(Synth(ops=4_000), tmp_path / "history.parquet")
    exe = [sys.executable, "-m", "rmq_ha.cli", "check"]
    p = subprocess.run(
        [*exe, str(tmp_path), "--json", "--shuffle-partitions", "2", "--driver-memory", "1g"],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["valid"] is True
    p = subprocess.run(
        [*exe, str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2, p.stderr[-3000:]


def test_bench_check_smoke(spark, capsys):
    assert main(["bench", "check", "--ops", "8000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["spark"]["correct"] and out["baseline"]["correct"]
    assert out["ratio"] > 0


def test_the_campaign_runner_passes_the_checkers_spark_settings_through(tmp_path):
    """Issue 18: the runner always checked on local[2]; now --check-master / --check-conf
    reach `rmq-ha check` (run against a real cluster in test_check_cluster.py)."""
    from rmq_check.cli import spark_conf
    from rmq_jepsen.runner import CHECK_VERDICTS, check_argv

    argv = check_argv(tmp_path, "spark://127.0.0.1:7077", ["a.b=1", "c=x=y"])
    assert argv[-6:] == ["--master", "spark://127.0.0.1:7077", "--conf", "a.b=1", "--conf", "c=x=y"]
    assert check_argv(tmp_path)[-2:] == ["check", str(tmp_path)]
    assert spark_conf(["a.b=1", "c=x=y"]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(SystemExit):
        spark_conf(["novalue"])
    assert CHECK_VERDICTS[3] == "unknown" and CHECK_VERDICTS[0] == "valid"
