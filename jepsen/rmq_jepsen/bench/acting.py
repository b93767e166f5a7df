"""`rmq-ha bench acting-master [--json]`: how fast a slave takes over for a dead master in a
classic group with slave acting master (RIP-32, issue 8).

Setup (`ActingCluster`, real processes on loopback): a name server with supportActingMaster and
notifyMinBrokerIdChanged, group broker-a (SYNC_MASTER + SLAVE) and group broker-b (an ASYNC_MASTER,
where the acting slave escapes what its special services produce), messageDelayLevel
"1s 2s 3s". The unit, and the **baseline**, is brokerNotActiveTimeoutMillis: the takeover a
detector based on that heartbeat timeout must take. Every figure is printed with its ratio to it.

`--kills` times per mode — kill -9 the broker-a master (`kill`), and separately freeze it with
SIGSTOP (`stop`: a hung or partitioned master, no FIN, only the timeout reveals it):

1. traffic state on broker-a: messages to its four queues, consumer offsets committed, a queue
   lock held on the master; then three delayed messages (levels 1, 2 and 3: due 1, 2 and 3 s
   later, so during the outage);
2. the fault, and from its instant:
   (a) **route**: a client fetching the topic's route from the name server every
       `--probe-ms` sees broker-a's slave as id 0 with perm 4 (read-only);
   (b) **master-only operation**: a client resolving broker-a's master from that route
       (findBrokerAddressInPublish: id 0 only) gets SUCCESS from the slave for GET_MAX_OFFSET
       (equal to the master's last answer: every acknowledged message is there),
       SEARCH_OFFSET_BY_TIMESTAMP and LOCK_BATCH_MQ (the queues granted);
   (c) **delay lateness**: each delayed message's store time on broker-b (the acting slave
       escapes it there) minus its due time (the instant before it was sent + its level);
3. the master is restarted; the round ends when its pre-online is done, the slave has stopped
   acting, the route names both again (perm 6) and the slave replicates (TRANSFER).

Integrity, reported next to the figures: while the slave acts, the consumer group reads on
from it and commits there; after the hand-back the returned master's offsets must not be
lower (`consumer_offsets.queues_went_back`, RocketMQ #9711), and pulls the acting slave refused
are counted (`slave_pull_errors`). At the end every delayed message of the run is looked up on
both groups: each must be stored exactly once (`delayed.duplicates` / `delayed.missing`).
Each round starts `--settle-ms` (1 s) after the previous hand-back, so the slave's metadata
sync (syncBrokerMetadataPeriod, 500 ms here) has run; with 0 the master can die before it,
which breaks those integrity figures (see docs/PERF.md).

`--impl rmq_ha|rocketmq|both` picks the cluster: rmq_ha's (`bench.cluster.ActingCluster`), real
Apache RocketMQ 5.5.0 in the same classic topology (`bench.realrmq.RealActingGroup`: the same
settings under RocketMQ's own keys, each checked against its jars), or both one after the other
in one run, with the ratios RocketMQ / rmq_ha. Everything above is the same code for both
(`Bench`); only the cluster and how its state is asked differ (`ActingGroup`). What a cluster
does not do within the round's deadline is reported as not seen (`not_seen`), never as a figure.
Before the first round the slave must know the topic (GET_ALL_TOPIC_CONFIG), as any slave that
is to act for it must.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import trio
from rich.console import Console
from rich.progress import Progress

from rmq_ha.client import Admin, ClientConfig, Producer, ProducerConfig, PullConsumer
from rmq_ha.client.errors import ClientError
from rmq_ha.errors import RemotingError, RmqHaError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.models import MASTER_ID, MessageQueue, TopicRouteData
from rmq_jepsen.bench import machine, realrmq
from rmq_jepsen.bench.cluster import ActingCluster
from rmq_jepsen.launch import Proc

TOPIC = "BenchActing"
GROUP_A, GROUP_B = "broker-a", "broker-b"
CLUSTER = "ActingCluster"
QUEUES = 4
CONSUMER_GROUP = "bench-acting-g"
CLIENT_ID = "127.0.0.1@bench-acting"
DELAY_LEVELS = "1s 2s 3s"
LEVEL_S = {1: 1.0, 2: 2.0, 3: 3.0}
#: Issue 8: delayed messages due during the outage are late by at most one heartbeat timeout.
GOAL_LATENESS_X_TIMEOUT = 1.0
MODES = {"kill": "kill -9 the master", "stop": "SIGSTOP the master (no FIN)"}
IMPLS = ("rmq_ha", "rocketmq")
#: Ceiling for a cluster to settle (a master's pre-online, the route whole again, a restarted
#: process ready): real RocketMQ JVMs take tens of seconds to boot on a loaded 2-core machine.
SETTLE_S = {"rmq_ha": 60.0, "rocketmq": 180.0}
#: How long a slave may take to learn the topic before the first round (RocketMQ's classic
#: slave copies its master's topics every 60 s).
TOPIC_SYNC_S = 150.0


class ActingGroup(Protocol):
    """A cluster of classic groups with slave acting master (ActingCluster, RealActingGroup):
    what the bench drives and how it asks the cluster's state."""

    ns_addrs: list[str]
    members: list[tuple[str, int]]

    async def start(self) -> None: ...

    def stop(self) -> None: ...

    def logs(self) -> str: ...

    def addr(self, group: str, broker_id: int) -> str: ...

    def proc(self, group: str, broker_id: int) -> Proc: ...

    async def serving(self, group: str, broker_id: int) -> bool: ...

    async def acting(self, group: str, broker_id: int) -> bool | None: ...

    async def replicating(self, group: str, broker_id: int) -> bool: ...


def broker_settings(timeout_ms: int) -> dict[str, Any]:
    """The broker settings a run adds to FAST_ACTING (the same keys for both clusters)."""
    return {
        "brokerNotActiveTimeoutMillis": timeout_ms,
        "brokerHeartbeatInterval": max(100, timeout_ms // 10),
        "messageDelayLevel": DELAY_LEVELS,
    }


def key_value(text: str) -> tuple[str, str]:
    """--rocketmq-broker-conf KEY=VALUE."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE (a RocketMQ broker key)")
    return key.strip(), value.strip()


def make_cluster(impl: str, root: Path, args: argparse.Namespace) -> ActingGroup:
    broker = broker_settings(args.timeout_ms)
    if impl == "rmq_ha":
        return ActingCluster(root, broker=broker)
    if impl == "rocketmq":
        return realrmq.RealActingGroup(
            root,
            broker=broker | dict(getattr(args, "rocketmq_broker_conf", None) or {}),
            cluster_name=CLUSTER,
            sizes=realrmq.jvm_sizes(args),
            version=realrmq.rocketmq_version(args),
        )
    raise ValueError(f"--impl: {impl!r} is not one of {', '.join(IMPLS)}")


CC = ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.3)
PRODUCER = ProducerConfig(client=CC, send_msg_timeout_s=5.0, retry_times_when_send_failed=0)


def mq(group: str, qid: int) -> MessageQueue:
    return MessageQueue(topic=TOPIC, broker_name=group, queue_id=qid)


def summary(samples: list[float], unit_s: float) -> dict[str, Any]:
    """p50/p99/max in seconds and as multiples of `unit_s` (p99: inclusive percentile, so with
    fewer than 100 samples it lies between the two largest)."""
    if not samples:
        return {"n": 0}
    qs = (
        statistics.quantiles(samples, n=100, method="inclusive")
        if len(samples) > 1
        else samples * 99
    )
    p50, p99, mx = statistics.median(samples), qs[98], max(samples)
    return {
        "n": len(samples),
        "p50_s": p50,
        "p99_s": p99,
        "max_s": mx,
        "p50_x_timeout": p50 / unit_s,
        "p99_x_timeout": p99 / unit_s,
        "max_x_timeout": mx / unit_s,
        "samples_s": [round(s, 4) for s in samples],
    }


class NotHealthy(AssertionError):
    """A cluster did not reach a state the bench waits for (`what`) within its timeout."""

    def __init__(self, what: str, timeout_s: float, logs: str) -> None:
        super().__init__(f"timed out after {timeout_s} s waiting for {what}\n{logs}")
        self.what, self.timeout_s = what, timeout_s


class RoundAborted(Exception):
    """A round could not bring its cluster back (recorded; no further round can run)."""


async def wait_until(
    check: Callable[[], Awaitable[bool]], timeout_s: float, what: str, c: ActingGroup
) -> None:
    with trio.move_on_after(timeout_s):
        while True:
            if await check():
                return
            await trio.sleep(0.05)
    raise NotHealthy(what, timeout_s, c.logs())


async def route_a(admin: Admin) -> tuple[dict[int, str], int] | None:
    """broker-a's addresses and queue permission in the topic route (None: no answer)."""
    try:
        route = await admin.route(TOPIC)
    except (ClientError, RmqHaError, OSError):
        return None
    bd = next((b for b in route.broker_datas if b.broker_name == GROUP_A), None)
    qd = next((q for q in route.queue_datas if q.broker_name == GROUP_A), None)
    if bd is None or qd is None:
        return None
    return dict(bd.broker_addrs), qd.perm


def read_only_slave(route: TopicRouteData, slave: str) -> bool:
    """broker-a is served by `slave` alone, as id 0, with read-only queues (perm 4)."""
    bd = next((b for b in route.broker_datas if b.broker_name == GROUP_A), None)
    qd = next((q for q in route.queue_datas if q.broker_name == GROUP_A), None)
    return bd is not None and qd is not None and bd.broker_addrs == {0: slave} and qd.perm == 4


async def slave_knows_topic(addr: str, topic: str) -> bool:
    """The broker's GET_ALL_TOPIC_CONFIG lists `topic`."""
    async with RemotingClient() as rc:
        try:
            r = await rc.invoke(addr, RemotingCommand.request(RC.GET_ALL_TOPIC_CONFIG), 3.0)
        except (RemotingError, OSError):
            return False
    try:
        table = json.loads(r.body or b"{}").get("topicConfigTable") or {}
    except ValueError:
        return False
    return r.code == 0 and topic in table


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path, impl: str = "rmq_ha") -> None:
        self.args = args
        self.impl = impl
        self.timeout_s: float = args.timeout_ms / 1000
        self.settle_s = SETTLE_S[impl]
        self.c = make_cluster(impl, root, args)
        self.master = self.c.addr(GROUP_A, 0)
        self.slave = self.c.addr(GROUP_A, 1)
        #: body -> due time (wall clock, s) of every delayed message sent in the run.
        self.delayed: dict[str, float] = {}
        #: Queues (and rounds) where the returned master's consumer offset was below what
        #: was committed on the acting slave.
        #: Per round: the figures, queues whose consumer offset went back across the
        #: hand-back, and pulls the acting slave refused (it should serve every queue).
        self.rounds: list[dict[str, Any]] = []

    # ---- cluster state -------------------------------------------------------------------

    async def wait_healthy(self, admin: Admin) -> None:
        """Master online (pre-online done), slave not acting and replicating, route whole."""
        c, t = self.c, self.settle_s

        async def online() -> bool:
            return await c.serving(GROUP_A, 0)

        async def handed_back() -> bool:
            return await c.acting(GROUP_A, 1) is False

        async def transfer() -> bool:
            return await c.replicating(GROUP_A, 1)

        async def route_whole() -> bool:
            return await route_a(admin) == ({0: self.master, 1: self.slave}, 6)

        await wait_until(online, t, "the master's pre-online", c)
        await wait_until(handed_back, t, "the slave to stop acting", c)
        await wait_until(route_whole, t, "the route to name master and slave again", c)
        await wait_until(transfer, t, "the slave to replicate", c)

    async def start(self) -> None:
        c = self.c
        await c.start()
        for group, bid in c.members:

            async def online(group: str = group, bid: int = bid) -> bool:
                return await c.serving(group, bid)

            await wait_until(online, self.settle_s, f"{group}/{bid} online", c)
        async with Admin(c.ns_addrs[0], config=CC) as admin:

            async def masters() -> bool:
                try:
                    return set(await admin.master_addrs(CLUSTER)) == {GROUP_A, GROUP_B}
                except (ClientError, RmqHaError, OSError):
                    return False

            await wait_until(masters, 30, "both masters registered", c)
            await admin.create_topic(TOPIC, cluster=CLUSTER, queue_nums=QUEUES, wait_for_route_s=15)

            async def slave_has_topic() -> bool:
                return await slave_knows_topic(self.slave, TOPIC)

            await wait_until(slave_has_topic, TOPIC_SYNC_S, f"the slave to learn {TOPIC}", c)
            await self.wait_healthy(admin)

    # ---- one round -----------------------------------------------------------------------

    async def traffic(self, round_tag: str) -> dict[str, Any]:
        """Messages, committed offsets and a lock on broker-a; then delayed messages due
        during the outage. Returns what the probes compare against."""
        ns = self.c.ns_addrs[0]
        t_round_ms = int(time.time() * 1000)
        async with Producer("bench-acting-pg", ns, config=PRODUCER) as p:
            for i in range(4 * QUEUES):
                await p.send(TOPIC, f"{round_tag}-m{i}", queue=mq(GROUP_A, i % QUEUES))
        async with PullConsumer(CONSUMER_GROUP, ns, config=CC) as pc:
            for q in range(QUEUES):
                off = await pc.fetch_consume_offset(mq(GROUP_A, q)) or 0
                res = await pc.pull(mq(GROUP_A, q), "*", off, 2)
                pc.update_consume_offset(mq(GROUP_A, q), res.next_begin_offset)
            await pc.commit()
        async with Admin(ns, config=CC) as admin:
            api = admin.instance.api
            all_a = {mq(GROUP_A, q) for q in range(QUEUES)}
            locked = await api.lock_batch(self.master, CONSUMER_GROUP, CLIENT_ID, all_a, 3.0)
            assert locked == all_a, f"the master did not lock {all_a - locked}"
            max_q0 = await api.max_offset(self.master, mq(GROUP_A, 0))
            base_b = {q: await admin.max_offset(mq(GROUP_B, q)) for q in range(QUEUES)}
        due: dict[str, float] = {}
        async with Producer("bench-acting-pg", ns, config=PRODUCER) as p:
            for level in LEVEL_S:
                body = f"{round_tag}-delay{level}"
                t_before = time.time()
                await p.send(TOPIC, body, queue=mq(GROUP_A, 0), properties={"DELAY": str(level)})
                due[body] = t_before + LEVEL_S[level]
        self.delayed |= due
        return {"t_round_ms": t_round_ms, "max_q0": max_q0, "base_b": base_b, "due": due}

    async def probe(
        self, admin: Admin, state: dict[str, Any], t_fault: float, deadline_s: float
    ) -> tuple[float | None, float | None]:
        """(a) and (b), in seconds after the fault (None: not seen within `deadline_s`). Each
        probe refreshes the client's route from the name server, then resolves broker-a's
        master as a client does for these requests (findBrokerAddressInPublish: id 0 only, no
        fallback to a slave). An operation seen before the route counts for both."""
        seen: dict[str, float] = {}
        api, routes = admin.instance.api, admin.instance.routes
        all_a = {mq(GROUP_A, q) for q in range(QUEUES)}
        with trio.move_on_after(deadline_s):
            while "op" not in seen:
                try:
                    route = await routes.update(TOPIC)
                except (ClientError, RmqHaError, OSError):
                    route = None
                now = time.monotonic()
                if "route" not in seen and route is not None and read_only_slave(route, self.slave):
                    seen["route"] = now - t_fault
                addr = routes.find_broker_addr(GROUP_A, MASTER_ID, only_this_broker=True)
                if addr is not None and addr != self.master:
                    try:
                        m = await api.max_offset(addr, mq(GROUP_A, 0))
                        await api.search_offset(addr, mq(GROUP_A, 0), state["t_round_ms"])
                        got = await api.lock_batch(addr, CONSUMER_GROUP, CLIENT_ID, all_a, 1.0)
                        if m == state["max_q0"] and got == all_a:
                            seen["op"] = time.monotonic() - t_fault
                            seen.setdefault("route", seen["op"])
                            break
                    except (ClientError, RmqHaError, OSError):
                        pass
                await trio.sleep(self.args.probe_ms / 1000)
        return seen.get("route"), seen.get("op")

    async def delivered(self, state: dict[str, Any], deadline_s: float) -> dict[str, float]:
        """body -> store time on broker-b (wall clock, s) of this round's delayed messages."""
        want: dict[str, float] = state["due"]
        found: dict[str, float] = {}
        offs = dict(state["base_b"])
        async with PullConsumer("bench-acting-drain", self.c.ns_addrs[0], config=CC) as pc:
            with trio.move_on_after(deadline_s):
                while set(want) - set(found):
                    for q in range(QUEUES):
                        res = await pc.pull(mq(GROUP_B, q), "*", offs[q], 32)
                        for m in res.messages:
                            body = m.body.decode()
                            if body in want and body not in found:
                                found[body] = m.store_timestamp_ms / 1000
                        offs[q] = max(offs[q], res.next_begin_offset)
                    await trio.sleep(0.05)
        return found

    def probe_deadline_s(self) -> float:
        """How long after a fault (a) and (b) are waited for."""
        return 10 * self.timeout_s + 20

    def delivery_deadline_s(self) -> float:
        """How long, after (b) or its deadline, the round's delayed messages are waited for."""
        return max(LEVEL_S.values()) + 3 * self.timeout_s + 10

    async def one_round(self, mode: str, n: int, out: dict[str, list[float]]) -> None:
        c = self.c
        # A steady group: the slave has copied the master's metadata since the last change.
        await trio.sleep(self.args.settle_ms / 1000)
        state = await self.traffic(f"{mode}{n}")
        proc = c.proc(GROUP_A, 0)
        rec: dict[str, Any] = {"mode": mode, "n": n}
        async with Admin(c.ns_addrs[0], config=CC) as admin:
            await admin.route(TOPIC)
            t_fault = time.monotonic()
            if mode == "kill":
                proc.kill()
            else:
                proc.signal(signal.SIGSTOP)
            t_route, t_op = await self.probe(admin, state, t_fault, self.probe_deadline_s())
            if t_route is not None:
                out["route"].append(t_route)
            if t_op is not None:
                out["op"].append(t_op)
            committed, errors = await self.consume_on_slave()
            found = await self.delivered(state, self.delivery_deadline_s())
            missing = sorted(set(state["due"]) - set(found))
            # By level; a message not delivered in time has no lateness (counted apart).
            lateness = [found[b] - due if b in found else None for b, due in state["due"].items()]
            out["lateness"].extend(x for x in lateness if x is not None)
            rec |= {
                "route_s": None if t_route is None else round(t_route, 4),
                "op_s": None if t_op is None else round(t_op, 4),
                "lateness_s": [None if x is None else round(x, 4) for x in lateness],
                "not_delivered_in_time": missing,
                "hand_back_s": None,
                "offsets_went_back": None,
                "slave_pull_errors": errors,
            }
            # The master comes back (a frozen one is killed first).
            proc.kill()
            t_restart = time.monotonic()
            proc.start()
            try:
                await proc.wait_ready(self.settle_s)
                await self.wait_healthy(admin)
            except NotHealthy as e:
                rec["not_handed_back"] = f"{e.what} not seen within {e.timeout_s:.0f} s"
                self.rounds.append(rec)
                raise RoundAborted(rec["not_handed_back"]) from e
            out["handback"].append(time.monotonic() - t_restart)
        rec["hand_back_s"] = round(out["handback"][-1], 4)
        rec["offsets_went_back"] = await self.offsets_went_back(committed)
        self.rounds.append(rec)

    async def consume_on_slave(self) -> tuple[dict[int, int], list[str]]:
        """While the slave acts: the consumer group reads on from it and commits there.
        Returns the committed offsets and the pulls the slave refused."""
        out: dict[int, int] = {}
        errors: list[str] = []
        async with PullConsumer(CONSUMER_GROUP, self.c.ns_addrs[0], config=CC) as pc:
            for q in range(QUEUES):
                try:
                    off = await pc.fetch_consume_offset(mq(GROUP_A, q)) or 0
                    res = await pc.pull(mq(GROUP_A, q), "*", off, 2)
                except (ClientError, RmqHaError, OSError) as e:
                    errors.append(f"q{q}: {e}")
                    continue
                pc.update_consume_offset(mq(GROUP_A, q), res.next_begin_offset)
                out[q] = res.next_begin_offset
            await pc.commit()
        return out, errors

    async def offsets_went_back(self, committed: dict[int, int]) -> int:
        """Queues whose offset, read from the returned master, is below what the group
        committed on the acting slave (pre-online must pull those back, RocketMQ #9711)."""
        back = 0
        async with PullConsumer(CONSUMER_GROUP, self.c.ns_addrs[0], config=CC) as pc:
            for q, off in committed.items():
                now = await pc.fetch_consume_offset(mq(GROUP_A, q))
                back += 1 if now is None or now < off else 0
        return back

    async def count_delayed(self) -> dict[str, Any]:
        """How many times each delayed message of the run is stored on either group."""
        counts = dict.fromkeys(self.delayed, 0)
        ns = self.c.ns_addrs[0]
        async with Admin(ns, config=CC) as admin, PullConsumer("bench-cnt", ns, config=CC) as pc:
            for group in (GROUP_A, GROUP_B):
                for q in range(QUEUES):
                    m = mq(group, q)
                    off, hi = await admin.min_offset(m), await admin.max_offset(m)
                    while off < hi:
                        res = await pc.pull(m, "*", off, 32)
                        for msg in res.messages:
                            body = msg.body.decode()
                            if body in counts:
                                counts[body] += 1
                        if res.next_begin_offset <= off:
                            break
                        off = res.next_begin_offset
        return {
            "sent": len(counts),
            "delivered_once": sum(1 for v in counts.values() if v == 1),
            "duplicates": sum(v - 1 for v in counts.values() if v > 1),
            "missing": sum(1 for v in counts.values() if v == 0),
            "copies_not_1": {k: v for k, v in sorted(counts.items()) if v != 1},
        }


def _mode_result(b: Bench, mode: str, samples: dict[str, list[float]]) -> dict[str, Any]:
    unit = b.timeout_s
    rounds = [r for r in b.rounds if r["mode"] == mode]
    late = summary(samples["lateness"], unit)
    not_delivered = sum(len(r["not_delivered_in_time"]) for r in rounds)
    return {
        "fault": MODES[mode],
        "kills": len(rounds),
        "route_read_only": summary(samples["route"], unit),
        "master_only_op": summary(samples["op"], unit),
        "delay_lateness": late,
        # Per level (due 1, 2, 3 s after the fault): the early ones wait for takeover.
        "delay_lateness_by_level": {
            str(level): summary([x for r in rounds if (x := r["lateness_s"][i]) is not None], unit)
            for i, level in enumerate(LEVEL_S)
        },
        # What did not happen within the round's deadlines: never a figure.
        "not_seen": {
            "route_read_only": sum(1 for r in rounds if r["route_s"] is None),
            "master_only_op": sum(1 for r in rounds if r["op_s"] is None),
            "delayed_not_delivered": not_delivered,
            "hand_back": sum(1 for r in rounds if r["hand_back_s"] is None),
            "probe_deadline_s": b.probe_deadline_s(),
            "delivery_deadline_s": b.delivery_deadline_s(),
        },
        "lateness_goal_met": not_delivered == 0
        and late.get("max_x_timeout", float("inf")) <= GOAL_LATENESS_X_TIMEOUT,
        "hand_back": summary(samples["handback"], unit),
    }


async def run_bench(
    args: argparse.Namespace, root: Path, progress: Progress, impl: str = "rmq_ha"
) -> dict[str, Any]:
    b = Bench(args, root, impl)
    modes = list(MODES) if args.mode == "both" else [args.mode]
    out: dict[str, Any] = {
        "benchmark": "acting-master",
        "impl": impl,
        "machine": machine(),
        "broker_not_active_timeout_ms": args.timeout_ms,
        "baseline": (
            "brokerNotActiveTimeoutMillis: the takeover a detector based on the broker "
            "heartbeat timeout must take; every x_timeout figure is figure / baseline"
        ),
        "settings": {
            "broker_heartbeat_interval_ms": max(100, args.timeout_ms // 10),
            "namesrv_scan_not_active_broker_interval_ms": 200,
            "sync_broker_member_group_period_ms": 200,
            "probe_interval_ms": args.probe_ms,
            "settle_ms": args.settle_ms,
            "message_delay_level": DELAY_LEVELS,
            "delayed_per_round": len(LEVEL_S),
        },
        "goal_lateness_x_timeout": GOAL_LATENESS_X_TIMEOUT,
        "modes": {},
    }
    setup = progress.add_task(f"starting the cluster ({impl})", total=None)
    try:
        t0 = time.monotonic()
        await b.start()
        out["start_s"] = round(time.monotonic() - t0, 2)
        progress.remove_task(setup)
        for mode in modes:
            task = progress.add_task(f"{MODES[mode]} ({impl})", total=args.kills)
            samples: dict[str, list[float]] = {
                "route": [],
                "op": [],
                "lateness": [],
                "handback": [],
            }
            try:
                for n in range(args.kills):
                    await b.one_round(mode, n, samples)
                    progress.advance(task)
            except RoundAborted as e:
                # The cluster did not come back: what was measured stands, nothing more runs.
                out["aborted"] = {"mode": mode, "n": len(samples["handback"]), "reason": str(e)}
            out["modes"][mode] = _mode_result(b, mode, samples)
            if "aborted" in out:
                break
        if "aborted" in out:
            out["delayed"] = {"not_counted": "the run was aborted (see aborted)"}
        else:
            out["delayed"] = await b.count_delayed()
        rounds = [r for r in b.rounds if r["offsets_went_back"] is not None]
        out["consumer_offsets"] = {
            "rounds": len(rounds),
            "queues_checked": len(rounds) * QUEUES,
            "queues_went_back": sum(r["offsets_went_back"] for r in rounds),
            "rounds_went_back": sum(1 for r in rounds if r["offsets_went_back"]),
        }
        out["slave_pull_errors"] = sum(len(r["slave_pull_errors"]) for r in rounds)
        out["rounds"] = rounds
    except BaseException:
        progress.console.print(b.c.logs())
        raise
    finally:
        b.c.stop()
    return out


#: The figures compared across implementations (per mode), and their summaries' keys.
RATIO_FIGURES = ("route_read_only", "master_only_op", "delay_lateness", "hand_back")


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float | None]:
    """RocketMQ's figure / rmq_ha's for each mode and figure both have samples of (> 1:
    RocketMQ took longer). None where rmq_ha's figure is 0 or either has no sample (a figure
    that was not seen has no ratio: see `not_seen`)."""
    out: dict[str, float | None] = {}
    for mode, a in ours["modes"].items():
        b = theirs["modes"].get(mode)
        if b is None:
            continue
        for fig in RATIO_FIGURES:
            for k in ("p50_s", "max_s"):
                x, y = a[fig].get(k), b[fig].get(k)
                out[f"{mode}_{fig}_{k}"] = y / x if x and y is not None else None
    return out


def run(args: argparse.Namespace) -> int:
    if args.kills < 1:
        raise SystemExit("--kills must be at least 1")
    console = Console(stderr=True)
    try:
        impls = realrmq.impls_of(args.impl, "acting-master")
    except realrmq.NeedsCheckout as e:
        console.print(str(e))
        return 2
    if args.keep_dir is not None:
        args.keep_dir.mkdir(parents=True, exist_ok=True)
    root = args.keep_dir or Path(tempfile.mkdtemp(prefix="rmq-ha-bench-acting-"))
    try:
        with Progress(console=console, transient=True) as progress:

            async def main() -> dict[str, Any]:
                got = {i: await run_bench(args, root / i, progress, i) for i in impls}
                if len(impls) == 1:
                    return got[impls[0]]
                return {
                    "benchmark": "acting-master",
                    "machine": machine(),
                    "impls": impls,
                    **got,
                    "ratios": ratios(got["rmq_ha"], got["rocketmq"]),
                }

            result = trio.run(main)
    finally:
        if args.keep_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


def _fmt(s: dict[str, Any], key: str) -> str:
    return f"{s[key + '_s']:6.3f} s ({s[key + '_x_timeout']:.2f}x)"


def _print(r: dict[str, Any]) -> None:
    if "impls" in r:
        for impl in r["impls"]:
            print(f"== {impl}")
            _print_one(r[impl])
        print("\n== RocketMQ / rmq_ha (> 1: RocketMQ took longer; - : no ratio, see not seen)")
        for k, v in r["ratios"].items():
            print(f"  {k:40s} {'-' if v is None else f'{v:7.2f}'}")
        return
    _print_one(r)


def _print_one(r: dict[str, Any]) -> None:
    t = r["broker_not_active_timeout_ms"]
    print(f"baseline: brokerNotActiveTimeoutMillis = {t} ms (x = figure / baseline)")
    rows = (
        ("route shows slave as read-only id 0", "route_read_only"),
        ("first master-only op on the slave", "master_only_op"),
        ("delayed message lateness", "delay_lateness"),
        ("restart -> slave stops acting", "hand_back"),
    )
    for m in r["modes"].values():
        print(f"\n{m['fault']}, {m['kills']} times:")
        for label, key in rows:
            s = m[key]
            if not s["n"]:
                print(f"  {label:38s} never seen")
                continue
            print(f"  {label:38s} p50 {_fmt(s, 'p50')}  p99 {_fmt(s, 'p99')}  max {_fmt(s, 'max')}")
        for level, s in m.get("delay_lateness_by_level", {}).items():
            if s["n"]:
                print(
                    f"    level {level} (due {level} s after the fault)"
                    f"{'':12s}p50 {_fmt(s, 'p50')}  max {_fmt(s, 'max')}"
                )
        ns = m.get("not_seen") or {}
        if ns.get("route_read_only") or ns.get("master_only_op"):
            print(
                f"  not seen within {ns['probe_deadline_s']:.0f} s of the fault: route in "
                f"{ns['route_read_only']} rounds, master-only op in {ns['master_only_op']} rounds"
            )
        if ns.get("delayed_not_delivered"):
            print(
                f"  delayed messages not delivered via {GROUP_B} within "
                f"{ns['delivery_deadline_s']:.0f} s: {ns['delayed_not_delivered']}"
            )
        verdict = "met" if m["lateness_goal_met"] else "NOT met"
        print(f"  goal: lateness max <= {r['goal_lateness_x_timeout']}x the timeout: {verdict}")
    if r.get("aborted"):
        a = r["aborted"]
        print(f"\nABORTED in {a['mode']} round {a['n']}: {a['reason']} (no further round ran)")
    d = r["delayed"]
    if "not_counted" in d:
        print(f"\ndelayed messages: not counted ({d['not_counted']})")
    else:
        print(
            f"\ndelayed messages: {d['sent']} sent, {d['delivered_once']} stored exactly once, "
            f"{d['duplicates']} duplicates, {d['missing']} missing"
        )
    o = r["consumer_offsets"]
    print(
        f"consumer offsets committed on the acting slave, read back from the returned master: "
        f"{o['queues_went_back']} of {o['queues_checked']} queues went back "
        f"({o['rounds_went_back']} of {o['rounds']} rounds); pulls the acting slave refused: "
        f"{r['slave_pull_errors']}"
    )


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "acting-master", help="slave-acting-master takeover after a master kill or freeze"
    )
    p.add_argument("--kills", type=int, default=20, help="faults per mode")
    p.add_argument("--mode", choices=["kill", "stop", "both"], default="both")
    p.add_argument(
        "--timeout-ms",
        type=int,
        default=2000,
        help="brokerNotActiveTimeoutMillis (the unit and the baseline)",
    )
    p.add_argument("--probe-ms", type=int, default=20, help="route/operation probe interval")
    p.add_argument(
        "--settle-ms",
        type=int,
        default=1000,
        help="wait before each round's traffic, so the slave's metadata sync (every 500 ms) has "
        "run since the last start or hand-back (0: the kill may come before it)",
    )
    p.add_argument(
        "--impl",
        choices=[*IMPLS, "both"],
        default="rmq_ha",
        help="what to measure: rmq_ha, real RocketMQ 5.5.0 (the same classic topology), or "
        "both in one run",
    )
    realrmq.add_jvm_flags(p)
    p.add_argument(
        "--rocketmq-broker-conf",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RocketMQ broker setting on top of the bench's (repeatable; the key is checked "
        "against RocketMQ's config classes), e.g. slaveReadEnable=false",
    )
    p.add_argument(
        "--keep-dir",
        type=Path,
        default=None,
        help="run the clusters in this directory and keep it (configs, logs, stores; "
        "RocketMQ's own logs under <dir>/rocketmq/home/logs); default: a temporary one, deleted",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
