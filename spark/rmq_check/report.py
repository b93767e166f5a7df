"""report.html: the verdict table, the plots and the examples, in one static page."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rmq_check.analyses import NAMES

CSS = """
body{font-family:sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
.true{background:#d6f5d6}.false{background:#f8c8c8}.unknown{background:#f5ecc4}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}img{max-width:100%}
"""


def _cls(v: Any) -> str:
    return "true" if v is True else "false" if v is False else "unknown"


def verdict_line(results: dict[str, Any]) -> str:
    """VALID, INVALID: <failed analyses>, or UNKNOWN (the history cannot decide)."""
    v = results.get("valid")
    if v is True:
        return "VALID"
    if v is False:
        return "INVALID: " + ", ".join(results["safety_failed"])
    return "UNKNOWN"


def shown_valid(r: dict[str, Any]) -> str:
    """The table's valid cell: an analysis with nothing to look at says so."""
    return "n/a" if r.get("applies") is False else str(r["valid"])


def _summary(name: str, r: dict[str, Any]) -> str:
    if name == "duplicated":
        return f"rate {r['rate']:.3g}; guarantee: {r['guarantee']}"
    if name == "lost":
        return (
            f"of {r['acknowledged']} acknowledged; definite {r['definite']}, undecided "
            f"{r['undecided']}; drained completely: {r['drained']}; "
            f"unseen by a consumer group: {r['unseen_by_group']}; "
            f"lost with non-OK status: {r['lost_non_ok_status']}"
        )
    if name == "ordering":
        nm, ps = r["nonmonotonic"], r["poll_skip"]
        return (
            f"key order: {r['key_order'].get('keys_checked', 0)} keys checked; "
            f"nonmonotonic {nm['count']}, poll-skip {ps['count']} (reported, not safety)"
        )
    if name == "recovered":
        return f"of {r['indeterminate']} indeterminate sends"
    if name == "availability" and "per_f" in r:
        parts = []
        for f, x in r["per_f"].items():
            rtos = [w["rto_ms"] for w in x["rto"] if w.get("rto_ms") is not None]
            worst = f", worst RTO {max(rtos):.0f} ms" if rtos else ""
            parts.append(
                f"{f}: {len(x['windows'])} windows, {x['unavailable_ms']:.0f} ms unavailable"
                f"{worst}, {x['not_recovered']} not recovered"
            )
        return "; ".join(parts)
    if name == "metadata" and "observations" in r:
        return (
            f"{r['observations']} observations; epoch backwards {r['epoch_backwards']['count']}, "
            f"two masters {r['two_masters']['count']}"
        )
    if name == "delay" and "lateness_ms" in r:
        return f"{r['delayed_sends']} delayed sends; " + delay_line(r)
    if name == "transaction" and "transactions" in r:
        return (
            f"{r['transactions']} transactions: {r['committed']} committed, "
            f"{r['rolled_back']} rolled back ({r['resolved_by_check']['commit']} + "
            f"{r['resolved_by_check']['rollback']} resolved by checks), {r['failed']} failed, "
            f"{r['indeterminate']} indeterminate; lost {r['lost']['count']}, delivered "
            f"though not committed {r['unexpected']['count']}, duplicated "
            f"{r['duplicated']['count']} (reported)"
        )
    if name == "pop" and "redelivery" in r:
        return pop_line(r)
    return str(r.get("reason", ""))


def _ms(x: Any) -> str:
    return "-" if x is None else f"{x:.0f} ms"


def delay_line(r: dict[str, Any]) -> str:
    """Lateness of delayed messages (reported, not safety) and the early / lost counts."""
    q = r["lateness_ms"]
    return (
        f"lateness over due (first delivery to a consumer group, {q['count']} values): "
        f"p50 {_ms(q['p50'])}, p99 {_ms(q['p99'])}, max {_ms(q['max'])}; "
        f"early {r['early']['count']} (tolerance {r['early']['tolerance_ms']:.0f} ms), "
        f"lost {r['lost']['count']}, only read by the drain {r['delivered_only_by_drain']}"
    )


def pop_line(r: dict[str, Any]) -> str:
    rd = r["redelivery"]
    return (
        f"{r['acknowledged']} acknowledged sends, {r['acked_by_consumer']} acked by a pop "
        f"consumer; never acked {r['lost']['count']}, unexpected {r['unexpected']['count']}; "
        f"redelivered {rd['values']} values ({rd['excess_pops']} extra pops, "
        f"{rd['after_ack']} after an ack, {rd['after_change_invisible']} after a change of "
        f"invisible time; expected, not an anomaly)"
    )


def write(results: dict[str, Any], out: Path, images: list[str]) -> Path:
    a = results["analyses"]
    safety = set(results.get("safety", []))
    rows = []
    for n in NAMES:
        if n not in a:
            continue
        r = a[n]
        rows.append(
            f"<tr><td>{n}</td><td class='{_cls(r['valid'])}'>{html.escape(shown_valid(r))}</td>"
            f"<td>{r['count']}</td><td>{'yes' if n in safety else 'no'}</td>"
            f"<td>{html.escape(_summary(n, r))}</td></tr>"
        )
    st = results.get("stats", {})
    verdict = verdict_line(results)
    why = "".join(
        f"<p class='unknown'>unknown because {html.escape(w)}</p>"
        for w in results.get("unknown_because", [])
    )
    ex_blocks = []
    for n in NAMES:
        r = a.get(n)
        if not r or not r.get("examples"):
            continue
        body = json.dumps(r["examples"], indent=1, default=str)
        ex_blocks.append(f"<h3>{n}</h3><pre>{html.escape(body)}</pre>")
    imgs = "".join(f"<h3>{i}</h3><img src='{i}' alt='{i}'>" for i in images)
    cm = results.get("cluster_metrics")
    if cm:
        up = sum(u for s in cm["nodes"].values() for u in s["up"])
        total = sum(len(s["up"]) for s in cm["nodes"].values())
        note = (
            f"<p>Cluster metrics (cluster-metrics.png): {total} scrapes of "
            f"{len(cm['nodes'])} roles by the bench, {total - up} unanswered"
            + (f", {cm['bad_lines']} malformed lines skipped" if cm["bad_lines"] else "")
            + (", file truncated" if cm["truncated"] else "")
            + ". They are the cluster's own view and do not enter the verdict.</p>"
        )
        imgs = note + imgs
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rmq-ha check</title>
<style>{CSS}</style></head><body>
<h1>rmq-ha check: <span class='{_cls(results.get("valid"))}'>{html.escape(verdict)}</span></h1>
{why}
<p>{st.get("ops", 0)} ops; delivery guarantee: <b>{html.escape(str(results.get("guarantee")))}</b>.
Definitions: docs/checker.md. Raw numbers: <a href="results.json">results.json</a>.</p>
<table><tr><th>analysis</th><th>valid</th><th>count</th><th>safety</th><th>detail</th></tr>
{"".join(rows)}</table>
<h2>Plots</h2>{imgs}
<h2>Examples</h2>{"".join(ex_blocks) or "<p>none</p>"}
</body></html>
"""
    p = out / "report.html"
    p.write_text(page)
    return p
