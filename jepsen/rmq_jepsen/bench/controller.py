"""`rmq-ha bench controller [--json]`: three `rmq-ha controller` processes on loopback.

Figures:
* commit latency (p50/p99) of APPLY_BROKER_ID and ALTER_SYNC_STATE_SET round trips, each a
  Raft commit on the leader, measured one at a time from a client in this process;
* failover: SIGKILL the serving leader, then time until a surviving node answers a write
  (APPLY_BROKER_ID) with SUCCESS, i.e. a new leader serves; over `--kills` kills, restarting
  the killed node each time. Reported in ms and in heartbeat intervals.

Goal: failover p99 <= (maxHeartBeatLeak + 1) heartbeat intervals. A follower needs
maxHeartBeatLeak silent intervals to notice, so the goal is an election that never needs a
second round. Progress goes to stderr (rich); `--json` prints one JSON object on stdout.

`--impl rocketmq` measures the same on real RocketMQ 5.5.0: three name servers with embedded
DLedger controllers (`realrmq.RealControllerGroup` without brokers), killed and restarted by
pid. RocketMQ has no config key for an embedded controller's DLedger timings, so its defaults
apply there (heartbeat 2000 ms, leak 3, votes 300-1000 ms) and the terms an election took are
not known (null). `--impl both` measures rmq_ha with those same timings, then RocketMQ, and
prints the ratios RocketMQ / rmq_ha.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.progress import Progress

from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient
from rmq_ha.controller.testbroker import TestBroker
from rmq_ha.errors import RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_jepsen.bench import machine, realrmq
from rmq_jepsen.launch import free_ports, role_proc, stop_all

IMPLS = ("rmq_ha", "rocketmq")
#: DLedger's defaults (openmessaging/dledger DLedgerConfig): what an embedded RocketMQ controller
#: runs with, as it has no key to change them.
DLEDGER_DEFAULTS = {"heartbeat_ms": 2000, "leak": 3, "min_vote_ms": 300, "max_vote_ms": 1000}


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(_quantile(values, 50), 3),
        "p99": round(_quantile(values, 99), 3),
        "max": round(max(values), 3) if values else float("nan"),
    }


_SERVING_RE = re.compile(rb"raft \S+: LEADER term (\d+) leader \S+ serving True")


class Controllers:
    """Three `rmq-ha controller` processes (the one launcher's), each stopped by its pid."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.ports = free_ports(3)
        self.addrs = [f"127.0.0.1:{p}" for p in self.ports]
        a = args
        self.procs = [
            role_proc(
                root,
                "controller",
                f"controller-{i}",
                {
                    "controllerDLegerPeers": ";".join(
                        f"n{j}-{x}" for j, x in enumerate(self.addrs)
                    ),
                    "controllerDLegerSelfId": f"n{i}",
                    "controllerStorePath": root / "store",
                    "heartBeatTimeIntervalMs": a.heartbeat_ms,
                    "maxHeartBeatLeak": a.leak,
                    "minVoteIntervalMs": a.min_vote_ms,
                    "maxVoteIntervalMs": a.max_vote_ms,
                },
                args=["--log-level", "info"],
            )
            for i in range(3)
        ]

    def start(self, i: int) -> None:
        self.procs[i].start()

    async def wait_ready(self, i: int, timeout_s: float = 30.0) -> None:
        await self.procs[i].wait_ready(timeout_s)

    def leader_term(self) -> int | None:
        """The highest term in which any node served as leader, from the driver's logs."""
        terms = [0]
        for p in self.procs:
            terms += [int(t) for t in _SERVING_RE.findall(p.log.read_bytes())]
        return max(terms)

    def kill(self, i: int) -> None:
        self.procs[i].kill()

    def stop_all(self) -> None:
        stop_all(self.procs)


class RealControllers:
    """Three real RocketMQ name servers with embedded DLedger controllers (no brokers), the
    launcher's `RealControllerGroup`; the same interface as `Controllers`."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.group = realrmq.RealControllerGroup(
            root,
            replicas=0,
            sizes=realrmq.jvm_sizes(args),
            version=realrmq.rocketmq_version(args),
        )
        self.addrs = self.group.controller_addrs

    def start(self, i: int) -> None:
        if not self.group.namesrvs:
            self.group.prepare()
        self.group.namesrvs[i].start()

    async def wait_ready(self, i: int, timeout_s: float = 30.0) -> None:
        await self.group.namesrvs[i].wait_ready(max(timeout_s, realrmq.JVM_READY_S))

    def leader_term(self) -> int | None:
        return None  # DLedger's term is in no answer a client can ask for

    def kill(self, i: int) -> None:
        self.group.namesrvs[i].kill()

    def stop_all(self) -> None:
        self.group.stop()


# --- commit latency ----------------------------------------------------------------------------


async def _timed(cc: ControllerClient, req: m.Request) -> tuple[float, Any]:
    t0 = time.perf_counter()
    resp = await cc.request(req, 10.0)
    return (time.perf_counter() - t0) * 1000, resp


async def apply_latency(cc: ControllerClient, n: int, progress: Progress) -> list[float]:
    task = progress.add_task("APPLY_BROKER_ID", total=n)
    out = []
    for i in range(1, n + 1):
        ms, resp = await _timed(cc, m.ApplyBrokerIdRequest("bench", "bench-apply", i, f"h:{i};0"))
        if resp.code != Code.SUCCESS:
            raise RuntimeError(f"apply {i}: {resp.code!r} {resp.remark}")
        out.append(ms)
        progress.advance(task)
    return out


async def alter_latency(
    cc: ControllerClient, master: TestBroker, n: int, progress: Progress
) -> list[float]:
    """Alternates the SyncStateSet between {1, 2} and {1}; each change is one commit."""
    elected = await master.elect()
    if elected.code != Code.SUCCESS:
        raise RuntimeError(f"elect: {elected.code!r} {elected.remark}")
    epoch, ss_epoch = elected.master_epoch or 0, elected.sync_state_set_epoch or 0
    task = progress.add_task("ALTER_SYNC_STATE_SET", total=n)
    out = []
    for i in range(n):
        members = frozenset({1, 2}) if i % 2 == 0 else frozenset({1})
        req = m.AlterSyncStateSetRequest(master.broker_name, 1, epoch, members, ss_epoch)
        ms, resp = await _timed(cc, req)
        if resp.code != Code.SUCCESS:
            raise RuntimeError(f"alter {i}: {resp.code!r} {resp.remark}")
        ss_epoch = resp.new_sync_state_set_epoch
        out.append(ms)
        progress.advance(task)
    return out


# --- failover ----------------------------------------------------------------------------------


async def _serving_write(client: RemotingClient, addrs: list[str], req: m.Request) -> bool:
    """True once one of `addrs` commits `req` (an idempotent APPLY_BROKER_ID)."""
    for addr in addrs:
        cc = ControllerClient(client, [addr], timeout_s=1.0)
        cc.leader = addr
        try:
            resp = await cc.request(req, 0)
        except RemotingError:
            continue
        if resp.code == Code.SUCCESS:
            return True
    return False


async def _leader_eventually(cc: ControllerClient) -> str:
    """The first leader of a group that is just starting (real JVMs take a while)."""
    while True:
        try:
            return await cc.find_leader()
        except RemotingError:
            await trio.sleep(0.1)


async def _leader(cc: ControllerClient) -> str:
    with trio.fail_after(30):
        while True:
            try:
                return await cc.find_leader()
            except RemotingError:
                await trio.sleep(0.02)


async def _settled(cc: ControllerClient, group: Controllers | RealControllers, i: int) -> None:
    """Waits until restarted node `i` follows a serving leader."""
    with trio.fail_after(realrmq.JVM_READY_S):
        while True:
            try:
                meta = await cc.metadata(group.addrs[i])
                if meta.controller_leader_address and not meta.is_leader:
                    return
            except RemotingError:
                pass
            await trio.sleep(0.05)


async def one_failover(
    client: RemotingClient, group: Controllers | RealControllers, k: int
) -> tuple[float, int | None]:
    """Milliseconds from the kill to a committed write, and how many terms that took (None:
    not known)."""
    cc = ControllerClient(client, group.addrs, timeout_s=1.0)
    leader = group.addrs.index(await _leader(cc))
    term = group.leader_term()
    survivors = [a for j, a in enumerate(group.addrs) if j != leader]
    req = m.ApplyBrokerIdRequest("bench", "bench-failover", k + 1, f"k:{k};0")
    t0 = time.perf_counter()
    group.kill(leader)
    with trio.fail_after(60):
        while not await _serving_write(client, survivors, req):
            await trio.sleep(0.002)
    elapsed = (time.perf_counter() - t0) * 1000
    await trio.sleep(0.05)  # the new leader's log line
    after = group.leader_term()
    terms = after - term if after is not None and term is not None else None
    client.close_connection(group.addrs[leader])
    group.start(leader)
    await group.wait_ready(leader)
    await _settled(cc, group, leader)
    # Steady state before the next kill: the restarted node has caught up its log (a node
    # behind cannot win the next election), and the kill falls at a random heartbeat phase.
    hb_s = group.args.heartbeat_ms / 1000
    await trio.sleep((group.args.leak + 1) * hb_s + random.uniform(0, hb_s))
    return elapsed, terms


# --- run ---------------------------------------------------------------------------------------


async def _bench(
    args: argparse.Namespace, root: Path, progress: Progress, impl: str = "rmq_ha"
) -> dict[str, Any]:
    group: Controllers | RealControllers = (
        Controllers(root, args) if impl == "rmq_ha" else RealControllers(root, args)
    )
    try:
        if isinstance(group, RealControllers):
            await trio.to_thread.run_sync(group.group.prepare)  # jars, key check
        for i in range(3):
            group.start(i)
        for i in range(3):
            await group.wait_ready(i)
        async with RemotingClient() as client, trio.open_nursery() as nursery:
            cc = ControllerClient(client, group.addrs, timeout_s=3.0)
            with trio.fail_after(realrmq.JVM_READY_S):
                await _leader_eventually(cc)
            apply_ms = await apply_latency(cc, args.requests, progress)
            b1, b2 = TestBroker(group.addrs, "bench-alter"), TestBroker(group.addrs, "bench-alter")
            for b in (b1, b2):
                await nursery.start(b.run)
                await b.join()
                b.start_heartbeats(0.2)
            alter_ms = await alter_latency(cc, b1, args.requests, progress)
            b1.stop()
            b2.stop()
            task = progress.add_task("leader failovers", total=args.kills)
            failovers = []
            for k in range(args.kills):
                failovers.append(await one_failover(client, group, k))
                progress.advance(task)
            nursery.cancel_scope.cancel()
    finally:
        group.stop_all()
    return _report(args, apply_ms, alter_ms, failovers) | {"impl": impl}


def _report(
    args: argparse.Namespace,
    apply_ms: list[float],
    alter_ms: list[float],
    failovers: list[tuple[float, int | None]],
) -> dict[str, Any]:
    fail_ms = [ms for ms, _ in failovers]
    terms: dict[str, int] = {}
    for _, t in failovers:
        key = "unknown" if t is None else str(t)
        terms[key] = terms.get(key, 0) + 1
    hb = args.heartbeat_ms
    goal_ms = (args.leak + 1) * hb
    p99 = _quantile(fail_ms, 99)
    return {
        "bench": "controller",
        "raft": {
            "heartBeatTimeIntervalMs": hb,
            "maxHeartBeatLeak": args.leak,
            "minVoteIntervalMs": args.min_vote_ms,
            "maxVoteIntervalMs": args.max_vote_ms,
        },
        "commit_latency_ms": {
            "apply_broker_id": _stats(apply_ms),
            "alter_sync_state_set": _stats(alter_ms),
        },
        "failover_ms": _stats(fail_ms),
        "failover_intervals": {
            k: (round(v / hb, 2) if k != "n" else v) for k, v in _stats(fail_ms).items()
        },
        "failover_term_increments": dict(sorted(terms.items())),
        "goal": f"failover p99 <= (maxHeartBeatLeak + 1) intervals = {goal_ms} ms",
        "goal_met": p99 <= goal_ms,
        "machine": machine(),
    }


def _print_text(r: dict[str, Any]) -> None:
    lat = r["commit_latency_ms"]
    for name, s in lat.items():
        print(f"commit latency {name:22s} p50 {s['p50']:8.2f} ms  p99 {s['p99']:8.2f} ms")
    f, fi = r["failover_ms"], r["failover_intervals"]
    print(
        f"leader failover over {f['n']} kills: p50 {f['p50']:.0f} ms ({fi['p50']} intervals), "
        f"p99 {f['p99']:.0f} ms ({fi['p99']} intervals), max {f['max']:.0f} ms"
    )
    terms = ", ".join(f"{n} x {t}" for t, n in r["failover_term_increments"].items())
    print(f"term increments per failover (kills x increments): {terms}")
    print(f"goal: {r['goal']}: {'met' if r['goal_met'] else 'NOT met'}")


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """RocketMQ / rmq_ha for the latencies and the failover time (> 1: RocketMQ slower)."""
    out: dict[str, float] = {}
    for name, s in ours["commit_latency_ms"].items():
        for q in ("p50", "p99"):
            if s[q]:
                out[f"{name}_{q}"] = theirs["commit_latency_ms"][name][q] / s[q]
    for q in ("p50", "p99"):
        if ours["failover_ms"][q]:
            out[f"failover_{q}"] = theirs["failover_ms"][q] / ours["failover_ms"][q]
    return out


def run(args: argparse.Namespace) -> int:
    try:
        impls = realrmq.impls_of(args.impl, "controller")
    except realrmq.NeedsCheckout as e:
        print(e, file=sys.stderr)
        return 2
    if "rocketmq" in impls:
        # The same Raft timings on both: RocketMQ's are fixed at DLedger's defaults.
        for k, v in DLEDGER_DEFAULTS.items():
            setattr(args, k, v)
    args.min_vote_ms = (
        args.min_vote_ms if args.min_vote_ms is not None else args.heartbeat_ms * 3 // 20
    )
    args.max_vote_ms = args.max_vote_ms if args.max_vote_ms is not None else args.heartbeat_ms // 2
    reports: dict[str, Any] = {}
    for impl in impls:
        with (
            _workdir(args.dir, args.keep) as root,
            Progress(console=Console(stderr=True)) as progress,
        ):
            reports[impl] = trio.run(_bench, args, root, progress, impl)
    report: dict[str, Any] = reports[impls[0]] if len(impls) == 1 else reports
    if len(impls) == 2:
        report["ratios"] = ratios(reports["rmq_ha"], reports["rocketmq"])
    if args.json:
        print(json.dumps(report, sort_keys=True))
    elif len(impls) == 1:
        _print_text(report)
    else:
        for impl in impls:
            print(f"== {impl}")
            _print_text(reports[impl])
        print("== RocketMQ / rmq_ha (> 1: RocketMQ took longer)")
        for k, v in report["ratios"].items():
            print(f"  {k:30s} {v:6.2f}")
    return 0


@contextmanager
def _workdir(base: str | None, keep: bool = False) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="rmq-ha-bench-controller-", dir=base))
    try:
        yield root
    finally:
        if keep:
            print(f"kept {root} (the controllers' stores and logs)", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("controller", help="controller commit latency and leader failover time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--kills", type=int, default=20, help="leader kills (SIGKILL)")
    p.add_argument("--requests", type=int, default=300, help="requests per latency figure")
    p.add_argument("--heartbeat-ms", type=int, default=200, help="heartBeatTimeIntervalMs")
    p.add_argument("--leak", type=int, default=3, help="maxHeartBeatLeak")
    p.add_argument("--min-vote-ms", type=int, help="minVoteIntervalMs (default: 15%% of hb)")
    p.add_argument("--max-vote-ms", type=int, help="maxVoteIntervalMs (default: 50%% of hb)")
    p.add_argument(
        "--impl",
        choices=[*IMPLS, "both"],
        default="rmq_ha",
        help="rmq_ha, real RocketMQ 5.5.0's embedded controllers, or both (DLedger's timings)",
    )
    realrmq.add_jvm_flags(p)
    p.add_argument("--dir", default=None, help="where the controllers store (default: temp)")
    p.add_argument(
        "--keep", action="store_true", help="keep the working directory (logs) afterwards"
    )
    p.set_defaults(func=run)
