"""What happens to a broker, as the role core sees it: inputs of `RoleCore.step`.

Every event is a plain frozen record: no sockets, no clocks (the time comes with `step`). The
Trio shell (broker/io, broker/broker.py) produces them from the network, the store and timers;
the simulator (rmq_ha.sim) produces them from its model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

# ---- life cycle ------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """The broker is listening at `address`; its store is open and recovered. `max_offset` and
    `confirm_offset` are the log's; `last_epoch`/`last_epoch_start` the epoch file's last entry
    after recovery."""

    address: str
    max_offset: int
    confirm_offset: int
    last_epoch: int | None
    last_epoch_start: int


@dataclass(frozen=True)
class Tick:
    """Time passed (periodic): elections while masterless, SyncStateSet shrink, stale
    proposals, FMQ isolation, pre-online timeouts."""


@dataclass(frozen=True)
class LogGrew:
    """The local log's end moved (a slave appended replicated bytes, a master stored a
    write). `max_offset` is the new end, `confirm_offset` the store's confirm offset."""

    max_offset: int
    confirm_offset: int


@dataclass(frozen=True)
class DiskFull:
    """The storage service's retention round judged the commitlog's disk (issue 15):
    `full` above diskSpaceWarningLevelRatio (writes are refused), and again False once usage is
    back at or below diskSpaceCleanForciblyRatio (RocketMQ's hysteresis). `why` says how full."""

    full: bool
    why: str = ""


# ---- controller mode -------------------------------------------------------------------


@dataclass(frozen=True)
class IdAssigned:
    """The controller confirmed this replica's persistent broker id (REGISTER_BROKER)."""

    broker_id: int


@dataclass(frozen=True)
class MasterInfo:
    """The controller's view of the group: a REGISTER_BROKER / ELECT_MASTER / GET_REPLICA_INFO
    answer or a NOTIFY_BROKER_ROLE_CHANGED notice. `master_id` None: the group has no
    master (the broker should ask for an election)."""

    master_id: int | None
    master_addr: str | None
    epoch: int | None
    sync_state_set_epoch: int
    sync_state_set: frozenset[int]
    #: "register" | "elect" | "poll" | "notice": for the log only.
    source: str = "notice"

    @classmethod
    def of(cls, info: ControllerMasterInfo, source: str) -> MasterInfo:
        """From a controller answer (`controller.messages.MasterInfo`, or any answer with
        its fields)."""
        return cls(
            info.master_broker_id,
            info.master_address,
            info.master_epoch,
            info.sync_state_set_epoch or 0,
            frozenset(info.sync_state_set),
            source,
        )


class ControllerMasterInfo(Protocol):
    """The fields of a controller's answer that name the master (kept as a Protocol so the
    pure core does not depend on the controller package)."""

    @property
    def master_broker_id(self) -> int | None: ...
    @property
    def master_address(self) -> str | None: ...
    @property
    def master_epoch(self) -> int | None: ...
    @property
    def sync_state_set_epoch(self) -> int | None: ...
    @property
    def sync_state_set(self) -> Iterable[int]: ...


@dataclass(frozen=True)
class EpochAppendFailed:
    """The epoch file refused the entry the core asked for (a disk error or a conflict the
    core could not foresee): this replica cannot lead in `epoch`. The file's last entry now."""

    epoch: int
    why: str
    last_epoch: int | None
    last_epoch_start: int


@dataclass(frozen=True)
class MasterHaFound:
    """The HA address of the master this slave follows in `epoch` (asked of the master or
    read from a name server's answer)."""

    epoch: int
    ha_addr: str


@dataclass(frozen=True)
class ProposalAnswered:
    """The controller's answer to ALTER_SYNC_STATE_SET: accepted (with the new set and its
    epoch), refused, or unknown (no answer: the proposal stays until the poll tells)."""

    accepted: bool
    unknown: bool = False
    members: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0


# ---- replication (master side; HaCore) ------------------------------------------------


@dataclass(frozen=True)
class SlaveConnected:
    broker_id: int
    async_learner: bool


@dataclass(frozen=True)
class SlaveDisconnected:
    broker_id: int


@dataclass(frozen=True)
class Transferring:
    """The master is about to send bytes to a slave while its log ends at `master_max`."""

    broker_id: int
    master_max: int


@dataclass(frozen=True)
class SlaveIdle:
    """Nothing is left to send to this slave."""

    broker_id: int


@dataclass(frozen=True)
class SlaveAcked:
    broker_id: int
    ack: int
    master_max: int


# ---- classic mode: name servers, slave acting master, pre-online, FMQ ------------------


@dataclass(frozen=True)
class NamesrvAnswered:
    """A name server answered a registration or heartbeat (FMQ: contact). For a classic
    slave, the master it names (remoting and HA address) if any."""

    master_addr: str | None = None
    master_ha_addr: str | None = None


@dataclass(frozen=True)
class MinBrokerChanged:
    """The group's smallest live id changed (905, or the member-group poll)."""

    min_id: int
    min_addr: str | None
    offline_addr: str | None = None
    ha_addr: str | None = None


@dataclass(frozen=True)
class MemberGroup:
    """The group's live replicas from the name servers (None: none answered)."""

    members: dict[int, str] | None


@dataclass(frozen=True)
class HaInfoPushed:
    """Pre-online: a slave took (or refused) our HA address (906)."""

    broker_id: int
    ok: bool


@dataclass(frozen=True)
class MasterHaAnswered:
    """Pre-online (a slave) or acting: the master's answer to 906 (None: no answer)."""

    master_addr: str
    ha_addr: str | None


@dataclass(frozen=True)
class MasterPushedHa:
    """A master pushed its addresses to this slave (906, the master's pre-online)."""

    master_addr: str | None
    ha_addr: str


@dataclass(frozen=True)
class SlaveFollowing:
    """This slave's HA client reached TRANSFER with its master (pre-online waits for it), after
    a handshake at which the master's log ended at `master_max` in epoch `master_epoch` (-1:
    not known)."""

    master_max: int = -1
    master_epoch: int = -1


@dataclass(frozen=True)
class ReverseSynced:
    """Pre-online: the metadata of slave `broker_id` was pulled back (or the pull failed)."""

    broker_id: int
    ok: bool


@dataclass(frozen=True)
class DataPlaneRequest:
    """A request the FMQ fence governs arrived (fenceWhenIsolated only): isolation is decided
    at its time, not at the last tick (the first request after a long stop may be handled
    before the tick; see `RoleCore._isolation_first`)."""


Event = (
    Started
    | Tick
    | LogGrew
    | DiskFull
    | IdAssigned
    | MasterInfo
    | EpochAppendFailed
    | MasterHaFound
    | ProposalAnswered
    | SlaveConnected
    | SlaveDisconnected
    | Transferring
    | SlaveIdle
    | SlaveAcked
    | NamesrvAnswered
    | MinBrokerChanged
    | MemberGroup
    | HaInfoPushed
    | MasterHaAnswered
    | MasterPushedHa
    | SlaveFollowing
    | ReverseSynced
    | DataPlaneRequest
)
