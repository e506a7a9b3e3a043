"""The routes as `appliance status` shows them: worker 0 (which holds the routes) writes their state to a
small JSON file next to the control socket every second; the supervisor reads it for a status answer.

A configured route that is not up for longer than ROUTE_DOWN_DEGRADED_S (twice nats-server's 1 s route
reconnect interval) makes the server degraded (exit 1), and so does a report older than
ROUTE_REPORT_STALE_S when routes are configured (the worker holding them is wedged or gone).
"""

from __future__ import annotations

import json
from pathlib import Path

JsonObject = dict[str, object]

ROUTE_DOWN_DEGRADED_S = 2.0
ROUTE_REPORT_STALE_S = 5.0


def routes_status_path(control_path: Path) -> Path:
    return control_path.with_name(control_path.name + ".routes.json")


def account_gate_path(control_path: Path) -> Path:
    """The file the workers count accounts' connections in (server/account_gate.py)."""
    return control_path.with_name(control_path.name + ".accounts")


def read_route_status(path: Path, *, now_wall_s: float, clustered: bool) -> tuple[list[JsonObject], list[str]]:
    """(rows for the status answer, reasons the server is degraded)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return [], ["routes configured but their state was never reported"] if clustered else []
    rows: list[JsonObject] = []
    reasons: list[str] = []
    written = float(document.get("written_wall", 0.0))
    if clustered and now_wall_s - written > ROUTE_REPORT_STALE_S:
        reasons.append(f"route state not reported for {now_wall_s - written:.0f}s")
    for raw in document.get("routes", []):
        row = dict(raw)
        since = float(row.pop("since_wall", now_wall_s))
        row["for_s"] = round(max(0.0, now_wall_s - since), 1)
        rows.append(row)
        if row.get("configured") and row.get("state") in ("down", "refused") and row["for_s"] > ROUTE_DOWN_DEGRADED_S:
            reason = f": {row['reason']}" if row.get("reason") else ""
            reasons.append(f"route {row['url']} {row['state']} for {row['for_s']:g}s{reason}")
    return rows, reasons
