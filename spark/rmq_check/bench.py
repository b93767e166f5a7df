"""`rmq-ha bench check --ops N [--json]`: checker throughput on a synthetic history.

A history of N ops (the ordered workload with fault windows and 5 of every anomaly) is
generated into a temp dir first (not timed). Then, in one run: the full Spark check
(every analysis, no plots) on ``--master`` (default local[2]), the Spark check of lost and
duplicated alone, and the pure-Python single-process lost/duplicate baseline
(``rmq_check.baseline``) on the same file. All must report the injected counts. Printed:
ops/s of each, the ratios (whole check / baseline; same analyses / baseline), peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rmq_check import baseline
from rmq_check.synth import Anomalies, Synth, generate

INJECT = 5


def _jvm_peak_rss_kib(spark: Any) -> int | None:
    try:
        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except Exception:  # not Linux, or a remote master
        return None
    return None


def main(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession
    from rmq_check.check import check
    from rmq_check.core import Config
    from rmq_check.load import load, session

    err = Console(stderr=True)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rmq-check-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"history.{args.format}"
    anomalies = Anomalies(**{k: INJECT for k in Anomalies.__dataclass_fields__})
    out: dict[str, Any] = {"ops_requested": args.ops, "format": args.format}
    try:
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
        ) as prog:
            task = prog.add_task(f"generating {args.ops:,} ops", total=None)
            t = time.perf_counter()
            summary = generate(Synth(ops=args.ops, anomalies=anomalies), path)
            out["generate_s"] = time.perf_counter() - t
            out["ops"] = summary.ops
            out["history_bytes"] = (
                path.stat().st_size
                if path.is_file()
                else sum(p.stat().st_size for p in path.rglob("*"))
            )
            prog.update(task, description="starting Spark")
            t = time.perf_counter()
            own = SparkSession.getActiveSession() is None
            from rmq_check.cli import spark_conf

            spark = session(
                args.master,
                shuffle_partitions=args.shuffle_partitions,
                driver_memory=args.driver_memory,
                extra=spark_conf(args.conf),
            )
            out["spark_start_s"] = time.perf_counter() - t
            try:
                t = time.perf_counter()
                res = check(
                    load(spark, path),
                    Config(),
                    progress=lambda n: prog.update(task, description=f"spark check: {n}"),
                )
                spark_s = time.perf_counter() - t
                # the same analyses as the baseline, alone (same session, JIT warm)
                prog.update(task, description="spark check: lost/duplicated only")
                t = time.perf_counter()
                res_ld = check(load(spark, path), Config(), only=["lost", "duplicated"])
                spark_ld_s = time.perf_counter() - t
                out["jvm_peak_rss_kib"] = _jvm_peak_rss_kib(spark)
            finally:
                if own:
                    spark.stop()
            a = res["analyses"]
            got = {
                "lost": a["lost"]["count"],
                "duplicated": a["duplicated"]["count"],
            }
            exp = summary.expected
            out["spark"] = {
                "seconds": spark_s,
                "ops_per_s": summary.ops / spark_s,
                "timings_s": res["timings_s"],
                "counts": {k: v["count"] for k, v in a.items()},
                "lost": got["lost"],
                "duplicated": got["duplicated"],
                "correct": got["lost"] == exp["lost"] and got["duplicated"] == exp["duplicated"],
            }
            ld = res_ld["analyses"]
            out["spark_lost_duplicated"] = {
                "seconds": spark_ld_s,
                "ops_per_s": summary.ops / spark_ld_s,
                "correct": ld["lost"]["count"] == exp["lost"]
                and ld["duplicated"]["count"] == exp["duplicated"],
            }
            if not args.no_baseline:
                prog.update(task, description="pure-Python baseline: lost/duplicated")
                t = time.perf_counter()
                b = baseline.lost_duplicated(path)
                base_s = time.perf_counter() - t
                out["baseline"] = {
                    "seconds": base_s,
                    "ops_per_s": b["ops"] / base_s,
                    "lost": b["lost"],
                    "duplicated": b["duplicated"],
                    "correct": b["lost"] == exp["lost"] and b["duplicated"] == exp["duplicated"],
                }
                # the ratio: the whole Spark check against the baseline's two analyses
                out["ratio"] = out["spark"]["ops_per_s"] / out["baseline"]["ops_per_s"]
                out["ratio_same_analyses"] = (
                    out["spark_lost_duplicated"]["ops_per_s"] / out["baseline"]["ops_per_s"]
                )
            out["python_peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    out["machine"] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "master": args.master,
        "shuffle_partitions": args.shuffle_partitions,
        "driver_memory": args.driver_memory,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        c = Console()
        c.print(f"history: {out['ops']:,} ops ({out['format']}, {out['history_bytes']:,} B)")
        s = out["spark"]
        c.print(
            f"spark check (all analyses): {s['seconds']:.1f} s = {s['ops_per_s']:,.0f} ops/s"
            f" (correct counts: {s['correct']})"
        )
        ld = out["spark_lost_duplicated"]
        c.print(
            f"spark check (lost/dup only): {ld['seconds']:.1f} s = {ld['ops_per_s']:,.0f} ops/s"
        )
        if "baseline" in out:
            b = out["baseline"]
            c.print(
                f"python baseline (lost/dup): {b['seconds']:.1f} s = {b['ops_per_s']:,.0f} ops/s"
                f" (correct counts: {b['correct']})"
            )
            c.print(
                f"ratio spark/baseline: {out['ratio']:.2f} (all analyses); "
                f"{out['ratio_same_analyses']:.2f} (lost/dup only)"
            )
        c.print(f"JVM peak RSS: {out.get('jvm_peak_rss_kib')} KiB")
    ok = (
        out["spark"]["correct"]
        and out["spark_lost_duplicated"]["correct"]
        and out.get("baseline", {}).get("correct", True)
    )
    return 0 if ok else 1
