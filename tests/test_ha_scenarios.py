"""More broker-HA scenarios with real processes on loopback (issue 5): the lost
ALTER_SYNC_STATE_SET answer (#5663), a 2-replica group with minInSyncReplicas=2, and classic
master/slave replication."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from hautil import Acked, HaCluster, read_all, send_values
from rmq_ha import faults
from rmq_ha.client import Admin, ClientConfig
from rmq_ha.protocol.codes import ResponseCode as Resp
from test_ha_controller import assert_no_loss, send_codes_direct, send_values_direct

pytestmark = pytest.mark.timeout(180)

TOPIC = "TopicHA"


def classic_pair(tmp_path: Path) -> HaCluster:
    """A classic (no controller) master + slave; the master is dropped from routes 1.5 s
    after its last heartbeat."""
    return HaCluster(
        tmp_path,
        replicas=2,
        controller_mode=False,
        broker={"brokerNotActiveTimeoutMillis": 1500},
    )


async def slave_caught_up(c: HaCluster) -> None:
    """Until broker 1 (the slave) holds the master's max offset."""
    with trio.fail_after(30):
        while (await c.status(1) or {}).get("maxOffset") != (await c.status(0) or {})["maxOffset"]:
            await trio.sleep(0.1)


async def slave_transferring(c: HaCluster) -> None:
    """Until broker 1 (the slave) is in the TRANSFER state."""
    with trio.fail_after(30):
        while not (await c.status(1) or {}).get("slaveState") == "TRANSFER":
            await trio.sleep(0.1)


async def routed_without_master(ns: str) -> None:
    """Until the name server routes TOPIC to no master (broker id 0 dropped)."""
    async with Admin(ns, config=ClientConfig(client_ip="127.0.0.1")) as admin:
        with trio.fail_after(30):
            while True:
                route = await admin.route(TOPIC)
                if all(0 not in b.broker_addrs for b in route.broker_datas):
                    return
                await trio.sleep(0.2)


@asynccontextmanager
async def started(c: HaCluster) -> AsyncIterator[HaCluster]:
    try:
        await c.start()
        yield c
    finally:
        c.stop()


async def test_lost_alter_sync_state_set_answer_cannot_lose_acked_writes(
    tmp_path: Path,
) -> None:
    """RocketMQ #5663. The controller commits an expanded set but its answer is lost, so the
    master only *proposed* it. The master must still wait for the new member (union rule):
    otherwise a write acked by the master alone is lost when that member is elected."""
    c = HaCluster(
        tmp_path,
        broker={"syncBrokerMetadataPeriod": 60_000},  # no poll heals the lost answer
        broker_env={faults.ENV: faults.DROP_ALTER_SYNC_STATE_SET_REPLY},
    )
    async with started(c):
        m = await c.master()
        with trio.fail_after(30):
            while True:
                st = await c.status(m)
                if st and len(st["syncStateSet"]) > len(st["committedSyncStateSet"]):
                    break
                await trio.sleep(0.1)
        assert st["committedSyncStateSet"] == [st["brokerId"]]
        (joiner_id,) = set(st["syncStateSet"]) - set(st["committedSyncStateSet"])
        acked = Acked()
        assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(10)], acked) == []
        ids = {i: (await c.status(i) or {}).get("brokerId") for i in range(3)}
        joiner = next(i for i, bid in ids.items() if bid == joiner_id)
        # The joiner freezes: a write is stored on the master but must not be acknowledged.
        c.brokers[joiner].signal(signal.SIGSTOP)
        assert await send_values_direct(c, m, ["maybe-x"], timeout_s=1.0) == ["maybe-x"]
        # Master dies; the joiner loses what sat unread in its socket and comes back: it is
        # the only other member the controller knows, so it is elected.
        c.brokers[m].kill()
        c.brokers[joiner].kill()
        c.brokers[joiner].start()
        await c.brokers[joiner].wait_ready()
        assert await c.master(exclude=m, timeout_s=30) == joiner
        assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))


async def test_two_replicas_with_min_in_sync_two_refuse_writes_instead_of_losing_them(
    tmp_path: Path,
) -> None:
    c = HaCluster(tmp_path, replicas=2, broker={"minInSyncReplicas": 2})
    async with started(c):
        m = await c.master()
        await c.wait_sync_state_set(m, 2)
        acked = Acked()
        assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(10)], acked) == []
        slave = 1 - m
        c.brokers[slave].kill()
        await c.wait_sync_state_set(m, 1)
        failed = await send_values(c.ns_addrs[0], TOPIC, [f"r{i}" for i in range(5)], acked)
        assert failed == [f"r{i}" for i in range(5)], "a write was accepted with one replica"
        c.brokers[slave].start()
        await c.brokers[slave].wait_ready()
        await c.wait_sync_state_set(m, 2)
        assert await send_values(c.ns_addrs[0], TOPIC, [f"b{i}" for i in range(10)], acked) == []
        assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))


async def test_an_idle_group_takes_its_slaves_in_at_the_handshake(tmp_path: Path) -> None:
    """Found by the torn-master campaign on `controller-mis2`: slaves that connect to an empty
    (or idle) master ack only at their handshake and then every haSendHeartbeatInterval; the
    handshake's ack was not counted, so with minInSyncReplicas=2 a fresh group refused every
    write until the first heartbeat ack (5 s by default; here 600 s, so without the fix the
    set never grows during the test)."""
    c = HaCluster(
        tmp_path,
        replicas=3,
        broker={"minInSyncReplicas": 2, "haSendHeartbeatInterval": 600_000},
    )
    async with started(c):
        m = await c.master()
        await c.wait_sync_state_set(m, 3, timeout_s=60)
        acked = Acked()
        assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(10)], acked) == []
        assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))


async def test_classic_sync_master_replicates_and_the_slave_serves_reads_when_it_dies(
    tmp_path: Path,
) -> None:
    c = classic_pair(tmp_path)
    async with started(c):
        acked = Acked()
        await slave_transferring(c)
        assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(30)], acked) == []
        master, slave = await c.status(0), await c.status(1)
        assert master and slave and master["maxOffset"] == slave["maxOffset"]
        # A SYNC_MASTER without its slave answers SLAVE_NOT_AVAILABLE (stored, not replicated).
        c.brokers[1].kill()
        # Once the master has seen the connection go (before that, a send waits for the
        # slave's ack and may time out instead: FLUSH_SLAVE_TIMEOUT, seen under load).
        with trio.fail_after(30):
            while "1" in ((await c.status(0)) or {}).get("replicaAcks", {"1": 0}):
                await trio.sleep(0.1)
        assert await send_codes_direct(c.broker_addr(0), ["maybe-x"]) == [Resp.SLAVE_NOT_AVAILABLE]
        c.brokers[1].start()
        await c.brokers[1].wait_ready()
        await slave_caught_up(c)
        # The master dies: once the name servers drop it, reads go to the slave.
        c.brokers[0].kill()
        await routed_without_master(c.ns_addrs[0])
        assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))


async def test_candidates_more_than_2_pow_31_apart_the_higher_offset_wins(
    tmp_path: Path,
) -> None:
    """RocketMQ #10578 against the running controllers: brokers report their offsets in
    heartbeats (2 GiB of real data would not fit a test), and the election after the master
    dies must pick the replica 2^31 + 1 bytes ahead, not the one at 0."""
    from rmq_ha.controller import messages as m
    from rmq_ha.controller.testbroker import TestBroker

    c = HaCluster(tmp_path, replicas=0)
    async with started(c), trio.open_nursery() as n:
        bs = [TestBroker(c.ns_addrs, heartbeat_timeout_ms=1500) for _ in range(3)]
        for b in bs:
            await n.start(b.run)
            await b.join(deadline_s=20)
        master = bs[0]
        assert (await master.elect(10)).master_broker_id == master.broker_id
        ids = frozenset(b.broker_id for b in bs if b.broker_id is not None)
        alter = m.AlterSyncStateSetRequest("broker-a", master.broker_id, 1, ids, 1)
        assert (await master.request(alter, 10)).ok
        bs[1].epoch, bs[1].max_offset = 1, 0
        bs[2].epoch, bs[2].max_offset = 1, 2**31 + 1
        for b in bs[1:]:
            b.start_heartbeats(0.2)
        master.stop()
        with trio.fail_after(30):
            while True:
                info = await bs[1].replica_info()
                if info.master_broker_id not in (None, master.broker_id):
                    break
                await trio.sleep(0.1)
        assert info.master_broker_id == bs[2].broker_id
        for b in bs:
            b.stop()


async def test_without_a_controller_the_broker_serves_fenced_and_refuses_writes(
    tmp_path: Path,
) -> None:
    """A controller-mode broker that reaches no controller stays up, fenced: it neither takes
    writes nor registers, and keeps retrying (it does not exit)."""
    from rmq_jepsen.launch import free_ports, role_proc

    dead, port = free_ports(2)
    p = role_proc(
        tmp_path,
        "broker",
        "broker",
        {
            "brokerId": -1,
            "enableControllerMode": "true",
            "controllerAddr": f"127.0.0.1:{dead}",
            "controllerHeartBeatTimeoutMills": 300,
            "listenPort": port,
            "storePathRootDir": str(tmp_path / "store"),
        },
    )
    p.start()
    try:
        await p.wait_ready()
        codes = await send_codes_direct(f"127.0.0.1:{port}", ["x"])
        assert codes == [Resp.SERVICE_NOT_AVAILABLE]
        await trio.sleep(1.0)  # time passes (retries fail): it stays up, nothing is awaited
        assert p.alive, p.log.read_text()
    finally:
        p.kill()


async def test_empty_slave_with_sync_from_last_file_starts_at_the_masters_last_segment(
    tmp_path: Path,
) -> None:
    """syncFromLastFile (issue 15): an empty classic slave joining a master that already
    wrote several commitlog segments gets the master's last segment first; its own log starts
    there (non-zero min offset) and then replicates normally. Before, the slave's store refused
    the first transfer (offset above its max offset 0) and never synced."""
    seg = 64 * 1024
    c = HaCluster(
        tmp_path,
        replicas=2,
        controller_mode=False,
        broker={"mappedFileSizeCommitLog": seg, "syncFromLastFile": "true"},
    )
    slave_log = tmp_path / "broker-1" / "commitlog"
    try:
        for p in c.namesrvs:
            p.start()
        for p in c.namesrvs:
            await p.wait_ready()
        c.brokers[0].start()
        await c.brokers[0].wait_ready()
        body = "x" * 1000
        # A SYNC_MASTER without its slave stores each message and answers SLAVE_NOT_AVAILABLE.
        codes = await send_codes_direct(c.broker_addr(0), [f"{i}:{body}" for i in range(300)])
        assert all(code is not None for code in codes)
        master_log = tmp_path / "broker-0" / "commitlog"
        segments = sorted(int(f.name) for f in master_log.iterdir())
        assert len(segments) >= 4, segments
        last = segments[-1]
        c.brokers[1].start()
        await c.brokers[1].wait_ready()

        async def synced() -> bool:
            m, s = await c.status(0), await c.status(1)
            return bool(
                m and s and s["slaveState"] == "TRANSFER" and s["maxOffset"] == m["maxOffset"]
            )

        with trio.fail_after(30):
            while not await synced():
                await trio.sleep(0.1)
        assert sorted(int(f.name) for f in slave_log.iterdir()) == [last]
        # Then it replicates normally: new writes are acknowledged by the slave (SEND_OK) and
        # the logs stay equal.
        codes = await send_codes_direct(c.broker_addr(0), [f"more-{i}:{body}" for i in range(80)])
        assert codes == [Resp.SUCCESS] * 80
        with trio.fail_after(30):
            while not await synced():
                await trio.sleep(0.1)
        files = sorted(int(f.name) for f in slave_log.iterdir())
        assert files[0] == last and len(files) >= 2
    finally:
        c.stop()


async def test_a_deleted_topic_is_deleted_on_the_slave_too_and_comes_back_empty(
    tmp_path: Path,
) -> None:
    """deleteTopic on the master hides the topic's messages on every replica (the store's
    deletion marker replicates with the log): after the master dies, reading the topic (created
    again by the next sends) from the slave finds only what was sent after the deletion."""
    c = classic_pair(tmp_path)
    async with started(c):
        await slave_transferring(c)
        ns = c.ns_addrs[0]
        old, new = Acked(), Acked()
        assert await send_values(ns, TOPIC, [f"old{i}" for i in range(20)], old) == []
        async with Admin(ns, config=ClientConfig(client_ip="127.0.0.1")) as admin:
            assert await admin.delete_topic(TOPIC, "HaCluster") == [c.broker_addr(0)]
        # auto-created again by the first send; retried while the route is rebuilt
        with trio.fail_after(30):
            while await send_values(ns, TOPIC, ["new0"], new):
                await trio.sleep(0.2)
        assert await send_values(ns, TOPIC, [f"new{i}" for i in range(1, 10)], new) == []
        assert read_values(await read_all(ns, TOPIC)) == set(new.values)
        await slave_caught_up(c)
        c.brokers[0].kill()
        await routed_without_master(ns)
        assert read_values(await read_all(ns, TOPIC)) == set(new.values)


def read_values(read: list[str]) -> set[str]:
    assert len(read) == len(set(read)), "a message read twice"
    return set(read)


async def test_a_slave_copies_its_masters_subscription_groups(tmp_path: Path) -> None:
    """RocketMQ's SlaveSynchronize copies subscription groups and message request modes too: a
    group an admin created or changed on the master (consumeEnable=false, retryMaxTimes)
    reaches the slave, a deleted one goes from it, and a group switched to pop is in pop mode
    on the slave. Before, a slave kept none of them, so after a failover the new
    master let a disabled group consume and forgot every group's settings."""
    from rmq_ha.protocol.admin import SubscriptionGroupConfig

    c = HaCluster(
        tmp_path,
        replicas=2,
        controller_mode=False,
        broker={"syncBrokerMetadataPeriod": 300},
    )
    async with started(c):
        await slave_transferring(c)
        async with Admin(c.ns_addrs[0], config=ClientConfig(client_ip="127.0.0.1")) as admin:
            for name, enable in (("cg-off", False), ("cg-gone", True)):
                cfg = SubscriptionGroupConfig(
                    group_name=name, consume_enable=enable, retry_max_times=3
                )
                await admin.update_subscription_group(c.broker_addr(0), cfg)

            async def on_slave() -> dict[str, SubscriptionGroupConfig]:
                return await admin.subscription_groups(c.broker_addr(1))

            with trio.fail_after(30):
                while not {"cg-off", "cg-gone"} <= set(await on_slave()):
                    await trio.sleep(0.1)
            got = await on_slave()
            assert got["cg-off"].consume_enable is False and got["cg-off"].retry_max_times == 3
            await admin.delete_subscription_group(c.broker_addr(0), "cg-gone")
            with trio.fail_after(30):
                while "cg-gone" in await on_slave():
                    await trio.sleep(0.1)
            assert "cg-off" in await on_slave()
        # message request modes (a group switched to pop) too
        from rmq_ha.net.client import RemotingClient
        from rmq_ha.protocol.codes import RequestCode as RC
        from rmq_ha.protocol.command import RemotingCommand
        from rmq_ha.protocol.models import SetMessageRequestModeRequestBody

        body = SetMessageRequestModeRequestBody(
            topic=TOPIC, consumer_group="cg-pop", mode="POP", pop_share_queue_num=2
        )
        async with RemotingClient() as rc:
            set_mode = RemotingCommand.request(RC.SET_MESSAGE_REQUEST_MODE, None, body.to_json())
            assert (await rc.invoke(c.broker_addr(0), set_mode, 5.0)).code == Resp.SUCCESS
            get_all = RemotingCommand.request(RC.GET_ALL_MESSAGE_REQUEST_MODE)
            with trio.fail_after(30):
                while True:
                    r = await rc.invoke(c.broker_addr(1), get_all, 5.0)
                    assert r.code == Resp.SUCCESS, r.remark
                    modes = json.loads(r.body or b"{}")["messageRequestModeMap"]
                    if "cg-pop" in modes.get(TOPIC, {}):
                        break
                    await trio.sleep(0.1)
            assert modes[TOPIC]["cg-pop"]["mode"] == "POP"
