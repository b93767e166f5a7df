"""Issue 20: the Prometheus endpoint of each role (metricsExporterType=PROM) — its config keys,
the HTTP exporter, and a 3-replica controller-mode group of real processes scraped over HTTP
across a master failover."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from rmq_jepsen.bench.cluster import FAST_CONTROLLER, METRICS_ON
from rmq_jepsen.launch import free_ports, role_proc

from hautil import Acked, HaCluster, read_all, send_values
from rmq_ha.broker.metrics import BrokerSnapshot, ReplicaLag, Traffic, families
from rmq_ha.config import (
    BrokerConfig,
    ControllerConfig,
    MetricsExporterType,
    NamesrvConfig,
    from_mapping,
    load,
)
from rmq_ha.errors import ConfigError
from rmq_ha.metrics import Families, Histogram, SnapshotCollector, registry_of, serve_metrics

#: (metric name, {label: value}) -> value; counters under their `_total` sample name.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

CONFIGS = (BrokerConfig, NamesrvConfig, ControllerConfig)


# ---- config ---------------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("cls", CONFIGS)
def test_metrics_keys_default_disabled_and_parse(cls: type) -> None:
    cfg, unknown = from_mapping(cls, {})
    assert cfg.metrics_exporter_type is MetricsExporterType.DISABLE
    assert cfg.metrics_prom_exporter_port == 5557
    cfg, unknown = from_mapping(
        cls,
        {
            "metricsExporterType": "PROM",
            "metricsPromExporterHost": "127.0.0.1",
            "metricsPromExporterPort": "0",
        },
    )
    assert unknown == []
    assert cfg.metrics_exporter_type is MetricsExporterType.PROM
    assert (cfg.metrics_prom_exporter_host, cfg.metrics_prom_exporter_port) == ("127.0.0.1", 0)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("metricsPromExporterPort", "70000", "outside 0..65535"),
        ("metricsPromExporterPort", "-1", "outside 0..65535"),
        ("metricsPromExporterPort", "http", "not an integer"),
        ("metricsExporterType", "PROMETHEUS", "not one of DISABLE, PROM"),
        ("metricsExporterType", "OTLP_GRPC", "rmq_ha does not have"),
        ("metricsPromExporterHost", "a b", "not a host"),
    ],
)
def test_bad_metrics_config_names_the_key(cls: type, key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as e:
        from_mapping(cls, {key: value})
    assert key in str(e.value)


@pytest.mark.timeout(10)
def test_metrics_keys_from_a_rocketmq_properties_file(tmp_path: Path) -> None:
    p = tmp_path / "broker.conf"
    p.write_text("metricsExporterType=PROM\nmetricsPromExporterPort=5558\n")
    cfg, unknown = load(BrokerConfig, p)
    assert cfg.metrics_exporter_type is MetricsExporterType.PROM
    assert cfg.metrics_prom_exporter_port == 5558 and unknown == []


# ---- the exporter ---------------------------------------------------------------------------


async def http_get(addr: str, path: str = "/metrics") -> tuple[int, str]:
    host, _, port = addr.rpartition(":")
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(
                f"GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n".encode()
            )
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


def parse(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample `name` whose labels include `labels` (None: none); asserts it is unique."""
    got = [
        v
        for (n, ls), v in samples.items()
        if n == name and set(labels.items()) <= set(dict(ls).items())
    ]
    assert len(got) <= 1, f"{name} {labels}: {len(got)} samples"
    return got[0] if got else None


async def scrape(addr: str) -> Samples:
    code, body = await http_get(addr)
    assert code == 200, body
    return parse(body)


def snapshot(**over: object) -> BrokerSnapshot:
    base: dict[str, object] = dict(
        role="MASTER",
        fenced=False,
        epoch=3,
        last_epoch=3,
        broker_id=1,
        min_offset=0,
        max_offset=1000,
        confirm_offset=900,
        flushed_offset=800,
        dispatched_offset=950,
        sync_state_set=2,
        effective_sync_state_set=2,
        sync_state_set_epoch=4,
        replicas=[ReplicaLag(2, 100, 40, True), ReplicaLag(3, 0, 0, False)],
        slave_state="READY",
        acting_master=False,
        isolated=False,
        isolated_fence=False,
        owes_catch_up=False,
        disk_full=False,
        special_services=True,
        controller_answer_age_ms=12,
        controller_heartbeat_age_ms=3,
        store={"quarantined_records": 1, "cut_bytes": 77},
        topics=5,
        consumer_groups=2,
        producer_connections=1,
        consumer_connections=0,
        consumer_lag={("T", "G"): 7},
    )
    base.update(over)
    return BrokerSnapshot(**base)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
async def test_exporter_serves_the_broker_families_on_port_0() -> None:
    traffic = Traffic()
    traffic.put("T", "Normal", 3, 30)
    traffic.put("T", "Normal", 2, 20)
    traffic.got("T", "G", 4, 400)
    traffic.sized("T", "Normal", [10, 2000, 5000])
    traffic.answered(310, 0, 0.5)
    traffic.answered(310, 0, 7.0)
    traffic.answered(99999, 1, 2.0)  # an unknown request code
    traffic.answered(11, -1, 1.0)  # oneway
    base = {"cluster": "C", "node_type": "broker", "node_id": "broker-a"}
    reg = registry_of(SnapshotCollector(lambda: families(snapshot(), traffic, base)))
    async with trio.open_nursery() as n:
        addr = await n.start(serve_metrics, reg, "127.0.0.1", 0)
        assert not addr.endswith(":0")
        s = await scrape(addr)
        assert value(s, "rocketmq_messages_in_total", topic="T", message_type="Normal") == 5
        assert value(s, "rocketmq_throughput_in_total", topic="T") == 50
        assert value(s, "rocketmq_messages_out_total", topic="T", consumer_group="G") == 4
        assert value(s, "rocketmq_throughput_out_total", consumer_group="G") == 400
        assert value(s, "rocketmq_storage_flush_behind_bytes", cluster="C") == 200
        assert value(s, "rocketmq_message_size_bucket", topic="T", le="1024.0") == 1
        assert value(s, "rocketmq_message_size_bucket", topic="T", le="4096.0") == 2
        assert value(s, "rocketmq_message_size_count", topic="T") == 3
        assert value(s, "rocketmq_message_size_sum", topic="T") == 7010
        send = {"request_code": "SEND_MESSAGE_V2", "response_code": "SUCCESS"}
        assert value(s, "rocketmq_rpc_latency_count", protocol_type="remoting", **send) == 2
        assert value(s, "rocketmq_rpc_latency_bucket", le="1.0", **send) == 1
        assert value(s, "rocketmq_rpc_latency_bucket", le="10.0", **send) == 2
        assert value(s, "rocketmq_rpc_latency_count", request_code="UNKNOWN") == 1
        assert value(s, "rocketmq_rpc_latency_count", response_code="NONE") == 1
        assert value(s, "rocketmq_storage_dispatch_behind_bytes") == 50
        assert value(s, "rocketmq_storage_size") == 1000
        assert value(s, "rocketmq_consumer_lag_messages", topic="T", consumer_group="G") == 7
        assert value(s, "rmq_ha_broker_role", role="MASTER") == 1
        assert value(s, "rmq_ha_broker_role", role="SLAVE") == 0
        assert value(s, "rmq_ha_broker_epoch", node_id="broker-a") == 3
        assert value(s, "rmq_ha_replication_lag_bytes", replica_id="2") == 100
        assert value(s, "rmq_ha_replication_lag_ms", replica_id="2") == 40
        assert value(s, "rmq_ha_replication_lag_bytes", replica_id="3") == 0
        assert value(s, "rmq_ha_sync_state_set_size") == 2
        assert value(s, "rmq_ha_controller_answer_age_ms") == 12
        assert value(s, "rmq_ha_store_quarantined_records") == 1
        assert value(s, "rmq_ha_store_recovery_cut_bytes") == 77
        assert value(s, "process_cpu_seconds_total") is not None
        code, _ = await http_get(addr, "/nothing")
        assert code == 404
        n.cancel_scope.cancel()


@pytest.mark.timeout(30)
async def test_a_failing_collector_answers_500_and_the_endpoint_keeps_serving() -> None:
    calls = {"n": 0}

    def collect() -> list[object]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        f = Families({"node_type": "x"})
        h = Histogram([0.1, 1.0])
        h.observe(0.05)
        h.observe(0.5)
        f.histogram("rmq_ha_test_seconds", "test", h)
        return f.out  # type: ignore[return-value]

    reg = registry_of(SnapshotCollector(collect))  # type: ignore[arg-type]
    async with trio.open_nursery() as n:
        addr = await n.start(serve_metrics, reg, "127.0.0.1", 0)
        code, _ = await http_get(addr)
        assert code == 500
        s = await scrape(addr)
        assert value(s, "rmq_ha_test_seconds_bucket", le="0.1") == 1
        assert value(s, "rmq_ha_test_seconds_bucket", le="+Inf") == 2
        assert value(s, "rmq_ha_test_seconds_count") == 2
        n.cancel_scope.cancel()


# ---- a controller-mode group of real processes ------------------------------------------------


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    """Polls `check` until it holds; fails naming `what` after `timeout_s`."""
    with trio.move_on_after(timeout_s):
        while not await check():
            await trio.sleep(0.1)
        return
    raise AssertionError(f"never: {what}")


@pytest.mark.timeout(180)
async def test_group_metrics_show_sends_and_a_master_failover(tmp_path: Path) -> None:
    c = HaCluster(tmp_path, metrics=True)
    try:
        await c.start()
        m = await c.master()
        await c.wait_sync_state_set(m, 3)
        broker_addrs = [c.metrics_addr(p) for p in c.brokers]
        ns_addrs = [c.metrics_addr(p) for p in c.namesrvs]
        # The broker's status answer names its endpoint too.
        st = await c.status(m)
        assert st is not None and st["metricsAddress"] == broker_addrs[m]

        # Every broker has its role and epoch series; the master's says MASTER, the others
        # SLAVE, all at the master's epoch, with the full SyncStateSet on the master.
        async def roles_settled() -> bool:
            for i, addr in enumerate(broker_addrs):
                s = await scrape(addr)
                want = "MASTER" if i == m else "SLAVE"
                if value(s, "rmq_ha_broker_role", role=want) != 1:
                    return False
            return True

        await until("each broker's role series settles", roles_settled)
        scraped = [await scrape(a) for a in broker_addrs]
        epochs = {value(s, "rmq_ha_broker_epoch") for s in scraped}
        assert len(epochs) == 1 and next(iter(epochs)) is not None, epochs
        epoch = next(iter(epochs))
        assert epoch is not None
        assert value(scraped[m], "rmq_ha_broker_is_master") == 1
        assert value(scraped[m], "rmq_ha_sync_state_set_size") == 3
        assert value(scraped[m], "rmq_ha_controller_answer_age_ms") is not None
        for i, s in enumerate(scraped):
            assert value(s, "rmq_ha_broker_role", role="MASTER") == (1 if i == m else 0)

        # A send increases messages_in on the master.
        before = value(scraped[m], "rocketmq_messages_in_total", topic="TopicMetrics") or 0
        acked = Acked()
        assert (
            await send_values(c.ns_addrs[0], "TopicMetrics", [f"v{i}" for i in range(10)], acked)
            == []
        )
        s = await scrape(broker_addrs[m])
        after = value(s, "rocketmq_messages_in_total", topic="TopicMetrics", message_type="Normal")
        assert after is not None and after >= before + 10
        assert (value(s, "rocketmq_throughput_in_total", topic="TopicMetrics") or 0) >= 20

        # Replication lag returns to 0 for both replicas.
        async def caught_up() -> bool:
            s = await scrape(broker_addrs[m])
            lags = [v for (n, _), v in s.items() if n == "rmq_ha_replication_lag_bytes"]
            return len(lags) == 2 and all(v == 0 for v in lags)

        await until("the replicas' lag returns to 0", caught_up)

        # The controllers: one serving leader, every node at a term >= 1.
        async def one_leader() -> bool:
            leaders = 0
            for a in ns_addrs:
                s = await scrape(a)
                if (value(s, "rmq_ha_controller_raft_term") or 0) < 1:
                    return False
                leaders += int(value(s, "rmq_ha_controller_raft_is_leader") or 0)
            return leaders == 1

        await until("exactly one controller leads", one_leader)
        ctl = [await scrape(a) for a in ns_addrs]
        leader = next(
            i for i, s in enumerate(ctl) if value(s, "rmq_ha_controller_raft_is_leader") == 1
        )
        assert value(ctl[leader], "rmq_ha_controller_raft_role", role="LEADER") == 1
        assert (value(ctl[leader], "rmq_ha_controller_raft_leader_elections_total") or 0) >= 1
        assert (
            value(ctl[leader], "rmq_ha_controller_group_master_epoch", broker_name="broker-a")
            == epoch
        )
        assert value(ctl[leader], "rmq_ha_namesrv_live_brokers") == 3

        # Kill the master: a new master's role series changes and its epoch is higher.
        c.brokers[m].kill()
        m2 = await c.master(exclude=m)

        async def new_master_shows() -> bool:
            s = await scrape(broker_addrs[m2])
            e = value(s, "rmq_ha_broker_epoch")
            return (
                value(s, "rmq_ha_broker_role", role="MASTER") == 1 and e is not None and e > epoch
            )

        await until("the new master's series show MASTER at a higher epoch", new_master_shows)
        s = await scrape(broker_addrs[m2])
        assert value(s, "rmq_ha_broker_role", role="SLAVE") == 0

        async def election_counted() -> bool:
            total = 0.0
            for a, p in zip(ns_addrs, c.namesrvs, strict=True):
                if p.alive:
                    s = await scrape(a)
                    total += (
                        value(s, "rmq_ha_controller_master_elections_total", result="SUCCESS") or 0
                    )
            return total >= 2  # the first election and the failover

        await until("the controllers count the elections", election_counted)

        # Pulls count as messages out (summed over the live brokers: a pull may be served by
        # any replica the client is pointed at).
        got = await read_all(c.ns_addrs[0], "TopicMetrics")
        assert sorted(got) == sorted(acked.values)
        out = 0.0
        for a, p in zip(broker_addrs, c.brokers, strict=True):
            if p.alive:
                s = await scrape(a)
                out += (
                    value(
                        s,
                        "rocketmq_messages_out_total",
                        topic="TopicMetrics",
                        consumer_group="ha-test-drain",
                    )
                    or 0
                )
        assert out >= 10
    finally:
        c.stop()


# ---- --log-format json (issue 20's logs part) ------------------------------------------------


@pytest.mark.timeout(60)
async def test_log_format_json_writes_one_object_per_line(tmp_path: Path) -> None:
    ns = role_proc(
        tmp_path,
        "namesrv",
        "ns",
        {"listenPort": 0, **METRICS_ON},
        args=["--log-format", "json", "--metrics-file", str(tmp_path / "ns.metrics")],
    )
    try:
        ns.start()
        await ns.wait_ready(30)
        metrics = (tmp_path / "ns.metrics").read_text().strip()
        s = await scrape(metrics)
        assert value(s, "rmq_ha_namesrv_live_brokers") == 0
    finally:
        ns.stop()
    lines = [ln for ln in ns.log.read_text().splitlines() if ln.strip()]
    assert lines
    records = [json.loads(ln) for ln in lines]
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(f"http://{metrics}/metrics" in r["message"] for r in records)


@pytest.mark.timeout(60)
async def test_standalone_controller_serves_its_raft_series(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    ctl = role_proc(
        tmp_path,
        "controller",
        "ctl",
        {
            "controllerDLegerPeers": f"n0-127.0.0.1:{port}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(tmp_path / "ctl-store"),
            **FAST_CONTROLLER,
            **METRICS_ON,
        },
        args=["--metrics-file", str(tmp_path / "ctl.metrics")],
    )
    try:
        ctl.start()
        await ctl.wait_ready(30)
        addr = (tmp_path / "ctl.metrics").read_text().strip()

        async def leads() -> bool:
            s = await scrape(addr)
            return value(s, "rmq_ha_controller_raft_is_leader", node_id="n0") == 1

        await until("the single controller node leads", leads)
        s = await scrape(addr)
        # A one-node group leads without a vote (at term 0).
        assert value(s, "rmq_ha_controller_raft_term", node_type="controller") is not None
        assert value(s, "rmq_ha_controller_raft_role", role="LEADER") == 1
        assert value(s, "rmq_ha_controller_raft_leader_elections_total") == 1
        assert value(s, "rmq_ha_controller_broker_groups") == 0
        assert value(s, "rmq_ha_namesrv_live_brokers") is None  # not a name server
    finally:
        ctl.stop()


# ---- pops and dead letters, in process ------------------------------------------------------


@pytest.mark.timeout(60)
async def test_pops_count_out_and_a_dead_letter_counts_by_original_topic(tmp_path: Path) -> None:
    from rmq_ha.client import PopConsumer, Producer
    from rmq_ha.client.api import BrokerApi
    from rmq_ha.config import MetricsExporterType as M
    from rmq_ha.net.client import RemotingClient
    from specialutil import special_cluster
    from test_client_cluster import FAST_CONSUMER, FAST_PRODUCER, create_topic

    on = {
        "metrics_exporter_type": M.PROM,
        "metrics_prom_exporter_host": "127.0.0.1",
        "metrics_prom_exporter_port": 0,
    }
    async with special_cluster(tmp_path, **on) as env:
        addr = env.broker.metrics_address
        assert addr is not None and (await env.broker_status())["metricsAddress"] == addr
        await create_topic(env.namesrv, "PopM", queues=1)
        async with Producer("pg", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(3):
                await p.send("PopM", f"m{i}")
        async with PopConsumer("pmg", env.namesrv, ["PopM"], config=FAST_CONSUMER) as c:
            got = []
            while len(got) < 3:
                r = await c.pop("PopM", invisible_time_s=30.0, poll_time_s=1.0)
                got += r.messages
        s = await scrape(addr)
        assert value(s, "rocketmq_messages_out_total", topic="PopM", consumer_group="pmg") == 3
        assert (value(s, "rocketmq_throughput_out_total", topic="PopM") or 0) > 0
        assert value(s, "rocketmq_messages_in_total", topic="PopM", message_type="Normal") == 3
        assert value(s, "rocketmq_message_size_count", topic="PopM") == 3
        pops = value(
            s, "rocketmq_rpc_latency_count", request_code="POP_MESSAGE", response_code="SUCCESS"
        )
        assert pops is not None and pops >= 1
        # delayLevel -1: straight to the group's dead-letter topic.
        async with RemotingClient() as rc:
            await BrokerApi(rc).send_back(
                env.addr, got[0], group="pmg", delay_level=-1, max_reconsume_times=16
            )
        s = await scrape(addr)
        assert (
            value(s, "rocketmq_send_to_dlq_messages_total", topic="PopM", consumer_group="pmg") == 1
        )


@pytest.mark.timeout(60)
async def test_consumer_lag_inflight_ready_and_latencies(
    tmp_path: Path,
) -> None:
    """rocketmq_consumer_lag_latency: scrape time minus the store time of the message at the
    group's committed offset (bounded by wall-clock readings around the send and the scrape;
    no elapsed time is assumed); 0 once the group has committed everything."""
    import time

    from rmq_ha.client import Producer, PullConsumer
    from rmq_ha.client.api import BrokerApi
    from rmq_ha.config import MetricsExporterType as M
    from rmq_ha.net.client import RemotingClient
    from rmq_ha.protocol.models import MessageQueue
    from specialutil import special_cluster
    from test_client_cluster import FAST_CLIENT, FAST_PRODUCER, create_topic

    on = {
        "metrics_exporter_type": M.PROM,
        "metrics_prom_exporter_host": "127.0.0.1",
        "metrics_prom_exporter_port": 0,
    }
    async with special_cluster(tmp_path, **on) as env:
        addr = env.broker.metrics_address
        assert addr is not None
        await create_topic(env.namesrv, "LagT", queues=1)
        before_send = time.time_ns() // 1_000_000
        async with Producer("lp", env.namesrv, config=FAST_PRODUCER) as p:
            for i in range(3):
                await p.send("LagT", f"m{i}")
        after_send = time.time_ns() // 1_000_000
        mq = MessageQueue("LagT", env.cfg.broker_name, 0)
        async with RemotingClient() as rc:
            await BrokerApi(rc).update_consumer_offset(env.addr, "lg", mq, 1, oneway=False)
            before_scrape = time.time_ns() // 1_000_000
            s = await scrape(addr)
            after_scrape = time.time_ns() // 1_000_000
            assert (
                value(s, "rocketmq_consumer_lag_messages", topic="LagT", consumer_group="lg") == 2
            )
            age = value(s, "rocketmq_consumer_lag_latency", topic="LagT", consumer_group="lg")
            assert age is not None
            assert before_scrape - after_send <= age <= after_scrape - before_send, age
            # Before any pull: everything not committed is ready, nothing in flight.
            assert value(s, "rocketmq_consumer_inflight_messages", topic="LagT") == 0
            assert value(s, "rocketmq_consumer_ready_messages", topic="LagT") == 2
            # The group pulls one message at offset 1: one in flight, one ready, and the
            # queueing latency is the age of the message at offset 2.
            async with PullConsumer("lg", env.namesrv, config=FAST_CLIENT) as pc:
                got = await pc.pull(mq, "*", 1, 1)
            assert [m.queue_offset for m in got.messages] == [1]
            before_scrape = time.time_ns() // 1_000_000
            s = await scrape(addr)
            after_scrape = time.time_ns() // 1_000_000
            assert value(s, "rocketmq_consumer_inflight_messages", topic="LagT") == 1
            assert value(s, "rocketmq_consumer_ready_messages", topic="LagT") == 1
            wait = value(s, "rocketmq_consumer_queueing_latency", topic="LagT", consumer_group="lg")
            assert wait is not None
            assert before_scrape - after_send <= wait <= after_scrape - before_send, wait
            await BrokerApi(rc).update_consumer_offset(env.addr, "lg", mq, 3, oneway=False)
            s = await scrape(addr)
            assert value(s, "rocketmq_consumer_lag_latency", topic="LagT", consumer_group="lg") == 0
            assert value(s, "rocketmq_consumer_inflight_messages", topic="LagT") == 0
            assert value(s, "rocketmq_consumer_ready_messages", topic="LagT") == 0
            assert value(s, "rocketmq_consumer_queueing_latency", topic="LagT") == 0


@pytest.mark.timeout(60)
async def test_transactions_count_commits_and_rollbacks_by_real_topic(tmp_path: Path) -> None:
    from rmq_ha.client import LocalTransactionState, TransactionProducer
    from rmq_ha.config import MetricsExporterType as M
    from specialutil import special_cluster
    from test_client_cluster import FAST_PRODUCER, create_topic

    on = {
        "metrics_exporter_type": M.PROM,
        "metrics_prom_exporter_host": "127.0.0.1",
        "metrics_prom_exporter_port": 0,
    }

    def never_asked(msg: object) -> LocalTransactionState:
        raise AssertionError("no check expected")

    def execute(msg: object, arg: object) -> LocalTransactionState:
        assert isinstance(arg, LocalTransactionState)
        return arg

    async with special_cluster(tmp_path, **on) as env:
        addr = env.broker.metrics_address
        assert addr is not None
        await create_topic(env.namesrv, "TxM", queues=1)
        async with TransactionProducer("tpg", env.namesrv, never_asked, config=FAST_PRODUCER) as p:
            for state in (
                LocalTransactionState.COMMIT_MESSAGE,
                LocalTransactionState.COMMIT_MESSAGE,
                LocalTransactionState.ROLLBACK_MESSAGE,
            ):
                r = await p.send_message_in_transaction("TxM", b"x", execute, state)
                assert r.end_error is None
        s = await scrape(addr)
        assert value(s, "rocketmq_commit_messages_total", topic="TxM") == 2
        assert value(s, "rocketmq_rollback_messages_total", topic="TxM") == 1


def test_rates_count_per_second_over_their_windows() -> None:
    """putTps / getTransferredTps / a group's consumeTps: one-second buckets, a rate per
    window; old buckets leave (a fake clock, no waiting)."""
    now = [1000.0]
    t = Traffic(clock=lambda: now[0])
    t.put("T", "Normal", 30, 300)
    t.got("T", "g", 12, 120, queue_id=0, next_offset=12)
    now[0] = 1005.5
    t.put("T", "Normal", 10, 100)
    assert t.tps_text(t.put_rate) == "4.0 0.6666666666666666 0.06666666666666667"
    assert t.consume_tps("T", "g") == 12 / 60
    assert t.consume_tps("T", "other") == 0.0
    assert t.pulled[("T", "g", 0)] == 12
    now[0] = 1059.0  # the first second is still inside the last minute
    assert t.consume_tps("T", "g") == 12 / 60
    now[0] = 1060.0
    assert t.consume_tps("T", "g") == 0.0
    assert t.tps_text(t.got_rate) == "0.0 0.0 0.02"
    now[0] = 1700.0
    t.put("T", "Normal", 6, 60)
    assert t.tps_text(t.put_rate) == "0.6 0.1 0.01"
    assert len(t.put_rate.buckets) == 1, "buckets older than 10 minutes are dropped"


def test_stats_items_sum_the_last_minute_hour_and_day() -> None:
    """VIEW_BROKER_STATS_DATA's items: TOPIC_PUT_NUMS per topic, GROUP_GET_NUMS per
    topic@group, each summed over the last minute, hour and day (a fake clock)."""
    now = [10_000.0]
    t = Traffic(clock=lambda: now[0])
    t.put("T", "Normal", 5, 50)
    now[0] += 120
    t.put("T", "Normal", 7, 70)
    t.got("T", "g", 3, 30)
    put = t.stats_item("TOPIC_PUT_NUMS", "T")
    got = t.stats_item("GROUP_GET_NUMS", "T@g")
    assert put is not None and got is not None and t.stats_item("GROUP_GET_NUMS", "T@h") is None
    snap = put.snapshot(t.now_s())
    assert snap["minute"] == (7, 7 / 60)
    assert snap["hour"][0] == 12 and snap["day"][0] == 12
    assert got.snapshot(t.now_s())["day"] == (3, 3 / 86_400)
    now[0] += 2 * 3600
    snap = put.snapshot(t.now_s())
    assert (snap["minute"][0], snap["hour"][0], snap["day"][0]) == (0, 0, 12)
    now[0] += 25 * 3600
    assert put.snapshot(t.now_s())["day"][0] == 0


def test_request_codes_outside_the_registry_share_one_histogram() -> None:
    """A client may send any number of distinct unknown codes: a histogram each grew the broker
    without bound, and every scrape (on the broker's event loop) with it (probe: 40,000 codes,
    +63 MB, 8.8 s scrapes)."""
    from rmq_ha.broker.metrics import Traffic
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.codes import ResponseCode as Resp

    t = Traffic()
    for code in range(100_000, 140_000):
        t.answered(code, Resp.REQUEST_CODE_NOT_SUPPORTED, 0.1)
    t.answered_many(99_999, 123_456, 0.1, 5)  # an unknown response code too
    t.answered(RC.SEND_MESSAGE, Resp.SUCCESS, 0.1)
    assert len(t.rpc) == 3
    assert sum(sum(h.counts) for h in t.rpc.values()) == 40_006


def test_a_deleted_topic_or_group_leaves_no_counts_and_no_empty_producer_group() -> None:
    """A churned topic or group kept its traffic counts, a pull's stored subscription and, for
    producers, an empty group entry for ever (probe: 390 of 516 samples were of deleted topics
    or gone groups after 30 rounds)."""
    from types import SimpleNamespace

    from rmq_ha.broker.clients import ClientInfo, ClientManager
    from rmq_ha.broker.metrics import Traffic
    from rmq_ha.protocol.models import SubscriptionData

    t = Traffic()
    for topic, group in (("T1", "g1"), ("T2", "g2")):
        t.put(topic, "Normal", 3, 30)
        t.sized(topic, "Normal", [10, 10, 10])
        t.got(topic, group, 2, 20)
        t.pulled[(topic, group, 0)] = 5
        t.dlq[(topic, group)] = 1
        t.transactions[(topic, "commit")] = 1
    assert t.forget(topic="T1") > 0
    assert t.forget(group="g2") > 0
    every = [t.group_rate, t.outbound, t.dlq, t.pulled, t.inbound, t.sizes, t.transactions]
    assert not any(k[0] == "T1" for table in every for k in table)
    assert not any(len(k) > 1 and k[1] == "g2" for table in every for k in table)
    assert all(not k[1].startswith("T1") and not k[1].endswith("@g2") for k in t.stats)
    assert ("T2", "Normal") in t.inbound  # the other topic's own counts stay

    c = ClientManager()
    conn = SimpleNamespace(closed=False)
    for i in range(30):
        c.register_producer(f"p{i}", ClientInfo(f"c{i}", conn, 0, 0, 0))  # type: ignore[arg-type]
    for i in range(15):
        c.unregister(f"c{i}", f"p{i}", None, conn)  # type: ignore[arg-type]
    c.drop_connection(conn)  # type: ignore[arg-type]
    assert c.producers == {}
    c.compensate("g1", SubscriptionData(topic="T1"))
    c.compensate("g2", SubscriptionData(topic="T2"))
    assert c.forget(topic="T1") == 1 and c.forget(group="g2") == 1 and c.compensated == {}
