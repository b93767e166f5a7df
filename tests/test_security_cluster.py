"""Our Python client against a secured name server + broker: it signs with its credentials and
gets RocketMQ's refusals for a wrong secret, an unknown key, a denied topic or group, and an
admin operation from a non-admin account."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import trio

from rmq_ha.client import Admin, Producer, ProducerConfig, PullConsumer
from rmq_ha.errors import RmqHaError
from rmq_ha.security.signing import Credentials
from securityutil import ADMIN, USER, secure_cluster
from test_client_cluster import FAST_CLIENT

pytestmark = pytest.mark.timeout(60)


def producer_cfg(creds: Credentials | None) -> ProducerConfig:
    return ProducerConfig(
        client=replace(FAST_CLIENT, credentials=creds), retry_times_when_send_failed=0
    )


async def test_python_client_with_good_and_bad_credentials(tmp_path: Path) -> None:
    async with secure_cluster(tmp_path) as env:
        # The broker registered with the secured name server using the cluster credentials.
        async with Admin(env.namesrv, config=replace(FAST_CLIENT, credentials=ADMIN)) as admin:
            for t in ("T", "forbidden"):
                await admin.create_topic(t, cluster="DefaultCluster", wait_for_route_s=5.0)
        async with Admin(env.namesrv, config=replace(FAST_CLIENT, credentials=USER)) as admin:
            with pytest.raises(RmqHaError, match="Need admin permission"):
                await admin.create_topic("U", cluster="DefaultCluster", wait_for_route_s=1.0)

        async with Producer("pg", env.namesrv, config=producer_cfg(USER)) as p:
            r = await p.send("T", b"hello")
            assert r.ok
            with pytest.raises(RmqHaError, match="No permission for topic=forbidden"):
                await p.send("forbidden", b"x")
        for creds, reason in (
            (Credentials(USER.access_key, "wrong-secret"), "Check signature failed"),
            (Credentials("stranger", "whatever1"), "No acl config for stranger"),
            (None, "No accessKey is configured"),
        ):
            async with Producer("pg", env.namesrv, config=producer_cfg(creds)) as p:
                with pytest.raises(RmqHaError, match=reason):
                    with trio.fail_after(20):
                        await p.send("T", b"x")

        cfg = replace(FAST_CLIENT, credentials=USER)
        async with PullConsumer("cg", env.namesrv, config=cfg) as c:
            (mq, *_) = [
                q for q in await c.fetch_subscribe_queues("T") if q.queue_id == r.queue.queue_id
            ]
            got = await c.pull(mq, "*", r.queue_offset, 1)
            assert [m.body for m in got.messages] == [b"hello"]
        async with PullConsumer("banned", env.namesrv, config=cfg) as c:
            with pytest.raises(RmqHaError, match="No permission for group=banned"):
                await c.pull(mq, "*", 0, 1)
