"""The real Java client (rocketmq-client 5.5.0 with rocketmq-acl's AclClientRPCHook, from Maven)
and the real Go client (rocketmq-client-go v2.1.2, its WithCredentials option) against an rmq_ha
broker with aclEnable: good credentials send and consume; a wrong secret, an unknown access key,
no credentials and a denied topic get RocketMQ's AclException answers."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Cluster, Names, run_client, start_rmq_ha

from securityutil import ACL_TEXT, ADMIN, INNER, USER

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("java") is None or shutil.which("mvn") is None,
        reason="needs java and mvn (the real rocketmq-client CLI)",
    ),
    pytest.mark.skipif(
        os.environ.get("RMQ_INTEROP_IMPL", "both").strip().lower() == "real",
        reason="an rmq_ha cluster with ACL (RMQ_INTEROP_IMPL=real)",
    ),
]


CLIENTS = [
    "java",
    pytest.param("go", marks=pytest.mark.skipif(shutil.which("go") is None, reason="needs go")),
]


def acl_lines(workdir: Path) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    acl = workdir / "plain_acl.yml"
    acl.write_text(ACL_TEXT)
    inner = f"innerClientAuthenticationCredentials={INNER}"
    return ["aclEnable=true", f"plainAclFile={acl}", inner]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("acl-cluster")
    cluster = start_rmq_ha(workdir, broker_conf=acl_lines(workdir))
    try:
        yield cluster
    finally:
        cluster.stop()


def creds(ak: str, sk: str) -> list[str]:
    return ["--access-key", ak, "--secret-key", sk]


def errors_of(run: object) -> str:
    return json.dumps(getattr(run, "data", {}).get("errors", []))


@pytest.mark.parametrize("client", CLIENTS)
def test_good_credentials_send_and_consume(
    client: str, secure: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    n = Names.for_test(request.node.name)
    sent = run_client(
        client, "send-sync", secure, tmp_path, topic=n.topic, group=n.group, count=10,
        serialize="JSON", extra=creds(USER.access_key, USER.secret_key),
    )  # fmt: skip
    assert len(sent.sent) == 10 and all(s["status"] == "SEND_OK" for s in sent.sent)
    got = run_client(
        client, "consume-lite-pull", secure, tmp_path, topic=n.topic, group=n.group, count=10,
        serialize="ROCKETMQ", extra=creds(USER.access_key, USER.secret_key),
    )  # fmt: skip
    assert sorted(r["body"] for r in got.received) == sorted(s["body"] for s in sent.sent)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("ak", "sk", "reason"),
    [
        (USER.access_key, "wrong-secret", "Check signature failed for accessKey=client01"),
        ("stranger", "whatever1", "No acl config for stranger"),
        (None, None, "No accessKey is configured"),
    ],
)
def test_bad_credentials_get_rocketmqs_answers(
    client: str,
    ak: str | None, sk: str | None, reason: str, secure: Cluster, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    n = Names.for_test(request.node.name)
    extra = creds(ak, sk) if ak and sk else []
    run = run_client(
        client, "send-sync", secure, tmp_path, topic=n.topic, group=n.group, count=2,
        serialize="JSON", extra=extra, timeout=40, check=False,
    )  # fmt: skip
    assert not run.sent or all(s.get("status") != "SEND_OK" for s in run.sent)
    assert reason in errors_of(run) and "AclException" in errors_of(run), run.describe()


def test_denied_topic_and_admin_operation(secure: Cluster, tmp_path: Path) -> None:
    run = run_client(
        "java", "send-sync", secure, tmp_path, topic="forbidden", group="G_forbidden", count=1,
        serialize="JSON", extra=creds(USER.access_key, USER.secret_key), timeout=40, check=False,
    )  # fmt: skip
    assert "No permission for topic=forbidden" in errors_of(run), run.describe()
    # the admin account may send anywhere
    ok = run_client(
        "java", "send-sync", secure, tmp_path, topic="forbidden", group="G_forbidden", count=1,
        serialize="JSON", extra=creds(ADMIN.access_key, ADMIN.secret_key),
    )  # fmt: skip
    assert [s["status"] for s in ok.sent] == ["SEND_OK"]
