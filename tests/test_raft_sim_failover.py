"""Leader failover in the deterministic simulator (issue 14): virtual time from a leader's crash
until another node serves, and the terms it takes, over many seeds; with scheduling delay (nodes
that run late, by up to several heartbeat intervals, as starved or paused processes do) the
election must still converge in a few terms. Virtual time only: nothing here depends on how fast
the machine is."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from rmq_ha.sim import Simulation
from rmq_ha.sim.runner import reproduce_command
from rmq_ha.sim.world import SimConfig, failover_config, run_failover_seed

HB = 200  # the bench's heartbeat interval (failover_config's Raft timing)
SEEDS = 400
KILLS = 2


def _quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _failovers(config: SimConfig) -> tuple[list[int], list[int]]:
    ms: list[int] = []
    terms: list[int] = []
    for seed in range(SEEDS):
        r = run_failover_seed(seed, config, kills=KILLS)
        assert r.ok, f"seed {seed}: {r.error}"
        ms += r.failover_ms
        terms += r.terms
    return ms, terms


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("overrides", "p99_ms"),
    [
        # Loopback, fast disk: the algorithm's own share of the bench figure.
        ({}, 4 * HB),
        # Slow fsyncs (2-30 ms) and timers firing up to 10 ms late: a busy machine's disk and
        # scheduler. Before issue 14 this took up to 9 terms (p99 5.5 intervals).
        ({"fsync_min_ms": 2, "fsync_max_ms": 30, "tick_jitter_ms": 10}, 4.5 * HB),
    ],
)
def test_failover_meets_the_goal_in_virtual_time(overrides: dict[str, int], p99_ms: float) -> None:
    """The bench's goal is p99 <= (maxHeartBeatLeak + 1) = 4 intervals; 4.5 with slow fsyncs,
    four of which lie on the path (the vote, its grant, the no-op on leader and follower)."""
    ms, terms = _failovers(failover_config(**overrides))
    assert len(ms) == SEEDS * KILLS
    assert _quantile(ms, 99) <= p99_ms, sorted(ms)[-10:]
    assert _quantile(ms, 50) <= 4 * HB
    assert max(terms) <= 2, sorted(terms)[-10:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("late", "late_max_ms", "max_ms"),
    [
        # Starved: a third of a node's steps run late, by up to one interval; half by up to 2.
        (0.3, 1 * HB, 40 * HB),
        (0.5, 2 * HB, 60 * HB),
        # Paused now and then by up to 3 and up to 5 intervals (the follower timeout is 3).
        (0.05, 3 * HB, 30 * HB),
        (0.02, 5 * HB, 30 * HB),
    ],
)
def test_elections_converge_in_few_terms_under_scheduling_delay(
    late: float, late_max_ms: int, max_ms: int
) -> None:
    ms, terms = _failovers(failover_config(late=late, late_max_ms=late_max_ms))
    # A kill is skipped when a pause deposed the leader just before it; nearly all happen.
    assert len(ms) >= SEEDS * KILLS * 0.9
    # Before issue 14 (DLedger's TERM_NOT_READY + revote, 2000 ms vote wait, no tie-break) the
    # starved cases took up to 17 and 18 terms and 280 and 300 intervals over these seeds, and
    # in 39 of 500 seeds of the second no leader at all within 60 s.
    assert max(terms) <= 3, sorted(terms)[-10:]
    assert _quantile(terms, 99) <= 2
    assert max(ms) <= max_ms, sorted(ms)[-10:]


@pytest.mark.timeout(200)
def test_the_safety_seeds_pass_with_scheduling_delay() -> None:
    """The usual fault plans (crashes, torn writes, partitions, loss), plus nodes running late by
    up to 5 heartbeat intervals (here 2000 ms ones): every safety invariant holds and the group
    converges once faults stop."""
    failed = []
    for seed in range(120):
        cfg = SimConfig.for_seed(random.Random(seed))
        cfg = replace(cfg, late=0.02, late_max_ms=5 * cfg.raft.heart_beat_time_interval_ms)
        controller = seed % 4 == 0
        result = Simulation(seed, config=cfg, controller=controller).run()
        if not result.ok:
            failed.append(f"seed {seed}: {result.error} ({reproduce_command(seed, None)})")
    assert not failed, "\n".join(failed)


def test_a_failover_seed_with_scheduling_delay_replays_exactly() -> None:
    cfg = failover_config(late=0.3, late_max_ms=HB)
    first = run_failover_seed(3, cfg, kills=2, trace=True)
    second = run_failover_seed(3, cfg, kills=2, trace=True)
    assert first.ok and first.trace == second.trace  # replays exactly
    assert any("runs late until" in line for line in first.trace)
