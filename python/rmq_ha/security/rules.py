"""What every request code needs: the table from request code to resource and action. Pure.

Each code a broker, name server or controller registers must be in `RULES` (a test starts the
three roles and checks that every code they register is here; the guard also refuses a code it
does not find, so a new code cannot slip through unclassified).

Kinds (docs/security.md):
  CLIENT   a signed request from any known account (or a white-listed address, as RocketMQ);
           plus the topic/group permissions its `needs` function finds in the request
  ADMIN    as CLIENT, and the account must have `admin: true` (RocketMQ's admin codes and
           ours: topic/group create and delete, offset reset, config updates, controller admin)
  CLUSTER  the cluster's own traffic (broker -> name server, broker -> controller, controller
           <-> controller Raft, name server/controller -> broker notices): always a valid
           signature of an admin account; address white-lists do not let it through
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rmq_ha.protocol.codes import RequestCode as RC

RETRY_PREFIX = "%RETRY%"

DENY = 1
ANY = 2
PUB = 4
SUB = 8


class Kind(enum.Enum):
    CLIENT = "client"
    ADMIN = "admin"
    CLUSTER = "cluster"


@dataclass(frozen=True)
class Need:
    """One resource a request touches and the permission it needs on it."""

    is_group: bool
    name: str
    perm: int


NeedsFn = Callable[[Mapping[str, str], bytes | None], list[Need]]


@dataclass(frozen=True)
class Rule:
    kind: Kind
    needs: NeedsFn | None = None


def _topic(ext: Mapping[str, str], key: str, perm: int) -> list[Need]:
    t = ext.get(key)
    if not t:
        return []
    if t.startswith(RETRY_PREFIX):
        # A retry topic is its group's (RocketMQ checks the group's SUB for it).
        return [Need(True, t[len(RETRY_PREFIX) :], SUB)]
    return [Need(False, t, perm)]


def _group(ext: Mapping[str, str], key: str, perm: int = SUB) -> list[Need]:
    g = ext.get(key)
    return [Need(True, g, perm)] if g else []


def send_v1(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
    return _topic(ext, "topic", PUB)


def send_v2(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
    return _topic(ext, "b", PUB)


def consume(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
    """Pull, pop, ack, offsets: SUB on the topic and on the consumer group."""
    return _topic(ext, "topic", SUB) + _group(ext, "consumerGroup")


def group_only(key: str) -> NeedsFn:
    def needs(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
        return _group(ext, key)

    return needs


def topic_any(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
    return _topic(ext, "topic", ANY)


def topic_sub(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
    return _topic(ext, "topic", SUB)


def topic_pub(ext: Mapping[str, str], _body: bytes | None) -> list[Need]:
    return _topic(ext, "topic", PUB)


def heartbeat(_ext: Mapping[str, str], body: bytes | None) -> list[Need]:
    """HEART_BEAT: SUB on each consumer group and each topic it subscribes (RocketMQ)."""
    from rmq_ha.protocol.models import HeartbeatData

    hb = HeartbeatData.from_json(body or b"{}")
    out: list[Need] = []
    for c in hb.consumer_data_set:
        if c.group_name:
            out.append(Need(True, c.group_name, SUB))
        for s in c.subscription_data_set:
            if s.topic:
                out.extend(_topic({"topic": s.topic}, "topic", SUB))
    return out


def _client(needs: NeedsFn | None = None) -> Rule:
    return Rule(Kind.CLIENT, needs)


_ADMIN = Rule(Kind.ADMIN)
_CLUSTER = Rule(Kind.CLUSTER)
_PLAIN = Rule(Kind.CLIENT)

_CLIENT_NEEDS: dict[int, NeedsFn] = {
    RC.SEND_MESSAGE: send_v1,
    RC.SEND_MESSAGE_V2: send_v2,
    RC.SEND_BATCH_MESSAGE: send_v2,
    RC.SEND_REPLY_MESSAGE: send_v1,
    RC.SEND_REPLY_MESSAGE_V2: send_v2,
    RC.PULL_MESSAGE: consume,
    RC.LITE_PULL_MESSAGE: consume,
    RC.QUERY_CONSUMER_OFFSET: consume,
    RC.UPDATE_CONSUMER_OFFSET: consume,
    RC.POP_MESSAGE: consume,
    RC.PEEK_MESSAGE: consume,
    RC.ACK_MESSAGE: consume,
    RC.CHANGE_MESSAGE_INVISIBLETIME: consume,
    RC.NOTIFICATION: consume,
    RC.POLLING_INFO: consume,
    RC.POP_ROLLBACK: consume,
    RC.QUERY_MESSAGE: topic_sub,
    RC.CONSUMER_SEND_MSG_BACK: group_only("group"),
    RC.UNREGISTER_CLIENT: group_only("consumerGroup"),
    RC.GET_CONSUMER_LIST_BY_GROUP: group_only("consumerGroup"),
    RC.HEART_BEAT: heartbeat,
    RC.END_TRANSACTION: topic_pub,
    RC.RECALL_MESSAGE: topic_pub,
    RC.GET_ROUTEINFO_BY_TOPIC: topic_any,
}

#: Admin-only (RocketMQ's Permission.ADMIN_CODE and the rest that change or reset state).
_ADMIN_CODES: tuple[int, ...] = (
    RC.UPDATE_AND_CREATE_TOPIC,
    RC.UPDATE_AND_CREATE_TOPIC_LIST,
    RC.UPDATE_AND_CREATE_STATIC_TOPIC,
    RC.DELETE_TOPIC_IN_BROKER,
    RC.DELETE_TOPIC_IN_NAMESRV,
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
    RC.DELETE_SUBSCRIPTIONGROUP,
    RC.UPDATE_AND_GET_GROUP_FORBIDDEN,
    RC.UPDATE_BROKER_CONFIG,
    RC.UPDATE_NAMESRV_CONFIG,
    RC.UPDATE_CONTROLLER_CONFIG,
    RC.RESET_CONSUMER_OFFSET_IN_BROKER,
    RC.RESET_CONSUMER_OFFSET_IN_CONSUMER,
    RC.RESET_CONSUMER_CLIENT_OFFSET,
    RC.INVOKE_BROKER_TO_RESET_OFFSET,
    RC.CLONE_GROUP_OFFSET,
    RC.WIPE_WRITE_PERM_OF_BROKER,
    RC.ADD_WRITE_PERM_OF_BROKER,
    RC.PUT_KV_CONFIG,
    RC.DELETE_KV_CONFIG,
    RC.TRIGGER_DELETE_FILES,
    RC.DELETE_EXPIRED_COMMITLOG,
    RC.CLEAN_EXPIRED_CONSUMEQUEUE,
    RC.CLEAN_UNUSED_TOPIC,
    RC.CLEAN_BROKER_DATA,
    RC.RESET_MASTER_FLUSH_OFFSET,
    RC.CONSUME_MESSAGE_DIRECTLY,
    RC.SUSPEND_CONSUMER,
    RC.RESUME_CONSUMER,
    RC.ADJUST_CONSUMER_THREAD_POOL,
    RC.RESUME_CHECK_HALF_MESSAGE,
    RC.SET_MESSAGE_REQUEST_MODE,
    RC.SET_COMMITLOG_READ_MODE,
    RC.UPDATE_COLD_DATA_FLOW_CTR_CONFIG,
    RC.REMOVE_COLD_DATA_FLOW_CTR_CONFIG,
    RC.AUTH_CREATE_USER,
    RC.AUTH_UPDATE_USER,
    RC.AUTH_DELETE_USER,
    RC.AUTH_CREATE_ACL,
    RC.AUTH_UPDATE_ACL,
    RC.AUTH_DELETE_ACL,
    RC.AUTH_GET_USER,
    RC.AUTH_LIST_USER,
    RC.AUTH_GET_ACL,
    RC.AUTH_LIST_ACL,
    RC.EXPORT_ROCKSDB_CONFIG_TO_JSON,
    RC.REGISTER_MESSAGE_FILTER_CLASS,
)

#: Reads, queries and client-side calls: a signed request of any known account (RocketMQ's
#: default branch: no resource is checked).
_PLAIN_CODES: tuple[int, ...] = (
    RC.QUERY_BROKER_OFFSET,
    RC.GET_TOPIC_CONFIG_LIST,
    RC.GET_TOPIC_NAME_LIST,
    RC.GET_BROKER_CONFIG,
    RC.GET_BROKER_RUNTIME_INFO,
    RC.SEARCH_OFFSET_BY_TIMESTAMP,
    RC.GET_MAX_OFFSET,
    RC.GET_MIN_OFFSET,
    RC.GET_EARLIEST_MSG_STORETIME,
    RC.VIEW_MESSAGE_BY_ID,
    RC.CHECK_TRANSACTION_STATE,
    RC.NOTIFY_CONSUMER_IDS_CHANGED,
    RC.LOCK_BATCH_MQ,
    RC.UNLOCK_BATCH_MQ,
    RC.CHECK_CLIENT_CONFIG,
    RC.GET_CLIENT_CONFIG,
    RC.GET_KV_CONFIG,
    RC.GET_BROKER_CLUSTER_INFO,
    RC.GET_TOPIC_STATS_INFO,
    RC.GET_CONSUMER_CONNECTION_LIST,
    RC.GET_PRODUCER_CONNECTION_LIST,
    RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    RC.GET_CONSUME_STATS,
    RC.WHO_CONSUME_THE_MESSAGE,
    RC.GET_KVLIST_BY_NAMESPACE,
    RC.GET_CONSUMER_STATUS_FROM_CLIENT,
    RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
    RC.GET_TOPICS_BY_CLUSTER,
    RC.QUERY_TOPIC_CONSUME_BY_WHO,
    RC.QUERY_CONSUME_TIME_SPAN,
    RC.GET_SYSTEM_TOPIC_LIST_FROM_NS,
    RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
    RC.GET_CONSUMER_RUNNING_INFO,
    RC.QUERY_CORRECTION_OFFSET,
    RC.GET_UNIT_TOPIC_LIST,
    RC.GET_HAS_UNIT_SUB_TOPIC_LIST,
    RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    RC.VIEW_BROKER_STATS_DATA,
    RC.GET_BROKER_CONSUME_STATS,
    RC.GET_NAMESRV_CONFIG,
    RC.QUERY_CONSUME_QUEUE,
    RC.QUERY_DATA_VERSION,
    RC.PUSH_REPLY_MESSAGE_TO_CLIENT,
    RC.GET_ALL_PRODUCER_INFO,
    RC.QUERY_TOPICS_BY_CONSUMER,
    RC.QUERY_SUBSCRIPTION_BY_CONSUMER,
    RC.GET_TOPIC_CONFIG,
    RC.GET_SUBSCRIPTIONGROUP_CONFIG,
    RC.CHECK_ROCKSDB_CQ_WRITE_PROGRESS,
    RC.QUERY_ASSIGNMENT,
    RC.GET_BROKER_MEMBER_GROUP,
    RC.GET_BROKER_HA_STATUS,
    RC.CONTROLLER_GET_REPLICA_INFO,
    RC.CONTROLLER_GET_METADATA_INFO,
    RC.CONTROLLER_GET_SYNC_STATE_DATA,
    RC.GET_BROKER_EPOCH_CACHE,
    RC.GET_CONTROLLER_CONFIG,
    RC.GET_BROKER_LIVE_INFO_REQUEST,
    RC.GET_SYNC_STATE_DATA_REQUEST,
    RC.RMQHA_STORE_HEALTH,
    RC.GET_COLD_DATA_FLOW_CTR_INFO,
    RC.BATCH_ACK_MESSAGE,
)

#: The cluster's own traffic.
_CLUSTER_CODES: tuple[int, ...] = (
    RC.REGISTER_BROKER,
    RC.UNREGISTER_BROKER,
    RC.BROKER_HEARTBEAT,
    RC.REGISTER_TOPIC_IN_NAMESRV,
    RC.REGISTER_FILTER_SERVER,
    RC.ADD_BROKER,
    RC.REMOVE_BROKER,
    RC.NOTIFY_MIN_BROKER_ID_CHANGE,
    RC.EXCHANGE_BROKER_HA_INFO,
    RC.CONTROLLER_ALTER_SYNC_STATE_SET,
    RC.CONTROLLER_ELECT_MASTER,
    RC.CONTROLLER_REGISTER_BROKER,
    RC.CONTROLLER_GET_NEXT_BROKER_ID,
    RC.CONTROLLER_APPLY_BROKER_ID,
    RC.NOTIFY_BROKER_ROLE_CHANGED,
    RC.BROKER_CLOSE_CHANNEL_REQUEST,
    RC.CHECK_NOT_ACTIVE_BROKER_REQUEST,
    RC.RAFT_BROKER_HEART_BEAT_EVENT_REQUEST,
    RC.RMQHA_RAFT_MESSAGE,
    RC.RMQHA_READ_COMMITLOG,
    # a slave's metadata sync from its master (topics, offsets, delay offsets, timer state)
    RC.GET_ALL_TOPIC_CONFIG,
    RC.GET_ALL_CONSUMER_OFFSET,
    RC.GET_ALL_DELAY_OFFSET,
    RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RC.GET_TIMER_CHECK_POINT,
    RC.GET_TIMER_METRICS,
    RC.GET_ALL_MESSAGE_REQUEST_MODE,
)


def _build() -> dict[int, Rule]:
    table: dict[int, Rule] = {}
    for code, fn in _CLIENT_NEEDS.items():
        table[int(code)] = _client(fn)
    for code in _ADMIN_CODES:
        table[int(code)] = _ADMIN
    for code in _CLUSTER_CODES:
        table[int(code)] = _CLUSTER
    for code in _PLAIN_CODES:
        table[int(code)] = _PLAIN
    return table


RULES: dict[int, Rule] = _build()


def rule_for(code: int) -> Rule | None:
    return RULES.get(code)
