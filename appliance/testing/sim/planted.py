"""How each planted bug is hunted: the fault mix and run length used by the tests and the table.

Every bug is hunted with the default swarm of all faults, except commit_previous_term: Figure 8
needs a chain of leader crashes at the wrong moments, which the crash-heavy mix finds far sooner.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.raft.types import BUG_NAMES
from appliance.testing.sim.profile import FAULT_NAMES
from appliance.testing.sim.simulator import SimOptions, SimResult, bugs_from_names, run_seed

CRASH_HEAVY = frozenset({"leader-kill", "crash", "reboot", "reorder", "drop", "torn", "clog"})


@dataclass(frozen=True, slots=True)
class Hunt:
    faults: frozenset[str] = frozenset(FAULT_NAMES)
    ticks: int = 500


HUNTS = {name: Hunt() for name in BUG_NAMES} | {"commit_previous_term": Hunt(faults=CRASH_HEAVY)}


def hunt(bug: str, *, seeds: int) -> SimResult | None:
    """The first failing run among seeds 0..seeds-1 with `bug` planted, or None."""
    plan = HUNTS[bug]
    for seed in range(seeds):
        result = run_seed(SimOptions(seed=seed, ticks=plan.ticks, faults=plan.faults, bugs=bugs_from_names([bug])))
        if not result.ok:
            return result
    return None
