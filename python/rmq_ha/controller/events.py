"""Controller events: the only things the Raft log carries and the only way state changes.

Type numbers follow RocketMQ's `EventType` (1 alter, 2 apply id, 3 elect, 5 clean, 6 update
address; 4 is RocketMQ's read barrier, which here is an empty Raft entry, not an event).

Unlike RocketMQ's events, ours carry the epochs they were computed from or produce. `apply`
checks them and skips an event whose premise no longer holds (see `state.py`), so an event
validated against an older state can never, say, install a master at an epoch another master
already holds, even if the driver pipelines requests instead of serializing them as DLedger's
EventScheduler does.

Encoding: one compact JSON object, keys sorted, ids as sorted lists; `decode_event` is strict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from rmq_ha.controller import _json
from rmq_ha.controller._json import DecodeError

__all__ = [
    "AlterSyncStateSetEvent",
    "ApplyBrokerIdEvent",
    "CleanBrokerDataEvent",
    "DecodeError",
    "ElectMasterEvent",
    "Event",
    "EventType",
    "UpdateBrokerAddressEvent",
    "decode_event",
    "decode_events",
    "encode_event",
    "encode_events",
]


class EventType(IntEnum):
    ALTER_SYNC_STATE_SET = 1
    APPLY_BROKER_ID = 2
    ELECT_MASTER = 3
    CLEAN_BROKER_DATA = 5
    UPDATE_BROKER_ADDRESS = 6


@dataclass(frozen=True)
class ApplyBrokerIdEvent:
    """Adds replica `broker_id` (creating the broker set if new). Skipped if the id is taken
    by a different check code."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    register_check_code: str


@dataclass(frozen=True)
class ElectMasterEvent:
    """A new master (or none when `new_master_broker_id` is None).

    `master_epoch` / `sync_state_set_epoch` are the values after the event: masterEpoch+1, and
    syncStateSetEpoch+1 when elected (the set becomes {new master}) or unchanged when not.
    `recovery`: the master comes from outside the SyncStateSet because every member lost data
    (issue 13, `elect.py`); encoded only when true, so older logs decode unchanged.
    """

    broker_name: str
    new_master_broker_id: int | None
    master_epoch: int
    sync_state_set_epoch: int
    recovery: bool = False

    @property
    def elected(self) -> bool:
        return self.new_master_broker_id is not None


@dataclass(frozen=True)
class AlterSyncStateSetEvent:
    """Replaces the SyncStateSet; valid only under the same master and master epoch, and only
    as the direct successor of the set epoch it was validated against."""

    broker_name: str
    master_broker_id: int
    master_epoch: int
    new_sync_state_set: frozenset[int]
    new_sync_state_set_epoch: int


@dataclass(frozen=True)
class UpdateBrokerAddressEvent:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str


@dataclass(frozen=True)
class CleanBrokerDataEvent:
    """Removes the whole broker set (`broker_ids` None) or only the given replicas."""

    broker_name: str
    broker_ids: frozenset[int] | None


Event = (
    ApplyBrokerIdEvent
    | ElectMasterEvent
    | AlterSyncStateSetEvent
    | UpdateBrokerAddressEvent
    | CleanBrokerDataEvent
)


def _ids(ids: frozenset[int] | None) -> list[int] | None:
    return None if ids is None else sorted(ids)


def event_to_json(event: Event) -> dict[str, Any]:
    match event:
        case ApplyBrokerIdEvent():
            return {
                "type": int(EventType.APPLY_BROKER_ID),
                "clusterName": event.cluster_name,
                "brokerName": event.broker_name,
                "brokerId": event.broker_id,
                "brokerAddress": event.broker_address,
                "registerCheckCode": event.register_check_code,
            }
        case ElectMasterEvent():
            out: dict[str, Any] = {
                "type": int(EventType.ELECT_MASTER),
                "brokerName": event.broker_name,
                "newMasterBrokerId": event.new_master_broker_id,
                "masterEpoch": event.master_epoch,
                "syncStateSetEpoch": event.sync_state_set_epoch,
            }
            if event.recovery:
                out["recovery"] = True
            return out
        case AlterSyncStateSetEvent():
            return {
                "type": int(EventType.ALTER_SYNC_STATE_SET),
                "brokerName": event.broker_name,
                "masterBrokerId": event.master_broker_id,
                "masterEpoch": event.master_epoch,
                "newSyncStateSet": _ids(event.new_sync_state_set),
                "newSyncStateSetEpoch": event.new_sync_state_set_epoch,
            }
        case UpdateBrokerAddressEvent():
            return {
                "type": int(EventType.UPDATE_BROKER_ADDRESS),
                "clusterName": event.cluster_name,
                "brokerName": event.broker_name,
                "brokerId": event.broker_id,
                "brokerAddress": event.broker_address,
            }
        case CleanBrokerDataEvent():
            return {
                "type": int(EventType.CLEAN_BROKER_DATA),
                "brokerName": event.broker_name,
                "brokerIds": _ids(event.broker_ids),
            }


def _apply_id(o: Mapping[str, Any]) -> Event:
    return ApplyBrokerIdEvent(
        cluster_name=_json.get_str(o, "clusterName"),
        broker_name=_json.get_str(o, "brokerName"),
        broker_id=_json.get_int(o, "brokerId"),
        broker_address=_json.get_str(o, "brokerAddress"),
        register_check_code=_json.get_str(o, "registerCheckCode"),
    )


def _elect(o: Mapping[str, Any]) -> Event:
    return ElectMasterEvent(
        broker_name=_json.get_str(o, "brokerName"),
        new_master_broker_id=_json.get_opt_int(o, "newMasterBrokerId"),
        master_epoch=_json.get_int(o, "masterEpoch"),
        sync_state_set_epoch=_json.get_int(o, "syncStateSetEpoch"),
        recovery=_json.get_bool(o, "recovery") if "recovery" in o else False,
    )


def _alter(o: Mapping[str, Any]) -> Event:
    return AlterSyncStateSetEvent(
        broker_name=_json.get_str(o, "brokerName"),
        master_broker_id=_json.get_int(o, "masterBrokerId"),
        master_epoch=_json.get_int(o, "masterEpoch"),
        new_sync_state_set=_json.get_int_set(o, "newSyncStateSet"),
        new_sync_state_set_epoch=_json.get_int(o, "newSyncStateSetEpoch"),
    )


def _update_address(o: Mapping[str, Any]) -> Event:
    return UpdateBrokerAddressEvent(
        cluster_name=_json.get_str(o, "clusterName"),
        broker_name=_json.get_str(o, "brokerName"),
        broker_id=_json.get_int(o, "brokerId"),
        broker_address=_json.get_str(o, "brokerAddress"),
    )


def _clean(o: Mapping[str, Any]) -> Event:
    return CleanBrokerDataEvent(
        broker_name=_json.get_str(o, "brokerName"),
        broker_ids=_json.get_opt_int_set(o, "brokerIds"),
    )


_DECODERS = {
    EventType.APPLY_BROKER_ID: _apply_id,
    EventType.ELECT_MASTER: _elect,
    EventType.ALTER_SYNC_STATE_SET: _alter,
    EventType.UPDATE_BROKER_ADDRESS: _update_address,
    EventType.CLEAN_BROKER_DATA: _clean,
}


def event_from_json(value: Any) -> Event:
    obj = _json.as_object(value, "event")
    try:
        kind = EventType(_json.get_int(obj, "type"))
    except ValueError as exc:
        raise DecodeError(f"unknown event type {obj.get('type')!r}") from exc
    event = _DECODERS[kind](obj)
    # Round-trip the key set so a field we do not know (or a missing one) is refused.
    _json.exact_keys(obj, event_to_json(event), kind.name)
    return event


def encode_event(event: Event) -> bytes:
    return _json.dumps(event_to_json(event))


def decode_event(data: bytes) -> Event:
    return event_from_json(_json.loads(data))


def encode_events(events: Iterable[Event]) -> bytes:
    """Several events of one request as one Raft entry (RocketMQ appends them as a batch)."""
    return _json.dumps([event_to_json(e) for e in events])


def decode_events(data: bytes) -> list[Event]:
    value = _json.loads(data)
    if not isinstance(value, list):
        raise DecodeError("event batch: expected a list")
    return [event_from_json(v) for v in value]
