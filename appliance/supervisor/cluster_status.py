"""Clustered JetStream as `appliance status` shows it: worker 0 adds a `jetstream` summary (its meta
leader and the replicated groups it holds without quorum, lagging or under-replicated; see
appliance/jetstream/raft_report.py) to the status file it writes next to the control socket every
second (route_status.py); the supervisor reads it for a status answer. Pure apart from reading it.

Levels (exit codes of `appliance status`):
  - down (2): JetStream is clustered and no meta leader is known: the JetStream API of the whole
    cluster is unavailable from this server (nats-server's /healthz answers 503 then);
  - degraded (1): a replicated stream or consumer held here has no quorum, a replica lags (behind
    the leader's commit, or not heard from), or a group has fewer replicas than configured;
  - ok: none of these (also when not clustered, or JetStream does not run).
"""

from __future__ import annotations

import json
from pathlib import Path

from appliance.supervisor.health import HealthLevel

JsonObject = dict[str, object]


def read_cluster_status(path: Path) -> JsonObject | None:
    """The `jetstream` summary of the status file; None when there is none (not clustered JetStream)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    summary = document.get("jetstream") if isinstance(document, dict) else None
    return summary if isinstance(summary, dict) and summary.get("clustered") else None


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def assess_cluster(summary: JsonObject | None) -> tuple[HealthLevel, list[str]]:
    """(level, reasons) of the summary (module docstring)."""
    if summary is None:
        return "ok", []
    reasons: list[str] = []
    level: HealthLevel = "ok"
    if not summary.get("meta_leader"):
        level = "down"
        reasons.append("JetStream meta group has no leader: the JetStream API is unavailable "
                       "(fewer than a quorum of the cluster's servers reachable?)")
    no_quorum = _strings(summary.get("no_quorum"))
    no_quorum = [group for group in no_quorum if not group.startswith("meta ")] if level == "down" else no_quorum
    reasons += [f"no quorum: {group}" for group in no_quorum]
    reasons += [f"lagging: {group}" for group in _strings(summary.get("lagging"))]
    reasons += [f"under-replicated: {group}" for group in _strings(summary.get("under_replicated"))]
    if level == "ok" and reasons:
        level = "degraded"
    return level, reasons
