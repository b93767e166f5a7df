"""Controller safety invariants: the checkers catch violations, and random request sequences
(applied at once or pipelined, on a leader and a follower) never produce one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_ha.controller import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerKey,
    BrokerLiveInfo,
    BrokerSet,
    CleanBrokerDataRequest,
    ControllerConfig,
    ControllerState,
    ElectMasterRequest,
    Event,
    GetNextBrokerIdRequest,
    GetReplicaInfoRequest,
    GetSyncStateDataRequest,
    InvariantChecker,
    InvariantViolation,
    RegisterBrokerRequest,
    Replica,
    check_state,
    handle,
)

C = "c"
Draw = Callable[[st.SearchStrategy[Any]], Any]


def broker_set(**fields: Any) -> BrokerSet:
    bs = BrokerSet(C, "a", replicas={i: Replica(f"h{i}", f"h{i};0") for i in (1, 2, 3)})
    bs.next_assign_broker_id = 4
    for key, value in fields.items():
        setattr(bs, key, value)
    return bs


def state_of(bs: BrokerSet) -> ControllerState:
    return ControllerState(broker_sets={bs.broker_name: bs})


# --- the checkers catch what they should -----------------------------------------------------


def test_a_consistent_state_passes() -> None:
    ok = broker_set(master_broker_id=1, master_epoch=1, sync_state_set={1, 2})
    assert check_state(state_of(ok)) == []


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"master_broker_id": 3, "sync_state_set": {1}}, "not in SyncStateSet"),
        ({"master_broker_id": 9, "sync_state_set": {9}}, "not a registered replica"),
        ({"sync_state_set": {1, 7}}, "unknown replicas"),
        ({"next_assign_broker_id": 3}, "already used"),
        ({"master_epoch": 1, "initial_master_epoch": 2}, "below its initial"),
    ],
)
def test_check_state_flags(fields: dict[str, Any], words: str) -> None:
    problems = check_state(state_of(broker_set(**fields)))
    assert any(words in p for p in problems), problems


def test_master_epoch_must_not_decrease() -> None:
    checker = InvariantChecker()
    checker.observe(state_of(broker_set(master_broker_id=1, master_epoch=3, sync_state_set={1})))
    with pytest.raises(InvariantViolation, match="masterEpoch went 3 -> 2"):
        checker.observe(state_of(broker_set(master_epoch=2)))


def test_forget_node_allows_a_restore_to_an_older_snapshot() -> None:
    checker = InvariantChecker()
    checker.observe(state_of(broker_set(master_broker_id=1, master_epoch=3, sync_state_set={1})))
    checker.forget_node(0)
    checker.observe(state_of(broker_set(master_broker_id=2, master_epoch=2, sync_state_set={2})))


def test_two_masters_in_one_epoch_across_nodes() -> None:
    checker = InvariantChecker()
    checker.observe(state_of(broker_set(master_broker_id=1, master_epoch=4, sync_state_set={1})))
    with pytest.raises(InvariantViolation, match="both hold epoch 4"):
        node_b = broker_set(master_broker_id=2, master_epoch=4, sync_state_set={2})
        checker.observe(state_of(node_b), node="b")


def test_master_must_come_from_the_previous_sync_state_set() -> None:
    before = broker_set(master_broker_id=1, master_epoch=1, sync_state_set={1, 2})
    after = broker_set(master_broker_id=3, master_epoch=2, sync_state_set={3})
    checker = InvariantChecker()
    checker.observe(state_of(before))
    with pytest.raises(InvariantViolation, match="outside the SyncStateSet"):
        checker.observe(state_of(after))
    unclean = InvariantChecker(enable_elect_unclean_master=True)
    unclean.observe(state_of(before))
    unclean.observe(state_of(after))


def test_first_election_may_pick_any_replica() -> None:
    checker = InvariantChecker()
    checker.observe(state_of(broker_set()))
    checker.observe(state_of(broker_set(master_broker_id=3, master_epoch=1, sync_state_set={3})))


# --- property: random request sequences keep every invariant ---------------------------------

NAMES = ("a", "b")
BROKER_IDS = st.integers(min_value=0, max_value=5)


@dataclass
class Sim:
    """A leader that validates requests and a follower that applies the same log."""

    config: ControllerConfig
    leader: ControllerState
    follower: ControllerState
    live: dict[BrokerKey, BrokerLiveInfo]
    pending: list[Event]
    checker: InvariantChecker

    def commit(self, count: int) -> None:
        for event in self.pending[:count]:
            applied = self.leader.apply(event)
            assert self.follower.apply(event) == applied
            self.checker.observe(self.leader, node="leader")
            self.checker.observe(self.follower, node="follower")
        del self.pending[:count]


def current(sim: Sim, name: str) -> BrokerSet | None:
    return sim.leader.get(name)


def known_id(draw: Draw, sim: Sim, name: str) -> int:
    """Mostly an id the set really has, sometimes any id (including invalid ones)."""
    bs = current(sim, name)
    pool = sorted(bs.replicas) if bs is not None and bs.replicas else []
    broker_id: int = draw(st.sampled_from(pool) if pool and draw(st.booleans()) else BROKER_IDS)
    return broker_id


@st.composite
def alter_request(draw: st.DrawFn, sim: Sim, name: str) -> AlterSyncStateSetRequest:
    bs = current(sim, name)
    members = frozenset(known_id(draw, sim, name) for _ in range(draw(st.integers(0, 3))))
    # Mostly the current master with current epochs (sometimes leaving itself out), so the
    # checks beyond the fencing ones get exercised; otherwise anything.
    mode = draw(st.sampled_from(["current", "current", "current", "no-master", "random"]))
    if mode != "random" and bs is not None and bs.master_broker_id is not None:
        master = bs.master_broker_id
        members = members | {master} if mode == "current" else members - {master}
        return AlterSyncStateSetRequest(
            name, master, bs.master_epoch, members, bs.sync_state_set_epoch
        )
    epochs = st.integers(0, 6)
    return AlterSyncStateSetRequest(name, draw(BROKER_IDS), draw(epochs), members, draw(epochs))


# Request kinds, weighted towards the ones that change the interesting state.
KINDS = ["next", "apply", "apply", "register", "replica-info", "sync-state-data", "clean"]
KINDS += ["alter"] * 6 + ["elect"] * 4


@st.composite
def request(draw: st.DrawFn, sim: Sim) -> Any:
    name = draw(st.sampled_from(NAMES))
    kind = draw(st.sampled_from(KINDS))
    broker_id = known_id(draw, sim, name)
    if kind == "next":
        return GetNextBrokerIdRequest(C, name)
    if kind == "apply":
        bs = current(sim, name)
        if draw(st.booleans()):
            broker_id = 1 if bs is None else bs.next_assign_broker_id
        check = f"{name}-{broker_id}:1;{draw(st.integers(0, 1))}"
        return ApplyBrokerIdRequest(C, name, broker_id, check)
    if kind == "register":
        address = draw(st.sampled_from([f"{name}-{broker_id}:1", f"{name}-{broker_id}:2"]))
        return RegisterBrokerRequest(C, name, broker_id, address)
    if kind == "alter":
        return draw(alter_request(sim, name))
    if kind == "elect":
        who = draw(st.none() | st.just(broker_id))
        return ElectMasterRequest(name, C, who, designate_elect=draw(st.booleans()))
    if kind == "clean":
        ids = draw(st.sampled_from([None, "1", "2;3", "x", "1;2;3;4;5"]))
        living = draw(st.integers(0, 3)) == 0
        return CleanBrokerDataRequest(C, name, ids, clean_living_broker=living)
    if kind == "replica-info":
        return GetReplicaInfoRequest(name)
    return GetSyncStateDataRequest(NAMES)


def heartbeat(draw: Draw, sim: Sim) -> None:
    name = draw(st.sampled_from(NAMES))
    key = BrokerKey(C, name, known_id(draw, sim, name))
    if draw(st.integers(0, 5)) == 0:
        sim.live.pop(key, None)
        return
    sim.live[key] = BrokerLiveInfo(
        alive=draw(st.integers(0, 6)) > 0,
        epoch=draw(st.integers(0, 5)),
        max_offset=draw(st.sampled_from([0, 1, 2**31 - 1, 2**31 + 1, 2**40])),
        election_priority=draw(st.integers(0, 3)),
    )


def step(draw: Draw, sim: Sim, pipelined: bool) -> None:
    action = draw(st.integers(0, 11))
    if action < 4:
        heartbeat(draw, sim)
        return
    if action == 4 and sim.pending:
        sim.commit(draw(st.integers(1, len(sim.pending))))
        return
    if action == 5:
        # A follower restarts from a snapshot of itself.
        sim.follower = ControllerState.restore(sim.follower.snapshot())
        sim.checker.forget_node("follower")
        sim.checker.observe(sim.follower, node="follower")
        return
    req = draw(request(sim))
    before = sim.leader.snapshot()
    result = handle(sim.leader, req, sim.live, sim.config)
    assert sim.leader.snapshot() == before, "a handler mutated the state"
    assert (result.events == ()) or result.response.code in (0, 2004)
    sim.pending.extend(result.events)
    if not pipelined:
        sim.commit(len(sim.pending))


def bootstrap(sim: Sim) -> None:
    for name in NAMES:
        for n in (1, 2, 3):
            req = ApplyBrokerIdRequest(C, name, n, f"{name}-{n}:1;0")
            sim.pending.extend(handle(sim.leader, req, sim.live, sim.config).events)
            sim.commit(len(sim.pending))
            sim.live[BrokerKey(C, name, n)] = BrokerLiveInfo(alive=True)


@settings(deadline=None, max_examples=200)
@given(st.data(), st.booleans(), st.booleans())
def test_random_requests_keep_the_invariants(
    data: st.DataObject, unclean: bool, pipelined: bool
) -> None:
    sim = Sim(
        config=ControllerConfig(enable_elect_unclean_master=unclean),
        leader=ControllerState(),
        follower=ControllerState(),
        live={},
        pending=[],
        checker=InvariantChecker(enable_elect_unclean_master=unclean),
    )
    if data.draw(st.booleans()):
        bootstrap(sim)  # start most runs from live groups, so steps reach elections quickly
    for _ in range(data.draw(st.integers(10, 80))):
        step(data.draw, sim, pipelined)
    sim.commit(len(sim.pending))
    assert sim.follower.snapshot() == sim.leader.snapshot()
    assert ControllerState.restore(sim.leader.snapshot()) == sim.leader


def test_the_property_reaches_interesting_states() -> None:
    """Guards the generator: a fixed, honest script elects, fails over and expands."""
    sim = Sim(ControllerConfig(), ControllerState(), ControllerState(), {}, [], InvariantChecker())

    def run(req: Any) -> Any:
        result = handle(sim.leader, req, sim.live, sim.config)
        sim.pending.extend(result.events)
        sim.commit(len(sim.pending))
        return result.response

    for n in (1, 2):
        assert run(ApplyBrokerIdRequest(C, "a", n, f"a-{n}:1;0")).ok
        sim.live[BrokerKey(C, "a", n)] = BrokerLiveInfo(alive=True)
    assert run(ElectMasterRequest("a", C, 1)).ok
    assert run(AlterSyncStateSetRequest("a", 1, 1, frozenset({1, 2}), 1)).ok
    del sim.live[BrokerKey(C, "a", 1)]
    assert run(ElectMasterRequest("a")).master_broker_id == 2
    assert sim.leader.broker_sets["a"].master_epoch == 2
