"""Broker requests of the client (RocketMQ's MQClientAPIImpl): one method per request code,
typed arguments in, typed results or a `BrokerResponseError` out. Network errors pass through
as rmq_ha.errors.Remoting*Error (definite only for a connect error)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from rmq_ha.client.errors import BrokerResponseError
from rmq_ha.client.message import MessageExt, decode_messages
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    BOUNDARY_LOWER,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmq_ha.protocol.models import (
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    TopicConfig,
    UnlockBatchRequestBody,
)

#: PullSysFlag bits.
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # PULL_NOT_FOUND
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # PULL_OFFSET_MOVED


_PULL_STATUS = {
    Resp.SUCCESS: PullStatus.FOUND,
    Resp.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    Resp.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    Resp.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]
    suggest_which_broker_id: int = 0


class BrokerApi:
    def __init__(
        self, remoting: RemotingClient, *, timeout_s: float = 3.0, serialize_type: int = 0
    ) -> None:
        self.remoting = remoting
        self.timeout_s = timeout_s
        self.serialize_type = serialize_type

    def request(
        self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        return RemotingCommand.request(code, ext, body, serialize_type=self.serialize_type)

    async def call(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        timeout_s: float | None = None,
        ok: Iterable[int] = (Resp.SUCCESS,),
    ) -> RemotingCommand:
        """A request whose answer must have one of the `ok` codes."""
        resp = await self.remoting.invoke(
            addr,
            self.request(code, ext, body),
            timeout_s if timeout_s is not None else self.timeout_s,
        )
        if resp.code not in ok:
            raise BrokerResponseError(resp.code, resp.remark, addr)
        return resp

    async def oneway(
        self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None
    ) -> None:
        cmd = self.request(code, ext, body)
        await self.remoting.invoke_oneway(addr, cmd)

    # ---- clients ---------------------------------------------------------------------------

    async def heartbeat(self, addr: str, data: HeartbeatData) -> None:
        await self.call(addr, RC.HEART_BEAT, body=data.to_json())

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        *,
        producer_group: str | None = None,
        consumer_group: str | None = None,
    ) -> None:
        h = UnregisterClientRequestHeader(
            client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        await self.call(addr, RC.UNREGISTER_CLIENT, h.to_ext())

    async def consumer_id_list(self, addr: str, group: str) -> list[str]:
        h = GetConsumerListByGroupRequestHeader(consumer_group=group)
        resp = await self.call(addr, RC.GET_CONSUMER_LIST_BY_GROUP, h.to_ext())
        return GetConsumerListByGroupResponseBody.from_json(resp.body).consumer_id_list

    # ---- pull ------------------------------------------------------------------------------

    async def pull(
        self,
        addr: str,
        broker_name: str,
        *,
        group: str,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        sys_flag: int,
        commit_offset: int = 0,
        suspend_timeout_s: float = 0.0,
        subscription: str | None = None,
        sub_version: int = 0,
        expression_type: str = "TAG",
        max_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> PullResult:
        h = PullMessageRequestHeader(
            consumer_group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=int(suspend_timeout_s * 1000),
            subscription=subscription,
            sub_version=sub_version,
            expression_type=expression_type,
            max_msg_bytes=max_bytes,
            bname=broker_name,
        )
        resp = await self.call(
            addr, RC.PULL_MESSAGE, h.to_ext(), timeout_s=timeout_s, ok=_PULL_STATUS.keys()
        )
        rh = PullMessageResponseHeader.from_ext(resp.ext_fields)
        status = _PULL_STATUS[Resp(resp.code)]
        msgs = decode_messages(resp.body, broker_name) if status is PullStatus.FOUND else []
        return PullResult(
            status, rh.next_begin_offset, rh.min_offset, rh.max_offset, msgs,
            rh.suggest_which_broker_id,
        )  # fmt: skip

    # ---- offsets ---------------------------------------------------------------------------

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int | None:
        """The committed offset; None for QUERY_NOT_FOUND (a group new to the queue)."""
        h = QueryConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name
        )
        resp = await self.call(
            addr, RC.QUERY_CONSUMER_OFFSET, h.to_ext(), ok=(Resp.SUCCESS, Resp.QUERY_NOT_FOUND)
        )
        if resp.code == Resp.QUERY_NOT_FOUND:
            return None
        return QueryConsumerOffsetResponseHeader.from_ext(resp.ext_fields).offset

    def _update_offset_ext(self, group: str, mq: MessageQueue, offset: int) -> dict[str, str]:
        return UpdateConsumerOffsetRequestHeader(
            consumer_group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            commit_offset=offset,
            bname=mq.broker_name,
        ).to_ext()

    async def update_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, offset: int, *, oneway: bool
    ) -> None:
        ext = self._update_offset_ext(group, mq, offset)
        if oneway:
            await self.oneway(addr, RC.UPDATE_CONSUMER_OFFSET, ext)
        else:
            await self.call(addr, RC.UPDATE_CONSUMER_OFFSET, ext)

    async def max_offset(self, addr: str, mq: MessageQueue) -> int:
        h = GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name)
        resp = await self.call(addr, RC.GET_MAX_OFFSET, h.to_ext())
        return GetMaxOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def min_offset(self, addr: str, mq: MessageQueue) -> int:
        h = GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name)
        resp = await self.call(addr, RC.GET_MIN_OFFSET, h.to_ext())
        return GetMinOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def search_offset(
        self, addr: str, mq: MessageQueue, timestamp_ms: int, boundary: str = BOUNDARY_LOWER
    ) -> int:
        h = SearchOffsetRequestHeader(
            topic=mq.topic,
            queue_id=mq.queue_id,
            timestamp=timestamp_ms,
            boundary_type=boundary.upper(),
            bname=mq.broker_name,
        )
        resp = await self.call(addr, RC.SEARCH_OFFSET_BY_TIMESTAMP, h.to_ext())
        return SearchOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def earliest_msg_store_time(self, addr: str, mq: MessageQueue) -> int:
        h = GetEarliestMsgStoretimeRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name
        )
        resp = await self.call(addr, RC.GET_EARLIEST_MSG_STORETIME, h.to_ext())
        return GetEarliestMsgStoretimeResponseHeader.from_ext(resp.ext_fields).timestamp

    # ---- retries and locks -----------------------------------------------------------------

    async def send_back(
        self,
        addr: str,
        msg: MessageExt,
        *,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        broker_name: str | None = None,
    ) -> None:
        h = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            unit_mode=False,
            max_reconsume_times=max_reconsume_times,
            bname=broker_name,
        )
        await self.call(addr, RC.CONSUMER_SEND_MSG_BACK, h.to_ext())

    async def lock_batch(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue], timeout_s: float
    ) -> set[MessageQueue]:
        body = LockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=set(mqs))
        resp = await self.call(addr, RC.LOCK_BATCH_MQ, body=body.to_json(), timeout_s=timeout_s)
        return LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set

    async def unlock_batch(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue], *, oneway: bool
    ) -> None:
        body = UnlockBatchRequestBody(
            consumer_group=group, client_id=client_id, mq_set=set(mqs)
        ).to_json()
        if oneway:
            await self.oneway(addr, RC.UNLOCK_BATCH_MQ, body=body)
        else:
            await self.call(addr, RC.UNLOCK_BATCH_MQ, body=body)

    # ---- admin -----------------------------------------------------------------------------

    async def create_topic(self, addr: str, tc: TopicConfig, default_topic: str) -> None:
        assert tc.topic_name
        h = CreateTopicRequestHeader(
            topic=tc.topic_name,
            default_topic=default_topic,
            read_queue_nums=tc.read_queue_nums,
            write_queue_nums=tc.write_queue_nums,
            perm=tc.perm,
            topic_filter_type=tc.topic_filter_type,
            topic_sys_flag=tc.topic_sys_flag,
            order=tc.order,
        )
        await self.call(addr, RC.UPDATE_AND_CREATE_TOPIC, h.to_ext())
