"""A real Apache RocketMQ 5.x namesrv + single-master broker on loopback, from Maven Central jars.

The real RocketMQ pair: `rmq-ha bench produce` uses it as its baseline and
tests/interop/real_rocketmq.py (the interop tests) is a thin wrapper around it. The JVMs are
processes of the one launcher (`rmq_jepsen.launch.java_proc`): config file, log, ready once the
log says so, stopped by pid with their process groups.

It needs a source checkout of rmq_ha: the jars come from tests/interop/real/pom.xml
(`mvn dependency:copy-dependencies`, cached under tests/interop/.build/real-rocketmq/lib), and
the builds and cluster type are those of the interop harness (tests/interop/harness.py, imported
from the checkout by `interop_harness()`). Both JVMs run with small heaps, a sandboxed user.home
(logs) and a store in the given work dir, bound to 127.0.0.1 on ports picked at start-up.

Standalone use:

    python -m rmq_jepsen.bench.realrmq [--workdir DIR]    (or python tests/interop/real_rocketmq.py)

prints `namesrv=HOST:PORT broker=HOST:PORT` and runs until SIGINT/SIGTERM, then stops both JVMs.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from rmq_jepsen import checkout
from rmq_jepsen.launch import (
    LOOPBACK,
    Proc,
    free_port,
    java_proc,
    wait_until,
    write_properties,
)

BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"

JVM_NAMESRV = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC"]
JVM_BROKER = ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC"]

_NS_BOOT = re.compile(r"The Name Server boot success\. serializeType=\w+, address ([\w.\-]+:\d+)")
_BROKER_BOOT = re.compile(r"The broker\[[^,]+, ([\w.\-]+:\d+)\] boot success")


class NeedsCheckout(RuntimeError):
    """The source checkout or a build tool (java, mvn) this needs is missing."""


def source_checkout() -> Path:
    """The rmq_ha source checkout with the interop harness (see `rmq_jepsen.checkout.find`,
    also tried: the current directory)."""
    root = checkout.find(require="tests/interop/harness.py", cwd=True)
    if root is None:
        raise NeedsCheckout(
            "this needs a source checkout of rmq_ha (tests/interop/: the Java harness and the "
            "real RocketMQ pom); run it from the checkout, install rmq_jepsen editable from it "
            f"(`make dev`), or set {checkout.ENV}=/path/to/checkout"
        )
    return root


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise NeedsCheckout(
            f"{' and '.join(missing)} not found on PATH: the real RocketMQ client/broker side "
            "needs a JDK (java 17+) and Maven (mvn) to build and run"
        )


def interop_harness() -> ModuleType:
    """tests/interop/harness.py of the checkout, imported as the module `harness` (the same module
    object the interop tests use, so build caches and types are shared)."""
    if "harness" in sys.modules and hasattr(sys.modules["harness"], "real_rocketmq_lib"):
        return sys.modules["harness"]
    interop = str(source_checkout() / "tests" / "interop")
    if interop not in sys.path:
        sys.path.insert(0, interop)
    return importlib.import_module("harness")


def start_real(
    workdir: Path, timeout: float = 90.0, extra_broker_conf: Mapping[str, Any] | None = None
) -> Any:
    """Starts namesrv then broker; returns a harness.Cluster once the namesrv lists the broker's
    master. On any failure, whatever was started is stopped (by pid) before the error propagates."""
    h = interop_harness()
    require_tools("java", "mvn")
    lib = h.real_rocketmq_lib()
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    procs: list[Proc] = []
    cluster = h.Cluster("real", "", "", BROKER_NAME, workdir, procs)
    try:
        ns = java_proc(
            "real namesrv",
            "org.apache.rocketmq.namesrv.NamesrvStartup",
            classpath=f"{lib}/*",
            conf=write_properties(
                workdir / "namesrv.conf", {"listenPort": 0, "bindAddress": LOOPBACK}
            ),
            log=workdir / "namesrv.out",
            ready=_NS_BOOT,
            jvm=JVM_NAMESRV,
            home=home,
            cwd=workdir,
        )
        procs.append(ns.start())
        namesrv = ns.wait_ready_sync(timeout)

        # The broker listens on P, its fast (VIP) server on P-2 and its HA server on P+1.
        port = free_port((-2, 0, 1))
        store = workdir / "store"
        values: dict[str, Any] = {
            "brokerClusterName": CLUSTER_NAME,
            "brokerName": BROKER_NAME,
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": namesrv,
            "brokerIP1": LOOPBACK,
            "brokerIP2": LOOPBACK,
            "bindAddress": LOOPBACK,
            "listenPort": port,
            "haListenPort": port + 1,
            "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            "mappedFileSizeCommitLog": 67108864,
            "diskMaxUsedSpaceRatio": 95,
            **(extra_broker_conf or {}),
        }
        br = java_proc(
            "real broker",
            "org.apache.rocketmq.broker.BrokerStartup",
            classpath=f"{lib}/*",
            conf=write_properties(workdir / "broker.conf", values),
            log=workdir / "broker.out",
            ready=_BROKER_BOOT,
            jvm=JVM_BROKER,
            home=home,
            cwd=workdir,
        )
        procs.append(br.start())
        broker = br.wait_ready_sync(timeout)
        wait_until(
            "real broker registered with the namesrv",
            lambda: h.cluster_brokers(namesrv).get(BROKER_NAME, {}).get("0") == broker,
            timeout,
            procs,
        )
        cluster.namesrv, cluster.broker = namesrv, broker
        return cluster
    except BaseException:
        cluster.stop()
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    # Stop cleanly on SIGINT and SIGTERM alike (a background shell job starts with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-rocketmq-"))
    t0 = time.monotonic()
    cluster = start_real(workdir)
    try:
        print(
            f"namesrv={cluster.namesrv} broker={cluster.broker} workdir={workdir} "
            f"started_in={time.monotonic() - t0:.1f}s pids={[p.pid for p in cluster.procs]}",
            flush=True,
        )
        while all(p.alive for p in cluster.procs):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
