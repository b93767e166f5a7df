"""Wall-clock time in milliseconds, the unit RocketMQ's metadata uses (data versions,
heartbeats, invoke times). Timers that must not jump use a monotonic clock instead."""

from __future__ import annotations

import time


def wall_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """Milliseconds of a clock that never jumps (timeouts, catch-up ages)."""
    return time.monotonic_ns() // 1_000_000


#: A gap this long between two looks at the clock of a process that looks every
#: `STALL_TICK_S` means the process did not run meanwhile (SIGSTOP, a VM stall, starvation).
STALL_MS = 1_000
STALL_TICK_S = 0.2


class StallCredit:
    """How long this process was not running, so that peers' heartbeats are not judged by it.

    A liveness table (the controller's broker heartbeats, the name server's registrations)
    compares `now - last heartbeat` with a timeout. When the process that keeps the table is
    paused, the heartbeats sent meanwhile wait in socket buffers, and on resume whichever
    task runs first sees every peer expired: a controller paused for longer than the timeout
    failed over every group when it came back, though every broker was fine. `observe` is
    called with the clock at every look (and every `STALL_TICK_S` by a watchdog task); a gap
    above `stall_ms` since the previous look is returned once, and the table adds it to its
    peers' last-heartbeat times. Time the table could not observe does not count against a
    peer; a peer that really died is found one timeout after the resume instead. Pure: the
    clock is passed in."""

    def __init__(self, stall_ms: int = STALL_MS) -> None:
        self.stall_ms = stall_ms
        self._seen_ms: int | None = None
        #: Stalls credited so far, and the last one (ms), for the warning that names it.
        self.stalls = 0
        self.last_ms = 0

    def observe(self, now_ms: int) -> int:
        """The stall to credit (ms) since the previous look, or 0."""
        prev = self._seen_ms
        self._seen_ms = now_ms if prev is None else max(prev, now_ms)
        if prev is None or now_ms - prev <= self.stall_ms:
            return 0
        self.stalls += 1
        self.last_ms = now_ms - prev
        return self.last_ms
