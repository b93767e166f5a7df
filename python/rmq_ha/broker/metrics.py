"""The broker's metrics (docs/operations.md): RocketMQ 5's names where RocketMQ has the metric,
`rmq_ha_*` for what HA needs.

Two parts: `Traffic`, the only per-request work (a dict update per send or pull, keyed by topic
and message type or consumer group, so cardinality is bounded by the topic and group tables),
and `BrokerSnapshot`, a plain record broker.py fills at scrape time from its components;
`families` turns it into Prometheus families. Nothing here reaches into the broker.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import Metric

from rmq_ha.metrics import Families, Histogram
from rmq_ha.protocol.codes import RequestCode, ResponseCode, code_name

#: RocketMQ's stats item names (BrokerStatsManager) that VIEW_BROKER_STATS_DATA answers.
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
#: rocketmq_message_size buckets (bytes), as RocketMQ's: 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB.
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
#: rocketmq_rpc_latency buckets (ms), as RocketMQ's: 1, 3, 5, 10, 100 ms, 1 s, 3 s.
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 10, 100, 1000, 3000)


class RateRing:
    """Events counted in buckets of `res_s` seconds over the last `span_s` seconds (the rates
    behind RocketMQ's putTps / getTransferredTps, a group's consumeTps and statsAll)."""

    __slots__ = ("buckets", "res_s", "span_s")

    def __init__(self, span_s: int = 600, res_s: int = 1) -> None:
        self.span_s = span_s
        self.res_s = res_s
        self.buckets: deque[list[int]] = deque()

    def add(self, now_s: int, n: int) -> None:
        at = now_s - now_s % self.res_s
        b = self.buckets
        if b and b[-1][0] == at:
            b[-1][1] += n
        else:
            b.append([at, n])
        while b and b[0][0] <= now_s - self.span_s:
            b.popleft()

    def total(self, now_s: int, window_s: int) -> int:
        """Events in the buckets that start in the `window_s` seconds up to `now_s`."""
        return sum(n for at, n in self.buckets if now_s - window_s < at <= now_s)

    def rate(self, now_s: int, window_s: int) -> float:
        """Events per second in the `window_s` seconds up to and including `now_s`."""
        return self.total(now_s, window_s) / window_s


class StatsWindow:
    """One of RocketMQ's broker stats items (TOPIC_PUT_NUMS of a topic, GROUP_GET_NUMS of a
    topic@group): the sum and rate of the last minute, hour and day, for VIEW_BROKER_STATS_DATA
    (mqadmin statsAll)."""

    __slots__ = ("day", "hour", "minute")

    def __init__(self) -> None:
        self.minute = RateRing(60)
        self.hour = RateRing(3600, 60)
        self.day = RateRing(86_400, 3600)

    def add(self, now_s: int, n: int) -> None:
        for r in (self.minute, self.hour, self.day):
            r.add(now_s, n)

    def snapshot(self, now_s: int) -> dict[str, tuple[int, float]]:
        """(sum, per second) of the last minute, hour and day."""
        out = {}
        for name, ring, window in (
            ("minute", self.minute, 60),
            ("hour", self.hour, 3600),
            ("day", self.day, 86_400),
        ):
            total = ring.total(now_s, window)
            out[name] = (total, total / window)
        return out


_KNOWN_REQUESTS = frozenset(int(c) for c in RequestCode)
_KNOWN_RESPONSES = frozenset(int(c) for c in ResponseCode)
#: The one key every code outside the registry is counted under. A client may send any number
#: of distinct request codes: a histogram each grew the broker without bound and made every
#: scrape longer, on the broker's own event loop (probe: 40,000 codes, +63 MB, 8.8 s scrapes,
#: a request meanwhile 4.5 s). Exported as UNKNOWN, as before.
UNKNOWN_CODE = 2**31 - 1
assert UNKNOWN_CODE not in _KNOWN_REQUESTS and UNKNOWN_CODE not in _KNOWN_RESPONSES


def _rpc_key(request: int, response: int) -> tuple[int, int]:
    return (
        request if request in _KNOWN_REQUESTS else UNKNOWN_CODE,
        response if response < 0 or response in _KNOWN_RESPONSES else UNKNOWN_CODE,
    )


class Traffic:
    """Messages and bytes in (stored by sends) and out (served to pulls), RocketMQ's
    rocketmq_messages_in_total / _out_total and rocketmq_throughput_in_total / _out_total;
    and their recent rates (`clock` gives the seconds the rates are counted in)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: messages stored, and served, per second (RocketMQ's putTps, getTransferredTps)
        self.put_rate = RateRing()
        self.got_rate = RateRing()
        #: (topic, consumer_group) -> messages served per second in the last minute
        self.group_rate: dict[tuple[str, str], RateRing] = {}
        #: RocketMQ's stats items: topic -> messages stored (TOPIC_PUT_NUMS), "topic@group" ->
        #: messages served (GROUP_GET_NUMS)
        self.stats: dict[tuple[str, str], StatsWindow] = {}
        #: (topic, message_type) -> [messages, body bytes]
        self.inbound: dict[tuple[str, str], list[int]] = {}
        #: (topic, consumer_group) -> [messages, record bytes]
        self.outbound: dict[tuple[str, str], list[int]] = {}
        #: (topic, consumer_group) -> messages sent to the group's dead-letter topic
        self.dlq: dict[tuple[str, str], int] = {}
        #: (topic, message_type) -> body sizes of the messages stored by sends
        self.sizes: dict[tuple[str, str], Histogram] = {}
        #: (request code, response code) -> handling time (ms) of the requests
        self.rpc: dict[tuple[int, int], Histogram] = {}
        #: (topic, "commit" | "rollback") -> transactions ended so (by END_TRANSACTION)
        self.transactions: dict[tuple[str, str], int] = {}
        #: (topic, consumer_group, queue id) -> the next offset a pull of the group asked for
        #: last (RocketMQ's pull offset): in flight = pulled - committed, ready = max - pulled
        self.pulled: dict[tuple[str, str, int], int] = {}

    def forget(self, *, topic: str | None = None, group: str | None = None) -> int:
        """Drops every count of a deleted topic or subscription group (they stayed for ever,
        one series set per churned topic and group: 390 of 516 samples were of deleted
        topics or gone groups after 30 rounds, probe); returns how many entries went."""

        def by_topic_group(k: Any) -> bool:  # (topic, group[, queue id])
            return (topic is not None and k[0] == topic) or (group is not None and k[1] == group)

        def by_topic(k: Any) -> bool:  # (topic, message type or outcome)
            return topic is not None and k[0] == topic

        def by_item(k: Any) -> bool:  # (stats item, "topic" or "topic@group")
            t, _, g = k[1].partition("@")
            return (topic is not None and t == topic) or (group is not None and g == group)

        tables: list[tuple[dict[Any, Any], Callable[[Any], bool]]] = [
            (self.group_rate, by_topic_group),
            (self.outbound, by_topic_group),
            (self.dlq, by_topic_group),
            (self.pulled, by_topic_group),
            (self.inbound, by_topic),
            (self.sizes, by_topic),
            (self.transactions, by_topic),
            (self.stats, by_item),
        ]
        n = 0
        for table, gone in tables:
            keys = [k for k in table if gone(k)]
            for k in keys:
                del table[k]
            n += len(keys)
        return n

    def sized(self, topic: str, message_type: str, sizes: Sequence[int]) -> None:
        h = self.sizes.get((topic, message_type))
        if h is None:
            h = self.sizes[(topic, message_type)] = Histogram(MESSAGE_SIZE_BUCKETS)
        for n in sizes:
            h.observe(n)

    def sized_counts(
        self, topic: str, message_type: str, counts: Sequence[int], total: int
    ) -> None:
        """`sized` for sizes already counted into MESSAGE_SIZE_BUCKETS (the native send path
        hands over one count per bucket and the sum)."""
        h = self.sizes.get((topic, message_type))
        if h is None:
            h = self.sizes[(topic, message_type)] = Histogram(MESSAGE_SIZE_BUCKETS)
        for i, n in enumerate(counts):
            h.counts[i] += n
        h.total += total

    def answered_many(self, request: int, response: int, ms: float, n: int) -> None:
        """`answered` for `n` requests that each took `ms`."""
        key = _rpc_key(request, response)
        h = self.rpc.get(key)
        if h is None:
            h = self.rpc[key] = Histogram(RPC_LATENCY_BUCKETS_MS)
        h.counts[bisect.bisect_left(h.bounds, ms)] += n
        h.total += ms * n

    def answered(self, request: int, response: int, ms: float) -> None:
        key = _rpc_key(request, response)
        h = self.rpc.get(key)
        if h is None:
            h = self.rpc[key] = Histogram(RPC_LATENCY_BUCKETS_MS)
        h.observe(ms)

    def now_s(self) -> int:
        return int(self.clock())

    def consume_tps(self, topic: str, group: str) -> float:
        """Messages per second served to `group` from `topic` over the last minute."""
        r = self.group_rate.get((topic, group))
        return r.rate(self.now_s(), 60) if r is not None else 0.0

    def tps_text(self, ring: RateRing) -> str:
        """RocketMQ's runtime-info form: the rates over 10 s, 1 min and 10 min."""
        now = self.now_s()
        return " ".join(repr(ring.rate(now, w)) for w in (10, 60, 600))

    def stats_item(self, name: str, key: str) -> StatsWindow | None:
        return self.stats.get((name, key))

    def _count(self, name: str, key: str, now: int, n: int) -> None:
        w = self.stats.get((name, key))
        if w is None:
            w = self.stats[(name, key)] = StatsWindow()
        w.add(now, n)

    def put(self, topic: str, message_type: str, messages: int, nbytes: int) -> None:
        now = self.now_s()
        self.put_rate.add(now, messages)
        self._count(TOPIC_PUT_NUMS, topic, now, messages)
        c = self.inbound.get((topic, message_type))
        if c is None:
            self.inbound[(topic, message_type)] = [messages, nbytes]
        else:
            c[0] += messages
            c[1] += nbytes

    def ended(self, topic: str, committed: bool) -> None:
        """A transaction's half message was committed or rolled back (its real topic)."""
        k = (topic, "commit" if committed else "rollback")
        self.transactions[k] = self.transactions.get(k, 0) + 1

    def dead_letter(self, topic: str, group: str) -> None:
        self.dlq[(topic, group)] = self.dlq.get((topic, group), 0) + 1

    def got(
        self,
        topic: str,
        group: str,
        messages: int,
        nbytes: int,
        queue_id: int | None = None,
        next_offset: int | None = None,
    ) -> None:
        """Messages served to a group; a pull also says where the group will pull next."""
        if queue_id is not None and next_offset is not None:
            self.pulled[(topic, group, queue_id)] = next_offset
        now = self.now_s()
        self.got_rate.add(now, messages)
        r = self.group_rate.get((topic, group))
        if r is None:
            r = self.group_rate[(topic, group)] = RateRing(60)
        r.add(now, messages)
        self._count(GROUP_GET_NUMS, f"{topic}@{group}", now, messages)
        c = self.outbound.get((topic, group))
        if c is None:
            self.outbound[(topic, group)] = [messages, nbytes]
        else:
            c[0] += messages
            c[1] += nbytes


@dataclass
class ReplicaLag:
    broker_id: int
    lag_bytes: int
    #: ms since the replica last held everything the master had (0 while caught up).
    lag_ms: int
    in_sync_state_set: bool


@dataclass
class BrokerSnapshot:
    role: str  # NONE | MASTER | SLAVE (the role core's)
    fenced: bool
    epoch: int
    last_epoch: int | None
    broker_id: int | None
    min_offset: int
    max_offset: int
    confirm_offset: int
    flushed_offset: int
    dispatched_offset: int
    sync_state_set: int
    effective_sync_state_set: int
    sync_state_set_epoch: int
    replicas: list[ReplicaLag]
    slave_state: str
    acting_master: bool
    isolated: bool
    isolated_fence: bool
    owes_catch_up: bool
    disk_full: bool
    special_services: bool
    controller_answer_age_ms: int | None
    controller_heartbeat_age_ms: int | None
    store: dict[str, int]
    topics: int
    consumer_groups: int
    producer_connections: int
    consumer_connections: int
    #: (topic, consumer group) -> messages not yet consumed (queue max - committed offset)
    consumer_lag: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (topic, group) -> ms since the oldest message the group has not committed was stored
    #: (only groups with a lag).
    consumer_lag_latency: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (topic, group) -> messages pulled but not committed / not pulled yet, and ms since the
    #: oldest message not pulled yet was stored (0 when none)
    consumer_inflight: dict[tuple[str, str], int] = field(default_factory=dict)
    consumer_ready: dict[tuple[str, str], int] = field(default_factory=dict)
    consumer_queueing_latency: dict[tuple[str, str], int] = field(default_factory=dict)


#: The HA slave's connection states (broker/ha/slave.py).
SLAVE_STATES = ("READY", "HANDSHAKE", "TRANSFER", "SUSPEND")
ROLES = ("NONE", "MASTER", "SLAVE")


def families(s: BrokerSnapshot, traffic: Traffic, base: dict[str, str]) -> list[Metric]:
    f = Families(base)
    # ---- RocketMQ 5's names --------------------------------------------------------------
    f.counter(
        "rocketmq_messages_in_total",
        "Messages stored by sends (RocketMQ's name)",
        labels=("topic", "message_type"),
        samples=((k, v[0]) for k, v in traffic.inbound.items()),
    )
    f.counter(
        "rocketmq_throughput_in_total",
        "Message body bytes stored by sends (RocketMQ's name)",
        labels=("topic", "message_type"),
        samples=((k, v[1]) for k, v in traffic.inbound.items()),
    )
    f.counter(
        "rocketmq_messages_out_total",
        "Messages served to pulls and pops (RocketMQ's name)",
        labels=("topic", "consumer_group"),
        samples=((k, v[0]) for k, v in traffic.outbound.items()),
    )
    f.counter(
        "rocketmq_throughput_out_total",
        "Stored record bytes served to pulls and pops (RocketMQ's name)",
        labels=("topic", "consumer_group"),
        samples=((k, v[1]) for k, v in traffic.outbound.items()),
    )
    f.histogram(
        "rocketmq_message_size",
        "Body sizes (bytes) of the messages stored by sends (RocketMQ's name and buckets)",
        labels=("topic", "message_type"),
        samples=((k, h) for k, h in traffic.sizes.items()),
    )
    f.histogram(
        "rocketmq_rpc_latency",
        "Time (ms) from a request's arrival to its answer, by request and response code "
        "(RocketMQ's name and buckets; a held pull or pop includes its hold)",
        labels=("protocol_type", "request_code", "response_code"),
        samples=(
            (("remoting", _code(req, response=False), _code(resp, response=True)), h)
            for (req, resp), h in traffic.rpc.items()
        ),
    )
    f.counter(
        "rocketmq_send_to_dlq_messages_total",
        "Messages a consumer sent back that went to the group's dead-letter topic "
        "(RocketMQ's name; topic: the message's original topic)",
        labels=("topic", "consumer_group"),
        samples=((k, v) for k, v in traffic.dlq.items()),
    )
    for kind, done in (("commit", "committed"), ("rollback", "rolled back")):
        f.counter(
            f"rocketmq_{kind}_messages_total",
            f"Transactional half messages {done} by END_TRANSACTION (RocketMQ's name; "
            "topic: the real topic)",
            labels=("topic",),
            samples=(((t,), v) for (t, k), v in traffic.transactions.items() if k == kind),
        )
    f.gauge(
        "rocketmq_storage_size",
        "Commitlog bytes held: max offset - min offset (RocketMQ's name)",
        s.max_offset - s.min_offset,
    )
    f.gauge(
        "rocketmq_storage_flush_behind_bytes",
        "Commitlog bytes not yet fsynced (RocketMQ's name)",
        max(0, s.max_offset - s.flushed_offset),
    )
    f.gauge(
        "rocketmq_storage_dispatch_behind_bytes",
        "Commitlog bytes not yet in the consume queues (RocketMQ's name)",
        max(0, s.max_offset - s.dispatched_offset),
    )
    f.gauge("rocketmq_topic_number", "Topics in the topic table (RocketMQ's name)", s.topics)
    f.gauge(
        "rocketmq_consumer_group_number",
        "Consumer groups with committed offsets or online consumers (RocketMQ's name)",
        s.consumer_groups,
    )
    # Per topic and consumer group (RocketMQ's names), for every group with committed offsets.
    per_group: tuple[tuple[str, str, dict[tuple[str, str], int]], ...] = (
        (
            "rocketmq_consumer_lag_messages",
            "Messages of the topic the group has not committed yet",
            s.consumer_lag,
        ),
        (
            "rocketmq_consumer_lag_latency",
            "ms since the oldest message the group has not committed was stored; 0 without lag",
            s.consumer_lag_latency,
        ),
        (
            "rocketmq_consumer_inflight_messages",
            "Messages pulled by the group and not committed yet (pull offset - committed offset)",
            s.consumer_inflight,
        ),
        (
            "rocketmq_consumer_ready_messages",
            "Messages stored and not pulled by the group yet (max offset - pull offset)",
            s.consumer_ready,
        ),
        (
            "rocketmq_consumer_queueing_latency",
            "ms since the oldest message the group has not pulled yet was stored; 0 when none",
            s.consumer_queueing_latency,
        ),
    )
    for name, doc, values in per_group:
        f.gauge(
            name,
            f"{doc} (RocketMQ's name)",
            labels=("topic", "consumer_group"),
            samples=((k, values.get(k, 0)) for k in s.consumer_lag),
        )
    f.gauge(
        "rocketmq_producer_connections",
        "Producer connections (RocketMQ's name)",
        s.producer_connections,
    )
    f.gauge(
        "rocketmq_consumer_connections",
        "Consumer connections (RocketMQ's name)",
        s.consumer_connections,
    )
    # ---- HA (ours) -----------------------------------------------------------------------
    f.gauge(
        "rmq_ha_broker_role",
        "1 for the broker's current role (NONE: controller mode before a role is given)",
        labels=("role",),
        samples=(((r,), 1.0 if r == s.role else 0.0) for r in ROLES),
    )
    f.gauge(
        "rmq_ha_broker_is_master",
        "1 when the broker is master and not fenced (the status answer's role MASTER)",
        1.0 if s.role == "MASTER" and not s.fenced else 0.0,
    )
    f.gauge("rmq_ha_broker_fenced", "1 while writes and registration are refused", s.fenced)
    f.gauge("rmq_ha_broker_epoch", "The master epoch this broker leads or follows", s.epoch)
    f.gauge(
        "rmq_ha_broker_last_epoch",
        "The epoch file's last epoch (-1: none)",
        -1 if s.last_epoch is None else s.last_epoch,
    )
    f.gauge(
        "rmq_ha_broker_id",
        "This replica's broker id (-1: not assigned yet)",
        -1 if s.broker_id is None else s.broker_id,
    )
    f.gauge("rmq_ha_max_offset_bytes", "The commitlog's max (end) offset", s.max_offset)
    f.gauge("rmq_ha_min_offset_bytes", "The commitlog's min offset", s.min_offset)
    f.gauge(
        "rmq_ha_confirm_offset_bytes",
        "The confirm offset: what consumers may read (held by the SyncStateSet)",
        s.confirm_offset,
    )
    f.gauge(
        "rmq_ha_replication_lag_bytes",
        "Master only: bytes the replica has not acknowledged (max offset - its ack)",
        labels=("replica_id",),
        samples=(((str(r.broker_id),), r.lag_bytes) for r in s.replicas),
    )
    f.gauge(
        "rmq_ha_replication_lag_ms",
        "Master only: ms since the replica last held everything (0 while caught up)",
        labels=("replica_id",),
        samples=(((str(r.broker_id),), r.lag_ms) for r in s.replicas),
    )
    f.gauge(
        "rmq_ha_replica_connected",
        "Master only: 1 per connected HA replica, in_sync_state_set says if it is a member",
        labels=("replica_id", "in_sync_state_set"),
        samples=(
            ((str(r.broker_id), "true" if r.in_sync_state_set else "false"), 1.0)
            for r in s.replicas
        ),
    )
    f.gauge(
        "rmq_ha_sync_state_set_size",
        "Master only: members of the committed SyncStateSet (0 on a slave)",
        s.sync_state_set,
    )
    f.gauge(
        "rmq_ha_effective_sync_state_set_size",
        "Master only: members of the committed set joined with a pending proposal",
        s.effective_sync_state_set,
    )
    f.gauge("rmq_ha_sync_state_set_epoch", "The SyncStateSet epoch", s.sync_state_set_epoch)
    f.gauge(
        "rmq_ha_slave_state",
        "1 for the HA client's state (a slave's connection to its master)",
        labels=("state",),
        samples=(((st,), 1.0 if st == s.slave_state else 0.0) for st in SLAVE_STATES),
    )
    if s.controller_answer_age_ms is not None:
        f.gauge(
            "rmq_ha_controller_answer_age_ms",
            "Controller mode: ms since the controller last answered (register, replica-info "
            "poll, election, role-change notice)",
            s.controller_answer_age_ms,
        )
    if s.controller_heartbeat_age_ms is not None:
        f.gauge(
            "rmq_ha_controller_heartbeat_age_ms",
            "Controller mode: ms since a controller last answered a heartbeat",
            s.controller_heartbeat_age_ms,
        )
    f.gauge(
        "rmq_ha_acting_master", "1 while a classic slave acts for its dead master", s.acting_master
    )
    f.gauge(
        "rmq_ha_isolated", "1 while the broker reaches no name server and no replica", s.isolated
    )
    f.gauge(
        "rmq_ha_isolated_fenced", "1 while FMQ fencing refuses the data plane", s.isolated_fence
    )
    f.gauge(
        "rmq_ha_owes_catch_up",
        "1 while this replica lost data it once held and may not lead (issue 13)",
        s.owes_catch_up,
    )
    f.gauge("rmq_ha_disk_full", "1 while the commitlog's disk refuses writes", s.disk_full)
    f.gauge(
        "rmq_ha_special_services_running",
        "1 while delay, transaction and pop services run here",
        s.special_services,
    )
    st = s.store
    f.gauge(
        "rmq_ha_store_quarantined_records",
        "Damaged records quarantined now (skipped by reads until repaired)",
        st.get("quarantined_records", 0),
    )
    f.gauge(
        "rmq_ha_store_quarantined_bytes", "Bytes quarantined now", st.get("quarantined_bytes", 0)
    )
    f.counter(
        "rmq_ha_store_quarantined_at_runtime_total",
        "Records quarantined while running (reads or HA transfers found them damaged)",
        st.get("quarantined_at_runtime", 0),
    )
    f.counter(
        "rmq_ha_store_repaired_total",
        "Quarantined records repaired from a replica",
        st.get("repaired", 0),
    )
    f.counter(
        "rmq_ha_store_repair_refused_total",
        "Repairs whose bytes failed the checks",
        st.get("repair_refused", 0),
    )
    f.counter(
        "rmq_ha_store_skipped_damaged_total",
        "Queue units reads skipped because their record is damaged",
        st.get("skipped_damaged", 0),
    )
    f.gauge(
        "rmq_ha_store_recovery_cut_bytes",
        "Bytes the last open cut as a torn or damaged tail",
        st.get("cut_bytes", 0),
    )
    f.gauge(
        "rmq_ha_store_recovery_cut_below_durable",
        "1 when the last open cut bytes below the durable point (a loss of fsynced data)",
        st.get("cut_below_durable", 0),
    )
    f.counter(
        "rmq_ha_store_retention_deleted_files_total",
        "Commitlog segments deleted by retention",
        st.get("retention_deleted_files", 0),
    )
    return f.out


def _code(code: int, *, response: bool) -> str:
    """A code's registry name; every unknown code is one label value (bounded cardinality)."""
    if code < 0:
        return "NONE"  # oneway: no answer
    name = code_name(code, response=response)
    return "UNKNOWN" if name.startswith("UNKNOWN") else name
