"""Durable small-file writes shared by the roles (consumer offsets, topic configs, Raft
hard state and snapshots): temp file, fsync, rename, fsync of the directory.

The broker's config files (topics, consumer offsets, subscription groups, delay progress) also
keep the previous version as ``NAME.bak`` (RocketMQ's ``MixAll.string2File``) and are read
with a fall-back to it (RocketMQ's ``ConfigManager.loadBak``): a file emptied, cut or garbled
outside the broker costs the last change at most, never every topic or every offset.

A config file is also *sealed*: its first key, ``rmqHaCrc32``, is the CRC32 of the JSON the
broker wrote (the file without that key). Damage that still parses — a flipped bit in a digit,
a table's key misspelled so it reads as an empty table — fails the check, and the backup is
read as for any damaged file. A file without the key (written by RocketMQ, by an rmq_ha
before 2026-11-28, or by hand: delete the key to edit a file by hand) is read unchecked."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rmq_ha.errors import CorruptFileError

log = logging.getLogger(__name__)

T = TypeVar("T")


def fsync_dir(d: Path) -> None:
    """Makes creations, renames and deletions in `d` durable."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, keep_backup: bool = False) -> None:
    """Replaces `path` with `data` so that a crash leaves either the old or the new content.
    With `keep_backup`, the content it replaces is kept as ``PATH.bak``; a crash between the
    two renames leaves no ``PATH`` and the previous content in ``PATH.bak``, which
    ``read_with_backup`` then reads."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        # a full disk (ENOSPC) or an I/O error: the old file stays as it was, and the
        # partial temp file does not take what space is left
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if keep_backup and path.exists():
        os.replace(path, backup_path(path))
    os.replace(tmp, path)
    fsync_dir(path.parent)


CRC_KEY = "rmqHaCrc32"
_SEAL = b'{"' + CRC_KEY.encode() + b'":'


def seal(data: bytes) -> bytes:
    """A JSON object's bytes with their CRC32 as its first key (``unseal`` gives them back).
    Anything that is not an object is returned as it is."""
    if not data.startswith(b"{"):
        return data
    sep = b"" if data[1:].lstrip().startswith(b"}") else b","
    return _SEAL + str(zlib.crc32(data)).encode() + sep + data[1:]


def unseal(raw: bytes) -> bytes:
    """The JSON a sealed file was written from, checked against its CRC (ValueError when it
    does not match); an unsealed file as it is. A file whose head is a few bytes off the seal's
    is damaged, not unsealed: that is where a flip in the key would otherwise turn the check
    off. Leading whitespace and a UTF-8 BOM (which JSON readers skip) are skipped here too, so
    they cannot hide a seal."""
    raw = raw.removeprefix(b"\xef\xbb\xbf").lstrip()
    if raw.startswith(_SEAL):
        i = j = len(_SEAL)
        while j < len(raw) and j - i <= 10 and raw[j : j + 1].isdigit():
            j += 1
        if j == i or j - i > 10:
            raise ValueError(f"its {CRC_KEY} is damaged")
        stored = int(raw[i:j])
        original = b"{" + (raw[j + 1 :] if raw[j : j + 1] == b"," else raw[j:])
        crc = zlib.crc32(original)
        if crc != stored:
            raise ValueError(
                f"checksum mismatch (the file says {stored:#010x}, its content is {crc:#010x})"
            )
        return original
    head = raw[: len(_SEAL)]
    if len(head) == len(_SEAL) and sum(a != b for a, b in zip(head, _SEAL, strict=True)) <= 3:
        raise ValueError(f"its {CRC_KEY} key is damaged")
    return raw


def require_keys(doc: object, *keys: str) -> dict[str, Any]:
    """`doc` as a JSON object holding every key in `keys` (ValueError naming the first one
    missing): a table whose key is gone is damage, not an empty table."""
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    for k in keys:
        if k not in doc:
            raise ValueError(f"no {k!r} key")
    return doc


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def write_with_backup(path: Path, data: bytes) -> None:
    """The broker's config files: ``write_atomic`` of the sealed `data`, keeping the previous
    content."""
    write_atomic(path, seal(data), keep_backup=True)


def corrupt_path(path: Path) -> Path:
    return path.with_name(path.name + ".corrupt")


def read_with_backup(path: Path, parse: Callable[[bytes], T], what: str) -> T | None:
    """``parse`` of ``PATH``; of ``PATH.bak`` when ``PATH`` is missing, empty, fails its
    checksum (``unseal``) or does not parse (a WARNING names the file and why); None when
    neither exists. Raises CorruptFileError naming both files when neither can be read: the
    broker refuses to start rather than start without its topics or offsets.

    When the backup is read because ``PATH`` is damaged, ``PATH`` is moved aside to
    ``PATH.corrupt`` (kept for a post-mortem; an older one is replaced): the next write then
    finds no ``PATH`` to rotate, so the good backup is not overwritten by the damaged file
    (RocketMQ's ``string2File`` would, and a second damage would then stop the broker)."""
    problems: list[str] = []
    for p in (path, backup_path(path)):
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            problems.append(f"{p} is missing")
            continue
        except OSError as e:
            problems.append(f"{p}: {e.strerror or e}")
            continue
        if not raw.strip():
            problems.append(f"{p} is empty")
            continue
        if b"\0" in raw:
            # JSON text never holds a NUL byte; without this, json guesses UTF-32 from them
            # and says so, which points nowhere near zeroed blocks
            problems.append(f"{p} is damaged: it holds NUL bytes (zeroed blocks?)")
            continue
        try:
            out = parse(unseal(raw))
        except (
            ValueError,
            TypeError,
            AttributeError,
            KeyError,
            RecursionError,
            ArithmeticError,  # e.g. 1e999 where an integer belongs: OverflowError
        ) as e:
            problems.append(f"{p} is unreadable: {type(e).__name__}: {e}")
            continue
        if p != path:
            aside = ""
            if path.exists():
                try:
                    os.replace(path, corrupt_path(path))
                    fsync_dir(path.parent)
                    aside = f" (the damaged file is kept as {corrupt_path(path)})"
                except OSError as e:
                    aside = f" (the damaged file could not be moved aside: {e})"
            log.warning("%s: %s; read the backup %s instead%s", what, problems[0], p, aside)
        return out
    if all(x.endswith(" is missing") for x in problems):
        return None
    raise CorruptFileError(f"{what} cannot be read: {'; '.join(problems)}", str(path))


class ConfigFileWriter:
    """One broker config file written from snapshots, on the event loop or off it (a worker
    thread: building the JSON of thousands of groups or offsets and its fsyncs took 50-150 ms,
    a stall of every request, probe). A snapshot is taken where the table lives; its job may
    run later and elsewhere; writes never overlap, and a job whose snapshot is older than the
    one already written does nothing, so the file only moves forward."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._taken = 0  # snapshots handed out
        self._written = 0  # the newest snapshot on disk

    def job(
        self, encode: Callable[[], bytes], on_failure: Callable[[], None]
    ) -> Callable[[], None]:
        """The write of one snapshot: `encode` builds its bytes from data the caller copied;
        `on_failure` runs when the write fails (the table is dirty again) before it raises."""
        self._taken += 1
        gen = self._taken

        def run() -> None:
            try:
                data = encode()
                with self._lock:
                    if gen <= self._written:
                        return  # a newer snapshot is already there
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    write_with_backup(self.path, data)
                    self._written = gen
            except BaseException:
                on_failure()
                raise

        return run

    def dirty_job(self, table: Dirty, encode: Callable[[], bytes]) -> Callable[[], None]:
        """`job` for a table with a `dirty` flag: clears it now, sets it again if the write
        fails."""
        table.dirty = False

        def dirty_again() -> None:
            table.dirty = True

        return self.job(encode, dirty_again)


class Dirty(Protocol):
    dirty: bool


#: What `persist_or_log` last failed to write, so a failing write is logged once, not every
#: round, and its recovery once.
_failing: dict[str, str] = {}


def persist_or_log(what: str, persist: Callable[[], object]) -> bool:
    """Runs a background write of a config file (consumer offsets every few seconds, topics at
    start, delay progress). An OSError (a full disk, a read-only or failing filesystem) is
    logged at ERROR once, with what stays only in memory, and the broker goes on: the table
    is still dirty and the next round writes it. A full disk must not stop the broker that
    would otherwise serve reads and free space by retention. Returns whether it wrote."""
    try:
        persist()
    except OSError as e:
        why = f"{type(e).__name__}: {e}"
        if _failing.get(what) != why:
            log.error(
                "cannot write %s (%s): kept in memory and retried every round; a crash now "
                "loses the changes since the last write",
                what,
                why,
            )
        _failing[what] = why
        return False
    if _failing.pop(what, None) is not None:
        log.warning("%s written again", what)
    return True
