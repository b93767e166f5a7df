"""`rmq-ha mqadmin`: every command against a running cluster (an in-process name server and
broker over loopback; for the controller commands a name server with an embedded controller
and a controller-mode broker), table output and `--json` parsed back; plus the pure parts
(time forms, fastjson object keys, runtime-safe config checks)."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from controllerutil import controller_config, free_ports
from rmq_ha import config, mqadmin
from rmq_ha.broker.broker import open_broker
from rmq_ha.broker.handlers.config import check_update
from rmq_ha.client import Admin, ConsumeStatus, MessageQueue, Producer, PushConsumer, SendStatus
from rmq_ha.client.api import PULL_FLAG_SUBSCRIPTION
from rmq_ha.client.errors import BrokerResponseError, RouteNotFoundError, SendError
from rmq_ha.client.message import decode_messages
from rmq_ha.config import BrokerConfig, NamesrvConfig, NotRuntimeKey
from rmq_ha.controller import config_admin
from rmq_ha.errors import ConfigError
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.protocol.admin import (
    ConsumeStats,
    ConsumeStatsList,
    CreateTopicListRequestBody,
    GetConsumerStatusBody,
    GetTopicConfigRequestHeader,
    OffsetWrapper,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
    QueryConsumeTimeSpanBody,
    QuerySubscriptionResponseBody,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
    TopicConfigAndQueueMapping,
    TopicList,
    TopicStatsTable,
    loads_fastjson,
)
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.message import offset_msg_id, parse_offset_msg_id
from rmq_ha.protocol.models import MessageQueue as MQ
from rmq_ha.protocol.models import TopicConfig
from test_client_cluster import FAST_CLIENT, FAST_CONSUMER, FAST_PRODUCER, client_cluster

pytestmark = pytest.mark.timeout(90)


async def mq(*argv: str, ok: bool = True) -> tuple[int, Any]:
    """Runs `rmq-ha mqadmin ARGV --json` in this Trio loop: (exit status, parsed JSON)."""
    buf = io.StringIO()
    rc = await mqadmin.main_async([*argv, "--json"], buf)
    if ok:
        assert rc == 0, (argv, buf.getvalue())
    text = buf.getvalue()
    return rc, json.loads(text) if text else None


async def table(*argv: str) -> list[str]:
    """The table output's lines (header first)."""
    buf = io.StringIO()
    assert await mqadmin.main_async(list(argv), buf) == 0, argv
    return buf.getvalue().splitlines()


def group_online(ns: str, group: str) -> Any:
    """A predicate for `until`: the group has a consumer online (consumerConnection works)."""

    async def online() -> bool:
        rc, _ = await mq("consumerConnection", "-n", ns, "-g", group, ok=False)
        return rc == 0

    return online


async def wall_clock_past(ms: int) -> None:
    """Waits until this process's wall clock (the in-process broker's too) reaches `ms`."""
    while int(time.time() * 1000) < ms:
        await trio.sleep(0.001)


async def until(pred: Any, timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        while not await pred():
            await trio.sleep(0.05)


# --- topics ----------------------------------------------------------------------------------


async def test_topic_commands(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        _, rows = await mq("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "AdmT",
                           "-r", "3", "-w", "3", "-p", "6")  # fmt: skip
        assert rows == [{"broker": env.broker, "perm": 6, "readQueueNums": 3, "result": "OK",
                         "topic": "AdmT", "writeQueueNums": 3}]  # fmt: skip

        async def routed() -> bool:
            rc, topics = await mq("topicList", "-n", ns, ok=False)
            return rc == 0 and "AdmT" in topics

        await until(routed)
        _, by_cluster = await mq("topicList", "-n", ns, "-c")
        row = next(r for r in by_cluster if r["topic"] == "AdmT")
        assert (row["cluster"], row["consumerGroups"]) == ("DefaultCluster", [])
        _, route = await mq("topicRoute", "-n", ns, "-t", "AdmT")
        (qd,) = route["queueDatas"]
        assert (qd["brokerName"], qd["readQueueNums"], qd["writeQueueNums"]) == ("broker-a", 3, 3)
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": env.broker}
        lines = await table("topicRoute", "-n", ns, "-t", "AdmT")
        assert lines[0].split() == ["brokerName", "cluster", "brokerAddrs", "readQueueNums",
                                    "writeQueueNums", "perm"]  # fmt: skip
        assert lines[1].split() == ["broker-a", "DefaultCluster", f"0={env.broker}", "3", "3",
                                    "RW-"]  # fmt: skip

        async with Producer("pg", ns, config=FAST_PRODUCER) as p:
            for i in range(4):
                await p.send("AdmT", f"m{i}", queue=MessageQueue("AdmT", "broker-a", 1))
        _, stats = await mq("topicStatus", "-n", ns, "-t", "AdmT")
        assert [(r["queueId"], r["minOffset"], r["maxOffset"]) for r in stats] == [
            (0, 0, 0), (1, 0, 4), (2, 0, 0),
        ]  # fmt: skip
        assert stats[1]["lastUpdateTimestamp"] > 0 and stats[0]["lastUpdateTimestamp"] == 0

        # GET_TOPIC_CONFIG (351), which RocketMQ's own mqadmin asks before topicStatus.
        async with Admin(ns, config=FAST_CLIENT) as a:
            h = GetTopicConfigRequestHeader(topic="AdmT").to_ext()
            resp = await a.instance.api.call(env.broker, RC.GET_TOPIC_CONFIG, h)
            tc = TopicConfigAndQueueMapping.from_json(resp.body)
            assert (tc.topic_name, tc.read_queue_nums, tc.mapping_detail) == ("AdmT", 3, None)
            h = GetTopicConfigRequestHeader(topic="NoSuchT").to_ext()
            with pytest.raises(BrokerResponseError) as e:
                await a.instance.api.call(env.broker, RC.GET_TOPIC_CONFIG, h)
            assert e.value.code == Resp.TOPIC_NOT_EXIST

        _, deleted = await mq("deleteTopic", "-n", ns, "-t", "AdmT", "-c", "DefaultCluster")
        assert deleted == [{"brokers": [env.broker], "cluster": "DefaultCluster",
                            "result": "OK", "topic": "AdmT"}]  # fmt: skip
        rc, _ = await mq("topicRoute", "-n", ns, "-t", "AdmT", ok=False)
        assert rc == 1
        _, topics = await mq("topicList", "-n", ns)
        assert "AdmT" not in topics
        # The broker dropped it too: it does not come back with the next registration.
        assert env.node is not None and env.node.topics.get("AdmT") is None
        # Its messages went with it: created again, the topic starts empty (its queue offsets
        # go on from where they were), as RocketMQ's deleteTopic destroys consume queues.
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("AdmT", cluster="DefaultCluster", queue_nums=3,
                                 wait_for_route_s=5)  # fmt: skip
        _, stats = await mq("topicStatus", "-n", ns, "-t", "AdmT")
        assert [(r["queueId"], r["minOffset"], r["maxOffset"]) for r in stats] == [
            (0, 0, 0), (1, 4, 4), (2, 0, 0),
        ]  # fmt: skip
        await mq("deleteTopic", "-n", ns, "-t", "AdmT", "-c", "DefaultCluster")
        # The emptied queues are closed and their files deleted at the next checkpoint (an
        # open queue per deleted topic ran a year of topic churn out of file descriptors);
        # their offsets are kept.
        node = env.node
        assert node is not None

        async def retired() -> bool:
            return not (env.store_root / "consumequeue" / "AdmT").exists()

        from rmq_ha.net.client import RemotingClient

        async with RemotingClient() as rc:  # mqadmin cleanExpiredCQ: retired at once
            r = await rc.invoke(
                env.broker, RemotingCommand.request(RC.CLEAN_EXPIRED_CONSUMEQUEUE), 10.0
            )
        assert r.code == Resp.SUCCESS
        await until(retired)
        assert node.store.native.status()["cq_queues_retired"] >= 1
        assert node.store.native.queue_max_offset("AdmT", 1) == 4
        # Usage errors exit 2.
        assert await mqadmin.main_async(["updateTopic", "-n", ns, "-t", "X"], io.StringIO()) == 2


# --- messages --------------------------------------------------------------------------------


async def test_message_queries_and_producer_connection(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("MsgT", cluster="DefaultCluster", queue_nums=2,
                                 wait_for_route_s=5)  # fmt: skip
        async with Producer("pgq", ns, config=FAST_PRODUCER) as p:
            results = [await p.send("MsgT", f"body{i}", keys=f"key{i} common", tags="TagA")
                       for i in range(6)]  # fmt: skip

            async def known() -> bool:  # after the producer's first heartbeat
                rc, _ = await mq("producerConnection", "-n", ns, "-g", "pgq", "-t", "MsgT",
                                 ok=False)  # fmt: skip
                return rc == 0

            await until(known)
            _, conns = await mq("producerConnection", "-n", ns, "-g", "pgq", "-t", "MsgT")
            (conn,) = conns["connectionSet"]
            assert conn["language"] == "PYTHON" and conn["clientAddr"].startswith("127.0.0.1:")
            rc, _ = await mq("producerConnection", "-n", ns, "-g", "nobody", "-t", "MsgT",
                             ok=False)  # fmt: skip
            assert rc == 1

        _, found = await mq("queryMsgByKey", "-n", ns, "-t", "MsgT", "-k", "key3")
        assert [m["body"] for m in found] == ["body3"]
        assert found[0]["msgId"] == results[3].msg_id
        _, common = await mq("queryMsgByKey", "-n", ns, "-t", "MsgT", "-k", "common", "-c", "4")
        assert len(common) == 4
        # The newest matches, newest first, as RocketMQ's index answers.
        assert [m["body"] for m in common] == ["body5", "body4", "body3", "body2"]
        _, newest = await mq("queryMsgByKey", "-n", ns, "-t", "MsgT", "-k", "common", "-c", "1")
        assert [m["body"] for m in newest] == ["body5"]
        _, none = await mq("queryMsgByKey", "-n", ns, "-t", "MsgT", "-k", "key3", "-b", "0",
                           "-e", "1")  # fmt: skip
        assert none == []

        r = results[2]
        _, by_offset_id = await mq("queryMsgById", "-n", ns, "-i", r.offset_msg_id)
        assert [(m["body"], m["tags"], m["offsetMsgId"]) for m in by_offset_id] == [
            ("body2", "TagA", r.offset_msg_id)
        ]
        _, by_uniq = await mq("queryMsgById", "-n", ns, "-i", r.msg_id, "-t", "MsgT")
        assert [m["body"] for m in by_uniq] == ["body2"]

        _, at = await mq("queryMsgByOffset", "-n", ns, "-t", "MsgT", "-b", "broker-a",
                         "-i", str(r.queue.queue_id), "-o", str(r.queue_offset))  # fmt: skip
        assert [(m["body"], m["queueOffset"]) for m in at] == [("body2", r.queue_offset)]
        rc, _ = await mq("queryMsgByOffset", "-n", ns, "-t", "MsgT", "-b", "broker-a",
                         "-i", "0", "-o", "999", ok=False)  # fmt: skip
        assert rc == 1
        lines = await table("queryMsgByKey", "-n", ns, "-t", "MsgT", "-k", "key5")
        assert lines[0].split()[:3] == ["msgId", "topic", "brokerName"]
        assert "body5" in lines[1]


# --- groups, connections, progress, offset reset ---------------------------------------------


async def test_groups_connections_progress_and_reset(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        _, rows = await mq("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "cg",
                           "-r", "3", "-o", "true")  # fmt: skip
        assert [r["result"] for r in rows] == ["OK"]
        async with Admin(ns, config=FAST_CLIENT) as a:
            groups = await a.subscription_groups(env.broker)
            assert (groups["cg"].retry_max_times, groups["cg"].consume_message_orderly) == (3, True)
            await a.create_topic("GT", cluster="DefaultCluster", queue_nums=2, wait_for_route_s=5)
            mq0 = MessageQueue("GT", "broker-a", 0)
            async with Producer("pg", ns, config=FAST_PRODUCER) as p:
                for i in range(5):
                    await p.send("GT", f"early{i}", queue=mq0)
                stats = await a.topic_stats("GT")
                t_mid = stats.offset_table[MQ("GT", "broker-a", 0)].last_update_timestamp + 1
                await wall_clock_past(t_mid)  # the later messages are stored after t_mid
                for i in range(3):
                    await p.send("GT", f"late{i}", queue=mq0)

            def listener(msgs: Any, ctx: object) -> ConsumeStatus:
                return ConsumeStatus.CONSUME_SUCCESS

            # A new group whose queue still holds every message starts at offset 0.
            async with PushConsumer("cg", ns, "GT", listener, config=FAST_CONSUMER):

                async def online() -> bool:
                    rc, _ = await mq("consumerConnection", "-n", ns, "-g", "cg", ok=False)
                    return rc == 0

                await until(online)
                _, cc = await mq("consumerConnection", "-n", ns, "-g", "cg")
                assert len(cc["connectionSet"]) == 1
                assert cc["connectionSet"][0]["language"] == "PYTHON"
                assert "GT" in cc["subscriptionTable"]
                await until(_offset_at(ns, "cg", 8))
                _, summary = await mq("consumerProgress", "-n", ns)  # every group
                row = next(r for r in summary if r["group"] == "cg")
                assert (row["count"], row["diffTotal"]) == (1, 0)
                assert row["consumeType"] == "CONSUME_PASSIVELY"
                _, tl = await mq("topicList", "-n", ns, "-c")  # QUERY_TOPIC_CONSUME_BY_WHO
                assert next(r for r in tl if r["topic"] == "GT")["consumerGroups"] == ["cg"]
            _, prog = await mq("consumerProgress", "-n", ns, "-g", "cg")
            q0 = next(q for q in prog["queues"] if q["topic"] == "GT" and q["queueId"] == 0)
            assert (q0["brokerOffset"], q0["consumerOffset"], q0["diff"]) == (8, 8, 0)
            assert q0["lastTimestamp"] > 0 and prog["diffTotal"] == 0

            _, reset = await mq("resetOffsetByTime", "-n", ns, "-g", "cg", "-t", "GT",
                                "-s", str(t_mid))  # fmt: skip
            assert {(r["queueId"], r["offset"]) for r in reset} == {(0, 5), (1, 0)}
            _, prog = await mq("consumerProgress", "-n", ns, "-g", "cg", "-t", "GT")
            q0 = next(q for q in prog["queues"] if q["queueId"] == 0)
            assert (q0["consumerOffset"], q0["diff"]) == (5, 3)
            # Not forced: only moves backwards.
            _, kept = await mq("resetOffsetByTime", "-n", ns, "-g", "cg", "-t", "GT",
                               "-s", "now", "-f", "false")  # fmt: skip
            assert {(r["queueId"], r["offset"]) for r in kept} == {(0, 5), (1, 0)}
            # skipAccumulatedMessage (timestamp -1): to the end of every queue; it rewound
            # the group to 0 (mqadmin of RocketMQ 5.5.0 against us, probe).
            _, skip = await mq("skipAccumulatedMessage", "-n", ns, "-g", "cg", "-t", "GT")
            assert {(r["queueId"], r["offset"]) for r in skip} == {(0, 8), (1, 0)}
            _, prog = await mq("consumerProgress", "-n", ns, "-g", "cg", "-t", "GT")
            assert prog["diffTotal"] == 0

        rc, _ = await mq("consumerConnection", "-n", ns, "-g", "cg", ok=False)
        assert rc == 1  # nobody online any more
        _, rows = await mq("deleteSubGroup", "-n", ns, "-b", env.broker, "-g", "cg", "-r", "true")
        assert rows[0]["removeOffset"] is True
        async with Admin(ns, config=FAST_CLIENT) as a:
            assert "cg" not in await a.subscription_groups(env.broker)
        _, prog = await mq("consumerProgress", "-n", ns, "-g", "cg", "-t", "GT")
        assert all(q["consumerOffset"] == 0 for q in prog["queues"])  # offsets removed


def _offset_at(ns: str, group: str, offset: int) -> Any:
    async def check() -> bool:
        _, prog = await mq("consumerProgress", "-n", ns, "-g", group, "-t", "GT")
        return any(q["queueId"] == 0 and q["consumerOffset"] == offset for q in prog["queues"])

    return check


# --- broker config and status ----------------------------------------------------------------


async def test_broker_status_config_cluster_list_and_epochs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        _, brokers = await mq("clusterList", "-n", ns)
        rows = [(b["cluster"], b["brokerName"], b["brokerId"], b["addr"], b["role"])
                for b in brokers]  # fmt: skip
        assert rows == [("DefaultCluster", "broker-a", 0, env.broker, "MASTER")]
        _, status = await mq("brokerStatus", "-n", ns, "-b", env.broker)
        assert status["role"] == "MASTER" and int(status["commitLogMaxOffset"]) >= 0
        assert status["brokerVersionDesc"].startswith("rmq_ha")
        _, by_cluster = await mq("brokerStatus", "-n", ns, "-c", "DefaultCluster")
        assert status.keys() == by_cluster.keys()  # one broker: the same key/value object

        _, cfg = await mq("getBrokerConfig", "-n", ns, "-b", env.broker)
        assert cfg["brokerName"] == "broker-a" and cfg["maxMessageSize"] == str(4 * 1024 * 1024)
        lines = await table("getBrokerConfig", "-n", ns, "-c", "DefaultCluster")
        assert lines[0].split() == ["key", "value"]
        assert any(line.split() == ["brokerName", "broker-a"] for line in lines)

        _, rows = await mq("updateBrokerConfig", "-n", ns, "-b", env.broker,
                           "-k", "maxMessageSize", "-v", "100")  # fmt: skip
        assert rows[0]["result"] == "OK"
        _, cfg = await mq("getBrokerConfig", "-n", ns, "-b", env.broker)
        assert cfg["maxMessageSize"] == "100"
        # The change is live: the broker refuses a larger body now.
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("CfgT", cluster="DefaultCluster", queue_nums=1,
                                 wait_for_route_s=5)  # fmt: skip
        async with Producer("pgc", ns, config=FAST_PRODUCER) as p:
            await p.send("CfgT", "x" * 50)
            with pytest.raises(SendError, match="MESSAGE_ILLEGAL"):
                await p.send("CfgT", "x" * 200)
        # RocketMQ's clusterList columns (they printed null): the first record's store time,
        # the disk's used share, empty request queues.
        _, status = await mq("brokerStatus", "-n", ns, "-b", env.broker)
        assert 0 < int(status["earliestMessageTimeStamp"]) <= time.time() * 1000
        assert 0 < float(status["commitLogDiskRatio"]) < 1
        assert status["sendThreadPoolQueueSize"] == status["pageCacheLockTimeMills"] == "0"

        err = io.StringIO()
        for key, value, why in (
            ("listenPort", "1", "cannot change while running"),
            ("maxMessageSize", "big", "'big' is not an integer"),
            ("noSuchKey", "1", "no such key; changeable at runtime: "),
            ("brokerPermission", "64", "bits beyond"),
        ):
            buf = io.StringIO()
            sys_err, sys.stderr = sys.stderr, err
            try:
                rc = await mqadmin.main_async(["updateBrokerConfig", "-n", ns, "-b", env.broker,
                                               "-k", key, "-v", value], buf)  # fmt: skip
            finally:
                sys.stderr = sys_err
            assert rc == 1, key
            assert why in err.getvalue() and key in err.getvalue()
        # brokerPermission is runtime-safe and reaches the name server at once.
        await mq("updateBrokerConfig", "-n", ns, "-c", "DefaultCluster",
                 "-k", "brokerPermission", "-v", "4")  # fmt: skip

        async def read_only() -> bool:
            _, route = await mq("topicRoute", "-n", ns, "-t", "CfgT")
            return bool(route["queueDatas"][0]["perm"] == 4)

        await until(read_only)

        _, epochs = await mq("getBrokerEpoch", "-n", ns, "-b", "broker-a")
        assert [(e["brokerId"], e["addr"]) for e in epochs] == [(0, env.broker)]
        assert epochs[0]["epochs"][0]["epoch"] == 1
        _, by_cluster_epochs = await mq("getBrokerEpoch", "-n", ns, "-c", "DefaultCluster")
        assert by_cluster_epochs == epochs

        # Updates outlive a restart (persisted in the store; they were lost, though the docs
        # said brokerPermission=4 keeps writes off for good): the restarted broker starts
        # with them and says which keys override its config file.
        await env.stop_broker()
        restarted = BrokerConfig(
            listen_port=0, namesrv_addr="", store_path_root_dir=str(env.store_root),
            commitlog_segment_bytes=1 << 20,
        )  # fmt: skip
        caplog.clear()
        async with open_broker(restarted) as node:
            assert (node.cfg.broker_permission, node.cfg.max_message_size) == (4, 100)
        (line,) = [r.getMessage() for r in caplog.records if "overrides the config" in r.message]
        assert "brokerPermission=4 (file: 6)" in line and "maxMessageSize=100" in line


async def test_the_cli_entry_point_runs_mqadmin(tmp_path: Path) -> None:
    async with client_cluster(tmp_path) as env:
        proc = await trio.run_process(
            [sys.executable, "-m", "rmq_ha.cli", "mqadmin", "clusterList", "-n", env.namesrv,
             "--json"], capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        assert json.loads(proc.stdout)[0]["addr"] == env.broker


# --- controller commands ---------------------------------------------------------------------


@asynccontextmanager
async def controller_cluster(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A name server with an embedded one-node controller and one controller-mode broker
    that became master: (name server = controller address, broker address)."""
    (port,) = free_ports(1)
    ncfg, _ = config.from_mapping(
        NamesrvConfig, {"listenPort": port, "enableControllerInNamesrv": True}
    )
    ns = Nameserver(ncfg, controller_cfg=controller_config([port], 0, tmp_path / "ctl"))
    async with trio.open_nursery() as n:
        await n.start(ns.serve)
        bcfg = BrokerConfig(
            listen_port=0,
            namesrv_addr=ns.address,
            store_path_root_dir=str(tmp_path / "store"),
            commitlog_segment_bytes=1 << 20,
            enable_controller_mode=True,
            broker_id=-1,
            controller_heartbeat_timeout_ms=3000,
            sync_broker_metadata_period_ms=200,
            check_sync_state_set_period_ms=200,
            broker_heartbeat_interval_ms=200,
        )
        async with open_broker(bcfg) as node:

            async def master() -> bool:
                rc, rows = await mq("getSyncStateSet", "-a", ns.address, "-b", "broker-a",
                                    ok=False)  # fmt: skip
                return rc == 0 and rows[0].get("masterAddress") == node.address

            await until(master, 30)
            yield ns.address, node.address
            n.cancel_scope.cancel()


@pytest.mark.timeout(120)
async def test_controller_commands(tmp_path: Path) -> None:
    async with controller_cluster(tmp_path) as (ctl, broker):
        _, meta = await mq("getControllerMetaData", "-a", ctl)
        assert [(r["addr"], r["isLeader"]) for r in meta] == [(ctl, True)]

        _, sss = await mq("getSyncStateSet", "-a", ctl, "-b", "broker-a")
        (row,) = sss
        assert row["masterAddress"] == broker and row["masterEpoch"] >= 1
        assert [r["brokerAddress"] for r in row["inSyncReplicas"]] == [broker]
        _, by_cluster = await mq("getSyncStateSet", "-a", ctl, "-c", "DefaultCluster", "-n", ctl)
        assert by_cluster == sss
        rc, unknown = await mq("getSyncStateSet", "-a", ctl, "-b", "broker-z", ok=False)
        assert rc == 1 and unknown[0]["error"] == "not in the controller"

        _, epochs = await mq("getBrokerEpoch", "-n", ctl, "-b", "broker-a")
        assert epochs[0]["addr"] == broker
        assert epochs[0]["epochs"][-1]["epoch"] == row["masterEpoch"]

        _, elected = await mq("electMaster", "-a", ctl, "-c", "DefaultCluster", "-b", "broker-a",
                              "-i", str(row["masterBrokerId"]))  # fmt: skip
        assert elected["masterAddress"] == broker
        assert elected["result"] in ("SUCCESS", "CONTROLLER_MASTER_STILL_EXIST")

        _, cfgs = await mq("getControllerConfig", "-a", ctl)
        assert cfgs[ctl]["enableElectUncleanMaster"] == "false"
        _, rows = await mq("updateControllerConfig", "-a", ctl, "-k", "enableElectUncleanMaster",
                           "-v", "true")  # fmt: skip
        assert rows == [{"controller": ctl, "key": "enableElectUncleanMaster", "result": "OK",
                         "value": "true"}]  # fmt: skip
        _, cfgs = await mq("getControllerConfig", "-a", ctl)
        assert cfgs[ctl]["enableElectUncleanMaster"] == "true"
        rc, _ = await mq("updateControllerConfig", "-a", ctl, "-k", "controllerDLegerPeers",
                         "-v", "n0-127.0.0.1:1", ok=False)  # fmt: skip
        assert rc == 1
        rc, _ = await mq("updateControllerConfig", "-a", ctl, "-k", "electMasterMaxRetryCount",
                         "-v", "0", ok=False)  # fmt: skip
        assert rc == 1

        # Last: the living group's metadata goes (the broker registers again afterwards).
        rc, cleaned = await mq("cleanBrokerMetadata", "-a", ctl, "-c", "DefaultCluster",
                               "-bn", "broker-a", "-l")  # fmt: skip
        assert cleaned == {"brokerName": "broker-a", "cleaned": "all", "result": "OK"}
        rc, _ = await mq("cleanBrokerMetadata", "-a", ctl, "-c", "DefaultCluster",
                               "-bn", "broker-q", ok=False)  # fmt: skip
        assert rc == 1
    assert await mqadmin.main_async(["getControllerMetaData"], io.StringIO()) in (1, 2)


# --- pure parts ------------------------------------------------------------------------------


def test_time_forms() -> None:
    assert mqadmin.parse_time_ms("1234") == 1234
    assert mqadmin.parse_time_ms("2024-01-02#03:04:05:006") > 1_700_000_000_000
    with pytest.raises(Exception, match="not a time"):
        mqadmin.parse_time_ms("yesterday")


def test_fastjson_message_queue_keys_round_trip() -> None:
    raw = (
        b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:'
        b'{"brokerOffset":9,"consumerOffset":7,"lastTimestamp":3,"pullOffset":7},'
        b'{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":1,"consumerOffset":1,'
        b'"lastTimestamp":0,"pullOffset":1}}}'
    )
    cs = ConsumeStats.from_json(raw)
    assert cs.consume_tps == 1.5
    assert cs.offset_table[MQ("t", "b", 1)] == OffsetWrapper(9, 7, 7, 3)
    assert ConsumeStats.from_json(cs.to_json()) == cs
    assert TopicStatsTable.from_json(b'{"offsetTable":{}}').offset_table == {}
    assert loads_fastjson(b'{0:"a"}') == {"0": "a"}
    with pytest.raises(ValueError):
        loads_fastjson(b'{{"topic":"t"}:1')


def test_runtime_config_updates_are_checked() -> None:
    cfg = BrokerConfig()
    assert check_update(cfg, {"maxMessageSize": "10"}).max_message_size == 10
    assert check_update(cfg, {"brokerPermission": "4"}).broker_permission == 4
    with pytest.raises(NotRuntimeKey, match="storePathRootDir"):
        check_update(cfg, {"storePathRootDir": "/x"})
    with pytest.raises(ConfigError, match="defaultTopicQueueNums: 0 must be positive"):
        check_update(cfg, {"defaultTopicQueueNums": "0"})
    with pytest.raises(ConfigError, match="no key"):
        check_update(cfg, {})
    ccfg = config.ControllerConfig()
    assert config_admin.check_update(ccfg, {"notifyBrokerRoleChanged": "false"}) == (
        config.ControllerConfig(notify_broker_role_changed=False)
    )
    with pytest.raises(NotRuntimeKey):
        config_admin.check_update(ccfg, {"controllerDLegerSelfId": "n1"})


async def test_a_group_with_consume_enable_false_is_refused_pulls_and_pops(
    tmp_path: Path,
) -> None:
    """updateSubGroup -s false: the broker refuses the group's pulls and pops with
    NO_PERMISSION (RocketMQ's answer); -s true lets it consume again. Other groups are not
    affected, and a group without a config consumes (autoCreateSubscriptionGroup)."""
    from rmq_ha.client import PopConsumer, PullConsumer

    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("CE", cluster="DefaultCluster", queue_nums=1, wait_for_route_s=5)
        async with Producer("pg", ns, config=FAST_PRODUCER) as p:
            await p.send("CE", "m0")
        q = MessageQueue("CE", "broker-a", 0)
        await mq("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "off", "-s", "false")
        async with PullConsumer("off", ns, config=FAST_CLIENT) as pc:
            with pytest.raises(BrokerResponseError) as e:
                await pc.pull(q, "*", 0, 8)
            assert e.value.code == Resp.NO_PERMISSION
            assert "subscription group no permission, off" in str(e.value)
        async with PopConsumer("off", ns, ["CE"], config=FAST_CONSUMER) as c:
            with pytest.raises(BrokerResponseError) as e:
                await c.pop("CE", invisible_time_s=30.0, poll_time_s=0.1)
            assert e.value.code == Resp.NO_PERMISSION
        async with PullConsumer("other", ns, config=FAST_CLIENT) as pc:
            assert [m.body for m in (await pc.pull(q, "*", 0, 8)).messages] == [b"m0"]
        await mq("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "off", "-s", "true")
        async with PullConsumer("off", ns, config=FAST_CLIENT) as pc:
            assert [m.body for m in (await pc.pull(q, "*", 0, 8)).messages] == [b"m0"]


async def test_consumer_running_info_is_asked_of_the_consumer_itself(tmp_path: Path) -> None:
    """GET_CONSUMER_RUNNING_INFO (307: mqadmin consumerStatus, the dashboard's client view):
    the broker asks the consumer over its own connection and relays the answer as it is; a
    client that is not online gets RocketMQ's remark."""
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("RI", cluster="DefaultCluster", queue_nums=1, wait_for_route_s=5)

        def listener(msgs: Any, ctx: object) -> ConsumeStatus:
            return ConsumeStatus.CONSUME_SUCCESS

        asked: list[dict[str, str]] = []

        async with PushConsumer("rig", ns, "RI", listener, config=FAST_CONSUMER) as c:

            async def answer(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
                asked.append(dict(cmd.ext_fields))
                return cmd.response(Resp.SUCCESS, None, None, b'{"properties":{"x":"1"}}')

            c.instance.request_handlers[RC.GET_CONSUMER_RUNNING_INFO] = answer
            cid = c.instance.client_id

            await until(group_online(ns, "rig"))
            async with Admin(ns, config=FAST_CLIENT) as a:
                ext = {"consumerGroup": "rig", "clientId": cid, "jstackEnable": "false"}
                r = await a.instance.api.call(env.broker, RC.GET_CONSUMER_RUNNING_INFO, ext)
                assert r.body == b'{"properties":{"x":"1"}}'
                assert asked == [ext]
                ext = {**ext, "clientId": "nobody@1"}
                with pytest.raises(BrokerResponseError) as e:
                    await a.instance.api.call(env.broker, RC.GET_CONSUMER_RUNNING_INFO, ext)
                assert e.value.code == Resp.SYSTEM_ERROR
                assert "The Consumer <rig> <nobody@1> not online" in str(e.value)


async def test_consume_message_directly_hands_the_stored_message_to_one_consumer(
    tmp_path: Path,
) -> None:
    """CONSUME_MESSAGE_DIRECTLY (309, the dashboard's resend): the broker reads the message the
    offset msgId names and sends it, with brokerName and the topic's and group's sys flags, to
    the one consumer client asked for; its answer comes back as it is."""
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("CMD", cluster="DefaultCluster", queue_nums=1, wait_for_route_s=5)
        async with Producer("pg-cmd", ns, config=FAST_PRODUCER) as prod:
            sent = await prod.send("CMD", "again please", tags="TagR")

        def listener(msgs: Any, ctx: object) -> ConsumeStatus:
            return ConsumeStatus.CONSUME_SUCCESS

        asked: list[tuple[dict[str, str], bytes | None]] = []
        async with PushConsumer("cmdg", ns, "CMD", listener, config=FAST_CONSUMER) as c:

            async def answer(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
                asked.append((dict(cmd.ext_fields), cmd.body))
                return cmd.response(Resp.SUCCESS, None, None, b'{"consumeResult":"CR_SUCCESS"}')

            c.instance.request_handlers[RC.CONSUME_MESSAGE_DIRECTLY] = answer
            cid = c.instance.client_id

            await until(group_online(ns, "cmdg"))
            async with Admin(ns, config=FAST_CLIENT) as a:
                ext = {"consumerGroup": "cmdg", "clientId": cid, "msgId": sent.offset_msg_id,
                       "topic": "CMD"}  # fmt: skip
                r = await a.instance.api.call(env.broker, RC.CONSUME_MESSAGE_DIRECTLY, ext)
                assert r.body == b'{"consumeResult":"CR_SUCCESS"}'
                ((got_ext, body),) = asked
                assert got_ext == {**ext, "brokerName": "broker-a", "topicSysFlag": "0",
                                   "groupSysFlag": "0"}  # fmt: skip
                (msg,) = decode_messages(body or b"", "broker-a")
                assert (msg.body, msg.tags, msg.topic) == (b"again please", "TagR", "CMD")
                with pytest.raises(BrokerResponseError) as e:
                    bad = {**ext, "msgId": offset_msg_id("127.0.0.1", 10911, 1 << 40)}
                    await a.instance.api.call(env.broker, RC.CONSUME_MESSAGE_DIRECTLY, bad)
                assert e.value.code == Resp.SYSTEM_ERROR and "no message" in str(e.value)


STATUS = RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS


async def test_consumer_status_is_asked_of_every_client_of_the_group(tmp_path: Path) -> None:
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, mqadmin getConsumerStatus): the broker asks
    each online client of the group (GET_CONSUMER_STATUS_FROM_CLIENT, 221) for the offsets it
    holds and answers them by client id; no client online: RocketMQ's remark."""
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("CST", cluster="DefaultCluster", queue_nums=2, wait_for_route_s=5)

        def listener(msgs: Any, ctx: object) -> ConsumeStatus:
            return ConsumeStatus.CONSUME_SUCCESS

        mq0, mq1 = MQ("CST", "broker-a", 0), MQ("CST", "broker-a", 1)
        async with PushConsumer("csg", ns, "CST", listener, config=FAST_CONSUMER) as c:

            async def answer(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
                assert (cmd.ext_fields["topic"], cmd.ext_fields["group"]) == ("CST", "csg")
                body = GetConsumerStatusBody(message_queue_table={mq0: 5, mq1: 7})
                return cmd.response(Resp.SUCCESS, None, None, body.to_json())

            c.instance.request_handlers[RC.GET_CONSUMER_STATUS_FROM_CLIENT] = answer
            cid = c.instance.client_id

            await until(group_online(ns, "csg"))
            async with Admin(ns, config=FAST_CLIENT) as a:
                ext = {"topic": "CST", "group": "csg"}
                r = await a.instance.api.call(
                    env.broker, RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, ext
                )
                got = GetConsumerStatusBody.from_json(r.body)
                assert got.consumer_table == {cid: {mq0: 5, mq1: 7}}
                ext = {**ext, "clientAddr": "nobody@1"}
                r = await a.instance.api.call(
                    env.broker, RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, ext
                )
                assert GetConsumerStatusBody.from_json(r.body).consumer_table == {}
        async with Admin(ns, config=FAST_CLIENT) as a:
            with pytest.raises(BrokerResponseError) as e:
                ext = {"topic": "CST", "group": "csg"}
                await a.instance.api.call(env.broker, STATUS, ext)
            assert "No Any Consumer online in the consumer group: [csg]" in str(e.value)


# --- name server: write permission and config ------------------------------------------------


async def test_wipe_and_add_write_perm_drain_a_broker_group(tmp_path: Path) -> None:
    """mqadmin wipeWritePerm (205): the group's queues lose the write bit on the name server, so
    a producer that refreshes its route stops sending there; the periodic re-registration of an
    unchanged broker does not undo it; addWritePerm (327) gives read+write back."""
    async with client_cluster(tmp_path) as env:
        ns = env.namesrv
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("PermT", cluster="DefaultCluster", queue_nums=2,
                                 wait_for_route_s=5)  # fmt: skip

        async def perm() -> int:
            _, route = await mq("topicRoute", "-n", ns, "-t", "PermT")
            return int(route["queueDatas"][0]["perm"])

        assert await perm() == 6
        _, rows = await mq("wipeWritePerm", "-n", ns, "-b", "broker-a")
        assert len(rows) == 1 and rows[0]["result"] == "OK" and rows[0]["topics"] >= 1
        assert await perm() == 4
        lines = await table("topicRoute", "-n", ns, "-t", "PermT")
        assert lines[1].split()[-1] == "R--"
        async with Producer("pg-perm", ns, config=FAST_PRODUCER) as p:
            # no writable queue left: the client finds no route to publish on, as RocketMQ's
            with pytest.raises(RouteNotFoundError):
                await p.send("PermT", "nowhere to write")
        # A full re-registration with the same data version leaves the wipe in place.
        assert env.node is not None
        await env.node.namesrv.register_all()
        assert await perm() == 4
        _, rows = await mq("addWritePerm", "-n", ns, "-b", "broker-a")
        assert rows[0]["result"] == "OK" and rows[0]["topics"] >= 1
        assert await perm() == 6
        async with Producer("pg-perm", ns, config=FAST_PRODUCER) as p:
            assert (await p.send("PermT", "writable again")).status == SendStatus.SEND_OK
        # An unknown group changes nothing and is not an error (RocketMQ answers 0 topics).
        _, rows = await mq("wipeWritePerm", "-n", ns, "-b", "no-such-broker")
        assert rows[0]["topics"] == 0


async def test_namesrv_config_is_read_and_its_runtime_keys_updated(tmp_path: Path) -> None:
    """GET_NAMESRV_CONFIG (319) answers the properties text; UPDATE_NAMESRV_CONFIG (318)
    changes a runtime key and refuses any other, naming it."""
    async with client_cluster(tmp_path) as env:
        async with Admin(env.namesrv, config=FAST_CLIENT) as a:
            api = a.instance.api
            resp = await api.call(env.namesrv, RC.GET_NAMESRV_CONFIG)
            props = config.parse_properties(resp.body.decode())
            assert props["supportActingMaster"] == "false"
            assert "scanNotActiveBrokerInterval" in props and "listenPort" in props
            resp = await api.call(
                env.namesrv, RC.UPDATE_NAMESRV_CONFIG, None, b"supportActingMaster=true\n"
            )
            assert resp.code == Resp.SUCCESS
            resp = await api.call(env.namesrv, RC.GET_NAMESRV_CONFIG)
            assert "supportActingMaster=true\n" in resp.body.decode()
            with pytest.raises(BrokerResponseError) as e:
                await api.call(env.namesrv, RC.UPDATE_NAMESRV_CONFIG, None, b"listenPort=1\n")
            assert e.value.code == Resp.NO_PERMISSION and "listenPort" in str(e.value)
            with pytest.raises(BrokerResponseError) as e:
                await api.call(env.namesrv, RC.UPDATE_NAMESRV_CONFIG, None, b"noSuchKey=1\n")
            # any key but the runtime ones, as docs/operations.md says (it was SYSTEM_ERROR)
            assert e.value.code == Resp.NO_PERMISSION and "noSuchKey" in str(e.value)


async def test_broker_consume_stats_topics_subscription_time_span_and_cq(tmp_path: Path) -> None:
    """GET_BROKER_CONSUME_STATS (317), QUERY_TOPICS_BY_CONSUMER (343),
    QUERY_SUBSCRIPTION_BY_CONSUMER (345), QUERY_CONSUME_TIME_SPAN (303) and QUERY_CONSUME_QUEUE
    (321) on a group with offsets committed by a reset (no consumer online)."""
    async with client_cluster(tmp_path) as env:
        ns, broker = env.namesrv, env.broker
        await mq("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "cg2")
        async with Admin(ns, config=FAST_CLIENT) as a:
            await a.create_topic("ST", cluster="DefaultCluster", queue_nums=2, wait_for_route_s=5)
            mq0 = MessageQueue("ST", "broker-a", 0)
            async with Producer("pg", ns, config=FAST_PRODUCER) as p:
                early = [await p.send("ST", f"early{i}", queue=mq0) for i in range(5)]
                stats = await a.topic_stats("ST")
                t_mid = stats.offset_table[MQ("ST", "broker-a", 0)].last_update_timestamp + 1
                await wall_clock_past(t_mid)  # the later messages are stored after t_mid
                for i in range(3):
                    await p.send("ST", f"late{i}", queue=mq0)
            await mq("resetOffsetByTime", "-n", ns, "-g", "cg2", "-t", "ST", "-s", str(t_mid))
            api = a.instance.api

            # A pull of the group that commits nothing: its 3 messages are in flight.
            r = await api.pull(broker, "broker-a", group="cg2", mq=mq0, offset=5, max_nums=8,
                               sys_flag=PULL_FLAG_SUBSCRIPTION, subscription="*")  # fmt: skip
            assert [m.queue_offset for m in r.messages] == [5, 6, 7]

            resp = await api.call(broker, RC.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
            body = ConsumeStatsList.from_json(resp.body)
            assert body.broker_addr == broker
            assert (body.total_diff, body.total_inflight_diff) == (3, 3)
            (cg2,) = [e["cg2"] for e in body.consume_stats_list if "cg2" in e]
            (cs,) = cg2
            w0 = cs.offset_table[MQ("ST", "broker-a", 0)]
            assert (w0.broker_offset, w0.consumer_offset, w0.pull_offset) == (8, 5, 8)
            resp = await api.call(broker, RC.GET_BROKER_CONSUME_STATS, {"isOrder": "true"})
            ordered = ConsumeStatsList.from_json(resp.body)
            assert [e["cg2"] for e in ordered.consume_stats_list if "cg2" in e] == [[]]

            # cloneGroupOffset: a new group starts where cg2 is
            _, rows = await mq("cloneGroupOffset", "-n", ns, "-s", "cg2", "-d", "cg3", "-t", "ST")
            assert rows[0]["brokers"] == [broker]
            assert env.node is not None
            assert [env.node.offsets.query("cg3", "ST", q) for q in (0, 1)] == [5, 0]
            # GET_SUBSCRIPTIONGROUP_CONFIG (352) and GET_ALL_PRODUCER_INFO (328)
            resp = await api.call(broker, RC.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "cg2"})
            assert SubscriptionGroupConfig.from_json(resp.body).group_name == "cg2"
            with pytest.raises(BrokerResponseError) as e:
                await api.call(broker, RC.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "nobody"})
            assert e.value.code == Resp.SUBSCRIPTION_GROUP_NOT_EXIST
            # statsAll: VIEW_BROKER_STATS_DATA (315) per topic and per topic@group
            _, stats = await mq("statsAll", "-n", ns, "-t", "ST")
            by_group = {r["group"]: r for r in stats}
            assert set(by_group) == {"cg2", "cg3"}
            assert (by_group["cg2"]["inMsg24Hour"], by_group["cg2"]["outMsg24Hour"]) == (8, 3)
            assert (by_group["cg2"]["accumulation"], by_group["cg3"]["outMsg24Hour"]) == (3, 0)
            with pytest.raises(BrokerResponseError) as e:
                ext = {"statsName": "GROUP_GET_NUMS", "statsKey": "ST@nobody"}
                await api.call(broker, RC.VIEW_BROKER_STATS_DATA, ext)
            assert e.value.code == Resp.SYSTEM_ERROR and "not exist" in str(e.value)

            _, bcs = await mq("brokerConsumeStats", "-n", ns, "-b", broker)
            assert bcs["totalDiff"] == 3
            rows = [(r["queueId"], r["diff"]) for r in bcs["queues"] if r["group"] == "cg2"]
            assert rows == [(0, 3), (1, 0)]
            resp = await api.call(broker, RC.QUERY_TOPICS_BY_CONSUMER, {"group": "cg2"})
            tl = TopicList.from_json(resp.body)
            assert (tl.topic_list, tl.broker_addr) == ({"ST"}, broker)

            ext = {"group": "cg2", "topic": "ST"}
            resp = await api.call(broker, RC.QUERY_SUBSCRIPTION_BY_CONSUMER, ext)
            sub = QuerySubscriptionResponseBody.from_json(resp.body)
            # no member online: the subscription its pull carried (compensateSubscribeData)
            assert (sub.group, sub.topic) == ("cg2", "ST")
            assert sub.subscription_data is not None and sub.subscription_data.sub_string == "*"
            ext = {"group": "cg-none", "topic": "ST"}
            resp = await api.call(broker, RC.QUERY_SUBSCRIPTION_BY_CONSUMER, ext)
            assert QuerySubscriptionResponseBody.from_json(resp.body).subscription_data is None

            resp = await api.call(broker, RC.QUERY_CONSUME_TIME_SPAN, ext)
            spans = QueryConsumeTimeSpanBody.from_json(resp.body).consume_time_span_set
            s0, s1 = sorted(spans, key=lambda s: s.message_queue.queue_id)
            assert 0 < s0.min_time_stamp <= s0.consume_time_stamp < t_mid <= s0.max_time_stamp
            assert s0.delay_time >= 0
            assert (s1.min_time_stamp, s1.max_time_stamp, s1.delay_time) == (-1, -1, 0)
            with pytest.raises(BrokerResponseError) as e:
                await api.call(broker, RC.QUERY_CONSUME_TIME_SPAN, {"group": "cg2", "topic": "No"})
            assert e.value.code == Resp.TOPIC_NOT_EXIST

            ext = {"topic": "ST", "queueId": "0", "index": "3", "count": "100",
                   "consumerGroup": "cg-offline"}  # fmt: skip
            resp = await api.call(broker, RC.QUERY_CONSUME_QUEUE, ext)
            cq = QueryConsumeQueueResponseBody.from_json(resp.body)
            assert (cq.min_queue_index, cq.max_queue_index) == (0, 8)
            assert cq.filter_data == "cg-offline@ST is not online!"
            units = [(u.physic_offset, u.physic_size) for u in cq.queue_data]
            assert len(units) == 5 and units == sorted(units)
            assert [u[0] for u in units[:2]] == [
                parse_offset_msg_id(r.offset_msg_id)[2] for r in early[3:5]
            ]
            with pytest.raises(BrokerResponseError) as e:
                await api.call(broker, RC.QUERY_CONSUME_QUEUE, {**ext, "queueId": "7"})
            assert e.value.code == Resp.SYSTEM_ERROR
            async with Producer("pg-info", ns, config=FAST_PRODUCER) as prod:
                await prod.send("ST", "x", queue=MessageQueue("ST", "broker-a", 1))

                async def listed() -> bool:
                    r = await api.call(broker, RC.GET_ALL_PRODUCER_INFO)
                    return "pg-info" in ProducerTableInfo.from_json(r.body).data

                await until(listed)
                r = await api.call(broker, RC.GET_ALL_PRODUCER_INFO)
                (info,) = ProducerTableInfo.from_json(r.body).data["pg-info"]
                assert info.language == "PYTHON" and info.remote_ip.startswith("127.0.0.1:")


async def test_topic_and_group_lists_are_created_all_or_none(tmp_path: Path) -> None:
    """UPDATE_AND_CREATE_TOPIC_LIST (18) and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225):
    every entry is stored and announced; one bad name refuses the whole list
    (INVALID_PARAMETER) and stores nothing."""
    async with client_cluster(tmp_path) as env:
        async with Admin(env.namesrv, config=FAST_CLIENT) as a:
            api = a.instance.api

            def topics(*names: str) -> bytes:
                tcs = [TopicConfig(topic_name=n, read_queue_nums=2, write_queue_nums=2)
                       for n in names]  # fmt: skip
                return CreateTopicListRequestBody(topic_config_list=tcs).to_json()

            with pytest.raises(BrokerResponseError) as e:
                await api.call(env.broker, RC.UPDATE_AND_CREATE_TOPIC_LIST, None,
                               topics("LstA", "bad topic!"))  # fmt: skip
            assert e.value.code == Resp.INVALID_PARAMETER
            assert env.node is not None and env.node.topics.get("LstA") is None
            r = await api.call(env.broker, RC.UPDATE_AND_CREATE_TOPIC_LIST, None,
                               topics("LstA", "LstB"))  # fmt: skip
            assert r.code == Resp.SUCCESS
            assert {n: env.node.topics.get(n) is not None for n in ("LstA", "LstB")} == {
                "LstA": True, "LstB": True,
            }  # fmt: skip
            await until(lambda: _routed(env.namesrv, "LstB"))

            def groups(*names: str) -> bytes:
                cfgs = [SubscriptionGroupConfig(group_name=n) for n in names]
                return SubscriptionGroupList(group_config_list=cfgs).to_json()

            with pytest.raises(BrokerResponseError) as e:
                await api.call(env.broker, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, None,
                               groups("gl1", ""))  # fmt: skip
            assert e.value.code == Resp.INVALID_PARAMETER
            assert "gl1" not in await a.subscription_groups(env.broker)
            await api.call(env.broker, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, None,
                           groups("gl1", "gl2"))  # fmt: skip
            assert {"gl1", "gl2"} <= set(await a.subscription_groups(env.broker))


async def _routed(ns: str, topic: str) -> bool:
    rc, topics = await mq("topicList", "-n", ns, ok=False)
    return rc == 0 and topic in topics
