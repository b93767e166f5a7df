"""Trio facade over the native store.

Appends go straight to `rmq_ha._native.Store` (one call per batch; the GIL is released while Rust
encodes and writes). Waiting for durability must not block the event loop, so the native store
exposes a non-blocking pipe that receives a byte whenever its flush thread advances the flushed
offset. Waiters take turns reading it: one task at a time waits on the pipe with
`trio.lowlevel.wait_readable`, and when a byte arrives it wakes every other waiter to re-check
the flushed offset (and one of them takes over the pipe if it still has to wait). Many waiters
share one fdatasync (group commit). There is no background task, so `open_store` needs no
nursery and exceptions raised in its body come out as they are.

`open_store` logs what recovery did (`log_open_report`): every cut and every quarantined record
at WARNING/ERROR with offsets and sizes, consume queues rebuilt, a corrupt checkpoint. What it
logs at ERROR (acknowledged data lost or quarantined) is also appended to `<root>/incidents.log`,
because the next open no longer sees it (the checkpoint now matches the cut log): every open
warns while that file holds lines, and the operator deletes it once the incidents are reviewed.
`health` gathers what an admin command shows: the counters, the quarantine list, the open
report and the incidents on record.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from rmq_ha._native import AppendResult, Message, Store
from rmq_ha.durable import write_atomic
from rmq_ha.errors import ConfigError, StoreClosedError, StoreIOError

log = logging.getLogger(__name__)

#: Open-time losses on record, one line each, kept until the operator deletes the file.
INCIDENTS = "incidents.log"


def _where(e: Mapping[str, object]) -> str:
    if e.get("topic") is None:
        return "record unknown"
    return f"topic {e['topic']} queue {e['queue_id']} queue offset {e['queue_offset']}"


def log_open_report(
    report: Mapping[str, object],
    logger: logging.Logger = log,
    store: str = "store",
    errors: list[str] | None = None,
) -> int:
    """Logs what opening a store found (the native `open_report`): ERROR for lost durable
    bytes and quarantined records, WARNING for cuts of a torn tail, rebuilt consume queues and
    a corrupt or missing checkpoint, INFO for the rest. Returns how many WARNING/ERROR lines it
    wrote; the ERROR lines' text is appended to `errors` when given."""
    loud = 0

    def say(level: int, msg: str, *args: object) -> None:
        nonlocal loud
        if level >= logging.WARNING:
            loud += 1
        if level >= logging.ERROR and errors is not None:
            errors.append(msg % args if args else msg)
        logger.log(level, "%s: " + msg, store, *args)

    ckpt = str(report.get("checkpoint", ""))
    if ckpt.startswith("corrupt"):
        say(
            logging.WARNING,
            "checkpoint %s; validated the whole commitlog from %s",
            ckpt,
            report.get("scanned_from"),
        )
    end, start = report.get("valid_end"), report.get("scanned_from")
    if ckpt == "fresh" and isinstance(end, int) and isinstance(start, int) and end > start:
        # no checkpoint beside a commitlog that holds records: deleted, or lost with its
        # directory entry; nothing is known durable, so a cut tail cannot be told from a torn
        # write
        say(
            logging.WARNING,
            "no checkpoint, but the commitlog holds records: validated the whole commitlog "
            "from %s and re-dispatched it (nothing below its end is known durable)",
            report.get("scanned_from"),
        )
    cut = report.get("cut_offset")
    if cut is not None:
        below = bool(report.get("cut_below_durable"))
        say(
            logging.ERROR if below else logging.WARNING,
            "recovery cut the commitlog at %s (up to %s, %s non-zero bytes, segments deleted: %s):"
            " %s%s",
            cut,
            report.get("cut_to"),
            report.get("cut_bytes"),
            report.get("cut_segments") or "none",
            report.get("cut_reason"),
            " -- below the durable point: acknowledged records were lost" if below else "",
        )
    missing = report.get("missing_durable")
    if isinstance(missing, tuple | list) and len(missing) == 2:
        start, durable = missing
        say(
            logging.ERROR,
            "the commitlog ends at %s but the checkpoint says %s was durable: %s bytes of"
            " fsynced data are missing (zeroed or truncated files, or a checkpoint older than a"
            " truncation)",
            start,
            durable,
            int(durable) - int(start),
        )
    short = report.get("short_segments")
    for seg in short if isinstance(short, list) else []:
        name, size = seg
        say(
            logging.ERROR,
            "commitlog segment %s is %s bytes, shorter than the segment size, though later"
            " segments follow: the file was cut from outside and the records past that point"
            " are gone (reads quarantine them; a replica can repair them)",
            name,
            size,
        )
    for e in _entries(report.get("quarantined")):
        say(
            logging.ERROR,
            "quarantined damaged commitlog bytes at %s (%s bytes, %s): %s",
            e.get("offset"),
            e.get("size"),
            _where(e),
            e.get("reason"),
        )
    for e in _entries(report.get("healed")):
        say(
            logging.INFO,
            "quarantined bytes at %s (%s bytes) are valid again; released",
            e.get("offset"),
            e.get("size"),
        )
    for e in _entries(report.get("quarantine_dropped")):
        say(
            logging.INFO,
            "quarantined bytes at %s (%s bytes) were cut or deleted",
            e.get("offset"),
            e.get("size"),
        )
    qload = str(report.get("quarantine_load", ""))
    if qload.startswith("backup"):
        say(logging.WARNING, "quarantine list read from its backup (%s)", qload)
    elif qload.startswith("lost"):
        say(
            logging.ERROR,
            "quarantine list unreadable (%s); damaged records are found again on read",
            qload,
        )
    rebuilt = report.get("cq_rebuilt")
    if isinstance(rebuilt, list):
        for item in rebuilt:
            topic, qid, why = item
            say(
                logging.WARNING,
                "rebuilt consume queue %s/%s from the commitlog: %s",
                topic,
                qid,
                why,
            )
        if rebuilt:
            say(logging.INFO, "consume-queue rebuild wrote %s units", report["cq_rebuilt_units"])
    deferred = report.get("checkpoint_deferred")
    if deferred:
        say(
            logging.ERROR,
            "disk full: opened without writing a new checkpoint (%s); writes fail until space is"
            " freed, then the checkpoint is written",
            deferred,
        )
    problem = report.get("cq_manifest_problem")
    if problem:
        say(logging.WARNING, "consume-queue manifest unreadable (%s)", problem)
    clamped = report.get("confirm_clamped_from")
    if clamped is not None:
        say(
            logging.WARNING,
            "persisted confirm offset %s clamped to %s",
            clamped,
            report.get("confirm_offset"),
        )
    if report.get("cq_cut_units"):
        units = report["cq_cut_units"]
        say(logging.INFO, "cut %s consume-queue units past the dispatch point", units)
    return loud


def _entries(v: object) -> list[Mapping[str, object]]:
    return [e for e in v if isinstance(e, Mapping)] if isinstance(v, list) else []


def record_incidents(root: Path, lines: Sequence[str], now_s: float | None = None) -> None:
    """Appends each line, stamped with the UTC time, to `<root>/incidents.log` (fsynced). A
    failure to write (a full disk) is logged and does not stop the store."""
    if not lines:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s))
    text = "".join(f"{stamp} {line.replace(chr(10), ' ')}\n" for line in lines)
    path = root / INCIDENTS
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        log.error("%s: could not record %d incident(s) in %s: %s", root, len(lines), path, e)


def incidents_on_record(root: Path) -> list[str]:
    """The lines of `<root>/incidents.log` ([] when there is none or it cannot be read)."""
    try:
        text = (root / INCIDENTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def warn_incidents(root: Path, logger: logging.Logger = log) -> int:
    """One WARNING at open while incidents are on record; returns how many there are."""
    lines = incidents_on_record(root)
    if lines:
        logger.warning(
            "%s: %d store incident(s) on record (acknowledged data lost or quarantined), the"
            " first at %s, the last: %s -- see %s and delete it once reviewed",
            root,
            len(lines),
            lines[0].split(" ", 1)[0],
            lines[-1],
            root / INCIDENTS,
        )
    return len(lines)


def health(native: Store, root: Path | None = None) -> dict[str, object]:
    """What an admin command shows about a store: counters and offsets (`status`), the
    quarantined ranges, what the last open found and the incidents on record."""
    out: dict[str, object] = {
        "status": native.status(),
        "quarantined": native.quarantined(),
        "open": dict(native.open_report),
    }
    if root is not None:
        out["incidents"] = incidents_on_record(root)
    return out


class AsyncStore:
    """A native `Store` with an event-loop-friendly `wait_durable`."""

    def __init__(self, native: Store, root: Path | None = None) -> None:
        self.native = native
        self.root = root
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


#: The segment size a store's commitlog was written with, recorded next to it (text).
SEGMENT_SIZE_FILE = "commitlogSegmentSize"


def check_segment_size(root: Path, size: int, key: str) -> None:
    """Refuses a segment size other than the one recorded for this store. The store's own
    layout check cannot see a change while the commitlog has one segment (it may be short
    after damage): it was grown to the new size, and replication from a master rolling at the
    old size then failed every second (operator probe)."""
    p = root / SEGMENT_SIZE_FILE
    try:
        text = p.read_bytes().decode("ascii", errors="replace").strip()
    except FileNotFoundError:
        return
    except OSError as e:
        raise ConfigError(f"{p} cannot be read: {e.strerror or e}", key) from None
    # ASCII digits only: str.isdigit also takes '²' and other digits int() refuses
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(
            f"{p} does not hold a segment size ({text[:40]!r}); fix or delete it", key
        )
    if int(text) != size:
        raise ConfigError(
            f"bad config {key}: {size}, but this store's commitlog was written with"
            f" {int(text)}-byte segments ({p}): a store keeps its segment size, and every"
            " replica of a group must use the same one",
            key,
        )


@asynccontextmanager
async def open_store(
    root: str | os.PathLike[str],
    *,
    config_keys: Mapping[str, str] | None = None,
    record_segment_size: bool = False,
    **options: Any,
) -> AsyncIterator[AsyncStore]:
    """Opens (and recovers) the store off the event loop; closes it on exit. `config_keys`
    renames the option a ConfigError names (the broker's RocketMQ key for `segment_size`).
    With `record_segment_size` the segment size is checked against the one recorded for the
    store (`check_segment_size`) and recorded once the store is open."""
    path = Path(root)
    size = int(options.get("segment_size", 1 << 30))
    size_key = (config_keys or {}).get("segment_size", "segment_size")
    if record_segment_size:
        check_segment_size(path, size, size_key)
    try:
        native = await trio.to_thread.run_sync(lambda: Store(path, **options))
    except ConfigError as e:
        key = (config_keys or {}).get(e.key or "")
        if key is None:
            raise
        why = str(e).removeprefix(f"bad config {e.key}: ")
        raise ConfigError(f"bad config {key}: {why}", key) from None
    if record_segment_size and not (path / SEGMENT_SIZE_FILE).exists():
        write_atomic(path / SEGMENT_SIZE_FILE, f"{size}\n".encode())
    errors: list[str] = []
    log_open_report(native.open_report, log, str(path), errors)
    record_incidents(path, errors)
    warn_incidents(path)
    store = AsyncStore(native, path)
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
