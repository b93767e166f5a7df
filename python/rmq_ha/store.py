"""Trio facade over the native store.

Appends go straight to `rmq_ha._native.Store` (one call per batch; the GIL is released while Rust
encodes and writes). Waiting for durability must not block the event loop, so the native store
exposes a non-blocking pipe that receives a byte whenever its flush thread advances the flushed
offset. Waiters take turns reading it: one task at a time waits on the pipe with
`trio.lowlevel.wait_readable`, and when a byte arrives it wakes every other waiter to re-check
the flushed offset (and one of them takes over the pipe if it still has to wait). Many waiters
share one fdatasync (group commit). There is no background task, so `open_store` needs no
nursery and exceptions raised in its body come out as they are.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from rmq_ha._native import AppendResult, Message, Store
from rmq_ha.errors import StoreClosedError, StoreIOError


class AsyncStore:
    """A native `Store` with an event-loop-friendly `wait_durable`."""

    def __init__(self, native: Store) -> None:
        self.native = native
        self._reader_busy = False
        self._changed = trio.Event()
        self._closed = False

    def append_batch(self, messages: Sequence[Message]) -> AppendResult:
        """Appends a batch; the result gives (physical_offset, size, queue_offset,
        store_timestamp) per message and the `end_offset` to wait on."""
        return self.native.append_batch(list(messages))

    async def wait_durable(self, offset: int) -> int:
        """Returns once everything below `offset` is fdatasync'ed; returns the flushed offset."""
        fd = self.native.flush_notify_fd()
        while True:
            flushed = self.native.flushed_offset
            if flushed >= offset:
                return flushed
            err = self.native.flush_error()
            if err is not None:
                raise StoreIOError(f"background flush failed: {err}")
            if self._closed:
                raise StoreClosedError("store closed before the offset became durable")
            self.native.request_flush(offset)
            if self._reader_busy:
                await self._changed.wait()
                continue
            self._reader_busy = True
            try:
                await trio.lowlevel.wait_readable(fd)
                try:
                    while os.read(fd, 4096):
                        pass
                except BlockingIOError:
                    pass
            finally:
                self._reader_busy = False
                changed, self._changed = self._changed, trio.Event()
                changed.set()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await trio.to_thread.run_sync(self.native.close)
        changed, self._changed = self._changed, trio.Event()
        changed.set()


@asynccontextmanager
async def open_store(root: str | os.PathLike[str], **options: Any) -> AsyncIterator[AsyncStore]:
    """Opens (and recovers) the store off the event loop; closes it on exit."""
    path = Path(root)
    native = await trio.to_thread.run_sync(lambda: Store(path, **options))
    store = AsyncStore(native)
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
