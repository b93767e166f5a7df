"""Issue 17: `rmq-ha bench ha --impl rmq_ha|rocketmq|both`: the parser, and the ratios
RocketMQ / rmq_ha printed when both were measured in one run."""

from __future__ import annotations

import argparse

import pytest
from rmq_jepsen.bench import ha

pytestmark = pytest.mark.timeout(60)


def _parse(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ha.add_parser(ap.add_subparsers())
    return ap.parse_args(["ha", *argv])


def test_impl_flag_and_jvm_sizes():
    assert _parse().impl == "rmq_ha"
    a = _parse("--impl", "both", "--broker-heap-mb", "768")
    assert (a.impl, a.broker_heap_mb) == ("both", 768)
    with pytest.raises(SystemExit):
        _parse("--impl", "kafka")


def _fo(p50: float, p99: float, single: float) -> dict[str, float]:
    return {"p50_s": p50, "p99_s": p99, "single_copy_p50_s": single}


def test_ratios_are_rocketmq_over_rmq_ha_for_figures_both_have():
    ours = {
        "replication": {"single": {"msgs_per_s": 1000}, "replicated": {"msgs_per_s": 800}},
        "failover_kill": _fo(0.5, 1.0, 0.2),
        "failover_pause": _fo(2.0, 2.5, 0.4),
    }
    theirs = {
        "replication": {"single": {"msgs_per_s": 3000}, "replicated": {"msgs_per_s": 1600}},
        "failover_kill": _fo(0.25, 0.4, 0.2),
    }
    r = ha.ratios(ours, theirs)
    assert r == {
        "single_msgs_per_s": 3.0,
        "replicated_msgs_per_s": 2.0,
        "failover_kill_p50_s": 0.5,
        "failover_kill_p99_s": 0.4,
        "failover_kill_single_copy_p50_s": 1.0,
    }


def test_broker_cpu_per_message_is_compared_when_both_have_it(capsys):
    ours = {
        "replication": {
            "single": {"msgs_per_s": 1000, "p99_ms": 1.0, "broker_cpu_us_per_msg": 30.0},
            "replicated": {"msgs_per_s": 800, "p99_ms": 2.0, "broker_cpu_us_per_msg": 90.0},
            "ratio": 0.8,
            "p99_ratio": 2.0,
            "goal": 0.7,
        }
    }
    theirs = {
        "replication": {
            "single": {"msgs_per_s": 3000, "broker_cpu_us_per_msg": 60.0},
            "replicated": {"msgs_per_s": 1600, "broker_cpu_us_per_msg": None},
        }
    }
    r = ha.ratios(ours, theirs)
    assert r["single_broker_cpu_rmq_ha_over_rocketmq"] == 0.5
    assert "replicated_broker_cpu_rmq_ha_over_rocketmq" not in r  # no reading: no ratio
    ha._print_one(ours)
    out = capsys.readouterr().out
    assert "broker CPU 30.0 us/msg" in out and "broker CPU 90.0 us/msg" in out


def test_print_names_each_impl_and_the_ratios(capsys):
    one = {"failover_kill": {**_fo(0.5, 1.0, 0.2), "how": "kill", "kills": 2}}
    for k in ("p50_x_timeout", "p99_x_timeout", "single_copy_p99_s"):
        one["failover_kill"][k] = 0.5
    one["failover_kill"] |= {"heartbeat_timeout_ms": 2000, "goal_p99_x_timeout": 1.5}
    ha._print(
        {"impls": ["rmq_ha", "rocketmq"], "rmq_ha": one, "rocketmq": one, "ratios": {"x": 1.0}}
    )
    out = capsys.readouterr().out
    assert "== rmq_ha" in out and "== rocketmq" in out and "RocketMQ / rmq_ha" in out


def test_controller_bench_impl_flag_and_ratios():
    from rmq_jepsen.bench import controller

    ap = argparse.ArgumentParser()
    controller.add_parser(ap.add_subparsers())
    assert ap.parse_args(["controller", "--impl", "both"]).impl == "both"

    def rep(apply50: float, fail99: float) -> dict[str, object]:
        lat = {"p50": apply50, "p99": 2 * apply50}
        return {
            "commit_latency_ms": {"apply_broker_id": lat},
            "failover_ms": {"p50": fail99 / 2, "p99": fail99},
        }

    r = controller.ratios(rep(2.0, 1000.0), rep(1.0, 6000.0))
    assert r == {
        "apply_broker_id_p50": 0.5,
        "apply_broker_id_p99": 0.5,
        "failover_p50": 6.0,
        "failover_p99": 6.0,
    }
