"""One module per analysis; each ``run(frames)`` returns ``{valid, count, examples, ...}``.

``valid`` is True, False or "unknown" (the history cannot decide, e.g. no final drain).
``SAFETY`` names the analyses whose failure makes ``rmq-ha check`` exit non-zero.
"""

from __future__ import annotations

from typing import Any

Valid = bool | str
UNKNOWN = "unknown"

# In the order of the report's verdict table.
NAMES = (
    "lost",
    "lost-write",
    "unexpected",
    "duplicated",
    "inconsistent-offsets",
    "ordering",
    "aborted-read",
    "recovered",
    "availability",
    "metadata",
    "delay",
    "transaction",
    "pop",
)

SAFETY = frozenset(
    {
        "lost",
        "lost-write",
        "unexpected",
        "inconsistent-offsets",
        "ordering",
        "aborted-read",
        "metadata",
        "delay",
        "transaction",
        "pop",
    }
)


def result(
    valid: Valid, count: int, examples: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {"valid": valid, "count": int(count), "examples": examples, **extra}


def verdict(count: int, *, decidable: bool = True) -> Valid:
    if count == 0:
        return True
    return False if decidable else UNKNOWN
