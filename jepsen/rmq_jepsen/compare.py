"""`rmq-ha campaign compare`: one schedule (same seed, so the same fault times and the same
workload) run against rmq_ha and then against real Apache RocketMQ, and one report beside the
two runs: `<store>/compare-<stamp>/compare.html` (and compare.json) linking both runs'
report.html, with per database the checker's verdict and anomaly counts, and per fault the time
from the fault to the first acknowledged send and the availability through its window.

The figures are computed from what each run wrote (summary.json's faults, history.jsonl's sends,
results.json's analyses) by pure functions (`fault_windows`, `anomalies`), so they can be
recomputed from any two run directories.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_jepsen.state import write_json_atomic

#: The analyses whose counts the table always shows (others only when not valid).
KEY_ANALYSES = ("lost", "duplicated", "unexpected", "inconsistent-offsets")


@dataclass(frozen=True)
class SendOp:
    """A completed send: when (history clock, ns) and whether it was acknowledged."""

    time_ns: int
    ok: bool


def sends(ops: Iterable[Any]) -> list[SendOp]:
    """The completions of send operations in a history (rmq_ha.history ops)."""
    return [
        SendOp(o.time_ns, o.type == "ok")
        for o in ops
        if o.f == "send" and o.type in ("ok", "fail", "info")
    ]


def fault_windows(faults: list[Mapping[str, Any]], done: list[SendOp]) -> list[dict[str, Any]]:
    """Per injected fault (summary.json's `faults`: applied_ns, stop_ns on the history's
    clock): the seconds from the fault taking effect to the first acknowledged send after it,
    the fraction of send completions in its window that were acknowledged, and the fraction
    of its whole seconds that saw at least one acknowledged send."""
    ok_times = sorted(s.time_ns for s in done if s.ok)
    out = []
    for f in faults:
        start = f.get("applied_ns") or f.get("start_ns")
        end = f.get("stop_ns")
        row: dict[str, Any] = {"fault_id": f.get("fault_id"), "variant": f.get("variant")}
        row["detail"] = f.get("detail", "")
        if start is None:
            out.append(row | {"first_ok_s": None, "ok_fraction": None, "seconds_with_ok": None})
            continue
        first = next((t for t in ok_times if t >= start), None)
        row["first_ok_s"] = None if first is None else round((first - start) / 1e9, 3)
        if end is None or end <= start:
            row |= {"ok_fraction": None, "seconds_with_ok": None}
            out.append(row)
            continue
        inside = [s for s in done if start <= s.time_ns < end]
        row["window_s"] = round((end - start) / 1e9, 3)
        row["ok_fraction"] = round(sum(s.ok for s in inside) / len(inside), 4) if inside else None
        secs = max(1, int((end - start) // 1_000_000_000))
        with_ok = {(t - start) // 1_000_000_000 for t in ok_times if start <= t < end}
        row["seconds_with_ok"] = round(len({s for s in with_ok if s < secs}) / secs, 4)
        out.append(row)
    return out


def anomalies(results: Mapping[str, Any]) -> dict[str, int]:
    """The checker's anomaly counts (results.json): the key analyses always, any other that
    is not valid."""
    out: dict[str, int] = {}
    for name, a in (results.get("analyses") or {}).items():
        if not isinstance(a, Mapping):
            continue
        if name in KEY_ANALYSES or a.get("valid") is False:
            out[name] = int(a.get("count") or 0)
    return out


def summarize_run(run_dir: Path) -> dict[str, Any]:
    """What the comparison shows of one run directory."""
    from rmq_ha import history

    summary = _load(run_dir / "summary.json")
    results = _load(run_dir / "results.json")
    hist = run_dir / "history.jsonl"
    done = sends(history.read(hist)) if hist.exists() else []
    return {
        "run_dir": str(run_dir),
        "verdict": summary.get("verdict"),
        "acknowledged_sends": sum(s.ok for s in done),
        "sends": len(done),
        "anomalies": anomalies(results),
        "faults": fault_windows(summary.get("faults") or [], done),
        "report": "report.html" if (run_dir / "report.html").exists() else None,
    }


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def render_html(
    runs: Mapping[str, Mapping[str, Any]], out_dir: Path, meta: Mapping[str, Any]
) -> str:
    """The comparison page: links to each run's report, the verdict table and the fault table."""
    e = html.escape
    names = sorted({k for r in runs.values() for k in r.get("anomalies", {})})
    head = "".join(f"<th>{e(n)}</th>" for n in names)
    rows = []
    for db, r in runs.items():
        link = ""
        if r.get("report"):
            rel = os.path.relpath(Path(r["run_dir"]) / r["report"], out_dir)
            link = f'<a href="{e(rel)}">report.html</a>'
        counts = "".join(f"<td>{r.get('anomalies', {}).get(n, '')}</td>" for n in names)
        rows.append(
            f"<tr><td>{e(db)}</td><td>{e(str(r.get('verdict')))}</td>"
            f"<td>{r.get('acknowledged_sends')}/{r.get('sends')}</td>{counts}<td>{link}</td></tr>"
        )
    frows = []
    for db, r in runs.items():
        for f in r.get("faults", []):
            frows.append(
                f"<tr><td>{e(db)}</td><td>{f.get('fault_id')}</td><td>{e(str(f.get('variant')))}"
                f"</td><td>{_fmt(f.get('window_s'))}</td><td>{_fmt(f.get('first_ok_s'))}</td>"
                f"<td>{_fmt(f.get('ok_fraction'))}</td><td>{_fmt(f.get('seconds_with_ok'))}</td>"
                f"<td>{e(str(f.get('detail', '')))}</td></tr>"
            )
    opts = e(json.dumps(meta, default=str))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>rmq-ha campaign compare"
        "</title><style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #999;padding:2px 6px}</style></head><body>"
        "<h1>Same schedule, two databases</h1>"
        f"<p>Options: <code>{opts}</code></p>"
        "<h2>Verdicts and anomaly counts</h2><table><tr><th>db</th><th>verdict</th>"
        f"<th>acknowledged/completed sends</th>{head}<th>run</th></tr>{''.join(rows)}</table>"
        "<h2>Faults</h2><p>first ok: seconds from the fault taking effect to the first "
        "acknowledged send; ok fraction: acknowledged share of the sends completed in the "
        "window; seconds with ok: share of the window's whole seconds with an acknowledged "
        "send.</p><table><tr><th>db</th><th>fault</th><th>variant</th><th>window s</th>"
        "<th>first ok s</th><th>ok fraction</th><th>seconds with ok</th><th>target</th></tr>"
        f"{''.join(frows)}</table></body></html>\n"
    )


def _fmt(x: Any) -> str:
    return "-" if x is None else str(x)


def write_report(runs: Mapping[str, Path], out_dir: Path, meta: Mapping[str, Any]) -> Path:
    """compare.json and compare.html in `out_dir` for the runs (db -> run directory)."""
    data = {db: summarize_run(d) for db, d in runs.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compare.json", {"meta": dict(meta), "runs": data})
    page = out_dir / "compare.html"
    page.write_text(render_html(data, out_dir, meta))
    return page


async def run_compare(opts: Any, dbs: tuple[str, ...] = ("rmq_ha", "rocketmq")) -> Path:
    """Runs the campaign `opts` (a CampaignOptions) once per database with one seed, one after
    the other, into <store>/compare-<stamp>/<db>/; returns the comparison page."""
    from rmq_jepsen.runner import check_options, run_campaign

    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    out_dir = Path(opts.store) / f"compare-{time.strftime('%Y%m%dT%H%M%S')}"
    per_db = [
        dataclasses.replace(opts, db=db, seed=seed, store=str(out_dir), test=db) for db in dbs
    ]
    for o in per_db:
        check_options(o)  # refuse before the first run, not between them
    runs: dict[str, Path] = {}
    for o in per_db:
        outcome = await run_campaign(o)
        runs[o.db] = outcome.run_dir
    meta = {
        "seed": seed,
        "topology": opts.topology,
        "nemesis": opts.nemesis,
        "workload": opts.workload,
        "time_s": opts.time_s,
        "hosts": opts.hosts,
    }
    return write_report(runs, out_dir, meta)
