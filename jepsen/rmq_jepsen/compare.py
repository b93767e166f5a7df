"""`rmq-ha campaign compare`: one schedule (same seed, so the same fault times and the same
workload) run against rmq_ha and then against real Apache RocketMQ, and one report beside the
two runs: `<store>/compare-<stamp>/compare.html` (and compare.json) linking both runs'
report.html, with per database the checker's verdict and anomaly counts and the acknowledged
sends' latency percentiles, per fault the time from the fault to the first acknowledged send,
the availability through its window and the time from its heal until every SyncStateSet was
full again (the controller's samples, rmq_jepsen.syncstate), and both runs' acknowledged sends
per second and SyncStateSet size drawn on the same axes (inline SVG).

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

from rmq_jepsen import syncstate
from rmq_jepsen.state import write_json_atomic

#: The analyses whose counts the table always shows (others only when not valid).
KEY_ANALYSES = ("lost", "duplicated", "unexpected", "inconsistent-offsets")


@dataclass(frozen=True)
class SendOp:
    """A completed send: when (history clock, ns), whether it was acknowledged, and how long it
    took from its invoke (ns; None if the invoke is not in the history)."""

    time_ns: int
    ok: bool
    latency_ns: int | None = None


def sends(ops: Iterable[Any]) -> list[SendOp]:
    """The completions of send operations in a history (rmq_ha.history ops), each with its
    latency from the same process's invoke."""
    out = []
    invoked: dict[int, int] = {}
    for o in ops:
        if o.f != "send":
            continue
        if o.type == "invoke":
            invoked[o.process] = o.time_ns
        elif o.type in ("ok", "fail", "info"):
            start = invoked.pop(o.process, None)
            out.append(
                SendOp(o.time_ns, o.type == "ok", None if start is None else o.time_ns - start)
            )
    return out


def percentile(sorted_vals: list[int], q: float) -> int:
    """The nearest-rank percentile `q` (0-100] of a sorted non-empty list."""
    rank = max(1, -(-len(sorted_vals) * q // 100))
    return sorted_vals[min(len(sorted_vals), int(rank)) - 1]


def latency_summary(done: list[SendOp]) -> dict[str, Any]:
    """Acknowledged sends' latency percentiles in ms (p50, p95, p99, max), and their count."""
    lat = sorted(s.latency_ns for s in done if s.ok and s.latency_ns is not None)
    if not lat:
        return {"count": 0}
    out: dict[str, Any] = {"count": len(lat)}
    for name, q in (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("max", 100.0)):
        out[name] = round(percentile(lat, q) / 1e6, 2)
    return out


def ok_per_second(done: list[SendOp]) -> dict[int, int]:
    """Acknowledged sends per whole second of the history's clock."""
    out: dict[int, int] = {}
    for s in done:
        if s.ok:
            sec = s.time_ns // 1_000_000_000
            out[sec] = out.get(sec, 0) + 1
    return out


def fault_windows(
    faults: list[Mapping[str, Any]],
    done: list[SendOp],
    sync_states: list[dict[str, Any]] | None = None,
    groups: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Per injected fault (summary.json's `faults`: applied_ns, stop_ns on the history's
    clock): the seconds from the fault taking effect to the first acknowledged send after it,
    the fraction of send completions in its window that were acknowledged, the fraction
    of its whole seconds that saw at least one acknowledged send, and, given the controller's
    samples (syncstate.jsonl), the seconds from its heal until every group's SyncStateSet was
    full again (`full_sss_s`; None if it never was while sampled)."""
    ok_times = sorted(s.time_ns for s in done if s.ok)
    want = list(groups)
    out = []
    for f in faults:
        start = f.get("applied_ns") or f.get("start_ns")
        end = f.get("stop_ns")
        row: dict[str, Any] = {"fault_id": f.get("fault_id"), "variant": f.get("variant")}
        row["detail"] = f.get("detail", "")
        if sync_states and want and isinstance(end, int):
            row["full_sss_s"] = syncstate.full_again_s(sync_states, end, want)
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
    samples = syncstate.read(run_dir / "syncstate.jsonl")
    groups = sorted({g for x in samples for g in x.get("groups", {})})
    faults = summary.get("faults") or []
    return {
        "run_dir": str(run_dir),
        "verdict": summary.get("verdict"),
        "acknowledged_sends": sum(s.ok for s in done),
        "sends": len(done),
        "anomalies": anomalies(results),
        "latency_ms": latency_summary(done),
        "faults": fault_windows(faults, done, samples, groups),
        "report": "report.html" if (run_dir / "report.html").exists() else None,
        # Series for the plots (whole seconds of the history's clock).
        "ok_per_s": sorted(ok_per_second(done).items()),
        "sss_size": [
            (round(x["time_ns"] / 1e9, 2), min(len(v["in_sync"]) for v in x["groups"].values()))
            for x in samples
            if x.get("groups")
        ],
        "fault_spans_s": [
            (f["applied_ns"] / 1e9, f["stop_ns"] / 1e9)
            for f in faults
            if isinstance(f.get("applied_ns"), int) and isinstance(f.get("stop_ns"), int)
        ],
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
    """The comparison page: links to each run's report, the verdict, fault and latency tables,
    and both runs' acknowledged sends per second and SyncStateSet size on the same axes."""
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
                f"<td>{_fmt(f.get('full_sss_s'))}</td><td>{e(str(f.get('detail', '')))}</td></tr>"
            )
    lrows = []
    for db, r in runs.items():
        lat = r.get("latency_ms") or {}
        lrows.append(
            f"<tr><td>{e(db)}</td><td>{lat.get('count', 0)}</td>"
            + "".join(f"<td>{_fmt(lat.get(q))}</td>" for q in ("p50", "p95", "p99", "max"))
            + "</tr>"
        )
    bands = next((list(r.get("fault_spans_s") or []) for r in runs.values()), [])
    rate = svg_chart(
        {db: [(float(t), float(n)) for t, n in r.get("ok_per_s", [])] for db, r in runs.items()},
        bands,
        "acknowledged sends per second (grey: fault windows)",
        "sends / s",
    )
    sss_series = {db: list(r.get("sss_size") or []) for db, r in runs.items()}
    sss = (
        svg_chart(
            {db: [(float(t), float(n)) for t, n in v] for db, v in sss_series.items() if v},
            bands,
            "SyncStateSet size (smallest group), as the controller reports it",
            "in-sync replicas",
            step=True,
        )
        if any(sss_series.values())
        else "<p>No SyncStateSet samples (not a controller topology).</p>"
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
        "send; full SSS s: seconds from the heal until every group's SyncStateSet was full "
        "again (the controller's view, sampled twice a second; - if it never was while "
        "sampled).</p><table><tr><th>db</th><th>fault</th><th>variant</th><th>window s</th>"
        "<th>first ok s</th><th>ok fraction</th><th>seconds with ok</th><th>full SSS s</th>"
        f"<th>target</th></tr>{''.join(frows)}</table>"
        "<h2>Acknowledged send latency (ms, whole run)</h2><table><tr><th>db</th>"
        "<th>acknowledged</th><th>p50</th><th>p95</th><th>p99</th><th>max</th></tr>"
        f"{''.join(lrows)}</table><h2>Over time, same axes</h2>{rate}<br>{sss}</body></html>\n"
    )


def _fmt(x: Any) -> str:
    return "-" if x is None else str(x)


#: One colour per database, in the order the runs are given.
SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def svg_chart(
    series: Mapping[str, list[tuple[float, float]]],
    bands: list[tuple[float, float]],
    title: str,
    ylabel: str,
    *,
    width: int = 900,
    height: int = 260,
    step: bool = False,
) -> str:
    """An inline SVG line chart of `series` (name -> (x seconds, y) points) on one pair of axes,
    with `bands` (x spans: the fault windows) shaded grey. Pure, no plotting library."""
    e = html.escape
    pts = [p for ps in series.values() for p in ps]
    x_hi = max([p[0] for p in pts] + [b[1] for b in bands] + [1.0])
    y_hi = max([p[1] for p in pts] + [1.0]) * 1.1
    left, right, top, bottom = 55, 120, 24, 34
    pw, ph = width - left - right, height - top - bottom

    def x(v: float) -> float:
        return left + pw * v / x_hi

    def y(v: float) -> float:
        return top + ph * (1 - v / y_hi)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="15" font-size="13">{e(title)}</text>',
    ]
    for lo, hi in bands:
        parts.append(
            f'<rect x="{x(lo):.1f}" y="{top}" width="{max(x(hi) - x(lo), 1):.1f}" '
            f'height="{ph}" fill="#ddd"><title>fault {lo:.1f}-{hi:.1f} s</title></rect>'
        )
    parts.append(
        f'<polyline fill="none" stroke="#000" points="{left},{top} {left},{top + ph} '
        f'{left + pw},{top + ph}"/>'
    )
    for i in range(5):
        xv, yv = x_hi * i / 4, y_hi * i / 4
        parts.append(
            f'<text x="{x(xv):.1f}" y="{top + ph + 14}" text-anchor="middle">{xv:.0f}</text>'
        )
        parts.append(f'<text x="{left - 4}" y="{y(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
    parts.append(
        f'<text x="{left + pw / 2:.0f}" y="{height - 4}" text-anchor="middle">time (s)</text>'
        f'<text x="12" y="{top + ph / 2:.0f}" transform="rotate(-90 12 {top + ph / 2:.0f})" '
        f'text-anchor="middle">{e(ylabel)}</text>'
    )
    for i, (name, ps) in enumerate(series.items()):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        coords: list[str] = []
        prev: float | None = None
        for px, py in sorted(ps):
            if step and prev is not None:
                coords.append(f"{x(px):.1f},{y(prev):.1f}")  # hold the last value until now
            coords.append(f"{x(px):.1f},{y(py):.1f}")
            prev = py
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
            f'points="{" ".join(coords)}"/>'
        )
        parts.append(
            f'<text x="{left + pw + 8}" y="{top + 14 * (i + 1)}" fill="{colour}">{e(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


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
