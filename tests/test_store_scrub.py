"""The background scrub's pass (core.storage.ScrubPass, pure): where each `Store.scrub` call
starts while the log moves under it, the pause after each, and when a pass ends; and one
paced pass of the broker's storage service over a real store with damage in an old
segment (MockClock: the pauses take no time)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from rmq_ha._native import EpochFile, Message
from rmq_ha.broker.core.storage import ScrubPass
from rmq_ha.broker.io.storage import SCRUB_FILE, StorageService
from rmq_ha.config import BrokerConfig
from rmq_ha.net.client import RemotingClient
from rmq_ha.store import AsyncStore, open_store

pytestmark = pytest.mark.timeout(60)

SEG = 64 * 1024


def test_a_pass_walks_from_min_to_max_and_paces_by_bytes() -> None:
    p = ScrubPass(bytes_per_second=1000)
    assert p.next_call(0, 100) is None, "no pass under way"
    p.begin(0)
    assert p.next_call(0, 3 * SEG) == 0
    assert p.scrubbed(0, SEG, 0) == SEG / 1000
    assert p.next_call(0, 3 * SEG) == SEG
    p.scrubbed(SEG, 2 * SEG, 2)
    # retention deleted ahead of the cursor: it goes on from the new min
    assert p.next_call(2 * SEG + 64, 3 * SEG) == 2 * SEG + 64
    p.scrubbed(2 * SEG + 64, 3 * SEG, 0)
    assert p.next_call(2 * SEG + 64, 3 * SEG) is None
    assert (p.passes, p.found, p.scrubbed_bytes) == (1, 2, 3 * SEG - 64)
    assert p.next_call(0, 10 * SEG) is None, "the pass ended"


def test_a_truncation_below_the_cursor_ends_the_pass() -> None:
    p = ScrubPass(bytes_per_second=1 << 20)
    p.begin(0)
    p.scrubbed(0, 2 * SEG, 0)
    assert p.next_call(0, SEG + 10) is None
    assert p.passes == 1


def test_a_refused_boundary_goes_back_to_the_segment_start_then_past_it() -> None:
    p = ScrubPass(bytes_per_second=1 << 20)
    p.begin(0)
    p.not_a_boundary(SEG + 500, SEG)
    assert p.next_call(0, 4 * SEG) == SEG
    p.not_a_boundary(SEG, SEG)  # even the segment's start refused: never loops there
    assert p.next_call(0, 4 * SEG) == 2 * SEG


def _flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x5A]))


def _service(
    cfg: BrokerConfig, store: AsyncStore, root: Path, rc: RemotingClient
) -> StorageService:
    async def no_sources() -> list[str]:
        return []

    return StorageService(
        cfg,
        store,
        epochs=EpochFile(root / "epochFileCheckpoint"),
        feed=lambda _e: None,
        outbound=rc,
        replication_floor=lambda: None,
        repair_sources=no_sources,
        on_repaired=lambda _: None,
    )


async def test_a_restart_resumes_an_unfinished_pass_where_it_stopped(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The scrub's progress is saved after each segment (`scrubProgress`): a broker restarted
    in the middle of a pass goes on from there, not from the log's start (a broker restarted
    more often than a pass takes never reached its newest segments), and the pass keeps its
    start time. An unreadable progress file starts a new pass, with a WARNING."""
    cfg = BrokerConfig(commitlog_segment_bytes=SEG, store_scrub_bytes_per_second=SEG)
    async with open_store(tmp_path, segment_size=SEG) as store:
        store.native.append_batch([Message("S", 0, b"y" * 300) for _ in range(1500)])
        store.native.flush()
        top = store.native.max_offset
        assert top > 6 * SEG
        store.native.close()
    # damage in the last full segment: the resumed pass must still reach it
    last_full = (top // SEG - 1) * SEG
    _flip(tmp_path / "commitlog" / f"{last_full:020d}", 40 * 350 + 200)
    async with open_store(tmp_path, segment_size=SEG) as store, RemotingClient() as rc:
        svc = _service(cfg, store, tmp_path, rc)
        async with trio.open_nursery() as n:
            n.start_soon(svc.scrub_pass, None, 1234)
            # stopped (the broker stopped) once three segments are on record as validated
            while (svc.scrub_saved()[0] or 0) < 3 * SEG:
                await trio.sleep(0.05)
            n.cancel_scope.cancel()
    async with open_store(tmp_path, segment_size=SEG) as store, RemotingClient() as rc:
        svc = _service(cfg, store, tmp_path, rc)
        cursor, started = svc.scrub_saved()
        assert cursor is not None and 3 * SEG <= cursor < last_full and started == 1234
        await svc.scrub_pass(resume_at=cursor, started_ms=started)
        c = svc.counters()
        assert c["scrubbedBytes"] == top - cursor, "from where it stopped"
        assert c["scrubFound"] == 1 and len(store.native.quarantined()) == 1
        assert svc.scrub_saved() == (None, 1234), "the pass is over"
        (tmp_path / SCRUB_FILE).write_text('{"cursor": "x"}')
        assert svc.scrub_saved() == (None, None)
        assert any("scrub progress" in r.getMessage() for r in caplog.records)


async def test_one_paced_pass_quarantines_damage_no_read_would_reach(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = BrokerConfig(
        commitlog_segment_bytes=SEG,
        store_scrub_bytes_per_second=SEG,  # a second per segment, on the mock clock
    )
    async with open_store(tmp_path, segment_size=SEG) as store:
        res = store.native.append_batch([Message("S", 0, b"y" * 300) for _ in range(800)])
        store.native.flush()
        assert store.native.max_offset > 3 * SEG, res
        store.native.close()
    # a record in the middle of the first segment: below the durable point, so the next open
    # does not validate it; only a read, or the scrub, would find it
    (first,) = [p for p in (tmp_path / "commitlog").iterdir() if int(p.name) == 0]
    _flip(first, 20 * 350 + 200)
    async with open_store(tmp_path, segment_size=SEG) as store, RemotingClient() as rc:
        assert store.native.quarantined() == []
        svc = _service(cfg, store, tmp_path, rc)
        t0 = trio.current_time()
        await svc.scrub_pass()
        took = trio.current_time() - t0
        (e,) = store.native.quarantined()
        assert e["offset"] < SEG and e["topic"] == "S"
        c = svc.counters()
        assert (c["scrubPasses"], c["scrubFound"]) == (1, 1)
        assert c["scrubbedBytes"] == store.native.max_offset - store.native.min_offset
        # paced: one second of the mock clock per segment validated
        assert took == pytest.approx(c["scrubbedBytes"] / SEG)
