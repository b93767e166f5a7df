"""Headers and bodies of the admin requests (mqadmin's): broker config and runtime info,
client connections, message queries by key, topic and subscription-group deletion, topic and
consume stats, offset reset by time, topic lists.

Wire names and required markers are RocketMQ 5's (`remoting/.../protocol/header/**`,
`.../protocol/body/**`, `.../protocol/subscription/SubscriptionGroupConfig`). Kept apart from
`headers`/`models` because they travel only between admin tools and the roles.

Three bodies (`TopicStatsTable`, `ConsumeStats`, `ResetOffsetBody`) are Java maps keyed by a
`MessageQueue`; fastjson writes such a map with *object* keys (`{{"brokerName":"b",...}:v}`),
which is not JSON. `dumps_mq_map` writes that form (so RocketMQ's own tools read our answers)
and `loads_fastjson` reads it (so our tools read RocketMQ's answers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.headerbase import I32, CommandHeader
from rmq_ha.protocol.headers import RpcRequestHeader, TopicRequestHeader
from rmq_ha.protocol.json_compat import BodyDecodeError, quote_bare_keys
from rmq_ha.protocol.jsonmodel import JsonModel, json_name
from rmq_ha.protocol.models import DataVersion, MessageQueue, SubscriptionData, TopicConfig

# ---------------------------------------------------------------------------------------------
# Headers


@dataclass(kw_only=True, slots=True)
class GetBrokerConfigResponseHeader(CommandHeader):
    """GET_BROKER_CONFIG (26) answer: the config's DataVersion as JSON text."""

    CODES: ClassVar[tuple[int, ...]] = (RC.GET_BROKER_CONFIG,)

    version: str | None = None


@dataclass(kw_only=True, slots=True)
class GetConsumerConnectionListRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_CONSUMER_CONNECTION_LIST,)

    consumer_group: str


@dataclass(kw_only=True, slots=True)
class GetProducerConnectionListRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_PRODUCER_CONNECTION_LIST,)

    producer_group: str


@dataclass(kw_only=True, slots=True)
class QueryMessageRequestHeader(TopicRequestHeader):
    """QUERY_MESSAGE (12): messages of `topic` whose KEYS hold `key` (or whose UNIQ_KEY is
    `key`, when the request's extFields carry `_UNIQUE_KEY_QUERY=true`), stored between the
    two timestamps (ms), at most `maxNum`."""

    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_MESSAGE,)

    topic: str
    key: str
    max_num: I32
    begin_timestamp: int
    end_timestamp: int


#: extFields flag of a QUERY_MESSAGE by unique key (MixAll.UNIQUE_MSG_QUERY_FLAG).
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"


@dataclass(kw_only=True, slots=True)
class QueryMessageResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_MESSAGE,)

    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(kw_only=True, slots=True)
class DeleteTopicRequestHeader(TopicRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.DELETE_TOPIC_IN_BROKER,)

    topic: str


@dataclass(kw_only=True, slots=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.DELETE_TOPIC_IN_NAMESRV,)

    topic: str
    cluster_name: str | None = None


@dataclass(kw_only=True, slots=True)
class BrokerWritePermRequestHeader(CommandHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327): the broker group
    whose queue data loses (or gets back) its write bit on this name server."""

    CODES: ClassVar[tuple[int, ...]] = (RC.WIPE_WRITE_PERM_OF_BROKER, RC.ADD_WRITE_PERM_OF_BROKER)

    broker_name: str


@dataclass(kw_only=True, slots=True)
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.WIPE_WRITE_PERM_OF_BROKER,)

    wipe_topic_count: I32


@dataclass(kw_only=True, slots=True)
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.ADD_WRITE_PERM_OF_BROKER,)

    add_topic_count: I32


@dataclass(kw_only=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.DELETE_SUBSCRIPTIONGROUP,)

    group_name: str
    clean_offset: bool = False


@dataclass(kw_only=True, slots=True)
class GetTopicStatsInfoRequestHeader(TopicRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_TOPIC_STATS_INFO,)

    topic: str


@dataclass(kw_only=True, slots=True)
class GetConsumeStatsRequestHeader(TopicRequestHeader):
    """GET_CONSUME_STATS (208): one group's progress on `topic` (every topic it has offsets
    for when `topic` is absent)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.GET_CONSUME_STATS,)

    consumer_group: str
    topic: str | None = None


@dataclass(kw_only=True, slots=True)
class ResetOffsetRequestHeader(TopicRequestHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222). `offset` (when given) wins over `timestamp`;
    `queueId` -1 means every queue; `isForce` false only moves offsets backwards."""

    CODES: ClassVar[tuple[int, ...]] = (RC.INVOKE_BROKER_TO_RESET_OFFSET,)

    topic: str
    group: str
    queue_id: I32 = -1
    offset: int | None = None
    timestamp: int
    is_force: bool


@dataclass(kw_only=True, slots=True)
class GetTopicConfigRequestHeader(TopicRequestHeader):
    """GET_TOPIC_CONFIG (351): one topic's config (RocketMQ's mqadmin topicStatus asks it
    first)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.GET_TOPIC_CONFIG,)

    topic: str


@dataclass(kw_only=True, slots=True)
class QueryTopicConsumeByWhoRequestHeader(TopicRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_TOPIC_CONSUME_BY_WHO,)

    topic: str


@dataclass(kw_only=True, slots=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_TOPICS_BY_CLUSTER,)

    cluster: str


@dataclass(kw_only=True, slots=True)
class QueryTopicsByConsumerRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_TOPICS_BY_CONSUMER,)

    group: str


@dataclass(kw_only=True, slots=True)
class QuerySubscriptionByConsumerRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_SUBSCRIPTION_BY_CONSUMER,)

    group: str
    topic: str


@dataclass(kw_only=True, slots=True)
class QueryConsumeTimeSpanRequestHeader(TopicRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_CONSUME_TIME_SPAN,)

    topic: str
    group: str


@dataclass(kw_only=True, slots=True)
class GetConsumeStatsInBrokerHeader(RpcRequestHeader):
    """GET_BROKER_CONSUME_STATS (317): every group's progress on one broker (mqadmin
    brokerConsumeStats); `is_order` keeps only orderly topics."""

    CODES: ClassVar[tuple[int, ...]] = (RC.GET_BROKER_CONSUME_STATS,)

    is_order: bool = False


@dataclass(kw_only=True, slots=True)
class QueryConsumeQueueRequestHeader(TopicRequestHeader):
    """QUERY_CONSUME_QUEUE (321): `count` units of a queue from `index` (mqadmin queryCq)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.QUERY_CONSUME_QUEUE,)

    topic: str
    queue_id: I32
    index: int
    count: I32
    consumer_group: str | None = None


@dataclass(kw_only=True, slots=True)
class CloneGroupOffsetRequestHeader(RpcRequestHeader):
    """CLONE_GROUP_OFFSET (314): copy `src_group`'s offsets on `topic` (every topic it has
    offsets on, when empty) to `dest_group` (mqadmin cloneGroupOffset). Unless `offline`, a
    topic the online source group does not subscribe to is left out."""

    CODES: ClassVar[tuple[int, ...]] = (RC.CLONE_GROUP_OFFSET,)

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


@dataclass(kw_only=True, slots=True)
class GetSubscriptionGroupConfigRequestHeader(RpcRequestHeader):
    CODES: ClassVar[tuple[int, ...]] = (RC.GET_SUBSCRIPTIONGROUP_CONFIG,)

    group: str


@dataclass(kw_only=True, slots=True)
class ViewBrokerStatsDataRequestHeader(RpcRequestHeader):
    """VIEW_BROKER_STATS_DATA (315): one stats item of the broker (mqadmin statsAll)."""

    CODES: ClassVar[tuple[int, ...]] = (RC.VIEW_BROKER_STATS_DATA,)

    stats_name: str
    stats_key: str


@dataclass(kw_only=True, slots=True)
class GetConsumerStatusRequestHeader(RpcRequestHeader):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): the offsets every client of `group` holds
    for `topic` (or only the client `client_addr`, its client id), asked of the clients
    (GET_CONSUMER_STATUS_FROM_CLIENT, 221, the same header)."""

    CODES: ClassVar[tuple[int, ...]] = (
        RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        RC.GET_CONSUMER_STATUS_FROM_CLIENT,
    )

    topic: str
    group: str
    client_addr: str | None = None


ADMIN_REQUEST_HEADERS: Final[tuple[type[CommandHeader], ...]] = (
    GetConsumerConnectionListRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryMessageRequestHeader,
    DeleteTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetTopicStatsInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    ResetOffsetRequestHeader,
    GetTopicConfigRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    GetTopicsByClusterRequestHeader,
    QueryTopicsByConsumerRequestHeader,
    QuerySubscriptionByConsumerRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    GetConsumeStatsInBrokerHeader,
    QueryConsumeQueueRequestHeader,
    CloneGroupOffsetRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    GetConsumerStatusRequestHeader,
)

# ---------------------------------------------------------------------------------------------
# Bodies


@dataclass(slots=True)
class ClientConnection(JsonModel):
    """One client connection (`protocol/body/Connection`); `language` is the LanguageCode
    name, `version` the client's MQVersion ordinal."""

    client_id: str = ""
    client_addr: str = ""
    language: str = ""
    version: int = 0


@dataclass(slots=True)
class ConsumerConnection(JsonModel):
    connection_set: list[ClientConnection] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


@dataclass(slots=True)
class ProducerConnection(JsonModel):
    connection_set: list[ClientConnection] = field(default_factory=list)


@dataclass(slots=True)
class TopicConfigAndQueueMapping(TopicConfig):
    """GET_TOPIC_CONFIG (351) body: the topic config plus its static-topic mapping (always
    null here: rmq_ha has no static topics)."""

    mapping_detail: dict[str, Any] | None = None


@dataclass(slots=True)
class TopicList(JsonModel):
    topic_list: set[str] = field(default_factory=set)
    broker_addr: str | None = None


@dataclass(slots=True)
class GroupList(JsonModel):
    """QUERY_TOPIC_CONSUME_BY_WHO (300) body."""

    group_list: set[str] = field(default_factory=set)


@dataclass(slots=True)
class SubscriptionGroupConfig(JsonModel):
    """A consumer group's config (RocketMQ's defaults)."""

    group_name: str = ""
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class SubscriptionGroupList(JsonModel):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225) body."""

    group_config_list: list[SubscriptionGroupConfig] = field(default_factory=list)


@dataclass(slots=True)
class CreateTopicListRequestBody(JsonModel):
    """UPDATE_AND_CREATE_TOPIC_LIST (18) body."""

    topic_config_list: list[TopicConfig] = field(default_factory=list)


@dataclass(slots=True)
class SubscriptionGroupWrapper(JsonModel):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) body, and the broker's subscriptionGroup.json."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(slots=True)
class TopicOffset(JsonModel):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@dataclass(slots=True)
class OffsetWrapper(JsonModel):
    broker_offset: int = 0
    consumer_offset: int = 0
    pull_offset: int = 0
    last_timestamp: int = 0

    @property
    def diff(self) -> int:
        """Messages not consumed yet (never negative)."""
        return max(0, self.broker_offset - self.consumer_offset)

    @property
    def inflight(self) -> int:
        """Messages pulled but not committed yet (never negative)."""
        return max(0, self.pull_offset - self.consumer_offset)


@dataclass(slots=True)
class TopicStatsTable:
    """GET_TOPIC_STATS_INFO (202) body."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return ("{" + '"offsetTable":' + dumps_mq_map(self.offset_table, _obj) + "}").encode()

    @classmethod
    def from_json(cls, data: bytes | str | None) -> TopicStatsTable:
        table = _mq_table(data, "offsetTable")
        return cls({mq: TopicOffset.from_obj(v, "$.offsetTable") for mq, v in table.items()})


@dataclass(slots=True)
class ConsumeStats:
    """GET_CONSUME_STATS (208) body."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        """RocketMQ's computeTotalDiff, negatives left out."""
        return sum(w.diff for w in self.offset_table.values())

    def to_json(self) -> bytes:
        table = dumps_mq_map(self.offset_table, _obj)
        return f'{{"consumeTps":{self.consume_tps!r},"offsetTable":{table}}}'.encode()

    @classmethod
    def from_json(cls, data: bytes | str | None) -> ConsumeStats:
        return cls.from_doc(loads_fastjson(data))

    @classmethod
    def from_doc(cls, doc: Any) -> ConsumeStats:
        table = _mq_table_of(doc, "offsetTable")
        tps = doc.get("consumeTps", 0.0) if isinstance(doc, dict) else 0.0
        return cls(
            {mq: OffsetWrapper.from_obj(v, "$.offsetTable") for mq, v in table.items()},
            float(tps) if isinstance(tps, int | float) else 0.0,
        )


@dataclass(slots=True)
class ConsumeStatsList:
    """GET_BROKER_CONSUME_STATS (317) body: per subscription group, the ConsumeStats of each
    topic it has offsets on; the totals are the sum of (broker offset - consumer offset)."""

    consume_stats_list: list[dict[str, list[ConsumeStats]]] = field(default_factory=list)
    broker_addr: str | None = None
    total_diff: int = 0
    total_inflight_diff: int = 0

    def to_json(self) -> bytes:
        groups = []
        for entry in self.consume_stats_list:
            parts = [
                json.dumps(g) + ":[" + ",".join(cs.to_json().decode() for cs in stats) + "]"
                for g, stats in sorted(entry.items())
            ]
            groups.append("{" + ",".join(parts) + "}")
        head = f'"brokerAddr":{json.dumps(self.broker_addr)},' if self.broker_addr else ""
        return (
            "{" + head + '"consumeStatsList":[' + ",".join(groups) + "],"
            f'"totalDiff":{self.total_diff},"totalInflightDiff":{self.total_inflight_diff}' + "}"
        ).encode()

    @classmethod
    def from_json(cls, data: bytes | str | None) -> ConsumeStatsList:
        doc = loads_fastjson(data)
        if not isinstance(doc, dict):
            raise BodyDecodeError("expected an object", "$")
        out: list[dict[str, list[ConsumeStats]]] = []
        raw = doc.get("consumeStatsList") or []
        if not isinstance(raw, list):
            raise BodyDecodeError("expected a list", "$.consumeStatsList")
        for entry in raw:
            if not isinstance(entry, dict):
                raise BodyDecodeError("expected an object", "$.consumeStatsList[]")
            out.append(
                {
                    str(g): [ConsumeStats.from_doc(cs) for cs in (stats or [])]
                    for g, stats in entry.items()
                }
            )

        def num(key: str) -> int:
            v = doc.get(key, 0)
            return v if isinstance(v, int) and not isinstance(v, bool) else 0

        addr = doc.get("brokerAddr")
        return cls(
            out,
            addr if isinstance(addr, str) else None,
            num("totalDiff"),
            num("totalInflightDiff"),
        )


@dataclass(slots=True)
class BrokerStatsItem(JsonModel):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


@dataclass(slots=True)
class BrokerStatsData(JsonModel):
    """VIEW_BROKER_STATS_DATA (315) body: the item's last minute, hour and day."""

    stats_minute: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = field(default_factory=BrokerStatsItem)


@dataclass(slots=True)
class ProducerInfo(JsonModel):
    client_id: str = ""
    remote_ip: str = field(default="", metadata=json_name("remoteIP"))
    language: str = ""
    version: int = 0
    last_update_timestamp: int = 0


@dataclass(slots=True)
class ProducerTableInfo(JsonModel):
    """GET_ALL_PRODUCER_INFO (328) body: producer group -> its connected producers."""

    data: dict[str, list[ProducerInfo]] = field(default_factory=dict)


@dataclass(slots=True)
class QuerySubscriptionResponseBody(JsonModel):
    """QUERY_SUBSCRIPTION_BY_CONSUMER (345) body (no subscription: subscriptionData absent)."""

    subscription_data: SubscriptionData | None = None
    group: str = ""
    topic: str = ""


@dataclass(slots=True)
class QueueTimeSpan(JsonModel):
    message_queue: MessageQueue = field(default_factory=lambda: MessageQueue("", "", 0))
    min_time_stamp: int = 0
    max_time_stamp: int = 0
    consume_time_stamp: int = 0
    delay_time: int = 0


@dataclass(slots=True)
class QueryConsumeTimeSpanBody(JsonModel):
    """QUERY_CONSUME_TIME_SPAN (303) body: per write queue, the store times of its first and
    last message and of the group's last consumed one, and how long its next one waits."""

    consume_time_span_set: list[QueueTimeSpan] = field(default_factory=list)


@dataclass(slots=True)
class ConsumeQueueData(JsonModel):
    physic_offset: int = 0
    physic_size: int = 0
    tags_code: int = 0
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


@dataclass(slots=True)
class QueryConsumeQueueResponseBody(JsonModel):
    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: list[ConsumeQueueData] = field(default_factory=list)
    max_queue_index: int = 0
    min_queue_index: int = 0


@dataclass(slots=True)
class ResetOffsetBody:
    """INVOKE_BROKER_TO_RESET_OFFSET (222) answer and RESET_CONSUMER_CLIENT_OFFSET (220) body."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return ('{"offsetTable":' + dumps_mq_map(self.offset_table, int) + "}").encode()

    @classmethod
    def from_json(cls, data: bytes | str | None) -> ResetOffsetBody:
        table = _mq_table(data, "offsetTable")
        out: dict[MessageQueue, int] = {}
        for mq, v in table.items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise BodyDecodeError(f"expected an integer offset, got {v!r}", "$.offsetTable")
            out[mq] = v
        return cls(out)


@dataclass(slots=True)
class GetConsumerStatusBody:
    """GET_CONSUMER_STATUS_FROM_CLIENT (221) answer (a client's `message_queue_table`) and
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) answer (`consumer_table`: client id -> its
    table); MessageQueue-keyed maps as fastjson writes them."""

    message_queue_table: dict[MessageQueue, int] = field(default_factory=dict)
    consumer_table: dict[str, dict[MessageQueue, int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        clients = ",".join(
            json.dumps(cid) + ":" + dumps_mq_map(t, int)
            for cid, t in sorted(self.consumer_table.items())
        )
        table = dumps_mq_map(self.message_queue_table, int)
        return ('{"consumerTable":{' + clients + '},"messageQueueTable":' + table + "}").encode()

    @classmethod
    def from_json(cls, data: bytes | str | None) -> GetConsumerStatusBody:
        doc = loads_fastjson(data)

        def offsets(t: dict[MessageQueue, Any], where: str) -> dict[MessageQueue, int]:
            for v in t.values():
                if not isinstance(v, int) or isinstance(v, bool):
                    raise BodyDecodeError(f"expected an integer offset, got {v!r}", where)
            return dict(t)

        mine = (
            offsets(_mq_table_of(doc, "messageQueueTable"), "$.messageQueueTable")
            if isinstance(doc, dict) and doc.get("messageQueueTable") is not None
            else {}
        )
        raw = doc.get("consumerTable") if isinstance(doc, dict) else None
        if raw is not None and not isinstance(raw, dict):
            raise BodyDecodeError("expected an object", "$.consumerTable")
        table = {
            str(cid): offsets(_mq_table_of({"t": t}, "t"), f"$.consumerTable.{cid}")
            for cid, t in (raw or {}).items()
        }
        return cls(mine, table)


def _obj(v: JsonModel) -> Any:
    return v.to_obj()


# ---------------------------------------------------------------------------------------------
# fastjson maps with object keys


def dumps_mq_map(table: dict[MessageQueue, Any], encode: Callable[[Any], Any]) -> str:
    """`{{"brokerName":..,"queueId":..,"topic":..}:value,...}` as fastjson writes a
    Map<MessageQueue, V> (keys in queue order)."""
    parts = []
    for mq in sorted(table):
        key = json.dumps(mq.to_obj(), sort_keys=True, separators=(",", ":"))
        parts.append(
            key + ":" + json.dumps(encode(table[mq]), sort_keys=True, separators=(",", ":"))
        )
    return "{" + ",".join(parts) + "}"


class _ObjKey:
    """An object used as a map key; hashable by its canonical JSON."""

    __slots__ = ("obj", "text")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.text = json.dumps(obj, sort_keys=True)

    def __hash__(self) -> int:
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ObjKey) and other.text == self.text


class _Parser:
    """A small JSON parser that also takes fastjson's object keys and bare keys."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.dec = json.JSONDecoder()

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def fail(self, what: str) -> BodyDecodeError:
        return BodyDecodeError(f"{what} at character {self.i}")

    def value(self) -> Any:
        self.ws()
        if self.i >= len(self.s):
            raise self.fail("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            self.i += 1
            out: list[Any] = []
            self.ws()
            if self.s.startswith("]", self.i):
                self.i += 1
                return out
            while True:
                out.append(self.value())
                self.ws()
                if self.s.startswith(",", self.i):
                    self.i += 1
                    continue
                if self.s.startswith("]", self.i):
                    self.i += 1
                    return out
                raise self.fail("expected , or ]")
        try:
            v, end = self.dec.raw_decode(self.s, self.i)
        except json.JSONDecodeError as e:
            raise self.fail(f"bad value ({e.msg})") from None
        self.i = end
        return v

    def key(self) -> Any:
        self.ws()
        c = self.s[self.i : self.i + 1]
        if c == "{":
            o = self.obj()
            return _ObjKey(o) if isinstance(o, dict) else o
        if c == '"':
            return self.value()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in ": \t\r\n":
            self.i += 1
        if start == self.i:
            raise self.fail("expected a key")
        return self.s[start : self.i]

    def obj(self) -> dict[Any, Any]:
        self.i += 1
        out: dict[Any, Any] = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            k = self.key()
            self.ws()
            if not self.s.startswith(":", self.i):
                raise self.fail("expected :")
            self.i += 1
            out[k] = self.value()
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                self.ws()
                continue
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            raise self.fail("expected , or }")


def loads_fastjson(data: bytes | str | None) -> Any:
    """Parses fastjson output, object-valued map keys included (they come back as `_ObjKey`;
    use `_mq_table_of` to read a MessageQueue-keyed map)."""
    if data is None or len(data) == 0:
        return {}
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return json.loads(quote_bare_keys(text))
    except json.JSONDecodeError:
        pass
    p = _Parser(text)
    v = p.value()
    p.ws()
    if p.i != len(text):
        raise p.fail("trailing data")
    return v


def _mq_table_of(doc: Any, name: str) -> dict[MessageQueue, Any]:
    if not isinstance(doc, dict):
        raise BodyDecodeError(f"expected an object, got {type(doc).__name__}")
    raw = doc.get(name) or {}
    if not isinstance(raw, dict):
        raise BodyDecodeError(f"expected an object, got {type(raw).__name__}", f"$.{name}")
    out: dict[MessageQueue, Any] = {}
    for k, v in raw.items():
        if isinstance(k, _ObjKey):
            obj = k.obj
        elif isinstance(k, str) and k.startswith("{"):
            obj = json.loads(k)
        else:
            raise BodyDecodeError(f"key {k!r} is not a message queue", f"$.{name}")
        out[MessageQueue.from_obj(obj, f"$.{name}<key>")] = v
    return out


def _mq_table(data: bytes | str | None, name: str) -> dict[MessageQueue, Any]:
    return _mq_table_of(loads_fastjson(data), name)
