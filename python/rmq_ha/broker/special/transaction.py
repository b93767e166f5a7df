"""Transactional messages: half messages, END_TRANSACTION and the check service (RocketMQ's
TransactionalMessageServiceImpl, EndTransactionProcessor, TransactionalMessageCheckService).

* A send with TRAN_MSG=true (the producer also sets the prepared sysflag and PGROUP) is stored
  on RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC/REAL_QID (`Peers.route`):
  consumers of the real topic do not see it.
* END_TRANSACTION names the half by commitlog offset and queue offset (from the send answer,
  or from a check). Commit writes the real message (sysflag COMMIT, TRAN_MSG and REAL_* gone,
  DELAY still honoured) and then an op record; rollback writes only the op record. Op records
  go to RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, tag "d", body = the resolved half queue offsets
  ("o1,o2"), and carry the transaction key (UNIQ_KEY) in `__transactionId__`.
* The check service runs every transactionCheckInterval. It reads the op queue, then the half
  queue from its progress: a resolved half is passed; an undecided one older than
  transactionTimeOut (or CHECK_IMMUNITY_TIME_IN_SECONDS for its first check) is written again
  at the end of the half queue with TRANSACTION_CHECK_TIMES + 1, and the producer group (any
  live connection of it) gets CHECK_TRANSACTION_STATE for the new copy, whose answer is an
  END_TRANSACTION from the check; a half checked transactionCheckMax times goes to
  TRANS_CHECK_MAX_TIME_TOPIC. The first half too young stops the run (later ones are younger).
* Progress is two consumer offsets of group CID_RMQ_SYS_TRANS (RocketMQ's): on the half queue
  (the first half not passed) and on the op queue (the oldest op record that still resolves a
  half at or after the half progress), in consumerOffset.json.

Duplicates: a commit for a transaction already resolved (by key) writes nothing, so a late
answer for an old copy plus an answer for its re-checked copy commit once. The key memory is
in RAM and rebuilt from the op queue on start; a restart between a re-check and a late answer
for the older copy can still commit twice (RocketMQ has the same window, wider).

On a slave acting for a dead master (RIP-32; TransactionalMessageServiceImpl.check on a slave
escapes the half). The slave's half and op queues are copies of the master's and must not
fork, and a CHECK_TRANSACTION_STATE sent from here would be answered against offsets no
master holds. So, while this broker is not the master:

* the check passes resolved halves as always; a half it would check (undecided and old
  enough, or checked transactionCheckMax times) is handed over whole: `escape.put([half])`
  sends it to another broker group's master as a half of its real topic (TRAN_MSG, PGROUP,
  UNIQ_KEY and check times kept), which parks it in its own half queue and checks the producer
  itself. The half progress moves past it only once that send succeeded; a failed send stops
  the run (tried again next interval);
* END_TRANSACTION (only on the acting slave; a plain slave answers SLAVE_NOT_AVAILABLE)
  commits through the escape (the real message goes to another master); the op record cannot
  be written (the escape refuses op records on a slave), so the decision is kept in memory
  (`_removed` / `_resolved`, and `_unwritten` until the check has passed the half): the check
  passes that half instead of handing it over.

At-least-once window. What the acting slave resolved or handed over is recorded only in its
memory and in its half progress (a consumer offset). A returning master that does not take
that progress back (pre-online takes the newer offsets), or an op record the dead master wrote
but never replicated, makes the master check such a half again: the producer's answer
decides, so a committed transaction can be delivered twice (once from the other master or the
acting slave's commit, once from the master), never lost. The same holds for an
END_TRANSACTION that reaches the acting slave after the check handed its half over: it
commits here, and the other master commits again if the producer answers its check with
commit.
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from rmq_ha._native import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_stored_record,
)
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.special.base import (
    TRANSACTION_TYPE_MASK,
    InnerMessage,
    Peers,
    PutResult,
    SpecialService,
    real_destination,
)
from rmq_ha.broker.special.records import (
    Record,
    encode_message_ext,
    progress_within,
    read_queue,
)
from rmq_ha.clock import wall_ms
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rmq_ha.protocol.message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    encode_properties,
    offset_msg_id,
)

log = logging.getLogger(__name__)

HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
#: MixAll.CID_SYS_RMQ_TRANS: the group whose offsets are the check progress.
SYS_GROUP: Final = "CID_RMQ_SYS_TRANS"
#: TransactionalMessageUtil.REMOVE_TAG.
REMOVE_TAG: Final = "d"
#: MessageConst.PROPERTY_TRANSACTION_ID.
PROPERTY_TRANSACTION_ID: Final = "__transactionId__"
#: Records one look at a queue reads.
BATCH: Final = 64


class TransactionService(SpecialService):
    name = "transaction-check"

    def __init__(self, ports: Ports, special: Peers) -> None:
        super().__init__()
        self.ports = ports
        self.special = special
        # END_TRANSACTION and the check both read-then-write the resolution state; one at a
        # time, so two answers for one transaction cannot both commit.
        self._lock = trio.Lock()
        #: half queue offset -> offset of the op record resolving it (-1: write failed).
        self._removed: dict[int, int] = {}
        #: transaction key -> offset of the op record resolving it (-1: write failed).
        self._resolved: dict[str, int] = {}
        #: transaction key -> half queue offset of its newest re-checked copy.
        self._copies: dict[str, int] = {}
        #: Decisions taken on an acting slave, which cannot write op records: transaction key
        #: -> the largest half queue offset resolved (kept until the check passed it).
        self._unwritten: dict[str, int] = {}
        #: Next op record to read; None: from the persisted progress.
        self._op_read: int | None = None
        self.checks_sent = 0
        #: Runs over the half queue so far (progress a test or a metric can follow).
        self.runs = 0
        self.discarded = 0
        #: Halves handed over to another master by the check on a slave (RIP-32).
        self.escaped = 0

    def system_topics(self) -> dict[str, int]:
        return {HALF_TOPIC: 1, OP_TOPIC: 1, CHECK_MAX_TOPIC: 1}

    def register(self, d: Dispatcher) -> None:
        d.register(RC.END_TRANSACTION, self.end_transaction)

    def to_half(self, msg: InnerMessage) -> InnerMessage:
        """TransactionalMessageBridge.parseHalfMessageInner: the transaction id
        (``__transactionId__`` = UNIQ_KEY) rides with the half, its checks and the committed
        message, as RocketMQ's does."""
        uniq = msg.properties.get(PROPERTY_UNIQ_KEY)
        if uniq:
            msg.properties[PROPERTY_TRANSACTION_ID] = uniq
        msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
        msg.properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic, msg.queue_id = HALF_TOPIC, 0
        msg.sys_flag &= ~TRANSACTION_TYPE_MASK
        return msg

    # ---- END_TRANSACTION ---------------------------------------------------------------------

    async def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = EndTransactionRequestHeader.from_ext(cmd.ext_fields)
        ports = self.ports
        if not (ports.role.is_master or ports.role.acting):
            # EndTransactionProcessor: a slave that is not acting for its master refuses.
            return cmd.response(
                Resp.SLAVE_NOT_AVAILABLE,
                "the broker is a slave and not acting as master, so end transaction is forbidden",
            )
        ttype = h.commit_or_rollback & TRANSACTION_TYPE_MASK
        if ttype not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            # UNKNOW: nothing to do now; the check service asks again later.
            return cmd.response(Resp.SUCCESS, "transaction state unknown, checked later")
        async with self._lock:
            try:
                rec = decode_stored_record(
                    self.ports.store.native.read_record(h.commit_log_offset).tobytes()
                )
            except Exception as e:  # out of range, not a record
                return cmd.response(
                    Resp.SYSTEM_ERROR, f"Find prepared transaction message failed: {e}"
                )
            why = self._check_prepared(rec, h)
            if why is not None:
                return cmd.response(Resp.SYSTEM_ERROR, why)
            half_off = _int(rec["queue_offset"])
            key = self._key(rec)
            if key in self._resolved:
                # Resolved already (an answer to an older copy, or a repeat): only make sure
                # this copy is not checked again.
                if half_off not in self._removed:
                    await self._write_op([half_off], key)
                return cmd.response(Resp.SUCCESS)
            if ttype == TRANSACTION_COMMIT_TYPE:
                real = self.special.route(self._real_message(rec))
                r = await self.special.escape.put([real])
                if not r.ok:
                    return cmd.response(r.code, r.remark or "writing the committed message failed")
            offs = [half_off]
            newest = self._copies.get(key)
            if newest is not None and newest != half_off:
                offs.append(newest)
            await self._write_op(offs, key)
            real_topic = decode_properties(_bytes(rec["properties"])).get(PROPERTY_REAL_TOPIC, "")
            ports.traffic.ended(real_topic, ttype == TRANSACTION_COMMIT_TYPE)
        log.debug(
            "transaction %s %s (half %d)",
            key,
            "committed" if ttype == TRANSACTION_COMMIT_TYPE else "rolled back",
            half_off,
        )
        return cmd.response(Resp.SUCCESS)

    def _check_prepared(self, rec: Record, h: EndTransactionRequestHeader) -> str | None:
        """EndTransactionProcessor.checkPrepareMessage."""
        if rec["topic"] != HALF_TOPIC:
            return f"the message at {h.commit_log_offset} is not a half message"
        props = decode_properties(_bytes(rec["properties"]))
        if props.get(PROPERTY_PRODUCER_GROUP) != h.producer_group:
            return "The producer group wrong"
        if rec["queue_offset"] != h.tran_state_table_offset:
            return "The transaction state table offset wrong"
        return None

    @staticmethod
    def _key(rec: Record) -> str:
        props = decode_properties(_bytes(rec["properties"]))
        return props.get(PROPERTY_UNIQ_KEY) or f"@{rec['physical_offset']}"

    def _real_message(self, rec: Record) -> InnerMessage:
        """EndTransactionProcessor.endMessageTransaction."""
        msg = InnerMessage.from_record(rec)
        dest = real_destination(msg.properties)
        if dest is not None:
            msg.topic, msg.queue_id = dest
        for k in (
            PROPERTY_REAL_TOPIC,
            PROPERTY_REAL_QUEUE_ID,
            PROPERTY_TRANSACTION_PREPARED,
            PROPERTY_TRANSACTION_CHECK_TIMES,
        ):
            msg.properties.pop(k, None)
        msg.sys_flag = (msg.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE
        msg.prepared_txn_offset = _int(rec["physical_offset"])
        return msg

    async def _write_op(self, half_offsets: list[int], key: str) -> None:
        if not self.ports.role.is_master:
            # An acting slave: op records stay with their own group (its op queue is the
            # master's copy), so the decision is kept in memory; the check passes the half.
            for o in half_offsets:
                self._removed.setdefault(o, -1)
            self._resolved.setdefault(key, -1)
            self._unwritten[key] = max(self._unwritten.get(key, -1), *half_offsets)
            self._copies.pop(key, None)
            return
        op = InnerMessage(
            topic=OP_TOPIC,
            queue_id=0,
            body=",".join(str(o) for o in half_offsets).encode(),
            properties={PROPERTY_TAGS: REMOVE_TAG, PROPERTY_TRANSACTION_ID: key},
            born_timestamp=wall_ms(),
            born_host=self.ports.address,
        )
        r = await self.special.escape.put([op])
        op_off = r.queue_offsets[0] if r.ok and r.queue_offsets else -1
        if not r.ok:
            # Resolved in memory; after a restart the check may ask the producer again.
            log.warning("transaction op record refused (%s %s)", r.code, r.remark)
        for o in half_offsets:
            self._removed.setdefault(o, op_off)
        self._resolved.setdefault(key, op_off)
        self._copies.pop(key, None)

    # ---- the check service -------------------------------------------------------------------

    async def load(self) -> None:
        # Rebuilt from the op queue: another broker may have acted in between. Decisions
        # taken while acting (`_unwritten`) are in no op queue: they are kept, or a restart of
        # the service (acting starting for real after the first ends, a hand-back and a new
        # takeover) would forget a commit and ask the producer again, and a second COMMIT
        # answer would write the real message twice.
        kept = {k: self._resolved.get(k, -1) for k in self._unwritten}
        self._removed.clear()
        self._resolved = kept
        self._copies.clear()
        self._op_read = None

    async def run(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._check_loop)

    async def _check_loop(self) -> None:
        while True:
            await trio.sleep(self.ports.cfg.transaction_check_interval_ms / 1000)
            try:
                await self.check_once()
            except Exception:  # a bad record must not stop the broker; the next run retries
                log.exception("transaction check failed")

    async def _read_ops(self) -> None:
        store = self.ports.store.native
        if self._op_read is None:
            self._op_read = progress_within(
                store,
                OP_TOPIC,
                0,
                self.ports.offsets.query(SYS_GROUP, OP_TOPIC, 0) or 0,
                "transaction op",
            )
        while True:
            recs, nxt = read_queue(
                store, OP_TOPIC, 0, self._op_read, BATCH, storage=self.ports.storage
            )
            if not recs:
                self._op_read = max(self._op_read, nxt)
                return
            for rec in recs:
                op_off = _int(rec["queue_offset"])
                props = decode_properties(_bytes(rec["properties"]))
                if props.get(PROPERTY_TAGS) == REMOVE_TAG:
                    for part in _bytes(rec["body"]).decode("ascii", "replace").split(","):
                        if part.strip().isdigit():
                            self._removed.setdefault(int(part), op_off)
                    key = props.get(PROPERTY_TRANSACTION_ID)
                    if key:
                        self._resolved.setdefault(key, op_off)
                        self._copies.pop(key, None)
                self._op_read = op_off + 1
            await trio.sleep(0)  # a long op backlog must not hold the event loop

    async def check_once(self) -> int:
        """One run over the half queue; returns how many halves were checked (a check sent
        to the producer) or, on a slave, handed over to another master."""
        async with self._lock:
            self.runs += 1
            return await self._check_locked()

    async def _check_locked(self) -> int:
        store = self.ports.store.native
        cfg = self.ports.cfg
        await self._read_ops()
        pos = self.ports.offsets.query(SYS_GROUP, HALF_TOPIC, 0)
        if pos is None:
            pos = store.queue_min_offset(HALF_TOPIC, 0)
        pos = progress_within(store, HALF_TOPIC, 0, pos, "transaction check")
        # Only halves that existed when the run began: copies written by this run wait.
        end = store.queue_max_offset(HALF_TOPIC, 0)
        now = wall_ms()
        sent = 0
        stop = False
        while pos < end and not stop:
            recs, nxt = read_queue(store, HALF_TOPIC, 0, pos, BATCH, storage=self.ports.storage)
            if not recs:
                if nxt <= pos:
                    break
                pos = nxt
                continue
            for rec in recs:
                off = _int(rec["queue_offset"])
                if off >= end:
                    stop = True
                    break
                key = self._key(rec)
                if off in self._removed or key in self._resolved:
                    pos = off + 1
                    continue
                props = decode_properties(_bytes(rec["properties"]))
                times = _to_int(props.get(PROPERTY_TRANSACTION_CHECK_TIMES), 0)
                if not self.ports.role.is_master and times >= cfg.transaction_check_max:
                    # On a slave the receiving master discards it at its first check.
                    if not await self._escape_half(rec):
                        stop = True
                        break
                    pos = off + 1
                    sent += 1
                    continue
                if times >= cfg.transaction_check_max:
                    if not await self._discard(rec):
                        stop = True
                        break
                    pos = off + 1
                    continue
                immunity = cfg.transaction_timeout_ms
                if times == 0 and PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS in props:
                    immunity = max(
                        immunity,
                        _to_int(props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS], 0) * 1000,
                    )
                born = min(_int(rec["born_timestamp"]), now)
                if now - born < immunity:
                    stop = True  # every later half is younger (or a copy made after it)
                    break
                if not self.ports.role.is_master:
                    if not await self._escape_half(rec):
                        stop = True
                        break
                    pos = off + 1
                    sent += 1
                    continue
                copy = InnerMessage.from_record(rec)
                copy.properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times + 1)
                r = await self.special.escape.put([copy])
                if not r.ok:
                    log.warning("re-putting half %d refused (%s %s)", off, r.code, r.remark)
                    stop = True
                    break
                pos = off + 1
                if r.queue_offsets:
                    self._copies[key] = r.queue_offsets[0]
                await self._send_check(copy, r)
                sent += 1
        self._commit_progress(pos)
        return sent

    def _commit_progress(self, half_pos: int) -> None:
        offsets = self.ports.offsets
        # Committed only when they move: each commit dirties consumerOffset.json.
        if offsets.query(SYS_GROUP, HALF_TOPIC, 0) != half_pos:
            offsets.commit(SYS_GROUP, HALF_TOPIC, 0, half_pos)
        self._removed = {h: o for h, o in self._removed.items() if h >= half_pos}
        assert self._op_read is not None
        live = [o for o in self._removed.values() if o >= 0]
        op_progress = min(live, default=self._op_read)
        if offsets.query(SYS_GROUP, OP_TOPIC, 0) != op_progress:
            offsets.commit(SYS_GROUP, OP_TOPIC, 0, op_progress)
        # Keys are remembered while their op record is still ahead of the op progress (a
        # restart would read them again), or while a copy of them may still be checked.
        self._unwritten = {k: h for k, h in self._unwritten.items() if h >= half_pos}
        self._resolved = {
            k: o
            for k, o in self._resolved.items()
            if o >= op_progress or k in self._copies or k in self._unwritten
        }
        self._copies = {k: o for k, o in self._copies.items() if o >= half_pos}

    async def _escape_half(self, rec: Record) -> bool:
        """On a slave: hands an undecided half over to another broker group's master (the
        escape sends it as a half of its real topic; that master checks the producer). True
        once it is stored there."""
        half = InnerMessage.from_record(rec)
        r = await self.special.escape.put([half])
        key = half.properties.get(PROPERTY_UNIQ_KEY)
        if not r.ok:
            log.warning(
                "handing half %s (offset %s) to another master failed (%s %s); kept, tried "
                "again next run",
                key,
                rec["queue_offset"],
                r.code,
                r.remark,
            )
            return False
        self.escaped += 1
        log.info(
            "half %s (offset %s) handed to another master, which checks it",
            key,
            rec["queue_offset"],
        )
        return True

    async def _discard(self, rec: Record) -> bool:
        """TransactionalMessageCheckListener.resolveDiscardMsg: checked too often."""
        msg = InnerMessage.from_record(rec)
        msg.topic, msg.queue_id = CHECK_MAX_TOPIC, 0
        r = await self.special.escape.put([msg])
        if r.ok:
            self.discarded += 1
            log.warning(
                "half message %s checked %s times: moved to %s",
                msg.properties.get(PROPERTY_UNIQ_KEY),
                msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES),
                CHECK_MAX_TOPIC,
            )
        return r.ok

    async def _send_check(self, copy: InnerMessage, r: PutResult) -> None:
        """AbstractTransactionalMessageCheckListener.sendCheckMessage: oneway to one live
        connection of the producer group; the body is the message with its real topic."""
        group = copy.properties.get(PROPERTY_PRODUCER_GROUP, "")
        conn = self.ports.clients.producer_connection(group)
        if conn is None:
            log.info("no producer of group %r online to check a transaction", group)
            return
        if not r.physical_offsets or not r.queue_offsets:
            return
        phys, qoff = r.physical_offsets[0], r.queue_offsets[0]
        host, port = self.ports.store_host
        uniq = copy.properties.get(PROPERTY_UNIQ_KEY)
        topic, qid = real_destination(copy.properties) or (copy.topic, copy.queue_id)
        h = CheckTransactionStateRequestHeader(
            topic=HALF_TOPIC,
            tran_state_table_offset=qoff,
            commit_log_offset=phys,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=offset_msg_id(host, port, phys),
            bname=self.ports.cfg.broker_name,
        )
        body = encode_message_ext(
            topic=topic,
            queue_id=qid,
            body=copy.body,
            properties=encode_properties(copy.properties),
            flag=copy.flag,
            queue_offset=qoff,
            physical_offset=phys,
            sys_flag=copy.sys_flag,
            born_timestamp=copy.born_timestamp,
            born_host=copy.born_host,
            store_timestamp=r.store_timestamp,
            store_host=self.ports.address,
            reconsume_times=copy.reconsume_times,
            prepared_txn_offset=copy.prepared_txn_offset,
        )
        cmd = RemotingCommand.request(RC.CHECK_TRANSACTION_STATE, h.to_ext(), body, oneway=True)
        try:
            await conn.send(cmd)
            self.checks_sent += 1
        except Exception as e:  # the producer went away; the copy is checked again later
            log.info("CHECK_TRANSACTION_STATE to %s failed: %s", conn.peer, e)


def _int(v: object) -> int:
    assert isinstance(v, int)
    return v


def _bytes(v: object) -> bytes:
    assert isinstance(v, bytes)
    return v


def _to_int(s: str | None, default: int) -> int:
    try:
        return int(s) if s is not None else default
    except ValueError:
        return default
