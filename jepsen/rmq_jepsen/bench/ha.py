"""`rmq-ha bench ha [--json]`: what replication costs and how fast a group fails over.

(a) **Replication cost.** The same load — the Python client, `--concurrency` tasks sending
    `--size`-byte messages synchronously for `--seconds` — against a single broker (no
    replication) and then against a controller-mode group of three replicas with
    allAckInSyncStateSet=true, in one run. Figures: msgs/s and p99 send latency of each; the
    ratio is replicated msgs/s / single msgs/s (goal >= 0.7).
(b) **Failover.** `--kills` times each: kill -9 the master, and separately freeze it with
    SIGSTOP (a hung or partitioned master: its connections stay open, so only the heartbeat
    timeout reveals it), while a producer sends continuously; the time from the fault to the
    first send acknowledged (SEND_OK) by another replica; then the old master is restarted
    and the group waits for a full SyncStateSet before the next fault. p50/p99 as multiples
    of controllerHeartBeatTimeoutMills (goal p99 <= 1.5).

`--impl rmq_ha|rocketmq|both` picks what is measured: rmq_ha (`bench.cluster.HaCluster`), real
Apache RocketMQ 5.5.0 in controller mode (`bench.realrmq.RealControllerGroup`: 3 name servers
with embedded controllers, 3 brokers, allAckInSyncStateSet; its single broker is
`realrmq.start_real`), or both in the same run with the same settings under RocketMQ's own key
names, with the ratios RocketMQ / rmq_ha. The master and SyncStateSet are found by asking each
cluster (rmq_ha: the brokers; RocketMQ: the controller leader).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import trio
from rich.console import Console
from rich.progress import Progress

from rmq_ha.client import ClientConfig, Producer, ProducerConfig
from rmq_ha.client.errors import ClientError
from rmq_jepsen.bench import LatencyHistogram, machine, produce, realrmq
from rmq_jepsen.bench.cluster import HaCluster
from rmq_jepsen.launch import Proc

TOPIC = "BenchHA"
GOAL_RATIO = 0.7
GOAL_FAILOVER = 1.5
IMPLS = ("rmq_ha", "rocketmq")
#: Ceiling for a group to settle (a full SyncStateSet, a restarted JVM ready): real RocketMQ
#: groups take ~45 s to come up on a loaded 2-core machine.
SETTLE_S = 180.0


class Group(Protocol):
    """A replicated group either implementation provides (HaCluster, RealControllerGroup)."""

    ns_addrs: list[str]
    brokers: list[Proc]

    async def start(self) -> None: ...

    def stop(self) -> None: ...

    async def master(self, timeout_s: float = 20, exclude: int | None = None) -> int: ...

    async def wait_sync_state_set(self, i: int, size: int, timeout_s: float = 20) -> Any: ...

    async def sync_state_size(self, i: int) -> int | None: ...

    def broker_addr(self, i: int) -> str: ...


def _group(impl: str, root: Path, args: argparse.Namespace) -> Group:
    """Three replicas in controller mode with allAckInSyncStateSet, the bench's timings."""
    if impl == "rmq_ha":
        return HaCluster(root, replicas=3, broker=_broker_overrides(args))
    return realrmq.RealControllerGroup(
        root,
        replicas=3,
        broker=_broker_overrides(args),
        sizes=realrmq.jvm_sizes(args),
        version=realrmq.rocketmq_version(args),
    )


def _producer(namesrv: str, timeout_s: float) -> Producer:
    cfg = ProducerConfig(
        client=ClientConfig(client_ip="127.0.0.1", poll_name_server_interval_s=0.2),
        send_msg_timeout_s=timeout_s,
        retry_times_when_send_failed=0,
        send_latency_fault_enable=False,
    )
    return Producer("bench-ha", namesrv, config=cfg)


async def load(namesrv: str, *, seconds: float, concurrency: int, size: int) -> dict[str, Any]:
    body = b"x" * size
    hist = LatencyHistogram()
    sent = errors = 0
    async with _producer(namesrv, 5.0) as p:
        for _ in range(50):  # warm-up: routes, connections, topic creation
            await p.send(TOPIC, body)
        end = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal sent, errors
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    r = await p.send(TOPIC, body)
                except ClientError:
                    errors += 1
                    continue
                if r.status.name == "SEND_OK":
                    hist.add((time.perf_counter() - t0) * 1e6)
                    sent += 1
                else:
                    errors += 1

        t0 = time.monotonic()
        async with trio.open_nursery() as n:
            for _ in range(concurrency):
                n.start_soon(worker)
        elapsed = time.monotonic() - t0
    return {
        "msgs_per_s": sent / elapsed,
        "p50_ms": hist.quantile(0.5) / 1000,
        "p99_ms": hist.quantile(0.99) / 1000,
        "errors": errors,
    }


def _broker_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "controllerHeartBeatTimeoutMills": args.heartbeat_timeout_ms,
        "brokerHeartbeatInterval": max(100, args.heartbeat_timeout_ms // 5),
        "flushIntervalCommitLog": 200,
    }


class _Single:
    """One broker with no replication (ASYNC_MASTER) and its name server."""

    def __init__(self, impl: str, root: Path, args: argparse.Namespace) -> None:
        self.impl, self.root, self.args = impl, root, args
        self.ns_addrs: list[str] = []
        self._ha: HaCluster | None = None
        self._real: Any = None

    async def start(self) -> None:
        if self.impl == "rmq_ha":
            self._ha = HaCluster(
                self.root, replicas=1, controller_mode=False, broker={"brokerRole": "ASYNC_MASTER"}
            )
            await self._ha.start()
            self.ns_addrs = self._ha.ns_addrs
        else:
            sizes, version = realrmq.jvm_sizes(self.args), realrmq.rocketmq_version(self.args)
            self._real = await trio.to_thread.run_sync(
                lambda: realrmq.start_real(self.root, SETTLE_S, sizes=sizes, version=version)
            )
            self.ns_addrs = [self._real.namesrv]

    def stop(self) -> None:
        if self._ha is not None:
            self._ha.stop()
        if self._real is not None:
            self._real.stop()

    def broker_pids(self) -> list[int]:
        if self._ha is not None:
            return [p.pid for p in self._ha.brokers]
        # the real launcher starts the name server, then the broker
        return [p.pid for p in self._real.procs[1:]]


def _broker_pids(c: Group | _Single) -> list[int]:
    """The broker processes whose CPU the replication cost counts (not name servers or
    controllers: both designs run those apart from the data path)."""
    if isinstance(c, _Single):
        return c.broker_pids()
    return [p.pid for p in c.brokers]


async def replication_cost(
    args: argparse.Namespace, root: Path, progress: Progress, impl: str = "rmq_ha"
) -> Any:
    task = progress.add_task(f"replication cost ({impl})", total=2)
    out: dict[str, Any] = {}
    jar = _java_loadgen(progress) if not args.python_loadgen else None
    out["loadgen"] = "java rocketmq-client 5.5.0 (BenchProducer)" if jar else "python client"
    for name in ("single", "replicated"):
        (root / name).mkdir(parents=True)
        c: Group | _Single = (
            _Single(impl, root / name, args)
            if name == "single"
            else _group(impl, root / name, args)
        )
        try:
            await c.start()
            if not isinstance(c, _Single):
                m = await c.master(SETTLE_S)
                await c.wait_sync_state_set(m, 3, SETTLE_S)
            await _warm(c.ns_addrs[0], SETTLE_S)
            if jar is not None:
                data = await trio.to_thread.run_sync(
                    functools.partial(
                        produce._loadgen,
                        jar,
                        c.ns_addrs[0],
                        root / name,
                        topic=TOPIC,
                        size=args.size,
                        batch=1,
                        threads=args.concurrency,
                        seconds=args.seconds,
                        warmup=2.0,
                        queues=4,
                        cpu_pids=_broker_pids(c),
                    )
                )
                out[name] = {
                    "msgs_per_s": data["msgsPerSec"],
                    "p50_ms": data.get("p50Ms"),
                    "p99_ms": data.get("p99Ms"),
                    "errors": data.get("errors", 0),
                    # user+system CPU of every broker of the setup in the measured window,
                    # per acknowledged message (/proc, read by the load generator)
                    "broker_cpu_us_per_msg": produce.cpu_us_per_msg(
                        data.get("brokerCpuTicks"), data["msgs"], os.sysconf("SC_CLK_TCK")
                    ),
                }
            else:
                out[name] = await load(
                    c.ns_addrs[0],
                    seconds=args.seconds,
                    concurrency=args.concurrency,
                    size=args.size,
                )
        finally:
            c.stop()
        progress.advance(task)
    out["ratio"] = out["replicated"]["msgs_per_s"] / out["single"]["msgs_per_s"]
    out["p99_ratio"] = out["replicated"]["p99_ms"] / out["single"]["p99_ms"]
    out["goal"] = GOAL_RATIO
    return out


def _java_loadgen(progress: Progress) -> Path | None:
    """The Java load generator of `bench produce` when a source checkout, java and mvn are
    here (the Python client cannot load a broker: it saturates a core first)."""
    try:
        realrmq.source_checkout()
        realrmq.require_tools("java", "mvn")
        task = progress.add_task("building the Java load generator", total=None)
        jar: Path = realrmq.interop_harness().java_jar()
        progress.remove_task(task)
        return jar
    except (realrmq.NeedsCheckout, OSError, RuntimeError):
        return None


async def _first_ok_after(c: Group, killed: str, deadline_s: float) -> tuple[float, str]:
    """Sends one message at a time until one is acknowledged by a broker other than
    `killed`; returns the monotonic time of that acknowledgement and that broker's address."""
    async with _producer(c.ns_addrs[0], 0.3) as p:
        with trio.fail_after(deadline_s):
            while True:
                try:
                    r = await p.send(TOPIC, b"failover")
                except ClientError:
                    await trio.sleep(0.01)
                    continue
                addr = _addr_of(p, r.queue.broker_name)
                if r.status.name == "SEND_OK" and addr not in (killed, None):
                    assert addr is not None
                    return time.monotonic(), addr


async def _alone_until(c: Group, master: str, deadline_s: float) -> float | None:
    """The single-copy window (issue 13): while a producer keeps sending, the time until the
    new master's SyncStateSet holds a second replica again (until then, with
    allAckInSyncStateSet and minInSyncReplicas=1, it acknowledges writes alone). None if that
    did not happen within `deadline_s` (real RocketMQ after SIGSTOP: the surviving slave keeps
    replicating from the frozen master's HA port)."""
    i = [c.broker_addr(j) for j in range(len(c.brokers))].index(master)
    async with _producer(c.ns_addrs[0], 1.0) as p, trio.open_nursery() as n:

        async def keep_sending() -> None:
            while True:
                try:
                    await p.send(TOPIC, b"window")
                except ClientError:
                    await trio.sleep(0.01)

        n.start_soon(keep_sending)
        with trio.move_on_after(deadline_s):
            while True:
                size = await c.sync_state_size(i)
                if size is not None and size >= 2:
                    n.cancel_scope.cancel()
                    return time.monotonic()
                await trio.sleep(0.02)
        n.cancel_scope.cancel()
    return None


async def _warm(namesrv: str, deadline_s: float) -> None:
    """Sends until one send is acknowledged: the topic exists (auto-created) and is routed. A
    loaded machine may take a while after the group is up (a route not yet there)."""
    async with _producer(namesrv, 5.0) as p:
        with trio.fail_after(deadline_s):
            while True:
                try:
                    r = await p.send(TOPIC, b"warm")
                except ClientError:
                    await trio.sleep(0.2)
                    continue
                if r.status.name == "SEND_OK":
                    return


def _addr_of(p: Producer, broker_name: str) -> str | None:
    inst = p._instance
    return inst.routes.master_addr(broker_name) if inst is not None else None


async def failover(
    args: argparse.Namespace, root: Path, progress: Progress, how: str, impl: str = "rmq_ha"
) -> Any:
    """`how`: "kill" (kill -9: the kernel closes the master's connections, which the
    controllers notice at once) or "pause" (SIGSTOP: a hung or partitioned master, noticed only
    when its heartbeats time out). Either way the old master is restarted afterwards."""
    (root / how).mkdir(parents=True)
    c = _group(impl, root / how, args)
    task = progress.add_task(f"failover ({how} the master, {impl})", total=args.kills)
    times: list[float] = []
    windows: list[float] = []
    not_rejoined = 0
    try:
        await c.start()
        await c.master(SETTLE_S)
        await _warm(c.ns_addrs[0], SETTLE_S)
        for _ in range(args.kills):
            m = await c.master(SETTLE_S)
            await c.wait_sync_state_set(m, 3, timeout_s=SETTLE_S)
            killed = c.broker_addr(m)
            async with trio.open_nursery() as n:
                result: list[tuple[float, str]] = []

                async def watch(
                    result: list[tuple[float, str]] = result, killed: str = killed
                ) -> None:
                    result.append(await _first_ok_after(c, killed, 60))

                n.start_soon(watch)
                await trio.sleep(0.5)
                t_kill = time.monotonic()
                if how == "kill":
                    c.brokers[m].kill()
                else:
                    c.brokers[m].signal(signal.SIGSTOP)
            t_ok, new_master = result[0]
            times.append(t_ok - t_kill)
            t_rejoined = await _alone_until(c, new_master, args.rejoin_timeout)
            if t_rejoined is None:
                not_rejoined += 1
            else:
                windows.append(t_rejoined - t_ok)
            c.brokers[m].kill()
            c.brokers[m].start()
            await c.brokers[m].wait_ready(SETTLE_S)
            progress.advance(task)
    finally:
        c.stop()
    hb = args.heartbeat_timeout_ms / 1000
    return {
        "impl": impl,
        "how": how,
        "kills": len(times),
        "heartbeat_timeout_ms": args.heartbeat_timeout_ms,
        "p50_s": statistics.median(times),
        "p99_s": _p99(times),
        "max_s": max(times),
        "p50_x_timeout": statistics.median(times) / hb,
        "p99_x_timeout": _p99(times) / hb,
        "goal_p99_x_timeout": GOAL_FAILOVER,
        "samples_s": [round(t, 3) for t in times],
        # Issue 13: from the new master's first acknowledged write until its SyncStateSet has
        # a second member again (it acknowledges alone meanwhile, unless minInSyncReplicas>1).
        # Over the rounds where a slave rejoined within --rejoin-timeout; the others are
        # counted in single_copy_not_rejoined (their window is longer than the timeout).
        "single_copy_p50_s": statistics.median(windows) if windows else None,
        "single_copy_p99_s": _p99(windows) if windows else None,
        "single_copy_max_s": max(windows) if windows else None,
        "single_copy_samples_s": [round(t, 3) for t in windows],
        "single_copy_not_rejoined": not_rejoined,
        "rejoin_timeout_s": args.rejoin_timeout,
    }


def _p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """RocketMQ's figure / rmq_ha's, for each figure both runs have (a time ratio > 1: RocketMQ
    took longer; a throughput ratio > 1: RocketMQ sent more)."""
    out: dict[str, float] = {}
    for part, keys in (
        ("replication", ("ratio",)),
        ("failover_kill", ("p50_s", "p99_s", "single_copy_p50_s")),
        ("failover_pause", ("p50_s", "p99_s", "single_copy_p50_s")),
    ):
        a, b = ours.get(part), theirs.get(part)
        if not a or not b:
            continue
        if part == "replication":
            for k in ("single", "replicated"):
                x, y = a[k]["msgs_per_s"], b[k]["msgs_per_s"]
                if x:
                    out[f"{k}_msgs_per_s"] = y / x
                x, y = a[k].get("broker_cpu_us_per_msg"), b[k].get("broker_cpu_us_per_msg")
                if x and y:
                    # rmq_ha's CPU per message / RocketMQ's (< 1: rmq_ha spends less)
                    out[f"{k}_broker_cpu_rmq_ha_over_rocketmq"] = x / y
            continue
        for k in keys:
            if a.get(k) and b.get(k) is not None:
                out[f"{part}_{k}"] = b[k] / a[k]
    return out


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        impls = realrmq.impls_of(args.impl, "ha")
    except realrmq.NeedsCheckout as e:
        console.print(str(e))
        return 2
    root = Path(tempfile.mkdtemp(prefix="rmq-ha-bench-ha-"))
    try:
        with Progress(console=console, transient=True) as progress:

            async def main() -> dict[str, Any]:
                out: dict[str, Any] = {"machine": machine(), "impls": impls}
                for impl in impls:
                    r: dict[str, Any] = {}
                    d = root / impl
                    if not args.skip_replication:
                        r["replication"] = await replication_cost(args, d, progress, impl)
                    if args.kills > 0:
                        r["failover_kill"] = await failover(args, d, progress, "kill", impl)
                        r["failover_pause"] = await failover(args, d, progress, "pause", impl)
                    out[impl] = r
                if len(impls) == 2:
                    out["ratios"] = ratios(out["rmq_ha"], out["rocketmq"])
                return out

            result = trio.run(main)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


def _print(out: dict[str, Any]) -> None:
    for impl in out["impls"]:
        print(f"== {impl}")
        _print_one(out[impl])
    rat = out.get("ratios")
    if rat:
        print("== RocketMQ / rmq_ha (time: > 1 means RocketMQ took longer)")
        for k, v in rat.items():
            print(f"  {k:34s} {v:6.2f}")


def _print_one(r: dict[str, Any]) -> None:
    rep = r.get("replication")
    if rep:
        s, g = rep["single"], rep["replicated"]

        def cpu(x: dict[str, Any]) -> str:
            c = x.get("broker_cpu_us_per_msg")
            return "" if c is None else f"  broker CPU {c:.1f} us/msg"

        print(
            f"single broker:       {s['msgs_per_s']:9.0f} msgs/s  p99 {s['p99_ms']:.2f} ms"
            f"{cpu(s)}\n"
            f"3 replicas (allAck): {g['msgs_per_s']:9.0f} msgs/s  p99 {g['p99_ms']:.2f} ms"
            f"{cpu(g)}\n"
            f"ratio {rep['ratio']:.2f}x (goal >= {rep['goal']}), p99 ratio {rep['p99_ratio']:.2f}"
        )
    for key in ("failover_kill", "failover_pause"):
        fo = r.get(key)
        if not fo:
            continue
        print(
            f"failover, {fo['how']} the master, {fo['kills']} times: p50 {fo['p50_s']:.2f} s "
            f"({fo['p50_x_timeout']:.2f}x), p99 {fo['p99_s']:.2f} s "
            f"({fo['p99_x_timeout']:.2f}x the {fo['heartbeat_timeout_ms']} ms heartbeat timeout; "
            f"goal <= {fo['goal_p99_x_timeout']}x)"
        )
        if fo["single_copy_p50_s"] is not None:
            print(
                f"  then the new master acknowledged alone for p50 {fo['single_copy_p50_s']:.2f} s,"
                f" p99 {fo['single_copy_p99_s']:.2f} s (until a slave rejoined its SyncStateSet)"
            )
        if fo.get("single_copy_not_rejoined"):
            print(
                f"  in {fo['single_copy_not_rejoined']} of {fo['kills']} rounds no slave rejoined "
                f"the new master's SyncStateSet within {fo['rejoin_timeout_s']:.0f} s"
            )


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ha", help="replication cost (3 replicas vs 1) and failover time")
    p.add_argument("--seconds", type=float, default=10.0, help="load duration per setup")
    p.add_argument("--concurrency", type=int, default=16, help="sending tasks")
    p.add_argument("--size", type=int, default=1024, help="message body bytes")
    p.add_argument("--kills", type=int, default=20, help="failovers to time (0: skip)")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=2000)
    p.add_argument(
        "--rejoin-timeout",
        type=float,
        default=60.0,
        help="s to wait after a failover for a slave to rejoin the new master's SyncStateSet",
    )
    p.add_argument("--skip-replication", action="store_true")
    p.add_argument(
        "--python-loadgen", action="store_true", help="load with the Python client, not Java"
    )
    p.add_argument(
        "--impl",
        choices=[*IMPLS, "both"],
        default="rmq_ha",
        help="what to measure: rmq_ha, real RocketMQ 5.5.0 (controller mode), or both in one run",
    )
    realrmq.add_jvm_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
