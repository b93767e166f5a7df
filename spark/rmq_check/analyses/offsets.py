"""inconsistent-offsets: one (queue, offset) holding two different values, from acks and reads
together (a value acked at an offset where a reader saw another value counts)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, example_rows


def run(fr: Frames) -> dict[str, Any]:
    st = fr.position_stats()
    if not st["suspect"]:  # every queue holds one value per offset
        return result(True, 0, [], positions=st["positions"])
    p = fr.positions()
    bad = p.where(
        (F.col("vmin") != F.col("vmax")) | ((F.col("nnull") > 0) & F.col("vmin").isNotNull())
    )
    n = bad.count()
    ex = (
        example_rows(
            bad.select("qh", "off", "vmin", "vmax", "nnull").orderBy("qh", "off"),
            fr.cfg.examples,
        )
        if n
        else []
    )
    return result(verdict(n), n, ex, positions=st["positions"])
