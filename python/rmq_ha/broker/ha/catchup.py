"""What a replica is known to have held, and whether recovery lost part of it (issue 13).

A replica's log can end, after a crash, below what it held before: the unflushed tail of an
ASYNC_FLUSH store is torn by a power loss, or recovery cuts a damaged record and what follows.
Two facts survive such a loss and bound what the replica once held:

* the start offset of its last epoch: a replica records `(epoch, start)` only once its log
  reaches `start` (a master appends its epoch at its max offset; a slave records the epoch of
  bytes or heartbeats at its own position);
* its persisted confirm offset (the checkpoint's, before recovery clamps it): every byte
  below it was on every SyncStateSet member;
* its checkpoint's durable (fsynced) offset, when recovery finds fsynced bytes missing
  (zeroed or truncated by damage, not torn by a power loss): a slave acknowledges what it has
  stored before its confirm offset catches up, so the bytes between the two may be
  acknowledged writes.

If the recovered log ends below either, the replica lost bytes it once held, some of which may
be acknowledged writes that only it and its SyncStateSet peers had. It must not become master
until it holds them again (copied from a replica that has them), or it would make the others
cut those bytes at their next handshake. `CatchUp` is that debt: the offset to reach and the
epoch of the last byte below it (which a replica covering it must have reached). It is
persisted before recovery cuts the epoch file, so a second crash cannot forget it, and it is
cleared once the log reaches the offset again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rmq_ha.durable import write_atomic
from rmq_ha.errors import CorruptFileError

log = logging.getLogger(__name__)

FILE_NAME = "haCatchUp"

#: The offset of a debt whose size is unknown: the checkpoint that said how far the log
#: reached is missing or damaged (a damaged debt file is treated alike). No replica covers it;
#: following a master replaces it with what that master held (RoleCore._slave_following).
UNKNOWN_OFFSET = 2**63 - 1


@dataclass(frozen=True)
class CatchUp:
    """The replica once held every byte below `offset`; the last one was in `epoch`."""

    offset: int
    epoch: int
    reason: str

    def to_json(self) -> bytes:
        return json.dumps(
            {"offset": self.offset, "epoch": self.epoch, "reason": self.reason}
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CatchUp:
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        offset, epoch, reason = obj.get("offset"), obj.get("epoch"), obj.get("reason", "")
        if not isinstance(offset, int) or not isinstance(epoch, int) or offset < 0:
            raise ValueError(f"bad offset/epoch in {obj!r}")
        return cls(offset, epoch, str(reason))


def epoch_of_byte(entries: Sequence[tuple[int, int]], offset: int) -> int:
    """The epoch owning the byte just below `offset`: the last entry starting below it."""
    epoch = 0
    for e, start in entries:
        if start < offset:
            epoch = e
    return epoch


def catch_up_after_recovery(
    entries: Sequence[tuple[int, int]],
    max_offset: int,
    confirm_before_clamp: int | None,
    persisted: CatchUp | None,
    durable_lost_below: int | None = None,
    reach_unknown: bool = False,
) -> CatchUp | None:
    """The debt of a replica whose recovered log ends at `max_offset`, from its epoch entries
    as they were before recovery touched them, the checkpoint's confirm offset if recovery
    clamped it, a debt persisted by an earlier start, and the checkpoint's durable offset when
    recovery found fsynced bytes below it missing; `reach_unknown` when the checkpoint that
    says how far the log reached is missing or damaged on a replica that held something (the
    caller decides: it had epochs, or a controller identity). None when it lost nothing it is
    known to have held (or has caught up since)."""
    found: list[CatchUp] = []
    if reach_unknown:
        found.append(
            CatchUp(
                UNKNOWN_OFFSET,
                entries[-1][0] if entries else 0,
                "the store's checkpoint is missing or damaged: how far the log reached before is"
                " unknown",
            )
        )
    if durable_lost_below is not None and durable_lost_below > max_offset:
        found.append(
            CatchUp(
                durable_lost_below,
                epoch_of_byte(entries, durable_lost_below),
                f"{durable_lost_below - max_offset} fsynced bytes below {durable_lost_below}"
                " are missing",
            )
        )
    if entries:
        last_epoch, last_start = entries[-1]
        if last_start > max_offset:
            found.append(
                CatchUp(
                    last_start,
                    epoch_of_byte(entries, last_start),
                    f"epoch {last_epoch} started at {last_start}",
                )
            )
    if confirm_before_clamp is not None and confirm_before_clamp > max_offset:
        found.append(
            CatchUp(
                confirm_before_clamp,
                epoch_of_byte(entries, confirm_before_clamp),
                f"the confirm offset was {confirm_before_clamp}",
            )
        )
    if persisted is not None and persisted.offset > max_offset:
        found.append(persisted)
    if not found:
        return None
    return max(found, key=lambda c: (c.offset, c.epoch))


def load(root: Path) -> CatchUp | None:
    path = root / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        # a directory in its place, no permission, an I/O error: the start is refused naming
        # the file (nothing can be written there either, so the debt could not be kept)
        raise CorruptFileError(
            f"catch-up record {path} cannot be read: {e.strerror or e}; fix or delete it"
            " (see docs/ha.md: deleting it accepts what this replica may have lost)",
            str(path),
        ) from None
    try:
        return CatchUp.from_json(data)
    except ValueError as e:
        # A damaged debt file must not make a replica electable: keep it unelectable until
        # an operator looks (the log line says which file).
        log.error("%s is unreadable (%s): treating this replica as needing catch-up", path, e)
        return CatchUp(UNKNOWN_OFFSET, 2**31 - 1, f"unreadable {FILE_NAME}: {e}")


def save(root: Path, debt: CatchUp) -> None:
    write_atomic(root / FILE_NAME, debt.to_json())


def clear(root: Path) -> None:
    (root / FILE_NAME).unlink(missing_ok=True)
