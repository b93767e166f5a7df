"""The cluster's own metrics over a run (issue 20), for the report: `metrics.jsonl`, which the
bench writes beside the history (rmq_jepsen.scrape: one line per role and scrape, on the
history's clock), turned into bounded per-node series on the checker's time axis (seconds from
the first op, as the fault bands).

The file is the bench's, not part of the history the verdict is about: it changes no verdict.
A line that is not what the bench writes is counted in `bad_lines` (with the first few line
numbers) and skipped; the series keep at most `MAX_POINTS` points per node (evenly thinned).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

NAME = "metrics.jsonl"
MAX_POINTS = 5000
MAX_LINES = 2_000_000


def find(history: Path) -> Path | None:
    """metrics.jsonl of the run whose history is `history` (a file or a Parquet directory)."""
    for d in (history.parent, history) if history.is_dir() else (history.parent,):
        if (d / NAME).is_file():
            return d / NAME
    return None


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def load(path: Path, t0_ns: int) -> dict[str, Any]:
    """{"nodes": {node: {"t_s": [...], "up": [...], "role": [...], "epoch": [...],
    "sync_state_set_size": [...], "lag": {replica: [...]}, "raft_leader": [...]}},
    "lines", "bad_lines", "bad_examples", "truncated"}; a missing value is None."""
    nodes: dict[str, dict[str, Any]] = {}
    bad: list[int] = []
    n_bad = lines = 0
    truncated = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno > MAX_LINES:
                truncated = True
                break
            lines += 1
            try:
                rec = json.loads(raw)
                t = rec["time_ns"]
                node = rec["node"]
                up = rec["up"]
                m = rec.get("m", {})
                if (
                    not isinstance(t, int)
                    or isinstance(t, bool)
                    or not isinstance(node, str)
                    or up not in (0, 1)
                    or not isinstance(m, dict)
                ):
                    raise ValueError("bad field types")
            except (ValueError, KeyError, TypeError):
                n_bad += 1
                if len(bad) < 5:
                    bad.append(lineno)
                continue
            s = nodes.setdefault(
                node,
                {
                    "t_s": [],
                    "up": [],
                    "role": [],
                    "epoch": [],
                    "sync_state_set_size": [],
                    "raft_leader": [],
                    "lag": {},
                },
            )
            i = len(s["t_s"])
            s["t_s"].append((t - t0_ns) / 1e9)
            s["up"].append(up)
            role = m.get("rmq_ha_broker_role")
            s["role"].append(role if isinstance(role, str) else None)
            s["epoch"].append(_num(m.get("rmq_ha_broker_epoch")))
            s["sync_state_set_size"].append(_num(m.get("rmq_ha_sync_state_set_size")))
            s["raft_leader"].append(_num(m.get("rmq_ha_controller_raft_is_leader")))
            lag = m.get("rmq_ha_replication_lag_bytes")
            if isinstance(lag, dict):
                for rid, v in lag.items():
                    col = s["lag"].setdefault(str(rid), [None] * i)
                    col.append(_num(v))
            for col in s["lag"].values():
                if len(col) < i + 1:
                    col.append(None)
    for s in nodes.values():
        _thin(s)
    return {
        "nodes": dict(sorted(nodes.items())),
        "lines": lines,
        "bad_lines": n_bad,
        "bad_examples": bad,
        "truncated": truncated,
    }


def _thin(s: dict[str, Any]) -> None:
    n = len(s["t_s"])
    if n <= MAX_POINTS:
        return
    keep = [round(k * (n - 1) / (MAX_POINTS - 1)) for k in range(MAX_POINTS)]
    for key in ("t_s", "up", "role", "epoch", "sync_state_set_size", "raft_leader"):
        s[key] = [s[key][k] for k in keep]
    s["lag"] = {r: [col[k] for k in keep] for r, col in s["lag"].items()}


def brokers(cm: dict[str, Any]) -> list[str]:
    """Nodes that ever reported a broker role."""
    return [n for n, s in cm["nodes"].items() if any(r is not None for r in s["role"])]


def controllers(cm: dict[str, Any]) -> list[str]:
    return [n for n, s in cm["nodes"].items() if any(v is not None for v in s["raft_leader"])]
