"""Issue 17: `rmq-ha campaign compare`'s figures, from what two runs wrote: time from each fault
to the first acknowledged send, availability through each fault window, the checker's anomaly
counts, and the page linking both runs' reports."""

from __future__ import annotations

import json

import pytest
from rmq_jepsen.compare import SendOp, anomalies, fault_windows, write_report

pytestmark = pytest.mark.timeout(60)

S = 1_000_000_000


def test_first_acknowledged_send_after_a_fault_and_its_windows_availability():
    done = [
        SendOp(1 * S, True),
        SendOp(10 * S + 100, False),
        SendOp(11 * S, False),
        SendOp(12 * S + S // 2, True),  # the first ok 2.5 s after the fault took effect
        SendOp(13 * S, True),
        SendOp(25 * S, True),  # after the window
    ]
    faults = [
        {
            "fault_id": 1,
            "variant": "kill-master",
            "start_ns": 9 * S,
            "applied_ns": 10 * S,
            "stop_ns": 14 * S,
            "detail": "kill -9 ['broker-a-0']",
        },
        {"fault_id": 2, "variant": "pause-master", "start_ns": 30 * S, "stop_ns": 32 * S},
    ]
    w1, w2 = fault_windows(faults, done)
    assert w1["first_ok_s"] == 2.5 and w1["window_s"] == 4.0
    assert w1["ok_fraction"] == 0.5  # 2 of the 4 sends completed in the window
    assert w1["seconds_with_ok"] == 0.5  # seconds 2 and 3 of 0..3
    # no send after the second fault: no first ok, no completions to count
    assert (w2["first_ok_s"], w2["ok_fraction"], w2["seconds_with_ok"]) == (None, None, 0.0)


def test_anomaly_counts_show_the_key_analyses_and_any_invalid_one():
    results = {
        "analyses": {
            "lost": {"valid": True, "count": 0},
            "duplicated": {"valid": False, "count": 3},
            "ordering": {"valid": "unknown", "count": 0},
            "aborted-read": {"valid": False, "count": 1},
            "availability": {"valid": True, "count": 2},
        }
    }
    assert anomalies(results) == {"lost": 0, "duplicated": 3, "aborted-read": 1}
    assert anomalies({}) == {}


def _run(d, verdict, sends):
    d.mkdir(parents=True)
    faults = [{"fault_id": 1, "variant": "kill-master", "applied_ns": 2 * S, "stop_ns": 4 * S}]
    (d / "summary.json").write_text(json.dumps({"verdict": verdict, "faults": faults}))
    (d / "results.json").write_text(json.dumps({"analyses": {"lost": {"valid": True, "count": 0}}}))
    (d / "report.html").write_text("<html></html>")
    lines = []
    for i, (t, typ) in enumerate(sends):
        lines.append(
            json.dumps(
                {
                    "index": 2 * i,
                    "time_ns": t - 1,
                    "process": 0,
                    "node": None,
                    "type": "invoke",
                    "f": "send",
                    "value": {"topic": "T", "value": i},
                    "error": None,
                    "definite": None,
                }
            )
        )
        lines.append(
            json.dumps(
                {
                    "index": 2 * i + 1,
                    "time_ns": t,
                    "process": 0,
                    "node": None,
                    "type": typ,
                    "f": "send",
                    "value": {"topic": "T", "value": i},
                    "error": None,
                    "definite": None,
                }
            )
        )
    (d / "history.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_the_report_links_both_runs_and_tabulates_them(tmp_path):
    a = _run(tmp_path / "rmq_ha" / "r1", "valid", [(1 * S, "ok"), (2 * S + S // 10, "ok")])
    b = _run(
        tmp_path / "rocketmq" / "r1", "valid", [(1 * S, "ok"), (3 * S, "fail"), (3 * S + 1, "ok")]
    )
    page = write_report({"rmq_ha": a, "rocketmq": b}, tmp_path, {"seed": 7})
    text = page.read_text()
    assert 'href="rmq_ha/r1/report.html"' in text and 'href="rocketmq/r1/report.html"' in text
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["meta"] == {"seed": 7}
    ra, rb = data["runs"]["rmq_ha"], data["runs"]["rocketmq"]
    assert (ra["acknowledged_sends"], rb["acknowledged_sends"], rb["sends"]) == (2, 2, 3)
    assert ra["faults"][0]["first_ok_s"] == 0.1
    assert rb["faults"][0]["first_ok_s"] == 1.0
    assert rb["faults"][0]["ok_fraction"] == 0.5
