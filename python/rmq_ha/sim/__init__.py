"""Deterministic simulation of the Raft core: `python -m rmq_ha.sim --seeds N`."""

from rmq_ha.sim.checker import Checker as Checker
from rmq_ha.sim.checker import Violation as Violation
from rmq_ha.sim.world import SimConfig as SimConfig
from rmq_ha.sim.world import SimResult as SimResult
from rmq_ha.sim.world import Simulation as Simulation
from rmq_ha.sim.world import run_seed as run_seed
