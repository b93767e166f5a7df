"""Support for the client tests (an in-process cluster over loopback, fast client configs, a
silent server, a fake broker registration), plus tests of routes and name-server failover.

The other tests_client_* modules import the helpers from here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import trio

from rmq_ha.broker.broker import Broker, open_broker
from rmq_ha.client import (
    Admin,
    ClientConfig,
    ConsumerConfig,
    Producer,
    ProducerConfig,
    RouteNotFoundError,
)
from rmq_ha.client.routes import RouteCache
from rmq_ha.config import BrokerConfig, NamesrvConfig
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import RegisterBrokerRequestHeader
from rmq_ha.protocol.models import TopicConfig, TopicConfigAndMappingSerializeWrapper
from rmq_ha.protocol.register_body import RegisterBrokerBody, encode_register_body

pytestmark = pytest.mark.timeout(60)

FAST_CLIENT = ClientConfig(
    client_ip="127.0.0.1",
    poll_name_server_interval_s=0.5,
    heartbeat_broker_interval_s=0.5,
    persist_consumer_offset_interval_s=0.2,
    mq_client_api_timeout_s=3.0,
)
FAST_PRODUCER = ProducerConfig(client=FAST_CLIENT)
FAST_CONSUMER = ConsumerConfig(
    client=FAST_CLIENT,
    rebalance_interval_s=0.5,
    pull_time_delay_when_exception_s=0.2,
    broker_suspend_max_time_s=1.0,
    consumer_timeout_when_suspend_s=5.0,
    lock_interval_s=0.5,
    send_back_failed_delay_s=0.2,
    suspend_current_queue_time_s=0.1,
    await_termination_s=2.0,
)


@dataclass
class Env:
    namesrv: str  # "a;b" when several
    namesrv_list: list[str]
    broker: str
    broker_name: str
    store_root: Path
    _stop: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)
    #: The running broker (its components: parked pulls, the store ...), None once stopped.
    node: Broker | None = field(default=None, repr=False)

    async def stop_broker(self) -> None:
        assert self._stop is not None
        await self._stop()


@asynccontextmanager
async def client_cluster(
    tmp_path: Path, *, namesrvs: int = 1, **broker_kw: object
) -> AsyncIterator[Env]:
    """Name server(s) and one broker (broker-a) over loopback, torn down at exit."""
    async with trio.open_nursery() as n:
        addrs = []
        for _ in range(namesrvs):
            ns = Nameserver(NamesrvConfig(listen_port=0))
            await n.start(ns.serve)
            addrs.append(ns.address)
        cfg = BrokerConfig(
            listen_port=0,
            namesrv_addr=";".join(addrs),
            store_path_root_dir=str(tmp_path / "store"),
            commitlog_segment_bytes=1 << 20,
            **broker_kw,  # type: ignore[arg-type]
        )
        broker_scope = trio.CancelScope()
        stopped = trio.Event()
        env = Env(";".join(addrs), addrs, "", cfg.broker_name, tmp_path / "store")

        async def run_broker(
            *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
        ) -> None:
            try:
                with broker_scope:
                    async with open_broker(cfg) as node:
                        env.node = node
                        task_status.started(node.address)
                        await trio.sleep_forever()
            finally:
                env.node = None
                stopped.set()

        async def stop() -> None:
            broker_scope.cancel()
            await stopped.wait()
            await trio.sleep(0.1)  # let clients see their connections close

        env.broker = await n.start(run_broker)
        env._stop = stop
        yield env
        n.cancel_scope.cancel()


async def wait_for_route(namesrv: str, topic: str, timeout_s: float = 5.0) -> None:
    async with Admin(namesrv, config=FAST_CLIENT) as admin:
        with trio.fail_after(timeout_s):
            while True:
                try:
                    await admin.route(topic)
                    return
                except RouteNotFoundError:
                    await trio.sleep(0.05)


async def create_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    async with Admin(namesrv, config=FAST_CLIENT) as admin:
        await admin.create_topic(
            topic, cluster="DefaultCluster", queue_nums=queues, wait_for_route_s=5.0
        )


async def silent_server(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Accepts connections on 127.0.0.1:<free port>, reads, never answers."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    task_status.started(f"127.0.0.1:{port}")

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some(65536):
                pass

    await trio.serve_listeners(handle, listeners)


async def hold(
    cm: AbstractAsyncContextManager[None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Enters `cm` in a task and stays inside until the task is cancelled."""
    async with cm:
        task_status.started()
        await trio.sleep_forever()


@asynccontextmanager
async def register_fake_broker(
    namesrv: str, broker_name: str, addr: str, topics: dict[str, int]
) -> AsyncIterator[None]:
    """Registers `addr` as the master of `broker_name` serving `topics` (name -> queues) for
    the duration of the block. The registration's connection stays open like a real
    broker's: the name server drops a broker whose connection closes."""
    h = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=addr,
        cluster_name="DefaultCluster",
        ha_server_addr="",
        broker_id=0,
        heartbeat_timeout_millis=120_000,
    )
    table = {
        t: TopicConfig(topic_name=t, read_queue_nums=q, write_queue_nums=q)
        for t, q in topics.items()
    }
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigAndMappingSerializeWrapper(
            topic_config_table=table
        )
    )
    async with RemotingClient() as c:
        r = await c.invoke(
            namesrv,
            RemotingCommand.request(RC.REGISTER_BROKER, h.to_ext(), encode_register_body(body)),
        )
        assert r.code == Resp.SUCCESS, r.remark
        yield


# ---------------------------------------------------------------------------------------------
# Routes


@pytest.mark.timeout(30)
async def test_route_cache_publish_and_subscribe_info(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "RouteT", queues=3)
        async with RemotingClient() as rc:
            cache = RouteCache(rc, env.namesrv_list)
            info = await cache.publish_info("RouteT")
            assert [(q.broker_name, q.queue_id) for q in info.queues] == [
                ("broker-a", 0), ("broker-a", 1), ("broker-a", 2),
            ]  # fmt: skip
            assert not info.from_default_topic
            subs = await cache.subscribe_queues("RouteT")
            assert subs is not None and len(subs) == 3
            assert cache.master_addr("broker-a") == env.broker
            assert cache.find_broker_addr("broker-a", 5) == env.broker  # any replica for reads
            assert cache.find_broker_addr("broker-a", 5, only_this_broker=True) is None
            # A topic with no route goes through the auto-create default topic.
            info = await cache.publish_info("NoSuchTopic", default_topic="TBW102")
            assert info.from_default_topic and len(info.queues) == 4
            with pytest.raises(RouteNotFoundError) as e:
                await cache.publish_info("NoSuchTopic")
            assert e.value.definite


@pytest.mark.timeout(30)
async def test_several_name_servers_are_tried_in_turn(tmp_path: Path) -> None:
    async with trio.open_nursery() as n:
        dead = await n.start(silent_server)  # answers nothing: times out
        n.cancel_scope.cancel()
    async with client_cluster(tmp_path, namesrvs=2) as env:
        await create_topic(env.namesrv, "NsT")
        # A refused address first, then a live one: the route still comes back.
        cfg = replace(FAST_CLIENT, mq_client_api_timeout_s=0.5)
        async with Producer(
            "pg", [dead, *env.namesrv_list], config=ProducerConfig(client=cfg)
        ) as p:
            r = await p.send("NsT", b"via the second name server")
            assert r.ok
        async with Admin([dead], config=cfg) as admin:
            with pytest.raises(RouteNotFoundError) as e:
                await admin.route("NsT")
            assert "no name server answered" in str(e.value)


def test_clients_start_at_a_random_name_server_as_rocketmqs_do() -> None:
    """RocketMQ's client starts its name-server rotation at a random index; all clients
    starting at the first one all read the same stale route while that name server is cut
    off with an old master (seen in a partition-master campaign)."""
    addrs = ["10.0.0.1:9876", "10.0.0.2:9876", "10.0.0.3:9876"]
    starts = {RouteCache(RemotingClient(), addrs)._ns_index for _ in range(60)}
    assert starts == {0, 1, 2}  # each is missed with probability (2/3)^60 < 1e-10


def test_a_changed_route_is_logged_with_the_name_server_that_said_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Which name server gave which master is what an operator needs after a failover (in a
    partition campaign two name servers served different masters for seconds)."""
    from rmq_ha.protocol.models import BrokerData, TopicRouteData

    cache = RouteCache(RemotingClient(), ["10.0.0.1:9876"])

    def route(addrs: dict[int, str]) -> TopicRouteData:
        return TopicRouteData(broker_datas=[BrokerData("c", "broker-a", addrs)])

    with caplog.at_level("INFO", logger="rmq_ha.client.routes"):
        cache._store("T", route({0: "a:1", 1: "b:1"}))  # first sight: nothing to say
        cache._store("T", route({0: "a:1", 1: "b:1"}))  # unchanged
        cache._store("T", route({0: "b:1", 1: "a:1"}))
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "route of broker-a (topic T) changed, from name server 10.0.0.1:9876" in msg
    assert "{0: 'a:1', 1: 'b:1'} -> {0: 'b:1', 1: 'a:1'}" in msg
    assert cache.master_addr("broker-a") == "b:1"
