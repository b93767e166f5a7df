"""ACL on the real roles over loopback: the name server, a 3-node controller group (its Raft
traffic signed with the cluster credentials) and a broker. Every inner request sent unsigned,
forged, replayed with another body, or signed by a non-admin account is refused with RocketMQ's
answer and changes nothing (routes, controller metadata, SyncStateSet read back unchanged)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from controllerutil import controller_config, free_ports, wait_leader
from rmq_ha.config import NamesrvConfig
from rmq_ha.controller import messages as m
from rmq_ha.controller import wire
from rmq_ha.controller.client import ControllerClient
from rmq_ha.controller.role import ControllerNode
from rmq_ha.controller.testbroker import TestBroker
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.security.signing import SIGNATURE, Credentials, request_signer, sign_fields
from test_nameserver import register_cmd

pytestmark = pytest.mark.timeout(60)

ADMIN = Credentials("clusterAdmin", "cluster-secret-1")
USER = Credentials("client01", "client-secret-1")
FORGED = Credentials("clusterAdmin", "not-the-secret")
INNER = json.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})


def write_acl(path: Path, *, user: bool = True) -> Path:
    accounts = [
        f"  - accessKey: {ADMIN.access_key}\n    secretKey: {ADMIN.secret_key}\n    admin: true\n"
    ]
    if user:
        accounts.append(
            f"  - accessKey: {USER.access_key}\n    secretKey: {USER.secret_key}\n"
            "    defaultTopicPerm: PUB|SUB\n    defaultGroupPerm: SUB\n"
            "    topicPerms: [secret=DENY]\n"
        )
    path.write_text("accounts:\n" + "".join(accounts))
    return path


def signed(cmd: RemotingCommand, creds: Credentials) -> RemotingCommand:
    cmd.ext_fields = sign_fields(dict(cmd.ext_fields), cmd.body, creds)
    return cmd


def refused(resp: RemotingCommand, reason: str) -> bool:
    return resp.code == Code.SYSTEM_ERROR and reason in (resp.remark or "")


# ---- name server -----------------------------------------------------------------------------


async def routes(c: RemotingClient, addr: str, topic: str) -> int:
    q = signed(RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), USER)
    return (await c.invoke(addr, q)).code


async def test_name_server_refuses_unauthenticated_registration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    acl = write_acl(tmp_path / "plain_acl.yml")
    cfg = NamesrvConfig(listen_port=0, acl_enable=True, plain_acl_file=str(acl))
    async with trio.open_nursery() as n, RemotingClient() as c:
        ns = Nameserver(cfg)
        await n.start(ns.serve)
        a = ns.address
        bad = [
            (register_cmd("127.0.0.1:10911", 0, ["T"]), "No accessKey is configured"),
            (signed(register_cmd("127.0.0.1:10911", 0, ["T"]), FORGED), "Check signature failed"),
            (signed(register_cmd("127.0.0.1:10911", 0, ["T"]), USER), "Need admin permission"),
            (
                signed(
                    register_cmd("127.0.0.1:10911", 0, ["T"]), Credentials("stranger", "whatever")
                ),
                "No acl config for stranger",
            ),
        ]
        for cmd, reason in bad:
            resp = await c.invoke(a, cmd)
            assert refused(resp, reason), (reason, resp.code, resp.remark)
        # a replayed admin registration with another body (another topic)
        good = signed(register_cmd("127.0.0.1:10911", 0, ["T"]), ADMIN)
        other = register_cmd("127.0.0.1:10911", 0, ["EVIL"])
        replay = RemotingCommand.request(RC.REGISTER_BROKER, dict(good.ext_fields), other.body)
        assert refused(await c.invoke(a, replay), "Check signature failed")
        assert ns.routes.topics == {}
        assert await routes(c, a, "T") == Code.TOPIC_NOT_EXIST
        assert await routes(c, a, "EVIL") == Code.TOPIC_NOT_EXIST
        assert ns.dispatcher.guard is not None and ns.dispatcher.guard.refused_cluster == 5
        # the real one goes through, and the same bytes may be sent again (no nonce)
        assert (await c.invoke(a, good)).code == Code.SUCCESS
        assert await routes(c, a, "T") == Code.SUCCESS
        # reads need an account too; a denied topic is denied
        unsigned = RemotingCommand.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        assert refused(await c.invoke(a, unsigned), "No accessKey")
        assert await routes(c, a, "secret") == Code.SYSTEM_ERROR
        n.cancel_scope.cancel()
    # refusals are logged, secrets and signatures never
    assert "refused cluster request code 103" in caplog.text
    for s in (ADMIN.secret_key, USER.secret_key, FORGED.secret_key, good.ext_fields[SIGNATURE]):
        assert s not in caplog.text


async def test_acl_file_is_reloaded_and_a_bad_file_keeps_the_last(tmp_path: Path) -> None:
    acl = write_acl(tmp_path / "plain_acl.yml")
    cfg = NamesrvConfig(
        listen_port=0, acl_enable=True, plain_acl_file=str(acl), acl_watch_interval_ms=1
    )
    async with trio.open_nursery() as n, RemotingClient() as c:
        ns = Nameserver(cfg)
        await n.start(ns.serve)
        assert await routes(c, ns.address, "T") == Code.TOPIC_NOT_EXIST  # the user is known
        acl.write_text("accounts: [ {broken")
        guard = ns.dispatcher.guard
        assert guard is not None
        assert not guard.reload_if_changed()  # logged, the last good config stays
        assert await routes(c, ns.address, "T") == Code.TOPIC_NOT_EXIST
        write_acl(acl, user=False)
        with trio.fail_after(10):  # the next request after the interval looks at the file
            while await routes(c, ns.address, "T") != Code.SYSTEM_ERROR:
                await trio.sleep(0.01)
        assert guard.reloads == 1
        n.cancel_scope.cancel()


# ---- controller group ------------------------------------------------------------------------


@asynccontextmanager
async def secure_group(tmp_path: Path) -> AsyncIterator[tuple[list[ControllerNode], list[str]]]:
    acl = write_acl(tmp_path / "plain_acl.yml")
    extra = {
        "aclEnable": "true",
        "plainAclFile": str(acl),
        "innerClientAuthenticationCredentials": INNER,
    }
    ports = free_ports(3)
    nodes = [
        ControllerNode(controller_config(ports, i, tmp_path / f"c{i}", **extra)) for i in range(3)
    ]
    async with trio.open_nursery() as nursery:
        for node in nodes:
            await nursery.start(node.run)
        yield nodes, [x.address for x in nodes]
        nursery.cancel_scope.cancel()


async def test_controller_refuses_forged_inner_requests_and_nothing_changes(
    tmp_path: Path,
) -> None:
    async with (
        secure_group(tmp_path) as (nodes, addrs),
        RemotingClient(signer=request_signer(ADMIN)) as admin,
        RemotingClient() as attacker,
        trio.open_nursery() as nursery,
    ):
        # Raft itself runs with the cluster credentials: a leader is elected.
        cc = ControllerClient(admin, addrs)
        await wait_leader(cc)
        bs = [TestBroker(addrs, "broker-a", heartbeat_timeout_ms=60_000) for _ in range(2)]
        for b in bs:
            b.client.signer = request_signer(ADMIN)
            await nursery.start(b.run)
            await b.join()
        first = await bs[0].elect()
        assert first.code == Code.SUCCESS and first.master_broker_id == 1

        async def snapshot() -> tuple[object, ...]:
            info = await cc.request(m.GetReplicaInfoRequest("broker-a"))
            ssd = await cc.request(m.GetSyncStateDataRequest(("broker-a",)))
            leader = await cc.find_leader()
            return (repr(info), repr(ssd), leader)

        before = await snapshot()
        leader = await cc.find_leader()
        attacks = [
            m.ElectMasterRequest.of_admin_trigger("DefaultCluster", "broker-a", 2),
            m.ElectMasterRequest.of_broker_trigger("DefaultCluster", "broker-a", 2),
            m.AlterSyncStateSetRequest("broker-a", 1, 1, frozenset({1, 2}), 1),
            m.ApplyBrokerIdRequest("DefaultCluster", "broker-a", 3, "127.0.0.1:1;1"),
            m.RegisterBrokerRequest("DefaultCluster", "broker-a", 3, "127.0.0.1:1"),
            m.GetNextBrokerIdRequest("DefaultCluster", "broker-a"),
            m.CleanBrokerDataRequest("DefaultCluster", "broker-a", "1;2", True),
        ]
        for req in attacks:
            for creds, reason in (
                (None, "No accessKey is configured"),
                (FORGED, "Check signature failed"),
                (USER, "Need admin permission"),
            ):
                cmd = wire.request_command(req)
                if creds is not None:
                    signed(cmd, creds)
                resp = await attacker.invoke(leader, cmd)
                assert refused(resp, reason), (req, reason, resp.code, resp.remark)
        # a forged heartbeat (it would keep a dead master "alive" and so stop a failover)
        ext = bs[0].heartbeat_header().to_ext()
        for creds in (None, FORGED, USER):
            cmd = RemotingCommand.request(RC.BROKER_HEARTBEAT, ext)
            if creds is not None:
                signed(cmd, creds)
            assert (await attacker.invoke(leader, cmd)).code == Code.SYSTEM_ERROR
        # a replay of a good, signed request with a changed body
        good = signed(wire.request_command(attacks[2]), ADMIN)
        changed = RemotingCommand.request(good.code, dict(good.ext_fields), b'{"x":1}')
        assert refused(await attacker.invoke(leader, changed), "Check signature failed")
        # forged Raft traffic to every node
        for addr in addrs:
            raft = RemotingCommand.request(RC.RMQHA_RAFT_MESSAGE, None, b"\x00" * 16)
            assert refused(await attacker.invoke(addr, raft), "No accessKey")
            raft = signed(RemotingCommand.request(RC.RMQHA_RAFT_MESSAGE, None, b"x"), FORGED)
            assert refused(await attacker.invoke(addr, raft), "Check signature failed")
        assert await snapshot() == before
        assert sum(n.dispatcher.guard.refused_cluster for n in nodes if n.dispatcher.guard) >= 24
        nursery.cancel_scope.cancel()


async def test_roles_refuse_a_bad_acl_config(tmp_path: Path) -> None:
    from rmq_ha.errors import ConfigError
    from rmq_ha.security.acl import AclConfigError

    with pytest.raises(ConfigError, match="plainAclFile: required"):
        from rmq_ha import config

        config.from_mapping(config.NamesrvConfig, {"aclEnable": "true"})
    with pytest.raises(ConfigError, match="innerClientAuthenticationCredentials"):
        config.from_mapping(
            config.BrokerConfig, {"innerClientAuthenticationCredentials": '{"accessKey": 1}'}
        )
    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts: [{accessKey: ab, secretKey: '12345678'}]")
    with pytest.raises(AclConfigError, match="accessKey must be at least 6"):
        Nameserver(replace(NamesrvConfig(listen_port=0), acl_enable=True, plain_acl_file=str(bad)))


# ---- every registered code is classified -----------------------------------------------------


async def test_every_code_the_roles_register_is_in_the_table(tmp_path: Path) -> None:
    """A new handler cannot slip through unclassified: the name server (with an embedded
    controller), a controller and a broker register only codes the rules table knows."""
    from rmq_ha.broker.broker import open_broker
    from rmq_ha.config import BrokerConfig
    from rmq_ha.security.rules import RULES

    ports = free_ports(1)
    ccfg = controller_config(ports, 0, tmp_path / "c")
    ns = Nameserver(
        NamesrvConfig(listen_port=ports[0], enable_controller_in_namesrv=True), controller_cfg=ccfg
    )
    codes = {"namesrv+controller": set(ns.dispatcher.codes())}
    codes["controller"] = set(ControllerNode(ccfg).dispatcher.codes())
    cfg = BrokerConfig(listen_port=0, store_path_root_dir=str(tmp_path / "b"), namesrv_addr="")
    async with open_broker(cfg) as node:
        codes["broker"] = set(node.dispatcher.codes())
    for role, registered in codes.items():
        assert registered, role
        missing = sorted(c for c in registered if c not in RULES)
        assert not missing, f"{role} registers codes the ACL table does not classify: {missing}"


async def test_controller_admin_cli_with_and_without_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from rmq_ha.controller import admin as cli

    parser = argparse.ArgumentParser()
    cli.controller_admin_parsers(parser.add_subparsers())

    async def main(argv: list[str]) -> int:  # as cli.run, inside this test's event loop
        return await cli._main(parser.parse_args(argv))

    async with (
        secure_group(tmp_path) as (_nodes, addrs),
        RemotingClient(signer=request_signer(ADMIN)) as c,
    ):
        await wait_leader(ControllerClient(c, addrs))
        a = ";".join(addrs)
        elect = ["elect-master", "-a", a, "-b", "broker-a", "-i", "1", "--json"]
        assert await main(elect) != 0  # unsigned: refused
        assert "No accessKey is configured" in capsys.readouterr().err
        user = ["--access-key", USER.access_key, "--secret-key", USER.secret_key]
        assert await main([*elect, *user]) != 0
        assert "Need admin permission" in capsys.readouterr().out
        # a read with any account; the secret from the environment
        monkeypatch.setenv("RMQ_HA_SECRET_KEY", USER.secret_key)
        meta = ["get-controller-metadata", "-a", a, "--access-key", USER.access_key]
        assert await main(meta) == 0
        assert "leader" in capsys.readouterr().out.lower()
        half = ["get-controller-metadata", "-a", a, "--secret-key", "x"]
        monkeypatch.delenv("RMQ_HA_SECRET_KEY")
        assert await main(half) == 2
        assert "--access-key" in capsys.readouterr().err
