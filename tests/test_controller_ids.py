"""Broker id assignment and controller-side registration (RocketMQ 5.1.1+, issue #5989 / PR
#6100; reference 2.12): GET_NEXT_BROKER_ID -> APPLY_BROKER_ID with registerCheckCode ->
REGISTER_BROKER, plus UpdateBrokerAddress when a known broker comes back at a new address."""

from __future__ import annotations

from typing import Any

from rmq_ha.controller import (
    ApplyBrokerIdEvent,
    ApplyBrokerIdRequest,
    CleanBrokerDataRequest,
    ControllerState,
    ElectMasterRequest,
    GetNextBrokerIdRequest,
    LocalController,
    RegisterBrokerRequest,
    ResponseCode,
    UpdateBrokerAddressEvent,
    handle,
)

C, A = "cluster", "broker-a"
Code = ResponseCode


def refused(ctl: LocalController, req: Any, code: ResponseCode) -> None:
    """The request is answered with `code`, proposes no event and leaves the state alone."""
    before = ctl.state.snapshot()
    result = handle(ctl.state, req, ctl.live, ctl.config)
    assert result.response.code == code, result.response
    assert result.events == ()
    assert ctl.state.snapshot() == before


def test_first_broker_of_a_new_set_gets_id_1() -> None:
    ctl = LocalController()
    assert ctl.request(GetNextBrokerIdRequest(C, A)).next_broker_id == 1
    resp = ctl.request(ApplyBrokerIdRequest(C, A, 1, "10.0.0.1:10911;1700000000000"))
    assert resp.ok
    bs = ctl.state.broker_sets[A]
    assert bs.cluster_name == C
    # RocketMQ takes the address from the check code ("brokerAddr;currentTimeMillis").
    assert bs.replicas[1].address == "10.0.0.1:10911"
    assert bs.replicas[1].register_check_code == "10.0.0.1:10911;1700000000000"
    assert ctl.request(GetNextBrokerIdRequest(C, A)).next_broker_id == 2


def test_full_flow_assigns_sequential_ids() -> None:
    ctl = LocalController()
    ids = [ctl.join(C, A, f"10.0.0.{n}:10911") for n in (1, 2, 3)]
    assert ids == [1, 2, 3]
    assert set(ctl.state.broker_sets[A].replicas) == {1, 2, 3}


def test_new_set_refuses_any_id_but_1() -> None:
    refused(
        LocalController(), ApplyBrokerIdRequest(C, A, 2, "x:1;0"), Code.CONTROLLER_BROKER_ID_INVALID
    )


def test_second_apply_with_another_check_code_is_refused() -> None:
    ctl = LocalController()
    assert ctl.request(ApplyBrokerIdRequest(C, A, 1, "10.0.0.1:1;1")).ok
    rival = ApplyBrokerIdRequest(C, A, 1, "10.0.0.2:1;2")
    refused(ctl, rival, Code.CONTROLLER_BROKER_ID_INVALID)


def test_apply_retry_with_the_same_check_code_is_idempotent() -> None:
    ctl = LocalController()
    req = ApplyBrokerIdRequest(C, A, 1, "10.0.0.1:1;1")
    assert ctl.request(req).ok
    before = ctl.state.snapshot()
    assert ctl.request(req).ok  # the broker lost the first answer and retried
    assert ctl.state.snapshot() == before


def test_ids_below_1_are_refused() -> None:
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1")
    for bad in (0, -1):
        refused(ctl, ApplyBrokerIdRequest(C, A, bad, "x:1;0"), Code.CONTROLLER_BROKER_ID_INVALID)


def test_apply_without_an_address_in_the_check_code_is_invalid() -> None:
    refused(LocalController(), ApplyBrokerIdRequest(C, A, 1, ""), Code.CONTROLLER_INVALID_REQUEST)
    refused(
        LocalController(), ApplyBrokerIdRequest(C, "", 1, "a:1;0"), Code.CONTROLLER_INVALID_REQUEST
    )


def test_an_id_applied_out_of_order_is_never_handed_out_again() -> None:
    # Deviation: RocketMQ adds 1 per added broker, so after ids 1 and 5 it offers 3, 4 and then
    # 5, which is taken: that broker is refused, starts over, is offered 5 again, forever.
    # We offer max(id) + 1.
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1")
    assert ctl.request(ApplyBrokerIdRequest(C, A, 5, "10.0.0.5:1;0")).ok
    assert ctl.request(GetNextBrokerIdRequest(C, A)).next_broker_id == 6


def test_rival_apply_that_loses_the_race_is_stale_at_apply_time() -> None:
    state = ControllerState()
    first = ApplyBrokerIdEvent(C, A, 1, "a:1", "a:1;1")
    rival = ApplyBrokerIdEvent(C, A, 1, "b:1", "b:1;2")
    assert state.apply(first)
    before = state.snapshot()
    assert not state.apply(rival)  # both validated before either committed
    assert state.snapshot() == before


def test_register_unknown_set_or_id_needs_registration() -> None:
    ctl = LocalController()
    need = Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    refused(ctl, RegisterBrokerRequest(C, A, 1, "10.0.0.1:1"), need)
    ctl.join(C, A, "10.0.0.1:1")
    refused(ctl, RegisterBrokerRequest(C, A, 7, "10.0.0.7:1"), need)


def test_register_with_a_wrong_check_code_is_refused() -> None:
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1", check_time_ms=5)
    req = RegisterBrokerRequest(C, A, 1, "10.0.0.1:1", register_check_code="10.0.0.1:1;6")
    refused(ctl, req, Code.CONTROLLER_BROKER_ID_INVALID)
    ok = RegisterBrokerRequest(C, A, 1, "10.0.0.1:1", register_check_code="10.0.0.1:1;5")
    assert ctl.request(ok).ok


def test_register_without_address_is_invalid() -> None:
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1")
    refused(ctl, RegisterBrokerRequest(C, A, 1, ""), Code.CONTROLLER_INVALID_REQUEST)


def test_register_reports_the_master_only_while_it_is_alive() -> None:
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1")
    ctl.join(C, A, "10.0.0.2:1")
    resp = ctl.request(RegisterBrokerRequest(C, A, 2, "10.0.0.2:1"))
    assert resp.ok and resp.master_broker_id is None  # no master yet: the broker elects
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    resp = ctl.request(RegisterBrokerRequest(C, A, 2, "10.0.0.2:1"))
    assert (resp.master_broker_id, resp.master_address, resp.master_epoch) == (1, "10.0.0.1:1", 1)
    assert resp.sync_state_set == {1} and resp.sync_state_set_epoch == 1
    ctl.kill(C, A, 1)
    resp = ctl.request(RegisterBrokerRequest(C, A, 2, "10.0.0.2:1"))
    assert resp.master_broker_id is None and resp.master_address is None


def test_register_at_a_new_address_updates_it() -> None:
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1")
    same = handle(ctl.state, RegisterBrokerRequest(C, A, 1, "10.0.0.1:1"), ctl.live)
    assert same.events == ()
    moved = handle(ctl.state, RegisterBrokerRequest(C, A, 1, "10.9.9.9:1"), ctl.live)
    assert moved.response.ok
    assert moved.events == (UpdateBrokerAddressEvent(C, A, 1, "10.9.9.9:1"),)
    assert ctl.state.broker_sets[A].replicas[1].address == "10.0.0.1:1"  # not yet committed
    assert ctl.state.apply(moved.events[0])
    replica = ctl.state.broker_sets[A].replicas[1]
    assert replica.address == "10.9.9.9:1"
    assert replica.register_check_code == "10.0.0.1:1;0"  # identity is the id, not the address


def test_update_address_of_a_cleaned_replica_is_stale() -> None:
    state = ControllerState()
    assert not state.apply(UpdateBrokerAddressEvent(C, A, 1, "x:1"))


def test_a_recreated_set_continues_from_its_old_epochs() -> None:
    # Deviation: RocketMQ restarts a re-created set at masterEpoch 0, below the epochs in the
    # brokers' epoch files (#9082 / #6586 workarounds wipe both). We keep a tombstone.
    ctl = LocalController()
    ctl.join(C, A, "10.0.0.1:1")
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    assert ctl.state.broker_sets[A].master_epoch == 1
    resp = ctl.request(CleanBrokerDataRequest(C, A, clean_living_broker=True))
    assert resp.ok and A not in ctl.state.broker_sets
    assert ctl.request(GetNextBrokerIdRequest(C, A)).next_broker_id == 1
    ctl.join(C, A, "10.0.0.1:1")
    bs = ctl.state.broker_sets[A]
    assert bs.master_epoch == 2  # removing a set with a master ended epoch 1
    assert bs.is_first_time_for_elect
    resp = ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1))
    assert resp.ok and resp.master_epoch == 3
