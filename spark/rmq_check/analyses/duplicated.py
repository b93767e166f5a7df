"""duplicated: a value at two or more (queue, offset) positions, or delivered more than once
to one consumer group (the final drain is not a consumer group). Reported as a rate; it fails
the run only under ``--exactly-once``. The verdict names the delivery guarantee that held."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from rmq_check.analyses import UNKNOWN, result
from rmq_check.core import MAX_GROUPS, Frames, example_rows, value_counts, value_flags


def guarantee(lost: int, duplicated: int, drained: bool) -> str:
    """``lost``: definite losses; without a complete final drain, "nothing lost" is unknown."""
    if not lost and not drained:
        return UNKNOWN
    if not lost:
        return "exactly-once" if not duplicated else "at-least-once"
    return "at-most-once" if not duplicated else "none"


def _lost_split(fr: Frames, lost: int) -> tuple[int, int]:
    """(definite, undecided) losses, as lost counts them."""
    if not lost:
        return 0, 0
    from rmq_check.analyses.lost import undecided

    definite = int(fr.values().where(value_flags(fr)["lost"] & ~undecided(fr)).count())
    return definite, lost - definite


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    n = c["duplicated"]
    ex = []
    if n:
        ex = example_rows(
            fr.values()
            .where(value_flags(fr)["duplicated"])
            .select(
                "v",
                F.col("key").alias("key_hash"),
                "n_read",
                F.bit_count("gmask").alias("groups"),
                "off_min",
                "off_max",
                (F.col("qh_min") != F.col("qh_max")).alias("several_queues"),
            )
            .orderBy("v"),
            fr.cfg.examples,
        )
    read = c["read"]
    # nothing acknowledged (SEND_OK, as lost counts it): nothing can be shown delivered (or
    # lost), whatever the drain did
    definite, open_ = _lost_split(fr, c["lost"])
    g = guarantee(definite, n, fr.drain_complete() and c["acked"] > 0 and not open_)
    # more consumer groups than mask bits: some share a bit, so redelivery is over-counted
    untracked = len(fr.groups()) > MAX_GROUPS
    return result(
        (n == 0) if fr.cfg.exactly_once else (UNKNOWN if untracked else True),
        n,
        ex,
        rate=n / read if read else 0.0,
        redelivered=c["redelivered"],
        at_two_positions=c["at_two_positions"],
        excess_deliveries=c["excess_deliveries"],
        values_read=read,
        guarantee=g,
        consumer_groups=len(fr.groups()),
    )
