"""Election and replication rules as scripts (seed 003's cases), after etcd raft's
interaction tests. Each file in tests/sim/scenarios/ is a list of commands with the exact output
expected; the language is described in rmq_ha.sim.script. After an intended behaviour change,
rewrite the expectations with RAFT_SCRIPT_REWRITE=1 and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmq_ha.sim.script import run_script

SCENARIOS = Path(__file__).parent / "sim" / "scenarios"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.txt")), ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    text = path.read_text()
    actual = run_script(text)
    if os.environ.get("RAFT_SCRIPT_REWRITE") == "1":
        path.write_text(actual)
        return
    assert actual == text


def test_there_are_scenarios() -> None:
    assert len(list(SCENARIOS.glob("*.txt"))) >= 10
