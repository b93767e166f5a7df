"""aborted-read (Jepsen's G1a): a value whose send definitely failed (``fail``) was read."""

from __future__ import annotations

from typing import Any

from rmq_check.analyses import result, verdict
from rmq_check.core import Frames, value_counts, value_examples


def run(fr: Frames) -> dict[str, Any]:
    n = value_counts(fr)["aborted"]
    fields = ("v", "key", "inv_idx", "comp_idx", "n_read", "n_drain")
    ex = [
        {("key_hash" if k == "key" else k): r[k] for k in fields}
        for r in value_examples(fr)["aborted"]
    ]
    return result(verdict(n), n, ex)
