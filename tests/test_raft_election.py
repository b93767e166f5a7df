"""Pure tests of the election rules changed for issue 14 (the controller's failover tail): the
vote-response wait follows the heartbeat interval, ALREADY_HAS_LEADER backs off a vote interval,
a voter takes a bigger term and votes in it at once, candidates denied by competitors wait a
tie-break per competitor with a smaller id, and a node that caught up with a bigger term holds
back its own round. Times are the core's virtual milliseconds; nothing here reads a clock."""

from __future__ import annotations

import random

import pytest

from rmq_ha.raft import (
    ElectionOutcome,
    Entry,
    HardState,
    PersistedState,
    RaftConfig,
    RaftNode,
    Role,
    SaveHardState,
)
from rmq_ha.raft.messages import (
    EntryKind,
    HeartBeatRequest,
    Message,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmq_ha.sim.statemachine import ListStateMachine

pytestmark = pytest.mark.timeout(60)

BENCH = RaftConfig(
    heart_beat_time_interval_ms=200,
    max_heart_beat_leak=3,
    min_vote_interval_ms=30,
    max_vote_interval_ms=100,
)
MEMBERS = ("n0", "n1", "n2")


def node(
    name: str,
    config: RaftConfig = BENCH,
    persisted: PersistedState | None = None,
    seed: int = 1,
) -> RaftNode:
    return RaftNode(name, MEMBERS, ListStateMachine(), random.Random(seed), config, persisted)


def votes(msgs: tuple[Message, ...]) -> list[VoteRequest]:
    return [m for m in msgs if isinstance(m, VoteRequest)]


def test_the_vote_response_wait_is_one_heartbeat_interval_by_default() -> None:
    assert BENCH.vote_wait_ms == 200
    assert RaftConfig().vote_wait_ms == 2000  # DLedger's 2000 ms at its 2000 ms heartbeat
    assert RaftConfig(vote_response_wait_ms=300).vote_wait_ms == 300
    with pytest.raises(ValueError):
        RaftConfig(vote_response_wait_ms=-1)
    for seed in range(50):
        n = node("n0", seed=seed)
        ready = n.tick(1000)
        assert len(votes(ready.send)) == 2
        # Nobody answers: the round ends at its deadline, wait + random [0, maxVoteInterval).
        deadline = n.next_tick_ms()
        assert 1000 + 200 <= deadline < 1000 + 200 + 100
        n.tick(deadline - 1)
        assert n.status().last_election_outcome is None
        n.tick(deadline)
        assert n.status().last_election_outcome is ElectionOutcome.NO_QUORUM_OF_VALID_VOTES


def test_a_refused_round_ends_without_waiting() -> None:
    n = node("n0", config=RaftConfig(vote_response_wait_ms=3_600_000))
    reqs = votes(n.tick(0).send)
    for r in reqs:  # both peers unreachable: the driver feeds failure answers
        n.receive(VoteResponse(r.dst, "n0", -1, VoteResult.UNKNOWN, r.request_id), 5)
    assert n.status().last_election_outcome is ElectionOutcome.NO_QUORUM_OF_VALID_VOTES


def test_already_has_leader_backs_off_a_vote_interval_not_leak_intervals() -> None:
    for seed in range(50):
        voter = node("n1", persisted=PersistedState(HardState(0, "n2")), seed=seed)
        voter.receive(HeartBeatRequest("n2", "n1", 0, 1), 0)  # voted for n2 and follows it
        assert voter.role is Role.FOLLOWER
        cand = node("n0", persisted=PersistedState(HardState(0, "n2")), seed=seed)
        (to_n1,) = [r for r in votes(cand.tick(500).send) if r.dst == "n1"]
        (answer,) = voter.receive(to_n1, 501).send
        assert isinstance(answer, VoteResponse)
        assert answer.result is VoteResult.REJECT_ALREADY_HAS_LEADER
        cand.receive(answer, 502)
        st = cand.status()
        assert st.last_election_outcome is ElectionOutcome.ALREADY_HAS_LEADER
        # A vote interval (DLedger: plus 3 heartbeat intervals, 600 ms).
        assert 502 + 30 <= st.next_time_to_request_vote_ms < 502 + 100
        assert cand.term == 0  # and the next round stays in this term: no leader is disturbed


def test_a_voter_takes_a_bigger_term_and_votes_in_it_at_once() -> None:
    voter = node("n1", persisted=PersistedState(HardState(3, "n2")))
    ready = voter.receive(VoteRequest("n0", "n1", 5, -1, -1, 42), 1000)
    # Term and vote in one durable write, before the answer leaves.
    assert ready.persist == (SaveHardState(HardState(5, "n0")),)
    assert ready.send == (VoteResponse("n1", "n0", 5, VoteResult.ACCEPT, 42),)
    st = voter.status()
    assert (st.role, st.term, st.voted_for) == (Role.CANDIDATE, 5, "n0")
    assert not st.need_increase_term_immediately
    # Its own round waits until the candidate's could have ended (vote wait + interval).
    assert st.next_time_to_request_vote_ms >= 1000 + 200 + 30
    assert voter.next_tick_ms() >= 1000 + 200 + 30
    assert not votes(voter.tick(1000 + 200 + 29).send)
    # The same candidate asking again (a duplicate) gets the same vote; another does not.
    again = voter.receive(VoteRequest("n0", "n1", 5, -1, -1, 43), 1001).send
    assert [m.result for m in again if isinstance(m, VoteResponse)] == [VoteResult.ACCEPT]
    other = voter.receive(VoteRequest("n2", "n1", 5, -1, -1, 44), 1002).send
    assert [m.result for m in other if isinstance(m, VoteResponse)] == [
        VoteResult.REJECT_ALREADY_VOTED
    ]


def test_a_bigger_term_from_a_stale_ledger_changes_nothing() -> None:
    log = (Entry(0, 2, b"", EntryKind.NOOP),)
    voter = node("n1", persisted=PersistedState(HardState(3, None), None, log))
    ready = voter.receive(VoteRequest("n0", "n1", 9, -1, -1, 1), 0)
    assert ready.send == (VoteResponse("n1", "n0", 3, VoteResult.REJECT_EXPIRED_LEDGER_TERM, 1),)
    assert not ready.persist and voter.term == 3


def test_a_leader_asked_for_a_vote_in_a_bigger_term_steps_down_and_votes() -> None:
    nodes = {m: node(m) for m in MEMBERS}
    pending = list(nodes["n0"].tick(0).send)
    while pending:
        msg = pending.pop(0)
        pending += nodes[msg.dst].receive(msg, 1).send
    leader = nodes["n0"]
    assert leader.role is Role.LEADER and leader.serving
    end = leader.log.last_index, leader.log.last_term
    ready = leader.receive(VoteRequest("n1", "n0", leader.term + 1, end[0], end[1], 7), 10)
    assert leader.role is Role.CANDIDATE and leader.voted_for == "n1"
    assert VoteResponse("n0", "n1", leader.term, VoteResult.ACCEPT, 7) in ready.send


def test_after_a_bigger_heartbeat_term_the_own_round_waits_a_vote_wait_too() -> None:
    n = node("n1")
    ready = n.receive(HeartBeatRequest("n0", "n1", 4, 1), 1000)
    assert n.status().need_increase_term_immediately  # TERM_NOT_READY for heartbeats stays
    n.tick(1000)
    st = n.status()
    assert st.term == 4 and not st.need_increase_term_immediately
    assert 1000 + 200 + 30 <= st.next_time_to_request_vote_ms < 1000 + 200 + 100
    assert ready.send  # the not-ready answer went back


def _split(seed: int) -> dict[str, RaftNode]:
    """n0 is dead; n1 and n2 were followers of it in term 0 (voted for it) and time out
    together: each one's round in term 0 is denied by the other (REJECT_ALREADY_VOTED)."""
    ps = PersistedState(HardState(0, "n0"))
    nodes = {m: node(m, persisted=ps, seed=seed) for m in ("n1", "n2")}
    sends = [m for n in nodes.values() for m in votes(n.tick(1000).send)]
    for m in sends:
        if m.dst == "n0":
            reply: Message | None = VoteResponse("n0", m.src, -1, VoteResult.UNKNOWN, m.request_id)
        else:
            (reply,) = nodes[m.dst].receive(m, 1001).send
        assert reply is not None
        nodes[reply.dst].receive(reply, 1002)
    return nodes


def test_after_a_split_the_smallest_id_goes_first_and_the_others_wait() -> None:
    for seed in range(50):
        nodes = _split(seed)
        n1, n2 = nodes["n1"].status(), nodes["n2"].status()
        assert n1.last_election_outcome is ElectionOutcome.NOT_ENOUGH_ACCEPTS
        assert n2.last_election_outcome is ElectionOutcome.NOT_ENOUGH_ACCEPTS
        # n1 has no competitor with a smaller id: it goes first, after minVoteIntervalMs.
        assert n1.next_time_to_request_vote_ms == 1002 + 30
        # n2 has one (n1): a random vote interval plus two maxVoteIntervalMs (2 x 100 ms).
        assert 1002 + 30 + 200 <= n2.next_time_to_request_vote_ms < 1002 + 100 + 200
        assert n2.next_time_to_request_vote_ms - n1.next_time_to_request_vote_ms > 100


def test_after_a_split_the_next_round_is_no_race() -> None:
    for seed in range(50):
        nodes = _split(seed)
        n1, n2 = nodes["n1"], nodes["n2"]
        t = n1.next_tick_ms()
        (to_n2,) = [r for r in votes(n1.tick(t).send) if r.dst == "n2"]
        assert to_n2.term == 1
        # n2 is still in term 0, waiting: it takes term 1 and votes for n1.
        assert n2.next_tick_ms() > t
        (answer,) = n2.receive(to_n2, t + 1).send
        assert isinstance(answer, VoteResponse) and answer.result is VoteResult.ACCEPT
        n1.receive(answer, t + 2)
        assert n1.role is Role.LEADER and n1.term == 1


def test_a_denied_round_without_competitors_waits_a_random_interval() -> None:
    # Its own vote was for the dead leader and the others did not answer: no tie-break.
    n = node("n2", persisted=PersistedState(HardState(0, "n0")))
    for r in votes(n.tick(1000).send):
        n.receive(VoteResponse(r.dst, "n2", -1, VoteResult.UNKNOWN, r.request_id), 1001)
    st = n.status()
    assert st.last_election_outcome is ElectionOutcome.NO_QUORUM_OF_VALID_VOTES
    assert 1001 + 30 <= st.next_time_to_request_vote_ms < 1001 + 100
