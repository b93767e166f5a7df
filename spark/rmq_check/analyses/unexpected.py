"""unexpected: a value read that no send ever attempted (no invoke, no completion), or a read
whose value could not be parsed (null)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, example_rows, value_counts, value_flags


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    n = c["unexpected"]
    ex = []
    if n:
        ex = example_rows(
            fr.values()
            .where(value_flags(fr)["unexpected"])
            .select("v", (F.col("n_read") + F.col("n_drain")).alias("reads"), "off_min", "off_max")
            .orderBy("v"),
            fr.cfg.examples,
        )
    return result(verdict(n), n, ex, null_reads=c["null_reads"])
