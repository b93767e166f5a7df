"""Admin (cluster list, topic creation on every master, routes, offsets, offset by time) and the
`rmq-ha produce / consume / admin` commands against an in-process name server + broker."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import trio

from rmq_ha.client import Admin, MessageQueue, Producer, RouteNotFoundError
from rmq_ha.client.errors import BrokerNotFoundError, BrokerResponseError
from rmq_ha.protocol.perm import PERM_READ
from test_client_cluster import FAST_CLIENT, FAST_PRODUCER, client_cluster

pytestmark = pytest.mark.timeout(60)


@pytest.mark.timeout(30)
async def test_admin_cluster_create_topic_route_and_offsets(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env, Admin(env.namesrv, config=FAST_CLIENT) as admin:
        info = await admin.cluster_info()
        assert info.retrieve_all_cluster_names() == ["DefaultCluster"]
        assert await admin.master_addrs("DefaultCluster") == {"broker-a": env.broker}
        with pytest.raises(RouteNotFoundError):
            await admin.route("AdmT")
        created = await admin.create_topic(
            "AdmT", cluster="DefaultCluster", queue_nums=3, wait_for_route_s=5
        )
        assert created == [env.broker]
        route = await admin.route("AdmT")
        (qd,) = route.queue_datas
        assert (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm) == (
            "broker-a", 3, 3, 6,
        )  # fmt: skip
        assert route.broker_datas[0].broker_addrs == {0: env.broker}
        # Updating an existing topic (read-only, one broker by address).
        await admin.create_topic("AdmT", broker_addr=env.broker, queue_nums=3, perm=PERM_READ)
        with trio.fail_after(5):
            while (await admin.route("AdmT")).queue_datas[0].perm != PERM_READ:
                await trio.sleep(0.05)
        await admin.create_topic("AdmT", broker_addr=env.broker, queue_nums=3)
        with pytest.raises(BrokerNotFoundError):
            await admin.create_topic("X", cluster="NoSuchCluster")

        with trio.fail_after(5):
            while (await admin.route("AdmT")).queue_datas[0].perm != 6:
                await trio.sleep(0.05)
        mq = MessageQueue("AdmT", "broker-a", 1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(3):
                await p.send("AdmT", f"early{i}", queue=mq)
            await trio.sleep(0.05)
            t_mid = int(time.time() * 1000)
            await trio.sleep(0.05)
            for i in range(2):
                await p.send("AdmT", f"late{i}", queue=mq)
        offs = {q.queue.queue_id: q for q in await admin.topic_offsets("AdmT", "nobody")}
        assert (offs[1].min_offset, offs[1].max_offset) == (0, 5)
        assert offs[0].max_offset == 0
        assert await admin.max_offset(mq) == 5 and await admin.min_offset(mq) == 0
        assert await admin.search_offset(mq, t_mid) == 3


@pytest.mark.timeout(30)
async def test_admin_refuses_bad_topic_configs_and_deleting_system_topics(tmp_path: Path) -> None:
    """updateTopic with negative queue counts or perm bits outside 8|4|2|1 was stored and
    routed (every send then failed); deleteTopic of SCHEDULE_TOPIC_XXXX answered OK and
    dropped every pending delayed message, of TBW102 stopped auto-creation. All refused now,
    naming the reason; nothing changes."""
    from rmq_ha.client.errors import BrokerResponseError
    from rmq_ha.protocol.codes import ResponseCode as Resp

    async with client_cluster(tmp_path) as env, Admin(env.namesrv, config=FAST_CLIENT) as admin:
        await admin.create_topic("GoodT", broker_addr=env.broker, queue_nums=2)
        for kw, what in (
            ({"read_queue_nums": -5, "write_queue_nums": -5}, "readQueueNums -5"),
            ({"write_queue_nums": 70_000}, "writeQueueNums 70000"),
            ({"perm": 99}, "perm 99"),
        ):
            with pytest.raises(BrokerResponseError) as e:
                await admin.create_topic("BadT", broker_addr=env.broker, **kw)
            assert e.value.code == Resp.INVALID_PARAMETER and what in str(e.value), e.value
        with pytest.raises(RouteNotFoundError):
            await admin.route("BadT")
        for system in ("SCHEDULE_TOPIC_XXXX", "TBW102", "DefaultCluster", "rmq_sys_REVIVE_LOG_x"):
            with pytest.raises(BrokerResponseError) as e:
                await admin.delete_topic(system, "DefaultCluster")
            assert "system topic" in str(e.value), e.value
            # nor changed (RocketMQ: "The topic[X] is conflict with system topic."); it was
            # stored, SCHEDULE_TOPIC_XXXX with 1 queue for 18 delay levels (probe)
            with pytest.raises(BrokerResponseError) as e:
                await admin.create_topic(system, broker_addr=env.broker, queue_nums=1, perm=2)
            assert e.value.code == Resp.SYSTEM_ERROR, e.value
            assert f"The topic[{system}] is conflict with system topic" in str(e.value)
        route = await admin.route("TBW102")
        assert route.queue_datas[0].perm & 4 and route.queue_datas[0].write_queue_nums == 8
        # an ordinary topic still goes
        assert await admin.delete_topic("GoodT", "DefaultCluster") == [env.broker]


@pytest.mark.timeout(30)
async def test_trace_topic_enable_creates_the_trace_topic_without_auto_create(
    tmp_path: Path,
) -> None:
    """traceTopicEnable (RocketMQ's BrokerConfig): the broker creates the message-trace topic
    at start, one queue. With autoCreateTopicEnable=false it is the only way tracing clients'
    records are kept (the key was ignored: every trace record was dropped, probe)."""
    async with (
        client_cluster(
            tmp_path,
            auto_create_topic_enable=False,
            trace_topic_enable=True,
            msg_trace_topic_name="MyTraceT",
        ) as env,
        Admin(env.namesrv, config=FAST_CLIENT) as admin,
    ):
        route = await admin.route("MyTraceT")
        assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(1, 1)]
        with pytest.raises(RouteNotFoundError):
            await admin.route("RMQ_SYS_TRACE_TOPIC")
        with pytest.raises(BrokerResponseError) as e:
            await admin.delete_topic("MyTraceT", "DefaultCluster")
        assert "system topic" in str(e.value)


def test_a_bad_trace_topic_name_is_refused_naming_the_key() -> None:
    from rmq_ha.config import BrokerConfig, validate
    from rmq_ha.errors import ConfigError

    validate(BrokerConfig(msg_trace_topic_name="bad name"))  # unused while tracing is off
    with pytest.raises(ConfigError, match="msgTraceTopicName"):
        validate(BrokerConfig(trace_topic_enable=True, msg_trace_topic_name="bad name"))


async def cli(*args: str, check: bool = True) -> tuple[int, str]:
    proc = await trio.run_process(
        [sys.executable, "-m", "rmq_ha.cli", *args], capture_stdout=True, capture_stderr=True,
        check=False,
    )  # fmt: skip
    out = proc.stdout.decode()
    if check:
        assert proc.returncode == 0, (args, out, proc.stderr.decode())
    return proc.returncode, out


@pytest.mark.timeout(90)
async def test_cli_produce_consume_admin(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        _, out = await cli("admin", "cluster", "-n", ns)
        assert "DefaultCluster" in out and "broker-a" in out and env.broker in out
        _, out = await cli("admin", "create-topic", "-n", ns, "-t", "CliT", "--queues", "2")
        assert f"create topic CliT on {env.broker}: OK" in out
        _, out = await cli("admin", "route", "-n", ns, "-t", "CliT", "--json")
        assert json.loads(out)["queueDatas"][0]["writeQueueNums"] == 2
        _, out = await cli("admin", "route", "-n", ns, "-t", "CliT")
        assert "read=2 write=2 perm=6 (RW-)" in out
        _, out = await cli("produce", "-n", ns, "-t", "CliT", "--count", "5", "--tags", "T",
                           "--json")  # fmt: skip
        lines = [json.loads(line) for line in out.splitlines()]
        assert [x["status"] for x in lines[:5]] == ["SEND_OK"] * 5
        assert lines[-1]["ok"] == 5 and lines[-1]["failedDefinite"] == 0
        _, out = await cli("produce", "-n", ns, "-t", "CliT", "--count", "4", "--batch", "2",
                           "--serialize", "ROCKETMQ")  # fmt: skip
        assert "sent 4, failed 0" in out
        _, out = await cli("consume", "-n", ns, "-t", "CliT", "-g", "clig", "--count", "9",
                           "--json", "--idle-timeout", "20")  # fmt: skip
        got = [json.loads(line) for line in out.splitlines()]
        assert len(got) >= 9 and {g["topic"] for g in got} == {"CliT"}
        assert sorted(g["body"] for g in got if g["tags"] == "T") == [
            f"hello-{i}" for i in range(5)
        ]
        _, out = await cli("admin", "offsets", "-n", ns, "-t", "CliT", "-g", "clig")
        assert out.count("lag=0") == 2, out
        # A broker that is not there: a clear, definite failure and exit status 1.
        rc, out = await cli("produce", "-n", ns, "-t", "CliT", "--json", "--timeout", "1",
                            check=False)  # fmt: skip
        assert rc == 0
        await env.stop_broker()
        rc, out = await cli("produce", "-n", ns, "-t", "CliT", "--json", "--timeout", "1",
                            check=False)  # fmt: skip
        assert rc == 1 and json.loads(out.splitlines()[0])["definite"] is True
