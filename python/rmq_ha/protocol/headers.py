"""Typed custom headers of the requests and responses rmq_ha speaks.

Field lists and `@CFNotNull` (required) markers follow RocketMQ 5.3.x
(`remoting/.../protocol/header/**`); wire names are the Java field names. The mechanism is in
`headerbase`. Each class lists in `CODES` the codes it travels with.

Lock/unlock (41/42), heartbeat (34) and the bulk metadata reads carry JSON bodies instead; see
`models`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from rmq_ha.clock import wall_ms
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.headerbase import (
    I32,
    CommandHeader,
    HeaderError,
    MalformedHeaderField,
    MissingHeaderField,
    header_fields,
    wire,
)

__all__ = [
    "CONTROLLER_REQUEST_HEADERS",
    "CONTROLLER_RESPONSE_HEADERS",
    "I32",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "AckMessageRequestHeader",
    "AlterSyncStateSetRequestHeader",
    "AlterSyncStateSetResponseHeader",
    "ApplyBrokerIdRequestHeader",
    "ApplyBrokerIdResponseHeader",
    "BrokerHeartbeatRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "CheckTransactionStateRequestHeader",
    "CleanControllerBrokerDataRequestHeader",
    "CommandHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "ElectMasterRequestHeader",
    "ElectMasterResponseHeader",
    "EndTransactionRequestHeader",
    "ExchangeHAInfoRequestHeader",
    "ExchangeHAInfoResponseHeader",
    "GetBrokerMemberGroupRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMetaDataResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetNextBrokerIdRequestHeader",
    "GetNextBrokerIdResponseHeader",
    "GetReplicaInfoRequestHeader",
    "GetReplicaInfoResponseHeader",
    "GetRouteInfoRequestHeader",
    "HeaderError",
    "LockBatchMqRequestHeader",
    "MalformedHeaderField",
    "MissingHeaderField",
    "NotifyBrokerRoleChangedRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "NotifyMinBrokerIdChangeRequestHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "RegisterBrokerToControllerRequestHeader",
    "RegisterBrokerToControllerResponseHeader",
    "RpcRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "TopicQueueRequestHeader",
    "TopicRequestHeader",
    "UnRegisterBrokerRequestHeader",
    "UnlockBatchMqRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "UpdateConsumerOffsetResponseHeader",
    "ViewMessageRequestHeader",
    "header_fields",
    "parse_send_message_header",
    "wire",
]

# ---------------------------------------------------------------------------------------------
# RPC base fields (remoting/.../rpc/RpcRequestHeader, TopicRequestHeader, TopicQueueRequestHeader)


@dataclass(kw_only=True, slots=True)
class RpcRequestHeader(CommandHeader):
    """ns: namespace, nsd: namespaced flag, bname: target broker name, oway: oneway flag."""

    ns: str | None = None
    nsd: bool | None = None
    bname: str | None = None
    oway: bool | None = None


@dataclass(kw_only=True, slots=True)
class TopicRequestHeader(RpcRequestHeader):
    """lo: logical-queue (static topic) flag."""

    lo: bool | None = None


@dataclass(kw_only=True, slots=True)
class TopicQueueRequestHeader(TopicRequestHeader):
    """Same fields as TopicRequestHeader; kept for fidelity with the Java class tree."""


# ---------------------------------------------------------------------------------------------
# Send


@dataclass(kw_only=True, slots=True)
class SendMessageRequestHeader(TopicQueueRequestHeader):
    """SEND_MESSAGE (10). `bname` (the base field) is the target broker name."""

    CODES: ClassVar[tuple[int, ...]] = (RC.SEND_MESSAGE, RC.SEND_REPLY_MESSAGE)

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: I32
    queue_id: I32
    sys_flag: I32
    born_timestamp: int
    flag: I32
    properties: str | None = None
    reconsume_times: I32 | None = None
    unit_mode: bool | None = None
    batch: bool | None = None
    max_reconsume_times: I32 | None = None

    def to_v2(self) -> SendMessageRequestHeaderV2:
        """RocketMQ's createSendMessageRequestHeaderV2 (base RPC fields are kept too)."""
        return SendMessageRequestHeaderV2(
            ns=self.ns,
            nsd=self.nsd,
            bname=self.bname,
            oway=self.oway,
            lo=self.lo,
            producer_group=self.producer_group,
            topic=self.topic,
            default_topic=self.default_topic,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=self.queue_id,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            flag=self.flag,
            properties=self.properties,
            reconsume_times=self.reconsume_times,
            unit_mode=self.unit_mode,
            max_reconsume_times=self.max_reconsume_times,
            batch=self.batch,
            broker_name=self.bname,
        )


@dataclass(kw_only=True, slots=True)
class SendMessageRequestHeaderV2(TopicQueueRequestHeader):
    """SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): one-letter keys a..n.

    `l` carries maxReconsumeTimes (the Java comment says consumeRetryTimes, but both
    conversions map it to maxReconsumeTimes); `n` carries the V1 header's `bname`.
    """

    CODES: ClassVar[tuple[int, ...]] = (
        RC.SEND_MESSAGE_V2,
        RC.SEND_BATCH_MESSAGE,
        RC.SEND_REPLY_MESSAGE_V2,
    )

    producer_group: str = field(metadata=wire("a"))
    topic: str = field(metadata=wire("b"))
    default_topic: str = field(metadata=wire("c"))
    default_topic_queue_nums: I32 = field(metadata=wire("d"))
    queue_id: I32 = field(metadata=wire("e"))
    sys_flag: I32 = field(metadata=wire("f"))
    born_timestamp: int = field(metadata=wire("g"))
    flag: I32 = field(metadata=wire("h"))
    properties: str | None = field(default=None, metadata=wire("i"))
    reconsume_times: I32 | None = field(default=None, metadata=wire("j"))
    unit_mode: bool | None = field(default=None, metadata=wire("k"))
    max_reconsume_times: I32 | None = field(default=None, metadata=wire("l"))
    batch: bool | None = field(default=None, metadata=wire("m"))
    broker_name: str | None = field(default=None, metadata=wire("n"))

    def to_v1(self) -> SendMessageRequestHeader:
        """RocketMQ's createSendMessageRequestHeaderV1; `n` becomes the V1 `bname`."""
        return SendMessageRequestHeader(
            ns=self.ns,
            nsd=self.nsd,
            bname=self.broker_name if self.broker_name is not None else self.bname,
            oway=self.oway,
            lo=self.lo,
            producer_group=self.producer_group,
            topic=self.topic,
            default_topic=self.default_topic,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=self.queue_id,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            flag=self.flag,
            properties=self.properties,
            reconsume_times=self.reconsume_times,
            unit_mode=self.unit_mode,
            batch=self.batch,
            max_reconsume_times=self.max_reconsume_times,
        )


_V2_CODES: Final = frozenset(SendMessageRequestHeaderV2.CODES)


def parse_send_message_header(code: int, ext: Mapping[str, str] | None) -> SendMessageRequestHeader:
    """Decode a send request's header the way the broker does: V2 keys for 310/320/325,
    long names otherwise, always returned as the V1 (long-named) header."""
    if code in _V2_CODES:
        return SendMessageRequestHeaderV2.from_ext(ext).to_v1()
    return SendMessageRequestHeader.from_ext(ext)


@dataclass(kw_only=True, slots=True)
class ReplyMessageRequestHeader(TopicQueueRequestHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326), broker -> requesting producer: a request-reply
    answer, with the reply's send header fields and where it was born and stored
    (``host:port``). The body is the reply's body."""

    CODES: ClassVar[tuple[int, ...]] = (RC.PUSH_REPLY_MESSAGE_TO_CLIENT,)

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: I32
    queue_id: I32
    sys_flag: I32
    born_timestamp: int
    flag: I32
    properties: str | None = None
    reconsume_times: I32 | None = None
    unit_mode: bool = False
    born_host: str
    store_host: str
    store_timestamp: int


@dataclass(kw_only=True, slots=True)
class SendMessageResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE)

    msg_id: str
    queue_id: I32
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None


# ---------------------------------------------------------------------------------------------
# Pull and offsets


@dataclass(kw_only=True, slots=True)
class PullMessageRequestHeader(TopicQueueRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.PULL_MESSAGE, RC.LITE_PULL_MESSAGE)

    consumer_group: str
    topic: str
    queue_id: I32
    queue_offset: int
    max_msg_nums: I32
    sys_flag: I32
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None = None
    sub_version: int
    expression_type: str | None = None
    max_msg_bytes: I32 | None = None
    request_source: I32 | None = None
    # [sic] RocketMQ's wire name is misspelt.
    proxy_forward_client_id: str | None = field(default=None, metadata=wire("proxyFrowardClientId"))


@dataclass(kw_only=True, slots=True)
class PullMessageResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.PULL_MESSAGE, RC.LITE_PULL_MESSAGE)

    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    offset_delta: int | None = None
    topic_sys_flag: I32 | None = None
    group_sys_flag: I32 | None = None
    forbidden_type: I32 | None = None


@dataclass(kw_only=True, slots=True)
class QueryConsumerOffsetRequestHeader(TopicQueueRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_CONSUMER_OFFSET,)

    consumer_group: str
    topic: str
    queue_id: I32
    set_zero_if_not_found: bool | None = None


@dataclass(kw_only=True, slots=True)
class QueryConsumerOffsetResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_CONSUMER_OFFSET,)

    offset: int


@dataclass(kw_only=True, slots=True)
class UpdateConsumerOffsetRequestHeader(TopicQueueRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.UPDATE_CONSUMER_OFFSET,)

    consumer_group: str
    topic: str
    queue_id: I32
    commit_offset: int


@dataclass(kw_only=True, slots=True)
class UpdateConsumerOffsetResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.UPDATE_CONSUMER_OFFSET,)


@dataclass(kw_only=True, slots=True)
class GetMaxOffsetRequestHeader(TopicQueueRequestHeader):
    """`committed` (default true): cap at confirmOffset rather than the raw max."""

    CODES: ClassVar[tuple[int, ...]] = (RC.GET_MAX_OFFSET,)

    topic: str
    queue_id: I32
    committed: bool = True


@dataclass(kw_only=True, slots=True)
class GetMaxOffsetResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_MAX_OFFSET,)

    offset: int


@dataclass(kw_only=True, slots=True)
class GetMinOffsetRequestHeader(TopicQueueRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_MIN_OFFSET,)

    topic: str
    queue_id: I32


@dataclass(kw_only=True, slots=True)
class GetMinOffsetResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_MIN_OFFSET,)

    offset: int


@dataclass(kw_only=True, slots=True)
class GetEarliestMsgStoretimeRequestHeader(TopicQueueRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_EARLIEST_MSG_STORETIME,)

    topic: str
    queue_id: I32


@dataclass(kw_only=True, slots=True)
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_EARLIEST_MSG_STORETIME,)

    timestamp: int


BOUNDARY_LOWER: Final = "lower"
BOUNDARY_UPPER: Final = "upper"


@dataclass(kw_only=True, slots=True)
class SearchOffsetRequestHeader(TopicQueueRequestHeader):
    """`boundaryType`: Java sends the enum name ("LOWER"/"UPPER"); parsing is
    case-insensitive and anything but "upper" means lower (BoundaryType.getType)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.SEARCH_OFFSET_BY_TIMESTAMP,)

    topic: str
    queue_id: I32
    timestamp: int
    boundary_type: str | None = None

    @property
    def is_upper(self) -> bool:
        return (self.boundary_type or "").lower() == BOUNDARY_UPPER


@dataclass(kw_only=True, slots=True)
class SearchOffsetResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.SEARCH_OFFSET_BY_TIMESTAMP,)

    offset: int


@dataclass(kw_only=True, slots=True)
class ViewMessageRequestHeader(CommandHeader):
    """`offset` is the commitlog (physical) offset decoded from the offset message id."""

    CODES: ClassVar[tuple[int, ...]] = (RC.VIEW_MESSAGE_BY_ID,)

    topic: str | None = None
    offset: int


# ---------------------------------------------------------------------------------------------
# Consumer groups, retries, transactions, client lifecycle


@dataclass(kw_only=True, slots=True)
class GetConsumerListByGroupRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_CONSUMER_LIST_BY_GROUP,)

    consumer_group: str


@dataclass(kw_only=True, slots=True)
class ConsumerSendMsgBackRequestHeader(RpcRequestHeader):
    """`offset` is the failed message's commitlog offset; delayLevel 0 lets the broker pick
    (3 + reconsumeTimes), -1 sends it straight to the dead-letter queue."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONSUMER_SEND_MSG_BACK,)

    offset: int
    group: str
    delay_level: I32
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: I32 | None = None


@dataclass(kw_only=True, slots=True)
class EndTransactionRequestHeader(RpcRequestHeader):
    """`commitOrRollback` is a transaction sysflag: 0 not-type, 8 commit, 12 rollback."""

    CODES: ClassVar[tuple[int, ...]] = (RC.END_TRANSACTION,)

    topic: str | None = None
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: I32
    from_transaction_check: bool | None = False
    msg_id: str
    transaction_id: str | None = None


@dataclass(kw_only=True, slots=True)
class CheckTransactionStateRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CHECK_TRANSACTION_STATE,)

    topic: str | None = None
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# ---------------------------------------------------------------------------------------------
# POP consumption (5.x): the broker assigns messages and hides them for `invisibleTime`; each
# popped message carries an "extraInfo" (the POP_CK property) that ACK_MESSAGE and
# CHANGE_MESSAGE_INVISIBLETIME send back. See broker/special/pop.py for its format.


@dataclass(kw_only=True, slots=True)
class PopMessageRequestHeader(TopicQueueRequestHeader):
    """queueId -1 pops from every readable queue. initMode: 0 = from the min offset, 1 = from
    the max offset, for a group new to the queue. expType/exp: the filter (TAG only here)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.POP_MESSAGE,)

    consumer_group: str
    topic: str
    queue_id: I32
    max_msg_nums: I32
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: I32
    exp_type: str | None = None
    exp: str | None = None
    order: bool | None = False
    attempt_id: str | None = None


@dataclass(kw_only=True, slots=True)
class PopMessageResponseHeader(CommandHeader):
    """startOffsetInfo: "retry qid startOffset" per queue, ';'-separated; msgOffsetInfo:
    "retry qid o1,o2,..." (retry is 1 for the group's pop retry topic, else 0)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.POP_MESSAGE,)

    pop_time: int
    invisible_time: int
    revive_qid: I32
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(kw_only=True, slots=True)
class AckMessageRequestHeader(TopicQueueRequestHeader):
    """`topic` is the topic the message was popped from (the retry topic for a retry)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.ACK_MESSAGE,)

    consumer_group: str
    topic: str
    queue_id: I32
    extra_info: str
    offset: int


@dataclass(kw_only=True, slots=True)
class ChangeInvisibleTimeRequestHeader(TopicQueueRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CHANGE_MESSAGE_INVISIBLETIME,)

    consumer_group: str
    topic: str
    queue_id: I32
    extra_info: str
    offset: int
    invisible_time: int


@dataclass(kw_only=True, slots=True)
class ChangeInvisibleTimeResponseHeader(CommandHeader):
    """The new lease: the client rebuilds the message's extraInfo from it."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CHANGE_MESSAGE_INVISIBLETIME,)

    pop_time: int
    invisible_time: int
    revive_qid: I32


@dataclass(kw_only=True, slots=True)
class NotifyConsumerIdsChangedRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.NOTIFY_CONSUMER_IDS_CHANGED,)

    consumer_group: str


@dataclass(kw_only=True, slots=True)
class UnregisterClientRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.UNREGISTER_CLIENT,)

    client_id: str = field(metadata=wire("clientID"))
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(kw_only=True, slots=True)
class LockBatchMqRequestHeader(RpcRequestHeader):
    """No fields of its own: the request is in the LockBatchRequestBody."""

    CODES: ClassVar[tuple[int, ...]] = (RC.LOCK_BATCH_MQ,)


@dataclass(kw_only=True, slots=True)
class UnlockBatchMqRequestHeader(RpcRequestHeader):
    """No fields of its own: the request is in the UnlockBatchRequestBody."""

    CODES: ClassVar[tuple[int, ...]] = (RC.UNLOCK_BATCH_MQ,)


# ---------------------------------------------------------------------------------------------
# Topics and routes


@dataclass(kw_only=True, slots=True)
class CreateTopicRequestHeader(TopicRequestHeader):
    """`topicFilterType` is "SINGLE_TAG" or "MULTI_TAG"; `attributes` is "+k=v,-k" text."""

    CODES: ClassVar[tuple[int, ...]] = (RC.UPDATE_AND_CREATE_TOPIC,)

    topic: str
    default_topic: str
    read_queue_nums: I32
    write_queue_nums: I32
    perm: I32
    topic_filter_type: str
    topic_sys_flag: I32 | None = None
    order: bool = field(default=False, metadata=wire(required=True))
    attributes: str | None = None
    force: bool | None = False


@dataclass(kw_only=True, slots=True)
class GetRouteInfoRequestHeader(TopicRequestHeader):
    """acceptStandardJsonOnly: ask for quoted map keys even from an old-version client."""

    CODES: ClassVar[tuple[int, ...]] = (RC.GET_ROUTEINFO_BY_TOPIC,)

    topic: str
    accept_standard_json_only: bool | None = None


# ---------------------------------------------------------------------------------------------
# Broker <-> name server


@dataclass(kw_only=True, slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103). `bodyCrc32` = CRC32(body) & 0x7FFFFFFF, 0 = unchecked.

    `zone_name` is not a field of the Java header: the name server reads the `__ZONE_NAME`
    extField beside it.
    """

    CODES: ClassVar[tuple[int, ...]] = (RC.REGISTER_BROKER,)

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    heartbeat_timeout_millis: int | None = None
    enable_acting_master: bool | None = None
    compressed: bool = False
    body_crc32: I32 = 0
    zone_name: str | None = field(default=None, metadata=wire("__ZONE_NAME"))


@dataclass(kw_only=True, slots=True)
class RegisterBrokerResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.REGISTER_BROKER,)

    ha_server_addr: str | None = None
    master_addr: str | None = None
    #: Ours (RocketMQ's brokers ignore unknown fields): the name server kept another broker's
    #: claim to this id, registered in a later epoch (#6316) - this broker is stale.
    register_refused: bool | None = None


@dataclass(kw_only=True, slots=True)
class UnRegisterBrokerRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.UNREGISTER_BROKER,)

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(kw_only=True, slots=True)
class BrokerHeartbeatRequestHeader(CommandHeader):
    """BROKER_HEARTBEAT (904), to the name server (liveness only) and to the controller
    (which also keeps epoch, maxOffset, confirmOffset and electionPriority for elections).
    `heartbeatTimeoutMills` [sic] is the sender's expiry."""

    CODES: ClassVar[tuple[int, ...]] = (RC.BROKER_HEARTBEAT,)

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: I32 | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: I32 | None = None
    #: Ours (issue 13): the replica lost bytes below this offset (epoch of the last one) and is
    #: not electable until it holds them again. Absent from RocketMQ's brokers: electable.
    catch_up_offset: int | None = None
    catch_up_epoch: I32 | None = None
    #: Ours: how long (ms, the sender's clock) the receiving controller has not answered the
    #: sender's heartbeats; large under a one-way partition (controller/elect.py). Absent
    #: from RocketMQ's brokers (their heartbeats are oneway): assumed to hear.
    unanswered_ms: int | None = None


@dataclass(kw_only=True, slots=True)
class GetBrokerMemberGroupRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_BROKER_MEMBER_GROUP,)

    cluster_name: str
    broker_name: str


@dataclass(kw_only=True, slots=True)
class NotifyMinBrokerIdChangeRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.NOTIFY_MIN_BROKER_ID_CHANGE,)

    min_broker_id: int | None = None
    broker_name: str | None = None
    min_broker_addr: str | None = None
    offline_broker_addr: str | None = None
    ha_broker_addr: str | None = None


@dataclass(kw_only=True, slots=True)
class QueryDataVersionRequestHeader(CommandHeader):
    """QUERY_DATA_VERSION (322): body is the broker's topic-config DataVersion."""

    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_DATA_VERSION,)

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(kw_only=True, slots=True)
class QueryDataVersionResponseHeader(CommandHeader):
    """`changed`: the name server's DataVersion differs; body is the name server's copy."""

    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_DATA_VERSION,)

    changed: bool


@dataclass(kw_only=True, slots=True)
class ExchangeHAInfoRequestHeader(CommandHeader):
    """EXCHANGE_BROKER_HA_INFO (906): a master pushes its HA info (all set), or a slave asks
    for the master's (masterHaAddress absent)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.EXCHANGE_BROKER_HA_INFO,)

    master_ha_address: str | None = None
    master_flush_offset: int | None = None
    master_address: str | None = None


@dataclass(kw_only=True, slots=True)
class ExchangeHAInfoResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.EXCHANGE_BROKER_HA_INFO,)

    master_ha_address: str | None = None
    master_flush_offset: int | None = None
    master_address: str | None = None


# ---------------------------------------------------------------------------------------------
# Controller (RIP-44): remoting/.../protocol/header/controller/** and
# NotifyBrokerRoleChangedRequestHeader. Java primitives (`long invokeTime`, `boolean isLeader`)
# are always sent; `invokeTime` defaults to the sender's wall clock, as in Java.


@dataclass(kw_only=True, slots=True)
class AlterSyncStateSetRequestHeader(CommandHeader):
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001); the body is a `models.SyncStateSet`."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_ALTER_SYNC_STATE_SET,)

    broker_name: str | None = None
    master_broker_id: int | None = None
    master_epoch: I32 | None = None
    invoke_time: int = field(default_factory=wall_ms)


@dataclass(kw_only=True, slots=True)
class AlterSyncStateSetResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_ALTER_SYNC_STATE_SET,)

    new_sync_state_set_epoch: I32 = 0


@dataclass(kw_only=True, slots=True)
class ElectMasterRequestHeader(CommandHeader):
    """CONTROLLER_ELECT_MASTER (1002). brokerId -1 = controller-triggered; designateElect =
    admin-triggered (prefer brokerId)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_ELECT_MASTER,)

    cluster_name: str = field(default="", metadata=wire(required=True))
    broker_name: str = field(default="", metadata=wire(required=True))
    broker_id: int = field(default=-1, metadata=wire(required=True))
    designate_elect: bool = field(default=False, metadata=wire(required=True))
    invoke_time: int | None = field(default_factory=wall_ms)


@dataclass(kw_only=True, slots=True)
class ElectMasterResponseHeader(CommandHeader):
    """The body is a `models.ElectMasterResponseBody`."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_ELECT_MASTER,)

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: I32 | None = None
    sync_state_set_epoch: I32 | None = None


@dataclass(kw_only=True, slots=True)
class RegisterBrokerToControllerRequestHeader(CommandHeader):
    """CONTROLLER_REGISTER_BROKER (1003). `registerCheckCode` is our extension (RocketMQ
    ignores it): when sent, it must equal the code the id was applied with."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_REGISTER_BROKER,)

    cluster_name: str | None = None
    broker_name: str | None = None
    broker_id: int | None = None
    broker_address: str | None = None
    invoke_time: int = field(default_factory=wall_ms)
    register_check_code: str | None = None


@dataclass(kw_only=True, slots=True)
class RegisterBrokerToControllerResponseHeader(CommandHeader):
    """The body is a `models.SyncStateSet`."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_REGISTER_BROKER,)

    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: I32 | None = None
    sync_state_set_epoch: I32 | None = None


@dataclass(kw_only=True, slots=True)
class GetReplicaInfoRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_GET_REPLICA_INFO,)

    broker_name: str | None = None


@dataclass(kw_only=True, slots=True)
class GetReplicaInfoResponseHeader(CommandHeader):
    """The body is a `models.SyncStateSet`."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_GET_REPLICA_INFO,)

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: I32 | None = None


@dataclass(kw_only=True, slots=True)
class GetMetaDataResponseHeader(CommandHeader):
    """CONTROLLER_GET_METADATA_INFO (1005), answered by every controller node. `peers` is
    "id:host:port;" per member. rmq_ha also sends it with CONTROLLER_NOT_LEADER (2007) answers,
    so a caller learns where the leader is."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_GET_METADATA_INFO,)

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


@dataclass(kw_only=True, slots=True)
class CleanControllerBrokerDataRequestHeader(CommandHeader):
    """CLEAN_BROKER_DATA (1011). brokerControllerIdsToClean: "1;2;3", absent = the whole set."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CLEAN_BROKER_DATA,)

    cluster_name: str | None = None
    broker_name: str
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: bool = False
    invoke_time: int = field(default_factory=wall_ms)


@dataclass(kw_only=True, slots=True)
class GetNextBrokerIdRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_GET_NEXT_BROKER_ID,)

    cluster_name: str | None = None
    broker_name: str | None = None


@dataclass(kw_only=True, slots=True)
class GetNextBrokerIdResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_GET_NEXT_BROKER_ID,)

    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: int | None = None


@dataclass(kw_only=True, slots=True)
class ApplyBrokerIdRequestHeader(CommandHeader):
    """CONTROLLER_APPLY_BROKER_ID (1013); registerCheckCode is "brokerAddr;currentTimeMillis"."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_APPLY_BROKER_ID,)

    cluster_name: str | None = None
    broker_name: str | None = None
    applied_broker_id: int | None = None
    register_check_code: str | None = None


@dataclass(kw_only=True, slots=True)
class ApplyBrokerIdResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.CONTROLLER_APPLY_BROKER_ID,)

    cluster_name: str | None = None
    broker_name: str | None = None


@dataclass(kw_only=True, slots=True)
class NotifyBrokerRoleChangedRequestHeader(CommandHeader):
    """NOTIFY_BROKER_ROLE_CHANGED (1008), controller -> broker, oneway; the body is a
    `models.SyncStateSet`."""

    CODES: ClassVar[tuple[int, ...]] = (RC.NOTIFY_BROKER_ROLE_CHANGED,)

    master_address: str | None = None
    master_epoch: I32 | None = None
    sync_state_set_epoch: I32 | None = None
    master_broker_id: int | None = None


#: The controller's headers, kept apart from REQUEST_HEADERS/RESPONSE_HEADERS below.
CONTROLLER_REQUEST_HEADERS: Final[tuple[type[CommandHeader], ...]] = (
    AlterSyncStateSetRequestHeader,
    ElectMasterRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    GetReplicaInfoRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    GetNextBrokerIdRequestHeader,
    ApplyBrokerIdRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
)

CONTROLLER_RESPONSE_HEADERS: Final[tuple[type[CommandHeader], ...]] = (
    AlterSyncStateSetResponseHeader,
    ElectMasterResponseHeader,
    RegisterBrokerToControllerResponseHeader,
    GetReplicaInfoResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdResponseHeader,
    ApplyBrokerIdResponseHeader,
)


# ---------------------------------------------------------------------------------------------
# Lookup tables (also used by gen_docs)

REQUEST_HEADERS: Final[tuple[type[CommandHeader], ...]] = (
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
    GetConsumerListByGroupRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    CheckTransactionStateRequestHeader,
    PopMessageRequestHeader,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    UnregisterClientRequestHeader,
    LockBatchMqRequestHeader,
    UnlockBatchMqRequestHeader,
    CreateTopicRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    UnRegisterBrokerRequestHeader,
    BrokerHeartbeatRequestHeader,
    GetBrokerMemberGroupRequestHeader,
    NotifyMinBrokerIdChangeRequestHeader,
    QueryDataVersionRequestHeader,
    ExchangeHAInfoRequestHeader,
)

RESPONSE_HEADERS: Final[tuple[type[CommandHeader], ...]] = (
    SendMessageResponseHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetResponseHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetResponseHeader,
    GetEarliestMsgStoretimeResponseHeader,
    SearchOffsetResponseHeader,
    PopMessageResponseHeader,
    ChangeInvisibleTimeResponseHeader,
    RegisterBrokerResponseHeader,
    QueryDataVersionResponseHeader,
    ExchangeHAInfoResponseHeader,
)
