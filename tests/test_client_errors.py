"""Definite vs indefinite send failures: a broker that is down (connect refused) fails
definitely after the allowed retries; a broker that accepts and never answers is a timeout
whose outcome is unknown; a refusal code from the broker is definite; retrying after a
timeout is only done when asked, and then the result says `possible_duplicate`."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from rmq_ha.client import Producer, SendError, SendTimeoutError
from rmq_ha.client.errors import BrokerResponseError, RouteNotFoundError
from rmq_ha.errors import RemotingTimeoutError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from test_client_cluster import (
    FAST_PRODUCER,
    client_cluster,
    create_topic,
    hold,
    register_fake_broker,
    silent_server,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.timeout(30)
async def test_broker_down_before_send_is_a_definite_failure(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "DownT")
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            assert (await p.send("DownT", b"before")).ok
            await env.stop_broker()
            with pytest.raises(SendError) as e:
                await p.send("DownT", b"after")
            assert e.value.definite, e.value
            assert not isinstance(e.value, SendTimeoutError)
            # 1 + retryTimesWhenSendFailed attempts, each refused at connect.
            assert len(e.value.attempts) == 3
            assert all(a.definite and a.broker_name == "broker-a" for a in e.value.attempts)
            with pytest.raises(SendError) as e2:
                await p.send_oneway("DownT", b"oneway")
            assert e2.value.definite
        # A new producer: the name server dropped the broker when its connection closed (as
        # RocketMQ's does), so there is no route at all: a definite failure too.
        async with Producer("pg2", env.namesrv, config=FAST_PRODUCER) as p:
            with pytest.raises(RouteNotFoundError):
                await p.send("DownT", b"fresh")


@pytest.mark.timeout(30)
async def test_silent_broker_is_a_timeout_with_unknown_outcome(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env, trio.open_nursery() as n:
        silent = await n.start(silent_server)
        await n.start(
            hold, register_fake_broker(env.namesrv, "broker-silent", silent, {"SilentT": 2})
        )
        quick = replace(
            FAST_PRODUCER, client=replace(FAST_PRODUCER.client, mq_client_api_timeout_s=0.5)
        )
        async with Producer("pg", env.namesrv, config=quick) as p:
            with pytest.raises(SendTimeoutError) as e:
                await p.send("SilentT", b"lost in the void", timeout_s=0.5)
            assert not e.value.definite
            # Not retried elsewhere behind the caller's back: one attempt.
            assert len(e.value.attempts) == 1 and not e.value.attempts[0].definite
            # The timed-out connection is closed (clientCloseSocketIfTimeout): the next send
            # to this broker opens a fresh one.
            assert silent not in p.instance.remoting._conns
        n.cancel_scope.cancel()


@pytest.mark.timeout(30)
async def test_retry_after_timeout_only_when_asked_and_flagged(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env, trio.open_nursery() as n:
        silent = await n.start(silent_server)
        # The topic lives on the real broker and on a silent one.
        await create_topic(env.namesrv, "MixT", queues=2)
        fake = register_fake_broker(env.namesrv, "broker-silent", silent, {"MixT": 2})
        await n.start(hold, fake)
        cfg = replace(
            FAST_PRODUCER,
            client=replace(FAST_PRODUCER.client, mq_client_api_timeout_s=0.5),
            retry_after_timeout=True,
            send_msg_max_timeout_per_request_s=0.3,
            send_latency_fault_enable=False,
        )
        flagged = 0
        async with Producer("pg", env.namesrv, config=cfg) as p:
            queues = await p.fetch_publish_queues("MixT")
            assert {q.broker_name for q in queues} == {"broker-a", "broker-silent"}
            for i in range(6):
                r = await p.send("MixT", f"m{i}", timeout_s=5)
                assert r.ok and r.queue.broker_name == "broker-a"
                assert r.possible_duplicate == (r.attempts > 1)
                flagged += r.possible_duplicate
        # Round robin alternates brokers, so some sends hit the silent one first.
        assert flagged >= 1
        n.cancel_scope.cancel()


@pytest.mark.timeout(30)
async def test_broker_refusal_is_definite_and_not_retried(tmp_path: Path) -> None:
    async with client_cluster(tmp_path, max_message_size=64) as env:
        await create_topic(env.namesrv, "BigT")
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            with pytest.raises(SendError) as e:
                await p.send("BigT", b"x" * 100)
        assert e.value.definite and e.value.code == Resp.MESSAGE_ILLEGAL
        assert len(e.value.attempts) == 1
        assert isinstance(e.value.__cause__, BrokerResponseError)


async def test_a_timed_out_request_closes_its_connection_as_rocketmqs_client_does() -> None:
    """RocketMQ's clientCloseSocketIfTimeout (default true): after a timeout the next request
    goes over a fresh connection, not behind one that may be stuck in TCP retransmission
    back-off after a partition. With close_on_timeout=False the connection is kept."""
    conns: list[trio.Event] = []  # one per accepted connection, set when the client closed it

    async def server(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")

        async def handle(stream: trio.SocketStream) -> None:
            gone = trio.Event()
            conns.append(gone)
            async with stream:
                with contextlib.suppress(trio.BrokenResourceError):
                    while await stream.receive_some(65536):
                        pass  # reads, never answers
            gone.set()

        await trio.serve_listeners(handle, listeners)

    def cmd() -> RemotingCommand:
        return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})

    async with trio.open_nursery() as n:
        addr = await n.start(server)
        async with RemotingClient() as c:
            with pytest.raises(RemotingTimeoutError):
                await c.invoke(addr, cmd(), 0.2)
            await conns[0].wait()  # closed by the client
            with pytest.raises(RemotingTimeoutError):
                await c.invoke(addr, cmd(), 0.2)
            assert len(conns) == 2
            # A request that could wait only the remains of a budget (<= 0.1 s, RocketMQ's
            # MIN_CLOSE_TIMEOUT_MILLIS) keeps the connection.
            await conns[1].wait()
            with pytest.raises(RemotingTimeoutError):
                await c.invoke(addr, cmd(), 0.05)
            with pytest.raises(RemotingTimeoutError):
                await c.invoke(addr, cmd(), 0.05)
            assert len(conns) == 3 and not conns[2].is_set()
        await conns[2].wait()
        async with RemotingClient(close_on_timeout=False) as c:
            for _ in range(2):
                with pytest.raises(RemotingTimeoutError):
                    await c.invoke(addr, cmd(), 0.2)
            assert len(conns) == 4 and not conns[3].is_set()
        n.cancel_scope.cancel()
