"""The trio facade (python/rmq_ha/store.py): open_store, group-commit wait_durable, close."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rmq_ha._native import Message, Store
from rmq_ha.errors import StoreClosedError
from rmq_ha.store import AsyncStore, open_store
from storeutil import decode, scan_log


async def append_and_wait(store: AsyncStore, i: int, results: list[tuple[int, int]]) -> None:
    await trio.sleep(0)
    placed = store.append_batch([Message("A", i % 4, b"%06d" % i + b"z" * (i % 300))] * (1 + i % 3))
    end = placed[-1][0] + placed[-1][1]
    flushed = await store.wait_durable(end)
    assert store.native.flushed_offset >= end
    results.append((end, flushed))


async def test_concurrent_appenders_each_get_a_flushed_offset_at_or_past_their_record(
    tmp_path: Path,
) -> None:
    results: list[tuple[int, int]] = []
    async with open_store(tmp_path / "s", segment_size=64 * 1024, flush_interval_ms=20) as store:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(append_and_wait, store, i, results)
        assert len(results) == 200
        assert all(flushed >= end for end, flushed in results)
        assert store.native.max_offset > 64 * 1024, "appends rolled over segments"
        assert await store.wait_durable(0) >= 0, "an already durable offset returns at once"


async def test_wait_durable_requests_a_flush_instead_of_waiting_for_the_interval(
    tmp_path: Path,
) -> None:
    results: list[tuple[int, int]] = []
    # A flush interval of an hour: only a requested flush can make these durable, so they
    # finish at all only if wait_durable asks for one.
    async with open_store(
        tmp_path / "s", segment_size=1 << 20, flush_interval_ms=3_600_000
    ) as store:
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(append_and_wait, store, i, results)
        assert len(results) == 50
        assert all(flushed >= end for end, flushed in results)


async def test_close_flushes_everything_and_later_waits_raise_store_closed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    async with open_store(root, segment_size=64 * 1024, flush_interval_ms=10_000) as store:
        for i in range(100):
            store.append_batch([Message("A", 0, b"m%d" % i)])
        end = store.native.max_offset
        assert store.native.flushed_offset < end, "nothing asked for durability yet"
    native = store.native
    assert native.closed
    assert native.flushed_offset == native.max_offset == end
    with pytest.raises(StoreClosedError):
        await store.wait_durable(end + 1)
    assert await store.wait_durable(end) == end

    reopened = await trio.to_thread.run_sync(lambda: Store(root, segment_size=64 * 1024))
    try:
        assert reopened.max_offset == end
        assert [r["body"] for r in scan_log(reopened)] == [b"m%d" % i for i in range(100)]
        bufs, _, _, _ = reopened.get_messages("A", 0, 99)
        assert decode(bufs[0])["body"] == b"m99"
    finally:
        reopened.close()


async def test_open_store_closes_the_store_when_the_body_raises(tmp_path: Path) -> None:
    seen: list[AsyncStore] = []
    with pytest.RaisesGroup(RuntimeError, flatten_subgroups=True, allow_unwrapped=True):
        async with open_store(tmp_path / "s", segment_size=64 * 1024) as store:
            seen.append(store)
            store.append_batch([Message("A", 0, b"x")])
            raise RuntimeError("boom")
    assert seen[0].native.closed
    assert seen[0].native.flushed_offset == seen[0].native.max_offset


async def test_open_store_propagates_a_body_exception_unwrapped(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with open_store(tmp_path / "s", segment_size=64 * 1024):
            raise RuntimeError("boom")
