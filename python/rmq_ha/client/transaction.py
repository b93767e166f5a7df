"""The transactional producer (RocketMQ's TransactionMQProducer), for Trio.

    async def execute(msg: Message, arg: object) -> LocalTransactionState:
        ...  # the local transaction
        return LocalTransactionState.COMMIT_MESSAGE

    async def check(msg: MessageExt) -> LocalTransactionState:
        ...  # the broker asks about a transaction it has no answer for
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("tpg", "127.0.0.1:9876", check) as p:
        r = await p.send_message_in_transaction("Orders", b"body", execute, arg=order)

As in Java (DefaultMQProducerImpl.sendMessageInTransaction / checkTransactionState):
* the half message carries TRAN_MSG=true and PGROUP=<group> (the sysflag says prepared); a
  DELAY on it is ignored (Java clears it);
* the local transaction runs only when the half was stored (SEND_OK); its exception or a
  refused half mean UNKNOW / ROLLBACK_MESSAGE;
* END_TRANSACTION goes oneway to the master of the half's broker, naming the half by its
  commitlog offset (from the offset message id) and queue offset; a failure to send it is
  logged, not raised: the broker checks the transaction later;
* CHECK_TRANSACTION_STATE from a broker runs `check` (at most `check_concurrency` at once;
  beyond MAX_PENDING_CHECKS waiting, a check is dropped and the broker asks again later) and
  answers with a oneway END_TRANSACTION (fromTransactionCheck=true) on the same connection.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import trio

from rmq_ha._native import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from rmq_ha.client.config import ProducerConfig
from rmq_ha.client.message import Message, MessageExt, SendResult, SendStatus, decode_messages
from rmq_ha.client.producer import Producer
from rmq_ha.errors import RmqHaError
from rmq_ha.net.connection import Connection
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import HeaderError
from rmq_ha.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rmq_ha.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    parse_offset_msg_id,
)

log = logging.getLogger(__name__)

#: Checks waiting for a slot at most (Java's checkRequestHolder queue is 2000 long).
MAX_PENDING_CHECKS: Final = 2000


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # [sic], RocketMQ's name

    @property
    def sys_flag(self) -> int:
        """END_TRANSACTION's commitOrRollback."""
        if self is LocalTransactionState.COMMIT_MESSAGE:
            return TRANSACTION_COMMIT_TYPE
        if self is LocalTransactionState.ROLLBACK_MESSAGE:
            return TRANSACTION_ROLLBACK_TYPE
        return 0


StateOrAwaitable = LocalTransactionState | Awaitable[LocalTransactionState]
ExecuteLocal = Callable[[Message, Any], StateOrAwaitable]
CheckLocal = Callable[[MessageExt], StateOrAwaitable]


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    send_result: SendResult
    local_state: LocalTransactionState
    #: The transaction id (the half's UNIQ_KEY).
    transaction_id: str
    #: Why END_TRANSACTION could not be sent, if it could not (the broker checks later).
    end_error: str | None = None


async def _call(fn: Callable[..., StateOrAwaitable], *args: Any) -> LocalTransactionState:
    ret = fn(*args)
    if inspect.isawaitable(ret):
        ret = await ret
    if not isinstance(ret, LocalTransactionState):
        raise TypeError(f"a transaction listener returned {ret!r}, not a LocalTransactionState")
    return ret


class TransactionProducer(Producer):
    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        check: CheckLocal,
        *,
        config: ProducerConfig | None = None,
        check_concurrency: int = 1,
    ) -> None:
        super().__init__(group, namesrv_addrs, config=config)
        self._check = check
        self._check_slots = trio.CapacityLimiter(max(1, check_concurrency))
        self._pending_checks = 0
        self._announced: set[str] = set()
        #: Checks answered, by state name.
        self.checks: dict[str, int] = {}

    async def __aenter__(self) -> TransactionProducer:
        await super().__aenter__()
        self.instance.request_handlers[RC.CHECK_TRANSACTION_STATE] = self._on_check
        return self

    async def send_message_in_transaction(
        self,
        topic: str,
        body: bytes | str,
        execute: ExecuteLocal,
        arg: Any = None,
        *,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> TransactionSendResult:
        props = dict(properties or {})
        props.pop(PROPERTY_DELAY, None)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        msg = Message(
            topic=topic,
            body=body.encode() if isinstance(body, str) else bytes(body),
            tags=tags,
            keys=keys,
            properties=props,
        )
        result = await self.send_message(msg, timeout_s=timeout_s)
        if result.queue.broker_name not in self._announced:
            # The broker checks undecided halves with a producer of the group it knows from
            # heartbeats; announce this one now rather than at the next heartbeat period.
            self._announced.add(result.queue.broker_name)
            await self.instance.send_heartbeat_to_all_brokers()
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _call(execute, msg, arg)
            except Exception:  # the local transaction failed: the broker will ask later
                log.exception("local transaction of %s failed", result.msg_id)
                state = LocalTransactionState.UNKNOW
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        end_error = None
        try:
            await self.end_transaction(result, state)
        except (RmqHaError, OSError) as e:
            end_error = str(e)
            log.warning("END_TRANSACTION for %s failed (checked later): %s", result.msg_id, e)
        return TransactionSendResult(result, state, result.msg_id, end_error)

    async def end_transaction(self, result: SendResult, state: LocalTransactionState) -> None:
        """END_TRANSACTION (oneway) for a half sent by this producer."""
        broker = result.queue.broker_name
        routes = self.instance.routes
        addr = routes.master_addr(broker)
        if addr is None:
            await routes.update(result.queue.topic)
            addr = routes.master_addr(broker)
        if addr is None:
            raise RmqHaError(f"no master address for broker {broker}")
        _, _, commit_log_offset = parse_offset_msg_id(result.offset_msg_id.split(",")[0])
        h = EndTransactionRequestHeader(
            topic=result.queue.topic,
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=state.sys_flag,
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.msg_id,
            bname=broker,
        )
        await self.instance.api.oneway(addr, RC.END_TRANSACTION, h.to_ext())

    # ---- checks from brokers ---------------------------------------------------------------

    async def _on_check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            h = CheckTransactionStateRequestHeader.from_ext(cmd.ext_fields)
            msgs = decode_messages(cmd.body, "")
        except (HeaderError, RmqHaError) as e:
            log.warning("undecodable CHECK_TRANSACTION_STATE from %s: %s", conn.peer, e)
            return None
        if not msgs or msgs[0].properties.get(PROPERTY_PRODUCER_GROUP) != self.group:
            return None
        if self._pending_checks >= MAX_PENDING_CHECKS:
            log.warning("too many pending transaction checks; dropped (asked again later)")
            return None
        self._pending_checks += 1
        try:
            async with self._check_slots:
                await self._answer_check(conn, h, msgs[0])
        finally:
            self._pending_checks -= 1
        return None

    async def _answer_check(
        self, conn: Connection, h: CheckTransactionStateRequestHeader, msg: MessageExt
    ) -> None:
        try:
            state = await _call(self._check, msg)
        except Exception:  # the broker asks again later
            log.exception("transaction check listener failed")
            state = LocalTransactionState.UNKNOW
        self.checks[state.value] = self.checks.get(state.value, 0) + 1
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=h.tran_state_table_offset,
            commit_log_offset=h.commit_log_offset,
            commit_or_rollback=state.sys_flag,
            from_transaction_check=True,
            msg_id=msg.properties.get(PROPERTY_UNIQ_KEY) or msg.msg_id,
            transaction_id=h.transaction_id,
            bname=h.bname,
        )
        try:
            await conn.send(
                RemotingCommand.request(
                    RC.END_TRANSACTION,
                    end.to_ext(),
                    oneway=True,
                    serialize_type=self.cfg.client.serialize_type.value,
                )
            )
        except Exception as e:  # the connection went away; the broker asks again later
            log.info("END_TRANSACTION after a check failed: %s", e)
