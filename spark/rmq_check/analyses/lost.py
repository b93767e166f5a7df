"""lost: an acknowledged (SEND_OK) send that no one read, the final drain included; or one
read on its own topic (by a consumer, or by a drain round before the last answers for its
queue's bounds) that the final drain, reading its queue from at or below the acknowledged
offset to the end, did not find inside its [min, max) ("vanished": truncated and
overwritten, or cut)."""

from __future__ import annotations

from typing import Any

from rmq_check.analyses import UNKNOWN, result
from rmq_check.core import Frames, value_counts, value_examples


def _example(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": r["v"],
        "key_hash": r["key"],
        "inv_idx": r["inv_idx"],
        "comp_idx": r["comp_idx"],
        "ack_off": r["ack_off"],
    }


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    cov = fr.drain()
    drained = bool(cov["complete"])
    n = c["lost"]
    open_ = c["lost_undecided"]
    ex = value_examples(fr)
    definite = n - open_
    return result(
        # without a complete final drain, "never read" cannot be told from "not read yet":
        # only losses on queues the drain read to their end are definite
        False if definite else (True if drained and not open_ else UNKNOWN),
        n,
        [_example(r) for r in ex["lost"]],
        definite=definite,
        undecided=open_,
        vanished=c["vanished"],
        undrained_queues=[x["queue"] for x in cov["incomplete"]],
        acknowledged=c["acked"],
        rate=n / c["acked"] if c["acked"] else 0.0,
        drained=drained,
        lost_non_ok_status=c["lost_weak"],
        lost_non_ok_status_examples=[_example(r) for r in ex["lost_weak"]],
        acknowledged_non_ok_status=c["acked_weak"],
        unseen_by_group=c["unseen_by_group"],
        consumer_groups=fr.groups(),
    )
