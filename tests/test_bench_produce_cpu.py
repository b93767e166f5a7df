"""`rmq-ha bench produce` (issue 16): thread-count lists, broker CPU per message, the rmq_ha /
RocketMQ ratios of a case (msgs/s and CPU) and their medians over rounds. Pure functions; the
end-to-end run is tests/test_bench_produce.py."""

from __future__ import annotations

from typing import Any

import pytest
from rmq_jepsen.bench.produce import (
    _aggregate,
    _side,
    case_key,
    compare,
    cpu_us_per_msg,
    parse_threads,
    ratio,
    variant_ratios,
)

pytestmark = pytest.mark.timeout(10)


def test_parse_threads_lists_and_errors() -> None:
    assert parse_threads("4") == [4]
    assert parse_threads("4,16") == [4, 16]
    assert parse_threads(" 4, 16 ,") == [4, 16]
    for bad in ("", "x", "4,a", "0", "4,-1"):
        with pytest.raises(ValueError, match="--threads"):
            parse_threads(bad)


def test_cpu_us_per_msg() -> None:
    # 250 ticks of 100 Hz = 2.5 s of CPU over 50,000 messages = 50 us each
    assert cpu_us_per_msg(250, 50_000, 100) == 50.0
    assert cpu_us_per_msg(1, 3, 100) == pytest.approx(3333.33)
    assert cpu_us_per_msg(0, 10, 100) == 0.0
    # no reading (a pid vanished), no messages, nonsense clock: no figure
    assert cpu_us_per_msg(None, 10, 100) is None
    assert cpu_us_per_msg(-1, 10, 100) is None
    assert cpu_us_per_msg(10, 0, 100) is None
    assert cpu_us_per_msg(10, 10, 0) is None


def test_ratio_needs_both_sides() -> None:
    assert ratio(8, 10) == 0.8
    assert ratio(2, 3) == 0.667
    assert ratio(None, 10) is None and ratio(10, None) is None
    assert ratio(0, 10) is None and ratio(10, 0) is None


def test_compare_adds_throughput_and_cpu_ratios() -> None:
    c: dict[str, Any] = {
        "rmq_ha": {"msgs_per_s": 9000, "broker_cpu_us_per_msg": 60.0},
        "rocketmq": {"msgs_per_s": 10000, "broker_cpu_us_per_msg": 80.0},
    }
    compare(c)
    assert c["ratio"] == 0.9 and c["cpu_ratio"] == 0.75
    c["rocketmq"] = {"msgs_per_s": 0, "failure": "broker exited"}
    compare(c)
    assert c["ratio"] is None and c["cpu_ratio"] is None
    only: dict[str, Any] = {"rmq_ha": {"msgs_per_s": 5, "broker_cpu_us_per_msg": 1.0}}
    compare(only)
    assert only["ratio"] is None and only["cpu_ratio"] is None


def _data(msgs: int, ticks: int | None, **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"msgsPerSec": msgs // 10, "bytesPerSec": msgs * 100, "errors": 0}
    d |= {"msgs": msgs, "seconds": 10.0, "p50Ms": 0.5, "p99Ms": 2.0, "sends": msgs}
    if ticks is not None:
        d["brokerCpuTicks"] = ticks
    return d | kw


def test_side_computes_cpu_per_message_from_the_window_ticks() -> None:
    import os

    clk = os.sysconf("SC_CLK_TCK")
    side = _side(_data(100_000, 5 * clk), broker_cores=1.234)
    assert side["broker_cpu_us_per_msg"] == 50.0  # 5 s over 100k messages
    assert side["broker_cores"] == 1.23
    assert _side(_data(100, None), 0.5)["broker_cpu_us_per_msg"] is None
    # a consumer's line has no latencies or sends: those default
    consumer = _data(1000, clk)
    for k in ("p50Ms", "p99Ms", "sends"):
        del consumer[k]
    side = _side(consumer, 0.1)
    assert side["p50_ms"] is None and side["sends"] == 1000
    assert side["broker_cpu_us_per_msg"] == 1000.0


def test_aggregate_takes_medians_of_cpu_per_message() -> None:
    runs = [
        {"msgs_per_s": m, "bytes_per_s": 1, "p50_ms": 1.0, "p99_ms": 2.0, "errors": 0}
        | {"broker_cores": 1.0, "sends": 10, "msgs": 10, "broker_cpu_us_per_msg": us}
        for m, us in ((100, 40.0), (300, None), (200, 60.0))
    ]
    agg = _aggregate(runs)
    assert agg["msgs_per_s"] == 200
    assert agg["broker_cpu_us_per_msg"] == 50.0  # median of the rounds that had a reading
    assert agg["rounds_msgs_per_s"] == [100, 300, 200]
    assert "failure" in _aggregate([*runs, {"failure": "x", "msgs_per_s": 0}])


def test_case_keys_and_variant_ratios_with_several_thread_counts() -> None:
    assert case_key({"size": 1024, "batch": 1}) == "1024x1"
    assert case_key({"size": 1024, "batch": 1, "threads": 4}, 4) == "1024x1"
    assert case_key({"size": 1024, "batch": 1, "threads": 16}, 4) == "1024x1@16t"
    m = "rmq_ha+metrics"
    cases = [
        {
            "size": 1024,
            "batch": 1,
            "threads": 4,
            "rmq_ha": {"msgs_per_s": 100},
            m: {"msgs_per_s": 99},
        },
        {
            "size": 1024,
            "batch": 1,
            "threads": 16,
            "rmq_ha": {"msgs_per_s": 200},
            m: {"msgs_per_s": 150},
        },
    ]
    got = variant_ratios(cases, ["rmq_ha", m])[m]
    assert got["vs_rmq_ha"] == {"1024x1": 0.99, "1024x1@16t": 0.75}
    # the headline is the first thread count's 1 KiB single sends
    assert got["ratio_1k_single_vs_rmq_ha"] == 0.99 and got["goal_met"] is True
