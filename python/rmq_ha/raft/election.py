"""Counting one vote round and one heartbeat round, DLedger style (seed 003).

A round ends ("the latch opens") as soon as its outcome cannot change for the better, when every
member answered, or at its deadline; then the node parses the counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmq_ha.raft.messages import Code, ElectionOutcome, VoteResult


@dataclass(slots=True)
class VoteTally:
    term: int
    request_id: int
    deadline_ms: int
    #: Members whose answer was counted (duplicated responses are counted once).
    responded: set[str] = field(default_factory=set)
    all_num: int = 0
    valid_num: int = 0
    accepted_num: int = 0
    not_ready_term_num: int = 0
    bigger_ledger_num: int = 0
    already_has_leader: bool = False
    known_max_term_in_group: int = -1
    #: Members that answered REJECT_ALREADY_VOTED: in a round where this node's own vote
    #: counted, other candidates of the same term (a split vote).
    already_voted: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.known_max_term_in_group = self.term

    def count(self, result: VoteResult, response_term: int) -> None:
        self.all_num += 1
        if result is not VoteResult.UNKNOWN:
            self.valid_num += 1
        if result is VoteResult.ACCEPT:
            self.accepted_num += 1
        elif result is VoteResult.REJECT_ALREADY_HAS_LEADER:
            self.already_has_leader = True
        elif result in (
            VoteResult.REJECT_EXPIRED_VOTE_TERM,
            VoteResult.REJECT_TERM_SMALL_THAN_LEDGER,
        ):
            self.known_max_term_in_group = max(self.known_max_term_in_group, response_term)
        elif result in (
            VoteResult.REJECT_EXPIRED_LEDGER_TERM,
            VoteResult.REJECT_SMALL_LEDGER_END_INDEX,
        ):
            self.bigger_ledger_num += 1
        elif result is VoteResult.REJECT_TERM_NOT_READY:
            self.not_ready_term_num += 1
        # REJECT_ALREADY_VOTED, REJECT_TAKING_LEADERSHIP and the member checks: valid, no more.

    def latch_open(self, quorum: int, member_count: int) -> bool:
        return (
            self.already_has_leader
            or self.accepted_num >= quorum
            or self.accepted_num + self.not_ready_term_num >= quorum
            or self.all_num >= member_count
        )


def parse_vote_tally(tally: VoteTally, quorum: int) -> ElectionOutcome:
    """DLedger's seven-way parse of a finished vote round, in DLedger's order."""
    if tally.known_max_term_in_group > tally.term:
        return ElectionOutcome.BIGGER_TERM_IN_GROUP
    if tally.already_has_leader:
        return ElectionOutcome.ALREADY_HAS_LEADER
    if tally.valid_num < quorum:
        return ElectionOutcome.NO_QUORUM_OF_VALID_VOTES
    if tally.valid_num - tally.bigger_ledger_num < quorum:
        return ElectionOutcome.BIGGER_LEDGER_IN_GROUP
    if tally.accepted_num >= quorum:
        return ElectionOutcome.PASSED
    if tally.accepted_num + tally.not_ready_term_num >= quorum:
        return ElectionOutcome.REVOTE_IMMEDIATELY
    return ElectionOutcome.NOT_ENOUGH_ACCEPTS


@dataclass(slots=True)
class HeartBeatTally:
    """One leader heartbeat round; the leader counts itself as answered and successful."""

    term: int
    request_id: int
    deadline_ms: int
    responded: set[str] = field(default_factory=set)
    all_num: int = 1
    succ_num: int = 1
    not_ready_num: int = 0
    max_term: int = -1
    inconsistent_leader: bool = False

    def count(self, code: Code, response_term: int) -> None:
        self.all_num += 1
        if code is Code.SUCCESS:
            self.succ_num += 1
        elif code is Code.EXPIRED_TERM:
            self.max_term = max(self.max_term, response_term)
        elif code is Code.INCONSISTENT_LEADER:
            self.inconsistent_leader = True
        elif code is Code.TERM_NOT_READY:
            self.not_ready_num += 1

    def latch_open(self, quorum: int, member_count: int) -> bool:
        return (
            self.succ_num >= quorum
            or self.succ_num + self.not_ready_num >= quorum
            or self.all_num >= member_count
        )
