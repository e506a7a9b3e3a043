"""Seeded whole-cluster simulations: faults on with checkers after every step, then heal + liveness.

A failure prints the `appliance sim` command that replays it exactly.
"""

import os
import random

import pytest

from appliance.testing.sim.simulator import SimOptions, run_seed

SEEDS_FIXED = list(range(12))
TICKS = 600


def seeds_random(count: int) -> list[int]:
    """A few fresh seeds per run (APPLIANCE_SIM_SEED pins them); printed on failure like any other."""
    base = int(os.environ.get("APPLIANCE_SIM_SEED", random.SystemRandom().randrange(1 << 30)))
    return [base + i for i in range(count)]


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS_FIXED + seeds_random(2))
def test_cluster_survives_faults(seed: int) -> None:
    result = run_seed(SimOptions(seed=seed, ticks=TICKS))
    assert result.ok, f"{result.summary()}\nreproduce with: {result.command}"
    assert result.commits > 0


@pytest.mark.sim
def test_a_calm_run_commits_every_acknowledged_proposal_on_every_node() -> None:
    result = run_seed(SimOptions(seed=1, ticks=300, faults=frozenset()))
    assert result.ok, result.summary()
    assert result.crashes == 0
    assert result.accepted > 0
    assert result.acked == result.accepted + 2  # + one liveness probe per group


@pytest.mark.sim
def test_five_nodes_and_one_node() -> None:
    for nodes in (5, 1):
        result = run_seed(SimOptions(seed=3, ticks=300, nodes=nodes))
        assert result.ok, f"{result.summary()}\nreproduce with: {result.command}"


@pytest.mark.sim
def test_a_seed_replays_exactly() -> None:
    first = run_seed(SimOptions(seed=42, ticks=300))
    second = run_seed(SimOptions(seed=42, ticks=300))
    assert first == second
