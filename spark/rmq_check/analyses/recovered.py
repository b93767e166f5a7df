"""recovered: a send with an indeterminate outcome (``info``, or no completion at all) whose
value was read. Not an anomaly: it says what became of the unknowns."""

from __future__ import annotations

from typing import Any

from rmq_check.analyses import result
from rmq_check.core import Frames, value_counts, value_examples


def run(fr: Frames) -> dict[str, Any]:
    c = value_counts(fr)
    n = c["recovered"]
    indeterminate = c["indeterminate"]
    fields = ("v", "key", "inv_idx", "comp_idx", "info")
    ex = [
        {("key_hash" if k == "key" else k): r[k] for k in fields}
        for r in value_examples(fr)["recovered"]
    ]
    return result(
        True, n, ex, indeterminate=indeterminate, rate=n / indeterminate if indeterminate else 0.0
    )
