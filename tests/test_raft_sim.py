"""The deterministic simulator (rmq_ha.sim): thousands of seeded fault schedules keep the Raft
core safe, a seed replays exactly, and the checker does fail when the core is broken."""

from __future__ import annotations

import os
import time

import pytest

from rmq_ha.raft.log import RaftLog
from rmq_ha.raft.messages import Entry
from rmq_ha.sim import Checker, Violation, run_seed
from rmq_ha.sim.runner import BUGS, main, reproduce_command, run_seeds, summarize

SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "2000"))
#: Every 4th seed runs in controller mode (controller state machine, simulated brokers).
CONTROLLER_EVERY = 4


@pytest.mark.timeout(300)
def test_seeds_keep_raft_safe() -> None:
    jobs = min(2, os.cpu_count() or 1)
    started = time.perf_counter()
    results = run_seeds(range(SEEDS), jobs, controller_every=CONTROLLER_EVERY)
    print(summarize(results, time.perf_counter() - started, jobs))
    failed = [
        f"seed {r.seed}: {r.error}\n  replay: {reproduce_command(r.seed, None, r.controller)}"
        for r in results
        if not r.ok
    ]
    assert not failed, "\n".join(failed)
    # The faults the checker is meant to survive did happen.
    assert sum(r.crashes for r in results) > SEEDS
    assert sum(r.torn_writes for r in results) > 0
    assert sum(r.truncated for r in results) > 0
    assert sum(r.snapshots for r in results) > 0
    assert sum(r.acked for r in results) > SEEDS
    controller = [r for r in results if r.controller]
    assert len(controller) == len(range(0, SEEDS, CONTROLLER_EVERY))
    assert sum(r.proposed for r in controller) > 10 * len(controller)


def test_a_seed_replays_exactly() -> None:
    first = run_seed(7, trace=True)
    second = run_seed(7, trace=True)
    assert first.ok and second.ok
    assert first.trace == second.trace
    assert (first.events, first.sim_ms, first.committed) == (
        second.events,
        second.sim_ms,
        second.committed,
    )


@pytest.mark.parametrize(
    ("bug", "symptom"),
    [
        # A node that votes twice in a term: caught at the voter.
        ("vote-twice", "voted for"),
        # A vote kept in memory only: memory and disk disagree once the batch is durable.
        ("skip-vote-persist", "holds HardState"),
        # Votes ignoring the ledger: a stale leader is elected and overwrites committed entries.
        ("ignore-ledger-in-vote", ""),
    ],
)
def test_checker_catches_a_broken_core(bug: str, symptom: str) -> None:
    results = run_seeds(range(30), jobs=1, bug=bug)
    errors = [r.error or "" for r in results if not r.ok]
    assert errors, f"the checker missed the {bug} bug in 30 seeds"
    assert all(symptom in e for e in errors), errors


def test_failing_seed_prints_its_reproduction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "3", "--jobs", "1", "--bug", "vote-twice"]) == 1
    out = capsys.readouterr().out
    assert "seed 0 FAILED: Violation" in out
    assert "reproduce: python -m rmq_ha.sim --seed 0 --bug vote-twice --trace" in out
    assert main(["--seed", "0", "--bug", "vote-twice"]) == 1
    assert main(["--seed", "0"]) == 0


def test_bugs_are_listed() -> None:
    assert set(BUGS) == {"vote-twice", "skip-vote-persist", "ignore-ledger-in-vote"}


class TestChecker:
    def test_two_leaders_in_one_term(self) -> None:
        c = Checker()
        c.leader("n0", 3, RaftLog())
        c.leader("n0", 3, RaftLog())  # the same node again is fine
        with pytest.raises(Violation, match="two leaders in term 3"):
            c.leader("n1", 3, RaftLog())

    def test_leader_missing_a_committed_entry(self) -> None:
        c = Checker()
        log = RaftLog(None, [Entry(0, 1, b"a"), Entry(1, 1, b"b")])
        c.commit("n0", 1, log, -1, 1)
        with pytest.raises(Violation, match="but 1 was committed in term 1"):
            c.leader("n2", 2, RaftLog(None, [Entry(0, 1, b"a")]))
        with pytest.raises(Violation, match="committed was term 1"):
            c.leader("n2", 2, RaftLog(None, [Entry(0, 1, b"a"), Entry(1, 2, b"x")]))
        # A late leader of the same (or an older) term need not hold it.
        c.leader("n2", 1, RaftLog(None, [Entry(0, 1, b"a")]))

    def test_log_matching(self) -> None:
        c = Checker()
        c.stored_entry("n0", Entry(5, 2, b"a"), 1)
        c.stored_entry("n1", Entry(5, 2, b"a"), 1)
        with pytest.raises(Violation, match="different entry"):
            c.stored_entry("n2", Entry(5, 2, b"b"), 1)
        with pytest.raises(Violation, match="log matching"):
            c.stored_entry("n2", Entry(5, 2, b"a"), 2)

    def test_state_machine_safety_and_durability(self) -> None:
        c = Checker()
        c.apply("n0", 3, b"x")
        with pytest.raises(Violation, match="applies"):
            c.apply("n1", 3, b"y")
        c.acknowledge("n0", 3, b"x")
        with pytest.raises(Violation, match="is lost"):
            c.final_state("n1", [(3, b"z")])
