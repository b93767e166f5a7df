"""Unit tests of the pure Raft core beyond the election scripts: the driver contract (persist
before send), single-node commits, proposals, log restore and config bounds."""

from __future__ import annotations

import random

import pytest

from rmq_ha.raft import (
    AppendLog,
    Code,
    Entry,
    HardState,
    PersistedState,
    ProposalStatus,
    RaftConfig,
    RaftNode,
    Role,
    SaveHardState,
    Snapshot,
    failure_response,
)
from rmq_ha.raft.log import RaftLog
from rmq_ha.raft.messages import (
    AppendRequest,
    HeartBeatRequest,
    Message,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmq_ha.sim.statemachine import ListStateMachine


def node(
    name: str = "n0",
    members: tuple[str, ...] = ("n0", "n1", "n2"),
    config: RaftConfig | None = None,
) -> RaftNode:
    return RaftNode(name, members, ListStateMachine(), random.Random(1), config)


def test_a_granted_vote_is_persisted_in_the_batch_that_sends_it() -> None:
    n = node("n1")
    ready = n.receive(VoteRequest("n0", "n1", 0, -1, -1, 9), 0)
    assert ready.persist == (SaveHardState(HardState(0, "n0")),)
    assert ready.send == (VoteResponse("n1", "n0", 0, VoteResult.ACCEPT, 9),)


def test_term_is_persisted_before_the_entries_of_the_same_batch() -> None:
    n = node("n1")
    n.receive(HeartBeatRequest("n0", "n1", 0, 1), 0)  # follows n0 in term 0
    ready = n.receive(AppendRequest("n0", "n1", 0, -1, -1, (Entry(0, 0, b"a"),), -1, 2), 1)
    assert [type(op) for op in ready.persist] == [AppendLog]
    m = node("n2")
    ready = m.tick(0)  # the first vote round: the self vote is persisted before the requests
    assert isinstance(ready.persist[0], SaveHardState) and len(ready.send) == 2


def test_single_node_commits_once_its_own_write_is_durable() -> None:
    n = node("n0", ("n0",))
    ready = n.tick(0)
    assert n.role is Role.LEADER and not n.serving
    assert isinstance(ready.persist[-1], AppendLog)
    assert n.next_tick_ms() <= 0  # the no-op counts once durable, i.e. at the next call
    n.tick(0)
    assert n.serving and n.commit_index == 0
    pid, ready = n.propose(b"x", 1)
    assert ready.proposals[0].status is ProposalStatus.ACCEPTED
    assert not ready.applied
    ready = n.tick(1)
    assert [(a.index, a.result, a.proposal_id) for a in ready.applied] == [(1, 1, pid)]


def test_proposals_are_refused_with_definite_codes() -> None:
    follower = node("n1")
    _, ready = follower.propose(b"x", 0)
    assert ready.proposals[0].status is ProposalStatus.REJECTED
    assert ready.proposals[0].code is Code.NOT_LEADER
    full = node("n0", ("n0",), config=RaftConfig(max_pending_proposals=1))
    full.tick(0)
    _, ready = full.propose(b"x", 0)
    assert ready.proposals[0].code is Code.LEADER_NOT_READY
    full.tick(0)
    full.propose(b"a", 0)
    _, ready = full.propose(b"b", 0)
    assert ready.proposals[0].code is Code.LEADER_PENDING_FULL


def _pump(nodes: dict[str, RaftNode], msgs: list[Message], now: int) -> None:
    while msgs:
        m = msgs.pop(0)
        msgs += nodes[m.dst].receive(m, now).send


def test_a_deposed_leader_reports_pending_proposals_as_unknown() -> None:
    nodes = {name: node(name) for name in ("n0", "n1", "n2")}
    _pump(nodes, list(nodes["n0"].tick(0).send), 0)
    leader = nodes["n0"]
    assert leader.role is Role.LEADER and leader.serving
    pid, _ = leader.propose(b"x", 1)  # its pushes are lost
    ready = leader.receive(HeartBeatRequest("n2", "n0", 5, 1), 2)
    assert leader.status().role is Role.CANDIDATE
    assert [(p.proposal_id, p.status) for p in ready.proposals] == [
        (pid, ProposalStatus.OUTCOME_UNKNOWN)
    ]


def test_restart_restores_the_state_machine_from_the_snapshot() -> None:
    sm = ListStateMachine()
    sm.apply(0, b"a")
    sm.apply(1, b"b")
    snap = Snapshot(1, 1, sm.snapshot())
    restored = ListStateMachine()
    n = RaftNode(
        "n0",
        ("n0", "n1", "n2"),
        restored,
        random.Random(1),
        persisted=PersistedState(HardState(2, "n1"), snap, (Entry(2, 2, b"c"),)),
    )
    assert restored.items == [(0, b"a"), (1, b"b")]
    assert (n.term, n.voted_for, n.commit_index, n.log.last_index) == (2, "n1", 1, 2)


@pytest.mark.parametrize(
    ("snapshot", "stored", "kept"),
    [
        (None, [0, 1, 2], [0, 1, 2]),
        (None, [1, 2], []),  # does not start at 0
        ((1, 1), [2, 3], [2, 3]),  # chains onto the snapshot
        ((1, 1), [0, 1, 2], [0, 1, 2]),  # trailing entries behind the snapshot
        ((3, 1), [0, 1], []),  # ends before the snapshot
        ((1, 5), [2, 3], []),  # terms below the snapshot's
        ((1, 1), [2, 4, 3], [2]),  # gap in the stored log: cut at the gap
    ],
)
def test_log_restore_keeps_only_what_chains(
    snapshot: tuple[int, int] | None, stored: list[int], kept: list[int]
) -> None:
    snap = Snapshot(snapshot[0], snapshot[1], b"") if snapshot else None
    terms = {0: 1, 1: 1, 2: 2, 3: 2, 4: 3}
    if snapshot == (1, 5):
        terms = {2: 2, 3: 2}
    entries = [Entry(i, terms[i]) for i in stored]
    log = RaftLog.restore(snap, entries)
    assert [e.index for e in log.all_entries()] == kept


def test_failure_responses() -> None:
    vote = failure_response(VoteRequest("a", "b", 1, 0, 0, 7))
    assert isinstance(vote, VoteResponse) and vote.result is VoteResult.UNKNOWN
    assert vote.src == "b" and vote.dst == "a" and vote.request_id == 7
    assert failure_response(vote) is None


def test_config_defaults_are_dledgers_and_bounds_are_checked() -> None:
    c = RaftConfig()
    assert (
        c.heart_beat_time_interval_ms,
        c.max_heart_beat_leak,
        c.min_vote_interval_ms,
        c.max_vote_interval_ms,
    ) == (2000, 3, 300, 1000)
    assert c.follower_timeout_ms == 6000
    with pytest.raises(ValueError):
        RaftConfig(min_vote_interval_ms=2000)
    with pytest.raises(ValueError):
        RaftConfig(heart_beat_time_interval_ms=0)
