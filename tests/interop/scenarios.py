"""The interop scenarios, shared by the Java and the Go client tests. Each one runs the client CLI
(tests/interop/java, tests/interop/go) against a live cluster and checks exact expectations."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import (
    ClientRun,
    Cluster,
    FrameSniffer,
    Names,
    check_orderly_received,
    check_orderly_sent,
    check_received,
    check_sent,
    first_deliveries,
    run_client,
)

COUNT = 20


def _run(
    client: str,
    scenario: str,
    cluster: Cluster,
    tmp: Path,
    names: Names,
    ser: str,
    count: int = COUNT,
    **kw: Any,
) -> ClientRun:
    return run_client(
        client,
        scenario,
        cluster,
        tmp,
        topic=kw.pop("topic", names.topic),
        group=kw.pop("group", names.group),
        count=count,
        serialize=ser,
        **kw,
    )


def send_then_push(
    client: str, send: str, cluster: Cluster, tmp: Path, names: Names, ser: str
) -> None:
    """send-sync / send-async, then a concurrent push consumer reads everything back."""
    sent = _run(client, send, cluster, tmp, names, ser)
    check_sent(sent, COUNT)
    got = _run(client, "consume-push-concurrent", cluster, tmp, names, ser)
    check_received(cluster, names.topic, sent.sent, got.received)


def oneway(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    sent = _run(client, "send-oneway", cluster, tmp, names, ser)
    check_sent(sent, COUNT, with_results=False)
    got = _run(client, "consume-push-concurrent", cluster, tmp, names, ser)
    check_received(cluster, names.topic, sent.sent, got.received)


def batch(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Batches of 10, 10 and 5: each batch lands in one queue at consecutive offsets."""
    sent = _run(
        client, "send-batch", cluster, tmp, names, ser, count=25, extra=["--batch-size", "10"]
    )
    check_sent(sent, 25, msg_ids=client == "java")
    batches = sent.data["batches"]
    assert [b["size"] for b in batches] == [10, 10, 5]
    for b in batches:
        assert b["offsetMsgIdCount"] == b["size"], b
        if client == "java":  # the Go client reports no client msgId for a batch
            assert b["msgIdCount"] == b["size"], b
    got = _run(client, "consume-push-concurrent", cluster, tmp, names, ser, count=25)
    check_received(cluster, names.topic, sent.sent, got.received)


def orderly(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """send-orderly (queue chosen by key) then consume-push-orderly: per-key order preserved."""
    keys, per_key = 4, 10
    sent = _run(
        client,
        "send-orderly",
        cluster,
        tmp,
        names,
        ser,
        count=keys * per_key,
        extra=["--keys", "4"],
    )
    check_sent(sent, keys * per_key)
    check_orderly_sent(sent.sent)
    got = _run(client, "consume-push-orderly", cluster, tmp, names, ser, count=keys * per_key)
    check_received(cluster, names.topic, sent.sent, got.received)
    check_orderly_received(got.received, keys, per_key)


def pull(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """DefaultMQPullConsumer: explicit min/max offsets, pulls, and a synchronous offset commit
    that a fresh consumer of the same group reads back."""
    sent = _run(client, "send-sync", cluster, tmp, names, ser)
    check_sent(sent, COUNT)
    got = _run(client, "consume-pull", cluster, tmp, names, ser)
    check_received(cluster, names.topic, sent.sent, got.received)
    per_queue: dict[int, int] = defaultdict(int)
    for s in sent.sent:
        per_queue[s["queueId"]] += 1
    queues = got.data["queues"]
    assert queues, got.data
    for q in queues:
        assert q["minOffset"] == 0, q
        assert q["maxOffset"] == per_queue.get(q["queueId"], 0), q
        assert q["nextOffset"] == q["maxOffset"], q
        assert q["committedAfter"] == q["maxOffset"], q


TAGS = ("TagA", "TagB", "TagC")
#: The user property the Java client puts on every message: its id (InteropMain.USER_PROP).
USER_PROP = "interop"


def _send_rotating_tags(
    client: str, cluster: Cluster, tmp: Path, names: Names, ser: str, n: int
) -> dict[str, str]:
    """Sends `n` messages, body k tagged TAGS[k % 3]; returns each body's tag."""
    sent = _run(
        client, "send-sync", cluster, tmp, names, ser, count=n, extra=["--tags", ",".join(TAGS)]
    )
    check_sent(sent, n)
    return {s["body"]: TAGS[int(s["body"].rsplit("-", 1)[1]) % len(TAGS)] for s in sent.sent}


def tag_filter(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Sends rotate through TagA, TagB, TagC (body n gets TAGS[n % 3]); a push consumer
    subscribed to "TagA || TagC" gets every TagA and TagC body, each with its tag, and no
    TagB. The Java client counts the tags in the raw PULL_MESSAGE answers, before its own
    tag filter: the broker itself must not send TagB."""
    tag_of = _send_rotating_tags(client, cluster, tmp, names, ser, 30)
    want = {b for b, t in tag_of.items() if t in ("TagA", "TagC")}
    got = _run(
        client,
        "consume-push-concurrent",
        cluster,
        tmp,
        names,
        ser,
        count=len(want),
        extra=["--subscription", "TagA || TagC"],
    )
    first = first_deliveries(got.received)
    assert set(first) == want, (sorted(set(first) ^ want), got.describe())
    for body, r in first.items():
        assert r["tags"] == tag_of[body], r
        assert r["bodyOk"], r
    if client == "java":
        wire = got.data["wireTags"]
        assert set(wire) <= {"TagA", "TagC"} and sum(wire.values()) >= len(want), wire


def broadcast(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Two push consumers of one group in BROADCASTING mode (the client keeps the offsets):
    each gets every message, intact, at the offset its send was acknowledged at."""
    sent = _run(client, "send-sync", cluster, tmp, names, ser)
    check_sent(sent, COUNT)
    got = _run(client, "consume-push-broadcast", cluster, tmp, names, ser)
    for i in (0, 1):
        mine = [r for r in got.received if r["consumer"] == i]
        check_received(cluster, names.topic, sent.sent, mine)


def server_rebalance(
    client: str, cluster: Cluster, tmp: Path, names: Names, ser: str, mode: str
) -> None:
    """Two push consumers with clientRebalance=false ask the broker for their queues
    (QUERY_ASSIGNMENT, answered REQUEST_CODE_NOT_SUPPORTED before: they consumed nothing);
    with mode POP the group is first switched to pop mode (SET_MESSAGE_REQUEST_MODE) and they
    pop. Together they get every message, intact; in pull mode each queue goes to one."""
    sent = _run(client, "send-sync", cluster, tmp, names, ser)
    check_sent(sent, COUNT)
    got = _run(
        client, "consume-push-server-rebalance", cluster, tmp, names, ser,
        extra=["--request-mode", mode],
    )  # fmt: skip
    check_received(cluster, names.topic, sent.sent, got.received)
    if mode == "PULL":
        owner: dict[int, set[int]] = {}
        for r in got.received:
            owner.setdefault(r["queueId"], set()).add(r["consumer"])
        assert all(len(c) == 1 for c in owner.values()), owner


def request_reply(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Request-reply (Java DefaultMQProducer.request with SEND_REPLY_MESSAGE_V2, Go
    Producer.Request with SEND_REPLY_MESSAGE): every request reaches a push consumer carrying
    the broker's CLUSTER property, whose reply (to <cluster>_REPLY_TOPIC) the broker pushes
    back to the requester: each request returns its own answer."""
    n = 10
    if client == "go":  # its push consumer does not start on a topic without a route yet
        check_sent(_run(client, "send-sync", cluster, tmp, names, ser, count=1), 1)
    got = _run(client, "request-reply", cluster, tmp, names, ser, count=n)
    assert len(got.sent) == n, got.describe()
    for s in got.sent:
        assert s.get("reply") == "re:" + s["body"], (s, got.describe())
        assert s["replyTopic"].endswith("_REPLY_TOPIC"), s
    for r in got.received:
        assert r["cluster"] and r["replyStatus"] == "SEND_OK", r


def lite_pull(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    sent = _run(client, "send-sync", cluster, tmp, names, ser)
    check_sent(sent, COUNT)
    got = _run(client, "consume-lite-pull", cluster, tmp, names, ser)
    check_received(cluster, names.topic, sent.sent, got.received)


def failures(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Bodies n % 3 == 0 get RECONSUME_LATER on first delivery: they go back through the broker
    (CONSUMER_SEND_MSG_BACK, %RETRY%group) and are redelivered with reconsumeTimes >= 1."""
    count = 12
    sent = _run(client, "send-sync", cluster, tmp, names, ser, count=count)
    check_sent(sent, count)
    got = _run(
        client,
        "consume-with-failures",
        cluster,
        tmp,
        names,
        ser,
        count=count,
        extra=["--fail-every", "3", "--retry-delay-level", "1"],
    )
    by_body: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in got.received:
        by_body[r["body"]].append(r)
    sent_by_body = {s["body"]: s for s in sent.sent}
    expect_fail = {b for b in sent_by_body if int(b.rsplit("-", 1)[1]) % 3 == 0}
    assert set(got.data["failedOnce"]) == expect_fail
    # first deliveries are the originals, exactly where the broker stored them
    originals = [d[0] for d in by_body.values()]
    check_received(cluster, names.topic, sent.sent, originals)
    for body, deliveries in by_body.items():
        first, *later = deliveries
        assert first["reconsumeTimes"] == 0, first
        if body in expect_fail:
            assert first["result"] == "RECONSUME_LATER", deliveries
            ok = [d for d in later if d["result"] == "CONSUME_SUCCESS"]
            assert ok, f"{body} never redelivered: {deliveries}"
            redo = ok[0]
            assert redo["reconsumeTimes"] >= 1, redo
            assert redo["topic"] == names.topic, redo  # the client restores the real topic
            assert redo["retryTopic"] == names.topic, redo  # RETRY_TOPIC property
            assert redo["msgId"] == sent_by_body[body]["msgId"], redo  # UNIQ_KEY survives
            assert redo["bodyOk"] and redo["userProp"] == body and redo["keys"] == first["keys"]
            assert redo["offsetMsgId"] != first["offsetMsgId"], "a retry is a new stored message"
        else:
            assert [d["result"] for d in deliveries] == ["CONSUME_SUCCESS"], deliveries


def offset_resume(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Consume half, shut down (offsets committed), restart in the same group and consume the
    rest: nothing lost, and nothing acknowledged before the shutdown is read again."""
    count = 24
    sent = _run(client, "send-sync", cluster, tmp, names, ser, count=count)
    check_sent(sent, count)
    got = _run(client, "offset-resume", cluster, tmp, names, ser, count=count)
    phases = {p["phase"]: p for p in got.data["phases"]}
    assert phases[1]["received"] == count // 2, phases
    p1 = [r["body"] for r in got.received if r["phase"] == 1]
    p2 = [r["body"] for r in got.received if r["phase"] == 2]
    assert len(set(p1)) == len(p1) == count // 2
    assert set(p1) | set(p2) == {s["body"] for s in sent.sent}
    reread = sorted(set(p1) & set(p2))
    assert not reread, f"phase 2 re-read messages committed in phase 1: {reread}"
    check_received(cluster, names.topic, sent.sent, got.received)


def route(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Create a 6-queue topic through the admin API (UPDATE_AND_CREATE_TOPIC on the broker), then
    discover it through the namesrv (GET_ROUTEINFO_BY_TOPIC; Java also GET_BROKER_CLUSTER_INFO)."""
    extra = ["--queues", "6"]
    if client == "go":
        extra += ["--broker", cluster.broker]
    got = _run(client, "route", cluster, tmp, names, ser, count=0, extra=extra)
    pub = got.data["publishQueues"]
    assert sorted((q["brokerName"], q["queueId"]) for q in pub) == [
        (cluster.broker_name, i) for i in range(6)
    ]
    if client == "java":
        ci = got.data["clusterInfo"]
        assert ci["clusterAddrTable"] == {"DefaultCluster": [cluster.broker_name]}, ci
        assert ci["brokerAddrTable"][cluster.broker_name]["brokerAddrs"] == {"0": cluster.broker}
        rd = got.data["route"]
        assert rd["queueDatas"] == [
            {
                "brokerName": cluster.broker_name,
                "readQueueNums": 6,
                "writeQueueNums": 6,
                "perm": 6,
                "topicSysFlag": 0,
            }
        ], rd
        assert rd["brokerDatas"] == [
            {
                "cluster": "DefaultCluster",
                "brokerName": cluster.broker_name,
                "brokerAddrs": {"0": cluster.broker},
            }
        ], rd
    # and the topic takes messages on all six queues
    sent = _run(client, "send-sync", cluster, tmp, names, ser, count=24)
    check_sent(sent, 24)
    assert {s["queueId"] for s in sent.sent} == set(range(6))


def large_bodies(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """8 KiB bodies: over the clients' 4 KiB threshold, so they are sent compressed (sysFlag bit
    0) and must come back byte-identical."""
    size = 8192
    extra = ["--body-size", str(size)]
    sent = _run(client, "send-sync", cluster, tmp, names, ser, count=10, extra=extra)
    check_sent(sent, 10)
    got = _run(client, "consume-push-concurrent", cluster, tmp, names, ser, count=10)
    check_received(cluster, names.topic, sent.sent, got.received, body_len=size)


def cross(
    producer: str, consumer: str, cluster: Cluster, tmp: Path, names: Names, ser: str
) -> None:
    """One client produces, the other consumes."""
    sent = _run(producer, "send-sync", cluster, tmp, names, ser)
    check_sent(sent, COUNT)
    got = _run(consumer, "consume-push-concurrent", cluster, tmp, names, ser)
    check_received(cluster, names.topic, sent.sent, got.received)


def wire(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Through a frame-recording relay in front of the namesrv: every frame the client sends
    carries the requested serialization type byte. Answers may come in either: the real 5.5.0
    namesrv answers ROCKETMQ requests in JSON (its own default), and clients decode each frame by
    its own type byte."""
    want = {"JSON": 0, "ROCKETMQ": 1}[ser]
    sniffer = FrameSniffer(cluster.namesrv)
    try:
        relay = Cluster(
            cluster.impl, sniffer.addr, cluster.broker, cluster.broker_name, cluster.workdir
        )
        sent = _run(client, "send-sync", relay, tmp, names, ser, count=3)
        check_sent(sent, 3)
    finally:
        sniffer.close()
    assert sniffer.to_server, "no frames seen"
    assert set(sniffer.to_server) == {want}, sniffer.to_server
    assert sniffer.to_client and set(sniffer.to_client) <= {0, want}, sniffer.to_client


def _moved(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send records of messages the broker parks first (schedule or half topic): the answer's
    queue offset and offset msgId are those of the parked copy, not of the delivered one."""
    drop = ("queueId", "queueOffset", "offsetMsgId")
    return [{k: v for k, v in s.items() if k not in drop} for s in sent]


def delayed(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """DELAY level 1 (1 s with the default messageDelayLevel): parked on SCHEDULE_TOPIC_XXXX,
    then delivered to the real topic and the queue the answer named, a second after it was
    born, with its msgId, keys, tag and properties."""
    count = 6
    sent = _run(
        client, "send-delayed", cluster, tmp, names, ser, count=count, extra=["--delay-level", "1"]
    )
    assert len(sent.sent) == count, sent.describe()
    assert all(s["status"] == "SEND_OK" for s in sent.sent), sent.sent
    got = _run(client, "consume-push-concurrent", cluster, tmp, names, ser, count=count)
    check_received(cluster, names.topic, _moved(sent.sent), got.received)
    first = first_deliveries(got.received)
    for s in sent.sent:
        r = first[s["body"]]
        assert r["queueId"] == s["queueId"], (s, r)
        assert r["storeTimestamp"] - r["bornTimestamp"] >= 950, r


def transaction(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """TransactionMQProducer: body n commits (n % 3 == 0), rolls back (1), or answers UNKNOW
    (2) and commits when the broker sends CHECK_TRANSACTION_STATE (after transactionTimeOut).
    Consumers get exactly the committed ones."""
    count = 6
    sent = _run(client, "send-transaction", cluster, tmp, names, ser, count=count, timeout=150)
    assert len(sent.sent) == count, sent.describe()
    want_state = {0: "COMMIT_MESSAGE", 1: "ROLLBACK_MESSAGE", 2: "UNKNOW"}
    for s in sent.sent:
        n = int(s["body"].rsplit("-", 1)[1])
        assert s["status"] == "SEND_OK" and s["localState"] == want_state[n % 3], s
    by_body = {s["body"]: s for s in sent.sent}
    checks = sent.data["checks"]
    undecided = {b for b in by_body if int(b.rsplit("-", 1)[1]) % 3 == 2}
    assert {c["body"] for c in checks} == undecided, checks
    for c in checks:
        # The check carries the message with its real topic and the producer's ids.
        assert c["topic"] == names.topic and c["userProp"] == c["body"], c
        assert c["transactionId"] == by_body[c["body"]]["transactionId"], (c, by_body[c["body"]])
    committed = [s for s in sent.sent if int(s["body"].rsplit("-", 1)[1]) % 3 != 1]
    got = _run(client, "consume-push-concurrent", cluster, tmp, names, ser, count=len(committed))
    check_received(cluster, names.topic, _moved(committed), got.received)
    assert {r["body"] for r in got.received} == {s["body"] for s in committed}


def sql92_refused(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """A push consumer with an SQL92 selector does not start: the broker answers
    CHECK_CLIENT_CONFIG as RocketMQ does with property filters off (its default), and the
    client's start fails with that remark. Nothing is consumed."""
    sent = _run(client, "send-sync", cluster, tmp, names, ser, count=3)
    check_sent(sent, 3)
    got = _run(
        client,
        "consume-push-concurrent",
        cluster,
        tmp,
        names,
        ser,
        count=3,
        extra=["--sql", "a > 5"],
        check=False,
        timeout=20,
    )
    assert got.returncode == 1 and got.received == [], got.describe()
    msgs = [e.get("message", "") for e in got.data["errors"]]
    assert any(
        "CODE: 1 " in m and "does not support consumer to filter message by SQL92" in m
        for m in msgs
    ), msgs


def sql92_filter(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """With enablePropertyFilter on: a push consumer with an SQL92 selector on the tags and on
    a user property gets exactly the matching messages. Sends rotate through TagA, TagB, TagC
    and carry their id in the user property; the Java client counts the tags in the raw
    PULL_MESSAGE answers: the broker itself must not send what does not match."""
    tag_of = _send_rotating_tags(client, cluster, tmp, names, ser, 30)
    want = {b for b, t in tag_of.items() if t != "TagB" and not b.endswith("0")}
    sql = f"TAGS <> 'TagB' AND NOT ({USER_PROP} ENDSWITH '0')"
    got = _run(
        client,
        "consume-push-concurrent",
        cluster,
        tmp,
        names,
        ser,
        count=len(want),
        extra=["--sql", sql],
    )
    first = first_deliveries(got.received)
    assert set(first) == want, (sorted(set(first) ^ want), got.describe())
    for body, r in first.items():
        assert r["tags"] == tag_of[body] and r["userProp"] == body, r
    if client == "java":
        wire = got.data["wireTags"]
        assert set(wire) <= {"TagA", "TagC"} and sum(wire.values()) >= len(want), wire


TRACE_TYPES = ("Pub", "SubBefore", "SubAfter")


def trace(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """Message trace: a producer and a push consumer created with enableMsgTrace send and
    consume 10 messages; the client's trace dispatchers send their records to
    RMQ_SYS_TRACE_TOPIC (auto-created by the first trace send, through TBW102), and reading
    that topic back from offset 0 finds, for every sent msgId, a successful Pub naming the
    stored message, a SubBefore and a successful SubAfter of the consumer group. The consume
    traces exist only if the consumed messages carry the broker's MSG_REGION property."""
    n = 10
    got = _run(client, "trace", cluster, tmp, names, ser, count=n)
    check_sent(got, n)
    check_received(cluster, names.topic, got.sent, got.received)
    traces = got.data["traces"]
    assert set(traces) == {s["msgId"] for s in got.sent}, got.describe()
    missing = {
        msg_id: sorted(set(TRACE_TYPES) - set(t["types"]))
        for msg_id, t in traces.items()
        if not set(TRACE_TYPES) <= set(t["types"])
    }
    assert not missing, (missing, got.data["traceRead"])
    assert not got.data["traceRead"]["undecodable"], got.data["traceRead"]
    for s in got.sent:
        t = traces[s["msgId"]]
        pub, before, after = (t[k] for k in TRACE_TYPES)
        assert pub["success"] is True, pub
        assert pub["topic"] == names.topic and pub["keys"] == s["key"] and pub["tags"] == "TagA"
        assert pub["offsetMsgId"] == s["offsetMsgId"], (pub, s)
        assert pub["storeHost"] == cluster.broker, pub
        assert pub["regionId"], pub  # the MSG_REGION of the send's answer
        assert before["group"] == after["group"] == names.group, (before, after)
        assert before["keys"] == s["key"], before  # (a SubBefore record names no topic)
        assert before["retryTimes"] == 0 and before["regionId"] == pub["regionId"], (before, pub)
        assert after["success"] is True, after
        assert after["requestId"] == before["requestId"], (before, after)


def orderly_dlq(client: str, cluster: Cluster, tmp: Path, names: Names, ser: str) -> None:
    """An orderly push consumer with maxReconsumeTimes 1 answers SUSPEND_CURRENT_QUEUE_A_MOMENT
    for one message (body 2 of 6, all in queue 0): the client redelivers it locally once, then
    sends it to %RETRY%group with RECONSUME_TIME 2 > MAX_RECONSUME_TIMES 1, and the broker stores
    it in %DLQ%group (queue 0, its msgId and properties kept), not in %RETRY%group: it is never
    delivered again. Every other message is consumed exactly once, in queue order, the failing
    one's deliveries in their place."""
    n, fail, max_re = 6, 2, 1
    got = _run(
        client,
        "consume-orderly-dlq",
        cluster,
        tmp,
        names,
        ser,
        count=n,
        extra=[
            "--fail-index",
            str(fail),
            "--max-reconsume-times",
            str(max_re),
            "--suspend-ms",
            "100",
            "--quiet-ms",
            "2000",
        ],
    )
    check_sent(got, n)
    sent = sorted(got.sent, key=lambda s: s["queueOffset"])
    assert {s["queueId"] for s in sent} == {0}, sent
    bodies = [s["body"] for s in sent]
    fail_sent = sent[fail]
    fail_body = fail_sent["body"]
    assert fail_body == got.data["failId"] and fail_body.endswith(f"-{fail}")
    want = bodies[:fail] + [fail_body] * (max_re + 1) + bodies[fail + 1 :]
    order = [r["body"] for r in got.received]
    assert order == want, (order, want)
    check_received(cluster, names.topic, got.sent, got.received)
    redo = [r for r in got.received if r["body"] == fail_body]
    assert [r["result"] for r in redo] == ["SUSPEND_CURRENT_QUEUE_A_MOMENT"] * (max_re + 1), redo
    # local redeliveries: the client counts them on its own copy of the same stored message
    assert [r["reconsumeTimes"] for r in redo] == list(range(max_re + 1)), redo
    assert {(r["queueOffset"], r["offsetMsgId"]) for r in redo} == {
        (fail_sent["queueOffset"], fail_sent["offsetMsgId"])
    }, redo
    assert all(r["result"] == "SUCCESS" for r in got.received if r["body"] != fail_body)
    assert got.data["failDeliveries"] == max_re + 1, got.data["failDeliveries"]

    dlq = got.data["dlq"]
    assert len(dlq) == 1, dlq
    d = dlq[0]
    props = d["properties"]
    assert d["body"] == fail_body and d["bodyOk"] and d["userProp"] == fail_body, d
    assert d["topic"] == f"%DLQ%{names.group}" and d["queueId"] == 0, d
    assert d["brokerName"] == cluster.broker_name, d
    assert d["msgId"] == fail_sent["msgId"], (d, fail_sent)  # UNIQ_KEY survives
    assert d["keys"] == fail_sent["key"] and d["tags"] == "TagA", d
    assert d["retryTopic"] == names.topic, d  # RETRY_TOPIC: where it came from
    assert d["offsetMsgId"] != fail_sent["offsetMsgId"], "a dead letter is a new stored message"
    assert props.get("RECONSUME_TIME") == str(max_re + 1), props
    assert props.get("MAX_RECONSUME_TIMES") == str(max_re), props
    assert props.get("ORIGIN_MESSAGE_ID") == fail_sent["msgId"], props
    assert d["reconsumeTimes"] == max_re + 1, d
    # nothing went to %RETRY%group (null: it has no route at all)
    assert got.data["retryMaxOffset"] in (0, None), got.data["retryMaxOffset"]
