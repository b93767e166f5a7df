"""The acting-master topology's plan, how "the master" is resolved there, and the pure parts
of the delay / transaction / pop workloads (plans, the check listener, pop reads)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from rmq_jepsen import generator as gen
from rmq_jepsen.control import Control, Host
from rmq_jepsen.db import DB, TOPOLOGIES, ClusterView, Timing, plan_roles
from rmq_jepsen.state import StateDir
from rmq_jepsen.workload import (
    WorkloadOptions,
    delay_levels_ms,
    parse_workloads,
    pop_read,
    txn_check_answer,
)

from rmq_ha.client import LocalTransactionState, MessageExt, MessageQueue
from rmq_ha.protocol.pop import build_extra_info

pytestmark = pytest.mark.timeout(30)

AM = TOPOLOGIES["acting-master"]


def hosts(n: int) -> list[Host]:
    return [Host(name=f"n{i}", address=f"10.0.0.{10 + i}") for i in range(1, n + 1)]


def brokers_of(n: int) -> dict[str, Any]:
    return {r.name: r for r in plan_roles(AM, hosts(n), Timing()) if r.kind == "broker"}


def test_acting_master_plan_configures_name_servers_and_brokers():
    roles = plan_roles(AM, hosts(6), Timing())
    ns = [r for r in roles if r.kind == "namesrv"]
    assert [r.node for r in ns] == ["n1", "n2"]
    for r in ns:
        assert r.values["supportActingMaster"] == "true"
        assert r.values["notifyMinBrokerIdChanged"] == "true"
    b = {r.name: r for r in roles if r.kind == "broker"}
    assert {n: r.node for n, r in b.items()} == {
        "broker-a-0": "n3",
        "broker-a-1": "n4",
        "broker-b-0": "n5",
        "broker-b-1": "n6",
    }
    m, s = b["broker-a-0"].values, b["broker-a-1"].values
    assert (m["brokerId"], m["brokerRole"]) == (0, "SYNC_MASTER")
    assert (s["brokerId"], s["brokerRole"]) == (1, "SLAVE")
    for v in (m, s):
        assert v["brokerName"] == "broker-a"
        for key, want in {
            "enableSlaveActingMaster": "true",
            "enableRemoteEscape": "true",
            "totalReplicas": 2,
            "compatibleWithOldNameSrv": "false",
            "brokerNotActiveTimeoutMillis": 4000,
            "brokerHeartbeatInterval": 1000,
            "syncBrokerMemberGroupPeriod": 1000,
            "lockInStrictMode": "false",
            "fenceWhenIsolated": "true",
            "messageDelayLevel": "1s 2s 3s 4s 5s 10s 30s 1m",
            "transactionTimeOut": 2000,
            "transactionCheckInterval": 2000,
            "reviveInterval": 500,
        }.items():
            assert v[key] == want, key
    # the other topologies get the special-message timings but not the acting keys
    classic = [r for r in plan_roles(TOPOLOGIES["classic"], hosts(5), Timing()) if r.group]
    assert all("enableSlaveActingMaster" not in r.values for r in classic)
    assert all(r.values["reviveInterval"] == 500 for r in classic)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
def test_one_master_down_leaves_its_slave_and_the_other_master(n):
    """Killing or isolating the node of either master never takes its own slave or the
    other group's master with it."""
    b = brokers_of(n)
    for g, other in (("a", "b"), ("b", "a")):
        master = b[f"broker-{g}-0"].node
        assert b[f"broker-{g}-1"].node != master
        assert b[f"broker-{other}-0"].node != master
    if n >= 6:
        assert len({r.node for r in b.values()}) == 4
        assert not {r.node for r in b.values()} & {"n1", "n2"}  # no name server beside


@dataclass
class FakeBrokerData:
    broker_addrs: dict[int, str]


@dataclass
class FakeClusterInfo:
    broker_addr_table: dict[str, FakeBrokerData] = field(default_factory=dict)


def test_the_master_is_the_configured_id_0_never_a_slave_acting_for_it(tmp_path, monkeypatch):
    db = DB(Control(hosts(6)), AM, state=StateDir(tmp_path / "state"))
    addr = {r.name: f"{db.host(r).address}:{r.port}" for r in db.brokers()}
    info = FakeClusterInfo(
        {
            # broker-a's master is gone and its slave is shown as id 0 (acting)
            "broker-a": FakeBrokerData({0: addr["broker-a-1"]}),
            "broker-b": FakeBrokerData({0: addr["broker-b-0"], 1: addr["broker-b-1"]}),
        }
    )

    class FakeAdmin:
        def __init__(self, *a: Any, **kw: Any) -> None:
            pass

        async def __aenter__(self) -> FakeAdmin:
            return self

        async def __aexit__(self, *exc: Any) -> None:
            return None

        async def cluster_info(self) -> FakeClusterInfo:
            return info

    import rmq_ha.client

    monkeypatch.setattr(rmq_ha.client, "Admin", FakeAdmin)
    got = trio.run(ClusterView(db).masters)
    assert {g: r.name if r else None for g, r in got.items()} == {
        "broker-a": None,
        "broker-b": "broker-b-0",
    }


def test_transaction_plans_are_a_function_of_the_value():
    plans = Counter(gen.txn_plan(v) for v in range(4000))
    total = sum(w for _, w in gen.TXN_PLAN_WEIGHTS)
    for plan, w in gen.TXN_PLAN_WEIGHTS:
        assert abs(plans[plan] / 4000 - w / total) < 0.03, plans
    assert [gen.txn_plan(v) for v in range(50)] == [gen.txn_plan(v) for v in range(50)]
    assert gen.txn_value_of_key(gen.txn_key(1234)) == 1234
    assert gen.txn_value_of_key("k7") is None and gen.txn_value_of_key(None) is None


def test_the_check_listener_answers_the_fate_then_the_plan():
    commit, rollback, unknown = (
        LocalTransactionState.COMMIT_MESSAGE,
        LocalTransactionState.ROLLBACK_MESSAGE,
        LocalTransactionState.UNKNOW,
    )
    c = next(v for v in range(100) if gen.txn_plan(v) == "commit")
    uc = next(v for v in range(100) if gen.txn_plan(v) == "unknown-commit")
    ur = next(v for v in range(100) if gen.txn_plan(v) == "unknown-rollback")
    fates: dict[int, str | None] = {c: None, uc: "unknown-commit"}
    assert txn_check_answer(fates, gen.txn_key(c)) is unknown  # half still in flight
    assert txn_check_answer(fates, gen.txn_key(uc)) is commit
    fates[c] = "rollback"  # the half was stored with a non-OK status: rolled back
    assert txn_check_answer(fates, gen.txn_key(c)) is rollback
    assert txn_check_answer({}, gen.txn_key(ur)) is rollback  # never decided: the plan
    assert txn_check_answer({}, gen.txn_key(uc)) is commit
    assert txn_check_answer({}, "not-ours") is unknown
    assert txn_check_answer({}, None) is unknown


def test_workload_kinds_topics_and_delay_levels():
    assert parse_workloads("delay,transaction,pop") == ("delay", "transaction", "pop")
    with pytest.raises(ValueError, match="unknown workload"):
        parse_workloads("delay,timer")
    o = WorkloadOptions(kinds=("pop", "admin", "delay"))
    assert o.send_kinds == ["delay", "pop"]
    assert o.topics == {"delay": "RmqJepsenDelay", "pop": "RmqJepsenPop"}
    assert WorkloadOptions(kinds=("admin",)).topics == {"queue": "RmqJepsenQueue"}
    assert delay_levels_ms(Timing().delay_levels) == (
        1000,
        2000,
        3000,
        4000,
        5000,
        10_000,
        30_000,
        60_000,
    )
    rng = random.Random(1)
    acts = Counter(gen.pop_action(rng) for _ in range(2000))
    assert set(acts) == {"ack", "skip", "change-ack", "change-skip"}
    assert 1350 < acts["ack"] < 1650, acts  # 15 of 20


def test_a_popped_retry_message_is_read_where_it_was_popped():
    extra = build_extra_info(3, 1000, 3000, 0, "%RETRY%g_T", "broker-b", 0, 7)
    m = MessageExt(
        topic="T",
        body=b"42",
        properties={"POP_CK": extra},
        queue=MessageQueue("%RETRY%g_T", "broker-b", 0),
        queue_offset=7,
        commit_log_offset=0,
        store_host="127.0.0.1:1",
        born_host="127.0.0.1:2",
        born_timestamp_ms=0,
        store_timestamp_ms=0,
        reconsume_times=1,
        sys_flag=0,
        flag=0,
    )
    r = pop_read(m, "g")
    assert (r.topic, r.broker, r.queue_id, r.queue_offset, r.value) == (
        "%RETRY%g_T",
        "broker-b",
        0,
        7,
        42,
    )


@pytest.mark.parametrize(
    ("error", "type_"),
    [("route", "fail"), ("timeout", "info")],
)
async def test_a_failed_half_send_records_its_plan_on_the_invoke_only(tmp_path, error, type_):
    """Fault probe D1: a transactional send that failed before its half was stored (no route,
    a slave refusing the put) completed with the invoke's value, plan included: a `fail` with
    a committing `txn`, a record no producer writes, so the checker failed every transaction
    campaign with such a send (333 in one run, nothing lost). docs/history.md: a failed half
    send has `txn` only on its invoke."""
    import json

    from rmq_jepsen.recorder import Recorder
    from rmq_jepsen.workload import Workloads

    from rmq_ha import history as h
    from rmq_ha.client.errors import RouteNotFoundError

    class FakeDB:
        def namesrv_addr(self) -> str:
            return "127.0.0.1:1"

    class FailingProducer:
        async def send_message_in_transaction(self, *a: Any, **kw: Any) -> Any:
            if error == "route":
                raise RouteNotFoundError("no route info of this topic: T", "T")
            raise trio.TooSlowError

    rec = Recorder(tmp_path / "history.jsonl")
    w = Workloads(WorkloadOptions(kinds=("transaction",)), FakeDB(), None, rec)  # type: ignore[arg-type]
    w._txp = FailingProducer()  # type: ignore[assignment]
    plans = set()
    for _ in range(25):  # every plan comes up (11/20 commit)
        await w._send_txn(0, "T")
    rec.close()
    ops = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    for inv, done in zip(ops[::2], ops[1::2], strict=True):
        assert inv["type"] == "invoke" and inv["value"]["txn"] is not None
        plans.add(inv["value"]["txn"])
        assert done["type"] == type_
        assert done["value"].get("txn") is None, done
    assert {"commit", "rollback"} <= plans
    assert len(list(h.read(tmp_path / "history.jsonl"))) == len(ops)
