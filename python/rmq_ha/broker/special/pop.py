"""Pop consumption: POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME and the revive
service (RocketMQ 5's PopMessageProcessor, AckMessageProcessor, ChangeInvisibleTimeProcessor,
PopReviveService), without the in-memory merge buffer: every checkpoint and ack is a record.

Pop. The broker picks the messages: from one queue, or (queueId -1) from every readable queue
of the topic, and from the group's pop retry topic `%RETRY%<group>_<topic>` (first, in
popFromRetryProbability percent of pops; otherwise when the topic leaves room). The group's
consumer offset of each queue moves past what was popped at once; what is not acked comes
back through the retry topic. Per queue popped, a checkpoint (CK) record is written to the
revive topic `rmq_sys_REVIVE_LOG_<cluster>`, queue reviveQid (round robin over reviveQueueNum),
before the answer leaves. Nothing found: the pop parks until a message arrives or pollTime
passes (POLLING_TIMEOUT); at most MAX_PARKED_POPS park at once (then POLLING_FULL).

Records in the revive topic (bodies are JSON with RocketMQ's short keys; tag ck/ack;
UNIQ_KEY = topic@queueId@offset@group@popTime@brokerName@ck|ack, so each carries the broker
name and CKs/acks of different brokers in one revive topic never cancel each other, RIP-32):
    CK:  {"so", "pt", "it", "bm", "n", "q", "t", "c", "ro", "d", "bn", "rp"}
         startOffset, popTime, invisibleTime, bitmap, count, queueId, topic, group,
         reviveOffset, offset diffs from startOffset (one per message), brokerName, re-puts.
    ACK: {"ao", "so", "c", "t", "q", "pt", "bn"}
         ackOffset, startOffset, group, topic, queueId, popTime, brokerName.

extraInfo (the POP_CK property a client builds from the answer, sent back by ack and
change-invisible-time), space-separated as ExtraInfoUtil builds it:
    ckQueueOffset popTime invisibleTime reviveQid retry(0|1) brokerName queueId queueOffset

Change invisible time writes a new one-message CK (startOffset = the message offset, popTime
= now) and then acks the old one, so a crash in between can only deliver twice, never lose.

Revive. Every reviveInterval, each revive queue is read from where the last look stopped: a CK
becomes pending, an ack marks its message in the matching pending CK (an ack for a CK not
seen yet is kept aside). A pending CK whose popTime + invisibleTime has passed is revived: its
un-acked messages are written to the pop retry topic (reconsume times + 1, 1ST_POP_TIME,
ORIGIN_GROUP), then acked, so reading the revive queue again (after a restart) does not revive
them twice. The revive progress (consumer offset of CID_RMQ_SYS_REVIVE_GROUP on each revive
queue) is the oldest still-pending CK, so a restart rebuilds every pending CK.

Another broker's CK (RIP-32). A slave acting for a dead master pops from its own copy of the
queues and sends its CKs and acks through the escape bridge to another master's revive topic
(same revive queue, brokerName = the acting slave's group). Such a CK is revived here like a
local one, except that its messages are read from their own broker group with a remote pull
(`EscapeBridge.get_message`: whatever the route shows as that group's id 0, its master or the
acting slave). A failed remote read keeps the CK pending (it is never dropped): it is tried
again after a back-off that doubles per failure up to REMOTE_RETRY_MAX_MS, at most one failed
remote read per broker group and revive pass (a dead group costs one timeout per pass), and
failures are logged at 1, 2, 4, 8... attempts. While it is pending the revive progress of
its queue stays behind it.

On a slave. Pop, ack and change-invisible-time are served only by the master and by a slave
acting for it (`ports.role.acting`); a plain slave answers SERVICE_NOT_AVAILABLE and moves
no offset. On the acting slave consumer offsets are its own table, and every record goes
through the escape (nothing is written to the slave's commitlog). An ack or lease change
there also marks the matching CK in this slave's own revive state, because the ack record
itself lands on another master while the CK (written by the dead master) is in our copy of
its revive topic: without that the acting slave would revive a message its consumer acked.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import trio

from rmq_ha._native import client_record
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.special.base import InnerMessage, Peers, SpecialService
from rmq_ha.broker.special.escape import GONE, EscapeBridge
from rmq_ha.broker.special.records import Record, progress_within, read_queue
from rmq_ha.broker.sqlfilter import SqlFilter, SqlFilterError, compile_sql
from rmq_ha.broker.topics import RETRY_GROUP_TOPIC_PREFIX
from rmq_ha.clock import wall_ms
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from rmq_ha.protocol.message import (
    PROPERTY_FIRST_POP_TIME,
    PROPERTY_ORIGIN_GROUP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    java_hash,
    parse_tag_expression,
)
from rmq_ha.protocol.models import ExpressionType
from rmq_ha.protocol.perm import is_readable
from rmq_ha.protocol.pop import ExtraInfo, pop_retry_topic, retry_flag

log = logging.getLogger(__name__)

#: An SQL92 pop reads this many records at a time, and at most SQL_POP_SCAN per queue and pop
#: past filtered-out ones.
SQL_POP_BATCH: Final = 256
SQL_POP_SCAN: Final = 4096


class _MovedPast:
    """What `_pop_queue` answers when it only moved the group past filtered-out records."""


MOVED_PAST: Final = _MovedPast()

REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"
#: PopAckConstants.REVIVE_GROUP: its offsets on the revive topic are the revive progress.
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
SPLIT: Final = "@"
#: Pop answers carry at most this many messages (a CK's bitmap is an int).
MAX_POP_NUMS: Final = 32
#: Parked pops per broker (popPollingSize); beyond, POLLING_FULL.
MAX_PARKED_POPS: Final = 1024
#: ConsumeInitMode.
INIT_MODE_MIN: Final = 0
INIT_MODE_MAX: Final = 1
#: Revive-queue records read per look, and acks for unknown CKs kept per revive queue.
REVIVE_BATCH: Final = 256
MAX_EARLY_ACKS: Final = 65_536
MAX_POP_BYTES: Final = 4 << 20
#: Back-off of a CK whose messages another broker group could not give us: it doubles from
#: reviveInterval per failure, up to this (the CK stays pending meanwhile).
REMOTE_RETRY_MAX_MS: Final = 10_000


def remote_retry_wait_ms(revive_interval_ms: int, failures: int) -> int:
    """The back-off after the `failures`-th failed remote read of a CK's messages: the revive
    interval doubled per failure, capped at REMOTE_RETRY_MAX_MS."""
    return min(REMOTE_RETRY_MAX_MS, max(1, revive_interval_ms) << min(failures, 20))


@dataclass(slots=True)
class CheckPoint:
    """PopCheckPoint, JSON keys as RocketMQ's."""

    start_offset: int
    pop_time: int
    invisible_time: int
    queue_id: int
    topic: str
    cid: str
    broker_name: str
    diffs: list[int]
    bitmap: int = 0
    revive_offset: int = 0
    reput_times: int = 0

    @property
    def num(self) -> int:
        return len(self.diffs)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def offset_of(self, i: int) -> int:
        return self.start_offset + self.diffs[i]

    def merge_key(self) -> str:
        return SPLIT.join(
            (
                self.topic,
                self.cid,
                str(self.queue_id),
                str(self.start_offset),
                str(self.pop_time),
                self.broker_name,
            )
        )

    def uniq_id(self) -> str:
        """PopMessageProcessor.genCkUniqueId."""
        return SPLIT.join(
            (
                self.topic,
                str(self.queue_id),
                str(self.start_offset),
                self.cid,
                str(self.pop_time),
                self.broker_name,
                CK_TAG,
            )
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "so": self.start_offset,
                "pt": self.pop_time,
                "it": self.invisible_time,
                "bm": self.bitmap,
                "n": self.num,
                "q": self.queue_id,
                "t": self.topic,
                "c": self.cid,
                "ro": self.revive_offset,
                "d": self.diffs,
                "bn": self.broker_name,
                "rp": self.reput_times,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CheckPoint:
        d = json.loads(raw)
        n = int(d.get("n", 0))
        diffs = [int(x) for x in (d.get("d") or range(n))]
        return cls(
            start_offset=int(d["so"]),
            pop_time=int(d["pt"]),
            invisible_time=int(d["it"]),
            queue_id=int(d["q"]),
            topic=str(d["t"]),
            cid=str(d["c"]),
            broker_name=str(d.get("bn") or ""),
            diffs=diffs,
            bitmap=int(d.get("bm", 0)),
            revive_offset=int(d.get("ro", 0)),
            reput_times=int(d.get("rp", 0)),
        )


@dataclass(slots=True)
class AckRecord:
    """AckMsg, JSON keys as RocketMQ's."""

    ack_offset: int
    start_offset: int
    consumer_group: str
    topic: str
    queue_id: int
    pop_time: int
    broker_name: str

    def merge_key(self) -> str:
        """Equal to the merge key of the CK it acks."""
        return SPLIT.join(
            (
                self.topic,
                self.consumer_group,
                str(self.queue_id),
                str(self.start_offset),
                str(self.pop_time),
                self.broker_name,
            )
        )

    def uniq_id(self) -> str:
        """AckMessageProcessor.genAckUniqueId."""
        return SPLIT.join(
            (
                self.topic,
                str(self.queue_id),
                str(self.ack_offset),
                self.consumer_group,
                str(self.pop_time),
                self.broker_name,
                ACK_TAG,
            )
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "ao": self.ack_offset,
                "so": self.start_offset,
                "c": self.consumer_group,
                "t": self.topic,
                "q": self.queue_id,
                "pt": self.pop_time,
                "bn": self.broker_name,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> AckRecord:
        d = json.loads(raw)
        return cls(
            ack_offset=int(d["ao"]),
            start_offset=int(d["so"]),
            consumer_group=str(d["c"]),
            topic=str(d["t"]),
            queue_id=int(d["q"]),
            pop_time=int(d["pt"]),
            broker_name=str(d.get("bn") or ""),
        )


@dataclass(slots=True)
class _Pending:
    ck: CheckPoint
    revive_queue_offset: int
    acked: set[int] = field(default_factory=set)
    #: Failed remote reads of this CK's messages in a row, and when to try again (wall ms).
    remote_failures: int = 0
    retry_at: int = 0

    def done(self) -> bool:
        return all(self.ck.offset_of(i) in self.acked for i in range(self.ck.num))


@dataclass(slots=True)
class _ReviveQueue:
    read_pos: int | None = None
    pending: dict[str, _Pending] = field(default_factory=dict)
    early_acks: dict[str, set[int]] = field(default_factory=dict)


@dataclass(slots=True)
class _Popped:
    topic: str
    queue_id: int
    start_offset: int
    records: list[Record]
    rest: int


#: `_revive` could not read a message of another broker group: the CK waits (not refused).
_DEFERRED: Final = -1


class PopPeers(Peers, Protocol):
    """What pop revive also needs: the bridge's read of another group's message."""

    @property
    def bridge(self) -> EscapeBridge: ...


class PopService(SpecialService):
    name = "pop-revive"

    def __init__(self, ports: Ports, special: PopPeers) -> None:
        super().__init__()
        self.ports = ports
        self.special = special
        self.revive_topic = REVIVE_TOPIC_PREFIX + ports.cfg.cluster_name
        self.revive_queue_num = max(1, ports.cfg.revive_queue_num)
        self._revive_counter = itertools.count(random.randrange(self.revive_queue_num))
        self._queue_locks: dict[tuple[str, str, int], trio.Lock] = {}
        self._parked = 0
        self._revive_queues: list[_ReviveQueue] = []
        self._revive_lock = trio.Lock()
        self._rng = random.Random()
        #: Messages written to a pop retry topic since start.
        self.revived = 0
        #: Failed reads of messages another broker group holds (a CK waits for each).
        self.remote_read_failures = 0

    def system_topics(self) -> dict[str, int]:
        return {self.revive_topic: self.revive_queue_num}

    def register(self, d: Dispatcher) -> None:
        d.register(RC.POP_MESSAGE, self.pop_message)
        d.register(RC.ACK_MESSAGE, self.ack_message)
        d.register(RC.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time)

    def _not_serving(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """Pop, ack and change-invisible-time need the master or the slave acting for it; a
        plain slave refuses (its commitlog is a copy: it can write no CK, and offsets moved
        here would be overwritten by the master's)."""
        b = self.ports
        if b.role.is_master or b.role.acting:
            return None
        return cmd.response(
            Resp.SERVICE_NOT_AVAILABLE,
            f"the broker[{b.cfg.broker_name}] is a slave and not acting as master: "
            "pop from the master",
        )

    # ---- POP_MESSAGE ---------------------------------------------------------------------------

    async def pop_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = PopMessageRequestHeader.from_ext(cmd.ext_fields)
        ports = self.ports
        if not is_readable(ports.cfg.broker_permission):
            return cmd.response(
                Resp.NO_PERMISSION,
                f"the broker[{ports.cfg.broker_name}] popping message is forbidden",
            )
        refused = self._not_serving(cmd)
        if refused is not None:
            return refused
        refusal = ports.subgroups.consume_refusal(h.consumer_group)
        if refusal is not None:
            return cmd.response(Resp.NO_PERMISSION, refusal)
        if h.order:
            return cmd.response(Resp.SYSTEM_ERROR, "orderly pop is not supported by rmq_ha")
        if not 0 < h.max_msg_nums <= MAX_POP_NUMS:
            return cmd.response(
                Resp.SYSTEM_ERROR, f"the broker pop message num must be in 1..{MAX_POP_NUMS}"
            )
        tc = ports.topics.get(h.topic)
        if tc is None:
            return cmd.response(
                Resp.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
            )
        if not is_readable(tc.perm):
            return cmd.response(
                Resp.NO_PERMISSION, f"the topic[{h.topic}] popping message is forbidden"
            )
        if h.queue_id >= tc.read_queue_nums:
            return cmd.response(
                Resp.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        sql: SqlFilter | None = None
        tag_codes: list[int] | None = None
        if h.exp_type and h.exp_type != ExpressionType.TAG:
            if h.exp_type != ExpressionType.SQL92 or not ports.cfg.enable_property_filter:
                return cmd.response(
                    Resp.SYSTEM_ERROR,
                    f"The broker does not support consumer to filter message by {h.exp_type}",
                )
            try:
                sql = compile_sql(h.exp or "")
            except SqlFilterError as e:
                return cmd.response(Resp.SUBSCRIPTION_PARSE_FAILED, f"bad SQL92 expression: {e}")
        else:
            tags = parse_tag_expression(h.exp)
            tag_codes = [java_hash(t) for t in tags] if tags is not None else None
        retry = pop_retry_topic(h.topic, h.consumer_group)
        ids = list(range(tc.read_queue_nums)) if h.queue_id < 0 else [h.queue_id]
        # A random first queue spreads concurrent pops of one group over the queues.
        first = self._rng.randrange(len(ids)) if ids else 0
        queues = [(h.topic, q) for q in ids[first:] + ids[:first]]
        # The retry queue is always looked at (and waited on): a revive may create it while
        # this pop is parked.
        retry_first = self._rng.randrange(100) < ports.cfg.pop_from_retry_probability
        queues = [(retry, 0), *queues] if retry_first else [*queues, (retry, 0)]
        revive_qid = next(self._revive_counter) % self.revive_queue_num
        deadline = trio.current_time() + max(0, h.poll_time) / 1000
        while True:
            pop_time = wall_ms()
            got = await self._pop_queues(h, queues, (tag_codes, sql), pop_time, revive_qid)
            if isinstance(got, RemotingCommand):
                return cmd.response(got.code, got.remark)
            popped, moved_past = got
            if popped or trio.current_time() >= deadline:
                break
            if moved_past:
                # only filtered-out records were read: look further at once, not park while
                # matching ones may already be stored
                await trio.sleep(0)
                continue
            if self._parked >= MAX_PARKED_POPS:
                return cmd.response(Resp.POLLING_FULL, "the broker has too many parked pops")
            self._parked += 1
            try:
                await self._wait_any(queues, deadline)
            finally:
                self._parked -= 1
            # Woken: read permission may have gone while it was parked (as for a held pull)
            refusal = self._read_refusal(h)
            if refusal is not None:
                return cmd.response(Resp.NO_PERMISSION, refusal)
        if not popped:
            return cmd.response(Resp.POLLING_TIMEOUT, "no new message")
        return self._answer(cmd, h.consumer_group, popped, pop_time, h.invisible_time, revive_qid)

    def _read_refusal(self, h: PopMessageRequestHeader) -> str | None:
        """Why the group may not read the topic here now (broker or topic not readable, the
        group disabled); None when it may."""
        ports = self.ports
        if not is_readable(ports.cfg.broker_permission):
            return f"the broker[{ports.cfg.broker_name}] popping message is forbidden"
        tc = ports.topics.get(h.topic)
        if tc is not None and not is_readable(tc.perm):
            return f"the topic[{h.topic}] popping message is forbidden"
        return ports.subgroups.consume_refusal(h.consumer_group)

    async def _pop_queues(
        self,
        h: PopMessageRequestHeader,
        queues: Sequence[tuple[str, int]],
        flt: tuple[list[int] | None, SqlFilter | None],
        pop_time: int,
        revive_qid: int,
    ) -> tuple[list[_Popped], bool] | RemotingCommand:
        """What the queues gave, and whether one was moved past filtered-out records only."""
        out: list[_Popped] = []
        moved_past = False
        room = h.max_msg_nums
        for topic, qid in queues:
            if room <= 0:
                break
            got = await self._pop_queue(
                h.consumer_group, topic, qid, room, flt, pop_time, h.invisible_time,
                revive_qid, h.init_mode,
            )  # fmt: skip
            if isinstance(got, RemotingCommand):
                return got
            if got is MOVED_PAST:
                moved_past = True
            elif isinstance(got, _Popped):
                out.append(got)
                room -= len(got.records)
        return out, moved_past

    def _queue_lock(self, group: str, topic: str, qid: int) -> trio.Lock:
        key = (group, topic, qid)
        lock = self._queue_locks.get(key)
        if lock is None:
            lock = self._queue_locks[key] = trio.Lock()
        return lock

    async def _pop_queue(
        self,
        group: str,
        topic: str,
        qid: int,
        max_nums: int,
        flt: tuple[list[int] | None, SqlFilter | None],
        pop_time: int,
        invisible_time: int,
        revive_qid: int,
        init_mode: int,
    ) -> _Popped | RemotingCommand | _MovedPast | None:
        ports = self.ports
        store = ports.store.native
        # One pop at a time per (group, queue): the offset read and its commit must not
        # interleave with another pop while the CK is being written.
        async with self._queue_lock(group, topic, qid):
            qmin = store.queue_min_offset(topic, qid)
            qmax = store.queue_max_offset(topic, qid)
            offset = ports.offsets.query(group, topic, qid)
            if offset is None:
                retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                offset = qmin if retry or init_mode == INIT_MODE_MIN else qmax
            offset = min(max(offset, qmin), qmax)
            if offset >= qmax:
                return None
            tag_codes, sql = flt
            if sql is None:
                recs, nxt = read_queue(
                    store, topic, qid, offset, max_nums, tag_codes, storage=ports.storage
                )
            else:
                recs, nxt = self._read_matching(store, topic, qid, offset, qmax, max_nums, sql)
            recs = recs[:max_nums]
            if recs:
                nxt = _int(recs[-1]["queue_offset"]) + 1
            if not recs:
                # Everything up to `nxt` was filtered out: nothing to hide, move past it.
                if nxt > offset:
                    ports.offsets.commit(group, topic, qid, nxt)
                    return MOVED_PAST
                return None
            ck = CheckPoint(
                start_offset=offset,
                pop_time=pop_time,
                invisible_time=invisible_time,
                queue_id=qid,
                topic=topic,
                cid=group,
                broker_name=ports.cfg.broker_name,
                diffs=[_int(r["queue_offset"]) - offset for r in recs],
            )
            r = await self.special.escape.put([self._ck_message(ck, revive_qid)])
            if not r.ok:
                log.warning("pop checkpoint refused (%s %s)", r.code, r.remark)
                return RemotingCommand(code=r.code, remark=r.remark or "writing the CK failed")
            ports.offsets.commit(group, topic, qid, nxt)
            return _Popped(topic, qid, offset, recs, max(0, qmax - nxt))

    def _read_matching(
        self, store: Any, topic: str, qid: int, offset: int, qmax: int, want: int, sql: SqlFilter
    ) -> tuple[list[Record], int]:
        """Records from `offset` on whose properties match `sql` (at least `want` of them when
        there are), reading on past filtered-out ones up to SQL_POP_SCAN records; and the
        offset after the last record read."""
        kept: list[Record] = []
        scanned = 0
        cursor = offset
        while len(kept) < want and cursor < qmax and scanned < SQL_POP_SCAN:
            recs, nxt = read_queue(
                store, topic, qid, cursor, SQL_POP_BATCH, None, storage=self.ports.storage
            )
            scanned += len(recs)
            kept += [r for r in recs if sql.matches(decode_properties(_bytes(r["properties"])))]
            if nxt <= cursor:
                break  # a damaged record still waited for: stop before it
            cursor = nxt
        return kept, cursor

    async def _wait_any(self, queues: Sequence[tuple[str, int]], deadline: float) -> None:
        """Parks until a message arrives on one of `queues` or `deadline`."""
        store = self.ports.store.native
        timeout = max(0.0, deadline - trio.current_time())
        async with trio.open_nursery() as n:

            async def one(topic: str, qid: int) -> None:
                if await self.ports.hold.wait(
                    topic, qid, store.queue_max_offset(topic, qid), timeout
                ):
                    n.cancel_scope.cancel()

            for topic, qid in queues:
                n.start_soon(one, topic, qid)

    def _answer(
        self,
        cmd: RemotingCommand,
        group: str,
        popped: list[_Popped],
        pop_time: int,
        invisible_time: int,
        revive_qid: int,
    ) -> RemotingCommand:
        start_info, msg_info = [], []
        for p in popped:
            retry = retry_flag(p.topic)
            offs = ",".join(str(_int(r["queue_offset"])) for r in p.records)
            start_info.append(f"{retry} {p.queue_id} {p.start_offset}")
            msg_info.append(f"{retry} {p.queue_id} {offs}")
        rh = PopMessageResponseHeader(
            pop_time=pop_time,
            invisible_time=invisible_time,
            revive_qid=revive_qid,
            rest_num=sum(p.rest for p in popped),
            start_offset_info=";".join(start_info),
            msg_offset_info=";".join(msg_info),
        )
        store = self.ports.store.native
        parts: list[bytes] = []
        for p in popped:
            # as clients are served records: without the whole-record CRC trailer
            got = [
                client_record(store.read_record(_int(r["physical_offset"])).tobytes())
                for r in p.records
            ]
            parts += got
            # rocketmq_messages_out_total / _throughput_out_total (broker/metrics.py)
            self.ports.traffic.got(p.topic, group, len(got), sum(len(b) for b in got))
        return cmd.response(Resp.SUCCESS, None, rh.to_ext(), b"".join(parts))

    def _ck_message(self, ck: CheckPoint, revive_qid: int) -> InnerMessage:
        return InnerMessage(
            topic=self.revive_topic,
            queue_id=revive_qid,
            body=ck.to_json(),
            properties={PROPERTY_TAGS: CK_TAG, PROPERTY_UNIQ_KEY: ck.uniq_id()},
            born_timestamp=wall_ms(),
            born_host=self.ports.address,
        )

    def _ack_message(self, ack: AckRecord, revive_qid: int) -> InnerMessage:
        return InnerMessage(
            topic=self.revive_topic,
            queue_id=revive_qid,
            body=ack.to_json(),
            properties={PROPERTY_TAGS: ACK_TAG, PROPERTY_UNIQ_KEY: ack.uniq_id()},
            born_timestamp=wall_ms(),
            born_host=self.ports.address,
        )

    # ---- ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME ---------------------------------------------

    def _validate_ack(self, topic: str, qid: int, offset: int, extra_info: str) -> ExtraInfo | str:
        try:
            extra = ExtraInfo.parse(extra_info)
        except ValueError as e:
            return str(e)
        tc = self.ports.topics.get(topic)
        if tc is None:
            return f"topic[{topic}] not exist, apply first please!"
        if not 0 <= qid < tc.read_queue_nums:
            return f"queueId[{qid}] is illegal, topic:[{topic}]"
        if not 0 <= extra.revive_qid < self.revive_queue_num:
            return f"reviveQid {extra.revive_qid} is illegal"
        store = self.ports.store.native
        if not store.queue_min_offset(topic, qid) <= offset < store.queue_max_offset(topic, qid):
            return f"offset {offset} is illegal for {topic}:{qid}"
        return extra

    async def ack_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = AckMessageRequestHeader.from_ext(cmd.ext_fields)
        refused = self._not_serving(cmd)
        if refused is not None:
            return refused
        extra = self._validate_ack(h.topic, h.queue_id, h.offset, h.extra_info)
        if isinstance(extra, str):
            code = Resp.NO_MESSAGE if extra.startswith("offset") else Resp.INVALID_PARAMETER
            return cmd.response(code, extra)
        ack = AckRecord(
            ack_offset=h.offset,
            start_offset=extra.ck_offset,
            consumer_group=h.consumer_group,
            topic=h.topic,
            queue_id=h.queue_id,
            pop_time=extra.pop_time,
            broker_name=extra.broker_name,
        )
        r = await self.special.escape.put([self._ack_message(ack, extra.revive_qid)])
        if not r.ok:
            return cmd.response(r.code, r.remark or "writing the ack failed")
        self._ack_here(ack, extra.revive_qid)
        return cmd.response(Resp.SUCCESS)

    async def change_invisible_time(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.from_ext(cmd.ext_fields)
        refused = self._not_serving(cmd)
        if refused is not None:
            return refused
        extra = self._validate_ack(h.topic, h.queue_id, h.offset, h.extra_info)
        if isinstance(extra, str):
            code = Resp.NO_MESSAGE if extra.startswith("offset") else Resp.INVALID_PARAMETER
            return cmd.response(code, extra)
        now = wall_ms()
        ck = CheckPoint(
            start_offset=h.offset,
            pop_time=now,
            invisible_time=h.invisible_time,
            queue_id=h.queue_id,
            topic=h.topic,
            cid=h.consumer_group,
            broker_name=extra.broker_name,
            diffs=[0],
        )
        old = AckRecord(
            ack_offset=h.offset,
            start_offset=extra.ck_offset,
            consumer_group=h.consumer_group,
            topic=h.topic,
            queue_id=h.queue_id,
            pop_time=extra.pop_time,
            broker_name=extra.broker_name,
        )
        # New lease first, then release the old one (a crash in between delivers twice).
        r = await self.special.escape.put([self._ck_message(ck, extra.revive_qid)])
        if not r.ok:
            return cmd.response(r.code, r.remark or "writing the CK failed")
        r = await self.special.escape.put([self._ack_message(old, extra.revive_qid)])
        if not r.ok:
            log.warning("ack of the old lease refused (%s %s)", r.code, r.remark)
        else:
            self._ack_here(old, extra.revive_qid)
        rh = ChangeInvisibleTimeResponseHeader(
            pop_time=now, invisible_time=h.invisible_time, revive_qid=extra.revive_qid
        )
        return cmd.response(Resp.SUCCESS, None, rh.to_ext())

    def _ack_here(self, ack: AckRecord, revive_qid: int) -> None:
        """On an acting slave, an ack record goes to another master, but the CK it acks may
        be in this broker's own revive topic (written by the dead master): mark it here too,
        or this slave's revive would bring back what the consumer acked. Only for a CK that
        is pending, or may still be read (the revive queue has unread records); an ack of a
        CK this slave escaped itself is not kept."""
        if self.ports.role.is_master or not 0 <= revive_qid < len(self._revive_queues):
            return  # a master reads its own acks back from the revive topic
        st = self._revive_queues[revive_qid]
        key = ack.merge_key()
        pending = st.pending.get(key)
        if pending is not None:
            pending.acked.add(ack.ack_offset)
            if pending.done():
                del st.pending[key]
            return
        qmax = self.ports.store.native.queue_max_offset(self.revive_topic, revive_qid)
        if (st.read_pos is None or st.read_pos < qmax) and len(st.early_acks) < MAX_EARLY_ACKS:
            st.early_acks.setdefault(key, set()).add(ack.ack_offset)

    # ---- revive --------------------------------------------------------------------------------

    async def load(self) -> None:
        # Rebuilt from the revive queues (another broker may have acted in between).
        self._revive_queues = [_ReviveQueue() for _ in range(self.revive_queue_num)]

    async def run(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._revive_loop)

    async def _revive_loop(self) -> None:
        while True:
            try:
                await self.revive_once()
            except Exception:  # a bad record must not stop the broker; the next look retries
                log.exception("pop revive failed")
            await trio.sleep(self.ports.cfg.revive_interval_ms / 1000)

    async def revive_once(self) -> int:
        """One look at every revive queue; returns how many messages were revived."""
        async with self._revive_lock:
            n = 0
            for qid in range(self.revive_queue_num):
                n += await self._revive_queue(qid)
            return n

    async def _revive_queue(self, qid: int) -> int:
        ports = self.ports
        store = ports.store.native
        st = self._revive_queues[qid]
        if st.read_pos is None:
            st.read_pos = progress_within(
                store,
                self.revive_topic,
                qid,
                ports.offsets.query(REVIVE_GROUP, self.revive_topic, qid) or 0,
                "pop revive",
            )
        while True:
            recs, nxt = read_queue(
                store, self.revive_topic, qid, st.read_pos, REVIVE_BATCH, storage=self.ports.storage
            )
            if not recs:
                st.read_pos = max(st.read_pos, nxt)
                break
            for rec in recs:
                self._absorb(st, rec)
                st.read_pos = _int(rec["queue_offset"]) + 1
            await trio.sleep(0)  # a long revive backlog must not hold the event loop
        now = wall_ms()
        revived = 0
        due = sorted(
            (p for p in st.pending.values() if p.ck.revive_time <= now and p.retry_at <= now),
            key=lambda p: p.revive_queue_offset,
        )
        #: The broker groups that failed a remote read in this pass: their CKs wait for the next.
        unreachable: set[str] = set()
        for p in due:
            if p.ck.broker_name in unreachable:
                continue
            got = await self._revive(p, qid)
            if got is None:
                break  # refused: this and later CKs stay pending; the next look retries
            if got == _DEFERRED:
                unreachable.add(p.ck.broker_name)
                continue  # kept pending (and the progress behind it); tried again later
            revived += got
            st.pending.pop(p.ck.merge_key(), None)
        progress = min((p.revive_queue_offset for p in st.pending.values()), default=st.read_pos)
        # Committed only when it moves: each commit dirties consumerOffset.json (and counts
        # towards its DataVersion).
        if ports.offsets.query(REVIVE_GROUP, self.revive_topic, qid) != progress:
            ports.offsets.commit(REVIVE_GROUP, self.revive_topic, qid, progress)
        return revived

    def _absorb(self, st: _ReviveQueue, rec: Record) -> None:
        props = decode_properties(_bytes(rec["properties"]))
        tag = props.get(PROPERTY_TAGS)
        try:
            if tag == CK_TAG:
                # Also a CK of another broker group, escaped here by its acting slave: its
                # messages are read from that group when it is revived.
                ck = CheckPoint.from_json(_bytes(rec["body"]))
                key = ck.merge_key()
                if key in st.pending:
                    return
                p = _Pending(ck, _int(rec["queue_offset"]), st.early_acks.pop(key, set()))
                if not p.done():
                    st.pending[key] = p
            elif tag == ACK_TAG:
                ack = AckRecord.from_json(_bytes(rec["body"]))
                key = ack.merge_key()
                pending = st.pending.get(key)
                if pending is not None:
                    pending.acked.add(ack.ack_offset)
                    if pending.done():
                        del st.pending[key]
                elif len(st.early_acks) < MAX_EARLY_ACKS:
                    st.early_acks.setdefault(key, set()).add(ack.ack_offset)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("revive record at %s is malformed: %s", rec.get("queue_offset"), e)

    async def _revive(self, p: _Pending, revive_qid: int) -> int | None:
        """Writes the un-acked messages of a due CK to the pop retry topic, then acks them.
        Returns how many, None when a write was refused, or _DEFERRED when a message of
        another broker group could not be read (nothing written; the CK waits)."""
        ck = p.ck
        msgs: list[InnerMessage] = []
        offsets: list[int] = []
        retry_topic = (
            ck.topic
            if ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            else pop_retry_topic(ck.topic, ck.cid)
        )
        remote = bool(ck.broker_name) and ck.broker_name != self.ports.cfg.broker_name
        for i in range(ck.num):
            off = ck.offset_of(i)
            if off in p.acked:
                continue
            if remote:
                got = await self.special.bridge.get_message(
                    ck.broker_name, ck.topic, ck.queue_id, off
                )
                if got is None:
                    self._remote_failed(p, off)
                    return _DEFERRED
                if got is GONE:
                    continue  # gone (retention): nothing left to revive
                orig = got
            else:
                recs, _ = read_queue(self.ports.store.native, ck.topic, ck.queue_id, off, 1)
                if not recs or recs[0]["queue_offset"] != off:
                    continue  # gone (retention): nothing left to revive
                orig = InnerMessage.from_record(recs[0])
            props = dict(orig.properties)
            if orig.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in props:
                props[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
            props[PROPERTY_ORIGIN_GROUP] = ck.cid
            msgs.append(
                InnerMessage(
                    topic=retry_topic,
                    queue_id=0,
                    body=orig.body,
                    properties=props,
                    flag=orig.flag,
                    sys_flag=orig.sys_flag,
                    born_timestamp=orig.born_timestamp,
                    born_host=self.ports.address,
                    reconsume_times=orig.reconsume_times + 1,
                )
            )
            offsets.append(off)
        if remote and p.remote_failures:
            log.info(
                "messages of CK %s readable from broker %s again after %d failed attempts",
                ck.merge_key(),
                ck.broker_name,
                p.remote_failures,
            )
        if msgs:
            if self.ports.role.is_master:
                # On an acting slave the escape writes to another master; a topic created
                # here would only fork this slave's metadata from its master's.
                self._ensure_retry_topic(retry_topic)
            r = await self.special.escape.put(msgs)
            if not r.ok:
                log.warning("revive to %s refused (%s %s)", retry_topic, r.code, r.remark)
                return None
            acks = [
                self._ack_message(
                    AckRecord(
                        ack_offset=off,
                        start_offset=ck.start_offset,
                        consumer_group=ck.cid,
                        topic=ck.topic,
                        queue_id=ck.queue_id,
                        pop_time=ck.pop_time,
                        broker_name=ck.broker_name,
                    ),
                    revive_qid,
                )
                for off in offsets
            ]
            r = await self.special.escape.put(acks)
            if not r.ok:
                # Revived already; after a restart they could be revived again (duplicate).
                log.warning("acks of revived messages refused (%s %s)", r.code, r.remark)
            self.revived += len(msgs)
        return len(msgs)

    def _remote_failed(self, p: _Pending, offset: int) -> None:
        """A message of another broker group could not be read: the CK stays pending and is
        tried again after a doubling back-off (reviveInterval, 2x, 4x ... REMOTE_RETRY_MAX_MS).
        Never dropped: the group may be down, or its acting slave not in the routes yet."""
        self.remote_read_failures += 1
        p.remote_failures += 1
        n = p.remote_failures
        wait = remote_retry_wait_ms(self.ports.cfg.revive_interval_ms, n)
        p.retry_at = wall_ms() + wait
        if n & (n - 1) == 0:  # 1, 2, 4, 8 ...: a long outage does not flood the log
            ck = p.ck
            log.warning(
                "revive of CK %s: message %s:%d@%d of broker %s not readable (attempt %d); "
                "kept pending, next try in %.1f s",
                ck.merge_key(),
                ck.topic,
                ck.queue_id,
                offset,
                ck.broker_name,
                n,
                wait / 1000,
            )

    def _ensure_retry_topic(self, topic: str) -> None:
        self.ports.topics.system(topic)

    def stats(self) -> dict[str, Any]:
        return {
            "pending": sum(len(q.pending) for q in self._revive_queues),
            "revived": self.revived,
            "parked": self._parked,
            "remote_read_failures": self.remote_read_failures,
        }


def _int(v: object) -> int:
    assert isinstance(v, int)
    return v


def _bytes(v: object) -> bytes:
    assert isinstance(v, bytes)
    return v
