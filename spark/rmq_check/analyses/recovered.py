"""recovered: a send with an indeterminate outcome (``info``, or no completion at all) whose
value was read. Not an anomaly: it says what became of the unknowns."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import result
from rmq_check.core import Frames, example_rows, value_counts, value_flags


def run(fr: Frames) -> dict[str, Any]:
    n = value_counts(fr)["recovered"]
    v = fr.values()
    indeterminate = v.where((F.col("inv") == 1) & (F.col("ok") == 0) & (F.col("fail") == 0)).count()
    ex = (
        example_rows(
            v.where(value_flags(fr)["recovered"])
            .select("v", F.col("key").alias("key_hash"), "inv_idx", "comp_idx", "info")
            .orderBy("v"),
            fr.cfg.examples,
        )
        if n
        else []
    )
    return result(
        True, n, ex, indeterminate=indeterminate, rate=n / indeterminate if indeterminate else 0.0
    )
