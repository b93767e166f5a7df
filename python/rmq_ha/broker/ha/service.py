"""A broker's replication role: master or slave, its epoch file, its HA port, and the role
changes (reference 2.10).

* classic mode: the role is fixed by config (brokerId 0 = master; SLAVE learns the master's HA
  address from the name server's answer to its registration, or `haMasterAddress`);
* controller mode: the broker starts fenced (no writes, no registration) and `ReplicasManager`
  calls `change_to_master` / `change_to_slave` as the controller decides.

changeToMaster does *not* cut the log back to the confirm offset: a write acknowledged to a
producer is on every SyncStateSet member, but a slave learns the master's confirm offset only
with the next transfer, so acknowledged messages can lie above a new master's confirm offset.
The new master keeps its whole (valid) log, appends the new epoch at its max offset, and the
other replicas cut back to it on their handshake.

Recovery (issue 13): before the broker takes any role, the epoch file is cut back to the
recovered log (`EpochFile.reconcile`), and a replica whose log now ends below what it is known
to have held owes a catch-up (`catchup.py`): it reports it to the controller with every
heartbeat, refuses to become master (`RoleRefused`: it stays up, fenced, and says why) and
clears the debt once replication brought its log back to that offset.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from rmq_ha._native import EpochFile
from rmq_ha.broker.ha import catchup
from rmq_ha.broker.ha.catchup import CatchUp
from rmq_ha.broker.ha.core import HaCore
from rmq_ha.broker.ha.master import HaMaster
from rmq_ha.broker.ha.slave import HaSlave
from rmq_ha.config import EPOCH_FILE_NAME, BrokerConfig, BrokerRole
from rmq_ha.errors import EpochConflictError

if TYPE_CHECKING:
    from rmq_ha.store import AsyncStore

log = logging.getLogger(__name__)

EPOCH_FILE = EPOCH_FILE_NAME  # the default name; storePathEpochFile moves it
CLASSIC_EPOCH = 1


class RoleRefused(Exception):
    """This replica cannot become master now; the message says why (it stays fenced)."""


@dataclass
class ReplicationOutcome:
    """What a producer's write gets once replication is settled."""

    ok: bool
    reason: str = ""  # "no-slave" | "timeout" when not ok


class HaService:
    def __init__(self, cfg: BrokerConfig, store: AsyncStore, self_id: int = 0) -> None:
        self.cfg = cfg
        self.store = store
        self.controller_mode = cfg.enable_controller_mode
        cfg.epoch_file_path.parent.mkdir(parents=True, exist_ok=True)
        self.epochs = EpochFile(cfg.epoch_file_path)
        self._catch_up = self._recover()
        self.self_id = self_id  # the controller-assigned id (controller mode) or brokerId
        self.master_epoch = self.epochs.last_epoch() or 0
        self.is_master = False
        self.master_id: int | None = None
        self.core = self._new_core(frozenset({self_id}), 0)
        self.on_proposal: Callable[[frozenset[int]], Awaitable[None]] | None = None
        self.master = HaMaster(
            store,
            self.epochs,
            self.core,
            batch_bytes=cfg.ha_transfer_batch_bytes,
            heartbeat_interval_ms=cfg.ha_send_heartbeat_interval_ms,
            controller_mode=self.controller_mode,
            on_proposal=self._propose,
        )
        self.slave = HaSlave(
            store,
            self.epochs,
            lambda: self.self_id,
            async_learner=cfg.async_learner,
            sync_from_last_file=cfg.sync_from_last_file,
            heartbeat_interval_ms=cfg.ha_send_heartbeat_interval_ms,
            housekeeping_ms=cfg.ha_housekeeping_interval_ms,
            controller_mode=self.controller_mode,
        )
        self.listeners: list[trio.SocketListener] = []
        self.port = 0

    def _recover(self) -> CatchUp | None:
        """Reconciles the epoch file with the recovered log, after persisting what the log
        lost (if anything) so that a second crash cannot forget it."""
        native = self.store.native
        root = self.cfg.store_root
        before = [(e, s) for e, s, _ in self.epochs.entries()]
        report = native.open_report
        clamped = report.get("confirm_clamped_from")
        debt = catchup.catch_up_after_recovery(
            before,
            native.max_offset,
            clamped if isinstance(clamped, int) else None,
            catchup.load(root),
        )
        if debt is not None:
            catchup.save(root, debt)
            log.error(
                "recovered log ends at %d, below what this replica held (%s): it must catch up "
                "to %d (epoch %d) from a replica that has the data before it may be master",
                native.max_offset,
                debt.reason,
                debt.offset,
                debt.epoch,
            )
        else:
            catchup.clear(root)
        cut, dropped = self.epochs.reconcile(native.min_offset, native.max_offset)
        if cut:
            log.warning(
                "epoch file: dropped %s, which start past the recovered log's end %d",
                cut,
                native.max_offset,
            )
        if dropped:
            log.info("epoch file: dropped %s, wholly below the log's start", dropped)
        return debt

    def catch_up(self) -> CatchUp | None:
        """The catch-up this replica still owes (None: none); cleared once the log reached it."""
        debt = self._catch_up
        if debt is not None and self.store.native.max_offset >= debt.offset:
            catchup.clear(self.cfg.store_root)
            self._catch_up = None
            log.warning(
                "caught up to %d (%s): this replica may be elected again", debt.offset, debt.reason
            )
            return None
        return debt

    def _new_core(self, members: frozenset[int], ss_epoch: int) -> HaCore:
        core = HaCore(
            self_id=self.self_id,
            all_ack=self.cfg.all_ack_in_sync_state_set and self.controller_mode,
            # A classic SYNC_MASTER waits for one slave whatever inSyncReplicas says.
            in_sync_replicas=self.cfg.in_sync_replicas
            if self.controller_mode or self.cfg.broker_role is not BrokerRole.SYNC_MASTER
            else max(2, self.cfg.in_sync_replicas),
            max_not_catchup_ms=self.cfg.ha_max_time_slave_not_catchup_ms,
            sync_state_set=members,
            sync_state_set_epoch=ss_epoch,
        )
        core.confirm = self.store.native.confirm_offset
        return core

    async def _propose(self, members: frozenset[int]) -> None:
        """Controller mode reports a change and applies the controller's answer; classic mode
        has nobody to ask, so its in-sync view applies at once."""
        if self.on_proposal is not None:
            await self.on_proposal(members)
        elif not self.controller_mode:
            self.apply_sync_state_set(members, self.core.sync_state_set_epoch + 1)

    # ---- lifecycle ----------------------------------------------------------------------

    async def bind(self) -> int:
        self.listeners = await trio.open_tcp_listeners(
            self.cfg.ha_listen_port, host=self.cfg.broker_ip
        )
        self.port = self.listeners[0].socket.getsockname()[1]
        return self.port

    @property
    def ha_address(self) -> str:
        return f"{self.cfg.ha_host}:{self.port}"

    async def run(self) -> None:
        async with trio.open_nursery() as n:
            n.start_soon(self.master.serve, self.listeners, self._accepting)
            n.start_soon(self.slave.run)

    def _accepting(self) -> bool:
        return self.is_master

    def start_classic(self) -> None:
        """Fixed roles: brokerId 0 is the master (epoch 1 from the start of the log)."""
        if self.cfg.broker_role is BrokerRole.SLAVE:
            self.is_master = False
            if self.cfg.ha_master_address:
                self.slave.set_master(self.cfg.ha_master_address)
            return
        if self.epochs.last_epoch() is None:
            self.epochs.append(CLASSIC_EPOCH, self.store.native.min_offset)
        self.master_epoch = self.epochs.last_epoch() or CLASSIC_EPOCH
        self.is_master = True
        self.master_id = self.self_id

    # ---- replication for producers ------------------------------------------------------

    def after_append(self) -> None:
        if self.is_master:
            self.master.notify_append()

    def sync_master(self) -> bool:
        """Whether producers wait for replicas (controller mode always does, like RocketMQ)."""
        return self.controller_mode or self.cfg.broker_role is BrokerRole.SYNC_MASTER

    def in_sync_replicas_enough(self) -> bool:
        return self.core.in_sync_count() >= self.cfg.min_in_sync_replicas

    async def wait_replicated(self, end_offset: int) -> ReplicationOutcome:
        if not self.sync_master():
            return ReplicationOutcome(True)
        if not self.controller_mode and not self.master.connections:
            return ReplicationOutcome(False, "no-slave")
        ok = await self.master.wait_acked(end_offset, self.cfg.slave_timeout_ms / 1000)
        return ReplicationOutcome(ok, "" if ok else "timeout")

    # ---- role changes (controller mode) -------------------------------------------------

    def change_to_master(self, epoch: int, members: frozenset[int], ss_epoch: int) -> bool:
        """Becomes (or stays) master in `epoch`; False when the notice is stale. Raises
        `RoleRefused` (changing nothing) when this replica may not be master now."""
        native = self.store.native
        if epoch <= self.master_epoch and self.is_master:
            if ss_epoch > self.core.sync_state_set_epoch:
                self.core.apply_set(members, ss_epoch, native.max_offset)
                self.master.update_confirm()
            return False
        last = self.epochs.last_epoch()
        if last is not None and epoch < last:
            log.warning("ignoring master epoch %d below our last epoch %d", epoch, last)
            return False
        debt = self.catch_up()
        if debt is not None:
            raise RoleRefused(
                f"elected master in epoch {epoch}, but this replica's log ends at "
                f"{native.max_offset}, below what it held ({debt.reason}); it must catch up to "
                f"{debt.offset} from a replica that has the data first"
            )
        self.epochs.truncate_suffix_by_epoch(epoch)
        # #9689: with no write since the previous epoch, the new entry has the same start and
        # replaces the last one, so the file never holds two epochs at one offset.
        try:
            self.epochs.append(epoch, native.max_offset)
        except EpochConflictError as e:
            raise RoleRefused(f"cannot start epoch {epoch}: {e}") from e
        self.slave.set_master(None)
        self.master_epoch = epoch
        if self.is_master:
            # Master again in a new epoch (changeToMasterWhenLastRoleIsMaster): the slaves'
            # connections stay, and so does what we know of their acks.
            core = self.core
            core.sync_state_set, core.sync_state_set_epoch = frozenset(members), ss_epoch
            core.proposed = None
        else:
            core = self._new_core(members, ss_epoch)
            self.core = core
            self.master.core = core
        core.epoch_start_offset = native.max_offset
        self.is_master = True
        self.master_id = self.self_id
        self.master.update_confirm()
        log.info(
            "became master: epoch %d, SyncStateSet %s (epoch %d), max offset %d, confirm %d",
            epoch,
            sorted(members),
            ss_epoch,
            native.max_offset,
            native.confirm_offset,
        )
        return True

    def change_to_slave(self, epoch: int, master_id: int) -> bool:
        if epoch < self.master_epoch or (epoch == self.master_epoch and not self.is_master):
            if self.master_id == master_id:
                return False
        was_master = self.is_master
        self.is_master = False
        self.master_epoch = max(self.master_epoch, epoch)
        self.master_id = master_id
        if was_master:
            self.master.drop_connections()
        log.info("became slave of %d in epoch %d", master_id, epoch)
        return True

    def apply_sync_state_set(self, members: frozenset[int], ss_epoch: int) -> bool:
        ok = self.core.apply_set(members, ss_epoch, self.store.native.max_offset)
        if ok:
            self.master.update_confirm()
            self.master.woke()
        return ok
