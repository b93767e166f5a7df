"""duplicated: a value at two or more (queue, offset) positions, or delivered more than once
to one consumer group (the final drain is not a consumer group). Reported as a rate; it fails
the run only under ``--exactly-once``. The verdict names the delivery guarantee that held."""

from __future__ import annotations

from typing import Any

from rmq_check.analyses import UNKNOWN, result
from rmq_check.core import MAX_GROUPS, Frames, value_counts, value_examples


def guarantee(lost: int, duplicated: int, drained: bool) -> str:
    """``lost``: definite losses; without a complete final drain, "nothing lost" is unknown."""
    if not lost and not drained:
        return UNKNOWN
    if not lost:
        return "exactly-once" if not duplicated else "at-least-once"
    return "at-most-once" if not duplicated else "none"


def _example(r: dict[str, Any]) -> dict[str, Any]:
    g = r["gmask"]
    several = None if r["qh_min"] is None or r["qh_max"] is None else r["qh_min"] != r["qh_max"]
    return {
        "v": r["v"],
        "key_hash": r["key"],
        "n_read": r["n_read"],
        "groups": None if g is None else bin(g & ((1 << 64) - 1)).count("1"),
        "off_min": r["off_min"],
        "off_max": r["off_max"],
        "several_queues": several,
    }


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    n = c["duplicated"]
    ex = [_example(r) for r in value_examples(fr)["duplicated"]]
    read = c["read"]
    # nothing acknowledged (SEND_OK, as lost counts it): nothing can be shown delivered (or
    # lost), whatever the drain did
    open_ = c["lost_undecided"]
    definite = c["lost"] - open_
    g = guarantee(definite, n, fr.drain_complete() and c["acked"] > 0 and not open_)
    # more consumer groups than mask bits: some share a bit, so a redelivery may be two
    # groups' first deliveries: a value at two positions is a definite duplicate then, and a
    # redelivery those groups cannot explain (core.value_counts "redelivered_sure")
    untracked = len(fr.groups()) > MAX_GROUPS
    in_doubt = untracked and n > 0 and not c["at_two_positions"] and not c["redelivered_sure"]
    if in_doubt and g in ("at-least-once", "none"):
        g = UNKNOWN
    valid: Any = True
    if fr.cfg.exactly_once and n:
        valid = UNKNOWN if in_doubt else False
    return result(
        valid,
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
