"""`rmq-ha check RUN_DIR` and `rmq-ha bench check`, added through the rmq_ha.cli entry point."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rmq_ha.cliargs import at_least, non_negative_number

EXIT_SAFETY = 1
EXIT_ERROR = 2
#: The history cannot decide: no operations, nothing acknowledged, or no complete final drain
#: (docs/checker.md, "Verdict").
EXIT_UNKNOWN = 3


def add_parsers(sub: Any, bench_sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="check a bench history with Spark: results.json, plots, report.html",
        description="Check RUN_DIR/history.{parquet,jsonl} (or a history file). Writes "
        "results.json, PNG plots and report.html next to it (or to --out). Exit 0 if every "
        "safety property held, 1 if one failed, 2 on bad input (the first bad line is named), "
        "3 if the history cannot decide (no operations, nothing acknowledged, or a final drain "
        "that did not read every queue that acknowledged a send). Definitions: "
        "docs/checker.md.",
    )
    p.add_argument("run_dir", help="run directory (or history file)")
    _spark_args(p)
    p.add_argument("--out", help="output directory (default: the run directory)")
    p.add_argument("--examples", type=at_least(0), default=8, help="examples kept per anomaly")
    p.add_argument("--bin-ms", type=at_least(1), default=10, help="availability resolution (ms)")
    p.add_argument(
        "--order",
        choices=("auto", "on", "off"),
        default="auto",
        help="per-key order: auto = keys whose sends all went to one queue",
    )
    p.add_argument("--exactly-once", action="store_true", help="duplicates fail the run (safety)")
    p.add_argument(
        "--delay-tolerance-ms",
        type=non_negative_number,
        default=250.0,
        help="a delayed message delivered this long before it was due is early",
    )
    p.add_argument("--json", action="store_true", help="print results.json to stdout")
    p.set_defaults(func=run_check)

    b = bench_sub.add_parser(
        "check",
        help="checker throughput on a synthetic history vs a pure-Python baseline",
    )
    b.add_argument("--ops", type=int, default=20_000_000, help="history size in ops")
    _spark_args(b)
    b.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    b.add_argument("--no-baseline", action="store_true", help="skip the pure-Python baseline")
    b.add_argument("--keep", help="keep the generated history in this directory")
    b.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    b.set_defaults(func=run_bench)


def _spark_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default="local[2]", help="Spark master, e.g. spark://host:7077")
    p.add_argument("--shuffle-partitions", type=int, default=8)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, as spark-submit's --conf (repeatable)",
    )


def spark_conf(pairs: list[str]) -> dict[str, str]:
    """--conf KEY=VALUE arguments as a dict; a malformed one is an argparse-style error."""
    out = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise SystemExit(f"rmq-ha check: --conf wants KEY=VALUE, got {kv!r}")
        out[k.strip()] = v
    return out


def attach_cluster_metrics(results: dict[str, Any], hist: Path) -> None:
    """The run's metrics.jsonl (the bench's scrapes), if any, on the report's time axis."""
    from rmq_check import clustermetrics

    path = clustermetrics.find(hist)
    if path is None:
        return
    t0 = (results.get("analyses", {}).get("availability") or {}).get("t0_ns") or 0
    results["cluster_metrics"] = clustermetrics.load(path, int(t0))


def run_check(args: argparse.Namespace) -> int:

    from pyspark.sql import SparkSession
    from rich.console import Console
    from rmq_check.check import check, write_outputs
    from rmq_check.core import Config
    from rmq_check.load import find_history, load, session
    from rmq_check.validate import HistoryInvalid

    err = Console(stderr=True)
    try:
        hist = find_history(args.run_dir)
    except FileNotFoundError as e:
        err.print(f"[red]no history:[/] {e}")
        return EXIT_ERROR
    out = Path(args.out) if args.out else (hist.parent if hist.is_file() else hist)
    cfg = Config(
        examples=args.examples,
        bin_ms=args.bin_ms,
        exactly_once=args.exactly_once,
        order=args.order,
        delay_tolerance_ms=args.delay_tolerance_ms,
    )
    own = SparkSession.getActiveSession() is None
    spark = session(
        args.master,
        shuffle_partitions=args.shuffle_partitions,
        driver_memory=args.driver_memory,
        extra=spark_conf(args.conf),
    )
    try:
        with err.status("checking") as status:
            results = check(
                load(spark, hist),
                cfg,
                progress=lambda name: status.update(f"checking: {name}"),
            )
            attach_cluster_metrics(results, hist)
            write_outputs(results, out)
    except HistoryInvalid as e:
        # one line per problem, no stack trace: "FILE:LINE: what is wrong"
        for p in e.problems[:1]:
            print(f"rmq-ha check: invalid history: {p}", file=sys.stderr)
        if e.total > 1:
            print(f"rmq-ha check: ({e.total - 1} more bad lines)", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        print(f"rmq-ha check: failed: {_first_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if own:
            spark.stop()
    if args.json:
        print((out / "results.json").read_text())
    else:
        print_verdict(results, out)
    return exit_code(results)


def exit_code(results: dict[str, Any]) -> int:
    if results["valid"] is False:
        return EXIT_SAFETY
    return 0 if results["valid"] is True else EXIT_UNKNOWN


def _first_line(e: BaseException) -> str:
    """The first line of an error (a Py4J error's Java message without its stack)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:500] if text else ''}"


def print_verdict(results: dict[str, Any], out: Path) -> None:
    from rich.console import Console
    from rich.table import Table
    from rmq_check.analyses import NAMES
    from rmq_check.report import shown_valid, verdict_line

    c = Console()
    c.print(f"verdict: [bold]{verdict_line(results)}[/]")
    for why in results.get("unknown_because", []):
        c.print(f"[yellow]unknown because[/] {why}")
    t = Table(title=f"rmq-ha check: {results['stats']['ops']} ops")
    for col in ("analysis", "valid", "count", "safety"):
        t.add_column(col)
    safety = set(results["safety"])
    for n in NAMES:
        r = results["analyses"].get(n)
        if r is None:
            continue
        v = r["valid"]
        style = "green" if v is True else "red" if v is False else "yellow"
        t.add_row(
            n, f"[{style}]{shown_valid(r)}[/]", str(r["count"]), "yes" if n in safety else "no"
        )
    c.print(t)
    from rmq_check.report import delay_line, pop_line

    a = results["analyses"]
    if "lateness_ms" in a.get("delay", {}):
        c.print("delay: " + delay_line(a["delay"]))
    if "redelivery" in a.get("pop", {}):
        c.print("pop: " + pop_line(a["pop"]))
    c.print(f"guarantee: {results.get('guarantee')}; verdict: [bold]{verdict_line(results)}[/]")
    c.print(f"report: {out / 'report.html'}")


def run_bench(args: argparse.Namespace) -> int:
    from rmq_check import bench

    return bench.main(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
