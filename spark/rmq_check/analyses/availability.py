"""availability: unavailability windows, recovery time per fault window (RTO), latency
quantiles and throughput over time. Measured per client function (send, poll).

Definitions (times are the control node's ``time_ns``; ``t0`` is the first op's time):

* An op is *bad* if it completed ``fail`` or ``info`` (or never completed), *good* if ``ok``.
* Time is cut into bins of ``bin`` = max(``--bin-ms``, span / 50,000); per bin Spark returns the
  earliest and latest invoke of a bad op and the earliest completion of a good op invoked in
  the bin. Everything below is exact to within one bin.
* An unavailability window starts at the invoke time of a bad op that is not inside an earlier
  window, and ends at the earliest completion of a good op invoked in a later bin than that
  start (the system accepted new work and finished it). No such op: the window never ends
  ("not recovered"). Unlike OpenChaos, a good op invoked before the failure cannot end it.
* Per fault window [fault-start, fault-stop] (paired by fault_id; no stop = end of history):
  unavailability starts at the first bad invoke inside the fault window; RTO = the end of
  the unavailability window that contains it minus that start. Outcome: "available" (no bad
  op during the fault), "recovered-during-fault", "recovered-after-fault", "not-recovered".
* Windows starting outside every fault window are counted as unexpected unavailability.
* Latency = completion - invoke of ops that completed ok; quantiles 0.5/0.95/0.99/max per
  function, overall and per time bucket (max(1 s, span/300)), by Spark's percentile_approx (accuracy
  1/1000 of the rank). Throughput: completions per second by (function, outcome), in 1 s
  buckets (or ~100 buckets of at least 10 ms for a history shorter than a minute).

valid: false if a window of sends never ended, "unknown" without sends, else true. Not a
safety property.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.core import Frames

MAX_BINS = 50_000
MAX_POINTS = 20_000
QUANTILES = (0.5, 0.95, 0.99)
FS = ("send", "poll")


def completions(fr: Frames) -> DataFrame:
    """(f, outcome, inv_t, comp_t): sends from ``values``, the rest from ``pairs``.

    A transaction the producer rolled back completes ``fail`` (it must never be delivered),
    but the system did what was asked: for availability it counts as ``ok``."""
    c = F.col
    v = fr.values().where((c("inv") == 1) & c("v").isNotNull())
    outcome = F.when(c("ok") == 1, "ok").when(c("fail") == 1, "fail").otherwise("info")
    if fr.has_rollbacks():
        rb = fr.rollbacks().select("v", F.lit(True).alias("rolled_back"))
        v = v.join(rb, "v", "left")
        outcome = F.when(c("rolled_back"), "ok").otherwise(outcome)
    sends = v.select(F.lit("send").alias("f"), outcome.alias("outcome"), "inv_t", "comp_t")
    others = fr.pairs().select("f", c("type").alias("outcome"), "inv_t", "comp_t")
    return sends.unionByName(others)


#: More nemesis ops than this (a campaign writes hundreds) and the check refuses the history
#: rather than judge by some of them: the fault windows excuse early delayed reads, and a
#: window left open by an op past a cap excused them to the end (probe, session 17).
MAX_FAULT_OPS = 1_000_000


def faults(fr: Frames) -> list[dict[str, Any]]:
    """Fault windows from nemesis ops, paired by fault_id; one scan per check (kept on the
    Frames)."""
    if fr.fault_windows is None:
        fr.fault_windows = _faults(fr)
    return fr.fault_windows


def _faults(fr: Frames) -> list[dict[str, Any]]:
    """Each fault-start opens a window of its fault_id, closed by the next fault-stop of that
    id (in index order). A stop with no open window of its id closes nothing; a start while
    its id is open closes the open one there (ids are meant to be unique). Before, a second
    stop moved the window's end and a reused id replaced the earlier window, so a window
    could excuse reads after its fault had ended, or not excuse reads inside it (probe)."""
    rows = (
        fr.ops.where(F.col("process") < 0)
        .select(
            "index",
            "time_ns",
            "f",
            F.col("value.fault").alias("fault"),
            F.col("value.fault_id").alias("fault_id"),
            F.col("value.targets").alias("targets"),
        )
        .orderBy("index")
        .limit(MAX_FAULT_OPS + 1)  # one job: more than the bound is refused below
        .collect()
    )
    if len(rows) > MAX_FAULT_OPS:
        raise ValueError(
            f"more than {MAX_FAULT_OPS} nemesis operations (process < 0), the most this checker "
            "pairs into fault windows; split the history or raise MAX_FAULT_OPS"
        )
    t1 = fr.stats()["t1_ns"]
    done: list[dict[str, Any]] = []
    open_: dict[Any, dict[str, Any]] = {}
    for r in rows:
        if r["f"] == "fault-start":
            prev = open_.pop(r["fault_id"], None)
            if prev is not None:
                prev["stop_ns"] = int(r["time_ns"])
                done.append(prev)
            open_[r["fault_id"]] = {
                "fault_id": r["fault_id"],
                "fault": r["fault"],
                "targets": list(r["targets"] or []),
                "start_ns": int(r["time_ns"]),
                "stop_ns": None,
            }
        elif r["f"] == "fault-stop":
            w = open_.pop(r["fault_id"], None)
            if w is not None:
                w["stop_ns"] = max(int(r["time_ns"]), w["start_ns"])
                done.append(w)
    for w in done:
        w["open"] = False
    for w in open_.values():
        w["open"] = True
        w["stop_ns"] = t1
        done.append(w)
    return sorted(done, key=lambda w: (w["start_ns"], str(w["fault_id"])))


def _windows(bins: list[dict[str, Any]], bin_ns: int, t0: int) -> list[dict[str, Any]]:
    """Unavailability windows from per-bin aggregates, sorted by bin."""
    # suffix minimum of good completions over bins strictly after each bin
    after: list[int | None] = [None] * len(bins)
    best: int | None = None
    for i in range(len(bins) - 1, -1, -1):
        after[i] = best
        m = bins[i]["ok_min_c"]
        if m is not None and (best is None or m < best):
            best = m
    out: list[dict[str, Any]] = []
    cur_end: int | None = None
    for i, b in enumerate(bins):
        if b["bad_min"] is None:
            continue
        start = int(b["bad_min"])
        if cur_end is not None:
            if b["bad_max"] < cur_end:
                continue  # every bad op of the bin is inside the current window
            start = max(start, cur_end)
        end = after[i]
        out.append({"start_ns": start, "end_ns": end})
        if end is None:
            break
        cur_end = end
    for w in out:
        w["start_s"] = (w["start_ns"] - t0) / 1e9
        w["end_s"] = None if w["end_ns"] is None else (w["end_ns"] - t0) / 1e9
        w["duration_ms"] = None if w["end_ns"] is None else (w["end_ns"] - w["start_ns"]) / 1e6
    return out


def _rto(
    fault_windows: list[dict[str, Any]],
    bins: list[dict[str, Any]],
    windows: list[dict[str, Any]],
    t0: int,
) -> list[dict[str, Any]]:
    starts = [w["start_ns"] for w in windows]
    out = []
    for fw in fault_windows:
        fs, fe = fw["start_ns"], fw["stop_ns"]
        first_bad = None
        for b in bins:
            if b["bad_min"] is None or b["bad_max"] < fs or b["bad_min"] > fe:
                continue
            first_bad = max(int(b["bad_min"]), fs)
            break
        rec: dict[str, Any] = {
            "fault_id": fw["fault_id"],
            "fault": fw["fault"],
            "start_s": (fs - t0) / 1e9,
            "stop_s": (fe - t0) / 1e9,
        }
        if first_bad is None:
            rec |= {"outcome": "available", "rto_ms": None}
        else:
            i = bisect.bisect_right(starts, first_bad) - 1
            end = windows[i]["end_ns"] if i >= 0 else None
            if end is None:
                rec |= {"outcome": "not-recovered", "rto_ms": None}
            else:
                rec |= {
                    "outcome": "recovered-during-fault" if end <= fe else "recovered-after-fault",
                    "rto_ms": (end - first_bad) / 1e6,
                }
            rec["unavailable_from_s"] = (first_bad - t0) / 1e9
        out.append(rec)
    return out


def run(fr: Frames) -> dict[str, Any]:
    st = fr.stats()
    t0, t1 = int(st["t0_ns"]), int(st["t1_ns"])
    span = max(1, t1 - t0)
    bin_ns = max(fr.cfg.bin_ms * 1_000_000, math.ceil(span / MAX_BINS))
    bucket_ns = max(1_000_000_000, math.ceil(span / 300))
    c = F.col
    comp = completions(fr).where(c("f").isin(*FS))
    bad = c("outcome") != "ok"
    bin_rows = (
        comp.groupBy("f", F.floor((c("inv_t") - t0) / bin_ns).cast("long").alias("bin"))
        .agg(
            F.sum(F.when(~bad, 1).otherwise(0)).alias("ok"),
            F.sum(F.when(bad, 1).otherwise(0)).alias("bad"),
            F.min(F.when(bad, c("inv_t"))).alias("bad_min"),
            F.max(F.when(bad, c("inv_t"))).alias("bad_max"),
            F.min(F.when(~bad, c("comp_t"))).alias("ok_min_c"),
        )
        .collect()
    )
    bins: dict[str, list[dict[str, Any]]] = {f: [] for f in FS}
    for r in bin_rows:
        bins[r["f"]].append(r.asDict())
    fws = faults(fr)
    per_f: dict[str, Any] = {}
    for f in FS:
        bl = sorted(bins[f], key=lambda b: b["bin"])
        if not bl:
            continue
        ws = _windows(bl, bin_ns, t0)
        fault_iv = [(w["start_ns"], w["stop_ns"]) for w in fws]
        unexpected = [w for w in ws if not any(a <= w["start_ns"] <= b for a, b in fault_iv)]
        per_f[f] = {
            "windows": ws,
            "unavailable_ms": sum(w["duration_ms"] or 0.0 for w in ws),
            "not_recovered": sum(1 for w in ws if w["end_ns"] is None),
            "unexpected_windows": len(unexpected),
            "rto": _rto(fws, bl, ws, t0),
            "ok": sum(b["ok"] for b in bl),
            "bad": sum(b["bad"] for b in bl),
        }
    lat = comp.where(c("comp_t").isNotNull()).select(
        "f", "outcome", "inv_t", ((c("comp_t") - c("inv_t")) / 1e6).alias("ms")
    )
    overall = {
        r["f"]: {
            "n": int(r["n"]),
            **{f"p{int(q * 100)}": r["q"][i] for i, q in enumerate(QUANTILES)},
            "max": r["max"],
        }
        for r in lat.where(c("outcome") == "ok")
        .groupBy("f")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.percentile_approx("ms", list(QUANTILES), 1000).alias("q"),
            F.max("ms").alias("max"),
        )
        .collect()
    }
    quant = [
        {
            "f": r["f"],
            "t_s": r["b"] * bucket_ns / 1e9,
            **{f"p{int(q * 100)}": r["q"][i] for i, q in enumerate(QUANTILES)},
            "max": r["max"],
        }
        for r in lat.where(c("outcome") == "ok")
        .groupBy("f", F.floor((c("inv_t") - t0) / bucket_ns).cast("long").alias("b"))
        .agg(F.percentile_approx("ms", list(QUANTILES), 1000).alias("q"), F.max("ms").alias("max"))
        .orderBy("f", "b")
        .collect()
    ]
    # per second; a history shorter than a minute gets ~100 finer buckets (at least 10 ms)
    rate_ns = 1_000_000_000 if span >= 60e9 else max(10_000_000, span // 100)
    rate = [
        {
            "f": r["f"],
            "outcome": r["outcome"],
            "t_s": r["s"] * rate_ns / 1e9,
            "n": int(r["n"]),
            "per_s": r["n"] * 1e9 / rate_ns,
        }
        for r in comp.where(c("comp_t").isNotNull())
        .groupBy("f", "outcome", F.floor((c("comp_t") - t0) / rate_ns).cast("long").alias("s"))
        .agg(F.count(F.lit(1)).alias("n"))
        .orderBy("s", "f", "outcome")
        .collect()
    ]
    n_ok = sum(x["n"] for x in overall.values())
    every = max(1, n_ok // MAX_POINTS)
    pts = lat.where((c("outcome") != "ok") | (F.pmod(F.xxhash64("inv_t", "f"), F.lit(every)) == 0))
    points = [
        (r["f"], r["outcome"], (r["inv_t"] - t0) / 1e9, r["ms"])
        for r in pts.limit(2 * MAX_POINTS).collect()
    ]
    count = sum(len(x["windows"]) for x in per_f.values())
    if "send" not in per_f:
        valid: Any = UNKNOWN
    else:
        valid = per_f["send"]["not_recovered"] == 0
    return result(
        valid,
        count,
        [w | {"f": f} for f, x in per_f.items() for w in x["windows"][: fr.cfg.examples]],
        bin_ms=bin_ns / 1e6,
        bucket_s=bucket_ns / 1e9,
        rate_bucket_s=rate_ns / 1e9,
        t0_ns=t0,
        span_s=span / 1e9,
        faults=[
            w | {"start_s": (w["start_ns"] - t0) / 1e9, "stop_s": (w["stop_ns"] - t0) / 1e9}
            for w in fws
        ],
        per_f=per_f,
        latency_ms=overall,
        latency_quantiles=quant,
        rate=rate,
        latency_points=points,
        latency_points_every=every,
    )
