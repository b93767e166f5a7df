"""A Spark standalone cluster on this machine, on loopback: one master and N workers started
from the installed PySpark distribution (``$SPARK_HOME/bin/spark-class``), for checking a
history on a real cluster (``rmq-ha check RUN_DIR --master spark://127.0.0.1:PORT``).

    python -m rmq_check.cluster start [--dir DIR] [--workers 2]   # prints the master URL
    python -m rmq_check.cluster status [--dir DIR]
    python -m rmq_check.cluster stop [--dir DIR]

``make spark-cluster`` / ``make spark-cluster-stop`` run these. Each process gets its own
session (process group), its log and pid go to DIR (default $TMPDIR/rmq-check-spark), and
``stop`` signals only the process groups it started and recorded there, while their leaders
are still Spark daemons. Ports are picked free on 127.0.0.1. ``start`` returns once the
master's status page lists every worker alive (or fails after ``--timeout`` seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
DAEMON = "org.apache.spark.deploy."


def default_dir() -> Path:
    return Path(os.environ.get("TMPDIR", "/tmp")) / "rmq-check-spark"


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = HOST
    env.setdefault("SPARK_NO_DAEMONIZE", "1")
    return env


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    spark_class = spark_home() / "bin" / "spark-class"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(spark_class), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(),
            start_new_session=True,
        )


def _alive_workers(ui_port: int) -> int:
    with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=5) as r:
        doc = json.loads(r.read())
    return int(doc.get("aliveworkers", 0))


def start(
    d: Path, workers: int = 2, *, cores: int = 1, memory: str = "1g", timeout_s: float = 120
) -> dict[str, Any]:
    """Start the master and the workers; the state (URL, ports, pids) as written to DIR."""
    d.mkdir(parents=True, exist_ok=True)
    if (d / "cluster.json").exists() and status(d)["running"]:
        raise SystemExit(f"a cluster from {d} is running: {status(d)['master']} (stop it first)")
    port, ui = _free_port(), _free_port()
    url = f"spark://{HOST}:{port}"
    state: dict[str, Any] = {"master": url, "ui_port": ui, "pids": []}
    procs = []
    procs.append(
        _spawn(
            [
                DAEMON + "master.Master",
                "--host",
                HOST,
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            d / "master.log",
        )
    )
    for i in range(workers):
        work = d / f"worker-{i}"
        work.mkdir(exist_ok=True)
        procs.append(
            _spawn(
                [
                    DAEMON + "worker.Worker",
                    "--host",
                    HOST,
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(work),
                    url,
                ],
                d / f"worker-{i}.log",
            )
        )
    state["pids"] = [p.pid for p in procs]
    (d / "cluster.json").write_text(json.dumps(state) + "\n")
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = _alive_workers(ui)
        except OSError:
            seen = 0
        if seen >= workers:
            return state
        if any(p.poll() is not None for p in procs):  # a daemon exited: see its log
            break
        time.sleep(0.5)  # polling a readiness page, not synchronising on time
    stop(d)
    raise SystemExit(
        f"the Spark cluster did not come up ({seen} of {workers} workers alive); logs in {d}"
    )


def _is_ours(pid: int) -> bool:
    """The pid is still one of the Spark daemons (not reaped and reused by another program)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    # an empty command line: the spark-class script exec'ing its JVM right now
    return not cmd or DAEMON in cmd or "spark-class" in cmd


def status(d: Path) -> dict[str, Any]:
    f = d / "cluster.json"
    if not f.exists():
        return {"running": False}
    state = json.loads(f.read_text())
    alive = [p for p in state["pids"] if _is_ours(p)]
    return {**state, "running": bool(alive), "alive_pids": alive}


def stop(d: Path) -> int:
    """Stop the process groups this DIR recorded; how many were still running."""
    f = d / "cluster.json"
    if not f.exists():
        return 0
    state = json.loads(f.read_text())
    n = 0
    for pid in reversed(state["pids"]):
        if _is_ours(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
                n += 1
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_is_ours(p) for p in state["pids"]):
        time.sleep(0.2)
    for pid in state["pids"]:
        if _is_ours(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    f.unlink()
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rmq_check.cluster", description=__doc__)
    ap.add_argument("action", choices=("start", "stop", "status"))
    ap.add_argument("--dir", type=Path, default=default_dir())
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1, help="cores per worker")
    ap.add_argument("--memory", default="1g", help="memory per worker")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    if a.action == "start":
        st = start(a.dir, a.workers, cores=a.cores, memory=a.memory, timeout_s=a.timeout)
        print(st["master"])
        print(
            f"rmq-ha check RUN_DIR --master {st['master']}   # stop: python -m rmq_check.cluster "
            f"stop --dir {a.dir}",
            file=sys.stderr,
        )
    elif a.action == "status":
        print(json.dumps(status(a.dir)))
    else:
        print(f"stopped {stop(a.dir)} processes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
