"""Shared pieces of the special-message analyses (delay, transaction, pop): quantiles of a
small numeric column and reads of chosen values with their delivery time."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from rmq_check.core import READ_FS, Frames

#: Lateness and similar quantiles: p50, p99 (percentile_approx, rank accuracy 1/1000).
QUANTILES = (0.5, 0.99)


def timed_reads(fr: Frames, values: DataFrame) -> DataFrame:
    """Every delivery of a value in ``values`` (a frame with a column ``v``) by a poll or the
    final drain: v, t (the completion time of the reading op), drain (whether the final
    drain read it), idx (the op's index), the position (topic, broker, queue_id, off) and
    the reader's group."""
    c = F.col
    r = fr.ops.where(c("f").isin(*READ_FS) & (c("type") == "ok")).select(
        "index",
        "time_ns",
        "f",
        c("value.group").alias("group"),
        F.explode("value.messages").alias("m"),
    )
    r = r.select(
        c("m.value").alias("v"),
        c("time_ns").alias("t"),
        (c("f") == "drain").alias("drain"),
        c("index").alias("idx"),
        c("m.topic").alias("topic"),
        c("m.broker").alias("broker"),
        c("m.queue_id").alias("queue_id"),
        c("m.queue_offset").alias("off"),
        "group",
    ).where(c("v").isNotNull())
    return r.join(values.select("v").distinct(), "v", "left_semi")


def quantiles(df: DataFrame, col: str) -> dict[str, Any]:
    """count, p50, p99 and max of a numeric column (None when empty)."""
    row = df.agg(
        F.count(F.col(col)).alias("n"),
        F.percentile_approx(F.col(col), list(QUANTILES), 1000).alias("q"),
        F.max(F.col(col)).alias("max"),
    ).collect()[0]
    q = row["q"] or [None] * len(QUANTILES)
    return {
        "count": int(row["n"] or 0),
        "p50": q[0],
        "p99": q[1],
        "max": row["max"],
    }


def count_if(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))
