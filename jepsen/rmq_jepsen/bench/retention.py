"""`rmq-ha bench retention` (issue 15): the cost of retention and of a consume-queue rebuild.

1. Append at full speed for `--seconds` into a store with small segments (`--segment-mib`)
   and the shortest retention (fileReservedTime 0 h: every full, flushed and dispatched
   segment may go), while a retention thread runs the broker's policy
   (`store_retention.decide` + `apply`, one segment at a time, every `--interval`) as the
   broker's storage service does. Reported: the disk used by the store over time (sampled;
   bounded means the second half's maximum is no larger than a few segments above the
   first's), and the append throughput against the same run without deletion (target: ratio
   >= 0.9). Runs alternate (`--rounds`), medians reported.
2. Write `--rebuild-mib` (1 GiB) of commitlog, delete the consume queues, and time the open
   that rebuilds them from the commitlog (CRC validation and re-dispatch), against reading the
   same commitlog files sequentially (8 MiB reads) just before (target: ratio <= 2). Both
   read from the page cache: the machine is shared, its caches are not dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rmq_ha._native import Message, Store
from rmq_ha.store_retention import DiskUsage, RetentionPolicy, apply, decide
from rmq_jepsen.bench import machine

MSG_BYTES = 1024
BATCH = 64


def _disk_used(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass  # deleted while walking
    return total


def _write_run(
    root: Path, seconds: float, segment: int, deletion: bool, interval_s: float
) -> dict[str, Any]:
    store = Store(root, segment_size=segment, flush_interval_ms=200)
    body = bytes((i * 7) % 251 for i in range(MSG_BYTES))
    batch = [Message("RetentionT", i % 4, body) for i in range(BATCH)]
    policy = RetentionPolicy(file_reserved_time_h=0, delete_commit_log_files_interval_ms=0)
    stop = threading.Event()
    samples: list[tuple[float, int]] = []
    deleted = [0]
    t0 = time.perf_counter()

    def retention() -> None:
        d = decide(policy, hour=-1, usage=DiskUsage(-1, -1), disk_full_before=False, manual=True)
        while not stop.wait(interval_s):
            while apply(store, d, max_files=1):
                deleted[0] += 1

    def sampler() -> None:
        while not stop.wait(0.25):
            samples.append((time.perf_counter() - t0, _disk_used(root)))

    threads = [threading.Thread(target=sampler)]
    if deletion:
        threads.append(threading.Thread(target=retention))
    for t in threads:
        t.start()
    written = 0
    try:
        while time.perf_counter() - t0 < seconds:
            r = store.append_batch(batch)
            written += len(r) * MSG_BYTES
    finally:
        elapsed = time.perf_counter() - t0
        stop.set()
        for t in threads:
            t.join()
        store.close()
    half = [u for t, u in samples if t >= elapsed / 2]
    first = [u for t, u in samples if t < elapsed / 2]
    return {
        "mb_per_s": written / elapsed / 1e6,
        "seconds": elapsed,
        "bytes_appended": written,
        "deleted_segments": deleted[0],
        "disk_max_bytes": max((u for _, u in samples), default=0),
        "disk_max_first_half": max(first, default=0),
        "disk_max_second_half": max(half, default=0),
        "disk_samples": [(round(t, 2), u) for t, u in samples[:: max(1, len(samples) // 40)]],
    }


def _read_sequential(root: Path) -> float:
    buf = bytearray(8 << 20)
    t0 = time.perf_counter()
    for f in sorted((root / "commitlog").iterdir()):
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    return time.perf_counter() - t0


def _rebuild(root: Path, mib: int, segment: int) -> dict[str, Any]:
    store = Store(root, segment_size=segment, flush_interval_ms=500)
    body = bytes((i * 7) % 251 for i in range(MSG_BYTES))
    batch = [Message("RebuildT", i % 8, body) for i in range(BATCH)]
    while store.max_offset < mib << 20:
        store.append_batch(batch)
    store.flush()
    store.close()
    _read_sequential(root)  # both from the page cache
    read_s = _read_sequential(root)
    shutil.rmtree(root / "consumequeue")
    t0 = time.perf_counter()
    store = Store(root, segment_size=segment)
    open_s = time.perf_counter() - t0
    report = store.open_report
    units = report.get("cq_rebuilt_units")
    store.close()
    return {
        "commitlog_mib": mib,
        "read_seconds": read_s,
        "rebuild_seconds": open_s,
        "rebuilt_units": units,
        "ratio": open_s / read_s if read_s > 0 else float("inf"),
    }


def run(args: argparse.Namespace) -> int:
    base = Path(args.dir or tempfile.gettempdir())
    segment = args.segment_mib << 20
    with_del: list[dict[str, Any]] = []
    without: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for deletion, out in ((False, without), (True, with_del)):
            d = Path(tempfile.mkdtemp(prefix="rmq-retention-", dir=base))
            try:
                out.append(_write_run(d, args.seconds, segment, deletion, args.interval))
            finally:
                shutil.rmtree(d, ignore_errors=True)
    d = Path(tempfile.mkdtemp(prefix="rmq-rebuild-", dir=base))
    try:
        rebuild = _rebuild(d, args.rebuild_mib, 64 << 20)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    med_with = statistics.median(r["mb_per_s"] for r in with_del)
    med_without = statistics.median(r["mb_per_s"] for r in without)
    last = with_del[-1]
    result = {
        "machine": machine(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "segment_mib": args.segment_mib,
        "seconds": args.seconds,
        "append_mb_per_s_with_deletion": med_with,
        "append_mb_per_s_without_deletion": med_without,
        "append_ratio": med_with / med_without if med_without else float("nan"),
        "disk_max_bytes_with_deletion": max(r["disk_max_bytes"] for r in with_del),
        "disk_max_bytes_without_deletion": max(r["disk_max_bytes"] for r in without),
        "disk_bounded": all(
            r["disk_max_second_half"] <= r["disk_max_first_half"] + 4 * segment for r in with_del
        ),
        "deleted_segments": [r["deleted_segments"] for r in with_del],
        "disk_samples_with_deletion": last["disk_samples"],
        "rebuild": rebuild,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"append with deletion {med_with:.1f} MB/s, without {med_without:.1f} MB/s, "
        f"ratio {result['append_ratio']:.2f} (target >= 0.9)"
    )
    print(
        f"disk used with deletion: max {result['disk_max_bytes_with_deletion'] / 2**20:.0f} MiB"
        f" (bounded: {result['disk_bounded']}); without: "
        f"{result['disk_max_bytes_without_deletion'] / 2**20:.0f} MiB"
    )
    print(
        f"consume-queue rebuild of {rebuild['commitlog_mib']} MiB: {rebuild['rebuild_seconds']:.2f}"
        f" s vs sequential read {rebuild['read_seconds']:.2f} s, ratio {rebuild['ratio']:.2f} "
        "(target <= 2)"
    )
    print(f"load average before {load_before}, after {result['loadavg_after']}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("retention", help="append throughput while retention deletes; CQ rebuild")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--seconds", type=float, default=8.0, help="length of one write run")
    p.add_argument("--segment-mib", type=int, default=16, help="commitlog segment size")
    p.add_argument("--interval", type=float, default=0.2, help="retention rounds every (s)")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs (median)")
    p.add_argument("--rebuild-mib", type=int, default=1024, help="commitlog to rebuild from")
    p.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    p.set_defaults(func=run)
