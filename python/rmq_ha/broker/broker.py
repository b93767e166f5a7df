"""The broker's wiring (`rmq-ha broker -c FILE`): builds the components, the role core and its
shells, puts the request handlers on a dispatcher, and runs the tasks.

    core/            pure role decisions (RoleCore + HaCore), driven by events
    io/role.py       executes the core's actions; feeds their answers back
    io/controller.py the controller (controller mode), io/namesrv.py the name servers,
    io/acting.py     member group, 905/906 and pre-online requests (classic mode)
    ha/              the replication transport (epoch file, HA port, HA client)
    handlers/        request handlers on `ports.Ports`; special/ the special services

`serve(cfg)` runs a broker until cancelled; `open_broker(cfg)` yields the running `Broker`
(tests use it to reach its components). Nothing outside this module and server.py depends
on `Broker`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from rmq_ha.broker.assignment import RequestModes
from rmq_ha.broker.clients import ClientManager
from rmq_ha.broker.core import events as ev
from rmq_ha.broker.core.role import RoleConfig, RoleCore
from rmq_ha.broker.core.storage import record_store_timestamp, retention_floor
from rmq_ha.broker.ha.service import HaService
from rmq_ha.broker.handlers import (
    admin,
    adminops,
    assignment,
    clients,
    groupstats,
    locks,
    pull,
    queries,
    send,
    topics,
)
from rmq_ha.broker.handlers import config as config_handlers
from rmq_ha.broker.handlers import store as store_handlers
from rmq_ha.broker.io.acting import FENCED_CODES, SYNC_BROKER_MEMBER_PREFIX, ActingShell
from rmq_ha.broker.io.controller import ControllerShell
from rmq_ha.broker.io.namesrv import NamesrvShell
from rmq_ha.broker.io.role import Peers, RoleShell
from rmq_ha.broker.io.storage import StorageService
from rmq_ha.broker.locks import QueueLocks
from rmq_ha.broker.longpoll import PullHold
from rmq_ha.broker.metrics import BrokerSnapshot, ReplicaLag, families
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.broker.ports import ANNOUNCE_TIMEOUT_S, Ports
from rmq_ha.broker.special.services import SpecialServices
from rmq_ha.broker.subgroups import FILE_NAME as SUBGROUPS_FILE
from rmq_ha.broker.subgroups import SubscriptionGroupManager
from rmq_ha.broker.topics import TopicConfigManager
from rmq_ha.clock import monotonic_ms
from rmq_ha.config import BrokerConfig, BrokerRole, FlushDiskType
from rmq_ha.config import rocketmq_items as config_items
from rmq_ha.durable import backup_path, persist_or_log
from rmq_ha.errors import StoreError
from rmq_ha.metrics import SnapshotCollector, endpoint, registry_of, serve_metrics
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.net.server import RemotingServer
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import EpochEntry, EpochEntryCache
from rmq_ha.protocol.perm import PERM_READ, PERM_WRITE
from rmq_ha.security.guard import guard_of, inner_signer
from rmq_ha.security.tls import client_context, server_context, server_mode
from rmq_ha.store import AsyncStore, open_store

log = logging.getLogger(__name__)


def role_config(cfg: BrokerConfig) -> RoleConfig:
    controller = cfg.enable_controller_mode
    acting = cfg.enable_slave_acting_master and not controller
    return RoleConfig(
        controller_mode=controller,
        broker_id=max(cfg.broker_id, 0),
        classic_slave=not controller and cfg.broker_role is BrokerRole.SLAVE,
        sync_master=cfg.broker_role is BrokerRole.SYNC_MASTER,
        all_ack=cfg.all_ack_in_sync_state_set,
        in_sync_replicas=cfg.in_sync_replicas,
        min_in_sync_replicas=cfg.min_in_sync_replicas,
        max_not_catchup_ms=cfg.ha_max_time_slave_not_catchup_ms,
        check_sync_state_set_period_ms=cfg.check_sync_state_set_period_ms,
        ha_master_address=cfg.ha_master_address or None,
        acting_master=acting,
        pre_online=acting and not cfg.skip_pre_online and cfg.total_replicas > 1,
        fence_when_isolated=cfg.fence_when_isolated and not controller,
        isolation_timeout_ms=max(
            cfg.broker_not_active_timeout_ms, 2 * cfg.ha_send_heartbeat_interval_ms
        ),
        has_namesrv=bool(cfg.namesrv_addrs),
        total_replicas=cfg.total_replicas,
    )


class Broker:
    def __init__(self, cfg: BrokerConfig, store: AsyncStore, server: RemotingServer) -> None:
        self.cfg = cfg
        self.store = store
        self.server = server
        self.address = f"{cfg.broker_ip}:{server.port}"
        root = cfg.store_root / "config"
        self.topics = TopicConfigManager(
            root / "topics.json",
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_permission=cfg.broker_permission,
            auto_create=cfg.auto_create_topic_enable,
            default_queue_nums=cfg.default_topic_queue_nums,
            trace_topic=cfg.msg_trace_topic_name if cfg.trace_topic_enable else None,
        )
        # Messages on disk whose topic has no config (topics.json and its backup lost, or a
        # crash between an auto-create and its write) would be unreachable: no route serves
        # them. Their configs are recreated from the log, loudly.
        adopted = self.topics.adopt_queues(store.native.queues(), system=False)
        if adopted:
            log.warning(
                "the store holds queues of %d topics that have no topic config (%s%s): "
                "configs recreated from the log (read/write, at least %d queues); check %s",
                len(adopted),
                ", ".join(adopted[:10]),
                ", ..." if len(adopted) > 10 else "",
                cfg.default_topic_queue_nums,
                root / "topics.json",
            )
        self.offsets = ConsumerOffsetManager(
            root / "consumerOffset.json", cfg.consumer_offset_update_version_step
        )
        self.clients = ClientManager()
        self.locks = QueueLocks(cfg.lock_expire_ms)
        self.subgroups = SubscriptionGroupManager(root / SUBGROUPS_FILE)
        offsets_file = root / "consumerOffset.json"
        if (
            self.subgroups.table
            and not self.offsets.table
            and not any(f.exists() for f in (offsets_file, backup_path(offsets_file)))
        ):
            # a broker whose consumers heartbeated has their groups on record; with no
            # offsets file (nor its backup) every group starts again from consumeFromWhere
            log.warning(
                "%s and its .bak are missing while %d consumer groups are on record in %s: "
                "no consumer offsets, so each group starts from its consumeFromWhere "
                "(re-delivering or skipping messages); restore the file if it was lost",
                offsets_file,
                len(self.subgroups.table),
                root / SUBGROUPS_FILE,
            )
        self.request_modes = RequestModes(root / "messageRequestMode.json")
        self.hold = PullHold()
        self.outbound = RemotingClient(signer=inner_signer(cfg), tls=client_context(cfg))
        # The role: the transport first (recovery cuts the epoch file, issue 13), then the core.
        self.ha = HaService(
            cfg,
            store,
            core=lambda: self.core.ha,
            on_event=self._feed,
            broker_id=lambda: self.core.state.self_id or 0,
        )
        self.core = RoleCore(role_config(cfg), self.ha.recover())
        # Retention, disk protection and self-repair of damaged records (issue 15).
        self.storage = StorageService(
            cfg,
            store,
            epochs=self.ha.epochs,
            feed=self._feed,
            outbound=self.outbound,
            replication_floor=self._replication_floor,
            repair_sources=self._repair_sources,
            on_repaired=self._repaired,
        )
        self.ha.master.on_damaged = lambda _off: self.storage.wake_repair()
        self.ports = Ports(
            cfg=cfg,
            address=self.address,
            store_host=(cfg.broker_ip, server.port),
            store=store,
            topics=self.topics,
            offsets=self.offsets,
            clients=self.clients,
            locks=self.locks,
            hold=self.hold,
            role=self.core,
            replication=self.ha,
            outbound=self.outbound,
            storage=self.storage,
            subgroups=self.subgroups,
        )
        if cfg.fence_when_isolated:
            self.ports.before_internal_write = lambda: self._feed(ev.DataPlaneRequest())
        # Delayed/transaction/pop services and their request processors (special/).
        self.special = SpecialServices(self.ports)
        self.role = RoleShell(
            self.core,
            store=store,
            ha=self.ha,
            topics=self.topics,
            hold=self.hold,
            outbound=self.outbound,
            special=self.special,
            arm_version_bump=self._arm_version_bump,
        )
        self.namesrv = NamesrvShell(
            cfg,
            self.outbound,
            self.core,
            self._feed,
            address=self.address,
            ha_address=lambda: self.ha.ha_address,
            topics=self.topics,
            offsets=self.offsets,
            subgroups=self.subgroups,
            request_modes=self.request_modes,
            delay=self.special.delay.offsets,
            delay_running=lambda: self.special.delay.running,
            adopt_topics=lambda: self.topics.adopt_queues(store.native.queues()),
            log_queues=store.native.queues,
            acting_enabled=cfg.enable_slave_acting_master and not cfg.enable_controller_mode,
        )
        self.topics.on_change = self.namesrv.topics_changed
        self.topics.wait_announced = self.namesrv.wait_registered
        self.acting = ActingShell(
            cfg,
            self.outbound,
            self.core,
            self._feed,
            address=self.address,
            ha_address=lambda: self.ha.ha_address,
            max_offset=lambda: store.native.max_offset,
            offsets=self.offsets,
            delay_offsets=self.special.delay.offsets,
        )
        self.controller: ControllerShell | None = None
        peers = Peers(register=self.namesrv.register_all, ask_master_ha=self.acting.ask_master_ha)
        if cfg.enable_controller_mode:
            self.controller = ControllerShell(
                cfg,
                self.outbound,
                self.core,
                self._feed,
                self.address,
                lambda: self.ha.last_epoch()[0] or 0,
            )
            self.namesrv.on_refused = self.controller.poll_now
            peers.elect = self.controller.elect
            peers.report = self.controller.report
            peers.refresh_replicas = self.controller.refresh_replica_addrs
        else:
            peers.fetch_member_group = self.acting.fetch_member_group
            peers.push_ha_info = self.acting.push_ha_info
            peers.reverse_sync = self.acting.reverse_sync
        self.role.peers = peers
        if self.acting.enabled:
            # Old name servers serve the group through this topic's route (compat mode).
            self.topics.create_system(
                SYNC_BROKER_MEMBER_PREFIX + cfg.broker_name, 1, PERM_READ | PERM_WRITE
            )
        # Replicated bytes a slave appended become visible without a local send.
        self.ha.slave.on_visible = self._wake_pulls
        server.handler = self._on_request
        self.dispatcher = self._dispatcher()
        # The native send path (issue 16): ordinary sends of a plain writable master are
        # decoded, checked, stored (and, with no wait, answered) in Rust, one call per received
        # buffer.
        self.native_sends: send.NativeSends | None = None
        if send.native_send_wanted():
            self.native_sends = send.NativeSends(
                self.ports,
                self.special,
                config_allows=self.dispatcher.guard is None,
                # Stored sends wait for the flush / the replicas before their answer.
                defer=cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH or self.ha.sync_master(),
                spawn=lambda fn, arg: self._nursery.start_soon(fn, arg),
                on_request=self._watch_connection,
                judge=(
                    (lambda: self._feed(ev.DataPlaneRequest()))
                    if self.core.cfg.fence_when_isolated
                    else None
                ),
            )
            server.fast = self.native_sends
        #: "host:port" of the Prometheus endpoint once it listens (metricsExporterType=PROM).
        self.metrics_address: str | None = None

    def _dispatcher(self) -> Dispatcher:
        d = Dispatcher("broker", guard_of(self.cfg, "broker"))
        p = self.ports
        send.register(d, p, self.special)
        pull.register(d, p)
        queries.register(d, p)
        clients.register(d, p)
        topics.register(d, p, self._announce_topic)
        locks.register(d, p)
        store_handlers.register(d, p)
        admin.register(
            d,
            self.status,
            self.controller.on_notice if self.controller is not None else None,
            self.ha_runtime_info,
        )
        config_handlers.register(d, p, self.apply_config, self.status)
        adminops.register(d, p, self.subgroups)
        groupstats.register(d, p, self.subgroups)
        assignment.register(d, p, self.request_modes)
        self.special.register(d)
        self.acting.register(d)
        return d

    async def apply_config(self, new: BrokerConfig) -> None:
        """UPDATE_BROKER_CONFIG: `new` differs from the running config only in runtime-safe
        keys (handlers/config.RUNTIME_KEYS); every reader of those keys sees it from now on,
        and the name servers learn a new brokerPermission at once."""
        old, self.cfg = self.cfg, new
        self.ports.cfg = new
        self.namesrv.cfg = new
        self.topics.auto_create = new.auto_create_topic_enable
        self.topics.default_queue_nums = new.default_topic_queue_nums
        before = set(config_items(old))
        changed = [k for k, v in config_items(new) if (k, v) not in before]
        log.info("broker config updated at runtime: %s", ", ".join(changed) or "no change")
        if old.broker_permission != new.broker_permission:
            # A new DataVersion, or name servers keep the queue data with the old perm.
            self.topics.bump_state_version(self.topics.data_version.state_version)
            await self.namesrv.register_all()

    # ---- small glue ------------------------------------------------------------------------

    def _feed(self, event: ev.Event) -> None:
        self.role.feed(event)

    def _wake_pulls(self) -> None:
        self.hold.notify_ready(self.store.native.queue_max_offset)

    def _replication_floor(self) -> int | None:
        """What replication still needs (retention keeps it): the connected slaves'
        positions and, in controller mode, the confirm offset (core/storage.py)."""
        if not self.core.is_master:
            return None
        confirm = self.store.native.confirm_offset if self.cfg.enable_controller_mode else None
        return retention_floor(
            slave_positions=self.ha.master.needs.values(), confirm_offset=confirm
        )

    async def _repair_sources(self) -> list[str]:
        """Who may hold good copies of a damaged record: a slave asks its master; a master
        its in-sync replicas (the SyncStateSet, or the caught-up slaves of a classic
        master). Addresses from the controller (controller mode) or the name servers."""
        s = self.core.state
        if self.core.is_master:
            me = s.self_id if s.self_id is not None else self.cfg.broker_id
            ids = set(self.core.ha.effective_set()) - {me}
            if not ids:
                return []
            addrs = await self._group_addrs(ids)
            return [addrs[i] for i in sorted(ids) if i in addrs and addrs[i] != self.address]
        if s.master_addr:
            return [s.master_addr]
        addrs = await self._group_addrs()
        return [addrs[0]] if 0 in addrs and addrs[0] != self.address else []

    async def _group_addrs(self, need: set[int] | None = None) -> dict[int, str]:
        """The group's replica addresses by broker id; in controller mode refreshed from the
        controller when it lacks one of `need` (the addresses learnt when this broker became
        master may predate replicas that registered later: a repair then found no source)."""
        if self.controller is not None:
            known = self.controller.replica_addrs
            if not known or (need is not None and not need <= set(known)):
                await self.controller.refresh_replica_addrs()
            return dict(self.controller.replica_addrs)
        return await self.namesrv.group_addrs()

    def _repaired(self, refs: list[tuple[str, int, int]]) -> None:
        """A quarantined range holds good bytes again: parked pulls and held HA transfers
        look again."""
        self.ha.master.notify_repaired()
        self._wake_pulls()

    def _arm_version_bump(self) -> None:
        self.offsets.arm_version_bump()
        self.special.delay.offsets.arm_version_bump()

    def _watch_connection(self, conn: Connection) -> None:
        """A connection's first request: its clients are dropped when it closes."""
        if "closed_hook" not in conn.attrs:
            conn.attrs["closed_hook"] = True
            self._nursery.start_soon(clients.watch_connection, self.ports, conn)

    async def _on_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        self._watch_connection(conn)
        if cmd.code in FENCED_CODES and self.core.cfg.fence_when_isolated:
            self._feed(ev.DataPlaneRequest())  # fenced now, not at the last tick
        if self.core.data_plane_fenced and cmd.code in FENCED_CODES:
            if cmd.is_oneway:
                return None
            return cmd.response(
                Resp.SERVICE_NOT_AVAILABLE,
                "this master is fenced: it reaches no name server and none of its slaves "
                "(fenceWhenIsolated)",
            )
        started = time.perf_counter()
        resp = await self.dispatcher(conn, cmd)
        self.ports.traffic.answered(
            cmd.code, -1 if resp is None else resp.code, (time.perf_counter() - started) * 1000
        )
        return resp

    async def _announce_topic(self, cmd: RemotingCommand) -> None:
        """A topic created on a controller-mode master reaches the other replicas before the
        answer, so a failover right after cannot lose it (RocketMQ #9804: the periodic slave
        sync alone leaves a window of up to syncBrokerMetadataPeriod); then registration."""
        if self.core.is_master and self.controller is not None:
            addrs = [a for a in self.controller.replica_addrs.values() if a != self.address]

            async def one(addr: str) -> None:
                fwd = RemotingCommand.request(cmd.code, dict(cmd.ext_fields or {}), cmd.body)
                try:
                    await self.outbound.invoke(addr, fwd, 2.0)
                except Exception as e:  # a dead replica catches up through the periodic sync
                    log.info("topic forward to %s failed: %s", addr, e)

            async with trio.open_nursery() as n:
                for addr in addrs:
                    n.start_soon(one, addr)
        # the registration round the change started (shared with sends that auto-create)
        await self.topics.announced(ANNOUNCE_TIMEOUT_S)

    def ha_runtime_info(self) -> dict[str, Any]:
        """GET_BROKER_HA_STATUS's body (RocketMQ's HARuntimeInfo, mqadmin haStatus): on a
        master its slaves' connections, on a slave its master. Transfer speeds and the
        slave's read/write times are not tracked here and are left out (mqadmin prints 0)."""
        native = self.store.native
        master = self.core.is_master
        out: dict[str, Any] = {
            "master": master,
            "masterCommitLogMaxOffset": native.max_offset if master else 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
        }
        if master:
            ha = self.core.ha
            members = ha.effective_set()
            conns = []
            for rid, r in sorted(ha.replicas.items()):
                ack = max(r.ack, 0)
                conns.append(
                    {
                        "addr": self.ha.master.peers.get(rid, f"broker id {rid}"),
                        "slaveAckOffset": ack,
                        "diff": max(0, native.max_offset - ack),
                        "inSync": rid in members,
                        "transferFromWhere": self.ha.master.needs.get(rid, ack),
                    }
                )
            out["haConnectionInfo"] = conns
            out["inSyncSlaveNums"] = sum(1 for c in conns if c["inSync"])
        else:
            out["haClientRuntimeInfo"] = {
                "masterAddr": self.ha.slave.status.master or "",
                "maxOffset": native.max_offset,
            }
        return out

    def status(self) -> dict[str, Any]:
        """GET_BROKER_EPOCH_CACHE's body: RocketMQ's EpochEntryCache, then our fields."""
        native = self.store.native
        s = self.core.state
        cache = EpochEntryCache(
            cluster_name=self.cfg.cluster_name,
            broker_name=self.cfg.broker_name,
            broker_id=s.self_id if s.self_id is not None else self.cfg.broker_id,
            epoch_list=[
                EpochEntry(epoch=e, start_offset=st, end_offset=min(end, 2**63 - 1))
                for e, st, end in self.ha.epochs.entries()
            ],
            max_offset=native.max_offset,
        )
        slave = self.ha.slave.status
        return dict(json.loads(cache.to_json())) | {
            "confirmOffset": native.confirm_offset,
            "role": "MASTER" if self.core.is_master and s.fence is None else "SLAVE",
            "masterEpoch": s.epoch,
            "syncStateSet": sorted(self.core.ha.effective_set()) if self.core.is_master else [],
            "committedSyncStateSet": sorted(self.core.ha.sync_state_set),
            "replicaAcks": {str(b): r.ack for b, r in sorted(self.core.ha.replicas.items())},
            "fence": s.fence,
            "slaveState": slave.state,
            "refused": slave.refused,
            "truncatedTo": slave.truncated_to,
            # Issue 13: what this replica lost and must catch up to before it may be master.
            "catchUp": None if s.catch_up is None else dataclasses.asdict(s.catch_up),
            # Slave acting master (classic mode) and FMQ fencing.
            "actingMaster": s.acting,
            "isolated": self.core.isolated,
            "fencedIsolated": s.isolated_fence,
            "minBrokerId": None if s.min_broker is None else s.min_broker[0],
            "reverseSynced": self.acting.reverse_synced,
            "specialServices": self.special.running,
            # Issue 15: damage, repair and retention counters (rmq-ha admin store-health).
            "store": self.storage.counters(),
            # Issue 20: where Prometheus scrapes this broker (None: metrics disabled).
            "metricsAddress": self.metrics_address,
        }

    # ---- metrics (issue 20; broker/metrics.py) ----------------------------------------------

    def metrics_snapshot(self) -> BrokerSnapshot:
        """What the metrics endpoint shows, read now from the components' public state."""
        native = self.store.native
        s = self.core.state
        ha = self.core.ha
        now = monotonic_ms()
        master_max = native.max_offset
        replicas: list[ReplicaLag] = []
        if self.core.is_master:
            members = ha.effective_set()
            for rid, r in sorted(ha.replicas.items()):
                behind = max(0, master_max - max(r.ack, 0))
                replicas.append(
                    ReplicaLag(
                        rid,
                        behind,
                        0 if behind == 0 else max(0, now - r.last_caught_up_ms),
                        rid in members,
                    )
                )
        st = native.status()
        report = native.open_report
        counters = self.storage
        lag: dict[tuple[str, str], int] = {}
        latency: dict[tuple[str, str], int] = {}
        inflight: dict[tuple[str, str], int] = {}
        ready: dict[tuple[str, str], int] = {}
        queueing: dict[tuple[str, str], int] = {}
        groups: set[str] = set(self.clients.consumers)
        wall_ms = time.time_ns() // 1_000_000
        pulled = self.ports.traffic.pulled
        for key, queues in self.offsets.table.items():
            topic, _, group = key.partition("@")
            groups.add(group)
            tg = (topic, group)
            lag[tg] = inflight[tg] = ready[tg] = 0
            for qid, off in queues.items():
                top = native.queue_max_offset(topic, qid)
                # Where the group pulls next; never below what it committed.
                at = max(off, pulled.get((topic, group, qid), off))
                lag[tg] += max(0, top - off)
                inflight[tg] += max(0, min(at, top) - off)
                ready[tg] += max(0, top - at)
                for offset, out in ((off, latency), (at, queueing)):
                    if offset < top:
                        stored = self._stored_ms(topic, qid, offset)
                        if stored is not None:
                            out[tg] = max(out.get(tg, 0), max(0, wall_ms - stored))
        ctl = self.controller
        return BrokerSnapshot(
            role=s.role.value,
            fenced=s.fence is not None,
            epoch=s.epoch,
            last_epoch=self.ha.last_epoch()[0],
            broker_id=s.self_id,
            min_offset=native.min_offset,
            max_offset=master_max,
            confirm_offset=native.confirm_offset,
            flushed_offset=native.flushed_offset,
            dispatched_offset=native.dispatched_offset,
            sync_state_set=len(ha.sync_state_set) if self.core.is_master else 0,
            effective_sync_state_set=len(ha.effective_set()) if self.core.is_master else 0,
            sync_state_set_epoch=ha.sync_state_set_epoch,
            replicas=replicas,
            slave_state=self.ha.slave.status.state,
            acting_master=s.acting,
            isolated=self.core.isolated,
            isolated_fence=s.isolated_fence,
            owes_catch_up=s.catch_up is not None,
            disk_full=counters.disk_full,
            special_services=self.special.running,
            controller_answer_age_ms=(
                None if ctl is None or ctl.last_answer_ms is None else now - ctl.last_answer_ms
            ),
            controller_heartbeat_age_ms=(
                None
                if ctl is None or ctl.last_heartbeat_ms is None
                else now - ctl.last_heartbeat_ms
            ),
            store={
                "quarantined_records": int(st.get("quarantined_records") or 0),  # type: ignore[call-overload]
                "quarantined_bytes": int(st.get("quarantined_bytes") or 0),  # type: ignore[call-overload]
                "quarantined_at_runtime": int(st.get("quarantined_at_runtime") or 0),  # type: ignore[call-overload]
                "repaired": counters.repaired,
                "repair_refused": counters.repair_refused,
                "skipped_damaged": counters.damage.skipped_units,
                "retention_deleted_files": counters.deleted_files,
                "cut_bytes": int(report.get("cut_bytes") or 0),  # type: ignore[call-overload]
                "cut_below_durable": int(bool(report.get("cut_below_durable"))),
            },
            topics=len(self.topics.table),
            consumer_groups=len(groups),
            producer_connections=sum(len(g) for g in self.clients.producers.values()),
            consumer_connections=sum(len(g.clients) for g in self.clients.consumers.values()),
            consumer_lag=lag,
            consumer_lag_latency=latency,
            consumer_inflight=inflight,
            consumer_ready=ready,
            consumer_queueing_latency=queueing,
        )

    def _stored_ms(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Store time of the message at `offset` of a queue (None: not readable now, e.g.
        deleted by retention or damaged)."""
        try:
            got = self.store.native.read_queue(topic, queue_id, max(offset, 0), 1, 1 << 22, None)
        except StoreError:  # retention moved the queue's start, or the record is damaged
            return None
        bufs = got[0]
        if not bufs:
            return None
        try:
            return record_store_timestamp(bufs[0])
        except ValueError:
            return None

    def metrics_collector(self) -> SnapshotCollector:
        base = {
            "cluster": self.cfg.cluster_name,
            "node_type": "broker",
            "node_id": self.cfg.broker_name,
        }
        return SnapshotCollector(
            lambda: families(self.metrics_snapshot(), self.ports.traffic, base)
        )

    # ---- lifecycle -------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        native = self.store.native
        async with self.outbound, trio.open_nursery() as nursery:
            self._nursery = nursery
            where = endpoint(self.cfg, self.cfg.broker_ip)
            if where is not None:
                self.metrics_address = await nursery.start(
                    serve_metrics, registry_of(self.metrics_collector()), *where
                )
            await self.ha.bind()
            await nursery.start(self.server.serve)
            persist_or_log("topic configs", self.topics.persist)
            await nursery.start(self.role.run)
            last_epoch, last_start = self.ha.last_epoch()
            self._feed(
                ev.Started(
                    self.address,
                    native.max_offset,
                    native.confirm_offset,
                    last_epoch,
                    last_start,
                )
            )
            nursery.start_soon(self.ha.run, lambda: self.core.is_master)
            if self.controller is not None:
                nursery.start_soon(self.controller.run)
                # Ready once the controller knows us, or after a while regardless: the broker
                # stays fenced (no writes, no registration) and keeps retrying the controllers.
                with trio.move_on_after(self.cfg.controller_heartbeat_timeout_ms / 1000 * 3):
                    await self.controller.running.wait()
                if not self.controller.running.is_set():
                    log.warning("no controller reachable yet: serving fenced, still retrying")
            # The special services a classic master (or acting slave) runs are up before
            # the broker says it is ready.
            await self.role.settle_special()
            await self.namesrv.register_all()  # not while fenced or pre-online
            nursery.start_soon(self.namesrv.run)
            nursery.start_soon(self.acting.run)
            nursery.start_soon(self._housekeeping_loop)
            await nursery.start(self.storage.run)
            log.info("broker %s ready on %s", self.cfg.broker_name, self.address)
            task_status.started(self.address)
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    for what, job in self._config_jobs():
                        persist_or_log(what, job)

    def _config_jobs(self) -> list[tuple[str, Callable[[], None]]]:
        """Writes of the config tables changed since their last write (snapshots taken now)."""
        jobs = [
            ("consumer offsets", self.offsets.persist_job()),
            ("subscription groups", self.subgroups.persist_job()),
            ("topic configs", self.topics.persist_job()),
        ]
        return [(what, job) for what, job in jobs if job is not None]

    async def _housekeeping_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.consumer_offset_flush_interval_ms / 1000)
            # Off the event loop: building the JSON of many offsets or groups and its fsyncs
            # stalled every request (50 ms every 5 s at 64k offsets, probe).
            for what, job in self._config_jobs():
                await trio.to_thread.run_sync(persist_or_log, what, job)
            await clients.expire(self.ports)


@asynccontextmanager
async def open_broker(cfg: BrokerConfig) -> AsyncIterator[Broker]:
    """Binds, opens the store and runs a broker; yields it once it is ready; stops it (and
    closes the store) on exit. The port is bound first so the store host written into every
    record (and so the offset message ids clients derive from it) is the real one, even with
    port 0."""
    cfg.store_root.mkdir(parents=True, exist_ok=True)
    cfg = config_handlers.with_runtime_overrides(cfg)  # updateBrokerConfig outlives a restart
    server = RemotingServer(
        Dispatcher("broker"),
        cfg.broker_ip,
        cfg.listen_port,
        tls=server_context(cfg),
        tls_mode=server_mode(cfg),
        idle_s=cfg.server_channel_max_idle_time_sec,
    )
    port = await server.bind()
    async with open_store(
        cfg.store_root,
        config_keys={"segment_size": "mappedFileSizeCommitLog"},
        record_segment_size=True,
        segment_size=cfg.commitlog_segment_bytes,
        cq_units_per_file=cfg.cq_units_per_file,
        store_host=f"{cfg.broker_ip}:{port}",
        flush_interval_ms=cfg.flush_interval_ms,
        max_message_size=cfg.max_message_size,
        # In controller mode the confirm offset is the replication's to move (HaCore); every
        # other broker exposes what it has (RocketMQ's rule for a one-member set, #7656).
        confirm_follows_max=not cfg.enable_controller_mode or cfg.read_uncommitted,
    ) as store:
        async with trio.open_nursery() as n:
            broker = Broker(cfg, store, server)
            await n.start(broker.serve)
            try:
                yield broker
            finally:
                n.cancel_scope.cancel()


async def serve(
    cfg: BrokerConfig,
    *,
    on_metrics: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the broker until cancelled; reports its address when listening (and the metrics
    endpoint's to `on_metrics`, first, when metrics are on)."""
    async with open_broker(cfg) as broker:
        if on_metrics is not None and broker.metrics_address is not None:
            on_metrics(broker.metrics_address)
        task_status.started(broker.address)
        await trio.sleep_forever()
