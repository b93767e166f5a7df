"""lost-write: an acknowledged send whose acked offset is at or below the highest offset any
reader saw on its queue, never read by anyone ("read past a hole"). A subset of lost that
needs no final drain: something later in the same queue was already readable."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, example_rows, value_counts, value_flags


def run(fr: Frames) -> dict[str, Any]:
    if value_counts(fr)["lost"] == 0:
        return result(True, 0, [])
    p = fr.positions()
    qmax = p.where(F.col("read") == 1).groupBy("qh").agg(F.max("off").alias("max_read_off"))
    lw = (
        fr.values()
        .where(value_flags(fr)["lost"] & F.col("ack_qh").isNotNull())
        .join(F.broadcast(qmax), F.col("ack_qh") == F.col("qh"))
        .where(F.col("ack_off") <= F.col("max_read_off"))
        .select(
            "v", F.col("key").alias("key_hash"), "inv_idx", "comp_idx", "ack_off", "max_read_off"
        )
    )
    n = lw.count()
    ex = example_rows(lw.orderBy("v"), fr.cfg.examples) if n else []
    return result(verdict(n), n, ex)
