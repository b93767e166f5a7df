"""The controller node (`rmq-ha controller`, or embedded in a name server): RIP-44's DLedger
controller on our Raft driver.

* Raft: a `RaftDriver` replicates encoded event batches; `ControllerStateMachine` applies them
  to a `ControllerState` on every node and returns, per event, whether it applied.
* Requests 1001-1013 (leader only, as in RocketMQ's DLedger controller): a node that is not the
  serving leader answers CONTROLLER_NOT_LEADER (2007) with a GetMetaDataResponseHeader naming
  the leader. The leader validates with `requests.handle` against its state and live table,
  proposes the events, and answers once they are applied (a stale event turns the answer into
  `stale_event_code`). Reads are answered from the leader's memory, as with RocketMQ's default
  isProcessReadEvent=false. A new leader serves only after its no-op entry commits.
* GET_METADATA_INFO (1005) and BROKER_HEARTBEAT (904) are answered by every node; each keeps its
  own liveness table (`heartbeat.HeartbeatTable`).
* The leader elects a new master when a master's heartbeat expires or its connection closes,
  and every scanInactiveMasterInterval for any group whose master is dead while a replica
  lives; after every successful election it pushes NOTIFY_BROKER_ROLE_CHANGED (1008, oneway)
  to the group's live members.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable
from typing import Any

import trio

from rmq_ha.clock import STALL_TICK_S, StallCredit
from rmq_ha.config import ControllerConfig
from rmq_ha.controller import config_admin, wire
from rmq_ha.controller.elect import BrokerKey, scan_need_reelect
from rmq_ha.controller.events import (
    DecodeError,
    ElectMasterEvent,
    Event,
    decode_events,
    encode_events,
)
from rmq_ha.controller.heartbeat import HeartbeatTable, monotonic_ms
from rmq_ha.controller.messages import ControllerConfig as PolicyConfig
from rmq_ha.controller.messages import (
    ControllerResult,
    ElectMasterRequest,
    ElectMasterResponse,
    Request,
    Response,
)
from rmq_ha.controller.requests import handle, stale_event_code
from rmq_ha.controller.state import ControllerState
from rmq_ha.errors import RemotingError, RemotingTimeoutError
from rmq_ha.metrics import (
    Families,
    Histogram,
    SnapshotCollector,
    endpoint,
    registry_of,
    serve_metrics,
)
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher, RequestHandler
from rmq_ha.net.server import RemotingServer
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    GetMetaDataResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
)
from rmq_ha.protocol.models import SyncStateSet
from rmq_ha.raft.config import RaftConfig
from rmq_ha.raft.driver import NotLeaderError, ProposalOutcomeUnknown, RaftDriver
from rmq_ha.raft.messages import Role as RaftRole
from rmq_ha.raft.outputs import RoleState
from rmq_ha.security.guard import guard_of, inner_signer
from rmq_ha.security.tls import client_context, server_context, server_mode

log = logging.getLogger(__name__)

#: ControllerRequestProcessor.WAIT_TIMEOUT_OUT: how long a request waits for its commit.
PROPOSE_TIMEOUT_S = 5.0
#: ControllerManager.triggerElectMaster waits this long per try.
ELECT_TRY_TIMEOUT_S = 3.0
NOTIFY_TIMEOUT_S = 3.0
NOT_LEADER_REMARK = "The controller is not in leader state"

#: Buckets (s) of the master-election duration histogram.
ELECTION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: The leader-only requests (RocketMQ section 3.6).
LEADER_CODES = tuple(wire.REQUEST_CODES.values())


class ControllerStateMachine:
    """The Raft state machine: each entry is one request's events (`encode_events`)."""

    def __init__(self) -> None:
        self.state = ControllerState()

    def apply(self, index: int, data: bytes) -> list[bool]:
        """Applies the batch; per event, whether it applied (False: stale, skipped)."""
        try:
            events = decode_events(data)
        except DecodeError as e:
            # Deterministic on every node: a batch nobody can read changes nothing.
            log.error("raft entry %d is not a controller event batch: %s", index, e)
            return []
        return [self._apply(index, e) for e in events]

    def _apply(self, index: int, event: Event) -> bool:
        ok = self.state.apply(event)
        if isinstance(event, ElectMasterEvent):
            log.info(
                "entry %d: %s master %s at epoch %d%s",
                index,
                event.broker_name,
                event.new_master_broker_id,
                event.master_epoch,
                "" if ok else " (stale, skipped)",
            )
        return ok

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        self.state = ControllerState.restore(data)


def raft_config_of(cfg: ControllerConfig) -> RaftConfig:
    return RaftConfig(
        heart_beat_time_interval_ms=cfg.heart_beat_time_interval_ms,
        max_heart_beat_leak=cfg.max_heart_beat_leak,
        min_vote_interval_ms=cfg.min_vote_interval_ms,
        max_vote_interval_ms=cfg.max_vote_interval_ms,
    )


def _failed(resp: Response, code: Code, remark: str) -> Response:
    """`resp` with a failure code and every optional answer field back at its default."""
    reset: dict[str, Any] = {}
    for f in dataclasses.fields(resp):
        if f.name in ("code", "remark", "cluster_name", "broker_name"):
            continue
        if f.default is not dataclasses.MISSING:
            reset[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            reset[f.name] = f.default_factory()
    return dataclasses.replace(resp, code=code, remark=remark, **reset)


def _check_applied(result: ControllerResult[Any], applied: object) -> Response:
    response: Response = result.response
    if not isinstance(applied, list) or len(applied) != len(result.events):
        return _failed(response, Code.SYSTEM_ERROR, "the committed entry was not applied")
    for event, ok in zip(result.events, applied, strict=True):
        if not ok:
            remark = "stale: the metadata changed before the event committed"
            return _failed(response, stale_event_code(event), remark)
    return response


class ControllerNode:
    def __init__(
        self,
        cfg: ControllerConfig,
        *,
        raft_config: RaftConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        self.peers = cfg.peers
        self.node_id = cfg.controller_dleger_self_id
        self.policy = PolicyConfig(enable_elect_unclean_master=cfg.enable_elect_unclean_master)
        self.sm = ControllerStateMachine()
        # time this node does not run is not held against the brokers (clock.StallCredit)
        self.live = HeartbeatTable(monotonic_ms, StallCredit())
        self.client = RemotingClient(signer=inner_signer(cfg), tls=client_context(cfg))
        self.driver = RaftDriver(
            self.node_id,
            self.peers,
            self.sm,
            cfg.store_dir,
            client=self.client,
            config=raft_config or raft_config_of(cfg),
            rng=rng,
            on_role_change=self._on_role_change,
        )
        self.dispatcher = Dispatcher("controller", guard_of(cfg, "controller"))
        self.register(self.dispatcher)
        self._own_server = True
        self._nursery: trio.Nursery | None = None
        self._electing: set[str] = set()
        self._watched: set[int] = set()
        #: Heartbeat connections whose close was dealt with (for tests to wait on).
        self.closed_connections_handled = 0
        self._notified_epoch: dict[str, int] = {}
        # Metrics (issue 20): Raft leaderships won here, master elections run here (by
        # result) and how long they took.
        self.leader_elections = 0
        self.master_elections: dict[str, int] = {}
        self.election_seconds = Histogram(ELECTION_BUCKETS_S)

    @property
    def address(self) -> str:
        return self.peers[self.node_id]

    @property
    def state(self) -> ControllerState:
        return self.sm.state

    # -- wiring --------------------------------------------------------------------------------

    def register(self, d: Dispatcher, heartbeat_also: RequestHandler | None = None) -> None:
        """Registers the controller's codes on `d`; `heartbeat_also` (the name server's own
        904 handler, when embedded) answers heartbeats after the controller has recorded them."""
        d.register(RC.RMQHA_RAFT_MESSAGE, self._raft_message)
        d.register(RC.CONTROLLER_GET_METADATA_INFO, self.get_metadata)
        d.register(RC.BROKER_HEARTBEAT, self._heartbeat_chain(heartbeat_also))
        for code in LEADER_CODES:
            d.register(code, self.controller_request)
        config_admin.register(d, lambda: self.cfg, self.apply_config)

    def apply_config(self, new: ControllerConfig) -> None:
        """UPDATE_CONTROLLER_CONFIG: `new` differs only in runtime-safe keys
        (config_admin.RUNTIME_KEYS), each read where it is used."""
        self.cfg = new
        self.policy = PolicyConfig(enable_elect_unclean_master=new.enable_elect_unclean_master)

    def embed(self, d: Dispatcher, listen_port: int, heartbeat_also: RequestHandler) -> bool:
        """Embedded in a name server: share its remoting server when this node's peer port is
        the name server's listen port (True); else `run` serves the peer port itself."""
        port = int(self.address.rpartition(":")[2])
        if port != listen_port:
            return False
        self.register(d, heartbeat_also)
        self._own_server = False
        return True

    def _heartbeat_chain(self, also: RequestHandler | None) -> RequestHandler:
        async def heartbeat(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            resp = await self.broker_heartbeat(conn, cmd)
            # A name-server heartbeat without a brokerId is still the name server's business.
            return resp if also is None else await also(conn, cmd)

        return heartbeat

    async def _raft_message(self, conn: Connection, cmd: RemotingCommand) -> None:
        await self.driver.handle_message(conn, cmd)

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Runs until cancelled; reports this node's peer address once it is reachable."""
        async with self.client, trio.open_nursery() as nursery:
            self._nursery = nursery
            if self._own_server:
                host, _, port = self.address.rpartition(":")
                server = RemotingServer(
                    self.dispatcher,
                    host,
                    int(port),
                    tls=server_context(self.cfg),
                    tls_mode=server_mode(self.cfg),
                    idle_s=self.cfg.server_channel_max_idle_time_sec,
                )
                await nursery.start(server.serve)
            await nursery.start(self.driver.run)
            nursery.start_soon(self._scan_not_active_loop)
            nursery.start_soon(self._scan_inactive_master_loop)
            nursery.start_soon(self._watch_clock)
            log.info("controller %s ready on %s", self.node_id, self.address)
            task_status.started(self.address)

    def _on_role_change(self, role: RoleState) -> None:
        if role.serving and role.role is RaftRole.LEADER:
            self.leader_elections += 1
        if role.serving:
            log.info("controller %s leads (term %d) and serves", self.node_id, role.term)

    # -- any node ------------------------------------------------------------------------------

    def metadata(self) -> GetMetaDataResponseHeader:
        """`isLeader` is true only on a leader that serves (its no-op entry committed)."""
        leader = self.driver.leader_id
        return GetMetaDataResponseHeader(
            group=self.cfg.controller_dleger_group,
            controller_leader_id=leader,
            controller_leader_address=self.peers.get(leader) if leader else None,
            is_leader=self.driver.serving,
            peers="".join(f"{i}:{a};" for i, a in self.peers.items()),
        )

    async def get_metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Code.SUCCESS, None, self.metadata().to_ext())

    def _not_leader(self, cmd: RemotingCommand) -> RemotingCommand:
        meta = self.metadata()
        remark = NOT_LEADER_REMARK
        if meta.controller_leader_id and not meta.is_leader:
            remark += f"; the leader is {meta.controller_leader_id}"
            remark += f" at {meta.controller_leader_address}"
        return cmd.response(Code.CONTROLLER_NOT_LEADER, remark, meta.to_ext())

    async def broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
        if h.broker_id is None:
            return cmd.response(Code.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        if self.live.on_heartbeat(h, conn):
            log.info(
                "broker %s/%s id %d at %s is alive",
                h.cluster_name,
                h.broker_name,
                h.broker_id,
                h.broker_addr,
            )
        if h.catch_up_offset is not None:
            # A replica that lost data (issue 13): if it is the master, replace it now rather
            # than at the next inactive-master scan.
            self._on_broker_inactive(BrokerKey(h.cluster_name, h.broker_name, h.broker_id))
        self._watch(conn)
        return cmd.response(Code.SUCCESS, "Heart beat success")

    def _watch(self, conn: Connection) -> None:
        if id(conn) in self._watched or self._nursery is None:
            return
        self._watched.add(id(conn))
        self._nursery.start_soon(self._watch_connection, conn)

    async def _watch_connection(self, conn: Connection) -> None:
        """A broker whose heartbeat connection closed is dropped (and, if master, replaced),
        unless it heartbeats again on a new connection within `closed_grace_ms` (a fault
        probe saw live masters deposed, with no fault in force, when their connection to the
        controllers closed and was opened again 0.3-0.8 s later). RocketMQ drops it at once."""
        try:
            await conn.wait_closed()
        finally:
            self._watched.discard(id(conn))
        bound = self.live.keys_on(conn)
        grace_ms = self.live.closed_grace_ms(conn)
        if grace_ms:
            await trio.sleep(grace_ms / 1000)
        gone = self.live.drop_connection(conn)
        for key in gone:
            log.warning("broker %s: connection closed", key)
            self._on_broker_inactive(key)
        for key in bound:
            if key not in gone:
                log.info(
                    "broker %s: its heartbeat connection closed, and it heartbeated again on"
                    " another within %d ms: kept",
                    key,
                    grace_ms,
                )
        self.closed_connections_handled += 1

    # -- leader-only requests ------------------------------------------------------------------

    async def controller_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not self.driver.serving:
            return self._not_leader(cmd)
        try:
            req = wire.decode_request(cmd)
        except wire.InvalidControllerRequest as e:
            return cmd.response(Code.CONTROLLER_INVALID_REQUEST, str(e))
        started = trio.current_time()
        try:
            resp = await self.execute(req)
        except NotLeaderError:
            return self._not_leader(cmd)
        except (ProposalOutcomeUnknown, RemotingTimeoutError) as e:
            return cmd.response(Code.SYSTEM_ERROR, f"controller: {e}")
        cluster = None
        if isinstance(req, ElectMasterRequest):
            self._note_election(req.broker_name, resp, trio.current_time() - started)
            cluster = self._after_elect(req.broker_name, resp)
        return wire.encode_response(cmd, req, resp, cluster)

    async def execute(self, req: Request, timeout_s: float = PROPOSE_TIMEOUT_S) -> Any:
        """Handles `req` on the serving leader: its response once its events are applied.
        Raises NotLeaderError, ProposalOutcomeUnknown or RemotingTimeoutError."""
        if not self.driver.serving:
            raise NotLeaderError(self.driver.leader_id)
        result = handle(self.state, req, self.live.view(), self.policy)
        if not result.events:
            return result.response
        applied = await self.driver.propose(encode_events(result.events), timeout_s)
        return _check_applied(result, applied)

    # -- elections and notices -----------------------------------------------------------------

    def _on_broker_inactive(self, key: BrokerKey) -> None:
        """onBrokerInactive: the leader re-elects when the dead broker (or one that lost data
        and may not stay master) was the master."""
        if not self.driver.serving:
            return
        bs = self.state.get(key.broker_name)
        if bs is not None and bs.master_broker_id == key.broker_id:
            log.warning("master %s is inactive or lost data: electing a new one", key)
            self.trigger_elect(key.broker_name)

    def trigger_elect(self, broker_name: str) -> None:
        if broker_name in self._electing or self._nursery is None:
            return
        self._electing.add(broker_name)
        self._nursery.start_soon(self._elect_task, broker_name)

    async def _elect_task(self, broker_name: str) -> None:
        """triggerElectMaster: up to electMasterMaxRetryCount tries while leading."""
        started = trio.current_time()
        try:
            for attempt in range(self.cfg.elect_master_max_retry_count):
                if not self.driver.serving:
                    return
                req = ElectMasterRequest.of_controller_trigger(broker_name)
                try:
                    resp: ElectMasterResponse = await self.execute(req, ELECT_TRY_TIMEOUT_S)
                except (NotLeaderError, ProposalOutcomeUnknown, RemotingTimeoutError) as e:
                    log.warning("elect %s (try %d): %s", broker_name, attempt + 1, e)
                    continue
                self._note_election(broker_name, resp, trio.current_time() - started)
                self._after_elect(broker_name, resp)
                return
        finally:
            self._electing.discard(broker_name)

    def _note_election(self, broker_name: str, resp: ElectMasterResponse, took_s: float) -> None:
        """Counts an election (metrics) and logs its one operator line: result, new master,
        epoch, SyncStateSet and how long it took from the request or trigger."""
        result = resp.code.name
        if resp.code == Code.SUCCESS:
            log.info(
                "election %s: master %s at %s, epoch %s, SyncStateSet %s, took %d ms",
                broker_name,
                resp.master_broker_id,
                resp.master_address,
                resp.master_epoch,
                sorted(resp.sync_state_set),
                round(took_s * 1000),
            )
        else:  # refusals are routine (a master still exists); no master is warned below
            log.info(
                "election %s: %s %s, took %d ms",
                broker_name,
                result,
                resp.remark,
                round(took_s * 1000),
            )
        self.master_elections[result] = self.master_elections.get(result, 0) + 1
        if resp.code == Code.SUCCESS:
            self.election_seconds.observe(took_s)

    def _after_elect(self, broker_name: str, resp: ElectMasterResponse) -> str | None:
        """Pushes the role-change notice after a successful election; returns the group's
        cluster name (for the answer's member group)."""
        bs = self.state.get(broker_name)
        cluster = bs.cluster_name if bs is not None else None
        if resp.code == Code.SUCCESS and bs is not None and bs.master_by_recovery:
            log.warning(
                "%s: recovery election: master %s (epoch %s) from outside the SyncStateSet, "
                "whose members all lost data it holds",
                broker_name,
                resp.master_broker_id,
                resp.master_epoch,
            )
        elif resp.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE:
            log.warning("%s: no master: %s", broker_name, resp.remark)
        if resp.code == Code.SUCCESS and self.cfg.notify_broker_role_changed:
            self._notify_role_changed(cluster or "", broker_name, resp)
        return cluster

    def _notify_role_changed(self, cluster: str, broker_name: str, r: ElectMasterResponse) -> None:
        if r.master_broker_id is None or r.master_epoch is None or self._nursery is None:
            return
        header = NotifyBrokerRoleChangedRequestHeader(
            master_address=r.master_address,
            master_epoch=r.master_epoch,
            sync_state_set_epoch=r.sync_state_set_epoch,
            master_broker_id=r.master_broker_id,
        )
        body = SyncStateSet(set(r.sync_state_set), r.sync_state_set_epoch or 0).to_json()
        for broker_id, addr in r.broker_addrs.items():
            if self.live.is_alive(BrokerKey(cluster, broker_name, broker_id)):
                self._nursery.start_soon(self._send_notice, addr, header, body, r.master_epoch)

    async def _send_notice(
        self, addr: str, header: NotifyBrokerRoleChangedRequestHeader, body: bytes, epoch: int
    ) -> None:
        if self._notified_epoch.get(addr, -1) >= epoch:
            return  # a newer (or the same) notice already went to this broker
        self._notified_epoch[addr] = epoch
        cmd = RemotingCommand.request(RC.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext(), body)
        with trio.move_on_after(NOTIFY_TIMEOUT_S):
            try:
                await self.client.invoke_oneway(addr, cmd)
                log.info("notified %s: master %s epoch %d", addr, header.master_broker_id, epoch)
            except RemotingError as e:
                log.warning("could not notify %s of the role change: %s", addr, e)

    # -- metrics (docs/operations.md) --------------------------------------------------------

    def metrics_families(self) -> list[Any]:
        """The controller's metrics, read now (Raft through the driver's status)."""
        f = Families(
            {
                "cluster": self.cfg.controller_dleger_group,
                "node_type": "controller",
                "node_id": self.node_id,
            }
        )
        try:
            st = self.driver.status()
        except RuntimeError:  # the driver is not running yet
            st = None
        if st is not None:
            f.gauge("rmq_ha_controller_raft_term", "This node's Raft term", st.term)
            f.gauge(
                "rmq_ha_controller_raft_is_leader",
                "1 on the serving leader (its no-op entry committed)",
                st.serving and st.role is RaftRole.LEADER,
            )
            f.gauge(
                "rmq_ha_controller_raft_role",
                "1 for this node's Raft role",
                labels=("role",),
                samples=(((r.value,), 1.0 if r is st.role else 0.0) for r in RaftRole),
            )
            f.gauge(
                "rmq_ha_controller_raft_leader_known",
                "1 when this node knows a leader",
                st.leader_id is not None,
            )
            f.gauge("rmq_ha_controller_raft_commit_index", "Raft commit index", st.commit_index)
            f.gauge("rmq_ha_controller_raft_applied_index", "Raft applied index", st.applied_index)
        f.counter(
            "rmq_ha_controller_raft_leader_elections_total",
            "Times this node became the serving Raft leader",
            self.leader_elections,
        )
        f.counter(
            "rmq_ha_controller_master_elections_total",
            "Broker master elections this node ran as leader, by answer code",
            labels=("result",),
            samples=(((k,), v) for k, v in sorted(self.master_elections.items())),
        )
        f.histogram(
            "rmq_ha_controller_master_election_duration_seconds",
            "Successful master elections: from the request (or the controller's trigger) "
            "to the committed result",
            self.election_seconds,
        )
        sets = sorted(self.state.broker_sets.items())
        f.gauge("rmq_ha_controller_broker_groups", "Broker groups (brokerName) known", len(sets))
        f.gauge(
            "rmq_ha_controller_live_brokers",
            "Brokers whose heartbeats reach this node",
            len(self.live.view()),
        )
        f.gauge(
            "rmq_ha_controller_group_master_epoch",
            "The group's master epoch",
            labels=("broker_name",),
            samples=(((name,), bs.master_epoch) for name, bs in sets),
        )
        f.gauge(
            "rmq_ha_controller_group_has_master",
            "1 when the group has a master",
            labels=("broker_name",),
            samples=(((name,), bs.master_broker_id is not None) for name, bs in sets),
        )
        f.gauge(
            "rmq_ha_controller_group_sync_state_set_size",
            "Members of the group's SyncStateSet",
            labels=("broker_name",),
            samples=(((name,), len(bs.sync_state_set)) for name, bs in sets),
        )
        return f.out

    # -- scans ---------------------------------------------------------------------------------

    async def _scan_not_active_loop(self) -> None:
        """scanNotActiveBroker, on every node (only the leader acts on what it finds)."""
        while True:
            await trio.sleep(self.cfg.scan_not_active_broker_interval_ms / 1000)
            for key in self.live.expire():
                log.warning("broker %s: heartbeat expired", key)
                self._on_broker_inactive(key)

    async def _watch_clock(self) -> None:
        """Looks at the clock every STALL_TICK_S, so that a pause of this node is credited to
        the brokers' heartbeats before any scan or election reads them (heartbeat.py), and
        logs each stall, whichever look credited it."""
        stalls = self.live.stalls
        seen = 0
        while True:
            await trio.sleep(STALL_TICK_S)
            self.live.tick()
            if stalls is not None and stalls.stalls != seen:
                seen = stalls.stalls
                log.warning(
                    "controller %s did not run for %d ms (paused or starved): brokers' "
                    "heartbeats are not judged by that time",
                    self.node_id,
                    stalls.last_ms,
                )

    async def _scan_inactive_master_loop(self) -> None:
        """scanInactiveMasterAndTriggerReelect, leader only."""
        while True:
            await trio.sleep(self.cfg.scan_inactive_master_interval_ms / 1000)
            if not self.driver.serving:
                continue
            for name in scan_need_reelect(self.state, self.live.view()):
                self.trigger_elect(name)


async def serve(
    cfg: ControllerConfig,
    *,
    on_metrics: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Runs a standalone controller node until cancelled; reports its address when ready (and
    its metrics endpoint's to `on_metrics` first, when metricsExporterType=PROM)."""
    node = ControllerNode(cfg)
    async with trio.open_nursery() as n:
        where = endpoint(cfg, node.address.rpartition(":")[0])
        if where is not None:
            reg = registry_of(SnapshotCollector(node.metrics_families))
            addr = await n.start(serve_metrics, reg, *where)
            if on_metrics is not None:
                on_metrics(addr)
        task_status.started(await n.start(node.run))
