"""The one registry of RocketMQ remoting codes: request codes, response codes, language codes.

Numbers and names are RocketMQ's (`RequestCode`, `ResponseCode`, `RemotingSysResponseCode`,
`LanguageCode` in apache/rocketmq 5.3.x); the doc lines are ours. docs/protocol.md is generated
from this module by `python -m rmq_ha.protocol.gen_docs`; never edit that file by hand.

Every member of `RequestCode` and `ResponseCode` must have a doc line (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Literal


class RequestCode(IntEnum):
    # client <-> broker: messages and offsets
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    GET_CLIENT_CONFIG = 47
    GET_TIMER_CHECK_POINT = 60
    GET_TIMER_METRICS = 61
    # name server
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    # admin
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    QUERY_TOPICS_BY_CONSUMER = 343
    QUERY_SUBSCRIPTION_BY_CONSUMER = 345
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    UPDATE_AND_GET_GROUP_FORBIDDEN = 353
    CHECK_ROCKSDB_CQ_WRITE_PROGRESS = 354
    EXPORT_ROCKSDB_CONFIG_TO_JSON = 355
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    UPDATE_AND_CREATE_STATIC_TOPIC = 513
    # broker groups, slave acting master (RIP-32), HA
    GET_BROKER_MEMBER_GROUP = 901
    ADD_BROKER = 902
    REMOVE_BROKER = 903
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    EXCHANGE_BROKER_HA_INFO = 906
    GET_BROKER_HA_STATUS = 907
    RESET_MASTER_FLUSH_OFFSET = 908
    # controller (RIP-44)
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    BROKER_CLOSE_CHANNEL_REQUEST = 1014
    CHECK_NOT_ACTIVE_BROKER_REQUEST = 1015
    GET_BROKER_LIVE_INFO_REQUEST = 1016
    GET_SYNC_STATE_DATA_REQUEST = 1017
    RAFT_BROKER_HEART_BEAT_EVENT_REQUEST = 1018
    # rmq_ha's own (outside every range RocketMQ uses)
    RMQHA_RAFT_MESSAGE = 90001
    RMQHA_READ_COMMITLOG = 90002
    RMQHA_STORE_HEALTH = 90003
    # tiered storage
    UPDATE_COLD_DATA_FLOW_CTR_CONFIG = 2001
    REMOVE_COLD_DATA_FLOW_CTR_CONFIG = 2002
    GET_COLD_DATA_FLOW_CTR_INFO = 2003
    SET_COMMITLOG_READ_MODE = 2004
    # ACL 2.0
    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_GET_USER = 3004
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_GET_ACL = 3009
    AUTH_LIST_ACL = 3010
    # POP consumption (5.x)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    POP_ROLLBACK = 200056
    BATCH_ACK_MESSAGE = 200151


_R = RequestCode

REQUEST_DOCS: Final[dict[RequestCode, str]] = {
    _R.SEND_MESSAGE: "Producer -> broker: store one message (long-named header).",
    _R.PULL_MESSAGE: "Consumer -> broker: read a queue from an offset (long polling).",
    _R.QUERY_MESSAGE: "Admin -> broker: find messages by key in a time range (index file).",
    _R.QUERY_BROKER_OFFSET: "Admin -> broker: query a broker-side offset (legacy).",
    _R.QUERY_CONSUMER_OFFSET: "Consumer -> broker: committed offset of a group on a queue.",
    _R.UPDATE_CONSUMER_OFFSET: "Consumer -> broker: commit a group's offset on a queue.",
    _R.UPDATE_AND_CREATE_TOPIC: "Admin -> broker: create or update one topic config.",
    _R.UPDATE_AND_CREATE_TOPIC_LIST: "Admin -> broker: create or update several topic configs.",
    _R.GET_ALL_TOPIC_CONFIG: "Slave/admin -> broker: every topic config (slave metadata sync).",
    _R.GET_TOPIC_CONFIG_LIST: "Admin -> broker: topic configs, paged.",
    _R.GET_TOPIC_NAME_LIST: "Admin -> broker: names of the broker's topics.",
    _R.UPDATE_BROKER_CONFIG: "Admin -> broker: change broker properties at runtime.",
    _R.GET_BROKER_CONFIG: "Admin -> broker: the broker's properties.",
    _R.TRIGGER_DELETE_FILES: "Admin -> broker: run expired-file deletion now.",
    _R.GET_BROKER_RUNTIME_INFO: "Admin -> broker: runtime statistics as a KV table.",
    _R.SEARCH_OFFSET_BY_TIMESTAMP: "Client -> broker: queue offset of a store time.",
    _R.GET_MAX_OFFSET: "Client -> broker: max logical offset of a queue.",
    _R.GET_MIN_OFFSET: "Client -> broker: min logical offset of a queue.",
    _R.GET_EARLIEST_MSG_STORETIME: "Client -> broker: store time of the oldest message of a queue.",
    _R.VIEW_MESSAGE_BY_ID: "Client -> broker: read one message by its commitlog offset.",
    _R.HEART_BEAT: "Client -> broker: producer/consumer groups and subscriptions (HeartbeatData).",
    _R.UNREGISTER_CLIENT: "Client -> broker: a producer or consumer is shutting down.",
    _R.CONSUMER_SEND_MSG_BACK: "Consumer -> broker: a message failed; retry later or DLQ.",
    _R.END_TRANSACTION: "Producer -> broker: commit or roll back a half (prepared) message.",
    _R.GET_CONSUMER_LIST_BY_GROUP: "Consumer -> broker: client ids of a group (for rebalance).",
    _R.CHECK_TRANSACTION_STATE: "Broker -> producer: ask the state of an unresolved transaction.",
    _R.NOTIFY_CONSUMER_IDS_CHANGED: "Broker -> consumer: the group's members changed; rebalance.",
    _R.LOCK_BATCH_MQ: "Consumer -> broker: lock queues for orderly consumption.",
    _R.UNLOCK_BATCH_MQ: "Consumer -> broker: release queue locks.",
    _R.GET_ALL_CONSUMER_OFFSET: "Broker -> broker: every consumer offset (sync and reverse sync).",
    _R.GET_ALL_DELAY_OFFSET: "Broker -> broker: delay-level offsets (sync and reverse sync).",
    _R.CHECK_CLIENT_CONFIG: "Client -> broker: validate a subscription expression.",
    _R.GET_CLIENT_CONFIG: "Client -> broker: client-side configuration (reserved).",
    _R.GET_TIMER_CHECK_POINT: "Broker -> broker: timer-wheel checkpoint (sync and reverse sync).",
    _R.GET_TIMER_METRICS: "Broker -> broker: timer metrics.",
    _R.PUT_KV_CONFIG: "Admin -> name server: set a namespaced KV entry.",
    _R.GET_KV_CONFIG: "Client -> name server: read a namespaced KV entry.",
    _R.DELETE_KV_CONFIG: "Admin -> name server: delete a namespaced KV entry.",
    _R.REGISTER_BROKER: "Broker -> name server: register with topic configs (RegisterBrokerBody).",
    _R.UNREGISTER_BROKER: "Broker -> name server: remove this broker from the routes.",
    _R.GET_ROUTEINFO_BY_TOPIC: "Client -> name server: TopicRouteData of a topic.",
    _R.GET_BROKER_CLUSTER_INFO: "Client -> name server: ClusterInfo (brokers and clusters).",
    _R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: "Admin -> broker: create or update a group config.",
    _R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "Broker -> broker: every subscription group config.",
    _R.GET_TOPIC_STATS_INFO: "Admin -> broker: per-queue offsets of a topic.",
    _R.GET_CONSUMER_CONNECTION_LIST: "Admin -> broker: connected clients of a consumer group.",
    _R.GET_PRODUCER_CONNECTION_LIST: "Admin -> broker: connected clients of a producer group.",
    _R.WIPE_WRITE_PERM_OF_BROKER: "Admin -> name server: clear the write bit of a broker's queues.",
    _R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: "Admin -> name server: every topic name.",
    _R.DELETE_SUBSCRIPTIONGROUP: "Admin -> broker: delete a subscription group.",
    _R.GET_CONSUME_STATS: "Admin -> broker: consume progress of a group.",
    _R.SUSPEND_CONSUMER: "Admin -> broker: suspend a consumer (reserved).",
    _R.RESUME_CONSUMER: "Admin -> broker: resume a consumer (reserved).",
    _R.RESET_CONSUMER_OFFSET_IN_CONSUMER: "Broker -> consumer: reset offsets in the client.",
    _R.RESET_CONSUMER_OFFSET_IN_BROKER: "Admin -> broker: reset offsets in the broker (reserved).",
    _R.ADJUST_CONSUMER_THREAD_POOL: "Admin -> consumer: resize the consume thread pool (reserved).",
    _R.WHO_CONSUME_THE_MESSAGE: "Admin -> broker: which groups consumed a message (reserved).",
    _R.DELETE_TOPIC_IN_BROKER: "Admin -> broker: delete a topic's config.",
    _R.DELETE_TOPIC_IN_NAMESRV: "Admin -> name server: delete a topic's routes.",
    _R.REGISTER_TOPIC_IN_NAMESRV: "Broker -> name server: register one topic's route.",
    _R.GET_KVLIST_BY_NAMESPACE: "Admin -> name server: every KV entry of a namespace.",
    _R.RESET_CONSUMER_CLIENT_OFFSET: "Broker -> consumer: reset the client's offsets.",
    _R.GET_CONSUMER_STATUS_FROM_CLIENT: "Broker -> consumer: offsets held by the client.",
    _R.INVOKE_BROKER_TO_RESET_OFFSET: "Admin -> broker: reset a group's offsets by time.",
    _R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: "Admin -> broker: collect consumer status.",
    _R.GET_TOPICS_BY_CLUSTER: "Admin -> name server: topics of one cluster.",
    _R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: "Admin -> broker: create or update group configs.",
    _R.QUERY_TOPIC_CONSUME_BY_WHO: "Admin -> broker: groups consuming a topic.",
    _R.REGISTER_FILTER_SERVER: "Filter server -> broker: register (legacy).",
    _R.REGISTER_MESSAGE_FILTER_CLASS: "Client -> filter server: upload a filter class (legacy).",
    _R.QUERY_CONSUME_TIME_SPAN: "Admin -> broker: time span of consumed messages per queue.",
    _R.GET_SYSTEM_TOPIC_LIST_FROM_NS: "Admin -> name server: system topic names.",
    _R.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: "Admin -> broker: system topic names.",
    _R.CLEAN_EXPIRED_CONSUMEQUEUE: "Admin -> broker: delete consume queues of deleted topics.",
    _R.GET_CONSUMER_RUNNING_INFO: "Broker -> consumer: the client's running info.",
    _R.QUERY_CORRECTION_OFFSET: "Admin -> broker: correction offsets across groups.",
    _R.CONSUME_MESSAGE_DIRECTLY: "Broker -> consumer: consume one message directly (admin tool).",
    _R.SEND_MESSAGE_V2: "Producer -> broker: store one message (one-letter header keys a..n).",
    _R.GET_UNIT_TOPIC_LIST: "Admin -> name server: unit topics.",
    _R.GET_HAS_UNIT_SUB_TOPIC_LIST: "Admin -> name server: topics with unit subscriptions.",
    _R.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: "Admin -> name server: non-unit topics with unit subs.",
    _R.CLONE_GROUP_OFFSET: "Admin -> broker: copy one group's offsets to another.",
    _R.VIEW_BROKER_STATS_DATA: "Admin -> broker: one statistics item.",
    _R.CLEAN_UNUSED_TOPIC: "Admin -> broker: delete topics with no config.",
    _R.GET_BROKER_CONSUME_STATS: "Admin -> broker: consume stats of every group.",
    _R.UPDATE_NAMESRV_CONFIG: "Admin -> name server: change name server properties.",
    _R.GET_NAMESRV_CONFIG: "Admin -> name server: the name server's properties.",
    _R.SEND_BATCH_MESSAGE: "Producer -> broker: store a batch of messages (V2 header keys).",
    _R.QUERY_CONSUME_QUEUE: "Admin -> broker: raw consume-queue units of a queue.",
    _R.QUERY_DATA_VERSION: "Broker -> name server: compare DataVersion; also a light heartbeat.",
    _R.RESUME_CHECK_HALF_MESSAGE: "Admin -> broker: re-check one half message.",
    _R.SEND_REPLY_MESSAGE: "Client -> broker: send a request-reply answer (long header).",
    _R.SEND_REPLY_MESSAGE_V2: "Client -> broker: send a request-reply answer (V2 header).",
    _R.PUSH_REPLY_MESSAGE_TO_CLIENT: "Broker -> client: deliver a reply message.",
    _R.ADD_WRITE_PERM_OF_BROKER: "Admin -> name server: set the write bit of a broker's queues.",
    _R.GET_ALL_PRODUCER_INFO: "Admin -> broker: every connected producer.",
    _R.DELETE_EXPIRED_COMMITLOG: "Admin -> broker: delete expired commitlog files now.",
    _R.QUERY_TOPICS_BY_CONSUMER: "Admin -> broker: topics a group subscribes to.",
    _R.QUERY_SUBSCRIPTION_BY_CONSUMER: "Admin -> broker: a group's subscription to a topic.",
    _R.GET_TOPIC_CONFIG: "Admin -> broker: one topic's config.",
    _R.GET_SUBSCRIPTIONGROUP_CONFIG: "Admin -> broker: one group's config.",
    _R.UPDATE_AND_GET_GROUP_FORBIDDEN: "Admin -> broker: set or read a group's forbidden flags.",
    _R.CHECK_ROCKSDB_CQ_WRITE_PROGRESS: "Admin -> broker: RocksDB consume-queue progress.",
    _R.EXPORT_ROCKSDB_CONFIG_TO_JSON: "Admin -> broker: dump RocksDB-held configs as JSON.",
    _R.LITE_PULL_MESSAGE: "Lite pull consumer -> broker: pull (PullMessageRequestHeader).",
    _R.RECALL_MESSAGE: "Producer -> broker: recall a scheduled message by handle.",
    _R.QUERY_ASSIGNMENT: "Client -> broker: queue assignment computed by the broker.",
    _R.SET_MESSAGE_REQUEST_MODE: "Admin -> broker: pull or pop mode for a group.",
    _R.GET_ALL_MESSAGE_REQUEST_MODE: "Broker -> broker: every group's request mode.",
    _R.UPDATE_AND_CREATE_STATIC_TOPIC: "Admin -> broker: create a static (logical-queue) topic.",
    _R.GET_BROKER_MEMBER_GROUP: "Broker -> name server: the replicas of a broker group.",
    _R.ADD_BROKER: "Admin -> broker container: start an inner broker.",
    _R.REMOVE_BROKER: "Admin -> broker container: stop an inner broker.",
    _R.BROKER_HEARTBEAT: "Broker -> name server/controller: light liveness heartbeat.",
    _R.NOTIFY_MIN_BROKER_ID_CHANGE: "Name server -> broker: the group's minimum broker id changed.",
    _R.EXCHANGE_BROKER_HA_INFO: "Broker <-> broker: HA address and master flush offset.",
    _R.GET_BROKER_HA_STATUS: "Admin -> broker: HA runtime status.",
    _R.RESET_MASTER_FLUSH_OFFSET: "Admin -> broker: reset the recorded master flush offset.",
    _R.CONTROLLER_ALTER_SYNC_STATE_SET: "Master -> controller: propose a new SyncStateSet.",
    _R.CONTROLLER_ELECT_MASTER: "Broker/admin -> controller: elect a master for a group.",
    _R.CONTROLLER_REGISTER_BROKER: "Broker -> controller: register a replica (after id apply).",
    _R.CONTROLLER_GET_REPLICA_INFO: "Broker -> controller: master, epoch and SyncStateSet.",
    _R.CONTROLLER_GET_METADATA_INFO: "Any -> controller: the controller group and its leader.",
    _R.CONTROLLER_GET_SYNC_STATE_DATA: "Admin -> controller: SyncStateSets of broker groups.",
    _R.GET_BROKER_EPOCH_CACHE: "Admin -> broker: the broker's epoch entries.",
    _R.NOTIFY_BROKER_ROLE_CHANGED: "Controller -> broker: a new master or epoch was elected.",
    _R.UPDATE_CONTROLLER_CONFIG: "Admin -> controller: change controller properties.",
    _R.GET_CONTROLLER_CONFIG: "Admin -> controller: the controller's properties.",
    _R.CLEAN_BROKER_DATA: "Admin -> controller: delete a broker group's or replicas' metadata.",
    _R.CONTROLLER_GET_NEXT_BROKER_ID: "Broker -> controller: the next free broker id of a group.",
    _R.CONTROLLER_APPLY_BROKER_ID: "Broker -> controller: claim a broker id (with check code).",
    _R.RMQHA_RAFT_MESSAGE: "rmq_ha controller -> controller: one Raft message (JSON body), oneway.",
    _R.RMQHA_READ_COMMITLOG: (
        "rmq_ha broker -> replica: the exact commitlog bytes [offset, offset+size) "
        "(self-repair of a quarantined record; refused when not held intact)."
    ),
    _R.RMQHA_STORE_HEALTH: (
        "rmq_ha admin -> broker: quarantined records, recovery cuts, damage and retention "
        "counters (JSON body)."
    ),
    _R.BROKER_CLOSE_CHANNEL_REQUEST: "JRaft controller internal: a broker channel closed.",
    _R.CHECK_NOT_ACTIVE_BROKER_REQUEST: "JRaft controller internal: scan for inactive brokers.",
    _R.GET_BROKER_LIVE_INFO_REQUEST: "JRaft controller internal: read broker live info.",
    _R.GET_SYNC_STATE_DATA_REQUEST: "JRaft controller internal: read sync state data.",
    _R.RAFT_BROKER_HEART_BEAT_EVENT_REQUEST: "JRaft controller internal: replicated heartbeat.",
    _R.UPDATE_COLD_DATA_FLOW_CTR_CONFIG: "Admin -> broker: set cold-data read flow control.",
    _R.REMOVE_COLD_DATA_FLOW_CTR_CONFIG: "Admin -> broker: remove cold-data flow control.",
    _R.GET_COLD_DATA_FLOW_CTR_INFO: "Admin -> broker: cold-data flow control state.",
    _R.SET_COMMITLOG_READ_MODE: "Admin -> broker: commitlog read-ahead mode.",
    _R.AUTH_CREATE_USER: "Admin -> broker: ACL 2.0 create user.",
    _R.AUTH_UPDATE_USER: "Admin -> broker: ACL 2.0 update user.",
    _R.AUTH_DELETE_USER: "Admin -> broker: ACL 2.0 delete user.",
    _R.AUTH_GET_USER: "Admin -> broker: ACL 2.0 read user.",
    _R.AUTH_LIST_USER: "Admin -> broker: ACL 2.0 list users.",
    _R.AUTH_CREATE_ACL: "Admin -> broker: ACL 2.0 create policy.",
    _R.AUTH_UPDATE_ACL: "Admin -> broker: ACL 2.0 update policy.",
    _R.AUTH_DELETE_ACL: "Admin -> broker: ACL 2.0 delete policy.",
    _R.AUTH_GET_ACL: "Admin -> broker: ACL 2.0 read policy.",
    _R.AUTH_LIST_ACL: "Admin -> broker: ACL 2.0 list policies.",
    _R.POP_MESSAGE: "Consumer -> broker: pop messages (broker-side assignment, invisible time).",
    _R.ACK_MESSAGE: "Consumer -> broker: acknowledge one popped message.",
    _R.PEEK_MESSAGE: "Consumer -> broker: read messages without changing visibility.",
    _R.CHANGE_MESSAGE_INVISIBLETIME: "Consumer -> broker: extend or shorten a pop lease.",
    _R.NOTIFICATION: "Consumer -> broker: wait until messages are available to pop.",
    _R.POLLING_INFO: "Consumer -> broker: number of parked pop requests.",
    _R.POP_ROLLBACK: "Consumer -> broker: give popped messages back.",
    _R.BATCH_ACK_MESSAGE: "Consumer -> broker: acknowledge several popped messages.",
}


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
    USER_NOT_EXIST = 3001
    POLICY_NOT_EXIST = 3002
    # client-side only: never on the wire, used to classify local failures
    RPC_UNKNOWN = -1000
    RPC_ADDR_IS_NULL = -1002
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006


_S = ResponseCode

RESPONSE_DOCS: Final[dict[ResponseCode, str]] = {
    _S.SUCCESS: "The request succeeded.",
    _S.SYSTEM_ERROR: "Unexpected failure (also: not enough in-sync replicas for a write).",
    _S.SYSTEM_BUSY: "Overloaded or the request queue is full; retry later.",
    _S.REQUEST_CODE_NOT_SUPPORTED: "No processor for this request code.",
    _S.TRANSACTION_FAILED: "A transaction operation failed.",
    _S.FLUSH_DISK_TIMEOUT: "Stored, but the synchronous disk flush timed out.",
    _S.SLAVE_NOT_AVAILABLE: "Stored on the master, but no slave is available to replicate.",
    _S.FLUSH_SLAVE_TIMEOUT: "Stored on the master, but the slave did not ack in time.",
    _S.MESSAGE_ILLEGAL: "The message is invalid (size, properties, topic name).",
    _S.SERVICE_NOT_AVAILABLE: "The broker cannot serve this now (slave, shutting down, disk full).",
    _S.VERSION_NOT_SUPPORTED: "The client version is not supported.",
    _S.NO_PERMISSION: "The topic or broker forbids this operation (perm bits).",
    _S.TOPIC_NOT_EXIST: "The topic does not exist (or has no route).",
    _S.TOPIC_EXIST_ALREADY: "The topic already exists.",
    _S.PULL_NOT_FOUND: "No message at this offset yet (pull).",
    _S.PULL_RETRY_IMMEDIATELY: "Pull again at once (e.g. filtered out everything).",
    _S.PULL_OFFSET_MOVED: "The requested offset is out of range; use nextBeginOffset.",
    _S.QUERY_NOT_FOUND: "No message matched the query.",
    _S.SUBSCRIPTION_PARSE_FAILED: "The subscription expression does not parse.",
    _S.SUBSCRIPTION_NOT_EXIST: "The group has no subscription to this topic.",
    _S.SUBSCRIPTION_NOT_LATEST: "The broker holds a newer subscription version.",
    _S.SUBSCRIPTION_GROUP_NOT_EXIST: "The subscription group does not exist.",
    _S.FILTER_DATA_NOT_EXIST: "No filter data for this subscription.",
    _S.FILTER_DATA_NOT_LATEST: "The filter data is stale.",
    _S.INVALID_PARAMETER: "A request parameter is invalid.",
    _S.TRANSACTION_SHOULD_COMMIT: "Transaction check answer: commit.",
    _S.TRANSACTION_SHOULD_ROLLBACK: "Transaction check answer: roll back.",
    _S.TRANSACTION_STATE_UNKNOW: "Transaction check answer: unknown yet [sic].",
    _S.TRANSACTION_STATE_GROUP_WRONG: "The transaction belongs to another producer group.",
    _S.NO_BUYER_ID: "Unit routing: no buyer id (legacy).",
    _S.NOT_IN_CURRENT_UNIT: "Unit routing: not in the current unit (legacy).",
    _S.CONSUMER_NOT_ONLINE: "The target consumer is not connected.",
    _S.CONSUME_MSG_TIMEOUT: "Direct consumption timed out.",
    _S.NO_MESSAGE: "Nothing to pop.",
    _S.POLLING_FULL: "Too many parked pop/notification requests.",
    _S.POLLING_TIMEOUT: "A parked pop/notification request timed out.",
    _S.BROKER_NOT_EXIST: "No such broker.",
    _S.BROKER_DISPATCH_NOT_COMPLETE: "The dispatcher has not caught up yet.",
    _S.BROADCAST_CONSUMPTION: "The group consumes in broadcasting mode.",
    _S.FLOW_CONTROL: "Rejected by flow control.",
    _S.NOT_LEADER_FOR_QUEUE: "Static topic: this broker is not the queue's leader.",
    _S.ILLEGAL_OPERATION: "The operation is not allowed.",
    _S.GO_AWAY: "Proxy is shutting down; reconnect elsewhere.",
    _S.CONTROLLER_FENCED_MASTER_EPOCH: "Controller: stale master epoch.",
    _S.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: "Controller: stale SyncStateSet epoch.",
    _S.CONTROLLER_INVALID_MASTER: "Controller: the requester is not the current master.",
    _S.CONTROLLER_INVALID_REPLICAS: "Controller: a proposed member is not a registered replica.",
    _S.CONTROLLER_MASTER_NOT_AVAILABLE: "Controller: no master could be elected.",
    _S.CONTROLLER_INVALID_REQUEST: "Controller: malformed request.",
    _S.CONTROLLER_BROKER_NOT_ALIVE: "Controller: a proposed member is not alive.",
    _S.CONTROLLER_NOT_LEADER: "Controller: this node is not the Raft leader.",
    _S.CONTROLLER_BROKER_METADATA_NOT_EXIST: "Controller: unknown broker group.",
    _S.CONTROLLER_INVALID_CLEAN_BROKER_METADATA: "Controller: refused to clean live brokers.",
    _S.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: "Controller: register the broker first.",
    _S.CONTROLLER_MASTER_STILL_EXIST: "Controller: the old master stays (treated as success).",
    _S.CONTROLLER_ELECT_MASTER_FAILED: "Controller: broker-triggered election found no candidate.",
    _S.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: "Controller: the SyncStateSet change failed.",
    _S.CONTROLLER_BROKER_ID_INVALID: "Controller: the broker id is taken or invalid.",
    _S.CONTROLLER_JRAFT_INTERNAL_ERROR: "Controller: JRaft internal error.",
    _S.CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS: "Controller: no live info for the broker.",
    _S.USER_NOT_EXIST: "ACL 2.0: no such user.",
    _S.POLICY_NOT_EXIST: "ACL 2.0: no such policy.",
    _S.RPC_UNKNOWN: "Client-side: unknown RPC failure.",
    _S.RPC_ADDR_IS_NULL: "Client-side: no address to send to.",
    _S.RPC_SEND_TO_CHANNEL_FAILED: "Client-side: writing to the connection failed.",
    _S.RPC_TIME_OUT: "Client-side: no response before the timeout.",
}


class LanguageCode(IntEnum):
    """`language` header field: JSON headers carry the name, binary headers the byte."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


Kind = Literal["request", "response"]


@dataclass(frozen=True, slots=True)
class CodeInfo:
    kind: Kind
    code: int
    name: str
    doc: str


def request_info(code: int) -> CodeInfo | None:
    """Registry entry of a request code, or None when the code is unknown."""
    try:
        rc = RequestCode(code)
    except ValueError:
        return None
    return CodeInfo("request", int(rc), rc.name, REQUEST_DOCS[rc])


def response_info(code: int) -> CodeInfo | None:
    """Registry entry of a response code, or None when the code is unknown."""
    try:
        rc = ResponseCode(code)
    except ValueError:
        return None
    return CodeInfo("response", int(rc), rc.name, RESPONSE_DOCS[rc])


def code_name(code: int, *, response: bool) -> str:
    """A readable name for logs: the registry name, or `UNKNOWN(<code>)`."""
    info = response_info(code) if response else request_info(code)
    return info.name if info is not None else f"UNKNOWN({code})"


def all_codes() -> list[CodeInfo]:
    """Every registry entry: requests then responses, each sorted by code."""
    reqs = [CodeInfo("request", int(c), c.name, REQUEST_DOCS[c]) for c in RequestCode]
    resps = [CodeInfo("response", int(c), c.name, RESPONSE_DOCS[c]) for c in ResponseCode]
    return sorted(reqs, key=lambda i: i.code) + sorted(resps, key=lambda i: i.code)
