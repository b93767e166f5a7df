"""Deterministic simulation of one controller-mode broker group (issue 14).

One seed runs, in virtual time, a group of three replicas built from the REAL broker role core
(`RoleCore`, with `HaCore` inside), one controller, a producer and a consumer that commits
offsets (the REAL `ConsumerOffsetManager` on each replica, copied by slaves as
`copies_metadata` allows; see "consumer offsets" in `GroupSim`), under seeded faults:

* **Brokers.** Each replica feeds `RoleCore.step(event, now_ms)` exactly the events the Trio
  shell feeds (Started, IdAssigned, MasterInfo from register / elect / poll / notice, Tick,
  LogGrew, Slave* events, ProposalAnswered, MasterHaFound, EpochAppendFailed) and executes its
  actions the way `broker/io/role.py` and `broker/io/controller.py` do (AppendEpoch with the
  epoch file's rules, Follow, DropSlaves, SetConfirm, WakeProducers, RequestElection,
  ProposeSyncStateSet, FindMasterHa by asking the master, 906). Producers' writes are refused
  by `write_refusal()` and acknowledged when `HaCore.write_acked` says so (or answered
  FLUSH_SLAVE_TIMEOUT after `slave_timeout_ms`), as `handlers/send.py` does.
* **Storage.** An in-memory commitlog per replica (records with a write id standing for their
  bytes), a flushed offset that advances every flush interval, a checkpoint (confirm offset)
  every second, and an in-memory epoch file with the Rust `EpochFile`'s rules (append refuses
  an epoch not above the last or a start below the last start, replaces an entry at the same
  start; `truncate_suffix_by_*`; `reconcile`). Handshake truncation uses the REAL
  `broker.ha.core.consistent_point` (the native `find_consistent_point` and its one extra
  case); recovery uses the REAL `catch_up_after_recovery`.
* **Replication** follows `broker/ha/master.py` and `slave.py`: handshake (master's max offset
  and epoch entries), truncation, first ack, batches that never cross an epoch boundary with
  the epoch and the confirm offset in each header, heartbeats, acks of the max offset, a slave
  that hears nothing for `housekeeping_ms` reconnects. An HA connection is TCP-like: in order;
  a message that meets a partition or is lost kills the connection silently (the slave notices
  by its housekeeping timeout; the master keeps the stale connection until the slave
  reconnects, as the real master does).
* **The controller** is ONE reliable state machine (the real `ControllerState`, `requests.handle`,
  the election policy in `elect.py`, the real `HeartbeatTable` and `InvariantChecker`), reached
  over lossy, delayed, reordering messages. Raft itself is simulated elsewhere (`world.py`):
  here the controller never loses its state and never has two leaders. Like the real leader it
  expires heartbeats, re-elects when the master dies or reports a catch-up debt, scans for
  masterless groups, and pushes role-change notices.
* **Faults** (a seeded schedule, then a final heal): kill -9 (the page cache survives),
  power loss (the log is cut at a record boundary between its flushed offset and its end: a
  torn unflushed tail; the checkpoint's confirm offset and the epoch file survive), restarts,
  partitions (a node cut off both ways, or one direction only), message loss, delay and
  reordering, pauses (a stopped process: timers and deliveries wait), clock skew and drift
  (each broker's clock starts anywhere and runs up to 10% fast or slow). A powered-off
  machine is back no sooner than `power_restart_min_ms`. Each seed first kills, powers off,
  pauses or isolates the master once, to measure failover.

Invariants (`GroupViolation`), checked as the seed runs and at its end:

* **no acknowledged write is lost**: after the final heal, every acknowledged write is on the
  master at its offset with its bytes. Two losses docs/ha.md documents ("What the rule cannot
  save") are excused, exactly, and counted: (1) the single-copy window of
  `minInSyncReplicas=1` only: a write a master acknowledged while its effective SyncStateSet
  was itself alone, lost in that master's torn tail while no other replica held it
  (`single_copy_losses`); (2) in every configuration, writes a replica held and lost in a torn
  tail (acknowledged from memory, above its checkpointed confirm offset and its last epoch's
  start, so it owes no catch-up) when that replica is then elected without them
  (`torn_leader_losses`; docs/ha.md says it of slaves, the simulator shows it of returning
  masters and with `minInSyncReplicas=2` too: a strict xfail test pins that);
* **one broker acknowledges writes per epoch**;
* **SyncStateSet members hold the master's bytes below its confirm offset**: checked each time
  a master moves it (a member that lost the bytes in its own torn tail excepted, as above),
  and members are prefixes of the serving master below it every `check_every_ms`;
* **the confirm offset never goes back**: the bytes below the highest confirm offset any master
  published never change on a later master (forfeited only by the two excused losses), and a
  slave's handshake never cuts confirmed history;
* **liveness**: after the heal, a write is acknowledged within `liveness_ms`, also when the
  newly elected master lost its unflushed tail (issue 13). The one accepted end: with
  `minInSyncReplicas=1`, every member owes a catch-up to bytes lost in the single-copy window
  that no replica covers, so docs/ha.md's rule 4 keeps the group masterless until an operator
  acts (`masterless_by_rule`);
* **a consumer offset never goes backwards on the serving master** except by a consumer's
  own commit: not below what it held when it took over, nor below what it acknowledged as
  master earlier in the same incarnation;
* the controller's own invariants (`InvariantChecker`) after every apply.

Deliberate bugs (`BUGS`, `--group-bug`) monkeypatch one rule of the real code, to show the
checker catches each invariant's violation. Bugs of the real code the simulator found and that
are not fixed yet are `KNOWN_BUGS`: the seeds run with a workaround for each (`FIXES`;
`--no-fixes` runs without), and tests/test_group_sim.py pins each with a strict xfail.
Everything is pure: no wall clock (except to report how long a seed took), no threads, all
randomness from the seed's `random.Random`.
"""

from __future__ import annotations

import bisect
import heapq
import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

from rmq_ha.broker import offsets as offsets_mod
from rmq_ha.broker.core import actions as a
from rmq_ha.broker.core import events as e
from rmq_ha.broker.core.role import Role, RoleConfig, RoleCore
from rmq_ha.broker.ha.catchup import CatchUp, catch_up_after_recovery
from rmq_ha.broker.ha.core import HaCore, consistent_point
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.controller.elect import BrokerKey, scan_need_reelect
from rmq_ha.controller.events import ApplyBrokerIdEvent, ElectMasterEvent
from rmq_ha.controller.heartbeat import HeartbeatTable
from rmq_ha.controller.invariants import InvariantChecker
from rmq_ha.controller.messages import (
    AlterSyncStateSetRequest,
    ControllerConfig,
    ElectMasterRequest,
    ElectMasterResponse,
    GetReplicaInfoRequest,
    MasterInfo,
    RegisterBrokerRequest,
    Request,
    Response,
)
from rmq_ha.controller.requests import handle, stale_event_code
from rmq_ha.controller.state import ControllerState
from rmq_ha.protocol.headers import BrokerHeartbeatRequestHeader

CLUSTER = "sim"
GROUP = "broker-a"
CTL = "ctl"
CLIENT = "client"
#: A producer that hears nothing of a send for this long tries the next broker.
REQUEST_TIMEOUT_MS = 1500
#: The consumer's group, topic and queues (consumer offsets).
CGROUP, TOPIC, QUEUES = "cg", "T", (0, 1)
#: No file is ever read or written: offsets are persisted into the simulated disk.
_NO_FILE = Path("/nonexistent/rmq-ha-sim/consumerOffset.json")


class GroupViolation(Exception):
    """A broker-group invariant failed."""


class EpochConflict(Exception):
    """The epoch file refused an entry (the Rust EpochFile's EpochConflict)."""


# ---- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupConfig:
    replicas: int = 3
    min_in_sync_replicas: int = 1
    #: Virtual-time schedule: no faults before `warmup_ms`; the master fault at `warmup_ms`;
    #: random faults until `heal_ms`; then everything heals and the run goes on until a write
    #: is acknowledged and `settle_ms` more have passed (at most `liveness_ms` after the heal).
    warmup_ms: int = 1500
    heal_ms: int = 6000
    settle_ms: int = 1500
    liveness_ms: int = 15_000
    #: Mean gap between two random faults; False: only the master fault (a clean failover).
    fault_every_ms: int = 700
    random_faults: bool = True
    loss: float = 0.02
    #: Each broker's clock runs up to this much fast or slow (and starts anywhere).
    clock_drift: float = 0.1
    delay_ms: tuple[int, int] = (1, 15)
    reorder: float = 0.05
    produce_every_ms: int = 60
    #: Broker timing (ms).
    tick_ms: int = 100
    heartbeat_ms: int = 300
    heartbeat_timeout_ms: int = 1500
    scan_ms: int = 300
    poll_ms: int = 1000
    housekeeping_ms: int = 1000
    slave_timeout_ms: int = 1000
    max_not_catchup_ms: int = 3000
    check_period_ms: int = 1000
    flush_ms: int = 500
    checkpoint_ms: int = 1000
    batch_bytes: int = 1200
    check_every_ms: int = 200
    #: Consumer offsets: a commit every `commit_every_ms` to the controller's master, a
    #: slave's metadata sync every `metadata_sync_ms`, persisted every `offset_flush_ms`.
    commit_every_ms: int = 100
    #: The chance, per commit, that the consumer restarts and reads its offsets again.
    consumer_restart: float = 0.02
    metadata_sync_ms: int = 700
    offset_flush_ms: int = 500
    #: A powered-off machine is back after at least this long (None: as fast as a killed
    #: process, 200 ms). See `power_restart_ms`.
    power_restart_min_ms: int | None = 2500

    @classmethod
    def for_seed(cls, seed: int, rng: random.Random) -> GroupConfig:
        return cls(
            min_in_sync_replicas=1 + seed % 2,
            loss=rng.choice((0.0, 0.01, 0.05)),
            delay_ms=rng.choice(((1, 5), (1, 15), (5, 60))),
            reorder=rng.choice((0.0, 0.05, 0.2)),
            fault_every_ms=rng.choice((400, 700, 1200)),
            flush_ms=rng.choice((200, 500, 1000)),
            produce_every_ms=rng.choice((40, 80)),
        )


# ---- storage --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """One record: `wid` stands for its bytes (a write id, unique per producer write)."""

    start: int
    size: int
    wid: int

    @property
    def end(self) -> int:
        return self.start + self.size


class MemEpochs:
    """The epoch file in memory, with the Rust `EpochFile`'s rules (crates/rmq-store/epoch.rs);
    every change is durable at once, as there."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def last_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def append(self, epoch: int, start: int) -> None:
        nxt = list(self.entries)
        if nxt:
            last_epoch, last_start = nxt[-1]
            if epoch <= last_epoch:
                raise EpochConflict(
                    f"cannot append epoch {epoch} at {start}: not greater than the last epoch "
                    f"{last_epoch}"
                )
            if start < last_start:
                raise EpochConflict(
                    f"cannot append epoch {epoch} at {start}: below the start offset "
                    f"{last_start} of the last epoch {last_epoch}"
                )
        while nxt and nxt[-1][1] == start:
            nxt.pop()
        nxt.append((epoch, start))
        self.entries = nxt

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        self.entries = [x for x in self.entries if x[0] < epoch]

    def truncate_suffix_by_offset(self, offset: int) -> None:
        self.entries = [x for x in self.entries if x[1] < offset]

    def reconcile(self, max_offset: int) -> list[tuple[int, int]]:
        """Drops entries starting past the log's end (never the first); min offset is 0."""
        keep = max(sum(1 for _, s in self.entries if s <= max_offset), min(len(self.entries), 1))
        cut = self.entries[keep:]
        self.entries = self.entries[:keep]
        return cut

    def find_by_offset(self, offset: int) -> tuple[int, int, int] | None:
        after = bisect.bisect_right([s for _, s in self.entries], offset)
        if after == 0:
            return None
        epoch, start = self.entries[after - 1]
        end = self.entries[after][1] if after < len(self.entries) else 2**63
        return (epoch, start, end) if start <= offset < end else None


class MemLog:
    """A commitlog: contiguous records from offset 0."""

    def __init__(self) -> None:
        self.recs: list[Rec] = []
        self.starts: list[int] = []
        #: Bumped on every truncation (what was checked below some offset may have changed).
        self.version = 0

    @property
    def max(self) -> int:
        return self.recs[-1].end if self.recs else 0

    def append(self, rec: Rec) -> None:
        assert rec.start == self.max, (rec, self.max)
        self.recs.append(rec)
        self.starts.append(rec.start)

    def truncate(self, offset: int) -> list[Rec]:
        """Cuts at `offset` (a record boundary at or below max); returns what was cut."""
        i = bisect.bisect_left(self.starts, offset)
        cut = self.recs[i:]
        if cut:
            self.version += 1
        del self.recs[i:]
        del self.starts[i:]
        return cut

    def below(self, offset: int) -> list[Rec]:
        """The records wholly below `offset`."""
        i = bisect.bisect_right(self.starts, offset)
        out = self.recs[:i]
        while out and out[-1].end > offset:
            out.pop()
        return out

    def range(self, start: int, limit: int, max_bytes: int) -> list[Rec]:
        i = bisect.bisect_left(self.starts, start)
        out: list[Rec] = []
        n = 0
        while i < len(self.recs) and self.recs[i].end <= limit:
            r = self.recs[i]
            if out and n + r.size > max_bytes:
                break
            out.append(r)
            n += r.size
            i += 1
        return out

    def at(self, start: int) -> Rec | None:
        i = bisect.bisect_left(self.starts, start)
        if i < len(self.recs) and self.recs[i].start == start:
            return self.recs[i]
        return None

    def boundaries_between(self, lo: int, hi: int) -> list[int]:
        out = [r.end for r in self.recs if lo < r.end <= hi]
        return [lo, *out]


# ---- replicas -------------------------------------------------------------------------------


@dataclass
class Conn:
    """An HA connection (TCP-like: in order; dies silently when a message is lost)."""

    cid: int
    slave: int
    master: int
    alive: bool = True
    #: Master side, after the first ack: the next offset to send.
    pos: int | None = None
    last_hb_ms: int = 0
    #: Slave side: what it last acked, when it last heard from the master.
    acked: int = -1
    last_recv_ms: int = 0
    last_ack_ms: int = 0
    last_delivery: dict[str, int] = field(default_factory=dict)
    #: The incarnations of its two ends (a restarted process has none of its connections).
    incarnations: dict[str, int] = field(default_factory=dict)
    #: Slave side: the handshake is done (TRANSFER): periodic acks start.
    transferring: bool = False


@dataclass
class Pending:
    wid: int
    start: int
    end: int
    deadline_ms: int
    epoch: int
    #: The HaCore the write waits on (HaMaster.wait_acked gives up when it is replaced).
    ha: object = None


@dataclass
class Replica:
    bid: int
    # -- durable (survives crashes) --
    log: MemLog = field(default_factory=MemLog)
    epochs: MemEpochs = field(default_factory=MemEpochs)
    flushed: int = 0
    ckpt_confirm: int = 0
    catch_up: CatchUp | None = None
    # -- volatile --
    up: bool = False
    paused_until: int = 0
    #: A crashed replica restarts no earlier than this.
    back_at: int = 0
    #: (cut, old end) of its last torn tail, until its log is back at the old end: a slave
    #: acknowledges what it appended, not what it flushed (docs/ha.md), so it may lack bytes
    #: the master counted on it.
    torn: tuple[int, int] | None = None
    #: Records it lost in torn tails and has not received again, by write id.
    torn_lost: dict[int, Rec] = field(default_factory=dict)
    incarnation: int = 0
    core: RoleCore | None = None
    confirm: int = 0
    following: str | None = None
    slave_conn: Conn | None = None
    retry_at_ms: int = 0
    masters_conns: dict[int, Conn] = field(default_factory=dict)
    #: Every connection this replica accepted as master, also those still in the handshake
    #: (HaMaster's cancel scopes: DropSlaves and a crash end them all).
    accepted: list[Conn] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    running: bool = False
    token: object = field(default_factory=object)
    suspended: bool = False
    # -- consumer offsets: the REAL table, and what of it is persisted (survives crashes) --
    offsets: ConsumerOffsetManager | None = None
    offsets_disk: bytes | None = None
    #: While the serving master (this incarnation): the epoch it serves and per queue the least
    #: its table may hold (what it held when it took over, and every value since) ...
    mark: tuple[int, dict[int, int]] | None = None
    #: ... and, this incarnation, the largest offset it acknowledged while serving.
    own: dict[int, int] = field(default_factory=dict)

    #: Clock skew: this broker's clock starts at `clock_base` and runs at `clock_rate` (the
    #: role core only ever sees its own clock).
    clock_base: int = 0
    clock_rate: float = 1.0
    #: (incarnation, its clock) when the controller last answered one of its heartbeats, or
    #: when it sent its first one.
    answered: tuple[int, int] | None = None

    def clock(self, now: int) -> int:
        return self.clock_base + int(now * self.clock_rate)

    @property
    def name(self) -> str:
        return f"b{self.bid}"

    @property
    def addr(self) -> str:
        return f"10.0.0.{self.bid}:10911"

    @property
    def ha_addr(self) -> str:
        return f"10.0.0.{self.bid}:10912"


def _bid_of(addr: str | None) -> int | None:
    if addr is None:
        return None
    return int(addr.split(":")[0].rsplit(".", 1)[1])


# ---- results --------------------------------------------------------------------------------


@dataclass
class Acked:
    wid: int
    broker: int
    epoch: int
    start: int
    end: int
    #: When the broker acknowledged it.
    at_ms: int


@dataclass
class GroupResult:
    seed: int
    ok: bool = True
    error: str | None = None
    min_in_sync: int = 1
    sim_ms: int = 0
    wall_ms: float = 0.0
    events: int = 0
    acked: int = 0
    refused: int = 0
    timeouts: int = 0
    elections: int = 0
    crashes: int = 0
    torn: int = 0
    truncations: int = 0
    debts: int = 0
    single_copy_losses: int = 0
    torn_leader_losses: int = 0
    recovery_elections: int = 0
    #: The run ended masterless by rule 4 (see `GroupSim._uncoverable_debt`).
    masterless_by_rule: bool = False
    #: Virtual ms from the master fault to the first acknowledged write on a new master.
    failover_ms: int | None = None
    master_fault: str = ""
    #: Consumer offsets: commits the serving master took, slaves' metadata syncs applied,
    #: and takeovers checked (a new serving master's table against what it held).
    offset_commits: int = 0
    offset_syncs: int = 0
    offset_takeovers: int = 0
    trace: list[str] = field(default_factory=list)


# ---- deliberate bugs --------------------------------------------------------------------------


def _patch(target: Any, name: str, new: Any) -> Callable[[], Any]:
    return lambda: mock.patch.object(target, name, new)


def _ack_ignores_replication(self: Any, offset: int) -> bool:
    return True


def _confirm_ignores_acks(self: Any, master_max: int) -> int:
    self.confirm = max(self.confirm, master_max)
    return int(self.confirm)


def _lead_keeps_old_epoch() -> Any:
    original = RoleCore._lead

    def lead(self: RoleCore, m: e.MasterInfo, out: list[a.Action]) -> None:
        original(self, m, out)
        if self.state.role is Role.MASTER and m.epoch is not None and m.epoch > 1:
            self.state.epoch = m.epoch - 1  # a new master that says it is still the old epoch

    return mock.patch.object(RoleCore, "_lead", lead)


def _elect_ignores_catch_up() -> Any:
    from rmq_ha.controller.elect import BrokerLiveInfo

    stack = ExitStack()
    stack.enter_context(
        mock.patch.object(BrokerLiveInfo, "electable", property(lambda self: self.alive))
    )
    return stack


def _sync_overwrites_own_commits() -> Any:
    """A slave's metadata sync takes its master's table whole, also over the commits it
    acknowledged itself as master before it was demoted (the master may lack them)."""
    orig = ConsumerOffsetManager.merge_from_json

    def merge(self: ConsumerOffsetManager, raw: bytes) -> None:
        self._local = False
        orig(self, raw)

    return mock.patch.object(ConsumerOffsetManager, "merge_from_json", merge)


#: name -> (context manager factory, what it breaks)
BUGS: dict[str, tuple[Callable[[], Any], str]] = {
    "ack-ignores-replication": (
        _patch(
            HaCore,
            "write_acked",
            _ack_ignores_replication,
        ),
        "producers acknowledged before the SyncStateSet holds the write",
    ),
    "confirm-ignores-acks": (
        _patch(
            HaCore,
            "recompute_confirm",
            _confirm_ignores_acks,
        ),
        "the confirm offset follows the master's max offset whatever the members acked",
    ),
    "lead-keeps-old-epoch": (
        _lead_keeps_old_epoch,
        "a new master keeps accepting writes under the previous master epoch",
    ),
    "skip-truncation": (
        lambda: mock.patch(f"{__name__}._SKIP_TRUNCATION", True),
        "a slave keeps its log at the handshake instead of cutting it to the consistent point",
    ),
    "over-truncation": (
        lambda: mock.patch(f"{__name__}._OVER_TRUNCATE", True),
        "a slave cuts its log back to the start of the last common epoch, not to the "
        "consistent point",
    ),
    "elect-ignores-catch-up": (
        _elect_ignores_catch_up,
        "the controller elects replicas that owe a catch-up (issue 13's crash loop)",
    ),
    "sync-overwrites-own-commits": (
        _sync_overwrites_own_commits,
        "a demoted master's metadata sync drops the consumer offsets it acknowledged",
    ),
}
_SKIP_TRUNCATION = False
_OVER_TRUNCATE = False


#: Known bugs of the real code the simulator found, with the change that avoids each. The main
#: seeds run with these applied (`FIXES`); `tests/test_group_sim.py` keeps a strict xfail test
#: per bug that runs a failing seed WITHOUT its fix, so the day the real code is fixed the
#: test says so and the fix here must go.
KNOWN_BUGS: dict[str, tuple[Callable[[], Any], str]] = {}
FIXES = tuple(KNOWN_BUGS)


# ---- the simulation -------------------------------------------------------------------------


class GroupSim:
    def __init__(
        self,
        seed: int,
        cfg: GroupConfig | None = None,
        *,
        trace: bool = False,
        script: list[tuple[int, str, int]] | None = None,
        clean: bool = False,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(f"group-{seed}")
        self.cfg = cfg if cfg is not None else GroupConfig.for_seed(seed, self.rng)
        if clean:
            self.cfg = replace(self.cfg, random_faults=False)
        self.tracing = trace
        self.now = 0
        self._q: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.result = GroupResult(seed, min_in_sync=self.cfg.min_in_sync_replicas)
        self.replicas = {i: Replica(i) for i in range(1, self.cfg.replicas + 1)}
        for r in self.replicas.values():
            r.clock_base = self.rng.randint(0, 10**9)
            r.clock_rate = self.rng.uniform(1 - self.cfg.clock_drift, 1 + self.cfg.clock_drift)
        self.role_cfg = RoleConfig(
            controller_mode=True,
            all_ack=True,
            min_in_sync_replicas=self.cfg.min_in_sync_replicas,
            max_not_catchup_ms=self.cfg.max_not_catchup_ms,
            check_sync_state_set_period_ms=self.cfg.check_period_ms,
        )
        # The controller: one reliable state machine.
        self.state = ControllerState()
        self.live = HeartbeatTable(now_ms=lambda: self.now)
        self.invariants = InvariantChecker()
        self.policy = ControllerConfig()
        # Faults.
        self.blocked: set[tuple[str, str]] = set()
        self.healed = False
        self.loss = self.cfg.loss
        self.script = script
        # Producer and checker state.
        self.next_wid = 1
        self.target = 1
        self.acked: dict[int, Acked] = {}
        self.answered: set[int] = set()
        self.acker_of_epoch: dict[int, int] = {}
        self.excused: set[int] = set()
        #: Writes a master acknowledged while its effective SyncStateSet was itself alone.
        self.alone: set[int] = set()
        #: The group's confirmed history: every record below the highest confirm offset any
        #: master published (the bytes a confirm offset made visible).
        self.history: list[Rec] = []
        self.history_starts: list[int] = []
        self.history_end = 0
        #: Per replica: (log version, offset) below which its log was checked against it.
        self.verified: dict[int, tuple[int, int]] = {}
        self.fault_at: int | None = None
        self.fault_epoch = 0
        #: The first acknowledgement after the heal.
        self.live_at: int | None = None
        self.cid = 0
        self.elect_retry = 0
        # The consumer: its own draws, so that modelling it left every other draw (and so the
        # seeds that found earlier bugs) as it was.
        self.crng = random.Random(f"group-consumer-{seed}")
        self.arng = random.Random(f"group-heartbeat-answers-{seed}")
        self.next_offset = dict.fromkeys(QUEUES, 0)
        #: Per consumer-offset link: the last sequence number sent, the last delivered, and
        #: those that arrived early.
        self.cseq: dict[tuple[str, str], int] = {}
        self.cnext: dict[tuple[str, str], int] = {}
        self.cheld: dict[tuple[str, str], dict[int, tuple[Callable[..., None], tuple[Any, ...]]]]
        self.cheld = {}
        # Issue 13: seeded ids, as if GET_NEXT_BROKER_ID / APPLY_BROKER_ID had run.
        for r in self.replicas.values():
            ok = self.state.apply(
                ApplyBrokerIdEvent(CLUSTER, GROUP, r.bid, r.addr, f"{r.addr};{r.bid}")
            )
            assert ok
        self.invariants.observe(self.state, CTL)

    # ---- plumbing -------------------------------------------------------------------------

    def at(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, args))

    def log(self, text: str) -> None:
        if self.tracing:
            self.result.trace.append(f"{self.now:>7} {text}")

    def _delay(self, rng: random.Random | None = None) -> int:
        rng = rng or self.rng
        lo, hi = self.cfg.delay_ms
        d = rng.randint(lo, hi)
        if rng.random() < self.cfg.reorder:
            d += rng.randint(0, 200)
        return d

    def send(self, src: str, dst: str, fn: Callable[..., None], *args: Any) -> None:
        """A lossy, delayed, reordering message (RPCs, heartbeats, notices)."""
        self.send_with(self.rng, src, dst, fn, *args)

    def send_with(
        self, rng: random.Random, src: str, dst: str, fn: Callable[..., None], *args: Any
    ) -> None:
        """`send`, its loss and delay drawn from `rng`."""
        if (src, dst) in self.blocked or rng.random() < self.loss:
            return
        self.at(self.now + self._delay(rng), self._deliver, dst, fn, args)

    def _deliver(self, dst: str, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if dst.startswith("b"):
            r = self.replicas[int(dst[1:])]
            if not r.up:
                return
            if r.paused_until > self.now:
                self.at(min(r.paused_until, self.now + 100), self._deliver, dst, fn, args)
                return
        fn(*args)

    def conn_send(self, conn: Conn, to_master: bool, fn: Callable[..., None], *args: Any) -> None:
        """An HA message: in order; a lost or partitioned one kills the connection."""
        if not conn.alive:
            return
        src, dst = (f"b{conn.slave}", f"b{conn.master}")
        if not to_master:
            src, dst = dst, src
        if (src, dst) in self.blocked or self.rng.random() < self.loss / 4:
            conn.alive = False
            return
        t = max(self.now + self._delay() % 20 + 1, conn.last_delivery.get(dst, 0))
        conn.last_delivery[dst] = t
        self.at(t, self._conn_deliver, conn, dst, fn, args)

    def _conn_deliver(
        self, conn: Conn, dst: str, fn: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        if not conn.alive:
            return
        r = self.replicas[int(dst[1:])]
        if not r.up or conn.incarnations.get(dst) != r.incarnation:
            conn.alive = False  # reset: that process is gone
            return
        if r.paused_until > self.now:
            self.at(min(r.paused_until, self.now + 100), self._conn_deliver, conn, dst, fn, args)
            return
        fn(*args)

    def _timer(self, r: Replica, inc: int, fn: Callable[..., None], *args: Any) -> None:
        if not r.up or r.incarnation != inc:
            return
        if r.paused_until > self.now:
            self.at(min(r.paused_until, self.now + 100), self._timer, r, inc, fn, *args)
            return
        fn(*args)

    # ---- running --------------------------------------------------------------------------

    def run(self) -> GroupResult:
        started = time.perf_counter()
        res = self.result
        try:
            # DataVersion timestamps: virtual time.
            with mock.patch.object(offsets_mod, "_now_ms", lambda: 1_700_000_000_000 + self.now):
                self._run()
        except (GroupViolation, AssertionError) as exc:
            res.ok = False
            res.error = f"{type(exc).__name__}: {exc}"
            self.log(f"FAILED {res.error}")
        res.sim_ms = self.now
        res.wall_ms = (time.perf_counter() - started) * 1000
        return res

    def _run(self) -> None:
        cfg = self.cfg
        for r in self.replicas.values():
            self.at(self.rng.randint(0, 200), self._restart, r)
        self.at(cfg.scan_ms, self._ctl_scan)
        self.at(100, self._produce)
        self.at(150, self._commit_loop)
        self.at(cfg.check_every_ms, self._check_tick)
        if self.script is None:
            self.at(cfg.warmup_ms, self._master_fault)
            t = cfg.warmup_ms + self.rng.randint(100, cfg.fault_every_ms * 2)
            while t < cfg.heal_ms and cfg.random_faults:
                self.at(t, self._random_fault)
                t += self.rng.randint(cfg.fault_every_ms // 2, cfg.fault_every_ms * 3 // 2)
        else:
            for t, what, bid in self.script:
                self.at(t, self._scripted, what, bid)
        self.at(cfg.heal_ms, self._heal)
        deadline = cfg.heal_ms + cfg.liveness_ms
        while self._q:
            t, _, fn, args = heapq.heappop(self._q)
            self.now = t
            self.result.events += 1
            fn(*args)
            if (
                self.live_at is not None
                and self.now > self.live_at + cfg.settle_ms
                and self._serving_master() is not None
            ):
                break
            if self.now > deadline:
                if self._uncoverable_debt():
                    self.result.masterless_by_rule = True
                    self.log("masterless: every member owes bytes no replica holds (rule 4)")
                    return
                raise GroupViolation(
                    f"liveness: no write acknowledged within {cfg.liveness_ms} ms of the heal "
                    f"at {cfg.heal_ms} ({self._describe()})"
                )
        self._final_check()

    def _uncoverable_debt(self) -> bool:
        """The documented dead end of the single-copy window (minInSyncReplicas=1): the
        SyncStateSet's members are all alive and owe a catch-up to bytes that were only on a
        master that lost them, so no replica covers them and nobody may be elected
        (docs/ha.md, "Who may be elected", rule 4) until an operator decides."""
        bs = self.state.get(GROUP)
        if self.cfg.min_in_sync_replicas != 1 or not self.excused or bs is None:
            return False
        if bs.master_broker_id is not None:
            return False
        view = self.live.view()
        members = [view.get(BrokerKey(CLUSTER, GROUP, i)) for i in bs.sync_state_set]
        if any(m is None or m.catch_up_offset is None for m in members):
            return False
        return not any(
            info.electable and all(info.covers(m) for m in members if m is not None)
            for info in view.values()
        )

    def _describe(self) -> str:
        bs = self.state.get(GROUP)
        parts = [
            f"controller master {bs.master_broker_id if bs else None} epoch "
            f"{bs.master_epoch if bs else 0} set {sorted(bs.sync_state_set) if bs else []}"
        ]
        for r in self.replicas.values():
            c = r.core
            parts.append(
                f"b{r.bid}: up={r.up} role={c.state.role.value if c else '-'} "
                f"epoch={c.state.epoch if c else '-'} fence={c.state.fence if c else '-'!r} "
                f"max={r.log.max} epochs={r.epochs.entries} debt={r.catch_up}"
            )
        return "; ".join(parts)

    # ---- faults ---------------------------------------------------------------------------

    def _current_master(self) -> Replica | None:
        bs = self.state.get(GROUP)
        if bs is None or bs.master_broker_id is None:
            return None
        return self.replicas[bs.master_broker_id]

    def _master_fault(self) -> None:
        m = self._current_master()
        if m is None or not m.up:
            return
        what = self.rng.choice(("kill", "power", "power", "pause", "isolate"))
        self.result.master_fault = what
        self.fault_at = self.now
        bs = self.state.get(GROUP)
        self.fault_epoch = bs.master_epoch if bs else 0
        self._apply_fault(what, m)

    def _random_fault(self) -> None:
        rng = self.rng
        what = rng.choice(
            ("kill", "power", "power", "restart", "restart", "pause", "isolate", "oneway", "heal")
        )
        r = self.replicas[rng.randint(1, self.cfg.replicas)]
        if rng.random() < 0.4:
            r = self._current_master() or r
        self._apply_fault(what, r)

    def _scripted(self, what: str, bid: int) -> None:
        """A scripted fault on broker `bid`; 0: the controller's master; -k: the k-th replica
        by id other than the controller's master."""
        if bid < 0:
            m = self._current_master()
            others = sorted(i for i in self.replicas if m is None or i != m.bid)
            bid = others[-bid - 1]
        if bid == 0:
            m = self._current_master()
            if m is None:
                return
            bid = m.bid
            if self.fault_at is None:
                self.fault_at = self.now
                bs = self.state.get(GROUP)
                self.fault_epoch = bs.master_epoch if bs else 0
                self.result.master_fault = what
        self._apply_fault(what, self.replicas[bid])

    def _apply_fault(self, what: str, r: Replica) -> None:
        rng = self.rng
        self.log(f"FAULT {what} b{r.bid}")
        if what in ("kill", "power", "power-flushed"):
            if r.up:
                self._crash(r, torn=what != "kill", to_flushed=what == "power-flushed")
                what = "kill" if what == "kill" else "power"
                lo = 200
                if what == "power" and self.cfg.power_restart_min_ms is not None:
                    lo = self.cfg.power_restart_min_ms
                r.back_at = self.now + lo
                self.at(self.now + rng.randint(lo, lo + 2300), self._restart, r)
        elif what == "restart":
            if not r.up and self.now >= r.back_at:
                self._restart(r)
        elif what == "pause":
            if r.up:
                r.paused_until = max(r.paused_until, self.now + rng.randint(300, 3000))
        elif what == "isolate":
            others = [CTL, CLIENT, *(f"b{i}" for i in self.replicas if i != r.bid)]
            for o in others:
                self.blocked.add((r.name, o))
                self.blocked.add((o, r.name))
        elif what == "oneway":
            others = [CTL, CLIENT, *(f"b{i}" for i in self.replicas if i != r.bid)]
            o = rng.choice(others)
            self.blocked.add((r.name, o) if rng.random() < 0.5 else (o, r.name))
        elif what == "deaf":
            # Scripts only: the controller's messages stop reaching `r`, its own reach it.
            self.blocked.add((CTL, r.name))
        elif what == "mute":
            # Scripts only: `r`'s messages stop reaching the controller, its own reach `r`.
            self.blocked.add((r.name, CTL))
        elif what == "heal":
            self.blocked.clear()

    def _heal(self) -> None:
        self.log("HEAL")
        self.healed = True
        self.blocked.clear()
        self.loss = 0.0
        for r in self.replicas.values():
            r.paused_until = min(r.paused_until, self.now)
            if not r.up:
                self.at(max(self.now, r.back_at), self._restart, r)

    def _crash(self, r: Replica, torn: bool, to_flushed: bool = False) -> None:
        res = self.result
        res.crashes += 1
        r.up = False
        r.incarnation += 1
        # The connections' peers notice a killed process (RST), not a powered-off machine.
        if r.slave_conn is not None:
            self._close_conn(r.slave_conn, notify_master=not torn)
        for conn in r.accepted:
            conn.alive = False
        r.accepted.clear()
        r.masters_conns.clear()
        r.slave_conn = None
        r.pending.clear()
        if not torn and (r.name, CTL) not in self.blocked:
            token = r.token
            self.at(self.now + self._delay(), self._ctl_conn_closed, token)
        if torn:
            cut_to = r.flushed
            if not to_flushed:
                cut_to = self.rng.choice(r.log.boundaries_between(r.flushed, r.log.max))
            lost = r.log.truncate(cut_to)
            if lost:
                r.torn = (cut_to, lost[-1].end)
                for rec in lost:
                    r.torn_lost[rec.wid] = rec
                res.torn += 1
                self.log(f"b{r.bid} lost its tail [{cut_to}, {lost[-1].end})")
                self._lost_tail(r, lost)
        r.flushed = r.log.max
        r.core = None
        r.running = False
        # What it committed since its last flush of the offsets is gone (documented).
        r.offsets, r.mark, r.own = None, None, {}

    def _lost_tail(self, r: Replica, lost: list[Rec]) -> None:
        """A torn tail: the documented single-copy window (minInSyncReplicas=1 only) is the
        loss of writes this master acknowledged alone that no other replica holds."""
        single = []
        for rec in lost:
            held = any(
                (o := other.log.at(rec.start)) is not None and o.wid == rec.wid
                for other in self.replicas.values()
                if other is not r
            )
            if not held:
                single.append(rec)
        if not single:
            return
        if self.cfg.min_in_sync_replicas == 1:
            excused = [rec for rec in single if rec.wid in self.alone]
            for rec in excused:
                self.excused.add(rec.wid)
            if excused:
                self.result.single_copy_losses += sum(1 for x in excused if x.wid in self.acked)
                first = excused[0].start
                if first < self.history_end:
                    self._forfeit_history(first)

    def _forfeit_history(self, offset: int) -> None:
        i = bisect.bisect_left(self.history_starts, offset)
        del self.history[i:]
        del self.history_starts[i:]
        self.verified.clear()
        self.history_end = self.history[-1].end if self.history else 0
        self.log(f"confirmed history forfeited from {offset} (single-copy window)")

    def _restart(self, r: Replica) -> None:
        if r.up:
            return
        r.up = True
        r.paused_until = 0
        r.token = object()
        r.following = None
        r.suspended = False
        # Recovery (HaService.recover): the debt first, then the epoch file cut to the log.
        clamped = r.ckpt_confirm if r.ckpt_confirm > r.log.max else None
        before = list(r.epochs.entries)
        debt = catch_up_after_recovery(before, r.log.max, clamped, r.catch_up)
        if debt is not None and r.catch_up is None:
            self.result.debts += 1
        r.catch_up = debt
        cut = r.epochs.reconcile(r.log.max)
        r.confirm = min(r.ckpt_confirm, r.log.max)
        self.log(
            f"RESTART b{r.bid}: max {r.log.max} epochs {r.epochs.entries} cut {cut} debt {debt}"
        )
        self._boot(r)

    def _boot(self, r: Replica) -> None:
        inc = r.incarnation
        r.core = RoleCore(self.role_cfg, r.catch_up)
        last_epoch, last_start = r.epochs.entries[-1] if r.epochs.entries else (None, 0)
        self._step(r, e.Started(r.addr, r.log.max, r.confirm, last_epoch, last_start))
        self._step(r, e.IdAssigned(r.bid))
        self._register(r, inc)
        self.at(self.now + self.cfg.tick_ms, self._timer, r, inc, self._tick, r, inc)
        self.at(self.now + self.cfg.flush_ms, self._timer, r, inc, self._flush, r, inc)
        self.at(self.now + self.cfg.checkpoint_ms, self._timer, r, inc, self._checkpoint, r, inc)
        r.offsets = ConsumerOffsetManager(_NO_FILE)
        if r.offsets_disk is not None:
            r.offsets.load_json(r.offsets_disk)
        for period, fn in (
            (self.cfg.offset_flush_ms, self._persist_offsets),
            (self.cfg.metadata_sync_ms, self._metadata_sync),
        ):
            self.at(self.now + period, self._timer, r, inc, fn, r, inc, period)

    def _flush(self, r: Replica, inc: int) -> None:
        r.flushed = r.log.max
        self.at(self.now + self.cfg.flush_ms, self._timer, r, inc, self._flush, r, inc)

    def _checkpoint(self, r: Replica, inc: int) -> None:
        r.ckpt_confirm = r.confirm
        self.at(self.now + self.cfg.checkpoint_ms, self._timer, r, inc, self._checkpoint, r, inc)

    # ---- the role core and its actions ------------------------------------------------------

    def _step(self, r: Replica, event: e.Event) -> None:
        assert r.core is not None
        was_master = r.core.is_master
        actions = r.core.step(event, r.clock(self.now))
        if not was_master and r.core.is_master and r.torn_lost:
            self._torn_leader(r)
        self._run_actions(r, actions)

    def _torn_leader(self, r: Replica) -> None:
        """The documented limit of issue 13's rule (docs/ha.md, "What the rule cannot
        save"): a replica acknowledges what it appended, not what it flushed, and owes a
        catch-up only below its last epoch's start and its checkpointed confirm offset. If it
        lost acknowledged bytes above both in a power loss and is then elected, those writes
        are lost. Counted in `torn_leader_losses`; excused in every configuration."""
        first = None
        for wid, rec in r.torn_lost.items():
            have = r.log.at(rec.start)
            if have is not None and have.wid == wid:
                continue
            if wid not in self.excused:
                self.excused.add(wid)
                if wid in self.acked:
                    self.result.torn_leader_losses += 1
            first = rec.start if first is None else min(first, rec.start)
        if first is not None:
            self.log(f"b{r.bid} leads without bytes it lost in a torn tail (from {first})")
            if first < self.history_end:
                self._forfeit_history(first)

    def _run_actions(self, r: Replica, actions: list[a.Action]) -> None:
        for act in actions:
            if r.core is None:
                return
            if isinstance(act, a.AppendEpoch):
                try:
                    r.epochs.truncate_suffix_by_epoch(act.epoch)
                    r.epochs.append(act.epoch, act.start)
                except EpochConflict as exc:
                    last, start = r.epochs.entries[-1] if r.epochs.entries else (None, 0)
                    self.log(f"b{r.bid} epoch {act.epoch} at {act.start} refused: {exc}")
                    self._step(r, e.EpochAppendFailed(act.epoch, str(exc), last, start))
                    return
                continue
            self._execute(r, act)

    def _execute(self, r: Replica, act: a.Action) -> None:
        inc = r.incarnation
        match act:
            case a.Log():
                self.log(f"b{r.bid}: {act.text}")
            case a.Follow():
                self._follow(r, act.ha_addr)
            case a.DropSlaves():
                # The connections' tasks end later and report SlaveDisconnected then.
                for conn in r.accepted:
                    self._close_conn(conn, notify_master=False, notify_slave=True)
                    self.at(self.now, self._timer, r, inc, self._master_lost, r, conn)
                r.accepted.clear()
            case a.SetConfirm():
                self._set_confirm(r, act.offset)
            case a.WakeProducers():
                self._wake_producers(r)
            case a.ClearCatchUp():
                r.catch_up = None
            case a.RequestElection():
                self.result.elections += 1
                req = ElectMasterRequest.of_broker_trigger(CLUSTER, GROUP, r.bid)
                self._rpc(r, inc, req, lambda resp: self._on_elect(r, resp))
            case a.ProposeSyncStateSet():
                self._propose(r, inc, act)
            case a.FindMasterHa():
                self._find_master_ha(r, inc, act.master_addr, act.epoch, 20)
            case _:
                pass  # name servers, special services, topics: not modelled

    # ---- controller client (broker/io/controller.py) -----------------------------------------

    def _rpc(
        self,
        r: Replica,
        inc: int,
        req: Request,
        on_response: Callable[[Any], None],
        on_timeout: Callable[[], None] | None = None,
    ) -> None:
        done = [False]

        def answer(resp: Response) -> None:
            if done[0] or not r.up or r.incarnation != inc:
                return
            done[0] = True
            on_response(resp)

        def expired() -> None:
            if not done[0]:
                done[0] = True
                if on_timeout is not None:
                    on_timeout()

        self.send(r.name, CTL, self._ctl_request, r.name, req, answer)
        if on_timeout is not None:
            self.at(self.now + 1500, self._timer, r, inc, expired)

    def _register(self, r: Replica, inc: int) -> None:
        req = RegisterBrokerRequest(CLUSTER, GROUP, r.bid, r.addr, f"{r.addr};{r.bid}")

        def registered(resp: Any) -> None:
            if r.running:
                return
            if not resp.ok:
                self.at(self.now + 1000, self._timer, r, inc, self._register, r, inc)
                return
            r.running = True
            self._heartbeat(r, inc)
            self._master_info(r, resp, "register")
            self.at(self.now + self.cfg.poll_ms, self._timer, r, inc, self._poll, r, inc)

        def retry() -> None:
            if not r.running:
                self._register(r, inc)

        self._rpc(r, inc, req, registered, retry)

    def _master_info(self, r: Replica, info: MasterInfo, source: str) -> None:
        self._step(r, e.MasterInfo.of(info, source))

    def _on_elect(self, r: Replica, resp: Any) -> None:
        if resp.ok or resp.master_broker_id is not None:
            self._master_info(r, resp, "elect")

    def _heartbeat(self, r: Replica, inc: int) -> None:
        assert r.core is not None
        s = r.core.state
        debt = s.catch_up
        h = BrokerHeartbeatRequestHeader(
            cluster_name=CLUSTER,
            broker_addr=r.addr,
            broker_name=GROUP,
            broker_id=r.bid,
            epoch=r.epochs.last_epoch() or 0,
            max_offset=s.log_max,
            confirm_offset=s.confirm,
            heartbeat_timeout_mills=self.cfg.heartbeat_timeout_ms,
            catch_up_offset=None if debt is None else debt.offset,
            catch_up_epoch=None if debt is None else debt.epoch,
        )
        local = r.clock(self.now)
        if r.answered is None or r.answered[0] != inc:
            r.answered = (inc, local)
        h.unanswered_ms = local - r.answered[1]
        self.send(r.name, CTL, self._ctl_heartbeat, h, r.token, r, inc)
        self.at(self.now + self.cfg.heartbeat_ms, self._timer, r, inc, self._heartbeat, r, inc)

    def _poll(self, r: Replica, inc: int) -> None:
        def polled(resp: Any) -> None:
            if resp.ok:
                self._master_info(r, resp, "poll")

        self._rpc(r, inc, GetReplicaInfoRequest(GROUP), polled)
        self.at(self.now + self.cfg.poll_ms, self._timer, r, inc, self._poll, r, inc)

    def _propose(self, r: Replica, inc: int, act: a.ProposeSyncStateSet) -> None:
        req = AlterSyncStateSetRequest(
            GROUP, r.bid, act.master_epoch, act.members, act.sync_state_set_epoch
        )

        def answered(resp: Any) -> None:
            if resp.ok and resp.new_sync_state_set_epoch is not None:
                ev = e.ProposalAnswered(
                    True,
                    members=frozenset(resp.sync_state_set),
                    sync_state_set_epoch=resp.new_sync_state_set_epoch,
                )
            else:
                ev = e.ProposalAnswered(accepted=False)
            self._step(r, ev)

        self._rpc(
            r,
            inc,
            req,
            answered,
            lambda: self._step(r, e.ProposalAnswered(accepted=False, unknown=True)),
        )

    def _find_master_ha(
        self, r: Replica, inc: int, master_addr: str, epoch: int, wait: int
    ) -> None:
        """RoleShell._find_master_ha: ask the master (906) until this slave follows."""
        c = r.core
        if c is None or r.incarnation != inc:
            return
        s = c.state
        if not (s.role is Role.SLAVE and s.epoch == epoch and s.following is None):
            return
        mbid = _bid_of(master_addr)
        if mbid is not None:
            m = self.replicas[mbid]

            def ask() -> None:
                if m.core is not None and m.core.is_master:
                    self.send(m.name, r.name, found, m.ha_addr)

            def found(ha: str) -> None:
                if r.incarnation == inc and r.core is not None:
                    self._step(r, e.MasterHaFound(epoch, ha))

            self.send(r.name, m.name, ask)
        nxt = min(wait * 2, 300)
        self.at(
            self.now + wait,
            self._timer,
            r,
            inc,
            self._find_master_ha,
            r,
            inc,
            master_addr,
            epoch,
            nxt,
        )

    # ---- the controller (one reliable state machine) -----------------------------------------

    def _ctl_apply(self, result: Any) -> Response:
        response: Response = result.response
        for event in result.events:
            if not self.state.apply(event):
                return Response(code=stale_event_code(event), remark="stale event")
            self.invariants.observe(self.state, CTL)
            if isinstance(event, ElectMasterEvent):
                self.result.recovery_elections += event.recovery
                self.log(
                    f"ctl: elected {event.new_master_broker_id} epoch {event.master_epoch}"
                    f"{' (recovery)' if event.recovery else ''}"
                )
        return response

    def _ctl_request(self, src: str, req: Request, answer: Callable[[Response], None]) -> None:
        result = handle(self.state, req, self.live.view(), self.policy)
        resp = self._ctl_apply(result)
        if isinstance(req, ElectMasterRequest):
            self._after_elect(resp)
        self.send(CTL, src, answer, resp)

    def _ctl_heartbeat(
        self, h: BrokerHeartbeatRequestHeader, token: object, r: Replica, inc: int
    ) -> None:
        self.live.on_heartbeat(h, token)
        # Its own draws, like the consumer's: modelling the answers left every other draw
        # (and so the seeds that found earlier bugs) as it was.
        self.send_with(self.arng, CTL, r.name, self._heartbeat_answered, r, inc)
        if h.catch_up_offset is not None:
            assert h.broker_id is not None
            self._on_broker_inactive(h.broker_id)

    def _heartbeat_answered(self, r: Replica, inc: int) -> None:
        if r.incarnation == inc:
            r.answered = (inc, r.clock(self.now))

    def _ctl_conn_closed(self, token: object) -> None:
        for key in self.live.drop_connection(token):
            self._on_broker_inactive(key.broker_id)

    def _on_broker_inactive(self, bid: int) -> None:
        bs = self.state.get(GROUP)
        if bs is not None and bs.master_broker_id == bid:
            self._ctl_elect()

    def _ctl_elect(self) -> None:
        req = ElectMasterRequest.of_controller_trigger(GROUP)
        resp = self._ctl_apply(handle(self.state, req, self.live.view(), self.policy))
        self._after_elect(resp)

    def _after_elect(self, resp: Response) -> None:
        if not resp.ok or not isinstance(resp, ElectMasterResponse):
            return
        for bid in resp.broker_addrs:
            if self.live.is_alive(BrokerKey(CLUSTER, GROUP, bid)):
                r = self.replicas[bid]
                self.send(CTL, r.name, self._notice, r, r.incarnation, resp)

    def _notice(self, r: Replica, inc: int, resp: ElectMasterResponse) -> None:
        if r.incarnation != inc or r.core is None or not r.running:
            return
        self._master_info(r, resp, "notice")

    def _ctl_scan(self) -> None:
        for key in self.live.expire():
            self._on_broker_inactive(key.broker_id)
        if scan_need_reelect(self.state, self.live.view()):
            self._ctl_elect()
        self.at(self.now + self.cfg.scan_ms, self._ctl_scan)

    # ---- replication -------------------------------------------------------------------------

    def _follow(self, r: Replica, ha_addr: str | None) -> None:
        if r.slave_conn is not None:
            self._close_conn(r.slave_conn, notify_master=True)
            r.slave_conn = None
        r.following = ha_addr
        r.suspended = False
        if ha_addr is not None:
            self._connect(r)

    def _close_conn(self, conn: Conn, notify_master: bool, notify_slave: bool = False) -> None:
        if not conn.alive:
            return
        conn.alive = False
        m, s = self.replicas[conn.master], self.replicas[conn.slave]
        if notify_master and (s.name, m.name) not in self.blocked:
            self.at(self.now + self._delay(), self._deliver, m.name, self._master_lost, (m, conn))
        if notify_slave and (m.name, s.name) not in self.blocked:
            self.at(self.now + self._delay(), self._deliver, s.name, self._slave_lost, (s, conn))

    def _master_lost(self, m: Replica, conn: Conn) -> None:
        if m.masters_conns.get(conn.slave) is conn and m.core is not None:
            del m.masters_conns[conn.slave]
            self._step(m, e.SlaveDisconnected(conn.slave))

    def _slave_lost(self, s: Replica, conn: Conn) -> None:
        if s.slave_conn is conn:
            s.slave_conn = None
            s.retry_at_ms = self.now + 1000

    def _connect(self, r: Replica) -> None:
        mbid = _bid_of(r.following)
        assert mbid is not None
        self.cid += 1
        conn = Conn(self.cid, r.bid, mbid, last_recv_ms=self.now, last_ack_ms=self.now)
        r.slave_conn = conn
        m = self.replicas[mbid]
        if not m.up:
            conn.alive = False
            return
        conn.incarnations = {r.name: r.incarnation, m.name: m.incarnation}
        self.conn_send(conn, True, self._m_handshake, m, conn)

    def _m_handshake(self, m: Replica, conn: Conn) -> None:
        if m.core is None or not m.core.is_master:
            self._close_conn(conn, notify_master=False, notify_slave=True)
            return
        m.accepted = [c for c in m.accepted if c.alive]
        m.accepted.append(conn)
        self.conn_send(
            conn,
            False,
            self._s_handshake,
            self.replicas[conn.slave],
            conn,
            m.log.max,
            list(m.epochs.entries),
        )

    def _s_handshake(
        self, s: Replica, conn: Conn, master_max: int, entries: list[tuple[int, int]]
    ) -> None:
        if s.slave_conn is not conn:
            return
        local = list(s.epochs.entries)
        if local and not _SKIP_TRUNCATION:
            point = consistent_point(local, s.log.max, entries, master_max)
            if point is None:
                self.log(f"b{s.bid} SUSPEND: no epoch of {local} matches {entries}")
                s.suspended = True
                self._close_conn(conn, notify_master=True)
                s.slave_conn = None
                s.retry_at_ms = self.now + 1000
                return
            if _OVER_TRUNCATE:
                point = max([st for _, st in local if st < point], default=point)
            if point < s.log.max:
                if self._cuts_history(s, point):
                    raise GroupViolation(
                        f"confirm offset went back: b{s.bid}'s handshake with b{conn.master} "
                        f"cuts its log to {point}, below its confirm offset {s.confirm} and the "
                        f"group's confirmed history ({self.history_end})"
                    )
                self.result.truncations += 1
                self.log(f"b{s.bid} truncates {s.log.max} -> {point}")
                s.log.truncate(point)
                s.flushed = min(s.flushed, point)
                s.confirm = min(s.confirm, point)
                if s.core is not None:
                    self._step(s, e.LogGrew(s.log.max, s.confirm))
            s.epochs.truncate_suffix_by_offset(point)
        s.suspended = False
        conn.last_recv_ms = self.now
        conn.transferring = True
        self._s_ack(s, conn)
        if s.core is not None:
            self._step(s, e.SlaveFollowing())

    def _cuts_history(self, s: Replica, point: int) -> bool:
        """Whether cutting `s` at `point` removes bytes below its confirm offset that are the
        group's confirmed history (not bytes of a history forfeited in a documented window)."""
        upto = min(s.confirm, self.history_end)
        if point >= upto:
            return False
        i = bisect.bisect_left(self.history_starts, point)
        for rec in s.log.range(point, upto, 2**62):
            if i < len(self.history) and self.history[i] == rec:
                return True
            i += 1
        return False

    def _s_ack(self, s: Replica, conn: Conn) -> None:
        conn.acked = s.log.max
        conn.last_ack_ms = self.now
        self.conn_send(conn, True, self._m_ack, self.replicas[conn.master], conn, s.log.max)

    def _m_ack(self, m: Replica, conn: Conn, ack: int) -> None:
        if m.core is None:
            return
        if conn.pos is None:
            # The first ack: where the slave starts.
            old = m.masters_conns.get(conn.slave)
            if old is not None:
                old.alive = False
            m.masters_conns[conn.slave] = conn
            conn.pos = ack if ack > 0 else 0
            self._step(m, e.SlaveConnected(conn.slave, False))
            # HaMaster feeds the handshake's ack to the role core like any other.
            self._step(m, e.SlaveAcked(conn.slave, ack, m.log.max))
            self._pump(m, conn)
            return
        if m.masters_conns.get(conn.slave) is not conn:
            return
        self._step(m, e.SlaveAcked(conn.slave, ack, m.log.max))

    def _pump(self, m: Replica, conn: Conn) -> None:
        """HaMaster._write: send what the slave lacks, in batches inside one epoch."""
        if not conn.alive or conn.pos is None or m.core is None:
            return
        end = m.log.max
        while conn.pos < end and conn.alive:
            entry = m.epochs.find_by_offset(conn.pos)
            if entry is None:
                self._close_conn(conn, notify_master=False, notify_slave=True)
                return
            epoch, start, epoch_end = entry
            recs = m.log.range(conn.pos, min(end, epoch_end), self.cfg.batch_bytes)
            if not recs or recs[0].start != conn.pos:
                # Not a record boundary here: the read fails, the connection is dropped.
                self._close_conn(conn, notify_master=False, notify_slave=True)
                return
            self._step(m, e.Transferring(conn.slave, end))
            self._send_transfer(m, conn, epoch, start, recs)
            conn.pos = recs[-1].end
        if m.core is not None:
            self._step(m, e.SlaveIdle(conn.slave))

    def _heartbeat_conn(self, m: Replica, conn: Conn) -> None:
        if conn.pos is None:
            return
        epoch, start = 0, 0
        for ep, st in m.epochs.entries:
            if st <= conn.pos:
                epoch, start = ep, st
        self._send_transfer(m, conn, epoch, start, [])

    def _send_transfer(
        self, m: Replica, conn: Conn, epoch: int, start: int, recs: list[Rec]
    ) -> None:
        """One transfer header (a heartbeat when `recs` is empty) from `conn.pos`."""
        conn.last_hb_ms = self.now
        slave = self.replicas[conn.slave]
        self.conn_send(
            conn, False, self._s_transfer, slave, conn, conn.pos, epoch, start, m.confirm, recs
        )

    def _s_transfer(
        self,
        s: Replica,
        conn: Conn,
        offset: int,
        epoch: int,
        epoch_start: int,
        confirm: int,
        recs: list[Rec],
    ) -> None:
        """HaSlave._apply."""
        if s.slave_conn is not conn:
            return
        conn.last_recv_ms = self.now
        last = s.epochs.last_epoch()
        try:
            if last is None or epoch > last:
                s.epochs.append(epoch, epoch_start)
            elif epoch < last:
                raise ValueError(f"master sent epoch {epoch} below our last epoch {last}")
            if recs and offset != s.log.max:
                raise ValueError(f"master sent offset {offset}, our max is {s.log.max}")
        except (EpochConflict, ValueError) as exc:
            self.log(f"b{s.bid} HA session failed: {exc}")
            self._close_conn(conn, notify_master=True)
            s.slave_conn = None
            s.retry_at_ms = self.now + 1000
            return
        for rec in recs:
            s.log.append(rec)
            if s.torn_lost:
                s.torn_lost.pop(rec.wid, None)
        if recs and s.core is not None:
            self._step(s, e.LogGrew(s.log.max, s.confirm))
        c = min(confirm, s.log.max)
        if c > s.confirm:
            s.confirm = c
        if s.log.max != conn.acked:
            self._s_ack(s, conn)

    def _set_confirm(self, r: Replica, offset: int) -> None:
        c = min(offset, r.log.max)
        if c < r.confirm:
            raise GroupViolation(f"b{r.bid} moved its confirm offset back {r.confirm} -> {c}")
        r.confirm = c
        self._check_members_hold(r)
        self._check_history(r)

    def _check_members_hold(self, m: Replica) -> None:
        """A master moves its confirm offset only over bytes every SyncStateSet member holds
        (the minimum of their acks; frozen while one has no connection)."""
        c = m.core
        assert c is not None
        upto = m.confirm
        for bid in c.ha.effective_set() - {m.bid}:
            s = self.replicas[bid]
            if s.log.max >= upto and s.log.below(upto) == m.log.below(upto):
                continue
            if s.torn is not None and s.log.max < s.torn[1] and s.torn[0] < upto:
                continue  # it lost its unflushed tail (documented: acks are not flushes)
            rep = c.ha.replicas.get(bid)
            how = "no connection" if rep is None else f"its ack is {rep.ack}"
            raise GroupViolation(
                f"confirm offset went beyond a member: master b{m.bid} moved it to {upto}, but "
                f"SyncStateSet member b{bid} does not hold the master's bytes below it (its "
                f"log ends at {s.log.max}; {how} at the master)"
            )

    def _check_history(self, m: Replica) -> None:
        """The bytes below the group's highest published confirm offset never change."""
        c = m.confirm
        upto = min(c, self.history_end)
        version, done = self.verified.get(m.bid, (-1, 0))
        lo = done if version == m.log.version and done <= upto else 0
        i = bisect.bisect_left(m.log.starts, lo)
        j = bisect.bisect_left(self.history_starts, lo)
        mine = m.log.below(upto)[i:]
        theirs = self.history[j : bisect.bisect_left(self.history_starts, upto)]
        if mine != theirs:
            bad = next(
                (x for x, y in zip(mine, theirs, strict=False) if x != y),
                theirs[len(mine)] if len(theirs) > len(mine) else None,
            )
            raise GroupViolation(
                f"confirm offset went back: master b{m.bid} (confirm {c}) holds other bytes than "
                f"the group's confirmed history below {upto} (first difference near {bad})"
            )
        if c > self.history_end:
            new = m.log.range(self.history_end, c, 2**62)
            self.history.extend(new)
            self.history_starts.extend(x.start for x in new)
            self.history_end = self.history[-1].end if self.history else 0
        self.verified[m.bid] = (m.log.version, min(c, self.history_end))

    # ---- producers ---------------------------------------------------------------------------

    def _produce(self) -> None:
        wid = self.next_wid
        self.next_wid += 1
        size = self.rng.randint(40, 300)
        target = self.replicas[self.target]
        self.send(CLIENT, target.name, self._b_send, target, wid, size)
        self.at(self.now + self.cfg.produce_every_ms, self._produce)
        self.at(self.now + REQUEST_TIMEOUT_MS, self._request_timeout, wid, self.target)

    def _request_timeout(self, wid: int, target: int) -> None:
        """No answer at all (the broker is down, paused or cut off): try the next one."""
        if wid not in self.answered and self.target == target:
            self.target = target % self.cfg.replicas + 1

    def _client_answer(self, bid: int, wid: int, outcome: str, info: Acked | None) -> None:
        res = self.result
        self.answered.add(wid)
        if outcome == "ok":
            assert info is not None
            self._acked(info)
            return
        if outcome == "refused":
            res.refused += 1
            self.target = self.target % self.cfg.replicas + 1
        else:
            res.timeouts += 1

    def _b_send(self, r: Replica, wid: int, size: int) -> None:
        c = r.core
        assert c is not None
        if c.write_refusal() is not None:
            self.send(r.name, CLIENT, self._client_answer, r.bid, wid, "refused", None)
            return
        rec = Rec(r.log.max, size, wid)
        r.log.append(rec)
        self._step(r, e.LogGrew(r.log.max, r.confirm))
        for conn in list(r.masters_conns.values()):
            self._pump(r, conn)
        r.pending.append(
            Pending(wid, rec.start, rec.end, self.now + self.cfg.slave_timeout_ms, c.ha.epoch, c.ha)
        )
        self._wake_producers(r)

    def _wake_producers(self, r: Replica) -> None:
        c = r.core
        if c is None or not r.pending:
            return
        keep = []
        for p in r.pending:
            if c.ha is not p.ha or c.ha.epoch != p.epoch:
                self.send(r.name, CLIENT, self._client_answer, r.bid, p.wid, "timeout", None)
            elif c.ha.write_acked(p.end):
                alone = c.ha.effective_set() <= {r.bid}
                if alone:
                    self.alone.add(p.wid)
                info = Acked(p.wid, r.bid, c.state.epoch, p.start, p.end, self.now)
                self.send(r.name, CLIENT, self._client_answer, r.bid, p.wid, "ok", info)
            elif self.now >= p.deadline_ms:
                self.send(r.name, CLIENT, self._client_answer, r.bid, p.wid, "timeout", None)
            else:
                keep.append(p)
        r.pending = keep

    def _acked(self, info: Acked) -> None:
        self.acked[info.wid] = info
        self.result.acked += 1
        if self.healed and info.at_ms >= self.cfg.heal_ms and self.live_at is None:
            self.live_at = self.now
        other = self.acker_of_epoch.setdefault(info.epoch, info.broker)
        if other != info.broker:
            raise GroupViolation(
                f"two brokers acknowledged writes in epoch {info.epoch}: b{other} and "
                f"b{info.broker} (write {info.wid})"
            )
        if (
            self.fault_at is not None
            and self.result.failover_ms is None
            and info.epoch > self.fault_epoch
        ):
            self.result.failover_ms = self.now - self.fault_at

    # ---- periodic -------------------------------------------------------------------------

    def _tick(self, r: Replica, inc: int) -> None:
        c = r.core
        assert c is not None
        self._step(r, e.Tick())
        self._wake_producers(r)
        cfg = self.cfg
        # Master: heartbeats and transfers on every connection.
        for mconn in list(r.masters_conns.values()):
            if mconn.alive and self.now - mconn.last_hb_ms >= cfg.tick_ms:
                if mconn.pos is not None and mconn.pos < r.log.max:
                    self._pump(r, mconn)
                else:
                    self._heartbeat_conn(r, mconn)
        # Slave: housekeeping, periodic acks, reconnects.
        conn = r.slave_conn
        if conn is not None:
            if self.now - conn.last_recv_ms > cfg.housekeeping_ms:
                self._close_conn(conn, notify_master=True)
                r.slave_conn = None
                r.retry_at_ms = self.now + 1000
            elif conn.transferring and self.now - conn.last_ack_ms >= cfg.tick_ms:
                self._s_ack(r, conn)
        elif r.following is not None and self.now >= r.retry_at_ms:
            self._connect(r)
        self.at(self.now + cfg.tick_ms, self._timer, r, inc, self._tick, r, inc)

    def _check_tick(self) -> None:
        self._check_prefixes()
        self.at(self.now + self.cfg.check_every_ms, self._check_tick)

    def _check_prefixes(self) -> None:
        """SyncStateSet members' logs are prefixes of the serving master's up to its confirm."""
        bs = self.state.get(GROUP)
        if bs is None or bs.master_broker_id is None:
            return
        m = self.replicas[bs.master_broker_id]
        c = m.core
        if not m.up or c is None or not c.serving_master or c.state.epoch != bs.master_epoch:
            return
        for bid in c.ha.sync_state_set:
            s = self.replicas[bid]
            if s is m or not s.up:
                continue
            upto = min(s.log.max, m.confirm)
            if s.log.below(upto) != m.log.below(upto):
                raise GroupViolation(
                    f"SyncStateSet member b{bid} is not a prefix of master b{m.bid} below its "
                    f"confirm offset {m.confirm} (b{bid} max {s.log.max})"
                )

    # ---- consumer offsets -------------------------------------------------------------------
    #
    # A consumer commits increasing offsets to the controller's master (its route); each replica
    # keeps the REAL ConsumerOffsetManager, persisted every offset_flush_ms (a crash loses what
    # came since), and a slave copies its master's table every metadata_sync_ms when the role
    # core says it may (`copies_metadata`), with `merge_from_json`, as io/namesrv.py does. The
    # invariant (issue 14: "an offset never goes backwards after a committed update survives
    # failover"): a serving master's table never goes below what it held when it took over, nor
    # below what it acknowledged itself as master earlier in this incarnation (a demoted master
    # that copied an older table and is elected again); a consumer's own commit sets the value
    # (a restarted consumer reads its offsets again and may go back). What a replica lacks when
    # it takes over (RocketMQ's window: a slave copies every syncBrokerMetadataPeriod) is not
    # checked.

    def _csend(self, src: str, dst: str, fn: Callable[..., None], *args: Any) -> None:
        """A consumer-offset message: lossy and delayed, in order per link (one TCP
        connection: a consumer's commits arrive in the order it made them)."""
        if (src, dst) in self.blocked or self.crng.random() < self.loss:
            return
        lo, hi = self.cfg.delay_ms
        link = (src, dst)
        self.cseq[link] = seq = self.cseq.get(link, 0) + 1
        self.at(self.now + self.crng.randint(lo, hi), self._cdeliver, link, seq, fn, args)

    def _cdeliver(
        self, link: tuple[str, str], seq: int, fn: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        """Delivers in the order sent: a message that overtook an earlier one (a paused
        receiver reads its socket later) waits for it."""
        r = self.replicas[int(link[1][1:])] if link[1].startswith("b") else None
        if r is not None and r.up and r.paused_until > self.now:
            self.at(min(r.paused_until, self.now + 100), self._cdeliver, link, seq, fn, args)
            return
        held = self.cheld.setdefault(link, {})
        held[seq] = (fn, args)
        while (nxt := self.cnext.get(link, 0) + 1) in held:
            self.cnext[link] = nxt
            fn_, args_ = held.pop(nxt)
            if r is None or r.up:
                fn_(*args_)

    def _commit_loop(self) -> None:
        self.at(self.now + self.cfg.commit_every_ms, self._commit_loop)
        m = self._current_master()
        if m is None:
            return
        if self.crng.random() < self.cfg.consumer_restart:
            # The consumer restarts (or rebalances): it reads its offsets from the master
            # (QUERY_CONSUMER_OFFSET) and goes on from there, also backwards.
            if m.up and m.offsets is not None and m.paused_until <= self.now:
                for q in QUEUES:
                    self.next_offset[q] = m.offsets.query(CGROUP, TOPIC, q) or 0
        # Queue 1 is committed rarely: a new master lags on it until its next commit.
        q = QUEUES[1] if self.crng.random() < 0.15 else QUEUES[0]
        self.next_offset[q] += self.crng.randint(1, 5)
        self._csend(CLIENT, m.name, self._b_commit, m, q, self.next_offset[q])

    def _b_commit(self, r: Replica, q: int, off: int) -> None:
        c = r.core
        if c is None or r.offsets is None:
            return
        self._check_offsets()
        r.offsets.commit(CGROUP, TOPIC, q, off)
        if q in r.own:
            # Also a commit it took while not serving (a route to a replica about to serve
            # again) is the consumer's value now, backwards too (seed 7618 of 6,000-7,999).
            r.own[q] = off
        if c.serving_master:
            # What the consumer committed is the value now (also backwards, after it read an
            # older one from a new master): only the broker may not move it back.
            r.own[q] = off
            if r.mark is not None:
                r.mark[1][q] = off
            self.result.offset_commits += 1
        self._check_offsets()

    def _persist_offsets(self, r: Replica, inc: int, period: int) -> None:
        assert r.offsets is not None
        r.offsets_disk = r.offsets.to_json(for_file=True)
        self.at(self.now + period, self._timer, r, inc, self._persist_offsets, r, inc, period)

    def _metadata_sync(self, r: Replica, inc: int, period: int) -> None:
        self.at(self.now + period, self._timer, r, inc, self._metadata_sync, r, inc, period)
        c = r.core
        assert c is not None
        src = _bid_of(c.state.master_addr) if c.copies_metadata else None
        if src is None or src == r.bid:
            return
        m = self.replicas[src]
        self._csend(r.name, m.name, self._m_offsets, m, r, inc)

    def _m_offsets(self, m: Replica, r: Replica, inc: int) -> None:
        if m.offsets is not None:
            self._csend(m.name, r.name, self._s_offsets, r, inc, m.offsets.to_json())

    def _s_offsets(self, r: Replica, inc: int, raw: bytes) -> None:
        # As io/namesrv.py: copies_metadata is asked again when the answer is in.
        if r.incarnation != inc or r.core is None or r.offsets is None:
            return
        if r.core.copies_metadata:
            r.offsets.merge_from_json(raw)
            self.result.offset_syncs += 1
            self._check_offsets()

    def _check_offsets(self) -> None:
        m = self._serving_master()
        for r in self.replicas.values():
            if r is not m:
                r.mark = None
        if m is None or m.offsets is None:
            return
        table = {q: m.offsets.query(CGROUP, TOPIC, q) or -1 for q in QUEUES}
        assert m.core is not None
        epoch = m.core.state.epoch
        if m.mark is None or m.mark[0] != epoch:
            self.result.offset_takeovers += 1
            for q, off in m.own.items():
                if table[q] < off:
                    raise GroupViolation(
                        f"consumer offset went back: b{m.bid} serves again holding {table[q]} "
                        f"for queue {q}, below the {off} it acknowledged as master earlier"
                    )
            m.mark = (epoch, table)
            return
        for q in QUEUES:
            if table[q] < m.mark[1][q]:
                raise GroupViolation(
                    f"consumer offset went back: master b{m.bid} holds {table[q]} for queue "
                    f"{q}, below the {m.mark[1][q]} it held since it took over"
                )
        m.mark = (epoch, table)

    def _serving_master(self) -> Replica | None:
        """The controller's master, if it is up and serving in the controller's epoch."""
        bs = self.state.get(GROUP)
        m = self._current_master()
        if m is None or bs is None or not m.up or m.core is None:
            return None
        if not m.core.serving_master or m.core.state.epoch != bs.master_epoch:
            return None
        return m

    def _final_check(self) -> None:
        m = self._serving_master()
        assert m is not None
        lost = []
        for info in self.acked.values():
            if info.wid in self.excused:
                continue
            rec = m.log.at(info.start)
            if rec is None or rec.wid != info.wid or rec.end != info.end:
                lost.append(info)
        if lost:
            x = lost[0]
            raise GroupViolation(
                f"{len(lost)} acknowledged write(s) lost: write {x.wid} acked by b{x.broker} in "
                f"epoch {x.epoch} at [{x.start}, {x.end}) is not on the master b{m.bid} "
                f"(it holds {m.log.at(x.start)}; max {m.log.max})"
            )


# ---- entry points -----------------------------------------------------------------------------


def run_group_seed(
    seed: int,
    bug: str | None = None,
    trace: bool = False,
    cfg: GroupConfig | None = None,
    script: list[tuple[int, str, int]] | None = None,
    fixes: tuple[str, ...] = FIXES,
    clean: bool = False,
) -> GroupResult:
    """One seed. `clean`: the master fault only, no random faults after it (a failover
    measured without other faults in the way)."""
    with ExitStack() as stack:
        for name in fixes:
            stack.enter_context(KNOWN_BUGS[name][0]())
        if bug is not None:
            stack.enter_context(BUGS[bug][0]())
        return GroupSim(seed, cfg, trace=trace, script=script, clean=clean).run()


def replay_command(seed: int, bug: str | None = None, no_fixes: bool = False) -> str:
    extra = f" --group-bug {bug}" if bug else ""
    extra += " --no-fixes" if no_fixes else ""
    return f"python -m rmq_ha.sim --group --seed {seed}{extra} --trace"
