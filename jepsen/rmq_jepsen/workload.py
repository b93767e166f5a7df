"""Workloads through `rmq_ha.client`, recording every operation.

* `queue`    unique integer values, synchronous sends from `concurrency` workers, lite-pull
             consumers in one group (each poll is a `poll` op);
* `ordered`  one producer per key (keys k0.. split among the workers, OpenChaos-style), sends
             through a hash selector, orderly push consumers holding queue locks;
* `admin`    max / min / search-by-time offsets of random queues during the faults, and the
             controller's view of each group's master and epoch (`metadata`);
* `delay`    sends with a DELAY level or a TIMER_DELIVER_MS delivery time (the send records
             `delay_ms`, so the message is due at its invoke time + delay_ms), read by lite-pull
             consumers that keep reading through heal and recovery;
* `transaction`  a TransactionProducer's half messages whose local transaction commits, rolls
             back or answers unknown (the plan is a pure function of the value,
             `generator.txn_plan`); the check listener resolves unknowns from the message key.
             A committed transaction completes `ok`, a rolled-back one `fail` (definite), with
             its fate in `txn`; lite-pull consumers read the topic;
* `pop`      plain sends, read by PopConsumers that ack most messages, leave some to come back
             after their invisible time, and change the invisible time of some (`pop`, `ack`,
             `change-invisible` ops).

Outcomes: a returned SendResult is `ok` and keeps its status (a non-OK status stays visible);
an error with `definite` is `fail`, anything else (timeouts, lost connections) is `info`, and
after an `info` the worker continues under a fresh process id (Jepsen's crashed process).

Each run ends with `settle` (delay: until the last message is due plus the recovery time, and
until the consumers saw every acknowledged delayed message and committed transaction, within a
bound) and `drain`: the pop consumers pop and ack whatever is left, then fresh pull consumers
read every queue from its minimum offset to its maximum, so the checker can tell "lost" from
"slow".
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from rmq_ha.client import (
    Admin,
    ClientConfig,
    ConsumeFrom,
    ConsumerConfig,
    LitePullConsumer,
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
    PopConsumer,
    PopStatus,
    Producer,
    ProducerConfig,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    TransactionProducer,
    select_by_hash,
)
from rmq_ha.errors import RmqHaError
from rmq_ha.history import TXN_COMMITTED, Read, Value
from rmq_ha.protocol.message import PROPERTY_POP_CK
from rmq_ha.protocol.pop import ExtraInfo
from rmq_jepsen import generator as gen
from rmq_jepsen.db import DB, ClusterView
from rmq_jepsen.recorder import Recorder

log = logging.getLogger("rmq_jepsen.workload")

WORKLOADS = ("queue", "ordered", "admin", "delay", "transaction", "pop")
#: Workloads with producers, in the order workers are dealt out.
SEND_KINDS = ("queue", "ordered", "delay", "transaction", "pop")
#: Workloads with consumers, in the order of their process ids.
CONSUMER_KINDS = ("queue", "ordered", "delay", "transaction", "pop")
TOPICS = {
    "queue": "RmqJepsenQueue",
    "ordered": "RmqJepsenOrdered",
    "delay": "RmqJepsenDelay",
    "transaction": "RmqJepsenTxn",
    "pop": "RmqJepsenPop",
}
#: The default delay levels (the bench's messageDelayLevel, `db.Timing.delay_levels`).
DEFAULT_DELAY_LEVELS_MS = (1000, 2000, 3000, 4000, 5000, 10_000, 30_000, 60_000)


@dataclass
class WorkloadOptions:
    kinds: tuple[str, ...] = ("queue",)
    rate: float = 100.0
    concurrency: int = 5
    consumers: int = 2
    queues_per_broker: int = 4
    send_timeout_s: float = 3.0
    admin_interval_s: float = 0.5
    metadata_interval_s: float = 2.0
    run_id: str = "run"
    client_ip: str = "127.0.0.1"
    seed: int = 0
    #: the brokers' messageDelayLevel, in ms (level n waits delay_levels_ms[n - 1])
    delay_levels_ms: tuple[int, ...] = DEFAULT_DELAY_LEVELS_MS
    #: delayed sends use levels 1..max_delay_level and timers of timer_ms[0]..timer_ms[1]
    max_delay_level: int = 5
    timer_ms: tuple[int, int] = (500, 5000)
    #: a pop's invisible time, and the short lease of a change-invisible that is left to expire
    pop_invisible_s: float = 3.0
    pop_short_invisible_s: float = 1.0
    #: how long `settle` waits at most for the consumers to see every delayed message and
    #: committed transaction (after the last delayed message came due plus the recovery)
    settle_timeout_s: float = 30.0

    @property
    def topics(self) -> dict[str, str]:
        out = {k: TOPICS[k] for k in SEND_KINDS if k in self.kinds}
        if not out:  # admin alone reads the queue topic
            out["queue"] = TOPICS["queue"]
        return out

    @property
    def send_kinds(self) -> list[str]:
        return [k for k in SEND_KINDS if k in self.kinds]


def delay_levels_ms(spec: str) -> tuple[int, ...]:
    """messageDelayLevel ("1s 2s 1m ...") in milliseconds, as the brokers parse it."""
    from rmq_ha.broker.special.delay import parse_delay_levels

    return tuple(parse_delay_levels(spec))


def parse_workloads(spec: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in spec.split(",") if k.strip())
    for k in kinds:
        if k not in WORKLOADS:
            raise ValueError(f"unknown workload {k!r}; known: {', '.join(WORKLOADS)}")
    if not kinds:
        raise ValueError("no workload")
    return kinds


def to_read(m: MessageExt) -> Read:
    try:
        value: int | None = int(bytes(m.body).decode())
    except (ValueError, UnicodeDecodeError):
        value = None
    keys = m.keys
    return Read(
        m.topic,
        m.queue.queue_id,
        m.queue_offset,
        value,
        keys[0] if keys else None,
        m.queue.broker_name,
    )


def txn_check_answer(fates: Mapping[int, str | None], key: str | None) -> LocalTransactionState:
    """The transaction check listener: a transaction's fate as its producer decided it, or
    its plan (`generator.txn_plan`, a function of the key) when no producer of this run
    decided it; UNKNOW while its half is still in flight (the local transaction has not run
    yet, and may yet roll back a half stored with a non-OK status), or for a key that is not
    the workload's."""
    v = gen.txn_value_of_key(key)
    if v is None:
        return LocalTransactionState.UNKNOW
    if v in fates:
        fate = fates[v]
        if fate is None:
            return LocalTransactionState.UNKNOW
    else:
        fate = gen.txn_plan(v)
    if fate in TXN_COMMITTED:
        return LocalTransactionState.COMMIT_MESSAGE
    return LocalTransactionState.ROLLBACK_MESSAGE


def pop_read(m: MessageExt, group: str) -> Read:
    """A popped message as a read: the queue and offset are where it was popped from, which
    for a message that came back after its invisible time is the group's pop retry topic."""
    r = to_read(m)
    ck = m.properties.get(PROPERTY_POP_CK)
    if ck:
        try:
            extra = ExtraInfo.parse(ck)
        except ValueError:
            return r
        r.topic = extra.real_topic(m.topic, group)
        r.broker = extra.broker_name
    return r


def _outcome(e: BaseException) -> tuple[str, bool]:
    definite = bool(getattr(e, "definite", False))
    return ("fail" if definite else "info"), definite


@dataclass
class Stats:
    errors: list[str] = field(default_factory=list)

    def note(self, e: BaseException) -> None:
        if len(self.errors) < 50:
            self.errors.append(repr(e)[:300])


class Workloads:
    def __init__(
        self, opts: WorkloadOptions, db: DB, view: ClusterView, recorder: Recorder
    ) -> None:
        self.opts = opts
        self.db = db
        self.view = view
        self.rec = recorder
        self.namesrv = db.namesrv_addr()
        self.values = gen.Values()
        self.rng = random.Random(opts.seed)
        self.stats = Stats()
        # Process ids: producers first (at least one per workload that sends), then
        # consumers (`consumers` per consuming workload), admin, drain, pop drain; fresh ids
        # after those.
        c = self.workers = max(opts.concurrency, len(opts.send_kinds))
        k = opts.consumers
        self.consumer_procs = {
            kind: list(range(c + i * k, c + (i + 1) * k)) for i, kind in enumerate(CONSUMER_KINDS)
        }
        self.admin_proc = c + len(CONSUMER_KINDS) * k
        self.drain_proc = self.admin_proc + 1
        self.pop_drain_proc = self.drain_proc + 1
        self.pids = gen.ProcessIds(self.pop_drain_proc + 1)
        self.bucket = gen.TokenBucket(opts.rate, burst=max(1.0, opts.concurrency))
        self.producer_group = f"rmqj-p-{opts.run_id}"
        self.txn_group = f"rmqj-tx-{opts.run_id}"
        self.consumer_group = f"rmqj-c-{opts.run_id}"
        self.groups = {
            "queue": self.consumer_group,
            "ordered": self.consumer_group + "-ordered",
            "delay": self.consumer_group + "-delay",
            "transaction": self.consumer_group + "-txn",
            "pop": self.consumer_group + "-pop",
        }
        #: value -> the transaction's fate (None while its half is in flight); what the check
        #: listener answers. Values it does not know are answered by their plan.
        self.txn_fate: dict[int, str | None] = {}
        self._txp: TransactionProducer | None = None
        #: values the consumers of delay / transaction must see before the drain (acknowledged
        #: delayed sends, committed transactions), and the values they saw
        self.expected: dict[str, set[int]] = {"delay": set(), "transaction": set()}
        self.seen: dict[str, set[int]] = {"delay": set(), "transaction": set()}
        #: the trio time at which the last delayed message is due
        self.last_due = 0.0
        #: pop: values acknowledged by a send, and values acked by a pop consumer
        self.pop_sent: set[int] = set()
        self.pop_acked: set[int] = set()
        self.pop_rng = random.Random(opts.seed ^ 0x909)
        self._background_stop = trio.Event()

    def client(self) -> ClientConfig:
        cfg = ClientConfig(
            client_ip=self.opts.client_ip,
            mq_client_api_timeout_s=3.0,
            poll_name_server_interval_s=2.0,
            heartbeat_broker_interval_s=2.0,
        )
        sec = self.db.security
        return cfg if sec is None else sec.client_config(cfg)

    # ---- setup -------------------------------------------------------------------------------

    async def setup(self, timeout_s: float = 60.0) -> None:
        """Creates the topics on every master (queues_per_broker each) and waits for routes."""
        deadline = trio.current_time() + timeout_s
        last: Exception | None = None
        for kind, topic in self.opts.topics.items():
            while True:
                try:
                    async with Admin(self.namesrv, config=self.client()) as admin:
                        await admin.create_topic(
                            topic,
                            cluster=self.db.cluster_name,
                            queue_nums=self.opts.queues_per_broker,
                            order=kind == "ordered",
                            wait_for_route_s=10,
                        )
                    break
                except (RmqHaError, trio.TooSlowError) as e:
                    last = e
                    if trio.current_time() > deadline:
                        raise RuntimeError(f"could not create topic {topic}: {last!r}") from e
                    await trio.sleep(0.5)

    # ---- the run -----------------------------------------------------------------------------

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """What outlives the run phase, around run, heal, recovery, settle and drain: the
        shared transaction producer (its check listener must answer the brokers until the
        drain is done) and the consumers of delay and transaction (delayed messages come due,
        and unknown transactions are resolved, after the sends stop)."""
        async with AsyncExitStack() as stack:
            if "transaction" in self.opts.kinds:
                cfg = ProducerConfig(
                    client=self.client(), send_msg_timeout_s=self.opts.send_timeout_s
                )
                self._txp = await stack.enter_async_context(
                    TransactionProducer(
                        self.txn_group,
                        self.namesrv,
                        self._check_txn,
                        config=cfg,
                        check_concurrency=4,
                    )
                )
            try:
                async with trio.open_nursery() as nursery:
                    for kind in ("delay", "transaction"):
                        if kind in self.opts.kinds:
                            for proc in self.consumer_procs[kind]:
                                nursery.start_soon(self._background_consumer, proc, kind)
                    try:
                        yield
                    finally:
                        # the consumers see the flag within a poll; give them that long
                        self._background_stop.set()
                        nursery.cancel_scope.deadline = trio.current_time() + 5
            finally:
                self._txp = None

    def stop_background(self) -> None:
        """Stops the background consumers (before the drain reads every queue)."""
        self._background_stop.set()

    async def run(self, until: float) -> None:
        """Runs every workload until trio time `until`, then stops the clients."""
        async with trio.open_nursery() as nursery:
            topics = self.opts.topics
            if "queue" in topics:
                for proc in self.consumer_procs["queue"]:
                    nursery.start_soon(self._lite_consumer, proc, "queue", until)
            if "ordered" in topics:
                for proc in self.consumer_procs["ordered"]:
                    nursery.start_soon(self._orderly_consumer, proc, until)
            if "pop" in topics:
                for proc in self.consumer_procs["pop"]:
                    nursery.start_soon(self._pop_consumer, proc, until)
            owners = gen.key_owners(self.workers)
            kinds = self.opts.send_kinds
            for w in range(self.workers if kinds else 0):
                kind = kinds[w % len(kinds)]
                nursery.start_soon(self._producer, w, kind, owners[w], until)
            if "admin" in self.opts.kinds:
                nursery.start_soon(self._admin, until)

    async def _producer(self, proc: int, kind: str, keys: list[str], until: float) -> None:
        topic = self.opts.topics[kind]
        cfg = ProducerConfig(client=self.client(), send_msg_timeout_s=self.opts.send_timeout_s)
        async with Producer(self.producer_group, self.namesrv, config=cfg) as p:
            while trio.current_time() < until:
                await trio.sleep(self.bucket.delay(trio.current_time()))
                if trio.current_time() >= until:
                    break
                if kind == "transaction":
                    proc = await self._send_txn(proc, topic)
                    continue
                v = next(self.values)
                key = self.rng.choice(keys) if kind == "ordered" else None
                props: dict[str, str] | None = None
                delay_ms: int | None = None
                detail: str | None = None
                if kind == "delay":
                    delay_ms, props, detail = self._delay()
                inv = self.rec.invoke(
                    proc,
                    "send",
                    Value(topic=topic, value=v, key=key, delay_ms=delay_ms, detail=detail),
                )
                if props is not None and detail == "timer" and delay_ms is not None:
                    # the delivery time counts from after the invoke: due no earlier than
                    # invoke + delay_ms on the history's clock
                    props = {"TIMER_DELIVER_MS": str(int(time.time() * 1000) + delay_ms)}
                if delay_ms is not None:
                    self.last_due = max(self.last_due, trio.current_time() + delay_ms / 1000)
                try:
                    with trio.fail_after(self.opts.send_timeout_s + 2):
                        if key is not None:
                            r = await p.send(
                                topic, str(v), keys=key, selector=select_by_hash, arg=key
                            )
                        else:
                            r = await p.send(topic, str(v), properties=props)
                except (RmqHaError, trio.TooSlowError, OSError) as e:
                    self.stats.note(e)
                    type_, definite = _outcome(e)
                    self.rec.complete(inv, type_, error=repr(e)[:500], definite=definite)
                    if type_ == "info":
                        proc = self.pids.fresh()
                    continue
                # A delayed message is stored on the schedule topic and delivered later to a
                # queue of the real topic (perhaps of another group, through an escape): the
                # answer's queue offset is not where it will be read, so it is not recorded.
                self.rec.complete(
                    inv,
                    "ok",
                    Value(
                        topic=topic,
                        value=v,
                        key=key,
                        queue_id=r.queue.queue_id,
                        queue_offset=None if kind == "delay" else r.queue_offset,
                        broker=r.queue.broker_name,
                        status=r.status.value,
                        delay_ms=delay_ms,
                        detail=detail,
                    ),
                )
                if kind == "delay":
                    self.expected["delay"].add(v)
                elif kind == "pop":
                    self.pop_sent.add(v)

    def _delay(self) -> tuple[int, dict[str, str], str]:
        """A delayed send's delay: half by DELAY level, half by timer delivery time."""
        o = self.opts
        if self.rng.random() < 0.5:
            level = self.rng.randint(1, max(1, min(o.max_delay_level, len(o.delay_levels_ms))))
            return o.delay_levels_ms[level - 1], {"DELAY": str(level)}, f"level {level}"
        ms = self.rng.randint(*o.timer_ms)
        return ms, {}, "timer"

    # ---- transactions ------------------------------------------------------------------------

    async def _send_txn(self, proc: int, topic: str) -> int:
        """One transactional send; returns the process id to continue under."""
        txp = self._txp
        if txp is None:
            raise RuntimeError("the transaction workload runs inside Workloads.lifetime()")
        v = next(self.values)
        plan = gen.txn_plan(v)
        inv = self.rec.invoke(proc, "send", Value(topic=topic, value=v, txn=plan))
        self.txn_fate[v] = None  # in flight: a check now is answered "unknown"

        def execute(msg: Message, arg: Any) -> LocalTransactionState:
            if plan == "commit":
                return LocalTransactionState.COMMIT_MESSAGE
            if plan == "rollback":
                return LocalTransactionState.ROLLBACK_MESSAGE
            return LocalTransactionState.UNKNOW

        try:
            with trio.fail_after(self.opts.send_timeout_s + 2):
                r = await txp.send_message_in_transaction(
                    topic, str(v), execute, keys=gen.txn_key(v)
                )
        except (RmqHaError, trio.TooSlowError, OSError) as e:
            # The half may be stored (info): the broker will ask, and the plan answers. The
            # plan stays on the invoke only: `txn` on a completion is a fate the producer
            # decided, and a failed send decided none (a committing "fate" on a fail is a
            # record no producer writes: the checker failed the run on it, fault probe).
            self.txn_fate[v] = plan
            self.stats.note(e)
            type_, definite = _outcome(e)
            self.rec.complete(
                inv, type_, Value(topic=topic, value=v), error=repr(e)[:500], definite=definite
            )
            return self.pids.fresh() if type_ == "info" else proc
        if r.local_state is LocalTransactionState.COMMIT_MESSAGE:
            fate = "commit"
        elif r.local_state is LocalTransactionState.ROLLBACK_MESSAGE:
            fate = "rollback"  # planned, or the half was stored with a non-OK status
        else:
            fate = plan  # unknown-commit / unknown-rollback: the check decides
        self.txn_fate[v] = fate
        sr = r.send_result
        val = Value(
            topic=topic,
            value=v,
            queue_id=sr.queue.queue_id,
            broker=sr.queue.broker_name,
            status=sr.status.value,
            txn=fate,
            detail=f"END_TRANSACTION not sent: {r.end_error}" if r.end_error else None,
        )
        if fate in TXN_COMMITTED:
            self.rec.complete(inv, "ok", val)
            self.expected["transaction"].add(v)
        else:
            # Rolled back: the message must never be delivered; the send had no effect.
            why = "rolled back" if sr.status is SendStatus.SEND_OK else f"rolled back ({sr.status})"
            self.rec.complete(inv, "fail", val, error=why)
        return proc

    def _check_txn(self, msg: MessageExt) -> LocalTransactionState:
        keys = msg.keys
        return txn_check_answer(self.txn_fate, keys[0] if keys else None)

    def _consumer_cfg(self) -> ConsumerConfig:
        return ConsumerConfig(
            client=self.client(),
            consume_from=ConsumeFrom.FIRST_OFFSET,
            rebalance_interval_s=2.0,
            pull_time_delay_when_exception_s=0.5,
        )

    async def _lite_consumer(self, proc: int, kind: str, until: float) -> None:
        await self._lite_consume(proc, kind, lambda: trio.current_time() >= until)

    async def _background_consumer(self, proc: int, kind: str) -> None:
        await self._lite_consume(proc, kind, self._background_stop.is_set)

    async def _lite_consume(self, proc: int, kind: str, done: Callable[[], bool]) -> None:
        topic = self.opts.topics[kind]
        group = self.groups[kind]
        seen = self.seen.get(kind)
        try:
            async with LitePullConsumer(
                group, self.namesrv, {topic: "*"}, config=self._consumer_cfg()
            ) as c:
                while not done():
                    inv = self.rec.invoke(proc, "poll", Value(topic=topic, group=group))
                    try:
                        msgs = await c.poll(timeout_s=1.0)
                    except RmqHaError as e:
                        self.stats.note(e)
                        type_, definite = _outcome(e)
                        self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
                        await trio.sleep(0.2)
                        continue
                    reads = [to_read(m) for m in msgs]
                    self.rec.complete(inv, "ok", Value(topic=topic, group=group, messages=reads))
                    if seen is not None:
                        seen.update(r.value for r in reads if r.value is not None)
        except RmqHaError as e:  # start or shutdown failed (cluster unreachable)
            self.stats.note(e)

    # ---- pop ---------------------------------------------------------------------------------

    async def _pop_consumer(self, proc: int, until: float) -> None:
        await self._pop_loop(proc, lambda: trio.current_time() >= until, ack_all=False)

    async def _pop_loop(
        self, proc: int, done: Callable[[], bool], *, ack_all: bool, quiet_s: float = 0.0
    ) -> int:
        """Pops until `done()`; during the run some messages are left to come back or get a
        new lease, in the drain (`ack_all`) every message is acked. With `quiet_s`, also
        returns once nothing was popped for that long. Returns the messages popped."""
        topic = self.opts.topics["pop"]
        group = self.groups["pop"]
        inv_ms = int(self.opts.pop_invisible_s * 1000)
        popped = 0
        last_found = trio.current_time()
        try:
            async with PopConsumer(group, self.namesrv, [topic], config=self._consumer_cfg()) as c:
                while not done():
                    if quiet_s and trio.current_time() - last_found >= quiet_s:
                        break
                    inv = self.rec.invoke(
                        proc, "pop", Value(topic=topic, group=group, invisible_ms=inv_ms)
                    )
                    try:
                        with trio.fail_after(self.opts.send_timeout_s + 2):
                            r = await c.pop(
                                topic,
                                max_nums=16,
                                invisible_time_s=self.opts.pop_invisible_s,
                                poll_time_s=1.0,
                            )
                    except (RmqHaError, trio.TooSlowError, OSError) as e:
                        self.stats.note(e)
                        type_, definite = _outcome(e)
                        self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
                        if type_ == "info":
                            proc = self.pids.fresh()
                        await trio.sleep(0.2)
                        continue
                    reads = [pop_read(m, group) for m in r.messages]
                    self.rec.complete(
                        inv,
                        "ok",
                        Value(
                            topic=topic,
                            group=group,
                            messages=reads,
                            invisible_ms=inv_ms,
                            detail=None if r.status is PopStatus.FOUND else r.status.value,
                        ),
                    )
                    if reads:
                        last_found = trio.current_time()
                        popped += len(reads)
                    for m, rd in zip(r.messages, reads, strict=True):
                        action = "ack" if ack_all else gen.pop_action(self.pop_rng)
                        if action.startswith("change"):
                            lease = (
                                self.opts.pop_short_invisible_s
                                if action == "change-skip"
                                else self.opts.pop_invisible_s
                            )
                            proc, changed = await self._pop_op(c, proc, m, rd, lease)
                            if not changed:
                                continue
                        if action in ("ack", "change-ack"):
                            proc, _ = await self._pop_op(c, proc, m, rd, None)
        except RmqHaError as e:  # start or shutdown failed (cluster unreachable)
            self.stats.note(e)
        return popped

    async def _pop_op(
        self, c: PopConsumer, proc: int, m: MessageExt, rd: Read, lease_s: float | None
    ) -> tuple[int, bool]:
        """Acks `m` (lease_s None) or changes its invisible time; returns the process id to
        continue under and whether the broker answered ok."""
        f = "ack" if lease_s is None else "change-invisible"
        val = Value(
            topic=self.opts.topics["pop"],
            group=self.groups["pop"],
            value=rd.value,
            broker=rd.broker,
            queue_id=rd.queue_id,
            queue_offset=rd.queue_offset,
            invisible_ms=None if lease_s is None else int(lease_s * 1000),
        )
        inv = self.rec.invoke(proc, f, val)
        try:
            with trio.fail_after(self.opts.send_timeout_s + 2):
                if lease_s is None:
                    await c.ack(m)
                else:
                    await c.change_invisible_time(m, lease_s)
        except (RmqHaError, trio.TooSlowError, OSError) as e:
            self.stats.note(e)
            type_, definite = _outcome(e)
            self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
            return (self.pids.fresh() if type_ == "info" else proc), False
        self.rec.complete(inv, "ok")
        if lease_s is None and rd.value is not None:
            self.pop_acked.add(rd.value)
        return proc, True

    async def pop_drain(self, timeout_s: float) -> dict[str, Any]:
        """Pops and acks everything left: until every acknowledged send to the pop topic was
        acked and nothing came back for an invisible time (what was left during the run
        comes back after it), or `timeout_s`."""
        deadline = trio.current_time() + timeout_s
        quiet = self.opts.pop_invisible_s + 1.5

        def done() -> bool:
            return trio.current_time() >= deadline

        popped = 0
        while not done():
            popped += await self._pop_loop(self.pop_drain_proc, done, ack_all=True, quiet_s=quiet)
            if self.pop_sent <= self.pop_acked:
                break
        missing = sorted(self.pop_sent - self.pop_acked)
        return {"popped": popped, "not_acked": len(missing), "not_acked_examples": missing[:20]}

    # ---- settling ----------------------------------------------------------------------------

    async def settle(self, recovery_s: float) -> dict[str, Any]:
        """Before the drain: waits until the last delayed message is due plus `recovery_s`,
        then until the consumers of delay and transaction saw every acknowledged delayed
        message and committed transaction (unknown ones are resolved by checks), at most
        `settle_timeout_s`. The drain reads the queues afterwards either way."""
        t0 = trio.current_time()
        if "delay" in self.opts.kinds:
            await trio.sleep_until(max(t0, self.last_due + recovery_s))
        deadline = trio.current_time() + self.opts.settle_timeout_s

        def missing() -> dict[str, int]:
            return {k: len(self.expected[k] - self.seen[k]) for k in self.expected}

        while any(missing().values()) and trio.current_time() < deadline:
            await trio.sleep(0.25)
        return {"waited_s": round(trio.current_time() - t0, 3), "unseen": missing()}

    async def _orderly_consumer(self, proc: int, until: float) -> None:
        topic = self.opts.topics["ordered"]
        group = self.consumer_group + "-ordered"

        def listener(msgs: list[MessageExt], ctx: OrderlyContext) -> OrderlyStatus:
            inv = self.rec.invoke(proc, "poll", Value(topic=topic, group=group))
            self.rec.complete(
                inv, "ok", Value(topic=topic, group=group, messages=[to_read(m) for m in msgs])
            )
            return OrderlyStatus.SUCCESS

        try:
            async with PushConsumer(
                group,
                self.namesrv,
                {topic: "*"},
                listener,
                orderly=True,
                config=self._consumer_cfg(),
            ):
                await trio.sleep_until(until)
        except RmqHaError as e:
            self.stats.note(e)

    async def _admin(self, until: float) -> None:
        proc = self.admin_proc
        topic = next(iter(self.opts.topics.values()))
        next_meta = 0.0
        async with Admin(self.namesrv, config=self.client()) as admin:
            while trio.current_time() < until:
                await trio.sleep(self.opts.admin_interval_s)
                if self.db.controller_addrs() and trio.current_time() >= next_meta:
                    next_meta = trio.current_time() + self.opts.metadata_interval_s
                    proc = await self._metadata(proc)
                mqs = await self._route_queues(admin, topic)
                if not mqs:
                    continue
                mq = self.rng.choice(mqs)
                detail = self.rng.choice(["max", "min", "search"])
                inv = self.rec.invoke(
                    proc,
                    "offsets",
                    Value(topic=topic, queue_id=mq.queue_id, broker=mq.broker_name, detail=detail),
                )
                try:
                    with trio.fail_after(5):
                        if detail == "max":
                            off = await admin.max_offset(mq)
                        elif detail == "min":
                            off = await admin.min_offset(mq)
                        else:
                            ts = int(time.time() * 1000) - self.rng.randint(0, 30_000)
                            off = await admin.search_offset(mq, ts)
                except (RmqHaError, trio.TooSlowError, OSError) as e:
                    type_, definite = _outcome(e)
                    self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
                    if type_ == "info":
                        proc = self.pids.fresh()
                    continue
                self.rec.complete(
                    inv,
                    "ok",
                    Value(
                        topic=topic,
                        queue_id=mq.queue_id,
                        broker=mq.broker_name,
                        detail=detail,
                        offset=off,
                    ),
                )

    async def _route_queues(self, admin: Admin, topic: str) -> list[MessageQueue]:
        try:
            with trio.fail_after(5):
                route = await admin.route(topic)
        except (RmqHaError, trio.TooSlowError):
            return []
        return queues_of(route, topic)

    async def _metadata(self, proc: int) -> int:
        # The history's rules want the group on every metadata op, the invoke included: the
        # first group's invoke is recorded before the one request that asks about them all.
        groups = self.db.groups()
        inv = self.rec.invoke(
            proc, "metadata", Value(broker=groups[0], detail="controller replica info")
        )
        try:
            info = await self.view.replica_info()
        except (RmqHaError, trio.TooSlowError, OSError) as e:
            type_, definite = _outcome(e)
            self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
            return self.pids.fresh() if type_ == "info" else proc
        if not info:
            self.rec.complete(
                inv, "info", error=self.view.last_error or "no answer", definite=False
            )
            return self.pids.fresh()
        for i, group in enumerate(groups):
            if i:  # one invoke per group keeps the ops flat and typed
                inv = self.rec.invoke(proc, "metadata", Value(broker=group))
            if group not in info:
                self.rec.complete(inv, "fail", error="no replica info for the group")
                continue
            master, epoch = info[group]
            self.rec.complete(inv, "ok", Value(broker=group, master=master, epoch=epoch))
        return proc

    # ---- the drain ---------------------------------------------------------------------------

    async def drain(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Stops the background consumers, pops and acks what the pop workload left, then reads
        every queue of every topic from its minimum offset to its maximum."""
        self.stop_background()
        summary: dict[str, Any] = {"queues": 0, "messages": 0, "incomplete": []}
        if "pop" in self.opts.kinds:
            summary["pop"] = await self.pop_drain(timeout_s)
        proc = self.drain_proc
        group = f"rmqj-drain-{self.opts.run_id}"
        deadline = trio.current_time() + timeout_s
        async with PullConsumer(group, self.namesrv, config=self.client()) as pc:
            for topic in self.opts.topics.values():
                mqs: Sequence[MessageQueue] = []
                while not mqs and trio.current_time() < deadline:
                    try:
                        with trio.fail_after(5):
                            mqs = await pc.fetch_subscribe_queues(topic)
                    except (RmqHaError, trio.TooSlowError) as e:
                        self.stats.note(e)
                        await trio.sleep(0.5)
                for mq in mqs:
                    summary["queues"] += 1
                    done, n = await self._drain_queue(pc, mq, group, proc, deadline)
                    summary["messages"] += n
                    if not done:
                        summary["incomplete"].append(f"{mq.broker_name}/{topic}/{mq.queue_id}")
        return summary

    async def _bound(
        self, pc: PullConsumer, mq: MessageQueue, which: str, proc: int, deadline: float
    ) -> int | None:
        while trio.current_time() < deadline:
            inv = self.rec.invoke(
                proc,
                "offsets",
                Value(topic=mq.topic, queue_id=mq.queue_id, broker=mq.broker_name, detail=which),
            )
            try:
                with trio.fail_after(5):
                    off = await (pc.min_offset(mq) if which == "min" else pc.max_offset(mq))
            except (RmqHaError, trio.TooSlowError, OSError) as e:
                type_, definite = _outcome(e)
                self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
                await trio.sleep(0.5)
                continue
            self.rec.complete(
                inv,
                "ok",
                Value(
                    topic=mq.topic,
                    queue_id=mq.queue_id,
                    broker=mq.broker_name,
                    detail=which,
                    offset=off,
                ),
            )
            return off
        return None

    async def _drain_queue(
        self, pc: PullConsumer, mq: MessageQueue, group: str, proc: int, deadline: float
    ) -> tuple[bool, int]:
        lo = await self._bound(pc, mq, "min", proc, deadline)
        hi = await self._bound(pc, mq, "max", proc, deadline)
        if lo is None or hi is None:
            return False, 0
        off, n = lo, 0
        while off < hi:
            if trio.current_time() > deadline:
                return False, n
            inv = self.rec.invoke(
                proc,
                "drain",
                Value(topic=mq.topic, group=group, queue_id=mq.queue_id, broker=mq.broker_name),
            )
            try:
                with trio.fail_after(6):
                    r = await pc.pull(mq, "*", off, 32, timeout_s=5)
            except (RmqHaError, trio.TooSlowError, OSError) as e:
                type_, definite = _outcome(e)
                self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
                await trio.sleep(0.5)
                continue
            reads = [to_read(m) for m in r.messages]
            n += len(reads)
            self.rec.complete(
                inv,
                "ok",
                Value(
                    topic=mq.topic,
                    group=group,
                    queue_id=mq.queue_id,
                    broker=mq.broker_name,
                    messages=reads,
                    detail=r.status.value,
                ),
            )
            if r.status is PullStatus.FOUND:
                off = max(off + 1, r.next_begin_offset) if not reads else r.next_begin_offset
            elif r.status is PullStatus.OFFSET_ILLEGAL and r.next_begin_offset > off:
                off = r.next_begin_offset
            else:
                # Nothing more below the max we were told: the rest is not readable (yet).
                if r.max_offset <= off:
                    return off >= hi, n
                await trio.sleep(0.2)
        return True, n


def queues_of(route: Any, topic: str) -> list[MessageQueue]:
    out = []
    for qd in getattr(route, "queue_datas", []):
        for q in range(qd.read_queue_nums):
            out.append(MessageQueue(topic, qd.broker_name, q))
    return sorted(out)
