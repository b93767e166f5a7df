"""`rmq-ha bench produce [--json]`: produce throughput and send latency of rmq_ha against a real
Apache RocketMQ 5.5.0 broker, measured in the same run with the same load generator.

The load generator is the real Java `rocketmq-client` 5.5.0 (BenchProducer in the interop harness
jar): one DefaultMQProducer shared by N threads sending synchronously for D seconds after a
warm-up, bodies of S bytes, single sends and batches of B; it reports msgs/s, p50/p99 latency per
send call and errors. Per implementation, in turn (each broker first gets --broker-warmup
seconds of unmeasured load, so the real broker's JIT is warm):

1. rmq_ha: `rmq-ha namesrv` + `rmq-ha broker` subprocesses on loopback ports, store in a temp
   dir, ASYNC_FLUSH; every case runs against it; both are stopped (by pid).
2. real RocketMQ 5.5.0 namesrv + broker (JVMs from Maven Central jars, small heaps, ASYNC_FLUSH,
   store in a temp dir); the same cases; stopped (by pid).

That is one round; --rounds (default 3) repeats it with fresh brokers and reports medians.

Variants of rmq_ha run beside plain rmq_ha in the same rounds and are reported as a ratio to it:
`--impls rmq_ha,rmq_ha+metrics` measures the cost of the Prometheus endpoint (issue 20; goal
>= 0.97x). The endpoint is on but not scraped during the run (a scrape reads a snapshot; at
Prometheus's default 15 s interval its cost is negligible next to the per-request counters).

`--secure` (issue 19) runs plain rmq_ha, rmq_ha+acl (every request signed by the Java client's
AclClientRPCHook and verified by the broker), rmq_ha+tls (the broker enforcing TLS, the load
generator on -Dtls.enable=true) and rmq_ha+acl+tls in the same rounds; each is reported as a
ratio to plain rmq_ha (goal for ACL + TLS >= 0.85x; docs/security.md).

The ratio is rmq_ha msgs/s / RocketMQ msgs/s; the headline is 1 KiB single sends (goal >= 1.0x).
The load generator runs on the same machine and competes with the broker for CPU.
--threads takes a list (4,16): every size x batch case runs at each thread count.

Broker CPU per message (issue 16): the load generator reads utime + stime of the broker's
processes (namesrv + broker, /proc/<pid>/stat, by pid) at the start and end of its measured
window; the CPU used in that window over the messages acknowledged (or consumed) in it, in
microseconds, per case and broker, and the ratio rmq_ha / RocketMQ (goal <= 0.8x).

The consume case (--consume-msgs N, 0 = off): BenchConsumer (same jar) stores N messages of
--consume-size bytes in batches (unmeasured), then one DefaultLitePullConsumer assigned every
queue (no rebalance) drains the topic from offset 0; msgs/s and broker CPU per message from the
assignment to the last message, per broker in the same rounds, and the ratio rmq_ha / RocketMQ
(goal >= 1.0x). A drain that falls short names, per queue, the messages it got and the highest
offset among them.

A case that fails keeps its broker's work dir (logs, store) and prints where; --keep keeps all.

Needs a SOURCE CHECKOUT of rmq_ha (tests/interop/: the Java harness and the real RocketMQ pom;
found from an editable install, the current directory or $RMQ_HA_SOURCE), a JDK (java 17+) and
Maven (mvn); the first run downloads the jars from Maven Central (cached in
tests/interop/.build/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rmq_jepsen.bench import machine, realrmq
from rmq_jepsen.launch import Proc

IMPLS = ("rmq_ha", "rocketmq", "rmq_ha+metrics", "rmq_ha+acl", "rmq_ha+tls", "rmq_ha+acl+tls")
#: rmq_ha with settings whose cost is measured against plain rmq_ha in the same run: broker.conf
#: lines and the goal for msgs/s as a fraction of plain rmq_ha's.
VARIANTS: dict[str, tuple[list[str], float]] = {
    # issue 20: the Prometheus endpoint on (its counters and histograms run per request)
    "rmq_ha+metrics": (
        [
            "metricsExporterType=PROM",
            "metricsPromExporterHost=127.0.0.1",
            "metricsPromExporterPort=0",
        ],
        0.97,
    ),
    # issue 19: ACL (every request signed and verified), TLS, both; their files are made per
    # run by _secure (the lines here stay empty). Goal: ACL + TLS >= 0.85x plain rmq_ha.
    "rmq_ha+acl": ([], 0.85),
    "rmq_ha+tls": ([], 0.85),
    "rmq_ha+acl+tls": ([], 0.85),
}
#: `--secure`: plain rmq_ha and the three security variants in the same run.
SECURE_IMPLS = "rmq_ha,rmq_ha+acl,rmq_ha+tls,rmq_ha+acl+tls"
#: The load generator's accounts in the ACL variants (secrets of a throw-away bench file).
BENCH_USER = ("rmqBenchUser", "bench-user-secret")
BENCH_ADMIN = ("rmqBenchAdmin", "bench-admin-secret")
HEADLINE = (1024, 1)  # 1 KiB single sends: the case the goal speaks of
GOAL = 1.0
QUICK_CONSUME_MSGS = 5000
CPU_GOAL = 0.8  # broker CPU per message, rmq_ha / RocketMQ (issue 16)
CONSUME_GOAL = 1.0
LOADGEN_JVM = ["-Xms256m", "-Xmx256m", "-XX:+UseSerialGC"]


def _loadgen(
    jar: Path,
    namesrv: str,
    workdir: Path,
    *,
    topic: str,
    size: int,
    batch: int,
    threads: int,
    seconds: float,
    warmup: float,
    queues: int,
    cpu_pids: list[int] | tuple[int, ...] = (),
    jvm: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """One BenchProducer run; its JSON line (with `cpu_pids`: brokerCpuTicks, their CPU in the
    measured window; `jvm`: extra JVM options, e.g. -Dtls.enable=true). The JVM is killed by
    pid if anything goes wrong."""
    argv = [
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--threads",
        str(threads),
        "--seconds",
        str(seconds),
        "--warmup",
        str(warmup),
        "--body-size",
        str(size),
        "--batch",
        str(batch),
        "--queues",
        str(queues),
        "--cpu-pids",
        ",".join(map(str, cpu_pids)),
    ]
    return _java(jar, workdir, "BenchProducer", topic, argv, seconds + warmup + 120, jvm)


def _java(
    jar: Path,
    workdir: Path,
    cls: str,
    topic: str,
    argv: list[str],
    timeout: float,
    jvm: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """Runs rmqha.interop.<cls> (BenchProducer, BenchConsumer); its JSON result line. The JVM
    is killed by pid if anything goes wrong."""
    home = workdir / "loadgen-home"
    home.mkdir(parents=True, exist_ok=True)
    cmd = ["java", *LOADGEN_JVM, *jvm, f"-Duser.home={home}", "-cp", str(jar)]
    cmd.append(f"rmqha.interop.{cls}")
    cmd += argv
    err_log = workdir / f"loadgen-{topic}.stderr"
    out_file = workdir / f"loadgen-{topic}.stdout"
    proc = Proc(
        f"load generator {topic}",
        cmd,
        err_log,
        env={"HOME": str(home)},
        stdout=out_file,
        append_log=False,
    ).start()
    try:
        rc = proc.wait(timeout)
    finally:
        proc.kill()  # no-op once it exited; else by pid, with its group
    out = out_file.read_bytes()
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
    data: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if rc != 0 or "msgsPerSec" not in data:
        tail = "\n".join(err_log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"load generator exit {rc}: {data.get('fatal') or 'no result'}\n{tail}")
    return data


def _cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the given processes (Linux /proc), in seconds."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def cpu_us_per_msg(ticks: int | None, msgs: int, clk_tck: int) -> float | None:
    """Broker CPU per message in microseconds: `ticks` clock ticks (of `clk_tck` a second)
    over `msgs` messages; None without a reading or without messages."""
    if ticks is None or ticks < 0 or msgs <= 0 or clk_tck <= 0:
        return None
    return round(ticks / clk_tck * 1e6 / msgs, 2)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs rounded to 3 places; None when either side has no (positive) figure."""
    return round(ours / theirs, 3) if ours and theirs and ours > 0 and theirs > 0 else None


def compare(case: dict[str, Any]) -> None:
    """Adds rmq_ha / RocketMQ ratios to a case: msgs/s (`ratio`) and broker CPU per message
    (`cpu_ratio`, lower is better)."""
    ours, theirs = case.get("rmq_ha", {}), case.get("rocketmq", {})
    case["ratio"] = ratio(ours.get("msgs_per_s"), theirs.get("msgs_per_s"))
    case["cpu_ratio"] = ratio(
        ours.get("broker_cpu_us_per_msg"), theirs.get("broker_cpu_us_per_msg")
    )


def _side(data: dict[str, Any], broker_cores: float) -> dict[str, Any]:
    clk = os.sysconf("SC_CLK_TCK")
    return {
        "msgs_per_s": data["msgsPerSec"],
        "bytes_per_s": data["bytesPerSec"],
        "p50_ms": data.get("p50Ms"),
        "p99_ms": data.get("p99Ms"),
        "errors": data["errors"],
        "sends": data.get("sends", data["msgs"]),
        "msgs": data["msgs"],
        "seconds": data["seconds"],
        "broker_cores": round(broker_cores, 2),
        "broker_cpu_us_per_msg": cpu_us_per_msg(data.get("brokerCpuTicks"), data["msgs"], clk),
        **({"error_samples": data["errorSamples"]} if data.get("errorSamples") else {}),
    }


def _failed(why: str) -> dict[str, Any]:
    return {"msgs_per_s": 0, "p50_ms": None, "p99_ms": None, "errors": None, "failure": why}


def _start(impl: str, workdir: Path, h: Any) -> tuple[Any, list[str]]:
    """The running broker pair and the load generator's extra JVM options for it."""
    if impl == "rmq_ha":
        return h.start_rmq_ha(workdir), []
    if "+acl" in impl or "+tls" in impl:
        ns_conf, broker_conf, jvm = _secure(impl, workdir)
        return h.start_rmq_ha(workdir, broker_conf=broker_conf, namesrv_conf=ns_conf), jvm
    if impl in VARIANTS:
        return h.start_rmq_ha(workdir, broker_conf=VARIANTS[impl][0]), []
    return realrmq.start_real(workdir), []


def _secure(impl: str, workdir: Path) -> tuple[list[str], list[str], list[str]]:
    """namesrv.conf lines, broker.conf lines and load-generator JVM options of a security
    variant (docs/security.md). ACL is on the broker (every request signed by the real Java
    client's AclClientRPCHook and verified; the name server stays open, as RocketMQ's is by
    default); TLS: the broker enforces it, the name server is permissive, the load generator
    uses the Java client's own -Dtls.enable=true and the broker registers over TLS."""
    ns_conf: list[str] = []
    broker_conf: list[str] = []
    jvm: list[str] = []
    workdir.mkdir(parents=True, exist_ok=True)
    if "+acl" in impl:
        acl = workdir / "plain_acl.yml"
        (ua, us), (aa, as_) = BENCH_USER, BENCH_ADMIN
        acl.write_text(
            "accounts:\n"
            f"  - {{accessKey: {aa}, secretKey: {as_}, admin: true}}\n"
            f"  - {{accessKey: {ua}, secretKey: {us}, admin: false, "
            "defaultTopicPerm: PUB|SUB, defaultGroupPerm: SUB}\n"
        )
        inner = json.dumps({"accessKey": aa, "secretKey": as_})
        broker_conf += [
            "aclEnable=true",
            f"plainAclFile={acl}",
            f"innerClientAuthenticationCredentials={inner}",
        ]
        jvm += [f"-Drmqha.bench.acl={ua}:{us}", f"-Drmqha.bench.aclAdmin={aa}:{as_}"]
    if "+tls" in impl:
        certs = workdir / "certs"
        script = realrmq.source_checkout() / "scripts" / "gen_test_certs.sh"
        subprocess.run(
            ["bash", str(script), str(certs)], check=True, capture_output=True, timeout=120
        )
        server = [
            f"tls.server.certPath={certs / 'server.pem'}",
            f"tls.server.keyPath={certs / 'server.key'}",
        ]
        ns_conf += ["tls.server.mode=permissive", *server]
        broker_conf += [
            "tls.server.mode=enforcing",
            *server,
            "tlsEnable=true",
            f"tls.client.trustCertPath={certs / 'ca.pem'}",
        ]
        jvm.append("-Dtls.enable=true")
    return ns_conf, broker_conf, jvm


def case_key(c: dict[str, Any], base_threads: int | None = None) -> str:
    """`SIZExBATCH`, with `@Nt` when the case ran at another thread count than the first."""
    key = f"{c['size']}x{c['batch']}"
    t = c.get("threads")
    return key if t is None or t == base_threads or base_threads is None else f"{key}@{t}t"


def variant_ratios(cases: list[dict[str, Any]], impls: list[str]) -> dict[str, Any]:
    """Per variant run beside plain rmq_ha: msgs/s over plain rmq_ha's per case, and the
    headline case's ratio against the variant's goal."""
    out: dict[str, Any] = {}
    base_threads = cases[0].get("threads") if cases else None
    for v in (i for i in impls if i in VARIANTS):
        if "rmq_ha" not in impls:
            out[v] = {"note": "plain rmq_ha not run: no ratio"}
            continue
        per_case = {}
        for c in cases:
            base = c["rmq_ha"].get("msgs_per_s") or 0
            got = c[v].get("msgs_per_s") or 0
            per_case[case_key(c, base_threads)] = round(got / base, 3) if base and got else None
        head = per_case.get(f"{HEADLINE[0]}x{HEADLINE[1]}")
        goal = VARIANTS[v][1]
        out[v] = {
            "vs_rmq_ha": per_case,
            "ratio_1k_single_vs_rmq_ha": head,
            "goal": f">= {goal}x plain rmq_ha",
            "goal_met": None if head is None else head >= goal,
        }
    return out


def run(args: argparse.Namespace) -> int:
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop every process started (by pid).
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_broker(
    impl: str,
    workdir: Path,
    h: Any,
    jar: Path,
    combos: list[tuple[int, int, int]],
    args: argparse.Namespace,
    timing: tuple[float, float, float],
    progress: Progress,
    task: Any,
    console: Console,
    consume_msgs: int,
) -> dict[Any, dict[str, Any]]:
    """Starts one broker pair, warms it up, runs every case against it (then the consume case
    under the key "consume" when `consume_msgs`), stops it (by pid)."""
    seconds, warmup, broker_warmup = timing
    out: dict[Any, dict[str, Any]] = {}
    os.sync()  # the previous broker's dirty pages must not be written back meanwhile
    cluster = None
    try:
        cluster, jvm = _start(impl, workdir, h)

        pids = [p.pid for p in cluster.procs]

        def load(
            topic: str, size: int, batch: int, threads: int, secs: float, warm: float
        ) -> dict[str, Any]:
            return _loadgen(
                jar,
                cluster.namesrv,
                workdir,
                topic=topic,
                size=size,
                batch=batch,
                threads=threads,
                seconds=secs,
                warmup=warm,
                queues=args.queues,
                cpu_pids=pids,
                jvm=jvm,
            )

        if broker_warmup > 0:
            # Unmeasured: lets the broker warm up (the JVM's JIT) before any case.
            progress.update(task, description=f"{impl}: warming up")
            try:
                load("Bench_warmup", *HEADLINE, threads_list(args)[0], broker_warmup, 0)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                console.print(f"[yellow]{impl} warm-up: {e}")
        for size, batch, threads in combos:
            progress.update(task, description=f"{impl}: {size} B x {batch}, {threads} threads")
            dead = [p for p in cluster.procs if not p.alive]
            if dead:
                out[(size, batch, threads)] = _failed(
                    f"{dead[0].name} exited ({dead[0].returncode})"
                )
            else:
                cpu0, t0 = _cpu_seconds(pids), time.monotonic()
                try:
                    topic = f"Bench_{size}_{batch}_{threads}"
                    data = load(topic, size, batch, threads, seconds, warmup)
                    cores = (_cpu_seconds(pids) - cpu0) / (time.monotonic() - t0)
                    out[(size, batch, threads)] = _side(data, cores)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    out[(size, batch, threads)] = _failed(str(e))
                    console.print(f"[red]{impl} {size} B x {batch} x {threads} threads: {e}")
            progress.advance(task)
        if consume_msgs > 0:
            progress.update(task, description=f"{impl}: consume {consume_msgs} msgs")
            dead = [p for p in cluster.procs if not p.alive]
            if dead:
                out["consume"] = _failed(f"{dead[0].name} exited ({dead[0].returncode})")
            else:
                cpu0, t0 = _cpu_seconds(pids), time.monotonic()
                try:
                    data = _consume(jar, cluster.namesrv, workdir, args, consume_msgs, pids, jvm)
                    cores = (_cpu_seconds(pids) - cpu0) / (time.monotonic() - t0)
                    out["consume"] = _side(data, cores)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    out["consume"] = _failed(str(e))
                    console.print(f"[red]{impl} consume: {e}")
            progress.advance(task)
    finally:
        if cluster is not None:
            cluster.stop()
    return out


def _consume(
    jar: Path,
    namesrv: str,
    workdir: Path,
    args: argparse.Namespace,
    n: int,
    pids: list[int],
    jvm: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """One BenchConsumer run (fill n messages, then drain them); its JSON line."""
    argv = ["--namesrv", namesrv, "--topic", "Bench_consume", "--count", str(n)]
    argv += ["--body-size", str(args.consume_size), "--queues", str(args.queues)]
    argv += ["--timeout", str(args.consume_timeout), "--cpu-pids", ",".join(map(str, pids))]
    # the drain's deadline, plus the JVM's start and the unmeasured fill
    limit = args.consume_timeout * 3 + 120
    return _java(jar, workdir, "BenchConsumer", "Bench_consume", argv, limit, jvm)


def threads_list(args: argparse.Namespace) -> list[int]:
    return parse_threads(str(args.threads))


def parse_threads(text: str) -> list[int]:
    """`--threads 4,16` -> [4, 16]; ValueError naming the flag for anything else."""
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--threads {text!r}: expected comma-separated integers") from None
    if not out or any(t <= 0 for t in out):
        raise ValueError(f"--threads {text!r}: expected one or more positive thread counts")
    return out


def _median(xs: list[Any]) -> Any:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds; errors summed; every round's msgs/s kept."""
    failures = [r["failure"] for r in runs if "failure" in r]
    if failures:
        return _failed("; ".join(failures))
    agg: dict[str, Any] = {
        "msgs_per_s": round(_median([r["msgs_per_s"] for r in runs])),
        "bytes_per_s": round(_median([r["bytes_per_s"] for r in runs])),
        "p50_ms": _median([r["p50_ms"] for r in runs]),
        "p99_ms": _median([r["p99_ms"] for r in runs]),
        "errors": sum(r["errors"] for r in runs),
        "broker_cores": _median([r["broker_cores"] for r in runs]),
        "broker_cpu_us_per_msg": _median([r.get("broker_cpu_us_per_msg") for r in runs]),
        "sends": sum(r["sends"] for r in runs),
        "msgs": sum(r["msgs"] for r in runs),
        "rounds_msgs_per_s": [r["msgs_per_s"] for r in runs],
    }
    samples = [e for r in runs for e in r.get("error_samples", [])]
    if samples:
        agg["error_samples"] = samples[:5]
    return agg


def _run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        realrmq.source_checkout()
        realrmq.require_tools("java", "mvn")
        h = realrmq.interop_harness()
    except realrmq.NeedsCheckout as e:
        console.print(f"[red]rmq-ha bench produce: {e}")
        return 2
    try:
        threads = threads_list(args)
    except ValueError as e:
        console.print(f"[red]rmq-ha bench produce: {e}")
        return 2
    consume_msgs = args.consume_msgs
    if args.quick:
        sizes, batches, rounds = [1024], [1], 1
        timing = (2.0, 1.0, 2.0)
        consume_msgs = min(consume_msgs, QUICK_CONSUME_MSGS)
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        batches = [int(b) for b in args.batches.split(",")]
        rounds = args.rounds
        timing = (args.seconds, args.warmup, args.broker_warmup)
    impls = [i for i in (SECURE_IMPLS if args.secure else args.impls).split(",") if i]
    bad = [i for i in impls if i not in IMPLS]
    if bad:
        console.print(f"[red]rmq-ha bench produce: unknown --impls {bad}; use {','.join(IMPLS)}")
        return 2
    combos = [(s, b, t) for t in threads for s in sizes for b in batches]
    keys: list[Any] = [*combos, *(["consume"] if consume_msgs > 0 else [])]
    runs: dict[str, dict[Any, list[dict[str, Any]]]] = {i: {c: [] for c in keys} for i in impls}
    root = Path(tempfile.mkdtemp(prefix="rmq-bench-produce-", dir=args.dir))
    t_start = time.monotonic()
    failed_dirs: list[Path] = []
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("building the Java load generator", total=None)
            jar = h.java_jar()
            if "rocketmq" in impls:
                progress.update(task, description="fetching RocketMQ 5.5.0 jars")
                h.real_rocketmq_lib()
            progress.update(task, total=rounds * len(impls) * len(keys), completed=0)
            for r in range(rounds):
                # Alternating brokers, a fresh pair each round: drift hits both sides alike.
                for impl in impls:
                    workdir = root / f"{impl}-{r}"
                    one = _one_broker(
                        impl,
                        workdir,
                        h,
                        jar,
                        combos,
                        args,
                        timing,
                        progress,
                        task,
                        console,
                        consume_msgs,
                    )
                    for c, side in one.items():
                        runs[impl][c].append(side)
                    if any("failure" in side for side in one.values()):
                        # a failed case keeps its broker's log and store to look at
                        failed_dirs.append(workdir)
                    elif not args.keep:
                        shutil.rmtree(workdir, ignore_errors=True)
    finally:
        if args.keep or failed_dirs:
            kept = [str(root)] if args.keep else [str(d) for d in failed_dirs]
            console.print(f"work dirs and logs kept in {', '.join(kept)}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    cases: list[dict[str, Any]] = []
    for size, batch, nthreads in combos:
        case: dict[str, Any] = {"size": size, "batch": batch, "threads": nthreads}
        for impl in impls:
            case[impl] = _aggregate(runs[impl][(size, batch, nthreads)] or [_failed("not run")])
        compare(case)
        cases.append(case)
    consume: dict[str, Any] | None = None
    if consume_msgs > 0:
        consume = {"msgs": consume_msgs, "size": args.consume_size}
        for impl in impls:
            consume[impl] = _aggregate(runs[impl]["consume"] or [_failed("not run")])
        compare(consume)
        consume["goal"] = f">= {CONSUME_GOAL}x real RocketMQ msgs/s"
        consume["goal_met"] = None if consume["ratio"] is None else consume["ratio"] >= CONSUME_GOAL
    info = machine()
    head = next((c for c in cases if (c["size"], c["batch"]) == HEADLINE), None)
    head_ratio = head["ratio"] if head else None
    cpu_ratio = head["cpu_ratio"] if head else None
    result: dict[str, Any] = {
        "benchmark": "produce",
        "machine": info,
        "rocketmq_version": h.ROCKETMQ_VERSION,
        "load_generator": "rmqha.interop.BenchProducer on rocketmq-client "
        f"{h.ROCKETMQ_VERSION}, one producer, sync sends",
        "flush": "ASYNC_FLUSH",
        "threads": threads[0] if len(threads) == 1 else threads,
        "seconds": timing[0],
        "warmup_seconds": timing[1],
        "broker_warmup_seconds": timing[2],
        "rounds": rounds,
        "queues": args.queues,
        "note": f"{info.get('cpus')} CPUs: the load generator runs on the same machine and "
        "competes with the broker under test for CPU. Figures are medians over the rounds "
        "(fresh brokers each round, alternating). broker_cores: CPU used by the namesrv + "
        "broker processes during a case's load generator run (incl. its start-up and warm-up); "
        "broker_cpu_us_per_msg: their CPU in the measured window per acknowledged (consumed) "
        "message; RocketMQ's JIT still compiles during the first cases after a short "
        "--broker-warmup, which inflates its CPU per message (use 20 s or more for CPU figures)",
        "cases": cases,
        "consume": consume,
        "headline": "1 KiB single sends",
        "ratio_1k_single": head_ratio,
        "goal": f">= {GOAL}x real RocketMQ",
        "goal_met": None if head_ratio is None else head_ratio >= GOAL,
        "cpu_ratio_1k_single": cpu_ratio,
        "cpu_goal": f"<= {CPU_GOAL}x real RocketMQ's broker CPU per message",
        "cpu_goal_met": None if cpu_ratio is None else cpu_ratio <= CPU_GOAL,
        "variants": variant_ratios(cases, impls),
        "wall_seconds": round(time.monotonic() - t_start, 1),
    }
    failed = any("failure" in c.get(i, {}) for c in [*cases, consume or {}] for i in impls)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result, impls)
    return 1 if failed else 0


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _print_table(result: dict[str, Any], impls: list[str]) -> None:
    out = Console()
    table = Table(
        title=f"rmq-ha bench produce: rmq_ha vs Apache RocketMQ {result['rocketmq_version']}\n"
        f"{result['threads']} threads, {result['seconds']:g} s x {result['rounds']} rounds "
        f"(median), {result['flush']}"
    )
    cols = ("size", "batch", "thr", "broker", "msgs/s", "p50 ms", "p99 ms", "err", "cores")
    for col in (*cols, "cpu µs/msg", "ratio", "cpu ratio"):
        table.add_column(col, justify="left" if col == "broker" else "right")
    rows = list(result["cases"])
    if result.get("consume"):
        rows.append({**result["consume"], "batch": "consume", "threads": "-"})
    for c in rows:
        for k, impl in enumerate(impls):
            s = c[impl]
            last = k == len(impls) - 1
            table.add_row(
                str(c["size"]) if k == 0 else "",
                str(c["batch"]) if k == 0 else "",
                str(c["threads"]) if k == 0 else "",
                impl,
                _fmt(s["msgs_per_s"], ",.0f"),
                _fmt(s["p50_ms"], ".2f"),
                _fmt(s["p99_ms"], ".2f"),
                _fmt(s["errors"], "d") if "failure" not in s else "FAILED",
                _fmt(s.get("broker_cores"), ".2f"),
                _fmt(s.get("broker_cpu_us_per_msg"), ",.1f"),
                _fmt(c["ratio"], ".2f") if last else "",
                _fmt(c.get("cpu_ratio"), ".2f") if last else "",
                end_section=last,
            )
    out.print(table)
    ratio = result["ratio_1k_single"]
    if ratio is not None:
        verdict = "met" if result["goal_met"] else "NOT met"
        goal = result["goal"]
        out.print(f"headline 1 KiB single sends: ratio {ratio:.2f} (goal {goal}: {verdict})")
    cpu = result.get("cpu_ratio_1k_single")
    if cpu is not None:
        verdict = "met" if result["cpu_goal_met"] else "NOT met"
        out.print(
            f"broker CPU per message, 1 KiB single sends: rmq_ha / RocketMQ {cpu:.2f} "
            f"(goal {result['cpu_goal']}: {verdict})"
        )
    consume = result.get("consume") or {}
    if consume.get("ratio") is not None:
        verdict = "met" if consume["goal_met"] else "NOT met"
        out.print(
            f"consume: ratio {consume['ratio']:.2f} (goal {consume['goal']}: {verdict}), "
            f"CPU per message ratio {_fmt(consume.get('cpu_ratio'), '.2f')}"
        )
    for name, v in result.get("variants", {}).items():
        head = v.get("ratio_1k_single_vs_rmq_ha")
        if head is None:
            out.print(f"{name}: {v.get('note', 'no ratio')}")
            continue
        verdict = "met" if v["goal_met"] else "NOT met"
        out.print(f"{name} / rmq_ha, 1 KiB single sends: {head:.3f} (goal {v['goal']}: {verdict})")
    out.print(f"note: {result['note']}")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "produce",
        help="produce msgs/s vs a real RocketMQ 5.5.0 (needs a source checkout, java, mvn)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="one case (1 KiB single), 2 s (smoke)")
    p.add_argument(
        "--threads", default="4", help="producer threads; a list (4,16) runs every case at each"
    )
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per case")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per case")
    p.add_argument(
        "--broker-warmup", type=float, default=10.0, help="unmeasured load per broker, first"
    )
    p.add_argument("--sizes", default="128,1024", help="message body sizes in bytes")
    p.add_argument("--batches", default="1,32", help="messages per send (1 = single sends)")
    p.add_argument("--rounds", type=int, default=3, help="fresh broker pairs per side (median)")
    p.add_argument("--queues", type=int, default=8, help="queues of each bench topic")
    p.add_argument(
        "--consume-msgs",
        type=int,
        default=100_000,
        help=f"consume case: messages stored, then drained (0 = no consume case; "
        f"--quick caps it at {QUICK_CONSUME_MSGS})",
    )
    p.add_argument("--consume-size", type=int, default=1024, help="consume case: body bytes")
    p.add_argument(
        "--consume-timeout", type=float, default=300.0, help="consume case: seconds to drain"
    )
    p.add_argument(
        "--impls",
        default="rmq_ha,rocketmq",
        help=f"which brokers to run, of {','.join(IMPLS)}; a variant (rmq_ha+...) is compared "
        "with plain rmq_ha in the same run",
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help=f"issue 19: --impls {SECURE_IMPLS} (ACL, TLS, both vs none, same run; "
        "docs/security.md)",
    )
    p.add_argument("--dir", default=None, help="where the stores go (default: the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work dirs and logs")
    p.set_defaults(func=run)
