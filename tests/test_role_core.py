"""The broker's role core, pure (broker/core/role.py): every role decision as (event, time) ->
actions, without sockets or clocks. Each test names the rule it checks (reference 2.10-2.12
for controller mode, 4.x for RIP-32, issue 13 for catch-up)."""

from __future__ import annotations

import logging

import pytest

from rmq_ha.broker.core import Role, RoleConfig, RoleCore
from rmq_ha.broker.core import actions as a
from rmq_ha.broker.core import events as e
from rmq_ha.broker.ha.catchup import UNKNOWN_OFFSET, CatchUp
from rmq_ha.broker.ha.core import REFUSED_EXPANSION_BACKOFF_MS

ADDR = "10.0.0.1:10911"


def kinds(actions: list[a.Action]) -> list[str]:
    return [type(x).__name__ for x in actions if not isinstance(x, a.Log)]


def controller(**kw: object) -> RoleCore:
    core = RoleCore(RoleConfig(controller_mode=True, **kw))  # type: ignore[arg-type]
    core.step(e.Started(ADDR, 1000, 0, 1, 0), 0)
    core.step(e.IdAssigned(2), 0)
    return core


def info(
    master: int | None, epoch: int | None, members: set[int], ss: int = 1, **kw: str
) -> e.MasterInfo:
    addr = None if master is None else f"10.0.0.{master}:10911"
    return e.MasterInfo(master, addr, epoch, ss, frozenset(members), kw.get("source", "notice"))


# --- controller mode -------------------------------------------------------------------------


def test_a_controller_mode_broker_starts_fenced_and_refuses_writes() -> None:
    core = controller()
    assert core.state.role is Role.NONE and core.state.fence is not None
    assert not core.registers
    refusal = core.write_refusal()
    assert refusal is not None and refusal[0] == "fenced"


def test_becoming_master_appends_the_epoch_at_the_log_end_then_starts_and_registers() -> None:
    """changeToMaster: epoch at max offset, topics adopted (#9804), stateVersion = epoch
    (#6316), special services, registration; writes allowed."""
    core = controller()
    out = core.step(info(2, 3, {2}, ss=4), 10)
    assert kinds(out) == [
        "AppendEpoch",
        "SetConfirm",
        "WakePulls",
        "AdoptTopicsFromLog",
        "BumpDataVersion",
        "StartSpecial",
        "Register",
        "RefreshReplicaAddrs",
    ]
    assert a.AppendEpoch(3, 1000) in out and a.BumpDataVersion(3) in out
    assert core.serving_master and core.write_refusal() is None and core.registers
    assert core.runtime_broker_id == 0
    # The same notice again, or an older one, changes nothing.
    assert kinds(core.step(info(2, 3, {2}, ss=4), 11)) == []
    assert kinds(core.step(info(2, 2, {2}, ss=2), 12)) == []


def test_a_newer_sync_state_set_of_the_same_epoch_is_applied() -> None:
    core = controller()
    core.step(info(2, 3, {2}, ss=4), 10)
    out = core.step(info(2, 3, {2, 5}, ss=5), 11)
    assert a.WakeProducers() in out
    assert core.ha.sync_state_set == {2, 5} and core.ha.sync_state_set_epoch == 5


def test_becoming_slave_drops_slaves_stops_services_and_finds_the_master() -> None:
    core = controller()
    core.step(info(2, 3, {2}, ss=4), 10)
    out = core.step(info(7, 4, {7}, ss=5), 20)
    assert kinds(out) == ["DropSlaves", "BumpDataVersion", "StopSpecial", "FindMasterHa"]
    assert a.FindMasterHa("10.0.0.7:10911", 4) in out
    assert core.state.role is Role.SLAVE and core.runtime_broker_id == 2
    assert core.write_refusal() == (
        "slave",
        "the broker is a slave, so putMessage is forbidden (send to the master)",
    )
    # The HA address found for this epoch is followed; one for another epoch is not.
    assert core.step(e.MasterHaFound(3, "h:1"), 21) == []
    assert core.step(e.MasterHaFound(4, "h:2"), 21) == [a.Follow("h:2")]
    # A stale notice of an older epoch does not turn it back into a master (the old
    # change_to_master compared it with the epoch file's last entry only, which a slave that
    # received nothing yet leaves at the epoch it led: it became master again).
    assert kinds(core.step(info(2, 3, {2}), 22)) == []
    assert core.state.role is Role.SLAVE


def test_masterless_asks_for_an_election_once_a_second() -> None:
    core = controller(elect_retry_ms=1000)
    core.step(info(None, None, set()), 0)
    assert core.state.masterless
    assert core.step(e.Tick(), 100) == [a.RequestElection()]
    assert core.step(e.Tick(), 600) == []
    assert core.step(e.Tick(), 1100) == [a.RequestElection()]
    core.step(info(7, 4, {7}), 1200)
    assert a.RequestElection() not in core.step(e.Tick(), 5000)


def test_a_stale_no_master_answer_does_not_make_a_master_masterless() -> None:
    """A REGISTER answer written before this broker was elected ("no master", epoch 3) can
    be read after the epoch-4 notice made it master: it must not mark the group masterless,
    or the master asks for an election and the controller bumps the epoch for nothing (fault
    probe: a second election made the same master master again, its slaves reconnected)."""
    core = controller(elect_retry_ms=1000)
    core.step(info(2, 4, {2}, ss=5), 10)
    assert core.serving_master
    core.step(info(None, 3, set(), source="register"), 20)
    assert not core.state.masterless
    assert a.RequestElection() not in core.step(e.Tick(), 2000)
    # a masterless answer of the current or a later epoch still counts
    core.step(info(None, 5, set(), source="poll"), 3000)
    assert core.state.masterless


def test_issue_13_a_replica_owing_a_catch_up_refuses_to_lead_and_stays_fenced() -> None:
    debt = CatchUp(392_889, 3, "epoch 5 started at 392889")
    core = RoleCore(RoleConfig(controller_mode=True), debt)
    core.step(e.Started(ADDR, 348_953, 0, 3, 100_000), 0)
    core.step(e.IdAssigned(2), 0)
    out = core.step(info(2, 6, {2}, ss=7), 10)
    assert kinds(out) == []
    assert any(isinstance(x, a.Log) and x.level == logging.ERROR for x in out)
    assert core.state.role is Role.NONE and "must catch up" in (core.state.fence or "")
    assert core.state.masterless and core.write_refusal() is not None
    # As a slave it copies the data back; reaching the offset clears the debt.
    core.step(info(7, 7, {7}, ss=8), 20)
    out = core.step(e.LogGrew(392_889, 0), 30)
    assert a.ClearCatchUp() in out and core.state.catch_up is None
    # ... and then it may lead.
    out = core.step(info(2, 8, {2}, ss=9), 40)
    assert a.AppendEpoch(8, 392_889) in out and core.serving_master


def test_an_epoch_the_file_refuses_fences_instead_of_crashing() -> None:
    core = controller()
    core.step(info(2, 3, {2}, ss=4), 10)
    out = core.step(e.EpochAppendFailed(3, "disk full", 1, 0), 11)
    assert a.DropSlaves() in out and a.StopSpecial() in out
    assert core.state.role is Role.NONE and core.state.fence and core.state.masterless
    assert core.state.last_epoch == 1


def test_proposals_apply_only_when_accepted_and_stale_ones_are_dropped() -> None:
    """#5663: a proposal is not applied until the controller accepts it (the union rule holds
    meanwhile); a refused one is cancelled (and not proposed again from acks for a moment); an
    unanswered one is dropped after 10 s when the poll shows it did not commit."""
    core = controller(check_sync_state_set_period_ms=1000, max_not_catchup_ms=2000)
    core.step(info(2, 3, {2}, ss=4), 0)
    core.step(e.SlaveConnected(5, False), 0)
    out = core.step(e.SlaveAcked(5, 1000, 1000), 10)
    assert a.ProposeSyncStateSet(frozenset({2, 5}), 3, 4) in out
    assert core.ha.effective_set() == {2, 5} and core.ha.sync_state_set == {2}
    core.step(e.ProposalAnswered(False), 20)
    assert core.ha.proposed is None
    out = core.step(e.SlaveAcked(5, 1000, 1000), 30)  # refused a moment ago: not yet again
    assert not any(isinstance(x, a.ProposeSyncStateSet) for x in out)
    out = core.step(e.SlaveAcked(5, 1000, 1000), 20 + REFUSED_EXPANSION_BACKOFF_MS)
    assert a.ProposeSyncStateSet(frozenset({2, 5}), 3, 4) in out  # proposes again
    core.step(e.ProposalAnswered(accepted=False, unknown=True), 40 + REFUSED_EXPANSION_BACKOFF_MS)
    assert core.ha.proposed == {2, 5}
    wait = REFUSED_EXPANSION_BACKOFF_MS  # the proposal was made that much later
    core.step(info(2, 3, {2}, ss=4, source="poll"), 5_000 + wait)
    assert core.ha.proposed == {2, 5}  # not stale yet
    core.step(info(2, 3, {2}, ss=4, source="poll"), 10_100 + wait)
    assert core.ha.proposed is None
    core.step(e.SlaveAcked(5, 1000, 1000), 10_200 + wait)
    core.step(
        e.ProposalAnswered(True, members=frozenset({2, 5}), sync_state_set_epoch=5), 10_300 + wait
    )
    assert core.ha.sync_state_set == {2, 5} and core.ha.sync_state_set_epoch == 5


def test_shrink_is_checked_each_period_on_a_tick() -> None:
    core = controller(check_sync_state_set_period_ms=1000, max_not_catchup_ms=2000)
    core.step(info(2, 3, {2, 5}, ss=4), 0)
    core.step(e.SlaveConnected(5, False), 0)
    core.step(e.SlaveDisconnected(5), 100)
    out = core.step(e.Tick(), 1500)
    assert a.ProposeSyncStateSet(frozenset({2}), 3, 4) in out


# --- classic mode ----------------------------------------------------------------------------


def classic(broker_id: int, **kw: object) -> RoleCore:
    return RoleCore(
        RoleConfig(controller_mode=False, broker_id=broker_id, classic_slave=broker_id != 0, **kw)  # type: ignore[arg-type]
    )


def test_a_classic_master_starts_epoch_1_and_its_services() -> None:
    core = classic(0)
    out = core.step(e.Started(ADDR, 0, 0, None, 0), 0)
    assert kinds(out) == ["AppendEpoch", "StartSpecial"]
    assert a.AppendEpoch(1, 0) in out and core.serving_master


def test_a_classic_master_starts_a_new_epoch_at_every_start() -> None:
    """With epoch 1 for ever, a master that lost unflushed bytes and wrote past its slave's
    end before the slave connected left the slave's copies under its new bytes (same epoch:
    nothing cut) and every transfer failed after (probe). A new epoch at each start makes the
    slave's handshake cut them."""
    core = classic(0)
    out = core.step(e.Started(ADDR, 5_000, 0, 3, 1_200), 0)
    assert a.AppendEpoch(4, 5_000) in out and core.state.epoch == 4 and core.serving_master
    # on a full disk the file refuses it: the master goes on in the epoch it has (it did
    # before; fencing it instead stopped a broker restarted on a full disk from serving)
    out = core.step(e.EpochAppendFailed(4, "No space left on device", 3, 1_200), 1)
    assert core.serving_master and core.state.epoch == 3 and kinds(out) == []
    assert [x.level for x in out if isinstance(x, a.Log)] == [logging.WARNING]


@pytest.mark.parametrize("acting", [False, True])
def test_a_classic_master_that_lost_durable_data_does_not_take_the_role(acting: bool) -> None:
    """A classic SYNC_MASTER whose recovery found fsynced bytes missing (or its checkpoint gone)
    owes a catch-up it cannot pay: classic mode has no election. It went online all the same,
    and its slaves cut the bytes it lost to follow it (SEND_OK writes lost), or kept them under
    its new writes (probe: 23 acknowledged values lost in an acting-master campaign). It stays
    down now: no epoch, no special services, no registration, no slave served."""
    kw: dict[str, object] = {"acting_master": True, "pre_online": True} if acting else {}
    for debt in (
        CatchUp(309_945, 1, "the checkpoint says 309945 was durable"),
        CatchUp(UNKNOWN_OFFSET, 2**31 - 1, "unreadable checkpoint"),
    ):
        core = RoleCore(
            RoleConfig(controller_mode=False, broker_id=0, **kw),  # type: ignore[arg-type]
            debt,
        )
        out = core.step(e.Started(ADDR, 309_708, 0, 1, 0), 0)
        assert kinds(out) == [], out
        (log_line,) = [x for x in out if isinstance(x, a.Log)]
        assert log_line.level == logging.ERROR and "delete haCatchUp" in log_line.text
        assert not core.is_master and not core.serving_master and not core.registers
        assert core.write_refusal() is not None
        assert kinds(core.step(e.Tick(), 60_000)) == []
    # An ASYNC_MASTER acknowledges without a slave (it may have none): it goes on as master
    # with what it has, in a new epoch (a slave's bytes past it are cut at the handshake).
    core = RoleCore(
        RoleConfig(controller_mode=False, broker_id=0, sync_master=False, **kw),  # type: ignore[arg-type]
        CatchUp(309_945, 1, "the checkpoint says 309945 was durable"),
    )
    out = core.step(e.Started(ADDR, 309_708, 0, 1, 0), 0)
    assert a.AppendEpoch(2, 309_708) in out and core.is_master


def test_a_classic_slave_follows_its_master_from_config_or_name_servers() -> None:
    core = classic(1, ha_master_address="m:1")
    assert core.step(e.Started(ADDR, 0, 0, None, 0), 0) == [a.Follow("m:1")]
    out = core.step(e.NamesrvAnswered("10.0.0.9:10911", "m:2"), 1)
    assert out == [a.Follow("m:2")] and core.state.master_addr == "10.0.0.9:10911"
    assert core.write_refusal() is not None and not core.serving_master


def test_rip32_the_smallest_slave_acts_for_a_dead_master_and_stops_when_it_returns() -> None:
    core = classic(1, acting_master=True)
    core.step(e.Started(ADDR, 0, 0, 1, 0), 0)
    core.step(e.NamesrvAnswered("m:0", "m:ha"), 1)
    out = core.step(e.MinBrokerChanged(1, ADDR, offline_addr="m:0"), 10)
    assert kinds(out) == [
        "CloseConnection",
        "Follow",
        "ArmVersionBump",
        "AdoptTopicsFromLog",
        "StartSpecial",
    ]
    assert core.acting and core.state.following is None
    # An acting slave still never takes a write.
    assert core.write_refusal() is not None
    out = core.step(e.MinBrokerChanged(0, "m:0"), 20)
    assert kinds(out) == ["StopSpecial", "AskMasterHa", "WakePulls"]
    assert not core.acting
    assert core.step(e.MasterHaAnswered("m:0", "m:ha2"), 21) == [a.Follow("m:ha2")]


def test_pre_online_master_pulls_back_each_slave_then_goes_online() -> None:
    """RocketMQ's BrokerPreOnlineService for a master: member group, 906 to each slave in id
    order, wait (bounded) for its HA connection, reverse sync, then services + register."""
    core = classic(0, acting_master=True, pre_online=True)
    out = core.step(e.Started(ADDR, 0, 0, 1, 0), 0)
    assert kinds(out) == ["AppendEpoch", "FetchMemberGroup"]  # a new epoch at every start
    assert core.isolated and not core.registers
    out = core.step(e.MemberGroup({0: ADDR, 1: "s:1", 2: "s:2"}), 10)
    assert out == [a.PushHaInfo(1, "s:1")]
    assert core.step(e.HaInfoPushed(1, True), 20) == []
    # Connected: 906 again (it may have restarted and be acting again), then the pull.
    assert core.step(e.SlaveConnected(1, False), 30) == [a.PushHaInfo(1, "s:1")]
    assert core.step(e.HaInfoPushed(1, True), 35) == [a.ReverseSync(1, "s:1")]
    assert core.step(e.ReverseSynced(1, True), 40) == [a.PushHaInfo(2, "s:2")]
    core.step(e.HaInfoPushed(2, True), 50)
    # Slave 2 never connects: after the bounded wait its metadata is taken anyway, after a
    # second 906 (it may have restarted and be acting again: it must stop first).
    assert kinds(core.step(e.Tick(), 5_000)) == []
    assert core.step(e.Tick(), 10_051) == [
        a.Log(
            logging.WARNING,
            "pre-online: slave 2 has no HA connection after 10 s; taking its metadata anyway",
        ),
        a.PushHaInfo(2, "s:2"),
    ]
    assert core.step(e.HaInfoPushed(2, True), 10_060) == [a.ReverseSync(2, "s:2")]
    out = core.step(e.ReverseSynced(2, True), 10_100)
    assert kinds(out) == ["StartSpecial", "Register"]
    assert not core.isolated and core.registers


def test_pre_online_retries_a_failed_round() -> None:
    core = classic(0, acting_master=True, pre_online=True)
    core.step(e.Started(ADDR, 0, 0, 1, 0), 0)
    assert kinds(core.step(e.MemberGroup(None), 10)) == []
    assert kinds(core.step(e.Tick(), 500)) == []
    assert kinds(core.step(e.Tick(), 1_011)) == ["FetchMemberGroup"]


def test_pre_online_slave_follows_the_master_before_going_online() -> None:
    core = classic(1, acting_master=True, pre_online=True)
    core.step(e.Started(ADDR, 0, 0, 1, 0), 0)
    assert core.step(e.MemberGroup({0: "m:0"}), 10) == [a.AskMasterHa("m:0")]
    assert core.step(e.MasterHaAnswered("m:0", "m:ha"), 20) == [a.Follow("m:ha")]
    assert core.isolated
    assert kinds(core.step(e.SlaveFollowing(), 30)) == ["Register"]
    assert not core.isolated and not core.acting


def test_fmq_an_isolated_master_fences_and_unfences() -> None:
    """fenceWhenIsolated: a master that had a slave and hears from no name server and no
    slave for the isolation timeout refuses the data plane and stops its services."""
    core = classic(0, fence_when_isolated=True, isolation_timeout_ms=2000)
    core.step(e.Started(ADDR, 0, 0, 1, 0), 0)
    assert kinds(core.step(e.Tick(), 5000)) == []  # never had a slave
    core.step(e.SlaveConnected(1, False), 5000)
    core.step(e.SlaveAcked(1, 0, 0), 5000)
    core.step(e.NamesrvAnswered(), 5000)
    assert kinds(core.step(e.Tick(), 6000)) == []
    out = core.step(e.Tick(), 7100)
    assert kinds(out) == ["StopSpecial"] and core.data_plane_fenced
    assert core.write_refusal() is not None
    out = core.step(e.NamesrvAnswered(), 7200)
    assert kinds(out) == []  # the tick decides
    assert kinds(core.step(e.Tick(), 7300)) == ["StartSpecial"] and not core.data_plane_fenced


def test_min_in_sync_replicas_refuses_writes() -> None:
    core = controller(min_in_sync_replicas=2)
    core.step(info(2, 3, {2}, ss=4), 0)
    refusal = core.write_refusal()
    assert refusal is not None and refusal[0] == "in-sync"
    core.step(info(2, 3, {2, 5}, ss=5), 1)
    assert core.write_refusal() is None
