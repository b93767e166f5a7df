"""A real Apache RocketMQ 5.x namesrv + single-master broker on loopback, from Maven Central jars.

The jars come from tests/interop/real/pom.xml (`mvn dependency:copy-dependencies`, cached under
tests/interop/.build/real-rocketmq/lib). Both JVMs run with small heaps, a sandboxed user.home
(logs) and a store in the given work dir, bound to 127.0.0.1 on ports picked at start-up, and are
stopped by pid.

Standalone use (e.g. as the "real RocketMQ" peer of a benchmark):

    python tests/interop/real_rocketmq.py [--workdir DIR]

prints `namesrv=HOST:PORT broker=HOST:PORT` and runs until SIGINT/SIGTERM, then stops both JVMs.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    LOOPBACK,
    Cluster,
    Proc,
    cluster_brokers,
    free_port,
    real_rocketmq_lib,
    spawn,
    wait_for,
)

BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"

JVM_NAMESRV = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC"]
JVM_BROKER = ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC"]

_NS_BOOT = re.compile(r"The Name Server boot success\. serializeType=\w+, address ([\w.\-]+:\d+)")
_BROKER_BOOT = re.compile(r"The broker\[[^,]+, ([\w.\-]+:\d+)\] boot success")


def _java(lib: Path, home: Path, jvm: list[str], main: str, conf: Path) -> list[str]:
    return [
        "java",
        *jvm,
        f"-Drocketmq.home.dir={home}",
        f"-Duser.home={home}",
        "-Djava.net.preferIPv4Stack=true",
        "-cp",
        f"{lib}/*",
        main,
        "-c",
        str(conf),
    ]


def _grep(proc: Proc, pattern: re.Pattern[str]) -> str | None:
    try:
        m = pattern.search(proc.log.read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def start_real(workdir: Path, timeout: float = 90.0, extra_broker_conf: str = "") -> Cluster:
    """Starts namesrv then broker; returns once the namesrv lists the broker's master."""
    lib = real_rocketmq_lib()
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    procs: list[Proc] = []
    cluster = Cluster("real", "", "", BROKER_NAME, workdir, procs)
    try:
        ns_conf = workdir / "namesrv.conf"
        ns_conf.write_text(f"listenPort=0\nbindAddress={LOOPBACK}\n")
        ns = spawn(
            "real namesrv",
            _java(lib, home, JVM_NAMESRV, "org.apache.rocketmq.namesrv.NamesrvStartup", ns_conf),
            workdir / "namesrv.out",
            workdir,
        )
        procs.append(ns)
        namesrv = wait_for("real namesrv boot", lambda: _grep(ns, _NS_BOOT), timeout, procs)

        # The broker listens on P, its fast (VIP) server on P-2 and its HA server on P+1.
        port = free_port((-2, 0, 1))
        store = workdir / "store"
        br_conf = workdir / "broker.conf"
        br_conf.write_text(
            "\n".join(
                [
                    f"brokerClusterName={CLUSTER_NAME}",
                    f"brokerName={BROKER_NAME}",
                    "brokerId=0",
                    "brokerRole=ASYNC_MASTER",
                    "flushDiskType=ASYNC_FLUSH",
                    f"namesrvAddr={namesrv}",
                    f"brokerIP1={LOOPBACK}",
                    f"brokerIP2={LOOPBACK}",
                    f"bindAddress={LOOPBACK}",
                    f"listenPort={port}",
                    f"haListenPort={port + 1}",
                    f"storePathRootDir={store}",
                    f"storePathCommitLog={store / 'commitlog'}",
                    "autoCreateTopicEnable=true",
                    "autoCreateSubscriptionGroup=true",
                    "mappedFileSizeCommitLog=67108864",
                    "diskMaxUsedSpaceRatio=95",
                    extra_broker_conf,
                    "",
                ]
            )
        )
        br = spawn(
            "real broker",
            _java(lib, home, JVM_BROKER, "org.apache.rocketmq.broker.BrokerStartup", br_conf),
            workdir / "broker.out",
            workdir,
        )
        procs.append(br)
        broker = wait_for("real broker boot", lambda: _grep(br, _BROKER_BOOT), timeout, procs)
        wait_for(
            "real broker registered with the namesrv",
            lambda: cluster_brokers(namesrv).get(BROKER_NAME, {}).get("0") == broker,
            timeout,
            procs,
        )
        cluster.namesrv, cluster.broker = namesrv, broker
        return cluster
    except BaseException:
        cluster.stop()
        raise


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    # Stop cleanly on SIGINT and SIGTERM alike (a background shell job starts with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-rocketmq-"))
    t0 = time.monotonic()
    cluster = start_real(workdir)
    print(
        f"namesrv={cluster.namesrv} broker={cluster.broker} workdir={workdir} "
        f"started_in={time.monotonic() - t0:.1f}s pids={[p.pid for p in cluster.procs]}",
        flush=True,
    )
    try:
        while all(p.alive() for p in cluster.procs):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
