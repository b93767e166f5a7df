"""The name server over real sockets on loopback: registration, routes, expiry, bad input."""

from __future__ import annotations

import json

import trio
import trio.testing

from rmq_ha.config import NamesrvConfig
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import SERIALIZE_ROCKETMQ, RemotingCommand
from rmq_ha.protocol.headers import RegisterBrokerRequestHeader
from rmq_ha.protocol.models import DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper
from rmq_ha.protocol.register_body import RegisterBrokerBody, encode_register_body


def register_cmd(
    addr: str, broker_id: int, topics: list[str], timeout_ms: int = 30_000, state_version: int = 0
) -> RemotingCommand:
    h = RegisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr=addr,
        cluster_name="c",
        ha_server_addr=addr.replace(":10911", ":10912"),
        broker_id=broker_id,
        heartbeat_timeout_millis=timeout_ms,
    )
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigAndMappingSerializeWrapper(
            topic_config_table={
                t: TopicConfig(topic_name=t, read_queue_nums=4, write_queue_nums=4) for t in topics
            },
            data_version=DataVersion(state_version=state_version, counter=1, timestamp=1),
        )
    )
    return RemotingCommand.request(RC.REGISTER_BROKER, h.to_ext(), encode_register_body(body))


async def start(nursery: trio.Nursery, **kw: int) -> Nameserver:
    ns = Nameserver(NamesrvConfig(listen_port=0, **kw))
    await nursery.start(ns.serve)
    return ns


async def test_register_then_route_in_both_serializations() -> None:
    async with trio.open_nursery() as n:
        ns = await start(n)
        async with RemotingClient() as c:
            r = await c.invoke(ns.address, register_cmd("127.0.0.1:10911", 0, ["T"]))
            assert r.code == Resp.SUCCESS, r.remark
            for ser in (0, SERIALIZE_ROCKETMQ):
                q = RemotingCommand.request(
                    RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, serialize_type=ser
                )
                r = await c.invoke(ns.address, q)
                assert r.code == Resp.SUCCESS and r.serialize_type == ser
                route = json.loads(r.body or b"")
                assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
                assert route["queueDatas"][0]["writeQueueNums"] == 4
            r = await c.invoke(
                ns.address, RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
            )
            assert r.code == Resp.TOPIC_NOT_EXIST and "Nope" in (r.remark or "")
            # A slave learns its master and HA address.
            r = await c.invoke(ns.address, register_cmd("127.0.0.2:10911", 1, ["T"]))
            assert r.ext_fields["masterAddr"] == "127.0.0.1:10911"
            assert r.ext_fields["haServerAddr"] == "127.0.0.1:10912"
            r = await c.invoke(ns.address, RemotingCommand.request(RC.GET_BROKER_CLUSTER_INFO))
            info = json.loads(r.body or b"")
            assert info["clusterAddrTable"] == {"c": ["broker-a"]}
        n.cancel_scope.cancel()


async def test_brokers_without_heartbeats_expire() -> None:
    async with trio.open_nursery() as n:
        ns = await start(n, scan_not_active_broker_interval_ms=20)
        async with RemotingClient() as c:
            await c.invoke(ns.address, register_cmd("127.0.0.1:10911", 0, ["T"], timeout_ms=150))
            for _ in range(5):  # light heartbeats keep it alive
                await trio.sleep(0.05)
                hb = RemotingCommand.request(
                    RC.BROKER_HEARTBEAT,
                    {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a"},
                )
                assert (await c.invoke(ns.address, hb)).code == Resp.SUCCESS
            assert ns.routes.route("T") is not None
            with trio.fail_after(5):
                while ns.routes.route("T") is not None:
                    await trio.sleep(0.02)
        n.cancel_scope.cancel()


async def test_bad_input_gets_clear_answers_and_breaks_only_its_connection() -> None:
    async with trio.open_nursery() as n:
        ns = await start(n)
        async with RemotingClient() as c:
            r = await c.invoke(ns.address, RemotingCommand.request(9999))
            assert r.code == Resp.REQUEST_CODE_NOT_SUPPORTED and "9999" in (r.remark or "")
            r = await c.invoke(ns.address, RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {}))
            assert r.code == Resp.SYSTEM_ERROR and "topic" in (r.remark or "")
            r = await c.invoke(
                ns.address, RemotingCommand.request(RC.REGISTER_BROKER, {"brokerName": "x"}, b"{")
            )
            assert r.code == Resp.SYSTEM_ERROR
            # Garbage on another connection: that connection is closed, the server lives on.
            host, port = ns.address.split(":")
            raw = await trio.open_tcp_stream(host, int(port))
            await raw.send_all(b"\x00\x00\x00\x08\x05\xff\xff\xffjunkjunk")
            with trio.fail_after(5):
                assert await raw.receive_some(100) == b""
            await raw.aclose()
            r = await c.invoke(ns.address, RemotingCommand.request(RC.GET_BROKER_CLUSTER_INFO))
            assert r.code == Resp.SUCCESS
        n.cancel_scope.cancel()


async def test_a_refused_registration_tells_the_broker_it_is_stale() -> None:
    """#6316: a broker registering id 0 from an older epoch (stateVersion) than the live holder
    is refused; the answer says so (registerRefused, ours), so the stale master can ask its
    controller at once instead of at its next poll. Accepted answers do not carry it."""
    async with trio.open_nursery() as n:
        ns = await start(n)
        async with RemotingClient() as c:
            r = await c.invoke(
                ns.address, register_cmd("127.0.0.1:10911", 0, ["T"], state_version=3)
            )
            assert r.code == Resp.SUCCESS and "registerRefused" not in r.ext_fields
            r = await c.invoke(
                ns.address, register_cmd("127.0.0.2:10911", 0, ["T"], state_version=2)
            )
            assert r.code == Resp.SUCCESS and r.ext_fields.get("registerRefused") == "true"
            r = await c.invoke(
                ns.address, register_cmd("127.0.0.2:10911", 0, ["T"], state_version=4)
            )
            assert r.code == Resp.SUCCESS and "registerRefused" not in r.ext_fields
        n.cancel_scope.cancel()


async def test_kv_config_lists_a_namespace() -> None:
    """PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE (219, mqadmin and the dashboard
    read namespaces whole); an empty namespace is RocketMQ's QUERY_NOT_FOUND."""
    async with trio.open_nursery() as n:
        ns = await start(n)
        async with RemotingClient() as c:

            async def call(code: int, ext: dict[str, str]) -> RemotingCommand:
                return await c.invoke(ns.address, RemotingCommand.request(code, ext))

            r = await call(RC.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
            assert r.code == Resp.QUERY_NOT_FOUND and "No config item" in (r.remark or "")
            for k, v in (("T1", "broker-a:4"), ("T2", "broker-b:2")):
                put = {"namespace": "ORDER_TOPIC_CONFIG", "key": k, "value": v}
                assert (await call(RC.PUT_KV_CONFIG, put)).code == Resp.SUCCESS
            r = await call(RC.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
            assert r.code == Resp.SUCCESS
            assert json.loads(r.body or b"")["table"] == {"T1": "broker-a:4", "T2": "broker-b:2"}
            await call(RC.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"})
            r = await call(RC.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"})
            assert r.code == Resp.QUERY_NOT_FOUND
        n.cancel_scope.cancel()


async def test_a_broker_is_unregistered_when_its_last_connection_closes_not_an_old_one() -> None:
    """After a partition, a heartbeat the broker had sent on its old connection arrived after
    it re-registered on a new one; the name server re-pointed the broker to the old
    connection, and when that closed it unregistered a live broker (fault probe r07: the
    slave acted for 0.5 s). A killed broker, whose connections all close, still goes at once."""
    addr = "127.0.0.1:10911"
    hb = RemotingCommand.request(
        RC.BROKER_HEARTBEAT, {"clusterName": "c", "brokerAddr": addr, "brokerName": "broker-a"}
    )
    async with trio.open_nursery() as n:
        ns = await start(n)
        async with RemotingClient() as old, RemotingClient() as new:
            assert (await old.invoke(ns.address, register_cmd(addr, 0, ["T"]))).code == 0
            assert (await new.invoke(ns.address, register_cmd(addr, 0, ["T"]))).code == 0
            assert (await old.invoke(ns.address, hb)).code == 0  # the late heartbeat
            old_conn = await old.connection(ns.address)
            host, port = old_conn.stream.socket.getsockname()[:2]  # type: ignore[attr-defined]
            await old_conn.aclose()
            with trio.fail_after(5):  # the server has seen the old connection close
                while any(c.peer == f"{host}:{port}" for c in ns.server.connections):
                    await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            assert ns.routes.route("T") is not None, "a live broker was unregistered"
            await (await new.connection(ns.address)).aclose()
            with trio.fail_after(5):
                while ns.routes.route("T") is not None:
                    await trio.sleep(0.01)
        n.cancel_scope.cancel()
