"""Wall-clock time in milliseconds, the unit RocketMQ's metadata uses (data versions,
heartbeats, invoke times). Timers that must not jump use a monotonic clock instead."""

from __future__ import annotations

import time


def wall_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """Milliseconds of a clock that never jumps (timeouts, catch-up ages)."""
    return time.monotonic_ns() // 1_000_000
