"""lost: an acknowledged (SEND_OK) send that no one read, the final drain included."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.core import Frames, example_rows, value_counts, value_flags


def _fields() -> list[Any]:
    # built per call: a Column needs the active SparkContext, which import time lacks
    return [F.col("v"), F.col("key").alias("key_hash"), "inv_idx", "comp_idx", "ack_off"]


def undecided(fr: Frames) -> Column:
    """Acknowledged values the final drain cannot show lost ("never read" says nothing about
    them): acknowledged on a queue the drain did not read to its end, or naming no queue;
    acknowledged after the drain's query for their queue's end was invoked (they may sit past
    that end); or delayed sends not yet due when the drain began."""
    col = F.col("ack_qh")
    cond = col.isNull()
    if not fr.drain_complete():
        bad = fr.undrained()
        if bad:
            cond = cond | col.isin(*bad)
    looked = sorted(fr.looked().items())
    if looked:
        asked = F.element_at(
            F.create_map(*[F.lit(x).cast("long") for kv in looked for x in kv]), col
        )
        cond = cond | F.coalesce(F.col("comp_idx") > asked, F.lit(False))
    start = fr.drain_start_ns()
    if fr.has_delays() and start is not None:
        cond = cond | F.coalesce(F.col("due") > F.lit(start), F.lit(False))
    return cond


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    cov = fr.drain()
    drained = bool(cov["complete"])
    n = c["lost"]
    flags = value_flags(fr)
    open_ = 0
    if n:
        open_ = fr.values().where(flags["lost"] & undecided(fr)).count()
    ex = (
        example_rows(
            fr.values().where(flags["lost"]).select(*_fields()).orderBy("v"), fr.cfg.examples
        )
        if n
        else []
    )
    weak_ex = (
        example_rows(
            fr.values().where(flags["lost_weak"]).select(*_fields()).orderBy("v"), fr.cfg.examples
        )
        if c["lost_weak"]
        else []
    )
    definite = n - open_
    return result(
        # without a complete final drain, "never read" cannot be told from "not read yet":
        # only losses on queues the drain read to their end are definite
        False if definite else (True if drained and not open_ else UNKNOWN),
        n,
        ex,
        definite=definite,
        undecided=open_,
        undrained_queues=[x["queue"] for x in cov["incomplete"]],
        acknowledged=c["acked"],
        rate=n / c["acked"] if c["acked"] else 0.0,
        drained=drained,
        lost_non_ok_status=c["lost_weak"],
        lost_non_ok_status_examples=weak_ex,
        acknowledged_non_ok_status=c["acked_weak"],
        unseen_by_group=c["unseen_by_group"],
        consumer_groups=fr.groups(),
    )
