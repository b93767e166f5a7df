"""Durable small-file writes shared by the roles (consumer offsets, topic configs, Raft
hard state and snapshots): temp file, fsync, rename, fsync of the directory."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(d: Path) -> None:
    """Makes creations, renames and deletions in `d` durable."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replaces `path` with `data` so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
