"""The real Apache RocketMQ Java client (org.apache.rocketmq:rocketmq-client 5.x, remoting
protocol, unmodified) against each cluster implementation, in both header serializations."""

from __future__ import annotations

from pathlib import Path

import pytest
import scenarios
from harness import Cluster, Names

CLIENT = "java"

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.parametrize("ser", ["JSON", "ROCKETMQ"]),
    pytest.mark.usefixtures("java_cli"),
]


def test_send_sync_consume_push(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.send_then_push(CLIENT, "send-sync", live, tmp_path, names, ser)


def test_send_async_consume_push(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.send_then_push(CLIENT, "send-async", live, tmp_path, names, ser)


def test_send_oneway(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.oneway(CLIENT, live, tmp_path, names, ser)


def test_send_batch(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.batch(CLIENT, live, tmp_path, names, ser)


def test_orderly(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.orderly(CLIENT, live, tmp_path, names, ser)


def test_consume_pull(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.pull(CLIENT, live, tmp_path, names, ser)


def test_consume_lite_pull(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.lite_pull(CLIENT, live, tmp_path, names, ser)


def test_consume_failure_goes_to_retry(
    live: Cluster, tmp_path: Path, names: Names, ser: str
) -> None:
    scenarios.failures(CLIENT, live, tmp_path, names, ser)


def test_tag_filter(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.tag_filter(CLIENT, live, tmp_path, names, ser)


def test_broadcast_consumers_each_get_everything(
    live: Cluster, tmp_path: Path, names: Names, ser: str
) -> None:
    scenarios.broadcast(CLIENT, live, tmp_path, names, ser)


@pytest.mark.parametrize("mode", ["PULL", "POP"])
def test_server_side_rebalance(
    live: Cluster, tmp_path: Path, names: Names, ser: str, mode: str
) -> None:
    if mode == "POP" and ser == "ROCKETMQ":
        pytest.skip(
            "the 5.5.0 client's push consumer in pop mode with ROCKETMQ header serialization "
            "consumes nothing against real RocketMQ 5.5.0 either (measured): a client limit"
        )
    scenarios.server_rebalance("java", live, tmp_path, names, ser, mode)


def test_request_reply(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.request_reply(CLIENT, live, tmp_path, names, ser)


def test_offset_resume(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.offset_resume(CLIENT, live, tmp_path, names, ser)


def test_route(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.route(CLIENT, live, tmp_path, names, ser)


def test_large_compressed_bodies(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.large_bodies(CLIENT, live, tmp_path, names, ser)


def test_wire_serialization(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.wire(CLIENT, live, tmp_path, names, ser)


def test_delayed_message(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.delayed(CLIENT, live, tmp_path, names, ser)


def test_transaction_producer(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.transaction(CLIENT, live, tmp_path, names, ser)


def test_sql92_selector_is_refused_at_start(
    live: Cluster, tmp_path: Path, names: Names, ser: str
) -> None:
    scenarios.sql92_refused(CLIENT, live, tmp_path, names, ser)


def test_sql92_selector_with_property_filters_on(
    filter_cluster: Cluster, tmp_path: Path, names: Names, ser: str
) -> None:
    scenarios.sql92_filter(CLIENT, filter_cluster, tmp_path, names, ser)


def test_message_trace(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.trace(CLIENT, live, tmp_path, names, ser)


def test_consume_orderly_dlq(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.orderly_dlq(CLIENT, live, tmp_path, names, ser)
