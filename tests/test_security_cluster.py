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


async def test_controller_mode_group_with_acl_elects_and_replicates(tmp_path: Path) -> None:
    """The controller topology with ACL everywhere: a name server with its embedded controller
    and two controller-mode brokers, all on the cluster credentials (registration, broker ids,
    heartbeats, election, SyncStateSet, HA); a client with an account sends and the slave
    catches up, and nobody else can act as the cluster."""
    from rmq_jepsen.bench.cluster import FAST_BROKER

    from controllerutil import controller_config, free_ports
    from rmq_ha import config
    from rmq_ha.broker.broker import open_broker
    from rmq_ha.config import NamesrvConfig
    from rmq_ha.nameserver.server import Nameserver
    from securityutil import ACL_TEXT, INNER

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_TEXT)
    sec = {
        "aclEnable": "true",
        "plainAclFile": str(acl),
        "innerClientAuthenticationCredentials": INNER,
    }
    (port,) = free_ports(1)
    ccfg = controller_config([port], 0, tmp_path / "ctl", **sec)
    ns_cfg, _ = config.from_mapping(
        NamesrvConfig, {"listenPort": port, "enableControllerInNamesrv": "true", **sec}
    )
    async with trio.open_nursery() as n:
        ns = Nameserver(ns_cfg, controller_cfg=ccfg)
        await n.start(ns.serve)

        def broker(i: int) -> config.BrokerConfig:
            cfg, unknown = config.from_mapping(
                config.BrokerConfig,
                {
                    **FAST_BROKER,
                    **sec,
                    "listenPort": 0,
                    "brokerId": -1,
                    "enableControllerMode": "true",
                    "controllerAddr": ns.address,
                    "namesrvAddr": ns.address,
                    "storePathRootDir": str(tmp_path / f"b{i}"),
                },
            )
            assert not unknown
            return cfg

        async with open_broker(broker(0)) as b0, open_broker(broker(1)) as b1:
            with trio.fail_after(30):
                while not (b0.core.is_master or b1.core.is_master):
                    await trio.sleep(0.05)
            master, slave = (b0, b1) if b0.core.is_master else (b1, b0)
            cfg = ProducerConfig(client=replace(FAST_CLIENT, credentials=USER))
            async with Producer("pg", ns.address, config=cfg) as p:
                with trio.fail_after(30):
                    while True:
                        try:
                            r = await p.send("TBW102", b"secured")
                            break
                        except RmqHaError:
                            await trio.sleep(0.1)  # until the route names the master
                assert r.ok
            with trio.fail_after(30):
                while slave.store.native.max_offset < master.store.native.max_offset:
                    await trio.sleep(0.05)
            assert ns.controller is not None
            guard = ns.dispatcher.guard
            assert guard is not None and guard.refused_cluster == 0  # the cluster got through
        n.cancel_scope.cancel()


async def test_rmq_ha_admin_with_credentials(tmp_path: Path) -> None:
    import argparse

    from rmq_ha import storeadmin
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.codes import ResponseCode as Resp

    parser = argparse.ArgumentParser()
    storeadmin.add_parsers(parser.add_subparsers())

    def args(cmd: str, creds: Credentials | None) -> argparse.Namespace:
        extra = [] if creds is None else ["--access-key", creds.access_key]
        extra += [] if creds is None else ["--secret-key", creds.secret_key]
        return parser.parse_args([cmd, "-b", "x:1", *extra])

    async with secure_cluster(tmp_path) as env:
        health, delete = RC.RMQHA_STORE_HEALTH, RC.DELETE_EXPIRED_COMMITLOG
        r = await storeadmin._invoke(env.broker, health, 5, args("store-health", None))
        assert r.code == Resp.SYSTEM_ERROR and "No accessKey" in (r.remark or "")
        r = await storeadmin._invoke(env.broker, health, 5, args("store-health", USER))
        assert r.code == Resp.SUCCESS
        r = await storeadmin._invoke(env.broker, delete, 5, args("delete-expired", USER))
        assert r.code == Resp.SYSTEM_ERROR and "Need admin permission" in (r.remark or "")
        r = await storeadmin._invoke(env.broker, delete, 5, args("delete-expired", ADMIN))
        assert r.code == Resp.SUCCESS


async def test_mqadmin_with_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`rmq-ha mqadmin` signs with --access-key/--secret-key (or $RMQ_HA_ACCESS_KEY/...):
    refused without them, allowed for a user's reads, admin-only changes need the admin."""
    import io
    import json

    from rmq_ha import mqadmin

    async def run(*argv: str) -> tuple[int, str]:
        buf = io.StringIO()
        rc = await mqadmin.main_async([*argv, "--json"], buf)
        return rc, buf.getvalue()

    def creds(c: Credentials) -> list[str]:
        return ["--access-key", c.access_key, "--secret-key", c.secret_key]

    async with secure_cluster(tmp_path) as env:
        rc, _ = await run("updateTopic", "-n", env.namesrv, "-b", env.broker, "-t", "SecT")
        assert rc == 1 and "No accessKey" in capsys.readouterr().err
        rc, _ = await run(
            "updateTopic", "-n", env.namesrv, "-b", env.broker, "-t", "SecT", *creds(USER)
        )
        assert rc == 1 and "Need admin permission" in capsys.readouterr().err
        rc, out = await run(
            "updateTopic", "-n", env.namesrv, "-b", env.broker, "-t", "SecT", *creds(ADMIN)
        )
        assert rc == 0, capsys.readouterr().err
        rc, out = await run("topicStatus", "-n", env.namesrv, "-t", "SecT", *creds(USER))
        assert rc == 0 and json.loads(out), capsys.readouterr().err
        rc, _ = await run("topicStatus", "-n", env.namesrv, "-t", "SecT", "--access-key", "x")
        assert rc == 1 and "--secret-key" in capsys.readouterr().err
