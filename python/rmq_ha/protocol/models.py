"""JSON body models with RocketMQ's exact field names (fastjson bean properties).

Sources (apache/rocketmq 5.3.x): `remoting/.../protocol/route/{TopicRouteData, QueueData,
BrokerData}`, `remoting/.../protocol/body/*`, `remoting/.../protocol/heartbeat/*`,
`remoting/.../protocol/DataVersion`, `common/.../TopicConfig`, `common/.../message/MessageQueue`.

Each model has `to_json()` (standard JSON bytes) and `from_json()` (lenient; see `jsonmodel`).
Java Sets are Python sets where the elements are hashable (tags, codes, message queues) and
lists otherwise; both travel as JSON arrays.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from rmq_ha.protocol.jsonmodel import JsonModel, json_name
from rmq_ha.protocol.message import java_hash, parse_tag_expression
from rmq_ha.protocol.perm import PERM_RW

#: `MixAll.MASTER_ID`: the master's broker id in every Long-keyed address map.
MASTER_ID: Final = 0

# ---------------------------------------------------------------------------------------------
# Enumerations carried as strings (Java enum names)


class ConsumeType(StrEnum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push
    CONSUME_POP = "CONSUME_POP"


class MessageModel(StrEnum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(StrEnum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = (
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    )
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ExpressionType(StrEnum):
    TAG = "TAG"
    SQL92 = "SQL92"


class TopicFilterType(StrEnum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


#: `SubscriptionData.SUB_ALL`: the "every tag" expression.
SUB_ALL: Final = "*"

# ---------------------------------------------------------------------------------------------
# Versions and topic configs


@dataclass(frozen=True, slots=True)
class DataVersion(JsonModel):
    """Version of a broker's metadata table. Java's default timestamp is "now"; ours is 0,
    so callers stamp it (`DataVersion.initial(now_ms)`) and models stay clock-free."""

    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    @classmethod
    def initial(cls, now_ms: int, state_version: int = 0) -> DataVersion:
        return cls(state_version=state_version, timestamp=now_ms, counter=0)

    def next_version(self, now_ms: int, state_version: int | None = None) -> DataVersion:
        """RocketMQ's nextVersion([stateVersion]): new timestamp, counter + 1."""
        sv = self.state_version if state_version is None else state_version
        return DataVersion(state_version=sv, timestamp=now_ms, counter=self.counter + 1)

    def compare(self, other: DataVersion) -> int:
        """-1/0/1 ordered by stateVersion, then counter, then timestamp (DataVersion.compare)."""
        mine = (self.state_version, self.counter, self.timestamp)
        theirs = (other.state_version, other.counter, other.timestamp)
        return (mine > theirs) - (mine < theirs)


@dataclass(slots=True)
class TopicConfig(JsonModel):
    topic_name: str | None = None
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_RW
    topic_filter_type: str = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class TopicConfigSerializeWrapper(JsonModel):
    """GET_ALL_TOPIC_CONFIG body (the broker's TopicConfigManager has the same two keys)."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(slots=True)
class TopicConfigAndMappingSerializeWrapper(TopicConfigSerializeWrapper):
    """What REGISTER_BROKER carries inside RegisterBrokerBody: topic configs plus static-topic
    mappings (kept as raw JSON; rmq_ha has no static topics)."""

    topic_queue_mapping_info_map: dict[str, Any] = field(default_factory=dict)
    topic_queue_mapping_detail_map: dict[str, Any] = field(default_factory=dict)
    mapping_data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(slots=True)
class KVTable(JsonModel):
    table: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ConsumerOffsetSerializeWrapper(JsonModel):
    """GET_ALL_CONSUMER_OFFSET body: offsetTable is keyed "topic@group", then by queue id
    (Integer keys, written bare by fastjson). The broker's actual body is its
    ConsumerOffsetManager, which has extra keys; they are ignored."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)
    data_version: DataVersion | None = None


# ---------------------------------------------------------------------------------------------
# Routes


@dataclass(slots=True)
class QueueData(JsonModel):
    broker_name: str = ""
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = 0
    # The Go client spells it topicSynFlag.
    topic_sys_flag: int = field(default=0, metadata=json_name(aliases=("topicSynFlag",)))


@dataclass(slots=True)
class BrokerData(JsonModel):
    """One broker group: `brokerAddrs` maps broker id (0 = master) to "ip:port"."""

    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_broker_addr(self, rng: random.Random | None = None) -> str | None:
        """The master's address, else a random replica's, else None (empty group)."""
        master = self.broker_addrs.get(MASTER_ID)
        if master is not None:
            return master
        addrs = list(self.broker_addrs.values())
        if not addrs:
            return None
        return (rng or random).choice(addrs)


@dataclass(slots=True)
class TopicRouteData(JsonModel):
    """GET_ROUTEINFO_BY_TOPIC body."""

    order_topic_conf: str | None = None
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    topic_queue_mapping_by_broker: dict[str, Any] | None = None


@dataclass(slots=True)
class ClusterInfo(JsonModel):
    """GET_BROKER_CLUSTER_INFO body: brokerName -> BrokerData, cluster -> brokerNames."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)

    def retrieve_all_addr_by_cluster(self, cluster: str) -> list[str]:
        out: list[str] = []
        for name in sorted(self.cluster_addr_table.get(cluster, ())):
            bd = self.broker_addr_table.get(name)
            if bd is not None:
                out.extend(bd.broker_addrs.values())
        return out

    def retrieve_all_cluster_names(self) -> list[str]:
        return sorted(self.cluster_addr_table)


@dataclass(slots=True)
class BrokerMemberGroup(JsonModel):
    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def minimum_broker_id(self) -> int:
        """The smallest id in the group, 0 when empty (as RocketMQ)."""
        return min(self.broker_addrs, default=MASTER_ID)


@dataclass(slots=True)
class GetBrokerMemberGroupResponseBody(JsonModel):
    """GET_BROKER_MEMBER_GROUP (901) response body: the group, wrapped."""

    broker_member_group: BrokerMemberGroup | None = None


# ---------------------------------------------------------------------------------------------
# Client heartbeat


@dataclass(slots=True)
class SubscriptionData(JsonModel):
    """Java's `filterClassSource` is not serialized and is left out. `subVersion` defaults to
    the creation time in Java; here to 0 (callers set it)."""

    class_filter_mode: bool = False
    topic: str = ""
    sub_string: str = ""
    tags_set: set[str] = field(default_factory=set)
    code_set: set[int] = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = ExpressionType.TAG

    @classmethod
    def build(
        cls, topic: str, expression: str | None, expression_type: str | None, sub_version: int
    ) -> SubscriptionData:
        """RocketMQ's FilterAPI.build: a tag expression's tags and their hash codes; any
        other expression (SQL92) kept as it is."""
        if expression_type and expression_type != ExpressionType.TAG:
            return cls(
                topic=topic,
                sub_string=expression or "",
                sub_version=sub_version,
                expression_type=expression_type,
            )
        tags = parse_tag_expression(expression)
        return cls(
            topic=topic,
            sub_string="*" if tags is None else (expression or "*").strip(),
            tags_set=set(tags or ()),
            code_set={java_hash(t) for t in tags or ()},
            sub_version=sub_version,
            expression_type=ExpressionType.TAG,
        )


@dataclass(slots=True)
class CheckClientRequestBody(JsonModel):
    """CHECK_CLIENT_CONFIG (46) body: a consumer asks, before it starts, whether the broker
    can filter by its subscription's expression type."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None


@dataclass(slots=True)
class ProducerData(JsonModel):
    group_name: str = ""


@dataclass(slots=True)
class ConsumerData(JsonModel):
    group_name: str = ""
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass(slots=True)
class HeartbeatData(JsonModel):
    """HEART_BEAT (34) body. fastjson names the `isWithoutSub()` property "withoutSub"."""

    client_id: str = field(default="", metadata=json_name("clientID"))
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)
    heartbeat_fingerprint: int = 0
    without_sub: bool = field(default=False, metadata=json_name(aliases=("isWithoutSub",)))


# ---------------------------------------------------------------------------------------------
# Queues, locks, consumer lists


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue(JsonModel):
    topic: str = ""
    broker_name: str = ""
    queue_id: int = 0


@dataclass(slots=True)
class QueryAssignmentRequestBody(JsonModel):
    """QUERY_ASSIGNMENT (400) body: a consumer with clientRebalance=false (or in pop mode)
    asks the broker for its queues. messageModel: CLUSTERING or BROADCASTING; strategyName:
    AVG or AVG_BY_CIRCLE."""

    topic: str = ""
    consumer_group: str = ""
    client_id: str = ""
    strategy_name: str = ""
    message_model: str = "CLUSTERING"


@dataclass(slots=True)
class MessageQueueAssignment(JsonModel):
    """One queue of a QUERY_ASSIGNMENT answer and how to read it (PULL or POP; queueId -1
    with POP: any queue of that broker)."""

    message_queue: MessageQueue | None = None
    mode: str = "PULL"
    attachments: dict[str, str] | None = None

    def __hash__(self) -> int:
        mq = self.message_queue
        return hash((None if mq is None else (mq.topic, mq.broker_name, mq.queue_id), self.mode))


@dataclass(slots=True)
class QueryAssignmentResponseBody(JsonModel):
    """QUERY_ASSIGNMENT answer: null means "no valid answer, keep what you have" (unknown
    topic, no consumer list, an unsupported strategy); an empty list means "drop them all"."""

    message_queue_assignments: list[MessageQueueAssignment] | None = None


@dataclass(slots=True)
class SetMessageRequestModeRequestBody(JsonModel):
    """SET_MESSAGE_REQUEST_MODE (401) body: how a group reads a topic (PULL or POP);
    popShareQueueNum <= 0 lets every consumer pop every queue."""

    topic: str = ""
    consumer_group: str = ""
    mode: str = "PULL"
    pop_share_queue_num: int = 0


@dataclass(slots=True)
class LockBatchRequestBody(JsonModel):
    """LOCK_BATCH_MQ (41) body. onlyThisBroker: do not forward (strict-mode quorum)."""

    consumer_group: str | None = None
    client_id: str | None = None
    only_this_broker: bool = False
    mq_set: set[MessageQueue] = field(default_factory=set)


@dataclass(slots=True)
class LockBatchResponseBody(JsonModel):
    lock_ok_mq_set: set[MessageQueue] = field(
        default_factory=set, metadata=json_name("lockOKMQSet")
    )


@dataclass(slots=True)
class UnlockBatchRequestBody(JsonModel):
    """UNLOCK_BATCH_MQ (42) body; same shape as the lock request."""

    consumer_group: str | None = None
    client_id: str | None = None
    only_this_broker: bool = False
    mq_set: set[MessageQueue] = field(default_factory=set)


@dataclass(slots=True)
class GetConsumerListByGroupResponseBody(JsonModel):
    """GET_CONSUMER_LIST_BY_GROUP (38) response body."""

    consumer_id_list: list[str] = field(default_factory=list)


#: The brief's short name for the same body.
ConsumerListByGroupResponseBody = GetConsumerListByGroupResponseBody


# ---------------------------------------------------------------------------------------------
# Controller (RIP-44): remoting/.../protocol/body/{SyncStateSet, ElectMasterResponseBody,
# BrokerReplicasInfo, EpochEntryCache} and remoting/.../protocol/EpochEntry. Broker ids are
# Java Longs; a Set<Long> travels as a JSON array.


@dataclass(slots=True)
class SyncStateSet(JsonModel):
    """Body of ALTER_SYNC_STATE_SET (1001) requests and of the register (1003), replica-info
    (1004), alter (1001) answers and role-change notices (1008)."""

    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0


@dataclass(slots=True)
class ElectMasterResponseBody(JsonModel):
    """CONTROLLER_ELECT_MASTER (1002) answer: the new set and the group's members."""

    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: set[int] = field(default_factory=set)


@dataclass(slots=True)
class ReplicaIdentity(JsonModel):
    broker_name: str | None = None
    broker_id: int | None = None
    broker_address: str | None = None
    alive: bool | None = None


@dataclass(slots=True)
class ReplicasInfo(JsonModel):
    """`BrokerReplicasInfo.ReplicasInfo`: one broker group as the admin sees it."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: list[ReplicaIdentity] = field(default_factory=list)
    not_in_sync_replicas: list[ReplicaIdentity] = field(default_factory=list)


@dataclass(slots=True)
class BrokerReplicasInfo(JsonModel):
    """CONTROLLER_GET_SYNC_STATE_DATA (1006) answer; the request body is a JSON array of
    broker names."""

    replicas_info_table: dict[str, ReplicasInfo] = field(default_factory=dict)


@dataclass(slots=True)
class EpochEntry(JsonModel):
    epoch: int = 0
    start_offset: int = 0
    end_offset: int = 2**63 - 1  # Long.MAX_VALUE: the open last epoch


@dataclass(slots=True)
class EpochEntryCache(JsonModel):
    """GET_BROKER_EPOCH_CACHE (1007) answer, admin -> broker."""

    cluster_name: str | None = None
    broker_name: str | None = None
    broker_id: int = 0
    epoch_list: list[EpochEntry] = field(default_factory=list)
    max_offset: int = 0
