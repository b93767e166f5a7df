"""The broker's storage services (issue 15), a thin Trio shell over pure decisions:

* **Retention** (RocketMQ's CleanCommitLogService): every `cleanResourceInterval` a round
  judges the commitlog's disk (`store_retention.decide`: deleteWhen, diskMaxUsedSpaceRatio,
  diskSpaceCleanForciblyRatio, diskSpaceWarningLevelRatio), tells the role core whether the
  disk is full (`DiskFull`: writes refused above the warning ratio, accepted again at or below
  the clean-forcibly ratio), and deletes expired segments one at a time
  (deleteCommitLogFilesInterval between two), never past what replication still needs
  (`core.storage.retention_floor`). After a deletion the epoch file's prefix follows the
  commitlog's min offset (`EpochFile.reconcile`).
* **Damage**: quarantined records found while running are logged at ERROR (offsets, sizes,
  the record), readers that meet one are judged (`core.storage.DamagedReads`: wait a bounded
  time for a repair, then skip, counted), and every `storeRepairInterval` each quarantined
  range is asked of the replicas that may hold it (`repair_sources`: a slave asks its master,
  a master its in-sync replicas) with RMQHA_READ_COMMITLOG; the store checks the bytes
  (`repair_record`: CRCs, positions, sizes, queue) before writing them back. A range no
  replica has intact stays quarantined and is tried again later.
* **Scrub** (ours): every `storeScrubPassInterval` a pass validates the whole commitlog, one
  segment per `Store.scrub` call (in a worker thread), pausing after each as long as reading it
  at `storeScrubBytesPerSecond` takes (`core.storage.ScrubPass`). What it quarantines goes to
  the repair loop at once. Its progress is kept in `<root>/scrubProgress` (sealed JSON), so a
  restart resumes an unfinished pass and keeps the interval between passes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from rmq_ha._native import EpochFile, Store
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.core.storage import DamagedReads, ReadVerdict, ScrubPass, SkippedUnit
from rmq_ha.clock import wall_ms
from rmq_ha.config import BrokerConfig
from rmq_ha.durable import seal, unseal, write_atomic
from rmq_ha.errors import InvalidArgumentError, OffsetOutOfRangeError, RemotingError, StoreError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.store import AsyncStore, health
from rmq_ha.store_retention import (
    DiskUsage,
    RetentionDecision,
    RetentionPolicy,
    apply,
    decide,
    disk_usage,
)

log = logging.getLogger(__name__)

#: A quarantined range no source could repair is asked again after this many repair intervals.
RETRY_INTERVALS = 5
#: The scrub's progress in the store root: where an unfinished pass stopped, when it began.
SCRUB_FILE = "scrubProgress"
#: Timeout of one RMQHA_READ_COMMITLOG request (s).
READ_TIMEOUT_S = 5.0


def _now_ms() -> int:
    """Milliseconds of Trio's clock (a MockClock in tests)."""
    return int(trio.current_time() * 1000)


class StorageService:
    def __init__(
        self,
        cfg: BrokerConfig,
        store: AsyncStore,
        *,
        epochs: EpochFile,
        feed: Callable[[ev.Event], None],
        outbound: RemotingClient,
        replication_floor: Callable[[], int | None],
        repair_sources: Callable[[], Awaitable[list[str]]],
        on_repaired: Callable[[list[tuple[str, int, int]]], None],
        usage: Callable[[Path], DiskUsage] = disk_usage,
        hour: Callable[[], int] = lambda: time.localtime().tm_hour,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.epochs = epochs
        self.feed = feed
        self.outbound = outbound
        self.replication_floor = replication_floor
        self.repair_sources = repair_sources
        self.on_repaired = on_repaired
        self.usage = usage
        self.hour = hour
        self.policy = RetentionPolicy.from_config(cfg)
        self.damage = DamagedReads(cfg.damaged_record_wait_ms)
        self.scrub = ScrubPass(cfg.store_scrub_bytes_per_second)
        self.disk_full = False
        self.last_round: dict[str, Any] = {}
        self.deleted_files = 0
        self.repaired = 0
        self.repair_refused = 0
        self._known: set[tuple[int, int]] = set()
        self._next_try_ms: dict[int, int] = {}
        self._sourceless: set[int] = set()
        self._wake = trio.Event()
        self._repaired_event = trio.Event()
        self._manual = trio.Event()
        self._round_done = trio.Event()
        self._manual_seq = 0
        self._manual_served = 0

    # ---- running --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._note_known(startup=True)
        async with trio.open_nursery() as n:
            n.start_soon(self._retention_loop)
            n.start_soon(self._repair_loop)
            if self.cfg.store_scrub_bytes_per_second > 0:
                n.start_soon(self._scrub_loop)
            task_status.started()

    async def _retention_loop(self) -> None:
        manual = False
        while True:
            serving = self._manual_seq
            try:
                await self.retention_round(manual)
            except StoreError as e:
                log.error("retention round failed: %s", e)
            finally:
                if manual:
                    self._manual_served = serving
                done, self._round_done = self._round_done, trio.Event()
                done.set()
            with trio.move_on_after(self.cfg.clean_resource_interval_ms / 1000):
                await self._manual.wait()
            manual = self._manual.is_set()
            self._manual = trio.Event()

    # ---- retention ------------------------------------------------------------------------

    def judge_disk(self, manual: bool = False) -> tuple[RetentionDecision, DiskUsage]:
        """One round's decision (pure policy), and the role core told whether the disk is
        full."""
        usage = self.usage(self.cfg.store_root / "commitlog")
        d = decide(
            self.policy,
            hour=self.hour(),
            usage=usage,
            disk_full_before=self.disk_full,
            manual=manual,
        )
        if d.disk_full != self.disk_full:
            self.disk_full = d.disk_full
            self.feed(
                ev.DiskFull(d.disk_full, f"{usage.used_ratio:.1%} of {usage.total_bytes} B used")
            )
        return d, usage

    def out_of_space(self, why: str) -> None:
        """A write met ENOSPC before a round judged the disk full (a small or fast-filling
        disk): full now, so writes are refused with the disk-full answer instead of failing
        one by one; the next round judges again (and may delete to make room)."""
        if not self.disk_full:
            self.disk_full = True
            self.feed(ev.DiskFull(True, f"a write failed: {why}"))
        self._manual.set()  # a round now, not at the next interval

    async def retention_round(self, manual: bool = False) -> list[str]:
        """Judges the disk and deletes what the policy allows, one segment at a time; returns
        the deleted files."""
        d, usage = self.judge_disk(manual)
        native = self.store.native
        floor = self.replication_floor()
        deleted: list[str] = []
        if d.delete:
            for _ in range(d.max_files):
                got = await trio.to_thread.run_sync(_delete_one, native, d, floor)
                if not got:
                    break
                deleted += got
                self._after_deletion()
                pause = self.policy.delete_commit_log_files_interval_ms / 1000
                if pause > 0:
                    await trio.sleep(pause)
                floor = self.replication_floor()
        held = floor is not None and d.delete and not deleted and native.min_offset < floor
        self.last_round = {
            "reason": d.reason,
            "usedRatio": round(usage.used_ratio, 4),
            "delete": d.delete,
            "cleanImmediately": d.clean_immediately,
            "diskFull": d.disk_full,
            "deleted": len(deleted),
            "replicationFloor": floor,
        }
        if deleted and self.disk_full:
            # judged again now: writes resume as soon as the space is free, not a round
            # (cleanResourceInterval) later (operator probe: 10 s of refused writes)
            self.judge_disk(manual)
        if deleted:
            self.deleted_files += len(deleted)
            log.info(
                "retention (%s): deleted %d commitlog files %s; min offset now %d",
                d.reason,
                len(deleted),
                deleted,
                native.min_offset,
            )
        elif held and d.clean_immediately:
            log.warning(
                "retention (%s): the disk is %.1f%% full but replication still needs offset %d "
                "(a slave lags or an in-sync replica is away): nothing deleted",
                d.reason,
                usage.used_ratio * 100,
                floor,
            )
        return deleted

    async def manual_round(self) -> None:
        """DELETE_EXPIRED_COMMITLOG: a round now, whatever the hour; returns once it ran."""
        self._manual_seq += 1
        mine = self._manual_seq
        self._manual.set()
        while self._manual_served < mine:
            await self._round_done.wait()

    def _after_deletion(self) -> None:
        native = self.store.native
        cut, dropped = self.epochs.reconcile(native.min_offset, native.max_offset)
        if dropped:
            log.info("epoch file: dropped %s, wholly below the log's new start", dropped)
        if cut:
            log.warning("epoch file: dropped %s past the log's end", cut)
        self.damage.forget_below(native.min_offset)

    # ---- damaged records in reads ---------------------------------------------------------

    def judge(
        self, skipped: Sequence[tuple[int, int, int, str]], topic: str, queue_id: int
    ) -> ReadVerdict:
        """What a read that met these skipped units serves now (see `DamagedReads`)."""
        units = [SkippedUnit.of(s) for s in skipped]
        if any(u.quarantined and (u.phys_offset, u.size) not in self._known for u in units):
            self._note_known()  # found by this read: logged now, with offsets and sizes
        v = self.damage.judge(units, _now_ms())
        for u in v.newly_skipped:
            log.error(
                "skipping damaged record of %s queue %d at queue offset %d (commitlog %d, %d "
                "bytes, %s): %s; consumers move past it",
                topic,
                queue_id,
                u.queue_offset,
                u.phys_offset,
                u.size,
                "not repaired in time" if u.quarantined else "not repairable from a replica",
                u.reason,
            )
        if v.serve_below is not None:
            self.wake_repair()
        return v

    async def wait_repair(self, timeout_s: float) -> None:
        """Returns after a repair or `timeout_s`."""
        ev_ = self._repaired_event
        with trio.move_on_after(max(0.0, timeout_s)):
            await ev_.wait()

    def wake_repair(self) -> None:
        self._wake.set()

    # ---- repair from replicas -------------------------------------------------------------

    async def _repair_loop(self) -> None:
        interval = self.cfg.store_repair_interval_ms / 1000
        while True:
            self._wake = trio.Event()
            try:
                self._note_known()
                await self.repair_once()
            except StoreError as e:
                log.error("repair round failed: %s", e)
            with trio.move_on_after(interval):
                await self._wake.wait()

    def _note_known(self, startup: bool = False) -> None:
        """Logs quarantined ranges not seen before: ERROR when found while running (reads,
        scrub), WARNING for ranges carried over from before this start."""
        entries = self.store.native.quarantined()
        current = {(int(str(e["offset"])), int(str(e["size"]))) for e in entries}
        for e in entries:
            key = (int(str(e["offset"])), int(str(e["size"])))
            if key in self._known:
                continue
            where = (
                f"topic {e['topic']} queue {e['queue_id']} queue offset {e['queue_offset']}"
                if e.get("topic") is not None
                else "record unknown"
            )
            log.log(
                logging.WARNING if startup else logging.ERROR,
                "%s commitlog bytes at %d (%d bytes, %s): %s",
                "quarantined (from before this start)" if startup else "quarantined damaged",
                key[0],
                key[1],
                where,
                e.get("reason"),
            )
        self._known = current

    async def repair_once(self) -> int:
        """Tries every quarantined range that is due; returns how many were repaired."""
        native = self.store.native
        entries = native.quarantined()
        if not entries:
            return 0
        now = _now_ms()
        due = [e for e in entries if self._next_try_ms.get(int(str(e["offset"])), 0) <= now]
        if not due:
            return 0
        sources = await self.repair_sources()
        fixed = 0
        for e in due:
            off, size = int(str(e["offset"])), int(str(e["size"]))
            self._next_try_ms[off] = now + RETRY_INTERVALS * self.cfg.store_repair_interval_ms
            if await self._repair_from(off, size, sources):
                fixed += 1
        return fixed

    async def _repair_from(self, off: int, size: int, sources: list[str]) -> bool:
        native = self.store.native
        for addr in sources:
            data = await self._read_remote(addr, off, size)
            if data is None:
                continue
            try:
                refs = await trio.to_thread.run_sync(native.repair_record, off, data)
            except StoreError as e:
                self.repair_refused += 1
                log.warning(
                    "repair of commitlog [%d, %d) with bytes from %s refused: %s",
                    off,
                    off + size,
                    addr,
                    e,
                )
                continue
            self.repaired += 1
            self._next_try_ms.pop(off, None)
            self._sourceless.discard(off)
            self._known.discard((off, size))
            self.damage.repaired([off])
            log.warning(
                "repaired quarantined commitlog [%d, %d) with good bytes from %s: %s",
                off,
                off + size,
                addr,
                ", ".join(f"{t} queue {q} queue offset {o}" for t, q, o in refs) or "no record",
            )
            self.on_repaired(refs)
            ev_, self._repaired_event = self._repaired_event, trio.Event()
            ev_.set()
            return True
        if sources:
            self._sourceless.discard(off)
            log.warning(
                "quarantined commitlog [%d, %d): no replica of %s has it intact; it stays "
                "quarantined",
                off,
                off + size,
                sources,
            )
        elif off not in self._sourceless:
            # Said once per range (asked again every few intervals): a lone broker, or a
            # master whose SyncStateSet has shrunk to itself, has nobody to ask.
            self._sourceless.add(off)
            log.warning(
                "quarantined commitlog [%d, %d): no replica to repair it from (no master or "
                "in-sync replica known); it stays quarantined and is skipped after "
                "damagedRecordWaitMs",
                off,
                off + size,
            )
        return False

    async def _read_remote(self, addr: str, off: int, size: int) -> bytes | None:
        cmd = RemotingCommand.request(
            RC.RMQHA_READ_COMMITLOG, {"offset": str(off), "size": str(size)}
        )
        try:
            r = await self.outbound.invoke(addr, cmd, READ_TIMEOUT_S)
        except (RemotingError, OSError) as e:
            log.info("reading commitlog [%d, %d) from %s failed: %s", off, off + size, addr, e)
            return None
        if r.code != Resp.SUCCESS or r.body is None or len(r.body) != size:
            log.info(
                "%s has no intact commitlog [%d, %d): %s %s",
                addr,
                off,
                off + size,
                r.code,
                r.remark,
            )
            return None
        return bytes(r.body)

    # ---- scrub ----------------------------------------------------------------------------

    async def _scrub_loop(self) -> None:
        interval_ms = self.cfg.store_scrub_pass_interval_ms
        cursor, started_ms = self.scrub_saved()
        if cursor is None and started_ms is not None:
            # the last pass ended before this start: the next is due an interval after it began
            await trio.sleep(_clamped_wait_ms(started_ms + interval_ms, interval_ms) / 1000)
            started_ms = None
        while True:
            started_ms = started_ms if cursor is not None and started_ms else wall_ms()
            try:
                await self.scrub_pass(resume_at=cursor, started_ms=started_ms)
            except (StoreError, OSError) as e:
                log.error("scrub pass failed: %s (next pass in %d ms)", e, interval_ms)
                self.scrub.cursor = None
            cursor = None
            await trio.sleep(_clamped_wait_ms(started_ms + interval_ms, interval_ms) / 1000)
            started_ms = None

    def scrub_saved(self) -> tuple[int | None, int | None]:
        """(where an unfinished pass stopped, when the last pass began, wall ms) as the file
        `scrubProgress` keeps them; (None, None) without one, or when it cannot be read (a
        WARNING: a new pass starts)."""
        if self.store.root is None:
            return None, None
        path = self.store.root / SCRUB_FILE
        try:
            doc = json.loads(unseal(path.read_bytes()))
            cursor, started = doc["cursor"], doc["passStartedMs"]
            if not (cursor is None or type(cursor) is int) or type(started) is not int:
                raise ValueError(f"cursor {cursor!r}, passStartedMs {started!r}")
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("scrub progress %s unreadable (%s): a new scrub pass starts", path, e)
            return None, None
        return cursor, started

    async def _save_scrub(self, started_ms: int) -> None:
        if self.store.root is None:
            return
        doc = {"cursor": self.scrub.cursor, "passStartedMs": started_ms}
        data = seal(json.dumps(doc).encode())
        try:
            await trio.to_thread.run_sync(write_atomic, self.store.root / SCRUB_FILE, data)
        except OSError as e:  # a full disk: the scrub goes on, a restart starts over
            log.warning("scrub progress not saved: %s", e)

    async def scrub_pass(self, resume_at: int | None = None, started_ms: int | None = None) -> None:
        """One pass over the commitlog, paced, from `resume_at` (where a pass that began at
        wall ms `started_ms` stopped) or the log's start; returns when it reached the log's
        end. Its progress is saved after each segment, so a restart resumes it."""
        native = self.store.native
        seg = self.cfg.commitlog_segment_bytes
        started = wall_ms() if started_ms is None else started_ms
        self.scrub.begin(native.min_offset if resume_at is None else resume_at)
        while (at := self.scrub.next_call(native.min_offset, native.max_offset)) is not None:
            try:
                end, added = await trio.to_thread.run_sync(native.scrub, at)
            except InvalidArgumentError:
                self.scrub.not_a_boundary(at, seg)  # a cut then regrown log moved records
                continue
            except OffsetOutOfRangeError:
                continue  # retention or a truncation moved the log's ends: look again
            if added:
                log.error(
                    "scrub: %d damaged range(s) in commitlog [%d, %d), quarantined; asking "
                    "the replicas for good copies",
                    len(added),
                    at,
                    end,
                )
                self.wake_repair()
            pause = self.scrub.scrubbed(at, end, len(added))
            await self._save_scrub(started)
            await trio.sleep(pause)
        await self._save_scrub(started)
        log.info(
            "scrub pass %d over the commitlog done: %d bytes validated since start, %d damaged "
            "range(s) found since start",
            self.scrub.passes,
            self.scrub.scrubbed_bytes,
            self.scrub.found,
        )

    # ---- what the admin command and the status show ----------------------------------------

    def health(self) -> dict[str, Any]:
        out = health(self.store.native, self.store.root)
        out["broker"] = self.counters()
        return out

    def counters(self) -> dict[str, Any]:
        st = self.store.native.status()
        return {
            "quarantinedRecords": st.get("quarantined_records"),
            "quarantinedBytes": st.get("quarantined_bytes"),
            "quarantinedAtRuntime": st.get("quarantined_at_runtime"),
            "repaired": self.repaired,
            "repairRefused": self.repair_refused,
            "skippedDamaged": self.damage.skipped_units,
            "waitingForRepair": self.damage.waiting,
            "waitedReads": self.damage.waited_reads,
            "diskFull": self.disk_full,
            "retentionDeletedFiles": self.deleted_files,
            "retention": self.last_round,
            "minOffset": self.store.native.min_offset,
            "cut": self.store.native.open_report.get("cut_offset"),
            "scrubPasses": self.scrub.passes,
            "scrubbedBytes": self.scrub.scrubbed_bytes,
            "scrubFound": self.scrub.found,
            "scrubAt": self.scrub.cursor,
        }


def _clamped_wait_ms(due_wall_ms: int, most_ms: int) -> int:
    """How long until a wall-clock time, never less than 0 nor more than `most_ms` (a wall
    clock stepped back must not postpone the next pass for longer than one interval)."""
    return max(0, min(most_ms, due_wall_ms - wall_ms()))


def _delete_one(native: Store, d: RetentionDecision, floor: int | None) -> list[str]:
    return apply(native, d, keep_from=floor, max_files=1)
