"""Controller mode of the simulator: the controller state machine on every Raft node, driven by
simulated brokers, with the controller invariants checked after every apply."""

from __future__ import annotations

import pytest

from rmq_ha.controller.events import ElectMasterEvent, decode_events
from rmq_ha.sim import Simulation, run_seed
from rmq_ha.sim.runner import CONTROLLER_BUGS, main, reproduce_command, run_seeds
from rmq_ha.sim.statemachine import ControllerSimStateMachine


def test_controller_seeds_pass_and_exercise_the_controller() -> None:
    elections = alters = masters = 0
    for seed in range(40):
        sim = Simulation(seed, controller=True)
        result = sim.run()
        assert result.ok, f"{result.error}\n  replay: {reproduce_command(seed, None, True)}"
        sm = sim.nodes["n0"].sm
        assert isinstance(sm, ControllerSimStateMachine)
        events = [e for _, data in sm.items for e in decode_events(data)]
        elections += sum(isinstance(e, ElectMasterEvent) for e in events)
        alters += sum(type(e).__name__ == "AlterSyncStateSetEvent" for e in events)
        masters += sum(bs.master_broker_id is not None for bs in sm.state.broker_sets.values())
        # Every node converged on the same controller state.
        snapshots = {n.sm.state.snapshot() for n in sim.nodes.values()}  # type: ignore[union-attr]
        assert len(snapshots) == 1
    assert elections > 40 and alters > 40 and masters > 20


def test_a_controller_seed_replays_exactly() -> None:
    first = run_seed(11, trace=True, controller=True)
    second = run_seed(11, trace=True, controller=True)
    assert first.ok and second.ok
    assert first.trace == second.trace
    assert first.proposed == second.proposed > 0


@pytest.mark.parametrize(
    ("bug", "symptom"),
    [
        # A re-election that keeps the old masterEpoch: two masters in one epoch.
        ("second-master", "master changed within epoch"),
        # Unclean election while the checker believes it is off.
        ("unclean-election", "elected from outside the SyncStateSet"),
    ],
)
def test_checker_catches_a_broken_controller(bug: str, symptom: str) -> None:
    results = run_seeds(range(30), jobs=1, bug=bug)
    errors = [r.error or "" for r in results if not r.ok]
    assert errors, f"the controller invariants missed the {bug} bug in 30 seeds"
    assert all(e.startswith("InvariantViolation") for e in errors), errors
    assert any(symptom in e for e in errors), errors


def test_controller_failure_prints_its_reproduction(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(CONTROLLER_BUGS) == {"second-master", "unclean-election"}
    assert main(["--seeds", "3", "--jobs", "1", "--bug", "second-master"]) == 1
    out = capsys.readouterr().out
    assert "seed 0 FAILED: InvariantViolation" in out
    assert "reproduce: python -m rmq_ha.sim --seed 0 --bug second-master --trace" in out
    assert main(["--seed", "0", "--bug", "second-master"]) == 1
    assert main(["--seed", "0", "--controller"]) == 0
    assert main(["--seeds", "4", "--jobs", "1", "--controller"]) == 0
    assert "controller mode: 4 seeds" in capsys.readouterr().out
    assert reproduce_command(5, None, True) == "python -m rmq_ha.sim --seed 5 --controller --trace"
