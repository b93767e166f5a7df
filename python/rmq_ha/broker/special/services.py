"""The special services' manager, which the broker holds: the escape bridge, the three
services (delay, transactions, pop), the processors of the requests they serve, and routing
(`route()`: where a message that asks for special treatment is really stored)."""

from __future__ import annotations

import trio

from rmq_ha._native import TOPIC_DELETED, TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from rmq_ha.broker.ports import Ports
from rmq_ha.broker.special.base import (
    INNER_PRODUCER_GROUP_PREFIX,
    TRANSACTION_TYPE_MASK,
    Escape,
    InnerMessage,
    SpecialService,
)
from rmq_ha.broker.special.delay import DelayService
from rmq_ha.broker.special.escape import EscapeBridge
from rmq_ha.broker.special.pop import PopService
from rmq_ha.broker.special.transaction import TransactionService
from rmq_ha.clock import wall_ms
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_TRANSACTION_PREPARED,
    TIMER_PROPERTIES,
    decode_properties,
    encode_properties,
)


class SpecialServices:
    """What the broker holds: the escape, the three services, and the processors of the
    requests they serve (END_TRANSACTION, POP_MESSAGE, ACK_MESSAGE,
    CHANGE_MESSAGE_INVISIBLETIME, GET_ALL_DELAY_OFFSET)."""

    def __init__(self, ports: Ports) -> None:
        self.ports = ports
        #: Local on the master, remote on an acting slave (escape.py).
        self.bridge = EscapeBridge(ports)
        self.escape: Escape = self.bridge
        self.delay: DelayService = DelayService(ports, self)
        self.transactions: TransactionService = TransactionService(ports, self)
        self.pop: PopService = PopService(ports, self)
        self._services: tuple[SpecialService, ...] = (self.delay, self.transactions, self.pop)
        self._system_topics()

    @property
    def services(self) -> tuple[SpecialService, ...]:
        return self._services

    @property
    def running(self) -> bool:
        return any(s.running for s in self._services)

    async def start(self, parent: trio.Nursery) -> None:
        for s in self._services:
            await s.start(parent)

    async def stop(self) -> None:
        for s in self._services:
            await s.stop()

    async def change_status(self, should_start: bool, parent: trio.Nursery) -> None:
        """RIP-32's changeSpecialServiceStatus: the master, or the acting master, runs them."""
        if should_start:
            await self.start(parent)
        else:
            await self.stop()

    def register(self, d: Dispatcher) -> None:
        self.delay.register(d)
        self.transactions.register(d)
        self.pop.register(d)

    def _system_topics(self) -> None:
        """The topics the services write, as RocketMQ's TopicConfigManager creates them."""
        topics = self.ports.topics
        wanted = {
            **self.delay.system_topics(),
            **self.transactions.system_topics(),
            **self.pop.system_topics(),
        }
        for name, queues in wanted.items():
            tc = topics.get(name)
            if tc is None or tc.read_queue_nums < queues or tc.write_queue_nums < queues:
                if tc is not None:
                    # More delay levels or revive queues than before: grow the topic.
                    topics.table.pop(name, None)
                topics.system(name, queues)

    def not_allowed_send(self, topic: str, producer_group: str = "") -> bool:
        """System topics producers may not write (RocketMQ's TopicValidator.NOT_ALLOWED_SEND).
        The revive topic takes sends from brokers only (producer group InnerProducerGroup_*):
        an acting slave's escape bridge sends its pop checkpoints and acks there."""
        if topic in self.pop.system_topics():
            return not producer_group.startswith(INNER_PRODUCER_GROUP_PREFIX)
        return (
            topic == TOPIC_DELETED  # the store's deletion markers
            or topic in self.transactions.system_topics()
            or topic in self.delay.system_topics()
        )

    # ---- routing ---------------------------------------------------------------------------

    def route(self, msg: InnerMessage) -> InnerMessage:
        """Where a message is really stored (RocketMQ: TransactionalMessageBridge and
        HookUtils.handleScheduleMessage / the timer check at put time):

        * a transaction half (TRAN_MSG=true or the prepared sysflag) goes to
          RMQ_SYS_TRANS_HALF_TOPIC queue 0, its real topic and queue in REAL_TOPIC/REAL_QID,
          sysflag reset so the half is dispatched to that topic's queue;
        * a message with DELAY > 0 (not-type or committed) goes to SCHEDULE_TOPIC_XXXX queue
          level-1, same properties;
        * a timer message (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS) rides the
          delay levels: the largest level not past its delivery time, again and again, until
          it is due (see delay.py);
        * anything else is stored as it is. `msg` is changed in place and returned."""
        props = msg.properties
        ttype = msg.sys_flag & TRANSACTION_TYPE_MASK
        tran = props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
        if tran or ttype == TRANSACTION_PREPARED_TYPE:
            return self.transactions.to_half(msg)
        if ttype not in (0, TRANSACTION_COMMIT_TYPE):
            return msg
        if PROPERTY_DELAY in props:
            return self.delay.to_schedule(msg)
        if any(k in props for k in TIMER_PROPERTIES):
            return self.delay.to_timer(msg, wall_ms())
        return msg

    def send_refusal(self, props: bytes) -> str | None:
        """Why a send is refused for what its properties ask of the special services (None:
        it is taken): a timer message due past timerMaxDelaySec. Other sends (a delay level, a
        transaction half) are not decoded for it."""
        if b"TIMER_DE" not in props:  # TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS
            return None
        return self.delay.timer_refusal(decode_properties(props), wall_ms())

    @staticmethod
    def may_route(props: bytes) -> bool:
        """A cheap test on the raw properties of a send, so ordinary sends never decode them."""
        return (
            b"TRAN_MSG\x01" in props
            or b"DELAY\x01" in props
            or b"TIMER_DE" in props  # TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS
        )

    def route_send(
        self, topic: str, queue_id: int, props: bytes, sys_flag: int
    ) -> tuple[str, int, bytes, int]:
        """`route` for the send path, on raw properties."""
        m = self.route(
            InnerMessage(
                topic=topic,
                queue_id=queue_id,
                body=b"",
                properties=decode_properties(props),
                sys_flag=sys_flag,
            )
        )
        return m.topic, m.queue_id, encode_properties(m.properties).encode(), m.sys_flag
