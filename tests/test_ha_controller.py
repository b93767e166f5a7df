"""Controller-mode broker HA with real processes on loopback (issue 5): three name servers with
embedded controllers and a broker group of three replicas with allAckInSyncStateSet=true.
Every scenario checks that no acknowledged message is lost and that clients carry on; each
names the RocketMQ issue whose failure it would catch."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from controllerutil import wait_leader
from hautil import Acked, HaCluster, read_all, send_values
from rmq_ha.client import Admin, ClientConfig
from rmq_ha.controller.client import ControllerClient
from rmq_ha.controller.messages import GetSyncStateDataRequest
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient

pytestmark = pytest.mark.timeout(180)

TOPIC = "TopicHA"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[HaCluster]:
    c = HaCluster(tmp_path)
    try:
        await c.start()
        yield c
    finally:
        c.stop()


async def ready_group(c: HaCluster, size: int = 3) -> int:
    m = await c.master()
    await c.wait_sync_state_set(m, size)
    return m


async def wait_dead(
    c: HaCluster, broker_ids: set[int | None], *, masterless: bool = False, timeout_s: float = 30
) -> None:
    """Until the controller (GET_SYNC_STATE_DATA) reports every replica in `broker_ids` dead
    (and, with `masterless`, has dropped the group's master: no master elected)."""
    async with RemotingClient() as rc:
        cc = ControllerClient(rc, c.ns_addrs)
        with trio.fail_after(timeout_s):
            while True:
                resp = await cc.request(GetSyncStateDataRequest((c.broker_name,)))
                info = resp.replicas_info.get(c.broker_name) if resp.ok else None
                if info is not None:
                    reps = (*info.in_sync_replicas, *info.not_in_sync_replicas)
                    dead = all(not r.alive for r in reps if r.broker_id in broker_ids)
                    if dead and (not masterless or info.master_broker_id is None):
                        return
                await trio.sleep(0.1)


def assert_no_loss(acked: Acked, got: list[str]) -> None:
    lost = set(acked.values) - set(got)
    assert not lost, f"{len(lost)} acknowledged messages lost: {sorted(lost)[:10]}"
    unexpected = set(got) - set(acked.values) - {v for v in got if v.startswith("maybe-")}
    assert not unexpected, f"read values never sent: {sorted(unexpected)[:10]}"


async def test_kill_master_a_sync_state_set_member_takes_over(cluster: HaCluster) -> None:
    c = cluster
    m = await ready_group(c)
    acked = Acked()
    assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(40)], acked) == []
    before = await c.status(m)
    assert before is not None
    members = set(before["syncStateSet"])
    c.brokers[m].kill()
    m2 = await c.master(exclude=m)
    st = await c.status(m2)
    assert st is not None and st["brokerId"] in members
    assert st["masterEpoch"] > before["masterEpoch"]
    # Writes and reads resume on the new master; nothing acknowledged is missing.
    assert await send_values(c.ns_addrs[0], TOPIC, [f"b{i}" for i in range(40)], acked) == []
    assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))


async def test_old_master_truncates_its_unreplicated_tail_and_rejoins(cluster: HaCluster) -> None:
    c = cluster
    m = await ready_group(c)
    acked = Acked()
    assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(20)], acked) == []
    slaves = [i for i in range(3) if i != m]
    replicated = await c.status(m)
    assert replicated is not None
    # The slaves freeze; a write lands on the master (never acknowledged); then the master
    # and the frozen slaves die, so the bytes sitting unread in the slaves' sockets are lost
    # and only the old master has that write. The slaves come back and one is elected.
    for i in slaves:
        c.brokers[i].signal(signal.SIGSTOP)
    assert await send_values_direct(c, m, ["maybe-x"], timeout_s=0.3) == ["maybe-x"]
    tail = await c.status(m)
    c.brokers[m].kill()
    for i in slaves:
        c.brokers[i].kill()
        c.brokers[i].start()
    for i in slaves:
        await c.brokers[i].wait_ready()
    assert tail is not None and tail["maxOffset"] > replicated["maxOffset"]
    m2 = await c.master(exclude=m)
    assert await send_values(c.ns_addrs[0], TOPIC, [f"b{i}" for i in range(20)], acked) == []
    new = await c.status(m2)
    assert new is not None
    c.brokers[m].start()
    await c.brokers[m].wait_ready()
    with trio.fail_after(30):
        while True:
            old = await c.status(m)
            new = await c.status(m2)
            if (
                old is not None
                and new is not None
                and old["role"] == "SLAVE"
                and old["maxOffset"] == new["maxOffset"]
            ):
                break
            await trio.sleep(0.1)
    # The old master cut what only it had, then took the new master's log; the epoch files
    # now agree.
    assert old["epochList"] == new["epochList"]
    assert old["truncatedTo"] is not None and old["truncatedTo"] < tail["maxOffset"]
    assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))
    # #10666: crash right after the truncation; the restart must not resurrect the cut tail.
    c.brokers[m].kill()
    c.brokers[m].start()
    await c.brokers[m].wait_ready()
    with trio.fail_after(30):
        while True:
            old = await c.status(m)
            new = await c.status(m2)
            if old and new and old["maxOffset"] == new["maxOffset"]:
                break
            await trio.sleep(0.1)
    assert old["epochList"] == new["epochList"]


async def test_kill_master_and_controller_leader_then_write_at_once(cluster: HaCluster) -> None:
    """RocketMQ #7689: after both come back, new writes must not reuse queue offsets."""
    c = cluster
    m = await ready_group(c)
    acked = Acked()
    assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(30)], acked) == []
    async with RemotingClient() as rc:
        leader = await wait_leader(ControllerClient(rc, c.ns_addrs))
    li = c.ns_addrs.index(leader)
    c.brokers[m].kill()
    c.namesrvs[li].kill()
    ns = [a for i, a in enumerate(c.ns_addrs) if i != li]
    await c.master(exclude=m, timeout_s=30)
    c.namesrvs[li].start()
    await c.namesrvs[li].wait_ready()
    c.brokers[m].start()
    await c.brokers[m].wait_ready()
    assert await send_values(ns[0], TOPIC, [f"b{i}" for i in range(30)], acked) == []
    places = list(acked.values.values())
    assert len(places) == len(set(places)), "two acknowledged sends got one queue offset"
    assert_no_loss(acked, await read_all(ns[0], TOPIC))


async def test_re_elect_the_same_master_then_write_and_slaves_keep_syncing(
    cluster: HaCluster,
) -> None:
    """RocketMQ #9689: the same master re-elected in a new epoch with no write in between
    (both epochs start at one offset) must not break the slaves. The slaves freeze past the
    heartbeat timeout (so the controller cannot elect them), then the master does, so the
    controller drops it; the master wakes first and, the only live member of its set, is
    elected again (changeToMasterWhenLastRoleIsMaster); then the slaves wake."""
    c = cluster
    m = await ready_group(c)
    st = await c.status(m)
    assert st is not None and st["maxOffset"] == 0
    slaves = [i for i in range(3) if i != m]
    ids = {i: (await c.status(i) or {}).get("brokerId") for i in range(3)}
    for i in slaves:
        c.brokers[i].signal(signal.SIGSTOP)
    # Until the controller counts the frozen slaves dead (controllerHeartBeatTimeoutMills).
    await wait_dead(c, {ids[i] for i in slaves})
    c.brokers[m].signal(signal.SIGSTOP)
    await wait_dead(c, {ids[i] for i in range(3)}, masterless=True)
    c.brokers[m].signal(signal.SIGCONT)
    try:
        with trio.fail_after(15):
            while True:
                now = await c.status(m)
                if now is not None and now["masterEpoch"] > st["masterEpoch"]:
                    break
                await trio.sleep(0.1)
    finally:
        for b in c.brokers:
            b.signal(signal.SIGCONT)
    assert now["role"] == "MASTER"
    assert [e["startOffset"] for e in now["epochList"]] == [0]  # one entry: replaced, not added
    # One slave reconnects with a fresh handshake: its file still says epoch 1 at 0, which the
    # master replaced; it must sync, not refuse for want of a common epoch.
    s1 = next(i for i in range(3) if i != m)
    c.brokers[s1].kill()
    c.brokers[s1].start()
    await c.brokers[s1].wait_ready()
    acked = Acked()
    assert await send_values(c.ns_addrs[0], TOPIC, [f"a{i}" for i in range(20)], acked) == []
    with trio.fail_after(30):
        while True:
            views = [await c.status(i) for i in range(3)]
            top = views[m]
            if (
                top is not None
                and len(top["syncStateSet"]) == 3
                and all(v and v["maxOffset"] == top["maxOffset"] for v in views)
            ):
                break
            await trio.sleep(0.1)
    lists = {json.dumps(v["epochList"]) for v in views if v}
    assert len(lists) == 1, lists
    assert top["syncStateSet"] == sorted(v["brokerId"] for v in views if v)
    assert_no_loss(acked, await read_all(c.ns_addrs[0], TOPIC))


async def test_topic_created_just_before_failover_exists_on_the_new_master(
    cluster: HaCluster,
) -> None:
    """RocketMQ #9804."""
    c = cluster
    m = await ready_group(c)
    async with Admin(c.ns_addrs[0], config=ClientConfig(client_ip="127.0.0.1")) as admin:
        await admin.create_topic("JustCreated", cluster="HaCluster", queue_nums=2)
    c.brokers[m].kill()
    m2 = await c.master(exclude=m)
    async with Admin(c.ns_addrs[0], config=ClientConfig(client_ip="127.0.0.1")) as admin:
        with trio.fail_after(30):
            while True:
                try:
                    route = await admin.route("JustCreated")
                except Exception:
                    await trio.sleep(0.2)
                    continue
                addrs = {a for b in route.broker_datas for a in b.broker_addrs.values()}
                if c.broker_addr(m2) in addrs:
                    break
                await trio.sleep(0.2)
    acked = Acked()
    assert await send_values(c.ns_addrs[0], "JustCreated", ["t1", "t2"], acked) == []


async def test_isolated_master_with_one_slave_does_not_move_confirm_offset(
    cluster: HaCluster,
) -> None:
    """RocketMQ #6662: while a SyncStateSet member has no connection, the confirm offset is
    frozen, even though the other slave acks; it moves only once the controller shrinks the
    set. Here the controllers are paused (the master cannot report) and one slave is gone."""
    c = cluster
    m = await ready_group(c)
    acked = Acked()
    assert await send_values(c.ns_addrs[0], TOPIC, ["a0"], acked) == []
    s1, s2 = [i for i in range(3) if i != m]
    before = await c.status(m)
    assert before is not None
    # Routes are cached by the producer, so it still finds the master.
    for ns in c.namesrvs:
        ns.signal(signal.SIGSTOP)
    try:
        c.brokers[s2].kill()
        failed = await send_values_direct(c, m, ["maybe-1", "maybe-2"])
        assert failed == ["maybe-1", "maybe-2"], "acked without every SyncStateSet member"
        st1 = await c.status(s1)
        stm = await c.status(m)
        assert st1 is not None and stm is not None
        assert st1["maxOffset"] > before["maxOffset"]  # the other slave has them...
        assert stm["confirmOffset"] == before["confirmOffset"]  # ...but nothing is exposed
    finally:
        for ns in c.namesrvs:
            ns.signal(signal.SIGCONT)
    # With the controllers back the set shrinks and the confirm offset moves on.
    await c.wait_sync_state_set(m, 2)
    with trio.fail_after(30):
        while True:
            stm = await c.status(m)
            if stm and stm["confirmOffset"] == stm["maxOffset"]:
                break
            await trio.sleep(0.1)
    # The master's status shows each connected slave's last ack (the killed one is gone).
    s1_id = str((await c.status(s1) or {}).get("brokerId"))
    assert set(stm["replicaAcks"]) == {s1_id}, stm["replicaAcks"]
    assert stm["replicaAcks"][s1_id] >= stm["confirmOffset"]


async def send_values_direct(
    c: HaCluster, i: int, values: list[str], timeout_s: float = 10.0
) -> list[str]:
    """Sends to broker i's queue 0 without a name server; returns the values not acked."""
    codes = await send_codes_direct(c.broker_addr(i), values, timeout_s)
    return [v for v, code in zip(values, codes, strict=True) if code != 0]


async def send_codes_direct(
    addr: str, values: list[str], timeout_s: float = 10.0
) -> list[int | None]:
    """Sends to queue 0 of the broker at `addr`; each send's response code (None: no answer)."""
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.command import RemotingCommand
    from rmq_ha.protocol.headers import SendMessageRequestHeader

    codes: list[int | None] = []
    async with RemotingClient() as rc:
        for v in values:
            h = SendMessageRequestHeader(
                producer_group="g",
                topic=TOPIC,
                default_topic="TBW102",
                default_topic_queue_nums=4,
                queue_id=0,
                sys_flag=0,
                born_timestamp=0,
                flag=0,
            )
            cmd = RemotingCommand.request(RC.SEND_MESSAGE, h.to_ext(), v.encode())
            try:
                r = await rc.invoke(addr, cmd, timeout_s)
            except RemotingError:
                codes.append(None)
                continue
            codes.append(int(r.code))
    return codes


async def test_a_parked_pull_wakes_when_replication_confirms_the_message(
    cluster: HaCluster,
) -> None:
    """With allAckInSyncStateSet a message becomes visible only when the slaves' acks move the
    confirm offset, after the append itself. A long-polling pull parked on the queue must wake
    then, not sit out its suspend timeout (120 s here, longer than the test may run)."""
    from rmq_ha.client import PullConsumer
    from rmq_ha.protocol.codes import ResponseCode as Resp
    from rmq_ha.protocol.models import MessageQueue

    c = cluster
    m = await ready_group(c)
    assert await send_codes_direct(c.broker_addr(m), ["first"]) == [Resp.SUCCESS]
    cc = ClientConfig(client_ip="127.0.0.1")
    mq = MessageQueue(topic=TOPIC, broker_name="broker-a", queue_id=0)
    async with Admin(c.ns_addrs[0], config=cc) as admin:
        with trio.fail_after(30):
            while True:
                try:
                    tail = await admin.max_offset(mq)
                    break
                except Exception:
                    await trio.sleep(0.2)
    async with PullConsumer(
        "ha-long-poll", c.ns_addrs[0], config=cc, broker_suspend_max_time_s=120.0
    ) as pc:
        got: list[str] = []

        async def park() -> None:
            res = await pc.pull(mq, "*", tail, 32, block=True, timeout_s=180)
            got.extend(msg.body.decode() for msg in res.messages)

        # The pull may stay parked for 120 s, longer than the test may run: its answer with
        # the message means the confirm offset's move woke it. (The pause lets it park first;
        # if it has not yet, it finds the message at once and the test still holds.)
        async with trio.open_nursery() as n:
            n.start_soon(park)
            await trio.sleep(1.0)
            assert await send_codes_direct(c.broker_addr(m), ["second"]) == [Resp.SUCCESS]
        assert got == ["second"]
