"""Benchmarks (`rmq-ha bench ...`): each prints its figure, a baseline measured in the same run,
and their ratio. They live in the bench package, not in the broker's wheel; `add_parsers` adds
them to `rmq-ha bench` through the CLI plugin (`rmq_jepsen.cli`).

`store` (the storage engine against a plain writer), `produce` (against a real RocketMQ),
`controller` (commit latency, leader failover), `ha` (replication cost, master failover),
`acting-master` (slave-acting-master takeover), `retention` (append throughput while
retention deletes, consume-queue rebuild), `history` (the campaign recorder; registered
by `rmq_jepsen.cli`). Processes come from `rmq_jepsen.launch`; clusters from `.cluster`."""

from __future__ import annotations

import math
import os
import platform
import time
from typing import Any


def add_parsers(bench_sub: Any) -> None:
    """The benchmark subcommands of `rmq-ha bench` (each module's `add_parser`)."""
    from rmq_jepsen.bench import acting, controller, ha, produce, retention, store

    for mod in (store, produce, controller, ha, acting, retention):
        mod.add_parser(bench_sub)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total_kib"] = int(f.readline().split()[1])
    except OSError:
        pass
    return info


def rss_kib() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process in KiB (Linux)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(line.split()[1])
    except OSError:
        pass
    return out


class LatencyHistogram:
    """Log-bucketed latencies (2% wide buckets): constant memory however long the run, so the
    benchmark's RSS figure measures the system under test, not the list of samples."""

    RATIO = 1.02

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0

    def add(self, us: float) -> None:
        b = 0 if us <= 1.0 else int(math.log(us) / math.log(self.RATIO)) + 1
        self.counts[b] = self.counts.get(b, 0) + 1
        self.n += 1

    def merge(self, other: LatencyHistogram) -> None:
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        self.n += other.n

    def quantile(self, q: float) -> float:
        """Upper edge of the bucket holding the q-th percentile (q in [0, 100])."""
        if self.n == 0:
            return float("nan")
        rank = max(1, math.ceil(q / 100 * self.n))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return 1.0 if b == 0 else self.RATIO**b
        return self.RATIO ** max(self.counts)
