"""Parked pulls (RocketMQ's PullRequestHoldService): a pull that finds nothing waits until a
message arrives on its queue or its suspend timeout passes."""

from __future__ import annotations

from collections.abc import Callable

import trio


class PullHold:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[tuple[int, trio.Event]]] = {}

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Waits until the queue's max offset passes `offset`; False on timeout."""
        ev = trio.Event()
        entry = (offset, ev)
        lst = self._waiters.setdefault((topic, queue_id), [])
        lst.append(entry)
        try:
            with trio.move_on_after(timeout_s):
                await ev.wait()
                return True
            return False
        finally:
            lst = self._waiters.get((topic, queue_id), [])
            if entry in lst:
                lst.remove(entry)
            if not lst:
                self._waiters.pop((topic, queue_id), None)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """New messages: wake every pull on this queue waiting below `max_offset`."""
        lst = self._waiters.get((topic, queue_id))
        if not lst:
            return
        keep = []
        for offset, ev in lst:
            if offset < max_offset:
                ev.set()
            else:
                keep.append((offset, ev))
        self._waiters[(topic, queue_id)] = keep

    def notify_ready(self, max_offset_of: Callable[[str, int], int]) -> None:
        """Messages became visible on queues nobody appended to just now (replication moved
        the confirm offset, or a slave appended replicated bytes): re-check every parked queue."""
        for topic, queue_id in list(self._waiters):
            self.notify(topic, queue_id, max_offset_of(topic, queue_id))

    def waiting(
        self, topic: str | None = None, queue_id: int | None = None, *, above: int = 0
    ) -> int:
        """How many requests are parked (on one queue when `topic` and `queue_id` are given,
        counting those waiting at offset `above` or past it; the delay scanners park on their
        schedule queues too)."""
        if topic is not None and queue_id is not None:
            return sum(1 for off, _ in self._waiters.get((topic, queue_id), ()) if off >= above)
        return sum(len(v) for v in self._waiters.values())
