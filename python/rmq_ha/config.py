"""Role configuration: small frozen records with units in their names.

A config can come from a TOML file (snake_case names or RocketMQ's camelCase names) or from a
RocketMQ `.conf` / `.properties` file with RocketMQ's own keys (`brokerClusterName`,
`listenPort`, `namesrvAddr`, `storePathRootDir`, ...), so an operator can reuse a broker config.
Every field names the RocketMQ key it maps to. A bad value raises `ConfigError` naming the key
and the reason; keys we do not know are returned as warnings, not errors, because RocketMQ
configs carry hundreds of keys for features rmq_ha does not have.
"""

from __future__ import annotations

import dataclasses
import enum
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from rmq_ha.errors import ConfigError

#: RocketMQ's epoch file name inside storePathRootDir.
EPOCH_FILE_NAME = "epochFileCheckpoint"


def rmq(key: str, default: Any, doc: str = "") -> Any:
    """A config field with its RocketMQ key."""
    return field(default=default, metadata={"rocketmq": key, "doc": doc})


def secret(key: str, doc: str = "") -> Any:
    """A config field holding a secret: left out of repr and marked `secret` in its metadata,
    so whatever prints a config (logs, GET_BROKER_CONFIG) can mask it."""
    return field(default="", repr=False, metadata={"rocketmq": key, "doc": doc, "secret": True})


def is_secret(f: dataclasses.Field[Any]) -> bool:
    return bool(f.metadata.get("secret"))


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class MetricsExporterType(enum.Enum):
    """RocketMQ 5's metricsExporterType; rmq_ha has the Prometheus endpoint only (RocketMQ's
    OTLP_GRPC and LOG exporters are refused with a clear error)."""

    DISABLE = "DISABLE"
    PROM = "PROM"


#: RocketMQ's exporter types rmq_ha does not have.
_UNSUPPORTED_EXPORTERS = {"OTLP_GRPC", "LOG"}


class TlsMode(enum.Enum):
    """RocketMQ's tls.server.mode: DISABLED refuses TLS, PERMISSIVE takes TLS and plaintext on
    the same port, ENFORCING refuses plaintext."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class TlsClientAuth(enum.Enum):
    """tls.server.need.client.auth."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True)
class SecurityKeys:
    """The security keys every role takes (docs/security.md): ACL 1.0, the role's own
    credentials for cluster traffic, TLS on its ports and its own connections."""

    acl_enable: bool = rmq("aclEnable", False, "check every request against plainAclFile")
    plain_acl_file: str = rmq(
        "plainAclFile", "", "RocketMQ ACL 1.0 plain_acl.yml (reloaded when it changes)"
    )
    acl_watch_interval_ms: int = rmq("aclWatchIntervalMs", 5000, "how often the file is checked")
    inner_client_authentication_credentials: str = secret(
        "innerClientAuthenticationCredentials",
        'signs this role\'s own requests: {"accessKey": "...", "secretKey": "..."}',
    )
    tls_server_mode: TlsMode = rmq("tls.server.mode", TlsMode.DISABLED, "TLS on this role's ports")
    tls_server_cert_path: str = rmq("tls.server.certPath", "", "PEM certificate chain")
    tls_server_key_path: str = rmq("tls.server.keyPath", "", "PEM private key")
    tls_server_trust_cert_path: str = rmq(
        "tls.server.trustCertPath", "", "CA bundle for client certificates"
    )
    tls_server_need_client_auth: TlsClientAuth = rmq(
        "tls.server.need.client.auth", TlsClientAuth.NONE, "none, optional or require"
    )
    tls_enable: bool = rmq("tlsEnable", False, "this role's own outgoing connections use TLS")
    tls_client_trust_cert_path: str = rmq(
        "tls.client.trustCertPath", "", "CA bundle that signs the servers' certificates"
    )
    tls_client_cert_path: str = rmq("tls.client.certPath", "", "client certificate (PEM)")
    tls_client_key_path: str = rmq("tls.client.keyPath", "", "client private key (PEM)")


@dataclass(frozen=True)
class ServerKeys(SecurityKeys):
    """What every role's remoting server takes besides security."""

    server_channel_max_idle_time_sec: int = rmq(
        "serverChannelMaxIdleTimeSeconds",
        120,
        "close a connection with nothing read or written and no request in flight for this"
        " long (0: never)",
    )


@dataclass(frozen=True)
class NamesrvConfig(ServerKeys):
    listen_host: str = rmq("listenHost", "127.0.0.1", "address to bind")
    listen_port: int = rmq("listenPort", 9876, "0 picks a free port")
    scan_not_active_broker_interval_ms: int = rmq(
        "scanNotActiveBrokerInterval", 5000, "how often expired brokers are unregistered"
    )
    broker_channel_expired_time_ms: int = rmq(
        "brokerChannelExpiredTime",
        120_000,
        "heartbeat timeout of a broker that does not send its own at registration",
    )
    support_acting_master: bool = rmq("supportActingMaster", False, "RIP-32 route rewrite")
    #: RocketMQ's default is false; RIP-32 sends 905 whenever a group's smallest id changes,
    #: and only groups that registered with enableActingMaster get it, so ours is true.
    notify_min_broker_id_changed: bool = rmq(
        "notifyMinBrokerIdChanged", True, "send 905 to acting-master groups"
    )
    enable_controller_in_namesrv: bool = rmq(
        "enableControllerInNamesrv",
        False,
        "also run the controller (keys of ControllerConfig in the same file)",
    )
    # -- metrics (RocketMQ 5's keys; docs/operations.md) --------------------------------------
    metrics_exporter_type: MetricsExporterType = rmq(
        "metricsExporterType",
        MetricsExporterType.DISABLE,
        "PROM: serve Prometheus metrics over HTTP (RocketMQ 5); DISABLE: none",
    )
    metrics_prom_exporter_host: str = rmq(
        "metricsPromExporterHost", "", "address the endpoint binds; empty: listenHost"
    )
    metrics_prom_exporter_port: int = rmq(
        "metricsPromExporterPort", 5557, "the metrics endpoint's port; 0 picks a free one"
    )


@dataclass(frozen=True)
class ControllerConfig(ServerKeys):
    """The DLedger controller (`rmq-ha controller`, or embedded in a name server).

    RocketMQ keys (`common/.../ControllerConfig.java`), plus DLedger's Raft timing keys
    (`DLedgerConfig`: heartBeatTimeIntervalMs, maxHeartBeatLeak, min/maxVoteIntervalMs), which
    RocketMQ does not expose but tests and benchmarks need shorter.
    """

    controller_dleger_group: str = rmq("controllerDLegerGroup", "DefaultControllerGroup")
    controller_dleger_peers: str = rmq(
        "controllerDLegerPeers", "n0-127.0.0.1:9878", "id-host:port;id-host:port;..."
    )
    controller_dleger_self_id: str = rmq("controllerDLegerSelfId", "n0", "one of the peer ids")
    controller_store_path: str = rmq(
        "controllerStorePath", "", "Raft storage root; empty: ~/DLedgerController"
    )
    enable_elect_unclean_master: bool = rmq(
        "enableElectUncleanMaster", False, "may elect outside the SyncStateSet (loses data)"
    )
    scan_not_active_broker_interval_ms: int = rmq(
        "scanNotActiveBrokerInterval", 5000, "how often expired broker heartbeats are dropped"
    )
    scan_inactive_master_interval_ms: int = rmq(
        "scanInactiveMasterInterval", 5000, "how often the leader looks for dead masters"
    )
    elect_master_max_retry_count: int = rmq("electMasterMaxRetryCount", 3)
    notify_broker_role_changed: bool = rmq(
        "notifyBrokerRoleChanged", True, "push NOTIFY_BROKER_ROLE_CHANGED after elections"
    )
    heart_beat_time_interval_ms: int = rmq("heartBeatTimeIntervalMs", 2000, "DLedger")
    max_heart_beat_leak: int = rmq("maxHeartBeatLeak", 3, "DLedger")
    min_vote_interval_ms: int = rmq("minVoteIntervalMs", 300, "DLedger")
    max_vote_interval_ms: int = rmq("maxVoteIntervalMs", 1000, "DLedger")
    # -- metrics (RocketMQ 5's keys; docs/operations.md) --------------------------------------
    metrics_exporter_type: MetricsExporterType = rmq(
        "metricsExporterType",
        MetricsExporterType.DISABLE,
        "PROM: serve Prometheus metrics over HTTP (RocketMQ 5); DISABLE: none",
    )
    metrics_prom_exporter_host: str = rmq(
        "metricsPromExporterHost", "", "address the endpoint binds; empty: this node's peer host"
    )
    metrics_prom_exporter_port: int = rmq(
        "metricsPromExporterPort", 5557, "the metrics endpoint's port; 0 picks a free one"
    )

    @property
    def peer_ids(self) -> list[str]:
        """The ids of controllerDLegerPeers in order, repeats included."""
        return [
            item.strip().partition("-")[0].strip()
            for item in self.controller_dleger_peers.split(";")
            if item.strip()
        ]

    @property
    def peers(self) -> dict[str, str]:
        """controllerDLegerPeers as {id: "host:port"}."""
        out: dict[str, str] = {}
        for item in self.controller_dleger_peers.split(";"):
            if item.strip():
                node_id, _, addr = item.strip().partition("-")
                out[node_id.strip()] = addr.strip()
        return out

    @property
    def store_dir(self) -> Path:
        """Where this node's Raft state lives (DLedger: `<storePath>/dledger-<selfId>`)."""
        root = Path(self.controller_store_path or "~/DLedgerController").expanduser()
        return root / f"dledger-{self.controller_dleger_self_id}"


@dataclass(frozen=True)
class BrokerConfig(ServerKeys):
    cluster_name: str = rmq("brokerClusterName", "DefaultCluster")
    broker_name: str = rmq("brokerName", "broker-a")
    broker_id: int = rmq("brokerId", 0, "0 is the master in classic mode")
    broker_ip: str = rmq("brokerIP1", "127.0.0.1", "address announced to name servers")
    listen_port: int = rmq("listenPort", 10911, "0 picks a free port")
    namesrv_addr: str = rmq("namesrvAddr", "", "host:port;host:port")
    store_path_root_dir: str = rmq("storePathRootDir", "store")
    store_path_epoch_file: str = rmq(
        "storePathEpochFile", "", "the epoch file; empty: <storePathRootDir>/epochFileCheckpoint"
    )
    commitlog_segment_bytes: int = rmq("mappedFileSizeCommitLog", 1 << 30)
    consume_queue_file_bytes: int = rmq("mappedFileSizeConsumeQueue", 300_000 * 20)
    flush_disk_type: FlushDiskType = rmq("flushDiskType", FlushDiskType.ASYNC_FLUSH)
    flush_interval_ms: int = rmq("flushIntervalCommitLog", 500)
    sync_flush_timeout_ms: int = rmq("syncFlushTimeout", 5000)
    # -- retention and disk protection (rmq_ha.store_retention, RocketMQ's CleanCommitLogService)
    file_reserved_time_h: int = rmq("fileReservedTime", 72, "hours a commitlog file is kept")
    delete_when: str = rmq("deleteWhen", "04", "hours (00-23, ';'-separated) expired files go")
    disk_max_used_space_ratio: int = rmq(
        "diskMaxUsedSpaceRatio", 75, "percent: above it expired files go at any hour"
    )
    disk_space_clean_forcibly_ratio: int = rmq(
        "diskSpaceCleanForciblyRatio", 85, "percent: above it files go before they expire"
    )
    disk_space_warning_level_ratio: int = rmq(
        "diskSpaceWarningLevelRatio", 90, "percent: above it writes are refused"
    )
    destroy_mapped_file_interval_forcibly_ms: int = rmq(
        "destroyMapedFileIntervalForcibly",
        120_000,
        "RocketMQ waits this long for readers of a deleted file; rmq_ha never waits",
    )
    delete_commit_log_files_interval_ms: int = rmq(
        "deleteCommitLogFilesInterval", 100, "pause between two deleted commitlog files"
    )
    delete_file_batch_max: int = rmq("deleteFileBatchMax", 10, "files deleted per round")
    clean_file_forcibly_enable: bool = rmq(
        "cleanFileForciblyEnable", True, "delete unexpired files when the disk is too full"
    )
    clean_resource_interval_ms: int = rmq(
        "cleanResourceInterval", 10_000, "how often the retention service runs a round"
    )
    # -- damaged records (issue 15; ours) ----------------------------------------------------
    damaged_record_wait_ms: int = rmq(
        "damagedRecordWaitMs",
        30_000,
        "ours: readers stop before a quarantined record this long, waiting for its repair "
        "from a replica, then skip it (counted, reported); 0 skips at once",
    )
    store_repair_interval_ms: int = rmq(
        "storeRepairInterval",
        1000,
        "ours: how often quarantined records are looked for and repairs from replicas tried",
    )
    store_scrub_bytes_per_second: int = rmq(
        "storeScrubBytesPerSecond",
        8 << 20,
        "ours: the background scrub's pace: after validating a commitlog segment it waits as "
        "long as reading it at this rate takes; 0 turns the scrub off",
    )
    store_scrub_pass_interval_ms: int = rmq(
        "storeScrubPassInterval",
        86_400_000,
        "ours: from the start of one scrub pass over the whole commitlog to the start of the "
        "next (the first starts with the broker)",
    )
    broker_role: BrokerRole = rmq("brokerRole", BrokerRole.ASYNC_MASTER)
    # -- replication (broker/ha): classic master/slave and controller mode ------------------
    broker_ip2: str = rmq("brokerIP2", "", "HA address host announced (default brokerIP1)")
    ha_listen_port: int = rmq("haListenPort", 0, "HA port; 0 picks a free one")
    ha_master_address: str = rmq("haMasterAddress", "", "classic slave: fixed master HA addr")
    ha_send_heartbeat_interval_ms: int = rmq("haSendHeartbeatInterval", 5000)
    ha_housekeeping_interval_ms: int = rmq("haHousekeepingInterval", 20_000)
    ha_transfer_batch_bytes: int = rmq("haTransferBatchSize", 32 * 1024)
    ha_flow_control_enable: bool = rmq(
        "haFlowControlEnable", False, "limit each slave's transfer to maxHaTransferByteInSecond"
    )
    max_ha_transfer_rate_bytes: int = rmq(
        "maxHaTransferByteInSecond", 100 * 1024 * 1024, "bytes per second per slave (flow control)"
    )
    ha_max_gap_not_in_sync_bytes: int = rmq(
        "haMaxGapNotInSync",
        256 * 1024 * 1024,
        "classic SYNC_MASTER: a slave further behind is not waited for (SLAVE_NOT_AVAILABLE)",
    )
    ha_max_time_slave_not_catchup_ms: int = rmq("haMaxTimeSlaveNotCatchup", 15_000)
    slave_timeout_ms: int = rmq(
        "slaveTimeout", 3000, "wait for replicas before FLUSH_SLAVE_TIMEOUT"
    )
    sync_from_last_file: bool = rmq("syncFromLastFile", False)
    async_learner: bool = rmq("asyncLearner", False, "replicate, never in the SyncStateSet")
    all_ack_in_sync_state_set: bool = rmq("allAckInSyncStateSet", False)
    in_sync_replicas: int = rmq("inSyncReplicas", 1, "acks needed (self included)")
    min_in_sync_replicas: int = rmq("minInSyncReplicas", 1, "refuse writes below this")
    total_replicas: int = rmq("totalReplicas", 1)
    read_uncommitted: bool = rmq("readUnCommitted", False, "dispatch past confirmOffset")
    enable_controller_mode: bool = rmq("enableControllerMode", False)
    controller_addr: str = rmq(
        "controllerAddr", "", "host:port;host:port (default: the name servers, if embedded)"
    )
    controller_deployed_stand_alone: bool = rmq(
        "controllerDeployedStandAlone",
        False,
        "false: the controllers live in the name servers (controllerAddr defaults to them)",
    )
    controller_heartbeat_timeout_ms: int = rmq("controllerHeartBeatTimeoutMills", 10_000)
    sync_broker_metadata_period_ms: int = rmq("syncBrokerMetadataPeriod", 5000)
    check_sync_state_set_period_ms: int = rmq("checkSyncStateSetPeriod", 5000)
    sync_controller_metadata_period_ms: int = rmq("syncControllerMetadataPeriod", 10_000)
    broker_election_priority: int = rmq("brokerElectionPriority", 2**31 - 1, "lower wins")
    broker_permission: int = rmq("brokerPermission", 6, "perm bits: 2 write, 4 read")
    auto_create_topic_enable: bool = rmq("autoCreateTopicEnable", True)
    trace_topic_enable: bool = rmq(
        "traceTopicEnable",
        False,
        "create the message-trace topic (msgTraceTopicName, 1 queue) at start: tracing clients"
        " need it when autoCreateTopicEnable=false",
    )
    msg_trace_topic_name: str = rmq("msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC")
    auto_create_subscription_group: bool = rmq(
        "autoCreateSubscriptionGroup",
        True,
        "a consumer group gets a default subscription-group config at its first heartbeat",
    )
    clear_retry_topic_when_delete_topic: bool = rmq(
        "clearRetryTopicWhenDeleteTopic",
        True,
        "deleting a topic deletes the pop retry topic (%RETRY%group_topic) of every group that "
        "consumed it",
    )
    default_topic_queue_nums: int = rmq("defaultTopicQueueNums", 4)
    max_message_size: int = rmq("maxMessageSize", 4 * 1024 * 1024)
    offset_check_in_slave: bool = rmq(
        "offsetCheckInSlave",
        False,
        "a replica that is not the master corrects a pull's offset outside its queue"
        " (PULL_OFFSET_MOVED) instead of sending the client to the master with it",
    )
    access_message_in_memory_max_ratio: int = rmq(
        "accessMessageInMemoryMaxRatio",
        40,
        "percent of the machine's memory: a message within this many bytes of the commitlog's"
        " end counts as in memory (a new group starts at 0 only if message 0 is)",
    )
    store_reply_message_enable: bool = rmq(
        "storeReplyMessageEnable", True, "request-reply answers are stored too, not only pushed"
    )
    register_name_server_period_ms: int = rmq("registerNameServerPeriod", 30_000)
    broker_heartbeat_interval_ms: int = rmq("brokerHeartbeatInterval", 1000)
    broker_not_active_timeout_ms: int = rmq("brokerNotActiveTimeoutMillis", 10_000)
    send_heartbeat_timeout_ms: int = rmq("sendHeartbeatTimeoutMillis", 1000)
    # -- slave acting master (RIP-32) and FMQ fencing ----------------------------------------
    enable_slave_acting_master: bool = rmq(
        "enableSlaveActingMaster", False, "the smallest-id live slave acts for a dead master"
    )
    enable_remote_escape: bool = rmq(
        "enableRemoteEscape", False, "an acting slave sends special output to another master"
    )
    skip_pre_online: bool = rmq("skipPreOnline", False, "start without the pre-online step")
    lock_in_strict_mode: bool = rmq(
        "lockInStrictMode", False, "a queue lock needs a majority of the group's replicas"
    )
    compatible_with_old_name_srv: bool = rmq(
        "compatibleWithOldNameSrv",
        True,
        "heartbeat with QUERY_DATA_VERSION (322), member group from a topic route",
    )
    sync_broker_member_group_period_ms: int = rmq("syncBrokerMemberGroupPeriod", 1000)
    consumer_offset_update_version_step: int = rmq(
        "consumerOffsetUpdateVersionStep", 500, "offset commits per DataVersion bump"
    )
    fence_when_isolated: bool = rmq(
        "fenceWhenIsolated",
        False,
        "ours (FMQ): a classic master that reaches no name server and none of its once-"
        "connected slaves for brokerNotActiveTimeoutMillis stops serving reads and writes",
    )
    long_polling_enable: bool = rmq("longPollingEnable", True)
    enable_property_filter: bool = rmq(
        "enablePropertyFilter",
        False,
        "serve consumers that filter by SQL92 expressions on message properties (off: their "
        "start is refused, as RocketMQ's default)",
    )
    short_polling_time_ms: int = rmq("shortPollingTimeMills", 1000)
    max_reconsume_times: int = rmq("maxReconsumeTimes", 16, "then the message goes to the DLQ")
    lock_expire_ms: int = rmq("rebalanceLockMaxLiveTime", 60_000, "queue lock lifetime")
    consumer_offset_flush_interval_ms: int = rmq("flushConsumerOffsetInterval", 5000)
    # -- special messages (broker/special): delayed, transactional and pop messages -----------
    message_delay_level: str = rmq(
        "messageDelayLevel",
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        "delay of levels 1..n; units s m h d (and ms, ours: RocketMQ cannot read it)",
    )
    timer_max_delay_sec: int = rmq(
        "timerMaxDelaySec",
        259_200,
        "a timer message (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS) due further "
        "ahead than this is refused, MESSAGE_ILLEGAL (3 days, as RocketMQ's)",
    )
    delay_offset_update_version_step: int = rmq(
        "delayOffsetUpdateVersionStep", 200, "delay progress updates per DataVersion bump"
    )
    flush_delay_offset_interval_ms: int = rmq("flushDelayOffsetInterval", 10_000)
    transaction_timeout_ms: int = rmq(
        "transactionTimeOut", 6000, "a half message is checked once this old"
    )
    transaction_check_max: int = rmq(
        "transactionCheckMax", 15, "checks of one half message before it is discarded"
    )
    transaction_check_interval_ms: int = rmq("transactionCheckInterval", 30_000)
    revive_interval_ms: int = rmq("reviveInterval", 1000, "pop revive scan period")
    revive_queue_num: int = rmq("reviveQueueNum", 8, "queues of rmq_sys_REVIVE_LOG_<cluster>")
    pop_from_retry_probability: int = rmq(
        "popFromRetryProbability", 20, "percent of pops that try the retry topic first"
    )
    # -- metrics (RocketMQ 5's keys; docs/operations.md) --------------------------------------
    metrics_exporter_type: MetricsExporterType = rmq(
        "metricsExporterType",
        MetricsExporterType.DISABLE,
        "PROM: serve Prometheus metrics over HTTP (RocketMQ 5); DISABLE: none",
    )
    metrics_prom_exporter_host: str = rmq(
        "metricsPromExporterHost", "", "address the endpoint binds; empty: brokerIP1"
    )
    metrics_prom_exporter_port: int = rmq(
        "metricsPromExporterPort", 5557, "the metrics endpoint's port; 0 picks a free one"
    )

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def ha_host(self) -> str:
        return self.broker_ip2 or self.broker_ip

    @property
    def controller_addrs(self) -> list[str]:
        """controllerAddr; when empty and the controllers are embedded in the name servers
        (controllerDeployedStandAlone=false), the name servers' addresses."""
        addrs = [a.strip() for a in self.controller_addr.replace(",", ";").split(";") if a.strip()]
        if not addrs and not self.controller_deployed_stand_alone:
            return self.namesrv_addrs
        return addrs

    @property
    def cq_units_per_file(self) -> int:
        return self.consume_queue_file_bytes // 20

    @property
    def store_root(self) -> Path:
        return Path(self.store_path_root_dir).expanduser()

    @property
    def epoch_file_path(self) -> Path:
        """storePathEpochFile, by default `<storePathRootDir>/epochFileCheckpoint` (RocketMQ)."""
        if self.store_path_epoch_file.strip():
            return Path(self.store_path_epoch_file.strip()).expanduser()
        return self.store_root / EPOCH_FILE_NAME


C = TypeVar("C")

_BOOL_TRUE = {"true", "1", "yes", "on"}
_BOOL_FALSE = {"false", "0", "no", "off"}


def _convert(key: str, typ: Any, raw: Any) -> Any:
    if isinstance(raw, dict | list):
        kind = "a table" if isinstance(raw, dict) else "an array"
        raise ConfigError(f"bad config {key}: {kind} is not a value for this key", key)
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        if typ is MetricsExporterType and str(raw).strip() in _UNSUPPORTED_EXPORTERS:
            raise ConfigError(
                f"bad config {key}: {str(raw).strip()} is a RocketMQ exporter rmq_ha does not "
                "have; use PROM (a Prometheus endpoint) or DISABLE",
                key,
            )
        try:
            return typ(str(raw).strip())
        except ValueError:
            allowed = ", ".join(m.value for m in typ)
            raise ConfigError(f"bad config {key}: {raw!r} is not one of {allowed}", key) from None
    if typ is bool:
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s in _BOOL_TRUE:
            return True
        if s in _BOOL_FALSE:
            return False
        raise ConfigError(f"bad config {key}: {raw!r} is not a boolean", key)
    if typ is int:
        if isinstance(raw, bool):
            raise ConfigError(f"bad config {key}: {raw!r} is not an integer", key)
        if isinstance(raw, int):
            n = raw
        else:
            try:
                n = int(str(raw).strip())
            except ValueError:
                raise ConfigError(f"bad config {key}: {raw!r} is not an integer", key) from None
        if not -(2**63) <= n < 2**63:
            raise ConfigError(f"bad config {key}: {n} is outside a 64-bit integer", key)
        return n
    if typ is str:
        return str(raw).strip() if not isinstance(raw, str) else raw.strip()
    raise ConfigError(f"bad config {key}: unsupported type {typ}", key)


def from_mapping(cls: type[C], values: Mapping[str, Any]) -> tuple[C, list[str]]:
    """Builds `cls` from a mapping keyed by RocketMQ names or field names; returns the record
    and the keys it did not know."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls} is not a config dataclass")
    hints = get_type_hints(cls)
    by_key: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        by_key[f.name] = f
        if "rocketmq" in f.metadata:
            by_key[f.metadata["rocketmq"]] = f
    kwargs: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in values.items():
        target = by_key.get(key)
        if target is None:
            if isinstance(raw, dict):
                # a [section] would drop every key in it as unknown: the whole broker config
                raise ConfigError(
                    f"bad config [{key}]: rmq_ha config files are flat; put the table's keys"
                    " at the top level, without a [section]",
                    key,
                )
            unknown.append(key)
            continue
        kwargs[target.name] = _convert(key, hints[target.name], raw)
    record = cls(**kwargs)
    _validate(record)
    return record, unknown


def key_of(cls: type, key: str) -> str | None:
    """The field name a RocketMQ key (or a field name) maps to in `cls`, or None."""
    for f in dataclasses.fields(cls):
        if key in (f.name, f.metadata.get("rocketmq")):
            return f.name
    return None


def rocketmq_items(record: Any) -> list[tuple[str, str]]:
    """(RocketMQ key, value as text) of every field, as GET_BROKER_CONFIG prints them;
    secrets masked."""
    out = []
    for f in dataclasses.fields(record):
        v = getattr(record, f.name)
        text = (
            v.value
            if isinstance(v, enum.Enum)
            else str(v).lower()
            if isinstance(v, bool)
            else str(v)
        )
        if is_secret(f) and text:
            text = "******"  # a secret never leaves the process (docs/security.md)
        out.append((f.metadata.get("rocketmq", f.name), text))
    return out


class NotRuntimeKey(ConfigError):
    """A known key that may not change while the role runs."""


def replace_runtime_keys(record: C, values: Mapping[str, Any], allowed: Mapping[str, str]) -> C:
    """`replace_keys`, for a running role: every key must be one of `allowed` (RocketMQ
    names); NotRuntimeKey for a known key that is not, ConfigError for anything else bad."""
    if not values:
        raise ConfigError("bad config update: no key=value given", "")
    cls = type(record)
    names = {f.name: f.metadata.get("rocketmq", f.name) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in values:
        name = key_of(cls, key)
        if name is None:
            raise NotRuntimeKey(
                f"bad config {key}: no such key; changeable at runtime:"
                f" {', '.join(sorted(allowed))}",
                key,
            )
        if names[name] not in allowed:
            raise NotRuntimeKey(
                f"bad config {key}: cannot change while running (set it in the config file "
                f"and restart); changeable at runtime: {', '.join(sorted(allowed))}",
                key,
            )
    return replace_keys(record, values)


def replace_keys(record: C, values: Mapping[str, Any]) -> C:
    """`record` with the given keys (RocketMQ names or field names) changed, converted and the
    whole record validated as at load; ConfigError names the key and the reason."""
    cls = type(record)
    hints = get_type_hints(cls)
    changes: dict[str, Any] = {}
    for key, raw in values.items():
        name = key_of(cls, key)
        if name is None:
            raise ConfigError(f"bad config {key}: no such key", key)
        changes[name] = _convert(key, hints[name], raw)
    new = dataclasses.replace(record, **changes)  # type: ignore[type-var]
    _validate(new)
    return new


#: Durations and sizes for which 0 means something (checked on their own below): 0 ms of
#: waiting for a damaged record's repair skips it at once.
ZERO_ALLOWED = frozenset({"damaged_record_wait_ms", "server_channel_max_idle_time_sec"})


def validate(record: Any) -> None:
    """Every rule `from_mapping` applies, for a record changed afterwards (command-line
    overrides): raises ConfigError naming the key."""
    _validate(record)


def _validate(record: Any) -> None:
    for f in dataclasses.fields(record):
        v = getattr(record, f.name)
        key = f.metadata.get("rocketmq", f.name)
        if isinstance(v, int) and not isinstance(v, bool):
            if f.name.endswith("_port") and not 0 <= v <= 65535:
                raise ConfigError(f"bad config {key}: port {v} is outside 0..65535", key)
            if (
                f.name.endswith(("_ms", "_sec", "_bytes", "_nums", "_size")) or "interval" in f.name
            ) and v <= 0:
                if f.name not in ZERO_ALLOWED:
                    raise ConfigError(f"bad config {key}: {v} must be positive", key)
                if v < 0:
                    raise ConfigError(f"bad config {key}: {v} must be >= 0", key)
    host = getattr(record, "metrics_prom_exporter_host", "")
    if any(c.isspace() or c in "/;," for c in host):
        raise ConfigError(
            f"bad config metricsPromExporterHost: {host!r} is not a host name or address",
            "metricsPromExporterHost",
        )
    _validate_security(record)
    if isinstance(record, ControllerConfig):
        _validate_controller(record)
    if isinstance(record, BrokerConfig):
        if record.broker_id < 0 and not record.enable_controller_mode:
            # Controller mode ignores brokerId (the controller assigns one); RocketMQ's
            # quick-start configs say -1.
            raise ConfigError("bad config brokerId: must be >= 0", "brokerId")
        if not 1 <= record.min_in_sync_replicas:
            raise ConfigError("bad config minInSyncReplicas: must be >= 1", "minInSyncReplicas")
        for key, n in (
            ("inSyncReplicas", record.in_sync_replicas),
            ("totalReplicas", record.total_replicas),
        ):
            if n < 1:
                raise ConfigError(f"bad config {key}: must be >= 1 (self included), not {n}", key)
        if (
            not record.enable_controller_mode
            and record.broker_role == BrokerRole.SLAVE
            and record.broker_id == 0
        ):
            # RocketMQ refuses it too: id 0 is the master's, and a slave routed as the master
            # answers every send "the broker is a slave"
            raise ConfigError(
                "bad config brokerId: a SLAVE needs brokerId > 0 (0 is the master's)", "brokerId"
            )
        if record.enable_controller_mode and not record.controller_addrs:
            raise ConfigError(
                "bad config controllerAddr: required when enableControllerMode=true"
                + (
                    " and controllerDeployedStandAlone=true"
                    if record.controller_deployed_stand_alone
                    else " (or namesrvAddr, for controllers embedded in the name servers)"
                ),
                "controllerAddr",
            )
        if not record.store_path_root_dir.strip():
            raise ConfigError(
                "bad config storePathRootDir: empty (the store would land in the current"
                " directory)",
                "storePathRootDir",
            )
        if record.trace_topic_enable:
            from rmq_ha.broker.topics import check_topic_name

            why = check_topic_name(record.msg_trace_topic_name)
            if why is not None:
                raise ConfigError(f"bad config msgTraceTopicName: {why}", "msgTraceTopicName")
        if record.broker_permission & ~0xF:
            raise ConfigError(
                f"bad config brokerPermission: {record.broker_permission} has bits beyond 1|2|4|8",
                "brokerPermission",
            )
        _validate_retention(record)
        if record.consume_queue_file_bytes % 20:
            raise ConfigError(
                "bad config mappedFileSizeConsumeQueue: must be a multiple of 20 (unit size)",
                "mappedFileSizeConsumeQueue",
            )


def _validate_security(record: Any) -> None:
    if not hasattr(record, "acl_enable"):
        return
    if record.acl_enable and not record.plain_acl_file.strip():
        raise ConfigError(
            "bad config plainAclFile: required when aclEnable=true (a RocketMQ plain_acl.yml)",
            "plainAclFile",
        )
    from rmq_ha.security.signing import parse_credentials_json

    try:
        parse_credentials_json(
            record.inner_client_authentication_credentials, "innerClientAuthenticationCredentials"
        )
    except ValueError as e:
        raise ConfigError(f"bad config {e}", "innerClientAuthenticationCredentials") from None
    if record.tls_server_mode is not TlsMode.DISABLED:
        for key, value in (
            ("tls.server.certPath", record.tls_server_cert_path),
            ("tls.server.keyPath", record.tls_server_key_path),
        ):
            if not value.strip():
                raise ConfigError(
                    f"bad config {key}: required when tls.server.mode is "
                    f"{record.tls_server_mode.value}",
                    key,
                )
    if (
        record.tls_server_need_client_auth is not TlsClientAuth.NONE
        and not record.tls_server_trust_cert_path.strip()
    ):
        raise ConfigError(
            "bad config tls.server.trustCertPath: required when tls.server.need.client.auth is "
            f"{record.tls_server_need_client_auth.value} (the CA of the client certificates)",
            "tls.server.trustCertPath",
        )


def _validate_retention(record: BrokerConfig) -> None:
    if record.file_reserved_time_h < 0:
        raise ConfigError("bad config fileReservedTime: must be >= 0 (hours)", "fileReservedTime")
    for key, value in (
        ("cleanResourceInterval", record.clean_resource_interval_ms),
        ("storeRepairInterval", record.store_repair_interval_ms),
    ):
        if value <= 0:
            raise ConfigError(f"bad config {key}: must be > 0 (ms), not {value}", key)
    if record.store_scrub_bytes_per_second < 0:
        raise ConfigError(
            "bad config storeScrubBytesPerSecond: must be >= 0 (0 turns the scrub off)",
            "storeScrubBytesPerSecond",
        )
    if record.damaged_record_wait_ms < 0:
        raise ConfigError(
            "bad config damagedRecordWaitMs: must be >= 0 (ms)", "damagedRecordWaitMs"
        )
    if record.delete_file_batch_max <= 0:
        raise ConfigError("bad config deleteFileBatchMax: must be >= 1", "deleteFileBatchMax")
    for key, v in (
        ("diskMaxUsedSpaceRatio", record.disk_max_used_space_ratio),
        ("diskSpaceCleanForciblyRatio", record.disk_space_clean_forcibly_ratio),
        ("diskSpaceWarningLevelRatio", record.disk_space_warning_level_ratio),
    ):
        if not 1 <= v <= 100:
            raise ConfigError(f"bad config {key}: {v} is not a percentage in 1..100", key)
    if not 0 <= record.access_message_in_memory_max_ratio <= 100:
        raise ConfigError(
            "bad config accessMessageInMemoryMaxRatio:"
            f" {record.access_message_in_memory_max_ratio} is not a percentage in 0..100",
            "accessMessageInMemoryMaxRatio",
        )
    if record.disk_space_warning_level_ratio < record.disk_space_clean_forcibly_ratio:
        # writes would stop before the forcible clean starts: a full disk that retention
        # never empties until files expire
        raise ConfigError(
            f"bad config diskSpaceWarningLevelRatio: {record.disk_space_warning_level_ratio} is"
            " below diskSpaceCleanForciblyRatio"
            f" {record.disk_space_clean_forcibly_ratio}: writes would stop before retention"
            " cleans forcibly",
            "diskSpaceWarningLevelRatio",
        )
    parse_delete_when(record.delete_when)


def parse_delete_when(raw: str) -> tuple[int, ...]:
    """deleteWhen: hours of the day, `;`-separated ("04", "04;16"); ConfigError otherwise."""
    hours: list[int] = []
    for part in raw.split(";"):
        p = part.strip()
        if not p:
            continue
        if not p.isdigit() or not 0 <= int(p) <= 23:
            raise ConfigError(
                f"bad config deleteWhen: {raw!r} is not a ';'-separated list of hours 00-23",
                "deleteWhen",
            )
        hours.append(int(p))
    if not hours:
        raise ConfigError("bad config deleteWhen: no hour given", "deleteWhen")
    return tuple(sorted(set(hours)))


def _validate_controller(record: ControllerConfig) -> None:
    peers = record.peers
    key = "controllerDLegerPeers"
    if not peers:
        raise ConfigError(f"bad config {key}: no peers", key)
    ids = record.peer_ids
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        # the later entry would replace the earlier one: a smaller Raft group than written
        raise ConfigError(f"bad config {key}: peer id {', '.join(twice)} given twice", key)
    for node_id, addr in peers.items():
        host, _, port = addr.rpartition(":")
        if not node_id or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"bad config {key}: {node_id}-{addr} is not id-host:port", key)
    if record.controller_dleger_self_id not in peers:
        key = "controllerDLegerSelfId"
        raise ConfigError(
            f"bad config {key}: {record.controller_dleger_self_id!r} not in peers", key
        )
    if record.min_vote_interval_ms > record.max_vote_interval_ms:
        raise ConfigError(
            "bad config minVoteIntervalMs: above maxVoteIntervalMs", "minVoteIntervalMs"
        )
    if record.max_heart_beat_leak <= 0 or record.elect_master_max_retry_count <= 0:
        raise ConfigError("bad config: maxHeartBeatLeak and electMasterMaxRetryCount must be > 0")


def parse_properties(text: str) -> dict[str, str]:
    """RocketMQ `.conf` / `.properties`: `key=value` or `key: value` lines, `#`/`!` comments,
    trailing-backslash continuation."""
    out: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        # java.util.Properties: the key ends at the first '=', ':' or whitespace; after
        # whitespace one '=' or ':' may still follow ("brokerName broker-b" is a key and value)
        sep = next((i for i, ch in enumerate(line) if ch in "=:" or ch.isspace()), -1)
        if sep < 0:
            out[line] = ""
            continue
        rest = line[sep:]
        if rest[0].isspace():
            rest = rest.lstrip()
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
        else:
            rest = rest[1:]
        out[line[:sep]] = rest.strip()
    return out


def load(cls: type[C], path: str | Path) -> tuple[C, list[str]]:
    """Loads a config file: TOML by its `.toml` suffix, else RocketMQ properties format."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}", str(p)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if p.suffix == ".toml":
            raise ConfigError(
                f"config file {p} is not UTF-8 (byte {e.start}): TOML must be", str(p)
            ) from None
        # java.util.Properties.load reads ISO-8859-1, as RocketMQ does
        text = data.decode("latin-1")
    if p.suffix == ".toml":
        try:
            values: Mapping[str, Any] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {p} is not valid TOML: {e}", str(p)) from None
    else:
        values = parse_properties(text)
    return from_mapping(cls, values)
