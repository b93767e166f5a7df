"""The name server role (`rmq-ha namesrv`): route tables over the remoting protocol.

Brokers register (103) with their topic configs every 30 s and keep alive with light
heartbeats (904, or 322 from older brokers); a scan every scanNotActiveBrokerInterval drops
brokers whose heartbeat timed out, and a broker whose connection closes is dropped at once
(RocketMQ's BrokerHousekeepingService). Clients ask for routes (105) and cluster info (106).
Several name servers run side by side with no state shared: brokers register with all of them.

Slave acting master (supportActingMaster): routes show a masterless group's smallest-id replica
as a read-only id 0 (routes.py), and with notifyMinBrokerIdChanged the group's brokers get
NOTIFY_MIN_BROKER_ID_CHANGE (905, oneway) when its smallest id changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from rmq_ha import config_admin, faults
from rmq_ha.clock import STALL_TICK_S, StallCredit, monotonic_ms, wall_ms
from rmq_ha.config import ControllerConfig, NamesrvConfig
from rmq_ha.metrics import Families, SnapshotCollector, endpoint, registry_of, serve_metrics
from rmq_ha.nameserver.routes import MinIdChange, RouteTable
from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.net.server import RemotingServer
from rmq_ha.protocol.admin import (
    AddWritePermOfBrokerResponseHeader,
    BrokerWritePermRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetTopicsByClusterRequestHeader,
    TopicList,
    WipeWritePermOfBrokerResponseHeader,
)
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import CommandHeader
from rmq_ha.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    GetBrokerMemberGroupRequestHeader,
    GetRouteInfoRequestHeader,
    NotifyMinBrokerIdChangeRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from rmq_ha.protocol.models import (
    DataVersion,
    GetBrokerMemberGroupResponseBody,
    KVTable,
    QueueData,
)
from rmq_ha.protocol.register_body import decode_register_body
from rmq_ha.security.guard import guard_of, inner_signer
from rmq_ha.security.tls import client_context, server_context, server_mode

if TYPE_CHECKING:
    from rmq_ha.controller.role import ControllerNode

log = logging.getLogger(__name__)

#: RocketMQ key -> why it is safe to change on a running name server (UPDATE_NAMESRV_CONFIG).
RUNTIME_KEYS: Final[Mapping[str, str]] = {
    "scanNotActiveBrokerInterval": "read before every scan of broker heartbeats",
    "supportActingMaster": "read by every route request",
    "notifyMinBrokerIdChanged": "read before every NOTIFY_MIN_BROKER_ID_CHANGE",
}


class Nameserver:
    def __init__(
        self,
        cfg: NamesrvConfig,
        now_ms: Callable[[], int] = wall_ms,
        controller_cfg: ControllerConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.now_ms = now_ms
        self.routes = RouteTable(default_timeout_ms=cfg.broker_channel_expired_time_ms)
        self._stalls = StallCredit()
        self.kv: dict[str, dict[str, str]] = {}
        d = Dispatcher("namesrv", guard_of(cfg, "namesrv"))
        d.register(RC.REGISTER_BROKER, self.register_broker)
        d.register(RC.UNREGISTER_BROKER, self.unregister_broker)
        self.old_protocol = faults.active(faults.OLD_NAMESRV)
        if not self.old_protocol:
            d.register(RC.BROKER_HEARTBEAT, self.broker_heartbeat)
            d.register(RC.GET_BROKER_MEMBER_GROUP, self.get_member_group)
        d.register(RC.QUERY_DATA_VERSION, self.query_data_version)
        d.register(RC.GET_ROUTEINFO_BY_TOPIC, self.get_route)
        d.register(RC.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        d.register(RC.PUT_KV_CONFIG, self.put_kv)
        d.register(RC.GET_KV_CONFIG, self.get_kv)
        d.register(RC.DELETE_KV_CONFIG, self.delete_kv)
        d.register(RC.GET_KVLIST_BY_NAMESPACE, self.get_kv_list)
        d.register(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topics)
        d.register(RC.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster)
        d.register(RC.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        d.register(RC.WIPE_WRITE_PERM_OF_BROKER, self.write_perm)
        d.register(RC.ADD_WRITE_PERM_OF_BROKER, self.write_perm)
        config_admin.register(
            d,
            lambda: self.cfg,
            self._apply_config,
            get_code=RC.GET_NAMESRV_CONFIG,
            update_code=RC.UPDATE_NAMESRV_CONFIG,
            runtime_keys=RUNTIME_KEYS,
            role="name server",
        )
        self.dispatcher = d
        self.server = RemotingServer(
            d,
            cfg.listen_host,
            cfg.listen_port,
            tls=server_context(cfg),
            tls_mode=server_mode(cfg),
            idle_s=cfg.server_channel_max_idle_time_sec,
        )
        self.outbound = RemotingClient(signer=inner_signer(cfg), tls=client_context(cfg))
        #: The connection each broker address last registered or beat over.
        #: The connections each broker address registered or beat over since it registered;
        #: it is gone when the last of them closes.
        self._broker_conns: dict[str, set[Connection]] = {}
        self.controller = self._embed_controller(controller_cfg)

    def _embed_controller(self, ccfg: ControllerConfig | None) -> ControllerNode | None:
        """enableControllerInNamesrv: a controller node in this process, on this server when its
        peer port is our listen port (else on its own peer port, like DLedger's server)."""
        if ccfg is None or not self.cfg.enable_controller_in_namesrv:
            return None
        from rmq_ha.controller.role import ControllerNode

        node = ControllerNode(ccfg)
        node.embed(self.dispatcher, self.cfg.listen_port, self.broker_heartbeat)
        return node

    def _apply_config(self, new: NamesrvConfig) -> None:
        """UPDATE_NAMESRV_CONFIG: `new` differs only in RUNTIME_KEYS, each read where used."""
        self.cfg = new

    @property
    def address(self) -> str:
        return self.server.address

    def _track(self, conn: Connection, broker_addr: str) -> None:
        """Remembers the connections a broker talks over; when the last of them closes, the
        broker is gone (a killed broker is unregistered at once, not after its heartbeat
        timeout). Every one counts, not the latest: after a partition a heartbeat sent on
        the broker's old connection can arrive after it re-registered on a new one, and that
        old connection closing then unregistered a live broker (fault probe r07)."""
        conns = self._broker_conns.setdefault(broker_addr, set())
        if conn in conns:
            return
        conns.add(conn)
        if "broker_watch" not in conn.attrs:
            conn.attrs["broker_watch"] = True
            self._nursery.start_soon(self._watch, conn)

    async def _watch(self, conn: Connection) -> None:
        await conn.wait_closed()
        for addr, conns in list(self._broker_conns.items()):
            if conn not in conns:
                continue
            conns.discard(conn)
            if conns:
                continue
            del self._broker_conns[addr]
            if addr in self.routes.live:
                log.warning("broker %s closed its connection: unregistered", addr)
                self._notify(self.routes.unregister(addr))

    def _notify(self, change: MinIdChange | None) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE (905) to the group, oneway (notifyMinBrokerIdChanged,
        only for groups with acting master enabled)."""
        if change is None or not self.cfg.notify_min_broker_id_changed:
            return
        group = self.routes.groups.get(change.broker_name)
        if group is None or not group.enable_acting_master:
            return
        h = NotifyMinBrokerIdChangeRequestHeader(
            min_broker_id=change.min_id,
            broker_name=change.broker_name,
            min_broker_addr=change.min_addr,
            offline_broker_addr=change.offline_addr,
            ha_broker_addr=change.ha_addr,
        )

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RC.NOTIFY_MIN_BROKER_ID_CHANGE, h.to_ext(), oneway=True)
            try:
                with trio.fail_after(0.3):
                    await self.outbound.invoke_oneway(addr, cmd)
            except Exception as e:  # the broker also polls its member group
                log.debug("905 to %s failed: %s", addr, e)

        for addr in change.recipients:
            self._nursery.start_soon(one, addr)

    async def serve(
        self,
        *,
        on_metrics: Callable[[str], None] | None = None,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with self.outbound, trio.open_nursery() as nursery:
            self._nursery = nursery
            where = endpoint(self.cfg, self.cfg.listen_host)
            if where is not None:
                reg = registry_of(SnapshotCollector(self.metrics_families))
                addr = await nursery.start(serve_metrics, reg, *where)
                if on_metrics is not None:
                    on_metrics(addr)
            await nursery.start(self.server.serve)
            if self.controller is not None:
                await nursery.start(self.controller.run)
            nursery.start_soon(self._scan_loop)
            nursery.start_soon(self._watch_clock)
            log.info("name server ready on %s", self.address)
            task_status.started(self.address)

    def metrics_families(self) -> list[Any]:
        """The name server's metrics (ours), and its embedded controller's."""
        f = Families({"node_type": "nameserver", "node_id": self.address})
        r = self.routes
        f.gauge("rmq_ha_namesrv_live_brokers", "Brokers registered and alive", len(r.live))
        f.gauge("rmq_ha_namesrv_broker_groups", "Broker groups (brokerName) routed", len(r.groups))
        f.gauge("rmq_ha_namesrv_clusters", "Clusters", len(r.clusters))
        f.gauge("rmq_ha_namesrv_topics", "Topics with a route", len(r.topics))
        out = f.out
        if self.controller is not None:
            out += self.controller.metrics_families()
        return out

    def _credit_stall(self) -> None:
        """A pause of this process is not held against the brokers (clock.StallCredit): on
        resume their heartbeats wait in the socket buffers, and the scan must not expire
        them first."""
        lost = self._stalls.observe(monotonic_ms())
        if lost:
            log.warning(
                "name server did not run for %d ms (paused or starved): brokers' heartbeats "
                "are not judged by that time",
                lost,
            )
            self.routes.credit(lost, self.now_ms())

    async def _watch_clock(self) -> None:
        while True:
            await trio.sleep(STALL_TICK_S)
            self._credit_stall()

    async def _scan_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.scan_not_active_broker_interval_ms / 1000)
            self._credit_stall()
            for addr, change in self.routes.scan(self.now_ms()):
                log.warning("broker %s expired (no heartbeat): unregistered", addr)
                self._broker_conns.pop(addr, None)
                self._notify(change)

    # ---- brokers --------------------------------------------------------------------------

    async def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        body = decode_register_body(cmd.body, compressed=h.compressed, version=cmd.version)
        wrapper = body.topic_config_serialize_wrapper
        topics = {
            name: QueueData(
                read_queue_nums=tc.read_queue_nums,
                write_queue_nums=tc.write_queue_nums,
                perm=tc.perm,
                topic_sys_flag=tc.topic_sys_flag,
            )
            for name, tc in wrapper.topic_config_table.items()
        }
        res = self.routes.register(
            cluster=h.cluster_name,
            addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            now_ms=self.now_ms(),
            ha_server_addr=h.ha_server_addr,
            topics=topics,
            data_version=wrapper.data_version,
            timeout_ms=h.heartbeat_timeout_millis,
            enable_acting_master=bool(h.enable_acting_master),
            zone_name=h.zone_name,
        )
        if not res.refused:
            self._track(conn, h.broker_addr)
            self._notify(res.min_change)
        if res.refused:
            log.warning(
                "register of %s as %s id %d refused: a broker with a later stateVersion holds it",
                h.broker_addr,
                h.broker_name,
                h.broker_id,
            )
        resp_header = RegisterBrokerResponseHeader(
            ha_server_addr=res.ha_server_addr,
            master_addr=res.master_addr,
            register_refused=True if res.refused else None,
        )
        order_conf = KVTable(table=dict(self.kv.get("ORDER_TOPIC_CONFIG", {})))
        return cmd.response(Resp.SUCCESS, None, resp_header.to_ext(), order_conf.to_json())

    async def unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        self._broker_conns.pop(h.broker_addr, None)
        self._notify(self.routes.unregister(h.broker_addr))
        return cmd.response(Resp.SUCCESS)

    async def broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
        if self.routes.heartbeat(h.broker_addr, self.now_ms()):
            self._track(conn, h.broker_addr)
        return cmd.response(Resp.SUCCESS)

    async def query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_ext(cmd.ext_fields)
        dv = DataVersion.from_json(cmd.body) if cmd.body else DataVersion()
        changed = self.routes.data_version_changed(h.broker_addr, dv, self.now_ms())
        live = self.routes.live.get(h.broker_addr)
        if live is not None:
            self._track(conn, h.broker_addr)
        body = live.data_version.to_json() if live is not None else None
        return cmd.response(
            Resp.SUCCESS, None, QueryDataVersionResponseHeader(changed=changed).to_ext(), body
        )

    async def get_member_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetBrokerMemberGroupRequestHeader.from_ext(cmd.ext_fields)
        group = self.routes.member_group(h.cluster_name, h.broker_name)
        body = GetBrokerMemberGroupResponseBody(broker_member_group=group)
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    # ---- clients --------------------------------------------------------------------------

    async def get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext(cmd.ext_fields)
        route = self.routes.route(h.topic, acting_master=self.cfg.support_acting_master)
        if route is None:
            return cmd.response(
                Resp.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}",
            )
        order = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(h.topic)
        route.order_topic_conf = order
        return cmd.response(Resp.SUCCESS, None, None, route.to_json())

    async def get_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, self.routes.cluster_info().to_json())

    # ---- admin: topic lists and deletion (mqadmin topicList, deleteTopic) ------------------

    async def get_all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = TopicList(topic_list=set(self.routes.topics))
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def get_topics_by_cluster(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_ext(cmd.ext_fields)
        body = TopicList(topic_list=set(self.routes.topics_of_cluster(h.cluster)))
        return cmd.response(Resp.SUCCESS, None, None, body.to_json())

    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The topic's route goes (only the cluster's brokers' queues with clusterName). A
        broker that still has the topic brings it back at its next registration: delete it
        on the brokers first (mqadmin deleteTopic does)."""
        h = DeleteTopicFromNamesrvRequestHeader.from_ext(cmd.ext_fields)
        self.routes.delete_topic(h.topic, h.cluster_name)
        log.info("topic %s deleted from the routes (cluster %s)", h.topic, h.cluster_name or "all")
        return cmd.response(Resp.SUCCESS)

    async def write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """mqadmin wipeWritePerm / addWritePerm (205 / 327): producers stop (or start again)
        sending to a broker group, e.g. to drain it before maintenance. Each name server keeps
        its own routes: an admin sends this to every one of them."""
        h = BrokerWritePermRequestHeader.from_ext(cmd.ext_fields)
        wipe = cmd.code == RC.WIPE_WRITE_PERM_OF_BROKER
        n = self.routes.set_write_perm(h.broker_name, writable=not wipe)
        log.warning(
            "write permission of broker %s %s on %d topics",
            h.broker_name,
            "wiped" if wipe else "restored",
            n,
        )
        rh: CommandHeader = (
            WipeWritePermOfBrokerResponseHeader(wipe_topic_count=n)
            if wipe
            else AddWritePermOfBrokerResponseHeader(add_topic_count=n)
        )
        return cmd.response(Resp.SUCCESS, None, rh.to_ext())

    # ---- KV config (RocketMQ keeps e.g. ORDER_TOPIC_CONFIG here) -------------------------

    async def put_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns, key, value = (cmd.ext_fields.get(k) for k in ("namespace", "key", "value"))
        if not ns or not key or value is None:
            return cmd.response(Resp.SYSTEM_ERROR, "namespace, key and value are required")
        self.kv.setdefault(ns, {})[key] = value
        return cmd.response(Resp.SUCCESS)

    async def get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns, key = cmd.ext_fields.get("namespace", ""), cmd.ext_fields.get("key", "")
        value = self.kv.get(ns, {}).get(key)
        if value is None:
            return cmd.response(Resp.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(Resp.SUCCESS, None, {"value": value})

    async def get_kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_KVLIST_BY_NAMESPACE: every entry of a namespace as a KVTable body; RocketMQ's
        QUERY_NOT_FOUND when the namespace holds none."""
        ns = cmd.ext_fields.get("namespace", "")
        table = self.kv.get(ns)
        if not table:
            return cmd.response(Resp.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(Resp.SUCCESS, None, None, KVTable(table=dict(table)).to_json())

    async def delete_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns, key = cmd.ext_fields.get("namespace", ""), cmd.ext_fields.get("key", "")
        self.kv.get(ns, {}).pop(key, None)
        return cmd.response(Resp.SUCCESS)


async def serve(
    cfg: NamesrvConfig,
    *,
    controller_cfg: ControllerConfig | None = None,
    on_metrics: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Runs a name server (with its embedded controller when enableControllerInNamesrv) until
    cancelled; reports its address when listening (and its metrics endpoint's to
    `on_metrics`, first, when metricsExporterType=PROM)."""
    await Nameserver(cfg, controller_cfg=controller_cfg).serve(
        on_metrics=on_metrics, task_status=task_status
    )
