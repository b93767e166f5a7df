"""Trio facade over the native store.

Appends go straight to `rmq_ha._native.Store` (one call per batch; the GIL is released while Rust
encodes and writes). Waiting for durability must not block the event loop, so the native store
exposes a non-blocking pipe that receives a byte whenever its flush thread advances the flushed
offset; one waker task per store reads it with `trio.lowlevel.wait_readable` and wakes every task
waiting for an offset at or below the new flushed offset. Many waiters share one fdatasync
(group commit).
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from rmq_ha._native import AppendResult, Message, Store
from rmq_ha.errors import StoreClosedError, StoreIOError


class AsyncStore:
    """A native `Store` plus the waker task that serves `wait_durable`."""

    def __init__(self, native: Store) -> None:
        self.native = native
        self._waiters: list[tuple[int, int, trio.Event]] = []
        self._seq = itertools.count()
        self._closed = False

    def append_batch(self, messages: Sequence[Message]) -> AppendResult:
        """Appends a batch; the result gives (physical_offset, size, queue_offset,
        store_timestamp) per message and the `end_offset` to wait on."""
        return self.native.append_batch(list(messages))

    async def wait_durable(self, offset: int) -> int:
        """Returns once everything below `offset` is fdatasync'ed; returns the flushed offset."""
        flushed = self.native.flushed_offset
        if flushed >= offset:
            return flushed
        if self._closed:
            raise StoreClosedError("store is closed")
        event = trio.Event()
        heapq.heappush(self._waiters, (offset, next(self._seq), event))
        self.native.request_flush(offset)
        await event.wait()
        self._raise_flush_error()
        if self._closed and self.native.flushed_offset < offset:
            raise StoreClosedError("store closed before the offset became durable")
        return self.native.flushed_offset

    def _raise_flush_error(self) -> None:
        err = self.native.flush_error()
        if err is not None:
            raise StoreIOError(f"background flush failed: {err}")

    def _wake(self, everyone: bool = False) -> None:
        flushed = self.native.flushed_offset
        while self._waiters and (everyone or self._waiters[0][0] <= flushed):
            _, _, event = heapq.heappop(self._waiters)
            event.set()

    async def _waker(self) -> None:
        fd = self.native.flush_notify_fd()
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                while os.read(fd, 4096):
                    pass
            except BlockingIOError:
                pass
            self._wake(everyone=self.native.flush_error() is not None)

    async def aclose(self) -> None:
        self._closed = True
        await trio.to_thread.run_sync(self.native.close)
        self._wake(everyone=True)


@asynccontextmanager
async def open_store(root: str | os.PathLike[str], **options: Any) -> AsyncIterator[AsyncStore]:
    """Opens (and recovers) the store off the event loop; closes it on exit."""
    path = Path(root)
    native = await trio.to_thread.run_sync(lambda: Store(path, **options))
    store = AsyncStore(native)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store._waker)
            try:
                yield store
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
