"""What a RaftNode call returns, and what it needs back after a restart.

Every call (`tick`, `receive`, `propose`, `take_snapshot`) returns one `Ready` batch. The driver
must handle it in this order:

1. make `persist` durable (fsync), applying the operations in order; storage must be
   prefix-durable: after a crash, a durable operation implies every earlier one is durable;
2. only then transmit `send`;
3. only then surface `commit_index`, `applied`, `proposals` and `role`.

and must not make the next call until step 1 is done (calls are serial). Messages never depend
on state that is not yet durable, so a crash at any point loses nothing another node was told.

Besides, the driver calls `tick` no later than `RaftNode.next_tick_ms()` (asked after every
call), and feeds `failure_response(msg)` back when a request cannot get an answer (connection
refused, or closed with the request outstanding), as DLedger's failed futures do; a silent loss
needs nothing, but costs a vote round its whole wait.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from rmq_ha.raft.messages import Code, Entry, Message, Role, Snapshot


@dataclass(frozen=True, slots=True)
class HardState:
    """DLedger's `currterm` file: the current term and the vote cast in it."""

    term: int = 0
    voted_for: str | None = None


@dataclass(frozen=True, slots=True)
class SaveHardState:
    hard_state: HardState


@dataclass(frozen=True, slots=True)
class AppendLog:
    """Append these entries; the first follows the current last entry."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class TruncateLog:
    """Drop every entry with an index above `after_index`."""

    after_index: int


@dataclass(frozen=True, slots=True)
class SaveSnapshot:
    """Replace the stored snapshot (followed by a CompactLog, and when a follower installs a
    leader's snapshot that disagrees with its log, a TruncateLog before it)."""

    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class CompactLog:
    """Entries up to and including `through_index` may be deleted (they are in the snapshot).
    Needs no fsync of its own: keeping them longer is harmless."""

    through_index: int


PersistOp = SaveHardState | AppendLog | TruncateLog | SaveSnapshot | CompactLog


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What storage hands back on restart: the last durable hard state and snapshot, and the
    stored entries in index order (the core drops any that do not chain onto the snapshot)."""

    hard_state: HardState = HardState()
    snapshot: Snapshot | None = None
    entries: Sequence[Entry] = ()


class ProposalStatus(enum.Enum):
    #: Appended at `index` in `term`; an `Applied` with the same proposal id follows on commit.
    ACCEPTED = "ACCEPTED"
    #: Definitely not appended (`code` says why: NOT_LEADER, LEADER_NOT_READY,
    #: LEADER_PENDING_FULL).
    REJECTED = "REJECTED"
    #: The leader stepped down before the entry committed: it may or may not commit later.
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"


@dataclass(frozen=True, slots=True)
class ProposalReply:
    proposal_id: int
    status: ProposalStatus
    index: int = -1
    term: int = -1
    code: Code = Code.SUCCESS
    #: Who this node thinks leads (a hint for NOT_LEADER), if anyone.
    leader_id: str | None = None


@dataclass(frozen=True, slots=True)
class Applied:
    """A committed data entry the state machine applied, with its result. `proposal_id` is set
    on the leader that accepted the proposal."""

    index: int
    term: int
    result: object
    proposal_id: int | None = None


@dataclass(frozen=True, slots=True)
class RoleState:
    """Role, term and leader after the call; `serving` is true on a leader once its no-op
    entry committed, i.e. once it may take proposals and answer reads."""

    role: Role
    term: int
    leader_id: str | None
    serving: bool


@dataclass(frozen=True, slots=True)
class Ready:
    persist: tuple[PersistOp, ...] = ()
    send: tuple[Message, ...] = ()
    #: The new commit index, when it advanced during the call.
    commit_index: int | None = None
    applied: tuple[Applied, ...] = ()
    proposals: tuple[ProposalReply, ...] = ()
    #: Set when role, term, leader or serving changed during the call.
    role: RoleState | None = None
    #: Free-form notes for traces (election outcomes, step-down reasons).
    events: tuple[str, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(
            self.persist
            or self.send
            or self.commit_index is not None
            or self.applied
            or self.proposals
            or self.role is not None
        )
