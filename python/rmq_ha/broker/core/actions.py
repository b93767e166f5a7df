"""What the role core asks the shell to do: outputs of `RoleCore.step`, executed in order.

An action that fails in a way the core must know about comes back as an event (an epoch the
file refused: `EpochAppendFailed`; an answer: `MasterHaFound`, `ProposalAnswered`,
`MemberGroup`, `HaInfoPushed`, `MasterHaAnswered`, `ReverseSynced`). When `AppendEpoch` fails,
the shell drops the rest of that batch and feeds the failure back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StartSpecial:
    """Start the special services (delay, transactions, pop revive)."""


@dataclass(frozen=True)
class StopSpecial:
    pass


@dataclass(frozen=True)
class Follow:
    """Point the HA client at a master's HA address (None: stop following)."""

    ha_addr: str | None


@dataclass(frozen=True)
class DropSlaves:
    """Close every slave's HA connection (this broker stopped being master)."""


@dataclass(frozen=True)
class AppendEpoch:
    """Epoch file: drop entries of epochs >= `epoch`, then append (epoch, start)."""

    epoch: int
    start: int


@dataclass(frozen=True)
class SetConfirm:
    """Move the store's confirm offset up to `offset` (the dispatcher follows)."""

    offset: int


@dataclass(frozen=True)
class WakeProducers:
    """Producers waiting for replication re-check (an ack arrived or the set changed)."""


@dataclass(frozen=True)
class WakePulls:
    """Parked pulls re-check (messages became visible without a local send)."""


@dataclass(frozen=True)
class AdoptTopicsFromLog:
    """Create a topic config for every queue in the log that has none (RocketMQ #9804)."""


@dataclass(frozen=True)
class BumpDataVersion:
    """Topic configs' DataVersion moves on, its stateVersion = `state_version` (#6316)."""

    state_version: int


@dataclass(frozen=True)
class Register:
    """Register with every name server now (the role view says with which id)."""


@dataclass(frozen=True)
class FindMasterHa:
    """Find the HA address of `master_addr`, master in `epoch` (906, else registration
    answers) -> `MasterHaFound`."""

    master_addr: str
    epoch: int


@dataclass(frozen=True)
class RequestElection:
    """ELECT_MASTER (broker-triggered) -> `MasterInfo`."""


@dataclass(frozen=True)
class ProposeSyncStateSet:
    """ALTER_SYNC_STATE_SET -> `ProposalAnswered`."""

    members: frozenset[int]
    master_epoch: int
    sync_state_set_epoch: int


@dataclass(frozen=True)
class RefreshReplicaAddrs:
    """Learn the group's replica addresses from the controller (topic forwarding)."""


@dataclass(frozen=True)
class CloseConnection:
    """Close the outbound remoting connection to `addr` (a master that went offline)."""

    addr: str


@dataclass(frozen=True)
class ArmVersionBump:
    """The next change of consumer offsets and delay progress moves their DataVersion on
    (a slave starts acting: what it changes must look newer than the master's copy)."""


@dataclass(frozen=True)
class ClearCatchUp:
    """The replica caught up: delete the persisted catch-up debt."""


@dataclass(frozen=True)
class FetchMemberGroup:
    """Ask the name servers for the group's live replicas -> `MemberGroup`."""


@dataclass(frozen=True)
class PushHaInfo:
    """Pre-online (a master): give slave `broker_id` at `addr` our HA address (906) ->
    `HaInfoPushed`."""

    broker_id: int
    addr: str


@dataclass(frozen=True)
class AskMasterHa:
    """Ask the master at `master_addr` for its HA address (906) -> `MasterHaAnswered`."""

    master_addr: str


@dataclass(frozen=True)
class ReverseSync:
    """Pre-online: pull back consumer offsets and delay progress from the slave at `addr`
    when its DataVersion is newer -> `ReverseSynced`."""

    broker_id: int
    addr: str


@dataclass(frozen=True)
class Log:
    """A line for the broker's log (the core has no logger: the simulator traces these)."""

    level: int
    text: str


Action = (
    StartSpecial
    | StopSpecial
    | Follow
    | DropSlaves
    | AppendEpoch
    | SetConfirm
    | WakeProducers
    | WakePulls
    | AdoptTopicsFromLog
    | BumpDataVersion
    | Register
    | FindMasterHa
    | RequestElection
    | ProposeSyncStateSet
    | RefreshReplicaAddrs
    | CloseConnection
    | ArmVersionBump
    | ClearCatchUp
    | FetchMemberGroup
    | PushHaInfo
    | AskMasterHa
    | ReverseSync
    | Log
)
