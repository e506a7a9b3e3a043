"""Overall health of the local server from the supervisor's view of its workers. Pure.

- ok: every worker is serving and heartbeating;
- degraded: the server serves, but some worker is starting, restarting, late, or draining
  (lame duck), or the restart budget is being spent, or a JetStream stream holds damaged data
  it does not serve until repaired (or could not be opened);
- down: no worker serves clients (all starting, dead or stopping), or the supervisor is stopping.

`appliance status` exits 0, 1, 2 for ok, degraded, down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from appliance.supervisor.status_table import RowSnapshot, WorkerState

HealthLevel = Literal["ok", "degraded", "down"]
EXIT_CODES: dict[HealthLevel, int] = {"ok": 0, "degraded": 1, "down": 2}


@dataclass(frozen=True, slots=True)
class Health:
    level: HealthLevel
    reasons: list[str]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.level]


def assess_health(
    rows: list[RowSnapshot], *, now_mono_s: float, heartbeat_late_s: float, stopping: bool = False
) -> Health:
    reasons: list[str] = []
    serving = 0
    for row in rows:
        age_s = now_mono_s - row.heartbeat_mono_s
        if row.state == WorkerState.READY:
            if age_s > heartbeat_late_s:
                reasons.append(f"worker {row.index} (pid {row.pid}) heartbeat late: {age_s:.1f}s ago")
            else:
                serving += 1
        elif row.state == WorkerState.LAME_DUCK:
            serving += 1
            reasons.append(f"worker {row.index} (pid {row.pid}) in lame duck mode")
        elif row.state == WorkerState.STARTING:
            reasons.append(f"worker {row.index} (pid {row.pid}) starting")
        elif row.state == WorkerState.BACKOFF:
            reasons.append(f"worker {row.index} restarting (restarts: {row.restarts})")
        elif row.state in (WorkerState.STOPPING, WorkerState.STOPPED):
            reasons.append(f"worker {row.index} {row.state.name.lower()}")
        else:
            assert row.state == WorkerState.EMPTY
            reasons.append(f"worker {row.index} not started")
    damaged = sum(row.damaged_assets for row in rows if row.state in (WorkerState.READY, WorkerState.LAME_DUCK))
    if damaged:
        reasons.append(f"{damaged} JetStream stream(s)/consumer(s) with unrepaired damage (see /healthz?details=true)")
    if stopping:
        return Health("down", ["supervisor is stopping", *reasons])
    if not rows or serving == 0:
        return Health("down", ["no worker is serving clients", *reasons])
    return Health("degraded" if reasons else "ok", reasons)


def worse(health: Health, level: HealthLevel, reasons: list[str]) -> Health:
    """`health` with more reasons; its level raised to `level` when that is worse."""
    order = ("ok", "degraded", "down")
    top = level if order.index(level) > order.index(health.level) else health.level
    return Health(top, [*health.reasons, *reasons])
