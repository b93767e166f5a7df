"""`rmq-ha bench acting-master [--json]`: how fast a slave takes over for a dead master in a
classic group with slave acting master (RIP-32, issue 8).

Setup (`ActingCluster`, real processes on loopback): a name server with supportActingMaster and
notifyMinBrokerIdChanged, group broker-a (SYNC_MASTER + SLAVE) and group broker-b (a master,
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
from typing import Any

import trio
from rich.console import Console
from rich.progress import Progress

from rmq_ha.client import Admin, ClientConfig, Producer, ProducerConfig, PullConsumer
from rmq_ha.client.errors import ClientError
from rmq_ha.errors import RmqHaError
from rmq_ha.protocol.models import MASTER_ID, MessageQueue, TopicRouteData
from rmq_jepsen.bench import machine
from rmq_jepsen.bench.cluster import ActingCluster

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


async def wait_until(
    check: Callable[[], Awaitable[bool]], timeout_s: float, what: str, c: ActingCluster
) -> None:
    with trio.move_on_after(timeout_s):
        while True:
            if await check():
                return
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{c.logs()}")


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


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.timeout_s = args.timeout_ms / 1000
        broker = {
            "brokerNotActiveTimeoutMillis": args.timeout_ms,
            "brokerHeartbeatInterval": max(100, args.timeout_ms // 10),
            "messageDelayLevel": DELAY_LEVELS,
        }
        self.c = ActingCluster(root, broker=broker)
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

    async def status_is(self, bid: int, pred: Callable[[dict[str, Any]], bool]) -> bool:
        st = await self.c.status(GROUP_A, bid)
        return st is not None and pred(st)

    async def wait_healthy(self, admin: Admin) -> None:
        """Master online (pre-online done), slave not acting and replicating, route whole."""
        c = self.c

        async def online() -> bool:
            return await self.status_is(0, lambda s: not s["isolated"])

        async def handed_back() -> bool:
            return await self.status_is(1, lambda s: not s["actingMaster"])

        async def transfer() -> bool:
            return await self.status_is(1, lambda s: s["slaveState"] == "TRANSFER")

        async def route_whole() -> bool:
            return await route_a(admin) == ({0: self.master, 1: self.slave}, 6)

        await wait_until(online, 60, "the master's pre-online", c)
        await wait_until(handed_back, 30, "the slave to stop acting", c)
        await wait_until(route_whole, 30, "the route to name master and slave again", c)
        await wait_until(transfer, 30, "the slave to replicate", c)

    async def start(self) -> None:
        c = self.c
        await c.start()
        for group, bid in c.members:

            async def online(group: str = group, bid: int = bid) -> bool:
                st = await c.status(group, bid)
                return st is not None and not st["isolated"]

            await wait_until(online, 60, f"{group}/{bid} online", c)
        async with Admin(c.ns_addrs[0], config=CC) as admin:

            async def masters() -> bool:
                try:
                    return set(await admin.master_addrs(CLUSTER)) == {GROUP_A, GROUP_B}
                except (ClientError, RmqHaError, OSError):
                    return False

            await wait_until(masters, 30, "both masters registered", c)
            await admin.create_topic(TOPIC, cluster=CLUSTER, queue_nums=QUEUES, wait_for_route_s=15)
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
        self, admin: Admin, state: dict[str, Any], t_fault: float
    ) -> tuple[float, float]:
        """(a) and (b), in seconds after the fault. Each probe refreshes the client's route
        from the name server, then resolves broker-a's master as a client does for these
        requests (findBrokerAddressInPublish: id 0 only, no fallback to a slave)."""
        t_route: float | None = None
        api, routes = admin.instance.api, admin.instance.routes
        all_a = {mq(GROUP_A, q) for q in range(QUEUES)}
        while True:
            route = await routes.update(TOPIC)
            now = time.monotonic()
            if t_route is None and route is not None and read_only_slave(route, self.slave):
                t_route = now - t_fault
            addr = routes.find_broker_addr(GROUP_A, MASTER_ID, only_this_broker=True)
            if addr is not None and addr != self.master:
                try:
                    m = await api.max_offset(addr, mq(GROUP_A, 0))
                    await api.search_offset(addr, mq(GROUP_A, 0), state["t_round_ms"])
                    got = await api.lock_batch(addr, CONSUMER_GROUP, CLIENT_ID, all_a, 1.0)
                    if m == state["max_q0"] and got == all_a:
                        t_op = time.monotonic() - t_fault
                        return (t_route if t_route is not None else t_op), t_op
                except (ClientError, RmqHaError, OSError):
                    pass
            await trio.sleep(self.args.probe_ms / 1000)

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
            with trio.fail_after(10 * self.timeout_s + 20):
                t_route, t_op = await self.probe(admin, state, t_fault)
            out["route"].append(t_route)
            out["op"].append(t_op)
            committed, errors = await self.consume_on_slave()
            deadline = max(LEVEL_S.values()) + 3 * self.timeout_s + 10
            found = await self.delivered(state, deadline)
            missing = set(state["due"]) - set(found)
            assert not missing, (
                f"delayed messages not delivered via {GROUP_B}: {missing}\n{c.logs()}"
            )
            lateness = [found[body] - due for body, due in state["due"].items()]  # by level
            out["lateness"].extend(lateness)
            # The master comes back (a frozen one is killed first).
            proc.kill()
            t_restart = time.monotonic()
            proc.start()
            await proc.wait_ready()
            await self.wait_healthy(admin)
            out["handback"].append(time.monotonic() - t_restart)
        back = await self.offsets_went_back(committed)
        rec |= {
            "route_s": round(t_route, 4),
            "op_s": round(t_op, 4),
            "lateness_s": [round(x, 4) for x in lateness],
            "hand_back_s": round(out["handback"][-1], 4),
            "offsets_went_back": back,
            "slave_pull_errors": errors,
        }
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


async def run_bench(args: argparse.Namespace, root: Path, progress: Progress) -> dict[str, Any]:
    b = Bench(args, root)
    unit = b.timeout_s
    modes = list(MODES) if args.mode == "both" else [args.mode]
    out: dict[str, Any] = {
        "benchmark": "acting-master",
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
    setup = progress.add_task("starting the cluster", total=None)
    try:
        await b.start()
        progress.remove_task(setup)
        for mode in modes:
            task = progress.add_task(f"{MODES[mode]}", total=args.kills)
            samples: dict[str, list[float]] = {
                "route": [],
                "op": [],
                "lateness": [],
                "handback": [],
            }
            for n in range(args.kills):
                await b.one_round(mode, n, samples)
                progress.advance(task)
            late = summary(samples["lateness"], unit)
            out["modes"][mode] = {
                "fault": MODES[mode],
                "kills": args.kills,
                "route_read_only": summary(samples["route"], unit),
                "master_only_op": summary(samples["op"], unit),
                "delay_lateness": late,
                # Per level (due 1, 2, 3 s after the fault): the early ones wait for takeover.
                "delay_lateness_by_level": {
                    str(level): summary(
                        [r["lateness_s"][i] for r in b.rounds if r["mode"] == mode], unit
                    )
                    for i, level in enumerate(LEVEL_S)
                },
                "lateness_goal_met": late["max_x_timeout"] <= GOAL_LATENESS_X_TIMEOUT,
                "hand_back": summary(samples["handback"], unit),
            }
        out["delayed"] = await b.count_delayed()
        rounds = b.rounds
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


def run(args: argparse.Namespace) -> int:
    if args.kills < 1:
        raise SystemExit("--kills must be at least 1")
    console = Console(stderr=True)
    root = Path(tempfile.mkdtemp(prefix="rmq-ha-bench-acting-"))
    try:
        with Progress(console=console, transient=True) as progress:
            result = trio.run(run_bench, args, root, progress)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


def _print(r: dict[str, Any]) -> None:
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
            print(
                f"  {label:38s} p50 {s['p50_s']:6.3f} s ({s['p50_x_timeout']:.2f}x)  "
                f"p99 {s['p99_s']:6.3f} s ({s['p99_x_timeout']:.2f}x)  "
                f"max {s['max_s']:6.3f} s ({s['max_x_timeout']:.2f}x)"
            )
        for level, s in m.get("delay_lateness_by_level", {}).items():
            print(
                f"    level {level} (due {level} s after the fault)"
                f"{'':12s}p50 {s['p50_s']:6.3f} s ({s['p50_x_timeout']:.2f}x)  "
                f"max {s['max_s']:6.3f} s ({s['max_x_timeout']:.2f}x)"
            )
        verdict = "met" if m["lateness_goal_met"] else "NOT met"
        print(f"  goal: lateness max <= {r['goal_lateness_x_timeout']}x the timeout: {verdict}")
    d = r["delayed"]
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
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
