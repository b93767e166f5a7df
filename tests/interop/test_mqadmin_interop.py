"""`rmq-ha mqadmin` against each cluster implementation of the interop suite: the commands
speak RocketMQ's remoting protocol with RocketMQ's request codes, so against a real Apache
RocketMQ 5.x namesrv + broker (RMQ_INTEROP_IMPL=real or both) they work unchanged.
Run as the operator would: `rmq-ha mqadmin ... --json` processes, output parsed back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness
import pytest
import trio
from harness import Cluster, Names

from rmq_ha.client import ClientConfig, MessageQueue, Producer, ProducerConfig

pytestmark = pytest.mark.timeout(180)


def mqadmin(*argv: str, ok: bool = True) -> tuple[int, Any, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "mqadmin", *argv, "--json", "--api-timeout", "10"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if ok:
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, doc, proc.stderr


def test_mqadmin_cluster_topic_and_broker_commands(live: Cluster, names: Names) -> None:
    ns = live.namesrv
    _, brokers, _ = mqadmin("clusterList", "-n", ns)
    masters = [b for b in brokers if b["brokerId"] == 0]
    assert [(b["brokerName"], b["addr"]) for b in masters] == [(live.broker_name, live.broker)]
    cluster = masters[0]["cluster"]

    _, rows, _ = mqadmin("updateTopic", "-n", ns, "-c", cluster, "-t", names.topic,
                         "-r", "3", "-w", "3")  # fmt: skip
    assert [(r["broker"], r["result"]) for r in rows] == [(live.broker, "OK")]
    deadline = time.monotonic() + 30  # the broker registers the topic with the name server
    while True:
        rc, route, err = mqadmin("topicRoute", "-n", ns, "-t", names.topic, ok=False)
        if rc == 0:
            break
        assert time.monotonic() < deadline, err
        time.sleep(0.2)
    (qd,) = route["queueDatas"]
    assert (qd["brokerName"], qd["readQueueNums"], qd["writeQueueNums"]) == (
        live.broker_name, 3, 3,
    )  # fmt: skip
    assert live.broker in route["brokerDatas"][0]["brokerAddrs"].values()
    _, topics, _ = mqadmin("topicList", "-n", ns)
    assert names.topic in topics
    # RocketMQ's TopicStatsTable is a fastjson map with MessageQueue keys.
    _, stats, _ = mqadmin("topicStatus", "-n", ns, "-t", names.topic)
    assert [(s["queueId"], s["minOffset"], s["maxOffset"]) for s in stats] == [
        (0, 0, 0), (1, 0, 0), (2, 0, 0),
    ]  # fmt: skip

    _, status, _ = mqadmin("brokerStatus", "-n", ns, "-b", live.broker)
    assert int(status["commitLogMaxOffset"]) >= 0 and "bootTimestamp" in status
    _, cfg, _ = mqadmin("getBrokerConfig", "-n", ns, "-b", live.broker)
    assert cfg["brokerName"] == live.broker_name
    assert cfg["brokerClusterName"] == cluster
    _, by_cluster, _ = mqadmin("getBrokerConfig", "-n", ns, "-c", cluster)
    assert by_cluster["brokerName"] == live.broker_name


async def amqadmin(*argv: str, ok: bool = True) -> tuple[int, Any, str]:
    """`mqadmin` from a Trio test (the producer keeps running meanwhile)."""
    proc = await trio.run_process(
        [sys.executable, "-m", "rmq_ha.cli", "mqadmin", *argv, "--json", "--api-timeout", "10"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    if ok:
        assert proc.returncode == 0, (argv, out, err)
    return proc.returncode, json.loads(out) if out.strip() else None, err


async def until_ok(*argv: str, timeout_s: float = 30.0) -> Any:
    """Retries a command until it succeeds with a non-empty answer (routes and RocketMQ's
    index are built asynchronously)."""
    with trio.fail_after(timeout_s):
        while True:
            rc, doc, _ = await amqadmin(*argv, ok=False)
            if rc == 0 and doc:
                return doc
            await trio.sleep(0.3)


async def test_mqadmin_message_group_and_offset_commands(live: Cluster, names: Names) -> None:
    ns, name = live.namesrv, live.broker_name
    _, brokers, _ = await amqadmin("clusterList", "-n", ns)
    cluster = brokers[0]["cluster"]
    await amqadmin("updateTopic", "-n", ns, "-c", cluster, "-t", names.topic, "-r", "2",
                   "-w", "2")  # fmt: skip
    await until_ok("topicRoute", "-n", ns, "-t", names.topic)
    pgroup = names.group + "_P"
    q0 = MessageQueue(names.topic, name, 0)
    cfg = ProducerConfig(client=ClientConfig(client_ip="127.0.0.1",
                                             heartbeat_broker_interval_s=0.5))  # fmt: skip
    async with Producer(pgroup, ns, config=cfg) as p:
        sent = [await p.send(names.topic, f"body{i}", keys=f"key{i}", queue=q0) for i in range(4)]
        conns = await until_ok("producerConnection", "-n", ns, "-g", pgroup, "-t", names.topic)
        assert len(conns["connectionSet"]) == 1

    found = await until_ok("queryMsgByKey", "-n", ns, "-t", names.topic, "-k", "key2")
    assert [m["body"] for m in found] == ["body2"]
    _, by_id, _ = await amqadmin("queryMsgById", "-n", ns, "-i", sent[1].offset_msg_id)
    assert [m["body"] for m in by_id] == ["body1"]
    by_uniq = await until_ok("queryMsgById", "-n", ns, "-i", sent[3].msg_id, "-t", names.topic)
    assert [m["body"] for m in by_uniq] == ["body3"]
    _, at, _ = await amqadmin("queryMsgByOffset", "-n", ns, "-t", names.topic, "-b", name,
                              "-i", "0", "-o", "1")  # fmt: skip
    assert [(m["body"], m["queueOffset"]) for m in at] == [("body1", 1)]

    # RocketMQ 5.5 resets only a group it knows (SUBSCRIPTION_GROUP_NOT_EXIST otherwise).
    _, rows, _ = await amqadmin("updateSubGroup", "-n", ns, "-c", cluster, "-g", names.group,
                                "-r", "5")  # fmt: skip
    assert [r["result"] for r in rows] == ["OK"]
    # An offline group: a broker that resets only through online clients answers
    # CONSUMER_NOT_ONLINE and the admin falls back to committing the offsets itself, as
    # mqadmin does; rmq_ha resets in the broker.
    _, reset, _ = await amqadmin("resetOffsetByTime", "-n", ns, "-g", names.group,
                                 "-t", names.topic, "-s", "0")  # fmt: skip
    assert {(r["queueId"], r["offset"]) for r in reset} == {(0, 0), (1, 0)}
    _, prog, _ = await amqadmin("consumerProgress", "-n", ns, "-g", names.group,
                                "-t", names.topic)  # fmt: skip
    by_queue = {q["queueId"]: q for q in prog["queues"]}
    assert (by_queue[0]["brokerOffset"], by_queue[0]["consumerOffset"], by_queue[0]["diff"]) == (
        4, 0, 4,
    )  # fmt: skip

    _, rows, _ = await amqadmin("deleteSubGroup", "-n", ns, "-c", cluster, "-g", names.group)
    assert [r["result"] for r in rows] == ["OK"]
    await amqadmin("deleteTopic", "-n", ns, "-c", cluster, "-t", names.topic)
    rc, _, _ = await amqadmin("topicRoute", "-n", ns, "-t", names.topic, ok=False)
    assert rc == 1


# --- RocketMQ's own mqadmin against each cluster ---------------------------------------------


async def real_mqadmin(home: Path, *argv: str) -> str:
    """RocketMQ 5.5.0's mqadmin (rocketmq-tools from the interop build's jars); its stdout."""
    lib = harness.real_rocketmq_lib()
    proc = await trio.run_process(
        ["java", "-Xms64m", "-Xmx256m", "-cp", f"{lib}/*",
         "org.apache.rocketmq.tools.command.MQAdminStartup", *argv],
        capture_stdout=True, capture_stderr=True, check=False,
        env={**os.environ, "ROCKETMQ_HOME": str(home)},
    )  # fmt: skip
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, (argv, out[-3000:], proc.stderr.decode()[-3000:])
    # mqadmin prints its own failures and returns 0: they start with the exception name.
    assert "SubCommandException" not in out and "MQClientException" not in out, (argv, out[-3000:])
    return out


@pytest.mark.timeout(480)  # ten JVM starts of mqadmin, 5-20 s each on 2 busy cores
async def test_rocketmqs_own_mqadmin_reads_the_answers(
    live: Cluster, names: Names, tmp_path: Path
) -> None:
    """The other direction: the broker's new admin requests (GET_TOPIC_STATS_INFO with its
    MessageQueue-keyed body, GET_TOPIC_CONFIG, GET_BROKER_RUNTIME_INFO, GET_BROKER_CONFIG,
    QUERY_MESSAGE, GET_PRODUCER_CONNECTION_LIST, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    INVOKE_BROKER_TO_RESET_OFFSET, UPDATE_BROKER_CONFIG) as RocketMQ's mqadmin reads them."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("needs java and mvn (RocketMQ's mqadmin from Maven Central)")
    ns, name, home = live.namesrv, live.broker_name, tmp_path
    _, brokers, _ = await amqadmin("clusterList", "-n", ns)
    cluster = brokers[0]["cluster"]
    out = await real_mqadmin(home, "updateTopic", "-n", ns, "-c", cluster, "-t", names.topic,
                             "-r", "2", "-w", "2")  # fmt: skip
    assert "success" in out
    await until_ok("topicRoute", "-n", ns, "-t", names.topic)
    pgroup = names.group + "_P"
    cfg = ProducerConfig(client=ClientConfig(client_ip="127.0.0.1",
                                             heartbeat_broker_interval_s=0.5))  # fmt: skip
    async with Producer(pgroup, ns, config=cfg) as p:
        q0 = MessageQueue(names.topic, name, 0)
        sent = [await p.send(names.topic, f"body{i}", keys=f"key{i}", queue=q0) for i in range(3)]
        await until_ok("producerConnection", "-n", ns, "-g", pgroup, "-t", names.topic)
        out = await real_mqadmin(home, "producerConnection", "-n", ns, "-g", pgroup,
                                 "-t", names.topic)  # fmt: skip
        assert "PYTHON" in out

    out = await real_mqadmin(home, "topicStatus", "-n", ns, "-t", names.topic)
    rows = sorted(line.split() for line in out.splitlines() if line.startswith(name))
    assert [r[1:3] for r in rows] == [["0", "0"], ["1", "0"]] and rows[0][3] == "3", out[-2000:]
    out = await real_mqadmin(home, "brokerStatus", "-n", ns, "-b", live.broker)
    assert "commitLogMaxOffset" in out and "bootTimestamp" in out
    out = await real_mqadmin(home, "getBrokerConfig", "-n", ns, "-b", live.broker)
    assert any(line.split()[:3] == ["brokerName", "=", name] for line in out.splitlines())
    found = await until_ok("queryMsgByKey", "-n", ns, "-t", names.topic, "-k", "key1")
    assert found
    out = await real_mqadmin(home, "queryMsgByKey", "-n", ns, "-t", names.topic, "-k", "key1")
    assert sent[1].msg_id in out
    out = await real_mqadmin(home, "updateSubGroup", "-n", ns, "-c", cluster, "-g", names.group)
    assert "success" in out
    out = await real_mqadmin(home, "resetOffsetByTime", "-n", ns, "-g", names.group,
                             "-t", names.topic, "-s", "0")  # fmt: skip
    assert sorted(line.split() for line in out.splitlines() if line.startswith(name)) == [
        [name, "0", "0"], [name, "1", "0"],
    ]  # fmt: skip
    size = (await amqadmin("getBrokerConfig", "-n", ns, "-b", live.broker))[1]["maxMessageSize"]
    await real_mqadmin(home, "updateBrokerConfig", "-n", ns, "-b", live.broker,
                       "-k", "maxMessageSize", "-v", size)  # fmt: skip


@pytest.mark.timeout(480)  # seven JVM starts of mqadmin
async def test_rocketmqs_own_mqadmin_runs_the_operator_commands(
    live: Cluster, names: Names, tmp_path: Path
) -> None:
    """RocketMQ's mqadmin for what an operator runs day to day, with the same output from
    rmq_ha as from RocketMQ: getNamesrvConfig (319), producer (328), brokerConsumeStats (317),
    cloneGroupOffset (208 + 15), statsAll (315, with 300 and 208), wipeWritePerm /
    addWritePerm (205 / 327, restored at the end)."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("needs java and mvn (RocketMQ's mqadmin from Maven Central)")
    ns, name, home = live.namesrv, live.broker_name, tmp_path
    _, brokers, _ = await amqadmin("clusterList", "-n", ns)
    cluster = brokers[0]["cluster"]
    await amqadmin("updateTopic", "-n", ns, "-c", cluster, "-t", names.topic, "-r", "2",
                   "-w", "2")  # fmt: skip
    await until_ok("topicRoute", "-n", ns, "-t", names.topic)
    out = await real_mqadmin(home, "getNamesrvConfig", "-n", ns)
    assert f"============{ns}============" in out and "scanNotActiveBrokerInterval" in out

    pgroup = names.group + "_P"
    cfg = ProducerConfig(client=ClientConfig(client_ip="127.0.0.1",
                                             heartbeat_broker_interval_s=0.5))  # fmt: skip
    async with Producer(pgroup, ns, config=cfg) as p:
        q0 = MessageQueue(names.topic, name, 0)
        for i in range(3):
            await p.send(names.topic, f"body{i}", queue=q0)
        await until_ok("producerConnection", "-n", ns, "-g", pgroup, "-t", names.topic)
        out = await real_mqadmin(home, "producer", "-n", ns, "-b", live.broker)
        assert f"producer group ({pgroup}) instance" in out, out[-2000:]

    group, clone = names.group, names.group + "_C"
    await amqadmin("updateSubGroup", "-n", ns, "-c", cluster, "-g", group)
    await amqadmin("resetOffsetByTime", "-n", ns, "-g", group, "-t", names.topic, "-s", "now")
    # RocketMQ's cloneGroupOffset finds the source group's brokers through its retry topic,
    # which a consumer's heartbeat would have created
    retry = "%RETRY%" + group
    await amqadmin("updateTopic", "-n", ns, "-c", cluster, "-t", retry, "-r", "1", "-w", "1")
    await until_ok("topicRoute", "-n", ns, "-t", retry)
    # a row per queue with a last-consumed time (mqadmin cuts topic names to 64 characters)
    out = await real_mqadmin(home, "brokerConsumeStats", "-n", ns, "-b", live.broker)
    rows = [line.split() for line in out.splitlines() if line.startswith(names.topic[:64])]
    # topic, group, broker name, queue id, broker offset, consumer offset, diff, time
    assert [r[1:7] for r in rows if r[1] == group] == [[group, name, "0", "3", "3", "0"]], out
    assert "Diff Total: " in out  # the broker's total: other tests' groups share the cluster
    # RocketMQ's command copies with GET_CONSUME_STATS of the source group (routed through its
    # retry topic) and UPDATE_CONSUMER_OFFSET; it must run without an error
    await real_mqadmin(home, "cloneGroupOffset", "-n", ns, "-s", group, "-d", clone,
                       "-t", names.topic, "-o", "true")  # fmt: skip

    out = await real_mqadmin(home, "statsAll", "-n", ns, "-t", names.topic)
    rows = [line.split() for line in out.splitlines() if line.startswith(names.topic[:64])]
    # topic, group, accumulation, inTPS, outTPS, inMsg24Hour, outMsg24Hour
    assert rows and all(r[-2] == "3" for r in rows), [
        line for line in out.splitlines() if " - " not in line
    ]

    try:
        out = await real_mqadmin(home, "wipeWritePerm", "-n", ns, "-b", name)
        assert f"wipe write perm of broker[{name}] in name server[{ns}] OK" in out
        _, route, _ = await amqadmin("topicRoute", "-n", ns, "-t", names.topic)
        assert route["queueDatas"][0]["perm"] == 4
    finally:
        out = await real_mqadmin(home, "addWritePerm", "-n", ns, "-b", name)
    assert f"add write perm of broker[{name}] in name server[{ns}] OK" in out
    _, route, _ = await amqadmin("topicRoute", "-n", ns, "-t", names.topic)
    assert route["queueDatas"][0]["perm"] == 6
