"""The frame of the special services: the message they write, the one interface they write
through, and the start/stop life cycle (the manager the broker holds is services.py).

* `InnerMessage` is RocketMQ's MessageExtBrokerInner: every field a re-injected message needs,
  so a bridge can store it locally or send it to another broker with SEND_MESSAGE_V2.
* `Escape` is the only way special output is written: due delayed messages, committed
  transaction messages, re-checked halves, transaction op records, pop checkpoints and acks,
  revived pop messages. `LocalEscape` writes to this broker's store through the send path
  itself (`send.append_and_respond`), which refuses on a slave. The broker's escape is the
  `EscapeBridge` (escape.py): local on the master, to another broker-set's master on a slave
  acting for a dead one, because a slave must never write its own commitlog (RIP-32).
* `SpecialService` owns a Trio task group: `start(parent)` runs it as one task of the parent
  nursery, `stop()` cancels it and returns once every task has ended and its state is saved.
  Both can be called any number of times, in any order.
* `Peers` is what a service may use of the others: the escape, and `route()` (where a message
  that asks for special treatment, TRAN_MSG, DELAY, TIMER_*, is really stored).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import trio

from rmq_ha._native import Message
from rmq_ha.broker.handlers.send import append_and_respond
from rmq_ha.broker.ports import Ports
from rmq_ha.clock import wall_ms
from rmq_ha.errors import StoreError
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    decode_properties,
    encode_properties,
    parse_offset_msg_id,
)

log = logging.getLogger(__name__)

TRANSACTION_TYPE_MASK = 0xC
#: The producer group of messages one broker sends another (escape bridge).
INNER_PRODUCER_GROUP_PREFIX = "InnerProducerGroup_"

# ---------------------------------------------------------------------------------------------
# What special services write


@dataclass(slots=True)
class InnerMessage:
    """A message built by the broker itself (RocketMQ's MessageExtBrokerInner)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_txn_offset: int = 0

    @classmethod
    def from_record(cls, rec: Mapping[str, object]) -> InnerMessage:
        """From `decode_stored_record` output (a copy: changing it changes nothing stored)."""
        body = rec["body"]
        props = rec["properties"]
        assert isinstance(body, bytes) and isinstance(props, bytes)
        return cls(
            topic=str(rec["topic"]),
            queue_id=_int(rec["queue_id"]),
            body=body,
            properties=decode_properties(props),
            flag=_int(rec["flag"]),
            sys_flag=_int(rec["sys_flag"]),
            born_timestamp=_int(rec["born_timestamp"]),
            born_host=str(rec["born_host"]),
            reconsume_times=_int(rec["reconsume_times"]),
            prepared_txn_offset=_int(rec["prepared_txn_offset"]),
        )

    def to_native(self) -> Message:
        return Message(
            self.topic,
            self.queue_id,
            self.body,
            encode_properties(self.properties).encode(),
            flag=self.flag,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            reconsume_times=self.reconsume_times,
            prepared_txn_offset=self.prepared_txn_offset,
        )


def _int(v: object) -> int:
    assert isinstance(v, int)
    return v


@dataclass(frozen=True, slots=True)
class PutResult:
    """`code` is a remoting response code; offsets are per message, in order."""

    code: int
    remark: str | None = None
    physical_offsets: tuple[int, ...] = ()
    queue_offsets: tuple[int, ...] = ()
    store_timestamp: int = 0

    @property
    def ok(self) -> bool:
        """Written (RocketMQ's PutMessageResult.isOk: also when a flush or replica timed
        out, since the message is in the log)."""
        return self.code in (
            Resp.SUCCESS,
            Resp.FLUSH_DISK_TIMEOUT,
            Resp.FLUSH_SLAVE_TIMEOUT,
            Resp.SLAVE_NOT_AVAILABLE,
        )


class Escape(Protocol):
    """Where special output goes. One call writes `msgs` in order; a local store writes them
    as one append. Never raises for a refused write: the result says why."""

    async def put(self, msgs: Sequence[InnerMessage]) -> PutResult: ...


class Peers(Protocol):
    """What a special service may use of the others (the manager implements it)."""

    @property
    def escape(self) -> Escape: ...

    def route(self, msg: InnerMessage) -> InnerMessage: ...


class LocalEscape:
    """The master's escape: this broker's own store, through the send path itself
    (`handlers.send.append_and_respond`: the role check that keeps a slave's log unforked,
    the append, replication, the wake-up of parked pulls and the SYNC_FLUSH / sync-replica
    waits)."""

    def __init__(self, ports: Ports) -> None:
        self._ports = ports

    async def put(self, msgs: Sequence[InnerMessage]) -> PutResult:
        phys: list[int] = []
        qoffs: list[int] = []
        code: int = Resp.SUCCESS
        now = wall_ms()
        self._ports.before_internal_write()  # fenced now if isolated, before anything is stored
        # One append per run of messages to the same queue, so the answer's queue offset
        # (the first) gives every message's offset.
        for group in _runs(msgs):
            cmd = RemotingCommand.request(RC.SEND_MESSAGE)
            try:
                resp = await append_and_respond(
                    self._ports, cmd, [m.to_native() for m in group], wait=True
                )
            except StoreError as e:  # disk trouble: the caller retries later
                log.warning("special put to the local store failed: %s", e)
                return PutResult(Resp.SYSTEM_ERROR, str(e), tuple(phys), tuple(qoffs), now)
            ok = PutResult(resp.code).ok
            if not ok:
                return PutResult(resp.code, resp.remark, tuple(phys), tuple(qoffs), now)
            code = resp.code if code == Resp.SUCCESS else code
            ext = resp.ext_fields or {}
            ids = [i for i in ext.get("msgId", "").split(",") if i]
            phys.extend(parse_offset_msg_id(i)[2] for i in ids)
            first = int(ext.get("queueOffset", "0"))
            qoffs.extend(first + i for i in range(len(group)))
        return PutResult(code, None, tuple(phys), tuple(qoffs), now)


def _runs(msgs: Sequence[InnerMessage]) -> list[list[InnerMessage]]:
    out: list[list[InnerMessage]] = []
    for m in msgs:
        if out and (out[-1][0].topic, out[-1][0].queue_id) == (m.topic, m.queue_id):
            out[-1].append(m)
        else:
            out.append([m])
    return out


# ---------------------------------------------------------------------------------------------
# Life cycle


class SpecialService(abc.ABC):
    """A background service with its own task group. Subclasses implement `run` (start the
    loops in the given nursery) and may override `load` (before the loops start) and `save`
    (after they have all ended, also on cancellation)."""

    name: ClassVar[str] = "special"

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None

    @property
    def running(self) -> bool:
        return self._scope is not None

    async def start(self, parent: trio.Nursery) -> None:
        """Runs the service as a task of `parent`; returns once its loops are started. A
        no-op when running."""
        if self._scope is not None:
            return
        await parent.start(self._own)

    async def stop(self) -> None:
        """Cancels every task of the service and waits until they have ended and `save` ran.
        A no-op when stopped."""
        scope, stopped = self._scope, self._stopped
        if scope is None or stopped is None:
            return
        scope.cancel()
        await stopped.wait()

    async def _own(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        scope = trio.CancelScope()
        stopped = trio.Event()
        self._scope, self._stopped = scope, stopped
        try:
            with scope:
                await self.load()
                async with trio.open_nursery() as nursery:
                    await self.run(nursery)
                    log.info("special service %s started", self.name)
                    task_status.started()
        finally:
            try:
                with trio.CancelScope(shield=True):
                    await self.save()
            finally:
                self._scope = None
                stopped.set()
                log.info("special service %s stopped", self.name)

    async def load(self) -> None:
        """Reads persisted progress before the loops start."""
        return None

    @abc.abstractmethod
    async def run(self, nursery: trio.Nursery) -> None:
        """Starts the service's loops in `nursery` (its own task group)."""

    async def save(self) -> None:
        """Persists progress once every loop has ended."""
        return None


def real_destination(props: Mapping[str, str]) -> tuple[str, int] | None:
    """(REAL_TOPIC, REAL_QID) of a half or scheduled message, None when absent or bad."""
    topic = props.get(PROPERTY_REAL_TOPIC)
    try:
        qid = int(props.get(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        return None
    if not topic or qid < 0:
        return None
    return topic, qid
