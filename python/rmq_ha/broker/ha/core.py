"""The master's replication bookkeeping, pure (no sockets, no clocks: time is passed in).

It answers three questions for the master side of broker HA (reference section 2.7-2.9):

* **confirmOffset**: the highest offset every SyncStateSet member holds. With one member or
  ``allAckInSyncStateSet=false`` it is the max offset (#7656). Otherwise the minimum ack over
  the members; fresh connections that have not acked yet are skipped (#6728); and while a
  member other than the master has no connection at all the value is frozen (#6662), so an
  isolated master with part of its set cannot move it.
* **SyncStateSet changes**: shrink members that have not caught up within
  ``haMaxTimeSlaveNotCatchup`` or have no connection; expand a slave whose ack reached both the
  confirm offset and the start of the current epoch. A change is only *proposed*: until the
  controller accepts it, the effective set is the union of the old and the proposed one and
  the in-sync count is the larger of the two (#5663), so a change can never weaken durability
  before it is committed.
* **acks for producers**: whether a write ending at some offset is acknowledged by every member
  (allAckInSyncStateSet) or by enough replicas (inSyncReplicas).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmq_ha._native import find_consistent_point


@dataclass
class Replica:
    """One slave's HA connection as the master sees it."""

    broker_id: int
    async_learner: bool = False
    ack: int = -1  # no ack yet
    last_caught_up_ms: int = 0
    # The master's max offset and the time when the last batch was sent on this connection:
    # an ack at or beyond that offset means the slave caught up as of that send.
    last_master_max: int = 0
    last_transfer_ms: int = 0


#: After the controller refused an expansion, acks propose none for this long (the periodic
#: check, every checkSyncStateSetPeriod, still may).
REFUSED_EXPANSION_BACKOFF_MS = 1000


@dataclass
class HaCore:
    self_id: int
    all_ack: bool
    in_sync_replicas: int = 1
    #: minInSyncReplicas: besides the put-time refusal, an acknowledgement needs this many
    #: replicas (the master counts) holding the write.
    min_in_sync_replicas: int = 1
    max_not_catchup_ms: int = 15_000
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
    proposed: frozenset[int] | None = None
    epoch_start_offset: int = 0
    #: The master epoch this core serves (set by the role core when it leads). A producer's
    #: wait for acks ends unacknowledged when it changes or the core is replaced.
    epoch: int = 0
    confirm: int = 0
    replicas: dict[int, Replica] = field(default_factory=dict)
    #: No expansion is proposed from an ack before this (monotonic ms; see cancel_proposal).
    expand_after_ms: int = 0

    # ---- the set ------------------------------------------------------------------------

    def effective_set(self) -> frozenset[int]:
        """The union of the committed and the proposed set while a change is pending."""
        if self.proposed is None:
            return self.sync_state_set
        return self.sync_state_set | self.proposed

    def in_sync_count(self) -> int:
        if self.proposed is None:
            return max(1, len(self.sync_state_set))
        return max(1, len(self.sync_state_set), len(self.proposed))

    def apply_set(self, members: frozenset[int], epoch: int, master_max: int) -> bool:
        """The controller's answer (or a role change) sets the committed set. Stale answers
        (an epoch not above ours) are ignored, except the first set ever taken."""
        if epoch <= self.sync_state_set_epoch and self.sync_state_set:
            return False
        self.sync_state_set = frozenset(members)
        self.sync_state_set_epoch = epoch
        self.proposed = None
        self.recompute_confirm(master_max)
        return True

    def cancel_proposal(self, refused_at_ms: int | None = None) -> None:
        """Forgets the pending proposal; `refused_at_ms`: the controller refused it (not a
        stale or unanswered one), and a refused expansion is not proposed again from acks for
        REFUSED_EXPANSION_BACKOFF_MS. Before, each ack proposed it anew: a slave whose
        heartbeats did not reach the controller (replica not alive there) but who replicated
        fine drew 40 refused ALTER_SYNC_STATE_SET in 0.4 s (fault probe, one-way cut)."""
        if (
            refused_at_ms is not None
            and self.proposed is not None
            and not self.proposed <= self.sync_state_set
        ):
            self.expand_after_ms = refused_at_ms + REFUSED_EXPANSION_BACKOFF_MS
        self.proposed = None

    # ---- connections --------------------------------------------------------------------

    def connected(self, broker_id: int, async_learner: bool, now_ms: int) -> None:
        self.replicas[broker_id] = Replica(broker_id, async_learner, last_caught_up_ms=now_ms)

    def disconnected(self, broker_id: int) -> None:
        self.replicas.pop(broker_id, None)

    def transferring(self, broker_id: int, master_max: int, now_ms: int) -> None:
        r = self.replicas.get(broker_id)
        if r is not None:
            r.last_master_max, r.last_transfer_ms = master_max, now_ms

    def idle(self, broker_id: int, now_ms: int) -> None:
        """Nothing is left to send to this slave: it is caught up now."""
        r = self.replicas.get(broker_id)
        if r is not None and r.ack >= r.last_master_max:
            r.last_caught_up_ms = now_ms

    def acked(
        self, broker_id: int, ack: int, master_max: int, now_ms: int
    ) -> frozenset[int] | None:
        """Records an ack; returns a proposed expanded set when this slave qualifies."""
        r = self.replicas.get(broker_id)
        if r is None:
            return None
        r.ack = max(r.ack, ack)
        if r.ack >= r.last_master_max:
            r.last_caught_up_ms = now_ms if r.ack >= master_max else r.last_transfer_ms
        self.recompute_confirm(master_max)
        if (
            not r.async_learner
            and broker_id not in self.effective_set()
            and self.proposed is None
            and r.ack >= self.confirm
            and r.ack >= self.epoch_start_offset
            and now_ms >= self.expand_after_ms
        ):
            self.proposed = self.sync_state_set | {broker_id}
            return self.proposed
        return None

    def maybe_expand(self) -> frozenset[int] | None:
        """A proposed larger set with every connected replica that qualifies by its last ack
        (as in `acked`), or None. Run periodically: a replica whose ack arrived while another
        proposal was pending would otherwise wait for its next ack, which on an idle master
        comes only every haSendHeartbeatInterval."""
        if self.proposed is not None:
            return None
        joiners = {
            bid
            for bid, r in self.replicas.items()
            if not r.async_learner
            and bid not in self.sync_state_set
            and r.ack >= 0
            and r.ack >= self.confirm
            and r.ack >= self.epoch_start_offset
        }
        if not joiners:
            return None
        self.proposed = self.sync_state_set | joiners
        return self.proposed

    def maybe_shrink(self, now_ms: int) -> frozenset[int] | None:
        """A proposed smaller set, or None. Members without a connection, or not caught up
        within max_not_catchup_ms, go; the master always stays."""
        if self.proposed is not None:
            return None
        keep = {self.self_id}
        for m in self.sync_state_set - {self.self_id}:
            r = self.replicas.get(m)
            if r is None or r.async_learner:
                continue
            if now_ms - r.last_caught_up_ms <= self.max_not_catchup_ms:
                keep.add(m)
        if keep == set(self.sync_state_set):
            return None
        self.proposed = frozenset(keep)
        return self.proposed

    # ---- confirm offset and acks --------------------------------------------------------

    def recompute_confirm(self, master_max: int) -> int:
        members = self.effective_set()
        if not self.all_ack or len(members) <= 1:
            self.confirm = master_max
            return self.confirm
        value = master_max
        for m in members:
            if m == self.self_id:
                continue
            r = self.replicas.get(m)
            if r is None:
                # A member with no connection (#6662): keep the previous value.
                return self.confirm
            if r.ack < 0:
                # A connection with no ack yet (#6728) is skipped. HaMaster feeds the
                # handshake's ack right after the connection, so this lasts no await; an ack
                # of 0 (an empty member) counts: the confirm offset never passes bytes an
                # in-sync member lacks (found by the group simulator, issue 14).
                continue
            value = min(value, r.ack)
        # Never backwards: a member that reconnects acks from below what it had.
        self.confirm = max(self.confirm, min(value, master_max))
        return self.confirm

    def best_ack(self) -> int:
        """The highest offset any connected replica has acknowledged (-1: none yet);
        RocketMQ's push2SlaveMaxOffset."""
        return max((r.ack for r in self.replicas.values()), default=-1)

    def acked_by(self, offset: int) -> int:
        """How many replicas (the master included) hold everything below `offset`."""
        return 1 + sum(1 for r in self.replicas.values() if r.ack >= offset)

    def ack_watermark(self) -> int:
        """The highest offset `o` with ``write_acked(o)`` (`NO_LIMIT` when every offset is;
        -1 when none is): `write_acked` is monotonic in the offset, so a master releases every
        producer waiting at or below this once per change, not each producer per ack."""
        members = self.effective_set() - {self.self_id}
        mark = NO_LIMIT
        if self.min_in_sync_replicas > 1:
            mark = min(mark, _kth_largest(self._acks_of(members), self.min_in_sync_replicas - 1))
        if self.all_ack:
            for m in members:
                r = self.replicas.get(m)
                mark = min(mark, -1 if r is None else r.ack)
            return mark
        if self.in_sync_replicas > 1:
            acks = [r.ack for r in self.replicas.values()]
            mark = min(mark, _kth_largest(acks, self.in_sync_replicas - 1))
        return mark

    def _acks_of(self, members: frozenset[int]) -> list[int]:
        return [r.ack for m in members if (r := self.replicas.get(m)) is not None]

    def write_acked(self, offset: int) -> bool:
        """Whether a producer's write ending at `offset` may be acknowledged. Never by fewer
        than minInSyncReplicas holders: a write accepted while a larger set was proposed
        (#5663) must not be acknowledged by the master alone when the proposal is refused
        and the set falls back (found by the group simulator, issue 14)."""
        members = self.effective_set() - {self.self_id}
        holders = 1 + sum(
            1 for m in members if (r := self.replicas.get(m)) is not None and r.ack >= offset
        )
        if holders < self.min_in_sync_replicas:
            return False
        if self.all_ack:
            for m in self.effective_set():
                if m == self.self_id:
                    continue
                r = self.replicas.get(m)
                if r is None or r.ack < offset:
                    return False
            return True
        return self.acked_by(offset) >= self.in_sync_replicas


def consistent_point(
    local: list[tuple[int, int]],
    local_max: int,
    master: list[tuple[int, int]],
    master_max: int,
) -> int | None:
    """Where a slave's log agrees with its master's (the RIP-44 truncation algorithm,
    `find_consistent_point`), plus one case it misses: a master that holds no byte past the
    start of its first epoch entry, where this replica's log starts too, disagrees with
    nothing, so the replica keeps up to that start. This happens when an empty replica is
    elected at the start of the group's first epoch: its entry replaces the first one (#9689),
    the two share no epoch number, and the slave would refuse to sync for ever (found by the
    group simulator, issue 14). Bytes the slave holds past that start were never
    acknowledged: the master was elected from the SyncStateSet and owes no catch-up."""
    point = find_consistent_point(local, local_max, master, master_max)
    if point is None and local and master:
        start = master[0][1]
        if master_max <= start and local[0][1] == start:
            return start
    return point


#: `HaCore.ack_watermark` when nothing but the master is needed.
NO_LIMIT = (1 << 63) - 1


def _kth_largest(values: list[int], k: int) -> int:
    """The k-th largest value (1-based), or -1 when there are fewer than k."""
    if len(values) < k:
        return -1
    return sorted(values, reverse=True)[k - 1]


def slave_ok(connections: int, master_max: int, best_ack: int, max_gap: int) -> bool:
    """Classic mode's isSlaveOK: a SYNC_MASTER waits for its slave only while one is
    connected and no further behind than ``haMaxGapNotInSync``; otherwise the send answers
    SLAVE_NOT_AVAILABLE at once (stored on the master only)."""
    return connections > 0 and master_max - max(best_ack, 0) < max_gap


@dataclass
class FlowMonitor:
    """``haFlowControlEnable`` / ``maxHaTransferByteInSecond`` for one slave connection:
    on average at most `rate` bytes per second. Transfers are whole records, so one may
    overshoot a window's budget; the overshoot is carried into the next windows. Pure: the
    caller passes the time (seconds, any monotonic origin)."""

    rate: int
    window_start: float | None = None
    sent: int = 0

    def allowance(self, now: float) -> int:
        """Bytes that may be sent now (0: wait until `next_window`)."""
        if self.window_start is None:
            self.window_start = now
        elif now >= self.window_start + 1.0:
            passed = int(now - self.window_start)
            self.window_start += passed
            self.sent = max(0, self.sent - self.rate * passed)
        return max(0, self.rate - self.sent)

    def used(self, n: int) -> None:
        self.sent += n

    def next_window(self) -> float:
        return (self.window_start or 0.0) + 1.0
