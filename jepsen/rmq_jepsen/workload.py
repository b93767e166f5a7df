"""Workloads through `rmq_ha.client`, recording every operation.

* `queue`    unique integer values, synchronous sends from `concurrency` workers, lite-pull
             consumers in one group (each poll is a `poll` op);
* `ordered`  one producer per key (keys k0.. split among the workers, OpenChaos-style), sends
             through a hash selector, orderly push consumers holding queue locks;
* `admin`    max / min / search-by-time offsets of random queues during the faults, and the
             controller's view of each group's master and epoch (`metadata`).

Outcomes: a returned SendResult is `ok` and keeps its status (a non-OK status stays visible);
an error with `definite` is `fail`, anything else (timeouts, lost connections) is `info`, and
after an `info` the worker continues under a fresh process id (Jepsen's crashed process).

Each run ends with `drain`: fresh pull consumers read every queue from its minimum offset to
its maximum, so the checker can tell "lost" from "slow".
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from rmq_ha.client import (
    Admin,
    ClientConfig,
    ConsumeFrom,
    ConsumerConfig,
    LitePullConsumer,
    MessageExt,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
    Producer,
    ProducerConfig,
    PullConsumer,
    PullStatus,
    PushConsumer,
    select_by_hash,
)
from rmq_ha.errors import RmqHaError
from rmq_ha.history import Read, Value
from rmq_jepsen import generator as gen
from rmq_jepsen.db import CLUSTER, DB, ClusterView
from rmq_jepsen.recorder import Recorder

log = logging.getLogger("rmq_jepsen.workload")

WORKLOADS = ("queue", "ordered", "admin")


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

    @property
    def topics(self) -> dict[str, str]:
        out = {}
        if "queue" in self.kinds or self.kinds == ("admin",):
            out["queue"] = "RmqJepsenQueue"
        if "ordered" in self.kinds:
            out["ordered"] = "RmqJepsenOrdered"
        return out


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
        # Process ids: producers first, then consumers, admin, drain; fresh ids after those.
        c = opts.concurrency
        self.consumer_procs = list(range(c, c + 2 * opts.consumers))
        self.admin_proc = c + 2 * opts.consumers
        self.drain_proc = self.admin_proc + 1
        self.pids = gen.ProcessIds(self.drain_proc + 1)
        self.bucket = gen.TokenBucket(opts.rate, burst=max(1.0, opts.concurrency))
        self.producer_group = f"rmqj-p-{opts.run_id}"
        self.consumer_group = f"rmqj-c-{opts.run_id}"

    def client(self) -> ClientConfig:
        return ClientConfig(
            client_ip=self.opts.client_ip,
            mq_client_api_timeout_s=3.0,
            poll_name_server_interval_s=2.0,
            heartbeat_broker_interval_s=2.0,
        )

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
                            cluster=CLUSTER,
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

    async def run(self, until: float) -> None:
        """Runs every workload until trio time `until`, then stops the clients."""
        async with trio.open_nursery() as nursery:
            topics = self.opts.topics
            if "queue" in topics:
                for i in range(self.opts.consumers):
                    nursery.start_soon(self._lite_consumer, self.consumer_procs[i], until)
            if "ordered" in topics:
                for i in range(self.opts.consumers):
                    nursery.start_soon(
                        self._orderly_consumer, self.consumer_procs[self.opts.consumers + i], until
                    )
            owners = gen.key_owners(self.opts.concurrency)
            for w in range(self.opts.concurrency):
                if "queue" in self.opts.kinds and "ordered" in self.opts.kinds:
                    kind = "ordered" if w % 2 else "queue"
                elif "ordered" in self.opts.kinds:
                    kind = "ordered"
                else:
                    kind = "queue"
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
                v = next(self.values)
                key = self.rng.choice(keys) if kind == "ordered" else None
                inv = self.rec.invoke(proc, "send", Value(topic=topic, value=v, key=key))
                try:
                    with trio.fail_after(self.opts.send_timeout_s + 2):
                        if key is not None:
                            r = await p.send(
                                topic, str(v), keys=key, selector=select_by_hash, arg=key
                            )
                        else:
                            r = await p.send(topic, str(v))
                except (RmqHaError, trio.TooSlowError, OSError) as e:
                    self.stats.note(e)
                    type_, definite = _outcome(e)
                    self.rec.complete(inv, type_, error=repr(e)[:500], definite=definite)
                    if type_ == "info":
                        proc = self.pids.fresh()
                    continue
                self.rec.complete(
                    inv,
                    "ok",
                    Value(
                        topic=topic,
                        value=v,
                        key=key,
                        queue_id=r.queue.queue_id,
                        queue_offset=r.queue_offset,
                        broker=r.queue.broker_name,
                        status=r.status.value,
                    ),
                )

    def _consumer_cfg(self) -> ConsumerConfig:
        return ConsumerConfig(
            client=self.client(),
            consume_from=ConsumeFrom.FIRST_OFFSET,
            rebalance_interval_s=2.0,
            pull_time_delay_when_exception_s=0.5,
        )

    async def _lite_consumer(self, proc: int, until: float) -> None:
        topic = self.opts.topics["queue"]
        group = self.consumer_group
        try:
            async with LitePullConsumer(
                group, self.namesrv, {topic: "*"}, config=self._consumer_cfg()
            ) as c:
                while trio.current_time() < until:
                    inv = self.rec.invoke(proc, "poll", Value(topic=topic, group=group))
                    try:
                        msgs = await c.poll(timeout_s=1.0)
                    except RmqHaError as e:
                        self.stats.note(e)
                        type_, definite = _outcome(e)
                        self.rec.complete(inv, type_, error=repr(e)[:300], definite=definite)
                        await trio.sleep(0.2)
                        continue
                    self.rec.complete(
                        inv,
                        "ok",
                        Value(topic=topic, group=group, messages=[to_read(m) for m in msgs]),
                    )
        except RmqHaError as e:  # start or shutdown failed (cluster unreachable)
            self.stats.note(e)

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
        inv = self.rec.invoke(proc, "metadata", Value(detail="controller replica info"))
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
        first = True
        for group, (master, epoch) in sorted(info.items()):
            if not first:  # one invoke per group keeps the ops flat and typed
                inv = self.rec.invoke(proc, "metadata", Value(broker=group))
            first = False
            self.rec.complete(inv, "ok", Value(broker=group, master=master, epoch=epoch))
        return proc

    # ---- the drain ---------------------------------------------------------------------------

    async def drain(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Reads every queue of every topic from its minimum offset to its maximum."""
        proc = self.drain_proc
        group = f"rmqj-drain-{self.opts.run_id}"
        deadline = trio.current_time() + timeout_s
        summary: dict[str, Any] = {"queues": 0, "messages": 0, "incomplete": []}
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
