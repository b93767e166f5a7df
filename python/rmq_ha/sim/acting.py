"""Deterministic simulation of a classic master/slave group with slave acting master (RIP-32),
pre-online and FMQ fencing (issue 14).

One seed runs, in virtual time, a classic group (brokerId 0 the master, 1..n-1 slaves) whose
brokers are built from the REAL role core (`RoleCore` in classic mode with acting master,
pre-online and, per seed, `fenceWhenIsolated`), one name server built from the REAL route table
(`nameserver.routes.RouteTable`, supportActingMaster, 905 notices), and clients:

* **Brokers** feed `RoleCore.step` the events the Trio shells feed (Started, Tick,
  NamesrvAnswered from registrations and QUERY_DATA_VERSION heartbeats, MemberGroup from the
  member-group poll, MinBrokerChanged from 905, MasterPushedHa / MasterHaAnswered /
  HaInfoPushed from 906, SlaveConnected / SlaveAcked / SlaveDisconnected / SlaveFollowing from
  the HA connection, ReverseSynced) and execute its actions as `broker/io/role.py`,
  `broker/io/acting.py` and `broker/io/namesrv.py` do. Consumer offsets are the REAL
  `ConsumerOffsetManager` (its DataVersion, version step, adoption by a slave's metadata
  sync, `arm_version_bump`, pre-online's `merge_newer`), stamped with the broker's own skewed
  wall clock and persisted every `offset_flush_ms` (a kill -9 loses what was committed since).
  Queue locks are the REAL `QueueLocks`, with the strict-mode quorum of
  `handlers/locks.py` (forward to every other member the role core knows; a majority of
  `totalReplicas` must lock). The data plane refuses commits and locks while the core says
  `data_plane_fenced`, as `Broker._on_request` does.
* **Clients** read the route of the topic from the name server (cached for
  `route_refresh_ms`, refreshed at once when a broker does not answer), commit increasing
  consumer offsets to the route's id 0 (the master, or the acting slave the name server shows
  as id 0), and lock queues there (orderly consumers; a client believes it holds a lock for
  `client_lock_ms` from when it asked).
* **Faults**: the master is killed (and restarted: pre-online), isolated from everyone or from
  the name server only, or paused; later random faults kill/restart slaves, pause brokers,
  cut links (both ways or one way) and lose messages; each broker's clock runs up to 10%
  fast or slow and its wall clock (DataVersion timestamps) is skewed by up to
  `wall_skew_ms`. Then everything heals.

Invariants (`ActingViolation`), checked at every step and at the end:

* **split brain** (with `fenceWhenIsolated`): at most one broker of the group runs the
  master-only services (the role core's `special`: the serving master or the acting slave),
  beyond the time the name servers' view takes to reach both (`_overlap_is_a_bug`);
* **pre-online**: a returning master goes online only after it pulled the metadata of every
  slave its member group listed, and each pull happened after that slave stopped acting (a
  pull from a slave that still acts misses what it acknowledges later);
* **no acknowledged offset lost, none goes backwards**: whenever a broker starts serving
  (a master online or unfenced, a slave taking over) and whenever a master pulls a slave back,
  its table holds every commit the group acknowledged that it can know of (`_check_holds`),
  and at the end the master holds them all. Excused and counted, as RocketMQ documents them:
  offsets a kill -9 lost before they were persisted or held by a running broker
  (`crash_losses`), what a slave taking over never copied (`takeover_losses`: it acts from its
  last metadata sync), and commits a plain slave took from a client's stale route
  (`stale_route_losses`);
* **fencing**: a broker the core fenced (FMQ) runs no master-only service and accepts no
  commit or lock;
* **locks**: with `lockInStrictMode`, no two clients believe they hold one queue at once
  (excused and counted: a replica restarted during the older lock's life, `lock_amnesia`);
* **liveness**: `settle_ms` after the heal the master serves and no slave acts.

Deliberate bugs (`ACTING_BUGS`, `--acting-bug`) break one rule each, to show the checker
catches every invariant; the bugs of the real code the simulator found are fixed, and
`FIX_REVERTS` (`--revert`) puts the old code back one fix at a time. Everything is pure and
seeded; `--seed S --trace` replays a seed exactly.
"""

from __future__ import annotations

import heapq
import json
import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

from rmq_ha.broker import locks as locks_mod
from rmq_ha.broker import offsets as offsets_mod
from rmq_ha.broker.core import actions as a
from rmq_ha.broker.core import events as e
from rmq_ha.broker.core.role import Role, RoleConfig, RoleCore
from rmq_ha.broker.locks import QueueKey, QueueLocks
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.special import delay as delay_mod
from rmq_ha.broker.special.delay import DelayOffsets
from rmq_ha.nameserver.routes import MinIdChange, RouteTable
from rmq_ha.protocol.models import DataVersion, QueueData

CLUSTER = "sim"
GROUP = "broker-a"
TOPIC = "T"
CGROUP = "cg"
NS = "ns"
QUEUES = (0, 1)
#: Delay levels whose progress the special service moves on where it runs.
LEVELS = (1, 2)
#: No file is ever read or written: offsets are persisted into the simulated disk.
_NO_FILE = Path("/nonexistent/rmq-ha-sim/consumerOffset.json")
_NO_DELAY_FILE = Path("/nonexistent/rmq-ha-sim/delayOffset.json")


class ActingViolation(Exception):
    """An acting-master invariant failed."""


@dataclass(frozen=True)
class ActingConfig:
    replicas: int = 3
    fence_when_isolated: bool = True
    strict_locks: bool = True
    version_step: int = 500
    #: Virtual time: faults from `warmup_ms` to `heal_ms`, then `settle_ms` to converge.
    warmup_ms: int = 6_000
    heal_ms: int = 50_000
    settle_ms: int = 40_000
    fault_every_ms: int = 6_000
    random_faults: bool = True
    loss: float = 0.01
    delay_ms: tuple[int, int] = (1, 20)
    clock_drift: float = 0.1
    wall_skew_ms: int = 0
    # Broker and name-server timing (RocketMQ's defaults unless noted).
    tick_ms: int = 100
    heartbeat_ms: int = 1_000
    not_active_ms: int = 10_000
    scan_ms: int = 5_000
    member_poll_ms: int = 1_000
    register_ms: int = 30_000
    metadata_sync_ms: int = 5_000
    offset_flush_ms: int = 5_000
    ha_ping_ms: int = 1_000
    ha_timeout_ms: int = 5_000
    request_timeout_ms: int = 3_000
    lock_expire_ms: int = 60_000
    client_lock_ms: int = 30_000
    # Clients.
    commit_every_ms: tuple[int, int] = (150, 500)
    lock_every_ms: tuple[int, int] = (1_000, 4_000)
    #: The delay service: how often, where it runs, it delivers the next due messages.
    delay_every_ms: int = 700
    route_refresh_ms: int = 30_000

    @property
    def isolation_timeout_ms(self) -> int:
        # broker.role_config: max(brokerNotActiveTimeoutMillis, 2 x haSendHeartbeatInterval).
        return max(self.not_active_ms, 2 * self.ha_ping_ms)

    @classmethod
    def for_seed(cls, seed: int, rng: random.Random) -> ActingConfig:
        return cls(
            replicas=rng.choice((2, 3)),
            fence_when_isolated=rng.random() < 0.75,
            strict_locks=rng.random() < 0.75,
            version_step=rng.choice((1, 3, 500)),
            loss=rng.choice((0.0, 0.01, 0.05)),
            delay_ms=rng.choice(((1, 5), (1, 20), (5, 80))),
            wall_skew_ms=rng.choice((0, 50, 5_000, 120_000)),
            route_refresh_ms=rng.choice((1_000, 30_000)),
            fault_every_ms=rng.choice((4_000, 8_000)),
        )


@dataclass
class Commit:
    """One consumer-offset commit a broker acknowledged."""

    queue: int
    offset: int
    bid: int
    at: int
    #: The acknowledging broker was the master (not acting, not pre-online).
    by_master: bool
    #: It served then (the role core's special: the serving master or the acting slave); a
    #: commit a plain slave or a pre-online master took (a client's stale route) is a cache.
    serving: bool = True
    #: Its broker was killed before persisting it; only another broker's copy held it.
    only_copied: bool = False
    forfeited: str | None = None
    #: "offset": a consumer-offset commit (`queue` a queue id); "delay": delay progress the
    #: special service made (`queue` a delay level, `offset` the progress after delivering).
    kind: str = "offset"


@dataclass
class Broker:
    bid: int
    up: bool = False
    incarnation: int = 0
    paused_until: int = 0
    core: RoleCore | None = None
    offsets: ConsumerOffsetManager | None = None
    locks: QueueLocks | None = None
    #: The persisted consumer offsets (survive a kill -9) and the epoch file's last entry.
    disk_table: dict[str, dict[int, int]] = field(default_factory=dict)
    disk_raw: bytes | None = None
    #: Delay progress (the REAL DelayOffsets) and what of it is persisted.
    delay: DelayOffsets | None = None
    delay_disk: dict[int, int] = field(default_factory=dict)
    delay_raw: bytes | None = None
    last_epoch: int | None = None
    started_at: int = 0
    clock_base: int = 0
    clock_rate: float = 1.0
    wall_skew: int = 0
    # HA client (slave side): the master followed and this connection's state.
    following: int | None = None
    ha_conn: int = 0
    ha_heard: int = 0
    ha_established: bool = False
    # HA server (master side): slave id -> (connection id, last heard).
    slaves: dict[int, tuple[int, int]] = field(default_factory=dict)
    special_since: int | None = None
    #: When a name server last answered it, and last told it the group's members (a
    #: member-group answer or a 905; for a slave, only a view with a smaller id than its own).
    ns_heard: int = 0
    view_at: int = 0
    #: Messages that reached this broker while it was stopped (read in order on resume).
    inbox: list[tuple[Callable[..., None], tuple[Any, ...]]] = field(default_factory=list)
    #: Since when this broker acts (for the pre-online check) and when it last stopped.
    acting_since: int | None = None
    acting_stopped: int = 0
    #: Pre-online: slave id -> when its metadata was pulled in this incarnation.
    pulled: dict[int, int] = field(default_factory=dict)
    #: slave id -> (when, what it gave: (kind, queue or level) -> offset) of its last pull.
    pull_tables: dict[int, tuple[int, dict[tuple[str, int], int]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"b{self.bid}"

    @property
    def addr(self) -> str:
        return f"10.0.0.{self.bid}:10911"

    @property
    def ha_addr(self) -> str:
        return f"10.0.0.{self.bid}:10912"

    def clock(self, now: int) -> int:
        return self.clock_base + int(now * self.clock_rate)


def _bid_of(addr: str | None) -> int | None:
    if not addr or not addr.startswith("10.0.0."):
        return None
    return int(addr.split(".")[3].split(":")[0])


@dataclass
class ActingResult:
    seed: int
    ok: bool = True
    error: str = ""
    replicas: int = 3
    fence: bool = False
    strict: bool = False
    master_fault: str = ""
    sim_ms: int = 0
    events: int = 0
    wall_ms: float = 0.0
    commits: int = 0
    refused: int = 0
    locks_granted: int = 0
    delay_deliveries: int = 0
    takeovers: int = 0
    hand_backs: int = 0
    pre_onlines: int = 0
    reverse_syncs: int = 0
    fences: int = 0
    crash_losses: int = 0
    takeover_losses: int = 0
    stale_route_losses: int = 0
    #: Commits a killed broker had not persisted whose only copy, on a slave, was overwritten
    #: by the restarted master's older table before its pull reached that slave (not fixed).
    copy_losses: int = 0
    #: Two holders excused: a replica restarted (forgetting its locks) during the older
    #: lock's life.
    lock_amnesia: int = 0
    #: Virtual ms from the master fault to the first commit the acting slave acknowledged.
    takeover_ms: int | None = None
    trace: list[str] = field(default_factory=list)


# ---- deliberate bugs: each breaks one rule of the real code ---------------------------------


def _online_without_reverse_sync() -> Any:
    """Pre-online ends as soon as the member group is known."""
    orig = RoleCore._pre_online_next_slave

    def next_slave(self: RoleCore, p: Any, out: list[a.Action]) -> None:
        p.queue = []
        orig(self, p, out)

    return mock.patch.object(RoleCore, "_pre_online_next_slave", next_slave)


def _fenced_keeps_services() -> Any:
    """The special services ignore the FMQ fence."""

    def reconcile(self: RoleCore, out: list[a.Action]) -> None:
        s = self.state
        want = s.pre_online is None and ((s.role.value == "MASTER" and s.fence is None) or s.acting)
        if want != s.special:
            s.special = want
            out.append(a.StartSpecial() if want else a.StopSpecial())

    return mock.patch.object(RoleCore, "_reconcile_special", reconcile)


def _merge_takes_theirs() -> Any:
    """Pre-online's merge takes the slave's offsets even where they are smaller."""

    def merge_newer(self: ConsumerOffsetManager, raw: bytes) -> bool:
        doc = json.loads(raw)
        for key, queues in doc.get("offsetTable", {}).items():
            mine = self.table.setdefault(str(key), {})
            for q, o in queues.items():
                mine[int(q)] = int(o)
        return True

    return mock.patch.object(ConsumerOffsetManager, "merge_newer", merge_newer)


def _delay_merge_takes_theirs() -> Any:
    """Pre-online's merge of delay progress takes the slave's levels even where smaller."""

    def merge_newer(self: DelayOffsets, raw: bytes) -> bool:
        for level, off in json.loads(raw).get("offsetTable", {}).items():
            self.table[int(level)] = int(off)
        return True

    return mock.patch.object(DelayOffsets, "merge_newer", merge_newer)


def _never_stops_acting() -> Any:
    """An acting slave keeps acting when the smallest id moves back to the master."""
    orig = RoleCore._set_acting

    def set_acting(self: RoleCore, acting: bool, out: list[a.Action]) -> None:
        if acting or not self.state.acting:
            orig(self, acting, out)

    return mock.patch.object(RoleCore, "_set_acting", set_acting)


def _strict_lock_without_quorum() -> Any:
    """LOCK_BATCH_MQ in strict mode locks on the asked broker alone (the quorum is one)."""
    return mock.patch.object(locks_mod, "strict_quorum", lambda total_replicas: 1)


ACTING_BUGS: dict[str, tuple[Callable[[], Any], str]] = {
    "online-without-reverse-sync": (_online_without_reverse_sync, "pre-online"),
    "fenced-keeps-services": (_fenced_keeps_services, "fencing"),
    "merge-takes-theirs": (_merge_takes_theirs, "lost offset"),
    "delay-merge-takes-theirs": (_delay_merge_takes_theirs, "delay progress went back"),
    "never-stops-acting": (_never_stops_acting, "split brain"),
    "strict-lock-without-quorum": (_strict_lock_without_quorum, "two clients"),
}


# ---- the fixes of the real code, each with a switch that reverts it ------------------------
# Every bug the simulator found is fixed in the real code; `FIX_REVERTS` puts the old code
# back (one switch per fix) so tests can show the seed that found it fails without the fix.


def _revert_stop_acting_on_906() -> Any:
    """Before: the returning master's 906 made an acting slave follow it but not stop acting,
    and nothing kept it from acting again while the master was not registered yet."""

    def pushed(self: RoleCore, ev: e.MasterPushedHa, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        if s.role is Role.SLAVE:
            if ev.master_addr:
                s.master_addr = ev.master_addr
            self._follow(ev.ha_addr, out)

    return mock.patch.object(RoleCore, "_master_pushed_ha", pushed)


def _revert_hand_back_while_online() -> Any:
    """Before: only pre-online pulled a slave's metadata back."""
    return mock.patch.object(RoleCore, "_hand_back_next", lambda self, out: None)


def _revert_acting_slave_silence() -> Any:
    """Before: an acting slave kept acting however long it heard no name server."""
    orig = RoleCore._fmq_check

    def check(self: RoleCore, now_ms: int, out: list[a.Action]) -> None:
        if self.cfg.broker_id != 0:
            return
        orig(self, now_ms, out)

    return mock.patch.object(RoleCore, "_fmq_check", check)


def _revert_fence_counts_slaves() -> Any:
    """Before: a master fenced only when it heard neither a name server nor a slave, after
    the whole isolation timeout."""

    orig = RoleCore._fmq_check

    def check(self: RoleCore, now_ms: int, out: list[a.Action]) -> None:
        s, cfg = self.state, self.cfg
        if cfg.broker_id != 0:
            orig(self, now_ms, out)  # an acting slave's part stays
            return
        if not cfg.fence_when_isolated or self._slave_ack_ms is None:
            return
        limit = cfg.isolation_timeout_ms
        isolated = now_ms - self._slave_ack_ms > limit and now_ms - self._namesrv_ms > limit
        if isolated != s.isolated_fence:
            s.isolated_fence = isolated
            if not isolated:
                s.pulled = set()

    return mock.patch.object(RoleCore, "_fmq_check", check)


def _revert_merge_by_version() -> Any:
    """Before: pre-online took a slave's offsets only when its DataVersion was not older."""
    orig = ConsumerOffsetManager.merge_newer

    def merge_newer(self: ConsumerOffsetManager, raw: bytes) -> bool:
        dv = json.loads(raw).get("dataVersion") or {}
        theirs = (dv.get("stateVersion", 0), dv.get("counter", 0), dv.get("timestamp", 0))
        mine = self.data_version
        if theirs < (mine.state_version, mine.counter, mine.timestamp):
            return False
        return orig(self, raw)

    return mock.patch.object(ConsumerOffsetManager, "merge_newer", merge_newer)


def _revert_sync_keeps_own_commits() -> Any:
    """Before: a slave's metadata sync overwrote its table with the master's."""
    orig = ConsumerOffsetManager.merge_from_json

    def merge(self: ConsumerOffsetManager, raw: bytes) -> None:
        self._local = False
        orig(self, raw)

    return mock.patch.object(ConsumerOffsetManager, "merge_from_json", merge)


def _revert_repush_before_pull() -> Any:
    """Before: a master whose slave made no HA connection in time pulled its metadata without
    giving it the HA address again (the slave may have restarted and be acting)."""
    orig = RoleCore._ha_info_pushed

    def pushed(self: RoleCore, ev: e.HaInfoPushed, now_ms: int, out: list[a.Action]) -> None:
        p = self.state.pre_online
        if p is not None and p.repushed:
            p.repushed = False
        orig(self, ev, now_ms, out)

    def tick(self: RoleCore, now_ms: int, out: list[a.Action]) -> None:
        p = self.state.pre_online
        if p is not None and p.phase == "wait" and now_ms >= p.deadline_ms and p.slave is not None:
            self._pre_online_sync(p, out)
            return
        orig_tick(self, now_ms, out)

    orig_tick = RoleCore._tick
    stack = ExitStack()
    stack.enter_context(mock.patch.object(RoleCore, "_ha_info_pushed", pushed))
    stack.enter_context(mock.patch.object(RoleCore, "_tick", tick))
    return stack


def _revert_copy_after_hand_back() -> Any:
    """Before: a slave copied its master's offsets whether or not that master had pulled the
    slave's back since it (re)started."""

    def copies(self: RoleCore) -> bool:
        s = self.state
        return s.role is Role.SLAVE and not s.acting and bool(s.master_addr)

    return mock.patch.object(RoleCore, "copies_metadata", property(copies))


def _revert_repull_on_reconnect() -> Any:
    """Before: a slave stayed pulled back across a new HA connection (a restart) and across
    pre-online rounds."""
    orig_step = RoleCore.step

    def step(self: RoleCore, event: e.Event, now_ms: int) -> list[a.Action]:
        keep = set(self.state.pulled)
        out = orig_step(self, event, now_ms)
        if isinstance(event, e.SlaveConnected | e.Tick) and self.state.pre_online is not None:
            self.state.pulled |= keep
        elif isinstance(event, e.SlaveConnected) and event.broker_id in keep:
            self.state.pulled.add(event.broker_id)
        return out

    return mock.patch.object(RoleCore, "step", step)


def _revert_remember_transfer() -> Any:
    """Before: a pre-online slave waited for SlaveFollowing even when its HA client had been
    transferring since an earlier round (it says so once per connection)."""
    orig = RoleCore._master_ha_answered

    def answered(self: RoleCore, ev: e.MasterHaAnswered, now_ms: int, out: list[a.Action]) -> None:
        self.state.transferring = False
        orig(self, ev, now_ms, out)

    return mock.patch.object(RoleCore, "_master_ha_answered", answered)


def _revert_repush_on_connect() -> Any:
    """Before: a pre-online master pulled a slave as soon as its HA connection showed up."""

    def connected(self: RoleCore, broker_id: int, out: list[a.Action]) -> None:
        p = self.state.pre_online
        if p is not None and p.phase == "wait" and p.slave == broker_id:
            self._pre_online_sync(p, out)

    return mock.patch.object(RoleCore, "_pre_online_slave_connected", connected)


def _revert_pre_online_follows_pusher() -> Any:
    """Before: a slave in its own pre-online acted when the name servers listed no master,
    although a master in pre-online had given it its 906."""
    orig = RoleCore._pre_online_members

    def members(
        self: RoleCore, p: Any, m: dict[int, str] | None, now_ms: int, out: list[a.Action]
    ) -> None:
        self.state.hand_back_until_ms = None
        orig(self, p, m, now_ms, out)

    return mock.patch.object(RoleCore, "_pre_online_members", members)


def _revert_fence_without_slave() -> Any:
    """Before: a master that never had a slave connected never fenced."""
    orig = RoleCore._fmq_check

    def check(self: RoleCore, now_ms: int, out: list[a.Action]) -> None:
        if self.cfg.broker_id == 0 and self._slave_ack_ms is None:
            return
        orig(self, now_ms, out)

    return mock.patch.object(RoleCore, "_fmq_check", check)


def _revert_unfence_when_listed() -> Any:
    """Before: a fenced master served again on the first name-server answer, before the name
    servers listed it again (a slave could still act on their view)."""
    orig = RoleCore._fmq_check

    def check(self: RoleCore, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        if s.isolated_fence and now_ms - self._namesrv_ms <= self.cfg.fence_after_ms:
            s.isolated_fence = False
            s.pulled = set()
            return
        orig(self, now_ms, out)

    return mock.patch.object(RoleCore, "_fmq_check", check)


def _revert_fence_check_every_event() -> Any:
    """Before: isolation (FMQ fencing, an acting slave's name-server silence) was decided
    at ticks only, so the first events after a long pause ran with the state from before it."""
    return mock.patch.object(RoleCore, "_isolation_first", lambda self, now_ms, out: None)


def _revert_probe_before_acting() -> Any:
    """Before: a 905 saying the master went offline ended a slave's hand-back hold at once,
    also when it was about a registration from before the master restarted (in pre-online)."""
    orig = RoleCore._probe_hold

    def probe(self: RoleCore, ev: e.MinBrokerChanged, now_ms: int, out: list[a.Action]) -> None:
        if ev.offline_addr and ev.offline_addr == self.state.master_addr:
            self.state.hand_back_until_ms = None
            return
        orig(self, ev, now_ms, out)

    return mock.patch.object(RoleCore, "_probe_hold", probe)


def _revert_delay_merge_keeps_max() -> Any:
    """Before: pre-online took a slave's delay progress only when its DataVersion was not
    older."""

    def merge_newer(self: DelayOffsets, raw: bytes) -> bool:
        doc = json.loads(raw)
        dv = DataVersion.from_json(json.dumps(doc["dataVersion"]).encode())
        if dv.compare(self.data_version) < 0:
            return False
        for level, off in doc.get("offsetTable", {}).items():
            self.table[int(level)] = max(int(off), self.table.get(int(level), 0))
        self.data_version = dv
        self.dirty = True
        return True

    return mock.patch.object(DelayOffsets, "merge_newer", merge_newer)


def _revert_delay_sync_keeps_own_progress() -> Any:
    """Before: a slave's metadata sync overwrote its delay progress with the master's."""
    orig = DelayOffsets.adopt

    def adopt(self: DelayOffsets, raw: bytes) -> None:
        self._local = False
        orig(self, raw)

    return mock.patch.object(DelayOffsets, "adopt", adopt)


FIX_REVERTS: dict[str, tuple[Callable[[], Any], str]] = {
    "stop-acting-on-906": (_revert_stop_acting_on_906, "pre-online"),
    "hand-back-while-online": (_revert_hand_back_while_online, "lost offset"),
    "acting-slave-silence": (_revert_acting_slave_silence, "split brain"),
    "fence-on-name-server-silence": (_revert_fence_counts_slaves, "split brain"),
    "merge-keeps-max": (_revert_merge_by_version, "lost offset"),
    "sync-keeps-own-commits": (_revert_sync_keeps_own_commits, "lost offset"),
    "repush-before-pull": (_revert_repush_before_pull, "pre-online"),
    "copy-after-hand-back": (_revert_copy_after_hand_back, "lost offset"),
    "repull-on-reconnect": (_revert_repull_on_reconnect, "lost offset"),
    "remember-transfer": (_revert_remember_transfer, "liveness"),
    "repush-on-connect": (_revert_repush_on_connect, "pre-online"),
    "pre-online-follows-pusher": (_revert_pre_online_follows_pusher, "pre-online"),
    "fence-without-slave": (_revert_fence_without_slave, "split brain"),
    "unfence-when-listed": (_revert_unfence_when_listed, "split brain"),
    "fence-check-every-event": (_revert_fence_check_every_event, "split brain"),
    "probe-before-acting": (_revert_probe_before_acting, "pre-online"),
    "delay-merge-keeps-max": (_revert_delay_merge_keeps_max, "delay progress went back"),
    "delay-sync-keeps-own-progress": (
        _revert_delay_sync_keeps_own_progress,
        "delay progress went back",
    ),
}


# ---- the simulation -----------------------------------------------------------------------


class ActingSim:
    def __init__(
        self,
        seed: int,
        cfg: ActingConfig | None = None,
        *,
        trace: bool = False,
        clean: bool = False,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(f"acting-{seed}")
        #: The delay service's own draws, so that modelling it left every other draw (and so
        #: the seeds that found the earlier bugs) as it was.
        self.delay_rng = random.Random(f"acting-delay-{seed}")
        self.cfg = cfg if cfg is not None else ActingConfig.for_seed(seed, self.rng)
        if clean:
            self.cfg = ActingConfig(**{**self.cfg.__dict__, "random_faults": False})
        c = self.cfg
        self.tracing = trace
        self.now = 0
        self._q: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.res = ActingResult(seed, replicas=c.replicas, fence=c.fence_when_isolated)
        self.res.strict = c.strict_locks
        self.brokers = {i: Broker(i) for i in range(c.replicas)}
        for b in self.brokers.values():
            b.clock_base = self.rng.randint(0, 10**9)
            b.clock_rate = self.rng.uniform(1 - c.clock_drift, 1 + c.clock_drift)
            b.wall_skew = self.rng.randint(-c.wall_skew_ms, c.wall_skew_ms)
        self.routes = RouteTable()
        self.blocked: set[tuple[str, str]] = set()
        self.fifo: dict[tuple[str, str], int] = {}
        self.starts: list[tuple[int, int]] = []
        self.cuts: dict[tuple[str, str], int] = {}
        self.loss = self.cfg.loss
        self.healed = False
        self.wall = 1_700_000_000_000
        # Clients.
        self.route_addr: str | None = None
        self.route_at = -(10**9)
        self.next_offset = dict.fromkeys(QUEUES, 0)
        self.commits: list[Commit] = []
        self.lock_clients = ("lc1", "lc2")
        #: Per client, queue -> (believed from, believed until).
        self.held: dict[str, dict[int, tuple[int, int]]] = {c_: {} for c_ in self.lock_clients}
        self.fault_at: int | None = None
        #: Two brokers serving at once since (None: not now). RIP-32 decides by the name
        #: servers' views, not by consensus: a view reaches the brokers within a member-group
        #: period and a delivery, so a shorter overlap is the protocol's, a longer one a bug.
        self.overlap_since: int | None = None
        self.grace_ms = 2 * self.cfg.member_poll_ms + 4 * self.cfg.delay_ms[1]

    # ---- plumbing -------------------------------------------------------------------------

    def at(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, args))

    def log(self, text: str) -> None:
        if self.tracing:
            self.res.trace.append(f"{self.now:>7} {text}")

    def send(self, src: str, dst: str, fn: Callable[..., None], *args: Any) -> None:
        if (src, dst) in self.blocked or self.rng.random() < self.loss:
            return
        lo, hi = self.cfg.delay_ms
        # In order per link, as over one TCP connection.
        t = max(self.now + self.rng.randint(lo, hi), self.fifo.get((src, dst), 0))
        self.fifo[(src, dst)] = t
        self.at(t, self._deliver, src, dst, fn, args)

    def _deliver(self, src: str, dst: str, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if (src, dst) in self.blocked:
            return
        if dst.startswith("b"):
            b = self.brokers[int(dst[1:])]
            if not b.up:
                return
            if b.paused_until > self.now or b.inbox:
                # A stopped process reads its sockets when it resumes, in order, after its
                # overdue timers.
                b.inbox.append((fn, args))
                if len(b.inbox) == 1:
                    self.at(min(b.paused_until, self.now + 100) + 1, self._drain, b, b.incarnation)
                return
        fn(*args)

    def _drain(self, b: Broker, inc: int) -> None:
        if not b.up or b.incarnation != inc:
            return
        if b.paused_until > self.now:
            self.at(min(b.paused_until, self.now + 100) + 1, self._drain, b, inc)
            return
        while b.inbox and b.up and b.incarnation == inc:
            fn, args = b.inbox.pop(0)
            fn(*args)

    def every(
        self,
        b: Broker,
        period: int,
        fn: Callable[[Broker], None],
        rng: random.Random | None = None,
    ) -> None:
        """A periodic task of `b`'s current incarnation (its period runs on b's clock)."""
        inc = b.incarnation

        def run() -> None:
            if not b.up or b.incarnation != inc:
                return
            if b.paused_until > self.now:
                self.at(min(b.paused_until, self.now + 100), run)
                return
            fn(b)
            self.at(self.now + max(1, int(period / b.clock_rate)), run)

        self.at(self.now + (rng or self.rng).randint(1, period), run)

    def rpc(
        self,
        src: str,
        dst: str,
        handler: Callable[[], Any],
        answer: Callable[[Any], None],
        *,
        owner: Broker | None = None,
    ) -> None:
        """A request: `handler` runs at `dst` and its result comes back to `answer`; no answer
        within the request timeout answers None (once either way)."""
        done = [False]
        inc = owner.incarnation if owner is not None else 0

        def alive() -> bool:
            return owner is None or (owner.up and owner.incarnation == inc)

        def reply(value: Any) -> None:
            if not done[0] and alive():
                done[0] = True
                answer(value)

        def serve() -> None:
            value = handler()
            if value is not None:
                self.send(dst, src, reply, value)

        self.send(src, dst, serve)
        self.at(self.now + self.cfg.request_timeout_ms, lambda: reply(None))

    # ---- running --------------------------------------------------------------------------

    def run(self) -> ActingResult:
        started = time.perf_counter()
        try:
            with ExitStack() as stack:
                stack.enter_context(mock.patch.object(offsets_mod, "_now_ms", lambda: self.wall))
                stack.enter_context(mock.patch.object(delay_mod, "wall_ms", lambda: self.wall))
                self._run()
        except (ActingViolation, AssertionError) as exc:
            self.res.ok = False
            self.res.error = f"{type(exc).__name__}: {exc}"
            self.log(f"FAILED {self.res.error}")
        self.res.sim_ms = self.now
        self.res.wall_ms = (time.perf_counter() - started) * 1000
        return self.res

    def _run(self) -> None:
        c = self.cfg
        for b in self.brokers.values():
            self.at(self.rng.randint(0, 300), self._start, b)
        self.at(c.scan_ms, self._ns_scan)
        self.at(500, self._commit_loop)
        for cl in self.lock_clients:
            self.at(self.rng.randint(500, 2_000), self._lock_loop, cl)
        self.at(c.warmup_ms + self.rng.randint(0, 3_000), self._master_fault)
        if c.random_faults:
            self.at(c.warmup_ms + self.rng.randint(2_000, c.fault_every_ms), self._random_fault)
        self.at(c.heal_ms, self._heal)
        self.at(100, self._check_loop)
        end = c.heal_ms + c.settle_ms
        while self._q and self._q[0][0] <= end:
            t, _, fn, args = heapq.heappop(self._q)
            self.now = t
            self.res.events += 1
            fn(*args)
        self.now = end
        self._final_check()

    # ---- faults ---------------------------------------------------------------------------

    def _master_fault(self) -> None:
        m = self.brokers[0]
        kind = self.rng.choice(("kill", "kill", "isolate", "isolate-ns", "pause"))
        self.res.master_fault = kind
        self.fault_at = self.now
        back = self.now + self.rng.randint(3_000, 35_000)
        self.log(f"FAULT master {kind} until {back}")
        if kind == "kill":
            self._kill(m)
            self.at(back, self._start, m)
        elif kind == "pause":
            m.paused_until = back
        else:
            others = [NS, "client", *self.lock_clients]
            if kind == "isolate":
                others += [b.name for b in self.brokers.values() if b.bid]
            pairs = {(m.name, o) for o in others} | {(o, m.name) for o in others}
            self._block(pairs)
            self.at(back, self._unblock, pairs)

    def _random_fault(self) -> None:
        if self.healed:
            return
        c = self.cfg
        b = self.brokers[self.rng.randrange(c.replicas)]
        kind = self.rng.choice(("kill", "pause", "cut", "cut-one-way", "loss"))
        back = self.now + self.rng.randint(1_000, 15_000)
        self.log(f"FAULT {b.name} {kind} until {back}")
        if kind == "kill" and b.up:
            self._kill(b)
            self.at(back, self._start, b)
        elif kind == "pause":
            b.paused_until = max(b.paused_until, back)
        elif kind == "loss":
            self.loss = 0.3
            self.at(back, self._end_loss)
        elif kind in ("cut", "cut-one-way"):
            other = self.rng.choice([NS, "client", *[x.name for x in self.brokers.values()]])
            if other != b.name:
                pairs = {(b.name, other)} | ({(other, b.name)} if kind == "cut" else set())
                self._block(pairs)
                self.at(back, self._unblock, pairs)
        self.at(
            self.now + self.rng.randint(c.fault_every_ms // 2, c.fault_every_ms), self._random_fault
        )

    def _block(self, pairs: set[tuple[str, str]]) -> None:
        for p in pairs:
            self.cuts[p] = self.cuts.get(p, 0) + 1
        self.blocked |= pairs

    def _end_loss(self) -> None:
        self.loss = self.cfg.loss

    def _unblock(self, pairs: set[tuple[str, str]]) -> None:
        """Ends one fault's cut (another fault may still cut some of these links: faults
        overlap, so a link stays cut while any fault cuts it)."""
        for p in pairs:
            if p not in self.cuts:
                continue  # healed since
            self.cuts[p] -= 1
            if not self.cuts[p]:
                self.blocked.discard(p)

    def _heal(self) -> None:
        self.log("HEAL")
        self.healed = True
        self.blocked.clear()
        self.cuts.clear()
        self.loss = self.cfg.loss
        for b in self.brokers.values():
            b.paused_until = min(b.paused_until, self.now)
            if not b.up:
                self._start(b)

    # ---- broker life cycle ----------------------------------------------------------------

    def _start(self, b: Broker) -> None:
        if b.up:
            return
        c = self.cfg
        b.up, b.incarnation = True, b.incarnation + 1
        self.starts.append((self.now, b.bid))
        b.started_at = self.now
        b.paused_until = 0
        b.inbox = []
        b.ns_heard = self.now
        b.following, b.ha_established, b.slaves = None, False, {}
        b.special_since, b.acting_since, b.pulled, b.pull_tables = None, None, {}, {}
        b.core = RoleCore(
            RoleConfig(
                controller_mode=False,
                broker_id=b.bid,
                classic_slave=b.bid != 0,
                sync_master=False,
                acting_master=True,
                pre_online=c.replicas > 1,
                fence_when_isolated=c.fence_when_isolated,
                isolation_timeout_ms=c.isolation_timeout_ms,
                has_namesrv=True,
                total_replicas=c.replicas,
            )
        )
        self._wall_of(b)
        b.offsets = ConsumerOffsetManager(_NO_FILE, c.version_step)
        if b.disk_raw is not None:
            b.offsets.load_json(b.disk_raw)
        b.delay = DelayOffsets(_NO_DELAY_FILE, c.version_step)
        if b.delay_raw is not None:
            b.delay.load_json(b.delay_raw)
        b.locks = QueueLocks(c.lock_expire_ms)
        self.log(f"{b.name} starts (incarnation {b.incarnation})")
        self._step(b, e.Started(b.addr, 0, 0, b.last_epoch, 0))
        self.every(b, c.tick_ms, lambda x: self._step(x, e.Tick()))
        self.every(b, c.heartbeat_ms, self._heartbeat)
        self.every(b, c.member_poll_ms, self._member_poll)
        self.every(b, c.register_ms, self._register)
        self.every(b, c.metadata_sync_ms, self._metadata_sync)
        self.every(b, c.offset_flush_ms, self._persist)
        self.every(b, c.delay_every_ms, self._deliver_delayed, self.delay_rng)
        self.every(b, c.ha_ping_ms, self._ha_ping)
        self.every(b, c.ha_ping_ms, self._ha_housekeeping)

    def _kill(self, b: Broker) -> None:
        if not b.up:
            return
        self.log(f"{b.name} killed")
        self._forfeit(b)
        b.up = False
        self._special_changed(b, False)
        if b.acting_since is not None:
            b.acting_since, b.acting_stopped = None, self.now
        # The name server sees the connection close (RocketMQ's housekeeping service).
        if (b.name, NS) not in self.blocked:
            self.send("x", NS, self._ns_unregister, b.addr)

    def _persist(self, b: Broker) -> None:
        assert b.offsets is not None and b.delay is not None
        b.disk_table = {k: dict(v) for k, v in b.offsets.table.items()}
        b.disk_raw = b.offsets.to_json(for_file=True)
        b.delay_disk = dict(b.delay.table)
        b.delay_raw = b.delay.to_json(for_file=True)

    def _wall_of(self, b: Broker) -> None:
        self.wall = 1_700_000_000_000 + self.now + b.wall_skew

    # ---- the role core and its actions ----------------------------------------------------

    def _step(self, b: Broker, event: e.Event) -> None:
        core = b.core
        assert core is not None
        was_acting = core.state.acting
        was_pre_online = core.state.pre_online is not None
        acts = core.step(event, b.clock(self.now))
        for act in acts:
            self._execute(b, act)
        if b.bid == 0 and was_pre_online and core.state.pre_online is None:
            self._check_pre_online(b)
        if core.state.acting != was_acting:
            if core.state.acting:
                b.acting_since = self.now
                self.res.takeovers += 1
            else:
                b.acting_since, b.acting_stopped = None, self.now
                self.res.hand_backs += 1
        self._special_changed(b, core.state.special)
        self._check_now()

    def _execute(self, b: Broker, act: a.Action) -> None:
        core = b.core
        assert core is not None and b.offsets is not None
        match act:
            case a.Log():
                self.log(f"{b.name}: {act.text}")
            case a.AppendEpoch():
                b.last_epoch = act.epoch
            case a.Follow():
                bid = _bid_of(act.ha_addr)
                if bid != b.following:
                    b.following, b.ha_conn, b.ha_established = bid, b.ha_conn + 1, False
                    b.ha_heard = self.now
            case a.DropSlaves():
                b.slaves.clear()
            case a.ArmVersionBump():
                b.offsets.arm_version_bump()
                assert b.delay is not None
                b.delay.arm_version_bump()
            case a.Register():
                self._register(b)
            case a.FetchMemberGroup():
                self.rpc(b.name, NS, self._ns_member_group, partial(self._members, b), owner=b)
            case a.PushHaInfo():
                self.rpc(
                    b.name,
                    f"b{act.broker_id}",
                    partial(self._on_push_ha, self.brokers[act.broker_id], b),
                    partial(self._pushed, b, act.broker_id),
                    owner=b,
                )
            case a.AskMasterHa():
                tgt = _bid_of(act.master_addr)
                if tgt is None:
                    return
                self.rpc(
                    b.name,
                    f"b{tgt}",
                    partial(self._on_ask_ha, self.brokers[tgt]),
                    partial(self._ha_answered, b, act.master_addr),
                    owner=b,
                )
            case a.ReverseSync():
                tgt = act.broker_id
                self.rpc(
                    b.name,
                    f"b{tgt}",
                    partial(self._on_get_offsets, self.brokers[tgt]),
                    partial(self._reverse_synced, b, tgt),
                    owner=b,
                )
            case _:
                pass  # local actions with nothing to model here (topics, epochs, wake-ups)

    def _pushed(self, b: Broker, sid: int, ok: bool | None) -> None:
        self._step(b, e.HaInfoPushed(sid, bool(ok)))

    def _ha_answered(self, b: Broker, master_addr: str, ha: str | None) -> None:
        self._step(b, e.MasterHaAnswered(master_addr, ha or None))

    def _special_changed(self, b: Broker, on: bool) -> None:
        if on and b.special_since is None:
            b.special_since = self.now
            # What it can know: its own commits and those of the slaves it pulled back.
            assert b.core is not None
            pulls = {i: b.pull_tables[i] for i in b.core.state.pulled if i in b.pull_tables}
            self._check_holds(b, f"{b.name} started serving", None if b.bid else pulls)
        elif not on and b.special_since is not None:
            b.special_since = None

    # ---- name server ----------------------------------------------------------------------

    def _register(self, b: Broker) -> None:
        core = b.core
        assert core is not None
        if not core.registers:
            return
        rid = core.runtime_broker_id
        self.rpc(
            b.name,
            NS,
            partial(self._ns_register, b.addr, b.ha_addr, rid),
            partial(self._namesrv_answered, b),
            owner=b,
        )

    def _ns_register(self, addr: str, ha_addr: str, bid: int) -> tuple[str | None, str | None]:
        r = self.routes.register(
            cluster=CLUSTER,
            addr=addr,
            broker_name=GROUP,
            broker_id=bid,
            now_ms=self.now,
            ha_server_addr=ha_addr,
            topics={TOPIC: QueueData(read_queue_nums=2, write_queue_nums=2, perm=6)},
            timeout_ms=self.cfg.not_active_ms,
            enable_acting_master=True,
        )
        self._notify(r.min_change)
        return (r.master_addr or "", r.ha_server_addr or "")

    def _namesrv_answered(self, b: Broker, ans: tuple[str, str] | None) -> None:
        if ans is not None:
            b.ns_heard = self.now
            self._step(b, e.NamesrvAnswered(ans[0] or None, ans[1] or None))

    def _heartbeat(self, b: Broker) -> None:
        """QUERY_DATA_VERSION (compatibleWithOldNameSrv): an answer is contact; `changed`
        (the name server lost us) registers again."""
        core = b.core
        assert core is not None
        if core.isolated:
            return
        self.rpc(
            b.name,
            NS,
            partial(self._ns_heartbeat, b.addr),
            partial(self._hb_answer, b),
            owner=b,
        )

    def _ns_heartbeat(self, addr: str) -> bool:
        return self.routes.heartbeat(addr, self.now) is False

    def _hb_answer(self, b: Broker, changed: bool | None) -> None:
        if changed is None:
            return
        b.ns_heard = self.now
        self._step(b, e.NamesrvAnswered())
        if changed:
            self._register(b)

    def _member_poll(self, b: Broker) -> None:
        self.rpc(b.name, NS, self._ns_member_group, partial(self._members, b), owner=b)

    def _ns_member_group(self) -> dict[int, str]:
        return dict(self.routes.member_group(CLUSTER, GROUP).broker_addrs)

    def _members(self, b: Broker, members: dict[int, str] | None) -> None:
        if members is not None:
            b.ns_heard = self.now
            if b.bid == 0 or min({b.bid, *members}) != b.bid:
                b.view_at = self.now  # a view that tells a slave it is not the smallest
        self._step(b, e.MemberGroup(members))

    def _ns_scan(self) -> None:
        for addr, change in self.routes.scan(self.now):
            self.log(f"ns: {addr} expired")
            self._notify(change)
        self.at(self.now + self.cfg.scan_ms, self._ns_scan)

    def _ns_unregister(self, addr: str) -> None:
        if addr in self.routes.live:
            self.log(f"ns: {addr} connection closed")
            self._notify(self.routes.unregister(addr))

    def _notify(self, change: MinIdChange | None) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE (905, oneway) to the recipients."""
        if change is None:
            return
        for addr in change.recipients:
            bid = _bid_of(addr)
            if bid is None:
                continue
            t = self.brokers[bid]
            ev = e.MinBrokerChanged(
                change.min_id, change.min_addr, change.offline_addr, change.ha_addr
            )
            self.send(NS, t.name, self._on_905, t, ev)

    def _on_905(self, b: Broker, ev: e.MinBrokerChanged) -> None:
        if b.bid == 0 or ev.min_id != b.bid:
            b.view_at = self.now
        self._step(b, ev)

    # ---- 906 and pre-online -----------------------------------------------------------------

    def _on_push_ha(self, slave: Broker, master: Broker) -> bool:
        core = slave.core
        assert core is not None
        if core.is_master:
            return False
        self._step(slave, e.MasterPushedHa(master.addr, master.ha_addr))
        return True

    def _on_ask_ha(self, m: Broker) -> str:
        core = m.core
        assert core is not None
        return m.ha_addr if core.is_master else ""

    def _on_get_offsets(self, s: Broker) -> tuple[bytes, bool, bytes]:
        """GET_ALL_CONSUMER_OFFSET and GET_ALL_DELAY_OFFSET (two requests in the broker,
        answered here as one), and whether the slave acted when it answered."""
        assert s.offsets is not None and s.core is not None and s.delay is not None
        return (s.offsets.to_json(), s.core.acting, s.delay.to_json())

    def _reverse_synced(self, m: Broker, sid: int, got: tuple[bytes, bool, bytes] | None) -> None:
        if got is not None:
            raw, still_acting, delay_raw = got
            assert m.offsets is not None and m.delay is not None
            self._wall_of(m)
            took = m.offsets.merge_newer(raw)
            if m.delay.merge_newer(delay_raw) or took:
                # As io/acting.py's reverse_sync: what a pull took is persisted at once (a
                # kill -9 right after must not lose it; seed 8385 modelled it unpersisted).
                self._persist(m)
            self.res.reverse_syncs += 1
            # When the slave answered it still acted: it may acknowledge more afterwards.
            m.pulled[sid] = -1 if still_acting else self.now
            doc = json.loads(raw).get("offsetTable", {}).get(f"{TOPIC}@{CGROUP}", {})
            table = {("offset", int(q)): int(o) for q, o in doc.items()}
            levels = json.loads(delay_raw).get("offsetTable", {})
            table.update({("delay", int(lv)): int(o) for lv, o in levels.items()})
            m.pull_tables[sid] = (self.now, table)
        self._step(m, e.ReverseSynced(sid, got is not None))
        if got is not None and m.special_since is not None:
            # A hand-back while online: the master now holds what that slave acknowledged.
            self._check_holds(m, f"{m.name} pulled slave {sid} back", {sid: m.pull_tables[sid]})

    # ---- a slave's metadata sync --------------------------------------------------------------

    def _metadata_sync(self, b: Broker) -> None:
        core = b.core
        assert core is not None
        s = core.state
        if not core.copies_metadata or s.master_addr == b.addr:
            return
        tgt = _bid_of(s.master_addr)
        if tgt is None or tgt == b.bid:
            return
        self.rpc(
            b.name,
            f"b{tgt}",
            partial(self._on_get_offsets, self.brokers[tgt]),
            partial(self._adopt, b),
            owner=b,
        )

    def _adopt(self, b: Broker, got: tuple[bytes, bool, bytes] | None) -> None:
        assert b.core is not None and b.offsets is not None and b.delay is not None
        if got is None or not b.core.copies_metadata:
            return
        self._wall_of(b)
        b.offsets.merge_from_json(got[0])
        if not b.core.state.special:  # io/namesrv.py: not while its delay service runs
            b.delay.adopt(got[2])

    # ---- HA connection (only what the role core hears of it) ----------------------------------

    def _ha_ping(self, s: Broker) -> None:
        if s.following is None:
            return
        m = self.brokers[s.following]
        conn = (s.bid, s.incarnation, s.ha_conn)
        self.send(s.name, m.name, self._m_ping, m, s, conn)

    def _m_ping(self, m: Broker, s: Broker, conn: tuple[int, int, int]) -> None:
        core = m.core
        assert core is not None
        if not core.is_master:
            return
        known = m.slaves.get(s.bid)
        if known is None or known[0] != hash(conn):
            self._step(m, e.SlaveConnected(s.bid, False))
        m.slaves[s.bid] = (hash(conn), self.now)
        self._step(m, e.SlaveAcked(s.bid, 0, 0))
        self.send(m.name, s.name, self._s_pong, s, conn)

    def _s_pong(self, s: Broker, conn: tuple[int, int, int]) -> None:
        if (s.incarnation, s.ha_conn) != conn[1:]:
            return
        s.ha_heard = self.now
        if not s.ha_established:
            s.ha_established = True
            self._step(s, e.SlaveFollowing())

    def _ha_housekeeping(self, b: Broker) -> None:
        for sid, (_, heard) in list(b.slaves.items()):
            if self.now - heard > self.cfg.ha_timeout_ms:
                del b.slaves[sid]
                self._step(b, e.SlaveDisconnected(sid))
        if b.following is not None and self.now - b.ha_heard > self.cfg.ha_timeout_ms:
            b.ha_conn, b.ha_established, b.ha_heard = b.ha_conn + 1, False, self.now

    # ---- clients --------------------------------------------------------------------------

    def _route(self) -> str | None:
        """The cached id 0 of the group's route, refreshed when old (clients ask the name
        server; modelled as reading it at refresh time)."""
        if self.now - self.route_at >= self.cfg.route_refresh_ms:
            self._refresh_route()
        return self.route_addr

    def _refresh_route(self) -> None:
        if ("client", NS) in self.blocked or (NS, "client") in self.blocked:
            return
        route = self.routes.route(TOPIC, acting_master=True)
        addr = None
        if route is not None:
            for bd in route.broker_datas:
                addr = bd.broker_addrs.get(0)
        self.route_addr, self.route_at = addr, self.now

    def _commit_loop(self) -> None:
        """Commits stop at the heal: a later, larger commit would hide the loss of an earlier
        one from the end check (the group converges with nothing new to keep)."""
        if self.healed:
            return
        lo, hi = self.cfg.commit_every_ms
        self.at(self.now + self.rng.randint(lo, hi), self._commit_loop)
        addr = self._route()
        bid = _bid_of(addr)
        if bid is None:
            return
        q = self.rng.choice(QUEUES)
        self.next_offset[q] += self.rng.randint(1, 5)
        off = self.next_offset[q]
        t = self.brokers[bid]
        self.rpc(
            "client",
            t.name,
            lambda: self._on_commit(t, q, off),
            lambda ok: self._commit_answer(t, q, off, ok),
        )

    def _on_commit(self, b: Broker, q: int, off: int) -> str:
        core = b.core
        assert core is not None and b.offsets is not None
        self._data_plane_request(b)
        if core.data_plane_fenced:
            return "fenced"
        self._wall_of(b)
        b.offsets.commit(CGROUP, TOPIC, q, off)
        by_master = core.is_master and core.state.pre_online is None
        self.commits.append(Commit(q, off, b.bid, self.now, by_master, core.state.special))
        return "ok"

    def _data_plane_request(self, b: Broker) -> None:
        """As Broker._on_request: with fenceWhenIsolated, isolation is decided at the
        request's time (DataPlaneRequest), not at the broker's last tick."""
        assert b.core is not None
        if b.core.cfg.fence_when_isolated:
            self._step(b, e.DataPlaneRequest())

    def _commit_answer(self, b: Broker, q: int, off: int, ok: str | None) -> None:
        if ok is None:
            self._refresh_route()
            return
        if ok != "ok":
            self.res.refused += 1
            self._refresh_route()
            return
        self.res.commits += 1
        core = b.core
        if (
            self.res.takeover_ms is None
            and self.fault_at is not None
            and b.bid != 0
            and core is not None
            and core.acting
        ):
            self.res.takeover_ms = self.now - self.fault_at

    def _deliver_delayed(self, b: Broker) -> None:
        """The delay service where it runs (the core's `special`): delivers the next due
        messages of a level and moves its progress on (DelayService.scan_level). Like
        commits, deliveries stop at the heal (later progress would hide a regression)."""
        core = b.core
        assert core is not None and b.delay is not None
        if self.healed or not core.state.special:
            return
        level = self.delay_rng.choice(LEVELS)
        upto = b.delay.get(level) + self.delay_rng.randint(1, 3)
        self._wall_of(b)
        b.delay.update(level, upto)
        by_master = core.is_master and core.state.pre_online is None
        self.commits.append(Commit(level, upto, b.bid, self.now, by_master, kind="delay"))
        self.res.delay_deliveries += 1

    def _lock_loop(self, cl: str) -> None:
        lo, hi = self.cfg.lock_every_ms
        self.at(self.now + self.rng.randint(lo, hi), self._lock_loop, cl)
        addr = self._route()
        bid = _bid_of(addr)
        if bid is None:
            return
        t = self.brokers[bid]
        asked = self.now
        self.rpc(
            cl, t.name, lambda: self._on_lock(t, cl), lambda got: self._lock_answer(cl, asked, got)
        )

    def _on_lock(self, b: Broker, cl: str) -> list[int] | str:
        """LOCK_BATCH_MQ as handlers/locks.py: lock here, then (strict) forward to every other
        member the role core knows; a majority of totalReplicas must lock. The forwards are
        modelled as answered within the request (the handler waits up to 2 s for them)."""
        core = b.core
        assert core is not None and b.locks is not None
        self._data_plane_request(b)
        if core.data_plane_fenced:
            return "fenced"
        keys: list[QueueKey] = [(TOPIC, GROUP, q) for q in QUEUES]
        got = b.locks.try_lock_batch(CGROUP, keys, cl, b.clock(self.now))
        total = self.cfg.replicas
        if got and locks_mod.strict_lock_forwarded(self.cfg.strict_locks, False, total):
            others: list[list[QueueKey]] = []
            for addr in core.group_members.values():
                o = _bid_of(addr)
                if o is None or o == b.bid:
                    continue
                other = self.brokers[o]
                if not self._reachable(b, other) or other.locks is None:
                    continue
                assert other.core is not None
                if other.core.data_plane_fenced:
                    continue
                others.append(other.locks.try_lock_batch(CGROUP, got, cl, other.clock(self.now)))
            got = locks_mod.quorum_locked(got, others, total)
        return [k[2] for k in got]

    def _reachable(self, x: Broker, y: Broker) -> bool:
        return (
            y.up
            and y.paused_until <= self.now
            and (x.name, y.name) not in self.blocked
            and (y.name, x.name) not in self.blocked
        )

    def _lock_answer(self, cl: str, asked: int, got: list[int] | str | None) -> None:
        if not isinstance(got, list):
            return
        self.res.locks_granted += len(got)
        for q in got:
            self.held[cl][q] = (self.now, asked + self.cfg.client_lock_ms)
        if not self.cfg.strict_locks:
            return
        for q in got:
            mine = self.held[cl][q]
            for other in self.lock_clients:
                if other == cl or q not in self.held[other]:
                    continue
                lo, hi = self.held[other][q]
                if lo <= self.now < hi and mine[0] < hi:
                    # Locks live in memory: the quorum (totalReplicas/2+1) survives replicas
                    # that are away, not one that forgot (two quorums may meet in it alone).
                    if any(t >= lo for t, _ in self.starts):
                        self.res.lock_amnesia += 1
                        continue
                    raise ActingViolation(
                        f"queue {q} locked by {cl} while {other} holds it until {hi} "
                        "(strict lock held by two clients)"
                    )

    # ---- checks ---------------------------------------------------------------------------

    def _overlap_is_a_bug(self, serving: list[Broker]) -> bool:
        """Two brokers serve at once for longer than the view takes to reach them (a member-
        group period or two). It is the protocol's, not a bug, while one of them has had no
        view of the group since the overlap began (its polls and the 905 lost, or a one-way
        cut): unless it has heard no name server at all for longer than the role core's
        fence_after_ms allows."""
        c = self.cfg
        if self.overlap_since is None or self.now - self.overlap_since <= self.grace_ms:
            return False
        silent = c.isolation_timeout_ms // 2 + self.grace_ms
        if any(self.now - b.ns_heard > silent for b in serving):
            return True
        return all(b.view_at > self.overlap_since for b in serving)

    def _check_loop(self) -> None:
        self._check_now()
        self.at(self.now + 100, self._check_loop)

    def _check_now(self) -> None:
        serving = [
            b
            for b in self.brokers.values()
            if b.up and b.special_since is not None and b.paused_until <= self.now
        ]
        if len(serving) < 2 or not self.cfg.fence_when_isolated:
            self.overlap_since = None
        elif self.overlap_since is None:
            self.overlap_since = self.now
        elif self._overlap_is_a_bug(serving):
            who = ", ".join(
                f"{b.name} ({'acting' if b.core and b.core.acting else 'master'} since "
                f"{b.special_since})"
                for b in serving
            )
            raise ActingViolation(
                f"split brain: {who} run the master-only services at once (since "
                f"{self.overlap_since}, each with a view of the group since)"
            )
        for b in self.brokers.values():
            core = b.core
            if not b.up or core is None:
                continue
            if core.data_plane_fenced and core.state.special:
                raise ActingViolation(f"fencing: {b.name} is fenced but runs the special services")

    def _check_pre_online(self, m: Broker) -> None:
        """The master's pre-online just ended: it pulled every slave its member group listed,
        each after that slave stopped acting."""
        if m.pulled.get(-2) == m.incarnation:
            return  # checked for this incarnation already
        m.pulled[-2] = m.incarnation
        self.res.pre_onlines += 1
        core = m.core
        assert core is not None
        for sid in core.group_members:
            if sid == 0:
                continue
            when = m.pulled.get(sid)
            if when is None:
                raise ActingViolation(
                    f"pre-online: the master went online without the metadata of slave {sid}"
                )
            # Acting again now is a restart after its pull (a later hand-back's business,
            # bounded by the split-brain check); acting *at* the pull is the bug.
            if when < 0:
                raise ActingViolation(
                    f"pre-online: the master pulled slave {sid}'s metadata while it still acted"
                )

    def _check_holds(
        self,
        x: Broker,
        why: str,
        pulls: dict[int, tuple[int, dict[tuple[str, int], int]]] | None = None,
    ) -> None:
        """`x` serves now (and consumers read their offsets there, its delay service goes on
        from its progress): it must hold every commit the group acknowledged and all delay
        progress the group made (progress that goes back delivers delayed messages again).
        Excused: what a kill -9 lost unpersisted and uncopied, and what a slave taking over
        never copied from the broker that acknowledged it (RocketMQ's
        takeover window: a slave copies every syncBrokerMetadataPeriod). A master (`pulls`:
        the slaves it pulled back, when, and the table each gave) must hold what it can know
        of: its own commits since it started, what each pulled slave acknowledged before its
        pull, and what each pulled table held; the rest comes back by a later hand-back."""
        for c in self.commits:
            if c.forfeited is not None:
                continue
            if pulls is not None and not (
                (c.bid == x.bid and c.at >= x.started_at)
                or (c.bid in pulls and c.at <= pulls[c.bid][0])
                or any(t.get((c.kind, c.queue), -1) >= c.offset for _, t in pulls.values())
            ):
                continue
            if self._value(x, c) >= c.offset:
                continue
            if not c.serving:
                c.forfeited = "stale route"
                self.res.stale_route_losses += 1
                continue
            if x.bid != 0 and (c.bid != x.bid or c.at < x.started_at):
                c.forfeited = "takeover"
                self.res.takeover_losses += 1
                continue
            if c.only_copied:
                c.forfeited = "copy overwritten"
                self.res.copy_losses += 1
                continue
            who = "the master" if c.by_master else f"broker {c.bid} (acting or pre-online)"
            if c.kind == "delay":
                raise ActingViolation(
                    f"delay progress went back ({why}): level {c.queue} delivered up to "
                    f"{c.offset} at {c.at} by {who}, {x.name}'s progress is {self._value(x, c)}"
                )
            raise ActingViolation(
                f"lost offset ({why}): queue {c.queue} offset {c.offset} acknowledged at {c.at} "
                f"by {who} is not in {x.name}'s table, which holds {self._value(x, c)}"
            )

    @staticmethod
    def _value(b: Broker, c: Commit) -> int:
        """What `b`'s live table holds where `c` went (-1: nothing)."""
        if c.kind == "delay":
            return b.delay.table.get(c.queue, -1) if b.delay is not None else -1
        if b.offsets is None:
            return -1
        got = b.offsets.query(CGROUP, TOPIC, c.queue)
        return -1 if got is None else got

    def _holds(self, b: Broker, c: Commit) -> bool:
        if b.up and self._value(b, c) >= c.offset:
            return True
        return self._disk_holds(b, c)

    def _forfeit(self, b: Broker) -> None:
        """A kill -9 of `b`: commits no running broker holds and `b` did not persist are lost
        (documented: offsets are persisted every flushConsumerOffsetInterval). What a broker
        that is down persisted does not count: nothing pulls it back before the group moves
        on."""
        for c in self.commits:
            if c.forfeited is not None or self._disk_holds(b, c):
                continue
            if any(self._holds(o, c) for o in self.brokers.values() if o is not b and o.up):
                # Only a slave's copy survives: the restarted master pulls it back if it
                # reaches that slave before the slave copies the master's older table again.
                c.only_copied = c.only_copied or c.bid == b.bid
                continue
            c.forfeited = "crash"

    def _disk_holds(self, b: Broker, c: Commit) -> bool:
        if c.kind == "delay":
            return b.delay_disk.get(c.queue, -1) >= c.offset
        return b.disk_table.get(f"{TOPIC}@{CGROUP}", {}).get(c.queue, -1) >= c.offset

    def _final_check(self) -> None:
        m = self.brokers[0]
        core = m.core
        if not m.up or core is None or not core.state.special:
            raise ActingViolation(
                f"liveness: {self.cfg.settle_ms} ms after the heal the master is not serving "
                f"(up {m.up}, pre-online {core.state.pre_online if core else None})"
            )
        for b in self.brokers.values():
            if b.bid and b.core is not None and b.core.acting:
                raise ActingViolation(f"liveness: {b.name} still acts after the heal")
            if b.core is not None and b.core.isolated:
                raise ActingViolation(f"liveness: {b.name} is still pre-online after the heal")
        self._check_holds(m, "the end")
        for c in self.commits:
            if c.forfeited == "crash":
                self.res.crash_losses += 1


def run_acting_seed(
    seed: int,
    bug: str | None = None,
    *,
    trace: bool = False,
    clean: bool = False,
    cfg: ActingConfig | None = None,
    revert: str | None = None,
) -> ActingResult:
    """One seed; `bug` injects a deliberate bug (`ACTING_BUGS`), `revert` puts back the code
    one fix replaced (`FIX_REVERTS`)."""
    with ExitStack() as stack:
        if bug is not None:
            stack.enter_context(ACTING_BUGS[bug][0]())
        if revert is not None:
            stack.enter_context(FIX_REVERTS[revert][0]())
        return ActingSim(seed, cfg, trace=trace, clean=clean).run()


def replay_command(seed: int, bug: str | None = None, revert: str | None = None) -> str:
    cmd = f"python -m rmq_ha.sim --acting --seed {seed} --trace"
    return cmd + (f" --acting-bug {bug}" if bug else "") + (f" --revert {revert}" if revert else "")
