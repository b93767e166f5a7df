"""`rmq-ha mqadmin` against each cluster implementation of the interop suite: the commands
speak RocketMQ's remoting protocol with RocketMQ's request codes, so against a real Apache
RocketMQ 5.x namesrv + broker (RMQ_INTEROP_IMPL=real or both) they work unchanged.
Run as the operator would: `rmq-ha mqadmin ... --json` processes, output parsed back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from harness import Cluster, Names

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
