"""The synthetic generator's known answers: a clean history checks clean, and a history with
a known number of every anomaly injected reports exactly those numbers (JSONL and Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rmq_check.synth import Anomalies, Synth, expected, generate

pytestmark = pytest.mark.timeout(240)


def counts(res: dict[str, Any]) -> dict[str, int]:
    a = res["analyses"]
    o = a["ordering"]
    m = a["metadata"]
    return {
        "lost": a["lost"]["count"],
        "lost-write": a["lost-write"]["count"],
        "unseen-by-group": a["lost"]["unseen_by_group"],
        "unexpected": a["unexpected"]["count"],
        "duplicated": a["duplicated"]["count"],
        "redelivered": a["duplicated"]["redelivered"],
        "at-two-positions": a["duplicated"]["at_two_positions"],
        "inconsistent-offsets": a["inconsistent-offsets"]["count"],
        "ordering": o["count"],
        "nonmonotonic": o["nonmonotonic"]["count"],
        "poll-skip": o["poll_skip"]["count"],
        "aborted-read": a["aborted-read"]["count"],
        "recovered": a["recovered"]["count"],
        "epoch-backwards": m["epoch_backwards"]["count"],
        "two-masters": m["two_masters"]["count"],
        "metadata": m["count"],
    }


def run(spark: Any, d: Path) -> dict[str, Any]:
    from rmq_check.check import check
    from rmq_check.load import load

    return check(load(spark, d))


def test_clean_history_is_valid(spark, tmp_path):
    s = generate(Synth(ops=20_000, faults=2, seed=3), tmp_path / "history.parquet")
    res = run(spark, tmp_path)
    assert counts(res) == s.expected == {k: 0 for k in s.expected}
    assert res["valid"] is True and res["safety_failed"] == []
    assert res["guarantee"] == "exactly-once"
    assert res["stats"]["ops"] == s.ops
    av = res["analyses"]["availability"]
    # each fault window's failing blocks make one send window that recovers inside the fault
    rto = av["per_f"]["send"]["rto"]
    assert [w["outcome"] for w in rto] == ["recovered-during-fault"] * 2
    assert av["per_f"]["send"]["unexpected_windows"] == 0
    assert res["analyses"]["metadata"]["valid"] is True
    assert res["analyses"]["ordering"]["key_order"]["keys_checked"] == 32


@pytest.mark.parametrize(
    "suffix, n, ops",
    [("parquet", 3, 20_000), ("jsonl", 1, 8_000)],
)
def test_injected_anomalies_are_counted_exactly(spark, tmp_path, suffix, n, ops):
    a = Anomalies(**{k: n for k in Anomalies.__dataclass_fields__})
    s = generate(Synth(ops=ops, anomalies=a, seed=11), tmp_path / f"history.{suffix}")
    res = run(spark, tmp_path)
    assert counts(res) == s.expected == expected(a)
    assert set(res["safety_failed"]) == {
        "lost",
        "lost-write",
        "unexpected",
        "inconsistent-offsets",
        "ordering",
        "aborted-read",
        "metadata",
    }
    assert res["guarantee"] == "none"  # lost and duplicated both


def test_baseline_agrees_with_the_injected_counts(tmp_path):
    from rmq_check import baseline

    a = Anomalies(lost_tail=2, lost_write=3, dup_redeliver=4, dup_offset=1, nonmonotonic=2)
    s = generate(Synth(ops=20_000, anomalies=a), tmp_path / "history.parquet")
    b = baseline.lost_duplicated(tmp_path / "history.parquet")
    assert (b["lost"], b["duplicated"]) == (s.expected["lost"], s.expected["duplicated"])
    assert b["ops"] == s.ops
