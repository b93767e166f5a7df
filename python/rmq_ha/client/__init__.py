"""The Python client of rmq_ha (and of any RocketMQ 4.x/5.x broker speaking remoting), on Trio.

* `Producer`          sync / oneway / async / batch sends, queue selectors, retries
* `PushConsumer`      rebalanced consumption, concurrent or orderly, retries via the broker
* `PullConsumer`      manual pulls and offset commits
* `LitePullConsumer`  rebalanced pulls with `poll()`
* `Admin`             cluster list, routes, topic creation, offsets
* `TransactionProducer`  half messages, local transactions, answers to broker checks
* `PopConsumer`       broker-assigned pops with ack / change-invisible-time

Errors are `rmq_ha.client.errors` classes (all `rmq_ha.errors.RmqHaError`), each saying
whether the operation certainly had no effect (`definite`).
"""

from rmq_ha.client.admin import Admin, QueueOffsets
from rmq_ha.client.allocate import allocate_averagely, allocate_averagely_by_circle
from rmq_ha.client.api import PullResult, PullStatus
from rmq_ha.client.config import (
    ClientConfig,
    ConsumeFrom,
    ConsumerConfig,
    ProducerConfig,
    SerializeType,
)
from rmq_ha.client.consumer import (
    ConcurrentContext,
    ConsumeStatus,
    OrderlyContext,
    OrderlyStatus,
    PushConsumer,
)
from rmq_ha.client.errors import (
    BrokerNotFoundError,
    BrokerResponseError,
    ClientError,
    ClientStateError,
    InvalidMessageError,
    RouteNotFoundError,
    SendAttempt,
    SendError,
    SendTimeoutError,
)
from rmq_ha.client.message import Message, MessageExt, SendResult, SendStatus, UniqIdGenerator
from rmq_ha.client.pop import PopConsumer, PopResult, PopStatus
from rmq_ha.client.producer import Producer, select_by_hash, select_random
from rmq_ha.client.pull import LitePullConsumer, PullConsumer
from rmq_ha.client.transaction import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
from rmq_ha.protocol.models import MessageQueue

__all__ = [
    "Admin",
    "BrokerNotFoundError",
    "BrokerResponseError",
    "ClientConfig",
    "ClientError",
    "ClientStateError",
    "ConcurrentContext",
    "ConsumeFrom",
    "ConsumeStatus",
    "ConsumerConfig",
    "InvalidMessageError",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageQueue",
    "OrderlyContext",
    "OrderlyStatus",
    "PopConsumer",
    "PopResult",
    "PopStatus",
    "Producer",
    "ProducerConfig",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueOffsets",
    "RouteNotFoundError",
    "SendAttempt",
    "SendError",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "SerializeType",
    "TransactionProducer",
    "TransactionSendResult",
    "UniqIdGenerator",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "select_by_hash",
    "select_random",
]
