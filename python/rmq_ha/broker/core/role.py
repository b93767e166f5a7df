"""The broker's role, pure: `RoleCore.step(event, now_ms) -> [action]`.

One record (`RoleState`) holds everything that decides what a broker may do — master or slave,
its epoch and master, why it is fenced, whether it acts for a dead master, whether it is still
pre-online or fenced by FMQ — and one place (`step`) changes it. There is no Trio, no clock and
no I/O here: the Trio shell (broker/broker.py and broker/io/) turns sockets, timers and the
store into events and executes the actions; the simulator (rmq_ha.sim) runs the same core
against the real controller. `HaCore` (the master's replication bookkeeping) is part of it:
acks, connections and SyncStateSet answers go through `step` too.

Modes (reference 2.10-2.12, 4.x; docs/ha.md, docs/acting-master.md):

* **Controller mode** (RIP-44): the broker starts with no role, fenced (no writes, no
  registration). The controller's answers and notices (`MasterInfo`) make it master (append
  the epoch at its max offset, SyncStateSet from the controller, special services, register)
  or slave (find the master's HA address, follow it). A replica that owes a catch-up (it lost
  data it held, issue 13) refuses to lead and asks for an election instead. While the group
  has no master it asks for one every `elect_retry_ms`.
* **Classic mode**: brokerId 0 is the master (epoch 1, one more at each start), others slaves
  following the master's HA address. With slave acting master (RIP-32) the smallest live
  slave acts for a dead master (special services, master-only reads), pre-online isolates a
  starting broker until it pulled back what its slaves changed, and FMQ fencing
  (`fenceWhenIsolated`) stops a master that hears from no name server and no slave.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from enum import Enum

from rmq_ha.broker.core import actions as a
from rmq_ha.broker.core import events as e
from rmq_ha.broker.ha.catchup import UNKNOWN_OFFSET, CatchUp
from rmq_ha.broker.ha.core import HaCore

MASTER_ID = 0
CLASSIC_EPOCH = 1
#: A proposal the controller neither accepted nor refused is dropped after this long (when
#: the replica-info poll shows it was not committed), so the master can propose again.
PROPOSAL_STALE_MS = 10_000
#: Pre-online: how long a master waits for a slave's HA connection before pulling its
#: metadata anyway, and how long before a failed round is tried again.
PRE_ONLINE_HA_WAIT_MS = 10_000
#: A master that may have been replaced by an acting slave (back from isolation, or after a
#: long silence of the name servers) runs no special service until it pulled every live
#: slave's metadata back, at most this long (then it starts them with a WARNING).
RECLAIM_WAIT_MS = 30_000
PRE_ONLINE_RETRY_MS = 1_000
#: A slave that handed back to a returning master (906 during the master's pre-online) does
#: not act again for this long while the name servers still lack the master: the master is
#: not registered until its pre-online ends (each push renews it).
HAND_BACK_HOLD_MS = 3 * PRE_ONLINE_HA_WAIT_MS

INFO, WARNING, ERROR = logging.INFO, logging.WARNING, logging.ERROR


class Role(Enum):
    NONE = "NONE"  # controller mode, before the controller gave a role
    MASTER = "MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True)
class RoleConfig:
    """The part of the broker config the role depends on."""

    controller_mode: bool
    #: brokerId (classic); in controller mode the id comes with `IdAssigned`.
    broker_id: int = 0
    classic_slave: bool = False
    #: Classic SYNC_MASTER: producers wait for one slave whatever inSyncReplicas says.
    sync_master: bool = True
    all_ack: bool = True
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    max_not_catchup_ms: int = 15_000
    check_sync_state_set_period_ms: int = 5_000
    elect_retry_ms: int = 1_000
    ha_master_address: str | None = None
    #: Slave acting master (classic mode only).
    acting_master: bool = False
    #: Pre-online isolation at start (acting master, totalReplicas > 1, not skipPreOnline).
    pre_online: bool = False
    #: FMQ fencing (classic master): refuse the data plane when isolated this long.
    fence_when_isolated: bool = False
    isolation_timeout_ms: int = 10_000

    @property
    def fence_after_ms(self) -> int:
        """Name-server silence after which a classic master fences (FMQ) and an acting slave
        stops acting: half the isolation timeout, so it happens before any name server can
        have dropped this broker (they drop a heartbeat brokerNotActiveTimeout old) and
        before another replica acts in its place, also with clocks 10% apart and an answer
        that came late (found by the acting-master simulator, issue 14)."""
        return self.isolation_timeout_ms // 2

    has_namesrv: bool = True
    #: totalReplicas: the replicas of the group (acting master: others may act for us).
    total_replicas: int = 1


@dataclass
class PreOnline:
    """Where a starting broker is in pre-online (RocketMQ's BrokerPreOnlineService)."""

    #: "fetch" (member group asked) | "push" (906 sent to `slave`) | "wait" (for its HA
    #: connection) | "sync" (metadata pulled) | "ask" (a slave: master's HA address asked) |
    #: "follow" (a slave: waiting to follow) | "retry" (a round failed; again at `retry_at`).
    phase: str = "fetch"
    members: dict[int, str] = field(default_factory=dict)
    queue: list[int] = field(default_factory=list)
    slave: int | None = None
    deadline_ms: int = 0
    retry_at_ms: int = 0
    master_addr: str | None = None
    #: The slave was given our HA address again after its wait ran out (pull at once).
    repushed: bool = False


@dataclass
class RoleState:
    """Everything that decides what this broker may do, in one record."""

    role: Role
    #: This replica's id: brokerId (classic) or the controller-assigned id (None until then).
    self_id: int | None
    #: The master epoch this broker leads or follows.
    epoch: int = 0
    master_id: int | None = None
    #: The group's master (remoting address) as this broker knows it (None: itself / unknown).
    master_addr: str | None = None
    #: The HA address the slave follows (None: not following), and whether its HA client
    #: reached TRANSFER with it (SlaveFollowing, once per connection).
    following: str | None = None
    transferring: bool = False
    #: Why writes and registration are refused (None: not fenced). Controller mode, and a
    #: classic SYNC_MASTER that lost data it had made durable (it never takes the role).
    fence: str | None = None
    #: Classic: this slave acts for the group's dead master (RIP-32).
    acting: bool = False
    #: Pre-online: not registered, no heartbeats, no special services yet.
    pre_online: PreOnline | None = None
    #: FMQ: an isolated classic master refusing the data plane.
    isolated_fence: bool = False
    #: Controller mode: the group has no master; ask for an election until one exists.
    masterless: bool = False
    #: The group's smallest live id and its address, as last learned (classic, acting).
    min_broker: tuple[int, str | None] | None = None
    #: The group's live replicas from the last member-group answer (id -> address).
    members: dict[int, str] = field(default_factory=dict)
    #: What the replica must catch up to before it may lead (issue 13).
    catch_up: CatchUp | None = None
    #: The special services, as the core last asked for them.
    special: bool = False
    #: This broker's remoting address.
    address: str = ""
    #: The local log's end and confirm offset, and the epoch file's last entry, as last known.
    log_max: int = 0
    confirm: int = 0
    last_epoch: int | None = None
    last_epoch_start: int = 0
    #: Why the commitlog's disk is too full to write (None: it is not), from `DiskFull`.
    disk_full: str | None = None
    #: Classic: a returning master pushed its HA address (its pre-online); until this time
    #: (local ms) a member group without it does not make this slave act again.
    hand_back_until_ms: int | None = None
    #: Classic master with acting master, online: the slaves whose metadata it pulled back
    #: since it last may have been replaced (pre-online, or a hand-back after isolation); a
    #: live member not in it is handed back (906, then its metadata pulled) while online.
    pulled: set[int] = field(default_factory=set)
    #: The slave being handed back now (None: none).
    hand_back: int | None = None
    #: Set when `pulled` was reset because a slave may have acted meanwhile: until every live
    #: slave is pulled back (or this local time), the special services stay stopped. Run on
    #: the master's stale delay progress they delivered again every delayed message the
    #: acting slave had delivered (a probe: 12 of 12 after a SIGSTOP/SIGCONT of the master).
    reclaim_until_ms: int | None = None
    #: Classic slave with acting master: the master whose 906 it last took. It copies that
    #: master's offsets and delay progress only then (the master pulls ours right after its
    #: 906): a restarted master that went online before it knew this slave had lost what it
    #: had not persisted, and the slave's copy was overwritten before the master pulled it
    #: (found by the acting-master simulator, seed 657).
    handed_back_by: str | None = None
    #: Classic slave holding for a returning master: a 905 said that master went offline,
    #: and the master was asked (906) whether it is alive; the 905 is acted on only if it
    #: does not answer (the name servers may have dropped an earlier registration of a
    #: master that restarted and is in pre-online now).
    hold_probe: e.MinBrokerChanged | None = None


def _held(debt: CatchUp) -> str:
    return "an unknown amount" if debt.offset == UNKNOWN_OFFSET else f"up to {debt.offset}"


class RoleCore:
    def __init__(self, cfg: RoleConfig, catch_up: CatchUp | None = None) -> None:
        self.cfg = cfg
        self.state = RoleState(
            role=Role.NONE if cfg.controller_mode else Role.SLAVE,
            self_id=None if cfg.controller_mode else cfg.broker_id,
            fence="waiting for the controller to assign a role" if cfg.controller_mode else None,
            catch_up=catch_up,
        )
        self.ha = self._new_ha(frozenset(), 0)
        self._last_elect_ms: int | None = None
        self._last_shrink_ms = 0
        self._proposed_at_ms = 0
        self._namesrv_ms = 0
        self._slave_ack_ms: int | None = None

    # ---- what the data plane and the shell read -------------------------------------------

    @property
    def is_master(self) -> bool:
        return self.state.role is Role.MASTER

    @property
    def serving_master(self) -> bool:
        """A master that takes writes: not fenced for any reason."""
        s = self.state
        return s.role is Role.MASTER and s.fence is None and not s.isolated_fence

    @property
    def isolated(self) -> bool:
        return self.state.pre_online is not None

    @property
    def acting(self) -> bool:
        return self.state.acting

    @property
    def data_plane_fenced(self) -> bool:
        return self.state.isolated_fence

    @property
    def copies_metadata(self) -> bool:
        """Whether a slave's periodic metadata sync may copy its master's consumer offsets
        and delay progress now."""
        s = self.state
        if s.role is not Role.SLAVE or s.acting or not s.master_addr:
            return False
        if not self.cfg.acting_master:
            return True
        # After its 906, and once the name servers list it (a master registers after its
        # pre-online pulls, so its table holds ours by then).
        return s.handed_back_by == s.master_addr and s.hand_back_until_ms is None

    @property
    def group_members(self) -> dict[int, str]:
        return self.state.members

    @property
    def registers(self) -> bool:
        """Whether the broker registers with name servers now (not fenced, not pre-online)."""
        return self.state.fence is None and self.state.pre_online is None

    @property
    def runtime_broker_id(self) -> int:
        """The id announced to name servers: 0 for a controller-mode master."""
        s = self.state
        if self.cfg.controller_mode:
            return MASTER_ID if s.role is Role.MASTER else (s.self_id or 0)
        return self.cfg.broker_id

    def write_refusal(self) -> tuple[str, str] | None:
        """Why a write must be refused now: ("fenced" | "slave" | "disk-full" | "in-sync",
        remark), or None.
        Refused before anything is stored (never half done)."""
        s = self.state
        if s.fence is not None:
            return "fenced", f"the broker is fenced: {s.fence}"
        if s.isolated_fence:
            return "fenced", "this master is fenced: it reaches no name server and no slave"
        if s.role is not Role.MASTER:
            return "slave", "the broker is a slave, so putMessage is forbidden (send to the master)"
        if s.disk_full is not None:
            # RocketMQ's answer while the store is not writeable because the disk is full.
            return "disk-full", (
                "service not available now: the broker's disk is full "
                f"({s.disk_full}); writes resume once retention frees space"
            )
        if self.ha.in_sync_count() < self.cfg.min_in_sync_replicas:
            return "in-sync", (
                f"in-sync replicas not enough: {self.ha.in_sync_count()} < "
                f"minInSyncReplicas {self.cfg.min_in_sync_replicas}"
            )
        return None

    # ---- the step -------------------------------------------------------------------------

    def step(self, event: e.Event, now_ms: int) -> list[a.Action]:
        out: list[a.Action] = []
        if not isinstance(event, e.Started | e.Tick):
            self._isolation_first(now_ms, out)
        match event:
            case e.Started():
                self._started(event, now_ms, out)
            case e.Tick():
                self._tick(now_ms, out)
            case e.LogGrew():
                self.state.confirm = event.confirm_offset
                self._log_grew(event.max_offset, out)
            case e.DiskFull():
                self._disk_full(event, out)
            case e.IdAssigned():
                self.state.self_id = event.broker_id
                self.ha.self_id = event.broker_id
            case e.MasterInfo():
                self._master_info(event, now_ms, out)
            case e.EpochAppendFailed():
                s = self.state
                s.last_epoch, s.last_epoch_start = event.last_epoch, event.last_epoch_start
                if (
                    not self.cfg.controller_mode
                    and s.role is Role.MASTER
                    and event.last_epoch is not None
                ):
                    # A classic master's new epoch at start (a full disk): it goes on in the
                    # epoch the file has, as it always did before it started new ones.
                    s.epoch = event.last_epoch
                    out.append(
                        a.Log(
                            WARNING,
                            f"cannot start epoch {event.epoch} ({event.why}): going on in "
                            f"epoch {event.last_epoch}; a slave holding bytes this master "
                            "lost before its restart is not cut at its handshake",
                        )
                    )
                else:
                    self._cannot_lead(f"cannot start epoch {event.epoch}: {event.why}", out)
            case e.MasterHaFound():
                s = self.state
                if s.role is Role.SLAVE and event.epoch == s.epoch and not s.acting:
                    self._follow(event.ha_addr, out)
            case e.ProposalAnswered():
                self._proposal_answered(event, now_ms, out)
            case e.SlaveConnected():
                # A new HA connection: the slave may have restarted, and acted, since we
                # pulled its metadata; it is handed back again (found by the acting-master
                # simulator, seed 1274).
                self.state.pulled.discard(event.broker_id)
                self.ha.connected(event.broker_id, event.async_learner, now_ms)
                self._pre_online_slave_connected(event.broker_id, out)
            case e.SlaveDisconnected():
                self.ha.disconnected(event.broker_id)
                out.append(a.WakeProducers())
            case e.Transferring():
                self.ha.transferring(event.broker_id, event.master_max, now_ms)
            case e.SlaveIdle():
                self.ha.idle(event.broker_id, now_ms)
            case e.SlaveAcked():
                self._slave_acked(event, now_ms, out)
            case e.NamesrvAnswered():
                self._namesrv_answered(event, now_ms, out)
            case e.MinBrokerChanged():
                self._probe_hold(event, now_ms, out)
                self._min_broker_changed(event, now_ms, out)
            case e.MemberGroup():
                self._member_group(event, now_ms, out)
            case e.HaInfoPushed():
                self._ha_info_pushed(event, now_ms, out)
            case e.MasterHaAnswered():
                self._master_ha_answered(event, now_ms, out)
            case e.MasterPushedHa():
                self._master_pushed_ha(event, now_ms, out)
            case e.SlaveFollowing():
                self._slave_following(event, out)
            case e.ReverseSynced():
                self._reverse_synced(event, now_ms, out)
        self._reconcile_special(out)
        return out

    # ---- life cycle -----------------------------------------------------------------------

    def _started(self, ev: e.Started, now_ms: int, out: list[a.Action]) -> None:
        s, cfg = self.state, self.cfg
        s.address, s.log_max, s.confirm = ev.address, ev.max_offset, ev.confirm_offset
        s.last_epoch, s.last_epoch_start = ev.last_epoch, ev.last_epoch_start
        self._namesrv_ms = now_ms
        if s.catch_up is not None and ev.max_offset >= s.catch_up.offset:
            self._caught_up(out)
        if cfg.controller_mode:
            out.append(a.Log(INFO, f"fenced: {s.fence}"))
            return
        if not cfg.classic_slave and s.catch_up is not None and cfg.sync_master:
            # A classic SYNC_MASTER that lost bytes it had made durable (or cannot tell: its
            # checkpoint is gone) must not take the role: every write it acknowledged is on a
            # slave, which would cut those bytes at its handshake to follow it. Classic mode
            # has no election to hand the role to a replica that has them, so it stays down,
            # unregistered and serving no slave, until an operator decides (docs/ha.md); an
            # acting slave serves reads meanwhile. An ASYNC_MASTER (its writes need no slave,
            # it may well have none) goes on as master with what it has, as it did.
            s.fence = (
                f"classic master lost data ({s.catch_up.reason}): its log ends at "
                f"{ev.max_offset}, it held {_held(s.catch_up)}"
            )
            out.append(
                a.Log(
                    ERROR,
                    f"{s.fence}. Not taking the master role: its slaves may hold the lost "
                    "bytes and would cut them to follow it. Make a slave that holds them the "
                    "master (docs/ha.md, 'A classic master that lost data'), or accept the "
                    "loss: stop this broker, delete haCatchUp, start it",
                )
            )
            return
        if not cfg.classic_slave:
            # A new epoch at every start (the first is 1). With one epoch for ever, a master
            # that lost unflushed bytes and wrote past a slave's end before it connected left
            # the slave's copies of the lost bytes under its new ones (nothing was cut: same
            # epoch), and every transfer after failed (probe). Now the slave's bytes past this
            # start are of an epoch the master no longer has, and its handshake cuts them.
            # An epoch that got no byte is replaced by the next (the epoch file, #9689).
            epoch = CLASSIC_EPOCH if s.last_epoch is None else s.last_epoch + 1
            out.append(a.AppendEpoch(epoch, ev.max_offset))
            s.last_epoch, s.last_epoch_start = epoch, ev.max_offset
            s.role, s.epoch, s.master_id = Role.MASTER, epoch, cfg.broker_id
            self.ha = self._new_ha(frozenset({cfg.broker_id}), 0)
        else:
            s.role = Role.SLAVE
            if cfg.ha_master_address:
                self._follow(cfg.ha_master_address, out)
        if cfg.pre_online:
            s.pre_online = PreOnline()
            out.append(a.Log(INFO, f"id {cfg.broker_id} pre-online (isolated)"))
            out.append(a.FetchMemberGroup())
            return
        if cfg.acting_master:
            # Assume a master until the name servers say otherwise.
            mine = cfg.broker_id == MASTER_ID
            self._set_min(MASTER_ID, s.address if mine else None, out)

    def _disk_full(self, ev: e.DiskFull, out: list[a.Action]) -> None:
        s = self.state
        if ev.full and s.disk_full is None:
            out.append(a.Log(ERROR, f"disk full ({ev.why}): refusing writes"))
        elif not ev.full and s.disk_full is not None:
            out.append(a.Log(WARNING, f"disk usage back to {ev.why}: accepting writes again"))
            out.append(a.WakeProducers())
        s.disk_full = ev.why if ev.full else None

    def _tick(self, now_ms: int, out: list[a.Action]) -> None:
        s, cfg = self.state, self.cfg
        if s.reclaim_until_ms is not None and now_ms >= s.reclaim_until_ms:
            s.reclaim_until_ms = None
            late = sorted(i for i in s.members if i != MASTER_ID and i not in s.pulled)
            out.append(
                a.Log(
                    WARNING,
                    f"special services start without the metadata of slaves {late} (not pulled "
                    f"back in {RECLAIM_WAIT_MS // 1000} s): delayed messages they delivered "
                    "while acting may be delivered again",
                )
            )
        if cfg.controller_mode and s.masterless and s.self_id is not None:
            if self._last_elect_ms is None or now_ms - self._last_elect_ms >= cfg.elect_retry_ms:
                self._last_elect_ms = now_ms
                out.append(a.RequestElection())
        if (
            s.role is Role.MASTER
            and now_ms - self._last_shrink_ms >= cfg.check_sync_state_set_period_ms
        ):
            self._last_shrink_ms = now_ms
            proposal = self.ha.maybe_shrink(now_ms) or self.ha.maybe_expand()
            if proposal is not None:
                self._propose(proposal, now_ms, out)
        self._fmq_check(now_ms, out)
        p = s.pre_online
        if p is not None:
            if p.phase == "retry" and now_ms >= p.retry_at_ms:
                p.phase = "fetch"
                s.pulled = set()  # a new round pulls every slave again
                out.append(a.FetchMemberGroup())
            elif p.phase == "wait" and now_ms >= p.deadline_ms and p.slave is not None:
                out.append(
                    a.Log(
                        WARNING,
                        f"pre-online: slave {p.slave} has no HA connection after "
                        f"{PRE_ONLINE_HA_WAIT_MS // 1000} s; taking its metadata anyway",
                    )
                )
                # 906 again first: the slave may have restarted and be acting again since
                # it took the first one, and must stop before its metadata is pulled
                # (found by the acting-master simulator, issue 14).
                p.phase, p.repushed = "push", True
                out.append(a.PushHaInfo(p.slave, p.members[p.slave]))
            elif p.phase == "follow" and now_ms >= p.deadline_ms:
                self._pre_online_retry(p, now_ms, "the master did not start transferring", out)

    def _log_grew(self, max_offset: int, out: list[a.Action]) -> None:
        s = self.state
        s.log_max = max_offset
        if s.catch_up is not None and max_offset >= s.catch_up.offset:
            self._caught_up(out)
        if s.role is Role.MASTER and self.cfg.controller_mode:
            self._push_confirm(out)

    def _caught_up(self, out: list[a.Action]) -> None:
        debt = self.state.catch_up
        assert debt is not None
        self.state.catch_up = None
        out.append(a.ClearCatchUp())
        out.append(
            a.Log(
                WARNING,
                f"caught up to {debt.offset} ({debt.reason}): this replica may be elected again",
            )
        )

    # ---- controller mode ------------------------------------------------------------------

    def _master_info(self, m: e.MasterInfo, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        if m.master_id is None and m.epoch is not None and m.epoch < s.epoch:
            # An answer written before a later epoch we already know (a REGISTER answer read
            # after the notice that made us master): the group is not masterless now.
            return
        if m.master_id is None or m.epoch is None:
            s.masterless = True
            if m.source == "poll":
                self._last_elect_ms = now_ms
                out.append(a.RequestElection())
            return
        s.masterless = False
        if m.source == "poll" and m.epoch <= s.epoch:
            # The periodic poll only reconciles the set of the master we already are.
            if s.role is Role.MASTER and m.master_id == s.self_id:
                if m.sync_state_set_epoch > self.ha.sync_state_set_epoch:
                    self._apply_set(m.sync_state_set, m.sync_state_set_epoch, out)
                elif (
                    self.ha.proposed is not None
                    and now_ms - self._proposed_at_ms > PROPOSAL_STALE_MS
                ):
                    self.ha.cancel_proposal()
            return
        if m.master_id == s.self_id:
            self._lead(m, out)
        elif m.epoch >= s.epoch:
            self._follow_master(m, out)

    def _lead(self, m: e.MasterInfo, out: list[a.Action]) -> None:
        s = self.state
        assert m.epoch is not None
        if m.epoch <= s.epoch:
            # A notice no newer than what we know: as master, its SyncStateSet may be; as
            # slave of a later epoch it is stale and must not make us master again.
            if s.role is Role.MASTER and m.sync_state_set_epoch > self.ha.sync_state_set_epoch:
                self._apply_set(m.sync_state_set, m.sync_state_set_epoch, out)
            return
        if s.last_epoch is not None and m.epoch < s.last_epoch:
            out.append(
                a.Log(WARNING, f"ignoring master epoch {m.epoch} below our last {s.last_epoch}")
            )
            return
        if s.catch_up is not None:
            self._cannot_lead(
                f"elected master in epoch {m.epoch}, but this replica's log ends at "
                f"{s.log_max}, below what it held ({s.catch_up.reason}); it must catch up to "
                f"{s.catch_up.offset} from a replica that has the data first",
                out,
            )
            return
        was_master = s.role is Role.MASTER
        if not was_master and m.epoch == s.last_epoch:
            # Restarted and named master of the epoch we led before (the controller had not
            # noticed): appending that epoch again at today's end would move its earlier bytes
            # into the previous epoch, and keeping it would let a torn tail put other bytes
            # under the same epoch than the slaves hold. Ask for a new one (found by the group
            # simulator, issue 14; the controller re-elects a master that asks).
            s.masterless = True
            s.fence = f"restarted as master of epoch {m.epoch}: asking for a new epoch"
            out.append(a.RequestElection())
            out.append(
                a.Log(
                    INFO,
                    f"named master of epoch {m.epoch}, which this broker led before it "
                    "restarted: asking the controller for a new epoch",
                )
            )
            return
        start = s.log_max
        s.role, s.epoch, s.master_id, s.master_addr = Role.MASTER, m.epoch, s.self_id, None
        s.fence, s.last_epoch, s.last_epoch_start = None, m.epoch, start
        self._follow(None, out)
        out.append(a.AppendEpoch(m.epoch, start))
        if was_master:
            # Master again in a new epoch (changeToMasterWhenLastRoleIsMaster): the slaves'
            # connections stay, and so does what we know of their acks.
            self.ha.sync_state_set = frozenset(m.sync_state_set)
            self.ha.sync_state_set_epoch = m.sync_state_set_epoch
            self.ha.proposed = None
        else:
            self.ha = self._new_ha(frozenset(m.sync_state_set), m.sync_state_set_epoch)
        self.ha.epoch_start_offset = start
        self.ha.epoch = m.epoch
        self._push_confirm(out)
        out.append(a.AdoptTopicsFromLog())
        out.append(a.BumpDataVersion(m.epoch))
        self._reconcile_special(out)
        out.append(a.Register())
        out.append(a.RefreshReplicaAddrs())
        out.append(
            a.Log(
                INFO,
                f"became master: epoch {m.epoch}, SyncStateSet {sorted(m.sync_state_set)} "
                f"(epoch {m.sync_state_set_epoch}), max offset {start}",
            )
        )

    def _cannot_lead(self, why: str, out: list[a.Action]) -> None:
        """Stay up, fenced when we have no role, and ask for an election: the heartbeat tells
        the controller why (issue 13)."""
        s = self.state
        if s.role is Role.MASTER:
            s.role = Role.NONE
            out.append(a.DropSlaves())
        if s.role is Role.NONE:
            s.fence = why
        s.masterless = True
        out.append(a.Log(ERROR, f"refusing to become master: {why}"))

    def _follow_master(self, m: e.MasterInfo, out: list[a.Action]) -> None:
        s = self.state
        same = s.role is Role.SLAVE and m.epoch == s.epoch and m.master_id == s.master_id
        if same and s.fence is None:
            return
        was_master = s.role is Role.MASTER
        s.role, s.epoch = Role.SLAVE, max(s.epoch, m.epoch or 0)
        s.master_id, s.master_addr, s.fence = m.master_id, m.master_addr, None
        if was_master:
            out.append(a.DropSlaves())
        # Stop following the previous master: FindMasterHa looks for the new one only while
        # nothing is followed, so a slave moved to another master kept following the old one
        # until a name server's answer named the new one (found by the group simulator).
        self._follow(None, out)
        out.append(a.BumpDataVersion(s.epoch))
        self._reconcile_special(out)
        out.append(a.Log(INFO, f"became slave of {m.master_id} in epoch {s.epoch}"))
        if m.master_addr is not None:
            out.append(a.FindMasterHa(m.master_addr, s.epoch))

    def _apply_set(self, members: frozenset[int], ss_epoch: int, out: list[a.Action]) -> None:
        if self.ha.apply_set(frozenset(members), ss_epoch, self.state.log_max):
            self._push_confirm(out)
            out.append(a.WakeProducers())
            out.append(a.Log(INFO, f"SyncStateSet is now {sorted(members)} (epoch {ss_epoch})"))

    def _propose(self, members: frozenset[int], now_ms: int, out: list[a.Action]) -> None:
        """A SyncStateSet change: reported to the controller (applied when accepted); classic
        mode has nobody to ask, so its in-sync view applies at once."""
        if not self.cfg.controller_mode:
            self._apply_set(members, self.ha.sync_state_set_epoch + 1, out)
            return
        self._proposed_at_ms = now_ms
        out.append(a.ProposeSyncStateSet(members, self.state.epoch, self.ha.sync_state_set_epoch))

    def _proposal_answered(self, ev: e.ProposalAnswered, now_ms: int, out: list[a.Action]) -> None:
        if ev.unknown:
            return  # keep the union until the replica-info poll tells
        if ev.accepted and ev.sync_state_set_epoch > self.ha.sync_state_set_epoch:
            self._apply_set(ev.members, ev.sync_state_set_epoch, out)
        elif not ev.accepted:
            self.ha.cancel_proposal(refused_at_ms=now_ms)

    # ---- replication (master side) ---------------------------------------------------------

    def _slave_acked(self, ev: e.SlaveAcked, now_ms: int, out: list[a.Action]) -> None:
        self._slave_ack_ms = now_ms
        proposal = self.ha.acked(ev.broker_id, ev.ack, ev.master_max, now_ms)
        if self.cfg.controller_mode:
            self._push_confirm(out)
        out.append(a.WakeProducers())
        if proposal is not None and self.state.role is Role.MASTER:
            self._propose(proposal, now_ms, out)

    def _push_confirm(self, out: list[a.Action]) -> None:
        """The confirm offset (controller mode) as HaCore computes it, when it is above the
        store's: the dispatcher then makes more visible (parked pulls re-check)."""
        s = self.state
        self.ha.recompute_confirm(s.log_max)
        if self.cfg.controller_mode and self.ha.confirm > s.confirm:
            s.confirm = self.ha.confirm
            out.append(a.SetConfirm(self.ha.confirm))
            out.append(a.WakePulls())

    def _new_ha(self, members: frozenset[int], ss_epoch: int) -> HaCore:
        cfg = self.cfg
        self_id = self.state.self_id
        core = HaCore(
            self_id=self_id if self_id is not None else cfg.broker_id,
            all_ack=cfg.all_ack and cfg.controller_mode,
            # A classic SYNC_MASTER waits for one slave whatever inSyncReplicas says.
            in_sync_replicas=cfg.in_sync_replicas
            if cfg.controller_mode or not cfg.sync_master
            else max(2, cfg.in_sync_replicas),
            min_in_sync_replicas=cfg.min_in_sync_replicas if cfg.controller_mode else 1,
            max_not_catchup_ms=cfg.max_not_catchup_ms,
            sync_state_set=members,
            sync_state_set_epoch=ss_epoch,
        )
        # Never below what the store already exposes (a member without a connection keeps
        # the previous value, #6662).
        core.confirm = self.state.confirm
        return core

    # ---- classic: following, acting master, FMQ --------------------------------------------

    def _follow(self, ha_addr: str | None, out: list[a.Action]) -> None:
        if self.state.following != ha_addr:
            self.state.following = ha_addr
            self.state.transferring = False
            out.append(a.Follow(ha_addr))

    def _namesrv_answered(self, ev: e.NamesrvAnswered, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        self._namesrv_contact(now_ms, out)
        if s.role is not Role.SLAVE or s.acting or not ev.master_ha_addr:
            return
        if self.cfg.controller_mode:
            # Only the controller's master is followed.
            if ev.master_addr is not None and ev.master_addr == s.master_addr:
                self._follow(ev.master_ha_addr, out)
            return
        if ev.master_addr:
            s.master_addr = ev.master_addr
        self._follow(ev.master_ha_addr, out)

    def _min_broker_changed(self, ev: e.MinBrokerChanged, now_ms: int, out: list[a.Action]) -> None:
        """RocketMQ's onMinBrokerChange (slaves only): start or stop acting; forget a master
        that went offline; follow a master that came back."""
        s, cfg = self.state, self.cfg
        if not cfg.acting_master or s.pre_online is not None or cfg.broker_id == MASTER_ID:
            return
        if ev.min_id == MASTER_ID:
            s.hand_back_until_ms = None
        elif s.hand_back_until_ms is not None:
            if now_ms < s.hand_back_until_ms:
                return  # the returning master is in pre-online, not registered yet
            s.hand_back_until_ms = None
        if ev.min_id != MASTER_ID:
            s.handed_back_by = None  # the master is gone: when it is back, it pulls us first
        if s.min_broker == (ev.min_id, ev.min_addr):
            return
        out.append(
            a.Log(
                INFO,
                f"smallest live id {ev.min_id} at {ev.min_addr} (was {s.min_broker}; "
                f"offline {ev.offline_addr})",
            )
        )
        s.min_broker = (ev.min_id, ev.min_addr)
        if ev.offline_addr is not None and ev.offline_addr == s.master_addr:
            out.append(a.CloseConnection(ev.offline_addr))
            self._follow(None, out)
            s.master_addr = None
        self._set_acting(ev.min_id == cfg.broker_id, out)
        if ev.min_id == MASTER_ID and ev.min_addr:
            s.master_addr = ev.min_addr
            if ev.ha_addr:
                self._follow(ev.ha_addr, out)
            else:
                out.append(a.AskMasterHa(ev.min_addr))
            out.append(a.WakePulls())

    def _master_pushed_ha(self, ev: e.MasterPushedHa, now_ms: int, out: list[a.Action]) -> None:
        """A returning master's pre-online (906): follow it (also while acting: its log is the
        group's, an acting slave never wrote to its own), and stop acting before it pulls our
        metadata back: what an acting slave acknowledged after that pull would be lost at the
        hand-back. Until the master is registered (or `HAND_BACK_HOLD_MS` passed without a
        new push) the name servers still lack it, and that must not make us act again (both
        found by the acting-master simulator, issue 14)."""
        s = self.state
        if s.role is not Role.SLAVE:
            return
        if ev.master_addr:
            s.master_addr = ev.master_addr
        if self.cfg.acting_master:
            s.handed_back_by = ev.master_addr
            s.hold_probe = None  # it is alive
            # The name servers may not list the master yet (its pre-online): until a view
            # lists it, one without it does not make us act (a slave that had not noticed the
            # master's death acted on the first such view, after the master pulled it; found
            # by the acting-master simulator, seed 605). A name server's 905 saying the master
            # went offline ends it: only a registered master goes offline.
            s.hand_back_until_ms = now_ms + HAND_BACK_HOLD_MS
            if s.acting:
                s.min_broker = (MASTER_ID, ev.master_addr)
                out.append(a.Log(INFO, "the master is back (pre-online): stop acting for it"))
                self._set_acting(False, out)
        self._follow(ev.ha_addr, out)

    def _set_min(self, min_id: int, min_addr: str | None, out: list[a.Action]) -> None:
        self.state.min_broker = (min_id, min_addr)
        if self.cfg.broker_id != MASTER_ID:
            self._set_acting(min_id == self.cfg.broker_id, out)

    def _set_acting(self, acting: bool, out: list[a.Action]) -> None:
        s = self.state
        if acting == s.acting:
            return
        s.acting = acting
        if acting:
            # What changes while acting must look newer than the master's copy whether or
            # not a metadata sync ran since the last version bump (pre-online takes it back).
            out.append(a.ArmVersionBump())
            # Serve every queue in the log, also of topics whose config never reached us.
            out.append(a.AdoptTopicsFromLog())
            self._follow(None, out)
            out.append(
                a.Log(WARNING, f"id {self.cfg.broker_id} acts as master (its master is gone)")
            )
        else:
            out.append(a.Log(INFO, f"id {self.cfg.broker_id} stops acting as master"))
        self._reconcile_special(out)

    def _probe_hold(self, ev: e.MinBrokerChanged, now_ms: int, out: list[a.Action]) -> None:
        """A 905 saying the master we hold for went offline. Only a registered master goes
        offline, but the registration may be one from before the master restarted: a master
        in pre-online is not registered, and the name servers drop its old registration when
        it expires. Acting on that 905 at once, a slave acted while the master pulled its
        metadata (found by the acting-master simulator, seeds 1478 and 2649). So ask the
        master (906): it answers if it is alive, in pre-online or online; if it does not, it
        died after handing us back and we act now, not at the end of the hold."""
        s = self.state
        if not ev.offline_addr or ev.offline_addr != s.master_addr:
            return
        if s.hand_back_until_ms is None:
            return
        if s.pre_online is not None or now_ms >= s.hand_back_until_ms:
            s.hand_back_until_ms = None
            return
        if s.hold_probe is None:
            out.append(
                a.Log(INFO, f"905: master {ev.offline_addr} offline while held for: asking it")
            )
            out.append(a.AskMasterHa(ev.offline_addr))
        s.hold_probe = ev

    def _probe_answered(self, ev: e.MasterHaAnswered, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        probe = s.hold_probe
        if probe is None or ev.master_addr != probe.offline_addr:
            return
        s.hold_probe = None
        if s.hand_back_until_ms is None:
            return  # a newer view decided meanwhile
        if ev.ha_addr:
            out.append(a.Log(INFO, f"master {ev.master_addr} answers: still holding for it"))
            return
        out.append(a.Log(INFO, f"master {ev.master_addr} does not answer: the 905 stands"))
        s.hand_back_until_ms = None
        self._min_broker_changed(probe, now_ms, out)

    def _master_ha_answered(self, ev: e.MasterHaAnswered, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        p = s.pre_online
        if p is None or p.phase != "ask":
            self._probe_answered(ev, now_ms, out)
        if p is not None and p.phase == "ask":
            if not ev.ha_addr:
                self._pre_online_retry(p, now_ms, "the master gave no HA address", out)
                return
            s.master_addr = ev.master_addr
            self._follow(ev.ha_addr, out)
            p.phase, p.deadline_ms = "follow", now_ms + PRE_ONLINE_HA_WAIT_MS
            if s.transferring:
                # Already transferring from it (since an earlier round): the HA client says
                # so only once per connection, and a slave waited for it for ever (found by
                # the acting-master simulator, seed 1449).
                self._online(MASTER_ID, p.master_addr, out)
            return
        if s.role is Role.SLAVE and not s.acting and ev.ha_addr and ev.master_addr == s.master_addr:
            self._follow(ev.ha_addr, out)

    def _fmq_check(self, now_ms: int, out: list[a.Action]) -> None:
        s, cfg = self.state, self.cfg
        if not cfg.fence_when_isolated or cfg.controller_mode:
            return
        if s.acting and now_ms - self._namesrv_ms > cfg.fence_after_ms:
            # An acting slave the name servers stopped hearing from has been dropped: a
            # returning master goes online without knowing it (found by the acting-master
            # simulator, issue 14). It stops acting and looks at the group again when a name
            # server answers.
            s.min_broker = None
            out.append(
                a.Log(
                    ERROR,
                    f"stops acting: no name server heard for {cfg.fence_after_ms} ms",
                )
            )
            self._set_acting(False, out)
            return
        if cfg.broker_id != MASTER_ID:
            return
        if self._slave_ack_ms is None and (not cfg.acting_master or cfg.total_replicas <= 1):
            # Never had a slave: nothing to be partitioned from. With acting master a slave
            # that starts later may act all the same (a restarted master that had not met
            # its slave yet never fenced; found by the acting-master simulator, seed 1030).
            return
        limit = cfg.fence_after_ms
        isolated = now_ms - self._namesrv_ms > limit
        if not cfg.acting_master:
            # A slave's acks keep the master up while every name server is away.
            acked = self._slave_ack_ms
            isolated = isolated and acked is not None and now_ms - acked > limit
        # With slave acting master, the name servers' view decides who acts: a master they
        # may have dropped fences whatever its slaves say (one of them may act while the
        # others still follow it; found by the acting-master simulator, issue 14).
        if isolated and not s.isolated_fence:
            s.isolated_fence = True
            heard = "no name server" if cfg.acting_master else "no name server and no slave"
            out.append(a.Log(ERROR, f"master fenced: {heard} heard for {limit} ms"))
        elif not isolated and s.isolated_fence:
            if cfg.acting_master and s.members.get(MASTER_ID) != s.address:
                # Serve again only once the name servers list us again (registered): until
                # then a slave may still act on their view (found by the acting-master
                # simulator, seed 9901).
                return
            s.isolated_fence = False
            s.pulled = set()  # a slave may have acted meanwhile: hand every slave back
            self._reclaim(now_ms)
            out.append(a.Log(WARNING, "master unfenced: contact is back"))

    def _isolation_first(self, now_ms: int, out: list[a.Action]) -> None:
        """Isolation is a matter of time, so any event may be the first after a long pause:
        it is decided before the event is acted on, not only at the next tick (a master resumed
        after a 20 s stop ran the special services beside two acting slaves until its tick;
        found by the acting-master simulator, seed 11070)."""
        self._fmq_check(now_ms, out)

    def _namesrv_contact(self, now_ms: int, out: list[a.Action]) -> None:
        """A name server answered. After a silence in which the name servers may have dropped
        this master (half the isolation timeout: the master counts from answers, the name
        server from heartbeats it got), a slave may have acted for it: every slave is handed
        back again (found by the acting-master simulator, issue 14)."""
        s = self.state
        silent = now_ms - self._namesrv_ms
        self._namesrv_ms = now_ms
        if (
            self.cfg.acting_master
            and s.role is Role.MASTER
            and s.pulled
            and silent > self.cfg.fence_after_ms
        ):
            out.append(
                a.Log(WARNING, f"no name server heard for {silent} ms: handing slaves back again")
            )
            s.pulled = set()
            self._reclaim(now_ms)

    def _reclaim(self, now_ms: int) -> None:
        """Every slave is handed back again: the special services wait for it."""
        if self.cfg.acting_master:
            self.state.reclaim_until_ms = now_ms + RECLAIM_WAIT_MS

    def _hand_back_next(self, out: list[a.Action]) -> None:
        """An online master pulls back the metadata of a live slave it has not pulled since it
        may have been replaced: 906 first (the slave stops acting), then the pull."""
        s, cfg = self.state, self.cfg
        if (
            not cfg.acting_master
            or cfg.broker_id != MASTER_ID
            or s.role is not Role.MASTER
            or s.pre_online is not None
            or s.hand_back is not None
            or s.isolated_fence
        ):
            return
        late = sorted(i for i in s.members if i != MASTER_ID and i not in s.pulled)
        if not late and s.reclaim_until_ms is not None:
            s.reclaim_until_ms = None
            out.append(a.Log(INFO, "every live slave handed back: special services may run"))
        if late:
            s.hand_back = late[0]
            out.append(a.Log(INFO, f"handing slave {late[0]} back (its metadata not pulled yet)"))
            out.append(a.PushHaInfo(late[0], s.members[late[0]]))

    def _member_group(self, ev: e.MemberGroup, now_ms: int, out: list[a.Action]) -> None:
        s, cfg = self.state, self.cfg
        if ev.members is not None:
            self._namesrv_contact(now_ms, out)
        p = s.pre_online
        if p is not None:
            self._pre_online_members(p, ev.members, now_ms, out)
            return
        if not ev.members:
            return  # no answer, or the name servers do not know the group (yet)
        s.members = dict(ev.members)
        if not cfg.acting_master:
            return
        self._hand_back_next(out)
        # The name servers may not list us (registration pending): count ourselves.
        live = dict(ev.members)
        live.setdefault(cfg.broker_id, s.address)
        min_id = min(live)
        offline = None
        if s.min_broker is not None and s.min_broker[1] is not None:
            if s.min_broker[1] not in live.values():
                offline = s.min_broker[1]
        self._min_broker_changed(
            e.MinBrokerChanged(min_id, live[min_id], offline, None), now_ms, out
        )

    # ---- pre-online -----------------------------------------------------------------------

    def _pre_online_members(
        self, p: PreOnline, members: dict[int, str] | None, now_ms: int, out: list[a.Action]
    ) -> None:
        if p.phase != "fetch":
            return
        if members is None:
            if self.cfg.has_namesrv:
                self._pre_online_retry(p, now_ms, "no name server answers", out)
                return
            members = {}
        members = {i: addr for i, addr in members.items() if i != self.cfg.broker_id}
        p.members = members
        self.state.members = dict(members)
        if self.cfg.broker_id == MASTER_ID:
            p.queue = sorted(members)
            self._pre_online_next_slave(p, out)
            return
        master = members.get(MASTER_ID)
        s = self.state
        if master is None and s.hand_back_until_ms is not None and now_ms < s.hand_back_until_ms:
            # A master in its own pre-online gave us its 906: it is back, although the name
            # servers do not list it yet; follow it instead of acting (found by the
            # acting-master simulator, seed 2277).
            master = s.master_addr
        if master is not None:
            p.phase, p.master_addr = "ask", master
            out.append(a.AskMasterHa(master))
            return
        others = sorted(members)
        if others and others[0] < self.cfg.broker_id:
            self._online(others[0], members[others[0]], out)
        else:
            self._online(self.cfg.broker_id, None, out)

    def _pre_online_next_slave(self, p: PreOnline, out: list[a.Action]) -> None:
        if not p.queue:
            self._online(MASTER_ID, None, out)
            return
        bid = p.queue.pop(0)
        p.phase, p.slave, p.repushed = "push", bid, False
        out.append(a.PushHaInfo(bid, p.members[bid]))

    def _ha_info_pushed(self, ev: e.HaInfoPushed, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        if s.pre_online is None and s.hand_back == ev.broker_id:
            addr = s.members.get(ev.broker_id)
            if ev.ok and addr is not None:
                out.append(a.ReverseSync(ev.broker_id, addr))
            else:
                s.hand_back = None  # the next member-group answer tries again
            return
        p = self.state.pre_online
        if p is None or p.phase != "push" or p.slave != ev.broker_id:
            return
        if not ev.ok:
            self._pre_online_retry(p, now_ms, f"slave {ev.broker_id} refused our HA info", out)
            return
        if ev.broker_id in self.ha.replicas or p.repushed:
            self._pre_online_sync(p, out)
            return
        p.phase, p.deadline_ms = "wait", now_ms + PRE_ONLINE_HA_WAIT_MS

    def _pre_online_slave_connected(self, broker_id: int, out: list[a.Action]) -> None:
        p = self.state.pre_online
        if p is not None and p.phase == "wait" and p.slave == broker_id:
            # 906 again, then the pull: the wait may have been long (a paused master), and
            # the slave may have restarted and acted since it took the first one; the
            # connection may even be an old one's buffered ack (found by the acting-master
            # simulator, seed 2155).
            p.phase, p.repushed = "push", True
            out.append(a.PushHaInfo(broker_id, p.members[broker_id]))

    def _pre_online_sync(self, p: PreOnline, out: list[a.Action]) -> None:
        assert p.slave is not None
        p.phase = "sync"
        out.append(a.ReverseSync(p.slave, p.members[p.slave]))

    def _reverse_synced(self, ev: e.ReverseSynced, now_ms: int, out: list[a.Action]) -> None:
        s = self.state
        if s.pre_online is None and s.hand_back == ev.broker_id:
            s.hand_back = None
            if ev.ok:
                s.pulled.add(ev.broker_id)
                self._hand_back_next(out)
            return
        p = s.pre_online
        if p is None or p.phase != "sync" or p.slave != ev.broker_id:
            return
        if not ev.ok:
            self._pre_online_retry(p, now_ms, f"metadata of slave {ev.broker_id} not pulled", out)
            return
        s.pulled.add(ev.broker_id)
        self._pre_online_next_slave(p, out)

    def _slave_following(self, ev: e.SlaveFollowing, out: list[a.Action]) -> None:
        self.state.transferring = True
        debt = self.state.catch_up
        if (
            debt is not None
            and debt.offset == UNKNOWN_OFFSET
            and ev.master_max >= 0
            and ev.master_epoch >= debt.epoch
        ):
            # How far this replica's log reached is unknown (its checkpoint was lost), but its
            # master, of its last epoch or a later one, holds whatever of it may matter: once
            # the log holds everything that master had at the handshake, it owes nothing.
            self.state.catch_up = dataclasses.replace(
                debt,
                offset=ev.master_max,
                epoch=ev.master_epoch,
                reason=f"{debt.reason}; the master had {ev.master_max} at the handshake",
            )
            out.append(
                a.Log(
                    WARNING,
                    f"must catch up to {ev.master_max} (epoch {ev.master_epoch}), what the "
                    "master held at the handshake, before it may be elected",
                )
            )
            if self.state.log_max >= ev.master_max:
                self._caught_up(out)
        p = self.state.pre_online
        if p is not None and p.phase == "follow":
            self._online(MASTER_ID, p.master_addr, out)

    def _pre_online_retry(self, p: PreOnline, now_ms: int, why: str, out: list[a.Action]) -> None:
        p.phase, p.retry_at_ms, p.slave = "retry", now_ms + PRE_ONLINE_RETRY_MS, None
        out.append(a.Log(INFO, f"pre-online round failed: {why}"))

    def _online(self, min_id: int, min_addr: str | None, out: list[a.Action]) -> None:
        """RocketMQ's startService: the min broker, acting if we are it, registration, and
        the end of isolation."""
        s = self.state
        s.pre_online = None
        self._set_min(min_id, min_addr, out)
        out.append(a.Log(INFO, f"id {self.cfg.broker_id} online (smallest id {min_id})"))
        self._reconcile_special(out)
        out.append(a.Register())

    # ---- special services -----------------------------------------------------------------

    def _reconcile_special(self, out: list[a.Action]) -> None:
        """RIP-32's changeSpecialServiceStatus: the serving master, or the slave acting for a
        dead master, runs them; nobody while pre-online."""
        s = self.state
        want = s.pre_online is None and (
            (
                s.role is Role.MASTER
                and s.fence is None
                and not s.isolated_fence
                and s.reclaim_until_ms is None
            )
            or s.acting
        )
        if want != s.special:
            s.special = want
            out.append(a.StartSpecial() if want else a.StopSpecial())
