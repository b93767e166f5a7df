"""A trivial replicated state machine for the simulator: an append-only list of entries."""

from __future__ import annotations

import struct
from collections.abc import Callable

_HEAD = struct.Struct(">qI")

Item = tuple[int, bytes]


class ListStateMachine:
    """Keeps every applied (index, data); `apply` returns the new length. The optional hooks let
    the simulator's checker witness every apply and restore."""

    def __init__(
        self,
        on_apply: Callable[[int, bytes], None] | None = None,
        on_restore: Callable[[list[Item]], None] | None = None,
    ) -> None:
        self.items: list[Item] = []
        self._on_apply = on_apply
        self._on_restore = on_restore

    def apply(self, index: int, data: bytes) -> object:
        if self.items and index <= self.items[-1][0]:
            raise AssertionError(f"apply of {index} after {self.items[-1][0]}")
        self.items.append((index, data))
        if self._on_apply is not None:
            self._on_apply(index, data)
        return len(self.items)

    def snapshot(self) -> bytes:
        parts = [struct.pack(">I", len(self.items))]
        for index, data in self.items:
            parts.append(_HEAD.pack(index, len(data)))
            parts.append(data)
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        (count,) = struct.unpack_from(">I", data, 0)
        pos = 4
        items: list[Item] = []
        for _ in range(count):
            index, size = _HEAD.unpack_from(data, pos)
            pos += _HEAD.size
            items.append((index, data[pos : pos + size]))
            pos += size
        self.items = items
        if self._on_restore is not None:
            self._on_restore(items)
