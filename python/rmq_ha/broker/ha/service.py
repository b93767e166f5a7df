"""A broker's replication transport: its epoch file, its HA port (`HaMaster`) and its HA client
(`HaSlave`), and the producers' wait for replication (reference 2.2-2.10).

Roles are not decided here: the role core (broker/core/role.py) decides who leads and whom a
slave follows; this object carries the bytes, reports connections, transfers and acks as
events, and executes the role's transport actions (follow an address, drop the slaves, append
an epoch).

Recovery (issue 13): before the broker takes any role, the epoch file is cut back to the
recovered log (`EpochFile.reconcile`), and a replica whose log now ends below what it is known
to have held owes a catch-up (`catchup.py`), persisted before the cut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import trio

from rmq_ha._native import EpochFile
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.ha import catchup
from rmq_ha.broker.ha.catchup import CatchUp
from rmq_ha.broker.ha.core import HaCore, slave_ok
from rmq_ha.broker.ha.master import HaMaster
from rmq_ha.broker.ha.slave import HaSlave
from rmq_ha.broker.io.controller import IDENTITY_FILE
from rmq_ha.config import BrokerConfig, BrokerRole
from rmq_ha.net.server import open_listeners
from rmq_ha.security.guard import guard_of
from rmq_ha.security.signing import parse_credentials_json
from rmq_ha.security.tls import client_context, server_context, server_mode
from rmq_ha.store import AsyncStore

log = logging.getLogger(__name__)


def epoch_file_warnings(source: str, log_min: int, log_max: int, path: str) -> list[str]:
    """What an operator must hear about the epoch file at start: read from its backup (the main
    file was damaged), or missing altogether beside a commitlog that holds records (their
    epochs are unknown: the next epoch starts at the log's end, and a slave's truncation against
    a master may find no consistent point and catch up from scratch)."""
    if source == "backup":
        return [f"epoch file {path} was unreadable; read its backup {path}.bak"]
    if source == "fresh" and log_max > log_min:
        return [
            f"epoch file {path} (and its backup) missing while the commitlog holds records "
            f"[{log_min}, {log_max}): their epochs are unknown; the next epoch starts at the "
            "log's end"
        ]
    return []


@dataclass
class ReplicationOutcome:
    """What a producer's write gets once replication is settled."""

    ok: bool
    reason: str = ""  # "no-slave" | "timeout" when not ok


class HaService:
    def __init__(
        self,
        cfg: BrokerConfig,
        store: AsyncStore,
        core: Callable[[], HaCore],
        on_event: Callable[[ev.Event], None],
        broker_id: Callable[[], int],
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.controller_mode = cfg.enable_controller_mode
        cfg.epoch_file_path.parent.mkdir(parents=True, exist_ok=True)
        self.epochs = EpochFile(cfg.epoch_file_path)
        native = store.native
        for why in epoch_file_warnings(
            self.epochs.source, native.min_offset, native.max_offset, str(cfg.epoch_file_path)
        ):
            log.warning("%s", why)
        self.on_event = on_event
        self.master = HaMaster(
            store,
            self.epochs,
            core,
            on_event,
            batch_bytes=cfg.ha_transfer_batch_bytes,
            heartbeat_interval_ms=cfg.ha_send_heartbeat_interval_ms,
            controller_mode=self.controller_mode,
            flow_rate=cfg.max_ha_transfer_rate_bytes if cfg.ha_flow_control_enable else None,
        )
        self.slave = HaSlave(
            store,
            self.epochs,
            broker_id,
            async_learner=cfg.async_learner,
            sync_from_last_file=cfg.sync_from_last_file,
            heartbeat_interval_ms=cfg.ha_send_heartbeat_interval_ms,
            housekeeping_ms=cfg.ha_housekeeping_interval_ms,
            controller_mode=self.controller_mode,
        )
        self.slave.on_event = on_event
        self.listeners: list[trio.SocketListener] = []
        # Cluster credentials on the HA port (docs/security.md): a master with aclEnable
        # requires a slave to prove an admin account of its plain_acl.yml; a slave with
        # innerClientAuthenticationCredentials proves itself and checks the master.
        ha_guard = guard_of(cfg, "broker-ha")
        self.master.auth = None if ha_guard is None else ha_guard.current
        self.slave.credentials = parse_credentials_json(
            cfg.inner_client_authentication_credentials, "innerClientAuthenticationCredentials"
        )
        self.master.tls, self.master.tls_mode = server_context(cfg), server_mode(cfg)
        self.slave.tls = client_context(cfg)
        self.port = 0

    def recover(self) -> CatchUp | None:
        """Reconciles the epoch file with the recovered log, after persisting what the log
        lost (if anything) so that a second crash cannot forget it; returns that debt."""
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
            durable_lost_below(report),
            # a log whose durable point is unknown (the checkpoint missing or damaged) may
            # end below what it held: zeroed tails look like the end of the log, and a log
            # deleted with its checkpoint (by hand, a lost disk) is empty (operator probe:
            # such a replica was elected with max offset 0 and every acknowledged message
            # went). It held something if it has epochs or a controller identity: an open
            # writes the checkpoint before either can exist
            report.get("checkpoint") != "loaded"
            and bool(before or (root / IDENTITY_FILE).exists()),
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

    def last_epoch(self) -> tuple[int | None, int]:
        """The epoch file's last (epoch, start offset); (None, 0) when empty."""
        entries = self.epochs.entries()
        if not entries:
            return None, 0
        e, s, _ = entries[-1]
        return e, s

    def append_epoch(self, epoch: int, start: int) -> None:
        """Drops entries of epochs >= `epoch`, then appends (epoch, start). #9689: with no
        write since the previous epoch the new entry has the same start and replaces it."""
        self.epochs.truncate_suffix_by_epoch(epoch)
        self.epochs.append(epoch, start)

    # ---- lifecycle ----------------------------------------------------------------------

    async def bind(self) -> int:
        self.listeners = await open_listeners(
            self.cfg.ha_listen_port, self.cfg.broker_ip, "haListenPort"
        )
        self.port = self.listeners[0].socket.getsockname()[1]
        return self.port

    @property
    def ha_address(self) -> str:
        return f"{self.cfg.ha_host}:{self.port}"

    async def run(self, accepting: Callable[[], bool]) -> None:
        """Serves slaves while `accepting()` (this broker is master) and runs the HA client."""
        async with trio.open_nursery() as n:
            n.start_soon(self.master.serve, self.listeners, accepting)
            n.start_soon(self.master.expire_loop)
            n.start_soon(self.slave.run)

    # ---- replication for producers (ports.Replication) ----------------------------------

    def after_append(self) -> None:
        native = self.store.native
        self.master.notify_append()
        self.on_event(ev.LogGrew(native.max_offset, native.confirm_offset))

    def sync_master(self) -> bool:
        """Whether producers wait for replicas (controller mode always does, like RocketMQ)."""
        return self.controller_mode or self.cfg.broker_role is BrokerRole.SYNC_MASTER

    def when_replicated(self, end_offset: int, done: Callable[[ReplicationOutcome], None]) -> None:
        """`wait_replicated` without a task: `done` is called once, maybe at once, maybe
        later with many others in one batch (issue 16)."""
        if not self.sync_master():
            done(ReplicationOutcome(True))
            return
        if not self.controller_mode and not slave_ok(
            len(self.master.connections),
            end_offset,
            self.master.core().best_ack(),
            self.cfg.ha_max_gap_not_in_sync_bytes,
        ):
            done(ReplicationOutcome(False, "no-slave"))
            return
        self.master.on_acked(
            end_offset,
            self.cfg.slave_timeout_ms / 1000,
            lambda ok: done(ReplicationOutcome(ok, "" if ok else "timeout")),
        )

    async def wait_replicated(self, end_offset: int) -> ReplicationOutcome:
        if not self.sync_master():
            return ReplicationOutcome(True)
        if not self.controller_mode and not slave_ok(
            len(self.master.connections),
            end_offset,
            self.master.core().best_ack(),
            self.cfg.ha_max_gap_not_in_sync_bytes,
        ):
            return ReplicationOutcome(False, "no-slave")
        ok = await self.master.wait_acked(end_offset, self.cfg.slave_timeout_ms / 1000)
        return ReplicationOutcome(ok, "" if ok else "timeout")


def durable_lost_below(report: Mapping[str, object]) -> int | None:
    """The checkpoint's durable offset when the store's recovery found fsynced bytes below it
    missing (`missing_durable`) or cut the log below it; None otherwise."""
    missing = report.get("missing_durable")
    if isinstance(missing, tuple | list) and len(missing) == 2 and isinstance(missing[1], int):
        return missing[1]
    durable = report.get("durable_offset")
    if report.get("cut_below_durable") and isinstance(durable, int):
        return durable
    return None
