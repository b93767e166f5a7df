"""Three real controller processes on loopback, standalone (`rmq-ha controller`) and embedded in
name servers (`rmq-ha namesrv` with enableControllerInNamesrv): leader election, failover after
SIGKILL, a broker's join/heartbeat/elect, the admin commands, 2007 from followers, and state
that survives restarting the whole group. Every process is stopped by its pid."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from rmq_jepsen.launch import RMQ_HA, kill_all, role_proc, stop_all

from controllerutil import controller_values, free_ports, wait_for, wait_leader, write_properties
from rmq_ha.controller import messages as m
from rmq_ha.controller import wire
from rmq_ha.controller.admin import NO_EPOCHS
from rmq_ha.controller.client import ControllerClient
from rmq_ha.controller.testbroker import TestBroker
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import GetMetaDataResponseHeader

pytestmark = pytest.mark.timeout(120)


class Group:
    """Three member processes of one kind ("controller" or "namesrv"), from the one launcher."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.ports = free_ports(3)
        self.addrs = [f"127.0.0.1:{p}" for p in self.ports]
        self.members = [role_proc(tmp, kind, f"{kind}-{i}", self._values(tmp, i)) for i in range(3)]
        self.started: set[int] = set()

    def _values(self, tmp: Path, i: int) -> dict[str, Any]:
        values = controller_values(self.ports, i, tmp / "store")
        if self.kind == "namesrv":
            values |= {"listenPort": self.ports[i], "enableControllerInNamesrv": "true"}
        return values

    @property
    def procs(self) -> list[int]:
        """The members started and not stopped by the test (one that crashed stays listed)."""
        return sorted(self.started)

    def start(self, i: int) -> None:
        self.members[i].start()
        self.started.add(i)

    async def wait_ready(self, i: int) -> None:
        await self.members[i].wait_ready(20)

    def kill(self, i: int) -> None:
        self.members[i].kill()
        self.started.discard(i)

    def stop_all(self) -> None:
        stop_all(self.members)
        self.started.clear()


@pytest.fixture(params=["controller", "namesrv"])
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    g = Group(request.param, tmp_path)
    try:
        yield g
    finally:
        kill_all(g.members)


async def start_all(g: Group) -> None:
    for i in range(3):
        g.start(i)
    for i in range(3):
        await g.wait_ready(i)


async def admin(g: Group, *args: str) -> tuple[int, list[dict[str, Any]]]:
    cmd = [*RMQ_HA, "controller-admin", *args, "-a", ";".join(g.addrs), "--json"]
    done = await trio.run_process(cmd, capture_stdout=True, check=False)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


async def leader_index(g: Group, cc: ControllerClient) -> int:
    return g.addrs.index(await wait_leader(cc, 20))


async def check_metadata(g: Group, cc: ControllerClient, leader: int) -> None:
    """Every running node names the leader (a follower learns it from the first heartbeat)."""
    with trio.fail_after(10):
        while True:
            metas = {i: await cc.metadata(g.addrs[i]) for i in g.procs}
            if all(x.controller_leader_address == g.addrs[leader] for x in metas.values()):
                break
            await trio.sleep(0.02)
    assert {i for i, x in metas.items() if x.is_leader} == {leader}
    rc, rows = await admin(g, "get-controller-metadata")
    assert rc == 0
    live = [r for r in rows if "error" not in r]
    assert {r["controllerLeaderAddress"] for r in live} == {g.addrs[leader]}


async def check_follower_says_not_leader(g: Group, client: RemotingClient, leader: int) -> None:
    follower = next(i for i in g.procs if i != leader)
    req = m.ApplyBrokerIdRequest("DefaultCluster", "broker-a", 9, "127.0.0.1:1;1")
    resp = await client.invoke(g.addrs[follower], wire.request_command(req))
    assert resp.code == Code.CONTROLLER_NOT_LEADER
    assert (
        GetMetaDataResponseHeader.from_ext(resp.ext_fields).controller_leader_address
        == (g.addrs[leader])
    )


async def brokers_join_and_elect(g: Group, nursery: trio.Nursery) -> list[TestBroker]:
    bs = [TestBroker(g.addrs, heartbeat_timeout_ms=3000) for _ in range(2)]
    for b in bs:
        await nursery.start(b.run)
        await b.join()
        b.start_heartbeats(0.2)
    first = await bs[0].elect()
    assert first.code == Code.SUCCESS and first.master_broker_id == 1
    alter = m.AlterSyncStateSetRequest("broker-a", 1, first.master_epoch or 0, frozenset({1, 2}),
                                       first.sync_state_set_epoch or 0)  # fmt: skip
    assert (await bs[0].request(alter)).ok
    return bs


async def check_admin_commands(g: Group, bs: list[TestBroker]) -> None:
    rc, rows = await admin(g, "get-sync-state-set", "-b", "broker-a")
    assert rc == 0, rows
    (row,) = rows
    assert row["masterBrokerId"] == 1 and row["masterAddress"] == bs[0].address
    assert [r["brokerId"] for r in row["inSyncReplicas"]] == [1, 2]
    rc, rows = await admin(g, "get-broker-epoch", "-b", "broker-a")
    assert rc == 0 and {r["status"] for r in rows} == {NO_EPOCHS}
    rc, rows = await admin(g, "elect-master", "-b", "broker-a", "-i", "2")
    assert rc == 0 and rows[0]["masterBrokerId"] == 2, rows
    await wait_for(lambda: any(h.master_broker_id == 2 for h, _ in bs[0].notices), 10, "notice")
    # A group with no master and no live replica can be cleaned.
    async with trio.open_nursery() as nursery:
        z = TestBroker(g.addrs, "broker-z")
        await nursery.start(z.run)
        await z.join()
        z.stop()
    # Refused while the controllers still count it alive; done once they saw it close.
    with trio.fail_after(30):
        while (result := await admin(g, "clean-broker-metadata", "-b", "broker-z"))[0] != 0:
            await trio.sleep(0.1)
    rc, rows = result
    assert rc == 0, rows
    rc, rows = await admin(g, "get-sync-state-set", "-b", "broker-z")
    assert rc == 1 and rows[0]["error"] == "unknown"


async def replica_info(cc: ControllerClient) -> m.GetReplicaInfoResponse:
    resp: m.GetReplicaInfoResponse = await cc.request(m.GetReplicaInfoRequest("broker-a"), 20)
    return resp


async def test_group_elects_fails_over_and_keeps_state(group: Group) -> None:
    g = group
    await start_all(g)
    async with RemotingClient() as client, trio.open_nursery() as nursery:
        cc = ControllerClient(client, g.addrs)
        leader = await leader_index(g, cc)
        await check_metadata(g, cc, leader)
        await check_follower_says_not_leader(g, client, leader)
        bs = await brokers_join_and_elect(g, nursery)
        await check_admin_commands(g, bs)
        before = await replica_info(cc)
        assert before.master_broker_id == 2

        g.kill(leader)  # SIGKILL
        new_leader = await leader_index(g, cc)
        assert new_leader != leader
        await check_metadata(g, cc, new_leader)
        assert await replica_info(cc) == before

        g.start(leader)
        await g.wait_ready(leader)
        g.stop_all()
        await start_all(g)
        await leader_index(g, cc)
        after = await replica_info(cc)
        assert (after.master_broker_id, after.master_epoch) == (2, before.master_epoch)
        assert after.sync_state_set == before.sync_state_set
        nxt = await cc.request(m.GetNextBrokerIdRequest("DefaultCluster", "broker-a"))
        assert nxt.next_broker_id == 3
        nursery.cancel_scope.cancel()
    g.stop_all()


async def test_a_namesrv_with_an_embedded_controller_still_routes(tmp_path: Path) -> None:
    g = Group("namesrv", tmp_path)
    try:
        await start_all(g)
        async with RemotingClient() as client:
            for addr in g.addrs:
                cmd = RemotingCommand.request(RC.GET_BROKER_CLUSTER_INFO)
                assert (await client.invoke(addr, cmd)).code == Code.SUCCESS
            await wait_leader(ControllerClient(client, g.addrs), 20)
    finally:
        g.stop_all()


async def test_bad_controller_config_exits_2(tmp_path: Path) -> None:
    conf = write_properties(tmp_path / "bad.conf", {"controllerDLegerSelfId": "n7"})
    done = await trio.run_process([*RMQ_HA, "controller", "-c", str(conf)], check=False,
                                  capture_stderr=True)  # fmt: skip
    assert done.returncode == 2 and b"controllerDLegerSelfId" in done.stderr


async def test_bench_controller_json(tmp_path: Path) -> None:
    args = ["bench", "controller", "--json", "--kills", "2", "--requests", "20",
            "--dir", str(tmp_path)]  # fmt: skip
    done = await trio.run_process([*RMQ_HA, *args], check=False, capture_stdout=True)
    assert done.returncode == 0
    doc = json.loads(done.stdout)
    for name in ("apply_broker_id", "alter_sync_state_set"):
        s = doc["commit_latency_ms"][name]
        assert s["n"] == 20 and 0 < s["p50"] <= s["p99"]
    assert doc["failover_ms"]["n"] == 2 and doc["failover_ms"]["p50"] > 0
    assert isinstance(doc["goal_met"], bool) and "maxHeartBeatLeak" in doc["goal"]
    assert list(tmp_path.iterdir()) == [], "the benchmark removes its controllers' data"
