"""The bytes the Raft log and Raft snapshots carry: event and snapshot codecs round-trip, are
deterministic, and refuse anything malformed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha.controller import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ControllerState,
    DecodeError,
    ElectMasterEvent,
    ElectMasterRequest,
    Event,
    EventType,
    LocalController,
    UpdateBrokerAddressEvent,
    decode_event,
    decode_events,
    encode_event,
    encode_events,
)

names = st.text(min_size=1, max_size=12)
ids = st.integers(min_value=-(2**63), max_value=2**63 - 1)
id_sets = st.frozensets(st.integers(min_value=1, max_value=2**40), max_size=6)

events: st.SearchStrategy[Event] = st.one_of(
    st.builds(ApplyBrokerIdEvent, names, names, ids, names, names),
    st.builds(ElectMasterEvent, names, st.none() | ids, ids, ids),
    st.builds(AlterSyncStateSetEvent, names, ids, ids, id_sets, ids),
    st.builds(UpdateBrokerAddressEvent, names, names, ids, names),
    st.builds(CleanBrokerDataEvent, names, st.none() | id_sets),
)

EXAMPLES: list[Event] = [
    ApplyBrokerIdEvent("c", "broker-a", 1, "10.0.0.1:10911", "10.0.0.1:10911;17"),
    ElectMasterEvent("broker-a", 2, 5, 9),
    ElectMasterEvent("broker-a", None, 6, 9),
    AlterSyncStateSetEvent("broker-a", 2, 5, frozenset({3, 2, 1}), 10),
    UpdateBrokerAddressEvent("c", "broker-a", 3, "10.0.0.9:10911"),
    CleanBrokerDataEvent("broker-a", frozenset({3})),
    CleanBrokerDataEvent("broker-a", None),
]


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_each_event_round_trips(event: Event) -> None:
    data = encode_event(event)
    assert decode_event(data) == event
    assert encode_event(decode_event(data)) == data


def test_encoding_names_rocketmq_event_types_and_sorts_ids() -> None:
    obj = json.loads(encode_event(EXAMPLES[3]))
    assert obj["type"] == int(EventType.ALTER_SYNC_STATE_SET) == 1
    assert obj["newSyncStateSet"] == [1, 2, 3]
    assert [json.loads(encode_event(e))["type"] for e in EXAMPLES[:2]] == [2, 3]


@settings(deadline=None, max_examples=300)
@given(events)
def test_any_event_round_trips(event: Event) -> None:
    assert decode_event(encode_event(event)) == event


@settings(deadline=None, max_examples=100)
@given(st.lists(events, max_size=4))
def test_batches_round_trip(batch: list[Event]) -> None:
    assert decode_events(encode_events(batch)) == batch


def mutated(**changes: object) -> bytes:
    obj = json.loads(encode_event(EXAMPLES[3]))
    for key, value in changes.items():
        if value is KeyError:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"not json",
        b"[1, 2]",
        b'{"type": 4}',  # READ_EVENT is not a log event here
        b'{"type": 99}',
        mutated(type="1"),
        mutated(masterEpoch=KeyError),
        mutated(extra=1),
        mutated(masterEpoch=True),
        mutated(masterEpoch=1.5),
        mutated(masterBrokerId=None),
        mutated(brokerName=7),
        mutated(newSyncStateSet=[1, 1]),
        mutated(newSyncStateSet="1;2"),
        mutated(newSyncStateSet=[1, "2"]),
    ],
)
def test_malformed_events_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_event(data)


def test_malformed_batch_is_refused() -> None:
    with pytest.raises(DecodeError):
        decode_events(encode_event(EXAMPLES[0]))


# --- snapshots -------------------------------------------------------------------------------


def busy_controller() -> LocalController:
    ctl = LocalController()
    for name in ("broker-b", "broker-a"):
        for n in (1, 2, 3):
            ctl.join("c", name, f"{name}-{n}:10911", check_time_ms=n)
        assert ctl.request(ElectMasterRequest.of_broker_trigger("c", name, 2)).ok
    ctl.state.apply(AlterSyncStateSetEvent("broker-a", 2, 1, frozenset({1, 2}), 2))
    ctl.state.apply(CleanBrokerDataEvent("broker-b", None))
    ctl.join("c", "broker-b", "again:1")
    return ctl


def test_snapshot_round_trip() -> None:
    state = busy_controller().state
    data = state.snapshot()
    restored = ControllerState.restore(data)
    assert restored == state
    assert restored.snapshot() == data
    assert restored.broker_sets["broker-b"].master_epoch == 2  # tombstone survived


def test_restored_state_behaves_the_same() -> None:
    state = busy_controller().state
    restored = ControllerState.restore(state.snapshot())
    event = ElectMasterEvent("broker-a", 1, 2, 3)
    assert state.apply(event) and restored.apply(event)
    assert restored.snapshot() == state.snapshot()


def test_version_1_snapshots_restore_without_the_recovery_flag() -> None:
    """Snapshots written before issue 13 (v1) have no masterByRecovery: read as false."""
    obj = json.loads(busy_controller().state.snapshot())
    obj["version"] = 1
    for bs in obj["brokerSets"]:
        del bs["masterByRecovery"]
    restored = ControllerState.restore(json.dumps(obj).encode())
    assert not any(bs.master_by_recovery for bs in restored.broker_sets.values())
    assert restored.snapshot() == busy_controller().state.snapshot()


def test_empty_state_snapshot() -> None:
    assert ControllerState.restore(ControllerState().snapshot()) == ControllerState()


def snapshot_with(path: list[object], value: object) -> bytes:
    obj = json.loads(busy_controller().state.snapshot())
    target = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"{}",
        snapshot_with(["format"], "other"),
        snapshot_with(["version"], 3),
        snapshot_with(["version"], 1),  # a v1 snapshot has no masterByRecovery key
        snapshot_with(["version"], True),
        snapshot_with(["brokerSets"], {}),
        snapshot_with(["brokerSets", 0, "masterEpoch"], "1"),
        snapshot_with(["brokerSets", 0, "syncStateSet"], [2, 2]),
        snapshot_with(["brokerSets", 0, "replicas", 0, "brokerId"], None),
        snapshot_with(["brokerSets", 1, "brokerName"], "broker-a"),
        snapshot_with(["retiredEpochs"], [{"brokerName": "x"}]),
    ],
)
def test_malformed_snapshots_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        ControllerState.restore(data)
