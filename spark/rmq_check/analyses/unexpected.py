"""unexpected: a value read that no send ever attempted (no invoke, no completion), or a read
whose value could not be parsed (null)."""

from __future__ import annotations

from typing import Any

from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, value_counts, value_examples


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    n = c["unexpected"]
    ex = [
        {
            "v": r["v"],
            "reads": r["n_read"] + r["n_drain"],
            "off_min": r["off_min"],
            "off_max": r["off_max"],
        }
        for r in value_examples(fr)["unexpected"]
    ]
    return result(verdict(n), n, ex, null_reads=c["null_reads"])
