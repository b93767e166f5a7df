"""The controller role in one process: three ControllerNodes on loopback, a test broker.

Real sockets and the real Raft driver, short timings (tests/controllerutil.FAST)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from controllerutil import controller_config, free_ports, wait_for, wait_leader
from rmq_ha import config
from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient
from rmq_ha.controller.elect import BrokerLiveInfo
from rmq_ha.controller.events import ApplyBrokerIdEvent, encode_events
from rmq_ha.controller.heartbeat import HeartbeatTable
from rmq_ha.controller.role import ControllerNode, ControllerStateMachine
from rmq_ha.controller.testbroker import TestBroker
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import BrokerHeartbeatRequestHeader, GetMetaDataResponseHeader

pytestmark = pytest.mark.timeout(60)


class Group:
    def __init__(self, nodes: list[ControllerNode], client: RemotingClient) -> None:
        self.nodes = nodes
        self.addrs = [n.address for n in nodes]
        self.client = client
        self.cc = ControllerClient(client, self.addrs)
        self.scopes = {id(n): trio.CancelScope() for n in nodes}
        self.crashed: set[int] = set()

    async def _run(self, node: ControllerNode, *, task_status: trio.TaskStatus[str]) -> None:
        with self.scopes[id(node)]:
            await node.run(task_status=task_status)

    def crash(self, node: ControllerNode) -> None:
        """Stops the node at once (its sockets close), as a crash looks to the others."""
        self.crashed.add(id(node))
        self.scopes[id(node)].cancel()

    def running(self) -> list[ControllerNode]:
        return [n for n in self.nodes if id(n) not in self.crashed]

    def leader(self) -> ControllerNode:
        (node,) = [n for n in self.running() if n.driver.serving]
        return node

    def followers(self) -> list[ControllerNode]:
        return [n for n in self.running() if not n.driver.serving]


@asynccontextmanager
async def group(tmp_path: Path, **extra: object) -> AsyncIterator[Group]:
    ports = free_ports(3)
    nodes = [ControllerNode(controller_config(ports, i, tmp_path, **extra)) for i in range(3)]
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        g = Group(nodes, client)
        for node in nodes:
            await nursery.start(g._run, node)
        await wait_leader(g.cc)
        yield g
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def brokers(g: Group, n: int, name: str = "broker-a") -> AsyncIterator[list[TestBroker]]:
    bs = [TestBroker(g.addrs, name, heartbeat_timeout_ms=1500) for _ in range(n)]
    async with trio.open_nursery() as nursery:
        for b in bs:
            await nursery.start(b.run)
            await b.join()
            b.start_heartbeats(0.1)
        yield bs
        nursery.cancel_scope.cancel()


def new_master_notice(b: TestBroker, master: int) -> bool:
    return any(h.master_broker_id == master for h, _ in b.notices)


async def test_a_leader_serves_and_every_node_names_it(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        leader = g.leader()
        for addr in g.addrs:
            meta = await g.cc.metadata(addr)
            assert meta.controller_leader_id == leader.node_id
            assert meta.controller_leader_address == leader.address
            assert meta.is_leader == (addr == leader.address)
            assert meta.group == "test-group"
            assert meta.peers == "".join(f"n{i}:{a};" for i, a in enumerate(g.addrs))


async def test_a_follower_answers_not_leader_with_the_leaders_address(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        leader, follower = g.leader(), g.followers()[0]
        req = m.GetNextBrokerIdRequest("DefaultCluster", "broker-a")
        from rmq_ha.controller import wire

        resp = await g.client.invoke(follower.address, wire.request_command(req))
        assert resp.code == Code.CONTROLLER_NOT_LEADER
        assert "not in leader state" in (resp.remark or "")
        meta = GetMetaDataResponseHeader.from_ext(resp.ext_fields)
        assert meta.controller_leader_address == leader.address and not meta.is_leader


async def test_broker_join_elect_and_sync_state_set(tmp_path: Path) -> None:
    async with group(tmp_path) as g, brokers(g, 2) as (b1, b2):
        assert (b1.broker_id, b2.broker_id) == (1, 2)
        first = await b1.elect()
        assert first.code == Code.SUCCESS and first.master_broker_id == 1
        assert first.broker_addrs == {1: b1.address, 2: b2.address}
        again = await b2.elect()
        assert again.code == Code.CONTROLLER_MASTER_STILL_EXIST and again.master_broker_id == 1
        epochs = (first.master_epoch or 0, first.sync_state_set_epoch or 0)
        alter = m.AlterSyncStateSetRequest("broker-a", 1, epochs[0], frozenset({1, 2}), epochs[1])
        altered = await b1.request(alter)
        assert altered.ok and altered.sync_state_set == {1, 2}
        data = await g.cc.request(m.GetSyncStateDataRequest(("broker-a",)))
        info = data.replicas_info["broker-a"]
        assert info.master_broker_id == 1 and info.master_address == b1.address
        assert [r.broker_id for r in info.in_sync_replicas] == [1, 2]
        assert all(r.alive for r in info.in_sync_replicas)
        # Every node applied the same events.
        await wait_for(lambda: all(n.state == g.leader().state for n in g.nodes), 5, "replicas")


async def test_master_connection_loss_elects_the_other_and_notifies_it(tmp_path: Path) -> None:
    async with group(tmp_path) as g, brokers(g, 2) as (b1, b2):
        first = await b1.elect()
        await b1.request(m.AlterSyncStateSetRequest("broker-a", 1, first.master_epoch or 0,
                                                    frozenset({1, 2}), 1))  # fmt: skip
        b1.stop()  # its connections close: every controller drops it at once
        await wait_for(lambda: new_master_notice(b2, 2), 10, "a role-change notice")
        header, body = b2.notices[-1]
        assert header.master_broker_id == 2 and header.master_address == b2.address
        assert header.master_epoch == (first.master_epoch or 0) + 1
        assert body.sync_state_set == {2}
        info = await b2.replica_info()
        assert info.master_broker_id == 2


async def test_a_master_that_reconnects_at_once_is_not_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its connections to the controllers close (the broker lives and keeps beating): each
    controller waits half its heartbeat timeout for a heartbeat on a new connection before
    dropping it. A fault probe saw live masters deposed this way with no fault in force."""
    caplog.set_level(logging.INFO, logger="rmq_ha.controller.role")
    async with group(tmp_path) as g, brokers(g, 2) as (b1, b2):
        first = await b1.elect()
        await b1.request(m.AlterSyncStateSetRequest("broker-a", 1, first.master_epoch or 0,
                                                    frozenset({1, 2}), 1))  # fmt: skip
        handled = {id(n): n.closed_connections_handled for n in g.nodes}
        for addr in g.addrs:
            b1.client.close_connection(addr)
        # every controller saw b1's connection close and dealt with it, after its grace
        await wait_for(
            lambda: all(n.closed_connections_handled > handled[id(n)] for n in g.nodes),
            10,
            "each controller to handle the closed connection",
        )
        info = await b2.replica_info()
        assert (info.master_broker_id, info.master_epoch) == (1, first.master_epoch)
        assert not new_master_notice(b2, 2)
        # the operator sees what happened
        assert "heartbeated again on another" in caplog.text


async def test_expired_heartbeat_of_the_master_triggers_an_election(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        b1, b2 = TestBroker(g.addrs, heartbeat_timeout_ms=400), TestBroker(g.addrs)
        async with trio.open_nursery() as nursery:
            for b in (b1, b2):
                await nursery.start(b.run)
                await b.join()
            b2.start_heartbeats(0.1)
            first = await b1.elect()
            await b1.request(m.AlterSyncStateSetRequest("broker-a", 1, first.master_epoch or 0,
                                                        frozenset({1, 2}), 1))  # fmt: skip
            # b1 stays connected but goes silent: only the heartbeat timeout tells.
            await wait_for(lambda: new_master_notice(b2, 2), 10, "a role-change notice")
            nursery.cancel_scope.cancel()


async def test_leader_failover_keeps_metadata_and_serves(tmp_path: Path) -> None:
    async with group(tmp_path) as g, brokers(g, 1) as (b1,):
        await b1.elect()
        old = g.leader()
        state = old.state.snapshot()
        g.crash(old)
        await wait_for(lambda: [n for n in g.running() if n.driver.serving], 10, "a new leader")
        info = await b1.replica_info()
        assert info.ok and info.master_broker_id == 1
        assert g.leader().state.snapshot() == state


async def test_racing_applies_of_one_id_let_exactly_one_win(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        results: list[m.ApplyBrokerIdResponse] = []

        async def apply(addr: str) -> None:
            req = m.ApplyBrokerIdRequest("c", "broker-x", 1, f"{addr};1")
            results.append(await g.cc.request(req))

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(apply, f"127.0.0.1:{1000 + i}")
        codes = sorted(r.code for r in results)
        assert codes.count(Code.SUCCESS) == 1
        assert codes.count(Code.CONTROLLER_BROKER_ID_INVALID) == 3


async def test_heartbeat_without_broker_id_is_invalid(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        h = BrokerHeartbeatRequestHeader(cluster_name="c", broker_addr="a:1", broker_name="b")
        cmd = RemotingCommand.request(RC.BROKER_HEARTBEAT, h.to_ext())
        resp = await g.client.invoke(g.addrs[0], cmd)
        assert resp.code == Code.CONTROLLER_INVALID_REQUEST


async def test_malformed_requests_get_clear_codes(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        leader = g.leader().address
        no_id = RemotingCommand.request(RC.CONTROLLER_APPLY_BROKER_ID, {"brokerName": "b"})
        resp = await g.client.invoke(leader, no_id)
        assert resp.code == Code.CONTROLLER_INVALID_REQUEST and "appliedBrokerId" in resp.remark
        bad = RemotingCommand.request(RC.CONTROLLER_ALTER_SYNC_STATE_SET,
                                      {"brokerName": "b", "masterBrokerId": "1",
                                       "masterEpoch": "1"}, b"[not json")  # fmt: skip
        resp = await g.client.invoke(leader, bad)
        assert resp.code == Code.CONTROLLER_INVALID_REQUEST
        typo = RemotingCommand.request(RC.CONTROLLER_GET_NEXT_BROKER_ID,
                                       {"brokerName": "b"})  # fmt: skip
        assert (await g.client.invoke(leader, typo)).code == Code.SUCCESS
        bad_num = RemotingCommand.request(RC.CONTROLLER_APPLY_BROKER_ID,
                                          {"brokerName": "b", "appliedBrokerId": "x"})  # fmt: skip
        assert (await g.client.invoke(leader, bad_num)).code == Code.SYSTEM_ERROR


async def test_embedded_in_a_name_server_shares_its_port(tmp_path: Path) -> None:
    from rmq_ha.nameserver.server import Nameserver

    ports = free_ports(3)
    servers = []
    for i, port in enumerate(ports):
        ncfg, _ = config.from_mapping(
            config.NamesrvConfig, {"listenPort": port, "enableControllerInNamesrv": True}
        )
        servers.append(Nameserver(ncfg, controller_cfg=controller_config(ports, i, tmp_path)))
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        for s in servers:
            await nursery.start(s.serve)
        addrs = [s.address for s in servers]
        cc = ControllerClient(client, addrs)
        await wait_leader(cc)
        b = TestBroker(addrs)
        await nursery.start(b.run)
        await b.join()
        assert (await b.elect()).master_broker_id == 1
        # The name server still answers its own requests on the same port.
        resp = await client.invoke(addrs[0], RemotingCommand.request(RC.GET_BROKER_CLUSTER_INFO))
        assert resp.code == Code.SUCCESS
        assert all(s.controller is not None and s.controller.live.entries for s in servers)
        nursery.cancel_scope.cancel()


# --- pieces ------------------------------------------------------------------------------------


def test_state_machine_applies_batches_and_skips_garbage() -> None:
    sm = ControllerStateMachine()
    ev = ApplyBrokerIdEvent("c", "b", 1, "a:1", "a:1;0")
    rival = ApplyBrokerIdEvent("c", "b", 1, "a:2", "a:2;0")
    assert sm.apply(1, encode_events([ev, rival])) == [True, False]
    assert sm.apply(2, b"\xffnot json") == []
    copy = ControllerStateMachine()
    copy.restore(sm.snapshot())
    assert copy.state == sm.state


def test_heartbeat_table_keeps_the_best_progress_and_expires() -> None:
    now = [1000]
    table = HeartbeatTable(lambda: now[0])

    def beat(epoch: int, offset: int, conn: object = None) -> bool:
        h = BrokerHeartbeatRequestHeader(
            cluster_name="c", broker_addr="a:1", broker_name="b", broker_id=1, epoch=epoch,
            max_offset=offset, confirm_offset=offset, heartbeat_timeout_mills=500,
        )  # fmt: skip
        return table.on_heartbeat(h, conn)

    conn = object()
    assert beat(2, 100, conn) is True
    assert beat(1, 900, conn) is False  # an older epoch never replaces a newer one
    key = next(iter(table.entries))
    assert (table.view()[key].epoch, table.view()[key].max_offset) == (2, 100)
    beat(2, 150, conn)
    assert table.view()[key].max_offset == 150
    now[0] += 501
    assert table.view() == {} and not table.is_alive(key)
    assert table.expire() == [key] and table.entries == {}
    beat(3, 0, conn)
    assert table.drop_connection(conn) == [key]


def test_heartbeat_table_does_not_hold_its_own_pause_against_the_brokers() -> None:
    """A controller paused longer than the heartbeat timeout failed over every group on
    resume: whichever of its tasks ran first saw every broker expired, before the heartbeats
    waiting in its sockets were read. With a StallCredit the table adds the time it did not
    run to every entry (at its first look after the pause, whatever looks); a broker that
    stopped beating still expires one timeout after the resume."""
    from rmq_ha.clock import StallCredit

    def table_at(now: list[int], credit: bool) -> HeartbeatTable:
        t = HeartbeatTable(lambda: now[0], StallCredit(stall_ms=1000) if credit else None)
        h = BrokerHeartbeatRequestHeader(
            cluster_name="c", broker_addr="a:1", broker_name="b", broker_id=1, epoch=1,
            max_offset=0, confirm_offset=0, heartbeat_timeout_mills=1500,
        )  # fmt: skip
        t.on_heartbeat(h)
        return t

    for credit in (True, False):
        now = [1000]
        t = table_at(now, credit)
        key = next(iter(t.entries))
        for _ in range(3):  # the watchdog's looks while the node runs
            now[0] += 200
            assert t.tick() == 0
        now[0] += 10_000  # SIGSTOP for 10 s, then SIGCONT: the scan looks first
        if credit:
            assert t.expire() == [] and t.is_alive(key)
            assert t.stalls is not None and t.stalls.last_ms == 10_000
            for _ in range(8):  # the node runs again: 1.6 s of the watchdog's looks
                now[0] += 200
                assert t.tick() == 0
            assert t.expire() == [key], "a broker silent since the resume still expires"
        else:
            assert t.expire() == [key]


def test_heartbeat_table_a_restarted_broker_replaces_its_progress_issue_13() -> None:
    """A heartbeat on a new connection (the broker restarted, maybe with a torn log) replaces
    the old (epoch, maxOffset): the old values describe a log that may no longer exist, and
    the controller must not rank the replica by them. The catch-up position is always the
    latest heartbeat's."""
    table = HeartbeatTable(lambda: 1000)

    def beat(epoch: int, offset: int, conn: object, need: int | None = None) -> None:
        h = BrokerHeartbeatRequestHeader(
            cluster_name="c", broker_addr="a:1", broker_name="b", broker_id=1, epoch=epoch,
            max_offset=offset, confirm_offset=offset, catch_up_offset=need,
            catch_up_epoch=None if need is None else epoch,
        )  # fmt: skip
        table.on_heartbeat(h, conn)

    first, second = object(), object()
    beat(5, 392_889, first)
    beat(3, 348_953, first, need=392_889)  # same connection: progress kept, catch-up taken
    info = next(iter(table.view().values()))
    assert (info.epoch, info.max_offset, info.catch_up_offset) == (5, 392_889, 392_889)
    assert not info.electable
    beat(3, 348_953, second, need=392_889)
    info = next(iter(table.view().values()))
    assert (info.epoch, info.max_offset) == (3, 348_953)
    beat(3, 400_000, second)
    info = next(iter(table.view().values()))
    assert info.electable and info.catch_up_offset is None


def test_controller_config_keys_and_checks(tmp_path: Path) -> None:
    text = (
        "controllerDLegerGroup = g1\n"
        "controllerDLegerPeers = n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858\n"
        "controllerDLegerSelfId = n1\n"
        f"controllerStorePath = {tmp_path}\n"
        "enableElectUncleanMaster = true\n"
        "scanNotActiveBrokerInterval = 2000\n"
    )
    (tmp_path / "c.conf").write_text(text)
    cfg, unknown = config.load(config.ControllerConfig, tmp_path / "c.conf")
    assert unknown == []
    assert cfg.peers == {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
    assert cfg.store_dir == tmp_path / "dledger-n1"
    assert cfg.enable_elect_unclean_master and cfg.scan_not_active_broker_interval_ms == 2000
    assert ControllerNode(cfg).policy.enable_elect_unclean_master
    for bad in ({"controllerDLegerSelfId": "n9"}, {"controllerDLegerPeers": "n0-nohost"},
                {"minVoteIntervalMs": 900, "maxVoteIntervalMs": 100}):  # fmt: skip
        with pytest.raises(config.ConfigError):
            config.from_mapping(config.ControllerConfig, bad)
    ns, _ = config.from_mapping(config.NamesrvConfig, {"enableControllerInNamesrv": "true"})
    assert ns.enable_controller_in_namesrv


async def test_a_broker_the_controller_does_not_know_says_what_to_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker whose id the controllers do not know (cleaned with cleanBrokerMetadata, or the
    controllers lost their store) retried for ever with a WARNING that named no way out
    (operator probe F5, F6). It now logs an ERROR with both ways out and does not register
    itself again (a new broker set would elect whichever replica came first)."""
    import logging

    from rmq_ha.broker.broker import open_broker

    store = tmp_path / "broker"
    store.mkdir()
    (store / "brokerIdentity").write_text("DefaultCluster#broker-a#7")
    async with group(tmp_path / "ctl") as g:
        cfg, _ = config.from_mapping(
            config.BrokerConfig,
            {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-a",
                "listenPort": "0",
                "haListenPort": "0",
                "namesrvAddr": "127.0.0.1:1",
                "storePathRootDir": str(store),
                "enableControllerMode": "true",
                "controllerAddr": ";".join(g.addrs),
            },
        )
        with caplog.at_level(logging.ERROR, logger="rmq_ha.broker.io.controller"):
            async with open_broker(cfg):

                def said() -> bool:
                    return any(
                        "does not know broker id 7" in r.getMessage() for r in caplog.records
                    )

                await wait_for(said, 20, "the ERROR naming the unknown id")
        line = next(r.getMessage() for r in caplog.records if "broker id 7" in r.getMessage())
        assert "brokerIdentity" in line and "restore" in line, line
        meta = await g.cc.request(m.GetReplicaInfoRequest("broker-a"))
        assert meta.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST  # not registered again


def test_heartbeat_table_a_broker_that_stopped_hearing_is_alive_but_no_candidate() -> None:
    """`unansweredMs` over half the broker's heartbeat timeout, or a last heartbeat older than
    that: alive (it may be a serving master), not a candidate for a new master. Absent
    (RocketMQ's brokers): hears."""
    now = [1000]
    table = HeartbeatTable(lambda: now[0])

    def beat(unanswered: int | None) -> BrokerLiveInfo:
        h = BrokerHeartbeatRequestHeader(
            cluster_name="c", broker_addr="a:1", broker_name="b", broker_id=1, epoch=1,
            max_offset=0, confirm_offset=0, heartbeat_timeout_mills=4000,
            unanswered_ms=unanswered,
        )  # fmt: skip
        table.on_heartbeat(h)
        return next(iter(table.view().values()))

    assert beat(None).candidate
    assert beat(2000).candidate
    info = beat(2001)
    assert info.alive and info.electable and not info.candidate
    assert beat(0).candidate, "the latest heartbeat decides"
    now[0] += 2000
    assert next(iter(table.view().values())).candidate
    now[0] += 1
    info = next(iter(table.view().values()))
    assert info.alive and not info.candidate, "a heartbeat over half the timeout old"
    h = BrokerHeartbeatRequestHeader(
        cluster_name="c", broker_addr="a:1", broker_name="b", broker_id=1, unanswered_ms=77
    )
    assert BrokerHeartbeatRequestHeader.from_ext(h.to_ext()).unanswered_ms == 77
