"""The Prometheus endpoint of a role process (`metricsExporterType=PROM`, RocketMQ 5's keys
`metricsPromExporterHost` / `metricsPromExporterPort`; docs/operations.md lists the metrics).

Each role builds a `prometheus_client.CollectorRegistry` holding its own custom collector (it
reads the role's state at scrape time through a small read-only snapshot: nothing is computed
per message beyond a few counters) and the library's process collector. The HTTP side is a
small Trio server here rather than `prometheus_client.start_http_server`, whose WSGI thread
would read the role's dictionaries while the Trio thread changes them: here a scrape runs on the
Trio thread, between two steps of the role, and sees a consistent state. The exposition format
(text 0.0.4 or OpenMetrics, by the Accept header) is the library's.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import trio
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from rmq_ha.config import MetricsExporterType

log = logging.getLogger(__name__)

#: A request head larger than this is refused (a scrape sends a few hundred bytes).
MAX_REQUEST_HEAD = 16 * 1024
#: A client that does not send its request (or read the answer) within this is dropped.
REQUEST_TIMEOUT_S = 10.0


def endpoint(cfg: Any, default_host: str) -> tuple[str, int] | None:
    """(host, port) the role's metrics endpoint binds, or None when metrics are disabled."""
    if cfg.metrics_exporter_type is not MetricsExporterType.PROM:
        return None
    return (cfg.metrics_prom_exporter_host or default_host, cfg.metrics_prom_exporter_port)


def registry_of(collector: Collector) -> CollectorRegistry:
    """A registry with the role's collector and the process metrics (CPU, memory, fds)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg)
    return reg


async def serve_metrics(
    registry: CollectorRegistry,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves GET /metrics until cancelled; reports "host:port" once bound (port 0 picks one)."""
    from rmq_ha.net.server import open_listeners

    listeners = await open_listeners(port, host, "metricsPromExporterPort")
    # One address family per host (port 0 on several families would give several ports).
    for extra in listeners[1:]:
        await extra.aclose()
    listener = listeners[0]
    bound = listener.socket.getsockname()
    addr = f"{host}:{bound[1]}"
    log.info("metrics: Prometheus endpoint on http://%s/metrics", addr)
    task_status.started(addr)

    async def handler(stream: trio.SocketStream) -> None:
        await _handle(registry, stream)

    await trio.serve_listeners(handler, [listener])


async def _handle(registry: CollectorRegistry, stream: trio.abc.Stream) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            head = await _read_head(stream)
            if head is None:
                return
            await stream.send_all(_answer(registry, head))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await stream.aclose()


async def _read_head(stream: trio.abc.Stream) -> str | None:
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_HEAD:
            await stream.send_all(_response(431, "text/plain", b"request head too large\n"))
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
    return data.decode("latin-1")


def _answer(registry: CollectorRegistry, head: str) -> bytes:
    lines = head.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) < 2:
        return _response(400, "text/plain", b"bad request\n")
    method, target = parts[0], parts[1]
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if method not in ("GET", "HEAD"):
        return _response(405, "text/plain", b"only GET\n")
    path = target.split("?", 1)[0]
    if path not in ("/metrics", "/"):
        return _response(404, "text/plain", b"the metrics are at /metrics\n")
    encoder, content_type = choose_encoder(headers.get("accept", ""))
    try:
        body = encoder(registry)
    except Exception as e:  # a collector bug must not take the role down
        log.exception("metrics: a collector failed")
        return _response(500, "text/plain", f"collector failed: {e}\n".encode())
    return _response(200, content_type, b"" if method == "HEAD" else body, len(body))


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _response(code: int, content_type: str, body: bytes, length: int | None = None) -> bytes:
    reason = _REASONS.get(code, "Error")
    head = (
        f"HTTP/1.1 {code} {reason}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


# ---- building metric families -------------------------------------------------------------


class Families:
    """Collects metric families with a fixed set of base labels (RocketMQ puts cluster,
    node_type and node_id on every metric) in front of each metric's own labels."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self.base_names = list(base)
        self.base_values = [base[k] for k in self.base_names]
        self.out: list[Metric] = []

    def gauge(
        self,
        name: str,
        doc: str,
        value: float | None = None,
        *,
        labels: Sequence[str] = (),
        samples: Iterable[tuple[Sequence[str], float]] = (),
        unit: str = "",
    ) -> None:
        fam = GaugeMetricFamily(name, doc, labels=[*self.base_names, *labels], unit=unit)
        self._fill(fam, value, samples)

    def counter(
        self,
        name: str,
        doc: str,
        value: float | None = None,
        *,
        labels: Sequence[str] = (),
        samples: Iterable[tuple[Sequence[str], float]] = (),
    ) -> None:
        fam = CounterMetricFamily(name, doc, labels=[*self.base_names, *labels])
        self._fill(fam, value, samples)

    def histogram(
        self,
        name: str,
        doc: str,
        hist: Histogram | None = None,
        *,
        labels: Sequence[str] = (),
        samples: Iterable[tuple[Sequence[str], Histogram]] = (),
    ) -> None:
        fam = HistogramMetricFamily(name, doc, labels=[*self.base_names, *labels])
        if hist is not None:
            fam.add_metric(self.base_values, hist.cumulative(), hist.total)
        for values, h in samples:
            fam.add_metric([*self.base_values, *values], h.cumulative(), h.total)
        self.out.append(fam)

    def _fill(
        self,
        fam: GaugeMetricFamily | CounterMetricFamily,
        value: float | None,
        samples: Iterable[tuple[Sequence[str], float]],
    ) -> None:
        if value is not None:
            fam.add_metric(self.base_values, value)
        for labels, v in samples:
            fam.add_metric([*self.base_values, *labels], v)
        self.out.append(fam)


class Histogram:
    """A fixed-bucket histogram: observe() is a bisect and two additions (no lock: one Trio
    thread); the collector exports it with `Families.histogram`."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip([*self.bounds, float("inf")], self.counts, strict=True):
            acc += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
        return out


class SnapshotCollector(Collector):
    """A collector that turns a role's snapshot into families at scrape time."""

    def __init__(self, collect: Callable[[], list[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()

    def describe(self) -> Iterable[Metric]:
        return []
