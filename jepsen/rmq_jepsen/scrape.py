"""The cluster's own metrics over a campaign (issue 20): the bench scrapes every role's
Prometheus endpoint once per interval and writes one line per target and scrape to
`metrics.jsonl` in the run directory, on the history's clock, so the checker's report can draw
them on the same time axis as the fault bands.

A line: {"time_ns": T, "node": ROLE, "up": 0|1, "error": "...", "m": {METRIC: VALUE}} where T
is the recorder's time (ns since the history opened) when the scrape started, and VALUE is a
number, or for per-label series a {label value: number} map (`rmq_ha_replication_lag_bytes` by
replica id), or for the role the name of the role whose series is 1. Only the families in
`WANTED` are kept, so a line stays small whatever the broker serves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import IO, Any

import trio
from prometheus_client.parser import text_string_to_metric_families

#: family -> how a scrape keeps it: "value" (one number), "by:LABEL" (a map by that label),
#: "which:LABEL" (the label value of the sample that is 1).
WANTED: dict[str, str] = {
    "rmq_ha_broker_role": "which:role",
    "rmq_ha_broker_epoch": "value",
    "rmq_ha_broker_fenced": "value",
    "rmq_ha_acting_master": "value",
    "rmq_ha_sync_state_set_size": "value",
    "rmq_ha_confirm_offset_bytes": "value",
    "rmq_ha_max_offset_bytes": "value",
    "rmq_ha_replication_lag_bytes": "by:replica_id",
    "rmq_ha_controller_raft_is_leader": "value",
    "rmq_ha_controller_raft_term": "value",
}
MAX_BODY = 4 << 20


def pick(text: str) -> dict[str, Any]:
    """The `WANTED` families of one exposition text."""
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text):
        how = WANTED.get(fam.name)
        if how is None:
            continue
        for s in fam.samples:
            if s.name != fam.name and s.name != f"{fam.name}_total":
                continue
            if how == "value":
                out[fam.name] = s.value
            elif how.startswith("by:"):
                key = s.labels.get(how[3:], "")
                out.setdefault(fam.name, {})[key] = s.value
            elif how.startswith("which:") and s.value == 1:
                out[fam.name] = s.labels.get(how[6:], "")
    return out


async def fetch(addr: str, timeout_s: float) -> str:
    """GET /metrics over HTTP/1.0 (the server closes after the answer)."""
    host, _, port = addr.rpartition(":")
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(
                f"GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n".encode()
            )
            data = bytearray()
            while chunk := await stream.receive_some(65536):
                data += chunk
                if len(data) > MAX_BODY:
                    raise ValueError(f"answer larger than {MAX_BODY} bytes")
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1:2]
    if status != [b"200"]:
        raise ValueError(f"HTTP {status[0].decode(errors='replace') if status else '?'}")
    return body.decode(errors="replace")


class Scraper:
    """Scrapes `targets` (role name -> host:port) every `interval_s` until cancelled."""

    def __init__(
        self,
        targets: Mapping[str, str],
        out: Path,
        clock_ns: Callable[[], int],
        *,
        interval_s: float = 1.0,
    ) -> None:
        self.targets = dict(targets)
        self.out = out
        self.clock_ns = clock_ns
        self.interval_s = interval_s
        self.scrapes = 0
        self.failed = 0

    async def one(self, name: str, addr: str, f: IO[str]) -> None:
        t = self.clock_ns()
        line: dict[str, Any] = {"time_ns": t, "node": name}
        try:
            line["m"] = pick(await fetch(addr, self.interval_s * 0.8))
            line["up"] = 1
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError) as e:
            # A target that is down, slow, killed mid-answer (a reset: BrokenResourceError,
            # which is not an OSError) or answers nonsense is down for this scrape; the
            # campaign goes on (a reset once ended a whole campaign).
            line["up"] = 0
            line["error"] = type(e).__name__ if isinstance(e, trio.TooSlowError) else str(e)
            self.failed += 1
        self.scrapes += 1
        f.write(json.dumps(line, separators=(",", ":")) + "\n")

    async def run(self) -> None:
        with open(self.out, "a", encoding="utf-8") as f:
            while True:
                deadline = trio.current_time() + self.interval_s
                async with trio.open_nursery() as n:
                    for name, addr in sorted(self.targets.items()):
                        n.start_soon(self.one, name, addr, f)
                f.flush()
                await trio.sleep_until(deadline)

    def summary(self) -> dict[str, Any]:
        return {
            "targets": len(self.targets),
            "scrapes": self.scrapes,
            "failed": self.failed,
            "interval_s": self.interval_s,
        }


@asynccontextmanager
async def in_background(run: Callable[[], Awaitable[None]] | None) -> AsyncIterator[None]:
    """Runs `run` (if any) in the background for the body of the `async with`, then cancels it."""
    if run is None:
        yield
        return
    async with trio.open_nursery() as n:
        n.start_soon(run)
        try:
            yield
        finally:
            n.cancel_scope.cancel()


def scraping(scraper: Scraper | None) -> AbstractAsyncContextManager[None]:
    """Runs `scraper` (if any, with targets) in the background for the body of the `async with`."""
    return in_background(scraper.run if scraper is not None and scraper.targets else None)
