"""PNG plots from the bounded series the availability analysis returns (never raw history).

latency-raw.png        sampled (invoke time, latency) points, log y, colour by outcome
latency-quantiles.png  p50/p95/p99/max per time bucket and function
rate.png               completions per second by function and outcome
availability.png       unavailability windows per function
All draw the fault windows as grey bands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLOURS = {"ok": "#81BFFC", "info": "#FFA400", "fail": "#FF1E90"}
MARKERS = {"send": "o", "poll": "^"}


def _bands(ax: Any, faults: list[dict[str, Any]]) -> None:
    for i, f in enumerate(faults[:64]):
        ax.axvspan(
            f["start_s"], f["stop_s"], color="0.85", zorder=0, label="fault" if i == 0 else None
        )


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw(results: dict[str, Any], out: Path) -> list[Path]:
    av = results.get("analyses", {}).get("availability")
    if not av or (av.get("valid") == "unknown" and not av.get("rate")):
        return []
    faults = av.get("faults", [])
    files = []

    fig, ax = plt.subplots(figsize=(10, 4))
    _bands(ax, faults)
    for f in ("send", "poll"):
        for o in ("ok", "info", "fail"):
            pts = [(t, ms) for ff, oo, t, ms in av["latency_points"] if ff == f and oo == o]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.scatter(
                    xs,
                    [max(y, 1e-3) for y in ys],
                    s=3,
                    c=COLOURS[o],
                    marker=MARKERS[f],
                    label=f"{f} {o}",
                    alpha=0.7,
                    linewidths=0,
                )
    ax.set_yscale("log")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"latency (ok ops sampled 1 in {av['latency_points_every']}; all failures)")
    ax.legend(loc="upper right", fontsize=7, markerscale=3)
    files.append(_save(fig, out / "latency-raw.png"))

    fig, ax = plt.subplots(figsize=(10, 4))
    _bands(ax, faults)
    for f, ls in (("send", "-"), ("poll", "--")):
        rows = [r for r in av["latency_quantiles"] if r["f"] == f]
        if not rows:
            continue
        ts = [r["t_s"] for r in rows]
        for q, col in (("p50", "C0"), ("p95", "C1"), ("p99", "C2"), ("max", "C3")):
            ax.plot(ts, [max(r[q], 1e-3) for r in rows], ls, color=col, label=f"{f} {q}", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"latency quantiles per {av['bucket_s']:.0f} s bucket (ok ops)")
    ax.legend(loc="upper right", fontsize=7, ncol=2)
    files.append(_save(fig, out / "latency-quantiles.png"))

    fig, ax = plt.subplots(figsize=(10, 4))
    _bands(ax, faults)
    series: dict[tuple[str, str], dict[float, float]] = {}
    for r in av["rate"]:
        series.setdefault((r["f"], r["outcome"]), {})[r["t_s"]] = r["per_s"]
    for (f, o), d in sorted(series.items()):
        ts = sorted(d)
        ax.plot(
            ts,
            [d[t] for t in ts],
            # failures are sparse: points only, a line would invent values between them
            (".-" if f == "send" else ".--") if o == "ok" else ".",
            color=COLOURS.get(o, "k"),
            label=f"{f} {o}",
            lw=1,
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("completions / s")
    ax.set_title(f"throughput ({av['rate_bucket_s']:g} s buckets)")
    ax.legend(loc="upper right", fontsize=7)
    files.append(_save(fig, out / "rate.png"))

    fig, ax = plt.subplots(figsize=(10, 2.8))
    _bands(ax, faults)
    end = av["span_s"]
    for y, f in enumerate(("send", "poll")):
        x = av.get("per_f", {}).get(f)
        if not x:
            continue
        spans = [
            (w["start_s"], (w["end_s"] if w["end_s"] is not None else end) - w["start_s"])
            for w in x["windows"][:5000]
        ]
        ax.broken_barh(spans, (y - 0.3, 0.6), color="#FF1E90")
    ax.set_yticks([0, 1], ["send", "poll"])
    ax.set_xlim(0, max(end, 1e-3))
    ax.set_xlabel("time (s)")
    ax.set_title(f"unavailability windows (resolution {av['bin_ms']:.0f} ms)")
    files.append(_save(fig, out / "availability.png"))
    return files


NAN = float("nan")
ROLE_COLOURS = {"MASTER": "#1f77b4", "SLAVE": "#aec7e8", "NONE": "#d9d9d9"}


def _runs(ts: list[float], vals: list[Any]) -> list[tuple[float, float, Any]]:
    """(start, width, value) of the runs of equal values; a point lasts until the next."""
    out: list[tuple[float, float, Any]] = []
    for i, (t, v) in enumerate(zip(ts, vals, strict=True)):
        end = ts[i + 1] if i + 1 < len(ts) else t + (ts[i] - ts[i - 1] if i else 1.0)
        if out and out[-1][2] == v and abs(out[-1][0] + out[-1][1] - t) < 1e-9:
            out[-1] = (out[-1][0], end - out[-1][0], v)
        else:
            out.append((t, end - t, v))
    return out


def draw_cluster(results: dict[str, Any], out: Path) -> list[Path]:
    """cluster-metrics.png: the cluster's own metrics scraped by the bench (roles per broker
    and controller leadership, epoch, SyncStateSet size, replication lag), under the fault
    bands; nothing when the run has no metrics.jsonl."""
    from rmq_check import clustermetrics

    cm = results.get("cluster_metrics")
    if not cm or not cm.get("nodes"):
        return []
    av = results.get("analyses", {}).get("availability") or {}
    faults = av.get("faults", [])
    brokers = clustermetrics.brokers(cm)
    ctls = clustermetrics.controllers(cm)
    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    ax = axes[0]
    _bands(ax, faults)
    rows = brokers + ctls
    for y, node in enumerate(rows):
        s = cm["nodes"][node]
        if node in brokers:
            vals = [r if u else "down" for r, u in zip(s["role"], s["up"], strict=True)]
        else:
            vals = [
                ("LEADER" if v == 1 else "follower") if u else "down"
                for v, u in zip(s["raft_leader"], s["up"], strict=True)
            ]
        colours = ROLE_COLOURS | {"down": "#FF1E90", "LEADER": "#2ca02c", "follower": "#c7e9c0"}
        for start, width, v in _runs(s["t_s"], vals):
            ax.broken_barh([(start, width)], (y - 0.35, 0.7), color=colours.get(v, "#d9d9d9"))
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title(
        "roles (brokers: dark MASTER, light SLAVE; controllers: green leader; pink: not scraped)"
    )
    for key, ax, title in (
        ("epoch", axes[1], "master epoch per broker"),
        ("sync_state_set_size", axes[2], "SyncStateSet size (as each master sees it)"),
    ):
        _bands(ax, faults)
        for node in brokers:
            s = cm["nodes"][node]
            # NaN where a broker did not answer or had no value: the line breaks there
            # instead of joining two points across the gap.
            ys = [
                v if u and v is not None and (key != "sync_state_set_size" or v > 0) else NAN
                for v, u in zip(s[key], s["up"], strict=True)
            ]
            if any(y == y for y in ys):
                ax.step(s["t_s"], ys, where="post", label=node, lw=1)
        ax.set_title(title)
        if brokers:
            ax.legend(loc="upper left", fontsize=7, ncol=3)
    ax = axes[3]
    _bands(ax, faults)
    for node in brokers:
        s = cm["nodes"][node]
        for rid, col in sorted(s["lag"].items()):
            ys = [NAN if v is None else v for v in col]
            if any(y == y for y in ys):
                ax.plot(s["t_s"], ys, lw=1, label=f"{node} -> replica {rid}")
    ax.set_yscale("symlog", linthresh=1024)
    ax.set_ylabel("bytes")
    ax.set_xlabel("time (s)")
    ax.set_title("replication lag (master's view per replica)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=7, ncol=2)
    return [_save(fig, out / "cluster-metrics.png")]
