"""Proof that the simulator finds bugs: each planted bug must be caught within a fixed seed budget.

The budgets are the seeds needed today plus slack; the table in the issue note lists them.
"""

import pytest

from appliance.testing.sim.simulator import SimOptions, bugs_from_names, run_seed

# bug -> (seeds to try, ticks per seed)
BUDGETS = {
    "ack_before_persist": (10, 500),
    "vote_not_persisted": (60, 500),
    "commit_previous_term": (60, 500),
    "no_term_check_on_append": (30, 500),
    "snapshot_drops_entry": (10, 500),
    "no_log_matching_check": (20, 500),
}


def first_failing_seed(bug: str, seeds: int, ticks: int) -> tuple[int, str] | None:
    for seed in range(seeds):
        result = run_seed(SimOptions(seed=seed, ticks=ticks, bugs=bugs_from_names([bug])))
        if not result.ok:
            return seed, result.failure
    return None


@pytest.mark.sim
@pytest.mark.parametrize("bug", sorted(BUDGETS))
def test_the_simulator_catches_the_planted_bug(bug: str) -> None:
    seeds, ticks = BUDGETS[bug]
    found = first_failing_seed(bug, seeds, ticks)
    assert found is not None, f"planted bug {bug} survived {seeds} seeds of {ticks} ticks"
