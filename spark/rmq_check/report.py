"""report.html: the verdict table, the plots and the examples, in one static page."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rmq_check.analyses import NAMES, SAFETY

CSS = """
body{font-family:sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
.true{background:#d6f5d6}.false{background:#f8c8c8}.unknown{background:#f5ecc4}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}img{max-width:100%}
"""


def _cls(v: Any) -> str:
    return "true" if v is True else "false" if v is False else "unknown"


def _summary(name: str, r: dict[str, Any]) -> str:
    if name == "duplicated":
        return f"rate {r['rate']:.3g}; guarantee: {r['guarantee']}"
    if name == "lost":
        return (
            f"of {r['acknowledged']} acknowledged; drained: {r['drained']}; "
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
    return str(r.get("reason", ""))


def write(results: dict[str, Any], out: Path, images: list[str]) -> Path:
    a = results["analyses"]
    rows = []
    for n in NAMES:
        if n not in a:
            continue
        r = a[n]
        rows.append(
            f"<tr><td>{n}</td><td class='{_cls(r['valid'])}'>{html.escape(str(r['valid']))}</td>"
            f"<td>{r['count']}</td><td>{'yes' if n in SAFETY else 'no'}</td>"
            f"<td>{html.escape(_summary(n, r))}</td></tr>"
        )
    st = results.get("stats", {})
    verdict = "VALID" if results.get("valid") else "INVALID: " + ", ".join(results["safety_failed"])
    ex_blocks = []
    for n in NAMES:
        r = a.get(n)
        if not r or not r.get("examples"):
            continue
        body = json.dumps(r["examples"], indent=1, default=str)
        ex_blocks.append(f"<h3>{n}</h3><pre>{html.escape(body)}</pre>")
    imgs = "".join(f"<h3>{i}</h3><img src='{i}' alt='{i}'>" for i in images)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rmq-ha check</title>
<style>{CSS}</style></head><body>
<h1>rmq-ha check: <span class='{_cls(results.get("valid"))}'>{html.escape(verdict)}</span></h1>
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
