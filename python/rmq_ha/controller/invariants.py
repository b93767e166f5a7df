"""Safety invariants of the controller state, for tests and the deterministic simulator.

`check_state` looks at one state. `InvariantChecker` also remembers history: call `observe`
after every `apply` on every node (one checker shared by all nodes of a simulation run):
* masterEpoch and syncStateSetEpoch never decrease on a node (also across a set's removal and
  re-creation, thanks to the tombstones in `state.py`);
* at most one master per (brokerName, masterEpoch), across all nodes and the whole history;
* a newly elected master was in the previous SyncStateSet, unless unclean election is on, it
  is the set's first election (where RocketMQ lets the requesting broker win outright), or it
  was a recovery election (every member had lost data, issue 13: `elect.py`).
After a node restores a snapshot (restart), call `forget_node` first: its state legitimately
jumps back to the snapshot and then replays forward.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace

from rmq_ha.controller.state import FIRST_BROKER_CONTROLLER_ID, BrokerSet, ControllerState


class InvariantViolation(AssertionError):
    """A controller safety property failed; the message lists every failure found."""


def check_broker_set(bs: BrokerSet) -> list[str]:
    name, problems = bs.broker_name, []
    master = bs.master_broker_id
    if master is not None and master not in bs.sync_state_set:
        problems.append(f"{name}: master {master} not in SyncStateSet {sorted(bs.sync_state_set)}")
    if master is not None and master not in bs.replicas:
        problems.append(f"{name}: master {master} is not a registered replica")
    if not bs.sync_state_set.issubset(bs.replicas):
        problems.append(f"{name}: SyncStateSet {sorted(bs.sync_state_set)} has unknown replicas")
    if any(i < FIRST_BROKER_CONTROLLER_ID for i in bs.replicas):
        problems.append(f"{name}: broker id below 1 in {sorted(bs.replicas)}")
    if bs.replicas and bs.next_assign_broker_id <= max(bs.replicas):
        problems.append(f"{name}: nextAssignBrokerId {bs.next_assign_broker_id} already used")
    if bs.master_epoch < bs.initial_master_epoch:
        problems.append(f"{name}: masterEpoch {bs.master_epoch} below its initial value")
    return problems


def check_state(state: ControllerState) -> list[str]:
    """Invariants of a single state; an empty list means none failed."""
    problems = []
    for name, bs in state.broker_sets.items():
        if name != bs.broker_name:
            problems.append(f"{name}: table key differs from brokerName {bs.broker_name}")
        problems.extend(check_broker_set(bs))
    return problems


@dataclass(frozen=True)
class _Seen:
    master_epoch: int
    sync_state_set_epoch: int
    master: int | None
    sync_state_set: frozenset[int]
    first_time: bool
    present: bool  # False once the set was removed (its epochs still count)


class InvariantChecker:
    def __init__(self, *, enable_elect_unclean_master: bool = False) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self._masters: dict[tuple[str, int], int] = {}
        self._seen: dict[Hashable, dict[str, _Seen]] = {}

    def forget_node(self, node: Hashable) -> None:
        self._seen.pop(node, None)

    def observe(self, state: ControllerState, node: Hashable = 0) -> None:
        """Checks `state` against itself and the history; raises `InvariantViolation`."""
        problems = self.violations(state, node)
        if problems:
            raise InvariantViolation(f"node {node!r}: " + "; ".join(problems))

    def violations(self, state: ControllerState, node: Hashable = 0) -> list[str]:
        problems = check_state(state)
        seen = self._seen.setdefault(node, {})
        for name, bs in state.broker_sets.items():
            problems.extend(self._check_history(bs, seen.get(name)))
            problems.extend(self._check_one_master_per_epoch(bs))
            seen[name] = _Seen(
                bs.master_epoch,
                bs.sync_state_set_epoch,
                bs.master_broker_id,
                frozenset(bs.sync_state_set),
                bs.is_first_time_for_elect,
                True,
            )
        for name, prev in seen.items():
            if name not in state.broker_sets and prev.present:
                seen[name] = replace(prev, master=None, first_time=False, present=False)
        return problems

    def _check_history(self, bs: BrokerSet, prev: _Seen | None) -> list[str]:
        if prev is None:
            return []
        name, problems = bs.broker_name, []
        if bs.master_epoch < prev.master_epoch:
            problems.append(f"{name}: masterEpoch went {prev.master_epoch} -> {bs.master_epoch}")
        if bs.sync_state_set_epoch < prev.sync_state_set_epoch:
            problems.append(f"{name}: syncStateSetEpoch went backwards")
        if bs.master_epoch == prev.master_epoch and bs.master_broker_id != prev.master:
            problems.append(f"{name}: master changed within epoch {bs.master_epoch}")
        new_master = bs.master_broker_id
        elected_now = new_master is not None and bs.master_epoch == prev.master_epoch + 1
        clean_required = not (
            self.enable_elect_unclean_master or prev.first_time or bs.master_by_recovery
        )
        if elected_now and prev.present and clean_required:
            if new_master not in prev.sync_state_set:
                problems.append(
                    f"{name}: master {new_master} elected from outside the SyncStateSet "
                    f"{sorted(prev.sync_state_set)} with unclean election off"
                )
        return problems

    def _check_one_master_per_epoch(self, bs: BrokerSet) -> list[str]:
        if bs.master_broker_id is None:
            return []
        key = (bs.broker_name, bs.master_epoch)
        first = self._masters.setdefault(key, bs.master_broker_id)
        if first != bs.master_broker_id:
            who = f"masters {first} and {bs.master_broker_id}"
            return [f"{bs.broker_name}: {who} both hold epoch {bs.master_epoch}"]
        return []
