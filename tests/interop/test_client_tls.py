"""The real Java client with TLS (-Dtls.enable=true: rocketmq-client's own switch) against an
rmq_ha broker enforcing TLS (and a permissive name server); without TLS it is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Cluster, Names, run_client, start_rmq_ha

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("java") is None or shutil.which("mvn") is None,
        reason="needs java and mvn (the real rocketmq-client CLI)",
    ),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for test certs"),
    pytest.mark.skipif(
        os.environ.get("RMQ_INTEROP_IMPL", "both").strip().lower() == "real",
        reason="an rmq_ha cluster with TLS (RMQ_INTEROP_IMPL=real)",
    ),
]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_test_certs.sh"


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    certs = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", str(SCRIPT), str(certs)], check=True, capture_output=True, timeout=120)
    server = [
        f"tls.server.certPath={certs / 'server.pem'}",
        f"tls.server.keyPath={certs / 'server.key'}",
    ]
    cluster = start_rmq_ha(
        tmp_path_factory.mktemp("tls-cluster"),
        namesrv_conf=["tls.server.mode=permissive", *server],
        broker_conf=[
            "tls.server.mode=enforcing",
            *server,
            "tlsEnable=true",  # the broker's registration goes over TLS too, verified
            f"tls.client.trustCertPath={certs / 'ca.pem'}",
        ],
    )
    try:
        yield cluster
    finally:
        cluster.stop()


def test_java_client_over_tls(
    tls_cluster: Cluster,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = Names.for_test(request.node.name)
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dtls.enable=true")
    sent = run_client(
        "java", "send-sync", tls_cluster, tmp_path, topic=n.topic, group=n.group, count=10,
        serialize="JSON",
    )  # fmt: skip
    assert [s["status"] for s in sent.sent] == ["SEND_OK"] * 10
    got = run_client(
        "java", "consume-lite-pull", tls_cluster, tmp_path, topic=n.topic, group=n.group,
        count=10, serialize="ROCKETMQ",
    )  # fmt: skip
    assert sorted(r["body"] for r in got.received) == sorted(s["body"] for s in sent.sent)


def test_java_client_without_tls_is_refused_by_the_broker(
    tls_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    n = Names.for_test(request.node.name)
    run = run_client(
        "java", "send-sync", tls_cluster, tmp_path, topic=n.topic, group=n.group, count=1,
        serialize="JSON", timeout=30, check=False,
    )  # fmt: skip
    assert not any(s.get("status") == "SEND_OK" for s in run.sent), run.describe()
    assert run.data.get("errors"), run.describe()
