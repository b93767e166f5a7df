"""Raft timing and batching knobs.

Names follow DLedger's `DLedgerConfig` fields in snake case, with units in the names. Defaults
are DLedger's (openmessaging/dledger `DLedgerConfig`): heartBeatTimeIntervalMs 2000,
maxHeartBeatLeak 3, minVoteIntervalMs 300, maxVoteIntervalMs 1000, maxPushTimeOutMs 1000,
maxPendingRequestsNum 10000.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftConfig:
    #: A leader starts a heartbeat round when the last one started longer ago than this.
    heart_beat_time_interval_ms: int = 2000
    #: A follower becomes a candidate after max(2, this) intervals without a heartbeat; a
    #: leader steps down when no heartbeat round reached a quorum for this many intervals.
    max_heart_beat_leak: int = 3
    #: The next vote round starts a uniformly random [min, max) milliseconds later.
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    #: A vote round waits at most this plus a random [0, max_vote_interval_ms) for its
    #: responses. None (the default): one heartbeat interval. DLedger hard-codes 2000 ms, which
    #: is one interval at its default heartbeat but ten at a 200 ms one, and a round whose
    #: request was lost waits it in full; a voter answering late costs little, since the next
    #: round in the same term gets its vote again.
    vote_response_wait_ms: int | None = None
    #: An unanswered append or snapshot push is sent again after this long.
    max_push_time_out_ms: int = 1000
    #: An idle follower whose commit index lags is sent a commit-only push at most this often
    #: (DLedger's EntryDispatcher.doCommit uses 1000).
    commit_push_interval_ms: int = 1000
    #: Bounds on one append request.
    max_entries_per_push: int = 64
    max_bytes_per_push: int = 1 << 20
    #: Proposals waiting for their commit; more are refused with LEADER_PENDING_FULL.
    max_pending_proposals: int = 10000
    #: Take a snapshot of the state machine when this many entries were applied since the last
    #: one (0: never, the log grows without bound).
    snapshot_threshold_entries: int = 10000
    #: Entries kept in the log behind a snapshot, so a slightly lagging follower gets entries
    #: rather than the whole snapshot.
    snapshot_trailing_entries: int = 100

    def __post_init__(self) -> None:
        if self.heart_beat_time_interval_ms <= 0:
            raise ValueError("heart_beat_time_interval_ms must be positive")
        if self.max_heart_beat_leak <= 0:
            raise ValueError("max_heart_beat_leak must be positive")
        if not 0 <= self.min_vote_interval_ms <= self.max_vote_interval_ms:
            raise ValueError("need 0 <= min_vote_interval_ms <= max_vote_interval_ms")
        if (
            self.vote_response_wait_ms is not None and self.vote_response_wait_ms < 0
        ) or self.max_push_time_out_ms <= 0:
            raise ValueError("timeouts must not be negative")
        if self.commit_push_interval_ms < 0:
            raise ValueError("commit_push_interval_ms must not be negative")
        if self.max_entries_per_push <= 0 or self.max_bytes_per_push <= 0:
            raise ValueError("push bounds must be positive")
        if self.max_pending_proposals <= 0:
            raise ValueError("max_pending_proposals must be positive")
        if self.snapshot_threshold_entries < 0 or self.snapshot_trailing_entries < 0:
            raise ValueError("snapshot settings must not be negative")

    @property
    def vote_wait_ms(self) -> int:
        """How long a vote round waits for its responses, before the random part."""
        if self.vote_response_wait_ms is None:
            return self.heart_beat_time_interval_ms
        return self.vote_response_wait_ms

    @property
    def follower_timeout_ms(self) -> int:
        """A follower gives up on its leader once this much time passed since the last
        heartbeat (DLedger checks both `> 2 * interval` and `> leak * interval`)."""
        return max(2, self.max_heart_beat_leak) * self.heart_beat_time_interval_ms
