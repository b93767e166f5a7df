"""Running many seeds: `python -m rmq_ha.sim --seeds N [--start S] [--jobs J] [--controller]`.

`--controller` makes every node's state machine the controller's, driven by simulated brokers,
and checks the controller invariants after every apply too (see `brokers.py`).

A failing seed prints its error and the command that replays it exactly (with a trace).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence

from rmq_ha.raft.core import TestHooks
from rmq_ha.sim.world import SimResult, run_seed

#: Deliberate bugs (`--bug`), to see the checker fail.
BUGS = {
    "vote-twice": TestHooks(vote_twice=True),
    "skip-vote-persist": TestHooks(skip_vote_persist=True),
    "ignore-ledger-in-vote": TestHooks(ignore_ledger_in_vote=True),
}
#: Deliberate controller bugs (`--bug`, imply `--controller`): a re-election keeps the old
#: masterEpoch; the controller elects uncleanly while the checker believes it may not.
CONTROLLER_BUGS = ("second-master", "unclean-election")


def _run_one(args: tuple[int, str | None, bool]) -> SimResult:
    seed, bug, controller = args
    result = _run(seed, bug, controller)
    result.trace = []
    return result


def _run(
    seed: int, bug: str | None, controller: bool, trace: bool = False, messages: bool = False
) -> SimResult:
    if bug in CONTROLLER_BUGS:
        return run_seed(seed, None, trace, messages, controller=True, controller_bug=bug)
    hooks = BUGS[bug] if bug else None
    return run_seed(seed, hooks, trace, messages, controller=controller)


def is_controller_seed(seed: int, controller_every: int) -> bool:
    """In a mixed run, every `controller_every`-th seed runs in controller mode."""
    return controller_every > 0 and seed % controller_every == 0


def run_seeds(
    seeds: Sequence[int],
    jobs: int | None = None,
    bug: str | None = None,
    controller: bool = False,
    controller_every: int = 0,
) -> list[SimResult]:
    """Runs the seeds, in worker processes when `jobs` > 1; results in seed order. With
    `controller_every` N > 0, seeds divisible by N run in controller mode (a mixed run)."""
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    work = [(s, bug, controller or is_controller_seed(s, controller_every)) for s in seeds]
    if jobs <= 1 or len(work) < 2:
        return [_run_one(w) for w in work]
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with ctx.Pool(jobs) as pool:
        return pool.map(_run_one, work, chunksize=max(1, len(work) // (jobs * 8)))


def reproduce_command(seed: int, bug: str | None, controller: bool = False) -> str:
    extra = " --controller" if controller and bug not in CONTROLLER_BUGS else ""
    extra += f" --bug {bug}" if bug else ""
    return f"python -m rmq_ha.sim --seed {seed}{extra} --trace"


def summarize(results: Sequence[SimResult], wall_s: float, jobs: int) -> str:
    n = len(results)
    failed = [r for r in results if not r.ok]
    sim_s = sum(r.sim_ms for r in results) / 1000
    per_seed_ms = sum(r.wall_ms for r in results) / max(n, 1)
    events = sum(r.events for r in results) / max(n, 1)
    lines = [
        f"{n - len(failed)}/{n} seeds passed in {wall_s:.1f} s on {jobs} job(s): "
        f"{per_seed_ms:.1f} ms and {events:.0f} events per seed, "
        f"{sim_s / max(n, 1):.0f} simulated s per seed",
        f"  leaders elected {sum(r.leaders for r in results)}, "
        f"max term {max((r.max_term for r in results), default=0)}, "
        f"entries committed {sum(r.committed + 1 for r in results)}, "
        f"proposals acknowledged {sum(r.acked for r in results)}, "
        f"crashes {sum(r.crashes for r in results)} "
        f"({sum(r.lost_writes for r in results)} losing unsynced writes, "
        f"{sum(r.torn_writes for r in results)} torn), "
        f"entries truncated {sum(r.truncated for r in results)}, "
        f"snapshots {sum(r.snapshots for r in results)}",
    ]
    controller = [r for r in results if r.controller]
    if controller:
        lines.append(
            f"  controller mode: {len(controller)} seeds, broker requests handled "
            f"{sum(r.requests for r in controller)}, event batches proposed "
            f"{sum(r.proposed for r in controller)}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmq_ha.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--bug", choices=sorted([*BUGS, *CONTROLLER_BUGS]), help="inject a deliberate bug"
    )
    parser.add_argument(
        "--controller",
        action="store_true",
        help="controller state machine on every node, simulated brokers, controller invariants",
    )
    parser.add_argument("--trace", action="store_true", help="print the run's trace")
    parser.add_argument(
        "--trace-messages", action="store_true", help="trace every delivered message too"
    )
    args = parser.parse_args(argv)

    if args.seed is not None:
        result = _run(args.seed, args.bug, args.controller, args.trace, args.trace_messages)
        for line in result.trace:
            print(line)
        status = "ok" if result.ok else f"FAILED: {result.error}"
        print(
            f"seed {args.seed}: {status} ({result.sim_ms / 1000:.0f} simulated s, "
            f"{result.events} events, {result.wall_ms:.1f} ms)"
        )
        return 0 if result.ok else 1

    seeds = range(args.start, args.start + args.seeds)
    started = time.perf_counter()
    results = run_seeds(seeds, args.jobs, args.bug, args.controller)
    wall = time.perf_counter() - started
    print(summarize(results, wall, args.jobs))
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"seed {r.seed} FAILED: {r.error}")
        print(f"  reproduce: {reproduce_command(r.seed, args.bug, r.controller)}")
    return 1 if failed else 0
