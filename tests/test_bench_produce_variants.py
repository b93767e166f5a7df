"""`rmq-ha bench produce` variants (rmq_ha with a setting on, measured against plain rmq_ha in
the same run): the ratio per case and the headline's goal (issue 20: metrics on >= 0.97x)."""

from __future__ import annotations

from typing import Any

from rmq_jepsen.bench.produce import IMPLS, VARIANTS, variant_ratios


def case(size: int, batch: int, **msgs: int) -> dict[str, Any]:
    return {"size": size, "batch": batch, **{k: {"msgs_per_s": v} for k, v in msgs.items()}}


def test_every_variant_is_a_known_impl_with_broker_conf_lines() -> None:
    """Each variant is an impl with key=value broker.conf lines (the security variants build
    theirs per run, with their files, and list none here)."""
    for name, (conf, goal) in VARIANTS.items():
        assert name in IMPLS and name.startswith("rmq_ha+")
        assert all("=" in line for line in conf)
        assert conf or "+acl" in name or "+tls" in name, name
        assert 0 < goal <= 1


def test_variant_ratios_per_case_and_headline_goal() -> None:
    m = "rmq_ha+metrics"
    cases = [
        case(1024, 1, rmq_ha=10000, **{m: 9800}),
        case(1024, 32, rmq_ha=100000, **{m: 90000}),
    ]
    got = variant_ratios(cases, ["rmq_ha", m])[m]
    assert got["vs_rmq_ha"] == {"1024x1": 0.98, "1024x32": 0.9}
    assert got["ratio_1k_single_vs_rmq_ha"] == 0.98 and got["goal_met"] is True
    cases[0][m]["msgs_per_s"] = 9600
    assert variant_ratios(cases, ["rmq_ha", m])[m]["goal_met"] is False


def test_a_failed_side_or_no_plain_run_gives_no_ratio() -> None:
    m = "rmq_ha+metrics"
    failed = [case(1024, 1, rmq_ha=10000, **{m: 0})]
    got = variant_ratios(failed, ["rmq_ha", m])[m]
    assert got["ratio_1k_single_vs_rmq_ha"] is None and got["goal_met"] is None
    assert "note" in variant_ratios(failed, [m])[m]
    assert variant_ratios(failed, ["rmq_ha", "rocketmq"]) == {}
