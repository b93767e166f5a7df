"""The real Apache RocketMQ Go client (github.com/apache/rocketmq-client-go/v2, unmodified)
against each cluster implementation, in both header serializations. The Go client has no
DefaultMQPullConsumer equivalent; its pull consumer is the lite (poll/ack) one."""

from __future__ import annotations

from pathlib import Path

import pytest
import scenarios
from harness import Cluster, Names

CLIENT = "go"

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.parametrize("ser", ["JSON", "ROCKETMQ"]),
    pytest.mark.usefixtures("go_cli", "java_cli"),
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


def test_consume_lite_pull(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.lite_pull(CLIENT, live, tmp_path, names, ser)


def test_consume_failure_goes_to_retry(
    live: Cluster, tmp_path: Path, names: Names, ser: str
) -> None:
    scenarios.failures(CLIENT, live, tmp_path, names, ser)


def test_tag_filter(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.tag_filter(CLIENT, live, tmp_path, names, ser)


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


def test_java_produces_go_consumes(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.cross("java", "go", live, tmp_path, names, ser)


def test_go_produces_java_consumes(live: Cluster, tmp_path: Path, names: Names, ser: str) -> None:
    scenarios.cross("go", "java", live, tmp_path, names, ser)
