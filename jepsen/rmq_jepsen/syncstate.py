"""The controller's view of each broker group over a campaign (issue 17): master, epoch and
SyncStateSet, asked of the controllers every `interval_s` and written to `syncstate.jsonl` in
the run directory on the history's clock. It asks the controller (GET_SYNC_STATE_DATA), not the
brokers, so it reads rmq_ha and Apache RocketMQ alike; `campaign compare` uses it for the time
from each heal until every group's SyncStateSet is full again.

A line: {"time_ns": T, "groups": {GROUP: {"master": ADDR|null, "epoch": E, "in_sync": [IDS],
"out_of_sync": [IDS]}}}, or {"time_ns": T, "error": "..."} when no controller answered. T is the
recorder's time (ns since the history opened) when the request started.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio


def group_line(info: Any) -> dict[str, Any]:
    """One group of a GET_SYNC_STATE_DATA answer (a ReplicasInfo) as a syncstate.jsonl entry."""
    return {
        "master": info.master_address or None,
        "epoch": info.master_epoch,
        "in_sync": sorted(r.broker_id for r in info.in_sync_replicas),
        "out_of_sync": sorted(r.broker_id for r in info.not_in_sync_replicas),
    }


def is_full(groups: Mapping[str, Mapping[str, Any]], expect: Iterable[str]) -> bool:
    """Every expected group has a master and no replica the controller knows is out of sync."""
    for g in expect:
        info = groups.get(g)
        if not info or not info.get("master") or info.get("out_of_sync"):
            return False
        if not info.get("in_sync"):
            return False
    return True


def read(path: Path) -> list[dict[str, Any]]:
    """The samples of a syncstate.jsonl (a torn last line, from a killed run, is dropped)."""
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("time_ns"), int):
            out.append(d)
    return out


def full_again_s(
    samples: list[dict[str, Any]], heal_ns: int, expect: Iterable[str]
) -> float | None:
    """Seconds from `heal_ns` to the first sample at or after it in which every expected group's
    SyncStateSet is full (`is_full`); None if no such sample."""
    want = list(expect)
    for s in samples:
        t = s["time_ns"]
        if t >= heal_ns and "groups" in s and is_full(s["groups"], want):
            return round((int(t) - heal_ns) / 1e9, 3)
    return None


class SyncStateSampler:
    """Asks `replicas()` (group -> ReplicasInfo, {} when nobody answered) every `interval_s`
    until cancelled and appends a line per answer to `out`."""

    def __init__(
        self,
        replicas: Callable[[], Awaitable[Mapping[str, Any]]],
        out: Path,
        clock_ns: Callable[[], int],
        *,
        last_error: Callable[[], str | None] = lambda: None,
        interval_s: float = 0.5,
    ) -> None:
        self.replicas = replicas
        self.out = out
        self.clock_ns = clock_ns
        self.last_error = last_error
        self.interval_s = interval_s
        self.samples = 0
        self.failed = 0

    async def one(self) -> dict[str, Any]:
        t = self.clock_ns()
        line: dict[str, Any] = {"time_ns": t}
        try:
            with trio.fail_after(max(self.interval_s * 4, 2.0)):
                got = await self.replicas()
        except (OSError, trio.TooSlowError) as e:
            got = {}
            line["error"] = type(e).__name__ if isinstance(e, trio.TooSlowError) else str(e)
        if got:
            line["groups"] = {g: group_line(info) for g, info in sorted(got.items())}
        else:
            line.setdefault("error", self.last_error() or "no answer")
            self.failed += 1
        self.samples += 1
        return line

    async def run(self) -> None:
        with open(self.out, "a", encoding="utf-8") as f:
            while True:
                deadline = trio.current_time() + self.interval_s
                f.write(json.dumps(await self.one(), separators=(",", ":")) + "\n")
                f.flush()
                await trio.sleep_until(deadline)

    def summary(self) -> dict[str, Any]:
        return {"samples": self.samples, "failed": self.failed, "interval_s": self.interval_s}


def not_full(groups: Mapping[str, Mapping[str, Any]], expect: Iterable[str]) -> dict[str, str]:
    """Why each expected group is not full (`is_full`), by group; {} when all are."""
    out: dict[str, str] = {}
    for g in expect:
        info = groups.get(g)
        if not info:
            out[g] = "the controller does not know the group"
        elif not info.get("master"):
            out[g] = "no master"
        elif info.get("out_of_sync"):
            out[g] = f"replicas {info.get('out_of_sync')} out of sync"
        elif not info.get("in_sync"):
            out[g] = "empty SyncStateSet"
    return out


async def wait_settled(
    check: Callable[[], Awaitable[tuple[dict[str, str], Any]]],
    timeout_s: float,
    interval_s: float = 0.5,
) -> dict[str, Any]:
    """After a run (faults healed, drain done): asks `check` -> ({group: why not}, what it
    saw) until nothing is left unsettled, or `timeout_s` passes. A replica still behind then is
    a cluster that did not recover from its faults, whatever `healed` (the faults undone) says.
    Returns {"full": bool, "waited_s": s, "not_full": {group: why}, "last": what it saw}."""
    t0 = trio.current_time()
    while True:
        why, last = await check()
        waited = round(trio.current_time() - t0, 3)
        if not why or waited >= timeout_s:
            return {"full": not why, "waited_s": waited, "not_full": why, "last": last}
        await trio.sleep(interval_s)


async def wait_full(
    sampler: SyncStateSampler, expect: Iterable[str], timeout_s: float
) -> dict[str, Any]:
    """`wait_settled` for a controller topology: every expected group's SyncStateSet full."""
    want = list(expect)

    async def check() -> tuple[dict[str, str], Any]:
        line = await sampler.one()
        if "groups" not in line:
            return {g: f"no controller answered: {line.get('error')}" for g in want}, line
        return not_full(line["groups"], want), line

    return await wait_settled(check, timeout_s, sampler.interval_s)
