"""lost: an acknowledged (SEND_OK) send that no one read, the final drain included."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, example_rows, value_counts, value_flags


def _fields() -> list[Any]:
    # built per call: a Column needs the active SparkContext, which import time lacks
    return [F.col("v"), F.col("key").alias("key_hash"), "inv_idx", "comp_idx", "ack_off"]


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    drained = fr.has("drain", "ok")
    n = c["lost"]
    flags = value_flags(fr)
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
    return result(
        # without a final drain, "never read" cannot be told from "not read yet"
        verdict(n, decidable=drained),
        n,
        ex,
        acknowledged=c["acked"],
        rate=n / c["acked"] if c["acked"] else 0.0,
        drained=drained,
        lost_non_ok_status=c["lost_weak"],
        lost_non_ok_status_examples=weak_ex,
        acknowledged_non_ok_status=c["acked_weak"],
        unseen_by_group=c["unseen_by_group"],
        consumer_groups=fr.groups(),
    )
