"""Log entries, the messages Raft nodes exchange, and DLedger's result codes.

Index and term numbering follow DLedger: the first entry has index 0, and an empty ledger has
ledgerEndIndex -1 and ledgerEndTerm -1. Every message names its sender (`src`) and receiver
(`dst`); the sender of a vote, heartbeat, append or snapshot request is the (would-be) leader,
which DLedger carries as `leaderId`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    CANDIDATE = "CANDIDATE"
    FOLLOWER = "FOLLOWER"
    LEADER = "LEADER"


class VoteResult(enum.Enum):
    """`VoteResponse.RESULT` (DLedger spells one REJECT_ALREADY__HAS_LEADER)."""

    #: No answer (transport failure); not counted as a valid vote.
    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    #: The candidate is not a member of the group.
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    #: A request that claims to come from the receiver itself.
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    #: The candidate's term is behind the voter's; the response carries the voter's term.
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    #: The voter already voted for someone else in this term and knows no leader.
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    #: The voter already voted for someone else in this term and follows a leader.
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    #: The candidate's term is ahead; the voter catches up first and votes next round
    #: (DLedger's rule; this core's voters take the term and vote at once, see core.py, but
    #: still count this answer).
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    #: The vote term is below the voter's ledgerEndTerm; the response carries that term.
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    #: The candidate's ledgerEndTerm is behind the voter's.
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    #: Same ledgerEndTerm, but the candidate's ledgerEndIndex is smaller.
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    #: The voter is itself taking leadership (leadership transfer; not produced by this core).
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class ParseResult(enum.Enum):
    """`VoteResponse.ParseResult`: what the candidate does after a vote round."""

    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    PASSED = "PASSED"
    #: Like WAIT_TO_REVOTE, but the next round first increases the term.
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"


class ElectionOutcome(enum.Enum):
    """The seven branches of DLedger's vote-round parse, checked in this order (seed 003)."""

    #: 1. Someone answered with a bigger term: adopt it, then vote with a bigger term.
    BIGGER_TERM_IN_GROUP = "BIGGER_TERM_IN_GROUP"
    #: 2. Someone already follows a leader: wait a vote interval (DLedger: plus
    #:    maxHeartBeatLeak heartbeat intervals), then vote again in the same term.
    ALREADY_HAS_LEADER = "ALREADY_HAS_LEADER"
    #: 3. Fewer than a quorum answered at all.
    NO_QUORUM_OF_VALID_VOTES = "NO_QUORUM_OF_VALID_VOTES"
    #: 4. Without those whose ledger is bigger, the answers are no quorum: wait longer
    #:    (+ maxVoteIntervalMs) so that a node with a bigger ledger wins.
    BIGGER_LEDGER_IN_GROUP = "BIGGER_LEDGER_IN_GROUP"
    #: 5. A quorum accepted.
    PASSED = "PASSED"
    #: 6. Accepted + not-ready-term reach a quorum: vote again at once with the same term.
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    #: 7. Anything else: vote next time with a bigger term (when, see
    #:    `RaftNode._after_denied_round`).
    NOT_ENOUGH_ACCEPTS = "NOT_ENOUGH_ACCEPTS"

    @property
    def parse_result(self) -> ParseResult:
        return _PARSE_RESULT[self]


_PARSE_RESULT = {
    ElectionOutcome.BIGGER_TERM_IN_GROUP: ParseResult.WAIT_TO_VOTE_NEXT,
    ElectionOutcome.ALREADY_HAS_LEADER: ParseResult.WAIT_TO_REVOTE,
    ElectionOutcome.NO_QUORUM_OF_VALID_VOTES: ParseResult.WAIT_TO_REVOTE,
    ElectionOutcome.BIGGER_LEDGER_IN_GROUP: ParseResult.WAIT_TO_REVOTE,
    ElectionOutcome.PASSED: ParseResult.PASSED,
    ElectionOutcome.REVOTE_IMMEDIATELY: ParseResult.REVOTE_IMMEDIATELY,
    ElectionOutcome.NOT_ENOUGH_ACCEPTS: ParseResult.WAIT_TO_VOTE_NEXT,
}


class Code(enum.IntEnum):
    """The subset of `DLedgerResponseCode` this core uses, with DLedger's numbers."""

    SUCCESS = 200
    #: Transport failure, synthesised by the driver (see `failure_response`).
    NETWORK_ERROR = 302
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    #: The follower's log does not contain the append's previous entry.
    INCONSISTENT_STATE = 406
    INCONSISTENT_LEADER = 409
    TERM_NOT_READY = 416
    LEADER_PENDING_FULL = 503
    LEADER_NOT_READY = 505


class EntryKind(enum.IntEnum):
    #: The empty entry a new leader appends and commits before serving.
    NOOP = 0
    #: Opaque bytes for the state machine.
    DATA = 1


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    data: bytes = b""
    kind: EntryKind = EntryKind.DATA


@dataclass(frozen=True, slots=True)
class Snapshot:
    """State machine bytes covering every entry up to and including `last_index`."""

    last_index: int
    last_term: int
    data: bytes


@dataclass(frozen=True, slots=True)
class VoteRequest:
    src: str
    dst: str
    term: int
    ledger_end_index: int
    ledger_end_term: int
    request_id: int


@dataclass(frozen=True, slots=True)
class VoteResponse:
    src: str
    dst: str
    term: int
    result: VoteResult
    request_id: int


@dataclass(frozen=True, slots=True)
class HeartBeatRequest:
    src: str
    dst: str
    term: int
    request_id: int


@dataclass(frozen=True, slots=True)
class HeartBeatResponse:
    """`commit_index` (not in DLedger's response) tells the leader whether a follower, e.g. a
    restarted one, needs a commit-only push."""

    src: str
    dst: str
    term: int
    code: Code
    request_id: int
    commit_index: int = -1


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Entries after (prev_index, prev_term); no entries is a probe or a commit-only push."""

    src: str
    dst: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    leader_commit: int
    request_id: int


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """On SUCCESS `match_index` is the last index known to equal the leader's log; on
    INCONSISTENT_STATE it is the follower's hint: retry with entries after it."""

    src: str
    dst: str
    term: int
    code: Code
    request_id: int
    match_index: int
    commit_index: int


@dataclass(frozen=True, slots=True)
class InstallSnapshotRequest:
    src: str
    dst: str
    term: int
    snapshot: Snapshot
    request_id: int


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse:
    src: str
    dst: str
    term: int
    code: Code
    request_id: int
    match_index: int


Request = VoteRequest | HeartBeatRequest | AppendRequest | InstallSnapshotRequest
Response = VoteResponse | HeartBeatResponse | AppendResponse | InstallSnapshotResponse
Message = Request | Response


def failure_response(msg: Message) -> Response | None:
    """The response a driver feeds back when `msg` could not be delivered (connection
    refused, reset): DLedger's futures complete exceptionally and the round counts the peer
    as answered but not valid. None for responses, which nobody waits for."""
    if isinstance(msg, VoteRequest):
        return VoteResponse(msg.dst, msg.src, -1, VoteResult.UNKNOWN, msg.request_id)
    if isinstance(msg, HeartBeatRequest):
        return HeartBeatResponse(msg.dst, msg.src, -1, Code.NETWORK_ERROR, msg.request_id)
    if isinstance(msg, AppendRequest):
        return AppendResponse(msg.dst, msg.src, -1, Code.NETWORK_ERROR, msg.request_id, -1, -1)
    if isinstance(msg, InstallSnapshotRequest):
        return InstallSnapshotResponse(msg.dst, msg.src, -1, Code.NETWORK_ERROR, msg.request_id, -1)
    return None
