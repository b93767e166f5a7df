"""ELECT_MASTER and DefaultElectPolicy (reference 3.3; RocketMQ #10578, #5663, #8380)."""

from __future__ import annotations

import pytest

from rmq_ha.controller import (
    AlterSyncStateSetRequest,
    BrokerLiveInfo,
    ControllerConfig,
    ElectMasterEvent,
    ElectMasterRequest,
    LocalController,
    ResponseCode,
    default_elect_policy,
    handle,
    rank_key,
    scan_need_reelect,
)
from rmq_ha.controller.elect import Election

C, A = "cluster", "broker-a"
Code = ResponseCode


def policy(
    live: dict[int, BrokerLiveInfo],
    sss: set[int],
    *,
    everyone: set[int] | None = None,
    old: int | None = None,
    prefer: int | None = None,
) -> int | None:
    return default_elect_policy(
        sync_state_set=sss,
        replicas=everyone if everyone is not None else sss,
        unclean=everyone is not None,
        old_master=old,
        prefer_broker_id=prefer,
        live_info=live.get,
    ).master


def up(epoch: int = 0, offset: int = 0, priority: int = 2**31 - 1) -> BrokerLiveInfo:
    return BrokerLiveInfo(alive=True, epoch=epoch, max_offset=offset, election_priority=priority)


# --- the policy ------------------------------------------------------------------------------


def java_buggy_compare(a: BrokerLiveInfo, b: BrokerLiveInfo) -> int:
    """RocketMQ's comparator before #10579: (int) (o2.maxOffset - o1.maxOffset)."""
    diff = (b.max_offset - a.max_offset) & 0xFFFFFFFF
    return diff - 2**32 if diff >= 2**31 else diff


def test_rocketmq_10578_higher_offset_wins_past_2_pow_31() -> None:
    low, high = up(epoch=3, offset=0), up(epoch=3, offset=2**31 + 1)
    # The case really trips the Java cast: it ranks the empty replica first.
    assert java_buggy_compare(low, high) < 0
    for live in ({1: low, 2: high}, {2: high, 1: low}):
        assert policy(live, {1, 2}) == 2
    assert rank_key(2, high) < rank_key(1, low)


def test_higher_epoch_beats_higher_offset() -> None:
    assert policy({1: up(epoch=5, offset=10), 2: up(epoch=4, offset=10**12)}, {1, 2}) == 1


def test_lower_priority_value_wins_a_tie() -> None:
    # brokerElectionPriority: lower is preferred (DefaultElectPolicy sorts it ascending).
    live = {1: up(offset=7, priority=5), 2: up(offset=7, priority=1), 3: up(offset=7)}
    assert policy(live, {1, 2, 3}) == 2


def test_lowest_id_breaks_a_full_tie() -> None:
    assert policy({3: up(), 2: up(), 4: up()}, {2, 3, 4}) == 2


def test_dead_or_unknown_brokers_are_not_candidates() -> None:
    live = {1: BrokerLiveInfo(alive=False, max_offset=99), 2: up(offset=1)}
    assert policy(live, {1, 2, 3}) == 2
    assert policy({1: BrokerLiveInfo(alive=False)}, {1, 3}) is None


def test_live_old_master_is_kept_even_if_behind() -> None:
    assert policy({1: up(offset=1), 2: up(offset=100)}, {1, 2}, old=1) == 1


def test_designated_broker_is_honoured_if_a_candidate() -> None:
    live = {1: up(offset=100), 2: up(offset=1)}
    assert policy(live, {1, 2}, old=1, prefer=2) == 2
    assert policy(live, {1, 2}, old=1, prefer=1) == 1
    assert policy(live, {1, 2}, old=None, prefer=2) == 2


def test_designated_broker_that_is_no_candidate_yields_nobody() -> None:
    live = {1: up(), 2: up(), 3: up()}
    assert policy(live, {1, 2}, prefer=3) is None  # not in the set
    assert policy({1: up()}, {1, 2}, prefer=2) is None  # dead
    assert policy(live, {1, 2}, everyone={1, 2, 3}, prefer=3) == 3  # unclean allows it


def test_unclean_only_after_the_set_has_no_candidate() -> None:
    live = {2: up(offset=5), 3: up(offset=9)}
    assert policy(live, {1, 2}) == 2
    assert policy(live, {1, 2}, everyone={1, 2, 3}) == 2  # clean candidate preferred
    assert policy({3: up()}, {1, 2}) is None
    assert policy({3: up()}, {1, 2}, everyone={1, 2, 3}) == 3


# --- the ELECT_MASTER request ----------------------------------------------------------------


def group(n: int = 3, config: ControllerConfig | None = None) -> LocalController:
    ctl = LocalController(config)
    for i in range(1, n + 1):
        ctl.join(C, A, f"10.0.0.{i}:10911")
    return ctl


def expand(ctl: LocalController, members: set[int]) -> None:
    bs = ctl.state.broker_sets[A]
    req = AlterSyncStateSetRequest(
        A, bs.master_broker_id or 0, bs.master_epoch, frozenset(members), bs.sync_state_set_epoch
    )
    assert ctl.request(req).ok


def test_first_election_the_requesting_broker_wins() -> None:
    ctl = group()
    ctl.set_live(C, A, 3, max_offset=10**9)  # better data does not matter the first time
    result = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 2), ctl.live)
    assert result.events == (ElectMasterEvent(A, 2, 1, 1),)
    resp = result.response
    assert resp.ok and (resp.master_broker_id, resp.master_address) == (2, "10.0.0.2:10911")
    assert (resp.master_epoch, resp.sync_state_set_epoch, resp.sync_state_set) == (1, 1, {2})
    assert resp.broker_addrs == {i: f"10.0.0.{i}:10911" for i in (1, 2, 3)}
    assert ctl.state.apply(result.events[0])
    bs = ctl.state.broker_sets[A]
    assert (bs.master_broker_id, bs.master_epoch, bs.sync_state_set) == (2, 1, {2})


def test_first_election_by_an_unregistered_id_fails() -> None:
    # Deviation: RocketMQ would make the unknown id 9 master (with no address).
    ctl = group()
    before = ctl.state.snapshot()
    result = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 9), ctl.live)
    assert result.response.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert result.events == () and ctl.state.snapshot() == before


def test_unknown_set_needs_registration() -> None:
    ctl = LocalController()
    result = handle(ctl.state, ElectMasterRequest.of_controller_trigger(A), ctl.live)
    assert result.response.code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert result.events == ()


def test_controller_trigger_before_any_master_changes_nothing() -> None:
    ctl = group()
    before = ctl.state.snapshot()
    result = handle(ctl.state, ElectMasterRequest.of_controller_trigger(A), ctl.live)
    assert result.response.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert result.events == () and ctl.state.snapshot() == before


def test_live_master_still_exists() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    before = ctl.state.snapshot()
    for req in (
        ElectMasterRequest.of_broker_trigger(C, A, 2),
        ElectMasterRequest.of_controller_trigger(A),
        ElectMasterRequest.of_admin_trigger(C, A, 1),
    ):
        result = handle(ctl.state, req, ctl.live)
        assert result.response.code == Code.CONTROLLER_MASTER_STILL_EXIST
        assert result.response.master_broker_id == 1 and result.response.master_epoch == 1
        assert result.events == () and ctl.state.snapshot() == before


def test_a_master_that_asks_again_is_elected_in_a_new_epoch() -> None:
    """A restarted master named master of the epoch it led before asks for a new epoch
    (issue 14, found by the group simulator): its own broker trigger re-elects it, with a
    SyncStateSet of itself; an admin's or another broker's request still keeps it."""
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    expand(ctl, {1, 2, 3})
    result = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 1), ctl.live)
    assert result.response.code == Code.SUCCESS
    assert result.response.master_broker_id == 1 and result.response.master_epoch == 2
    for ev in result.events:
        ctl.state.apply(ev)
    bs = ctl.state.broker_sets[A]
    assert (bs.master_broker_id, bs.master_epoch, bs.sync_state_set) == (1, 2, {1})


def test_failover_picks_the_best_in_sync_replica() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    expand(ctl, {1, 2, 3})
    ctl.kill(C, A, 1)
    ctl.set_live(C, A, 2, epoch=1, max_offset=100)
    ctl.set_live(C, A, 3, epoch=1, max_offset=300)
    resp = ctl.request(ElectMasterRequest.of_controller_trigger(A))
    assert resp.ok and resp.master_broker_id == 3
    bs = ctl.state.broker_sets[A]
    assert (bs.master_broker_id, bs.master_epoch) == (3, 2)
    assert (bs.sync_state_set, bs.sync_state_set_epoch) == ({3}, 3)


def test_no_candidate_controller_trigger_records_no_master() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    expand(ctl, {1, 2})
    ctl.kill(C, A, 1)
    ctl.kill(C, A, 2)  # 3 is alive but was never in sync
    result = handle(ctl.state, ElectMasterRequest.of_controller_trigger(A), ctl.live)
    assert result.response.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert result.events == (ElectMasterEvent(A, None, 2, 2),)
    assert ctl.state.apply(result.events[0])
    bs = ctl.state.broker_sets[A]
    # masterEpoch+1, master cleared, SyncStateSet kept (RocketMQ handleElectMaster).
    assert (bs.master_broker_id, bs.master_epoch) == (None, 2)
    assert (bs.sync_state_set, bs.sync_state_set_epoch) == ({1, 2}, 2)
    # A second trigger has nothing to record: no event, no epoch churn (our deviation).
    again = handle(ctl.state, ElectMasterRequest.of_controller_trigger(A), ctl.live)
    assert again.response.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE and again.events == ()
    # When an in-sync replica comes back, it is elected.
    ctl.set_live(C, A, 2)
    resp = ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 2))
    assert resp.ok and resp.master_broker_id == 2 and resp.master_epoch == 3


def test_no_candidate_broker_trigger_fails_without_event() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    ctl.kill(C, A, 1)
    before = ctl.state.snapshot()
    result = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 3), ctl.live)
    assert result.response.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    assert result.events == () and ctl.state.snapshot() == before


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election_switch(unclean: bool) -> None:
    ctl = group(config=ControllerConfig(enable_elect_unclean_master=unclean))
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    ctl.kill(C, A, 1)
    resp = ctl.request(ElectMasterRequest.of_controller_trigger(A))
    if unclean:
        assert resp.ok and resp.master_broker_id == 2  # out of sync: may lose messages
    else:
        assert resp.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
        assert ctl.state.broker_sets[A].master_broker_id is None


def test_admin_designated_election() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    expand(ctl, {1, 2})
    before = ctl.state.snapshot()
    refused = handle(ctl.state, ElectMasterRequest.of_admin_trigger(C, A, 3), ctl.live)
    assert refused.response.code == Code.CONTROLLER_ELECT_MASTER_FAILED  # 3 not in sync
    assert refused.events == () and ctl.state.snapshot() == before
    resp = ctl.request(ElectMasterRequest.of_admin_trigger(C, A, 2))
    assert resp.ok and resp.master_broker_id == 2 and resp.master_epoch == 2
    ctl.kill(C, A, 1)
    dead = handle(ctl.state, ElectMasterRequest.of_admin_trigger(C, A, 1), ctl.live)
    assert dead.response.code == Code.CONTROLLER_ELECT_MASTER_FAILED


def test_rocketmq_10578_through_the_request() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    expand(ctl, {1, 2, 3})
    ctl.kill(C, A, 1)
    ctl.set_live(C, A, 2, epoch=1, max_offset=0)
    ctl.set_live(C, A, 3, epoch=1, max_offset=2**31 + 1)
    assert ctl.request(ElectMasterRequest.of_controller_trigger(A)).master_broker_id == 3


def test_rocketmq_5663_uncommitted_expansion_does_not_make_a_candidate() -> None:
    # The master asked to add 2, but the event was not committed when the master died.
    ctl = group(2)
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    bs = ctl.state.broker_sets[A]
    pending = handle(
        ctl.state, AlterSyncStateSetRequest(A, 1, 1, frozenset({1, 2}), 1), ctl.live
    ).events
    assert pending
    ctl.kill(C, A, 1)
    ctl.set_live(C, A, 2, epoch=1, max_offset=10**6)
    resp = ctl.request(ElectMasterRequest.of_controller_trigger(A))
    assert resp.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert bs.master_broker_id is None and bs.sync_state_set == {1}
    # Committed late, the expansion is stale: it names an epoch that no longer exists.
    assert not ctl.state.apply(pending[0])
    assert bs.sync_state_set == {1}


def test_rocketmq_8380_dead_slave_never_triggers_a_failover() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    expand(ctl, {1, 2, 3})
    ctl.kill(C, A, 2)
    assert scan_need_reelect(ctl.state, ctl.live) == []
    resp = ctl.request(ElectMasterRequest.of_controller_trigger(A))
    assert resp.code == Code.CONTROLLER_MASTER_STILL_EXIST
    assert ctl.state.broker_sets[A].master_epoch == 1


def test_scan_lists_sets_with_a_dead_master_and_a_live_replica() -> None:
    ctl = group(2)
    assert scan_need_reelect(ctl.state, ctl.live) == []  # no master yet: brokers elect
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    ctl.kill(C, A, 1)
    assert scan_need_reelect(ctl.state, ctl.live) == [A]
    ctl.kill(C, A, 2)
    assert scan_need_reelect(ctl.state, ctl.live) == []


def test_elect_events_from_a_stale_state_are_refused_at_apply() -> None:
    ctl = group()
    first = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 1), ctl.live).events
    second = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 2), ctl.live).events
    assert ctl.state.apply(first[0])
    before = ctl.state.snapshot()
    assert not ctl.state.apply(second[0])  # both named epoch 1; only one master may hold it
    assert ctl.state.snapshot() == before


# --- eligibility: a replica that lost data (issue 13) ----------------------------------------


def torn(epoch: int, offset: int, *, need: int, need_epoch: int) -> BrokerLiveInfo:
    """A live replica whose log ends at `offset` but once held everything below `need`."""
    return BrokerLiveInfo(
        alive=True,
        epoch=epoch,
        max_offset=offset,
        catch_up_offset=need,
        catch_up_epoch=need_epoch,
    )


def election(
    live: dict[int, BrokerLiveInfo],
    sss: set[int],
    replicas: set[int],
    *,
    unclean: bool = False,
    old: int | None = None,
    prefer: int | None = None,
) -> Election:
    return default_elect_policy(
        sync_state_set=sss,
        replicas=replicas,
        unclean=unclean,
        old_master=old,
        prefer_broker_id=prefer,
        live_info=live.get,
    )


def test_issue_13_a_torn_master_is_never_reelected_and_a_covering_replica_recovers() -> None:
    """The crash loop: replica 1 became master at epoch 5 (start 392889, set {1}); its tail
    was torn below that. It is the only member, alive, and must not be elected again, not
    even as the live old master; replica 2 (epoch 3 history past 392889) covers it and is
    chosen by a recovery election; replica 3 does not cover it."""
    live = {
        1: torn(3, 348_953, need=392_889, need_epoch=3),
        2: up(epoch=3, offset=400_000),
        3: up(epoch=3, offset=300_000),
    }
    e = election(live, {1}, {1, 2, 3}, old=1)
    assert (e.master, e.recovery) == (2, True)
    # Without replica 2 nobody covers it: no master, and the answer says why.
    del live[2]
    e = election(live, {1}, {1, 2, 3}, old=1)
    assert e.master is None
    assert "must catch up to offset 392889" in e.why_none
    assert "3 at 300000" in e.why_none


def test_a_covering_replica_needs_the_history_not_only_the_length() -> None:
    """A replica with a longer log of an older epoch (a tail that diverged before epoch 3)
    does not cover a member that held epoch 3's bytes."""
    live = {1: torn(3, 100, need=5_000, need_epoch=3), 2: up(epoch=2, offset=10**6)}
    assert election(live, {1}, {1, 2}).master is None
    live[2] = up(epoch=4, offset=5_000)
    assert election(live, {1}, {1, 2}).master == 2


def test_recovery_waits_for_a_member_that_is_down() -> None:
    """Member 2 is down and may hold acknowledged writes nobody else has: wait for it rather
    than recover from outside the set, as when the whole set is down."""
    live = {1: torn(3, 100, need=500, need_epoch=3), 3: up(epoch=3, offset=900)}
    e = election(live, {1, 2}, {1, 2, 3})
    assert e.master is None and "member 2 is down" in e.why_none
    live[2] = up(epoch=3, offset=700)
    assert election(live, {1, 2}, {1, 2, 3}).master == 2


def test_a_clean_member_beats_recovery_and_a_designation_cannot_bypass_it() -> None:
    live = {1: torn(3, 100, need=500, need_epoch=3), 2: up(epoch=3, offset=600)}
    live[3] = up(epoch=3, offset=900)
    e = election(live, {1, 2}, {1, 2, 3})
    assert (e.master, e.recovery) == (2, False)
    # An admin naming a non-member while a clean member exists gets nobody (as before).
    assert election(live, {1, 2}, {1, 2, 3}, prefer=3).master is None


def test_unclean_election_never_picks_a_replica_that_lost_data() -> None:
    live = {1: torn(3, 100, need=500, need_epoch=3), 2: torn(3, 50, need=900, need_epoch=3)}
    assert election(live, {1}, {1, 2}, unclean=True).master is None


def test_scan_reelects_a_live_master_that_lost_data() -> None:
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    ctl.set_live(C, A, 1, epoch=1, max_offset=10)
    assert scan_need_reelect(ctl.state, ctl.live) == []
    ctl.set_live(C, A, 1, epoch=1, max_offset=10, catch_up_offset=50, catch_up_epoch=1)
    assert scan_need_reelect(ctl.state, ctl.live) == [A]


def test_recovery_election_end_to_end_marks_the_set_and_satisfies_the_invariants() -> None:
    from rmq_ha.controller import InvariantChecker

    checker = InvariantChecker()
    ctl = group()
    assert ctl.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    checker.observe(ctl.state)
    ctl.set_live(C, A, 1, epoch=1, max_offset=10, catch_up_offset=50, catch_up_epoch=1)
    ctl.set_live(C, A, 2, epoch=1, max_offset=60)
    result = handle(ctl.state, ElectMasterRequest.of_controller_trigger(A), ctl.live)
    assert result.events == (ElectMasterEvent(A, 2, 2, 2, recovery=True),)
    assert ctl.state.apply(result.events[0])
    assert ctl.state.broker_sets[A].master_by_recovery
    checker.observe(ctl.state)  # outside the set, but a recovery election: allowed
    # The same change without the recovery mark is what the invariant exists to catch.
    bad = InvariantChecker()
    ctl2 = group()
    assert ctl2.request(ElectMasterRequest.of_broker_trigger(C, A, 1)).ok
    bad.observe(ctl2.state)
    assert ctl2.state.apply(ElectMasterEvent(A, 2, 2, 2))
    with pytest.raises(AssertionError, match="outside the SyncStateSet"):
        bad.observe(ctl2.state)


def test_a_broker_that_lost_data_does_not_win_the_first_election() -> None:
    ctl = group()
    ctl.set_live(C, A, 2, catch_up_offset=10, catch_up_epoch=1)
    result = handle(ctl.state, ElectMasterRequest.of_broker_trigger(C, A, 2), ctl.live)
    assert result.response.code == Code.CONTROLLER_ELECT_MASTER_FAILED


def deaf(epoch: int = 0, offset: int = 0) -> BrokerLiveInfo:
    """A replica whose heartbeats arrive but whose controller's answers do not reach it."""
    return BrokerLiveInfo(alive=True, epoch=epoch, max_offset=offset, hears_controller=False)


def test_a_replica_that_cannot_hear_the_controller_is_no_new_master() -> None:
    """One-way partition (fault probe, session 16): the best-ranked replica cannot hear the
    controller; electing it would leave the group masterless (it never learns, and the new
    SyncStateSet is itself alone). The next best is chosen; none left: nobody, and the
    remark says why. A deaf live old master stays (no needless failover)."""
    live = {1: deaf(epoch=3, offset=900), 2: up(epoch=3, offset=500)}
    assert policy(live, {1, 2}) == 2
    assert policy({1: deaf(epoch=3)}, {1, 2}) is None
    assert policy(live, {1, 2}, old=1) == 1
    assert policy(live, {1, 2}, prefer=1) is None
    assert policy({1: deaf(), 3: up()}, {1}, everyone={1, 3}) == 3
    why = default_elect_policy(
        sync_state_set={1},
        replicas={1},
        unclean=False,
        old_master=None,
        prefer_broker_id=None,
        live_info={1: deaf()}.get,
    ).why_none
    assert "does not hear this controller" in why


def test_a_deaf_member_blocks_a_recovery_election_and_is_no_recovery_candidate() -> None:
    """A clean member that cannot hear is still alive and still holds what it holds: no
    replica outside the set is elected over it; a replica owing a catch-up never was."""
    owes = BrokerLiveInfo(alive=True, epoch=2, max_offset=10, catch_up_offset=50, catch_up_epoch=2)
    assert (
        policy({1: deaf(epoch=2, offset=50), 2: owes, 3: up(2, 60)}, {1, 2}, everyone={1, 2, 3})
        == 3
    )
    got = default_elect_policy(
        sync_state_set={1, 2},
        replicas={1, 2, 3},
        unclean=False,
        old_master=None,
        prefer_broker_id=None,
        live_info={1: deaf(epoch=2, offset=50), 2: owes, 3: up(2, 60)}.get,
    )
    assert got.master is None
    # Every member owes a catch-up: the recovery election skips a deaf coverer.
    owes1 = BrokerLiveInfo(alive=True, epoch=2, max_offset=10, catch_up_offset=50, catch_up_epoch=2)
    live = {1: owes1, 2: owes, 3: deaf(2, 60), 4: up(2, 55)}
    got = default_elect_policy(
        sync_state_set={1, 2},
        replicas={1, 2, 3, 4},
        unclean=False,
        old_master=None,
        prefer_broker_id=None,
        live_info=live.get,
    )
    assert (got.master, got.recovery) == (4, True)
