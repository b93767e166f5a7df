"""The `rmq-ha` commands a newcomer runs first: the store demo and the store benchmark.

These check that the commands work end to end and report what they promise; they assert no
timing (performance lives in `make bench`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RMQ_HA = [sys.executable, "-m", "rmq_ha.cli"]


def run(args: list[str], tmp_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [*RMQ_HA, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.timeout(120)
def test_demo_store_crashes_a_writer_and_recovers(tmp_path: Path) -> None:
    r = run(
        ["demo", "store", "--messages", "20000", "--crash-seconds", "0.5", "--dir", str(tmp_path)],
        tmp_path,
        100,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recovery kept every durable record" in r.stdout
    assert "20,000" in r.stdout
    assert list(tmp_path.iterdir()) == [], "the demo removes its data unless --keep"


@pytest.mark.timeout(120)
def test_bench_store_json_has_the_ratios(tmp_path: Path) -> None:
    r = run(
        [
            "bench", "store", "--json", "--sizes", "1024", "--batches", "64",
            "--mib", "8", "--seconds", "0.3", "--rounds", "1", "--dir", str(tmp_path),
        ],
        tmp_path,
        100,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("ratio_async", "ratio_sync", "mb_per_s_async", "baseline_mb_per_s_sync"):
        assert isinstance(doc[key], float) and doc[key] > 0, key
    modes = {c["mode"] for c in doc["cases"]}
    assert modes == {"async", "sync"}
    for c in doc["cases"]:
        assert c["p99_us"] >= c["p50_us"] > 0
        assert c["rss_kib"] and all(v > 0 for v in c["rss_kib"])


def test_latency_histogram_quantiles_are_within_a_bucket() -> None:
    from rmq_jepsen.bench import LatencyHistogram

    h = LatencyHistogram()
    for us in range(1, 10_001):
        h.add(float(us))
    assert h.n == 10_000
    for q, exact in ((50, 5000), (99, 9900), (100, 10_000)):
        assert exact <= h.quantile(q) <= exact * LatencyHistogram.RATIO, q
    assert h.quantile(0) <= 1.0


def test_bench_without_the_bench_package_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker's wheel ships no benchmarks (issue 14): without the plugins (the rmq-jepsen
    package), `rmq-ha bench` says which package has them instead of a bare usage error."""
    import importlib.metadata

    from rmq_ha import cli

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert cli.main(["bench"]) == 2
    assert "rmq-jepsen" in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cmd", ["store-health", "delete-expired"])
def test_store_admin_against_nothing_listening_is_one_line(cmd: str) -> None:
    """A broker address nothing listens on: one line naming it and exit 1 (it was a
    27-line ExceptionGroup traceback)."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "admin", cmd, "-b", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert r.returncode == 1, r
    assert "Traceback" not in r.stderr and "ExceptionGroup" not in r.stderr, r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "cannot connect" in r.stderr


@pytest.mark.timeout(60)
def test_mqadmin_says_why_a_controller_did_not_answer() -> None:
    """getControllerMetaData against a controller that is not there: exit 1 and the reason
    on stderr (it was an empty table and nothing else, though operations.md promises it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "mqadmin", "getControllerMetaData",
         "-a", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r
    assert f"127.0.0.1:{port}" in r.stderr and "cannot connect" in r.stderr, r.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "argv",
    [
        ["produce", "-n", "127.0.0.1:1", "-t", "T", "--api-timeout", "0"],
        ["mqadmin", "clusterList", "-n", "127.0.0.1:1", "--api-timeout", "-1"],
        ["admin", "store-health", "-b", "127.0.0.1:1", "--api-timeout", "nan"],
    ],
)
def test_a_timeout_of_zero_or_less_is_a_usage_error(argv: list[str]) -> None:
    """--api-timeout 0 made every request fail at once with a timeout that named no cause."""
    r = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", *argv],
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r
    assert "argument --api-timeout" in r.stderr and "above 0" in r.stderr, r.stderr


@pytest.mark.timeout(60)
def test_consume_says_why_it_has_no_route_and_fails() -> None:
    """A consumer whose name server never answers printed only "consumed 0 message(s)" and
    exited 0, as if the topic were empty."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "consume", "-n", f"127.0.0.1:{port}", "-t", "T",
         "-g", "G", "--idle-timeout", "2"],
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r
    lines = [ln for ln in r.stderr.splitlines() if "no route of T yet" in ln]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], r.stderr


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--delay-tolerance-ms", "-2000"], "not a number of at least 0"),
        (["--delay-tolerance-ms", "nan"], "not a number of at least 0"),
        (["--bin-ms", "0"], "below 1"),
    ],
)
def test_check_refuses_a_negative_tolerance_and_an_empty_bin(
    args: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative delay tolerance made a message due 200 ms later count as early (checker
    probe D3b): usage error, exit 2, before any Spark starts."""
    pytest.importorskip("rmq_check")
    from rmq_ha import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["check", *args, "/nonexistent"])
    assert e.value.code == 2
    assert why in capsys.readouterr().err
