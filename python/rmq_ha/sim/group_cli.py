"""Broker-group seeds from the command line: `python -m rmq_ha.sim --group --seeds N`.

Runs `rmq_ha.sim.group` seeds (in worker processes with `--jobs`), prints what happened, the
failover time distribution (virtual ms from the fault on the master to the first write
acknowledged in a later epoch) and, for every failing seed, its error and the command that
replays it with a trace. `--seed S --trace` replays one seed; `--group-bug B` injects one of
the deliberate bugs of `group.BUGS`; `--no-fixes` runs the real code without the changes that
avoid the known bugs (`group.KNOWN_BUGS`).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence

from rmq_ha.sim.group import BUGS, FIXES, KNOWN_BUGS, GroupResult, replay_command, run_group_seed


def _run_one(args: tuple[int, str | None, tuple[str, ...], bool]) -> GroupResult:
    seed, bug, fixes, clean = args
    result = run_group_seed(seed, bug, fixes=fixes, clean=clean)
    result.trace = []
    return result


def run_group_seeds(
    seeds: Sequence[int],
    jobs: int | None = None,
    bug: str | None = None,
    fixes: tuple[str, ...] = FIXES,
    clean: bool = False,
) -> list[GroupResult]:
    """Runs the seeds, in worker processes when `jobs` > 1; results in seed order."""
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    work = [(s, bug, fixes, clean) for s in seeds]
    if jobs <= 1 or len(work) < 2:
        return [_run_one(w) for w in work]
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with ctx.Pool(jobs) as pool:
        return pool.map(_run_one, work, chunksize=max(1, len(work) // (jobs * 8)))


def percentile(values: Sequence[int], q: float) -> int:
    """The q-quantile (nearest rank) of non-empty `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def failover_line(label: str, results: Sequence[GroupResult]) -> str:
    times = [r.failover_ms for r in results if r.failover_ms is not None]
    if not times:
        return f"  {label}: no failover measured"
    return (
        f"  {label}: n={len(times)} p50 {percentile(times, 0.5)} ms, p90 "
        f"{percentile(times, 0.9)} ms, p99 {percentile(times, 0.99)} ms, max {max(times)} ms"
    )


def summarize(
    results: Sequence[GroupResult], wall_s: float, jobs: int, fixes: tuple[str, ...] = FIXES
) -> str:
    n = len(results)
    failed = [r for r in results if not r.ok]
    per_seed = sum(r.wall_ms for r in results) / max(n, 1)
    sim_s = sum(r.sim_ms for r in results) / 1000 / max(n, 1)

    def total(attr: str) -> int:
        return sum(int(getattr(r, attr)) for r in results)

    lines = [
        f"{n - len(failed)}/{n} broker-group seeds passed in {wall_s:.1f} s on {jobs} job(s): "
        f"{per_seed:.1f} ms and {total('events') / max(n, 1):.0f} events per seed, "
        f"{sim_s:.1f} simulated s per seed",
        f"  writes acknowledged {total('acked')}, refused {total('refused')}, timed out "
        f"{total('timeouts')}; elections asked {total('elections')}, recovery elections "
        f"{total('recovery_elections')}; crashes {total('crashes')} ({total('torn')} torn "
        f"tails), handshake truncations {total('truncations')}, catch-up debts "
        f"{total('debts')}",
        f"  consumer offsets: commits on the serving master {total('offset_commits')}, slave "
        f"syncs {total('offset_syncs')}, takeovers checked {total('offset_takeovers')}",
        f"  documented losses (excused, docs/ha.md): single-copy window (minInSyncReplicas=1) "
        f"{total('single_copy_losses')} writes; a torn replica elected "
        f"{sum(r.torn_leader_losses for r in results if r.min_in_sync == 1)} writes with "
        f"minInSyncReplicas=1, "
        f"{sum(r.torn_leader_losses for r in results if r.min_in_sync == 2)} with 2; seeds "
        f"left masterless by rule 4 {total('masterless_by_rule')}",
        "  workarounds for known bugs of the real code (group.KNOWN_BUGS): "
        + (", ".join(fixes) if fixes else "none (--no-fixes)"),
        "failover (virtual ms, fault on the master -> first write acknowledged in a later epoch):",
        failover_line("all", results),
    ]
    for mis in (1, 2):
        lines.append(
            failover_line(f"minInSyncReplicas={mis}", [r for r in results if r.min_in_sync == mis])
        )
    for kind in ("kill", "power", "pause", "isolate"):
        lines.append(failover_line(kind, [r for r in results if r.master_fault == kind]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmq_ha.sim --group", description=__doc__)
    parser.add_argument("--group", action="store_true", help="broker-group seeds (this mode)")
    parser.add_argument("--seeds", type=int, default=2000, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--group-bug", choices=sorted(BUGS), help="inject a deliberate bug")
    parser.add_argument(
        "--no-fixes",
        action="store_true",
        help=f"run without the changes that avoid the known bugs ({', '.join(KNOWN_BUGS)})",
    )
    parser.add_argument(
        "--failover",
        action="store_true",
        help="only the fault on the master in each seed (a clean failover time distribution)",
    )
    parser.add_argument("--trace", action="store_true", help="print the seed's trace")
    args = parser.parse_args(argv)
    fixes: tuple[str, ...] = () if args.no_fixes else FIXES
    if args.seed is not None:
        result = run_group_seed(
            args.seed, args.group_bug, trace=args.trace, fixes=fixes, clean=args.failover
        )
        for line in result.trace:
            print(line)
        status = "ok" if result.ok else f"FAILED: {result.error}"
        print(
            f"seed {args.seed} (minInSyncReplicas={result.min_in_sync}): {status} "
            f"({result.sim_ms / 1000:.1f} simulated s, {result.events} events, "
            f"{result.acked} writes acknowledged, failover {result.failover_ms} ms after "
            f"{result.master_fault or 'no'} fault, {result.wall_ms:.1f} ms)"
        )
        return 0 if result.ok else 1
    started = time.perf_counter()
    results = run_group_seeds(
        range(args.start, args.start + args.seeds), args.jobs, args.group_bug, fixes, args.failover
    )
    print(summarize(results, time.perf_counter() - started, args.jobs, fixes))
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"seed {r.seed} FAILED: {r.error}")
        print(f"  reproduce: {replay_command(r.seed, args.group_bug, args.no_fixes)}")
    return 1 if failed else 0
