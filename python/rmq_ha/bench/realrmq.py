"""A real Apache RocketMQ 5.x namesrv + single-master broker on loopback, from Maven Central jars.

The one launcher of the real RocketMQ pair: `rmq-ha bench produce` uses it as its baseline and
tests/interop/real_rocketmq.py (the interop tests) is a thin wrapper around it.

It needs a source checkout of rmq_ha: the jars come from tests/interop/real/pom.xml
(`mvn dependency:copy-dependencies`, cached under tests/interop/.build/real-rocketmq/lib), and
the builds, process control and cluster type are those of the interop harness
(tests/interop/harness.py, imported from the checkout by `interop_harness()`). Both JVMs run with
small heaps, a sandboxed user.home (logs) and a store in the given work dir, bound to 127.0.0.1
on ports picked at start-up, and are stopped by pid.

Standalone use:

    python -m rmq_ha.bench.realrmq [--workdir DIR]    (or python tests/interop/real_rocketmq.py)

prints `namesrv=HOST:PORT broker=HOST:PORT` and runs until SIGINT/SIGTERM, then stops both JVMs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"

JVM_NAMESRV = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC"]
JVM_BROKER = ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC"]

_NS_BOOT = re.compile(r"The Name Server boot success\. serializeType=\w+, address ([\w.\-]+:\d+)")
_BROKER_BOOT = re.compile(r"The broker\[[^,]+, ([\w.\-]+:\d+)\] boot success")


class NeedsCheckout(RuntimeError):
    """The source checkout or a build tool (java, mvn) this needs is missing."""


def source_checkout() -> Path:
    """The rmq_ha source checkout: $RMQ_HA_SOURCE, else the one this package is installed from
    (an editable install: python/rmq_ha/ inside the checkout), else the current directory."""
    candidates = []
    if os.environ.get("RMQ_HA_SOURCE"):
        candidates.append(Path(os.environ["RMQ_HA_SOURCE"]))
    candidates += [Path(__file__).resolve().parents[3], Path.cwd()]
    for root in candidates:
        if (root / "tests" / "interop" / "harness.py").is_file():
            return root.resolve()
    raise NeedsCheckout(
        "this needs a source checkout of rmq_ha (tests/interop/: the Java harness and the real "
        "RocketMQ pom); run it from the checkout, install rmq_ha editable from it (`make dev`), "
        "or set RMQ_HA_SOURCE=/path/to/checkout"
    )


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


def _grep(proc: Any, pattern: re.Pattern[str]) -> str | None:
    try:
        m = pattern.search(proc.log.read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def start_real(workdir: Path, timeout: float = 90.0, extra_broker_conf: str = "") -> Any:
    """Starts namesrv then broker; returns a harness.Cluster once the namesrv lists the broker's
    master. On any failure, whatever was started is stopped (by pid) before the error propagates."""
    h = interop_harness()
    require_tools("java", "mvn")
    lib = h.real_rocketmq_lib()
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    procs: list[Any] = []
    cluster = h.Cluster("real", "", "", BROKER_NAME, workdir, procs)
    try:
        ns_conf = workdir / "namesrv.conf"
        ns_conf.write_text(f"listenPort=0\nbindAddress={h.LOOPBACK}\n")
        ns = h.spawn(
            "real namesrv",
            _java(lib, home, JVM_NAMESRV, "org.apache.rocketmq.namesrv.NamesrvStartup", ns_conf),
            workdir / "namesrv.out",
            workdir,
        )
        procs.append(ns)
        namesrv = h.wait_for("real namesrv boot", lambda: _grep(ns, _NS_BOOT), timeout, procs)

        # The broker listens on P, its fast (VIP) server on P-2 and its HA server on P+1.
        port = h.free_port((-2, 0, 1))
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
                    f"brokerIP1={h.LOOPBACK}",
                    f"brokerIP2={h.LOOPBACK}",
                    f"bindAddress={h.LOOPBACK}",
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
        br = h.spawn(
            "real broker",
            _java(lib, home, JVM_BROKER, "org.apache.rocketmq.broker.BrokerStartup", br_conf),
            workdir / "broker.out",
            workdir,
        )
        procs.append(br)
        broker = h.wait_for("real broker boot", lambda: _grep(br, _BROKER_BOOT), timeout, procs)
        h.wait_for(
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
        while all(p.alive() for p in cluster.procs):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
