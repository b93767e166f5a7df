"""lost-write: a lost value (see lost) whose acked offset is at or below the highest offset
any reader saw on its queue ("read past a hole"). A subset of lost; for a value never read it
needs no final drain (something later in the same queue was already readable), for one read
and then gone from the drain (vanished) the drain decides."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.core import Frames, example_rows, undecided, value_counts, value_flags


def run(fr: Frames) -> dict[str, Any]:
    if value_counts(fr)["lost"] == 0:
        return result(True if fr.drain_complete() else UNKNOWN, 0, [], definite=0, undecided=0)
    # the highest offset a read saw on each queue (position_stats), as a lookup
    qmax = {qh: q["max_read"] for qh, q in fr.position_stats()["queues"].items()}
    pairs = sorted((k, v) for k, v in qmax.items() if v is not None)
    max_read = (
        F.element_at(
            F.create_map(*[F.lit(x).cast("long") for kv in pairs for x in kv]), F.col("ack_qh")
        )
        if pairs
        else F.lit(None).cast("long")
    )
    hit = (
        fr.values()
        .where(value_flags(fr)["lost"] & F.col("ack_qh").isNotNull())
        .select("*", max_read.alias("max_read_off"))
        .where(F.col("ack_off") <= F.col("max_read_off"))
    )
    lw = hit.select(
        "v",
        F.col("key").alias("key_hash"),
        "inv_idx",
        "comp_idx",
        "ack_qh",
        "ack_off",
        "max_read_off",
    )
    # how many, and how many of those the final drain cannot vouch for, in one job
    agg = hit.agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.when(undecided(fr), 1).otherwise(0)).alias("open")
    ).collect()[0]
    n, open_ = int(agg["n"]), int(agg["open"] or 0)
    ex = example_rows(lw.orderBy("v"), fr.cfg.examples) if n else []
    drained = fr.drain_complete()
    definite = n - open_
    valid = False if definite else (True if drained and not open_ else UNKNOWN)
    return result(valid, n, ex, definite=definite, undecided=open_)
