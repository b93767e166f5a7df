"""Run every analysis over one history and write results.json, plots and report.html."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from rmq_check import validate
from rmq_check.analyses import (
    NAMES,
    SAFETY,
    UNKNOWN,
    aborted,
    availability,
    delay,
    duplicated,
    lost,
    lost_write,
    metadata,
    offsets,
    ordering,
    pop,
    recovered,
    transaction,
    unexpected,
)
from rmq_check.core import Config, Frames

ANALYSES: dict[str, Callable[[Frames], dict[str, Any]]] = {
    "lost": lost.run,
    "lost-write": lost_write.run,
    "unexpected": unexpected.run,
    "duplicated": duplicated.run,
    "inconsistent-offsets": offsets.run,
    "ordering": ordering.run,
    "aborted-read": aborted.run,
    "recovered": recovered.run,
    "availability": availability.run,
    "metadata": metadata.run,
    "delay": delay.run,
    "transaction": transaction.run,
    "pop": pop.run,
}
assert tuple(ANALYSES) == NAMES

TRACE_LIMIT = 12  # history ops shown per example value
#: what a traced op shows of the value (or message) beside its index, process, type and f
TRACE_FIELDS = (
    "topic",
    "broker",
    "queue_id",
    "queue_offset",
    "status",
    "group",
    "txn",
    "delay_ms",
)
#: analyses whose examples name a value as "v"
VALUE_EXAMPLES = (
    "lost",
    "lost-write",
    "unexpected",
    "duplicated",
    "aborted-read",
    "recovered",
    "delay",
    "transaction",
    "pop",
)


def safety_names(cfg: Config) -> list[str]:
    """The analyses whose failure fails the run in this mode (the table's "safety" column)."""
    return [n for n in NAMES if n in SAFETY or (n == "duplicated" and cfg.exactly_once)]


def applies(r: dict[str, Any]) -> bool:
    """False when the history holds nothing the analysis looks at (no metadata ops, no
    delayed sends, ...): its "unknown" then decides nothing."""
    return bool(r.get("applies", True))


def safety_failures(results: dict[str, Any], cfg: Config) -> list[str]:
    return [n for n in safety_names(cfg) if n in results and results[n]["valid"] is False]


def safety_undecided(results: dict[str, Any], cfg: Config) -> list[str]:
    return [
        n
        for n in safety_names(cfg)
        if n in results and results[n]["valid"] == UNKNOWN and applies(results[n])
    ]


def verdict(results: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """The run's verdict from its analyses, the one rule the table and the summary share:
    false if a safety analysis failed; "unknown" if one that applies could not decide, or
    the history cannot show loss (no operations, nothing acknowledged, no complete final
    drain); true otherwise."""
    a = results["analyses"]
    failed = safety_failures(a, cfg)
    undecided = safety_undecided(a, cfg)
    why = list(results.get("unknown_because", []))
    for n in undecided:
        r = a[n]
        extra = ""
        if n in ("lost", "lost-write") and r.get("undecided"):
            extra = (
                f" ({r['undecided']} unread acknowledged values the final drain cannot vouch for)"
            )
        why.append(f"{n} is unknown{extra}")
    valid: Any = False if failed else (UNKNOWN if why else True)
    return {
        "valid": valid,
        "safety": safety_names(cfg),
        "safety_failed": failed,
        "unknown_because": why,
    }


def check(
    ops: Any,
    cfg: Config | None = None,
    *,
    only: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """All analyses over a loaded history DataFrame; the results as one JSON-able dict."""
    cfg = cfg or Config()
    out: dict[str, Any] = {"analyses": {}, "timings_s": {}}
    t = time.perf_counter()
    validate.check(ops)  # raises HistoryInvalid (file, line, what) before any analysis
    out["timings_s"]["validate"] = time.perf_counter() - t
    fr = Frames(ops, cfg)
    try:
        t = time.perf_counter()
        out["stats"] = fr.stats()
        out["timings_s"]["stats"] = time.perf_counter() - t
        t = time.perf_counter()
        out["unknown_because"] = _undecidable(fr)  # the drain's coverage, when it matters
        if out["stats"]["ops"] == 0:
            return {**out, **verdict(out, cfg), "guarantee": UNKNOWN}
        out["drain"] = fr.drain()
        out["timings_s"]["drain"] = time.perf_counter() - t
        for name, fn in ANALYSES.items():
            if only and name not in only:
                continue
            if progress:
                progress(name)
            t = time.perf_counter()
            out["analyses"][name] = fn(fr)
            out["timings_s"][name] = time.perf_counter() - t
        if not only:
            t = time.perf_counter()
            _trace_examples(fr, out["analyses"])
            out["timings_s"]["trace"] = time.perf_counter() - t
    finally:
        fr.close()
    a = out["analyses"]
    if not only:
        out.update(verdict(out, cfg))
    else:
        out.update(safety=safety_names(cfg), safety_failed=[], valid=None)
    if "duplicated" in a:
        out["guarantee"] = a["duplicated"]["guarantee"]
    return out


def _undecidable(fr: Frames) -> list[str]:
    """Why the history as a whole cannot show that nothing was lost."""
    st = fr.stats()
    if st["ops"] == 0:
        return ["the history holds no operations"]
    if not st["counts"].get("send:ok"):
        return ["no send completed ok: nothing was acknowledged, so nothing can be shown lost"]
    if not st["special"]["acked_send_ok"]:
        return [
            f"no send was acknowledged with SEND_OK ({st['counts']['send:ok']} completed ok with"
            " another status): nothing can be shown lost"
        ]
    cov = fr.drain()
    if cov["complete"]:
        return []
    inc = cov["incomplete"]
    if not cov["ran"]:
        head = "there was no final drain"
    else:
        acked = sum(1 for x in inc if x["acked"])
        head = (
            f"the final drain did not read {len(inc)} of the {cov['queues']} queues it set out"
            f" to read to their end ({acked} of the {cov['acked_queues']} that acknowledged a"
            " send)"
        )
    names = ", ".join(f"{x['queue']} ({x['why']})" for x in inc[:10])
    more = f", and {len(inc) - 10} more" if len(inc) > 10 else ""
    return [f"{head}: lost and lost-write are unknown for {names}{more}"]


def _example_values(analyses: dict[str, Any]) -> set[int]:
    vals: set[int] = set()
    for name in VALUE_EXAMPLES:
        for e in analyses.get(name, {}).get("examples", []):
            if e.get("v") is not None:
                vals.add(int(e["v"]))
    for e in analyses.get("inconsistent-offsets", {}).get("examples", []):
        vals.update(int(e[k]) for k in ("vmin", "vmax") if e.get(k) is not None)
    o = analyses.get("ordering", {})
    for e in o.get("examples", []):
        vals.update(
            int(e[k]) for k in ("late_value", "delivered_before_it") if e.get(k) is not None
        )
    for sub in ("nonmonotonic", "poll_skip"):
        for e in o.get(sub, {}).get("examples", []):
            if e.get("v") is not None:
                vals.add(int(e["v"]))
    return vals


def _trace_examples(fr: Frames, analyses: dict[str, Any]) -> None:
    """Attach the history ops that touched each example value (one scan, bounded output)."""
    vals = sorted(_example_values(analyses))
    if not vals:
        return
    c = F.col
    ops = fr.ops
    is_send = c("f").isin("send", "ack", "change-invisible")
    is_read = c("f").isin("poll", "drain", "pop") & (c("type") == "ok")

    def entry(
        v: Any, topic: Any, broker: Any, qid: Any, off: Any, status: Any, txn: Any, delay: Any
    ) -> Any:
        return F.struct(
            v.alias("v"),
            topic.alias("topic"),
            broker.alias("broker"),
            qid.alias("queue_id"),
            off.alias("queue_offset"),
            status.alias("status"),
            c("value.group").alias("group"),
            txn.alias("txn"),
            delay.alias("delay_ms"),
        )

    nul = F.lit(None)
    sent = F.array(
        entry(
            c("value.value"),
            c("value.topic"),
            c("value.broker"),
            c("value.queue_id"),
            c("value.queue_offset"),
            c("value.status"),
            c("value.txn"),
            c("value.delay_ms"),
        )
    )
    # a lambda is interpreted, but only the few reads holding an example value reach it
    read = F.transform(
        "value.messages",
        lambda m: entry(
            m["value"],
            m["topic"],
            m["broker"],
            m["queue_id"],
            m["queue_offset"],
            nul.cast("string"),
            nul.cast("string"),
            nul.cast("long"),
        ),
    )
    # one scan: the sends of the values, and the reads holding one (prefiltered on the
    # value column before any message is looked at)
    lits = F.array(*[F.lit(x).cast("long") for x in vals])
    hit = ops.where(
        (is_send & c("value.value").isin(vals))
        | (is_read & F.arrays_overlap(c("value.messages.value"), lits))
    )
    rows = (
        hit.select(
            "index",
            "process",
            "type",
            "f",
            F.posexplode(F.when(is_send, sent).otherwise(read)).alias("p", "e"),
        )
        .where(c("e.v").isin(vals))
        .select(
            F.col("e.v").alias("v"),
            "index",
            "process",
            "type",
            "f",
            *[F.col("e." + k).alias(k) for k in TRACE_FIELDS],
            "p",
        )
        # a total order: one read op can hold a value twice (its place in the op decides)
        .orderBy("v", "index", "p")
        .limit(TRACE_LIMIT * len(vals) * 4)
        .collect()
    )
    trace: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        d = {k: v for k, v in r.asDict().items() if v is not None and k not in ("v", "p")}
        lst = trace.setdefault(int(r["v"]), [])
        if len(lst) < TRACE_LIMIT:
            lst.append(d)

    def attach(e: dict[str, Any], keys: tuple[str, ...]) -> None:
        t = {str(e[k]): trace.get(int(e[k]), []) for k in keys if e.get(k) is not None}
        if t:
            e["history"] = t

    for name in VALUE_EXAMPLES:
        for e in analyses.get(name, {}).get("examples", []):
            attach(e, ("v",))
    for e in analyses.get("inconsistent-offsets", {}).get("examples", []):
        attach(e, ("vmin", "vmax"))
    o = analyses.get("ordering", {})
    for e in o.get("examples", []):
        attach(e, ("late_value", "delivered_before_it"))
    for sub in ("nonmonotonic", "poll_skip"):
        for e in o.get(sub, {}).get("examples", []):
            attach(e, ("v",))


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_outputs(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json (without the raw latency sample), the PNG plots and report.html."""
    from rmq_check import plots, report

    out_dir.mkdir(parents=True, exist_ok=True)
    files = plots.draw(results, out_dir)
    files += plots.draw_cluster(results, out_dir)
    slim = json.loads(json.dumps(_jsonable(results), default=str))
    av = slim.get("analyses", {}).get("availability")
    if av:
        av.pop("latency_points", None)
    (out_dir / "results.json").write_text(json.dumps(slim, indent=2, sort_keys=False) + "\n")
    files.append(out_dir / "results.json")
    files.append(report.write(results, out_dir, [f.name for f in files if f.suffix == ".png"]))
    return files
