"""A pure, deterministic DLedger-style Raft node.

Inputs: `tick(now_ms)`, `receive(msg, now_ms)`, `propose(data, now_ms)`, `take_snapshot(now_ms)`.
Each returns a `Ready` batch (see `rmq_ha.raft.outputs` for the persist-then-send contract). No
I/O, no clock, no randomness but the `random.Random` passed in.

Election follows DLedger's `DLedgerLeaderElector` (seed 003): every node starts as CANDIDATE;
a candidate runs vote rounds at `nextTimeToRequestVote`, increasing the term only after a
WAIT_TO_VOTE_NEXT parse or when `needIncreaseTermImmediately` is set (a heartbeat with a bigger
term arrived, in which case it only catches up and votes later); voters compare ledgers before
terms; a leader runs heartbeat rounds and steps down after `maxHeartBeatLeak` intervals without
a quorum; a follower becomes a candidate after max(2, maxHeartBeatLeak) silent intervals.

Departures from DLedger that shorten a failover and bound its terms under slow fsyncs and
scheduling delay (issue 14, measured in the simulator, tests/test_raft_sim_failover.py): a vote
request with a bigger term from a candidate whose ledger is not behind is granted at once in that
term (Raft's rule; DLedger answers TERM_NOT_READY and waits for a revote, which on a busy machine
split vote after vote); after a round other candidates denied, the one with the smallest id
goes first and the others wait two vote intervals more per smaller one (a tie-break, so the next
round is no race); a vote round waits one heartbeat interval for answers by default (DLedger:
2000 ms); and ALREADY_HAS_LEADER backs off a vote interval (DLedger: plus maxHeartBeatLeak
intervals).

Replication is Raft's: a leader pushes entries after (prevIndex, prevTerm), one push in flight
per follower, retried after maxPushTimeOutMs; followers cut diverged suffixes; an index commits
when a quorum stores it and it belongs to the leader's own term. A new leader appends an empty
entry and takes proposals only once it committed (RocketMQ's DLedger controller does the same).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rmq_ha.raft.config import RaftConfig
from rmq_ha.raft.election import HeartBeatTally, VoteTally, parse_vote_tally
from rmq_ha.raft.log import RaftLog
from rmq_ha.raft.messages import (
    AppendRequest,
    AppendResponse,
    Code,
    ElectionOutcome,
    Entry,
    EntryKind,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    Message,
    ParseResult,
    Role,
    Snapshot,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmq_ha.raft.outputs import (
    AppendLog,
    Applied,
    CompactLog,
    HardState,
    PersistedState,
    PersistOp,
    ProposalReply,
    ProposalStatus,
    Ready,
    RoleState,
    SaveHardState,
    SaveSnapshot,
    TruncateLog,
)

#: "Long ago": DLedger's -1 start values, which its wall-clock elapsed() turns into "long ago"
#: whereas a driver's clock may start at 0.
NEVER = -(1 << 62)


class StateMachine(Protocol):
    """The replicated state machine, opaque to Raft."""

    def apply(self, index: int, data: bytes) -> object:
        """Applies one committed entry; the result goes back to the proposer."""
        ...

    def snapshot(self) -> bytes:
        """Everything applied so far, as bytes `restore` accepts."""
        ...

    def restore(self, data: bytes) -> None:
        """Replaces the whole state with a snapshot's."""
        ...


@dataclass(frozen=True, slots=True)
class TestHooks:
    """Deliberate bugs, so tests can prove the simulator's checker fails when it should.
    Never set outside tests."""

    __test__ = False  # not a pytest class

    #: Grant a vote even after voting for someone else in the same term.
    vote_twice: bool = False
    #: Change votedFor without persisting it.
    skip_vote_persist: bool = False
    #: Vote without comparing ledgers (a candidate with a stale log can win).
    ignore_ledger_in_vote: bool = False


@dataclass(slots=True)
class _Progress:
    """What a leader knows about one follower."""

    next_index: int
    match_index: int = -1
    inflight_id: int | None = None
    inflight_sent_ms: int = 0
    last_push_ms: int = NEVER
    peer_commit: int = -1
    #: The last push met TERM_NOT_READY: push again once a heartbeat succeeds.
    behind_term: bool = False


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: str
    role: Role
    term: int
    voted_for: str | None
    leader_id: str | None
    ledger_end_index: int
    ledger_end_term: int
    commit_index: int
    applied_index: int
    snapshot_index: int
    serving: bool
    last_election_outcome: ElectionOutcome | None
    next_time_to_request_vote_ms: int
    need_increase_term_immediately: bool


class RaftNode:
    def __init__(
        self,
        node_id: str,
        members: Sequence[str],
        state_machine: StateMachine,
        rng: random.Random,
        config: RaftConfig | None = None,
        persisted: PersistedState | None = None,
        hooks: TestHooks | None = None,
    ) -> None:
        group = tuple(sorted(set(members)))
        if node_id not in group:
            raise ValueError(f"{node_id} is not one of the members {group}")
        self.node_id = node_id
        self._members = group
        self._member_set = frozenset(group)
        self._others = tuple(m for m in group if m != node_id)
        self._quorum = len(group) // 2 + 1
        self._cfg = config if config is not None else RaftConfig()
        self._rng = rng
        self._sm = state_machine
        self._hooks = hooks if hooks is not None else TestHooks()

        ps = persisted if persisted is not None else PersistedState()
        self._term = ps.hard_state.term
        self._voted_for = ps.hard_state.voted_for
        self._log = RaftLog.restore(ps.snapshot, ps.entries)
        if self._log.snapshot is not None:
            state_machine.restore(self._log.snapshot.data)
        self._commit = self._log.snapshot_index
        self._applied = self._log.snapshot_index
        # Entries appended before the current call are durable (the driver contract), so a
        # leader counts only those for itself.
        self._durable_index = self._log.last_index

        self._role = Role.CANDIDATE
        self._leader_id: str | None = None
        # DLedgerLeaderElector / MemberState fields, DLedger's initial values.
        self._last_leader_heart_beat_ms = NEVER
        self._last_send_heart_beat_ms = NEVER
        self._last_succ_heart_beat_ms = NEVER
        self._next_time_to_request_vote_ms = NEVER
        self._need_increase_term_immediately = False
        self._last_parse_result = ParseResult.WAIT_TO_REVOTE
        self._last_outcome: ElectionOutcome | None = None
        self._known_max_term_in_group = -1
        self._vote_round: VoteTally | None = None
        self._heart_beat_round: HeartBeatTally | None = None

        self._progress: dict[str, _Progress] = {}
        self._noop_index = -1
        self._serving = False
        self._pending: dict[int, int] = {}
        self._next_request_id = rng.getrandbits(40)
        self._next_proposal_id = 1

        self._ops: list[PersistOp] = []
        self._hard_state_dirty = False
        self._sends: list[Message] = []
        self._applied_out: list[Applied] = []
        self._proposal_out: list[ProposalReply] = []
        self._events: list[str] = []
        self._commit_before = self._commit
        self._role_before = self._role_key()

    # -- public API --------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Ready:
        """Runs the role's maintenance (DLedger's StateMaintainer loop body): vote rounds,
        heartbeat rounds, timeouts, push retries."""
        self._begin()
        self._maintain(now_ms)
        self._replicate(now_ms)
        return self._finish()

    def receive(self, msg: Message, now_ms: int) -> Ready:
        """Handles one message. Work it makes due (a new vote round, catching up with a bigger
        term, a heartbeat round) waits for the next `tick`; `next_tick_ms` says it is due."""
        self._begin()
        if msg.dst == self.node_id:
            self._dispatch(msg, now_ms)
        self._replicate(now_ms)
        return self._finish()

    def propose(self, data: bytes, now_ms: int) -> tuple[int, Ready]:
        """Offers `data` for the log. Returns the proposal id and a batch whose `proposals`
        says ACCEPTED (an `Applied` with this id follows on commit) or REJECTED."""
        self._begin()
        pid = self._next_proposal_id
        self._next_proposal_id += 1
        self._propose(pid, data)
        self._replicate(now_ms)
        return pid, self._finish()

    def take_snapshot(self, now_ms: int) -> Ready:
        """Snapshots the state machine at the applied index and compacts the log now."""
        self._begin()
        self._snapshot_now()
        return self._finish()

    def next_tick_ms(self) -> int:
        """The latest time the driver should call `tick` (at or before now: at once). Calling
        it more often is harmless."""
        cfg = self._cfg
        if self._role is Role.LEADER:
            hb = self._heart_beat_round
            t = (
                hb.deadline_ms
                if hb is not None
                else self._last_send_heart_beat_ms + cfg.heart_beat_time_interval_ms + 1
            )
            for pr in self._progress.values():
                if pr.inflight_id is not None:
                    t = min(t, pr.inflight_sent_ms + cfg.max_push_time_out_ms + 1)
                elif pr.next_index <= self._log.last_index:
                    return -1
                elif pr.peer_commit < self._commit:
                    t = min(t, pr.last_push_ms + cfg.commit_push_interval_ms + 1)
            if self._log.last_index > self._durable_index:
                # Entries appended in the last call count for this node once durable, which
                # they are by the next call: with too few followers, that call commits them.
                n = self._commit_candidate(self._log.last_index)
                if n > self._commit and self._log.term_at(n) == self._term:
                    return -1
            return t
        if self._role is Role.FOLLOWER:
            return self._last_leader_heart_beat_ms + cfg.follower_timeout_ms + 1
        if self._need_increase_term_immediately:
            return -1
        if self._vote_round is not None:
            return self._vote_round.deadline_ms
        return self._next_time_to_request_vote_ms

    # -- read-only views ---------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._role

    @property
    def term(self) -> int:
        return self._term

    @property
    def voted_for(self) -> str | None:
        return self._voted_for

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def commit_index(self) -> int:
        return self._commit

    @property
    def applied_index(self) -> int:
        return self._applied

    @property
    def serving(self) -> bool:
        return self._serving

    @property
    def members(self) -> tuple[str, ...]:
        return self._members

    @property
    def log(self) -> RaftLog:
        """The in-memory log; callers must not change it."""
        return self._log

    @property
    def hard_state(self) -> HardState:
        return HardState(self._term, self._voted_for)

    def status(self) -> NodeStatus:
        return NodeStatus(
            node_id=self.node_id,
            role=self._role,
            term=self._term,
            voted_for=self._voted_for,
            leader_id=self._leader_id,
            ledger_end_index=self._log.last_index,
            ledger_end_term=self._log.last_term,
            commit_index=self._commit,
            applied_index=self._applied,
            snapshot_index=self._log.snapshot_index,
            serving=self._serving,
            last_election_outcome=self._last_outcome,
            next_time_to_request_vote_ms=self._next_time_to_request_vote_ms,
            need_increase_term_immediately=self._need_increase_term_immediately,
        )

    # -- batching outputs --------------------------------------------------------------------

    def _role_key(self) -> tuple[Role, int, str | None, bool]:
        return (self._role, self._term, self._leader_id, self._serving)

    def _begin(self) -> None:
        self._durable_index = self._log.last_index
        self._commit_before = self._commit
        self._role_before = self._role_key()

    def _finish(self) -> Ready:
        ops = self._ops
        if self._hard_state_dirty:
            # Term and vote go first: they never depend on the entries of the same batch, and
            # a log whose last term exceeds the stored term would confuse a restart.
            ops.insert(0, SaveHardState(HardState(self._term, self._voted_for)))
            self._hard_state_dirty = False
        key = self._role_key()
        ready = Ready(
            persist=tuple(ops) if ops else (),
            send=tuple(self._sends) if self._sends else (),
            commit_index=self._commit if self._commit != self._commit_before else None,
            applied=tuple(self._applied_out) if self._applied_out else (),
            proposals=tuple(self._proposal_out) if self._proposal_out else (),
            role=RoleState(*key) if key != self._role_before else None,
            events=tuple(self._events) if self._events else (),
        )
        if ops:
            self._ops = []
        if self._sends:
            self._sends = []
        if self._applied_out:
            self._applied_out = []
        if self._proposal_out:
            self._proposal_out = []
        if self._events:
            self._events = []
        return ready

    def _new_request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    def _append_local(self, entries: Sequence[Entry]) -> None:
        self._log.append(entries)
        self._ops.append(AppendLog(tuple(entries)))

    # -- the state maintainer ----------------------------------------------------------------

    def _maintain(self, now: int) -> None:
        # A role change can make the next role's work due at once (DLedger's loop would get
        # there 10 ms later).
        for _ in range(4):
            role, term = self._role, self._term
            if role is Role.LEADER:
                self._maintain_as_leader(now)
            elif role is Role.FOLLOWER:
                self._maintain_as_follower(now)
            else:
                self._maintain_as_candidate(now)
            if self._role is role and self._term == term:
                break

    def _replicate(self, now: int) -> None:
        """A leader's commit check and pushes (DLedger's EntryDispatcher threads)."""
        if self._role is not Role.LEADER:
            return
        self._advance_commit()
        timeout = self._cfg.max_push_time_out_ms
        for peer, pr in self._progress.items():
            if pr.inflight_id is None or now - pr.inflight_sent_ms > timeout:
                self._push(peer, now)

    def _maintain_as_leader(self, now: int) -> None:
        hb = self._heart_beat_round
        if hb is not None:
            if now < hb.deadline_ms:
                return
            self._finish_heart_beat_round(now)
            if self._role is not Role.LEADER:
                return
        if now - self._last_send_heart_beat_ms > self._cfg.heart_beat_time_interval_ms:
            self._last_send_heart_beat_ms = now
            self._start_heart_beat_round(now)

    def _maintain_as_follower(self, now: int) -> None:
        if now - self._last_leader_heart_beat_ms > self._cfg.follower_timeout_ms:
            self._events.append(f"{self.node_id}: no heartbeat from {self._leader_id}")
            self._change_role_to_candidate(self._term)

    def _maintain_as_candidate(self, now: int) -> None:
        vote = self._vote_round
        if vote is not None and self._need_increase_term_immediately:
            # A bigger term is known: this round cannot matter. (DLedger lets it run out
            # first; while a silent member keeps it open for up to 3 s, the leader's heartbeats
            # would bounce off us with TERM_NOT_READY and be resent at once.)
            self._vote_round = None
        elif vote is not None:
            if now < vote.deadline_ms:
                return
            self._finish_vote_round(now)
            if self._role is not Role.CANDIDATE:
                return
        if now < self._next_time_to_request_vote_ms and not self._need_increase_term_immediately:
            return
        if (
            self._last_parse_result is ParseResult.WAIT_TO_VOTE_NEXT
            or self._need_increase_term_immediately
        ):
            self._next_term()
            self._last_parse_result = ParseResult.WAIT_TO_REVOTE
        if self._need_increase_term_immediately:
            # Only catch up now; vote ourselves only after the round of the node whose bigger
            # term woke us could end (its revote follows our TERM_NOT_READY at once), plus a
            # random interval. DLedger waits the random interval only: when the revote arrives
            # later than that (a busy machine), we have voted for ourselves, both rounds fail,
            # both move to the next term, and the same happens there (20 terms were seen).
            self._next_time_to_request_vote_ms = self._next_vote_time(now) + self._cfg.vote_wait_ms
            self._need_increase_term_immediately = False
            return
        self._start_vote_round(now)

    # -- role changes (MemberState) ----------------------------------------------------------

    def _next_term(self) -> None:
        if self._known_max_term_in_group > self._term:
            self._term = self._known_max_term_in_group
        else:
            self._term += 1
        self._voted_for = None
        self._hard_state_dirty = True

    def _next_vote_time(self, now: int) -> int:
        lo, hi = self._cfg.min_vote_interval_ms, self._cfg.max_vote_interval_ms
        return now + lo + (self._rng.randrange(hi - lo) if hi > lo else 0)

    def _after_denied_round(self, tally: VoteTally, now: int) -> int:
        """When to vote next after a round that other candidates denied us (NOT_ENOUGH_ACCEPTS),
        with a tie-break. The survivors of a leader's death time out on the same heartbeat, so
        their next rounds start only a random vote interval apart; when that is less than a
        durable write of the self-vote plus a round trip (tens of ms on a busy machine, against
        a 30-100 ms interval at a 200 ms heartbeat), both vote for themselves, and again one
        term higher: 27 terms in the simulator with 5-50 ms fsyncs, 20 in the bench on a loaded
        machine. So the candidates that answered REJECT_ALREADY_VOTED are ordered by id: one
        with none smaller goes after minVoteIntervalMs, the others wait a random vote interval
        plus two maxVoteIntervalMs per smaller one, and find it in the next term, where they,
        still in the old one, vote for it at once. Without such answers: a random interval."""
        cfg = self._cfg
        if not tally.already_voted:
            return self._next_vote_time(now)
        smaller = sum(1 for m in tally.already_voted if m < self.node_id)
        if smaller == 0:
            return now + cfg.min_vote_interval_ms
        return self._next_vote_time(now) + smaller * 2 * cfg.max_vote_interval_ms

    def _change_role_to_candidate(self, term: int) -> None:
        if term < self._term:
            return
        self._known_max_term_in_group = max(self._known_max_term_in_group, term)
        if self._role is Role.LEADER:
            self._stop_leading()
        self._role = Role.CANDIDATE
        self._leader_id = None
        self._heart_beat_round = None

    def _change_role_to_follower(self, leader_id: str, now: int) -> None:
        self._last_parse_result = ParseResult.WAIT_TO_REVOTE
        if self._role is Role.LEADER:
            self._stop_leading()
        self._role = Role.FOLLOWER
        self._leader_id = leader_id
        self._last_leader_heart_beat_ms = now
        # A vote round still waiting is dropped: a leader of this term exists, so it cannot
        # pass (DLedger lets it finish, to the same effect).
        self._vote_round = None

    def _change_role_to_leader(self, term: int, now: int) -> None:
        if term != self._term:
            return
        self._role = Role.LEADER
        self._leader_id = self.node_id
        self._last_send_heart_beat_ms = NEVER
        self._heart_beat_round = None
        nxt = self._log.last_index + 1
        self._progress = {p: _Progress(next_index=nxt) for p in self._others}
        noop = Entry(nxt, term, b"", EntryKind.NOOP)
        self._append_local([noop])
        self._noop_index = noop.index
        self._serving = False
        self._events.append(f"{self.node_id}: leader of term {term}, no-op at {noop.index}")

    def _stop_leading(self) -> None:
        for index, pid in self._pending.items():
            self._proposal_out.append(
                ProposalReply(pid, ProposalStatus.OUTCOME_UNKNOWN, index=index, term=self._term)
            )
        self._pending = {}
        self._progress = {}
        self._noop_index = -1
        self._serving = False

    # -- elections ---------------------------------------------------------------------------

    def _start_vote_round(self, now: int) -> None:
        cfg = self._cfg
        term = self._term
        wait = cfg.vote_wait_ms
        if cfg.max_vote_interval_ms > 0:
            wait += self._rng.randrange(cfg.max_vote_interval_ms)
        tally = VoteTally(term, self._new_request_id(), now + wait)
        self._vote_round = tally
        end_index, end_term = self._log.last_index, self._log.last_term
        for peer in self._others:
            self._sends.append(
                VoteRequest(self.node_id, peer, term, end_index, end_term, tally.request_id)
            )
        result, response_term = self._handle_vote(
            self.node_id, term, end_index, end_term, now, self_vote=True
        )
        self._count_vote(tally, self.node_id, result, response_term, now)

    def _count_vote(
        self, tally: VoteTally, src: str, result: VoteResult, response_term: int, now: int
    ) -> None:
        if src in tally.responded or src not in self._member_set:
            return
        tally.responded.add(src)
        if result is VoteResult.REJECT_ALREADY_VOTED and src != self.node_id:
            tally.already_voted.add(src)
        tally.count(result, response_term)
        if tally.latch_open(self._quorum, len(self._members)):
            self._finish_vote_round(now)

    def _finish_vote_round(self, now: int) -> None:
        tally = self._vote_round
        self._vote_round = None
        if tally is None or self._role is not Role.CANDIDATE:
            return
        outcome = parse_vote_tally(tally, self._quorum)
        self._last_outcome = outcome
        self._events.append(
            f"{self.node_id}: vote term={tally.term} {outcome.value} valid={tally.valid_num} "
            f"accepted={tally.accepted_num} notReady={tally.not_ready_term_num} "
            f"biggerLedger={tally.bigger_ledger_num} hasLeader={tally.already_has_leader} "
            f"maxTerm={tally.known_max_term_in_group}"
        )
        cfg = self._cfg
        if outcome is ElectionOutcome.BIGGER_TERM_IN_GROUP:
            self._next_time_to_request_vote_ms = self._next_vote_time(now)
            self._change_role_to_candidate(tally.known_max_term_in_group)
        elif outcome is ElectionOutcome.ALREADY_HAS_LEADER:
            # A voter still follows a leader. If that leader is dead, the voter notices a few
            # ms after us (its last heartbeat came from the same round as ours), so try again
            # after a vote interval, in the same term. DLedger waits maxHeartBeatLeak intervals
            # more, which put a failover past its goal whenever the other node's timer fired
            # a little later than ours. If the leader lives, a round in the same term disturbs
            # nobody: it is refused again and moves no term.
            self._next_time_to_request_vote_ms = self._next_vote_time(now)
        elif outcome is ElectionOutcome.BIGGER_LEDGER_IN_GROUP:
            self._next_time_to_request_vote_ms = (
                self._next_vote_time(now) + cfg.max_vote_interval_ms
            )
        elif outcome is ElectionOutcome.NOT_ENOUGH_ACCEPTS:
            self._next_time_to_request_vote_ms = self._after_denied_round(tally, now)
        elif outcome is ElectionOutcome.NO_QUORUM_OF_VALID_VOTES:
            self._next_time_to_request_vote_ms = self._next_vote_time(now)
        # REVOTE_IMMEDIATELY keeps nextTimeToRequestVote, which has passed: vote again now.
        self._last_parse_result = outcome.parse_result
        if outcome is ElectionOutcome.PASSED:
            self._change_role_to_leader(tally.term, now)

    def _catch_up_to_vote(self, term: int, now: int) -> None:
        """A candidate with an up-to-date ledger asks for a vote in a bigger term: take that
        term (no vote cast in it yet), stop leading or following, and hold back our own next
        round until the candidate's could have ended, so that it wins undisturbed."""
        self._change_role_to_candidate(term)
        self._term = term
        self._voted_for = None
        self._hard_state_dirty = True
        self._need_increase_term_immediately = False
        self._last_parse_result = ParseResult.WAIT_TO_REVOTE
        self._vote_round = None
        self._next_time_to_request_vote_ms = max(
            self._next_time_to_request_vote_ms, self._next_vote_time(now) + self._cfg.vote_wait_ms
        )

    def _handle_vote(
        self, src: str, term: int, end_index: int, end_term: int, now: int, *, self_vote: bool
    ) -> tuple[VoteResult, int]:
        """DLedger's handleVote: the result and the term to answer with."""
        if src not in self._member_set:
            return VoteResult.REJECT_UNKNOWN_LEADER, self._term
        if not self_vote and src == self.node_id:
            return VoteResult.REJECT_UNEXPECTED_LEADER, self._term
        my_end_index, my_end_term = self._log.last_index, self._log.last_term
        if self._hooks.ignore_ledger_in_vote:
            my_end_index, my_end_term = -1, -1
        # The ledger is compared before the term: a stale candidate never bumps a voter's term.
        if end_term < my_end_term:
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM, self._term
        if end_term == my_end_term and end_index < my_end_index:
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX, self._term
        if term < self._term:
            return VoteResult.REJECT_EXPIRED_VOTE_TERM, self._term
        if term > self._term:
            # Raft's rule: adopt the term and vote in it now (term and vote are persisted
            # together before the answer leaves). DLedger instead answers TERM_NOT_READY,
            # catches up, and lets the candidate revote; on a busy machine the revote arrived
            # after this node had voted for itself in the new term, both rounds failed, and the
            # same happened one term higher, up to 20 terms (docs/PERF.md).
            self._catch_up_to_vote(term, now)
        if self._voted_for is not None and self._voted_for != src and not self._hooks.vote_twice:
            if self._leader_id is not None:
                return VoteResult.REJECT_ALREADY_HAS_LEADER, self._term
            return VoteResult.REJECT_ALREADY_VOTED, self._term
        if term < my_end_term:
            return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, my_end_term
        if self._voted_for != src:
            self._voted_for = src
            if not self._hooks.skip_vote_persist:
                self._hard_state_dirty = True
        return VoteResult.ACCEPT, self._term

    # -- heartbeats --------------------------------------------------------------------------

    def _start_heart_beat_round(self, now: int) -> None:
        tally = HeartBeatTally(
            self._term, self._new_request_id(), now + self._cfg.heart_beat_time_interval_ms
        )
        self._heart_beat_round = tally
        for peer in self._others:
            self._sends.append(HeartBeatRequest(self.node_id, peer, self._term, tally.request_id))
        if tally.latch_open(self._quorum, len(self._members)):
            self._finish_heart_beat_round(now)

    def _finish_heart_beat_round(self, now: int) -> None:
        tally = self._heart_beat_round
        self._heart_beat_round = None
        if tally is None or self._role is not Role.LEADER or tally.term != self._term:
            return
        cfg = self._cfg
        if tally.succ_num >= self._quorum:
            self._last_succ_heart_beat_ms = now
            return
        if tally.succ_num + tally.not_ready_num >= self._quorum:
            self._last_send_heart_beat_ms = NEVER  # send again at once
        elif tally.max_term > tally.term:
            self._events.append(f"{self.node_id}: heartbeat saw term {tally.max_term}")
            self._change_role_to_candidate(tally.max_term)
        elif tally.inconsistent_leader:
            self._events.append(f"{self.node_id}: heartbeat saw another leader")
            self._change_role_to_candidate(tally.term)
        elif (
            now - self._last_succ_heart_beat_ms
            > cfg.max_heart_beat_leak * cfg.heart_beat_time_interval_ms
        ):
            self._events.append(f"{self.node_id}: no heartbeat quorum, stepping down")
            self._change_role_to_candidate(tally.term)

    def _check_leader(self, src: str, term: int, now: int) -> Code:
        """DLedger's handleHeartBeat checks, shared by every request only a leader sends."""
        if src not in self._member_set:
            return Code.UNKNOWN_MEMBER
        if src == self.node_id:
            return Code.UNEXPECTED_MEMBER
        if term < self._term:
            return Code.EXPIRED_TERM
        if term > self._term:
            # Do not follow a bigger term at once: become a candidate, catch up, and let the
            # leader's next heartbeat make us its follower.
            self._change_role_to_candidate(term)
            self._need_increase_term_immediately = True
            return Code.TERM_NOT_READY
        if self._leader_id is None:
            self._change_role_to_follower(src, now)
            return Code.SUCCESS
        if self._leader_id == src:
            self._last_leader_heart_beat_ms = now
            return Code.SUCCESS
        return Code.INCONSISTENT_LEADER

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, msg: Message, now: int) -> None:
        if isinstance(msg, HeartBeatRequest):
            code = self._check_leader(msg.src, msg.term, now)
            self._sends.append(
                HeartBeatResponse(
                    self.node_id, msg.src, self._term, code, msg.request_id, self._commit
                )
            )
        elif isinstance(msg, HeartBeatResponse):
            pr = self._progress.get(msg.src)
            if pr is not None and msg.code is Code.SUCCESS and msg.term == self._term:
                pr.peer_commit = msg.commit_index
                if pr.behind_term:
                    pr.behind_term = False
                    pr.inflight_id = None  # it follows us now: push at once
            hb = self._heart_beat_round
            if hb is None or msg.request_id != hb.request_id or msg.src in hb.responded:
                return
            if msg.src not in self._member_set:
                return
            hb.responded.add(msg.src)
            hb.count(msg.code, msg.term)
            if hb.latch_open(self._quorum, len(self._members)):
                self._finish_heart_beat_round(now)
        elif isinstance(msg, VoteRequest):
            result, term = self._handle_vote(
                msg.src, msg.term, msg.ledger_end_index, msg.ledger_end_term, now, self_vote=False
            )
            self._sends.append(VoteResponse(self.node_id, msg.src, term, result, msg.request_id))
        elif isinstance(msg, VoteResponse):
            vote = self._vote_round
            if vote is not None and msg.request_id == vote.request_id:
                self._count_vote(vote, msg.src, msg.result, msg.term, now)
        elif isinstance(msg, AppendRequest):
            self._on_append(msg, now)
        elif isinstance(msg, AppendResponse):
            self._on_append_response(msg)
        elif isinstance(msg, InstallSnapshotRequest):
            self._on_install_snapshot(msg, now)
        else:
            self._on_install_snapshot_response(msg)

    # -- replication, follower side ----------------------------------------------------------

    def _on_append(self, m: AppendRequest, now: int) -> None:
        code = self._check_leader(m.src, m.term, now)
        if code is not Code.SUCCESS:
            self._reply_append(m, code, -1)
            return
        log = self._log
        prev, entries = m.prev_index, m.entries
        snap_index = log.snapshot_index
        if prev < snap_index:
            # Entries up to the snapshot are committed, hence the leader's: skip them.
            skip = snap_index - prev
            if skip >= len(entries):
                self._reply_append(m, Code.SUCCESS, prev + len(entries))
                return
            entries = entries[skip:]
            prev = snap_index
        else:
            prev_term = log.term_at(prev)
            if prev_term is None:
                self._reply_append(m, Code.INCONSISTENT_STATE, log.last_index)
                return
            if prev_term != m.prev_term:
                self._reply_append(m, Code.INCONSISTENT_STATE, self._conflict_hint(prev))
                return
        for i, e in enumerate(entries):
            have = log.term_at(e.index)
            if have == e.term:
                continue
            if have is not None:
                if e.index <= self._commit:
                    raise AssertionError(f"leader {m.src} overwrites committed entry {e.index}")
                log.truncate_after(e.index - 1)
                self._ops.append(TruncateLog(e.index - 1))
            self._append_local(entries[i:])
            break
        match = prev + len(entries)
        if min(m.leader_commit, match) > self._commit:
            self._commit = min(m.leader_commit, match)
            self._apply_committed()
        self._reply_append(m, Code.SUCCESS, match)

    def _conflict_hint(self, prev: int) -> int:
        """Where the leader should retry after a mismatch at `prev`: before the first entry of
        our conflicting term, never below our commit index (committed entries match)."""
        log = self._log
        bad_term = log.term_at(prev)
        i = prev
        while i - 1 > self._commit and i - 1 >= log.start and log.term_at(i - 1) == bad_term:
            i -= 1
        return max(i - 1, self._commit)

    def _reply_append(self, m: AppendRequest, code: Code, match: int) -> None:
        self._sends.append(
            AppendResponse(self.node_id, m.src, self._term, code, m.request_id, match, self._commit)
        )

    def _on_install_snapshot(self, m: InstallSnapshotRequest, now: int) -> None:
        code = self._check_leader(m.src, m.term, now)
        snap = m.snapshot
        if code is Code.SUCCESS and snap.last_index > self._commit:
            kept = self._log.install_snapshot(snap)
            self._ops.append(SaveSnapshot(snap))
            if not kept:
                self._ops.append(TruncateLog(snap.last_index))
            self._ops.append(CompactLog(snap.last_index))
            self._sm.restore(snap.data)
            self._commit = self._applied = snap.last_index
            self._events.append(f"{self.node_id}: installed snapshot at {snap.last_index}")
        match = snap.last_index if code is Code.SUCCESS else -1
        self._sends.append(
            InstallSnapshotResponse(self.node_id, m.src, self._term, code, m.request_id, match)
        )

    # -- replication, leader side ------------------------------------------------------------

    def _push(self, peer: str, now: int) -> None:
        pr = self._progress[peer]
        cfg = self._cfg
        if pr.inflight_id is not None:
            if now - pr.inflight_sent_ms <= cfg.max_push_time_out_ms:
                return
            pr.inflight_id = None
            pr.next_index = pr.match_index + 1
        log = self._log
        pr.next_index = min(pr.next_index, log.last_index + 1)
        prev = pr.next_index - 1
        prev_term = log.term_at(prev)
        rid = self._new_request_id()
        msg: Message
        if prev_term is None or pr.next_index < log.start:
            snap = log.snapshot
            assert snap is not None, "an entry is unknown only below the snapshot"
            msg = InstallSnapshotRequest(self.node_id, peer, self._term, snap, rid)
        elif pr.next_index <= log.last_index:
            entries = log.entries_from(
                pr.next_index, cfg.max_entries_per_push, cfg.max_bytes_per_push
            )
            msg = AppendRequest(
                self.node_id, peer, self._term, prev, prev_term, tuple(entries), self._commit, rid
            )
        elif pr.peer_commit < self._commit and now - pr.last_push_ms > cfg.commit_push_interval_ms:
            msg = AppendRequest(
                self.node_id, peer, self._term, prev, prev_term, (), self._commit, rid
            )
        else:
            return
        pr.inflight_id = rid
        pr.inflight_sent_ms = now
        pr.last_push_ms = now
        self._sends.append(msg)

    def _on_append_response(self, m: AppendResponse) -> None:
        pr = self._progress.get(m.src) if self._role is Role.LEADER else None
        if pr is None:
            return
        if m.code is Code.SUCCESS:
            if m.term != self._term:
                return
            if m.match_index > pr.match_index:
                pr.match_index = m.match_index
            pr.next_index = max(pr.next_index, pr.match_index + 1)
            pr.peer_commit = m.commit_index
            if m.request_id == pr.inflight_id:
                pr.inflight_id = None
            self._advance_commit()
        elif m.code is Code.INCONSISTENT_STATE:
            if m.term == self._term and m.request_id == pr.inflight_id:
                pr.inflight_id = None
                pr.next_index = max(pr.match_index + 1, min(m.match_index + 1, pr.next_index - 1))
        else:
            self._on_push_refused(pr, m.src, m.code, m.term, m.request_id)

    def _on_install_snapshot_response(self, m: InstallSnapshotResponse) -> None:
        pr = self._progress.get(m.src) if self._role is Role.LEADER else None
        if pr is None:
            return
        if m.code is Code.SUCCESS:
            if m.term != self._term:
                return
            pr.match_index = max(pr.match_index, m.match_index)
            pr.next_index = max(pr.next_index, pr.match_index + 1)
            if m.request_id == pr.inflight_id:
                pr.inflight_id = None
            self._advance_commit()
        else:
            self._on_push_refused(pr, m.src, m.code, m.term, m.request_id)

    def _on_push_refused(self, pr: _Progress, src: str, code: Code, term: int, rid: int) -> None:
        if code is Code.EXPIRED_TERM and term > self._term:
            # Raft's rule; DLedger's pusher ignores this, which can leave a node with a bigger
            # term and a stale log outside the group for good.
            self._events.append(f"{self.node_id}: push to {src} saw term {term}")
            self._change_role_to_candidate(term)
        elif code is Code.INCONSISTENT_LEADER:
            self._events.append(f"{self.node_id}: {src} follows another leader")
            self._change_role_to_candidate(self._term)
        elif code is Code.TERM_NOT_READY and rid == pr.inflight_id:
            # It is catching up with our term; the next successful heartbeat (sent at once, see
            # the heartbeat round) makes it our follower, then we push again.
            pr.behind_term = True
        # NETWORK_ERROR and member errors: retried after maxPushTimeOutMs.

    def _commit_candidate(self, own_index: int) -> int:
        """The highest index a quorum stores, counting this node up to `own_index`."""
        matches = [pr.match_index for pr in self._progress.values()]
        matches.append(own_index)
        matches.sort(reverse=True)
        return matches[self._quorum - 1]

    def _advance_commit(self) -> None:
        if self._role is not Role.LEADER:
            return
        n = self._commit_candidate(min(self._durable_index, self._log.last_index))
        # Only an entry of the leader's own term commits by counting (Raft, figure 8).
        if n > self._commit and self._log.term_at(n) == self._term:
            self._commit = n
            self._apply_committed()

    # -- proposals, applying, snapshots ------------------------------------------------------

    def _propose(self, pid: int, data: bytes) -> None:
        if self._role is not Role.LEADER:
            code = Code.NOT_LEADER
        elif not self._serving:
            code = Code.LEADER_NOT_READY
        elif len(self._pending) >= self._cfg.max_pending_proposals:
            code = Code.LEADER_PENDING_FULL
        else:
            entry = Entry(self._log.last_index + 1, self._term, data, EntryKind.DATA)
            self._append_local([entry])
            self._pending[entry.index] = pid
            self._proposal_out.append(
                ProposalReply(pid, ProposalStatus.ACCEPTED, entry.index, entry.term)
            )
            return
        self._proposal_out.append(
            ProposalReply(pid, ProposalStatus.REJECTED, code=code, leader_id=self._leader_id)
        )

    def _apply_committed(self) -> None:
        log = self._log
        while self._applied < self._commit:
            index = self._applied + 1
            e = log.entry(index)
            if e.kind is EntryKind.DATA:
                result = self._sm.apply(index, e.data)
                pid = self._pending.pop(index, None)
                self._applied_out.append(Applied(index, e.term, result, pid))
            self._applied = index
        if (
            self._role is Role.LEADER
            and not self._serving
            and 0 <= self._noop_index <= self._commit
        ):
            self._serving = True
        threshold = self._cfg.snapshot_threshold_entries
        if threshold and self._applied - log.snapshot_index >= threshold:
            self._snapshot_now()

    def _snapshot_now(self) -> None:
        log = self._log
        index = self._applied
        if index <= log.snapshot_index:
            return
        term = log.term_at(index)
        assert term is not None
        snap = Snapshot(index, term, self._sm.snapshot())
        log.set_snapshot(snap)
        self._ops.append(SaveSnapshot(snap))
        through = index - self._cfg.snapshot_trailing_entries
        if through >= log.start:
            log.compact_through(through)
            self._ops.append(CompactLog(through))
