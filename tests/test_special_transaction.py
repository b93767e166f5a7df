"""Transactional messages (broker/special/transaction.py) with the Python TransactionProducer:
commit, rollback, an undecided half checked through CHECK_TRANSACTION_STATE and then
committed, a half checked transactionCheckMax times, END_TRANSACTION's checks, and the
check on a slave handing halves over (the acting-master cases: test_special_acting.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from rmq_ha._native import decode_stored_record
from rmq_ha.broker.core import Role
from rmq_ha.broker.special.base import InnerMessage, PutResult
from rmq_ha.broker.special.transaction import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC
from rmq_ha.client import (
    LocalTransactionState,
    Message,
    MessageExt,
    TransactionProducer,
)
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import EndTransactionRequestHeader
from rmq_ha.protocol.message import decode_properties, parse_offset_msg_id
from specialutil import SpecialEnv, eventually, special_cluster
from test_client_cluster import FAST_PRODUCER, create_topic

pytestmark = pytest.mark.timeout(60)

FAST_CHECKS = {"transaction_timeout_ms": 300, "transaction_check_interval_ms": 200}


def records(env: SpecialEnv, topic: str, queue_id: int = 0) -> list[dict[str, object]]:
    store = env.broker.store.native
    out = []
    for i in range(
        store.queue_min_offset(topic, queue_id), store.queue_max_offset(topic, queue_id)
    ):
        phys, _, _ = store.queue_unit(topic, queue_id, i)
        out.append(decode_stored_record(store.read_record(phys).tobytes()))
    return out


def bodies(env: SpecialEnv, topic: str) -> list[bytes]:
    tc = env.broker.topics.get(topic)
    n = tc.read_queue_nums if tc is not None else 1
    return sorted(r["body"] for q in range(n) for r in records(env, topic, q))  # type: ignore[misc]


async def never_asked(msg: MessageExt) -> LocalTransactionState:
    raise AssertionError(f"unexpected check of {msg.msg_id}")


@pytest.mark.timeout(30)
async def test_commit_and_rollback(tmp_path: Path) -> None:
    async with special_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "TxT", queues=2)
        seen_during_local: list[list[bytes]] = []

        def execute(msg: Message, arg: object) -> LocalTransactionState:
            # Half stored, nothing visible on the real topic yet.
            seen_during_local.append(bodies(env, "TxT"))
            assert isinstance(arg, LocalTransactionState)
            return arg

        async with TransactionProducer("tpg", env.namesrv, never_asked, config=FAST_PRODUCER) as p:
            ok = await p.send_message_in_transaction(
                "TxT", b"commit-me", execute, LocalTransactionState.COMMIT_MESSAGE, tags="T1"
            )
            no = await p.send_message_in_transaction(
                "TxT", b"roll-me-back", execute, LocalTransactionState.ROLLBACK_MESSAGE
            )
            assert ok.end_error is None and no.end_error is None
            assert ok.local_state is LocalTransactionState.COMMIT_MESSAGE
            await eventually(lambda: env.max_offset(OP_TOPIC) == 2, 5)
        assert seen_during_local == [[], [b"commit-me"]]  # the half itself is never visible
        assert bodies(env, "TxT") == [b"commit-me"]
        [real] = [r for q in range(2) for r in records(env, "TxT", q) if r["body"] == b"commit-me"]
        props = decode_properties(real["properties"])  # type: ignore[arg-type]
        assert "TRAN_MSG" not in props and "REAL_TOPIC" not in props and props["TAGS"] == "T1"
        assert props["PGROUP"] == "tpg" and props["UNIQ_KEY"] == ok.transaction_id
        # the transaction id rides with the half and the committed message (RocketMQ's
        # parseHalfMessageInner keeps it through the commit)
        assert props["__transactionId__"] == ok.transaction_id
        assert int(real["sys_flag"]) & 0xC == 0x8  # type: ignore[call-overload]
        halves = records(env, HALF_TOPIC)
        assert [h["body"] for h in halves] == [b"commit-me", b"roll-me-back"]
        assert real["prepared_txn_offset"] == halves[0]["physical_offset"]
        ops = records(env, OP_TOPIC)
        assert sorted(o["body"] for o in ops) == [b"0", b"1"]  # type: ignore[type-var]
        # The check service passes resolved halves without asking anyone.
        assert await env.broker.special.transactions.check_once() == 0


@pytest.mark.timeout(30)
async def test_undecided_half_is_checked_then_committed(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, **FAST_CHECKS) as env:
        await create_topic(env.namesrv, "TxCheckT", queues=1)
        asked: list[MessageExt] = []

        async def check(msg: MessageExt) -> LocalTransactionState:
            asked.append(msg)
            return LocalTransactionState.COMMIT_MESSAGE

        async with TransactionProducer("tpg", env.namesrv, check, config=FAST_PRODUCER) as p:
            r = await p.send_message_in_transaction(
                "TxCheckT", b"undecided", lambda m, a: LocalTransactionState.UNKNOW
            )
            assert r.local_state is LocalTransactionState.UNKNOW
            assert env.max_offset("TxCheckT") == 0  # not before the check
            await eventually(lambda: env.max_offset("TxCheckT") == 1, 10)
            assert p.checks == {"COMMIT_MESSAGE": 1}
        [msg] = asked
        # The check carries the message as the producer sent it (real topic, its id).
        assert msg.topic == "TxCheckT" and msg.body == b"undecided"
        assert msg.msg_id == r.transaction_id
        assert msg.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert bodies(env, "TxCheckT") == [b"undecided"]
        # Two more check runs: nothing left to ask, nothing committed twice.
        txs = env.broker.special.transactions
        runs = txs.runs
        await eventually(lambda: txs.runs >= runs + 2, 10)
        assert len(asked) == 1 and bodies(env, "TxCheckT") == [b"undecided"]


@pytest.mark.timeout(30)
async def test_half_checked_transaction_check_max_times_is_discarded(tmp_path: Path) -> None:
    async with special_cluster(tmp_path, transaction_check_max=2, **FAST_CHECKS) as env:
        await create_topic(env.namesrv, "TxMaxT", queues=1)
        asked = 0

        def check(msg: MessageExt) -> LocalTransactionState:
            nonlocal asked
            asked += 1
            return LocalTransactionState.UNKNOW

        async with TransactionProducer("tpg", env.namesrv, check, config=FAST_PRODUCER) as p:
            await p.send_message_in_transaction(
                "TxMaxT", b"forever", lambda m, a: LocalTransactionState.UNKNOW
            )
            await eventually(lambda: env.max_offset(CHECK_MAX_TOPIC) == 1, 10)
        assert asked == 2
        assert env.max_offset("TxMaxT") == 0
        assert env.broker.special.transactions.discarded == 1


@pytest.mark.timeout(30)
async def test_end_transaction_checks_the_half_and_commits_once(tmp_path: Path) -> None:
    async with special_cluster(tmp_path) as env:
        await create_topic(env.namesrv, "TxEndT", queues=1)

        def keep(msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        async with TransactionProducer("tpg", env.namesrv, never_asked, config=FAST_PRODUCER) as p:
            r = await p.send_message_in_transaction("TxEndT", b"once", keep)
        sr = r.send_result
        _, _, phys = parse_offset_msg_id(sr.offset_msg_id)

        def end(**kw: object) -> RemotingCommand:
            fields: dict[str, object] = {
                "producer_group": "tpg",
                "tran_state_table_offset": sr.queue_offset,
                "commit_log_offset": phys,
                "commit_or_rollback": 8,
                "msg_id": sr.msg_id,
                "transaction_id": sr.msg_id,
            }
            fields.update(kw)
            h = EndTransactionRequestHeader(**fields)  # type: ignore[arg-type]
            return RemotingCommand.request(RC.END_TRANSACTION, h.to_ext())

        async with RemotingClient() as c:
            bad = await c.invoke(env.addr, end(producer_group="other"))
            assert bad.code == Resp.SYSTEM_ERROR and "group" in (bad.remark or "")
            bad = await c.invoke(env.addr, end(tran_state_table_offset=5))
            assert bad.code == Resp.SYSTEM_ERROR and "offset" in (bad.remark or "")
            bad = await c.invoke(env.addr, end(commit_log_offset=1 << 40))
            assert bad.code == Resp.SYSTEM_ERROR
            assert env.max_offset("TxEndT") == 0
            for _ in range(2):
                ok = await c.invoke(env.addr, end())
                assert ok.code == Resp.SUCCESS, ok.remark
            rollback_after_commit = await c.invoke(env.addr, end(commit_or_rollback=12))
            assert rollback_after_commit.code == Resp.SUCCESS
        assert bodies(env, "TxEndT") == [b"once"]


class RecordingEscape:
    """Stands for the escape bridge of a slave: records each put; refuses the first
    `refuse` calls as a dead target would."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.puts: list[list[InnerMessage]] = []

    async def put(self, msgs: Sequence[InnerMessage]) -> PutResult:
        self.puts.append(list(msgs))
        if self.refuse > 0:
            self.refuse -= 1
            return PutResult(Resp.SYSTEM_ERROR, "remote escape failed")
        return PutResult(Resp.SUCCESS, None, (), tuple(range(len(msgs))))


@pytest.mark.timeout(30)
async def test_the_check_on_a_slave_hands_halves_over_and_keeps_its_place_on_failure(
    tmp_path: Path,
) -> None:
    """RIP-32: on a slave the check sends an undecided old half, and one checked
    transactionCheckMax times, whole through the escape (another master checks or discards
    it), writes no copy, asks no producer; a refused hand-over keeps the half progress."""
    async with special_cluster(
        tmp_path,
        transaction_check_max=3,
        transaction_timeout_ms=300,
        transaction_check_interval_ms=3_600_000,
    ) as env:
        await create_topic(env.namesrv, "TxSlaveT", queues=1)
        async with TransactionProducer("tpg", env.namesrv, never_asked, config=FAST_PRODUCER) as p:
            for body, props in (
                (b"old", {}),
                (b"checked-enough", {"TRANSACTION_CHECK_TIMES": "3"}),
            ):
                await p.send_message_in_transaction(
                    "TxSlaveT", body, lambda m, a: LocalTransactionState.UNKNOW, properties=props
                )
        await trio.sleep(0.4)  # older than transactionTimeOut
        broker = env.broker
        txs = broker.special.transactions
        fake = RecordingEscape(refuse=1)
        broker.special.escape = fake
        broker.core.state.role = Role.SLAVE  # a slave (acting for its master)
        try:
            assert await txs.check_once() == 0
            assert len(fake.puts) == 1 and txs.escaped == 0
            assert not broker.offsets.query("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0)
            assert await txs.check_once() == 2
        finally:
            broker.core.state.role = Role.MASTER
        handed = [msgs[0] for msgs in fake.puts[1:]]
        assert [m.body for m in handed] == [b"old", b"checked-enough"]
        for m in handed:
            # The half as stored: the escape turns it back into a half of its real topic.
            assert m.topic == HALF_TOPIC
            assert m.properties["REAL_TOPIC"] == "TxSlaveT" and m.properties["PGROUP"] == "tpg"
        assert "TRANSACTION_CHECK_TIMES" not in handed[0].properties  # not a check
        assert handed[1].properties["TRANSACTION_CHECK_TIMES"] == "3"
        assert txs.escaped == 2 and txs.checks_sent == 0 and txs.discarded == 0
        assert broker.offsets.query("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 2
        assert env.max_offset(HALF_TOPIC) == 2 and env.max_offset(CHECK_MAX_TOPIC) == 0
