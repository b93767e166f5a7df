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

Real RocketMQ's controller mode is not measured by this command (see docs/PERF.md): the
replication ratio and failover time are ours only.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.progress import Progress

from rmq_ha.bench import LatencyHistogram, machine, produce, realrmq
from rmq_ha.bench.cluster import HaCluster
from rmq_ha.client import ClientConfig, Producer, ProducerConfig
from rmq_ha.client.errors import ClientError

TOPIC = "BenchHA"
GOAL_RATIO = 0.7
GOAL_FAILOVER = 1.5


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


async def replication_cost(args: argparse.Namespace, root: Path, progress: Progress) -> Any:
    task = progress.add_task("replication cost", total=2)
    out: dict[str, Any] = {}
    jar = _java_loadgen(progress) if not args.python_loadgen else None
    out["loadgen"] = "java rocketmq-client 5.5.0 (BenchProducer)" if jar else "python client"
    for name, kw in (
        (
            "single",
            {"replicas": 1, "controller_mode": False, "broker": {"brokerRole": "ASYNC_MASTER"}},
        ),
        ("replicated", {"replicas": 3, "broker": _broker_overrides(args)}),
    ):
        (root / name).mkdir(parents=True)
        c = HaCluster(root / name, **kw)  # type: ignore[arg-type]
        try:
            await c.start()
            if name == "replicated":
                m = await c.master()
                await c.wait_sync_state_set(m, 3)
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
                    )
                )
                out[name] = {
                    "msgs_per_s": data["msgsPerSec"],
                    "p50_ms": data.get("p50Ms"),
                    "p99_ms": data.get("p99Ms"),
                    "errors": data.get("errors", 0),
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


async def _first_ok_after(c: HaCluster, killed: str, deadline_s: float) -> tuple[float, str]:
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


async def _alone_until(c: HaCluster, master: str, deadline_s: float) -> float:
    """The single-copy window (issue 13): while a producer keeps sending, the time until the
    new master's SyncStateSet holds a second replica again (until then, with
    allAckInSyncStateSet and minInSyncReplicas=1, it acknowledges writes alone)."""
    i = c.broker_ports.index(int(master.rpartition(":")[2]))
    async with _producer(c.ns_addrs[0], 1.0) as p, trio.open_nursery() as n:

        async def keep_sending() -> None:
            while True:
                try:
                    await p.send(TOPIC, b"window")
                except ClientError:
                    await trio.sleep(0.01)

        n.start_soon(keep_sending)
        with trio.fail_after(deadline_s):
            while True:
                st = await c.status(i)
                if st is not None and len(st["syncStateSet"]) >= 2:
                    n.cancel_scope.cancel()
                    return time.monotonic()
                await trio.sleep(0.02)
    raise AssertionError("unreachable")


def _addr_of(p: Producer, broker_name: str) -> str | None:
    inst = p._instance
    return inst.routes.master_addr(broker_name) if inst is not None else None


async def failover(args: argparse.Namespace, root: Path, progress: Progress, how: str) -> Any:
    """`how`: "kill" (kill -9: the kernel closes the master's connections, which the
    controllers notice at once) or "pause" (SIGSTOP: a hung or partitioned master, noticed only
    when its heartbeats time out). Either way the old master is restarted afterwards."""
    (root / how).mkdir(parents=True)
    c = HaCluster(root / how, replicas=3, broker=_broker_overrides(args))
    task = progress.add_task(f"failover ({how} the master)", total=args.kills)
    times: list[float] = []
    windows: list[float] = []
    try:
        await c.start()
        async with _producer(c.ns_addrs[0], 5.0) as p:
            await p.send(TOPIC, b"warm")
        for _ in range(args.kills):
            m = await c.master()
            await c.wait_sync_state_set(m, 3, timeout_s=60)
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
            windows.append(await _alone_until(c, new_master, 120) - t_ok)
            c.brokers[m].kill()
            c.brokers[m].start()
            await c.brokers[m].wait_ready()
            progress.advance(task)
    finally:
        c.stop()
    hb = args.heartbeat_timeout_ms / 1000
    return {
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
        "single_copy_p50_s": statistics.median(windows),
        "single_copy_p99_s": _p99(windows),
        "single_copy_max_s": max(windows),
        "single_copy_samples_s": [round(t, 3) for t in windows],
    }


def _p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    root = Path(tempfile.mkdtemp(prefix="rmq-ha-bench-ha-"))
    try:
        with Progress(console=console, transient=True) as progress:

            async def main() -> dict[str, Any]:
                out: dict[str, Any] = {"machine": machine()}
                if not args.skip_replication:
                    out["replication"] = await replication_cost(args, root, progress)
                if args.kills > 0:
                    out["failover_kill"] = await failover(args, root, progress, "kill")
                    out["failover_pause"] = await failover(args, root, progress, "pause")
                return out

            result = trio.run(main)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


def _print(r: dict[str, Any]) -> None:
    rep = r.get("replication")
    if rep:
        s, g = rep["single"], rep["replicated"]
        print(
            f"single broker:        {s['msgs_per_s']:9.0f} msgs/s  p99 {s['p99_ms']:.2f} ms\n"
            f"3 replicas (allAck):  {g['msgs_per_s']:9.0f} msgs/s  p99 {g['p99_ms']:.2f} ms\n"
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
            f"goal <= {fo['goal_p99_x_timeout']}x)\n"
            f"  then the new master acknowledged alone for p50 {fo['single_copy_p50_s']:.2f} s, "
            f"p99 {fo['single_copy_p99_s']:.2f} s (until a slave rejoined its SyncStateSet)"
        )


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ha", help="replication cost (3 replicas vs 1) and failover time")
    p.add_argument("--seconds", type=float, default=10.0, help="load duration per setup")
    p.add_argument("--concurrency", type=int, default=16, help="sending tasks")
    p.add_argument("--size", type=int, default=1024, help="message body bytes")
    p.add_argument("--kills", type=int, default=20, help="failovers to time (0: skip)")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=2000)
    p.add_argument("--skip-replication", action="store_true")
    p.add_argument(
        "--python-loadgen", action="store_true", help="load with the Python client, not Java"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
