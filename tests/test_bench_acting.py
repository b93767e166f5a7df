"""`rmq-ha bench acting-master --kills 2 --json` end to end (real processes on loopback), plus
its summary and printing on fixed inputs. The figures themselves live in docs/PERF.md; the
only timing checked here is what the two faults must look like by construction (a frozen master
cannot be noticed before its heartbeat timeout; a killed one is noticed by its closed
connections long before)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest
from rmq_jepsen.bench.acting import _print, ratios, summary

FIGURES = ("route_read_only", "master_only_op", "delay_lateness", "hand_back")
SUMMARY_KEYS = {"n", "p50_s", "p99_s", "max_s", "p50_x_timeout", "p99_x_timeout"}
SUMMARY_KEYS |= {"max_x_timeout", "samples_s"}


def run_bench(args: list[str], timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rmq_ha.cli", "bench", "acting-master", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            # SIGINT first: the bench stops the brokers and the name server it started.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err[-6000:]
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.mark.timeout(90)
def test_bench_acting_master_two_kills_per_mode_json() -> None:
    r = run_bench(["--kills", "2", "--json"], timeout_s=80)
    assert r["benchmark"] == "acting-master"
    assert r["broker_not_active_timeout_ms"] == 2000
    unit = 2.0
    assert {"cpus", "platform", "date"} <= set(r["machine"])
    modes = r["modes"]
    assert set(modes) == {"kill", "stop"}
    for name, m in modes.items():
        assert m["kills"] == 2
        for fig in FIGURES:
            s = m[fig]
            assert SUMMARY_KEYS <= set(s), (name, fig, s)
            want = 2 * 3 if fig == "delay_lateness" else 2  # three delay levels per round
            assert s["n"] == len(s["samples_s"]) == want, (name, fig, s)
            assert s["p50_s"] <= s["p99_s"] <= s["max_s"]
            assert s["max_s"] == pytest.approx(max(s["samples_s"]), abs=1e-3)
            assert s["max_x_timeout"] == pytest.approx(s["max_s"] / unit)
            assert s["p50_x_timeout"] == pytest.approx(s["p50_s"] / unit)
        # Delivered at or after its due time (store clock in ms), and some delivered at all.
        assert min(m["delay_lateness"]["samples_s"]) >= -0.01, m["delay_lateness"]
        assert m["lateness_goal_met"] == (m["delay_lateness"]["max_x_timeout"] <= 1.0)
        assert m["hand_back"]["p50_s"] > 0
    kill, stop = modes["kill"], modes["stop"]
    # A frozen master keeps its connections: the name server drops it only after the
    # timeout (its last heartbeat was at most one 200 ms interval before the freeze).
    assert min(stop["route_read_only"]["samples_s"]) >= 0.75 * unit, stop["route_read_only"]
    # A killed one closes them: noticed well before the timeout-based case.
    assert kill["route_read_only"]["max_s"] < min(stop["route_read_only"]["samples_s"])
    rounds = r["rounds"]
    assert [(x["mode"], x["n"]) for x in rounds] == [
        ("kill", 0),
        ("kill", 1),
        ("stop", 0),
        ("stop", 1),
    ]
    for x in rounds:
        # (b) needs the route that (a) waits for: never earlier.
        assert 0 < x["route_s"] <= x["op_s"], x
    delayed = r["delayed"]
    assert delayed["sent"] == 12 and delayed["missing"] == 0, delayed
    assert delayed["delivered_once"] + len(delayed["copies_not_1"]) == 12, delayed
    offsets = r["consumer_offsets"]
    assert offsets["rounds"] == 4 and offsets["queues_checked"] == 16, offsets
    assert 0 <= offsets["queues_went_back"] <= 16, offsets
    assert isinstance(r["slave_pull_errors"], int)


@pytest.mark.timeout(10)
def test_summary_quantiles_and_ratios() -> None:
    s = summary([0.1 * i for i in range(1, 11)], 2.0)
    assert s["n"] == 10
    assert s["p50_s"] == pytest.approx(0.55)
    assert s["max_s"] == pytest.approx(1.0)
    assert 0.99 <= s["p99_s"] <= 1.0  # inclusive: between the two largest samples
    assert s["p99_x_timeout"] == pytest.approx(s["p99_s"] / 2.0)
    one = summary([0.3], 2.0)
    assert one["p50_s"] == one["p99_s"] == one["max_s"] == 0.3
    assert summary([], 2.0) == {"n": 0}


@pytest.mark.timeout(10)
def test_text_output_names_figure_baseline_and_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    fig = summary([0.05, 0.07], 2.0)
    r: dict[str, Any] = {
        "broker_not_active_timeout_ms": 2000,
        "goal_lateness_x_timeout": 1.0,
        "modes": {
            "kill": {
                "fault": "kill -9 the master",
                "kills": 2,
                "route_read_only": fig,
                "master_only_op": fig,
                "delay_lateness": fig,
                "hand_back": fig,
                "lateness_goal_met": True,
            }
        },
        "delayed": {"sent": 6, "delivered_once": 6, "duplicates": 0, "missing": 0},
        "consumer_offsets": {
            "rounds": 2,
            "queues_checked": 8,
            "queues_went_back": 0,
            "rounds_went_back": 0,
        },
        "slave_pull_errors": 0,
    }
    _print(r)
    out = capsys.readouterr().out
    assert "brokerNotActiveTimeoutMillis = 2000 ms" in out
    assert "p50  0.060 s (0.03x)" in out
    assert "goal: lateness max <= 1.0x the timeout: met" in out
    assert "6 stored exactly once" in out


@pytest.mark.timeout(60)
def test_bench_acting_is_a_cli_subcommand() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "bench", "acting-master", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for flag in ("--kills", "--mode", "--json", "--timeout-ms", "--impl", "--broker-heap-mb"):
        assert flag in proc.stdout


def _mode(route: list[float], late: list[float], not_delivered: int = 0) -> dict[str, Any]:
    fig = summary(route, 2.0)
    return {
        "fault": "SIGSTOP the master (no FIN)",
        "kills": 2,
        "route_read_only": fig,
        "master_only_op": fig,
        "delay_lateness": summary(late, 2.0),
        "delay_lateness_by_level": {},
        "hand_back": summary([1.0, 1.0], 2.0),
        "not_seen": {
            "route_read_only": 2 - len(route),
            "master_only_op": 2 - len(route),
            "delayed_not_delivered": not_delivered,
            "probe_deadline_s": 40.0,
            "delivery_deadline_s": 19.0,
        },
        "lateness_goal_met": not_delivered == 0,
    }


def _impl(mode: dict[str, Any]) -> dict[str, Any]:
    return {
        "broker_not_active_timeout_ms": 2000,
        "goal_lateness_x_timeout": 1.0,
        "modes": {"stop": mode},
        "delayed": {"sent": 6, "delivered_once": 6, "duplicates": 0, "missing": 0},
        "consumer_offsets": {
            "rounds": 2,
            "queues_checked": 8,
            "queues_went_back": 0,
            "rounds_went_back": 0,
        },
        "slave_pull_errors": 0,
    }


@pytest.mark.timeout(10)
def test_ratios_are_rocketmq_over_rmq_ha_and_none_without_samples() -> None:
    ours = _impl(_mode([2.0, 2.0], [0.5, 1.0]))
    theirs = _impl(_mode([], [1.0, 3.0], not_delivered=1))
    r = ratios(ours, theirs)
    assert r["stop_delay_lateness_p50_s"] == pytest.approx(2.0 / 0.75)
    assert r["stop_delay_lateness_max_s"] == pytest.approx(3.0)
    assert r["stop_hand_back_p50_s"] == pytest.approx(1.0)
    # RocketMQ never showed the route: no figure, so no ratio (not a made-up one)
    assert r["stop_route_read_only_p50_s"] is None
    assert r["stop_master_only_op_max_s"] is None


@pytest.mark.timeout(10)
def test_text_output_of_both_says_what_was_not_seen(capsys: pytest.CaptureFixture[str]) -> None:
    ours = _impl(_mode([2.0, 2.0], [0.5, 1.0]))
    theirs = _impl(_mode([], [1.0], not_delivered=5))
    _print(
        {
            "impls": ["rmq_ha", "rocketmq"],
            "rmq_ha": ours,
            "rocketmq": theirs,
            "ratios": ratios(ours, theirs),
        }
    )
    out = capsys.readouterr().out
    assert "== rmq_ha" in out and "== rocketmq" in out
    assert [ln.split() for ln in out.splitlines() if "read-only id 0" in ln][1][-2:] == [
        "never",
        "seen",
    ]
    assert "not seen within 40 s of the fault: route in 2 rounds" in out
    assert "delayed messages not delivered via broker-b within 19 s: 5" in out
    assert "goal: lateness max <= 1.0x the timeout: NOT met" in out
    assert "stop_route_read_only_p50_s" in out and "      -" in out


@pytest.mark.timeout(10)
def test_an_aborted_run_says_where_and_why_and_counts_nothing_it_did_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = _impl(_mode([2.0], [0.5]))
    r["modes"]["stop"]["not_seen"]["hand_back"] = 1
    r["aborted"] = {
        "mode": "stop",
        "n": 1,
        "reason": "the master's pre-online not seen within 180 s",
    }
    r["delayed"] = {"not_counted": "the run was aborted (see aborted)"}
    _print(r)
    out = capsys.readouterr().out
    assert "ABORTED in stop round 1: the master's pre-online not seen within 180 s" in out
    assert "delayed messages: not counted (the run was aborted (see aborted))" in out
