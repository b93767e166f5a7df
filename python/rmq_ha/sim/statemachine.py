"""State machines for the simulator: a trivial append-only list of entries, and the
controller state machine wrapped for the simulator's checks."""

from __future__ import annotations

import struct
from collections.abc import Callable

from rmq_ha.controller.events import DecodeError, ElectMasterEvent, Event, decode_events
from rmq_ha.controller.invariants import InvariantChecker
from rmq_ha.controller.state import ControllerState

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


class ControllerSimStateMachine:
    """The controller state machine (`ControllerState`) as a simulated node's Raft state
    machine, in the shape of `rmq_ha.controller.role.ControllerStateMachine` (each entry is one
    request's `encode_events` batch; `apply` returns, per event, whether it applied).

    It also keeps a `ListStateMachine` of the raw entries, so the simulator's Raft checks
    (state machine safety, durability of acknowledged entries) still hold; its snapshot is both
    parts. After every apply and restore it calls `InvariantChecker.observe`, and before a
    restore `forget_node` (the state legitimately jumps). `force_stale_elect` is a deliberate
    bug for tests: a stale ElectMaster event is applied anyway (apply skips its epoch check).
    """

    def __init__(
        self,
        node: str,
        invariants: InvariantChecker,
        on_apply: Callable[[int, bytes], None] | None = None,
        on_restore: Callable[[list[Item]], None] | None = None,
        second_master: bool = False,
    ) -> None:
        self.node = node
        self.state = ControllerState()
        self.log = ListStateMachine(on_apply, on_restore)
        self._invariants = invariants
        self._second_master = second_master

    @property
    def items(self) -> list[Item]:
        return self.log.items

    def apply(self, index: int, data: bytes) -> object:
        self.log.apply(index, data)
        try:
            events = decode_events(data)
        except DecodeError:
            return []
        results = [self._apply(e) for e in events]
        self._invariants.observe(self.state, self.node)
        return results

    def _apply(self, event: Event) -> bool:
        bs = self.state.get(event.broker_name)
        before = None if bs is None else (bs.master_epoch, bs.master_broker_id)
        ok = self.state.apply(event)
        if ok and self._second_master and isinstance(event, ElectMasterEvent):
            bs = self.state.get(event.broker_name)
            if bs is not None and before is not None and before[1] is not None:
                # The bug: the new master keeps the old master's epoch.
                bs.master_epoch = before[0]
        return ok

    def snapshot(self) -> bytes:
        listed = self.log.snapshot()
        return struct.pack(">I", len(listed)) + listed + self.state.snapshot()

    def restore(self, data: bytes) -> None:
        (size,) = struct.unpack_from(">I", data, 0)
        self.log.restore(data[4 : 4 + size])
        self.state = ControllerState.restore(data[4 + size :])
        self._invariants.forget_node(self.node)
        self._invariants.observe(self.state, self.node)
