"""ALTER_SYNC_STATE_SET, CLEAN_BROKER_DATA and the read requests: every validation path answers
RocketMQ's code and changes nothing (reference 2.8, 3.1, 3.6; ReplicasInfoManager)."""

from __future__ import annotations

from typing import Any

import pytest

from rmq_ha.controller import (
    AlterSyncStateSetEvent,
    AlterSyncStateSetRequest,
    CleanBrokerDataEvent,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetReplicaInfoRequest,
    GetSyncStateDataRequest,
    LocalController,
    ReplicaIdentity,
    ResponseCode,
    handle,
)

C, A = "cluster", "broker-a"
Code = ResponseCode


def refused(ctl: LocalController, req: Any, code: ResponseCode) -> None:
    before = ctl.state.snapshot()
    result = handle(ctl.state, req, ctl.live, ctl.config)
    assert result.response.code == code, result.response
    assert result.events == ()
    assert ctl.state.snapshot() == before


@pytest.fixture
def ctl() -> LocalController:
    """broker-a with replicas 1, 2, 3 alive; 1 is master at epoch 1, SyncStateSet {1}."""
    c = LocalController()
    for n in (1, 2, 3):
        c.join(C, A, f"10.0.0.{n}:10911")
    assert c.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    return c


def alter(members: set[int], *, master: int = 1, epoch: int = 1, ss_epoch: int = 1) -> Any:
    return AlterSyncStateSetRequest(A, master, epoch, frozenset(members), ss_epoch)


# --- ALTER_SYNC_STATE_SET --------------------------------------------------------------------


def test_alter_expands_the_set(ctl: LocalController) -> None:
    result = handle(ctl.state, alter({1, 2}), ctl.live)
    assert result.response.ok
    assert result.response.new_sync_state_set_epoch == 2
    assert result.events == (AlterSyncStateSetEvent(A, 1, 1, frozenset({1, 2}), 2),)
    assert ctl.state.apply(result.events[0])
    bs = ctl.state.broker_sets[A]
    assert bs.sync_state_set == {1, 2} and bs.sync_state_set_epoch == 2


def test_alter_shrinks_the_set(ctl: LocalController) -> None:
    assert ctl.request(alter({1, 2, 3})).ok
    ctl.kill(C, A, 3)  # a dead member may be removed; it just may not be added
    assert ctl.request(alter({1, 2}, ss_epoch=2)).ok
    assert ctl.state.broker_sets[A].sync_state_set == {1, 2}


def test_alter_unknown_set_fails(ctl: LocalController) -> None:
    req = AlterSyncStateSetRequest("nope", 1, 1, frozenset({1}), 1)
    refused(ctl, req, Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)


def test_alter_to_the_same_set_fails(ctl: LocalController) -> None:
    refused(ctl, alter({1}), Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)


def test_alter_from_a_non_master_is_invalid_master(ctl: LocalController) -> None:
    refused(ctl, alter({1, 2}, master=2), Code.CONTROLLER_INVALID_MASTER)


def test_alter_with_no_master_is_invalid_master(ctl: LocalController) -> None:
    for n in (1, 2, 3):
        ctl.kill(C, A, n)
    resp = ctl.request(ElectMasterRequest.of_controller_trigger(A))
    assert resp.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    ctl.set_live(C, A, 1)
    refused(ctl, alter({1, 2}, epoch=2), Code.CONTROLLER_INVALID_MASTER)


def test_alter_with_a_stale_master_epoch_is_fenced(ctl: LocalController) -> None:
    refused(ctl, alter({1, 2}, epoch=0), Code.CONTROLLER_FENCED_MASTER_EPOCH)
    refused(ctl, alter({1, 2}, epoch=2), Code.CONTROLLER_FENCED_MASTER_EPOCH)


def test_alter_with_a_stale_set_epoch_is_fenced(ctl: LocalController) -> None:
    refused(ctl, alter({1, 2}, ss_epoch=0), Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH)


def test_alter_with_an_unknown_replica_is_invalid_replicas(ctl: LocalController) -> None:
    refused(ctl, alter({1, 9}), Code.CONTROLLER_INVALID_REPLICAS)


def test_alter_adding_a_dead_replica_is_not_alive(ctl: LocalController) -> None:
    ctl.kill(C, A, 2)
    refused(ctl, alter({1, 2}), Code.CONTROLLER_BROKER_NOT_ALIVE)
    ctl.set_live(C, A, 2, alive=False)  # a heartbeat entry marked dead counts as dead too
    refused(ctl, alter({1, 2}), Code.CONTROLLER_BROKER_NOT_ALIVE)


def test_alter_dropping_the_master_fails(ctl: LocalController) -> None:
    refused(ctl, alter({2, 3}), Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)
    refused(ctl, alter(set()), Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)


def test_alter_checks_in_rocketmq_order(ctl: LocalController) -> None:
    # Wrong master, wrong epochs and an unknown member at once: the master check comes first.
    bad = alter({2, 9}, master=2, epoch=7, ss_epoch=7)
    refused(ctl, bad, Code.CONTROLLER_INVALID_MASTER)
    refused(ctl, alter({2, 9}, epoch=7, ss_epoch=7), Code.CONTROLLER_FENCED_MASTER_EPOCH)
    refused(ctl, alter({2, 9}, ss_epoch=7), Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH)
    refused(ctl, alter({2, 9}), Code.CONTROLLER_INVALID_REPLICAS)


def test_an_alter_validated_before_a_failover_is_stale_after_it(ctl: LocalController) -> None:
    proposed = handle(ctl.state, alter({1, 2}), ctl.live).events[0]
    ctl.kill(C, A, 1)
    assert ctl.request(ElectMasterRequest.of_controller_trigger(A)).code == (
        Code.CONTROLLER_MASTER_NOT_AVAILABLE
    )
    before = ctl.state.snapshot()
    assert not ctl.state.apply(proposed)
    assert ctl.state.snapshot() == before


# --- CLEAN_BROKER_DATA -----------------------------------------------------------------------


def test_clean_with_malformed_ids_is_invalid(ctl: LocalController) -> None:
    req = CleanBrokerDataRequest(C, A, "2;x")
    refused(ctl, req, Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)


def test_clean_unknown_set_is_invalid(ctl: LocalController) -> None:
    req = CleanBrokerDataRequest(C, "nope", clean_living_broker=True)
    refused(ctl, req, Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)


def test_clean_whole_set_with_a_master_is_invalid(ctl: LocalController) -> None:
    for n in (1, 2, 3):
        ctl.kill(C, A, n)
    refused(ctl, CleanBrokerDataRequest(C, A), Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)


def test_clean_whole_set_with_a_live_replica_is_invalid(ctl: LocalController) -> None:
    ctl.kill(C, A, 1)
    ctl.kill(C, A, 3)
    ctl.request(ElectMasterRequest.of_controller_trigger(A))  # SSS {1}: no master now
    assert ctl.state.broker_sets[A].master_broker_id is None
    refused(ctl, CleanBrokerDataRequest(C, A), Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)
    ctl.kill(C, A, 2)
    assert ctl.request(CleanBrokerDataRequest(C, A)).ok
    assert A not in ctl.state.broker_sets


def test_clean_live_ids_is_invalid(ctl: LocalController) -> None:
    req = CleanBrokerDataRequest(C, A, "2;3")
    refused(ctl, req, Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)


def test_clean_dead_ids_removes_them_from_replicas_and_set(ctl: LocalController) -> None:
    assert ctl.request(alter({1, 2, 3})).ok
    ctl.kill(C, A, 3)
    result = handle(ctl.state, CleanBrokerDataRequest(C, A, " 3; "), ctl.live)
    assert result.events == (CleanBrokerDataEvent(A, frozenset({3})),)
    assert ctl.state.apply(result.events[0])
    bs = ctl.state.broker_sets[A]
    assert set(bs.replicas) == {1, 2} and bs.sync_state_set == {1, 2}
    assert bs.master_broker_id == 1 and bs.master_epoch == 1


def test_clean_the_dead_master_ends_its_epoch(ctl: LocalController) -> None:
    assert ctl.request(alter({1, 2})).ok
    ctl.kill(C, A, 1)
    assert ctl.request(CleanBrokerDataRequest(C, A, "1")).ok
    bs = ctl.state.broker_sets[A]
    assert bs.master_broker_id is None and bs.master_epoch == 2
    assert 1 not in bs.replicas and bs.sync_state_set == {2}


def test_clean_that_would_empty_the_sync_state_set_is_invalid(ctl: LocalController) -> None:
    """Operator probe: cleaning the only (dead) SyncStateSet member left replicas 2 and 3,
    which held everything, and a group nobody could elect, for good, with a garbled reason.
    RocketMQ accepts it; we refuse and say how to get out."""
    ctl.kill(C, A, 1)
    before = ctl.state.snapshot()
    result = handle(ctl.state, CleanBrokerDataRequest(C, A, "1"), ctl.live, ctl.config)
    assert result.response.code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert "would empty the SyncStateSet" in (result.response.remark or "")
    assert "enableElectUncleanMaster" in (result.response.remark or "")
    assert result.events == () and ctl.state.snapshot() == before
    # with every replica down too: the ids still leave replicas nobody could elect
    ctl.kill(C, A, 2)
    ctl.kill(C, A, 3)
    refused(ctl, CleanBrokerDataRequest(C, A, "1"), Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)


def test_clean_living_ids_honours_the_ids(ctl: LocalController) -> None:
    # Deviation: RocketMQ ignores brokerControllerIdsToClean with cleanLivingBroker and drops
    # the whole set.
    assert ctl.request(CleanBrokerDataRequest(C, A, "3", clean_living_broker=True)).ok
    assert set(ctl.state.broker_sets[A].replicas) == {1, 2}


def test_clean_every_replica_by_id_removes_the_set(ctl: LocalController) -> None:
    assert ctl.request(CleanBrokerDataRequest(C, A, "1;2;3", clean_living_broker=True)).ok
    assert A not in ctl.state.broker_sets
    assert ctl.state.retired_epochs[A] == (2, 1)


# --- reads -----------------------------------------------------------------------------------


def test_get_replica_info(ctl: LocalController) -> None:
    refused(ctl, GetReplicaInfoRequest("nope"), Code.CONTROLLER_BROKER_METADATA_NOT_EXIST)
    resp = ctl.request(GetReplicaInfoRequest(A))
    assert resp.ok
    assert (resp.master_broker_id, resp.master_address) == (1, "10.0.0.1:10911")
    assert (resp.master_epoch, resp.sync_state_set_epoch, resp.sync_state_set) == (1, 1, {1})


def test_get_sync_state_data_splits_in_sync_and_others(ctl: LocalController) -> None:
    assert ctl.request(alter({1, 2})).ok
    ctl.kill(C, A, 3)
    resp = ctl.request(GetSyncStateDataRequest((A, "unknown-is-skipped")))
    assert resp.ok and set(resp.replicas_info) == {A}
    info = resp.replicas_info[A]
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set_epoch) == (1, 1, 2)
    assert info.in_sync_replicas == (
        ReplicaIdentity(A, 1, "10.0.0.1:10911", True),
        ReplicaIdentity(A, 2, "10.0.0.2:10911", True),
    )
    assert info.not_in_sync_replicas == (ReplicaIdentity(A, 3, "10.0.0.3:10911", False),)


def test_reads_propose_nothing(ctl: LocalController) -> None:
    for req in (GetReplicaInfoRequest(A), GetSyncStateDataRequest((A,))):
        before = ctl.state.snapshot()
        assert handle(ctl.state, req, ctl.live).events == ()
        assert ctl.state.snapshot() == before
