"""A minimal pop consumer (RocketMQ 5's POP_MESSAGE / ACK_MESSAGE /
CHANGE_MESSAGE_INVISIBLETIME over remoting), for Trio.

    async with PopConsumer("cg", "127.0.0.1:9876", ["Orders"]) as c:
        r = await c.pop("Orders", invisible_time_s=30, poll_time_s=5)
        for m in r.messages:
            ...
            await c.ack(m)          # or: await c.change_invisible_time(m, 60)

The broker assigns the messages (no client rebalance) and hides them for the invisible time;
what is not acked by then comes back, from the group's pop retry topic. As the Java client
does (MQClientAPIImpl.processPopResponse), each message gets its POP_CK property (extraInfo)
built from the answer; a message popped from the retry topic is shown with its original topic
(the extraInfo remembers where to ack it).
"""

from __future__ import annotations

import enum
import itertools
import time
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType

from rmq_ha.client.config import ConsumerConfig, parse_namesrv_addrs
from rmq_ha.client.errors import BrokerNotFoundError, ClientStateError, RouteNotFoundError
from rmq_ha.client.instance import ClientInstance
from rmq_ha.client.message import MessageExt, decode_messages
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from rmq_ha.protocol.message import PROPERTY_POP_CK
from rmq_ha.protocol.models import (
    ConsumerData,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from rmq_ha.protocol.pop import (
    ExtraInfo,
    build_extra_info,
    parse_offset_info,
    retry_flag,
)

#: ConsumeInitMode.
INIT_MODE_MIN = 0
INIT_MODE_MAX = 1


class PopStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # POLLING_TIMEOUT / PULL_NOT_FOUND
    POLLING_FULL = "POLLING_FULL"


@dataclass(slots=True)
class PopResult:
    status: PopStatus
    messages: list[MessageExt] = field(default_factory=list)
    pop_time_ms: int = 0
    invisible_time_ms: int = 0
    revive_qid: int = 0
    rest_num: int = 0


class PopConsumer:
    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        topics: Iterable[str] = (),
        *,
        config: ConsumerConfig | None = None,
    ) -> None:
        self.group = group
        self.cfg = config or ConsumerConfig()
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self._topics = list(topics)
        self._instance: ClientInstance | None = None
        self._stack: AsyncExitStack | None = None
        self._rr = itertools.count()

    async def __aenter__(self) -> PopConsumer:
        stack = AsyncExitStack()
        self._instance = await stack.enter_async_context(
            ClientInstance(self.namesrv_addrs, self.cfg.client)
        )
        self._instance.consumers[self.group] = self
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None and self._instance is not None
        self._instance.consumers.pop(self.group, None)
        await self._stack.aclose()
        return None

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError("the consumer is not started (use `async with`)")
        return self._instance

    # ConsumerHook: heartbeats name the group as a pop consumer of its topics.
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_POP,
            message_model=MessageModel.CLUSTERING,
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=[SubscriptionData(topic=t, sub_string="*") for t in self._topics],
        )

    def topics(self) -> Iterable[str]:
        return list(self._topics)

    def rebalance_now(self) -> None:
        return None  # the broker assigns messages; nothing to rebalance

    # ---- requests --------------------------------------------------------------------------

    async def _broker_of(self, topic: str, broker_name: str | None) -> tuple[str, str]:
        routes = self.instance.routes
        queues = await routes.subscribe_queues(topic)
        if not queues:
            raise RouteNotFoundError(f"no route for topic {topic}", topic)
        names = sorted({q.broker_name for q in queues})
        name = broker_name if broker_name is not None else names[next(self._rr) % len(names)]
        addr = routes.master_addr(name)
        if addr is None:
            raise BrokerNotFoundError(f"no master address for broker {name}", name)
        return name, addr

    async def pop(
        self,
        topic: str,
        *,
        max_nums: int = 32,
        invisible_time_s: float = 60.0,
        poll_time_s: float = 0.0,
        queue_id: int = -1,
        broker_name: str | None = None,
        expression: str = "*",
        expression_type: str = "TAG",
        init_mode: int = INIT_MODE_MIN,
    ) -> PopResult:
        name, addr = await self._broker_of(topic, broker_name)
        h = PopMessageRequestHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=queue_id,
            max_msg_nums=max_nums,
            invisible_time=int(invisible_time_s * 1000),
            poll_time=int(poll_time_s * 1000),
            born_time=int(time.time() * 1000),
            init_mode=init_mode,
            exp_type=expression_type,
            exp=expression,
            order=False,
            bname=name,
        )
        resp = await self.instance.api.call(
            addr,
            RC.POP_MESSAGE,
            h.to_ext(),
            timeout_s=poll_time_s + self.cfg.client.mq_client_api_timeout_s,
            ok=(Resp.SUCCESS, Resp.POLLING_TIMEOUT, Resp.PULL_NOT_FOUND, Resp.POLLING_FULL),
        )
        if resp.code == Resp.POLLING_FULL:
            return PopResult(PopStatus.POLLING_FULL)
        if resp.code != Resp.SUCCESS:
            return PopResult(PopStatus.NO_NEW_MSG)
        rh = PopMessageResponseHeader.from_ext(resp.ext_fields)
        starts = parse_offset_info(rh.start_offset_info)
        msgs = decode_messages(resp.body, name)
        for m in msgs:
            key = f"{retry_flag(m.topic)}@{m.queue.queue_id}"
            ck_offset = int(starts.get(key, m.queue_offset))
            m.properties[PROPERTY_POP_CK] = build_extra_info(
                ck_offset,
                rh.pop_time,
                rh.invisible_time,
                rh.revive_qid,
                m.topic,
                name,
                m.queue.queue_id,
                m.queue_offset,
            )
            # Shown with the topic asked for; the extraInfo says where to ack.
            m.topic = topic
        return PopResult(
            PopStatus.FOUND, msgs, rh.pop_time, rh.invisible_time, rh.revive_qid, rh.rest_num
        )

    def _extra(self, msg: MessageExt) -> tuple[ExtraInfo, str, str]:
        extra_info = msg.properties.get(PROPERTY_POP_CK)
        if not extra_info:
            raise ClientStateError("the message was not popped (no POP_CK property)")
        extra = ExtraInfo.parse(extra_info)
        return extra, extra_info, extra.real_topic(msg.topic, self.group)

    async def ack(self, msg: MessageExt) -> None:
        extra, extra_info, topic = self._extra(msg)
        addr = self.instance.routes.master_addr(extra.broker_name)
        if addr is None:
            raise BrokerNotFoundError(
                f"no master address for broker {extra.broker_name}", extra.broker_name
            )
        h = AckMessageRequestHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=extra.queue_id,
            extra_info=extra_info,
            offset=msg.queue_offset,
            bname=extra.broker_name,
        )
        await self.instance.api.call(addr, RC.ACK_MESSAGE, h.to_ext())

    async def change_invisible_time(self, msg: MessageExt, invisible_time_s: float) -> None:
        """A new lease of `invisible_time_s` from now; `msg` gets its new extraInfo (ack it
        with that one)."""
        extra, extra_info, topic = self._extra(msg)
        addr = self.instance.routes.master_addr(extra.broker_name)
        if addr is None:
            raise BrokerNotFoundError(
                f"no master address for broker {extra.broker_name}", extra.broker_name
            )
        h = ChangeInvisibleTimeRequestHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=extra.queue_id,
            extra_info=extra_info,
            offset=msg.queue_offset,
            invisible_time=int(invisible_time_s * 1000),
            bname=extra.broker_name,
        )
        resp = await self.instance.api.call(addr, RC.CHANGE_MESSAGE_INVISIBLETIME, h.to_ext())
        rh = ChangeInvisibleTimeResponseHeader.from_ext(resp.ext_fields)
        msg.properties[PROPERTY_POP_CK] = build_extra_info(
            msg.queue_offset,
            rh.pop_time,
            rh.invisible_time,
            rh.revive_qid,
            topic,
            extra.broker_name,
            extra.queue_id,
            msg.queue_offset,
        )
