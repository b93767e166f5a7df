"""The name server's route tables (pure)."""

from __future__ import annotations

import json

from rmq_ha.nameserver.routes import RouteTable
from rmq_ha.protocol.models import DataVersion, QueueData


def qd(n: int) -> QueueData:
    return QueueData(read_queue_nums=n, write_queue_nums=n, perm=6)


def reg(t: RouteTable, addr: str, bid: int, now: int, **kw: object) -> object:
    kw.setdefault("topics", {"T": qd(4)})
    return t.register(
        cluster="c",
        addr=addr,
        broker_name="broker-a",
        broker_id=bid,
        now_ms=now,
        **kw,  # type: ignore[arg-type]
    )


def test_master_registration_creates_the_route_in_rocketmq_shape() -> None:
    t = RouteTable()
    reg(t, "127.0.0.1:10911", 0, 0, ha_server_addr="127.0.0.1:10912")
    r = t.route("T")
    assert r is not None
    doc = json.loads(r.to_json())  # standard JSON
    assert doc["queueDatas"] == [
        {
            "brokerName": "broker-a",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicSysFlag": 0,
        }
    ]
    assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert doc["brokerDatas"][0]["cluster"] == "c"
    assert t.route("missing") is None
    assert t.cluster_info().cluster_addr_table == {"c": {"broker-a"}}


def test_slave_registration_returns_the_master_and_does_not_change_topics() -> None:
    t = RouteTable()
    reg(t, "m:1", 0, 0, ha_server_addr="m:2")
    res = reg(t, "s:1", 1, 0, topics={"Other": qd(8)})
    assert (res.master_addr, res.ha_server_addr) == ("m:1", "m:2")  # type: ignore[attr-defined]
    assert t.route("Other") is None
    assert t.member_group("c", "broker-a").broker_addrs == {0: "m:1", 1: "s:1"}


def test_promoted_slave_at_the_same_address_replaces_its_old_id() -> None:
    t = RouteTable()
    reg(t, "m:1", 0, 0)
    reg(t, "s:1", 1, 0)
    t.unregister("m:1")
    reg(t, "s:1", 0, 1)
    assert t.groups["broker-a"].broker_addrs == {0: "s:1"}


def test_expired_brokers_are_removed_with_their_routes() -> None:
    t = RouteTable()
    reg(t, "m:1", 0, 0, timeout_ms=1000)
    reg(t, "s:1", 1, 0, timeout_ms=5000)
    assert t.heartbeat("s:1", 900)
    assert [a for a, _ in t.scan(1001)] == ["m:1"]
    assert t.route("T") is not None, "the slave still serves the group"
    assert [a for a, _ in t.scan(5901)] == ["s:1"]
    assert t.route("T") is None
    info = t.cluster_info()
    assert info.broker_addr_table == {} and info.cluster_addr_table == {}
    assert not t.heartbeat("m:1", 6000), "unknown broker must register again"


def test_topics_update_only_when_the_data_version_changes() -> None:
    t = RouteTable()
    reg(t, "m:1", 0, 0, data_version=DataVersion(counter=1, timestamp=10))
    reg(t, "m:1", 0, 1, data_version=DataVersion(counter=1, timestamp=10), topics={"T": qd(1)})
    assert t.topics["T"]["broker-a"].read_queue_nums == 4, "same version: not re-read"
    assert not t.data_version_changed("m:1", DataVersion(counter=1, timestamp=10), 2)
    assert t.data_version_changed("m:1", DataVersion(counter=2, timestamp=11), 2)
    reg(t, "m:1", 0, 3, data_version=DataVersion(counter=2, timestamp=11), topics={"T": qd(1)})
    assert t.topics["T"]["broker-a"].read_queue_nums == 1


def test_the_later_state_version_keeps_the_master_id() -> None:
    """RocketMQ #6316: an old master that comes back (lower stateVersion) must not take id 0
    from the master elected after it; a newer master does take it."""
    t = RouteTable()
    old, new = "127.0.0.1:1", "127.0.0.1:2"
    t.register(cluster="c", addr=new, broker_name="b", broker_id=0, now_ms=1,
               data_version=DataVersion(state_version=3, timestamp=1, counter=1))  # fmt: skip
    res = t.register(cluster="c", addr=old, broker_name="b", broker_id=0, now_ms=2,
                     data_version=DataVersion(state_version=2, timestamp=2, counter=9))  # fmt: skip
    assert res.refused
    assert t.groups["b"].broker_addrs == {0: new}
    assert old not in t.live
    newer = "127.0.0.1:3"
    res = t.register(cluster="c", addr=newer, broker_name="b", broker_id=0, now_ms=3,
                     data_version=DataVersion(state_version=4, timestamp=3, counter=1))  # fmt: skip
    assert not res.refused and t.groups["b"].broker_addrs[0] == newer


def _addrs_perm(t: RouteTable, topic: str, acting: bool) -> tuple[dict[int, str], int]:
    r = t.route(topic, acting_master=acting)
    assert r is not None
    return dict(r.broker_datas[0].broker_addrs), r.queue_datas[0].perm


def test_acting_master_route_rewrite_and_min_id_changes() -> None:
    """RIP-32: the master goes, the group turns read-only and (with supportActingMaster) its
    smallest-id replica shows as id 0; min-id changes name who to tell; the master's return
    restores write permission and the real ids."""
    t = RouteTable()
    topics = {"T": qd(4), "rmq_sys_SYNC_BROKER_MEMBER_broker-a": qd(1)}
    first = reg(t, "m:1", 0, 0, topics=topics, enable_acting_master=True)
    assert first.min_change is not None and first.min_change.recipients == ("m:1",)  # type: ignore[attr-defined]
    joined = reg(t, "s:1", 1, 0, topics=topics, enable_acting_master=True)
    assert joined.min_change is None, "a larger id does not change the minimum"  # type: ignore[attr-defined]
    assert _addrs_perm(t, "T", True) == ({0: "m:1", 1: "s:1"}, 6)
    change = t.unregister("m:1")
    assert change is not None
    assert (change.min_id, change.min_addr, change.offline_addr, change.recipients) == (
        1,
        "s:1",
        "m:1",
        ("s:1",),
    )
    assert _addrs_perm(t, "T", True) == ({0: "s:1"}, 4), "read-only slave shown as id 0"
    assert _addrs_perm(t, "T", False) == ({1: "s:1"}, 4), "no rewrite without support"
    sync = _addrs_perm(t, "rmq_sys_SYNC_BROKER_MEMBER_broker-a", True)
    assert sync[0] == {1: "s:1"}, "the member-group topic keeps the real ids"
    back = reg(t, "m:1", 0, 10, topics=topics, enable_acting_master=True)
    mc = back.min_change  # type: ignore[attr-defined]
    assert mc is not None and (mc.min_id, mc.recipients) == (0, ("s:1",))
    assert _addrs_perm(t, "T", True) == ({0: "m:1", 1: "s:1"}, 6)


def test_a_prime_slave_registers_its_topics_read_only() -> None:
    t = RouteTable()
    reg(t, "s:1", 1, 0, topics={"T": qd(4)}, enable_acting_master=True)
    assert _addrs_perm(t, "T", True) == ({0: "s:1"}, 4)
    t2 = RouteTable()
    reg(t2, "s:1", 1, 0, topics={"T": qd(4)}, enable_acting_master=False)
    assert t2.route("T") is None, "without acting master a slave's topics are not routed"


def test_a_stall_of_the_name_server_is_credited_to_the_brokers() -> None:
    """clock.StallCredit: the time a paused name server did not run does not expire its
    brokers (their heartbeats wait in the socket buffers); one that really stopped beating
    expires a timeout after the resume."""
    from rmq_ha.clock import StallCredit

    t = RouteTable()
    stalls = StallCredit(stall_ms=1000)
    reg(t, "m:1", 0, 0, timeout_ms=1500)
    for now in (0, 200, 400):
        assert stalls.observe(now) == 0
    lost = stalls.observe(10_400)  # paused for 10 s
    assert lost == 10_000 and stalls.stalls == 1
    t.credit(lost, 10_400)
    assert t.scan(10_400) == [], "expired by the name server's own pause"
    assert [a for a, _ in t.scan(11_901)] == ["m:1"], "no heartbeat since: expires after all"


def test_write_perm_is_wiped_and_added_per_broker_group() -> None:
    """wipeWritePerm clears the write bit of every queue data of one group (not another's);
    addWritePerm sets read+write (6) whatever the perm was, as RocketMQ; a registration with
    the same data version keeps the wipe, a changed one brings the broker's perms back."""
    t = RouteTable()
    dv = DataVersion(counter=1, timestamp=10)
    reg(t, "m:1", 0, 0, data_version=dv, topics={"T": qd(4), "U": qd(2)})
    t.register(cluster="c", addr="b:1", broker_name="broker-b", broker_id=0, now_ms=0,
               topics={"T": qd(4)})  # fmt: skip
    assert t.set_write_perm("broker-a", writable=False) == 2
    assert (t.topics["T"]["broker-a"].perm, t.topics["U"]["broker-a"].perm) == (4, 4)
    assert t.topics["T"]["broker-b"].perm == 6
    reg(t, "m:1", 0, 1, data_version=dv, topics={"T": qd(4), "U": qd(2)})
    assert t.topics["T"]["broker-a"].perm == 4, "same data version: the wipe stays"
    t.topics["U"]["broker-a"].perm = 0
    assert t.set_write_perm("broker-a", writable=True) == 2
    assert (t.topics["T"]["broker-a"].perm, t.topics["U"]["broker-a"].perm) == (6, 6)
    assert t.set_write_perm("broker-a", writable=False) == 2
    reg(t, "m:1", 0, 2, data_version=DataVersion(counter=2, timestamp=11),
        topics={"T": qd(4), "U": qd(2)})  # fmt: skip
    assert t.topics["T"]["broker-a"].perm == 6
    assert t.set_write_perm("nobody", writable=False) == 0
