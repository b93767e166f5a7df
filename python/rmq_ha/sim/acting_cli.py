"""Acting-master seeds from the command line: `python -m rmq_ha.sim --acting --seeds N`.

Runs `rmq_ha.sim.acting` seeds (in worker processes with `--jobs`), prints what happened (takeovers,
hand-backs, pre-onlines, the documented losses it excused) and the takeover time distribution
(virtual ms from the fault on the master to the first commit an acting slave acknowledged),
and for every failing seed its error and the command that replays it with a trace.
`--seed S --trace` replays one seed; `--acting-bug B` injects a deliberate bug
(`acting.ACTING_BUGS`); `--revert F` puts back the code a fix replaced (`acting.FIX_REVERTS`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence

from rmq_ha.sim.acting import (
    ACTING_BUGS,
    FIX_REVERTS,
    ActingResult,
    replay_command,
    run_acting_seed,
)
from rmq_ha.sim.group_cli import percentile


def _run_one(args: tuple[int, str | None, str | None, bool]) -> ActingResult:
    seed, bug, revert, clean = args
    result = run_acting_seed(seed, bug, revert=revert, clean=clean)
    result.trace = []
    return result


def run_acting_seeds(
    seeds: Sequence[int],
    jobs: int | None = None,
    bug: str | None = None,
    revert: str | None = None,
    clean: bool = False,
) -> list[ActingResult]:
    """Runs the seeds, in worker processes when `jobs` > 1; results in seed order."""
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    work = [(s, bug, revert, clean) for s in seeds]
    if jobs <= 1 or len(work) < 2:
        return [_run_one(w) for w in work]
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with ctx.Pool(jobs) as pool:
        return pool.map(_run_one, work, chunksize=max(1, len(work) // (jobs * 8)))


def summarize(results: Sequence[ActingResult], wall_s: float, jobs: int) -> str:
    n = len(results)
    failed = [r for r in results if not r.ok]

    def total(attr: str) -> int:
        return sum(int(getattr(r, attr)) for r in results)

    per_seed = sum(r.wall_ms for r in results) / max(n, 1)
    lines = [
        f"{n - len(failed)}/{n} acting-master seeds passed in {wall_s:.1f} s on {jobs} job(s): "
        f"{per_seed:.1f} ms and {total('events') / max(n, 1):.0f} events per seed",
        f"  commits acknowledged {total('commits')}, refused {total('refused')}; strict locks "
        f"granted {total('locks_granted')}; delay deliveries {total('delay_deliveries')}; "
        f"takeovers {total('takeovers')}, hand-backs "
        f"{total('hand_backs')}, returning masters' pre-onlines {total('pre_onlines')}, "
        f"metadata pulls {total('reverse_syncs')}",
        f"  documented losses (excused, docs/acting-master.md): offsets a kill -9 lost "
        f"unpersisted {total('crash_losses')}, a takeover's window {total('takeover_losses')}, "
        f"commits a plain slave took on a stale route {total('stale_route_losses')}, a killed "
        f"broker's unpersisted commits whose slave copy was overwritten before the pull "
        f"{total('copy_losses')}; double "
        f"lock holders after a replica forgot its locks {total('lock_amnesia')}",
    ]
    times = [r.takeover_ms for r in results if r.takeover_ms is not None]
    if times:
        lines.append(
            "takeover (virtual ms, fault on the master -> first commit on the acting slave): "
            f"n={len(times)} p50 {percentile(times, 0.5)} ms, p90 {percentile(times, 0.9)} ms, "
            f"p99 {percentile(times, 0.99)} ms, max {max(times)} ms"
        )
    for kind in ("kill", "isolate", "isolate-ns", "pause"):
        ts = [r.takeover_ms for r in results if r.master_fault == kind and r.takeover_ms]
        if ts:
            lines.append(
                f"  {kind}: n={len(ts)} p50 {percentile(ts, 0.5)} ms, p99 {percentile(ts, 0.99)} ms"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmq_ha.sim --acting", description=__doc__)
    parser.add_argument("--acting", action="store_true", help="acting-master seeds (this mode)")
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--acting-bug", choices=sorted(ACTING_BUGS), help="a deliberate bug")
    parser.add_argument(
        "--revert", choices=sorted(FIX_REVERTS), help="put back the code a fix replaced"
    )
    parser.add_argument(
        "--failover", action="store_true", help="only the fault on the master in each seed"
    )
    parser.add_argument("--trace", action="store_true", help="print the seed's trace")
    args = parser.parse_args(argv)
    if args.seed is not None:
        r = run_acting_seed(
            args.seed, args.acting_bug, trace=args.trace, clean=args.failover, revert=args.revert
        )
        for line in r.trace:
            print(line)
        status = "ok" if r.ok else f"FAILED: {r.error}"
        print(
            f"seed {args.seed} ({r.replicas} replicas, fence {r.fence}, strict locks "
            f"{r.strict}, master fault {r.master_fault or 'none'}): {status} "
            f"({r.sim_ms / 1000:.1f} simulated s, {r.events} events, {r.commits} commits, "
            f"{r.wall_ms:.1f} ms)"
        )
        return 0 if r.ok else 1
    started = time.perf_counter()
    results = run_acting_seeds(
        range(args.start, args.start + args.seeds),
        args.jobs,
        args.acting_bug,
        args.revert,
        args.failover,
    )
    print(summarize(results, time.perf_counter() - started, args.jobs))
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"seed {r.seed} FAILED: {r.error}")
        print(f"  reproduce: {replay_command(r.seed, args.acting_bug, args.revert)}")
    return 1 if failed else 0
