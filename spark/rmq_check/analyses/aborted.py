"""aborted-read (Jepsen's G1a): a value whose send definitely failed (``fail``) was read."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, example_rows, value_counts, value_flags


def run(fr: Frames) -> dict[str, Any]:
    n = value_counts(fr)["aborted"]
    ex = (
        example_rows(
            fr.values()
            .where(value_flags(fr)["aborted"])
            .select("v", F.col("key").alias("key_hash"), "inv_idx", "comp_idx", "n_read", "n_drain")
            .orderBy("v"),
            fr.cfg.examples,
        )
        if n
        else []
    )
    return result(verdict(n), n, ex)
