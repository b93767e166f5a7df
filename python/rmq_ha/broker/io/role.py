"""The role core's shell: feeds events to `RoleCore.step` and executes its actions.

Actions that only touch local state (the HA client's target, the epoch file, the store's
confirm offset, topic configs, wake-ups) run at once, in order, inside `feed`. Actions that
talk to other processes (registration, elections, SyncStateSet reports, pre-online requests)
run as tasks of the shell's nursery and feed their answers back as events; starting and
stopping the special services is serialised so they always end in the state the core last
asked for. If the epoch file refuses an entry, the rest of that batch is dropped and the core
learns it (`EpochAppendFailed`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from rmq_ha.broker.core import actions as a
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.core.role import Role, RoleCore
from rmq_ha.broker.ha import catchup
from rmq_ha.broker.ha.service import HaService
from rmq_ha.broker.longpoll import PullHold
from rmq_ha.broker.topics import TopicConfigManager
from rmq_ha.clock import monotonic_ms
from rmq_ha.errors import StoreError
from rmq_ha.net.client import RemotingClient
from rmq_ha.store import AsyncStore

log = logging.getLogger(__name__)

TICK_S = 0.1
#: The first pause between asks of a new master for its HA address (then doubling to 0.3 s).
FIND_MASTER_RETRY_S = 0.02


class Special(Protocol):
    """The special services, as the role starts and stops them."""

    @property
    def running(self) -> bool: ...

    async def start(self, parent: trio.Nursery) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Peers:
    """The I/O the role's outward actions need; each is optional (a mode may lack it)."""

    register: Callable[[], Awaitable[None]]
    #: Controller mode.
    elect: Callable[[], Awaitable[None]] | None = None
    report: Callable[[frozenset[int], int, int], Awaitable[None]] | None = None
    refresh_replicas: Callable[[], Awaitable[None]] | None = None
    #: Classic mode (acting master, pre-online).
    fetch_member_group: Callable[[], Awaitable[dict[int, str] | None]] | None = None
    push_ha_info: Callable[[int, str], Awaitable[bool]] | None = None
    ask_master_ha: Callable[[str], Awaitable[str | None]] | None = None
    reverse_sync: Callable[[str], Awaitable[bool]] | None = None


class RoleShell:
    def __init__(
        self,
        core: RoleCore,
        *,
        store: AsyncStore,
        ha: HaService,
        topics: TopicConfigManager,
        hold: PullHold,
        outbound: RemotingClient,
        special: Special,
        arm_version_bump: Callable[[], None],
    ) -> None:
        self.core = core
        self.store = store
        self.ha = ha
        self.topics = topics
        self.hold = hold
        self.outbound = outbound
        self.special = special
        self.arm_version_bump = arm_version_bump
        self.peers = Peers(register=_nothing)
        self._nursery: trio.Nursery | None = None
        self._pending: list[a.Action] = []
        self._special_lock = trio.Lock()

    # ---- feeding --------------------------------------------------------------------------

    def feed(self, event: ev.Event) -> None:
        """Steps the core and executes what it asks for (see the module doc)."""
        self._run(self.core.step(event, monotonic_ms()))

    def _run(self, actions: list[a.Action]) -> None:
        for act in actions:
            if isinstance(act, a.AppendEpoch):
                try:
                    self.ha.append_epoch(act.epoch, act.start)
                except StoreError as e:
                    last, start = self.ha.last_epoch()
                    log.error("epoch %d at %d refused: %s", act.epoch, act.start, e)
                    self.feed(ev.EpochAppendFailed(act.epoch, str(e), last, start))
                    return
                continue
            self._execute(act)

    def _execute(self, act: a.Action) -> None:
        native = self.store.native
        match act:
            case a.Log():
                log.log(act.level, "%s", act.text)
            case a.Follow():
                self.ha.slave.set_master(act.ha_addr)
            case a.DropSlaves():
                self.ha.master.drop_connections()
            case a.SetConfirm():
                native.set_confirm_offset(act.offset)
            case a.WakeProducers():
                self.ha.master.woke()
            case a.WakePulls():
                self.hold.notify_ready(native.queue_max_offset)
            case a.AdoptTopicsFromLog():
                self.topics.adopt_queues(native.queues())
            case a.BumpDataVersion():
                self.topics.bump_state_version(act.state_version)
            case a.CloseConnection():
                self.outbound.close_connection(act.addr)
            case a.ArmVersionBump():
                self.arm_version_bump()
            case a.ClearCatchUp():
                catchup.clear(self.ha.cfg.store_root)
            case _:
                self._spawn(act)

    def _spawn(self, act: a.Action) -> None:
        if self._nursery is None:
            self._pending.append(act)  # before run(): executed once it starts
            return
        self._nursery.start_soon(self._outward, act)

    # ---- outward actions (tasks) -----------------------------------------------------------

    async def _outward(self, act: a.Action) -> None:
        p = self.peers
        match act:
            case a.StartSpecial() | a.StopSpecial():
                await self._reconcile_special()
            case a.Register():
                await p.register()
            case a.FindMasterHa():
                await self._find_master_ha(act.master_addr, act.epoch)
            case a.RequestElection() if p.elect is not None:
                await p.elect()
            case a.ProposeSyncStateSet() if p.report is not None:
                await p.report(act.members, act.master_epoch, act.sync_state_set_epoch)
            case a.RefreshReplicaAddrs() if p.refresh_replicas is not None:
                await p.refresh_replicas()
            case a.FetchMemberGroup() if p.fetch_member_group is not None:
                self.feed(ev.MemberGroup(await p.fetch_member_group()))
            case a.PushHaInfo() if p.push_ha_info is not None:
                self.feed(
                    ev.HaInfoPushed(act.broker_id, await p.push_ha_info(act.broker_id, act.addr))
                )
            case a.AskMasterHa() if p.ask_master_ha is not None:
                ha_addr = await p.ask_master_ha(act.master_addr)
                self.feed(ev.MasterHaAnswered(act.master_addr, ha_addr))
            case a.ReverseSync() if p.reverse_sync is not None:
                self.feed(ev.ReverseSynced(act.broker_id, await p.reverse_sync(act.addr)))
            case _:
                log.error("the role asked for %r, which this broker's mode cannot do", act)

    async def settle_special(self) -> None:
        """Starts or stops the special services now, as the core last asked."""
        await self._reconcile_special()

    async def _reconcile_special(self) -> None:
        """The special services end in the state the core last asked for, however many
        start/stop requests raced."""
        assert self._nursery is not None
        async with self._special_lock:
            if self.core.state.special and not self.special.running:
                await self.special.start(self._nursery)
            elif not self.core.state.special and self.special.running:
                await self.special.stop()

    async def _find_master_ha(self, master_addr: str, epoch: int) -> None:
        """The HA address of the controller's master: asked of the master itself (906), so a
        slave follows as soon as the master has taken its role however slow the name servers
        are (the new master acknowledges writes alone until a slave rejoins, issue 13). The
        notice often reaches a slave a few ms before the master has taken its role, so the ask
        is repeated quickly at first (FIND_MASTER_RETRY_S, doubling to 0.3 s); a name
        server's answer to a registration (the core takes only its master's) is the fallback,
        every few tries."""
        s = self.core.state
        p = self.peers
        wait, tries = FIND_MASTER_RETRY_S, 0
        while s.role is Role.SLAVE and s.epoch == epoch and s.following is None:
            if p.ask_master_ha is not None:
                ha_addr = await p.ask_master_ha(master_addr)
                if ha_addr:
                    self.feed(ev.MasterHaFound(epoch, ha_addr))
                    await p.register()
                    return
            tries += 1
            if p.ask_master_ha is None or tries % 4 == 0:
                await p.register()
                if s.following is not None:
                    return
            await trio.sleep(wait)
            wait = min(wait * 2, 0.3)

    # ---- running --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Owns the tasks of outward actions and the tick (elections while masterless,
        SyncStateSet shrink, FMQ isolation, pre-online timeouts)."""
        async with trio.open_nursery() as n:
            self._nursery = n
            pending, self._pending = self._pending, []
            for act in pending:
                n.start_soon(self._outward, act)
            task_status.started()
            while True:
                await trio.sleep(TICK_S)
                self.feed(ev.Tick())


async def _nothing() -> None:
    return None
