"""The controller's replicated state (RocketMQ's ReplicasInfoManager tables) and `apply`.

One `BrokerSet` per brokerName merges RocketMQ's BrokerReplicaInfo and SyncStateInfo. Only
`ControllerState.apply` mutates it, and only with committed events, so every controller node
that applies the same log holds the same state. Request handlers (`requests.py`) only read.

Deviations from RocketMQ, each for safety:
* `apply` checks an event's premises (epochs, master, check code) and returns False instead of
  applying a stale event.
* Removing a whole broker set keeps its epochs as a tombstone; a set re-created under the same
  name continues from them, so masterEpoch never goes backwards for a brokerName (RocketMQ
  restarts at 0, which brokers holding later epochs in their epoch files then refuse).
* Cleaning the current master's id (or a whole set that still has a master) clears the master
  and bumps masterEpoch, as a "no master" election would, so the master is never a replica the
  controller no longer knows and no epoch ever names two different masters.
* nextAssignBrokerId becomes max(next, id + 1) on each add (RocketMQ adds 1), so an id applied
  out of order is never handed out again by GET_NEXT_BROKER_ID.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rmq_ha.controller import _json
from rmq_ha.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)

FIRST_BROKER_CONTROLLER_ID = 1  # MixAll.FIRST_BROKER_CONTROLLER_ID
SNAPSHOT_FORMAT = "rmq_ha.controller.state"
SNAPSHOT_VERSION = 2
#: Snapshot versions `restore` reads: 1 lacks `masterByRecovery` (false).
READABLE_SNAPSHOT_VERSIONS = (1, 2)


@dataclass
class Replica:
    address: str
    register_check_code: str


@dataclass
class BrokerSet:
    """Metadata of one broker group (brokerName)."""

    cluster_name: str
    broker_name: str
    replicas: dict[int, Replica] = field(default_factory=dict)
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0
    # masterEpoch when the set was created: 0, or a tombstone's epoch for a re-created set.
    initial_master_epoch: int = 0
    #: The master was chosen from outside the SyncStateSet because every member had lost data
    #: (a recovery election, issue 13); shown to operators, allowed by the invariants.
    master_by_recovery: bool = False

    @property
    def master_address(self) -> str | None:
        return self.address_of(self.master_broker_id)

    @property
    def is_first_time_for_elect(self) -> bool:
        # RocketMQ: masterEpoch == 0. Any ElectMaster event (even "no master") ends it.
        return self.master_epoch == self.initial_master_epoch

    def address_of(self, broker_id: int | None) -> str | None:
        replica = None if broker_id is None else self.replicas.get(broker_id)
        return None if replica is None else replica.address

    def broker_addrs(self) -> dict[int, str]:
        return {i: r.address for i, r in sorted(self.replicas.items())}


@dataclass
class ControllerState:
    broker_sets: dict[str, BrokerSet] = field(default_factory=dict)
    # brokerName -> (masterEpoch, syncStateSetEpoch) of a removed set: see the module doc.
    retired_epochs: dict[str, tuple[int, int]] = field(default_factory=dict)

    def get(self, broker_name: str) -> BrokerSet | None:
        return self.broker_sets.get(broker_name)

    def apply(self, event: Event) -> bool:
        """Applies one committed event; False means it was stale and changed nothing.

        Deterministic in (state, event) only, as every Raft replica must be.
        """
        match event:
            case ApplyBrokerIdEvent():
                return self._apply_broker_id(event)
            case ElectMasterEvent():
                return self._elect_master(event)
            case AlterSyncStateSetEvent():
                return self._alter_sync_state_set(event)
            case UpdateBrokerAddressEvent():
                return self._update_address(event)
            case CleanBrokerDataEvent():
                return self._clean(event)

    def _apply_broker_id(self, event: ApplyBrokerIdEvent) -> bool:
        bs = self.broker_sets.get(event.broker_name)
        if bs is None:
            bs = self._create_set(event.cluster_name, event.broker_name)
        existing = bs.replicas.get(event.broker_id)
        if existing is not None:
            # An idempotent retry by the same broker is fine; a rival's claim lost the race.
            return existing.register_check_code == event.register_check_code
        bs.replicas[event.broker_id] = Replica(event.broker_address, event.register_check_code)
        bs.next_assign_broker_id = max(bs.next_assign_broker_id, event.broker_id + 1)
        return True

    def _create_set(self, cluster_name: str, broker_name: str) -> BrokerSet:
        master_epoch, ss_epoch = self.retired_epochs.pop(broker_name, (0, 0))
        bs = BrokerSet(
            cluster_name,
            broker_name,
            master_epoch=master_epoch,
            sync_state_set_epoch=ss_epoch,
            initial_master_epoch=master_epoch,
        )
        self.broker_sets[broker_name] = bs
        return bs

    def _elect_master(self, event: ElectMasterEvent) -> bool:
        bs = self.broker_sets.get(event.broker_name)
        if bs is None or event.master_epoch != bs.master_epoch + 1:
            return False
        new_master = event.new_master_broker_id
        if new_master is None:
            # No candidate: drop the master but keep the SyncStateSet (RocketMQ does too), so
            # the old in-sync members stay the only clean candidates.
            if event.sync_state_set_epoch != bs.sync_state_set_epoch:
                return False
        elif event.sync_state_set_epoch != bs.sync_state_set_epoch + 1:
            return False
        elif new_master not in bs.replicas:
            return False
        else:
            bs.sync_state_set = {new_master}
            bs.sync_state_set_epoch = event.sync_state_set_epoch
        bs.master_broker_id = new_master
        bs.master_epoch = event.master_epoch
        bs.master_by_recovery = new_master is not None and event.recovery
        return True

    def _alter_sync_state_set(self, event: AlterSyncStateSetEvent) -> bool:
        bs = self.broker_sets.get(event.broker_name)
        premise_holds = (
            bs is not None
            and bs.master_broker_id == event.master_broker_id
            and bs.master_epoch == event.master_epoch
            and event.new_sync_state_set_epoch == bs.sync_state_set_epoch + 1
            and event.master_broker_id in event.new_sync_state_set
            and event.new_sync_state_set.issubset(bs.replicas)
        )
        if not premise_holds or bs is None:
            return False
        bs.sync_state_set = set(event.new_sync_state_set)
        bs.sync_state_set_epoch = event.new_sync_state_set_epoch
        return True

    def _update_address(self, event: UpdateBrokerAddressEvent) -> bool:
        bs = self.broker_sets.get(event.broker_name)
        replica = None if bs is None else bs.replicas.get(event.broker_id)
        if replica is None:
            return False
        replica.address = event.broker_address
        return True

    def _clean(self, event: CleanBrokerDataEvent) -> bool:
        bs = self.broker_sets.get(event.broker_name)
        if bs is None:
            return False
        if event.broker_ids:
            for broker_id in event.broker_ids:
                bs.replicas.pop(broker_id, None)
                bs.sync_state_set.discard(broker_id)
            if bs.master_broker_id in event.broker_ids:
                bs.master_broker_id = None
                bs.master_epoch += 1
        if not event.broker_ids or not bs.replicas:
            if bs.master_broker_id is not None:
                # Removing a set with a master (cleanLivingBroker) ends that master's epoch,
                # so a re-created set never shows "no master" at an epoch that had one.
                bs.master_epoch += 1
            del self.broker_sets[event.broker_name]
            self.retired_epochs[event.broker_name] = (bs.master_epoch, bs.sync_state_set_epoch)
        return True

    # --- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as bytes for a Raft snapshot; equal states give equal bytes."""
        return _json.dumps(
            {
                "format": SNAPSHOT_FORMAT,
                "version": SNAPSHOT_VERSION,
                "brokerSets": [_set_to_json(self.broker_sets[n]) for n in sorted(self.broker_sets)],
                "retiredEpochs": [
                    {"brokerName": n, "masterEpoch": m, "syncStateSetEpoch": s}
                    for n, (m, s) in sorted(self.retired_epochs.items())
                ],
            }
        )

    @classmethod
    def restore(cls, data: bytes) -> ControllerState:
        """Inverse of `snapshot`; raises `DecodeError` on anything it did not write."""
        obj = _json.as_object(_json.loads(data), "snapshot")
        _json.exact_keys(obj, ("format", "version", "brokerSets", "retiredEpochs"), "snapshot")
        version = _json.get_int(obj, "version")
        if obj["format"] != SNAPSHOT_FORMAT or version not in READABLE_SNAPSHOT_VERSIONS:
            raise _json.DecodeError(f"unsupported snapshot {obj['format']!r} v{version!r}")
        state = cls()
        for item in _list(obj, "brokerSets"):
            bs = _set_from_json(item, version)
            if bs.broker_name in state.broker_sets:
                raise _json.DecodeError(f"duplicate broker set {bs.broker_name!r}")
            state.broker_sets[bs.broker_name] = bs
        for item in _list(obj, "retiredEpochs"):
            o = _json.as_object(item, "retiredEpochs")
            _json.exact_keys(o, ("brokerName", "masterEpoch", "syncStateSetEpoch"), "retired")
            epochs = (_json.get_int(o, "masterEpoch"), _json.get_int(o, "syncStateSetEpoch"))
            state.retired_epochs[_json.get_str(o, "brokerName")] = epochs
        return state


_SET_KEYS = (
    "clusterName",
    "brokerName",
    "replicas",
    "nextAssignBrokerId",
    "masterBrokerId",
    "masterEpoch",
    "syncStateSet",
    "syncStateSetEpoch",
    "initialMasterEpoch",
    "masterByRecovery",
)


def _set_to_json(bs: BrokerSet) -> dict[str, Any]:
    return {
        "clusterName": bs.cluster_name,
        "brokerName": bs.broker_name,
        "replicas": [
            {"brokerId": i, "address": r.address, "registerCheckCode": r.register_check_code}
            for i, r in sorted(bs.replicas.items())
        ],
        "nextAssignBrokerId": bs.next_assign_broker_id,
        "masterBrokerId": bs.master_broker_id,
        "masterEpoch": bs.master_epoch,
        "syncStateSet": sorted(bs.sync_state_set),
        "syncStateSetEpoch": bs.sync_state_set_epoch,
        "initialMasterEpoch": bs.initial_master_epoch,
        "masterByRecovery": bs.master_by_recovery,
    }


def _set_from_json(value: Any, version: int) -> BrokerSet:
    o = _json.as_object(value, "brokerSet")
    keys = _SET_KEYS if version >= 2 else tuple(k for k in _SET_KEYS if k != "masterByRecovery")
    _json.exact_keys(o, keys, "brokerSet")
    replicas: dict[int, Replica] = {}
    for item in _list(o, "replicas"):
        r = _json.as_object(item, "replica")
        _json.exact_keys(r, ("brokerId", "address", "registerCheckCode"), "replica")
        replica = Replica(_json.get_str(r, "address"), _json.get_str(r, "registerCheckCode"))
        replicas[_json.get_int(r, "brokerId")] = replica
    return BrokerSet(
        cluster_name=_json.get_str(o, "clusterName"),
        broker_name=_json.get_str(o, "brokerName"),
        replicas=replicas,
        next_assign_broker_id=_json.get_int(o, "nextAssignBrokerId"),
        master_broker_id=_json.get_opt_int(o, "masterBrokerId"),
        master_epoch=_json.get_int(o, "masterEpoch"),
        sync_state_set=set(_json.get_int_set(o, "syncStateSet")),
        sync_state_set_epoch=_json.get_int(o, "syncStateSetEpoch"),
        initial_master_epoch=_json.get_int(o, "initialMasterEpoch"),
        master_by_recovery=_json.get_bool(o, "masterByRecovery") if version >= 2 else False,
    )


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key)
    if not isinstance(value, list):
        raise _json.DecodeError(f"{key}: expected a list")
    return value
