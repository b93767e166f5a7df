"""Client configuration: frozen records with units in their names. Defaults are RocketMQ's
(`ClientConfig`, `DefaultMQProducer`, `DefaultMQPushConsumer`); the Java name is in each
comment."""

from __future__ import annotations

import enum
import os
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rmq_ha.protocol.command import SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from rmq_ha.security.signing import Credentials


class SerializeType(enum.Enum):
    """Header serialization of the requests we send (responses come back the same way)."""

    JSON = SERIALIZE_JSON
    ROCKETMQ = SERIALIZE_ROCKETMQ


def local_ip() -> str:
    """The address other hosts would see (no packet is sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip: str = s.getsockname()[0]
            return ip
    except OSError:
        return "127.0.0.1"


_instance_seq = iter(range(1, 1 << 62))


def default_instance_name() -> str:
    """RocketMQ's `changeInstanceNameToPID`: pid#nanotime (plus a counter, so two clients made
    in the same nanosecond still differ)."""
    return f"{os.getpid()}#{time.time_ns()}{next(_instance_seq)}"


def parse_namesrv_addrs(addrs: str | Sequence[str]) -> tuple[str, ...]:
    """ "a:9876;b:9876" or ["a:9876", "b:9876"] -> ("a:9876", "b:9876")."""
    items = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    out = tuple(a.strip() for a in items if a.strip())
    if not out:
        raise ValueError("at least one name server address (host:port) is required")
    return out


@dataclass(frozen=True)
class ClientConfig:
    client_ip: str = field(default_factory=local_ip)  # clientIP
    instance_name: str | None = None  # instanceName (None: pid#nanotime)
    poll_name_server_interval_s: float = 30.0  # pollNameServerInterval
    heartbeat_broker_interval_s: float = 30.0  # heartbeatBrokerInterval
    persist_consumer_offset_interval_s: float = 5.0  # persistConsumerOffsetInterval
    mq_client_api_timeout_s: float = 3.0  # mqClientApiTimeout
    serialize_type: SerializeType = SerializeType.JSON  # rocketmq.serialize.type
    unit_name: str | None = None  # unitName
    #: ACL credentials (Java: an AclClientRPCHook with SessionCredentials): every request
    #: is signed with them. None: requests go unsigned.
    credentials: Credentials | None = None
    #: TLS on every connection (Java: useTLS / -Dtls.enable=true), e.g.
    #: rmq_ha.security.tls.make_client_context(trust="ca.pem"). None: plaintext.
    tls: ssl.SSLContext | None = None


@dataclass(frozen=True)
class ProducerConfig:
    client: ClientConfig = field(default_factory=ClientConfig)
    send_msg_timeout_s: float = 3.0  # sendMsgTimeout (whole send, retries included)
    retry_times_when_send_failed: int = 2  # retryTimesWhenSendFailed (sync)
    retry_times_when_send_async_failed: int = 2  # retryTimesWhenSendAsyncFailed
    #: RocketMQ retries after a timeout too (a possible duplicate). We do so only when asked,
    #: and then the SendResult says `possible_duplicate`.
    retry_after_timeout: bool = False
    retry_another_broker_when_not_store_ok: bool = False  # retryAnotherBrokerWhenNotStoreOK
    #: sendMsgMaxTimeoutPerRequest: caps one attempt when another may follow (None: no cap).
    send_msg_max_timeout_per_request_s: float | None = None
    max_message_size_bytes: int = 4 * 1024 * 1024  # maxMessageSize
    create_topic_key: str = "TBW102"  # createTopicKey (the auto-create default topic)
    default_topic_queue_nums: int = 4  # defaultTopicQueueNums
    send_latency_fault_enable: bool = True  # sendLatencyFaultEnable
    isolation_s: float = 10.0  # computeNotAvailableDuration(10000 ms) for an isolated broker
    use_v2_header: bool = True  # SEND_MESSAGE_V2 (one-letter keys) instead of SEND_MESSAGE
    back_pressure_for_async_send_num: int = 1024  # backPressureForAsyncSendNum


class ConsumeFrom(enum.Enum):
    """Where a group with no committed offset starts (ConsumeFromWhere)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


@dataclass(frozen=True)
class ConsumerConfig:
    client: ClientConfig = field(default_factory=ClientConfig)
    consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET  # consumeFromWhere
    #: consumeTimestamp for CONSUME_FROM_TIMESTAMP (None: half an hour ago, as RocketMQ).
    consume_timestamp_ms: int | None = None
    consume_concurrency: int = 20  # consumeThreadMax
    consume_message_batch_max_size: int = 1  # consumeMessageBatchMaxSize
    pull_batch_size: int = 32  # pullBatchSize
    pull_batch_size_bytes: int = 256 * 1024  # pullBatchSizeInBytes
    pull_threshold_for_queue: int = 1000  # pullThresholdForQueue (cached messages)
    pull_threshold_size_for_queue_bytes: int = 100 * 1024 * 1024  # pullThresholdSizeForQueue
    consume_concurrently_max_span: int = 2000  # consumeConcurrentlyMaxSpan
    pull_interval_s: float = 0.0  # pullInterval
    rebalance_interval_s: float = 20.0  # rebalance service wait interval
    broker_suspend_max_time_s: float = 15.0  # BROKER_SUSPEND_MAX_TIME_MILLIS
    consumer_timeout_when_suspend_s: float = 30.0  # CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND
    pull_time_delay_when_exception_s: float = 3.0  # pullTimeDelayMillsWhenException
    pull_time_delay_when_flow_control_s: float = (
        0.05  # PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL
    )
    max_reconsume_times: int = -1  # maxReconsumeTimes (-1: 16 concurrent, unlimited orderly)
    send_back_failed_delay_s: float = 5.0  # submitConsumeRequestLater after a failed send-back
    suspend_current_queue_time_s: float = 1.0  # suspendCurrentQueueTimeMillis (orderly)
    lock_interval_s: float = 20.0  # rocketmq.client.rebalance.lockInterval
    lock_max_live_time_s: float = 30.0  # rocketmq.client.rebalance.lockMaxLiveTime
    rebalance_retry_when_lock_failed_s: float = 0.5  # rebalanceLater(500)
    unlock_wait_s: float = 0.5  # tryRemoveOrderMessageQueue's consume-lock wait
    await_termination_s: float = 5.0  # awaitTerminationMillisWhenShutdown (0 here: cancel)
    post_subscription_when_pull: bool = True  # postSubscriptionWhenPull (RocketMQ: false)
