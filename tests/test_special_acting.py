"""Special messages with a slave acting for its dead master (RIP-32; broker/special/pop.py and
transaction.py on top of the escape bridge): two broker groups and one name server on
loopback. The name server and the masters (broker-a's A0, broker-b's B0) are real processes;
broker-a's slave A1, where one runs, is in-process, so a test can set `core.state.acting`
(what the role core sets when A0 is gone) and call a service directly.

* a master revives a checkpoint (CK) that names another broker group, reading its messages
  with a remote pull from that group; while the group cannot answer the CK waits, then is
  revived;
* all of it with real processes only (`ActingCluster`, the name server's RIP-32 route
  rewrite): pop on the slave that acts for broker-a; broker-b revives what was not acked,
  reading it from the acting slave;
* pop, ack and change-invisible-time on the acting slave: consumer offsets local, every CK
  and ack escaped to B0's revive topic, where B0 revives what was not acked;
* the acting slave's own revive of the dead master's CKs: an ack it escaped counts here too;
* the transaction check on a slave hands an old undecided half to B0, whose check asks the
  producer; the commit is consumed exactly once;
* END_TRANSACTION on the acting slave commits through the escape, once, and the check then
  passes the half instead of handing it over.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from rmq_jepsen.bench.cluster import ActingCluster
from rmq_jepsen.launch import Proc, free_ports, role_proc

from rmq_ha.broker.broker import Broker
from rmq_ha.broker.special.pop import REVIVE_TOPIC_PREFIX, AckRecord, CheckPoint
from rmq_ha.broker.special.transaction import HALF_TOPIC, OP_TOPIC, SYS_GROUP
from rmq_ha.client import (
    Admin,
    LocalTransactionState,
    MessageExt,
    PopConsumer,
    PopStatus,
    Producer,
    PullConsumer,
    TransactionProducer,
)
from rmq_ha.client.message import decode_messages
from rmq_ha.config import BrokerConfig, BrokerRole
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    EndTransactionRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from rmq_ha.protocol.message import encode_properties, parse_offset_msg_id
from rmq_ha.protocol.models import MessageQueue
from rmq_ha.protocol.pop import ExtraInfo, build_extra_info, parse_offset_info, retry_flag
from specialutil import eventually, run_broker
from test_client_cluster import FAST_CLIENT, FAST_CONSUMER, FAST_PRODUCER

pytestmark = pytest.mark.timeout(90)

CLUSTER = "DefaultCluster"
REVIVE_TOPIC = REVIVE_TOPIC_PREFIX + CLUSTER
SEGMENT = 1 << 20
#: The masters' special services, fast (same revive queue count everywhere: an escaped CK
#: keeps its revive queue id).
MASTER_SPECIAL = {
    "reviveInterval": 100,
    "reviveQueueNum": 2,
    "transactionCheckInterval": 200,
    "transactionTimeOut": 300,
    "transactionCheckMax": 1000,
}
MASTER_BASE = {
    "brokerClusterName": CLUSTER,
    "brokerIP1": "127.0.0.1",
    "mappedFileSizeCommitLog": SEGMENT,
    "flushIntervalCommitLog": 50,
    "registerNameServerPeriod": 2000,
    "haSendHeartbeatInterval": 500,
    "brokerRole": "ASYNC_MASTER",
    "brokerId": 0,
}


@dataclass
class Groups:
    tmp: Path
    ns_addr: str
    procs: dict[str, Proc]  # "ns", "a0", "b0"
    addrs: dict[str, str]
    nursery: trio.Nursery
    slave: Broker | None = None
    _slave_scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def kill(self, key: str) -> None:
        self.procs[key].kill()

    async def restart(self, key: str) -> None:
        p = self.procs[key]
        p.kill()
        p.start()
        await p.wait_ready()

    def log(self, key: str) -> str:
        p = self.procs[key].log
        return p.read_text() if p.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {k}\n{self.log(k)[-3000:]}" for k in self.procs)

    async def start_slave(self, **kw: Any) -> Broker:
        """broker-a's slave (id 1) in-process: RIP-32 on, remote escape on; its member-group
        poll never runs during a test, so it acts exactly when the test says so."""
        values: dict[str, Any] = {
            "listen_port": 0,
            "namesrv_addr": self.ns_addr,
            "store_path_root_dir": str(self.tmp / "a1"),
            "commitlog_segment_bytes": SEGMENT,
            "flush_interval_ms": 50,
            "broker_name": "broker-a",
            "broker_id": 1,
            "broker_role": BrokerRole.SLAVE,
            "ha_send_heartbeat_interval_ms": 500,
            "sync_broker_metadata_period_ms": 300,
            "enable_slave_acting_master": True,
            "enable_remote_escape": True,
            "skip_pre_online": True,
            "sync_broker_member_group_period_ms": 3_600_000,
            "revive_interval_ms": 100,
            "revive_queue_num": 2,
            "transaction_timeout_ms": 300,
            "transaction_check_interval_ms": 3_600_000,
        }
        values.update(kw)
        cfg = BrokerConfig(**values)
        scope = self._slave_scope

        async def run(*, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await run_broker(cfg, task_status=task_status)

        self.slave = await self.nursery.start(run)
        return self.slave


def _master(tmp: Path, key: str, broker_name: str, port: int, ns_addr: str) -> Proc:
    values = {
        **MASTER_BASE,
        **MASTER_SPECIAL,
        # A0's own check must not resolve the halves the tests leave to its slave.
        **({"transactionCheckInterval": 3_600_000} if key == "a0" else {}),
        "brokerName": broker_name,
        "listenPort": port,
        "namesrvAddr": ns_addr,
        "storePathRootDir": str(tmp / key),
    }
    return role_proc(tmp, "broker", key, values)


@asynccontextmanager
async def two_groups(tmp: Path, *, slave: dict[str, Any] | None = None) -> AsyncIterator[Groups]:
    ns_port, a_port, b_port = free_ports(3)
    ns_addr = f"127.0.0.1:{ns_port}"
    procs = {
        "ns": role_proc(tmp, "namesrv", "ns", {"listenPort": ns_port}),
        "a0": _master(tmp, "a0", "broker-a", a_port, ns_addr),
        "b0": _master(tmp, "b0", "broker-b", b_port, ns_addr),
    }
    addrs = {"a0": f"127.0.0.1:{a_port}", "b0": f"127.0.0.1:{b_port}"}
    try:
        procs["ns"].start()
        await procs["ns"].wait_ready()
        for k in ("a0", "b0"):
            procs[k].start()
        for k in ("a0", "b0"):
            await procs[k].wait_ready()
        async with trio.open_nursery() as n:
            g = Groups(tmp, ns_addr, procs, addrs, n)
            try:
                if slave is not None:
                    await g.start_slave(**slave)
                yield g
            except BaseException:
                print(g.logs())
                raise
            finally:
                n.cancel_scope.cancel()
    finally:
        for p in procs.values():  # each by its pid
            p.kill()


# ---- helpers -------------------------------------------------------------------------------


async def create_topic(ns: str, topic: str, *, on: str | None = None, queues: int = 1) -> None:
    """On every master of the cluster, or on the broker at `on`."""
    async with Admin(ns, config=FAST_CLIENT) as admin:
        if on is None:
            await admin.create_topic(topic, cluster=CLUSTER, queue_nums=queues, wait_for_route_s=5)
        else:
            await admin.create_topic(topic, broker_addr=on, queue_nums=queues, wait_for_route_s=5)


async def send_to(ns: str, topic: str, broker_name: str, bodies: list[str]) -> list[int]:
    """Queue offsets of `bodies`, sent to queue 0 of `broker_name`."""
    out = []
    async with Producer("acting-pg", ns, config=FAST_PRODUCER) as p:
        mq = MessageQueue(topic=topic, broker_name=broker_name, queue_id=0)
        for b in bodies:
            out.append((await p.send(topic, b, queue=mq)).queue_offset)
    return out


async def max_offset(addr: str, topic: str, queue_id: int = 0) -> int:
    h = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
    async with RemotingClient() as c:
        r = await c.invoke(addr, RemotingCommand.request(RC.GET_MAX_OFFSET, h.to_ext()))
    if r.code != Resp.SUCCESS:
        return 0
    return GetMaxOffsetResponseHeader.from_ext(r.ext_fields).offset


async def has_topic(addr: str, topic: str) -> bool:
    async with RemotingClient() as c:
        r = await c.invoke(addr, RemotingCommand.request(RC.GET_ALL_TOPIC_CONFIG))
    return r.code == Resp.SUCCESS and topic in json.loads(r.body or b"{}").get(
        "topicConfigTable", {}
    )


async def pull_all(addr: str, broker_name: str, topic: str, queue_id: int) -> list[MessageExt]:
    """Every message of one queue of the broker at `addr`, with a raw PULL."""
    out: list[MessageExt] = []
    offset = 0
    async with RemotingClient() as c:
        while True:
            h = PullMessageRequestHeader(
                consumer_group="acting-test-reader",
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=0x4,
                commit_offset=0,
                suspend_timeout_millis=0,
                subscription="*",
                sub_version=0,
                expression_type="TAG",
            )
            r = await c.invoke(addr, RemotingCommand.request(RC.PULL_MESSAGE, h.to_ext()))
            if r.code != Resp.SUCCESS:
                return out
            got = decode_messages(r.body, broker_name)
            if not got:
                return out
            out += got
            offset = got[-1].queue_offset + 1


async def inject(addr: str, queue_id: int, tag: str, body: bytes, uniq: str) -> None:
    """A revive-topic record sent as an acting slave's escape bridge sends it."""
    h = SendMessageRequestHeaderV2(
        producer_group="InnerProducerGroup_broker-a_1",
        topic=REVIVE_TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties({"TAGS": tag, "UNIQ_KEY": uniq, "WAIT": "false"}),
        reconsume_times=0,
        broker_name="broker-b",
    )
    async with RemotingClient() as c:
        r = await c.invoke(addr, RemotingCommand.request(RC.SEND_MESSAGE_V2, h.to_ext(), body))
    assert r.code == Resp.SUCCESS, r.remark


async def inject_ck(addr: str, ck: CheckPoint, revive_qid: int) -> None:
    await inject(addr, revive_qid, "ck", ck.to_json(), ck.uniq_id())


async def inject_ack(addr: str, ack: AckRecord, revive_qid: int) -> None:
    await inject(addr, revive_qid, "ack", ack.to_json(), ack.uniq_id())


async def pop_from(
    ns: str, group: str, topic: str, broker_name: str, want: int
) -> list[MessageExt]:
    """Pops (and acks) from one broker until `want` messages came, then 0.5 s more."""
    got: list[MessageExt] = []
    async with PopConsumer(group, ns, [topic], config=FAST_CONSUMER) as c:
        with trio.fail_after(20):
            while len(got) < want:
                r = await c.pop(topic, broker_name=broker_name, invisible_time_s=30, poll_time_s=1)
                for m in r.messages:
                    got.append(m)
                    await c.ack(m)
        r = await c.pop(topic, broker_name=broker_name, invisible_time_s=30, poll_time_s=0.5)
        got += r.messages
    return got


# Raw pop requests, for the acting slave (the client sends to what the routes call master).


async def raw_pop(
    c: RemotingClient, addr: str, group: str, topic: str, invisible_ms: int
) -> tuple[RemotingCommand, list[MessageExt]]:
    h = PopMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=-1,
        max_msg_nums=32,
        invisible_time=invisible_ms,
        poll_time=0,
        born_time=int(time.time() * 1000),
        init_mode=0,
        exp_type="TAG",
        exp="*",
        order=False,
        bname="broker-a",
    )
    r = await c.invoke(addr, RemotingCommand.request(RC.POP_MESSAGE, h.to_ext()))
    if r.code != Resp.SUCCESS:
        return r, []
    rh = PopMessageResponseHeader.from_ext(r.ext_fields)
    starts = parse_offset_info(rh.start_offset_info)
    msgs = decode_messages(r.body, "broker-a")
    for m in msgs:  # as PopConsumer.pop builds them
        ck_offset = int(starts.get(f"{retry_flag(m.topic)}@{m.queue.queue_id}", m.queue_offset))
        m.properties["POP_CK"] = build_extra_info(
            ck_offset,
            rh.pop_time,
            rh.invisible_time,
            rh.revive_qid,
            m.topic,
            "broker-a",
            m.queue.queue_id,
            m.queue_offset,
        )
    return r, msgs


async def raw_ack(c: RemotingClient, addr: str, group: str, m: MessageExt) -> RemotingCommand:
    h = AckMessageRequestHeader(
        consumer_group=group,
        topic=m.topic,
        queue_id=m.queue.queue_id,
        extra_info=m.properties["POP_CK"],
        offset=m.queue_offset,
        bname="broker-a",
    )
    return await c.invoke(addr, RemotingCommand.request(RC.ACK_MESSAGE, h.to_ext()))


async def raw_change_invisible(
    c: RemotingClient, addr: str, group: str, m: MessageExt, invisible_ms: int
) -> RemotingCommand:
    h = ChangeInvisibleTimeRequestHeader(
        consumer_group=group,
        topic=m.topic,
        queue_id=m.queue.queue_id,
        extra_info=m.properties["POP_CK"],
        offset=m.queue_offset,
        invisible_time=invisible_ms,
        bname="broker-a",
    )
    return await c.invoke(
        addr, RemotingCommand.request(RC.CHANGE_MESSAGE_INVISIBLETIME, h.to_ext())
    )


async def replicated(slave: Broker, topic: str, n: int, queue_id: int = 0) -> None:
    """The slave has the topic's config and its first `n` messages."""
    store = slave.store.native
    await eventually(
        lambda: (
            slave.topics.get(topic) is not None and store.queue_max_offset(topic, queue_id) >= n
        ),
        15,
    )


# ---- pop -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_master_revives_a_checkpoint_of_another_broker_group_by_remote_pull(
    tmp_path: Path,
) -> None:
    async with two_groups(tmp_path) as g:
        await create_topic(g.ns_addr, "PopXT")
        offs = await send_to(g.ns_addr, "PopXT", "broker-a", ["m0", "m1", "m2", "m3"])
        b0 = g.addrs["b0"]
        now = int(time.time() * 1000)
        # What broker-a's acting slave escapes to B0 after popping m0..m2: one CK naming
        # broker-a, and an ack of m0 in the same revive queue.
        ck = CheckPoint(
            start_offset=offs[0],
            pop_time=now,
            invisible_time=300,
            queue_id=0,
            topic="PopXT",
            cid="xg",
            broker_name="broker-a",
            diffs=[o - offs[0] for o in offs[:3]],
        )
        await inject_ck(b0, ck, 1)

        def ack(offset: int, ck: CheckPoint, broker_name: str) -> AckRecord:
            return AckRecord(
                ack_offset=offset,
                start_offset=ck.start_offset,
                consumer_group=ck.cid,
                topic=ck.topic,
                queue_id=ck.queue_id,
                pop_time=ck.pop_time,
                broker_name=broker_name,
            )

        await inject_ack(b0, ack(offs[0], ck, "broker-a"), 1)
        # An ack of m1 with broker-b's name acks broker-b's CK of that key, not broker-a's.
        await inject_ack(b0, ack(offs[1], ck, "broker-b"), 1)
        got = await pop_from(g.ns_addr, "xg", "PopXT", "broker-b", 2)
        assert sorted(m.body for m in got) == [b"m1", b"m2"]
        for m in got:
            # Read from broker-a by B0, written to B0's own pop retry topic.
            assert m.reconsume_times == 1 and m.properties["ORIGIN_GROUP"] == "xg"
            assert ExtraInfo.parse(m.properties["POP_CK"]).retry
            assert ExtraInfo.parse(m.properties["POP_CK"]).broker_name == "broker-b"
        assert await max_offset(b0, "%RETRY%xg_PopXT") == 2

        # broker-a cannot answer: the CK waits (never dropped), then is revived.
        g.kill("a0")
        ck2 = CheckPoint(
            start_offset=offs[3],
            pop_time=int(time.time() * 1000),
            invisible_time=100,
            queue_id=0,
            topic="PopXT",
            cid="xg",
            broker_name="broker-a",
            diffs=[0],
        )
        await inject_ck(b0, ck2, 0)
        await eventually(lambda: "not readable (attempt 2)" in g.log("b0"), 10)
        assert await max_offset(b0, "%RETRY%xg_PopXT") == 2
        await g.restart("a0")
        got = await pop_from(g.ns_addr, "xg", "PopXT", "broker-b", 1)
        assert [m.body for m in got] == [b"m3"]
        assert await max_offset(b0, "%RETRY%xg_PopXT") == 3


@pytest.mark.timeout(90)
async def test_pop_on_a_real_acting_slave_and_revive_by_another_group_from_that_slave(
    tmp_path: Path,
) -> None:
    c = ActingCluster(
        tmp_path,
        broker={"reviveInterval": 100, "reviveQueueNum": 2, "mappedFileSizeCommitLog": SEGMENT},
    )
    try:
        await c.start()

        async def status(group: str, bid: int, key: str, want: object) -> None:
            with trio.fail_after(30):
                while True:
                    st = await c.status(group, bid)
                    if st is not None and st[key] == want:
                        return
                    await trio.sleep(0.05)

        for group, bid in c.members:
            await status(group, bid, "isolated", False)  # pre-online done
        ns = c.ns_addrs[0]
        async with Admin(ns, config=FAST_CLIENT) as admin:
            await admin.create_topic(
                "PopRT", cluster="ActingCluster", queue_nums=1, wait_for_route_s=10
            )
        await send_to(ns, "PopRT", "broker-a", ["x", "y", "z"])
        slave = c.addr("broker-a", 1)
        with trio.fail_after(15):  # the slave has the messages and the topic's config
            while await max_offset(slave, "PopRT") < 3 or not await has_topic(slave, "PopRT"):
                await trio.sleep(0.05)
        c.proc("broker-a", 0).kill()
        await status("broker-a", 1, "actingMaster", True)
        got: list[MessageExt] = []
        async with PopConsumer("rg", ns, ["PopRT"], config=FAST_CONSUMER) as pc:
            with trio.fail_after(15):
                while len(got) < 3:  # the route shows the acting slave as broker-a's id 0
                    r = await pc.pop("PopRT", broker_name="broker-a", invisible_time_s=1.0)
                    got += r.messages
            assert sorted(m.body for m in got) == [b"x", b"y", b"z"]
            await pc.ack(next(m for m in got if m.body == b"x"))  # acked on the acting slave
        # broker-b holds the CK; it reads y and z back from the acting slave.
        again = await pop_from(ns, "rg", "PopRT", "broker-b", 2)
        assert sorted(m.body for m in again) == [b"y", b"z"]
        assert all(m.reconsume_times == 1 for m in again)
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()  # each process by its pid


@pytest.mark.timeout(60)
async def test_pop_ack_and_lease_change_on_an_acting_slave_go_through_the_escape(
    tmp_path: Path,
) -> None:
    async with two_groups(tmp_path, slave={}) as g:
        a1 = g.slave
        assert a1 is not None
        b0 = g.addrs["b0"]
        await create_topic(g.ns_addr, "PopAT")
        await send_to(g.ns_addr, "PopAT", "broker-a", ["x", "y", "z"])
        await replicated(a1, "PopAT", 3)
        async with RemotingClient() as c:
            # A plain slave serves no pop (and moves no offset).
            r, _ = await raw_pop(c, a1.address, "ag", "PopAT", 1500)
            assert r.code == Resp.SERVICE_NOT_AVAILABLE, r.remark
            assert a1.offsets.query("ag", "PopAT", 0) is None

            g.kill("a0")
            a1.core.state.acting = True  # what the role core sets once A0 is gone
            log_end = a1.store.native.max_offset
            r, msgs = await raw_pop(c, a1.address, "ag", "PopAT", 1500)
            assert r.code == Resp.SUCCESS, r.remark
            by_body = {m.body: m for m in msgs}
            assert sorted(by_body) == [b"x", b"y", b"z"]
            assert a1.offsets.query("ag", "PopAT", 0) == 3  # this broker's own table
            assert (await raw_ack(c, a1.address, "ag", by_body[b"x"])).code == Resp.SUCCESS
            r = await raw_change_invisible(c, a1.address, "ag", by_body[b"y"], 60_000)
            assert r.code == Resp.SUCCESS, r.remark
        assert a1.store.native.max_offset == log_end  # nothing written to the slave's log

        # Every record is on B0, in the revive queue the pop answer named, naming broker-a.
        qid = ExtraInfo.parse(by_body[b"x"].properties["POP_CK"]).revive_qid
        recs = await pull_all(b0, "broker-b", REVIVE_TOPIC, qid)
        kinds = [(m.properties["TAGS"], json.loads(m.body)) for m in recs]
        assert [t for t, _ in kinds] == ["ck", "ack", "ck", "ack"]
        assert all(body["bn"] == "broker-a" for _, body in kinds)
        first_ck, ack_x, lease_ck, ack_y = (body for _, body in kinds)
        assert first_ck["n"] == 3 and first_ck["c"] == "ag" and first_ck["t"] == "PopAT"
        assert ack_x["ao"] == by_body[b"x"].queue_offset
        assert lease_ck["it"] == 60_000 and lease_ck["so"] == by_body[b"y"].queue_offset
        assert ack_y["ao"] == by_body[b"y"].queue_offset

        # B0 revives z (un-acked, lease over) by reading broker-a, which is down: it waits.
        await eventually(lambda: "not readable" in g.log("b0"), 10)
        assert await max_offset(b0, "%RETRY%ag_PopAT") == 0
        await g.restart("a0")
        a1.core.state.acting = False
        got = await pop_from(g.ns_addr, "ag", "PopAT", "broker-b", 1)
        assert [m.body for m in got] == [b"z"]  # x acked, y leased for 60 s
        assert got[0].reconsume_times == 1


@pytest.mark.timeout(60)
async def test_acting_slave_revives_the_dead_masters_checkpoints_and_honours_its_own_acks(
    tmp_path: Path,
) -> None:
    async with two_groups(tmp_path, slave={}) as g:
        a1 = g.slave
        assert a1 is not None
        await create_topic(g.ns_addr, "PopDT")
        # No master but the dead one has the pop retry topic: the acting slave's escape goes
        # to a master routing TBW102, which creates it.
        await send_to(g.ns_addr, "PopDT", "broker-a", ["p", "q"])
        async with PopConsumer("dg", g.ns_addr, ["PopDT"], config=FAST_CONSUMER) as c:
            r = await c.pop("PopDT", broker_name="broker-a", invisible_time_s=3.0)
        assert r.status is PopStatus.FOUND and len(r.messages) == 2
        popped = {m.body: m for m in r.messages}
        revive_qid = ExtraInfo.parse(popped[b"p"].properties["POP_CK"]).revive_qid
        # A0's CK is in A1's copy of the revive topic.
        await replicated(a1, "PopDT", 2)
        await replicated(a1, REVIVE_TOPIC, 1, revive_qid)
        g.kill("a0")
        a1.core.state.acting = True
        await a1.special.change_status(True, g.nursery)  # as acting.py starts them
        try:
            pop = a1.special.pop
            await eventually(lambda: pop.stats()["pending"] == 1, 5)
            async with RemotingClient() as rc:
                r2 = await raw_ack(rc, a1.address, "dg", popped[b"p"])
                assert r2.code == Resp.SUCCESS, r2.remark
            # The ack went to B0, but it resolves the CK here too: only q is revived, once.
            await eventually(lambda: pop.revived >= 1 and pop.stats()["pending"] == 0, 10)
            assert pop.revived == 1
            got = await pop_from(g.ns_addr, "dg", "PopDT", "broker-b", 1)
            assert [m.body for m in got] == [b"q"]
            assert got[0].reconsume_times == 1
        finally:
            await a1.special.change_status(False, g.nursery)


# ---- transactions --------------------------------------------------------------------------


async def commit_check(msg: MessageExt) -> LocalTransactionState:
    return LocalTransactionState.COMMIT_MESSAGE


@pytest.mark.timeout(60)
async def test_check_on_a_slave_hands_an_old_undecided_half_to_another_master(
    tmp_path: Path,
) -> None:
    async with two_groups(tmp_path, slave={}) as g:
        a1 = g.slave
        assert a1 is not None
        txs = a1.special.transactions
        await create_topic(g.ns_addr, "TxAT", on=g.addrs["a0"])
        asked: list[MessageExt] = []

        async def check(msg: MessageExt) -> LocalTransactionState:
            asked.append(msg)
            return LocalTransactionState.COMMIT_MESSAGE

        async with TransactionProducer("atpg", g.ns_addr, check, config=FAST_PRODUCER) as p:
            r = await p.send_message_in_transaction(
                "TxAT", b"undecided", lambda m, a: LocalTransactionState.UNKNOW
            )
            assert r.send_result.queue.broker_name == "broker-a"
            await replicated(a1, HALF_TOPIC, 1)
            # broker-b gets the topic; the producer learns the route and says hello to B0.
            await create_topic(g.ns_addr, "TxAT", on=g.addrs["b0"])
            await p.instance.routes.update("TxAT")
            await p.instance.send_heartbeat_to_all_brokers()

            g.kill("a0")
            g.kill("b0")
            await trio.sleep(0.4)  # older than transactionTimeOut
            # No master to hand it to: the half stays, its progress does not move.
            assert await txs.check_once() == 0
            assert txs.escaped == 0 and not a1.offsets.query(SYS_GROUP, HALF_TOPIC, 0)
            await g.restart("b0")
            # The producer is known to B0 before B0 first checks the half.
            await p.instance.send_heartbeat_to_all_brokers()
            assert await txs.check_once() == 1
            assert txs.escaped == 1 and a1.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 1
            assert txs.checks_sent == 0  # B0 asks the producer, not the slave

            # B0's check asks the producer; its commit lands on B0's TxAT.
            await eventually(lambda: len(asked) >= 1, 15)
            # Time passes for B0's own checks (another process; nothing to wait on): nothing
            # asked or sent again, here or there.
            await trio.sleep(1.0)
            assert await txs.check_once() == 0 and txs.escaped == 1
        [msg] = asked
        assert msg.topic == "TxAT" and msg.body == b"undecided"
        assert msg.msg_id == r.transaction_id
        # The hand-over is not a check: B0's first check is the first one.
        assert msg.properties["TRANSACTION_CHECK_TIMES"] == "1"
        async with PullConsumer("atcg", g.ns_addr, config=FAST_CLIENT) as pc:
            bodies: list[bytes] = []
            with trio.fail_after(10):
                while not bodies:
                    for mq in await pc.fetch_subscribe_queues("TxAT"):
                        if mq.broker_name == "broker-b":
                            res = await pc.pull(mq, "*", 0, 32)
                            bodies += [m.body for m in res.messages]
                    await trio.sleep(0.1)
        assert bodies == [b"undecided"]  # exactly once, on broker-b
        assert a1.store.native.queue_max_offset("TxAT", 0) == 0  # nothing committed on A


@pytest.mark.timeout(60)
async def test_end_transaction_on_an_acting_slave_commits_through_the_escape_once(
    tmp_path: Path,
) -> None:
    # A long transactionTimeOut: the check never hands a half over in this test.
    async with two_groups(tmp_path, slave={"transaction_timeout_ms": 60_000}) as g:
        a1 = g.slave
        assert a1 is not None
        txs = a1.special.transactions
        await create_topic(g.ns_addr, "TxET", on=g.addrs["a0"])

        async def never(msg: MessageExt) -> LocalTransactionState:
            raise AssertionError("not checked in this test")

        async with TransactionProducer("etpg", g.ns_addr, never, config=FAST_PRODUCER) as p:
            results = [
                await p.send_message_in_transaction(
                    "TxET", body, lambda m, a: LocalTransactionState.UNKNOW
                )
                for body in (b"older", b"commit-me")
            ]
        await replicated(a1, HALF_TOPIC, 2)
        await create_topic(g.ns_addr, "TxET", on=g.addrs["b0"])

        def end(i: int, flag: int) -> RemotingCommand:
            sr = results[i].send_result
            _, _, phys = parse_offset_msg_id(sr.offset_msg_id)
            h = EndTransactionRequestHeader(
                producer_group="etpg",
                tran_state_table_offset=sr.queue_offset,
                commit_log_offset=phys,
                commit_or_rollback=flag,
                msg_id=sr.msg_id,
                transaction_id=sr.msg_id,
            )
            return RemotingCommand.request(RC.END_TRANSACTION, h.to_ext())

        commit, rollback = 8, 12
        async with RemotingClient() as c:
            r = await c.invoke(a1.address, end(1, commit))
            assert r.code == Resp.SLAVE_NOT_AVAILABLE, r.remark  # a plain slave
            g.kill("a0")
            a1.core.state.acting = True
            log_end = a1.store.native.max_offset
            r = await c.invoke(a1.address, end(1, commit))
            assert r.code == Resp.SUCCESS, r.remark
            # A check run that stops at the older, undecided half (too young) ...
            assert await txs.check_once() == 0
            # ... and the same answer again: still one commit.
            r = await c.invoke(a1.address, end(1, commit))
            assert r.code == Resp.SUCCESS, r.remark
            r = await c.invoke(a1.address, end(0, rollback))
            assert r.code == Resp.SUCCESS, r.remark
        # The service restarting keeps these in-memory decisions: the slave starting to act
        # for real (its name server noticed a0's death) did so in the middle of this test
        # now and then, and the final check found both halves undecided again.
        await txs.load()
        real = await pull_all(g.addrs["b0"], "broker-b", "TxET", 0)
        assert [m.body for m in real] == [b"commit-me"]
        assert "TRAN_MSG" not in real[0].properties
        assert a1.store.native.max_offset == log_end  # no op record, no message written here
        assert a1.store.native.queue_max_offset(OP_TOPIC, 0) == 0
        # Both resolved in memory: the check passes them, hands nothing over.
        assert await txs.check_once() == 0
        assert txs.escaped == 0 and a1.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 2
        assert await max_offset(g.addrs["b0"], HALF_TOPIC) == 0
