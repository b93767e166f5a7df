"""`rmq-ha bench store`: append throughput and latency of the store through the Python API,
against the machine's baseline measured in the same run: the same bytes written sequentially by
a plain Rust writer (`_native.baseline_sequential_write`) with the same fsync cadence.

Modes:
* async: appends return once the bytes are in the page cache; the flush thread fdatasyncs every
  `flush_interval_ms` (500 ms). Baseline: one write per batch, fdatasync every 500 ms.
* sync: each append is followed by a wait for durability (group commit: the flush thread syncs
  once for everything pending). With one writer that is one fdatasync per batch. Baseline: one
  write + one fdatasync per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rmq_ha._native import Message, Store, baseline_sequential_write
from rmq_jepsen.bench import LatencyHistogram, machine, rss_kib

HEADLINE = (1024, 64)  # the case whose ratios the targets speak of


@dataclass
class Case:
    mode: str
    size: int
    batch: int
    msgs: int
    bytes: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_us: float
    p99_us: float
    rss_kib: list[int]
    rss_anon_kib: list[int]
    baseline_mb_per_s: float
    ratio: float


def _ours(
    d: Path, mode: str, size: int, batch: int, max_bytes: int, max_seconds: float
) -> tuple[int, int, float, LatencyHistogram, list[int], list[int]]:
    """One store run; returns (bytes, batches, seconds, latencies_us, rss, rss_anon)."""
    store = Store(d, flush_interval_ms=500)
    body = bytes((i * 7) % 251 for i in range(size))
    msgs = [
        Message("BenchTopic", i % 8, body, b"TAGS\x01bench\x02", born_host="127.0.0.1:5000")
        for i in range(batch)
    ]
    lat = LatencyHistogram()
    rss: list[int] = []
    anon: list[int] = []
    n_batches = 0
    os.sync()  # start from a clean page cache: leftover writeback would skew either side
    t0 = time.perf_counter()
    next_sample = 0.0
    while True:
        t = time.perf_counter_ns()
        placed = store.append_batch(msgs)
        if mode == "sync":
            store.wait_flushed(placed.end_offset, 30.0)
        lat.add((time.perf_counter_ns() - t) / 1000)
        n_batches += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= next_sample:
            r = rss_kib()
            rss.append(r.get("VmRSS", 0))
            anon.append(r.get("RssAnon", 0))
            next_sample += max_seconds / 4
        if store.max_offset >= max_bytes or elapsed >= max_seconds:
            break
    store.flush()
    seconds = time.perf_counter() - t0
    written = store.max_offset
    r = rss_kib()
    rss.append(r.get("VmRSS", 0))
    anon.append(r.get("RssAnon", 0))
    store.close()
    return written, n_batches, seconds, lat, rss, anon


def run_case(
    root: Path,
    mode: str,
    size: int,
    batch: int,
    max_bytes: int,
    max_seconds: float,
    rounds: int,
) -> Case:
    """`rounds` alternating runs of the store and the baseline; medians of each."""
    ours_mb: list[float] = []
    base_mb: list[float] = []
    lat_all = LatencyHistogram()
    rss: list[int] = []
    anon: list[int] = []
    msgs = 0
    written = 0
    seconds = 0.0
    for r in range(rounds):
        d = root / f"{mode}-{size}-{batch}-{r}"
        written, n_batches, seconds, lat, rss, anon = _ours(
            d / "store", mode, size, batch, max_bytes, max_seconds
        )
        shutil.rmtree(d / "store", ignore_errors=True)
        ours_mb.append(written / 1e6 / seconds)
        lat_all.merge(lat)
        msgs = n_batches * batch
        os.sync()
        _, base_s, _ = baseline_sequential_write(
            d / "baseline.dat", written // n_batches, n_batches, mode == "sync", 500
        )
        shutil.rmtree(d, ignore_errors=True)
        base_mb.append(written / 1e6 / base_s if base_s > 0 else float("inf"))
    ours = statistics.median(ours_mb)
    base = statistics.median(base_mb)
    return Case(
        mode=mode,
        size=size,
        batch=batch,
        msgs=msgs,
        bytes=written,
        seconds=round(seconds, 3),
        msgs_per_s=round(ours * 1e6 / (written / msgs)) if msgs else 0,
        mb_per_s=round(ours, 1),
        p50_us=round(lat_all.quantile(50), 1),
        p99_us=round(lat_all.quantile(99), 1),
        rss_kib=rss,
        rss_anon_kib=anon,
        baseline_mb_per_s=round(base, 1),
        ratio=round(ours / base, 3) if base else 0.0,
    )


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    modes = args.modes.split(",")
    root = Path(tempfile.mkdtemp(prefix="rmq-bench-", dir=args.dir))
    cases: list[Case] = []
    try:
        combos = [(m, s, b) for m in modes for s in sizes for b in batches]
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("bench store", total=len(combos))
            for mode, size, batch in combos:
                progress.update(task, description=f"{mode} {size} B x {batch}")
                max_s = args.seconds if mode == "async" else args.seconds / 2
                cases.append(run_case(root, mode, size, batch, args.mib << 20, max_s, args.rounds))
                progress.advance(task)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "store",
        "machine": machine(),
        "data_dir": str(args.dir or tempfile.gettempdir()),
        "cases": [asdict(c) for c in cases],
    }
    for c in cases:
        if (c.size, c.batch) == HEADLINE:
            result[f"ratio_{c.mode}"] = c.ratio
            result[f"mb_per_s_{c.mode}"] = c.mb_per_s
            result[f"baseline_mb_per_s_{c.mode}"] = c.baseline_mb_per_s
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        table = Table(title="rmq-ha bench store: ours vs a plain sequential writer")
        for col in (
            "mode",
            "size",
            "batch",
            "msgs/s",
            "MB/s",
            "baseline MB/s",
            "ratio",
            "p50 us",
            "p99 us",
            "RSS KiB (start..end)",
        ):
            table.add_column(col, justify="right")
        for c in cases:
            table.add_row(
                c.mode,
                str(c.size),
                str(c.batch),
                f"{c.msgs_per_s:,.0f}",
                f"{c.mb_per_s:,.1f}",
                f"{c.baseline_mb_per_s:,.1f}",
                f"{c.ratio:.2f}",
                f"{c.p50_us:,.1f}",
                f"{c.p99_us:,.1f}",
                f"{c.rss_kib[0]:,}..{c.rss_kib[-1]:,}",
            )
        Console().print(table)
        for m in modes:
            if f"ratio_{m}" in result:
                Console().print(f"headline 1 KiB x 64, {m}: ratio {result[f'ratio_{m}']:.2f}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("store", help="store append throughput vs a plain sequential writer")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--sizes", default="128,1024", help="message body sizes in bytes")
    p.add_argument("--batches", default="1,16,64,256", help="messages per append call")
    p.add_argument("--modes", default="async,sync", help="async,sync")
    p.add_argument("--mib", type=int, default=256, help="stop a case after this many MiB")
    p.add_argument("--seconds", type=float, default=2.0, help="stop a case after this long")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs per case (median)")
    p.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    p.set_defaults(func=run)
